//! What each backend runs for inference: on the CPU the network with fused MLP blocks.

use burn::prelude::*;
use gnn4c_graphs::{GraphBatch, HostBatch};
use gnn4c_root_gnn::EdgeNetwork;
use gnn4c_root_gnn_cpu::{FusedEdgeNetwork, FusedMlp};
use gnn4c_training::Classifier;

/// A backend the tool runs inference on, and the model it scores with there.
pub trait InferenceBackend: Backend {
    /// The network as scored on this backend.
    type Model: Classifier<Self, Input = HostBatch>;

    /// `model` ready for inference (the same function, run as fast as this backend can).
    fn inference_model(model: EdgeNetwork<Self>) -> Self::Model;

    /// The logits of a batch already on the device (what [`Classifier::logits`] runs after
    /// the upload; the benchmarks time the two apart).
    ///
    /// # Shapes
    /// → `[n_graphs, n_out]`.
    fn inference_forward(model: &Self::Model, batch: &GraphBatch<Self>) -> Tensor<Self, 2>;
}

/// burn-flex: each MLP block as one kernel over blocks of rows (gnn4c-root-gnn-cpu; the same
/// values as Burn's operations one at a time, measured in docs/performance.md).
impl InferenceBackend for burn::backend::Flex {
    type Model = FusedEdgeNetwork<Self>;

    fn inference_model(model: EdgeNetwork<Self>) -> Self::Model {
        FusedEdgeNetwork { model }
    }

    fn inference_forward(model: &Self::Model, batch: &GraphBatch<Self>) -> Tensor<Self, 2> {
        model.model.forward_with(batch, &FusedMlp)
    }
}

/// CUDA: the network as is (Burn's operations; fusion there is burn-cuda's).
#[cfg(feature = "cuda")]
impl InferenceBackend for burn::backend::Cuda {
    type Model = EdgeNetwork<Self>;

    fn inference_model(model: EdgeNetwork<Self>) -> Self::Model {
        model
    }

    fn inference_forward(model: &Self::Model, batch: &GraphBatch<Self>) -> Tensor<Self, 2> {
        model.forward(batch)
    }
}
