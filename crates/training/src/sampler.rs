//! Which events go into which batch, epoch by epoch.

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

/// How an epoch is cut into batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Events per batch.
    pub batch_size: usize,
    /// Shuffle every epoch (training) or keep file order (evaluation).
    pub shuffle: bool,
    /// Drop the last, smaller batch.
    pub drop_last: bool,
    /// Seed; epoch e shuffles with a generator seeded from (seed, e).
    pub seed: u64,
}

/// The batches of epoch `epoch` over `n_events` events, as index lists.
///
/// The order depends only on (`seed`, `epoch`, `n_events`): the same for any number of loader
/// threads and when resuming at `epoch`.
pub fn epoch_batches(n_events: usize, epoch: u64, cfg: &SamplerConfig) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..n_events).collect();
    if cfg.shuffle {
        let mut rng = StdRng::seed_from_u64(
            cfg.seed ^ epoch.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        order.shuffle(&mut rng);
    }
    let size = cfg.batch_size.max(1);
    let mut batches: Vec<Vec<usize>> = order.chunks(size).map(<[usize]>::to_vec).collect();
    if cfg.drop_last && batches.last().is_some_and(|b| b.len() < size) {
        batches.pop();
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_shuffle_per_epoch_and_drop_last() {
        let cfg = SamplerConfig {
            batch_size: 4,
            shuffle: true,
            drop_last: false,
            seed: 7,
        };
        let a = epoch_batches(10, 0, &cfg);
        assert_eq!(
            a,
            epoch_batches(10, 0, &cfg),
            "same seed and epoch: same order"
        );
        assert_ne!(a, epoch_batches(10, 1, &cfg), "a new order each epoch");
        assert_eq!(a.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 4, 2]);
        let mut all: Vec<usize> = a.concat();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>(), "a permutation");
        let dl = SamplerConfig {
            drop_last: true,
            ..cfg
        };
        assert_eq!(epoch_batches(10, 0, &dl).len(), 2);
        let plain = SamplerConfig {
            shuffle: false,
            ..cfg
        };
        assert_eq!(epoch_batches(5, 3, &plain), vec![vec![0, 1, 2, 3], vec![4]]);
    }
}
