//! One connection to an XRootD server: TCP (and TLS when asked), the handshake,
//! `kXR_protocol`, `kXR_login`, authentication (tokens: `ztn`; X.509 proxies: `gsi`), requests
//! framed and their replies read (partial, waits, redirects, deferred responses, errors by code).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::idle::{self, LoginKey};
use super::*;

/// The bytes of a connection: plain, or TLS started in it.
pub(super) enum Stream {
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
pub(super) enum Reply {
    /// The response's body (every `kXR_oksofar` part, then the `kXR_ok`).
    Ok(Vec<u8>),
    /// Go to `host:port`, adding `cgi` to the path.
    Redirect {
        host: String,
        port: u16,
        cgi: String,
    },
    /// An authentication's next step: what the server sends back to continue
    /// (`kXR_authmore`).
    AuthMore(Vec<u8>),
}

/// A logged-in connection to one server, with the file open on it.
#[derive(Debug)]
pub(super) struct Connection {
    pub(super) stream: Stream,
    pub(super) handle: [u8; 4],
    /// Its transport failed or answered out of step: not used again.
    pub(super) broken: bool,
    /// What it may be reused for once its file is closed.
    pub(super) key: LoginKey,
    /// The server's name, for messages.
    pub(super) server: String,
    pub(super) timeout: Duration,
    /// Whether a bearer token was found (a refusal then says so).
    pub(super) token_found: bool,
    /// Whether it authenticated with the user's X.509 proxy (`gsi`).
    pub(super) by_proxy: bool,
}

impl Connection {
    /// A connection to `url`'s server (or where it redirects) with the file open; the
    /// file's stat.
    pub(super) fn open(url: &XrdUrl, net: &NetSettings) -> io::Result<(Connection, String)> {
        let (mut host, mut port) = (url.host.clone(), url.port);
        let mut extra_cgi = String::new();
        for _ in 0..MAX_REDIRECTS {
            let path = url.path_with(&extra_cgi);
            let (mut c, reply) = Connection::open_on(&host, port, url, net, &path)?;
            match reply {
                Reply::Ok(body) if body.len() >= 4 => {
                    c.handle.copy_from_slice(&body[..4]);
                    let stat = body.get(12..).unwrap_or_default();
                    let stat = String::from_utf8_lossy(stat)
                        .trim_end_matches('\0')
                        .to_owned();
                    return Ok((c, stat));
                }
                Reply::Ok(_) | Reply::AuthMore(_) => return Err(c.out_of_step("kXR_open")),
                Reply::Redirect {
                    host: h,
                    port: p,
                    cgi,
                } => {
                    // Logged in, no file open: kept for the next file on this server.
                    idle::keep(c);
                    (host, port, extra_cgi) = (h, p, cgi);
                }
            }
        }
        Err(io::Error::other(format!(
            "more than {MAX_REDIRECTS} redirects opening the file (a loop between servers?)"
        )))
    }

    /// `kXR_open` of `path` on a logged-in connection to `host:port`: one this process kept
    /// (one that went stale while idle is dropped, and the next tried), else a new one.
    fn open_on(
        host: &str,
        port: u16,
        url: &XrdUrl,
        net: &NetSettings,
        path: &str,
    ) -> io::Result<(Connection, Reply)> {
        let mut params = [0u8; 16];
        params[2..4].copy_from_slice(&(KXR_OPEN_READ | KXR_RETSTAT).to_be_bytes());
        let key = login_key(host, port, url, net);
        while let Some(mut c) = idle::take(&key) {
            match c.request(KXR_OPEN, params, path.as_bytes()) {
                Ok(reply) => return Ok((c, reply)),
                Err(_) if c.broken => {}
                Err(e) => {
                    idle::keep(c);
                    return Err(e);
                }
            }
        }
        let mut c = Connection::login(host, port, url, net)?;
        let reply = c.request(KXR_OPEN, params, path.as_bytes())?;
        Ok((c, reply))
    }

    /// Closes the file open on this connection (`kXR_close`, its answer not waited for: the
    /// next request skips it); the connection, logged in, for the next file on its server.
    pub(super) fn close_file(mut self) -> Option<Connection> {
        let mut params = [0u8; 16];
        params[..4].copy_from_slice(&self.handle);
        let close = header_on(CLOSE_STREAM, KXR_CLOSE, params, 0);
        self.write(&close).ok()?;
        self.handle = [0; 4];
        Some(self)
    }

