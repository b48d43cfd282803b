//! Quantized unary operations: RELU, RELU1, RELU6, LOGISTIC, TANH, HARD_SWISH,
//! QUANTIZE (float -> 8-bit, and 8-bit -> 8-bit requantization) and DEQUANTIZE.
//!
//! An 8-bit input has 256 values, so every 8-bit -> 8-bit operation is a table built at
//! build time by evaluating TFLite's reference arithmetic on each of them, and run as
//! one lookup per element: bit-exact and fast.
//! - RELU / RELU1 / RELU6 (`QuantizedReluX`): `out_zp + MultiplyByQuantizedMultiplier(x -
//!   in_zp, in_scale / out_scale)` (ratio in float), clamped to the activation's range.
//! - LOGISTIC / TANH (`LUTPopulate`): the reference builds exactly this table, in float:
//!   dequantize, `1 / (1 + expf(-x))` or `tanhf(x)`, `round(y * (1 / out_scale))` (half
//!   away from zero) plus the output zero point, saturated.
//! - HARD_SWISH (`reference_ops::HardSwish`): TFLite's 16-bit fixed-point evaluation,
//!   reproduced step by step.
//! - QUANTIZE 8-bit -> 8-bit (`Requantize`): `MultiplyByQuantizedMultiplier(x - in_zp,
//!   in_scale / out_scale)` (double) plus the output zero point, saturated.
//! - QUANTIZE float32 -> 8-bit (`AffineQuantize`): `round(x / scale) + zp` in float,
//!   rounding half away from zero, saturated (NaN maps to the zero point, infinities to
//!   the ends of the range).
//! - DEQUANTIZE: `(q - zp) * scale` in float (a table of 256 floats; per-channel
//!   TENSOR_QUANT8_SYMM_PER_CHANNEL inputs use the scale of each element's channel).

use nnc_formats::nn::{FusedActivation, OperandType};

use super::arith::{Multiplier, QType, Qp, activation_range, byte_table};
use super::{check_scale, q8_bytes, qp};
use crate::error::{Result, RuntimeError};
use crate::kernels::{Kernel, KernelContext, OpInfo};

/// A byte -> byte table.
struct Table {
    table: [u8; 256],
}

impl Kernel for Table {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let x = q8_bytes(&ctx.input(0)?, "input")?;
        let out = super::q8_bytes_mut(ctx.output(0)?, "output")?;
        if out.len() != x.len() {
            return Err(RuntimeError::kernel("input and output sizes differ"));
        }
        for (o, &v) in out.iter_mut().zip(x) {
            *o = self.table[usize::from(v)];
        }
        Ok(())
    }
}

/// The byte table an 8-bit -> 8-bit operation computes, chosen where it is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TableFn {
    /// RELU, RELU1, RELU6: a rescale clamped to the activation's range.
    Clamp(FusedActivation),
    /// QUANTIZE between 8-bit types.
    Requantize,
    Logistic,
    Tanh,
    HardSwish,
}

/// QUANTIZE: from float32 by arithmetic, between 8-bit types by a table.
pub(crate) fn build_quantize(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    if !info.input_type(0)?.is_quantized() {
        return build_quantize_float(info);
    }
    build(info, TableFn::Requantize)
}

