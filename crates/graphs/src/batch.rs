//! Collation into a host batch (loader threads) and the one host-to-device boundary.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use gnn4c_events::{EventId, Label};
use serde::{Deserialize, Serialize};

use crate::GraphSample;

/// The feature widths of a batch's graphs: the dataset's declared node, edge (pair) and global
/// features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Widths {
    /// Node features.
    pub d_node: usize,
    /// Edge features.
    pub d_edge: usize,
    /// Global features.
    pub d_global: usize,
}

/// How a batch's node and edge counts are padded so tensor shapes repeat across batches
/// (fusion and autotune caches hit; no reallocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case", tag = "mode", deny_unknown_fields)]
pub enum Padding {
    /// Exact shapes (default).
    #[default]
    None,
    /// Round node and edge counts up to multiples of these steps.
    Steps {
        /// Node-count step.
        nodes: usize,
        /// Edge-count step.
        edges: usize,
    },
    /// Always exactly this many nodes and edges (a batch that needs more is an error).
    Fixed {
        /// Nodes per batch.
        nodes: usize,
        /// Edges per batch.
        edges: usize,
    },
}

/// A collated batch on the host: plain vectors, built on loader threads, `Send`.
///
/// With padding, one masked dummy graph (weight 0, mask 0) is appended that owns every padding
/// node and edge; its edges are self loops of its first node, so indices stay valid.
#[derive(Debug, Clone, PartialEq)]
pub struct HostBatch {
    /// Real graphs (without the padding graph).
    pub n_real: usize,
    /// The feature widths.
    pub widths: Widths,
    /// `[n_nodes, d_node]`.
    pub node_features: Vec<f32>,
    /// `[n_edges, d_edge]`.
    pub edge_features: Vec<f32>,
    /// `[n_graphs, d_global]`.
    pub global_features: Vec<f32>,
    /// Source node of each edge (global index into the batch).
    pub edge_src: Vec<i64>,
    /// Destination node of each edge (global index).
    pub edge_dst: Vec<i64>,
    /// Graph of each node.
    pub node_graph: Vec<i64>,
    /// Graph of each edge.
    pub edge_graph: Vec<i64>,
    /// Nodes per graph.
    pub n_nodes: Vec<u32>,
    /// Edges per graph.
    pub n_edges: Vec<u32>,
    /// Class label per graph (−1 for multilabel events and the padding graph).
    pub labels: Vec<i64>,
    /// `[n_graphs, k]` 0/1 targets when the events are multilabel, else empty.
    pub multilabels: Vec<f32>,
    /// Event weight per graph (0 for the padding graph).
    pub weights: Vec<f32>,
    /// 1 for real graphs, 0 for the padding graph.
    pub graph_mask: Vec<f32>,
    /// Identity of each real graph; stays on the host.
    pub ids: Vec<EventId>,
}

impl HostBatch {
    /// A batch of no graphs with these widths, to extend graph by graph.
    pub fn empty(widths: Widths) -> HostBatch {
        HostBatch {
            n_real: 0,
            widths,
            node_features: Vec::new(),
            edge_features: Vec::new(),
            global_features: Vec::new(),
            edge_src: Vec::new(),
            edge_dst: Vec::new(),
            node_graph: Vec::new(),
            edge_graph: Vec::new(),
            n_nodes: Vec::new(),
            n_edges: Vec::new(),
            labels: Vec::new(),
            multilabels: Vec::new(),
            weights: Vec::new(),
            graph_mask: Vec::new(),
            ids: Vec::new(),
        }
    }

    /// Graphs in the batch, the padding graph included.
    pub fn n_graphs(&self) -> usize {
        self.n_nodes.len()
    }

    /// Total nodes.
    pub fn total_nodes(&self) -> usize {
        self.node_graph.len()
    }

    /// Total edges.
    pub fn total_edges(&self) -> usize {
        self.edge_graph.len()
    }

