//! `gnn4colliders export`: a run's (or a checkpoint's) weights as a PyTorch-named safetensors file.

use std::io::Write;
use std::path::PathBuf;

use gnn4c_data::check_output_path;
use gnn4c_root_gnn::{EdgeNetwork, save_pytorch_safetensors};
use gnn4c_training::read_checkpoint;

use crate::train::model_from_checkpoint;

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
    let ck_path = if args.run.is_dir() {
        args.run.join("best.ckpt")
    } else {
        args.run.clone()
    };
    check_output_path(&args.out, args.overwrite)?;
    let ck = read_checkpoint(&ck_path)?;
    let device = Default::default();
    let net: EdgeNetwork<burn::backend::Flex> = model_from_checkpoint(&ck, &device)?;
    let n_out = net.n_out();
    gnn4c_data::write_atomically(&args.out, |tmp| {
        save_pytorch_safetensors(&net, tmp).map_err(|e| gnn4c_data::DataError::Write {
            path: args.out.clone(),
            message: e.to_string(),
        })
    })?;
    writeln!(
        std::io::stdout().lock(),
        "wrote {} ({} parameters, {n_out} outputs, from {} after epoch {})",
        args.out.display(),
        burn::module::Module::num_params(&net),
        ck_path.display(),
        ck.state.epoch
    )?;
    Ok(())
}
