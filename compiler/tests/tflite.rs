//! TFLite frontend tests over the corpus in `testdata/tflite` (made by
//! `scripts/gen_tflite_testdata.py`; the files are committed, so no Python is needed here),
//! the shared MobileNetV2 models, and malformed files.
//!
//! Every corpus case is imported, optimized by the real pass pipeline and checked for:
//! - the exact operation histogram after optimization (the table below; each entry
//!   follows from the lowering rules in `compiler/src/tflite/lower`: one NN operation per
//!   TFLite operator, per-channel FULLY_CONNECTED as RESHAPE + CONV_2D + RESHAPE,
//!   requantizing QUANTIZE as DEQUANTIZE + QUANTIZE, folded DEQUANTIZE / DENSIFY / SHAPE),
//! - a model that passes `nnc_formats::nn::validate`,
//! - inputs and outputs whose element types and shapes match the reference `.npy` files,
//!   and whose NN operand types and quantization match the TFLite tensors exactly.
//!
//! Specific tests then check what matters per operator: padding, strides, dilations,
//! fused activations, quantization of filters and biases, folded constants.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use nnc_compiler::CompileError;
use nnc_compiler::onnx::ImportOptions;
use nnc_compiler::passes;
use nnc_compiler::tflite::schema_generated::tflite as fb;
use nnc_compiler::tflite::{import_bytes, read};
use nnc_formats::nn::ops::input_role;
use nnc_formats::nn::{
    FusedActivation, Model, OperandIndex, OperandType, Operation, OperationType, dump, validate,
};
use nnc_formats::npy::read_npy_file;
use nnc_formats::tensor::DataType;

// ---- helpers ------------------------------------------------------------------------

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/tflite");

fn case_dir(case: &str) -> PathBuf {
    PathBuf::from(CORPUS).join(case)
}

fn model_bytes(case: &str) -> Vec<u8> {
    let path = case_dir(case).join("model.tflite");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Imports and optimizes, as `nnc compile` does.
fn compile(bytes: Vec<u8>, options: &ImportOptions) -> Result<Model, CompileError> {
    let mut model = import_bytes(bytes.into(), options)?.model;
    passes::optimize(&mut model)?;
    Ok(model)
}

fn lower_with(case: &str, options: &ImportOptions) -> Model {
    let model = compile(model_bytes(case), options)
        .unwrap_or_else(|e| panic!("{case}: lowering failed: {e}"));
    if let Err(e) = validate(&model) {
        panic!("{case}: invalid: {e}\n{}", dump::to_text(&model));
    }
    model
}

fn lower(case: &str) -> Model {
    lower_with(case, &ImportOptions::default())
}

/// Imports without the optimization passes.
fn import(case: &str) -> Model {
    import_bytes(model_bytes(case).into(), &ImportOptions::default())
        .unwrap_or_else(|e| panic!("{case}: import failed: {e}"))
        .model
}

fn histogram(model: &Model) -> BTreeMap<&'static str, usize> {
    model.operation_histogram()
}

/// The only operation of type `op`.
fn only(model: &Model, op: OperationType) -> &Operation {
    let found: Vec<&Operation> = model
        .main
        .operations
        .iter()
        .filter(|o| o.op_type == op)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {op}, found {}\n{}",
        found.len(),
        dump::to_text(model)
    );
    found[0]
}

/// The operand of `op` that plays `role` (the signature's input names).
fn role(op: &Operation, role: &str) -> OperandIndex {
    let n = op.inputs.len();
    let k = (0..n)
        .find(|&k| input_role(op.op_type, k, n).name() == role)
        .unwrap_or_else(|| panic!("{} with {n} inputs has no '{role}' input", op.op_type));
    op.inputs[k]
}

fn i32s(model: &Model, operand: OperandIndex) -> Vec<i32> {
    model
        .constant_bytes(operand)
        .expect("a constant operand")
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn i32_of(model: &Model, op: &Operation, name: &str) -> i32 {
    let v = i32s(model, role(op, name));
    assert_eq!(v.len(), 1, "{name} is not a scalar");
    v[0]
}

fn f32s(model: &Model, operand: OperandIndex) -> Vec<f32> {
    model
        .constant_bytes(operand)
        .expect("a constant operand")
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bool_of(model: &Model, op: &Operation, name: &str) -> bool {
    model.constant_bytes(role(op, name)).expect("a constant") == [1]
}

/// (pad_left, pad_right, pad_top, pad_bottom, stride_w, stride_h)
fn window(model: &Model, op: &Operation) -> [i32; 6] {
    [
        "pad_left",
        "pad_right",
        "pad_top",
        "pad_bottom",
        "stride_w",
        "stride_h",
    ]
    .map(|r| i32_of(model, op, r))
}

fn activation(model: &Model, op: &Operation) -> i32 {
    i32_of(model, op, "activation")
}

/// Model inputs and outputs against the reference `.npy` files (element type, shape)
/// and the TFLite tensors (NN type and quantization).
fn assert_io(case: &str, model: &Model) {
    let dir = case_dir(case);
    let bytes = bytes::Bytes::from(model_bytes(case));
    let tfl = read(&bytes, &Default::default()).expect("readable");
    for (kind, infos, operands, tensors) in [
        ("input", &model.input_info, &model.main.inputs, &tfl.inputs),
        (
            "output",
            &model.output_info,
            &model.main.outputs,
            &tfl.outputs,
        ),
    ] {
        assert_eq!(infos.len(), tensors.len(), "{case}: {kind} count");
        for (i, info) in infos.iter().enumerate() {
            let path = dir.join(format!("{kind}_{i}.npy"));
            let npy =
                read_npy_file(&path).unwrap_or_else(|e| panic!("{case}: {}: {e}", path.display()));
            let dims: Vec<usize> = info.dims.iter().map(|&d| d as usize).collect();
            assert_eq!(
                (info.dtype, dims),
                (npy.dtype, npy.shape.clone()),
                "{case}: {kind} {i} ('{}') vs {}",
                info.name,
                path.display()
            );
            let t = &tfl.tensors[tensors[i]];
            assert_eq!(info.name, t.name, "{case}: {kind} {i} name");
            let operand = &model.main.operands[operands[i] as usize];
            let expected = match t.ty {
                fb::TensorType::FLOAT32 => OperandType::TensorFloat32,
                fb::TensorType::INT8 => OperandType::TensorQuant8AsymmSigned,
                fb::TensorType::UINT8 => OperandType::TensorQuant8Asymm,
                fb::TensorType::INT32 | fb::TensorType::INT64 => OperandType::TensorInt32,
                other => panic!("{case}: unexpected {kind} type {other:?}"),
            };
            assert_eq!(operand.operand_type, expected, "{case}: {kind} {i} NN type");
            match &t.quant {
                Some(q) if expected.is_quantized() => {
                    assert_eq!(
                        (operand.scale, i64::from(operand.zero_point)),
                        (q.scales[0], q.zero_points[0]),
                        "{case}: {kind} {i} quantization"
                    );
                }
                _ => assert_eq!(
                    (operand.scale, operand.zero_point),
                    (0.0, 0),
                    "{case}: {kind} {i}"
                ),
            }
        }
        let extra = dir.join(format!("{kind}_{}.npy", infos.len()));
        assert!(!extra.exists(), "{case}: {} exists", extra.display());
    }
}

/// Options fixing every input to the shape of its reference `.npy` (which differs from
/// the stored shape only for inputs with dynamic dimensions).
fn reference_shapes(case: &str) -> ImportOptions {
    let bytes = bytes::Bytes::from(model_bytes(case));
    let tfl = read(&bytes, &Default::default()).expect("readable");
    let input_shapes = tfl
        .inputs
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let npy = read_npy_file(case_dir(case).join(format!("input_{i}.npy"))).expect("npy");
            (
                tfl.tensors[t].name.clone(),
                npy.shape.iter().map(|&d| d as u32).collect(),
            )
        })
        .collect();
    ImportOptions {
        input_shapes,
        ..Default::default()
    }
}

