//! Edge_Network: encoders, T shared message-passing steps, mean readouts, decoder, head.
//!
//! Paper: "Pretrained event classification model for high energy physics analysis"
//! (arXiv:2412.10665). Legacy implementation: PyTorch + DGL `Edge_Network` (ROOT-GNN), whose
//! state-dict names we keep (`node_encoder.0.weight` … `classify.bias`). Where ours differs:
//! nothing numerically; readouts divide by `max(count, 1)` so a graph without edges (or a padding
//! graph without nodes) reads out zeros, as the contract requires.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::IndexingUpdateOp;
use burn::tensor::activation::relu;
use gnn4c_family::Classifier;
use gnn4c_graphs::{GraphBatch, HostBatch};

/// The epsilon of every MLP block's LayerNorm (contract §5; PyTorch's default).
pub const LAYER_NORM_EPSILON: f64 = 1e-5;

/// An MLP block: `n_layers` × [Linear → ReLU → Dropout], then LayerNorm (contract §5).
#[derive(Config, Debug)]
pub struct MlpConfig {
    /// Input width.
    pub d_in: usize,
    /// Output width.
    pub d_out: usize,
    /// Hidden width.
    #[config(default = 64)]
    pub d_hidden: usize,
    /// Linear layers (≥ 1).
    #[config(default = 4)]
    pub n_layers: usize,
    /// Dropout probability after every ReLU.
    #[config(default = 0.0)]
    pub dropout: f64,
}

/// See [`MlpConfig`]. PyTorch names: Linear k at index 3k, LayerNorm at 3·n_layers.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    /// The linear layers.
    pub layers: Vec<Linear<B>>,
    /// Dropout (shared: it has no parameters).
    pub dropout: Dropout,
    /// The final LayerNorm (eps 1e-5, affine).
    pub norm: LayerNorm<B>,
}

impl MlpConfig {
    /// Initialises the block on `device`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Mlp<B> {
        assert!(self.n_layers >= 1, "an MLP block needs at least one layer");
        let widths: Vec<(usize, usize)> = (0..self.n_layers)
            .map(|k| {
                let d_in = if k == 0 { self.d_in } else { self.d_hidden };
                let d_out = if k + 1 == self.n_layers {
                    self.d_out
                } else {
                    self.d_hidden
                };
                (d_in, d_out)
            })
            .collect();
        Mlp {
            layers: widths
                .into_iter()
                .map(|(i, o)| LinearConfig::new(i, o).init(device))
                .collect(),
            dropout: DropoutConfig::new(self.dropout).init(),
            norm: LayerNormConfig::new(self.d_out)
                .with_epsilon(LAYER_NORM_EPSILON)
                .init(device),
        }
    }
}

/// One part of a concatenated MLP input: its rows, and the index that gathers them (if any).
pub type ConcatPart<B> = (Tensor<B, 2>, Option<Tensor<B, 1, Int>>);

/// How an [`EdgeNetwork`] runs its MLP blocks (its `kernel` field).
/// The provided methods are Burn's operations one at a time ([`Mlp::forward`],
/// [`Mlp::forward_concat`]), which every backend (and autodiff) supports; a backend extension
/// may run a whole block at once instead, computing the same function (`FusedMlp`, this crate's
/// `cpu/` module, does on the CPU backend, forward and backward).
pub trait MlpKernel<B: Backend> {
    /// [`Mlp::forward`].
    ///
    /// # Shapes
    /// `x [n, d_in]` → `[n, d_out]`.
    fn forward(&self, mlp: &Mlp<B>, x: Tensor<B, 2>) -> Tensor<B, 2> {
        mlp.forward(x)
    }

    /// [`Mlp::forward_concat`].
    ///
    /// # Shapes
    /// every part → `[n, d_k]` after its gather; → `[n, d_out]`.
    fn forward_concat(&self, mlp: &Mlp<B>, parts: Vec<ConcatPart<B>>) -> Tensor<B, 2> {
        mlp.forward_concat(parts)
    }
}

/// Burn's operations one at a time: the reference, for every backend and for training.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpByOp;

