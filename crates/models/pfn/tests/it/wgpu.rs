//! The backend-generic code path on Burn's wgpu backend (a Vulkan driver: a GPU's, or Mesa's
//! software lavapipe in CI): the CPU backend's logits and one training step's gradients with the
//! same weights, 12-class. Built with `--features wgpu`.

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::tensor::backend::AutodiffBackend;
use gnn4c_family::Classifier;
use gnn4c_testkit::{assert_close_per_tensor, logits_and_gradients};

use super::{batch, loaded};

/// The logits of the fixture's events, and the gradients of `Σ logits² / 2`.
fn run<B: AutodiffBackend>() -> (Vec<f32>, Vec<Vec<f32>>) {
    let m = loaded::<B>("multiclass", 12);
    logits_and_gradients(&m, m.logits(&batch(), &Default::default()))
}

#[test]
fn wgpu_multiclass_is_the_cpus() {
    let (cpu_logits, cpu_grads) = run::<Autodiff<Flex>>();
    let (gpu_logits, gpu_grads) = run::<Autodiff<Wgpu>>();
    // Logits 1e-5 (as against PyTorch), gradients 1e-4 of each tensor's largest.
    assert_close_per_tensor(&[gpu_logits], &[cpu_logits], 1e-5, "pfn logits");
    assert_close_per_tensor(&gpu_grads, &cpu_grads, 1e-4, "pfn gradients");
}
