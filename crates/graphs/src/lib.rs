//! Graphs: node features → fully connected directed `GraphSample` (contract §4), and batches of them.
//!
//! Owns topology (`edge_src`/`edge_dst`, source-major, no self loops), edge features
//! (deta, dphi, dR), collation and padding into `GraphBatch`. Knows nothing of ROOT or Parquet.
//! Filled by issues 3 and 4.
