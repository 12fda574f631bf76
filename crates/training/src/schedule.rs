//! Learning-rate decay and early stopping (contract §8): plain state, saved in checkpoints.

use serde::{Deserialize, Serialize};

/// lr × gamma after every epoch: lr(e) = lr₀ · gammaᵉ.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ExponentialLr {
    /// Initial learning rate (contract default 1e-4).
    pub initial: f64,
    /// Factor per epoch (contract default 0.99).
    pub gamma: f64,
}

impl Default for ExponentialLr {
    fn default() -> Self {
        ExponentialLr {
            initial: 1e-4,
            gamma: 0.99,
        }
    }
}

impl ExponentialLr {
    /// The learning rate of epoch `epoch` (0-based), computed from the epoch alone so a resumed
    /// run uses exactly the value an uninterrupted one would.
    pub fn lr(&self, epoch: u64) -> f64 {
        self.initial * self.gamma.powi(i32::try_from(epoch).unwrap_or(i32::MAX))
    }
}

/// Early stopping on validation loss with `patience` (contract §8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EarlyStopping {
    /// Epochs without improvement tolerated (contract default 10).
    pub patience: u64,
    /// Best validation loss so far.
    pub best: Option<f64>,
    /// Epoch of the best validation loss.
    pub best_epoch: Option<u64>,
    /// Epochs since the last improvement.
    pub counter: u64,
}

/// What an epoch's validation loss means for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A new best: keep this model.
    Improved,
    /// No improvement yet, keep training.
    Continue,
    /// `patience` epochs without improvement: stop.
    Stop,
}

impl EarlyStopping {
    /// A fresh tracker.
    pub fn new(patience: u64) -> Self {
        EarlyStopping {
            patience,
            best: None,
            best_epoch: None,
            counter: 0,
        }
    }

    /// Records epoch `epoch`'s validation loss. A NaN loss never improves.
    pub fn update(&mut self, epoch: u64, val_loss: f64) -> Verdict {
        let improved = !val_loss.is_nan() && self.best.is_none_or(|b| val_loss < b);
        if improved {
            self.best = Some(val_loss);
            self.best_epoch = Some(epoch);
            self.counter = 0;
            return Verdict::Improved;
        }
        self.counter += 1;
        if self.counter >= self.patience {
            Verdict::Stop
        } else {
            Verdict::Continue
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lr_decays_per_epoch_from_the_epoch_alone() {
        let s = ExponentialLr::default();
        assert_eq!(s.lr(0), 1e-4);
        assert!((s.lr(2) - 1e-4 * 0.99 * 0.99).abs() < 1e-18);
        assert_eq!(s.lr(5), s.lr(5), "resume computes the same value");
    }

    #[test]
    fn patience_counts_epochs_without_improvement() {
        let mut es = EarlyStopping::new(2);
        assert_eq!(es.update(0, 1.0), Verdict::Improved);
        assert_eq!(es.update(1, 1.0), Verdict::Continue, "equal is not better");
        assert_eq!(es.update(2, 0.5), Verdict::Improved);
        assert_eq!(es.update(3, f64::NAN), Verdict::Continue);
        assert_eq!(es.update(4, 0.7), Verdict::Stop);
        assert_eq!((es.best, es.best_epoch), (Some(0.5), Some(2)));
        let json = serde_json::to_string(&es).expect("serialise");
        let back: EarlyStopping = serde_json::from_str(&json).expect("deserialise");
        assert_eq!(back, es, "checkpointable");
    }
}
