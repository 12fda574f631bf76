//! What every network protocol's reads share: the settings (timeout, retries, token), retries
//! with backoff, and the read-ahead of planned byte ranges.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Bytes received from remote files by this process.
static RECEIVED: AtomicU64 = AtomicU64::new(0);

/// Counts `n` bytes received from a remote file.
pub(super) fn count_received(n: usize) {
    RECEIVED.fetch_add(n as u64, Ordering::Relaxed);
}

/// Bytes received from remote files by this process so far (what a progress display turns
/// into a rate).
pub fn network_bytes_received() -> u64 {
    RECEIVED.load(Ordering::Relaxed)
}

/// How a remote file is read: from the environment, once per file.
#[derive(Debug, Clone)]
pub(super) struct NetSettings {
    /// Per request (`GNN4C_NET_TIMEOUT_S`, default 60 s).
    pub(super) timeout: Duration,
    /// Tries after the first (`GNN4C_NET_RETRIES`, default 3).
    pub(super) retries: u32,
    /// The WLCG bearer token, when one is found.
    pub(super) token: Option<String>,
}

impl NetSettings {
    pub(super) fn from_env() -> NetSettings {
        NetSettings {
            timeout: Duration::from_secs_f64(env_number("GNN4C_NET_TIMEOUT_S", 60.0).max(0.001)),
            retries: env_number("GNN4C_NET_RETRIES", 3.0).max(0.0) as u32,
            token: bearer_token(),
        }
    }

    /// `request`, tried again after a backoff while it fails in a way that may pass.
    pub(super) fn with_retries<T>(
        &self,
        mut request: impl FnMut() -> io::Result<T>,
    ) -> io::Result<T> {
        let mut attempt = 0;
        loop {
            match request() {
                Err(e) if attempt < self.retries && retriable(&e) => {
                    attempt += 1;
                    std::thread::sleep(backoff(attempt));
                }
                Err(e) if attempt > 0 => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{e} (after {} tries)", attempt + 1),
                    ));
                }
                result => return result,
            }
        }
    }
}

/// Whether a failed request may succeed when tried again: the connection failed, broke or
/// timed out, or the server was busy or failing.
pub(super) fn retriable(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted
            | ConnectionReset
            | ConnectionRefused
            | TimedOut
            | UnexpectedEof
            | BrokenPipe
            | WouldBlock
            | ResourceBusy
    )
}

/// The wait before try `attempt` + 1: 0.5 s, 1 s, 2 s, … (at most 8 s).
pub(super) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(250 << attempt.min(5))
}

/// A number from the environment variable `name`, else `default`.
fn env_number(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .unwrap_or(default)
}

/// The WLCG bearer token (WLCG Bearer Token Discovery): `BEARER_TOKEN`, the file
/// `BEARER_TOKEN_FILE` names, `$XDG_RUNTIME_DIR/bt_u$UID`, then `/tmp/bt_u$UID`.
fn bearer_token() -> Option<String> {
    let clean = |t: String| Some(t.trim().to_owned()).filter(|t| !t.is_empty());
    if let Ok(t) = std::env::var("BEARER_TOKEN") {
        return clean(t);
    }
    if let Ok(path) = std::env::var("BEARER_TOKEN_FILE") {
        return std::fs::read_to_string(path).ok().and_then(clean);
    }
    let uid = user_id()?;
    let runtime = std::env::var("XDG_RUNTIME_DIR")
        .ok()
        .map(|d| Path::new(&d).join(format!("bt_u{uid}")));
    runtime
        .into_iter()
        .chain([Path::new("/tmp").join(format!("bt_u{uid}"))])
        .find_map(|p| std::fs::read_to_string(p).ok().and_then(clean))
}

/// The user's id (the owner of `/proc/self`), on Unix.
pub(super) fn user_id() -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self").ok().map(|m| m.uid())
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// `ranges` (`offset`, `len`) as the fewest spans (`offset`, `len`) covering them, ranges
/// closer than `gap` merged, none longer than `max` unless one range is.
pub(super) fn coalesce(ranges: &[(u64, usize)], gap: u64, max: u64) -> Vec<(u64, u64)> {
    let mut sorted: Vec<(u64, u64)> = ranges
        .iter()
        .filter(|r| r.1 > 0)
        .map(|&(o, n)| (o, o.saturating_add(n as u64)))
        .collect();
    sorted.sort_unstable();
    let mut spans: Vec<(u64, u64)> = Vec::new();
    for (start, end) in sorted {
        match spans.last_mut() {
            Some(last)
                if start <= last.1.saturating_add(gap) && end.max(last.1) - last.0 <= max =>
            {
                last.1 = last.1.max(end);
            }
            _ => spans.push((start, end)),
        }
    }
    spans.into_iter().map(|(a, b)| (a, b - a)).collect()
}

/// Byte ranges planned ahead of the reads that need them, in groups each fetched in one
/// request (one HTTP range, one XRootD vector read) by the first read that needs one of its
/// ranges, and kept until the next plan. A group whose request failed is not tried again:
/// its reads then go alone and fail by name.
#[derive(Debug, Default)]
pub(super) struct ReadAhead {
    plan: Mutex<Plan>,
}

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

