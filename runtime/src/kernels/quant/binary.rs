//! Quantized elementwise binary operations with NumPy broadcasting: ADD, SUB, MUL,
//! MAXIMUM, MINIMUM, PRELU, and the comparisons EQUAL .. GREATER_EQUAL.
//!
//! TFLite's reference arithmetic:
//! - ADD / SUB (`reference_ops::Add`, `BroadcastQuantSubSlow`): both inputs are moved to
//!   a common high-resolution scale, `((x - zp) << 20)` times `scale_i / (2 * max(scale_1,
//!   scale_2))`, summed (or subtracted), and the sum requantized by `2 * max_scale /
//!   (2^20 * output_scale)`; multipliers in double.
//! - MUL (`reference_integer_ops::Mul`): `(x1 - zp1) * (x2 - zp2)` requantized by
//!   `scale_1 * scale_2 / output_scale` (computed in float, as TFLite does).
//! - PRELU (`BroadcastPrelu4DSlow`): `x >= zp` requantizes `x - zp` by
//!   `input_scale / output_scale`, otherwise `(x - zp) * (alpha - alpha_zp)` by
//!   `input_scale * alpha_scale / output_scale` (both in float).
//! - MAXIMUM / MINIMUM: compare the stored values when all three tensors share scale and
//!   zero point (TFLite's case); otherwise each input is first requantized to the output.
//! - Comparisons (`ComparisonQuantized`): `((x - zp) << 8)` rescaled by the input's own
//!   scale as a multiplier, then compared, so inputs of different scales compare by value.
//!   TFLite's arithmetic is only defined for scales below 1; with a scale of 1 or more
//!   nnc compares the exact real values `(x - zp) * scale` instead.
//!
//! All outputs saturate to the output type; fused activations clamp in its domain.
//!
//! Every operation but a raw MAXIMUM / MINIMUM is a function of the two stored bytes
//! alone, so the kernel evaluates that arithmetic once per pair of bytes when it is
//! built (65,536 entries, 64 KiB) and executes as one table lookup per element: exactly
//! the reference arithmetic, at the cost of a load.

use nnc_formats::nn::FusedActivation;

use super::arith::{Multiplier, Q8, QType, Qp, activation_range};
use super::{activation_type, check_scale, output_type, q8_bytes, qp, typed, typed_mut};
use crate::error::{Result, RuntimeError};
use crate::kernels::elementwise::broadcast_map;
use crate::kernels::{Kernel, KernelContext, OpInfo};

/// What to compute per element, with its build-time constants.
#[derive(Clone, Copy, Debug)]
enum Op {
    AddSub {
        sub: bool,
        zp1: i32,
        zp2: i32,
        m1: Multiplier,
        m2: Multiplier,
        out: Multiplier,
        out_zp: i32,
        range: (i32, i32),
    },
    Mul {
        zp1: i32,
        zp2: i32,
        m: Multiplier,
        out_zp: i32,
        range: (i32, i32),
    },
    /// MAXIMUM / MINIMUM on stored values (equal quantization everywhere).
    MaxMinRaw { max: bool },
    /// MAXIMUM / MINIMUM after requantizing each input to the output.
    MaxMinRescaled {
        max: bool,
        zp1: i32,
        zp2: i32,
        m1: Multiplier,
        m2: Multiplier,
        out_zp: i32,
        range: (i32, i32),
    },
    Prelu {
        zp: i32,
        alpha_zp: i32,
        identity: Multiplier,
        alpha: Multiplier,
        out_zp: i32,
        range: (i32, i32),
    },
}

/// `2^20`: the left shift ADD and SUB apply before rescaling (8-bit inputs).
const ADD_LEFT_SHIFT: i32 = 20;

