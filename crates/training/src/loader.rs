//! Background batch preparation: worker threads, bounded prefetch, deterministic order.

use std::sync::mpsc::{Receiver, sync_channel};
use std::thread::JoinHandle;

/// Produces `make(batch)` for each batch on `threads` worker threads, at most `prefetch` ready
/// batches per thread, and yields them in batch order whatever the thread count.
///
/// Worker k prepares batches k, k + T, k + 2T, … into its own bounded channel; the consumer reads
/// the channels round-robin, so the output order is the input order and memory stays bounded.
pub struct Loader<T: Send + 'static> {
    receivers: Vec<Receiver<T>>,
    next: usize,
    total: usize,
    workers: Vec<JoinHandle<()>>,
}

impl<T: Send + 'static> Loader<T> {
    /// Starts the workers. `make` runs on worker threads and must be deterministic per batch.
    pub fn new<F>(batches: Vec<Vec<usize>>, threads: usize, prefetch: usize, make: F) -> Loader<T>
    where
        F: Fn(&[usize]) -> T + Send + Sync + 'static,
    {
        let threads = threads.clamp(1, batches.len().max(1));
        let total = batches.len();
        let batches = std::sync::Arc::new(batches);
        let make = std::sync::Arc::new(make);
        let mut receivers = Vec::with_capacity(threads);
        let mut workers = Vec::with_capacity(threads);
        for k in 0..threads {
            let (tx, rx) = sync_channel(prefetch.max(1));
            let (batches, make) = (batches.clone(), make.clone());
            workers.push(std::thread::spawn(move || {
                for b in batches.iter().skip(k).step_by(threads) {
                    let item = {
                        let _s = tracing::info_span!("make_batch", events = b.len()).entered();
                        make(b)
                    };
                    if tx.send(item).is_err() {
                        return; // the consumer stopped early
                    }
                }
            }));
            receivers.push(rx);
        }
        Loader {
            receivers,
            next: 0,
            total,
            workers,
        }
    }

    /// Batches in this epoch.
    pub fn len(&self) -> usize {
        self.total
    }

    /// True when the epoch has no batches.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

impl<T: Send + 'static> Iterator for Loader<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.next >= self.total {
            return None;
        }
        let k = self.next % self.receivers.len();
        self.next += 1;
        // A worker that panicked drops its sender: surface that as a panic here, not a hang.
        Some(
            self.receivers[k]
                .recv()
                .unwrap_or_else(|_| panic!("loader worker {k} stopped (it panicked)")),
        )
    }
}

impl<T: Send + 'static> Drop for Loader<T> {
    fn drop(&mut self) {
        self.receivers.clear(); // unblock workers waiting to send
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_the_same_for_any_thread_count() {
        let batches: Vec<Vec<usize>> = (0..23).map(|i| vec![i, i + 100]).collect();
        let run = |threads, prefetch| -> Vec<usize> {
            Loader::new(batches.clone(), threads, prefetch, |b: &[usize]| {
                b[0] * 1000 + b[1]
            })
            .collect()
        };
        let one = run(1, 1);
        assert_eq!(one.len(), 23);
        assert_eq!(one, run(2, 1));
        assert_eq!(one, run(3, 4));
        assert_eq!(one[5], 5 * 1000 + 105);
    }

    #[test]
    fn dropping_early_stops_the_workers() {
        let batches: Vec<Vec<usize>> = (0..1000).map(|i| vec![i]).collect();
        let mut l = Loader::new(batches, 2, 2, |b: &[usize]| b[0]);
        assert_eq!(l.next(), Some(0));
        drop(l); // must not hang
    }
}
