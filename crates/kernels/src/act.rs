//! Element-wise functions that vectorise: `exp` as a polynomial and `erf` as a ratio of two (no
//! libm call, so a loop over them compiles to vector instructions), and the exact GELU with its
//! gradient (which `linear.rs` and `ffn.rs` apply to a block of rows while it is in cache).

/// `eˣ` within 2 ulp for normal results (Cephes' `expf`: `x = n·ln 2 + r`, a degree-6
/// polynomial in `r`, `2ⁿ` from the exponent bits); inputs are clamped to [−87.3, 88.3], so the
/// result is a normal float and never infinite.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 1.5·2²³: adding and subtracting it rounds to the nearest integer (|x·log2 e| < 2²²).
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.3);
    let rounded = x * LOG2E + ROUND;
    let n = rounded - ROUND;
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // n as an integer from the bits of `rounded` (its last mantissa bits hold n): no float to
    // integer conversion, which does not vectorise.
    let n = rounded.to_bits().wrapping_sub(ROUND.to_bits());
    y * f32::from_bits(n.wrapping_add(127) << 23)
}

/// `erf(x)` within 4·10⁻⁷ in f32: `x·P(x²)/Q(x²)` on `x` clamped to ±3.92 (beyond it erf is 1
/// to f32's precision), `P` of degree 6 and `Q` of degree 4, fitted for this kernel (rational
/// least squares on [0, 3.92], then reweighted towards the minimax: 4.8·10⁻⁸ in exact
/// arithmetic). A dozen multiply-adds and one quotient, no exponential: fewer operations than
/// Abramowitz & Stegun 7.1.26 with its `exp` (what PyTorch's vectorised `erf` runs); the
/// feed-forward half's inference is 6 % faster with it (docs/performance-log.md).
#[inline(always)]
fn erf(x: f32) -> f32 {
    const P: [f32; 7] = [
        1.128_378_7,
        0.208_015_02,
        0.051_651_355,
        0.004_052_876_5,
        1.508_131_4e-4,
        -1.998_334_5e-6,
        1.982_324_7e-8,
    ];
    const Q: [f32; 5] = [
        1.0,
        0.517_676_9,
        0.118_352_49,
        0.015_052_215,
        0.001_043_216_7,
    ];
    let a = x.clamp(-3.92, 3.92);
    let z = a * a;
    let p = P.iter().rev().fold(0.0, |acc, &c| acc * z + c);
    let q = Q.iter().rev().fold(0.0, |acc, &c| acc * z + c);
    a * p / q
}

/// `erf(x)` as [`erf`] and `exp(−x²)`.
#[inline(always)]
fn erf_and_gauss(x: f32) -> (f32, f32) {
    (erf(x), exp(-x * x))
}

use std::mem::MaybeUninit;

/// `1/√2`.
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// `1/√(2π)`.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

multiversioned! {
    /// `y = GELU(z)`, element by element, every slot of `y` written.
    pub(crate) fn gelu_rows(z: &[f32], y: &mut [MaybeUninit<f32>]) {
        assert_eq!(z.len(), y.len(), "GELU rows");
        for (&v, y) in z.iter().zip(y.iter_mut()) {
            y.write(0.5 * v * (1.0 + erf(v * FRAC_1_SQRT_2)));
        }
    }
}

multiversioned! {
    /// `v = GELU(v)`, element by element.
    pub(crate) fn gelu_in_place(v: &mut [f32]) {
        for v in v.iter_mut() {
            *v = 0.5 * *v * (1.0 + erf(*v * FRAC_1_SQRT_2));
        }
    }
}

multiversioned! {
    /// `y = GELU(z)` (every slot written) and `slope = GELU′(z)`, element by element, from one
    /// erf and one exponential each.
    pub(crate) fn gelu_with_slope(
        z: &[f32],
        y: &mut [MaybeUninit<f32>],
        slope: &mut [MaybeUninit<f32>],
    ) {
        assert!(z.len() == y.len() && z.len() == slope.len(), "GELU rows");
        for ((&v, y), slope) in z.iter().zip(y.iter_mut()).zip(slope.iter_mut()) {
            let (erf, gauss) = erf_and_gauss(v * FRAC_1_SQRT_2);
            let cdf = 0.5 * (1.0 + erf);
            y.write(v * cdf);
            slope.write(cdf + v * (FRAC_1_SQRT_2PI * gauss));
        }
    }
}

multiversioned! {
    /// `dz = g · GELU′(z)`, element by element.
    pub(crate) fn gelu_backward_rows(z: &[f32], grad: &[f32], dz: &mut [f32]) {
        for ((&v, &g), dz) in z.iter().zip(grad).zip(dz.iter_mut()) {
            // erf(v/√2) and exp(−v²/2) from one exponential.
            let (erf, gauss) = erf_and_gauss(v * FRAC_1_SQRT_2);
            let cdf = 0.5 * (1.0 + erf);
            let pdf = FRAC_1_SQRT_2PI * gauss;
            *dz = g * (cdf + v * pdf);
        }
    }
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
        assert!(worst < 4e-7, "worst absolute error {worst:e}");
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
    fn gelu_and_its_gradient_match_the_formula() {
        let z: Vec<f32> = (0..1500)
            .map(|i| ((i * 37) % 1001) as f32 / 120.0 - 4.2)
            .collect();
        let g: Vec<f32> = (0..z.len()).map(|i| ((i % 7) as f32 - 3.0) * 0.5).collect();
        let (mut y, mut dz) = (vec![0.0; z.len()], vec![0.0; z.len()]);
        gelu_rows(&z, crate::rows::as_slots(&mut y));
        gelu_backward_rows(&z, &g, &mut dz);
        let (mut y2, mut slope) = (vec![0.0; z.len()], vec![0.0; z.len()]);
        gelu_with_slope(
            &z,
            crate::rows::as_slots(&mut y2),
            crate::rows::as_slots(&mut slope),
        );
        for (i, &v) in z.iter().enumerate() {
            let v = f64::from(v);
            let cdf = 0.5 * (1.0 + libm_erf(v / 2f64.sqrt()));
            assert!((f64::from(y[i]) - v * cdf).abs() < 2e-6, "value at {i}");
            let pdf = (-0.5 * v * v).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let d = f64::from(g[i]) * (cdf + v * pdf);
            assert!((f64::from(dz[i]) - d).abs() < 2e-6, "gradient at {i}");
            assert!(
                (f64::from(y2[i]) - v * cdf).abs() < 2e-6,
                "value with slope at {i}"
            );
            assert!(
                (f64::from(g[i] * slope[i]) - d).abs() < 2e-6,
                "slope at {i}"
            );
        }
    }
}
