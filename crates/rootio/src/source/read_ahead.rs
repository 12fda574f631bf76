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
            // The parts overlapping `at..end`.
            let first = filling.parts.partition_point(|(start, _)| *start <= at) - 1;
            filling.parts[first..]
                .iter()
                .take_while(|(start, _)| *start < end)
                .cloned()
                .collect()
        };
        if let [(start, part)] = &parts[..] {
            return Some(Bytes::Shared(Arc::clone(part), at - start..end - start));
        }
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
mod tests {
    use super::*;

    /// [`ReadAhead::read`] into `buf`: whether the bytes were served.
    fn read_into(
        ahead: &ReadAhead,
        buf: &mut [u8],
        offset: u64,
        start: impl FnOnce(Unfetched),
    ) -> bool {
        let read = ahead.read(offset, buf.len(), start);
        if let Some(bytes) = &read {
            buf.copy_from_slice(bytes);
        }
        read.is_some()
    }

    /// A fetch of `file`'s bytes that counts its requests in `log`, answering each in pieces
    /// of `piece` bytes.
    fn fetch_of<'a>(
        file: &'a [u8],
        log: &'a Mutex<Vec<Vec<(u64, u64)>>>,
        piece: usize,
    ) -> impl Fetch + 'a {
        move |ranges: &[(u64, u64)], sink: &mut Sink<'_>| {
            log.lock().expect("lock").push(ranges.to_vec());
            sink.restart();
            let bytes: Vec<u8> = ranges
                .iter()
                .flat_map(|&(o, n)| file[o as usize..(o + n) as usize].to_vec())
                .collect();
            for part in bytes.chunks(piece) {
                sink.take(part.to_vec());
            }
            Ok(())
        }
    }

    #[test]
    fn planned_ranges_are_served_from_one_fetch_of_their_group_and_others_are_not() {
        let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let ahead = ReadAhead::default();
        ahead.plan(vec![vec![(100, 50), (400, 10)], vec![(1000, 100)]]);
        let log = Mutex::new(Vec::new());
        // Answers in pieces of 7 bytes: reads spanning pieces are put together.
        let fetch = fetch_of(&file, &log, 7);
        let mut buf = [0u8; 5];
        for (offset, expect) in [
            (402, true),
            (120, true),
            (1050, true),
            (148, false),
            (0, false),
        ] {
            let served = read_into(&ahead, &mut buf, offset, |u| u.fetch(&fetch));
            assert_eq!(served, expect, "{offset}");
            if expect {
                assert_eq!(buf[..], file[offset as usize..offset as usize + 5]);
            }
        }
        // The first read fetched both groups at once; the others read what was fetched.
        assert_eq!(log.lock().expect("lock").len(), 2, "one fetch per group");
        // A group whose fetch failed serves nothing, and is not asked for again.
        ahead.plan(vec![vec![(0, 10)]]);
        let failing = |_: &[(u64, u64)], _: &mut Sink<'_>| Err(io::ErrorKind::TimedOut.into());
        assert!(!read_into(&ahead, &mut buf, 0, |u| u.fetch(failing)));
        assert!(!read_into(&ahead, &mut buf, 0, |u| u.fetch(&fetch)));
        assert_eq!(log.lock().expect("lock").len(), 2);
    }

    #[test]
    fn a_read_within_one_part_of_the_answer_shares_it_and_one_across_parts_is_put_together() {
        let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let ahead = ReadAhead::default();
        ahead.plan(vec![vec![(1000, 3000)]]);
        let log = Mutex::new(Vec::new());
        // Answered in parts of 1000 bytes: 1000..2000, 2000..3000, 3000..4000.
        let fetch = fetch_of(&file, &log, 1000);
        let within = ahead.read(2100, 800, |u| u.fetch(&fetch)).expect("planned");
        assert!(matches!(within, Bytes::Shared(..)), "not copied");
        assert_eq!(within[..], file[2100..2900]);
        let across = ahead
            .read(1500, 2000, |_| panic!("fetched"))
            .expect("planned");
        assert!(matches!(across, Bytes::Owned(_)));
        assert_eq!(across[..], file[1500..3500]);
        assert_eq!(within.into_vec(), file[2100..2900]);
    }

    #[test]
    fn an_answer_is_kept_cut_where_planned_reads_start_and_end() {
        let file: Vec<u8> = (0..=255u8).cycle().take(2_100_000).collect();
        let ahead = ReadAhead::default();
        // One request for three planned reads and a gap (as HTTP merges them); the second
        // read crosses where a piece of the answer would end were it not cut there.
        let reads = [
            (0u64, 700_000usize),
            (700_000, 700_000),
            (1_500_000, 600_000),
        ];
        const { assert!(PIECE < 700_000 && PIECE_MAX > 700_000) };
        let _lazily = ahead.plan_keeping(&reads, |new| {
            assert_eq!(new, reads);
            vec![vec![(0, 2_100_000)]]
        });
        let fetch = |ranges: &[(u64, u64)], sink: &mut Sink<'_>| {
            let (o, n) = (ranges[0].0 as usize, ranges[0].1 as usize);
            sink.read_from(&mut &file[o..o + n], n)
        };
        for (o, n) in reads {
            let got = ahead.read(o, n, |u| u.fetch(fetch)).expect("planned");
            assert!(
                matches!(got, Bytes::Shared(..)),
                "the read at {o} is one part"
            );
            assert_eq!(got[..], file[o as usize..o as usize + n]);
        }
    }

    #[test]
    fn small_planned_reads_share_parts_of_the_answer_each_whole() {
        let file: Vec<u8> = (0..=255u8).cycle().take(2_000_000).collect();
        let ahead = ReadAhead::default();
        // 1,000 reads of 1,999 bytes, one byte apart, in one request.
        let reads: Vec<(u64, usize)> = (0..1000).map(|i| (i * 2000, 1999)).collect();
        let _lazily = ahead.plan_keeping(&reads, |_| vec![vec![(0, 2_000_000)]]);
        let fetch = |ranges: &[(u64, u64)], sink: &mut Sink<'_>| {
            sink.read_from(&mut &file[..], ranges[0].1 as usize)
        };
        for &(o, n) in &reads {
            let got = ahead.read(o, n, |u| u.fetch(fetch)).expect("planned");
            assert!(
                matches!(got, Bytes::Shared(..)),
                "the read at {o} is within one part"
            );
            assert_eq!(got[..], file[o as usize..o as usize + n]);
        }
        // Taken together into parts of about `PIECE`, not one part a read.
        let Plan { groups, .. } = &*ahead.plan.lock().expect("lock");
        let parts = groups[0].lock().parts.len();
        assert!(parts <= 2_000_000 / (PIECE - 2000) + 1, "{parts} parts");
    }

    #[test]
    fn a_read_is_served_as_soon_as_its_bytes_arrive_and_a_retry_adds_nothing_twice() {
        let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let ahead = ReadAhead::default();
        ahead.plan(vec![vec![(0, 1000)]]);
        let (first_half, go_on) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        // A fetch that breaks after 600 bytes, then, tried again, sends the first 500 again
        // and stops until told to go on.
        let fetch = |ranges: &[(u64, u64)], sink: &mut Sink<'_>| {
            assert_eq!(ranges, [(0, 1000)]);
            sink.restart();
            sink.take(file[..600].to_vec());
            sink.restart();
            sink.take(file[..500].to_vec());
            first_half.wait();
            go_on.wait();
            sink.take(file[500..1000].to_vec());
            Ok(())
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut buf = [0u8; 100];
                assert!(read_into(&ahead, &mut buf, 900, |u| u.fetch(fetch)));
                assert_eq!(buf[..], file[900..1000]);
            });
            first_half.wait();
            // The first 600 bytes are here while the rest is on its way.
            let mut early = [0u8; 200];
            assert!(read_into(&ahead, &mut early, 350, |_| panic!(
                "being fetched"
            )));
            assert_eq!(early[..], file[350..550]);
            go_on.wait();
        });
        let Plan { groups, .. } = &*ahead.plan.lock().expect("lock");
        assert_eq!(groups[0].lock().held, 1000, "nothing taken twice");
    }

    #[test]
    fn bytes_fetched_with_the_open_are_served_and_the_rest_fetched_once() {
        let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let ahead = ReadAhead::default();
        let tail = ahead.keep_ends_fetched(file[..100].to_vec(), vec![(9_000, 1_000)]);
        let log = Mutex::new(Vec::new());
        let fetch = fetch_of(&file, &log, 300);
        let mut buf = [0u8; 10];
        assert!(read_into(&ahead, &mut buf, 50, |u| u.fetch(&fetch)));
        assert_eq!(buf[..], file[50..60]);
        assert!(log.lock().expect("lock").is_empty(), "the head was fetched");
        tail.fetch(&fetch);
        assert!(read_into(&ahead, &mut buf, 9_500, |u| u.fetch(&fetch)));
        assert_eq!(buf[..], file[9_500..9_510]);
        assert_eq!(*log.lock().expect("lock"), [vec![(9_000, 1_000)]]);
    }

    #[test]
    fn a_file_s_ends_and_small_reads_are_kept_for_its_next_reader() {
        let file: Vec<u8> = (0..=255u8).cycle().take(1_000_000).collect();
        let log = Mutex::new(Vec::new());
        let fetch = fetch_of(&file, &log, 1000);
        let ahead = ReadAhead::default();
        ahead.keep_ends(ends(file.len() as u64));
        let mut buf = [0u8; 10];
        assert!(read_into(&ahead, &mut buf, 5, |u| u.fetch(&fetch)));
        // A reader's plan leaves the ends out, and replaces none of them.
        let _lazily = ahead.plan_keeping(&[(100, 10), (500_000, 100)], |r| {
            assert_eq!(r, [(500_000, 100)], "the ends are held already");
            vec![vec![(500_000, 100)]]
        });
        assert!(read_into(&ahead, &mut buf, 999_000, |u| u.fetch(&fetch)));
        assert!(read_into(&ahead, &mut buf, 500_010, |u| u.fetch(&fetch)));
        // A small read outside the plan is kept; a large one is not.
        ahead.keep_read(300_000, &file[300_000..300_117]);
        ahead.keep_read(400_000, &file[400_000..400_000 + KEPT_READ + 1]);
        ahead.drop_plan();
        // The next reader: the ends and the small read, without a request; the plan is gone.
        assert!(read_into(&ahead, &mut buf, 300_100, |_| panic!("kept")));
        assert_eq!(buf[..], file[300_100..300_110]);
        assert!(read_into(&ahead, &mut buf, 999_990, |_| panic!("kept")));
        assert!(!read_into(&ahead, &mut buf, 400_000, |_| panic!(
            "not kept"
        )));
        assert!(!read_into(&ahead, &mut buf, 500_010, |_| panic!("dropped")));
        assert_eq!(
            log.lock().expect("lock").len(),
            2,
            "the ends once, the plan once"
        );
    }

    #[test]
    fn ends_whose_request_failed_are_asked_for_again_by_the_next_reader() {
        let file: Vec<u8> = (0..=255u8).cycle().take(1_000).collect();
        let ahead = ReadAhead::default();
        ahead.keep_ends(ends(file.len() as u64));
        let failing = |_: &[(u64, u64)], _: &mut Sink<'_>| Err(io::ErrorKind::TimedOut.into());
        let mut buf = [0u8; 10];
        assert!(!read_into(&ahead, &mut buf, 0, |u| u.fetch(failing)));
        assert!(!read_into(&ahead, &mut buf, 0, |_| panic!(
            "failed for this reader"
        )));
        ahead.drop_plan();
        let log = Mutex::new(Vec::new());
        assert!(read_into(&ahead, &mut buf, 0, |u| u.fetch(fetch_of(&file, &log, 64))));
        assert_eq!(buf[..], file[..10]);
    }

    #[test]
    fn a_new_plan_keeps_what_was_fetched_of_its_ranges() {
        let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let log = Mutex::new(Vec::new());
        let fetch = fetch_of(&file, &log, 64);
        let one_each = |r: &[(u64, usize)]| r.iter().map(|&(o, n)| vec![(o, n as u64)]).collect();
        let ahead = ReadAhead::default();
        let _lazily = ahead.plan_keeping(&[(0, 100), (100, 100)], one_each);
        let mut buf = [0u8; 10];
        assert!(read_into(&ahead, &mut buf, 150, |u| u.fetch(&fetch)));
        // The window moves on: (100, 100) stays fetched, (200, 100) is new, (0, 100) goes.
        let _lazily = ahead.plan_keeping(&[(100, 100), (200, 100)], one_each);
        assert!(read_into(&ahead, &mut buf, 120, |u| u.fetch(&fetch)));
        assert!(read_into(&ahead, &mut buf, 250, |u| u.fetch(&fetch)));
        assert!(!read_into(&ahead, &mut buf, 50, |u| u.fetch(&fetch)));
        assert_eq!(
            *log.lock().expect("lock"),
            [vec![(100, 100)], vec![(200, 100)]],
            "each range fetched once; (0, 100) never needed"
        );
        assert_eq!(buf[..], file[250..260]);
    }

    #[test]
    fn a_file_s_ends_are_read_first() {
        assert_eq!(ends(1000), [(0, 1000)]);
        assert_eq!(ends(1 << 20), [(0, ENDS), ((1 << 20) - ENDS, ENDS)]);
    }
}
