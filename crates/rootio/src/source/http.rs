//! Files on an HTTP(S) server (a web server, XRootD's or dCache's HTTP door, EOS), read with
//! byte-range requests.

use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::net::{NetSettings, coalesce, count_received, pack};
use super::read_ahead::{ENDS, ReadAhead, Sink, Unfetched};
use super::tls::tls_config;
use super::{Bytes, RemoteIdentity};

/// A file on an HTTP(S) server.
#[derive(Debug)]
pub(crate) struct HttpFile {
    url: String,
    agent: ureq::Agent,
    net: NetSettings,
    pub(super) identity: RemoteIdentity,
    ahead: ReadAhead,
    /// Whether the server answers several ranges in one request (`multipart/byteranges`):
    /// assumed until it answers one otherwise.
    multi_range: AtomicBool,
}

/// Connections kept per server between requests and files.
const KEEP_PER_SERVER: usize = 8;

/// The process's agent for `net`'s timeout: its connections are kept between requests, and
/// between files on the same server (a dataset of many files opens each without a new
/// connection).
fn agent(net: &NetSettings) -> io::Result<ureq::Agent> {
    static AGENTS: Mutex<Vec<(Duration, ureq::Agent)>> = Mutex::new(Vec::new());
    let mut agents = AGENTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, agent)) = agents.iter().find(|(t, _)| *t == net.timeout) {
        return Ok(agent.clone());
    }
    let agent = ureq::AgentBuilder::new()
        .tls_config(tls_config()?)
        .timeout_connect(net.timeout.min(Duration::from_secs(10)))
        .timeout_read(net.timeout)
        .timeout_write(net.timeout)
        .max_idle_connections_per_host(KEEP_PER_SERVER)
        .build();
    agents.push((net.timeout, agent.clone()));
    Ok(agent)
}

/// Ranges closer than this are read as one (the bytes between are read and dropped).
const MERGE_GAP: u64 = 256 * 1024;
/// The most ranges one request asks for, where the server answers several (the `Range`
/// header stays within 2 kB).
const MAX_RANGES: usize = 64;
/// The most one read-ahead request asks for.
const MAX_SPAN: u64 = 8 * 1024 * 1024;
/// The most bytes of a part's headers in a multi-range answer.
const PART_HEAD_MAX: usize = 4096;

impl HttpFile {
    /// Asks the server for the file's first bytes (what a reader reads first), which also
    /// gives the file's size and tells that the server serves ranges; its last bytes are asked
    /// for at once, in the background. (A suffix range, `bytes=-N`, would ask for both ends in
    /// one round trip, but XRootD's HTTP door answers it with the whole file.)
    pub(super) fn open(url: &str) -> io::Result<Arc<HttpFile>> {
        let net = NetSettings::from_env();
        let mut f = HttpFile {
            url: url.to_owned(),
            agent: agent(&net)?,
            net,
            identity: RemoteIdentity {
                size: 0,
                modified: None,
                etag: None,
            },
            ahead: ReadAhead::default(),
            multi_range: AtomicBool::new(true),
        };
        let (head, identity) = f.net.with_retries(|| f.get_start())?;
        f.identity = identity;
        let size = f.identity.size;
        let head_end = head.len() as u64;
        let start = size.saturating_sub(ENDS).max(head_end);
        let rest = (start < size).then_some((start, size - start));
        let tail = f.ahead.keep_ends_fetched(head, rest.into_iter().collect());
        let f = Arc::new(f);
        if !tail.is_empty() {
            let file = Arc::clone(&f);
            std::thread::spawn(move || tail.fetch(|spans, sink| file.fetch_spans(spans, sink)));
        }
        Ok(f)
    }

    /// Plans the reads of `ranges`: coalesced into spans, keeping what was planned of them
    /// before; the new ones are requested at once, in the background, in requests of up to
    /// [`MAX_RANGES`] spans and [`MAX_SPAN`] bytes where the server answers several ranges at
    /// once, else one span each.
    pub(super) fn plan(self: &Arc<Self>, ranges: &[(u64, usize)]) {
        let most = match self.multi_range.load(Ordering::Relaxed) {
            true => MAX_RANGES,
            false => 1,
        };
        self.fetch_in_background(self.ahead.plan_keeping(ranges, |new| {
            pack(coalesce(new, MERGE_GAP, MAX_SPAN), MAX_SPAN, most, |_| 1)
        }));
    }

    /// Requests `spans` in the background: the reader decodes while they come.
    fn fetch_in_background(self: &Arc<Self>, spans: Unfetched) {
        if !spans.is_empty() {
            let file = Arc::clone(self);
            std::thread::spawn(move || spans.fetch(|spans, sink| file.fetch_spans(spans, sink)));
        }
    }

