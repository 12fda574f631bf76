//! Graphs: event features → fully connected directed [`GraphSample`] (contract §4).
//!
//! Owns topology (`edge_src`/`edge_dst`, source-major, no self loops) from a bounded cache keyed by
//! the node count ([`TopologyCache`]), edge features (deta, dphi wrapped into [−π, π), dR;
//! [`edge_features`]) and [`build_graph`]. Later: `GraphBatch`, collation and padding.
//! Knows nothing of ROOT or Parquet. Start at `graph.rs`.

mod graph;
mod topology;

pub use graph::{D_EDGE, GraphSample, build_graph, edge_features, wrap_phi};
pub use topology::{Topology, TopologyCache};
