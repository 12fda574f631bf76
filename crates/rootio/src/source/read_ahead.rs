//! The read-ahead of a remote file: byte ranges planned ahead of the reads that need them,
//! fetched in a few requests in the background and served as their bytes arrive, and what a
//! file keeps for its next reader (its ends, its small reads).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

use super::Bytes;

/// Byte ranges planned ahead of the reads that need them, in groups each fetched in one
/// request (one HTTP range, one XRootD vector read), and kept until the next plan. A group's
/// bytes serve reads as they arrive: a read waits for its own bytes, not for its whole request
/// (decoding starts while the rest of a large request is on its way). A group whose request
/// failed is not tried again: the reads of what it did not bring then go alone and fail by
/// name.
///
/// Beside the plan, bytes kept for every reader of the file while it stays open: its two ends
/// (header, keys, streamer info, an RNTuple's anchor and footer), and small reads outside any
/// plan (a directory's keys, a tree's own record), at most [`KEPT_READS`] bytes of those. A
/// file read again pays no round trip for what it read before the data.
#[derive(Debug, Default)]
pub(super) struct ReadAhead {
    plan: Mutex<Plan>,
    kept: Mutex<Kept>,
}

/// What a file keeps for its readers ([`ReadAhead`]).
#[derive(Debug, Default)]
struct Kept {
    /// The ends and the small reads, as a plan of their groups.
    plan: Plan,
    /// Bytes of the small reads.
    small_reads: usize,
}

/// A read outside any plan at most this long is kept ([`ReadAhead`]).
const KEPT_READ: usize = 64 * 1024;
/// Bytes of reads outside any plan kept at most, per file.
const KEPT_READS: usize = 1024 * 1024;

#[derive(Debug, Default)]
struct Plan {
    /// Every planned range, sorted by offset, not overlapping.
    pieces: Vec<Piece>,
    groups: Vec<Arc<Group>>,
}

impl Plan {
    /// The plan of `groups`, its pieces sorted.
    fn of(groups: Vec<Arc<Group>>) -> Plan {
        let mut pieces = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            let mut at = 0usize;
            for &(offset, len) in &group.ranges {
                pieces.push(Piece {
                    offset,
                    len,
                    group: g,
                    at,
                });
                at += len as usize;
            }
        }
        pieces.sort_unstable_by_key(|p| p.offset);
        Plan { pieces, groups }
    }

    /// Adds `group`, its pieces put in order.
    fn add(&mut self, group: Arc<Group>) {
        let mut at = 0usize;
        for &(offset, len) in &group.ranges {
            let i = self.pieces.partition_point(|p| p.offset <= offset);
            let piece = Piece {
                offset,
                len,
                group: self.groups.len(),
                at,
            };
            self.pieces.insert(i, piece);
            at += len as usize;
        }
        self.groups.push(group);
    }

    /// The planned range holding the bytes `start..end`, if one does.
    fn piece_holding(&self, start: u64, end: u64) -> Option<Piece> {
        let i = self.pieces.partition_point(|p| p.offset <= start);
        i.checked_sub(1)
            .map(|i| self.pieces[i])
            .filter(|p| end <= p.offset + p.len)
    }
}

#[derive(Debug, Clone, Copy)]
struct Piece {
    offset: u64,
    len: u64,
    group: usize,
    /// Where its bytes start in its group's.
    at: usize,
}

/// Ranges fetched in one request, their bytes kept as they arrive.
#[derive(Debug)]
struct Group {
    /// Its ranges (`offset`, `len`), in order.
    ranges: Vec<(u64, u64)>,
    /// Their bytes in all.
    len: usize,
    /// Where, in its bytes, each range and each read planned in them starts and ends, in
    /// order: the answer is kept in parts cut there ([`Group::part_from`]), so that a planned
    /// read no longer than [`PIECE_MAX`] is one part, served without a copy.
    cuts: Vec<usize>,
    filling: Mutex<Filling>,
    /// Notified as bytes arrive and when the request ends.
    arrived: Condvar,
}

#[derive(Debug, Default)]
struct Filling {
    stage: Stage,
    /// Its ranges' bytes, one after the other, as far as they have arrived: each part with
    /// where it starts.
    parts: Vec<(usize, Arc<Vec<u8>>)>,
    /// Bytes arrived.
    held: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Not asked for yet.
    #[default]
    Planned,
    /// Its request is on its way.
    Fetching,
    /// Its request ended: `held` says how far it came.
    Ended,
}

impl ReadAhead {
    /// Plans `groups` (each a list of sorted, disjoint ranges `(offset, len)`; no range in
    /// two groups), dropping the last plan.
    #[cfg(test)]
    fn plan(&self, groups: Vec<Vec<(u64, u64)>>) {
        let groups = groups.into_iter().map(Group::new).collect();
        *lock(&self.plan) = Plan::of(groups);
    }

