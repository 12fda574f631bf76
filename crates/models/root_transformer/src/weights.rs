//! Weights in the PyTorch reference's state-dict layout (safetensors), through Burn's store.

use std::path::Path;

use burn::prelude::*;
use gnn4c_family::WeightsError;

use crate::RootTransformer;

const EMBEDS: &str = "(token_embed|global_embed)";
const NORMS: &str = r"(layers\.\d+\.norm[12]|norm)";

/// PyTorch names → ours, for embedding blocks of `embed_layers` linear layers.
fn pytorch_to_burn(embed_layers: usize) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = (0..embed_layers)
        .map(|k| {
            (
                format!(r"^{EMBEDS}\.{}\.(weight|bias)$", 3 * k),
                format!("$1.layers.{k}.$2"),
            )
        })
        .collect();
    let norm = 3 * embed_layers;
    v.extend([
        (
            format!(r"^{EMBEDS}\.{norm}\.weight$"),
            "$1.norm.gamma".to_owned(),
        ),
        (
            format!(r"^{EMBEDS}\.{norm}\.bias$"),
            "$1.norm.beta".to_owned(),
        ),
        (
            r"^pair_embed\.0\.(weight|bias)$".to_owned(),
            "pair_embed.hidden.$1".to_owned(),
        ),
        (
            r"^pair_embed\.2\.(weight|bias)$".to_owned(),
            "pair_embed.out.$1".to_owned(),
        ),
        (
            r"^layers\.(\d+)\.self_attn\.in_proj_(weight|bias)$".to_owned(),
            "layers.$1.self_attn.in_proj.$2".to_owned(),
        ),
        (format!(r"^{NORMS}\.weight$"), "$1.gamma".to_owned()),
        (format!(r"^{NORMS}\.bias$"), "$1.beta".to_owned()),
    ]);
    v
}

/// Our names → PyTorch's.
fn burn_to_pytorch(embed_layers: usize) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = (0..embed_layers)
        .map(|k| {
            (
                format!(r"^{EMBEDS}\.layers\.{k}\.(weight|bias)$"),
                format!("$1.{}.$2", 3 * k),
            )
        })
        .collect();
    let norm = 3 * embed_layers;
    v.extend([
        (
            format!(r"^{EMBEDS}\.norm\.(weight|gamma)$"),
            format!("$1.{norm}.weight"),
        ),
        (
            format!(r"^{EMBEDS}\.norm\.(bias|beta)$"),
            format!("$1.{norm}.bias"),
        ),
        (
            r"^pair_embed\.hidden\.(weight|bias)$".to_owned(),
            "pair_embed.0.$1".to_owned(),
        ),
        (
            r"^pair_embed\.out\.(weight|bias)$".to_owned(),
            "pair_embed.2.$1".to_owned(),
        ),
        (
            r"^layers\.(\d+)\.self_attn\.in_proj\.(weight|bias)$".to_owned(),
            "layers.$1.self_attn.in_proj_$2".to_owned(),
        ),
        (
            format!(r"^{NORMS}\.(weight|gamma)$"),
            "$1.weight".to_owned(),
        ),
        (format!(r"^{NORMS}\.(bias|beta)$"), "$1.bias".to_owned()),
    ]);
    v
}

/// Loads the reference's PyTorch state dict into `model`; every tensor must match.
pub fn load_pytorch_safetensors<B: Backend, K: Clone + Send + std::fmt::Debug>(
    model: &mut RootTransformer<B, K>,
    path: &Path,
) -> Result<(), WeightsError> {
    let patterns = pytorch_to_burn(model.token_embed.layers.len());
    gnn4c_family::load_pytorch_safetensors(model, path, patterns)
}

/// Saves `model` with the reference's PyTorch state-dict names (safetensors, metadata
/// `format: pt`), atomically.
pub fn save_pytorch_safetensors<B: Backend, K: Clone + Send + std::fmt::Debug>(
    model: &RootTransformer<B, K>,
    path: &Path,
) -> Result<(), WeightsError> {
    let patterns = burn_to_pytorch(model.token_embed.layers.len());
    gnn4c_family::save_pytorch_safetensors(model, path, patterns)
}
