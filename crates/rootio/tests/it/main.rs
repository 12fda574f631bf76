//! The reader against uproot on every ROOT file in `../shared/data` (fixtures in
//! `../shared/fixtures/rootio`), and against damaged copies of them.

mod damaged;
mod fixtures;
mod metadata;
mod rntuple;
mod together;
mod values;
