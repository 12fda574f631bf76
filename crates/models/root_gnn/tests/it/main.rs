//! Parity with the PyTorch implementation: legacy-named weights in, the fixture's logits out.

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

#[test]
fn binary_logits_match_pytorch() {
    check(1, "binary");
}

#[test]
fn multiclass_logits_match_pytorch_including_the_edgeless_graph() {
    check(12, "multiclass");
}

#[test]
fn export_and_reimport_is_exact() {
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

// The CPU backend's vendored patches (vendor/burn-flex/PATCHED.md, vendor/burn-autodiff/PATCHED.md)
// must compute the same functions as upstream's code paths they replace.

fn values<const D: usize, Bk: Backend>(t: Tensor<Bk, D>) -> Vec<f32> {
    t.into_data().to_vec().expect("f32")
}

fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{what}[{k}]: got {g}, want {w}"
        );
    }
}

/// LayerNorm as one tracked operation (forward fused, closed-form backward in one sweep over the
/// rows, blocks of 256) gives the values and gradients of its decomposition into elementary
/// operations (what upstream differentiates): two blocks with the model's width, and a width
/// that is not a multiple of the kernel's 16 lanes.
#[test]
fn layer_norm_values_and_gradients_equal_those_of_its_decomposition() {
    layer_norm_matches_its_decomposition(257, 64);
    layer_norm_matches_its_decomposition(300, 20);
}

fn layer_norm_matches_its_decomposition(n: usize, d: usize) {
    use burn::backend::Autodiff;
    use burn::module::Param;
    use burn::nn::LayerNormConfig;
    use burn::tensor::Distribution;
    type AD = Autodiff<Flex>;
    let device = Default::default();
    // Seeded (the backend's generator is one for the process, so tests running in parallel can
    // still draw between the seed and these draws; the tolerance does not rely on the data).
    Flex::seed(&device, 23);
    let x0 = Tensor::<Flex, 2>::random([n, d], Distribution::Normal(0.5, 2.0), &device);
    // One constant row: zero variance, the epsilon alone keeps it finite.
    let x0 = x0.slice_assign([3..4, 0..d], Tensor::full([1, d], 1.5, &device));
    let r = Tensor::<AD, 2>::random([n, d], Distribution::Normal(0.0, 1.0), &device);
    let gamma0 = Tensor::<Flex, 1>::random([d], Distribution::Normal(1.0, 0.3), &device);
    let beta0 = Tensor::<Flex, 1>::random([d], Distribution::Normal(0.0, 0.3), &device);

    let mut ln = LayerNormConfig::new(d)
        .with_epsilon(1e-5)
        .init::<AD>(&device);
    ln.gamma = Param::from_tensor(Tensor::from_inner(gamma0.clone()).require_grad());
    ln.beta = Some(Param::from_tensor(
        Tensor::from_inner(beta0.clone()).require_grad(),
    ));
    let x = Tensor::<AD, 2>::from_inner(x0.clone()).require_grad();
    let y = ln.forward(x.clone());
    let grads = (y.clone() * r.clone()).sum().backward();
    let fused = [
        values(y),
        values(x.grad(&grads).expect("dx")),
        values(ln.gamma.val().grad(&grads).expect("dgamma")),
        values(
            ln.beta
                .as_ref()
                .expect("beta")
                .val()
                .grad(&grads)
                .expect("dbeta"),
        ),
    ];

    let x = Tensor::<AD, 2>::from_inner(x0).require_grad();
    let gamma = Tensor::<AD, 1>::from_inner(gamma0).require_grad();
    let beta = Tensor::<AD, 1>::from_inner(beta0).require_grad();
    let mean = x.clone().mean_dim(1);
    let centered = x.clone() - mean;
    let var = (centered.clone() * centered.clone()).mean_dim(1);
    let y = centered / (var + 1e-5).sqrt() * gamma.clone().unsqueeze_dim(0)
        + beta.clone().unsqueeze_dim(0);
    let grads = (y.clone() * r).sum().backward();
    let reference = [
        values(y),
        values(x.grad(&grads).expect("dx")),
        values(gamma.grad(&grads).expect("dgamma")),
        values(beta.grad(&grads).expect("dbeta")),
    ];
    for (what, (got, want)) in ["y", "dx", "dgamma", "dbeta"]
        .iter()
        .zip(fused.iter().zip(&reference))
    {
        assert_close(&format!("{what} ({n} × {d})"), got, want, 1e-4);
    }
}

