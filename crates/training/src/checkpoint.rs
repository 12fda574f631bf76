//! Checkpoints (contract §9): one self-checking file holding everything a resume needs.
//!
//! Layout: `GNN4CCKP`, format version (u32 LE), then three length-prefixed (u64 LE) parts, the
//! JSON [`CheckpointState`], the model record and the optimiser record (Burn's binary recorder,
//! full precision, so f32 values round-trip bit for bit), then the SHA-256 of everything before
//! it. Written to a temporary file in the same folder, synced, then renamed over the target.
//! Identical runs write byte-identical checkpoints: parameters are numbered in visiting order
//! ([`number_params`]) and the optimiser record is written sorted by parameter id.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::prelude::*;
use burn::record::{BinBytesRecorder, FullPrecisionSettings, PrecisionSettings, Record, Recorder};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::TrainingError;
use crate::schedule::{EarlyStopping, ExponentialLr};

const MAGIC: &[u8; 8] = b"GNN4CCKP";
/// Version of the checkpoint file layout.
pub const CHECKPOINT_FORMAT: u32 = 1;

/// A parameter's path in the module tree and its shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamShape {
    /// Dotted path, Burn's field names (`edge_update.layers.0.weight`).
    pub name: String,
    /// Dimensions.
    pub shape: Vec<usize>,
}

/// Everything in a checkpoint but the tensors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointState {
    /// Contract version the run follows.
    pub contract_version: String,
    /// Program and version that wrote it.
    pub written_by: String,
    /// Epochs completed; a resume starts at this (0-based) epoch.
    pub epoch: u64,
    /// Optimiser steps taken.
    pub global_step: u64,
    /// Learning-rate schedule (the lr of an epoch is computed from the epoch alone).
    pub schedule: ExponentialLr,
    /// Early-stopping state: best validation loss, its epoch, the counter.
    pub early_stopping: EarlyStopping,
    /// RNG state: the run seed. Shuffling and dropout of epoch e are seeded from (seed, e), so
    /// the seed and `epoch` are the whole generator state at an epoch boundary.
    pub seed: u64,
    /// True when early stopping ended the run: resuming it trains nothing more.
    pub stopped: bool,
    /// The resolved configuration of the run.
    pub config: serde_json::Value,
    /// Fingerprint of the preprocessing that produced the training data.
    pub fingerprint: String,
    /// Every parameter of the model, in visiting order.
    pub parameters: Vec<ParamShape>,
    /// Set when written inside epoch `epoch` (`trainer.checkpoint_every_steps`): how far it got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<EpochPosition>,
}

/// Where a checkpoint written inside an epoch stands: the loader position and the epoch's sums
/// so far, so a resume continues the epoch as if never stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpochPosition {
    /// Batches of the epoch already trained (every rank the same number).
    pub batches: u64,
    /// Ranks that trained them: a resume needs as many.
    pub ranks: usize,
    /// Events in the training split: a resume needs the same split.
    pub split_events: u64,
    /// Per rank: the epoch's Σ loss_b·Σ|w|_b so far, as accumulated (f32).
    pub loss_sums: Vec<f32>,
    /// Per rank: Σ|w| so far.
    pub abs_sums: Vec<f64>,
    /// Per rank: events trained so far.
    pub events: Vec<u64>,
    /// Per rank: the outputs kept so far for the epoch's training metrics (`train_metrics`),
    /// so that a resumed epoch's metrics are the whole epoch's. Empty when none were kept yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<crate::Predictions>,
}

/// A checkpoint read from disk: its state and the encoded records.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// Where it was read from.
    pub path: PathBuf,
    /// The state.
    pub state: CheckpointState,
    model: Vec<u8>,
    optimizer: Vec<u8>,
}

struct Shapes {
    path: Vec<String>,
    out: Vec<ParamShape>,
}

impl<B: Backend> ModuleVisitor<B> for Shapes {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_owned());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        // Path components name the field holding the parameter; the last one is its own name.
        self.out.push(ParamShape {
            name: self.path.join("."),
            shape: param.val().dims().to_vec(),
        });
    }
}

/// The parameter paths and shapes of `model`.
pub fn param_shapes<B: Backend, M: Module<B>>(model: &M) -> Vec<ParamShape> {
    let mut v = Shapes {
        path: Vec::new(),
        out: Vec::new(),
    };
    model.visit(&mut v);
    v.out
}

