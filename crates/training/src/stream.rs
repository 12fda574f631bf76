//! Streaming passes over a dataset read in blocks: the order of an epoch, each rank's share, the
//! bounded shuffle buffer, batching, and starting part-way (a mid-epoch resume).
//!
//! A pass is a function of (seed, epoch, world size, batch size, buffer size) only: blocks are
//! visited in a seeded order, the concatenated events are cut into one contiguous share per rank,
//! and each rank mixes its share through a shuffle buffer of bounded size on one producer thread
//! (so the loader thread count changes nothing). Every rank takes the same number of steps.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::error::TrainingError;
use crate::loader::{Loader, Sender};
use gnn4c_family::EventSource;

/// How one pass over a dataset goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// Run seed.
    pub seed: u64,
    /// Epoch (a new order each epoch when shuffling).
    pub epoch: u64,
    /// Shuffle (training) or keep cache order (evaluation).
    pub shuffle: bool,
    /// Events in the shuffle buffer.
    pub shuffle_buffer: usize,
    /// Events per batch (per rank).
    pub batch_size: usize,
    /// This rank.
    pub rank: usize,
    /// Ranks.
    pub world: usize,
    /// Batches of the pass to skip (already trained before a resume).
    pub skip_batches: u64,
}

/// A contiguous run of one block's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// The block.
    pub block: usize,
    /// Events of the block skipped first.
    pub skip: usize,
    /// Events taken after them.
    pub take: usize,
}

/// One rank's part of a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankPlan {
    /// Its events, block by block.
    pub segments: Vec<Segment>,
    /// How many.
    pub events: usize,
    /// Batches every rank takes (a rank with fewer events pads its last ones).
    pub steps: u64,
}

fn mix(seed: u64, a: u64, b: u64) -> u64 {
    let mut x = seed ^ a.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= b.wrapping_add(1).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Rank `pass.rank`'s share of a pass over blocks of `sizes` events.
pub fn plan(sizes: &[usize], pass: &Pass) -> RankPlan {
    let mut order: Vec<usize> = (0..sizes.len()).filter(|&b| sizes[b] > 0).collect();
    if pass.shuffle {
        order.shuffle(&mut StdRng::seed_from_u64(mix(pass.seed, pass.epoch, 0)));
    }
    let total: usize = sizes.iter().sum();
    let world = pass.world.max(1);
    let cut = |r: usize| ((total as u128 * r as u128) / world as u128) as usize;
    let (lo, hi) = (cut(pass.rank), cut(pass.rank + 1));
    let mut segments = Vec::new();
    let mut at = 0usize;
    for b in order {
        let (start, end) = (at, at + sizes[b]);
        at = end;
        let (s, e) = (start.max(lo), end.min(hi));
        if s < e {
            segments.push(Segment {
                block: b,
                skip: s - start,
                take: e - s,
            });
        }
    }
    let longest = total.div_ceil(world);
    RankPlan {
        segments,
        events: hi - lo,
        steps: longest.div_ceil(pass.batch_size.max(1)) as u64,
    }
}

/// A batch's events and how many of them are real, or the error that ended the pass.
type Work<E> = Result<(Vec<E>, usize), TrainingError>;

/// Events to a rank's batches: the shuffle buffer, batching, skipping and padding, in order.
struct Batcher<'a, E> {
    shuffle: bool,
    capacity: usize,
    batch_size: usize,
    rng: StdRng,
    buffer: Vec<E>,
    chunk: Vec<E>,
    /// Batches made so far (sent or skipped).
    made: u64,
    skip: u64,
    last: Option<E>,
    tx: &'a mut Sender<Work<E>>,
    stopped: bool,
}

