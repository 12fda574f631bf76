//! Training (contract §8–§9): the loop, Adam with exponential decay, early stopping, checkpoints and
//! exact resume, and the data loader.
//!
//! Generic over model and batch traits: it never names a graph or a model type, and knows nothing of
//! ROOT or Parquet. Today: the epoch sampler ([`epoch_batches`]: seeded shuffle per epoch,
//! `drop_last`), the background [`Loader`] (worker threads, bounded prefetch, deterministic
//! order), the learning-rate decay ([`ExponentialLr`]) and early stopping ([`EarlyStopping`]).
//! The loop and checkpoints come with issue 6.

mod loader;
mod sampler;
mod schedule;

pub use loader::Loader;
pub use sampler::{SamplerConfig, epoch_batches};
pub use schedule::{EarlyStopping, ExponentialLr, Verdict};
