//! Normalizations: softmax, L2, local response, layer and instance normalization.

use super::context::*;
use super::normalization_params::{
    InstanceNormalization, L2Normalization, LayerNormalization, LocalResponse, Softmax,
};
use super::{OutputShape, Result, SignatureError};
use crate::nn::model::Operand;
use crate::nn::types::OperationType as O;
use crate::nn::types::{OperandType, OperationType};

/// Softmax, LogSoftmax.
pub(super) fn softmax(
    op: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    Softmax::count(op, ctx)?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(
        0,
        "input",
        if op == O::Softmax { FLOAT_QUANT } else { FLOAT },
    )?;
    let params = Softmax::decode_params(ctx)?;
    if ctx.inputs.len() == 3
        && let Some(r) = rank(input)
    {
        axis_in(params.axis, r, 2, "axis")?;
    }
    single(input.operand_type, input.dimensions.clone())
}

/// L2Normalization.
pub(super) fn l2_normalization(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1, 2])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
    let params = L2Normalization::decode_params(ctx)?;
    if ctx.inputs.len() == 2
        && let Some(r) = rank(input)
    {
        axis_in(params.axis, r, 1, "axis")?;
    }
    single(input.operand_type, input.dimensions.clone())
}

/// LocalResponseNormalization.
pub(super) fn local_response(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[5, 6])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", FLOAT)?;
    let params = LocalResponse::decode_params(ctx)?;
    if ctx.inputs.len() == 6
        && let Some(r) = rank(input)
    {
        axis_in(params.axis, r, 5, "axis")?;
    }
    single(input.operand_type, input.dimensions.clone())
}

/// LayerNormalization.
pub(super) fn layer_normalization(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
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
    let LayerNormalization { axis, .. } = LayerNormalization::decode_params(ctx)?;
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

/// InstanceNormalization.
pub(super) fn instance_normalization(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[5])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", FLOAT)?;
    require_rank(input, 0, "input", 4..=4)?;
    InstanceNormalization::decode_params(ctx)?;
    single(input.operand_type, input.dimensions.clone())
}
