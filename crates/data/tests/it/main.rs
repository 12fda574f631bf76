//! Integration tests of `gnn4c-data` on the real and generated ROOT files in `../shared/data`.
//!
//! Reference numbers (value counts and sums per branch) were computed with uproot 5.7.7 + awkward
//! (`ak.flatten(tree[branch].array())`, summed in float64) on the same files; sums are compared at
//! 1e-6 relative, far above f64 summation-order noise (~1e-12) and far below any misplaced value.

mod cache;
mod demo;
mod errors;
mod reading;

use std::path::PathBuf;

/// `../shared` (or `$GNN4C_SHARED`) joined with `rel`; panics naming the path when it is missing.
pub(crate) fn shared(rel: &str) -> PathBuf {
    let root = std::env::var_os("GNN4C_SHARED").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
        PathBuf::from,
    );
    let p = root.join(rel);
    assert!(
        p.exists(),
        "test data missing: looked for {} (set GNN4C_SHARED to the shared folder)",
        p.display()
    );
    p
}

pub(crate) fn assert_close(got: f64, want: f64, what: &str) {
    let tol = 1e-6 * want.abs().max(1.0);
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, uproot says {want}"
    );
}
