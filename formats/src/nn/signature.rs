//! One definition per operation of what it accepts and what it produces.
//!
//! [`infer`] checks an operation's signature (operand count, operand types, parameter
//! values and ranges, shape compatibility) and computes the type and dimensions of its
//! outputs. The same function serves three callers, so they can never disagree:
//! the validator (declared outputs must match), the compiler's shape inference while
//! lowering, and the runtime, which calls it with the actual input shapes and values to
//! size outputs whose dimensions were unknown at compile time.
//!
//! Dimensions follow NNAPI: `0` is unknown, and a tensor with no dimensions has unknown
//! rank. Inference propagates unknowns; it fails only when the known facts contradict.

use super::model::Operand;
use super::types::{
    FusedActivation, HalVersion, Lifetime, OperandType, OperationType, PaddingScheme,
    ScatterReduction,
};

/// One input as seen by signature checking: its operand and, when known, its value
/// bytes (constants at compile time; every input at run time).
#[derive(Clone, Copy, Debug)]
pub struct InputView<'a> {
    pub operand: &'a Operand,
    pub value: Option<&'a [u8]>,
}

/// The inferred type and dimensions of one output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputShape {
    pub operand_type: OperandType,
    pub dimensions: Vec<u32>,
}

/// Why an operation's signature does not hold.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SignatureError {
    #[error("takes {expected} inputs, got {actual}")]
    InputCount { expected: String, actual: usize },
    #[error("produces {expected} outputs, got {actual}")]
    OutputCount { expected: String, actual: usize },
    #[error("input {index} ({role}) must be {expected}, got {actual}")]
    InputType {
        index: usize,
        role: &'static str,
        expected: String,
        actual: OperandType,
    },
    #[error("output {index} must be {expected}, got {actual}")]
    OutputType {
        index: usize,
        expected: String,
        actual: OperandType,
    },
    #[error("input {index} ({role}) must be a constant known at compile time")]
    NotConstant { index: usize, role: &'static str },
    #[error("input {index} ({role}) {message}")]
    Parameter {
        index: usize,
        role: &'static str,
        message: String,
    },
    #[error("{0}")]
    Shape(String),
    #[error("{0} is not supported by nnc's signature checks")]
    Unsupported(OperationType),
    /// A control-flow operation and the subgraphs it references disagree (counts, types,
    /// a missing subgraph); the message names the subgraph.
    #[error("{0}")]
    ControlFlow(String),
}

type Result<T> = std::result::Result<T, SignatureError>;

const FLOAT: &[OperandType] = &[OperandType::TensorFloat32, OperandType::TensorFloat16];
const FLOAT_QUANT: &[OperandType] = &[
    OperandType::TensorFloat32,
    OperandType::TensorFloat16,
    OperandType::TensorQuant8Asymm,
    OperandType::TensorQuant8AsymmSigned,
];
const FLOAT_QUANT_INT: &[OperandType] = &[
    OperandType::TensorFloat32,
    OperandType::TensorFloat16,
    OperandType::TensorQuant8Asymm,
    OperandType::TensorQuant8AsymmSigned,
    OperandType::TensorInt32,
];
const FLOAT_INT: &[OperandType] = &[
    OperandType::TensorFloat32,
    OperandType::TensorFloat16,
    OperandType::TensorInt32,
];
/// Types that data-movement operations (reshape, transpose, gather, ...) accept.
const ANY_DATA: &[OperandType] = &[
    OperandType::TensorFloat32,
    OperandType::TensorFloat16,
    OperandType::TensorQuant8Asymm,
    OperandType::TensorQuant8AsymmSigned,
    OperandType::TensorInt32,
    OperandType::TensorBool8,
    OperandType::TensorQuant16Symm,
    OperandType::TensorQuant16Asymm,
];
const QUANT8: &[OperandType] = &[
    OperandType::TensorQuant8Asymm,
    OperandType::TensorQuant8AsymmSigned,
];
const INT_VECTOR: &[OperandType] = &[OperandType::TensorInt32];

fn type_list(types: &[OperandType]) -> String {
    types
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(" or ")
}

/// Accessors over an operation's inputs that turn every mismatch into a named error.
struct Ctx<'a> {
    inputs: &'a [InputView<'a>],
}