impl Op {
    #[inline(always)]
    fn eval(self, a: i32, b: i32) -> i32 {
        match self {
            Op::AddSub {
                sub,
                zp1,
                zp2,
                m1,
                m2,
                out,
                out_zp,
                range,
            } => {
                let s1 = m1.apply((a - zp1) << ADD_LEFT_SHIFT);
                let s2 = m2.apply((b - zp2) << ADD_LEFT_SHIFT);
                let raw = if sub {
                    s1.wrapping_sub(s2)
                } else {
                    s1.wrapping_add(s2)
                };
                out.apply(raw).wrapping_add(out_zp).clamp(range.0, range.1)
            }
            Op::Mul {
                zp1,
                zp2,
                m,
                out_zp,
                range,
            } => m
                .apply((a - zp1) * (b - zp2))
                .wrapping_add(out_zp)
                .clamp(range.0, range.1),
            Op::MaxMinRaw { max } => {
                if max {
                    a.max(b)
                } else {
                    a.min(b)
                }
            }
            Op::MaxMinRescaled {
                max,
                zp1,
                zp2,
                m1,
                m2,
                out_zp,
                range,
            } => {
                let x = m1
                    .apply(a - zp1)
                    .wrapping_add(out_zp)
                    .clamp(range.0, range.1);
                let y = m2
                    .apply(b - zp2)
                    .wrapping_add(out_zp)
                    .clamp(range.0, range.1);
                if max { x.max(y) } else { x.min(y) }
            }
            Op::Prelu {
                zp,
                alpha_zp,
                identity,
                alpha,
                out_zp,
                range,
            } => {
                let x = a - zp;
                let v = if x >= 0 {
                    identity.apply(x)
                } else {
                    alpha.apply(x * (b - alpha_zp))
                };
                v.wrapping_add(out_zp).clamp(range.0, range.1)
            }
        }
    }
}

struct Binary {
    op: Op,
    qt: QType,
    /// The output byte of every pair of input bytes, at `a << 8 | b` (all but a raw
    /// MAXIMUM / MINIMUM), built the first time an execution needs it: a same-shape ADD
    /// or SUB on AVX-512 never does (ten 64 KiB tables took 3-5 ms of int8 MobileNetV2's
    /// preparation and were never read).
    pairs: std::sync::OnceLock<Option<Box<PairTable>>>,
}

impl Binary {
    fn pairs(&self) -> Option<&PairTable> {
        self.pairs
            .get_or_init(|| pairs_for(self.op, self.qt))
            .as_deref()
    }
}

fn multiplier(info: &OpInfo, real: f64) -> Result<Multiplier> {
    Multiplier::new(real).map_err(|e| info.invalid(e.to_string()))
}

/// The quantized binary arithmetic an operation is, chosen where it is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arith {
    Add,
    Sub,
    Mul,
    Maximum,
    Minimum,
    Prelu,
}

