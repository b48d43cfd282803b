//! Folds per-channel affine transforms (what BatchNormalization lowers to: a MUL and an
//! ADD by constants along the channel axis) into the convolution or fully-connected
//! operation before them, by scaling its filter and bias.

use std::collections::BTreeMap;

use nnc_formats::nn::{FusedActivation, Lifetime, Model, OperandIndex, OperandType, OperationType};

use super::graph::{self, GraphIndex};

pub fn run(model: &mut Model) -> Result<BTreeMap<String, usize>, String> {
    let mut changes = BTreeMap::new();
    let mut index = GraphIndex::new(model);
    for i in 0..model.main.operations.len() {
        if index.is_removed(i) {
            continue;
        }
        if let Some(kind) = try_fold(model, &mut index, i) {
            *changes
                .entry(format!("{kind} folded into the preceding layer"))
                .or_insert(0) += 1;
        }
    }
    index.compact(model);
    Ok(changes)
}

/// The per-output-channel values of constant `c` for `channels` channels on the last
/// axis (a scalar broadcasts), or `None` if `c` is not such a constant.
fn per_channel(
    model: &Model,
    c: OperandIndex,
    channels: usize,
    out_rank: usize,
) -> Option<Vec<f32>> {
    let operand = model.operand(c)?;
    if operand.operand_type != OperandType::TensorFloat32 || operand.dimensions.len() > out_rank {
        return None;
    }
    let values = graph::const_f32s(model, c)?;
    let dims = &operand.dimensions;
    // Every dimension but the last must be 1.
    if dims.iter().rev().skip(1).any(|&d| d != 1) {
        return None;
    }
    match values.len() {
        1 => Some(vec![values[0]; channels]),
        n if n == channels => Some(values),
        _ => None,
    }
}

/// A per-channel affine transform by a constant, by the binary operation that applies it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Affine {
    /// MUL: scales the filter and the bias.
    Scale,
    /// ADD: shifts the bias up.
    Add,
    /// SUB of the constant: shifts the bias down.
    Subtract,
}

/// The operations that apply an [`Affine`].
const AFFINES: &[(OperationType, Affine)] = &[
    (OperationType::Mul, Affine::Scale),
    (OperationType::Add, Affine::Add),
    (OperationType::Sub, Affine::Subtract),
];

/// The layers an affine folds into, with the filter axis that holds their output
/// channels: first in OHWI and [units, K] filters, last in depthwise 1HWO ones.
const OUTPUT_CHANNEL_AXIS: &[(OperationType, usize)] = &[
    (OperationType::Conv2d, 0),
    (OperationType::GroupedConv2d, 0),
    (OperationType::FullyConnected, 0),
    (OperationType::DepthwiseConv2d, 3),
];

/// The value `table` holds for `op`, if it has a row for it.
fn lookup<T: Copy>(table: &[(OperationType, T)], op: OperationType) -> Option<T> {
    table.iter().find(|(t, _)| *t == op).map(|&(_, v)| v)
}

fn try_fold(model: &mut Model, index: &mut GraphIndex, i: usize) -> Option<&'static str> {
    use OperationType as O;
    let op = model.main.operations[i].clone();
    let affine = lookup(AFFINES, op.op_type)?;
    // MUL and ADD commute: exporters often write the constant first (`Add(bias, x)`).
    let (x, c) = if affine != Affine::Subtract && graph::is_constant(model, op.inputs[0]) {
        (op.inputs[1], op.inputs[0])
    } else {
        (op.inputs[0], op.inputs[1])
    };
    if model.main.operands[x as usize].lifetime != Lifetime::TemporaryVariable
        || index.single_reader(model, x) != Some(i)
    {
        return None;
    }
    let mut p = index.producer(x)?;
    // A FULLY_CONNECTED on a 3-D activation is RESHAPE(2-D) -> FC -> RESHAPE(3-D) (what
    // transformer MatMul + bias lowers to): a reshape that keeps the last dimension passes
    // channels through, so the affine folds into the FC before it, and the reshape then
    // produces the affine's output.
    let mut reshape = None;
    if model.main.operations[p].op_type == O::Reshape {
        let r = p;
        let f = model.main.operations[r].inputs[0];
        let fc = index.producer(f)?;
        let last = |o: OperandIndex| model.main.operands[o as usize].dimensions.last().copied();
        if model.main.operations[fc].op_type != O::FullyConnected
            || model.main.operands[f as usize].lifetime != Lifetime::TemporaryVariable
            || index.single_reader(model, f) != Some(r)
            || last(f).is_none()
            || last(f) != last(x)
        {
            return None;
        }
        reshape = Some(r);
        p = fc;
    }
    let layer = model.main.operations[p].clone();
    let filter_axis = lookup(OUTPUT_CHANNEL_AXIS, layer.op_type)?;
    let act_k = graph::activation_input(&layer)?;
    if graph::const_i32(model, layer.inputs[act_k]) != Some(FusedActivation::None as i32) {
        return None;
    }
    let out_dims = model.main.operands[x as usize].dimensions.clone();
    let channels = *out_dims.last()? as usize;
    let values = per_channel(model, c, channels, out_dims.len())?;
    let filter = model.operand(layer.inputs[1])?.clone();
    if filter.operand_type != OperandType::TensorFloat32 {
        return None;
    }
    let mut weights = graph::const_f32s(model, layer.inputs[1])?;
    let mut bias = graph::const_f32s(model, layer.inputs[2])?;
    if bias.len() != channels || filter.dimensions.get(filter_axis).copied()? as usize != channels {
        return None;
    }
    let kind = match affine {
        Affine::Scale => {
            // Scale output channel k of the filter: axis 0 (OHWI, [units, K]) or 3 (1HWO).
            let inner: usize = filter.dimensions[filter_axis + 1..]
                .iter()
                .map(|&d| d as usize)
                .product();
            for (idx, w) in weights.iter_mut().enumerate() {
                let k = (idx / inner) % channels;
                *w *= values[k];
            }
            for (b, v) in bias.iter_mut().zip(&values) {
                *b *= v;
            }
            "channel scale (MUL)"
        }
        Affine::Add => {
            bias.iter_mut().zip(&values).for_each(|(b, v)| *b += v);
            "channel shift (ADD)"
        }
        Affine::Subtract => {
            bias.iter_mut().zip(&values).for_each(|(b, v)| *b -= v);
            "channel shift (SUB)"
        }
    };
    let new_filter = if affine == Affine::Scale {
        let mut f = filter.clone();
        f.name.clear();
        model.add_f32_tensor(f.dimensions.clone(), &weights)
    } else {
        layer.inputs[1]
    };
    let new_bias = model.add_f32_tensor(vec![channels as u32], &bias);
    let y = op.outputs[0];
    let activation = op.inputs[2];
    index.remove(model, i);
    index.set_input(model, p, 1, new_filter);
    index.set_input(model, p, 2, new_bias);
    index.set_input(model, p, act_k, activation);
    index.set_output(model, reshape.unwrap_or(p), 0, y);
    Some(kind)
}
