//! The ROOT-Transformer's blocks as one operation each, through a Burn backend extension:
//! attention; a LayerNorm and the linear layer after it; a linear layer with the residual or the
//! GELU after it; the feed-forward half (LayerNorm, linear, GELU, linear, residual); the
//! pair-bias MLP.
//!
//! Run operation by operation, attention pads every event to the batch's longest, slices q, k
//! and v out of the projection, transposes heads, materialises `[n, heads, s, s]` logits, a mask
//! and a bias, and autodiff keeps each step; a LayerNorm is nine operations; a linear layer a
//! zero-filled product, a bias pass and, backward, transposed copies; the feed-forward half
//! keeps its `4d`-wide activations. The project's kernels (`gnn4c-kernels`) take each event's
//! sequence through attention alone, without padding, and run the other blocks per block of
//! rows in cache, keeping for the backward only what it cannot recompute element-wise. This
//! module plugs them into the unmodified registry Burn through its public extension points, as
//! `gnn4c-root-gnn`'s does for the Edge_Network:
//! - [`TransformerBackend`], a backend extension trait: the operations. Implemented for the CPU
//!   backend (`Flex`: the tensors' storage handed to the kernels) and for `Autodiff<B, C>` over
//!   any [`TransformerGradBackend`] and checkpoint strategy: one tracked operation each, whose
//!   forward keeps what its backward needs (attention: the probabilities, `s²` per head and
//!   event; the feed-forward half: the GELU's output and slope), or the values alone where
//!   nothing needs a gradient (a frozen backbone).
//! - [`TransformerBackend::fused_encoder`], on the CPU backend without autodiff (inference): all
//!   but the last encoder layer as one operation, blocks of whole sequences taken through every
//!   layer in one parallel region (the same values as the layers one at a time).
//! - [`TransformerBackend::fused_layer`], under autodiff: a layer's four operations (q,k,v,
//!   attention, the output projection, the feed-forward half) tracked as when each runs alone,
//!   their forwards computed together in one parallel region
//!   ([`TransformerGradBackend::layer_saving`]); a layer with dropout runs them one by one.
//! - [`FusedTransformer`], the model's [`TransformerKernel`] for every such backend; it falls
//!   back to Burn's operations ([`crate::OpByOp`]'s) for tensors the kernels
//!   do not take (other than f32). Same function as `OpByOp`: values and gradients within
//!   the parity tolerances of the PyTorch reference (`tests/it`).
//!
//! The family runs with it on the CPU backend (`gnn4c_family::Kernels`, in `family.rs`). No
//! `unsafe` here. Start at [`FusedTransformer`].

mod autodiff;
mod flex;

use burn::nn::{LayerNorm, Linear};
use burn::prelude::*;
use burn::tensor::TensorPrimitive;
use burn::tensor::ops::FloatTensor;

use crate::{
    EncoderLayer, LAYER_NORM_EPSILON, OpByOp, PairEmbed, Sequences, TransformerKernel,
    feed_forward_in_steps, layers_one_at_a_time, norm_then_linear,
};

/// A backend that runs the Transformer's blocks (LayerNorm, linear layers, packed attention, and
/// optionally the fused blocks with default `None`) as one operation each; `None` where it does
/// not run these tensors (the caller then runs Burn's operations).
pub trait TransformerBackend: Backend {
    /// LayerNorm over the rows of `x [rows, d]` (centred variance).
    fn row_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> Option<FloatTensor<Self>>;