// ---- the corpus ---------------------------------------------------------------------

/// Requantization through float: a uint8 model boundary around int8 internals has one
/// QUANTIZE per input and output in TFLite, each lowered to DEQUANTIZE + QUANTIZE.
const fn requant(n: usize) -> [(&'static str, usize); 2] {
    [("DEQUANTIZE", n), ("QUANTIZE", n)]
}

fn expected_histograms() -> BTreeMap<&'static str, Vec<(&'static str, usize)>> {
    let one = |op: &'static str| vec![(op, 1)];
    let with = |mut v: Vec<(&'static str, usize)>, extra: [(&'static str, usize); 2]| {
        v.extend(extra);
        v
    };
    // Per-channel int8 weights: FULLY_CONNECTED runs as a 1x1 CONV_2D between reshapes.
    let fc_per_channel = || vec![("CONV_2D", 1), ("RESHAPE", 2)];
    let mut t: BTreeMap<&'static str, Vec<(&'static str, usize)>> = BTreeMap::new();
    for (case, ops) in [
        ("add", one("ADD")),
        ("add_int8", one("ADD")),
        ("add_uint8", with(one("ADD"), requant(3))),
        ("add_broadcast_relu", one("ADD")),
        ("add_broadcast_relu_int8", one("ADD")),
        ("arg_max", one("ARGMAX")),
        ("arg_max_int8", one("ARGMAX")),
        ("arg_min", one("ARGMIN")),
        ("avg_pool_same", one("AVERAGE_POOL_2D")),
        ("avg_pool_same_int8", one("AVERAGE_POOL_2D")),
        (
            "avg_pool_same_uint8",
            with(one("AVERAGE_POOL_2D"), requant(2)),
        ),
        ("batch_matmul", one("BATCH_MATMUL")),
        ("batch_matmul_int8", one("BATCH_MATMUL")),
        ("batch_matmul_adj", one("BATCH_MATMUL")),
        // rhs [4, 5] gains two leading unit dimensions, then is tiled to batch [2, 2].
        (
            "batch_matmul_broadcast",
            vec![("BATCH_MATMUL", 1), ("RESHAPE", 1), ("TILE", 1)],
        ),
        ("concatenation", one("CONCATENATION")),
        ("concatenation_int8", one("CONCATENATION")),
        (
            "concatenation_relu",
            vec![("CONCATENATION", 1), ("RELU", 1)],
        ),
        ("conv_1x1_no_bias", one("CONV_2D")),
        ("conv_1x1_no_bias_int8", one("CONV_2D")),
        ("conv_dilated", one("CONV_2D")),
        ("conv_dilated_int8", one("CONV_2D")),
        ("conv_float16_weights", one("CONV_2D")),
        ("conv_grouped", one("GROUPED_CONV_2D")),
        (
            "conv_pool_legacy_uint8",
            vec![("AVERAGE_POOL_2D", 1), ("CONV_2D", 1)],
        ),
        ("conv_same_relu6", one("CONV_2D")),
        ("conv_same_relu6_int8", one("CONV_2D")),
        ("conv_same_relu6_uint8", with(one("CONV_2D"), requant(2))),
        ("conv_same_stride2", one("CONV_2D")),
        ("conv_same_stride2_int8", one("CONV_2D")),
        ("conv_valid_stride2", one("CONV_2D")),
        ("conv_valid_stride2_int8", one("CONV_2D")),
        ("depth_to_space", one("DEPTH_TO_SPACE")),
        (
            "depthwise_add_legacy_uint8",
            vec![("ADD", 1), ("DEPTHWISE_CONV_2D", 1), ("MAX_POOL_2D", 1)],
        ),
        ("depthwise_dilated", one("DEPTHWISE_CONV_2D")),
        ("depthwise_multiplier2_valid", one("DEPTHWISE_CONV_2D")),
        ("depthwise_multiplier2_valid_int8", one("DEPTHWISE_CONV_2D")),
        ("depthwise_same_relu6", one("DEPTHWISE_CONV_2D")),
        ("depthwise_same_relu6_int8", one("DEPTHWISE_CONV_2D")),
        (
            "depthwise_same_relu6_uint8",
            with(one("DEPTHWISE_CONV_2D"), requant(2)),
        ),
        ("div", one("DIV")),
        ("exp", one("EXP")),
        ("expand_dims", one("EXPAND_DIMS")),
        ("external_buffers", one("CONV_2D")),
        ("fully_connected", one("FULLY_CONNECTED")),
        ("fully_connected_int8", fc_per_channel()),
        ("fully_connected_uint8", with(fc_per_channel(), requant(2))),
        ("fully_connected_relu", one("FULLY_CONNECTED")),
        // keep_num_dims: [2, 3, 6] x [4, 6]^T computes [6, 4], reshaped to [2, 3, 4].
        (
            "fully_connected_keep_dims",
            vec![("FULLY_CONNECTED", 1), ("RESHAPE", 1)],
        ),
        ("fully_connected_keep_dims_int8", fc_per_channel()),
        (
            "fully_connected_softmax_legacy_uint8",
            vec![("FULLY_CONNECTED", 1), ("SOFTMAX", 1)],
        ),
        // DENSIFY of the sparse weights is done at import.
        ("fully_connected_sparse", one("FULLY_CONNECTED")),
        ("gather", one("GATHER")),
        ("gather_runtime_indices", one("GATHER")),
        ("hard_swish", one("HARD_SWISH")),
        ("hard_swish_int8", one("HARD_SWISH")),
        ("l2_pool", one("L2_POOL_2D")),
        ("leaky_relu", one("PRELU")),
        ("leaky_relu_int8", one("PRELU")),
        ("log", one("LOG")),
        ("logistic", one("LOGISTIC")),
        ("logistic_int8", one("LOGISTIC")),
        ("logistic_uint8", with(one("LOGISTIC"), requant(2))),
        ("max_pool_same_stride1", one("MAX_POOL_2D")),
        ("max_pool_valid", one("MAX_POOL_2D")),
        ("max_pool_valid_int8", one("MAX_POOL_2D")),
        ("maximum", one("MAXIMUM")),
        ("maximum_int8", one("MAXIMUM")),
        ("mean", one("MEAN")),
        ("mean_int8", one("MEAN")),
        ("mean_keep_dims", one("MEAN")),
        ("minimum", one("MINIMUM")),
        ("minimum_int8", one("MINIMUM")),
        ("mirror_pad_reflect", one("MIRROR_PAD")),
        ("mirror_pad_symmetric", one("MIRROR_PAD")),
        ("mul", one("MUL")),
        ("mul_const_relu6", one("MUL")),
        ("mul_int8", one("MUL")),
        ("pack", one("PACK")),
        ("pad", one("PAD")),
        ("pad_int8", one("PAD")),
        ("padv2", one("PAD_V2")),
        ("prelu", one("PRELU")),
        ("prelu_int8", one("PRELU")),
        // int8 inside, float at the boundary: QUANTIZE in, DEQUANTIZE out.
        (
            "quantize_dequantize_int8_float_io",
            vec![("CONV_2D", 1), ("DEQUANTIZE", 1), ("QUANTIZE", 1)],
        ),
        ("reduce_max", one("REDUCE_MAX")),
        ("relu", one("RELU")),
        ("relu6", one("RELU6")),
        ("relu6_int8", one("RELU6")),
        ("relu_int8", one("RELU")),
        ("relu_n1_to_1", one("RELU1")),
        ("relu_n1_to_1_int8", one("RELU1")),
        ("reshape", one("RESHAPE")),
        ("reshape_int8", one("RESHAPE")),
        ("resize_bilinear", one("RESIZE_BILINEAR")),
        ("resize_bilinear_align_corners", one("RESIZE_BILINEAR")),
        ("resize_bilinear_half_pixel", one("RESIZE_BILINEAR")),
        ("resize_bilinear_int8", one("RESIZE_BILINEAR")),
        ("resize_nearest", one("RESIZE_NEAREST_NEIGHBOR")),
        ("resize_nearest_half_pixel", one("RESIZE_NEAREST_NEIGHBOR")),
        ("resize_nearest_int8", one("RESIZE_NEAREST_NEIGHBOR")),
        ("rsqrt", one("RSQRT")),
        // SHAPE folds to a constant; STRIDED_SLICE and PACK of constants fold away (and
        // RESHAPE takes the shape the file declares).
        ("shape_reshape", one("RESHAPE")),
        ("slice", one("SLICE")),
        ("softmax", one("SOFTMAX")),
        ("softmax_beta", one("SOFTMAX")),
        ("softmax_int8", one("SOFTMAX")),
        ("softmax_uint8", with(one("SOFTMAX"), requant(2))),
        ("space_to_depth", one("SPACE_TO_DEPTH")),
        ("split", one("SPLIT")),
        ("sqrt", one("SQRT")),
        ("squeeze", one("SQUEEZE")),
        ("squeeze_int8", one("SQUEEZE")),
        ("strided_slice", one("STRIDED_SLICE")),
        ("strided_slice_int8", one("STRIDED_SLICE")),
        ("strided_slice_masks", one("STRIDED_SLICE")),
        ("sub", one("SUB")),
        ("sub_const", one("SUB")),
        ("sub_int8", one("SUB")),
        ("sum", one("REDUCE_SUM")),
        ("tanh", one("TANH")),
        ("tanh_int8", one("TANH")),
        ("transpose", one("TRANSPOSE")),
        ("transpose_int8", one("TRANSPOSE")),
        ("transpose_conv_same_stride2", one("TRANSPOSE_CONV_2D")),
        ("transpose_conv_same_stride2_int8", one("TRANSPOSE_CONV_2D")),
        ("transpose_conv_valid", one("TRANSPOSE_CONV_2D")),
    ] {
        assert!(t.insert(case, ops).is_none(), "{case} listed twice");
    }
    t
}

