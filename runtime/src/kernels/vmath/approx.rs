//! The approximations, each written once over [`Lanes`] and compiled for every
//! instruction set. Accuracy (float64 references over the whole float32 range, in the
//! tests of [`super`]): exp within 1.5 ulp, tanh 2, sigmoid, SiLU, erf, ELU and log 3, the
//! GELUs 1 ulp or 5e-7 absolute near their zero; well inside the NN set's float32
//! tolerance (atol 1e-5, rtol 5 ulp). Special values follow IEEE: NaN in, NaN out; exp(-inf) = 0, exp(inf) =
//! inf, log(0) = -inf, log of a negative number NaN.
//!
//! Method: the standard reductions, coefficients from the Taylor series (the reduced
//! arguments are small enough that the truncation error is below half an ulp):
//! - exp: `x = n ln2 + r`, |r| <= ln2 / 2, ln2 in two parts (Cody and Waite) so `n ln2`
//!   is exact; `e^r` to degree 7; scaled by `2^n` exactly.
//! - log: `x = m 2^e`, m in [sqrt(1/2), sqrt(2)); `ln m = 2 atanh(s)`, `s = (m-1)/(m+1)`,
//!   |s| <= 0.172, the odd series to s^9.
//! - tanh: `1 - 2 / (e^{2|x|} + 1)`, and below |x| = 0.4 its odd series to x^13 (the
//!   first form cancels there).
//! - erf: below |x| = 0.9 its odd series to x^19; above, `1 - e^{-x^2} P(t)` with
//!   `t = 1 / (1 + 0.47 |x|)` and P of degree 7 fitted to erfc(x) e^{x^2} (the form of
//!   Abramowitz and Stegun's 7.1.26, refitted for a smaller error); 1 beyond 3.92.

use super::lanes::Lanes;

/// ln 2 split so that `n * LN2_HI` is exact for |n| < 2^15: 355 / 512, and the rest.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// Horner's rule: `c[0] + x (c[1] + x (c[2] + ...))`.
#[inline(always)]
fn poly<V: Lanes>(x: V, c: &[f32]) -> V {
    let Some((last, rest)) = c.split_last() else {
        return V::splat(0.0);
    };
    rest.iter()
        .rev()
        .fold(V::splat(*last), |acc, &k| acc.mul_add(x, V::splat(k)))
}

/// 1/k! for k = 0..=7: e^r to degree 7.
const EXP_TAYLOR: [f32; 8] = [
    1.0,
    1.0,
    0.5,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5040.0,
];

/// The reduced argument of exp: `x = n ln2 + r`.
#[inline(always)]
fn exp_reduce<V: Lanes>(x: V) -> (V, V) {
    // Beyond these every result is 0 or infinity; clamping keeps `n` small (NaN stays).
    let x = x.clamp(V::splat(-104.0), V::splat(89.0));
    let n = x.mul(V::splat(std::f32::consts::LOG2_E)).round();
    let r = n.mul_add(V::splat(-LN2_HI), x);
    let r = n.mul_add(V::splat(-LN2_LO), r);
    (n, r)
}

/// e^x.
#[inline(always)]
pub(super) fn exp<V: Lanes>(x: V) -> V {
    let (n, r) = exp_reduce(x);
    poly(r, &EXP_TAYLOR).scale_pow2(n)
}

/// e^x - 1, accurate near 0 (where `exp(x) - 1` cancels).
#[inline(always)]
fn expm1<V: Lanes>(x: V) -> V {
    let (n, r) = exp_reduce(x);
    let one = V::splat(1.0);
    // r (1 + r/2 + r^2/6 + ...): e^r - 1 without cancellation.
    let small = r.mul(poly(r, &EXP_TAYLOR[1..]));
    let large = poly(r, &EXP_TAYLOR).scale_pow2(n).sub(one);
    // n == 0 means |x| <= ln2 / 2, where r is x itself.
    V::select(n.eq(V::splat(0.0)), small, large)
}

