//! Quantized SOFTMAX and L2_NORMALIZATION.
//!
//! SOFTMAX follows TFLite's reference kernel for 8-bit types (`reference_ops::Softmax`
//! with the parameters of `SoftmaxPrepare` under the reference resolver), in gemmlowp
//! fixed point: input differences from the row maximum are scaled by
//! `beta * input_scale * 2^26` (a Q31 multiplier with a left shift) into Q5.26, the
//! exponentials come from `exp_on_negative_values`, their sum is accumulated in Q12.19,
//! its reciprocal from `one_over_one_plus_x_for_x_in_0_1`, and each output is
//! `RoundingDivideByPOT(reciprocal * exp, bits)` offset by the type's minimum: the
//! output scale is 1/256 with zero point 0 (uint8) or -128 (int8), as TFLite requires.
//! For any other output quantization nnc computes the softmax of the dequantized inputs
//! in double and rounds half away from zero to the output (float-exact, not TFLite's).
//!
//! L2_NORMALIZATION follows `reference_integer_ops::L2Normalization` (int8, output scale
//! 1/128, zero point 0) and `reference_ops::L2Normalization` (uint8, zero point 128):
//! the sum of squares of `x - zp`, its inverse square root from
//! `GetInvSqrtQuantizedMultiplierExp` (Newton-Raphson in Q3.28), applied with
//! `MultiplyByQuantizedMultiplier`.

use super::arith::{
    Multiplier, QType, Qp, multiply_by_quantized_multiplier, rounding_divide_by_pot, srdhm,
};
use super::{activation_type, check_scale, output_type, q8_bytes, q8_bytes_mut, qp};
use crate::error::{Result, RuntimeError};
use crate::kernels::util::{axis, split_at_axis};
use crate::kernels::{Kernel, KernelContext, OpInfo};
use nnc_formats::nn::ops::{L2Normalization, Softmax as SoftmaxParams};

// ---------------------------------------------------------------------------------------
// gemmlowp fixed point, int32 raw values (a value with I integer bits is raw / 2^(31-I)).

/// `SaturatingRoundingMultiplyByPOT<e>` for e > 0: a saturating left shift.
fn saturating_shl(x: i32, e: i32) -> i32 {
    let threshold = (1i32 << (31 - e)) - 1;
    if x > threshold {
        i32::MAX
    } else if x < -threshold {
        i32::MIN
    } else {
        x << e
    }
}

/// gemmlowp's `Rescale` from `src` to `dst` integer bits.
fn rescale(x: i32, src: i32, dst: i32) -> i32 {
    let e = src - dst;
    match e.cmp(&0) {
        std::cmp::Ordering::Greater => saturating_shl(x, e),
        std::cmp::Ordering::Less => rounding_divide_by_pot(x, -e),
        std::cmp::Ordering::Equal => x,
    }
}

/// gemmlowp's `RoundingHalfSum` for int32.
fn rounding_half_sum(a: i32, b: i32) -> i32 {
    let sum = i64::from(a) + i64::from(b);
    let sign = if sum >= 0 { 1 } else { -1 };
    ((sum + sign) / 2) as i32
}

/// `exp(x)` for x in [-1/4, 0), Q0.31 in and out (a Taylor expansion around -1/8).
fn exp_on_interval_between_negative_one_quarter_and_0_excl(a: i32) -> i32 {
    const CONSTANT_TERM: i32 = 1_895_147_668; // exp(-1/8)
    const ONE_THIRD: i32 = 715_827_883;
    let x = a.wrapping_add(1 << 28); // a + 1/8
    let x2 = srdhm(x, x);
    let x3 = srdhm(x2, x);
    let x4 = srdhm(x2, x2);
    let x4_over_4 = rounding_divide_by_pot(x4, 2);
    let t = srdhm(x4_over_4.wrapping_add(x3), ONE_THIRD).wrapping_add(x2);
    let x4_over_24_plus_x3_over_6_plus_x2_over_2 = rounding_divide_by_pot(t, 1);
    CONSTANT_TERM.wrapping_add(srdhm(
        CONSTANT_TERM,
        x.wrapping_add(x4_over_24_plus_x3_over_6_plus_x2_over_2),
    ))
}

