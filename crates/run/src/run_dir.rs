//! The run folder: which files a run writes there, and when an existing run may be continued or
//! replaced.
//!
//! `config.json` (the [`ResolvedRun`]), `last.ckpt`, `best.ckpt`, `history.jsonl`,
//! `tensorboard/` (event files; a resumed run adds one), and once
//! training ends `best.safetensors` (PyTorch state-dict names), `metrics.json` and the training
//! plots; `predictions/<dataset>_<split>/` and `evaluation/<dataset>_<split>/` hold what
//! `predict` and `evaluate` write.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use gnn4c_family::write_atomic;
use gnn4c_training::{Checkpoint, RunFiles, read_checkpoint};

use crate::settings::ResolvedRun;

/// How a training step treats a run folder that already holds a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Start {
    /// Refuse a folder that holds a run.
    #[default]
    New,
    /// Start again, replacing its checkpoints, history and results.
    Overwrite,
    /// Continue from its `last.ckpt`.
    Resume,
}

/// A run folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// The run folder at `path` (nothing is read or created).
    pub fn new(path: impl Into<PathBuf>) -> RunDir {
        RunDir { path: path.into() }
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `config.json`: the resolved run.
    pub fn config(&self) -> PathBuf {
        self.path.join("config.json")
    }

    /// The checkpoints and history the trainer writes.
    pub fn files(&self) -> RunFiles {
        RunFiles {
            last: self.path.join("last.ckpt"),
            best: self.path.join("best.ckpt"),
            history: self.path.join("history.jsonl"),
        }
    }

    /// `best.safetensors`: the best model's weights with PyTorch names.
    pub fn weights(&self) -> PathBuf {
        self.path.join("best.safetensors")
    }

    /// `tensorboard/`: the run's TensorBoard event files.
    pub fn tensorboard(&self) -> PathBuf {
        self.path.join("tensorboard")
    }

    /// `metrics.json`: the best model on validation and test.
    pub fn metrics(&self) -> PathBuf {
        self.path.join("metrics.json")
    }

    /// A checkpoint by name: `best`, `last`, or a path.
    pub fn checkpoint(&self, which: &str) -> PathBuf {
        match which {
            "best" | "last" => self.path.join(format!("{which}.ckpt")),
            other => PathBuf::from(other),
        }
    }

    /// Where `predict` (or `evaluate`) writes its outputs for `dataset`'s `split`.
    pub fn scores(&self, evaluate: bool, dataset: &str, split: &str) -> PathBuf {
        self.path
            .join(if evaluate {
                "evaluation"
            } else {
                "predictions"
            })
            .join(format!("{dataset}_{split}"))
    }

    /// The resolved run of `config.json`.
    pub fn read_config(&self) -> anyhow::Result<ResolvedRun> {
        let path = self.config();
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "{} is not a run folder (no config.json)",
                self.path.display()
            )
        })?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        ResolvedRun::from_value(&v, &path)
    }

    /// The checkpoint to continue from under `start`: `last.ckpt` for [`Start::Resume`] (an
    /// error naming the folder when there is none), else `None`; a folder that holds a run is
    /// refused under [`Start::New`].
    pub fn checkpoint_to_resume(&self, start: Start) -> anyhow::Result<Option<Checkpoint>> {
        let last = self.files().last;
        match start {
            Start::Resume => Ok(Some(read_checkpoint(&last).with_context(|| {
                format!(
                    "--resume: no checkpoint to resume in {} (start the run without --resume)",
                    self.path.display()
                )
            })?)),
            Start::New if last.exists() => bail!(
                "run folder {} already holds a run: pass --resume to continue it or --overwrite to start again",
                self.path.display()
            ),
            Start::New | Start::Overwrite => Ok(None),
        }
    }

    /// Creates the folder for a run starting under `start` and writes its `config.json`; on
    /// [`Start::Overwrite`] the previous run's best checkpoint and history go first.
    pub fn prepare(&self, start: Start, resolved: &ResolvedRun) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.path)
            .with_context(|| format!("creating run folder {}", self.path.display()))?;
        if start == Start::Overwrite {
            let files = self.files();
            for f in [&files.best, &files.history] {
                let _ = std::fs::remove_file(f);
            }
            let _ = std::fs::remove_dir_all(self.tensorboard());
        }
        write_atomic(
            &self.config(),
            serde_json::to_string_pretty(resolved)?.as_bytes(),
        )
        .with_context(|| format!("writing {}", self.config().display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_holding_a_run_is_refused_unless_resumed_or_overwritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = RunDir::new(dir.path().join("r"));
        assert!(
            run.checkpoint_to_resume(Start::New)
                .expect("empty")
                .is_none()
        );
        let e = run.checkpoint_to_resume(Start::Resume).unwrap_err();
        assert!(
            format!("{e:#}").contains("no checkpoint to resume"),
            "{e:#}"
        );
        std::fs::create_dir_all(run.path()).unwrap();
        std::fs::write(run.files().last, b"x").unwrap();
        let e = run.checkpoint_to_resume(Start::New).unwrap_err();
        assert!(e.to_string().contains("already holds a run"), "{e}");
        assert!(
            run.checkpoint_to_resume(Start::Overwrite)
                .expect("allowed")
                .is_none()
        );
        assert_eq!(run.checkpoint("best"), run.path().join("best.ckpt"));
        assert_eq!(run.checkpoint("x/y.ckpt"), PathBuf::from("x/y.ckpt"));
        assert_eq!(
            run.scores(true, "demo", "test"),
            run.path().join("evaluation/demo_test")
        );
    }
}
