//! GNN4Colliders patch 8 (vendor/burn-flex/PATCHED.md): a whole MLP block's forward and backward,
//! in blocks of rows.
//!
//! `[Linear → ReLU] × L → LayerNorm` run one operation at a time makes a full pass over memory per
//! operation (each product, bias, ReLU, add and the norm), with its own allocation and a thread
//! synchronisation at its end. [`mlp_forward`] instead takes a block of rows through the whole
//! chain while it is in cache, one thread per block. Every row goes through the same operations
//! in the same order as the operation-by-operation path (the first layer's terms summed in their
//! order, `(x · W) + b`, `x.max(0)`, the same LayerNorm row kernel, products by `gemm` with the
//! bias as the starting rows exactly as [`crate::ops::matmul::linear_fused`]), so the values are
//! the same. For training, [`mlp_forward_saving`] also keeps every layer's output and
//! [`mlp_backward`] takes the same blocks back through the chain (LayerNorm's row gradient,
//! ReLU masks, the transposed products), summing the parameter gradients per fixed run of
//! blocks.

use alloc::vec;
use alloc::vec::Vec;
use core::mem::MaybeUninit;
use burn_backend::DType;
use burn_std::{Bytes, Shape};

use crate::ops::matmul::{Mat, gemm_rows};
use crate::{FlexTensor, Layout};

/// Rows per block (and per task): a block's activations (256 × 64 f32 = 64 kB) stay in L2.
const ROWS: usize = 256;

/// Tasks of the backward (at most): each takes a fixed run of blocks and keeps one partial sum
/// of every parameter gradient (see [`mlp_backward`]).
const CHUNKS: usize = 16;

/// One term of the first layer's pre-activation; the terms are summed in their order.
pub enum MlpTerm<'a> {
    /// `x · weight`, computed block by block (`x [n, d_k]`, `weight [d_k, d_first]`, any strides:
    /// `weight` may be a slice of the first layer's rows).
    Product {
        /// The input rows.
        x: &'a FlexTensor,
        /// The weight rows that multiply them.
        weight: &'a FlexTensor,
    },
    /// Rows of an already computed `y [n_src, d_first]`: row `index[r]` for output row `r`
    /// (a gather), or row `r` without an index.
    Rows {
        /// The rows.
        y: &'a FlexTensor,
        /// Which row each output row takes (`[n]`, i32 or i64), if not the same row.
        index: Option<&'a FlexTensor>,
    },
}

/// A layer after the first: `relu(x · weight + bias)`.
pub struct MlpLayer<'a> {
    /// `[d_in, d_out]`.
    pub weight: &'a FlexTensor,
    /// `[d_out]`.
    pub bias: Option<&'a FlexTensor>,
}

/// A contiguous index vector.
enum Index<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
}

impl<'a> Index<'a> {
    /// A contiguous i32 or i64 index tensor's values.
    fn of(i: &'a FlexTensor) -> Self {
        match i.dtype() {
            DType::I32 => Index::I32(i.storage::<i32>()),
            _ => Index::I64(i.storage::<i64>()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Index::I32(s) => s.len(),
            Index::I64(s) => s.len(),
        }
    }

    fn get(&self, r: usize) -> usize {
        let i = match self {
            Index::I32(s) => s[r] as i64,
            Index::I64(s) => s[r],
        };
        usize::try_from(i).expect("mlp_forward: negative index")
    }
}

/// A validated term, ready to be read from any thread.
enum Term<'a> {
    Product { x: Mat, w: Mat },
    Rows { y: &'a [f32], index: Option<Index<'a>> },
}

fn is_f32(t: &FlexTensor) -> bool {
    t.dtype() == DType::F32
}

