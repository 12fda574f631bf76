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
use burn_flex::FlexTensor;
use burn_flex::ops::fused::{MlpLayer, MlpTerm, mlp_backward, mlp_forward, mlp_forward_saving};
use gnn4c_root_gnn::{ConcatPart, LAYER_NORM_EPSILON, Mlp, MlpKernel};

/// Runs each MLP block as one burn-flex kernel, in inference and in training (see the crate
/// docs). Falls back to Burn's operations for tensors the kernel does not take (other than f32)
/// and for blocks with dropout.
#[derive(Debug, Clone, Copy, Default)]
pub struct FusedMlp;

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

/// Autodiff's float tensor (its value and its node in the graph).
type AdTensor = burn::tensor::ops::FloatTensor<Ad>;

/// At most this many tracked inputs per block (terms' inputs and weights, biases, γ, β): the
/// contract's blocks need 6 to 15; deeper blocks run Burn's operations.
const MAX_PARENTS: usize = 32;

/// An input of the block's first layer under autodiff (see [`Input`]).
enum AdInput {
    /// `x · w`.
    Product(Tensor<Ad, 2>, Tensor<Ad, 2>),
    /// Rows of `y`, gathered by an index.
    Rows(Tensor<Ad, 2>, Option<Tensor<Ad, 1, Int>>),
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

/// A first-layer term as the backward needs it.
#[derive(Debug, Clone)]
enum SavedTerm {
    Product {
        x: FlexTensor,
        w: FlexTensor,
    },
    Rows {
        y: FlexTensor,
        index: Option<FlexTensor>,
    },
}

impl SavedTerm {
    /// The term as burn-flex's kernels take it.
    fn as_term(&self) -> MlpTerm<'_> {
        match self {
            SavedTerm::Product { x, w } => MlpTerm::Product { x, weight: w },
            SavedTerm::Rows { y, index } => MlpTerm::Rows {
                y,
                index: index.as_ref(),
            },
        }
    }
}