impl<B: Backend> MlpKernel<B> for OpByOp {}

impl<B: Backend> Mlp<B> {
    /// # Shapes
    /// `x [n, d_in]` → `[n, d_out]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let mut x = x;
        for layer in &self.layers {
            x = self.dropout.forward(relu(layer.forward(x)));
        }
        self.normalize(x)
    }

    /// The block's LayerNorm with the variance of the centred values, written with Burn's
    /// elementary operations (the backend trait's default `layer_norm`). Not `LayerNorm::forward`:
    /// that calls the backend's own `layer_norm`, which burn-flex 0.21 computes as
    /// `E[x²] − E[x]²` in one sweep — digits lost, or NaN, for rows whose mean is large against
    /// their spread.
    ///
    /// # Shapes
    /// `x [n, d_out]` → `[n, d_out]`.
    pub fn normalize(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let mean = x.clone().mean_dim(1); // [n, 1]
        let centred = x - mean; // [n, d_out]
        let var = (centred.clone() * centred.clone()).mean_dim(1); // [n, 1]
        let x_hat = centred / (var + LAYER_NORM_EPSILON).sqrt(); // [n, d_out]
        let y = x_hat * self.norm.gamma.val().unsqueeze_dim(0);
        match &self.norm.beta {
            Some(beta) => y + beta.val().unsqueeze_dim(0),
            None => y,
        }
    }

    /// The first layer's weight rows `rows` (the part of `W` that multiplies those input
    /// columns): `x[:, rows] · W[rows, :]` is that part of the first layer's output.
    ///
    /// # Shapes
    /// → `[rows.len(), d_hidden]`.
    pub fn first_weight_rows(&self, rows: std::ops::Range<usize>) -> Tensor<B, 2> {
        let w = self.layers[0].weight.val(); // [d_in, d_first]
        let [_, d_first] = w.dims();
        w.slice([rows, 0..d_first])
    }

    /// [`Mlp::forward`] of the concatenation `[x_0, x_1, …]` (widths `d_k`), without building
    /// it: the first layer is `Σ_k x_k · W_k + b` with `W_k` the rows of `W` for part k, and
    /// `gathered` parts are computed on their (fewer) source rows, then gathered. The same
    /// function as `forward(cat(parts))` up to float summation order.
    ///
    /// `parts`: `(x, Some(index))` means the part's rows are `x.select(0, index)`.
    ///
    /// # Shapes
    /// every part → `[n, d_k]` after its gather; → `[n, d_out]`.
    pub fn forward_concat(&self, parts: Vec<ConcatPart<B>>) -> Tensor<B, 2> {
        let first = &self.layers[0];
        let mut offset = 0;
        let mut pre: Option<Tensor<B, 2>> = None;
        for (x, index) in parts {
            let [_, d_k] = x.dims();
            let y = x.matmul(self.first_weight_rows(offset..offset + d_k)); // [n_src, d_first]
            offset += d_k;
            let y = match index {
                Some(i) => y.select(0, i), // [n, d_first]
                None => y,
            };
            pre = Some(match pre {
                Some(p) => p + y,
                None => y,
            });
        }
        let mut x = pre.expect("at least one part");
        if let Some(b) = &first.bias {
            x = x + b.val().unsqueeze_dim(0); // [n, d_first]
        }
        x = self.dropout.forward(relu(x));
        for layer in &self.layers[1..] {
            x = self.dropout.forward(relu(layer.forward(x)));
        }
        self.normalize(x)
    }
}

/// Hyperparameters of the Edge_Network (defaults: contract §5).
#[derive(Config, Debug)]
pub struct EdgeNetworkConfig {
    /// Outputs of `classify` (binary 1, K-class K).
    pub n_out: usize,
    /// Hidden width H.
    #[config(default = 64)]
    pub d_hidden: usize,
    /// Linear layers per MLP block L.
    #[config(default = 4)]
    pub n_layers: usize,
    /// Message-passing steps T (sharing one set of update blocks).
    #[config(default = 4)]
    pub n_steps: usize,
    /// Dropout probability.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Node feature width.
    #[config(default = 7)]
    pub d_node: usize,
    /// Edge feature width.
    #[config(default = 3)]
    pub d_edge: usize,
    /// Global feature width.
    #[config(default = 2)]
    pub d_global: usize,
}

