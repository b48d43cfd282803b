//! ARGMAX, ARGMIN, TOPK_V2, CAST, FILL and RANK.
//!
//! - ARGMAX / ARGMIN: int32 indices along an axis (removed from the shape); ties pick the
//!   smallest index; NaN never wins against a number.
//! - TOPK_V2: the k largest values along the last axis, sorted descending, with their
//!   int32 indices; ties put the smaller index first.
//! - CAST between float32, int32 and bool8: float to int truncates toward zero and
//!   saturates, NaN becomes 0 (Rust's `as`); to bool is `!= 0`; from bool is 0 or 1.

use std::cmp::Ordering;

use nnc_formats::nn::{OperandType, OperationType};

use super::util::{axis, split_at_axis};
use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

pub(crate) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    use OperationType as O;
    let numeric =
        |t: OperandType| matches!(t, OperandType::TensorFloat32 | OperandType::TensorInt32);
    match info.op_type() {
        O::Argmax | O::Argmin => {
            let t = info.input_type(0)?;
            if !numeric(t) {
                return Err(info.unsupported(format!("operand type {t}")));
            }
            Ok(Box::new(ArgMinMax {
                max: info.op_type() == O::Argmax,
                axis: info.i32(1, "axis")?,
            }))
        }
        O::TopkV2 => {
            let t = info.input_type(0)?;
            if !numeric(t) {
                return Err(info.unsupported(format!("operand type {t}")));
            }
            Ok(Box::new(TopK {
                k: info.usize(1, "k")?,
            }))
        }
        O::Cast => {
            let from = info.input_type(0)?;
            let to = info.output_operand(0)?.operand_type;
            let ok = |t: OperandType| {
                matches!(
                    t,
                    OperandType::TensorFloat32
                        | OperandType::TensorInt32
                        | OperandType::TensorBool8
                )
            };
            if !ok(from) || !ok(to) {
                return Err(info.unsupported(format!("cast from {from} to {to}")));
            }
            Ok(Box::new(Cast))
        }
        O::Fill => {
            let t = info.input_type(1)?;
            let value = match t {
                OperandType::Float32 => FillValue::F32(info.f32(1, "value")?),
                OperandType::Int32 => FillValue::I32(info.i32(1, "value")?),
                other => return Err(info.unsupported(format!("fill value of type {other}"))),
            };
            Ok(Box::new(Fill { value }))
        }
        _ => Ok(Box::new(Rank)),
    }
}

// ---------------------------------------------------------------------------------------

struct ArgMinMax {
    max: bool,
    axis: i32,
}

fn arg_along<T: Copy + PartialOrd>(
    x: &[T],
    shape: &[usize],
    a: usize,
    max: bool,
    out: &mut [i32],
) -> Result<()> {
    let (outer, mid, inner) = split_at_axis(shape, a);
    if x.len() != outer * mid * inner || out.len() != outer * inner || mid == 0 {
        return Err(RuntimeError::kernel("argmax/argmin sizes do not match"));
    }
    for o in 0..outer {
        for i in 0..inner {
            let base = o * mid * inner + i;
            let mut best = 0usize;
            let mut best_v = x[base];
            for j in 1..mid {
                let v = x[base + j * inner];
                // Strict comparison keeps the first index on ties; a NaN best is replaced
                // by the first number (partial_cmp of a value with itself fails only for NaN).
                let best_is_nan = best_v.partial_cmp(&best_v).is_none();
                let v_is_number = v.partial_cmp(&v).is_some();
                let better = if max { v > best_v } else { v < best_v };
                if better || (best_is_nan && v_is_number) {
                    best = j;
                    best_v = v;
                }
            }
            out[o * inner + i] =
                i32::try_from(best).map_err(|_| RuntimeError::kernel("index exceeds int32"))?;
        }
    }
    Ok(())
}

impl Kernel for ArgMinMax {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let a = axis(self.axis, input.rank())?;
        let out = ctx.output(0)?.i32_mut()?;
        match input.operand_type {
            OperandType::TensorFloat32 => arg_along(input.f32()?, input.shape, a, self.max, out),
            _ => arg_along(input.i32()?, input.shape, a, self.max, out),
        }
    }
}

// ---------------------------------------------------------------------------------------

struct TopK {
    k: usize,
}

