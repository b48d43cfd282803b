//! Narrow element types that nnc carries in wider ones: bfloat16, the four float8
//! formats of ONNX (and OCP's float4 e2m1) computed as float32, and the 4- and 2-bit
//! integers computed as 8-bit ones.
//!
//! The NN operation set has none of these types. A model whose inputs, outputs or
//! constants hold them computes in float32 (or int8/uint8); their values are exact
//! there, so decoding is lossless, and the one lossy step, rounding a float32 to the
//! narrow format, happens where the source model rounds: in a cast (the MATH_UNARY
//! extension's rounding functions) and when an output is written in its declared type.
//!
//! Why by hand: `half` covers bfloat16 only, and the float8 crates cover e4m3fn and e5m2
//! without the `fnuz` variants or ONNX's saturating conversion. One parameterised
//! encoder covers all of them, so every format rounds by the same code.

/// How a format spends its all-ones codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Specials {
    /// IEEE 754: an all-ones exponent is infinity (mantissa 0) or NaN.
    Ieee,
    /// "Finite, NaN": no infinities; the one all-ones code (per sign) is NaN.
    FiniteNan,
    /// "Finite, NaN, unsigned zero": no infinities and no -0; 0x80 is the one NaN.
    FiniteNanUnsignedZero,
    /// No infinities and no NaN (float4 e2m1): every code is a number.
    FiniteOnly,
}

/// A floating-point format narrower than float32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FloatFormat {
    Bfloat16,
    Float8E4M3Fn,
    Float8E4M3Fnuz,
    Float8E5M2,
    Float8E5M2Fnuz,
    Float4E2M1Fn,
}

impl FloatFormat {
    pub const ALL: [FloatFormat; 6] = [
        FloatFormat::Bfloat16,
        FloatFormat::Float8E4M3Fn,
        FloatFormat::Float8E4M3Fnuz,
        FloatFormat::Float8E5M2,
        FloatFormat::Float8E5M2Fnuz,
        FloatFormat::Float4E2M1Fn,
    ];

    /// (exponent bits, mantissa bits, exponent bias, specials)
    fn layout(self) -> (u32, u32, i32, Specials) {
        match self {
            FloatFormat::Bfloat16 => (8, 7, 127, Specials::Ieee),
            FloatFormat::Float8E4M3Fn => (4, 3, 7, Specials::FiniteNan),
            FloatFormat::Float8E4M3Fnuz => (4, 3, 8, Specials::FiniteNanUnsignedZero),
            FloatFormat::Float8E5M2 => (5, 2, 15, Specials::Ieee),
            FloatFormat::Float8E5M2Fnuz => (5, 2, 16, Specials::FiniteNanUnsignedZero),
            FloatFormat::Float4E2M1Fn => (2, 1, 1, Specials::FiniteOnly),
        }
    }

    /// Bits per value (sign, exponent and mantissa).
    pub fn bits(self) -> u32 {
        let (e, m, _, _) = self.layout();
        1 + e + m
    }

    fn sign_bit(self) -> u16 {
        1 << (self.bits() - 1)
    }

    /// The code of the largest finite value (positive).
    fn max_code(self) -> u16 {
        let (e, m, _, specials) = self.layout();
        let all_ones = (1u16 << (e + m)) - 1;
        match specials {
            // The largest exponent below all-ones, full mantissa.
            Specials::Ieee => all_ones - (1 << m),
            // All ones is NaN; one below it is the largest number.
            Specials::FiniteNan => all_ones - 1,
            Specials::FiniteNanUnsignedZero | Specials::FiniteOnly => all_ones,
        }
    }

    /// The largest finite value.
    pub fn max_value(self) -> f32 {
        self.decode(self.max_code())
    }

    fn nan_code(self, negative: bool) -> u16 {
        let (e, m, _, specials) = self.layout();
        let sign = if negative { self.sign_bit() } else { 0 };
        match specials {
            // A quiet NaN: all-ones exponent, top mantissa bit.
            Specials::Ieee => sign | (((1 << e) - 1) << m) | (1 << (m - 1)),
            Specials::FiniteNan => sign | ((1 << (e + m)) - 1),
            Specials::FiniteNanUnsignedZero => 0x80,
            // No NaN to give: NaN becomes -0 whatever its sign, as `ml_dtypes` (and so
            // ONNX's reference) converts it.
            Specials::FiniteOnly => self.sign_bit(),
        }
    }

