//! The interoperability tools scripts/setup installs into `target/interop-venv` (the
//! OpenSSF model-signing package, cyclonedx-python-lib), for `signing.rs` and `sbom.rs`.

use std::path::PathBuf;

/// `target/interop-venv/bin/NAME`; `None` outside CI when scripts/setup has not made it
/// (in CI its absence fails the test).
pub fn tool(name: &str) -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")));
    let tool = target.join("interop-venv/bin").join(name);
    if tool.exists() {
        return Some(tool);
    }
    assert!(
        std::env::var("CI").is_err(),
        "{} is missing: scripts/setup installs it",
        tool.display()
    );
    eprintln!("skipped: {} is missing (run scripts/setup)", tool.display());
    None
}
