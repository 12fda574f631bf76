//! Keeping ranks in step: rank 0's initial weights everywhere, and one flattened-gradient all-reduce per step.

use std::collections::HashMap;

use burn::module::{AutodiffModule, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use gnn4c_distributed::World;

fn to_f32<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("f32 tensor data")
}

/// Every float parameter's values, flattened in visiting order.
struct Flatten {
    values: Vec<f32>,
}

impl<B: Backend> ModuleVisitor<B> for Flatten {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.values.extend(to_f32(param.val()));
    }
}

/// Writes flattened values back, in the same visiting order, keeping each parameter's
/// `require_grad` (frozen parameters stay frozen).
struct Unflatten<'a> {
    values: &'a [f32],
    offset: usize,
}

impl<B: Backend> ModuleMapper<B> for Unflatten<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let shape = tensor.shape();
        let n = shape.num_elements();
        let device = tensor.device();
        let require_grad = tensor.is_require_grad();
        let chunk = self.values[self.offset..self.offset + n].to_vec();
        self.offset += n;
        let mut fresh = Tensor::<B, D>::from_data(TensorData::new(chunk, shape), &device);
        if require_grad {
            fresh = fresh.require_grad();
        }
        Param::from_mapped_value(id, fresh, mapper)
    }
}

/// Rank 0's parameter values on every rank (a no-op in a single process).
pub(crate) fn broadcast_parameters<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: M,
    world: &World,
) -> M {
    if !world.is_distributed() {
        return model;
    }
    let mut flat = Flatten { values: Vec::new() };
    model.visit(&mut flat);
    let mut values = flat.values;
    world.broadcast_f32(&mut values);
    model.map(&mut Unflatten {
        values: &values,
        offset: 0,
    })
}

/// Takes each parameter's gradient out of `grads`, scaled, into one flat buffer.
struct TakeGrads<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    scale: f32,
    buffer: Vec<f32>,
    layout: HashMap<ParamId, (usize, Vec<usize>)>,
    _b: std::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for TakeGrads<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(g) = self.grads.remove::<B::InnerBackend, D>(param.id) {
            let dims = g.dims().to_vec();
            let offset = self.buffer.len();
            self.buffer
                .extend(to_f32(g).into_iter().map(|x| x * self.scale));
            self.layout.insert(param.id, (offset, dims));
        }
    }
}

/// Puts reduced gradients back into `grads`.
struct PutGrads<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    buffer: &'a [f32],
    layout: &'a HashMap<ParamId, (usize, Vec<usize>)>,
    device: &'a B::Device,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for PutGrads<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some((offset, dims)) = self.layout.get(&param.id) {
            let n: usize = dims.iter().product();
            let values = self.buffer[*offset..*offset + n].to_vec();
            let t = Tensor::<B::InnerBackend, D>::from_data(
                TensorData::new(values, dims.clone()),
                self.device,
            );
            self.grads.register::<B::InnerBackend, D>(param.id, t);
        }
    }
}

/// The gradient of the global batch on every rank, from each rank's gradient of its own
/// share (a no-op in a single process).
///
/// Each rank's loss is normalised by its own Σ|w| (`abs_weight`); the global batch's loss is
/// Σ_r Σ_i wᵢℓᵢ / Σ_r Σ|w|. So each rank's gradient is scaled by its Σ|w|, the scaled gradients
/// and the Σ|w| travel in one flattened f32 all-reduce (sum), and the sum is divided by the
/// total Σ|w|: exactly the single-process gradient of the union batch, up to summation order.
/// Padding rows have weight 0 and add nothing.
pub(crate) fn all_reduce_gradients<B: AutodiffBackend, M: AutodiffModule<B>>(
    model: &M,
    mut grads: GradientsParams,
    abs_weight: f64,
    world: &World,
    device: &B::Device,
) -> GradientsParams {
    if !world.is_distributed() {
        return grads;
    }
    let mut take = TakeGrads::<B> {
        grads: &mut grads,
        scale: abs_weight as f32,
        buffer: Vec::new(),
        layout: HashMap::new(),
        _b: std::marker::PhantomData,
    };
    model.visit(&mut take);
    let TakeGrads {
        mut buffer, layout, ..
    } = take;
    buffer.push(abs_weight as f32);
    world.all_reduce_sum_f32(&mut buffer);
    let total = buffer.pop().unwrap_or(0.0);
    let inv = if total > 0.0 { 1.0 / total } else { 0.0 };
    for x in &mut buffer {
        *x *= inv;
    }
    model.visit(&mut PutGrads::<B> {
        grads: &mut grads,
        buffer: &buffer,
        layout: &layout,
        device,
    });
    grads
}
