//! ARGMAX, ARGMIN, TOPK_V2, CAST, FILL and RANK.
//!
//! - ARGMAX / ARGMIN: int32 indices along an axis (removed from the shape); ties pick the
//!   smallest index; NaN never wins against a number.
//! - TOPK_V2: the k largest values along the last axis, sorted descending, with their
//!   int32 indices; ties put the smaller index first.
//! - CAST between float32, int32, bool8 and the 8-bit quantized types: float to int
//!   truncates toward zero and saturates, NaN becomes 0 (Rust's `as`); to bool is `!= 0`;
//!   from bool is 0 or 1. As NNAPI's CAST, a cast to or from TENSOR_QUANT8_ASYMM(_SIGNED)
//!   ignores scale and zero point: the stored integer is the value, and values outside
//!   the 8-bit range saturate (as NNAPI's reference implementation does), so compilers
//!   wanting C-style wrap-around reduce the values first.

use std::cmp::Ordering;

use nnc_formats::nn::OperandType;

use super::util::{axis, split_at_axis};
use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

fn require_numeric(info: &OpInfo) -> Result<()> {
    let t = info.input_type(0)?;
    if !matches!(t, OperandType::TensorFloat32 | OperandType::TensorInt32) {
        return Err(info.unsupported(format!("operand type {t}")));
    }
    Ok(())
}

/// ARGMAX or ARGMIN, chosen where the operation is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arg {
    Max,
    Min,
}

/// ARGMAX and ARGMIN.
pub(crate) fn build_arg(info: &OpInfo, arg: Arg) -> Result<Box<dyn Kernel>> {
    require_numeric(info)?;
    Ok(Box::new(ArgMinMax {
        max: arg == Arg::Max,
        axis: info.i32(1, "axis")?,
    }))
}

/// TOPK_V2.
pub(crate) fn build_topk(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    require_numeric(info)?;
    Ok(Box::new(TopK {
        k: info.usize(1, "k")?,
    }))
}

/// CAST.
pub(crate) fn build_cast(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let from = info.input_type(0)?;
    let to = info.output_operand(0)?.operand_type;
    let ok = |t: OperandType| {
        matches!(
            t,
            OperandType::TensorFloat32
                | OperandType::TensorInt32
                | OperandType::TensorBool8
                | OperandType::TensorQuant8Asymm
                | OperandType::TensorQuant8AsymmSigned
        )
    };
    // Float16 converts to and from float32 only (nnc computes float16 as float32).
    let half = |a: OperandType, b: OperandType| {
        a == OperandType::TensorFloat16
            && matches!(b, OperandType::TensorFloat32 | OperandType::TensorFloat16)
    };
    if !(ok(from) && ok(to) || half(from, to) || half(to, from)) {
        return Err(info.unsupported(format!("cast from {from} to {to}")));
    }
    Ok(Box::new(Cast))
}

/// FILL.
pub(crate) fn build_fill(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(1)?;
    let value = match t {
        OperandType::Float32 => FillValue::F32(info.f32(1, "value")?),
        OperandType::Int32 => FillValue::I32(info.i32(1, "value")?),
        other => return Err(info.unsupported(format!("fill value of type {other}"))),
    };
    Ok(Box::new(Fill { value }))
}

/// RANK (no static parameters).
pub(crate) fn build_rank() -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Rank))
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

