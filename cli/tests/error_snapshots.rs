//! Snapshot tests of what users read when `nnc` refuses: the unsupported-operator
//! report, key errors, partition refusals, hostile-input refusals and usage errors. Each
//! snapshot in `cli/tests/snapshots/errors/` holds the command line, the exit code and
//! stderr (and stdout, if the command printed any) of one failing command.
//!
//! Stable by construction: every input is copied or written into a scratch directory
//! under a fixed name and `nnc` runs there with relative paths; compiled models are
//! written with `--reproducible` and fixed keys (the committed
//! `cli/tests/snapshots/test.key` and hex constants below), and key files are made mode
//! 600 so that no permission warning depends on the checkout. The environment variables
//! `nnc` reads that could change a message are removed.
//!
//! Normalisation (a safeguard: with relative paths none is expected to apply): the
//! scratch directory's path, as given and canonicalized, is replaced with `<scratch>`,
//! and the repository's root with `<repo>`. OS error texts ("No such file or directory
//! (os error 2)") and clap's usage lines are kept as they are; a new clap version or
//! another OS may change them.
//!
//! When a message changes on purpose, regenerate the files and review the change:
//!
//! ```sh
//! NNC_BLESS=1 cargo test -p nnc-cli --test error_snapshots && git diff cli/tests/snapshots
//! ```

#![cfg(unix)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use nnc_formats::tensor::{DataType, HostTensor};

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(rel)
}

fn snapshot_dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/snapshots/errors"
    ))
}

/// The variable `--key-env` names in the unset-variable case; removed from the child's
/// environment so that a developer's shell cannot set it.
const UNSET_VAR: &str = "NNC_ERROR_SNAPSHOT_UNSET_KEY";

/// A second aes128 key, not the one `tiny_cnn.nnc` is written with.
const OTHER_KEY: &str = "0f1e2d3c4b5a69788796a5b4c3d2e1f0\n";
/// 15 bytes: no algorithm's length.
const SHORT_KEY: &str = "00112233445566778899aabbccddee\n";
/// Not hex from its first character (and never echoed back).
const BAD_HEX_KEY: &str = "zz112233445566778899aabbccddeeff\n";

/// Runs `nnc` in `dir` and renders its failure as a snapshot; the command must fail
/// cleanly (an exit code other than success, internal error or panic).
fn failure(dir: &Path, args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_nnc"))
        .current_dir(dir)
        .args(args)
        .env_remove(UNSET_VAR)
        .env_remove("NNC_TEST_INTERNAL_PANIC")
        .output()
        .expect("nnc runs");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let code = o.status.code();
    assert!(
        matches!(code, Some(c) if c != 0 && c != 70 && c != 101),
        "nnc {args:?}: expected a clean refusal, got exit {code:?}\n{stderr}"
    );
    assert!(
        stderr.starts_with("error: ") && !stderr.contains("panicked"),
        "nnc {args:?}: {stderr}"
    );
    let mut text = format!("$ nnc {}\nexit: {}\n", args.join(" "), code.unwrap_or(-1));
    if !stdout.is_empty() {
        text.push_str("--- stdout\n");
        text.push_str(&stdout);
    }
    text.push_str("--- stderr\n");
    text.push_str(&stderr);
    normalise(&text, dir)
}

/// Replaces the scratch directory and the repository root with placeholders.
fn normalise(text: &str, dir: &Path) -> String {
    let mut out = text.to_string();
    let mut scratch = vec![dir.to_path_buf()];
    if let Ok(c) = dir.canonicalize() {
        scratch.push(c);
    }
    for d in scratch {
        out = out.replace(&*d.to_string_lossy(), "<scratch>");
    }
    let root = repo("");
    let mut roots = vec![root.clone()];
    if let Ok(c) = root.canonicalize() {
        roots.push(c);
    }
    for r in roots {
        out = out.replace(r.to_string_lossy().trim_end_matches('/'), "<repo>");
    }
    out
}

/// Runs `nnc` in `dir`; the command must succeed (it builds an input of a later case).
fn setup(dir: &Path, args: &[&str]) {
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
}

