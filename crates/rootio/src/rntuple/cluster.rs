//! A leaf's cluster once loaded: where each entry's values are, and the values, as pages.

use std::sync::Arc;

use super::decode::Direct;

/// One cluster of a leaf: where each entry's values are, and the values.
pub(super) struct Loaded {
    pub(super) first_entry: u64,
    /// `[entries + 1]`: entry i's values are values `bounds[i]..bounds[i + 1]` (shared by
    /// the leaves of one collection).
    pub(super) bounds: Arc<Vec<usize>>,
    pub(super) values: ClusterValues,
}

/// A leaf's values in one cluster, as its pages: zeros before a deferred column's first
/// element, then each page from the element it starts at. A page of a [`Direct`] decoding is
/// kept as stored (uncompressed) and decoded a chunk's range at a time into the chunk's
/// big-endian numbers, one pass; any other is decoded into big-endian numbers as it is loaded.
pub(super) struct ClusterValues {
    pub(super) direct: Option<Direct>,
    /// Each page's first element (counted from the cluster's first), elements and bytes.
    pub(super) pages: Vec<(usize, usize, Arc<Vec<u8>>)>,
}

impl ClusterValues {
    /// Big-endian numbers already decoded, `n` of them.
    pub(super) fn decoded(bytes: Vec<u8>, n: usize) -> ClusterValues {
        ClusterValues {
            direct: None,
            pages: vec![(0, n, Arc::new(bytes))],
        }
    }

    /// Elements `lo..hi` as big-endian numbers of `size` bytes into `dst` (zeroed, exactly
    /// their length): elements no page holds stay zeros.
    pub(super) fn write(&self, lo: usize, hi: usize, size: usize, dst: &mut [u8]) {
        let first = self.pages.partition_point(|&(start, n, _)| start + n <= lo);
        for (start, n, bytes) in &self.pages[first..] {
            if *start >= hi {
                break;
            }
            let (from, to) = (lo.max(*start), hi.min(start + n));
            let d = &mut dst[(from - lo) * size..(to - lo) * size];
            match self.direct {
                Some(direct) => direct.decode(bytes, *n, from - start, to - start, d),
                None => d.copy_from_slice(&bytes[(from - start) * size..(to - start) * size]),
            }
        }
    }
}

/// The entry after the last of cluster `l`.
pub(super) fn l_end(l: &Loaded) -> u64 {
    l.first_entry + (l.bounds.len() as u64 - 1)
}
