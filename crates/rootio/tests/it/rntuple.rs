//! Every field of every RNTuple test file that uproot reads as numbers, read here: bitwise the
//! same values and the same count per entry, whole and in chunks; per file, how many match.

use gnn4c_rootio::RootFile;

use crate::fixtures;

#[test]
fn every_rntuple_field_matches_uproot_bitwise() {
    let mut failures = Vec::new();
    let mut report = Vec::new();
    for mut fx in fixtures::rntuples()
        .into_iter()
        .chain(fixtures::local_ntuples())
    {
        let file = match RootFile::open(&fx.file) {
            Ok(f) => f,
            Err(e) => {
                failures.push(format!("{}: does not open: {e}", fx.rel));
                continue;
            }
        };
        let ntuple = match file.ntuple(&fx.tree) {
            Ok(n) => n,
            Err(e) => {
                failures.push(format!("{}: {e}", fx.rel));
                continue;
            }
        };
        if ntuple.entries as i64 != fx.entries {
            failures.push(format!(
                "{}: {} entries, uproot {}",
                fx.rel, ntuple.entries, fx.entries
            ));
        }
        let mut matched = 0usize;
        let fields = fx.branches.clone();
        for (name, type_name) in &fields {
            let Some(field) = ntuple.field(name) else {
                failures.push(format!("{}: {name}: no such field", fx.rel));
                continue;
            };
            let whole = file
                .field_cursor(&ntuple, field, 0)
                .and_then(|mut c| c.take(usize::MAX / 2));
            let data = match whole {
                Ok(d) => d,
                Err(e) => {
                    failures.push(format!("{}: {name} ({type_name}): {e}", fx.rel));
                    continue;
                }
            };
            let (want, want_counts) = fx.values(name);
            if let Some(what) = fixtures::difference(&data, &want, &want_counts) {
                failures.push(format!(
                    "{}: {name} ({type_name}, columns {:?}): {what}",
                    fx.rel, field.column_types
                ));
                continue;
            }
            let mut cursor = file.field_cursor(&ntuple, field, 5).expect("cursor");
            if !fixtures::chunks_agree(&data, &mut |n| cursor.take(n).expect("chunk")) {
                failures.push(format!("{}: {name}: chunked reading differs", fx.rel));
                continue;
            }
            matched += 1;
        }
        report.push(format!(
            "{}: {matched} of {} fields match",
            fx.rel,
            fields.len()
        ));
    }
    eprintln!("{}", report.join("\n"));
    assert!(
        failures.is_empty(),
        "{}\n{} failures:\n{}",
        report.join("\n"),
        failures.len(),
        failures.join("\n")
    );
}
