//! Data: every file format the tool reads or writes, and the dataset configs that name the files.
//!
//! Owns ROOT input through our own [`TreeReader`] trait (implemented with the project's reader,
//! `gnn4c-rootio`, a cursor per column reading one basket at a time),
//! schemas ([`SchemaSpec`]: which branch holds which field, built-ins `delphes`, `delphes_flat`, `nanoaod`,
//! `hzz`, `vector`), event assembly into `gnn4c_events::EventSample` ([`read_file_events`]),
//! dataset configs ([`DatasetConfig`]), the seeded demo dataset ([`write_demo`]) and file
//! inspection ([`inspect_file`]), and the sharded Parquet event cache with its manifest and
//! fingerprint ([`CacheBuilder`], [`CachedSplit`], [`read_manifest`], [`read_cache`]) and folds ([`Folds`]), and the
//! prediction outputs: the NPZ table ([`write_predictions_npz`]) and ROOT friend trees
//! ([`write_friend_tree`]).
//!
//! Must not depend on Burn or on any model, task or training crate. Start at `assemble.rs`.

mod assemble;
mod blocks;
mod cache;
mod config;
mod demo;
mod error;
mod folds;
mod inspect;
mod outputs;
mod read_inputs;
mod root;
mod schema;

pub use assemble::{FileReport, SampleMeta, read_file_events, read_tree_events};
pub use blocks::CachedSplit;
pub use cache::{
    CACHE_SCHEMA_VERSION, CONTRACT_VERSION, CacheBuilder, CacheManifest, EventRecord, FeatureNames,
    MANIFEST, ROW_GROUP_EVENTS, SampleCounts, ShardInfo, SkippedFile, UnitDone, UnitWriter,
    building_dir, file_identity, fingerprint_of, first_difference, kept_units, read_cache,
    read_manifest, verify_cache,
};
pub use config::{
    DatasetConfig, InputsRef, LabelSpec, OnBadFile, SampleConfig, SamplePlan, SampleReport,
    SchemaRef, builtin_inputs,
};
pub use demo::{
    DEMO_TREE, DEMO_VERSION, DemoFile, FINETUNE_PROCESSES, PRETRAIN_PROCESSES, ToyColumns,
    ToyProcess, toy_events, write_demo,
};
pub use error::{DataError, write_atomically};
pub use folds::{Folds, Split, fold_of, open_split, read_split};
pub use inspect::{TreeInspection, inspect_file};
pub use outputs::{
    FriendTree, PredictionTable, SAMPLE_NAME_CHARS, check_output_path, read_predictions_npz,
    write_friend_tree, write_predictions_npz,
};
pub use read_inputs::{InputChunk, entry_id, read_file_inputs};
pub use root::{
    BranchInfo, BranchKind, Column, ColumnChunk, ColumnRequest, ColumnValues, ElemType, EntryRange,
    TreeReader, WriteColumn, list_trees, open_tree, write_tree,
};
pub use schema::{
    BUILTIN_SCHEMAS, HZZ_BTAG_THRESHOLD, MetSpec, NANOAOD_DEEPCSV_MEDIUM, ObjectSpec, SchemaSpec,
};

/// Bytes received from remote files (`root://`, `https://`) by this process so far: what a
/// progress display turns into a rate.
pub fn network_bytes_received() -> u64 {
    gnn4c_rootio::network_bytes_received()
}
