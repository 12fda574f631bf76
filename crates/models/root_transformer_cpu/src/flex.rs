//! The CPU backend (burn-flex): its tensors' storage handed to the project's kernels.

use burn::backend::Flex;
use burn::tensor::{DType, TensorData};
use burn_flex::FlexTensor;
use gnn4c_kernels::{
    Attention, attention_backward, attention_forward, bias_gelu, bias_gelu_backward, layer_norm,
    layer_norm_backward,
};

use crate::{TransformerBackend, TransformerGradBackend};

/// `t` made contiguous, if it is f32 (the kernels take nothing else).
fn f32s(t: &FlexTensor) -> Option<FlexTensor> {
    (t.dtype() == DType::F32).then(|| t.to_contiguous())
}

/// A contiguous f32 tensor's values (no copy).
fn values(t: &FlexTensor) -> &[f32] {
    t.as_slice().expect("made contiguous")
}

/// A row-major f32 tensor of `shape` over `v` (no copy).
fn tensor(v: Vec<f32>, shape: &[usize]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(v, shape.to_vec()))
}

/// `t`'s dimensions.
fn shape(t: &FlexTensor) -> Vec<usize> {
    t.layout().shape().to_vec()
}

/// What a LayerNorm keeps: its contiguous input, γ and ε.
#[derive(Debug, Clone)]
pub struct NormSaved {
    x: FlexTensor,
    gamma: FlexTensor,
    epsilon: f64,
}

/// The LayerNorm's inputs made contiguous f32, or `None`.
fn norm_inputs(
    x: &FlexTensor,
    gamma: &FlexTensor,
    beta: Option<&FlexTensor>,
) -> Option<(FlexTensor, FlexTensor, Option<FlexTensor>)> {
    let beta = match beta {
        Some(b) => Some(f32s(b)?),
        None => None,
    };
    Some((f32s(x)?, f32s(gamma)?, beta))
}

/// What a bias + GELU keeps: `x + b`.
#[derive(Debug, Clone)]
pub struct GeluSaved {
    pre: FlexTensor,
}

/// What attention keeps: its inputs and the probabilities.
#[derive(Debug, Clone)]
pub struct AttentionSaved {
    qkv: FlexTensor,
    pair_bias: Option<FlexTensor>,
    lens: Vec<usize>,
    heads: usize,
    probs: Vec<f32>,
}

impl AttentionSaved {
    fn view(&self) -> Attention<'_> {
        Attention {
            qkv: values(&self.qkv),
            pair_bias: self.pair_bias.as_ref().map(values),
            lens: &self.lens,
            d: shape(&self.qkv)[1] / 3,
            heads: self.heads,
        }
    }
}

/// Attention's inputs made contiguous f32 (and consistent with `lens`), or `None`.
fn attention_inputs(
    qkv: &FlexTensor,
    pair_bias: Option<&FlexTensor>,
    lens: &[usize],
    heads: usize,
) -> Option<(FlexTensor, Option<FlexTensor>)> {
    let [rows, d3] = shape(qkv)[..] else {
        return None;
    };
    let fits = d3 % 3 == 0
        && heads > 0
        && (d3 / 3).is_multiple_of(heads)
        && lens.iter().all(|&s| s > 0)
        && lens.iter().sum::<usize>() == rows;
    let pairs: usize = lens.iter().map(|&s| (s - 1) * (s - 1)).sum();
    let bias = match pair_bias {
        Some(b) if shape(b) == [pairs, heads] => Some(f32s(b)?),
        Some(_) => return None,
        None => None,
    };
    fits.then_some(())?;
    Some((f32s(qkv)?, bias))
}

impl TransformerBackend for Flex {
    fn row_layer_norm(
        x: FlexTensor,
        gamma: FlexTensor,
        beta: Option<FlexTensor>,
        epsilon: f64,
    ) -> Option<FlexTensor> {
        Self::layer_norm_saving(&x, &gamma, beta.as_ref(), epsilon).map(|(y, _)| y)
    }

