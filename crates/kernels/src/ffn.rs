//! A pre-norm Transformer layer's feed-forward half as one kernel, forward and backward:
//! `y = x + GELU(LayerNorm(x) · W₁ + b₁) · W₂ + b₂` (exact GELU).
//!
//! Each block of rows runs the whole chain while its rows are in cache: the normalised rows and
//! the hidden activations (`4d` wide, the largest values of the layer) live in per-task
//! scratch, never in a full-size tensor, except what the backward needs: in training the
//! forward keeps `GELU(z)` and its slope `GELU′(z)` (`z = LN(x)·W₁ + b₁`), both from one `erf`
//! and one exponential, and the backward recomputes only `LN(x)` per block. Parameter gradients
//! are summed as in [`crate::linear_backward`]: per fixed chunk of blocks (f32 products, f64
//! sums), then the chunks in order, so no value depends on the number of threads.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::act::gelu_with_slope;
use crate::chunks::{ChunkSums, backward_chunks, narrow};
use crate::linear::{RowNorm, column_sums, finish_rows};
use crate::mat::{MatRef, block_rows, gemm_write, row_blocks};
use crate::norm::layer_norm_backward_rows;
use crate::rows::{RowsOut, assume_init, block_slots, scratch_slots};

/// Rows per block (and per task), at most.
const ROWS: usize = 256;

/// The feed-forward half's inputs.
#[derive(Debug, Clone, Copy)]
pub struct FeedForward<'a> {
    /// `[n, d]` row-major: the layer's input (and the residual).
    pub x: &'a [f32],
    /// The LayerNorm before the first layer (`d` wide).
    pub norm: RowNorm<'a>,
    /// `W₁ [d, f]`.
    pub w1: MatRef<'a>,
    /// `b₁ [f]`, if any.
    pub b1: Option<&'a [f32]>,
    /// `W₂ [f, d]`.
    pub w2: MatRef<'a>,
    /// `b₂ [d]`, if any.
    pub b2: Option<&'a [f32]>,
}

/// The gradients of [`feed_forward`].
#[derive(Debug, Clone)]
pub struct FeedForwardGrads {
    /// `[n, d]`.
    pub x: Vec<f32>,
    /// γ's, `[d]`.
    pub gamma: Vec<f32>,
    /// β's, `[d]`.
    pub beta: Vec<f32>,
    /// `W₁`'s, `[d, f]`.
    pub w1: Vec<f32>,
    /// `b₁`'s, `[f]`.
    pub b1: Vec<f32>,
    /// `W₂`'s, `[f, d]`.
    pub w2: Vec<f32>,
    /// `b₂`'s, `[d]`.
    pub b2: Vec<f32>,
}

impl FeedForward<'_> {
    /// `(n, d, f)`; panics unless the shapes agree.
    fn dims(&self) -> (usize, usize, usize) {
        let (d, f) = (self.w1.rows(), self.w1.cols());
        assert!(
            d > 0 && self.x.len().is_multiple_of(d),
            "feed-forward: x is whole rows of W₁'s height"
        );
        assert_eq!(
            (self.w2.rows(), self.w2.cols()),
            (f, d),
            "feed-forward: W₂ is W₁ transposed in shape"
        );
        assert!(
            self.norm.gamma.len() == d && self.norm.beta.is_none_or(|b| b.len() == d),
            "feed-forward: the LayerNorm's width"
        );
        assert!(
            self.b1.is_none_or(|b| b.len() == f) && self.b2.is_none_or(|b| b.len() == d),
            "feed-forward: the biases' widths"
        );
        (self.x.len() / d, d, f)
    }

    /// `LN(x)` of rows `first..first + m` into `u`.
    fn normalised<'u>(&self, first: usize, m: usize, u: &'u mut Vec<f32>) -> &'u mut [f32] {
        let d = self.w1.rows();
        self.norm.apply(&self.x[first * d..(first + m) * d], u)
    }
}

