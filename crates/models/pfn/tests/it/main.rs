//! Parity with the PyTorch reference (`benchmarks/reference/pfn.py`, CPU, f32): logits, one
//! training step's gradients and the weights' round trip on the events of
//! `../shared/fixtures/model_inputs.npz` (7 HZZ events and one single-object event), binary and
//! 12-class; the sum's invariance under the order of an event's objects; a new head on a frozen
//! backbone; the ONNX export run by tract. The reference's outputs are in `tests/data/`.

#[cfg(feature = "wgpu")]
mod wgpu;

use std::path::{Path, PathBuf};

use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::prelude::*;
use gnn4c_family::{Classifier, ModelFamily};
use gnn4c_pfn::{
    Pfn, PfnBatch, PfnConfig, PfnFamily, is_head_parameter, load_pytorch_safetensors,
    save_pytorch_safetensors,
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
fn config(n_out: usize) -> PfnConfig {
    PfnConfig::new(n_out)
        .with_phi_sizes(vec![16, 16, 32])
        .with_f_sizes(vec![16, 16])
}

/// The events of `model_inputs.npz`.
pub(crate) fn batch() -> PfnBatch {
    let mut z = fixture("model_inputs.npz");
    let x: Array2<f32> = z.by_name("node_features").expect("node_features");
    let gf: Array2<f32> = z.by_name("global_features").expect("global_features");
    let n_nodes: Array1<i64> = z.by_name("n_nodes").expect("n_nodes");
    let x: Vec<f32> = x.iter().copied().collect();
    let gf: Vec<f32> = gf.iter().copied().collect();
    let mut at = 0;
    let events: Vec<(&[f32], &[f32])> = n_nodes
        .iter()
        .enumerate()
        .map(|(e, &n)| {
            let n = n as usize;
            let objects = &x[at * 7..(at + n) * 7];
            at += n;
            (objects, &gf[e * 2..e * 2 + 2])
        })
        .collect();
    PfnBatch::collate(events, 7, 2)
}

pub(crate) fn loaded<B: Backend>(task: &str, n_out: usize) -> Pfn<B> {
    let mut m = config(n_out).init::<B>(&Default::default());
    load_pytorch_safetensors(&mut m, &data(&format!("{task}.safetensors"))).expect("weights");
    m
}

fn parity(name: &str, task: Task) {
    let n_out = task.n_out();
    let b = batch();
    let file = std::fs::File::open(data(&format!("{name}_expected.npz"))).expect("expected");
    let mut want = ndarray_npy::NpzReader::new(file).expect("npz");
    let logits: Array2<f32> = want.by_name("logits").expect("logits");
    let logits_f64: Array2<f64> = want.by_name("logits_f64").expect("logits_f64");
    let labels: Array1<i64> = want.by_name("labels").expect("labels");
    let weights: Array1<f32> = want.by_name("weights").expect("weights");

    // Logits: 1e-5 absolute (the reference's f32 and f64 differ by < 3e-8).
    let device = Default::default();
    let m = loaded::<Flex>(name, n_out);
    let got: Vec<f32> = m.logits(&b, &device).into_data().to_vec().expect("f32");
    assert_eq!(got.len(), 8 * n_out);
    for (k, ((g, w), w64)) in got.iter().zip(&logits).zip(&logits_f64).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 && (f64::from(*g) - w64).abs() <= 1e-5,
            "{name} logit {k}: {g} vs {w} (f64 {w64})"
        );
    }

    // One training step's gradients: 1e-4 relative to each tensor's max |g|, or 1e-7 absolute.
    let m = loaded::<AD>(name, n_out);
    let out = m.logits(&b, &device);
    let labels = Tensor::<AD, 1, Int>::from_data(TensorData::new(labels.to_vec(), [8]), &device);
    let w = Tensor::<AD, 1>::from_data(TensorData::new(weights.to_vec(), [8]), &device);
    let loss = weighted_loss(per_event_loss(&task, out, labels, None), w);
    let grads = loss.backward();
    let gradient_model = gnn4c_testkit::gradients_as_model::<AD, _>(m, &grads).valid();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("grads.safetensors");
    save_pytorch_safetensors(&gradient_model, &path).expect("save gradients");
    gnn4c_testkit::assert_safetensors_close(
        &path,
        &data(&format!("{name}_grads.safetensors")),
        1e-4,
        1e-7,
        &format!("{name} gradients"),
    );

    // Export round trip: the weights read back are the reference's, bit for bit.
    let path = dir.path().join("weights.safetensors");
    save_pytorch_safetensors(&loaded::<Flex>(name, n_out), &path).expect("save");
    assert_eq!(
        read_safetensors(&path),
        read_safetensors(&data(&format!("{name}.safetensors"))),
        "{name}: export of the imported weights"
    );
}

