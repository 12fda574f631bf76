//! `gnn4colliders features`: a trained model's ONNX inputs for any ROOT files, as an NPZ file.

use std::io::Write;
use std::path::PathBuf;

/// Arguments of `features`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders features runs/pretrain_multiclass data/other.root --out inputs.npz\n  gnn4colliders features tagger_run nano1.root root://eospublic.cern.ch//eos/opendata/nano2.root --out inputs.npz\n\nThe NPZ holds the model's ONNX inputs by name (docs/onnx.md), then `file` (the index of each event's file in the order given), `entry` and `event_number`. In Python:\n  z = np.load(\"inputs.npz\"); s = onnxruntime.InferenceSession(\"tagger.onnx\")\n  logits = s.run(None, {i.name: z[i.name] for i in s.get_inputs()})[0]"
)]
pub(crate) struct Args {
    /// Run folder (its config.json) or a checkpoint file.
    run: PathBuf,
    /// ROOT files or URLs (root://, https://), read with the run's input declaration.
    #[arg(required = true)]
    files: Vec<String>,
    /// The tree in every file [default: the run's dataset's].
    #[arg(long)]
    tree: Option<String>,
    /// Output NPZ file.
    #[arg(long)]
    out: PathBuf,
    /// Replace an existing output.
    #[arg(long)]
    overwrite: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let req = gnn4c_run::InputsRequest {
        run: args.run.clone(),
        files: args.files.clone(),
        tree: args.tree.clone(),
        out: args.out.clone(),
        overwrite: args.overwrite,
        stop: gnn4c_run::stop_on_signals()?,
    };
    let mut out = std::io::stdout().lock();
    let w = gnn4c_run::model_inputs(&req, &mut out)?;
    writeln!(
        out,
        "wrote {} ({} events of {} file(s): {}; the event cache is {})",
        args.out.display(),
        w.events,
        args.files.len(),
        w.arrays.join(", "),
        w.cache.display()
    )?;
    Ok(())
}