/// ln x.
#[inline(always)]
pub(super) fn ln<V: Lanes>(x: V) -> V {
    // Subnormals: scale into the normal range first.
    let tiny = x.lt(V::splat(f32::MIN_POSITIVE));
    let scaled = V::select(tiny, x.mul(V::splat(8_388_608.0)), x);
    let (m, e) = scaled.frexp();
    let e = V::select(tiny, e.sub(V::splat(23.0)), e);
    let above = V::splat(std::f32::consts::SQRT_2).lt(m);
    let m = V::select(above, m.mul(V::splat(0.5)), m);
    let e = V::select(above, e.add(V::splat(1.0)), e);
    let one = V::splat(1.0);
    let s = m.sub(one).div(m.add(one));
    let z = s.mul(s);
    // 2 atanh(s) = 2 s (1 + z/3 + z^2/5 + z^3/7 + z^4/9).
    let series = s.mul(poly(z, &[2.0, 2.0 / 3.0, 2.0 / 5.0, 2.0 / 7.0, 2.0 / 9.0]));
    let result = e.mul_add(V::splat(LN2_HI), e.mul_add(V::splat(LN2_LO), series));
    // Special values, innermost last: NaN, negative, zero, infinity.
    let result = V::select(x.eq(V::splat(f32::INFINITY)), x, result);
    let result = V::select(x.eq(V::splat(0.0)), V::splat(f32::NEG_INFINITY), result);
    let result = V::select(x.lt(V::splat(0.0)), V::splat(f32::NAN), result);
    V::select(x.is_nan(), x, result)
}

/// The logistic function 1 / (1 + e^-x).
#[inline(always)]
pub(super) fn sigmoid<V: Lanes>(x: V) -> V {
    let one = V::splat(1.0);
    one.div(one.add(exp(V::splat(0.0).sub(x))))
}

/// The odd Taylor series of tanh after x: -1/3, 2/15, -17/315, ... (to x^13).
const TANH_SERIES: [f32; 6] = [
    -1.0 / 3.0,
    2.0 / 15.0,
    -17.0 / 315.0,
    62.0 / 2835.0,
    -1382.0 / 155_925.0,
    21844.0 / 6_081_075.0,
];

/// tanh x.
#[inline(always)]
pub(super) fn tanh<V: Lanes>(x: V) -> V {
    let a = x.abs();
    let one = V::splat(1.0);
    let large = one.sub(V::splat(2.0).div(exp(a.add(a)).add(one)));
    let z = a.mul(a);
    let small = a.mul(z).mul_add(poly(z, &TANH_SERIES), a);
    V::select(a.lt(V::splat(0.4)), small, large).copysign(x)
}

/// The odd Taylor series of erf after x: 2/sqrt(pi) (-1)^k / (k! (2k + 1)), k = 0..=9.
const ERF_SERIES: [f32; 10] = {
    const C: f32 = std::f32::consts::FRAC_2_SQRT_PI;
    [
        C,
        -C / 3.0,
        C / 10.0,
        -C / 42.0,
        C / 216.0,
        -C / 1320.0,
        C / 9360.0,
        -C / 75_600.0,
        C / 685_440.0,
        -C / 6_894_720.0,
    ]
};

/// Below this |x| erf is its series; above, `1 - e^{-x^2} P(t)`.
const ERF_SERIES_MAX: f32 = 0.9;

/// Beyond this |x| erf rounds to 1 (erfc is below half an ulp of 1).
const ERF_ONE: f32 = 3.92;

/// `t = 1 / (1 + ERF_T x)` is the variable of the tail polynomial.
const ERF_T: f32 = 0.47;

