//! A whole MLP block, `[Linear → ReLU] × L → LayerNorm`, forward and backward in blocks of rows.
//!
//! Run one operation at a time, a block makes a full pass over memory per operation (each
//! product, bias, ReLU, add and the norm), with its own allocation and a thread
//! synchronisation at its end. [`mlp_forward`] instead takes a block of [`ROWS`] rows through
//! the whole chain while it is in cache, one thread per block: the first layer's terms summed
//! in their order, `(x · W) + b` as the bias rows with the product accumulated onto them,
//! `x.max(0)`, the LayerNorm row kernel. For training, [`mlp_forward_saving`] also keeps every
//! layer's output and [`mlp_backward`] takes the same blocks back through the chain
//! (LayerNorm's row gradient, ReLU masks, the transposed products), summing the parameter
//! gradients per fixed run of blocks, so that no value depends on the number of threads.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::chunks::{ChunkSums, backward_chunks, narrow};
use crate::mat::{MatRef, gemm_into, gemm_write, row_blocks};
use crate::norm::{layer_norm_backward_rows, layer_norm_rows};
use crate::rows::{RowsOut, as_slots, zeroed};

/// Rows per block (and per task): a block's activations (256 × 64 f32 = 64 kB) stay in L2.
const ROWS: usize = 256;

/// Which row of a gathered term each output row takes.
#[derive(Debug, Clone, Copy)]
pub enum Index<'a> {
    /// 32-bit row numbers.
    I32(&'a [i32]),
    /// 64-bit row numbers.
    I64(&'a [i64]),
}

impl Index<'_> {
    fn len(&self) -> usize {
        match self {
            Index::I32(s) => s.len(),
            Index::I64(s) => s.len(),
        }
    }

    /// Row `r`'s source row; panics when negative (the caller's index is not a row number).
    fn get(&self, r: usize) -> usize {
        let i = match self {
            Index::I32(s) => i64::from(s[r]),
            Index::I64(s) => s[r],
        };
        usize::try_from(i).unwrap_or_else(|_| panic!("MLP block: negative row index {i}"))
    }
}

/// One term of the first layer's pre-activation; the terms are summed in their order.
#[derive(Debug, Clone, Copy)]
pub enum MlpTerm<'a> {
    /// `x · weight`, computed block by block (`x [n, d_k]`, `weight [d_k, d_first]`; any strides:
    /// `weight` may be some of the first layer's rows).
    Product {
        /// The input rows.
        x: MatRef<'a>,
        /// The weight rows that multiply them.
        weight: MatRef<'a>,
    },
    /// Rows of an already computed row-major `y [n_src, d_first]`: row `index[r]` for output
    /// row `r` (a gather), or row `r` without an index.
    Rows {
        /// The rows, row-major.
        y: &'a [f32],
        /// Which row each output row takes (`[n]`), if not the same row.
        index: Option<Index<'a>>,
    },
}

/// A layer after the first: `relu(x · weight + bias)`.
#[derive(Debug, Clone, Copy)]
pub struct MlpLayer<'a> {
    /// `[d_in, d_out]`.
    pub weight: MatRef<'a>,
    /// `[d_out]`.
    pub bias: Option<&'a [f32]>,
}

/// An MLP block's inputs and parameters:
/// `LayerNorm(relu(… relu(relu(Σ terms + first_bias) · W₁ + b₁) …))`.
#[derive(Debug, Clone)]
pub struct MlpBlock<'a> {
    /// The first layer's terms (at least one).
    pub terms: Vec<MlpTerm<'a>>,
    /// The first layer's bias, `[d_first]`.
    pub first_bias: Option<&'a [f32]>,
    /// The layers after the first.
    pub layers: Vec<MlpLayer<'a>>,
    /// LayerNorm's γ, `[d_out]`.
    pub gamma: &'a [f32],
    /// LayerNorm's β, `[d_out]`.
    pub beta: Option<&'a [f32]>,
    /// LayerNorm's ε.
    pub epsilon: f32,
}

/// The block's shapes, checked once: rows, every layer's output width (the first layer's
/// first; the last is the LayerNorm's width).
struct Shape {
    n: usize,
    widths: Vec<usize>,
}

