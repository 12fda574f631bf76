//! Test support shared by the crates' integration tests: locating `../shared` (or
//! `$GNN4C_SHARED`), loading the parity fixtures, and running an exported ONNX model in an
//! independent runtime (tract).
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
    let root = std::env::var_os("GNN4C_SHARED")
        .map_or_else(|| workspace().join("../shared"), PathBuf::from);
    let p = root.join(rel);
    assert!(
        p.exists(),
        "test data missing: looked for {} (set GNN4C_SHARED to the shared folder)",
        p.display()
    );
    p
}

/// The workspace's folder: above the crate `cargo test` runs (a test binary built in a shared
/// target folder from a checkout elsewhere keeps that checkout's build-time path), else above
/// this crate as it was built.
fn workspace() -> PathBuf {
    let running = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    running
        .into_iter()
        .chain([built.clone()])
        .find_map(|dir| {
            dir.ancestors()
                .find(|d| d.join("Cargo.lock").exists())
                .map(std::path::Path::to_path_buf)
        })
        .unwrap_or_else(|| built.join("../.."))
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
        widths: gnn4c_graphs::Widths {
            d_node: x.ncols(),
            d_edge: ef.ncols(),
            d_global: gf.ncols(),
        },
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

/// The first output of the ONNX model `bytes` run by tract on `inputs` (the graph's inputs in
/// order, each with its concrete shape), as f32 values.
pub fn tract_run(bytes: &[u8], inputs: &[gnn4c_family::NamedArray]) -> Vec<f32> {
    use gnn4c_family::ArrayValues;
    use tract_onnx::prelude::*;
    let values: TVec<TValue> = inputs
        .iter()
        .map(|a| {
            let t = match &a.values {
                ArrayValues::F32(v) => Tensor::from_shape(&a.shape, v),
                ArrayValues::I64(v) => Tensor::from_shape(&a.shape, v),
                ArrayValues::Bool(v) => Tensor::from_shape(&a.shape, v),
            };
            t.unwrap_or_else(|e| panic!("input {}: {e}", a.name)).into()
        })
        .collect();
    let mut model = tract_onnx::onnx()
        .model_for_read(&mut &bytes[..])
        .expect("tract reads the model");
    for (k, v) in values.iter().enumerate() {
        model = model
            .with_input_fact(k, InferenceFact::dt_shape(v.datum_type(), v.shape()))
            .expect("input fact");
    }
    let runnable = model
        .into_optimized()
        .expect("tract optimises the model")
        .into_runnable()
        .expect("runnable");
    let out = runnable.run(values).expect("tract runs the model");
    out[0]
        .to_plain_array_view::<f32>()
        .expect("f32 output")
        .iter()
        .copied()
        .collect()
}

/// The `metadata_props` of the ONNX model `bytes`, as tract's protocol-buffer reader finds them.
pub fn onnx_metadata(bytes: &[u8]) -> std::collections::BTreeMap<String, String> {
    use tract_onnx::prelude::Framework;
    tract_onnx::onnx()
        .proto_model_for_read(&mut &bytes[..])
        .expect("tract reads the model")
        .metadata_props
        .into_iter()
        .map(|p| (p.key, p.value))
        .collect()
}

/// The arrays `names` of the NPZ file `path` (f32, i64 or bool, any shape), in that order: an
/// ONNX export's sample batch as the model's inputs.
pub fn npz_arrays(path: &std::path::Path, names: &[&'static str]) -> Vec<gnn4c_family::NamedArray> {
    use gnn4c_family::{ArrayValues, NamedArray};
    use ndarray::ArrayD;
    let open = || NpzReader::new(File::open(path).expect("sample file")).expect("npz");
    names
        .iter()
        .map(|&name| {
            let (shape, values) = if let Ok(a) = open().by_name::<_, ndarray::IxDyn>(name) {
                let a: ArrayD<f32> = a;
                (
                    a.shape().to_vec(),
                    ArrayValues::F32(a.iter().copied().collect()),
                )
            } else if let Ok(a) = open().by_name::<_, ndarray::IxDyn>(name) {
                let a: ArrayD<i64> = a;
                (
                    a.shape().to_vec(),
                    ArrayValues::I64(a.iter().copied().collect()),
                )
            } else {
                let a: ArrayD<bool> = open()
                    .by_name(name)
                    .unwrap_or_else(|e| panic!("{}: array {name}: {e}", path.display()));
                (
                    a.shape().to_vec(),
                    ArrayValues::Bool(a.iter().copied().collect()),
                )
            };
            NamedArray {
                name,
                shape,
                values,
            }
        })
        .collect()
}

/// `logits`' values and the gradients of `Σ logits² / 2` for every parameter of `model` that
/// produced them: one backward pass to compare between backends.
pub fn logits_and_gradients<B, M>(
    model: &M,
    logits: burn::tensor::Tensor<B, 2>,
) -> (Vec<f32>, Vec<Vec<f32>>)
where
    B: burn::tensor::backend::AutodiffBackend,
    M: burn::module::Module<B>,
{
    let values = logits
        .clone()
        .into_data()
        .convert::<f32>()
        .to_vec()
        .expect("f32 logits");
    let grads = (logits.clone() * logits).sum().div_scalar(2.0).backward();
    (values, parameter_gradients::<B, M>(model, &grads))
}

/// One training step's gradient of every parameter of `model` (those with one), in the module's
/// order, as f32 values: for comparing two backends' backward passes.
pub fn parameter_gradients<B, M>(model: &M, grads: &B::Gradients) -> Vec<Vec<f32>>
where
    B: burn::tensor::backend::AutodiffBackend,
    M: burn::module::Module<B>,
{
    use burn::module::{ModuleVisitor, Param};
    use burn::tensor::Tensor;
    struct Collect<'g, B: burn::tensor::backend::AutodiffBackend> {
        grads: &'g B::Gradients,
        out: Vec<Vec<f32>>,
    }
    impl<B: burn::tensor::backend::AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(g) = param.val().grad(self.grads) {
                self.out.push(
                    g.into_data()
                        .convert::<f32>()
                        .to_vec()
                        .expect("f32 gradient"),
                );
            }
        }
    }
    let mut c = Collect::<B> {
        grads,
        out: Vec::new(),
    };
    model.visit(&mut c);
    c.out
}

