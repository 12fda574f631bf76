//! Resume, weights and early stopping of [`super::fit`] on a toy model.

use super::*;
use std::path::Path;

use crate::checkpoint::read_checkpoint;
use burn::backend::{Autodiff, Flex};
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::tensor::activation::relu;
use gnn4c_tasks::NegativeWeights;

type AD = Autodiff<Flex>;

/// The backend's RNG is process-global: tests that seed it and train take turns.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A small MLP with dropout: enough to exercise every piece of state a resume restores.
#[derive(Module, Debug)]
struct Toy<B: Backend> {
    hidden: Linear<B>,
    out: Linear<B>,
    dropout: Dropout,
}

fn toy<B: Backend>(n_out: usize, device: &B::Device) -> Toy<B> {
    B::seed(device, 11);
    Toy {
        hidden: LinearConfig::new(4, 16).init(device),
        out: LinearConfig::new(16, n_out).init(device),
        dropout: DropoutConfig::new(0.2).init(),
    }
}

impl<B: Backend> Classifier<B> for Toy<B> {
    type Input = Vec<f32>;
    fn logits(&self, input: &Vec<f32>, device: &B::Device) -> Tensor<B, 2> {
        let n = input.len() / 4;
        let x = Tensor::<B, 2>::from_data(TensorData::new(input.clone(), [n, 4]), device);
        self.out
            .forward(self.dropout.forward(relu(self.hidden.forward(x))))
    }
}

/// Three Gaussian blobs, labels 0..3, ~10 % negative weights, in blocks of 37 events.
/// With `fail_after`, reading blocks fails after that many reads (a crash mid-epoch).
struct Blobs {
    x: Vec<[f32; 4]>,
    y: Vec<i64>,
    w: Vec<f32>,
    sizes: Vec<usize>,
    fail_after: Option<usize>,
    reads: std::sync::atomic::AtomicUsize,
}

const BLOCK: usize = 37;

impl Blobs {
    fn new(n: usize, seed: u64) -> Arc<Blobs> {
        Arc::new(Blobs::make(n, seed, None))
    }

    fn make(n: usize, seed: u64, fail_after: Option<usize>) -> Blobs {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut b = Blobs {
            x: Vec::new(),
            y: Vec::new(),
            w: Vec::new(),
            sizes: (0..n).step_by(BLOCK).map(|s| BLOCK.min(n - s)).collect(),
            fail_after,
            reads: Default::default(),
        };
        for i in 0..n {
            let c = (i % 3) as i64;
            let mut x = [0f32; 4];
            for (k, v) in x.iter_mut().enumerate() {
                *v = rng.random_range(-1.0..1.0) + if k as i64 == c { 1.5 } else { 0.0 };
            }
            b.x.push(x);
            b.y.push(c);
            b.w.push(if rng.random_range(0.0..1.0) < 0.1 {
                -0.5
            } else {
                1.0
            });
        }
        b
    }
}

impl EventSource for Blobs {
    type Event = usize;
    type Input = Vec<f32>;
    fn block_sizes(&self) -> &[usize] {
        &self.sizes
    }
    fn read_block(&self, block: usize) -> Result<Vec<usize>, gnn4c_family::SourceError> {
        let reads = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.fail_after.is_some_and(|n| reads >= n) {
            return Err(gnn4c_family::SourceError("the job was killed".into()));
        }
        let start = block * BLOCK;
        Ok((start..start + self.sizes[block]).collect())
    }
    fn target(&self, &i: &usize) -> (i64, f32) {
        (self.y[i], self.w[i])
    }
    fn batch(&self, idx: Vec<usize>) -> Result<Batch<Vec<f32>>, gnn4c_family::SourceError> {
        Ok(Batch {
            input: idx.iter().flat_map(|&i| self.x[i]).collect(),
            labels: idx.iter().map(|&i| self.y[i]).collect(),
            multilabels: Vec::new(),
            weights: idx.iter().map(|&i| self.w[i]).collect(),
            n_events: idx.len(),
        })
    }
}

