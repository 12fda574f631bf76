//! A linear layer `x · W + b` as one kernel, forward and backward, with what follows it fused:
//! a residual added (`r + x·W + b`) or the exact GELU (`GELU(x·W + b)`).
//!
//! Each block of rows has the product written by one `gemm` call (which does not read its
//! output first), then the bias and the residual added and the GELU applied while the rows are
//! in cache; no zero-filled output. The backward runs per block too: the GELU's
//! gradient, then `dx = dz · Wᵀ` and `dW += xᵀ · dz` on strided views (no transposed copies),
//! `db += Σ dz`. As in [`crate::mlp_backward`], the parameter gradients are summed per fixed
//! chunk of blocks (f32 products, f64 bias sums), then the chunks in order in f64, so no value
//! depends on the number of threads.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::act::{gelu_backward_rows, gelu_in_place, gelu_rows};
use crate::chunks::{ChunkSums, backward_chunks, narrow};
use crate::mat::{MatRef, block_rows, gemm_write, row_blocks};
use crate::norm::{layer_norm_backward_rows, layer_norm_rows};
use crate::rows::{RowsOut, assume_init, block_slots, scratch_slots};

/// Rows per block (and per task), at most.
const ROWS: usize = 256;

/// What follows the product.
#[derive(Debug, Clone, Copy)]
pub enum Then<'a> {
    /// Nothing: `x · W + b`.
    Nothing,
    /// `residual + x · W + b` (`residual`: `[rows, d_out]` row-major).
    Residual(&'a [f32]),
    /// `GELU(x · W + b)`, the exact (erf) GELU; with `keep_input`, the forward also returns
    /// `x · W + b` for the backward (in place otherwise).
    Gelu {
        /// Return the GELU's input (training).
        keep_input: bool,
    },
}

/// A LayerNorm of the input's rows before the product (inference: each block normalises its
/// rows into scratch, nothing is kept).
#[derive(Debug, Clone, Copy)]
pub struct RowNorm<'a> {
    /// γ, `[d_in]`.
    pub gamma: &'a [f32],
    /// β, `[d_in]`, if any.
    pub beta: Option<&'a [f32]>,
    /// ε.
    pub epsilon: f32,
}

impl RowNorm<'_> {
    /// The LayerNorm of whole `rows` into `scratch` (resized to fit).
    pub(crate) fn apply<'s>(&self, rows: &[f32], scratch: &'s mut Vec<f32>) -> &'s mut [f32] {
        let slots = scratch_slots(scratch, rows.len());
        layer_norm_rows(rows, slots, self.gamma, self.beta, self.epsilon);
        // SAFETY: `layer_norm_rows` wrote every slot.
        unsafe { assume_init(slots) }
    }
}

