//! Several columns of one TTree or RNTuple read forward together, a chunk of entries at a
//! time, on several threads. Each column reads its own baskets (TTree) or pages (RNTuple) as it
//! decodes them, while their bytes are in the core's cache, the columns shared among the
//! threads (a TTree's the largest first; an RNTuple's the first leaf of each collection first;
//! one thread takes them in order, as a remote file's bytes come). Where one column holds too
//! much of a chunk for the threads to finish together ([`crate::parallel::each_whole`]: over a
//! quarter of it on two threads), or two RNTuple leaves read one column as their values, the
//! chunk's baskets or pages are instead read and decompressed first as one pool of jobs, the
//! largest first, so that a column of a few large baskets is spread over the threads; then each
//! column decodes its own. A physical column is read and decompressed once per chunk however
//! many requests name it (a branch asked for twice; an RNTuple's projected field `Jet_pt` and
//! the collection's `_collection1.Jet_pt`; the offsets every leaf of one collection shares).
//! On several threads a local file's jobs take the values of four takes at once, and the next
//! three takes hand them out (none past [`ColumnReader::ending_at`]). Memory holds the
//! chunk's baskets, or the clusters it touches, of the requested columns; on several threads
//! a local file's values of up to four chunks.

use std::collections::VecDeque;

use crate::error::RootError;
use crate::file::RootFile;
use crate::parallel;
use crate::read::{BranchCursor, Values, prepare_takes};
use crate::rntuple::{FieldCursor, NtupleField, NtupleInfo, PageStore};
use crate::tree::{BranchInfo, TreeInfo};

/// Columns read forward together; see the module documentation.
pub struct ColumnReader<'f> {
    columns: Columns<'f>,
    /// The column each request reads (requests naming one column share it).
    of_request: Vec<usize>,
    /// Each column's values its last fan-out took ahead.
    ahead: Vec<Ahead>,
    threads: usize,
    /// The takes one fan-out takes: [`AHEAD`] on several threads of a local file, else one.
    takes: usize,
    /// No entry from here on is read before a take asks for it.
    stop: u64,
}

/// On several threads, the takes of a local file's columns that one fan-out of jobs takes;
/// the takes after it hand out what the jobs took (see [`ColumnReader::take`]).
const AHEAD: usize = 4;

enum Columns<'f> {
    /// The branches.
    Tree(Vec<BranchCursor<'f>>),
    /// The leaves, and for each whether it is the first of those whose entries split their
    /// values alike (one collection's leaves, or the top-level ones).
    Ntuple(Vec<FieldCursor<'f>>, Vec<bool>),
}

/// A column's values taken ahead by its last fan-out, in take order: each handed out whole,
/// cut, or joined to the cursor's next values, as the takes ask; an error in the take it
/// belongs to.
type Ahead = VecDeque<Result<Values, RootError>>;

/// The distinct items of `items` by `same` (the first of each, in order) and, for each item,
/// the index of its distinct one among them.
fn distinct<T>(items: &[T], same: impl Fn(&T, &T) -> bool) -> (Vec<usize>, Vec<usize>) {
    let mut firsts: Vec<usize> = Vec::new();
    let mut of = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match firsts.iter().position(|&f| same(&items[f], item)) {
            Some(j) => of.push(j),
            None => {
                of.push(firsts.len());
                firsts.push(i);
            }
        }
    }
    (firsts, of)
}

