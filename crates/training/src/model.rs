//! What the trainer asks of a model and of a dataset: two traits, no concrete types.

use burn::module::Module;
use burn::prelude::*;

/// A model the trainer can fit: logits from a batch prepared on the host.
///
/// The model owns the host-to-device step, so loader threads never touch tensors and the
/// trainer never names a batch layout.
pub trait Classifier<B: Backend>: Module<B> {
    /// A batch as prepared on loader threads.
    type Input: Send + 'static;

    /// The logits of every row of `input` (real events first, then any padding rows).
    ///
    /// # Shapes
    /// → `[n_rows, n_out]`.
    fn logits(&self, input: &Self::Input, device: &B::Device) -> Tensor<B, 2>;
}

/// One batch: the model input and the training targets, row for row.
#[derive(Debug, Clone)]
pub struct Batch<X> {
    /// What the model reads.
    pub input: X,
    /// Class index per row (binary: 0/1; multilabel: unused, 0). Padding rows: 0.
    pub labels: Vec<i64>,
    /// `[n_rows, n_labels]` row-major 0/1 targets (multilabel only, else empty).
    pub multilabels: Vec<f32>,
    /// Event weight per row, as stored (negative weights kept). Padding rows: 0.
    pub weights: Vec<f32>,
    /// Real events: rows `0..n_events`; the rest is padding.
    pub n_events: usize,
}

/// Events the trainer can batch: indices `0..len()`, read from loader threads.
pub trait Dataset: Send + Sync + 'static {
    /// What a batch carries for the model.
    type Input: Send + 'static;

    /// Number of events.
    fn len(&self) -> usize;

    /// True when there are no events.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Class index and event weight of event `index` (for class balancing).
    fn target(&self, index: usize) -> (i64, f32);

    /// The batch of events `indices`, in that order.
    fn batch(&self, indices: &[usize]) -> Batch<Self::Input>;
}
