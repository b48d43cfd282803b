//! Optimization passes over the NN IR, each in its own module, and the pipeline that runs
//! them while recording what each changed (shown by `nnc inspect`).

pub mod dead_code;
pub mod fold_batch_norm;
pub mod fold_constants;
pub mod fuse_activations;
pub mod fuse_gelu;
pub mod graph;
pub mod remove_identities;
pub mod transposes;

use std::collections::BTreeMap;

use nnc_formats::nn::Model;

use crate::error::CompileError;

/// What one pass run changed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PassReport {
    pub pass: &'static str,
    pub operations_before: usize,
    pub operations_after: usize,
    /// Kind of change -> how many times it happened.
    pub changes: BTreeMap<String, usize>,
}

type PassFn = fn(&mut Model) -> Result<BTreeMap<String, usize>, String>;

/// The passes in pipeline order. Identity removal and constant folding run first so the
/// layout pass sees a clean graph (with GELU's erf form fused into one operation, which a
/// transpose passes like any elementwise one); dead code goes right after it (the transposes it
/// bypassed would otherwise still count as readers); batch-norm folding must run after
/// the layout pass (which moves the channel constants next to their convolution) and
/// before activation fusion (a fused activation would block folding).
pub const PIPELINE: &[(&str, PassFn)] = &[
    ("remove-identities", remove_identities::run),
    ("fold-constants", fold_constants::run),
    ("fuse-gelu", fuse_gelu::run),
    ("transposes", transposes::run),
    ("dead-code", dead_code::run),
    ("remove-identities", remove_identities::run),
    ("fold-batch-norm", fold_batch_norm::run),
    ("fuse-activations", fuse_activations::run),
    ("fold-constants", fold_constants::run),
    ("dead-code", dead_code::run),
];

/// Runs the whole pipeline, then validates the result.
pub fn optimize(model: &mut Model) -> Result<Vec<PassReport>, CompileError> {
    let mut reports = Vec::new();
    for &(name, pass) in PIPELINE {
        let before = model.main.operations.len();
        let changes = pass(model).map_err(|message| CompileError::Pass {
            pass: name,
            message,
        })?;
        reports.push(PassReport {
            pass: name,
            operations_before: before,
            operations_after: model.main.operations.len(),
            changes,
        });
    }
    nnc_formats::nn::validate(model)?;
    Ok(reports)
}
