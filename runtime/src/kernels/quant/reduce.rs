//! Quantized reductions: MEAN, REDUCE_MAX, REDUCE_MIN, ARGMAX, ARGMIN.
//!
//! - MEAN (`reference_ops::QuantizedMeanOrSum`): the i32 sum of the stored values minus
//!   `count * input_zp`, requantized by `input_scale / output_scale` (double) with the
//!   division by the element count folded into the multiplier the way TFLite folds it
//!   (`shift = min(floor(log2(count)), 32, 31 + output_shift)`, `multiplier =
//!   (multiplier << shift) / count`), plus the output zero point, saturated.
//! - REDUCE_MAX / REDUCE_MIN: on stored values (TFLite requires equal quantization of
//!   input and output); a differing output quantization is reached by requantizing.
//! - ARGMAX / ARGMIN: on stored values (monotonic in the real value); ties keep the
//!   first index.

use super::arith::{Multiplier, Q8, QType, Qp, multiply_by_quantized_multiplier};
use super::{
    activation_type, check_scale, output_type, q8_bytes, q8_bytes_mut, qp, typed, typed_mut,
};
use crate::error::{Result, RuntimeError};
use crate::kernels::misc::Arg;
use crate::kernels::reduce::reduce_into;
use crate::kernels::util::{axis, split_at_axis};
use crate::kernels::{Kernel, KernelContext, OpInfo, Requantization};
use nnc_formats::nn::ops::Reduce as ReduceParams;

/// The quantized reduction an operation is, chosen where it is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reduction {
    Mean,
    Max,
    Min,
}

struct Reduce {
    kind: Reduction,
    qt: QType,
    input: Qp,
    output: Qp,
    /// input_scale / output_scale (MEAN always; MAX/MIN when the quantizations differ).
    rescale: Option<Multiplier>,
    /// MEAN in single precision ([`Requantization::Float`]).
    float_mean: bool,
    /// The axes when constant; otherwise read from input 1 per run.
    axes: Option<Vec<i32>>,
}

pub(crate) fn build(info: &OpInfo, kind: Reduction) -> Result<Box<dyn Kernel>> {
    let qt = activation_type(info, 0)?;
    if output_type(info, 0)? != qt {
        return Err(info.unsupported("input and output of different 8-bit types"));
    }
    let (input, output) = (qp(info.operand(0)?), qp(info.output_operand(0)?));
    check_scale(info, "input", input.scale)?;
    check_scale(info, "output", output.scale)?;
    let rescale = if kind == Reduction::Mean || input != output {
        Some(
            Multiplier::from_f64_ratio(input.scale, output.scale)
                .map_err(|e| info.invalid(e.to_string()))?,
        )
    } else {
        None
    };
    Ok(Box::new(Reduce {
        kind,
        qt,
        input,
        output,
        rescale,
        float_mean: kind == Reduction::Mean && info.requantization == Requantization::Float,
        axes: ReduceParams::decode(info.op_type(), info.views())
            .map_err(|e| info.signature_error(e))?
            .axes,
    }))
}