impl MlpBlock<'_> {
    /// Checks every shape against the others; panics on a mismatch (a caller's bug).
    fn shape(&self) -> Shape {
        assert!(!self.terms.is_empty(), "MLP block: no first-layer term");
        let d_first = self.first_width();
        let mut n = None;
        for term in &self.terms {
            let rows = match term {
                MlpTerm::Product { x, weight } => {
                    assert_eq!(x.cols(), weight.rows(), "MLP block: x · weight widths");
                    assert_eq!(weight.cols(), d_first, "MLP block: the first layer's width");
                    x.rows()
                }
                MlpTerm::Rows { y, index } => {
                    assert!(
                        d_first > 0 && y.len().is_multiple_of(d_first),
                        "MLP block: rows of width {d_first}"
                    );
                    index.map_or(y.len() / d_first, |i| i.len())
                }
            };
            assert_eq!(
                *n.get_or_insert(rows),
                rows,
                "MLP block: the terms disagree on rows"
            );
        }
        let n = n.expect("a term");
        assert!(
            self.first_bias.is_none_or(|b| b.len() == d_first),
            "MLP block: first bias width"
        );
        let mut widths = vec![d_first];
        for l in &self.layers {
            assert_eq!(
                l.weight.rows(),
                widths[widths.len() - 1],
                "MLP block: layer widths"
            );
            assert!(
                l.bias.is_none_or(|b| b.len() == l.weight.cols()),
                "MLP block: bias width"
            );
            widths.push(l.weight.cols());
        }
        let d_out = widths[widths.len() - 1];
        assert_eq!(self.gamma.len(), d_out, "MLP block: LayerNorm width");
        assert!(
            self.beta.is_none_or(|b| b.len() == d_out),
            "MLP block: β width"
        );
        Shape { n, widths }
    }

    /// The first layer's width, from a product term, else the first bias, else the next layer.
    fn first_width(&self) -> usize {
        self.terms
            .iter()
            .find_map(|t| match t {
                MlpTerm::Product { weight, .. } => Some(weight.cols()),
                MlpTerm::Rows { .. } => None,
            })
            .or(self.first_bias.map(<[f32]>::len))
            .or(self.layers.first().map(|l| l.weight.rows()))
            .unwrap_or(self.gamma.len())
    }
}

/// The block's forward: `[n, d_out]`, row-major. Panics on inconsistent shapes.
pub fn mlp_forward(block: &MlpBlock<'_>) -> Vec<f32> {
    forward(block, false).0
}

/// [`mlp_forward`] for training: also every layer's output after its ReLU (row-major
/// `[n, d_k]`, the first layer's first; the last one is the LayerNorm's input), which
/// [`mlp_backward`] takes. Same values as [`mlp_forward`].
pub fn mlp_forward_saving(block: &MlpBlock<'_>) -> (Vec<f32>, Vec<Vec<f32>>) {
    forward(block, true)
}

multiversioned! {
    /// `x.max(0)` in place (ReLU).
    fn relu(v: &mut [f32]) {
        for p in v.iter_mut() {
            *p = p.max(0.0);
        }
    }
}

multiversioned! {
    /// `dst[i] + src[i]` into `dst`, element by element (`src` cycled over `dst`'s rows when
    /// it is one row: a bias).
    fn add_onto(dst: &mut [f32], src: &[f32]) {
        if src.is_empty() {
            return;
        }
        for row in dst.chunks_mut(src.len()) {
            for (p, v) in row.iter_mut().zip(src) {
                *p += *v;
            }
        }
    }
}

multiversioned! {
    /// Rows `first..` of a gathered term: `pre`'s row `r` set to (`copy`) or added with
    /// `y`'s row `index[first + r]` (row `first + r` without an index); rows of `d` values.
    fn gather_rows(
        pre: &mut [f32],
        y: &[f32],
        index: Option<&Index<'_>>,
        first: usize,
        d: usize,
        copy: bool,
    ) {
        for (r, p) in pre.chunks_exact_mut(d).enumerate() {
            let src = index.map_or(first + r, |i| i.get(first + r));
            let row = &y[src * d..(src + 1) * d];
            if copy {
                p.copy_from_slice(row);
            } else {
                for (p, v) in p.iter_mut().zip(row) {
                    *p += *v;
                }
            }
        }
    }
}

/// `dst`'s rows set to `bias` (zeros without one).
fn fill_rows(dst: &mut [f32], bias: Option<&[f32]>) {
    match bias {
        Some(bias) => {
            for row in dst.chunks_exact_mut(bias.len()) {
                row.copy_from_slice(bias);
            }
        }
        None => dst.fill(0.0),
    }
}

