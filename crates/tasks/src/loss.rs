//! Tasks and their weighted losses.

use burn::prelude::*;
use burn::tensor::activation::{log_softmax, softplus};
use serde::{Deserialize, Serialize};

/// What the network predicts (contract §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum Task {
    /// One logit; BCE-with-logits; score = sigmoid.
    Binary,
    /// K logits; softmax cross-entropy; scores = softmax.
    Multiclass {
        /// Number of classes.
        n_classes: usize,
    },
    /// K logits; mean of per-label BCE-with-logits; scores = sigmoid.
    Multilabel {
        /// Number of labels.
        n_labels: usize,
    },
}

impl Task {
    /// Outputs of the network's head.
    pub fn n_out(&self) -> usize {
        match *self {
            Task::Binary => 1,
            Task::Multiclass { n_classes } => n_classes,
            Task::Multilabel { n_labels } => n_labels,
        }
    }

    /// Scores from logits: sigmoid (binary, multilabel) or softmax (multiclass).
    ///
    /// # Shapes
    /// `logits [n_graphs, n_out]` → `[n_graphs, n_out]`.
    pub fn scores<B: Backend>(&self, logits: Tensor<B, 2>) -> Tensor<B, 2> {
        match self {
            Task::Multiclass { .. } => burn::tensor::activation::softmax(logits, 1),
            Task::Binary | Task::Multilabel { .. } => burn::tensor::activation::sigmoid(logits),
        }
    }
}

/// What negative event weights do in training (contract §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NegativeWeights {
    /// Used as they are (default).
    #[default]
    Keep,
    /// Replaced by their absolute value.
    Abs,
    /// Set to 0 in training (still scored at inference).
    Drop,
}

impl NegativeWeights {
    /// The training weight for event weight `w`.
    pub fn apply(self, w: f32) -> f32 {
        match self {
            NegativeWeights::Keep => w,
            NegativeWeights::Abs => w.abs(),
            NegativeWeights::Drop => w.max(0.0),
        }
    }
}

/// Σ|w| per class over a split, added event by event, and the class-balance factors from it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassTotals {
    total: Vec<f64>,
}

impl ClassTotals {
    /// No events yet, `n_classes` classes.
    pub fn new(n_classes: usize) -> ClassTotals {
        ClassTotals {
            total: vec![0.0; n_classes],
        }
    }

    /// Adds an event of class `label` and weight `w` (a label out of range adds nothing).
    pub fn add(&mut self, label: i64, w: f32) {
        if let Some(t) = usize::try_from(label)
            .ok()
            .and_then(|l| self.total.get_mut(l))
        {
            *t += f64::from(w.abs());
        }
    }

    /// Per-class factors that give every class the same total |w| in the training split
    /// (`class_balance: true`); a class absent from the split gets factor 0 and is reported by
    /// the caller. Factors are normalised so the total |w| is unchanged.
    pub fn scales(&self) -> Vec<f64> {
        let all: f64 = self.total.iter().sum();
        let present = self.total.iter().filter(|t| **t > 0.0).count().max(1) as f64;
        self.total
            .iter()
            .map(|&t| if t > 0.0 { all / (present * t) } else { 0.0 })
            .collect()
    }
}

/// [`ClassTotals::scales`] of the events with `labels` and `weights`.
pub fn class_balance_scales(labels: &[u32], weights: &[f32], n_classes: usize) -> Vec<f64> {
    let mut totals = ClassTotals::new(n_classes);
    for (&l, &w) in labels.iter().zip(weights) {
        totals.add(i64::from(l), w);
    }
    totals.scales()
}

/// The per-event loss ℓᵢ.
///
/// # Shapes
/// `logits [n_graphs, n_out]`, `labels [n_graphs]` (class index; binary 0/1),
/// `multilabels [n_graphs, k]` (multilabel only) → `[n_graphs]`.
pub fn per_event_loss<B: Backend>(
    task: &Task,
    logits: Tensor<B, 2>,
    labels: Tensor<B, 1, Int>,
    multilabels: Option<Tensor<B, 2>>,
) -> Tensor<B, 1> {
    let [n_graphs, _] = logits.dims();
    match task {
        Task::Binary => {
            let y = labels.clamp_min(0).float().reshape([n_graphs, 1]); // [n_graphs, 1]
            bce_with_logits(logits, y).reshape([n_graphs]) // [n_graphs]
        }
        Task::Multiclass { .. } => {
            let logp = log_softmax(logits, 1); // [n_graphs, K]
            let idx = labels.clamp_min(0).reshape([n_graphs, 1]); // [n_graphs, 1]
            logp.gather(1, idx).reshape([n_graphs]).neg() // [n_graphs]
        }
        Task::Multilabel { .. } => {
            let y = multilabels.expect("multilabel targets in the batch"); // [n_graphs, k]
            bce_with_logits(logits, y).mean_dim(1).reshape([n_graphs]) // [n_graphs]
        }
    }
}

/// max(x, 0) − x·y + log(1 + e^(−|x|)), stable for any x.
fn bce_with_logits<B: Backend>(x: Tensor<B, 2>, y: Tensor<B, 2>) -> Tensor<B, 2> {
    // softplus(x) − x·y == max(x,0) − x·y + log(1 + e^−|x|)
    softplus(x.clone(), 1.0) - x * y
}

/// Σ wᵢ ℓᵢ / Σ |wᵢ| over the batch (contract §6). A batch whose Σ|w| is 0 (every weight dropped,
/// or only the padding graph) has loss 0, not NaN.
///
/// # Shapes
/// `per_event [n_graphs]`, `weights [n_graphs]` → `[1]`.
pub fn weighted_loss<B: Backend>(per_event: Tensor<B, 1>, weights: Tensor<B, 1>) -> Tensor<B, 1> {
    let norm = weights.clone().abs().sum().clamp_min(f32::MIN_POSITIVE); // [1]
    (per_event * weights).sum() / norm // [1]
}
