//! The ROOT-Transformer as a `gnn4c_family::ModelFamily`: config, batches, head, frozen backbone,
//! weights; and its kernels on the CPU backend (`gnn4c_family::Kernels`).

use std::path::Path;

use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use gnn4c_family::{
    ArrayValues, Batch, EventInputs, InputWidths, Kernels, ModelFamily, NamedArray, SourceError,
    WeightsError, batch_of,
};

use crate::FusedTransformer;
use crate::batch::{TokenBatch, TokenEvent};
use crate::model::{RootTransformer, RootTransformerConfig, is_head_parameter};

/// The ROOT-Transformer family (`model: root_transformer`): a transformer over an event's objects.
#[derive(Debug, Clone, Copy, Default)]
pub struct RootTransformerFamily;

impl ModelFamily for RootTransformerFamily {
    type Config = RootTransformerConfig;
    type Input = TokenBatch;
    type Model<B: Backend> = RootTransformer<B>;

    fn config(n_out: usize) -> RootTransformerConfig {
        RootTransformerConfig::new(n_out)
    }

    fn n_out(config: &RootTransformerConfig) -> usize {
        config.n_out
    }

    fn check(config: &RootTransformerConfig) -> Result<(), String> {
        let (d, heads) = (config.d_model, config.n_heads);
        if d == 0 || heads == 0 || !d.is_multiple_of(heads) {
            return Err(format!(
                "model.n_heads {heads} must divide model.d_model {d} (each head is d_model / n_heads wide; both above 0)"
            ));
        }
        Ok(())
    }

    fn with_inputs(config: &RootTransformerConfig, widths: InputWidths) -> RootTransformerConfig {
        RootTransformerConfig {
            d_node: widths.d_node,
            d_global: widths.d_global,
            d_pair: widths.d_pair,
            ..config.clone()
        }
    }

    fn inputs(config: &RootTransformerConfig) -> InputWidths {
        InputWidths {
            d_node: config.d_node,
            d_global: config.d_global,
            d_pair: config.d_pair,
        }
    }

    fn batch(
        config: &RootTransformerConfig,
        events: Vec<EventInputs>,
    ) -> Result<Batch<TokenBatch>, SourceError> {
        let dense: Vec<Vec<f32>> = events
            .iter()
            .map(|e| dense_pairs(e.n_objects, config.d_pair, &e.pairs))
            .collect();
        let tokens: Vec<TokenEvent<'_>> = events
            .iter()
            .zip(&dense)
            .map(|(e, pair)| TokenEvent {
                tokens: &e.objects,
                globals: &e.globals,
                pair,
            })
            .collect();
        let input = TokenBatch::collate(&tokens, config.d_node, config.d_global, config.d_pair);
        batch_of(input, &events)
    }

    fn finetuned(
        pretrained: &RootTransformerConfig,
        run: &RootTransformerConfig,
        n_out: usize,
    ) -> RootTransformerConfig {
        RootTransformerConfig {
            n_out,
            dropout: run.dropout,
            ..pretrained.clone()
        }
    }

    fn init<B: Backend>(config: &RootTransformerConfig, device: &B::Device) -> RootTransformer<B> {
        config.init(device)
    }

    fn with_new_head<B: Backend>(
        model: RootTransformer<B>,
        n_out: usize,
        seed: u64,
        device: &B::Device,
    ) -> RootTransformer<B> {
        model.with_new_head(n_out, seed, device)
    }

    fn freeze_backbone<B: Backend>(model: RootTransformer<B>) -> RootTransformer<B> {
        model.freeze_backbone()
    }

    fn is_head_parameter(path: &str) -> bool {
        is_head_parameter(path)
    }

    fn save_weights<B: Backend>(
        model: &RootTransformer<B>,
        path: &Path,
    ) -> Result<(), WeightsError> {
        crate::weights::save_pytorch_safetensors(model, path)
    }

    fn load_weights<B: Backend>(
        model: &mut RootTransformer<B>,
        path: &Path,
    ) -> Result<(), WeightsError> {
        crate::weights::load_pytorch_safetensors(model, path)
    }

    fn to_onnx<B: Backend>(
        config: &RootTransformerConfig,
        model: &RootTransformer<B>,
        metadata: Vec<(String, String)>,
    ) -> Vec<u8> {
        let graph = model.onnx_graph(config.d_node, config.d_global, config.d_pair);
        graph.to_model(&gnn4c_onnx::ModelInfo {
            name: "root_transformer".into(),
            doc: "The ROOT-Transformer (gnn4colliders): an event's objects as tokens, a class \
                  token from the globals, logits per event"
                .into(),
            metadata,
        })
    }

    fn onnx_inputs(config: &RootTransformerConfig, b: &TokenBatch) -> Vec<NamedArray> {
        let (n, l) = (b.n_events, b.n_tokens);
        let mut arrays = vec![
            NamedArray {
                name: "tokens",
                shape: vec![n, l, b.d_token],
                values: ArrayValues::F32(b.tokens.clone()),
            },
            NamedArray {
                name: "padding",
                shape: vec![n, l],
                values: ArrayValues::Bool(b.padding.clone()),
            },
            NamedArray {
                name: "globals",
                shape: vec![n, b.d_global],
                values: ArrayValues::F32(b.globals.clone()),
            },
        ];
        if config.pair_bias {
            arrays.push(NamedArray {
                name: "pair",
                shape: vec![n, l, l, b.d_pair],
                values: ArrayValues::F32(b.pair.clone()),
            });
        }
        arrays
    }
}

/// An event's pair features `[n, n, d_pair]`, pair (i, j) from the edge j → i, out of its
/// `edges` in the contract's order (source-major: for src, for dst ≠ src); empty without edges.
fn dense_pairs(n: usize, d_pair: usize, edges: &[f32]) -> Vec<f32> {
    if edges.is_empty() {
        return Vec::new();
    }
    let mut dense = vec![0.0; n * n * d_pair];
    let pairs = (0..n).flat_map(|s| (0..n).filter(move |&d| d != s).map(move |d| (s, d)));
    for ((s, d), edge) in pairs.zip(edges.chunks_exact(d_pair)) {
        let at = (d * n + s) * d_pair;
        dense[at..at + d_pair].copy_from_slice(edge);
    }
    dense
}

/// On burn-flex the Transformer's attention, LayerNorms, linear layers and feed-forward halves
/// run as one kernel each ([`FusedTransformer`]); elsewhere Burn's operations.
impl Kernels<Flex> for RootTransformerFamily {
    type CpuTrained = RootTransformer<Autodiff<Flex>, FusedTransformer>;
    type CpuScoring = RootTransformer<Flex, FusedTransformer>;
    type Trained<B: AutodiffBackend> = RootTransformer<B>;
    type Scoring<B: Backend> = RootTransformer<B>;

    fn cpu_trained(model: RootTransformer<Autodiff<Flex>>) -> Self::CpuTrained {
        model.with_kernel(FusedTransformer)
    }

    fn cpu_scoring(model: RootTransformer<Flex>) -> Self::CpuScoring {
        model.with_kernel(FusedTransformer)
    }

    fn trained<B: AutodiffBackend>(model: RootTransformer<B>) -> RootTransformer<B> {
        model
    }

    fn scoring<B: Backend>(model: RootTransformer<B>) -> RootTransformer<B> {
        model
    }
}
