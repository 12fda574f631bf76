//! Element-wise functions that vectorise: `exp` and `erf` as polynomials (no libm call, so a
//! loop over them compiles to vector instructions), and the exact GELU with its gradient, fused
//! with the bias of the linear layer before it.

use rayon::prelude::*;

/// Rows per task of [`bias_gelu`] and [`bias_gelu_backward`].
const ROWS: usize = 128;

/// `eˣ` within 2 ulp for normal results (Cephes' `expf`: `x = n·ln 2 + r`, a degree-6
/// polynomial in `r`, `2ⁿ` from the exponent bits); inputs are clamped to [−87.3, 88.3], so the
/// result is a normal float and never infinite.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 1.5·2²³: adding and subtracting it rounds to the nearest integer (|x·log2 e| < 2²²).
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.3);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `erf(x)` within 5·10⁻⁷ in f32 (Abramowitz & Stegun 7.1.26, 1.5·10⁻⁷ in exact arithmetic: the
/// formula of PyTorch's vectorised CPU `erf`, which its GELU runs).
#[inline(always)]
fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = ((((1.061_405_4 * t - 1.453_152_1) * t + 1.421_413_8) * t - 0.284_496_74) * t
        + 0.254_829_6)
        * t;
    (1.0 - poly * exp(-a * a)).copysign(x)
}

/// `1/√2`.
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// `1/√(2π)`.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

multiversioned! {
    /// `y = GELU(x + b)` over one block of rows, keeping `x + b` in `pre`.
    fn bias_gelu_rows(x: &[f32], bias: &[f32], pre: &mut [f32], y: &mut [f32]) {
        let w = bias.len();
        for ((x, pre), y) in x.chunks_exact(w).zip(pre.chunks_exact_mut(w)).zip(y.chunks_exact_mut(w)) {
            for (((&x, &b), pre), y) in x.iter().zip(bias).zip(pre.iter_mut()).zip(y.iter_mut()) {
                let v = x + b;
                *pre = v;
                *y = 0.5 * v * (1.0 + erf(v * FRAC_1_SQRT_2));
            }
        }
    }
}

multiversioned! {
    /// `dx = g · GELU′(pre)` over one block of rows, and `Σ dx` per column added onto `db`.
    fn bias_gelu_backward_rows(pre: &[f32], grad: &[f32], dx: &mut [f32], db: &mut [f64]) {
        let w = db.len();
        for ((pre, g), dx) in pre.chunks_exact(w).zip(grad.chunks_exact(w)).zip(dx.chunks_exact_mut(w)) {
            for (((&v, &g), dx), db) in pre.iter().zip(g).zip(dx.iter_mut()).zip(db.iter_mut()) {
                let cdf = 0.5 * (1.0 + erf(v * FRAC_1_SQRT_2));
                let pdf = FRAC_1_SQRT_2PI * exp(-0.5 * v * v);
                let d = g * (cdf + v * pdf);
                *dx = d;
                *db += f64::from(d);
            }
        }
    }
}

/// The exact GELU of `x + bias` over rows of `bias.len()` values (`x`: the product of a linear
/// layer without its bias): `(GELU(x + b), x + b)`, the second kept for
/// [`bias_gelu_backward`]. Panics if `x` is not whole rows.
pub fn bias_gelu(x: &[f32], bias: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let w = bias.len();
    assert!(
        w > 0 && x.len().is_multiple_of(w),
        "bias + GELU: rows of the bias's width"
    );
    let mut pre = vec![0.0f32; x.len()];
    let mut y = vec![0.0f32; x.len()];
    y.par_chunks_mut(ROWS * w)
        .zip(pre.par_chunks_mut(ROWS * w))
        .zip(x.par_chunks(ROWS * w))
        .for_each(|((y, pre), x)| bias_gelu_rows(x, bias, pre, y));
    (y, pre)
}

