//! The Particle Flow Network (Komiske, Metodiev, Thaler, "Energy Flow Networks: Deep Sets for
//! Particle Jets", JHEP 01 (2019) 121; the `energyflow` package's `PFN`).
//!
//! Φ maps each object's features through `phi_sizes` (Linear → ReLU each); the event's latent
//! vector is the sum of Φ over its objects (a permutation-invariant, any-size readout); F maps the
//! latent vector concatenated with the event's global features through `f_sizes` (Linear → ReLU
//! → Dropout each), and `classify` gives the logits. Where ours differs from `energyflow`'s: the
//! event's global features join the latent sum (the contract's events carry them; `energyflow`
//! has none), and Φ's sum is plain (a PFN, not an EFN: no energy weighting). Parameter names are
//! the reference's (`benchmarks/reference/pfn.py`): `phi.k`, `f.k`, `classify`.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::prelude::*;
use burn::tensor::IndexingUpdateOp;
use burn::tensor::activation::relu;
use gnn4c_family::Classifier;

use crate::batch::PfnBatch;

/// The PFN's hyperparameters (defaults: `energyflow`'s PFN, Φ (100, 100, 128), F (100, 100, 100)).
#[derive(Config, Debug)]
pub struct PfnConfig {
    /// Outputs of `classify` (binary 1, K-class K).
    pub n_out: usize,
    /// Widths of Φ's layers; the last is the latent width.
    #[config(default = "vec![100, 100, 128]")]
    pub phi_sizes: Vec<usize>,
    /// Widths of F's layers.
    #[config(default = "vec![100, 100, 100]")]
    pub f_sizes: Vec<usize>,
    /// Dropout probability after each of F's layers.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Object feature width.
    #[config(default = 7)]
    pub d_node: usize,
    /// Global feature width.
    #[config(default = 2)]
    pub d_global: usize,
}

/// The PFN. Field names are the PyTorch reference's state dict.
#[derive(Module, Debug)]
pub struct Pfn<B: Backend> {
    /// Φ: per-object layers.
    pub phi: Vec<Linear<B>>,
    /// F: layers on the latent sum and the globals.
    pub f: Vec<Linear<B>>,
    /// The head; everything else is the backbone.
    pub classify: Linear<B>,
    /// Dropout after F's layers.
    pub dropout: Dropout,
}

/// The head's weight, by its checkpoint path.
pub const HEAD_WEIGHT: &str = "classify.weight";

/// Whether the parameter at checkpoint path `path` belongs to the head (what trains when the
/// backbone is frozen).
pub fn is_head_parameter(path: &str) -> bool {
    path.strip_prefix("classify")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

/// Linear layers through `widths`, starting from `d_in`.
fn layers<B: Backend>(d_in: usize, widths: &[usize], device: &B::Device) -> Vec<Linear<B>> {
    let mut d = d_in;
    widths
        .iter()
        .map(|&w| {
            let layer = LinearConfig::new(d, w).init(device);
            d = w;
            layer
        })
        .collect()
}

impl PfnConfig {
    /// A new model on `device` (PyTorch's `nn.Linear` initialisation). An empty `phi_sizes`
    /// sums the objects' features as they are; an empty `f_sizes` puts the head on the sum and
    /// the globals.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Pfn<B> {
        let latent = self.phi_sizes.last().copied().unwrap_or(self.d_node);
        let last = self
            .f_sizes
            .last()
            .copied()
            .unwrap_or(latent + self.d_global);
        Pfn {
            phi: layers(self.d_node, &self.phi_sizes, device),
            f: layers(latent + self.d_global, &self.f_sizes, device),
            classify: LinearConfig::new(last, self.n_out).init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
        }
    }
}

impl<B: Backend> Pfn<B> {
    /// Logits of every event of the batch.
    ///
    /// # Shapes
    /// `objects [n_objects, d_node]`, `object_event [n_objects]`, `globals [n_events, d_global]`
    /// → `[n_events, n_out]`.
    pub fn forward(
        &self,
        objects: Tensor<B, 2>,
        object_event: Tensor<B, 1, Int>,
        globals: Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        let [n_events, _] = globals.dims();
        let mut x = objects; // [n_objects, d_node]
        for layer in &self.phi {
            x = relu(layer.forward(x)); // [n_objects, phi_k]
        }
        let [_, d_latent] = x.dims();
        let latent = Tensor::zeros([n_events, d_latent], &x.device()).select_assign(
            0,
            object_event,
            x,
            IndexingUpdateOp::Add,
        ); // [n_events, d_latent]
        let mut x = Tensor::cat(vec![latent, globals], 1); // [n_events, d_latent + d_global]
        for layer in &self.f {
            x = self.dropout.forward(relu(layer.forward(x))); // [n_events, f_k]
        }
        self.classify.forward(x) // [n_events, n_out]
    }

    /// Outputs of the head.
    pub fn n_out(&self) -> usize {
        self.classify.weight.dims()[1]
    }

    /// This backbone with a new head of `n_out` outputs, initialised as PyTorch's `nn.Linear`
    /// from `seed`.
    pub fn with_new_head(self, n_out: usize, seed: u64, device: &B::Device) -> Self {
        let [d, _] = self.classify.weight.dims();
        let classify = gnn4c_family::seeded_linear(d, n_out, seed, device);
        Pfn { classify, ..self }
    }

    /// Marks every parameter but the head's as not requiring gradients (`frozen_backbone`
    /// fine-tuning).
    pub fn freeze_backbone(self) -> Self {
        Pfn {
            phi: self.phi.into_iter().map(Module::no_grad).collect(),
            f: self.f.into_iter().map(Module::no_grad).collect(),
            ..self
        }
    }
}

impl<B: Backend> Classifier<B> for Pfn<B> {
    type Input = PfnBatch;

    fn logits(&self, input: &PfnBatch, device: &B::Device) -> Tensor<B, 2> {
        let (objects, object_event, globals) = input.to_device::<B>(device);
        self.forward(objects, object_event, globals)
    }
}