/// Whether the kernels take these terms: f32 values, i32 or i64 indices.
fn terms_are_f32(terms: &[MlpTerm<'_>]) -> bool {
    terms.iter().all(|t| match t {
        MlpTerm::Product { x, weight } => is_f32(x) && is_f32(weight),
        MlpTerm::Rows { y, index } => {
            is_f32(y) && index.is_none_or(|i| matches!(i.dtype(), DType::I32 | DType::I64))
        }
    })
}

fn f32_vector(t: &FlexTensor) -> Vec<f32> {
    let t = t.to_contiguous();
    t.storage::<f32>().to_vec()
}

/// GNN4Colliders patch 9: a full-size output that blocks of rows fill, allocated without a zero
/// fill up front (a pass over megabytes of memory before any block starts); each block zeroes
/// its own rows with [`zeroed`] while they are in cache, then writes them.
struct RowsOut {
    v: Vec<f32>,
    len: usize,
}

impl RowsOut {
    fn new(len: usize) -> Self {
        Self { v: Vec::with_capacity(len), len }
    }

    /// The elements, not yet initialised, to be split between the blocks.
    fn parts(&mut self) -> &mut [MaybeUninit<f32>] {
        &mut self.v.spare_capacity_mut()[..self.len]
    }

    /// # Safety
    /// Every element of [`RowsOut::parts`] has been initialised (by [`zeroed`]).
    unsafe fn into_vec(mut self) -> Vec<f32> {
        // SAFETY: the caller initialised all `len` elements, within the capacity.
        unsafe { self.v.set_len(self.len) };
        self.v
    }

    /// All zeros (when no block runs).
    fn zeros(mut self) -> Vec<f32> {
        zeroed(self.parts());
        // SAFETY: just initialised, every element.
        unsafe { self.into_vec() }
    }
}

/// `s` set to zeros, as initialised f32.
fn zeroed(s: &mut [MaybeUninit<f32>]) -> &mut [f32] {
    s.fill(MaybeUninit::new(0.0));
    // SAFETY: every element was just written; `MaybeUninit<f32>` has the layout of `f32`.
    unsafe { &mut *(core::ptr::from_mut(s) as *mut [f32]) }
}

/// `(x · w)` for rows `first..first + rows` of `x` into `dst` (`rows × w.cols`, row-major),
/// overwriting it, or (`accumulate`) adding the product onto what `dst` holds, as
/// [`crate::ops::matmul::linear_fused`] does; one thread (the caller's block).
fn product(x: Mat, first: usize, rows: usize, w: Mat, dst: &mut [f32], accumulate: bool) {
    assert_eq!(x.cols, w.rows, "mlp_forward: product widths");
    assert!(first + rows <= x.rows && dst.len() >= rows * w.cols);
    // SAFETY: `x` and `w` address live f32 storage of the tensors borrowed by `mlp_forward` for
    // the whole call (checked shapes above); `dst` is a distinct, initialised buffer of room
    // for `rows × w.cols`.
    unsafe { gemm_rows(x, first, rows, w, dst.as_mut_ptr(), accumulate, gemm::Parallelism::None) }
}

/// An MLP block's forward: `LayerNorm(relu(… relu(relu(Σ terms + first_bias) · W₁ + b₁) …))`.
///
/// # Shapes
/// every term → `[n, d_first]`; `layers[k].weight [d_k, d_{k+1}]`; `gamma`, `beta [d_out]`
/// → `[n, d_out]`.
///
/// Returns `None` (nothing computed) when a tensor is not f32 (indices: i32 or i64), so callers
/// fall back to the operation-by-operation path. Panics on inconsistent shapes (a caller's bug).
pub fn mlp_forward(
    terms: &[MlpTerm<'_>],
    first_bias: Option<&FlexTensor>,
    layers: &[MlpLayer<'_>],
    gamma: &FlexTensor,
    beta: Option<&FlexTensor>,
    epsilon: f64,
) -> Option<FlexTensor> {
    forward(terms, first_bias, layers, gamma, beta, epsilon, false).map(|(out, _)| out)
}

/// [`mlp_forward`] for training: also returns every layer's output after its ReLU (`[n, d_k]`,
/// the first layer's first; the last one is the LayerNorm's input), which [`mlp_backward`]
/// takes. Same values as [`mlp_forward`].
pub fn mlp_forward_saving(
    terms: &[MlpTerm<'_>],
    first_bias: Option<&FlexTensor>,
    layers: &[MlpLayer<'_>],
    gamma: &FlexTensor,
    beta: Option<&FlexTensor>,
    epsilon: f64,
) -> Option<(FlexTensor, Vec<FlexTensor>)> {
    forward(terms, first_bias, layers, gamma, beta, epsilon, true)
}

fn forward(
    terms: &[MlpTerm<'_>],
    first_bias: Option<&FlexTensor>,
    layers: &[MlpLayer<'_>],
    gamma: &FlexTensor,
    beta: Option<&FlexTensor>,
    epsilon: f64,
    save: bool,
) -> Option<(FlexTensor, Vec<FlexTensor>)> {
    let floats_ok = terms_are_f32(terms)
        && first_bias.is_none_or(is_f32)
        && layers.iter().all(|l| is_f32(l.weight) && l.bias.is_none_or(is_f32))
        && is_f32(gamma)
        && beta.is_none_or(is_f32);
    if !floats_ok || terms.is_empty() {
        return None;
    }

    // Contiguous copies where the kernel reads by rows (no copy when already contiguous).
    let rows_y: Vec<Option<(FlexTensor, Option<FlexTensor>)>> = terms
        .iter()
        .map(|t| match t {
            MlpTerm::Rows { y, index } => Some((y.to_contiguous(), index.map(|i| i.to_contiguous()))),
            MlpTerm::Product { .. } => None,
        })
        .collect();
    let mut n_rows: Option<usize> = None;
    let mut d_first: Option<usize> = None;
    let agree = |what: &mut Option<usize>, v: usize, name: &str| match *what {
        Some(w) => assert_eq!(w, v, "mlp_forward: the terms disagree on {name}"),
        None => *what = Some(v),
    };
    let mut prepared: Vec<Term<'_>> = Vec::with_capacity(terms.len());
    for (t, ry) in terms.iter().zip(&rows_y) {
        match (t, ry) {
            (MlpTerm::Product { x, weight }, _) => {
                let (x, w) = (Mat::of(x), Mat::of(weight));
                assert_eq!(x.cols, w.rows, "mlp_forward: x · weight widths");
                agree(&mut n_rows, x.rows, "rows");
                agree(&mut d_first, w.cols, "the first layer's width");
                prepared.push(Term::Product { x, w });
            }
            (MlpTerm::Rows { .. }, Some((y, index))) => {
                let shape = y.layout().shape();
                assert_eq!(shape.num_dims(), 2, "mlp_forward: rows are 2-D");
                agree(&mut d_first, shape[1], "the first layer's width");
                let index = index.as_ref().map(Index::of);
                agree(
                    &mut n_rows,
                    index.as_ref().map_or(shape[0], Index::len),
                    "rows",
                );
                prepared.push(Term::Rows { y: y.storage::<f32>(), index });
            }
            (MlpTerm::Rows { .. }, None) => unreachable!("prepared above"),
        }
    }
    let n = n_rows.expect("at least one term");
    let d_first = d_first.expect("at least one term");
    let first_bias = first_bias.map(f32_vector);
    if let Some(b) = &first_bias {
        assert_eq!(b.len(), d_first, "mlp_forward: first bias width");
    }
    let mut d_in = d_first;
    let layers: Vec<(Mat, Option<Vec<f32>>)> = layers
        .iter()
        .map(|l| {
            let w = Mat::of(l.weight);
            assert_eq!(w.rows, d_in, "mlp_forward: layer widths");
            d_in = w.cols;
            let b = l.bias.map(f32_vector);
            if let Some(b) = &b {
                assert_eq!(b.len(), w.cols, "mlp_forward: bias width");
            }
            (w, b)
        })
        .collect();
    let d_out = d_in;
    let gamma = f32_vector(gamma);
    let beta = beta.map(f32_vector);
    assert_eq!(gamma.len(), d_out, "mlp_forward: LayerNorm width");
    let widest = layers.iter().map(|(w, _)| w.cols).fold(d_first, usize::max);

    // One product plus a bias (a plain `Linear`): exactly `linear_fused`'s bias rows with the
    // product accumulated onto them.
    let linear = matches!(prepared.as_slice(), [Term::Product { .. }]) && first_bias.is_some();
    // One block of rows. When saving, every layer writes its output straight into its rows of
    // the saved outputs (`saves[k]`) and the next layer reads it there; otherwise two scratch
    // buffers take turns.
    let block = |first: usize, out: &mut [f32], saves: &mut [&mut [f32]]| {
        let m = out.len() / d_out;
        let save = !saves.is_empty();
        let mut acc = vec![0.0f32; if save { 0 } else { m * widest }];
        // Scratch: a product term's rows before they are added, and the turns' other buffer.
        let mut next = vec![0.0f32; m * widest];
        // The first layer's pre-activation: its terms in order, then the bias, then ReLU.
        let pre: &mut [f32] = if save {
            &mut *saves[0]
        } else {
            &mut acc[..m * d_first]
        };
        for (t, term) in prepared.iter().enumerate() {
            match term {
                Term::Product { x, w } if linear => {
                    let bias = first_bias.as_deref().expect("checked above");
                    for row in pre.chunks_exact_mut(d_first) {
                        row.copy_from_slice(bias);
                    }
                    product(*x, first, m, *w, pre, true);
                }
                Term::Product { x, w } => {
                    if t == 0 {
                        product(*x, first, m, *w, pre, false);
                    } else {
                        let tmp = &mut next[..m * d_first];
                        product(*x, first, m, *w, tmp, false);
                        add_onto(pre, tmp);
                    }
                }
                Term::Rows { y, index } => {
                    gather_rows(pre, y, index.as_ref(), first, d_first, t == 0);
                }
            }
        }
        if let (Some(bias), false) = (&first_bias, linear) {
            add_onto(pre, bias);
        }
        relu_in_place(pre);
        // The other layers: bias rows, the product accumulated onto them, ReLU.
        let mut width = d_first;
        for (k, (w, bias)) in layers.iter().enumerate() {
            {
                let (src, dst): (&[f32], &mut [f32]) = if save {
                    let (done, rest) = saves.split_at_mut(k + 1);
                    (&*done[k], &mut *rest[0])
                } else {
                    (&acc[..m * width], &mut next[..m * w.cols])
                };
                match bias {
                    Some(bias) => {
                        for row in dst.chunks_exact_mut(w.cols) {
                            row.copy_from_slice(bias);
                        }
                    }
                    None => dst.fill(0.0),
                }
                let src = Mat {
                    addr: src.as_ptr() as usize,
                    rs: width as isize,
                    cs: 1,
                    rows: m,
                    cols: width,
                };
                product(src, 0, m, *w, dst, true);
                relu_in_place(dst);
            }
            if !save {
                core::mem::swap(&mut acc, &mut next);
            }
            width = w.cols;
        }
        let input: &[f32] = if save {
            &*saves[layers.len()]
        } else {
            &acc[..m * d_out]
        };
        match &beta {
            Some(beta) => crate::ops::activation::layer_norm_rows_f32_with_beta(
                input, out, &gamma, beta, d_out, epsilon as f32,
            ),
            None => crate::ops::activation::layer_norm_rows_f32_no_beta(
                input, out, &gamma, d_out, epsilon as f32,
            ),
        }
    };

    let mut output = RowsOut::new(n * d_out);
    // Every layer's output after its ReLU, when saving (widths d_first, then each layer's).
    let widths: Vec<usize> = core::iter::once(d_first)
        .chain(layers.iter().map(|(w, _)| w.cols))
        .collect();
    let mut saved: Vec<RowsOut> = if save {
        widths.iter().map(|&d| RowsOut::new(n * d)).collect()
    } else {
        Vec::new()
    };
    let (output, saved) = if n > 0 && d_out > 0 {
        // The blocks' rows of the output (and of every saved output), as disjoint slices (the
        // same blocks as `linear_fused`, so that every product runs gemm's general kernel: see
        // `row_blocks`); each block zeroes its slices before it writes them.
        type Part<'p> = (usize, &'p mut [MaybeUninit<f32>], Vec<&'p mut [MaybeUninit<f32>]>);
        let blocks = crate::ops::matmul::row_blocks(n, ROWS);
        let mut parts: Vec<Part<'_>> = Vec::new();
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
        let run = |(first, out, saves): Part<'_>| {
            let mut saves: Vec<&mut [f32]> = saves.into_iter().map(zeroed).collect();
            block(first, zeroed(out), &mut saves);
        };
        #[cfg(feature = "rayon")]
        {
            use rayon::prelude::*;
            parts.into_par_iter().for_each(run);
        }
        #[cfg(not(feature = "rayon"))]
        parts.into_iter().for_each(run);
        // SAFETY: the blocks cover all `n` rows, and each zeroed its rows of every buffer.
        unsafe {
            let saved: Vec<Vec<f32>> = saved.into_iter().map(|b| b.into_vec()).collect();
            (output.into_vec(), saved)
        }
    } else {
        (output.zeros(), saved.into_iter().map(RowsOut::zeros).collect())
    };
    let saved = saved
        .into_iter()
        .zip(&widths)
        .map(|(v, &d)| matrix(v, n, d))
        .collect();
    Some((matrix(output, n, d_out), saved))
}

/// A row-major `[rows, cols]` f32 tensor of `v`.
fn matrix(v: Vec<f32>, rows: usize, cols: usize) -> FlexTensor {
    FlexTensor::new(
        Bytes::from_elems(v),
        Layout::contiguous(Shape::from(vec![rows, cols])),
        DType::F32,
    )
}

/// The gradients of one MLP block (see [`mlp_backward`]).
#[derive(Debug)]
pub struct MlpGrads {
    /// Per term of the first layer, in order: for `Product { x, weight }`, `(dx, dweight)`
    /// (`dx` only if asked for); for `Rows { y, .. }`, `(dy, None)` (if asked for).
    pub terms: Vec<(Option<FlexTensor>, Option<FlexTensor>)>,
    /// The first layer's bias, `[d_first]`.
    pub first_bias: FlexTensor,
    /// Per further layer: `(dweight, dbias)`.
    pub layers: Vec<(FlexTensor, FlexTensor)>,
    /// LayerNorm's `dγ`, `[d_out]`.
    pub gamma: FlexTensor,
    /// LayerNorm's `dβ`, `[d_out]`.
    pub beta: FlexTensor,
}

/// A matrix view for `gemm` of `rows × cols` f32 values at `ptr` with strides `rs`, `cs`.
fn view(ptr: *const f32, rows: usize, cols: usize, rs: isize, cs: isize) -> Mat {
    Mat { addr: ptr as usize, rs, cs, rows, cols }
}

/// `a · b` into the row-major `a.rows × b.cols` matrix `dst`, overwriting it (one thread).
fn mm(a: Mat, b: Mat, dst: &mut [f32]) {
    mm_onto(a, b, dst, false);
}

/// `a · b` into `dst` as [`mm`], or (`accumulate`) added, summed first, onto what it holds.
fn mm_onto(a: Mat, b: Mat, dst: &mut [f32], accumulate: bool) {
    assert!(a.cols == b.rows && dst.len() >= a.rows * b.cols, "mlp_backward: product shapes");
    // SAFETY: every caller builds `a` and `b` over live f32 storage (tensors borrowed by
    // `mlp_backward` or the block's own buffers) of at least the stated extent; `dst` is a
    // distinct buffer of room for the product.
    unsafe { gemm_rows(a, 0, a.rows, b, dst.as_mut_ptr(), accumulate, gemm::Parallelism::None) }
}

multiversioned! {
    /// ReLU's gradient in place (`dz` kept where the layer's `output` is positive, 0 elsewhere,
    /// as `relu_backward`), its column sums added (f64) onto `acc` (the bias gradient); rows of
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

multiversioned! {
    /// `x.max(0)` in place (ReLU).
    fn relu_in_place(v: &mut [f32]) {
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
                *p = *p + *v;
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
                    *p = *p + *v;
                }
            }
        }
    }
}

/// The backward of [`mlp_forward_saving`]: every parameter's gradient and, where asked
/// (`want_inputs[t]`), the gradient of term `t`'s input, for the incoming gradient `grad`
/// `[n, d_out]` of the block's output. `terms`, `layers`, `gamma` and `epsilon` are the
/// forward's (biases and β are not needed); `saved` is what [`mlp_forward_saving`] returned.
///
/// The same blocks of rows as the forward, one thread each, take the rows' gradient back
/// through the LayerNorm (the row kernel of [`crate::ops::activation::layer_norm_backward`],
/// so the same `dx`), then through every layer (ReLU's mask; `dW += Aᵀ·dZ`, `db += Σ dZ` and
/// `dA = dZ·Wᵀ`) while the rows are in cache. Parameter gradients are summed per fixed run of
/// blocks (up to [`CHUNKS`] runs, one task each; weight products accumulated in f32 as one long
/// product, bias, γ and β sums in f64), then the runs' sums added in order in f64: the result
/// does not depend on the number of threads. A gathered term's gradient (`Rows` with an
/// index) is the rows' gradients added into their source rows in row order.
///
/// Returns `None` when a tensor is not f32 (as [`mlp_forward`]). Panics on inconsistent shapes.
#[allow(clippy::too_many_arguments)]
pub fn mlp_backward(
    terms: &[MlpTerm<'_>],
    layers: &[MlpLayer<'_>],
    gamma: &FlexTensor,
    epsilon: f64,
    saved: &[FlexTensor],
    grad: &FlexTensor,
    want_inputs: &[bool],
) -> Option<MlpGrads> {
    let floats_ok = terms_are_f32(terms)
        && layers.iter().all(|l| is_f32(l.weight))
        && is_f32(gamma)
        && is_f32(grad)
        && saved.iter().all(is_f32);
    if !floats_ok || terms.is_empty() {
        return None;
    }
    assert_eq!(want_inputs.len(), terms.len(), "mlp_backward: one flag per term");
    assert_eq!(saved.len(), layers.len() + 1, "mlp_backward: one saved output per layer");
    let saved: Vec<FlexTensor> = saved.iter().map(FlexTensor::to_contiguous).collect();
    let acts: Vec<&[f32]> = saved.iter().map(|t| t.storage::<f32>()).collect();
    let widths: Vec<usize> = saved
        .iter()
        .map(|t| {
            let shape = t.layout().shape();
            assert_eq!(shape.num_dims(), 2, "mlp_backward: saved outputs are 2-D");
            shape[1]
        })
        .collect();
    let n = saved[0].layout().shape()[0];
    let d_first = widths[0];
    let d_out = *widths.last().expect("at least one layer");
    let grad = grad.to_contiguous();
    assert_eq!(grad.layout().shape().num_elements(), n * d_out, "mlp_backward: gradient shape");
    let gs: &[f32] = grad.storage();
    let gamma = f32_vector(gamma);
    assert_eq!(gamma.len(), d_out, "mlp_backward: LayerNorm width");
    let ws: Vec<Mat> = layers.iter().map(|l| Mat::of(l.weight)).collect();
    for (k, w) in ws.iter().enumerate() {
        assert!(w.rows == widths[k] && w.cols == widths[k + 1], "mlp_backward: layer widths");
    }

    /// A term as the backward reads it.
    enum Back<'a> {
        Product { x: Mat, w: Mat },
        Rows { n_src: usize, index: Option<Index<'a>> },
    }
    let indices: Vec<Option<FlexTensor>> = terms
        .iter()
        .map(|t| match t {
            MlpTerm::Rows { index: Some(i), .. } => Some(i.to_contiguous()),
            _ => None,
        })
        .collect();
    let back: Vec<Back<'_>> = terms
        .iter()
        .zip(&indices)
        .map(|(t, i)| match t {
            MlpTerm::Product { x, weight } => {
                let (x, w) = (Mat::of(x), Mat::of(weight));
                assert!(x.rows == n && x.cols == w.rows && w.cols == d_first, "mlp_backward: term");
                Back::Product { x, w }
            }
            MlpTerm::Rows { y, .. } => {
                let shape = y.layout().shape();
                assert!(shape.num_dims() == 2 && shape[1] == d_first, "mlp_backward: rows term");
                let index = i.as_ref().map(Index::of);
                assert_eq!(index.as_ref().map_or(shape[0], Index::len), n, "mlp_backward: rows");
                Back::Rows { n_src: shape[0], index }
            }
        })
        .collect();
    let wants_rows = back
        .iter()
        .zip(want_inputs)
        .any(|(b, &w)| w && matches!(b, Back::Rows { .. }));

    // Per block, the parameters' partial gradients: f32 weight products (each product term's,
    // then each further layer's), f64 sums (the first bias, each further bias, dγ, dβ).
    let weight_sizes: Vec<usize> = back
        .iter()
        .filter_map(|b| match b {
            Back::Product { w, .. } => Some(w.rows * w.cols),
            Back::Rows { .. } => None,
        })
        .chain(ws.iter().map(|w| w.rows * w.cols))
        .collect();
    let n_products = weight_sizes.len() - ws.len();
    // Where each weight's partial (product terms', then the layers') and each layer's bias
    // partial starts.
    let starts = |sizes: &[usize]| -> Vec<usize> {
        sizes
            .iter()
            .scan(0, |at, &size| {
                let start = *at;
                *at += size;
                Some(start)
            })
            .collect()
    };
    let weight_at = starts(&weight_sizes);
    let bias_at = starts(&widths);
    let f32_len: usize = weight_sizes.iter().sum();
    let f64_len: usize = widths.iter().sum::<usize>() + 2 * d_out;
    let blocks = crate::ops::matmul::row_blocks(n, ROWS);
    // Fixed chunks of consecutive blocks (one task each) share partial sums: a chunk's blocks
    // accumulate their weight products onto one f32 partial (as one long product would), the
    // chunks' partials are added in f64 in chunk order. The chunks depend on the rows only,
    // not on the number of threads.
    let n_chunks = blocks.len().min(CHUNKS);
    let chunks: Vec<core::ops::Range<usize>> = (0..n_chunks)
        .map(|c| c * blocks.len() / n_chunks..(c + 1) * blocks.len() / n_chunks)
        .collect();
    let mut part32 = vec![0.0f32; chunks.len() * f32_len];
    let mut part64 = vec![0.0f64; chunks.len() * f64_len];
    // Full-size outputs: each wanted product term's dx, and the first layer's dZ (for
    // gathered terms), written by rows.
    // (Each block zeroes its rows of them first, while they are in cache.)
    let mut dxs: Vec<RowsOut> = back
        .iter()
        .zip(want_inputs)
        .map(|(b, &want)| match b {
            Back::Product { x, .. } if want => RowsOut::new(n * x.cols),
            _ => RowsOut::new(0),
        })
        .collect();
    let mut dz1 = RowsOut::new(if wants_rows { n * d_first } else { 0 });
    let widest = widths.iter().copied().fold(0, usize::max);
    let eps = epsilon as f32;

    let block = |first: usize,
                 m: usize,
                 accumulate: bool,
                 p32: &mut [f32],
                 p64: &mut [f64],
                 dx_rows: &mut [&mut [f32]],
                 dz1_rows: &mut [f32]| {
        let rows = |k: usize| &acts[k][first * widths[k]..(first + m) * widths[k]];
        let mut cur = vec![0.0f32; m * widest];
        let mut prev = vec![0.0f32; m * widest];
        let (p_bias, p_norm) = p64.split_at_mut(widths.iter().sum());
        let (pg, pb) = p_norm.split_at_mut(d_out);
        // LayerNorm: its input is the last layer's output.
        let last = widths.len() - 1;
        crate::ops::activation::layer_norm_backward_rows(
            rows(last),
            &gs[first * d_out..(first + m) * d_out],
            &gamma,
            eps,
            &mut cur[..m * d_out],
            pg,
            pb,
        );
        // Further layers, last first: dZ = dA ⊙ mask; db, dW; dA of the layer below.
        for k in (1..widths.len()).rev() {
            let (d_in, d_k) = (widths[k - 1], widths[k]);
            let dz = &mut cur[..m * d_k];
            relu_grad_and_bias(dz, rows(k), &mut p_bias[bias_at[k]..bias_at[k] + d_k]);
            let a_prev = rows(k - 1);
            // dW += A_{k−1}ᵀ · dZ.
            let at = view(a_prev.as_ptr(), d_in, m, 1, d_in as isize);
            let dz_m = view(dz.as_ptr(), m, d_k, d_k as isize, 1);
            let off = weight_at[n_products + k - 1];
            mm_onto(at, dz_m, &mut p32[off..off + d_in * d_k], accumulate);
            // dA_{k−1} = dZ · Wᵀ.
            let w = ws[k - 1];
            let wt = view(w.addr as *const f32, w.cols, w.rows, w.cs, w.rs);
            mm(dz_m, wt, &mut prev[..m * d_in]);
            core::mem::swap(&mut cur, &mut prev);
        }
        // The first layer.
        let dz = &mut cur[..m * d_first];
        relu_grad_and_bias(dz, rows(0), &mut p_bias[..d_first]);
        let dz_m = view(dz.as_ptr(), m, d_first, d_first as isize, 1);
        let mut product = 0;
        for (t, b) in back.iter().enumerate() {
            if let Back::Product { x, w } = b {
                // SAFETY: `first + m ≤ n = x.rows`: this block's rows of `x`.
                let x0 = unsafe { (x.addr as *const f32).offset(first as isize * x.rs) };
                let xt = view(x0, x.cols, m, x.cs, x.rs);
                let off = weight_at[product];
                mm_onto(xt, dz_m, &mut p32[off..off + weight_sizes[product]], accumulate);
                product += 1;
                if !dx_rows[t].is_empty() {
                    let wt = view(w.addr as *const f32, w.cols, w.rows, w.cs, w.rs);
                    mm(dz_m, wt, dx_rows[t]);
                }
            }
        }
        if !dz1_rows.is_empty() {
            dz1_rows.copy_from_slice(dz);
        }
    };

    if n > 0 {
        // Every block's disjoint rows of the full-size outputs, grouped into the chunks of
        // blocks that share partial sums.
        type Rows<'p> = &'p mut [MaybeUninit<f32>];
        type Part<'p> = (usize, usize, Vec<Rows<'p>>, Rows<'p>);
        let mut parts: Vec<Part<'_>> = Vec::with_capacity(blocks.len());
        let mut rdz = dz1.parts();
        let mut rdx: Vec<&mut [MaybeUninit<f32>]> = dxs.iter_mut().map(RowsOut::parts).collect();
        for &(first, m) in &blocks {
            let dz_part = if wants_rows {
                let (p, t) = rdz.split_at_mut(m * d_first);
                rdz = t;
                p
            } else {
                &mut []
            };
            let mut dx_parts = Vec::with_capacity(rdx.len());
            for (slot, b) in rdx.iter_mut().zip(&back) {
                if slot.is_empty() {
                    dx_parts.push(<&mut [MaybeUninit<f32>]>::default());
                    continue;
                }
                let cols = match b {
                    Back::Product { x, .. } => x.cols,
                    Back::Rows { .. } => unreachable!("only product terms have dx"),
                };
                let (p, t) = core::mem::take(slot).split_at_mut(m * cols);
                *slot = t;
                dx_parts.push(p);
            }
            parts.push((first, m, dx_parts, dz_part));
        }
        let mut chunk_parts: Vec<(Vec<Part<'_>>, &mut [f32], &mut [f64])> = Vec::new();
        let mut parts = parts.into_iter();
        for ((c, a), b) in chunks
            .iter()
            .zip(part32.chunks_exact_mut(f32_len.max(1)))
            .zip(part64.chunks_exact_mut(f64_len.max(1)))
        {
            chunk_parts.push((parts.by_ref().take(c.len()).collect(), a, b));
        }
        let chunk = |(blocks, a, b): (Vec<Part<'_>>, &mut [f32], &mut [f64])| {
            for (k, (first, m, dx, dz)) in blocks.into_iter().enumerate() {
                let mut dx: Vec<&mut [f32]> = dx.into_iter().map(zeroed).collect();
                block(first, m, k > 0, a, b, &mut dx, zeroed(dz));
            }
        };
        #[cfg(feature = "rayon")]
        {
            use rayon::prelude::*;
            chunk_parts.into_par_iter().for_each(chunk);
        }
        #[cfg(not(feature = "rayon"))]
        chunk_parts.into_iter().for_each(chunk);
    }
    // SAFETY: the blocks cover all `n` rows and each zeroed its rows of these buffers before
    // writing them (with no rows, every buffer is empty).
    let (dxs, dz1): (Vec<Vec<f32>>, Vec<f32>) =
        unsafe { (dxs.into_iter().map(|b| b.into_vec()).collect(), dz1.into_vec()) };

    // The chunks' partial sums, added in chunk order.
    let mut sum32 = vec![0.0f64; f32_len];
    for part in part32.chunks_exact(f32_len.max(1)).take(chunks.len()) {
        for (s, v) in sum32.iter_mut().zip(part) {
            *s += f64::from(*v);
        }
    }
    let mut sum64 = vec![0.0f64; f64_len];
    for part in part64.chunks_exact(f64_len.max(1)).take(chunks.len()) {
        for (s, v) in sum64.iter_mut().zip(part) {
            *s += *v;
        }
    }
    let narrow = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    let vector = |v: &[f64]| {
        FlexTensor::new(
            Bytes::from_elems(narrow(v)),
            Layout::contiguous(Shape::from(vec![v.len()])),
            DType::F32,
        )
    };

    let weight = |p: usize, w: &Mat| {
        matrix(narrow(&sum32[weight_at[p]..weight_at[p] + weight_sizes[p]]), w.rows, w.cols)
    };
    let mut product = 0;
    let mut term_grads = Vec::with_capacity(back.len());
    for ((b, dx), &want) in back.iter().zip(dxs).zip(want_inputs) {
        match b {
            Back::Product { x, w } => {
                let dw = weight(product, w);
                product += 1;
                term_grads.push((want.then(|| matrix(dx, n, x.cols)), Some(dw)));
            }
            Back::Rows { n_src, index } => {
                let dy = want.then(|| match index {
                    None => matrix(dz1.clone(), n, d_first),
                    Some(index) => {
                        matrix(scatter_add(&dz1, index, *n_src, d_first), *n_src, d_first)
                    }
                });
                term_grads.push((dy, None));
            }
        }
    }
    let layer_grads = ws
        .iter()
        .enumerate()
        .map(|(k, w)| {
            let at = bias_at[k + 1];
            (weight(n_products + k, w), vector(&sum64[at..at + w.cols]))
        })
        .collect();
    let norm_at = widths.iter().sum::<usize>();
    Some(MlpGrads {
        terms: term_grads,
        first_bias: vector(&sum64[..d_first]),
        layers: layer_grads,
        gamma: vector(&sum64[norm_at..norm_at + d_out]),
        beta: vector(&sum64[norm_at + d_out..norm_at + 2 * d_out]),
    })
}

/// `dy[index[r]] += dz[r]` for every row `r` in order, into `n_src` zero rows of `d` values:
/// the gradient of a gather (patch 9). The rows are first grouped by their source row (a
/// counting sort, keeping the row order within a group); then each task sums whole source rows,
/// reading each group's rows of `dz` in order. Every sum is the sequential one (same terms, same
/// order), so it does not depend on the number of threads.
fn scatter_add(dz: &[f32], index: &Index<'_>, n_src: usize, d: usize) -> Vec<f32> {
    /// Source rows per task.
    const SRC_ROWS: usize = 64;
    let rows = index.len();
    // `start[i]..start[i + 1]`: where the rows gathered from source row `i` are in `order`.
    let mut start = vec![0usize; n_src + 1];
    let sources: Vec<usize> = (0..rows)
        .map(|r| {
            let i = index.get(r);
            assert!(i < n_src, "mlp_backward: index {i} out of {n_src} rows");
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
    multiversioned! {
        /// Source rows `i0..` into `out`: each the sum of its rows of `dz`, in order.
        fn sum_rows(
            out: &mut [f32],
            i0: usize,
            order: &[usize],
            start: &[usize],
            dz: &[f32],
            d: usize,
        ) {
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
    let sum = |(task, out): (usize, &mut [MaybeUninit<f32>])| {
        sum_rows(zeroed(out), task * SRC_ROWS, &order, &start, dz, d);
    };
    #[cfg(feature = "rayon")]
    {
        use rayon::prelude::*;
        dy.parts().par_chunks_mut(SRC_ROWS * d).enumerate().for_each(sum);
    }
    #[cfg(not(feature = "rayon"))]
    dy.parts().chunks_mut(SRC_ROWS * d).enumerate().for_each(sum);
    // SAFETY: the tasks' chunks cover every element, and each zeroed its chunk.
    unsafe { dy.into_vec() }
}
