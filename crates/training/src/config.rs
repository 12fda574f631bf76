//! What a training run is given: its hyperparameters, its files and the options of [`crate::fit`].

use std::io::Write;
use std::path::PathBuf;

use gnn4c_distributed::World;
use gnn4c_tasks::{NegativeWeights, Task};
use serde::{Deserialize, Serialize};

use crate::checkpoint::Checkpoint;
use crate::error::TrainingError;
use crate::stop::StopFlag;
use crate::tensorboard::EventWriter;

/// Training hyperparameters (defaults: contract §8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Events per training batch.
    pub batch_size: usize,
    /// Events per evaluation batch (results do not depend on it; on the CPU backend 64–256 are
    /// the fastest of 64–4096, benchmark_inference).
    pub eval_batch_size: usize,
    /// Upper bound on epochs.
    pub max_epochs: u64,
    /// Initial learning rate.
    pub lr: f64,
    /// lr × gamma after every epoch.
    pub gamma: f64,
    /// Epochs without a better validation loss before stopping.
    pub patience: u64,
    /// Seed of shuffling, dropout and (in the CLI) initialisation.
    pub seed: u64,
    /// What negative event weights do in the training loss.
    pub negative_weights: NegativeWeights,
    /// Give every class the same total |w| in the training split.
    pub class_balance: bool,
    /// Loader threads preparing batches.
    pub loader_threads: usize,
    /// Ready batches per loader thread.
    pub prefetch: usize,
    /// Also report metrics of the training split, from the outputs seen during the epoch.
    pub train_metrics: bool,
    /// Training metrics come from the last this many events each rank trains on per epoch, so
    /// their memory does not grow with the data.
    pub train_metrics_events: usize,
    /// Events in each rank's shuffle buffer (the training order mixes events this far apart;
    /// memory: about 1 kB per event).
    pub shuffle_buffer: usize,
    /// Also write `last.ckpt` every this many steps inside an epoch, with the loader position, so
    /// `--resume` continues from there (off when absent).
    pub checkpoint_every_steps: Option<u64>,
    /// Write TensorBoard event files (`tensorboard/` in the run folder).
    pub tensorboard: bool,
    /// TensorBoard gets the training loss, learning rate and rate every this many steps.
    pub log_every_steps: u64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            batch_size: 512,
            eval_batch_size: 256,
            max_epochs: 20,
            lr: 1e-4,
            gamma: 0.99,
            patience: 10,
            seed: 42,
            negative_weights: NegativeWeights::Keep,
            class_balance: false,
            loader_threads: 2,
            prefetch: 2,
            train_metrics: true,
            train_metrics_events: 100_000,
            shuffle_buffer: 32_768,
            checkpoint_every_steps: None,
            tensorboard: true,
            log_every_steps: 50,
        }
    }
}

impl TrainConfig {
    /// Checks ranges.
    pub fn validate(&self) -> Result<(), TrainingError> {
        let bad = |m: String| Err(TrainingError::Config(m));
        if self.batch_size == 0 || self.eval_batch_size == 0 {
            return bad("batch_size and eval_batch_size must be at least 1".into());
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("lr must be a positive number, got {}", self.lr));
        }
        if !(self.gamma.is_finite() && self.gamma > 0.0 && self.gamma <= 1.0) {
            return bad(format!("gamma must be in (0, 1], got {}", self.gamma));
        }
        if self.patience == 0 {
            return bad("patience must be at least 1".into());
        }
        if self.shuffle_buffer == 0 {
            return bad("shuffle_buffer must be at least 1".into());
        }
        if self.checkpoint_every_steps == Some(0) {
            return bad(
                "checkpoint_every_steps must be at least 1 (leave it out to turn it off)".into(),
            );
        }
        if self.log_every_steps == 0 {
            return bad("log_every_steps must be at least 1".into());
        }
        Ok(())
    }
}

/// Where the loop writes (the CLI decides the run-folder layout).
#[derive(Debug, Clone)]
pub struct RunFiles {
    /// The checkpoint of the latest epoch.
    pub last: PathBuf,
    /// The checkpoint of the best validation loss.
    pub best: PathBuf,
    /// JSON lines, one [`EpochRecord`] per epoch.
    pub history: PathBuf,
}

/// Everything about a run but the model and the data.
pub struct FitOptions<'a> {
    /// Hyperparameters.
    pub config: TrainConfig,
    /// The task.
    pub task: Task,
    /// Output files.
    pub files: RunFiles,
    /// The resolved configuration, stored in every checkpoint.
    pub resolved_config: serde_json::Value,
    /// The training data's preprocessing fingerprint, stored in every checkpoint.
    pub fingerprint: String,
    /// Contract version, stored and checked.
    pub contract_version: String,
    /// Program and version, stored.
    pub written_by: String,
    /// Resume from this checkpoint (its model weights, optimiser state and counters).
    pub resume: Option<Checkpoint>,
    /// Draw a progress bar on standard error.
    pub progress: bool,
    /// Where the per-epoch lines go.
    pub log: &'a mut dyn Write,
    /// The ranks training together (`World::single()` for one process). Each rank trains on
    /// its share of every global batch of `config.batch_size × size` events; only rank 0
    /// writes checkpoints, the history and the log.
    pub world: &'a World,
    /// Set from outside (a signal handler) to stop the run after the step under way, with
    /// `files.last` holding the loader position.
    pub stop: StopFlag,
    /// Where rank 0 writes the run's TensorBoard scalars (`None` elsewhere, or with
    /// `config.tensorboard` off).
    pub tensorboard: Option<&'a mut EventWriter>,
}