#[derive(Debug)]
struct Group {
    /// Its ranges (`offset`, `len`), in order.
    ranges: Vec<(u64, u64)>,
    /// Its ranges' bytes, one after the other; `None` when the request failed.
    bytes: OnceLock<Option<Vec<u8>>>,
}

impl ReadAhead {
    /// Plans `groups` (each a list of sorted, disjoint ranges `(offset, len)`; no range in
    /// two groups), dropping the last plan.
    pub(super) fn plan(&self, groups: Vec<Vec<(u64, u64)>>) {
        let groups = groups.into_iter().map(Group::new).collect();
        *self.plan.lock().unwrap_or_else(|p| p.into_inner()) = Plan::of(groups);
    }

    /// Plans the bytes `fetched` already holds at `offset`, and one-range groups of `ranges`
    /// not fetched yet (returned), dropping the last plan.
    pub(super) fn plan_fetched(
        &self,
        offset: u64,
        fetched: Vec<u8>,
        ranges: Vec<(u64, u64)>,
    ) -> Unfetched {
        let first = Group::new(vec![(offset, fetched.len() as u64)]);
        let _ = first.bytes.set(Some(fetched));
        let unfetched: Vec<Arc<Group>> = ranges.into_iter().map(|r| Group::new(vec![r])).collect();
        let groups = std::iter::once(first)
            .chain(unfetched.iter().cloned())
            .collect();
        *self.plan.lock().unwrap_or_else(|p| p.into_inner()) = Plan::of(groups);
        Unfetched(unfetched)
    }

