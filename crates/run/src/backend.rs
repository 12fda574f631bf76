//! The kernels each backend runs the models with: on the CPU, the Edge_Network's fused MLP
//! blocks, the ROOT-Transformer's fused attention, LayerNorms and linear layers, and Adam's
//! step in one pass.

use burn::backend::Flex;
use burn::optim::LearningRate;
use burn::optim::{AdamState, AdaptiveMomentumState};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, TensorData, TensorPrimitive};
use burn_flex::FlexTensor;
use gnn4c_kernels::{AdamStep, adam_first_moments, adam_update};
use gnn4c_root_gnn::{EdgeNetwork, MlpKernel};
use gnn4c_root_gnn_cpu::FusedMlp;
use gnn4c_root_transformer::TransformerKernel;
use gnn4c_root_transformer_cpu::FusedTransformer;
use gnn4c_training::{ADAM_BETA_1, ADAM_BETA_2, ADAM_EPSILON, AdamKernel, BurnAdam};

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

    /// How the optimiser steps a parameter here.
    type Adam: AdamKernel<Self::InnerBackend>;

    /// The optimiser's kernel for a training run.
    fn adam_kernel() -> Self::Adam;
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

    type Adam = FlexAdam;

    fn adam_kernel() -> FlexAdam {
        FlexAdam
    }
}

/// burn-flex's Adam step: both moments and the parameter updated in place in one pass
/// (`gnn4c_kernels::adam_update`), bitwise what Burn's `Adam` computes in about thirteen tensor
/// operations; a tensor that is not f32 steps with [`BurnAdam`].
#[derive(Debug, Clone, Copy, Default)]
pub struct FlexAdam;

impl AdamKernel<Flex> for FlexAdam {
    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        param: Tensor<Flex, D>,
        grad: Tensor<Flex, D>,
        state: Option<AdamState<Flex, D>>,
    ) -> (Tensor<Flex, D>, AdamState<Flex, D>) {
        let f32s = param.dtype() == DType::F32
            && grad.dtype() == DType::F32
            && state.as_ref().is_none_or(|s| {
                let m = &s.momentum;
                m.moment_1.dtype() == DType::F32
                    && m.moment_2.dtype() == DType::F32
                    && m.max_moment_2.is_none()
            });
        if !f32s {
            return BurnAdam.step(lr, param, grad, state);
        }
        let time = state.as_ref().map_or(1, |s| s.momentum.time + 1);
        let step = AdamStep {
            beta_1: ADAM_BETA_1,
            beta_2: ADAM_BETA_2,
            epsilon: ADAM_EPSILON,
            lr: lr as f32,
            time,
        };
        let shape = param.shape();
        let grad = dense(grad.into_primitive().tensor());
        let g = grad.storage::<f32>();
        let (mut m1, mut m2) = match state {
            Some(s) => (
                dense(s.momentum.moment_1.into_primitive().tensor()),
                dense(s.momentum.moment_2.into_primitive().tensor()),
            ),
            None => {
                let (m1, m2) = adam_first_moments(g, &step);
                let dims = shape.to_vec();
                (
                    FlexTensor::from_data(TensorData::new(m1, dims.clone())),
                    FlexTensor::from_data(TensorData::new(m2, dims)),
                )
            }
        };
        let mut p = dense(param.into_primitive().tensor());
        adam_update(
            p.storage_mut(),
            g,
            m1.storage_mut(),
            m2.storage_mut(),
            &step,
            time == 1,
        );
        let float = |t| Tensor::from_primitive(TensorPrimitive::Float(t));
        let momentum = AdaptiveMomentumState::new(time, float(m1), float(m2));
        (float(p), AdamState::new(momentum))
    }
}

/// `t` with its values alone in its storage, in order (a copy only when they are not).
fn dense(t: FlexTensor) -> FlexTensor {
    let len = t.storage::<f32>().len();
    match t.layout().contiguous_offsets() {
        Some((0, end)) if end == len => t,
        _ => t.to_contiguous(),
    }
}

/// The GPU backends run Burn's operations (its CubeCL kernels): the backend-generic code path.
#[cfg(any(feature = "cuda", feature = "wgpu"))]
macro_rules! burns_operations {
    ($backend:ty) => {
        impl InferenceBackend for $backend {
            type Kernel = gnn4c_root_gnn::OpByOp;

            fn inference_kernel() -> gnn4c_root_gnn::OpByOp {
                gnn4c_root_gnn::OpByOp
            }

            type Transformer = gnn4c_root_transformer::OpByOp;

            fn transformer_kernel() -> gnn4c_root_transformer::OpByOp {
                gnn4c_root_transformer::OpByOp
            }
        }

        impl TrainingBackend for burn::backend::Autodiff<$backend> {
            type Kernel = gnn4c_root_gnn::OpByOp;

            fn training_kernel() -> gnn4c_root_gnn::OpByOp {
                gnn4c_root_gnn::OpByOp
            }

            type Transformer = gnn4c_root_transformer::OpByOp;

            fn transformer_training_kernel() -> gnn4c_root_transformer::OpByOp {
                gnn4c_root_transformer::OpByOp
            }

            type Adam = BurnAdam;

            fn adam_kernel() -> BurnAdam {
                BurnAdam
            }
        }
    };
}

// CUDA (burn-cuda; fusion there is its own).
#[cfg(feature = "cuda")]
burns_operations!(burn::backend::Cuda);

// Burn's wgpu backend: the same CubeCL kernels as CUDA, on any Vulkan driver.
#[cfg(feature = "wgpu")]
burns_operations!(burn::backend::Wgpu);

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(values: &[f32], shape: [usize; 2]) -> Tensor<Flex, 2> {
        Tensor::from_data(TensorData::new(values.to_vec(), shape), &Default::default())
    }

    fn bits(t: &Tensor<Flex, 2>) -> Vec<u32> {
        let v = t.to_data().to_vec::<f32>().expect("f32");
        v.into_iter().map(f32::to_bits).collect()
    }

    #[test]
    fn flex_adam_is_bitwise_burns_adam() {
        let (rows, cols) = (70, 300);
        let seeded = |seed: u32| -> Vec<f32> {
            (0..rows * cols)
                .map(|i| {
                    ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5
                })
                .collect()
        };
        // A transposed view as the parameter: not in storage order, so the kernel copies it.
        let start = tensor(&seeded(1), [cols, rows]).transpose();
        let (mut ours, mut theirs) = (start.clone(), start);
        let (mut ours_state, mut theirs_state) = (None, None);
        for step in 0..4u32 {
            let grad = tensor(&seeded(10 + step), [rows, cols]);
            let lr = 1e-3 * f64::from(step + 1);
            let (p, s) = FlexAdam.step(lr, ours, grad.clone(), ours_state);
            let (q, t) = BurnAdam.step(lr, theirs, grad, theirs_state);
            assert_eq!(bits(&p), bits(&q), "parameter after step {step}");
            let (a, b) = (&s.momentum, &t.momentum);
            assert_eq!(a.time, b.time);
            assert_eq!(bits(&a.moment_1), bits(&b.moment_1), "m₁ after step {step}");
            assert_eq!(bits(&a.moment_2), bits(&b.moment_2), "m₂ after step {step}");
            (ours, theirs, ours_state, theirs_state) = (p, q, Some(s), Some(t));
        }
    }
}
