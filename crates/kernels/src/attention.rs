//! Multi-head self-attention over packed sequences, forward and backward, one sequence at a time.
//!
//! The sequences (an event's class token and objects) lie one after the other in the rows of
//! `qkv` (`[q | k | v]`, each `d` wide, head `h` in columns `h·dₕ..(h+1)·dₕ` of each), with no
//! padding: a sequence of length `s` costs `s²` per head, never the batch's longest. Per head:
//! `P = softmax(q·kᵀ/√dₕ + B)`, `out = P·v`, with `B` the pair bias of the sequence's objects
//! (rows and columns 1..s; the class token's row and column get none). The backward takes the
//! probabilities the forward kept (`s²` per head and sequence, the only `[s, s]` values kept).
//!
//! The products run along contiguous rows (q or v transposed per head into scratch), a few rows
//! at a time with their sums in registers, so the loops vectorise over the sequence or over
//! `dₕ`; the forward's softmax runs across the rows of the transposed logits (whole vectors,
//! no reduction within one). Sums run in a fixed order, and a sequence's values depend on that
//! sequence alone, whatever the threads.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::act::exp;
use crate::rows::{RowsOut, assume_init, zeroed};

/// Sequences per task.
const SEQUENCES: usize = 8;

/// A row over the sequence is computed in whole groups of this many lanes (beyond the
/// sequence's end from zeros, and never read), so that it runs in full vectors of any width up
/// to 16; each lane is its own sum, so the values do not depend on the width.
const LANES: usize = 16;

/// Rows computed together by [`products`] and [`weighted`]: independent sums in registers,
/// one load of `m` or of a `row(j)` shared by all of them.
const GROUP: usize = 4;

/// [`products`] for rows `0..n` into `out [n, sp]`: groups of [`GROUP`] rows, then the rest.
#[inline(always)]
fn all_products<'x>(
    n: usize,
    x: impl Fn(usize) -> &'x [f32] + Copy,
    m: &[f32],
    sp: usize,
    out: &mut [f32],
) {
    let mut i = 0;
    while i + GROUP <= n {
        products::<GROUP>(x, i, m, sp, &mut out[i * sp..(i + GROUP) * sp]);
        i += GROUP;
    }
    for i in i..n {
        products::<1>(x, i, m, sp, &mut out[i * sp..(i + 1) * sp]);
    }
}

/// [`weighted`] for rows `0..n`: groups of [`GROUP`] rows, then the rest.
#[inline(always)]
fn all_weighted<'r>(
    n: usize,
    terms: usize,
    coef: impl Fn(usize, usize) -> f32 + Copy,
    row: impl Fn(usize) -> &'r [f32] + Copy,
    out: &mut [MaybeUninit<f32>],
    at: impl Fn(usize) -> usize + Copy,
) {
    let mut i = 0;
    while i + GROUP <= n {
        weighted::<GROUP>(terms, coef, row, i, out, at);
        i += GROUP;
    }
    for i in i..n {
        weighted::<1>(terms, coef, row, i, out, at);
    }
}

