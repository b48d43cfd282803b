//! Lowering tests over the ONNX corpus in `testdata/onnx` (made by
//! `scripts/gen_onnx_testdata.py`; the files are committed, so no Python is needed here).
//!
//! Every case is lowered and optimized by the real pipeline, and checked for:
//! - the exact operation histogram after optimization (the table below; each entry was
//!   worked out from the lowering and the passes, not copied from a run),
//! - a lowered model that passes `nnc_formats::nn::validate`,
//! - model inputs and outputs whose element types and dimensions match the reference
//!   `.npy` files (which onnxruntime wrote).
//!
//! Specific tests then check the facts that matter per operator: padding, strides,
//! dilations, fused activations, folded constants, layouts of re-laid-out weights.
//! Nothing here executes a model: the reference outputs are for the runtime's tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use nnc_compiler::CompileError;
use nnc_compiler::onnx::constant;
use nnc_compiler::onnx::tensor::{ExternalDataContext, tensor_to_host};
use nnc_compiler::pipeline::{LowerOptions, Lowered, lower_file};
use nnc_formats::nn::ops::input_role;
use nnc_formats::nn::{
    FusedActivation, Model, OperandIndex, OperandType, Operation, OperationType, dump, validate,
};
use nnc_formats::npy::read_npy_file;
use nnc_formats::tensor::DataType;

// ---- helpers ------------------------------------------------------------------------

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/onnx");
const TINY_CNN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../testdata/models/tiny_cnn.onnx"
);

fn case_dir(case: &str) -> PathBuf {
    PathBuf::from(CORPUS).join(case)
}

fn lower_with(case: &str, options: &LowerOptions) -> Lowered {
    let path = case_dir(case).join("model.onnx");
    let lowered =
        lower_file(&path, options).unwrap_or_else(|e| panic!("{case}: lowering failed: {e}"));
    if let Err(e) = validate(&lowered.model) {
        panic!(
            "{case}: the lowered model does not validate: {e}\n{}",
            dump::to_text(&lowered.model)
        );
    }
    lowered
}

/// Lowers and optimizes a corpus case (and validates the result).
fn lower(case: &str) -> Lowered {
    lower_with(case, &LowerOptions::default())
}

/// Lowers a corpus case without the optimization passes.
fn lower_unoptimized(case: &str) -> Lowered {
    lower_with(
        case,
        &LowerOptions {
            no_optimize: true,
            ..Default::default()
        },
    )
}

fn assert_histogram(case: &str, lowered: &Lowered, expected: &[(&str, usize)]) {
    let expected: BTreeMap<&str, usize> = expected.iter().copied().collect();
    assert_eq!(
        lowered.model.operation_histogram(),
        expected,
        "{case}: optimized operation histogram (left: actual, right: expected)\n{}",
        dump::to_text(&lowered.model)
    );
}

