//! Test support shared by the crates' integration tests: locating `../shared` (or
//! `$GNN4C_SHARED`) and loading the parity fixtures.
//!
//! A dev-dependency only: no library crate depends on it, so it is outside the layering rules.

use std::fs::File;
use std::path::PathBuf;

use gnn4c_graphs::HostBatch;
use ndarray::{Array1, Array2};
use ndarray_npy::NpzReader;

/// `$GNN4C_SHARED/rel`, defaulting to `../shared` beside the workspace; panics naming the path
/// looked at when it is missing.
pub fn shared(rel: &str) -> PathBuf {
    let root = std::env::var_os("GNN4C_SHARED").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
        PathBuf::from,
    );
    let p = root.join(rel);
    assert!(
        p.exists(),
        "test data missing: looked for {} (set GNN4C_SHARED to the shared folder)",
        p.display()
    );
    p
}

/// A fixture archive from `shared/fixtures/`.
pub fn fixture(name: &str) -> NpzReader<File> {
    let path = shared(&format!("fixtures/{name}"));
    let file = File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    NpzReader::new(file).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `model_inputs.npz` (7 HZZ graphs and one single-node graph without edges) as a host batch
/// with the given per-graph labels and weights.
pub fn model_inputs(labels: Vec<i64>, weights: Vec<f32>) -> HostBatch {
    let mut z = fixture("model_inputs.npz");
    let x: Array2<f32> = z.by_name("node_features").expect("node_features");
    let ef: Array2<f32> = z.by_name("edge_features").expect("edge_features");
    let gf: Array2<f32> = z.by_name("global_features").expect("global_features");
    let src: Array1<i64> = z.by_name("edge_src").expect("edge_src");
    let dst: Array1<i64> = z.by_name("edge_dst").expect("edge_dst");
    let n_nodes: Array1<i64> = z.by_name("n_nodes").expect("n_nodes");
    let node_graph: Vec<i64> = n_nodes
        .iter()
        .enumerate()
        .flat_map(|(g, &n)| std::iter::repeat_n(g as i64, n as usize))
        .collect();
    let edge_graph: Vec<i64> = src.iter().map(|&s| node_graph[s as usize]).collect();
    let g = n_nodes.len();
    assert_eq!(
        (labels.len(), weights.len()),
        (g, g),
        "one label and weight per graph"
    );
    HostBatch {
        n_real: g,
        widths: gnn4c_graphs::Widths::CONTRACT,
        node_features: x.iter().copied().collect(),
        edge_features: ef.iter().copied().collect(),
        global_features: gf.iter().copied().collect(),
        edge_src: src.to_vec(),
        edge_dst: dst.to_vec(),
        n_edges: (0..g)
            .map(|k| edge_graph.iter().filter(|&&x| x == k as i64).count() as u32)
            .collect(),
        node_graph,
        edge_graph,
        n_nodes: n_nodes.iter().map(|&n| n as u32).collect(),
        labels,
        multilabels: Vec::new(),
        weights,
        graph_mask: vec![1.0; g],
        ids: Vec::new(),
    }
}

/// A safetensors file as name → (shape, f32 values).
pub fn read_safetensors(
    path: &std::path::Path,
) -> std::collections::HashMap<String, (Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).expect("read safetensors");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let data = &bytes[8 + n..];
    let mut out = std::collections::HashMap::new();
    for (name, v) in header.as_object().expect("object") {
        if name == "__metadata__" {
            continue;
        }
        assert_eq!(v["dtype"], "F32", "{name}");
        let shape: Vec<usize> = v["shape"]
            .as_array()
            .expect("shape")
            .iter()
            .map(|d| d.as_u64().expect("dim") as usize)
            .collect();
        let off: Vec<usize> = v["data_offsets"]
            .as_array()
            .expect("offsets")
            .iter()
            .map(|d| d.as_u64().expect("off") as usize)
            .collect();
        let vals = data[off[0]..off[1]]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4")))
            .collect();
        out.insert(name.clone(), (shape, vals));
    }
    out
}
