//! `gnn4colliders train` and `finetune`: arguments → a `gnn4c_run::TrainRequest` → the run
//! layer's training step.

use std::io::Write;
use std::path::PathBuf;

use gnn4c_distributed::World;
use gnn4c_run::device::DeviceChoice;
use gnn4c_run::{Finetune, FinetuneMode, RunDir, Start, TrainRequest, load_run_config};

/// Arguments of `train`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders train pretrain_multiclass                     (configs/experiment/pretrain_multiclass.yaml)\n  gnn4colliders train pretrain_multiclass trainer.max_epochs=2 trainer.lr=3e-4 --print-config\n  gnn4colliders train pretrain_multiclass environment=perlmutter --device cuda:0\n  gnn4colliders train pretrain_multiclass --resume\n  gnn4colliders train finetune_ttH_CP --run runs/finetune_ttH_CP_scratch   (the from-scratch baseline)\n  gnn4colliders train my_run.yaml data=nanoaod task=multilabel --seed 3\n\nConfig groups (configs/<group>/<name>.yaml, selected in a defaults list or as group=name):\n  data, model, task, trainer, environment. Precedence: defaults list, the file (_self_),\n  GNN4C_<SECTION>__<KEY> environment variables, KEY=VALUE and flags. Exit codes: 0 ok,\n  1 runtime error, 2 usage or config error."
)]
pub(crate) struct Args {
    /// Run config: a YAML file, or the name of one in configs/experiment/.
    config: PathBuf,
    /// Hydra-style overrides, applied last: `trainer.max_epochs=3 model.dropout=0.1` sets keys,
    /// `data=nanoaod task=binary` selects group files. Before them, environment variables
    /// `GNN4C_<SECTION>__<KEY>` (`GNN4C_TRAINER__LR=1e-4`).
    #[arg(value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Print the resolved config (after overrides) as JSON and exit.
    #[arg(long)]
    pub(crate) print_config: bool,
    /// Run folder [default: <environment.runs_dir>/<name>, runs/<name>].
    #[arg(long)]
    run: Option<PathBuf>,
    /// Continue the run in the run folder from its last checkpoint.
    #[arg(long, conflicts_with = "overwrite")]
    resume: bool,
    /// Start again in a run folder that already holds a run (its checkpoints are replaced).
    #[arg(long)]
    overwrite: bool,
    /// cpu, cuda or cuda:N [default: environment.device, cpu].
    #[arg(long)]
    device: Option<DeviceChoice>,
    /// Compute threads, 0 = all cores [default: environment.threads].
    #[arg(long)]
    threads: Option<usize>,
    /// Seed of initialisation, shuffling, dropout and subsets [default: trainer.seed].
    #[arg(long)]
    seed: Option<u64>,
    /// Override trainer.max_epochs.
    #[arg(long)]
    max_epochs: Option<u64>,
    /// No progress bar (it is off anyway when standard error is not a terminal).
    #[arg(long)]
    no_progress: bool,
    /// Write a Chrome trace (chrome://tracing, Perfetto) of the run's stages to FILE: loader
    /// waits, batch preparation, forward, backward, all-reduce, optimiser, validation,
    /// checkpoints, and the model's blocks. Off by default (no cost when off); under MPI each
    /// rank writes FILE.rank<N>. Pair it with a short run (--max-epochs 1, a subset).
    #[arg(long, value_name = "FILE")]
    profile_trace: Option<PathBuf>,
    /// A sweep, as Hydra's multirun: every combination of the overrides given several
    /// comma-separated values (`trainer.lr=1e-3,1e-4 model=root_gnn,pfn`), each in
    /// <run>/multirun/<k>-<overrides>/, then summary.csv and summary.md there (best validation
    /// objective first). Run again, it skips finished points and resumes the others.
    /// --resume is implied (a requeued array task passes it).
    #[arg(long, conflicts_with_all = ["print_config", "profile_trace"])]
    multirun: bool,
    /// With --multirun: run only point K of the sweep (from 0; a Slurm array task's), then
    /// write the summary of the finished points.
    #[arg(long, value_name = "K", requires = "multirun")]
    point: Option<usize>,
    /// With --multirun: write <run>/multirun/submit.sh, a Slurm array job of one point per task
    /// (scripts/slurm/sweep-array.sh), instead of running.
    #[arg(long, requires = "multirun", conflicts_with = "point")]
    slurm: bool,
}

