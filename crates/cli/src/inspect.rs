//! `gnn4colliders inspect`: trees and RNTuples, their branches or fields, types, entries and
//! matching schemas of ROOT files;
//! with `--inputs`, an input declaration and the features it gives a file's first events.

use std::io::Write;
use std::path::{Path, PathBuf};

use gnn4c_data::{BranchKind, TreeInspection, inspect_file};
use gnn4c_features::Inputs;
use gnn4c_run::{ConfigError, load_declaration, scan_tree_start};

use crate::declaration::{show_declaration, show_event};

/// Arguments of `inspect`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders inspect data/demo/pretrain/ttH.root\n  gnn4colliders inspect --filter Jet_ nano.root\n  gnn4colliders inspect --inputs nanoaod nano.root\n  gnn4colliders inspect --inputs configs/data/nanoaod.yaml --show 5 nano.root"
)]
pub(crate) struct Args {
    /// ROOT files to inspect.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Only list branches whose name contains this text.
    #[arg(long)]
    filter: Option<String>,
    /// An input declaration to try on the files: a built-in's name (`nanoaod`), a dataset
    /// config, or a YAML file holding a declaration. Prints it and the features of the first
    /// kept events instead of the branches.
    #[arg(long)]
    inputs: Option<String>,
    /// With --inputs: how many kept events to print per file.
    #[arg(long, default_value_t = 3)]
    show: usize,
    /// With --inputs: the tree to read (default: the first, by entries, that has the
    /// declaration's branches).
    #[arg(long)]
    tree: Option<String>,
}

/// The entries `--inputs` reads at most, looking for kept events.
const INSPECT_ENTRIES: u64 = 10_000;

/// The declaration's features for the first kept events of `path` (at most [`INSPECT_ENTRIES`]
/// entries read), from `tree`, else from the first tree, by entries, it can read.
fn inspect_inputs(
    out: &mut impl Write,
    path: &Path,
    trees: &[TreeInspection],
    inputs: &Inputs,
    args: &Args,
) -> anyhow::Result<()> {
    let mut candidates: Vec<&TreeInspection> = trees
        .iter()
        .filter(|t| args.tree.as_ref().is_none_or(|n| n == &t.name))
        .collect();
    if candidates.is_empty() {
        let names: Vec<&str> = trees.iter().map(|t| t.name.as_str()).collect();
        return Err(ConfigError(format!(
            "{}: no tree or RNTuple '{}' (there are: {})",
            path.display(),
            args.tree.as_deref().unwrap_or_default(),
            names.join(", ")
        ))
        .into());
    }
    candidates.sort_by_key(|t| std::cmp::Reverse(t.entries));
    let mut first_error = None;
    for t in candidates {
        let entries = t.entries.min(INSPECT_ENTRIES);
        match scan_tree_start(path, &t.name, entries, inputs, args.show) {
            Ok(scan) => {
                writeln!(
                    out,
                    "  tree '{}': {} of the first {} entries kept",
                    t.name, scan.kept, scan.read
                )?;
                for e in &scan.shown {
                    show_event(out, e, inputs)?;
                }
                return Ok(());
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.map_or_else(
        || anyhow::anyhow!("{}: holds neither a TTree nor an RNTuple", path.display()),
        Into::into,
    ))
}

/// Every file is inspected: one that cannot be read is reported on stderr and the others still
/// are; the command then fails, saying how many could not be read.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let inputs = args.inputs.as_deref().map(load_declaration).transpose()?;
    if let Some(inputs) = &inputs {
        writeln!(
            out,
            "declaration {}: {} node, {} global and {} pair features",
            args.inputs.as_deref().unwrap_or_default(),
            inputs.d_node(),
            inputs.d_global(),
            inputs.d_pair()
        )?;
        show_declaration(&mut out, inputs)?;
    }
    let mut failed = 0usize;
    for path in &args.files {
        let trees = match inspect_file(path) {
            Ok(trees) => trees,
            Err(e) => {
                out.flush()?;
                eprintln!("error: {:#}", anyhow::Error::from(e));
                failed += 1;
                continue;
            }
        };
        writeln!(out, "{}", path.display())?;
        if let Some(inputs) = &inputs {
            // A declaration that does not fit a file stops here: the user must fix one of them.
            inspect_inputs(&mut out, path, &trees, inputs, args)?;
            continue;
        }
        if trees.is_empty() {
            writeln!(out, "  holds neither a TTree nor an RNTuple")?;
        }
        for t in trees {
            let schemas = match (&t.closest_schema, t.matching_schemas.is_empty()) {
                (Some((s, gone)), true) => format!(
                    "none of the built-ins; closest is {s}, which lacks {} (write a schema in the dataset config)",
                    gone.join(", ")
                ),
                (None, true) => {
                    "none of the built-ins (write a schema in the dataset config)".to_owned()
                }
                _ => t.matching_schemas.join(", "),
            };
            match t.clusters {
                Some(clusters) => writeln!(
                    out,
                    "  RNTuple '{}': {} entries, {clusters} clusters, {} fields; schema: {schemas}",
                    t.name,
                    t.entries,
                    t.branches.len()
                )?,
                None => writeln!(
                    out,
                    "  tree '{}': {} entries, {} branches; schema: {schemas}",
                    t.name,
                    t.entries,
                    t.branches.len()
                )?,
            }
            let what = if t.clusters.is_some() {
                "field"
            } else {
                "branch"
            };
            writeln!(out, "    {what:<40} {:<24} layout", "type")?;
            for b in &t.branches {
                if args.filter.as_deref().is_some_and(|f| !b.name.contains(f)) {
                    continue;
                }
                let layout = match (b.kind, t.clusters.is_some()) {
                    (BranchKind::Scalar(_), _) => "scalar",
                    (BranchKind::Array(_), _) => "leaf-count array",
                    (BranchKind::Vector(_), false) => "std::vector",
                    (BranchKind::Vector(_), true) => "collection",
                    (BranchKind::Other, _) => "not readable as a column",
                };
                writeln!(out, "    {:<40} {:<24} {layout}", b.name, b.type_name)?;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!(
            "{failed} of {} files could not be inspected (see above)",
            args.files.len()
        );
    }
    Ok(())
}
