//! The ROOT-Transformer (docs/root-transformer.md; PyTorch reference
//! `benchmarks/reference/root_transformer.py`): the selected objects of an event as tokens, a
//! class token from the globals, pre-norm encoder layers with an optional pairwise attention bias
//! from the objects' (Δη, Δφ, ΔR) (ParT-style), and a head on the class token.
//!
//! Parameter names mirror the reference's PyTorch state dict (`layers.0.self_attn.in_proj_weight`
//! is our `layers.0.self_attn.in_proj.weight`); `weights.rs` maps the few that differ.

use burn::nn::{Dropout, DropoutConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::{gelu, relu, softmax};
use gnn4c_family::Classifier;

use crate::batch::TokenBatch;

/// LayerNorm ε (PyTorch's default).
const LAYER_NORM_EPSILON: f64 = 1e-5;

/// Hyperparameters of the ROOT-Transformer.
#[derive(Config, Debug)]
pub struct RootTransformerConfig {
    /// Outputs of `classify` (binary 1, K-class K).
    pub n_out: usize,
    /// Token width d.
    #[config(default = 64)]
    pub d_model: usize,
    /// Attention heads (d divisible by it).
    #[config(default = 4)]
    pub n_heads: usize,
    /// Encoder layers.
    #[config(default = 4)]
    pub n_layers: usize,
    /// Linear layers of the token and class-token embedding blocks.
    #[config(default = 2)]
    pub embed_layers: usize,
    /// Hidden width of the pair-bias MLP.
    #[config(default = 16)]
    pub pair_hidden: usize,
    /// Add the pairwise attention bias.
    #[config(default = true)]
    pub pair_bias: bool,
    /// Dropout probability (attention output, feed-forward, embeddings).
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Token (node) feature width.
    #[config(default = 7)]
    pub d_node: usize,
    /// Global feature width.
    #[config(default = 2)]
    pub d_global: usize,
    /// Pair feature width (Δη, Δφ, ΔR).
    #[config(default = 3)]
    pub d_pair: usize,
}

/// [Linear → ReLU → Dropout] × L, then LayerNorm: the Edge_Network's encoder block. PyTorch
/// `Sequential` names: Linear k at index 3k, the LayerNorm at 3L.
#[derive(Module, Debug)]
pub struct EmbedBlock<B: Backend> {
    /// The linear layers (the first from the input width, the others d → d).
    pub layers: Vec<Linear<B>>,
    /// Dropout after every ReLU (no parameters).
    pub dropout: Dropout,
    /// The final LayerNorm.
    pub norm: LayerNorm<B>,
}

impl<B: Backend> EmbedBlock<B> {
    /// # Shapes
    /// `x [n, d_in]` → `[n, d]`.
    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let mut x = x;
        for layer in &self.layers {
            x = self.dropout.forward(relu(layer.forward(x))); // [n, d]
        }
        layer_norm(&self.norm, x)
    }
}

/// Linear → ReLU → Linear: one attention bias per head from a pair's features.
#[derive(Module, Debug)]
pub struct PairEmbed<B: Backend> {
    /// PyTorch `pair_embed.0`.
    pub hidden: Linear<B>,
    /// PyTorch `pair_embed.2`.
    pub out: Linear<B>,
}

/// Multi-head self-attention as PyTorch's `nn.MultiheadAttention` (one input projection).
#[derive(Module, Debug)]
pub struct SelfAttention<B: Backend> {
    /// q, k, v in one `[d, 3d]` projection (PyTorch `in_proj_weight`, `in_proj_bias`).
    pub in_proj: Linear<B>,
    /// The output projection.
    pub out_proj: Linear<B>,
}

/// One pre-norm encoder layer, PyTorch's `nn.TransformerEncoderLayer(norm_first=True,
/// activation="gelu", dim_feedforward=4d, batch_first=True)`.
#[derive(Module, Debug)]
pub struct EncoderLayer<B: Backend> {
    /// Self-attention.
    pub self_attn: SelfAttention<B>,
    /// Feed-forward in (d → 4d).
    pub linear1: Linear<B>,
    /// Feed-forward out (4d → d).
    pub linear2: Linear<B>,
    /// Before the attention.
    pub norm1: LayerNorm<B>,
    /// Before the feed-forward.
    pub norm2: LayerNorm<B>,
    /// Dropout (no parameters).
    pub dropout: Dropout,
}

/// The ROOT-Transformer.
#[derive(Module, Debug)]
pub struct RootTransformer<B: Backend> {
    /// Tokens: 7 → d.
    pub token_embed: EmbedBlock<B>,
    /// The class token from the globals: 2 → d.
    pub global_embed: EmbedBlock<B>,
    /// The pairwise attention bias (absent when `pair_bias` is off).
    pub pair_embed: Option<PairEmbed<B>>,
    /// The encoder layers.
    pub layers: Vec<EncoderLayer<B>>,
    /// The readout's LayerNorm of the class token.
    pub norm: LayerNorm<B>,
    /// The head.
    pub classify: Linear<B>,
    /// Heads (no parameters).
    pub n_heads: usize,
}

