//! The project's CPU kernels, over plain `f32` slices: the Edge_Network's MLP block
//! (`[Linear → ReLU] × L → LayerNorm`) forward, forward keeping every layer's output, and
//! backward; the ROOT-Transformer's linear layer (a LayerNorm before it, the bias and the
//! residual or the GELU after it), its feed-forward half, its pair-bias MLP and multi-head
//! attention over packed sequences, forward and backward, and its encoder layers over blocks of
//! whole sequences (a stack of them in inference, one layer's forward keeping what the backwards
//! need in training, each one parallel region); LayerNorm over rows (centred variance). Each runs in blocks of rows that stay in cache, with `gemm` for the products; the
//! backwards sum parameter gradients per fixed chunk of blocks (`chunks.rs`).
//!
//! Knows no tensor library: the Burn glue (backend extension traits for the CPU backend and for
//! autodiff) is the `cpu/` modules of `gnn4c-root-gnn` and `gnn4c-root-transformer`, which hand
//! these functions the tensors' storage. The only crate of the workspace with `unsafe` code (the
//! `gemm` calls, LayerNorm's vector loads, glibc's `mallopt` in [`tune_allocator`], outputs
//! filled by blocks of rows without a zero fill first, and the run-time choice of the CPU's
//! vector width), each block with a SAFETY comment; every public function is safe and checks
//! the shapes it is given. Values do not depend on the number of threads. Start at
//! [`mlp_forward`] and [`MlpBlock`], or [`linear_forward`] and [`attention_forward`].

// The one crate allowed `unsafe` (the workspace denies it); clippy asks each block for its
// SAFETY comment.
#![allow(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[macro_use]
mod dispatch;
mod act;
mod adam;
mod alloc;
mod attention;
mod chunks;
mod encoder;
mod ffn;
mod linear;
mod mat;
mod mlp;
mod norm;
mod pair;
mod rows;
#[cfg(test)]
mod test_values;

pub use adam::{AdamStep, adam_first_moments, adam_update};
pub use alloc::tune_allocator;
pub use attention::{Attention, attention_backward, attention_forward};
pub use encoder::{Encoder, EncoderLayer, LayerKept, encoder_forward, encoder_layer_saving};
pub use ffn::{FeedForward, FeedForwardGrads, feed_forward, feed_forward_backward};
pub use linear::{LinearGrads, RowNorm, Then, linear_backward, linear_forward};
pub use mat::{MatRef, row_blocks};
pub use mlp::{
    Index, MlpBlock, MlpGrads, MlpLayer, MlpTerm, TermGrads, mlp_backward, mlp_forward,
    mlp_forward_saving,
};
pub use norm::{layer_norm, layer_norm_backward};
pub use pair::{PairMlp, PairMlpGrads, pair_mlp_backward, pair_mlp_forward};
