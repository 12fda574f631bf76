//! The Edge_Network as a `gnn4c_family::ModelFamily`: config, batches (an event's graph), head,
//! frozen backbone, weights; and its kernels on the CPU backend (`gnn4c_family::Kernels`).

use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;

use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use gnn4c_events::{EventId, Label};
use gnn4c_family::{
    ArrayValues, Batch, EventInputs, InputWidths, Kernels, ModelFamily, NamedArray, SourceError,
    WeightsError,
};
use gnn4c_graphs::{GraphSample, HostBatch, Padding, TopologyCache, Widths, collate};

use crate::FusedMlp;
use crate::model::{EdgeNetwork, EdgeNetworkConfig, is_head_parameter};

/// The ROOT-GNN family (`model: root_gnn`): the Edge_Network over an event's graph.
#[derive(Debug, Clone, Copy, Default)]
pub struct RootGnnFamily;

impl ModelFamily for RootGnnFamily {
    type Config = EdgeNetworkConfig;
    type Input = HostBatch;
    type Model<B: Backend> = EdgeNetwork<B>;

    fn config(n_out: usize) -> EdgeNetworkConfig {
        EdgeNetworkConfig::new(n_out)
    }

    fn n_out(config: &EdgeNetworkConfig) -> usize {
        config.n_out
    }

    fn with_inputs(config: &EdgeNetworkConfig, widths: InputWidths) -> EdgeNetworkConfig {
        EdgeNetworkConfig {
            d_node: widths.d_node,
            d_global: widths.d_global,
            d_edge: widths.d_pair,
            ..config.clone()
        }
    }

    fn inputs(config: &EdgeNetworkConfig) -> InputWidths {
        InputWidths {
            d_node: config.d_node,
            d_global: config.d_global,
            d_pair: config.d_edge,
        }
    }

    fn batch(
        config: &EdgeNetworkConfig,
        events: Vec<EventInputs>,
    ) -> Result<Batch<HostBatch>, SourceError> {
        let widths = Widths {
            d_node: config.d_node,
            d_edge: config.d_edge,
            d_global: config.d_global,
        };
        let graphs: Vec<GraphSample> = TOPOLOGIES.with(|t| {
            let mut topologies = t.borrow_mut();
            events
                .into_iter()
                .map(|e| graph_of(e, &mut topologies))
                .collect()
        });
        let refs: Vec<&GraphSample> = graphs.iter().collect();
        let hb = collate(&refs, Padding::None, widths)
            .map_err(|e| SourceError(format!("collating a batch of the cache: {e}")))?;
        Ok(Batch {
            labels: hb.labels.clone(),
            multilabels: hb.multilabels.clone(),
            weights: hb.weights.clone(),
            n_events: hb.n_real,
            input: hb,
        })
    }

    fn finetuned(
        pretrained: &EdgeNetworkConfig,
        run: &EdgeNetworkConfig,
        n_out: usize,
    ) -> EdgeNetworkConfig {
        EdgeNetworkConfig {
            n_out,
            dropout: run.dropout,
            ..pretrained.clone()
        }
    }

    fn init<B: Backend>(config: &EdgeNetworkConfig, device: &B::Device) -> EdgeNetwork<B> {
        config.init(device)
    }

    fn with_new_head<B: Backend>(
        model: EdgeNetwork<B>,
        n_out: usize,
        seed: u64,
        device: &B::Device,
    ) -> EdgeNetwork<B> {
        model.with_new_head(n_out, seed, device)
    }

    fn freeze_backbone<B: Backend>(model: EdgeNetwork<B>) -> EdgeNetwork<B> {
        model.freeze_backbone()
    }

    fn is_head_parameter(path: &str) -> bool {
        is_head_parameter(path)
    }

    fn save_weights<B: Backend>(model: &EdgeNetwork<B>, path: &Path) -> Result<(), WeightsError> {
        crate::weights::save_pytorch_safetensors(model, path)
    }