/// CAST with an 8-bit quantized side (quantization parameters ignored). Every source
/// value is exact in f64, so one conversion path serves all pairs.
fn cast_8bit(from: OperandType, src: &[u8], to: OperandType, dst: &mut [u8]) -> Result<()> {
    use OperandType as T;
    let values: Vec<f64> = match from {
        T::TensorQuant8Asymm => src.iter().map(|&b| f64::from(b)).collect(),
        T::TensorQuant8AsymmSigned => src.iter().map(|&b| f64::from(b as i8)).collect(),
        T::TensorBool8 => src.iter().map(|&b| f64::from(u8::from(b != 0))).collect(),
        T::TensorInt32 => src
            .chunks_exact(4)
            .map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        T::TensorFloat32 => src
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        other => {
            return Err(RuntimeError::kernel(format!(
                "cast from {other} is not implemented"
            )));
        }
    };
    let width = match to {
        T::TensorInt32 | T::TensorFloat32 => 4,
        _ => 1,
    };
    if dst.len() != values.len() * width {
        return Err(RuntimeError::kernel("input and output sizes differ"));
    }
    // `as` from f64 truncates toward zero, saturates and maps NaN to 0.
    match to {
        T::TensorQuant8Asymm => dst.iter_mut().zip(&values).for_each(|(o, &v)| *o = v as u8),
        T::TensorQuant8AsymmSigned => dst
            .iter_mut()
            .zip(&values)
            .for_each(|(o, &v)| *o = (v as i8) as u8),
        T::TensorBool8 => dst
            .iter_mut()
            .zip(&values)
            .for_each(|(o, &v)| *o = u8::from(v != 0.0)),
        T::TensorInt32 => dst
            .chunks_exact_mut(4)
            .zip(&values)
            .for_each(|(o, &v)| o.copy_from_slice(&(v as i32).to_le_bytes())),
        T::TensorFloat32 => dst
            .chunks_exact_mut(4)
            .zip(&values)
            .for_each(|(o, &v)| o.copy_from_slice(&(v as f32).to_le_bytes())),
        other => {
            return Err(RuntimeError::kernel(format!(
                "cast to {other} is not implemented"
            )));
        }
    }
    Ok(())
}

impl Kernel for Cast {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let out = ctx.output(0)?;
        if input.element_count() != out.element_count() {
            return Err(RuntimeError::kernel("input and output sizes differ"));
        }
        use OperandType as T;
        let quant8 =
            |t: OperandType| matches!(t, T::TensorQuant8Asymm | T::TensorQuant8AsymmSigned);
        if quant8(input.operand_type) || quant8(out.operand_type) {
            return cast_8bit(input.operand_type, input.bytes, out.operand_type, out.bytes);
        }
        match (input.operand_type, out.operand_type) {
            (T::TensorFloat32, T::TensorFloat32)
            | (T::TensorInt32, T::TensorInt32)
            | (T::TensorBool8, T::TensorBool8)
            | (T::TensorFloat16, T::TensorFloat16) => {
                out.bytes.copy_from_slice(input.bytes);
            }
            (T::TensorFloat16, T::TensorFloat32) => {
                for (o, c) in out.f32_mut()?.iter_mut().zip(input.bytes.chunks_exact(2)) {
                    *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
            (T::TensorFloat32, T::TensorFloat16) => {
                // Round to nearest even, overflow to infinity, NaN kept (IEEE).
                for (o, &v) in out.bytes.chunks_exact_mut(2).zip(input.f32()?) {
                    o.copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cast(from: OperandType, src: &[u8], to: OperandType, width: usize) -> Vec<u8> {
        let count = match from {
            OperandType::TensorInt32 | OperandType::TensorFloat32 => src.len() / 4,
            _ => src.len(),
        };
        let mut dst = vec![0u8; count * width];
        cast_8bit(from, src, to, &mut dst).unwrap();
        dst
    }

    #[test]
    fn casts_to_8_bits_saturate_and_ignore_quantization() {
        use OperandType as T;
        let ints: Vec<u8> = [-300i32, -129, -1, 0, 127, 200, 255, 256, 70000]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            cast(T::TensorInt32, &ints, T::TensorQuant8Asymm, 1),
            [0, 0, 0, 0, 127, 200, 255, 255, 255]
        );
        let signed: Vec<i8> = cast(T::TensorInt32, &ints, T::TensorQuant8AsymmSigned, 1)
            .into_iter()
            .map(|b| b as i8)
            .collect();
        assert_eq!(signed, [-128, -128, -1, 0, 127, 127, 127, 127, 127]);
        let floats: Vec<u8> = [-1.5f32, 2.7, f32::NAN, 300.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            cast(T::TensorFloat32, &floats, T::TensorQuant8Asymm, 1),
            [0, 2, 0, 255]
        );
    }

    #[test]
    fn casts_from_8_bits_are_exact() {
        use OperandType as T;
        let back = cast(
            T::TensorQuant8AsymmSigned,
            &[0x80, 0xff, 0, 127],
            T::TensorInt32,
            4,
        );
        let ints: Vec<i32> = back
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(ints, [-128, -1, 0, 127]);
        assert_eq!(
            cast(T::TensorQuant8Asymm, &[0, 3, 255], T::TensorBool8, 1),
            [0, 1, 1]
        );
        assert_eq!(
            cast(
                T::TensorQuant8Asymm,
                &[200, 100],
                T::TensorQuant8AsymmSigned,
                1
            ),
            [127, 100]
        );
    }
}
