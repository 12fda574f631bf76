//! Files on an HTTP(S) server (a web server, XRootD's or dCache's HTTP door, EOS), read with
//! byte-range requests.

use std::io::{self, Read};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::net::{NetSettings, coalesce, count_received};
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

/// Ranges closer than this are read in one request (the bytes between are read and dropped).
const MERGE_GAP: u64 = 256 * 1024;
/// The most one read-ahead request asks for.
const MAX_SPAN: u64 = 8 * 1024 * 1024;

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
            std::thread::spawn(move || tail.fetch(|spans, sink| file.fetch_span(spans, sink)));
        }
        Ok(f)
    }

    /// Plans the reads of `ranges`: coalesced into spans, each one range request, keeping what
    /// was planned of them before; the new ones are requested at once, in the background.
    pub(super) fn plan(self: &Arc<Self>, ranges: &[(u64, usize)]) {
        self.fetch_in_background(self.ahead.plan_keeping(ranges, |new| {
            let spans = coalesce(new, MERGE_GAP, MAX_SPAN);
            spans.into_iter().map(|s| vec![s]).collect()
        }));
    }

    /// Requests `spans` in the background: the reader decodes while they come.
    fn fetch_in_background(self: &Arc<Self>, spans: Unfetched) {
        if !spans.is_empty() {
            let file = Arc::clone(self);
            std::thread::spawn(move || spans.fetch(|spans, sink| file.fetch_span(spans, sink)));
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

    /// The bytes of a planned span (one range: `spans` holds one), into `sink` as they
    /// come.
    fn fetch_span(&self, spans: &[(u64, u64)], sink: &mut Sink<'_>) -> io::Result<()> {
        let (offset, len) = spans[0];
        self.net
            .with_retries(|| {
                sink.restart();
                let mut answer = self.get_range(offset, len)?.into_reader();
                sink.read_from(&mut answer, len as usize)?;
                count_received(len as usize);
                Ok(())
            })
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{e} (reading {len} bytes at offset {offset})"),
                )
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
        self.get(&format!("bytes={offset}-{}", offset + len - 1))
    }

    /// A `GET` of `range`, answered with a part of the file (206).
    fn get(&self, range: &str) -> io::Result<ureq::Response> {
        let mut request = self.agent.get(&self.url).set("Range", range);
        if let Some(token) = &self.net.token {
            request = request.set("Authorization", &format!("Bearer {token}"));
        }
        match request.call() {
            Ok(r) if r.status() == 206 => Ok(r),
            Ok(r) => Err(io::Error::other(format!(
                "the server answered {} {} to a byte-range request: it does not serve ranges",
                r.status(),
                r.status_text()
            ))),
            Err(e) => Err(self.http_error(e)),
        }
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
}
