//! The ROOT-Transformer's pair-bias MLP as one kernel, forward and backward:
//! `out = (ReLU(x·W₁ + b₁)·W₂ + b₂) ⊙ mask`, with one mask value per row (0 on the diagonal
//! pairs, which get no bias).
//!
//! There are `Σ objects²` rows (about 13 times the tokens of a batch), each only a few values
//! wide, so the cost is memory passes, not arithmetic: each block of rows runs the chain with
//! its hidden rows in per-task scratch, and the backward recomputes them from `x` instead of
//! keeping them. The input gets no gradient (the pair features are data). Parameter gradients
//! are summed as in [`crate::linear_backward`], so no value depends on the number of threads.

use rayon::prelude::*;

use crate::chunks::{ChunkSums, backward_chunks, narrow};
use crate::linear::{add_rows, column_sums};
use crate::mat::{MatRef, block_rows, gemm_write, row_blocks};
use crate::rows::{RowsOut, block_slots, scratch_slots};

/// Rows per block (and per task), at most.
const ROWS: usize = 1024;

/// The pair-bias MLP's inputs.
#[derive(Debug, Clone, Copy)]
pub struct PairMlp<'a> {
    /// `[n, d_in]` row-major.
    pub x: &'a [f32],
    /// `W₁ [d_in, h]`.
    pub w1: MatRef<'a>,
    /// `b₁ [h]`, if any.
    pub b1: Option<&'a [f32]>,
    /// `W₂ [h, d_out]`.
    pub w2: MatRef<'a>,
    /// `b₂ [d_out]`, if any.
    pub b2: Option<&'a [f32]>,
    /// `[n]`: each output row is multiplied by its value.
    pub mask: &'a [f32],
}

/// The parameter gradients of [`pair_mlp_forward`].
#[derive(Debug, Clone)]
pub struct PairMlpGrads {
    /// `W₁`'s, `[d_in, h]`.
    pub w1: Vec<f32>,
    /// `b₁`'s, `[h]`.
    pub b1: Vec<f32>,
    /// `W₂`'s, `[h, d_out]`.
    pub w2: Vec<f32>,
    /// `b₂`'s, `[d_out]`.
    pub b2: Vec<f32>,
}

impl PairMlp<'_> {
    /// `(n, d_in, h, d_out)`; panics unless the shapes agree.
    fn dims(&self) -> (usize, usize, usize, usize) {
        let (d_in, h, d_out) = (self.w1.rows(), self.w1.cols(), self.w2.cols());
        assert!(
            d_in > 0 && self.x.len().is_multiple_of(d_in),
            "pair MLP: x is whole rows of W₁'s height"
        );
        let n = self.x.len() / d_in;
        assert_eq!(self.w2.rows(), h, "pair MLP: W₂'s height is W₁'s width");
        assert_eq!(self.mask.len(), n, "pair MLP: one mask value per row");
        assert!(
            self.b1.is_none_or(|b| b.len() == h) && self.b2.is_none_or(|b| b.len() == d_out),
            "pair MLP: the biases' widths"
        );
        (n, d_in, h, d_out)
    }

    /// `ReLU(x·W₁ + b₁)` of rows `first..first + m` into `hidden`.
    fn hidden<'h>(&self, first: usize, m: usize, hidden: &'h mut Vec<f32>) -> &'h mut [f32] {
        let (d_in, h) = (self.w1.rows(), self.w1.cols());
        let x = MatRef::row_major(&self.x[first * d_in..(first + m) * d_in], m, d_in);
        let z = gemm_write(x, self.w1, scratch_slots(hidden, m * h));
        for row in z.chunks_exact_mut(h) {
            add_rows(row, self.b1, None);
            relu(row);
        }
        z
    }
}

/// The output `[n, d_out]`. Panics on inconsistent shapes.
pub fn pair_mlp_forward(p: &PairMlp<'_>) -> Vec<f32> {
    let (n, _, h, d_out) = p.dims();
    let mut out = RowsOut::new(n * d_out);
    let blocks = row_blocks(n, block_rows(n, ROWS));
    block_slots(out.parts(), &blocks, d_out)
        .into_par_iter()
        .for_each_init(Vec::new, |hidden, (first, m, out)| {
            let hm = MatRef::row_major(p.hidden(first, m, hidden), m, h);
            let y = gemm_write(hm, p.w2, out);
            for (row, &mask) in y.chunks_exact_mut(d_out).zip(&p.mask[first..first + m]) {
                add_rows(row, p.b2, None);
                for v in row.iter_mut() {
                    *v *= mask;
                }
            }
        });
    // SAFETY: the blocks cover all `n` rows and each wrote its rows (the second product).
    unsafe { out.into_vec() }
}

