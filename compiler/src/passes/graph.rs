//! Graph-editing helpers shared by the passes.
//!
//! Passes edit `model.main` in place and keep two invariants: operations stay in
//! topological order, and every operand has at most one writer. Removed operations are
//! deleted immediately; operands they leave unused are collected by the dead-code pass.

use nnc_formats::nn::signature::{InputView, infer};
use nnc_formats::nn::{
    Lifetime, Model, Operand, OperandIndex, OperandType, Operation, OperationType,
};

/// Readers of each operand (operation indices, possibly repeated) and whether it is a
/// model output.
pub struct Uses {
    pub readers: Vec<Vec<usize>>,
    pub is_output: Vec<bool>,
}

impl Uses {
    pub fn of(model: &Model) -> Uses {
        let mut readers = vec![Vec::new(); model.main.operands.len()];
        for (i, op) in model.main.operations.iter().enumerate() {
            for &input in &op.inputs {
                if let Some(r) = readers.get_mut(input as usize) {
                    r.push(i);
                }
            }
        }
        let mut is_output = vec![false; model.main.operands.len()];
        for &o in &model.main.outputs {
            if let Some(flag) = is_output.get_mut(o as usize) {
                *flag = true;
            }
        }
        Uses { readers, is_output }
    }

    /// Number of reads of an operand (an operation reading it twice counts twice).
    pub fn count(&self, operand: OperandIndex) -> usize {
        self.readers[operand as usize].len()
    }

    /// True when the operand is read by exactly one operation, once, and is not an output.
    pub fn single_reader(&self, operand: OperandIndex) -> Option<usize> {
        match self.readers[operand as usize].as_slice() {
            [only] if !self.is_output[operand as usize] => Some(*only),
            _ => None,
        }
    }
}

/// The operation writing each operand.
pub fn producers(model: &Model) -> Vec<Option<usize>> {
    model.producers()
}

pub fn is_constant(model: &Model, operand: OperandIndex) -> bool {
    model
        .operand(operand)
        .is_some_and(|o| o.lifetime.is_constant())
}

