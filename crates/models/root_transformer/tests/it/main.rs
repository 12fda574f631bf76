//! Parity with the PyTorch reference (`benchmarks/reference/root_transformer.py`, torch 2.15, CPU,
//! f32): logits, one training step's gradients, and the weights' round trip, on the events of
//! `../shared/fixtures/model_inputs.npz` (7 HZZ events and one single-object event), binary and
//! 12-class, with and without the pair bias, run by Burn's operations (`OpByOp`) and by the CPU
//! backend's fused kernels (`FusedTransformer`). The reference's outputs are in
//! `tests/data/`.

mod cpu;
mod onnx;
#[cfg(feature = "wgpu")]
mod wgpu;

use std::path::{Path, PathBuf};

use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::prelude::*;
use gnn4c_root_transformer::FusedTransformer;
use gnn4c_root_transformer::{
    FlatGraphs, OpByOp, RootTransformer, RootTransformerConfig, TokenBatch, TokenEvent,
    TransformerKernel, load_pytorch_safetensors, save_pytorch_safetensors,
};
use gnn4c_tasks::{Task, per_event_loss, weighted_loss};
use gnn4c_testkit::{fixture, read_safetensors};
use ndarray::{Array1, Array2};

type AD = Autodiff<Flex>;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The reference's test configuration (small, so its weights can live in the repository).
fn config(n_out: usize, pair_bias: bool) -> RootTransformerConfig {
    RootTransformerConfig::new(n_out)
        .with_d_model(16)
        .with_n_heads(2)
        .with_n_layers(2)
        .with_embed_layers(2)
        .with_pair_hidden(8)
        .with_pair_bias(pair_bias)
}

/// The events of `model_inputs.npz` as a padded batch.
fn batch() -> TokenBatch {
    let mut z = fixture("model_inputs.npz");
    let x: Array2<f32> = z.by_name("node_features").expect("node_features");
    let ef: Array2<f32> = z.by_name("edge_features").expect("edge_features");
    let gf: Array2<f32> = z.by_name("global_features").expect("global_features");
    let mut index = |name: &str| -> Vec<usize> {
        let a: Array1<i64> = z.by_name(name).expect(name);
        a.iter().map(|&i| i as usize).collect()
    };
    let (src, dst, n_nodes) = (index("edge_src"), index("edge_dst"), index("n_nodes"));
    let (x, ef, gf): (Vec<f32>, Vec<f32>, Vec<f32>) = (
        x.iter().copied().collect(),
        ef.iter().copied().collect(),
        gf.iter().copied().collect(),
    );
    let graphs = FlatGraphs {
        node_features: &x,
        n_nodes: &n_nodes,
        edge_src: &src,
        edge_dst: &dst,
        edge_features: &ef,
        globals: &gf,
    };
    TokenBatch::from_graphs(graphs, 7, 2, 3)
}

fn loaded<B: Backend>(variant: &str, n_out: usize, pair_bias: bool) -> RootTransformer<B> {
    let mut m = config(n_out, pair_bias).init::<B>(&Default::default());
    load_pytorch_safetensors(&mut m, &data(&format!("{variant}.safetensors"))).expect("weights");
    m
}

/// Parity of both kernels.
fn parity(variant: &str, task: Task, pair_bias: bool) {
    parity_with(variant, &task, pair_bias, OpByOp);
    parity_with(variant, &task, pair_bias, FusedTransformer);
}

fn parity_with<K>(variant: &str, task: &Task, pair_bias: bool, kernel: K)
where
    K: TransformerKernel<Flex> + TransformerKernel<AD> + Clone + Copy + Send + std::fmt::Debug,
{
    let n_out = task.n_out();
    let b = batch();
    let file = std::fs::File::open(data(&format!("{variant}_expected.npz"))).expect("expected");
    let mut want = ndarray_npy::NpzReader::new(file).expect("npz");
    let logits: Array2<f32> = want.by_name("logits").expect("logits");
    let logits_f64: Array2<f64> = want.by_name("logits_f64").expect("logits_f64");
    let labels: Array1<i64> = want.by_name("labels").expect("labels");
    let weights: Array1<f32> = want.by_name("weights").expect("weights");

    // Logits, inference backend: 1e-5 absolute (the reference's f32 and f64 differ by < 3e-7).
    let device = Default::default();
    let m = loaded::<Flex>(variant, n_out, pair_bias).with_kernel(kernel);
    let got: Vec<f32> = m.forward(&b, &device).into_data().to_vec().expect("f32");
    assert_eq!(got.len(), 8 * n_out);
    for (k, ((g, w), w64)) in got.iter().zip(&logits).zip(&logits_f64).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 && (f64::from(*g) - w64).abs() <= 1e-5,
            "{variant} ({kernel:?}) logit {k}: {g} vs {w} (f64 {w64})"
        );
    }

    // One training step's gradients: 1e-4 relative to each tensor's max |g|, or 1e-7 absolute.
    let m = loaded::<AD>(variant, n_out, pair_bias).with_kernel(kernel);
    let out = m.forward(&b, &device);
    let labels = Tensor::<AD, 1, Int>::from_data(TensorData::new(labels.to_vec(), [8]), &device);
    let w = Tensor::<AD, 1>::from_data(TensorData::new(weights.to_vec(), [8]), &device);
    let loss = weighted_loss(per_event_loss(task, out, labels, None), w);
    let grads = loss.backward();
    let gradient_model = gnn4c_testkit::gradients_as_model::<AD, _>(m, &grads).valid();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("grads.safetensors");
    save_pytorch_safetensors(&gradient_model, &path).expect("save gradients");
    gnn4c_testkit::assert_safetensors_close(
        &path,
        &data(&format!("{variant}_grads.safetensors")),
        1e-4,
        1e-7,
        &format!("{variant} ({kernel:?}) gradients"),
    );

    // Export round trip: the weights read back are the reference's, bit for bit.
    let path = dir.path().join("weights.safetensors");
    save_pytorch_safetensors(&loaded::<Flex>(variant, n_out, pair_bias), &path).expect("save");
    let again = read_safetensors(&path);
    let reference = read_safetensors(&data(&format!("{variant}.safetensors")));
    assert_eq!(
        again, reference,
        "{variant}: export of the imported weights"
    );
}

