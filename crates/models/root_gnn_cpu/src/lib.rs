//! The Edge_Network's MLP blocks run as one fused kernel each on the CPU backend (burn-flex).
//!
//! Run operation by operation, an MLP block (`[Linear → ReLU] × 4 → LayerNorm` over every edge)
//! makes a full pass over memory per operation; burn-flex's `ops::fused::mlp_forward` (a
//! vendored patch) takes blocks of rows through the whole chain while they are in cache.
//! [`FusedMlp`] is the [`MlpKernel`] that calls it, with the same function as
//! [`gnn4c_root_gnn::OpByOp`] (same operations, same order; checked in `tests/it`). The network
//! carries it (`EdgeNetwork<B, FusedMlp>`): on `Flex` (inference, validation) every block is
//! fused; on `Autodiff<Flex>` (training) a block is fused only in a frozen-backbone run, where
//! no backbone value needs a gradient, and otherwise runs Burn's operations, which autodiff
//! differentiates.
//!
//! The one model-side crate that names a backend: only `cli` and `benchmarks` depend on it, and
//! they choose when to use it. Knows no files. Start at [`FusedMlp`].

use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::prelude::*;
use burn::tensor::TensorPrimitive;
use burn_flex::FlexTensor;
use burn_flex::ops::fused::{MlpLayer, MlpTerm, mlp_forward};
use gnn4c_root_gnn::{ConcatPart, LAYER_NORM_EPSILON, Mlp, MlpKernel};

/// Runs each MLP block as one burn-flex kernel (see the crate docs). Falls back to Burn's
/// operations for tensors the kernel does not take (other than f32).
#[derive(Debug, Clone, Copy, Default)]
pub struct FusedMlp {
    /// The network is trained with a frozen backbone (the caller's promise): during training,
    /// blocks whose parameters need no gradient (and that apply no dropout) run fused, on the
    /// values alone. Without it every block runs Burn's operations under autodiff.
    pub frozen_backbone: bool,
}

fn float<const D: usize>(t: Tensor<Flex, D>) -> FlexTensor {
    t.into_primitive().tensor()
}

/// An input of the block's first layer, as the kernel takes it.
enum Input {
    /// `x · W_rows`, computed in the kernel's row blocks.
    Product(FlexTensor, FlexTensor),
    /// Rows of `y`, gathered by an index or taken in order.
    Rows(FlexTensor, Option<FlexTensor>),
}

/// The block over `inputs` (the first layer's terms, in order), or `None` when the kernel does
/// not take these tensors.
fn fused(mlp: &Mlp<Flex>, inputs: &[Input]) -> Option<Tensor<Flex, 2>> {
    let first_bias = mlp.layers[0].bias.as_ref().map(|b| float(b.val()));
    let rest: Vec<(FlexTensor, Option<FlexTensor>)> = mlp.layers[1..]
        .iter()
        .map(|l| {
            (
                float(l.weight.val()),
                l.bias.as_ref().map(|b| float(b.val())),
            )
        })
        .collect();
    let gamma = float(mlp.norm.gamma.val());
    let beta = mlp.norm.beta.as_ref().map(|b| float(b.val()));
    let terms: Vec<MlpTerm<'_>> = inputs
        .iter()
        .map(|i| match i {
            Input::Product(x, weight) => MlpTerm::Product { x, weight },
            Input::Rows(y, index) => MlpTerm::Rows {
                y,
                index: index.as_ref(),
            },
        })
        .collect();
    let layers: Vec<MlpLayer<'_>> = rest
        .iter()
        .map(|(weight, bias)| MlpLayer {
            weight,
            bias: bias.as_ref(),
        })
        .collect();
    let out = mlp_forward(
        &terms,
        first_bias.as_ref(),
        &layers,
        &gamma,
        beta.as_ref(),
        LAYER_NORM_EPSILON,
    )?;
    Some(Tensor::from_primitive(TensorPrimitive::Float(out)))
}

impl MlpKernel<Flex> for FusedMlp {
    fn forward(&self, mlp: &Mlp<Flex>, x: Tensor<Flex, 2>) -> Tensor<Flex, 2> {
        let inputs = [Input::Product(
            float(x.clone()),
            float(mlp.layers[0].weight.val()),
        )];
        fused(mlp, &inputs).unwrap_or_else(|| mlp.forward(x)) // [n, d_out]
    }

    fn forward_concat(&self, mlp: &Mlp<Flex>, parts: Vec<ConcatPart<Flex>>) -> Tensor<Flex, 2> {
        let mut offset = 0;
        let inputs: Vec<Input> = parts
            .iter()
            .map(|(x, index)| {
                let [_, d_k] = x.dims();
                let w = mlp.first_weight_rows(offset..offset + d_k); // [d_k, d_first]
                offset += d_k;
                match index {
                    // Gathered parts: the product on the (fewer) source rows, as OpByOp does.
                    Some(i) => {
                        Input::Rows(float(x.clone().matmul(w)), Some(i.clone().into_primitive()))
                    }
                    None => Input::Product(float(x.clone()), float(w)),
                }
            })
            .collect();
        fused(mlp, &inputs).unwrap_or_else(|| mlp.forward_concat(parts)) // [n, d_out]
    }
}

type Ad = Autodiff<Flex>;

impl FusedMlp {
    /// Whether `mlp` may run fused under autodiff: a frozen-backbone run (so its inputs carry
    /// no gradient either), no parameter of its own needs one, and no dropout is active.
    fn fuses_in_training(&self, mlp: &Mlp<Ad>) -> bool {
        let mut needs_grad = mlp.norm.gamma.val().is_require_grad()
            || mlp
                .norm
                .beta
                .as_ref()
                .is_some_and(|b| b.val().is_require_grad());
        for l in &mlp.layers {
            needs_grad |= l.weight.val().is_require_grad()
                || l.bias.as_ref().is_some_and(|b| b.val().is_require_grad());
        }
        self.frozen_backbone && !needs_grad && mlp.dropout.prob == 0.0
    }
}

impl MlpKernel<Ad> for FusedMlp {
    fn forward(&self, mlp: &Mlp<Ad>, x: Tensor<Ad, 2>) -> Tensor<Ad, 2> {
        if !self.fuses_in_training(mlp) {
            return mlp.forward(x);
        }
        // Nothing here needs a gradient: the values alone, then an untracked tensor.
        Tensor::from_inner(MlpKernel::<Flex>::forward(self, &mlp.valid(), x.inner())) // [n, d_out]
    }

    fn forward_concat(&self, mlp: &Mlp<Ad>, parts: Vec<ConcatPart<Ad>>) -> Tensor<Ad, 2> {
        if !self.fuses_in_training(mlp) {
            return mlp.forward_concat(parts);
        }
        let parts = parts
            .into_iter()
            .map(|(x, index)| (x.inner(), index.map(Tensor::inner)))
            .collect();
        Tensor::from_inner(MlpKernel::<Flex>::forward_concat(self, &mlp.valid(), parts)) // [n, d_out]
    }
}
