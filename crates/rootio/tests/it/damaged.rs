//! Truncated and bit-flipped copies of every test file: an error naming the file, never a
//! panic.

use gnn4c_rootio::RootFile;

use crate::fixtures;

/// Opens `path` and reads every branch of its trees and every field of its RNTuples; the first
/// error, if any.
fn read_everything(path: &std::path::Path) -> Result<usize, gnn4c_rootio::RootError> {
    let file = RootFile::open(path)?;
    let mut values = 0;
    for t in file.tree_paths() {
        let tree = file.tree(&t)?;
        for b in tree.all_branches() {
            if gnn4c_rootio::interpret(b).is_ok() {
                values += file.read_branch(&tree, b)?.len();
            }
        }
    }
    for name in file.ntuple_paths() {
        let ntuple = file.ntuple(&name)?;
        for f in ntuple.fields.iter().filter(|f| f.read.is_ok()) {
            values += file
                .field_cursor(&ntuple, f, 0)?
                .take(usize::MAX / 2)?
                .len();
        }
    }
    Ok(values)
}

#[test]
fn truncated_and_bit_flipped_copies_fail_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut errors = 0usize;
    for fx in fixtures::all()
        .into_iter()
        .chain(fixtures::rntuples())
        .chain(fixtures::local_trees())
        .chain(fixtures::local_ntuples())
    {
        let bytes = std::fs::read(&fx.file).expect("read");
        let n = bytes.len();
        let mut copies: Vec<(String, Vec<u8>)> = [0, 3, 50, n / 10, n / 2, n - 100, n - 1]
            .into_iter()
            .map(|len| (format!("truncated to {len}"), bytes[..len.min(n)].to_vec()))
            .collect();
        for k in 1..24 {
            let mut b = bytes.clone();
            let at = k * n / 24;
            for x in &mut b[at..(at + 8).min(n)] {
                *x ^= 0xA5;
            }
            copies.push((format!("8 bytes flipped at {at}"), b));
        }
        for (what, copy) in copies {
            let path = dir.path().join("copy.root");
            std::fs::write(&path, &copy).expect("write");
            if let Err(e) = read_everything(&path) {
                let msg = e.to_string();
                assert!(msg.contains("copy.root"), "{}, {what}: {msg}", fx.rel);
                errors += 1;
            }
        }
    }
    assert!(errors > 0, "damaged copies were read without an error");
}
