//! What every network protocol's reads share: the settings (timeout, retries, token), retries
//! with backoff, and the read-ahead of planned byte ranges.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

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
fn user_id() -> Option<u32> {
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
        let mut plan = Plan::default();
        for (g, ranges) in groups.into_iter().enumerate() {
            let mut at = 0usize;
            for &(offset, len) in &ranges {
                plan.pieces.push(Piece {
                    offset,
                    len,
                    group: g,
                    at,
                });
                at += len as usize;
            }
            plan.groups.push(Arc::new(Group {
                ranges,
                bytes: OnceLock::new(),
            }));
        }
        plan.pieces.sort_unstable_by_key(|p| p.offset);
        *self.plan.lock().unwrap_or_else(|p| p.into_inner()) = plan;
    }

    /// Fills `buf` with the bytes at `offset` when a planned range holds them, fetching its
    /// group with `fetch` (the group's ranges → their bytes, one after the other) if no read
    /// has yet; `false` when no range holds them or the group's request failed.
    pub(super) fn read(
        &self,
        buf: &mut [u8],
        offset: u64,
        fetch: impl FnOnce(&[(u64, u64)]) -> io::Result<Vec<u8>>,
    ) -> bool {
        let end = offset + buf.len() as u64;
        let found = {
            let plan = self.plan.lock().unwrap_or_else(|p| p.into_inner());
            let i = plan.pieces.partition_point(|p| p.offset <= offset);
            i.checked_sub(1)
                .map(|i| plan.pieces[i])
                .filter(|p| end <= p.offset + p.len)
                .map(|p| (p, Arc::clone(&plan.groups[p.group])))
        };
        let Some((piece, group)) = found else {
            return false;
        };
        let bytes = group.bytes.get_or_init(|| {
            fetch(&group.ranges)
                .ok()
                .filter(|b| b.len() == group.ranges.iter().map(|r| r.1 as usize).sum())
        });
        let Some(bytes) = bytes else {
            return false;
        };
        let from = piece.at + (offset - piece.offset) as usize;
        buf.copy_from_slice(&bytes[from..from + buf.len()]);
        true
    }
}

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
        let fetches = std::cell::Cell::new(0);
        let fetch = |ranges: &[(u64, u64)]| {
            fetches.set(fetches.get() + 1);
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
        assert_eq!(fetches.get(), 2, "one fetch per group");
        // A group whose fetch failed serves nothing.
        ahead.plan(vec![vec![(0, 10)]]);
        assert!(!ahead.read(&mut buf, 0, |_| Err(io::ErrorKind::TimedOut.into())));
        assert!(!ahead.read(&mut buf, 0, fetch));
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