#[test]
fn binary_matches_pytorch() {
    parity("binary", Task::Binary);
}

#[test]
fn multiclass_matches_pytorch() {
    parity("multiclass", Task::Multiclass { n_classes: 12 });
}

#[test]
fn the_sum_does_not_depend_on_the_order_of_an_events_objects_or_its_batch() {
    // Each event alone, with its objects reversed, gives its row of the batch's logits (within
    // f32 summation order, 1e-5).
    let device = Default::default();
    let m = loaded::<Flex>("multiclass", 12);
    let b = batch();
    let all: Vec<f32> = m.logits(&b, &device).into_data().to_vec().expect("f32");
    for e in 0..b.n_events {
        let rows: Vec<usize> = (0..b.n_objects())
            .filter(|&i| b.object_event[i] == e as i64)
            .rev()
            .collect();
        let objects: Vec<f32> = rows
            .iter()
            .flat_map(|&i| b.objects[i * 7..(i + 1) * 7].iter().copied())
            .collect();
        let one = PfnBatch::collate([(&objects[..], &b.globals[e * 2..e * 2 + 2])], 7, 2);
        let alone: Vec<f32> = m.logits(&one, &device).into_data().to_vec().expect("f32");
        for (k, (a, w)) in alone.iter().zip(&all[e * 12..(e + 1) * 12]).enumerate() {
            assert!(
                (a - w).abs() <= 1e-5,
                "event {e} ({} objects) logit {k}: {a} vs {w}",
                rows.len()
            );
        }
    }
}

#[test]
fn a_new_head_trains_alone_on_a_frozen_backbone() {
    use burn::optim::GradientsParams;
    let device = Default::default();
    let m = loaded::<AD>("multiclass", 12)
        .with_new_head(1, 7, &device)
        .freeze_backbone();
    assert_eq!(m.n_out(), 1);
    let out = m.logits(&batch(), &device); // [8, 1]
    let labels = Tensor::<AD, 1, Int>::from_data(
        TensorData::new(vec![1i64, 0, 1, 0, 1, 0, 1, 0], [8]),
        &device,
    );
    let w = Tensor::<AD, 1>::ones([8], &device);
    let loss = weighted_loss(per_event_loss(&Task::Binary, out, labels, None), w);
    let grads = GradientsParams::from_grads(loss.backward(), &m);
    assert_eq!(grads.len(), 2, "only classify.weight and classify.bias");
    assert!(is_head_parameter("classify.bias"));
    assert!(!is_head_parameter("classify_extra.bias"));
    assert!(!is_head_parameter("phi.0.weight"));
}

#[test]
fn empty_layer_lists_sum_the_features_and_classify_the_sum() {
    let device = Default::default();
    let c = PfnConfig::new(3)
        .with_phi_sizes(vec![])
        .with_f_sizes(vec![]);
    let m = c.init::<Flex>(&device);
    assert_eq!(m.classify.weight.dims(), [7 + 2, 3]);
    let out = m.logits(&batch(), &device);
    assert_eq!(out.dims(), [8, 3]);
}

#[test]
fn the_onnx_export_computes_the_models_logits() {
    // tract (an independent ONNX runtime) on the fixture's events, all together and each alone:
    // within 1e-5 of Burn's logits.
    let device = Default::default();
    for (name, n_out) in [("binary", 1), ("multiclass", 12)] {
        let m = loaded::<Flex>(name, n_out);
        let c = config(n_out);
        let bytes = PfnFamily::to_onnx(&c, &m, Vec::new());
        let b = batch();
        let want: Vec<f32> = m.logits(&b, &device).into_data().to_vec().expect("f32");
        let got = gnn4c_testkit::tract_run(&bytes, &PfnFamily::onnx_inputs(&c, &b));
        assert_eq!(got.len(), want.len());
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-5, "{name} logit {k}: {g} vs {w}");
        }
        let one = PfnBatch::collate([(&b.objects[..7], &b.globals[..2])], 7, 2);
        let want: Vec<f32> = m.logits(&one, &device).into_data().to_vec().expect("f32");
        let got = gnn4c_testkit::tract_run(&bytes, &PfnFamily::onnx_inputs(&c, &one));
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5, "{name} one object: {g} vs {w}");
        }
    }
}