    /// Drops what was read ahead for a reader done with the file; its ends and small reads
    /// stay for the next.
    pub(super) fn drop_plan(&self) {
        self.ahead.drop_plan();
    }

    /// The `len` bytes at `offset`: from a planned span, else in one range request.
    pub(super) fn read_at(self: &Arc<Self>, offset: u64, len: usize) -> io::Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::Owned(Vec::new()));
        }
        let planned = self
            .ahead
            .read(offset, len, |spans| self.fetch_in_background(spans));
        if let Some(bytes) = planned {
            return Ok(bytes);
        }
        let mut buf = vec![0u8; len];
        self.fetch(&mut buf, offset)?;
        self.ahead.keep_read(offset, &buf);
        Ok(Bytes::Owned(buf))
    }

    /// The bytes of a planned request's ranges, into `sink` as they come: one range request,
    /// or a multi-range one where the server answers those (else each range alone).
    fn fetch_spans(&self, spans: &[(u64, u64)], sink: &mut Sink<'_>) -> io::Result<()> {
        let asked: u64 = spans.iter().map(|s| s.1).sum();
        self.net
            .with_retries(|| {
                sink.restart();
                if spans.len() > 1 && self.multi_range.load(Ordering::Relaxed) {
                    let response = self.get_any(&range_header(spans))?;
                    if let Some(boundary) = multipart_boundary(&response) {
                        let mut answer = response.into_reader();
                        let read = read_parts(&mut answer, &boundary, spans, sink);
                        if read
                            .as_ref()
                            .is_err_and(|e| e.kind() == io::ErrorKind::InvalidData)
                        {
                            // Ranges merged or reordered: one a request from now on.
                            self.multi_range.store(false, Ordering::Relaxed);
                        }
                        read?;
                        // The rest (the closing boundary), so that the connection is kept.
                        io::copy(&mut answer, &mut io::sink())?;
                        return Ok(());
                    }
                    // One part (or the whole file) for several ranges: the server does not
                    // answer several at once; this file's requests ask for one from now on.
                    self.multi_range.store(false, Ordering::Relaxed);
                }
                for &(offset, len) in spans {
                    let mut answer = self.get_range(offset, len)?.into_reader();
                    sink.read_from(&mut answer, len as usize)?;
                    count_received(len as usize);
                }
                Ok(())
            })
            .map_err(|e| {
                let what = match spans {
                    [(offset, len)] => format!("{len} bytes at offset {offset}"),
                    _ => format!(
                        "{asked} bytes in {} ranges from offset {}",
                        spans.len(),
                        spans[0].0
                    ),
                };
                io::Error::new(e.kind(), format!("{e} (reading {what})"))
            })
    }

    /// Fills `buf` with the bytes at `offset`: one range request.
    fn fetch(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.net
            .with_retries(|| {
                self.get_range(offset, buf.len() as u64)
                    .and_then(|r| r.into_reader().read_exact(buf))
            })
            .inspect(|()| count_received(buf.len()))
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{e} (reading {} bytes at offset {offset})", buf.len()),
                )
            })
    }

    /// The file's first [`ENDS`] bytes (all of a smaller file), and its identity from the
    /// answer's headers.
    fn get_start(&self) -> io::Result<(Vec<u8>, RemoteIdentity)> {
        let (mut response, mut last, identity) = self.start_of(ENDS)?;
        // A range past the end of a smaller file: a server may answer it as asked, not cut to
        // the file (XRootD's HTTP door also announces the asked length and sends less), so the
        // answer is dropped unread and the file asked for exactly.
        if last >= identity.size && identity.size > 0 {
            (response, last, _) = self.start_of(identity.size)?;
        }
        if last >= identity.size {
            return Err(io::Error::other(format!(
                "the server answered bytes 0-{last} of a file of {} bytes",
                identity.size
            )));
        }
        let mut bytes = vec![0u8; usize::try_from(last + 1).map_err(io::Error::other)?];
        response.into_reader().read_exact(&mut bytes)?;
        count_received(bytes.len());
        Ok((bytes, identity))
    }

    /// A `GET` of the file's first `len` bytes: the answer, the last byte it holds, and the
    /// file's identity from its headers (`Content-Range: bytes 0-LAST/SIZE`).
    fn start_of(&self, len: u64) -> io::Result<(ureq::Response, u64, RemoteIdentity)> {
        let response = self.get_range(0, len)?;
        let content_range = response.header("Content-Range").unwrap_or_default();
        let parsed = content_range
            .strip_prefix("bytes 0-")
            .and_then(|r| r.split_once('/'))
            .and_then(|(last, size)| Some((last.trim().parse().ok()?, size.trim().parse().ok()?)));
        let Some((last, size)) = parsed else {
            return Err(io::Error::other(format!(
                "the server gave no file size for a range request (Content-Range: \
                 {content_range:?})"
            )));
        };
        let identity = RemoteIdentity {
            size,
            modified: response.header("Last-Modified").map(str::to_owned),
            etag: response.header("ETag").map(str::to_owned),
        };
        Ok((response, last, identity))
    }

    /// A `GET` of `len` bytes at `offset`, answered with exactly that range.
    fn get_range(&self, offset: u64, len: u64) -> io::Result<ureq::Response> {
        self.get(&range_header(&[(offset, len)]))
    }

    /// A `GET` of `range`, answered with a part of the file (206).
    fn get(&self, range: &str) -> io::Result<ureq::Response> {
        match self.get_any(range)? {
            r if r.status() == 206 => Ok(r),
            r => Err(io::Error::other(format!(
                "the server answered {} {} to a byte-range request: it does not serve ranges",
                r.status(),
                r.status_text()
            ))),
        }
    }

    /// A `GET` of `range`, answered with success of any kind.
    fn get_any(&self, range: &str) -> io::Result<ureq::Response> {
        let mut request = self.agent.get(&self.url).set("Range", range);
        if let Some(token) = &self.net.token {
            request = request.set("Authorization", &format!("Bearer {token}"));
        }
        request.call().map_err(|e| self.http_error(e))
    }

    /// A request's failure as an I/O error naming the URL and what to do.
    fn http_error(&self, e: ureq::Error) -> io::Error {
        match e {
            ureq::Error::Status(code, r) => {
                status_error(code, r.status_text(), self.net.token.is_some())
            }
            ureq::Error::Transport(t) => {
                // The kind and what went wrong, without the URL (the caller names the file);
                // the cause's own words last (`invalid peer certificate: UnknownIssuer`).
                let parts = [
                    Some(t.kind().to_string()),
                    t.message().map(str::to_owned),
                    std::error::Error::source(&t).map(ToString::to_string),
                ];
                // Each part once (a cause often repeats the kind: "Network Error: …").
                let mut what = String::new();
                for part in parts.into_iter().flatten() {
                    if part.starts_with(&what) {
                        what = part;
                    } else if !what.contains(&part) {
                        what = format!("{what}: {part}");
                    }
                }
                // A connection that failed or broke may pass when tried again; a certificate
                // the client does not trust will not.
                let kind = if what.contains("certificate") {
                    what.push_str(
                        " (is the server's CA trusted? Set X509_CERT_DIR to the folder of your \
                         site's CAs, or SSL_CERT_FILE to a bundle)",
                    );
                    io::ErrorKind::InvalidData
                } else if matches!(
                    t.kind(),
                    ureq::ErrorKind::Io | ureq::ErrorKind::ConnectionFailed
                ) {
                    io::ErrorKind::ConnectionAborted
                } else {
                    io::ErrorKind::Other
                };
                io::Error::new(kind, what)
            }
        }
    }
}