/// The tail: `erfc(x) e^{x^2}` on [0.9, 3.92] as a polynomial in t, degree 7 (a
/// least-squares fit weighted by e^{-x^2}, made for nnc by `scripts/fit_erf.py`; fit error
/// 1e-10, the rest is rounding).
const ERF_TAIL: [f32; 8] = [
    -0.000_652_408_6,
    0.274_823_2,
    0.202_819_02,
    0.464_476_14,
    -0.337_985_28,
    0.812_507_6,
    -0.528_362,
    0.112_380_71,
];

/// erf x.
#[inline(always)]
pub(super) fn erf<V: Lanes>(x: V) -> V {
    let a = x.abs();
    let one = V::splat(1.0);
    let small = a.mul(poly(a.mul(a), &ERF_SERIES));
    let clamped = a.clamp(V::splat(ERF_SERIES_MAX), V::splat(ERF_ONE));
    let t = one.div(clamped.mul_add(V::splat(ERF_T), one));
    let tail = poly(t, &ERF_TAIL).mul(exp(V::splat(0.0).sub(clamped.mul(clamped))));
    let large = V::select(a.lt(V::splat(ERF_ONE)), one.sub(tail), one);
    let r = V::select(a.lt(V::splat(ERF_SERIES_MAX)), small, large).copysign(x);
    V::select(x.is_nan(), x, r)
}

/// GELU, exact: x Phi(x) = x (1 + erf(x / sqrt 2)) / 2.
#[inline(always)]
pub(super) fn gelu_erf<V: Lanes>(x: V) -> V {
    let e = erf(x.mul(V::splat(std::f32::consts::FRAC_1_SQRT_2)));
    V::splat(0.5).mul(x).mul(V::splat(1.0).add(e))
}

/// sqrt(2 / pi).
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// GELU, tanh form: x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2.
#[inline(always)]
pub(super) fn gelu_tanh<V: Lanes>(x: V) -> V {
    let inner = x
        .mul(x)
        .mul(V::splat(0.044_715))
        .mul_add(x, x)
        .mul(V::splat(SQRT_2_OVER_PI));
    V::splat(0.5).mul(x).mul(V::splat(1.0).add(tanh(inner)))
}

/// Hard swish: x min(max(x + 3, 0), 6) / 6.
#[inline(always)]
pub(super) fn hard_swish<V: Lanes>(x: V) -> V {
    let gate = x.add(V::splat(3.0)).clamp(V::splat(0.0), V::splat(6.0));
    x.mul(gate).div(V::splat(6.0))
}

/// ELU: x where x >= 0, alpha (e^x - 1) elsewhere.
#[inline(always)]
pub(super) fn elu<V: Lanes>(x: V, alpha: f32) -> V {
    let neg = V::splat(alpha).mul(expm1(x));
    V::select(x.lt(V::splat(0.0)), neg, x)
}

/// x sigmoid(x) (SiLU, swish).
#[inline(always)]
pub(super) fn silu<V: Lanes>(x: V) -> V {
    x.mul(sigmoid(x))
}

// The cheap functions, as function items for the drivers of [`super`].

#[inline(always)]
pub(super) fn sqrt<V: Lanes>(x: V) -> V {
    x.sqrt()
}

#[inline(always)]
pub(super) fn rsqrt<V: Lanes>(x: V) -> V {
    V::splat(1.0).div(x.sqrt())
}

#[inline(always)]
pub(super) fn reciprocal<V: Lanes>(x: V) -> V {
    V::splat(1.0).div(x)
}

#[inline(always)]
pub(super) fn square<V: Lanes>(x: V) -> V {
    x.mul(x)
}

#[inline(always)]
pub(super) fn cube<V: Lanes>(x: V) -> V {
    x.mul(x).mul(x)
}

#[inline(always)]
pub(super) fn abs<V: Lanes>(x: V) -> V {
    x.abs()
}

#[inline(always)]
pub(super) fn neg<V: Lanes>(x: V) -> V {
    V::splat(-1.0).mul(x)
}

#[inline(always)]
pub(super) fn floor<V: Lanes>(x: V) -> V {
    x.floor()
}
