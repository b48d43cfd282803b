//! Models ONNX Runtime's `quantize_dynamic` quantized (`testdata/ort_dynamic`, made by
//! `scripts/gen_ort_dynamic_models.py`): every DynamicQuantizeLinear -> MatMulInteger ->
//! Cast -> Mul chain becomes one DYNAMIC_FULLY_CONNECTED, and the outputs stay close to
//! ONNX Runtime's own (and to the float model's).
//!
//! Not bit-identical: ONNX Runtime quantizes the data with one range per tensor,
//! DYNAMIC_FULLY_CONNECTED with one per row. The bounds below come from measurement
//! (onnxruntime 1.32, x86-64; `cargo test --test ort_dynamic -- --nocapture` prints
//! them): nnc against ONNX Runtime 38.2-47.3 dB SQNR, the largest difference at most
//! 1.4% of the largest reference value (BERT's pooler output; 0.5-0.8% elsewhere);
//! against the float model nnc is ONNX Runtime's SQNR or better (BERT 35.6-41.2 dB vs
//! 35.5-40.9, the MLP 39.0-41.3 vs 36.5-37.4). The asserted bounds leave 3 dB and a
//! factor of 2.5 of margin: both quantizations' errors are rounding noise of the same
//! size, so their difference is of the size of either's error against the float model
//! (rather than, say, 1e-4, which only a bit-identical scheme could meet).

mod common;

use std::path::{Path, PathBuf};

use nnc_compiler::pipeline::{LowerOptions, lower_file};
use nnc_formats::nn::{Model, OperationType};
use nnc_formats::tensor::{DataType, HostTensor};

const CASES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/ort_dynamic");

/// nnc's outputs against ONNX Runtime's on the quantized model: at least this SQNR...
const MIN_SQNR_VS_ORT_DB: f64 = 35.0;
/// ... and no element further than this fraction of the largest reference magnitude.
const MAX_DIFF_OF_RANGE: f64 = 0.035;
/// nnc against the float model may trail ONNX Runtime's SQNR by at most this.
const MAX_DB_BELOW_ORT: f64 = 1.0;

fn case(name: &str) -> PathBuf {
    Path::new(CASES).join(name)
}

fn f32s(t: &HostTensor) -> Vec<f64> {
    assert_eq!(t.dtype, DataType::F32);
    t.data
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect()
}

fn sqnr_db(reference: &[f64], actual: &[f64]) -> f64 {
    let signal: f64 = reference.iter().map(|r| r * r).sum();
    let noise: f64 = reference
        .iter()
        .zip(actual)
        .map(|(r, a)| (r - a).powi(2))
        .sum();
    10.0 * (signal / noise.max(f64::MIN_POSITIVE)).log10()
}

fn count(model: &Model, op: OperationType) -> usize {
    model
        .main
        .operations
        .iter()
        .filter(|o| o.op_type == op)
        .count()
}

/// Compiles case `name`, checks that its `matmuls` MatMulIntegers are all
/// DYNAMIC_FULLY_CONNECTED (no float FULLY_CONNECTED), runs it and checks the outputs
/// that have a float model's counterpart; returns every output.
fn check(name: &str, matmuls: usize) -> Vec<HostTensor> {
    check_fused(name, matmuls, matmuls)
}

