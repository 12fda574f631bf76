//! `gnn4colliders`: the command-line tool that drives every stage from YAML configs.
//!
//! Each subcommand lives in its own module: it parses its arguments, calls the run layer
//! (`gnn4c-run`, which composes configs, owns the run folder and runs the steps) and prints. The
//! only crate that knows clap. `main` maps errors to exit codes (0 success, 1 runtime error,
//! 2 usage error, 75 stopped by a signal with the work so far kept: run it again to continue)
//! and prints them with their causes.

mod declaration;
mod export;
mod features;
mod generate;
mod inspect;
mod predict;
mod preprocess;
mod scan;
mod train;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Pretrain and fine-tune ROOT-GNN event classifiers straight from ROOT ntuples.
#[derive(Debug, Parser)]
#[command(name = "gnn4colliders", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write the built-in demo dataset (a seeded toy: 12 pretraining processes + a ttH CP pair).
    Generate(generate::Args),
    /// List a ROOT file's trees, branches, types and entries, and which schema would read it.
    Inspect(inspect::Args),
    /// Read a dataset config end to end: events per sample, skipped events by reason, objects.
    Scan(scan::Args),
    /// Build (or validate) the Parquet event cache of a dataset.
    Preprocess(preprocess::Args),
    /// Train a model from scratch (pretraining, or a baseline) in a run folder.
    Train(train::Args),
    /// Fine-tune a pretrained model: a new head, frozen or full backbone.
    Finetune(train::FinetuneArgs),
    /// Score events with a run's checkpoint: NPZ table and ROOT friend trees.
    Predict(predict::Args),
    /// Score a labelled split and write metrics.json (plus the prediction outputs).
    Evaluate(predict::Args),
    /// Write a run's model as PyTorch-named safetensors weights, or as an ONNX model.
    Export(export::Args),
    /// Write a run's model inputs for any ROOT files (the ONNX inputs, NPZ).
    Features(features::Args),
}

impl Command {
    /// Whether the command stops cleanly on a signal (SIGTERM, SIGINT, SIGUSR1).
    fn stops_cleanly(&self) -> bool {
        match self {
            Command::Preprocess(_)
            | Command::Predict(_)
            | Command::Evaluate(_)
            | Command::Features(_) => true,
            Command::Train(a) => !a.print_config,
            Command::Finetune(a) => !a.common.print_config,
            Command::Generate(_) | Command::Inspect(_) | Command::Scan(_) | Command::Export(_) => {
                false
            }
        }
    }
}

fn main() -> ExitCode {
    gnn4c_kernels::tune_allocator();
    install_panic_hook();
    let cli = Cli::parse();
    if cli.command.stops_cleanly() {
        // From the first instant: a stop requested while MPI starts or the configs load (Slurm's
        // warning can come that early) is kept, not fatal. Later calls return the same flag and
        // report an error this one met.
        let _ = gnn4c_run::stop_on_signals();
    }
    let result = match cli.command {
        Command::Generate(args) => generate::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Scan(args) => scan::run(&args),
        Command::Preprocess(args) => return in_world(|w| preprocess::run(&args, w)),
        Command::Train(args) => return in_world(|w| train::run_train(&args, w)),
        Command::Finetune(args) => return in_world(|w| train::run_finetune(&args, w)),
        Command::Predict(args) => predict::run_predict(&args),
        Command::Evaluate(args) => predict::run_evaluate(&args),
        Command::Export(args) => export::run(&args),
        Command::Features(args) => features::run(&args),
    };
    ExitCode::from(report(result, ""))
}

/// The exit code of a command's result, printing the error (`who` names the rank under MPI):
/// 0 on success, 2 for a config the user must fix (a usage error, like a bad flag),
/// [`gnn4c_run::EXIT_STOPPED`] for a clean stop on a signal, 1 otherwise.
fn report(result: anyhow::Result<()>, who: &str) -> u8 {
    match result {
        Ok(()) => 0,
        // `gnn4colliders inspect f.root | head`: a closed pipe is not an error.
        Err(e) if is_broken_pipe(&e) => 0,
        Err(e) if is_stop(&e) => {
            eprintln!("stopped{who}: {e:#}");
            gnn4c_run::EXIT_STOPPED
        }
        Err(e) => {
            eprintln!("error{who}: {e:#}");
            // A config the user must fix: ours, or a dataset config problem found while reading.
            let data_config = e.chain().any(|c| {
                matches!(
                    c.downcast_ref::<gnn4c_data::DataError>(),
                    Some(gnn4c_data::DataError::Config(_))
                )
            });
            if e.downcast_ref::<gnn4c_run::ConfigError>().is_some() || data_config {
                2
            } else {
                1
            }
        }
    }
}

/// `preprocess`, `train` and `finetune`, in the MPI world when an MPI launcher started this process. A rank
/// that fails (error or panic) ends the whole job, so no rank waits forever in a collective.
fn in_world(run: impl FnOnce(&gnn4c_distributed::World) -> anyhow::Result<()>) -> ExitCode {
    let world = match gnn4c_distributed::World::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let who = if world.is_distributed() {
        format!(" (rank {} of {})", world.rank(), world.size())
    } else {
        String::new()
    };
    let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&world))) {
        Ok(result) => report(result, &who),
        Err(_) => 101, // the panic hook printed it
    };
    if code != 0 && code != gnn4c_run::EXIT_STOPPED && world.is_distributed() {
        eprintln!("error{who}: ending every rank of the job");
        // MPI_Abort kills the job at once; give the launcher a moment to forward this rank's
        // standard error first, or the user may never see why the job ended.
        use std::io::Write as _;
        let _ = std::io::stderr().flush();
        std::thread::sleep(std::time::Duration::from_millis(500));
        world.abort(i32::from(code));
    }
    ExitCode::from(code)
}

/// A command a stop request (a signal) ended cleanly.
fn is_stop(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<gnn4c_run::Stopped>().is_some()
            || matches!(
                c.downcast_ref::<gnn4c_training::TrainingError>(),
                Some(gnn4c_training::TrainingError::Stopped { .. })
            )
    })
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// oxyroot's writer (friend trees) runs under `catch_unwind` and its panics become clear errors,
/// so their default panic message (and backtrace) would only be noise. Every other panic prints
/// as usual.
fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let in_oxyroot = info
            .location()
            .is_some_and(|l| l.file().contains("oxyroot"));
        if !in_oxyroot {
            default(info);
        }
    }));
}
