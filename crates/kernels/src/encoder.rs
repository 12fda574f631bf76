//! Pre-norm Transformer encoder layers over blocks of whole sequences: in inference a stack of
//! them as one kernel ([`encoder_forward`]: each block taken through every layer on one thread
//! while its rows stay in cache, so the whole stack is one parallel region, where layer by
//! layer it is four a layer, each waking the other threads and ending unevenly); in training
//! one layer's forward as one region keeping what its four backwards need
//! ([`encoder_layer_saving`]).
//!
//! Per block and layer: `LN₁(x)` and q,k,v as one product, the block's sequences' attention,
//! the output projection with the residual, then the feed-forward half — each computed as the
//! layer-by-layer kernels compute it ([`crate::linear_forward`], [`crate::attention_forward`],
//! [`crate::feed_forward`]), so a row's values are theirs bit for bit: blocks hold at least 32
//! rows (or all of them), as [`crate::row_blocks`]' do, and a sequence's attention reads that
//! sequence alone.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::attention::{Attention, attention_rows};
use crate::ffn::{FeedForward, KeptSlots, Scratch as FeedForwardScratch, feed_forward_rows};
use crate::linear::{RowNorm, finish_rows};
use crate::mat::{MatRef, gemm_write};
use crate::rows::{RowsOut, as_slots, block_slots};

/// Rows per block, at most about: a block keeps the layer's intermediate rows (`3d` and `4d`
/// wide) within a core's L2, and fewer blocks repack the weights less often (each product packs
/// its weight again).
const MAX_ROWS: usize = 384;

/// Rows per block for `n` rows on `threads` threads: the fewest blocks of at most about
/// [`MAX_ROWS`] that is a multiple of the thread count, so that the threads get the same share
/// (one parallel region for the whole stack: 3 blocks on 2 threads left one idle a third of the
/// time, 13 % slower than the layers one at a time at ParT-like/64; 2 blocks 10 % faster,
/// docs/performance-log.md). A row's values do not depend on the blocks (at least [`MIN_ROWS`]
/// each), so neither on the number of threads.
fn block_target(n: usize, threads: usize) -> usize {
    let threads = threads.max(1);
    let blocks = threads * n.div_ceil(threads * MAX_ROWS).max(1);
    n.div_ceil(blocks).max(MIN_ROWS)
}

/// A block never ends with fewer rows than this unless it holds all of them (`row_blocks`).
const MIN_ROWS: usize = 32;

/// One pre-norm encoder layer's parameters:
/// `y = x + Attention(LN₁(x)·W_qkv + b_qkv)·W_o + b_o`, then `y + FFN(y)` ([`FeedForward`]'s).
#[derive(Debug, Clone, Copy)]
pub struct EncoderLayer<'a> {
    /// The LayerNorm before q, k and v (`d` wide).
    pub norm1: RowNorm<'a>,
    /// `W_qkv [d, 3d]`: q, k and v side by side.
    pub qkv: MatRef<'a>,
    /// `b_qkv [3d]`, if any.
    pub qkv_bias: Option<&'a [f32]>,
    /// `W_o [d, d]`.
    pub out: MatRef<'a>,
    /// `b_o [d]`, if any.
    pub out_bias: Option<&'a [f32]>,
    /// The LayerNorm before the feed-forward half.
    pub norm2: RowNorm<'a>,
    /// `W₁ [d, f]`.
    pub w1: MatRef<'a>,
    /// `b₁ [f]`, if any.
    pub b1: Option<&'a [f32]>,
    /// `W₂ [f, d]`.
    pub w2: MatRef<'a>,
    /// `b₂ [d]`, if any.
    pub b2: Option<&'a [f32]>,
}