/// Arguments of `finetune`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders finetune finetune_ttH_CP                       (from finetune.from, mode finetune.mode)\n  gnn4colliders finetune finetune_ttH_CP --mode frozen_backbone\n  gnn4colliders finetune my_task.yaml --from runs/pretrain_multiclass/best.ckpt --mode full"
)]
pub(crate) struct FinetuneArgs {
    #[command(flatten)]
    pub(crate) common: Args,
    /// Pretrained checkpoint whose backbone is loaded [default: the config's finetune.from].
    #[arg(long)]
    from: Option<PathBuf>,
    /// Train only the new head, or everything [default: the config's finetune.mode].
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
}

/// `--mode` of `finetune`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub(crate) enum ModeArg {
    /// Only the new head trains; the backbone gets no gradients and no optimiser state.
    FrozenBackbone,
    /// Everything trains.
    Full,
}

impl From<ModeArg> for FinetuneMode {
    fn from(m: ModeArg) -> FinetuneMode {
        match m {
            ModeArg::FrozenBackbone => FinetuneMode::FrozenBackbone,
            ModeArg::Full => FinetuneMode::Full,
        }
    }
}

/// What `finetune` adds to a request: the pretrained checkpoint and the mode, where given.
type FinetuneChoice<'a> = Option<(Option<&'a std::path::Path>, Option<FinetuneMode>)>;

/// The composed config and the request `args` make with `overrides` (fine-tuning from
/// `finetune` when given).
fn request(
    args: &Args,
    overrides: &[String],
    finetune: FinetuneChoice<'_>,
) -> anyhow::Result<TrainRequest> {
    let mut flags = Vec::new();
    if let Some(d) = args.device {
        flags.push(("device", format!("environment.device={}", d.name())));
    }
    if let Some(t) = args.threads {
        flags.push(("threads", format!("environment.threads={t}")));
    }
    if let Some(s) = args.seed {
        flags.push(("seed", format!("trainer.seed={s}")));
    }
    if let Some(n) = args.max_epochs {
        flags.push(("max-epochs", format!("trainer.max_epochs={n}")));
    }
    let (mut cfg, sources) = load_run_config(&args.config, overrides, &flags)?;
    let finetune = match finetune {
        Some((from, mode)) => Some(Finetune::resolve(&mut cfg, from, mode, &args.config)?),
        None => None,
    };
    let mut req = TrainRequest::new(cfg, sources, finetune);
    if let Some(run) = &args.run {
        req.run_dir = RunDir::new(run);
    }
    req.start = if args.resume {
        Start::Resume
    } else if args.overwrite {
        Start::Overwrite
    } else {
        Start::New
    };
    req.print_config = args.print_config;
    req.progress = !args.no_progress;
    req.profile_trace = args.profile_trace.clone();
    if !req.print_config {
        req.stop = gnn4c_run::stop_on_signals()?;
    }
    Ok(req)
}

/// An array task's arguments for the sweep `args` describe (the config, the overrides, the
/// flags that set keys, the command's `extra` ones, the run folder `run`): the device comes
/// from the site (`scripts/slurm/site.sh`).
fn task_args(args: &Args, extra: &[String], run: &std::path::Path) -> Vec<String> {
    let mut a = vec![args.config.display().to_string()];
    a.extend(args.overrides.iter().cloned());
    let flags = [
        ("--threads", args.threads.map(|t| t.to_string())),
        ("--seed", args.seed.map(|s| s.to_string())),
        ("--max-epochs", args.max_epochs.map(|n| n.to_string())),
    ];
    for (flag, value) in flags {
        if let Some(v) = value {
            a.extend([flag.to_owned(), v]);
        }
    }
    a.extend(extra.iter().cloned());
    // The parent of `<run>/multirun`: the tasks' sweep folder is this one.
    a.extend(["--run".to_owned(), run.display().to_string()]);
    a
}

