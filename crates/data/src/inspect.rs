//! `inspect`: the trees and RNTuples a ROOT file holds, and which built-in declaration would read
//! them.

use std::path::Path;

use crate::root::{BranchInfo, list_trees, open_tree};
use gnn4c_features::Inputs;

use crate::{BUILTIN_DECLARATIONS, DataError, builtin_inputs};

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
    /// Built-in declarations whose every required branch is present.
    pub matching_schemas: Vec<&'static str>,
    /// When none matches: the built-in declaration missing the fewest branches, and those
    /// branches.
    pub closest_schema: Option<(&'static str, Vec<String>)>,
}

/// Lists the trees and RNTuples of `path` with their branches (an RNTuple's leaves), types,
/// entries, clusters and matching schemas.
pub fn inspect_file(path: &Path) -> Result<Vec<TreeInspection>, DataError> {
    let mut required = Vec::new();
    for name in BUILTIN_DECLARATIONS {
        let spec = builtin_inputs(name)
            .unwrap_or_else(|| Err(DataError::Config(format!("no built-in declaration {name}"))))?;
        let inputs = Inputs::new(&spec)
            .map_err(|e| DataError::Config(format!("the built-in declaration {name}: {e}")))?;
        required.push((name, inputs.required_branches()));
    }
    let mut out = Vec::new();
    for (name, entries) in list_trees(path)? {
        let reader = open_tree(path, &name)?;
        let branches = reader.branches().to_vec();
        let missing: Vec<(&'static str, Vec<String>)> = required
            .iter()
            .map(|(s, wanted)| {
                let gone = wanted
                    .iter()
                    .filter(|b| !branches.iter().any(|x| x.name == **b))
                    .cloned()
                    .collect::<Vec<_>>();
                (*s, gone)
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