/// Descending by value, ties (and -0.0 vs 0.0) by ascending index; a strict total order
/// for floats (NaN sorts above everything).
fn topk_rows<T: Copy>(
    x: &[T],
    row: usize,
    k: usize,
    values: &mut [T],
    indices: &mut [i32],
    cmp: impl Fn(T, T) -> Ordering,
) -> Result<()> {
    if row == 0
        || k > row
        || !x.len().is_multiple_of(row)
        || values.len() != x.len() / row * k
        || indices.len() != values.len()
    {
        return Err(RuntimeError::kernel(format!(
            "top-{k} of rows of {row} does not match the output sizes"
        )));
    }
    let mut order: Vec<usize> = Vec::with_capacity(row);
    for ((src, vals), idxs) in x
        .chunks_exact(row)
        .zip(values.chunks_exact_mut(k))
        .zip(indices.chunks_exact_mut(k))
    {
        order.clear();
        order.extend(0..row);
        let by = |&a: &usize, &b: &usize| cmp(src[b], src[a]).then(a.cmp(&b));
        if k < row {
            order.select_nth_unstable_by(k - 1, by);
            order.truncate(k);
        }
        order.sort_unstable_by(by);
        for ((v, i), &j) in vals.iter_mut().zip(idxs.iter_mut()).zip(&order) {
            *v = src[j];
            *i = i32::try_from(j).map_err(|_| RuntimeError::kernel("index exceeds int32"))?;
        }
    }
    Ok(())
}

impl Kernel for TopK {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let row = input.shape.last().copied().unwrap_or(1);
        let k = self.k;
        if ctx.outputs.len() != 2 {
            return Err(RuntimeError::kernel("TOPK_V2 has two outputs"));
        }
        let (first, second) = ctx.outputs.split_at_mut(1);
        let indices = second[0].i32_mut()?;
        match input.operand_type {
            OperandType::TensorFloat32 => {
                let values = first[0].f32_mut()?;
                // +0.0 folds -0.0 into 0.0 so that they tie.
                topk_rows(input.f32()?, row, k, values, indices, |a: f32, b: f32| {
                    (a + 0.0).total_cmp(&(b + 0.0))
                })
            }
            _ => {
                let values = first[0].i32_mut()?;
                topk_rows(input.i32()?, row, k, values, indices, |a: i32, b: i32| {
                    a.cmp(&b)
                })
            }
        }
    }
}

// ---------------------------------------------------------------------------------------

struct Cast;

impl Kernel for Cast {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let out = ctx.output(0)?;
        if input.element_count() != out.element_count() {
            return Err(RuntimeError::kernel("input and output sizes differ"));
        }
        use OperandType as T;
        match (input.operand_type, out.operand_type) {
            (T::TensorFloat32, T::TensorFloat32)
            | (T::TensorInt32, T::TensorInt32)
            | (T::TensorBool8, T::TensorBool8) => {
                out.bytes.copy_from_slice(input.bytes);
            }
            (T::TensorFloat32, T::TensorInt32) => {
                // `as` truncates toward zero, saturates, and maps NaN to 0.
                out.i32_mut()?
                    .iter_mut()
                    .zip(input.f32()?)
                    .for_each(|(o, &v)| *o = v as i32);
            }
            (T::TensorInt32, T::TensorFloat32) => {
                out.f32_mut()?
                    .iter_mut()
                    .zip(input.i32()?)
                    .for_each(|(o, &v)| *o = v as f32);
            }
            (T::TensorFloat32, T::TensorBool8) => {
                out.u8_mut()?
                    .iter_mut()
                    .zip(input.f32()?)
                    .for_each(|(o, &v)| *o = u8::from(v != 0.0));
            }
            (T::TensorInt32, T::TensorBool8) => {
                out.u8_mut()?
                    .iter_mut()
                    .zip(input.i32()?)
                    .for_each(|(o, &v)| *o = u8::from(v != 0));
            }
            (T::TensorBool8, T::TensorFloat32) => {
                out.f32_mut()?
                    .iter_mut()
                    .zip(input.u8()?)
                    .for_each(|(o, &v)| *o = f32::from(u8::from(v != 0)));
            }
            (T::TensorBool8, T::TensorInt32) => {
                out.i32_mut()?
                    .iter_mut()
                    .zip(input.u8()?)
                    .for_each(|(o, &v)| *o = i32::from(v != 0));
            }
            (from, to) => {
                return Err(RuntimeError::kernel(format!(
                    "cast from {from} to {to} is not implemented"
                )));
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------

enum FillValue {
    F32(f32),
    I32(i32),
}

struct Fill {
    value: FillValue,
}

impl Kernel for Fill {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let out = ctx.output(0)?;
        match self.value {
            FillValue::F32(v) => out.f32_mut()?.fill(v),
            FillValue::I32(v) => out.i32_mut()?.fill(v),
        }
        Ok(())
    }
}

struct Rank;

impl Kernel for Rank {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let rank = ctx.input(0)?.rank();
        let rank = i32::try_from(rank).map_err(|_| RuntimeError::kernel("rank exceeds int32"))?;
        match ctx.output(0)?.i32_mut()? {
            [v] => {
                *v = rank;
                Ok(())
            }
            _ => Err(RuntimeError::kernel("RANK writes one int32 value")),
        }
    }
}
