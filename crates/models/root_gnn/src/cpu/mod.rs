//! The Edge_Network's MLP blocks as one operation each, through a Burn backend extension.
//!
//! Run operation by operation, an MLP block (`[Linear → ReLU] × 4 → LayerNorm` over every edge)
//! makes a full pass over memory per operation; the project's kernels (`gnn4c-kernels`) take
//! blocks of rows through the whole chain while they are in cache. This module plugs them into
//! the unmodified registry Burn through its public extension points:
//! - [`MlpBlockBackend`], a backend extension trait: an MLP block as one operation. Implemented
//!   for the CPU backend (`Flex`: the tensors' storage handed to `gnn4c_kernels::mlp_forward`)
//!   and for `Autodiff<B, C>` over any [`MlpBlockGradBackend`] and any checkpoint strategy: one
//!   tracked operation whose forward keeps every layer's output (`mlp_forward_saving`) and
//!   whose backward is `mlp_backward`, or the values alone where nothing needs a gradient (a
//!   frozen backbone).
//! - [`FusedMlp`], the model's [`MlpKernel`] for every such backend; it falls back to Burn's
//!   operations ([`crate::OpByOp`]'s) for tensors the kernels do not take (other than
//!   f32) and for training blocks with dropout. Same function as `OpByOp`: values within 1e-6,
//!   gradients within 1e-5 (`tests/it`).
//!
//! The family runs with it on the CPU backend (`gnn4c_family::Kernels`, in `family.rs`). No
//! `unsafe` here. Knows no files. Start at [`FusedMlp`].

mod autodiff;
mod flex;

use burn::prelude::*;
use burn::tensor::TensorPrimitive;
use burn::tensor::ops::{FloatTensor, IntTensor};

use crate::{ConcatPart, LAYER_NORM_EPSILON, Mlp, MlpKernel};

/// A backend that runs an MLP block (`[Linear → ReLU] × L → LayerNorm`) as one operation.
pub trait MlpBlockBackend: Backend {
    /// The block's output `[n, d_out]`, or `None` when this backend does not run these tensors
    /// as one operation (the caller then runs Burn's operations).
    fn mlp_block(block: BlockTensors<Self>) -> Option<FloatTensor<Self>>;
}

/// What the autodiff implementation of [`MlpBlockBackend`] needs of the backend it wraps: the
/// forward keeping what the backward needs, and the backward.
pub trait MlpBlockGradBackend: MlpBlockBackend {
    /// What the forward keeps for the backward.
    type Saved: Clone + Send + Sync + std::fmt::Debug + 'static;

    /// [`MlpBlockBackend::mlp_block`], also returning what the backward needs.
    fn mlp_block_saving(block: &BlockTensors<Self>) -> Option<(FloatTensor<Self>, Self::Saved)>;

    /// Every parameter's gradient and, where `want_inputs[t]`, term `t`'s input's, for the
    /// gradient `grad` of the output of the block [`MlpBlockGradBackend::mlp_block_saving`]
    /// ran (`saved`).
    fn mlp_block_backward(
        saved: &Self::Saved,
        grad: FloatTensor<Self>,
        want_inputs: &[bool],
    ) -> BlockGrads<Self>;
}

/// One term of the first layer's pre-activation (the terms are summed in their order).
#[derive(Debug, Clone)]
pub enum TermTensors<B: Backend> {
    /// `x [n, d_k] · weight [d_k, d_first]`.
    Product {
        /// The input rows.
        x: FloatTensor<B>,
        /// The first layer's weight rows that multiply them.
        weight: FloatTensor<B>,
    },
    /// Rows of `y [n_src, d_first]`: row `index[r]` for output row `r`, or row `r`.
    Rows {
        /// The rows.
        y: FloatTensor<B>,
        /// Which row each output row takes.
        index: Option<IntTensor<B>>,
    },
}

/// An MLP block's inputs and parameters, as a backend's primitives.
#[derive(Debug, Clone)]
pub struct BlockTensors<B: Backend> {
    /// The first layer's terms.
    pub terms: Vec<TermTensors<B>>,
    /// The first layer's bias.
    pub first_bias: Option<FloatTensor<B>>,
    /// The layers after the first: `(weight [d_in, d_out], bias [d_out])`.
    pub layers: Vec<(FloatTensor<B>, Option<FloatTensor<B>>)>,
    /// LayerNorm's γ.
    pub gamma: FloatTensor<B>,
    /// LayerNorm's β.
    pub beta: Option<FloatTensor<B>>,
    /// LayerNorm's ε.
    pub epsilon: f64,
}

/// A first-layer term's gradients: `(d input, d weight)` of a product (the input's if asked
/// for); `(d y, None)` of rows (if asked for).
pub type TermGradTensors<B> = (Option<FloatTensor<B>>, Option<FloatTensor<B>>);

/// The gradients of [`MlpBlockGradBackend::mlp_block_backward`], shaped as their tensors.
#[derive(Debug)]
pub struct BlockGrads<B: Backend> {
    /// Per term, in order.
    pub terms: Vec<TermGradTensors<B>>,
    /// The first layer's bias.
    pub first_bias: FloatTensor<B>,
    /// Per further layer: `(d weight, d bias)`.
    pub layers: Vec<(FloatTensor<B>, FloatTensor<B>)>,
    /// LayerNorm's γ.
    pub gamma: FloatTensor<B>,
    /// LayerNorm's β.
    pub beta: FloatTensor<B>,
}

