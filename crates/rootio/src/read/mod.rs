//! A branch's values: its baskets read, decompressed and decoded into typed numbers with a
//! count per entry. What a branch's type means (number type, layout, packing) is
//! `interpretation.rs`; how an entry's bytes decode in each layout, `decode.rs`.

mod decode;
mod interpretation;
mod values;

pub use interpretation::{Interpretation, Layout, Number, interpret};
pub use values::{BranchData, Values};

use values::Part;

use std::sync::Arc;

use crate::compress::RawBlock;
use crate::cursor::Cursor;
use crate::error::RootError;
use crate::file::RootFile;
use crate::tree::{BasketHeader, BranchInfo, TreeInfo, basket_header};
use decode::decode;

/// Reads a branch forward, a basket at a time: memory holds the entries taken and the rest of
/// the last basket decoded.
pub struct BranchCursor<'f> {
    file: &'f RootFile,
    tree: &'f TreeInfo,
    branch: &'f BranchInfo,
    interpretation: Interpretation,
    /// Written baskets first, then the embedded ones.
    next_basket: usize,
    /// Values per entry from the counter branch, read when a basket needs them.
    counts: Option<Vec<u32>>,
    /// Decoded entries not yet taken, from entry `buffer_entry` on: each basket's as decoded,
    /// the first from its entry `front.0` (value `front.1`) on.
    pieces: std::collections::VecDeque<Piece>,
    front: (usize, usize),
    /// Entries in `pieces` not yet taken.
    buffered: usize,
    buffer_entry: u64,
    /// Written baskets already read and decompressed (by [`crate::ColumnReader`], on other
    /// threads), in basket order, each with its index.
    prefetched: std::collections::VecDeque<(usize, Basket)>,
    /// The first written basket not yet prefetched or decoded.
    fetched_until: usize,
    /// [`BranchInfo::normal_baskets`].
    normal: usize,
}