pub(crate) fn build(info: &OpInfo, arith: Arith) -> Result<Box<dyn Kernel>> {
    let qt = activation_type(info, 0)?;
    if activation_type(info, 1)? != qt || output_type(info, 0)? != qt {
        return Err(info.unsupported("operands of different 8-bit types"));
    }
    let (a, b, o) = (
        qp(info.operand(0)?),
        qp(info.operand(1)?),
        qp(info.output_operand(0)?),
    );
    check_scale(info, "input0", a.scale)?;
    check_scale(info, "input1", b.scale)?;
    check_scale(info, "output", o.scale)?;
    let act = if matches!(arith, Arith::Add | Arith::Sub | Arith::Mul) {
        info.activation(2)?
    } else {
        FusedActivation::None
    };
    let range = activation_range(act, o, qt);
    let op = match arith {
        Arith::Add | Arith::Sub => {
            // TFLite: twice_max_input_scale = 2 * max(s1, s2) (in float, exact), the
            // ratios in double.
            let twice_max = f64::from(2.0 * a.scale.max(b.scale));
            let out_den = f64::from((1 << ADD_LEFT_SHIFT) as f32 * o.scale);
            Op::AddSub {
                sub: arith == Arith::Sub,
                zp1: a.zp,
                zp2: b.zp,
                m1: multiplier(info, f64::from(a.scale) / twice_max)?,
                m2: multiplier(info, f64::from(b.scale) / twice_max)?,
                out: multiplier(info, twice_max / out_den)?,
                out_zp: o.zp,
                range,
            }
        }
        Arith::Mul => Op::Mul {
            zp1: a.zp,
            zp2: b.zp,
            m: multiplier(info, f64::from(a.scale * b.scale / o.scale))?,
            out_zp: o.zp,
            range,
        },
        Arith::Maximum | Arith::Minimum => {
            let max = arith == Arith::Maximum;
            if a == o && b == o {
                Op::MaxMinRaw { max }
            } else {
                Op::MaxMinRescaled {
                    max,
                    zp1: a.zp,
                    zp2: b.zp,
                    m1: multiplier(info, f64::from(a.scale) / f64::from(o.scale))?,
                    m2: multiplier(info, f64::from(b.scale) / f64::from(o.scale))?,
                    out_zp: o.zp,
                    range,
                }
            }
        }
        Arith::Prelu => Op::Prelu {
            zp: a.zp,
            alpha_zp: b.zp,
            identity: multiplier(info, f64::from(a.scale / o.scale))?,
            alpha: multiplier(info, f64::from(a.scale * b.scale / o.scale))?,
            out_zp: o.zp,
            range,
        },
    };
    Ok(Box::new(Binary {
        op,
        qt,
        pairs: std::sync::OnceLock::new(),
    }))
}

/// [`Binary::pairs`] for `op` on `qt`.
fn pairs_for(op: Op, qt: QType) -> Option<Box<PairTable>> {
    match op {
        Op::MaxMinRaw { .. } => None,
        Op::AddSub {
            sub,
            zp1,
            zp2,
            m1,
            m2,
            out,
            out_zp,
            range,
        } => {
            // Each input's rescaled value depends on that input alone: 256 each.
            let (mut t1, mut t2) = ([0i32; 256], [0i32; 256]);
            for (byte, v) in qt.all_values() {
                t1[byte] = m1.apply((v - zp1) << ADD_LEFT_SHIFT);
                let s2 = m2.apply((v - zp2) << ADD_LEFT_SHIFT);
                // SUB negates the second term; wrapping as the subtraction would.
                t2[byte] = if sub { s2.wrapping_neg() } else { s2 };
            }
            Some(pair_table(qt, |i, j, _, _| {
                out.apply(t1[i].wrapping_add(t2[j]))
                    .wrapping_add(out_zp)
                    .clamp(range.0, range.1)
            }))
        }
        _ => Some(pair_table(qt, |_, _, a, b| op.eval(a, b))),
    }
}

/// One output byte per pair of input bytes. A fixed-size array, so that indexing it with
/// a 16-bit index needs no bounds check in the per-element loop.
type PairTable = [u8; 1 << 16];

/// The output byte of every pair of stored bytes `(i, j)`, at `i << 8 | j`: `f(i, j, a,
/// b)` of the bytes and their values, saturated to the type.
fn pair_table(qt: QType, f: impl Fn(usize, usize, i32, i32) -> i32) -> Box<PairTable> {
    let (lo, hi) = match qt {
        QType::U8 => (0, 255),
        QType::I8 => (-128, 127),
    };
    let mut table = Box::new([0u8; 1 << 16]);
    for (i, a) in qt.all_values() {
        for (j, b) in qt.all_values() {
            // The clamp keeps the value in the type's range; the byte is its two's
            // complement either way.
            table[i << 8 | j] = f(i, j, a, b).clamp(lo, hi) as u8;
        }
    }
    table
}

