//! Fuses RELU, RELU1 and RELU6 into the fused-activation operand of the operation that
//! produces their input (convolutions, pools, FULLY_CONNECTED, ADD/SUB/MUL/DIV).

use std::collections::BTreeMap;

use nnc_formats::nn::{FusedActivation, Lifetime, Model};

use super::graph::{self, Uses};

pub fn run(model: &mut Model) -> Result<BTreeMap<String, usize>, String> {
    let mut changes = BTreeMap::new();
    let mut i = 0;
    while i < model.main.operations.len() {
        if let Some((activation, into)) = try_fuse(model, i) {
            *changes
                .entry(format!("{activation} fused into {into}"))
                .or_insert(0) += 1;
            continue;
        }
        i += 1;
    }
    Ok(changes)
}

/// Fuses activation operation `i` into its producer; returns (activation, producer type).
fn try_fuse(model: &mut Model, i: usize) -> Option<(&'static str, &'static str)> {
    let op = &model.main.operations[i];
    let activation = FusedActivation::from_operation(op.op_type)?;
    let (x, y) = (op.inputs[0], op.outputs[0]);
    let uses = Uses::of(model);
    // The producer's output must feed only this activation.
    if uses.single_reader(x).is_none()
        || model.main.operands[x as usize].lifetime != Lifetime::TemporaryVariable
    {
        return None;
    }
    let p = graph::producers(model)[x as usize]?;
    let producer = &model.main.operations[p];
    let k = graph::activation_input(producer)?;
    if graph::const_i32(model, producer.inputs[k]) != Some(FusedActivation::None as i32) {
        return None;
    }
    // Quantized producers must already produce in the activation's output scale.
    let (xo, yo) = (
        &model.main.operands[x as usize],
        &model.main.operands[y as usize],
    );
    if xo.operand_type.is_quantized() && (xo.scale != yo.scale || xo.zero_point != yo.zero_point) {
        return None;
    }
    let code = model.add_i32(activation as i32);
    let producer = &mut model.main.operations[p];
    producer.inputs[k] = code;
    producer.outputs[0] = y;
    let into = producer.op_type.name();
    model.main.operations.remove(i);
    Some((activation.name(), into))
}
