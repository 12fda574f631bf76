//! The backends the tool runs on and how a registered family's model runs there: on the CPU
//! (burn-flex) with the family's own kernels (`gnn4c_family::Kernels`) and Adam's step in one
//! pass; on the GPU backends (CUDA, wgpu) with Burn's operations, the backend-generic path.

use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::optim::LearningRate;
use burn::optim::{AdamState, AdaptiveMomentumState};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, TensorData, TensorPrimitive};
use burn_flex::FlexTensor;
use gnn4c_family::{Classifier, Kernels};
use gnn4c_kernels::{AdamStep, adam_first_moments, adam_update};
use gnn4c_training::{ADAM_BETA_1, ADAM_BETA_2, ADAM_EPSILON, AdamKernel, BurnAdam};

use crate::family::Registered;

/// A backend the tool scores on.
pub trait InferenceBackend: Backend {
    /// Family `F`'s model as it scores here.
    type Scoring<F: Registered>: Classifier<Self, Input = F::Input>;

    /// `model` ready to score here (the same function, as fast as this backend runs it).
    fn for_scoring<F: Registered>(model: F::Model<Self>) -> Self::Scoring<F>;
}

/// A backend the tool trains on; its inner backend scores the validation split.
pub trait TrainingBackend: AutodiffBackend {
    /// Family `F`'s model as it trains here.
    type Trained<F: Registered>: AutodiffModule<Self, InnerModule: Classifier<Self::InnerBackend, Input = F::Input>>
        + Classifier<Self, Input = F::Input>;

    /// `model` ready to train here (the same function).
    fn for_training<F: Registered>(model: F::Model<Self>) -> Self::Trained<F>;

    /// How the optimiser steps a parameter here.
    type Adam: AdamKernel<Self::InnerBackend>;

    /// The optimiser's kernel for a training run.
    fn adam_kernel() -> Self::Adam;
}

/// burn-flex: each family's own kernels (the Edge_Network's MLP blocks, the Transformer's
/// attention, LayerNorms and linear layers; measured in docs/performance.md).
impl InferenceBackend for Flex {
    type Scoring<F: Registered> = <F as Kernels<Flex>>::CpuScoring;

    fn for_scoring<F: Registered>(model: F::Model<Flex>) -> Self::Scoring<F> {
        F::cpu_scoring(model)
    }
}

/// Training on burn-flex: each fused block one tracked operation, forward and backward fused
/// (the values alone where nothing needs a gradient, as in a frozen backbone).
impl TrainingBackend for Autodiff<Flex> {
    type Trained<F: Registered> = <F as Kernels<Flex>>::CpuTrained;

    fn for_training<F: Registered>(model: F::Model<Self>) -> Self::Trained<F> {
        F::cpu_trained(model)
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
            type Scoring<F: Registered> = <F as Kernels<Flex>>::Scoring<Self>;

            fn for_scoring<F: Registered>(model: F::Model<Self>) -> Self::Scoring<F> {
                F::scoring(model)
            }
        }

        impl TrainingBackend for Autodiff<$backend> {
            type Trained<F: Registered> = <F as Kernels<Flex>>::Trained<Self>;

            fn for_training<F: Registered>(model: F::Model<Self>) -> Self::Trained<F> {
                F::trained(model)
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
