//! Shared features: `EventSample` → selected objects → node feature rows and global features
//! (contract §2–§3).
//!
//! Owns object selection ([`SelectionConfig`]: pt / |eta| thresholds, pt-descending stable sort,
//! per-collection caps, `min_nodes`), the 7 node features and 2 global features
//! ([`build_features`] into a reusable [`EventFeatures`]), and the named skip reasons. Pure
//! functions over `gnn4c-events` types: no Burn, Arrow, Parquet or oxyroot may appear in its
//! dependency tree (checked by `.ci/run`). Start at `build.rs`.

mod auto_scales;
mod build;
mod declare;
mod declared;
mod expr;
mod selection;
mod standardize;

pub use auto_scales::{AutoColumns, Standardization};
pub use build::{
    D_GLOBAL, D_NODE, EventFeatures, NODE_FEATURE_NAMES, SKIP_NON_FINITE, SKIP_TOO_FEW_NODES,
    build_features,
};
pub use declare::{
    DeclError, EVENT_NAMES, FeatureDecl, Inputs, InputsSpec, Kinematics, OBJECT_FIELDS, ObjectDecl,
    ObjectInputs, PairFeature, closest_names,
};
pub use declared::{ChunkFeatures, ChunkInputs, ObjectColumns, Skip};
pub use expr::{Aggregate, Bound, Expr, ExprError, FUNCTIONS, NameRef};
pub use selection::{PerCollection, SelectionConfig};
pub use standardize::{Moments, Scale, Standardize};
