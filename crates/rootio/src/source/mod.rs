//! Where a ROOT file's bytes come from: a local file, a file on an XRootD server (`root://`,
//! `roots://`: EOS, dCache, XRootD; [`xrootd`]) or one served over HTTP(S) (a web server, the
//! storage's HTTP door; [`http`]).
//!
//! Remote reads trust the sites' CAs (`X509_CERT_DIR`), carry a WLCG bearer token when one is
//! found (`BEARER_TOKEN`, `BEARER_TOKEN_FILE`, `$XDG_RUNTIME_DIR/bt_u$UID`, `/tmp/bt_u$UID`), time out
//! (`GNN4C_NET_TIMEOUT_S`, default 60 s per request) and are retried with backoff
//! (`GNN4C_NET_RETRIES`, default 3) when the connection fails or the server is busy or failing.

mod http;
mod net;
mod read_ahead;
mod tls;
mod xrootd;

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

pub use net::network_bytes_received;

use http::HttpFile;
use xrootd::XrootdFile;

/// HTTP's URL schemes (WebDAV's `davs://` and `dav://` are HTTPS and HTTP).
const HTTP_SCHEMES: [&str; 4] = ["http://", "https://", "davs://", "dav://"];
/// XRootD's URL schemes.
const XROOTD_SCHEMES: [&str; 2] = ["root://", "roots://"];

/// Whether `location` is a URL (`root://`, `roots://`, `http://`, `https://`, `davs://`,
/// `dav://`) rather than a local path.
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
    /// When the file was last modified, as the server says it (HTTP's `Last-Modified`,
    /// XRootD's modification time in seconds).
    pub modified: Option<String>,
    /// `ETag` (a checksum or version), when the server gives it.
    pub etag: Option<String>,
}

/// The size and version of the file at `url`, asked of its server.
pub fn remote_identity(url: &str) -> io::Result<RemoteIdentity> {
    Ok(match open_remote(url)? {
        Remote::Http(f) => f.identity.clone(),
        Remote::Xrootd(f) => f.identity.clone(),
    })
}

/// A remote file open in this process.
#[derive(Debug, Clone)]
enum Remote {
    Http(Arc<HttpFile>),
    Xrootd(Arc<XrootdFile>),
}

/// Remote files open in this process, the most recently used last, at most [`REMOTE_FILES_KEPT`]: a
/// file opened again (a dataset's fingerprint, then its read) reuses its connections and what
/// its server said of it, instead of paying the round trips of an open again. A file that
/// leaves the list closes when its last reader is done, and its connections serve the next
/// files on its server.
static OPEN: Mutex<Vec<(String, Remote)>> = Mutex::new(Vec::new());
/// Remote files kept open at most (see [`OPEN`]).
pub const REMOTE_FILES_KEPT: usize = 8;

/// The remote file at `url`: the one open in this process, else opened now.
fn open_remote(url: &str) -> io::Result<Remote> {
    let lock = || OPEN.lock().unwrap_or_else(|p| p.into_inner());
    {
        let mut open = lock();
        if let Some(i) = open.iter().position(|(u, _)| u == url) {
            let entry = open.remove(i);
            let remote = entry.1.clone();
            open.push(entry);
            return Ok(remote);
        }
    }
    let remote = if XROOTD_SCHEMES.iter().any(|p| url.starts_with(p)) {
        Remote::Xrootd(Arc::new(XrootdFile::open(url)?))
    } else if let Some(rest) = url.strip_prefix("davs://") {
        Remote::Http(HttpFile::open(&format!("https://{rest}"))?)
    } else if let Some(rest) = url.strip_prefix("dav://") {
        Remote::Http(HttpFile::open(&format!("http://{rest}"))?)
    } else {
        Remote::Http(HttpFile::open(url)?)
    };
    let mut open = lock();
    // Opened meanwhile by another thread (a file opened ahead): that one is kept.
    if let Some((_, first)) = open.iter().find(|(u, _)| u == url) {
        return Ok(first.clone());
    }
    open.push((url.to_owned(), remote.clone()));
    if open.len() > REMOTE_FILES_KEPT {
        open.remove(0);
    }
    Ok(remote)
}

/// Opens the remote file at `url` in the background, its two ends fetched, for a reader about
/// to read it (a dataset's next file): the open's round trips pass while other files are read.
/// A failure is left for that reader to meet and report.
pub fn open_ahead(url: &str) {
    let url = url.to_owned();
    std::thread::spawn(move || {
        // Over HTTP the open fetched the start and asked for the end already.
        if let Ok(Remote::Xrootd(f)) = open_remote(&url) {
            f.fetch_planned();
        }
    });
}

/// An open file's bytes.
#[derive(Debug)]
pub(crate) enum Source {
    Local(File),
    Http(Arc<HttpFile>),
    Xrootd(Arc<XrootdFile>),
}