    /// Keeps the file's two ends (`ranges`, one request), to be fetched by the first read
    /// that needs them.
    pub(super) fn keep_ends(&self, ranges: Vec<(u64, u64)>) {
        lock(&self.kept).plan = Plan::of(vec![Group::new(ranges)]);
    }

    /// Keeps the file's start, `fetched` (its bytes from 0), and the one-range groups of the
    /// rest of its ends, `ranges`, not fetched yet (returned).
    pub(super) fn keep_ends_fetched(&self, fetched: Vec<u8>, ranges: Vec<(u64, u64)>) -> Unfetched {
        let rest: Vec<Arc<Group>> = ranges.into_iter().map(|r| Group::new(vec![r])).collect();
        let groups = std::iter::once(Group::fetched(0, fetched))
            .chain(rest.iter().cloned())
            .collect();
        lock(&self.kept).plan = Plan::of(groups);
        Unfetched(rest)
    }

    /// Keeps `bytes`, read at `offset` outside any plan, if they are few enough
    /// ([`KEPT_READ`], [`KEPT_READS`]).
    pub(super) fn keep_read(&self, offset: u64, bytes: &[u8]) {
        let mut kept = lock(&self.kept);
        if bytes.len() > KEPT_READ || kept.small_reads + bytes.len() > KEPT_READS {
            return;
        }
        kept.plan.add(Group::fetched(offset, bytes.to_vec()));
        kept.small_reads += bytes.len();
    }

    /// Drops the plan (a reader is done with the file); what is kept stays, a kept group whose
    /// request failed planned again for the next reader.
    pub(super) fn drop_plan(&self) {
        *lock(&self.plan) = Plan::default();
        let mut kept = lock(&self.kept);
        let failed = |g: &Arc<Group>| {
            let filling = g.lock();
            filling.stage == Stage::Ended && filling.held < g.len
        };
        if kept.plan.groups.iter().any(failed) {
            let groups = kept
                .plan
                .groups
                .iter()
                .map(|g| match failed(g) {
                    true => Group::new(g.ranges.clone()),
                    false => Arc::clone(g),
                })
                .collect();
            kept.plan = Plan::of(groups);
        }
    }

    /// The planned groups not asked for yet.
    pub(super) fn unfetched(&self) -> Unfetched {
        let planned = |plan: &Plan| -> Vec<Arc<Group>> {
            plan.groups
                .iter()
                .filter(|g| g.lock().stage == Stage::Planned)
                .cloned()
                .collect()
        };
        let mut groups = planned(&lock(&self.kept).plan);
        groups.extend(planned(&lock(&self.plan)));
        Unfetched(groups)
    }

    /// Plans the reads of `ranges` (`offset`, `len`), keeping what the last plan holds of them:
    /// a range inside a planned group's range is read from that group (fetched, in flight or
    /// not yet), the others are grouped by `group` into new requests; groups holding none of
    /// `ranges` are dropped. A reader that plans a window of chunks ahead each time so pays
    /// only for the chunk that entered the window.
    pub(super) fn plan_keeping(
        &self,
        ranges: &[(u64, usize)],
        group: impl FnOnce(&[(u64, usize)]) -> Vec<Vec<(u64, u64)>>,
    ) -> Unfetched {
        let ranges: Vec<(u64, usize)> = {
            let kept = lock(&self.kept);
            ranges
                .iter()
                .filter(|&&(o, n)| n > 0 && kept.plan.piece_holding(o, o + n as u64).is_none())
                .copied()
                .collect()
        };
        let mut plan = lock(&self.plan);
        let mut kept = vec![false; plan.groups.len()];
        let mut new = Vec::new();
        for &(offset, len) in &ranges {
            match plan.piece_holding(offset, offset + len as u64) {
                Some(p) => kept[p.group] = true,
                None => new.push((offset, len)),
            }
        }
        let mut reads = new.clone();
        reads.sort_unstable();
        let added: Vec<Arc<Group>> = group(&new)
            .into_iter()
            .map(|ranges| Group::with_reads(ranges, &reads))
            .collect();
        let groups = plan
            .groups
            .iter()
            .zip(&kept)
            .filter(|(_, k)| **k)
            .map(|(g, _)| Arc::clone(g))
            .chain(added.iter().cloned())
            .collect();
        *plan = Plan::of(groups);
        Unfetched(added)
    }

