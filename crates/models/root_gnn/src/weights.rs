//! Weights in PyTorch state-dict layout (safetensors), through Burn's store.

use std::path::Path;

use burn::prelude::*;
use gnn4c_family::WeightsError;

use crate::EdgeNetwork;

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
    let patterns = pytorch_to_burn(n_layers(model));
    gnn4c_family::load_pytorch_safetensors(model, path, patterns)
}

/// Saves `model` as a PyTorch state dict (safetensors), readable by `torch`/`safetensors` and the
/// legacy code; written atomically, byte-identical for identical weights.
pub fn save_pytorch_safetensors<B: Backend, K: Clone + Send + std::fmt::Debug>(
    model: &EdgeNetwork<B, K>,
    path: &Path,
) -> Result<(), WeightsError> {
    let patterns = burn_to_pytorch(n_layers(model));
    gnn4c_family::save_pytorch_safetensors(model, path, patterns)
}
