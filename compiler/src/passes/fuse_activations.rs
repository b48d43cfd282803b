//! Fuses RELU, RELU1 and RELU6 into the fused-activation operand of the operation that
//! produces their input (convolutions, pools, FULLY_CONNECTED, ADD/SUB/MUL/DIV), also
//! across a reshape between the two.

use std::collections::BTreeMap;

use nnc_formats::nn::{FusedActivation, Lifetime, Model, OperationType};

use super::graph::{self, GraphIndex};

pub fn run(model: &mut Model) -> Result<BTreeMap<String, usize>, String> {
    let mut changes = BTreeMap::new();
    let mut index = GraphIndex::new(model);
    for i in 0..model.main.operations.len() {
        if index.is_removed(i) {
            continue;
        }
        if let Some((activation, into)) = try_fuse(model, &mut index, i) {
            *changes
                .entry(format!("{activation} fused into {into}"))
                .or_insert(0) += 1;
        }
    }
    index.compact(model);
    Ok(changes)
}

/// Fuses activation operation `i` into its producer; returns (activation, producer type).
fn try_fuse(
    model: &mut Model,
    index: &mut GraphIndex,
    i: usize,
) -> Option<(&'static str, &'static str)> {
    let op = &model.main.operations[i];
    let activation = FusedActivation::from_operation(op.op_type)?;
    let (x, y) = (op.inputs[0], op.outputs[0]);
    // The producer's output must feed only this activation.
    if index.single_reader(model, x).is_none()
        || model.main.operands[x as usize].lifetime != Lifetime::TemporaryVariable
    {
        return None;
    }
    let mut p = index.producer(x)?;
    // A reshape between them (a 1-D or 3-D convolution's way back to its rank) moves
    // the values unchanged, so the activation may go before it: the producer behind
    // it takes the activation and the reshape writes the activation's output.
    let mut reshape = None;
    let moved = &model.main.operations[p];
    if matches!(
        moved.op_type,
        OperationType::Reshape | OperationType::Squeeze | OperationType::ExpandDims
    ) {
        let r = moved.inputs[0];
        if index.single_reader(model, r) != Some(p)
            || model.main.operands[r as usize].lifetime != Lifetime::TemporaryVariable
        {
            return None;
        }
        reshape = Some(p);
        p = index.producer(r)?;
    }
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
    let into = model.main.operations[p].op_type.name();
    index.remove(model, i);
    index.set_input(model, p, k, code);
    index.set_output(model, reshape.unwrap_or(p), 0, y);
    Some((activation.name(), into))
}
