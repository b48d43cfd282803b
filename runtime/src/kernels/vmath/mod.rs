//! Vectorized elementwise math on float32: exp, log, sigmoid, tanh, erf, the GELUs, ELU,
//! hard swish, and the cheap ones (square, reciprocal, square roots), over slices, on
//! the widest vectors the processor has (AVX-512, AVX2 and FMA, or one lane at a time),
//! split over threads when a slice is long enough to pay for it.
//!
//! Each function is written once, over [`lanes::Lanes`], in [`approx`], and compiled
//! for each instruction set by the `#[target_feature]` entry points below: one
//! definition, so every path computes the same approximation (the portable path rounds
//! twice where the others fuse a multiply and an add, a difference of an ulp).

mod approx;
mod lanes;

use lanes::{Lanes, MAX_WIDTH};

/// An elementwise float32 function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Func {
    Exp,
    Log,
    Sigmoid,
    /// x * sigmoid(x) (SiLU, swish).
    Silu,
    Tanh,
    Erf,
    /// x * Phi(x) with the error function.
    GeluErf,
    /// GELU's tanh approximation.
    GeluTanh,
    HardSwish,
    /// ELU with its alpha.
    Elu(f32),
    Sqrt,
    /// 1 / sqrt(x).
    Rsqrt,
    /// 1 / x.
    Reciprocal,
    /// x * x.
    Square,
    /// x * x * x.
    Cube,
    Abs,
    Neg,
    Floor,
}

impl Func {
    /// Elements below which a slice is not split over threads: the work of one task
    /// must outweigh waking another thread (a few microseconds).
    fn parallel_min(self) -> usize {
        match self {
            Func::Sqrt
            | Func::Rsqrt
            | Func::Reciprocal
            | Func::Square
            | Func::Cube
            | Func::Abs
            | Func::Neg
            | Func::Floor
            | Func::HardSwish => 64 * 1024,
            _ => 8 * 1024,
        }
    }
}

/// The value of `f` at `x` (one lane through the same approximation as the slices).
#[cfg(test)]
pub(crate) fn eval(f: Func, x: f32) -> f32 {
    let mut out = [0f32];
    apply(f, &[x], &mut out);
    out[0]
}

/// `dst[i] = f(src[i])` over the shorter of the two slices.
pub(crate) fn apply(f: Func, src: &[f32], dst: &mut [f32]) {
    match path() {
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => {
            // SAFETY: `path` chose this only where AVX-512F, AVX2 and FMA were detected.
            unsafe { apply_avx512(f, src, dst) }
        }
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => {
            // SAFETY: `path` chose this only where AVX2 and FMA were detected.
            unsafe { apply_avx2(f, src, dst) }
        }
        Path::Portable => apply_with::<f32>(f, src, dst),
    }
}

/// [`apply`], with long slices split over `threads` (from inside the runtime's pool).
pub(crate) fn apply_threaded(threads: usize, f: Func, src: &[f32], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    if threads <= 1 || n < 2 * f.parallel_min() {
        return apply(f, src, dst);
    }
    use rayon::prelude::*;
    // Whole vectors per task, about two tasks per thread for balance.
    let chunk = n.div_ceil(2 * threads).next_multiple_of(MAX_WIDTH);
    dst[..n]
        .par_chunks_mut(chunk)
        .zip(src[..n].par_chunks(chunk))
        .for_each(|(d, s)| apply(f, s, d));
}

/// The largest value of `x` (-inf for an empty slice; NaN values are ignored unless all
/// are NaN).
#[cfg(test)]
pub(crate) fn max(x: &[f32]) -> f32 {
    match path() {
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => {
            // SAFETY: `path` chose this only where AVX-512F, AVX2 and FMA were detected.
            unsafe { max_avx512(x) }
        }
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => {
            // SAFETY: `path` chose this only where AVX2 and FMA were detected.
            unsafe { max_avx2(x) }
        }
        Path::Portable => max_with::<f32>(x),
    }
}

/// `dst[i] = e^((src[i] - shift) * beta)`, returning the sum of `dst` (softmax's
/// numerators and denominator in one pass).
#[cfg(test)]
pub(crate) fn exp_shifted(src: &[f32], dst: &mut [f32], shift: f32, beta: f32) -> f64 {
    match path() {
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => {
            // SAFETY: `path` chose this only where AVX-512F, AVX2 and FMA were detected.
            unsafe { exp_shifted_avx512(src, dst, shift, beta) }
        }
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => {
            // SAFETY: `path` chose this only where AVX2 and FMA were detected.
            unsafe { exp_shifted_avx2(src, dst, shift, beta) }
        }
        Path::Portable => exp_shifted_with::<f32>(src, dst, shift, beta),
    }
}