impl Reduce {
    fn run_typed<T: Q8>(
        &self,
        x: &[T],
        shape: &[usize],
        reduced: &[bool],
        out: &mut [T],
    ) -> Result<()> {
        match self.kind {
            Reduction::Mean => {
                let mut sums = crate::kernels::util::filled(out.len(), 0i32)?;
                reduce_into(x, shape, reduced, &mut sums, |a: i32, v: T| {
                    a.wrapping_add(v.to_i32())
                })?;
                let count: usize = shape
                    .iter()
                    .zip(reduced)
                    .filter(|(_, r)| **r)
                    .map(|(d, _)| d)
                    .product();
                let Some(m) = self.rescale else {
                    return Err(RuntimeError::Internal("MEAN without its multiplier".into()));
                };
                if count == 0 {
                    return Ok(());
                }
                let offset = (i64::from(self.input.zp) * count as i64) as i32;
                if self.float_mean {
                    // XNNPACK's order: input_scale / (output_scale * count) in f32.
                    let scale = self.input.scale / (self.output.scale * count as f32);
                    for (o, &s) in out.iter_mut().zip(&sums) {
                        let v = (s.wrapping_sub(offset) as f32 * scale).round_ties_even();
                        let v = (v as i32).saturating_add(self.output.zp);
                        *o = T::from_i32(v.clamp(T::MIN, T::MAX));
                    }
                    return Ok(());
                }
                // Fold 1 / count into the multiplier as TFLite does.
                let count = count as i64;
                let shift = (63 - count.leading_zeros() as i32)
                    .min(32)
                    .min(31 + m.shift)
                    .max(0);
                let multiplier = ((i64::from(m.multiplier) << shift) / count) as i32;
                let out_shift = m.shift - shift;
                for (o, &s) in out.iter_mut().zip(&sums) {
                    let v = multiply_by_quantized_multiplier(
                        s.wrapping_sub(offset),
                        multiplier,
                        out_shift,
                    )
                    .wrapping_add(self.output.zp);
                    *o = T::from_i32(v.clamp(T::MIN, T::MAX));
                }
                Ok(())
            }
            Reduction::Max | Reduction::Min => {
                let max = self.kind == Reduction::Max;
                let mut acc =
                    crate::kernels::util::filled(out.len(), if max { T::MIN } else { T::MAX })?;
                if max {
                    reduce_into(x, shape, reduced, &mut acc, |a: i32, v: T| {
                        a.max(v.to_i32())
                    })?;
                } else {
                    reduce_into(x, shape, reduced, &mut acc, |a: i32, v: T| {
                        a.min(v.to_i32())
                    })?;
                }
                for (o, &a) in out.iter_mut().zip(&acc) {
                    let v = match self.rescale {
                        Some(m) => m.apply(a - self.input.zp).wrapping_add(self.output.zp),
                        None => a,
                    };
                    *o = T::from_i32(v.clamp(T::MIN, T::MAX));
                }
                Ok(())
            }
        }
    }
}

impl Kernel for Reduce {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let shape = input.shape;
        let runtime_axes;
        let axes: &[i32] = match &self.axes {
            Some(a) => a,
            None => {
                runtime_axes = ctx.input(1)?.i32()?.to_vec();
                &runtime_axes
            }
        };
        let mut reduced = vec![false; shape.len()];
        for &a in axes {
            reduced[axis(a, shape.len())?] = true;
        }
        let out = q8_bytes_mut(ctx.output(0)?, "output")?;
        match self.qt {
            QType::U8 => self.run_typed::<u8>(typed(x), shape, &reduced, typed_mut(out)),
            QType::I8 => self.run_typed::<i8>(typed(x), shape, &reduced, typed_mut(out)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// ARGMAX / ARGMIN

struct ArgMinMax {
    max: bool,
    axis: i32,
    qt: QType,
}

pub(crate) fn build_arg(info: &OpInfo, arg: Arg) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(ArgMinMax {
        max: arg == Arg::Max,
        axis: info.i32(1, "axis")?,
        qt: activation_type(info, 0)?,
    }))
}

impl Kernel for ArgMinMax {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let shape = input.shape;
        let a = axis(self.axis, shape.len())?;
        let (outer, mid, inner) = split_at_axis(shape, a);
        let out = ctx.output(0)?.i32_mut()?;
        if x.len() != outer * mid * inner || out.len() != outer * inner || mid == 0 {
            return Err(RuntimeError::kernel("argmax/argmin sizes do not match"));
        }
        for o in 0..outer {
            for i in 0..inner {
                let base = o * mid * inner + i;
                let (mut best, mut best_v) = (0usize, self.qt.load(x[base]));
                for j in 1..mid {
                    let v = self.qt.load(x[base + j * inner]);
                    if (self.max && v > best_v) || (!self.max && v < best_v) {
                        best = j;
                        best_v = v;
                    }
                }
                // `mid` fits i32: the tensor's size was validated as an operand.
                out[o * inner + i] = best as i32;
            }
        }
        Ok(())
    }
}