    /// `x [rows, d_in] · weight [d_in, d_out] + bias`, then `residual + ·` or the exact GELU of
    /// it (`gelu`; not both).
    fn fused_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        residual: Option<FloatTensor<Self>>,
        gelu: bool,
    ) -> Option<FloatTensor<Self>>;

    /// [`TransformerKernel::attention`]: `qkv [Σ s, 3d]`, `pair_bias [Σ (s−1)², heads]` →
    /// `[Σ s, d]`, or with `first_only` each sequence's first row alone, `[sequences, d]`.
    fn packed_attention(
        qkv: FloatTensor<Self>,
        pair_bias: Option<FloatTensor<Self>>,
        lens: &[usize],
        heads: usize,
        first_only: bool,
    ) -> Option<FloatTensor<Self>>;

    /// `LayerNorm(x) · weight + bias` (then the exact GELU with `gelu`) as one operation, the
    /// LayerNorm's output not kept. `norm` is `(γ, β, ε)`. `None` by default (the caller then
    /// runs [`TransformerBackend::row_layer_norm`] and [`TransformerBackend::fused_linear`]).
    fn fused_norm_linear(
        x: FloatTensor<Self>,
        norm: NormParams<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        gelu: bool,
    ) -> Option<FloatTensor<Self>> {
        let _ = (x, norm, weight, bias, gelu);
        None
    }

    /// The feed-forward half of a pre-norm layer, `x + GELU(LayerNorm(x)·W₁ + b₁)·W₂ + b₂`, as
    /// one operation (the `4d`-wide activations never a full tensor). `None` by default.
    fn fused_feed_forward(
        x: FloatTensor<Self>,
        norm: NormParams<Self>,
        first: LinearParams<Self>,
        second: LinearParams<Self>,
    ) -> Option<FloatTensor<Self>> {
        let _ = (x, norm, first, second);
        None
    }

    /// The pair-bias MLP, `(ReLU(x·W₁ + b₁)·W₂ + b₂) ⊙ mask`, as one operation. `None` by
    /// default.
    fn fused_pair_mlp(
        inputs: PairInputs<Self>,
        first: LinearParams<Self>,
        second: LinearParams<Self>,
    ) -> Option<FloatTensor<Self>> {
        let _ = (inputs, first, second);
        None
    }

    /// Encoder layers in inference, `x [Σ s, d]` → `[Σ s, d]` (every row through every layer,
    /// `pair_bias` as [`TransformerBackend::packed_attention`] takes it), as one operation.
    /// `None` by default, and where gradients are recorded: the caller then runs the layers
    /// one at a time.
    fn fused_encoder(
        x: FloatTensor<Self>,
        layers: Vec<LayerParams<Self>>,
        pair_bias: Option<FloatTensor<Self>>,
        lens: &[usize],
        heads: usize,
    ) -> Option<FloatTensor<Self>> {
        let _ = (x, layers, pair_bias, lens, heads);
        None
    }

    /// One encoder layer (no dropout) where gradients are recorded, `x [Σ s, d]` → `[Σ s, d]`:
    /// its four operations (q,k,v, attention, the output projection with the residual, the
    /// feed-forward half) tracked as when they run one at a time, their forwards computed
    /// together ([`TransformerGradBackend::layer_saving`]). `None` by default, and where
    /// nothing needs a gradient.
    fn fused_layer(
        x: FloatTensor<Self>,
        layer: LayerParams<Self>,
        pair_bias: Option<FloatTensor<Self>>,
        lens: &[usize],
        heads: usize,
    ) -> Option<FloatTensor<Self>> {
        let _ = (x, layer, pair_bias, lens, heads);
        None
    }
}

/// One encoder layer's parameters as the backend takes them.
#[derive(Debug)]
pub struct LayerParams<B: Backend> {
    /// The LayerNorm before attention.
    pub norm1: NormParams<B>,
    /// The q, k, v projection, `[d, 3d]`.
    pub qkv: LinearParams<B>,
    /// The output projection, `[d, d]`.
    pub out: LinearParams<B>,
    /// The LayerNorm before the feed-forward half.
    pub norm2: NormParams<B>,
    /// The feed-forward half's first layer, `[d, f]`.
    pub first: LinearParams<B>,
    /// Its second layer, `[f, d]`.
    pub second: LinearParams<B>,
}

impl<B: Backend> LayerParams<B> {
    fn of(layer: &EncoderLayer<B>) -> Self {
        LayerParams {
            norm1: norm_params(&layer.norm1),
            qkv: linear_params(&layer.self_attn.in_proj),
            out: linear_params(&layer.self_attn.out_proj),
            norm2: norm_params(&layer.norm2),
            first: linear_params(&layer.linear1),
            second: linear_params(&layer.linear2),
        }
    }
}

