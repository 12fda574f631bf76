//! Every branch of every test file that uproot reads as numbers (`fixtures/rootio` and
//! `fixtures/rootio-types`), read here: bitwise the same values and the same count per entry,
//! whole and in chunks; per file, how many match (point `GNN4C_SHARED` at a larger corpus laid
//! out the same way to check it).

use gnn4c_rootio::RootFile;

use crate::fixtures;

#[test]
fn every_branch_matches_uproot_bitwise() {
    let mut failures = Vec::new();
    let mut checked = 0usize;
    let mut report = Vec::new();
    for mut fx in fixtures::all()
        .into_iter()
        .chain(fixtures::types())
        .chain(fixtures::local_trees())
    {
        let before = checked;
        let Ok(file) = RootFile::open(&fx.file) else {
            failures.push(format!("{}: does not open", fx.rel));
            continue;
        };
        let Ok(tree) = file.tree(&fx.tree) else {
            failures.push(format!("{}: no tree", fx.rel));
            continue;
        };
        for (name, type_name) in fx.branches.clone() {
            let Some(branch) = tree.branch(&name) else {
                failures.push(format!("{}: {name}: missing", fx.rel));
                continue;
            };
            let data = match file.read_branch(&tree, branch) {
                Ok(d) => d,
                Err(e) => {
                    failures.push(format!("{}: {name} ({type_name}): {e}", fx.rel));
                    continue;
                }
            };
            let (want, want_counts) = fx.values(&name);
            let counts: Vec<i64> = data.counts.iter().map(|&c| i64::from(c)).collect();
            // uproot reads `TObject::fBits` of a split collection as plain `u32`s, but ROOT
            // writes a 2-byte process id after the bits of a referenced object
            // (`kIsReferenced`), so for such objects uproot's values are the entry's bytes
            // misaligned (Delphes' `Track.fBits`: 165 "values" for 110 tracks). Here the
            // reader must give one value per object: as many as the sibling `fUniqueID`.
            if let Some(prefix) = name.strip_suffix(".fBits")
                && counts != want_counts
            {
                let (_, objects) = fx.values(&format!("{prefix}.fUniqueID"));
                if counts != objects {
                    failures.push(format!("{}: {name}: not one value per object", fx.rel));
                }
                continue;
            }
            if let Some(what) = fixtures::difference(&data, &want, &want_counts) {
                failures.push(format!("{}: {name}: {what}", fx.rel));
                continue;
            }
            let mut cursor = file.branch_cursor(&tree, branch, 5).expect("cursor");
            if !fixtures::chunks_agree(&data, &mut |n| cursor.take(n).expect("chunk")) {
                failures.push(format!("{}: {name}: chunked reading differs", fx.rel));
                continue;
            }
            checked += 1;
        }
        report.push(format!(
            "{}: {} of {} branches match",
            fx.rel,
            checked - before,
            fx.branches.len()
        ));
    }
    eprintln!("{}", report.join("\n"));
    assert!(
        failures.is_empty(),
        "{checked} branches match; {} do not:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