/// [`check`] of a case where `fused` of its `matmuls` MatMulIntegers are fused; the
/// others are FULLY_CONNECTED products of exact integer differences.
fn check_fused(name: &str, matmuls: usize, fused: usize) -> Vec<HostTensor> {
    let dir = case(name);
    let lowered = lower_file(&dir.join("model.onnx"), &LowerOptions::default())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let source_matmuls: usize = ["MatMulInteger", "com.microsoft.DynamicQuantizeMatMul"]
        .iter()
        .filter_map(|op| lowered.source.operators.get(*op))
        .sum();
    assert_eq!(source_matmuls, matmuls, "{name}");
    let model = lowered.model;
    assert_eq!(
        count(&model, OperationType::DynamicFullyConnected),
        fused,
        "{name}: every fused MatMulInteger is one DYNAMIC_FULLY_CONNECTED"
    );
    assert_eq!(
        count(&model, OperationType::FullyConnected),
        matmuls - fused,
        "{name}"
    );
    let actual = common::run_on_npu(&model, &common::numbered(&dir, "input"));
    let (ort, float) = (
        common::numbered(&dir, "output"),
        common::numbered(&dir, "float_output"),
    );
    assert_eq!(actual.len(), ort.len(), "{name}");
    for (k, ((a, q), f)) in actual.iter().zip(&ort).zip(&float).enumerate() {
        assert_eq!(a.shape, q.shape, "{name} output {k}");
        let (a, q, f) = (f32s(a), f32s(q), f32s(f));
        let range = q.iter().fold(0f64, |m, v| m.max(v.abs()));
        let diff = a
            .iter()
            .zip(&q)
            .fold(0f64, |m, (x, y)| m.max((x - y).abs()));
        let (vs_ort, nnc_vs_float, ort_vs_float) =
            (sqnr_db(&q, &a), sqnr_db(&f, &a), sqnr_db(&f, &q));
        eprintln!(
            "{name} output {k}: nnc vs ONNX Runtime {vs_ort:.1} dB, largest difference \
             {diff:.4} ({:.2}% of {range:.3}); vs float: nnc {nnc_vs_float:.1} dB, ONNX \
             Runtime {ort_vs_float:.1} dB",
            100.0 * diff / range
        );
        assert!(
            vs_ort >= MIN_SQNR_VS_ORT_DB,
            "{name} output {k}: {vs_ort} dB"
        );
        assert!(
            diff <= MAX_DIFF_OF_RANGE * range,
            "{name} output {k}: {diff} of {range}"
        );
        assert!(
            nnc_vs_float >= ort_vs_float - MAX_DB_BELOW_ORT,
            "{name} output {k}: {nnc_vs_float} dB vs ONNX Runtime's {ort_vs_float}"
        );
    }
    actual
}

#[test]
fn bert_quantized_per_tensor_runs_every_matmul_dynamically() {
    check("bert_per_tensor", 13);
}

#[test]
fn bert_quantized_per_channel_runs_every_matmul_dynamically() {
    check("bert_per_channel", 13);
}

#[test]
fn mlp_quantized_per_tensor_and_per_channel() {
    check("mlp_per_tensor", 2);
    check("mlp_per_channel", 2);
}

/// uint8 weights with zero point 128 are the int8 weights plus 128: the same integers
/// once the zero point is off, so the same outputs, bit for bit.
#[test]
fn centred_uint8_weights_convert_exactly() {
    assert_eq!(check("mlp_uint8_centred", 2), check("mlp_per_channel", 2));
}

/// The same model as ONNX Runtime's optimizer saves it, its chains fused into
/// `com.microsoft.DynamicQuantizeMatMul`: the same operations, the same outputs.
#[test]
fn onnx_runtime_fused_dynamic_quantize_matmul_lowers_the_same() {
    assert_eq!(check("mlp_ort_fused", 2), check("mlp_per_channel", 2));
}

/// A chain whose intermediate values are graph outputs cannot be fused: its
/// DynamicQuantizeLinear and MatMulInteger lower on their own, and their outputs (the
/// uint8 data, its scale and zero point, the int32 product) are ONNX Runtime's exactly,
/// on real data and on an all-zero input (scale 1, as ONNX Runtime gives it).
#[test]
fn unfused_dynamic_quantize_linear_and_matmul_integer_match_onnx_runtime_exactly() {
    for name in ["mlp_unfused", "mlp_unfused_zeros"] {
        let actual = check_fused(name, 2, 1);
        let ort = common::numbered(&case(name), "output");
        assert_eq!(actual.len(), 5, "{name}");
        for k in 1..5 {
            assert_eq!(actual[k], ort[k], "{name} output {k}");
        }
    }
}

/// ONNX Runtime's QUInt8 weights whose values minus the zero point leave int8 (both
/// layers' here) are not fused: their chains run as ONNX defines them
/// (DynamicQuantizeLinear and MatMulInteger exactly, FULLY_CONNECTED of the integer
/// differences), with the same agreement with ONNX Runtime.
#[test]
fn off_centre_uint8_weights_run_unfused_as_onnx_defines_them() {
    check_fused("mlp_uint8", 2, 0);
    // The user is told which nodes run at float speed, and why.
    let lowered = lower_file(
        &case("mlp_uint8").join("model.onnx"),
        &LowerOptions::default(),
    )
    .expect("lowers");
    let note = lowered
        .source
        .notes
        .iter()
        .find(|n| n.contains("not fused"))
        .unwrap_or_else(|| panic!("no note: {:?}", lowered.source.notes));
    for part in ["fc1_quant", "-127..=127", "float speed"] {
        assert!(note.contains(part), "{part}: {note}");
    }
}