/// The ROOT-GNN Edge_Network. Field names are the PyTorch state dict's. `K` runs its MLP blocks
/// ([`MlpKernel`]; Burn's operations by default); it holds no parameters and is not part of
/// the record, so checkpoints and weights do not depend on it.
#[derive(Module, Debug)]
pub struct EdgeNetwork<B: Backend, K = OpByOp> {
    /// mlp(d_node, H).
    pub node_encoder: Mlp<B>,
    /// mlp(d_edge, H).
    pub edge_encoder: Mlp<B>,
    /// mlp(d_global, H).
    pub global_encoder: Mlp<B>,
    /// mlp(4H, H), shared by every step.
    pub edge_update: Mlp<B>,
    /// mlp(3H, H), shared by every step.
    pub node_update: Mlp<B>,
    /// mlp(3H, H), shared by every step.
    pub global_update: Mlp<B>,
    /// mlp(H, H).
    pub global_decoder: Mlp<B>,
    /// Linear(H, n_out): the head; everything else is the backbone.
    pub classify: Linear<B>,
    /// T.
    pub n_steps: usize,
    /// How the MLP blocks run.
    #[module(skip)]
    pub kernel: K,
}

impl EdgeNetworkConfig {
    /// Initialises the network on `device` (Burn's default initialisers; seed the backend first).
    pub fn init<B: Backend>(&self, device: &B::Device) -> EdgeNetwork<B> {
        let h = self.d_hidden;
        let mlp = |d_in: usize, d_out: usize| {
            MlpConfig::new(d_in, d_out)
                .with_d_hidden(h)
                .with_n_layers(self.n_layers)
                .with_dropout(self.dropout)
                .init(device)
        };
        EdgeNetwork {
            node_encoder: mlp(self.d_node, h),
            edge_encoder: mlp(self.d_edge, h),
            global_encoder: mlp(self.d_global, h),
            edge_update: mlp(4 * h, h),
            node_update: mlp(3 * h, h),
            global_update: mlp(3 * h, h),
            global_decoder: mlp(h, h),
            classify: LinearConfig::new(h, self.n_out).init(device),
            n_steps: self.n_steps,
            kernel: OpByOp,
        }
    }
}

