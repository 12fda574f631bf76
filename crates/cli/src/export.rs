//! `gnn4colliders export`: a run's (or a checkpoint's) weights as a PyTorch-named safetensors file.

use std::io::Write;
use std::path::PathBuf;

/// Arguments of `export`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders export runs/pretrain_multiclass --out pretrain.safetensors\n  gnn4colliders export runs/pretrain_multiclass/last.ckpt --out last.safetensors"
)]
pub(crate) struct Args {
    /// Run folder (its best.ckpt) or a checkpoint file.
    run: PathBuf,
    /// Output safetensors file (PyTorch state-dict names: `node_encoder.0.weight`, …).
    #[arg(long)]
    out: PathBuf,
    /// Replace an existing output.
    #[arg(long)]
    overwrite: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let e = gnn4c_run::export(&args.run, &args.out, args.overwrite)?;
    writeln!(
        std::io::stdout().lock(),
        "wrote {} ({} {} parameters, {} outputs, from {} after epoch {})",
        args.out.display(),
        e.parameters,
        e.family,
        e.n_out,
        e.checkpoint.display(),
        e.epoch
    )?;
    Ok(())
}
