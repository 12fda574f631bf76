//! The contract's optimiser (§8: Adam, β 0.9 and 0.999, ε 1e-8, no weight decay) with its
//! per-parameter step as a backend's kernel.
//!
//! The state is Burn's own `AdamState`, so the optimiser's record — what a checkpoint stores —
//! is the one Burn's `Adam` writes and reads. [`BurnAdam`] steps with Burn's `Adam` itself (its
//! tensor operations one at a time: any backend); a backend may bring a kernel that runs the
//! same arithmetic in one pass (burn-flex's, in the run layer).

use burn::module::AutodiffModule;
use burn::optim::LearningRate;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamConfig, AdamState, SimpleOptimizer};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

/// β₁ of the contract's Adam.
pub const ADAM_BETA_1: f32 = 0.9;
/// β₂ of the contract's Adam.
pub const ADAM_BETA_2: f32 = 0.999;
/// ε of the contract's Adam (Burn's default is 1e-5).
pub const ADAM_EPSILON: f32 = 1e-8;

/// How a backend runs one Adam step of one parameter: from its gradient and its state (none
/// on its first step), the updated parameter and state, as Burn's `Adam` computes them with
/// [`ADAM_BETA_1`], [`ADAM_BETA_2`] and [`ADAM_EPSILON`].
pub trait AdamKernel<B: Backend>: Clone + Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The step at learning rate `lr`.
    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        param: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<AdamState<B, D>>,
    ) -> (Tensor<B, D>, AdamState<B, D>);
}

/// Burn's `Adam` with the contract's constants: its tensor operations one at a time.
#[derive(Debug, Clone, Copy, Default)]
pub struct BurnAdam;

impl<B: Backend> AdamKernel<B> for BurnAdam {
    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        param: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<AdamState<B, D>>,
    ) -> (Tensor<B, D>, AdamState<B, D>) {
        let adam = AdamConfig::new()
            .with_beta_1(ADAM_BETA_1)
            .with_beta_2(ADAM_BETA_2)
            .with_epsilon(ADAM_EPSILON)
            .build();
        let (param, state) = SimpleOptimizer::step(&adam, lr, param, grad, state);
        (param, state.expect("Adam always returns its state"))
    }
}

/// The optimiser with kernel `K`, as Burn's simple optimiser (its record is `Adam`'s).
#[derive(Debug, Clone, Copy)]
pub struct ContractAdam<K>(pub K);

impl<B: Backend, K: AdamKernel<B>> SimpleOptimizer<B> for ContractAdam<K> {
    type State<const D: usize> = AdamState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<AdamState<B, D>>,
    ) -> (Tensor<B, D>, Option<AdamState<B, D>>) {
        let (param, state) = self.0.step(lr, tensor, grad, state);
        (param, Some(state))
    }

    fn to_device<const D: usize>(mut state: AdamState<B, D>, device: &B::Device) -> Self::State<D> {
        state.momentum = state.momentum.to_device(device);
        state
    }
}

/// The optimiser over module `M`'s parameters.
pub type Optimiser<K, M, B> = OptimizerAdaptor<ContractAdam<K>, M, B>;

/// The contract's Adam over `M`'s parameters, stepping with `kernel`.
pub fn optimiser<B, M, K>(kernel: K) -> Optimiser<K, M, B>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    K: AdamKernel<B::InnerBackend>,
{
    OptimizerAdaptor::from(ContractAdam(kernel))
}
