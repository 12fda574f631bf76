//! A TCP proxy on localhost adding a fixed round-trip latency, what a wide-area link does to a
//! read: every chunk of bytes, either way, is delivered half the round trip after it arrived, in
//! order, and bandwidth is not limited. `ip netns` + `tc netem` do the same in the kernel where
//! the `netem` qdisc exists; this VM's kernel has none.
//!
//! Each direction of each connection is two threads, one receiving and stamping chunks, one
//! delivering them when due; the bytes move from socket to pipe to socket in the kernel, never
//! copied through the proxy, which so takes as little as it can of the cores the reader and
//! the server share.
//!
//! Usage: `latency_proxy RTT_MS LISTEN_PORT:TARGET_PORT [LISTEN_PORT:TARGET_PORT ...]` (all on
//! 127.0.0.1); says `ready` on stderr when listening, runs until killed.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rustix::pipe;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [rtt, pairs @ ..] = args.as_slice() else {
        bail!("usage: latency_proxy RTT_MS LISTEN_PORT:TARGET_PORT [...]");
    };
    if pairs.is_empty() {
        bail!("usage: latency_proxy RTT_MS LISTEN_PORT:TARGET_PORT [...]");
    }
    let rtt_ms: f64 = rtt
        .parse()
        .with_context(|| format!("RTT_MS '{rtt}' is not a number"))?;
    let one_way = Duration::from_secs_f64(rtt_ms.max(0.0) / 2000.0);
    let mut listeners = Vec::new();
    for pair in pairs {
        let (listen, target) = pair
            .split_once(':')
            .and_then(|(l, t)| Some((l.parse::<u16>().ok()?, t.parse::<u16>().ok()?)))
            .with_context(|| format!("'{pair}' is not LISTEN_PORT:TARGET_PORT"))?;
        let listener = TcpListener::bind(("127.0.0.1", listen))
            .with_context(|| format!("listening on 127.0.0.1:{listen}"))?;
        listeners.push((listener, target));
    }
    eprintln!("ready");
    std::thread::scope(|s| {
        for (listener, target) in &listeners {
            s.spawn(move || {
                for client in listener.incoming().flatten() {
                    let target = *target;
                    std::thread::spawn(move || relay(client, target, one_way));
                }
            });
        }
    });
    Ok(())
}

/// Relays `client` to the server on `target`, both ways, each `delay` late.
fn relay(client: TcpStream, target: u16, delay: Duration) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
        return;
    };
    for s in [&client, &server] {
        let _ = s.set_nodelay(true);
    }
    let (Ok(client_in), Ok(server_in)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || pipe(&client_in, server, delay));
    pipe(&server_in, client, delay);
    let _ = up.join();
}

/// A pipe holding part of a direction's bytes in the kernel while they wait to be due.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

/// The most bytes spliced into one pipe before the next is taken: half its capacity, so that
/// socket pages smaller than a pipe slot never fill it and block the receiving side.
const PIPE_BYTES: usize = 1 << 19;

impl Pipe {
    fn new() -> std::io::Result<Arc<Pipe>> {
        let (read, write) = pipe::pipe_with(pipe::PipeFlags::CLOEXEC)?;
        // The capacity any process may ask for (`/proc/sys/fs/pipe-max-size`, 1 MiB by
        // default); a smaller pipe only means more of them.
        let _ = pipe::fcntl_setpipe_size(&write, 2 * PIPE_BYTES);
        Ok(Arc::new(Pipe { read, write }))
    }
}

/// Moves `from` to `to`, each piece `delay` after it came; at the end of `from`, ends `to`'s
/// writing side. The bytes stay in the kernel: spliced from the socket into pipes, and from
/// the pipes into the other socket when due (no copy through this process).
fn pipe(from: &TcpStream, to: TcpStream, delay: Duration) {
    // (pipe, when due, bytes, whether the pipe's last piece)
    let (send, receive) = mpsc::channel::<(Arc<Pipe>, Instant, usize, bool)>();
    let (give_back, free) = mpsc::channel::<Arc<Pipe>>();
    let deliver = std::thread::spawn(move || {
        'pieces: for (p, due, mut left, last) in receive {
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            while left > 0 {
                match pipe::splice(&p.read, None, &to, None, left, pipe::SpliceFlags::MOVE) {
                    Ok(0) | Err(_) => break 'pieces,
                    Ok(n) => left -= n,
                }
            }
            if last {
                let _ = give_back.send(p);
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    let mut current: Option<(Arc<Pipe>, usize)> = None;
    loop {
        let (p, held) = match current.take() {
            Some(c) => c,
            None => match free.try_recv().map_or_else(|_| Pipe::new(), Ok) {
                Ok(p) => (p, 0),
                Err(_) => break,
            },
        };
        // Wait for bytes (or the end) with a peek first: a splice from a socket holds the
        // pipe's lock while it waits, which would keep the earlier bytes in this pipe from
        // being delivered meanwhile.
        match from.peek(&mut [0u8]) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let room = PIPE_BYTES - held;
        match pipe::splice(from, None, &p.write, None, room, pipe::SpliceFlags::MOVE) {
            Err(_) => break,
            Ok(0) => current = Some((p, held)),
            Ok(n) => {
                let last = held + n >= PIPE_BYTES;
                if send
                    .send((Arc::clone(&p), Instant::now() + delay, n, last))
                    .is_err()
                {
                    break;
                }
                if !last {
                    current = Some((p, held + n));
                }
            }
        }
    }
    drop(send);
    let _ = deliver.join();
}
