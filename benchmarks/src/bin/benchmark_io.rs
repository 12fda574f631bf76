//! Demo-dataset I/O: toy generation, ROOT writing (oxyroot) and reading back through our reader.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_io -- [EVENTS_PER_PROCESS] [REPS]`
//! Prints one JSON line per measurement, then a table. Fixed seed 42; 14 files (12 + 2 processes).
//!
//! `benchmark_io --files LIST.json [REPS]`: the project's ROOT reader on the files and branches
//! that `reference/uproot_io.py` lists (and times with uproot), TTrees and RNTuples (entries
//! with `ntuple`, as `reference/nano_like.py` writes them), on 1 and 2 threads (branches split
//! between the threads); one JSON line per (file, threads) on stderr, median over REPS, opening
//! the file each time.

use std::path::Path;

use gnn4c_benchmarks::{Stats, machine, read_events, time_reps};
use gnn4c_data::{FINETUNE_PROCESSES, PRETRAIN_PROCESSES, toy_events, write_demo};

fn main() -> anyhow::Result<()> {
    gnn4c_benchmarks::help_and_exit_if_asked(
        "benchmark_io [EVENTS_PER_PROCESS] [REPS] | benchmark_io --files LIST.json [REPS]",
    );
    let all: Vec<String> = std::env::args().skip(1).collect();
    if all.first().map(String::as_str) == Some("--files") {
        let list = all
            .get(1)
            .ok_or_else(|| anyhow::anyhow!("--files needs LIST.json"))?;
        let reps = all.get(2).map_or(Ok(5), |a| a.parse())?;
        return read_listed_files(Path::new(list), reps);
    }
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(20_000), |a| a.parse())?;
    let reps: usize = args.next().map_or(Ok(5), |a| a.parse())?;
    let (cpu, cores) = machine();
    let total = n * (PRETRAIN_PROCESSES.len() + FINETUNE_PROCESSES.len());
    let dir = tempfile::tempdir()?;
    let mut rows = Vec::new();
    let mut record = |name: &str, threads: usize, secs: &[f64]| {
        let s = Stats::of(secs);
        let line = serde_json::json!({
            "benchmark": "io", "measure": name, "events": total, "threads": threads,
            "median_s": s.median, "mean_s": s.mean, "min_s": s.min, "max_s": s.max, "std_s": s.std,
            "reps": s.n, "events_per_s": total as f64 / s.median, "cpu": cpu, "cores": cores,
            "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        });
        eprintln!("{line}");
        rows.push((name.to_owned(), threads, s));
    };

    // Toy generation alone (no I/O), one thread.
    let gen_only = time_reps(1, reps, || {
        for (i, p) in PRETRAIN_PROCESSES
            .iter()
            .chain(&FINETUNE_PROCESSES)
            .enumerate()
        {
            std::hint::black_box(toy_events(p, i as u32, n, 42));
        }
    });
    record("generate_only", 1, &gen_only);

    // Generation + writing, 1 thread and all cores.
    for threads in [1, cores] {
        let secs = time_reps(1, reps, || {
            write_demo(dir.path(), n, 42, threads).expect("write demo");
        });
        record("generate_and_write", threads, &secs);
    }

    // Reading back every file through the `vector` schema into EventSamples, one thread.
    let files = write_demo(dir.path(), n, 42, cores)?;
    let read = time_reps(1, reps, || {
        for f in &files {
            read_all(&f.path);
        }
    });
    record("read_events", 1, &read);

    eprintln!();
    println_table(&cpu, cores, n, total, &rows);
    Ok(())
}

fn read_all(path: &Path) {
    let events = read_events(path, "output", "vector", "bench", 0).expect("read back");
    std::hint::black_box(events.len());
}

fn println_table(cpu: &str, cores: usize, n: usize, total: usize, rows: &[(String, usize, Stats)]) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "machine: {cpu}, {cores} logical cores; {n} events x 14 processes = {total} events"
    );
    let _ = writeln!(
        out,
        "| measure | threads | median s | min s | max s | events/s (median) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for (name, threads, s) in rows {
        let _ = writeln!(
            out,
            "| {name} | {threads} | {:.3} | {:.3} | {:.3} | {:.0} |",
            s.median,
            s.min,
            s.max,
            total as f64 / s.median
        );
    }
}

/// What a listed file holds: a tree, or an RNTuple.
enum Source {
    Tree(gnn4c_rootio::TreeInfo),
    Ntuple(gnn4c_rootio::NtupleInfo),
}

impl Source {
    /// Every value of branch (or field) `name`; how many.
    fn read(&self, file: &gnn4c_rootio::RootFile, name: &str) -> anyhow::Result<usize> {
        Ok(match self {
            Source::Tree(tree) => {
                let info = tree
                    .branch(name)
                    .ok_or_else(|| anyhow::anyhow!("no branch {name}"))?;
                file.read_branch(tree, info)?.len()
            }
            Source::Ntuple(ntuple) => {
                let field = ntuple
                    .field(name)
                    .ok_or_else(|| anyhow::anyhow!("no field {name}"))?;
                file.field_cursor(ntuple, field, 0)?
                    .take(usize::MAX / 2)?
                    .len()
            }
        })
    }
}

/// Reads every listed branch (or RNTuple field) of every listed file with the project's
/// reader; see the module documentation.
fn read_listed_files(list: &Path, reps: usize) -> anyhow::Result<()> {
    let files: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(list)?)?;
    let (cpu, cores) = machine();
    for threads in [1usize, 2] {
        for f in &files {
            let path = Path::new(f["file"].as_str().unwrap_or_default()).to_owned();
            let tree_name = f["tree"].as_str().unwrap_or_default().to_owned();
            let entries = f["entries"].as_u64().unwrap_or(0);
            let branches: Vec<String> = f["branches"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|b| b.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let ntuple_name = f["ntuple"].as_str().map(str::to_owned);
            let read = || -> anyhow::Result<usize> {
                let file = gnn4c_rootio::RootFile::open(&path)?;
                let per = branches.len().div_ceil(threads).max(1);
                // An RNTuple's fields, or a tree's branches, split among the threads.
                let source = match &ntuple_name {
                    Some(name) => Source::Ntuple(file.ntuple(name)?),
                    None => Source::Tree(file.tree(&tree_name)?),
                };
                std::thread::scope(|s| {
                    let parts: Vec<_> = branches
                        .chunks(per)
                        .map(|part| {
                            let (file, source) = (&file, &source);
                            s.spawn(move || -> anyhow::Result<usize> {
                                let mut n = 0;
                                for b in part {
                                    n += source.read(file, b)?;
                                }
                                Ok(n)
                            })
                        })
                        .collect();
                    parts
                        .into_iter()
                        .map(|h| {
                            h.join()
                                .map_err(|_| anyhow::anyhow!("reader thread panicked"))?
                        })
                        .sum()
                })
            };
            read()?; // warm-up, and the error if the file cannot be read
            let secs = time_reps(0, reps, || {
                std::hint::black_box(read().ok());
            });
            let s = Stats::of(&secs);
            eprintln!(
                "{}",
                serde_json::json!({
                    "reader": "gnn4c-rootio", "file": path.file_name().map(|n| n.to_string_lossy()),
                    "threads": threads, "entries": entries, "branches": branches.len(),
                    "median_s": s.median, "entries_per_s": entries as f64 / s.median,
                    "reps": s.n, "cpu": cpu, "cores": cores,
                })
            );
        }
    }
    Ok(())
}