fn forward(block: &MlpBlock<'_>, save: bool) -> (Vec<f32>, Vec<Vec<f32>>) {
    let Shape { n, widths } = block.shape();
    let d_first = widths[0];
    let d_out = widths[widths.len() - 1];
    let widest = widths.iter().copied().fold(0, usize::max);
    // One product plus a bias (a plain `Linear`): the bias rows with the product accumulated
    // onto them.
    let linear =
        matches!(block.terms.as_slice(), [MlpTerm::Product { .. }]) && block.first_bias.is_some();
    // One block of rows. When saving, every layer writes its output straight into its rows of
    // the saved outputs (`saves[k]`) and the next layer reads it there; otherwise two scratch
    // buffers take turns.
    let run_block = |first: usize, out: &mut [f32], saves: &mut [&mut [f32]]| {
        let m = out.len() / d_out;
        let mut acc = vec![0.0f32; if save { 0 } else { m * widest }];
        // Scratch: a product term's rows before they are added, and the turns' other buffer.
        let mut next = vec![0.0f32; m * widest];
        // The first layer's pre-activation: its terms in order, then the bias, then ReLU.
        let pre: &mut [f32] = if save {
            &mut *saves[0]
        } else {
            &mut acc[..m * d_first]
        };
        for (t, term) in block.terms.iter().enumerate() {
            match term {
                MlpTerm::Product { x, weight } if linear => {
                    fill_rows(pre, block.first_bias);
                    gemm_into(x.row_range(first, m), *weight, pre, true);
                }
                MlpTerm::Product { x, weight } if t == 0 => {
                    gemm_into(x.row_range(first, m), *weight, pre, false);
                }
                MlpTerm::Product { x, weight } => {
                    let tmp = &mut next[..m * d_first];
                    gemm_into(x.row_range(first, m), *weight, tmp, false);
                    add_onto(pre, tmp);
                }
                MlpTerm::Rows { y, index } => {
                    gather_rows(pre, y, index.as_ref(), first, d_first, t == 0);
                }
            }
        }
        if let (Some(bias), false) = (block.first_bias, linear) {
            add_onto(pre, bias);
        }
        relu(pre);
        // The other layers: bias rows, the product accumulated onto them, ReLU.
        for (k, layer) in block.layers.iter().enumerate() {
            let (d_in, d_k) = (widths[k], widths[k + 1]);
            {
                let (src, dst): (&[f32], &mut [f32]) = if save {
                    let (done, rest) = saves.split_at_mut(k + 1);
                    (&*done[k], &mut *rest[0])
                } else {
                    (&acc[..m * d_in], &mut next[..m * d_k])
                };
                fill_rows(dst, layer.bias);
                gemm_into(MatRef::row_major(src, m, d_in), layer.weight, dst, true);
                relu(dst);
            }
            if !save {
                std::mem::swap(&mut acc, &mut next);
            }
        }
        let input: &[f32] = if save {
            &*saves[block.layers.len()]
        } else {
            &acc[..m * d_out]
        };
        layer_norm_rows(input, as_slots(out), block.gamma, block.beta, block.epsilon);
    };

    let mut output = RowsOut::new(n * d_out);
    let mut saved: Vec<RowsOut> = if save {
        widths.iter().map(|&d| RowsOut::new(n * d)).collect()
    } else {
        Vec::new()
    };
    if n == 0 || d_out == 0 {
        return (
            output.zeros(),
            saved.into_iter().map(RowsOut::zeros).collect(),
        );
    }
    // The blocks' rows of the output (and of every saved output), as disjoint slices; each
    // block zeroes its slices before it writes them.
    type Part<'p> = (
        usize,
        &'p mut [MaybeUninit<f32>],
        Vec<&'p mut [MaybeUninit<f32>]>,
    );
    let blocks = row_blocks(n, ROWS);
    let mut parts: Vec<Part<'_>> = Vec::with_capacity(blocks.len());
    let mut rest = output.parts();
    for &(first, rows) in &blocks {
        let (part, tail) = rest.split_at_mut(rows * d_out);
        parts.push((first, part, Vec::new()));
        rest = tail;
    }
    for (buffer, &d) in saved.iter_mut().zip(&widths) {
        let mut rest = buffer.parts();
        for (part, &(_, rows)) in parts.iter_mut().zip(&blocks) {
            let (mine, tail) = rest.split_at_mut(rows * d);
            part.2.push(mine);
            rest = tail;
        }
    }
    parts.into_par_iter().for_each(|(first, out, saves)| {
        let mut saves: Vec<&mut [f32]> = saves.into_iter().map(zeroed).collect();
        run_block(first, zeroed(out), &mut saves);
    });
    // SAFETY: the blocks cover all `n` rows, and each zeroed its rows of every buffer.
    unsafe {
        let saved = saved.into_iter().map(|b| b.into_vec()).collect();
        (output.into_vec(), saved)
    }
}

