//! What every shape rule shares: the operand-type sets, [`Operands`] (accessors over an
//! operation's inputs that turn every mismatch into a named error), and shape helpers.

use super::{InputView, OutputShape, Result, SignatureError};
use crate::nn::model::Operand;
use crate::nn::types::{FusedActivation, Lifetime, OperandType};

pub(super) const FLOAT: &[OperandType] = &[OperandType::TensorFloat32, OperandType::TensorFloat16];
pub(super) const FLOAT_QUANT: &[OperandType] = &[
    OperandType::TensorFloat32,
    OperandType::TensorFloat16,
    OperandType::TensorQuant8Asymm,
    OperandType::TensorQuant8AsymmSigned,
];
pub(super) const FLOAT_QUANT_INT: &[OperandType] = &[
    OperandType::TensorFloat32,
    OperandType::TensorFloat16,
    OperandType::TensorQuant8Asymm,
    OperandType::TensorQuant8AsymmSigned,
    OperandType::TensorInt32,
];
pub(super) const FLOAT_INT: &[OperandType] = &[
    OperandType::TensorFloat32,
    OperandType::TensorFloat16,
    OperandType::TensorInt32,
];
/// Types that data-movement operations (reshape, transpose, gather, ...) accept.
pub(super) const ANY_DATA: &[OperandType] = &[
    OperandType::TensorFloat32,
    OperandType::TensorFloat16,
    OperandType::TensorQuant8Asymm,
    OperandType::TensorQuant8AsymmSigned,
    OperandType::TensorInt32,
    OperandType::TensorBool8,
    OperandType::TensorQuant16Symm,
    OperandType::TensorQuant16Asymm,
];
/// The types NON_ZERO and UNIQUE compare values of: numbers, bools and 8-bit integers.
pub(super) const COUNTABLE: &[OperandType] = &[
    OperandType::TensorFloat32,
    OperandType::TensorInt32,
    OperandType::TensorBool8,
    OperandType::TensorQuant8Asymm,
    OperandType::TensorQuant8AsymmSigned,
];
pub(super) const QUANT8: &[OperandType] = &[
    OperandType::TensorQuant8Asymm,
    OperandType::TensorQuant8AsymmSigned,
];
pub(super) const INT_VECTOR: &[OperandType] = &[OperandType::TensorInt32];

pub(super) fn type_list(types: &[OperandType]) -> String {
    types
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(" or ")
}

/// The one accessor over an operation's inputs, for the shape rules here and the
/// runtime's kernels: every mismatch (count, type, a missing or malformed constant, a
/// value out of range) becomes an error naming the input and its role.
#[derive(Clone, Copy)]
pub struct Operands<'a> {
    pub(super) inputs: &'a [InputView<'a>],
}