/// The stack's input.
#[derive(Debug, Clone, Copy)]
pub struct Encoder<'a> {
    /// `[Σ s, d]` row-major: the sequences one after the other.
    pub x: &'a [f32],
    /// `[Σ (s − 1)², heads]`, as [`Attention::pair_bias`], the same for every layer.
    pub pair_bias: Option<&'a [f32]>,
    /// Each sequence's length (≥ 1).
    pub lens: &'a [usize],
    /// Attention heads (dividing `d`).
    pub heads: usize,
    /// The layers, first to last.
    pub layers: &'a [EncoderLayer<'a>],
}

/// A block: its first sequence and their count, its first row and row count, its first pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    seq: usize,
    seqs: usize,
    row: usize,
    rows: usize,
    pair: usize,
}

/// The sequences of `lens` grouped in order into blocks of about `target` rows (a block closes
/// once it reaches `target`); a last block of fewer than [`MIN_ROWS`] rows joins the one before.
fn sequence_blocks(lens: &[usize], target: usize) -> Vec<Block> {
    let mut blocks: Vec<Block> = Vec::new();
    let (mut row, mut pair) = (0, 0);
    for (e, &s) in lens.iter().enumerate() {
        match blocks.last_mut() {
            Some(b) if b.rows < target => {
                b.seqs += 1;
                b.rows += s;
            }
            _ => blocks.push(Block {
                seq: e,
                seqs: 1,
                row,
                rows: s,
                pair,
            }),
        }
        row += s;
        pair += (s - 1) * (s - 1);
    }
    if blocks.len() >= 2 && blocks[blocks.len() - 1].rows < MIN_ROWS {
        let tail = blocks.pop().expect("two blocks");
        let last = blocks.len() - 1;
        blocks[last].seqs += tail.seqs;
        blocks[last].rows += tail.rows;
    }
    blocks
}

impl Encoder<'_> {
    /// `d`; panics unless the shapes agree.
    fn check(&self) -> usize {
        let first = self.layers.first().expect("encoder: at least one layer");
        let d = first.qkv.rows();
        let rows: usize = self.lens.iter().sum();
        assert!(self.lens.iter().all(|&s| s > 0), "encoder: empty sequence");
        assert_eq!(self.x.len(), rows * d, "encoder: x's shape");
        assert!(
            self.heads > 0 && d.is_multiple_of(self.heads),
            "encoder: heads divide d"
        );
        for l in self.layers {
            let f = l.w1.cols();
            assert!(
                (l.qkv.rows(), l.qkv.cols()) == (d, 3 * d)
                    && (l.out.rows(), l.out.cols()) == (d, d)
                    && (l.w1.rows(), l.w2.rows(), l.w2.cols()) == (d, f, d),
                "encoder: the layers' weights"
            );
            assert!(
                l.qkv_bias.is_none_or(|b| b.len() == 3 * d)
                    && l.out_bias.is_none_or(|b| b.len() == d)
                    && l.b1.is_none_or(|b| b.len() == f)
                    && l.b2.is_none_or(|b| b.len() == d),
                "encoder: the layers' biases"
            );
            for nm in [l.norm1, l.norm2] {
                assert!(
                    nm.gamma.len() == d && nm.beta.is_none_or(|b| b.len() == d),
                    "encoder: the LayerNorms' widths"
                );
            }
        }
        if let Some(b) = self.pair_bias {
            let pairs: usize = self.lens.iter().map(|&s| (s - 1) * (s - 1)).sum();
            assert_eq!(
                b.len(),
                pairs * self.heads,
                "encoder: the pair bias's shape"
            );
        }
        d
    }
}

/// A layer's scratch on one block: its normalised rows and the pieces' own.
#[derive(Default)]
struct LayerScratch {
    normed: Vec<f32>,
    attention: Vec<f32>,
    ffn: FeedForwardScratch,
}

/// Per-task scratch of the stack: the block's input and output of a layer, its q,k,v,
/// attention and attention-half rows, and the layer's scratch.
#[derive(Default)]
struct Scratch {
    x: Vec<f32>,
    next: Vec<f32>,
    qkv: Vec<f32>,
    a: Vec<f32>,
    y: Vec<f32>,
    layer: LayerScratch,
}

