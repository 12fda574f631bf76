//! Tasks (contract §6): binary, multiclass and multilabel losses, score transforms and metrics
//! (weighted loss, accuracy, ROC AUC in f64).
//!
//! Must not know models, graphs or file formats. Filled by issue 6.