impl Drop for Source {
    /// What a remote file's reader read ahead goes with it; the file stays open for the next
    /// reader, with its ends and small reads kept.
    fn drop(&mut self) {
        match self {
            Source::Local(_) => {}
            Source::Http(f) => f.drop_plan(),
            Source::Xrootd(f) => f.drop_plan(),
        }
    }
}

impl Source {
    /// Opens `location` (a path or a URL); its size.
    pub(crate) fn open(location: &Path) -> io::Result<(Source, u64)> {
        let s = location.to_string_lossy();
        if is_url(location) {
            return Ok(match open_remote(&s)? {
                Remote::Http(f) => {
                    let len = f.identity.size;
                    (Source::Http(f), len)
                }
                Remote::Xrootd(f) => {
                    let len = f.identity.size;
                    (Source::Xrootd(f), len)
                }
            });
        }
        let file = File::open(location)?;
        let len = file.metadata()?.len();
        Ok((Source::Local(file), len))
    }

    /// Plans the reads of the byte ranges (`offset`, `len`) a reader is about to ask for: a
    /// remote file's ranges are grouped into a few requests (HTTP: coalesced spans, several to
    /// a request where the server answers multi-range requests; XRootD: vector reads), each
    /// sent by the first read that needs one of its ranges (the reader's threads fetch while
    /// others decode) and kept until the next plan (memory: what the reader reads anyway). A
    /// local file needs none. A request that fails is dropped: its reads then go alone, are
    /// retried, and fail by name.
    pub(crate) fn prefetch(&self, ranges: impl IntoIterator<Item = (u64, usize)>) {
        match self {
            Source::Local(_) => {}
            Source::Http(f) => f.plan(&ranges.into_iter().collect::<Vec<_>>()),
            Source::Xrootd(f) => f.plan(&ranges.into_iter().collect::<Vec<_>>()),
        }
    }

    /// Whether the bytes come over a network.
    pub(crate) fn is_remote(&self) -> bool {
        !matches!(self, Source::Local(_))
    }

    /// The `len` bytes at `offset`.
    pub(crate) fn read_at(&self, offset: u64, len: usize) -> io::Result<Bytes> {
        match self {
            Source::Local(file) => read_vec_at(file, len, offset).map(Bytes::Owned),
            Source::Http(f) => f.read_at(offset, len),
            Source::Xrootd(f) => f.read_at(offset, len),
        }
    }
}

/// Bytes read from a file: owned, or shared with the part of a remote file's answer that
/// holds them (not copied out of it).
#[derive(Debug, Clone)]
pub(crate) enum Bytes {
    Owned(Vec<u8>),
    Shared(Arc<Vec<u8>>, std::ops::Range<usize>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Owned(bytes) => bytes,
            Bytes::Shared(part, range) => &part[range.clone()],
        }
    }
}

impl Bytes {
    /// The bytes as a vector of their own (copied where shared).
    pub(crate) fn into_vec(self) -> Vec<u8> {
        match self {
            Bytes::Owned(bytes) => bytes,
            Bytes::Shared(part, range) => part[range].to_vec(),
        }
    }
}

/// The `len` bytes of `file` at `offset`, read into a new vector's memory as the system gives
/// it, not zeroed first (zeroing what the read then overwrites cost as much as a fast codec's
/// decompression of the bytes).
#[cfg(unix)]
fn read_vec_at(file: &File, len: usize, offset: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        let at = offset + buf.len() as u64;
        match rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), at) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // The vector's room may be larger than asked for: what was read past `len` is not kept.
    buf.truncate(len);
    Ok(buf)
}

#[cfg(windows)]
fn read_vec_at(file: &File, len: usize, mut offset: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut at = &mut buf[..];
    while !at.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_read(file, at, offset)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        at = &mut at[n..];
        offset += n as u64;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_read_gives_the_bytes_asked_for_and_a_short_file_is_an_error() {
        let bytes: Vec<u8> = (0..=255).cycle().take(70_000).collect();
        let mut file = tempfile::tempfile().expect("a temporary file");
        std::io::Write::write_all(&mut file, &bytes).expect("written");
        for (offset, len) in [(0, 0), (3, 4), (1_000, 65_536), (0, 70_000), (69_999, 1)] {
            let got = read_vec_at(&file, len, offset as u64).expect("read");
            assert_eq!(got, bytes[offset..offset + len], "{len} bytes at {offset}");
        }
        let short = read_vec_at(&file, 10, 69_995).expect_err("past the end");
        assert_eq!(short.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn urls_are_told_from_paths() {
        for url in [
            "http://h/f.root",
            "https://h:8443/f.root",
            "root://eos//f.root",
            "davs://dcache.example.org:2880/pnfs/f.root",
        ] {
            assert!(is_url(Path::new(url)), "{url}");
        }
        for path in ["/data/f.root", "f.root", "roots/f.root", "http/f.root"] {
            assert!(!is_url(Path::new(path)), "{path}");
        }
    }
}
