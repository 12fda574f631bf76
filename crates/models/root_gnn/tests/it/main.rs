//! Parity with the PyTorch implementation: legacy-named weights in, the fixture's logits out.

mod cpu;
mod onnx;
#[cfg(feature = "wgpu")]
mod wgpu;

use burn::backend::Flex;
use burn::prelude::*;
use gnn4c_root_gnn::{
    EdgeNetwork, EdgeNetworkConfig, load_pytorch_safetensors, save_pytorch_safetensors,
};
use gnn4c_testkit::{fixture, shared};
use ndarray::Array2;

type B = Flex;

fn expected(name: &str) -> Array2<f32> {
    let mut z = fixture(&format!("expected_logits_{name}.npz"));
    z.by_name("logits").expect("logits")
}

fn model(n_out: usize, weights: &str) -> EdgeNetwork<B> {
    let device = Default::default();
    let mut m = EdgeNetworkConfig::new(n_out).init::<B>(&device);
    load_pytorch_safetensors(&mut m, &shared(&format!("fixtures/{weights}")))
        .expect("load weights");
    m
}

/// The fixture's tolerance: f32 forward vs PyTorch's f32 forward (both within 6e-7 of f64).
const TOL: f32 = 1e-5;

fn check(n_out: usize, name: &str) {
    let m = model(n_out, &format!("edge_network_{name}.safetensors"));
    assert_eq!(
        m.num_params(),
        134_528 + 65 * n_out,
        "contract §5 parameter count"
    );
    let batch =
        gnn4c_testkit::model_inputs(vec![0; 8], vec![1.0; 8]).to_device::<B>(&Default::default());
    let logits: Vec<f32> = m.forward(&batch).into_data().to_vec().expect("f32");
    let want = expected(name);
    assert_eq!(logits.len(), want.len());
    for (k, (g, w)) in logits.iter().zip(want.iter()).enumerate() {
        assert!(
            (g - w).abs() <= TOL,
            "{name} logit {k} (graph {}): got {g}, PyTorch says {w}",
            k / n_out
        );
    }
}

/// Backward passes of two tests at once in one process once lost a tracked tensor's gradient
/// under load (`fused_block_gradients_are_those_of_burns_operations`, 1 run in ~15; never alone):
/// Burn's autodiff bookkeeping is shared by the process's threads. These tests take turns.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn binary_logits_match_pytorch() {
    let _serial = serial();
    check(1, "binary");
}

#[test]
fn multiclass_logits_match_pytorch_including_the_edgeless_graph() {
    let _serial = serial();
    check(12, "multiclass");
}

#[test]
fn export_and_reimport_is_exact() {
    let _serial = serial();
    let m = model(12, "edge_network_multiclass.safetensors");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("out.safetensors");
    save_pytorch_safetensors(&m, &path).expect("save");
    let mut again = EdgeNetworkConfig::new(12).init::<B>(&Default::default());
    load_pytorch_safetensors(&mut again, &path).expect("reload");
    let batch =
        gnn4c_testkit::model_inputs(vec![0; 8], vec![1.0; 8]).to_device::<B>(&Default::default());
    let a: Vec<f32> = m.forward(&batch).into_data().to_vec().expect("f32");
    let b: Vec<f32> = again.forward(&batch).into_data().to_vec().expect("f32");
    assert_eq!(a, b, "round trip is exact");
    // The exported names are PyTorch's.
    let bytes = std::fs::read(&path).expect("read");
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header = String::from_utf8_lossy(&bytes[8..8 + header_len]);
    for key in [
        "node_encoder.0.weight",
        "edge_update.12.bias",
        "classify.weight",
    ] {
        assert!(header.contains(key), "exported header lacks {key}");
    }
    // Another shape is refused with a clear error.
    let mut binary = EdgeNetworkConfig::new(1).init::<B>(&Default::default());
    let err = load_pytorch_safetensors(&mut binary, &path)
        .expect_err("12-class weights into a binary model");
    assert!(err.to_string().contains("classify"), "{err}");
}