fn run_typed<'p, T: Q8>(
    op: Op,
    pairs: impl FnOnce() -> Option<&'p PairTable>,
    ctx: &mut KernelContext,
) -> Result<()> {
    let a = ctx.input(0)?;
    let b = ctx.input(1)?;
    let (x, y) = (
        typed::<T>(q8_bytes(&a, "input0")?),
        typed::<T>(q8_bytes(&b, "input1")?),
    );
    let out = ctx.output(0)?;
    let so = out.shape;
    let o = typed_mut::<T>(super::q8_bytes_mut(out, "output")?);
    #[cfg(target_arch = "x86_64")]
    if let Op::AddSub { .. } = op
        && x.len() == o.len()
        && y.len() == o.len()
        && a.shape == so
        && b.shape == so
        && add_avx512::available(op)
    {
        // SAFETY: AVX512F/BW/VL are present (available); the three slices have one
        // length.
        unsafe {
            add_avx512::run(
                op,
                T::MIN < 0,
                bytemuck::cast_slice(x),
                bytemuck::cast_slice(y),
                bytemuck::cast_slice_mut(o),
            )
        };
        return Ok(());
    }
    if let Some(table) = pairs() {
        let byte = |v: T| u16::from(bytemuck::cast::<T, u8>(v));
        return broadcast_map(x, a.shape, y, b.shape, o, so, |p: T, q: T| {
            bytemuck::cast::<u8, T>(table[usize::from(byte(p) << 8 | byte(q))])
        });
    }
    match op {
        Op::MaxMinRaw { max: true } => {
            broadcast_map(x, a.shape, y, b.shape, o, so, |p: T, q: T| {
                if q.to_i32() > p.to_i32() { q } else { p }
            })
        }
        Op::MaxMinRaw { max: false } => {
            broadcast_map(x, a.shape, y, b.shape, o, so, |p: T, q: T| {
                if q.to_i32() < p.to_i32() { q } else { p }
            })
        }
        _ => Err(RuntimeError::Internal(
            "a quantized binary operation without its table".into(),
        )),
    }
}

