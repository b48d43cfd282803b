//! Dense linear algebra: FULLY_CONNECTED and BATCH_MATMUL.

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
