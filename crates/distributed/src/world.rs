//! The world: this process's rank among `size`, and the collectives (MPI, or the identity).

/// What can go wrong setting up the world.
#[derive(Debug, thiserror::Error)]
pub enum DistributedError {
    /// Started by `mpirun`/`srun` with several ranks, but built without MPI.
    #[error(
        "started by an MPI launcher with {size} ranks ({var}), but this gnn4colliders was built without MPI: rebuild with `cargo build --release --features mpi` (or run one process)"
    )]
    NoMpiSupport {
        /// World size the launcher announced.
        size: usize,
        /// The environment variable that said so.
        var: &'static str,
    },
    /// MPI could not be initialised.
    #[error("MPI initialisation failed: {0}")]
    Init(String),
}

/// Environment variables MPI launchers set for each rank (MPICH/Hydra and Cray PMI, PMIx,
/// Open MPI), holding the world size or the rank.
const SIZE_VARS: [&str; 3] = ["PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"];
const RANK_VARS: [&str; 3] = ["PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"];

/// Whether this process was started by an MPI launcher (`mpirun`, `mpiexec`, `srun` with PMI).
pub fn launched_by_mpi() -> bool {
    SIZE_VARS
        .iter()
        .chain(&RANK_VARS)
        .any(|v| std::env::var_os(v).is_some())
}

/// The world size a launcher announced, if any.
#[cfg(not(feature = "mpi"))]
fn announced_size() -> Option<(usize, &'static str)> {
    SIZE_VARS.iter().find_map(|&v| {
        std::env::var(v)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .map(|n| (n, v))
    })
}

/// This process's place in the job, and the collectives over all ranks.
///
/// Keep it alive for the whole run: dropping it finalises MPI.
pub struct World {
    rank: usize,
    size: usize,
    local_rank: usize,
    local_size: usize,
    #[cfg(feature = "mpi")]
    mpi: Option<mpi_impl::Mpi>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("local_rank", &self.local_rank)
            .field("local_size", &self.local_size)
            .finish()
    }
}

impl World {
    /// One process, no communication.
    pub fn single() -> World {
        World {
            rank: 0,
            size: 1,
            local_rank: 0,
            local_size: 1,
            #[cfg(feature = "mpi")]
            mpi: None,
        }
    }

    /// The world this process runs in: MPI's when an MPI launcher started it (and the `mpi`
    /// feature is built), otherwise a single process. A launcher announcing several ranks to a
    /// build without MPI is an error: every rank would otherwise train alone on the same files.
    pub fn init() -> Result<World, DistributedError> {
        if !launched_by_mpi() {
            return Ok(World::single());
        }
        #[cfg(feature = "mpi")]
        {
            let m = mpi_impl::Mpi::init()?;
            Ok(World {
                rank: m.rank,
                size: m.size,
                local_rank: m.local_rank,
                local_size: m.local_size,
                mpi: Some(m),
            })
        }
        #[cfg(not(feature = "mpi"))]
        {
            match announced_size() {
                Some((size, var)) if size > 1 => Err(DistributedError::NoMpiSupport { size, var }),
                _ => Ok(World::single()),
            }
        }
    }

    /// This process's rank, 0-based.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The rank among the processes on this node (the GPU index under one rank per GPU).
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    /// The number of ranks on this node (they share its cores).
    pub fn local_size(&self) -> usize {
        self.local_size
    }

    /// Whether this is rank 0 (the one that writes checkpoints, logs and outputs).
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// Whether there is more than one rank.
    pub fn is_distributed(&self) -> bool {
        self.size > 1
    }