impl Kernel for Binary {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        match self.qt {
            QType::U8 => run_typed::<u8>(self.op, || self.pairs(), ctx),
            QType::I8 => run_typed::<i8>(self.op, || self.pairs(), ctx),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Comparisons

/// The quantized comparison an operation is, chosen where it is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// The left shift of TFLite's quantized comparisons.
const COMPARE_LEFT_SHIFT: i32 = 8;

struct Compare {
    cmp: Cmp,
    qt: QType,
    zp1: i32,
    zp2: i32,
    m1: Multiplier,
    m2: Multiplier,
    /// Scales of 1 or more: TFLite's arithmetic is undefined there (a right shift by a
    /// negative amount), so nnc compares the real values exactly instead.
    exact: Option<(f64, f64)>,
}

pub(crate) fn build_compare(info: &OpInfo, cmp: Cmp) -> Result<Box<dyn Kernel>> {
    let qt = activation_type(info, 0)?;
    if activation_type(info, 1)? != qt {
        return Err(info.unsupported("inputs of different 8-bit types"));
    }
    let (a, b): (Qp, Qp) = (qp(info.operand(0)?), qp(info.operand(1)?));
    check_scale(info, "input0", a.scale)?;
    check_scale(info, "input1", b.scale)?;
    // The scale itself is the multiplier (QuantizeMultiplierSmallerThanOneExp).
    let (m1, m2) = (
        multiplier(info, f64::from(a.scale))?,
        multiplier(info, f64::from(b.scale))?,
    );
    let exact = (m1.shift > 0 || m2.shift > 0).then(|| (f64::from(a.scale), f64::from(b.scale)));
    Ok(Box::new(Compare {
        cmp,
        qt,
        zp1: a.zp,
        zp2: b.zp,
        m1,
        m2,
        exact,
    }))
}

fn compare_typed<T: Q8>(c: &Compare, ctx: &mut KernelContext) -> Result<()> {
    let a = ctx.input(0)?;
    let b = ctx.input(1)?;
    let (x, y) = (
        typed::<T>(q8_bytes(&a, "input0")?),
        typed::<T>(q8_bytes(&b, "input1")?),
    );
    let out = ctx.output(0)?;
    let so = out.shape;
    let o = out.u8_mut()?;
    if o.len() != so.iter().product::<usize>() {
        return Err(RuntimeError::kernel("output does not match its shape"));
    }
    let (zp1, zp2, m1, m2, cmp) = (c.zp1, c.zp2, c.m1, c.m2, c.cmp);
    if let Some((s1, s2)) = c.exact {
        // (x - zp) * scale is exact in double (9-bit by 24-bit significands).
        return broadcast_map(x, a.shape, y, b.shape, o, so, move |p: T, q: T| {
            let p = f64::from(p.to_i32() - zp1) * s1;
            let q = f64::from(q.to_i32() - zp2) * s2;
            compare(cmp, p, q)
        });
    }
    broadcast_map(x, a.shape, y, b.shape, o, so, move |p: T, q: T| {
        let p = m1.apply((p.to_i32() - zp1) << COMPARE_LEFT_SHIFT);
        let q = m2.apply((q.to_i32() - zp2) << COMPARE_LEFT_SHIFT);
        compare(cmp, p, q)
    })
}

fn compare<V: PartialOrd>(cmp: Cmp, p: V, q: V) -> u8 {
    u8::from(match cmp {
        Cmp::Eq => p == q,
        Cmp::Ne => p != q,
        Cmp::Lt => p < q,
        Cmp::Le => p <= q,
        Cmp::Gt => p > q,
        Cmp::Ge => p >= q,
    })
}

impl Kernel for Compare {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        match self.qt {
            QType::U8 => compare_typed::<u8>(self, ctx),
            QType::I8 => compare_typed::<i8>(self, ctx),
        }
    }
}

/// ADD and SUB of same-shape tensors with AVX-512, 16 elements per step: the reference's
/// fixed-point arithmetic ([`Op::eval`]) computed lane by lane. The pair table gives the
/// same bytes, but its 64 KiB do not stay in L1 beside the tensors: its lookups were 6%
/// of int8 MobileNetV2 (ten residual ADDs).
#[cfg(target_arch = "x86_64")]
mod add_avx512 {
    use std::arch::x86_64::*;

    use super::super::arith::Multiplier;
    use super::{ADD_LEFT_SHIFT, Op};

    /// Whether [`run`] takes `op` here: AVX-512 with byte and 256-bit forms, and
    /// multipliers the lane arithmetic covers (positive Q31 values, as
    /// `quantize_multiplier` makes them, so that the saturating case of the doubling
    /// high multiply, `i32::MIN * i32::MIN`, cannot occur; shifts inside 0..=31).
    pub(super) fn available(op: Op) -> bool {
        let f = crate::kernels::isa::cpu_features();
        let fits = |m: Multiplier| m.multiplier > 0 && (-31..=31).contains(&m.shift);
        f.avx512f
            && f.avx512bw
            && f.avx512vl
            && matches!(op, Op::AddSub { m1, m2, out, .. } if fits(m1) && fits(m2) && fits(out))
    }

    /// `Multiplier::apply` on 16 lanes: the left shift (wrapping), the rounding doubling
    /// high multiply, the rounding right shift.
    #[derive(Clone, Copy)]
    struct Lanes {
        multiplier: __m512i,
        left: __m128i,
        right: __m128i,
        /// `2^right - 1` and its half, for the rounding of the right shift.
        mask: __m512i,
        half: __m512i,
    }

    impl Lanes {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
        fn new(m: Multiplier) -> Lanes {
            let right = (-m.shift).clamp(0, 31);
            let mask = ((1i64 << right) - 1) as i32;
            Lanes {
                multiplier: _mm512_set1_epi32(m.multiplier),
                left: _mm_cvtsi32_si128(m.shift.clamp(0, 31)),
                right: _mm_cvtsi32_si128(right),
                mask: _mm512_set1_epi32(mask),
                half: _mm512_set1_epi32(mask >> 1),
            }
        }

