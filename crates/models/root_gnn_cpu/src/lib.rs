//! The Edge_Network's MLP blocks run as one fused kernel each on the CPU backend (burn-flex).
//!
//! Run operation by operation, an MLP block (`[Linear → ReLU] × 4 → LayerNorm` over every edge)
//! makes a full pass over memory per operation; burn-flex's `ops::fused` (a vendored patch)
//! takes blocks of rows through the whole chain while they are in cache. [`FusedMlp`] is the
//! [`MlpKernel`] that calls it, with the same function as [`gnn4c_root_gnn::OpByOp`] (same
//! operations, same order: the same values; checked in `tests/it`). The network carries it
//! (`EdgeNetwork<B, FusedMlp>`): on `Flex` (inference, validation) every block runs
//! `mlp_forward`; on `Autodiff<Flex>` (training) every block is one tracked operation whose
//! forward keeps each layer's output (`mlp_forward_saving`) and whose backward is
//! `mlp_backward` (gradients within 1e-5 of Burn's, summed per block of rows), or the values
//! alone where nothing needs a gradient (a frozen backbone). Blocks with dropout run Burn's
//! operations.
//!
//! The one model-side crate that names a backend: only `cli` and `benchmarks` depend on it, and
//! they choose when to use it. Knows no files. Start at [`FusedMlp`].

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use burn::tensor::TensorPrimitive;
use burn::tensor::ops::FloatTensor;
use burn_flex::FlexTensor;
use burn_flex::ops::fused::{
    MlpGrads, MlpLayer, MlpTerm, mlp_backward, mlp_forward, mlp_forward_saving,
};
use gnn4c_root_gnn::{ConcatPart, LAYER_NORM_EPSILON, Mlp, MlpKernel};

/// Runs each MLP block as one burn-flex kernel, in inference and in training (see the crate
/// docs). Falls back to Burn's operations for tensors the kernel does not take (other than f32)
/// and for blocks with dropout.
#[derive(Debug, Clone, Copy, Default)]
pub struct FusedMlp;

/// An input of the block's first layer, on either backend.
enum Part<B: Backend> {
    /// `x · w`, computed in the kernel's row blocks.
    Product(Tensor<B, 2>, Tensor<B, 2>),
    /// Rows of `y`, gathered by an index or taken in order.
    Rows(Tensor<B, 2>, Option<Tensor<B, 1, Int>>),
}

/// The first layer's inputs for [`Mlp::forward_concat`]'s `parts`: a gathered part is its
/// product on the (fewer) source rows, then gathered, as [`gnn4c_root_gnn::OpByOp`] does; the
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

/// What a parent of the tracked operation is, i.e. which gradient it receives.
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

/// A first-layer term as burn-flex's kernels take it.
#[derive(Debug, Clone)]
enum Term {
    Product {
        x: FlexTensor,
        w: FlexTensor,
    },
    Rows {
        y: FlexTensor,
        index: Option<FlexTensor>,
    },
}

impl Term {
    fn as_term(&self) -> MlpTerm<'_> {
        match self {
            Term::Product { x, w } => MlpTerm::Product { x, weight: w },
            Term::Rows { y, index } => MlpTerm::Rows {
                y,
                index: index.as_ref(),
            },
        }
    }
}

/// An MLP block's tensors as burn-flex's kernels take them.
#[derive(Debug, Clone)]
struct Block {
    terms: Vec<Term>,
    first_bias: Option<FlexTensor>,
    /// The layers after the first.
    weights: Vec<FlexTensor>,
    biases: Vec<Option<FlexTensor>>,
    gamma: FlexTensor,
    beta: Option<FlexTensor>,
}

