//! Demo-dataset I/O: toy generation, ROOT writing (oxyroot) and reading back through our reader.
//!
//! `cargo run --release -p gnn4c-benchmarks --bin benchmark_io -- [EVENTS_PER_PROCESS] [REPS]`
//! Prints one JSON line per measurement, then a table. Fixed seed 42; 14 files (12 + 2 processes).
//!
//! `benchmark_io --files LIST.json [REPS]`: the project's ROOT reader on the files and branches
//! that `reference/uproot_io.py` lists (and times with uproot), TTrees and RNTuples (entries
//! with `ntuple`, as `reference/nano_like.py` and `reference/root_matrix.py` write them), on 1
//! and 2 threads, as `preprocess` reads (`gnn4c_rootio::ColumnReader`, 10,000 entries at a
//! time); beside it, the pure decompression of the same baskets or pages (each once) by the
//! codec libraries, on as many threads: the limit a reader can reach; and the floor, the least
//! any reader of them does: their stored bytes read from the file, decompressed, and turned
//! into values once, each block's into memory of its own as a reader hands them out (a
//! basket's big-endian values copied; an RNTuple page's decoded as the format requires: its
//! byte planes un-split, its deltas undone). One JSON line per (reader, file,
//! threads) on stderr, median over REPS (the three alternated), opening the file each time; for
//! a URL the reader alone (the codec's and the floor's are its local file's). With
//! `--reader-only`, the reader alone for every file: what `perf record` is pointed at; with
//! `--threads N`, on N threads only. Where the reader alone is timed, its line also gives the
//! process's CPU seconds per read (`cpu_s_per_read`, every thread, from `/proc/self/stat`).

use std::path::Path;

use gnn4c_benchmarks::{Stats, cpu_seconds, machine, read_events, time_reps};
use gnn4c_data::{FINETUNE_PROCESSES, PRETRAIN_PROCESSES, toy_events, write_demo};

/// ROOT reading: the demo's files written and read back by stage; or, with `--files`, listed
/// files read as `preprocess` reads them, beside the codec alone.
#[derive(clap::Parser)]
#[command(after_help = gnn4c_benchmarks::DETAILS)]
struct Args {
    /// EVENTS_PER_PROCESS (default 20,000) and REPS (default 5); with `--files`, REPS alone.
    #[arg(value_name = "N", num_args = 0..=2)]
    numbers: Vec<usize>,
    /// Read the files this JSON list names instead (`benchmarks/io_matrix.sh` writes it).
    #[arg(long, value_name = "LIST.json")]
    files: Option<std::path::PathBuf>,
    /// With `--files`: time the reader alone, without the codec and the floor (to profile it).
    #[arg(long, requires = "files")]
    reader_only: bool,
    /// With `--files`: on this many threads only (default: 1, then 2), so that what the
    /// process and a server beside it spend can be told apart by thread count.
    #[arg(long, requires = "files", value_name = "N")]
    threads: Option<usize>,
}

