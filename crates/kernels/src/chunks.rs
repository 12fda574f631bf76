//! The skeleton every blocked backward shares (the Edge_Network's MLP block, the
//! ROOT-Transformer's linear layers, feed-forward and attention): row blocks grouped into a fixed
//! number of chunks, one task each; per chunk, partial weight gradients (sums of products `aᵀ·b`, f32,
//! written by the chunk's first product) and f64 sums (bias and LayerNorm gradients); then the
//! chunks added in order, in f64. The chunks are a function of the row count alone, so no value
//! depends on the number of threads.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::mat::{MatRef, gemm_into, gemm_write};
use crate::rows::{RowsOut, zeroed};

/// Chunks of a backward (at most), each with its partial sums.
const CHUNKS: usize = 16;

/// How many row blocks each chunk takes: at most `most` chunks (one with no block when there
/// are none), as even as possible.
fn chunk_sizes(n_blocks: usize, most: usize) -> Vec<usize> {
    let n = n_blocks.clamp(1, most);
    (0..n)
        .map(|c| (c + 1) * n_blocks / n - c * n_blocks / n)
        .collect()
}

/// A chunk's partial sum of products `Σ aᵀ·b` (a weight's gradient over the chunk's blocks):
/// the first product writes it, the others add onto it; zeros if there is none.
pub(crate) enum Partial<'p> {
    /// Not written yet.
    Slots(&'p mut [MaybeUninit<f32>]),
    /// Written.
    Done(&'p mut [f32]),
}

impl Partial<'_> {
    /// Adds `a · b` (the partial's shape).
    pub(crate) fn add(&mut self, a: MatRef<'_>, b: MatRef<'_>) {
        let state = std::mem::replace(self, Partial::Slots(&mut []));
        *self = match state {
            Partial::Slots(slots) => Partial::Done(gemm_write(a, b, slots)),
            Partial::Done(w) => {
                gemm_into(a, b, w, true);
                Partial::Done(w)
            }
        };
    }

    /// Zeros where no product came.
    fn finish(self) {
        if let Partial::Slots(slots) = self {
            zeroed(slots);
        }
    }
}

/// What a chunk accumulates over its blocks.
pub(crate) struct ChunkSums<'p> {
    /// One partial per weight, in the order of `weight_lens`.
    pub(crate) weights: Vec<Partial<'p>>,
    /// The f64 sums (`sums_len`), added onto.
    pub(crate) sums: &'p mut [f64],
}

/// Runs `block(chunk, scratch, first, rows, out)` for every row block `(first, rows, out)` in
/// order within its chunk, the chunks in parallel (each with its own `S` scratch); returns each
/// weight's gradient (`weight_lens[k]` values, its chunks' partials summed in f64) and the f64
/// sums added over the chunks in order.
pub(crate) fn backward_chunks<R: Send, S: Default>(
    blocks: Vec<(usize, usize, R)>,
    weight_lens: &[usize],
    sums_len: usize,
    block: impl Fn(&mut ChunkSums<'_>, &mut S, usize, usize, R) + Sync,
) -> (Vec<Vec<f32>>, Vec<f64>) {
    let sizes = chunk_sizes(blocks.len(), CHUNKS);
    let n_chunks = sizes.len();
    // Each partial one slot wider than an empty product, so that every chunk has one.
    let strides: Vec<usize> = weight_lens.iter().map(|&l| l.max(1)).collect();
    let mut partials: Vec<RowsOut> = strides
        .iter()
        .map(|&s| RowsOut::new(n_chunks * s))
        .collect();
    let mut part_sums = vec![0.0f64; n_chunks * sums_len.max(1)];
    let mut slots: Vec<_> = partials
        .iter_mut()
        .zip(&strides)
        .map(|(p, &s)| p.parts().chunks_exact_mut(s))
        .collect();
    let mut blocks = blocks.into_iter();
    let chunks: Vec<_> = sizes
        .iter()
        .zip(part_sums.chunks_exact_mut(sums_len.max(1)))
        .map(|(&k, sums)| {
            let weights: Vec<_> = slots
                .iter_mut()
                .map(|s| s.next().expect("one run of slots per chunk"))
                .collect();
            (blocks.by_ref().take(k).collect::<Vec<_>>(), weights, sums)
        })
        .collect();
    chunks.into_par_iter().for_each(|(blocks, weights, sums)| {
        let any = !blocks.is_empty();
        let weights = weights
            .into_iter()
            .zip(weight_lens)
            .map(|(slots, &len)| {
                let (slots, spare) = slots.split_at_mut(len);
                zeroed(spare);
                if any {
                    Partial::Slots(slots)
                } else {
                    Partial::Done(zeroed(slots))
                }
            })
            .collect();
        let mut chunk = ChunkSums {
            weights,
            sums: &mut sums[..sums_len],
        };
        let mut scratch = S::default();
        for (first, m, out) in blocks {
            block(&mut chunk, &mut scratch, first, m, out);
        }
        for partial in chunk.weights {
            partial.finish();
        }
    });
    let weights = partials
        .into_iter()
        .zip(strides.iter().zip(weight_lens))
        .map(|(p, (&stride, &len))| {
            // SAFETY: every chunk wrote its whole partial (its first product or zeros, and the
            // spare slot).
            let p = unsafe { p.into_vec() };
            sum_partials(&p, stride, len)
        })
        .collect();
    let mut sums = vec![0.0f64; sums_len];
    for part in part_sums.chunks_exact(sums_len.max(1)) {
        for (s, v) in sums.iter_mut().zip(part) {
            *s += *v;
        }
    }
    (weights, sums)
}

/// The first `len` values of the sum of the partials (`stride` apart in `parts`), added in f64
/// in the partials' order; the elements in parallel ranges (the values do not depend on them).
fn sum_partials(parts: &[f32], stride: usize, len: usize) -> Vec<f32> {
    const RANGE: usize = 4096;
    let mut out = RowsOut::new(len);
    out.parts()
        .par_chunks_mut(RANGE)
        .enumerate()
        .for_each_init(Vec::new, |acc, (r, out)| {
            let first = r * RANGE;
            acc.clear();
            acc.resize(out.len(), 0.0f64);
            for part in parts.chunks_exact(stride) {
                add_wide(&part[first..first + out.len()], acc);
            }
            for (o, &s) in out.iter_mut().zip(acc.iter()) {
                o.write(s as f32);
            }
        });
    // SAFETY: the ranges cover every element, and each wrote its own.
    unsafe { out.into_vec() }
}

multiversioned! {
    /// `acc += v`, widened to f64.
    fn add_wide(v: &[f32], acc: &mut [f64]) {
        for (a, &x) in acc.iter_mut().zip(v) {
            *a += f64::from(x);
        }
    }
}

/// f64 sums as f32.
pub(crate) fn narrow(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&s| s as f32).collect()
}
