//! The backend-generic code path on Burn's wgpu backend (a Vulkan driver: a GPU's, or Mesa's
//! software lavapipe in CI): Burn's operations (`OpByOp`, what CUDA runs too) give the CPU
//! backend's logits and one training step's gradients with the same weights, binary and
//! 12-class, with and without the pair bias. Built with `--features wgpu`.

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::tensor::backend::AutodiffBackend;
use gnn4c_testkit::{assert_close_per_tensor, logits_and_gradients};

use super::{batch, loaded};

/// The logits of the fixture's events, and the gradients of `Σ logits² / 2`.
fn run<B: AutodiffBackend>(
    variant: &str,
    n_out: usize,
    pair_bias: bool,
) -> (Vec<f32>, Vec<Vec<f32>>) {
    let m = loaded::<B>(variant, n_out, pair_bias);
    logits_and_gradients(&m, m.forward(&batch(), &Default::default()))
}

fn check(variant: &str, n_out: usize, pair_bias: bool) {
    let (cpu_logits, cpu_grads) = run::<Autodiff<Flex>>(variant, n_out, pair_bias);
    let (gpu_logits, gpu_grads) = run::<Autodiff<Wgpu>>(variant, n_out, pair_bias);
    // Logits 1e-5 (as against PyTorch), gradients 1e-4 of each tensor's largest.
    assert_close_per_tensor(
        &[gpu_logits],
        &[cpu_logits],
        1e-5,
        &format!("{variant} logits"),
    );
    assert_close_per_tensor(
        &gpu_grads,
        &cpu_grads,
        1e-4,
        &format!("{variant} gradients"),
    );
}

#[test]
fn wgpu_binary_with_pair_bias_is_the_cpus() {
    check("binary_pair", 1, true);
}

#[test]
fn wgpu_multiclass_without_pair_bias_is_the_cpus() {
    check("multiclass_nopair", 12, false);
}
