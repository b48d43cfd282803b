//! MediaPipe's published models end to end through the binary (`nnc compile` with
//! encrypted weights, then `nnc run`): the selfie segmentation models against LiteRT's
//! output (`testdata/mediapipe/*.output.npy`, made by
//! `scripts/gen_mediapipe_model_refs.py`, which runs a copy of each model with its custom
//! operator rewritten to the builtin TRANSPOSE_CONV) within 1e-4 of the largest output
//! magnitude; the face landmark model (three of MediaPipe's custom operators) for output
//! shapes and finite values.
//!
//! The models come from `scripts/fetch-models` (testdata/external/mediapipe). The input
//! is a formula, computed here exactly as the script computes it.

use std::path::Path;
use std::process::Command;

use nnc_formats::npy::{read_npy_file, write_npy_file};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_formats::test_support::external_model;

const REFERENCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/mediapipe");

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn check(cmd: &mut Command) {
    let o = cmd.output().expect("nnc runs");
    assert!(
        o.status.success(),
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `scripts/gen_mediapipe_model_refs.py`'s `model_input`: a head-and-shoulders
/// silhouette on a soft background, [1, height, width, 3] float32.
fn model_input(height: usize, width: usize) -> HostTensor {
    let skin = [0.85f64, 0.62, 0.5];
    let sq = |v: f64| v * v;
    let mut values = Vec::with_capacity(height * width * 3);
    for row in 0..height {
        let h = row as f64 / height as f64;
        for col in 0..width {
            let w = col as f64 / width as f64;
            let head = sq((w - 0.5) / 0.16) + sq((h - 0.38) / 0.2);
            let body = sq((w - 0.5) / 0.38) + sq((h - 1.0) / 0.35);
            let inside = 1.0 / (1.0 + (8.0 * (head.min(body) - 1.0)).exp());
            for (c, tone) in skin.iter().enumerate() {
                let s = tone + 0.05 * (40.0 * h + 30.0 * w).sin();
                let bg = 0.3 + 0.2 * (6.0 * w + 2.0 * c as f64).sin() * (4.0 * h).cos();
                values.push((inside * s + (1.0 - inside) * bg) as f32);
            }
        }
    }
    HostTensor::from_f32(vec![1, height, width, 3], &values).unwrap()
}

fn f32s(t: &HostTensor) -> Vec<f32> {
    assert_eq!(t.dtype, DataType::F32);
    t.data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Compiles `model` with AES-128-CTR, runs it on `input`, returns every output.
fn compile_and_run(model: &Path, input: &HostTensor, outputs: usize) -> Vec<HostTensor> {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("weights.key");
    let compiled = dir.path().join("model.nnc");
    let input_file = dir.path().join("input.npy");
    write_npy_file(&input_file, input).unwrap();
    check(
        nnc()
            .args(["keygen", "--algorithm", "aes128", "-o"])
            .arg(&key),
    );
    check(
        nnc()
            .arg("compile")
            .arg(model)
            .args(["--encrypt", "aes128", "--mode", "ctr"])
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
            .arg(&input_file)
            .arg("--output-dir")
            .arg(dir.path()),
    );
    (0..outputs)
        .map(|k| read_npy_file(dir.path().join(format!("output_{k}.npy"))).unwrap())
        .collect()
}

fn selfie(name: &str, height: usize, width: usize) {
    let Some(model) = external_model("mediapipe", &format!("{name}.tflite")) else {
        return;
    };
    let ours = compile_and_run(&model, &model_input(height, width), 1).remove(0);
    let reference = read_npy_file(Path::new(REFERENCES).join(format!("{name}.output.npy")))
        .expect("reference output");
    assert_eq!(ours.shape, reference.shape, "{name}: output shape");
    let (a, b) = (f32s(&ours), f32s(&reference));
    let largest = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let max_err = a.iter().zip(&b).fold(0f32, |m, (x, y)| {
        if x.is_finite() {
            m.max((x - y).abs())
        } else {
            f32::INFINITY
        }
    });
    eprintln!("{name}: max abs error {max_err:.3e}, largest reference value {largest}");
    assert!(largest > 0.5, "{name}: the reference is nearly empty");
    assert!(
        max_err <= 1e-4 * largest,
        "{name}: max abs error {max_err} exceeds 1e-4 of {largest}"
    );
}

#[test]
#[cfg_attr(external_absent, ignore = "needs scripts/fetch-models")]
fn selfie_segmentation_matches_litert() {
    selfie("selfie_segmentation", 256, 256);
}

#[test]
#[cfg_attr(external_absent, ignore = "needs scripts/fetch-models")]
fn selfie_segmentation_landscape_matches_litert() {
    selfie("selfie_segmentation_landscape", 144, 256);
}

#[test]
#[cfg_attr(external_absent, ignore = "needs scripts/fetch-models")]
fn face_landmark_with_attention_runs() {
    let Some(model) = external_model("mediapipe", "face_landmark_with_attention.tflite") else {
        return;
    };
    let outputs = compile_and_run(&model, &model_input(192, 192), 7);
    // mesh, lips, left eye, right eye, left iris, right iris, face flag.
    let sizes = [1404, 160, 142, 142, 10, 10, 1];
    for (k, (out, &n)) in outputs.iter().zip(&sizes).enumerate() {
        assert_eq!(out.shape, [1, 1, 1, n], "output {k}");
        assert!(
            f32s(out).iter().all(|v| v.is_finite()),
            "output {k} is not finite"
        );
    }
    // The refined landmarks lie in the 192x192 image, near the face mesh.
    let mesh = f32s(&outputs[0]);
    let lips = f32s(&outputs[1]);
    let (lo, hi) = mesh
        .iter()
        .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
    for &v in lips.iter() {
        assert!(
            (lo - 20.0..=hi + 20.0).contains(&v),
            "lip coordinate {v} outside the mesh range {lo}..{hi}"
        );
    }
}
