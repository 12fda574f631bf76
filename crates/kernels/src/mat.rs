//! Strided f32 matrix views and the one `gemm` call every product here goes through.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::rows::{as_slots, assume_init, zeroed};

/// A strided `rows × cols` view of f32 values: element `(r, c)` is
/// `data[offset + r·row_stride + c·col_stride]`. Built only by [`MatRef::new`], which checks that
/// every element lies inside `data`, so the products that read it stay in bounds.
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a> {
    data: &'a [f32],
    offset: usize,
    rows: usize,
    cols: usize,
    row_stride: isize,
    col_stride: isize,
}

impl<'a> MatRef<'a> {
    /// The view, or `None` when an element would lie outside `data` (or the strides overflow).
    pub fn new(
        data: &'a [f32],
        offset: usize,
        [rows, cols]: [usize; 2],
        [row_stride, col_stride]: [isize; 2],
    ) -> Option<Self> {
        if rows > 0 && cols > 0 {
            let reach = |n: usize, stride: isize| (n as i128 - 1) * stride as i128;
            let (r, c) = (reach(rows, row_stride), reach(cols, col_stride));
            let first = offset as i128 + r.min(0) + c.min(0);
            let last = offset as i128 + r.max(0) + c.max(0);
            if first < 0 || last >= data.len() as i128 {
                return None;
            }
        }
        Some(Self {
            data,
            offset,
            rows,
            cols,
            row_stride,
            col_stride,
        })
    }

    /// The first `rows × cols` values of `data`, row by row. Panics if `data` is shorter.
    pub fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::new(data, 0, [rows, cols], [cols as isize, 1])
            .unwrap_or_else(|| panic!("{} values for a {rows} × {cols} matrix", data.len()))
    }

    /// The values row by row, when the view is row-major and contiguous (no copy).
    pub(crate) fn row_major_values(&self) -> Option<&'a [f32]> {
        let len = self.rows * self.cols;
        let dense = self.col_stride == 1 && self.row_stride == self.cols as isize;
        (dense || len == 0).then(|| &self.data[self.offset..self.offset + len])
    }

    /// The transpose as a dense row-major matrix `[cols, rows]` (a copy): a product's right
    /// operand that `gemm` then packs from contiguous rows instead of gathering strided values
    /// for every block of rows it is used with.
    pub(crate) fn transposed(&self) -> Vec<f32> {
        // In 16 × 16 tiles: the tile's source lines stay in L1 while its output runs are written;
        // runs of 16 output rows in parallel (the copy comes before any block of the backward
        // that uses it can start).
        const TILE: usize = 16;
        let (rows, cols) = (self.rows, self.cols);
        let mut out = vec![0.0f32; rows * cols];
        if rows == 0 {
            return out;
        }
        let dense = self.row_major_values();
        out.par_chunks_mut(TILE * rows)
            .enumerate()
            .for_each(|(tile, run_rows)| {
                let c0 = tile * TILE;
                let width = run_rows.len() / rows;
                for r0 in (0..rows).step_by(TILE) {
                    let r1 = (r0 + TILE).min(rows);
                    match dense {
                        // A row-major source: each source row's run of the tile read at once.
                        Some(v) => {
                            for r in r0..r1 {
                                let run = &v[r * cols + c0..][..width];
                                for (line, &x) in run_rows.chunks_exact_mut(rows).zip(run) {
                                    line[r] = x;
                                }
                            }
                        }
                        None => {
                            for (c, line) in (c0..).zip(run_rows.chunks_exact_mut(rows)) {
                                for (r, o) in (r0..r1).zip(&mut line[r0..r1]) {
                                    *o = self.at(r, c);
                                }
                            }
                        }
                    }
                }
            });
        out
    }

    /// Element `(r, c)` (inside the view: checked by [`MatRef::new`]).
    fn at(&self, r: usize, c: usize) -> f32 {
        let at = self.offset as isize + r as isize * self.row_stride + c as isize * self.col_stride;
        self.data[at as usize]
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The transposed view (no copy).
    pub(crate) fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// Rows `first..first + rows` (no copy).
    pub(crate) fn row_range(self, first: usize, rows: usize) -> Self {
        assert!(
            first + rows <= self.rows,
            "rows {first}..{} of {}",
            first + rows,
            self.rows
        );
        if rows == 0 {
            return Self { rows: 0, ..self };
        }
        // In bounds: row `first` is a row of the checked view.
        let offset = (self.offset as isize + first as isize * self.row_stride) as usize;
        Self {
            offset,
            rows,
            ..self
        }
    }
}

/// `a · b` into the row-major `a.rows × b.cols` matrix `dst`, overwriting it, or (`accumulate`)
/// added onto what it holds (`dst + a · b`, the product summed first). One thread: the callers
/// run one block of rows per task.
pub(crate) fn gemm_into(a: MatRef<'_>, b: MatRef<'_>, dst: &mut [f32], accumulate: bool) {
    if accumulate {
        check_product(a, b, dst.len());
        // SAFETY: `dst` holds the `a.rows × b.cols` values (checked), initialised.
        unsafe { gemm_raw(a, b, dst.as_mut_ptr(), true) };
    } else {
        gemm_write(a, b, as_slots(dst));
    }
}

/// `a · b` written into the row-major `a.rows × b.cols` slots `dst`, which the product does not
/// read first: the initialised values.
pub(crate) fn gemm_write<'d>(
    a: MatRef<'_>,
    b: MatRef<'_>,
    dst: &'d mut [MaybeUninit<f32>],
) -> &'d mut [f32] {
    check_product(a, b, dst.len());
    if a.cols == 0 {
        return zeroed(dst);
    }
    // SAFETY: `dst` holds the `a.rows × b.cols` slots (checked); with `accumulate` false the
    // product writes each of them without reading it first (gemm's `read_dst`), so all are
    // initialised after the call.
    unsafe {
        gemm_raw(a, b, dst.as_mut_ptr().cast::<f32>(), false);
        assume_init(dst)
    }
}

