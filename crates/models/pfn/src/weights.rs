//! Weights in the PyTorch reference's state-dict layout (safetensors), through Burn's store: the
//! names are the same (`phi.0.weight`, …), Linear weights transposed.

use std::path::Path;

use burn::prelude::*;
use gnn4c_family::WeightsError;

use crate::Pfn;

/// Loads a PyTorch state dict into `model`; every tensor must match.
pub fn load_pytorch_safetensors<B: Backend>(
    model: &mut Pfn<B>,
    path: &Path,
) -> Result<(), WeightsError> {
    gnn4c_family::load_pytorch_safetensors(model, path, Vec::new())
}

/// Saves `model` as a PyTorch state dict (safetensors), written atomically.
pub fn save_pytorch_safetensors<B: Backend>(
    model: &Pfn<B>,
    path: &Path,
) -> Result<(), WeightsError> {
    gnn4c_family::save_pytorch_safetensors(model, path, Vec::new())
}