    /// What a finite value beyond the range becomes without saturation: infinity where
    /// the format has it, NaN otherwise.
    fn overflow_code(self, negative: bool) -> u16 {
        let (e, m, _, specials) = self.layout();
        match specials {
            Specials::Ieee => (if negative { self.sign_bit() } else { 0 }) | (((1 << e) - 1) << m),
            Specials::FiniteOnly => (if negative { self.sign_bit() } else { 0 }) | self.max_code(),
            _ => self.nan_code(negative),
        }
    }

    /// The value of a code (its low `bits()` bits).
    pub fn decode(self, code: u16) -> f32 {
        let (e_bits, m_bits, bias, specials) = self.layout();
        let code = code & ((1u32 << self.bits()) - 1) as u16;
        let negative = code & self.sign_bit() != 0;
        let exp = i32::from((code >> m_bits) & ((1 << e_bits) - 1));
        let man = i32::from(code & ((1 << m_bits) - 1));
        let exp_all_ones = exp == (1 << e_bits) - 1;
        match specials {
            Specials::Ieee if exp_all_ones => {
                let v = if man == 0 { f32::INFINITY } else { f32::NAN };
                return if negative { -v } else { v };
            }
            Specials::FiniteNan if exp_all_ones && man == (1 << m_bits) - 1 => {
                return if negative { -f32::NAN } else { f32::NAN };
            }
            Specials::FiniteNanUnsignedZero if code == 0x80 => return f32::NAN,
            _ => {}
        }
        // Subnormals share the smallest normal exponent; every value is exact in f64
        // and in f32 (at most 8 significant bits, exponents well inside f32's).
        let magnitude = if exp == 0 {
            f64::from(man) * 2f64.powi(1 - bias - m_bits as i32)
        } else {
            f64::from((1 << m_bits) + man) * 2f64.powi(exp - bias - m_bits as i32)
        };
        let v = magnitude as f32;
        if negative { -v } else { v }
    }

    /// The code of `x` rounded to nearest, ties to even. With `saturate`, values beyond
    /// the range and infinities become the largest finite value of their sign (ONNX's
    /// Cast with `saturate = 1`); without, they become infinity where the format has it
    /// and NaN where it does not. NaN stays NaN; the `fnuz` formats have no -0, so a
    /// negative value that rounds to zero is +0.
    pub fn encode(self, x: f32, saturate: bool) -> u16 {
        let (_, m_bits, bias, specials) = self.layout();
        let negative = x.is_sign_negative();
        let sign = if negative { self.sign_bit() } else { 0 };
        if x.is_nan() {
            return self.nan_code(negative);
        }
        let signed_zero = if specials == Specials::FiniteNanUnsignedZero {
            0
        } else {
            sign
        };
        if x.is_infinite() {
            return if saturate || specials == Specials::FiniteOnly {
                sign | self.max_code()
            } else {
                self.overflow_code(negative)
            };
        }
        let a = f64::from(x).abs();
        if a == 0.0 {
            return signed_zero;
        }
        // The exponent of a's leading bit, no lower than the smallest normal's: below it
        // the quantum stays that of the subnormals. Scaling by powers of two is exact in
        // f64, so the only rounding is the `round_ties_even`.
        let min_exp = 1 - bias;
        let exp = (a.log2().floor() as i32).max(min_exp);
        // log2 of a value just below a power of two can round up to it: correct it.
        let exp = if exp > min_exp && a < 2f64.powi(exp) {
            exp - 1
        } else {
            exp
        };
        let quantum = 2f64.powi(exp - m_bits as i32);
        let rounded = (a / quantum).round_ties_even() * quantum;
        let max = f64::from(self.max_value());
        if rounded > max {
            return if saturate || specials == Specials::FiniteOnly {
                sign | self.max_code()
            } else {
                self.overflow_code(negative)
            };
        }
        if rounded == 0.0 {
            return signed_zero;
        }
        // Rounding may have carried into the next binade.
        let r_exp = (rounded.log2().floor() as i32).max(min_exp);
        let r_exp = if r_exp > min_exp && rounded < 2f64.powi(r_exp) {
            r_exp - 1
        } else {
            r_exp
        };
        let code = if rounded < 2f64.powi(min_exp) {
            (rounded / 2f64.powi(min_exp - m_bits as i32)) as u16
        } else {
            let man = (rounded / 2f64.powi(r_exp - m_bits as i32)) as u16 - (1 << m_bits);
            (((r_exp + bias) as u16) << m_bits) | man
        };
        sign | code
    }

