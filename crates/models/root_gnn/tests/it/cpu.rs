//! The fused MLP blocks compute the model's function: PyTorch parity, and the values (within
//! 1e-6) and gradients (within 1e-5) of Burn's operations one at a time on tall (multi-block)
//! inputs, in inference and in training steps.

use burn::backend::Flex;
use burn::prelude::*;
use burn::tensor::Distribution;
use gnn4c_family::Classifier;
use gnn4c_graphs::HostBatch;
use gnn4c_root_gnn::FusedMlp;
use gnn4c_root_gnn::{
    EdgeNetwork, EdgeNetworkConfig, MlpConfig, MlpKernel, OpByOp, load_pytorch_safetensors,
};
use gnn4c_testkit::{fixture, model_inputs, shared};
use ndarray::Array2;

type B = Flex;

fn values<const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().to_vec().expect("f32")
}

/// The same values up to f32 rounding: within 1e-6 of the largest `|want|` (at least 1). The
/// fused blocks compute each operation as Burn's do, but sum some terms in another order (the
/// bias added onto the product's rows, LayerNorm's row sums in one vector of partial sums).
fn assert_values_close(what: &str, got: &[f32], want: &[f32]) {
    let err = relative_error(got, want);
    assert!(err <= 1e-6, "{what}: off by {err:e} (relative)");
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
fn fused_network_matches_pytorch() {
    let _serial = serial();
    for (n_out, name) in [(1, "binary"), (12, "multiclass")] {
        let device = Default::default();
        let mut m = EdgeNetworkConfig::new(n_out).init::<B>(&device);
        load_pytorch_safetensors(
            &mut m,
            &shared(&format!("fixtures/edge_network_{name}.safetensors")),
        )
        .expect("load weights");
        let fused = m.with_kernel(FusedMlp);
        let logits = values(fused.logits(&model_inputs(vec![0; 8], vec![1.0; 8]), &device));
        let mut z = fixture(&format!("expected_logits_{name}.npz"));
        let want: Array2<f32> = z.by_name("logits").expect("logits");
        assert_eq!(logits.len(), want.len());
        for (k, (g, w)) in logits.iter().zip(want.iter()).enumerate() {
            // The fixture's tolerance (as the model's own parity test).
            assert!(
                (g - w).abs() <= 1e-5,
                "{name} logit {k}: got {g}, PyTorch says {w}"
            );
        }
    }
}

/// `copies` of the fixture's 8 graphs, the k-th with its features scaled by `1 + k / 64` (so
/// that rows differ), as one batch: thousands of edges, many row blocks, a partial last one.
fn tall_batch(copies: usize) -> HostBatch {
    let one = model_inputs(vec![0; 8], vec![1.0; 8]);
    let n_nodes: usize = one.n_nodes.iter().map(|&n| n as usize).sum();
    let g = one.n_real;
    let mut b = HostBatch::empty(one.widths);
    for k in 0..copies {
        let s = 1.0 + k as f32 / 64.0;
        let scaled = |v: &[f32]| v.iter().map(|x| x * s).collect::<Vec<_>>();
        b.node_features.extend(scaled(&one.node_features));
        b.edge_features.extend(scaled(&one.edge_features));
        b.global_features.extend(scaled(&one.global_features));
        let (dn, dg) = ((k * n_nodes) as i64, (k * g) as i64);
        b.edge_src.extend(one.edge_src.iter().map(|i| i + dn));
        b.edge_dst.extend(one.edge_dst.iter().map(|i| i + dn));
        b.node_graph.extend(one.node_graph.iter().map(|i| i + dg));
        b.edge_graph.extend(one.edge_graph.iter().map(|i| i + dg));
        b.n_nodes.extend(&one.n_nodes);
        b.n_edges.extend(&one.n_edges);
        b.labels.extend(&one.labels);
        b.weights.extend(&one.weights);
        b.graph_mask.extend(&one.graph_mask);
        b.n_real += g;
    }
    b
}

#[test]
fn fused_network_gives_the_logits_of_burns_operations_on_a_tall_batch() {
    let _serial = serial();
    let device = Default::default();
    B::seed(&device, 11);
    let model: EdgeNetwork<B> = EdgeNetworkConfig::new(12).init(&device);
    let host = tall_batch(45);
    assert!(
        host.edge_src.len() > 1000 && !host.edge_src.len().is_multiple_of(256),
        "several row blocks and a partial one: {} edges",
        host.edge_src.len()
    );
    let batch = host.to_device::<B>(&device);
    let want = values(model.forward(&batch));
    let fused = model.with_kernel(FusedMlp);
    let got = values(fused.logits(&host, &device));
    assert_values_close("logits", &got, &want);
}

#[test]
fn fused_blocks_give_the_values_of_burns_operations() {
    let _serial = serial();
    // Narrow blocks, and the contract's width (whose tall products Burn's `Linear` also runs in
    // blocks of rows).
    for (d, d_hidden) in [(16usize, 24usize), (64, 64)] {
        fused_blocks_equal_operations(d, d_hidden);
    }
}

fn fused_blocks_equal_operations(d: usize, d_hidden: usize) {
    let device = Default::default();
    B::seed(&device, 5);
    let normal = Distribution::Normal(0.0, 1.0);
    let mlp = MlpConfig::new(3 * d, d)
        .with_d_hidden(d_hidden)
        .init::<B>(&device);
    // 0 rows, fewer than a block, exactly a block, several blocks and a partial one, and last
    // blocks of 1 and 3 rows (which gemm would multiply with other kernels than a full block's).
    for n in [0usize, 7, 256, 257, 515, 1001, 2049] {
        let n_src = 37;
        let x = Tensor::<B, 2>::random([n, d], normal, &device);
        let a = Tensor::<B, 2>::random([n, d], normal, &device);
        let src = Tensor::<B, 2>::random([n_src, d], normal, &device);
        let index: Vec<i64> = (0..n).map(|r| ((r * 7 + 3) % n_src) as i64).collect();
        let index = Tensor::<B, 1, Int>::from_data(TensorData::new(index, [n]), &device);
        let parts = || {
            vec![
                (x.clone(), None),
                (src.clone(), Some(index.clone())),
                (a.clone(), None),
            ]
        };
        assert_values_close(
            &format!("forward_concat, {n} rows of width {d}"),
            &values(FusedMlp.forward_concat(&mlp, parts())),
            &values(OpByOp.forward_concat(&mlp, parts())),
        );
        let cat = Tensor::cat(vec![x.clone(), a.clone(), x.clone()], 1);
        assert_values_close(
            &format!("forward, {n} rows of width {d}"),
            &values(FusedMlp.forward(&mlp, cat.clone())),
            &values(OpByOp.forward(&mlp, cat)),
        );
    }
}

/// The logits and the head's gradient of one training step (Autodiff) with `kernel`.
fn step_with<K>(
    model: &EdgeNetwork<Ad, K>,
    host: &HostBatch,
) -> (Vec<f32>, Vec<f32>, Option<Vec<f32>>)
where
    K: MlpKernel<Ad> + Clone + Send + std::fmt::Debug,
{
    let device = Default::default();
    let batch = host.to_device::<Ad>(&device);
    let logits = model.forward(&batch);
    let grads = logits.clone().powf_scalar(2.0).mean().backward();
    let head = model
        .classify
        .weight
        .val()
        .grad(&grads)
        .expect("the head has a gradient");
    let backbone = model.edge_update.layers[1]
        .weight
        .val()
        .grad(&grads)
        .map(|g| g.into_data().to_vec().expect("f32"));
    (
        logits.inner().into_data().to_vec().expect("f32"),
        head.into_data().to_vec().expect("f32"),
        backbone,
    )
}

type Ad = burn::backend::Autodiff<B>;

/// Largest `|got − want|` over the largest `|want|` (at least 1).
fn relative_error(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(1.0f32, |m, w| m.max(w.abs()));
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f32::max)
        / scale
}