/// The `Range` header asking for `spans` (`offset`, `len`), in their order.
fn range_header(spans: &[(u64, u64)]) -> String {
    let ranges: Vec<String> = spans
        .iter()
        .map(|&(offset, len)| format!("{offset}-{}", offset + len - 1))
        .collect();
    format!("bytes={}", ranges.join(","))
}

/// The boundary of a multi-range answer (206, `Content-Type: multipart/byteranges;
/// boundary=B`), if it is one.
fn multipart_boundary(response: &ureq::Response) -> Option<String> {
    let content_type = response.header("Content-Type")?;
    if response.status() != 206 {
        return None;
    }
    let (kind, params) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/byteranges") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (name, value) = p.split_once('=')?;
        let value = value.trim().trim_matches('"');
        (name.trim().eq_ignore_ascii_case("boundary") && !value.is_empty())
            .then(|| value.to_owned())
    })
}

/// A multi-range answer's parts into `sink`: each the next of `spans`, in order, as its
/// `Content-Range` must say (a server that reorders or merges the ranges is an error).
fn read_parts(
    answer: &mut dyn Read,
    boundary: &str,
    spans: &[(u64, u64)],
    sink: &mut Sink<'_>,
) -> io::Result<()> {
    for &(offset, len) in spans {
        let last = offset + len - 1;
        let range = part_range(answer, boundary)?;
        if range != (offset, last) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a multi-range answer gave bytes {}-{} where bytes {offset}-{last} were asked",
                    range.0, range.1
                ),
            ));
        }
        sink.read_from(answer, len as usize)?;
        count_received(len as usize);
    }
    Ok(())
}