impl<E: Clone> Batcher<'_, E> {
    fn event(&mut self, ev: E) {
        if !self.shuffle {
            return self.emit(ev);
        }
        if self.buffer.len() < self.capacity {
            self.buffer.push(ev);
        } else {
            let j = self.rng.random_range(0..self.capacity);
            let out = std::mem::replace(&mut self.buffer[j], ev);
            self.emit(out);
        }
    }

    fn emit(&mut self, ev: E) {
        self.chunk.push(ev);
        if self.chunk.len() == self.batch_size {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let chunk = std::mem::take(&mut self.chunk);
        let n = chunk.len();
        if n > 0 {
            self.last = chunk.last().cloned();
        }
        self.made += 1;
        if self.made <= self.skip || self.stopped {
            return;
        }
        // A padding batch repeats the rank's last event, with no real event in it.
        let (chunk, n_real) = match (n, &self.last) {
            (0, Some(last)) => (vec![last.clone()], 0),
            _ => (chunk, n),
        };
        if !self.tx.send(Ok((chunk, n_real))) {
            self.stopped = true;
        }
    }

    fn drain(&mut self, steps: u64) {
        let mut rest = std::mem::take(&mut self.buffer);
        rest.shuffle(&mut self.rng);
        for ev in rest {
            self.emit(ev);
        }
        if !self.chunk.is_empty() {
            self.flush();
        }
        while self.made < steps && !self.stopped {
            self.flush();
        }
    }
}

