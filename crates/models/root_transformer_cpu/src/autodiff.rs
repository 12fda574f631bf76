//! Autodiff over any [`TransformerGradBackend`]: LayerNorm, bias + GELU and attention as one
//! tracked operation each (Burn's custom-operation API: `Backward`, `OpsKind`, `Gradients`),
//! for any checkpoint strategy.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;

use crate::{TransformerBackend, TransformerGradBackend};

/// Registers each gradient for its parent, where the parent is tracked.
macro_rules! register {
    ($grads:expr, $ops:expr, [$($value:expr),*]) => {
        for (parent, value) in $ops.parents.iter().zip([$($value),*]) {
            if let (Some(node), Some(value)) = (parent, value) {
                $grads.register::<B>(node.id, value);
            }
        }
    };
}

/// LayerNorm as one tracked operation: parents x, γ, β.
#[derive(Debug)]
struct NormOp;

impl<B: TransformerGradBackend> Backward<B, 3> for NormOp {
    type State = B::NormSaved;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [dx, dgamma, dbeta] = B::layer_norm_backward(&ops.state, grad);
        register!(grads, ops, [Some(dx), Some(dgamma), Some(dbeta)]);
    }
}

/// Bias + GELU as one tracked operation: parents x, bias.
#[derive(Debug)]
struct GeluOp;

impl<B: TransformerGradBackend> Backward<B, 2> for GeluOp {
    type State = B::GeluSaved;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [dx, db] = B::bias_gelu_backward(&ops.state, grad);
        register!(grads, ops, [Some(dx), Some(db)]);
    }
}

/// Attention as one tracked operation: parents qkv, pair bias.
#[derive(Debug)]
struct AttentionOp;

impl<B: TransformerGradBackend> Backward<B, 2> for AttentionOp {
    type State = B::AttentionSaved;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let (dqkv, dbias) = B::attention_backward(&ops.state, grad);
        register!(grads, ops, [Some(dqkv), dbias]);
    }
}

/// An untracked tensor, whose node fills a parent place an operation does not use (an absent
/// β or pair bias): no gradient flows there.
fn unused_place<B: Backend, C: CheckpointStrategy>(
    device: &B::Device,
) -> FloatTensor<Autodiff<B, C>> {
    Tensor::<Autodiff<B, C>, 1>::zeros([1], device)
        .into_primitive()
        .tensor()
}

impl<B: TransformerGradBackend, C: CheckpointStrategy> TransformerBackend for Autodiff<B, C> {
    fn row_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> Option<FloatTensor<Self>> {
        let device = B::float_device(&x.primitive);
        let beta_node = beta
            .as_ref()
            .map_or_else(|| unused_place::<B, C>(&device).node, |b| b.node.clone());
        let nodes = [x.node.clone(), gamma.node.clone(), beta_node];
        let beta_value = beta.as_ref().map(|b| &b.primitive);
        Some(
            match NormOp.prepare::<C>(nodes).compute_bound().stateful() {
                OpsKind::Tracked(prep) => {
                    let (y, saved) =
                        B::layer_norm_saving(&x.primitive, &gamma.primitive, beta_value, epsilon)?;
                    prep.finish(saved, y)
                }
                OpsKind::UnTracked(prep) => prep.finish(B::row_layer_norm(
                    x.primitive,
                    gamma.primitive,
                    beta_value.cloned(),
                    epsilon,
                )?),
            },
        )
    }

    fn bias_gelu(x: FloatTensor<Self>, bias: FloatTensor<Self>) -> Option<FloatTensor<Self>> {
        let nodes = [x.node.clone(), bias.node.clone()];
        Some(
            match GeluOp.prepare::<C>(nodes).compute_bound().stateful() {
                OpsKind::Tracked(prep) => {
                    let (y, saved) = B::bias_gelu_saving(&x.primitive, &bias.primitive)?;
                    prep.finish(saved, y)
                }
                OpsKind::UnTracked(prep) => prep.finish(B::bias_gelu(x.primitive, bias.primitive)?),
            },
        )
    }

    fn packed_attention(
        qkv: FloatTensor<Self>,
        pair_bias: Option<FloatTensor<Self>>,
        lens: &[usize],
        heads: usize,
    ) -> Option<FloatTensor<Self>> {
        let device = B::float_device(&qkv.primitive);
        let bias_node = pair_bias
            .as_ref()
            .map_or_else(|| unused_place::<B, C>(&device).node, |b| b.node.clone());
        let nodes = [qkv.node.clone(), bias_node];
        let bias_value = pair_bias.as_ref().map(|b| &b.primitive);
        Some(
            match AttentionOp.prepare::<C>(nodes).compute_bound().stateful() {
                OpsKind::Tracked(prep) => {
                    let (y, saved) = B::attention_saving(&qkv.primitive, bias_value, lens, heads)?;
                    prep.finish(saved, y)
                }
                OpsKind::UnTracked(prep) => prep.finish(B::packed_attention(
                    qkv.primitive,
                    bias_value.cloned(),
                    lens,
                    heads,
                )?),
            },
        )
    }
}