/// Per-task scratch: normalised rows, hidden rows, and one more of each width.
#[derive(Default)]
pub(crate) struct Scratch {
    u: Vec<f32>,
    h: Vec<f32>,
    wide: Vec<f32>,
    narrow: Vec<f32>,
}

/// The output `y [n, d]` and, with `keep` (training), what [`feed_forward_backward`] needs:
/// `GELU(z)`, then `GELU′(z)`, `[n, f]` each (`z = LN(x)·W₁ + b₁`). Panics on inconsistent
/// shapes.
pub fn feed_forward(ff: &FeedForward<'_>, keep: bool) -> (Vec<f32>, Option<Vec<f32>>) {
    let (n, d, f) = ff.dims();
    let mut out = RowsOut::new(n * d);
    let kept_width = if keep { f } else { 0 };
    let mut kept = RowsOut::new(2 * n * kept_width);
    let blocks = row_blocks(n, block_rows(n, ROWS));
    let outs = block_slots(out.parts(), &blocks, d);
    let (gelus, slopes) = kept.parts().split_at_mut(n * kept_width);
    let gelus = block_slots(gelus, &blocks, kept_width);
    let slopes = block_slots(slopes, &blocks, kept_width);
    let parts: Vec<_> = outs
        .into_iter()
        .zip(gelus.into_iter().zip(slopes))
        .map(|((first, m, out), ((_, _, gelu), (_, _, slope)))| (first, m, out, gelu, slope))
        .collect();
    parts.into_par_iter().for_each_init(
        Scratch::default,
        |sc, (first, m, out, gelu_slots, slope_slots)| {
            let kept = keep.then_some((gelu_slots, slope_slots));
            feed_forward_rows(ff, first, m, out, kept, sc);
        },
    );
    // SAFETY: the blocks cover all `n` rows; each wrote its rows of `out` (the second product)
    // and, when kept, of the GELU and its slope.
    unsafe { (out.into_vec(), keep.then(|| kept.into_vec())) }
}

/// A block's slots for the kept `GELU(z)` and `GELU′(z)`.
pub(crate) type KeptSlots<'a> = (&'a mut [MaybeUninit<f32>], &'a mut [MaybeUninit<f32>]);

/// Rows `first..first + m` of [`feed_forward`]'s output into `out` (every slot written), and
/// with `kept` (training) their `GELU(z)` and `GELU′(z)` into its two runs of slots.
pub(crate) fn feed_forward_rows(
    ff: &FeedForward<'_>,
    first: usize,
    m: usize,
    out: &mut [MaybeUninit<f32>],
    kept: Option<KeptSlots<'_>>,
    sc: &mut Scratch,
) {
    let (d, f) = (ff.w1.rows(), ff.w1.cols());
    let u = ff.normalised(first, m, &mut sc.u);
    let u = MatRef::row_major(u, m, d);
    let z = gemm_write(u, ff.w1, scratch_slots(&mut sc.h, m * f));
    // GELU(z) and its slope into the kept rows; or GELU(z) in place.
    let h: &[f32] = match kept {
        Some((gelu_slots, slope_slots)) => {
            finish_rows(z, f, ff.b1, None, false, None);
            gelu_with_slope(z, gelu_slots, slope_slots);
            // SAFETY: `gelu_with_slope` wrote every slot of both.
            unsafe { assume_init(gelu_slots) }
        }
        None => {
            finish_rows(z, f, ff.b1, None, true, None);
            z
        }
    };
    let y = gemm_write(MatRef::row_major(h, m, f), ff.w2, out);
    let x = &ff.x[first * d..(first + m) * d];
    finish_rows(y, d, ff.b2, Some(x), false, None);
}

