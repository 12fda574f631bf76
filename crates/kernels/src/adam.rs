//! One Adam step over a parameter's values in one pass: both moments and the parameter updated
//! element by element, in place.
//!
//! The arithmetic is Burn 0.21's `Adam` (no weight decay, no AMSGrad) operation for operation:
//! the same f32 products, sums, square root and quotient in the same order, so the values are
//! bitwise those of Burn's tensor operations one at a time — each of which is a pass over the
//! parameter and an allocation (about thirteen per parameter tensor and step).

use rayon::prelude::*;

/// Elements per task.
const CHUNK: usize = 16 * 1024;

/// An Adam step's constants, as Burn's `Adam` derives them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    /// β₁.
    pub beta_1: f32,
    /// β₂.
    pub beta_2: f32,
    /// ε.
    pub epsilon: f32,
    /// The step's learning rate (f32, as Burn's `mul_scalar` casts it).
    pub lr: f32,
    /// The step number, from 1 (the bias corrections' exponent).
    pub time: usize,
}

impl AdamStep {
    /// `(√(1 − β₂ᵗ) / (1 − β₁ᵗ), ε·√(1 − β₂ᵗ))`: the bias-corrected step's factor on `m₁` and
    /// the ε added to `√m₂`, in f32 as Burn computes them.
    fn corrections(&self) -> (f32, f32) {
        let time = i32::try_from(self.time).unwrap_or(i32::MAX);
        let correction_2 = (1.0 - self.beta_2.powi(time)).sqrt();
        let factor = correction_2 / (1.0 - self.beta_1.powi(time));
        (factor, self.epsilon * correction_2)
    }
}

/// The moments of a parameter's first step: `m₁ = (1 − β₁)·g` and `m₂ = (1 − β₂)·g²`.
pub fn adam_first_moments(grad: &[f32], step: &AdamStep) -> (Vec<f32>, Vec<f32>) {
    let mut m1 = vec![0.0f32; grad.len()];
    let mut m2 = vec![0.0f32; grad.len()];
    first_moments(grad, &mut m1, &mut m2, 1.0 - step.beta_1, 1.0 - step.beta_2);
    (m1, m2)
}

/// One Adam step in place: with `first`, `m1` and `m2` already hold the first step's moments
/// ([`adam_first_moments`]); otherwise they hold the previous step's and are advanced here.
/// Then `param -= lr · factor·m₁ / (√m₂ + ε′)`. Panics unless the four lengths agree.
pub fn adam_update(
    param: &mut [f32],
    grad: &[f32],
    m1: &mut [f32],
    m2: &mut [f32],
    step: &AdamStep,
    first: bool,
) {
    let n = param.len();
    assert!(
        grad.len() == n && m1.len() == n && m2.len() == n,
        "Adam: the parameter, its gradient and its moments have the same length"
    );
    let (factor, epsilon) = step.corrections();
    let consts = Consts {
        beta_1: step.beta_1,
        beta_2: step.beta_2,
        f1: 1.0 - step.beta_1,
        f2: 1.0 - step.beta_2,
        factor,
        epsilon,
        lr: step.lr,
        advance: !first,
    };
    // Element-wise: the chunks (and the threads) change no value.
    param
        .par_chunks_mut(CHUNK)
        .zip(m1.par_chunks_mut(CHUNK))
        .zip(m2.par_chunks_mut(CHUNK))
        .zip(grad.par_chunks(CHUNK))
        .for_each(|(((p, m1), m2), g)| update(p, g, m1, m2, consts));
}

/// The constants of [`update`].
#[derive(Clone, Copy)]
struct Consts {
    beta_1: f32,
    beta_2: f32,
    f1: f32,
    f2: f32,
    factor: f32,
    epsilon: f32,
    lr: f32,
    /// Whether the moments are the previous step's (advanced here) or already this step's.
    advance: bool,
}

multiversioned! {
    /// `m₁ = f₁·g`, `m₂ = f₂·g²` (Burn: `grad.mul_scalar(f₁)`, `grad.square().mul_scalar(f₂)`).
    fn first_moments(g: &[f32], m1: &mut [f32], m2: &mut [f32], f1: f32, f2: f32) {
        for ((&g, m1), m2) in g.iter().zip(m1.iter_mut()).zip(m2.iter_mut()) {
            *m1 = g * f1;
            *m2 = (g * g) * f2;
        }
    }
}