/// `out[r][j] = Σₜ x(first + r)[t] · m[t][j]` for the `R` rows `r` (`out`: `R` rows of `sp`,
/// `m [x.len(), sp]` row-major), in groups of [`LANES`] held in registers across the sum
/// (t ascending).
#[inline(always)]
fn products<'x, const R: usize>(
    x: impl Fn(usize) -> &'x [f32],
    first: usize,
    m: &[f32],
    sp: usize,
    out: &mut [f32],
) {
    let xs: [&[f32]; R] = std::array::from_fn(|r| x(first + r));
    let n = xs[0].len();
    for c in (0..sp).step_by(LANES) {
        let mut acc = [[0.0f32; LANES]; R];
        for t in 0..n {
            let b: &[f32; LANES] = m[t * sp + c..][..LANES].try_into().expect("LANES values");
            for (acc, x) in acc.iter_mut().zip(&xs) {
                let xt = x[t];
                for (acc, &b) in acc.iter_mut().zip(b) {
                    *acc += xt * b;
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            out[r * sp + c..][..LANES].copy_from_slice(acc);
        }
    }
}

/// `out(i) = Σⱼ coef(i, j) · row(j)` (j in `0..terms`) for the `R` rows `i` from `first`,
/// [`LANES`] columns at a time held in registers across the sum (j ascending); every slot of
/// the output rows written (`at(i)` is where row `i` starts in `out`).
#[inline(always)]
fn weighted<'r, const R: usize>(
    terms: usize,
    coef: impl Fn(usize, usize) -> f32,
    row: impl Fn(usize) -> &'r [f32],
    first: usize,
    out: &mut [MaybeUninit<f32>],
    at: impl Fn(usize) -> usize,
) {
    let width = row(0).len();
    let body = width / LANES * LANES;
    for c in (0..body).step_by(LANES) {
        let mut acc = [[0.0f32; LANES]; R];
        for j in 0..terms {
            let v: &[f32; LANES] = row(j)[c..c + LANES].try_into().expect("LANES values");
            for (r, acc) in acc.iter_mut().enumerate() {
                let pj = coef(first + r, j);
                for (a, &v) in acc.iter_mut().zip(v) {
                    *a += pj * v;
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for (o, &a) in out[at(first + r) + c..][..LANES].iter_mut().zip(acc) {
                o.write(a);
            }
        }
    }
    for i in first..first + R {
        for t in body..width {
            let v = (0..terms).fold(0.0, |a, j| a + coef(i, j) * row(j)[t]);
            out[at(i) + t].write(v);
        }
    }
}

/// The softmax of each column of `lt [s, sp]` over its rows, in place: per lane the maximum,
/// `exp(v − max)`, their sum (rows in order), then each times 1 / the sum; [`LANES`] lanes at a
/// time, held in registers across the rows (a running maximum kept in memory compiled to masked
/// stores that each waited for the one before).
#[inline(always)]
fn softmax_columns(lt: &mut [f32], sp: usize) {
    for c in (0..sp).step_by(LANES) {
        let mut max: [f32; LANES] = lt[c..c + LANES].try_into().expect("LANES values");
        for row in lt.chunks_exact(sp).skip(1) {
            let row: &[f32; LANES] = row[c..c + LANES].try_into().expect("LANES values");
            for (m, &v) in max.iter_mut().zip(row) {
                *m = if v > *m { v } else { *m };
            }
        }
        let mut sum = [0.0f32; LANES];
        for row in lt.chunks_exact_mut(sp) {
            let row: &mut [f32; LANES] = (&mut row[c..c + LANES]).try_into().expect("LANES values");
            for ((v, &m), a) in row.iter_mut().zip(&max).zip(sum.iter_mut()) {
                *v = exp(*v - m);
                *a += *v;
            }
        }
        let inverse = sum.map(|a| 1.0 / a);
        for row in lt.chunks_exact_mut(sp) {
            for (v, &r) in row[c..c + LANES].iter_mut().zip(&inverse) {
                *v *= r;
            }
        }
    }
}

/// Attention's inputs: every sequence's rows, one after the other.
#[derive(Debug, Clone, Copy)]
pub struct Attention<'a> {
    /// `[Σ s, 3·d]` row-major: each row's q, k and v.
    pub qkv: &'a [f32],
    /// `[Σ (s − 1)², heads]`: per sequence, the bias of object pair (i, j) at row `i·(s−1) + j`.
    pub pair_bias: Option<&'a [f32]>,
    /// Each sequence's length `s` (class token included, so ≥ 1).
    pub lens: &'a [usize],
    /// Model width.
    pub d: usize,
    /// Heads (dividing `d`).
    pub heads: usize,
    /// Only each sequence's first row as a query (every row still a key and a value): one
    /// output row per sequence. What a layer whose later rows nothing reads needs (the
    /// ROOT-Transformer's last layer, read only at the class token).
    pub first_only: bool,
}

impl Attention<'_> {
    /// Panics unless the slices hold exactly what the lengths and widths say.
    fn check(&self) {
        assert!(
            self.heads > 0 && self.d.is_multiple_of(self.heads),
            "attention: heads divide d"
        );
        let rows: usize = self.lens.iter().sum();
        assert_eq!(self.qkv.len(), rows * 3 * self.d, "attention: qkv's shape");
        if let Some(b) = self.pair_bias {
            assert_eq!(
                b.len(),
                self.pairs() * self.heads,
                "attention: pair bias's shape"
            );
        }
        assert!(
            self.lens.iter().all(|&s| s > 0),
            "attention: empty sequence"
        );
    }

    /// Object pairs of all sequences.
    fn pairs(&self) -> usize {
        self.lens.iter().map(|&s| (s - 1) * (s - 1)).sum()
    }

    /// Query rows per sequence of length `s`.
    fn queries(&self, s: usize) -> usize {
        if self.first_only { 1 } else { s }
    }

    /// Values kept for the backward: per head and sequence, `s` per query row.
    fn probs(&self) -> usize {
        self.lens
            .iter()
            .map(|&s| self.queries(s) * s)
            .sum::<usize>()
            * self.heads
    }
}

/// `s` cut into consecutive pieces of the given lengths.
fn carve<T>(mut s: &mut [T], lengths: impl Iterator<Item = usize>) -> Vec<&mut [T]> {
    lengths
        .map(|n| {
            let (head, rest) = std::mem::take(&mut s).split_at_mut(n);
            s = rest;
            head
        })
        .collect()
}

/// `s` cut into consecutive pieces of the given lengths.
fn cut<T>(mut s: &[T], lengths: impl Iterator<Item = usize>) -> Vec<&[T]> {
    lengths
        .map(|n| {
            let (head, rest) = s.split_at(n);
            s = rest;
            head
        })
        .collect()
}

/// One sequence's view: its `qkv` rows and pair bias.
#[derive(Clone, Copy)]
struct Seq<'a> {
    qkv: &'a [f32],
    bias: Option<&'a [f32]>,
    s: usize,
    d: usize,
    heads: usize,
}