    fn load_weights<B: Backend>(
        model: &mut EdgeNetwork<B>,
        path: &Path,
    ) -> Result<(), WeightsError> {
        crate::weights::load_pytorch_safetensors(model, path)
    }

    fn to_onnx<B: Backend>(
        config: &EdgeNetworkConfig,
        model: &EdgeNetwork<B>,
        metadata: Vec<(String, String)>,
    ) -> Vec<u8> {
        let graph = model.onnx_graph(config.d_node, config.d_edge, config.d_global);
        graph.to_model(&gnn4c_onnx::ModelInfo {
            name: "root_gnn".into(),
            doc: "The ROOT-GNN Edge_Network (gnn4colliders): an event's objects as a fully \
                  connected graph, logits per event"
                .into(),
            metadata,
        })
    }

    fn onnx_inputs(_config: &EdgeNetworkConfig, b: &HostBatch) -> Vec<NamedArray> {
        let w = b.widths;
        let (nodes, edges, graphs) = (b.node_graph.len(), b.edge_src.len(), b.n_graphs());
        let floats = |name, shape, v: &[f32]| NamedArray {
            name,
            shape,
            values: ArrayValues::F32(v.to_vec()),
        };
        let ints = |name, v: &[i64]| NamedArray {
            name,
            shape: vec![v.len()],
            values: ArrayValues::I64(v.to_vec()),
        };
        vec![
            floats("node_features", vec![nodes, w.d_node], &b.node_features),
            floats("edge_features", vec![edges, w.d_edge], &b.edge_features),
            floats(
                "global_features",
                vec![graphs, w.d_global],
                &b.global_features,
            ),
            ints("edge_src", &b.edge_src),
            ints("edge_dst", &b.edge_dst),
            ints("node_graph", &b.node_graph),
            ints("edge_graph", &b.edge_graph),
        ]
    }
}

thread_local! {
    /// Each loader thread's topologies, built once per node count.
    static TOPOLOGIES: RefCell<TopologyCache> = RefCell::new(TopologyCache::new(64));
}

/// The graph of `event`: its topology, and its pair features as the edges' (already in the
/// topology's order). The event's identity stays with the loader: the graph's is empty.
fn graph_of(event: EventInputs, topologies: &mut TopologyCache) -> GraphSample {
    let topology = topologies.get(event.n_objects);
    let t = event.target;
    let label = if t.label < 0 {
        Label::Multi(t.multilabel.iter().map(|&x| u8::from(x > 0.5)).collect())
    } else {
        Label::Class(t.label as u32)
    };
    GraphSample {
        id: EventId {
            sample: Arc::from(""),
            source_file: Arc::from(Path::new("")),
            tree: Arc::from(""),
            entry: 0,
            event_number: 0,
        },
        label,
        weight: t.weight,
        topology,
        node_features: event.objects,
        edge_features: event.pairs,
        global_features: event.globals,
    }
}

/// On burn-flex each MLP block runs as one kernel ([`FusedMlp`]); elsewhere Burn's operations.
impl Kernels<Flex> for RootGnnFamily {
    type CpuTrained = EdgeNetwork<Autodiff<Flex>, FusedMlp>;
    type CpuScoring = EdgeNetwork<Flex, FusedMlp>;
    type Trained<B: AutodiffBackend> = EdgeNetwork<B>;
    type Scoring<B: Backend> = EdgeNetwork<B>;

    fn cpu_trained(model: EdgeNetwork<Autodiff<Flex>>) -> Self::CpuTrained {
        model.with_kernel(FusedMlp)
    }

    fn cpu_scoring(model: EdgeNetwork<Flex>) -> Self::CpuScoring {
        model.with_kernel(FusedMlp)
    }

    fn trained<B: AutodiffBackend>(model: EdgeNetwork<B>) -> EdgeNetwork<B> {
        model
    }

    fn scoring<B: Backend>(model: EdgeNetwork<B>) -> EdgeNetwork<B> {
        model
    }
}
