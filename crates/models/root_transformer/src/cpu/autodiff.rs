//! Autodiff over any [`TransformerGradBackend`]: LayerNorm, a linear layer and attention as one
//! tracked operation each (Burn's custom-operation API: `Backward`, `OpsKind`, `Gradients`),
//! for any checkpoint strategy.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::prelude::*;
use burn::tensor::ops::FloatTensor;

use super::{
    LayerParams, LinearParams, NormParams, PairInputs, TransformerBackend, TransformerGradBackend,
};

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

/// A linear layer (and its residual or GELU) as one tracked operation: parents x, weight,
/// bias, residual.
#[derive(Debug)]
struct LinearOp;

impl<B: TransformerGradBackend> Backward<B, 4> for LinearOp {
    type State = B::LinearSaved;

    fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let want_x = ops.parents[0].is_some();
        let residual = ops.parents[3].is_some().then(|| grad.clone());
        let (dx, dw, db) = B::fused_linear_backward(&ops.state, grad, want_x);
        register!(grads, ops, [dx, Some(dw), Some(db), residual]);
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

/// The feed-forward half as one tracked operation: parents x, γ, β, W₁, b₁, W₂, b₂.
#[derive(Debug)]
struct FeedForwardOp;

impl<B: TransformerGradBackend> Backward<B, 7> for FeedForwardOp {
    type State = B::FeedForwardSaved;

    fn backward(self, ops: Ops<Self::State, 7>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [dx, dgamma, dbeta, dw1, db1, dw2, db2] = B::feed_forward_backward(&ops.state, grad);
        register!(
            grads,
            ops,
            [
                Some(dx),
                Some(dgamma),
                Some(dbeta),
                Some(dw1),
                Some(db1),
                Some(dw2),
                Some(db2)
            ]
        );
    }
}

/// A LayerNorm and the linear layer after it (and its GELU) as one tracked operation: parents
/// x, γ, β, weight, bias.
#[derive(Debug)]
struct NormLinearOp;

impl<B: TransformerGradBackend> Backward<B, 5> for NormLinearOp {
    type State = B::LinearSaved;

    fn backward(self, ops: Ops<Self::State, 5>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [dx, dgamma, dbeta, dw, db] = B::norm_linear_backward(&ops.state, grad);
        register!(
            grads,
            ops,
            [Some(dx), Some(dgamma), Some(dbeta), Some(dw), Some(db)]
        );
    }
}

/// The pair-bias MLP as one tracked operation: parents W₁, b₁, W₂, b₂ (its input and mask are
/// data).
#[derive(Debug)]
struct PairMlpOp;

impl<B: TransformerGradBackend> Backward<B, 4> for PairMlpOp {
    type State = B::PairMlpSaved;