/// Writes a key file readable by its owner only (a wider mode adds a warning to stderr).
fn write_key(path: &Path, hex: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, hex).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// The byte offset of `kind`'s section in a compiled model, from `nnc inspect --json`.
fn section_offset(dir: &Path, model: &str, kind: &str) -> usize {
    let o = Command::new(env!("CARGO_BIN_EXE_nnc"))
        .current_dir(dir)
        .args(["inspect", model, "--json"])
        .output()
        .expect("nnc runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let sections = v["sections"].as_array().expect("sections");
    let s = sections
        .iter()
        .find(|s| s["kind"] == kind)
        .unwrap_or_else(|| panic!("{model} has no {kind} section: {v}"));
    s["offset"].as_u64().unwrap() as usize
}

/// Builds every input of the cases in `d`.
fn prepare(d: &Path) {
    for (from, to) in [
        ("testdata/models/tiny_cnn.onnx", "tiny_cnn.onnx"),
        ("testdata/models/tiny_cnn.input.npy", "input.npy"),
        (
            "testdata/onnx/unsupported_ops/model.onnx",
            "unsupported.onnx",
        ),
        (
            "testdata/tflite/unsupported_ops/model.tflite",
            "unsupported.tflite",
        ),
        ("testdata/devices/dsp-float.json", "dsp-float.json"),
        (
            "testdata/hostile/fold_to_gigabyte_weight.onnx",
            "fold_to_gigabyte_weight.onnx",
        ),
        (
            "testdata/hostile/constant_of_shape_many.onnx",
            "constant_of_shape_many.onnx",
        ),
        (
            "testdata/hostile/declared_shape_huge.onnx",
            "declared_shape_huge.onnx",
        ),
    ] {
        std::fs::copy(repo(from), d.join(to)).unwrap();
    }
    let test_key = std::fs::read_to_string(repo("cli/tests/snapshots/test.key")).unwrap();
    write_key(&d.join("test.key"), &test_key);
    write_key(&d.join("other.key"), OTHER_KEY);
    write_key(&d.join("short.key"), SHORT_KEY);
    write_key(&d.join("bad-hex.key"), BAD_HEX_KEY);

    setup(
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
    setup(
        d,
        &[
            "compile",
            "tiny_cnn.onnx",
            "-o",
            "plain.nnc",
            "--reproducible",
            "--encrypt",
            "none",
        ],
    );

    // Damaged copies of the compiled model: cut inside its metadata, and one bit of its
    // first weight field flipped.
    let bytes = std::fs::read(d.join("tiny_cnn.nnc")).unwrap();
    std::fs::write(d.join("truncated.nnc"), &bytes[..3000]).unwrap();
    let weights = section_offset(d, "tiny_cnn.nnc", "weights");
    let mut tampered = bytes;
    tampered[weights + 32] ^= 0x40;
    std::fs::write(d.join("tampered.nnc"), &tampered).unwrap();

    // Device profiles: not JSON; an operation name the NN set does not have; a field
    // out of range.
    std::fs::write(
        d.join("malformed.json"),
        r#"{ "name": "bad", "type": "npu","#,
    )
    .unwrap();
    std::fs::write(
        d.join("unknown-op.json"),
        r#"{"name": "npu-x", "type": "npu", "version": "1",
            "operations": [{"types": ["CONV_2D", "CONV_3D"], "operand_types": ["TENSOR_FLOAT32"]}]}"#,
    )
    .unwrap();
    std::fs::write(
        d.join("negative.json"),
        r#"{"name": "x", "type": "npu", "version": "1",
            "performance": {"TENSOR_FLOAT32": {"exec_time": -1, "power_usage": 1}}}"#,
    )
    .unwrap();

    // Tensor files for `nnc run`: wrong type and shape; not a tensor file; a real file
    // well beyond a lowered tensor limit; a tiny .pb whose dims declare 2^40 floats.
    let wrong = HostTensor {
        dtype: DataType::I64,
        shape: vec![2, 3],
        data: vec![0; 48],
    };
    std::fs::write(d.join("wrong.npy"), nnc_formats::npy::write_npy(&wrong)).unwrap();
    std::fs::write(d.join("garbage.npy"), b"nope").unwrap();
    let large = HostTensor::from_f32(vec![1, 3, 256, 512], &vec![0.0; 3 * 256 * 512]).unwrap();
    std::fs::write(d.join("large.npy"), nnc_formats::npy::write_npy(&large)).unwrap();
    let huge = nnc_compiler::onnx::proto::TensorProto {
        name: "input".into(),
        data_type: 1, // FLOAT
        dims: vec![1 << 40],
        raw_data: Some(vec![0u8; 4].into()),
        ..Default::default()
    };
    std::fs::write(
        d.join("huge.pb"),
        nnc_compiler::onnx::proto::encode_tensor(&huge),
    )
    .unwrap();

    // Not an ONNX protobuf: a field whose length runs past the end.
    std::fs::write(
        d.join("garbage.onnx"),
        b"\x08\x07\x12\xff\xff\xff\xff\x0fnot a model",
    )
    .unwrap();
}