        #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
        #[inline]
        fn apply(&self, x: __m512i) -> __m512i {
            let x = _mm512_sll_epi32(x, self.left);
            // (x * m + 2^30) >> 31 with an arithmetic shift: the reference's nudged,
            // truncating division rounds to nearest with ties upward, which is this.
            // Even lanes from the products of the low halves of each 64-bit pair, odd
            // lanes from the high halves (their result shifted into the high half).
            let nudge = _mm512_set1_epi64(1 << 30);
            let even = _mm512_add_epi64(_mm512_mul_epi32(x, self.multiplier), nudge);
            let odd = _mm512_add_epi64(
                _mm512_mul_epi32(_mm512_srli_epi64::<32>(x), self.multiplier),
                nudge,
            );
            let high = _mm512_mask_blend_epi32(
                0xAAAA,
                _mm512_srai_epi64::<31>(even),
                _mm512_slli_epi64::<1>(odd),
            );
            // Rounding divide by 2^right: ties away from zero.
            let zero = _mm512_setzero_si512();
            let one = _mm512_set1_epi32(1);
            let remainder = _mm512_and_si512(high, self.mask);
            let negative = _mm512_cmplt_epi32_mask(high, zero);
            let threshold = _mm512_mask_add_epi32(self.half, negative, self.half, one);
            let q = _mm512_sra_epi32(high, self.right);
            _mm512_mask_add_epi32(q, _mm512_cmpgt_epi32_mask(remainder, threshold), q, one)
        }
    }

    /// `out[i] = op(x[i], y[i])` on stored bytes (two's complement when `signed`).
    ///
    /// # Safety
    /// AVX512F, AVX512BW and AVX512VL ([`available`]); `x`, `y` and `out` have one length.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn run(op: Op, signed: bool, x: &[u8], y: &[u8], out: &mut [u8]) {
        let Op::AddSub {
            sub,
            zp1,
            zp2,
            m1,
            m2,
            out: mo,
            out_zp,
            range,
        } = op
        else {
            return;
        };
        let n = out.len().min(x.len()).min(y.len());
        let (l1, l2, lo) = (Lanes::new(m1), Lanes::new(m2), Lanes::new(mo));
        let (zp1, zp2) = (_mm512_set1_epi32(zp1), _mm512_set1_epi32(zp2));
        let out_zp = _mm512_set1_epi32(out_zp);
        let (min, max) = (_mm512_set1_epi32(range.0), _mm512_set1_epi32(range.1));
        let widen = |v: __m128i| {
            if signed {
                _mm512_cvtepi8_epi32(v)
            } else {
                _mm512_cvtepu8_epi32(v)
            }
        };
        let mut i = 0;
        while i < n {
            let lanes = (n - i).min(16);
            let mask: __mmask16 = if lanes == 16 { !0 } else { (1u16 << lanes) - 1 };
            // SAFETY: the loads and stores touch bytes i..i + lanes <= n (under the mask
            // in a last, partial block).
            unsafe {
                let (xp, yp) = (x.as_ptr().add(i), y.as_ptr().add(i));
                let (a, b) = if lanes == 16 {
                    (
                        _mm_loadu_si128(xp as *const __m128i),
                        _mm_loadu_si128(yp as *const __m128i),
                    )
                } else {
                    (
                        _mm_maskz_loadu_epi8(mask, xp as *const i8),
                        _mm_maskz_loadu_epi8(mask, yp as *const i8),
                    )
                };
                let (a, b) = (widen(a), widen(b));
                let s1 = l1.apply(_mm512_slli_epi32::<ADD_LEFT_SHIFT_U>(_mm512_sub_epi32(
                    a, zp1,
                )));
                let s2 = l2.apply(_mm512_slli_epi32::<ADD_LEFT_SHIFT_U>(_mm512_sub_epi32(
                    b, zp2,
                )));
                let raw = if sub {
                    _mm512_sub_epi32(s1, s2)
                } else {
                    _mm512_add_epi32(s1, s2)
                };
                let v = _mm512_add_epi32(lo.apply(raw), out_zp);
                let v = _mm512_min_epi32(_mm512_max_epi32(v, min), max);
                // Inside the 8-bit range: the low byte of each lane is the stored byte.
                // Narrowed in a register, then stored: the masked narrowing store is
                // slow on AMD Zen 4.
                let bytes = _mm512_cvtepi32_epi8(v);
                let op = out.as_mut_ptr().add(i);
                if lanes == 16 {
                    _mm_storeu_si128(op as *mut __m128i, bytes);
                } else {
                    _mm_mask_storeu_epi8(op as *mut i8, mask, bytes);
                }
            }
            i += lanes;
        }
    }

