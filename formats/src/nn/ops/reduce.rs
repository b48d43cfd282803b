//! Reductions along axes: the REDUCE_* family and MEAN, ARGMAX/ARGMIN, TOPK_V2, CUMSUM.

use super::context::*;
use super::reduce_params::Reduce;
use super::{OutputShape, Result};
use crate::nn::model::Operand;
use crate::nn::types::{OperandType, OperationType};

/// REDUCE_ANY and REDUCE_ALL: booleans.
pub(super) fn reduce_logical(
    op: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    reduce(op, ctx, outputs, &[OperandType::TensorBool8])
}

/// REDUCE_SUM and REDUCE_PROD: floats, as NNAPI defines them.
pub(super) fn reduce_arithmetic(
    op: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    reduce(op, ctx, outputs, FLOAT)
}

/// MEAN, REDUCE_MAX and REDUCE_MIN: floats and 8-bit quantized values.
pub(super) fn reduce_ordered(
    op: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    reduce(op, ctx, outputs, FLOAT_QUANT)
}

/// The reductions, with the input types each accepts.
fn reduce(
    op: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
    allowed: &[OperandType],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[3])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", allowed)?;
    // NNAPI's axes are a 1-D tensor operand, constant or computed at run time.
    let Reduce {
        axes,
        keep_dims: keep,
    } = Reduce::decode_params(op, ctx)?;
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

/// Argmax, Argmin.
pub(super) fn arg_reduce(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
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

/// TopkV2.
pub(super) fn top_k(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 2)?;
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

/// CumSum.
pub(super) fn cumulative_sum(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[4])?;
    expect_outputs(outputs, 1)?;
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
