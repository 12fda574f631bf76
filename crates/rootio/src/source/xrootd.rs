//! Files on an XRootD server (`root://`, `roots://`): EOS, dCache, XRootD itself. A native
//! client of the XRootD protocol (version 5), the part a reader needs: the handshake,
//! `kXR_protocol` (with TLS in the connection when the server or `roots://` asks for it),
//! `kXR_login`, authentication by token (`ztn`), `kXR_open` with the file's stat, `kXR_read`,
//! `kXR_readv` (vector reads of the ranges a reader planned), redirects (a redirector or an EOS
//! manager sending the client to a data server), waits, and the server's errors by code.
//!
//! A file keeps a few connections, each with the file open, so the reader's threads read at
//! once; a connection that failed or timed out is dropped, and the read tried again on a new
//! one from the URL's host. When the file closes its connections stay logged in, kept for the
//! next file on the same server ([`idle`]).

use std::io;
use std::sync::{Arc, Condvar, Mutex};

mod connection;
mod gsi;
mod idle;
mod read;

use connection::Connection;
use idle::LoginKey;

use super::net::{NetSettings, coalesce, count_received, pack};
use super::read_ahead::{ReadAhead, Sink, Unfetched, ends};
use super::tls::tls_config;
use super::{Bytes, RemoteIdentity};

/// The protocol version this client speaks (XRootD 5.1's).
const PROTOCOL_VERSION: u32 = 0x0000_0511;

// Request codes.
const KXR_AUTH: u16 = 3000;
const KXR_CLOSE: u16 = 3003;
const KXR_OPEN: u16 = 3010;
const KXR_PROTOCOL: u16 = 3006;
const KXR_LOGIN: u16 = 3007;
const KXR_READ: u16 = 3013;
const KXR_READV: u16 = 3025;

// Response statuses.
const KXR_OK: u16 = 0;
const KXR_OKSOFAR: u16 = 4000;
const KXR_ATTN: u16 = 4001;
const KXR_AUTHMORE: u16 = 4002;
const KXR_ERROR: u16 = 4003;
const KXR_REDIRECT: u16 = 4004;
const KXR_WAIT: u16 = 4005;
const KXR_WAITRESP: u16 = 4006;

// `kXR_protocol` flags: the client can speak TLS, wants it; the server says to start it.
const KXR_ABLE_TLS: u8 = 0x02;
const KXR_WANT_TLS: u8 = 0x04;
const KXR_EXPECT_LOGIN: u8 = 0x03;
const KXR_GOTO_TLS: u32 = 0x4000_0000;
// `kXR_open`: read only, and return the file's stat.
const KXR_OPEN_READ: u16 = 0x0010;
const KXR_RETSTAT: u16 = 0x0400;
// `kXR_login`'s capability version: the 2019 TLS-capable client.
const KXR_VER005: u8 = 5;
// `kXR_attn`'s action carrying a deferred response.
const KXR_ASYNRESP: u32 = 5008;

/// The most segments one `kXR_readv` carries (the protocol's `maxRvecsz`).
const READV_SEGMENTS: usize = 1024;
/// The most bytes one `kXR_readv` segment asks for (a server's default buffer: larger
/// segments are split).
const READV_SEGMENT: u64 = 1 << 20;
/// Planned ranges closer than this are read as one (the bytes between read and dropped).
const MERGE_GAP: u64 = 4096;
/// The most one vector read asks for.
const MAX_VECTOR: u64 = 8 * 1024 * 1024;
/// Connections one file keeps open at most (the reader's threads read at once).
const MAX_CONNECTIONS: usize = 4;
/// Redirects followed before giving up (a loop between servers).
const MAX_REDIRECTS: usize = 16;
/// The default port.
const DEFAULT_PORT: u16 = 1094;