fn files(dir: &Path) -> RunFiles {
    RunFiles {
        last: dir.join("last.ckpt"),
        best: dir.join("best.ckpt"),
        history: dir.join("history.jsonl"),
    }
}

fn run(
    dir: &Path,
    max_epochs: u64,
    resume: Option<Checkpoint>,
    cfg: &TrainConfig,
) -> FitReport<Toy<AD>> {
    run_on(dir, max_epochs, resume, cfg, &Blobs::new(600, 1)).expect("fit")
}

fn run_on(
    dir: &Path,
    max_epochs: u64,
    resume: Option<Checkpoint>,
    cfg: &TrainConfig,
    train: &Arc<Blobs>,
) -> Result<FitReport<Toy<AD>>, TrainingError> {
    run_until(dir, max_epochs, resume, cfg, train, StopFlag::new())
}

/// [`run_on`] with a stop flag someone may set.
fn run_until(
    dir: &Path,
    max_epochs: u64,
    resume: Option<Checkpoint>,
    cfg: &TrainConfig,
    train: &Arc<Blobs>,
    stop: StopFlag,
) -> Result<FitReport<Toy<AD>>, TrainingError> {
    let _turn = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let device = Default::default();
    let mut sink = Vec::new();
    let world = gnn4c_distributed::World::single();
    let opts = FitOptions {
        config: TrainConfig {
            max_epochs,
            ..cfg.clone()
        },
        task: Task::Multiclass { n_classes: 3 },
        files: files(dir),
        resolved_config: serde_json::json!({"toy": true}),
        fingerprint: "f".into(),
        contract_version: "v1".into(),
        written_by: "test".into(),
        resume,
        progress: false,
        log: &mut sink,
        world: &world,
        stop,
        tensorboard: None,
    };
    fit::<AD, _, _, _>(
        toy::<AD>(3, &device),
        train,
        &Blobs::new(150, 2),
        opts,
        crate::BurnAdam,
        &device,
    )
}

fn weights(m: &Toy<AD>) -> Vec<u32> {
    let v = m.valid();
    [
        v.hidden.weight.val().into_data(),
        v.out.weight.val().into_data(),
        v.out.bias.as_ref().expect("bias").val().into_data(),
    ]
    .into_iter()
    .flat_map(|d| d.to_vec::<f32>().expect("f32"))
    .map(f32::to_bits)
    .collect()
}

fn cfg() -> TrainConfig {
    TrainConfig {
        batch_size: 64,
        lr: 1e-2,
        loader_threads: 2,
        ..TrainConfig::default()
    }
}

#[test]
fn resume_after_two_epochs_is_bitwise_the_straight_run() {
    let straight = tempfile::tempdir().expect("tempdir");
    let a = run(straight.path(), 4, None, &cfg());
    assert_eq!(a.history.len(), 4);
    assert!(
        a.history[3].val.accuracy > 0.6,
        "the toy learns: {:?}",
        a.history[3].val
    );

    let split = tempfile::tempdir().expect("tempdir");
    run(split.path(), 2, None, &cfg()); // the "killed" run: stops after epoch 2
    let ck = read_checkpoint(&split.path().join("last.ckpt")).expect("checkpoint");
    assert_eq!((ck.state.epoch, ck.state.global_step), (2, 2 * 10));
    let b = run(split.path(), 4, Some(ck), &cfg());
    assert_eq!(weights(&a.model), weights(&b.model), "bitwise identical");
    assert_eq!(b.history.len(), 4, "history keeps the first two epochs");
    let lines = std::fs::read_to_string(split.path().join("history.jsonl")).expect("history");
    assert_eq!(lines.lines().count(), 4);
    assert_eq!(
        a.history[3].val.loss, b.history[3].val.loss,
        "same validation loss"
    );
    assert!((a.history[3].lr - 1e-2 * 0.99f64.powi(3)).abs() < 1e-15);
    let numbers: Vec<u64> = b.history.iter().map(|r| r.epoch).collect();
    assert_eq!(numbers, [1, 2, 3, 4], "epochs are numbered from 1");
    // Byte-identical files: a checksum confirms the resumed run is the straight one.
    for f in ["last.ckpt", "best.ckpt"] {
        let read = |d: &Path| std::fs::read(d.join(f)).expect("checkpoint");
        assert!(read(straight.path()) == read(split.path()), "{f} bytes");
    }
}

