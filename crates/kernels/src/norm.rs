//! LayerNorm over rows: `y = (x − μ)·(γ / √(σ² + ε)) + β`, with the variance taken from the
//! centred values (a second sweep over the row, which is in L1 by then), and its gradient.
//!
//! Row sums take one vector register of partial sums (16 lanes on AVX-512, 8 on AVX2), added
//! across lanes at the end, through `macerator` (explicit SIMD, chosen at run time); the
//! element-wise loops compile at the same width. `E[x²] − E[x]²` in one sweep, as burn-flex's
//! own fused LayerNorm computes it, cancels for rows whose mean is large against their spread
//! and can go negative (NaN) for constant rows.

use std::mem::MaybeUninit;

use macerator::{Scalar, Simd, vload_unaligned};
use rayon::prelude::*;

use crate::mat::block_rows;
use crate::rows::RowsOut;

/// Rows per task of [`layer_norm`] and [`layer_norm_backward`], at most.
const ROWS: usize = 256;

/// `Σ f(v)` over `row`: vectors of partial sums, their lanes added, then the tail in order.
/// `fv` and `fs` are the same function on a vector and on one value.
#[inline(always)]
fn lane_sum<S: Simd>(
    row: &[f32],
    fv: impl Fn(macerator::Vector<S, f32>) -> macerator::Vector<S, f32>,
    fs: impl Fn(f32) -> f32,
) -> f32 {
    let lanes = <f32 as Scalar>::lanes::<S>();
    let body = row.len() / lanes * lanes;
    let mut acc = 0.0f32.splat::<S>();
    let mut i = 0;
    while i < body {
        // SAFETY: `i + lanes <= body <= row.len()`: the whole vector lies inside `row`.
        acc += fv(unsafe { vload_unaligned::<S, f32>(row.as_ptr().add(i)) });
        i += lanes;
    }
    row[body..].iter().fold(acc.reduce_add(), |s, v| s + fs(*v))
}

/// A row's mean and `1 / √(σ² + ε)`.
#[inline(always)]
fn moments<S: Simd>(row: &[f32], eps: f32) -> (f32, f32) {
    let n = row.len() as f32;
    let mean = lane_sum::<S>(row, |v| v, |v| v) / n;
    let mean_v = mean.splat::<S>();
    let var = lane_sum::<S>(
        row,
        |v| {
            let d = v - mean_v;
            d * d
        },
        |v| {
            let d = v - mean;
            d * d
        },
    ) / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// LayerNorm of whole rows of `gamma.len()` values: `input` into `output` (every slot written).
#[macerator::with_simd]
#[allow(clippy::needless_lifetimes)] // `with_simd`'s expansion needs β's lifetime named
pub(crate) fn layer_norm_rows<'a, S: Simd>(
    input: &[f32],
    output: &mut [MaybeUninit<f32>],
    gamma: &[f32],
    beta: Option<&'a [f32]>,
    eps: f32,
) {
    let d = gamma.len();
    assert!(
        d > 0 && input.len() == output.len() && input.len().is_multiple_of(d),
        "LayerNorm rows"
    );
    for (x, y) in input.chunks_exact(d).zip(output.chunks_exact_mut(d)) {
        let (mean, rstd) = moments::<S>(x, eps);
        match beta {
            Some(beta) => {
                for (((y, x), g), b) in y.iter_mut().zip(x).zip(gamma).zip(beta) {
                    y.write((*x - mean) * (rstd * *g) + *b);
                }
            }
            None => {
                for ((y, x), g) in y.iter_mut().zip(x).zip(gamma) {
                    y.write((*x - mean) * (rstd * *g));
                }
            }
        }
    }
}

