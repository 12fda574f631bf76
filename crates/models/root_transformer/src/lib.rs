//! The ROOT-Transformer model family: a transformer over an event's selected objects, the same
//! 7 node features the Edge_Network reads, with a class token from the globals and an optional
//! pairwise attention bias from the objects' (Δη, Δφ, ΔR) (docs/root-transformer.md).
//!
//! Implements `gnn4c_family::Classifier` for [`TokenBatch`] inputs; PyTorch state-dict weights in
//! and out ([`load_pytorch_safetensors`], [`save_pytorch_safetensors`]); the ONNX graph; its
//! blocks as one kernel each on the CPU backend (`cpu/`: [`FusedTransformer`]); the family's
//! registration ([`RootTransformerFamily`]). Start at `model.rs`.

mod batch;
mod cpu;
mod family;
mod model;
mod onnx;
mod weights;

pub use batch::{FlatGraphs, TokenBatch, TokenEvent};
pub use cpu::{
    FusedTransformer, LayerParams, LayerSaved, LinearParams, NormParams, PairInputs,
    TransformerBackend, TransformerGradBackend,
};
pub use family::RootTransformerFamily;
pub use model::{
    EmbedBlock, EncoderLayer, HEAD_WEIGHT, LAYER_NORM_EPSILON, OpByOp, PairEmbed, RootTransformer,
    RootTransformerConfig, SelfAttention, Sequences, TransformerKernel, feed_forward_in_steps,
    is_head_parameter, layers_one_at_a_time, norm_then_linear,
};
pub use weights::{load_pytorch_safetensors, save_pytorch_safetensors};