    /// Moves the batch to `device`: the only place batch data crosses to a device.
    pub fn to_device<B: Backend>(&self, device: &B::Device) -> GraphBatch<B> {
        let (n, e, g) = (self.total_nodes(), self.total_edges(), self.n_graphs());
        let f2 = |v: &[f32], rows: usize, cols: usize| {
            Tensor::<B, 2>::from_data(TensorData::new(v.to_vec(), [rows, cols]), device)
        };
        let f1 =
            |v: &[f32]| Tensor::<B, 1>::from_data(TensorData::new(v.to_vec(), [v.len()]), device);
        let i1 = |v: &[i64]| {
            Tensor::<B, 1, Int>::from_data(TensorData::new(v.to_vec(), [v.len()]), device)
        };
        let counts = |v: &[u32]| f1(&v.iter().map(|&x| x as f32).collect::<Vec<_>>());
        let k = self.multilabels.len().checked_div(g).unwrap_or(0);
        GraphBatch {
            node_features: f2(&self.node_features, n, self.widths.d_node),
            edge_features: f2(&self.edge_features, e, self.widths.d_edge),
            global_features: f2(&self.global_features, g, self.widths.d_global),
            edge_src: i1(&self.edge_src),
            edge_dst: i1(&self.edge_dst),
            node_graph: i1(&self.node_graph),
            edge_graph: i1(&self.edge_graph),
            n_nodes: counts(&self.n_nodes),
            n_edges: counts(&self.n_edges),
            labels: i1(&self.labels),
            multilabels: (k > 0).then(|| f2(&self.multilabels, g, k)),
            weights: f1(&self.weights),
            graph_mask: f1(&self.graph_mask),
        }
    }
}

/// A batch of graphs as tensors on a device. Identity and metadata stay in [`HostBatch`].
///
/// # Shapes
/// `node_features [n_nodes, d_node]`, `edge_features [n_edges, d_edge]`,
/// `global_features [n_graphs, d_global]`, `edge_src`/`edge_dst`/`edge_graph [n_edges]`,
/// `node_graph [n_nodes]`, `n_nodes`/`n_edges`/`labels`/`weights`/`graph_mask [n_graphs]`,
/// `multilabels [n_graphs, k]`.
#[derive(Debug, Clone)]
pub struct GraphBatch<B: Backend> {
    /// Node features.
    pub node_features: Tensor<B, 2>,
    /// Edge features.
    pub edge_features: Tensor<B, 2>,
    /// Global features.
    pub global_features: Tensor<B, 2>,
    /// Edge sources (global node indices).
    pub edge_src: Tensor<B, 1, Int>,
    /// Edge destinations (global node indices).
    pub edge_dst: Tensor<B, 1, Int>,
    /// Graph index of every node.
    pub node_graph: Tensor<B, 1, Int>,
    /// Graph index of every edge.
    pub edge_graph: Tensor<B, 1, Int>,
    /// Nodes per graph (float, for means).
    pub n_nodes: Tensor<B, 1>,
    /// Edges per graph (float, for means; 0 for a graph without edges).
    pub n_edges: Tensor<B, 1>,
    /// Class labels (−1: multilabel or padding).
    pub labels: Tensor<B, 1, Int>,
    /// Multilabel targets, when the events are multilabel.
    pub multilabels: Option<Tensor<B, 2>>,
    /// Event weights (0 for the padding graph).
    pub weights: Tensor<B, 1>,
    /// 1 for real graphs, 0 for the padding graph.
    pub graph_mask: Tensor<B, 1>,
}

fn round_up(x: usize, step: usize) -> usize {
    x.div_ceil(step.max(1)) * step.max(1)
}

