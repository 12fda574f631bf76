//! The ROOT-Transformer (docs/root-transformer.md; PyTorch reference
//! `benchmarks/reference/root_transformer.py`): the selected objects of an event as tokens, a
//! class token from the globals, pre-norm encoder layers with an optional pairwise attention bias
//! from the objects' (Δη, Δφ, ΔR) (ParT-style), and a head on the class token.
//!
//! Parameter names mirror the reference's PyTorch state dict (`layers.0.self_attn.in_proj_weight`
//! is our `layers.0.self_attn.in_proj.weight`); `weights.rs` maps the few that differ.

use burn::nn::{Dropout, DropoutConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::activation::{relu, softmax};
use gnn4c_family::Classifier;

use crate::batch::TokenBatch;

/// LayerNorm ε (PyTorch's default).
pub const LAYER_NORM_EPSILON: f64 = 1e-5;

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

/// The ROOT-Transformer. `K` runs its blocks (LayerNorms, linear layers, attention, feed-forward
/// half, pair-bias MLP)
/// ([`TransformerKernel`]; Burn's operations by default); it holds no parameters and is not
/// part of the record, so checkpoints and weights do not depend on it.
#[derive(Module, Debug)]
pub struct RootTransformer<B: Backend, K = OpByOp> {
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
    /// How its blocks run.
    #[module(skip)]
    pub kernel: K,
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
            kernel: OpByOp,
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

/// How a [`RootTransformer`] runs its blocks — LayerNorms, linear layers, attention, the
/// feed-forward half and the pair-bias MLP (its
/// `kernel` field). The provided methods are Burn's operations one at a time, which every
/// backend (and autodiff) supports; a backend extension may run each as one operation instead,
/// computing the same function (`FusedTransformer`, this crate's `cpu/` module, does on the CPU
/// backend, forward and backward).
///
/// Tokens are packed: the rows of every event's sequence (its class token, then its objects)
/// one after the other, without padding ([`Sequences`]).
pub trait TransformerKernel<B: Backend> {
    /// LayerNorm over rows, with the centred variance.
    ///
    /// # Shapes
    /// `x [rows, d]` → `[rows, d]`.
    fn layer_norm(&self, norm: &LayerNorm<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        layer_norm(norm, x)
    }

    /// `linear(x)`.
    ///
    /// # Shapes
    /// `x [rows, d_in]` → `[rows, d_out]`.
    fn linear(&self, linear: &Linear<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        linear.forward(x)
    }

    /// `linear(LayerNorm(x))`, and its exact GELU with `gelu`.
    ///
    /// # Shapes
    /// `x [rows, d_in]` → `[rows, d_out]`.
    fn norm_linear(
        &self,
        norm: &LayerNorm<B>,
        linear: &Linear<B>,
        x: Tensor<B, 2>,
        gelu: bool,
    ) -> Tensor<B, 2> {
        norm_then_linear(self, norm, linear, x, gelu)
    }

    /// The pair-bias MLP on the object pairs' features, zero on the diagonal pairs:
    /// `embed.out(ReLU(embed.hidden(features))) · off_diagonal`.
    ///
    /// # Shapes
    /// `features [pairs, d_pair]`, `off_diagonal [pairs, 1]` → `[pairs, heads]`.
    fn pair_bias(
        &self,
        embed: &PairEmbed<B>,
        features: Tensor<B, 2>,
        off_diagonal: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        embed.out.forward(relu(embed.hidden.forward(features))) * off_diagonal
    }

    /// The feed-forward half of a pre-norm layer: `x + second(GELU(first(LayerNorm(x))))`.
    ///
    /// # Shapes
    /// `x [rows, d]` → `[rows, d]`.
    fn feed_forward(
        &self,
        norm: &LayerNorm<B>,
        first: &Linear<B>,
        second: &Linear<B>,
        x: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        feed_forward_in_steps(self, norm, first, second, x)
    }

    /// `residual + linear(x)`.
    ///
    /// # Shapes
    /// `x [rows, d_in]`, `residual [rows, d_out]` → `[rows, d_out]`.
    fn linear_residual(
        &self,
        linear: &Linear<B>,
        x: Tensor<B, 2>,
        residual: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        residual + linear.forward(x)
    }

    /// `GELU(linear(x))`, the exact (erf) GELU.
    ///
    /// # Shapes
    /// `x [rows, d_in]` → `[rows, d_out]`.
    fn linear_gelu(&self, linear: &Linear<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        exact_gelu(linear.forward(x))
    }

    /// `layers` one after the other, every row through each ([`layers_one_at_a_time`] by
    /// default).
    ///
    /// # Shapes
    /// `x [Σ s, d]`, `bias [Σ (s−1)², h]` → `[Σ s, d]`.
    fn encoder(
        &self,
        layers: &[EncoderLayer<B>],
        x: Tensor<B, 2>,
        bias: Option<Tensor<B, 2>>,
        seqs: &Sequences,
        n_heads: usize,
    ) -> Tensor<B, 2>
    where
        Self: Sized,
    {
        layers_one_at_a_time(self, layers, x, bias.as_ref(), seqs, n_heads)
    }

    /// Multi-head self-attention of each sequence over itself, from the input projection's
    /// output: per head, `softmax(q·kᵀ/√dₕ + bias)·v`, heads side by side.
    ///
    /// # Shapes
    /// `qkv [Σ s, 3d]` (q, k, v), `pair_bias [Σ (s−1)², heads]` (object pair (i, j) of a
    /// sequence at its row `i·(s−1) + j`; the class token's row and column get no bias) →
    /// `[Σ s, d]`, or with `class_only` the class tokens' rows alone, `[n, d]` (every row still
    /// a key and a value; only the class token a query).
    fn attention(
        &self,
        qkv: Tensor<B, 2>,
        pair_bias: Option<Tensor<B, 2>>,
        seqs: &Sequences,
        n_heads: usize,
        class_only: bool,
    ) -> Tensor<B, 2> {
        padded_attention(qkv, pair_bias, seqs, n_heads, class_only)
    }
}

/// The exact GELU, `x·(1 + erf(x/√2))/2`, from Burn's `erf`. Not Burn's `gelu`: its gradient
/// on backends without their own (`gelu_backward`'s default: CUDA and wgpu) is the tanh
/// approximation's, up to 3·10⁻⁴ of a weight gradient's scale off the exact one (measured on
/// wgpu against the CPU); `erf`'s gradient is exact everywhere.
///
/// # Shapes
/// any → the same.
pub(crate) fn exact_gelu<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let cdf = x
        .clone()
        .div_scalar(std::f64::consts::SQRT_2)
        .erf()
        .add_scalar(1.0)
        .mul_scalar(0.5);
    x * cdf
}

/// [`TransformerKernel::encoder`] as each layer's blocks run by `kernel`, one layer after the
/// other: the default, and what a kernel that runs the stack as one operation runs where it
/// cannot (training).
pub fn layers_one_at_a_time<B: Backend, K: TransformerKernel<B>>(
    kernel: &K,
    layers: &[EncoderLayer<B>],
    x: Tensor<B, 2>,
    bias: Option<&Tensor<B, 2>>,
    seqs: &Sequences,
    n_heads: usize,
) -> Tensor<B, 2> {
    layers.iter().fold(x, |x, layer| {
        layer.forward(x, bias.cloned(), seqs, n_heads, kernel, None)
    })
}

/// [`TransformerKernel::norm_linear`] as `kernel`'s LayerNorm, then its linear layer (with the
/// GELU): the default, and what a kernel that fuses the two runs where it cannot.
pub fn norm_then_linear<B: Backend, K: TransformerKernel<B> + ?Sized>(
    kernel: &K,
    norm: &LayerNorm<B>,
    linear: &Linear<B>,
    x: Tensor<B, 2>,
    gelu: bool,
) -> Tensor<B, 2> {
    let y = kernel.layer_norm(norm, x);
    if gelu {
        kernel.linear_gelu(linear, y)
    } else {
        kernel.linear(linear, y)
    }
}

/// [`TransformerKernel::feed_forward`] as `kernel`'s LayerNorm + first linear layer + GELU, then
/// its second linear layer with the residual: the default, and what a kernel that fuses the
/// half runs where it cannot.
pub fn feed_forward_in_steps<B: Backend, K: TransformerKernel<B> + ?Sized>(
    kernel: &K,
    norm: &LayerNorm<B>,
    first: &Linear<B>,
    second: &Linear<B>,
    x: Tensor<B, 2>,
) -> Tensor<B, 2> {
    let h = kernel.norm_linear(norm, first, x.clone(), true);
    kernel.linear_residual(second, h, x)
}

/// Burn's operations one at a time: the reference, for every backend and for training.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpByOp;

impl<B: Backend> TransformerKernel<B> for OpByOp {}

/// The sequences of a packed batch: event `e`'s class token and objects are rows
/// `start(e)..start(e) + lens[e]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sequences {
    /// Per event, its class token plus its objects (≥ 1).
    pub lens: Vec<usize>,
}

