//! The ONNX export run by an independent runtime (tract) against the Burn model: logits within
//! 1e-5 on the fixture's graphs (one of them a single node without edges), binary and
//! 12-class, as one batch, the edgeless graph alone and the first three graphs.

use burn::backend::Flex;
use gnn4c_family::ModelFamily;
use gnn4c_graphs::HostBatch;
use gnn4c_root_gnn::{EdgeNetworkConfig, RootGnnFamily};

use super::model;

/// The graphs `graphs` of `b` as a batch of their own.
fn subset(b: &HostBatch, graphs: &[usize]) -> HostBatch {
    let w = b.widths;
    let mut s = HostBatch {
        n_real: graphs.len(),
        ..HostBatch::empty(w)
    };
    for (new, &g) in graphs.iter().enumerate() {
        let first_node = s.node_graph.len() as i64;
        let nodes: Vec<usize> = (0..b.node_graph.len())
            .filter(|&n| b.node_graph[n] == g as i64)
            .collect();
        let offset = nodes.first().map_or(0, |&n| n as i64);
        for &n in &nodes {
            s.node_features
                .extend_from_slice(&b.node_features[n * w.d_node..(n + 1) * w.d_node]);
            s.node_graph.push(new as i64);
        }
        for e in (0..b.edge_graph.len()).filter(|&e| b.edge_graph[e] == g as i64) {
            s.edge_features
                .extend_from_slice(&b.edge_features[e * w.d_edge..(e + 1) * w.d_edge]);
            s.edge_src.push(b.edge_src[e] - offset + first_node);
            s.edge_dst.push(b.edge_dst[e] - offset + first_node);
            s.edge_graph.push(new as i64);
        }
        s.global_features
            .extend_from_slice(&b.global_features[g * w.d_global..(g + 1) * w.d_global]);
        s.n_nodes.push(b.n_nodes[g]);
        s.n_edges.push(b.n_edges[g]);
        s.labels.push(b.labels[g]);
        s.weights.push(b.weights[g]);
        s.graph_mask.push(b.graph_mask[g]);
    }
    s
}

fn check(n_out: usize, name: &str) {
    let m = model(n_out, &format!("edge_network_{name}.safetensors"));
    let cfg = EdgeNetworkConfig::new(n_out);
    let bytes = RootGnnFamily::to_onnx(&cfg, &m, Vec::new());
    let all = gnn4c_testkit::model_inputs(vec![0; 8], vec![1.0; 8]);
    let edgeless = (0..all.n_graphs())
        .find(|&g| all.n_edges[g] == 0)
        .expect("an edgeless graph");
    for graphs in [
        (0..all.n_graphs()).collect::<Vec<_>>(),
        vec![edgeless],
        vec![0, 1, 2],
    ] {
        let b = subset(&all, &graphs);
        let want: Vec<f32> = m
            .forward(&b.to_device::<Flex>(&Default::default()))
            .into_data()
            .to_vec()
            .expect("f32");
        let got = gnn4c_testkit::tract_run(&bytes, &RootGnnFamily::onnx_inputs(&cfg, &b));
        assert_eq!(got.len(), want.len(), "{name}: logits of {graphs:?}");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5,
                "{name} graphs {graphs:?} logit {k}: tract {g}, Burn {w}"
            );
        }
    }
}

#[test]
fn binary_runs_the_same_in_tract() {
    check(1, "binary");
}

#[test]
fn multiclass_runs_the_same_in_tract() {
    check(12, "multiclass");
}