/// Rank 0 speaks for the job; the other ranks train silently.
fn console(world: &World) -> Box<dyn Write> {
    if world.is_root() {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::io::sink())
    }
}

pub(crate) fn run_train(args: &Args, world: &World) -> anyhow::Result<()> {
    // The from-scratch baseline of a fine-tuning experiment uses the same config.
    let from_scratch = |overrides: &[String]| {
        let mut req = request(args, overrides, None)?;
        let had = req.config.finetune.take().is_some();
        Ok((req, had))
    };
    let mut out = console(world);
    if args.multirun {
        let request = |o: &[String]| from_scratch(o).map(|(r, _)| r);
        return sweep(args, "train", &[], &request, world, &mut out);
    }
    let (req, had_finetune) = from_scratch(&args.overrides)?;
    if had_finetune && !args.print_config {
        writeln!(
            out,
            "note: `train` trains from scratch; the config's finetune section is used by `gnn4colliders finetune`"
        )?;
    }
    gnn4c_run::train(&req, world, &mut out)?;
    Ok(())
}

pub(crate) fn run_finetune(args: &FinetuneArgs, world: &World) -> anyhow::Result<()> {
    let finetune = Some((args.from.as_deref(), args.mode.map(FinetuneMode::from)));
    let common = &args.common;
    let mut out = console(world);
    if common.multirun {
        let mut extra = Vec::new();
        if let Some(from) = &args.from {
            extra.extend(["--from".to_owned(), from.display().to_string()]);
        }
        if let Some(value) = args
            .mode
            .and_then(|m| clap::ValueEnum::to_possible_value(&m))
        {
            extra.extend(["--mode".to_owned(), value.get_name().to_owned()]);
        }
        let request = |o: &[String]| request(common, o, finetune);
        return sweep(common, "finetune", &extra, &request, world, &mut out);
    }
    let req = request(common, &common.overrides, finetune)?;
    gnn4c_run::train(&req, world, &mut out)?;
    Ok(())
}

/// `--multirun`: the sweep's points in `<run>/multirun/` (all, or `--point K`), then its
/// summary; or with `--slurm` the array job that runs them.
fn sweep(
    args: &Args,
    command: &str,
    extra: &[String],
    request: &dyn Fn(&[String]) -> anyhow::Result<TrainRequest>,
    world: &World,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let sweep = gnn4c_run::Sweep::parse(&args.overrides)?;
    let points = sweep.points();
    // Every point's run folder lies in the first point's folder's `multirun/`.
    let first = {
        let mut o = sweep.fixed.clone();
        o.extend(points[0].overrides.iter().cloned());
        request(&o)?
    };
    let root = first.run_dir.path().join("multirun");
    if args.slurm {
        let script = gnn4c_run::write_sweep_job(
            &root,
            command,
            &task_args(args, extra, first.run_dir.path()),
            points.len(),
        )?;
        writeln!(
            out,
            "wrote {}: a Slurm array of {} tasks, one point each (scripts/slurm/sweep-array.sh); submit it from the repository root with `bash {}` (sbatch options after it: -A, --qos, --time), then find the summary in {}",
            script.display(),
            points.len(),
            script.display(),
            root.join("summary.md").display()
        )?;
        return Ok(());
    }
    let outcomes = gnn4c_run::run_sweep(
        &sweep,
        &root,
        args.overwrite,
        args.point,
        request,
        world,
        out,
    )?;
    if world.is_root() {
        let done = outcomes.iter().filter(|o| o.summary.is_some()).count();
        writeln!(
            out,
            "\nsweep: {done} of {} points finished; wrote {} and summary.csv (best validation objective first)",
            points.len(),
            root.join("summary.md").display()
        )?;
        if let Ok(table) = std::fs::read_to_string(root.join("summary.md")) {
            write!(out, "{table}")?;
        }
    }
    Ok(())
}
