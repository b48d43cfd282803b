//! Indexed reads and writes: GATHER, GATHER_ELEMENTS, GATHER_ND and the scatters.

use super::context::*;
use super::{OutputShape, Result};
use crate::nn::model::Operand;
use crate::nn::types::{OperandType, OperationType, ScatterReduction};

/// The data, indices and updates of SCATTER_ELEMENTS and SCATTER_ND: updates of the
/// input's type (and, when quantized, its scale and zero point, since updates are stored
/// as they are).
pub(super) fn scatter_operands<'a>(
    ctx: &Operands<'a>,
) -> Result<(&'a Operand, &'a Operand, &'a Operand)> {
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
pub(super) fn scatter_reduction(
    ctx: &Operands,
    index: usize,
    input: &Operand,
) -> Result<ScatterReduction> {
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

/// Gather.
pub(super) fn gather(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[3])?;
    expect_outputs(outputs, 1)?;
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

/// GatherElements.
pub(super) fn gather_elements(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[3])?;
    expect_outputs(outputs, 1)?;
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

/// GatherNd.
pub(super) fn gather_nd(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[3])?;
    expect_outputs(outputs, 1)?;
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

/// ScatterElements.
pub(super) fn scatter_elements(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[5])?;
    expect_outputs(outputs, 1)?;
    let (input, indices, updates) = scatter_operands(ctx)?;
    let axis = ctx.i32(3, "axis")?;
    scatter_reduction(ctx, 4, input)?;
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

/// ScatterNd.
pub(super) fn scatter_nd(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[4])?;
    expect_outputs(outputs, 1)?;
    let (input, indices, updates) = scatter_operands(ctx)?;
    scatter_reduction(ctx, 3, input)?;
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

/// NonZero: the coordinates of the input's non-zero elements (for 8-bit quantized data,
/// stored values other than the zero point), as `[rank, count]` int32. The count depends
/// on the data: known when the input's value is (always at run time), 0 (unknown)
/// otherwise.
pub(super) fn non_zero(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", COUNTABLE)?;
    if input.dimensions.is_empty() {
        return Err(param_err(0, "input", "must have rank 1 or more"));
    }
    let known = !input.dimensions.contains(&0);
    let count = match ctx.value(0) {
        Some(bytes) if known => non_zero_mask(input.operand_type, input.zero_point, bytes)
            .into_iter()
            .filter(|&b| b)
            .count() as u32,
        _ => 0,
    };
    if count == 0 && known && ctx.value(0).is_some() {
        return Err(param_err(
            0,
            "input",
            "has no non-zero element: the result would be empty, and empty tensors are \
             not supported",
        ));
    }
    single(
        OperandType::TensorInt32,
        vec![input.dimensions.len() as u32, count],
    )
}

/// Which elements of a tensor of `operand_type` (holding `bytes`) NON_ZERO counts: the
/// non-zero numbers, and for 8-bit quantized data the stored values other than the zero
/// point. One definition for the shape rule and the kernel.
pub fn non_zero_mask(operand_type: OperandType, zero_point: i32, bytes: &[u8]) -> Vec<bool> {
    match operand_type {
        OperandType::TensorFloat32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) != 0.0)
            .collect(),
        OperandType::TensorInt32 => bytes
            .chunks_exact(4)
            .map(|c| c.iter().any(|&b| b != 0))
            .collect(),
        OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned => {
            let zero = zero_point as u8;
            bytes.iter().map(|&b| b != zero).collect()
        }
        _ => bytes.iter().map(|&b| b != 0).collect(),
    }
}
