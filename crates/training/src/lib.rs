//! Training (contract §8–§9): the loop, Adam with exponential decay, early stopping, checkpoints and
//! exact resume, loader threads.
//!
//! Generic over model and batch traits: it never names a graph or a model type, and knows nothing of
//! ROOT or Parquet. Filled by issue 6.
