//! Concatenations done in place: the operations producing a CONCATENATION's inputs write
//! straight into their slices of its output, and the concatenation copies nothing.
//!
//! In NHWC a concatenation along the last axis (channels, in SqueezeNet's fire modules
//! and Inception's branches) places each input's rows (runs of the last dimension) in
//! the output's rows, at the input's first channel. A producer that can write rows a
//! stride apart ([`kernels::writes_row_slices`]) is given that part of the output as
//! its own ([`crate::tensor::TensorMut::row_stride`]). It must be the input's only
//! writer, and the concatenation its only reader: the memory plan then has no buffer for
//! the input, the output's buffer lives from the first such producer on, and the
//! concatenation is skipped.
//!
//! Which concatenations qualify is a function of the graph and the shapes alone, so a
//! cached plan (which records the skip and the slices' offsets) is checked against the
//! same rule when it is loaded.

use nnc_formats::nn::{Lifetime, Model, OperandType, OperationType};

use crate::kernels;

/// Who writes and how many operations read each operand of a graph.
pub(crate) struct Uses {
    /// The operation writing each operand (`usize::MAX`: none).
    pub producer: Vec<usize>,
    /// How many input positions of all operations name each operand.
    pub readers: Vec<usize>,
}

impl Uses {
    pub fn of(model: &Model) -> Uses {
        let n = model.main.operands.len();
        let mut producer = vec![usize::MAX; n];
        let mut readers = vec![0usize; n];
        for (i, op) in model.main.operations.iter().enumerate() {
            for &o in &op.outputs {
                if let Some(p) = producer.get_mut(o as usize) {
                    *p = i;
                }
            }
            for &o in &op.inputs {
                if let Some(r) = readers.get_mut(o as usize) {
                    *r += 1;
                }
            }
        }
        Uses { producer, readers }
    }
}

/// One input of a concatenation done in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slice {
    pub operand: u32,
    /// Bytes from the output's start to the slice's first element.
    pub offset: usize,
    /// Bytes from its first element to its last (the rows and the gaps between them).
    pub span: usize,
}

/// A concatenation whose inputs are slices of its output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InPlaceConcat {
    pub output: u32,
    /// Elements of a row of the output (its last dimension): the slices' row stride.
    pub row: usize,
    pub slices: Vec<Slice>,
}

/// Operation `i` as an in-place concatenation, when it is one that qualifies: float32,
/// along the last axis, every input a temporary written by its own producer that writes
/// row slices, read by this concatenation alone, with a known shape.
pub(crate) fn in_place_concat(
    model: &Model,
    i: usize,
    shapes: &[Option<Vec<usize>>],
    uses: &Uses,
) -> Option<InPlaceConcat> {
    let ops = &model.main.operations;
    let operands = &model.main.operands;
    let op = ops.get(i)?;
    if op.op_type != OperationType::Concatenation {
        return None;
    }
    let (&axis_operand, tensors) = op.inputs.split_last()?;
    let &[output] = op.outputs.as_slice() else {
        return None;
    };
    let out_shape = shapes.get(output as usize)?.as_deref()?;
    let (&row, outer) = out_shape.split_last()?;
    let float = |o: u32| {
        operands
            .get(o as usize)
            .is_some_and(|o| o.operand_type == OperandType::TensorFloat32)
    };
    if tensors.is_empty() || !float(output) || row == 0 {
        return None;
    }
    let axis = i32::from_le_bytes(model.constant_bytes(axis_operand)?.try_into().ok()?);
    let rank = out_shape.len() as i32;
    if axis != rank - 1 && axis != -1 {
        return None;
    }
    let rows: usize = outer.iter().product();
    let mut first = 0usize;
    let mut slices = Vec::with_capacity(tensors.len());
    for &t in tensors {
        let operand = operands.get(t as usize)?;
        let shape = shapes.get(t as usize)?.as_deref()?;
        let (&len, t_outer) = shape.split_last()?;
        let p = *uses.producer.get(t as usize)?;
        let producer = ops.get(p)?;
        if operand.lifetime != Lifetime::TemporaryVariable
            || !float(t)
            || t_outer != outer
            || len == 0
            || p >= i
            || producer.outputs.as_slice() != [t]
            || !kernels::writes_row_slices(producer, operands)
            || uses.readers.get(t as usize) != Some(&1)
        {
            return None;
        }
        let span = rows.checked_sub(1)?.checked_mul(row)?.checked_add(len)?;
        slices.push(Slice {
            operand: t,
            offset: first.checked_mul(4)?,
            span: span.checked_mul(4)?,
        });
        first = first.checked_add(len)?;
    }
    (first == row).then_some(InPlaceConcat {
        output,
        row,
        slices,
    })
}

/// The row stride (elements) of every operand that a skipped concatenation of `skip`
/// has as a slice of its output; `None` for the dense ones.
pub(crate) fn row_strides(
    model: &Model,
    skip: &[bool],
    shapes: &[Option<Vec<usize>>],
    uses: &Uses,
) -> Vec<Option<usize>> {
    let mut strides = vec![None; model.main.operands.len()];
    for (i, _) in skip.iter().enumerate().filter(|(_, s)| **s) {
        if let Some(concat) = in_place_concat(model, i, shapes, uses) {
            for s in &concat.slices {
                strides[s.operand as usize] = Some(concat.row);
            }
        }
    }
    strides
}
