//! Typed parameters of STRIDED_SLICE and the pads (PAD, PAD_V2, MIRROR_PAD), decoded once
//! and encoded once.
//!
//! Their vector parameters (begin, end and strides; paddings) are tensor operands,
//! constant or computed at run time, so each type is generic over how it holds them:
//! `Option<Vec<i32>>` as decoded (the values of a constant, `None` for a computed
//! tensor), [`OperandIndex`] when a frontend encodes an operation around operands it
//! already has. `decode` is the one reader (the shape rules, the runtime's kernels, the
//! passes) and `encode` the one writer (the frontends) of the scalar parameters' order
//! and types.

use super::context::*;
use super::{InputView, Result, SignatureError};
use crate::nn::model::{Model, OperandIndex};
use crate::nn::types::{OperandType, OperationType};

/// STRIDED_SLICE: input, begin, end, strides, begin_mask, end_mask, shrink_axis_mask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StridedSlice<V = Option<Vec<i32>>> {
    pub begin: V,
    pub end: V,
    pub strides: V,
    /// Bit `d` set: dimension `d` starts at its first element (last for a negative
    /// stride), whatever `begin` says.
    pub begin_mask: i32,
    /// Bit `d` set: dimension `d` runs to its end, whatever `end` says.
    pub end_mask: i32,
    /// Bit `d` set: dimension `d` selects one element and leaves the result.
    pub shrink_axis_mask: i32,
}

impl StridedSlice {
    pub fn decode(inputs: &[InputView]) -> Result<StridedSlice> {
        let ctx = Operands { inputs };
        ctx.count(&[7])?;
        StridedSlice::decode_params(&ctx)
    }

    pub(in crate::nn::ops) fn decode_params(ctx: &Operands) -> Result<StridedSlice> {
        Ok(StridedSlice {
            begin: ctx.i32_vector(1, "begin")?,
            end: ctx.i32_vector(2, "end")?,
            strides: ctx.i32_vector(3, "strides")?,
            begin_mask: ctx.i32(4, "begin_mask")?,
            end_mask: ctx.i32(5, "end_mask")?,
            shrink_axis_mask: ctx.i32(6, "shrink_axis_mask")?,
        })
    }
}

impl StridedSlice<OperandIndex> {
    /// The operands after the input, in the order `decode` reads them.
    pub fn encode(&self, model: &mut Model) -> Vec<OperandIndex> {
        vec![
            self.begin,
            self.end,
            self.strides,
            model.add_i32(self.begin_mask),
            model.add_i32(self.end_mask),
            model.add_i32(self.shrink_axis_mask),
        ]
    }
}

/// The scalar PAD_V2 fills with, in the type its input takes: INT32 for integer and
/// quantized inputs (a quantized value), FLOAT32 (or FLOAT16) for float inputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadValue {
    Int(i32),
    Float(f32),
}

/// What the padding holds, which decides the operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadFill {
    /// PAD: zeros (the zero point of a quantized input).
    Zeros,
    /// PAD_V2: a given value.
    Value(PadValue),
    /// MIRROR_PAD: the input reflected, excluding the edge (REFLECT) or including it
    /// (SYMMETRIC).
    Mirror { symmetric: bool },
}

impl PadFill {
    /// The operation that pads this way.
    pub fn op_type(self) -> OperationType {
        match self {
            PadFill::Zeros => OperationType::Pad,
            PadFill::Value(_) => OperationType::PadV2,
            PadFill::Mirror { .. } => OperationType::MirrorPad,
        }
    }
}

/// PAD, PAD_V2 and MIRROR_PAD: input, paddings (`[rank, 2]`: before and after each
/// dimension), then PAD_V2's value or MIRROR_PAD's mode.
#[derive(Clone, Debug, PartialEq)]
pub struct Pad<V = Option<Vec<i32>>> {
    pub paddings: V,
    pub fill: PadFill,
}

impl Pad {
    pub fn decode(op: OperationType, inputs: &[InputView]) -> Result<Pad> {
        let ctx = Operands { inputs };
        Pad::count(op, &ctx)?;
        Pad::decode_params(op, &ctx)
    }

    pub(in crate::nn::ops) fn count(op: OperationType, ctx: &Operands) -> Result<()> {
        ctx.count(if op == OperationType::Pad { &[2] } else { &[3] })
    }

    /// The parameters of `op`, after checking the input's type (ANY_DATA).
    pub(in crate::nn::ops) fn decode_params(op: OperationType, ctx: &Operands) -> Result<Pad> {
        let input = ctx.tensor(0, "input", ANY_DATA)?;
        let paddings = if ctx.inputs[1].value.is_some() {
            Some(ctx.i32_values(1, "paddings")?)
        } else {
            ctx.tensor(1, "paddings", INT_VECTOR)?;
            None
        };
        let fill = if op == OperationType::PadV2 {
            {
                let t = ctx.operand(2).operand_type;
                let value = if input.operand_type.is_quantized()
                    || input.operand_type == OperandType::TensorInt32
                {
                    PadValue::Int(ctx.i32(2, "pad_value")?)
                } else if t == OperandType::Float16 || t == OperandType::Float32 {
                    PadValue::Float(ctx.f32(2, "pad_value")?)
                } else {
                    return Err(SignatureError::InputType {
                        index: 2,
                        role: "pad_value",
                        expected: "a scalar of the input's element type".into(),
                        actual: t,
                    });
                };
                PadFill::Value(value)
            }
        } else if op == OperationType::MirrorPad {
            {
                let mode = ctx.i32(2, "mode")?;
                if !(0..=1).contains(&mode) {
                    return Err(param_err(
                        2,
                        "mode",
                        format!("must be 0 (REFLECT) or 1 (SYMMETRIC), got {mode}"),
                    ));
                }
                PadFill::Mirror {
                    symmetric: mode == 1,
                }
            }
        } else {
            PadFill::Zeros
        };
        Ok(Pad { paddings, fill })
    }
}

impl Pad<OperandIndex> {
    /// The operands after the input, in the order `decode` reads them; the operation is
    /// `self.fill.op_type()`.
    pub fn encode(&self, model: &mut Model) -> Vec<OperandIndex> {
        let mut out = vec![self.paddings];
        match self.fill {
            PadFill::Zeros => {}
            PadFill::Value(PadValue::Int(v)) => out.push(model.add_i32(v)),
            PadFill::Value(PadValue::Float(v)) => out.push(model.add_f32(v)),
            PadFill::Mirror { symmetric } => out.push(model.add_i32(i32::from(symmetric))),
        }
        out
    }
}