/// `x [n, d_in] · weight [d_in, d_out] + bias` (with `norm`, of `LayerNorm(x)`; `x` row-major
/// then), then `then`: the output `[n, d_out]` and, after a GELU, its input (for
/// [`linear_backward`]). Panics on inconsistent shapes.
pub fn linear_forward(
    x: MatRef<'_>,
    norm: Option<RowNorm<'_>>,
    weight: MatRef<'_>,
    bias: Option<&[f32]>,
    then: Then<'_>,
) -> (Vec<f32>, Option<Vec<f32>>) {
    let (n, d_out) = (x.rows(), weight.cols());
    assert_eq!(x.cols(), weight.rows(), "linear: x's width is W's height");
    let x_values = norm.map(|nm| {
        assert!(
            nm.gamma.len() == x.cols() && nm.beta.is_none_or(|b| b.len() == x.cols()),
            "linear: the LayerNorm's width"
        );
        x.row_major_values()
            .expect("linear: a LayerNorm's input is row-major")
    });
    assert!(
        bias.is_none_or(|b| b.len() == d_out),
        "linear: the bias's width"
    );
    if let Then::Residual(r) = then {
        assert_eq!(r.len(), n * d_out, "linear: the residual's shape");
    }
    let gelu = matches!(then, Then::Gelu { .. });
    let keep = matches!(then, Then::Gelu { keep_input: true });
    let mut out = RowsOut::new(n * d_out);
    let mut pre = RowsOut::new(if keep { n * d_out } else { 0 });
    if n == 0 || d_out == 0 {
        // SAFETY: nothing to initialise (zero elements).
        return unsafe { (out.into_vec(), keep.then(|| pre.into_vec())) };
    }
    let blocks = row_blocks(n, block_rows(n, ROWS));
    let outs = block_slots(out.parts(), &blocks, d_out);
    let pres = block_slots(pre.parts(), &blocks, if keep { d_out } else { 0 });
    let parts: Vec<_> = outs
        .into_iter()
        .zip(pres)
        .map(|((first, m, out), (_, _, pre))| (first, m, out, pre))
        .collect();
    parts
        .into_par_iter()
        .for_each_init(Vec::new, |normed, (first, m, out, pre)| {
            let d_in = x.cols();
            let x_rows = match (norm, x_values) {
                (Some(nm), Some(v)) => {
                    let rows = &v[first * d_in..(first + m) * d_in];
                    MatRef::row_major(nm.apply(rows, normed), m, d_in)
                }
                _ => x.row_range(first, m),
            };
            // The product goes where the GELU's input is kept, else straight into the output.
            let (z_slots, gelu_out) = if keep { (pre, Some(out)) } else { (out, None) };
            let z = gemm_write(x_rows, weight, z_slots);
            let residual = match then {
                Then::Residual(r) => Some(&r[first * d_out..(first + m) * d_out]),
                _ => None,
            };
            finish_rows(z, d_out, bias, residual, gelu, gelu_out);
        });
    // SAFETY: the blocks cover all `n` rows, and each wrote its rows of `out` (and of `pre`
    // when it is kept): the product, then the GELU.
    unsafe { (out.into_vec(), keep.then(|| pre.into_vec())) }
}

/// A block's product `z` (rows `width` wide) finished row by row, so that the GELU reads the
/// row the additions left in L1: the bias and then the block's rows of `residual` added, then,
/// with `gelu`, the exact GELU into `gelu_out` (`z` kept as its input) or in place.
pub(crate) fn finish_rows(
    z: &mut [f32],
    width: usize,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    gelu: bool,
    gelu_out: Option<&mut [MaybeUninit<f32>]>,
) {
    let mut gelu_out = gelu_out.map(|out| out.chunks_exact_mut(width));
    for (k, row) in z.chunks_exact_mut(width).enumerate() {
        add_rows(row, bias, residual.map(|r| &r[k * width..(k + 1) * width]));
        if let Some(out) = gelu_out.as_mut().and_then(Iterator::next) {
            gelu_rows(row, out);
        } else if gelu {
            gelu_in_place(row);
        }
    }
}

multiversioned! {
    /// `row + bias + residual`, in that order (PyTorch's `r + (x·W + b)`), each where given.
    pub(crate) fn add_rows(row: &mut [f32], bias: Option<&[f32]>, residual: Option<&[f32]>) {
        if let Some(b) = bias {
            for (z, &b) in row.iter_mut().zip(b) {
                *z += b;
            }
        }
        if let Some(r) = residual {
            for (z, &r) in row.iter_mut().zip(r) {
                *z += r;
            }
        }
    }
}

/// The gradients of [`linear_backward`]: of `x` (where asked), of the weight and bias, and of
/// a LayerNorm before the layer (γ, β) where there is one.
#[derive(Debug, Clone)]
pub struct LinearGrads {
    /// `[n, d_in]`.
    pub x: Option<Vec<f32>>,
    /// `[d_in, d_out]`.
    pub weight: Vec<f32>,
    /// `[d_out]`.
    pub bias: Vec<f32>,
    /// `(dγ, dβ)`, `[d_in]` each.
    pub norm: Option<(Vec<f32>, Vec<f32>)>,
}

