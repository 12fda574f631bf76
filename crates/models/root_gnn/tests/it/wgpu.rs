//! The backend-generic code path on Burn's wgpu backend (a Vulkan driver: a GPU's, or Mesa's
//! software lavapipe in CI): the same weights give the CPU backend's logits and one training
//! step's gradients. Built with `--features wgpu`.

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use gnn4c_root_gnn::{EdgeNetwork, EdgeNetworkConfig, load_pytorch_safetensors};
use gnn4c_testkit::{assert_close_per_tensor, logits_and_gradients, shared};

fn model<B: Backend>(n_out: usize, name: &str) -> EdgeNetwork<B> {
    let mut m = EdgeNetworkConfig::new(n_out).init::<B>(&Default::default());
    load_pytorch_safetensors(
        &mut m,
        &shared(&format!("fixtures/edge_network_{name}.safetensors")),
    )
    .expect("load weights");
    m
}

/// The logits of the fixture's graphs, and the gradients of `Σ logits² / 2`.
fn run<B: AutodiffBackend>(n_out: usize, name: &str) -> (Vec<f32>, Vec<Vec<f32>>) {
    let device = Default::default();
    let m = model::<B>(n_out, name);
    let batch = gnn4c_testkit::model_inputs(vec![0; 8], vec![1.0; 8]).to_device::<B>(&device);
    logits_and_gradients(&m, m.forward(&batch))
}

fn check(n_out: usize, name: &str) {
    let (cpu_logits, cpu_grads) = run::<Autodiff<Flex>>(n_out, name);
    let (gpu_logits, gpu_grads) = run::<Autodiff<Wgpu>>(n_out, name);
    // Logits 1e-5 (as against PyTorch), gradients 1e-4 of each tensor's largest.
    assert_close_per_tensor(
        &[gpu_logits],
        &[cpu_logits],
        1e-5,
        &format!("{name} logits"),
    );
    assert_close_per_tensor(&gpu_grads, &cpu_grads, 1e-4, &format!("{name} gradients"));
}

#[test]
fn wgpu_binary_logits_and_gradients_are_the_cpus() {
    check(1, "binary");
}

#[test]
fn wgpu_multiclass_logits_and_gradients_are_the_cpus() {
    check(12, "multiclass");
}
