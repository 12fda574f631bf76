//! The CPU backend (burn-flex): its tensors' storage handed to the project's kernels.

mod grad;

use burn::backend::Flex;
use burn::tensor::{DType, TensorData};
use burn_flex::FlexTensor;
use gnn4c_kernels::{
    Attention, Encoder, EncoderLayer, FeedForward, MatRef, PairMlp, RowNorm, Then,
    attention_backward, attention_forward, encoder_forward, encoder_layer_saving, feed_forward,
    feed_forward_backward, layer_norm, layer_norm_backward, linear_backward, linear_forward,
    pair_mlp_backward, pair_mlp_forward,
};

use super::{
    LayerParams, LayerSaved, LinearParams, NormParams, PairInputs, TransformerBackend,
    TransformerGradBackend,
};

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

/// An optional tensor made contiguous f32: `None` if it is not f32, `Some(None)` if absent.
fn optional_f32s(t: Option<FlexTensor>) -> Option<Option<FlexTensor>> {
    match t {
        Some(t) => f32s(&t).map(Some),
        None => Some(None),
    }
}

/// A linear layer's weight and bias made contiguous f32, or `None`.
fn linear_f32s(p: LinearParams<Flex>) -> Option<(FlexTensor, Option<FlexTensor>)> {
    Some((f32s(&p.0)?, optional_f32s(p.1)?))
}

/// Whether an optional vector is absent or `w` wide.
fn has_width(t: &Option<FlexTensor>, w: usize) -> bool {
    t.as_ref().is_none_or(|t| shape(t) == [w])
}

/// A 2-D f32 tensor as a strided view of its storage (no copy), or `None` for another shape.
fn matrix(t: &FlexTensor) -> Option<MatRef<'_>> {
    let layout = t.layout();
    let (shape, strides) = (layout.shape(), layout.strides());
    if shape.num_dims() != 2 {
        return None;
    }
    MatRef::new(
        t.storage::<f32>(),
        layout.start_offset(),
        [shape[0], shape[1]],
        [strides[0], strides[1]],
    )
}

/// What a linear layer keeps: its input and weight (views of their storage), the GELU's input
/// where there is one, and the LayerNorm before it where it runs as one kernel with it (`x`
/// then the LayerNorm's input, contiguous; its output is not kept).
#[derive(Debug, Clone)]
pub struct LinearSaved {
    x: FlexTensor,
    weight: FlexTensor,
    pre: Option<FlexTensor>,
    d_out: usize,
    norm: Option<(FlexTensor, Option<FlexTensor>, f32)>,
}

impl LinearSaved {
    fn row_norm(&self) -> Option<RowNorm<'_>> {
        self.norm.as_ref().map(|(gamma, beta, epsilon)| RowNorm {
            gamma: values(gamma),
            beta: beta.as_ref().map(values),
            epsilon: *epsilon,
        })
    }
}

/// What attention keeps: its inputs and the probabilities (none in inference).
#[derive(Debug, Clone)]
pub struct AttentionSaved {
    qkv: FlexTensor,
    pair_bias: Option<FlexTensor>,
    lens: Vec<usize>,
    heads: usize,
    first_only: bool,
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
            first_only: self.first_only,
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

/// The feed-forward half's inputs made contiguous f32 (checked against each other), and what
/// its forward kept for the backward (`GELU(z)` and `GELU′(z)`, `[2, n, f]`).
#[derive(Debug, Clone)]
pub struct FeedForwardSaved {
    x: FlexTensor,
    norm: (FlexTensor, Option<FlexTensor>, f32),
    first: (FlexTensor, Option<FlexTensor>),
    second: (FlexTensor, Option<FlexTensor>),
    kept: Option<FlexTensor>,
}

impl FeedForwardSaved {
    /// The inputs, or `None` for tensors the kernel does not take.
    fn of(
        x: &FlexTensor,
        norm: NormParams<Flex>,
        first: LinearParams<Flex>,
        second: LinearParams<Flex>,
    ) -> Option<Self> {
        let (gamma, beta, epsilon) = norm;
        let saved = FeedForwardSaved {
            x: f32s(x)?,
            norm: (f32s(&gamma)?, optional_f32s(beta)?, epsilon as f32),
            first: linear_f32s(first)?,
            second: linear_f32s(second)?,
            kept: None,
        };
        let [n, d] = shape(&saved.x)[..] else {
            return None;
        };
        let [d1, f] = shape(&saved.first.0)[..] else {
            return None;
        };
        let fits = n > 0
            && d > 0
            && d1 == d
            && shape(&saved.second.0) == [f, d]
            && shape(&saved.norm.0) == [d]
            && has_width(&saved.norm.1, d)
            && has_width(&saved.first.1, f)
            && has_width(&saved.second.1, d);
        fits.then_some(saved)
    }