impl<'a> Ctx<'a> {
    fn count(&self, allowed: &[usize]) -> Result<()> {
        if allowed.contains(&self.inputs.len()) {
            Ok(())
        } else {
            let expected = allowed
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" or ");
            Err(SignatureError::InputCount {
                expected,
                actual: self.inputs.len(),
            })
        }
    }

    fn at_least(&self, n: usize) -> Result<()> {
        if self.inputs.len() >= n {
            Ok(())
        } else {
            Err(SignatureError::InputCount {
                expected: format!("at least {n}"),
                actual: self.inputs.len(),
            })
        }
    }

    fn operand(&self, index: usize) -> &'a Operand {
        self.inputs[index].operand
    }

    fn present(&self, index: usize) -> bool {
        self.inputs
            .get(index)
            .is_some_and(|v| v.operand.lifetime != Lifetime::NoValue)
    }

    fn tensor(
        &self,
        index: usize,
        role: &'static str,
        types: &[OperandType],
    ) -> Result<&'a Operand> {
        let operand = self.operand(index);
        if !types.contains(&operand.operand_type) {
            return Err(SignatureError::InputType {
                index,
                role,
                expected: type_list(types),
                actual: operand.operand_type,
            });
        }
        if operand.lifetime == Lifetime::NoValue {
            return Err(SignatureError::Parameter {
                index,
                role,
                message: "is required but has no value".into(),
            });
        }
        Ok(operand)
    }

    /// A tensor input of exactly the given type (the type of another input, usually).
    fn same_type(&self, index: usize, role: &'static str, t: OperandType) -> Result<&'a Operand> {
        self.tensor(index, role, &[t])
    }

    fn scalar_bytes(
        &self,
        index: usize,
        role: &'static str,
        t: OperandType,
        len: usize,
    ) -> Result<&'a [u8]> {
        let view = &self.inputs[index];
        if view.operand.operand_type != t {
            return Err(SignatureError::InputType {
                index,
                role,
                expected: t.name().to_string(),
                actual: view.operand.operand_type,
            });
        }
        let bytes = view
            .value
            .ok_or(SignatureError::NotConstant { index, role })?;
        if bytes.len() != len {
            return Err(SignatureError::Parameter {
                index,
                role,
                message: format!("holds {} bytes, a scalar needs {len}", bytes.len()),
            });
        }
        Ok(bytes)
    }

    fn i32(&self, index: usize, role: &'static str) -> Result<i32> {
        let b = self.scalar_bytes(index, role, OperandType::Int32, 4)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn i32_at_least(&self, index: usize, role: &'static str, min: i32) -> Result<i32> {
        let v = self.i32(index, role)?;
        if v < min {
            return Err(SignatureError::Parameter {
                index,
                role,
                message: format!("must be >= {min}, got {v}"),
            });
        }
        Ok(v)
    }

    /// A FLOAT32 scalar (FLOAT16 when the operation computes in float16).
    fn f32(&self, index: usize, role: &'static str) -> Result<f32> {
        let t = self.operand(index).operand_type;
        if t == OperandType::Float16 {
            let b = self.scalar_bytes(index, role, OperandType::Float16, 2)?;
            return Ok(f16_to_f32(u16::from_le_bytes([b[0], b[1]])));
        }
        let b = self.scalar_bytes(index, role, OperandType::Float32, 4)?;
        Ok(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bool(&self, index: usize, role: &'static str) -> Result<bool> {
        let b = self.scalar_bytes(index, role, OperandType::Bool, 1)?;
        Ok(b[0] != 0)
    }

    /// An optional trailing BOOL input (absent or NO_VALUE means `false`).
    fn optional_bool(&self, index: usize, role: &'static str) -> Result<bool> {
        if self.present(index) {
            self.bool(index, role)
        } else {
            Ok(false)
        }
    }

    fn activation(&self, index: usize) -> Result<FusedActivation> {
        let code = self.i32(index, "fused_activation")?;
        FusedActivation::from_code(code).ok_or(SignatureError::Parameter {
            index,
            role: "fused_activation",
            message: format!("must be 0 (NONE), 1 (RELU), 2 (RELU1) or 3 (RELU6), got {code}"),
        })
    }

    /// A 1-D TENSOR_INT32 input; its values when known.
    fn i32_vector(&self, index: usize, role: &'static str) -> Result<Option<Vec<i32>>> {
        let operand = self.tensor(index, role, INT_VECTOR)?;
        if !operand.dimensions.is_empty() && operand.dimensions.len() != 1 {
            return Err(SignatureError::Parameter {
                index,
                role,
                message: format!("must be 1-D, got rank {}", operand.dimensions.len()),
            });
        }
        Ok(self.inputs[index].value.map(decode_i32s))
    }

    /// A TENSOR_INT32 input whose values must be known.
    fn i32_values(&self, index: usize, role: &'static str) -> Result<Vec<i32>> {
        let operand = self.tensor(index, role, INT_VECTOR)?;
        let _ = operand;
        self.inputs[index]
            .value
            .map(decode_i32s)
            .ok_or(SignatureError::NotConstant { index, role })
    }
}

fn decode_i32s(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// IEEE binary16 bits to f32 (FLOAT16 scalar parameters).
pub fn f16_to_f32(h: u16) -> f32 {
    half::f16::from_bits(h).to_f32()
}

/// The highest rank an operand may have (the `.nnc` format stores ranks in one byte).
pub const MAX_RANK: usize = 255;

/// `rank` unknown dimensions, for an output whose rank is the length of a run-time shape
/// vector: refused beyond [`MAX_RANK`] before anything is allocated.
fn unknown_dims(rank: u32) -> Result<Vec<u32>> {
    if rank as usize > MAX_RANK {
        return Err(shape_err(format!(
            "the output would have rank {rank}, above the highest rank {MAX_RANK}"
        )));
    }
    Ok(vec![0; rank as usize])
}

fn shape_err(message: impl Into<String>) -> SignatureError {
    SignatureError::Shape(message.into())
}

fn param_err(index: usize, role: &'static str, message: impl Into<String>) -> SignatureError {
    SignatureError::Parameter {
        index,
        role,
        message: message.into(),
    }
}

/// Rank of a tensor, or `None` when unknown.
fn rank(operand: &Operand) -> Option<usize> {
    (!operand.dimensions.is_empty()).then_some(operand.dimensions.len())
}

fn require_rank(
    operand: &Operand,
    index: usize,
    role: &'static str,
    allowed: std::ops::RangeInclusive<usize>,
) -> Result<()> {
    match rank(operand) {
        Some(r) if !allowed.contains(&r) => Err(param_err(
            index,
            role,
            format!(
                "must have rank {}..={}, got {r}",
                allowed.start(),
                allowed.end()
            ),
        )),
        _ => Ok(()),
    }
}

/// Normalizes a possibly negative axis against `rank`.
fn axis_in(axis: i32, rank: usize, index: usize, role: &'static str) -> Result<usize> {
    let r = rank as i64;
    let a = i64::from(axis);
    if a < -r || a >= r {
        return Err(param_err(
            index,
            role,
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

/// The data, indices and updates of SCATTER_ELEMENTS and SCATTER_ND: updates of the
/// input's type (and, when quantized, its scale and zero point, since updates are stored
/// as they are).
fn scatter_operands<'a>(ctx: &Ctx<'a>) -> Result<(&'a Operand, &'a Operand, &'a Operand)> {
    let input = ctx.tensor(0, "input", ANY_DATA)?;
    let indices = ctx.tensor(1, "indices", INT_VECTOR)?;
    let updates = ctx.same_type(2, "updates", input.operand_type)?;
    if QUANT8.contains(&input.operand_type)
        && (updates.scale != input.scale || updates.zero_point != input.zero_point)
    {
        return Err(param_err(
            2,
            "updates",
            "must have the input's scale and zero point",
        ));
    }
    Ok((input, indices, updates))
}

/// The `reduction` code of a scatter: reductions other than none need numbers.
fn scatter_reduction(ctx: &Ctx, index: usize, input: &Operand) -> Result<ScatterReduction> {
    let code = ctx.i32(index, "reduction")?;
    let reduction = ScatterReduction::from_code(code)
        .ok_or_else(|| param_err(index, "reduction", format!("unknown reduction code {code}")))?;
    if reduction != ScatterReduction::None
        && !matches!(
            input.operand_type,
            OperandType::TensorFloat32 | OperandType::TensorInt32
        )
    {
        return Err(param_err(
            index,
            "reduction",
            format!(
                "{reduction:?} needs TENSOR_FLOAT32 or TENSOR_INT32 data, got {}",
                input.operand_type
            ),
        ));
    }
    Ok(reduction)
}

/// Two dimensions that must agree; unknown matches anything.
fn merge_dim(a: u32, b: u32, what: &str) -> Result<u32> {
    match (a, b) {
        (0, x) | (x, 0) => Ok(x),
        (x, y) if x == y => Ok(x),
        (x, y) => Err(shape_err(format!("{what}: {x} != {y}"))),
    }
}

/// NumPy-style broadcast of two shapes (unknown rank yields unknown rank).
pub fn broadcast_dims(a: &[u32], b: &[u32]) -> std::result::Result<Vec<u32>, String> {
    if a.is_empty() || b.is_empty() {
        return Ok(Vec::new());
    }
    let n = a.len().max(b.len());
    let mut out = vec![0u32; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (1, d) | (d, 1) => d,
            (0, d) | (d, 0) => d,
            (x, y) if x == y => x,
            (x, y) => {
                return Err(format!(
                    "shapes {} and {} do not broadcast (dimension {x} vs {y})",
                    super::model::dims_to_string(a),
                    super::model::dims_to_string(b)
                ));
            }
        };
    }
    Ok(out)
}

/// Output size of a convolution or pool along one spatial axis with explicit padding.
fn conv_out(
    input: u32,
    kernel: u32,
    stride: u32,
    dilation: u32,
    pad_a: u32,
    pad_b: u32,
) -> Result<u32> {
    if input == 0 {
        return Ok(0);
    }
    let effective = (u64::from(kernel) - 1) * u64::from(dilation) + 1;
    let padded = u64::from(input) + u64::from(pad_a) + u64::from(pad_b);
    if padded < effective {
        return Err(shape_err(format!(
            "kernel extent {effective} exceeds padded input extent {padded}"
        )));
    }
    u32::try_from((padded - effective) / u64::from(stride) + 1)
        .map_err(|_| shape_err("output extent overflows"))
}

/// Output size with an implicit padding scheme.
fn conv_out_implicit(
    input: u32,
    kernel: u32,
    stride: u32,
    dilation: u32,
    scheme: PaddingScheme,
) -> Result<u32> {
    if input == 0 {
        return Ok(0);
    }
    let effective = (u64::from(kernel) - 1) * u64::from(dilation) + 1;
    let s = u64::from(stride);
    let i = u64::from(input);
    let out = match scheme {
        PaddingScheme::Same => i.div_ceil(s),
        PaddingScheme::Valid => {
            if i < effective {
                return Err(shape_err(format!(
                    "kernel extent {effective} exceeds input extent {i}"
                )));
            }
            (i - effective + 1).div_ceil(s)
        }
    };
    u32::try_from(out).map_err(|_| shape_err("output extent overflows"))
}

/// The explicit padding `(before, after)` that an implicit scheme means for one axis.
pub fn implicit_padding(
    input: u32,
    kernel: u32,
    stride: u32,
    dilation: u32,
    scheme: PaddingScheme,
) -> (u32, u32) {
    match scheme {
        PaddingScheme::Valid => (0, 0),
        PaddingScheme::Same => {
            let effective = (i64::from(kernel) - 1) * i64::from(dilation) + 1;
            let out = (i64::from(input) + i64::from(stride) - 1) / i64::from(stride.max(1));
            let needed = ((out - 1) * i64::from(stride) + effective - i64::from(input)).max(0);
            let before = needed / 2;
            (before as u32, (needed - before) as u32)
        }
    }
}

fn scheme(ctx: &Ctx, index: usize) -> Result<PaddingScheme> {
    let code = ctx.i32(index, "padding_scheme")?;
    PaddingScheme::from_code(code).ok_or(param_err(
        index,
        "padding_scheme",
        format!("must be 1 (SAME) or 2 (VALID), got {code}"),
    ))
}

/// Spatial geometry of a 2-D window operation after decoding its parameters.
struct Window {
    kernel: (u32, u32),
    stride: (u32, u32),
    dilation: (u32, u32),
    padding: Padding2d,
    nchw: bool,
}

enum Padding2d {
    Explicit {
        left: u32,
        right: u32,
        top: u32,
        bottom: u32,
    },
    Implicit(PaddingScheme),
}

/// Splits an NHWC/NCHW 4-D shape into (batch, height, width, channels).
fn split_nhwc(dims: &[u32], nchw: bool) -> (u32, u32, u32, u32) {
    if nchw {
        (dims[0], dims[2], dims[3], dims[1])
    } else {
        (dims[0], dims[1], dims[2], dims[3])
    }
}

fn join_nhwc(n: u32, h: u32, w: u32, c: u32, nchw: bool) -> Vec<u32> {
    if nchw {
        vec![n, c, h, w]
    } else {
        vec![n, h, w, c]
    }
}

fn window_output(window: &Window, input: &Operand, out_channels: u32) -> Result<Vec<u32>> {
    if rank(input).is_none() {
        return Ok(Vec::new());
    }
    let (n, h, w, _) = split_nhwc(&input.dimensions, window.nchw);
    let (kw, kh) = window.kernel;
    let (sw, sh) = window.stride;
    let (dw, dh) = window.dilation;
    let (oh, ow) = match window.padding {
        Padding2d::Explicit {
            left,
            right,
            top,
            bottom,
        } => (
            conv_out(h, kh, sh, dh, top, bottom)?,
            conv_out(w, kw, sw, dw, left, right)?,
        ),
        Padding2d::Implicit(s) => (
            conv_out_implicit(h, kh, sh, dh, s)?,
            conv_out_implicit(w, kw, sw, dw, s)?,
        ),
    };
    Ok(join_nhwc(n, oh, ow, out_channels, window.nchw))
}

/// Reads padding (explicit four values or an implicit scheme) followed by strides.
/// Returns the padding and the index after the strides.
fn read_padding_and_strides(
    ctx: &Ctx,
    first: usize,
    explicit: bool,
) -> Result<(Padding2d, (u32, u32), usize)> {
    let (padding, next) = if explicit {
        let mut v = [0u32; 4];
        for (k, role) in ["pad_left", "pad_right", "pad_top", "pad_bottom"]
            .into_iter()
            .enumerate()
        {
            v[k] = ctx.i32_at_least(first + k, role, 0)? as u32;
        }
        (
            Padding2d::Explicit {
                left: v[0],
                right: v[1],
                top: v[2],
                bottom: v[3],
            },
            first + 4,
        )
    } else {
        (Padding2d::Implicit(scheme(ctx, first)?), first + 1)
    };
    let sw = ctx.i32_at_least(next, "stride_width", 1)? as u32;
    let sh = ctx.i32_at_least(next + 1, "stride_height", 1)? as u32;
    Ok((padding, (sw, sh), next + 2))
}

/// The [1, 4, 4] TENSOR_FLOAT32 transformation matrix of the MediaPipe extension
/// operations.
fn transform_matrix<'a>(ctx: &Ctx<'a>, index: usize) -> Result<&'a Operand> {
    let m = ctx.tensor(index, "matrix", &[OperandType::TensorFloat32])?;
    if rank(m).is_some() {
        let d = &m.dimensions;
        let ok = d.len() == 3 && [1, 4, 4].iter().zip(d).all(|(&e, &a)| a == 0 || a == e);
        if !ok {
            return Err(param_err(
                index,
                "matrix",
                format!("must have dimensions [1, 4, 4], got {d:?}"),
            ));
        }
    }
    Ok(m)
}

/// Checks and infers the outputs of one operation.
///
/// `outputs` are the operands the operation declares it writes; their count is checked,
/// and operations whose output type is chosen by the model (CAST, QUANTIZE, DEQUANTIZE)
/// take it from them.
pub fn infer(
    op: OperationType,
    inputs: &[InputView],
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    let shapes = infer_outputs(op, inputs, outputs)?;
    check_kept_quantization(op, inputs, outputs)?;
    Ok(shapes)
}

/// Operations that move 8-bit quantized values without rescaling them: NNAPI requires
/// their outputs to keep the data input's scale and zero point.
fn check_kept_quantization(
    op: OperationType,
    inputs: &[InputView],
    outputs: &[&Operand],
) -> Result<()> {
    use OperationType as O;
    let data = match op {
        O::Reshape
        | O::Squeeze
        | O::ExpandDims
        | O::Transpose
        | O::Slice
        | O::StridedSlice
        | O::Gather
        | O::GatherElements
        | O::GatherNd
        | O::ScatterElements
        | O::ScatterNd
        | O::Split
        | O::Tile
        | O::Reverse
        | O::DepthToSpace
        | O::SpaceToDepth
        | O::ChannelShuffle
        | O::BatchToSpaceNd
        | O::SpaceToBatchNd
        | O::Pad
        | O::PadV2
        | O::MirrorPad => 0,
        O::Pack => 1,
        _ => return Ok(()),
    };
    let Some(input) = inputs.get(data).map(|v| v.operand) else {
        return Ok(());
    };
    if !QUANT8.contains(&input.operand_type) {
        return Ok(());
    }
    for (k, out) in outputs.iter().enumerate() {
        // A zero scale is an unset template (the validator rejects it on its own).
        if out.operand_type == input.operand_type
            && out.scale != 0.0
            && (out.scale != input.scale || out.zero_point != input.zero_point)
        {
            return Err(shape_err(format!(
                "output {k} must keep the input's scale {} and zero point {}, got {} and {}",
                input.scale, input.zero_point, out.scale, out.zero_point
            )));
        }
    }
    Ok(())
}

fn infer_outputs(
    op: OperationType,
    inputs: &[InputView],
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    let ctx = Ctx { inputs };
    let single = |t: OperandType, dims: Vec<u32>| -> Result<Vec<OutputShape>> {
        Ok(vec![OutputShape {
            operand_type: t,
            dimensions: dims,
        }])
    };
    let expect_outputs = |n: usize| -> Result<()> {
        if outputs.len() == n {
            Ok(())
        } else {
            Err(SignatureError::OutputCount {
                expected: n.to_string(),
                actual: outputs.len(),
            })
        }
    };
    use OperationType as O;
    match op {
        O::Add | O::Sub | O::Mul | O::Div => {
            ctx.count(&[3])?;
            expect_outputs(1)?;
            let allowed = if op == O::Div {
                FLOAT_INT
            } else {
                FLOAT_QUANT_INT
            };
            let a = ctx.tensor(0, "input0", allowed)?;
            let b = ctx.same_type(1, "input1", a.operand_type)?;
            ctx.activation(2)?;
            let dims =
                broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
            single(a.operand_type, dims)
        }
        O::Maximum | O::Minimum | O::Pow | O::Prelu => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let allowed = match op {
                O::Pow => FLOAT,
                O::Prelu => FLOAT_QUANT,
                _ => FLOAT_QUANT_INT,
            };
            let a = ctx.tensor(0, "input0", allowed)?;
            let b = ctx.same_type(
                1,
                if op == O::Prelu { "alpha" } else { "input1" },
                a.operand_type,
            )?;
            let dims =
                broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
            single(a.operand_type, dims)
        }
        O::Equal | O::NotEqual | O::Less | O::LessEqual | O::Greater | O::GreaterEqual => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let mut allowed = FLOAT_QUANT_INT.to_vec();
            allowed.push(OperandType::TensorBool8);
            let a = ctx.tensor(0, "input0", &allowed)?;
            let b = ctx.same_type(1, "input1", a.operand_type)?;
            let dims =
                broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
            single(OperandType::TensorBool8, dims)
        }
        O::LogicalAnd | O::LogicalOr => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let a = ctx.tensor(0, "input0", &[OperandType::TensorBool8])?;
            let b = ctx.tensor(1, "input1", &[OperandType::TensorBool8])?;
            let dims =
                broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
            single(OperandType::TensorBool8, dims)
        }
        O::LogicalNot => {
            ctx.count(&[1])?;
            expect_outputs(1)?;
            let a = ctx.tensor(0, "input", &[OperandType::TensorBool8])?;
            single(a.operand_type, a.dimensions.clone())
        }
        O::Abs | O::Neg => {
            ctx.count(&[1])?;
            expect_outputs(1)?;
            let a = ctx.tensor(0, "input", FLOAT_INT)?;
            single(a.operand_type, a.dimensions.clone())
        }
        O::Exp | O::Log | O::Sqrt | O::Rsqrt | O::Sin | O::Floor => {
            ctx.count(&[1])?;
            expect_outputs(1)?;
            let a = ctx.tensor(0, "input", FLOAT)?;
            single(a.operand_type, a.dimensions.clone())
        }
        O::Logistic | O::Tanh | O::Relu | O::Relu1 | O::Relu6 | O::HardSwish => {
            ctx.count(&[1])?;
            expect_outputs(1)?;
            let a = ctx.tensor(0, "input", FLOAT_QUANT)?;
            single(a.operand_type, a.dimensions.clone())
        }
        O::Elu => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let a = ctx.tensor(0, "input", FLOAT)?;
            ctx.f32(1, "alpha")?;
            single(a.operand_type, a.dimensions.clone())
        }
        O::Cast => {
            ctx.count(&[1])?;
            expect_outputs(1)?;
            let a = ctx
                .tensor(0, "input", FLOAT_QUANT_INT)
                .or_else(|_| ctx.tensor(0, "input", &[OperandType::TensorBool8]))?;
            let out = outputs[0].operand_type;
            if !FLOAT_QUANT_INT.contains(&out) && out != OperandType::TensorBool8 {
                return Err(SignatureError::OutputType {
                    index: 0,
                    expected: "a float, quantized, int32 or bool8 tensor".into(),
                    actual: out,
                });
            }
            single(out, a.dimensions.clone())
        }
        O::Quantize => {
            ctx.count(&[1])?;
            expect_outputs(1)?;
            // Float inputs (NNAPI), or 8-bit ones: a requantization (TFLite's QUANTIZE).
            let a = ctx.tensor(0, "input", FLOAT_QUANT)?;
            let out = outputs[0].operand_type;
            if !QUANT8.contains(&out) {
                return Err(SignatureError::OutputType {
                    index: 0,
                    expected: type_list(QUANT8),
                    actual: out,
                });
            }
            single(out, a.dimensions.clone())
        }
        O::Dequantize => {
            ctx.count(&[1])?;
            expect_outputs(1)?;
            let a = ctx.tensor(
                0,
                "input",
                &[
                    OperandType::TensorQuant8Asymm,
                    OperandType::TensorQuant8AsymmSigned,
                    OperandType::TensorQuant8Symm,
                    OperandType::TensorQuant8SymmPerChannel,
                ],
            )?;
            let out = outputs[0].operand_type;
            if !FLOAT.contains(&out) {
                return Err(SignatureError::OutputType {
                    index: 0,
                    expected: type_list(FLOAT),
                    actual: out,
                });
            }
            single(out, a.dimensions.clone())
        }
        O::Select => {
            ctx.count(&[3])?;
            expect_outputs(1)?;
            let c = ctx.tensor(0, "condition", &[OperandType::TensorBool8])?;
            let a = ctx.tensor(1, "input_true", ANY_DATA)?;
            let b = ctx.same_type(2, "input_false", a.operand_type)?;
            let dims =
                broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
            let dims = broadcast_dims(&c.dimensions, &dims).map_err(SignatureError::Shape)?;
            single(a.operand_type, dims)
        }
        O::Conv2d | O::DepthwiseConv2d | O::GroupedConv2d => infer_conv(op, &ctx, outputs.len()),
        O::TransposeConv2d => infer_transpose_conv(&ctx, outputs.len()),
        O::AveragePool2d | O::MaxPool2d | O::L2Pool2d => {
            expect_outputs(1)?;
            ctx.count(&[7, 8, 10, 11])?;
            let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
            require_rank(input, 0, "input", 4..=4)?;
            let explicit = ctx.inputs.len() >= 10;
            let (padding, stride, next) = read_padding_and_strides(&ctx, 1, explicit)?;
            let fw = ctx.i32_at_least(next, "filter_width", 1)? as u32;
            let fh = ctx.i32_at_least(next + 1, "filter_height", 1)? as u32;
            ctx.activation(next + 2)?;
            let nchw = ctx.optional_bool(next + 3, "layout")?;
            let window = Window {
                kernel: (fw, fh),
                stride,
                dilation: (1, 1),
                padding,
                nchw,
            };
            let channels = if rank(input).is_some() {
                split_nhwc(&input.dimensions, nchw).3
            } else {
                0
            };
            single(input.operand_type, window_output(&window, input, channels)?)
        }
        O::FullyConnected => {
            ctx.count(&[4])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
            // Quantized inputs take 8-bit weights, per-tensor or per output unit
            // (TENSOR_QUANT8_SYMM_PER_CHANNEL along dimension 0, as TFLite allows).
            let weight_types: &[OperandType] = if QUANT8.contains(&input.operand_type) {
                &[
                    OperandType::TensorQuant8Asymm,
                    OperandType::TensorQuant8AsymmSigned,
                    OperandType::TensorQuant8SymmPerChannel,
                ]
            } else {
                &[input.operand_type]
            };
            let weights = ctx.tensor(1, "weights", weight_types)?;
            if let Some(q) = &weights.channel_quant
                && q.channel_dim != 0
            {
                return Err(param_err(
                    1,
                    "weights",
                    format!(
                        "per-channel quantization must be along dimension 0, got {}",
                        q.channel_dim
                    ),
                ));
            }
            require_rank(weights, 1, "weights", 2..=2)?;
            require_rank(input, 0, "input", 2..=usize::MAX)?;
            let bias_type = if QUANT8.contains(&input.operand_type) {
                OperandType::TensorInt32
            } else {
                input.operand_type
            };
            let bias = if ctx.present(2) {
                Some(ctx.tensor(2, "bias", &[bias_type])?)
            } else {
                None
            };
            ctx.activation(3)?;
            let (units, k) = match rank(weights) {
                Some(2) => (weights.dimensions[0], weights.dimensions[1]),
                _ => (0, 0),
            };
            if let Some(b) = bias
                && let Some(&bu) = b.dimensions.first()
            {
                merge_dim(bu, units, "bias length vs weight rows")?;
            }
            let batch = match input.element_count() {
                Some(n) if k != 0 => {
                    if n % u64::from(k) != 0 {
                        return Err(shape_err(format!(
                            "input of {n} elements is not a whole number of rows of {k}"
                        )));
                    }
                    u32::try_from(n / u64::from(k)).map_err(|_| shape_err("batch overflows"))?
                }
                _ => 0,
            };
            single(input.operand_type, vec![batch, units])
        }
        O::BatchMatmul => {
            ctx.count(&[4])?;
            expect_outputs(1)?;
            let a = ctx.tensor(0, "lhs", FLOAT_QUANT_INT)?;
            let b = ctx.same_type(1, "rhs", a.operand_type)?;
            let adj_a = ctx.bool(2, "adjoint_lhs")?;
            let adj_b = ctx.bool(3, "adjoint_rhs")?;
            require_rank(a, 0, "lhs", 2..=4)?;
            require_rank(b, 1, "rhs", 2..=4)?;
            match (rank(a), rank(b)) {
                (Some(ra), Some(rb)) => {
                    if ra != rb {
                        return Err(shape_err(format!(
                            "lhs rank {ra} differs from rhs rank {rb}"
                        )));
                    }
                    let (da, db) = (&a.dimensions, &b.dimensions);
                    let mut out = Vec::with_capacity(ra);
                    for i in 0..ra - 2 {
                        out.push(merge_dim(da[i], db[i], "batch dimensions")?);
                    }
                    let (m, ka) = if adj_a {
                        (da[ra - 1], da[ra - 2])
                    } else {
                        (da[ra - 2], da[ra - 1])
                    };
                    let (kb, n) = if adj_b {
                        (db[rb - 1], db[rb - 2])
                    } else {
                        (db[rb - 2], db[rb - 1])
                    };
                    merge_dim(ka, kb, "inner dimensions")?;
                    out.push(m);
                    out.push(n);
                    single(a.operand_type, out)
                }
                _ => single(a.operand_type, Vec::new()),
            }
        }
        O::Concatenation => {
            ctx.at_least(2)?;
            expect_outputs(1)?;
            let n = ctx.inputs.len() - 1;
            let first = ctx.tensor(0, "input0", ANY_DATA)?;
            let mut tensors = vec![first];
            for i in 1..n {
                tensors.push(ctx.same_type(i, "input", first.operand_type)?);
            }
            let axis = ctx.i32(n, "axis")?;
            let Some(r) = tensors.iter().find_map(|t| rank(t)) else {
                return single(first.operand_type, Vec::new());
            };
            let axis = axis_in(axis, r, n, "axis")?;
            let mut out = vec![0u32; r];
            let mut total: Option<u64> = Some(0);
            for t in &tensors {
                let Some(tr) = rank(t) else {
                    total = None;
                    continue;
                };
                if tr != r {
                    return Err(shape_err(format!("inputs have ranks {r} and {tr}")));
                }
                for (d, (slot, &v)) in out.iter_mut().zip(&t.dimensions).enumerate() {
                    if d == axis {
                        total = if v == 0 {
                            None
                        } else {
                            total.map(|s| s + u64::from(v))
                        };
                    } else {
                        *slot = merge_dim(*slot, v, "non-axis dimensions")?;
                    }
                }
            }
            out[axis] = match total {
                Some(t) => {
                    u32::try_from(t).map_err(|_| shape_err("concatenated extent overflows"))?
                }
                None => 0,
            };
            single(first.operand_type, out)
        }
        O::Reshape => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            let shape_operand = ctx.tensor(1, "shape", INT_VECTOR)?;
            let Some(shape) = ctx.i32_vector(1, "shape")? else {
                let r = shape_operand.dimensions.first().copied().unwrap_or(0);
                return single(input.operand_type, unknown_dims(r)?);
            };
            single(input.operand_type, reshape_dims(input, &shape)?)
        }
        O::Transpose => {
            ctx.count(&[1, 2])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            let Some(r) = rank(input) else {
                return single(input.operand_type, Vec::new());
            };
            let perm: Vec<i32> = if ctx.present(1) {
                ctx.i32_values(1, "perm")?
            } else {
                (0..r as i32).rev().collect()
            };
            check_permutation(&perm, r, 1)?;
            let dims = perm.iter().map(|&p| input.dimensions[p as usize]).collect();
            single(input.operand_type, dims)
        }
        O::Squeeze => {
            ctx.count(&[1, 2])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            let Some(r) = rank(input) else {
                return single(input.operand_type, Vec::new());
            };
            let dims = &input.dimensions;
            let mut drop = vec![false; r];
            if ctx.present(1) && ctx.i32_vector(1, "squeeze_dims")?.is_none() {
                // squeeze_dims computed at run time: the rank of the result is unknown
                // (repeated entries count once).
                return single(input.operand_type, Vec::new());
            }
            if ctx.present(1) {
                for a in ctx.i32_values(1, "squeeze_dims")? {
                    let a = axis_in(a, r, 1, "squeeze_dims")?;
                    if dims[a] != 1 && dims[a] != 0 {
                        return Err(param_err(
                            1,
                            "squeeze_dims",
                            format!("dimension {a} has size {}, not 1", dims[a]),
                        ));
                    }
                    drop[a] = true;
                }
            } else {
                for (d, flag) in dims.iter().zip(drop.iter_mut()) {
                    if *d == 0 {
                        return Err(shape_err(
                            "cannot squeeze all unit dimensions of a shape with unknown dimensions",
                        ));
                    }
                    *flag = *d == 1;
                }
            }
            let out: Vec<u32> = dims
                .iter()
                .zip(&drop)
                .filter(|(_, d)| !**d)
                .map(|(v, _)| *v)
                .collect();
            // A rank-0 result is represented as a one-element vector.
            single(
                input.operand_type,
                if out.is_empty() { vec![1] } else { out },
            )
        }
        O::ExpandDims => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            let axis = ctx.i32(1, "axis")?;
            let Some(r) = rank(input) else {
                return single(input.operand_type, Vec::new());
            };
            let a = axis_in(axis, r + 1, 1, "axis")?;
            let mut dims = input.dimensions.clone();
            dims.insert(a, 1);
            single(input.operand_type, dims)
        }
        O::Pad | O::PadV2 | O::MirrorPad => {
            ctx.count(if op == O::Pad { &[2] } else { &[3] })?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            // paddings is a [rank, 2] tensor: constant, or computed at run time.
            let pads = if ctx.inputs[1].value.is_some() {
                Some(ctx.i32_values(1, "paddings")?)
            } else {
                ctx.tensor(1, "paddings", INT_VECTOR)?;
                None
            };
            match op {
                O::PadV2 => {
                    let t = ctx.operand(2).operand_type;
                    if input.operand_type.is_quantized()
                        || input.operand_type == OperandType::TensorInt32
                    {
                        ctx.i32(2, "pad_value")?;
                    } else if t == OperandType::Float16 || t == OperandType::Float32 {
                        ctx.f32(2, "pad_value")?;
                    } else {
                        return Err(SignatureError::InputType {
                            index: 2,
                            role: "pad_value",
                            expected: "a scalar of the input's element type".into(),
                            actual: t,
                        });
                    }
                }
                O::MirrorPad => {
                    let mode = ctx.i32(2, "mode")?;
                    if !(0..=1).contains(&mode) {
                        return Err(param_err(
                            2,
                            "mode",
                            format!("must be 0 (REFLECT) or 1 (SYMMETRIC), got {mode}"),
                        ));
                    }
                }
                _ => {}
            }
            let Some(r) = rank(input) else {
                return single(input.operand_type, Vec::new());
            };
            let Some(pads) = pads else {
                return single(input.operand_type, vec![0; r]);
            };
            if pads.len() != 2 * r {
                return Err(param_err(
                    1,
                    "paddings",
                    format!("must hold {} values (rank x 2), got {}", 2 * r, pads.len()),
                ));
            }
            let mut out = Vec::with_capacity(r);
            for (d, &dim) in input.dimensions.iter().enumerate() {
                let (a, b) = (pads[2 * d], pads[2 * d + 1]);
                if a < 0 || b < 0 {
                    return Err(param_err(
                        1,
                        "paddings",
                        format!("dimension {d} has negative padding ({a}, {b})"),
                    ));
                }
                if op == O::MirrorPad && dim != 0 {
                    let reflect = ctx.i32(2, "mode")? == 0;
                    let limit = if reflect { dim.saturating_sub(1) } else { dim };
                    if a as u32 > limit || b as u32 > limit {
                        return Err(param_err(
                            1,
                            "paddings",
                            format!(
                                "mirror padding ({a}, {b}) exceeds what dimension {d} of size {dim} allows"
                            ),
                        ));
                    }
                }
                out.push(if dim == 0 {
                    0
                } else {
                    u32::try_from(u64::from(dim) + a as u64 + b as u64)
                        .map_err(|_| shape_err("padded extent overflows"))?
                });
            }
            single(input.operand_type, out)
        }
        O::Slice => {
            ctx.count(&[3])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            let begin = ctx.i32_vector(1, "begin")?;
            let size = ctx.i32_vector(2, "size")?;
            let Some(r) = rank(input) else {
                return single(input.operand_type, Vec::new());
            };
            let (Some(begin), Some(size)) = (begin, size) else {
                return single(input.operand_type, vec![0; r]);
            };
            if begin.len() != r || size.len() != r {
                return Err(shape_err(format!(
                    "begin and size must hold {r} values, got {} and {}",
                    begin.len(),
                    size.len()
                )));
            }
            let mut out = Vec::with_capacity(r);
            for d in 0..r {
                let dim = i64::from(input.dimensions[d]);
                let (b, s) = (i64::from(begin[d]), i64::from(size[d]));
                if b < 0 || (dim != 0 && b > dim) {
                    return Err(param_err(
                        1,
                        "begin",
                        format!("begin {b} is out of range for dimension {d} of size {dim}"),
                    ));
                }
                let len = if s == -1 {
                    if dim == 0 { 0 } else { dim - b }
                } else if s < 0 || (dim != 0 && b + s > dim) {
                    return Err(param_err(
                        2,
                        "size",
                        format!("size {s} at begin {b} exceeds dimension {d} of size {dim}"),
                    ));
                } else {
                    s
                };
                if dim != 0 && len == 0 {
                    return Err(param_err(
                        2,
                        "size",
                        format!("slice of dimension {d} is empty"),
                    ));
                }
                out.push(len as u32);
            }
            single(input.operand_type, out)
        }
        O::StridedSlice => {
            ctx.count(&[7])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            // begin / end / strides are tensors: constant, or computed at run time.
            let begin = ctx.i32_vector(1, "begin")?;
            let end = ctx.i32_vector(2, "end")?;
            let strides = ctx.i32_vector(3, "strides")?;
            let begin_mask = ctx.i32(4, "begin_mask")?;
            let end_mask = ctx.i32(5, "end_mask")?;
            let shrink = ctx.i32(6, "shrink_axis_mask")?;
            let Some(r) = rank(input) else {
                return single(input.operand_type, Vec::new());
            };
            let (Some(begin), Some(end), Some(strides)) = (begin, end, strides) else {
                // Extents known only at run time; shrunk dimensions leave the result.
                let kept = (0..r)
                    .filter(|&d| d >= 32 || shrink & (1 << d) == 0)
                    .count();
                return single(input.operand_type, vec![0; kept]);
            };
            if begin.len() != r || end.len() != r || strides.len() != r {
                return Err(shape_err(format!(
                    "begin, end and strides must each hold {r} values"
                )));
            }
            let mut out = Vec::new();
            for d in 0..r {
                let stride = strides[d];
                if stride == 0 {
                    return Err(param_err(
                        3,
                        "strides",
                        format!("stride of dimension {d} is 0"),
                    ));
                }
                let dim = input.dimensions[d];
                let shrinks = shrink & (1 << d) != 0;
                if dim == 0 {
                    if !shrinks {
                        out.push(0);
                    }
                    continue;
                }
                let (b, e) = strided_slice_range(
                    dim,
                    begin[d],
                    end[d],
                    stride,
                    begin_mask & (1 << d) != 0,
                    end_mask & (1 << d) != 0,
                    shrinks,
                );
                let len = if stride > 0 {
                    ((e - b).max(0) + i64::from(stride) - 1) / i64::from(stride)
                } else {
                    ((b - e).max(0) - i64::from(stride) - 1) / -i64::from(stride)
                };
                if shrinks {
                    if len != 1 {
                        return Err(shape_err(format!(
                            "shrunk dimension {d} does not select exactly one element"
                        )));
                    }
                } else {
                    if len == 0 {
                        return Err(shape_err(format!("slice of dimension {d} is empty")));
                    }
                    out.push(len as u32);
                }
            }
            single(
                input.operand_type,
                if out.is_empty() { vec![1] } else { out },
            )
        }
        O::Split => {
            ctx.count(&[3])?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            let axis = ctx.i32(1, "axis")?;
            let num = ctx.i32_at_least(2, "num_splits", 1)? as u32;
            if outputs.len() != num as usize {
                return Err(SignatureError::OutputCount {
                    expected: num.to_string(),
                    actual: outputs.len(),
                });
            }
            let Some(r) = rank(input) else {
                return Ok(vec![
                    OutputShape {
                        operand_type: input.operand_type,
                        dimensions: Vec::new()
                    };
                    num as usize
                ]);
            };
            let a = axis_in(axis, r, 1, "axis")?;
            let mut dims = input.dimensions.clone();
            if dims[a] != 0 {
                if dims[a] % num != 0 {
                    return Err(shape_err(format!(
                        "dimension {a} of size {} does not split into {num} equal parts",
                        dims[a]
                    )));
                }
                dims[a] /= num;
            }
            Ok(vec![
                OutputShape {
                    operand_type: input.operand_type,
                    dimensions: dims
                };
                num as usize
            ])
        }
        O::Gather => {
            ctx.count(&[3])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            let axis = ctx.i32(1, "axis")?;
            let indices = ctx.tensor(2, "indices", INT_VECTOR)?;
            let (Some(r), Some(_)) = (rank(input), rank(indices)) else {
                return single(input.operand_type, Vec::new());
            };
            let a = axis_in(axis, r, 1, "axis")?;
            if let (Some(bytes), dim) = (ctx.inputs[2].value, input.dimensions[a])
                && dim != 0
            {
                for idx in decode_i32s(bytes) {
                    if idx < 0 || idx as u32 >= dim {
                        return Err(param_err(
                            2,
                            "indices",
                            format!("index {idx} is out of range for dimension {a} of size {dim}"),
                        ));
                    }
                }
            }
            let mut dims = input.dimensions[..a].to_vec();
            dims.extend_from_slice(&indices.dimensions);
            dims.extend_from_slice(&input.dimensions[a + 1..]);
            single(input.operand_type, dims)
        }
        O::Tile => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            let multiples = ctx.i32_vector(1, "multiples")?;
            let Some(r) = rank(input) else {
                return single(input.operand_type, Vec::new());
            };
            let Some(m) = multiples else {
                return single(input.operand_type, vec![0; r]);
            };
            if m.len() != r {
                return Err(param_err(
                    1,
                    "multiples",
                    format!("must hold {r} values, got {}", m.len()),
                ));
            }
            let mut dims = Vec::with_capacity(r);
            for (d, (&dim, &k)) in input.dimensions.iter().zip(&m).enumerate() {
                if k < 1 {
                    return Err(param_err(
                        1,
                        "multiples",
                        format!("multiple of dimension {d} must be >= 1, got {k}"),
                    ));
                }
                dims.push(
                    dim.checked_mul(k as u32)
                        .ok_or_else(|| shape_err("tiled extent overflows"))?,
                );
            }
            single(input.operand_type, dims)
        }
        O::Pack => {
            ctx.at_least(2)?;
            expect_outputs(1)?;
            let axis = ctx.i32(0, "axis")?;
            let first = ctx.tensor(1, "input0", ANY_DATA)?;
            let mut dims = first.dimensions.clone();
            for i in 2..ctx.inputs.len() {
                let t = ctx.same_type(i, "input", first.operand_type)?;
                if rank(t) != rank(first) && rank(t).is_some() && rank(first).is_some() {
                    return Err(shape_err("inputs have different ranks"));
                }
                if dims.len() == t.dimensions.len() {
                    for (d, &v) in dims.iter_mut().zip(&t.dimensions) {
                        *d = merge_dim(*d, v, "packed input dimensions")?;
                    }
                }
            }
            let Some(r) = rank(first) else {
                return single(first.operand_type, Vec::new());
            };
            let a = axis_in(axis, r + 1, 0, "axis")?;
            dims.insert(a, (ctx.inputs.len() - 1) as u32);
            single(first.operand_type, dims)
        }
        O::Reverse => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            let axes = ctx.i32_values(1, "axis")?;
            if axes.len() != 1 {
                return Err(param_err(
                    1,
                    "axis",
                    format!("must hold exactly one axis, got {}", axes.len()),
                ));
            }
            if let Some(r) = rank(input) {
                axis_in(axes[0], r, 1, "axis")?;
            }
            single(input.operand_type, input.dimensions.clone())
        }
        O::DepthToSpace | O::SpaceToDepth => {
            ctx.count(&[2, 3])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
            require_rank(input, 0, "input", 4..=4)?;
            let block = ctx.i32_at_least(1, "block_size", 1)? as u32;
            let nchw = ctx.optional_bool(2, "layout")?;
            if rank(input).is_none() {
                return single(input.operand_type, Vec::new());
            }
            let (n, h, w, c) = split_nhwc(&input.dimensions, nchw);
            let square = u64::from(block) * u64::from(block);
            let extent = |v: u64| {
                u32::try_from(v)
                    .ok()
                    .filter(|&v| v <= i32::MAX as u32)
                    .ok_or_else(|| shape_err(format!("an output extent ({v}) overflows")))
            };
            let dims = if op == O::DepthToSpace {
                if c != 0 && u64::from(c) % square != 0 {
                    return Err(shape_err(format!(
                        "depth {c} is not divisible by block_size^2 = {square}"
                    )));
                }
                join_nhwc(
                    n,
                    extent(u64::from(h) * u64::from(block))?,
                    extent(u64::from(w) * u64::from(block))?,
                    extent(u64::from(c) / square)?,
                    nchw,
                )
            } else {
                if (h != 0 && h % block != 0) || (w != 0 && w % block != 0) {
                    return Err(shape_err(format!(
                        "height {h} and width {w} must be divisible by block_size {block}"
                    )));
                }
                join_nhwc(
                    n,
                    h / block,
                    w / block,
                    extent(u64::from(c) * square)?,
                    nchw,
                )
            };
            single(input.operand_type, dims)
        }
        O::Mean
        | O::ReduceSum
        | O::ReduceMax
        | O::ReduceMin
        | O::ReduceProd
        | O::ReduceAny
        | O::ReduceAll => {
            ctx.count(&[3])?;
            expect_outputs(1)?;
            let allowed: &[OperandType] = match op {
                O::ReduceAny | O::ReduceAll => &[OperandType::TensorBool8],
                O::ReduceProd | O::ReduceSum => FLOAT,
                _ => FLOAT_QUANT,
            };
            let input = ctx.tensor(0, "input", allowed)?;
            // NNAPI's axes are a 1-D tensor operand, constant or computed at run time.
            let axes = ctx.i32_vector(1, "axes")?;
            let keep = if op == O::Mean {
                ctx.i32(2, "keep_dims")? != 0
            } else {
                ctx.bool(2, "keep_dims")?
            };
            let Some(r) = rank(input) else {
                return single(input.operand_type, Vec::new());
            };
            let Some(axes) = axes else {
                // Which axes go is known only at run time: with keep_dims the rank stays
                // and unit dimensions stay 1; without it even the rank is unknown.
                let dims = if keep {
                    input
                        .dimensions
                        .iter()
                        .map(|&d| if d == 1 { 1 } else { 0 })
                        .collect()
                } else {
                    Vec::new()
                };
                return single(input.operand_type, dims);
            };
            let mut reduced = vec![false; r];
            for a in axes {
                reduced[axis_in(a, r, 1, "axes")?] = true;
            }
            let mut dims = Vec::new();
            for (d, &v) in input.dimensions.iter().enumerate() {
                if !reduced[d] {
                    dims.push(v);
                } else if keep {
                    dims.push(1);
                }
            }
            single(
                input.operand_type,
                if dims.is_empty() { vec![1] } else { dims },
            )
        }
        O::Argmax | O::Argmin => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", FLOAT_QUANT_INT)?;
            let axis = ctx.i32(1, "axis")?;
            let Some(r) = rank(input) else {
                return single(OperandType::TensorInt32, Vec::new());
            };
            let a = axis_in(axis, r, 1, "axis")?;
            let mut dims = input.dimensions.clone();
            dims.remove(a);
            single(
                OperandType::TensorInt32,
                if dims.is_empty() { vec![1] } else { dims },
            )
        }
        O::TopkV2 => {
            ctx.count(&[2])?;
            expect_outputs(2)?;
            let input = ctx.tensor(0, "input", FLOAT_QUANT_INT)?;
            let k = ctx.i32_at_least(1, "k", 1)? as u32;
            let mut dims = input.dimensions.clone();
            if let Some(last) = dims.last_mut() {
                if *last != 0 && k > *last {
                    return Err(param_err(
                        1,
                        "k",
                        format!("k = {k} exceeds the last dimension {}", *last),
                    ));
                }
                *last = k;
            }
            Ok(vec![
                OutputShape {
                    operand_type: input.operand_type,
                    dimensions: dims.clone(),
                },
                OutputShape {
                    operand_type: OperandType::TensorInt32,
                    dimensions: dims,
                },
            ])
        }
        O::Softmax | O::LogSoftmax => {
            ctx.count(if op == O::Softmax { &[2, 3] } else { &[3] })?;
            expect_outputs(1)?;
            let input = ctx.tensor(
                0,
                "input",
                if op == O::Softmax { FLOAT_QUANT } else { FLOAT },
            )?;
            let beta = ctx.f32(1, "beta")?;
            if beta.is_nan() || beta <= 0.0 {
                return Err(param_err(1, "beta", format!("must be > 0, got {beta}")));
            }
            if ctx.inputs.len() == 3
                && let Some(r) = rank(input)
            {
                axis_in(ctx.i32(2, "axis")?, r, 2, "axis")?;
            }
            single(input.operand_type, input.dimensions.clone())
        }
        O::L2Normalization => {
            ctx.count(&[1, 2])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
            if ctx.inputs.len() == 2
                && let Some(r) = rank(input)
            {
                axis_in(ctx.i32(1, "axis")?, r, 1, "axis")?;
            }
            single(input.operand_type, input.dimensions.clone())
        }
        O::LocalResponseNormalization => {
            ctx.count(&[5, 6])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", FLOAT)?;
            ctx.i32_at_least(1, "radius", 0)?;
            ctx.f32(2, "bias")?;
            ctx.f32(3, "alpha")?;
            ctx.f32(4, "beta")?;
            if ctx.inputs.len() == 6
                && let Some(r) = rank(input)
            {
                axis_in(ctx.i32(5, "axis")?, r, 5, "axis")?;
            }
            single(input.operand_type, input.dimensions.clone())
        }
        // ---- nnc extension operations (docs/EXTENSIONS.md) ----
        O::LayerNormalization => {
            ctx.count(&[5])?;
            if outputs.len() != 1 && outputs.len() != 3 {
                return Err(SignatureError::OutputCount {
                    expected: "1 or 3".into(),
                    actual: outputs.len(),
                });
            }
            let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
            let gamma = ctx.same_type(1, "gamma", input.operand_type)?;
            let beta = ctx.same_type(2, "beta", input.operand_type)?;
            let eps = ctx.f32(3, "epsilon")?;
            if !eps.is_finite() || eps < 0.0 {
                return Err(param_err(3, "epsilon", format!("must be >= 0, got {eps}")));
            }
            let axis = ctx.i32(4, "axis")?;
            let Some(r) = rank(input) else {
                let unknown = OutputShape {
                    operand_type: input.operand_type,
                    dimensions: Vec::new(),
                };
                return Ok(vec![unknown; outputs.len()]);
            };
            let a = axis_in(axis, r, 4, "axis")?;
            for (k, role, t) in [(1, "gamma", gamma), (2, "beta", beta)] {
                let normalized = &input.dimensions[a..];
                if t.dimensions.len() != normalized.len()
                    || t.dimensions
                        .iter()
                        .zip(normalized)
                        .any(|(&x, &y)| x != 0 && y != 0 && x != y)
                {
                    return Err(param_err(
                        k,
                        role,
                        format!(
                            "must have the normalized dimensions {normalized:?}, got {:?}",
                            t.dimensions
                        ),
                    ));
                }
            }
            let mut shapes = vec![OutputShape {
                operand_type: input.operand_type,
                dimensions: input.dimensions.clone(),
            }];
            if outputs.len() == 3 {
                let mut stats = input.dimensions.clone();
                stats[a..].iter_mut().for_each(|d| *d = 1);
                for _ in 0..2 {
                    shapes.push(OutputShape {
                        operand_type: input.operand_type,
                        dimensions: stats.clone(),
                    });
                }
            }
            Ok(shapes)
        }
        O::Gelu => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let a = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
            ctx.bool(1, "approximate")?;
            single(a.operand_type, a.dimensions.clone())
        }
        O::Erf => {
            ctx.count(&[1])?;
            expect_outputs(1)?;
            let a = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
            single(a.operand_type, a.dimensions.clone())
        }
        O::Mod => {
            ctx.count(&[3])?;
            expect_outputs(1)?;
            let a = ctx.tensor(
                0,
                "input0",
                &[OperandType::TensorFloat32, OperandType::TensorInt32],
            )?;
            let b = ctx.same_type(1, "input1", a.operand_type)?;
            ctx.bool(2, "fmod")?;
            let dims =
                broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
            single(a.operand_type, dims)
        }
        O::CumSum => {
            ctx.count(&[4])?;
            expect_outputs(1)?;
            let a = ctx.tensor(
                0,
                "input",
                &[OperandType::TensorFloat32, OperandType::TensorInt32],
            )?;
            let axis = ctx.i32(1, "axis")?;
            ctx.bool(2, "exclusive")?;
            ctx.bool(3, "reverse")?;
            if let Some(r) = rank(a) {
                axis_in(axis, r, 1, "axis")?;
            }
            single(a.operand_type, a.dimensions.clone())
        }
        O::Bitwise => {
            ctx.count(&[3])?;
            expect_outputs(1)?;
            let a = ctx.tensor(0, "input0", &[OperandType::TensorInt32])?;
            let b = ctx.same_type(1, "input1", a.operand_type)?;
            let code = ctx.i32(2, "function")?;
            if super::types::BitwiseFunction::from_code(code).is_none() {
                return Err(param_err(
                    2,
                    "function",
                    format!("unknown function code {code}"),
                ));
            }
            let dims =
                broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
            single(a.operand_type, dims)
        }
        O::Resample => {
            ctx.count(&[6])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
            let taps = ctx.i32_values(1, "taps")?;
            ctx.tensor(2, "indices", INT_VECTOR)?;
            ctx.tensor(3, "weights", &[OperandType::TensorFloat32])?;
            ctx.f32(4, "extrapolation")?;
            let shape = ctx.i32_values(5, "output_shape")?;
            let Some(r) = rank(input) else {
                return single(input.operand_type, vec![0; shape.len()]);
            };
            if taps.len() != r || shape.len() != r {
                return Err(param_err(
                    1,
                    "taps",
                    format!("taps and output_shape need {r} values"),
                ));
            }
            let mut total = 0u64;
            let mut dims = Vec::with_capacity(r);
            for d in 0..r {
                let (k, out) = (taps[d], shape[d]);
                if !(0..=256).contains(&k) || out < 1 {
                    return Err(param_err(
                        1,
                        "taps",
                        format!("axis {d}: {k} taps to {out} elements"),
                    ));
                }
                if k == 0 && input.dimensions[d] != 0 && out as u32 != input.dimensions[d] {
                    return Err(param_err(
                        5,
                        "output_shape",
                        format!("axis {d} is not resampled but changes length"),
                    ));
                }
                total += k as u64 * out as u64;
                dims.push(out as u32);
            }
            for (index, role) in [(2, "indices"), (3, "weights")] {
                let len: u64 = ctx
                    .operand(index)
                    .dimensions
                    .iter()
                    .map(|&d| u64::from(d))
                    .product();
                if ctx.operand(index).dimensions.len() != 1 || len != total {
                    return Err(param_err(index, role, format!("must hold {total} values")));
                }
            }
            if let Some(bytes) = ctx.inputs[2].value {
                let indices = decode_i32s(bytes);
                let mut at = 0usize;
                for d in 0..r {
                    let n = taps[d] as usize * shape[d] as usize;
                    let dim = input.dimensions[d];
                    if let Some(bad) = indices[at..at + n]
                        .iter()
                        .find(|&&i| i < -1 || (dim != 0 && i >= dim as i32))
                    {
                        return Err(param_err(
                            2,
                            "indices",
                            format!("index {bad} is out of range for axis {d} of size {dim}"),
                        ));
                    }
                    at += n;
                }
            }
            single(input.operand_type, dims)
        }
        O::MaxPoolWithArgmax => {
            ctx.count(&[10])?;
            expect_outputs(2)?;
            let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
            require_rank(input, 0, "input", 4..=4)?;
            let (padding, stride, next) = read_padding_and_strides(&ctx, 1, true)?;
            let fw = ctx.i32_at_least(next, "filter_width", 1)? as u32;
            let fh = ctx.i32_at_least(next + 1, "filter_height", 1)? as u32;
            ctx.activation(next + 2)?;
            let window = Window {
                kernel: (fw, fh),
                stride,
                dilation: (1, 1),
                padding,
                nchw: false,
            };
            let dims = match rank(input) {
                Some(_) => window_output(&window, input, input.dimensions[3])?,
                None => vec![0; 4],
            };
            let out = |dims: Vec<u32>| OutputShape {
                operand_type: OperandType::TensorFloat32,
                dimensions: dims,
            };
            Ok(vec![out(dims.clone()), out(dims)])
        }
        O::MaxUnpooling => {
            ctx.count(&[8])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
            require_rank(input, 0, "input", 4..=4)?;
            let indices = ctx.same_type(1, "indices", OperandType::TensorFloat32)?;
            require_rank(indices, 1, "indices", 4..=4)?;
            for (k, role) in [(2, "pad_left"), (3, "pad_top")] {
                ctx.i32_at_least(k, role, 0)?;
            }
            for (k, role) in [(4, "stride_width"), (5, "stride_height")] {
                ctx.i32_at_least(k, role, 1)?;
            }
            let fw = ctx.i32_at_least(6, "filter_width", 1)? as u32;
            let fh = ctx.i32_at_least(7, "filter_height", 1)? as u32;
            let Some(_) = rank(input) else {
                return single(OperandType::TensorFloat32, vec![0; 4]);
            };
            let d = &input.dimensions;
            if rank(indices).is_some() {
                for (&a, &b) in d.iter().zip(&indices.dimensions) {
                    merge_dim(a, b, "indices and input")?;
                }
            }
            let scale = |n: u32, f: u32| -> Result<u32> {
                n.checked_mul(f)
                    .ok_or_else(|| shape_err("output extent overflows"))
            };
            single(
                OperandType::TensorFloat32,
                vec![d[0], scale(d[1], fh)?, scale(d[2], fw)?, d[3]],
            )
        }
        O::LandmarksToTransformMatrix => {
            ctx.count(&[9])?;
            expect_outputs(1)?;
            let landmarks = ctx.tensor(0, "landmarks", &[OperandType::TensorFloat32])?;
            require_rank(landmarks, 0, "landmarks", 3..=3)?;
            let count = match rank(landmarks) {
                Some(_) => {
                    let d = &landmarks.dimensions;
                    if (d[0] != 0 && d[0] != 1) || (d[2] != 0 && d[2] != 3) {
                        return Err(param_err(
                            0,
                            "landmarks",
                            format!("must have dimensions [1, n, 3], got {d:?}"),
                        ));
                    }
                    d[1]
                }
                None => 0,
            };
            let in_range = |index: usize, role: &'static str, v: i32| -> Result<()> {
                if v < 0 || (count != 0 && v as u32 >= count) {
                    return Err(param_err(
                        index,
                        role,
                        format!("landmark index {v} is out of range for {count} landmarks"),
                    ));
                }
                Ok(())
            };
            // A long subset is a weight (CONSTANT_REFERENCE), whose values a device may
            // not see before it runs: checked here when known, and by the kernel.
            let subset = ctx.tensor(1, "subset", INT_VECTOR)?;
            if subset.dimensions.len() != 1 || subset.dimensions[0] == 0 {
                return Err(param_err(1, "subset", "must be a non-empty 1-D vector"));
            }
            if let Some(bytes) = ctx.inputs[1].value {
                for v in decode_i32s(bytes) {
                    in_range(1, "subset", v)?;
                }
            }
            in_range(2, "left_index", ctx.i32(2, "left_index")?)?;
            in_range(3, "right_index", ctx.i32(3, "right_index")?)?;
            let rotation = ctx.f32(4, "target_rotation")?;
            if !rotation.is_finite() {
                return Err(param_err(4, "target_rotation", "must be finite"));
            }
            ctx.i32_at_least(5, "output_width", 1)?;
            ctx.i32_at_least(6, "output_height", 1)?;
            for (k, role) in [(7, "scale_x"), (8, "scale_y")] {
                let v = ctx.f32(k, role)?;
                if !(v.is_finite() && v > 0.0) {
                    return Err(param_err(k, role, format!("must be positive, got {v}")));
                }
            }
            single(OperandType::TensorFloat32, vec![1, 4, 4])
        }
        O::TransformLandmarks => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let landmarks = ctx.tensor(0, "landmarks", &[OperandType::TensorFloat32])?;
            require_rank(landmarks, 0, "landmarks", 3..=3)?;
            transform_matrix(&ctx, 1)?;
            if rank(landmarks).is_some() {
                let d = &landmarks.dimensions;
                if (d[0] != 0 && d[0] != 1) || !matches!(d[2], 0 | 2 | 3) {
                    return Err(param_err(
                        0,
                        "landmarks",
                        format!("must have dimensions [1, n, 2] or [1, n, 3], got {d:?}"),
                    ));
                }
            }
            let dims = match rank(landmarks) {
                Some(_) => landmarks.dimensions.clone(),
                None => vec![0; 3],
            };
            single(OperandType::TensorFloat32, dims)
        }
        O::TransformTensorBilinear => {
            ctx.count(&[4])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
            require_rank(input, 0, "input", 4..=4)?;
            transform_matrix(&ctx, 1)?;
            let ow = ctx.i32_at_least(2, "output_width", 1)? as u32;
            let oh = ctx.i32_at_least(3, "output_height", 1)? as u32;
            let channels = match rank(input) {
                Some(_) => {
                    if input.dimensions[0] > 1 {
                        return Err(param_err(0, "input", "must have batch size 1"));
                    }
                    input.dimensions[3]
                }
                None => 0,
            };
            single(OperandType::TensorFloat32, vec![1, oh, ow, channels])
        }
        O::MathUnary => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let a = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
            let code = ctx.i32(1, "function")?;
            if super::types::MathFunction::from_code(code).is_none() {
                return Err(param_err(
                    1,
                    "function",
                    format!("unknown function code {code}"),
                ));
            }
            single(a.operand_type, a.dimensions.clone())
        }
        O::GatherElements => {
            ctx.count(&[3])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            let axis = ctx.i32(1, "axis")?;
            let indices = ctx.tensor(2, "indices", INT_VECTOR)?;
            if let (Some(r), Some(ri)) = (rank(input), rank(indices)) {
                if r != ri {
                    return Err(param_err(
                        2,
                        "indices",
                        format!("must have the input's rank {r}, got rank {ri}"),
                    ));
                }
                axis_in(axis, r, 1, "axis")?;
            }
            single(input.operand_type, indices.dimensions.clone())
        }
        O::GatherNd => {
            ctx.count(&[3])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", ANY_DATA)?;
            let indices = ctx.tensor(1, "indices", INT_VECTOR)?;
            let batch = ctx.i32_at_least(2, "batch_dims", 0)? as usize;
            let (Some(r), Some(ri)) = (rank(input), rank(indices)) else {
                return single(input.operand_type, Vec::new());
            };
            let depth = indices.dimensions[ri - 1];
            if depth == 0 {
                return single(input.operand_type, Vec::new());
            }
            let depth = depth as usize;
            if batch >= ri || batch + depth > r {
                return Err(param_err(
                    1,
                    "indices",
                    format!(
                        "a last dimension of {depth} with {batch} batch dimensions does not fit \
                         an input of rank {r} (indices of rank {ri})"
                    ),
                ));
            }
            for d in 0..batch {
                let (x, y) = (input.dimensions[d], indices.dimensions[d]);
                if x != 0 && y != 0 && x != y {
                    return Err(param_err(
                        1,
                        "indices",
                        format!("batch dimension {d} is {y}, the input's is {x}"),
                    ));
                }
            }
            let mut dims = indices.dimensions[..ri - 1].to_vec();
            dims.extend_from_slice(&input.dimensions[batch + depth..]);
            single(input.operand_type, dims)
        }
        O::ScatterElements => {
            ctx.count(&[5])?;
            expect_outputs(1)?;
            let (input, indices, updates) = scatter_operands(&ctx)?;
            let axis = ctx.i32(3, "axis")?;
            scatter_reduction(&ctx, 4, input)?;
            if let (Some(r), Some(ri)) = (rank(input), rank(indices)) {
                if r != ri {
                    return Err(param_err(
                        1,
                        "indices",
                        format!("must have the input's rank {r}, got rank {ri}"),
                    ));
                }
                let a = axis_in(axis, r, 3, "axis")?;
                for (d, (&i, &x)) in indices.dimensions.iter().zip(&input.dimensions).enumerate() {
                    if d != a && i != 0 && x != 0 && i > x {
                        return Err(param_err(
                            1,
                            "indices",
                            format!("dimension {d} is {i}, above the input's {x}"),
                        ));
                    }
                }
            }
            if let (Some(ri), Some(ru)) = (rank(indices), rank(updates)) {
                if ri != ru {
                    return Err(param_err(
                        2,
                        "updates",
                        format!("must have the indices' rank {ri}, got rank {ru}"),
                    ));
                }
                for (&i, &u) in indices.dimensions.iter().zip(&updates.dimensions) {
                    merge_dim(i, u, "updates and indices dimensions")?;
                }
            }
            single(input.operand_type, input.dimensions.clone())
        }
        O::ScatterNd => {
            ctx.count(&[4])?;
            expect_outputs(1)?;
            let (input, indices, updates) = scatter_operands(&ctx)?;
            scatter_reduction(&ctx, 3, input)?;
            if let (Some(r), Some(q)) = (rank(input), rank(indices)) {
                let depth = indices.dimensions[q - 1];
                if depth != 0 {
                    let k = depth as usize;
                    if k > r {
                        return Err(param_err(
                            1,
                            "indices",
                            format!("a last dimension of {k} does not fit an input of rank {r}"),
                        ));
                    }
                    // updates: indices[..q-1] ++ input[k..] (one element: [1]).
                    let mut expected = indices.dimensions[..q - 1].to_vec();
                    expected.extend_from_slice(&input.dimensions[k..]);
                    if expected.is_empty() {
                        expected.push(1);
                    }
                    if let Some(ru) = rank(updates) {
                        if ru != expected.len() {
                            return Err(param_err(
                                2,
                                "updates",
                                format!("must have rank {}, got rank {ru}", expected.len()),
                            ));
                        }
                        for (&e, &u) in expected.iter().zip(&updates.dimensions) {
                            merge_dim(e, u, "updates dimensions vs indices and input")?;
                        }
                    }
                }
            }
            single(input.operand_type, input.dimensions.clone())
        }
        O::InstanceNormalization => {
            ctx.count(&[5])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", FLOAT)?;
            require_rank(input, 0, "input", 4..=4)?;
            ctx.f32(1, "gamma")?;
            ctx.f32(2, "beta")?;
            let eps = ctx.f32(3, "epsilon")?;
            if eps.is_nan() || eps < 0.0 {
                return Err(param_err(3, "epsilon", format!("must be >= 0, got {eps}")));
            }
            ctx.bool(4, "layout")?;
            single(input.operand_type, input.dimensions.clone())
        }
        O::ResizeBilinear | O::ResizeNearestNeighbor => {
            if op == O::ResizeBilinear {
                ctx.count(&[3, 4, 6])?;
            } else {
                ctx.count(&[4, 6])?;
            }
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
            require_rank(input, 0, "input", 4..=4)?;
            let nchw = ctx.optional_bool(3, "layout")?;
            let align = ctx.optional_bool(4, "align_corners")?;
            let half = ctx.optional_bool(5, "half_pixel_centers")?;
            if align && half {
                return Err(param_err(
                    5,
                    "half_pixel_centers",
                    "cannot be combined with align_corners",
                ));
            }
            if rank(input).is_none() {
                return single(input.operand_type, Vec::new());
            }
            let (n, h, w, c) = split_nhwc(&input.dimensions, nchw);
            let (ow, oh) = if ctx.operand(1).operand_type == OperandType::Int32 {
                (
                    ctx.i32_at_least(1, "output_width", 1)? as u32,
                    ctx.i32_at_least(2, "output_height", 1)? as u32,
                )
            } else {
                let sw = ctx.f32(1, "width_scale")?;
                let sh = ctx.f32(2, "height_scale")?;
                if !(sw > 0.0 && sh > 0.0) {
                    return Err(param_err(1, "width_scale", "scales must be > 0"));
                }
                let scaled = |d: u32, s: f32| -> Result<u32> {
                    if d == 0 {
                        return Ok(0);
                    }
                    let v = (f64::from(d) * f64::from(s)).floor();
                    if !(1.0..=f64::from(u32::MAX)).contains(&v) {
                        return Err(shape_err(format!("scaled extent {v} is out of range")));
                    }
                    Ok(v as u32)
                };
                (scaled(w, sw)?, scaled(h, sh)?)
            };
            single(input.operand_type, join_nhwc(n, oh, ow, c, nchw))
        }
        O::ChannelShuffle => {
            ctx.count(&[3])?;
            expect_outputs(1)?;
            let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
            let groups = ctx.i32_at_least(1, "num_groups", 1)? as u32;
            let axis = ctx.i32(2, "axis")?;
            if let Some(r) = rank(input) {
                let a = axis_in(axis, r, 2, "axis")?;
                let c = input.dimensions[a];
                if c != 0 && c % groups != 0 {
                    return Err(shape_err(format!(
                        "channels {c} not divisible by {groups} groups"
                    )));
                }
            }
            single(input.operand_type, input.dimensions.clone())
        }
        O::Fill => {
            ctx.count(&[2])?;
            expect_outputs(1)?;
            let dims = ctx.i32_vector(0, "dims")?;
            let t = match ctx.operand(1).operand_type {
                OperandType::Float32 => OperandType::TensorFloat32,
                OperandType::Float16 => OperandType::TensorFloat16,
                OperandType::Int32 => OperandType::TensorInt32,
                other => {
                    return Err(SignatureError::InputType {
                        index: 1,
                        role: "value",
                        expected: "FLOAT32, FLOAT16 or INT32".into(),
                        actual: other,
                    });
                }
            };
            let out = match dims {
                Some(d) => d
                    .iter()
                    .map(|&v| {
                        if v >= 1 {
                            Ok(v as u32)
                        } else {
                            Err(param_err(0, "dims", format!("dimension {v} must be >= 1")))
                        }
                    })
                    .collect::<Result<Vec<_>>>()?,
                None => {
                    let n = ctx.operand(0).dimensions.first().copied().unwrap_or(0);
                    unknown_dims(n)?
                }
            };
            single(t, out)
        }
        O::Rank => {
            ctx.count(&[1])?;
            expect_outputs(1)?;
            ctx.tensor(0, "input", ANY_DATA)?;
            single(OperandType::Int32, Vec::new())
        }
        O::UnidirectionalSequenceLstm => sequence_lstm(&ctx, outputs.len()),
        O::UnidirectionalSequenceRnn => sequence_rnn(&ctx, outputs.len()),
        O::If | O::While => control_flow_structure(op, &ctx, outputs),
        other => Err(SignatureError::Unsupported(other)),
    }
}

