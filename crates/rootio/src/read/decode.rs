//! An entry's bytes decoded into values in each [`Layout`]: fixed arrays, jagged arrays,
//! `std::vector`s, pointer arrays and split collections' bits, packed reals unpacked.

use crate::cursor::Cursor;
use crate::error::BufError;

use crate::tree::entry_offsets;

use super::interpretation::{Interpretation, Layout};
use super::{Basket, BranchData, Offsets};

/// Appends the values and per-entry counts of `basket` to `out`; `counts` are the values per
/// entry from the counter, from the basket's first entry on, where the basket cannot say.
/// Gives how many bytes at the front of `out`'s bytes are not values: the key of a basket
/// stored uncompressed, whose record became `out`'s bytes (see [`append`]).
pub(super) fn decode(
    basket: &mut Basket,
    it: Interpretation,
    counts: Option<&[u32]>,
    out: &mut BranchData,
) -> Result<usize, BufError> {
    let entries = Entries {
        it,
        size: it.raw_size(),
        counts,
    };
    let start = basket.start;
    let offsets = match basket.offsets.take() {
        Some(Offsets::Table { border, keylen }) => {
            let table = basket.data.get(start + border + 4..).unwrap_or(&[]);
            if it.layout == Layout::Jagged && it.packing.is_none() {
                let counted = TableCounts {
                    table,
                    entries: basket.entries,
                    keylen,
                    border,
                    size: entries.size,
                    counts: &mut out.counts,
                };
                if let Some(first) = crate::simd::wide(counted) {
                    basket.data.truncate(start + border);
                    return Ok(append(out, &mut basket.data, start + first..start + border));
                }
            }
            let starts = entry_offsets(table, basket.entries, keylen, border);
            basket.data.truncate(start + border);
            Some(starts)
        }
        Some(Offsets::Starts(starts)) => Some(starts),
        None => None,
    };
    let offsets = match (offsets, it.layout) {
        // Fixed-size entries need no offsets: unusable ones are not read (as uproot reads).
        (o, Layout::Fixed(_)) => o.and_then(Result::ok),
        (o, _) => o.transpose().map_err(BufError::Bad)?,
    };
    if let (None, Layout::Fixed(len), None) = (&offsets, it.layout, it.packing) {
        fixed_entries(&basket.data[start..], len * entries.size, basket.entries)?;
        out.counts
            .extend(std::iter::repeat_n(len as u32, basket.entries));
        let all = start..basket.data.len();
        return Ok(append(out, &mut basket.data, all));
    }
    // The paths below read the entries' bytes from the front of `data`.
    basket.data.drain(..start);
    basket.start = 0;
    match (&offsets, it.layout) {
        (Some(o), Layout::Jagged) if it.packing.is_none() => entries.plain_jagged(basket, o, out),
        (Some(o), _) => entries.by_offsets(basket, o, out).map(|()| 0),
        (None, Layout::Fixed(len)) => {
            let per = fixed_entries(&basket.data, len * entries.size, basket.entries)?;
            for (k, b) in basket.data.chunks_exact(per).enumerate() {
                entries.push(k, b, out)?;
            }
            Ok(0)
        }
        (None, Layout::Vector) => entries.vectors(basket, out).map(|()| 0),
        (None, Layout::Jagged | Layout::Pointer) => entries.by_counts(basket, out).map(|()| 0),
        (None, Layout::JaggedBits) => Err(BufError::Bad(
            "unsupported: TObject bits of a collection without entry offsets".into(),
        )),
    }
}

/// Plain jagged values' counts straight from a basket's `table` of entry starts (see
/// [`Offsets::Table`]), for values of `size` bytes (a power of two), with one check for all:
/// no starts built, no branch per entry; run through [`crate::simd::wide`]. Appends the counts
/// to `counts` and gives where the first entry starts; where any start is bad, appends nothing
/// and gives `None`, for the general path to name it.
struct TableCounts<'a> {
    table: &'a [u8],
    entries: usize,
    keylen: usize,
    border: usize,
    size: usize,
    counts: &'a mut Vec<u32>,
}

