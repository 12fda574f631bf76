//! `xz2` served by `liblzma` (a maintained fork with the same API).
//!
//! oxyroot 0.1.25 depends on `xz2` (native library `lzma-sys`), while Burn's optional CPU backend
//! depends on `liblzma-sys`; Cargo allows one package linking `lzma` in a lock file, optional or not.
//! This shim, patched in for `xz2` at the workspace root, makes both use `liblzma-sys`.
pub use liblzma::*;