/// The activation codes UNIDIRECTIONAL_SEQUENCE_LSTM accepts for its cell input and
/// output function: 0 none, 1 relu, 3 relu6, 4 tanh, 6 sigmoid (NNAPI lists exactly
/// these; 2 and 5 are not among them).
pub const LSTM_ACTIVATIONS: &[i32] = &[0, 1, 3, 4, 6];

/// A `[d0, d1]` tensor input of TENSOR_FLOAT32 whose dimensions must agree with
/// `expected` (0 = not yet known on either side); returns the merged dimensions.
fn sequence_matrix(
    ctx: &Ctx,
    index: usize,
    role: &'static str,
    expected: &[u32],
) -> Result<Vec<u32>> {
    let t = ctx.tensor(index, role, &[OperandType::TensorFloat32])?;
    if t.dimensions.is_empty() {
        return Ok(expected.to_vec());
    }
    if t.dimensions.len() != expected.len() {
        return Err(param_err(
            index,
            role,
            format!(
                "must have rank {}, got {}",
                expected.len(),
                t.dimensions.len()
            ),
        ));
    }
    t.dimensions
        .iter()
        .zip(expected)
        .map(|(&a, &b)| {
            merge_dim(a, b, role).map_err(|_| {
                param_err(
                    index,
                    role,
                    format!("has dimensions {:?}, expected {expected:?}", t.dimensions),
                )
            })
        })
        .collect()
}