impl Block {
    /// `mlp` with its first layer's `parts`; every float tensor goes through `take`, told
    /// which gradient it would receive.
    fn of<B: Backend<IntTensorPrimitive = FlexTensor>>(
        mlp: &Mlp<B>,
        parts: Vec<Part<B>>,
        mut take: impl FnMut(FloatTensor<B>, Slot) -> FlexTensor,
    ) -> Self {
        let mut take = |t: TensorPrimitive<B>, slot| take(t.tensor(), slot);
        let terms = parts
            .into_iter()
            .enumerate()
            .map(|(t, part)| match part {
                Part::Product(x, w) => Term::Product {
                    x: take(x.into_primitive(), Slot::TermInput(t)),
                    w: take(w.into_primitive(), Slot::TermWeight(t)),
                },
                Part::Rows(y, index) => Term::Rows {
                    y: take(y.into_primitive(), Slot::TermInput(t)),
                    index: index.map(Tensor::into_primitive),
                },
            })
            .collect();
        let first_bias = mlp.layers[0]
            .bias
            .as_ref()
            .map(|b| take(b.val().into_primitive(), Slot::FirstBias));
        let mut weights = Vec::new();
        let mut biases = Vec::new();
        for (k, l) in mlp.layers[1..].iter().enumerate() {
            weights.push(take(l.weight.val().into_primitive(), Slot::Weight(k)));
            biases.push(
                l.bias
                    .as_ref()
                    .map(|b| take(b.val().into_primitive(), Slot::Bias(k))),
            );
        }
        let gamma = take(mlp.norm.gamma.val().into_primitive(), Slot::Gamma);
        let beta = mlp
            .norm
            .beta
            .as_ref()
            .map(|b| take(b.val().into_primitive(), Slot::Beta));
        Block {
            terms,
            first_bias,
            weights,
            biases,
            gamma,
            beta,
        }
    }

