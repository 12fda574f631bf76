//! Data-parallel training over MPI: the world (rank, size, local rank) and the collectives
//! training needs (sum all-reduce, broadcast from rank 0, all-gather with per-rank counts,
//! barrier, abort). Which events a rank streams is the training crate's `stream::plan`.
//!
//! Never names a graph, a model or a tensor type: it moves `f32`/`f64`/`i64` slices. Without the
//! `mpi` feature, or when the process was not started by an MPI launcher, `World::init` gives a
//! single-process world whose collectives are the identity, so the same training code runs
//! everywhere. Start reading at `World`.

mod world;

pub use world::{DistributedError, World, launched_by_mpi};