/// The next part's headers of a multi-range answer (`--BOUNDARY`, then headers up to an empty
/// line): the first and last byte its `Content-Range` gives.
fn part_range(answer: &mut dyn Read, boundary: &str) -> io::Result<(u64, u64)> {
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let mut head = Vec::new();
    let mut byte = [0u8];
    // Up to the empty line ending the part's headers (past the CRLF before the boundary).
    while !(head.ends_with(b"\r\n\r\n") && head.len() > 4) {
        if head.len() >= PART_HEAD_MAX {
            return Err(bad(
                "a multi-range answer's part has no end to its headers".into()
            ));
        }
        answer.read_exact(&mut byte)?;
        if !(head.is_empty() && matches!(byte[0], b'\r' | b'\n')) {
            head.push(byte[0]);
        }
    }
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.split("\r\n");
    if lines.next() != Some(&format!("--{boundary}")) {
        return Err(bad(format!(
            "a multi-range answer's part does not start with its boundary: {head:?}"
        )));
    }
    lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-range"))
        .and_then(|(_, value)| {
            let (first, last) = value
                .trim()
                .strip_prefix("bytes ")?
                .split_once('/')?
                .0
                .split_once('-')?;
            Some((first.trim().parse().ok()?, last.trim().parse().ok()?))
        })
        .ok_or_else(|| {
            bad(format!(
                "a multi-range answer's part gives no range: {head:?}"
            ))
        })
}

/// A server's answer `code` (`text`) to a request as an I/O error: its kind says what the
/// reader does with it (a busy or failing server, 429 and 5xx, is `ResourceBusy`: tried
/// again), its words what the physicist can do.
fn status_error(code: u16, text: &str, token_found: bool) -> io::Error {
    let (kind, hint) = match code {
        401 | 403 if !token_found => (
            io::ErrorKind::PermissionDenied,
            "; no bearer token was found (set BEARER_TOKEN or BEARER_TOKEN_FILE)",
        ),
        401 | 403 => (
            io::ErrorKind::PermissionDenied,
            "; the bearer token was refused",
        ),
        404 => (io::ErrorKind::NotFound, ""),
        429 | 500..=599 => (io::ErrorKind::ResourceBusy, ""),
        _ => (io::ErrorKind::Other, ""),
    };
    io::Error::new(kind, format!("HTTP {code} {text}{hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::net::retriable;

    #[test]
    fn a_busy_server_is_tried_again_and_a_refusal_is_not() {
        assert!(retriable(&status_error(503, "Service Unavailable", false)));
        assert!(retriable(&status_error(429, "Too Many Requests", true)));
        assert!(!retriable(&status_error(404, "Not Found", false)));
        let refused = status_error(403, "Forbidden", false);
        assert_eq!(refused.kind(), io::ErrorKind::PermissionDenied);
        assert!(refused.to_string().contains("BEARER_TOKEN"), "{refused}");
    }

    #[test]
    fn a_multi_range_answer_is_read_part_by_part_in_the_order_asked() {
        assert_eq!(range_header(&[(500, 10), (0, 1)]), "bytes=500-509,0-0");
        let answer = |head: &str| head.parse::<ureq::Response>().expect("an answer");
        let multi = answer(
            "HTTP/1.1 206 Partial Content\r\nContent-Type: multipart/byteranges; \
             boundary=\"12 3\"\r\n\r\n",
        );
        assert_eq!(multipart_boundary(&multi).as_deref(), Some("12 3"));
        let one = answer(
            "HTTP/1.1 206 Partial Content\r\nContent-Type: application/octet-stream\r\n\r\n",
        );
        assert_eq!(multipart_boundary(&one), None);
        let whole = answer("HTTP/1.1 200 OK\r\nContent-Type: multipart/byteranges; b=1\r\n\r\n");
        assert_eq!(multipart_boundary(&whole), None);
        // As XRootD's HTTP door answers `bytes=5000-5009,0-9`.
        let body = b"\r\n--B\r\nContent-type: text/plain\r\nContent-range: bytes 5000-5009/9999\r\n\r\n\
                     0123456789\r\n--B\r\nContent-Range: bytes 0-9/9999\r\n\r\nabcdefghij\r\n--B--\r\n";
        let mut from = &body[..];
        assert_eq!(part_range(&mut from, "B").expect("a part"), (5000, 5009));
        let mut data = [0u8; 10];
        from.read_exact(&mut data).expect("its bytes");
        assert_eq!(&data, b"0123456789");
        assert_eq!(part_range(&mut from, "B").expect("a part"), (0, 9));
        from.read_exact(&mut data).expect("its bytes");
        assert_eq!(&data, b"abcdefghij");
        // A part without a range, or not opened by the boundary, is an error that says so.
        let no_range = part_range(&mut &b"--B\r\nX: y\r\n\r\n"[..], "B").expect_err("no range");
        assert!(no_range.to_string().contains("no range"), "{no_range}");
        let other = part_range(&mut &b"--C\r\n\r\n"[..], "B").expect_err("not its boundary");
        assert!(other.to_string().contains("boundary"), "{other}");
        assert!(part_range(&mut &b"--B\r\nContent-Range: bytes 0-9/10"[..], "B").is_err());
    }
}
