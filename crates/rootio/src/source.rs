//! Where a ROOT file's bytes come from: a local file, or a file served over HTTP(S) (a web
//! server, XRootD's or dCache's HTTP door, EOS), read with byte-range requests.
//!
//! Remote reads trust the sites' CAs (`X509_CERT_DIR`), carry a WLCG bearer token when one is
//! found (`BEARER_TOKEN`, `BEARER_TOKEN_FILE`, `$XDG_RUNTIME_DIR/bt_u$UID`, `/tmp/bt_u$UID`), time out
//! (`GNN4C_NET_TIMEOUT_S`, default 60 s per request) and are retried with backoff
//! (`GNN4C_NET_RETRIES`, default 3) when the connection fails or the server answers 5xx or 429.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// The URL schemes read over the network.
const HTTP_SCHEMES: [&str; 2] = ["http://", "https://"];
/// XRootD's schemes: named so that a physicist is told what to do instead.
const XROOTD_SCHEMES: [&str; 2] = ["root://", "roots://"];

/// Whether `location` is a URL (`http://`, `https://`, `root://`, `roots://`) rather than a
/// local path.
pub fn is_url(location: &Path) -> bool {
    let s = location.to_string_lossy();
    HTTP_SCHEMES
        .iter()
        .chain(&XROOTD_SCHEMES)
        .any(|p| s.starts_with(p))
}

/// What identifies a remote file's content for a cache's fingerprint: its size and what the
/// server says of its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteIdentity {
    /// Bytes.
    pub size: u64,
    /// `Last-Modified`, when the server gives it.
    pub modified: Option<String>,
    /// `ETag` (a checksum or version), when the server gives it.
    pub etag: Option<String>,
}

/// The size and version of the file at `url`, asked of its server.
pub fn remote_identity(url: &str) -> io::Result<RemoteIdentity> {
    HttpFile::open(url).map(|f| f.identity)
}

/// An open file's bytes.
#[derive(Debug)]
pub(crate) enum Source {
    Local(File),
    Http(Box<HttpFile>),
}

impl Source {
    /// Opens `location` (a path or a URL); its size.
    pub(crate) fn open(location: &Path) -> io::Result<(Source, u64)> {
        let s = location.to_string_lossy();
        if HTTP_SCHEMES.iter().any(|p| s.starts_with(p)) {
            let f = HttpFile::open(&s)?;
            let len = f.identity.size;
            return Ok((Source::Http(Box::new(f)), len));
        }
        if XROOTD_SCHEMES.iter().any(|p| s.starts_with(p)) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "root:// is not read yet: read the file over https:// (EOS, dCache and XRootD \
                 servers serve it over HTTP too) or copy it",
            ));
        }
        let file = File::open(location)?;
        let len = file.metadata()?.len();
        Ok((Source::Local(file), len))
    }

    /// Plans the reads of the byte ranges (`offset`, `len`) a reader is about to ask for: a
    /// remote file's ranges are coalesced into a few large spans, each fetched in one request
    /// by the first read that needs it (the reader's threads fetch spans while others decode)
    /// and kept until the next plan (memory: what the reader reads anyway). A local file
    /// needs none. A span that fails is dropped: its reads then retry alone and fail by name.
    pub(crate) fn prefetch(&self, ranges: impl IntoIterator<Item = (u64, usize)>) {
        if let Source::Http(f) = self {
            f.plan(&ranges.into_iter().collect::<Vec<_>>());
        }
    }

    /// Fills `buf` with the bytes at `offset`.
    pub(crate) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self {
            Source::Local(file) => read_exact_at(file, buf, offset),
            Source::Http(f) => f.read_exact_at(buf, offset),
        }
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_read(file, buf, offset)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf = &mut buf[n..];
        offset += n as u64;
    }
    Ok(())
}

/// A file on an HTTP(S) server.
#[derive(Debug)]
pub(crate) struct HttpFile {
    url: String,
    agent: ureq::Agent,
    token: Option<String>,
    retries: u32,
    identity: RemoteIdentity,
    /// The spans planned by the last read-ahead.
    ahead: Mutex<Vec<Arc<Span>>>,
}

/// A span of a remote file read in one request, when a read first needs it.
#[derive(Debug)]
struct Span {
    offset: u64,
    len: u64,
    /// Its bytes, or `None` when the request failed.
    bytes: OnceLock<Option<Vec<u8>>>,
}

/// Ranges closer than this are read in one request (the bytes between are read and dropped).
const MERGE_GAP: u64 = 256 * 1024;
/// The most one read-ahead request asks for.
const MAX_SPAN: u64 = 8 * 1024 * 1024;