/// Which gradient a float tensor of a block receives.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// The input of term `t` (`x` of a product, `y` of rows).
    TermInput(usize),
    /// The weight rows of product term `t`.
    TermWeight(usize),
    /// The first layer's bias.
    FirstBias,
    /// Further layer `k`'s weight.
    Weight(usize),
    /// Further layer `k`'s bias.
    Bias(usize),
    /// LayerNorm's γ.
    Gamma,
    /// LayerNorm's β.
    Beta,
}

impl<B: Backend> BlockTensors<B> {
    /// The same block on another backend: every float tensor through `float`, told which
    /// gradient it would receive, and every index through `int`.
    fn map<O: Backend>(
        self,
        mut float: impl FnMut(FloatTensor<B>, Slot) -> FloatTensor<O>,
        mut int: impl FnMut(IntTensor<B>) -> IntTensor<O>,
    ) -> BlockTensors<O> {
        let terms = self
            .terms
            .into_iter()
            .enumerate()
            .map(|(t, term)| match term {
                TermTensors::Product { x, weight } => TermTensors::Product {
                    x: float(x, Slot::TermInput(t)),
                    weight: float(weight, Slot::TermWeight(t)),
                },
                TermTensors::Rows { y, index } => TermTensors::Rows {
                    y: float(y, Slot::TermInput(t)),
                    index: index.map(&mut int),
                },
            })
            .collect();
        let first_bias = self.first_bias.map(|b| float(b, Slot::FirstBias));
        let layers = self
            .layers
            .into_iter()
            .enumerate()
            .map(|(k, (w, b))| {
                let w = float(w, Slot::Weight(k));
                (w, b.map(|b| float(b, Slot::Bias(k))))
            })
            .collect();
        BlockTensors {
            terms,
            first_bias,
            layers,
            gamma: float(self.gamma, Slot::Gamma),
            beta: self.beta.map(|b| float(b, Slot::Beta)),
            epsilon: self.epsilon,
        }
    }
}

/// Runs each MLP block as one operation of the backend ([`MlpBlockBackend`]), in inference and
/// in training (see the crate docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct FusedMlp;

/// An input of the block's first layer.
enum Part<B: Backend> {
    /// `x · w`, computed in the kernel's row blocks.
    Product(Tensor<B, 2>, Tensor<B, 2>),
    /// Rows of `y`, gathered by an index or taken in order.
    Rows(Tensor<B, 2>, Option<Tensor<B, 1, Int>>),
}

/// The first layer's inputs for [`Mlp::forward_concat`]'s `parts`: a gathered part is its
/// product on the (fewer) source rows, then gathered, as [`crate::OpByOp`] does; the
/// others are products with their rows of the first weight.
fn concat_parts<B: Backend>(mlp: &Mlp<B>, parts: &[ConcatPart<B>]) -> Vec<Part<B>> {
    let mut offset = 0;
    parts
        .iter()
        .map(|(x, index)| {
            let [_, d_k] = x.dims();
            let w = mlp.first_weight_rows(offset..offset + d_k); // [d_k, d_first]
            offset += d_k;
            match index {
                Some(i) => Part::Rows(x.clone().matmul(w), Some(i.clone())),
                None => Part::Product(x.clone(), w),
            }
        })
        .collect()
}

/// `mlp` over the first-layer `parts` as the backend's primitives.
fn block_tensors<B: Backend>(mlp: &Mlp<B>, parts: Vec<Part<B>>) -> BlockTensors<B> {
    let float = |t: Tensor<B, 2>| t.into_primitive().tensor();
    let vector = |t: Tensor<B, 1>| t.into_primitive().tensor();
    BlockTensors {
        terms: parts
            .into_iter()
            .map(|part| match part {
                Part::Product(x, w) => TermTensors::Product {
                    x: float(x),
                    weight: float(w),
                },
                Part::Rows(y, index) => TermTensors::Rows {
                    y: float(y),
                    index: index.map(Tensor::into_primitive),
                },
            })
            .collect(),
        first_bias: mlp.layers[0].bias.as_ref().map(|b| vector(b.val())),
        layers: mlp.layers[1..]
            .iter()
            .map(|l| {
                let bias = l.bias.as_ref().map(|b| vector(b.val()));
                (float(l.weight.val()), bias)
            })
            .collect(),
        gamma: vector(mlp.norm.gamma.val()),
        beta: mlp.norm.beta.as_ref().map(|b| vector(b.val())),
        epsilon: LAYER_NORM_EPSILON,
    }
}

/// The block as one operation, or `None` where Burn's operations must run it: dropout while
/// training (the kernels have none), or tensors the backend's kernel does not take.
fn fused<B: MlpBlockBackend>(mlp: &Mlp<B>, parts: Vec<Part<B>>) -> Option<Tensor<B, 2>> {
    let device = mlp.norm.gamma.device();
    if mlp.dropout.prob != 0.0 && B::ad_enabled(&device) {
        return None;
    }
    let out = B::mlp_block(block_tensors(mlp, parts))?;
    Some(Tensor::from_primitive(TensorPrimitive::Float(out)))
}

impl<B: MlpBlockBackend> MlpKernel<B> for FusedMlp {
    fn forward(&self, mlp: &Mlp<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let parts = vec![Part::Product(x.clone(), mlp.layers[0].weight.val())];
        fused(mlp, parts).unwrap_or_else(|| mlp.forward(x)) // [n, d_out]
    }

    fn forward_concat(&self, mlp: &Mlp<B>, parts: Vec<ConcatPart<B>>) -> Tensor<B, 2> {
        let fused_parts = concat_parts(mlp, &parts);
        fused(mlp, fused_parts).unwrap_or_else(|| mlp.forward_concat(parts)) // [n, d_out]
    }
}
