//! The PFN as a model family: `gnn4c_family::ModelFamily` (config, batches, head, frozen
//! backbone, weights, ONNX) and `gnn4c_family::Kernels` (Burn's operations on every backend).

use std::path::Path;

use burn::backend::{Autodiff, Flex};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;
use gnn4c_family::{
    ArrayValues, Batch, EventInputs, InputWidths, Kernels, ModelFamily, NamedArray, SourceError,
    WeightsError, batch_of,
};

use crate::batch::PfnBatch;
use crate::model::{Pfn, PfnConfig, is_head_parameter};

/// The Particle Flow Network family (`model: pfn`): a sum over an event's objects.
#[derive(Debug, Clone, Copy, Default)]
pub struct PfnFamily;

impl ModelFamily for PfnFamily {
    type Config = PfnConfig;
    type Input = PfnBatch;
    type Model<B: Backend> = Pfn<B>;

    fn config(n_out: usize) -> PfnConfig {
        PfnConfig::new(n_out)
    }

    fn n_out(config: &PfnConfig) -> usize {
        config.n_out
    }

    fn with_inputs(config: &PfnConfig, widths: InputWidths) -> PfnConfig {
        PfnConfig {
            d_node: widths.d_node,
            d_global: widths.d_global,
            ..config.clone()
        }
    }

    fn inputs(config: &PfnConfig) -> InputWidths {
        InputWidths {
            d_node: config.d_node,
            d_global: config.d_global,
            d_pair: 0,
        }
    }

    fn batch(config: &PfnConfig, events: Vec<EventInputs>) -> Result<Batch<PfnBatch>, SourceError> {
        let input = PfnBatch::collate(
            events.iter().map(|e| (&e.objects[..], &e.globals[..])),
            config.d_node,
            config.d_global,
        );
        batch_of(input, &events)
    }

    fn finetuned(pretrained: &PfnConfig, run: &PfnConfig, n_out: usize) -> PfnConfig {
        PfnConfig {
            n_out,
            dropout: run.dropout,
            ..pretrained.clone()
        }
    }

    fn init<B: Backend>(config: &PfnConfig, device: &B::Device) -> Pfn<B> {
        config.init(device)
    }

    fn with_new_head<B: Backend>(
        model: Pfn<B>,
        n_out: usize,
        seed: u64,
        device: &B::Device,
    ) -> Pfn<B> {
        model.with_new_head(n_out, seed, device)
    }

    fn freeze_backbone<B: Backend>(model: Pfn<B>) -> Pfn<B> {
        model.freeze_backbone()
    }

    fn is_head_parameter(path: &str) -> bool {
        is_head_parameter(path)
    }

    fn save_weights<B: Backend>(model: &Pfn<B>, path: &Path) -> Result<(), WeightsError> {
        crate::weights::save_pytorch_safetensors(model, path)
    }

    fn load_weights<B: Backend>(model: &mut Pfn<B>, path: &Path) -> Result<(), WeightsError> {
        crate::weights::load_pytorch_safetensors(model, path)
    }

    fn to_onnx<B: Backend>(
        config: &PfnConfig,
        model: &Pfn<B>,
        metadata: Vec<(String, String)>,
    ) -> Vec<u8> {
        let graph = model.onnx_graph(config.d_node, config.d_global);
        graph.to_model(&gnn4c_onnx::ModelInfo {
            name: "pfn".into(),
            doc: "The Particle Flow Network (gnn4colliders): a per-object network summed over an \
                  event's objects, then a network on the sum and the globals; logits per event"
                .into(),
            metadata,
        })
    }

    fn onnx_inputs(_: &PfnConfig, b: &PfnBatch) -> Vec<NamedArray> {
        vec![
            NamedArray {
                name: "objects",
                shape: vec![b.n_objects(), b.d_node],
                values: ArrayValues::F32(b.objects.clone()),
            },
            NamedArray {
                name: "object_event",
                shape: vec![b.n_objects()],
                values: ArrayValues::I64(b.object_event.clone()),
            },
            NamedArray {
                name: "globals",
                shape: vec![b.n_events, b.d_global],
                values: ArrayValues::F32(b.globals.clone()),
            },
        ]
    }
}

/// Burn's operations on every backend, burn-flex included.
impl Kernels<Flex> for PfnFamily {
    type CpuTrained = Pfn<Autodiff<Flex>>;
    type CpuScoring = Pfn<Flex>;
    type Trained<B: AutodiffBackend> = Pfn<B>;
    type Scoring<B: Backend> = Pfn<B>;

    fn cpu_trained(model: Pfn<Autodiff<Flex>>) -> Pfn<Autodiff<Flex>> {
        model
    }

    fn cpu_scoring(model: Pfn<Flex>) -> Pfn<Flex> {
        model
    }

    fn trained<B: AutodiffBackend>(model: Pfn<B>) -> Pfn<B> {
        model
    }

    fn scoring<B: Backend>(model: Pfn<B>) -> Pfn<B> {
        model
    }
}
