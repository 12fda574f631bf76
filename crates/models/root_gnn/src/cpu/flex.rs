//! The CPU backend (burn-flex): its tensors' storage handed to the project's kernels.

use burn::backend::Flex;
use burn::tensor::{DType, TensorData};
use burn_flex::FlexTensor;
use gnn4c_kernels::{
    Index, MatRef, MlpBlock, MlpLayer, MlpTerm, mlp_backward, mlp_forward, mlp_forward_saving,
};

use super::{BlockGrads, BlockTensors, MlpBlockBackend, MlpBlockGradBackend, TermTensors};

/// A 2-D f32 tensor as a strided view of its storage (no copy).
fn matrix(t: &FlexTensor) -> MatRef<'_> {
    let layout = t.layout();
    let (shape, strides) = (layout.shape(), layout.strides());
    assert_eq!(shape.num_dims(), 2, "MLP block: a matrix operand is 2-D");
    MatRef::new(
        t.storage::<f32>(),
        layout.start_offset(),
        [shape[0], shape[1]],
        [strides[0], strides[1]],
    )
    .expect("a tensor's layout lies inside its storage")
}

/// A contiguous f32 tensor's values (no copy).
fn values(t: &FlexTensor) -> &[f32] {
    t.as_slice().expect("made contiguous")
}

/// A contiguous i32 or i64 index's values.
fn index_values(t: &FlexTensor) -> Index<'_> {
    match t.dtype() {
        DType::I32 => Index::I32(t.as_slice().expect("made contiguous")),
        _ => Index::I64(t.as_slice().expect("made contiguous")),
    }
}

/// A row-major f32 tensor of `shape` over `v` (no copy).
fn tensor(v: Vec<f32>, shape: &[usize]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(v, shape.to_vec()))
}

/// `t`'s dimensions.
fn shape(t: &FlexTensor) -> Vec<usize> {
    t.layout().shape().to_vec()
}

/// The block with every vector, gathered-rows input and index made contiguous, or `None` when
/// a tensor is not f32 (indices: i32 or i64), which the kernels do not take.
fn prepared(block: &BlockTensors<Flex>) -> Option<BlockTensors<Flex>> {
    let f32s = |t: &FlexTensor| t.dtype() == DType::F32;
    let floats_ok = block.terms.iter().all(|t| match t {
        TermTensors::Product { x, weight } => f32s(x) && f32s(weight),
        TermTensors::Rows { y, index } => {
            f32s(y)
                && index
                    .as_ref()
                    .is_none_or(|i| matches!(i.dtype(), DType::I32 | DType::I64))
        }
    }) && block.first_bias.as_ref().is_none_or(f32s)
        && block
            .layers
            .iter()
            .all(|(w, b)| f32s(w) && b.as_ref().is_none_or(f32s))
        && f32s(&block.gamma)
        && block.beta.as_ref().is_none_or(f32s);
    if !floats_ok || block.terms.is_empty() {
        return None;
    }
    let terms = block
        .terms
        .iter()
        .map(|t| match t {
            TermTensors::Rows { y, index } => TermTensors::Rows {
                y: y.to_contiguous(),
                index: index.as_ref().map(FlexTensor::to_contiguous),
            },
            product => product.clone(),
        })
        .collect();
    Some(BlockTensors {
        terms,
        first_bias: block.first_bias.as_ref().map(FlexTensor::to_contiguous),
        layers: block
            .layers
            .iter()
            .map(|(w, b)| (w.clone(), b.as_ref().map(FlexTensor::to_contiguous)))
            .collect(),
        gamma: block.gamma.to_contiguous(),
        beta: block.beta.as_ref().map(FlexTensor::to_contiguous),
        epsilon: block.epsilon,
    })
}

/// The kernels' view of a [`prepared`] block.
fn view(block: &BlockTensors<Flex>) -> MlpBlock<'_> {
    let terms = block
        .terms
        .iter()
        .map(|t| match t {
            TermTensors::Product { x, weight } => MlpTerm::Product {
                x: matrix(x),
                weight: matrix(weight),
            },
            TermTensors::Rows { y, index } => MlpTerm::Rows {
                y: values(y),
                index: index.as_ref().map(index_values),
            },
        })
        .collect();
    MlpBlock {
        terms,
        first_bias: block.first_bias.as_ref().map(values),
        layers: block
            .layers
            .iter()
            .map(|(w, b)| MlpLayer {
                weight: matrix(w),
                bias: b.as_ref().map(values),
            })
            .collect(),
        gamma: values(&block.gamma),
        beta: block.beta.as_ref().map(values),
        epsilon: block.epsilon as f32,
    }
}

/// The output's rows.
fn rows(block: &BlockTensors<Flex>) -> usize {
    match &block.terms[0] {
        TermTensors::Product { x, .. } => shape(x)[0],
        TermTensors::Rows { y, index } => index.as_ref().map_or(shape(y)[0], |i| shape(i)[0]),
    }
}

impl MlpBlockBackend for Flex {
    fn mlp_block(block: BlockTensors<Self>) -> Option<FlexTensor> {
        let block = prepared(&block)?;
        let out = mlp_forward(&view(&block));
        Some(tensor(
            out,
            &[rows(&block), block.gamma.layout().num_elements()],
        ))
    }
}

/// What the forward kept: the prepared block and every layer's output.
#[derive(Debug, Clone)]
pub struct FlexSaved {
    block: BlockTensors<Flex>,
    outputs: Vec<FlexTensor>,
}

impl MlpBlockGradBackend for Flex {
    type Saved = FlexSaved;

    fn mlp_block_saving(block: &BlockTensors<Self>) -> Option<(FlexTensor, FlexSaved)> {
        let block = prepared(block)?;
        let n = rows(&block);
        let (out, outputs) = mlp_forward_saving(&view(&block));
        let outputs = outputs
            .into_iter()
            .map(|v| {
                let d = v.len().checked_div(n).unwrap_or(0);
                tensor(v, &[n, d])
            })
            .collect();
        let out = tensor(out, &[n, block.gamma.layout().num_elements()]);
        Some((out, FlexSaved { block, outputs }))
    }

    fn mlp_block_backward(
        saved: &FlexSaved,
        grad: FlexTensor,
        want_inputs: &[bool],
    ) -> BlockGrads<Self> {
        let block = &saved.block;
        let outputs: Vec<&[f32]> = saved.outputs.iter().map(values).collect();
        let grad = grad.to_contiguous();
        let g = mlp_backward(&view(block), &outputs, values(&grad), want_inputs);
        let terms = block
            .terms
            .iter()
            .zip(g.terms)
            .map(|(t, (d_input, d_weight))| match t {
                TermTensors::Product { x, weight } => (
                    d_input.map(|v| tensor(v, &shape(x))),
                    d_weight.map(|v| tensor(v, &shape(weight))),
                ),
                TermTensors::Rows { y, .. } => (d_input.map(|v| tensor(v, &shape(y))), None),
            })
            .collect();
        let layers = block
            .layers
            .iter()
            .zip(g.layers)
            .map(|((w, _), (dw, db))| {
                let d = db.len();
                (tensor(dw, &shape(w)), tensor(db, &[d]))
            })
            .collect();
        let vector = |v: Vec<f32>| {
            let d = v.len();
            tensor(v, &[d])
        };
        BlockGrads {
            terms,
            first_bias: vector(g.first_bias),
            layers,
            gamma: vector(g.gamma),
            beta: vector(g.beta),
        }
    }
}