/// `ranges` (`offset`, `len`) as the fewest spans (`offset`, `len`) covering them, ranges
/// closer than `gap` merged, none longer than `max` unless one range is.
fn coalesce(ranges: &[(u64, usize)], gap: u64, max: u64) -> Vec<(u64, u64)> {
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

impl HttpFile {
    /// Asks the server for the file's size (a one-byte range request, which also tells that
    /// the server serves ranges).
    fn open(url: &str) -> io::Result<HttpFile> {
        let timeout = Duration::from_secs_f64(env_number("GNN4C_NET_TIMEOUT_S", 60.0).max(0.001));
        let agent = ureq::AgentBuilder::new()
            .tls_config(tls_config()?)
            .timeout_connect(timeout.min(Duration::from_secs(10)))
            .timeout_read(timeout)
            .timeout_write(timeout)
            .build();
        let mut f = HttpFile {
            url: url.to_owned(),
            agent,
            token: bearer_token(),
            retries: env_number("GNN4C_NET_RETRIES", 3.0).max(0.0) as u32,
            identity: RemoteIdentity {
                size: 0,
                modified: None,
                etag: None,
            },
            ahead: Mutex::new(Vec::new()),
        };
        let response = f.with_retries(|| f.get_range(0, 1))?;
        let size = response
            .header("Content-Range")
            .and_then(|r| r.rsplit('/').next())
            .and_then(|n| n.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                io::Error::other("the server gave no file size (Content-Range) for a range request")
            })?;
        f.identity = RemoteIdentity {
            size,
            modified: response.header("Last-Modified").map(str::to_owned),
            etag: response.header("ETag").map(str::to_owned),
        };
        Ok(f)
    }

    /// Plans the spans covering `ranges` (see [`Source::prefetch`]), dropping the last plan.
    fn plan(&self, ranges: &[(u64, usize)]) {
        let spans = coalesce(ranges, MERGE_GAP, MAX_SPAN)
            .into_iter()
            .map(|(offset, len)| {
                Arc::new(Span {
                    offset,
                    len,
                    bytes: OnceLock::new(),
                })
            })
            .collect();
        *self.ahead.lock().unwrap_or_else(|p| p.into_inner()) = spans;
    }

    /// Fills `buf` with the bytes at `offset`: from a planned span (fetched now if no read
    /// has yet), else in one range request.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let end = offset + buf.len() as u64;
        let span = self
            .ahead
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|s| s.offset <= offset && end <= s.offset + s.len)
            .cloned();
        if let Some(span) = span {
            let bytes = span.bytes.get_or_init(|| {
                let mut all = vec![0u8; usize::try_from(span.len).ok()?];
                self.fetch(&mut all, span.offset).ok()?;
                Some(all)
            });
            if let Some(bytes) = bytes {
                let from = (offset - span.offset) as usize;
                buf.copy_from_slice(&bytes[from..from + buf.len()]);
                return Ok(());
            }
        }
        self.fetch(buf, offset)
    }

    /// Fills `buf` with the bytes at `offset`: one range request.
    fn fetch(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with_retries(|| {
            self.get_range(offset, buf.len() as u64)
                .and_then(|r| r.into_reader().read_exact(buf))
        })
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{e} (reading {} bytes at offset {offset})", buf.len()),
            )
        })
    }

    /// `request`, tried again after a backoff while it fails in a way that may pass.
    fn with_retries<T>(&self, mut request: impl FnMut() -> io::Result<T>) -> io::Result<T> {
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

    /// A `GET` of `len` bytes at `offset`, answered with exactly that range.
    fn get_range(&self, offset: u64, len: u64) -> io::Result<ureq::Response> {
        let range = format!("bytes={offset}-{}", offset + len - 1);
        let mut request = self.agent.get(&self.url).set("Range", &range);
        if let Some(token) = &self.token {
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
                status_error(code, r.status_text(), self.token.is_some())
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

/// The TLS settings of every `https://` read: the Mozilla roots, the CA bundle `SSL_CERT_FILE`
/// names or the system's, and the CAs in `X509_CERT_DIR` (default
/// `/etc/grid-security/certificates`: the IGTF CAs of grid sites, CERN's included).
fn tls_config() -> io::Result<Arc<rustls::ClientConfig>> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            for file in ca_files() {
                let Ok(certs) = CertificateDer::pem_file_iter(&file) else {
                    continue;
                };
                for cert in certs.flatten() {
                    // A certificate the store cannot use is left out, as OpenSSL does.
                    let _ = roots.add(cert);
                }
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
                .map_err(|e| format!("TLS settings: {e}"))
        })
        .clone()
        .map_err(io::Error::other)
}

/// The PEM files holding CAs to trust: `SSL_CERT_FILE` (else the system's bundle) and every
/// file in `X509_CERT_DIR` (else `/etc/grid-security/certificates`).
fn ca_files() -> Vec<std::path::PathBuf> {
    let bundle = std::env::var_os("SSL_CERT_FILE")
        .map_or_else(|| "/etc/ssl/certs/ca-certificates.crt".into(), Into::into);
    let dir: std::path::PathBuf = std::env::var_os("X509_CERT_DIR")
        .map_or_else(|| "/etc/grid-security/certificates".into(), Into::into);
    let in_dir = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "pem" || x == "crt" || x == "0")
        });
    [bundle]
        .into_iter()
        .chain(in_dir)
        .filter(|p| p.is_file())
        .collect()
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

/// Whether a failed request may succeed when tried again: the connection failed, broke or
/// timed out, or the server was busy or failing.
fn retriable(e: &io::Error) -> bool {
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
fn backoff(attempt: u32) -> Duration {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_paths() {
        for url in [
            "http://h/f.root",
            "https://h:8443/f.root",
            "root://eos//f.root",
        ] {
            assert!(is_url(Path::new(url)), "{url}");
        }
        for path in ["/data/f.root", "f.root", "roots/f.root", "http/f.root"] {
            assert!(!is_url(Path::new(path)), "{path}");
        }
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
        assert!(retriable(&status_error(503, "Service Unavailable", false)));
        assert!(!retriable(&status_error(404, "Not Found", false)));
        assert!(!retriable(&status_error(403, "Forbidden", false)));
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(9), Duration::from_secs(8));
    }
}
