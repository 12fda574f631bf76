//! The ROOT-GNN Edge_Network (arXiv:2412.10665; contract §5) as a Burn module generic over the
//! backend.
//!
//! Owns the MLP block ([`Mlp`]), the encoders, the T message-passing steps that share one set of
//! update blocks, the per-graph mean readouts, the global decoder and the `classify` head
//! ([`EdgeNetwork`], [`EdgeNetworkConfig`]), weight import/export with PyTorch state-dict names
//! ([`load_pytorch_safetensors`], [`save_pytorch_safetensors`]), the ONNX graph, the MLP blocks
//! as one kernel each on the CPU backend (`cpu/`: [`FusedMlp`]) and the family's registration
//! ([`RootGnnFamily`]: `gnn4c_family::ModelFamily` and `Kernels`, its batches built as graphs
//! from the cached events). Implements the trainer's `Classifier` trait (a host `HostBatch` in,
//! logits out), so training never names this type. Must not know files other than weights,
//! datasets or tasks. Start at `model.rs`.

mod cpu;
mod family;
mod model;
mod onnx;
mod weights;

pub use cpu::{
    BlockGrads, BlockTensors, FusedMlp, MlpBlockBackend, MlpBlockGradBackend, TermGradTensors,
    TermTensors,
};
pub use family::RootGnnFamily;
pub use model::{
    ConcatPart, EdgeNetwork, EdgeNetworkConfig, HEAD_WEIGHT, LAYER_NORM_EPSILON, Mlp, MlpConfig,
    MlpKernel, OpByOp, is_head_parameter,
};
pub use weights::{load_pytorch_safetensors, save_pytorch_safetensors};
