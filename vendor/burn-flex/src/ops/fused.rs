//! GNN4Colliders patch 8 (vendor/burn-flex/PATCHED.md): a whole MLP block's forward, in blocks of rows.
//!
//! `[Linear → ReLU] × L → LayerNorm` run one operation at a time makes a full pass over memory per
//! operation (each product, bias, ReLU, add and the norm), with its own allocation and a thread
//! synchronisation at its end. [`mlp_forward`] instead takes a block of rows through the whole
//! chain while it is in cache, one thread per block. Every row goes through the same operations
//! in the same order as the operation-by-operation path (the first layer's terms summed in their
//! order, `(x · W) + b`, `x.max(0)`, the same LayerNorm row kernel, products by `gemm` with the
//! bias as the starting rows exactly as [`crate::ops::matmul::linear_fused`]), so the values are
//! the same. Forward only: nothing is kept for a backward pass.

use alloc::vec;
use alloc::vec::Vec;
use burn_backend::DType;
use burn_std::{Bytes, Shape};

use crate::ops::matmul::{Mat, gemm_rows};
use crate::{FlexTensor, Layout};

/// Rows per block (and per task): a block's activations (256 × 64 f32 = 64 kB) stay in L2.
const ROWS: usize = 256;

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

impl Index<'_> {
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

fn f32_vector(t: &FlexTensor) -> Vec<f32> {
    let t = t.to_contiguous();
    t.storage::<f32>().to_vec()
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
    let f32s = |t: &FlexTensor| t.dtype() == DType::F32;
    let floats_ok = terms.iter().all(|t| match t {
        MlpTerm::Product { x, weight } => f32s(x) && f32s(weight),
        MlpTerm::Rows { y, index } => {
            f32s(y) && index.is_none_or(|i| matches!(i.dtype(), DType::I32 | DType::I64))
        }
    }) && first_bias.is_none_or(f32s)
        && layers.iter().all(|l| f32s(l.weight) && l.bias.is_none_or(f32s))
        && f32s(gamma)
        && beta.is_none_or(f32s);
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
                let index = index.as_ref().map(|i| match i.dtype() {
                    DType::I32 => Index::I32(i.storage::<i32>()),
                    _ => Index::I64(i.storage::<i64>()),
                });
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
    let block = |first: usize, out: &mut [f32]| {
        let m = out.len() / d_out;
        let mut acc = vec![0.0f32; m * widest];
        let mut next = vec![0.0f32; m * widest];
        // The first layer's pre-activation: its terms in order, then the bias, then ReLU.
        let pre = &mut acc[..m * d_first];
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
                        for (p, v) in pre.iter_mut().zip(tmp.iter()) {
                            *p = *p + *v;
                        }
                    }
                }
                Term::Rows { y, index } => {
                    for (r, p) in pre.chunks_exact_mut(d_first).enumerate() {
                        let src = index.as_ref().map_or(first + r, |i| i.get(first + r));
                        let row = &y[src * d_first..(src + 1) * d_first];
                        if t == 0 {
                            p.copy_from_slice(row);
                        } else {
                            for (p, v) in p.iter_mut().zip(row) {
                                *p = *p + *v;
                            }
                        }
                    }
                }
            }
        }
        if let (Some(bias), false) = (&first_bias, linear) {
            for p in pre.chunks_exact_mut(d_first) {
                for (p, v) in p.iter_mut().zip(bias) {
                    *p = *p + *v;
                }
            }
        }
        for p in pre.iter_mut() {
            *p = p.max(0.0);
        }
        // The other layers: bias rows, the product accumulated onto them, ReLU.
        let mut width = d_first;
        for (w, bias) in &layers {
            let dst = &mut next[..m * w.cols];
            match bias {
                Some(bias) => {
                    for row in dst.chunks_exact_mut(w.cols) {
                        row.copy_from_slice(bias);
                    }
                }
                None => dst.fill(0.0),
            }
            let src = Mat {
                addr: acc.as_ptr() as usize,
                rs: width as isize,
                cs: 1,
                rows: m,
                cols: width,
            };
            product(src, 0, m, *w, dst, true);
            for v in dst.iter_mut() {
                *v = v.max(0.0);
            }
            width = w.cols;
            core::mem::swap(&mut acc, &mut next);
        }
        let input = &acc[..m * d_out];
        match &beta {
            Some(beta) => crate::ops::activation::layer_norm_rows_f32_with_beta(
                input, out, &gamma, beta, d_out, epsilon as f32,
            ),
            None => crate::ops::activation::layer_norm_rows_f32_no_beta(
                input, out, &gamma, d_out, epsilon as f32,
            ),
        }
    };

    let mut output = vec![0.0f32; n * d_out];
    if n > 0 && d_out > 0 {
        // The blocks' rows of the output, as disjoint slices (the same blocks as `linear_fused`,
        // so that every product runs gemm's general kernel: see `row_blocks`).
        let mut parts: Vec<(usize, &mut [f32])> = Vec::new();
        let mut rest = output.as_mut_slice();
        for (first, rows) in crate::ops::matmul::row_blocks(n, ROWS) {
            let (part, tail) = rest.split_at_mut(rows * d_out);
            parts.push((first, part));
            rest = tail;
        }
        #[cfg(feature = "rayon")]
        {
            use rayon::prelude::*;
            parts
                .into_par_iter()
                .for_each(|(first, out)| block(first, out));
        }
        #[cfg(not(feature = "rayon"))]
        for (first, out) in parts {
            block(first, out);
        }
    }
    Some(FlexTensor::new(
        Bytes::from_elems(output),
        Layout::contiguous(Shape::from(vec![n, d_out])),
        DType::F32,
    ))
}
