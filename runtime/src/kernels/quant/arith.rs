//! The integer arithmetic of TensorFlow Lite's reference kernels, spelled out once.
//!
//! Every quantized kernel rescales through these functions, so that results are
//! bit-exact with TFLite's reference interpreter:
//! - [`quantize_multiplier`]: a positive real multiplier as a Q31 fixed-point value and a
//!   power-of-two exponent (TFLite's `QuantizeMultiplier`, from `frexp`).
//! - [`srdhm`], [`rounding_divide_by_pot`], [`multiply_by_quantized_multiplier`]:
//!   gemmlowp's `SaturatingRoundingDoublingHighMul`, `RoundingDivideByPOT` and TFLite's
//!   (double-rounding) `MultiplyByQuantizedMultiplier`.
//! - [`activation_range`]: a fused activation as a clamp in the quantized domain
//!   (`CalculateActivationRangeQuantized`).
//!
//! Which precision a real multiplier is computed in matters for bit-exactness (the Q31
//! value keeps 31 bits): TFLite computes convolution, fully-connected, ADD/SUB, MEAN and
//! requantization multipliers in double, and MUL, RELU, PRELU and HARD_SWISH ones in
//! float. Callers say which by passing an `f64` computed one way or the other.

use nnc_formats::nn::{FusedActivation, OperandType};

use crate::error::{Result, RuntimeError};

/// The 8-bit quantized element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QType {
    /// TENSOR_QUANT8_ASYMM: uint8.
    U8,
    /// TENSOR_QUANT8_ASYMM_SIGNED (and the int8 symmetric filter types): int8.
    I8,
}

impl QType {
    /// The element type of an activation tensor type (the asymmetric 8-bit types).
    pub fn of(t: OperandType) -> Option<QType> {
        match t {
            OperandType::TensorQuant8Asymm => Some(QType::U8),
            OperandType::TensorQuant8AsymmSigned => Some(QType::I8),
            _ => None,
        }
    }

    /// The element type of a filter or weight tensor type (also the symmetric ones).
    pub fn of_weights(t: OperandType) -> Option<QType> {
        match t {
            OperandType::TensorQuant8Asymm => Some(QType::U8),
            OperandType::TensorQuant8AsymmSigned
            | OperandType::TensorQuant8Symm
            | OperandType::TensorQuant8SymmPerChannel => Some(QType::I8),
            _ => None,
        }
    }

    pub fn min(self) -> i32 {
        match self {
            QType::U8 => 0,
            QType::I8 => -128,
        }
    }

    pub fn max(self) -> i32 {
        match self {
            QType::U8 => 255,
            QType::I8 => 127,
        }
    }

    /// The value of a stored byte.
    #[inline(always)]
    pub fn load(self, b: u8) -> i32 {
        match self {
            QType::U8 => i32::from(b),
            QType::I8 => i32::from(b as i8),
        }
    }

    /// The byte storing `v`, saturated to the type's range.
    #[inline(always)]
    pub fn store(self, v: i32) -> u8 {
        let v = v.clamp(self.min(), self.max());
        match self {
            QType::U8 => v as u8,
            QType::I8 => (v as i8) as u8,
        }
    }

    /// Every value of the type, in the order of the bytes that store them (0..=255).
    pub fn all_values(self) -> impl Iterator<Item = (usize, i32)> {
        (0u8..=255).map(move |b| (usize::from(b), self.load(b)))
    }
}

/// An 8-bit element type, for kernels generic over uint8 and int8 storage.
pub(crate) trait Q8: bytemuck::Pod + Copy + Send + Sync + 'static {
    const MIN: i32;
    const MAX: i32;
    fn to_i32(self) -> i32;
    /// `v` must already lie in `[MIN, MAX]`.
    fn from_i32(v: i32) -> Self;
}

impl Q8 for u8 {
    const MIN: i32 = 0;
    const MAX: i32 = 255;
    #[inline(always)]
    fn to_i32(self) -> i32 {
        i32::from(self)
    }
    #[inline(always)]
    fn from_i32(v: i32) -> Self {
        v as u8
    }
}

impl Q8 for i8 {
    const MIN: i32 = -128;
    const MAX: i32 = 127;
    #[inline(always)]
    fn to_i32(self) -> i32 {
        i32::from(self)
    }
    #[inline(always)]
    fn from_i32(v: i32) -> Self {
        v as i8
    }
}

/// Scale and zero point of a per-tensor quantized operand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Qp {
    pub scale: f32,
    pub zp: i32,
}