/// gemmlowp's `exp_on_negative_values`: `exp(a)` for a <= 0 with `integer_bits` integer
/// bits, result in Q0.31.
fn exp_on_negative_values(a: i32, integer_bits: i32) -> i32 {
    let fractional_bits = 31 - integer_bits;
    let one_quarter = 1i32 << (fractional_bits - 2);
    let mask = one_quarter - 1;
    let a_mod_quarter_minus_one_quarter = (a & mask).wrapping_sub(one_quarter);
    let mut result = exp_on_interval_between_negative_one_quarter_and_0_excl(rescale(
        a_mod_quarter_minus_one_quarter,
        integer_bits,
        0,
    ));
    let remainder = a_mod_quarter_minus_one_quarter.wrapping_sub(a);
    // exp(-2^e) in Q0.31 for e = -2 ..= 4: the barrel shifter.
    const BARREL: [(i32, i32); 7] = [
        (-2, 1_672_461_947),
        (-1, 1_302_514_674),
        (0, 790_015_084),
        (1, 290_630_308),
        (2, 39_332_535),
        (3, 720_401),
        (4, 242),
    ];
    for (exponent, multiplier) in BARREL {
        if integer_bits > exponent {
            let shift = fractional_bits + exponent;
            if remainder & (1 << shift) != 0 {
                result = srdhm(result, multiplier);
            }
        }
    }
    if integer_bits > 5 {
        let clamp = -(1i32 << (36 - integer_bits)); // -32
        if a < clamp {
            result = 0;
        }
    }
    if a == 0 { i32::MAX } else { result }
}

/// gemmlowp's `one_over_one_plus_x_for_x_in_0_1` (Newton-Raphson), Q0.31 in and out.
fn one_over_one_plus_x_for_x_in_0_1(a: i32) -> i32 {
    const F2_ONE: i32 = 1 << 29;
    const C48_17: i32 = 1_515_870_810;
    const CNEG32_17: i32 = -1_010_580_540;
    let half_denominator = rounding_half_sum(a, i32::MAX);
    let mut x = C48_17.wrapping_add(srdhm(half_denominator, CNEG32_17));
    for _ in 0..3 {
        let half_denominator_times_x = srdhm(half_denominator, x);
        let one_minus = F2_ONE.wrapping_sub(half_denominator_times_x);
        x = x.wrapping_add(rescale(srdhm(x, one_minus), 4, 2));
    }
    rescale(x, 1, 0)
}

/// TFLite's `GetReciprocal`: 1 / x for x with `integer_digits` integer bits, as a Q0.31
/// value and the number of bits the true result exceeds 1 by.
fn reciprocal(x: i32, integer_digits: i32) -> (i32, i32) {
    let headroom_plus_one = (x as u32).leading_zeros().min(31) as i32;
    let num_bits_over_unit = integer_digits - headroom_plus_one;
    let shifted_sum_minus_one = ((x as u32) << headroom_plus_one).wrapping_sub(1 << 31) as i32;
    (
        one_over_one_plus_x_for_x_in_0_1(shifted_sum_minus_one),
        num_bits_over_unit,
    )
}

// ---------------------------------------------------------------------------------------
// SOFTMAX

const SCALED_DIFF_INTEGER_BITS: i32 = 5;
const ACCUMULATION_INTEGER_BITS: i32 = 12;

enum SoftmaxMode {
    /// TFLite's fixed-point kernel.
    FixedPoint {
        multiplier: i32,
        left_shift: i32,
        diff_min: i32,
    },
    /// Double precision for non-standard output quantization.
    Float {
        beta: f64,
        input_scale: f64,
        output: Qp,
    },
}

struct Softmax {
    qt: QType,
    mode: SoftmaxMode,
    axis: i32,
}

