//! Autodiff over any [`MlpBlockGradBackend`]: the whole MLP block as one tracked operation
//! (Burn's custom-operation API: `Backward`, `OpsKind`, `Gradients`), for any checkpoint
//! strategy.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;

use super::{BlockTensors, MlpBlockBackend, MlpBlockGradBackend, Slot};

/// At most this many tracked inputs per block (terms' inputs and weights, biases, γ, β): the
/// contract's blocks need 6 to 15; deeper blocks run Burn's operations.
const MAX_PARENTS: usize = 32;

/// What the block's backward needs: what the forward kept, and which gradient each parent
/// receives.
#[derive(Debug, Clone)]
struct BlockState<B: MlpBlockGradBackend> {
    saved: B::Saved,
    slots: Vec<Slot>,
    n_terms: usize,
}

/// The whole MLP block as one tracked operation.
#[derive(Debug)]
struct FusedBlock;

impl<B: MlpBlockGradBackend> Backward<B, MAX_PARENTS> for FusedBlock {
    type State = BlockState<B>;

    fn backward(
        self,
        ops: Ops<Self::State, MAX_PARENTS>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let grad = grads.consume::<B>(&ops.node);
        let state = ops.state;
        let wanted = |t: usize| {
            state
                .slots
                .iter()
                .zip(&ops.parents)
                .any(|(s, p)| p.is_some() && matches!(s, Slot::TermInput(u) if *u == t))
        };
        let want_inputs: Vec<bool> = (0..state.n_terms).map(wanted).collect();
        let mut g = B::mlp_block_backward(&state.saved, grad, &want_inputs);
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
            grads.register::<B>(
                node.id,
                value.expect("every tracked input's gradient is computed"),
            );
        }
    }
}

impl<B: MlpBlockGradBackend, C: CheckpointStrategy> MlpBlockBackend for Autodiff<B, C> {
    /// One tracked operation; `None` (nothing registered) when `B` does not run these tensors
    /// or the block has more than [`MAX_PARENTS`] tracked inputs.
    fn mlp_block(block: BlockTensors<Self>) -> Option<FloatTensor<Self>> {
        let n_terms = block.terms.len();
        let mut nodes = Vec::new();
        let mut slots = Vec::new();
        // The parents' tensors stay alive until the operation is registered: a tensor's
        // reference count is what tells autodiff's graph cleaning (run after any backward, from
        // any thread) that its node is still wanted; an intermediate (a slice of the first
        // weight, a gathered product) dropped before `finish` could be cleaned away with its
        // gradient path.
        let mut alive = Vec::new();
        let inner: BlockTensors<B> = block.map(
            |t, slot| {
                nodes.push(t.node.clone());
                slots.push(slot);
                let value = t.primitive.clone();
                alive.push(t);
                value
            },
            |i| i,
        );
        if nodes.len() > MAX_PARENTS {
            return None;
        }
        // Unused parent places: an untracked tensor (no gradient flows there).
        let device = B::float_device(&inner.gamma);
        let pad = Tensor::<Self, 1>::zeros([1], &device)
            .into_primitive()
            .tensor()
            .node;
        nodes.resize(MAX_PARENTS, pad);
        let nodes: [_; MAX_PARENTS] = nodes.try_into().expect("padded to MAX_PARENTS");
        let output = match FusedBlock.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (out, saved) = B::mlp_block_saving(&inner)?;
                let state = BlockState {
                    saved,
                    slots,
                    n_terms,
                };
                prep.finish(state, out)
            }
            // Nothing needs a gradient (a frozen backbone): the values alone.
            OpsKind::UnTracked(prep) => prep.finish(B::mlp_block(inner)?),
        };
        drop(alive); // registered: the operation's step now holds its parents
        Some(output)
    }
}
