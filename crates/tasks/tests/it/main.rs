//! Parity with the Python reference: metrics (scikit-learn) at 1e-9 and one training step
//! (PyTorch: loss, every gradient, the Adam update) at the fixtures' tolerances.

use std::collections::HashMap;
use std::fs::File;

use burn::backend::{Autodiff, Flex};
use burn::module::Param;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use gnn4c_root_gnn::{
    EdgeNetwork, EdgeNetworkConfig, load_pytorch_safetensors, save_pytorch_safetensors,
};
use gnn4c_tasks::{Task, accuracy, per_event_loss, roc_auc, weighted_loss};
use gnn4c_testkit::{fixture, model_inputs, read_safetensors, shared};
use ndarray::{Array1, Array2};
use ndarray_npy::NpzReader;

type AD = Autodiff<Flex>;

/// The metrics fixture's tolerance: f64 on both sides, different summation order.
const METRIC_TOL: f64 = 1e-9;

#[test]
fn binary_and_multiclass_metrics_match_scikit_learn() {
    let mut z = fixture("metrics.npz");
    let labels: Array1<i64> = z.by_name("binary_labels").expect("labels");
    let scores: Array1<f64> = z.by_name("binary_scores").expect("scores");
    let weights: Array1<f64> = z.by_name("weights").expect("weights");
    let one = |name: &str, z: &mut NpzReader<File>| -> f64 {
        z.by_name::<ndarray::OwnedRepr<f64>, ndarray::Ix1>(name)
            .expect(name)[0]
    };
    let y: Vec<bool> = labels.iter().map(|&l| l == 1).collect();
    let (s, w) = (scores.to_vec(), weights.to_vec());
    assert!((roc_auc(&y, &s, None) - one("auc", &mut z)).abs() < METRIC_TOL);
    assert!(
        (roc_auc(&y, &s, Some(&w)) - one("auc_weighted", &mut z)).abs() < METRIC_TOL,
        "weighted, 10 % negative, many ties"
    );
    let targets = gnn4c_tasks::Targets::from_rows(1, labels.iter().map(|&l| [l as u8]));
    assert!((accuracy(&Task::Binary, &s, &targets) - one("accuracy", &mut z)).abs() < METRIC_TOL);

    let ml: Array1<i64> = z.by_name("multiclass_labels").expect("labels");
    let probs: Array2<f64> = z.by_name("multiclass_probs").expect("probs");
    let ovr: Array1<f64> = z.by_name("multiclass_auc_ovr").expect("ovr");
    let task = Task::Multiclass { n_classes: 4 };
    let onehot = gnn4c_tasks::Targets::from_rows(
        4,
        ml.iter()
            .map(|&l| (0..4).map(|c| u8::from(c == l)).collect::<Vec<u8>>()),
    );
    let flat: Vec<f64> = probs.iter().copied().collect();
    let m = gnn4c_tasks::evaluate(
        &task,
        &flat,
        &onehot,
        &vec![1.0; ml.len()],
        &vec![0.0; ml.len()],
    );
    for c in 0..4 {
        assert!(
            (m.auc[c] - ovr[c]).abs() < METRIC_TOL,
            "class {c}: {} vs {}",
            m.auc[c],
            ovr[c]
        );
    }
    assert!((m.auc_macro - one("multiclass_auc_macro", &mut z)).abs() < METRIC_TOL);
    assert!((m.accuracy - one("multiclass_accuracy", &mut z)).abs() < METRIC_TOL);
}

/// Every parameter's gradient under its PyTorch name (Linear weights transposed to [out, in]).
fn named_grads(
    m: &EdgeNetwork<AD>,
    grads: &<AD as burn::tensor::backend::AutodiffBackend>::Gradients,
) -> HashMap<String, Vec<f32>> {
    let mut out = HashMap::new();
    let mut put2 = |name: String, p: &Param<Tensor<AD, 2>>| {
        let g = p.grad(grads).expect("gradient").transpose();
        out.insert(name, g.into_data().to_vec::<f32>().expect("f32"));
    };
    let mut ones: Vec<(String, Vec<f32>)> = Vec::new();
    for (name, mlp) in m.blocks() {
        for (k, layer) in mlp.layers.iter().enumerate() {
            put2(format!("{name}.{}.weight", 3 * k), &layer.weight);
            let b = layer
                .bias
                .as_ref()
                .expect("bias")
                .grad(grads)
                .expect("gradient");
            ones.push((
                format!("{name}.{}.bias", 3 * k),
                b.into_data().to_vec().expect("f32"),
            ));
        }
        let l = 3 * mlp.layers.len();
        ones.push((
            format!("{name}.{l}.weight"),
            mlp.norm
                .gamma
                .grad(grads)
                .expect("g")
                .into_data()
                .to_vec()
                .expect("f32"),
        ));
        let beta = mlp
            .norm
            .beta
            .as_ref()
            .expect("beta")
            .grad(grads)
            .expect("g");
        ones.push((
            format!("{name}.{l}.bias"),
            beta.into_data().to_vec().expect("f32"),
        ));
    }
    put2("classify.weight".into(), &m.classify.weight);
    let cb = m
        .classify
        .bias
        .as_ref()
        .expect("bias")
        .grad(grads)
        .expect("g");
    ones.push((
        "classify.bias".into(),
        cb.into_data().to_vec().expect("f32"),
    ));
    out.extend(ones);
    out
}