/// The gradients of [`linear_forward`] for the output's gradient `grad [n, d_out]`; `pre` is
/// what a GELU forward kept (`None` without a GELU; a residual's gradient is `grad` itself).
/// With `norm`, `x` is the LayerNorm's input (row-major), whose normalised rows each block
/// recomputes (the forward kept none), and `dx` is through the LayerNorm (always computed);
/// otherwise `dx` only if `want_x`.
pub fn linear_backward(
    x: MatRef<'_>,
    norm: Option<RowNorm<'_>>,
    weight: MatRef<'_>,
    grad: &[f32],
    pre: Option<&[f32]>,
    want_x: bool,
) -> LinearGrads {
    let (n, d_in, d_out) = (x.rows(), x.cols(), weight.cols());
    assert_eq!(
        d_in,
        weight.rows(),
        "linear gradient: x's width is W's height"
    );
    assert_eq!(
        grad.len(),
        n * d_out,
        "linear gradient: the output gradient's shape"
    );
    assert!(
        pre.is_none_or(|p| p.len() == n * d_out),
        "linear gradient: the GELU input's shape"
    );
    let x_values = norm.map(|nm| {
        assert!(
            nm.gamma.len() == d_in && nm.beta.is_none_or(|b| b.len() == d_in),
            "linear gradient: the LayerNorm's width"
        );
        x.row_major_values()
            .expect("linear gradient: a LayerNorm's input is row-major")
    });
    let want_x = want_x || norm.is_some();
    let blocks = row_blocks(n, block_rows(n, ROWS));
    let mut dx = RowsOut::new(if want_x { n * d_in } else { 0 });
    let parts = block_slots(dx.parts(), &blocks, if want_x { d_in } else { 0 });
    let w_t = weight.transposed();
    let w_t = MatRef::row_major(&w_t, d_out, d_in);
    // Sums: Σ dz (d_out), and with a LayerNorm Σ g·x̂ and Σ g (d_in each).
    let sums_len = d_out + if norm.is_some() { 2 * d_in } else { 0 };
    let block = |chunk: &mut ChunkSums<'_>, sc: &mut Scratch, first, m, dx_rows| {
        let g = &grad[first * d_out..(first + m) * d_out];
        let dz: &[f32] = match pre {
            Some(pre) => {
                sc.dz.resize(m * d_out, 0.0);
                let p = &pre[first * d_out..(first + m) * d_out];
                gelu_backward_rows(p, g, &mut sc.dz);
                &sc.dz
            }
            None => g,
        };
        let (db, norm_sums) = chunk.sums.split_at_mut(d_out);
        column_sums(dz, db);
        let dz_m = MatRef::row_major(dz, m, d_out);
        match (norm, x_values) {
            (Some(nm), Some(v)) => {
                // dW from the normalised rows, recomputed; dx through the LayerNorm.
                let rows = &v[first * d_in..(first + m) * d_in];
                let normed = nm.apply(rows, &mut sc.normed);
                chunk.weights[0].add(MatRef::row_major(normed, m, d_in).t(), dz_m);
                let du = gemm_write(dz_m, w_t, scratch_slots(&mut sc.du, m * d_in));
                let (dgamma, dbeta) = norm_sums.split_at_mut(d_in);
                layer_norm_backward_rows(rows, du, nm.gamma, nm.epsilon, dx_rows, dgamma, dbeta);
            }
            _ => {
                chunk.weights[0].add(x.row_range(first, m).t(), dz_m);
                if want_x {
                    gemm_write(dz_m, w_t, dx_rows);
                }
            }
        }
    };
    let (weights, sums) = backward_chunks(parts, &[d_in * d_out], sums_len, block);
    // SAFETY: with `want_x`, the blocks cover all `n` rows and each wrote its rows of `dx`
    // (with `n = 0` it is empty); without, `dx` has no elements.
    let dx = unsafe { dx.into_vec() };
    LinearGrads {
        x: want_x.then_some(dx),
        weight: weights.into_iter().next().expect("one weight"),
        bias: narrow(&sums[..d_out]),
        norm: norm.map(|_| {
            (
                narrow(&sums[d_out..d_out + d_in]),
                narrow(&sums[d_out + d_in..]),
            )
        }),
    }
}

/// A linear layer's backward scratch, per chunk: the GELU's gradient, the normalised rows and
/// their gradient.
#[derive(Default)]
struct Scratch {
    dz: Vec<f32>,
    normed: Vec<f32>,
    du: Vec<f32>,
}

