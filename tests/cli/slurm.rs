//! The shipped Slurm scripts (`scripts/slurm/`), unchanged, under a real Slurm cluster of two
//! nodes that `scripts/slurm/test-cluster.sh` starts on this machine (Debian's munge, slurmctld,
//! a slurmd per node). Built with
//! `--features slurm-tests` (which brings MPI, for the multi-node script); run as root, as CI
//! does. The scripts run from a folder laid out as the repository (`configs/`, `scripts/`), with
//! only what a site sets: `GNN4C_BIN`, `GNN4C_DEVICE=cpu`, `$SCRATCH`, and sbatch's options.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::*;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A running test cluster, stopped when dropped.
struct Cluster {
    dir: tempfile::TempDir,
    /// The folder the jobs run in, laid out as the repository.
    cwd: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repository().join("scripts/slurm/test-cluster.sh"))
            .arg("stop")
            .arg(self.dir.path().join("cluster"))
            .status();
    }
}

/// What `scontrol show job` says of a job.
#[derive(Debug)]
struct Job {
    state: String,
    restarts: u32,
    /// The nodes it ran on (`n[1-2]`).
    nodes: String,
    out: String,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let o = Command::new(repository().join("scripts/slurm/test-cluster.sh"))
            .arg("start")
            .arg(dir.path().join("cluster"))
            .output()
            .expect("test-cluster.sh runs");
        let (out, err) = text(&o);
        assert!(
            o.status.success(),
            "the test cluster did not start (root and Debian's munge, slurmctld, slurmd, slurm-client are needed): {out}{err}"
        );
        let cwd = dir.path().join("work");
        std::fs::create_dir_all(&cwd).expect("mkdir");
        copy_configs(&cwd);
        std::os::unix::fs::symlink(repository().join("scripts"), cwd.join("scripts"))
            .expect("symlink");
        Cluster { dir, cwd }
    }

    /// A Slurm command against this cluster, in the work folder, with the site's settings.
    fn slurm(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.current_dir(&self.cwd)
            .env("SLURM_CONF", self.dir.path().join("cluster/slurm.conf"))
            .env("SCRATCH", self.cwd.join("scratch"))
            .env("GNN4C_BIN", env!("CARGO_BIN_EXE_gnn4colliders"))
            .env("GNN4C_DEVICE", "cpu");
        c
    }

    /// The binary in the work folder with the jobs' environment (not under Slurm).
    fn direct(&self, args: &[&str]) -> Output {
        bin()
            .current_dir(&self.cwd)
            .env("SCRATCH", self.cwd.join("scratch"))
            .args(args)
            .output()
            .expect("the binary runs")
    }

    /// Submits a job; its output goes to `job-<id>.out` in the work folder.
    fn sbatch(&self, args: &[&str]) -> String {
        let o = self
            .slurm("sbatch")
            .args(["--parsable", "--output=job-%j.out"])
            .args(args)
            .output()
            .expect("sbatch runs");
        let (out, err) = text(&o);
        assert!(o.status.success(), "sbatch {args:?}: {out}{err}");
        out.trim().split(';').next().expect("a job id").to_owned()
    }

    fn scancel(&self, args: &[&str]) {
        let o = self.slurm("scancel").args(args).output().expect("scancel");
        assert!(o.status.success(), "scancel {args:?}: {}", text(&o).1);
    }

    fn show(&self, id: &str) -> HashMap<String, String> {
        let o = self
            .slurm("scontrol")
            .args(["show", "job", "-o", id])
            .output()
            .expect("scontrol");
        text(&o)
            .0
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// Waits until the job has ended for good (not pending a requeue), at most `limit`.
    fn wait(&self, id: &str, limit: Duration) -> Job {
        let start = Instant::now();
        loop {
            let queued = self
                .slurm("squeue")
                .args(["-h", "-j", id, "-o", "%T"])
                .output()
                .expect("squeue");
            let info = self.show(id);
            let state = info.get("JobState").cloned().unwrap_or_default();
            let ended = [
                "COMPLETED",
                "FAILED",
                "CANCELLED",
                "TIMEOUT",
                "NODE_FAIL",
                "OUT_OF_MEMORY",
            ];
            if text(&queued).0.trim().is_empty() && ended.contains(&state.as_str()) {
                return Job {
                    state,
                    restarts: info
                        .get("Restarts")
                        .and_then(|r| r.parse().ok())
                        .unwrap_or(0),
                    nodes: info.get("NodeList").cloned().unwrap_or_default(),
                    out: self.output(id),
                };
            }
            assert!(
                start.elapsed() < limit,
                "job {id} still {state} after {limit:?}: {}",
                self.output(id)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn output(&self, id: &str) -> String {
        std::fs::read_to_string(self.cwd.join(format!("job-{id}.out"))).unwrap_or_default()
    }

    /// Waits until a training run has written a checkpoint inside an epoch after its first.
    fn wait_inside_training(&self, run: &str, id: &str) {
        let start = Instant::now();
        let last = self.cwd.join(run).join("last.ckpt");
        while !gnn4c_training::read_checkpoint(&last)
            .is_ok_and(|c| c.state.epoch >= 1 && c.state.position.is_some())
        {
            assert!(
                start.elapsed() < Duration::from_secs(300),
                "{run} did not start training: {}",
                self.output(id)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn slurm_time_limit_requeue_multi_node_mpi_preprocess_array_and_scancel() {
    let c = Cluster::start();
    let cwd = c.cwd.clone();
    let ok = |o: Output| {
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}{err}");
        out
    };
    ok(c.direct(&["generate", "--events", "150"]));
    // 30 epochs of 180 events, a checkpoint every 2 steps: about 40 s on one core of the debug
    // build, long enough for a one-minute job to stop and requeue.
    std::fs::write(
        cwd.join("r.yaml"),
        "defaults:\n  - data: demo_finetune\n  - task: binary\nname: r\ntrainer: {batch_size: 32, max_epochs: 30, lr: 1.0e-4, seed: 5, loader_threads: 1, checkpoint_every_steps: 2}\nsubset: {train_events: 200, val_events: 100, test_events: 100}\n",
    )
    .expect("write");
    // The cache is built once first (as the scripts' comments say), in the environment's
    // cache folder under $SCRATCH.
    let data = "configs/data/demo_finetune.yaml";
    ok(c.direct(&[
        "preprocess",
        data,
        "--cache",
        "scratch/gnn4colliders/cache/demo_finetune",
    ]));
    let train = |run: &str| {
        [
            "r.yaml".to_owned(),
            "--run".to_owned(),
            run.to_owned(),
            "--no-progress".to_owned(),
        ]
    };
    // sbatch OPTIONS scripts/slurm/SCRIPT r.yaml --run RUN --no-progress MORE…
    let script = |options: &[&str], script: &str, run: &str, more: &[&str]| {
        let mut a: Vec<String> = options.iter().map(|s| s.to_string()).collect();
        a.push(format!("scripts/slurm/{script}"));
        a.extend(train(run));
        a.extend(more.iter().map(|s| s.to_string()));
        c.sbatch(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };

    // All jobs at once (the nodes have room for them): the time limit (one minute, the warning
    // 50 s before it: the scripts' 120 s would not fit), the multi-node script on its 2 nodes
    // with a rank on each, the one-node script with 2 ranks, a job stopped by hand with USR1, a
    // job cancelled, the preprocessing array.
    let limited = script(
        &["--time=1", "--signal=B:USR1@50"],
        "single-gpu.sh",
        "runs/limited",
        &[],
    );
    let short = ["trainer.max_epochs=3"];
    let two_nodes = script(
        &["--ntasks-per-node=1"],
        "multi-node.sh",
        "runs/two_nodes",
        &short,
    );
    let one_node = script(
        &["--ntasks-per-node=2"],
        "one-node-4gpu.sh",
        "runs/one_node",
        &short,
    );
    let by_hand = script(&[], "single-gpu.sh", "runs/by_hand", &[]);
    let cancelled = script(&[], "single-gpu.sh", "runs/cancelled", &[]);
    let array = c.sbatch(&[
        "--array=0-1",
        "--output=job-%A_%a.out",
        "scripts/slurm/preprocess-array.sh",
        data,
        "cache/array",
    ]);
    let merge = c.sbatch(&[
        &format!("--dependency=afterany:{array}"),
        "scripts/slurm/preprocess-array.sh",
        data,
        "cache/array",
    ]);
    // A sweep of two points as the array job `--multirun --slurm` writes, submitted with its
    // submit.sh (one task a point, through scripts/slurm/sweep-array.sh).
    #[rustfmt::skip]
    let out = ok(c.direct(&["train", "r.yaml", "--run", "runs/sweep", "trainer.lr=1e-3,1e-4",
        "trainer.max_epochs=2", "--multirun", "--slurm"]));
    assert!(out.contains("a Slurm array of 2 tasks"), "{out}");
    let swept = {
        let o = c
            .slurm("bash")
            .args([
                "runs/sweep/multirun/submit.sh",
                "--parsable",
                "--output=job-%A_%a.out",
            ])
            .output()
            .expect("submit.sh runs");
        let (out, err) = text(&o);
        assert!(o.status.success(), "submit.sh: {out}{err}");
        out.trim().split(';').next().expect("a job id").to_owned()
    };
    // The same training in one process, not under Slurm: what every stopped job must equal.
    let straight = {
        let mut a = vec!["train".to_owned()];
        a.extend(train("runs/straight"));
        a.extend([
            "environment=perlmutter".into(),
            "--device".into(),
            "cpu".into(),
        ]);
        let mut child = bin();
        child
            .current_dir(&cwd)
            .env("SCRATCH", cwd.join("scratch"))
            .args(&a)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        child.spawn().expect("spawn")
    };

    c.wait_inside_training("runs/by_hand", &by_hand);
    c.scancel(&["--signal=USR1", "--batch", &by_hand]);
    c.wait_inside_training("runs/cancelled", &cancelled);
    c.scancel(&[&cancelled]);

    ok(straight.wait_with_output().expect("straight run"));
    let same_as_straight = |run: &str| {
        for f in ["best.safetensors", "last.ckpt"] {
            let read = |r: &str| std::fs::read(cwd.join(r).join(f)).expect(f);
            assert!(read("runs/straight") == read(run), "{run}: {f} bytes");
        }
        assert_eq!(
            history_without_times(&cwd.join("runs/straight")),
            history_without_times(&cwd.join(run)),
            "{run}: history"
        );
    };
    let minutes = |n: u64| Duration::from_secs(60 * n);

    // The time limit: warned, stopped with a checkpoint, requeued, resumed, until done.
    let job = c.wait(&limited, minutes(8));
    assert_eq!(job.state, "COMPLETED", "{job:?}");
    assert!(job.restarts >= 1, "{job:?}");
    assert!(
        job.out.contains("requeueing job") && job.out.contains("requeued job (restart 1)"),
        "{}",
        job.out
    );
    same_as_straight("runs/limited");

    // `scancel --signal=USR1 --batch`: the same stop and requeue, by hand.
    let job = c.wait(&by_hand, minutes(5));
    assert_eq!(
        (job.state.as_str(), job.restarts),
        ("COMPLETED", 1),
        "{job:?}"
    );
    assert!(job.out.contains("SIGUSR1 received"), "{}", job.out);
    same_as_straight("runs/by_hand");

    // A plain `scancel`: SIGTERM to every process of the job; the run stops with a checkpoint
    // and the job ends, not requeued. Submitted again with --resume, it ends as the straight run.
    let job = c.wait(&cancelled, minutes(5));
    assert_eq!(
        (job.state.as_str(), job.restarts),
        ("CANCELLED", 0),
        "{job:?}"
    );
    assert!(
        job.out.contains("SIGTERM received") && job.out.contains("not requeued"),
        "{}",
        job.out
    );
    let mut args = vec!["scripts/slurm/single-gpu.sh".to_owned()];
    args.extend(train("runs/cancelled"));
    args.push("--resume".into());
    let again = c.sbatch(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let job = c.wait(&again, minutes(5));
    assert_eq!(job.state, "COMPLETED", "{job:?}");
    same_as_straight("runs/cancelled");

    // Two MPI ranks started by srun (Slurm's pmi2), on two nodes and on one: the last epoch's
    // validation metrics are what `evaluate` finds for the last checkpoint in one process.
    for (id, run, nodes) in [
        (&two_nodes, "runs/two_nodes", "n[1-2]"),
        (&one_node, "runs/one_node", ""),
    ] {
        let job = c.wait(id, minutes(5));
        assert_eq!(job.state, "COMPLETED", "{job:?}");
        assert!(job.out.contains("2 MPI ranks"), "{}", job.out);
        if nodes.is_empty() {
            assert!(!job.nodes.contains('['), "one node: {job:?}");
        } else {
            assert_eq!(job.nodes, nodes, "{job:?}");
        }
        two_ranks_validate_as_one_process(&cwd, run, |args| c.direct(args));
    }

    // The sweep's tasks: each point trained in its folder, the summary of both.
    for k in 0..2 {
        let id = format!("{swept}_{k}");
        let job = c.wait(&id, minutes(5));
        assert_eq!(job.state, "COMPLETED", "{id}: {job:?}");
    }
    for point in ["0-trainer.lr=1e-3", "1-trainer.lr=1e-4"] {
        let metrics = cwd
            .join("runs/sweep/multirun")
            .join(point)
            .join("metrics.json");
        assert!(metrics.is_file(), "{}", metrics.display());
    }
    let summary =
        std::fs::read_to_string(cwd.join("runs/sweep/multirun/summary.csv")).expect("summary.csv");
    assert_eq!(summary.lines().count(), 3, "{summary}");

    // The preprocessing array (2 tasks, `--part`) and its merge: one process's cache.
    for id in [format!("{array}_0"), format!("{array}_1"), merge] {
        let job = c.wait(&id, minutes(5));
        assert_eq!(job.state, "COMPLETED", "{id}: {job:?}");
    }
    ok(c.direct(&["preprocess", data, "--cache", "cache/one"]));
    assert!(
        folder_files(&cwd.join("cache/array")) == folder_files(&cwd.join("cache/one")),
        "the array's cache is one process's"
    );
}
