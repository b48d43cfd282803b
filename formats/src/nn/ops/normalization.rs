//! Normalizations: softmax, L2, local response, layer and instance normalization.

use super::context::*;
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
    ctx.count(if op == O::Softmax { &[2, 3] } else { &[3] })?;
    expect_outputs(outputs, 1)?;
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

/// L2Normalization.
pub(super) fn l2_normalization(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1, 2])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
    if ctx.inputs.len() == 2
        && let Some(r) = rank(input)
    {
        axis_in(ctx.i32(1, "axis")?, r, 1, "axis")?;
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
    ctx.f32(1, "gamma")?;
    ctx.f32(2, "beta")?;
    let eps = ctx.f32(3, "epsilon")?;
    if eps.is_nan() || eps < 0.0 {
        return Err(param_err(3, "epsilon", format!("must be >= 0, got {eps}")));
    }
    ctx.bool(4, "layout")?;
    single(input.operand_type, input.dimensions.clone())
}
