//! `examples/c/classify.c` built with the system C compiler against this crate's shared
//! library, run on compiled models, and run under valgrind when it is installed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::{
    VALGRIND, argmax, build_c, compile, key, repo, testdata, valgrind_available, write_key_file,
};

/// Compiles classify once per test process, into a directory kept until it exits.
fn classify() -> &'static Path {
    static BUILT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &BUILT
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let exe = build_c(
                &repo().join("examples/c/classify.c"),
                dir.path(),
                "classify",
            );
            (dir, exe)
        })
        .1
}

/// A source model compiled with a fresh key: the directory holding `model.nnc` and
/// `model.key` (as `nnc keygen` writes it).
fn compiled(source: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let k = key();
    std::fs::write(dir.path().join("model.nnc"), compile(source, Some(&k))).expect("write");
    write_key_file(&dir.path().join("model.key"), &k);
    dir
}

/// Runs classify, under `wrapper` (such as valgrind and its options) when not empty.
fn run(wrapper: &[&str], model: &Path, key: &Path, input: &Path) -> Output {
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(classify());
            c
        }
        None => Command::new(classify()),
    };
    // cargo's LD_LIBRARY_PATH lists target/<profile> (perhaps a stale library) first.
    cmd.env_remove("LD_LIBRARY_PATH")
        .arg(model)
        .arg(key)
        .arg(input);
    cmd.output().expect("classify runs")
}

/// The printed indices, after checking the exit status.
fn indices(out: &Output) -> Vec<usize> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "classify failed ({}): {stderr}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap_or_else(|_| panic!("not an index: {l:?}")))
        .collect()
}

fn reference_argmax(path: &Path) -> usize {
    let t = nnc_formats::npy::read_npy_file(path).expect("reference output");
    argmax(&t.to_f32_vec().expect("float32"))
}

/// Checks five distinct in-range indices, the first the reference's argmax.
fn check_top5(printed: &[usize], reference: &Path, classes: usize) {
    assert_eq!(printed.len(), 5, "{printed:?}");
    assert_eq!(printed[0], reference_argmax(reference), "{printed:?}");
    let mut sorted = printed.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 5, "{printed:?}");
    assert!(printed.iter().all(|&i| i < classes), "{printed:?}");
}

#[test]
fn classify_tiny_cnn_and_refuse_a_wrong_key() {
    let dir = compiled(&testdata("tiny_cnn.onnx"));
    let (model, key_file) = (dir.path().join("model.nnc"), dir.path().join("model.key"));
    let input = testdata("tiny_cnn.input.npy");
    let out = run(&[], &model, &key_file, &input);
    check_top5(&indices(&out), &testdata("tiny_cnn.output.npy"), 10);

    let wrong = dir.path().join("wrong.key");
    write_key_file(&wrong, &key());
    let out = run(&[], &model, &wrong, &input);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("NNC_RESULT_INTEGRITY_FAILURE") && stderr.contains("wrong key"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    // An input of the wrong size is refused by the binding, not read out of bounds.
    let out = run(
        &[],
        &model,
        &key_file,
        &repo().join("testdata/models/tiny_cnn.output.npy"),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NNC_RESULT_BAD_DATA"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(shared_absent, ignore = "needs ../shared")]
fn classify_mobilenet_v2_matches_the_reference() {
    let Some(source) = nnc_formats::test_support::shared_model("mobilenet_v2.onnx") else {
        return;
    };
    let dir = compiled(&source);
    let out = run(
        &[],
        &dir.path().join("model.nnc"),
        &dir.path().join("model.key"),
        &source.with_file_name("mobilenet_v2.onnx.input.npy"),
    );
    check_top5(
        &indices(&out),
        &source.with_file_name("mobilenet_v2.onnx.output.npy"),
        1000,
    );
}

/// Valgrind finds no memory error and no definite leak in a whole run (tiny_cnn:
/// MobileNetV2 takes minutes under valgrind). Skipped without valgrind, except in CI,
/// where `scripts/setup` installs it.
#[test]
fn classify_is_clean_under_valgrind() {
    if !valgrind_available() {
        return;
    }
    let dir = compiled(&testdata("tiny_cnn.onnx"));
    let out = run(
        VALGRIND,
        &dir.path().join("model.nnc"),
        &dir.path().join("model.key"),
        &testdata("tiny_cnn.input.npy"),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "valgrind reports:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_top5(&indices(&out), &testdata("tiny_cnn.output.npy"), 10);
}