    fn backward(self, ops: Ops<Self::State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<B>(&ops.node);
        let [dw1, db1, dw2, db2] = B::pair_mlp_backward(&ops.state, grad);
        register!(grads, ops, [Some(dw1), Some(db1), Some(dw2), Some(db2)]);
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

/// An optional parameter as the tensor whose node takes its parent place (an unused place when
/// absent) and its value.
fn optional<B: Backend, C: CheckpointStrategy>(
    t: Option<FloatTensor<Autodiff<B, C>>>,
    device: &B::Device,
) -> (FloatTensor<Autodiff<B, C>>, Option<FloatTensor<B>>) {
    match t {
        Some(t) => {
            let value = t.primitive.clone();
            (t, Some(value))
        }
        None => (unused_place::<B, C>(device), None),
    }
}

/// `op`'s node over `parents` (an array of nodes) for the output `y` computed already, with
/// `state` kept where it is tracked.
macro_rules! finish {
    ($op:expr, $parents:expr, $y:expr, $state:expr) => {
        match $op.prepare::<C>($parents).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish($state, $y),
            OpsKind::UnTracked(prep) => prep.finish($y),
        }
    };
}

impl<B: TransformerGradBackend, C: CheckpointStrategy> TransformerBackend for Autodiff<B, C> {
    fn fused_layer(
        x: FloatTensor<Self>,
        layer: LayerParams<Self>,
        pair_bias: Option<FloatTensor<Self>>,
        lens: &[usize],
        heads: usize,
    ) -> Option<FloatTensor<Self>> {
        let device = B::float_device(&x.primitive);
        let LayerParams {
            norm1: (g1, beta1, e1),
            qkv: (w_qkv, b_qkv),
            out: (w_out, b_out),
            norm2: (g2, beta2, e2),
            first: (w1, b1),
            second: (w2, b2),
        } = layer;
        let (beta1, beta1_v) = optional::<B, C>(beta1, &device);
        let (b_qkv, b_qkv_v) = optional::<B, C>(b_qkv, &device);
        let (b_out, b_out_v) = optional::<B, C>(b_out, &device);
        let (beta2, beta2_v) = optional::<B, C>(beta2, &device);
        let (b1, b1_v) = optional::<B, C>(b1, &device);
        let (b2, b2_v) = optional::<B, C>(b2, &device);
        let (bias, bias_v) = optional::<B, C>(pair_bias, &device);
        let tracked = [
            &x, &g1, &beta1, &w_qkv, &b_qkv, &w_out, &b_out, &g2, &beta2, &w1, &b1, &w2, &b2,
        ]
        .iter()
        .any(|t| !t.node.requirement.is_none());
        if !tracked {
            // The operations one at a time keep nothing then.
            return None;
        }
        let inner = LayerParams {
            norm1: (g1.primitive.clone(), beta1_v, e1),
            qkv: (w_qkv.primitive.clone(), b_qkv_v),
            out: (w_out.primitive.clone(), b_out_v),
            norm2: (g2.primitive.clone(), beta2_v, e2),
            first: (w1.primitive.clone(), b1_v),
            second: (w2.primitive.clone(), b2_v),
        };
        let saved = B::layer_saving(&x.primitive, inner, bias_v.as_ref(), lens, heads)?;
        // The four operations' nodes, as when each runs alone.
        let (y, state) = saved.qkv;
        let parents = [x.node.clone(), g1.node, beta1.node, w_qkv.node, b_qkv.node];
        let qkv: FloatTensor<Self> = finish!(NormLinearOp, parents, y, state);
        let (y, state) = saved.attention;
        let a: FloatTensor<Self> = finish!(AttentionOp, [qkv.node, bias.node], y, state);
        let (y, state) = saved.projected;
        let parents = [a.node, w_out.node, b_out.node, x.node];
        let projected: FloatTensor<Self> = finish!(LinearOp, parents, y, state);
        let (y, state) = saved.out;
        let parents = [
            projected.node,
            g2.node,
            beta2.node,
            w1.node,
            b1.node,
            w2.node,
            b2.node,
        ];
        Some(finish!(FeedForwardOp, parents, y, state))
    }

    fn fused_norm_linear(
        x: FloatTensor<Self>,
        norm: NormParams<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        gelu: bool,
    ) -> Option<FloatTensor<Self>> {
        let device = B::float_device(&x.primitive);
        let (gamma, beta, epsilon) = norm;
        let (beta_node, beta) = optional::<B, C>(beta, &device);
        let (bias_node, bias) = optional::<B, C>(bias, &device);
        let nodes = [
            x.node.clone(),
            gamma.node.clone(),
            beta_node.node,
            weight.node.clone(),
            bias_node.node,
        ];
        let (x, norm, weight) = (
            x.primitive,
            (gamma.primitive, beta, epsilon),
            weight.primitive,
        );
        Some(
            match NormLinearOp.prepare::<C>(nodes).compute_bound().stateful() {
                OpsKind::Tracked(prep) => {
                    let (y, saved) = B::norm_linear_saving(x, norm, weight, bias, gelu)?;
                    prep.finish(saved, y)
                }
                OpsKind::UnTracked(prep) => {
                    prep.finish(B::fused_norm_linear(x, norm, weight, bias, gelu)?)
                }
            },
        )
    }

    fn fused_pair_mlp(
        inputs: PairInputs<Self>,
        first: LinearParams<Self>,
        second: LinearParams<Self>,
    ) -> Option<FloatTensor<Self>> {
        let (x, mask) = inputs;
        // The kernel gives no gradient to the input or the mask: Burn's operations where
        // either is tracked.
        if !x.node.requirement.is_none() || !mask.node.requirement.is_none() {
            return None;
        }
        let device = B::float_device(&x.primitive);
        let ((w1, b1), (w2, b2)) = (first, second);
        let (b1_node, b1) = optional::<B, C>(b1, &device);
        let (b2_node, b2) = optional::<B, C>(b2, &device);
        let nodes = [w1.node.clone(), b1_node.node, w2.node.clone(), b2_node.node];
        let inputs = (
            (x.primitive, mask.primitive),
            (w1.primitive, b1),
            (w2.primitive, b2),
        );
        Some(
            match PairMlpOp.prepare::<C>(nodes).compute_bound().stateful() {
                OpsKind::Tracked(prep) => {
                    let (inputs, first, second) = inputs;
                    let (y, saved) = B::pair_mlp_saving(inputs, first, second)?;
                    prep.finish(saved, y)
                }
                OpsKind::UnTracked(prep) => {
                    let (inputs, first, second) = inputs;
                    prep.finish(B::fused_pair_mlp(inputs, first, second)?)
                }
            },
        )
    }