/// One pass of `data` as rank `pass.rank` sees it: `make(data, events, n_real)` of each batch on
/// `threads` loader threads, in pass order. Blocks are read on the producer thread; a read error
/// ends the pass with that error as its last item.
pub fn stream<D, T, F>(
    data: &Arc<D>,
    pass: Pass,
    threads: usize,
    prefetch: usize,
    make: F,
) -> (RankPlan, Loader<Result<T, TrainingError>>)
where
    D: EventSource,
    T: Send + 'static,
    F: Fn(&D, Vec<D::Event>, usize) -> Result<T, TrainingError> + Send + Sync + 'static,
{
    let plan = plan(data.block_sizes(), &pass);
    let segments = plan.segments.clone();
    let steps = plan.steps;
    let source = data.clone();
    let worker_data = data.clone();
    let loader = Loader::spawn(
        threads,
        prefetch,
        move |tx: &mut Sender<Work<D::Event>>| {
            let mut b = Batcher {
                shuffle: pass.shuffle,
                capacity: pass.shuffle_buffer.max(1),
                batch_size: pass.batch_size.max(1),
                rng: StdRng::seed_from_u64(mix(pass.seed, pass.epoch, 1 + pass.rank as u64)),
                buffer: Vec::new(),
                chunk: Vec::new(),
                made: 0,
                skip: pass.skip_batches,
                last: None,
                tx,
                stopped: false,
            };
            for s in segments {
                let events = match source.read_block(s.block) {
                    Ok(e) => e,
                    Err(e) => {
                        b.tx.send(Err(e.into()));
                        return;
                    }
                };
                for ev in events.into_iter().skip(s.skip).take(s.take) {
                    b.event(ev);
                }
                if b.stopped {
                    return;
                }
            }
            b.drain(steps);
        },
        move |work: Work<D::Event>| {
            work.and_then(|(events, n_real)| make(&worker_data, events, n_real))
        },
    );
    (plan, loader)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(rank: usize, world: usize) -> Pass {
        Pass {
            seed: 3,
            epoch: 0,
            shuffle: true,
            shuffle_buffer: 8,
            batch_size: 4,
            rank,
            world,
            skip_batches: 0,
        }
    }

    /// Events `0..n` in blocks of 10.
    struct Numbers(Vec<usize>);

    impl EventSource for Numbers {
        type Event = usize;
        type Input = Vec<usize>;
        fn block_sizes(&self) -> &[usize] {
            &self.0
        }
        fn read_block(&self, block: usize) -> Result<Vec<usize>, gnn4c_family::SourceError> {
            let start: usize = self.0[..block].iter().sum();
            Ok((start..start + self.0[block]).collect())
        }
        fn target(&self, &e: &usize) -> (i64, f32) {
            (e as i64 % 2, 1.0)
        }
        fn batch(
            &self,
            events: Vec<usize>,
        ) -> Result<gnn4c_family::Batch<Vec<usize>>, gnn4c_family::SourceError> {
            Ok(gnn4c_family::Batch {
                labels: vec![0; events.len()],
                multilabels: Vec::new(),
                weights: vec![1.0; events.len()],
                n_events: events.len(),
                input: events,
            })
        }
    }

    fn events_of(data: &Arc<Numbers>, p: Pass, threads: usize) -> Vec<(Vec<usize>, usize)> {
        let (_, loader) = stream(data, p, threads, 2, |d: &Numbers, ev, n| {
            Ok((d.batch(ev)?, n))
        });
        loader
            .map(|item| item.map(|(b, n)| (b.input, n)).expect("batch"))
            .collect()
    }

    #[test]
    fn a_pass_is_the_same_for_any_thread_count_mixes_and_resumes_part_way() {
        let data = Arc::new(Numbers(vec![10; 30]));
        let p = Pass {
            shuffle_buffer: 50,
            batch_size: 16,
            ..pass(0, 1)
        };
        let one = events_of(&data, p, 1);
        assert_eq!(one, events_of(&data, p, 3), "loader threads change nothing");
        assert_eq!(one.len(), 19, "300 events in batches of 16");
        let mut all: Vec<usize> = one.iter().flat_map(|(b, _)| b.clone()).collect();
        // Mixed beyond the block order: neighbours in the stream come from different blocks.
        let far = all.windows(2).filter(|w| w[0] / 10 != w[1] / 10).count();
        assert!(far > 200, "{far} of 299 neighbours from different blocks");
        all.sort_unstable();
        assert_eq!(all, (0..300).collect::<Vec<_>>(), "each event once");
        // Skipping the first 7 batches gives the rest of the same pass.
        let rest = events_of(
            &data,
            Pass {
                skip_batches: 7,
                ..p
            },
            2,
        );
        assert_eq!(rest, one[7..].to_vec());
        // Two ranks: disjoint, together everything, the same number of batches; the shorter
        // share pads its last batch with one event marked as not real.
        let shares: Vec<Vec<(Vec<usize>, usize)>> = (0..2)
            .map(|r| {
                events_of(
                    &Arc::new(Numbers(vec![10, 10, 7])),
                    Pass {
                        rank: r,
                        world: 2,
                        ..p
                    },
                    2,
                )
            })
            .collect();
        assert_eq!(shares[0].len(), shares[1].len());
        let real: usize = shares.iter().flatten().map(|(_, n)| n).sum();
        assert_eq!(real, 27);
        let padded = Pass {
            rank: 0,
            world: 2,
            batch_size: 13,
            ..p
        };
        let last = events_of(&Arc::new(Numbers(vec![10, 10, 7])), padded, 1);
        assert_eq!(
            last.len(),
            2,
            "rank 1's 14 events → batches of 13 + 1 on both ranks"
        );
        assert_eq!(
            (last[1].0.len(), last[1].1),
            (1, 0),
            "rank 0 (13 events) pads with no real event"
        );
    }

    #[test]
    fn shares_are_disjoint_cover_everything_and_step_together() {
        let sizes = [5, 0, 7, 3, 9];
        let plans: Vec<RankPlan> = (0..3).map(|r| plan(&sizes, &pass(r, 3))).collect();
        assert_eq!(plans.iter().map(|p| p.events).sum::<usize>(), 24);
        assert!(
            plans.iter().all(|p| p.steps == 2),
            "8 events per rank, batch 4"
        );
        let mut seen = vec![0usize; sizes.len()];
        for p in &plans {
            for s in &p.segments {
                seen[s.block] += s.take;
            }
        }
        assert_eq!(
            seen,
            sizes.to_vec(),
            "every event of every block exactly once"
        );
        let again = plan(&sizes, &pass(1, 3));
        assert_eq!(again, plans[1], "a function of the pass only");
        let next_epoch = plan(
            &sizes,
            &Pass {
                epoch: 1,
                ..pass(0, 1)
            },
        );
        assert_ne!(next_epoch.segments, plan(&sizes, &pass(0, 1)).segments);
        let in_order = plan(
            &sizes,
            &Pass {
                shuffle: false,
                ..pass(0, 1)
            },
        );
        let blocks: Vec<usize> = in_order.segments.iter().map(|s| s.block).collect();
        assert_eq!(
            blocks,
            vec![0, 2, 3, 4],
            "cache order, empty blocks left out"
        );
    }
}