/// Every case: its snapshot's name (without `.txt`) and the command line.
const CASES: &[(&str, &[&str])] = &[
    // The unsupported-operator report.
    (
        "unsupported-onnx",
        &[
            "compile",
            "unsupported.onnx",
            "-o",
            "out.nnc",
            "--encrypt",
            "none",
        ],
    ),
    (
        "unsupported-tflite",
        &[
            "compile",
            "unsupported.tflite",
            "-o",
            "out.nnc",
            "--encrypt",
            "none",
        ],
    ),
    // Keys.
    (
        "key-missing-compile",
        &["compile", "tiny_cnn.onnx", "-o", "out.nnc"],
    ),
    ("key-missing-verify", &["verify", "tiny_cnn.nnc"]),
    (
        "key-wrong-verify",
        &["verify", "tiny_cnn.nnc", "--key-file", "other.key"],
    ),
    (
        "key-malformed-hex-verify",
        &["verify", "tiny_cnn.nnc", "--key-file", "bad-hex.key"],
    ),
    (
        "key-malformed-hex-compile",
        &[
            "compile",
            "tiny_cnn.onnx",
            "-o",
            "out.nnc",
            "--key-file",
            "bad-hex.key",
        ],
    ),
    (
        "key-wrong-length-verify",
        &["verify", "tiny_cnn.nnc", "--key-file", "short.key"],
    ),
    (
        "key-wrong-length-compile",
        &[
            "compile",
            "tiny_cnn.onnx",
            "-o",
            "out.nnc",
            "--encrypt",
            "aes256",
            "--key-file",
            "test.key",
        ],
    ),
    (
        "key-for-digests-only-file",
        &["verify", "plain.nnc", "--key-file", "test.key"],
    ),
    (
        "key-file-missing",
        &["verify", "tiny_cnn.nnc", "--key-file", "no-such.key"],
    ),
    (
        "key-env-unset",
        &["verify", "tiny_cnn.nnc", "--key-env", UNSET_VAR],
    ),
    // Partition refusals and device profiles.
    (
        "partition-strict",
        &[
            "compile",
            "tiny_cnn.onnx",
            "-o",
            "out.nnc",
            "--devices",
            "dsp-float.json",
            "--partition",
            "strict",
            "--key-file",
            "test.key",
        ],
    ),
    (
        "partition-no-plaintext-fallback",
        &[
            "compile",
            "tiny_cnn.onnx",
            "-o",
            "out.nnc",
            "--devices",
            "dsp-float.json",
            "--encrypt",
            "sm4",
            "--mode",
            "cbc",
            "--no-plaintext-fallback",
            "--key-file",
            "test.key",
        ],
    ),
    (
        "profile-malformed-json",
        &[
            "compile",
            "tiny_cnn.onnx",
            "-o",
            "out.nnc",
            "--devices",
            "malformed.json",
            "--key-file",
            "test.key",
        ],
    ),
    (
        "profile-unknown-operation",
        &[
            "compile",
            "tiny_cnn.onnx",
            "-o",
            "out.nnc",
            "--devices",
            "unknown-op.json",
            "--key-file",
            "test.key",
        ],
    ),
    (
        "profile-field-out-of-range",
        &["devices", "--devices", "negative.json"],
    ),
    // Hostile input.
    (
        "nnc-truncated-verify",
        &["verify", "truncated.nnc", "--key-file", "test.key"],
    ),
    (
        "nnc-truncated-run",
        &[
            "run",
            "truncated.nnc",
            "--key-file",
            "test.key",
            "--input",
            "input.npy",
            "--output-dir",
            "out",
        ],
    ),
    (
        "nnc-tampered-verify",
        &["verify", "tampered.nnc", "--key-file", "test.key"],
    ),
    (
        "hostile-fold-bomb",
        &[
            "compile",
            "fold_to_gigabyte_weight.onnx",
            "-o",
            "out.nnc",
            "--encrypt",
            "none",
        ],
    ),
    (
        "hostile-memory-bomb",
        &[
            "compile",
            "constant_of_shape_many.onnx",
            "-o",
            "out.nnc",
            "--encrypt",
            "none",
        ],
    ),
    (
        "hostile-declared-shape-huge",
        &[
            "compile",
            "declared_shape_huge.onnx",
            "-o",
            "out.nnc",
            "--encrypt",
            "none",
        ],
    ),
    ("onnx-malformed-protobuf", &["inspect", "garbage.onnx"]),
    (
        "run-wrong-type-and-shape",
        &[
            "run",
            "tiny_cnn.nnc",
            "--key-file",
            "test.key",
            "--input",
            "wrong.npy",
            "--output-dir",
            "out",
        ],
    ),
    (
        "run-not-a-tensor-file",
        &[
            "run",
            "tiny_cnn.nnc",
            "--key-file",
            "test.key",
            "--input",
            "garbage.npy",
            "--output-dir",
            "out",
        ],
    ),
    (
        "run-input-file-too-large",
        &[
            "run",
            "tiny_cnn.nnc",
            "--key-file",
            "test.key",
            "--input",
            "large.npy",
            "--output-dir",
            "out",
            "--limit",
            "tensor=64K",
        ],
    ),
    (
        "run-input-declared-too-large",
        &[
            "run",
            "tiny_cnn.nnc",
            "--key-file",
            "test.key",
            "--input",
            "huge.pb",
            "--output-dir",
            "out",
        ],
    ),
    // Usage.
    ("usage-unknown-flag", &["compile", "--no-such-flag"]),
    (
        "usage-conflicting-key-options",
        &[
            "compile",
            "tiny_cnn.onnx",
            "-o",
            "out.nnc",
            "--key-file",
            "test.key",
            "--key-env",
            UNSET_VAR,
        ],
    ),
    (
        "usage-unknown-input-name",
        &[
            "run",
            "tiny_cnn.onnx",
            "--input",
            "image=input.npy",
            "--output-dir",
            "out",
        ],
    ),
];