    /// The planned groups not fetched yet.
    pub(super) fn unfetched(&self) -> Unfetched {
        let plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
        Unfetched(
            plan.groups
                .iter()
                .filter(|g| g.bytes.get().is_none())
                .cloned()
                .collect(),
        )
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
        let mut plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
        let mut kept = vec![false; plan.groups.len()];
        let mut new = Vec::new();
        for &(offset, len) in ranges.iter().filter(|r| r.1 > 0) {
            match plan.piece_holding(offset, offset + len as u64) {
                Some(p) => kept[p.group] = true,
                None => new.push((offset, len)),
            }
        }
        let added: Vec<Arc<Group>> = group(&new).into_iter().map(Group::new).collect();
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

    /// Fills `buf` with the bytes at `offset` when a planned range holds them, fetching its
    /// group with `fetch` (the group's ranges → their bytes, one after the other) if no read
    /// has yet — and with it, on threads of their own, the next groups of the plan not yet
    /// fetched, up to [`FETCH_AT_ONCE`] requests in flight (a link's latency paid once for
    /// them); `false` when no range holds them or the group's request failed.
    pub(super) fn read(
        &self,
        buf: &mut [u8],
        offset: u64,
        fetch: impl Fn(&[(u64, u64)]) -> io::Result<Vec<u8>> + Sync,
    ) -> bool {
        let end = offset + buf.len() as u64;
        let found = {
            let plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
            plan.piece_holding(offset, end).map(|p| {
                let group = Arc::clone(&plan.groups[p.group]);
                // Not fetched yet: this group, then the plan's next ones not yet fetched.
                let along = group.bytes.get().is_none().then(|| {
                    Unfetched(
                        plan.groups[p.group..]
                            .iter()
                            .filter(|g| g.bytes.get().is_none())
                            .take(FETCH_AT_ONCE)
                            .cloned()
                            .collect(),
                    )
                });
                (p, group, along)
            })
        };
        let Some((piece, group, along)) = found else {
            return false;
        };
        if let Some(along) = along {
            along.fetch(&fetch);
        }
        let Some(Some(bytes)) = group.bytes.get() else {
            return false;
        };
        let from = piece.at + (offset - piece.offset) as usize;
        buf.copy_from_slice(&bytes[from..from + buf.len()]);
        true
    }
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

/// Groups just planned, not yet fetched.
#[must_use = "fetch them, or they are fetched when a read first needs them"]
pub(super) struct Unfetched(Vec<Arc<Group>>);

impl Unfetched {
    /// Fetches every group with `fetch`, up to [`FETCH_AT_ONCE`] at a time, in plan order (a
    /// read needing one being fetched waits for it; a failed one is left for the reads to
    /// fetch alone).
    pub(super) fn fetch(self, fetch: impl Fn(&[(u64, u64)]) -> io::Result<Vec<u8>> + Sync) {
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
    /// A group of `ranges`, not fetched.
    fn new(ranges: Vec<(u64, u64)>) -> Arc<Group> {
        Arc::new(Group {
            ranges,
            bytes: OnceLock::new(),
        })
    }

    /// Its bytes, fetched with `fetch` unless another read has (or is doing so).
    fn fill(&self, fetch: impl Fn(&[(u64, u64)]) -> io::Result<Vec<u8>>) {
        self.bytes.get_or_init(|| {
            fetch(&self.ranges)
                .ok()
                .filter(|b| b.len() == self.ranges.iter().map(|r| r.1 as usize).sum())
        });
    }
}

/// The most requests one read sends at once (its own group's and the next ones').
const FETCH_AT_ONCE: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_ahead_merge_when_close_and_stay_bounded() {
        let ranges = [(1000, 100), (0, 10), (1150, 50), (5000, 10), (1100, 0)];
        assert_eq!(
            coalesce(&ranges, 100, 1 << 20),
            [(0, 10), (1000, 200), (5000, 10)]
        );
        assert_eq!(coalesce(&ranges, 10_000, 1 << 20), [(0, 5010)]);
        // No span over `max` unless a range is: a large range stands alone.
        assert_eq!(
            coalesce(&[(0, 10), (20, 10), (40, 100)], 100, 30),
            [(0, 30), (40, 100)]
        );
    }

    #[test]
    fn planned_ranges_are_served_from_one_fetch_of_their_group_and_others_are_not() {
        let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let ahead = ReadAhead::default();
        ahead.plan(vec![vec![(100, 50), (400, 10)], vec![(1000, 100)]]);
        let fetches = std::sync::atomic::AtomicUsize::new(0);
        let fetch = |ranges: &[(u64, u64)]| {
            fetches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(ranges
                .iter()
                .flat_map(|&(o, n)| file[o as usize..(o + n) as usize].to_vec())
                .collect())
        };
        let mut buf = [0u8; 5];
        for (offset, expect) in [
            (402, true),
            (120, true),
            (1050, true),
            (148, false),
            (0, false),
        ] {
            assert_eq!(ahead.read(&mut buf, offset, fetch), expect, "{offset}");
            if expect {
                assert_eq!(buf[..], file[offset as usize..offset as usize + 5]);
            }
        }
        // The first read fetched both groups at once; the others read what was fetched.
        assert_eq!(
            fetches.load(std::sync::atomic::Ordering::Relaxed),
            2,
            "one fetch per group"
        );
        // A group whose fetch failed serves nothing.
        ahead.plan(vec![vec![(0, 10)]]);
        assert!(!ahead.read(&mut buf, 0, |_| Err(io::ErrorKind::TimedOut.into())));
        assert!(!ahead.read(&mut buf, 0, fetch));
    }

    #[test]
    fn bytes_fetched_with_the_open_are_served_and_the_rest_fetched_once() {
        let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let ahead = ReadAhead::default();
        let tail = ahead.plan_fetched(0, file[..100].to_vec(), vec![(9_000, 1_000)]);
        let fetched = Mutex::new(Vec::new());
        let fetch = |ranges: &[(u64, u64)]| {
            fetched.lock().expect("lock").extend_from_slice(ranges);
            Ok(ranges
                .iter()
                .flat_map(|&(o, n)| file[o as usize..(o + n) as usize].to_vec())
                .collect())
        };
        let mut buf = [0u8; 10];
        assert!(ahead.read(&mut buf, 50, fetch));
        assert_eq!(buf[..], file[50..60]);
        assert!(
            fetched.lock().expect("lock").is_empty(),
            "the head was fetched"
        );
        tail.fetch(fetch);
        assert!(ahead.read(&mut buf, 9_500, fetch));
        assert_eq!(buf[..], file[9_500..9_510]);
        assert_eq!(*fetched.lock().expect("lock"), [(9_000, 1_000)]);
    }

    #[test]
    fn a_new_plan_keeps_what_was_fetched_of_its_ranges() {
        let file: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let fetched = Mutex::new(Vec::new());
        let fetch = |ranges: &[(u64, u64)]| {
            fetched.lock().expect("lock").push(ranges.to_vec());
            Ok(ranges
                .iter()
                .flat_map(|&(o, n)| file[o as usize..(o + n) as usize].to_vec())
                .collect())
        };
        let one_each = |r: &[(u64, usize)]| r.iter().map(|&(o, n)| vec![(o, n as u64)]).collect();
        let ahead = ReadAhead::default();
        let _lazily = ahead.plan_keeping(&[(0, 100), (100, 100)], one_each);
        let mut buf = [0u8; 10];
        assert!(ahead.read(&mut buf, 150, fetch));
        // The window moves on: (100, 100) stays fetched, (200, 100) is new, (0, 100) goes.
        let _lazily = ahead.plan_keeping(&[(100, 100), (200, 100)], one_each);
        assert!(ahead.read(&mut buf, 120, fetch));
        assert!(ahead.read(&mut buf, 250, fetch));
        assert!(!ahead.read(&mut buf, 50, fetch));
        assert_eq!(
            fetched.into_inner().expect("lock"),
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

    #[test]
    fn a_refused_connection_is_retried_and_a_missing_file_is_not() {
        let refused = io::Error::new(io::ErrorKind::ConnectionAborted, "x: connection refused");
        assert!(retriable(&refused));
        assert!(retriable(&io::ErrorKind::ResourceBusy.into()));
        assert!(!retriable(&io::ErrorKind::NotFound.into()));
        assert!(!retriable(&io::ErrorKind::PermissionDenied.into()));
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(9), Duration::from_secs(8));
    }
}