/// The pair-bias MLP's input `x [pairs, d_pair]` and per-row `mask [pairs, 1]` (data: no
/// gradient flows to them).
pub type PairInputs<B> = (FloatTensor<B>, FloatTensor<B>);

/// A LayerNorm's γ, β and ε.
pub type NormParams<B> = (FloatTensor<B>, Option<FloatTensor<B>>, f64);

/// A linear layer's weight `[d_in, d_out]` and bias.
pub type LinearParams<B> = (FloatTensor<B>, Option<FloatTensor<B>>);

/// What the autodiff implementation of [`TransformerBackend`] needs of the backend it wraps:
/// each forward keeping what its backward needs, and the backwards.
pub trait TransformerGradBackend: TransformerBackend {
    /// What a LayerNorm's forward keeps.
    type NormSaved: Clone + Send + Sync + std::fmt::Debug + 'static;
    /// What a linear layer's forward keeps.
    type LinearSaved: Clone + Send + Sync + std::fmt::Debug + 'static;
    /// What attention's forward keeps.
    type AttentionSaved: Clone + Send + Sync + std::fmt::Debug + 'static;
    /// What the feed-forward half's forward keeps.
    type FeedForwardSaved: Clone + Send + Sync + std::fmt::Debug + 'static;
    /// What the pair-bias MLP's forward keeps.
    type PairMlpSaved: Clone + Send + Sync + std::fmt::Debug + 'static;

    /// [`TransformerBackend::row_layer_norm`], keeping what the backward needs.
    fn layer_norm_saving(
        x: &FloatTensor<Self>,
        gamma: &FloatTensor<Self>,
        beta: Option<&FloatTensor<Self>>,
        epsilon: f64,
    ) -> Option<(FloatTensor<Self>, Self::NormSaved)>;

    /// `(dx, dγ, dβ)` for the output gradient `grad`.
    fn layer_norm_backward(
        saved: &Self::NormSaved,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 3];

    /// [`TransformerBackend::fused_linear`], keeping what the backward needs.
    fn fused_linear_saving(
        x: &FloatTensor<Self>,
        weight: &FloatTensor<Self>,
        bias: Option<&FloatTensor<Self>>,
        residual: Option<&FloatTensor<Self>>,
        gelu: bool,
    ) -> Option<(FloatTensor<Self>, Self::LinearSaved)>;

    /// `(dx (if `want_x`), dW, d bias)` for the output gradient `grad` (a residual's gradient is
    /// `grad` itself).
    fn fused_linear_backward(
        saved: &Self::LinearSaved,
        grad: FloatTensor<Self>,
        want_x: bool,
    ) -> (
        Option<FloatTensor<Self>>,
        FloatTensor<Self>,
        FloatTensor<Self>,
    );

    /// [`TransformerBackend::packed_attention`], keeping what the backward needs.
    fn attention_saving(
        qkv: &FloatTensor<Self>,
        pair_bias: Option<&FloatTensor<Self>>,
        lens: &[usize],
        heads: usize,
        first_only: bool,
    ) -> Option<(FloatTensor<Self>, Self::AttentionSaved)>;

    /// `(d qkv, d pair_bias)` (the latter when there is a pair bias) for the output gradient
    /// `grad`.
    fn attention_backward(
        saved: &Self::AttentionSaved,
        grad: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, Option<FloatTensor<Self>>);

    /// [`TransformerBackend::fused_feed_forward`], keeping what the backward needs.
    fn feed_forward_saving(
        x: FloatTensor<Self>,
        norm: NormParams<Self>,
        first: LinearParams<Self>,
        second: LinearParams<Self>,
    ) -> Option<(FloatTensor<Self>, Self::FeedForwardSaved)>;

    /// `[dx, dγ, dβ, dW₁, db₁, dW₂, db₂]` for the output gradient `grad` (those of absent
    /// parameters unused).
    fn feed_forward_backward(
        saved: &Self::FeedForwardSaved,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 7];

