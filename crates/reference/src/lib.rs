//! The contract's reference path: the code the contract's behaviour is written as, which the
//! product (`preprocess`, the declared inputs, the families) is tested against bit for bit. The
//! product does not use it (`scripts/check-layering.sh` keeps every product crate off it); parity
//! tests, the data and graphs crates' tests and the benchmarks do.
//!
//! - `schemas.rs`: the built-in schemas written in Rust ([`builtin_schema`]);
//! - `events.rs`: a tree's entries as `EventSample`s through a schema ([`read_file_events`],
//!   [`read_sample`]; contract §1);
//! - `features.rs`: selection and the fixed 7 node and 2 global features ([`build_features`];
//!   §2–§3);
//! - `graph.rs`: an event's graph from them ([`build_graph`], [`graph_of_event`]; §4).
//!
//! Start at `events.rs`.

mod events;
mod features;
mod graph;
mod schemas;

pub use events::{FileReport, SampleReport, read_file_events, read_sample, read_tree_events};
pub use features::{D_GLOBAL, D_NODE, EventFeatures, NODE_FEATURE_NAMES, build_features};
pub use graph::{CONTRACT_WIDTHS, build_graph, graph_of_event};
pub use schemas::builtin_schema;
