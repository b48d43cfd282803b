//! Elementwise operations: binary arithmetic with NumPy broadcasting (ADD, SUB, MUL, DIV,
//! MAXIMUM, MINIMUM, POW, PRELU) and unary functions.
//!
//! Broadcasting aligns shapes on the right; `broadcast_map` collapses dimensions that
//! are contiguous for every operand and walks the output row by row, with the innermost
//! row handled as a same-shape zip, a scalar-against-row map or a constant fill. The
//! common cases never reach the general walk: same shapes, a one-element operand, and
//! NHWC per-channel operands (which collapse to `[rows, C]` against `[C]`).
//!
//! TENSOR_INT32 arithmetic wraps on overflow (never panics). Integer DIV rounds toward
//! negative infinity (floor division, as AOSP's reference implementation does); division
//! by zero yields 0 by definition here.

use nnc_formats::nn::OperandType;

use super::{Clamp, Kernel, KernelContext, OpInfo, vmath};
use crate::error::{Result, RuntimeError};

// ---------------------------------------------------------------------------------------
// Broadcasting engine (shared with compare.rs)

/// Right-aligned broadcast strides of `shape` against `out` (0 where broadcast).
fn broadcast_strides(shape: &[usize], out: &[usize]) -> Result<Vec<usize>> {
    if shape.len() > out.len() {
        return Err(RuntimeError::kernel(format!(
            "shape {shape:?} does not broadcast to {out:?}"
        )));
    }
    let lead = out.len() - shape.len();
    let mut strides = vec![0; out.len()];
    let mut stride = 1;
    for d in (0..shape.len()).rev() {
        let (s, o) = (shape[d], out[lead + d]);
        if s == o {
            strides[lead + d] = if s == 1 { 0 } else { stride };
        } else if s != 1 {
            return Err(RuntimeError::kernel(format!(
                "shape {shape:?} does not broadcast to {out:?}"
            )));
        }
        stride *= s;
    }
    Ok(strides)
}

/// Output dims with per-operand strides, adjacent dims merged where every operand is
/// contiguous across them, unit dims dropped. Always at least one dim.
fn collapse<const N: usize>(
    out: &[usize],
    strides: [Vec<usize>; N],
) -> (Vec<usize>, Vec<[usize; N]>) {
    let mut dims: Vec<usize> = Vec::new();
    let mut st: Vec<[usize; N]> = Vec::new();
    for (d, &extent) in out.iter().enumerate() {
        if extent == 1 {
            continue;
        }
        let s: [usize; N] = std::array::from_fn(|k| strides[k][d]);
        if let (Some(last_dim), Some(last)) = (dims.last_mut(), st.last_mut())
            && (0..N).all(|k| last[k] == s[k] * extent)
        {
            *last_dim *= extent;
            *last = s;
            continue;
        }
        dims.push(extent);
        st.push(s);
    }
    if dims.is_empty() {
        dims.push(1);
        st.push([0; N]);
    }
    (dims, st)
}

/// Calls `row(offsets, out_offset, len, inner_strides)` for every innermost row of the
/// broadcast of `shapes` to `out`.
fn for_each_row<const N: usize>(
    out: &[usize],
    shapes: [&[usize]; N],
    mut row: impl FnMut([usize; N], usize, usize, [usize; N]),
) -> Result<()> {
    let mut strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::new());
    for k in 0..N {
        strides[k] = broadcast_strides(shapes[k], out)?;
    }
    let (dims, st) = collapse(out, strides);
    let r = dims.len();
    let inner = dims[r - 1];
    let inner_st = st[r - 1];
    let outer_dims = &dims[..r - 1];
    let outer: usize = outer_dims.iter().product();
    let mut idx = vec![0usize; outer_dims.len()];
    let mut offs = [0usize; N];
    for o in 0..outer {
        row(offs, o * inner, inner, inner_st);
        for d in (0..outer_dims.len()).rev() {
            idx[d] += 1;
            for k in 0..N {
                offs[k] += st[d][k];
            }
            if idx[d] < outer_dims[d] {
                break;
            }
            for k in 0..N {
                offs[k] -= st[d][k] * outer_dims[d];
            }
            idx[d] = 0;
        }
    }
    Ok(())
}