/// The model's inputs and outputs have the element types and shapes of the reference
/// `.npy` files, in order (a dimension known only at run time, 0, matches any size, but
/// the rank must match).
fn assert_io_matches_reference(case: &str, model: &Model) {
    let dir = case_dir(case);
    for (kind, infos) in [("input", &model.input_info), ("output", &model.output_info)] {
        for (i, info) in infos.iter().enumerate() {
            let path = dir.join(format!("{kind}_{i}.npy"));
            let npy =
                read_npy_file(&path).unwrap_or_else(|e| panic!("{case}: {}: {e}", path.display()));
            let dims: Vec<usize> = info
                .dims
                .iter()
                .enumerate()
                .map(|(k, &d)| match (d, npy.shape.get(k)) {
                    (0, Some(&actual)) => actual,
                    _ => d as usize,
                })
                .collect();
            assert_eq!(
                (info.dtype, dims),
                (npy.dtype, npy.shape.clone()),
                "{case}: {kind} {i} ('{}') type and shape vs {}",
                info.name,
                path.display()
            );
        }
        let extra = dir.join(format!("{kind}_{}.npy", infos.len()));
        assert!(
            !extra.exists(),
            "{case}: {} exists but the model has only {} {kind}s",
            extra.display(),
            infos.len()
        );
    }
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
    let bytes = model.constant_bytes(operand).expect("a constant operand");
    bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn f32s(model: &Model, operand: OperandIndex) -> Vec<f32> {
    let bytes = model.constant_bytes(operand).expect("a constant operand");
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn scalar_i32(model: &Model, op: &Operation, name: &str) -> i32 {
    let v = i32s(model, role(op, name));
    assert_eq!(v.len(), 1, "{} '{name}' is not a scalar", op.op_type);
    v[0]
}

fn scalar_bool(model: &Model, op: &Operation, name: &str) -> bool {
    let bytes = model
        .constant_bytes(role(op, name))
        .expect("a constant operand");
    assert_eq!(
        bytes.len(),
        1,
        "{} '{name}' is not a BOOL scalar",
        op.op_type
    );
    bytes[0] != 0
}

fn dims(model: &Model, operand: OperandIndex) -> Vec<u32> {
    model.main.operands[operand as usize].dimensions.clone()
}

/// `[pad_left, pad_right, pad_top, pad_bottom, stride_w, stride_h]` of a convolution or pool.
fn window(model: &Model, op: &Operation) -> [i32; 6] {
    [
        "pad_left",
        "pad_right",
        "pad_top",
        "pad_bottom",
        "stride_w",
        "stride_h",
    ]
    .map(|r| scalar_i32(model, op, r))
}

fn fused_activation(model: &Model, op: &Operation) -> i32 {
    scalar_i32(model, op, "activation")
}

/// An initializer of the ONNX model at `path`, as f32 values and its shape.
fn onnx_initializer(path: &std::path::Path, name: &str) -> (Vec<f32>, Vec<usize>) {
    let bytes = std::fs::read(path).unwrap();
    let model = nnc_compiler::onnx::proto::decode_model(bytes.into()).unwrap();
    let graph = model.graph.expect("a graph");
    let t = graph
        .initializer
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{}: no initializer '{name}'", path.display()));
    let host = tensor_to_host(t, &ExternalDataContext::none()).unwrap();
    (constant::to_f32s(&host), host.shape.clone())
}

fn case_initializer(case: &str, name: &str) -> (Vec<f32>, Vec<usize>) {
    onnx_initializer(&case_dir(case).join("model.onnx"), name)
}

/// Row-major transpose of `values` with `shape` by `perm` (`out.dims[k] = dims[perm[k]]`).
fn transposed(values: &[f32], shape: &[usize], perm: &[usize]) -> Vec<f32> {
    let rank = shape.len();
    let mut strides = vec![1; rank];
    for k in (0..rank.saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * shape[k + 1];
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let mut out = Vec::with_capacity(values.len());
    let mut idx = vec![0; rank];
    for _ in 0..values.len() {
        out.push(values[(0..rank).map(|k| idx[k] * strides[perm[k]]).sum::<usize>()]);
        for k in (0..rank).rev() {
            idx[k] += 1;
            if idx[k] < out_shape[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

fn assert_close(actual: &[f32], expected: &[f32], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= 1e-5 * e.abs().max(1.0),
            "{what}[{i}]: {a} vs expected {e}"
        );
    }
}

// ---- the histogram table --------------------------------------------------------------

/// One test per case: lower, validate, compare the optimized histogram, check the I/O
/// against the reference files. `HISTOGRAM_CASES` lists them for the completeness test.
macro_rules! histogram_cases {
    ($($(#[$meta:meta])* $case:ident: [$($op:ident: $count:literal),* $(,)?],)*) => {
        const HISTOGRAM_CASES: &[&str] = &[$(stringify!($case)),*];

        mod histogram {
            use super::*;
            $(
                $(#[$meta])*
                #[test]
                fn $case() {
                    let case = stringify!($case);
                    let lowered = lower(case);
                    assert_histogram(case, &lowered, &[$((stringify!($op), $count)),*]);
                    assert_io_matches_reference(case, &lowered.model);
                }
            )*
        }
    };
}

// Layout-sensitive operations run in NHWC between two transposes; with an NCHW model
// input and output, both stay (the pass cancels only the pairs in between).
histogram_cases! {
    // Conv
    conv_plain: [TRANSPOSE: 2, CONV_2D: 1],
    conv_strides_2: [TRANSPOSE: 2, CONV_2D: 1],
    conv_dilations_2: [TRANSPOSE: 2, CONV_2D: 1],
    conv_auto_pad_same_upper: [TRANSPOSE: 2, CONV_2D: 1],
    conv_auto_pad_same_lower: [TRANSPOSE: 2, CONV_2D: 1],
    conv_auto_pad_valid: [TRANSPOSE: 2, CONV_2D: 1],
    conv_asymmetric_pads: [TRANSPOSE: 2, CONV_2D: 1],
    conv_no_bias: [TRANSPOSE: 2, CONV_2D: 1],
    conv_depthwise: [TRANSPOSE: 2, DEPTHWISE_CONV_2D: 1],
    conv_depthwise_multiplier_2: [TRANSPOSE: 2, DEPTHWISE_CONV_2D: 1],
    conv_grouped: [TRANSPOSE: 2, GROUPED_CONV_2D: 1],
    // 1-D runs as 2-D of height 1: a reshape on each side.
    conv_1d: [RESHAPE: 2, TRANSPOSE: 2, CONV_2D: 1],
    // NonZero's count is known only at run time: everything after it runs with run-time
    // shapes.
    non_zero_gather: [RELU: 1, NON_ZERO: 1, TRANSPOSE: 1, GATHER_ND: 1],
    // ReverseSequence: a GATHER_ELEMENTS by t < len ? len - 1 - t : t, tiled (the
    // constant lengths' index folds whole).
    reverse_sequence_rank3: [
        LESS: 1, SUB: 2, SELECT: 1, RESHAPE: 2, TILE: 1, GATHER_ELEMENTS: 2,
    ],
    // Unique: one UNIQUE per node (the counts are known only at run time).
    unique_values_and_rows: [UNIQUE: 2],
    // A computed Compress condition: NON_ZERO, then a GATHER of the rows it names.
    compress_runtime_condition: [
        REDUCE_SUM: 1, GREATER: 1, NON_ZERO: 1, SQUEEZE: 1, GATHER: 1, MUL: 1,
    ],
    // NMS appended to a detector: the selection's length is known only at run time. The
    // box indices it gathers by are computed, so negative ones are wrapped (LESS, CAST,
    // MUL, ADD).
    non_max_suppression_gather: [
        NON_MAX_SUPPRESSION: 1, GATHER: 2, RESHAPE: 2, LESS: 1, CAST: 1, MUL: 1, ADD: 1,
    ],
    // Float8 computes as float32: each cast to a format is a MATH_UNARY rounding, each
    // cast back to float32 only relabels.
    float8_casts: [MATH_UNARY: 8],
    float8_quantize: [DIV: 1, MATH_UNARY: 1, MUL: 1],
    // int4 weights: their blocked dequantization is evaluated at compile time, so the
    // products read constant float weights.
    int4_weight_matmul: [FULLY_CONNECTED: 2],
    // ConvInteger: the differences from the zero points in float32 (exact), cast back.
    conv_integer: [CAST: 2, SUB: 1, TRANSPOSE: 2, GROUPED_CONV_2D: 1],
    // Sums that could pass 2^24: three input-channel ranges, their int32 results added.
    conv_integer_wide: [CAST: 4, SLICE: 3, TRANSPOSE: 4, CONV_2D: 3, ADD: 2],
    // Run-time weights: their differences from the zero point computed too (the filter's
    // transpose to OHWI is the third TRANSPOSE).
    conv_integer_run_time_weights: [CAST: 3, SUB: 2, TRANSPOSE: 3, CONV_2D: 1],
    // 3-D convolutions: NDHWC, depth padding, the kD depth-shifted views concatenated
    // along the channels, depth folded into the batch, one CONV_2D.
    conv_3d: [TRANSPOSE: 2, PAD: 1, STRIDED_SLICE: 3, CONCATENATION: 1, RESHAPE: 2, CONV_2D: 1],
    conv_3d_depth_stride_dilation: [
        TRANSPOSE: 2, PAD: 1, STRIDED_SLICE: 3, CONCATENATION: 1, RESHAPE: 2, CONV_2D: 1,
    ],
    // kD = 1 needs no views; a kD x 1 x 1 convolution is a 2-D one over (D, H·W); the
    // transposes between the two convolutions cancel and the RELU fuses into the first
    // across its reshape.
    conv_3d_factorized: [TRANSPOSE: 2, RESHAPE: 4, CONV_2D: 2],
    // Grouped: one convolution per depth tap over its view, summed.
    conv_3d_depthwise: [
        TRANSPOSE: 2, PAD: 1, STRIDED_SLICE: 3, RESHAPE: 4, DEPTHWISE_CONV_2D: 3, ADD: 2,
    ],
    conv_3d_grouped: [
        TRANSPOSE: 2, PAD: 1, STRIDED_SLICE: 2, RESHAPE: 3, GROUPED_CONV_2D: 2, ADD: 1,
    ],
    conv_3d_same_upper_no_bias: [
        TRANSPOSE: 2, PAD: 1, STRIDED_SLICE: 2, CONCATENATION: 1, RESHAPE: 2, CONV_2D: 1,
    ],
    // BatchNormalization (MUL + ADD) folds into the convolution.
    conv_batch_norm: [TRANSPOSE: 2, CONV_2D: 1],
    // The activation fuses into the convolution.
    conv_relu: [TRANSPOSE: 2, CONV_2D: 1],
    conv_clip_relu6: [TRANSPOSE: 2, CONV_2D: 1],
    conv_clip_relu6_opset10_attributes: [TRANSPOSE: 2, CONV_2D: 1],
    conv_depthwise_dilated: [TRANSPOSE: 2, DEPTHWISE_CONV_2D: 1],

    // Convolutions in context: the output transpose sinks through what follows.
    // The mean over H and W drops them, so the layouts agree and no transpose is left.
    conv_reduce_mean_no_keepdims: [TRANSPOSE: 1, CONV_2D: 1, MEAN: 1],
    // Each conv transposes the shared input for itself (2); the concat runs in NHWC.
    conv_concat_channels: [TRANSPOSE: 3, CONV_2D: 2, CONCATENATION: 1],
    conv_softmax_channels: [TRANSPOSE: 2, CONV_2D: 1, SOFTMAX: 1],
    // The model's own NCHW -> NHWC transpose cancels the lowering's NHWC -> NCHW one.
    conv_then_transpose_to_nhwc: [TRANSPOSE: 1, CONV_2D: 1],
    // Per-channel [C,1,1] MUL and ADD fold like a batch norm.
    conv_mul_add_per_channel: [TRANSPOSE: 2, CONV_2D: 1],
    // Batch norm after the (fused) Relu stays a MUL and an ADD, in NHWC.
    conv_relu_batch_norm: [TRANSPOSE: 2, CONV_2D: 1, MUL: 1, ADD: 1],

    // ConvTranspose
    conv_transpose_basic: [TRANSPOSE: 2, TRANSPOSE_CONV_2D: 1],
    conv_transpose_strides_pads: [TRANSPOSE: 2, TRANSPOSE_CONV_2D: 1],
    conv_transpose_output_padding: [TRANSPOSE: 2, TRANSPOSE_CONV_2D: 1],
    // The output padding exceeds the end pad: zeros are padded on, then the bias added.
    conv_transpose_output_padding_no_pads: [TRANSPOSE: 2, TRANSPOSE_CONV_2D: 1, PAD: 1, ADD: 1],
    conv_transpose_output_shape: [TRANSPOSE: 2, TRANSPOSE_CONV_2D: 1],
    conv_transpose_auto_pad_same_upper: [TRANSPOSE: 2, TRANSPOSE_CONV_2D: 1],
    conv_transpose_1d: [RESHAPE: 2, TRANSPOSE: 2, TRANSPOSE_CONV_2D: 1],
    // 3-D ConvTranspose: one TRANSPOSE_CONV_2D per depth tap (depth in the batch), its
    // slices spread by the depth stride and shifted by the tap (PAD), summed, cropped
    // and biased.
    conv_transpose_3d: [
        TRANSPOSE: 2, RESHAPE: 6, TRANSPOSE_CONV_2D: 2, PAD: 4, STRIDED_SLICE: 2, ADD: 2,
    ],
    conv_transpose_3d_pads_output_padding: [
        TRANSPOSE: 2, RESHAPE: 8, TRANSPOSE_CONV_2D: 3, PAD: 6, STRIDED_SLICE: 4, ADD: 3,
    ],
    conv_transpose_3d_dilated_output_shape: [
        TRANSPOSE: 2, RESHAPE: 8, TRANSPOSE_CONV_2D: 3, PAD: 6, STRIDED_SLICE: 4, ADD: 3,
    ],

    // Gemm: constant B becomes FULLY_CONNECTED; a row-broadcast C folds into its bias.
    gemm_trans_b: [FULLY_CONNECTED: 1],
    gemm_alpha_beta: [FULLY_CONNECTED: 1],
    gemm_c_matrix: [FULLY_CONNECTED: 1, ADD: 1],
    // C [3,1] is per row, not a bias: it is added after the layer, like a matrix C.
    gemm_c_column: [FULLY_CONNECTED: 1, ADD: 1],
    gemm_trans_a: [TRANSPOSE: 1, FULLY_CONNECTED: 1],
    gemm_runtime_b: [BATCH_MATMUL: 1, ADD: 1],
    gemm_runtime_b_trans_b_alpha_beta: [BATCH_MATMUL: 1, MUL: 1, ADD: 1],

    // MatMul
    matmul_const_2d_b_3d_a: [FULLY_CONNECTED: 1, RESHAPE: 1],
    matmul_const_1d_b: [FULLY_CONNECTED: 1, RESHAPE: 1],
    matmul_runtime_3d: [BATCH_MATMUL: 1],
    // B [4,5] is lifted to [1,4,5] and tiled to A's batch of 2.
    matmul_broadcast_batch: [RESHAPE: 1, TILE: 1, BATCH_MATMUL: 1],
    // A [4] becomes [1,4] for FULLY_CONNECTED (which needs rank >= 2), and [1,5] -> [5] after.
    matmul_1d_a: [RESHAPE: 2, FULLY_CONNECTED: 1],
    // A [4] -> [1,1,4] (the two reshapes collapse), tiled to [2,1,4]; [2,1,5] -> [2,5].
    matmul_1d_a_runtime_b: [RESHAPE: 2, TILE: 1, BATCH_MATMUL: 1],

    // BatchNormalization alone: the channel constants move to NCHW and the transposes cancel.
    batch_norm_rank4: [MUL: 1, ADD: 1],
    batch_norm_rank3: [MUL: 1, ADD: 1],
    batch_norm_rank2: [MUL: 1, ADD: 1],

    // Other normalizations: the NN operations' per-channel parameters are scalars, so
    // InstanceNormalization's scale and shift follow as MUL and ADD.
    instance_normalization: [TRANSPOSE: 2, INSTANCE_NORMALIZATION: 1, MUL: 1, ADD: 1],
    lrn: [TRANSPOSE: 2, LOCAL_RESPONSE_NORMALIZATION: 1],

    // Activations
    relu: [RELU: 1],
    sigmoid: [LOGISTIC: 1],
    tanh: [TANH: 1],
    leaky_relu: [PRELU: 1],
    prelu_per_channel: [PRELU: 1],
    elu: [ELU: 1],
    hard_sigmoid: [MUL: 1, ADD: 1, MAXIMUM: 1, MINIMUM: 1],
    hard_swish_opset14: [HARD_SWISH: 1],
    selu: [ELU: 1, MUL: 1],
    // max(x, 0) + log(1 + exp(-|x|))
    softplus: [RELU: 1, ABS: 1, NEG: 1, EXP: 1, ADD: 2, LOG: 1],
    softsign: [ABS: 1, ADD: 1, DIV: 1],
    clip_arbitrary: [MAXIMUM: 1, MINIMUM: 1],
    clip_relu1: [RELU1: 1],
    // alpha * elu(x / alpha)
    celu: [DIV: 1, ELU: 1, MUL: 1],
    // x * (x > alpha)
    thresholded_relu: [GREATER: 1, CAST: 1, MUL: 1],
    // x * tanh(softplus(x))
    mish: [RELU: 1, ABS: 1, NEG: 1, EXP: 1, ADD: 2, LOG: 1, TANH: 1, MUL: 1],

    // Softmax
    softmax_axis_last: [SOFTMAX: 1],
    softmax_axis_1_rank3: [SOFTMAX: 1],
    // Opset < 13 normalizes over the flattened trailing dimensions: [1,3,2,2] -> [1,12].
    softmax_opset11_axis_1_rank4: [RESHAPE: 2, SOFTMAX: 1],
    log_softmax: [LOG_SOFTMAX: 1],

    // Binary elementwise, three broadcasts each; broadcasting is the NN operations' own.
    add_broadcast: [ADD: 3],
    sub_broadcast: [SUB: 3],
    mul_broadcast: [MUL: 3],
    div_broadcast: [DIV: 3],
    pow_broadcast: [POW: 3],
    max_broadcast: [MAXIMUM: 3],
    min_broadcast: [MINIMUM: 3],
    // Three inputs make two binary operations each; Mean is Sum times 1/3.
    variadic_max_min_sum_mean: [MAXIMUM: 2, MINIMUM: 2, ADD: 4, MUL: 1],
    comparisons: [EQUAL: 1, LESS: 1, GREATER: 1, LESS_EQUAL: 1, GREATER_EQUAL: 1],
    // Xor on booleans is NOT_EQUAL.
    logical_ops: [LOGICAL_AND: 1, LOGICAL_OR: 1, NOT_EQUAL: 1, LOGICAL_NOT: 1],
    where_broadcast: [SELECT: 1],

    // Pools
    max_pool_2x2_s2: [TRANSPOSE: 2, MAX_POOL_2D: 1],
    max_pool_3x3_s2_pads: [TRANSPOSE: 2, MAX_POOL_2D: 1],
    max_pool_ceil_mode: [TRANSPOSE: 2, MAX_POOL_2D: 1],
    average_pool_exclude_pad: [TRANSPOSE: 2, AVERAGE_POOL_2D: 1],
    // NN pools never count padding: explicit zero padding first makes it counted.
    average_pool_include_pad: [TRANSPOSE: 2, PAD: 1, AVERAGE_POOL_2D: 1],
    average_pool_ceil_mode: [TRANSPOSE: 2, AVERAGE_POOL_2D: 1],
    // Explicit zero padding, then the ceil-mode overhang (none here: a 4th window would
    // start in the end padding, which ONNX skips). Reference output [1,2,3,3].
    average_pool_include_pad_ceil_mode: [TRANSPOSE: 2, PAD: 1, AVERAGE_POOL_2D: 1],
    // Global pools are reductions over H and W, layout-free.
    global_average_pool: [MEAN: 1],
    global_max_pool: [REDUCE_MAX: 1],
    max_pool_1d: [RESHAPE: 2, TRANSPOSE: 2, MAX_POOL_2D: 1],
    // 3-D MaxPool: NDHWC, one MAX_POOL_2D over height and width with the depth in the
    // batch, then the maximum of the depth-shifted views (padded with -inf).
    max_pool_3d: [
        TRANSPOSE: 2, PAD_V2: 2, RESHAPE: 4, MAX_POOL_2D: 2, STRIDED_SLICE: 5, MAXIMUM: 3,
    ],
    max_pool_3d_spatial_only: [TRANSPOSE: 2, RESHAPE: 2, MAX_POOL_2D: 1],

    // Shape and data movement
    concat_axis_1: [CONCATENATION: 1],
    concat_axis_negative: [CONCATENATION: 1],
    reshape_zero_and_minus_one: [RESHAPE: 1],
    flatten_axis_1: [RESHAPE: 1],
    flatten_axis_2: [RESHAPE: 1],
    transpose: [TRANSPOSE: 1],
    squeeze_unsqueeze_opset11: [RESHAPE: 2],
    squeeze_unsqueeze_opset13: [RESHAPE: 2],
    pad_constant_zero: [PAD: 1],
    pad_constant_value: [PAD_V2: 1],
    pad_reflect: [MIRROR_PAD: 1],
    slice_steps_2: [STRIDED_SLICE: 1],
    slice_negative_steps: [STRIDED_SLICE: 1],
    slice_negative_starts: [SLICE: 1],
    split_equal: [SPLIT: 1],
    split_unequal: [SLICE: 3],
    split_opset18_num_outputs: [SLICE: 3],
    gather_const_indices: [GATHER: 1],
    // A scalar index gathers a unit dimension, then drops it.
    gather_scalar_index: [GATHER: 1, RESHAPE: 1],
    gather_negative_index: [GATHER: 1],
    gather_runtime_indices: [ADD: 1, CAST: 1, GATHER: 1, LESS: 1, MUL: 1],
    tile: [TILE: 1],
    // [3,1] -> [1,3,1] -> tiled to [2,3,4].
    expand: [RESHAPE: 1, TILE: 1],
    depth_to_space_dcr: [TRANSPOSE: 2, DEPTH_TO_SPACE: 1],
    // CRD permutes the channels into DCR order first.
    depth_to_space_crd: [GATHER: 1, TRANSPOSE: 2, DEPTH_TO_SPACE: 1],
    space_to_depth: [TRANSPOSE: 2, SPACE_TO_DEPTH: 1],

    // Resize
    resize_nearest_asymmetric_floor: [TRANSPOSE: 2, RESIZE_NEAREST_NEIGHBOR: 1],
    resize_nearest_default: [TRANSPOSE: 2, RESIZE_NEAREST_NEIGHBOR: 1],
    resize_linear_half_pixel_sizes: [TRANSPOSE: 2, RESIZE_BILINEAR: 1],
    resize_linear_align_corners: [TRANSPOSE: 2, RESIZE_BILINEAR: 1],
    upsample_opset9_nearest: [TRANSPOSE: 2, RESIZE_NEAREST_NEIGHBOR: 1],

    // Reductions (two per model: keepdims 1 over axis 1, keepdims 0 over the last axis)
    reduce_mean_keepdims: [MEAN: 2],
    reduce_sum_opset11_keepdims: [REDUCE_SUM: 2],
    reduce_max_keepdims: [REDUCE_MAX: 2],
    reduce_min_keepdims: [REDUCE_MIN: 2],
    reduce_prod_keepdims: [REDUCE_PROD: 2],
    reduce_mean_all_axes_scalar: [MEAN: 1],
    reduce_l1: [ABS: 1, REDUCE_SUM: 1],
    reduce_l2: [MUL: 1, REDUCE_SUM: 1, SQRT: 1],
    reduce_sum_square: [MUL: 1, REDUCE_SUM: 1],
    // m + log(sum(exp(x - m))) with m = max(x) kept for broadcasting, reshaped to drop.
    reduce_log_sum_exp: [REDUCE_MAX: 1, SUB: 1, EXP: 1, REDUCE_SUM: 1, LOG: 1, RESHAPE: 1, ADD: 1],
    reduce_sum_opset13_axes_input: [REDUCE_SUM: 1],
    // ARGMAX/ARGMIN drop the axis; keepdims reshapes it back.
    argmax_keepdims: [ARGMAX: 1, RESHAPE: 1],
    argmin_no_keepdims: [ARGMIN: 1],
    // The last extreme index is (n - 1) - the first one of the reversed tensor.
    argmax_select_last_index: [REVERSE: 1, ARGMAX: 1, SUB: 1, RESHAPE: 1],
    argmin_select_last_index_no_keepdims: [REVERSE: 1, ARGMIN: 1, SUB: 1],
    argmax_rank1_no_keepdims: [ARGMAX: 1],
    // TOPK_V2 works on the last axis: axis 1 is swapped there and back (values and indices).
    topk_largest: [TRANSPOSE: 3, TOPK_V2: 1],
    // Smallest k = -topk(-x).
    topk_smallest: [TRANSPOSE: 3, NEG: 2, TOPK_V2: 1],

    // Unary elementwise
    exp: [EXP: 1],
    log: [LOG: 1],
    sqrt: [SQRT: 1],
    reciprocal: [DIV: 1],
    neg: [NEG: 1],
    abs: [ABS: 1],
    floor: [FLOOR: 1],
    // ceil(x) = -floor(-x)
    ceil: [NEG: 2, FLOOR: 1],
    sin: [SIN: 1],
    // cos(x) = sin(x + pi/2)
    cos: [ADD: 1, SIN: 1],
    // (x > 0) - (x < 0)
    sign: [GREATER: 1, LESS: 1, CAST: 2, SUB: 1],

    // Identities, constants, casts, shape arithmetic
    identity: [RELU: 1],
    dropout_inference: [RELU: 1],
    constant_add: [ADD: 1],
    cast_float_int64_float: [CAST: 2],
    // Range, ConstantOfShape, Shape, Size and Cast evaluate at compile time.
    constant_subgraphs_fold: [ADD: 1, MUL: 1, DIV: 1],
    // Shape -> Gather -> Unsqueeze -> Concat folds at compile time: one RESHAPE is left.
    shape_chain_reshape: [RESHAPE: 1],

    // FULLY_CONNECTED flattens [2,3,8] itself (bias folded in) -> RESHAPE [2,3,4]
    matmul_3d_bias_first: [FULLY_CONNECTED: 1, RESHAPE: 1],
    // Losses: -x[n, target, d...] is GATHER_ELEMENTS of the target (EXPAND_DIMS'd to the
    // input's rank) along axis 1, SQUEEZEd and negated; weights are GATHERed and multiplied.
    // ignore_index: EQUAL mask, ignored targets SELECTed to 0 before gathering, their loss
    // SELECTed to 0 after, and (mean only) their weight, or 1 without weights, SELECTed to
    // 0 for the denominator. sum is REDUCE_SUM; mean is MEAN, or with weights or ignored
    // elements REDUCE_SUM(loss) / REDUCE_SUM(weights).
    nll_loss_nc_mean: [EXPAND_DIMS: 1, GATHER_ELEMENTS: 1, SQUEEZE: 1, NEG: 1, MEAN: 1],
    nll_loss_none: [EXPAND_DIMS: 1, GATHER_ELEMENTS: 1, SQUEEZE: 1, NEG: 1],
    nll_loss_ncd1d2_weight_ignore_index_sum: [
        EQUAL: 1, SELECT: 2, EXPAND_DIMS: 1, GATHER_ELEMENTS: 1, SQUEEZE: 1, NEG: 1, GATHER: 1,
        MUL: 1, REDUCE_SUM: 1
    ],
    nll_loss_ncd1_weight_input_negative_ignore_index_mean: [
        EQUAL: 1, SELECT: 3, EXPAND_DIMS: 1, GATHER_ELEMENTS: 1, SQUEEZE: 1, NEG: 1, GATHER: 1,
        MUL: 1, REDUCE_SUM: 2, DIV: 1
    ],
    nll_loss_ignore_index_mean_no_weight: [
        EQUAL: 1, SELECT: 3, EXPAND_DIMS: 1, GATHER_ELEMENTS: 1, SQUEEZE: 1, NEG: 1, REDUCE_SUM: 2,
        DIV: 1
    ],
    // All targets ignored: 0 / 0 = NaN, computed at run time like any other mean.
    nll_loss_all_ignored_mean: [
        EQUAL: 1, SELECT: 3, EXPAND_DIMS: 1, GATHER_ELEMENTS: 1, SQUEEZE: 1, NEG: 1, GATHER: 1,
        MUL: 1, REDUCE_SUM: 2, DIV: 1
    ],
    nll_loss_int32_target_weight_none: [
        EXPAND_DIMS: 1, GATHER_ELEMENTS: 1, SQUEEZE: 1, NEG: 1, GATHER: 1, MUL: 1
    ],
    // SoftmaxCrossEntropyLoss: LOG_SOFTMAX along axis 1 (also the log_prob output), then
    // the NegativeLogLikelihoodLoss above.
    sce_mean_with_log_prob: [
        LOG_SOFTMAX: 1, EXPAND_DIMS: 1, GATHER_ELEMENTS: 1, SQUEEZE: 1, NEG: 1, MEAN: 1
    ],
    sce_sum_ncd1d2: [
        LOG_SOFTMAX: 1, EXPAND_DIMS: 1, GATHER_ELEMENTS: 1, SQUEEZE: 1, NEG: 1, REDUCE_SUM: 1
    ],
    sce_ncd1_weight_ignore_index_none: [
        LOG_SOFTMAX: 1, EQUAL: 1, SELECT: 2, EXPAND_DIMS: 1, GATHER_ELEMENTS: 1, SQUEEZE: 1, NEG: 1,
        GATHER: 1, MUL: 1
    ],
    sce_ncd1d2_weight_ignore_index_mean_with_log_prob: [
        LOG_SOFTMAX: 1, EQUAL: 1, SELECT: 3, EXPAND_DIMS: 1, GATHER_ELEMENTS: 1, SQUEEZE: 1, NEG: 1,
        GATHER: 1, MUL: 1, REDUCE_SUM: 2, DIV: 1
    ],

    // x / sqrt(mean(x^2) + eps) * scale
    rms_normalization_opset23: [MUL: 3, MEAN: 1, ADD: 1, RSQRT: 1],
    // Attention: Q and K scaled by sqrt(scale) (MUL 2), scores by BATCH_MATMUL (K
    // adjoint), SOFTMAX, BATCH_MATMUL with V.
    attention_4d_basic: [BATCH_MATMUL: 2, MUL: 2, SOFTMAX: 1],
    // 3-D: RESHAPE + TRANSPOSE splits Q, K and V into heads and merges Y back (4 + 4);
    // grouped heads are RESHAPEs of Q's heads onto the kv heads and back (4); the causal
    // frontier is a constant bias (ADD) with no fully masked row.
    attention_3d_gqa_causal: [RESHAPE: 8, TRANSPOSE: 4, BATCH_MATMUL: 2, MUL: 2, ADD: 1, SOFTMAX: 1],
    // The bool mask becomes 0 / -inf (SELECT), is added; fully masked rows are found by
    // REDUCE_MAX == -inf and zeroed (SELECT).
    attention_bool_mask_scale: [
        BATCH_MATMUL: 2, MUL: 2, SELECT: 2, ADD: 1, EQUAL: 1, REDUCE_MAX: 1, SOFTMAX: 1,
    ],
    // Past keys and values CONCATENATED before the new ones; float mask + constant
    // causal frontier (offset by the past length) ADD, then added to the scores; the
    // run-time guard.
    attention_past_kv_present: [
        RESHAPE: 4, TRANSPOSE: 4, ADD: 2, BATCH_MATMUL: 2, CONCATENATION: 2, MUL: 2, EQUAL: 1,
        REDUCE_MAX: 1, SELECT: 1, SOFTMAX: 1,
    ],
    // softcap * TANH(scores / softcap) (DIV, TANH, MUL).
    attention_softcap: [
        MUL: 3, BATCH_MATMUL: 2, ADD: 1, DIV: 1, EQUAL: 1, REDUCE_MAX: 1, SELECT: 1, SOFTMAX: 1,
        TANH: 1,
    ],
    // Constant mask and causal frontier fold into one constant bias (ADD); its fully
    // masked row is known at compile time (SELECT with a constant condition).
    attention_const_mask_softmax_output: [BATCH_MATMUL: 2, MUL: 2, ADD: 1, SELECT: 1, SOFTMAX: 1],
    // nonpad_kv_seqlen at run time: padding (LESS) and the shifted causal frontier
    // (LESS_EQUAL) against constant position grids, LOGICAL_AND, SELECT to 0 / -inf, the
    // run-time guard; grouped heads (RESHAPE 4, plus nonpad_kv_seqlen as [B, 1, 1, 1]).
    attention_nonpad_kv_seqlen: [
        RESHAPE: 5, BATCH_MATMUL: 2, MUL: 2, SELECT: 2, ADD: 1, EQUAL: 1, LESS: 1, LESS_EQUAL: 1,
        LOGICAL_AND: 1, REDUCE_MAX: 1, SOFTMAX: 1,
    ],
    // com.microsoft Attention: one FULLY_CONNECTED per Q, K and V slice of the packed
    // weights (bias folded in), split into heads (RESHAPE + TRANSPOSE 3 + 3), one MUL for
    // the scale, the int mask as mask > 0 (GREATER) -> SELECT(0, -10000) -> RESHAPE
    // [B, 1, 1, T], ADD, Y merged back (TRANSPOSE + RESHAPE).
    microsoft_attention_packed_qkv: [
        RESHAPE: 5, TRANSPOSE: 4, FULLY_CONNECTED: 3, BATCH_MATMUL: 2, ADD: 1, GREATER: 1,
        MUL: 1, SELECT: 1, SOFTMAX: 1,
    ],
    // unidirectional: a constant causal bias (ADD).
    microsoft_attention_unidirectional: [
        RESHAPE: 4, TRANSPOSE: 4, FULLY_CONNECTED: 3, BATCH_MATMUL: 2, ADD: 1, MUL: 1, SOFTMAX: 1,
    ],
    // MultiHeadAttention: the projection bias added to Q, K and V (ADD 3), attention bias +
    // key padding mask (ADD), added to the scores (ADD).
    microsoft_multi_head_attention: [
        ADD: 5, RESHAPE: 5, TRANSPOSE: 4, BATCH_MATMUL: 2, GREATER: 1, MUL: 1, SELECT: 1,
        SOFTMAX: 1,
    ],
    // Past key and value CONCATENATED before the new ones; causal bias offset by the past.
    microsoft_multi_head_attention_past: [
        RESHAPE: 4, TRANSPOSE: 4, BATCH_MATMUL: 2, CONCATENATION: 2, ADD: 1, MUL: 1, SOFTMAX: 1,
    ],
    // Python-style and C-style remainders: one MOD each.
    mod_integer_sign_of_divisor: [MOD: 2],
    mod_float_fmod_broadcast: [MOD: 1],
    // a / b truncated = (a - fmod(a, b)) / b, where the NN set's floor division is exact.
    div_integer_truncates: [MOD: 1, SUB: 1, DIV: 1],
    math_unary_functions: [MATH_UNARY: 10],
    // Cubic, tf_crop_and_resize and antialiased resizing: one RESAMPLE each, in NCHW.
    resize_cubic_exclude_outside: [RESAMPLE: 1],
    resize_tf_crop_and_resize_extrapolation: [RESAMPLE: 1],
    resize_linear_antialias_downsample: [RESAMPLE: 1],
    // EyeLike folds to a constant (copied into the output by a RESHAPE); Shrink is two
    // comparisons, ADD and SUB of the bias, and two SELECTs.
    eye_like_and_shrink: [RESHAPE: 1, LESS: 1, GREATER: 1, ADD: 1, SUB: 1, SELECT: 2],
    // uint8 operands compute in int32 (CAST) and wrap back (ADD/DIV/MUL/SUB, CAST);
    // BitwiseNot is XOR with -1.
    bitwise_and_shifts: [BITWISE: 7, CAST: 8, DIV: 3, MUL: 3, SUB: 3],
    cumsum_exclusive_reverse: [CUMSUM: 2],
    // Float16 computes as float32: CAST at the input and the output only; the bias ADD
    // and RELU fold into the FULLY_CONNECTED.
    float16_layer: [CAST: 2, FULLY_CONNECTED: 1, SOFTMAX: 1],
    integer_types_as_int32: [MOD: 4],
    // Float64 computes as float32: no conversion operations at all (the runtime converts
    // at the boundary); the Cast to float32 only relabels.
    float64_arithmetic: [MUL: 1, ADD: 1, SOFTMAX: 1],
    // to_half: float32 -> float16 -> float32 (rounding), then -> float16 at the output;
    // to_float: the same rounded float32 value, relabelled.
    cast_float_to_float16_and_back: [CAST: 3],
    // Scatters: one extension operation each (max and min: two).
    scatter_elements_axis1_add: [SCATTER_ELEMENTS: 1],
    scatter_elements_negative_indices: [SCATTER_ELEMENTS: 1],
    scatter_elements_int_max_min: [SCATTER_ELEMENTS: 2],
    scatter_deprecated_opset10: [SCATTER_ELEMENTS: 1],
    scatter_nd_slices: [SCATTER_ND: 1],
    scatter_nd_mul: [SCATTER_ND: 1],
    // OneHot: SELECT(LESS(i, 0), i + depth, i), EXPAND_DIMS at the axis, EQUAL against
    // 0..depth, SELECT between on and off.
    one_hot_axis_minus1_negative_index: [LESS: 1, ADD: 1, SELECT: 2, EXPAND_DIMS: 1, EQUAL: 1],
    // ... after a CAST of the float indices, with the values SLICEd at run time.
    one_hot_axis0_float_indices_runtime_values: [
        CAST: 1, SLICE: 2, LESS: 1, ADD: 1, SELECT: 2, EXPAND_DIMS: 1, EQUAL: 1
    ],
    // Hardmax: CAST(EQUAL(EXPAND_DIMS(ARGMAX), 0..n)); before opset 13 between reshapes
    // to and from 2-D.
    hardmax_axis1_opset13: [ARGMAX: 1, EXPAND_DIMS: 1, EQUAL: 1, CAST: 1],
    hardmax_opset11_coerced: [RESHAPE: 2, ARGMAX: 1, EXPAND_DIMS: 1, EQUAL: 1, CAST: 1],
    // Transformer operators: nnc extension operations, or exact NN equivalents.
    layer_norm_last_axis: [LAYER_NORMALIZATION: 1],
    layer_norm_axis1_with_statistics: [LAYER_NORMALIZATION: 1],
    // [N, C, H, W] -> [N, groups, rest] -> LAYER_NORMALIZATION -> back, then the
    // per-channel scale and bias (their [C] reshapes fold away).
    group_normalization_opset21: [RESHAPE: 2, LAYER_NORMALIZATION: 1, MUL: 1, ADD: 1],
    // Two MEANs, SUB, MUL (square), ADD (epsilon), SQRT, DIV per node.
    mean_variance_normalization: [MEAN: 4, SUB: 2, MUL: 2, ADD: 2, SQRT: 2, DIV: 2],
    gelu_exact_opset20: [GELU: 1],
    gelu_tanh_opset20: [GELU: 1],
    erf: [ERF: 1],
    // IsNaN is x != x; IsInf compares with each infinity it looks for (2 + 1).
    is_nan_and_is_inf: [NOT_EQUAL: 1, EQUAL: 3, LOGICAL_OR: 1],
    gather_elements_axis1: [GATHER_ELEMENTS: 1],
    gather_nd_plain: [GATHER_ND: 1],
    gather_nd_batch_dims_1: [GATHER_ND: 1],
    // SELECT(constant mask, x, 0)
    trilu_upper_k1: [SELECT: 1],
    trilu_lower: [SELECT: 1],
    // x + skip + bias, one LAYER_NORMALIZATION, two GELU biases, three GELU.
    microsoft_skip_layer_norm_and_gelus: [ADD: 4, LAYER_NORMALIZATION: 1, GELU: 3],
    // ai.onnx.ml: FULLY_CONNECTED scores; the label is the winner looked up in the labels.
    ml_linear_classifier_multiclass_softmax: [FULLY_CONNECTED: 1, SOFTMAX: 1, ARGMAX: 1, GATHER: 1],
    // Binary: [1 - s, s] and the second label where s passes the threshold.
    ml_linear_classifier_binary_logistic: [FULLY_CONNECTED: 1, LOGISTIC: 1, SUB: 1,
        CONCATENATION: 1, GREATER: 1, RESHAPE: 1, CAST: 1, GATHER: 1],
    ml_linear_classifier_binary_none_int_input: [CAST: 2, FULLY_CONNECTED: 1, SUB: 1,
        CONCATENATION: 1, GREATER: 1, RESHAPE: 1, GATHER: 1],
    ml_linear_regressor_two_targets: [FULLY_CONNECTED: 1],
    // Three norms (each divides by a SELECTed non-zero norm), Scaler, Binarizer.
    ml_normalizer_scaler_binarizer: [DIV: 3, EQUAL: 3, SELECT: 3, MUL: 2, REDUCE_SUM: 2,
        ABS: 1, CAST: 1, GREATER: 1, REDUCE_MAX: 1, SQRT: 1, SUB: 1],
    // The condition tests a static shape: folded, the then branch inlined.
    if_static_shape_condition: [MUL: 1, ADD: 1, LOGISTIC: 1],
    // A run-time condition: one IF, its branches in referenced subgraphs.
    if_runtime_condition: [IF: 1, LOGISTIC: 1],
    // Branches of [4, 3] and [2, 3]: an IF whose output is [?, 3] until it runs.
    if_branches_differ_in_shape: [IF: 1, RELU: 1],
    // Recurrent operators unrolled over 4 steps: clip as MAXIMUM/MINIMUM before each gate
    // activation, HardSigmoid as MUL/ADD/MAXIMUM/MINIMUM, LeakyRelu as PRELU, Softsign as
    // ABS/ADD/DIV.
    lstm_activations_clip_input_forget: [ADD: 20, MAXIMUM: 20, MINIMUM: 20, MUL: 20, SLICE: 16,
        RESHAPE: 14, FULLY_CONNECTED: 5, ABS: 4, DIV: 4, PRELU: 4, SUB: 4, CONCATENATION: 1],
    lstm_bidirectional_sequence_lens: [SLICE: 44, RESHAPE: 27, LOGISTIC: 24, MUL: 24,
        SELECT: 24, ADD: 16, TANH: 16, FULLY_CONNECTED: 10, CONCATENATION: 7],
    gru_reverse_sequence_lens_activations: [SLICE: 28, ADD: 16, MUL: 12, RESHAPE: 12,
        LOGISTIC: 8, SELECT: 8, FULLY_CONNECTED: 5, SUB: 4, CONCATENATION: 1],
    rnn_bidirectional_per_direction_activations: [RESHAPE: 23, ADD: 12, MUL: 12,
        FULLY_CONNECTED: 10, SLICE: 10, MAXIMUM: 8, MINIMUM: 8, CONCATENATION: 6, TANH: 4],
    // Recurrent operators as sequence operations: X [4, 3, 2] goes in as it is
    // (time-major); per direction the initial states are sliced (a whole-tensor slice
    // of one direction is removed) and reshaped to [B, H], Y to [S, 1, B, H] and the
    // final states to [1, B, H]; a reverse direction reverses X and its Y along time.
    lstm_sequence_op_forward: [UNIDIRECTIONAL_SEQUENCE_LSTM: 1, RESHAPE: 5],
    lstm_sequence_op_reverse_relu: [UNIDIRECTIONAL_SEQUENCE_LSTM: 1, RESHAPE: 5, REVERSE: 2],
    lstm_sequence_op_bidirectional_peepholes_full_lens: [
        UNIDIRECTIONAL_SEQUENCE_LSTM: 2, SLICE: 4, RESHAPE: 10, REVERSE: 2, CONCATENATION: 3,
    ],
    rnn_sequence_op_reverse_relu: [UNIDIRECTIONAL_SEQUENCE_RNN: 1, RESHAPE: 3, REVERSE: 2],
    rnn_sequence_op_bidirectional_relu: [
        UNIDIRECTIONAL_SEQUENCE_RNN: 2, SLICE: 2, RESHAPE: 6, REVERSE: 2, CONCATENATION: 2,
    ],
}

#[test]
fn every_corpus_case_is_in_the_table() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(CORPUS)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "unsupported_ops")
        .collect();
    let listed: BTreeSet<String> = HISTOGRAM_CASES.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        on_disk, listed,
        "testdata/onnx directories vs the histogram table"
    );
}

// ---- convolutions -----------------------------------------------------------------------

#[test]
fn conv_plain_is_conv_2d_between_layout_transposes() {
    let lowered = lower("conv_plain");
    let m = &lowered.model;
    let conv = only(m, OperationType::Conv2d);
    assert_eq!(
        conv.inputs.len(),
        10,
        "explicit padding, no layout or dilation inputs"
    );
    assert_eq!(window(m, conv), [1, 1, 1, 1, 1, 1]);
    assert_eq!(fused_activation(m, conv), FusedActivation::None as i32);
    // OIHW weights re-laid-out as OHWI.
    let (w, shape) = case_initializer("conv_plain", "w");
    assert_eq!(dims(m, role(conv, "filter")), [4, 3, 3, 3]);
    assert_eq!(
        f32s(m, role(conv, "filter")),
        transposed(&w, &shape, &[0, 2, 3, 1])
    );
    assert_eq!(
        f32s(m, role(conv, "bias")),
        case_initializer("conv_plain", "b").0
    );
    // The input transpose (NCHW -> NHWC) reads the model input; the output one writes the output.
    let first = &m.main.operations[0];
    assert_eq!(first.op_type, OperationType::Transpose);
    assert_eq!(first.inputs[0], m.main.inputs[0]);
    assert_eq!(i32s(m, first.inputs[1]), [0, 2, 3, 1]);
    let last = m.main.operations.last().unwrap();
    assert_eq!(last.op_type, OperationType::Transpose);
    assert_eq!(last.outputs[0], m.main.outputs[0]);
    assert_eq!(i32s(m, last.inputs[1]), [0, 3, 1, 2]);
    assert_eq!(m.output_info[0].dims, [1, 4, 5, 5]);
    assert_eq!(m.output_info[0].dtype, DataType::F32);
}

#[test]
fn conv_strides_and_dilations() {
    let lowered = lower("conv_strides_2");
    let conv = only(&lowered.model, OperationType::Conv2d);
    assert_eq!(window(&lowered.model, conv), [1, 1, 1, 1, 2, 2]);
    assert_eq!(lowered.model.output_info[0].dims, [1, 4, 4, 4]);

    let lowered = lower("conv_dilations_2");
    let m = &lowered.model;
    let conv = only(m, OperationType::Conv2d);
    assert_eq!(
        conv.inputs.len(),
        13,
        "dilation needs the layout and dilation inputs"
    );
    assert_eq!(window(m, conv), [2, 2, 2, 2, 1, 1]);
    assert!(!scalar_bool(m, conv, "layout"), "NHWC");
    assert_eq!(
        [
            scalar_i32(m, conv, "dilation_w"),
            scalar_i32(m, conv, "dilation_h")
        ],
        [2, 2]
    );
    assert_eq!(m.output_info[0].dims, [1, 4, 7, 7]);
}

#[test]
fn conv_auto_pad_becomes_explicit_padding() {
    // Input 6, kernel 3, stride 2: total padding 1 per axis, at the end for SAME_UPPER
    // and at the beginning for SAME_LOWER.
    for (case, expected, out) in [
        ("conv_auto_pad_same_upper", [0, 1, 0, 1, 2, 2], [1, 4, 3, 3]),
        ("conv_auto_pad_same_lower", [1, 0, 1, 0, 2, 2], [1, 4, 3, 3]),
        ("conv_auto_pad_valid", [0, 0, 0, 0, 1, 1], [1, 4, 4, 4]),
    ] {
        let lowered = lower(case);
        let conv = only(&lowered.model, OperationType::Conv2d);
        assert_eq!(window(&lowered.model, conv), expected, "{case}");
        assert_eq!(lowered.model.output_info[0].dims, out, "{case}");
    }
}

#[test]
fn conv_asymmetric_pads_map_to_the_right_sides() {
    // ONNX pads [top, left, bottom, right] = [1, 2, 0, 1].
    let lowered = lower("conv_asymmetric_pads");
    let conv = only(&lowered.model, OperationType::Conv2d);
    assert_eq!(window(&lowered.model, conv), [2, 1, 1, 0, 1, 1]);
    assert_eq!(lowered.model.output_info[0].dims, [1, 4, 4, 6]);
}

#[test]
fn conv_without_bias_gets_a_zero_bias() {
    let lowered = lower("conv_no_bias");
    let conv = only(&lowered.model, OperationType::Conv2d);
    assert_eq!(f32s(&lowered.model, role(conv, "bias")), [0.0; 4]);
}

#[test]
fn depthwise_convs_use_1hwo_filters_and_the_multiplier() {
    for (case, m_out, multiplier) in [
        ("conv_depthwise", 4, 1),
        ("conv_depthwise_multiplier_2", 8, 2),
    ] {
        let lowered = lower(case);
        let m = &lowered.model;
        let conv = only(m, OperationType::DepthwiseConv2d);
        assert_eq!(scalar_i32(m, conv, "multiplier"), multiplier, "{case}");
        assert_eq!(window(m, conv), [1, 1, 1, 1, 1, 1], "{case}");
        let (w, shape) = case_initializer(case, "w");
        assert_eq!(dims(m, role(conv, "filter")), [1, 3, 3, m_out], "{case}");
        assert_eq!(
            f32s(m, role(conv, "filter")),
            transposed(&w, &shape, &[1, 2, 3, 0]),
            "{case}"
        );
        assert_eq!(m.output_info[0].dims, [1, m_out, 5, 5], "{case}");
    }
}

#[test]
fn grouped_conv_uses_grouped_conv_2d() {
    let lowered = lower("conv_grouped");
    let m = &lowered.model;
    let conv = only(m, OperationType::GroupedConv2d);
    assert_eq!(scalar_i32(m, conv, "groups"), 2);
    assert!(!scalar_bool(m, conv, "layout"), "NHWC");
    assert_eq!(dims(m, role(conv, "filter")), [6, 3, 3, 2]);
    assert_eq!(window(m, conv), [1, 1, 1, 1, 1, 1]);
    assert_eq!(m.output_info[0].dims, [1, 6, 5, 5]);
}

#[test]
fn conv_1d_is_a_height_1_conv_2d() {
    let lowered = lower("conv_1d");
    let m = &lowered.model;
    let conv = only(m, OperationType::Conv2d);
    assert_eq!(dims(m, role(conv, "filter")), [4, 1, 3, 3]);
    assert_eq!(window(m, conv), [1, 1, 0, 0, 1, 1]);
    assert_eq!(m.output_info[0].dims, [1, 4, 8]);
}

#[test]
fn batch_norm_after_conv_folds_into_filter_and_bias() {
    let case = "conv_batch_norm";
    let raw = lower_unoptimized(case);
    assert_eq!(
        raw.lowered_histogram.get("MUL"),
        Some(&1),
        "the frontend lowers BatchNormalization to MUL"
    );
    assert_eq!(raw.lowered_histogram.get("ADD"), Some(&1), "... and ADD");
    let lowered = lower(case);
    let folds: usize = lowered
        .passes
        .iter()
        .filter(|p| p.pass == "fold-batch-norm")
        .flat_map(|p| p.changes.values())
        .sum();
    assert_eq!(folds, 2, "fold-batch-norm folds the MUL and the ADD");

    // Expected: filter[k] * scale[k], bias[k] * scale[k] + shift[k], from the unoptimized model.
    let rm = &raw.model;
    let (conv, mul, add) = (
        only(rm, OperationType::Conv2d),
        only(rm, OperationType::Mul),
        only(rm, OperationType::Add),
    );
    let (scale, shift) = (f32s(rm, mul.inputs[1]), f32s(rm, add.inputs[1]));
    let filter = f32s(rm, role(conv, "filter"));
    let per_channel = filter.len() / scale.len();
    let expected_filter: Vec<f32> = filter
        .iter()
        .enumerate()
        .map(|(i, w)| w * scale[i / per_channel])
        .collect();
    let expected_bias: Vec<f32> = f32s(rm, role(conv, "bias"))
        .iter()
        .zip(&scale)
        .zip(&shift)
        .map(|((b, s), t)| b * s + t)
        .collect();

    let m = &lowered.model;
    let conv = only(m, OperationType::Conv2d);
    assert_close(
        &f32s(m, role(conv, "filter")),
        &expected_filter,
        "folded filter",
    );
    assert_close(&f32s(m, role(conv, "bias")), &expected_bias, "folded bias");
    assert_eq!(fused_activation(m, conv), FusedActivation::None as i32);
}

#[test]
fn activations_after_conv_fuse_into_it() {
    for (case, activation) in [
        ("conv_relu", FusedActivation::Relu),
        ("conv_clip_relu6", FusedActivation::Relu6),
        ("conv_clip_relu6_opset10_attributes", FusedActivation::Relu6),
    ] {
        let lowered = lower(case);
        let conv = only(&lowered.model, OperationType::Conv2d);
        assert_eq!(
            fused_activation(&lowered.model, conv),
            activation as i32,
            "{case}"
        );
    }
}

#[test]
fn dilated_depthwise_conv() {
    let lowered = lower("conv_depthwise_dilated");
    let m = &lowered.model;
    let conv = only(m, OperationType::DepthwiseConv2d);
    assert_eq!(conv.inputs.len(), 14);
    assert_eq!(window(m, conv), [2, 2, 2, 2, 1, 1]);
    assert_eq!(
        [
            scalar_i32(m, conv, "dilation_w"),
            scalar_i32(m, conv, "dilation_h")
        ],
        [2, 2]
    );
    assert_eq!(m.output_info[0].dims, [1, 4, 7, 7]);
}

#[test]
fn layout_pass_carries_axes_through_reductions_concat_and_softmax() {
    // NHWC axes: H = 1, W = 2, C = 3.
    let lowered = lower("conv_reduce_mean_no_keepdims");
    let m = &lowered.model;
    let mean = only(m, OperationType::Mean);
    assert_eq!(i32s(m, role(mean, "axes")), [1, 2]);
    assert_eq!(mean.outputs[0], m.main.outputs[0]);
    assert_eq!(m.output_info[0].dims, [1, 4]);

    let lowered = lower("conv_concat_channels");
    let m = &lowered.model;
    let concat = only(m, OperationType::Concatenation);
    assert_eq!(i32s(m, *concat.inputs.last().unwrap()), [3]);
    assert_eq!(m.output_info[0].dims, [1, 6, 5, 5]);

    let lowered = lower("conv_softmax_channels");
    let m = &lowered.model;
    assert_eq!(scalar_i32(m, only(m, OperationType::Softmax), "axis"), 3);

    let lowered = lower("conv_then_transpose_to_nhwc");
    let m = &lowered.model;
    assert_eq!(
        only(m, OperationType::Conv2d).outputs[0],
        m.main.outputs[0],
        "the conv writes the NHWC output"
    );
    assert_eq!(m.output_info[0].dims, [1, 5, 5, 4]);
}

#[test]
fn per_channel_mul_and_add_fold_like_batch_norm() {
    let case = "conv_mul_add_per_channel";
    let lowered = lower(case);
    let m = &lowered.model;
    let conv = only(m, OperationType::Conv2d);
    let (scale, shift) = (
        case_initializer(case, "scale").0,
        case_initializer(case, "shift").0,
    );
    let bias: Vec<f32> = case_initializer(case, "conv_b")
        .0
        .iter()
        .zip(&scale)
        .zip(&shift)
        .map(|((b, s), t)| b * s + t)
        .collect();
    assert_close(&f32s(m, role(conv, "bias")), &bias, "folded bias");
}

#[test]
fn batch_norm_after_an_activation_stays() {
    let lowered = lower("conv_relu_batch_norm");
    let m = &lowered.model;
    let conv = only(m, OperationType::Conv2d);
    assert_eq!(fused_activation(m, conv), FusedActivation::Relu as i32);
    let mul = only(m, OperationType::Mul);
    assert_eq!(mul.inputs[0], conv.outputs[0]);
    assert_eq!(
        dims(m, mul.inputs[1]),
        [4],
        "NHWC: per-channel on the last axis"
    );
}

// ---- transposed convolutions ---------------------------------------------------------

#[test]
fn conv_transpose_padding_and_output_extent() {
    // (case, [pad_left, pad_right, pad_top, pad_bottom, stride_w, stride_h], output dims)
    for (case, expected, out) in [
        ("conv_transpose_basic", [0, 0, 0, 0, 1, 1], vec![1, 2, 6, 6]),
        (
            "conv_transpose_strides_pads",
            [1, 1, 1, 1, 2, 2],
            vec![1, 2, 5, 5],
        ),
        // The output padding shortens the end pad: 1 - 1 = 0.
        (
            "conv_transpose_output_padding",
            [1, 0, 1, 0, 2, 2],
            vec![1, 2, 6, 6],
        ),
        // Full extent 7, asked 6: total padding 1 goes to the beginning (not SAME_UPPER).
        (
            "conv_transpose_output_shape",
            [1, 0, 1, 0, 2, 2],
            vec![1, 2, 6, 6],
        ),
        (
            "conv_transpose_auto_pad_same_upper",
            [0, 1, 0, 1, 2, 2],
            vec![1, 2, 6, 6],
        ),
        ("conv_transpose_1d", [0, 0, 0, 0, 2, 1], vec![1, 2, 11]),
    ] {
        let lowered = lower(case);
        let m = &lowered.model;
        let deconv = only(m, OperationType::TransposeConv2d);
        assert_eq!(window(m, deconv), expected, "{case}");
        assert_eq!(m.output_info[0].dims, out, "{case}");
        assert_eq!(
            f32s(m, role(deconv, "bias")),
            case_initializer(case, "b").0,
            "{case}: bias"
        );
    }
}

#[test]
fn conv_transpose_output_padding_past_the_pads_is_padded_then_biased() {
    let case = "conv_transpose_output_padding_no_pads";
    let lowered = lower(case);
    let m = &lowered.model;
    let deconv = only(m, OperationType::TransposeConv2d);
    assert_eq!(window(m, deconv), [0, 0, 0, 0, 2, 2]);
    assert_eq!(
        f32s(m, role(deconv, "bias")),
        [0.0; 2],
        "the bias moves after the padding"
    );
    let pad = only(m, OperationType::Pad);
    assert_eq!(
        i32s(m, role(pad, "paddings")),
        [0, 0, 0, 1, 0, 1, 0, 0],
        "one row and column at the end (NHWC)"
    );
    let add = only(m, OperationType::Add);
    assert_eq!(f32s(m, add.inputs[1]), case_initializer(case, "b").0);
    assert_eq!(m.output_info[0].dims, [1, 2, 8, 8]);
}

// ---- Gemm and MatMul -------------------------------------------------------------------

#[test]
fn gemm_weights_and_bias_absorb_transposition_alpha_and_beta() {
    let lowered = lower("gemm_trans_b");
    let m = &lowered.model;
    let fc = only(m, OperationType::FullyConnected);
    assert_eq!(
        f32s(m, role(fc, "weights")),
        case_initializer("gemm_trans_b", "b").0,
        "transB=1: B is already [N, K]"
    );
    assert_eq!(
        f32s(m, role(fc, "bias")),
        case_initializer("gemm_trans_b", "c").0
    );
    assert_eq!(m.output_info[0].dims, [2, 3]);

    let case = "gemm_alpha_beta"; // alpha 0.5, beta 2
    let lowered = lower(case);
    let m = &lowered.model;
    let fc = only(m, OperationType::FullyConnected);
    let (b, b_shape) = case_initializer(case, "b");
    let weights: Vec<f32> = transposed(&b, &b_shape, &[1, 0])
        .iter()
        .map(|v| v * 0.5)
        .collect();
    assert_eq!(dims(m, role(fc, "weights")), [3, 4]);
    assert_close(&f32s(m, role(fc, "weights")), &weights, "alpha * B^T");
    let bias: Vec<f32> = case_initializer(case, "c")
        .0
        .iter()
        .map(|v| v * 2.0)
        .collect();
    assert_close(&f32s(m, role(fc, "bias")), &bias, "beta * C");
}

#[test]
fn gemm_with_a_matrix_c_adds_it_after_the_layer() {
    let case = "gemm_c_matrix"; // beta 0.5
    let lowered = lower(case);
    let m = &lowered.model;
    let fc = only(m, OperationType::FullyConnected);
    assert_eq!(f32s(m, role(fc, "bias")), [0.0; 3]);
    let add = only(m, OperationType::Add);
    assert_eq!(add.inputs[0], fc.outputs[0]);
    assert_eq!(dims(m, add.inputs[1]), [2, 3]);
    let c: Vec<f32> = case_initializer(case, "c")
        .0
        .iter()
        .map(|v| v * 0.5)
        .collect();
    assert_close(&f32s(m, add.inputs[1]), &c, "beta * C");
}

#[test]
fn gemm_trans_a_transposes_the_runtime_input() {
    let lowered = lower("gemm_trans_a");
    let m = &lowered.model;
    let t = only(m, OperationType::Transpose);
    assert_eq!(t.inputs[0], m.main.inputs[0]);
    assert_eq!(i32s(m, t.inputs[1]), [1, 0]);
    assert_eq!(m.output_info[0].dims, [2, 3]);
}

#[test]
fn gemm_and_matmul_with_runtime_operands_use_batch_matmul() {
    let lowered = lower("gemm_runtime_b");
    let m = &lowered.model;
    let mm = only(m, OperationType::BatchMatmul);
    assert_eq!(mm.inputs[..2], m.main.inputs[..2]);
    assert!(!scalar_bool(m, mm, "adj_lhs") && !scalar_bool(m, mm, "adj_rhs"));

    let lowered = lower("matmul_broadcast_batch");
    let m = &lowered.model;
    let tile = only(m, OperationType::Tile);
    assert_eq!(i32s(m, role(tile, "multiples")), [2, 1, 1]);
    assert_eq!(dims(m, tile.outputs[0]), [2, 4, 5]);
    assert_eq!(m.output_info[0].dims, [2, 3, 5]);
}

#[test]
fn matmul_with_constant_b_is_fully_connected_on_flattened_rows() {
    for (case, weights, rows_out, out) in [
        ("matmul_const_2d_b_3d_a", [5, 4], [6, 5], vec![2, 3, 5]),
        ("matmul_const_1d_b", [1, 4], [6, 1], vec![2, 3]),
    ] {
        let lowered = lower(case);
        let m = &lowered.model;
        let fc = only(m, OperationType::FullyConnected);
        assert_eq!(dims(m, role(fc, "weights")), weights, "{case}");
        assert_eq!(dims(m, fc.outputs[0]), rows_out, "{case}");
        assert_eq!(m.output_info[0].dims, out, "{case}");
    }
}

// ---- normalization, activations, softmax -------------------------------------------------

#[test]
fn standalone_batch_norm_runs_in_nchw_with_broadcast_constants() {
    let lowered = lower("batch_norm_rank4");
    let m = &lowered.model;
    let mul = only(m, OperationType::Mul);
    assert_eq!(
        mul.inputs[0], m.main.inputs[0],
        "no transpose left before the MUL"
    );
    assert_eq!(dims(m, mul.inputs[1]), [1, 3, 1, 1]);
    assert_eq!(dims(m, only(m, OperationType::Add).inputs[1]), [1, 3, 1, 1]);

    let lowered = lower("batch_norm_rank3");
    let m = &lowered.model;
    assert_eq!(
        dims(m, only(m, OperationType::Mul).inputs[1]),
        [3, 1],
        "broadcasts along axis 1"
    );

    let lowered = lower("batch_norm_rank2");
    let m = &lowered.model;
    assert_eq!(dims(m, only(m, OperationType::Mul).inputs[1]), [3]);
}

#[test]
fn activation_constants() {
    let lowered = lower("leaky_relu");
    let prelu = only(&lowered.model, OperationType::Prelu);
    assert_eq!(f32s(&lowered.model, role(prelu, "alpha")), [0.1]);

    let lowered = lower("prelu_per_channel");
    let m = &lowered.model;
    let prelu = only(m, OperationType::Prelu);
    assert_eq!(dims(m, role(prelu, "alpha")), [3, 1, 1]);
    assert_eq!(f32s(m, role(prelu, "alpha")), [0.1, 0.25, -0.5]);

    let lowered = lower("elu");
    let elu = only(&lowered.model, OperationType::Elu);
    assert_eq!(f32s(&lowered.model, role(elu, "alpha")), [0.7]);

    // hard_sigmoid(x) = min(max(0.25 x + 0.4, 0), 1)
    let lowered = lower("hard_sigmoid");
    let m = &lowered.model;
    assert_eq!(f32s(m, only(m, OperationType::Mul).inputs[1]), [0.25]);
    assert_eq!(f32s(m, only(m, OperationType::Add).inputs[1]), [0.4]);
    assert_eq!(f32s(m, only(m, OperationType::Maximum).inputs[1]), [0.0]);
    assert_eq!(f32s(m, only(m, OperationType::Minimum).inputs[1]), [1.0]);

    let lowered = lower("clip_arbitrary");
    let m = &lowered.model;
    assert_eq!(f32s(m, only(m, OperationType::Maximum).inputs[1]), [-0.5]);
    assert_eq!(f32s(m, only(m, OperationType::Minimum).inputs[1]), [0.7]);
}

#[test]
fn softmax_axis() {
    let lowered = lower("softmax_axis_last");
    let softmax = only(&lowered.model, OperationType::Softmax);
    assert_eq!(softmax.inputs.len(), 2, "the last axis is the default");

    let lowered = lower("softmax_axis_1_rank3");
    let softmax = only(&lowered.model, OperationType::Softmax);
    assert_eq!(scalar_i32(&lowered.model, softmax, "axis"), 1);

    let lowered = lower("softmax_opset11_axis_1_rank4");
    let m = &lowered.model;
    let softmax = only(m, OperationType::Softmax);
    assert_eq!(
        dims(m, softmax.inputs[0]),
        [1, 12],
        "coerced to 2-D at the axis"
    );
    assert_eq!(m.output_info[0].dims, [1, 3, 2, 2]);

    let lowered = lower("log_softmax");
    let log_softmax = only(&lowered.model, OperationType::LogSoftmax);
    assert_eq!(scalar_i32(&lowered.model, log_softmax, "axis"), -1);
}

// ---- elementwise -------------------------------------------------------------------------

#[test]
fn comparisons_and_logic_produce_bool_tensors() {
    let lowered = lower("comparisons");
    for out in &lowered.model.output_info {
        assert_eq!(
            (out.dtype, out.dims.as_slice()),
            (DataType::Bool, &[2, 3][..]),
            "{}",
            out.name
        );
    }
    let lowered = lower("logical_ops");
    let m = &lowered.model;
    assert!(m.input_info.iter().all(|i| i.dtype == DataType::Bool));
    assert!(m.output_info.iter().all(|o| o.dtype == DataType::Bool));
    for &o in &m.main.outputs {
        assert_eq!(
            m.main.operands[o as usize].operand_type,
            OperandType::TensorBool8
        );
    }
}

#[test]
fn binary_broadcast_shapes() {
    let lowered = lower("add_broadcast");
    let dims: Vec<&[u32]> = lowered
        .model
        .output_info
        .iter()
        .map(|o| o.dims.as_slice())
        .collect();
    assert_eq!(dims, [&[2, 3, 4][..], &[2, 3, 4], &[2, 3, 4]]);
    // The scalar constant is a one-element tensor.
    let m = &lowered.model;
    let scalar_add = m
        .main
        .operations
        .iter()
        .find(|o| o.outputs[0] == m.main.outputs[2])
        .unwrap();
    assert_eq!(f32s(m, scalar_add.inputs[1]), [1.5]);
}

#[test]
fn cast_chain_goes_through_int32() {
    let lowered = lower("cast_float_int64_float");
    let m = &lowered.model;
    let casts: Vec<&Operation> = m
        .main
        .operations
        .iter()
        .filter(|o| o.op_type == OperationType::Cast)
        .collect();
    assert_eq!(
        m.main.operands[casts[0].outputs[0] as usize].operand_type,
        OperandType::TensorInt32
    );
    assert_eq!(
        m.main.operands[casts[1].outputs[0] as usize].operand_type,
        OperandType::TensorFloat32
    );
    assert_eq!(m.output_info[0].dtype, DataType::F32);
}

// ---- pools -----------------------------------------------------------------------------

#[test]
fn pool_windows() {
    // (case, op, [pad_left, pad_right, pad_top, pad_bottom, stride_w, stride_h], kernel, output)
    for (case, op, expected, kernel, out) in [
        (
            "max_pool_2x2_s2",
            OperationType::MaxPool2d,
            [0, 0, 0, 0, 2, 2],
            2,
            vec![1, 2, 2, 2],
        ),
        (
            "max_pool_3x3_s2_pads",
            OperationType::MaxPool2d,
            [1, 1, 1, 1, 2, 2],
            3,
            vec![1, 2, 3, 3],
        ),
        // ceil_mode: one extra end pad turns 2 windows into 3.
        (
            "max_pool_ceil_mode",
            OperationType::MaxPool2d,
            [0, 1, 0, 1, 2, 2],
            2,
            vec![1, 2, 3, 3],
        ),
        (
            "average_pool_exclude_pad",
            OperationType::AveragePool2d,
            [1, 1, 1, 1, 2, 2],
            3,
            vec![1, 2, 3, 3],
        ),
        (
            "average_pool_ceil_mode",
            OperationType::AveragePool2d,
            [0, 1, 0, 1, 2, 2],
            2,
            vec![1, 2, 3, 3],
        ),
        // The padding is explicit zeros instead (counted by the average).
        (
            "average_pool_include_pad",
            OperationType::AveragePool2d,
            [0, 0, 0, 0, 2, 2],
            3,
            vec![1, 2, 3, 3],
        ),
        (
            "max_pool_1d",
            OperationType::MaxPool2d,
            [0, 0, 0, 0, 2, 1],
            2,
            vec![1, 2, 4],
        ),
    ] {
        let lowered = lower(case);
        let m = &lowered.model;
        let pool = only(m, op);
        assert_eq!(window(m, pool), expected, "{case}");
        let k = if case == "max_pool_1d" {
            [2, 1]
        } else {
            [kernel, kernel]
        };
        assert_eq!(
            [
                scalar_i32(m, pool, "filter_w"),
                scalar_i32(m, pool, "filter_h")
            ],
            k,
            "{case}"
        );
        assert_eq!(fused_activation(m, pool), 0, "{case}");
        assert_eq!(m.output_info[0].dims, out, "{case}");
    }
    let lowered = lower("average_pool_include_pad");
    let m = &lowered.model;
    assert_eq!(
        i32s(m, role(only(m, OperationType::Pad), "paddings")),
        [0, 0, 1, 1, 1, 1, 0, 0]
    );
}

#[test]
fn global_pools_reduce_h_and_w_keeping_them() {
    let lowered = lower("global_average_pool");
    let m = &lowered.model;
    let mean = only(m, OperationType::Mean);
    assert_eq!(i32s(m, role(mean, "axes")), [2, 3]);
    assert_eq!(m.output_info[0].dims, [1, 3, 1, 1]);
    let lowered = lower("global_max_pool");
    let m = &lowered.model;
    assert_eq!(
        i32s(m, role(only(m, OperationType::ReduceMax), "axes")),
        [2, 3]
    );
}

// ---- shape and data movement --------------------------------------------------------------

#[test]
fn concat_axis_is_normalized() {
    let lowered = lower("concat_axis_negative");
    let m = &lowered.model;
    let concat = only(m, OperationType::Concatenation);
    assert_eq!(concat.inputs.len(), 4, "two inputs, the constant, the axis");
    assert_eq!(i32s(m, *concat.inputs.last().unwrap()), [1]);
    assert_eq!(m.output_info[0].dims, [2, 6]);
}

#[test]
fn reshapes_resolve_zero_and_minus_one() {
    for (case, out) in [
        ("reshape_zero_and_minus_one", vec![2, 12]),
        ("flatten_axis_1", vec![2, 12]),
        ("flatten_axis_2", vec![6, 4]),
    ] {
        let lowered = lower(case);
        let m = &lowered.model;
        let reshape = only(m, OperationType::Reshape);
        let expected: Vec<i32> = out.iter().map(|&d| d as i32).collect();
        assert_eq!(i32s(m, role(reshape, "shape")), expected, "{case}");
        assert_eq!(m.output_info[0].dims, out, "{case}");
    }
}

#[test]
fn squeeze_and_unsqueeze_in_both_opset_forms() {
    for case in ["squeeze_unsqueeze_opset11", "squeeze_unsqueeze_opset13"] {
        let lowered = lower(case);
        let dims: Vec<&[u32]> = lowered
            .model
            .output_info
            .iter()
            .map(|o| o.dims.as_slice())
            .collect();
        assert_eq!(dims, [&[2, 3][..], &[1, 2, 3, 1]], "{case}");
    }
}

#[test]
fn pads() {
    let lowered = lower("pad_constant_zero");
    let m = &lowered.model;
    // ONNX [begin..., end...] -> NN [[begin, end] per axis]
    assert_eq!(
        i32s(m, role(only(m, OperationType::Pad), "paddings")),
        [0, 0, 0, 0, 1, 2, 2, 1]
    );
    assert_eq!(m.output_info[0].dims, [1, 2, 6, 6]);

    let lowered = lower("pad_constant_value");
    let m = &lowered.model;
    let pad = only(m, OperationType::PadV2);
    assert_eq!(f32s(m, role(pad, "value")), [1.5]);

    let lowered = lower("pad_reflect");
    let m = &lowered.model;
    let pad = only(m, OperationType::MirrorPad);
    assert_eq!(i32s(m, pad.inputs[2]), [0], "mode REFLECT");
}

#[test]
fn slices() {
    let lowered = lower("slice_steps_2");
    let m = &lowered.model;
    let s = only(m, OperationType::StridedSlice);
    assert_eq!(i32s(m, role(s, "begin")), [0, 0, 1]);
    assert_eq!(i32s(m, role(s, "strides")), [1, 2, 2]);
    assert_eq!(m.output_info[0].dims, [2, 3, 3]);

    // Axis 1: 4, 2 (step -2); axis 2: 5 down to 0 (step -1, end "before 0" as a mask).
    let lowered = lower("slice_negative_steps");
    let m = &lowered.model;
    let s = only(m, OperationType::StridedSlice);
    assert_eq!(i32s(m, role(s, "begin")), [0, 4, 5]);
    assert_eq!(i32s(m, role(s, "end"))[1], 1);
    assert_eq!(i32s(m, role(s, "strides")), [1, -2, -1]);
    assert_eq!(scalar_i32(m, s, "end_mask"), 0b101);
    assert_eq!(m.output_info[0].dims, [2, 2, 6]);

    let lowered = lower("slice_negative_starts");
    let m = &lowered.model;
    let s = only(m, OperationType::Slice);
    assert_eq!(i32s(m, role(s, "begin")), [0, 1, 3]);
    assert_eq!(i32s(m, role(s, "size")), [-1, 3, 3]);
    assert_eq!(m.output_info[0].dims, [2, 3, 3]);
}

#[test]
fn splits() {
    let lowered = lower("split_equal");
    let m = &lowered.model;
    let split = only(m, OperationType::Split);
    assert_eq!(
        [
            scalar_i32(m, split, "axis"),
            scalar_i32(m, split, "num_splits")
        ],
        [1, 3]
    );

    for (case, sizes) in [
        ("split_unequal", [1, 2, 3]),
        ("split_opset18_num_outputs", [3, 3, 1]),
    ] {
        let lowered = lower(case);
        let m = &lowered.model;
        let widths: Vec<u32> = m.output_info.iter().map(|o| o.dims[1]).collect();
        assert_eq!(widths, sizes, "{case}");
        let begins: Vec<i32> = m
            .main
            .operations
            .iter()
            .filter(|o| o.op_type == OperationType::Slice)
            .map(|o| i32s(m, role(o, "begin"))[1])
            .collect();
        assert_eq!(
            begins,
            [0, sizes[0] as i32, (sizes[0] + sizes[1]) as i32],
            "{case}"
        );
    }
}

#[test]
fn gathers() {
    let lowered = lower("gather_negative_index");
    let m = &lowered.model;
    let g = only(m, OperationType::Gather);
    assert_eq!(
        i32s(m, role(g, "indices")),
        [2, 0],
        "-1 wraps to 2 at compile time"
    );
    assert_eq!(scalar_i32(m, g, "axis"), 1);

    let lowered = lower("gather_scalar_index");
    assert_eq!(
        lowered.model.output_info[0].dims,
        [2, 4],
        "a scalar index drops the axis"
    );

    let lowered = lower("gather_runtime_indices");
    let m = &lowered.model;
    assert_eq!(
        (m.input_info[1].dtype, m.input_info[1].dims.as_slice()),
        (DataType::I64, &[2, 2][..])
    );
    // Run-time indices may be negative (ONNX) but not for NN GATHER: they are wrapped
    // in the graph as idx + (idx < 0) * dim before the GATHER reads them.
    let g = only(m, OperationType::Gather);
    let wrap = only(m, OperationType::Add);
    assert_eq!(role(g, "indices"), wrap.outputs[0]);
    assert_eq!(only(m, OperationType::Less).inputs[0], m.main.inputs[1]);
    assert_eq!(wrap.inputs[0], m.main.inputs[1]);
    assert_eq!(
        m.main.operands[m.main.inputs[1] as usize].operand_type,
        OperandType::TensorInt32
    );
    assert_eq!(m.output_info[0].dims, [2, 2, 4]);
}

#[test]
fn tile_and_expand() {
    let lowered = lower("tile");
    let m = &lowered.model;
    assert_eq!(
        i32s(m, role(only(m, OperationType::Tile), "multiples")),
        [2, 1]
    );
    let lowered = lower("expand");
    let m = &lowered.model;
    assert_eq!(
        i32s(m, role(only(m, OperationType::Tile), "multiples")),
        [2, 1, 4]
    );
    assert_eq!(m.output_info[0].dims, [2, 3, 4]);
}

#[test]
fn depth_to_space_crd_permutes_channels_into_dcr_order() {
    let lowered = lower("depth_to_space_crd");
    let m = &lowered.model;
    let g = only(m, OperationType::Gather);
    assert_eq!(g.inputs[0], m.main.inputs[0]);
    assert_eq!(scalar_i32(m, g, "axis"), 1);
    // DCR position (i * 2 + j) * 2 + c reads CRD channel c * 4 + i * 2 + j.
    assert_eq!(i32s(m, role(g, "indices")), [0, 4, 1, 5, 2, 6, 3, 7]);
    for case in ["depth_to_space_crd", "depth_to_space_dcr"] {
        let lowered = lower(case);
        let m = &lowered.model;
        assert_eq!(
            scalar_i32(m, only(m, OperationType::DepthToSpace), "block_size"),
            2,
            "{case}"
        );
        assert_eq!(m.output_info[0].dims, [1, 2, 4, 6], "{case}");
    }
    let lowered = lower("space_to_depth");
    assert_eq!(lowered.model.output_info[0].dims, [1, 8, 2, 3]);
}

#[test]
fn resize_flags_reproduce_onnx_sampling() {
    // (case, op, align_corners, half_pixel_centers, output dims)
    for (case, op, align, half, out) in [
        (
            "resize_nearest_asymmetric_floor",
            OperationType::ResizeNearestNeighbor,
            false,
            false,
            [1, 2, 6, 8],
        ),
        (
            "resize_nearest_default",
            OperationType::ResizeNearestNeighbor,
            false,
            false,
            [1, 2, 6, 8],
        ),
        (
            "resize_linear_half_pixel_sizes",
            OperationType::ResizeBilinear,
            false,
            true,
            [1, 2, 6, 8],
        ),
        (
            "resize_linear_align_corners",
            OperationType::ResizeBilinear,
            true,
            false,
            [1, 2, 5, 7],
        ),
        (
            "upsample_opset9_nearest",
            OperationType::ResizeNearestNeighbor,
            false,
            false,
            [1, 2, 6, 8],
        ),
    ] {
        let lowered = lower(case);
        let m = &lowered.model;
        let resize = only(m, op);
        assert_eq!(
            (
                scalar_bool(m, resize, "align_corners"),
                scalar_bool(m, resize, "half_pixel")
            ),
            (align, half),
            "{case}"
        );
        assert_eq!(
            [
                scalar_i32(m, resize, "width"),
                scalar_i32(m, resize, "height")
            ],
            [out[3] as i32, out[2] as i32]
        );
        assert_eq!(m.output_info[0].dims, out, "{case}");
    }
}

// ---- reductions --------------------------------------------------------------------------

#[test]
fn reductions_keepdims() {
    for case in [
        "reduce_mean_keepdims",
        "reduce_sum_opset11_keepdims",
        "reduce_max_keepdims",
        "reduce_min_keepdims",
        "reduce_prod_keepdims",
    ] {
        let lowered = lower(case);
        let dims: Vec<&[u32]> = lowered
            .model
            .output_info
            .iter()
            .map(|o| o.dims.as_slice())
            .collect();
        assert_eq!(dims, [&[2, 1, 4][..], &[2, 3]], "{case}");
    }
    let lowered = lower("reduce_sum_opset13_axes_input");
    let m = &lowered.model;
    assert_eq!(
        i32s(m, role(only(m, OperationType::ReduceSum), "axes")),
        [0, 2]
    );
    assert_eq!(m.output_info[0].dims, [1, 3, 1]);
}

#[test]
fn reduction_over_all_axes_is_a_scalar() {
    let lowered = lower("reduce_mean_all_axes_scalar");
    let m = &lowered.model;
    assert_eq!(
        i32s(m, role(only(m, OperationType::Mean), "axes")),
        [0, 1, 2]
    );
    assert_eq!(
        m.output_info[0].dims,
        Vec::<u32>::new(),
        "rank 0 at the ONNX level"
    );
    assert_eq!(m.output_info[0].dtype, DataType::F32);
}

#[test]
fn arg_reductions_are_int64_at_the_boundary() {
    for (case, out) in [
        ("argmax_keepdims", vec![2, 1, 4]),
        ("argmin_no_keepdims", vec![2, 4]),
        ("argmax_select_last_index", vec![2, 1, 4]),
        ("argmin_select_last_index_no_keepdims", vec![2, 3]),
    ] {
        let lowered = lower(case);
        let m = &lowered.model;
        assert_eq!(
            (m.output_info[0].dtype, &m.output_info[0].dims),
            (DataType::I64, &out),
            "{case}"
        );
    }
    // (n - 1) - index along axis 1, of size 3.
    let lowered = lower("argmax_select_last_index");
    let m = &lowered.model;
    let sub = only(m, OperationType::Sub);
    assert_eq!(i32s(m, sub.inputs[0]), [2]);
    assert_eq!(i32s(m, role(only(m, OperationType::Reverse), "axis")), [1]);
}

#[test]
fn topk_on_a_middle_axis() {
    for case in ["topk_largest", "topk_smallest"] {
        let lowered = lower(case);
        let m = &lowered.model;
        assert_eq!(
            scalar_i32(m, only(m, OperationType::TopkV2), "k"),
            2,
            "{case}"
        );
        let outs: Vec<(DataType, &[u32])> = m
            .output_info
            .iter()
            .map(|o| (o.dtype, o.dims.as_slice()))
            .collect();
        assert_eq!(
            outs,
            [(DataType::F32, &[2, 2, 3][..]), (DataType::I64, &[2, 2, 3])],
            "{case}"
        );
    }
}

// ---- identities and shape arithmetic ----------------------------------------------------

#[test]
fn identities_disappear() {
    for case in ["identity", "dropout_inference"] {
        let lowered = lower(case);
        let m = &lowered.model;
        let relu = only(m, OperationType::Relu);
        assert_eq!(
            (relu.inputs[0], relu.outputs[0]),
            (m.main.inputs[0], m.main.outputs[0]),
            "{case}"
        );
        assert_eq!(
            lowered.lowered_histogram.get("RESHAPE"),
            Some(&if case == "identity" { 2 } else { 1 }),
            "{case}"
        );
    }
}

#[test]
fn shape_chain_folds_to_a_constant_shape() {
    let lowered = lower("shape_chain_reshape");
    // Folded by the frontend already, before any pass.
    assert_eq!(lowered.lowered_histogram, BTreeMap::from([("RESHAPE", 1)]));
    let m = &lowered.model;
    let reshape = only(m, OperationType::Reshape);
    assert_eq!(reshape.inputs[0], m.main.inputs[0]);
    assert_eq!(i32s(m, role(reshape, "shape")), [1, 48]);
    assert_eq!(m.output_info[0].dims, [1, 48]);
}

// ---- unsupported operators ----------------------------------------------------------------

#[test]
fn unsupported_operators_are_reported_together() {
    let path = case_dir("unsupported_ops").join("model.onnx");
    let report = match lower_file(&path, &LowerOptions::default()) {
        Err(CompileError::Unsupported(report)) => report,
        Err(other) => panic!("expected CompileError::Unsupported, got: {other}"),
        Ok(_) => {
            panic!(
                "the model lowered, but Det, com.microsoft.QuickGelu and Bernoulli have no lowering"
            )
        }
    };
    assert_eq!(report.format, "ONNX");
    let nodes: BTreeMap<&str, Vec<&str>> = report
        .operators
        .iter()
        .map(|(op, nodes)| (op.as_str(), nodes.iter().map(|n| n.node.as_str()).collect()))
        .collect();
    assert_eq!(
        nodes,
        BTreeMap::from([
            ("Det", vec!["det_a", "det_b"]),
            ("Bernoulli", vec!["bernoulli"]),
            ("com.microsoft.QuickGelu", vec!["quick_gelu"]),
        ])
    );
    assert_eq!(report.node_count(), 4);
    let text = CompileError::Unsupported(report).to_string();
    for needle in [
        "Det x2",
        "com.microsoft.QuickGelu x1",
        "Bernoulli x1",
        "'det_a'",
        "'det_b'",
        "'quick_gelu'",
        "'bernoulli'",
        "3 operator types (4 nodes)",
    ] {
        assert!(
            text.contains(needle),
            "the message lacks {needle:?}:\n{text}"
        );
    }
}

// ---- the README's example model --------------------------------------------------------

#[test]
fn tiny_cnn_folds_batch_norm_fuses_activations_and_keeps_one_transpose() {
    let path = PathBuf::from(TINY_CNN);
    let lowered =
        lower_file(&path, &LowerOptions::default()).unwrap_or_else(|e| panic!("tiny_cnn: {e}"));
    let m = &lowered.model;
    validate(m).unwrap();
    assert_eq!(
        m.operation_histogram(),
        BTreeMap::from([
            ("TRANSPOSE", 1),
            ("CONV_2D", 2),
            ("DEPTHWISE_CONV_2D", 1),
            ("MAX_POOL_2D", 1),
            ("ADD", 1), // the residual connection, not a batch norm
            ("MEAN", 1),
            ("RESHAPE", 1),
            ("FULLY_CONNECTED", 1),
            ("SOFTMAX", 1),
        ]),
        "{}",
        dump::to_text(m)
    );
    // The one transpose turns the NCHW input into NHWC; everything after stays NHWC.
    let t = only(m, OperationType::Transpose);
    assert_eq!(t.inputs[0], m.main.inputs[0]);
    // Every BatchNormalization folded: 3 MULs and 3 ADDs.
    let folds: usize = lowered
        .passes
        .iter()
        .filter(|p| p.pass == "fold-batch-norm")
        .flat_map(|p| p.changes.values())
        .sum();
    assert_eq!(folds, 6);
    // conv1 + Relu, depthwise + Clip(0,6), pointwise + Relu.
    let activations: Vec<(OperationType, i32)> = m
        .main
        .operations
        .iter()
        .filter(|o| {
            matches!(
                o.op_type,
                OperationType::Conv2d | OperationType::DepthwiseConv2d
            )
        })
        .map(|o| (o.op_type, fused_activation(m, o)))
        .collect();
    assert_eq!(
        activations,
        [
            (OperationType::Conv2d, FusedActivation::Relu as i32),
            (
                OperationType::DepthwiseConv2d,
                FusedActivation::Relu6 as i32
            ),
            (OperationType::Conv2d, FusedActivation::Relu as i32),
        ]
    );
    let io = |infos: &[nnc_formats::nn::IoInfo]| -> Vec<(String, DataType, Vec<u32>)> {
        infos
            .iter()
            .map(|i| (i.name.clone(), i.dtype, i.dims.clone()))
            .collect()
    };
    assert_eq!(
        io(&m.input_info),
        [("input".to_string(), DataType::F32, vec![1, 3, 32, 32])]
    );
    assert_eq!(
        io(&m.output_info),
        [("probabilities".to_string(), DataType::F32, vec![1, 10])]
    );
    let reference = read_npy_file(path.with_file_name("tiny_cnn.output.npy")).unwrap();
    assert_eq!(reference.shape, [1, 10]);
    let (fc_bias, _) = onnx_initializer(&path, "fc.bias");
    assert_eq!(
        f32s(m, role(only(m, OperationType::FullyConnected), "bias")),
        fc_bias
    );
}

// ---- compile-time input binding ---------------------------------------------------------

mod binding {
    use std::collections::HashMap;

    use nnc_compiler::CompileError;
    use nnc_compiler::onnx::proto::{
        AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto,
        TypeProto, ValueInfoProto, attribute_proto, encode_model, tensor_shape_proto, type_proto,
    };
    use nnc_compiler::onnx::tensor::ExternalDataContext;
    use nnc_compiler::pipeline::{LowerOptions, Lowered, SourceFormat, lower_bytes};
    use nnc_formats::nn::OperationType;
    use nnc_formats::tensor::{DataType, HostTensor};

    use super::{i32s, only, role, scalar_bool, scalar_i32};

    // ONNX TensorProto.DataType codes.
    pub(super) const FLOAT: i32 = 1;
    pub(super) const INT32: i32 = 6;
    pub(super) const INT64: i32 = 7;
    pub(super) const BOOL: i32 = 9;

    pub(super) fn info(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
        let dim = dims
            .iter()
            .map(|&d| tensor_shape_proto::Dimension {
                value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                denotation: String::new(),
            })
            .collect();
        ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type,
                    shape: Some(TensorShapeProto { dim }),
                })),
                denotation: String::new(),
            }),
            ..Default::default()
        }
    }

    pub(super) fn node(
        op: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<AttributeProto>,
    ) -> NodeProto {
        NodeProto {
            op_type: op.into(),
            name: format!("{op}_0"),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs,
            ..Default::default()
        }
    }

    pub(super) fn string_attr(name: &str, value: &str) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: Some(attribute_proto::AttributeType::String as i32),
            s: Some(value.as_bytes().to_vec().into()),
            ..Default::default()
        }
    }

    fn ints_attr(name: &str, values: &[i64]) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: Some(attribute_proto::AttributeType::Ints as i32),
            ints: values.to_vec(),
            ..Default::default()
        }
    }

    pub(super) fn int_attr(name: &str, value: i64) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: Some(attribute_proto::AttributeType::Int as i32),
            i: Some(value),
            ..Default::default()
        }
    }

    pub(super) fn model(
        nodes: Vec<NodeProto>,
        inputs: Vec<ValueInfoProto>,
        outputs: Vec<ValueInfoProto>,
        opset: i64,
    ) -> ModelProto {
        ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: opset,
            }],
            graph: Some(GraphProto {
                node: nodes,
                name: "g".into(),
                input: inputs,
                output: outputs,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub(super) fn lower_bound(
        m: &ModelProto,
        bound: &[(&str, HostTensor)],
    ) -> Result<Lowered, CompileError> {
        let mut options = LowerOptions::default();
        options.import.bound_inputs = bound
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect::<HashMap<_, _>>();
        lower_bytes(
            encode_model(m).into(),
            SourceFormat::Onnx,
            &ExternalDataContext::none(),
            &options,
        )
    }

    pub(super) fn f32_tensor(shape: &[usize], v: &[f32]) -> HostTensor {
        HostTensor {
            dtype: DataType::F32,
            shape: shape.to_vec(),
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    fn i64_tensor(shape: &[usize], v: &[i64]) -> HostTensor {
        HostTensor {
            dtype: DataType::I64,
            shape: shape.to_vec(),
            data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    fn bool_scalar(v: bool) -> HostTensor {
        HostTensor {
            dtype: DataType::Bool,
            shape: vec![],
            data: vec![u8::from(v)],
        }
    }

    /// Resize(X [1,1,2,2], scales: a graph input), opset 19, with extra attributes.
    fn resize_scales(attrs: Vec<AttributeProto>, scales_len: i64) -> ModelProto {
        model(
            vec![node("Resize", &["X", "", "scales"], &["Y"], attrs)],
            vec![
                info("X", FLOAT, &[1, 1, 2, 2]),
                info("scales", FLOAT, &[scales_len]),
            ],
            vec![info("Y", FLOAT, &[])],
            19,
        )
    }

    pub(super) fn unsupported(
        result: Result<Lowered, CompileError>,
    ) -> nnc_compiler::UnsupportedReport {
        match result {
            Err(CompileError::Unsupported(report)) => report,
            Err(other) => panic!("expected an unsupported-operation error, got: {other}"),
            Ok(_) => panic!("expected an unsupported-operation error, the model lowered"),
        }
    }

    #[test]
    fn a_run_time_resize_scale_names_the_input_to_bind() {
        let report = unsupported(lower_bound(&resize_scales(vec![], 4), &[]));
        assert_eq!(
            report.only_needs_bound_inputs(),
            Some(vec!["scales".to_string()])
        );
        let text = report.to_string();
        assert!(text.contains("Resize with run-time scales"), "{text}");
        assert!(
            text.contains("graph input 'scales' is needed at compile time")
                && text.contains("--bind-input NAME=FILE"),
            "{text}"
        );
    }

    #[test]
    fn a_bound_scale_becomes_a_constant_and_leaves_the_inputs() {
        let scales = f32_tensor(&[4], &[1.0, 1.0, 2.0, 3.0]);
        let lowered = lower_bound(&resize_scales(vec![], 4), &[("scales", scales)]).unwrap();
        let m = &lowered.model;
        let names: Vec<&str> = m.input_info.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["X"]);
        let resize = only(m, OperationType::ResizeNearestNeighbor);
        assert_eq!(
            (
                scalar_i32(m, resize, "width"),
                scalar_i32(m, resize, "height")
            ),
            (6, 4)
        );
        // half_pixel + round_prefer_floor on an integer upscale reads floor(o / s).
        assert!(!scalar_bool(m, resize, "align_corners"));
        assert!(!scalar_bool(m, resize, "half_pixel"));
        assert_eq!(m.output_info[0].dims, [1, 1, 4, 6]);
    }

    #[test]
    fn resize_axes_and_keep_aspect_ratio_policies() {
        let sizes_model = |policy: &str| {
            model(
                vec![node(
                    "Resize",
                    &["X", "", "", "sizes"],
                    &["Y"],
                    vec![
                        ints_attr("axes", &[3, 2]),
                        string_attr("keep_aspect_ratio_policy", policy),
                    ],
                )],
                vec![info("X", FLOAT, &[1, 1, 2, 2]), info("sizes", INT64, &[2])],
                vec![info("Y", FLOAT, &[])],
                19,
            )
        };
        // sizes (w, h) = (8, 7): one scale for both axes, the smaller or the larger ratio.
        for (policy, expected) in [
            ("stretch", [1, 1, 7, 8]),
            ("not_larger", [1, 1, 7, 7]),
            ("not_smaller", [1, 1, 8, 8]),
        ] {
            let lowered = lower_bound(
                &sizes_model(policy),
                &[("sizes", i64_tensor(&[2], &[8, 7]))],
            )
            .unwrap_or_else(|e| panic!("{policy}: {e}"));
            assert_eq!(lowered.model.output_info[0].dims, expected, "{policy}");
        }
    }

    #[test]
    fn resize_sampling_no_nn_setting_matches_becomes_a_resample_after_binding() {
        // 2 -> 1 rows at scale 0.6 with half_pixel reads row 1/3, the NN set row 0.5: no
        // NN resize reproduces it, so the bound model resamples with nnc's RESAMPLE.
        let m = resize_scales(vec![string_attr("mode", "linear")], 4);
        let lowered =
            lower_bound(&m, &[("scales", f32_tensor(&[4], &[1.0, 1.0, 0.6, 0.6]))]).unwrap();
        let ops: Vec<OperationType> = lowered
            .model
            .main
            .operations
            .iter()
            .map(|o| o.op_type)
            .collect();
        assert_eq!(ops, [OperationType::Resample]);
    }

    /// timm's "same" padding (MaxViT, EfficientNet ports): the pad computed in float from
    /// the input's static shape, clipped at zero with Clip (no upper bound), halved and
    /// cast to int64: Clip folds like the rest, so the Pad's output shape is known.
    #[test]
    fn same_padding_arithmetic_with_clip_folds_into_static_padding() {
        let m = model(
            vec![
                node("Shape", &["x"], &["s"], vec![]),
                node("Gather", &["s", "idx"], &["h"], vec![]),
                node("Cast", &["h"], &["hf"], vec![int_attr("to", 1)]),
                node("Sub", &["three", "hf"], &["d"], vec![]),
                node("Clip", &["d", "zero", ""], &["c"], vec![]),
                node("Div", &["c", "two"], &["half"], vec![]),
                node("Cast", &["half"], &["hi"], vec![int_attr("to", 7)]),
                node("Unsqueeze", &["hi", "axes"], &["hv"], vec![]),
                node(
                    "Concat",
                    &["zeros", "hv", "hv"],
                    &["pads"],
                    vec![int_attr("axis", 0)],
                ),
                node("Pad", &["x", "pads"], &["y"], vec![]),
            ],
            vec![
                info("x", FLOAT, &[1, 3, 10, 10]),
                info("idx", INT64, &[]),
                info("three", FLOAT, &[]),
                info("zero", FLOAT, &[]),
                info("two", FLOAT, &[]),
                info("axes", INT64, &[1]),
                info("zeros", INT64, &[6]),
            ],
            vec![info("y", FLOAT, &[])],
            17,
        );
        // 14 - 10 = 4 clipped at 0 stays 4; halved: 2 after H and after W.
        let lowered = lower_bound(
            &m,
            &[
                ("idx", i64_tensor(&[], &[2])),
                ("three", f32_tensor(&[], &[14.0])),
                ("zero", f32_tensor(&[], &[0.0])),
                ("two", f32_tensor(&[], &[2.0])),
                ("axes", i64_tensor(&[1], &[0])),
                ("zeros", i64_tensor(&[6], &[0; 6])),
            ],
        )
        .unwrap();
        let pad = only(&lowered.model, OperationType::Pad);
        let out = pad.outputs[0];
        let dims = &lowered.model.main.operands[out as usize].dimensions;
        assert_eq!(dims.iter().product::<u32>(), 3 * 12 * 12, "{dims:?}");
        // A negative difference clips to no padding at all.
        let lowered = lower_bound(
            &m,
            &[
                ("idx", i64_tensor(&[], &[2])),
                ("three", f32_tensor(&[], &[6.0])),
                ("zero", f32_tensor(&[], &[0.0])),
                ("two", f32_tensor(&[], &[2.0])),
                ("axes", i64_tensor(&[1], &[0])),
                ("zeros", i64_tensor(&[6], &[0; 6])),
            ],
        )
        .unwrap();
        assert!(
            lowered
                .model
                .main
                .operations
                .iter()
                .all(|o| o.op_type != OperationType::Pad
                    || lowered.model.main.operands[o.outputs[0] as usize]
                        .dimensions
                        .iter()
                        .product::<u32>()
                        == 300),
            "zero padding keeps the shape"
        );
    }

    /// Swin's window padding, `(ws - H % ws) % ws` from the input's static shape: the
    /// Mod nodes fold, so the Pad's amounts and output shape are known.
    #[test]
    fn shape_arithmetic_with_mod_folds_into_static_padding() {
        let m = model(
            vec![
                node("Shape", &["x"], &["s"], vec![]),
                node("Gather", &["s", "idx"], &["h"], vec![]),
                node("Mod", &["h", "four"], &["r"], vec![]),
                node("Sub", &["four", "r"], &["p"], vec![]),
                node("Mod", &["p", "four"], &["q"], vec![]),
                node("Unsqueeze", &["q", "axes"], &["qv"], vec![]),
                node(
                    "Concat",
                    &["zeros", "qv", "qv"],
                    &["pads"],
                    vec![int_attr("axis", 0)],
                ),
                node("Pad", &["x", "pads"], &["y"], vec![]),
            ],
            vec![
                info("x", FLOAT, &[1, 3, 10, 10]),
                info("idx", INT64, &[]),
                info("four", INT64, &[]),
                info("axes", INT64, &[1]),
                info("zeros", INT64, &[6]),
            ],
            vec![info("y", FLOAT, &[1, 3, 12, 12])],
            17,
        );
        let lowered = lower_bound(
            &m,
            &[
                ("idx", i64_tensor(&[], &[2])),
                ("four", i64_tensor(&[], &[4])),
                ("axes", i64_tensor(&[1], &[0])),
                ("zeros", i64_tensor(&[6], &[0; 6])),
            ],
        )
        .unwrap();
        let pad = only(&lowered.model, OperationType::Pad);
        let out = pad.outputs[0];
        let dims = &lowered.model.main.operands[out as usize].dimensions;
        assert_eq!(dims.iter().product::<u32>(), 3 * 12 * 12, "{dims:?}");
        assert!(
            lowered
                .model
                .main
                .operations
                .iter()
                .all(|o| o.op_type != OperationType::Mod),
            "every Mod folded"
        );
    }

    /// skl2onnx's logistic regression as ONNX Runtime ships it (`logreg_iris.onnx`): 12
    /// coefficients for 3 classes of a declared 2-feature input. ONNX Runtime takes the
    /// class count from the intercepts and reads the first 3 x 2 coefficients; so does nnc,
    /// with a note. With its ZipMap output the model is unsupported, naming ZipMap.
    #[test]
    fn linear_classifier_takes_its_classes_from_the_intercepts() {
        let coefficients: Vec<f32> = (0..12).map(|i| i as f32 * 0.25 - 1.0).collect();
        let classifier = node(
            "LinearClassifier",
            &["x"],
            &["label", "p"],
            vec![
                AttributeProto {
                    name: "classlabels_ints".into(),
                    r#type: Some(attribute_proto::AttributeType::Ints as i32),
                    ints: vec![0, 1, 2],
                    ..Default::default()
                },
                AttributeProto {
                    name: "coefficients".into(),
                    r#type: Some(attribute_proto::AttributeType::Floats as i32),
                    floats: coefficients.clone(),
                    ..Default::default()
                },
                AttributeProto {
                    name: "intercepts".into(),
                    r#type: Some(attribute_proto::AttributeType::Floats as i32),
                    floats: vec![0.25, 0.5, -0.75],
                    ..Default::default()
                },
                string_attr("post_transform", "LOGISTIC"),
            ],
        );
        let with_ml = |nodes: Vec<NodeProto>, outputs: Vec<ValueInfoProto>| {
            let mut m = model(nodes, vec![info("x", FLOAT, &[3, 2])], outputs, 17);
            m.opset_import.push(OperatorSetIdProto {
                domain: "ai.onnx.ml".into(),
                version: 1,
            });
            for n in &mut m.graph.as_mut().unwrap().node {
                n.domain = "ai.onnx.ml".into();
            }
            m
        };
        let m = with_ml(
            vec![classifier.clone()],
            vec![info("label", INT64, &[3]), info("p", FLOAT, &[3, 3])],
        );
        let lowered = lower_bound(&m, &[]).unwrap();
        assert!(
            lowered
                .source
                .notes
                .iter()
                .any(|n| n.contains("the first 6 are used")),
            "{:?}",
            lowered.source.notes
        );
        let fc = only(&lowered.model, OperationType::FullyConnected);
        let filter = lowered
            .model
            .constant_bytes(fc.inputs[1])
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect::<Vec<f32>>();
        assert_eq!(filter, coefficients[..6]);

        let mut zipmap = node("ZipMap", &["p"], &["probabilities"], vec![]);
        zipmap.attribute.push(AttributeProto {
            name: "classlabels_int64s".into(),
            r#type: Some(attribute_proto::AttributeType::Ints as i32),
            ints: vec![0, 1, 2],
            ..Default::default()
        });
        let m = with_ml(
            vec![classifier, zipmap],
            vec![
                info("label", INT64, &[3]),
                info("probabilities", FLOAT, &[3, 3]),
            ],
        );
        let report = unsupported(lower_bound(&m, &[]));
        assert!(report.to_string().contains("ZipMap"), "{report}");
        assert!(!report.to_string().contains("LinearClassifier"), "{report}");
    }

    #[test]
    fn binding_checks_the_name_type_and_shape() {
        let m = resize_scales(vec![], 4);
        let scales = f32_tensor(&[4], &[1.0, 1.0, 2.0, 2.0]);
        let err = lower_bound(&m, &[("scale", scales.clone())]).err().unwrap();
        assert!(
            matches!(&err, CompileError::Options(t) if t.contains("'scale'") && t.contains("X, scales")),
            "{err}"
        );
        let err = lower_bound(&m, &[("scales", i64_tensor(&[4], &[1, 1, 2, 2]))])
            .err()
            .unwrap();
        assert!(
            matches!(&err, CompileError::Options(t) if t.contains("declares float32") && t.contains("int64")),
            "{err}"
        );
        let err = lower_bound(&m, &[("scales", f32_tensor(&[2], &[2.0, 2.0]))])
            .err()
            .unwrap();
        assert!(
            matches!(&err, CompileError::Options(t) if t.contains("shape [4]") && t.contains("[2]")),
            "{err}"
        );
    }

    #[test]
    fn topk_k_derived_from_an_input_names_that_input() {
        // k passes through an Identity: the graph input it comes from is the one to bind.
        let m = model(
            vec![
                node("Identity", &["kin"], &["k"], vec![]),
                node(
                    "TopK",
                    &["x", "k"],
                    &["values", "indices"],
                    vec![int_attr("axis", 1)],
                ),
            ],
            vec![info("x", FLOAT, &[3, 4]), info("kin", INT64, &[1])],
            vec![info("values", FLOAT, &[]), info("indices", INT64, &[])],
            11,
        );
        let report = unsupported(lower_bound(&m, &[]));
        assert_eq!(
            report.only_needs_bound_inputs(),
            Some(vec!["kin".to_string()])
        );
        let lowered = lower_bound(&m, &[("kin", i64_tensor(&[1], &[3]))]).unwrap();
        let topk = only(&lowered.model, OperationType::TopkV2);
        assert_eq!(scalar_i32(&lowered.model, topk, "k"), 3);
        assert_eq!(lowered.model.output_info[0].dims, [3, 3]);
    }

    #[test]
    fn edge_and_wrap_pads_gather_constant_indices() {
        let pad = |mode: &str| {
            model(
                vec![node(
                    "Pad",
                    &["x", "pads"],
                    &["y"],
                    vec![string_attr("mode", mode)],
                )],
                vec![info("x", INT32, &[2, 3]), info("pads", INT64, &[4])],
                vec![info("y", INT32, &[])],
                21,
            )
        };
        // pads: 0 rows before, 2 columns before, 1 row after, 4 columns after.
        let pads = i64_tensor(&[4], &[0, 2, 1, 4]);
        for (mode, rows, cols) in [
            ("edge", vec![0, 1, 1], vec![0, 0, 0, 1, 2, 2, 2, 2, 2]),
            ("wrap", vec![0, 1, 0], vec![1, 2, 0, 1, 2, 0, 1, 2, 0]),
        ] {
            let report = unsupported(lower_bound(&pad(mode), &[]));
            assert_eq!(
                report.only_needs_bound_inputs(),
                Some(vec!["pads".to_string()]),
                "{mode}"
            );
            let lowered = lower_bound(&pad(mode), &[("pads", pads.clone())]).unwrap();
            let m = &lowered.model;
            let gathers: Vec<(i32, Vec<i32>)> = m
                .main
                .operations
                .iter()
                .filter(|o| o.op_type == OperationType::Gather)
                .map(|o| (scalar_i32(m, o, "axis"), i32s(m, role(o, "indices"))))
                .collect();
            assert_eq!(gathers, [(0, rows), (1, cols)], "{mode}");
            assert_eq!(m.output_info[0].dims, [3, 9], "{mode}");
        }
    }

    #[test]
    fn dropout_training_mode_is_the_identity_only_with_ratio_zero() {
        let m = model(
            vec![node("Dropout", &["x", "r", "t"], &["y", "mask"], vec![])],
            vec![
                info("x", FLOAT, &[2, 3]),
                info("r", FLOAT, &[]),
                info("t", BOOL, &[]),
            ],
            vec![info("y", FLOAT, &[]), info("mask", BOOL, &[])],
            13,
        );
        let report = unsupported(lower_bound(&m, &[]));
        assert_eq!(
            report.only_needs_bound_inputs(),
            Some(vec!["t".to_string()])
        );
        // Training with ratio 0: y = x and an all-true mask, no random draw.
        let lowered = lower_bound(
            &m,
            &[("t", bool_scalar(true)), ("r", f32_tensor(&[], &[0.0]))],
        )
        .unwrap();
        let m2 = &lowered.model;
        assert_eq!(m2.output_info.len(), 2);
        let mask = m2.main.outputs[1];
        let source = m2
            .main
            .operations
            .iter()
            .find(|o| o.outputs.contains(&mask))
            .expect("the mask is written by an operation");
        let value = m2
            .constant_bytes(source.inputs[0])
            .expect("a constant mask");
        assert_eq!(value, [1u8; 6]);
        // Inference mode needs no ratio.
        assert!(lower_bound(&m, &[("t", bool_scalar(false))]).is_ok());
        // Training with a ratio above 0 draws random masks: still unsupported, and no
        // binding helps.
        let report = unsupported(lower_bound(
            &m,
            &[("t", bool_scalar(true)), ("r", f32_tensor(&[], &[0.5]))],
        ));
        assert_eq!(report.only_needs_bound_inputs(), None);
        assert!(report.to_string().contains("random masks"), "{report}");
    }

    /// Attention (opset 24) of Q [1, 2, 2, 4] over K, V [1, 2, 4, 4], causal, with
    /// nonpad_kv_seqlen [1] as a graph input, and extra attributes.
    fn attention_nonpad(attrs: Vec<AttributeProto>) -> ModelProto {
        let mut attrs = attrs;
        attrs.push(int_attr("is_causal", 1));
        model(
            vec![node(
                "Attention",
                &["Q", "K", "V", "", "", "", "L"],
                &["Y"],
                attrs,
            )],
            vec![
                info("Q", FLOAT, &[1, 2, 2, 4]),
                info("K", FLOAT, &[1, 2, 4, 4]),
                info("V", FLOAT, &[1, 2, 4, 4]),
                info("L", INT64, &[1]),
            ],
            vec![info("Y", FLOAT, &[])],
            24,
        )
    }

    #[test]
    fn attention_with_a_bound_nonpad_kv_seqlen_folds_its_frontier_into_a_constant() {
        let m = attention_nonpad(vec![]);
        let run_time = lower_bound(&m, &[]).unwrap();
        let ops = run_time.model.operation_histogram();
        assert_eq!(
            (ops.get("LESS"), ops.get("LESS_EQUAL")),
            (Some(&1), Some(&1))
        );
        // L = 1 with 2 queries: offset -1, so query 0 sees no key (a zero row) and
        // query 1 sees key 0; the rest is padding. One constant bias, one constant guard.
        let bound = lower_bound(&m, &[("L", i64_tensor(&[1], &[1]))]).unwrap();
        let ops = bound.model.operation_histogram();
        for op in ["LESS", "LESS_EQUAL", "LOGICAL_AND", "REDUCE_MAX", "EQUAL"] {
            assert!(!ops.contains_key(op), "{op} left: {ops:?}");
        }
        assert_eq!((ops.get("ADD"), ops.get("SELECT")), (Some(&1), Some(&1)));
    }

    #[test]
    fn microsoft_attention_forms_beyond_the_common_ones_are_refused_by_name() {
        let ms = |op: &str, inputs: &[&str], infos: Vec<ValueInfoProto>| {
            let mut n = node(op, inputs, &["Y"], vec![int_attr("num_heads", 2)]);
            n.domain = "com.microsoft".into();
            let mut m = model(vec![n], infos, vec![info("Y", FLOAT, &[])], 17);
            m.opset_import.push(OperatorSetIdProto {
                domain: "com.microsoft".into(),
                version: 1,
            });
            m
        };
        // Packed QKV [batch, seq, heads, 3, head] as the only MultiHeadAttention input.
        let packed = ms(
            "MultiHeadAttention",
            &["Q"],
            vec![info("Q", FLOAT, &[1, 2, 2, 3, 4])],
        );
        let report = unsupported(lower_bound(&packed, &[]));
        assert!(report.to_string().contains("packed QKV"), "{report}");
        // A (2 * batch) start/end mask_index.
        let weights = f32_tensor(&[4, 12], &[0.5; 48]);
        let left_padded = ms(
            "Attention",
            &["X", "W", "", "M"],
            vec![
                info("X", FLOAT, &[1, 2, 4]),
                info("W", FLOAT, &[4, 12]),
                info("M", INT32, &[2]),
            ],
        );
        let report = unsupported(lower_bound(&left_padded, &[("W", weights)]));
        assert!(
            report.to_string().contains("key padding mask of shape [2]"),
            "{report}"
        );
    }

    #[test]
    fn attention_refuses_a_half_precision_softmax() {
        let report = unsupported(lower_bound(
            &attention_nonpad(vec![int_attr("softmax_precision", 16)]),
            &[],
        ));
        assert!(
            report.to_string().contains("softmax_precision 16"),
            "{report}"
        );
    }
}

// ---- 8-bit integer tensors -----------------------------------------------------------------

mod int8 {
    use nnc_compiler::onnx::proto::TensorProto;
    use nnc_formats::nn::{Model, OperandType, OperationType};
    use nnc_formats::tensor::DataType;

    use super::binding::{FLOAT, info, lower_bound, model, node, unsupported};
    use super::only;

    const UINT8: i32 = 2;
    const INT8: i32 = 3;

    fn op_types(m: &Model) -> Vec<OperationType> {
        m.main.operations.iter().map(|o| o.op_type).collect()
    }

    #[test]
    fn uint8_inputs_are_quant8_operands_with_unit_scale() {
        let m = model(
            vec![node("Max", &["a", "b"], &["y"], vec![])],
            vec![info("a", INT8, &[3]), info("b", INT8, &[3])],
            vec![info("y", INT8, &[])],
            13,
        );
        let lowered = lower_bound(&m, &[]).unwrap();
        let m = &lowered.model;
        for &i in m.main.inputs.iter().chain(&m.main.outputs) {
            let o = &m.main.operands[i as usize];
            assert_eq!(
                (o.operand_type, o.scale, o.zero_point),
                (OperandType::TensorQuant8AsymmSigned, 1.0, 0)
            );
        }
        assert_eq!(op_types(m), [OperationType::Maximum]);
        assert_eq!(m.output_info[0].dtype, DataType::I8);
    }

    #[test]
    fn uint8_arithmetic_wraps_through_int32() {
        let m = model(
            vec![node("Mul", &["a", "b"], &["y"], vec![])],
            vec![info("a", UINT8, &[4]), info("b", UINT8, &[4])],
            vec![info("y", UINT8, &[])],
            14,
        );
        let lowered = lower_bound(&m, &[]).unwrap();
        use OperationType as O;
        // x * y in int32, then y - 256 * floor(y / 256), then back to 8 bits.
        assert_eq!(
            op_types(&lowered.model),
            [O::Cast, O::Cast, O::Mul, O::Div, O::Mul, O::Sub, O::Cast]
        );
        // int8 adds 128 before the reduction and subtracts it after.
        let signed = |op: &str| {
            model(
                vec![node(op, &["a", "b"], &["y"], vec![])],
                vec![info("a", INT8, &[4]), info("b", INT8, &[4])],
                vec![info("y", INT8, &[])],
                14,
            )
        };
        let lowered = lower_bound(&signed("Sub"), &[]).unwrap();
        assert_eq!(
            op_types(&lowered.model),
            [
                O::Cast,
                O::Cast,
                O::Sub,
                O::Add,
                O::Div,
                O::Mul,
                O::Sub,
                O::Sub,
                O::Cast
            ]
        );
        // int8 Div truncates toward zero: MOD (fmod) removes the truncated remainder so
        // the NN set's floor division is exact, then the quotient wraps like the others.
        let lowered = lower_bound(&signed("Div"), &[]).unwrap();
        let ops = op_types(&lowered.model);
        assert_eq!(
            &ops[..5],
            [O::Cast, O::Cast, O::Mod, O::Sub, O::Div],
            "{ops:?}"
        );
        assert_eq!(ops.last(), Some(&O::Cast));
    }

    #[test]
    fn quantize_linear_rounds_half_to_even_before_quantize() {
        let m = model(
            vec![node("QuantizeLinear", &["x", "s", "z"], &["y"], vec![])],
            vec![
                info("x", FLOAT, &[6]),
                info("s", FLOAT, &[]),
                info("z", UINT8, &[]),
            ],
            vec![info("y", UINT8, &[])],
            21,
        );
        let lowered = lower_bound(&m, &[]).unwrap();
        let m = &lowered.model;
        use OperationType as O;
        assert_eq!(
            op_types(m),
            [O::Div, O::Add, O::Sub, O::Cast, O::Add, O::Quantize]
        );
        let q = only(m, O::Quantize);
        let out = &m.main.operands[q.outputs[0] as usize];
        assert_eq!(
            (out.operand_type, out.scale, out.zero_point),
            (OperandType::TensorQuant8Asymm, 1.0, 0)
        );
    }

    #[test]
    fn qlinear_matmul_reinterprets_its_operands_for_batch_matmul() {
        let scalar = |name: &str, dtype: i32, bytes: Vec<u8>| TensorProto {
            name: name.into(),
            data_type: dtype,
            raw_data: Some(bytes.into()),
            ..Default::default()
        };
        let inputs = ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"];
        let mut m = model(
            vec![node("QLinearMatMul", &inputs, &["y"], vec![])],
            vec![info("a", UINT8, &[2, 4]), info("b", UINT8, &[4, 3])],
            vec![info("y", UINT8, &[])],
            21,
        );
        // Scales and zero points as graph inputs: needed at compile time.
        let mut runtime = m.clone();
        let g = runtime.graph.as_mut().unwrap();
        for name in ["sa", "sb", "sy"] {
            g.input.push(info(name, FLOAT, &[]));
        }
        for name in ["za", "zb", "zy"] {
            g.input.push(info(name, UINT8, &[]));
        }
        let report = unsupported(lower_bound(&runtime, &[]));
        assert_eq!(
            report.only_needs_bound_inputs(),
            Some(
                ["sa", "sb", "sy", "za", "zb", "zy"]
                    .map(String::from)
                    .to_vec()
            )
        );
        // As initializers: one quantized BATCH_MATMUL between reinterpreting CASTs.
        let g = m.graph.as_mut().unwrap();
        for (name, value) in [("sa", 0.5f32), ("sb", 0.25), ("sy", 2.0)] {
            g.initializer
                .push(scalar(name, FLOAT, value.to_le_bytes().to_vec()));
        }
        for (name, value) in [("za", 3u8), ("zb", 7), ("zy", 9)] {
            g.initializer.push(scalar(name, UINT8, vec![value]));
        }
        let lowered = lower_bound(&m, &[]).unwrap();
        let m = &lowered.model;
        let mm = only(m, OperationType::BatchMatmul);
        let quant = |i: u32| {
            let o = &m.main.operands[i as usize];
            (o.operand_type, o.scale, o.zero_point)
        };
        let t = OperandType::TensorQuant8Asymm;
        assert_eq!(quant(mm.inputs[0]), (t, 0.5, 3));
        assert_eq!(quant(mm.inputs[1]), (t, 0.25, 7));
        assert_eq!(quant(mm.outputs[0]), (t, 2.0, 9));
        assert_eq!(quant(m.main.outputs[0]), (t, 1.0, 0));
        assert_eq!(m.output_info[0].dtype, DataType::U8);
    }
}

// ---- definitions before opset 7 -------------------------------------------------------

mod legacy {
    use nnc_formats::nn::OperationType as O;

    use super::binding::{FLOAT, info, int_attr, lower_bound, model, node};
    use super::only;

    /// Add-6 with broadcast=1, axis=1: B [3] lines up with A [2, 3, 4] at axis 1, so it
    /// becomes [3, 1] for numpy broadcasting; without `axis` it aligns from the end.
    #[test]
    fn legacy_broadcast_places_b_at_axis() {
        let add = |attrs| {
            model(
                vec![node("Add", &["a", "b"], &["y"], attrs)],
                vec![info("a", FLOAT, &[2, 3, 4]), info("b", FLOAT, &[3])],
                vec![info("y", FLOAT, &[2, 3, 4])],
                6,
            )
        };
        let lowered = lower_bound(
            &add(vec![int_attr("broadcast", 1), int_attr("axis", 1)]),
            &[],
        )
        .unwrap();
        let m = &lowered.model;
        let op = only(m, O::Add);
        assert_eq!(m.main.operands[op.inputs[1] as usize].dimensions, [3, 1]);
        assert_eq!(
            m.main.operands[op.outputs[0] as usize].dimensions,
            [2, 3, 4]
        );
        // B [4] without axis: the trailing alignment numpy broadcasting already does.
        let trailing = model(
            vec![node(
                "Mul",
                &["a", "b"],
                &["y"],
                vec![int_attr("broadcast", 1)],
            )],
            vec![info("a", FLOAT, &[2, 3, 4]), info("b", FLOAT, &[4])],
            vec![info("y", FLOAT, &[2, 3, 4])],
            6,
        );
        let lowered = lower_bound(&trailing, &[]).unwrap();
        let op = only(&lowered.model, O::Mul);
        assert_eq!(
            lowered.model.main.operands[op.inputs[1] as usize].dimensions,
            [4]
        );
    }

    /// PRelu-6: a 1-D slope is per channel (axis 1).
    #[test]
    fn prelu_6_slope_is_per_channel() {
        let m = model(
            vec![node("PRelu", &["x", "slope"], &["y"], vec![])],
            vec![info("x", FLOAT, &[1, 3, 2, 2]), info("slope", FLOAT, &[3])],
            vec![info("y", FLOAT, &[1, 3, 2, 2])],
            6,
        );
        let lowered = lower_bound(&m, &[]).unwrap();
        let op = only(&lowered.model, O::Prelu);
        assert_eq!(
            lowered.model.main.operands[op.inputs[1] as usize].dimensions,
            [3, 1, 1]
        );
    }
}