/// A real multiplier as `multiplier * 2^(shift - 31)`, `multiplier` in `[2^30, 2^31)`
/// (or 0): TFLite's `QuantizeMultiplier`. The mantissa is rounded half away from zero
/// (`TfLiteRound`); a mantissa that rounds up to 2^31 is halved with the exponent
/// raised; multipliers below 2^-31 flush to zero. Multipliers that need a left shift
/// above 31 (real >= 2^31) or that are negative or not finite are refused.
pub(crate) fn quantize_multiplier(real: f64) -> Result<(i32, i32)> {
    if real == 0.0 {
        return Ok((0, 0));
    }
    if !(real.is_finite() && real > 0.0) {
        return Err(RuntimeError::kernel(format!(
            "cannot represent the rescaling multiplier {real}"
        )));
    }
    let (mantissa, mut shift) = frexp(real);
    let mut q = (mantissa * (1u64 << 31) as f64).round() as i64;
    if q == 1i64 << 31 {
        q /= 2;
        shift += 1;
    }
    if shift < -31 {
        return Ok((0, 0));
    }
    if shift > 31 {
        return Err(RuntimeError::kernel(format!(
            "the rescaling multiplier {real} is out of range (scales too far apart)"
        )));
    }
    Ok((q as i32, shift))
}

/// `x = m * 2^e` with `m` in `[0.5, 1)` for finite positive `x` (C's `frexp`).
fn frexp(x: f64) -> (f64, i32) {
    let bits = x.to_bits();
    let exp_bits = ((bits >> 52) & 0x7ff) as i32;
    if exp_bits == 0 {
        // Subnormal: scale into the normal range first.
        let (m, e) = frexp(x * 2f64.powi(64));
        return (m, e - 64);
    }
    let m = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    (m, exp_bits - 1022)
}

/// gemmlowp's `SaturatingRoundingDoublingHighMul`: `round(a * b / 2^31)` with ties
/// toward +infinity, saturating the one overflowing case (`MIN * MIN`).
#[inline(always)]
pub(crate) fn srdhm(a: i32, b: i32) -> i32 {
    if a == b && a == i32::MIN {
        return i32::MAX;
    }
    let ab = i64::from(a) * i64::from(b);
    let nudge: i64 = if ab >= 0 { 1 << 30 } else { 1 - (1 << 30) };
    // Truncating division, as in C++.
    ((ab + nudge) / (1i64 << 31)) as i32
}

/// gemmlowp's `RoundingDivideByPOT`: `x / 2^exponent` rounded to nearest, ties away
/// from zero. `exponent` must be in `0..=31`.
#[inline(always)]
pub(crate) fn rounding_divide_by_pot(x: i32, exponent: i32) -> i32 {
    let mask = ((1i64 << exponent) - 1) as i32;
    let remainder = x & mask;
    let threshold = (mask >> 1) + i32::from(x < 0);
    (x >> exponent) + i32::from(remainder > threshold)
}

/// TFLite's `MultiplyByQuantizedMultiplier` (double rounding): a left shift (wrapping,
/// as the C++ multiplication does in practice), the rounding doubling high multiply, then
/// a rounding right shift.
#[inline(always)]
pub(crate) fn multiply_by_quantized_multiplier(x: i32, multiplier: i32, shift: i32) -> i32 {
    // Shifts beyond 31 cannot come from quantize_multiplier; clamping keeps any caller
    // panic-free.
    let left = shift.clamp(0, 31);
    let right = (-shift).clamp(0, 31);
    rounding_divide_by_pot(srdhm(x.wrapping_shl(left as u32), multiplier), right)
}

/// One requantization: a Q31 multiplier and its exponent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Multiplier {
    pub multiplier: i32,
    pub shift: i32,
}

impl Multiplier {
    pub fn new(real: f64) -> Result<Multiplier> {
        let (multiplier, shift) = quantize_multiplier(real)?;
        Ok(Multiplier { multiplier, shift })
    }

    /// The ratio `num / den` of two scales computed in float, then widened (how TFLite's
    /// MUL, RELU, PRELU prepare theirs).
    pub fn from_f32_ratio(num: f32, den: f32) -> Result<Multiplier> {
        Multiplier::new(f64::from(num / den))
    }

    /// The ratio computed in double (convolutions, requantization, MEAN).
    pub fn from_f64_ratio(num: f32, den: f32) -> Result<Multiplier> {
        Multiplier::new(f64::from(num) / f64::from(den))
    }