/// The `[max_time, batch, input_size]` (time-major) or `[batch, max_time, input_size]`
/// input of a sequence operation, as (max_time, batch, input_size).
fn sequence_input(ctx: &Ctx, time_major: bool) -> Result<(u32, u32, u32)> {
    let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
    if input.dimensions.is_empty() {
        return Ok((0, 0, 0));
    }
    require_rank(input, 0, "input", 3..=3)?;
    let d = &input.dimensions;
    Ok(if time_major {
        (d[0], d[1], d[2])
    } else {
        (d[1], d[0], d[2])
    })
}

fn sequence_output(time_major: bool, time: u32, batch: u32, units: u32) -> Vec<u32> {
    if time_major {
        vec![time, batch, units]
    } else {
        vec![batch, time, units]
    }
}

fn non_negative_f32(ctx: &Ctx, index: usize, role: &'static str) -> Result<f32> {
    let v = ctx.f32(index, role)?;
    if !v.is_finite() || v < 0.0 {
        return Err(param_err(
            index,
            role,
            format!("must be a finite number >= 0, got {v}"),
        ));
    }
    Ok(v)
}

/// UNIDIRECTIONAL_SEQUENCE_LSTM (NNAPI feature level 3, outputs 1 and 2 from level 4).
///
/// Inputs: 0 input; 1-4 input-to-{input, forget, cell, output} weights `[units,
/// input_size]` (input gate optional: CIFG when absent); 5-8 recurrent-to-{...} weights
/// `[units, output_size]` (input gate optional, present exactly when 1 is); 9-11
/// cell-to-{input, forget, output} peephole weights `[units]` (optional, forget and
/// output together, input only without CIFG); 12-15 {input, forget, cell, output} gate
/// biases `[units]` (the input gate's exactly without CIFG); 16 projection weights
/// `[output_size, units]` and 17 projection bias `[output_size]` (optional; the bias
/// only with the weights; without projection output_size = units); 18 output state
/// `[batch, output_size]`; 19 cell state `[batch, units]`; 20 activation (INT32, one of
/// [`LSTM_ACTIVATIONS`]); 21 cell clip and 22 projection clip (FLOAT32 >= 0, 0 = none);
/// 23 time_major (BOOL); optionally 24-27 layer-normalization weights `[units]` for the
/// {input, forget, cell, output} gates (all of forget/cell/output or none; input only
/// without CIFG). Outputs: the output sequence, then optionally the final output state
/// and cell state together.
fn sequence_lstm(ctx: &Ctx, output_count: usize) -> Result<Vec<OutputShape>> {
    ctx.count(&[24, 28])?;
    if output_count != 1 && output_count != 3 {
        return Err(SignatureError::OutputCount {
            expected: "1 or 3".into(),
            actual: output_count,
        });
    }
    let time_major = ctx.bool(23, "time_major")?;
    let (time, mut batch, mut input_size) = sequence_input(ctx, time_major)?;
    let forget = sequence_matrix(ctx, 2, "input_to_forget_weights", &[0, input_size])?;
    let mut units = forget[0];
    input_size = forget[1];
    for (i, role) in [(3, "input_to_cell_weights"), (4, "input_to_output_weights")] {
        let d = sequence_matrix(ctx, i, role, &[units, input_size])?;
        (units, input_size) = (d[0], d[1]);
    }
    let cifg = !ctx.present(1);
    if !cifg {
        units = sequence_matrix(ctx, 1, "input_to_input_weights", &[units, input_size])?[0];
    }
    let rf = sequence_matrix(ctx, 6, "recurrent_to_forget_weights", &[units, 0])?;
    units = rf[0];
    let mut output_size = rf[1];
    for (i, role) in [
        (7, "recurrent_to_cell_weights"),
        (8, "recurrent_to_output_weights"),
    ] {
        let d = sequence_matrix(ctx, i, role, &[units, output_size])?;
        (units, output_size) = (d[0], d[1]);
    }
    if ctx.present(5) == cifg {
        return Err(param_err(
            5,
            "recurrent_to_input_weights",
            "must be present exactly when input_to_input_weights is",
        ));
    }
    if !cifg {
        let d = sequence_matrix(ctx, 5, "recurrent_to_input_weights", &[units, output_size])?;
        (units, output_size) = (d[0], d[1]);
    }
    // Peepholes: forget and output together; input with them unless CIFG.
    let peephole = ctx.present(10);
    if ctx.present(11) != peephole {
        return Err(param_err(
            11,
            "cell_to_output_weights",
            "must be present exactly when cell_to_forget_weights is",
        ));
    }
    if ctx.present(9) != (peephole && !cifg) {
        return Err(param_err(
            9,
            "cell_to_input_weights",
            "must be present exactly when the other peepholes are and the input gate is",
        ));
    }
    let vector = |index: usize, role: &'static str, units: u32| -> Result<u32> {
        Ok(sequence_matrix(ctx, index, role, &[units])?[0])
    };
    for (i, role) in [
        (9, "cell_to_input_weights"),
        (10, "cell_to_forget_weights"),
        (11, "cell_to_output_weights"),
    ] {
        if ctx.present(i) {
            units = vector(i, role, units)?;
        }
    }
    if ctx.present(12) == cifg {
        return Err(param_err(
            12,
            "input_gate_bias",
            "must be present exactly when input_to_input_weights is",
        ));
    }
    for (i, role) in [
        (12, "input_gate_bias"),
        (13, "forget_gate_bias"),
        (14, "cell_bias"),
        (15, "output_gate_bias"),
    ] {
        if i != 12 || !cifg {
            units = vector(i, role, units)?;
        }
    }
    let projection = ctx.present(16);
    if projection {
        let d = sequence_matrix(ctx, 16, "projection_weights", &[output_size, units])?;
        (output_size, units) = (d[0], d[1]);
    } else {
        if ctx.present(17) {
            return Err(param_err(17, "projection_bias", "needs projection_weights"));
        }
        output_size = merge_dim(
            output_size,
            units,
            "output size without projection vs units",
        )?;
        units = output_size;
    }
    if ctx.present(17) {
        output_size = vector(17, "projection_bias", output_size)?;
    }
    let hs = sequence_matrix(ctx, 18, "output_state_in", &[batch, output_size])?;
    (batch, output_size) = (hs[0], hs[1]);
    let cs = sequence_matrix(ctx, 19, "cell_state_in", &[batch, units])?;
    (batch, units) = (cs[0], cs[1]);
    let activation = ctx.i32(20, "activation")?;
    if !LSTM_ACTIVATIONS.contains(&activation) {
        return Err(param_err(
            20,
            "activation",
            format!(
                "must be 0 (none), 1 (relu), 3 (relu6), 4 (tanh) or 6 (sigmoid), got {activation}"
            ),
        ));
    }
    non_negative_f32(ctx, 21, "cell_clip")?;
    non_negative_f32(ctx, 22, "projection_clip")?;
    if ctx.inputs.len() == 28 {
        let any = (25..28).any(|i| ctx.present(i));
        for (i, role) in [
            (25, "forget_layer_norm_weights"),
            (26, "cell_layer_norm_weights"),
            (27, "output_layer_norm_weights"),
        ] {
            if ctx.present(i) != any {
                return Err(param_err(
                    i,
                    role,
                    "layer normalization weights of the forget, cell and output gates go together",
                ));
            }
        }
        if ctx.present(24) != (any && !cifg) {
            return Err(param_err(
                24,
                "input_layer_norm_weights",
                "must be present exactly when the other layer normalization weights are and the input gate is",
            ));
        }
        for (i, role) in [
            (24, "input_layer_norm_weights"),
            (25, "forget_layer_norm_weights"),
            (26, "cell_layer_norm_weights"),
            (27, "output_layer_norm_weights"),
        ] {
            if ctx.present(i) {
                units = vector(i, role, units)?;
            }
        }
    }
    if !projection {
        output_size = units;
    }
    let f32_out = |dimensions: Vec<u32>| OutputShape {
        operand_type: OperandType::TensorFloat32,
        dimensions,
    };
    let mut out = vec![f32_out(sequence_output(
        time_major,
        time,
        batch,
        output_size,
    ))];
    if output_count == 3 {
        out.push(f32_out(vec![batch, output_size]));
        out.push(f32_out(vec![batch, units]));
    }
    Ok(out)
}

