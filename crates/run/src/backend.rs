//! The MLP kernel each backend runs the network with: on the CPU, fused MLP blocks.

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use gnn4c_root_gnn::{EdgeNetwork, MlpKernel};
use gnn4c_root_gnn_cpu::FusedMlp;

/// A backend the tool runs inference on, and how it runs the network's MLP blocks there.
pub trait InferenceBackend: Backend {
    /// The kernel for inference (and for validation during training).
    type Kernel: MlpKernel<Self> + Clone + Copy + Send + Sync + std::fmt::Debug + 'static;

    /// The kernel to score with.
    fn inference_kernel() -> Self::Kernel;

    /// `model` ready for inference (the same function, run as fast as this backend can).
    fn inference_model<K>(model: EdgeNetwork<Self, K>) -> EdgeNetwork<Self, Self::Kernel> {
        model.with_kernel(Self::inference_kernel())
    }
}

/// A backend the tool trains on: its kernel also runs the inference-mode model of validation.
pub trait TrainingBackend: AutodiffBackend {
    /// The kernel during training.
    type Kernel: MlpKernel<Self>
        + MlpKernel<Self::InnerBackend>
        + Clone
        + Copy
        + Send
        + Sync
        + std::fmt::Debug
        + 'static;

    /// The kernel for a training run.
    fn training_kernel() -> Self::Kernel;
}

/// burn-flex: each MLP block as one kernel over blocks of rows (gnn4c-root-gnn-cpu; the same
/// values as Burn's operations one at a time, measured in docs/performance.md).
impl InferenceBackend for burn::backend::Flex {
    type Kernel = FusedMlp;

    fn inference_kernel() -> FusedMlp {
        FusedMlp
    }
}

/// Training on burn-flex: each block one tracked operation, forward and backward fused (the
/// values alone where nothing needs a gradient, as in a frozen backbone).
impl TrainingBackend for burn::backend::Autodiff<burn::backend::Flex> {
    type Kernel = FusedMlp;

    fn training_kernel() -> FusedMlp {
        FusedMlp
    }
}

/// CUDA: Burn's operations (fusion there is burn-cuda's).
#[cfg(feature = "cuda")]
impl InferenceBackend for burn::backend::Cuda {
    type Kernel = gnn4c_root_gnn::OpByOp;

    fn inference_kernel() -> gnn4c_root_gnn::OpByOp {
        gnn4c_root_gnn::OpByOp
    }
}

#[cfg(feature = "cuda")]
impl TrainingBackend for burn::backend::Autodiff<burn::backend::Cuda> {
    type Kernel = gnn4c_root_gnn::OpByOp;

    fn training_kernel() -> gnn4c_root_gnn::OpByOp {
        gnn4c_root_gnn::OpByOp
    }
}