/// A first-layer term's gradients: for `Product { x, weight }`, `(dx, dweight)` (`dx` only if
/// asked for); for `Rows { y, .. }`, `(dy, None)` (if asked for; `dy` has `y`'s shape).
pub type TermGrads = (Option<Vec<f32>>, Option<Vec<f32>>);

/// The gradients of one MLP block (see [`mlp_backward`]), row-major.
#[derive(Debug)]
pub struct MlpGrads {
    /// Per term of the first layer, in order.
    pub terms: Vec<TermGrads>,
    /// The first layer's bias, `[d_first]`.
    pub first_bias: Vec<f32>,
    /// Per further layer: `(dweight [d_in, d_out], dbias [d_out])`.
    pub layers: Vec<(Vec<f32>, Vec<f32>)>,
    /// LayerNorm's `dγ`, `[d_out]`.
    pub gamma: Vec<f32>,
    /// LayerNorm's `dβ`, `[d_out]`.
    pub beta: Vec<f32>,
}

multiversioned! {
    /// ReLU's gradient in place (`dz` kept where the layer's `output` is positive, 0
    /// elsewhere), its column sums added (f64) onto `acc` (the bias gradient); rows of
    /// `acc.len()` values.
    fn relu_grad_and_bias(dz: &mut [f32], output: &[f32], acc: &mut [f64]) {
        let d = acc.len();
        for (row, out) in dz.chunks_exact_mut(d).zip(output.chunks_exact(d)) {
            for ((g, o), a) in row.iter_mut().zip(out).zip(acc.iter_mut()) {
                let v = if *o > 0.0 { *g } else { 0.0 };
                *g = v;
                *a += f64::from(v);
            }
        }
    }
}

/// Where consecutive pieces of the given sizes start in one buffer.
fn starts(sizes: &[usize]) -> Vec<usize> {
    sizes
        .iter()
        .scan(0, |at, &size| {
            let start = *at;
            *at += size;
            Some(start)
        })
        .collect()
}