/// A `root://` or `roots://` URL's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct XrdUrl {
    host: String,
    port: u16,
    /// The user to log in as (`root://user@host//path`), else the local user.
    user: Option<String>,
    /// The file's path on the server.
    path: String,
    /// Its CGI (`authz=…`, site options), without the `?`.
    cgi: String,
    /// `roots://`: TLS from the login on.
    tls: bool,
}

impl XrdUrl {
    fn parse(url: &str) -> io::Result<XrdUrl> {
        let bad = |why: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("not a root:// URL ({why}): expected root://host[:port]//path"),
            )
        };
        let (tls, rest) = if let Some(r) = url.strip_prefix("roots://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("root://") {
            (false, r)
        } else {
            return Err(bad("no root:// scheme"));
        };
        let (authority, path) = rest.split_at(rest.find('/').ok_or_else(|| bad("no path"))?);
        let (user, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_owned()), h),
            None => (None, authority),
        };
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            (h, after.strip_prefix(':'))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            Some(p) => p.parse().map_err(|_| bad("a port that is not a number"))?,
            None => DEFAULT_PORT,
        };
        // `root://host//abs/path` names `/abs/path`, as does `root://host/abs/path`.
        let path = format!("/{}", path.trim_start_matches('/'));
        let (path, cgi) = match path.split_once('?') {
            Some((p, c)) => (p.to_owned(), c.to_owned()),
            None => (path, String::new()),
        };
        Ok(XrdUrl {
            host: host.to_owned(),
            port,
            user,
            path,
            cgi,
            tls,
        })
    }

    /// The path with its CGI and `extra` (a redirect's), as `kXR_open` takes it.
    fn path_with(&self, extra: &str) -> String {
        let cgi: Vec<&str> = [self.cgi.as_str(), extra]
            .into_iter()
            .filter(|c| !c.is_empty())
            .collect();
        if cgi.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, cgi.join("&"))
        }
    }
}

/// A file on an XRootD server.
#[derive(Debug)]
pub(crate) struct XrootdFile {
    url: XrdUrl,
    net: NetSettings,
    pub(super) identity: RemoteIdentity,
    /// Its connections, each with the file open.
    pool: Mutex<Pool>,
    /// Signalled when a connection is given back or dropped.
    returned: Condvar,
    ahead: ReadAhead,
}

/// A file's connections: those not in use, and how many are open in all.
#[derive(Debug)]
struct Pool {
    idle: Vec<Connection>,
    open: usize,
}

impl XrootdFile {
    /// Connects, logs in and opens the file (following redirects); its size and modification
    /// time from the server's stat.
    pub(super) fn open(url: &str) -> io::Result<XrootdFile> {
        let url = XrdUrl::parse(url)?;
        let net = NetSettings::from_env();
        let (connection, stat) = net.with_retries(|| Connection::open(&url, &net))?;
        let file = XrootdFile {
            url,
            net,
            identity: parse_stat(&stat)?,
            pool: Mutex::new(Pool {
                idle: vec![connection],
                open: 1,
            }),
            returned: Condvar::new(),
            ahead: ReadAhead::default(),
        };
        file.ahead.keep_ends(ends(file.identity.size));
        Ok(file)
    }

    /// Plans the reads of `ranges` in vector reads ([`vector_reads`]), keeping what was
    /// planned of them before; the new ones are requested at once, in the background.
    pub(super) fn plan(self: &Arc<Self>, ranges: &[(u64, usize)]) {
        self.fetch_in_background(self.ahead.plan_keeping(ranges, vector_reads));
    }

    /// Requests `groups` in the background: the reader decodes while they come.
    fn fetch_in_background(self: &Arc<Self>, groups: Unfetched) {
        if !groups.is_empty() {
            let file = Arc::clone(self);
            std::thread::spawn(move || groups.fetch(|ranges, sink| file.fetch(ranges, sink)));
        }
    }