/// UNIDIRECTIONAL_SEQUENCE_RNN (NNAPI feature level 3, output 1 from level 4).
///
/// Inputs: 0 input; 1 weights `[units, input_size]`; 2 recurrent weights `[units,
/// units]`; 3 bias `[units]`; 4 hidden state `[batch, units]`; 5 fused activation (a
/// FuseCode: 0 none, 1 relu, 2 relu1, 3 relu6); 6 time_major (INT32, 0 or 1). Outputs:
/// the output sequence, optionally the final hidden state.
fn sequence_rnn(ctx: &Ctx, output_count: usize) -> Result<Vec<OutputShape>> {
    ctx.count(&[7])?;
    if output_count != 1 && output_count != 2 {
        return Err(SignatureError::OutputCount {
            expected: "1 or 2".into(),
            actual: output_count,
        });
    }
    let time_major = match ctx.i32(6, "time_major")? {
        0 => false,
        1 => true,
        v => {
            return Err(param_err(
                6,
                "time_major",
                format!("must be 0 or 1, got {v}"),
            ));
        }
    };
    let (time, batch, input_size) = sequence_input(ctx, time_major)?;
    let w = sequence_matrix(ctx, 1, "weights", &[0, input_size])?;
    let r = sequence_matrix(ctx, 2, "recurrent_weights", &[w[0], w[0]])?;
    let units = merge_dim(r[0], r[1], "recurrent weights rows vs columns")?;
    let units = sequence_matrix(ctx, 3, "bias", &[units])?[0];
    let h = sequence_matrix(ctx, 4, "hidden_state", &[batch, units])?;
    let (batch, units) = (h[0], h[1]);
    ctx.activation(5)?;
    let f32_out = |dimensions: Vec<u32>| OutputShape {
        operand_type: OperandType::TensorFloat32,
        dimensions,
    };
    let mut out = vec![f32_out(sequence_output(time_major, time, batch, units))];
    if output_count == 2 {
        out.push(f32_out(vec![batch, units]));
    }
    Ok(out)
}