/// Collates `graphs` (in order) into a [`HostBatch`] of features `widths`, padding per
/// `padding`; a graph whose features have other widths is an error.
pub fn collate(
    graphs: &[&GraphSample],
    padding: Padding,
    widths: Widths,
) -> Result<HostBatch, String> {
    if let Some(g) = graphs.iter().find(|g| {
        g.node_features.len() != g.n_nodes() * widths.d_node
            || g.edge_features.len() != g.n_edges() * widths.d_edge
            || g.global_features.len() != widths.d_global
    }) {
        return Err(format!(
            "graph of entry {} in {} does not have the batch's feature widths {widths:?}",
            g.id.entry,
            g.id.source_file.display()
        ));
    }
    let real_nodes: usize = graphs.iter().map(|g| g.n_nodes()).sum();
    let real_edges: usize = graphs.iter().map(|g| g.n_edges()).sum();
    let (target_nodes, target_edges) = padded_size(padding, real_nodes, real_edges)?;
    let multi_k = graphs.iter().find_map(|g| match &g.label {
        Label::Multi(v) => Some(v.len()),
        Label::Class(_) => None,
    });
    let n_graphs = graphs.len() + usize::from(padding != Padding::None);
    let mut b = HostBatch {
        n_real: graphs.len(),
        widths,
        node_features: Vec::with_capacity(target_nodes * widths.d_node),
        edge_features: Vec::with_capacity(target_edges * widths.d_edge),
        global_features: Vec::with_capacity(n_graphs * widths.d_global),
        edge_src: Vec::with_capacity(target_edges),
        edge_dst: Vec::with_capacity(target_edges),
        node_graph: Vec::with_capacity(target_nodes),
        edge_graph: Vec::with_capacity(target_edges),
        n_nodes: Vec::with_capacity(n_graphs),
        n_edges: Vec::with_capacity(n_graphs),
        labels: Vec::with_capacity(n_graphs),
        multilabels: Vec::new(),
        weights: Vec::with_capacity(n_graphs),
        graph_mask: Vec::with_capacity(n_graphs),
        ids: Vec::with_capacity(graphs.len()),
    };
    let mut offset = 0i64;
    for (gi, g) in graphs.iter().enumerate() {
        let gi = gi as i64;
        b.node_features.extend_from_slice(&g.node_features);
        b.edge_features.extend_from_slice(&g.edge_features);
        b.global_features.extend_from_slice(&g.global_features);
        b.edge_src
            .extend(g.topology.edge_src.iter().map(|&s| offset + i64::from(s)));
        b.edge_dst
            .extend(g.topology.edge_dst.iter().map(|&d| offset + i64::from(d)));
        b.node_graph.extend(std::iter::repeat_n(gi, g.n_nodes()));
        b.edge_graph.extend(std::iter::repeat_n(gi, g.n_edges()));
        b.n_nodes.push(g.n_nodes() as u32);
        b.n_edges.push(g.n_edges() as u32);
        match (&g.label, multi_k) {
            (Label::Class(c), None) => b.labels.push(i64::from(*c)),
            (Label::Multi(v), Some(k)) if v.len() == k => {
                b.labels.push(-1);
                b.multilabels.extend(v.iter().map(|&x| f32::from(x)));
            }
            _ => return Err("a batch mixes class and multilabel labels (or label lengths)".into()),
        }
        b.weights.push(g.weight);
        b.graph_mask.push(1.0);
        b.ids.push(g.id.clone());
        offset += g.n_nodes() as i64;
    }
    if padding != Padding::None {
        let pad = (target_nodes - real_nodes, target_edges - real_edges);
        push_padding_graph(&mut b, graphs.len() as i64, offset, pad, multi_k);
    }
    Ok(b)
}

/// The nodes and edges a batch of `real_nodes` and `real_edges` is padded to.
fn padded_size(
    padding: Padding,
    real_nodes: usize,
    real_edges: usize,
) -> Result<(usize, usize), String> {
    match padding {
        Padding::None => Ok((real_nodes, real_edges)),
        Padding::Steps { nodes, edges } => {
            // The padding graph needs at least one node to own padding edges.
            let e = round_up(real_edges, edges);
            let mut n = round_up(real_nodes, nodes);
            if e > real_edges && n == real_nodes {
                n = round_up(real_nodes + 1, nodes);
            }
            Ok((n, e))
        }
        Padding::Fixed { nodes, edges } => {
            let need_node = usize::from(edges > real_edges);
            if real_nodes + need_node > nodes || real_edges > edges {
                return Err(format!(
                    "batch needs {real_nodes} nodes and {real_edges} edges but fixed padding allows {nodes} and {edges}"
                ));
            }
            Ok((nodes, edges))
        }
    }
}

