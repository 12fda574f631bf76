//! The export step: a run's (or a checkpoint's) weights as a PyTorch-named safetensors file.

use std::path::{Path, PathBuf};

use gnn4c_data::check_output_path;
use gnn4c_training::read_checkpoint;

use crate::family::{FamilyJob, Registered};
use crate::run_dir::RunDir;
use crate::settings::ResolvedRun;
use crate::train_step::load_model;

/// What [`export`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The checkpoint read.
    pub checkpoint: PathBuf,
    /// Its epoch.
    pub epoch: u64,
    /// The model family.
    pub family: &'static str,
    /// Parameters written.
    pub parameters: usize,
    /// Outputs of the head.
    pub n_out: usize,
}

/// Writes the weights of `run` (a run folder's `best.ckpt`, or a checkpoint file) to `out`
/// (atomically; an existing file only with `overwrite`).
pub fn export(run: &Path, out: &Path, overwrite: bool) -> anyhow::Result<Exported> {
    let ck_path = if run.is_dir() {
        RunDir::new(run).checkpoint("best")
    } else {
        run.to_path_buf()
    };
    check_output_path(out, overwrite)?;
    let ck = read_checkpoint(&ck_path)?;
    let model = ResolvedRun::from_value(&ck.state.config, &ck_path)?.model;
    let (parameters, n_out) = model.run(ExportJob { ck: &ck, out })?;
    Ok(Exported {
        checkpoint: ck_path,
        epoch: ck.state.epoch,
        family: model.name(),
        parameters,
        n_out,
    })
}

struct ExportJob<'a> {
    ck: &'a gnn4c_training::Checkpoint,
    out: &'a Path,
}

impl FamilyJob for ExportJob<'_> {
    type Output = anyhow::Result<(usize, usize)>;

    fn run<F: Registered>(self, config: &F::Config) -> Self::Output {
        let device = Default::default();
        let net = load_model::<F, burn::backend::Flex>(self.ck, config, &device)?;
        gnn4c_data::write_atomically(self.out, |tmp| {
            F::save_weights(&net, tmp).map_err(|e| gnn4c_data::DataError::Write {
                path: self.out.to_path_buf(),
                message: e.to_string(),
            })
        })?;
        Ok((burn::module::Module::num_params(&net), F::n_out(config)))
    }
}
