//! The Edge_Network's MLP blocks run as one fused kernel each on the CPU backend (burn-flex), for
//! inference.
//!
//! Run operation by operation, an MLP block (`[Linear → ReLU] × 4 → LayerNorm` over every edge)
//! makes a full pass over memory per operation; burn-flex's `ops::fused::mlp_forward` (a
//! vendored patch) takes blocks of rows through the whole chain while they are in cache.
//! [`FusedMlp`] is the [`MlpKernel`] that calls it, with the same function as
//! [`gnn4c_root_gnn::OpByOp`] (same operations, same order; checked in `tests/it`), and
//! [`FusedEdgeNetwork`] the inference model (a `Classifier`) that uses it. Forward only: training
//! keeps Burn's operations, which autodiff differentiates.
//!
//! The one model-side crate that names a backend: only `cli` and `benchmarks` depend on it, and
//! they choose when to use it. Knows no files. Start at [`FusedMlp`].

use burn::backend::Flex;
use burn::module::Module;
use burn::prelude::*;
use burn::tensor::TensorPrimitive;
use burn_flex::ops::fused::{MlpLayer, MlpTerm, mlp_forward};
use burn_flex::{FlexDevice, FlexTensor};
use gnn4c_graphs::HostBatch;
use gnn4c_root_gnn::{ConcatPart, EdgeNetwork, LAYER_NORM_EPSILON, Mlp, MlpKernel};
use gnn4c_training::Classifier;

/// Runs each MLP block as one burn-flex kernel (see the crate docs). Falls back to Burn's
/// operations for tensors the kernel does not take (other than f32).
#[derive(Debug, Clone, Copy, Default)]
pub struct FusedMlp;

fn float<const D: usize>(t: Tensor<Flex, D>) -> FlexTensor {
    t.into_primitive().tensor()
}

/// An input of the block's first layer, as the kernel takes it.
enum Input {
    /// `x · W_rows`, computed in the kernel's row blocks.
    Product(FlexTensor, FlexTensor),
    /// Rows of `y`, gathered by an index or taken in order.
    Rows(FlexTensor, Option<FlexTensor>),
}

/// The block over `inputs` (the first layer's terms, in order), or `None` when the kernel does
/// not take these tensors.
fn fused(mlp: &Mlp<Flex>, inputs: &[Input]) -> Option<Tensor<Flex, 2>> {
    let first_bias = mlp.layers[0].bias.as_ref().map(|b| float(b.val()));
    let rest: Vec<(FlexTensor, Option<FlexTensor>)> = mlp.layers[1..]
        .iter()
        .map(|l| {
            (
                float(l.weight.val()),
                l.bias.as_ref().map(|b| float(b.val())),
            )
        })
        .collect();
    let gamma = float(mlp.norm.gamma.val());
    let beta = mlp.norm.beta.as_ref().map(|b| float(b.val()));
    let terms: Vec<MlpTerm<'_>> = inputs
        .iter()
        .map(|i| match i {
            Input::Product(x, weight) => MlpTerm::Product { x, weight },
            Input::Rows(y, index) => MlpTerm::Rows {
                y,
                index: index.as_ref(),
            },
        })
        .collect();
    let layers: Vec<MlpLayer<'_>> = rest
        .iter()
        .map(|(weight, bias)| MlpLayer {
            weight,
            bias: bias.as_ref(),
        })
        .collect();
    let out = mlp_forward(
        &terms,
        first_bias.as_ref(),
        &layers,
        &gamma,
        beta.as_ref(),
        LAYER_NORM_EPSILON,
    )?;
    Some(Tensor::from_primitive(TensorPrimitive::Float(out)))
}

impl MlpKernel<Flex> for FusedMlp {
    fn forward(&self, mlp: &Mlp<Flex>, x: Tensor<Flex, 2>) -> Tensor<Flex, 2> {
        let inputs = [Input::Product(
            float(x.clone()),
            float(mlp.layers[0].weight.val()),
        )];
        fused(mlp, &inputs).unwrap_or_else(|| mlp.forward(x)) // [n, d_out]
    }

    fn forward_concat(&self, mlp: &Mlp<Flex>, parts: Vec<ConcatPart<Flex>>) -> Tensor<Flex, 2> {
        let mut offset = 0;
        let inputs: Vec<Input> = parts
            .iter()
            .map(|(x, index)| {
                let [_, d_k] = x.dims();
                let w = mlp.first_weight_rows(offset..offset + d_k); // [d_k, d_first]
                offset += d_k;
                match index {
                    // Gathered parts: the product on the (fewer) source rows, as OpByOp does.
                    Some(i) => {
                        Input::Rows(float(x.clone().matmul(w)), Some(i.clone().into_primitive()))
                    }
                    None => Input::Product(float(x.clone()), float(w)),
                }
            })
            .collect();
        fused(mlp, &inputs).unwrap_or_else(|| mlp.forward_concat(parts)) // [n, d_out]
    }
}

/// The Edge_Network for inference on the CPU backend: [`EdgeNetwork::forward_with`] and
/// [`FusedMlp`]. The same logits as the model itself (`tests/it`).
#[derive(Module, Debug)]
pub struct FusedEdgeNetwork<B: Backend> {
    /// The network.
    pub model: EdgeNetwork<B>,
}

impl Classifier<Flex> for FusedEdgeNetwork<Flex> {
    type Input = HostBatch;

    /// Copies the batch to `device` and runs the network with fused MLP blocks.
    fn logits(&self, input: &HostBatch, device: &FlexDevice) -> Tensor<Flex, 2> {
        let batch = input.to_device::<Flex>(device);
        self.model.forward_with(&batch, &FusedMlp) // [n_graphs, n_out]
    }
}