    /// The `len` bytes at `offset` when a planned range holds them, once they arrive. When
    /// its group has not been asked for, `start` is given it and the plan's next groups not
    /// yet asked for, up to [`FETCH_AT_ONCE`] requests (a link's latency paid once for them),
    /// to fetch in the background. `None` when no range holds the bytes or its group's request
    /// ended without them.
    pub(super) fn read(
        &self,
        offset: u64,
        len: usize,
        start: impl FnOnce(Unfetched),
    ) -> Option<Bytes> {
        let end = offset + len as u64;
        let in_plan = |plan: &Plan| {
            plan.piece_holding(offset, end).map(|p| {
                let group = Arc::clone(&plan.groups[p.group]);
                let planned = |g: &Arc<Group>| g.lock().stage == Stage::Planned;
                // Not asked for yet: this group, then the plan's next ones not asked for.
                let along: Vec<Arc<Group>> = if planned(&group) {
                    plan.groups[p.group..]
                        .iter()
                        .filter(|g| planned(g))
                        .take(FETCH_AT_ONCE)
                        .cloned()
                        .collect()
                } else {
                    Vec::new()
                };
                (p, group, along)
            })
        };
        let kept = in_plan(&lock(&self.kept).plan);
        let found = kept.or_else(|| in_plan(&lock(&self.plan)));
        let (piece, group, along) = found?;
        if !along.is_empty() {
            start(Unfetched(along));
        }
        group.bytes(piece.at + (offset - piece.offset) as usize, len)
    }
}

/// `mutex`'s value, also after a thread panicked holding it.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The bytes at a file's start and end read with its first read (a ROOT file's header, keys,
/// streamer info, an RNTuple's anchor and footer): one round trip for what would be several.
pub(super) const ENDS: u64 = 128 * 1024;

/// The ranges at the start and end of a file of `size` bytes a reader reads first.
pub(super) fn ends(size: u64) -> Vec<(u64, u64)> {
    if size <= 2 * ENDS {
        vec![(0, size)]
    } else {
        vec![(0, ENDS), (size - ENDS, ENDS)]
    }
}

/// How a group's request is sent: its ranges, and where the answer's bytes go as they come.
pub(super) trait Fetch: Fn(&[(u64, u64)], &mut Sink<'_>) -> io::Result<()> + Sync {}
impl<F: Fn(&[(u64, u64)], &mut Sink<'_>) -> io::Result<()> + Sync> Fetch for F {}

/// Groups just planned, not yet asked for.
#[must_use = "fetch them, or they are fetched when a read first needs them"]
pub(super) struct Unfetched(Vec<Arc<Group>>);

impl Unfetched {
    /// Fetches every group with `fetch`, up to [`FETCH_AT_ONCE`] at a time, in plan order (a
    /// read needing one being fetched waits for its bytes; a failed one is left for the
    /// reads to fetch alone).
    pub(super) fn fetch(self, fetch: impl Fetch) {
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..FETCH_AT_ONCE.min(self.0.len()) {
                s.spawn(|| {
                    while let Some(g) = self.0.get(next.fetch_add(1, Ordering::Relaxed)) {
                        g.fill(&fetch);
                    }
                });
            }
        });
    }

    /// Whether there is nothing to fetch.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Group {
    /// A group of `ranges`, not asked for.
    fn new(ranges: Vec<(u64, u64)>) -> Arc<Group> {
        Group::with_reads(ranges, &[])
    }

    /// A group of `ranges`, not asked for, for the planned `reads` (`offset`, `len`; sorted)
    /// among others: its answer is cut where each of them inside its ranges starts and ends.
    fn with_reads(ranges: Vec<(u64, u64)>, reads: &[(u64, usize)]) -> Arc<Group> {
        let mut cuts = Vec::new();
        let mut at = 0usize;
        for &(offset, len) in &ranges {
            let end = offset + len;
            let first = reads.partition_point(|r| r.0 < offset);
            for &(o, n) in reads[first..].iter().take_while(|r| r.0 < end) {
                let start = at + (o - offset) as usize;
                cuts.extend([start, (start + n).min(at + len as usize)]);
            }
            at += len as usize;
            cuts.push(at);
        }
        cuts.sort_unstable();
        cuts.dedup();
        Arc::new(Group {
            ranges,
            len: at,
            cuts,
            filling: Mutex::new(Filling::default()),
            arrived: Condvar::new(),
        })
    }

    /// How many of its bytes from byte `at` the next part of its answer holds: up to the
    /// first cut after `at` when that is [`PIECE`] or more away (a read of its own, at most
    /// [`PIECE_MAX`]), else up to the last cut within [`PIECE`] (small reads together, each
    /// whole); [`PIECE`] where no cut comes.
    fn part_from(&self, at: usize) -> usize {
        let next = self.cuts.partition_point(|&c| c <= at);
        match self.cuts.get(next) {
            None => PIECE,
            Some(&first) if first - at >= PIECE => (first - at).min(PIECE_MAX),
            Some(_) => {
                let within = self.cuts.partition_point(|&c| c <= at + PIECE);
                self.cuts[within - 1] - at
            }
        }
    }

    /// A group of the bytes `fetched` holds at `offset`.
    fn fetched(offset: u64, fetched: Vec<u8>) -> Arc<Group> {
        let group = Group::new(vec![(offset, fetched.len() as u64)]);
        {
            let mut filling = group.lock();
            filling.stage = Stage::Ended;
            filling.held = fetched.len();
            filling.parts.push((0, Arc::new(fetched)));
        }
        group
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Filling> {
        lock(&self.filling)
    }

    /// Fetches its bytes with `fetch`, unless another thread has asked for them.
    fn fill(&self, fetch: &impl Fetch) {
        {
            let mut filling = self.lock();
            if filling.stage != Stage::Planned {
                return;
            }
            filling.stage = Stage::Fetching;
        }
        let mut sink = Sink { group: self, at: 0 };
        let _failed_reads_go_alone = fetch(&self.ranges, &mut sink);
        self.lock().stage = Stage::Ended;
        self.arrived.notify_all();
    }

    /// Its `len` bytes from `at`, once they arrive: shared with the part of the answer that
    /// holds them all, else put together from the parts; `None` when its request ended
    /// without them.
    fn bytes(&self, at: usize, len: usize) -> Option<Bytes> {
        let end = at + len;
        let parts: Vec<(usize, Arc<Vec<u8>>)> = {
            let mut filling = self.lock();
            while filling.held < end {
                if filling.stage == Stage::Ended {
                    return None;
                }
                filling = self
                    .arrived
                    .wait(filling)
                    .unwrap_or_else(|p| p.into_inner());
            }
            // The parts overlapping `at..end`: most often one, shared as it is.
            let first = filling.parts.partition_point(|(start, _)| *start <= at) - 1;
            let (start, part) = &filling.parts[first];
            if end <= start + part.len() {
                return Some(Bytes::Shared(Arc::clone(part), at - start..end - start));
            }
            filling.parts[first..]
                .iter()
                .take_while(|(start, _)| *start < end)
                .cloned()
                .collect()
        };
        let mut bytes = Vec::with_capacity(len);
        for (start, part) in parts {
            let from = at.max(start);
            let to = end.min(start + part.len());
            bytes.extend_from_slice(&part[from - start..to - start]);
        }
        Some(Bytes::Owned(bytes))
    }
}

/// Where a request's answer goes as it comes: its group's bytes, in order. A request tried
/// again starts over ([`Sink::restart`]); bytes its group holds already are not taken twice.
pub(super) struct Sink<'a> {
    group: &'a Group,
    /// Bytes of the answer this try has given.
    at: usize,
}