impl Seq<'_> {
    fn dh(&self) -> usize {
        self.d / self.heads
    }

    /// Rows 0..s of head `h`'s columns of `part` (q, k or v: 0, 1, 2), transposed into
    /// `out [dₕ, sp]` (`sp` = s rounded up to [`LANES`], zeros beyond s).
    fn transposed(&self, part: usize, h: usize, out: &mut [f32]) {
        let (d, dh) = (self.d, self.dh());
        let sp = self.s.next_multiple_of(LANES);
        out.fill(0.0);
        for j in 0..self.s {
            let row = &self.qkv[j * 3 * d + part * d + h * dh..][..dh];
            for (t, &v) in row.iter().enumerate() {
                out[t * sp + j] = v;
            }
        }
    }

    /// Row `i`'s `dₕ` values of `part` for head `h`.
    fn row(&self, part: usize, h: usize, i: usize) -> &[f32] {
        let (d, dh) = (self.d, self.dh());
        &self.qkv[i * 3 * self.d + part * d + h * dh..][..dh]
    }
}

multiversioned! {
    /// One sequence's forward: `out [s, d]` (every slot written), and the probabilities
    /// (`[heads, s, s]`, per head `Pᵀ`: element `(j, i)` is `P_ij`) into `probs` where they are
    /// kept.
    ///
    /// Per head the logits are computed transposed, `Lᵀ [s, sp]` with row `j` holding `q_i·k_j`
    /// for every `i` along the lanes, so that the softmax over `j` is element-wise across rows
    /// (maxima, exponentials and sums of whole vectors, no reduction within a vector); lanes
    /// past the sequence's end hold finite values that nothing reads.
    fn sequence_forward(
        seq: Seq<'_>,
        out: &mut [MaybeUninit<f32>],
        probs: Option<&mut [f32]>,
        scratch: &mut Vec<f32>,
    ) {
        let mut probs = probs;
        let (s, d, dh, heads) = (seq.s, seq.d, seq.dh(), seq.heads);
        let inv_scale = 1.0 / (dh as f32).sqrt();
        let sp = s.next_multiple_of(LANES);
        // qᵀ [dh, sp]; Lᵀ, then Pᵀ [s, sp].
        scratch.resize((dh + s) * sp, 0.0);
        let (qt, lt) = scratch.split_at_mut(dh * sp);
        for h in 0..heads {
            seq.transposed(0, h, qt);
            all_products(s, |j| seq.row(1, h, j), qt, sp, lt);
            for v in lt.iter_mut() {
                *v *= inv_scale;
            }
            if let Some(b) = seq.bias {
                let o = s - 1;
                for (j, row) in lt.chunks_exact_mut(sp).enumerate().skip(1) {
                    for (i, v) in row[..s].iter_mut().enumerate().skip(1) {
                        *v += b[((i - 1) * o + j - 1) * heads + h];
                    }
                }
            }
            softmax_columns(lt, sp);
            if let Some(p) = probs.as_deref_mut() {
                for (j, row) in lt.chunks_exact(sp).enumerate() {
                    p[(h * s + j) * s..(h * s + j + 1) * s].copy_from_slice(&row[..s]);
                }
            }
            let lt: &[f32] = lt;
            all_weighted(
                s,
                s,
                |i, j| lt[j * sp + i],
                |j| seq.row(2, h, j),
                out,
                |i| i * d + h * dh,
            );
        }
    }
}