fn check_permutation(perm: &[i32], r: usize, index: usize) -> Result<()> {
    if perm.len() != r {
        return Err(param_err(
            index,
            "perm",
            format!("must hold {r} values, got {}", perm.len()),
        ));
    }
    let mut seen = vec![false; r];
    for &p in perm {
        if p < 0 || p as usize >= r || seen[p as usize] {
            return Err(param_err(
                index,
                "perm",
                format!("{perm:?} is not a permutation of 0..{r}"),
            ));
        }
        seen[p as usize] = true;
    }
    Ok(())
}

/// Resolves a RESHAPE target (with at most one -1) against the input's element count.
fn reshape_dims(input: &Operand, shape: &[i32]) -> Result<Vec<u32>> {
    let mut unknown_at = None;
    let mut known: u64 = 1;
    for (i, &s) in shape.iter().enumerate() {
        match s {
            -1 if unknown_at.is_none() => unknown_at = Some(i),
            -1 => return Err(param_err(1, "shape", "holds more than one -1")),
            s if s < 1 => {
                return Err(param_err(
                    1,
                    "shape",
                    format!("dimension {i} is {s}; must be >= 1 or -1"),
                ));
            }
            s => {
                known = known
                    .checked_mul(s as u64)
                    .ok_or_else(|| shape_err("target shape overflows"))?
            }
        }
    }
    let mut dims: Vec<u32> = shape
        .iter()
        .map(|&s| if s < 0 { 0 } else { s as u32 })
        .collect();
    match (input.element_count(), unknown_at) {
        (Some(n), Some(i)) => {
            if n % known != 0 {
                return Err(shape_err(format!(
                    "cannot reshape {n} elements into {shape:?}"
                )));
            }
            dims[i] =
                u32::try_from(n / known).map_err(|_| shape_err("reshaped extent overflows"))?;
        }
        (Some(n), None) if n != known => {
            return Err(shape_err(format!(
                "cannot reshape {} ({n} elements) into {shape:?} ({known} elements)",
                super::model::dims_to_string(&input.dimensions)
            )));
        }
        _ => {}
    }
    Ok(dims)
}

/// The `[begin, end)` range one STRIDED_SLICE dimension selects, clamped like TFLite.
pub fn strided_slice_range(
    dim: u32,
    begin: i32,
    end: i32,
    stride: i32,
    begin_masked: bool,
    end_masked: bool,
    shrink: bool,
) -> (i64, i64) {
    let dim = i64::from(dim);
    let norm = |v: i32| -> i64 {
        let v = i64::from(v);
        if v < 0 { v + dim } else { v }
    };
    let b = if begin_masked {
        if stride > 0 { 0 } else { dim - 1 }
    } else {
        let v = norm(begin);
        if stride > 0 {
            v.clamp(0, dim)
        } else {
            v.clamp(-1, dim - 1)
        }
    };
    let e = if shrink {
        b + 1
    } else if end_masked {
        if stride > 0 { dim } else { -1 }
    } else {
        let v = norm(end);
        if stride > 0 {
            v.clamp(0, dim)
        } else {
            v.clamp(-1, dim - 1)
        }
    };
    (b, e)
}

fn infer_conv(op: OperationType, ctx: &Ctx, output_count: usize) -> Result<Vec<OutputShape>> {
    use OperationType as O;
    if output_count != 1 {
        return Err(SignatureError::OutputCount {
            expected: "1".into(),
            actual: output_count,
        });
    }
    // Which input counts mean explicit padding, per operation (with the optional
    // layout and dilation tails).
    let (explicit_counts, implicit_counts): (&[usize], &[usize]) = match op {
        O::Conv2d => (&[10, 11, 13], &[7, 8, 10]),
        O::DepthwiseConv2d => (&[11, 12, 14], &[8, 9, 11]),
        _ => (&[12], &[9]),
    };
    let n = ctx.inputs.len();
    let explicit = if op == O::Conv2d && n == 10 {
        // 10 inputs is ambiguous for CONV_2D: explicit without tail, or implicit with
        // layout and dilation. The type of input 7 decides (BOOL layout vs INT32 stride).
        ctx.operand(7).operand_type == OperandType::Int32
    } else if op == O::DepthwiseConv2d && n == 11 {
        ctx.operand(8).operand_type == OperandType::Int32
    } else if explicit_counts.contains(&n) {
        true
    } else if implicit_counts.contains(&n) {
        false
    } else {
        let mut all: Vec<usize> = explicit_counts
            .iter()
            .chain(implicit_counts)
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        return Err(SignatureError::InputCount {
            expected: all
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" or "),
            actual: n,
        });
    };
    let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
    require_rank(input, 0, "input", 4..=4)?;
    let filter_types: Vec<OperandType> = if QUANT8.contains(&input.operand_type) {
        vec![input.operand_type, OperandType::TensorQuant8SymmPerChannel]
    } else {
        vec![input.operand_type]
    };
    let filter = ctx.tensor(1, "filter", &filter_types)?;
    require_rank(filter, 1, "filter", 4..=4)?;
    let bias_type = if QUANT8.contains(&input.operand_type) {
        OperandType::TensorInt32
    } else {
        input.operand_type
    };
    let bias = ctx.tensor(2, "bias", &[bias_type])?;
    require_rank(bias, 2, "bias", 1..=1)?;
    let (padding, stride, mut next) = read_padding_and_strides(ctx, 3, explicit)?;
    let mut multiplier = 1;
    let mut groups = 1;
    match op {
        O::DepthwiseConv2d => {
            multiplier = ctx.i32_at_least(next, "depth_multiplier", 1)? as u32;
            next += 1;
        }
        O::GroupedConv2d => {
            groups = ctx.i32_at_least(next, "num_groups", 1)? as u32;
            next += 1;
        }
        _ => {}
    }
    ctx.activation(next)?;
    let nchw = if op == O::GroupedConv2d {
        ctx.bool(next + 1, "layout")?
    } else {
        ctx.optional_bool(next + 1, "layout")?
    };
    let dilation = if ctx.inputs.len() > next + 2 {
        (
            ctx.i32_at_least(next + 2, "dilation_width", 1)? as u32,
            ctx.i32_at_least(next + 3, "dilation_height", 1)? as u32,
        )
    } else {
        (1, 1)
    };
    let (kh, kw, out_channels) = match rank(filter) {
        Some(4) => {
            let f = &filter.dimensions;
            match op {
                O::DepthwiseConv2d => {
                    if f[0] != 1 && f[0] != 0 {
                        return Err(param_err(
                            1,
                            "filter",
                            format!(
                                "must have shape [1, h, w, channels], got first dimension {}",
                                f[0]
                            ),
                        ));
                    }
                    (f[1], f[2], f[3])
                }
                _ => (f[1], f[2], f[0]),
            }
        }
        _ => (0, 0, 0),
    };
    if let Some(c) = filter.channel_quant.as_ref().map(|q| q.channel_dim) {
        let expected = if op == O::DepthwiseConv2d { 3 } else { 0 };
        if c != expected {
            return Err(param_err(
                1,
                "filter",
                format!("per-channel quantization must be along dimension {expected}, got {c}"),
            ));
        }
    }
    if let Some(&b) = bias.dimensions.first() {
        merge_dim(b, out_channels, "bias length vs output channels")?;
    }
    if rank(input).is_some() && rank(filter).is_some() {
        let in_channels = split_nhwc(&input.dimensions, nchw).3;
        let f = &filter.dimensions;
        match op {
            O::Conv2d => {
                merge_dim(in_channels, f[3], "input channels vs filter depth")?;
            }
            O::DepthwiseConv2d => {
                if in_channels != 0
                    && f[3] != 0
                    && u64::from(f[3]) != u64::from(in_channels) * u64::from(multiplier)
                {
                    return Err(shape_err(format!(
                        "filter depth {} != input channels {in_channels} x depth_multiplier {multiplier}",
                        f[3]
                    )));
                }
            }
            _ => {
                if in_channels != 0
                    && f[3] != 0
                    && (!in_channels.is_multiple_of(groups)
                        || u64::from(f[3]) * u64::from(groups) != u64::from(in_channels))
                {
                    return Err(shape_err(format!(
                        "input channels {in_channels} != {groups} groups x filter depth {}",
                        f[3]
                    )));
                }
                if out_channels != 0 && out_channels % groups != 0 {
                    return Err(shape_err(format!(
                        "output channels {out_channels} not divisible by {groups} groups"
                    )));
                }
            }
        }
    }
    if kh == 0 || kw == 0 {
        let r = if rank(input).is_some() { 4 } else { 0 };
        return Ok(vec![OutputShape {
            operand_type: input.operand_type,
            dimensions: vec![0; r],
        }]);
    }
    let window = Window {
        kernel: (kw, kh),
        stride,
        dilation,
        padding,
        nchw,
    };
    Ok(vec![OutputShape {
        operand_type: input.operand_type,
        dimensions: window_output(&window, input, out_channels)?,
    }])
}

