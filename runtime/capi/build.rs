//! Tells the tests whether the shared real-model folder (`../shared` beside the
//! repository) is present, like `compiler/build.rs` (which cannot be reused here: it
//! finds the folder relative to a crate at the repository's top level). Without it (and
//! outside CI) the tests that need it are compiled with `cfg(shared_absent)` and
//! reported as ignored; in CI its absence is a failure.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(shared_absent)");
    println!("cargo::rerun-if-env-changed=CI");
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models");
    println!("cargo::rerun-if-changed={}", shared.display());
    if !shared.is_dir() && std::env::var_os("CI").is_none() {
        println!("cargo::rustc-cfg=shared_absent");
    }
}
