//! RNTuple, ROOT's columnar successor to TTree (binary format 1.0, ROOT ≥ 6.34), read from
//! ROOT's specification (`tree/ntuple/doc/BinaryFormatSpecification.md`).
//!
//! `meta.rs` reads the anchor and the header, footer and page-list envelopes; `fields.rs` turns
//! the field tree into the leaves it holds as numbers; `decode.rs` decodes pages. A leaf is read
//! forward in entry order a cluster at a time ([`FieldCursor`]; `cluster.rs` holds the cluster
//! it has loaded), into the same [`BranchData`] a TTree branch gives; `store.rs` holds what
//! several leaves compute once and, where a chunk needs it, reads their pages ahead, each
//! physical column once.

mod cluster;
mod decode;
mod fields;
mod meta;
mod store;

use cluster::{ClusterValues, Loaded, l_end};
use decode::{ColumnType, Direct, Encoding, Value, decode_offsets, decode_page_be, put_be};
use meta::ClusterDesc;

pub use fields::NtupleField;
pub(crate) use store::PageStore;
use store::shared;

use std::sync::Arc;

use crate::compress::{RawBlock, decompress};
use crate::error::RootError;
use crate::file::RootFile;
use crate::read::{BranchData, Number};

/// The class of an RNTuple's anchor key.
const ANCHOR_CLASS: &str = "ROOT::RNTuple";
/// The anchor class of the pre-release format (epoch 0), which is not read.
const OLD_ANCHOR_CLASS: &str = "ROOT::Experimental::RNTuple";

/// More elements than one column of one cluster can hold (a cluster is at most 1280 MiB
/// unzipped by default; a bit per element).
const MAX_CLUSTER_ELEMENTS: usize = 1 << 34;

/// An RNTuple's metadata: its schema, its leaves and where every column's pages are.
#[derive(Debug, Clone)]
pub struct NtupleInfo {
    /// Its key's path in the file.
    pub path: String,
    /// Its name as the header gives it.
    pub name: String,
    /// Entries.
    pub entries: u64,
    /// The format version that wrote it (epoch, major, minor, patch).
    pub version: (u16, u16, u16, u16),
    /// Every leaf of its field tree, readable or not.
    pub fields: Vec<NtupleField>,
    /// Clusters, in entry order.
    clusters: Vec<ClusterDesc>,
    /// Physical columns: how their pages decode, or why they cannot.
    encodings: Vec<Result<Encoding, String>>,
    /// Physical columns: whether they are deferred (added by a schema extension: the elements
    /// before their first are zeros, with no pages).
    deferred: Vec<bool>,
    /// The largest payload one key holds.
    max_key_size: u64,
}

impl NtupleInfo {
    /// The leaf named `name`.
    pub fn field(&self, name: &str) -> Option<&NtupleField> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Number of clusters.
    pub fn n_clusters(&self) -> usize {
        self.clusters.len()
    }
}

impl RootFile {
    /// The paths of the RNTuples in the file (current cycles, in file order; those of the
    /// pre-release format too, which [`RootFile::ntuple`] then refuses by name).
    pub fn ntuple_paths(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for k in self
            .keys()
            .iter()
            .filter(|k| k.class == ANCHOR_CLASS || k.class == OLD_ANCHOR_CLASS)
        {
            if !out.contains(&k.path) {
                out.push(k.path.clone());
            }
        }
        out
    }

