//! Snapshot tests of what users read: `nnc inspect` (text and JSON) and `nnc dump` (dot,
//! JSON and text) of source and compiled models. Inputs are copied from testdata into a
//! scratch directory under fixed names (so the paths printed are stable), compiled
//! models are written with `--reproducible` and the committed test key
//! `cli/tests/snapshots/test.key`, and each output is compared with its file in
//! `cli/tests/snapshots/out/`.
//!
//! When an output changes on purpose, regenerate the files and review the change:
//!
//! ```sh
//! NNC_BLESS=1 cargo test -p nnc-cli --test snapshots && git diff cli/tests/snapshots
//! ```

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(rel)
}

fn snapshots() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots"))
}

/// Runs `nnc` in `dir` and returns its stdout; the command must succeed.
fn nnc(dir: &Path, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_nnc"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("nnc runs");
    assert!(
        o.status.success(),
        "nnc {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("UTF-8 output")
}

/// Compares `actual` with the snapshot `name`, or writes it under `NNC_BLESS`.
fn check(name: &str, actual: &str, mismatches: &mut Vec<String>) {
    common::check_snapshot(
        &snapshots().join("out").join(name),
        name,
        actual,
        mismatches,
    );
}

#[test]
fn inspect_and_dump_match_their_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (from, to) in [
        ("testdata/models/tiny_cnn.onnx", "tiny_cnn.onnx"),
        (
            "testdata/tflite/conv_same_relu6_int8/model.tflite",
            "conv_int8.tflite",
        ),
        ("testdata/devices/npu-int8.json", "npu-int8.json"),
        ("cli/tests/snapshots/test.key", "test.key"),
    ] {
        std::fs::copy(repo(from), d.join(to)).unwrap();
    }
    nnc(
        d,
        &[
            "compile",
            "tiny_cnn.onnx",
            "-o",
            "tiny_cnn.nnc",
            "--reproducible",
            "--key-file",
            "test.key",
        ],
    );
    nnc(
        d,
        &[
            "compile",
            "conv_int8.tflite",
            "-o",
            "conv_int8.nnc",
            "--reproducible",
            "--key-file",
            "test.key",
            "--devices",
            "npu-int8.json",
        ],
    );
    let mut mismatches = Vec::new();
    let cases: &[(&str, &[&str])] = &[
        ("inspect-tiny_cnn.onnx.txt", &["inspect", "tiny_cnn.onnx"]),
        (
            "inspect-tiny_cnn.onnx.json",
            &["inspect", "tiny_cnn.onnx", "--json"],
        ),
        (
            "inspect-conv_int8.tflite.txt",
            &["inspect", "conv_int8.tflite"],
        ),
        (
            "inspect-conv_int8.tflite.json",
            &["inspect", "conv_int8.tflite", "--json"],
        ),
        (
            "inspect-tiny_cnn.nnc.txt",
            &["inspect", "tiny_cnn.nnc", "--key-file", "test.key"],
        ),
        (
            "inspect-tiny_cnn.nnc.json",
            &[
                "inspect",
                "tiny_cnn.nnc",
                "--key-file",
                "test.key",
                "--json",
            ],
        ),
        (
            "inspect-partition-conv_int8.nnc.txt",
            &["inspect", "conv_int8.nnc", "--partition"],
        ),
        (
            "dump-tiny_cnn.onnx.dot",
            &["dump", "tiny_cnn.onnx", "--format", "dot"],
        ),
        (
            "dump-tiny_cnn.onnx.json",
            &["dump", "tiny_cnn.onnx", "--format", "json"],
        ),
        (
            "dump-tiny_cnn.onnx.txt",
            &["dump", "tiny_cnn.onnx", "--format", "text"],
        ),
        ("dump-conv_int8.tflite.txt", &["dump", "conv_int8.tflite"]),
        (
            "dump-tiny_cnn.nnc.dot",
            &["dump", "tiny_cnn.nnc", "--format", "dot"],
        ),
        (
            "dump-tiny_cnn.nnc.json",
            &["dump", "tiny_cnn.nnc", "--format", "json"],
        ),
        (
            "dump-tiny_cnn.nnc.txt",
            &["dump", "tiny_cnn.nnc", "--format", "text"],
        ),
        (
            "dump-conv_int8.nnc.dot",
            &["dump", "conv_int8.nnc", "--format", "dot"],
        ),
    ];
    for (name, args) in cases {
        check(name, &nnc(d, args), &mut mismatches);
    }
    assert!(
        mismatches.is_empty(),
        "{} snapshot(s) differ; if the change is intended, run \
         `NNC_BLESS=1 cargo test -p nnc-cli --test snapshots` and review `git diff`:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}