    /// Element-wise sum over all ranks, in place.
    pub fn all_reduce_sum_f32(&self, buf: &mut [f32]) {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            m.all_reduce_sum(buf);
        }
        let _ = buf;
    }

    /// Element-wise sum over all ranks, in place.
    pub fn all_reduce_sum_f64(&self, buf: &mut [f64]) {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            m.all_reduce_sum(buf);
        }
        let _ = buf;
    }

    /// Rank 0's `buf` on every rank.
    pub fn broadcast_f32(&self, buf: &mut [f32]) {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            m.broadcast(buf);
        }
        let _ = buf;
    }

    /// Every rank's `local` (any length), concatenated in rank order, on every rank.
    pub fn all_gather_f32(&self, local: &[f32]) -> Vec<f32> {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            return m.all_gather(local);
        }
        local.to_vec()
    }

    /// Every rank's `local` (any length), concatenated in rank order, on every rank.
    pub fn all_gather_i64(&self, local: &[i64]) -> Vec<i64> {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            return m.all_gather(local);
        }
        local.to_vec()
    }

    /// Waits for every rank.
    pub fn barrier(&self) {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            m.barrier();
        }
    }

    /// Ends every rank of the job with `code` (a failed rank must not leave the others waiting in
    /// a collective). In a single process this is `std::process::exit`.
    pub fn abort(&self, code: i32) -> ! {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi
            && self.size > 1
        {
            m.abort(code);
        }
        std::process::exit(code)
    }
}

#[cfg(feature = "mpi")]
mod mpi_impl {
    use mpi::collective::SystemOperation;
    use mpi::datatype::{Equivalence, PartitionMut};
    use mpi::environment::Universe;
    use mpi::topology::{Communicator, SimpleCommunicator};
    use mpi::traits::{CommunicatorCollectives, Root};

    use super::DistributedError;

    pub(super) struct Mpi {
        // Field order matters: the communicator goes before the universe (MPI_Finalize).
        world: SimpleCommunicator,
        _universe: Universe,
        pub(super) rank: usize,
        pub(super) size: usize,
        pub(super) local_rank: usize,
        pub(super) local_size: usize,
    }

    impl Mpi {
        pub(super) fn init() -> Result<Mpi, DistributedError> {
            // Loader threads never call MPI: the main thread funnels every call.
            let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Funneled)
                .ok_or_else(|| DistributedError::Init("MPI was already initialised".into()))?;
            let world = universe.world();
            let node = world.split_shared(world.rank());
            Ok(Mpi {
                rank: usize::try_from(world.rank()).unwrap_or(0),
                size: usize::try_from(world.size()).unwrap_or(1),
                local_rank: usize::try_from(node.rank()).unwrap_or(0),
                local_size: usize::try_from(node.size()).unwrap_or(1),
                world,
                _universe: universe,
            })
        }

        pub(super) fn all_reduce_sum<T: Equivalence + Copy + Default>(&self, buf: &mut [T]) {
            let send = buf.to_vec();
            self.world
                .all_reduce_into(&send[..], buf, SystemOperation::sum());
        }

        pub(super) fn broadcast<T: Equivalence>(&self, buf: &mut [T]) {
            self.world.process_at_rank(0).broadcast_into(buf);
        }

        pub(super) fn all_gather<T: Equivalence + Copy + Default>(&self, local: &[T]) -> Vec<T> {
            let n = mpi::Count::try_from(local.len()).expect("fewer than 2^31 values per rank");
            let mut counts = vec![0 as mpi::Count; self.size];
            self.world.all_gather_into(&n, &mut counts[..]);
            let displs: Vec<mpi::Count> = counts
                .iter()
                .scan(0, |acc, &c| {
                    let d = *acc;
                    *acc += c;
                    Some(d)
                })
                .collect();
            let total: usize = counts.iter().map(|&c| c as usize).sum();
            let mut out = vec![T::default(); total];
            {
                let mut part = PartitionMut::new(&mut out[..], counts, displs);
                self.world.all_gather_varcount_into(local, &mut part);
            }
            out
        }

        pub(super) fn barrier(&self) {
            self.world.barrier();
        }

        pub(super) fn abort(&self, code: i32) -> ! {
            self.world.abort(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_world_collectives_are_the_identity() {
        let w = World::single();
        assert_eq!(
            (w.rank(), w.size(), w.local_rank(), w.local_size()),
            (0, 1, 0, 1)
        );
        assert!(w.is_root() && !w.is_distributed());
        let mut a = [1.0f32, 2.0];
        w.all_reduce_sum_f32(&mut a);
        w.broadcast_f32(&mut a);
        assert_eq!(a, [1.0, 2.0]);
        let mut b = [3.0f64];
        w.all_reduce_sum_f64(&mut b);
        assert_eq!(b, [3.0]);
        assert_eq!(w.all_gather_f32(&[1.0, 2.0]), vec![1.0, 2.0]);
        assert_eq!(w.all_gather_i64(&[4]), vec![4]);
        w.barrier();
    }
}