multiversioned! {
    /// One sequence's backward: `dqkv [s, 3d]` (every slot written) and `dbias [(s−1)², heads]`
    /// from the output's gradient `grad [s, d]` and the kept `probs` (`Pᵀ` per head).
    fn sequence_backward(
        seq: Seq<'_>,
        probs: &[f32],
        grad: &[f32],
        dqkv: &mut [MaybeUninit<f32>],
        dbias: Option<&mut [f32]>,
        scratch: &mut Vec<f32>,
    ) {
        let mut dbias = dbias;
        let (s, d, dh, heads) = (seq.s, seq.d, seq.dh(), seq.heads);
        let inv_scale = 1.0 / (dh as f32).sqrt();
        let sp = s.next_multiple_of(LANES);
        // vᵀ [dh, sp], dP [s, sp], P and dS/√dₕ [s, s].
        scratch.resize(dh * sp + s * sp + 2 * s * s, 0.0);
        let (vt, rest) = scratch.split_at_mut(dh * sp);
        let (dpm, rest) = rest.split_at_mut(s * sp);
        let (pm, dsm) = rest.split_at_mut(s * s);
        for h in 0..heads {
            seq.transposed(2, h, vt);
            let pt = &probs[h * s * s..(h + 1) * s * s];
            for (j, row) in pt.chunks_exact(s).enumerate() {
                for (i, &v) in row.iter().enumerate() {
                    pm[i * s + j] = v;
                }
            }
            let g = |i: usize| &grad[i * d + h * dh..][..dh];
            // dP_ij = g_i · v_j
            all_products(s, g, vt, sp, dpm);
            for i in 0..s {
                // dS = P ⊙ (dP − Σ_j P dP)
                let pi = &pm[i * s..(i + 1) * s];
                let dp = &dpm[i * sp..i * sp + s];
                let dot: f32 = pi.iter().zip(dp).map(|(p, x)| p * x).sum();
                let ds = &mut dsm[i * s..(i + 1) * s];
                for ((x, &pj), &dpj) in ds.iter_mut().zip(pi).zip(dp) {
                    *x = pj * (dpj - dot);
                }
                if let (Some(db), true) = (dbias.as_deref_mut(), i > 0) {
                    let o = s - 1;
                    for (j, &x) in ds.iter().enumerate().skip(1) {
                        db[((i - 1) * o + j - 1) * heads + h] = x;
                    }
                }
                for x in ds.iter_mut() {
                    *x *= inv_scale;
                }
            }
            let dsm: &[f32] = dsm;
            let at = |part: usize| move |i: usize| i * 3 * d + part * d + h * dh;
            // dQ_i = Σ_j dS_ij k_j / √dₕ; dK_j = Σ_i dS_ij q_i / √dₕ; dV_j = Σ_i P_ij g_i.
            let (q, k) = (|i: usize| seq.row(0, h, i), |j: usize| seq.row(1, h, j));
            all_weighted(s, s, |i, j| dsm[i * s + j], k, dqkv, at(0));
            all_weighted(s, s, |j, i| dsm[i * s + j], q, dqkv, at(1));
            all_weighted(s, s, |j, i| pt[j * s + i], g, dqkv, at(2));
        }
    }
}

multiversioned! {
    /// One sequence's forward for its first row alone: `out [d]` (every slot written) and, where
    /// kept, the probabilities (`[heads, s]`). The first row gets no pair bias, and each value
    /// is computed as [`sequence_forward`] computes that row (the same products, sums and
    /// order), so the two agree bit for bit.
    fn first_row_forward(
        seq: Seq<'_>,
        out: &mut [MaybeUninit<f32>],
        probs: Option<&mut [f32]>,
        scratch: &mut Vec<f32>,
    ) {
        let mut probs = probs;
        let (s, dh, heads) = (seq.s, seq.dh(), seq.heads);
        let inv_scale = 1.0 / (dh as f32).sqrt();
        let sp = s.next_multiple_of(LANES);
        // kᵀ [dh, sp], then the logits over the keys [sp].
        scratch.resize((dh + 1) * sp, 0.0);
        let (kt, logits) = scratch.split_at_mut(dh * sp);
        for h in 0..heads {
            seq.transposed(1, h, kt);
            products::<1>(|_| seq.row(0, h, 0), 0, kt, sp, logits);
            let p = &mut logits[..s];
            for v in p.iter_mut() {
                *v *= inv_scale;
            }
            softmax_row(p);
            if let Some(kept) = probs.as_deref_mut() {
                kept[h * s..(h + 1) * s].copy_from_slice(p);
            }
            let p: &[f32] = p;
            weighted::<1>(s, |_, j| p[j], |j| seq.row(2, h, j), 0, out, |_| h * dh);
        }
    }
}

