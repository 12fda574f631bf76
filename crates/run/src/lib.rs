//! The run layer: everything between the model and training crates and the `gnn4colliders`
//! binary. Run configs composed from YAML (`config`, `settings`: [`RunConfig`] as written,
//! [`ResolvedRun`] as recorded), the run folder ([`RunDir`]), the registered model families
//! ([`ModelConfig`], [`Registered`], [`CachedEvents`]: one line per family, nothing else knows
//! one), preprocessing (`pipeline`), stopping on signals ([`stop_on_signals`]), and the steps a
//! command runs: [`train`] (and fine-tuning), [`predict`], [`evaluate`], [`export`], the cut
//! flow of `scan` and `inspect --inputs` ([`scan_sample`], [`scan_tree_start`]). Tests and
//! benchmarks call the steps directly; the binary parses arguments and prints.
//!
//! The only crate (with `benchmarks`) that chooses a Burn backend (`device`, `backend`) and knows
//! the run-folder layout. Must not depend on clap. Start at `train.rs`.

pub mod backend;
mod cache_build;
mod cached_events;
pub mod config;
pub mod device;
mod entry_progress;
mod error;
mod export;
mod family;
mod model_inputs;
pub mod pipeline;
mod plots;
mod recipe;
mod run_dir;
mod scan;
mod score;
mod settings;
mod stop;
mod sweep;
mod tensorboard;
mod trace;
mod train;

pub use cached_events::{CachedEvents, graph_of_record};
pub use entry_progress::EntryProgress;
pub use error::ConfigError;
pub use export::{ExportFormat, Exported, SAMPLE_EVENTS, export, recipe_path, sample_path};
pub use family::{FAMILIES, FamilyJob, ModelConfig, ModelSection, Registered};
pub use model_inputs::{InputsRequest, InputsWritten, model_inputs};
pub use recipe::RECIPE_VERSION;
pub use run_dir::{RunDir, Start};
pub use scan::{
    SampleScan, ShownEvent, TreeScan, load_declaration, samples_to_scan, scan_sample,
    scan_tree_start,
};
pub use score::{Evaluation, ScoreRequest, SplitChoice, evaluate, predict};
pub use settings::{
    EnvironmentSection, FinetuneMode, FinetuneSection, ResolvedRun, RunConfig, SubsetSection,
    TaskKind, TaskSection, cache_dir, load_dataset, load_run_config,
};
pub use stop::{EXIT_STOPPED, Stopped, stop_on_signals};
pub use sweep::{Point, PointOutcome, Sweep, run_sweep, write_sweep_job};
pub use train::{Finetune, RunSummary, TrainRequest, train};