/// The gradient of [`bias_gelu`] for `pre = x + b` and the incoming `grad`: `(dx, db)`. `db` is
/// summed in f64 per block of 128 rows and the blocks added in order, so it does not depend on
/// the number of threads.
pub fn bias_gelu_backward(pre: &[f32], grad: &[f32], width: usize) -> (Vec<f32>, Vec<f32>) {
    assert!(
        width > 0 && pre.len() == grad.len() && pre.len().is_multiple_of(width),
        "bias + GELU gradient: shapes"
    );
    let mut dx = vec![0.0f32; pre.len()];
    let n_blocks = pre.len().div_ceil(ROWS * width);
    let mut partial = vec![0.0f64; n_blocks * width];
    dx.par_chunks_mut(ROWS * width)
        .zip(partial.par_chunks_mut(width))
        .enumerate()
        .for_each(|(b, (dx, db))| {
            let rows = b * ROWS * width..b * ROWS * width + dx.len();
            bias_gelu_backward_rows(&pre[rows.clone()], &grad[rows], dx, db);
        });
    let mut db = vec![0.0f64; width];
    for part in partial.chunks_exact(width) {
        for (s, v) in db.iter_mut().zip(part) {
            *s += *v;
        }
    }
    (dx, db.into_iter().map(|s| s as f32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulp_of_libm() {
        let mut worst = 0.0f64;
        for k in -87_000..88_000 {
            let x = k as f32 * 1e-3;
            let want = f64::from(x).exp();
            let rel = ((f64::from(exp(x)) - want) / want).abs();
            worst = worst.max(rel);
        }
        assert!(worst < 2.5e-7, "worst relative error {worst:e}");
        assert!(exp(-1e30) > 0.0 && exp(1e30).is_finite());
    }

    #[test]
    fn erf_is_within_its_bound() {
        let mut worst = 0.0f64;
        for k in -6_000..6_000 {
            let x = k as f32 * 1e-3;
            worst = worst.max((f64::from(erf(x)) - libm_erf(f64::from(x))).abs());
        }
        assert!(worst < 5e-7, "worst absolute error {worst:e}");
    }

    /// erf in f64 by its Taylor series (|x| ≤ 3) or its asymptotic complement.
    fn libm_erf(x: f64) -> f64 {
        if x.abs() > 3.0 {
            // erfc(x) < 2.3e-5 there; the continued fraction to ~1e-12.
            let a = x.abs();
            let mut f = 0.0;
            for k in (1..60).rev() {
                f = f64::from(k) / 2.0 / (a + f);
            }
            let erfc = (-a * a).exp() / std::f64::consts::PI.sqrt() / (a + f);
            return (1.0 - erfc).copysign(x);
        }
        let (mut term, mut sum) = (x, x);
        for n in 1..200 {
            term *= -x * x / f64::from(n);
            sum += term / f64::from(2 * n + 1);
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn bias_gelu_and_its_gradient_match_the_formula() {
        let w = 5;
        let x: Vec<f32> = (0..300 * w)
            .map(|i| ((i * 37) % 101) as f32 / 12.0 - 4.0)
            .collect();
        let b: Vec<f32> = (0..w).map(|i| i as f32 * 0.1 - 0.2).collect();
        let (y, pre) = bias_gelu(&x, &b);
        let g: Vec<f32> = (0..x.len()).map(|i| ((i % 7) as f32 - 3.0) * 0.5).collect();
        let (dx, db) = bias_gelu_backward(&pre, &g, w);
        let mut want_db = vec![0.0f64; w];
        for (i, &xi) in x.iter().enumerate() {
            let v = f64::from(xi) + f64::from(b[i % w]);
            let cdf = 0.5 * (1.0 + libm_erf(v / 2f64.sqrt()));
            assert!((f64::from(y[i]) - v * cdf).abs() < 2e-6, "value at {i}");
            let d = f64::from(g[i])
                * (cdf + v * (-0.5 * v * v).exp() / (2.0 * std::f64::consts::PI).sqrt());
            assert!((f64::from(dx[i]) - d).abs() < 2e-6, "gradient at {i}");
            want_db[i % w] += d;
        }
        for (got, want) in db.iter().zip(&want_db) {
            assert!(
                (f64::from(*got) - want).abs() < 1e-4,
                "bias gradient {got} vs {want}"
            );
        }
    }
}
