//! Data-parallel training over MPI: world (rank, size, local rank), rank sharding, the flattened
//! gradient all-reduce and exact global metric reductions.
//!
//! Never names a graph or a model type. Filled by issue 9.