    /// Reads the RNTuple at `path`: anchor, header, footer and page lists.
    pub fn ntuple(&self, path: &str) -> Result<NtupleInfo, RootError> {
        let key = self.anchor_key(path)?;
        let place = format!("RNTuple '{path}'");
        let object = self.read_object(key)?;
        let anchor = meta::anchor(&object.bytes)
            .map_err(|e| self.corrupt(&format!("{place}, anchor"), e))?;
        if anchor.version.0 != 1 {
            return Err(RootError::Unsupported {
                path: self.path().to_owned(),
                place,
                what: format!(
                    "RNTuple format epoch {} (epoch 1 is read)",
                    anchor.version.0
                ),
            });
        }
        let envelope =
            |link: (meta::Locator, u64), kind: u16, what: &str| -> Result<Vec<u8>, RootError> {
                let at = format!("{place}, {what}");
                let bytes = self.read_block(
                    link.0,
                    usize::try_from(link.1).unwrap_or(usize::MAX),
                    anchor.max_key_size,
                    &at,
                )?;
                meta::envelope(&bytes, kind).map_err(|e| self.corrupt(&at, e))?;
                Ok(bytes)
            };
        let header_bytes = envelope(anchor.header, 1, "header")?;
        let header_payload = meta::payload(&header_bytes);
        let (name, mut schema) = meta::header(header_payload)
            .map_err(|e| self.corrupt(&format!("{place}, header"), e))?;
        let header_checksum = meta::envelope_checksum(&header_bytes);
        let footer_bytes = envelope(anchor.footer, 2, "footer")?;
        let (footer_for, groups) = meta::footer(meta::payload(&footer_bytes), &mut schema)
            .map_err(|e| self.corrupt(&format!("{place}, footer"), e))?;
        if footer_for != header_checksum {
            return Err(self.corrupt(
                &format!("{place}, footer"),
                "the footer belongs to another header (checksums differ)",
            ));
        }
        let mut clusters = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            let what = format!("page list {g}");
            let bytes = envelope(group.page_list, 3, &what)?;
            let (for_header, mut cs) = meta::page_list(meta::payload(&bytes))
                .map_err(|e| self.corrupt(&format!("{place}, {what}"), e))?;
            if for_header != header_checksum {
                return Err(self.corrupt(
                    &format!("{place}, {what}"),
                    "the page list belongs to another header (checksums differ)",
                ));
            }
            if cs.len() != group.n_clusters as usize {
                return Err(self.corrupt(
                    &format!("{place}, {what}"),
                    format!(
                        "{} clusters where the footer says {}",
                        cs.len(),
                        group.n_clusters
                    ),
                ));
            }
            clusters.append(&mut cs);
        }
        clusters.sort_by_key(|c| c.first_entry);
        let entries = clusters
            .iter()
            .map(|c| c.first_entry + c.entries)
            .max()
            .unwrap_or(0);
        let encodings = schema
            .columns
            .iter()
            .map(|c| {
                let kind = ColumnType::from_code(c.kind)
                    .ok_or_else(|| format!("column type {:#x}", c.kind))?;
                Encoding::new(kind, c.bits, c.range)
            })
            .collect();
        let fields = fields::leaves(&schema);
        let deferred = schema.columns.iter().map(|c| c.first_element > 0).collect();
        Ok(NtupleInfo {
            path: path.to_owned(),
            name,
            entries,
            version: anchor.version,
            fields,
            clusters,
            encodings,
            deferred,
            max_key_size: anchor.max_key_size,
        })
    }

    /// The key of the RNTuple anchor at `path`: a pre-release anchor is unsupported by name,
    /// another class not an RNTuple.
    fn anchor_key(&self, path: &str) -> Result<&crate::file::Key, RootError> {
        let key = self.key(path)?;
        if key.class == OLD_ANCHOR_CLASS {
            return Err(RootError::Unsupported {
                path: self.path().to_owned(),
                place: format!("RNTuple '{path}'"),
                what: "the pre-release RNTuple format (ROOT::Experimental::RNTuple, before ROOT 6.34); \
                       rewrite it with ROOT ≥ 6.34"
                    .into(),
            });
        }
        if key.class != ANCHOR_CLASS {
            return Err(RootError::NotFound {
                path: self.path().to_owned(),
                what: "RNTuple",
                name: path.to_owned(),
                hint: format!(" ('{path}' is a {})", key.class),
            });
        }
        Ok(key)
    }

    /// The pages of every column leaf `field` reads, in every cluster, as stored, each with
    /// how its values decode (for timing the codec alone, and the least a reader does).
    pub fn raw_pages(
        &self,
        ntuple: &NtupleInfo,
        field: &NtupleField,
    ) -> Result<Vec<(RawBlock, PageValues)>, RootError> {
        let cursor = self.field_cursor(ntuple, field, 0)?;
        let mut out = Vec::new();
        for k in 0..ntuple.clusters.len() {
            for (_, enc, pages) in cursor.columns_in(k) {
                for page in pages {
                    let size = usize::try_from(page.locator.size).unwrap_or(usize::MAX);
                    let raw = self.read_bytes(page.locator.offset, size, &cursor.place(k))?;
                    let elements = page.elements as usize;
                    let len = enc.page_bytes(elements);
                    let values = PageValues {
                        enc,
                        number: (!enc.kind.is_index()).then_some(cursor.number),
                        elements,
                    };
                    out.push((
                        RawBlock::new(page.locator.offset, raw, 0..size, len),
                        values,
                    ));
                }
            }
        }
        Ok(out)
    }

    /// The block at `loc`, decompressed to `len` bytes.
    fn read_block(
        &self,
        loc: meta::Locator,
        len: usize,
        max_key_size: u64,
        place: &str,
    ) -> Result<Vec<u8>, RootError> {
        if max_key_size > 0 && loc.size > max_key_size {
            return Err(RootError::Unsupported {
                path: self.path().to_owned(),
                place: place.to_owned(),
                what: format!(
                    "a payload of {} bytes split over several keys (larger than {max_key_size})",
                    loc.size
                ),
            });
        }
        let size = usize::try_from(loc.size).map_err(|_| self.corrupt(place, "block too large"))?;
        let raw = self.read_bytes(loc.offset, size, place)?;
        decompress(&raw, len).map_err(|e| self.corrupt(place, e))
    }

    /// A cursor over leaf `field` of `ntuple`, at entry `start`.
    pub fn field_cursor<'f>(
        &'f self,
        ntuple: &'f NtupleInfo,
        field: &'f NtupleField,
        start: u64,
    ) -> Result<FieldCursor<'f>, RootError> {
        let interpretation = field.read.clone().map_err(|why| RootError::Unsupported {
            path: self.path().to_owned(),
            place: format!("RNTuple '{}', field '{}'", ntuple.path, field.name),
            what: why,
        })?;
        Ok(FieldCursor {
            file: self,
            ntuple,
            field,
            number: interpretation.number,
            interpretation,
            next: start,
            loaded: None,
        })
    }
}