fn main() -> anyhow::Result<()> {
    let args = <Args as clap::Parser>::parse();
    let number = |k: usize, default: usize| args.numbers.get(k).copied().unwrap_or(default);
    if let Some(list) = &args.files {
        // The allocator set up as the CLI sets it (`GNN4C_MALLOC=default` keeps glibc's).
        if std::env::var("GNN4C_MALLOC").as_deref() != Ok("default") {
            gnn4c_kernels::tune_allocator();
        }
        let threads = args.threads.map_or(vec![1, 2], |t| vec![t.max(1)]);
        return read_listed_files(list, number(0, 5), args.reader_only, &threads);
    }
    let (n, reps) = (number(0, 20_000), number(1, 5));
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

/// Entries a [`gnn4c_rootio::ColumnReader`] takes at a time: the datasets' default `step_size`.
const CHUNK: usize = 10_000;

/// A listed file, opened: a tree or an RNTuple.
enum Source {
    Tree(gnn4c_rootio::TreeInfo),
    Ntuple(gnn4c_rootio::NtupleInfo),
}

impl Source {
    fn open(file: &gnn4c_rootio::RootFile, listed: &Listed) -> anyhow::Result<Source> {
        Ok(match &listed.ntuple {
            Some(name) => Source::Ntuple(file.ntuple(name)?),
            None => Source::Tree(file.tree(&listed.tree)?),
        })
    }

    /// Every listed name's values, `CHUNK` entries at a time on `threads` threads; how many
    /// values. An RNTuple name that is a record (`_collection1`) stands for its leaves.
    fn read(
        &self,
        file: &gnn4c_rootio::RootFile,
        names: &[String],
        threads: usize,
    ) -> anyhow::Result<usize> {
        let mut reader = match self {
            Source::Tree(tree) => {
                let branches = names
                    .iter()
                    .map(|n| {
                        tree.branch(n)
                            .ok_or_else(|| anyhow::anyhow!("no branch {n}"))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                gnn4c_rootio::ColumnReader::tree(file, tree, &branches, 0, threads)?
            }
            Source::Ntuple(ntuple) => {
                let fields = self.leaves(names)?;
                let fields: Vec<_> = fields.into_iter().map(|f| &ntuple.fields[f]).collect();
                gnn4c_rootio::ColumnReader::ntuple(file, ntuple, &fields, 0, threads)?
            }
        };
        let mut values = 0;
        loop {
            let taken = reader.take(CHUNK)?;
            if taken.iter().next().is_none_or(|t| t.counts.is_empty()) {
                return Ok(values);
            }
            values += taken.iter().map(|t| t.len()).sum::<usize>();
        }
    }

    /// The RNTuple leaves `names` stand for, as indices into its fields.
    fn leaves(&self, names: &[String]) -> anyhow::Result<Vec<usize>> {
        let Source::Ntuple(ntuple) = self else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for n in names {
            let prefix = format!("{n}.");
            let before = out.len();
            out.extend(
                ntuple
                    .fields
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| f.name == *n || f.name.starts_with(&prefix))
                    .map(|(i, _)| i),
            );
            anyhow::ensure!(out.len() > before, "no field {n}");
        }
        Ok(out)
    }

    /// The compressed baskets or pages `names` read, every physical one once, each with how
    /// an RNTuple page's values decode (a basket's bytes are its values already).
    fn raw_blocks(
        &self,
        file: &gnn4c_rootio::RootFile,
        names: &[String],
    ) -> anyhow::Result<Blocks> {
        let mut blocks = Vec::new();
        match self {
            Source::Tree(tree) => {
                for n in names {
                    let b = tree
                        .branch(n)
                        .ok_or_else(|| anyhow::anyhow!("no branch {n}"))?;
                    blocks.extend(file.raw_baskets(b)?.into_iter().map(|b| (b, None)));
                }
            }
            Source::Ntuple(ntuple) => {
                for f in self.leaves(names)? {
                    let pages = file.raw_pages(ntuple, &ntuple.fields[f])?;
                    blocks.extend(pages.into_iter().map(|(b, v)| (b, Some(v))));
                }
            }
        }
        blocks.sort_by_key(|(b, _)| b.offset);
        blocks.dedup_by_key(|(b, _)| b.offset);
        blocks.sort_by_key(|(b, _)| std::cmp::Reverse(b.stored_len()));
        Ok(blocks)
    }
}

/// A compressed basket or page, with how a page's values decode (`None`: a basket's bytes
/// are its values).
type Block = (gnn4c_rootio::RawBlock, Option<gnn4c_rootio::PageValues>);
type Blocks = Vec<Block>;

/// Decompresses every block on `threads` threads, each taking the next as it is free; bytes
/// out. With `floor` (the blocks' file, and memory for all their values), the floor: each
/// block's stored bytes read from the file first (into one buffer per thread, reused), and what
/// came out turned into its values after, as every reader of the format must, each block's
/// into its own place in that memory (values handed out do not stay in a cache): a basket's
/// big-endian values copied, an RNTuple page's decoded (its byte planes un-split, its deltas
/// undone).
fn decompress_all(
    blocks: &Blocks,
    threads: usize,
    floor: Option<(&std::fs::File, &mut [u8])>,
) -> anyhow::Result<usize> {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (file, slots) = match floor {
        Some((file, memory)) => (Some(file), value_slots(blocks, memory)?),
        None => (None, Vec::new()),
    };
    let next = AtomicUsize::new(0);
    let work = || -> anyhow::Result<usize> {
        let mut stored = Vec::new();
        let mut bytes = 0;
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some((b, page)) = blocks.get(i) else {
                return Ok(bytes);
            };
            if let Some(file) = file {
                stored.resize(b.stored_len(), 0);
                file.read_exact_at(&mut stored, b.offset)?;
            }
            let out = b.decompress().map_err(anyhow::Error::msg)?;
            if let Some(slot) = slots.get(i) {
                let mut slot = slot.lock().map_err(|_| anyhow::anyhow!("a slot's lock"))?;
                match page {
                    None => slot.copy_from_slice(&out),
                    Some(page) => page
                        .decode_into(&out, &mut slot)
                        .map_err(anyhow::Error::msg)?,
                }
            }
            bytes += out.len();
        }
    };
    std::thread::scope(|s| {
        let helpers: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mut bytes = work()?;
        for h in helpers {
            bytes += h
                .join()
                .map_err(|_| anyhow::anyhow!("decompression thread panicked"))??;
        }
        Ok(bytes)
    })
}

/// The bytes each block's values take: a basket's decompressed, a page's decoded.
fn values_len((block, page): &Block) -> usize {
    page.map_or(block.unpacked_len(), |p| p.values_len())
}

/// `memory` cut into each block's place for its values, in block order.
fn value_slots<'m>(
    blocks: &Blocks,
    mut memory: &'m mut [u8],
) -> anyhow::Result<Vec<std::sync::Mutex<&'m mut [u8]>>> {
    let mut slots = Vec::with_capacity(blocks.len());
    for block in blocks {
        let len = values_len(block);
        anyhow::ensure!(len <= memory.len(), "memory for the values too short");
        let (slot, rest) = memory.split_at_mut(len);
        slots.push(std::sync::Mutex::new(slot));
        memory = rest;
    }
    Ok(slots)
}