fn check_sizes(lens: &[(usize, &[usize])]) -> Result<()> {
    for &(len, shape) in lens {
        if len != shape.iter().product::<usize>() {
            return Err(RuntimeError::kernel(format!(
                "data of {len} values does not match shape {shape:?}"
            )));
        }
    }
    Ok(())
}

/// `out = f(a, b)` with NumPy broadcasting of `a` and `b` to `out`'s shape.
pub(crate) fn broadcast_map<A: Copy, B: Copy, O>(
    a: &[A],
    sa: &[usize],
    b: &[B],
    sb: &[usize],
    out: &mut [O],
    so: &[usize],
    f: impl Fn(A, B) -> O,
) -> Result<()> {
    check_sizes(&[(a.len(), sa), (b.len(), sb), (out.len(), so)])?;
    if a.len() == out.len() && b.len() == out.len() && sa == so && sb == so {
        out.iter_mut()
            .zip(a.iter().zip(b))
            .for_each(|(o, (&x, &y))| *o = f(x, y));
        return Ok(());
    }
    if b.len() == 1 && a.len() == out.len() && sa == so {
        let y = b[0];
        out.iter_mut().zip(a).for_each(|(o, &x)| *o = f(x, y));
        return Ok(());
    }
    if a.len() == 1 && b.len() == out.len() && sb == so {
        let x = a[0];
        out.iter_mut().zip(b).for_each(|(o, &y)| *o = f(x, y));
        return Ok(());
    }
    for_each_row(so, [sa, sb], |[oa, ob], oo, len, [ia, ib]| {
        let dst = &mut out[oo..oo + len];
        match (ia, ib) {
            (1, 1) => dst
                .iter_mut()
                .zip(a[oa..oa + len].iter().zip(&b[ob..ob + len]))
                .for_each(|(o, (&x, &y))| *o = f(x, y)),
            (1, _) => {
                let y = b[ob];
                dst.iter_mut()
                    .zip(&a[oa..oa + len])
                    .for_each(|(o, &x)| *o = f(x, y));
            }
            (_, 1) => {
                let x = a[oa];
                dst.iter_mut()
                    .zip(&b[ob..ob + len])
                    .for_each(|(o, &y)| *o = f(x, y));
            }
            _ => {
                let (x, y) = (a[oa], b[ob]);
                dst.iter_mut().for_each(|o| *o = f(x, y));
            }
        }
    })
}

/// Values per task below which a same-shape float operation runs on one thread.
const PARALLEL_MIN: usize = 16 * 1024;

/// [`broadcast_map`] for float32, with operands of the output's shape split over the
/// threads: a residual ADD after a convolution that ran on two cores otherwise reads
/// half its operands from the other core's cache on one (ResNet18's ADDs took 0.05 ms
/// on one thread and 0.085 after two-thread convolutions).
fn map_f32(
    threads: usize,
    (a, sa): (&[f32], &[usize]),
    (b, sb): (&[f32], &[usize]),
    (out, so): (&mut [f32], &[usize]),
    f: impl Fn(f32, f32) -> f32 + Sync + Send,
) -> Result<()> {
    let same = sa == so && sb == so && a.len() == out.len() && b.len() == out.len();
    if threads > 1 && same && out.len() >= 2 * PARALLEL_MIN {
        use rayon::prelude::*;
        let chunk = out.len().div_ceil(2 * threads).max(PARALLEL_MIN);
        out.par_chunks_mut(chunk)
            .zip(a.par_chunks(chunk).zip(b.par_chunks(chunk)))
            .for_each(|(o, (x, y))| {
                o.iter_mut()
                    .zip(x.iter().zip(y))
                    .for_each(|(o, (&x, &y))| *o = f(x, y))
            });
        return Ok(());
    }
    broadcast_map(a, sa, b, sb, out, so, f)
}

