//! The Edge_Network as a `gnn4c_family::ModelFamily`: config, head, frozen backbone, weights.

use std::path::Path;

use burn::prelude::*;
use gnn4c_family::{InputWidths, ModelFamily, WeightsError};
use gnn4c_graphs::HostBatch;

use crate::model::{EdgeNetwork, EdgeNetworkConfig, is_head_parameter};

/// The ROOT-GNN family (`model: root_gnn`): the Edge_Network over an event's graph.
#[derive(Debug, Clone, Copy, Default)]
pub struct RootGnnFamily;

impl ModelFamily for RootGnnFamily {
    type Config = EdgeNetworkConfig;
    type Input = HostBatch;
    type Model<B: Backend> = EdgeNetwork<B>;

    fn config(n_out: usize) -> EdgeNetworkConfig {
        EdgeNetworkConfig::new(n_out)
    }

    fn n_out(config: &EdgeNetworkConfig) -> usize {
        config.n_out
    }

    fn with_inputs(config: &EdgeNetworkConfig, widths: InputWidths) -> EdgeNetworkConfig {
        EdgeNetworkConfig {
            d_node: widths.d_node,
            d_global: widths.d_global,
            d_edge: widths.d_pair,
            ..config.clone()
        }
    }

    fn inputs(config: &EdgeNetworkConfig) -> InputWidths {
        InputWidths {
            d_node: config.d_node,
            d_global: config.d_global,
            d_pair: config.d_edge,
        }
    }

    fn finetuned(
        pretrained: &EdgeNetworkConfig,
        run: &EdgeNetworkConfig,
        n_out: usize,
    ) -> EdgeNetworkConfig {
        EdgeNetworkConfig {
            n_out,
            dropout: run.dropout,
            ..pretrained.clone()
        }
    }

    fn init<B: Backend>(config: &EdgeNetworkConfig, device: &B::Device) -> EdgeNetwork<B> {
        config.init(device)
    }

    fn with_new_head<B: Backend>(
        model: EdgeNetwork<B>,
        n_out: usize,
        seed: u64,
        device: &B::Device,
    ) -> EdgeNetwork<B> {
        model.with_new_head(n_out, seed, device)
    }

    fn freeze_backbone<B: Backend>(model: EdgeNetwork<B>) -> EdgeNetwork<B> {
        model.freeze_backbone()
    }

    fn is_head_parameter(path: &str) -> bool {
        is_head_parameter(path)
    }

    fn save_weights<B: Backend>(model: &EdgeNetwork<B>, path: &Path) -> Result<(), WeightsError> {
        crate::weights::save_pytorch_safetensors(model, path)
    }

    fn load_weights<B: Backend>(
        model: &mut EdgeNetwork<B>,
        path: &Path,
    ) -> Result<(), WeightsError> {
        crate::weights::load_pytorch_safetensors(model, path)
    }
}