#[test]
fn every_corpus_case_lowers_to_its_expected_operations() {
    let expected = expected_histograms();
    let mut cases: Vec<String> = std::fs::read_dir(CORPUS)
        .expect("testdata/tflite")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| case_dir(n).is_dir() && n != "unsupported_ops")
        .collect();
    cases.sort();
    let listed: Vec<&str> = expected.keys().copied().collect();
    assert_eq!(
        cases.iter().map(String::as_str).collect::<Vec<_>>(),
        listed,
        "every corpus case has an expected histogram, and every listed case exists"
    );
    let mut failures = Vec::new();
    for case in &cases {
        let model = lower_with(case, &reference_shapes(case));
        let want: BTreeMap<&str, usize> = expected[case.as_str()].iter().copied().collect();
        if histogram(&model) != want {
            failures.push(format!(
                "{case}: got {:?}, expected {want:?}\n{}",
                histogram(&model),
                dump::to_text(&model)
            ));
        }
        assert_io(case, &model);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// ---- convolutions ---------------------------------------------------------------------

#[test]
fn conv_padding_strides_and_fused_activation() {
    // 8x8, 3x3, stride 1, SAME: one on each side; RELU6 fused.
    let m = lower("conv_same_relu6");
    let conv = only(&m, OperationType::Conv2d);
    assert_eq!(window(&m, conv), [1, 1, 1, 1, 1, 1]);
    assert_eq!(activation(&m, conv), FusedActivation::Relu6 as i32);
    assert_eq!(conv.inputs.len(), 10, "no layout or dilation operands");
    // 8x8, 3x3, stride 2, SAME: TensorFlow pads the odd total at the end (0 before, 1 after).
    let m = lower("conv_same_stride2");
    let conv = only(&m, OperationType::Conv2d);
    assert_eq!(window(&m, conv), [0, 1, 0, 1, 2, 2]);
    assert_eq!(
        m.main.operands[conv.outputs[0] as usize].dimensions,
        vec![1, 4, 4, 4]
    );
    // VALID, stride 2, RELU fused by the converter.
    let m = lower("conv_valid_stride2");
    let conv = only(&m, OperationType::Conv2d);
    assert_eq!(window(&m, conv), [0, 0, 0, 0, 2, 2]);
    assert_eq!(activation(&m, conv), FusedActivation::Relu as i32);
    // Dilation 2 (effective kernel 5, SAME on 9x9: two on each side), NHWC layout flag.
    let m = lower("conv_dilated");
    let conv = only(&m, OperationType::Conv2d);
    assert_eq!(window(&m, conv), [2, 2, 2, 2, 1, 1]);
    assert!(!bool_of(&m, conv, "layout"));
    assert_eq!(i32_of(&m, conv, "dilation_w"), 2);
    assert_eq!(i32_of(&m, conv, "dilation_h"), 2);
    // No bias in the file: a zero bias.
    let m = lower("conv_1x1_no_bias");
    let conv = only(&m, OperationType::Conv2d);
    assert_eq!(f32s(&m, role(conv, "bias")), vec![0.0; 4]);
}

#[test]
fn grouped_convolution() {
    // 4 input channels, filter depth 2: two groups.
    let m = lower("conv_grouped");
    let conv = only(&m, OperationType::GroupedConv2d);
    assert_eq!(i32s(&m, conv.inputs[9]), vec![2], "groups");
    assert_eq!(
        m.main.operands[conv.inputs[1] as usize].dimensions,
        vec![6, 3, 3, 2]
    );
}

#[test]
fn depthwise_multiplier_and_padding() {
    let m = lower("depthwise_multiplier2_valid");
    let dw = only(&m, OperationType::DepthwiseConv2d);
    assert_eq!(window(&m, dw), [0, 0, 0, 0, 2, 2]);
    assert_eq!(i32_of(&m, dw, "multiplier"), 2);
    assert_eq!(
        m.main.operands[dw.inputs[1] as usize].dimensions,
        vec![1, 3, 3, 6]
    );
    let m = lower("depthwise_same_relu6");
    let dw = only(&m, OperationType::DepthwiseConv2d);
    assert_eq!(window(&m, dw), [1, 1, 1, 1, 1, 1]);
    assert_eq!(activation(&m, dw), FusedActivation::Relu6 as i32);
    let m = lower("depthwise_dilated");
    let dw = only(&m, OperationType::DepthwiseConv2d);
    assert_eq!(window(&m, dw), [2, 2, 2, 2, 1, 1]);
    assert_eq!(i32_of(&m, dw, "dilation_w"), 2);
}

#[test]
fn transpose_conv_explicit_padding() {
    // 4x4 -> 8x8, 3x3, stride 2, SAME: TFLite pads 0 before; the rest is cropped after.
    let m = lower("transpose_conv_same_stride2");
    let tc = only(&m, OperationType::TransposeConv2d);
    assert_eq!(tc.inputs.len(), 11, "explicit form");
    assert_eq!(window(&m, tc), [0, 1, 0, 1, 2, 2]);
    assert_eq!(
        m.main.operands[tc.outputs[0] as usize].dimensions,
        vec![1, 8, 8, 2]
    );
    assert_eq!(
        m.main.operands[tc.inputs[1] as usize].dimensions,
        vec![2, 3, 3, 3]
    );
    let m = lower("transpose_conv_valid");
    let tc = only(&m, OperationType::TransposeConv2d);
    assert_eq!(window(&m, tc), [0, 0, 0, 0, 2, 2]);
    assert_eq!(
        m.main.operands[tc.outputs[0] as usize].dimensions,
        vec![1, 7, 7, 4]
    );
}

#[test]
fn pools() {
    let m = lower("avg_pool_same");
    let p = only(&m, OperationType::AveragePool2d);
    // 8x8, 3x3 window, stride 2, SAME: out 4, total padding 1 -> (0, 1).
    assert_eq!(window(&m, p), [0, 1, 0, 1, 2, 2]);
    assert_eq!(
        (i32_of(&m, p, "filter_w"), i32_of(&m, p, "filter_h")),
        (3, 3)
    );
    let m = lower("max_pool_valid");
    let p = only(&m, OperationType::MaxPool2d);
    assert_eq!(window(&m, p), [0, 0, 0, 0, 2, 2]);
    let m = lower("l2_pool");
    let p = only(&m, OperationType::L2Pool2d);
    assert_eq!(window(&m, p), [0, 0, 0, 0, 3, 3]);
}

// ---- quantization ---------------------------------------------------------------------

/// The TFLite tensor named `name` in a case's file.
fn tensor_quant(case: &str, name: &str) -> (Vec<f32>, Vec<i64>, usize) {
    let bytes = bytes::Bytes::from(model_bytes(case));
    let tfl = read(&bytes, &Default::default()).expect("readable");
    let t = tfl
        .tensors
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{case}: no tensor '{name}'"));
    let q = t.quant.as_ref().expect("quantized");
    (q.scales.clone(), q.zero_points.clone(), q.dim)
}

#[test]
fn int8_convolution_has_per_channel_filters_and_implied_bias_scales() {
    for (case, op, channel_dim) in [
        ("conv_same_relu6_int8", OperationType::Conv2d, 0),
        (
            "depthwise_same_relu6_int8",
            OperationType::DepthwiseConv2d,
            3,
        ),
        (
            "transpose_conv_same_stride2_int8",
            OperationType::TransposeConv2d,
            0,
        ),
    ] {
        let m = lower(case);
        let conv = only(&m, op);
        let x = &m.main.operands[conv.inputs[0] as usize];
        assert_eq!(
            x.operand_type,
            OperandType::TensorQuant8AsymmSigned,
            "{case}"
        );
        let filter = &m.main.operands[conv.inputs[1] as usize];
        assert_eq!(
            filter.operand_type,
            OperandType::TensorQuant8SymmPerChannel,
            "{case}"
        );
        assert_eq!((filter.scale, filter.zero_point), (0.0, 0), "{case}");
        let q = filter
            .channel_quant
            .as_ref()
            .expect("per-channel parameters");
        assert_eq!(q.channel_dim, channel_dim, "{case}");
        let (scales, zero_points, dim) = tensor_quant(case, &filter.name);
        assert_eq!(
            (q.scales.clone(), dim as u32),
            (scales, channel_dim),
            "{case}"
        );
        assert!(zero_points.iter().all(|&z| z == 0));
        // NNAPI: with a per-channel filter the bias scale is 0, each channel's being
        // input scale x filter scale.
        let bias = &m.main.operands[conv.inputs[2] as usize];
        assert_eq!(bias.operand_type, OperandType::TensorInt32, "{case}");
        assert_eq!((bias.scale, bias.zero_point), (0.0, 0), "{case}");
        let y = &m.main.operands[conv.outputs[0] as usize];
        assert_eq!(
            y.operand_type,
            OperandType::TensorQuant8AsymmSigned,
            "{case}"
        );
    }
}

#[test]
fn uint8_convolution_has_per_tensor_filter_and_product_bias_scale() {
    let m = lower("conv_pool_legacy_uint8");
    let conv = only(&m, OperationType::Conv2d);
    let [x, f, b] = [0, 1, 2].map(|k| &m.main.operands[conv.inputs[k] as usize]);
    assert_eq!(x.operand_type, OperandType::TensorQuant8Asymm);
    assert_eq!(f.operand_type, OperandType::TensorQuant8Asymm);
    assert_eq!(b.operand_type, OperandType::TensorInt32);
    assert_eq!(b.scale, x.scale * f.scale);
    let (scales, zps, _) = tensor_quant("conv_pool_legacy_uint8", &f.name);
    assert_eq!((f.scale, i64::from(f.zero_point)), (scales[0], zps[0]));
    assert_eq!(activation(&m, conv), FusedActivation::Relu6 as i32);
    assert_eq!(m.input_info[0].dtype, DataType::U8);
    // FULLY_CONNECTED with per-tensor uint8 weights stays FULLY_CONNECTED.
    let m = lower("fully_connected_softmax_legacy_uint8");
    let fc = only(&m, OperationType::FullyConnected);
    let [x, w, b] = [0, 1, 2].map(|k| &m.main.operands[fc.inputs[k] as usize]);
    assert_eq!(w.operand_type, OperandType::TensorQuant8Asymm);
    assert_eq!(b.scale, x.scale * w.scale);
}

#[test]
fn int8_fully_connected_with_per_channel_weights_is_a_1x1_convolution() {
    let m = lower("fully_connected_int8");
    let conv = only(&m, OperationType::Conv2d);
    let filter = &m.main.operands[conv.inputs[1] as usize];
    assert_eq!(filter.operand_type, OperandType::TensorQuant8SymmPerChannel);
    assert_eq!(filter.dimensions, vec![5, 1, 1, 12]);
    assert_eq!(
        filter
            .channel_quant
            .as_ref()
            .map(|q| (q.channel_dim, q.scales.len())),
        Some((0, 5))
    );
    assert_eq!(window(&m, conv), [0, 0, 0, 0, 1, 1]);
    assert_eq!(
        m.main.operands[conv.inputs[0] as usize].dimensions,
        vec![2, 1, 1, 12]
    );
    assert_eq!(m.output_info[0].dims, vec![2, 5]);
}

#[test]
fn leaky_relu_is_prelu_with_an_exact_alpha() {
    let m = lower("leaky_relu");
    let p = only(&m, OperationType::Prelu);
    assert_eq!(f32s(&m, role(p, "alpha")), vec![0.2]);
    let m = lower("leaky_relu_int8");
    let p = only(&m, OperationType::Prelu);
    let alpha = role(p, "alpha");
    let a = &m.main.operands[alpha as usize];
    assert_eq!(a.operand_type, OperandType::TensorQuant8AsymmSigned);
    assert_eq!((a.scale, a.zero_point), (0.2, 0));
    assert_eq!(m.constant_bytes(alpha), Some(&[1u8][..]));
}

#[test]
fn quantize_and_dequantize() {
    // float I/O around int8 internals.
    let m = lower("quantize_dequantize_int8_float_io");
    let q = only(&m, OperationType::Quantize);
    assert_eq!(
        m.main.operands[q.inputs[0] as usize].operand_type,
        OperandType::TensorFloat32
    );
    assert_eq!(
        m.main.operands[q.outputs[0] as usize].operand_type,
        OperandType::TensorQuant8AsymmSigned
    );
    let d = only(&m, OperationType::Dequantize);
    assert_eq!(
        m.main.operands[d.outputs[0] as usize].operand_type,
        OperandType::TensorFloat32
    );
    assert_eq!(m.input_info[0].dtype, DataType::F32);
    // uint8 I/O: uint8 -> int8 requantization goes through float.
    let m = lower("conv_same_relu6_uint8");
    let x = &m.main.operands[m.main.inputs[0] as usize];
    assert_eq!(x.operand_type, OperandType::TensorQuant8Asymm);
    let conv = only(&m, OperationType::Conv2d);
    assert_eq!(
        m.main.operands[conv.inputs[0] as usize].operand_type,
        OperandType::TensorQuant8AsymmSigned
    );
    assert_eq!(
        (m.input_info[0].dtype, m.output_info[0].dtype),
        (DataType::U8, DataType::U8)
    );
}

#[test]
fn float16_weights_fold_to_float32_constants() {
    let unoptimized = import("conv_float16_weights");
    assert_eq!(
        histogram(&unoptimized),
        BTreeMap::from([("CONV_2D", 1)]),
        "DEQUANTIZE folded at import"
    );
    let conv = only(&unoptimized, OperationType::Conv2d);
    let filter = &unoptimized.main.operands[conv.inputs[1] as usize];
    assert_eq!(filter.operand_type, OperandType::TensorFloat32);
    // The values are exactly the float16 values of the file.
    let bytes = bytes::Bytes::from(model_bytes("conv_float16_weights"));
    let tfl = read(&bytes, &Default::default()).expect("readable");
    let half = tfl
        .tensors
        .iter()
        .find(|t| t.ty == fb::TensorType::FLOAT16 && t.shape == vec![4, 3, 3, 3])
        .expect("float16 filter");
    let expected: Vec<f32> = half
        .data
        .as_ref()
        .expect("constant")
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    assert_eq!(f32s(&unoptimized, conv.inputs[1]), expected);
}

#[test]
fn sparse_weights_densify_to_the_reference_result() {
    let m = import("fully_connected_sparse");
    let fc = only(&m, OperationType::FullyConnected);
    let w = f32s(&m, fc.inputs[1]);
    assert_eq!(w.len(), 256);
    assert!(
        w.iter().filter(|&&v| v == 0.0).count() > 128,
        "mostly zeros"
    );
    // y = x W^T recomputes the reference output from the densified weights.
    let x = read_npy_file(case_dir("fully_connected_sparse").join("input_0.npy")).expect("npy");
    let y = read_npy_file(case_dir("fully_connected_sparse").join("output_0.npy")).expect("npy");
    let (x, y) = (x.to_f32_vec().expect("f32"), y.to_f32_vec().expect("f32"));
    for b in 0..2 {
        for u in 0..16 {
            let dot: f64 = (0..16)
                .map(|k| f64::from(x[b * 16 + k]) * f64::from(w[u * 16 + k]))
                .sum();
            assert!(
                (dot - f64::from(y[b * 16 + u])).abs() < 1e-4,
                "[{b}, {u}]: {dot} vs {}",
                y[b * 16 + u]
            );
        }
    }
}

#[test]
fn buffers_stored_after_the_flatbuffer_are_read() {
    let bytes = bytes::Bytes::from(model_bytes("external_buffers"));
    let tfl = read(&bytes, &Default::default()).expect("readable");
    let filter = tfl
        .tensors
        .iter()
        .find(|t| t.shape == vec![4, 3, 3, 3])
        .expect("filter");
    let data = filter.data.as_ref().expect("constant");
    let start = data.as_ptr() as usize - bytes.as_ptr() as usize;
    assert!(
        start + data.len() <= bytes.len() && start >= 900,
        "data at {start} lies after the flatbuffer"
    );
    let m = lower("external_buffers");
    let conv = only(&m, OperationType::Conv2d);
    assert_eq!(m.constant_bytes(conv.inputs[1]), Some(&data[..]));
}

// ---- other operators ------------------------------------------------------------------

#[test]
fn shape_folds_and_input_shapes_override_the_stored_ones() {
    // SHAPE -> STRIDED_SLICE -> PACK is evaluated at import; RESHAPE takes the result
    // (the output's stored shape is a placeholder: its signature is dynamic).
    let m = import("shape_reshape");
    assert_eq!(histogram(&m), BTreeMap::from([("RESHAPE", 1)]));
    assert_eq!(m.output_info[0].dims, vec![1, 12]);
    // The input's batch is dynamic (-1 in shape_signature): fix it to 2, as the reference
    // run did.
    let options = ImportOptions {
        input_shapes: [(m.input_info[0].name.clone(), vec![2, 4, 3])].into(),
        ..Default::default()
    };
    let m = lower_with("shape_reshape", &options);
    assert_eq!(histogram(&m), BTreeMap::from([("RESHAPE", 1)]));
    assert_eq!(m.output_info[0].dims, vec![2, 12]);
    let y = read_npy_file(case_dir("shape_reshape").join("output_0.npy")).expect("npy");
    assert_eq!(y.shape, vec![2, 12]);
    // A fixed dimension cannot be overridden.
    let bad = ImportOptions {
        input_shapes: [(m.input_info[0].name.clone(), vec![2, 5, 3])].into(),
        ..Default::default()
    };
    let err = compile(model_bytes("shape_reshape"), &bad).expect_err("fixed dimension");
    assert!(matches!(err, CompileError::Options(_)), "{err}");
}

#[test]
fn data_movement_parameters() {
    let m = lower("pad");
    let p = only(&m, OperationType::Pad);
    assert_eq!(i32s(&m, role(p, "paddings")), vec![0, 0, 1, 2, 2, 1, 0, 0]);
    assert_eq!(
        m.main.operands[role(p, "paddings") as usize].dimensions,
        vec![4, 2]
    );
    let m = lower("padv2");
    let p = only(&m, OperationType::PadV2);
    assert_eq!(f32s(&m, role(p, "value")), vec![1.5]);
    for (case, mode) in [("mirror_pad_reflect", 0), ("mirror_pad_symmetric", 1)] {
        let m = lower(case);
        let p = only(&m, OperationType::MirrorPad);
        assert_eq!(i32s(&m, role(p, "value")), vec![mode], "{case}");
    }
    let m = lower("squeeze");
    let s = only(&m, OperationType::Squeeze);
    assert_eq!(i32s(&m, role(s, "squeeze_dims")), vec![0, 2]);
    let m = lower("expand_dims");
    assert_eq!(i32_of(&m, only(&m, OperationType::ExpandDims), "axis"), 1);
    let m = lower("transpose");
    assert_eq!(
        i32s(&m, role(only(&m, OperationType::Transpose), "perm")),
        vec![0, 3, 1, 2]
    );
    // x[:, 1:7:2, ::-1, 1] on [1, 8, 5, 3].
    let m = lower("strided_slice");
    let s = only(&m, OperationType::StridedSlice);
    assert_eq!(i32s(&m, role(s, "strides")), vec![1, 2, -1, 1]);
    assert_eq!(i32_of(&m, s, "shrink_mask"), 0b1000);
    assert_eq!(m.output_info[0].dims, vec![1, 3, 5]);
    let m = lower("gather");
    let g = only(&m, OperationType::Gather);
    assert_eq!(
        (i32_of(&m, g, "axis"), i32s(&m, role(g, "indices"))),
        (1, vec![2, 0, 2, 1])
    );
    let m = lower("split");
    let s = only(&m, OperationType::Split);
    assert_eq!((i32_of(&m, s, "axis"), s.outputs.len()), (2, 3));
    let m = lower("pack");
    let p = only(&m, OperationType::Pack);
    assert_eq!(i32_of(&m, p, "axis"), 1);
    assert_eq!(m.output_info[0].dims, vec![2, 3, 3]);
    let m = lower("concatenation");
    let c = only(&m, OperationType::Concatenation);
    assert_eq!(i32s(&m, *c.inputs.last().expect("axis")), vec![3]);
}

#[test]
fn resize_flags_and_sizes() {
    for (case, op, size, align, half) in [
        (
            "resize_bilinear",
            OperationType::ResizeBilinear,
            (9, 7),
            false,
            false,
        ),
        (
            "resize_bilinear_align_corners",
            OperationType::ResizeBilinear,
            (5, 7),
            true,
            false,
        ),
        (
            "resize_bilinear_half_pixel",
            OperationType::ResizeBilinear,
            (10, 6),
            false,
            true,
        ),
        (
            "resize_nearest",
            OperationType::ResizeNearestNeighbor,
            (6, 8),
            false,
            false,
        ),
        (
            "resize_nearest_half_pixel",
            OperationType::ResizeNearestNeighbor,
            (9, 6),
            false,
            true,
        ),
    ] {
        let m = lower(case);
        let r = only(&m, op);
        assert_eq!(
            (i32_of(&m, r, "width"), i32_of(&m, r, "height")),
            size,
            "{case}"
        );
        assert!(!bool_of(&m, r, "layout"), "{case}");
        assert_eq!(
            (
                bool_of(&m, r, "align_corners"),
                bool_of(&m, r, "half_pixel")
            ),
            (align, half),
            "{case}"
        );
    }
}

#[test]
fn reductions_softmax_and_arg_max() {
    let m = lower("mean");
    let r = only(&m, OperationType::Mean);
    assert_eq!(
        (i32s(&m, role(r, "axes")), i32_of(&m, r, "keep_dims")),
        (vec![1, 2], 0)
    );
    let m = lower("mean_keep_dims");
    let r = only(&m, OperationType::Mean);
    assert_eq!(
        (i32s(&m, role(r, "axes")), i32_of(&m, r, "keep_dims")),
        (vec![2], 1)
    );
    let m = lower("reduce_max");
    let r = only(&m, OperationType::ReduceMax);
    assert_eq!(i32s(&m, role(r, "axes")), vec![0, 2]);
    assert!(bool_of(&m, r, "keep_dims"));
    let m = lower("softmax_beta");
    assert_eq!(
        f32s(&m, role(only(&m, OperationType::Softmax), "beta")),
        vec![0.5]
    );
    // int64 indices compute as int32; users still receive int64.
    let m = lower("arg_max_int8");
    let a = only(&m, OperationType::Argmax);
    assert_eq!(i32_of(&m, a, "axis"), 2);
    assert_eq!(
        m.main.operands[a.outputs[0] as usize].operand_type,
        OperandType::TensorInt32
    );
    assert_eq!(m.output_info[0].dtype, DataType::I64);
    let m = lower("batch_matmul_adj");
    let b = only(&m, OperationType::BatchMatmul);
    assert!(bool_of(&m, b, "adj_lhs") && bool_of(&m, b, "adj_rhs"));
    let m = lower("batch_matmul_broadcast");
    let t = only(&m, OperationType::Tile);
    assert_eq!(i32s(&m, t.inputs[1]), vec![2, 2, 1, 1]);
}

#[test]
fn fused_activation_of_concatenation_is_a_separate_operation() {
    let m = lower("concatenation_relu");
    let c = only(&m, OperationType::Concatenation);
    let r = only(&m, OperationType::Relu);
    assert_eq!(r.inputs[0], c.outputs[0]);
}

// ---- unsupported operators ------------------------------------------------------------

#[test]
fn unsupported_operators_are_reported_together() {
    let err = compile(model_bytes("unsupported_ops"), &ImportOptions::default())
        .expect_err("must be rejected");
    let CompileError::Unsupported(report) = err else {
        panic!("expected an unsupported-operator report, got {err}");
    };
    assert_eq!(report.format, "TFLite");
    let summary: BTreeMap<&str, usize> = report
        .operators
        .iter()
        .map(|(k, v)| (k.as_str(), v.len()))
        .collect();
    // Two custom operators and CUMSUM (code 128, only in builtin_code); EXP reads
    // CUMSUM's output and is not judged; ADD lowers.
    assert_eq!(
        summary,
        BTreeMap::from([("CUMSUM", 1), ("custom:NncTestCustomOp", 2)])
    );
    let text = report.to_string();
    assert!(text.contains("custom:NncTestCustomOp x2"), "{text}");
    assert!(
        text.contains("'#2 Tanh'"),
        "node named by operator index and output: {text}"
    );
}

// ---- the shared MobileNetV2 models ----------------------------------------------------

fn shared(name: &str) -> Option<Vec<u8>> {
    let path = nnc_formats::test_support::shared_model(name)?;
    Some(std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn check_shared_io(name: &str, model: &Model) {
    let Some(dir) = nnc_formats::test_support::shared_dir() else {
        return;
    };
    for (info, suffix) in [
        (&model.input_info[0], "input"),
        (&model.output_info[0], "output"),
    ] {
        let npy =
            read_npy_file(dir.join("models").join(format!("{name}.{suffix}.npy"))).expect("npy");
        let dims: Vec<usize> = info.dims.iter().map(|&d| d as usize).collect();
        assert_eq!(
            (info.dtype, dims),
            (npy.dtype, npy.shape),
            "{name} {suffix}"
        );
    }
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn mobilenet_v2_float() {
    let Some(bytes) = shared("mobilenet_v2.tflite") else {
        return;
    };
    let m = compile(bytes, &ImportOptions::default()).expect("lowers");
    assert_eq!(
        histogram(&m),
        BTreeMap::from([
            ("ADD", 10),
            ("CONV_2D", 35),
            ("DEPTHWISE_CONV_2D", 17),
            ("FULLY_CONNECTED", 1),
            ("MEAN", 1),
            ("SOFTMAX", 1),
        ])
    );
    check_shared_io("mobilenet_v2.tflite", &m);
    // The first convolution: 224x224, 3x3, stride 2, SAME -> (0, 1) padding, RELU6.
    let first = m
        .main
        .operations
        .iter()
        .find(|o| o.op_type == OperationType::Conv2d)
        .expect("a convolution");
    assert_eq!(window(&m, first), [0, 1, 0, 1, 2, 2]);
    assert_eq!(activation(&m, first), FusedActivation::Relu6 as i32);
}

fn check_int8_mobilenet(name: &str, softmax: bool, output_quant: (f32, i32)) {
    let Some(bytes) = shared(name) else {
        return;
    };
    let m = compile(bytes, &ImportOptions::default()).expect("lowers");
    // The classifier's per-channel FULLY_CONNECTED is the 36th CONV_2D.
    let mut expected = BTreeMap::from([
        ("ADD", 10),
        ("CONV_2D", 36),
        ("DEPTHWISE_CONV_2D", 17),
        ("MEAN", 1),
        ("RESHAPE", 2),
    ]);
    if softmax {
        expected.insert("SOFTMAX", 1);
    }
    assert_eq!(histogram(&m), expected, "{name}");
    check_shared_io(name, &m);
    let x = &m.main.operands[m.main.inputs[0] as usize];
    assert_eq!(x.operand_type, OperandType::TensorQuant8AsymmSigned);
    assert!(
        (x.scale - 0.007_843_13).abs() < 1e-7 && x.zero_point == -1,
        "{x:?}"
    );
    let y = &m.main.operands[m.main.outputs[0] as usize];
    assert_eq!(y.operand_type, OperandType::TensorQuant8AsymmSigned);
    assert!(
        (y.scale - output_quant.0).abs() < 1e-6 && y.zero_point == output_quant.1,
        "{y:?}"
    );
    for op in &m.main.operations {
        if !matches!(
            op.op_type,
            OperationType::Conv2d | OperationType::DepthwiseConv2d
        ) {
            continue;
        }
        let filter = &m.main.operands[op.inputs[1] as usize];
        let want = if op.op_type == OperationType::Conv2d {
            0
        } else {
            3
        };
        assert_eq!(filter.operand_type, OperandType::TensorQuant8SymmPerChannel);
        assert_eq!(
            filter.channel_quant.as_ref().map(|q| q.channel_dim),
            Some(want)
        );
        let bias = &m.main.operands[op.inputs[2] as usize];
        assert_eq!(
            (bias.operand_type, bias.scale),
            (OperandType::TensorInt32, 0.0)
        );
    }
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn mobilenet_v2_int8() {
    check_int8_mobilenet("mobilenet_v2_int8.tflite", true, (1.0 / 256.0, -128));
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn mobilenet_v2_int8_logits() {
    check_int8_mobilenet("mobilenet_v2_int8_logits.tflite", false, (0.013_864, -15));
}

// ---- malformed files --------------------------------------------------------------------

fn import_err(bytes: Vec<u8>) -> CompileError {
    match import_bytes(bytes.into(), &ImportOptions::default()) {
        Ok(_) => panic!("a malformed model was accepted"),
        Err(e) => e,
    }
}

fn assert_invalid(err: &CompileError, needles: &[&str]) {
    let text = err.to_string();
    assert!(matches!(err, CompileError::InvalidModel { .. }), "{text}");
    for n in needles {
        assert!(text.contains(n), "'{n}' missing from: {text}");
    }
}

#[test]
fn garbage_and_non_tflite_files_are_rejected() {
    assert_invalid(&import_err(Vec::new()), &["too short"]);
    assert_invalid(&import_err(b"hello, world".to_vec()), &["TFL3"]);
    let onnx = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/models/tiny_cnn.onnx"
    ))
    .expect("tiny_cnn.onnx");
    assert_invalid(&import_err(onnx), &["TFL3"]);
    // The right identifier in front of garbage.
    let mut rng = Rng(7);
    for len in [8, 9, 64, 1000] {
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        bytes[4..8].copy_from_slice(b"TFL3");
        assert_invalid(&import_err(bytes), &["file"]);
    }
}

#[test]
fn truncated_files_are_rejected_at_every_length() {
    for case in [
        "conv_same_relu6_int8",
        "external_buffers",
        "fully_connected_sparse",
    ] {
        let bytes = model_bytes(case);
        let full = import_bytes(bytes.clone().into(), &ImportOptions::default())
            .expect("the whole file imports")
            .model;
        // Every byte nnc reads lies before this: the flatbuffer's tables and the
        // tensors' data. (Unread bytes can follow, such as metadata buffers.)
        let shared = bytes::Bytes::from(bytes.clone());
        let tfl = read(&shared, &Default::default()).expect("readable");
        let data_end = tfl
            .tensors
            .iter()
            .filter_map(|t| t.data.as_ref())
            .filter(|d| !t_is_copy(d, &shared))
            .map(|d| d.as_ptr() as usize - shared.as_ptr() as usize + d.len())
            .max()
            .unwrap_or(0);
        for len in 0..bytes.len() {
            let result = catch_unwind(|| {
                import_bytes(bytes[..len].to_vec().into(), &ImportOptions::default())
            });
            match result {
                Err(_) => panic!("{case}: truncation to {len} bytes panicked"),
                Ok(Ok(imported)) => {
                    assert!(
                        len >= data_end,
                        "{case}: truncation to {len} bytes (data ends at {data_end}) was accepted"
                    );
                    assert!(
                        imported.model == full,
                        "{case}: truncation to {len} bytes changed the model"
                    );
                }
                Ok(Err(e)) => assert!(
                    matches!(e, CompileError::InvalidModel { .. }),
                    "{case} at {len}: {e}"
                ),
            }
        }
    }
}

/// True when `data` is not a slice of `file` (densified sparse constants are copies).
fn t_is_copy(data: &bytes::Bytes, file: &bytes::Bytes) -> bool {
    let (d, f) = (data.as_ptr() as usize, file.as_ptr() as usize);
    d < f || d + data.len() > f + file.len()
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Flips, zeroes, saturates and overwrites random bytes of real models, and imports and
/// optimizes each result: errors are fine, panics are not.
#[test]
fn mutated_models_never_panic() {
    // NNC_FUZZ_ITERATIONS raises the per-model count for a longer local run.
    let iterations: usize = std::env::var("NNC_FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut rng = Rng(std::env::var("NNC_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15));
    let mut accepted = 0;
    let mut rejected = 0;
    for case in [
        "conv_same_relu6_int8",
        "depthwise_add_legacy_uint8",
        "fully_connected_sparse",
        "external_buffers",
        "shape_reshape",
        "strided_slice",
        "transpose_conv_same_stride2_int8",
        "concatenation_relu",
    ] {
        let original = model_bytes(case);
        for _ in 0..iterations {
            let mut bytes = original.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(bytes.len());
                bytes[at] = match rng.below(5) {
                    0 => bytes[at] ^ (1 << rng.below(8)),
                    1 => 0,
                    2 => 0xff,
                    3 => 0x7f,
                    _ => rng.next() as u8,
                };
            }
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                compile(bytes.clone(), &ImportOptions::default())
            }));
            match outcome {
                Ok(Ok(_)) => accepted += 1,
                Ok(Err(_)) => rejected += 1,
                Err(_) => {
                    let path = std::env::temp_dir().join(format!("nnc-tflite-panic-{case}.tflite"));
                    let _ = std::fs::write(&path, &bytes);
                    panic!(
                        "{case}: a mutated model panicked (saved to {})",
                        path.display()
                    );
                }
            }
        }
    }
    assert!(
        accepted > 0 && rejected > 0,
        "accepted {accepted}, rejected {rejected}"
    );
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn mutated_mobilenet_never_panics() {
    let Some(original) = shared("mobilenet_v2_int8_logits.tflite") else {
        return;
    };
    let mut rng = Rng(42);
    // Mutations within the first 64 KiB hit the tables, not the weights.
    for _ in 0..40 {
        let mut bytes = original.clone();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(65536.min(bytes.len()));
            bytes[at] = rng.next() as u8;
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            compile(bytes, &ImportOptions::default())
        }));
        assert!(outcome.is_ok(), "a mutated MobileNetV2 panicked");
    }
}