/// Panics unless `a · b` is defined and has `len` values.
fn check_product(a: MatRef<'_>, b: MatRef<'_>, len: usize) {
    assert_eq!(a.cols, b.rows, "product widths");
    assert_eq!(len, a.rows * b.cols, "product output size");
}

/// The one `gemm` call.
///
/// # Safety
/// `dst` points at `a.rows × b.cols` writable f32 slots (row-major, nothing else borrowing
/// them), initialised when `accumulate`.
unsafe fn gemm_raw(a: MatRef<'_>, b: MatRef<'_>, dst: *mut f32, accumulate: bool) {
    if a.rows == 0 || b.cols == 0 || a.cols == 0 {
        return;
    }
    // SAFETY: `MatRef::new` checked that every element of `a` and `b` (offset plus any row and
    // column steps within their shapes) lies inside their borrowed slices, which outlive the
    // call; `dst` is as the caller promised, written row-major (column stride 1, row stride
    // `b.cols`), read first only when `accumulate`.
    unsafe {
        gemm::gemm(
            a.rows,
            b.cols,
            a.cols,
            dst,
            1,
            b.cols as isize,
            accumulate,
            a.data.as_ptr().add(a.offset),
            a.col_stride,
            a.row_stride,
            b.data.as_ptr().add(b.offset),
            b.col_stride,
            b.row_stride,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Blocks of rows [`block_rows`] aims for at least.
const MIN_BLOCKS: usize = 4;

/// Rows per block for a kernel over `n` rows: at most `max`, and fewer where that leaves at
/// least [`MIN_BLOCKS`] blocks of ≥ 64 rows, so that a small batch still splits evenly between
/// the threads (730 rows in blocks of 256 would keep one of two threads idle a third of the
/// time). Not more blocks than that: each `gemm` call packs the weight again. A function of `n`
/// alone: sums per block do not depend on the number of threads.
pub(crate) fn block_rows(n: usize, max: usize) -> usize {
    n.div_ceil(MIN_BLOCKS).clamp(64.min(max), max)
}

/// The row blocks `(first, rows)` of `m` rows cut into blocks of `block` rows: the last block
/// takes the remainder, except that a remainder of fewer than 32 rows joins the block before
/// it. `gemm` multiplies a few rows with other kernels (matrix-vector, small products of ≤ 256
/// outputs) that sum in another order than its general kernel; with this every block of a
/// product of width ≥ 8 runs the general kernel, so a row's value does not depend on where the
/// blocks fall.
pub fn row_blocks(m: usize, block: usize) -> Vec<(usize, usize)> {
    const MIN_TAIL: usize = 32;
    let mut blocks: Vec<(usize, usize)> = (0..m.div_ceil(block))
        .map(|b| (b * block, block.min(m - b * block)))
        .collect();
    if blocks.len() >= 2 {
        let (_, tail) = blocks[blocks.len() - 1];
        if tail < MIN_TAIL {
            blocks.pop();
            let last = blocks.len() - 1;
            blocks[last].1 += tail;
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_outside_their_data_are_refused() {
        let v = vec![0.0f32; 12];
        assert!(MatRef::new(&v, 0, [3, 4], [4, 1]).is_some());
        assert!(MatRef::new(&v, 1, [3, 4], [4, 1]).is_none());
        assert!(MatRef::new(&v, 0, [4, 3], [1, 4]).is_some());
        assert!(MatRef::new(&v, 11, [3, 4], [-4, -1]).is_some());
        assert!(MatRef::new(&v, 10, [3, 4], [-4, -1]).is_none());
        assert!(MatRef::new(&v, 99, [0, 4], [4, 1]).is_some());
    }

    #[test]
    fn products_of_strided_views_are_exact_on_small_integers() {
        // a [2, 3] as the transpose of a column-major [3, 2]; b [3, 2] row-major.
        let a_t = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let a = MatRef::row_major(&a_t, 3, 2).t();
        let b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        let b = MatRef::row_major(&b, 3, 2);
        let mut dst = vec![10.0f32; 4];
        gemm_into(a, b, &mut dst, true);
        // aᵀ rows: [1, 3, 5] and [2, 4, 6].
        assert_eq!(dst, vec![16.0, 18.0, 18.0, 20.0]);
        gemm_into(a.row_range(1, 1), b, &mut dst[..2], false);
        assert_eq!(dst[..2], [8.0, 10.0]);
    }

    #[test]
    fn small_batches_get_at_least_four_blocks() {
        assert_eq!(block_rows(730, 256), 183);
        assert_eq!(block_rows(5865, 256), 256);
        assert_eq!(block_rows(100, 256), 64);
        assert_eq!(block_rows(100, 16), 16);
    }

    #[test]
    fn transposes_of_strided_views_are_their_elements() {
        let v: Vec<f32> = (0..40 * 33).map(|k| k as f32).collect();
        let m = MatRef::row_major(&v, 40, 33);
        let t = m.transposed();
        for r in 0..40 {
            for c in 0..33 {
                assert_eq!(t[c * 40 + r], v[r * 33 + c]);
            }
        }
        assert_eq!(m.t().transposed(), v);
    }

    #[test]
    fn no_short_last_block() {
        assert_eq!(row_blocks(0, 256), vec![]);
        assert_eq!(row_blocks(7, 256), vec![(0, 7)]);
        assert_eq!(row_blocks(513, 256), vec![(0, 256), (256, 257)]);
        assert_eq!(row_blocks(600, 256), vec![(0, 256), (256, 256), (512, 88)]);
    }
}