/// Little-endian i32 values of a constant operand.
pub fn const_i32s(model: &Model, operand: OperandIndex) -> Option<Vec<i32>> {
    let bytes = model.constant_bytes(operand)?;
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

pub fn const_i32(model: &Model, operand: OperandIndex) -> Option<i32> {
    const_i32s(model, operand).and_then(|v| (v.len() == 1).then(|| v[0]))
}

pub fn const_bool(model: &Model, operand: OperandIndex) -> Option<bool> {
    let b = model.constant_bytes(operand)?;
    (b.len() == 1).then(|| b[0] != 0)
}

pub fn const_f32s(model: &Model, operand: OperandIndex) -> Option<Vec<f32>> {
    let o = model.operand(operand)?;
    if !matches!(
        o.operand_type,
        OperandType::TensorFloat32 | OperandType::Float32
    ) {
        return None;
    }
    let bytes = model.constant_bytes(operand)?;
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// Replaces every read of `from` by `to` in operations at or after `start`.
pub fn replace_reads(model: &mut Model, from: OperandIndex, to: OperandIndex, start: usize) {
    for op in model.main.operations.iter_mut().skip(start) {
        for input in &mut op.inputs {
            if *input == from {
                *input = to;
            }
        }
    }
}

/// Removes an operation that passes its only data input through unchanged (`y = x`),
/// rewiring readers of `y` to `x`. When `y` is a model output, the writer of `x` writes
/// `y` instead, if `x` is a temporary nobody else reads. Returns false (and changes
/// nothing) when neither is possible.
pub fn bypass(model: &mut Model, op_index: usize, data_input: usize) -> bool {
    let op = &model.main.operations[op_index];
    let (x, y) = (op.inputs[data_input], op.outputs[0]);
    let uses = Uses::of(model);
    if !uses.is_output[y as usize] {
        replace_reads(model, y, x, op_index + 1);
        model.main.operations.remove(op_index);
        return true;
    }
    let x_operand = &model.main.operands[x as usize];
    if x_operand.lifetime != Lifetime::TemporaryVariable
        || uses.count(x) != 1
        || uses.is_output[x as usize]
    {
        return false;
    }
    let Some(writer) = producers(model)[x as usize] else {
        return false;
    };
    // The output operand takes over x's shape (they are equal for a pass-through).
    for out in &mut model.main.operations[writer].outputs {
        if *out == x {
            *out = y;
        }
    }
    model.main.operations.remove(op_index);
    true
}

/// Inserts an operation at `position` whose output operands are fresh temporaries with
/// inferred shapes, copying type and quantization from `templates`. Returns the outputs.
pub fn insert_operation(
    model: &mut Model,
    position: usize,
    op_type: OperationType,
    inputs: Vec<OperandIndex>,
    templates: &[Operand],
    source: &str,
) -> Result<Vec<OperandIndex>, String> {
    let shapes = {
        let views: Vec<InputView> = inputs
            .iter()
            .map(|&i| InputView {
                operand: &model.main.operands[i as usize],
                value: model.constant_bytes(i),
            })
            .collect();
        let declared: Vec<&Operand> = templates.iter().collect();
        infer(op_type, &views, &declared).map_err(|e| format!("{}: {e}", op_type.name()))?
    };
    let mut outputs = Vec::with_capacity(shapes.len());
    for (template, shape) in templates.iter().zip(shapes) {
        let mut operand = template.clone();
        operand.operand_type = shape.operand_type;
        operand.dimensions = shape.dimensions;
        operand.lifetime = Lifetime::TemporaryVariable;
        operand.location = Default::default();
        outputs.push(model.add_operand(operand));
    }
    model.main.operations.insert(
        position,
        Operation {
            op_type,
            inputs,
            outputs: outputs.clone(),
            source: source.to_string(),
        },
    );
    Ok(outputs)
}

/// Recomputes the output dimensions of operation `index` from its inputs.
pub fn refresh_shapes(model: &mut Model, index: usize) -> Result<(), String> {
    let op = model.main.operations[index].clone();
    let shapes = {
        let views: Vec<InputView> = op
            .inputs
            .iter()
            .map(|&i| InputView {
                operand: &model.main.operands[i as usize],
                value: model.constant_bytes(i),
            })
            .collect();
        let declared: Vec<&Operand> = op
            .outputs
            .iter()
            .map(|&o| &model.main.operands[o as usize])
            .collect();
        infer(op.op_type, &views, &declared).map_err(|e| format!("{}: {e}", op.op_type.name()))?
    };
    for (&o, shape) in op.outputs.iter().zip(shapes) {
        model.main.operands[o as usize].dimensions = shape.dimensions;
    }
    Ok(())
}

/// Index of the fused-activation input of an operation, when it has one.
pub fn activation_input(op: &Operation) -> Option<usize> {
    use OperationType as O;
    match op.op_type {
        O::Add | O::Sub | O::Mul | O::Div => Some(2),
        O::FullyConnected => Some(3),
        O::Conv2d
        | O::DepthwiseConv2d
        | O::GroupedConv2d
        | O::TransposeConv2d
        | O::AveragePool2d
        | O::MaxPool2d
        | O::L2Pool2d => (0..op.inputs.len()).find(|&k| {
            nnc_formats::nn::signature::input_role(op.op_type, k, op.inputs.len()) == "activation"
        }),
        _ => None,
    }
}

/// Element size of an operand type, for byte-level constant rewrites.
pub fn element_size(t: OperandType) -> usize {
    t.element_size().unwrap_or(1)
}

/// Transposes a constant's bytes: `out[i] = in[perm applied]` with `out.dims[k] = dims[perm[k]]`.
pub fn transpose_bytes(bytes: &[u8], dims: &[u32], perm: &[usize], elem: usize) -> Vec<u8> {
    let r = dims.len();
    let mut strides = vec![1usize; r];
    for i in (0..r.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1] as usize;
    }
    let out_dims: Vec<usize> = perm.iter().map(|&p| dims[p] as usize).collect();
    let total: usize = out_dims.iter().product();
    let mut out = Vec::with_capacity(total * elem);
    let mut idx = vec![0usize; r];
    for _ in 0..total {
        let src: usize = (0..r).map(|d| idx[d] * strides[perm[d]]).sum();
        out.extend_from_slice(&bytes[src * elem..(src + 1) * elem]);
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < out_dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}