// ---- targeted corruptions of valid models ---------------------------------------------

/// The byte position of a table's field in `bytes` (which must be present in the file).
fn field_position(tab: &flatbuffers::Table, field: flatbuffers::VOffsetT) -> usize {
    let offset = tab.vtable().get(field);
    assert_ne!(offset, 0, "the field is not stored in this file");
    tab.loc() + offset as usize
}

fn patch(bytes: &mut [u8], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

fn root(bytes: &[u8]) -> fb::Model<'_> {
    fb::root_as_model(bytes).expect("valid")
}

#[test]
fn tensor_index_out_of_range_is_named() {
    let original = model_bytes("conv_same_relu6");
    for bad in [999i32, -5] {
        let mut bytes = original.clone();
        let position = {
            let model = root(&original);
            let op = model
                .subgraphs()
                .expect("subgraphs")
                .get(0)
                .operators()
                .expect("ops")
                .get(0);
            let inputs = op.inputs().expect("inputs");
            inputs.bytes().as_ptr() as usize - original.as_ptr() as usize
        };
        patch(&mut bytes, position + 4, &bad.to_le_bytes()); // input 1 (the filter)
        assert_invalid(
            &import_err(bytes),
            &[
                "operator 0 (CONV_2D)",
                &format!("input 1 names tensor {bad}"),
            ],
        );
    }
    // A subgraph output past the tensor list.
    let mut bytes = original.clone();
    let position = {
        let model = root(&original);
        let outputs = model
            .subgraphs()
            .expect("subgraphs")
            .get(0)
            .outputs()
            .expect("outputs");
        outputs.bytes().as_ptr() as usize - original.as_ptr() as usize
    };
    patch(&mut bytes, position, &1234i32.to_le_bytes());
    assert_invalid(
        &import_err(bytes),
        &["subgraph 0", "output 0 names tensor 1234"],
    );
}

