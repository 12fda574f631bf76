//! What the trainer asks of a model and of a dataset: two traits, no concrete types.

use burn::module::Module;
use burn::prelude::*;

use crate::error::TrainingError;

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

/// Events the trainer can stream: blocks of events read one at a time on the loader's producer
/// thread, batched on its worker threads. Nothing requires the whole dataset in memory.
pub trait Dataset: Send + Sync + 'static {
    /// One event as read from a block.
    type Event: Clone + Send + 'static;
    /// What a batch carries for the model.
    type Input: Send + 'static;

    /// Events per block, in dataset order.
    fn block_sizes(&self) -> &[usize];

    /// Number of events.
    fn len(&self) -> usize {
        self.block_sizes().iter().sum()
    }

    /// True when there are no events.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The events of `block`, in order (`block_sizes()[block]` of them).
    fn read_block(&self, block: usize) -> Result<Vec<Self::Event>, TrainingError>;

    /// Class index (−1 when not a class) and event weight of an event.
    fn target(&self, event: &Self::Event) -> (i64, f32);

    /// [`Dataset::target`] of every event of `block`; a dataset that can read targets without
    /// the rest of its events overrides it.
    fn read_targets(&self, block: usize) -> Result<Vec<(i64, f32)>, TrainingError> {
        Ok(self
            .read_block(block)?
            .iter()
            .map(|e| self.target(e))
            .collect())
    }

    /// The batch of `events`, in that order (an error names what in the data is wrong).
    fn batch(&self, events: Vec<Self::Event>) -> Result<Batch<Self::Input>, TrainingError>;
}