impl pulp::WithSimd for TableCounts<'_> {
    type Output = Option<usize>;
    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Option<usize> {
        let starts = self.table.as_chunks::<4>().0.get(..self.entries)?;
        let key = i64::try_from(self.keylen).ok()?;
        let end = i64::try_from(self.border).ok()?;
        let at = |c: &[u8; 4]| i64::from(i32::from_be_bytes(*c)) - key;
        let (first, last) = (at(starts.first()?), at(starts.last()?));
        let (mask, shift) = (
            i64::try_from(self.size).ok()? - 1,
            self.size.trailing_zeros(),
        );
        let bad = |d: i64| (d < 0) | (d & mask != 0);
        let steps = || starts.iter().zip(&starts[1..]).map(|(a, b)| at(b) - at(a));
        // In order from after the key to the border, each a whole number of values.
        if (first < 0) | bad(end - last) | steps().fold(false, |any, d| any | bad(d)) {
            return None;
        }
        self.counts.extend(steps().map(|d| (d >> shift) as u32));
        self.counts.push(((end - last) >> shift) as u32);
        usize::try_from(first).ok()
    }
}

/// Appends `data[range]` to `out`'s bytes: where the range runs to `data`'s end and `out`
/// holds none yet, `data` is moved, not copied, and what comes before the range stays in
/// front (a basket's values are then copied once, into the chunk that takes them). Gives how
/// many bytes at the front of `out`'s bytes are not values.
fn append(out: &mut BranchData, data: &mut Vec<u8>, range: std::ops::Range<usize>) -> usize {
    if out.bytes.is_empty() && range.end == data.len() {
        out.bytes = std::mem::take(data);
        range.start
    } else {
        out.bytes.extend_from_slice(&data[range]);
        0
    }
}

/// How one branch's entries decode: its interpretation, the bytes of a value on disk, and the
/// counter branch's values per entry (where there is one).
struct Entries<'a> {
    it: Interpretation,
    size: usize,
    counts: Option<&'a [u32]>,
}

impl Entries<'_> {
    /// Values of the basket's entry `k`, from the counter branch.
    fn count_at(&self, k: usize) -> Result<usize, BufError> {
        self.counts
            .and_then(|c| c.get(k))
            .map(|&n| n as usize)
            .ok_or_else(|| BufError::Bad(format!("no count for the basket's entry {k}")))
    }

    /// The values of entry `k` (its `bytes` in the basket, headers included), unpacked into
    /// `out` with their count.
    fn push(&self, k: usize, bytes: &[u8], out: &mut BranchData) -> Result<(), BufError> {
        let (it, size) = (self.it, self.size);
        let values: std::borrow::Cow<'_, [u8]> = match it.layout {
            Layout::Vector => vector_body(bytes, size)?.into(),
            Layout::JaggedBits => bits(bytes, self.count_at(k)?)?.into(),
            Layout::Pointer => bytes
                .get(1..)
                .ok_or_else(|| BufError::Bad("a pointer array's entry without its byte".into()))?
                .into(),
            _ => bytes.into(),
        };
        if !values.len().is_multiple_of(size) {
            return Err(BufError::Bad(format!(
                "entry of {} bytes is not a whole number of {}",
                values.len(),
                it.number.cpp()
            )));
        }
        if let Layout::Fixed(len) = it.layout
            && values.len() != len * size
        {
            return Err(BufError::Bad(format!(
                "entry of {} bytes, expected {len} × {}",
                values.len(),
                it.number.cpp()
            )));
        }
        match it.packing {
            None => out.bytes.extend_from_slice(&values),
            Some(p) => {
                for raw in values.chunks_exact(size) {
                    p.unpack(raw, it.number, &mut out.bytes);
                }
            }
        }
        out.counts.push((values.len() / size) as u32);
        Ok(())
    }

    /// Plain values with entry offsets: one copy of the basket's values, counts from the
    /// offsets (each entry a whole number of values, in order, inside the data).
    fn plain_jagged(
        &self,
        basket: &mut Basket,
        offsets: &[usize],
        out: &mut BranchData,
    ) -> Result<usize, BufError> {
        let (data, size) = (&basket.data, self.size);
        check_offsets(offsets, basket.entries)?;
        out.counts.reserve(basket.entries);
        // A value's size is a power of two: a mask and a shift, not a division per entry.
        debug_assert!(size.is_power_of_two());
        let (mask, shift) = (size - 1, size.trailing_zeros());
        for w in offsets.windows(2) {
            if w[1] < w[0] || w[1] > data.len() || (w[1] - w[0]) & mask != 0 {
                return Err(BufError::Bad(format!(
                    "entry offsets {}..{}: not whole {} values inside the basket's {} bytes",
                    w[0],
                    w[1],
                    self.it.number.cpp(),
                    data.len()
                )));
            }
            out.counts.push(((w[1] - w[0]) >> shift) as u32);
        }
        Ok(append(
            out,
            &mut basket.data,
            offsets[0]..offsets[basket.entries],
        ))
    }

    /// Entries cut at the basket's entry offsets, each decoded on its own.
    fn by_offsets(
        &self,
        basket: &Basket,
        offsets: &[usize],
        out: &mut BranchData,
    ) -> Result<(), BufError> {
        check_offsets(offsets, basket.entries)?;
        for (k, w) in offsets.windows(2).enumerate() {
            let b = basket.data.get(w[0]..w[1]).ok_or_else(|| {
                BufError::Bad(format!(
                    "entry offsets {}..{} outside the basket",
                    w[0], w[1]
                ))
            })?;
            self.push(k, b, out)?;
        }
        Ok(())
    }

    /// `std::vector`s without entry offsets (kGenerateOffsetMap): each entry's byte count
    /// gives its length.
    fn vectors(&self, basket: &Basket, out: &mut BranchData) -> Result<(), BufError> {
        let data = &basket.data;
        let mut c = Cursor::new(data);
        for k in 0..basket.entries {
            let start = c.pos();
            let v = c.versioned()?;
            let end = v
                .end
                .ok_or_else(|| BufError::Bad("vector entry without a byte count".into()))?;
            self.push(k, &data[start..end], out)?;
            c.seek(end)?;
        }
        Ok(())
    }

    /// Arrays without entry offsets: the counter branch gives each entry's length (a pointer
    /// array's entry has one byte before its values).
    fn by_counts(&self, basket: &Basket, out: &mut BranchData) -> Result<(), BufError> {
        let data = &basket.data;
        let header = usize::from(self.it.layout == Layout::Pointer);
        let mut at = 0usize;
        for k in 0..basket.entries {
            let len = self
                .count_at(k)?
                .checked_mul(self.size)
                .and_then(|n| n.checked_add(header))
                .ok_or_else(|| BufError::Bad("count too large".into()))?;
            let b = data
                .get(at..at + len)
                .ok_or_else(|| BufError::Bad(format!("entry {k} runs past the basket's data")))?;
            self.push(k, b, out)?;
            at += len;
        }
        if at != data.len() {
            return Err(BufError::Bad(format!(
                "the counts cover {at} of the basket's {} bytes",
                data.len()
            )));
        }
        Ok(())
    }
}

