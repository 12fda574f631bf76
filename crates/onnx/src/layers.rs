//! Burn's layers as graph nodes: their weights read from the module (any backend) into
//! initializers.

use burn::nn::{LayerNorm, Linear};
use burn::prelude::*;

use crate::{Graph, Value};

/// A tensor's values as f32.
fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec()
        .expect("f32 values after a conversion")
}

impl Graph {
    /// Burn's `Linear` (`x · W + b`, `W [d_in, d_out]`) on the last dimension of `x`; `hint`
    /// names its initializers (the PyTorch state dict's prefix).
    pub fn burn_linear<B: Backend>(&mut self, x: &Value, layer: &Linear<B>, hint: &str) -> Value {
        let [d_in, _] = layer.weight.dims();
        let w = values(layer.weight.val());
        let b = layer.bias.as_ref().map(|b| values(b.val()));
        self.linear(x, &w, d_in, b.as_deref(), hint)
    }

    /// Burn's `LayerNorm` parameters with the centred variance ([`Graph::layer_norm`]).
    pub fn burn_layer_norm<B: Backend>(
        &mut self,
        x: &Value,
        norm: &LayerNorm<B>,
        epsilon: f64,
        hint: &str,
    ) -> Value {
        let gamma = values(norm.gamma.val());
        let beta = norm.beta.as_ref().map(|b| values(b.val()));
        self.layer_norm(x, &gamma, beta.as_deref(), epsilon as f32, hint)
    }

    /// `[Linear → ReLU] × L → LayerNorm`, the block both families build their encoders from
    /// (dropout is the identity in inference). PyTorch `Sequential` names under `hint`: linear
    /// `k` at `3k`, the LayerNorm at `3L`.
    pub fn relu_block<B: Backend>(
        &mut self,
        x: &Value,
        layers: &[Linear<B>],
        norm: &LayerNorm<B>,
        epsilon: f64,
        hint: &str,
    ) -> Value {
        let mut x = x.clone();
        for (k, layer) in layers.iter().enumerate() {
            let y = self.burn_linear(&x, layer, &format!("{hint}.{}", 3 * k));
            x = self.relu(&y);
        }
        self.burn_layer_norm(&x, norm, epsilon, &format!("{hint}.{}", 3 * layers.len()))
    }
}