/// Asserts `got` is within `tolerance` of `want` relative to each tensor's largest |value| (or
/// absolutely where that is below 1), naming `what` and the worst element.
pub fn assert_close_per_tensor(got: &[Vec<f32>], want: &[Vec<f32>], tolerance: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: tensors");
    let mut worst = (0.0f32, 0, 0, 0.0f32, 0.0f32);
    for (t, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: tensor {t}'s length");
        let scale = w.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        for (k, (&a, &b)) in g.iter().zip(w).enumerate() {
            let off = (a - b).abs() / scale;
            if off > worst.0 || off.is_nan() {
                worst = (off, t, k, a, b);
            }
        }
    }
    let (off, t, k, a, b) = worst;
    assert!(
        off <= tolerance,
        "{what}: tensor {t} element {k}: {a} against {b} ({off:.2e} of the tensor's scale, \
         more than {tolerance:.0e})"
    );
}

/// `model` with each parameter replaced by its gradient in `grads` (every parameter must have
/// one), so that the gradients save under the parameters' names (a family's weights writer).
pub fn gradients_as_model<B, M>(model: M, grads: &B::Gradients) -> M
where
    B: burn::tensor::backend::AutodiffBackend,
    M: burn::module::Module<B>,
{
    use burn::module::{ModuleMapper, Param};
    use burn::tensor::Tensor;
    struct Gradients<'a, B: burn::tensor::backend::AutodiffBackend>(&'a B::Gradients);
    impl<B: burn::tensor::backend::AutodiffBackend> ModuleMapper<B> for Gradients<'_, B> {
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            let (id, value, mapper) = p.consume();
            let grad = value.grad(self.0).expect("every parameter has a gradient");
            Param::from_mapped_value(id, Tensor::from_inner(grad), mapper)
        }
    }
    model.map(&mut Gradients::<B>(grads))
}

/// Asserts the safetensors file `got` holds `want`'s tensors: the same names and shapes, each
/// value within `relative` of its tensor's largest |value|, or `floor` absolutely (gradients
/// against a reference's).
pub fn assert_safetensors_close(
    got: &std::path::Path,
    want: &std::path::Path,
    relative: f32,
    floor: f32,
    what: &str,
) {
    let (got, want) = (read_safetensors(got), read_safetensors(want));
    assert_eq!(
        got.keys().collect::<std::collections::BTreeSet<_>>(),
        want.keys().collect(),
        "{what}: the same tensor names"
    );
    for (key, (shape, w)) in &want {
        let (got_shape, g) = &got[key];
        assert_eq!(got_shape, shape, "{what} {key}");
        let scale = w.iter().fold(0.0f32, |a, x| a.max(x.abs()));
        for (k, (g, w)) in g.iter().zip(w).enumerate() {
            assert!(
                (g - w).abs() <= (relative * scale).max(floor),
                "{what} {key}[{k}]: {g} vs {w}"
            );
        }
    }
}
