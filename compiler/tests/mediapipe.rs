//! MediaPipe's TFLite custom operators, one small model per case
//! (`testdata/mediapipe/ops`, made by `scripts/gen_mediapipe_refs.py` with NumPy
//! reference implementations written from MediaPipe's definitions): each is lowered,
//! emitted, loaded and run on the CPU kernels, and compared with the reference (float32
//! within 1e-5 absolute plus 1e-5 relative; argmax indices exactly). Then: which NN or
//! extension operation each lowers to, refusals of options nnc cannot honour, and
//! corrupted options (never a panic).

mod common;

use std::path::{Path, PathBuf};

use nnc_compiler::CompileError;
use nnc_compiler::onnx::ImportOptions;
use nnc_compiler::tflite::import_bytes;
use nnc_formats::nn::{HalVersion, Model, OperationType};
use nnc_formats::tensor::HostTensor;

const OPS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/mediapipe/ops");
const ATOL: f64 = 1e-5;
const RTOL: f64 = 1e-5;

fn cases() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(OPS)
        .expect("testdata/mediapipe/ops")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("model.tflite").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn name(dir: &Path) -> String {
    dir.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

fn f32s(t: &HostTensor) -> Vec<f32> {
    t.data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn import(bytes: Vec<u8>) -> Result<Model, CompileError> {
    Ok(import_bytes(bytes.into(), &ImportOptions::default())?.model)
}

fn model_of(dir: &Path) -> Model {
    let bytes = std::fs::read(dir.join("model.tflite")).expect("model.tflite");
    import(bytes).unwrap_or_else(|e| panic!("{}: {e}", name(dir)))
}

#[test]
fn every_case_matches_the_reference() {
    let cases = cases();
    assert!(cases.len() >= 12, "testdata/mediapipe/ops is missing cases");
    let mut failures = Vec::new();
    let mut worst = Vec::new();
    for dir in &cases {
        let case = name(dir);
        let actual = common::run_on_npu(&model_of(dir), &common::numbered(dir, "input"));
        let expected = common::numbered(dir, "output");
        assert_eq!(actual.len(), expected.len(), "{case}: output count");
        let mut max_err = 0f64;
        for (k, (a, e)) in actual.iter().zip(&expected).enumerate() {
            assert_eq!(a.shape, e.shape, "{case}: output {k} shape");
            // MaxPoolingWithArgmax2D's second output holds window positions: exact.
            let exact = case.starts_with("max_pool_argmax") && k == 1;
            for (i, (&x, &y)) in f32s(a).iter().zip(&f32s(e)).enumerate() {
                let (x, y) = (f64::from(x), f64::from(y));
                let err = (x - y).abs();
                max_err = max_err.max(err);
                let ok = if exact {
                    x == y
                } else {
                    x.is_finite() && err <= ATOL + RTOL * y.abs()
                };
                if !ok {
                    failures.push(format!("{case}: output {k}, element {i}: {x} vs {y}"));
                    break;
                }
            }
        }
        worst.push(format!("{case}: max abs error {max_err:.3e}"));
    }
    eprintln!("{}", worst.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The operation types a case lowers to (besides none).
fn op_types(dir: &Path) -> Vec<OperationType> {
    model_of(dir)
        .main
        .operations
        .iter()
        .map(|o| o.op_type)
        .collect()
}

#[test]
fn each_operator_lowers_to_its_operation() {
    use OperationType as O;
    let expect = [
        ("transpose_conv_bias_same", O::TransposeConv2d),
        ("max_pool_argmax_same", O::MaxPoolWithArgmax),
        ("max_unpooling_2x2", O::MaxUnpooling),
        (
            "landmarks_to_transform_matrix",
            O::LandmarksToTransformMatrix,
        ),
        ("transform_landmarks_2d", O::TransformLandmarks),
        ("transform_tensor_bilinear", O::TransformTensorBilinear),
    ];
    for (case, op) in expect {
        assert_eq!(op_types(&Path::new(OPS).join(case)), [op], "{case}");
    }
    // The NN set's own operation where it is exact, nnc's extension otherwise, with the
    // codes docs/EXTENSIONS.md gives.
    assert_ne!(O::TransposeConv2d.hal_version(), HalVersion::Extension);
    for (op, code) in [
        (O::MaxPoolWithArgmax, 0x1_0010),
        (O::MaxUnpooling, 0x1_0011),
        (O::LandmarksToTransformMatrix, 0x1_0012),
        (O::TransformLandmarks, 0x1_0013),
        (O::TransformTensorBilinear, 0x1_0014),
    ] {
        assert_eq!(op.hal_version(), HalVersion::Extension, "{op}");
        assert_eq!(op as i32, code, "{op}");
    }
}

/// The model bytes of `case` with the first occurrence of `from` replaced by `to`
/// (same length).
fn patched(case: &str, from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut bytes = std::fs::read(Path::new(OPS).join(case).join("model.tflite")).unwrap();
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("{case}: pattern not found"));
    bytes[at..at + to.len()].copy_from_slice(to);
    bytes
}

fn error_of(bytes: Vec<u8>) -> String {
    match import(bytes) {
        Ok(_) => panic!("expected a refusal"),
        Err(e) => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            text
        }
    }
}

#[test]
fn options_nnc_cannot_honour_are_refused_by_name() {
    // TfLiteTransposeConvParams with padding 0 (unknown).
    let packed =
        |fields: &[i32]| -> Vec<u8> { fields.iter().flat_map(|v| v.to_le_bytes()).collect() };
    let e = error_of(patched(
        "transpose_conv_bias_same",
        &packed(&[1, 2, 2]),
        &packed(&[0, 2, 2]),
    ));
    assert!(e.contains("padding"), "{e}");
    // A TANH activation on MaxPoolingWithArgmax2D.
    let e = error_of(patched(
        "max_pool_argmax_same",
        &packed(&[1, 2, 2, 3, 3, 0]),
        &packed(&[1, 2, 2, 3, 3, 4]),
    ));
    assert!(e.contains("activation 4"), "{e}");
    // A subset index beyond the landmarks (24 of them): 19 becomes 99.
    let e = error_of(patched(
        "landmarks_to_transform_matrix",
        &[3, 7, 11, 2, 19, 5, 8],
        &[3, 7, 11, 2, 99, 5, 8],
    ));
    assert!(e.contains("subset_idxs") && e.contains("99"), "{e}");
    // A custom operator nnc has no lowering for stays listed by name.
    let e = error_of(patched(
        "transform_landmarks_2d",
        b"TransformLandmarks",
        b"TransformLandmarkz",
    ));
    assert!(e.contains("custom:TransformLandmarkz"), "{e}");
}

#[test]
fn corrupted_options_never_panic() {
    for dir in cases() {
        let bytes = std::fs::read(dir.join("model.tflite")).unwrap();
        // Every byte of the file that can be flipped without breaking the flatbuffer's
        // structure would be too many: flip each byte of the region after the last
        // tensor data, where the operator's options sit, in a few ways.
        let len = bytes.len();
        for at in len.saturating_sub(600)..len {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[at] ^= flip;
                let _ = import(b);
            }
        }
    }
}