/// The backward of [`mlp_forward_saving`]: every parameter's gradient and, where asked
/// (`want_inputs[t]`), the gradient of term `t`'s input, for the incoming gradient `grad`
/// (row-major `[n, d_out]`) of the block's output. `block` is the forward's (biases and β are
/// not read); `saved` is what [`mlp_forward_saving`] returned.
///
/// The same blocks of rows as the forward, one thread each, take the rows' gradient back
/// through the LayerNorm, then through every layer (ReLU's mask; `dW += Aᵀ·dZ`, `db += Σ dZ`
/// and `dA = dZ·Wᵀ`) while the rows are in cache. Parameter gradients are summed per fixed run
/// of blocks (`chunks::backward_chunks`: up to 16 runs, one task each; weight products
/// accumulated in f32 as one long product, bias, γ and β sums in f64), then the runs' sums
/// added in order in f64: the result does not depend on the number of threads. A gathered term's gradient is the rows'
/// gradients added into their source rows in row order. Panics on inconsistent shapes.
pub fn mlp_backward(
    block: &MlpBlock<'_>,
    saved: &[&[f32]],
    grad: &[f32],
    want_inputs: &[bool],
) -> MlpGrads {
    let Shape { n, widths } = block.shape();
    let d_first = widths[0];
    let d_out = widths[widths.len() - 1];
    assert_eq!(
        saved.len(),
        widths.len(),
        "MLP block gradient: saved outputs"
    );
    for (s, &d) in saved.iter().zip(&widths) {
        assert_eq!(s.len(), n * d, "MLP block gradient: a saved output's size");
    }
    assert_eq!(
        grad.len(),
        n * d_out,
        "MLP block gradient: incoming gradient's size"
    );
    assert_eq!(
        want_inputs.len(),
        block.terms.len(),
        "MLP block gradient: wanted inputs"
    );
    let ws: Vec<MatRef<'_>> = block.layers.iter().map(|l| l.weight).collect();
    let wants_rows = block
        .terms
        .iter()
        .zip(want_inputs)
        .any(|(t, &w)| w && matches!(t, MlpTerm::Rows { .. }));

    // The parameters' gradients: each product term's weight, then each further layer's
    // (partial products per chunk, summed in f64); f64 sums: the first bias, each further
    // bias, dγ, dβ.
    let weight_sizes: Vec<usize> = block
        .terms
        .iter()
        .filter_map(|t| match t {
            MlpTerm::Product { weight, .. } => Some(weight.rows() * weight.cols()),
            MlpTerm::Rows { .. } => None,
        })
        .chain(ws.iter().map(|w| w.rows() * w.cols()))
        .collect();
    let n_products = weight_sizes.len() - ws.len();
    let bias_at = starts(&widths);
    let sums_len: usize = widths.iter().sum::<usize>() + 2 * d_out;
    let blocks = row_blocks(n, ROWS);
    // Full-size outputs: each wanted product term's dx, and the first layer's dZ (for gathered
    // terms), written by rows.
    let dx_cols: Vec<usize> = block
        .terms
        .iter()
        .zip(want_inputs)
        .map(|(t, &want)| match t {
            MlpTerm::Product { x, .. } if want => x.cols(),
            _ => 0,
        })
        .collect();
    let mut dxs: Vec<RowsOut> = dx_cols.iter().map(|&d| RowsOut::new(n * d)).collect();
    let mut dz1 = RowsOut::new(if wants_rows { n * d_first } else { 0 });
    let widest = widths.iter().copied().fold(0, usize::max);
    let last = widths.len() - 1;

    // Every block's disjoint rows of the full-size outputs.
    let mut parts = Vec::with_capacity(blocks.len());
    let mut rdz = dz1.parts();
    let mut rdx: Vec<&mut [MaybeUninit<f32>]> = dxs.iter_mut().map(RowsOut::parts).collect();
    for &(first, m) in &blocks {
        let (dz_rows, rest) =
            std::mem::take(&mut rdz).split_at_mut(if wants_rows { m * d_first } else { 0 });
        rdz = rest;
        let dx_rows: Vec<&mut [MaybeUninit<f32>]> = rdx
            .iter_mut()
            .zip(&dx_cols)
            .map(|(slot, &cols)| {
                let (mine, rest) = std::mem::take(slot).split_at_mut(m * cols);
                *slot = rest;
                mine
            })
            .collect();
        parts.push((first, m, (dx_rows, dz_rows)));
    }
    type BlockRows<'p> = (Vec<&'p mut [MaybeUninit<f32>]>, &'p mut [MaybeUninit<f32>]);
    let run_block = |chunk: &mut ChunkSums<'_>,
                     sc: &mut Scratch,
                     first: usize,
                     m: usize,
                     (dx_rows, dz1_rows): BlockRows<'_>| {
        let rows = |k: usize| &saved[k][first * widths[k]..(first + m) * widths[k]];
        sc.cur.resize(m * widest, 0.0);
        sc.prev.resize(m * widest, 0.0);
        let (mut cur, mut prev) = (&mut sc.cur, &mut sc.prev);
        let (p_bias, p_norm) = chunk.sums.split_at_mut(widths.iter().sum());
        let (pg, pb) = p_norm.split_at_mut(d_out);
        // LayerNorm: its input is the last layer's output.
        layer_norm_backward_rows(
            rows(last),
            &grad[first * d_out..(first + m) * d_out],
            block.gamma,
            block.epsilon,
            as_slots(&mut cur[..m * d_out]),
            pg,
            pb,
        );
        // Further layers, last first: dZ = dA ⊙ mask; db, dW; dA of the layer below.
        for k in (1..widths.len()).rev() {
            let (d_in, d_k) = (widths[k - 1], widths[k]);
            let dz = &mut cur[..m * d_k];
            relu_grad_and_bias(dz, rows(k), &mut p_bias[bias_at[k]..bias_at[k] + d_k]);
            let dz = MatRef::row_major(dz, m, d_k);
            // dW += A_{k−1}ᵀ · dZ.
            let a_prev = MatRef::row_major(rows(k - 1), m, d_in).t();
            chunk.weights[n_products + k - 1].add(a_prev, dz);
            // dA_{k−1} = dZ · Wᵀ.
            gemm_into(dz, ws[k - 1].t(), &mut prev[..m * d_in], false);
            std::mem::swap(&mut cur, &mut prev);
        }
        // The first layer.
        let dz = &mut cur[..m * d_first];
        relu_grad_and_bias(dz, rows(0), &mut p_bias[..d_first]);
        let dz_m = MatRef::row_major(dz, m, d_first);
        let mut product = 0;
        for (term, dx) in block.terms.iter().zip(dx_rows) {
            if let MlpTerm::Product { x, weight } = term {
                chunk.weights[product].add(x.row_range(first, m).t(), dz_m);
                product += 1;
                if !dx.is_empty() {
                    gemm_write(dz_m, weight.t(), dx);
                }
            }
        }
        for (slot, &v) in dz1_rows.iter_mut().zip(dz.iter()) {
            slot.write(v);
        }
    };
    let (weights, sums) = backward_chunks(parts, &weight_sizes, sums_len, run_block);
    // SAFETY: the blocks cover all `n` rows and each wrote its rows of these buffers (with no
    // rows, every buffer is empty).
    let (dxs, dz1): (Vec<Vec<f32>>, Vec<f32>) = unsafe {
        (
            dxs.into_iter().map(|b| b.into_vec()).collect(),
            dz1.into_vec(),
        )
    };

    let mut weights = weights.into_iter();
    let mut term_grads = Vec::with_capacity(block.terms.len());
    for ((term, dx), &want) in block.terms.iter().zip(dxs).zip(want_inputs) {
        match term {
            MlpTerm::Product { .. } => {
                term_grads.push((want.then_some(dx), weights.next()));
            }
            MlpTerm::Rows { y, index } => {
                let dy = want.then(|| match index {
                    None => dz1.clone(),
                    Some(index) => scatter_add(&dz1, index, y.len() / d_first, d_first),
                });
                term_grads.push((dy, None));
            }
        }
    }
    let layers = weights
        .zip(&bias_at[1..])
        .zip(&widths[1..])
        .map(|((w, &at), &d)| (w, narrow(&sums[at..at + d])))
        .collect();
    let norm_at = widths.iter().sum::<usize>();
    MlpGrads {
        terms: term_grads,
        first_bias: narrow(&sums[..d_first]),
        layers,
        gamma: narrow(&sums[norm_at..norm_at + d_out]),
        beta: narrow(&sums[norm_at + d_out..norm_at + 2 * d_out]),
    }
}

