//! `gnn4colliders export`: a run's (or a checkpoint's) model as PyTorch-named safetensors
//! weights, or as an ONNX model with a sample batch.

use std::io::Write;
use std::path::PathBuf;

use gnn4c_run::ExportFormat;

/// What `--format` takes.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Format {
    /// The weights, with PyTorch state-dict names.
    Safetensors,
    /// The model for ONNX Runtime (opset 17), with its input recipe and a sample batch beside it.
    Onnx,
}

/// Arguments of `export`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders export runs/pretrain_multiclass --out pretrain.safetensors\n  gnn4colliders export runs/pretrain_multiclass/last.ckpt --out last.safetensors\n  gnn4colliders export runs/pretrain_multiclass --out tagger.onnx   (ONNX; also writes tagger.inputs.json and tagger.sample.npz)\n\nONNX inputs, outputs and metadata: docs/onnx.md."
)]
pub(crate) struct Args {
    /// Run folder (its best.ckpt) or a checkpoint file.
    run: PathBuf,
    /// Output file: safetensors weights (PyTorch state-dict names: `node_encoder.0.weight`, …),
    /// or an ONNX model when it ends in `.onnx` or with `--format onnx`.
    #[arg(long)]
    out: PathBuf,
    /// The output's format [default: from --out's extension: `.onnx` is onnx, else safetensors].
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Replace existing outputs.
    #[arg(long)]
    overwrite: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let format = match args.format {
        Some(Format::Safetensors) => ExportFormat::Safetensors,
        Some(Format::Onnx) => ExportFormat::Onnx,
        None => ExportFormat::of_path(&args.out),
    };
    let e = gnn4c_run::export(&args.run, &args.out, format, args.overwrite)?;
    let mut out = std::io::stdout().lock();
    let what = match format {
        ExportFormat::Safetensors => "parameters",
        ExportFormat::Onnx => "parameters as an ONNX model,",
    };
    writeln!(
        out,
        "wrote {} ({} {} {what} {} outputs, from {} after epoch {})",
        args.out.display(),
        e.parameters,
        e.family,
        e.n_out,
        e.checkpoint.display(),
        e.epoch
    )?;
    if format == ExportFormat::Onnx {
        writeln!(
            out,
            "wrote {} (the input recipe: collections, selections, every feature's formula and standardisation; also in the model's metadata)",
            gnn4c_run::recipe_path(&args.out).display()
        )?;
    }
    match &e.sample {
        Some(Ok(path)) => writeln!(
            out,
            "wrote {} (the ONNX inputs of the first {} test events and the model's logits)",
            path.display(),
            gnn4c_run::SAMPLE_EVENTS
        )?,
        Some(Err(why)) => writeln!(out, "{why}")?,
        None => {}
    }
    Ok(())
}