/// LayerNorm's gradient over whole rows (`xs`, `gs`: the rows' inputs and incoming gradients,
/// `gamma.len()` values each): with `x̂ = (x − μ)·r`, `r = 1/√(σ² + ε)`,
/// `dx = (g·γ − mean(g·γ) − x̂·mean(g·γ·x̂))·r` into `dx` (every slot written), and `Σ g·x̂`,
/// `Σ g` added in f64 onto `dgamma`, `dbeta`.
#[macerator::with_simd]
pub(crate) fn layer_norm_backward_rows<S: Simd>(
    xs: &[f32],
    gs: &[f32],
    gamma: &[f32],
    eps: f32,
    dx: &mut [MaybeUninit<f32>],
    dgamma: &mut [f64],
    dbeta: &mut [f64],
) {
    let d = gamma.len();
    assert!(
        d > 0 && xs.len() == gs.len() && xs.len() == dx.len() && xs.len().is_multiple_of(d),
        "LayerNorm gradient rows"
    );
    // Scratch rows: x̂, g·γ, g·γ·x̂.
    let mut xhat = vec![0.0f32; d];
    let mut gg = vec![0.0f32; d];
    let mut ggx = vec![0.0f32; d];
    let n = d as f32;
    // One simple loop per quantity (zipped, no indexing): each compiles to full-width vector
    // code.
    for ((x, g), dx) in xs
        .chunks_exact(d)
        .zip(gs.chunks_exact(d))
        .zip(dx.chunks_exact_mut(d))
    {
        let (mean, rstd) = moments::<S>(x, eps);
        for (h, x) in xhat.iter_mut().zip(x) {
            *h = (*x - mean) * rstd;
        }
        for ((p, g), w) in gg.iter_mut().zip(g).zip(gamma) {
            *p = *g * *w;
        }
        for ((p, q), h) in ggx.iter_mut().zip(&gg).zip(&xhat) {
            *p = *q * *h;
        }
        for ((s, g), h) in dgamma.iter_mut().zip(g).zip(&xhat) {
            *s += f64::from(*g * *h);
        }
        for (s, g) in dbeta.iter_mut().zip(g) {
            *s += f64::from(*g);
        }
        let a = lane_sum::<S>(&gg, |v| v, |v| v) / n;
        let c = lane_sum::<S>(&ggx, |v| v, |v| v) / n;
        for ((dx, q), h) in dx.iter_mut().zip(&gg).zip(&xhat) {
            dx.write((*q - a - *h * c) * rstd);
        }
    }
}

/// LayerNorm over the rows of `input` (`gamma.len()` values each): `(x − μ)·(γ·r) + β`.
/// Panics if `input` is not whole rows or `beta` is not as wide as `gamma`.
pub fn layer_norm(input: &[f32], gamma: &[f32], beta: Option<&[f32]>, eps: f32) -> Vec<f32> {
    let d = gamma.len();
    assert!(beta.is_none_or(|b| b.len() == d), "LayerNorm: β's width");
    if d == 0 {
        return vec![0.0; input.len()];
    }
    let block = block_rows(input.len() / d, ROWS) * d;
    let mut out = RowsOut::new(input.len());
    out.parts()
        .par_chunks_mut(block)
        .zip(input.par_chunks(block))
        .for_each(|(y, x)| layer_norm_rows(x, y, gamma, beta, eps));
    // SAFETY: the chunks cover every element (input and output have the same length), and
    // `layer_norm_rows` wrote each.
    unsafe { out.into_vec() }
}

