//! `inspect`: the trees and RNTuples a ROOT file holds, and which built-in schema would read them.

use std::path::Path;

use crate::root::{BranchInfo, list_trees, open_tree};
use crate::{BUILTIN_SCHEMAS, DataError, SchemaSpec};

/// One tree of an inspected file.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeInspection {
    /// Tree name.
    pub name: String,
    /// Entries.
    pub entries: u64,
    /// An RNTuple's clusters; `None` for a TTree.
    pub clusters: Option<usize>,
    /// Branches, nested ones included.
    pub branches: Vec<BranchInfo>,
    /// Built-in schemas whose every required branch is present.
    pub matching_schemas: Vec<&'static str>,
    /// When none matches: the built-in schema missing the fewest branches, and those branches.
    pub closest_schema: Option<(&'static str, Vec<String>)>,
}

/// Lists the trees and RNTuples of `path` with their branches (an RNTuple's leaves), types,
/// entries, clusters and matching schemas.
pub fn inspect_file(path: &Path) -> Result<Vec<TreeInspection>, DataError> {
    let mut out = Vec::new();
    for (name, entries) in list_trees(path)? {
        let reader = open_tree(path, &name)?;
        let branches = reader.branches().to_vec();
        let missing: Vec<(&'static str, Vec<String>)> = BUILTIN_SCHEMAS
            .into_iter()
            .filter_map(|s| SchemaSpec::builtin(s).map(|spec| (s, spec)))
            .map(|(s, spec)| {
                let gone = spec
                    .required_branches()
                    .into_iter()
                    .filter(|b| !branches.iter().any(|x| x.name == *b))
                    .map(str::to_owned)
                    .collect::<Vec<_>>();
                (s, gone)
            })
            .collect();
        let matching_schemas = missing
            .iter()
            .filter(|(_, gone)| gone.is_empty())
            .map(|(s, _)| *s)
            .collect::<Vec<_>>();
        let closest_schema = if matching_schemas.is_empty() {
            missing.into_iter().min_by_key(|(_, gone)| gone.len())
        } else {
            None
        };
        out.push(TreeInspection {
            name,
            entries,
            clusters: reader.clusters(),
            branches,
            matching_schemas,
            closest_schema,
        });
    }
    Ok(out)
}
