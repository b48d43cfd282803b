//! `--quantize dynamic`: weight-only int8 for the fully-connected products, with the
//! activations quantized per row when the model runs (the nnc extension
//! DYNAMIC_FULLY_CONNECTED, docs/EXTENSIONS.md). What ONNX Runtime's `quantize_dynamic`
//! does for transformers: their MatMul/Gemm weights (most of a BERT's bytes and time)
//! become int8 with no calibration data, and everything else stays float.
//!
//! Why a separate mode from static int8: a transformer's activations (LayerNorm outputs,
//! attention scores, GELU) have ranges that vary by token and by input, so one calibrated
//! range per tensor serves them poorly, while a range per row at run time follows them.

use std::collections::BTreeSet;

use nnc_formats::nn::{
    ChannelQuant, Lifetime, Model, Operand, OperandType, Operation, OperationType,
    ops::DYNAMIC_FULLY_CONNECTED_MAX_DEPTH,
};

use super::rewrite::{SymmetricWeights, symmetric_weights};
use super::{QuantizeError, resolve_keep_float};
use crate::passes::graph::const_f32s;

/// How to quantize dynamically.
#[derive(Clone, Debug)]
pub struct DynamicOptions {
    /// One weight scale per unit (else one per tensor).
    pub per_channel: bool,
    /// Operations kept in float, by source node name or output tensor name.
    pub keep_float: Vec<String>,
}

/// What the pass did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DynamicSummary {
    /// FULLY_CONNECTED operations now DYNAMIC_FULLY_CONNECTED.
    pub quantized: usize,
    /// Bytes of their weights before (float32) and after (int8).
    pub weight_bytes_float: u64,
    pub weight_bytes_int8: u64,
    /// FULLY_CONNECTED operations left in float: source name and why.
    pub kept: Vec<(String, String)>,
}

impl DynamicSummary {
    /// The lines `nnc compile` prints.
    pub fn text(&self) -> String {
        let mut s = format!(
            "quantized {} FULLY_CONNECTED operation(s) dynamically: weights {} -> {} bytes \
             (int8), activations quantized per row at run time\n",
            self.quantized, self.weight_bytes_float, self.weight_bytes_int8
        );
        for (name, why) in &self.kept {
            s.push_str(&format!("  kept in float: {name}: {why}\n"));
        }
        s
    }
}

/// `model` with every FULLY_CONNECTED of float32 data and constant float32 weights
/// (except those `options.keep_float` names) as DYNAMIC_FULLY_CONNECTED with symmetric
/// int8 weights.
pub fn quantize_dynamic(
    model: &Model,
    options: &DynamicOptions,
) -> Result<(Model, DynamicSummary), QuantizeError> {
    let keep = resolve_keep_float(model, &options.keep_float)?;
    let mut out = model.clone();
    let mut summary = DynamicSummary::default();
    let mut replaced = Vec::new();
    for (i, op) in model.main.operations.iter().enumerate() {
        if op.op_type != OperationType::FullyConnected {
            continue;
        }
        match eligible(model, op, i, &keep) {
            Err(why) => summary.kept.push((label(op, i), why)),
            Ok(values) => {
                let w = &model.main.operands[op.inputs[1] as usize];
                let dims: Vec<usize> = w.dimensions.iter().map(|&d| d as usize).collect();
                let SymmetricWeights { bytes, scales, .. } =
                    symmetric_weights(&values, &dims, 0, options.per_channel);
                let operand = weights_operand(w.dimensions.clone(), scales, options.per_channel)
                    .with_name(w.name.clone());
                summary.weight_bytes_float += 4 * values.len() as u64;
                summary.weight_bytes_int8 += bytes.len() as u64;
                summary.quantized += 1;
                let weights = out.add_constant_owned(operand, bytes);
                replaced.push((i, weights));
            }
        }
    }
    for (i, weights) in replaced {
        let op = &mut out.main.operations[i];
        op.op_type = OperationType::DynamicFullyConnected;
        op.inputs[1] = weights;
    }
    // The float weights no longer read: their operands and bytes go.
    crate::passes::dead_code::compact(&mut out);
    nnc_formats::nn::validate(&out)?;
    Ok((out, summary))
}

/// The weights operand of a DYNAMIC_FULLY_CONNECTED, `dims` = `[units, depth]`, for
/// int8 values with zero point 0: TENSOR_QUANT8_SYMM_PER_CHANNEL along dimension 0 with
/// one scale per unit, or TENSOR_QUANT8_SYMM with `scales[0]`. Shared with the ONNX
/// frontend, which lowers models ONNX Runtime quantized to the same operation.
pub fn weights_operand(dims: Vec<u32>, scales: Vec<f32>, per_channel: bool) -> Operand {
    if per_channel {
        Operand {
            channel_quant: Some(ChannelQuant {
                scales,
                channel_dim: 0,
            }),
            ..Operand::new(OperandType::TensorQuant8SymmPerChannel, dims)
        }
    } else {
        let scale = scales.first().copied().unwrap_or(1.0);
        Operand::new(OperandType::TensorQuant8Symm, dims).with_quant(scale, 0)
    }
}

/// The float weights of FULLY_CONNECTED `op` (index `i`) when it can run dynamically;
/// otherwise why not.
fn eligible(
    model: &Model,
    op: &Operation,
    i: usize,
    keep: &BTreeSet<usize>,
) -> Result<Vec<f32>, String> {
    if keep.contains(&i) {
        return Err("named by --keep-float".into());
    }
    let g = &model.main;
    let operand = |k: usize| op.inputs.get(k).map(|&o| &g.operands[o as usize]);
    if operand(0).is_none_or(|x| x.operand_type != OperandType::TensorFloat32) {
        return Err("its input is not float32".into());
    }
    let Some(w) = operand(1) else {
        return Err("it has no weights".into());
    };
    if w.operand_type != OperandType::TensorFloat32
        || !w.lifetime.is_constant()
        || !w.is_fully_specified()
    {
        return Err("its weights are not constant float32 values".into());
    }
    if operand(2).is_some_and(|b| {
        b.lifetime != Lifetime::NoValue && b.operand_type != OperandType::TensorFloat32
    }) {
        return Err("its bias is not float32".into());
    }
    if w.dimensions
        .get(1)
        .is_none_or(|&k| k > DYNAMIC_FULLY_CONNECTED_MAX_DEPTH)
    {
        return Err(format!(
            "its depth is above {DYNAMIC_FULLY_CONNECTED_MAX_DEPTH}, where int32 sums could \
             overflow"
        ));
    }
    const_f32s(model, op.inputs[1]).ok_or_else(|| "its weights have no value at hand".into())
}

fn label(op: &Operation, i: usize) -> String {
    if op.source.is_empty() {
        format!("operation {i}")
    } else {
        op.source.clone()
    }
}