impl<'f> ColumnReader<'f> {
    /// `branches` of `tree` from entry `start` on, on up to `threads` threads.
    pub fn tree(
        file: &'f RootFile,
        tree: &'f TreeInfo,
        branches: &[&'f BranchInfo],
        start: u64,
        threads: usize,
    ) -> Result<ColumnReader<'f>, RootError> {
        let (firsts, of_request) = distinct(branches, |a, b| a.name == b.name);
        let cursors = firsts
            .iter()
            .map(|&i| file.branch_cursor(tree, branches[i], start))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ColumnReader {
            ahead: cursors.iter().map(|_| Ahead::new()).collect(),
            columns: Columns::Tree(cursors),
            of_request,
            threads: threads.max(1),
            takes: takes_a_fan_out(file, threads),
            stop: u64::MAX,
        })
    }

    /// Leaves `fields` of `ntuple` from entry `start` on, on up to `threads` threads; leaves
    /// that read the same columns the same way are read once.
    pub fn ntuple(
        file: &'f RootFile,
        ntuple: &'f NtupleInfo,
        fields: &[&'f NtupleField],
        start: u64,
        threads: usize,
    ) -> Result<ColumnReader<'f>, RootError> {
        // Leaves read the same way give the same values: a projected field (`Jet_pt`) and the
        // collection's own (`_collection1.Jet_pt`) are one.
        let (firsts, of_request) = distinct(fields, |a, b| a.reads_like(b));
        let cursors = firsts
            .iter()
            .map(|&i| file.field_cursor(ntuple, fields[i], start))
            .collect::<Result<Vec<_>, _>>()?;
        let (leaders, of) = distinct(&cursors, |a, b| a.same_entries(b));
        let leads = of
            .iter()
            .enumerate()
            .map(|(i, &g)| leaders[g] == i)
            .collect();
        Ok(ColumnReader {
            ahead: cursors.iter().map(|_| Ahead::new()).collect(),
            columns: Columns::Ntuple(cursors, leads),
            of_request,
            threads: threads.max(1),
            takes: takes_a_fan_out(file, threads),
            stop: u64::MAX,
        })
    }

    /// Reads no entry at or after `stop` before a take asks for it (where the caller's range
    /// ends): on several threads a TTree's jobs otherwise take the values of the next takes
    /// too.
    pub fn ending_at(mut self, stop: u64) -> ColumnReader<'f> {
        self.stop = stop;
        self
    }

    /// The next `n` entries (fewer at the end) of every request, in request order; the first
    /// error in request order.
    pub fn take(&mut self, n: usize) -> Result<Taken, RootError> {
        let (threads, takes, stop) = (self.threads, self.takes, self.stop);
        let ahead = &mut self.ahead;
        // Each fan-out of jobs wakes the helper threads and waits for the last column: on
        // several threads a local file's jobs take `AHEAD` takes of values at once, and the
        // takes after it hand them out on this thread.
        let fan_out = ahead.iter().any(VecDeque::is_empty);
        let taken = match &mut self.columns {
            Columns::Tree(cursors) if !fan_out => all_handed_out(cursors, ahead, n),
            Columns::Ntuple(cursors, _) if !fan_out => all_handed_out(cursors, ahead, n),
            Columns::Tree(cursors) => {
                // The baskets planned (and, in one pool, read) stop where the range does.
                let planned = planned(n, takes, cursors.first(), stop);
                let mut refs: Vec<&mut BranchCursor<'f>> = cursors.iter_mut().collect();
                let bytes = prepare_takes(&mut refs, planned, threads);
                let jobs: Vec<_> = refs.into_iter().zip(bytes).zip(ahead.iter_mut()).collect();
                parallel::map_largest_first(
                    jobs,
                    threads,
                    |((_, b), _)| *b,
                    |((c, _), a)| taken_ahead(c, a, n, takes, stop, None),
                )
            }
            Columns::Ntuple(cursors, leads) => {
                let planned = planned(n, takes, cursors.first(), stop);
                let store = {
                    let refs: Vec<&FieldCursor<'f>> = cursors.iter().collect();
                    PageStore::prefetch(&refs, planned, threads)
                };
                // The first leaf of each collection first: it computes where the collection's
                // entries start, which its other leaves wait for, so that different
                // collections' are computed side by side (one thread takes them in order).
                let jobs: Vec<_> = leads
                    .iter()
                    .zip(cursors.iter_mut())
                    .zip(ahead.iter_mut())
                    .collect();
                parallel::map_largest_first(
                    jobs,
                    threads,
                    |((lead, _), _)| usize::from(**lead),
                    |((_, c), a)| taken_ahead(c, a, n, takes, stop, Some(&store)),
                )
            }
        };
        Ok(Taken {
            columns: taken.into_iter().collect::<Result<_, _>>()?,
            of_request: self.of_request.clone(),
        })
    }
}

/// The takes one fan-out of `file`'s columns takes on `threads` threads: [`AHEAD`] where the
/// file is local and there are several threads (a remote file's reads are planned a take at a
/// time by its read-ahead window), else one.
fn takes_a_fan_out(file: &RootFile, threads: usize) -> usize {
    if threads > 1 && !file.is_remote() {
        AHEAD
    } else {
        1
    }
}

/// A column's cursor as a fan-out takes from it.
trait Column {
    /// The first entry not yet taken.
    fn next_entry(&self) -> u64;
    /// The next `n` entries' values (fewer at the end); an RNTuple leaf's pages from `store`
    /// where it holds them.
    fn take_from(&mut self, n: usize, store: Option<&PageStore>) -> Result<Values, RootError>;
}

impl Column for BranchCursor<'_> {
    fn next_entry(&self) -> u64 {
        BranchCursor::next_entry(self)
    }

    fn take_from(&mut self, n: usize, _: Option<&PageStore>) -> Result<Values, RootError> {
        self.take_values(n)
    }
}