#[test]
fn binary_with_pair_bias_matches_pytorch() {
    parity("binary_pair", Task::Binary, true);
}

#[test]
fn binary_without_pair_bias_matches_pytorch() {
    parity("binary_nopair", Task::Binary, false);
}

#[test]
fn multiclass_with_pair_bias_matches_pytorch() {
    parity("multiclass_pair", Task::Multiclass { n_classes: 12 }, true);
}

#[test]
fn multiclass_without_pair_bias_matches_pytorch() {
    parity(
        "multiclass_nopair",
        Task::Multiclass { n_classes: 12 },
        false,
    );
}

#[test]
fn padding_and_the_single_object_event_change_nothing_but_their_rows() {
    // Scoring each event alone (no padding at all) gives the batched logits.
    let device = Default::default();
    let m = loaded::<Flex>("multiclass_pair", 12, true);
    let b = batch();
    let all: Vec<f32> = m.forward(&b, &device).into_data().to_vec().expect("f32");
    let l = b.n_tokens;
    for e in 0..b.n_events {
        let n = (0..l).filter(|&t| !b.padding[e * l + t]).count();
        let mut pair = vec![0.0; n * n * 3];
        for i in 0..n {
            for j in 0..n {
                let from = ((e * l + i) * l + j) * 3;
                pair[(i * n + j) * 3..(i * n + j) * 3 + 3].copy_from_slice(&b.pair[from..from + 3]);
            }
        }
        let one = TokenBatch::collate(
            &[TokenEvent {
                tokens: &b.tokens[e * l * 7..(e * l + n) * 7],
                globals: &b.globals[e * 2..e * 2 + 2],
                pair: &pair,
            }],
            7,
            2,
            3,
        );
        let alone: Vec<f32> = m.forward(&one, &device).into_data().to_vec().expect("f32");
        for (k, (a, w)) in alone.iter().zip(&all[e * 12..(e + 1) * 12]).enumerate() {
            assert!(
                (a - w).abs() <= 1e-5,
                "event {e} ({n} objects) logit {k}: {a} vs {w}"
            );
        }
    }
}

#[test]
fn a_new_head_trains_alone_on_a_frozen_backbone() {
    use burn::optim::GradientsParams;
    let device = Default::default();
    let m = loaded::<AD>("multiclass_pair", 12, true)
        .with_new_head(1, 7, &device)
        .freeze_backbone();
    assert_eq!(m.n_out(), 1);
    let out = m.forward(&batch(), &device); // [8, 1]
    let labels = Tensor::<AD, 1, Int>::from_data(
        TensorData::new(vec![1i64, 0, 1, 0, 1, 0, 1, 0], [8]),
        &device,
    );
    let w = Tensor::<AD, 1>::ones([8], &device);
    let loss = weighted_loss(per_event_loss(&Task::Binary, out, labels, None), w);
    let grads = GradientsParams::from_grads(loss.backward(), &m);
    assert_eq!(
        grads.len(),
        2,
        "only classify.weight and classify.bias get gradients"
    );
    assert!(gnn4c_root_transformer::is_head_parameter("classify.bias"));
    assert!(!gnn4c_root_transformer::is_head_parameter(
        "classify_extra.bias"
    ));
    assert!(!gnn4c_root_transformer::is_head_parameter("norm.gamma"));
    // The same seed gives the same head.
    let a = loaded::<Flex>("binary_pair", 1, true).with_new_head(3, 11, &device);
    let b = loaded::<Flex>("binary_pair", 1, true).with_new_head(3, 11, &device);
    let bits = |m: &RootTransformer<Flex>| -> Vec<f32> {
        m.classify.weight.val().into_data().to_vec().expect("f32")
    };
    assert_eq!(bits(&a), bits(&b));
}
