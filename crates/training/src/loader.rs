//! Background batch preparation: a producer thread, worker threads, bounded queues, and the
//! producer's order kept whatever the thread count.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

/// Yields `make(item)` for every item the producer sends, in the order sent, computed on
/// `threads` worker threads with at most `prefetch` ready results per worker.
///
/// The producer runs on its own thread and sends item k to worker k mod T; the consumer reads
/// the workers' queues round-robin, so the output order is the producer's and memory stays
/// bounded (the producer blocks when the workers are `prefetch` ahead).
pub struct Loader<T: Send + 'static> {
    receivers: Vec<Receiver<T>>,
    next: usize,
    threads: Vec<JoinHandle<()>>,
    ended: bool,
}

/// What the producer sends items through; `send` is false once the consumer has stopped.
pub struct Sender<W> {
    workers: Vec<SyncSender<W>>,
    next: usize,
}

impl<W> Sender<W> {
    /// Hands `item` to the next worker; false when the consumer is gone (stop producing).
    pub fn send(&mut self, item: W) -> bool {
        let k = self.next % self.workers.len();
        self.next += 1;
        self.workers[k].send(item).is_ok()
    }
}

impl<T: Send + 'static> Loader<T> {
    /// Starts the producer and the workers. `make` must be deterministic per item.
    pub fn spawn<W, P, F>(threads: usize, prefetch: usize, produce: P, make: F) -> Loader<T>
    where
        W: Send + 'static,
        P: FnOnce(&mut Sender<W>) + Send + 'static,
        F: Fn(W) -> T + Send + Sync + 'static,
    {
        let threads = threads.max(1);
        let make = std::sync::Arc::new(make);
        let mut receivers = Vec::with_capacity(threads);
        let mut inputs = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads + 1);
        for _ in 0..threads {
            let (in_tx, in_rx) = sync_channel::<W>(prefetch.max(1));
            let (out_tx, out_rx) = sync_channel::<T>(prefetch.max(1));
            let make = make.clone();
            handles.push(std::thread::spawn(move || {
                for item in in_rx {
                    let result = {
                        let _s = tracing::info_span!("make_batch").entered();
                        make(item)
                    };
                    if out_tx.send(result).is_err() {
                        return; // the consumer stopped early
                    }
                }
            }));
            inputs.push(in_tx);
            receivers.push(out_rx);
        }
        handles.push(std::thread::spawn(move || {
            let mut sender = Sender {
                workers: inputs,
                next: 0,
            };
            produce(&mut sender);
        }));
        Loader {
            receivers,
            next: 0,
            threads: handles,
            ended: false,
        }
    }

    /// Waits for every thread; a panic in one is raised here.
    fn join(&mut self) {
        self.receivers.clear(); // unblock threads waiting to send
        for t in self.threads.drain(..) {
            if let Err(p) = t.join() {
                std::panic::resume_unwind(p);
            }
        }
    }
}

impl<T: Send + 'static> Iterator for Loader<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.ended {
            return None;
        }
        let k = self.next % self.receivers.len();
        self.next += 1;
        match self.receivers[k].recv() {
            Ok(item) => Some(item),
            Err(_) => {
                // The producer finished (or a thread panicked: join raises it).
                self.ended = true;
                self.join();
                None
            }
        }
    }
}

impl<T: Send + 'static> Drop for Loader<T> {
    fn drop(&mut self) {
        self.receivers.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(n: usize, threads: usize, prefetch: usize) -> Loader<usize> {
        Loader::spawn(
            threads,
            prefetch,
            move |tx: &mut Sender<usize>| {
                for i in 0..n {
                    if !tx.send(i) {
                        return;
                    }
                }
            },
            |i| i * 10 + 1,
        )
    }

    #[test]
    fn order_is_the_same_for_any_thread_count() {
        let one: Vec<usize> = numbers(23, 1, 1).collect();
        assert_eq!(one, (0..23).map(|i| i * 10 + 1).collect::<Vec<_>>());
        assert_eq!(one, numbers(23, 2, 1).collect::<Vec<_>>());
        assert_eq!(one, numbers(23, 3, 4).collect::<Vec<_>>());
        assert_eq!(numbers(0, 3, 1).count(), 0);
    }

    #[test]
    fn dropping_early_stops_every_thread() {
        let mut l = numbers(1_000_000, 2, 2);
        assert_eq!(l.next(), Some(1));
        drop(l); // must not hang
    }
}