/// The gradients of [`feed_forward`] for the output's gradient `grad [n, d]`, from what the
/// forward kept (`GELU(z)`, then `GELU′(z)`). Panics on inconsistent shapes.
pub fn feed_forward_backward(ff: &FeedForward<'_>, kept: &[f32], grad: &[f32]) -> FeedForwardGrads {
    let (n, d, f) = ff.dims();
    assert_eq!(
        kept.len(),
        2 * n * f,
        "feed-forward gradient: the kept GELU and slope"
    );
    let (gelus, slopes) = kept.split_at(n * f);
    assert_eq!(
        grad.len(),
        n * d,
        "feed-forward gradient: the output gradient's shape"
    );
    let blocks = row_blocks(n, block_rows(n, ROWS));
    let mut dx = RowsOut::new(n * d);
    let parts = block_slots(dx.parts(), &blocks, d);
    let (w1_t, w2_t) = (ff.w1.transposed(), ff.w2.transposed());
    let (w1_t, w2_t) = (
        MatRef::row_major(&w1_t, f, d),
        MatRef::row_major(&w2_t, d, f),
    );
    let block = |chunk: &mut ChunkSums<'_>,
                 sc: &mut Scratch,
                 first: usize,
                 m: usize,
                 dx_rows: &mut [MaybeUninit<f32>]| {
        // Sums: Σ dz (f), Σ dy (d), Σ g·x̂ (d), Σ g (d).
        let (db1, rest) = chunk.sums.split_at_mut(f);
        let (db2, rest) = rest.split_at_mut(d);
        let (dgamma, dbeta) = rest.split_at_mut(d);
        let g = &grad[first * d..(first + m) * d];
        let gelu = &gelus[first * f..(first + m) * f];
        let slope = &slopes[first * f..(first + m) * f];
        // The second layer: dW₂ += GELU(z)ᵀ·g, db₂ += Σ g, dh = g·W₂ᵀ.
        let g_m = MatRef::row_major(g, m, d);
        column_sums(g, db2);
        chunk.weights[1].add(MatRef::row_major(gelu, m, f).t(), g_m);
        let dh = gemm_write(g_m, w2_t, scratch_slots(&mut sc.wide, m * f));
        // The GELU, then the first layer: dW₁ += LN(x)ᵀ·dz, db₁ += Σ dz, du = dz·W₁ᵀ.
        times(dh, slope);
        let dz = MatRef::row_major(dh, m, f);
        column_sums(dh, db1);
        let u = ff.normalised(first, m, &mut sc.u);
        chunk.weights[0].add(MatRef::row_major(u, m, d).t(), dz);
        let du = gemm_write(dz, w1_t, scratch_slots(&mut sc.narrow, m * d));
        // The LayerNorm, then the residual: dx = LN′(du) + g.
        let xb = &ff.x[first * d..(first + m) * d];
        let nm = ff.norm;
        layer_norm_backward_rows(xb, du, nm.gamma, nm.epsilon, dx_rows, dgamma, dbeta);
        // SAFETY: `layer_norm_backward_rows` wrote every slot of `dx_rows`.
        let dx_rows = unsafe { assume_init(dx_rows) };
        for (dx, &g) in dx_rows.iter_mut().zip(g) {
            *dx += g;
        }
    };
    let (weights, sums) = backward_chunks(parts, &[d * f, f * d], f + 3 * d, block);
    let [w1, w2]: [Vec<f32>; 2] = weights.try_into().expect("two weights");
    // SAFETY: the blocks cover every row, and each wrote its rows of `dx`.
    let dx = unsafe { dx.into_vec() };
    FeedForwardGrads {
        x: dx,
        gamma: narrow(&sums[f + d..f + 2 * d]),
        beta: narrow(&sums[f + 2 * d..]),
        w1,
        b1: narrow(&sums[..f]),
        w2,
        b2: narrow(&sums[f..f + d]),
    }
}

