//! Files on an XRootD server (`root://`, `roots://`): EOS, dCache, XRootD itself. A native
//! client of the XRootD protocol (version 5), the part a reader needs: the handshake,
//! `kXR_protocol` (with TLS in the connection when the server or `roots://` asks for it),
//! `kXR_login`, authentication by token (`ztn`), `kXR_open` with the file's stat, `kXR_read`,
//! `kXR_readv` (vector reads of the ranges a reader planned), redirects (a redirector or an EOS
//! manager sending the client to a data server), waits, and the server's errors by code.
//!
//! A file keeps a few connections, each with the file open, so the reader's threads read at
//! once; a connection that failed or timed out is dropped, and the read tried again on a new
//! one from the URL's host.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::RemoteIdentity;
use super::net::{NetSettings, ReadAhead, coalesce, count_received, ends};
use super::tls::tls_config;

/// The protocol version this client speaks (XRootD 5.1's).
const PROTOCOL_VERSION: u32 = 0x0000_0511;

// Request codes.
const KXR_AUTH: u16 = 3000;
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
        file.plan_ends();
        Ok(file)
    }

    /// Plans the reads of `ranges` in vector reads ([`vector_reads`]), keeping what was
    /// planned of them before; the new ones are requested at once, in the background.
    pub(super) fn plan(self: &Arc<Self>, ranges: &[(u64, usize)]) {
        let unfetched = self.ahead.plan_keeping(ranges, vector_reads);
        // Requested now, in the background: the reader decodes while they come.
        if !unfetched.is_empty() {
            let file = Arc::clone(self);
            std::thread::spawn(move || {
                unfetched.fetch(|ranges| file.with_connection(|c| c.read_vector(ranges)));
            });
        }
    }

    /// Plans the file's two ends alone, in one vector read (what a reader's first reads
    /// need), dropping what was read ahead.
    pub(super) fn plan_ends(&self) {
        self.ahead.plan(vec![ends(self.identity.size)]);
    }

    /// Fills `buf` with the bytes at `offset`: from a planned vector read, else one read.
    pub(super) fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let served = self.ahead.read(buf, offset, |ranges| {
            self.with_connection(|c| c.read_vector(ranges))
        });
        if served {
            return Ok(());
        }
        self.with_connection(|c| c.read(buf, offset)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{e} (reading {} bytes at offset {offset})", buf.len()),
            )
        })
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
    let mut groups: Vec<Vec<(u64, u64)>> = Vec::new();
    // The last group's bytes and segments.
    let (mut bytes, mut segments) = (0, 0);
    for (offset, len) in coalesce(ranges, MERGE_GAP, MAX_VECTOR) {
        let parts = len.div_ceil(READV_SEGMENT) as usize;
        match groups.last_mut() {
            Some(g) if bytes + len <= MAX_VECTOR && segments + parts <= READV_SEGMENTS => {
                g.push((offset, len));
                bytes += len;
                segments += parts;
            }
            _ => {
                groups.push(vec![(offset, len)]);
                (bytes, segments) = (len, parts);
            }
        }
    }
    groups
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

/// The bytes of a connection: plain, or TLS started in it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
    /// While the connection moves into TLS, and after that failed.
    Closed,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stream::Plain(_) => "Plain",
            Stream::Tls(_) => "Tls",
            Stream::Closed => "Closed",
        })
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
            Stream::Closed => Err(io::ErrorKind::NotConnected.into()),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
            Stream::Closed => Err(io::ErrorKind::NotConnected.into()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
            Stream::Closed => Ok(()),
        }
    }
}

/// What a server answered a request.
enum Reply {
    /// The response's body (every `kXR_oksofar` part, then the `kXR_ok`).
    Ok(Vec<u8>),
    /// Go to `host:port`, adding `cgi` to the path.
    Redirect {
        host: String,
        port: u16,
        cgi: String,
    },
}