/// LayerNorm's gradient for the rows `x` and incoming gradient `grad`: `(dx, dγ, dβ)`. `dγ` and
/// `dβ` are summed in f64 per block of rows (`block_rows`) and the blocks added in order, so
/// they do not depend on the number of threads; a row's `dx` depends on that row alone.
pub fn layer_norm_backward(
    x: &[f32],
    grad: &[f32],
    gamma: &[f32],
    eps: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let d = gamma.len();
    assert_eq!(x.len(), grad.len(), "LayerNorm gradient: shapes");
    if d == 0 || x.is_empty() {
        return (vec![0.0; x.len()], vec![0.0; d], vec![0.0; d]);
    }
    let mut dx = RowsOut::new(x.len());
    let block = block_rows(x.len() / d, ROWS) * d;
    let n_blocks = x.len().div_ceil(block);
    let mut partial = vec![0.0f64; n_blocks * 2 * d];
    dx.parts()
        .par_chunks_mut(block)
        .zip(partial.par_chunks_mut(2 * d))
        .enumerate()
        .for_each(|(b, (dx, part))| {
            let rows = b * block..b * block + dx.len();
            let (dgamma, dbeta) = part.split_at_mut(d);
            layer_norm_backward_rows(&x[rows.clone()], &grad[rows], gamma, eps, dx, dgamma, dbeta);
        });
    let mut sums = vec![0.0f64; 2 * d];
    for part in partial.chunks_exact(2 * d) {
        for (s, v) in sums.iter_mut().zip(part) {
            *s += *v;
        }
    }
    let narrow = |v: &[f64]| v.iter().map(|&s| s as f32).collect::<Vec<f32>>();
    // SAFETY: the blocks cover every row, and `layer_norm_backward_rows` wrote each slot.
    let dx = unsafe { dx.into_vec() };
    (dx, narrow(&sums[..d]), narrow(&sums[d..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_values::values;

    /// The f64 LayerNorm of one row and its gradient, from the same f32 inputs.
    fn reference(x: &[f32], g: &[f32], gamma: &[f32], beta: &[f32]) -> (Vec<f64>, Vec<f64>) {
        let d = x.len() as f64;
        let x: Vec<f64> = x.iter().map(|&v| v.into()).collect();
        let mean = x.iter().sum::<f64>() / d;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d;
        let r = 1.0 / (var + 1e-5).sqrt();
        let xhat: Vec<f64> = x.iter().map(|v| (v - mean) * r).collect();
        let y = xhat
            .iter()
            .zip(gamma.iter().zip(beta))
            .map(|(h, (&g, &b))| h * f64::from(g) + f64::from(b))
            .collect();
        let gg: Vec<f64> = g
            .iter()
            .zip(gamma)
            .map(|(&g, &w)| f64::from(g) * f64::from(w))
            .collect();
        let a = gg.iter().sum::<f64>() / d;
        let c = gg.iter().zip(&xhat).map(|(g, h)| g * h).sum::<f64>() / d;
        let dx = gg
            .iter()
            .zip(&xhat)
            .map(|(g, h)| (g - a - h * c) * r)
            .collect();
        (y, dx)
    }

    fn assert_close(what: &str, got: &[f32], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len(), "{what}: lengths");
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            let err = (f64::from(*g) - w).abs();
            assert!(
                err <= tol * w.abs().max(1.0),
                "{what}[{k}]: got {g}, want {w}"
            );
        }
    }

    /// Rows of widths below, at and above the lane count, with shifted and constant rows;
    /// values and gradients against f64 from the same f32 inputs (f32 rounding of sums over
    /// ≤ 70 values: 1e-5 relative).
    #[test]
    fn values_and_gradients_match_f64() {
        for d in [1usize, 5, 16, 20, 64, 70] {
            let n = 300;
            let mut x = values(n * d, 1 + d as u64);
            // A row far from zero with a small spread, and a constant row.
            for (j, v) in x[..d].iter_mut().enumerate() {
                *v = 12.0 + 0.01 * (j as f32 - d as f32 / 2.0);
            }
            x[d..2 * d].fill(1.5);
            let g = values(n * d, 7 + d as u64);
            let gamma: Vec<f32> = values(d, 3).iter().map(|v| 1.0 + 0.3 * v).collect();
            let beta = values(d, 5);
            let y = layer_norm(&x, &gamma, Some(&beta), 1e-5);
            let (dx, dgamma, dbeta) = layer_norm_backward(&x, &g, &gamma, 1e-5);
            let mut want_dgamma = vec![0.0f64; d];
            let mut want_dbeta = vec![0.0f64; d];
            for r in 0..n {
                let rows = r * d..(r + 1) * d;
                let (want_y, want_dx) =
                    reference(&x[rows.clone()], &g[rows.clone()], &gamma, &beta);
                // The large-mean row keeps ~3 digits fewer in f32 (x − μ of 12 + 0.01·z).
                let tol = if r == 0 { 2e-3 } else { 1e-5 };
                assert_close(
                    &format!("y, width {d}, row {r}"),
                    &y[rows.clone()],
                    &want_y,
                    tol,
                );
                assert_close(
                    &format!("dx, width {d}, row {r}"),
                    &dx[rows.clone()],
                    &want_dx,
                    tol * 10.0,
                );
                let x64: Vec<f64> = x[rows.clone()].iter().map(|&v| v.into()).collect();
                let mean = x64.iter().sum::<f64>() / d as f64;
                let var = x64.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
                for j in 0..d {
                    let h = (x64[j] - mean) / (var + 1e-5).sqrt();
                    want_dgamma[j] += f64::from(g[r * d + j]) * h;
                    want_dbeta[j] += f64::from(g[r * d + j]);
                }
            }
            assert_close(&format!("dγ, width {d}"), &dgamma, &want_dgamma, 1e-4);
            assert_close(&format!("dβ, width {d}"), &dbeta, &want_dbeta, 1e-5);
            assert!(
                y[d..2 * d]
                    .iter()
                    .zip(&beta)
                    .all(|(y, b)| (y - b).abs() < 1e-3),
                "constant row → β"
            );
        }
    }

    /// A row's values and gradient depend on that row alone (rows split as between two MPI
    /// ranks give the same bits).
    #[test]
    fn rows_do_not_depend_on_their_neighbours() {
        let (n, d) = (600, 64);
        let x = values(n * d, 11);
        let g = values(n * d, 12);
        let gamma = values(d, 13);
        let (dx, ..) = layer_norm_backward(&x, &g, &gamma, 1e-5);
        let y = layer_norm(&x, &gamma, None, 1e-5);
        let cut = 77 * d;
        let (dx_a, ..) = layer_norm_backward(&x[..cut], &g[..cut], &gamma, 1e-5);
        let (dx_b, ..) = layer_norm_backward(&x[cut..], &g[cut..], &gamma, 1e-5);
        assert!(
            dx_a.iter().chain(&dx_b).eq(dx.iter()),
            "dx depends on the other rows"
        );
        let y_b = layer_norm(&x[cut..], &gamma, None, 1e-5);
        assert!(
            y_b.iter().eq(y[cut..].iter()),
            "y depends on the other rows"
        );
    }
}