/// Compares `actual` with the snapshot `name`, or writes it under `NNC_BLESS`.
fn check(name: &str, actual: &str, mismatches: &mut Vec<String>) {
    let path = snapshot_dir().join(format!("{name}.txt"));
    common::check_snapshot(&path, name, actual, mismatches);
}

/// Snapshot files no case writes: removed under `NNC_BLESS`, reported otherwise.
fn stale_snapshots(mismatches: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(snapshot_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let known = file
            .strip_suffix(".txt")
            .is_some_and(|n| CASES.iter().any(|(name, _)| *name == n));
        if known {
            continue;
        }
        if std::env::var_os("NNC_BLESS").is_some() {
            std::fs::remove_file(entry.path()).unwrap();
        } else {
            mismatches.push(format!("{file}: no case writes this snapshot"));
        }
    }
}

#[test]
fn error_messages_match_their_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    prepare(d);
    let mut mismatches = Vec::new();
    for (name, args) in CASES {
        check(name, &failure(d, args), &mut mismatches);
        // A refusal leaves no output behind.
        assert!(!d.join("out.nnc").exists(), "{name} wrote out.nnc");
    }
    stale_snapshots(&mut mismatches);
    assert!(
        mismatches.is_empty(),
        "{} error snapshot(s) differ; if the change is intended, run \
         `NNC_BLESS=1 cargo test -p nnc-cli --test error_snapshots` and review `git diff`:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[test]
fn case_names_are_unique() {
    let mut names: Vec<&str> = CASES.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before, "two cases share a snapshot name");
}
