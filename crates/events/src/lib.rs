//! Events: `EventSample`, one collision event read from one entry of one ROOT tree (contract §1).
//!
//! Owns the event's identity (sample, source file, tree, entry, event number), its label and weight,
//! and the object collections as structs of arrays in GeV and radians, plus the named skip reasons
//! and counters every stage uses to report events it did not keep. Plain data and pure helpers:
//! no I/O, no Burn, no Arrow, no oxyroot (checked by `.ci/run`). Start reading at [`EventSample`].

mod collections;
mod sample;
mod skip;

pub use collections::{
    Collection, ELECTRON_MASS, Jets, Leptons, MUON_MASS, Met, Photons, polar_from_cartesian,
};
pub use sample::{EventId, EventSample, Label};
pub use skip::SkipCounts;