    /// Fetches what is planned and not yet fetched (at open, the file's two ends).
    pub(super) fn fetch_planned(&self) {
        self.ahead
            .unfetched()
            .fetch(|ranges, sink| self.fetch(ranges, sink));
    }

    /// The bytes of a planned group's `ranges`, into `sink` as they come: one vector read.
    fn fetch(&self, ranges: &[(u64, u64)], sink: &mut Sink<'_>) -> io::Result<()> {
        self.with_connection(|c| c.read_vector_into(ranges, sink))
    }

    /// Drops what was read ahead for a reader done with the file; its ends and small reads
    /// stay for the next.
    pub(super) fn drop_plan(&self) {
        self.ahead.drop_plan();
    }

    /// The `len` bytes at `offset`: from a planned vector read, else one read.
    pub(super) fn read_at(self: &Arc<Self>, offset: u64, len: usize) -> io::Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::Owned(Vec::new()));
        }
        let planned = self
            .ahead
            .read(offset, len, |groups| self.fetch_in_background(groups));
        if let Some(bytes) = planned {
            return Ok(bytes);
        }
        let mut buf = vec![0u8; len];
        self.with_connection(|c| c.read(&mut buf, offset))
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{e} (reading {len} bytes at offset {offset})"),
                )
            })?;
        self.ahead.keep_read(offset, &buf);
        Ok(Bytes::Owned(buf))
    }

    /// `request` on an idle connection (or a new one, up to [`MAX_CONNECTIONS`]), tried again
    /// on a new connection while it fails in a way that may pass; a connection whose request
    /// failed in transport is dropped.
    fn with_connection<T>(
        &self,
        mut request: impl FnMut(&mut Connection) -> io::Result<T>,
    ) -> io::Result<T> {
        self.net.with_retries(|| {
            let mut connection = self.take_connection()?;
            let result = request(&mut connection);
            let broken = connection.broken
                || result
                    .as_ref()
                    .is_err_and(|e| e.kind() == io::ErrorKind::TimedOut);
            self.give_back((!broken).then_some(connection));
            result
        })
    }

    /// An idle connection, else a new one when fewer than [`MAX_CONNECTIONS`] are open, else
    /// the first to come back.
    fn take_connection(&self) -> io::Result<Connection> {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(c) = pool.idle.pop() {
                return Ok(c);
            }
            if pool.open < MAX_CONNECTIONS {
                pool.open += 1;
                drop(pool);
                return Connection::open(&self.url, &self.net)
                    .map(|(c, _)| c)
                    .inspect_err(|_| self.give_back(None));
            }
            pool = self.returned.wait(pool).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Gives a connection back to the pool (`None`: it was dropped), waking a request waiting
    /// for one.
    fn give_back(&self, connection: Option<Connection>) {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        match connection {
            Some(c) => pool.idle.push(c),
            None => pool.open -= 1,
        }
        self.returned.notify_one();
    }
}

impl Drop for XrootdFile {
    /// Closes the file on its connections, which are kept for the next file on their server.
    fn drop(&mut self) {
        let pool = self.pool.get_mut().unwrap_or_else(|p| p.into_inner());
        for c in pool.idle.drain(..) {
            if let Some(c) = c.close_file() {
                idle::keep(c);
            }
        }
    }
}

/// What a connection to `host:port` for `url` may be reused for.
fn login_key(host: &str, port: u16, url: &XrdUrl, net: &NetSettings) -> LoginKey {
    LoginKey {
        server: format!("{host}:{port}"),
        user: url.user.clone(),
        tls: url.tls,
        token: net.token.as_ref().map(|t| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            t.hash(&mut h);
            h.finish()
        }),
    }
}

/// `kXR_login`'s parameters: the process, the user (8 bytes), the client's capability.
fn login_params(url: &XrdUrl) -> [u8; 16] {
    let user = url
        .user
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "gnn4c".to_owned());
    let mut params = [0u8; 16];
    params[..4].copy_from_slice(&std::process::id().to_be_bytes());
    for (p, b) in params[4..12].iter_mut().zip(user.bytes()) {
        *p = b;
    }
    params[14] = KXR_VER005;
    params
}