    fn fused_feed_forward(
        x: FloatTensor<Self>,
        norm: NormParams<Self>,
        first: LinearParams<Self>,
        second: LinearParams<Self>,
    ) -> Option<FloatTensor<Self>> {
        let device = B::float_device(&x.primitive);
        let ((gamma, beta, epsilon), (w1, b1), (w2, b2)) = (norm, first, second);
        let (beta_node, beta) = optional::<B, C>(beta, &device);
        let (b1_node, b1) = optional::<B, C>(b1, &device);
        let (b2_node, b2) = optional::<B, C>(b2, &device);
        let nodes = [
            x.node.clone(),
            gamma.node.clone(),
            beta_node.node,
            w1.node.clone(),
            b1_node.node,
            w2.node.clone(),
            b2_node.node,
        ];
        let inputs = (
            x.primitive,
            (gamma.primitive, beta, epsilon),
            (w1.primitive, b1),
            (w2.primitive, b2),
        );
        Some(
            match FeedForwardOp.prepare::<C>(nodes).compute_bound().stateful() {
                OpsKind::Tracked(prep) => {
                    let (x, norm, first, second) = inputs;
                    let (y, saved) = B::feed_forward_saving(x, norm, first, second)?;
                    prep.finish(saved, y)
                }
                OpsKind::UnTracked(prep) => {
                    let (x, norm, first, second) = inputs;
                    prep.finish(B::fused_feed_forward(x, norm, first, second)?)
                }
            },
        )
    }

    fn row_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> Option<FloatTensor<Self>> {
        let device = B::float_device(&x.primitive);
        let (beta_node, beta) = optional::<B, C>(beta, &device);
        let nodes = [x.node.clone(), gamma.node.clone(), beta_node.node];
        let beta_value = beta.as_ref();
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

    fn fused_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        residual: Option<FloatTensor<Self>>,
        gelu: bool,
    ) -> Option<FloatTensor<Self>> {
        let device = B::float_device(&x.primitive);
        let (bias_node, bias) = optional::<B, C>(bias, &device);
        let (residual_node, residual) = optional::<B, C>(residual, &device);
        let nodes = [
            x.node.clone(),
            weight.node.clone(),
            bias_node.node,
            residual_node.node,
        ];
        let (bias_value, residual_value) = (bias.as_ref(), residual.as_ref());
        Some(
            match LinearOp.prepare::<C>(nodes).compute_bound().stateful() {
                OpsKind::Tracked(prep) => {
                    let (y, saved) = B::fused_linear_saving(
                        &x.primitive,
                        &weight.primitive,
                        bias_value,
                        residual_value,
                        gelu,
                    )?;
                    prep.finish(saved, y)
                }
                OpsKind::UnTracked(prep) => prep.finish(B::fused_linear(
                    x.primitive,
                    weight.primitive,
                    bias_value.cloned(),
                    residual_value.cloned(),
                    gelu,
                )?),
            },
        )
    }

    fn packed_attention(
        qkv: FloatTensor<Self>,
        pair_bias: Option<FloatTensor<Self>>,
        lens: &[usize],
        heads: usize,
        first_only: bool,
    ) -> Option<FloatTensor<Self>> {
        let device = B::float_device(&qkv.primitive);
        let (bias_node, pair_bias) = optional::<B, C>(pair_bias, &device);
        let nodes = [qkv.node.clone(), bias_node.node];
        let bias_value = pair_bias.as_ref();
        Some(
            match AttentionOp.prepare::<C>(nodes).compute_bound().stateful() {
                OpsKind::Tracked(prep) => {
                    let (y, saved) =
                        B::attention_saving(&qkv.primitive, bias_value, lens, heads, first_only)?;
                    prep.finish(saved, y)
                }
                OpsKind::UnTracked(prep) => prep.finish(B::packed_attention(
                    qkv.primitive,
                    bias_value.cloned(),
                    lens,
                    heads,
                    first_only,
                )?),
            },
        )
    }
}
