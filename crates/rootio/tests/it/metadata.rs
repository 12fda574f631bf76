//! Keys, directories and tree metadata of every test file.

use gnn4c_rootio::RootFile;

use crate::fixtures;

#[test]
fn every_file_opens_and_its_tree_has_uproots_branches_and_entries() {
    let mut failures = Vec::new();
    for fx in fixtures::all() {
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
        for (name, _) in &fx.branches {
            match tree.branch(name) {
                Some(b) => assert_eq!(b.entries, fx.entries, "{}: {name}", fx.rel),
                None => failures.push(format!("{}: no branch {name}", fx.rel)),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