/// How an RNTuple page's bytes, decompressed, become its values, as every reader of it must
/// turn them (un-splitting its byte planes, undoing its deltas): for timing the least a reader
/// does beside the codec.
#[derive(Debug, Clone, Copy)]
pub struct PageValues {
    enc: Encoding,
    /// The leaf's numbers; `None` for an offset column.
    number: Option<Number>,
    elements: usize,
}

impl PageValues {
    /// The bytes its values take decoded: big-endian numbers, or an offset column's offsets
    /// as 8-byte integers.
    pub fn values_len(&self) -> usize {
        let width = self.number.map_or(8, Number::size);
        self.elements.saturating_mul(width)
    }

    /// The values of the page whose decompressed bytes are `bytes`, into `out`
    /// ([`PageValues::values_len`] bytes): big-endian numbers, or the offsets in this
    /// machine's byte order.
    pub fn decode_into(&self, bytes: &[u8], out: &mut [u8]) -> Result<(), String> {
        let n = self.elements;
        let decoded = match self.number {
            Some(number) => decode_page_be(&self.enc, bytes, n, number, out),
            None => {
                let mut offsets = Vec::with_capacity(n);
                decode_offsets(&self.enc, bytes, n, &mut offsets).map(|()| {
                    for (o, d) in offsets.iter().zip(out.chunks_exact_mut(8)) {
                        d.copy_from_slice(&o.to_ne_bytes());
                    }
                })
            }
        };
        decoded.map_err(|e| e.to_string())
    }
}