pub(crate) fn build_softmax(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let qt = activation_type(info, 0)?;
    if output_type(info, 0)? != qt {
        return Err(info.unsupported("input and output of different 8-bit types"));
    }
    let (i, o) = (qp(info.operand(0)?), qp(info.output_operand(0)?));
    check_scale(info, "input", i.scale)?;
    check_scale(info, "output", o.scale)?;
    let SoftmaxParams { beta, axis } =
        SoftmaxParams::decode(info.op_type(), info.views()).map_err(|e| info.signature_error(e))?;
    if !beta.is_finite() {
        return Err(info.invalid(format!("beta must be finite, got {beta}")));
    }
    let standard = o.scale == 1.0 / 256.0 && o.zp == qt.min();
    // PreprocessSoftmaxScaling: beta * input_scale * 2^(31 - 5), capped at 2^31 - 1.
    let real =
        (f64::from(beta) * f64::from(i.scale) * f64::from(1u32 << (31 - SCALED_DIFF_INTEGER_BITS)))
            .min(f64::from(i32::MAX));
    let fixed = if standard && real > 1.0 {
        let m = Multiplier::new(real).map_err(|e| info.invalid(e.to_string()))?;
        // CalculateInputRadius(5, left_shift, 31).
        let radius = (f64::from((1 << SCALED_DIFF_INTEGER_BITS) - 1)
            * (1u64 << (31 - SCALED_DIFF_INTEGER_BITS)) as f64
            / (1u64 << m.shift) as f64)
            .floor();
        Some(SoftmaxMode::FixedPoint {
            multiplier: m.multiplier,
            left_shift: m.shift,
            diff_min: -(radius as i32),
        })
    } else {
        None
    };
    let mode = fixed.unwrap_or(SoftmaxMode::Float {
        beta: f64::from(beta),
        input_scale: f64::from(i.scale),
        output: o,
    });
    Ok(Box::new(Softmax { qt, mode, axis }))
}

impl Softmax {
    /// One row of `len` values at stride `stride` starting at `base`.
    fn row(&self, x: &[u8], out: &mut [u8], base: usize, len: usize, stride: usize) {
        let qt = self.qt;
        let at = |c: usize| base + c * stride;
        let max = (0..len).map(|c| qt.load(x[at(c)])).max().unwrap_or(0);
        match self.mode {
            SoftmaxMode::FixedPoint {
                multiplier,
                left_shift,
                diff_min,
            } => {
                let exp_of = |diff: i32| -> i32 {
                    // MultiplyByQuantizedMultiplierGreaterThanOne, then exp in Q5.26.
                    let scaled = srdhm(diff.wrapping_shl(left_shift as u32), multiplier);
                    exp_on_negative_values(scaled, SCALED_DIFF_INTEGER_BITS)
                };
                let mut sum: i32 = 0;
                for c in 0..len {
                    let diff = qt.load(x[at(c)]) - max;
                    if diff >= diff_min {
                        sum = sum.wrapping_add(rescale(exp_of(diff), 0, ACCUMULATION_INTEGER_BITS));
                    }
                }
                let (scale, bits_over_unit) = reciprocal(sum, ACCUMULATION_INTEGER_BITS);
                let exponent = (bits_over_unit + 31 - 8).clamp(0, 31);
                for c in 0..len {
                    let diff = qt.load(x[at(c)]) - max;
                    out[at(c)] = if diff >= diff_min {
                        let unsat = rounding_divide_by_pot(srdhm(scale, exp_of(diff)), exponent);
                        qt.store(unsat.wrapping_add(qt.min()))
                    } else {
                        qt.store(qt.min())
                    };
                }
            }
            SoftmaxMode::Float {
                beta,
                input_scale,
                output,
            } => {
                let e = |c: usize| (beta * input_scale * f64::from(qt.load(x[at(c)]) - max)).exp();
                let sum: f64 = (0..len).map(e).sum();
                for c in 0..len {
                    let q = (e(c) / sum / f64::from(output.scale)).round() as i32;
                    out[at(c)] = qt.store(q.saturating_add(output.zp));
                }
            }
        }
    }
}

