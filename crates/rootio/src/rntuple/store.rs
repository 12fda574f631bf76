//! What a chunk's leaves compute once and share between the threads that ask ([`shared`]: a
//! collection's offsets and bounds), and, where the leaves do not read their own, the pages
//! they need, read and decompressed ahead on several threads, each physical column once
//! however many leaves name it ([`PageStore::prefetch`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::FieldCursor;
use super::fields;
use crate::error::RootError;

/// The pages several leaves need, read and decompressed ahead on several threads, each physical
/// column once however many leaves name it (none where the leaves read their own); and the
/// offset columns and bounds, decoded once.
pub(crate) struct PageStore {
    /// The pages of (cluster, column), in page order, uncompressed.
    pub(super) pages: HashMap<(usize, u32), Vec<Arc<Vec<u8>>>>,
    /// Decoded offset columns by (cluster, column, elements).
    pub(super) decoded: Shared<(usize, u32, usize), Vec<u64>>,
    /// Each entry's value range by (cluster, steps from the entry down).
    pub(super) bounds: Shared<(usize, Vec<fields::Step>), Vec<usize>>,
}

/// Values computed once and shared between threads, by key: the first thread to ask computes
/// it, the others wait for it rather than computing it again.
type Shared<K, V> = Mutex<HashMap<K, Arc<OnceLock<Option<Arc<V>>>>>>;

/// The value of `key` in `cache`, computed by `compute` if it is not there yet. A failed
/// computation is not kept: each caller then computes it itself, and fails by name.
pub(super) fn shared<K: std::hash::Hash + Eq, V>(
    cache: &Shared<K, V>,
    key: K,
    compute: impl Fn() -> Result<V, RootError>,
) -> Result<Arc<V>, RootError> {
    let Ok(mut map) = cache.lock() else {
        return compute().map(Arc::new);
    };
    let cell = Arc::clone(map.entry(key).or_default());
    drop(map);
    let mut failed = None;
    let value = cell.get_or_init(|| match compute() {
        Ok(v) => Some(Arc::new(v)),
        Err(e) => {
            failed = Some(e);
            None
        }
    });
    match (value, failed) {
        (Some(v), _) => Ok(Arc::clone(v)),
        (None, Some(e)) => Err(e),
        (None, None) => compute().map(Arc::new),
    }
}

/// Pages read ahead for one (cluster, column): each page's index and its bytes, or `None`
/// where reading it failed.
type PagesRead = Vec<(usize, Option<Vec<u8>>)>;

impl PageStore {
    /// For the next `n` entries of `cursors`, on up to `threads` threads: where each leaf's
    /// pages are to be read by the leaf itself as it decodes them (the leaves' stored bytes
    /// balanced enough over the threads, [`crate::parallel::each_whole`], and no value column
    /// read by two leaves), a store of no pages that only shares what leaves compute once; else
    /// the pages, every physical column once, read and decompressed here, largest first. A
    /// remote file's reads are planned first. A column any of whose pages fails is left out:
    /// the leaf reading it reads it itself and fails by name.
    pub(crate) fn prefetch(cursors: &[&FieldCursor<'_>], n: usize, threads: usize) -> PageStore {
        let mut seen = std::collections::HashSet::new();
        let mut jobs = Vec::new();
        // Each column's bytes count for the first leaf that reads it.
        let mut bytes = vec![0usize; cursors.len()];
        // Whether two leaves read one column as their values (offsets are decoded once
        // whoever reads them, values only from pages read here).
        let mut values_shared = false;
        for (c, own) in cursors.iter().zip(&mut bytes) {
            for k in c.clusters_for(n) {
                let columns = c.columns_in(k);
                let values = columns.last().map(|v| v.0);
                for (chosen, enc, pages) in columns {
                    if !seen.insert((k, chosen)) {
                        values_shared |= !c.field.plan.cardinality && Some(chosen) == values;
                        continue;
                    }
                    for (p, page) in pages.iter().enumerate() {
                        let len = enc.page_bytes(page.elements as usize);
                        *own += usize::try_from(page.locator.size).unwrap_or(0);
                        jobs.push((c.file, c.ntuple, k, chosen, p, page.locator, len));
                    }
                }
            }
        }
        // A remote file's pages are read in few requests: this chunk's clusters', and the
        // next clusters' within the read-ahead window.
        if let Some(first) = cursors.first()
            && first.file.is_remote()
        {
            let mut window = Vec::new();
            let mut seen_ahead = std::collections::HashSet::new();
            for c in cursors {
                for k in c.clusters_for(n.saturating_mul(crate::file::AHEAD_CHUNKS)) {
                    let entry = c.ntuple.clusters[k].first_entry;
                    for (chosen, _, pages) in c.columns_in(k) {
                        if !seen_ahead.insert((k, chosen)) {
                            continue;
                        }
                        for page in pages {
                            if let Ok(size) = usize::try_from(page.locator.size) {
                                window.push((entry, page.locator.offset, size));
                            }
                        }
                    }
                }
            }
            first
                .file
                .prefetch(crate::file::read_ahead_window(window, jobs.len()));
        }
        let mut store = PageStore {
            pages: HashMap::new(),
            decoded: Mutex::new(HashMap::new()),
            bounds: Mutex::new(HashMap::new()),
        };
        if !values_shared && crate::parallel::each_whole(&bytes, threads) {
            return store;
        }
        let read = crate::parallel::map_largest_first(
            jobs,
            threads,
            |j| usize::try_from(j.5.size).unwrap_or(usize::MAX),
            |(file, ntuple, k, chosen, p, loc, len)| {
                let page = file.read_block(loc, len, ntuple.max_key_size, "");
                ((k, chosen, p), page.ok())
            },
        );
        let mut grouped: HashMap<(usize, u32), PagesRead> = HashMap::new();
        for ((k, chosen, p), page) in read {
            grouped.entry((k, chosen)).or_default().push((p, page));
        }
        store.pages = grouped
            .into_iter()
            .filter_map(|(key, mut ps)| {
                ps.sort_by_key(|(p, _)| *p);
                let all: Option<Vec<Arc<Vec<u8>>>> =
                    ps.into_iter().map(|(_, b)| b.map(Arc::new)).collect();
                all.map(|a| (key, a))
            })
            .collect();
        store
    }
}