impl BranchCursor<'_> {
    /// The next `n` entries' values (fewer at the branch's end) in memory of their own: moved
    /// where they are exactly one basket's, else copied once out of the baskets.
    pub fn take(&mut self, n: usize) -> Result<BranchData, RootError> {
        self.take_values(n).map(Values::into_data)
    }

    /// The next `n` entries' values (fewer at the branch's end) where they lie, in the baskets
    /// they were decoded into: nothing is copied.
    pub fn take_values(&mut self, n: usize) -> Result<Values, RootError> {
        while self.buffered < n && self.decode_next()? {}
        let n = n.min(self.buffered);
        self.buffered -= n;
        self.buffer_entry += n as u64;
        let size = self.interpretation.number.size();
        let mut taken = Values {
            interpretation: self.interpretation,
            parts: Vec::new(),
            counts: Vec::new(),
        };
        let mut left = n;
        while left > 0 {
            let Some(piece) = self.pieces.front() else {
                break;
            };
            let (entry, value) = self.front;
            let k = left.min(piece.counts.len() - entry);
            let counts = &piece.counts[entry..entry + k];
            let whole = entry + k == piece.counts.len();
            // To the piece's end: the values left in it, without a sum over its entries.
            let values = if whole {
                (piece.bytes.len() - piece.skip) / size - value
            } else {
                counts.iter().map(|&c| c as usize).sum()
            };
            debug_assert_eq!(values, counts.iter().map(|&c| c as usize).sum::<usize>());
            // A take of exactly one piece moves its counts; others copy them.
            let alone = entry == 0 && whole && k == n;
            if !alone {
                if taken.counts.is_empty() {
                    taken.counts.reserve_exact(n);
                }
                taken.counts.extend_from_slice(counts);
            }
            let at = piece.skip + value * size;
            let range = at..at + values * size;
            left -= k;
            // A piece taken to its end goes with the take; the last is kept from where the
            // take ended, and shared.
            let bytes = if whole {
                self.front = (0, 0);
                self.pieces.pop_front().map(|p| {
                    if alone {
                        taken.counts = p.counts;
                    }
                    p.bytes
                })
            } else {
                self.front = (entry + k, value + values);
                self.pieces.front().map(|p| Arc::clone(&p.bytes))
            };
            if let Some(bytes) = bytes.filter(|_| !range.is_empty()) {
                taken.parts.push(Part { bytes, range });
            }
        }
        Ok(taken)
    }

    /// Drops entries up to `entry`.
    fn skip_to(&mut self, entry: u64) -> Result<(), RootError> {
        while self.buffer_entry < entry {
            let n = usize::try_from(entry - self.buffer_entry)
                .unwrap_or(usize::MAX)
                .min(1 << 16);
            if self.take_values(n)?.counts.is_empty() {
                break;
            }
        }
        Ok(())
    }

    /// The written baskets, not yet read, that the next `n` entries need: what
    /// [`crate::ColumnReader`] reads and decompresses ahead, on several threads.
    pub(crate) fn baskets_for(&self, n: usize) -> Vec<usize> {
        let branch = self.branch;
        let end = self.buffer_entry.saturating_add(n as u64);
        let mut out = Vec::new();
        for k in self.next_basket.max(self.fetched_until)..self.normal {
            let start = branch
                .basket_entry
                .get(k)
                .map_or(u64::MAX, |&e| u64::try_from(e).unwrap_or(0));
            if start >= end {
                break;
            }
            if branch.basket_bytes.get(k).is_some_and(|&b| b > 0) {
                out.push(k);
            }
        }
        out
    }

    /// Written basket `k` read and decompressed (safe on any thread).
    pub(crate) fn fetch(&self, k: usize) -> Result<Basket, RootError> {
        let place = format!("basket {k} of branch '{}'", self.branch.name);
        self.file.basket(self.branch, k, &place)
    }

    /// Takes baskets read ahead by [`BranchCursor::fetch`], in basket order. A basket that
    /// failed is not taken: it is read again when its turn comes, and fails there by name.
    pub(crate) fn deliver(&mut self, baskets: Vec<(usize, Result<Basket, RootError>)>) {
        for (k, basket) in baskets {
            self.fetched_until = self.fetched_until.max(k + 1);
            if let Ok(b) = basket {
                self.prefetched.push_back((k, b));
            }
        }
    }

    /// The first entry not yet taken.
    pub(crate) fn next_entry(&self) -> u64 {
        self.buffer_entry
    }

    /// Decodes the next basket onto the buffer; false when there is none.
    fn decode_next(&mut self) -> Result<bool, RootError> {
        let (file, branch, it) = (self.file, self.branch, self.interpretation);
        let k = self.next_basket;
        let normal = self.normal;
        let (place, mut basket) = if k < normal {
            let place = format!("basket {k} of branch '{}'", branch.name);
            if branch.basket_bytes.get(k) == Some(&0) {
                // A basket of no bytes (written for no entries): nothing to decode, unless
                // the branch says entries are in it.
                let start = branch.basket_entry.get(k).copied().unwrap_or(0);
                let stop = branch.basket_entry.get(k + 1).copied().unwrap_or(start);
                if stop > start {
                    return Err(file.corrupt(
                        &place,
                        format!("a basket of 0 bytes said to hold entries {start} to {stop}"),
                    ));
                }
                self.next_basket += 1;
                return Ok(true);
            }
            while self.prefetched.front().is_some_and(|(i, _)| *i < k) {
                self.prefetched.pop_front();
            }
            let ahead = match self.prefetched.front() {
                Some((i, _)) if *i == k => self.prefetched.pop_front().map(|(_, b)| b),
                _ => None,
            };
            let b = match ahead {
                Some(b) => b,
                None => file.basket(branch, k, &place)?,
            };
            (place, b)
        } else if let Some(b) = branch.embedded.get(k - normal) {
            let place = format!("embedded basket {} of branch '{}'", k - normal, branch.name);
            let b = Basket {
                data: b.data.clone(),
                start: 0,
                offsets: b.offsets.clone().map(Offsets::Starts),
                entries: b.entries,
            };
            (place, b)
        } else {
            return Ok(false);
        };
        self.next_basket += 1;
        // The counter is read only when a basket cannot say where its entries start.
        let needs_counts = it.layout == Layout::JaggedBits
            || (basket.offsets.is_none() && matches!(it.layout, Layout::Jagged | Layout::Pointer));
        if needs_counts && self.counts.is_none() {
            let name = counter_of(branch, it).ok_or_else(|| {
                file.corrupt(&place, "entries of unknown length (no offsets, no counter)")
            })?;
            self.counts = Some(file.counts_of(self.tree, &name, branch)?);
        }
        let first = self.buffer_entry + self.buffered as u64;
        let counts = self.counts.as_deref().map(|c| {
            c.get(usize::try_from(first).unwrap_or(usize::MAX)..)
                .unwrap_or(&[])
        });
        let mut data = BranchData {
            interpretation: it,
            bytes: Vec::new(),
            counts: Vec::new(),
        };
        let skip =
            decode(&mut basket, it, counts, &mut data).map_err(|e| file.corrupt(&place, e))?;
        if !data.counts.is_empty() {
            self.buffered += data.counts.len();
            self.pieces.push_back(Piece {
                bytes: Arc::new(data.bytes),
                skip,
                counts: data.counts,
            });
        }
        Ok(true)
    }
}