/// Where a layer writes a block's rows: q,k,v (`[m, 3d]`), attention's and the attention
/// half's outputs and the layer's output (`[m, d]` each); in training also attention's
/// probabilities and the feed-forward half's `GELU(z)` and slope.
struct BlockRows<'s> {
    qkv: &'s mut [MaybeUninit<f32>],
    a: &'s mut [MaybeUninit<f32>],
    y: &'s mut [MaybeUninit<f32>],
    out: &'s mut [MaybeUninit<f32>],
    kept: Option<(&'s mut [MaybeUninit<f32>], KeptSlots<'s>)>,
}

/// The block's sequences and their pair bias.
fn block_sequences<'a>(e: &Encoder<'a>, b: Block) -> (&'a [usize], Option<&'a [f32]>) {
    let lens = &e.lens[b.seq..b.seq + b.seqs];
    let pairs: usize = lens.iter().map(|&s| (s - 1) * (s - 1)).sum();
    let bias = e
        .pair_bias
        .map(|p| &p[b.pair * e.heads..(b.pair + pairs) * e.heads]);
    (lens, bias)
}

/// Layer `l` on a block's rows `x` (the whole sequences `lens`, their pair bias `bias`): LN₁
/// and q,k,v, attention, the output projection with the residual, the feed-forward half, each
/// written where `rows` says.
fn layer_block(
    l: &EncoderLayer<'_>,
    x: &[f32],
    (lens, bias): (&[usize], Option<&[f32]>),
    heads: usize,
    rows: BlockRows<'_>,
    sc: &mut LayerScratch,
) {
    let d = l.qkv.rows();
    let m = x.len() / d;
    let (probs, gelu) = match rows.kept {
        Some((probs, gelu)) => (Some(probs), Some(gelu)),
        None => (None, None),
    };
    let u = l.norm1.apply(x, &mut sc.normed);
    let qkv = gemm_write(MatRef::row_major(u, m, d), l.qkv, rows.qkv);
    finish_rows(qkv, 3 * d, l.qkv_bias, None, false, None);
    let attention = Attention {
        qkv,
        pair_bias: bias,
        lens,
        d,
        heads,
        first_only: false,
    };
    let a = attention_rows(&attention, rows.a, probs, &mut sc.attention);
    let y = gemm_write(MatRef::row_major(a, m, d), l.out, rows.y);
    finish_rows(y, d, l.out_bias, Some(x), false, None);
    let ff = FeedForward {
        x: &*y,
        norm: l.norm2,
        w1: l.w1,
        b1: l.b1,
        w2: l.w2,
        b2: l.b2,
    };
    feed_forward_rows(&ff, 0, m, rows.out, gelu, &mut sc.ffn);
}

/// The stack's output `[Σ s, d]`: every row through every layer. Panics on inconsistent shapes.
pub fn encoder_forward(e: &Encoder<'_>) -> Vec<f32> {
    let d = e.check();
    let n: usize = e.lens.iter().sum();
    let mut out = RowsOut::new(n * d);
    let target = block_target(n, rayon::current_num_threads());
    let blocks = sequence_blocks(e.lens, target);
    let ranges: Vec<(usize, usize)> = blocks.iter().map(|b| (b.row, b.rows)).collect();
    let outs = block_slots(out.parts(), &ranges, d);
    let work: Vec<_> = blocks.into_iter().zip(outs).collect();
    work.into_par_iter()
        .for_each_init(Scratch::default, |sc, (b, (_, _, out))| {
            block_forward(e, d, b, out, sc);
        });
    // SAFETY: the blocks cover every row, and each wrote its rows.
    unsafe { out.into_vec() }
}