/// `Linear` with the bias fused into the product equals the product plus the bias, for the 2-D
/// fast path (on tall inputs in blocks of rows, also for a transposed, column-major input) and
/// the batched fallback.
#[test]
fn fused_linear_equals_product_plus_bias() {
    use burn::nn::LinearConfig;
    use burn::tensor::Distribution;
    let device = Default::default();
    let lin = LinearConfig::new(64, 48).init::<Flex>(&device);
    let w = lin.weight.val();
    let b = lin.bias.as_ref().expect("bias").val();
    let x = Tensor::<Flex, 2>::random([1000, 64], Distribution::Normal(0.0, 1.0), &device);
    let want = values(x.clone().matmul(w.clone()) + b.clone().unsqueeze_dim(0));
    assert_close("2-D", &values(lin.forward(x)), &want, 1e-6);
    // Tall enough for the row blocks (7 of 256 rows and a partial one).
    let tall = LinearConfig::new(64, 64).init::<Flex>(&device);
    let (wt, bt) = (tall.weight.val(), tall.bias.as_ref().expect("bias").val());
    let x = Tensor::<Flex, 2>::random([2000, 64], Distribution::Normal(0.0, 1.0), &device);
    let want = values(x.clone().matmul(wt.clone()) + bt.clone().unsqueeze_dim(0));
    assert_close("2-D, tall", &values(tall.forward(x)), &want, 1e-6);
    let xt = Tensor::<Flex, 2>::random([64, 2000], Distribution::Normal(0.0, 1.0), &device);
    let want = values(xt.clone().transpose().matmul(wt) + bt.unsqueeze_dim(0));
    assert_close(
        "2-D, tall, column-major",
        &values(tall.forward(xt.transpose())),
        &want,
        1e-6,
    );
    let x3 = Tensor::<Flex, 3>::random([3, 7, 64], Distribution::Normal(0.0, 1.0), &device);
    let want3 = values(x3.clone().matmul(w.unsqueeze_dim(0)) + b.unsqueeze_dims(&[0, 1]));
    assert_close("3-D", &values(lin.forward(x3.clone())), &want3, 1e-6);
    let no_bias = LinearConfig::new(64, 48)
        .with_bias(false)
        .init::<Flex>(&device);
    let w = no_bias.weight.val();
    let want = values(x3.clone().matmul(w.unsqueeze_dim(0)));
    assert_close("3-D, no bias", &values(no_bias.forward(x3)), &want, 1e-6);
}

/// In-place element-wise operations never write into a buffer that another tensor still holds:
/// `a + b` and `a * b` may reuse `b`'s buffer only when nothing else holds it, and the ReLU
/// gradient is written into the incoming gradient, never into the kept activation.
#[test]
fn in_place_operations_leave_shared_tensors_untouched() {
    use burn::backend::Autodiff;
    use burn::tensor::activation::relu;
    let device = Default::default();
    let a = Tensor::<Flex, 2>::from_data([[1.0, -2.0], [3.0, 4.0]], &device);
    let kept = a.clone();
    let b = Tensor::<Flex, 2>::from_data([[10.0, 20.0], [30.0, 40.0]], &device);
    assert_eq!(values(a.clone() + b.clone()), vec![11.0, 18.0, 33.0, 44.0]);
    assert_eq!(values(a * b), vec![10.0, -40.0, 90.0, 160.0]);
    assert_eq!(values(kept.clone()), vec![1.0, -2.0, 3.0, 4.0]);

    type AD = Autodiff<Flex>;
    let x = Tensor::<AD, 2>::from_inner(kept).require_grad();
    let c = Tensor::<AD, 2>::from_data([[5.0, 6.0], [7.0, 8.0]], &device);
    let y = relu(x.clone());
    let grads = (y.clone() * c).sum().backward();
    assert_eq!(
        values(x.grad(&grads).expect("dx")),
        vec![5.0, 0.0, 7.0, 8.0]
    );
    assert_eq!(values(y), vec![1.0, 0.0, 3.0, 4.0]);
    assert_eq!(values(x.inner()), vec![1.0, -2.0, 3.0, 4.0]);
}