/// The softmax of `v` in place, in the operations and order of [`softmax_columns`] for one of
/// its lanes.
#[inline(always)]
fn softmax_row(v: &mut [f32]) {
    let max = v[1..].iter().fold(v[0], |m, &x| if x > m { x } else { m });
    let mut sum = 0.0f32;
    for x in v.iter_mut() {
        *x = exp(*x - max);
        sum += *x;
    }
    let inverse = 1.0 / sum;
    for x in v.iter_mut() {
        *x *= inverse;
    }
}

multiversioned! {
    /// One sequence's backward for its first row alone: `dqkv [s, 3d]` (every slot written; the
    /// other rows' queries get zeros) from that row's output gradient `grad [d]` and the kept
    /// probabilities (`[heads, s]`).
    fn first_row_backward(
        seq: Seq<'_>,
        probs: &[f32],
        grad: &[f32],
        dqkv: &mut [MaybeUninit<f32>],
        scratch: &mut Vec<f32>,
    ) {
        let (s, d, dh, heads) = (seq.s, seq.d, seq.dh(), seq.heads);
        let inv_scale = 1.0 / (dh as f32).sqrt();
        let sp = s.next_multiple_of(LANES);
        // vᵀ [dh, sp], dP [sp], dS/√dₕ [s].
        scratch.resize(dh * sp + sp + s, 0.0);
        let (vt, rest) = scratch.split_at_mut(dh * sp);
        let (dp, ds) = rest.split_at_mut(sp);
        for h in 0..heads {
            let p = &probs[h * s..(h + 1) * s];
            let g = &grad[h * dh..(h + 1) * dh];
            seq.transposed(2, h, vt);
            // dP_j = g · v_j; dS = P ⊙ (dP − Σ_j P dP).
            products::<1>(|_| g, 0, vt, sp, dp);
            let dot: f32 = p.iter().zip(&*dp).map(|(p, x)| p * x).sum();
            for ((x, &pj), &dpj) in ds.iter_mut().zip(p).zip(&*dp) {
                *x = pj * (dpj - dot) * inv_scale;
            }
            let ds: &[f32] = ds;
            let at = |part: usize, i: usize| i * 3 * d + part * d + h * dh;
            // dq_0 = Σ_j dS_j k_j / √dₕ, the other queries none; dk_j = dS_j q_0 / √dₕ;
            // dv_j = P_j g.
            weighted::<1>(s, |_, j| ds[j], |j| seq.row(1, h, j), 0, dqkv, |_| at(0, 0));
            let q = seq.row(0, h, 0);
            for j in 0..s {
                if j > 0 {
                    for o in &mut dqkv[at(0, j)..][..dh] {
                        o.write(0.0);
                    }
                }
                for (o, &x) in dqkv[at(1, j)..][..dh].iter_mut().zip(q) {
                    o.write(ds[j] * x);
                }
                for (o, &x) in dqkv[at(2, j)..][..dh].iter_mut().zip(g) {
                    o.write(p[j] * x);
                }
            }
        }
    }
}

/// The sequences of `a`, each with its rows of `qkv` and its pair bias.
fn sequences<'a>(a: &Attention<'a>) -> Vec<Seq<'a>> {
    let qkv = cut(a.qkv, a.lens.iter().map(|&s| s * 3 * a.d));
    let bias: Vec<Option<&[f32]>> = match a.pair_bias {
        Some(b) => cut(b, a.lens.iter().map(|&s| (s - 1) * (s - 1) * a.heads))
            .into_iter()
            .map(Some)
            .collect(),
        None => vec![None; a.lens.len()],
    };
    qkv.into_iter()
        .zip(bias)
        .zip(a.lens)
        .map(|((qkv, bias), &s)| Seq {
            qkv,
            bias,
            s,
            d: a.d,
            heads: a.heads,
        })
        .collect()
}

