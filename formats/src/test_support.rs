//! Helpers for tests and benchmarks across the workspace (not part of the product API).

use std::path::PathBuf;

/// The shared data folder (`../shared` beside the repository), holding the real models.
///
/// Returns `None` after printing why when the folder is absent, so that a developer
/// without it can still run the rest of the suite. In CI (`CI` set) its absence is a
/// failure: nothing may be skipped there.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared"));
    if dir.join("models").is_dir() {
        return Some(dir);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "{} is missing, and CI must not skip tests that need it",
            dir.display()
        );
    }
    eprintln!(
        "skipping: {} is absent (the shared models are not available here)",
        dir.display()
    );
    None
}

/// A shared model file, or `None` (with the reason printed) when the folder is absent.
pub fn shared_model(name: &str) -> Option<PathBuf> {
    shared_dir().map(|d| d.join("models").join(name))
}