/// LayerNorm's fused forward computes the variance from the centred values: rows whose mean is
/// large against their spread, or constant rows, normalise correctly (upstream's `E[x²] − E[x]²`
/// lost most digits there, or went negative: NaN).
#[test]
fn layer_norm_is_accurate_for_rows_with_a_large_mean() {
    use burn::nn::LayerNormConfig;
    let device = Default::default();
    let d = 64;
    let ln = LayerNormConfig::new(d)
        .with_epsilon(1e-5)
        .init::<Flex>(&device);
    // Row 0: 12 + 0.01·z; row 1: constant 12 (zero variance).
    let z: Vec<f32> = (0..d)
        .map(|j| ((j * 37 % 64) as f32 - 31.5) / 18.5)
        .collect();
    let mut rows: Vec<f32> = z.iter().map(|z| 12.0 + 0.01 * z).collect();
    rows.extend(std::iter::repeat_n(12.0f32, d));
    let x = Tensor::<Flex, 2>::from_data(TensorData::new(rows.clone(), [2, d]), &device);
    let y = values(ln.forward(x));
    assert!(y.iter().all(|v| v.is_finite()), "finite outputs");
    // f64 reference from the same f32 inputs.
    let row: Vec<f64> = rows[..d].iter().map(|&v| v as f64).collect();
    let mean = row.iter().sum::<f64>() / d as f64;
    let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
    let want: Vec<f32> = row
        .iter()
        .map(|v| ((v - mean) / (var + 1e-5).sqrt()) as f32)
        .collect();
    assert_close("large-mean row", &y[..d], &want, 2e-3);
    assert!(y[d..].iter().all(|v| v.abs() < 1e-3), "constant row → 0");
}

/// burn-flex's one-sweep LayerNorm gradient gives `dx` bitwise equal to the closed form written
/// with burn-flex's own operations (what burn-autodiff computes on other backends; the MPI
/// parity test needs exactly that rounding), row by row whatever the rows around it, and
/// `dγ`, `dβ` equal to the sums over the rows.
#[test]
fn layer_norm_gradient_kernel_equals_the_closed_form_bitwise() {
    use burn::tensor::{Distribution, TensorPrimitive};
    let device = Default::default();
    let (n, d) = (300, 64);
    Flex::seed(&device, 17);
    let x = Tensor::<Flex, 2>::random([n, d], Distribution::Normal(0.5, 2.0), &device);
    let x = x.slice_assign([3..4, 0..d], Tensor::full([1, d], 1.5, &device));
    let g = Tensor::<Flex, 2>::random([n, d], Distribution::Normal(0.0, 1.0), &device);
    let gamma = Tensor::<Flex, 1>::random([d], Distribution::Normal(1.0, 0.3), &device);
    let kernel = |x: Tensor<Flex, 2>, g: Tensor<Flex, 2>| {
        let [dx, dg, db] = burn_flex::ops::activation::layer_norm_backward(
            &x.into_primitive().tensor(),
            &gamma.clone().into_primitive().tensor(),
            &g.into_primitive().tensor(),
            1e-5,
        )
        .expect("f32 rows: the kernel applies");
        (
            values(Tensor::<Flex, 2>::from_primitive(TensorPrimitive::Float(
                dx,
            ))),
            values(Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(
                dg,
            ))),
            values(Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(
                db,
            ))),
        )
    };
    let (dx, dgamma, dbeta) = kernel(x.clone(), g.clone());

    let mean = x.clone().mean_dim(1);
    let centered = x.clone() - mean;
    let var = (centered.clone() * centered.clone()).mean_dim(1);
    let rstd = (var + 1e-5).sqrt().recip();
    let x_hat = centered * rstd.clone();
    let gg = g.clone() * gamma.clone().unsqueeze_dim(0);
    let mean_g = gg.clone().mean_dim(1);
    let mean_gx = (gg.clone() * x_hat.clone()).mean_dim(1);
    let want_dx = values((gg - mean_g - x_hat.clone() * mean_gx) * rstd);
    let differing = dx.iter().zip(&want_dx).filter(|(a, b)| a != b).count();
    assert_eq!(
        differing, 0,
        "dx elements not bitwise equal to the closed form"
    );
    // The column sums of the reference in f64 (an f32 sum over 300 rows of cancelling terms
    // is itself off by up to ~1e-5 of the result, which made this comparison flaky).
    let column_sums = |t: Tensor<Flex, 2>| -> Vec<f32> {
        let v = values(t);
        (0..d)
            .map(|j| (0..n).map(|r| f64::from(v[r * d + j])).sum::<f64>() as f32)
            .collect()
    };
    assert_close("dgamma", &dgamma, &column_sums(g.clone() * x_hat), 1e-5);
    assert_close("dbeta", &dbeta, &column_sums(g.clone()), 1e-5);

    // Rows split in two (as between two MPI ranks): the same dx rows.
    let (dx_a, ..) = kernel(
        x.clone().slice([0..150, 0..d]),
        g.clone().slice([0..150, 0..d]),
    );
    let (dx_b, ..) = kernel(x.slice([150..n, 0..d]), g.slice([150..n, 0..d]));
    assert!(
        dx_a.iter().chain(&dx_b).eq(dx.iter()),
        "dx depends on the other rows"
    );
}
