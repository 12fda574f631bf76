//! Keys, directories and tree metadata of every test file.

use gnn4c_rootio::RootFile;

use crate::fixtures;

#[test]
fn every_file_opens_and_its_tree_has_uproots_branches_and_entries() {
    let mut failures = Vec::new();
    for mut fx in fixtures::all() {
        let file = match RootFile::open(&fx.file) {
            Ok(f) => f,
            Err(e) => {
                failures.push(format!("{}: open: {e}", fx.rel));
                continue;
            }
        };
        assert!(
            file.tree_paths().contains(&fx.tree),
            "{}: trees {:?}",
            fx.rel,
            file.tree_paths()
        );
        let tree = match file.tree(&fx.tree) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{}: tree: {e}", fx.rel));
                continue;
            }
        };
        assert_eq!(tree.entries, fx.entries, "{}", fx.rel);
        let names: Vec<String> = fx.branches.iter().map(|(n, _)| n.clone()).collect();
        for name in &names {
            // A branch holds the tree's entries, or none (a collection's member branches
            // that were never filled, in some AliRoot files): as many as uproot read.
            let (_, counts) = fx.values(name);
            match tree.branch(name) {
                Some(b) => assert_eq!(b.entries as usize, counts.len(), "{}: {name}", fx.rel),
                None => failures.push(format!("{}: no branch {name}", fx.rel)),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