#[test]
fn new_head_and_frozen_backbone_get_no_gradients_and_no_optimizer_state() {
    let _serial = serial();
    use burn::backend::Autodiff;
    use burn::optim::{AdamConfig, GradientsParams, Optimizer};
    type AD = Autodiff<Flex>;
    let device = Default::default();
    let mut m = EdgeNetworkConfig::new(12).init::<AD>(&device);
    load_pytorch_safetensors(
        &mut m,
        &shared("fixtures/edge_network_multiclass.safetensors"),
    )
    .expect("load");
    let backbone_before: Vec<f32> = m.node_encoder.layers[0]
        .weight
        .val()
        .into_data()
        .to_vec()
        .expect("f32");
    let a = m.clone().with_new_head(1, 11, &device);
    let b = m.with_new_head(1, 11, &device);
    assert_eq!(a.n_out(), 1);
    let (wa, wb): (Vec<f32>, Vec<f32>) = (
        a.classify.weight.val().into_data().to_vec().expect("f32"),
        b.classify.weight.val().into_data().to_vec().expect("f32"),
    );
    assert_eq!(wa, wb, "seeded head initialisation");

    let frozen = a.freeze_backbone();
    let batch = gnn4c_testkit::model_inputs(vec![0; 8], vec![1.0; 8]).to_device::<AD>(&device);
    let loss = frozen.forward(&batch).powf_scalar(2.0).mean();
    let grads = GradientsParams::from_grads(loss.backward(), &frozen);
    let n_with_grads = grads.len();
    assert_eq!(
        n_with_grads, 2,
        "only classify.weight and classify.bias get gradients"
    );
    let mut adam = AdamConfig::new()
        .with_epsilon(1e-8)
        .init::<AD, EdgeNetwork<AD>>();
    let stepped = adam.step(1e-3, frozen, grads);
    assert_eq!(
        adam.to_record().len(),
        2,
        "optimiser state only for the head"
    );
    let backbone_after: Vec<f32> = stepped.node_encoder.layers[0]
        .weight
        .val()
        .into_data()
        .to_vec()
        .expect("f32");
    assert_eq!(
        backbone_before, backbone_after,
        "the frozen backbone did not move"
    );
}

/// Every MLP block's LayerNorm takes the variance from the centred values (`Mlp::normalize`),
/// on every backend: rows whose mean is large against their spread, or constant rows,
/// normalise correctly. burn-flex's own `layer_norm` (what `LayerNorm::forward` calls) computes
/// `E[x²] − E[x]²` in one sweep, which loses most digits there or goes negative (NaN).
#[test]
fn layer_norm_is_accurate_for_rows_with_a_large_mean() {
    let _serial = serial();
    use gnn4c_root_gnn::MlpConfig;
    let device = Default::default();
    let d = 64;
    let mlp = MlpConfig::new(d, d).init::<B>(&device);
    // Row 0: 12 + 0.01·z; row 1: constant 12 (zero variance).
    let z: Vec<f32> = (0..d)
        .map(|j| ((j * 37 % 64) as f32 - 31.5) / 18.5)
        .collect();
    let mut rows: Vec<f32> = z.iter().map(|z| 12.0 + 0.01 * z).collect();
    rows.extend(std::iter::repeat_n(12.0f32, d));
    let x = Tensor::<B, 2>::from_data(TensorData::new(rows.clone(), [2, d]), &device);
    let y: Vec<f32> = mlp.normalize(x).into_data().to_vec().expect("f32");
    assert!(y.iter().all(|v| v.is_finite()), "finite outputs");
    // f64 reference from the same f32 inputs (γ = 1, β = 0 at initialisation).
    let row: Vec<f64> = rows[..d].iter().map(|&v| v as f64).collect();
    let mean = row.iter().sum::<f64>() / d as f64;
    let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
    for (j, v) in row.iter().enumerate() {
        let want = (v - mean) / (var + 1e-5).sqrt();
        // f32 keeps ~3 digits fewer of `x − μ` at a mean of 12 and a spread of 0.01.
        assert!(
            (f64::from(y[j]) - want).abs() <= 2e-3 * want.abs().max(1.0),
            "large-mean row [{j}]: got {}, want {want}",
            y[j]
        );
    }
    assert!(y[d..].iter().all(|v| v.abs() < 1e-3), "constant row → 0");
}
