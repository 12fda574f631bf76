//! Inference (contract §10): the prediction loop without autodiff and output rows that keep every
//! event's identity.
//!
//! Generic over model and batch traits; writers for NPZ and ROOT friend trees live in `gnn4c-data`.
//! Filled by issue 7.