/// Prepares the next `n` entries of every cursor for their takes, on up to `threads` threads,
/// and gives the stored bytes each cursor's baskets for them hold (what its take costs; none
/// for one thread reading a local file, which plans nothing).
///
/// Each cursor reads its own baskets as it decodes them, while their bytes are in the cache,
/// the cursors shared among the threads the largest first; a remote file's reads are planned
/// first. Where one cursor holds too much of the chunk for that
/// ([`crate::parallel::each_whole`]), its baskets and every other's are read ahead here as one
/// pool of jobs, the largest first, and handed to their cursors, so that a branch of a few
/// large baskets is spread over the threads.
pub(crate) fn prepare_takes(
    cursors: &mut [&mut BranchCursor<'_>],
    n: usize,
    threads: usize,
) -> Vec<usize> {
    let remote = cursors.first().is_some_and(|c| c.file.is_remote());
    // One thread reading a local file has nothing to plan or share.
    if threads <= 1 && !remote {
        return vec![0; cursors.len()];
    }
    let mut jobs = Vec::new();
    let mut bytes = vec![0usize; cursors.len()];
    for (i, c) in cursors.iter().enumerate() {
        for k in c.baskets_for(n) {
            bytes[i] += usize::try_from(c.branch.basket_bytes[k]).unwrap_or(0);
            jobs.push((i, k));
        }
    }
    let shared: Vec<&BranchCursor<'_>> = cursors.iter().map(|c| &**c).collect();
    // A remote file's baskets are read in few requests: this chunk's, and the next chunks'
    // within the read-ahead window, in entry order.
    if let Some(first) = shared.first()
        && remote
    {
        let mut window: Vec<(u64, u64, usize)> = Vec::new();
        for c in &shared {
            let b = c.branch;
            for k in c.baskets_for(n.saturating_mul(crate::file::AHEAD_CHUNKS)) {
                let (Some(&entry), Some(&seek), Some(&bytes)) = (
                    b.basket_entry.get(k),
                    b.basket_seek.get(k),
                    b.basket_bytes.get(k),
                ) else {
                    continue;
                };
                if let (Ok(entry), Ok(seek), Ok(bytes)) = (
                    u64::try_from(entry),
                    u64::try_from(seek),
                    usize::try_from(bytes),
                ) {
                    window.push((entry, seek, bytes));
                }
            }
        }
        first
            .file
            .prefetch(crate::file::read_ahead_window(window, jobs.len()));
    }
    if crate::parallel::each_whole(&bytes, threads) {
        return bytes;
    }
    // In job order: by cursor, then basket.
    let fetched = crate::parallel::map_largest_first(
        jobs,
        threads,
        |&(i, k)| usize::try_from(shared[i].branch.basket_bytes[k]).unwrap_or(0),
        |(i, k)| (i, k, shared[i].fetch(k)),
    );
    let mut per_cursor: Vec<Vec<(usize, Result<Basket, RootError>)>> =
        (0..cursors.len()).map(|_| Vec::new()).collect();
    for (i, k, b) in fetched {
        per_cursor[i].push((k, b));
    }
    for (c, baskets) in cursors.iter_mut().zip(per_cursor) {
        c.deliver(baskets);
    }
    bytes
}

/// The branch giving `branch`'s values per entry where its baskets cannot: a leaf-count
/// array's counter, a split collection's count branch (`Jet` of `Jet.fBits`).
fn counter_of(branch: &BranchInfo, it: Interpretation) -> Option<String> {
    match (&branch.element, it.layout) {
        (Some(el), Layout::JaggedBits) => el
            .count_branch
            .clone()
            .or_else(|| branch.name.split_once('.').map(|(c, _)| c.to_owned())),
        (_, Layout::Jagged | Layout::Pointer) => {
            branch.leaves.first().and_then(|l| l.count_leaf.clone())
        }
        _ => None,
    }
}

/// A basket's decoded entries: their values' bytes from `skip` on (what comes before is the
/// key of a basket stored uncompressed, read with it and not copied away), shared with the
/// takes that hand them out, and the count of values in each entry.
struct Piece {
    bytes: Arc<Vec<u8>>,
    skip: usize,
    counts: Vec<u32>,
}

/// One basket's entries: their bytes and, when written, where each entry starts.
pub(crate) struct Basket {
    /// The entries' bytes from `start` on; with [`Offsets::Table`], the table of starts after
    /// them.
    data: Vec<u8>,
    /// Where the entries' bytes start in `data`: after the key of a basket stored
    /// uncompressed, handed over in the record read from the file.
    start: usize,
    offsets: Option<Offsets>,
    entries: usize,
}

/// Where a basket's entries start.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Offsets {
    /// As ROOT writes it after the entries' bytes (which end at `border`): a count, then each
    /// entry's start, big-endian, counted from the key's start (`keylen` bytes).
    Table { border: usize, keylen: usize },
    /// Each entry's start in the entries' bytes and their end, or why they cannot be used
    /// ([`crate::tree::entry_offsets`]).
    Starts(Result<Vec<usize>, String>),
}