/// Takes one page's bytes (uncompressed) holding a number of elements.
type PageDecoder<'a> = dyn FnMut(&Arc<Vec<u8>>, usize) -> Result<(), crate::error::BufError> + 'a;

/// Reads one leaf of an RNTuple forward, a cluster's pages of it at a time.
pub struct FieldCursor<'f> {
    file: &'f RootFile,
    ntuple: &'f NtupleInfo,
    field: &'f NtupleField,
    interpretation: crate::read::Interpretation,
    number: Number,
    next: u64,
    loaded: Option<Loaded>,
}

impl FieldCursor<'_> {
    fn place(&self, cluster: usize) -> String {
        format!(
            "RNTuple '{}', field '{}', cluster {cluster}",
            self.ntuple.path, self.field.name
        )
    }

    /// The first entry not yet taken.
    pub(crate) fn next_entry(&self) -> u64 {
        self.next
    }

    /// The next `n` entries' values (fewer at the end).
    pub fn take(&mut self, n: usize) -> Result<BranchData, RootError> {
        self.take_with(n, None)
    }

    /// True when `other`'s entries split into values as this leaf's do (leaves of one
    /// collection, or two top-level leaves): they share the entries' bounds.
    pub(crate) fn same_entries(&self, other: &FieldCursor<'_>) -> bool {
        self.field.plan.steps == other.field.plan.steps
    }

    /// The clusters the next `n` entries need that are not decoded yet.
    pub(crate) fn clusters_for(&self, n: usize) -> Vec<usize> {
        let stop = (self.next + n as u64).min(self.ntuple.entries);
        if self.next >= stop {
            return Vec::new();
        }
        let clusters = &self.ntuple.clusters;
        let first = clusters.partition_point(|c| c.first_entry + c.entries <= self.next);
        let last = clusters.partition_point(|c| c.first_entry < stop);
        (first..last.max(first))
            .filter(|&k| {
                self.loaded
                    .as_ref()
                    .is_none_or(|l| l.first_entry != clusters[k].first_entry)
            })
            .collect()
    }

    /// The physical columns this leaf reads in cluster `k` (its offset columns, then its
    /// values), with their encodings and pages; those that cannot be read are left out (the
    /// leaf's own read fails on them by name).
    pub(crate) fn columns_in(&self, k: usize) -> Vec<Chosen<'_>> {
        let plan = &self.field.plan;
        plan.steps
            .iter()
            .filter_map(|s| match s {
                fields::Step::Collection(columns) => Some(columns.as_slice()),
                fields::Step::Repeat(_) => None,
            })
            .chain(std::iter::once(plan.values.as_slice()))
            .filter_map(|reprs| self.chosen(k, reprs).ok())
            .collect()
    }

    /// [`FieldCursor::take`], reading the pages `store` holds from there.
    pub(crate) fn take_with(
        &mut self,
        n: usize,
        store: Option<&PageStore>,
    ) -> Result<BranchData, RootError> {
        let stop = (self.next + n as u64).min(self.ntuple.entries);
        let wanted = (stop - self.next.min(stop)) as usize;
        // Sized when the first cluster says how many values: no growth, no copy.
        let mut bytes = Vec::new();
        let mut counts = Vec::with_capacity(wanted);
        while self.next < stop {
            let loaded = match &self.loaded {
                Some(l) if self.next >= l.first_entry && self.next < l_end(l) => l,
                _ => {
                    let k = self
                        .ntuple
                        .clusters
                        .partition_point(|c| c.first_entry + c.entries <= self.next);
                    if k >= self.ntuple.clusters.len() {
                        return Err(self.file.corrupt(
                            &self.place(k),
                            format!("no cluster holds entry {}", self.next),
                        ));
                    }
                    self.loaded = Some(self.load(k, store)?);
                    self.loaded.as_ref().expect("just loaded")
                }
            };
            let end_in = (l_end(loaded)).min(stop);
            let (a, b) = (
                (self.next - loaded.first_entry) as usize,
                (end_in - loaded.first_entry) as usize,
            );
            let (lo, hi) = (loaded.bounds[a], loaded.bounds[b]);
            let steps = loaded.bounds[a..=b].windows(2).map(|w| w[1] - w[0]);
            if u32::try_from(hi - lo).is_ok() {
                // No entry's count can exceed the range's: each fits.
                counts.extend(steps.map(|c| c as u32));
            } else {
                counts.extend(steps.map(|c| u32::try_from(c).unwrap_or(u32::MAX)));
            }
            let size = self.number.size();
            let at = bytes.len();
            bytes.reserve_exact((hi - lo) * size);
            bytes.resize(at + (hi - lo) * size, 0);
            loaded.values.write(lo, hi, size, &mut bytes[at..]);
            self.next = end_in;
        }
        Ok(BranchData {
            interpretation: self.interpretation,
            bytes,
            counts,
        })
    }

    /// Decodes cluster `k` of this leaf: its offset columns, then its values.
    fn load(&self, k: usize, store: Option<&PageStore>) -> Result<Loaded, RootError> {
        let cluster = &self.ntuple.clusters[k];
        let bounds = match store {
            None => Arc::new(self.bounds(k, None)?),
            // Computed once for every leaf of the same collection.
            Some(store) => shared(&store.bounds, (k, self.field.plan.steps.clone()), || {
                self.bounds(k, Some(store))
            })?,
        };
        let total = *bounds.last().unwrap_or(&0);
        let values = if self.field.plan.cardinality {
            // Sizes from the offsets (each relative to the cluster's start).
            let offsets = self.offsets(k, &self.field.plan.values, total, store)?;
            ClusterValues::decoded(sizes_be(&offsets, self.number), offsets.len())
        } else {
            self.column_values(k, &self.field.plan.values, total, store)?
        };
        Ok(Loaded {
            first_entry: cluster.first_entry,
            bounds,
            values,
        })
    }

    /// Each entry's range of values in cluster `k`: `[entries + 1]` bounds, from the entry
    /// down through the leaf's repetitions and collection offsets.
    fn bounds(&self, k: usize, store: Option<&PageStore>) -> Result<Vec<usize>, RootError> {
        let cluster = &self.ntuple.clusters[k];
        let n = usize::try_from(cluster.entries)
            .map_err(|_| self.file.corrupt(&self.place(k), "too many entries"))?;
        // `None` while the bounds are the entries themselves (`0..=n`), built only if needed.
        let mut bounds: Option<Vec<usize>> = None;
        for step in &self.field.plan.steps {
            match step {
                fields::Step::Repeat(m) => {
                    let m = usize::try_from(*m).unwrap_or(usize::MAX);
                    let mut repeated = bounds.take().unwrap_or_else(|| (0..=n).collect());
                    for b in &mut repeated {
                        *b = b.checked_mul(m).ok_or_else(|| {
                            self.file.corrupt(&self.place(k), "repetition overflows")
                        })?;
                    }
                    bounds = Some(repeated);
                }
                fields::Step::Collection(columns) => {
                    let items = bounds.as_ref().map_or(n, |b| *b.last().unwrap_or(&0));
                    let offsets = self.offsets(k, columns, items, store)?;
                    // Bounds index `[0] + offsets` (`items + 1` elements; they only grow).
                    let high = offsets.iter().fold(0, |m, &o| m.max(o));
                    if usize::try_from(high).is_err() {
                        return Err(self.file.corrupt(&self.place(k), "offset too large"));
                    }
                    let off = |b: usize| if b == 0 { 0 } else { offsets[b - 1] as usize };
                    let next: Vec<usize> = match &bounds {
                        // Entries themselves (a top-level collection): no gather.
                        None => std::iter::once(0)
                            .chain(offsets.iter().map(|&o| o as usize))
                            .collect(),
                        Some(bounds) => bounds.iter().map(|&b| off(b)).collect(),
                    };
                    let falls = next
                        .iter()
                        .zip(&next[1..])
                        .fold(false, |f, (a, b)| f | (b < a));
                    if falls {
                        return Err(self.file.corrupt(&self.place(k), "offsets decrease"));
                    }
                    bounds = Some(next);
                }
            }
        }
        Ok(bounds.unwrap_or_else(|| (0..=n).collect()))
    }

    /// The column of representation `reprs` not suppressed in cluster `k`, its encoding and
    /// pages.
    fn chosen(&self, k: usize, reprs: &[u32]) -> Result<Chosen<'_>, RootError> {
        let cluster = &self.ntuple.clusters[k];
        let place = self.place(k);
        let chosen = reprs
            .iter()
            .copied()
            .find(|&c| {
                cluster
                    .columns
                    .get(c as usize)
                    .is_some_and(|p| !p.suppressed)
            })
            .or_else(|| reprs.first().copied())
            .ok_or_else(|| self.file.corrupt(&place, "a field without columns"))?;
        let enc = match self.ntuple.encodings.get(chosen as usize) {
            Some(Ok(e)) => *e,
            Some(Err(why)) => {
                return Err(RootError::Unsupported {
                    path: self.file.path().to_owned(),
                    place,
                    what: why.clone(),
                });
            }
            None => return Err(self.file.corrupt(&place, format!("no column {chosen}"))),
        };
        let pages = cluster
            .columns
            .get(chosen as usize)
            .map_or(&[][..], |p| &p.pages[..]);
        Ok((chosen, enc, pages))
    }

    /// Reads and decompresses the pages of column `chosen` in cluster `k` until `n` elements
    /// are decoded by `decode` (page bytes, elements); the elements decoded.
    fn pages(
        &self,
        k: usize,
        column: Chosen<'_>,
        n: usize,
        decode: &mut PageDecoder<'_>,
        store: Option<&PageStore>,
    ) -> Result<usize, RootError> {
        let (chosen, enc, pages) = column;
        let place = self.place(k);
        let stored = store.and_then(|s| s.pages.get(&(k, chosen)));
        let mut done = 0usize;
        for (p, page) in pages.iter().enumerate() {
            if done >= n {
                break;
            }
            let elements = page.elements as usize;
            let at = format!("{place}, page {p} of column {chosen} ({})", enc.kind.name());
            let bytes = match stored.and_then(|s| s.get(p)) {
                Some(b) => Arc::clone(b),
                None => Arc::new(self.file.read_block(
                    page.locator,
                    enc.page_bytes(elements),
                    self.ntuple.max_key_size,
                    &at,
                )?),
            };
            decode(&bytes, elements).map_err(|e| self.file.corrupt(&at, e))?;
            done += elements;
        }
        let deferred = self.ntuple.deferred.get(chosen as usize) == Some(&true);
        if (pages.is_empty() || deferred) && n.saturating_sub(done) > MAX_CLUSTER_ELEMENTS {
            return Err(self.file.corrupt(
                &place,
                format!("{n} elements asked of a column holding {done}"),
            ));
        }
        if !pages.is_empty() && !deferred && done < n {
            return Err(self.file.corrupt(
                &place,
                format!("column {chosen} holds {done} elements, {n} are needed"),
            ));
        }
        Ok(done)
    }

    /// The first `n` elements of the leaf's offset column in cluster `k`: of the
    /// representation not suppressed there (zeros before a deferred column's first element).
    fn offsets(
        &self,
        k: usize,
        reprs: &[u32],
        n: usize,
        store: Option<&PageStore>,
    ) -> Result<Arc<Vec<u64>>, RootError> {
        let column = self.chosen(k, reprs)?;
        match store {
            None => self.read_offsets(k, column, n, None).map(Arc::new),
            // Decoded once for every leaf of the same collection.
            Some(store) => shared(&store.decoded, (k, column.0, n), || {
                self.read_offsets(k, column, n, Some(store))
            }),
        }
    }

    /// The first `n` elements of offset column `chosen` in cluster `k`.
    fn read_offsets(
        &self,
        k: usize,
        column: Chosen<'_>,
        n: usize,
        store: Option<&PageStore>,
    ) -> Result<Vec<u64>, RootError> {
        let enc = column.1;
        // Sized by what the pages hold: `n` comes from offsets a damaged page may have garbled.
        let stored: usize = column.2.iter().map(|p| p.elements as usize).sum();
        let mut out = Vec::with_capacity(n.min(stored));
        let decode =
            &mut |bytes: &Arc<Vec<u8>>, elements| decode_offsets(&enc, bytes, elements, &mut out);
        self.pages(k, column, n, decode, store)?;
        if out.len() < n {
            // A deferred column: zeros for the entries before its first element.
            let mut zeros = vec![0; n - out.len()];
            zeros.append(&mut out);
            out = zeros;
        }
        out.truncate(n);
        Ok(out)
    }

    /// The first `n` elements of the leaf's value column in cluster `k`, as its pages (see
    /// [`ClusterValues`]).
    fn column_values(
        &self,
        k: usize,
        reprs: &[u32],
        n: usize,
        store: Option<&PageStore>,
    ) -> Result<ClusterValues, RootError> {
        let column = self.chosen(k, reprs)?;
        let (enc, number) = (column.1, self.number);
        let direct = Direct::of(&enc, number);
        let mut pages = Vec::new();
        let mut held = 0usize;
        let decode = &mut |bytes: &Arc<Vec<u8>>, elements: usize| {
            enc.check_page(bytes, elements)?;
            let page = match direct {
                Some(_) => Arc::clone(bytes),
                None => {
                    let mut be = vec![0u8; elements * number.size()];
                    decode_page_be(&enc, bytes, elements, number, &mut be)?;
                    Arc::new(be)
                }
            };
            pages.push((held, elements, page));
            held += elements;
            Ok(())
        };
        self.pages(k, column, n, decode, store)?;
        // A deferred column: zeros for the entries before its first element.
        let zeros = n.saturating_sub(held);
        for page in &mut pages {
            page.0 += zeros;
        }
        Ok(ClusterValues { direct, pages })
    }
}

