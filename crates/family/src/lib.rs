//! What a model family implements: the family itself ([`ModelFamily`]: its config, how to build,
//! adapt, batch and save its model; [`Kernels`]: how it runs on the CPU backend and on the
//! others), and what the trainer asks of it, a model ([`Classifier`]) and a source of events
//! batched for it ([`EventSource`]). Traits, the batch they exchange and the cached event a
//! family reads ([`EventInputs`]), no concrete types, so a family's crate implements them without
//! depending on the trainer or the run layer, which lists the families and knows none of them.
//!
//! Also what families share below their models: PyTorch-named safetensors in and out
//! ([`load_pytorch_safetensors`], [`save_pytorch_safetensors`], given the family's name
//! patterns) and the atomic file write ([`write_atomic`]) that weight exports and the trainer's
//! run files use.
//!
//! Must depend on Burn (tensors, autodiff, and its store for safetensors) alone: no workspace
//! crate, no other file format, no backend (the CPU backend is [`Kernels`]'s parameter).

use std::io::Write;
use std::path::Path;

use burn::backend::Autodiff;
use burn::module::{AutodiffModule, Module};
use burn::prelude::*;
use burn::tensor::backend::AutodiffBackend;

mod weights;

pub use weights::{WeightsError, load_pytorch_safetensors, save_pytorch_safetensors};

/// A model the trainer can fit: logits from a batch prepared on the host.
///
/// The model owns the host-to-device step, so loader threads never touch tensors and the
/// trainer never names a batch layout.
pub trait Classifier<B: Backend>: Module<B> {
    /// A batch as prepared on loader threads.
    type Input: Send + 'static;

    /// The logits of every row of `input` (real events first, then any padding rows).
    ///
    /// # Shapes
    /// → `[n_rows, n_out]`.
    fn logits(&self, input: &Self::Input, device: &B::Device) -> Tensor<B, 2>;
}

/// The widths of a model's inputs, from the dataset's input declaration (the cache's features).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputWidths {
    /// Node (token) features.
    pub d_node: usize,
    /// Global features.
    pub d_global: usize,
    /// Pair (edge) features.
    pub d_pair: usize,
}

/// The config keys that hold input widths: set from the input declaration, never by a user.
pub const INPUT_WIDTH_KEYS: [&str; 4] = ["d_node", "d_global", "d_edge", "d_pair"];

/// A model family: everything the run layer needs to build, adapt, name and save its models
/// without knowing their types. Implemented by a unit type in the family's model crate.
pub trait ModelFamily: Send + Sync + 'static {
    /// The family's hyperparameters, the number of outputs among them: a Burn `Config`, so its
    /// defaults are written once, next to the model.
    type Config: burn::config::Config + Clone + std::fmt::Debug + Send + Sync;
    /// What a batch carries for the model.
    type Input: Send + 'static;
    /// The model on backend `B`.
    type Model<B: Backend>: Classifier<B, Input = Self::Input>;

    /// The default config for a head of `n_out` outputs.
    fn config(n_out: usize) -> Self::Config;

    /// The outputs of the head `config` describes.
    fn n_out(config: &Self::Config) -> usize;

    /// Why no model can be built from `config`, naming the `model.` setting, if none can (the
    /// run layer checks each config it resolves; [`ModelFamily::init`] may assume it passed).
    fn check(config: &Self::Config) -> Result<(), String> {
        let _ = config;
        Ok(())
    }

    /// `config` reading inputs of these widths.
    fn with_inputs(config: &Self::Config, widths: InputWidths) -> Self::Config;

    /// The input widths `config` reads (`d_pair` 0: the model reads no pair features, and
    /// [`EventInputs::pairs`] is left empty).
    fn inputs(config: &Self::Config) -> InputWidths;

    /// The batch of `events`, in that order, for a model of `config` (an error names what in the
    /// data is wrong). The caller has checked each event's widths against [`ModelFamily::inputs`].
    fn batch(
        config: &Self::Config,
        events: Vec<EventInputs>,
    ) -> Result<Batch<Self::Input>, SourceError>;

    /// `pretrained`'s backbone with `run`'s training-only settings (dropout) and a head of
    /// `n_out` outputs: the config of a fine-tuning run.
    fn finetuned(pretrained: &Self::Config, run: &Self::Config, n_out: usize) -> Self::Config;

    /// A new model (randomly initialised from the backend's seed).
    fn init<B: Backend>(config: &Self::Config, device: &B::Device) -> Self::Model<B>;

    /// `model` with a new head of `n_out` outputs, initialised as PyTorch's `nn.Linear` from
    /// `seed`; everything else kept.
    fn with_new_head<B: Backend>(
        model: Self::Model<B>,
        n_out: usize,
        seed: u64,
        device: &B::Device,
    ) -> Self::Model<B>;

    /// `model` with every parameter outside the head marked as not requiring gradients.
    fn freeze_backbone<B: Backend>(model: Self::Model<B>) -> Self::Model<B>;

    /// Whether the parameter at checkpoint path `path` belongs to the head.
    fn is_head_parameter(path: &str) -> bool;

    /// Writes `model`'s weights to `path` as safetensors with PyTorch state-dict names.
    fn save_weights<B: Backend>(model: &Self::Model<B>, path: &Path) -> Result<(), WeightsError>;

    /// Reads PyTorch-named safetensors weights from `path` into `model`.
    fn load_weights<B: Backend>(
        model: &mut Self::Model<B>,
        path: &Path,
    ) -> Result<(), WeightsError>;

    /// `model` as an ONNX model file (opset 17): the family's batch as named inputs, for any
    /// number of events and objects, and `logits [events, n_out]` out; `metadata` goes into the
    /// file's `metadata_props` (class names, where the model came from).
    fn to_onnx<B: Backend>(
        config: &Self::Config,
        model: &Self::Model<B>,
        metadata: Vec<(String, String)>,
    ) -> Vec<u8>;

    /// `input` as the ONNX model's inputs, in the graph's order: what a program that runs the
    /// exported model feeds it for these events.
    fn onnx_inputs(config: &Self::Config, input: &Self::Input) -> Vec<NamedArray>;
}

