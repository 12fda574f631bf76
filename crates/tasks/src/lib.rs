//! Tasks (contract §6): binary, multiclass and multilabel losses, score transforms and metrics.
//!
//! Owns [`Task`], the weighted loss Σ wᵢℓᵢ / Σ|wᵢ| on device tensors ([`weighted_loss`]), the
//! negative-weight policies ([`NegativeWeights`]) and class balancing, and the host-side metrics
//! in f64 over a whole split ([`roc_auc`], [`accuracy`], [`evaluate`]) with exact tie handling.
//! Must not know models, graphs or file formats. Start at `loss.rs`.

mod loss;
mod metrics;

pub use loss::{
    ClassTotals, NegativeWeights, Task, class_balance_scales, per_event_loss, weighted_loss,
};
pub use metrics::{
    Metrics, Targets, accuracy, evaluate, metrics_from_logits, per_event_loss_host, roc_auc,
    roc_curve, scores_host, targets_of,
};