    fn view(&self) -> FeedForward<'_> {
        let [d, f] = shape(&self.first.0)[..] else {
            unreachable!("checked 2-D")
        };
        FeedForward {
            x: values(&self.x),
            norm: RowNorm {
                gamma: values(&self.norm.0),
                beta: self.norm.1.as_ref().map(values),
                epsilon: self.norm.2,
            },
            w1: MatRef::row_major(values(&self.first.0), d, f),
            b1: self.first.1.as_ref().map(values),
            w2: MatRef::row_major(values(&self.second.0), f, d),
            b2: self.second.1.as_ref().map(values),
        }
    }
}

/// The feed-forward half's output and its inputs, with what the backward needs (`GELU(z)` and
/// `GELU′(z)`) when `for_backward`, or `None`.
fn feed_forward_run(
    x: &FlexTensor,
    norm: NormParams<Flex>,
    first: LinearParams<Flex>,
    second: LinearParams<Flex>,
    for_backward: bool,
) -> Option<(FlexTensor, FeedForwardSaved)> {
    let _span = tracing::trace_span!("feed_forward").entered();
    let mut saved = FeedForwardSaved::of(x, norm, first, second)?;
    let (y, kept) = feed_forward(&saved.view(), for_backward);
    let [n, d] = shape(&saved.x)[..] else {
        unreachable!("checked 2-D")
    };
    let f = shape(&saved.first.0)[1];
    saved.kept = kept.map(|kept| tensor(kept, &[2, n, f]));
    Some((tensor(y, &[n, d]), saved))
}

/// A LayerNorm's γ, β and ε made contiguous f32 (`d` wide), or `None`.
type NormF32s = (FlexTensor, Option<FlexTensor>, f32);

/// A LayerNorm's parameters made contiguous f32, if they are `d` wide.
fn norm_f32s((gamma, beta, epsilon): NormParams<Flex>, d: usize) -> Option<NormF32s> {
    let norm = (f32s(&gamma)?, optional_f32s(beta)?, epsilon as f32);
    (shape(&norm.0) == [d] && has_width(&norm.1, d)).then_some(norm)
}

/// A linear layer's weight and bias made contiguous f32, if the weight is `[d_in, d_out]`.
fn linear_of_shape(
    p: LinearParams<Flex>,
    d_in: usize,
    d_out: usize,
) -> Option<(FlexTensor, Option<FlexTensor>)> {
    let (w, b) = linear_f32s(p)?;
    (shape(&w) == [d_in, d_out] && has_width(&b, d_out)).then_some((w, b))
}

/// One encoder layer's parameters made contiguous f32 and checked against the width `d`.
struct LayerF32s {
    norm1: NormF32s,
    qkv: (FlexTensor, Option<FlexTensor>),
    out: (FlexTensor, Option<FlexTensor>),
    norm2: NormF32s,
    first: (FlexTensor, Option<FlexTensor>),
    second: (FlexTensor, Option<FlexTensor>),
}

impl LayerF32s {
    /// The parameters, or `None` for tensors the kernel does not take.
    fn of(p: LayerParams<Flex>, d: usize) -> Option<Self> {
        let f = shape(&p.first.0).get(1).copied()?;
        Some(LayerF32s {
            norm1: norm_f32s(p.norm1, d)?,
            qkv: linear_of_shape(p.qkv, d, 3 * d)?,
            out: linear_of_shape(p.out, d, d)?,
            norm2: norm_f32s(p.norm2, d)?,
            first: linear_of_shape(p.first, d, f)?,
            second: linear_of_shape(p.second, f, d)?,
        })
    }