multiversioned! {
    /// The step, element by element, in Burn's order of operations.
    fn update(p: &mut [f32], g: &[f32], m1: &mut [f32], m2: &mut [f32], c: Consts) {
        for (((p, &g), m1), m2) in p.iter_mut().zip(g).zip(m1.iter_mut()).zip(m2.iter_mut()) {
            if c.advance {
                // moment_1.mul_scalar(β₁).add(grad.mul_scalar(1 − β₁)), and likewise m₂ on g².
                *m1 = *m1 * c.beta_1 + g * c.f1;
                *m2 = *m2 * c.beta_2 + (g * g) * c.f2;
            }
            // moment_1.mul_scalar(factor).div(moment_2.sqrt().add_scalar(ε′)), then
            // tensor − grad.mul_scalar(lr).
            let delta = (*m1 * c.factor) / (m2.sqrt() + c.epsilon);
            *p -= delta * c.lr;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_values::values;

    /// Burn's `Adam` written out one whole-vector operation at a time, as its tensor
    /// operations run.
    fn reference(p: &mut [f32], m: &mut Option<(Vec<f32>, Vec<f32>)>, g: &[f32], s: &AdamStep) {
        let (f1, f2) = (1.0 - s.beta_1, 1.0 - s.beta_2);
        let sq: Vec<f32> = g.iter().map(|g| g * g).collect();
        let (m1, m2): (Vec<f32>, Vec<f32>) = match m.take() {
            None => (
                g.iter().map(|g| g * f1).collect(),
                sq.iter().map(|s| s * f2).collect(),
            ),
            Some((m1, m2)) => {
                let a: Vec<f32> = m1.iter().map(|m| m * s.beta_1).collect();
                let b: Vec<f32> = g.iter().map(|g| g * f1).collect();
                let c: Vec<f32> = m2.iter().map(|m| m * s.beta_2).collect();
                let d: Vec<f32> = sq.iter().map(|s| s * f2).collect();
                (
                    a.iter().zip(&b).map(|(a, b)| a + b).collect(),
                    c.iter().zip(&d).map(|(c, d)| c + d).collect(),
                )
            }
        };
        let time = s.time as i32;
        let c2 = (1.0 - s.beta_2.powi(time)).sqrt();
        let factor = c2 / (1.0 - s.beta_1.powi(time));
        let num: Vec<f32> = m1.iter().map(|m| m * factor).collect();
        let den: Vec<f32> = m2.iter().map(|m| m.sqrt() + s.epsilon * c2).collect();
        for ((p, n), d) in p.iter_mut().zip(&num).zip(&den) {
            *p -= (n / d) * s.lr;
        }
        *m = Some((m1, m2));
    }

    #[test]
    fn three_steps_are_bitwise_the_operations_one_at_a_time() {
        // Longer than two chunks: the parallel split runs too.
        let n = 2 * CHUNK + 1000;
        let mut p = values(n, 1);
        let mut want = p.clone();
        let mut want_m = None;
        let mut moments: Option<(Vec<f32>, Vec<f32>)> = None;
        for time in 1..=3 {
            let g = values(n, 10 + time as u64);
            let step = AdamStep {
                beta_1: 0.9,
                beta_2: 0.999,
                epsilon: 1e-8,
                lr: 1e-3,
                time,
            };
            reference(&mut want, &mut want_m, &g, &step);
            let (mut m1, mut m2) = match moments.take() {
                Some(m) => m,
                None => adam_first_moments(&g, &step),
            };
            adam_update(&mut p, &g, &mut m1, &mut m2, &step, time == 1);
            let (w1, w2) = want_m.as_ref().expect("set");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&p), bits(&want), "parameter after step {time}");
            assert_eq!(bits(&m1), bits(w1), "m₁ after step {time}");
            assert_eq!(bits(&m2), bits(w2), "m₂ after step {time}");
            moments = Some((m1, m2));
        }
    }
}
