//! The kernels each backend runs the models with: on the CPU, the Edge_Network's fused MLP
//! blocks and the ROOT-Transformer's fused attention, LayerNorms and linear layers.

use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use gnn4c_root_gnn::{EdgeNetwork, MlpKernel};
use gnn4c_root_gnn_cpu::FusedMlp;
use gnn4c_root_transformer::TransformerKernel;
use gnn4c_root_transformer_cpu::FusedTransformer;

/// A backend the tool runs inference on, and how it runs the network's MLP blocks there.
pub trait InferenceBackend: Backend {
    /// The kernel for inference (and for validation during training).
    type Kernel: MlpKernel<Self> + Clone + Copy + Send + Sync + std::fmt::Debug + 'static;

    /// The kernel to score with.
    fn inference_kernel() -> Self::Kernel;

    /// How the ROOT-Transformer runs here (inference, validation).
    type Transformer: TransformerKernel<Self>
        + Clone
        + Copy
        + Send
        + Sync
        + std::fmt::Debug
        + 'static;

    /// The ROOT-Transformer's kernel to score with.
    fn transformer_kernel() -> Self::Transformer;

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

    /// How the ROOT-Transformer trains here (and validates, on the inner backend).
    type Transformer: TransformerKernel<Self>
        + TransformerKernel<Self::InnerBackend>
        + Clone
        + Copy
        + Send
        + Sync
        + std::fmt::Debug
        + 'static;

    /// The ROOT-Transformer's kernel for a training run.
    fn transformer_training_kernel() -> Self::Transformer;
}

/// burn-flex: each MLP block as one kernel over blocks of rows (gnn4c-root-gnn-cpu), the
/// Transformer's attention, LayerNorms and linear layers one kernel each (gnn4c-root-transformer-cpu);
/// the same values as Burn's operations one at a time (measured in docs/performance.md).
impl InferenceBackend for burn::backend::Flex {
    type Kernel = FusedMlp;

    fn inference_kernel() -> FusedMlp {
        FusedMlp
    }

    type Transformer = FusedTransformer;

    fn transformer_kernel() -> FusedTransformer {
        FusedTransformer
    }
}

/// Training on burn-flex: each block one tracked operation, forward and backward fused (the
/// values alone where nothing needs a gradient, as in a frozen backbone).
impl TrainingBackend for burn::backend::Autodiff<burn::backend::Flex> {
    type Kernel = FusedMlp;

    fn training_kernel() -> FusedMlp {
        FusedMlp
    }

    type Transformer = FusedTransformer;

    fn transformer_training_kernel() -> FusedTransformer {
        FusedTransformer
    }
}

/// CUDA: Burn's operations (fusion there is burn-cuda's).
#[cfg(feature = "cuda")]
impl InferenceBackend for burn::backend::Cuda {
    type Kernel = gnn4c_root_gnn::OpByOp;

    fn inference_kernel() -> gnn4c_root_gnn::OpByOp {
        gnn4c_root_gnn::OpByOp
    }

    type Transformer = gnn4c_root_transformer::OpByOp;

    fn transformer_kernel() -> gnn4c_root_transformer::OpByOp {
        gnn4c_root_transformer::OpByOp
    }
}

#[cfg(feature = "cuda")]
impl TrainingBackend for burn::backend::Autodiff<burn::backend::Cuda> {
    type Kernel = gnn4c_root_gnn::OpByOp;

    fn training_kernel() -> gnn4c_root_gnn::OpByOp {
        gnn4c_root_gnn::OpByOp
    }

    type Transformer = gnn4c_root_transformer::OpByOp;

    fn transformer_training_kernel() -> gnn4c_root_transformer::OpByOp {
        gnn4c_root_transformer::OpByOp
    }
}