/// Gives `model`'s parameters the ids 1, 2, … in visiting order.
///
/// Burn draws parameter ids at random, and they are written into the model and optimiser
/// records; numbered, the checkpoints of identical runs are byte-identical. A model loaded from
/// a checkpoint takes the checkpoint's ids.
pub fn number_params<B: Backend, M: Module<B>>(model: M) -> M {
    struct Numbering(u64);
    impl Numbering {
        fn next<T: burn::module::Parameter>(&mut self, param: Param<T>) -> Param<T> {
            self.0 += 1;
            let (_, value, mapper) = param.consume();
            Param::from_mapped_value(ParamId::from(self.0), value, mapper)
        }
    }
    impl<B: Backend> ModuleMapper<B> for Numbering {
        fn map_float<const D: usize>(&mut self, p: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
            self.next(p)
        }
        fn map_int<const D: usize>(
            &mut self,
            p: Param<Tensor<B, D, Int>>,
        ) -> Param<Tensor<B, D, Int>> {
            self.next(p)
        }
        fn map_bool<const D: usize>(
            &mut self,
            p: Param<Tensor<B, D, Bool>>,
        ) -> Param<Tensor<B, D, Bool>> {
            self.next(p)
        }
    }
    model.map(&mut Numbering(0))
}

/// An optimiser record sorted by (encoded) parameter id. Burn keeps it in a hash map, whose
/// order (and so its encoding) differs between processes; a map is encoded the same either way,
/// so the written record reads back as Burn's own type.
struct ById<T>(BTreeMap<ParamId, T>);

impl<B: Backend, T: Record<B>> Record<B> for ById<T> {
    type Item<S: PrecisionSettings> = BTreeMap<String, T::Item<S>>;

    fn into_item<S: PrecisionSettings>(self) -> Self::Item<S> {
        self.0
            .into_iter()
            .map(|(id, r)| (id.serialize(), r.into_item()))
            .collect()
    }

    fn from_item<S: PrecisionSettings>(item: Self::Item<S>, device: &B::Device) -> Self {
        ById(
            item.into_iter()
                .map(|(id, r)| (ParamId::deserialize(&id), T::from_item(r, device)))
                .collect(),
        )
    }
}

fn recorder() -> BinBytesRecorder<FullPrecisionSettings> {
    BinBytesRecorder::default()
}

