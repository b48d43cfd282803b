//! Tells the tests whether the shared real-model folder (`../shared` beside the
//! repository) is present: without it (and outside CI), tests that need it are compiled
//! with `cfg(shared_absent)` and reported as ignored, never as passed. In CI its absence
//! is a failure instead (`nnc_formats::test_support::shared_dir` panics). Likewise
//! `cfg(external_absent)` for the models `scripts/fetch-models` extracts from public
//! packages into `testdata/external`.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(shared_absent)");
    println!("cargo::rustc-check-cfg=cfg(external_absent)");
    println!("cargo::rerun-if-env-changed=CI");
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/models");
    println!("cargo::rerun-if-changed={}", shared.display());
    if !shared.is_dir() && std::env::var_os("CI").is_none() {
        println!("cargo::rustc-cfg=shared_absent");
    }
    // Models from public packages, extracted by scripts/fetch-models (not committed).
    let external = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/external");
    println!("cargo::rerun-if-changed={}", external.display());
    if !external.is_dir() && std::env::var_os("CI").is_none() {
        println!("cargo::rustc-cfg=external_absent");
    }
}
