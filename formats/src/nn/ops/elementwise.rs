//! Elementwise operations: arithmetic, comparisons, logic, unary math and activations,
//! type conversion and quantization.

use super::context::*;
use super::{OutputShape, Result, SignatureError};
use crate::nn::model::Operand;
use crate::nn::types::OperationType as O;
use crate::nn::types::{OperandType, OperationType};

/// Add, Sub, Mul, Div.
pub(super) fn arithmetic(
    op: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[3])?;
    expect_outputs(outputs, 1)?;
    let allowed = if op == O::Div {
        FLOAT_INT
    } else {
        FLOAT_QUANT_INT
    };
    let a = ctx.tensor(0, "input0", allowed)?;
    let b = ctx.same_type(1, "input1", a.operand_type)?;
    ctx.activation(2)?;
    let dims = broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
    single(a.operand_type, dims)
}

/// MAXIMUM and MINIMUM: numbers of one type, broadcast.
pub(super) fn min_max(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    broadcast_pair(ctx, outputs, FLOAT_QUANT_INT, "input1")
}

/// POW: floats only.
pub(super) fn pow(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    broadcast_pair(ctx, outputs, FLOAT, "input1")
}

/// PRELU: the input and a broadcast alpha.
pub(super) fn prelu(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    broadcast_pair(ctx, outputs, FLOAT_QUANT, "alpha")
}

/// Two inputs of one type from `allowed`, broadcast against each other.
fn broadcast_pair(
    ctx: &Operands,
    outputs: &[&Operand],
    allowed: &[OperandType],
    second: &'static str,
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
    let a = ctx.tensor(0, "input0", allowed)?;
    let b = ctx.same_type(1, second, a.operand_type)?;
    let dims = broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
    single(a.operand_type, dims)
}

/// Equal, NotEqual, Less, LessEqual, Greater, GreaterEqual.
pub(super) fn comparison(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
    let mut allowed = FLOAT_QUANT_INT.to_vec();
    allowed.push(OperandType::TensorBool8);
    let a = ctx.tensor(0, "input0", &allowed)?;
    let b = ctx.same_type(1, "input1", a.operand_type)?;
    let dims = broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
    single(OperandType::TensorBool8, dims)
}

/// LogicalAnd, LogicalOr.
pub(super) fn logical_binary(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
    let a = ctx.tensor(0, "input0", &[OperandType::TensorBool8])?;
    let b = ctx.tensor(1, "input1", &[OperandType::TensorBool8])?;
    let dims = broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
    single(OperandType::TensorBool8, dims)
}

/// LogicalNot.
pub(super) fn logical_not(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1])?;
    expect_outputs(outputs, 1)?;
    let a = ctx.tensor(0, "input", &[OperandType::TensorBool8])?;
    single(a.operand_type, a.dimensions.clone())
}

/// Abs, Neg.
pub(super) fn signed_unary(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1])?;
    expect_outputs(outputs, 1)?;
    let a = ctx.tensor(0, "input", FLOAT_INT)?;
    single(a.operand_type, a.dimensions.clone())
}

/// Exp, Log, Sqrt, Rsqrt, Sin, Floor.
pub(super) fn float_unary(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1])?;
    expect_outputs(outputs, 1)?;
    let a = ctx.tensor(0, "input", FLOAT)?;
    single(a.operand_type, a.dimensions.clone())
}

/// Logistic, Tanh, Relu, Relu1, Relu6, HardSwish.
pub(super) fn activation(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1])?;
    expect_outputs(outputs, 1)?;
    let a = ctx.tensor(0, "input", FLOAT_QUANT)?;
    single(a.operand_type, a.dimensions.clone())
}

/// Elu.
pub(super) fn elu(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
    let a = ctx.tensor(0, "input", FLOAT)?;
    ctx.f32(1, "alpha")?;
    single(a.operand_type, a.dimensions.clone())
}

/// Cast.
pub(super) fn cast(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1])?;
    expect_outputs(outputs, 1)?;
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

/// Quantize.
pub(super) fn quantize(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1])?;
    expect_outputs(outputs, 1)?;
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

/// Dequantize.
pub(super) fn dequantize(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1])?;
    expect_outputs(outputs, 1)?;
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

/// Select.
pub(super) fn select(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[3])?;
    expect_outputs(outputs, 1)?;
    let c = ctx.tensor(0, "condition", &[OperandType::TensorBool8])?;
    let a = ctx.tensor(1, "input_true", ANY_DATA)?;
    let b = ctx.same_type(2, "input_false", a.operand_type)?;
    let dims = broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
    let dims = broadcast_dims(&c.dimensions, &dims).map_err(SignatureError::Shape)?;
    single(a.operand_type, dims)
}

/// Gelu.
pub(super) fn gelu(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
    let a = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
    ctx.bool(1, "approximate")?;
    single(a.operand_type, a.dimensions.clone())
}

/// Erf.
pub(super) fn erf(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1])?;
    expect_outputs(outputs, 1)?;
    let a = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
    single(a.operand_type, a.dimensions.clone())
}

/// Mod.
pub(super) fn modulo(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[3])?;
    expect_outputs(outputs, 1)?;
    let a = ctx.tensor(
        0,
        "input0",
        &[OperandType::TensorFloat32, OperandType::TensorInt32],
    )?;
    let b = ctx.same_type(1, "input1", a.operand_type)?;
    ctx.bool(2, "fmod")?;
    let dims = broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
    single(a.operand_type, dims)
}

/// Bitwise.
pub(super) fn bitwise(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[3])?;
    expect_outputs(outputs, 1)?;
    let a = ctx.tensor(0, "input0", &[OperandType::TensorInt32])?;
    let b = ctx.same_type(1, "input1", a.operand_type)?;
    let code = ctx.i32(2, "function")?;
    if crate::nn::types::BitwiseFunction::from_code(code).is_none() {
        return Err(param_err(
            2,
            "function",
            format!("unknown function code {code}"),
        ));
    }
    let dims = broadcast_dims(&a.dimensions, &b.dimensions).map_err(SignatureError::Shape)?;
    single(a.operand_type, dims)
}

/// MathUnary.
pub(super) fn math_unary(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
    let a = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
    let code = ctx.i32(1, "function")?;
    if crate::nn::types::MathFunction::from_code(code).is_none() {
        return Err(param_err(
            1,
            "function",
            format!("unknown function code {code}"),
        ));
    }
    single(a.operand_type, a.dimensions.clone())
}