/// A logged-in connection to one server, with the file open on it.
#[derive(Debug)]
struct Connection {
    stream: Stream,
    handle: [u8; 4],
    /// Its transport failed or answered out of step: not used again.
    broken: bool,
    /// The server's name, for messages.
    server: String,
    timeout: Duration,
    /// Whether a bearer token was found (a refusal then says so).
    token_found: bool,
}

impl Connection {
    /// A connection to `url`'s server (or where it redirects) with the file open; the
    /// file's stat.
    fn open(url: &XrdUrl, net: &NetSettings) -> io::Result<(Connection, String)> {
        let (mut host, mut port) = (url.host.clone(), url.port);
        let mut extra_cgi = String::new();
        for _ in 0..MAX_REDIRECTS {
            let mut c = Connection::login(&host, port, url, net)?;
            let path = url.path_with(&extra_cgi);
            let mut params = [0u8; 16];
            params[2..4].copy_from_slice(&(KXR_OPEN_READ | KXR_RETSTAT).to_be_bytes());
            match c.request(KXR_OPEN, params, path.as_bytes())? {
                Reply::Ok(body) if body.len() >= 4 => {
                    c.handle.copy_from_slice(&body[..4]);
                    let stat = body.get(12..).unwrap_or_default();
                    let stat = String::from_utf8_lossy(stat)
                        .trim_end_matches('\0')
                        .to_owned();
                    return Ok((c, stat));
                }
                Reply::Ok(_) => return Err(c.out_of_step("kXR_open")),
                Reply::Redirect {
                    host: h,
                    port: p,
                    cgi,
                } => {
                    (host, port, extra_cgi) = (h, p, cgi);
                }
            }
        }
        Err(io::Error::other(format!(
            "more than {MAX_REDIRECTS} redirects opening the file (a loop between servers?)"
        )))
    }

