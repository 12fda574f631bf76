//! What every network protocol's reads share: the settings (timeout, retries, token), retries
//! with backoff, and ranges grouped into spans (the read-ahead is [`super::read_ahead`]).

use std::io;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// How a request failed for good in a way that says the server is gone (the connection
    /// refused, broken or timed out at every try): the file's later requests fail so at once,
    /// and a reader stops at its first read instead of after every read's tries.
    gone: OnceLock<(io::ErrorKind, String)>,
}

impl NetSettings {
    pub(super) fn from_env() -> NetSettings {
        NetSettings {
            timeout: Duration::from_secs_f64(env_number("GNN4C_NET_TIMEOUT_S", 60.0).max(0.001)),
            retries: env_number("GNN4C_NET_RETRIES", 3.0).max(0.0) as u32,
            token: bearer_token(),
            gone: OnceLock::new(),
        }
    }

    /// `request`, tried again after a backoff while it fails in a way that may pass; once
    /// one has failed so at every try, every later one fails at once the same way.
    pub(super) fn with_retries<T>(
        &self,
        mut request: impl FnMut() -> io::Result<T>,
    ) -> io::Result<T> {
        if let Some((kind, why)) = self.gone.get() {
            return Err(io::Error::new(*kind, why.clone()));
        }
        let mut attempt = 0;
        loop {
            match request() {
                Err(e) if attempt < self.retries && retriable(&e) => {
                    attempt += 1;
                    std::thread::sleep(backoff(attempt));
                }
                Err(e) if retriable(&e) => {
                    let e = match attempt {
                        0 => e,
                        _ => io::Error::new(e.kind(), format!("{e} (after {} tries)", attempt + 1)),
                    };
                    let _ = self.gone.set((e.kind(), e.to_string()));
                    return Err(e);
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

/// `spans` (`offset`, `len`), in order, packed into requests of at most `max` bytes and `most`
/// parts (a span counting `parts(len)`); a span over either limit alone is one request.
pub(super) fn pack(
    spans: Vec<(u64, u64)>,
    max: u64,
    most: usize,
    parts: impl Fn(u64) -> usize,
) -> Vec<Vec<(u64, u64)>> {
    let mut requests: Vec<Vec<(u64, u64)>> = Vec::new();
    // The last request's bytes and parts.
    let (mut bytes, mut held) = (0, 0);
    for (offset, len) in spans {
        let n = parts(len);
        match requests.last_mut() {
            Some(r) if bytes + len <= max && held + n <= most => {
                r.push((offset, len));
                bytes += len;
                held += n;
            }
            _ => {
                requests.push(vec![(offset, len)]);
                (bytes, held) = (len, n);
            }
        }
    }
    requests
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_packed_into_bounded_requests_in_order() {
        let spans = vec![(0, 10), (100, 10), (200, 10), (300, 50), (400, 10)];
        let one = |_: u64| 1;
        // At most two parts a request; at most 30 bytes (the 50-byte span alone).
        assert_eq!(
            pack(spans.clone(), 1000, 2, one),
            [
                vec![(0, 10), (100, 10)],
                vec![(200, 10), (300, 50)],
                vec![(400, 10)]
            ]
        );
        assert_eq!(
            pack(spans.clone(), 30, 10, one),
            [
                vec![(0, 10), (100, 10), (200, 10)],
                vec![(300, 50)],
                vec![(400, 10)]
            ]
        );
        // One part a request: each span alone; a span's parts counted as asked.
        assert_eq!(pack(spans.clone(), 1000, 1, one).len(), 5);
        let by_ten = |len: u64| len.div_ceil(10) as usize;
        assert_eq!(pack(spans, 1000, 6, by_ten).len(), 2);
        assert!(pack(Vec::new(), 1, 1, one).is_empty());
    }

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