    fn bias_gelu(x: FlexTensor, bias: FlexTensor) -> Option<FlexTensor> {
        Self::bias_gelu_saving(&x, &bias).map(|(y, _)| y)
    }

    fn packed_attention(
        qkv: FlexTensor,
        pair_bias: Option<FlexTensor>,
        lens: &[usize],
        heads: usize,
    ) -> Option<FlexTensor> {
        Self::attention_saving(&qkv, pair_bias.as_ref(), lens, heads).map(|(y, _)| y)
    }
}

impl TransformerGradBackend for Flex {
    type NormSaved = NormSaved;
    type GeluSaved = GeluSaved;
    type AttentionSaved = AttentionSaved;

    fn layer_norm_saving(
        x: &FlexTensor,
        gamma: &FlexTensor,
        beta: Option<&FlexTensor>,
        epsilon: f64,
    ) -> Option<(FlexTensor, NormSaved)> {
        let (x, gamma, beta) = norm_inputs(x, gamma, beta)?;
        let y = layer_norm(
            values(&x),
            values(&gamma),
            beta.as_ref().map(values),
            epsilon as f32,
        );
        let y = tensor(y, &shape(&x));
        Some((y, NormSaved { x, gamma, epsilon }))
    }

    fn layer_norm_backward(saved: &NormSaved, grad: FlexTensor) -> [FlexTensor; 3] {
        let grad = grad.to_contiguous();
        let (dx, dgamma, dbeta) = layer_norm_backward(
            values(&saved.x),
            values(&grad),
            values(&saved.gamma),
            saved.epsilon as f32,
        );
        let d = dgamma.len();
        [
            tensor(dx, &shape(&saved.x)),
            tensor(dgamma, &[d]),
            tensor(dbeta, &[d]),
        ]
    }

    fn bias_gelu_saving(x: &FlexTensor, bias: &FlexTensor) -> Option<(FlexTensor, GeluSaved)> {
        let (x, bias) = (f32s(x)?, f32s(bias)?);
        let dims = shape(&x);
        if dims.len() != 2 || dims[1] != bias.layout().num_elements() || dims[1] == 0 {
            return None;
        }
        let (y, pre) = bias_gelu(values(&x), values(&bias));
        Some((
            tensor(y, &dims),
            GeluSaved {
                pre: tensor(pre, &dims),
            },
        ))
    }

    fn bias_gelu_backward(saved: &GeluSaved, grad: FlexTensor) -> [FlexTensor; 2] {
        let grad = grad.to_contiguous();
        let dims = shape(&saved.pre);
        let (dx, db) = bias_gelu_backward(values(&saved.pre), values(&grad), dims[1]);
        [tensor(dx, &dims), tensor(db, &[dims[1]])]
    }

    fn attention_saving(
        qkv: &FlexTensor,
        pair_bias: Option<&FlexTensor>,
        lens: &[usize],
        heads: usize,
    ) -> Option<(FlexTensor, AttentionSaved)> {
        let (qkv, pair_bias) = attention_inputs(qkv, pair_bias, lens, heads)?;
        let mut saved = AttentionSaved {
            qkv,
            pair_bias,
            lens: lens.to_vec(),
            heads,
            probs: Vec::new(),
        };
        let (out, probs) = attention_forward(&saved.view());
        saved.probs = probs;
        let [rows, d3] = shape(&saved.qkv)[..] else {
            unreachable!("checked 2-D")
        };
        Some((tensor(out, &[rows, d3 / 3]), saved))
    }

    fn attention_backward(
        saved: &AttentionSaved,
        grad: FlexTensor,
    ) -> (FlexTensor, Option<FlexTensor>) {
        let grad = grad.to_contiguous();
        let (dqkv, dbias) = attention_backward(&saved.view(), &saved.probs, values(&grad));
        let dbias = dbias
            .zip(saved.pair_bias.as_ref())
            .map(|(v, b)| tensor(v, &shape(b)));
        (tensor(dqkv, &shape(&saved.qkv)), dbias)
    }
}