multiversioned! {
    /// Column sums of the rows of `acc.len()` values of `v`, added (f64) onto `acc`.
    pub(crate) fn column_sums(v: &[f32], acc: &mut [f64]) {
        if acc.is_empty() {
            return;
        }
        for row in v.chunks_exact(acc.len()) {
            for (a, &x) in acc.iter_mut().zip(row) {
                *a += f64::from(x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_values::values;

    fn gelu(v: f64) -> f64 {
        // erf by its Taylor series (|v| ≤ 4 here).
        let x = v / 2f64.sqrt();
        let (mut term, mut sum) = (x, x);
        for k in 1..300 {
            term *= -x * x / f64::from(k);
            sum += term / f64::from(2 * k + 1);
        }
        0.5 * v * (1.0 + sum * 2.0 / std::f64::consts::PI.sqrt())
    }

    /// The layer in f64 from the formula.
    fn reference(
        x: &[f32],
        w: &[f32],
        b: &[f32],
        r: Option<&[f32]>,
        g: bool,
        d: [usize; 3],
    ) -> Vec<f64> {
        let [n, d_in, d_out] = d;
        let mut y = vec![0.0f64; n * d_out];
        for i in 0..n {
            for o in 0..d_out {
                let mut z = f64::from(b[o]);
                for k in 0..d_in {
                    z += f64::from(x[i * d_in + k]) * f64::from(w[k * d_out + o]);
                }
                if g {
                    z = gelu(z);
                }
                y[i * d_out + o] = z + r.map_or(0.0, |r| f64::from(r[i * d_out + o]));
            }
        }
        y
    }

    #[test]
    fn forward_and_backward_match_the_formula_for_every_epilogue() {
        // 600 rows: three blocks, the last of 88 rows.
        let (n, d_in, d_out) = (600, 12, 5);
        let (x, w, b) = (
            values(n * d_in, 1),
            values(d_in * d_out, 2),
            values(d_out, 3),
        );
        let r = values(n * d_out, 4);
        let grad = values(n * d_out, 5);
        let xm = MatRef::row_major(&x, n, d_in);
        let wm = MatRef::row_major(&w, d_in, d_out);
        for (then, res, g) in [
            (Then::Nothing, None, false),
            (Then::Residual(&r), Some(&r[..]), false),
            (Then::Gelu { keep_input: true }, None, true),
        ] {
            let (y, pre) = linear_forward(xm, None, wm, Some(&b), then);
            let want = reference(&x, &w, &b, res, g, [n, d_in, d_out]);
            for (k, (y, w)) in y.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*y) - w).abs() < 2e-6,
                    "{then:?} output {k}: {y} vs {w}"
                );
            }
            let grads = linear_backward(xm, None, wm, &grad, pre.as_deref(), true);
            let (dx, dw, db) = (grads.x.expect("asked for"), grads.weight, grads.bias);
            // Gradients of Σ y ⊙ grad by the chain rule in f64.
            let dz: Vec<f64> = (0..n * d_out)
                .map(|k| {
                    let gk = f64::from(grad[k]);
                    if !g {
                        return gk;
                    }
                    let (i, o) = (k / d_out, k % d_out);
                    let z: f64 = f64::from(b[o])
                        + (0..d_in)
                            .map(|c| f64::from(x[i * d_in + c]) * f64::from(w[c * d_out + o]))
                            .sum::<f64>();
                    let h = 1e-5;
                    gk * (gelu(z + h) - gelu(z - h)) / (2.0 * h)
                })
                .collect();
            for o in 0..d_out {
                let want: f64 = (0..n).map(|i| dz[i * d_out + o]).sum();
                assert!((f64::from(db[o]) - want).abs() < 1e-4, "{then:?} db {o}");
                for c in 0..d_in {
                    let want: f64 = (0..n)
                        .map(|i| f64::from(x[i * d_in + c]) * dz[i * d_out + o])
                        .sum();
                    assert!(
                        (f64::from(dw[c * d_out + o]) - want).abs() < 1e-4,
                        "{then:?} dW"
                    );
                }
            }
            for i in 0..n {
                for c in 0..d_in {
                    let want: f64 = (0..d_out)
                        .map(|o| dz[i * d_out + o] * f64::from(w[c * d_out + o]))
                        .sum();
                    assert!(
                        (f64::from(dx[i * d_in + c]) - want).abs() < 1e-5,
                        "{then:?} dx"
                    );
                }
            }
        }
    }
}