    /// Connects to `host:port`, agrees the protocol (starting TLS when asked), logs in and
    /// authenticates.
    fn login(host: &str, port: u16, url: &XrdUrl, net: &NetSettings) -> io::Result<Connection> {
        let server = format!("{host}:{port}");
        let tcp = connect(host, port, net.timeout)
            .map_err(|e| io::Error::new(e.kind(), format!("connecting to {server}: {e}")))?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(net.timeout))?;
        tcp.set_write_timeout(Some(net.timeout))?;
        let mut c = Connection {
            stream: Stream::Plain(tcp),
            handle: [0; 4],
            broken: false,
            server,
            timeout: net.timeout,
            token_found: net.token.is_some(),
        };
        // The handshake (4, 2012 after three zeros), then `kXR_protocol` in the same write; and
        // `kXR_login` too where this server said before that it does not want TLS (the login
        // must otherwise wait for the protocol's answer: it may ask for TLS first).
        let mut first = Vec::with_capacity(44 + 24);
        for word in [0u32, 0, 0, 4, 2012] {
            first.extend_from_slice(&word.to_be_bytes());
        }
        let mut params = [0u8; 16];
        params[..4].copy_from_slice(&PROTOCOL_VERSION.to_be_bytes());
        params[4] = KXR_ABLE_TLS | if url.tls { KXR_WANT_TLS } else { 0 };
        params[5] = KXR_EXPECT_LOGIN;
        first.extend_from_slice(&header(KXR_PROTOCOL, params, 0));
        let pipelined = !url.tls && plain_servers().contains(&c.server);
        if pipelined {
            first.extend_from_slice(&header(KXR_LOGIN, login_params(url), 0));
        }
        c.write(&first)?;
        // The handshake's answer: a header with no stream, 8 bytes (the protocol, the kind).
        let (_, status, body) = c.read_frame()?;
        if status != KXR_OK || body.len() != 8 {
            return Err(c.out_of_step("the handshake"));
        }
        let flags = match c.reply()? {
            Reply::Ok(body) if body.len() >= 8 => {
                u32::from_be_bytes(body[4..8].try_into().expect("4 bytes"))
            }
            _ => return Err(c.out_of_step("kXR_protocol")),
        };
        if flags & KXR_GOTO_TLS != 0 {
            if pipelined {
                // The server changed its mind: the login went out in the clear. Forget it, and
                // let the retry log in the long way.
                plain_servers().remove(&c.server);
                c.broken = true;
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    format!("{} now asks for TLS", c.server),
                ));
            }
            c.start_tls(host)?;
        } else if url.tls {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: roots:// asks for TLS, which the server does not speak",
                    c.server
                ),
            ));
        } else {
            plain_servers().insert(c.server.clone());
        }
        // `kXR_login`: its answer, or the request and its answer.
        let login = match pipelined {
            true => match c.reply_or_wait()? {
                Ok(reply) => reply,
                Err(wait) => {
                    std::thread::sleep(wait);
                    c.request(KXR_LOGIN, login_params(url), &[])?
                }
            },
            false => c.request(KXR_LOGIN, login_params(url), &[])?,
        };
        let body = match login {
            Reply::Ok(body) if body.len() >= 16 => body,
            _ => return Err(c.out_of_step("kXR_login")),
        };
        // After the session id, the authentication the server asks for: `&P=ztn,…&P=gsi,…`.
        let asked = String::from_utf8_lossy(&body[16..])
            .trim_end_matches('\0')
            .to_owned();
        if !asked.trim().is_empty() {
            c.authenticate(&asked, net)?;
        }
        Ok(c)
    }

    /// Starts TLS in the connection (after `kXR_protocol`, as the server asked), checking
    /// the server's certificate against the trusted CAs.
    fn start_tls(&mut self, host: &str) -> io::Result<()> {
        let name = rustls_pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host}: {e}")))?;
        let session = rustls::ClientConnection::new(tls_config()?, name)
            .map_err(|e| io::Error::other(format!("TLS: {e}")))?;
        let Stream::Plain(tcp) = std::mem::replace(&mut self.stream, Stream::Closed) else {
            return Err(io::Error::other("TLS started twice"));
        };
        let mut tls = rustls::StreamOwned::new(session, tcp);
        // The handshake now, so that an untrusted certificate is named here.
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock).map_err(|e| {
                let certificate = e.to_string().contains("certificate");
                io::Error::new(
                    if certificate {
                        io::ErrorKind::InvalidData
                    } else {
                        e.kind()
                    },
                    if certificate {
                        format!(
                            "TLS with {}: {e} (is the server's CA trusted? Set X509_CERT_DIR to \
                             the folder of your site's CAs)",
                            self.server
                        )
                    } else {
                        format!("TLS with {}: {e}", self.server)
                    },
                )
            })?;
        }
        self.stream = Stream::Tls(Box::new(tls));
        Ok(())
    }

    /// Authenticates with the first protocol the server offers that this client speaks:
    /// `ztn`, a WLCG bearer token (over TLS only, as the protocol requires).
    fn authenticate(&mut self, asked: &str, net: &NetSettings) -> io::Result<()> {
        let offered: Vec<&str> = asked
            .split("&P=")
            .filter_map(|p| p.split(',').next())
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        let tls = matches!(self.stream, Stream::Tls(_));
        if offered.contains(&"ztn")
            && tls
            && let Some(token) = &net.token
        {
            let mut params = [0u8; 16];
            params[12..16].copy_from_slice(b"ztn\0");
            return match self.request(KXR_AUTH, params, &ztn_credential(token)?)? {
                Reply::Ok(_) => Ok(()),
                Reply::Redirect { .. } => Err(self.out_of_step("kXR_auth")),
            };
        }
        let hint = if offered.contains(&"ztn") && net.token.is_none() {
            "; no bearer token was found (set BEARER_TOKEN or BEARER_TOKEN_FILE)"
        } else if offered.contains(&"ztn") && !tls {
            "; tokens (ztn) go over TLS only: read the file as roots://"
        } else {
            "; this reader authenticates with tokens (ztn): read the file over https:// with a \
             token, or ask the site for token access"
        };
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} asks for authentication by {}{hint}",
                self.server,
                offered.join(", ")
            ),
        ))
    }

    /// `len(buf)` bytes at `offset` (`kXR_read`).
    fn read(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let body = self.read_span(offset, buf.len())?;
        buf.copy_from_slice(&body);
        Ok(())
    }

    /// The `len` bytes at `offset`, in one `kXR_read` (which the server may answer straight
    /// from the file, with `sendfile`).
    fn read_span(&mut self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut params = [0u8; 16];
        params[..4].copy_from_slice(&self.handle);
        params[4..12].copy_from_slice(&offset.to_be_bytes());
        let asked = u32::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a read over 4 GiB"))?;
        params[12..16].copy_from_slice(&asked.to_be_bytes());
        match self.request(KXR_READ, params, &[])? {
            Reply::Ok(body) if body.len() == len => Ok(body),
            Reply::Ok(body) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{} sent {} of the {len} bytes asked for",
                    self.server,
                    body.len(),
                ),
            )),
            _ => Err(self.out_of_step("kXR_read")),
        }
    }

    /// The bytes of `ranges` (`offset`, `len`), one after the other, in one vector read
    /// (`kXR_readv`; a range over [`READV_SEGMENT`] bytes asked for in parts).
    fn read_vector(&mut self, ranges: &[(u64, u64)]) -> io::Result<Vec<u8>> {
        // One span: a plain read, which the server sends faster and this side copies once.
        if let [(offset, len)] = *ranges {
            return self.read_span(offset, len as usize);
        }
        let mut list = Vec::new();
        let mut expected = 0usize;
        for &(offset, len) in ranges {
            let mut at = 0;
            while at < len {
                let part = (len - at).min(READV_SEGMENT);
                list.extend_from_slice(&self.handle);
                list.extend_from_slice(&(part as u32).to_be_bytes());
                list.extend_from_slice(&(offset + at).to_be_bytes());
                at += part;
            }
            expected += len as usize;
        }
        let Reply::Ok(body) = self.request(KXR_READV, [0u8; 16], &list)? else {
            return Err(self.out_of_step("kXR_readv"));
        };
        // Each segment's bytes follow its 16-byte header (handle, length, offset).
        let mut out = Vec::with_capacity(expected);
        let mut at = 0;
        for asked in list.chunks_exact(16) {
            let head = body.get(at..at + 16).ok_or_else(|| self.short_vector())?;
            if head[..4] != asked[..4] || head[8..16] != asked[8..16] || head[4..8] != asked[4..8] {
                return Err(self.short_vector());
            }
            let n = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
            out.extend_from_slice(
                body.get(at + 16..at + 16 + n)
                    .ok_or_else(|| self.short_vector())?,
            );
            at += 16 + n;
        }
        if out.len() != expected {
            return Err(self.short_vector());
        }
        Ok(out)
    }

    fn short_vector(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{}: a vector read came back short or out of order",
                self.server
            ),
        )
    }

    /// Sends request `code` with its 16 bytes of parameters and `data`; the server's reply
    /// (waiting as long as it says to, and sending again, when it says to wait).
    fn request(&mut self, code: u16, params: [u8; 16], data: &[u8]) -> io::Result<Reply> {
        let len = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a request over 4 GiB"))?;
        let mut message = header(code, params, len).to_vec();
        message.extend_from_slice(data);
        let mut waited = Duration::ZERO;
        loop {
            self.write(&message)?;
            match self.reply_or_wait()? {
                Ok(reply) => return Ok(reply),
                Err(wait) => {
                    waited += wait;
                    if waited > self.timeout.max(Duration::from_secs(60)) {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("{} kept asking to wait (for {waited:?})", self.server),
                        ));
                    }
                    std::thread::sleep(wait);
                }
            }
        }
    }

    /// The reply to the request just sent.
    fn reply(&mut self) -> io::Result<Reply> {
        match self.reply_or_wait()? {
            Ok(reply) => Ok(reply),
            Err(_) => Err(self.out_of_step("a wait where none is expected")),
        }
    }

    /// The reply to the request just sent, or how long the server asks to wait before
    /// sending it again.
    fn reply_or_wait(&mut self) -> io::Result<Result<Reply, Duration>> {
        let mut body = Vec::new();
        loop {
            let (_, status, mut part) = self.read_frame()?;
            match status {
                KXR_OK => {
                    if body.is_empty() {
                        return Ok(Ok(Reply::Ok(part)));
                    }
                    body.append(&mut part);
                    return Ok(Ok(Reply::Ok(body)));
                }
                KXR_OKSOFAR => body.append(&mut part),
                KXR_AUTHMORE => {
                    return Err(self.out_of_step("kXR_authmore (a multi-step authentication)"));
                }
                KXR_ERROR => return Err(self.server_error(&part)),
                KXR_REDIRECT => {
                    let port = int_at(&part, 0)?;
                    let target = String::from_utf8_lossy(&part[4..])
                        .trim_end_matches('\0')
                        .to_owned();
                    let (host, cgi) = match target.split_once('?') {
                        Some((h, c)) => (h.to_owned(), c.to_owned()),
                        None => (target, String::new()),
                    };
                    let port = u16::try_from(port).map_err(|_| {
                        io::Error::other(format!(
                            "{} redirects to a URL ({host}), which this reader does not follow",
                            self.server
                        ))
                    })?;
                    return Ok(Ok(Reply::Redirect { host, port, cgi }));
                }
                KXR_WAIT => {
                    let seconds = int_at(&part, 0)?.clamp(1, 30) as u64;
                    return Ok(Err(Duration::from_secs(seconds)));
                }
                KXR_WAITRESP => {
                    // The answer comes later, as a `kXR_attn` carrying it: wait up to the
                    // time the server gives, and the usual timeout besides.
                    let seconds = int_at(&part, 0)?.max(0) as u64;
                    self.set_read_timeout(self.timeout + Duration::from_secs(seconds))?;
                    let attn = self.read_frame();
                    self.set_read_timeout(self.timeout)?;
                    let (_, status, attn) = attn?;
                    if status != KXR_ATTN
                        || attn.len() < 16
                        || int_at(&attn, 0)? as u32 != KXR_ASYNRESP
                    {
                        return Err(self.out_of_step("a deferred response"));
                    }
                    // The deferred response: a response header and its body, after 8 bytes.
                    let status = u16::from_be_bytes([attn[10], attn[11]]);
                    let part = attn[16..].to_vec();
                    match status {
                        KXR_OK => return Ok(Ok(Reply::Ok(part))),
                        KXR_ERROR => return Err(self.server_error(&part)),
                        _ => return Err(self.out_of_step("a deferred response")),
                    }
                }
                KXR_ATTN => {} // A message from the server to no request: not this reply.
                _ => return Err(self.out_of_step(&format!("status {status}"))),
            }
        }
    }

    /// One response frame: its stream, status and body.
    fn read_frame(&mut self) -> io::Result<([u8; 2], u16, Vec<u8>)> {
        let mut head = [0u8; 8];
        self.read_all(&mut head)?;
        let status = u16::from_be_bytes([head[2], head[3]]);
        let len = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
        let mut body = vec![0u8; len];
        self.read_all(&mut body)?;
        count_received(head.len() + len);
        Ok(([head[0], head[1]], status, body))
    }

    fn read_all(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.stream.read_exact(buf).map_err(|e| self.transport(&e))
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let written = self
            .stream
            .write_all(bytes)
            .and_then(|()| self.stream.flush());
        written.map_err(|e| self.transport(&e))
    }

    fn set_read_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        match &self.stream {
            Stream::Plain(s) => s.set_read_timeout(Some(timeout)),
            Stream::Tls(s) => s.sock.set_read_timeout(Some(timeout)),
            Stream::Closed => Ok(()),
        }
    }

    /// A transport failure: the connection is not used again; a timeout says so.
    fn transport(&mut self, e: &io::Error) -> io::Error {
        self.broken = true;
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{} timed out (no answer in {:?})",
                    self.server, self.timeout
                ),
            ),
            io::ErrorKind::UnexpectedEof => io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("{} closed the connection", self.server),
            ),
            kind => io::Error::new(kind, format!("{}: {e}", self.server)),
        }
    }

    /// An answer the protocol does not allow here: the connection is not used again.
    fn out_of_step(&mut self, what: &str) -> io::Error {
        self.broken = true;
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} answered {what} out of step with the XRootD protocol",
                self.server
            ),
        )
    }

    /// A `kXR_error` body (code, message) as an I/O error whose kind says what the reader
    /// does with it.
    fn server_error(&self, body: &[u8]) -> io::Error {
        let code = int_at(body, 0).unwrap_or(0);
        let message = String::from_utf8_lossy(body.get(4..).unwrap_or_default())
            .trim_end_matches('\0')
            .trim()
            .to_owned();
        let (kind, what, hint) = match code {
            3011 => (io::ErrorKind::NotFound, "not found", ""),
            3010 | 3030 if !self.token_found => (
                io::ErrorKind::PermissionDenied,
                "not authorized",
                "; no bearer token was found (set BEARER_TOKEN or BEARER_TOKEN_FILE)",
            ),
            3010 | 3030 => (
                io::ErrorKind::PermissionDenied,
                "not authorized",
                "; the bearer token was refused",
            ),
            3007 | 3012 | 3024 => (io::ErrorKind::ResourceBusy, "server error", ""),
            _ => (io::ErrorKind::Other, "error", ""),
        };
        io::Error::new(
            kind,
            format!(
                "XRootD {what} (kXR error {code}) from {}: {message}{hint}",
                self.server
            ),
        )
    }
}