/// `out = f(c, a, b)` with three-way broadcasting (SELECT).
#[allow(clippy::too_many_arguments)]
pub(crate) fn broadcast_map3<C: Copy, A: Copy, O: Copy>(
    c: &[C],
    sc: &[usize],
    a: &[A],
    sa: &[usize],
    b: &[A],
    sb: &[usize],
    out: &mut [O],
    so: &[usize],
    f: impl Fn(C, A, A) -> O,
) -> Result<()> {
    check_sizes(&[(c.len(), sc), (a.len(), sa), (b.len(), sb), (out.len(), so)])?;
    for_each_row(so, [sc, sa, sb], |[oc, oa, ob], oo, len, [ic, ia, ib]| {
        for (i, o) in out[oo..oo + len].iter_mut().enumerate() {
            *o = f(c[oc + i * ic], a[oa + i * ia], b[ob + i * ib]);
        }
    })
}

// ---------------------------------------------------------------------------------------
// Binary arithmetic

/// The binary function an operation computes, chosen where the operation is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Pow,
    Prelu,
    /// nnc's MOD: the remainder with the sign of the dividend (`fmod`, C's `%`) or of the
    /// divisor (Python's `%`, integers only). Integer division by zero gives 0.
    Mod {
        fmod: bool,
    },
    /// nnc's BITWISE (int32 only).
    Bitwise(nnc_formats::nn::BitwiseFunction),
}

/// The integer remainder with the sign of the divisor (`fmod` false) or of the dividend.
pub(crate) fn mod_i32(a: i32, b: i32, fmod: bool) -> i32 {
    if b == 0 {
        return 0;
    }
    let r = a.wrapping_rem(b);
    if !fmod && r != 0 && ((r < 0) != (b < 0)) {
        r.wrapping_add(b)
    } else {
        r
    }
}

/// The float remainder with the sign of the divisor (NumPy's `mod`): a zero result takes
/// the divisor's sign, and a finite dividend of the other sign than an infinite divisor
/// gives that infinity.
pub(crate) fn python_mod_f32(a: f32, b: f32) -> f32 {
    let r = a % b;
    if r == 0.0 {
        0f32.copysign(b)
    } else if (r < 0.0) != (b < 0.0) {
        r + b
    } else {
        r
    }
}

struct Binary {
    op: BinaryOp,
    clamp: Clamp,
    operand_type: OperandType,
}

/// MOD, its `fmod` flag decoded.
pub(crate) fn build_mod(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let fmod = info.bool(2, "fmod")?;
    build_binary(info, BinaryOp::Mod { fmod })
}

/// BITWISE, its function decoded.
pub(crate) fn build_bitwise(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let code = info.i32(2, "function")?;
    let function = nnc_formats::nn::BitwiseFunction::from_code(code)
        .ok_or_else(|| info.invalid(format!("unknown BITWISE function {code}")))?;
    build_binary(info, BinaryOp::Bitwise(function))
}

pub(crate) fn build_binary(info: &OpInfo, op: BinaryOp) -> Result<Box<dyn Kernel>> {
    let clamp = if matches!(
        op,
        BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div
    ) {
        Clamp::new(info.activation(2)?)
    } else {
        Clamp::none()
    };
    let t = info.input_type(0)?;
    let supported = match t {
        OperandType::TensorFloat32 => true,
        OperandType::TensorInt32 => !matches!(op, BinaryOp::Pow | BinaryOp::Prelu),
        _ if matches!(op, BinaryOp::Mod { .. } | BinaryOp::Bitwise(_)) => false,
        _ => false,
    };
    if !supported {
        return Err(info.unsupported(format!("operand type {t}")));
    }
    Ok(Box::new(Binary {
        op,
        clamp,
        operand_type: t,
    }))
}

