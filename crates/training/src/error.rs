//! What can go wrong while training, with the file or step it concerns.

use std::path::PathBuf;

/// A training error.
#[derive(Debug, thiserror::Error)]
pub enum TrainingError {
    /// Reading or writing a run file. The OS error is the error's source (printed after the
    /// path by `{:#}`), not repeated in the message.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A checkpoint that is not one, is truncated or corrupted.
    #[error("checkpoint {}: {reason}", path.display())]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A valid checkpoint that does not fit this run (contract version, model shape).
    #[error("checkpoint {} cannot be used here: {reason}", path.display())]
    Incompatible {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Reading the training or evaluation data (the message names the file).
    #[error(transparent)]
    Source(#[from] gnn4c_family::SourceError),
    /// A configuration value out of range.
    #[error("training config: {0}")]
    Config(String),
    /// The training loss became NaN or infinite.
    #[error(
        "the training loss of epoch {epoch} is {value}: lower the learning rate or check the inputs for extreme values"
    )]
    NonFiniteLoss {
        /// The epoch's number, counted from 1.
        epoch: u64,
        /// The value.
        value: f64,
    },
    /// A stop was requested (a signal): the run ended after a step, and its last checkpoint holds
    /// the position to resume from.
    #[error(
        "stopped on request in epoch {epoch} after step {step}: {} holds the position to resume from",
        checkpoint.display()
    )]
    Stopped {
        /// The epoch under way, counted from 1.
        epoch: u64,
        /// Optimiser steps taken.
        step: u64,
        /// The checkpoint to resume from.
        checkpoint: PathBuf,
    },
    /// A stop was requested (a signal) while scoring: nothing was written.
    #[error("stopped on request")]
    StopRequested,
}