/// How a family's model runs on the tool's backends: on the CPU backend `C` with the family's own
/// kernels where it has them (`Cpu*`), on every other backend with Burn's operations (the same
/// function). The run layer picks one by backend; it never names the types.
pub trait Kernels<C: Backend>: ModelFamily {
    /// The model training on `Autodiff<C>`.
    type CpuTrained: AutodiffModule<Autodiff<C>, InnerModule: Classifier<C, Input = Self::Input>>
        + Classifier<Autodiff<C>, Input = Self::Input>;
    /// The model scoring on `C`.
    type CpuScoring: Classifier<C, Input = Self::Input>;
    /// The model training on another backend `B`.
    type Trained<B: AutodiffBackend>: AutodiffModule<B, InnerModule: Classifier<B::InnerBackend, Input = Self::Input>>
        + Classifier<B, Input = Self::Input>;
    /// The model scoring on another backend `B`.
    type Scoring<B: Backend>: Classifier<B, Input = Self::Input>;

    /// `model` ready to train on `Autodiff<C>` (the same function).
    fn cpu_trained(model: Self::Model<Autodiff<C>>) -> Self::CpuTrained;

    /// `model` ready to score on `C`.
    fn cpu_scoring(model: Self::Model<C>) -> Self::CpuScoring;

    /// `model` ready to train on `B`.
    fn trained<B: AutodiffBackend>(model: Self::Model<B>) -> Self::Trained<B>;

    /// `model` ready to score on `B`.
    fn scoring<B: Backend>(model: Self::Model<B>) -> Self::Scoring<B>;
}

/// One cached event as every family reads it: its objects' features, its global features, the
/// features of every ordered pair of its objects, and its target. Values as the model reads them
/// (after the `auto` standardisation).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventInputs {
    /// Objects (a graph's nodes, a transformer's tokens).
    pub n_objects: usize,
    /// `[n_objects, d_node]` row-major.
    pub objects: Vec<f32>,
    /// `[d_global]`.
    pub globals: Vec<f32>,
    /// `[n_objects · (n_objects − 1), d_pair]` row-major: the features of every ordered pair of
    /// objects as the graph edge src → dst, in the contract's edge order (§4: source-major, for
    /// src in 0..n, for dst in 0..n, dst ≠ src); a transformer's pair (i, j) is the edge j → i.
    /// Empty when the model reads no pair features.
    pub pairs: Vec<f32>,
    /// What the event is trained towards.
    pub target: Target,
}

/// An event's training target and weight.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Target {
    /// Class index (binary: 0/1); −1 for a multilabel event.
    pub label: i64,
    /// 0/1 per label (multilabel only, else empty).
    pub multilabel: Vec<f32>,
    /// Event weight as stored (negative weights kept).
    pub weight: f32,
}