impl<'a> Operands<'a> {
    /// The accessor over `inputs`.
    pub fn new(inputs: &'a [InputView<'a>]) -> Operands<'a> {
        Operands { inputs }
    }

    /// How many inputs the operation has.
    pub fn len(&self) -> usize {
        self.inputs.len()
    }

    /// Whether the operation has no inputs.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    pub fn count(&self, allowed: &[usize]) -> Result<()> {
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

    pub fn at_least(&self, n: usize) -> Result<()> {
        if self.inputs.len() >= n {
            Ok(())
        } else {
            Err(SignatureError::InputCount {
                expected: format!("at least {n}"),
                actual: self.inputs.len(),
            })
        }
    }

    pub(super) fn operand(&self, index: usize) -> &'a Operand {
        self.inputs[index].operand
    }

    pub fn present(&self, index: usize) -> bool {
        self.inputs
            .get(index)
            .is_some_and(|v| v.operand.lifetime != Lifetime::NoValue)
    }

    pub(super) fn tensor(
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
    pub(super) fn same_type(
        &self,
        index: usize,
        role: &'static str,
        t: OperandType,
    ) -> Result<&'a Operand> {
        self.tensor(index, role, &[t])
    }

    pub(super) fn scalar_bytes(
        &self,
        index: usize,
        role: &'static str,
        t: OperandType,
        len: usize,
    ) -> Result<&'a [u8]> {
        let Some(view) = self.inputs.get(index) else {
            return Err(SignatureError::InputCount {
                expected: format!("at least {}", index + 1),
                actual: self.inputs.len(),
            });
        };
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

    pub fn i32(&self, index: usize, role: &'static str) -> Result<i32> {
        let b = self.scalar_bytes(index, role, OperandType::Int32, 4)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i32_at_least(&self, index: usize, role: &'static str, min: i32) -> Result<i32> {
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
    pub fn f32(&self, index: usize, role: &'static str) -> Result<f32> {
        let t = self.inputs.get(index).map(|v| v.operand.operand_type);
        if t == Some(OperandType::Float16) {
            let b = self.scalar_bytes(index, role, OperandType::Float16, 2)?;
            return Ok(f16_to_f32(u16::from_le_bytes([b[0], b[1]])));
        }
        let b = self.scalar_bytes(index, role, OperandType::Float32, 4)?;
        Ok(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn bool(&self, index: usize, role: &'static str) -> Result<bool> {
        let b = self.scalar_bytes(index, role, OperandType::Bool, 1)?;
        Ok(b[0] != 0)
    }

    /// An optional trailing BOOL input (absent or NO_VALUE means `false`).
    pub fn optional_bool(&self, index: usize, role: &'static str) -> Result<bool> {
        if self.present(index) {
            self.bool(index, role)
        } else {
            Ok(false)
        }
    }

    pub fn activation(&self, index: usize) -> Result<FusedActivation> {
        let code = self.i32(index, "fused_activation")?;
        FusedActivation::from_code(code).ok_or(SignatureError::Parameter {
            index,
            role: "fused_activation",
            message: format!("must be 0 (NONE), 1 (RELU), 2 (RELU1) or 3 (RELU6), got {code}"),
        })
    }

    /// A 1-D TENSOR_INT32 input; its values when known.
    pub(super) fn i32_vector(&self, index: usize, role: &'static str) -> Result<Option<Vec<i32>>> {
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
    /// Input `index`'s bytes, when known: a constant at compile time, every input at run
    /// time (the rules of operations whose output shape depends on their data read it).
    pub(super) fn value(&self, index: usize) -> Option<&'a [u8]> {
        self.inputs.get(index).and_then(|v| v.value)
    }

    pub(super) fn i32_values(&self, index: usize, role: &'static str) -> Result<Vec<i32>> {
        let operand = self.tensor(index, role, INT_VECTOR)?;
        let _ = operand;
        self.inputs[index]
            .value
            .map(decode_i32s)
            .ok_or(SignatureError::NotConstant { index, role })
    }
}

pub(super) fn decode_i32s(bytes: &[u8]) -> Vec<i32> {
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
pub(super) fn unknown_dims(rank: u32) -> Result<Vec<u32>> {
    if rank as usize > MAX_RANK {
        return Err(shape_err(format!(
            "the output would have rank {rank}, above the highest rank {MAX_RANK}"
        )));
    }
    Ok(vec![0; rank as usize])
}

pub(super) fn shape_err(message: impl Into<String>) -> SignatureError {
    SignatureError::Shape(message.into())
}

pub(super) fn param_err(
    index: usize,
    role: &'static str,
    message: impl Into<String>,
) -> SignatureError {
    SignatureError::Parameter {
        index,
        role,
        message: message.into(),
    }
}

/// Rank of a tensor, or `None` when unknown.
pub(super) fn rank(operand: &Operand) -> Option<usize> {
    (!operand.dimensions.is_empty()).then_some(operand.dimensions.len())
}

pub(super) fn require_rank(
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
pub(super) fn axis_in(axis: i32, rank: usize, index: usize, role: &'static str) -> Result<usize> {
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

/// Two dimensions that must agree; unknown matches anything.
pub(super) fn merge_dim(a: u32, b: u32, what: &str) -> Result<u32> {
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
                    crate::nn::model::dims_to_string(a),
                    crate::nn::model::dims_to_string(b)
                ));
            }
        };
    }
    Ok(out)
}

/// The one output of a single-output operation.
pub(super) fn single(t: OperandType, dims: Vec<u32>) -> Result<Vec<OutputShape>> {
    Ok(vec![OutputShape {
        operand_type: t,
        dimensions: dims,
    }])
}

/// Checks that the operation declares exactly `n` outputs.
pub(super) fn expect_outputs(outputs: &[&Operand], n: usize) -> Result<()> {
    if outputs.len() == n {
        Ok(())
    } else {
        Err(SignatureError::OutputCount {
            expected: n.to_string(),
            actual: outputs.len(),
        })
    }
}

/// Splits an NHWC/NCHW 4-D shape into (batch, height, width, channels).
pub(super) fn split_nhwc(dims: &[u32], nchw: bool) -> (u32, u32, u32, u32) {
    if nchw {
        (dims[0], dims[2], dims[3], dims[1])
    } else {
        (dims[0], dims[1], dims[2], dims[3])
    }
}

pub(super) fn join_nhwc(n: u32, h: u32, w: u32, c: u32, nchw: bool) -> Vec<u32> {
    if nchw {
        vec![n, c, h, w]
    } else {
        vec![n, h, w, c]
    }
}
