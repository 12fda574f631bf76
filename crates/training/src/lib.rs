//! Training (contract §8–§9): the loop, Adam with exponential decay, early stopping, checkpoints
//! and exact resume, and the data loader.
//!
//! Generic over `gnn4c_family`'s two traits (`Classifier` for models, `EventSource` for data):
//! it never names a graph or a model type, and knows nothing of ROOT or Parquet. Start at
//! `fit.rs` ([`fit`], the loop as its steps); `config.rs` holds what a run is given,
//! `history.rs` the per-epoch records, `predict.rs` scoring a split, `stop.rs` the stop request,
//! `checkpoint.rs` the checkpoint file format, `stream.rs` an epoch's order,
//! rank shares and shuffle buffer, `loader.rs` the producer and worker threads, `schedule.rs`
//! the lr decay and early stopping, `progress.rs` the progress bars, `sync.rs` what keeps MPI
//! ranks in step (the collectives themselves are `gnn4c_distributed`'s).

mod adam;
mod checkpoint;
mod config;
mod epoch_progress;
mod error;
mod fit;
mod history;
mod loader;
mod predict;
mod progress;
mod schedule;
mod stop;
mod stream;
mod sync;
mod tensorboard;

pub use adam::{
    ADAM_BETA_1, ADAM_BETA_2, ADAM_EPSILON, AdamKernel, BurnAdam, ContractAdam, Optimiser,
    optimiser,
};
pub use checkpoint::{
    CHECKPOINT_FORMAT, Checkpoint, CheckpointState, EpochPosition, ParamShape, number_params,
    param_shapes, read_checkpoint, save_checkpoint,
};
pub use config::{FitOptions, RunFiles, TrainConfig};
pub use error::TrainingError;
pub use fit::{FitReport, fit};
pub use history::{EpochRecord, MetricsRecord, fmt_metric};
pub use loader::Loader;
pub use predict::{Predictions, Scoring, predict, predict_batches};
pub use progress::{ProgressBar, progress_bar, progress_wanted};
pub use schedule::{EarlyStopping, ExponentialLr, Verdict};
pub use stop::StopFlag;
pub use stream::{Pass, RankPlan, Segment, plan, stream};
pub use tensorboard::{EventWriter, HParam};
