//! Rank sharding: which events of a global batch, or of a split, one rank processes.

/// One rank's part of a global batch: event indices, of which the first `n_real` are its own;
/// the rest repeat an event only so every rank runs the same number of steps, and must get
/// weight 0 (they then add nothing to the loss or the gradients).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardedBatch {
    /// Event indices into the split.
    pub indices: Vec<usize>,
    /// How many of `indices`, from the start, are real (the rest are padding).
    pub n_real: usize,
}

/// Rank `rank`'s share of one global batch (`size` ranks): positions `rank`, `rank + size`, …
/// (DistributedSampler's interleaving), so the ranks' shares together are exactly the global
/// batch. When the batch does not divide evenly (the epoch's last batch), shorter shares are
/// padded to the longest with copies of the batch's first event, marked as padding; a share is
/// never empty, so every rank steps (and all-reduces) the same number of times.
pub fn shard_batch(global: &[usize], rank: usize, size: usize) -> ShardedBatch {
    assert!(size > 0 && rank < size, "rank {rank} of {size}");
    assert!(!global.is_empty(), "an empty global batch");
    let indices: Vec<usize> = global.iter().skip(rank).step_by(size).copied().collect();
    let n_real = indices.len();
    let longest = global.len().div_ceil(size);
    let mut indices = indices;
    indices.resize(longest, global[0]);
    ShardedBatch { indices, n_real }
}

/// Rank `rank`'s events of a split of `n` events for evaluation: `rank`, `rank + size`, …
/// (no padding: metrics are computed after gathering every rank's outputs).
pub fn shard_indices(n: usize, rank: usize, size: usize) -> Vec<usize> {
    assert!(size > 0 && rank < size, "rank {rank} of {size}");
    (rank..n).step_by(size).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_batch_once_and_pad_evenly() {
        let global: Vec<usize> = (10..17).collect(); // 7 events, 3 ranks
        let shares: Vec<ShardedBatch> = (0..3).map(|r| shard_batch(&global, r, 3)).collect();
        assert_eq!(shares[0].indices, vec![10, 13, 16]);
        assert_eq!(shares[1].indices, vec![11, 14, 10]);
        assert_eq!(shares[2].indices, vec![12, 15, 10]);
        assert_eq!(
            shares.iter().map(|s| s.n_real).collect::<Vec<_>>(),
            vec![3, 2, 2]
        );
        let mut real: Vec<usize> = shares
            .iter()
            .flat_map(|s| s.indices[..s.n_real].to_vec())
            .collect();
        real.sort_unstable();
        assert_eq!(real, global, "every event exactly once");
        // A batch smaller than the world: some ranks get only padding, but still a batch.
        let s = shard_batch(&[5], 1, 2);
        assert_eq!((s.indices, s.n_real), (vec![5], 0));
        // One rank: the batch itself.
        assert_eq!(shard_batch(&global, 0, 1).indices, global);
    }

    #[test]
    fn split_shards_partition_the_split() {
        let parts: Vec<Vec<usize>> = (0..3).map(|r| shard_indices(8, r, 3)).collect();
        assert_eq!(parts, vec![vec![0, 3, 6], vec![1, 4, 7], vec![2, 5]]);
        assert_eq!(shard_indices(8, 0, 1), (0..8).collect::<Vec<_>>());
    }
}