/// A `std::vector` entry's values after its 10-byte header (byte count, version, size),
/// checked against the size.
fn vector_body(bytes: &[u8], size: usize) -> Result<&[u8], BufError> {
    let body = bytes.get(10..).ok_or_else(|| {
        BufError::Bad(format!(
            "vector entry of {} bytes (header is 10)",
            bytes.len()
        ))
    })?;
    let n = u32::from_be_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]) as usize;
    if n.checked_mul(size) != Some(body.len()) {
        return Err(BufError::Bad(format!(
            "vector of {n} values in {} bytes",
            body.len()
        )));
    }
    Ok(body)
}

/// A basket's entry offsets hold one more than its entries.
fn check_offsets(offsets: &[usize], entries: usize) -> Result<(), BufError> {
    if offsets.len() != entries + 1 {
        return Err(BufError::Bad(
            "entry offsets do not match the entries".into(),
        ));
    }
    Ok(())
}

/// Checks `data` holds `entries` entries of `per` bytes each; returns `per`.
fn fixed_entries(data: &[u8], per: usize, entries: usize) -> Result<usize, BufError> {
    if data.len() != per * entries {
        return Err(BufError::Bad(format!(
            "{} bytes for {entries} entries of {per} bytes",
            data.len()
        )));
    }
    Ok(per)
}

/// The `fBits` of `n` objects: each a `u32`, followed by a 2-byte process id when the object
/// is referenced (`kIsReferenced`); returns the `u32`s.
fn bits(bytes: &[u8], n: usize) -> Result<Vec<u8>, BufError> {
    let mut c = Cursor::new(bytes);
    let mut out = Vec::with_capacity(4 * n);
    for _ in 0..n {
        let b = c.u32()?;
        out.extend_from_slice(&b.to_be_bytes());
        if b & (1 << 4) != 0 {
            c.skip(2)?;
        }
    }
    if c.pos() != bytes.len() {
        return Err(BufError::Bad(format!(
            "{n} objects' bits in {} bytes, {} left over",
            bytes.len(),
            bytes.len() - c.pos()
        )));
    }
    Ok(out)
}