/// A token as the `ztn` protocol sends it: the protocol's name, version 0, `T` (a token),
/// two reserved bytes, the token's length with its closing NUL (big-endian), the token, NUL.
fn ztn_credential(token: &str) -> io::Result<Vec<u8>> {
    let len = u16::try_from(token.len() + 1).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the bearer token is over 64 kB",
        )
    })?;
    let mut cred = b"ztn\0\0T\0\0".to_vec();
    cred.extend_from_slice(&len.to_be_bytes());
    cred.extend_from_slice(token.as_bytes());
    cred.push(0);
    Ok(cred)
}

impl Drop for Connection {
    /// Ends TLS cleanly (the server then logs no error), best effort.
    fn drop(&mut self) {
        if let Stream::Tls(tls) = &mut self.stream {
            tls.conn.send_close_notify();
            // Written only: nothing is waited for.
            while tls.conn.wants_write() && tls.conn.write_tls(&mut tls.sock).is_ok() {}
        }
    }
}

/// A request's 24-byte header: stream 1, `code`, its parameters, the length of its data.
fn header(code: u16, params: [u8; 16], dlen: u32) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[1] = 1;
    h[2..4].copy_from_slice(&code.to_be_bytes());
    h[4..20].copy_from_slice(&params);
    h[20..24].copy_from_slice(&dlen.to_be_bytes());
    h
}

/// The big-endian `i32` at `at`.
fn int_at(bytes: &[u8], at: usize) -> io::Result<i32> {
    bytes
        .get(at..at + 4)
        .map(|b| i32::from_be_bytes(b.try_into().expect("4 bytes")))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "a response shorter than its fields",
            )
        })
}

/// A TCP connection to `host:port`, each address tried within `timeout`.
fn connect(host: &str, port: u16, timeout: Duration) -> io::Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("no address for {host}"));
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout.min(Duration::from_secs(10))) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(match last.kind() {
        io::ErrorKind::ConnectionRefused | io::ErrorKind::TimedOut => {
            io::Error::new(io::ErrorKind::ConnectionAborted, last.to_string())
        }
        _ => last,
    })
}

#[cfg(test)]
mod tests {
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
