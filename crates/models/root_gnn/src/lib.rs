//! The ROOT-GNN Edge_Network (arXiv:2412.10665; contract §5) as a Burn module generic over the backend.
//!
//! Owns the MLP blocks, encoders, shared message-passing updates, readouts, decoder and `classify`
//! head, the backbone/head split, and weight import/export with PyTorch state-dict names.
//! Must not know files, datasets, tasks or training. Filled by issue 5.
