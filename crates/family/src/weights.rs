//! Weights in a PyTorch state-dict layout (safetensors), through Burn's store: the plumbing every
//! family shares; a family gives the name patterns between its fields and PyTorch's.

use std::path::Path;

use burn::module::Module;
use burn::prelude::*;
use burn::store::{
    BurnToPyTorchAdapter, KeyRemapper, ModuleSnapshot, PyTorchToBurnAdapter, SafetensorsStore,
};

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

/// Loads a PyTorch state dict into `model`, renaming keys with `pytorch_to_burn` (regex, then
/// replacement); every tensor must match.
pub fn load_pytorch_safetensors<B: Backend, M: Module<B>>(
    model: &mut M,
    path: &Path,
    pytorch_to_burn: Vec<(String, String)>,
) -> Result<(), WeightsError> {
    if !path.is_file() {
        return Err(WeightsError::NotFound(path.to_owned()));
    }
    let err = |message: String| WeightsError::Store {
        path: path.to_owned(),
        message,
    };
    let remap = KeyRemapper::from_patterns(pytorch_to_burn).map_err(|e| err(e.to_string()))?;
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

/// Saves `model` as a PyTorch state dict (safetensors) with keys renamed by `burn_to_pytorch`,
/// atomically.
///
/// The header's metadata is the one entry `format: pt` (what `safetensors.torch.save_file` is
/// usually given): Burn's default metadata is a hash map of three entries, written in an order
/// that differs between processes, so the same weights would give different bytes.
pub fn save_pytorch_safetensors<B: Backend, M: Module<B>>(
    model: &M,
    path: &Path,
    burn_to_pytorch: Vec<(String, String)>,
) -> Result<(), WeightsError> {
    let err = |message: String| WeightsError::Store {
        path: path.to_owned(),
        message,
    };
    let remap = KeyRemapper::from_patterns(burn_to_pytorch).map_err(|e| err(e.to_string()))?;
    let mut store = SafetensorsStore::from_bytes(None)
        .with_to_adapter(BurnToPyTorchAdapter)
        .remap(remap)
        .clear_metadata()
        .metadata("format", "pt");
    model
        .save_into(&mut store)
        .map_err(|e| err(e.to_string()))?;
    let bytes = store.get_bytes().map_err(|e| err(e.to_string()))?;
    crate::write_atomic(path, &bytes).map_err(|e| err(e.to_string()))
}