/// One entry of a listing (`reference/uproot_io.py`, `nano_like.py`, `root_matrix.py`).
struct Listed {
    path: std::path::PathBuf,
    tree: String,
    ntuple: Option<String>,
    entries: u64,
    branches: Vec<String>,
}

impl Listed {
    fn of(f: &serde_json::Value) -> Listed {
        Listed {
            path: Path::new(f["file"].as_str().unwrap_or_default()).to_owned(),
            tree: f["tree"].as_str().unwrap_or_default().to_owned(),
            ntuple: f["ntuple"].as_str().map(str::to_owned),
            entries: f["entries"].as_u64().unwrap_or(0),
            branches: f["branches"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|b| b.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// Reads every listed branch (or RNTuple field) of every listed file with the project's
/// reader, and (unless `reader_only`) decompresses the same baskets or pages with the codec
/// alone; see the module documentation.
fn read_listed_files(
    list: &Path,
    reps: usize,
    reader_only: bool,
    thread_counts: &[usize],
) -> anyhow::Result<()> {
    let files: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(list)?)?;
    let files: Vec<Listed> = files.iter().map(Listed::of).collect();
    let (cpu, cores) = machine();
    for &threads in thread_counts {
        for f in &files {
            let read = || -> anyhow::Result<usize> {
                let file = gnn4c_rootio::RootFile::open(&f.path)?;
                let source = Source::open(&file, f)?;
                source.read(&file, &f.branches, threads)
            };
            // A URL's codec and floor are its local file's: over a network only the reader is
            // timed (its blocks fetched one by one would take longer than every read).
            let reader_alone = reader_only || gnn4c_rootio::is_url(&f.path);
            let blocks = match reader_alone {
                true => Vec::new(),
                false => {
                    let file = gnn4c_rootio::RootFile::open(&f.path)?;
                    Source::open(&file, f)?.raw_blocks(&file, &f.branches)?
                }
            };
            let handle = match reader_alone {
                true => None,
                false => Some(std::fs::File::open(&f.path)?),
            };
            // Memory for every block's values, touched before any timing.
            let mut memory = vec![0u8; blocks.iter().map(values_len).sum()];
            read()?; // warm-up, and the error if the file cannot be read
            if let Some(handle) = &handle {
                decompress_all(&blocks, threads, None)?;
                decompress_all(&blocks, threads, Some((handle, &mut memory)))?;
            }
            // The reader, the codec alone and the floor, alternated rep by rep.
            let (mut ours, mut codec, mut floor) = (Vec::new(), Vec::new(), Vec::new());
            let cpu_before = cpu_seconds();
            for _ in 0..reps {
                ours.extend(time_reps(0, 1, || {
                    std::hint::black_box(read().ok());
                }));
                if let Some(handle) = &handle {
                    codec.extend(time_reps(0, 1, || {
                        std::hint::black_box(decompress_all(&blocks, threads, None).ok());
                    }));
                    floor.extend(time_reps(0, 1, || {
                        let floor = Some((handle, &mut memory[..]));
                        std::hint::black_box(decompress_all(&blocks, threads, floor).ok());
                    }));
                }
            }
            // The process's CPU time per read, where the reader alone was timed (every thread:
            // a remote file's requests in the background too).
            let cpu_per_read =
                (reader_alone && reps > 0).then(|| (cpu_seconds() - cpu_before) / reps as f64);
            let stored: usize = blocks.iter().map(|(b, _)| b.stored_len()).sum();
            let timed = [
                ("gnn4c-rootio", &ours),
                ("codec alone", &codec),
                ("floor (read, codec, one pass)", &floor),
            ];
            for (reader, secs) in timed.into_iter().filter(|(_, secs)| !secs.is_empty()) {
                let s = Stats::of(secs);
                let mut line = serde_json::json!({
                    "reader": reader, "file": f.path.file_name().map(|n| n.to_string_lossy()),
                    "threads": threads, "entries": f.entries, "branches": f.branches.len(),
                    "median_s": s.median, "entries_per_s": f.entries as f64 / s.median,
                    "reps": s.n, "cpu": cpu, "cores": cores, "blocks": blocks.len(),
                    "stored_bytes": stored,
                });
                if let Some(cpu_s) = cpu_per_read {
                    line["cpu_s_per_read"] = cpu_s.into();
                }
                eprintln!("{line}");
            }
        }
    }
    Ok(())
}