    /// [`TransformerBackend::fused_norm_linear`], keeping what the backward needs (not the
    /// normalised rows: the backward recomputes them).
    fn norm_linear_saving(
        x: FloatTensor<Self>,
        norm: NormParams<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        gelu: bool,
    ) -> Option<(FloatTensor<Self>, Self::LinearSaved)>;

    /// `[dx, dγ, dβ, dW, db]` for the output gradient `grad` of a
    /// [`TransformerGradBackend::norm_linear_saving`] (dβ, db unused where absent).
    fn norm_linear_backward(
        saved: &Self::LinearSaved,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 5];

    /// [`TransformerBackend::fused_pair_mlp`], keeping what the backward needs.
    fn pair_mlp_saving(
        inputs: PairInputs<Self>,
        first: LinearParams<Self>,
        second: LinearParams<Self>,
    ) -> Option<(FloatTensor<Self>, Self::PairMlpSaved)>;

    /// `[dW₁, db₁, dW₂, db₂]` for the output gradient `grad` (those of absent biases unused).
    fn pair_mlp_backward(
        saved: &Self::PairMlpSaved,
        grad: FloatTensor<Self>,
    ) -> [FloatTensor<Self>; 4];

    /// One encoder layer's forward as its four operations keep it for their backwards (what
    /// `norm_linear_saving` keeps for q,k,v, then `attention_saving`, the output projection's
    /// `fused_linear_saving` with the residual, `feed_forward_saving`), computed together.
    /// `None` by default (the four then run one after the other).
    fn layer_saving(
        x: &FloatTensor<Self>,
        layer: LayerParams<Self>,
        pair_bias: Option<&FloatTensor<Self>>,
        lens: &[usize],
        heads: usize,
    ) -> Option<LayerSaved<Self>> {
        let _ = (x, layer, pair_bias, lens, heads);
        None
    }
}

/// [`TransformerGradBackend::layer_saving`]'s result: each of the layer's four operations'
/// output and what its backward keeps.
pub struct LayerSaved<B: TransformerGradBackend> {
    /// q, k, v (`[Σ s, 3d]`).
    pub qkv: (FloatTensor<B>, B::LinearSaved),
    /// Attention's output (`[Σ s, d]`).
    pub attention: (FloatTensor<B>, B::AttentionSaved),
    /// `x` plus the output projection (`[Σ s, d]`).
    pub projected: (FloatTensor<B>, B::LinearSaved),
    /// The layer's output (`[Σ s, d]`).
    pub out: (FloatTensor<B>, B::FeedForwardSaved),
}

/// Runs the Transformer's LayerNorms, linear layers and attention as one operation each of
/// the backend ([`TransformerBackend`]), in inference and in training (see the crate docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct FusedTransformer;