pub(crate) fn build(info: &OpInfo, function: TableFn) -> Result<Box<dyn Kernel>> {
    let in_t = info.input_type(0)?;
    let in_qt = QType::of(in_t)
        .ok_or_else(|| info.unsupported(format!("quantized kernel for input type {in_t}")))?;
    let out_qt = super::output_type(info, 0)?;
    let (i, o) = (qp(info.operand(0)?), qp(info.output_operand(0)?));
    check_scale(info, "input", i.scale)?;
    check_scale(info, "output", o.scale)?;
    if function != TableFn::Requantize && in_qt != out_qt {
        return Err(info.unsupported("input and output of different 8-bit types"));
    }
    let invalid = |e: RuntimeError| info.invalid(e.to_string());
    let table = match function {
        TableFn::Clamp(act) => {
            let (lo, hi) = activation_range(act, o, out_qt);
            let m = Multiplier::from_f32_ratio(i.scale, o.scale).map_err(invalid)?;
            byte_table(in_qt, out_qt, |x| {
                m.apply(x - i.zp).wrapping_add(o.zp).clamp(lo, hi)
            })
        }
        TableFn::Requantize => {
            let m = Multiplier::from_f64_ratio(i.scale, o.scale).map_err(invalid)?;
            byte_table(in_qt, out_qt, |x| m.apply(x - i.zp).wrapping_add(o.zp))
        }
        TableFn::Logistic => float_table(in_qt, i, o, |v| 1.0 / (1.0 + (-v).exp())),
        TableFn::Tanh => float_table(in_qt, i, o, f32::tanh),
        TableFn::HardSwish => {
            hard_swish_table(in_qt, i, o).map_err(|e| info.unsupported(e.to_string()))?
        }
    };
    Ok(Box::new(Table { table }))
}

/// TFLite's `LUTPopulate` for 8-bit types: every value dequantized in float, transformed,
/// rescaled by the float reciprocal of the output scale, rounded half away from zero,
/// offset by the output zero point (in float) and saturated.
fn float_table(qt: QType, i: Qp, o: Qp, f: impl Fn(f32) -> f32) -> [u8; 256] {
    let inverse_scale = 1.0 / o.scale;
    byte_table(qt, qt, |x| {
        let dequantized = i.scale * (x - i.zp) as f32;
        let rescaled = (f(dequantized) * inverse_scale).round();
        // `as` saturates (and maps NaN to 0); the table stores the clamped value.
        (rescaled + o.zp as f32) as i32
    })
}

/// TFLite's `DownScaleInt32ToInt16Multiplier`: the top 16 bits, rounded.
fn downscale_multiplier(m: i32) -> i16 {
    const ROUNDING: i32 = 1 << 15;
    if m >= i32::MAX - ROUNDING {
        i16::MAX
    } else {
        ((m + ROUNDING) >> 16) as i16
    }
}

/// gemmlowp's 16-bit `SaturatingRoundingDoublingHighMul`.
fn srdhm16(a: i16, b: i16) -> i16 {
    if a == b && a == i16::MIN {
        return i16::MAX;
    }
    let ab = i32::from(a) * i32::from(b);
    let nudge = if ab >= 0 { 1 << 14 } else { 1 - (1 << 14) };
    ((ab + nudge) / (1 << 15)) as i16
}

/// TFLite's 16-bit `SaturatingDoublingHighMul` (truncating, not rounding).
fn sdhm16(a: i16, b: i16) -> i16 {
    if a == b && a == i16::MIN {
        return i16::MAX;
    }
    ((i32::from(a) * i32::from(b)) / (1 << 15)) as i16
}

/// gemmlowp's `RoundingDivideByPOT` on int16 values (masks and sums narrowed to int16).
fn rounding_divide16(x: i16, exponent: i32) -> i16 {
    let mask = ((1i64 << exponent) - 1) as i16;
    let remainder = x & mask;
    let threshold = (mask >> 1).wrapping_add(i16::from(x < 0));
    ((i32::from(x) >> exponent) as i16).wrapping_add(i16::from(remainder > threshold))
}

/// `value * 2^amount` saturated to int16.
fn saturating_left_shift16(value: i16, amount: i32) -> i16 {
    (i64::from(value) << amount).clamp(i64::from(i16::MIN), i64::from(i16::MAX)) as i16
}

