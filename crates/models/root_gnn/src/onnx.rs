//! The Edge_Network as an ONNX graph: the flat batch of graphs `HostBatch` holds in (the
//! contract's node and edge order), `logits` out, for any number of graphs, nodes and edges.
//!
//! The same function as [`EdgeNetwork::forward`]: each update block reads its concatenated
//! input (gathered rows side by side) and the sums over a graph's edges and nodes are
//! `ScatterElements` with `reduction = add` onto zeros.

use burn::prelude::*;
use gnn4c_onnx::{Attribute, DataType, Dim, Graph, Value};

use crate::model::{EdgeNetwork, LAYER_NORM_EPSILON, Mlp};

fn block<B: Backend>(g: &mut Graph, x: &Value, mlp: &Mlp<B>, hint: &str) -> Value {
    g.relu_block(x, &mlp.layers, &mlp.norm, LAYER_NORM_EPSILON, hint)
}

fn gather(g: &mut Graph, x: &Value, index: &Value) -> Value {
    g.op("Gather", &[x, index], vec![("axis", Attribute::Int(0))])
}

fn concat(g: &mut Graph, parts: &[&Value]) -> Value {
    g.op("Concat", parts, vec![("axis", Attribute::Int(1))])
}

/// The count of rows per group, at least 1, as a column `[groups, 1]`.
fn inverse_counts(g: &mut Graph, group: &Value, like: &Value) -> Value {
    // Ones per row, summed per group: a column of `like`'s rows.
    let (s, e, a) = (
        g.int_list("starts", &[0]),
        g.int_list("ends", &[1]),
        g.int_list("axes", &[1]),
    );
    let first = g.op("Slice", &[like, &s, &e, &a], Vec::new()); // [groups, 1]
    let axes = g.int_list("axes", &[1]);
    let rows = g.op("Unsqueeze", &[group, &axes], Vec::new()); // [rows, 1]
    let as_float = g.op(
        "Cast",
        &[&rows],
        vec![("to", Attribute::Int(DataType::Float as i64))],
    );
    let zero = g.scalar("zero", 0.0);
    let one = g.scalar("one", 1.0);
    let ones = g.binary("Mul", &as_float, &zero);
    let ones = g.binary("Add", &ones, &one);
    let counts = g.segment_sum(&ones, group, &first);
    let counts = g.binary("Max", &counts, &one);
    g.binary("Div", &one, &counts)
}

impl<B: Backend, K> EdgeNetwork<B, K> {
    /// The network as an ONNX graph; inputs and shapes in `docs/onnx.md`.
    pub fn onnx_graph(&self, d_node: usize, d_edge: usize, d_global: usize) -> Graph {
        let mut g = Graph::new();
        let named = |s: &str| Dim::Named(s.into());
        let nodes = g.input(
            "node_features",
            DataType::Float,
            vec![named("nodes"), Dim::Fixed(d_node)],
            "every graph's nodes, graph after graph (the declared node features, in order)",
        );
        let edges = g.input(
            "edge_features",
            DataType::Float,
            vec![named("edges"), Dim::Fixed(d_edge)],
            "every graph's edges (Δη, Δφ, ΔR), graph after graph in the contract's edge order",
        );
        let globals = g.input(
            "global_features",
            DataType::Float,
            vec![named("graphs"), Dim::Fixed(d_global)],
            "the declared global features, one row per graph",
        );
        let index = |g: &mut Graph, name: &str, over: &str, doc: &str| {
            g.input(name, DataType::Int64, vec![named(over)], doc)
        };
        let src = index(
            &mut g,
            "edge_src",
            "edges",
            "each edge's source node (a row of node_features)",
        );
        let dst = index(&mut g, "edge_dst", "edges", "each edge's destination node");
        let node_graph = index(
            &mut g,
            "node_graph",
            "nodes",
            "each node's graph (a row of global_features)",
        );
        let edge_graph = index(&mut g, "edge_graph", "edges", "each edge's graph");

        let mut h = block(&mut g, &nodes, &self.node_encoder, "node_encoder");
        let mut e = block(&mut g, &edges, &self.edge_encoder, "edge_encoder");
        let mut u = block(&mut g, &globals, &self.global_encoder, "global_encoder");
        let inv_nodes = inverse_counts(&mut g, &node_graph, &u);
        let inv_edges = inverse_counts(&mut g, &edge_graph, &u);
        for _ in 0..self.n_steps {
            let (hs, hd, ue) = (
                gather(&mut g, &h, &src),
                gather(&mut g, &h, &dst),
                gather(&mut g, &u, &edge_graph),
            );
            let x = concat(&mut g, &[&e, &hs, &hd, &ue]);
            e = block(&mut g, &x, &self.edge_update, "edge_update");
            let a = g.segment_sum(&e, &dst, &h);
            let un = gather(&mut g, &u, &node_graph);
            let x = concat(&mut g, &[&h, &a, &un]);
            h = block(&mut g, &x, &self.node_update, "node_update");
            let node_sum = g.segment_sum(&h, &node_graph, &u);
            let node_mean = g.binary("Mul", &node_sum, &inv_nodes);
            let edge_sum = g.segment_sum(&e, &edge_graph, &u);
            let edge_mean = g.binary("Mul", &edge_sum, &inv_edges);
            let x = concat(&mut g, &[&u, &node_mean, &edge_mean]);
            u = block(&mut g, &x, &self.global_update, "global_update");
        }
        let u = block(&mut g, &u, &self.global_decoder, "global_decoder");
        let logits = g.burn_linear(&u, &self.classify, "classify");
        let [_, n_out] = self.classify.weight.dims();
        g.output(
            &logits,
            "logits",
            DataType::Float,
            vec![named("graphs"), Dim::Fixed(n_out)],
            "one logit per class (binary: one, the signal's)",
        );
        g
    }
}