/// The padding graph onto `b`: graph `gi`, `pn` zero nodes from node `offset` and `pe`
/// zero-feature edges on its first node; label −1 (zero multilabels), weight 0, masked out.
fn push_padding_graph(
    b: &mut HostBatch,
    gi: i64,
    offset: i64,
    (pn, pe): (usize, usize),
    multi_k: Option<usize>,
) {
    let widths = b.widths;
    b.node_features
        .extend(std::iter::repeat_n(0.0, pn * widths.d_node));
    b.edge_features
        .extend(std::iter::repeat_n(0.0, pe * widths.d_edge));
    b.global_features
        .extend(std::iter::repeat_n(0.0, widths.d_global));
    b.edge_src.extend(std::iter::repeat_n(offset, pe));
    b.edge_dst.extend(std::iter::repeat_n(offset, pe));
    b.node_graph.extend(std::iter::repeat_n(gi, pn));
    b.edge_graph.extend(std::iter::repeat_n(gi, pe));
    b.n_nodes.push(pn as u32);
    b.n_edges.push(pe as u32);
    b.labels.push(-1);
    if let Some(k) = multi_k {
        b.multilabels.extend(std::iter::repeat_n(0.0, k));
    }
    b.weights.push(0.0);
    b.graph_mask.push(0.0);
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use burn::backend::Flex;

    use super::*;
    use crate::{D_EDGE, TopologyCache};

    /// The contract's widths (§3–§4): 7 node, 3 edge and 2 global features.
    const D_NODE: usize = 7;
    const D_GLOBAL: usize = 2;
    const CONTRACT: Widths = Widths {
        d_node: D_NODE,
        d_edge: D_EDGE,
        d_global: D_GLOBAL,
    };

    fn graph(n: usize, label: u32, cache: &mut TopologyCache) -> GraphSample {
        let topology = cache.get(n);
        GraphSample {
            id: EventId {
                sample: "s".into(),
                source_file: Arc::from(Path::new("f.root")),
                tree: "t".into(),
                entry: n as u64,
                event_number: n as u64,
            },
            label: Label::Class(label),
            weight: n as f32,
            node_features: vec![n as f32; n * D_NODE],
            edge_features: vec![-(n as f32); topology.n_edges() * D_EDGE],
            topology,
            global_features: vec![n as f32, 1.0],
        }
    }

    #[test]
    fn collate_offsets_indices_and_moves_to_device() {
        let mut cache = TopologyCache::new(8);
        let gs = [
            graph(3, 1, &mut cache),
            graph(1, 0, &mut cache),
            graph(2, 2, &mut cache),
        ];
        let refs: Vec<&GraphSample> = gs.iter().collect();
        let b = collate(&refs, Padding::None, CONTRACT).expect("collate");
        assert_eq!((b.total_nodes(), b.total_edges(), b.n_graphs()), (6, 8, 3));
        assert_eq!(b.node_graph, vec![0, 0, 0, 1, 2, 2]);
        // Graph 2's edges (nodes 4, 5) are offset by the 4 nodes before it.
        assert_eq!(&b.edge_src[6..], &[4, 5]);
        assert_eq!(&b.edge_dst[6..], &[5, 4]);
        assert_eq!(b.edge_graph, vec![0, 0, 0, 0, 0, 0, 2, 2]);
        assert_eq!(
            (b.n_edges.clone(), b.labels.clone()),
            (vec![6, 0, 2], vec![1, 0, 2])
        );
        let d = b.to_device::<Flex>(&Default::default());
        assert_eq!(d.node_features.dims(), [6, D_NODE]);
        assert_eq!(d.edge_features.dims(), [8, D_EDGE]);
        assert_eq!(d.global_features.dims(), [3, D_GLOBAL]);
        let src: Vec<i64> = d
            .edge_src
            .into_data()
            .convert::<i64>()
            .to_vec()
            .expect("ints");
        assert_eq!(src, b.edge_src);
        let w: Vec<f32> = d.weights.into_data().to_vec().expect("floats");
        assert_eq!(w, vec![3.0, 1.0, 2.0]);
        assert!(d.multilabels.is_none());
    }

    #[test]
    fn padding_adds_one_masked_graph_with_repeating_shapes() {
        let mut cache = TopologyCache::new(8);
        let gs = [graph(3, 1, &mut cache), graph(2, 0, &mut cache)];
        let refs: Vec<&GraphSample> = gs.iter().collect();
        let b = collate(
            &refs,
            Padding::Steps {
                nodes: 4,
                edges: 16,
            },
            CONTRACT,
        )
        .expect("collate");
        assert_eq!(
            (b.total_nodes(), b.total_edges(), b.n_graphs(), b.n_real),
            (8, 16, 3, 2)
        );
        assert_eq!((b.n_nodes[2], b.n_edges[2]), (3, 8));
        assert_eq!((b.weights[2], b.graph_mask[2], b.labels[2]), (0.0, 0.0, -1));
        assert!(
            b.edge_src[8..].iter().all(|&s| s == 5),
            "padding edges stay in the padding graph"
        );
        // Exactly on a step for edges but not nodes: the padding graph still gets a node.
        let f = collate(&refs, Padding::Fixed { nodes: 6, edges: 8 }, CONTRACT).expect("fixed");
        assert_eq!((f.total_nodes(), f.total_edges()), (6, 8));
        let err =
            collate(&refs, Padding::Fixed { nodes: 4, edges: 8 }, CONTRACT).expect_err("too small");
        assert!(err.contains("fixed padding"), "{err}");
    }

    #[test]
    fn mixed_labels_are_refused() {
        let mut cache = TopologyCache::new(8);
        let mut g2 = graph(2, 0, &mut cache);
        g2.label = Label::Multi(vec![1, 0]);
        let g1 = graph(2, 1, &mut cache);
        assert!(collate(&[&g1, &g2], Padding::None, CONTRACT).is_err());
        let mut g3 = g2.clone();
        g3.label = Label::Multi(vec![0, 1]);
        let b = collate(&[&g2, &g3], Padding::None, CONTRACT).expect("multilabel");
        assert_eq!(b.multilabels, vec![1.0, 0.0, 0.0, 1.0]);
        let d = b.to_device::<Flex>(&Default::default());
        assert_eq!(d.multilabels.map(|m| m.dims()), Some([2, 2]));
    }
}
