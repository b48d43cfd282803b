//! Real models from public packages (`scripts/fetch-models`), against ONNX Runtime's
//! outputs (`scripts/gen_packaged_references.py`, testdata/packaged):
//!
//! - streaming speech models with ONNX `If` (silero-vad's published models, and the
//!   silero-vad model openWakeWord ships), compiled with encrypted weights and run chunk
//!   after chunk with `nnc run --stream`, the state outputs fed back as the next chunk's
//!   state inputs; every chunk's probability and state within 1e-4. Each with `sr` bound
//!   at compile time (the `If` on it folds) and with `sr` given at run time (the `If`
//!   stays an IF operation with two referenced subgraphs);
//! - PaddleOCR's text-direction classifier (rapidocr), whose batch dimension is -1,
//!   compiled with `--input-shape`.

use std::path::{Path, PathBuf};
use std::process::Command;

use nnc_formats::npy::read_npy_file;
use nnc_formats::tensor::HostTensor;
use nnc_formats::test_support::external_model;

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn check(cmd: &mut Command) -> String {
    let o = cmd.output().expect("nnc runs");
    assert!(
        o.status.success(),
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn references(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/packaged")
        .join(case)
}

fn floats(t: &HostTensor) -> Vec<f32> {
    t.data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// A streaming case: how to compile the model, and which outputs feed which inputs.
struct Case<'a> {
    name: &'a str,
    package: &'a str,
    model: &'a str,
    /// `Some(rate)`: `sr` is bound at compile time (the `If` on it folds); `None`: the
    /// model takes `sr` at run time (or has no `sr`).
    bind_rate: Option<i64>,
    /// `sr` given at run time, every step.
    run_rate: Option<i64>,
    chunk: u32,
    states: &'a [(&'a str, &'a str)],
    feed_back: &'a [&'a str],
}

fn run_case(case: &Case) {
    let Some(model) = external_model(case.package, case.model) else {
        return;
    };
    let refs = references(case.name);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("weights.key");
    check(
        nnc()
            .args(["keygen", "--algorithm", "aes128", "-o"])
            .arg(&key),
    );
    let compiled = dir.path().join("model.nnc");
    let mut compile = nnc();
    compile
        .arg("compile")
        .arg(&model)
        .arg("--key-file")
        .arg(&key)
        .arg("-o")
        .arg(&compiled)
        .arg("--input-shape")
        .arg(format!("input=1x{}", case.chunk));
    for (name, dims) in case.states {
        compile.arg("--input-shape").arg(format!("{name}={dims}"));
    }
    let sr = dir.path().join("sr.npy");
    if let Some(rate) = case.bind_rate.or(case.run_rate) {
        std::fs::write(
            &sr,
            nnc_formats::npy::write_npy(&HostTensor {
                dtype: nnc_formats::tensor::DataType::I64,
                shape: vec![],
                data: rate.to_le_bytes().to_vec(),
            }),
        )
        .unwrap();
    }
    if case.bind_rate.is_some() {
        compile
            .arg("--bind-input")
            .arg(format!("sr={}", sr.display()));
    }
    check(&mut compile);
    let mut run = nnc();
    run.arg("run")
        .arg(&compiled)
        .arg("--key-file")
        .arg(&key)
        .arg("--stream")
        .arg(format!("input={}", refs.join("chunks.npy").display()))
        .arg("--output-dir")
        .arg(dir.path());
    if case.run_rate.is_some() {
        run.arg("--input").arg(format!("sr={}", sr.display()));
    }
    for pair in case.feed_back {
        run.arg("--feed-back").arg(pair);
    }
    let printed = check(&mut run);
    assert!(printed.starts_with("24 steps"), "{printed}");
    for k in 0..=case.feed_back.len() {
        let file = format!("output_{k}.npy");
        let ours = read_npy_file(dir.path().join(&file)).unwrap();
        let reference = read_npy_file(refs.join(&file)).unwrap();
        assert_eq!(ours.shape, reference.shape, "{}: {file} shape", case.name);
        let (a, b) = (floats(&ours), floats(&reference));
        let steps = ours.shape[0];
        let per_step = a.len() / steps;
        for t in 0..steps {
            let worst = a[t * per_step..(t + 1) * per_step]
                .iter()
                .zip(&b[t * per_step..(t + 1) * per_step])
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(
                worst <= 1e-4,
                "{}: {file} step {t} differs from ONNX Runtime by {worst}",
                case.name
            );
        }
    }
}

#[test]
#[cfg_attr(external_absent, ignore = "needs scripts/fetch-models")]
fn silero_vad_16k_with_sr_bound() {
    run_case(&Case {
        name: "silero_vad_16k",
        package: "silero-vad",
        model: "silero_vad.onnx",
        bind_rate: Some(16000),
        run_rate: None,
        chunk: 512,
        states: &[("state", "2x1x128")],
        feed_back: &["stateN=state"],
    });
}

#[test]
#[cfg_attr(external_absent, ignore = "needs scripts/fetch-models")]
fn silero_vad_8k_with_sr_bound() {
    run_case(&Case {
        name: "silero_vad_8k",
        package: "silero-vad",
        model: "silero_vad.onnx",
        bind_rate: Some(8000),
        run_rate: None,
        chunk: 256,
        states: &[("state", "2x1x128")],
        feed_back: &["stateN=state"],
    });
}

#[test]
#[cfg_attr(external_absent, ignore = "needs scripts/fetch-models")]
fn silero_vad_op15_shape_conditions_fold() {
    // Every If of this export tests a static shape: all fold once shapes are fixed.
    run_case(&Case {
        name: "silero_vad_op15",
        package: "silero-vad",
        model: "silero_vad_16k_op15.onnx",
        bind_rate: None,
        run_rate: Some(16000),
        chunk: 512,
        states: &[("state", "2x1x128")],
        feed_back: &["stateN=state"],
    });
}

#[test]
#[cfg_attr(external_absent, ignore = "needs scripts/fetch-models")]
fn silero_vad_8k_with_if_at_run_time() {
    run_case(&Case {
        name: "silero_vad_8k",
        package: "silero-vad",
        model: "silero_vad.onnx",
        bind_rate: None,
        run_rate: Some(8000),
        chunk: 256,
        states: &[("state", "2x1x128")],
        feed_back: &["stateN=state"],
    });
}

#[test]
#[cfg_attr(external_absent, ignore = "needs scripts/fetch-models")]
fn openwakeword_vad_with_if_at_run_time() {
    run_case(&Case {
        name: "openwakeword_vad",
        package: "openwakeword",
        model: "silero_vad.onnx",
        bind_rate: None,
        run_rate: Some(16000),
        chunk: 512,
        states: &[("h", "2x1x64"), ("c", "2x1x64")],
        feed_back: &["hn=h", "cn=c"],
    });
}

#[test]
#[cfg_attr(external_absent, ignore = "needs scripts/fetch-models")]
fn openwakeword_vad_with_sr_bound() {
    run_case(&Case {
        name: "openwakeword_vad",
        package: "openwakeword",
        model: "silero_vad.onnx",
        bind_rate: Some(16000),
        run_rate: None,
        chunk: 512,
        states: &[("h", "2x1x64"), ("c", "2x1x64")],
        feed_back: &["hn=h", "cn=c"],
    });
}

/// The If folds, or stays: `nnc inspect` says which.
#[test]
#[cfg_attr(external_absent, ignore = "needs scripts/fetch-models")]
fn inspect_reports_folded_and_kept_ifs() {
    let Some(model) = external_model("silero-vad", "silero_vad.onnx") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sr = dir.path().join("sr.npy");
    std::fs::write(
        &sr,
        nnc_formats::npy::write_npy(&HostTensor {
            dtype: nnc_formats::tensor::DataType::I64,
            shape: vec![],
            data: 16000i64.to_le_bytes().to_vec(),
        }),
    )
    .unwrap();
    let shapes = [
        "--input-shape",
        "input=1x512",
        "--input-shape",
        "state=2x1x128",
    ];
    let bound = check(
        nnc()
            .arg("inspect")
            .arg(&model)
            .args(shapes)
            .arg("--bind-input")
            .arg(format!("sr={}", sr.display())),
    );
    // The If on `sr` and the six shape tests nested in its 16 kHz branch (81 operations:
    // the LSTM is one UNIDIRECTIONAL_SEQUENCE_LSTM).
    assert!(
        bound.contains(
            "fold-if            81 -> 81 operations  If folded to its else branch: 3; \
             If folded to its then branch: 4"
        ),
        "{bound}"
    );
    assert!(!bound.contains("IF "), "{bound}");
    assert!(bound.contains("UNIDIRECTIONAL_SEQUENCE_LSTM 1"), "{bound}");
    // With 256-sample chunks both branches compile: the If stays an IF.
    let kept = check(nnc().arg("inspect").arg(&model).args([
        "--input-shape",
        "input=1x256",
        "--input-shape",
        "state=2x1x128",
    ]));
    assert!(kept.contains("IF 1"), "{kept}");
    // With 512-sample chunks the 8 kHz branch cannot compile (it is valid only for 256):
    // the If needs its condition at compile time, and the message says how to give it.
    let refused = nnc()
        .arg("inspect")
        .arg(&model)
        .args(shapes)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(69));
    let message = String::from_utf8_lossy(&refused.stderr);
    assert!(
        message.contains("graph input 'sr' is needed at compile time"),
        "{message}"
    );
}