    fn view(&self) -> EncoderLayer<'_> {
        fn norm((gamma, beta, epsilon): &NormF32s) -> RowNorm<'_> {
            RowNorm {
                gamma: values(gamma),
                beta: beta.as_ref().map(values),
                epsilon: *epsilon,
            }
        }
        fn weight(w: &FlexTensor) -> MatRef<'_> {
            let [rows, cols] = shape(w)[..] else {
                unreachable!("checked 2-D")
            };
            MatRef::row_major(values(w), rows, cols)
        }
        EncoderLayer {
            norm1: norm(&self.norm1),
            qkv: weight(&self.qkv.0),
            qkv_bias: self.qkv.1.as_ref().map(values),
            out: weight(&self.out.0),
            out_bias: self.out.1.as_ref().map(values),
            norm2: norm(&self.norm2),
            w1: weight(&self.first.0),
            b1: self.first.1.as_ref().map(values),
            w2: weight(&self.second.0),
            b2: self.second.1.as_ref().map(values),
        }
    }
}

/// An encoder's input and pair bias made contiguous f32, checked against the sequences and the
/// heads, with `[rows, d]`; or `None`.
fn encoder_inputs(
    x: &FlexTensor,
    pair_bias: Option<FlexTensor>,
    lens: &[usize],
    heads: usize,
) -> Option<(FlexTensor, Option<FlexTensor>, [usize; 2])> {
    let x = f32s(x)?;
    let [rows, d] = shape(&x)[..] else {
        return None;
    };
    let pairs: usize = lens.iter().map(|&s| s.saturating_sub(1).pow(2)).sum();
    let fits = heads > 0
        && d.is_multiple_of(heads)
        && lens.iter().all(|&s| s > 0)
        && lens.iter().sum::<usize>() == rows;
    let pair_bias = optional_f32s(pair_bias)?;
    let bias_fits = pair_bias
        .as_ref()
        .is_none_or(|b| shape(b) == [pairs, heads]);
    (fits && bias_fits).then_some((x, pair_bias, [rows, d]))
}

/// The pair-bias MLP's inputs made contiguous f32 (checked against each other).
#[derive(Debug, Clone)]
pub struct PairMlpSaved {
    x: FlexTensor,
    mask: FlexTensor,
    first: (FlexTensor, Option<FlexTensor>),
    second: (FlexTensor, Option<FlexTensor>),
}

impl PairMlpSaved {
    /// The inputs, or `None` for tensors the kernel does not take.
    fn of(
        inputs: PairInputs<Flex>,
        first: LinearParams<Flex>,
        second: LinearParams<Flex>,
    ) -> Option<Self> {
        let (x, mask) = inputs;
        let saved = PairMlpSaved {
            x: f32s(&x)?,
            mask: f32s(&mask)?,
            first: linear_f32s(first)?,
            second: linear_f32s(second)?,
        };
        let [n, d_in] = shape(&saved.x)[..] else {
            return None;
        };
        let [d1, h] = shape(&saved.first.0)[..] else {
            return None;
        };
        let [h2, d_out] = shape(&saved.second.0)[..] else {
            return None;
        };
        let fits = d_in > 0
            && d1 == d_in
            && h2 == h
            && shape(&saved.mask) == [n, 1]
            && has_width(&saved.first.1, h)
            && has_width(&saved.second.1, d_out);
        fits.then_some(saved)
    }

    fn view(&self) -> PairMlp<'_> {
        let [d_in, h] = shape(&self.first.0)[..] else {
            unreachable!("checked 2-D")
        };
        let d_out = shape(&self.second.0)[1];
        PairMlp {
            x: values(&self.x),
            w1: MatRef::row_major(values(&self.first.0), d_in, h),
            b1: self.first.1.as_ref().map(values),
            w2: MatRef::row_major(values(&self.second.0), h, d_out),
            b2: self.second.1.as_ref().map(values),
            mask: values(&self.mask),
        }
    }

    /// The output, `[pairs, d_out]`.
    fn forward(&self) -> FlexTensor {
        let _span = tracing::trace_span!("pair_mlp").entered();
        let y = pair_mlp_forward(&self.view());
        let (n, d_out) = (shape(&self.x)[0], shape(&self.second.0)[1]);
        tensor(y, &[n, d_out])
    }
}

