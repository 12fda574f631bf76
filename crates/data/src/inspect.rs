//! `inspect`: what a ROOT file holds, and which built-in schema would read it.

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
    /// Branches, nested ones included.
    pub branches: Vec<BranchInfo>,
    /// Built-in schemas whose every required branch is present.
    pub matching_schemas: Vec<&'static str>,
}

/// Lists the trees of `path` with their branches, types, entries and matching schemas.
pub fn inspect_file(path: &Path) -> Result<Vec<TreeInspection>, DataError> {
    let mut out = Vec::new();
    for (name, entries) in list_trees(path)? {
        let reader = open_tree(path, &name)?;
        let branches = reader.branches().to_vec();
        let matching_schemas = BUILTIN_SCHEMAS
            .into_iter()
            .filter(|s| {
                SchemaSpec::builtin(s).is_some_and(|spec| {
                    spec.required_branches()
                        .iter()
                        .all(|b| branches.iter().any(|x| x.name == *b))
                })
            })
            .collect();
        out.push(TreeInspection {
            name,
            entries,
            branches,
            matching_schemas,
        });
    }
    Ok(out)
}
