//! Full-size outputs that blocks of rows fill, without a zero fill of the whole buffer first.
//!
//! A zero fill up front is a pass over megabytes before any block starts (the first touch of
//! every page, 6 % of a training step's samples when measured); instead each block writes its
//! own rows, once: through `MaybeUninit::write`, by a product that does not read its output
//! (`crate::mat::gemm_write`), or zeroed with [`zeroed`] first where a kernel adds onto them.

use std::mem::MaybeUninit;

/// An output of `len` f32 values, not yet initialised, to be split between blocks of rows.
pub(crate) struct RowsOut {
    v: Vec<f32>,
    len: usize,
}

impl RowsOut {
    pub(crate) fn new(len: usize) -> Self {
        let mut v = Vec::with_capacity(len);
        if cfg!(test) {
            // NaN where nothing was written yet: a kernel that reads an element before writing
            // it fails its tests.
            v.spare_capacity_mut()[..len].fill(MaybeUninit::new(f32::NAN));
        }
        Self { v, len }
    }

    /// The elements, not yet initialised, to be split between the blocks.
    pub(crate) fn parts(&mut self) -> &mut [MaybeUninit<f32>] {
        &mut self.v.spare_capacity_mut()[..self.len]
    }

    /// The values, once every element of [`RowsOut::parts`] has been written.
    ///
    /// # Safety
    /// Every element of [`RowsOut::parts`] has been initialised.
    pub(crate) unsafe fn into_vec(mut self) -> Vec<f32> {
        // SAFETY: the caller initialised all `len` elements, within the capacity.
        unsafe { self.v.set_len(self.len) };
        self.v
    }

    /// All zeros (when no block runs).
    pub(crate) fn zeros(mut self) -> Vec<f32> {
        zeroed(self.parts());
        // SAFETY: just initialised, every element.
        unsafe { self.into_vec() }
    }
}

/// `len` slots of a task's scratch to be written before they are read (its old values
/// dropped, its allocation kept), with no zero fill: for a block's `4d`-wide hidden rows that
/// would be a pass over hundreds of kilobytes before every product.
pub(crate) fn scratch_slots(scratch: &mut Vec<f32>, len: usize) -> &mut [MaybeUninit<f32>] {
    scratch.clear();
    scratch.reserve(len);
    let slots = &mut scratch.spare_capacity_mut()[..len];
    if cfg!(test) {
        // As in `RowsOut::new`: a read before the write fails the tests.
        slots.fill(MaybeUninit::new(f32::NAN));
    }
    slots
}

/// `s` set to zeros, as initialised f32.
pub(crate) fn zeroed(s: &mut [MaybeUninit<f32>]) -> &mut [f32] {
    s.fill(MaybeUninit::new(0.0));
    // SAFETY: every element was just written; `MaybeUninit<f32>` has the layout of `f32`.
    unsafe { &mut *(std::ptr::from_mut(s) as *mut [f32]) }
}

/// `s` once every element has been written.
///
/// # Safety
/// Every element of `s` is initialised.
pub(crate) unsafe fn assume_init(s: &mut [MaybeUninit<f32>]) -> &mut [f32] {
    // SAFETY: initialised (the caller's promise); `MaybeUninit<f32>` has the layout of `f32`.
    unsafe { &mut *(std::ptr::from_mut(s) as *mut [f32]) }
}

/// Initialised values seen as slots to overwrite (for a kernel that writes its output through
/// `MaybeUninit`): only `MaybeUninit::write` of f32 values is done through it.
pub(crate) fn as_slots(s: &mut [f32]) -> &mut [MaybeUninit<f32>] {
    // SAFETY: `MaybeUninit<f32>` has the layout of `f32`, and every f32 is a valid value of it;
    // the callers only write initialised values through the result.
    unsafe { &mut *(std::ptr::from_mut(s) as *mut [MaybeUninit<f32>]) }
}

/// `slots` cut into the rows of each block `(first, rows)` in order, `width` values a row
/// (empty pieces where `width` is 0): `(first, rows, its slots)`.
pub(crate) fn block_slots<'a>(
    mut slots: &'a mut [MaybeUninit<f32>],
    blocks: &[(usize, usize)],
    width: usize,
) -> Vec<(usize, usize, &'a mut [MaybeUninit<f32>])> {
    blocks
        .iter()
        .map(|&(first, m)| {
            let (mine, rest) = std::mem::take(&mut slots).split_at_mut(m * width);
            slots = rest;
            (first, m, mine)
        })
        .collect()
}
