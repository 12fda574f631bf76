//! The metrics history: one JSON line per epoch (`history.jsonl`) and the epoch's console line.

use std::path::Path;

use gnn4c_tasks::Metrics;
use serde::{Deserialize, Serialize};

use crate::error::TrainingError;

/// One line of the metrics history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochRecord {
    /// The epoch's number, counted from 1 as on the console (the checkpoint written after it
    /// records `epoch` epochs completed).
    pub epoch: u64,
    /// Learning rate used in the epoch.
    pub lr: f64,
    /// Optimiser steps taken after the epoch.
    pub global_step: u64,
    /// Σ wℓ / Σ|w| over the epoch's batches, with the training weights.
    pub train_loss: f64,
    /// Metrics of the training split from the outputs seen during the epoch (`train_metrics`).
    pub train: Option<MetricsRecord>,
    /// Metrics of the validation split after the epoch (weights as stored, contract §6).
    pub val: MetricsRecord,
    /// The validation loss early stopping watches: weighted like the training loss (class
    /// balance factors applied, negative weights kept). Equals `val.loss` without class balance.
    pub val_objective: f64,
    /// A new best validation loss.
    pub best: bool,
    /// Training events per second (all ranks: global events over the epoch's training wall
    /// time, padding not counted).
    pub events_per_s: f64,
    /// Seconds of the training pass.
    pub train_s: f64,
    /// Of `train_s`, seconds in the gradient all-reduce (flatten, MPI, unflatten); 0 in one process.
    #[serde(default)]
    pub allreduce_s: f64,
    /// MPI ranks that trained (1 in one process).
    #[serde(default = "one")]
    pub ranks: usize,
    /// Seconds of the whole epoch (training, validation, checkpoints).
    pub epoch_s: f64,
}

fn one() -> usize {
    1
}

/// [`Metrics`] as written in the history (NaN, for an undefined AUC, is written as null).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsRecord {
    /// Weighted loss.
    pub loss: f64,
    /// Accuracy.
    pub accuracy: f64,
    /// AUC per output.
    pub auc: Vec<Option<f64>>,
    /// Weighted AUC per output.
    pub auc_weighted: Vec<Option<f64>>,
    /// Macro mean AUC.
    pub auc_macro: Option<f64>,
    /// Macro mean weighted AUC.
    pub auc_macro_weighted: Option<f64>,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

impl From<&Metrics> for MetricsRecord {
    fn from(m: &Metrics) -> Self {
        MetricsRecord {
            loss: m.loss,
            accuracy: m.accuracy,
            auc: m.auc.iter().copied().map(finite).collect(),
            auc_weighted: m.auc_weighted.iter().copied().map(finite).collect(),
            auc_macro: finite(m.auc_macro),
            auc_macro_weighted: finite(m.auc_macro_weighted),
        }
    }
}

/// The history lines of the first `completed` epochs.
pub(crate) fn read_history(path: &Path, completed: u64) -> Result<Vec<EpochRecord>, TrainingError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(TrainingError::Io {
                path: path.to_path_buf(),
                source: e,
            });
        }
    };
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        // A line cut short by a kill is dropped: the checkpoint, not the history, is the truth.
        if let Ok(r) = serde_json::from_str::<EpochRecord>(line)
            && r.epoch <= completed
        {
            out.push(r);
        }
    }
    Ok(out)
}

pub(crate) fn write_history(path: &Path, history: &[EpochRecord]) -> Result<(), TrainingError> {
    let mut text = String::new();
    for r in history {
        text.push_str(&serde_json::to_string(r).expect("history serialises"));
        text.push('\n');
    }
    gnn4c_family::write_atomic(path, text.as_bytes()).map_err(|e| TrainingError::Io {
        path: path.to_path_buf(),
        source: e,
    })
}

/// A metric as the console prints it: four decimals, or `n/a` where it is undefined (an AUC
/// with one class only).
pub fn fmt_metric(x: Option<f64>) -> String {
    x.map_or_else(|| "n/a".into(), |v| format!("{v:.4}"))
}

/// The console line of an epoch of `max_epochs` (`balanced`: the objective is the
/// class-balanced validation loss, shown beside the plain one).
pub(crate) fn epoch_line(r: &EpochRecord, max_epochs: u64, balanced: bool) -> String {
    let train_acc = r
        .train
        .as_ref()
        .map_or_else(String::new, |t| format!(" acc {:.4}", t.accuracy));
    let objective = if balanced {
        format!(" (balanced {:.4})", r.val_objective)
    } else {
        String::new()
    };
    let ranks = if r.ranks > 1 {
        format!(" ({} ranks, all-reduce {:.2} s)", r.ranks, r.allreduce_s)
    } else {
        String::new()
    };
    format!(
        "epoch {:>3}/{max_epochs}  lr {:.3e}  train loss {:.4}{train_acc}  val loss {:.4}{objective}  acc {:.4}  auc {}  {:.0} ev/s  {:.1} s{ranks}{}",
        r.epoch,
        r.lr,
        r.train_loss,
        r.val.loss,
        r.val.accuracy,
        fmt_metric(r.val.auc_macro),
        r.events_per_s,
        r.epoch_s,
        if r.best { "  *best*" } else { "" },
    )
}