    #[inline(always)]
    pub fn apply(&self, x: i32) -> i32 {
        multiply_by_quantized_multiplier(x, self.multiplier, self.shift)
    }
}

/// TFLite's `Quantize` helper of `CalculateActivationRangeQuantized`:
/// `zero_point + round(f / scale)` in float.
fn quantize_f32(f: f32, qp: Qp) -> i32 {
    let q = (f / qp.scale).round();
    // `as` saturates; out-of-range activations clamp to the type range below anyway.
    qp.zp.saturating_add(q as i32)
}

/// The clamp `[lo, hi]` a fused activation applies in the quantized domain of the output
/// (TFLite's `CalculateActivationRangeQuantized`).
pub(crate) fn activation_range(act: FusedActivation, out: Qp, t: QType) -> (i32, i32) {
    let (qmin, qmax) = (t.min(), t.max());
    match act {
        FusedActivation::None => (qmin, qmax),
        FusedActivation::Relu => (qmin.max(quantize_f32(0.0, out)), qmax),
        FusedActivation::Relu6 => (
            qmin.max(quantize_f32(0.0, out)),
            qmax.min(quantize_f32(6.0, out)),
        ),
        FusedActivation::Relu1 => (
            qmin.max(quantize_f32(-1.0, out)),
            qmax.min(quantize_f32(1.0, out)),
        ),
    }
}

/// A 256-entry table mapping every stored input byte to the stored output byte.
pub(crate) fn byte_table(input: QType, output: QType, f: impl Fn(i32) -> i32) -> [u8; 256] {
    let mut table = [0u8; 256];
    for (byte, v) in input.all_values() {
        table[byte] = output.store(f(v));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_multiplier_matches_frexp_rounding() {
        assert_eq!(quantize_multiplier(0.5).unwrap(), (1 << 30, 0));
        assert_eq!(quantize_multiplier(1.0).unwrap(), (1 << 30, 1));
        assert_eq!(quantize_multiplier(0.75).unwrap(), (3 << 29, 0));
        assert_eq!(quantize_multiplier(0.0).unwrap(), (0, 0));
        // Rounds up to 2^31: halved, exponent raised.
        let just_below_one = 1.0 - 1e-12;
        assert_eq!(quantize_multiplier(just_below_one).unwrap(), (1 << 30, 1));
        assert_eq!(quantize_multiplier(1e-12).unwrap(), (0, 0));
        assert!(quantize_multiplier(-1.0).is_err());
        assert!(quantize_multiplier(f64::NAN).is_err());
        assert!(quantize_multiplier(1e10).is_err());
        let (m, s) = quantize_multiplier(5e-320).unwrap();
        assert_eq!((m, s), (0, 0));
    }

    #[test]
    fn srdhm_rounds_half_up_and_saturates() {
        assert_eq!(srdhm(i32::MIN, i32::MIN), i32::MAX);
        // 2^30 * 2^30 / 2^31 = 2^29 exactly.
        assert_eq!(srdhm(1 << 30, 1 << 30), 1 << 29);
        // +0.5 rounds up, -0.5 rounds toward +infinity (to 0).
        assert_eq!(srdhm(1, 1 << 30), 1);
        assert_eq!(srdhm(-1, 1 << 30), 0);
        assert_eq!(srdhm(-3, 1 << 30), -1);
    }

    #[test]
    fn rounding_divide_rounds_half_away_from_zero() {
        assert_eq!(rounding_divide_by_pot(5, 1), 3);
        assert_eq!(rounding_divide_by_pot(-5, 1), -3);
        assert_eq!(rounding_divide_by_pot(4, 1), 2);
        assert_eq!(rounding_divide_by_pot(-7, 2), -2);
        assert_eq!(rounding_divide_by_pot(i32::MIN, 31), -1);
        assert_eq!(rounding_divide_by_pot(i32::MAX, 31), 1);
        assert_eq!(rounding_divide_by_pot(17, 0), 17);
    }

    #[test]
    fn activation_ranges() {
        let qp = Qp {
            scale: 0.05,
            zp: -10,
        };
        assert_eq!(
            activation_range(FusedActivation::Relu6, qp, QType::I8),
            (-10, 110)
        );
        assert_eq!(
            activation_range(FusedActivation::Relu1, qp, QType::I8),
            (-30, 10)
        );
        assert_eq!(
            activation_range(FusedActivation::Relu, qp, QType::U8),
            (0, 255)
        );
    }
}