impl Sequences {
    /// All object pairs, `Σ (s − 1)²`.
    pub fn pairs(&self) -> usize {
        self.lens.iter().map(|&s| (s - 1) * (s - 1)).sum()
    }

    /// The longest sequence.
    pub fn longest(&self) -> usize {
        self.lens.iter().copied().max().unwrap_or(1)
    }
}

/// [`TransformerKernel::attention`] with Burn's operations: the sequences padded to the longest
/// (`[n, s, ·]`), padding keys masked, then the packed rows (or the class tokens' alone) taken
/// back. Padding slots read a zero row.
fn padded_attention<B: Backend>(
    qkv: Tensor<B, 2>,
    pair_bias: Option<Tensor<B, 2>>,
    seqs: &Sequences,
    n_heads: usize,
    class_only: bool,
) -> Tensor<B, 2> {
    let device = qkv.device();
    let [rows, d3] = qkv.dims();
    let d = d3 / 3;
    let dh = d / n_heads;
    let (n, s) = (seqs.lens.len(), seqs.longest());
    let index = |v: Vec<usize>| {
        let len = v.len();
        let v: Vec<i64> = v.into_iter().map(|i| i as i64).collect();
        Tensor::<B, 1, Int>::from_data(TensorData::new(v, [len]), &device)
    };
    // Padded slot (e, i) → its packed row, or the zero row `rows`.
    let (mut slot_row, mut real_slot, mut key_pad) = (Vec::new(), Vec::new(), Vec::new());
    let mut start = 0;
    for &len in &seqs.lens {
        for i in 0..s {
            real_slot.extend((i < len).then_some(slot_row.len()));
            slot_row.push(if i < len { start + i } else { rows });
            key_pad.push(i >= len);
        }
        start += len;
    }
    let qkv = Tensor::cat(vec![qkv, Tensor::zeros([1, d3], &device)], 0)
        .select(0, index(slot_row))
        .reshape([n, s, d3]); // [n, s, 3d]
    let masked = Tensor::<B, 2, Bool>::from_data(TensorData::new(key_pad, [n, s]), &device)
        .reshape([n, 1, 1, s])
        .expand([n, n_heads, s, s]); // [n, h, s, s]
    let bias = match pair_bias {
        Some(b) => {
            let pairs = seqs.pairs();
            let mut pair_row = Vec::with_capacity(n * s * s);
            let mut first = 0;
            for &len in &seqs.lens {
                for i in 0..s {
                    for j in 0..s {
                        let object_pair = (1..len).contains(&i) && (1..len).contains(&j);
                        pair_row.push(if object_pair {
                            first + (i - 1) * (len - 1) + j - 1
                        } else {
                            pairs
                        });
                    }
                }
                first += (len - 1) * (len - 1);
            }
            Tensor::cat(vec![b, Tensor::zeros([1, n_heads], &device)], 0)
                .select(0, index(pair_row))
                .reshape([n, s, s, n_heads])
                .permute([0, 3, 1, 2]) // [n, h, s, s]
        }
        None => Tensor::zeros([n, n_heads, s, s], &device),
    };
    let heads = |part: usize| {
        qkv.clone()
            .slice([0..n, 0..s, part * d..(part + 1) * d]) // [n, s, d]
            .reshape([n, s, n_heads, dh])
            .swap_dims(1, 2) // [n, h, s, dh]
    };
    let (q, k, v) = (heads(0), heads(1), heads(2));
    let logits = q.matmul(k.swap_dims(2, 3)) / (dh as f64).sqrt() + bias; // [n, h, s, s]
    let attn = softmax(logits.mask_fill(masked, f32::NEG_INFINITY), 3); // [n, h, s, s]
    let out = attn.matmul(v).swap_dims(1, 2).reshape([n * s, d]); // [n·s, d]
    if class_only {
        return out.select(0, index((0..n).map(|e| e * s).collect())); // [n, d]
    }
    out.select(0, index(real_slot)) // [Σ s, d]
}

