//! Dense linear algebra: FULLY_CONNECTED, BATCH_MATMUL and the extension
//! DYNAMIC_FULLY_CONNECTED.

use super::context::*;
use super::{OutputShape, Result};
use crate::nn::model::Operand;
use crate::nn::types::{OperandType, OperationType};

/// FullyConnected.
pub(super) fn fully_connected(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[4])?;
    expect_outputs(outputs, 1)?;
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
    per_unit_scales(weights)?;
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
    rows_by_units(input, weights, bias, input.operand_type)
}

/// The deepest DYNAMIC_FULLY_CONNECTED: beyond it an i32 sum of products of a quantized
/// row value (at most 255 in magnitude) and a weight (at most 127) could overflow.
pub const DYNAMIC_FULLY_CONNECTED_MAX_DEPTH: u32 = (i32::MAX / (255 * 127)) as u32;

/// DYNAMIC_FULLY_CONNECTED (nnc extension): FULLY_CONNECTED's shapes with float32 input,
/// bias and output and int8 weights, symmetric (zero point 0) per unit or per tensor;
/// the input is quantized per row when it runs (docs/EXTENSIONS.md).
pub(super) fn dynamic_fully_connected(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[4])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
    let weights = ctx.tensor(
        1,
        "weights",
        &[
            OperandType::TensorQuant8SymmPerChannel,
            OperandType::TensorQuant8Symm,
        ],
    )?;
    per_unit_scales(weights)?;
    if weights.operand_type == OperandType::TensorQuant8Symm && weights.zero_point != 0 {
        return Err(param_err(
            1,
            "weights",
            "symmetric weights need zero point 0",
        ));
    }
    require_rank(weights, 1, "weights", 2..=2)?;
    require_rank(input, 0, "input", 2..=usize::MAX)?;
    if let Some(&k) = weights.dimensions.get(1)
        && k > DYNAMIC_FULLY_CONNECTED_MAX_DEPTH
    {
        return Err(param_err(
            1,
            "weights",
            format!(
                "depth {k} is above {DYNAMIC_FULLY_CONNECTED_MAX_DEPTH}, where the int32 sums \
                 could overflow"
            ),
        ));
    }
    let bias = if ctx.present(2) {
        Some(ctx.tensor(2, "bias", &[OperandType::TensorFloat32])?)
    } else {
        None
    };
    ctx.activation(3)?;
    rows_by_units(input, weights, bias, OperandType::TensorFloat32)
}

/// Per-channel weights of a fully-connected product have one scale per unit: along
/// dimension 0 (TFLite allows only that).
fn per_unit_scales(weights: &Operand) -> Result<()> {
    match &weights.channel_quant {
        Some(q) if q.channel_dim != 0 => Err(param_err(
            1,
            "weights",
            format!(
                "per-channel quantization must be along dimension 0, got {}",
                q.channel_dim
            ),
        )),
        _ => Ok(()),
    }
}

/// `[rows, units]` of a fully-connected product, of type `output_type`: the input read
/// as rows of the weights' depth, the bias (if any) one value per unit.
fn rows_by_units(
    input: &Operand,
    weights: &Operand,
    bias: Option<&Operand>,
    output_type: OperandType,
) -> Result<Vec<OutputShape>> {
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
    single(output_type, vec![batch, units])
}

/// BatchMatmul.
pub(super) fn batch_matmul(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[4])?;
    expect_outputs(outputs, 1)?;
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