fn corrupt(path: &Path, reason: impl Into<String>) -> TrainingError {
    TrainingError::Checkpoint {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Writes a checkpoint of `model` and `optimizer` (the optimiser's record: one entry per
/// parameter) atomically to `path`.
pub fn save_checkpoint<B, M, T>(
    path: &Path,
    state: &CheckpointState,
    model: &M,
    optimizer: impl IntoIterator<Item = (ParamId, T)>,
) -> Result<(), TrainingError>
where
    B: Backend,
    M: Module<B>,
    T: Record<B>,
{
    let optimizer = ById(optimizer.into_iter().collect());
    let io = |e: std::io::Error| TrainingError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let json = serde_json::to_vec(state).map_err(|e| corrupt(path, e.to_string()))?;
    let model_bytes = Recorder::<B>::record(&recorder(), model.clone().into_record(), ())
        .map_err(|e| corrupt(path, format!("encoding the model: {e}")))?;
    let optim_bytes = Recorder::<B>::record(&recorder(), optimizer, ())
        .map_err(|e| corrupt(path, format!("encoding the optimiser state: {e}")))?;
    let mut buf = Vec::with_capacity(json.len() + model_bytes.len() + optim_bytes.len() + 64);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&CHECKPOINT_FORMAT.to_le_bytes());
    for part in [&json, &model_bytes, &optim_bytes] {
        buf.extend_from_slice(&(part.len() as u64).to_le_bytes());
        buf.extend_from_slice(part);
    }
    let digest = Sha256::digest(&buf);
    buf.extend_from_slice(&digest);
    gnn4c_family::write_atomic(path, &buf).map_err(io)
}

/// Reads and verifies a checkpoint: magic, format, checksum, state. The tensors are decoded by
/// [`Checkpoint::load_model`] and [`Checkpoint::load_optimizer`].
pub fn read_checkpoint(path: &Path) -> Result<Checkpoint, TrainingError> {
    let bytes = std::fs::read(path).map_err(|e| TrainingError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    if bytes.len() < MAGIC.len() + 4 || &bytes[..8] != MAGIC {
        return Err(corrupt(path, "not a gnn4colliders checkpoint"));
    }
    let format = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if format != CHECKPOINT_FORMAT {
        return Err(corrupt(
            path,
            format!("checkpoint format {format}, this build reads format {CHECKPOINT_FORMAT}"),
        ));
    }
    if bytes.len() < 12 + 32 {
        return Err(corrupt(path, "truncated"));
    }
    let (body, digest) = bytes.split_at(bytes.len() - 32);
    if Sha256::digest(body).as_slice() != digest {
        return Err(corrupt(
            path,
            "checksum mismatch: the file is truncated or corrupted",
        ));
    }
    let mut parts = Vec::with_capacity(3);
    let mut at = 12usize;
    for _ in 0..3 {
        let len = body
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize)
            .ok_or_else(|| corrupt(path, "truncated"))?;
        let part = body
            .get(at + 8..at + 8 + len)
            .ok_or_else(|| corrupt(path, "truncated"))?;
        parts.push(part.to_vec());
        at += 8 + len;
    }
    let state: CheckpointState = serde_json::from_slice(&parts[0])
        .map_err(|e| corrupt(path, format!("unreadable state: {e}")))?;
    let optimizer = parts.pop().expect("three parts");
    let model = parts.pop().expect("three parts");
    Ok(Checkpoint {
        path: path.to_path_buf(),
        state,
        model,
        optimizer,
    })
}

impl Checkpoint {
    /// Checks the checkpoint's contract version and that its parameters have the shapes of
    /// `model`'s, naming the first differences.
    pub fn check_compatible<B: Backend, M: Module<B>>(
        &self,
        model: &M,
        contract_version: &str,
    ) -> Result<(), TrainingError> {
        if self.state.contract_version != contract_version {
            return Err(TrainingError::Incompatible {
                path: self.path.clone(),
                reason: format!(
                    "written under contract {}, this build follows contract {contract_version}",
                    self.state.contract_version
                ),
            });
        }
        let ours = param_shapes(model);
        let theirs = &self.state.parameters;
        if &ours == theirs {
            return Ok(());
        }
        let mut diffs = Vec::new();
        for p in theirs {
            match ours.iter().find(|q| q.name == p.name) {
                None => diffs.push(format!("{} {:?} is not in this model", p.name, p.shape)),
                Some(q) if q.shape != p.shape => diffs.push(format!(
                    "{}: checkpoint {:?}, model {:?}",
                    p.name, p.shape, q.shape
                )),
                Some(_) => {}
            }
        }
        for q in &ours {
            if !theirs.iter().any(|p| p.name == q.name) {
                diffs.push(format!("{} {:?} is not in the checkpoint", q.name, q.shape));
            }
        }
        let n = diffs.len();
        diffs.truncate(4);
        Err(TrainingError::Incompatible {
            path: self.path.clone(),
            reason: format!(
                "it holds another model shape ({n} parameter(s) differ: {}{})",
                diffs.join("; "),
                if n > 4 { "; …" } else { "" }
            ),
        })
    }

    /// Loads the model weights into `model` (whose shapes must match: see
    /// [`Checkpoint::check_compatible`]); `model`'s gradient settings are kept.
    pub fn load_model<B: Backend, M: Module<B>>(
        &self,
        model: M,
        device: &B::Device,
    ) -> Result<M, TrainingError> {
        let record = decode::<B, M::Record>(&self.model, device)
            .map_err(|r| corrupt(&self.path, format!("model record: {r}")))?;
        Ok(model.load_record(record))
    }

    /// Decodes the optimiser state.
    pub fn load_optimizer<B: Backend, R: Record<B>>(
        &self,
        device: &B::Device,
    ) -> Result<R, TrainingError> {
        decode::<B, R>(&self.optimizer, device)
            .map_err(|r| corrupt(&self.path, format!("optimiser record: {r}")))
    }
}

fn decode<B: Backend, R: Record<B>>(bytes: &[u8], device: &B::Device) -> Result<R, String> {
    // Burn's binary recorder unwraps decoding errors; the checksum makes that unlikely, and
    // the panic is caught here all the same.
    let bytes = bytes.to_vec();
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        Recorder::<B>::load::<R>(&recorder(), bytes, device)
    }))
    .map_err(|_| "undecodable".to_owned())?
    .map_err(|e| e.to_string())
}
