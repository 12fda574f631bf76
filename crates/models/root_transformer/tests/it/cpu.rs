//! The fused kernels compute what Burn's operations compute (`OpByOp`), at the default size, on
//! events of 0 to 15 objects: logits within 1e-5, every parameter's gradient within 1e-4 of its
//! tensor's largest, with and without the pair bias, and a frozen backbone (no tracked input)
//! running the fused operations untracked. PyTorch parity of both kernels is in
//! `gnn4c-root-transformer`'s tests.

use burn::backend::{Autodiff, Flex};
use burn::module::AutodiffModule;
use burn::prelude::*;
use gnn4c_root_transformer::FusedTransformer;
use gnn4c_root_transformer::{
    OpByOp, RootTransformer, RootTransformerConfig, TokenBatch, TokenEvent, TransformerKernel,
};

type AD = Autodiff<Flex>;

/// Seeded values in [-1, 1).
fn values(n: usize, seed: &mut u64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// 40 events of 0 to 15 objects (7 features, 2 globals, 3 pair features).
fn batch() -> TokenBatch {
    let mut seed = 5;
    let events: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = (0..40)
        .map(|e| {
            let k = (e * 7) % 16;
            (
                values(k * 7, &mut seed),
                values(2, &mut seed),
                values(k * k * 3, &mut seed),
            )
        })
        .collect();
    let refs: Vec<TokenEvent<'_>> = events
        .iter()
        .map(|(t, g, p)| TokenEvent {
            tokens: t,
            globals: g,
            pair: p,
        })
        .collect();
    TokenBatch::collate(&refs, 7, 2, 3)
}

/// A model of `config`, its parameters drawn now (Burn initialises a parameter when first read,
/// separately in each clone), to be cloned for both kernels.
fn model(config: &RootTransformerConfig, frozen: bool) -> RootTransformer<AD> {
    let model: RootTransformer<AD> = config.init(&Default::default());
    let drawn = model.clone().into_record();
    let model = model.load_record(drawn);
    if frozen {
        model.freeze_backbone()
    } else {
        model
    }
}

/// Logits and every parameter's gradient of a weighted sum of the logits, run by `kernel`.
fn run<K>(model: RootTransformer<AD>, kernel: K) -> (Vec<f32>, Vec<Vec<f32>>)
where
    K: TransformerKernel<AD> + Clone + Send + std::fmt::Debug,
{
    let device = Default::default();
    let model = model.with_kernel(kernel);
    let logits = model.forward(&batch(), &device);
    let weights = Tensor::<AD, 2>::from_data(
        TensorData::new(
            values(logits.dims().iter().product(), &mut 9),
            logits.dims(),
        ),
        &device,
    );
    let values: Vec<f32> = logits.clone().into_data().to_vec().expect("f32");
    let grads = (logits * weights).sum().backward();
    (
        values,
        gnn4c_testkit::parameter_gradients::<AD, _>(&model, &grads),
    )
}

fn same_function(config: &RootTransformerConfig, frozen: bool) -> Vec<Vec<f32>> {
    let m = model(config, frozen);
    let (want, want_grads) = run(m.clone(), OpByOp);
    let (got, got_grads) = run(m, FusedTransformer);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-5, "logit {k}: {g} vs {w}");
    }
    assert_eq!(
        got_grads.len(),
        want_grads.len(),
        "the same parameters get gradients"
    );
    for (t, (g, w)) in got_grads.iter().zip(&want_grads).enumerate() {
        let scale = w.iter().fold(0.0f32, |a, x| a.max(x.abs()));
        for (k, (g, w)) in g.iter().zip(w).enumerate() {
            assert!(
                (g - w).abs() <= (1e-4 * scale).max(1e-7),
                "parameter {t}[{k}]: {g} vs {w}"
            );
        }
    }
    got_grads
}

#[test]
fn fused_kernels_compute_burns_function_with_the_pair_bias() {
    same_function(&RootTransformerConfig::new(5), false);
}

#[test]
fn fused_kernels_compute_burns_function_without_the_pair_bias() {
    same_function(&RootTransformerConfig::new(3).with_pair_bias(false), false);
}

#[test]
fn a_frozen_backbone_runs_the_fused_kernels_untracked() {
    let grads = same_function(&RootTransformerConfig::new(2).with_n_layers(2), true);
    assert_eq!(grads.len(), 2, "the head's weight and bias alone");
}

#[test]
fn inference_on_the_inner_backend_gives_the_training_logits() {
    let config = RootTransformerConfig::new(4);
    let device = Default::default();
    let model = model(&config, false).with_kernel(FusedTransformer);
    let b = batch();
    let trained: Vec<f32> = model
        .forward(&b, &device)
        .into_data()
        .to_vec()
        .expect("f32");
    let inner: RootTransformer<Flex, FusedTransformer> = model.valid();
    let scored: Vec<f32> = inner
        .forward(&b, &device)
        .into_data()
        .to_vec()
        .expect("f32");
    assert_eq!(trained, scored);
}
