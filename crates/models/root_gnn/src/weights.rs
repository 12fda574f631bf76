//! Weights in PyTorch state-dict layout (safetensors), through Burn's store.

use std::path::Path;

use burn::prelude::*;
use burn::store::{
    BurnToPyTorchAdapter, KeyRemapper, ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore,
};

use crate::EdgeNetwork;

/// Loading or saving weights failed.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// The file does not exist.
    #[error("weights file not found: {0}")]
    NotFound(std::path::PathBuf),
    /// The store reported an error (missing or mis-shaped tensors, unreadable file).
    #[error("{path}: {message}")]
    Store {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// PyTorch `Sequential` indices ↔ our field names, for an MLP of `n_layers` linear layers.
fn pytorch_to_burn(n_layers: usize) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = (0..n_layers)
        .map(|k| {
            (
                format!(r"^(\w+)\.{}\.(weight|bias)$", 3 * k),
                format!("$1.layers.{k}.$2"),
            )
        })
        .collect();
    let norm = 3 * n_layers;
    v.push((
        format!(r"^(\w+)\.{norm}\.weight$"),
        "$1.norm.gamma".to_owned(),
    ));
    v.push((format!(r"^(\w+)\.{norm}\.bias$"), "$1.norm.beta".to_owned()));
    v
}

fn burn_to_pytorch(n_layers: usize) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = (0..n_layers)
        .map(|k| {
            (
                format!(r"^(\w+)\.layers\.{k}\.(weight|bias)$"),
                format!("$1.{}.$2", 3 * k),
            )
        })
        .collect();
    let norm = 3 * n_layers;
    v.push((
        r"^(\w+)\.norm\.(weight|gamma)$".to_owned(),
        format!("$1.{norm}.weight"),
    ));
    v.push((
        r"^(\w+)\.norm\.(bias|beta)$".to_owned(),
        format!("$1.{norm}.bias"),
    ));
    v
}

fn n_layers<B: Backend, K>(model: &EdgeNetwork<B, K>) -> usize {
    model.node_encoder.layers.len()
}

/// Loads a PyTorch state dict (`node_encoder.0.weight`, …) into `model`; every tensor must match.
pub fn load_pytorch_safetensors<B: Backend, K: Clone + Send + std::fmt::Debug>(
    model: &mut EdgeNetwork<B, K>,
    path: &Path,
) -> Result<(), WeightsError> {
    if !path.is_file() {
        return Err(WeightsError::NotFound(path.to_owned()));
    }
    let err = |message: String| WeightsError::Store {
        path: path.to_owned(),
        message,
    };
    let remap = KeyRemapper::from_patterns(pytorch_to_burn(n_layers(model)))
        .map_err(|e| err(e.to_string()))?;
    let mut store = SafetensorsStore::from_file(path)
        .with_from_adapter(PyTorchToBurnAdapter)
        .remap(remap)
        .allow_partial(false)
        .validate(true);
    let result = model
        .load_from(&mut store)
        .map_err(|e| err(e.to_string()))?;
    if !result.missing.is_empty() || !result.unused.is_empty() || !result.errors.is_empty() {
        return Err(err(format!(
            "weights do not match this model: missing {:?}, unused {:?}, errors {:?}",
            result.missing, result.unused, result.errors
        )));
    }
    Ok(())
}

/// Saves `model` as a PyTorch state dict (safetensors), readable by `torch`/`safetensors` and the
/// legacy code; written atomically.
///
/// The header's metadata is the one entry `format: pt` (what `safetensors.torch.save_file` is
/// usually given): Burn's default metadata is a hash map of three entries, written in an order
/// that differs between processes, so the same weights would give different bytes.
pub fn save_pytorch_safetensors<B: Backend, K: Clone + Send + std::fmt::Debug>(
    model: &EdgeNetwork<B, K>,
    path: &Path,
) -> Result<(), WeightsError> {
    let err = |message: String| WeightsError::Store {
        path: path.to_owned(),
        message,
    };
    let remap = KeyRemapper::from_patterns(burn_to_pytorch(n_layers(model)))
        .map_err(|e| err(e.to_string()))?;
    let mut store = SafetensorsStore::from_bytes(None)
        .with_to_adapter(BurnToPyTorchAdapter)
        .remap(remap)
        .clear_metadata()
        .metadata("format", "pt");
    model
        .save_into(&mut store)
        .map_err(|e| err(e.to_string()))?;
    let bytes = store.get_bytes().map_err(|e| err(e.to_string()))?;
    gnn4c_family::write_atomic(path, &bytes).map_err(|e| err(e.to_string()))
}