impl Column for FieldCursor<'_> {
    fn next_entry(&self) -> u64 {
        FieldCursor::next_entry(self)
    }

    fn take_from(&mut self, n: usize, store: Option<&PageStore>) -> Result<Values, RootError> {
        self.take_with(n, store).map(Values::from)
    }
}

/// The entries `cursor` has not yet taken before `stop`.
fn entries_before(stop: u64, cursor: &impl Column) -> usize {
    usize::try_from(stop.saturating_sub(cursor.next_entry())).unwrap_or(usize::MAX)
}

/// The entries a fan-out of `takes` takes of `n` plans its baskets or pages for: none past
/// `stop`, and at least this take's.
fn planned(n: usize, takes: usize, first: Option<&impl Column>, stop: u64) -> usize {
    let left = first.map_or(0, |c| entries_before(stop, c));
    n.saturating_mul(takes).min(left).max(n)
}

/// A column's job in a fan-out: this take's `n` entries, then, while nothing fails and
/// entries are left before `stop`, the values of up to `takes - 1` more takes into `ahead`.
fn taken_ahead(
    cursor: &mut impl Column,
    ahead: &mut Ahead,
    n: usize,
    takes: usize,
    stop: u64,
    store: Option<&PageStore>,
) -> Result<Values, RootError> {
    let first = handed_out(cursor, ahead, n, store);
    while first.is_ok() && ahead.len() + 1 < takes {
        let m = entries_before(stop, cursor);
        if m == 0 {
            break;
        }
        let next = cursor.take_from(n.min(m), store);
        let failed = next.is_err();
        ahead.push_back(next);
        if failed {
            break;
        }
    }
    first
}

/// Every column's next `n` entries, where each has values taken ahead.
fn all_handed_out(
    cursors: &mut [impl Column],
    ahead: &mut [Ahead],
    n: usize,
) -> Vec<Result<Values, RootError>> {
    cursors
        .iter_mut()
        .zip(ahead)
        .map(|(c, a)| handed_out(c, a, n, None))
        .collect()
}

/// The next `n` entries of a column whose values were taken `ahead`: the first taken, cut
/// where it holds more, joined to what the cursor gives after it where it holds fewer. An
/// error taken ahead is given by the take it came in.
fn handed_out(
    cursor: &mut impl Column,
    ahead: &mut Ahead,
    n: usize,
    store: Option<&PageStore>,
) -> Result<Values, RootError> {
    let mut out: Option<Values> = None;
    let mut left = n;
    while left > 0 {
        let Some(next) = ahead.pop_front() else {
            let rest = cursor.take_from(left, store)?;
            return Ok(match out {
                Some(mut o) => {
                    o.append(rest);
                    o
                }
                None => rest,
            });
        };
        let mut values = next?;
        let have = values.counts.len();
        if have == 0 {
            // The column's end.
            return Ok(out.unwrap_or(values));
        }
        if have > left {
            let head = values.split_to(left);
            ahead.push_front(Ok(values));
            values = head;
        }
        left -= values.counts.len();
        match &mut out {
            Some(o) => o.append(values),
            None => out = Some(values),
        }
    }
    match out {
        Some(o) => Ok(o),
        None => cursor.take_from(0, store),
    }
}

/// What one [`ColumnReader::take`] read: each request's values, in request order, where the
/// reader decoded them (requests that name one column share its values, not copies of them).
#[derive(Debug)]
pub struct Taken {
    columns: Vec<Values>,
    of_request: Vec<usize>,
}

impl Taken {
    /// The number of requests.
    pub fn len(&self) -> usize {
        self.of_request.len()
    }

    /// True when there were no requests.
    pub fn is_empty(&self) -> bool {
        self.of_request.is_empty()
    }

    /// Request `i`'s values.
    pub fn get(&self, i: usize) -> Option<&Values> {
        self.of_request.get(i).map(|&c| &self.columns[c])
    }

    /// Every request's values, in request order.
    pub fn iter(&self) -> impl Iterator<Item = &Values> {
        self.of_request.iter().map(|&c| &self.columns[c])
    }
}

impl std::ops::Index<usize> for Taken {
    type Output = Values;

    fn index(&self, i: usize) -> &Values {
        &self.columns[self.of_request[i]]
    }
}

#[cfg(test)]
mod tests {
    use super::distinct;

    #[test]
    fn a_name_asked_twice_is_one_column() {
        let (firsts, of) = distinct(&["a", "b", "a", "c", "b"], |x, y| x == y);
        assert_eq!(firsts, vec![0, 1, 3]);
        assert_eq!(of, vec![0, 1, 0, 2, 1]);
    }
}