#[test]
fn a_run_killed_inside_an_epoch_resumes_bitwise_from_its_step_checkpoint() {
    let c = TrainConfig {
        shuffle_buffer: 100,
        checkpoint_every_steps: Some(2),
        ..cfg()
    };
    let straight = tempfile::tempdir().expect("tempdir");
    let a = run(straight.path(), 3, None, &c);
    // Killed in epoch 2: 17 blocks per epoch, the 8th block read of epoch 2 fails.
    let killed = tempfile::tempdir().expect("tempdir");
    let killing = Arc::new(Blobs::make(600, 1, Some(17 + 8)));
    let e = run_on(killed.path(), 3, None, &c, &killing)
        .map(drop)
        .expect_err("killed");
    assert!(e.to_string().contains("killed"), "{e}");
    let ck = read_checkpoint(&killed.path().join("last.ckpt")).expect("checkpoint");
    let p = ck.state.position.clone().expect("written inside the epoch");
    assert_eq!(ck.state.epoch, 1, "inside the second epoch");
    assert!(p.batches >= 2 && p.batches.is_multiple_of(2), "{p:?}");
    assert_eq!(ck.state.global_step, 10 + p.batches);
    // The wrong split: refused, naming the position.
    let e = run_on(killed.path(), 3, Some(ck.clone()), &c, &Blobs::new(599, 1))
        .map(drop)
        .expect_err("another split")
        .to_string();
    assert!(e.contains("loader position") && e.contains("600"), "{e}");
    let b = run(killed.path(), 3, Some(ck), &c);
    assert_eq!(weights(&a.model), weights(&b.model), "bitwise identical");
    assert_eq!(a.history[1].train_loss, b.history[1].train_loss);
    for f in ["last.ckpt", "best.ckpt"] {
        let read = |d: &Path| std::fs::read(d.join(f)).expect("checkpoint");
        assert!(read(straight.path()) == read(killed.path()), "{f} bytes");
    }
}