impl Kernel for Softmax {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let shape = input.shape;
        let a = if shape.is_empty() {
            0
        } else {
            axis(self.axis, shape.len())?
        };
        let (outer, len, inner) = split_at_axis(shape, a);
        let out = q8_bytes_mut(ctx.output(0)?, "output")?;
        if out.len() != x.len() || x.len() != outer * len * inner {
            return Err(RuntimeError::kernel("input and output sizes differ"));
        }
        for o in 0..outer {
            for i in 0..inner {
                self.row(x, out, o * len * inner + i, len, inner);
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// L2_NORMALIZATION

/// TFLite's `GetInvSqrtQuantizedMultiplierExp` with `reverse_shift = -1`: 1 / sqrt(input)
/// as a Q31 multiplier and a (left) shift.
fn inv_sqrt_multiplier(input: i32) -> (i32, i32) {
    if input <= 1 {
        return (i32::MAX, 0);
    }
    let mut input = input;
    let mut shift = 11;
    while input >= (1 << 29) {
        input /= 4;
        shift += 1;
    }
    let max_left_shift_bits = (input as u32).leading_zeros() as i32 - 1;
    let left_shift_bit_pairs = max_left_shift_bits / 2 - 1;
    shift -= left_shift_bit_pairs;
    input <<= 2 * left_shift_bit_pairs;
    // Newton-Raphson in Q3.28: x <- 1.5 x - (input / 2) x^3, from x = 1.
    const F3_ONE: i32 = 1 << 28;
    const HALF_THREE: i32 = (1 << 28) + (1 << 27);
    let fixedpoint_input = input >> 1;
    let half_input = rounding_divide_by_pot(fixedpoint_input, 1);
    let mut x = F3_ONE;
    for _ in 0..5 {
        let x3 = rescale(srdhm(srdhm(x, x), x), 9, 3);
        x = rescale(
            srdhm(HALF_THREE, x).wrapping_sub(srdhm(half_input, x3)),
            6,
            3,
        );
    }
    const HALF_SQRT_2: i32 = 1_518_500_250;
    let mut inv = srdhm(x, HALF_SQRT_2);
    if shift < 0 {
        inv <<= -shift;
        shift = 0;
    }
    (inv, -shift)
}

struct L2Norm {
    qt: QType,
    zp: i32,
    axis: i32,
}

pub(crate) fn build_l2_normalization(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let qt = activation_type(info, 0)?;
    if output_type(info, 0)? != qt {
        return Err(info.unsupported("input and output of different 8-bit types"));
    }
    let o = qp(info.output_operand(0)?);
    let want_zp = if qt == QType::U8 { 128 } else { 0 };
    if o.scale != 1.0 / 128.0 || o.zp != want_zp {
        return Err(info.unsupported(format!(
            "quantized L2_NORMALIZATION needs output scale 1/128 and zero point {want_zp}"
        )));
    }
    let axis = L2Normalization::decode(info.views())
        .map_err(|e| info.signature_error(e))?
        .axis;
    Ok(Box::new(L2Norm {
        qt,
        zp: info.operand(0)?.zero_point,
        axis,
    }))
}

impl Kernel for L2Norm {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let shape = input.shape;
        let a = if shape.is_empty() {
            0
        } else {
            axis(self.axis, shape.len())?
        };
        let (outer, len, inner) = split_at_axis(shape, a);
        let out = q8_bytes_mut(ctx.output(0)?, "output")?;
        if out.len() != x.len() || x.len() != outer * len * inner {
            return Err(RuntimeError::kernel("input and output sizes differ"));
        }
        let qt = self.qt;
        for o in 0..outer {
            for i in 0..inner {
                let at = |c: usize| o * len * inner + i + c * inner;
                let mut acc: i32 = 0;
                for c in 0..len {
                    let d = qt.load(x[at(c)]) - self.zp;
                    acc = acc.wrapping_add(d * d);
                }
                let (m, shift) = inv_sqrt_multiplier(acc);
                for c in 0..len {
                    let d = qt.load(x[at(c)]) - self.zp;
                    out[at(c)] = match qt {
                        // 128 * d rescaled, offset by the zero point 128.
                        QType::U8 => {
                            qt.store(128 + multiply_by_quantized_multiplier(128 * d, m, shift))
                        }
                        // Output scale 1/128: the shift gains 7.
                        QType::I8 => qt.store(multiply_by_quantized_multiplier(d, m, shift + 7)),
                    };
                }
            }
        }
        Ok(())
    }
}