/// A linear layer's gradients `[dx, dγ, dβ, dW, db]` from what its forward kept (dx where asked
/// or through a LayerNorm; dγ, dβ with a LayerNorm).
fn linear_gradients(
    saved: &LinearSaved,
    grad: &FlexTensor,
    want_x: bool,
) -> [Option<FlexTensor>; 5] {
    let _span = match saved.norm {
        Some(_) => tracing::trace_span!("norm_linear_backward"),
        None => tracing::trace_span!("linear_backward"),
    }
    .entered();
    let grad = grad.to_contiguous();
    let xm = matrix(&saved.x).expect("checked in the forward");
    let wm = matrix(&saved.weight).expect("checked in the forward");
    let pre = saved.pre.as_ref().map(values);
    let g = linear_backward(xm, saved.row_norm(), wm, values(&grad), pre, want_x);
    let d_in = xm.cols();
    let (dgamma, dbeta) = match g.norm {
        Some((dg, db)) => (Some(tensor(dg, &[d_in])), Some(tensor(db, &[d_in]))),
        None => (None, None),
    };
    [
        g.x.map(|v| tensor(v, &[xm.rows(), d_in])),
        dgamma,
        dbeta,
        Some(tensor(g.weight, &[wm.rows(), wm.cols()])),
        Some(tensor(g.bias, &[saved.d_out])),
    ]
}

/// Attention's output and its inputs, with the probabilities when `for_backward`, or `None`
/// for tensors the kernels do not take.
fn attention(
    qkv: &FlexTensor,
    pair_bias: Option<&FlexTensor>,
    lens: &[usize],
    heads: usize,
    first_only: bool,
    for_backward: bool,
) -> Option<(FlexTensor, AttentionSaved)> {
    let _span = tracing::trace_span!("attention").entered();
    let (qkv, pair_bias) = attention_inputs(qkv, pair_bias, lens, heads)?;
    let mut saved = AttentionSaved {
        qkv,
        pair_bias,
        lens: lens.to_vec(),
        heads,
        first_only,
        probs: Vec::new(),
    };
    let (out, probs) = attention_forward(&saved.view(), for_backward);
    saved.probs = probs.unwrap_or_default();
    // `[Σ s, d]`, or one row per sequence with `first_only`.
    let [all_rows, d3] = shape(&saved.qkv)[..] else {
        unreachable!("checked 2-D")
    };
    let rows = if first_only { lens.len() } else { all_rows };
    Some((tensor(out, &[rows, d3 / 3]), saved))
}

/// The linear layer's output and, `for_backward`, what its backward needs (the GELU's input
/// kept), or `None` for tensors the kernels do not take.
fn linear(
    x: &FlexTensor,
    weight: &FlexTensor,
    bias: Option<&FlexTensor>,
    residual: Option<&FlexTensor>,
    gelu: bool,
    for_backward: bool,
) -> Option<(FlexTensor, LinearSaved)> {
    let _span = tracing::trace_span!("linear").entered();
    let is_f32 = |t: &FlexTensor| t.dtype() == DType::F32;
    if !is_f32(x) || !is_f32(weight) || (gelu && residual.is_some()) {
        return None;
    }
    let (xm, wm) = (matrix(x)?, matrix(weight)?);
    let (n, d_out) = (xm.rows(), wm.cols());
    if xm.cols() != wm.rows() {
        return None;
    }
    let bias = match bias {
        Some(b) if b.layout().num_elements() == d_out => Some(f32s(b)?),
        Some(_) => return None,
        None => None,
    };
    let residual = match residual {
        Some(r) if shape(r) == [n, d_out] => Some(f32s(r)?),
        Some(_) => return None,
        None => None,
    };
    let then = match (&residual, gelu) {
        (Some(r), _) => Then::Residual(values(r)),
        (None, true) => Then::Gelu {
            keep_input: for_backward,
        },
        (None, false) => Then::Nothing,
    };
    let (y, pre) = linear_forward(xm, None, wm, bias.as_ref().map(values), then);
    let saved = LinearSaved {
        x: x.clone(),
        weight: weight.clone(),
        pre: pre.map(|p| tensor(p, &[n, d_out])),
        d_out,
        norm: None,
    };
    Some((tensor(y, &[n, d_out]), saved))
}