fn infer_transpose_conv(ctx: &Ctx, output_count: usize) -> Result<Vec<OutputShape>> {
    if output_count != 1 {
        return Err(SignatureError::OutputCount {
            expected: "1".into(),
            actual: output_count,
        });
    }
    ctx.count(&[9, 11])?;
    let explicit = ctx.inputs.len() == 11;
    let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
    require_rank(input, 0, "input", 4..=4)?;
    let filter_types: Vec<OperandType> = if QUANT8.contains(&input.operand_type) {
        vec![input.operand_type, OperandType::TensorQuant8SymmPerChannel]
    } else {
        vec![input.operand_type]
    };
    let filter = ctx.tensor(1, "filter", &filter_types)?;
    require_rank(filter, 1, "filter", 4..=4)?;
    let bias_type = if QUANT8.contains(&input.operand_type) {
        OperandType::TensorInt32
    } else {
        input.operand_type
    };
    ctx.tensor(2, "bias", &[bias_type])?;
    if explicit {
        let (padding, (sw, sh), next) = read_padding_and_strides(ctx, 3, true)?;
        ctx.activation(next)?;
        let nchw = ctx.bool(next + 1, "layout")?;
        if rank(input).is_none() || rank(filter).is_none() {
            return Ok(vec![OutputShape {
                operand_type: input.operand_type,
                dimensions: Vec::new(),
            }]);
        }
        let Padding2d::Explicit {
            left,
            right,
            top,
            bottom,
        } = padding
        else {
            return Err(shape_err("internal: explicit padding expected"));
        };
        let (n, h, w, c) = split_nhwc(&input.dimensions, nchw);
        let f = &filter.dimensions;
        merge_dim(c, f[3], "input channels vs filter depth")?;
        let extent = |i: u32, s: u32, k: u32, a: u32, b: u32| -> Result<u32> {
            if i == 0 {
                return Ok(0);
            }
            let full = i64::from(s) * (i64::from(i) - 1) + i64::from(k);
            let out = full - i64::from(a) - i64::from(b);
            if out < 1 {
                return Err(shape_err(format!(
                    "padding ({a}, {b}) removes the whole output extent {full}"
                )));
            }
            u32::try_from(out).map_err(|_| shape_err("output extent overflows"))
        };
        let oh = extent(h, sh, f[1], top, bottom)?;
        let ow = extent(w, sw, f[2], left, right)?;
        Ok(vec![OutputShape {
            operand_type: input.operand_type,
            dimensions: join_nhwc(n, oh, ow, f[0], nchw),
        }])
    } else {
        let shape = ctx.i32_values(3, "output_shape")?;
        scheme(ctx, 4)?;
        ctx.i32_at_least(5, "stride_width", 1)?;
        ctx.i32_at_least(6, "stride_height", 1)?;
        ctx.activation(7)?;
        ctx.bool(8, "layout")?;
        if shape.len() != 4 || shape.iter().any(|&d| d < 1) {
            return Err(param_err(
                3,
                "output_shape",
                format!("must hold 4 positive values, got {shape:?}"),
            ));
        }
        Ok(vec![OutputShape {
            operand_type: input.operand_type,
            dimensions: shape.iter().map(|&d| d as u32).collect(),
        }])
    }
}

/// Names of an operation's inputs by position, for dumps and messages. Positions past
/// the listed names (variadic inputs) are called `input`; the trailing axis of
/// CONCATENATION is `axis`.
pub fn input_role(op: OperationType, index: usize, input_count: usize) -> &'static str {
    use OperationType as O;
    const EXPLICIT_CONV: &[&str] = &[
        "input",
        "filter",
        "bias",
        "pad_left",
        "pad_right",
        "pad_top",
        "pad_bottom",
        "stride_w",
        "stride_h",
        "activation",
        "layout",
        "dilation_w",
        "dilation_h",
    ];
    const IMPLICIT_CONV: &[&str] = &[
        "input",
        "filter",
        "bias",
        "padding",
        "stride_w",
        "stride_h",
        "activation",
        "layout",
        "dilation_w",
        "dilation_h",
    ];
    const EXPLICIT_DEPTHWISE: &[&str] = &[
        "input",
        "filter",
        "bias",
        "pad_left",
        "pad_right",
        "pad_top",
        "pad_bottom",
        "stride_w",
        "stride_h",
        "multiplier",
        "activation",
        "layout",
        "dilation_w",
        "dilation_h",
    ];
    const IMPLICIT_DEPTHWISE: &[&str] = &[
        "input",
        "filter",
        "bias",
        "padding",
        "stride_w",
        "stride_h",
        "multiplier",
        "activation",
        "layout",
        "dilation_w",
        "dilation_h",
    ];
    const EXPLICIT_POOL: &[&str] = &[
        "input",
        "pad_left",
        "pad_right",
        "pad_top",
        "pad_bottom",
        "stride_w",
        "stride_h",
        "filter_w",
        "filter_h",
        "activation",
        "layout",
    ];
    const IMPLICIT_POOL: &[&str] = &[
        "input",
        "padding",
        "stride_w",
        "stride_h",
        "filter_w",
        "filter_h",
        "activation",
        "layout",
    ];
    if op == O::Concatenation && index + 1 == input_count {
        return "axis";
    }
    // Input counts shared by the explicit and implicit forms (10 for CONV_2D, 11 for
    // DEPTHWISE_CONV_2D) are named as the explicit form, which is what nnc emits.
    let names: &[&str] = match op {
        O::Add | O::Sub | O::Mul | O::Div => &["input0", "input1", "activation"],
        O::Conv2d if matches!(input_count, 10 | 11 | 13) => EXPLICIT_CONV,
        O::Conv2d => IMPLICIT_CONV,
        O::DepthwiseConv2d if matches!(input_count, 11 | 12 | 14) => EXPLICIT_DEPTHWISE,
        O::DepthwiseConv2d => IMPLICIT_DEPTHWISE,
        O::GroupedConv2d if input_count == 12 => &[
            "input",
            "filter",
            "bias",
            "pad_left",
            "pad_right",
            "pad_top",
            "pad_bottom",
            "stride_w",
            "stride_h",
            "groups",
            "activation",
            "layout",
        ],
        O::GroupedConv2d => &[
            "input",
            "filter",
            "bias",
            "padding",
            "stride_w",
            "stride_h",
            "groups",
            "activation",
            "layout",
        ],
        O::TransposeConv2d if input_count == 11 => &[
            "input",
            "filter",
            "bias",
            "pad_left",
            "pad_right",
            "pad_top",
            "pad_bottom",
            "stride_w",
            "stride_h",
            "activation",
            "layout",
        ],
        O::TransposeConv2d => &[
            "input",
            "filter",
            "bias",
            "output_shape",
            "padding",
            "stride_w",
            "stride_h",
            "activation",
            "layout",
        ],
        O::AveragePool2d | O::MaxPool2d | O::L2Pool2d if input_count >= 10 => EXPLICIT_POOL,
        O::AveragePool2d | O::MaxPool2d | O::L2Pool2d => IMPLICIT_POOL,
        O::FullyConnected => &["input", "weights", "bias", "activation"],
        O::Reshape => &["input", "shape"],
        O::Transpose => &["input", "perm"],
        O::Squeeze => &["input", "squeeze_dims"],
        O::ExpandDims => &["input", "axis"],
        O::Mean
        | O::ReduceSum
        | O::ReduceMax
        | O::ReduceMin
        | O::ReduceProd
        | O::ReduceAny
        | O::ReduceAll => &["input", "axes", "keep_dims"],
        O::Argmax | O::Argmin => &["input", "axis"],
        O::Softmax | O::LogSoftmax => &["input", "beta", "axis"],
        O::Pad | O::PadV2 | O::MirrorPad => &["input", "paddings", "value"],
        O::Gather => &["input", "axis", "indices"],
        O::GatherElements => &["input", "axis", "indices"],
        O::Mod => &["input0", "input1", "fmod"],
        O::MathUnary => &["input", "function"],
        O::Resample => &[
            "input",
            "taps",
            "indices",
            "weights",
            "extrapolation",
            "output_shape",
        ],
        O::CumSum => &["input", "axis", "exclusive", "reverse"],
        O::MaxPoolWithArgmax => &[
            "input",
            "pad_left",
            "pad_right",
            "pad_top",
            "pad_bottom",
            "stride_w",
            "stride_h",
            "filter_w",
            "filter_h",
            "activation",
        ],
        O::MaxUnpooling => &[
            "input", "indices", "pad_left", "pad_top", "stride_w", "stride_h", "filter_w",
            "filter_h",
        ],
        O::LandmarksToTransformMatrix => &[
            "landmarks",
            "subset",
            "left_index",
            "right_index",
            "target_rotation",
            "output_width",
            "output_height",
            "scale_x",
            "scale_y",
        ],
        O::TransformLandmarks => &["landmarks", "matrix"],
        O::TransformTensorBilinear => &["input", "matrix", "output_width", "output_height"],
        O::Bitwise => &["input0", "input1", "function"],
        O::GatherNd => &["input", "indices", "batch_dims"],
        O::ScatterElements => &["input", "indices", "updates", "axis", "reduction"],
        O::ScatterNd => &["input", "indices", "updates", "reduction"],
        O::LayerNormalization => &["input", "gamma", "beta", "epsilon", "axis"],
        O::Gelu => &["input", "approximate"],
        O::Slice => &["input", "begin", "size"],
        O::StridedSlice => &[
            "input",
            "begin",
            "end",
            "strides",
            "begin_mask",
            "end_mask",
            "shrink_mask",
        ],
        O::Split => &["input", "axis", "num_splits"],
        O::Tile => &["input", "multiples"],
        O::TopkV2 => &["input", "k"],
        O::Prelu => &["input", "alpha"],
        O::Elu => &["input", "alpha"],
        O::BatchMatmul => &["lhs", "rhs", "adj_lhs", "adj_rhs"],
        O::ResizeBilinear | O::ResizeNearestNeighbor => &[
            "input",
            "width",
            "height",
            "layout",
            "align_corners",
            "half_pixel",
        ],
        O::DepthToSpace | O::SpaceToDepth => &["input", "block_size", "layout"],
        O::LocalResponseNormalization => &["input", "radius", "bias", "alpha", "beta", "axis"],
        O::InstanceNormalization => &["input", "gamma", "beta", "epsilon", "layout"],
        O::Select => &["condition", "input_true", "input_false"],
        O::If => &["condition", "then", "else"],
        O::While => &["condition", "body"],
        O::Pack => &["axis"],
        O::Reverse => &["input", "axis"],
        O::UnidirectionalSequenceRnn => &[
            "input",
            "weights",
            "recurrent_weights",
            "bias",
            "hidden_state",
            "activation",
            "time_major",
        ],
        O::UnidirectionalSequenceLstm => &[
            "input",
            "input_to_input_weights",
            "input_to_forget_weights",
            "input_to_cell_weights",
            "input_to_output_weights",
            "recurrent_to_input_weights",
            "recurrent_to_forget_weights",
            "recurrent_to_cell_weights",
            "recurrent_to_output_weights",
            "cell_to_input_weights",
            "cell_to_forget_weights",
            "cell_to_output_weights",
            "input_gate_bias",
            "forget_gate_bias",
            "cell_bias",
            "output_gate_bias",
            "projection_weights",
            "projection_bias",
            "output_state_in",
            "cell_state_in",
            "activation",
            "cell_clip",
            "projection_clip",
            "time_major",
            "input_layer_norm_weights",
            "forget_layer_norm_weights",
            "cell_layer_norm_weights",
            "output_layer_norm_weights",
        ],
        _ => &[],
    };
    names.get(index).copied().unwrap_or("input")
}

/// The earliest HAL version whose operation set can express this particular use of an
/// operation: its base version, raised by newer operand types and optional arguments.
pub fn required_version(
    op: OperationType,
    inputs: &[&Operand],
    outputs: &[&Operand],
) -> HalVersion {
    use OperationType as O;
    let mut v = op.hal_version();
    for operand in inputs.iter().chain(outputs) {
        v = v.max(operand.operand_type.hal_version());
    }
    // Layout flags and dilation arrived in HAL 1.2 for the HAL 1.0 window operations.
    let extended = match op {
        O::Conv2d => {
            inputs.len() > 10
                || (inputs.len() == 8 || inputs.len() == 10)
                    && inputs[7].operand_type == OperandType::Bool
        }
        O::DepthwiseConv2d => {
            inputs.len() > 11
                || (inputs.len() == 9 || inputs.len() == 11)
                    && inputs[8].operand_type == OperandType::Bool
        }
        O::AveragePool2d | O::MaxPool2d | O::L2Pool2d => inputs.len() == 8 || inputs.len() == 11,
        O::Softmax | O::L2Normalization | O::LocalResponseNormalization | O::ResizeBilinear => {
            inputs.len()
                > match op {
                    O::Softmax => 2,
                    O::L2Normalization => 1,
                    O::LocalResponseNormalization => 5,
                    _ => 3,
                }
        }
        _ => false,
    };
    if extended {
        v = v.max(HalVersion::V1_2);
    }
    // The sequence operations' final-state outputs arrived in HAL 1.3.
    if matches!(
        op,
        O::UnidirectionalSequenceLstm | O::UnidirectionalSequenceRnn
    ) && outputs.len() > 1
    {
        v = v.max(HalVersion::V1_3);
    }
    v
}

// ---------------------------------------------------------------------------------------
// Control flow (IF, WHILE).
//
// Their outputs depend on the referenced subgraphs, which an operation's inputs alone do
// not show: [`infer`] checks only what the operation itself holds (the condition, the
// SUBGRAPH operands) and returns the declared outputs; [`infer_control_flow`] checks
// everything against the subgraphs and infers the output shapes.

/// The part of an IF/WHILE signature that needs no subgraph: input and output counts, the
/// IF condition's type, the SUBGRAPH operands. Outputs are returned as declared.
fn control_flow_structure(
    op: OperationType,
    ctx: &Ctx,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.at_least(3)?;
    if outputs.is_empty() {
        return Err(SignatureError::OutputCount {
            expected: "at least 1".into(),
            actual: 0,
        });
    }
    let subgraphs: &[usize] = if op == OperationType::If {
        let cond = ctx.tensor(0, "condition", &[OperandType::TensorBool8])?;
        if !super::validate::dims_compatible(&cond.dimensions, &[1]) {
            return Err(param_err(
                0,
                "condition",
                format!(
                    "must have shape [1], has {}",
                    super::model::dims_to_string(&cond.dimensions)
                ),
            ));
        }
        &[1, 2]
    } else {
        &[0, 1]
    };
    for &index in subgraphs {
        let role = input_role(op, index, ctx.inputs.len());
        let operand = ctx.operand(index);
        if operand.operand_type != OperandType::Subgraph {
            return Err(SignatureError::InputType {
                index,
                role,
                expected: "SUBGRAPH".into(),
                actual: operand.operand_type,
            });
        }
        if operand.lifetime != Lifetime::Subgraph {
            return Err(param_err(
                index,
                role,
                format!(
                    "must have lifetime SUBGRAPH, has {}",
                    operand.lifetime.name()
                ),
            ));
        }
    }
    let first_value = subgraphs[1] + 1;
    for index in first_value..ctx.inputs.len() {
        let operand = ctx.operand(index);
        if operand.operand_type == OperandType::Subgraph || operand.lifetime == Lifetime::NoValue {
            return Err(param_err(
                index,
                "input",
                "must be a value (not a subgraph, not omitted)",
            ));
        }
    }
    if op == OperationType::While && outputs.len() > ctx.inputs.len() - first_value {
        return Err(SignatureError::OutputCount {
            expected: format!("at most {} (the input-output values)", ctx.inputs.len() - 2),
            actual: outputs.len(),
        });
    }
    Ok(outputs
        .iter()
        .map(|o| OutputShape {
            operand_type: o.operand_type,
            dimensions: o.dimensions.clone(),
        })
        .collect())
}

