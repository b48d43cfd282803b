//! Evaluating one operation whose inputs are all constants: the compiler's constant
//! folding runs the same kernels as execution, so folded values are bit-identical to what
//! a single-threaded execution computes.

use nnc_formats::nn::ops::{self, InputView};
use nnc_formats::nn::{Lifetime, Operand, Operation};

use crate::buffer::AlignedBuf;
use crate::error::{OpRef, Result, RuntimeError};
use crate::kernels::{self, KernelContext, Scratch};
use crate::tensor::{TensorMut, TensorRef, byte_size};

/// Runs `op` on constant inputs and returns each output's bytes (little-endian, shapes
/// per ops::infer). `constant` yields the bytes of constant operands by index,
/// inline and pooled alike.
pub fn evaluate_operation<'c>(
    op: &Operation,
    operands: &[Operand],
    constant: impl Fn(u32) -> Option<&'c [u8]>,
) -> Result<Vec<Vec<u8>>> {
    let invalid = |message: String| RuntimeError::Operation {
        operation: OpRef::new(None, op),
        message,
    };
    let kernel = kernels::build(op, operands, &constant)?;
    let mut inputs_operands: Vec<&Operand> = Vec::with_capacity(op.inputs.len());
    let mut values: Vec<Option<&[u8]>> = Vec::with_capacity(op.inputs.len());
    for (pos, &i) in op.inputs.iter().enumerate() {
        let operand = operands.get(i as usize).ok_or_else(|| {
            invalid(format!(
                "input {pos} names operand {i}, which does not exist"
            ))
        })?;
        let value = match operand.lifetime {
            Lifetime::NoValue => None,
            l if l.is_constant() => Some(constant(i).ok_or_else(|| {
                invalid(format!(
                    "the value of input {pos} (operand {i}) is not available"
                ))
            })?),
            _ => {
                return Err(invalid(format!(
                    "input {pos} (operand {i}) is not a constant"
                )));
            }
        };
        inputs_operands.push(operand);
        values.push(value);
    }
    let declared: Vec<&Operand> = op
        .outputs
        .iter()
        .map(|&o| {
            operands
                .get(o as usize)
                .ok_or_else(|| invalid(format!("output operand {o} does not exist")))
        })
        .collect::<Result<_>>()?;
    let views: Vec<InputView> = inputs_operands
        .iter()
        .zip(&values)
        .map(|(operand, value)| InputView {
            operand,
            value: *value,
        })
        .collect();
    let inferred = ops::infer(op.op_type, &views, &declared).map_err(|e| invalid(e.to_string()))?;

    // Weights through the kernel's own preparation, exactly as on a device.
    let weight_bytes: Vec<Option<&[u8]>> = inputs_operands
        .iter()
        .zip(&values)
        .map(|(o, v)| {
            if o.lifetime == Lifetime::ConstantReference {
                *v
            } else {
                None
            }
        })
        .collect();
    let prepared = kernel
        .prepare_weights(&weight_bytes)
        .map_err(|e| e.locate_opt(None, op))?;

    let shapes: Vec<Vec<usize>> = inputs_operands
        .iter()
        .map(|o| o.dimensions.iter().map(|&d| d as usize).collect())
        .collect();
    // Inline values copied to aligned storage so kernels can view them as f32/i32.
    let mut aligned: Vec<Option<AlignedBuf>> = Vec::with_capacity(values.len());
    for (o, v) in inputs_operands.iter().zip(&values) {
        aligned.push(match (o.lifetime, v) {
            (Lifetime::ConstantCopy, Some(bytes)) => Some(AlignedBuf::from_bytes(bytes)?),
            _ => None,
        });
    }
    let inputs: Vec<Option<TensorRef>> = inputs_operands
        .iter()
        .enumerate()
        .map(|(pos, o)| {
            let bytes = match o.lifetime {
                Lifetime::ConstantCopy => aligned[pos].as_ref().map(AlignedBuf::as_bytes),
                Lifetime::ConstantReference => prepared.input_view(pos),
                _ => None,
            }?;
            Some(TensorRef {
                operand_type: o.operand_type,
                shape: &shapes[pos],
                bytes,
                scale: o.scale,
                zero_point: o.zero_point,
            })
        })
        .collect();

    let mut out_shapes = Vec::with_capacity(inferred.len());
    let mut out_bufs = Vec::with_capacity(inferred.len());
    for (k, shape) in inferred.iter().enumerate() {
        let known = shape.operand_type.is_scalar()
            || (!shape.dimensions.is_empty() && !shape.dimensions.contains(&0));
        if !known {
            return Err(invalid(format!("output {k}'s shape cannot be determined")));
        }
        let dims: Vec<usize> = shape.dimensions.iter().map(|&d| d as usize).collect();
        let size = byte_size(shape.operand_type, &dims)
            .ok_or_else(|| invalid(format!("output {k} has no byte size")))?;
        out_bufs.push(AlignedBuf::zeroed(size)?);
        out_shapes.push(dims);
    }
    let outputs: Vec<TensorMut> = out_bufs
        .iter_mut()
        .zip(&out_shapes)
        .zip(&declared)
        .map(|((buf, shape), operand)| TensorMut {
            operand_type: operand.operand_type,
            shape,
            bytes: buf.as_bytes_mut(),
            scale: operand.scale,
            zero_point: operand.zero_point,
            row_stride: None,
        })
        .collect();
    let mut scratch = Scratch::new();
    let mut ctx = KernelContext {
        inputs,
        outputs,
        weights: &prepared,
        scratch: &mut scratch,
        threads: 1,
    };
    kernel.run(&mut ctx).map_err(|e| e.locate_opt(None, op))?;
    drop(ctx);
    Ok(out_bufs.iter().map(|b| b.as_bytes().to_vec()).collect())
}