/// One block through every layer, its output into `out`.
fn block_forward(
    e: &Encoder<'_>,
    d: usize,
    b: Block,
    out: &mut [MaybeUninit<f32>],
    sc: &mut Scratch,
) {
    let m = b.rows;
    let sequences = block_sequences(e, b);
    sc.x.clear();
    sc.x.extend_from_slice(&e.x[b.row * d..(b.row + m) * d]);
    for v in [&mut sc.next, &mut sc.a, &mut sc.y] {
        v.resize(m * d, 0.0);
    }
    sc.qkv.resize(m * 3 * d, 0.0);
    for l in e.layers {
        let rows = BlockRows {
            qkv: as_slots(&mut sc.qkv),
            a: as_slots(&mut sc.a),
            y: as_slots(&mut sc.y),
            out: as_slots(&mut sc.next),
            kept: None,
        };
        layer_block(l, &sc.x, sequences, e.heads, rows, &mut sc.layer);
        std::mem::swap(&mut sc.x, &mut sc.next);
    }
    for (o, &x) in out.iter_mut().zip(&sc.x) {
        o.write(x);
    }
}

/// What one encoder layer's training forward keeps for its four backwards, and its output
/// (every row; the layout of each is the layer-by-layer kernel's).
#[derive(Debug, Clone)]
pub struct LayerKept {
    /// `LN₁(x)·W_qkv + b_qkv`, `[Σ s, 3d]` (attention's input).
    pub qkv: Vec<f32>,
    /// Attention's probabilities (as [`crate::attention_forward`] keeps them).
    pub probs: Vec<f32>,
    /// Attention's output, `[Σ s, d]` (the output projection's input).
    pub a: Vec<f32>,
    /// `x + a·W_o + b_o`, `[Σ s, d]` (the feed-forward half's input).
    pub y: Vec<f32>,
    /// The feed-forward half's `GELU(z)` then `GELU′(z)`, `[2, Σ s, f]`.
    pub gelu: Vec<f32>,
    /// The layer's output, `[Σ s, d]`.
    pub out: Vec<f32>,
}