/// TFLite's quantized HARD_SWISH (`reference_ops::HardSwish` with the parameters of
/// `HardSwishPrepare`), evaluated for every input value.
fn hard_swish_table(qt: QType, i: Qp, o: Qp) -> Result<[u8; 256]> {
    let hires_input_scale = (1.0f32 / 128.0) * i.scale;
    let reluish_scale = 3.0f32 / 32768.0;
    let out_m = Multiplier::new(f64::from(hires_input_scale / o.scale))?;
    if out_m.shift > 0 {
        return Err(RuntimeError::kernel(
            "HARD_SWISH with an output scale this small relative to the input's",
        ));
    }
    let out_fixed = downscale_multiplier(out_m.multiplier);
    let reluish_m = Multiplier::new(f64::from(hires_input_scale / reluish_scale))?;
    let reluish_fixed = downscale_multiplier(reluish_m.multiplier);
    let reluish_exp = reluish_m.shift;
    let eval = |x: i32| -> i32 {
        let input_value = (x - i.zp) as i16;
        let hires = input_value.wrapping_mul(1 << 7);
        let preshift_output = srdhm16(hires, out_fixed);
        let mut reluish = hires;
        if reluish_exp > 0 {
            reluish = saturating_left_shift16(reluish, reluish_exp - 1);
        }
        reluish = srdhm16(reluish, reluish_fixed);
        if reluish_exp > 0 {
            reluish = saturating_left_shift16(reluish, 1);
        }
        if reluish_exp < 0 {
            reluish = rounding_divide16(reluish, -reluish_exp);
        }
        // [-1, 1] -> [0, 1] in 16-bit fixed point.
        let reluish = ((i32::from(reluish) + (1 << 15)) >> 1) as i16;
        let preshift = sdhm16(reluish, preshift_output);
        let out = rounding_divide16(preshift, -out_m.shift);
        i32::from(out.wrapping_add(o.zp as i16))
    };
    Ok(byte_table(qt, qt, eval))
}

// ---------------------------------------------------------------------------------------
// QUANTIZE from float32

struct QuantizeFloat {
    out_qt: QType,
    scale: f32,
    zp: i32,
}

fn build_quantize_float(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(0)?;
    if t != OperandType::TensorFloat32 {
        return Err(info.unsupported(format!("QUANTIZE from {t}")));
    }
    let out_qt = super::output_type(info, 0)?;
    let o = qp(info.output_operand(0)?);
    check_scale(info, "output", o.scale)?;
    Ok(Box::new(QuantizeFloat {
        out_qt,
        scale: o.scale,
        zp: o.zp,
    }))
}

impl Kernel for QuantizeFloat {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let x = ctx.input(0)?.f32()?;
        let out = super::q8_bytes_mut(ctx.output(0)?, "output")?;
        if out.len() != x.len() {
            return Err(RuntimeError::kernel("input and output sizes differ"));
        }
        let bounds = (self.out_qt.min(), self.out_qt.max());
        #[cfg(target_arch = "x86_64")]
        if crate::kernels::isa::int8_avx2() {
            // SAFETY: AVX2 is present (checked just above).
            unsafe { quantize_avx2(x, out, self.scale, self.zp, bounds) };
            return Ok(());
        }
        quantize_values(x, out, self.scale, self.zp, bounds);
        Ok(())
    }
}