    /// `x` rounded to the format and back: the float32 a cast to the format and back
    /// gives.
    pub fn round(self, x: f32, saturate: bool) -> f32 {
        self.decode(self.encode(x, saturate))
    }
}

/// A signed or unsigned integer of 4 or 2 bits, held one per byte (sign-extended) in
/// host tensors and packed only in ONNX's tensor protos.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NarrowInt {
    pub bits: u32,
    pub signed: bool,
}

impl NarrowInt {
    pub fn min(self) -> i32 {
        if self.signed {
            -(1 << (self.bits - 1))
        } else {
            0
        }
    }

    pub fn max(self) -> i32 {
        if self.signed {
            (1 << (self.bits - 1)) - 1
        } else {
            (1 << self.bits) - 1
        }
    }

    /// The value of a packed field (its low `bits` bits).
    pub fn from_field(self, field: u8) -> i32 {
        let v = i32::from(field & ((1u16 << self.bits) - 1) as u8);
        if self.signed && v > self.max() {
            v - (1 << self.bits)
        } else {
            v
        }
    }
}

/// Unpacks `count` fields of `bits` bits (4 or 2), the first in the low bits of the first
/// byte, as ONNX packs sub-byte types. `None` when `packed` is too short.
pub fn unpack_fields(packed: &[u8], bits: u32, count: usize) -> Option<Vec<u8>> {
    let per_byte = (8 / bits) as usize;
    if packed.len() < count.div_ceil(per_byte) {
        return None;
    }
    let mask = ((1u16 << bits) - 1) as u8;
    Some(
        (0..count)
            .map(|i| (packed[i / per_byte] >> ((i % per_byte) as u32 * bits)) & mask)
            .collect(),
    )
}