    const ADD_LEFT_SHIFT_U: u32 = ADD_LEFT_SHIFT as u32;

    #[cfg(test)]
    mod tests {
        use super::super::super::arith::QType;
        use super::*;

        /// The lanes against [`Op::eval`] on every pair of bytes, for additions and
        /// subtractions with varied scales, zero points and activation ranges, both types,
        /// and lengths that end inside a block of 16.
        #[test]
        fn lanes_equal_the_reference() {
            let probe = Op::AddSub {
                sub: false,
                zp1: 0,
                zp2: 0,
                m1: Multiplier::new(0.25).unwrap(),
                m2: Multiplier::new(0.25).unwrap(),
                out: Multiplier::new(0.5).unwrap(),
                out_zp: 0,
                range: (0, 255),
            };
            if !available(probe) {
                return; // The path never runs on this processor.
            }
            let mut case = 0u32;
            for qt in [QType::U8, QType::I8] {
                let (tmin, tmax) = match qt {
                    QType::U8 => (0, 255),
                    QType::I8 => (-128, 127),
                };
                for (s1, s2, so) in [
                    (0.02f64, 0.03f64, 0.05f64),
                    (0.1, 0.001, 0.07),
                    (0.5, 0.5, 0.0039),
                    (1e-4, 3e-4, 2e-4),
                ] {
                    for sub in [false, true] {
                        case += 1;
                        let zp = |k: u32| tmin + ((case * 37 + k * 101) % 256) as i32;
                        let twice_max = 2.0 * s1.max(s2);
                        let range = if case.is_multiple_of(3) {
                            (tmin + 9, tmax - 20)
                        } else {
                            (tmin, tmax)
                        };
                        let op = Op::AddSub {
                            sub,
                            zp1: zp(1),
                            zp2: zp(2),
                            m1: Multiplier::new(s1 / twice_max).unwrap(),
                            m2: Multiplier::new(s2 / twice_max).unwrap(),
                            out: Multiplier::new(twice_max / ((1 << ADD_LEFT_SHIFT) as f64 * so))
                                .unwrap(),
                            out_zp: zp(3),
                            range,
                        };
                        assert!(available(op));
                        // Every pair of bytes, less a few so the last block is partial.
                        let n = (1 << 16) - (case as usize % 15) - 1;
                        let x: Vec<u8> = (0..n).map(|i| (i >> 8) as u8).collect();
                        let y: Vec<u8> = (0..n).map(|i| i as u8).collect();
                        let mut got = vec![0u8; n];
                        // SAFETY: available() checked the features; one length.
                        unsafe { run(op, qt == QType::I8, &x, &y, &mut got) };
                        for i in 0..n {
                            let want = op.eval(qt.load(x[i]), qt.load(y[i])) as u8;
                            assert_eq!(got[i], want, "case {case} x {} y {}", x[i], y[i]);
                        }
                    }
                }
            }
        }
    }
}