impl RootTransformerConfig {
    /// Initialises the model on `device` (Burn's default initialisers).
    pub fn init<B: Backend>(&self, device: &B::Device) -> RootTransformer<B> {
        assert!(
            self.n_heads > 0 && self.d_model.is_multiple_of(self.n_heads),
            "d_model {} must be a multiple of n_heads {}",
            self.d_model,
            self.n_heads
        );
        let d = self.d_model;
        let norm = || {
            LayerNormConfig::new(d)
                .with_epsilon(LAYER_NORM_EPSILON)
                .init(device)
        };
        let embed = |d_in: usize| EmbedBlock {
            layers: (0..self.embed_layers.max(1))
                .map(|k| LinearConfig::new(if k == 0 { d_in } else { d }, d).init(device))
                .collect(),
            dropout: DropoutConfig::new(self.dropout).init(),
            norm: norm(),
        };
        RootTransformer {
            token_embed: embed(self.d_node),
            global_embed: embed(self.d_global),
            pair_embed: self.pair_bias.then(|| PairEmbed {
                hidden: LinearConfig::new(self.d_pair, self.pair_hidden).init(device),
                out: LinearConfig::new(self.pair_hidden, self.n_heads).init(device),
            }),
            layers: (0..self.n_layers)
                .map(|_| EncoderLayer {
                    self_attn: SelfAttention {
                        in_proj: LinearConfig::new(d, 3 * d).init(device),
                        out_proj: LinearConfig::new(d, d).init(device),
                    },
                    linear1: LinearConfig::new(d, 4 * d).init(device),
                    linear2: LinearConfig::new(4 * d, d).init(device),
                    norm1: norm(),
                    norm2: norm(),
                    dropout: DropoutConfig::new(self.dropout).init(),
                })
                .collect(),
            norm: norm(),
            classify: LinearConfig::new(d, self.n_out).init(device),
            n_heads: self.n_heads,
        }
    }
}

/// LayerNorm over the last dimension with the centred variance (as the Edge_Network's
/// `Mlp::normalize`: burn-flex's one-sweep `layer_norm` loses digits for rows with a large mean).
fn layer_norm<B: Backend, const D: usize>(ln: &LayerNorm<B>, x: Tensor<B, D>) -> Tensor<B, D> {
    let mean = x.clone().mean_dim(D - 1);
    let centred = x - mean;
    let var = (centred.clone() * centred.clone()).mean_dim(D - 1);
    let x_hat = centred / (var + LAYER_NORM_EPSILON).sqrt();
    let mut shape = [1usize; D];
    shape[D - 1] = ln.gamma.dims()[0];
    let y = x_hat * ln.gamma.val().reshape(shape);
    match &ln.beta {
        Some(beta) => y + beta.val().reshape(shape),
        None => y,
    }
}

impl<B: Backend> SelfAttention<B> {
    /// # Shapes
    /// `x [n, s, d]`, `bias [n, h, s, s]` (added to the logits), `masked [n, h, s, s]` (true:
    /// key not attended) → `[n, s, d]`.
    fn forward(
        &self,
        x: Tensor<B, 3>,
        bias: Tensor<B, 4>,
        masked: Tensor<B, 4, Bool>,
        n_heads: usize,
    ) -> Tensor<B, 3> {
        let [n, s, d] = x.dims();
        let dh = d / n_heads;
        let qkv = self.in_proj.forward(x); // [n, s, 3d]
        let heads = |part: usize| {
            qkv.clone()
                .slice([0..n, 0..s, part * d..(part + 1) * d]) // [n, s, d]
                .reshape([n, s, n_heads, dh])
                .swap_dims(1, 2) // [n, h, s, dh]
        };
        let (q, k, v) = (heads(0), heads(1), heads(2));
        let logits = q.matmul(k.swap_dims(2, 3)) / (dh as f64).sqrt() + bias; // [n, h, s, s]
        let attn = softmax(logits.mask_fill(masked, f32::NEG_INFINITY), 3); // [n, h, s, s]
        let out = attn.matmul(v).swap_dims(1, 2).reshape([n, s, d]); // [n, s, d]
        self.out_proj.forward(out)
    }
}

impl<B: Backend> EncoderLayer<B> {
    /// # Shapes
    /// `x [n, s, d]` → `[n, s, d]`.
    fn forward(
        &self,
        x: Tensor<B, 3>,
        bias: Tensor<B, 4>,
        masked: Tensor<B, 4, Bool>,
        n_heads: usize,
    ) -> Tensor<B, 3> {
        let a = self
            .self_attn
            .forward(layer_norm(&self.norm1, x.clone()), bias, masked, n_heads);
        let x = x + self.dropout.forward(a); // [n, s, d]
        let h = gelu(self.linear1.forward(layer_norm(&self.norm2, x.clone()))); // [n, s, 4d]
        let f = self.linear2.forward(self.dropout.forward(h)); // [n, s, d]
        x + self.dropout.forward(f)
    }
}