/// True when a value of operand `value` may be bound to operand `slot`: the same type,
/// the same quantization, and dimensions that agree where both are known.
pub fn value_fits(value: &Operand, slot: &Operand) -> bool {
    value.operand_type == slot.operand_type
        && value.scale == slot.scale
        && value.zero_point == slot.zero_point
        && value.channel_quant == slot.channel_quant
        && super::validate::dims_compatible(&value.dimensions, &slot.dimensions)
}

/// Dimensions both may have: known where both agree, `0` where they differ or either is
/// unknown; unknown rank (empty) when the ranks differ or either rank is unknown.
pub fn merge_dims(a: &[u32], b: &[u32]) -> Vec<u32> {
    if a.len() != b.len() || a.is_empty() {
        return Vec::new();
    }
    a.iter()
        .zip(b)
        .map(|(&x, &y)| if x == y { x } else { 0 })
        .collect()
}

/// The subgraph a SUBGRAPH input names (`graphs[t]`, graph 0 being the main subgraph),
/// and its number.
fn referenced<'g>(
    ctx: &Ctx,
    index: usize,
    role: &str,
    graphs: &[&'g super::model::Subgraph],
) -> Result<(usize, &'g super::model::Subgraph)> {
    let t = ctx.operand(index).location.offset;
    match usize::try_from(t).ok().filter(|&t| t >= 1) {
        Some(t) if t < graphs.len() => Ok((t, graphs[t])),
        _ => Err(SignatureError::ControlFlow(format!(
            "input {index} ({role}) refers to subgraph {t}, which does not exist (the model has {} referenced subgraphs)",
            graphs.len().saturating_sub(1)
        ))),
    }
}

fn operand_of<'g>(
    g: &'g super::model::Subgraph,
    t: usize,
    list: &[u32],
    k: usize,
    what: &str,
) -> Result<&'g Operand> {
    list.get(k)
        .and_then(|&i| g.operands.get(i as usize))
        .ok_or_else(|| {
            SignatureError::ControlFlow(format!(
                "subgraph {t}: {what} {k} names an operand that does not exist"
            ))
        })
}

/// Checks that subgraph `t` takes exactly `values` as inputs.
fn check_subgraph_inputs(
    role: &str,
    t: usize,
    g: &super::model::Subgraph,
    values: &[InputView],
) -> Result<()> {
    if g.inputs.len() != values.len() {
        return Err(SignatureError::ControlFlow(format!(
            "{role} subgraph {t} takes {} inputs, but {} values are passed to it",
            g.inputs.len(),
            values.len()
        )));
    }
    for (k, v) in values.iter().enumerate() {
        let slot = operand_of(g, t, &g.inputs, k, "input")?;
        if !value_fits(v.operand, slot) {
            return Err(SignatureError::ControlFlow(format!(
                "{role} subgraph {t}: input {k} is {} (scale {}, zero point {}), but the value passed is {} (scale {}, zero point {})",
                slot.short_description(),
                slot.scale,
                slot.zero_point,
                v.operand.short_description(),
                v.operand.scale,
                v.operand.zero_point
            )));
        }
    }
    Ok(())
}

/// [`infer`] for IF and WHILE with the model's graphs at hand (`graphs[0]` the main
/// subgraph, `graphs[t]` referenced subgraph `t`): every rule of NNAPI's control flow,
/// and the output shapes (dimensions every branch or iteration agrees on, `0` elsewhere).
/// Other operations go to [`infer`].
pub fn infer_control_flow(
    op: OperationType,
    inputs: &[InputView],
    outputs: &[&Operand],
    graphs: &[&super::model::Subgraph],
) -> Result<Vec<OutputShape>> {
    let ctx = Ctx { inputs };
    match op {
        OperationType::If => {
            control_flow_structure(op, &ctx, outputs)?;
            let values = &inputs[3..];
            let (then_t, then_g) = referenced(&ctx, 1, "then", graphs)?;
            let (else_t, else_g) = referenced(&ctx, 2, "else", graphs)?;
            check_subgraph_inputs("then", then_t, then_g, values)?;
            check_subgraph_inputs("else", else_t, else_g, values)?;
            for (role, t, g) in [("then", then_t, then_g), ("else", else_t, else_g)] {
                if g.outputs.len() != outputs.len() {
                    return Err(SignatureError::ControlFlow(format!(
                        "{role} subgraph {t} produces {} outputs, but the IF has {}",
                        g.outputs.len(),
                        outputs.len()
                    )));
                }
            }
            let mut shapes = Vec::with_capacity(outputs.len());
            for (k, declared) in outputs.iter().enumerate() {
                let a = operand_of(then_g, then_t, &then_g.outputs, k, "output")?;
                let b = operand_of(else_g, else_t, &else_g.outputs, k, "output")?;
                for (role, t, o) in [("then", then_t, a), ("else", else_t, b)] {
                    let same_type = o.operand_type == declared.operand_type
                        && o.scale == declared.scale
                        && o.zero_point == declared.zero_point;
                    if !same_type {
                        return Err(SignatureError::ControlFlow(format!(
                            "{role} subgraph {t}: output {k} is {} (scale {}, zero point {}), but the IF's output {k} is {} (scale {}, zero point {})",
                            o.short_description(),
                            o.scale,
                            o.zero_point,
                            declared.short_description(),
                            declared.scale,
                            declared.zero_point
                        )));
                    }
                }
                shapes.push(OutputShape {
                    operand_type: declared.operand_type,
                    dimensions: merge_dims(&a.dimensions, &b.dimensions),
                });
            }
            Ok(shapes)
        }
        OperationType::While => {
            control_flow_structure(op, &ctx, outputs)?;
            let values = &inputs[2..];
            let m = outputs.len();
            let (cond_t, cond_g) = referenced(&ctx, 0, "condition", graphs)?;
            let (body_t, body_g) = referenced(&ctx, 1, "body", graphs)?;
            check_subgraph_inputs("condition", cond_t, cond_g, values)?;
            check_subgraph_inputs("body", body_t, body_g, values)?;
            if cond_g.outputs.len() != 1 {
                return Err(SignatureError::ControlFlow(format!(
                    "condition subgraph {cond_t} must produce exactly 1 output, produces {}",
                    cond_g.outputs.len()
                )));
            }
            let c = operand_of(cond_g, cond_t, &cond_g.outputs, 0, "output")?;
            if c.operand_type != OperandType::TensorBool8
                || !super::validate::dims_compatible(&c.dimensions, &[1])
            {
                return Err(SignatureError::ControlFlow(format!(
                    "condition subgraph {cond_t}: its output must be TENSOR_BOOL8 of shape [1], is {}",
                    c.short_description()
                )));
            }
            let carried = body_g.outputs.len();
            if carried < m || carried > values.len() {
                return Err(SignatureError::ControlFlow(format!(
                    "body subgraph {body_t} produces {carried} outputs; the WHILE has {m} outputs (input-output values) and {} values, so it must produce between {m} and {}",
                    values.len(),
                    values.len()
                )));
            }
            let mut shapes = Vec::with_capacity(m);
            for (j, value) in values.iter().enumerate().take(carried) {
                let out = operand_of(body_g, body_t, &body_g.outputs, j, "output")?;
                let body_in = operand_of(body_g, body_t, &body_g.inputs, j, "input")?;
                let cond_in = operand_of(cond_g, cond_t, &cond_g.inputs, j, "input")?;
                if !value_fits(out, body_in) || !value_fits(out, cond_in) {
                    return Err(SignatureError::ControlFlow(format!(
                        "body subgraph {body_t}: output {j} is {}, which does not fit input {j} of the body ({}) and of the condition ({}) that it replaces",
                        out.short_description(),
                        body_in.short_description(),
                        cond_in.short_description()
                    )));
                }
                if let Some(declared) = outputs.get(j) {
                    let v = value.operand;
                    if v.operand_type != declared.operand_type
                        || v.scale != declared.scale
                        || v.zero_point != declared.zero_point
                    {
                        return Err(SignatureError::ControlFlow(format!(
                            "output {j} is {} but input-output value {j} is {}",
                            declared.short_description(),
                            v.short_description()
                        )));
                    }
                    shapes.push(OutputShape {
                        operand_type: declared.operand_type,
                        dimensions: merge_dims(&v.dimensions, &out.dimensions),
                    });
                }
            }
            Ok(shapes)
        }
        _ => infer(op, inputs, outputs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dims: &[u32]) -> Operand {
        Operand::new(OperandType::TensorFloat32, dims.to_vec())
    }

    fn c_i32(v: i32) -> (Operand, Vec<u8>) {
        let mut o = Operand::new(OperandType::Int32, vec![]);
        o.lifetime = Lifetime::ConstantCopy;
        (o, v.to_le_bytes().to_vec())
    }

    fn run(
        op: OperationType,
        tensors: &[Operand],
        scalars: &[(Operand, Vec<u8>)],
    ) -> Result<Vec<OutputShape>> {
        let mut views: Vec<InputView> = tensors
            .iter()
            .map(|o| InputView {
                operand: o,
                value: None,
            })
            .collect();
        views.extend(scalars.iter().map(|(o, v)| InputView {
            operand: o,
            value: Some(v.as_slice()),
        }));
        let out = t(&[]);
        infer(op, &views, &[&out])
    }

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_dims(&[2, 1, 3], &[4, 1]).unwrap(), vec![2, 4, 3]);
        assert_eq!(broadcast_dims(&[0, 3], &[5, 3]).unwrap(), vec![5, 3]);
        assert!(broadcast_dims(&[2, 3], &[4, 3]).is_err());
    }

    #[test]
    fn conv_explicit_padding_and_dilation() {
        let input = t(&[1, 10, 10, 3]);
        let filter = t(&[8, 3, 3, 3]);
        let bias = t(&[8]);
        let mut scalars: Vec<_> = [1, 1, 1, 1, 2, 2, 0].into_iter().map(c_i32).collect();
        let out = run(
            OperationType::Conv2d,
            &[input.clone(), filter.clone(), bias.clone()],
            &scalars,
        )
        .unwrap();
        assert_eq!(out[0].dimensions, vec![1, 5, 5, 8]);
        // layout false, dilation 2x2: effective kernel 5 -> (10 + 2 - 5) / 2 + 1 = 4
        scalars.push({
            let mut o = Operand::new(OperandType::Bool, vec![]);
            o.lifetime = Lifetime::ConstantCopy;
            (o, vec![0])
        });
        scalars.push(c_i32(2));
        scalars.push(c_i32(2));
        let out = run(OperationType::Conv2d, &[input, filter, bias], &scalars).unwrap();
        assert_eq!(out[0].dimensions, vec![1, 4, 4, 8]);
    }

    #[test]
    fn conv_rejects_bad_stride_and_channel_mismatch() {
        let scalars: Vec<_> = [0, 0, 0, 0, 0, 1, 0].into_iter().map(c_i32).collect();
        let err = run(
            OperationType::Conv2d,
            &[t(&[1, 4, 4, 3]), t(&[2, 1, 1, 3]), t(&[2])],
            &scalars,
        )
        .unwrap_err();
        assert!(err.to_string().contains("stride_width"), "{err}");
        let scalars: Vec<_> = [0, 0, 0, 0, 1, 1, 0].into_iter().map(c_i32).collect();
        let err = run(
            OperationType::Conv2d,
            &[t(&[1, 4, 4, 3]), t(&[2, 1, 1, 4]), t(&[2])],
            &scalars,
        )
        .unwrap_err();
        assert!(err.to_string().contains("input channels"), "{err}");
    }

    #[test]
    fn same_padding_matches_tensorflow() {
        assert_eq!(implicit_padding(224, 3, 2, 1, PaddingScheme::Same), (0, 1));
        assert_eq!(implicit_padding(5, 3, 1, 1, PaddingScheme::Same), (1, 1));
        assert_eq!(
            conv_out_implicit(224, 3, 2, 1, PaddingScheme::Same).unwrap(),
            112
        );
        assert_eq!(
            conv_out_implicit(224, 3, 2, 1, PaddingScheme::Valid).unwrap(),
            111
        );
    }

    #[test]
    fn reshape_resolves_minus_one() {
        let input = t(&[2, 3, 4]);
        assert_eq!(reshape_dims(&input, &[-1, 4]).unwrap(), vec![6, 4]);
        assert!(reshape_dims(&input, &[5, -1]).is_err());
        assert!(reshape_dims(&input, &[-1, -1]).is_err());
    }

    #[test]
    fn unknown_dimensions_propagate() {
        let scalars = vec![c_i32(0)];
        let out = run(OperationType::Add, &[t(&[0, 3]), t(&[1, 3])], &scalars).unwrap();
        assert_eq!(out[0].dimensions, vec![0, 3]);
    }

    #[test]
    fn strided_slice_ranges() {
        assert_eq!(
            strided_slice_range(10, 2, 8, 2, false, false, false),
            (2, 8)
        );
        assert_eq!(
            strided_slice_range(10, -1, 0, -1, false, true, false),
            (9, -1)
        );
        assert_eq!(
            strided_slice_range(10, 0, 100, 1, false, false, false),
            (0, 10)
        );
    }

    #[test]
    fn scatter_shapes_and_reductions() {
        let idx = |dims: &[u32]| Operand::new(OperandType::TensorInt32, dims.to_vec());
        // SCATTER_ELEMENTS: input, indices, updates, axis, reduction.
        let out = run(
            OperationType::ScatterElements,
            &[t(&[3, 4]), idx(&[2, 4]), t(&[2, 4])],
            &[c_i32(-2), c_i32(1)],
        )
        .unwrap();
        assert_eq!(out[0].dimensions, vec![3, 4]);
        // Updates must match the indices; the indices fit the input off the axis.
        let wrong = [
            (vec![t(&[3, 4]), idx(&[2, 4]), t(&[2, 3])], 0),
            (vec![t(&[3, 4]), idx(&[2, 5]), t(&[2, 5])], 0),
            (vec![t(&[3, 4]), idx(&[2]), t(&[2])], 0),
            (vec![t(&[3, 4]), idx(&[2, 4]), t(&[2, 4])], 5),
        ];
        for (tensors, reduction) in wrong {
            let scalars = [c_i32(0), c_i32(reduction)];
            assert!(run(OperationType::ScatterElements, &tensors, &scalars).is_err());
        }
        // Reductions need numbers.
        let bools = |n: u32| Operand::new(OperandType::TensorBool8, vec![n]);
        let scalars = [c_i32(0), c_i32(1)];
        let tensors = [bools(3), idx(&[2]), bools(2)];
        assert!(run(OperationType::ScatterElements, &tensors, &scalars).is_err());
        let scalars = [c_i32(0), c_i32(0)];
        assert!(run(OperationType::ScatterElements, &tensors, &scalars).is_ok());
        // SCATTER_ND: updates are indices[..-1] ++ input[k..].
        let nd = |tensors: &[Operand]| run(OperationType::ScatterNd, tensors, &[c_i32(2)]);
        assert_eq!(
            nd(&[t(&[4, 3, 2]), idx(&[5, 1]), t(&[5, 3, 2])]).unwrap()[0].dimensions,
            vec![4, 3, 2]
        );
        assert!(nd(&[t(&[4, 3, 2]), idx(&[5, 2]), t(&[5, 2])]).is_ok());
        assert!(nd(&[t(&[4, 3, 2]), idx(&[5, 2]), t(&[5, 3])]).is_err());
        assert!(nd(&[t(&[4, 3, 2]), idx(&[5, 4]), t(&[5])]).is_err());
        assert!(nd(&[t(&[4, 3, 2]), idx(&[5, 3]), t(&[5, 1])]).is_err());
        // One tuple naming one element: a one-element update.
        assert!(nd(&[t(&[4, 3, 2]), idx(&[3]), t(&[1])]).is_ok());
    }

    #[test]
    fn half_floats_decode() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0001), 5.960_464_5e-8);
        assert!(f16_to_f32(0x7e00).is_nan());
    }
}