/// `dst = softmax(beta * src)` over the whole lane: the largest value, the shifted
/// exponentials and their sum, then the scaling, all in one function compiled for the
/// processor's vectors (the scaling pass was the compiler's SSE loop before).
pub(crate) fn softmax(src: &[f32], dst: &mut [f32], beta: f32) {
    match path() {
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => {
            // SAFETY: `path` chose this only where AVX-512F, AVX2 and FMA were detected.
            unsafe { softmax_avx512(src, dst, beta) }
        }
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => {
            // SAFETY: `path` chose this only where AVX2 and FMA were detected.
            unsafe { softmax_avx2(src, dst, beta) }
        }
        Path::Portable => softmax_with::<f32>(src, dst, beta),
    }
}

/// The instruction set the functions run on here.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    Portable,
}

fn path() -> Path {
    #[cfg(target_arch = "x86_64")]
    {
        if super::isa::float_avx512() {
            return Path::Avx512;
        }
        if super::isa::float_avx2_fma() {
            return Path::Avx2;
        }
    }
    Path::Portable
}

// The entry points per instruction set: each compiles the generic drivers below (and
// the approximations they inline) with that set enabled.

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn apply_avx512(f: Func, src: &[f32], dst: &mut [f32]) {
    apply_with::<lanes::Avx512>(f, src, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn apply_avx2(f: Func, src: &[f32], dst: &mut [f32]) {
    apply_with::<lanes::Avx2>(f, src, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn softmax_avx512(src: &[f32], dst: &mut [f32], beta: f32) {
    softmax_with::<lanes::Avx512>(src, dst, beta)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_avx2(src: &[f32], dst: &mut [f32], beta: f32) {
    softmax_with::<lanes::Avx2>(src, dst, beta)
}

#[cfg(all(test, target_arch = "x86_64"))]
#[target_feature(enable = "avx512f,avx2,fma")]
fn max_avx512(x: &[f32]) -> f32 {
    max_with::<lanes::Avx512>(x)
}

#[cfg(all(test, target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma")]
fn max_avx2(x: &[f32]) -> f32 {
    max_with::<lanes::Avx2>(x)
}

#[cfg(all(test, target_arch = "x86_64"))]
#[target_feature(enable = "avx512f,avx2,fma")]
fn exp_shifted_avx512(src: &[f32], dst: &mut [f32], shift: f32, beta: f32) -> f64 {
    exp_shifted_with::<lanes::Avx512>(src, dst, shift, beta)
}

#[cfg(all(test, target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma")]
fn exp_shifted_avx2(src: &[f32], dst: &mut [f32], shift: f32, beta: f32) -> f64 {
    exp_shifted_with::<lanes::Avx2>(src, dst, shift, beta)
}

/// A function applied lane by lane, as a type whose method is `#[inline(always)]`.
///
/// Not a closure or a function item passed as `impl Fn`: a closure, and the `Fn::call`
/// shim of a function item, are functions of their own, compiled without the target
/// features of the function they are used in, so the intrinsics inlined into them become
/// calls (measured: the SIMD functions ran slower than scalar code).
trait Lanewise<V: Lanes>: Copy {
    fn at(self, x: V) -> V;
}

/// A [`Lanewise`] type per function of [`approx`].
macro_rules! lanewise {
    ($($name:ident => $function:path,)*) => {
        $(
            #[derive(Clone, Copy)]
            struct $name;

            impl<V: Lanes> Lanewise<V> for $name {
                #[inline(always)]
                fn at(self, x: V) -> V {
                    $function(x)
                }
            }
        )*
    };
}

lanewise! {
    ExpFn => approx::exp,
    LogFn => approx::ln,
    SigmoidFn => approx::sigmoid,
    SiluFn => approx::silu,
    TanhFn => approx::tanh,
    ErfFn => approx::erf,
    GeluErfFn => approx::gelu_erf,
    GeluTanhFn => approx::gelu_tanh,
    HardSwishFn => approx::hard_swish,
    SqrtFn => approx::sqrt,
    RsqrtFn => approx::rsqrt,
    ReciprocalFn => approx::reciprocal,
    SquareFn => approx::square,
    CubeFn => approx::cube,
    AbsFn => approx::abs,
    NegFn => approx::neg,
    FloorFn => approx::floor,
}

/// ELU's function with its alpha.
#[derive(Clone, Copy)]
struct EluFn(f32);

impl<V: Lanes> Lanewise<V> for EluFn {
    #[inline(always)]
    fn at(self, x: V) -> V {
        approx::elu(x, self.0)
    }
}

/// One loop per function, so that the function is chosen once per slice.
#[inline(always)]
fn apply_with<V: Lanes>(f: Func, src: &[f32], dst: &mut [f32]) {
    match f {
        Func::Exp => map::<V>(src, dst, ExpFn),
        Func::Log => map::<V>(src, dst, LogFn),
        Func::Sigmoid => map::<V>(src, dst, SigmoidFn),
        Func::Silu => map::<V>(src, dst, SiluFn),
        Func::Tanh => map::<V>(src, dst, TanhFn),
        Func::Erf => map::<V>(src, dst, ErfFn),
        Func::GeluErf => map::<V>(src, dst, GeluErfFn),
        Func::GeluTanh => map::<V>(src, dst, GeluTanhFn),
        Func::HardSwish => map::<V>(src, dst, HardSwishFn),
        Func::Elu(alpha) => map::<V>(src, dst, EluFn(alpha)),
        Func::Sqrt => map::<V>(src, dst, SqrtFn),
        Func::Rsqrt => map::<V>(src, dst, RsqrtFn),
        Func::Reciprocal => map::<V>(src, dst, ReciprocalFn),
        Func::Square => map::<V>(src, dst, SquareFn),
        Func::Cube => map::<V>(src, dst, CubeFn),
        Func::Abs => map::<V>(src, dst, AbsFn),
        Func::Neg => map::<V>(src, dst, NegFn),
        Func::Floor => map::<V>(src, dst, FloorFn),
    }
}

/// `dst[i] = g(src[i])`, whole vectors, then the tail through a padded copy.
#[inline(always)]
fn map<V: Lanes>(src: &[f32], dst: &mut [f32], g: impl Lanewise<V>) {
    let n = src.len().min(dst.len());
    let (src, dst) = (&src[..n], &mut dst[..n]);
    let whole = n / V::WIDTH * V::WIDTH;
    for (s, d) in src[..whole]
        .chunks_exact(V::WIDTH)
        .zip(dst[..whole].chunks_exact_mut(V::WIDTH))
    {
        g.at(V::load(s)).store(d);
    }
    if whole < n {
        let rest = n - whole;
        let mut buf = [0f32; MAX_WIDTH];
        buf[..rest].copy_from_slice(&src[whole..]);
        let mut out = [0f32; MAX_WIDTH];
        g.at(V::load(&buf)).store(&mut out);
        dst[whole..].copy_from_slice(&out[..rest]);
    }
}

#[inline(always)]
fn max_with<V: Lanes>(x: &[f32]) -> f32 {
    let whole = x.len() / V::WIDTH * V::WIDTH;
    let mut acc = V::splat(f32::NEG_INFINITY);
    for s in x[..whole].chunks_exact(V::WIDTH) {
        // The accumulator second: MAXPS returns it when the loaded value is NaN.
        acc = V::load(s).max(acc);
    }
    x[whole..].iter().fold(acc.max_lane(), |m, &v| m.max(v))
}

/// Values summed in f32 lanes before the partial sum is added in f64: bounds the
/// rounding error of long lanes (a 50,000-class softmax) to that of 1,024 values.
const SUM_BLOCK: usize = 1024;

#[inline(always)]
fn softmax_with<V: Lanes>(src: &[f32], dst: &mut [f32], beta: f32) {
    let n = src.len().min(dst.len());
    // The largest value is subtracted first, so no exponential overflows (beta > 0).
    let max = max_with::<V>(&src[..n]);
    let sum = exp_shifted_with::<V>(&src[..n], &mut dst[..n], max, beta);
    let inv = (1.0 / sum) as f32;
    let whole = n / V::WIDTH * V::WIDTH;
    let inv_v = V::splat(inv);
    for d in dst[..whole].chunks_exact_mut(V::WIDTH) {
        V::load(d).mul(inv_v).store(d);
    }
    for d in &mut dst[whole..n] {
        *d *= inv;
    }
}

#[inline(always)]
fn exp_shifted_with<V: Lanes>(src: &[f32], dst: &mut [f32], shift: f32, beta: f32) -> f64 {
    let n = src.len().min(dst.len());
    let (shift_v, beta_v) = (V::splat(shift), V::splat(beta));
    let mut total = 0f64;
    for (s, d) in src[..n]
        .chunks(SUM_BLOCK)
        .zip(dst[..n].chunks_mut(SUM_BLOCK))
    {
        let whole = s.len() / V::WIDTH * V::WIDTH;
        let mut acc = V::splat(0.0);
        for (sv, dv) in s[..whole]
            .chunks_exact(V::WIDTH)
            .zip(d[..whole].chunks_exact_mut(V::WIDTH))
        {
            let e = approx::exp(V::load(sv).sub(shift_v).mul(beta_v));
            e.store(dv);
            acc = acc.add(e);
        }
        let mut block = f64::from(acc.sum());
        let rest = s.len() - whole;
        if rest > 0 {
            // The tail on one vector through a padded copy (the scalar polynomial took
            // as long as the rest of a 197-value attention row).
            let mut tmp = [shift; MAX_WIDTH];
            tmp[..rest].copy_from_slice(&s[whole..]);
            let e = approx::exp(V::load(&tmp).sub(shift_v).mul(beta_v));
            e.store(&mut tmp);
            d[whole..].copy_from_slice(&tmp[..rest]);
            block += tmp[..rest].iter().map(|&v| f64::from(v)).sum::<f64>();
        }
        total += block;
    }
    total
}

#[cfg(test)]
mod tests;