/// Every parameter of an MLP block with its gradient (`name`, values).
fn block_grads(
    name: &str,
    mlp: &gnn4c_root_gnn::Mlp<Ad>,
    grads: &<Ad as burn::tensor::backend::AutodiffBackend>::Gradients,
) -> Vec<(String, Vec<f32>)> {
    let mut out = Vec::new();
    let mut push = |what: String, g: Option<Tensor<Flex, 1>>| {
        let g = g.unwrap_or_else(|| panic!("{what} has a gradient"));
        out.push((what, g.into_data().to_vec().expect("f32")));
    };
    for (k, l) in mlp.layers.iter().enumerate() {
        push(
            format!("{name}.layers[{k}].weight"),
            l.weight.val().grad(grads).map(|g| g.flatten(0, 1)),
        );
        if let Some(b) = &l.bias {
            push(format!("{name}.layers[{k}].bias"), b.val().grad(grads));
        }
    }
    push(
        format!("{name}.norm.gamma"),
        mlp.norm.gamma.val().grad(grads),
    );
    if let Some(b) = &mlp.norm.beta {
        push(format!("{name}.norm.beta"), b.val().grad(grads));
    }
    out
}

/// A tracked tensor's gradient.
fn grad_of(
    t: &Tensor<Ad, 2>,
    grads: &<Ad as burn::tensor::backend::AutodiffBackend>::Gradients,
) -> Vec<f32> {
    t.grad(grads)
        .expect("a gradient")
        .into_data()
        .to_vec()
        .expect("f32")
}

