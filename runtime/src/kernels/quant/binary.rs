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

use nnc_formats::nn::{FusedActivation, OperationType};

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
    /// MAXIMUM / MINIMUM).
    pairs: Option<Box<PairTable>>,
}

fn multiplier(info: &OpInfo, real: f64) -> Result<Multiplier> {
    Multiplier::new(real).map_err(|e| info.invalid(e.to_string()))
}

pub(super) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    use OperationType as O;
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
    let op_type = info.op_type();
    let act = if matches!(op_type, O::Add | O::Sub | O::Mul) {
        info.activation(2)?
    } else {
        FusedActivation::None
    };
    let range = activation_range(act, o, qt);
    let op = match op_type {
        O::Add | O::Sub => {
            // TFLite: twice_max_input_scale = 2 * max(s1, s2) (in float, exact), the
            // ratios in double.
            let twice_max = f64::from(2.0 * a.scale.max(b.scale));
            let out_den = f64::from((1 << ADD_LEFT_SHIFT) as f32 * o.scale);
            Op::AddSub {
                sub: op_type == O::Sub,
                zp1: a.zp,
                zp2: b.zp,
                m1: multiplier(info, f64::from(a.scale) / twice_max)?,
                m2: multiplier(info, f64::from(b.scale) / twice_max)?,
                out: multiplier(info, twice_max / out_den)?,
                out_zp: o.zp,
                range,
            }
        }
        O::Mul => Op::Mul {
            zp1: a.zp,
            zp2: b.zp,
            m: multiplier(info, f64::from(a.scale * b.scale / o.scale))?,
            out_zp: o.zp,
            range,
        },
        O::Maximum | O::Minimum => {
            let max = op_type == O::Maximum;
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
        _ => Op::Prelu {
            zp: a.zp,
            alpha_zp: b.zp,
            identity: multiplier(info, f64::from(a.scale / o.scale))?,
            alpha: multiplier(info, f64::from(a.scale * b.scale / o.scale))?,
            out_zp: o.zp,
            range,
        },
    };
    let pairs = match op {
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
    };
    Ok(Box::new(Binary { op, qt, pairs }))
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

fn run_typed<T: Q8>(op: Op, pairs: Option<&PairTable>, ctx: &mut KernelContext) -> Result<()> {
    let a = ctx.input(0)?;
    let b = ctx.input(1)?;
    let (x, y) = (
        typed::<T>(q8_bytes(&a, "input0")?),
        typed::<T>(q8_bytes(&b, "input1")?),
    );
    let out = ctx.output(0)?;
    let so = out.shape;
    let o = typed_mut::<T>(super::q8_bytes_mut(out, "output")?);
    if let Some(table) = pairs {
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
            QType::U8 => run_typed::<u8>(self.op, self.pairs.as_deref(), ctx),
            QType::I8 => run_typed::<i8>(self.op, self.pairs.as_deref(), ctx),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Comparisons

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmp {
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

pub(super) fn build_compare(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    use OperationType as O;
    let qt = activation_type(info, 0)?;
    if activation_type(info, 1)? != qt {
        return Err(info.unsupported("inputs of different 8-bit types"));
    }
    let cmp = match info.op_type() {
        O::Equal => Cmp::Eq,
        O::NotEqual => Cmp::Ne,
        O::Less => Cmp::Lt,
        O::LessEqual => Cmp::Le,
        O::Greater => Cmp::Gt,
        _ => Cmp::Ge,
    };
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
