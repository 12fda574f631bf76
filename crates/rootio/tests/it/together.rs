//! Columns read together ([`ColumnReader`], as `preprocess` reads): on every test file, every
//! branch or field that reads alone, all of them at once and each asked for twice, in chunks
//! and whole, on 1 and 3 threads, give exactly what each column read alone gives (the thread
//! count and the chunking change nothing).

use gnn4c_rootio::{BranchData, ColumnReader, RootFile};

use crate::fixtures::{self, Fixture};

/// Every request's values, concatenated over takes of `chunk` entries and of about half that in
/// turn (a take shorter or longer than the one before it cuts or joins what was taken ahead).
fn read_together(reader: &mut ColumnReader<'_>, requests: usize, chunk: usize) -> Vec<BranchData> {
    let mut out: Vec<Option<BranchData>> = vec![None; requests];
    for k in 0.. {
        let n = if k % 2 == 0 { chunk } else { chunk / 2 + 1 };
        let taken = reader.take(n).expect("a chunk of every column");
        assert_eq!(taken.len(), requests, "one result per request");
        // (The first take counts even when empty: a tree of no entries reads as empty columns.)
        for (slot, t) in out.iter_mut().zip(taken.iter()) {
            let t = t.clone().into_data();
            match slot {
                Some(s) => {
                    s.bytes.extend_from_slice(&t.bytes);
                    s.counts.extend_from_slice(&t.counts);
                }
                None => *slot = Some(t),
            }
        }
        if taken.iter().all(|t| t.counts.is_empty()) {
            break;
        }
    }
    out.into_iter().flatten().collect()
}

/// The chunkings tried: a third of the entries (takes that end inside baskets and clusters),
/// and all at once.
fn chunks(entries: u64) -> [usize; 2] {
    let n = usize::try_from(entries).unwrap_or(usize::MAX / 4);
    [n / 3 + 1, n.max(1)]
}

/// Every column of `names` (each read alone into `alone`) asked for twice, through the
/// readers `reader(requests' indices, threads)` makes, in each chunking: the same values.
fn compare<'f>(
    rel: &str,
    names: &[String],
    alone: &[BranchData],
    entries: u64,
    reader: &dyn Fn(&[usize], usize) -> ColumnReader<'f>,
    failures: &mut Vec<String>,
) {
    let twice: Vec<usize> = (0..names.len()).chain(0..names.len()).collect();
    for threads in [1, 3] {
        for chunk in chunks(entries) {
            let got = read_together(&mut reader(&twice, threads), twice.len(), chunk);
            for (i, &c) in twice.iter().enumerate() {
                if got.get(i) != Some(&alone[c]) {
                    failures.push(format!(
                        "{rel}: {} ({threads} threads, chunks of {chunk}): differs from reading it alone",
                        names[c]
                    ));
                }
            }
        }
    }
}

fn check_trees(fx: &Fixture, failures: &mut Vec<String>) {
    let Ok(file) = RootFile::open(&fx.file) else {
        return;
    };
    let Ok(tree) = file.tree(&fx.tree) else {
        return;
    };
    let (mut branches, mut names, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    for (name, _) in &fx.branches {
        if let Some(b) = tree.branch(name)
            && let Ok(d) = file.read_branch(&tree, b)
        {
            branches.push(b);
            names.push(name.clone());
            alone.push(d);
        }
    }
    let reader = |which: &[usize], threads| {
        let asked: Vec<_> = which.iter().map(|&i| branches[i]).collect();
        ColumnReader::tree(&file, &tree, &asked, 0, threads).expect("a reader")
    };
    let entries = tree.entries.max(0) as u64;
    compare(&fx.rel, &names, &alone, entries, &reader, failures);
}

fn check_ntuples(fx: &Fixture, failures: &mut Vec<String>) {
    let Ok(file) = RootFile::open(&fx.file) else {
        return;
    };
    let Ok(ntuple) = file.ntuple(&fx.tree) else {
        return;
    };
    let (mut fields, mut names, mut alone) = (Vec::new(), Vec::new(), Vec::new());
    // Every leaf the reader reads (projected fields and the collections' sub-fields both).
    for f in &ntuple.fields {
        if let Ok(d) = file
            .field_cursor(&ntuple, f, 0)
            .and_then(|mut c| c.take(usize::MAX / 2))
        {
            fields.push(f);
            names.push(f.name.clone());
            alone.push(d);
        }
    }
    let reader = |which: &[usize], threads| {
        let asked: Vec<_> = which.iter().map(|&i| fields[i]).collect();
        ColumnReader::ntuple(&file, &ntuple, &asked, 0, threads).expect("a reader")
    };
    compare(&fx.rel, &names, &alone, ntuple.entries, &reader, failures);
}

#[test]
fn columns_read_together_equal_each_read_alone() {
    let mut failures = Vec::new();
    let trees = fixtures::all()
        .into_iter()
        .chain(fixtures::types())
        .chain(fixtures::local_trees());
    for fx in trees {
        check_trees(&fx, &mut failures);
    }
    for fx in fixtures::rntuples()
        .into_iter()
        .chain(fixtures::local_ntuples())
    {
        check_ntuples(&fx, &mut failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