/// Packs fields of `bits` bits (4 or 2) as ONNX stores them; the last byte's unused
/// fields are zero.
pub fn pack_fields(fields: &[u8], bits: u32) -> Vec<u8> {
    let per_byte = (8 / bits) as usize;
    let mask = ((1u16 << bits) - 1) as u8;
    let mut out = vec![0u8; fields.len().div_ceil(per_byte)];
    for (i, &f) in fields.iter().enumerate() {
        out[i / per_byte] |= (f & mask) << ((i % per_byte) as u32 * bits);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips() {
        for format in FloatFormat::ALL {
            for code in 0..(1u32 << format.bits()) {
                let code = code as u16;
                let v = format.decode(code);
                if v.is_nan() {
                    assert!(format.decode(format.encode(v, false)).is_nan());
                    continue;
                }
                if format == FloatFormat::Float4E2M1Fn && code == 0x8 {
                    // -0: float4 has no NaN, and NaN encodes as this code.
                    assert_eq!(format.encode(v, false), 0x8);
                }
                let back = format.encode(v, false);
                // -0 of the fnuz formats is their NaN, never produced by decoding.
                assert_eq!(
                    format.decode(back).to_bits(),
                    v.to_bits(),
                    "{format:?} code {code:#x} value {v}"
                );
            }
        }
    }

    #[test]
    fn known_values() {
        use FloatFormat::*;
        assert_eq!(Float8E4M3Fn.max_value(), 448.0);
        assert_eq!(Float8E4M3Fnuz.max_value(), 240.0);
        assert_eq!(Float8E5M2.max_value(), 57344.0);
        assert_eq!(Float8E5M2Fnuz.max_value(), 57344.0);
        assert_eq!(Float4E2M1Fn.max_value(), 6.0);
        assert_eq!(Bfloat16.max_value(), f32::from_bits(0x7f7f_0000));
        // Smallest subnormals.
        assert_eq!(Float8E4M3Fn.decode(1), 2f32.powi(-9));
        assert_eq!(Float8E5M2.decode(1), 2f32.powi(-16));
        assert_eq!(Float8E4M3Fnuz.decode(1), 2f32.powi(-10));
        assert_eq!(Float4E2M1Fn.decode(1), 0.5);
        // Ties to even: 17 lies between 16 and 18 in e4m3 (quantum 2 above 16): even
        // mantissa wins; 19 -> 20.
        assert_eq!(Float8E4M3Fn.round(17.0, true), 16.0);
        assert_eq!(Float8E4M3Fn.round(19.0, true), 20.0);
        // Saturation and overflow.
        assert_eq!(Float8E4M3Fn.round(1e6, true), 448.0);
        assert!(Float8E4M3Fn.round(1e6, false).is_nan());
        assert_eq!(Float8E4M3Fn.round(f32::NEG_INFINITY, true), -448.0);
        assert_eq!(Float8E5M2.round(1e6, false), f32::INFINITY);
        assert_eq!(Float8E5M2.round(f32::INFINITY, true), 57344.0);
        // 464 is halfway between 448 and 480 (not a number in e4m3fn): even, 448.
        assert_eq!(Float8E4M3Fn.round(464.0, false), 448.0);
        assert!(Float8E4M3Fn.round(465.0, false).is_nan());
        // fnuz has no -0.
        assert_eq!(Float8E4M3Fnuz.encode(-0.0, true), 0);
        assert_eq!(Float8E4M3Fnuz.encode(-1e-9, true), 0);
        assert_eq!(Float8E4M3Fn.encode(-0.0, true), 0x80);
        assert_eq!(Float8E4M3Fnuz.encode(f32::NAN, true), 0x80);
        // bfloat16 keeps the top 16 bits, rounded to nearest even.
        assert_eq!(Bfloat16.encode(1.0, true), 0x3f80);
        assert_eq!(Bfloat16.encode(f32::from_bits(0x3f80_8000), true), 0x3f80);
        assert_eq!(Bfloat16.encode(f32::from_bits(0x3f81_8000), true), 0x3f82);
        assert_eq!(Bfloat16.encode(f32::INFINITY, false), 0x7f80);
        // float4: every value saturates; NaN becomes -0.
        assert_eq!(Float4E2M1Fn.round(7.0, false), 6.0);
        assert_eq!(Float4E2M1Fn.encode(f32::NAN, true), 0x8);
        assert_eq!(Float4E2M1Fn.round(-0.3, false), -0.5);
    }

    #[test]
    fn sub_byte_packing() {
        let i4 = NarrowInt {
            bits: 4,
            signed: true,
        };
        let fields: Vec<u8> = [-8i32, 7, -1, 3, 5]
            .iter()
            .map(|&v| (v as u8) & 0xf)
            .collect();
        let packed = pack_fields(&fields, 4);
        assert_eq!(packed, vec![0x78, 0x3f, 0x05]);
        let back = unpack_fields(&packed, 4, 5).unwrap();
        let values: Vec<i32> = back.iter().map(|&f| i4.from_field(f)).collect();
        assert_eq!(values, vec![-8, 7, -1, 3, 5]);
        assert!(unpack_fields(&packed, 4, 7).is_none());
        let u2 = NarrowInt {
            bits: 2,
            signed: false,
        };
        let packed = pack_fields(&[0, 1, 2, 3, 3], 2);
        assert_eq!(packed, vec![0b1110_0100, 0b11]);
        let back: Vec<i32> = unpack_fields(&packed, 2, 5)
            .unwrap()
            .iter()
            .map(|&f| u2.from_field(f))
            .collect();
        assert_eq!(back, vec![0, 1, 2, 3, 3]);
    }
}
