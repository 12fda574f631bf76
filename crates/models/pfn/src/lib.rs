//! The Particle Flow Network family (`model: pfn`; Komiske, Metodiev, Thaler, "Energy Flow
//! Networks: Deep Sets for Particle Jets", JHEP 01 (2019) 121): a per-object network Φ, a sum over
//! the event's objects, and a network F on the sum and the event's global features. The
//! permutation-invariant baseline physicists compare graph and transformer classifiers with.
//!
//! Owns the model ([`Pfn`], [`PfnConfig`]), its batch of every event's objects without padding
//! ([`PfnBatch`]), its registration as a family ([`PfnFamily`]: `gnn4c_family::ModelFamily` and
//! `Kernels`), PyTorch-named weights and the ONNX graph. Reads no pair features. Burn's
//! operations on every backend (its MLPs are small GEMMs Burn runs well). Start at `model.rs`.

mod batch;
mod family;
mod model;
mod onnx;
mod weights;

pub use batch::PfnBatch;
pub use family::PfnFamily;
pub use model::{HEAD_WEIGHT, Pfn, PfnConfig, is_head_parameter};
pub use weights::{load_pytorch_safetensors, save_pytorch_safetensors};
