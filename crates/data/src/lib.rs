//! Data: every file format the tool reads or writes, and the dataset configs that name the files.
//!
//! Owns ROOT input through our own [`TreeReader`] trait (implemented with the project's reader,
//! `gnn4c-rootio`, a cursor per column reading one basket at a time); a declaration's inputs
//! read chunk by chunk ([`read_file_inputs`]); dataset configs ([`DatasetConfig`]) with their
//! built-in declarations ([`builtin_inputs`]) and written-out schemas ([`SchemaSpec`],
//! translated into a declaration); the seeded demo dataset ([`write_demo`]); file inspection
//! ([`inspect_file`]); the sharded Parquet event cache with its manifest and fingerprint
//! ([`CacheBuilder`], [`CachedSplit`], [`read_manifest`], [`read_cache`]) and folds
//! ([`Folds`]); the prediction outputs: the NPZ table ([`write_predictions_npz`]) and ROOT
//! friend trees ([`write_friend_tree`]).
//!
//! Must not depend on Burn or on any model, task or training crate. Start at `read_inputs.rs`.

mod blocks;
mod cache;
mod config;
mod demo;
mod error;
mod folds;
mod inspect;
mod manifest;
mod outputs;
mod read_inputs;
mod records;
mod root;
mod schema;

pub use blocks::CachedSplit;
pub use cache::{
    CacheBuilder, UnitDone, UnitWriter, finished_units, intact_units, read_cache, verify_cache,
};
pub use config::{
    BUILTIN_DECLARATIONS, DatasetConfig, InputsRef, LabelSpec, OnBadFile, SampleConfig, SampleMeta,
    SamplePlan, SchemaRef, builtin_inputs,
};
pub use demo::{
    DEMO_TREE, DEMO_VERSION, DemoFile, FINETUNE_PROCESSES, PRETRAIN_PROCESSES, ToyColumns,
    ToyProcess, toy_events, write_demo,
};
pub use error::{DataError, write_atomically};
pub use folds::{Folds, Split, fold_of, open_split, read_split};
pub use inspect::{TreeInspection, inspect_file};
pub use manifest::{
    CACHE_SCHEMA_VERSION, CONTRACT_VERSION, CacheManifest, FeatureNames, MANIFEST, SampleCounts,
    ShardInfo, SkippedFile, building_dir, file_identity, fingerprint_of, first_difference,
    read_manifest,
};
pub use outputs::{
    FriendTree, PredictionTable, SAMPLE_NAME_CHARS, check_output_path, read_predictions_npz,
    write_friend_tree, write_predictions_npz,
};
pub use read_inputs::{InputChunk, entry_id, read_file_inputs};
pub use records::{EventRecord, ROW_GROUP_EVENTS};
pub use root::{
    BranchInfo, BranchKind, Column, ColumnChunk, ColumnRequest, ColumnValues, ElemType, EntryRange,
    TreeReader, WriteColumn, infer_counter, list_trees, not_numbers, open_tree, request,
    write_tree,
};
pub use schema::{MetSpec, ObjectSpec, SchemaSpec};

/// Bytes received from remote files (`root://`, `https://`) by this process so far: what a
/// progress display turns into a rate.
pub fn network_bytes_received() -> u64 {
    gnn4c_rootio::network_bytes_received()
}
