//! A request to stop, set from outside a loop (a signal handler) and read where the loop can stop
//! cleanly: the trainer between steps, scoring between batches, a cache build between files.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::TrainingError;

/// A shared stop request; clones share it. Never set unless someone requests a stop.
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// A flag nobody has set.
    pub fn new() -> StopFlag {
        StopFlag::default()
    }

    /// A flag over `flag` (what a signal handler sets).
    pub fn from_shared(flag: Arc<AtomicBool>) -> StopFlag {
        StopFlag(flag)
    }

    /// Requests the stop.
    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether a stop was requested.
    pub fn is_requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// [`TrainingError::StopRequested`] once a stop was requested.
    pub fn check(&self) -> Result<(), TrainingError> {
        if self.is_requested() {
            return Err(TrainingError::StopRequested);
        }
        Ok(())
    }
}