/// The parameter gradients of [`pair_mlp_forward`] for the output's gradient `grad [n, d_out]`.
/// Panics on inconsistent shapes.
pub fn pair_mlp_backward(p: &PairMlp<'_>, grad: &[f32]) -> PairMlpGrads {
    let (n, d_in, h, d_out) = p.dims();
    assert_eq!(
        grad.len(),
        n * d_out,
        "pair MLP gradient: the output gradient's shape"
    );
    let blocks: Vec<_> = row_blocks(n, block_rows(n, ROWS))
        .into_iter()
        .map(|(first, m)| (first, m, ()))
        .collect();
    let w2_t = p.w2.transposed();
    let w2_t = MatRef::row_major(&w2_t, d_out, h);
    let block = |chunk: &mut ChunkSums<'_>, sc: &mut Scratch, first, m, ()| {
        // Sums: Σ dz (h), Σ dy (d_out).
        let (db1, db2) = chunk.sums.split_at_mut(h);
        let hm = p.hidden(first, m, &mut sc.hidden);
        // dy = grad ⊙ mask; dW₂ += hᵀ·dy, db₂ += Σ dy.
        sc.dy.clear();
        for (row, &mask) in grad[first * d_out..(first + m) * d_out]
            .chunks_exact(d_out)
            .zip(&p.mask[first..first + m])
        {
            sc.dy.extend(row.iter().map(|g| g * mask));
        }
        column_sums(&sc.dy, db2);
        let dy_m = MatRef::row_major(&sc.dy, m, d_out);
        chunk.weights[1].add(MatRef::row_major(hm, m, h).t(), dy_m);
        // dz = dy·W₂ᵀ where the ReLU passed; dW₁ += xᵀ·dz, db₁ += Σ dz.
        let dz = gemm_write(dy_m, w2_t, scratch_slots(&mut sc.dh, m * h));
        for (dz, &h) in dz.iter_mut().zip(hm.iter()) {
            if h <= 0.0 {
                *dz = 0.0;
            }
        }
        column_sums(dz, db1);
        let x = MatRef::row_major(&p.x[first * d_in..(first + m) * d_in], m, d_in);
        chunk.weights[0].add(x.t(), MatRef::row_major(dz, m, h));
    };
    let (weights, sums) = backward_chunks(blocks, &[d_in * h, h * d_out], h + d_out, block);
    let [w1, w2]: [Vec<f32>; 2] = weights.try_into().expect("two weights");
    PairMlpGrads {
        w1,
        b1: narrow(&sums[..h]),
        w2,
        b2: narrow(&sums[h..]),
    }
}

/// The pair MLP's backward scratch, per chunk: hidden rows, the output's gradient, the hidden
/// rows' gradient.
#[derive(Default)]
struct Scratch {
    hidden: Vec<f32>,
    dy: Vec<f32>,
    dh: Vec<f32>,
}

multiversioned! {
    /// `v = max(v, 0)`, element by element.
    fn relu(v: &mut [f32]) {
        for v in v.iter_mut() {
            *v = if *v > 0.0 { *v } else { 0.0 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_values::values;

    #[test]
    fn forward_and_backward_match_the_formula() {
        // 2500 rows: several blocks and chunks.
        let (n, d_in, h, d_out) = (2500, 3, 16, 4);
        let x = values(n * d_in, 21);
        let (w1, b1, w2, b2) = (
            values(d_in * h, 22),
            values(h, 23),
            values(h * d_out, 24),
            values(d_out, 25),
        );
        let mask: Vec<f32> = (0..n).map(|i| if i % 7 == 0 { 0.0 } else { 1.0 }).collect();
        let grad = values(n * d_out, 26);
        let p = PairMlp {
            x: &x,
            w1: MatRef::row_major(&w1, d_in, h),
            b1: Some(&b1),
            w2: MatRef::row_major(&w2, h, d_out),
            b2: Some(&b2),
            mask: &mask,
        };
        let out = pair_mlp_forward(&p);
        let got = pair_mlp_backward(&p, &grad);
        let (mut gw1, mut gb1) = (vec![0.0f64; d_in * h], vec![0.0f64; h]);
        let (mut gw2, mut gb2) = (vec![0.0f64; h * d_out], vec![0.0f64; d_out]);
        for i in 0..n {
            let xi = &x[i * d_in..(i + 1) * d_in];
            let hid: Vec<f64> = (0..h)
                .map(|k| {
                    let z = f64::from(b1[k])
                        + (0..d_in)
                            .map(|c| f64::from(xi[c]) * f64::from(w1[c * h + k]))
                            .sum::<f64>();
                    z.max(0.0)
                })
                .collect();
            let dy: Vec<f64> = (0..d_out)
                .map(|o| f64::from(grad[i * d_out + o]) * f64::from(mask[i]))
                .collect();
            for o in 0..d_out {
                let y = f64::from(b2[o])
                    + (0..h)
                        .map(|k| hid[k] * f64::from(w2[k * d_out + o]))
                        .sum::<f64>();
                let want = y * f64::from(mask[i]);
                let o_got = f64::from(out[i * d_out + o]);
                assert!(
                    (o_got - want).abs() < 1e-5,
                    "output {i},{o}: {o_got} vs {want}"
                );
                gb2[o] += dy[o];
                for k in 0..h {
                    gw2[k * d_out + o] += hid[k] * dy[o];
                }
            }
            for k in 0..h {
                if hid[k] <= 0.0 {
                    continue;
                }
                let dz: f64 = (0..d_out)
                    .map(|o| dy[o] * f64::from(w2[k * d_out + o]))
                    .sum();
                gb1[k] += dz;
                for c in 0..d_in {
                    gw1[c * h + k] += f64::from(xi[c]) * dz;
                }
            }
        }
        let close = |got: &[f32], want: &[f64], what: &str| {
            for (k, (g, w)) in got.iter().zip(want).enumerate() {
                assert!((f64::from(*g) - w).abs() < 1e-3, "{what} {k}: {g} vs {w}");
            }
        };
        close(&got.w1, &gw1, "dW₁");
        close(&got.b1, &gb1, "db₁");
        close(&got.w2, &gw2, "dW₂");
        close(&got.b2, &gb2, "db₂");
    }
}
