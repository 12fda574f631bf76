//! Input declarations and the features they make: a dataset config's `inputs:` (objects,
//! node, global and pair features, standardisation) as written (`declare.rs`), checked and
//! parsed (`inputs.rs`, [`Inputs`]), its expressions (`expr.rs`), and a chunk of entries' columns turned into
//! selected, pt-ordered nodes, their features and the globals (`chunk_features.rs`,
//! [`Inputs::build_chunk`]): what `preprocess` runs. Standardisation: `standardize.rs` (fixed
//! scales, moments) and `auto_scales.rs` (a declaration's `auto` columns). The named skip
//! reasons are here too. Start at `declare.rs`.
//!
//! `selection.rs` is the contract's default selection (§2, [`SelectionConfig`]): what a
//! written-out `schema:` is translated with. The contract's fixed features, the reference the
//! built-in declarations are tested against, are the `gnn4c-reference` crate's. Pure functions:
//! no Burn, Arrow, Parquet or oxyroot may appear in this crate's dependency tree (checked by
//! `scripts/check-layering.sh`).

mod auto_scales;
mod chunk_features;
mod declare;
mod expr;
mod inputs;
mod selection;
mod standardize;

pub use auto_scales::{AutoColumns, Standardization};
pub use chunk_features::{
    ChunkFeatures, ChunkInputs, ObjectColumns, SKIP_NON_FINITE, SKIP_TOO_FEW_NODES, Skip,
};
pub use declare::{
    DeclError, EVENT_NAMES, FeatureDecl, InputsSpec, OBJECT_FIELDS, ObjectDecl, PairFeature,
    closest_names,
};
pub use expr::{Aggregate, Bound, Expr, ExprError, FUNCTIONS, NameRef};
pub use inputs::{Inputs, Kinematics, ObjectInputs};
pub use selection::{PerCollection, SelectionConfig};
pub use standardize::{Moments, Scale, Standardize};