/// One encoder layer's training forward over blocks of whole sequences, one parallel region:
/// each block's LN₁ and q,k,v, attention (keeping its probabilities), output projection with the
/// residual and feed-forward half (keeping the GELU and its slope), the values of each the
/// layer-by-layer kernels' bit for bit. `e.layers` holds the one layer. Panics on inconsistent
/// shapes.
pub fn encoder_layer_saving(e: &Encoder<'_>) -> LayerKept {
    let d = e.check();
    let [l] = e.layers else {
        panic!("encoder layer: one layer")
    };
    let (n, f, heads) = (e.x.len() / d, l.w1.cols(), e.heads);
    let probs_len: usize = e.lens.iter().map(|&s| s * s).sum::<usize>() * heads;
    let mut qkv = RowsOut::new(n * 3 * d);
    let mut a = RowsOut::new(n * d);
    let mut y = RowsOut::new(n * d);
    let mut gelu = RowsOut::new(2 * n * f);
    let mut out = RowsOut::new(n * d);
    let mut probs = RowsOut::new(probs_len);
    let blocks = sequence_blocks(e.lens, block_target(n, rayon::current_num_threads()));
    let ranges: Vec<(usize, usize)> = blocks.iter().map(|b| (b.row, b.rows)).collect();
    let probs_ranges: Vec<(usize, usize)> = blocks
        .iter()
        .scan(0, |at, b| {
            let len: usize = e.lens[b.seq..b.seq + b.seqs].iter().map(|&s| s * s).sum();
            *at += len;
            Some((*at - len, len))
        })
        .collect();
    let (gelus, slopes) = gelu.parts().split_at_mut(n * f);
    let work: Vec<_> = blocks
        .iter()
        .zip(block_slots(qkv.parts(), &ranges, 3 * d))
        .zip(block_slots(a.parts(), &ranges, d))
        .zip(block_slots(y.parts(), &ranges, d))
        .zip(block_slots(gelus, &ranges, f))
        .zip(block_slots(slopes, &ranges, f))
        .zip(block_slots(out.parts(), &ranges, d))
        .zip(block_slots(probs.parts(), &probs_ranges, heads))
        .map(|(((((((b, q), a), y), g), sl), o), p)| (*b, q.2, a.2, y.2, g.2, sl.2, o.2, p.2))
        .collect();
    work.into_par_iter().for_each_init(
        LayerScratch::default,
        |sc, (b, qkv, a, y, gelu, slope, out, probs)| {
            let x = &e.x[b.row * d..(b.row + b.rows) * d];
            let rows = BlockRows {
                qkv,
                a,
                y,
                out,
                kept: Some((probs, (gelu, slope))),
            };
            layer_block(l, x, block_sequences(e, b), heads, rows, sc);
        },
    );
    // SAFETY: the blocks cover every row (and every sequence's probabilities), and each wrote
    // its rows of every output: the products, attention, the GELU and its slope.
    unsafe {
        LayerKept {
            qkv: qkv.into_vec(),
            probs: probs.into_vec(),
            a: a.into_vec(),
            y: y.into_vec(),
            gelu: gelu.into_vec(),
            out: out.into_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_values::values;
    use crate::{Then, attention_forward, feed_forward, linear_forward};

    #[test]
    fn blocks_hold_whole_sequences_and_no_short_tail() {
        let lens = [3, 4, 5, 60, 2, 2, 7, 10];
        let blocks = sequence_blocks(&lens, 10);
        let firsts: Vec<(usize, usize)> = blocks.iter().map(|b| (b.seq, b.seqs)).collect();
        // 3+4+5 = 12, then 60, then 2+2+7 = 11; the tail (10 rows) joins it.
        assert_eq!(firsts, vec![(0, 3), (3, 1), (4, 4)]);
        assert_eq!(blocks[2].row, 72);
        assert_eq!(blocks[2].rows, 21);
        assert_eq!(blocks[2].pair, 4 + 9 + 16 + 59 * 59);
        assert_eq!(sequence_blocks(&[5], 64).len(), 1);
        // ParT-like/64 on 2 threads: 2 blocks; batch 512: 16.
        assert_eq!(block_target(739, 2), 370);
        assert_eq!(block_target(5865, 2), 367);
        assert_eq!(block_target(10, 4), MIN_ROWS);
        assert!(sequence_blocks(&[], 64).is_empty());
    }

    /// A layer's parameters drawn from `seed` (`d` wide, feed-forward `f`): γ₁, β₁, W_qkv,
    /// b_qkv, W_o, b_o, γ₂, β₂, W₁, b₁, W₂, b₂.
    fn parameters(d: usize, f: usize, seed: u64) -> Vec<Vec<f32>> {
        let widths = [d, d, 3 * d * d, 3 * d, d * d, d, d, d, d * f, f, f * d, d];
        widths
            .iter()
            .enumerate()
            .map(|(k, &w)| values(w, seed + k as u64))
            .collect()
    }

    /// The layer over [`parameters`]' values.
    fn layer(p: &[Vec<f32>], d: usize, f: usize) -> EncoderLayer<'_> {
        let norm = |g: usize| RowNorm {
            gamma: &p[g],
            beta: Some(&p[g + 1]),
            epsilon: 1e-5,
        };
        EncoderLayer {
            norm1: norm(0),
            qkv: MatRef::row_major(&p[2], d, 3 * d),
            qkv_bias: Some(&p[3]),
            out: MatRef::row_major(&p[4], d, d),
            out_bias: Some(&p[5]),
            norm2: norm(6),
            w1: MatRef::row_major(&p[8], d, f),
            b1: Some(&p[9]),
            w2: MatRef::row_major(&p[10], f, d),
            b2: Some(&p[11]),
        }
    }

    /// `n` sequences of lengths `1 + (e·step) mod longest`, with their rows and object pairs.
    fn sequences(n: usize, step: usize, longest: usize) -> (Vec<usize>, usize, usize) {
        let lens: Vec<usize> = (0..n).map(|e| 1 + (e * step) % longest).collect();
        let rows = lens.iter().sum();
        let pairs = lens.iter().map(|s| (s - 1) * (s - 1)).sum();
        (lens, rows, pairs)
    }

    /// `l` on `e`'s input by the kernels one at a time, keeping what a training forward keeps
    /// (with `keep`): what [`encoder_layer_saving`] returns.
    fn one_at_a_time(e: &Encoder<'_>, l: &EncoderLayer<'_>, keep: bool) -> LayerKept {
        let d = l.qkv.rows();
        let rows = e.x.len() / d;
        let xm = MatRef::row_major(e.x, rows, d);
        let (qkv, _) = linear_forward(xm, Some(l.norm1), l.qkv, l.qkv_bias, Then::Nothing);
        let att = Attention {
            qkv: &qkv,
            pair_bias: e.pair_bias,
            lens: e.lens,
            d,
            heads: e.heads,
            first_only: false,
        };
        let (a, probs) = attention_forward(&att, keep);
        let am = MatRef::row_major(&a, rows, d);
        let (y, _) = linear_forward(am, None, l.out, l.out_bias, Then::Residual(e.x));
        let ff = FeedForward {
            x: &y,
            norm: l.norm2,
            w1: l.w1,
            b1: l.b1,
            w2: l.w2,
            b2: l.b2,
        };
        let (out, gelu) = feed_forward(&ff, keep);
        LayerKept {
            qkv,
            probs: probs.unwrap_or_default(),
            a,
            y,
            gelu: gelu.unwrap_or_default(),
            out,
        }
    }

    /// `f` on pools of each of `threads`.
    fn on_threads<T: Send>(threads: &[usize], f: impl Fn() -> T + Sync) -> Vec<T> {
        threads
            .iter()
            .map(|&n| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .expect("a pool");
                pool.install(&f)
            })
            .collect()
    }

    #[test]
    fn the_stack_is_its_layers_one_at_a_time_bit_for_bit() {
        // Many blocks (lengths 1 to 17), two layers, a pair bias.
        let (lens, rows, pairs) = sequences(90, 7, 17);
        let (d, heads, f) = (16, 2, 40);
        let x = values(rows * d, 31);
        let bias = values(pairs * heads, 32);
        let params = [parameters(d, f, 40), parameters(d, f, 60)];
        let layers = [layer(&params[0], d, f), layer(&params[1], d, f)];
        let encoder = Encoder {
            x: &x,
            pair_bias: Some(&bias),
            lens: &lens,
            heads,
            layers: &layers,
        };
        let mut want = x.clone();
        for l in &layers {
            let input = Encoder {
                x: &want,
                ..encoder
            };
            want = one_at_a_time(&input, l, false).out;
        }
        assert!(sequence_blocks(&lens, 64).len() >= 4);
        // One block per thread, then several blocks a thread: the same bits.
        for got in on_threads(&[1, 3], || encoder_forward(&encoder)) {
            assert_eq!(got, want);
        }
        assert_eq!(encoder_forward(&encoder), want);
    }

    #[test]
    fn a_training_layer_keeps_what_the_kernels_one_at_a_time_keep() {
        let (lens, rows, pairs) = sequences(70, 5, 16);
        let (d, heads, f) = (16, 4, 32);
        let x = values(rows * d, 61);
        let bias = values(pairs * heads, 62);
        let p = parameters(d, f, 70);
        let l = layer(&p, d, f);
        let e = Encoder {
            x: &x,
            pair_bias: Some(&bias),
            lens: &lens,
            heads,
            layers: std::slice::from_ref(&l),
        };
        let want = one_at_a_time(&e, &l, true);
        for kept in on_threads(&[1, 2, 3], || encoder_layer_saving(&e)) {
            assert_eq!(kept.qkv, want.qkv);
            assert_eq!(kept.probs, want.probs);
            assert_eq!(kept.a, want.a);
            assert_eq!(kept.y, want.y);
            assert_eq!(kept.gelu, want.gelu);
            assert_eq!(kept.out, want.out);
        }
    }
}