/// What the block's backward needs: the forward's inputs and every layer's output.
#[derive(Debug, Clone)]
struct BlockState {
    terms: Vec<SavedTerm>,
    weights: Vec<FlexTensor>,
    gamma: FlexTensor,
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
        let has_tracked = |slot: &dyn Fn(Slot) -> bool| {
            state
                .slots
                .iter()
                .zip(&ops.parents)
                .any(|(s, p)| p.is_some() && slot(*s))
        };
        let want_inputs: Vec<bool> = (0..state.terms.len())
            .map(|t| has_tracked(&|s| matches!(s, Slot::TermInput(u) if u == t)))
            .collect();
        let terms: Vec<MlpTerm<'_>> = state.terms.iter().map(SavedTerm::as_term).collect();
        let layers: Vec<MlpLayer<'_>> = state
            .weights
            .iter()
            .map(|weight| MlpLayer { weight, bias: None })
            .collect();
        let mut g = mlp_backward(
            &terms,
            &layers,
            &state.gamma,
            LAYER_NORM_EPSILON,
            &state.saved,
            &grad,
            &want_inputs,
        )
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

fn ad<const D: usize>(t: Tensor<Ad, D>) -> AdTensor {
    t.into_primitive().tensor()
}

/// The block over `inputs` as one tracked operation, or `None` when the kernel does not take
/// these tensors (not f32, too many parents).
fn tracked(mlp: &Mlp<Ad>, inputs: Vec<AdInput>) -> Option<Tensor<Ad, 2>> {
    let mut nodes = Vec::new();
    let mut slots = Vec::new();
    let mut terms = Vec::new();
    // The parents' tensors stay alive until the operation is registered: a tensor's reference
    // count is what tells autodiff's graph cleaning (run after any backward, from any thread)
    // that its node is still wanted; an intermediate (a slice of the first weight, a gathered
    // product) dropped before `finish` could be cleaned away with its gradient path.
    let mut alive: Vec<AdTensor> = Vec::new();
    let mut parent = |t: AdTensor, slot: Slot| {
        nodes.push(t.node.clone());
        slots.push(slot);
        let value = t.primitive.clone();
        alive.push(t);
        value
    };
    for (t, input) in inputs.into_iter().enumerate() {
        terms.push(match input {
            AdInput::Product(x, w) => SavedTerm::Product {
                x: parent(ad(x), Slot::TermInput(t)),
                w: parent(ad(w), Slot::TermWeight(t)),
            },
            AdInput::Rows(y, index) => SavedTerm::Rows {
                y: parent(ad(y), Slot::TermInput(t)),
                index: index.map(Tensor::into_primitive),
            },
        });
    }
    let first_bias = mlp.layers[0]
        .bias
        .as_ref()
        .map(|b| parent(ad(b.val()), Slot::FirstBias));
    let mut weights = Vec::new();
    let mut biases = Vec::new();
    for (k, l) in mlp.layers[1..].iter().enumerate() {
        weights.push(parent(ad(l.weight.val()), Slot::Weight(k)));
        biases.push(l.bias.as_ref().map(|b| parent(ad(b.val()), Slot::Bias(k))));
    }
    let gamma = parent(ad(mlp.norm.gamma.val()), Slot::Gamma);
    let beta = mlp
        .norm
        .beta
        .as_ref()
        .map(|b| parent(ad(b.val()), Slot::Beta));
    if nodes.len() > MAX_PARENTS {
        return None;
    }
    // Unused parent places: an untracked tensor (no gradient flows there).
    let pad = ad(Tensor::<Ad, 1>::zeros([1], &Default::default())).node;
    nodes.resize(MAX_PARENTS, pad);
    let nodes: [_; MAX_PARENTS] = nodes.try_into().expect("padded to MAX_PARENTS");

    let term_refs: Vec<MlpTerm<'_>> = terms.iter().map(SavedTerm::as_term).collect();
    let layers: Vec<MlpLayer<'_>> = weights
        .iter()
        .zip(&biases)
        .map(|(weight, bias)| MlpLayer {
            weight,
            bias: bias.as_ref(),
        })
        .collect();
    let output = match FusedBlock
        .prepare::<NoCheckpointing>(nodes)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let (out, saved) = mlp_forward_saving(
                &term_refs,
                first_bias.as_ref(),
                &layers,
                &gamma,
                beta.as_ref(),
                LAYER_NORM_EPSILON,
            )?;
            drop((term_refs, layers));
            let state = BlockState {
                terms,
                weights,
                gamma,
                saved,
                slots,
            };
            prep.finish(state, out)
        }
        // Nothing needs a gradient (a frozen backbone): the values alone.
        OpsKind::UnTracked(prep) => prep.finish(mlp_forward(
            &term_refs,
            first_bias.as_ref(),
            &layers,
            &gamma,
            beta.as_ref(),
            LAYER_NORM_EPSILON,
        )?),
    };
    drop(alive); // registered: the operation's step now holds its parents
    Some(Tensor::from_primitive(TensorPrimitive::Float(output)))
}

impl MlpKernel<Ad> for FusedMlp {
    fn forward(&self, mlp: &Mlp<Ad>, x: Tensor<Ad, 2>) -> Tensor<Ad, 2> {
        if mlp.dropout.prob != 0.0 {
            return mlp.forward(x); // dropout: Burn's operations
        }
        let w = mlp.layers[0].weight.val();
        tracked(mlp, vec![AdInput::Product(x.clone(), w)]).unwrap_or_else(|| mlp.forward(x)) // [n, d_out]
    }

    fn forward_concat(&self, mlp: &Mlp<Ad>, parts: Vec<ConcatPart<Ad>>) -> Tensor<Ad, 2> {
        if mlp.dropout.prob != 0.0 {
            return mlp.forward_concat(parts);
        }
        let mut offset = 0;
        let inputs = parts
            .iter()
            .map(|(x, index)| {
                let [_, d_k] = x.dims();
                let w = mlp.first_weight_rows(offset..offset + d_k); // [d_k, d_first]
                offset += d_k;
                match index {
                    // Gathered parts: the product on the (fewer) source rows, as OpByOp does.
                    Some(i) => AdInput::Rows(x.clone().matmul(w), Some(i.clone())),
                    None => AdInput::Product(x.clone(), w),
                }
            })
            .collect();
        tracked(mlp, inputs).unwrap_or_else(|| mlp.forward_concat(parts)) // [n, d_out]
    }
}
