//! Sweeps from the CLI (`--multirun`, as Hydra's): the grid of runs, their summary sorted by the
//! validation objective, a rerun that resumes only the unfinished point, one point alone (an
//! array task's), and the Slurm array job `--slurm` writes. The array job itself runs under a
//! real Slurm in `tests/cli/slurm.rs`.

use super::*;

/// The rows of a sweep's `summary.csv` as header → value maps, in file order.
fn summary_rows(path: &Path) -> Vec<std::collections::BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).expect("summary.csv");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .map(|h| h.to_string())
                .zip(split_csv(l))
                .collect()
        })
        .collect()
}

/// A CSV line's fields (quoted fields may hold commas).
fn split_csv(line: &str) -> Vec<String> {
    let (mut out, mut field, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    out.push(field);
    out
}

#[test]
fn a_sweep_runs_its_grid_summarises_resumes_and_writes_an_array_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = dir.path();
    run_ok(cwd, &["generate", "--out", "demo", "--events", "150"]);
    write_demo_configs(cwd);
    let sweep = [
        "train",
        "pre.yaml",
        "--run",
        "runs/s",
        "trainer.lr=1e-3,1e-4",
        "model=root_gnn,pfn",
        "trainer.max_epochs=1",
        "--multirun",
    ];
    let out = run_ok(cwd, &sweep);
    assert!(out.contains("sweep of 4 points"), "{out}");
    let root = cwd.join("runs/s/multirun");
    let folders = [
        "0-trainer.lr=1e-3,model=root_gnn",
        "1-trainer.lr=1e-3,model=pfn",
        "2-trainer.lr=1e-4,model=root_gnn",
        "3-trainer.lr=1e-4,model=pfn",
    ];
    for f in folders {
        let config = json(&root.join(f).join("config.json"));
        let (lr, model) = (&f[13..17], &f[24..]);
        assert_eq!(
            config["run"]["trainer"]["lr"],
            lr.parse::<f64>().expect("lr")
        );
        assert_eq!(config["model"]["name"], model, "{f}");
        assert_eq!(config["run"]["trainer"]["max_epochs"], 1);
    }

    // Every point, the lowest validation objective first, as its metrics.json says.
    let rows = summary_rows(&root.join("summary.csv"));
    assert_eq!(rows.len(), 4);
    let objectives: Vec<f64> = rows
        .iter()
        .map(|r| r["val_objective"].parse().expect("objective"))
        .collect();
    assert!(
        objectives.windows(2).all(|w| w[0] <= w[1]),
        "{objectives:?}"
    );
    for r in &rows {
        let metrics = json(&cwd.join(&r["run"]).join("metrics.json"));
        let objective = metrics["best_validation_objective"]
            .as_f64()
            .expect("objective");
        assert_eq!(r["val_objective"], format!("{objective:.6}"), "{r:?}");
        assert_eq!(r["best_epoch"], metrics["best_epoch"].to_string(), "{r:?}");
        assert!(
            r["run"].ends_with(&format!(
                "{}-trainer.lr={},model={}",
                r["point"], r["trainer.lr"], r["model"]
            )),
            "{r:?}"
        );
    }
    let md = std::fs::read_to_string(root.join("summary.md")).expect("summary.md");
    assert_eq!(md.lines().count(), 2 + 4, "{md}");

    // Interrupted: a point without its results is resumed, the others skipped.
    std::fs::remove_file(root.join(folders[2]).join("metrics.json")).expect("remove");
    let out = run_ok(cwd, &sweep);
    assert_eq!(out.matches("finished, skipped").count(), 3, "{out}");
    assert!(
        out.contains("[2] trainer.lr=1e-4 model=root_gnn: resumed"),
        "{out}"
    );
    assert!(root.join(folders[2]).join("metrics.json").is_file());
    assert_eq!(summary_rows(&root.join("summary.csv")).len(), 4);

    // One point alone, as an array task runs it: only that one trains; the summary holds the
    // points finished so far.
    let mut one: Vec<&str> = sweep.to_vec();
    one[3] = "runs/one";
    one.extend(["--point", "1"]);
    run_ok(cwd, &one);
    let one_root = cwd.join("runs/one/multirun");
    assert!(one_root.join(folders[1]).join("metrics.json").is_file());
    assert!(!one_root.join(folders[0]).exists());
    assert_eq!(summary_rows(&one_root.join("summary.csv")).len(), 1);
    let o = run(cwd, &[&one[..one.len() - 1], &["4"]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
    assert!(
        text(&o).1.contains("the sweep has 4 points"),
        "{}",
        text(&o).1
    );

    // --slurm writes the array job instead of running: one task per point, through the shipped
    // array script, with the sweep's arguments and run folder.
    let mut slurm: Vec<&str> = sweep.to_vec();
    slurm[3] = "runs/queued";
    slurm.push("--slurm");
    let out = run_ok(cwd, &slurm);
    let script = cwd.join("runs/queued/multirun/submit.sh");
    assert!(out.contains("submit.sh"), "{out}");
    let text = std::fs::read_to_string(&script).expect("submit.sh");
    assert!(
        text.contains("sbatch --array=0-3 \"$@\" scripts/slurm/sweep-array.sh pre.yaml trainer.lr=1e-3,1e-4 model=root_gnn,pfn trainer.max_epochs=1 --run runs/queued"),
        "{text}"
    );
    assert!(!cwd.join("runs/queued/multirun").join(folders[0]).exists());
}