impl<B: Backend> RootTransformer<B> {
    /// Logits of a padded batch of events.
    ///
    /// # Shapes
    /// `batch`: `n` events of up to `l` tokens → `[n, n_out]`.
    pub fn forward(&self, batch: &TokenBatch, device: &B::Device) -> Tensor<B, 2> {
        let (n, l) = (batch.n_events, batch.n_tokens);
        let s = l + 1;
        let h = self.n_heads;
        let [d, _] = self.classify.weight.dims();
        let tokens = Tensor::<B, 2>::from_data(
            TensorData::new(batch.tokens.clone(), [n * l, batch.d_token]),
            device,
        );
        let tokens = self.token_embed.forward(tokens).reshape([n, l, d]); // [n, l, d]
        let globals = Tensor::<B, 2>::from_data(
            TensorData::new(batch.globals.clone(), [n, batch.d_global]),
            device,
        );
        let cls = self.global_embed.forward(globals).reshape([n, 1, d]); // [n, 1, d]
        let mut x = Tensor::cat(vec![cls, tokens], 1); // [n, s, d]

        // Keys that are padding are never attended (the class token always is).
        let mut key_pad = vec![false; n * s];
        for e in 0..n {
            for t in 0..l {
                key_pad[e * s + 1 + t] = batch.padding[e * l + t];
            }
        }
        let masked = Tensor::<B, 2, Bool>::from_data(TensorData::new(key_pad, [n, s]), device)
            .reshape([n, 1, 1, s])
            .expand([n, h, s, s]); // [n, h, s, s]
        let bias = match &self.pair_embed {
            Some(p) => {
                let pairs = Tensor::<B, 2>::from_data(
                    TensorData::new(batch.pair.clone(), [n * l * l, batch.d_pair]),
                    device,
                );
                let b = p.out.forward(relu(p.hidden.forward(pairs))); // [n·l·l, h]
                let b = b.reshape([n, l, l, h]).permute([0, 3, 1, 2]); // [n, h, l, l]
                let valid = Tensor::<B, 2>::from_data(
                    TensorData::new(batch.pair_valid(), [n, l * l]),
                    device,
                )
                .reshape([n, 1, l, l]); // [n, 1, l, l]
                Tensor::<B, 4>::zeros([n, h, s, s], device)
                    .slice_assign([0..n, 0..h, 1..s, 1..s], b * valid) // [n, h, s, s]
            }
            None => Tensor::<B, 4>::zeros([n, h, s, s], device),
        };
        for layer in &self.layers {
            x = layer.forward(x, bias.clone(), masked.clone(), h);
        }
        let cls = x.slice([0..n, 0..1, 0..d]).reshape([n, d]); // [n, d]
        self.classify.forward(layer_norm(&self.norm, cls)) // [n, n_out]
    }
}

/// The checkpoint path (Burn's field names) of the head's weight, `[d, n_out]`.
pub const HEAD_WEIGHT: &str = "classify.weight";

/// Whether the parameter at checkpoint path `path` belongs to the head (what trains when the
/// backbone is frozen).
pub fn is_head_parameter(path: &str) -> bool {
    path.strip_prefix("classify")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

impl<B: Backend> RootTransformer<B> {
    /// Outputs of the head.
    pub fn n_out(&self) -> usize {
        let [_, n] = self.classify.weight.dims();
        n
    }

    /// Replaces `classify` with a new `Linear(d, n_out)` for fine-tuning, initialised as PyTorch
    /// does (weight and bias uniform in ±1/√d) from `seed`; everything else is kept.
    pub fn with_new_head(self, n_out: usize, seed: u64, device: &B::Device) -> Self {
        let [d, _] = self.classify.weight.dims();
        let classify = gnn4c_family::seeded_linear(d, n_out, seed, device);
        RootTransformer { classify, ..self }
    }

    /// Marks every parameter but the head's as not requiring gradients (`frozen_backbone`
    /// fine-tuning).
    pub fn freeze_backbone(self) -> Self {
        RootTransformer {
            token_embed: self.token_embed.no_grad(),
            global_embed: self.global_embed.no_grad(),
            pair_embed: self.pair_embed.map(Module::no_grad),
            layers: self.layers.into_iter().map(Module::no_grad).collect(),
            norm: self.norm.no_grad(),
            classify: self.classify,
            n_heads: self.n_heads,
        }
    }
}

impl<B: Backend> Classifier<B> for RootTransformer<B> {
    type Input = TokenBatch;

    fn logits(&self, input: &TokenBatch, device: &B::Device) -> Tensor<B, 2> {
        self.forward(input, device)
    }
}