/// Attention's output (`[Σ s, d]`, or `[sequences, d]` with `first_only`) and, with
/// `keep_probs` (training), the probabilities the backward needs (per sequence, one after the
/// other: `[heads, s, s]`, each head's transposed, or `[heads, s]` with `first_only`). Panics
/// if the slices do not match the lengths.
pub fn attention_forward(a: &Attention<'_>, keep_probs: bool) -> (Vec<f32>, Option<Vec<f32>>) {
    a.check();
    let rows: usize = a.lens.iter().map(|&s| a.queries(s)).sum();
    let mut out = RowsOut::new(rows * a.d);
    let mut probs = keep_probs.then(|| vec![0.0f32; a.probs()]);
    let outs = carve(out.parts(), a.lens.iter().map(|&s| a.queries(s) * a.d));
    let ps: Vec<Option<&mut [f32]>> = match probs.as_deref_mut() {
        Some(p) => carve(p, a.lens.iter().map(|&s| a.queries(s) * s * a.heads))
            .into_iter()
            .map(Some)
            .collect(),
        None => a.lens.iter().map(|_| None).collect(),
    };
    let work: Vec<_> = sequences(a).into_iter().zip(outs).zip(ps).collect();
    work.into_par_iter()
        .with_min_len(SEQUENCES)
        .for_each_init(Vec::new, |scratch, ((seq, out), p)| {
            sequence_forward_of(a, seq, out, p, scratch)
        });
    // SAFETY: the sequences' rows cover every row, and `sequence_forward` wrote each slot of
    // its rows.
    (unsafe { out.into_vec() }, probs)
}

/// [`attention_forward`]'s output with `a`'s sequences one after the other on this thread, into
/// `out` (every slot written), and the probabilities into `probs` where given (as
/// [`attention_forward`] keeps them): for a kernel already running in parallel over blocks of
/// whole sequences. The output, initialised.
pub(crate) fn attention_rows<'o>(
    a: &Attention<'_>,
    out: &'o mut [MaybeUninit<f32>],
    probs: Option<&mut [MaybeUninit<f32>]>,
    scratch: &mut Vec<f32>,
) -> &'o mut [f32] {
    a.check();
    let outs = carve(&mut *out, a.lens.iter().map(|&s| a.queries(s) * a.d));
    let ps: Vec<Option<&mut [f32]>> = match probs {
        Some(p) => {
            assert_eq!(p.len(), a.probs(), "attention: the probabilities' length");
            carve(
                zeroed(p),
                a.lens.iter().map(|&s| a.queries(s) * s * a.heads),
            )
            .into_iter()
            .map(Some)
            .collect()
        }
        None => a.lens.iter().map(|_| None).collect(),
    };
    for ((seq, out), p) in sequences(a).into_iter().zip(outs).zip(ps) {
        sequence_forward_of(a, seq, out, p, scratch);
    }
    // SAFETY: the sequences' rows cover `out`, and each sequence's forward wrote every slot of
    // its rows.
    unsafe { assume_init(out) }
}

/// One sequence's forward: its first row alone with `a.first_only`, else every row.
fn sequence_forward_of(
    a: &Attention<'_>,
    seq: Seq<'_>,
    out: &mut [MaybeUninit<f32>],
    probs: Option<&mut [f32]>,
    scratch: &mut Vec<f32>,
) {
    if a.first_only {
        first_row_forward(seq, out, probs, scratch);
    } else {
        sequence_forward(seq, out, probs, scratch);
    }
}