/// A leaf's column in one cluster: the physical column of the representation not suppressed
/// there, how its pages decode, and its pages.
type Chosen<'a> = (u32, Encoding, &'a [meta::PageDesc]);

/// Each entry's number of items from a collection's `offsets` (where each entry's items end,
/// counted from the cluster's start), as big-endian `number`s.
fn sizes_be(offsets: &[u64], number: Number) -> Vec<u8> {
    let mut sizes = Vec::with_capacity(offsets.len());
    sizes.extend(offsets.first());
    let later = offsets.get(1..).unwrap_or_default();
    sizes.extend(offsets.iter().zip(later).map(|(a, b)| b.wrapping_sub(*a)));
    let size = number.size();
    let mut out = vec![0u8; sizes.len() * size];
    match number {
        // A cardinality field's usual types, one loop each (they vectorise).
        Number::U32 => out
            .chunks_exact_mut(4)
            .zip(&sizes)
            .for_each(|(d, &u)| d.copy_from_slice(&(u as u32).to_be_bytes())),
        Number::U64 => out
            .chunks_exact_mut(8)
            .zip(&sizes)
            .for_each(|(d, &u)| d.copy_from_slice(&u.to_be_bytes())),
        _ => out
            .chunks_exact_mut(size)
            .zip(&sizes)
            .for_each(|(d, &u)| put_be(d, number, Value::UInt(u))),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collection_s_sizes_come_from_its_offsets_in_any_width() {
        let offsets = [2u64, 2, 5, 9];
        let be32: Vec<u8> = [2u32, 0, 3, 4]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        assert_eq!(sizes_be(&offsets, Number::U32), be32);
        let be64: Vec<u8> = [2u64, 0, 3, 4]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        assert_eq!(sizes_be(&offsets, Number::U64), be64);
        let be16: Vec<u8> = [2i16, 0, 3, 4]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        assert_eq!(sizes_be(&offsets, Number::I16), be16);
        // A cluster of no entries.
        assert!(sizes_be(&[], Number::U32).is_empty());
    }
}