/// The function a POW computes when every element of its exponent is the same value,
/// one that multiplications give exactly as IEEE `pow` defines it: 1, 2, 3, -1 (`None`
/// is the identity). Models square with POW (transformers' variance, CAFormer's squared
/// ReLU) where a general `powf` per element costs 20 times a multiply. The exponent is
/// read when the operation runs: compiled models keep it with the encrypted weights.
/// Half powers stay general: `pow(-0, 0.5)` is +0 and `pow(-inf, 0.5)` +inf, not
/// sqrt's.
fn exact_power(exponent: &[f32]) -> Option<Option<vmath::Func>> {
    // Longer exponents are tensors of their own, not one value broadcast.
    const MAX_LEN: usize = 16;
    let (&first, rest) = exponent.split_first()?;
    if exponent.len() > MAX_LEN || rest.iter().any(|v| v.to_bits() != first.to_bits()) {
        return None;
    }
    match first {
        1.0 => Some(None),
        2.0 => Some(Some(vmath::Func::Square)),
        3.0 => Some(Some(vmath::Func::Cube)),
        -1.0 => Some(Some(vmath::Func::Reciprocal)),
        _ => None,
    }
}

/// Floor division of int32 values; division by zero is defined as 0, and
/// `i32::MIN / -1` wraps to `i32::MIN`.
pub(crate) fn floor_div_i32(a: i32, b: i32) -> i32 {
    if b == 0 {
        return 0;
    }
    let q = a.wrapping_div(b);
    if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) {
        q.wrapping_sub(1)
    } else {
        q
    }
}

impl Kernel for Binary {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let threads = ctx.threads;
        let a = ctx.input(0)?;
        let b = ctx.input(1)?;
        let out = ctx.output(0)?;
        let so = out.shape;
        let clamp = self.clamp;
        match self.operand_type {
            OperandType::TensorFloat32 => {
                let (x, y) = (a.f32()?, b.f32()?);
                let o = out.f32_mut()?;
                macro_rules! map {
                    ($f:expr) => {
                        map_f32(threads, (x, a.shape), (y, b.shape), (o, so), $f)
                    };
                }
                match self.op {
                    BinaryOp::Add => {
                        map!(|p, q| clamp.apply(p + q))
                    }
                    BinaryOp::Sub => {
                        map!(|p, q| clamp.apply(p - q))
                    }
                    BinaryOp::Mul => {
                        map!(|p, q| clamp.apply(p * q))
                    }
                    BinaryOp::Div => {
                        map!(|p, q| clamp.apply(p / q))
                    }
                    BinaryOp::Max => {
                        map!(|p: f32, q: f32| p.max(q))
                    }
                    BinaryOp::Min => {
                        map!(|p: f32, q: f32| p.min(q))
                    }
                    BinaryOp::Pow => match exact_power(y) {
                        Some(power) if a.shape == so && x.len() == o.len() => {
                            match power {
                                Some(f) => vmath::apply_threaded(threads, f, x, o),
                                None => o.copy_from_slice(x),
                            }
                            Ok(())
                        }
                        _ => map!(|p: f32, q: f32| p.powf(q)),
                    },
                    BinaryOp::Prelu => {
                        map!(|p: f32, q: f32| { if p >= 0.0 { p } else { p * q } })
                    }
                    // Rust's `%` on floats is C's fmod.
                    BinaryOp::Mod { fmod: true } => {
                        map!(|p: f32, q: f32| p % q)
                    }
                    BinaryOp::Mod { fmod: false } => {
                        map!(python_mod_f32)
                    }
                    BinaryOp::Bitwise(_) => Err(RuntimeError::kernel("float BITWISE")),
                }
            }
            OperandType::TensorInt32 => {
                let (x, y) = (a.i32()?, b.i32()?);
                let o = out.i32_mut()?;
                let c = |v: i32| clamp.apply_i32(v);
                match self.op {
                    BinaryOp::Add => broadcast_map(x, a.shape, y, b.shape, o, so, |p: i32, q| {
                        c(p.wrapping_add(q))
                    }),
                    BinaryOp::Sub => broadcast_map(x, a.shape, y, b.shape, o, so, |p: i32, q| {
                        c(p.wrapping_sub(q))
                    }),
                    BinaryOp::Mul => broadcast_map(x, a.shape, y, b.shape, o, so, |p: i32, q| {
                        c(p.wrapping_mul(q))
                    }),
                    BinaryOp::Div => {
                        broadcast_map(x, a.shape, y, b.shape, o, so, |p, q| c(floor_div_i32(p, q)))
                    }
                    BinaryOp::Max => {
                        broadcast_map(x, a.shape, y, b.shape, o, so, |p: i32, q| p.max(q))
                    }
                    BinaryOp::Min => {
                        broadcast_map(x, a.shape, y, b.shape, o, so, |p: i32, q| p.min(q))
                    }
                    BinaryOp::Mod { fmod } => {
                        broadcast_map(x, a.shape, y, b.shape, o, so, |p, q| mod_i32(p, q, fmod))
                    }
                    BinaryOp::Bitwise(f) => {
                        broadcast_map(x, a.shape, y, b.shape, o, so, |p, q| f.apply(p, q))
                    }
                    BinaryOp::Pow | BinaryOp::Prelu => {
                        Err(RuntimeError::kernel("int32 POW/PRELU are not implemented"))
                    }
                }
            }
            t => Err(RuntimeError::kernel(format!(
                "operand type {t} is not implemented"
            ))),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Unary functions

/// The unary function an operation computes, chosen where the operation is routed here.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum UnaryOp {
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Neg,
    Floor,
    Sin,
    Logistic,
    Tanh,
    Clamp(Clamp),
    HardSwish,
    Elu(f32),
    Not,
}

struct Unary {
    op: UnaryOp,
    operand_type: OperandType,
}

/// ELU, its `alpha` decoded.
pub(crate) fn build_elu(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let alpha = info.f32(1, "alpha")?;
    build_unary(info, UnaryOp::Elu(alpha))
}

pub(crate) fn build_unary(info: &OpInfo, op: UnaryOp) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(0)?;
    let supported = match t {
        OperandType::TensorFloat32 => op != UnaryOp::Not,
        OperandType::TensorInt32 => matches!(op, UnaryOp::Abs | UnaryOp::Neg),
        OperandType::TensorBool8 => op == UnaryOp::Not,
        _ => false,
    };
    if !supported {
        return Err(info.unsupported(format!("operand type {t}")));
    }
    Ok(Box::new(Unary {
        op,
        operand_type: t,
    }))
}