/// `LayerNorm(x) · weight + bias` (then the GELU) as one kernel: the output and, `for_backward`,
/// what the backward needs (the GELU's input kept; the normalised rows not), or `None` for
/// tensors the kernels do not take.
fn norm_linear(
    x: &FlexTensor,
    norm: NormParams<Flex>,
    weight: &FlexTensor,
    bias: Option<&FlexTensor>,
    gelu: bool,
    for_backward: bool,
) -> Option<(FlexTensor, LinearSaved)> {
    let _span = tracing::trace_span!("norm_linear").entered();
    let (gamma, beta, epsilon) = norm;
    let (x, gamma, beta) = norm_inputs(x, &gamma, beta.as_ref())?;
    let wm = matrix(weight)?;
    let [n, d_in] = shape(&x)[..] else {
        return None;
    };
    let d_out = wm.cols();
    let fits = d_in == wm.rows()
        && weight.dtype() == DType::F32
        && shape(&gamma) == [d_in]
        && beta.as_ref().is_none_or(|b| shape(b) == [d_in]);
    let bias = match bias {
        Some(b) if fits && b.layout().num_elements() == d_out => Some(f32s(b)?),
        Some(_) => return None,
        None => None,
    };
    if !fits {
        return None;
    }
    let then = if gelu {
        Then::Gelu {
            keep_input: for_backward,
        }
    } else {
        Then::Nothing
    };
    let mut saved = LinearSaved {
        x,
        weight: weight.clone(),
        pre: None,
        d_out,
        norm: Some((gamma, beta, epsilon as f32)),
    };
    let xm = MatRef::row_major(values(&saved.x), n, d_in);
    let (y, pre) = linear_forward(xm, saved.row_norm(), wm, bias.as_ref().map(values), then);
    saved.pre = pre.map(|p| tensor(p, &[n, d_out]));
    Some((tensor(y, &[n, d_out]), saved))
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

    fn fused_linear(
        x: FlexTensor,
        weight: FlexTensor,
        bias: Option<FlexTensor>,
        residual: Option<FlexTensor>,
        gelu: bool,
    ) -> Option<FlexTensor> {
        linear(&x, &weight, bias.as_ref(), residual.as_ref(), gelu, false).map(|(y, _)| y)
    }

    fn packed_attention(
        qkv: FlexTensor,
        pair_bias: Option<FlexTensor>,
        lens: &[usize],
        heads: usize,
        first_only: bool,
    ) -> Option<FlexTensor> {
        attention(&qkv, pair_bias.as_ref(), lens, heads, first_only, false).map(|(y, _)| y)
    }

    fn fused_pair_mlp(
        inputs: PairInputs<Flex>,
        first: LinearParams<Flex>,
        second: LinearParams<Flex>,
    ) -> Option<FlexTensor> {
        PairMlpSaved::of(inputs, first, second).map(|saved| saved.forward())
    }

    fn fused_feed_forward(
        x: FlexTensor,
        norm: NormParams<Flex>,
        first: LinearParams<Flex>,
        second: LinearParams<Flex>,
    ) -> Option<FlexTensor> {
        feed_forward_run(&x, norm, first, second, false).map(|(y, _)| y)
    }

    fn fused_encoder(
        x: FlexTensor,
        layers: Vec<LayerParams<Flex>>,
        pair_bias: Option<FlexTensor>,
        lens: &[usize],
        heads: usize,
    ) -> Option<FlexTensor> {
        let _span = tracing::trace_span!("encoder").entered();
        let (x, pair_bias, [rows, d]) = encoder_inputs(&x, pair_bias, lens, heads)?;
        if layers.is_empty() {
            return None;
        }
        let layers: Vec<LayerF32s> = layers
            .into_iter()
            .map(|p| LayerF32s::of(p, d))
            .collect::<Option<_>>()?;
        let views: Vec<EncoderLayer<'_>> = layers.iter().map(LayerF32s::view).collect();
        let y = encoder_forward(&Encoder {
            x: values(&x),
            pair_bias: pair_bias.as_ref().map(values),
            lens,
            heads,
            layers: &views,
        });
        Some(tensor(y, &[rows, d]))
    }

    fn fused_norm_linear(
        x: FlexTensor,
        norm: NormParams<Flex>,
        weight: FlexTensor,
        bias: Option<FlexTensor>,
        gelu: bool,
    ) -> Option<FlexTensor> {
        norm_linear(&x, norm, &weight, bias.as_ref(), gelu, false).map(|(y, _)| y)
    }
}