impl<B: Backend, K> EdgeNetwork<B, K> {
    /// The seven MLP blocks in order, each with its name (the PyTorch state dict's prefix).
    pub fn blocks(&self) -> [(&'static str, &Mlp<B>); 7] {
        [
            ("node_encoder", &self.node_encoder),
            ("edge_encoder", &self.edge_encoder),
            ("global_encoder", &self.global_encoder),
            ("edge_update", &self.edge_update),
            ("node_update", &self.node_update),
            ("global_update", &self.global_update),
            ("global_decoder", &self.global_decoder),
        ]
    }

    /// The same network, its MLP blocks run by `kernel`.
    pub fn with_kernel<K2>(self, kernel: K2) -> EdgeNetwork<B, K2> {
        EdgeNetwork {
            node_encoder: self.node_encoder,
            edge_encoder: self.edge_encoder,
            global_encoder: self.global_encoder,
            edge_update: self.edge_update,
            node_update: self.node_update,
            global_update: self.global_update,
            global_decoder: self.global_decoder,
            classify: self.classify,
            n_steps: self.n_steps,
            kernel,
        }
    }
}

/// The checkpoint path (Burn's field names) of the head's weight, `[H, n_out]`.
pub const HEAD_WEIGHT: &str = "classify.weight";

/// Whether the parameter at checkpoint path `path` belongs to the head (what trains when the
/// backbone is frozen).
pub fn is_head_parameter(path: &str) -> bool {
    path.strip_prefix("classify")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

impl<B: Backend, K: Clone + Send + std::fmt::Debug> EdgeNetwork<B, K> {
    /// Hidden width H.
    pub fn d_hidden(&self) -> usize {
        let [d, _] = self.classify.weight.dims();
        d
    }

    /// Outputs of the head.
    pub fn n_out(&self) -> usize {
        let [_, n] = self.classify.weight.dims();
        n
    }

    /// Replaces `classify` with a new `Linear(H, n_out)` for fine-tuning, initialised as PyTorch
    /// does (weight and bias uniform in ±1/√H) from `seed`; the backbone is kept.
    pub fn with_new_head(self, n_out: usize, seed: u64, device: &B::Device) -> Self {
        let classify = gnn4c_family::seeded_linear(self.d_hidden(), n_out, seed, device);
        EdgeNetwork { classify, ..self }
    }

    /// Marks every backbone parameter as not requiring gradients (`frozen_backbone` fine-tuning):
    /// they receive no gradients, so the optimiser keeps no state for them.
    pub fn freeze_backbone(self) -> Self {
        EdgeNetwork {
            node_encoder: self.node_encoder.no_grad(),
            edge_encoder: self.edge_encoder.no_grad(),
            global_encoder: self.global_encoder.no_grad(),
            edge_update: self.edge_update.no_grad(),
            node_update: self.node_update.no_grad(),
            global_update: self.global_update.no_grad(),
            global_decoder: self.global_decoder.no_grad(),
            classify: self.classify,
            n_steps: self.n_steps,
            kernel: self.kernel,
        }
    }
}

/// Sums `values [n_rows, H]` into `n_groups` rows by `group [n_rows]`.
fn segment_sum<B: Backend>(
    values: Tensor<B, 2>,
    group: Tensor<B, 1, Int>,
    n_groups: usize,
) -> Tensor<B, 2> {
    let [_, d] = values.dims();
    Tensor::zeros([n_groups, d], &values.device()).select_assign(
        0,
        group,
        values,
        IndexingUpdateOp::Add,
    )
}

impl<B: Backend, K: Clone + Send + std::fmt::Debug> EdgeNetwork<B, K> {
    /// The logits of every graph in the batch.
    ///
    /// # Shapes
    /// `batch.node_features [n_nodes, d_node]`, `edge_features [n_edges, d_edge]`,
    /// `global_features [n_graphs, d_global]` → `[n_graphs, n_out]`.
    pub fn forward(&self, batch: &GraphBatch<B>) -> Tensor<B, 2>
    where
        K: MlpKernel<B>,
    {
        let u = self.backbone(batch);
        self.classify.forward(u) // [n_graphs, n_out]
    }

    /// Everything but `classify`: the decoded global representation, the MLP blocks run by the
    /// network's kernel.
    ///
    /// # Shapes
    /// → `[n_graphs, H]`.
    pub fn backbone(&self, batch: &GraphBatch<B>) -> Tensor<B, 2>
    where
        K: MlpKernel<B>,
    {
        let kernel = &self.kernel;
        let [n_nodes, _] = batch.node_features.dims();
        let [n_graphs, _] = batch.global_features.dims();
        // Spans cost nothing without a subscriber; benchmark_model uses them for the per-block split.
        let encoders = tracing::trace_span!("encoders").entered();
        let mut h = kernel.forward(&self.node_encoder, batch.node_features.clone()); // [n_nodes, H]
        let mut e = kernel.forward(&self.edge_encoder, batch.edge_features.clone()); // [n_edges, H]
        let mut u = kernel.forward(&self.global_encoder, batch.global_features.clone()); // [n_graphs, H]
        drop(encoders);
        let inv_nodes = batch
            .n_nodes
            .clone()
            .clamp_min(1.0)
            .recip()
            .unsqueeze_dim(1); // [n_graphs, 1]
        let inv_edges = batch
            .n_edges
            .clone()
            .clamp_min(1.0)
            .recip()
            .unsqueeze_dim(1); // [n_graphs, 1]
        for step in 0..self.n_steps {
            let span = tracing::trace_span!("edge_update", step).entered();
            // edge_update(cat[e, h[src], h[dst], u[graph]]) with its first layer applied to h
            // and u before the gathers: n_nodes + n_graphs rows instead of 3 · n_edges.
            e = kernel.forward_concat(
                &self.edge_update,
                vec![
                    (e, None),
                    (h.clone(), Some(batch.edge_src.clone())),
                    (h.clone(), Some(batch.edge_dst.clone())),
                    (u.clone(), Some(batch.edge_graph.clone())),
                ],
            ); // [n_edges, H]
            drop(span);
            let span = tracing::trace_span!("node_update", step).entered();
            let a = segment_sum(e.clone(), batch.edge_dst.clone(), n_nodes); // [n_nodes, H]
            h = kernel.forward_concat(
                &self.node_update,
                vec![
                    (h, None),
                    (a, None),
                    (u.clone(), Some(batch.node_graph.clone())),
                ],
            ); // [n_nodes, H]
            drop(span);
            let _span = tracing::trace_span!("global_update", step).entered();
            let node_mean =
                segment_sum(h.clone(), batch.node_graph.clone(), n_graphs) * inv_nodes.clone(); // [n_graphs, H]
            let edge_mean =
                segment_sum(e.clone(), batch.edge_graph.clone(), n_graphs) * inv_edges.clone(); // [n_graphs, H]
            u = kernel.forward(
                &self.global_update,
                Tensor::cat(vec![u, node_mean, edge_mean], 1),
            ); // [n_graphs, H]
        }
        let _span = tracing::trace_span!("decoder").entered();
        kernel.forward(&self.global_decoder, u) // [n_graphs, H]
    }
}

impl<B: Backend, K: MlpKernel<B> + Clone + Send + std::fmt::Debug> Classifier<B>
    for EdgeNetwork<B, K>
{
    type Input = HostBatch;

    /// Copies the batch to `device` and runs [`EdgeNetwork::forward`] (with its kernel).
    fn logits(&self, input: &HostBatch, device: &B::Device) -> Tensor<B, 2> {
        let batch = input.to_device::<B>(device);
        self.forward(&batch) // [n_graphs, n_out]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::Flex;
    use burn::tensor::Distribution;

    /// The factorised first layer is the same function as the MLP of the concatenation.
    #[test]
    fn forward_concat_equals_forward_of_the_concatenation() {
        let device = Default::default();
        let mlp = MlpConfig::new(4 * 8, 8)
            .with_d_hidden(16)
            .init::<Flex>(&device);
        let (n_nodes, n_edges, n_graphs) = (7, 20, 3);
        let rand = |n: usize, d: usize| {
            Tensor::<Flex, 2>::random([n, d], Distribution::Normal(0.0, 1.0), &device)
        };
        let idx = |v: Vec<i64>| {
            Tensor::<Flex, 1, Int>::from_data(TensorData::from(v.as_slice()), &device)
        };
        let e = rand(n_edges, 8);
        let h = rand(n_nodes, 8);
        let u = rand(n_graphs, 8);
        let src = idx((0..n_edges as i64).map(|i| i % 7).collect());
        let dst = idx((0..n_edges as i64).map(|i| (i * 3 + 1) % 7).collect());
        let graph = idx((0..n_edges as i64).map(|i| i % 3).collect());
        let direct = mlp.forward(Tensor::cat(
            vec![
                e.clone(),
                h.clone().select(0, src.clone()),
                h.clone().select(0, dst.clone()),
                u.clone().select(0, graph.clone()),
            ],
            1,
        ));
        let factorised = mlp.forward_concat(vec![
            (e, None),
            (h.clone(), Some(src)),
            (h, Some(dst)),
            (u, Some(graph)),
        ]);
        let (a, b) = (
            direct.into_data().to_vec::<f32>().expect("f32"),
            factorised.into_data().to_vec::<f32>().expect("f32"),
        );
        // Only the summation order of the first layer differs: LayerNorm outputs are O(1), so
        // f32 rounding stays far below the contract's 1e-5 parity tolerance.
        let max = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(max <= 1e-5, "max |Δ| = {max}");
    }
}
