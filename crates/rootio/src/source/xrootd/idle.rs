//! Logged-in connections with no file open, kept for the next file on the same server: a
//! dataset of many files on one server opens each with one round trip (`kXR_open`) instead of
//! a new connection's three or more (TCP, handshake and protocol, login, TLS and
//! authentication where the server asks for them). A file's connections come here when the
//! file closes (its `kXR_close` sent without waiting for the answer).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::connection::Connection;

/// Connections kept at most, over every server.
const KEEP: usize = 16;
/// A connection idle longer than this is closed rather than reused (servers close idle
/// connections after a while; a stale one costs a failed request).
const IDLE_FOR: Duration = Duration::from_secs(20);

/// What a logged-in connection may be reused for: the same server, user, TLS and token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LoginKey {
    /// `host:port`.
    pub(super) server: String,
    pub(super) user: Option<String>,
    pub(super) tls: bool,
    /// A hash of the bearer token it authenticated with (not the token: keys are printable).
    pub(super) token: Option<u64>,
}

struct Kept {
    key: LoginKey,
    connection: Connection,
    since: Instant,
}

static IDLE: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// A kept connection for `key`, the most recently kept first; those idle too long are closed.
pub(super) fn take(key: &LoginKey) -> Option<Connection> {
    let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
    idle.retain(|k| k.since.elapsed() < IDLE_FOR);
    let i = idle.iter().rposition(|k| k.key == *key)?;
    Some(idle.remove(i).connection)
}

/// Keeps `connection` (logged in, no file open on it) for the next file on its server; the
/// oldest kept one is closed when there are [`KEEP`].
pub(super) fn keep(connection: Connection) {
    if connection.broken {
        return;
    }
    let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
    if idle.len() >= KEEP {
        idle.remove(0);
    }
    idle.push(Kept {
        key: connection.key.clone(),
        connection,
        since: Instant::now(),
    });
}