impl RootFile {
    /// Every value of `branch` of `tree`.
    pub fn read_branch(
        &self,
        tree: &TreeInfo,
        branch: &BranchInfo,
    ) -> Result<BranchData, RootError> {
        let mut cursor = self.branch_cursor(tree, branch, 0)?;
        let all = usize::try_from(branch.entries).unwrap_or(0);
        let data = cursor.take(all)?;
        if data.counts.len() != all || cursor.decode_next()? {
            return Err(self.corrupt(
                &format!("branch '{}'", branch.name),
                format!("its baskets do not hold the branch's {all} entries"),
            ));
        }
        Ok(data)
    }

    /// A cursor over `branch`'s entries from `first_entry` on, decoding one basket at a time.
    pub fn branch_cursor<'f>(
        &'f self,
        tree: &'f TreeInfo,
        branch: &'f BranchInfo,
        first_entry: u64,
    ) -> Result<BranchCursor<'f>, RootError> {
        let interpretation = interpret(branch).map_err(|what| RootError::Unsupported {
            path: self.path().to_owned(),
            place: format!("branch '{}'", branch.name),
            what,
        })?;
        // Baskets that end before `first_entry` are never read.
        let mut next_basket = 0usize;
        let mut at_entry = 0u64;
        let normal = branch.normal_baskets();
        while next_basket < normal {
            let end = branch
                .basket_entry
                .get(next_basket + 1)
                .map_or(u64::MAX, |&e| u64::try_from(e).unwrap_or(0));
            if end > first_entry || end <= at_entry {
                break;
            }
            at_entry = end;
            next_basket += 1;
        }
        let mut cursor = BranchCursor {
            file: self,
            tree,
            branch,
            interpretation,
            next_basket,
            counts: None,
            pieces: std::collections::VecDeque::new(),
            front: (0, 0),
            buffered: 0,
            buffer_entry: at_entry,
            prefetched: std::collections::VecDeque::new(),
            fetched_until: 0,
            normal,
        };
        cursor.skip_to(first_entry)?;
        Ok(cursor)
    }

    /// The per-entry values of the counter `name` (a branch, or the branch holding a leaf of
    /// that name) of `branch`.
    fn counts_of(
        &self,
        tree: &TreeInfo,
        name: &str,
        branch: &BranchInfo,
    ) -> Result<Vec<u32>, RootError> {
        // A branch of that name, or holding a leaf of that name, or (for a collection's
        // `Jet_` leaf) the collection's branch `Jet`.
        let counter = tree
            .branch(name)
            .or_else(|| {
                tree.all_branches()
                    .into_iter()
                    .find(|b| b.leaves.iter().any(|l| l.name == name))
            })
            .or_else(|| tree.branch(name.trim_end_matches('_')))
            .filter(|c| c.name != branch.name)
            .ok_or_else(|| {
                self.corrupt(
                    &format!("branch '{}'", branch.name),
                    format!("its counter '{name}' is not in the tree"),
                )
            })?;
        let data = self.read_branch(tree, counter)?;
        if data.counts.iter().any(|&c| c != 1) {
            return Err(self.corrupt(
                &format!("branch '{}'", branch.name),
                format!("its counter '{}' is not one number per entry", counter.name),
            ));
        }
        (0..data.len())
            .map(|i| {
                let v = data.f64_at(i);
                if v >= 0.0 && v <= f64::from(u32::MAX) && v.fract() == 0.0 {
                    Ok(v as u32)
                } else {
                    Err(self.corrupt(
                        &format!("branch '{}'", counter.name),
                        format!("entry {i}: count {v}"),
                    ))
                }
            })
            .collect()
    }

    /// The written baskets of `branch` as stored, compressed (for timing the codec alone).
    pub fn raw_baskets(&self, branch: &BranchInfo) -> Result<Vec<RawBlock>, RootError> {
        let mut out = Vec::new();
        for k in 0..branch.normal_baskets() {
            if branch.basket_bytes.get(k).is_some_and(|&b| b > 0) {
                let place = format!("basket {k} of branch '{}'", branch.name);
                out.push(self.stored_basket(branch, k, &place)?.1);
            }
        }
        Ok(out)
    }

    /// Basket `i` of `branch` as stored: its key's header and its compressed block.
    fn stored_basket(
        &self,
        branch: &BranchInfo,
        i: usize,
        place: &str,
    ) -> Result<(BasketHeader, RawBlock), RootError> {
        let seek = u64::try_from(branch.basket_seek[i])
            .map_err(|_| self.corrupt(place, "negative basket offset"))?;
        let len = usize::try_from(branch.basket_bytes[i])
            .map_err(|_| self.corrupt(place, "negative basket size"))?;
        let raw = self.read_bytes(seek, len, place)?;
        let h = basket_header(&mut Cursor::new(&raw)).map_err(|e| self.corrupt(place, e))?;
        if h.keylen > h.nbytes.min(raw.len()) {
            return Err(self.corrupt(place, "basket key longer than the basket"));
        }
        Ok((h, RawBlock::new(seek, raw, h.keylen..h.nbytes, h.objlen)))
    }

    /// Basket `i` of `branch` from its key: header, decompressed data, entry offsets.
    fn basket(&self, branch: &BranchInfo, i: usize, place: &str) -> Result<Basket, RootError> {
        let (h, block) = self.stored_basket(branch, i, place)?;
        let (mut data, start) = block.into_unpacked().map_err(|e| self.corrupt(place, e))?;
        let border = h.border().map_err(|e| self.corrupt(place, e))?;
        let len = data.len() - start;
        if border > len {
            return Err(self.corrupt(place, "basket fLast past its data"));
        }
        // Read where they are used: plain jagged values' counts come from the table directly.
        let offsets = if h.nev_buf_size > 8 && len > border {
            Some(Offsets::Table {
                border,
                keylen: h.keylen,
            })
        } else {
            None
        };
        if offsets.is_none() {
            data.truncate(start + border);
        }
        Ok(Basket {
            data,
            start,
            offsets,
            entries: h.entries,
        })
    }
}

#[cfg(test)]
mod tests;