/// TfLiteRound(v / scale) + zero_point, in float, saturated to `[lo, hi]`; the same
/// loop compiled for AVX2 below (8 lanes and integer min/max instead of SSE2's 4 and
/// masks).
#[inline(always)]
fn quantize_values(x: &[f32], out: &mut [u8], scale: f32, zp: i32, (lo, hi): (i32, i32)) {
    for (o, &v) in out.iter_mut().zip(x) {
        let q = (round_half_away(v / scale) + zp).clamp(lo, hi);
        // The low byte: two's complement for int8, the value itself for uint8.
        *o = q as u8;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn quantize_avx2(x: &[f32], out: &mut [u8], scale: f32, zp: i32, bounds: (i32, i32)) {
    quantize_values(x, out, scale, zp, bounds);
}

/// `x.round() as i32` (half away from zero, NaN to 0) for every result an 8-bit store
/// can tell apart (magnitudes are capped at 2^20, which saturates the same), in
/// operations x86-64's baseline vectorizes: `f32::round` is a libm call per element
/// there (no SSE4.1 `roundps`), and quantizing a 224x224x3 image took 0.38 ms, 13% of
/// int8 MobileNetV2. Truncating `|x| + 0.5` is exact for |x| >= 0.5 (the sum is
/// exact, or rounds up only across a power of two, where the answer is that power);
/// below 0.5 the sum may round up to 1, so those are 0 outright.
#[inline(always)]
fn round_half_away(x: f32) -> i32 {
    let a = x.abs();
    let a = if a.is_nan() { 0.0 } else { a.min(1_048_576.0) };
    // A plain `as` adds saturation and NaN handling that kept the loop from vectorizing
    // well.
    let magnitude = if a < 0.5 {
        0
    } else {
        // SAFETY: `a` is not NaN and at most 2^20 (both set above), so `a + 0.5` is
        // finite and its truncation fits an i32, as `to_int_unchecked` requires.
        unsafe { (a + 0.5).to_int_unchecked::<i32>() }
    };
    if x < 0.0 { -magnitude } else { magnitude }
}

// ---------------------------------------------------------------------------------------
// DEQUANTIZE

struct Dequantize {
    /// One table per channel (one for per-tensor quantization).
    tables: Vec<[f32; 256]>,
    channel_dim: usize,
}

pub(crate) fn build_dequantize(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let input = info.operand(0)?;
    let qt = QType::of_weights(input.operand_type)
        .ok_or_else(|| info.unsupported(format!("DEQUANTIZE of {}", input.operand_type)))?;
    let out_t = info.output_operand(0)?.operand_type;
    if out_t != OperandType::TensorFloat32 {
        return Err(info.unsupported(format!("DEQUANTIZE to {out_t}")));
    }
    let table = |scale: f32, zp: i32| -> [f32; 256] {
        let mut t = [0f32; 256];
        for (byte, v) in qt.all_values() {
            t[byte] = (v - zp) as f32 * scale;
        }
        t
    };
    if input.operand_type == OperandType::TensorQuant8SymmPerChannel {
        let q = input
            .channel_quant
            .as_ref()
            .ok_or_else(|| info.invalid("per-channel input without its scales"))?;
        for &s in &q.scales {
            check_scale(info, "channel", s)?;
        }
        return Ok(Box::new(Dequantize {
            tables: q.scales.iter().map(|&s| table(s, 0)).collect(),
            channel_dim: q.channel_dim as usize,
        }));
    }
    check_scale(info, "input", input.scale)?;
    Ok(Box::new(Dequantize {
        tables: vec![table(input.scale, input.zero_point)],
        channel_dim: 0,
    }))
}

impl Kernel for Dequantize {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let shape = input.shape;
        let out = ctx.output(0)?.f32_mut()?;
        if out.len() != x.len() {
            return Err(RuntimeError::kernel("input and output sizes differ"));
        }
        if let [table] = self.tables.as_slice() {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = table[usize::from(v)];
            }
            return Ok(());
        }
        let (_, channels, inner) = crate::kernels::util::split_at_axis(shape, self.channel_dim);
        if self.channel_dim >= shape.len() || channels != self.tables.len() {
            return Err(RuntimeError::kernel(format!(
                "{} per-channel scales for shape {shape:?} along dimension {}",
                self.tables.len(),
                self.channel_dim
            )));
        }
        for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
            let c = (i / inner.max(1)) % channels;
            *o = self.tables[c][usize::from(v)];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_half_away_matches_f32_round_where_a_byte_can_tell() {
        let check = |x: f32| {
            let reference = (x.round() as i64).clamp(-1_048_576, 1_048_576) as i32;
            assert_eq!(
                super::round_half_away(x),
                reference,
                "{x:e} ({:#x})",
                x.to_bits()
            );
        };
        // Every 61st bit pattern (both signs, all exponents) and the neighbours of every
        // tie up to 2^12.
        for bits in (0..=u32::MAX).step_by(61) {
            let x = f32::from_bits(bits);
            if !x.is_nan() {
                check(x);
            }
        }
        for n in -4096..4096 {
            let tie = n as f32 + 0.5;
            for x in [tie, tie.next_up(), tie.next_down()] {
                check(x);
            }
        }
        let below_half = 0.5f32.next_down();
        for x in [
            0.0,
            -0.0,
            below_half,
            -below_half,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ] {
            check(x);
        }
        assert_eq!(super::round_half_away(f32::NAN), 0);
    }
}
