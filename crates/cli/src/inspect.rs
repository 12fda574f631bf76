//! `gnn4colliders inspect`: trees, branches, types, entries and matching schemas of ROOT files.

use std::io::Write;
use std::path::PathBuf;

use gnn4c_data::{BranchKind, inspect_file};

/// Arguments of `inspect`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  gnn4colliders inspect data/demo/pretrain/ttH.root\n  gnn4colliders inspect --filter Jet_ nano.root"
)]
pub(crate) struct Args {
    /// ROOT files to inspect.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Only list branches whose name contains this text.
    #[arg(long)]
    filter: Option<String>,
}

/// Every file is inspected: one that cannot be read is reported on stderr and the others still
/// are; the command then fails, saying how many could not be read.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
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
            writeln!(
                out,
                "  tree '{}': {} entries, {} branches; schema: {schemas}",
                t.name,
                t.entries,
                t.branches.len()
            )?;
            writeln!(out, "    {:<40} {:<24} layout", "branch", "type")?;
            for b in &t.branches {
                if args.filter.as_deref().is_some_and(|f| !b.name.contains(f)) {
                    continue;
                }
                let layout = match b.kind {
                    BranchKind::Scalar(_) => "scalar",
                    BranchKind::Array(_) => "leaf-count array",
                    BranchKind::Vector(_) => "std::vector",
                    BranchKind::Other => "not readable as a column",
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
