//! Replays every fuzz target over its committed corpus (`fuzz/corpus/TARGET/`) and every
//! input that once crashed it (`fuzz/regressions/TARGET/`), so CI checks them without a
//! fuzzer. A panic in any target fails its test; the inputs are listed as they run.

use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = read
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| n != "README.md"))
        .collect();
    files.sort();
    files
}

fn replay(target: &str) {
    let run = nnc_fuzz::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("no fuzz target named {target}"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = inputs(&root.join("corpus").join(target));
    let regressions = inputs(&root.join("regressions").join(target));
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/{target} is empty: commit the target's minimized corpus"
    );
    for path in corpus.iter().chain(&regressions) {
        let bytes = std::fs::read(path).unwrap();
        eprintln!("{target}: {}", path.display());
        run(&bytes);
    }
    eprintln!(
        "{target}: {} corpus inputs and {} regression inputs replayed",
        corpus.len(),
        regressions.len()
    );
}

#[test]
fn every_target_has_a_replay_test() {
    let here = include_str!("replay.rs");
    for (name, _) in nnc_fuzz::TARGETS {
        assert!(
            here.contains(&format!("fn {name}()")),
            "target {name} has no replay test"
        );
    }
}

#[test]
fn quantize() {
    replay("quantize");
}

#[test]
fn onnx_import() {
    replay("onnx_import");
}

#[test]
fn tflite_import() {
    replay("tflite_import");
}

#[test]
fn nnc_file() {
    replay("nnc_file");
}

#[test]
fn cache_dir() {
    replay("cache_dir");
}

#[test]
fn device_profile() {
    replay("device_profile");
}

#[test]
fn npy() {
    replay("npy");
}

#[test]
fn tensor_proto() {
    replay("tensor_proto");
}

#[test]
fn compile_pipeline() {
    replay("compile_pipeline");
}

#[test]
fn control_flow() {
    replay("control_flow");
}

#[test]
fn capi_sequence() {
    replay("capi_sequence");
}