/// The targets of `events` as a [`Batch`] holds them (row for row; `input` is the caller's).
/// A batch mixing class and multilabel targets, or multilabel lengths, is an error.
pub fn batch_of<X>(input: X, events: &[EventInputs]) -> Result<Batch<X>, SourceError> {
    let n_labels = events.first().map_or(0, |e| e.target.multilabel.len());
    let mut b = Batch {
        input,
        labels: Vec::with_capacity(events.len()),
        multilabels: Vec::with_capacity(events.len() * n_labels),
        weights: Vec::with_capacity(events.len()),
        n_events: events.len(),
    };
    for e in events {
        let t = &e.target;
        if t.multilabel.len() != n_labels || (n_labels > 0) != (t.label < 0) {
            return Err(SourceError(
                "collating a batch of the cache: a batch mixes class and multilabel labels (or label lengths)".into(),
            ));
        }
        b.labels.push(t.label);
        b.multilabels.extend_from_slice(&t.multilabel);
        b.weights.push(t.weight);
    }
    Ok(b)
}

/// A named array of a model's inputs, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedArray {
    /// The input's name.
    pub name: &'static str,
    /// Its dimensions.
    pub shape: Vec<usize>,
    /// Its values.
    pub values: ArrayValues,
}

/// The values of a [`NamedArray`].
#[derive(Debug, Clone, PartialEq)]
pub enum ArrayValues {
    /// f32.
    F32(Vec<f32>),
    /// i64.
    I64(Vec<i64>),
    /// bool.
    Bool(Vec<bool>),
}

/// One batch: the model input and the training targets, row for row.
#[derive(Debug, Clone)]
pub struct Batch<X> {
    /// What the model reads.
    pub input: X,
    /// Class index per row (binary: 0/1; multilabel: unused, 0). Padding rows: 0.
    pub labels: Vec<i64>,
    /// `[n_rows, n_labels]` row-major 0/1 targets (multilabel only, else empty).
    pub multilabels: Vec<f32>,
    /// Event weight per row, as stored (negative weights kept). Padding rows: 0.
    pub weights: Vec<f32>,
    /// Real events: rows `0..n_events`; the rest is padding.
    pub n_events: usize,
}

/// A new `Linear(d_in → d_out)` initialised as PyTorch's `nn.Linear` (weight and bias uniform in
/// ±1/√d_in), drawn from `seed`: the head a fine-tuning run puts on a pretrained backbone.
pub fn seeded_linear<B: Backend>(
    d_in: usize,
    d_out: usize,
    seed: u64,
    device: &B::Device,
) -> burn::nn::Linear<B> {
    use burn::module::Param;
    use rand::{Rng, SeedableRng};
    let bound = 1.0 / (d_in as f32).sqrt();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut draw =
        |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-bound..bound)).collect() };
    let weight =
        Tensor::<B, 2>::from_data(TensorData::new(draw(d_in * d_out), [d_in, d_out]), device);
    let bias = Tensor::<B, 1>::from_data(TensorData::new(draw(d_out), [d_out]), device);
    let mut linear = burn::nn::LinearConfig::new(d_in, d_out).init(device);
    linear.weight = Param::from_tensor(weight);
    linear.bias = Some(Param::from_tensor(bias));
    linear
}

/// Reading or batching events failed; the message names the file and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SourceError(pub String);

/// Events the trainer can stream: blocks of events read one at a time on the loader's producer
/// thread, batched on its worker threads. Nothing requires the whole dataset in memory.
pub trait EventSource: Send + Sync + 'static {
    /// One event as read from a block.
    type Event: Clone + Send + 'static;
    /// What a batch carries for the model.
    type Input: Send + 'static;

    /// Events per block, in source order.
    fn block_sizes(&self) -> &[usize];

    /// Number of events.
    fn len(&self) -> usize {
        self.block_sizes().iter().sum()
    }

    /// True when there are no events.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The events of `block`, in order (`block_sizes()[block]` of them).
    fn read_block(&self, block: usize) -> Result<Vec<Self::Event>, SourceError>;

    /// Class index (−1 when not a class) and event weight of an event.
    fn target(&self, event: &Self::Event) -> (i64, f32);

    /// [`EventSource::target`] of every event of `block`; a source that can read targets
    /// without the rest of its events overrides it.
    fn read_targets(&self, block: usize) -> Result<Vec<(i64, f32)>, SourceError> {
        Ok(self
            .read_block(block)?
            .iter()
            .map(|e| self.target(e))
            .collect())
    }

    /// The batch of `events`, in that order (an error names what in the data is wrong).
    fn batch(&self, events: Vec<Self::Event>) -> Result<Batch<Self::Input>, SourceError>;
}

/// Writes `bytes` to `path` through a synced temporary file in the same folder and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // Make the rename durable; a folder that cannot be opened is not an error here.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