/// An MLP backward's scratch, per chunk: the current layer's gradient and the one below.
#[derive(Default)]
struct Scratch {
    cur: Vec<f32>,
    prev: Vec<f32>,
}

multiversioned! {
    /// Source rows `i0..` into `out`: each the sum of its rows of `dz` (`order[start[i]..
    /// start[i + 1]]`), in order.
    fn sum_rows(out: &mut [f32], i0: usize, order: &[usize], start: &[usize], dz: &[f32], d: usize) {
        for (k, row) in out.chunks_exact_mut(d).enumerate() {
            let i = i0 + k;
            for &r in &order[start[i]..start[i + 1]] {
                for (a, b) in row.iter_mut().zip(&dz[r * d..(r + 1) * d]) {
                    *a += *b;
                }
            }
        }
    }
}

/// `dy[index[r]] += dz[r]` for every row `r` in order, into `n_src` zero rows of `d` values:
/// the gradient of a gather. The rows are first grouped by their source row (a counting sort,
/// keeping the row order within a group); then each task sums whole source rows, reading each
/// group's rows of `dz` in order. Every sum is the sequential one (same terms, same order), so
/// it does not depend on the number of threads.
fn scatter_add(dz: &[f32], index: &Index<'_>, n_src: usize, d: usize) -> Vec<f32> {
    /// Source rows per task.
    const SRC_ROWS: usize = 64;
    let rows = index.len();
    // `start[i]..start[i + 1]`: where the rows gathered from source row `i` are in `order`.
    let mut start = vec![0usize; n_src + 1];
    let sources: Vec<usize> = (0..rows)
        .map(|r| {
            let i = index.get(r);
            assert!(
                i < n_src,
                "MLP block gradient: index {i} out of {n_src} rows"
            );
            start[i + 1] += 1;
            i
        })
        .collect();
    for i in 0..n_src {
        start[i + 1] += start[i];
    }
    let mut order = vec![0usize; rows];
    let mut next = start[..n_src].to_vec();
    for (r, &i) in sources.iter().enumerate() {
        order[next[i]] = r;
        next[i] += 1;
    }
    let mut dy = RowsOut::new(n_src * d);
    if d == 0 {
        return dy.zeros();
    }
    dy.parts()
        .par_chunks_mut(SRC_ROWS * d)
        .enumerate()
        .for_each(|(task, out)| {
            sum_rows(zeroed(out), task * SRC_ROWS, &order, &start, dz, d);
        });
    // SAFETY: the tasks' chunks cover every element, and each zeroed its chunk.
    unsafe { dy.into_vec() }
}
