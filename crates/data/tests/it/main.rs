//! Integration tests of `gnn4c-data` on the real and generated ROOT files in `../shared/data`.
//!
//! Reference numbers (value counts and sums per branch) were computed with uproot 5.7.7 + awkward
//! (`ak.flatten(tree[branch].array())`, summed in float64) on the same files; sums are compared at
//! 1e-6 relative, far above f64 summation-order noise (~1e-12) and far below any misplaced value.

mod cache;
mod declared;
mod demo;
mod errors;
mod reading;

pub(crate) use gnn4c_testkit::shared;

pub(crate) fn assert_close(got: f64, want: f64, what: &str) {
    let tol = 1e-6 * want.abs().max(1.0);
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, uproot says {want}"
    );
}