#[test]
#[cfg_attr(external_absent, ignore = "needs scripts/fetch-models")]
fn paddleocr_classifier_with_fixed_dynamic_dimensions() {
    let Some(model) = external_model(
        "rapidocr-onnxruntime",
        "ch_ppocr_mobile_v2.0_cls_infer.onnx",
    ) else {
        return;
    };
    let refs = references("paddleocr_cls");
    let dir = tempfile::tempdir().unwrap();
    let compiled = dir.path().join("cls.nnc");
    let key = dir.path().join("weights.key");
    check(nnc().args(["keygen", "--algorithm", "sm4", "-o"]).arg(&key));
    // Without the shape: the dynamic dimensions are named as the obstacle.
    let refused = nnc()
        .arg("compile")
        .arg(&model)
        .arg("-o")
        .arg(&compiled)
        .arg("--key-file")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(69));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--input-shape"));
    // A shape that contradicts the model names the input, its rank and dimensions.
    let wrong = nnc()
        .arg("compile")
        .arg(&model)
        .args(["--input-shape", "x=1x4x48x192", "-o"])
        .arg(&compiled)
        .arg("--key-file")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(wrong.status.code(), Some(2));
    let message = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        message.contains("input 'x' with rank 4 [?, 3, ?, ?]"),
        "{message}"
    );
    check(
        nnc()
            .arg("compile")
            .arg(&model)
            .args([
                "--input-shape",
                "x=1x3x48x192",
                "--encrypt",
                "sm4",
                "--mode",
                "cbc",
            ])
            .arg("--key-file")
            .arg(&key)
            .arg("-o")
            .arg(&compiled),
    );
    check(
        nnc()
            .arg("run")
            .arg(&compiled)
            .arg("--key-file")
            .arg(&key)
            .arg("--input")
            .arg(refs.join("input.npy"))
            .arg("--output-dir")
            .arg(dir.path()),
    );
    let ours = floats(&read_npy_file(dir.path().join("output_0.npy")).unwrap());
    let reference = floats(&read_npy_file(refs.join("output_0.npy")).unwrap());
    assert_eq!(ours.len(), reference.len());
    let worst = ours
        .iter()
        .zip(&reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst <= 1e-4, "differs from ONNX Runtime by {worst}");
}
