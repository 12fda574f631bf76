//! The project's ROOT reader: files written by ROOT 5 to 6.40 and by uproot, read without a
//! ROOT installation or another reader library.
//!
//! Layers, bottom up: `source/` (where a file's bytes come from: local, XRootD, HTTP),
//! `cursor.rs` (bounds-checked big-endian reads), `compress.rs` (ROOT's
//! compressed blocks: zlib, LZMA, LZ4 with its checksum, zstd), `file.rs` (header, nested
//! directories, keys, an object's bytes), `tree.rs` (TTree metadata: branches, leaves, baskets), `rntuple/` (RNTuple: anchor,
//! envelopes, fields, pages). Every failure is a [`RootError`] naming the file and
//! the place in it; no input makes it panic.

mod columns;
mod compress;
mod cursor;
mod error;
mod file;
mod parallel;
mod read;
mod rntuple;
mod simd;
mod source;
mod tree;

pub use columns::{ColumnReader, Taken};
pub use compress::RawBlock;
pub use error::RootError;
pub use file::{Key, RootFile};
pub use parallel::map as map_on_threads;
pub use read::{BranchCursor, BranchData, Interpretation, Layout, Number, Values, interpret};
pub use rntuple::{FieldCursor, NtupleField, NtupleInfo, PageValues};
pub use source::{
    REMOTE_FILES_KEPT, RemoteIdentity, is_url, network_bytes_received, open_ahead, remote_identity,
};
pub use tree::{BranchInfo, ElementInfo, EmbeddedBasket, LeafInfo, TreeInfo};