impl<B: Backend> EmbedBlock<B> {
    /// # Shapes
    /// `x [n, d_in]` → `[n, d]`.
    fn forward<K: TransformerKernel<B>>(&self, x: Tensor<B, 2>, kernel: &K) -> Tensor<B, 2> {
        let mut x = x;
        for layer in &self.layers {
            x = self.dropout.forward(relu(layer.forward(x))); // [n, d]
        }
        kernel.layer_norm(&self.norm, x)
    }
}

impl<B: Backend> EncoderLayer<B> {
    /// The layer's output at the class tokens alone (`class_rows`, their packed rows) or at
    /// every row (`None`): every row is a key and a value of its sequence's attention, and only
    /// the rows asked for are its queries and go on through the output projection and the
    /// feed-forward half (each row's own computation).
    ///
    /// # Shapes
    /// `x [Σ s, d]` (packed sequences), `bias [Σ (s−1)², h]`, `class_rows [n]` → `[n, d]`
    /// (`[Σ s, d]` with `None`).
    fn forward<K: TransformerKernel<B>>(
        &self,
        x: Tensor<B, 2>,
        bias: Option<Tensor<B, 2>>,
        seqs: &Sequences,
        n_heads: usize,
        kernel: &K,
        class_rows: Option<Tensor<B, 1, Int>>,
    ) -> Tensor<B, 2> {
        let qkv = kernel.norm_linear(&self.norm1, &self.self_attn.in_proj, x.clone(), false); // [Σ s, 3d]
        let class_only = class_rows.is_some();
        let a = kernel.attention(qkv, bias, seqs, n_heads, class_only); // [Σ s, d] or [n, d]
        let x = match class_rows {
            Some(rows) => x.select(0, rows), // [n, d]
            None => x,
        };
        // Dropout on the residual branches while training; none (the residual fused into the
        // projection) otherwise.
        let device = x.device();
        let dropping = self.dropout.prob != 0.0 && B::ad_enabled(&device);
        let x = if dropping {
            x + self.dropout.forward(self.self_attn.out_proj.forward(a))
        } else {
            kernel.linear_residual(&self.self_attn.out_proj, a, x)
        }; // [Σ s, d]
        if dropping {
            let h = kernel.norm_linear(&self.norm2, &self.linear1, x.clone(), true); // [Σ s, 4d]
            let f = self.linear2.forward(self.dropout.forward(h)); // [Σ s, d]
            x + self.dropout.forward(f)
        } else {
            kernel.feed_forward(&self.norm2, &self.linear1, &self.linear2, x)
        }
    }
}