/// A float tensor's primitive.
fn primitive<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// A primitive as a tensor.
fn tensor<B: Backend, const D: usize>(t: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// A LayerNorm's parameters as the backend takes them.
fn norm_params<B: Backend>(norm: &LayerNorm<B>) -> NormParams<B> {
    let beta = norm.beta.as_ref().map(|b| primitive(b.val()));
    (primitive(norm.gamma.val()), beta, LAYER_NORM_EPSILON)
}

/// A linear layer's parameters as the backend takes them.
fn linear_params<B: Backend>(linear: &Linear<B>) -> LinearParams<B> {
    let bias = linear.bias.as_ref().map(|b| primitive(b.val()));
    (primitive(linear.weight.val()), bias)
}

/// `linear` (then the residual added, or the GELU) as one operation of the backend, or `None`.
fn fused_linear<B: TransformerBackend>(
    linear: &Linear<B>,
    x: Tensor<B, 2>,
    residual: Option<Tensor<B, 2>>,
    gelu: bool,
) -> Option<Tensor<B, 2>> {
    B::fused_linear(
        primitive(x),
        primitive(linear.weight.val()),
        linear.bias.as_ref().map(|b| primitive(b.val())),
        residual.map(primitive),
        gelu,
    )
    .map(tensor)
}

impl<B: TransformerBackend> TransformerKernel<B> for FusedTransformer {
    fn layer_norm(&self, norm: &LayerNorm<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let beta = norm.beta.as_ref().map(|b| primitive(b.val()));
        B::row_layer_norm(
            primitive(x.clone()),
            primitive(norm.gamma.val()),
            beta,
            LAYER_NORM_EPSILON,
        )
        .map_or_else(|| OpByOp.layer_norm(norm, x), tensor)
    }

    fn linear(&self, linear: &Linear<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        fused_linear(linear, x.clone(), None, false).unwrap_or_else(|| OpByOp.linear(linear, x))
    }

    fn norm_linear(
        &self,
        norm: &LayerNorm<B>,
        linear: &Linear<B>,
        x: Tensor<B, 2>,
        gelu: bool,
    ) -> Tensor<B, 2> {
        let (weight, bias) = linear_params(linear);
        let fused =
            B::fused_norm_linear(primitive(x.clone()), norm_params(norm), weight, bias, gelu);
        fused.map_or_else(|| norm_then_linear(self, norm, linear, x, gelu), tensor)
    }

    fn linear_gelu(&self, linear: &Linear<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        fused_linear(linear, x.clone(), None, true).unwrap_or_else(|| OpByOp.linear_gelu(linear, x))
    }

    fn pair_bias(
        &self,
        embed: &PairEmbed<B>,
        features: Tensor<B, 2>,
        off_diagonal: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        let fused = B::fused_pair_mlp(
            (primitive(features.clone()), primitive(off_diagonal.clone())),
            linear_params(&embed.hidden),
            linear_params(&embed.out),
        );
        fused.map_or_else(|| OpByOp.pair_bias(embed, features, off_diagonal), tensor)
    }

    fn feed_forward(
        &self,
        norm: &LayerNorm<B>,
        first: &Linear<B>,
        second: &Linear<B>,
        x: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        let fused = B::fused_feed_forward(
            primitive(x.clone()),
            norm_params(norm),
            linear_params(first),
            linear_params(second),
        );
        fused.map_or_else(
            || feed_forward_in_steps(self, norm, first, second, x),
            tensor,
        )
    }

    fn linear_residual(
        &self,
        linear: &Linear<B>,
        x: Tensor<B, 2>,
        residual: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        fused_linear(linear, x.clone(), Some(residual.clone()), false)
            .unwrap_or_else(|| OpByOp.linear_residual(linear, x, residual))
    }

    fn encoder(
        &self,
        layers: &[EncoderLayer<B>],
        x: Tensor<B, 2>,
        bias: Option<Tensor<B, 2>>,
        seqs: &Sequences,
        n_heads: usize,
    ) -> Tensor<B, 2> {
        let fused = B::fused_encoder(
            primitive(x.clone()),
            layers.iter().map(LayerParams::of).collect(),
            bias.clone().map(primitive),
            &seqs.lens,
            n_heads,
        );
        if let Some(y) = fused {
            return tensor(y);
        }
        // Where gradients are recorded: each layer's four operations computed together, unless
        // it drops out.
        layers.iter().fold(x, |x, layer| {
            let together = (layer.dropout.prob == 0.0)
                .then(|| {
                    B::fused_layer(
                        primitive(x.clone()),
                        LayerParams::of(layer),
                        bias.clone().map(primitive),
                        &seqs.lens,
                        n_heads,
                    )
                })
                .flatten();
            together.map_or_else(
                || {
                    layers_one_at_a_time(
                        self,
                        std::slice::from_ref(layer),
                        x,
                        bias.as_ref(),
                        seqs,
                        n_heads,
                    )
                },
                tensor,
            )
        })
    }

    fn attention(
        &self,
        qkv: Tensor<B, 2>,
        pair_bias: Option<Tensor<B, 2>>,
        seqs: &Sequences,
        n_heads: usize,
        class_only: bool,
    ) -> Tensor<B, 2> {
        B::packed_attention(
            primitive(qkv.clone()),
            pair_bias.clone().map(primitive),
            &seqs.lens,
            n_heads,
            class_only,
        )
        .map_or_else(
            || OpByOp.attention(qkv, pair_bias, seqs, n_heads, class_only),
            tensor,
        )
    }
}