/// The gradients of [`attention_forward`] for the output's gradient `grad` (its shape): `qkv`'s
/// `[Σ s, 3d]`, and the pair bias's `[Σ (s−1)², heads]` when `a` has one (zeros with
/// `first_only`: the first row gets no bias).
pub fn attention_backward(
    a: &Attention<'_>,
    probs: &[f32],
    grad: &[f32],
) -> (Vec<f32>, Option<Vec<f32>>) {
    a.check();
    assert_eq!(
        probs.len(),
        a.probs(),
        "attention gradient: probabilities' shape"
    );
    let rows: usize = a.lens.iter().map(|&s| a.queries(s)).sum();
    assert_eq!(
        grad.len(),
        rows * a.d,
        "attention gradient: the output gradient's shape"
    );
    let mut dqkv = RowsOut::new(a.qkv.len());
    let mut dbias = a.pair_bias.map(|b| vec![0.0f32; b.len()]);
    let ps = cut(probs, a.lens.iter().map(|&s| a.queries(s) * s * a.heads));
    let gs = cut(grad, a.lens.iter().map(|&s| a.queries(s) * a.d));
    let ds = carve(dqkv.parts(), a.lens.iter().map(|&s| s * 3 * a.d));
    let dbs: Vec<Option<&mut [f32]>> = match dbias.as_deref_mut() {
        Some(b) => carve(b, a.lens.iter().map(|&s| (s - 1) * (s - 1) * a.heads))
            .into_iter()
            .map(Some)
            .collect(),
        None => a.lens.iter().map(|_| None).collect(),
    };
    let work: Vec<_> = sequences(a)
        .into_iter()
        .zip(ps)
        .zip(gs)
        .zip(ds)
        .zip(dbs)
        .collect();
    work.into_par_iter().with_min_len(SEQUENCES).for_each_init(
        Vec::new,
        |scratch, ((((seq, p), g), dq), db)| {
            if a.first_only {
                // The bias's gradient stays zero (initialised so).
                first_row_backward(seq, p, g, dq, scratch);
            } else {
                sequence_backward(seq, p, g, dq, db, scratch);
            }
        },
    );
    // SAFETY: the sequences' rows cover every row, and `sequence_backward` wrote each slot of
    // its rows (dq, dk and dv of every head).
    (unsafe { dqkv.into_vec() }, dbias)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_values::values;

    /// The attention in f64, padded-free, written from the formula: the output and, for the
    /// loss `Σ out ⊙ grad`, the gradients of qkv and of the bias by central differences.
    fn reference(a: &Attention<'_>, qkv: &[f64], bias: Option<&[f64]>) -> Vec<f64> {
        let (d, heads) = (a.d, a.heads);
        let dh = d / heads;
        let mut out = Vec::new();
        let (mut row, mut pair) = (0, 0);
        for &s in a.lens {
            for i in 0..s {
                let mut o = vec![0.0f64; d];
                for h in 0..heads {
                    let logit = |j: usize| {
                        let dot: f64 = (0..dh)
                            .map(|t| {
                                qkv[(row + i) * 3 * d + h * dh + t]
                                    * qkv[(row + j) * 3 * d + d + h * dh + t]
                            })
                            .sum();
                        let b = match (bias, i > 0 && j > 0) {
                            (Some(b), true) => b[(pair + (i - 1) * (s - 1) + j - 1) * heads + h],
                            _ => 0.0,
                        };
                        dot / (dh as f64).sqrt() + b
                    };
                    let ls: Vec<f64> = (0..s).map(logit).collect();
                    let max = ls.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = ls.iter().map(|l| (l - max).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for j in 0..s {
                        for t in 0..dh {
                            o[h * dh + t] += e[j] / z * qkv[(row + j) * 3 * d + 2 * d + h * dh + t];
                        }
                    }
                }
                out.extend(o);
            }
            row += s;
            pair += (s - 1) * (s - 1);
        }
        out
    }

    #[test]
    fn forward_and_backward_match_the_formula() {
        let lens = [1usize, 3, 5, 2];
        let (d, heads) = (8, 2);
        let rows: usize = lens.iter().sum();
        let pairs: usize = lens.iter().map(|s| (s - 1) * (s - 1)).sum();
        let qkv = values(rows * 3 * d, 7);
        let bias = values(pairs * heads, 8);
        let grad = values(rows * d, 9);
        let a = Attention {
            qkv: &qkv,
            pair_bias: Some(&bias),
            lens: &lens,
            d,
            heads,
            first_only: false,
        };
        let (out, probs) = attention_forward(&a, true);
        let probs = probs.expect("kept");
        let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<f64>>();
        let (qkv64, bias64) = (wide(&qkv), wide(&bias));
        let want = reference(&a, &qkv64, Some(&bias64));
        for (k, (o, w)) in out.iter().zip(&want).enumerate() {
            assert!((f64::from(*o) - w).abs() < 1e-6, "output {k}: {o} vs {w}");
        }
        let (dqkv, dbias) = attention_backward(&a, &probs, &grad);
        let dbias = dbias.expect("a bias was given");
        let loss = |q: &[f64], b: &[f64]| -> f64 {
            reference(&a, q, Some(b))
                .iter()
                .zip(&grad)
                .map(|(o, g)| o * f64::from(*g))
                .sum()
        };
        let h = 1e-6;
        for k in 0..qkv64.len() {
            let (mut up, mut down) = (qkv64.clone(), qkv64.clone());
            up[k] += h;
            down[k] -= h;
            let want = (loss(&up, &bias64) - loss(&down, &bias64)) / (2.0 * h);
            assert!(
                (f64::from(dqkv[k]) - want).abs() < 1e-5,
                "d qkv {k}: {} vs {want}",
                dqkv[k]
            );
        }
        for k in 0..bias64.len() {
            let (mut up, mut down) = (bias64.clone(), bias64.clone());
            up[k] += h;
            down[k] -= h;
            let want = (loss(&qkv64, &up) - loss(&qkv64, &down)) / (2.0 * h);
            assert!(
                (f64::from(dbias[k]) - want).abs() < 1e-5,
                "d bias {k}: {} vs {want}",
                dbias[k]
            );
        }
    }

    #[test]
    fn without_a_bias_and_on_many_threads_each_sequence_is_its_own() {
        let lens: Vec<usize> = (0..40).map(|e| 1 + e % 9).collect();
        let (d, heads) = (16, 4);
        let rows: usize = lens.iter().sum();
        let qkv = values(rows * 3 * d, 3);
        let a = Attention {
            qkv: &qkv,
            pair_bias: None,
            lens: &lens,
            d,
            heads,
            first_only: false,
        };
        let (out, _) = attention_forward(&a, false);
        // The same sequence alone gives the same bits.
        let first: usize = lens[..5].iter().sum();
        let alone = Attention {
            qkv: &qkv[first * 3 * d..(first + lens[5]) * 3 * d],
            lens: &lens[5..6],
            ..a
        };
        let (one, kept) = attention_forward(&alone, true);
        assert_eq!(kept.map(|p| p.len()), Some(lens[5] * lens[5] * heads));
        assert_eq!(&out[first * d..(first + lens[5]) * d], &one[..]);
    }

    #[test]
    fn the_first_row_alone_is_that_row_of_the_whole() {
        // Lengths 1 to 17: one or two groups of lanes, a sequence of the class token alone.
        let lens: Vec<usize> = (0..24).map(|e| 1 + (e * 5) % 17).collect();
        let (d, heads) = (32, 2);
        let rows: usize = lens.iter().sum();
        let pairs: usize = lens.iter().map(|s| (s - 1) * (s - 1)).sum();
        let qkv = values(rows * 3 * d, 21);
        let bias = values(pairs * heads, 22);
        let whole = Attention {
            qkv: &qkv,
            pair_bias: Some(&bias),
            lens: &lens,
            d,
            heads,
            first_only: false,
        };
        let first = Attention {
            first_only: true,
            ..whole
        };
        let starts: Vec<usize> = lens
            .iter()
            .scan(0, |at, &s| {
                *at += s;
                Some(*at - s)
            })
            .collect();
        let (all, all_probs) = attention_forward(&whole, true);
        let (firsts, probs) = attention_forward(&first, true);
        let probs = probs.expect("kept");
        assert_eq!(probs.len(), rows * heads);
        for (e, &r) in starts.iter().enumerate() {
            assert_eq!(
                &firsts[e * d..(e + 1) * d],
                &all[r * d..(r + 1) * d],
                "sequence {e}"
            );
        }
        let (inference, none) = attention_forward(&first, false);
        assert!(none.is_none());
        assert_eq!(inference, firsts);
        // The backward: the whole attention's, for an output gradient on the first rows alone.
        let grad = values(lens.len() * d, 23);
        let mut spread = vec![0.0f32; rows * d];
        for (e, &r) in starts.iter().enumerate() {
            spread[r * d..(r + 1) * d].copy_from_slice(&grad[e * d..(e + 1) * d]);
        }
        let (want, want_bias) = attention_backward(&whole, &all_probs.expect("kept"), &spread);
        let (got, got_bias) = attention_backward(&first, &probs, &grad);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-6, "d qkv {k}: {g} vs {w}");
        }
        let (got_bias, want_bias) = (got_bias.expect("a bias"), want_bias.expect("a bias"));
        assert!(want_bias.iter().all(|&x| x == 0.0));
        assert_eq!(got_bias, want_bias);
    }
}