    /// Connects to `host:port`, agrees the protocol (starting TLS when asked), logs in and
    /// authenticates.
    pub(super) fn login(
        host: &str,
        port: u16,
        url: &XrdUrl,
        net: &NetSettings,
    ) -> io::Result<Connection> {
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
            key: login_key(host, port, url, net),
            server,
            timeout: net.timeout,
            token_found: net.token.is_some(),
            by_proxy: false,
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
            c.authenticate(&asked, host, net)?;
        }
        Ok(c)
    }

    /// Starts TLS in the connection (after `kXR_protocol`, as the server asked), checking
    /// the server's certificate against the trusted CAs.
    pub(super) fn start_tls(&mut self, host: &str) -> io::Result<()> {
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

    /// Authenticates with the first protocol the server offers that this client speaks and
    /// has a credential for: `ztn`, a WLCG bearer token (over TLS only, as the protocol
    /// requires); `gsi`, the user's X.509 proxy. `host` is the server's name in the URL.
    pub(super) fn authenticate(
        &mut self,
        asked: &str,
        host: &str,
        net: &NetSettings,
    ) -> io::Result<()> {
        let offers: Vec<(&str, &str)> = asked
            .split("&P=")
            .map(|p| p.split_once(',').unwrap_or((p, "")))
            .map(|(name, params)| (name.trim(), params.trim_end_matches('\0')))
            .filter(|(name, _)| !name.is_empty())
            .collect();
        let offered: Vec<&str> = offers.iter().map(|(name, _)| *name).collect();
        let tls = matches!(self.stream, Stream::Tls(_));
        let proxy = if offered.contains(&"gsi") {
            super::gsi::proxy()?
        } else {
            None
        };
        for (name, params) in &offers {
            match *name {
                "ztn" if tls && net.token.is_some() => {
                    let token = net.token.as_deref().unwrap_or_default();
                    return match self.auth_step(*b"ztn\0", &ztn_credential(token)?)? {
                        None => Ok(()),
                        Some(_) => Err(self.out_of_step("kXR_auth")),
                    };
                }
                "gsi" if proxy.is_some() => {
                    let proxy = proxy.as_deref().expect("a proxy");
                    self.by_proxy = true;
                    return super::gsi::authenticate(self, params, host, proxy);
                }
                _ => {}
            }
        }
        // Why none was used: what is missing for each one offered that this client speaks.
        let mut hints = Vec::new();
        if offered.contains(&"ztn") && net.token.is_none() {
            hints.push("no bearer token was found (set BEARER_TOKEN or BEARER_TOKEN_FILE)");
        } else if offered.contains(&"ztn") {
            hints.push("tokens (ztn) go over TLS only: read the file as roots://");
        }
        if offered.contains(&"gsi") {
            hints.push("no X.509 proxy was found (run voms-proxy-init, or set X509_USER_PROXY)");
        }
        if hints.is_empty() {
            hints.push(
                "this reader authenticates with tokens (ztn) and X.509 proxies (gsi): read the \
                 file over https:// with a token, or ask the site for token access",
            );
        }
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} asks for authentication by {}; {}",
                self.server,
                offered.join(", "),
                hints.join("; ")
            ),
        ))
    }

    /// One round of `kXR_auth` with `credential` of type `kind`: `None` once the server
    /// accepts, or what it sends back to continue (`kXR_authmore`).
    pub(super) fn auth_step(
        &mut self,
        kind: [u8; 4],
        credential: &[u8],
    ) -> io::Result<Option<Vec<u8>>> {
        let mut params = [0u8; 16];
        params[12..16].copy_from_slice(&kind);
        match self.request(KXR_AUTH, params, credential)? {
            Reply::Ok(_) => Ok(None),
            Reply::AuthMore(more) => Ok(Some(more)),
            Reply::Redirect { .. } => Err(self.out_of_step("kXR_auth")),
        }
    }

    /// Sends request `code` with its 16 bytes of parameters and `data`; the server's reply
    /// (waiting as long as it says to, and sending again, when it says to wait).
    pub(super) fn request(
        &mut self,
        code: u16,
        params: [u8; 16],
        data: &[u8],
    ) -> io::Result<Reply> {
        self.exchange(code, params, data, None)
    }

    /// [`Connection::request`], the body of its answer read into `body` as it comes when
    /// one is given (the reply's own body is then empty).
    pub(super) fn exchange(
        &mut self,
        code: u16,
        params: [u8; 16],
        data: &[u8],
        mut body: Option<&mut dyn Body>,
    ) -> io::Result<Reply> {
        let len = u32::try_from(data.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a request over 4 GiB"))?;
        let mut message = header(code, params, len).to_vec();
        message.extend_from_slice(data);
        let mut waited = Duration::ZERO;
        loop {
            self.write(&message)?;
            match self.answer(body.as_mut().map(|b| &mut **b as &mut dyn Body))? {
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
    pub(super) fn reply(&mut self) -> io::Result<Reply> {
        match self.reply_or_wait()? {
            Ok(reply) => Ok(reply),
            Err(_) => Err(self.out_of_step("a wait where none is expected")),
        }
    }

    /// The reply to the request just sent, or how long the server asks to wait before
    /// sending it again.
    pub(super) fn reply_or_wait(&mut self) -> io::Result<Result<Reply, Duration>> {
        self.answer(None)
    }

    /// [`Connection::reply_or_wait`], the body of a successful answer read into `into` as it
    /// comes when one is given.
    fn answer(&mut self, mut into: Option<&mut dyn Body>) -> io::Result<Result<Reply, Duration>> {
        let mut body = Vec::new();
        loop {
            let (stream, status, len) = self.read_head()?;
            if let (Some(into), KXR_OK | KXR_OKSOFAR) = (into.as_mut(), status)
                && stream != CLOSE_STREAM
            {
                let read = into.read_from(&mut self.stream, len);
                count_received(len);
                read.map_err(|e| self.transport(&e))?;
                if status == KXR_OK {
                    return Ok(Ok(Reply::Ok(Vec::new())));
                }
                continue;
            }
            let mut part = self.read_body(len)?;
            if stream == CLOSE_STREAM {
                continue;
            }
            match status {
                KXR_OK => {
                    if body.is_empty() {
                        return Ok(Ok(Reply::Ok(part)));
                    }
                    body.append(&mut part);
                    return Ok(Ok(Reply::Ok(body)));
                }
                KXR_OKSOFAR => body.append(&mut part),
                KXR_AUTHMORE => return Ok(Ok(Reply::AuthMore(part))),
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
                    let attn = self.deferred_response();
                    self.set_read_timeout(self.timeout)?;
                    let attn = attn?;
                    // The deferred response: a response header and its body, after 8 bytes.
                    let status = u16::from_be_bytes([attn[10], attn[11]]);
                    let part = attn[16..].to_vec();
                    match (status, into) {
                        (KXR_OK, Some(into)) => {
                            into.read_from(&mut &part[..], part.len())
                                .map_err(|e| self.transport(&e))?;
                            return Ok(Ok(Reply::Ok(Vec::new())));
                        }
                        (KXR_OK, None) => return Ok(Ok(Reply::Ok(part))),
                        (KXR_ERROR, _) => return Err(self.server_error(&part)),
                        _ => return Err(self.out_of_step("a deferred response")),
                    }
                }
                KXR_ATTN => {} // A message from the server to no request: not this reply.
                _ => return Err(self.out_of_step(&format!("status {status}"))),
            }
        }
    }

    /// A `kXR_attn` carrying the deferred response to the request just sent (answers to the
    /// closes sent before it skipped).
    fn deferred_response(&mut self) -> io::Result<Vec<u8>> {
        loop {
            let (stream, status, attn) = self.read_frame()?;
            if stream == CLOSE_STREAM {
                continue;
            }
            if status != KXR_ATTN || attn.len() < 16 || int_at(&attn, 0)? as u32 != KXR_ASYNRESP {
                return Err(self.out_of_step("a deferred response"));
            }
            // The response header inside: its stream after 8 bytes.
            if attn[8..10] == REQUEST_STREAM {
                return Ok(attn);
            }
        }
    }

    /// One response frame: its stream, status and body.
    pub(super) fn read_frame(&mut self) -> io::Result<([u8; 2], u16, Vec<u8>)> {
        let (stream, status, len) = self.read_head()?;
        Ok((stream, status, self.read_body(len)?))
    }

    /// A response frame's header: its stream, status and body's length.
    fn read_head(&mut self) -> io::Result<([u8; 2], u16, usize)> {
        let mut head = [0u8; 8];
        self.read_all(&mut head)?;
        count_received(head.len());
        let status = u16::from_be_bytes([head[2], head[3]]);
        let len = u32::from_be_bytes(head[4..8].try_into().expect("4 bytes")) as usize;
        Ok(([head[0], head[1]], status, len))
    }

    /// A response frame's body of `len` bytes.
    fn read_body(&mut self, len: usize) -> io::Result<Vec<u8>> {
        let mut body = vec![0u8; len];
        self.read_all(&mut body)?;
        count_received(len);
        Ok(body)
    }

    pub(super) fn read_all(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.stream.read_exact(buf).map_err(|e| self.transport(&e))
    }

    pub(super) fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let written = self
            .stream
            .write_all(bytes)
            .and_then(|()| self.stream.flush());
        written.map_err(|e| self.transport(&e))
    }

    pub(super) fn set_read_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        match &self.stream {
            Stream::Plain(s) => s.set_read_timeout(Some(timeout)),
            Stream::Tls(s) => s.sock.set_read_timeout(Some(timeout)),
            Stream::Closed => Ok(()),
        }
    }

    /// A transport failure: the connection is not used again; a timeout says so.
    pub(super) fn transport(&mut self, e: &io::Error) -> io::Error {
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
    pub(super) fn out_of_step(&mut self, what: &str) -> io::Error {
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
    pub(super) fn server_error(&self, body: &[u8]) -> io::Error {
        let code = int_at(body, 0).unwrap_or(0);
        let message = String::from_utf8_lossy(body.get(4..).unwrap_or_default())
            .trim_end_matches('\0')
            .trim()
            .to_owned();
        let (kind, what, hint) = match code {
            3011 => (io::ErrorKind::NotFound, "not found", ""),
            3010 | 3030 if self.by_proxy => (
                io::ErrorKind::PermissionDenied,
                "not authorized",
                "; the X.509 proxy was refused, or its subject may not read this (ask the site \
                 to map it)",
            ),
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
        let message = match message.is_empty() {
            true => String::new(),
            false => format!(": {message}"),
        };
        io::Error::new(
            kind,
            format!(
                "XRootD {what} (kXR error {code}) from {}{message}{hint}",
                self.server
            ),
        )
    }
}

/// A token as the `ztn` protocol sends it: the protocol's name, version 0, `T` (a token),
/// two reserved bytes, the token's length with its closing NUL (big-endian), the token, NUL.
pub(super) fn ztn_credential(token: &str) -> io::Result<Vec<u8>> {
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

/// The stream of requests whose answers are waited for.
const REQUEST_STREAM: [u8; 2] = [0, 1];
/// The stream of `kXR_close`s sent without waiting: their answers are skipped.
const CLOSE_STREAM: [u8; 2] = [0, 2];

/// A request's 24-byte header: the request stream, `code`, its parameters, the length of its
/// data.
pub(super) fn header(code: u16, params: [u8; 16], dlen: u32) -> [u8; 24] {
    header_on(REQUEST_STREAM, code, params, dlen)
}

/// A request's 24-byte header on `stream`.
fn header_on(stream: [u8; 2], code: u16, params: [u8; 16], dlen: u32) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[..2].copy_from_slice(&stream);
    h[2..4].copy_from_slice(&code.to_be_bytes());
    h[4..20].copy_from_slice(&params);
    h[20..24].copy_from_slice(&dlen.to_be_bytes());
    h
}

/// The big-endian `i32` at `at`.
pub(super) fn int_at(bytes: &[u8], at: usize) -> io::Result<i32> {
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
pub(super) fn connect(host: &str, port: u16, timeout: Duration) -> io::Result<TcpStream> {
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

/// Where a read's answer goes as it comes off the connection.
pub(super) trait Body {
    /// The answer's next `len` bytes, read from `from`.
    fn read_from(&mut self, from: &mut dyn Read, len: usize) -> io::Result<()>;
}
