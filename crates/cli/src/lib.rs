//! The `gnn4colliders` tool's library half: pipeline wiring shared by the binary's commands and
//! by the benchmarks (`pipeline`: dataset → events → Parquet cache, cache → graphs; `device`:
//! device selection and the CUDA driver check; `backend`: the model each backend scores with).
//!
//! The only crate (with `benchmarks`) that wires the others together, chooses a backend, knows
//! clap/figment/anyhow and the run-folder layout. Start at `main.rs` for the commands.

pub mod backend;
pub mod device;
pub mod pipeline;