/// A padded batch as the model computes on it: only real tokens, each event's sequence (class
/// token, then objects) in consecutive rows.
struct Packed {
    /// The sequences.
    seqs: Sequences,
    /// `[Σ objects, d_token]`.
    tokens: Vec<f32>,
    /// `[Σ objects², d_pair]`: object pair (i, j) of each event.
    pairs: Vec<f32>,
    /// `[Σ objects²]`: 1 off the diagonal, 0 on it (no bias for a token with itself).
    off_diagonal: Vec<f32>,
    /// Packed row of each sequence row: the class token of event `e` is row `e` of
    /// `[classes; objects]`, object `t` of event `e` row `n + (its object index)`.
    order: Vec<i64>,
    /// The class token's packed row per event.
    class_rows: Vec<i64>,
}

impl Packed {
    /// Real tokens come first in each event's padded row (`TokenBatch::collate`).
    fn of(batch: &TokenBatch) -> Self {
        let (n, l) = (batch.n_events, batch.n_tokens);
        let (dt, dp) = (batch.d_token, batch.d_pair);
        let counts: Vec<usize> = (0..n)
            .map(|e| {
                batch.padding[e * l..(e + 1) * l]
                    .iter()
                    .take_while(|p| !**p)
                    .count()
            })
            .collect();
        let objects: usize = counts.iter().sum();
        let mut p = Packed {
            seqs: Sequences {
                lens: counts.iter().map(|k| k + 1).collect(),
            },
            tokens: Vec::with_capacity(objects * dt),
            pairs: Vec::new(),
            off_diagonal: Vec::new(),
            order: Vec::with_capacity(n + objects),
            class_rows: Vec::with_capacity(n),
        };
        let mut object = n;
        for (e, &k) in counts.iter().enumerate() {
            p.tokens
                .extend_from_slice(&batch.tokens[e * l * dt..(e * l + k) * dt]);
            p.class_rows.push(p.order.len() as i64);
            p.order.push(e as i64);
            p.order.extend((object..object + k).map(|r| r as i64));
            object += k;
            for i in 0..k {
                let row = ((e * l + i) * l) * dp;
                p.pairs.extend_from_slice(&batch.pair[row..row + k * dp]);
                p.off_diagonal
                    .extend((0..k).map(|j| if i == j { 0.0 } else { 1.0 }));
            }
        }
        p
    }
}