#[test]
fn buffer_offsets_beyond_the_file_are_rejected() {
    let original = model_bytes("external_buffers");
    let len = original.len() as u64;
    for (bad, needle) in [
        (len - 8, "past the end"),
        (len + 100, "past the end"),
        (u64::MAX - 4, "overflows"),
    ] {
        let mut bytes = original.clone();
        let position = {
            let model = root(&original);
            let buffer = model
                .buffers()
                .expect("buffers")
                .iter()
                .find(|b| b.offset() > 1)
                .expect("an external buffer");
            field_position(&buffer._tab, fb::Buffer::VT_OFFSET)
        };
        patch(&mut bytes, position, &bad.to_le_bytes());
        assert_invalid(&import_err(bytes), &["buffer", needle]);
    }
}

#[test]
fn wrong_buffer_indices_and_sizes_are_rejected() {
    let original = model_bytes("conv_same_relu6");
    let (buffer_field, shape_vector) = {
        let model = root(&original);
        let tensors = model
            .subgraphs()
            .expect("subgraphs")
            .get(0)
            .tensors()
            .expect("tensors");
        let filter = tensors
            .iter()
            .find(|t| {
                t.shape()
                    .is_some_and(|s| s.iter().collect::<Vec<_>>() == [4, 3, 3, 3])
            })
            .expect("the filter");
        (
            field_position(&filter._tab, fb::Tensor::VT_BUFFER),
            filter.shape().expect("shape").bytes().as_ptr() as usize - original.as_ptr() as usize,
        )
    };
    let mut bytes = original.clone();
    patch(&mut bytes, buffer_field, &77u32.to_le_bytes());
    assert_invalid(&import_err(bytes), &["refers to buffer 77"]);
    // A shape that disagrees with the stored bytes.
    let mut bytes = original.clone();
    patch(&mut bytes, shape_vector + 12, &4i32.to_le_bytes());
    assert_invalid(&import_err(bytes), &["holds 432 bytes", "needs 576"]);
    let mut bytes = original.clone();
    patch(&mut bytes, shape_vector, &(-4i32).to_le_bytes());
    assert_invalid(&import_err(bytes), &["negative dimension -4"]);
}