    /// `kernel` (`mlp_forward` or `mlp_forward_saving`) over the block.
    fn forward<R>(
        &self,
        kernel: impl FnOnce(
            &[MlpTerm<'_>],
            Option<&FlexTensor>,
            &[MlpLayer<'_>],
            &FlexTensor,
            Option<&FlexTensor>,
            f64,
        ) -> R,
    ) -> R {
        let terms: Vec<MlpTerm<'_>> = self.terms.iter().map(Term::as_term).collect();
        let layers: Vec<MlpLayer<'_>> = self
            .weights
            .iter()
            .zip(&self.biases)
            .map(|(weight, bias)| MlpLayer {
                weight,
                bias: bias.as_ref(),
            })
            .collect();
        kernel(
            &terms,
            self.first_bias.as_ref(),
            &layers,
            &self.gamma,
            self.beta.as_ref(),
            LAYER_NORM_EPSILON,
        )
    }

    /// `mlp_backward` over the block, given what `mlp_forward_saving` kept.
    fn backward(
        &self,
        saved: &[FlexTensor],
        grad: &FlexTensor,
        want_inputs: &[bool],
    ) -> Option<MlpGrads> {
        let terms: Vec<MlpTerm<'_>> = self.terms.iter().map(Term::as_term).collect();
        let layers: Vec<MlpLayer<'_>> = self
            .weights
            .iter()
            .map(|weight| MlpLayer { weight, bias: None })
            .collect();
        mlp_backward(
            &terms,
            &layers,
            &self.gamma,
            LAYER_NORM_EPSILON,
            saved,
            grad,
            want_inputs,
        )
    }
}

/// The block over `parts` on burn-flex, or `None` when the kernel does not take these tensors.
fn fused(mlp: &Mlp<Flex>, parts: Vec<Part<Flex>>) -> Option<Tensor<Flex, 2>> {
    let out = Block::of(mlp, parts, |t, _| t).forward(mlp_forward)?;
    Some(Tensor::from_primitive(TensorPrimitive::Float(out)))
}

impl MlpKernel<Flex> for FusedMlp {
    fn forward(&self, mlp: &Mlp<Flex>, x: Tensor<Flex, 2>) -> Tensor<Flex, 2> {
        let parts = vec![Part::Product(x.clone(), mlp.layers[0].weight.val())];
        fused(mlp, parts).unwrap_or_else(|| mlp.forward(x)) // [n, d_out]
    }

    fn forward_concat(&self, mlp: &Mlp<Flex>, parts: Vec<ConcatPart<Flex>>) -> Tensor<Flex, 2> {
        let fused_parts = concat_parts(mlp, &parts);
        fused(mlp, fused_parts).unwrap_or_else(|| mlp.forward_concat(parts)) // [n, d_out]
    }
}

type Ad = Autodiff<Flex>;

/// At most this many tracked inputs per block (terms' inputs and weights, biases, γ, β): the
/// contract's blocks need 6 to 15; deeper blocks run Burn's operations.
const MAX_PARENTS: usize = 32;

/// What the block's backward needs: the forward's inputs and every layer's output.
#[derive(Debug, Clone)]
struct BlockState {
    block: Block,
    saved: Vec<FlexTensor>,
    slots: Vec<Slot>,
}

/// The whole MLP block as one tracked operation: forward by `mlp_forward_saving`, backward by
/// `mlp_backward` (burn-flex patch 8).
#[derive(Debug)]
struct FusedBlock;

impl Backward<Flex, MAX_PARENTS> for FusedBlock {
    type State = BlockState;

    fn backward(
        self,
        ops: Ops<Self::State, MAX_PARENTS>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let grad = grads.consume::<Flex>(&ops.node);
        let state = ops.state;
        let want_inputs: Vec<bool> = (0..state.block.terms.len())
            .map(|t| {
                state
                    .slots
                    .iter()
                    .zip(&ops.parents)
                    .any(|(s, p)| p.is_some() && matches!(s, Slot::TermInput(u) if *u == t))
            })
            .collect();
        let mut g = state
            .block
            .backward(&state.saved, &grad, &want_inputs)
            .expect("f32 tensors: checked by the forward");
        for (slot, parent) in state.slots.iter().zip(&ops.parents) {
            let Some(node) = parent else { continue };
            let value = match *slot {
                Slot::TermInput(t) => g.terms[t].0.take(),
                Slot::TermWeight(t) => g.terms[t].1.take(),
                Slot::FirstBias => Some(g.first_bias.clone()),
                Slot::Weight(k) => Some(g.layers[k].0.clone()),
                Slot::Bias(k) => Some(g.layers[k].1.clone()),
                Slot::Gamma => Some(g.gamma.clone()),
                Slot::Beta => Some(g.beta.clone()),
            };
            grads.register::<Flex>(
                node.id,
                value.expect("every tracked input's gradient is computed"),
            );
        }
    }
}

/// The block over `parts` as one tracked operation, or `None` when the kernel does not take
/// these tensors (not f32, too many parents).
fn tracked(mlp: &Mlp<Ad>, parts: Vec<Part<Ad>>) -> Option<Tensor<Ad, 2>> {
    let mut nodes = Vec::new();
    let mut slots = Vec::new();
    // The parents' tensors stay alive until the operation is registered: a tensor's reference
    // count is what tells autodiff's graph cleaning (run after any backward, from any thread)
    // that its node is still wanted; an intermediate (a slice of the first weight, a gathered
    // product) dropped before `finish` could be cleaned away with its gradient path.
    let mut alive = Vec::new();
    let block = Block::of(mlp, parts, |t: FloatTensor<Ad>, slot| {
        nodes.push(t.node.clone());
        slots.push(slot);
        let value = t.primitive.clone();
        alive.push(t);
        value
    });
    if nodes.len() > MAX_PARENTS {
        return None;
    }
    // Unused parent places: an untracked tensor (no gradient flows there).
    let pad = Tensor::<Ad, 1>::zeros([1], &Default::default())
        .into_primitive()
        .tensor()
        .node;
    nodes.resize(MAX_PARENTS, pad);
    let nodes: [_; MAX_PARENTS] = nodes.try_into().expect("padded to MAX_PARENTS");
    let output = match FusedBlock
        .prepare::<NoCheckpointing>(nodes)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let (out, saved) = block.forward(mlp_forward_saving)?;
            prep.finish(
                BlockState {
                    block,
                    saved,
                    slots,
                },
                out,
            )
        }
        // Nothing needs a gradient (a frozen backbone): the values alone.
        OpsKind::UnTracked(prep) => prep.finish(block.forward(mlp_forward)?),
    };
    drop(alive); // registered: the operation's step now holds its parents
    Some(Tensor::from_primitive(TensorPrimitive::Float(output)))
}

impl MlpKernel<Ad> for FusedMlp {
    fn forward(&self, mlp: &Mlp<Ad>, x: Tensor<Ad, 2>) -> Tensor<Ad, 2> {
        if mlp.dropout.prob != 0.0 {
            return mlp.forward(x); // dropout: Burn's operations
        }
        let parts = vec![Part::Product(x.clone(), mlp.layers[0].weight.val())];
        tracked(mlp, parts).unwrap_or_else(|| mlp.forward(x)) // [n, d_out]
    }

    fn forward_concat(&self, mlp: &Mlp<Ad>, parts: Vec<ConcatPart<Ad>>) -> Tensor<Ad, 2> {
        if mlp.dropout.prob != 0.0 {
            return mlp.forward_concat(parts);
        }
        let fused_parts = concat_parts(mlp, &parts);
        tracked(mlp, fused_parts).unwrap_or_else(|| mlp.forward_concat(parts)) // [n, d_out]
    }
}
