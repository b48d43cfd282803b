//! Control flow (IF, WHILE).
//!
//! Their outputs depend on the referenced subgraphs, which an operation's inputs alone do
//! not show: [`super::infer`] checks only what the operation itself holds (the condition,
//! the SUBGRAPH operands) and returns the declared outputs; [`infer_control_flow`] checks
//! everything against the subgraphs and infers the output shapes.

use super::context::*;
use super::{InputView, OutputShape, Result, SignatureError, infer};
use crate::nn::model::Operand;
use crate::nn::types::{Lifetime, OperandType, OperationType};

/// The part of an IF/WHILE signature that needs no subgraph: input and output counts, the
/// IF condition's type, the SUBGRAPH operands. Outputs are returned as declared.
pub(super) fn structure(
    op: OperationType,
    ctx: &Operands,
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
        if !crate::nn::model::dims_compatible(&cond.dimensions, &[1]) {
            return Err(param_err(
                0,
                "condition",
                format!(
                    "must have shape [1], has {}",
                    crate::nn::model::dims_to_string(&cond.dimensions)
                ),
            ));
        }
        &[1, 2]
    } else {
        &[0, 1]
    };
    for &index in subgraphs {
        let role = super::input_role(op, index, ctx.inputs.len()).name();
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
        && crate::nn::model::dims_compatible(&value.dimensions, &slot.dimensions)
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
pub(super) fn referenced<'g>(
    ctx: &Operands,
    index: usize,
    role: &str,
    graphs: &[&'g crate::nn::model::Subgraph],
) -> Result<(usize, &'g crate::nn::model::Subgraph)> {
    let t = ctx.operand(index).location.offset;
    match usize::try_from(t).ok().filter(|&t| t >= 1) {
        Some(t) if t < graphs.len() => Ok((t, graphs[t])),
        _ => Err(SignatureError::ControlFlow(format!(
            "input {index} ({role}) refers to subgraph {t}, which does not exist (the model has {} referenced subgraphs)",
            graphs.len().saturating_sub(1)
        ))),
    }
}

pub(super) fn operand_of<'g>(
    g: &'g crate::nn::model::Subgraph,
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
pub(super) fn check_subgraph_inputs(
    role: &str,
    t: usize,
    g: &crate::nn::model::Subgraph,
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
    graphs: &[&crate::nn::model::Subgraph],
) -> Result<Vec<OutputShape>> {
    match super::schema(op).subgraph_rule {
        Some(rule) => rule(op, inputs, outputs, graphs),
        None => infer(op, inputs, outputs),
    }
}

/// IF against its branches.
pub(super) fn infer_if(
    op: OperationType,
    inputs: &[InputView],
    outputs: &[&Operand],
    graphs: &[&crate::nn::model::Subgraph],
) -> Result<Vec<OutputShape>> {
    let ctx = Operands { inputs };
    structure(op, &ctx, outputs)?;
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

/// WHILE against its condition and body.
pub(super) fn infer_while(
    op: OperationType,
    inputs: &[InputView],
    outputs: &[&Operand],
    graphs: &[&crate::nn::model::Subgraph],
) -> Result<Vec<OutputShape>> {
    let ctx = Operands { inputs };
    structure(op, &ctx, outputs)?;
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
        || !crate::nn::model::dims_compatible(&c.dimensions, &[1])
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