impl UnaryOp {
    /// The vectorized function of this operation on float32 (`None`: computed here, one
    /// value at a time, or a clamp).
    fn vector_func(self) -> Option<vmath::Func> {
        Some(match self {
            UnaryOp::Abs => vmath::Func::Abs,
            UnaryOp::Exp => vmath::Func::Exp,
            UnaryOp::Log => vmath::Func::Log,
            UnaryOp::Sqrt => vmath::Func::Sqrt,
            UnaryOp::Rsqrt => vmath::Func::Rsqrt,
            UnaryOp::Neg => vmath::Func::Neg,
            UnaryOp::Floor => vmath::Func::Floor,
            UnaryOp::Logistic => vmath::Func::Sigmoid,
            UnaryOp::Tanh => vmath::Func::Tanh,
            UnaryOp::HardSwish => vmath::Func::HardSwish,
            UnaryOp::Elu(alpha) => vmath::Func::Elu(alpha),
            UnaryOp::Sin | UnaryOp::Clamp(_) | UnaryOp::Not => return None,
        })
    }
}

impl Kernel for Unary {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let threads = ctx.threads;
        let a = ctx.input(0)?;
        let out = ctx.output(0)?;
        if a.element_count() != out.element_count() {
            return Err(RuntimeError::kernel("input and output sizes differ"));
        }
        let op = self.op;
        match self.operand_type {
            OperandType::TensorFloat32 => {
                let x = a.f32()?;
                let o = out.f32_mut()?;
                match (op, op.vector_func()) {
                    (_, Some(f)) => vmath::apply_threaded(threads, f, x, o),
                    // A tight loop the compiler vectorizes.
                    (UnaryOp::Clamp(c), None) => {
                        o.iter_mut().zip(x).for_each(|(o, &v)| *o = c.apply(v))
                    }
                    (UnaryOp::Sin, None) => o.iter_mut().zip(x).for_each(|(o, &v)| *o = v.sin()),
                    (_, None) => return Err(RuntimeError::kernel(format!("float {op:?}"))),
                }
            }
            OperandType::TensorInt32 => {
                let x = a.i32()?;
                let o = out.i32_mut()?;
                let f = |v: i32| {
                    if op == UnaryOp::Abs {
                        v.wrapping_abs()
                    } else {
                        v.wrapping_neg()
                    }
                };
                o.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v));
            }
            OperandType::TensorBool8 => {
                let x = a.u8()?;
                let o = out.u8_mut()?;
                o.iter_mut()
                    .zip(x)
                    .for_each(|(o, &v)| *o = u8::from(v == 0));
            }
            t => {
                return Err(RuntimeError::kernel(format!(
                    "operand type {t} is not implemented"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_division() {
        assert_eq!(floor_div_i32(7, 2), 3);
        assert_eq!(floor_div_i32(-7, 2), -4);
        assert_eq!(floor_div_i32(7, -2), -4);
        assert_eq!(floor_div_i32(-7, -2), 3);
        assert_eq!(floor_div_i32(-6, 2), -3);
        assert_eq!(floor_div_i32(5, 0), 0);
        assert_eq!(floor_div_i32(i32::MIN, -1), i32::MIN);
    }

    #[test]
    fn broadcast_general_and_fast_paths() {
        // [2,1,3] op [4,1] -> [2,4,3]
        let a: Vec<f32> = (0..6).map(|v| v as f32).collect();
        let b: Vec<f32> = (0..4).map(|v| 10.0 * v as f32).collect();
        let mut out = vec![0.0f32; 24];
        broadcast_map(&a, &[2, 1, 3], &b, &[4, 1], &mut out, &[2, 4, 3], |x, y| {
            x + y
        })
        .unwrap();
        for i in 0..2 {
            for j in 0..4 {
                for k in 0..3 {
                    assert_eq!(out[(i * 4 + j) * 3 + k], a[i * 3 + k] + b[j]);
                }
            }
        }
        // Per-channel.
        let mut out = vec![0.0f32; 6];
        broadcast_map(
            &a,
            &[2, 3],
            &[1.0f32, 2.0, 3.0],
            &[3],
            &mut out,
            &[2, 3],
            |x, y| x * y,
        )
        .unwrap();
        assert_eq!(out, vec![0.0, 2.0, 6.0, 3.0, 8.0, 15.0]);
        // Mismatch is an error, not a panic.
        assert!(broadcast_map(&a, &[2, 3], &b, &[4], &mut out, &[2, 3], |x, y| x + y).is_err());
    }

    /// Same-shape operands split over threads give every value one thread gives, and a
    /// broadcast operand still broadcasts.
    #[test]
    fn same_shape_float_maps_split_over_threads() {
        let n = 5 * PARALLEL_MIN + 7;
        let a: Vec<f32> = (0..n).map(|i| (i % 97) as f32 - 40.0).collect();
        let b: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.5).collect();
        let f = |p: f32, q: f32| (p + q).clamp(-10.0, 30.0);
        let mut one = vec![f32::NAN; n];
        map_f32(1, (&a, &[n]), (&b, &[n]), (&mut one, &[n]), f).unwrap();
        for threads in [2, 3] {
            let mut split = vec![f32::NAN; n];
            map_f32(threads, (&a, &[n]), (&b, &[n]), (&mut split, &[n]), f).unwrap();
            assert_eq!(one, split, "{threads} threads");
        }
        assert!(one.iter().enumerate().all(|(i, &v)| v == f(a[i], b[i])));
        let mut broadcast = vec![f32::NAN; n];
        map_f32(2, (&a, &[n]), (&[1.0], &[1]), (&mut broadcast, &[n]), f).unwrap();
        assert!(
            broadcast
                .iter()
                .enumerate()
                .all(|(i, &v)| v == f(a[i], 1.0))
        );
    }
}