/// A stop request ends the run after the step under way with the loader position in
/// `last.ckpt`; the resumed run is bitwise the straight one. With one step per epoch the stop
/// falls after the epoch's last step, before its validation.
#[test]
fn a_stop_request_ends_a_step_and_the_run_resumes_bitwise() {
    for batch_size in [64, 600] {
        let c = TrainConfig {
            batch_size,
            ..cfg()
        };
        let straight = tempfile::tempdir().expect("tempdir");
        let a = run(straight.path(), 2, None, &c);
        let stopped = tempfile::tempdir().expect("tempdir");
        let stop = StopFlag::new();
        stop.request();
        let e = run_until(stopped.path(), 2, None, &c, &Blobs::new(600, 1), stop)
            .map(drop)
            .expect_err("stopped");
        assert!(
            matches!(
                e,
                TrainingError::Stopped {
                    epoch: 1,
                    step: 1,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("last.ckpt"), "{e}");
        let ck = read_checkpoint(&stopped.path().join("last.ckpt")).expect("checkpoint");
        let p = ck.state.position.clone().expect("written inside the epoch");
        assert_eq!((ck.state.epoch, ck.state.global_step, p.batches), (0, 1, 1));
        let history = std::fs::read_to_string(stopped.path().join("history.jsonl"));
        assert_eq!(
            history.expect("history").lines().count(),
            0,
            "no epoch completed"
        );
        let b = run(stopped.path(), 2, Some(ck), &c);
        assert_eq!(weights(&a.model), weights(&b.model), "bitwise identical");
        assert_eq!(a.history[0].train_loss, b.history[0].train_loss);
        for f in ["last.ckpt", "best.ckpt"] {
            let read = |d: &Path| std::fs::read(d.join(f)).expect("checkpoint");
            assert!(read(straight.path()) == read(stopped.path()), "{f} bytes");
        }
    }
}

#[test]
fn bad_checkpoints_give_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    run(dir.path(), 1, None, &cfg());
    let path = dir.path().join("last.ckpt");
    let ck = read_checkpoint(&path).expect("checkpoint");
    let device = Default::default();
    let _turn = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);

    // Another model shape: a 5-class head.
    let other = toy::<AD>(5, &device);
    let e = ck
        .check_compatible(&other, "v1")
        .expect_err("shape")
        .to_string();
    assert!(e.contains("out.weight") && e.contains("[16, 3]"), "{e}");
    // Another contract version.
    let e = ck
        .check_compatible(&toy::<AD>(3, &device), "v2")
        .expect_err("contract");
    assert!(e.to_string().contains("contract v1"), "{e}");

    // Truncated and corrupted files.
    let bytes = std::fs::read(&path).expect("read");
    let cut = dir.path().join("cut.ckpt");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
    let e = read_checkpoint(&cut).expect_err("truncated").to_string();
    assert!(
        e.contains("cut.ckpt") && e.contains("truncated or corrupted"),
        "{e}"
    );
    let mut flipped = bytes;
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    std::fs::write(&cut, &flipped).expect("write");
    assert!(read_checkpoint(&cut).is_err());
    std::fs::write(&cut, b"PK\x03\x04 a zip, not a checkpoint").expect("write");
    let e = read_checkpoint(&cut).expect_err("foreign").to_string();
    assert!(e.contains("not a gnn4colliders checkpoint"), "{e}");
    let e = read_checkpoint(&dir.path().join("missing.ckpt")).expect_err("missing");
    assert!(e.to_string().contains("missing.ckpt"), "{e}");
}

#[test]
fn weights_policies_and_balance_reach_the_loss() {
    let dir = tempfile::tempdir().expect("tempdir");
    let balanced = TrainConfig {
        class_balance: true,
        negative_weights: NegativeWeights::Drop,
        ..cfg()
    };
    let r = run(dir.path(), 1, None, &balanced);
    assert!(r.history[0].train_loss.is_finite());
    let plain = run(dir.path(), 1, None, &cfg());
    assert_ne!(
        r.history[0].train_loss, plain.history[0].train_loss,
        "dropping negative weights changes the training loss"
    );
    // The validation loss keeps negative weights as they are, whatever the policy.
    assert!(r.history[0].val.loss.is_finite());
    // Early stopping watches the loss weighted like training: with class balance it differs
    // from the stored-weight metric; without, they are the same number.
    assert_ne!(r.history[0].val_objective, r.history[0].val.loss);
    assert_eq!(plain.history[0].val_objective, plain.history[0].val.loss);
}

#[test]
fn early_stopping_ends_the_run_and_a_resume_trains_nothing_more() {
    let dir = tempfile::tempdir().expect("tempdir");
    // gamma 1e-6: after the first epochs the steps are below f32 resolution, the validation
    // loss stops changing, and patience 1 ends the run.
    let c = TrainConfig {
        gamma: 1e-6,
        patience: 1,
        ..cfg()
    };
    let r = run(dir.path(), 50, None, &c);
    assert!(
        r.stopped_early && r.history.len() < 50,
        "{}",
        r.history.len()
    );
    let ck = read_checkpoint(&dir.path().join("last.ckpt")).expect("checkpoint");
    assert!(ck.state.stopped);
    let again = run(dir.path(), 50, Some(ck), &c);
    assert_eq!(again.history.len(), r.history.len());
    let best = read_checkpoint(&dir.path().join("best.ckpt")).expect("best");
    assert_eq!(best.state.early_stopping.best_epoch, r.best.map(|b| b.0));
}
