//! A TCP proxy on localhost adding a fixed round-trip latency, what a wide-area link does to a
//! read: every chunk of bytes, either way, is delivered half the round trip after it arrived, in
//! order, and bandwidth is not limited. `ip netns` + `tc netem` do the same in the kernel where
//! the `netem` qdisc exists; this VM's kernel has none.
//!
//! Each direction of each connection is two threads, one receiving and stamping chunks, one
//! delivering them when due, so a transfer costs a copy, not an interpreter's loop: the proxy
//! stays off the cores the reader and the server share.
//!
//! Usage: `latency_proxy RTT_MS LISTEN_PORT:TARGET_PORT [LISTEN_PORT:TARGET_PORT ...]` (all on
//! 127.0.0.1); says `ready` on stderr when listening, runs until killed.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

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
    let up = std::thread::spawn(move || pipe(client_in, server, delay));
    pipe(server_in, client, delay);
    let _ = up.join();
}

/// Copies `from` to `to`, each chunk `delay` after it came; at the end of `from`, ends `to`'s
/// writing side.
fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (send, receive) = mpsc::channel::<(Instant, Vec<u8>)>();
    let deliver = std::thread::spawn(move || {
        for (due, chunk) in receive {
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if send
                    .send((Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
                {
                    break;
                }
            }
        }
    }
    drop(send);
    let _ = deliver.join();
}
