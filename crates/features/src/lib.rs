//! Shared features: `EventSample` → selected objects → node feature rows and global features
//! (contract §2–§3).
//!
//! Owns object selection (pt / |eta| thresholds, pt-descending stable sort, per-collection caps,
//! `min_nodes`), the 7 node features and the 2 global features, and the named skip reasons.
//! Pure functions over `gnn4c-events` types: no Burn, Arrow, Parquet or oxyroot may appear in its
//! dependency tree (checked by `.ci/run`). Filled by issue 3.