#[test]
fn fused_block_gradients_are_those_of_burns_operations() {
    let _serial = serial();
    // f32 sums in another order (per block of rows, then the blocks in f64): the contract's
    // 1e-5 parity tolerance, relative to each gradient's scale.
    for (d, d_hidden) in [(16usize, 24usize), (64, 64)] {
        let device = Default::default();
        <Ad as Backend>::seed(&device, 9);
        let normal = Distribution::Normal(0.0, 1.0);
        let mlp = MlpConfig::new(3 * d, d)
            .with_d_hidden(d_hidden)
            .init::<Ad>(&device);
        // 5000 rows: more blocks than the backward has tasks (several blocks share partial sums).
        for n in [0usize, 7, 257, 515, 2049, 5000] {
            let n_src = 37;
            let leaf =
                |rows: usize| Tensor::<Ad, 2>::random([rows, d], normal, &device).require_grad();
            let (x, a, src) = (leaf(n), leaf(n), leaf(n_src));
            let index: Vec<i64> = (0..n).map(|r| ((r * 7 + 3) % n_src) as i64).collect();
            let index = Tensor::<Ad, 1, Int>::from_data(TensorData::new(index, [n]), &device);
            let weights = Tensor::<Ad, 2>::random([n, d], normal, &device);
            let run = |kernel: &dyn MlpKernel<Ad>, concat: bool| {
                let out = if concat {
                    kernel.forward_concat(
                        &mlp,
                        vec![
                            (x.clone(), None),
                            (src.clone(), Some(index.clone())),
                            (a.clone(), None),
                        ],
                    )
                } else {
                    kernel.forward(
                        &mlp,
                        Tensor::cat(
                            vec![x.clone(), a.clone(), src.clone().select(0, index.clone())],
                            1,
                        ),
                    )
                };
                let values = out
                    .clone()
                    .inner()
                    .into_data()
                    .to_vec::<f32>()
                    .expect("f32");
                let grads = (out * weights.clone()).sum().backward();
                let mut all = block_grads("mlp", &mlp, &grads);
                if n > 0 {
                    all.push(("x".into(), grad_of(&x, &grads)));
                    all.push(("a".into(), grad_of(&a, &grads)));
                    all.push(("src".into(), grad_of(&src, &grads)));
                }
                (values, all)
            };
            for concat in [true, false] {
                let (got_values, got) = run(&FusedMlp, concat);
                let (want_values, want) = run(&OpByOp, concat);
                let what = format!("width {d}, {n} rows, concat {concat}");
                assert_values_close(&format!("{what}: values"), &got_values, &want_values);
                assert_eq!(got.len(), want.len());
                for ((name, g), (_, w)) in got.iter().zip(&want) {
                    let err = relative_error(g, w);
                    assert!(
                        err <= 1e-5,
                        "{what}: {name} gradient off by {err:e} (relative)"
                    );
                }
            }
        }
    }
}

#[test]
fn fused_training_step_gives_the_gradients_of_burns_operations() {
    let _serial = serial();
    let device = Default::default();
    let host = tall_batch(12);
    <Ad as Backend>::seed(&device, 4);
    let net: EdgeNetwork<Ad> = EdgeNetworkConfig::new(12).init(&device);
    let net = net.clone().load_record(net.into_record());
    let all = |model: &EdgeNetwork<Ad, _>, grads| {
        let mut v = Vec::new();
        for (name, mlp) in model.blocks() {
            v.extend(block_grads(name, mlp, grads));
        }
        v
    };
    let batch = host.to_device::<Ad>(&device);
    let step = |logits: Tensor<Ad, 2>| logits.powf_scalar(2.0).mean().backward();
    let want_logits = net.forward(&batch);
    let want_grads = step(want_logits.clone());
    let want = all(&net, &want_grads);
    let fused = net.with_kernel(FusedMlp);
    let got_logits = fused.forward(&batch);
    let got_grads = step(got_logits.clone());
    let got = all(&fused.with_kernel(OpByOp), &got_grads);
    assert_values_close(
        "logits",
        &values(got_logits.inner()),
        &values(want_logits.inner()),
    );
    assert_eq!(got.len(), 7 * 10);
    for ((name, g), (_, w)) in got.iter().zip(&want) {
        let err = relative_error(g, w);
        assert!(err <= 1e-5, "{name} gradient off by {err:e} (relative)");
    }
}

#[test]
fn frozen_backbone_training_steps_fuse_with_the_same_values() {
    let _serial = serial();
    let device = Default::default();
    let host = tall_batch(12);
    <Ad as Backend>::seed(&device, 3);
    let net: EdgeNetwork<Ad> = EdgeNetworkConfig::new(1).init(&device);
    let net = net.clone().load_record(net.into_record()).freeze_backbone();
    let (want_logits, want_head, want_backbone) = step_with(&net, &host);
    let fused = net.with_kernel(FusedMlp);
    let (logits, head, backbone) = step_with(&fused, &host);
    assert_values_close("logits", &logits, &want_logits);
    // Gradients: the contract's 1e-5 (the head's input differs from Burn's by f32 rounding).
    let err = relative_error(&head, &want_head);
    assert!(err <= 1e-5, "head gradient off by {err:e} (relative)");
    // A frozen backbone gets no gradient either way.
    assert!(
        backbone.is_none() && want_backbone.is_none(),
        "backbone gradient present"
    );
}