impl<B: Backend, K: TransformerKernel<B>> RootTransformer<B, K> {
    /// Logits of a padded batch of events (computed on the real tokens alone).
    ///
    /// # Shapes
    /// `batch`: `n` events of up to `l` tokens → `[n, n_out]`.
    pub fn forward(&self, batch: &TokenBatch, device: &B::Device) -> Tensor<B, 2> {
        let n = batch.n_events;
        let h = self.n_heads;
        let packed = Packed::of(batch);
        let objects = packed.order.len() - n;
        let pairs = packed.off_diagonal.len();
        let rows = |v: Vec<i64>| {
            let len = v.len();
            Tensor::<B, 1, Int>::from_data(TensorData::new(v, [len]), device)
        };
        let tokens = Tensor::<B, 2>::from_data(
            TensorData::new(packed.tokens, [objects, batch.d_token]),
            device,
        );
        let tokens = self.token_embed.forward(tokens, &self.kernel); // [Σ k, d]
        let globals = Tensor::<B, 2>::from_data(
            TensorData::new(batch.globals.clone(), [n, batch.d_global]),
            device,
        );
        let cls = self.global_embed.forward(globals, &self.kernel); // [n, d]
        let mut x = Tensor::cat(vec![cls, tokens], 0).select(0, rows(packed.order)); // [Σ s, d]
        let bias = self.pair_embed.as_ref().map(|p| {
            let features = Tensor::<B, 2>::from_data(
                TensorData::new(packed.pairs, [pairs, batch.d_pair]),
                device,
            );
            let off_diagonal =
                Tensor::<B, 2>::from_data(TensorData::new(packed.off_diagonal, [pairs, 1]), device);
            self.kernel.pair_bias(p, features, off_diagonal) // [Σ k², h]
        });
        // The head reads the class tokens alone, so in the last layer only they are queries and
        // only their rows go on past attention: the other rows' outputs would be discarded.
        let class_rows = rows(packed.class_rows);
        let cls = match self.layers.split_last() {
            Some((last, earlier)) => {
                x = self
                    .kernel
                    .encoder(earlier, x, bias.clone(), &packed.seqs, h);
                last.forward(x, bias, &packed.seqs, h, &self.kernel, Some(class_rows))
            }
            None => x.select(0, class_rows),
        }; // [n, d]
        self.classify
            .forward(self.kernel.layer_norm(&self.norm, cls)) // [n, n_out]
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

impl<B: Backend, K> RootTransformer<B, K> {
    /// The same model run by `kernel`.
    pub fn with_kernel<K2>(self, kernel: K2) -> RootTransformer<B, K2> {
        RootTransformer {
            token_embed: self.token_embed,
            global_embed: self.global_embed,
            pair_embed: self.pair_embed,
            layers: self.layers,
            norm: self.norm,
            classify: self.classify,
            n_heads: self.n_heads,
            kernel,
        }
    }

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
            kernel: self.kernel,
        }
    }
}

impl<B: Backend, K: TransformerKernel<B> + Clone + Send + std::fmt::Debug> Classifier<B>
    for RootTransformer<B, K>
{
    type Input = TokenBatch;

    fn logits(&self, input: &TokenBatch, device: &B::Device) -> Tensor<B, 2> {
        self.forward(input, device)
    }
}