#[test]
fn operator_codes_take_the_larger_of_both_fields() {
    let original = model_bytes("conv_same_relu6");
    let (builtin, deprecated) = {
        let model = root(&original);
        let code = model.operator_codes().expect("codes").get(0);
        assert_eq!(code.builtin_code(), fb::BuiltinOperator::CONV_2D);
        (
            field_position(&code._tab, fb::OperatorCode::VT_BUILTIN_CODE),
            field_position(&code._tab, fb::OperatorCode::VT_DEPRECATED_BUILTIN_CODE),
        )
    };
    // A file from before the extended field: builtin_code reads 0 (ADD).
    let mut bytes = original.clone();
    patch(&mut bytes, builtin, &0i32.to_le_bytes());
    let m = compile(bytes, &ImportOptions::default()).expect("old-style code");
    assert_eq!(histogram(&m), BTreeMap::from([("CONV_2D", 1)]));
    // An extended code past 127: the byte holds the placeholder.
    let mut bytes = original.clone();
    patch(&mut bytes, builtin, &300i32.to_le_bytes());
    patch(&mut bytes, deprecated, &[127]);
    let err = import_err(bytes);
    let CompileError::Unsupported(report) = err else {
        panic!("expected unsupported, got {err}");
    };
    assert!(report.operators.contains_key("BUILTIN_300"), "{report}");
}

#[test]
fn operator_code_index_out_of_range_is_rejected() {
    let original = model_bytes("shape_reshape");
    let position = {
        let model = root(&original);
        let op = model
            .subgraphs()
            .expect("subgraphs")
            .get(0)
            .operators()
            .expect("ops")
            .get(1);
        field_position(&op._tab, fb::Operator::VT_OPCODE_INDEX)
    };
    let mut bytes = original.clone();
    patch(&mut bytes, position, &99u32.to_le_bytes());
    assert_invalid(&import_err(bytes), &["operator 1", "operator code 99"]);
}

#[test]
fn other_schema_versions_are_unsupported() {
    let original = model_bytes("relu");
    let position = field_position(&root(&original)._tab, fb::Model::VT_VERSION);
    let mut bytes = original.clone();
    patch(&mut bytes, position, &4u32.to_le_bytes());
    let err = import_err(bytes);
    assert!(matches!(err, CompileError::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("schema version 4"), "{err}");
}