/// The servers (`host:port`) that answered `kXR_protocol` without asking for TLS: a new
/// connection to them sends its login with the handshake, one round trip fewer.
fn plain_servers() -> std::sync::MutexGuard<'static, std::collections::HashSet<String>> {
    static PLAIN: std::sync::OnceLock<Mutex<std::collections::HashSet<String>>> =
        std::sync::OnceLock::new();
    PLAIN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// `ranges` merged where they touch (or are closer than [`MERGE_GAP`]), in vector reads of at
/// most [`READV_SEGMENTS`] segments and [`MAX_VECTOR`] bytes.
fn vector_reads(ranges: &[(u64, usize)]) -> Vec<Vec<(u64, u64)>> {
    let spans = coalesce(ranges, MERGE_GAP, MAX_VECTOR);
    pack(spans, MAX_VECTOR, READV_SEGMENTS, |len| {
        usize::try_from(len.div_ceil(READV_SEGMENT)).unwrap_or(usize::MAX)
    })
}

/// The size and modification time of a stat (`id size flags modtime`).
fn parse_stat(stat: &str) -> io::Result<RemoteIdentity> {
    let fields: Vec<&str> = stat.split_whitespace().collect();
    let size = fields
        .get(1)
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the server's stat of the file is not 'id size flags modtime': {stat:?}"),
            )
        })?;
    Ok(RemoteIdentity {
        size,
        modified: fields.get(3).map(|m| (*m).to_owned()),
        etag: None,
    })
}

#[cfg(test)]
mod tests {
    use super::connection::ztn_credential;
    use super::*;

    #[test]
    fn urls_give_host_port_path_and_cgi() {
        let u = XrdUrl::parse("root://eospublic.cern.ch//eos/opendata/f.root").expect("url");
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str(), u.tls),
            ("eospublic.cern.ch", 1094, "/eos/opendata/f.root", false)
        );
        let u = XrdUrl::parse("roots://me@[::1]:1095/store/f.root?authz=x").expect("url");
        assert_eq!(
            (
                u.host.as_str(),
                u.port,
                u.user.as_deref(),
                u.path.as_str(),
                u.tls
            ),
            ("::1", 1095, Some("me"), "/store/f.root", true)
        );
        assert_eq!(u.path_with("tried=a"), "/store/f.root?authz=x&tried=a");
        for bad in [
            "root://host",
            "root://:1094//f",
            "root://h:x//f",
            "http://h/f",
        ] {
            assert!(XrdUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn planned_ranges_become_bounded_vector_reads() {
        // 3,000 ranges 10 kB apart: not merged, at most 1,024 to a vector read.
        let ranges: Vec<(u64, usize)> = (0..3000).map(|i| (i * 10_000, 100)).collect();
        let groups = vector_reads(&ranges);
        let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
        assert_eq!(sizes, [1024, 1024, 952]);
        // Ranges closer than 4 kB are one; a range over 1 MiB counts its parts as segments.
        assert_eq!(vector_reads(&[(0, 10), (100, 10)]), [vec![(0, 110)]]);
        let big = vector_reads(&[(0, 3 << 20), (10 << 20, 10)]);
        assert_eq!(big, [vec![(0, 3 << 20), (10 << 20, 10)]]);
        assert_eq!(parse_stat("1 100 0 5").expect("stat").size, 100);
        assert!(parse_stat("nonsense").is_err());
    }

    #[test]
    fn a_token_is_framed_as_ztn_sends_it() {
        assert_eq!(
            ztn_credential("abc").expect("framed"),
            b"ztn\0\0T\0\0\0\x04abc\0"
        );
        assert!(ztn_credential(&"x".repeat(70_000)).is_err());
    }
}