multiversioned! {
    /// `v *= by`, element by element.
    fn times(v: &mut [f32], by: &[f32]) {
        for (v, &b) in v.iter_mut().zip(by) {
            *v *= b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linear::{Then, linear_backward, linear_forward};
    use crate::norm::{layer_norm, layer_norm_backward};
    use crate::test_values::values;

    fn close(a: &[f32], b: &[f32], tol: f32, what: &str) {
        assert_eq!(a.len(), b.len(), "{what}: lengths");
        let scale = b.iter().fold(1.0f32, |m, v| m.max(v.abs()));
        for (k, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol * scale, "{what} {k}: {x} vs {y}");
        }
    }

    #[test]
    fn forward_and_backward_match_the_layers_one_by_one() {
        // 600 rows: several blocks and chunks, a short last block.
        let (n, d, f) = (600, 12, 40);
        let (x, gamma, beta) = (values(n * d, 11), values(d, 12), values(d, 13));
        let (w1, b1, w2, b2) = (
            values(d * f, 14),
            values(f, 15),
            values(f * d, 16),
            values(d, 17),
        );
        let grad = values(n * d, 18);
        let (w1m, w2m) = (MatRef::row_major(&w1, d, f), MatRef::row_major(&w2, f, d));
        let norm = RowNorm {
            gamma: &gamma,
            beta: Some(&beta),
            epsilon: 1e-5,
        };
        let ff = FeedForward {
            x: &x,
            norm,
            w1: w1m,
            b1: Some(&b1),
            w2: w2m,
            b2: Some(&b2),
        };
        // The same layers one at a time.
        let u = layer_norm(&x, &gamma, Some(&beta), 1e-5);
        let um = MatRef::row_major(&u, n, d);
        let gelu = Then::Gelu { keep_input: true };
        let (h, z) = linear_forward(um, None, w1m, Some(&b1), gelu);
        let z = z.expect("kept");
        let hm = MatRef::row_major(&h, n, f);
        let (y, _) = linear_forward(hm, None, w2m, Some(&b2), Then::Residual(&x));

        let (fused, kept) = feed_forward(&ff, true);
        let kept = kept.expect("kept");
        close(&fused, &y, 1e-6, "y");
        let (kept_gelu, kept_slope) = kept.split_at(n * f);
        close(kept_gelu, &h, 1e-6, "GELU(z)");
        let mut slope = vec![0.0; n * f];
        crate::act::gelu_backward_rows(&z, &vec![1.0; n * f], &mut slope);
        close(kept_slope, &slope, 1e-6, "GELU′(z)");
        let (inference, none) = feed_forward(&ff, false);
        assert!(none.is_none());
        close(&inference, &y, 1e-6, "y without keeping anything");

        let second = linear_backward(hm, None, w2m, &grad, None, true);
        let (dh, dw2, db2) = (second.x.expect("asked"), second.weight, second.bias);
        let first = linear_backward(um, None, w1m, &dh, Some(&z), true);
        let (du, dw1, db1) = (first.x.expect("asked"), first.weight, first.bias);
        let (dx_norm, dgamma, dbeta) = layer_norm_backward(&x, &du, &gamma, 1e-5);
        // The first layer with its LayerNorm recomputed from x, as one kernel.
        let xm = MatRef::row_major(&x, n, d);
        let fused = linear_backward(xm, Some(norm), w1m, &dh, Some(&z), false);
        let (fx, (fg, fb)) = (
            fused.x.expect("through the norm"),
            fused.norm.expect("norm"),
        );
        close(&fused.weight, &dw1, 1e-5, "norm+linear dW₁");
        close(&fused.bias, &db1, 1e-5, "norm+linear db₁");
        close(&fx, &dx_norm, 1e-5, "norm+linear dx");
        close(&fg, &dgamma, 1e-5, "norm+linear dγ");
        close(&fb, &dbeta, 1e-5, "norm+linear dβ");
        let dx: Vec<f32> = dx_norm.iter().zip(&grad).map(|(a, g)| a + g).collect();
        let got = feed_forward_backward(&ff, &kept, &grad);
        close(&got.x, &dx, 1e-5, "dx");
        close(&got.gamma, &dgamma, 1e-5, "dγ");
        close(&got.beta, &dbeta, 1e-5, "dβ");
        close(&got.w1, &dw1, 1e-5, "dW₁");
        close(&got.b1, &db1, 1e-5, "db₁");
        close(&got.w2, &dw2, 1e-5, "dW₂");
        close(&got.b2, &db2, 1e-5, "db₂");
    }
}
