//! Graphs: event features → fully connected directed [`GraphSample`] (contract §4).
//!
//! Owns topology (`edge_src`/`edge_dst`, source-major, no self loops) from a bounded cache keyed by
//! the node count ([`TopologyCache`]), edge features (deta, dphi wrapped into [−π, π), dR;
//! [`edge_features`], [`pair_features`]), collation with optional padding into a host batch
//! ([`collate`] → [`HostBatch`]) and the one host-to-device boundary ([`HostBatch::to_device`]
//! → [`GraphBatch`], Burn tensors, generic over the backend).
//! Knows nothing of ROOT or Parquet. Start at `graph.rs`.

mod batch;
mod graph;
mod topology;

pub use batch::{GraphBatch, HostBatch, Padding, Widths, collate};
pub use graph::{D_EDGE, GraphSample, NodeKinematics, edge_features, pair_features, wrap_phi};
pub use topology::{Topology, TopologyCache};
