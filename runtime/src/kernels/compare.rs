//! Comparisons (EQUAL, NOT_EQUAL, LESS, LESS_EQUAL, GREATER, GREATER_EQUAL) producing
//! TENSOR_BOOL8 bytes 0/1, LOGICAL_AND / LOGICAL_OR, and SELECT; all with NumPy
//! broadcasting. Bool8 inputs compare as false < true (any non-zero byte is true).

use nnc_formats::nn::OperandType;

use super::elementwise::{broadcast_map, broadcast_map3};
use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

/// The comparison or logical connective an operation computes, chosen where the
/// operation is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

struct Compare {
    op: CompareOp,
    operand_type: OperandType,
}

struct Select {
    operand_type: OperandType,
}

/// SELECT.
pub(crate) fn build_select(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(1)?;
    if !matches!(
        t,
        OperandType::TensorFloat32
            | OperandType::TensorInt32
            | OperandType::TensorBool8
            | OperandType::TensorQuant8Asymm
            | OperandType::TensorQuant8AsymmSigned
    ) {
        return Err(info.unsupported(format!("operand type {t}")));
    }
    Ok(Box::new(Select { operand_type: t }))
}

/// The comparisons, LOGICAL_AND and LOGICAL_OR.
pub(crate) fn build(info: &OpInfo, op: CompareOp) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(0)?;
    let logical = matches!(op, CompareOp::And | CompareOp::Or);
    let supported = match t {
        OperandType::TensorBool8 => true,
        OperandType::TensorFloat32 | OperandType::TensorInt32 => !logical,
        _ => false,
    };
    if !supported {
        return Err(info.unsupported(format!("operand type {t}")));
    }
    Ok(Box::new(Compare {
        op,
        operand_type: t,
    }))
}

fn compare<T: PartialOrd>(op: CompareOp, a: T, b: T) -> u8 {
    u8::from(match op {
        CompareOp::Eq => a == b,
        CompareOp::Ne => a != b,
        CompareOp::Lt => a < b,
        CompareOp::Le => a <= b,
        CompareOp::Gt => a > b,
        CompareOp::Ge => a >= b,
        // Logical operations exist for bool8 only (checked at build) and are handled there.
        CompareOp::And | CompareOp::Or => false,
    })
}

impl Kernel for Compare {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let a = ctx.input(0)?;
        let b = ctx.input(1)?;
        let out = ctx.output(0)?;
        let so = out.shape;
        let o = out.u8_mut()?;
        let op = self.op;
        match self.operand_type {
            OperandType::TensorFloat32 => {
                broadcast_map(a.f32()?, a.shape, b.f32()?, b.shape, o, so, |x, y| {
                    compare(op, x, y)
                })
            }
            OperandType::TensorInt32 => {
                broadcast_map(a.i32()?, a.shape, b.i32()?, b.shape, o, so, |x, y| {
                    compare(op, x, y)
                })
            }
            OperandType::TensorBool8 => {
                let f = |x: u8, y: u8| {
                    let (x, y) = (x != 0, y != 0);
                    match op {
                        CompareOp::And => u8::from(x && y),
                        CompareOp::Or => u8::from(x || y),
                        _ => compare(op, x, y),
                    }
                };
                broadcast_map(a.u8()?, a.shape, b.u8()?, b.shape, o, so, f)
            }
            t => Err(RuntimeError::kernel(format!(
                "operand type {t} is not implemented"
            ))),
        }
    }
}

impl Kernel for Select {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let c = ctx.input(0)?;
        let a = ctx.input(1)?;
        let b = ctx.input(2)?;
        let out = ctx.output(0)?;
        let so = out.shape;
        let cond = c.u8()?;
        fn pick<T>(c: u8, x: T, y: T) -> T {
            if c != 0 { x } else { y }
        }
        match self.operand_type {
            OperandType::TensorFloat32 => broadcast_map3(
                cond,
                c.shape,
                a.f32()?,
                a.shape,
                b.f32()?,
                b.shape,
                out.f32_mut()?,
                so,
                pick::<f32>,
            ),
            OperandType::TensorInt32 => broadcast_map3(
                cond,
                c.shape,
                a.i32()?,
                a.shape,
                b.i32()?,
                b.shape,
                out.i32_mut()?,
                so,
                pick::<i32>,
            ),
            OperandType::TensorBool8 => broadcast_map3(
                cond,
                c.shape,
                a.u8()?,
                a.shape,
                b.u8()?,
                b.shape,
                out.u8_mut()?,
                so,
                |c, x: u8, y: u8| u8::from(if c != 0 { x != 0 } else { y != 0 }),
            ),
            // 8-bit quantized: each chosen value in the output's quantization (the same
            // bytes when the quantizations agree, as ONNX's integer Where has them).
            OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned => {
                let signed = self.operand_type == OperandType::TensorQuant8AsymmSigned;
                let (s_out, z_out) = (out.scale, out.zero_point);
                let requantized = |t: &crate::tensor::TensorRef| -> Result<Vec<u8>> {
                    let bytes = t.q8()?;
                    if t.scale == s_out && t.zero_point == z_out {
                        return Ok(bytes.to_vec());
                    }
                    let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
                    Ok(bytes
                        .iter()
                        .map(|&q| {
                            let v = if signed {
                                i32::from(q as i8)
                            } else {
                                i32::from(q)
                            };
                            let real = (v - t.zero_point) as f32 * t.scale;
                            let q = (real / s_out).round_ties_even() as i32 + z_out;
                            q.clamp(lo, hi) as u8
                        })
                        .collect())
                };
                let (qa, qb) = (requantized(&a)?, requantized(&b)?);
                broadcast_map3(
                    cond,
                    c.shape,
                    &qa,
                    a.shape,
                    &qb,
                    b.shape,
                    out.q8_mut()?,
                    so,
                    pick::<u8>,
                )
            }
            t => Err(RuntimeError::kernel(format!(
                "operand type {t} is not implemented"
            ))),
        }
    }
}