fn train_step(name: &str, task: Task) {
    let mut z = fixture(&format!("train_step_{name}.npz"));
    let labels: Vec<i64> = match task {
        Task::Binary => z
            .by_name::<ndarray::OwnedRepr<f32>, ndarray::Ix1>("labels")
            .expect("labels")
            .iter()
            .map(|&l| l as i64)
            .collect(),
        _ => z
            .by_name::<ndarray::OwnedRepr<i64>, ndarray::Ix1>("labels")
            .expect("labels")
            .to_vec(),
    };
    let weights: Array1<f32> = z.by_name("weights").expect("weights");
    let want_per_event: Array1<f32> = z.by_name("per_event_loss").expect("per_event_loss");
    let want_loss: Array1<f64> = z.by_name("loss").expect("loss");

    let device = Default::default();
    let mut m = EdgeNetworkConfig::new(task.n_out()).init::<AD>(&device);
    load_pytorch_safetensors(
        &mut m,
        &shared(&format!("fixtures/edge_network_{name}.safetensors")),
    )
    .expect("weights");
    let batch = model_inputs(labels, weights.to_vec()).to_device::<AD>(&device);
    let per_event = per_event_loss(&task, m.forward(&batch), batch.labels.clone(), None);
    let per: Vec<f32> = per_event.clone().into_data().to_vec().expect("f32");
    for (i, (g, w)) in per.iter().zip(want_per_event.iter()).enumerate() {
        assert!(
            (g - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{name} per-event loss {i}: {g} vs {w}"
        );
    }
    let loss = weighted_loss(per_event, batch.weights);
    let got = f64::from(loss.clone().into_data().to_vec::<f32>().expect("f32")[0]);
    // Loss tolerance 1e-6 relative (README).
    assert!(
        (got - want_loss[0]).abs() <= 1e-6 * want_loss[0].abs(),
        "{name} loss {got} vs {}",
        want_loss[0]
    );

    let grads = loss.backward();
    let got_grads = named_grads(&m, &grads);
    let want_grads = read_safetensors(&shared(&format!(
        "fixtures/train_step_{name}_grads.safetensors"
    )));
    assert_eq!(
        got_grads.len(),
        want_grads.len(),
        "every parameter has a gradient"
    );
    for (key, (_, want)) in &want_grads {
        let got = got_grads
            .get(key)
            .unwrap_or_else(|| panic!("no gradient for {key}"));
        let scale = want.iter().fold(0.0f32, |a, x| a.max(x.abs()));
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            // 1e-4 relative to the tensor's max |g|, or 1e-7 absolute (README).
            assert!(
                (g - w).abs() <= (1e-4 * scale).max(1e-7),
                "{name} grad {key}[{k}]: {g} vs {w}"
            );
        }
    }

    // One Adam step, lr 1e-3, β 0.9/0.999, eps 1e-8 set explicitly (Burn's default differs).
    let gp = GradientsParams::from_grads(grads, &m);
    let mut adam = AdamConfig::new()
        .with_beta_1(0.9)
        .with_beta_2(0.999)
        .with_epsilon(1e-8)
        .init::<AD, EdgeNetwork<AD>>();
    let stepped = adam.step(1e-3, m, gp);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("after.safetensors");
    save_pytorch_safetensors(&stepped, &path).expect("save");
    let got_after = read_safetensors(&path);
    let want_after = read_safetensors(&shared(&format!(
        "fixtures/train_step_{name}_after.safetensors"
    )));
    let mut compared = 0;
    for (key, (_, want)) in &want_after {
        let (_, got) = got_after
            .get(key)
            .unwrap_or_else(|| panic!("no parameter {key}"));
        let (_, g) = &want_grads[key];
        for (k, ((a, w), gk)) in got.iter().zip(want).zip(g).enumerate() {
            // 1e-6 absolute wherever |g| > 1e-5 (Adam's first step is ≈ lr·sign(g)).
            if gk.abs() > 1e-5 {
                assert!(
                    (a - w).abs() <= 1e-6,
                    "{name} updated {key}[{k}]: {a} vs {w}"
                );
                compared += 1;
            }
        }
    }
    assert!(compared > 1000, "most parameters compared ({compared})");
}

#[test]
fn binary_train_step_matches_pytorch() {
    train_step("binary", Task::Binary);
}

#[test]
fn multiclass_train_step_matches_pytorch() {
    train_step("multiclass", Task::Multiclass { n_classes: 12 });
}

#[test]
fn zero_weight_batch_has_zero_loss_not_nan() {
    let device = Default::default();
    let per = Tensor::<Flex, 1>::from_floats([0.5, 1.5], &device);
    let w = Tensor::<Flex, 1>::from_floats([0.0, 0.0], &device);
    let l: Vec<f32> = weighted_loss(per.clone(), w)
        .into_data()
        .to_vec()
        .expect("f32");
    assert_eq!(l, vec![0.0]);
    // Σw ≈ 0 with non-zero |w|: normalised by Σ|w|, finite.
    let w = Tensor::<Flex, 1>::from_floats([1.0, -1.0], &device);
    let l: Vec<f32> = weighted_loss(per, w).into_data().to_vec().expect("f32");
    assert!((l[0] - (-0.5)).abs() < 1e-7);
}
