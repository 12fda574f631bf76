//! Training (contract §8–§9): the loop, Adam with exponential decay, early stopping, checkpoints
//! and exact resume, and the data loader.
//!
//! Generic over `gnn4c_family`'s two traits (`Classifier` for models, `EventSource` for data):
//! it never names a graph or a model type, and knows nothing of ROOT or Parquet. Start at
//! `trainer.rs` ([`fit`]); `checkpoint.rs` holds the file format, `stream.rs` an epoch's order,
//! rank shares and shuffle buffer, `loader.rs` the producer and worker threads, `schedule.rs`
//! the lr decay and early stopping, `progress.rs` the progress bars, `sync.rs` what keeps MPI
//! ranks in step (the collectives themselves are `gnn4c_distributed`'s).

mod adam;
mod checkpoint;
mod error;
mod loader;
mod progress;
mod schedule;
mod stream;
mod sync;
mod trainer;

pub use adam::{
    ADAM_BETA_1, ADAM_BETA_2, ADAM_EPSILON, AdamKernel, BurnAdam, ContractAdam, Optimiser,
    optimiser,
};
pub use checkpoint::{
    CHECKPOINT_FORMAT, Checkpoint, CheckpointState, EpochPosition, ParamShape, number_params,
    param_shapes, read_checkpoint, save_checkpoint,
};
pub use error::TrainingError;
pub use loader::Loader;
pub use progress::{ProgressBar, progress_bar, progress_wanted};
pub use schedule::{EarlyStopping, ExponentialLr, Verdict};
pub use stream::{Pass, RankPlan, Segment, plan, stream};
pub use trainer::{
    EpochRecord, FitOptions, FitReport, MetricsRecord, Predictions, RunFiles, Scoring, TrainConfig,
    fit, predict, predict_batches,
};