impl Sink<'_> {
    /// A new try of the request: its answer comes again from the start.
    pub(super) fn restart(&mut self) {
        self.at = 0;
    }

    /// The answer's next `len` bytes, read from `from` a part at a time (cut where planned
    /// reads start and end, [`Group::part_from`]), each served to the reads waiting for it as
    /// it comes.
    pub(super) fn read_from(&mut self, from: &mut dyn io::Read, mut len: usize) -> io::Result<()> {
        while len > 0 {
            let mut piece = vec![0u8; len.min(self.group.part_from(self.at))];
            from.read_exact(&mut piece)?;
            len -= piece.len();
            self.take(piece);
        }
        Ok(())
    }

    /// The answer's next bytes. Bytes past the group's end are dropped (the request's own
    /// length check fails it).
    fn take(&mut self, bytes: Vec<u8>) {
        let (start, end) = (self.at, self.at + bytes.len());
        self.at = end;
        let mut filling = self.group.lock();
        let held = filling.held;
        if end <= held || start > held || held >= self.group.len {
            return;
        }
        let mut part = if start < held {
            bytes[held - start..].to_vec()
        } else {
            bytes
        };
        part.truncate(self.group.len - held);
        filling.held += part.len();
        filling.parts.push((held, Arc::new(part)));
        drop(filling);
        self.group.arrived.notify_all();
    }
}

/// The most requests one read sends at once (its own group's and the next ones').
const FETCH_AT_ONCE: usize = 4;

/// The bytes of a request's answer read in at a time, each part then served to the reads
/// waiting for it: small planned reads are taken together up to this, a longer one alone
/// (up to [`PIECE_MAX`]), so that a read is most often one part and waits for few bytes past
/// its own.
const PIECE: usize = 256 * 1024;
/// The most bytes one part of an answer holds.
const PIECE_MAX: usize = 1024 * 1024;

#[cfg(test)]
mod tests;
