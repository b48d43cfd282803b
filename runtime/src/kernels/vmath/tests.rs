//! Accuracy of every function on every path this processor has, against float64
//! references over the whole float32 range.

use super::*;

/// One path's entry point.
type Run = fn(Func, &[f32], &mut [f32]);

/// The paths to test here: the portable one always, the SIMD ones where detected.
fn paths() -> Vec<(&'static str, Run)> {
    // Only x86-64 has SIMD paths to add.
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut p: Vec<(&'static str, Run)> = vec![("portable", apply_with::<f32>)];
    #[cfg(target_arch = "x86_64")]
    {
        if crate::kernels::isa::float_avx2_fma() {
            p.push(("avx2", |f, s, d| {
                // SAFETY: AVX2 and FMA were detected just above.
                unsafe { apply_avx2(f, s, d) }
            }));
        }
        if crate::kernels::isa::float_avx512() {
            p.push(("avx512", |f, s, d| {
                // SAFETY: AVX-512F, AVX2 and FMA were detected just above.
                unsafe { apply_avx512(f, s, d) }
            }));
        }
    }
    p
}

/// Inputs: a fine linear sweep of [lo, hi] and every 997th float32 bit pattern in it.
fn inputs(lo: f32, hi: f32) -> Vec<f32> {
    let steps = 200_000;
    let mut v: Vec<f32> = (0..=steps)
        .map(|i| lo + (hi - lo) * (i as f32 / steps as f32))
        .collect();
    v.extend(
        (0..u32::MAX / 997)
            .map(|i| f32::from_bits(i * 997))
            .filter(|x| x.is_finite() && *x >= lo && *x <= hi),
    );
    v.extend(
        (0..u32::MAX / 997)
            .map(|i| -f32::from_bits(i * 997))
            .filter(|x| x.is_finite() && *x >= lo && *x <= hi),
    );
    v
}

/// The distance in ulps of the float32 result `got` from the exact `want`.
fn ulps(got: f32, want: f64) -> f64 {
    let w = want as f32;
    let ulp = if w == 0.0 || !w.is_normal() {
        f64::from(f32::from_bits(1))
    } else {
        let bits = w.abs().to_bits();
        f64::from(f32::from_bits(bits + 1) - f32::from_bits(bits))
    };
    (f64::from(got) - want).abs() / ulp
}

/// The largest error of `f` against `reference` over `xs`, as (ulps, absolute), on
/// one path; an element counts in ulps only where the absolute error exceeds `atol`.
fn worst(
    run: Run,
    f: Func,
    xs: &[f32],
    reference: impl Fn(f64) -> f64,
    atol: f64,
) -> (f64, f64, f32) {
    let mut out = vec![0f32; xs.len()];
    run(f, xs, &mut out);
    let (mut worst_ulps, mut worst_abs, mut at) = (0f64, 0f64, 0f32);
    for (&x, &y) in xs.iter().zip(&out) {
        let want = reference(f64::from(x));
        let abs = (f64::from(y) - want).abs();
        assert!(!y.is_nan(), "{f:?}({x}) gave NaN, want {want}");
        worst_abs = worst_abs.max(abs);
        if abs > atol {
            let u = ulps(y, want);
            if u > worst_ulps {
                worst_ulps = u;
                at = x;
            }
        }
    }
    (worst_ulps, worst_abs, at)
}

/// Asserts the accuracy bound of `f` on every path.
fn check(f: Func, lo: f32, hi: f32, reference: impl Fn(f64) -> f64, atol: f64, max_ulps: f64) {
    let xs = inputs(lo, hi);
    for (name, run) in paths() {
        let (u, a, at) = worst(run, f, &xs, &reference, atol);
        assert!(
            u <= max_ulps,
            "{f:?} on {name}: {u:.2} ulp at {at} (bound {max_ulps}); largest absolute error {a:e}"
        );
    }
}

fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn exp_is_within_one_and_a_half_ulps() {
    // Results below the normal range are flushed or rounded: measured absolutely.
    check(Func::Exp, -104.0, 88.72, f64::exp, 1e-37, 1.5);
}

#[test]
fn log_is_within_three_ulps_over_all_positive_floats() {
    check(Func::Log, 0.0, f32::MAX, f64::ln, 0.0, 3.0);
}

#[test]
fn sigmoid_and_silu_are_within_three_ulps() {
    check(Func::Sigmoid, -104.0, 104.0, sigmoid64, 1e-37, 3.0);
    check(Func::Silu, -100.0, 1e30, |x| x * sigmoid64(x), 1e-30, 3.0);
}

#[test]
fn tanh_is_within_two_ulps() {
    check(Func::Tanh, -20.0, 20.0, f64::tanh, 0.0, 2.0);
}

#[test]
fn erf_and_gelu_are_within_the_tolerance() {
    check(Func::Erf, -6.0, 6.0, libm::erf, 0.0, 3.0);
    let gelu = |x: f64| 0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2));
    check(Func::GeluErf, -10.0, 1e30, gelu, 5e-7, 1.0);
    let gelu_tanh = |x: f64| {
        let c = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
    };
    check(Func::GeluTanh, -10.0, 1e12, gelu_tanh, 5e-7, 1.0);
}

#[test]
fn elu_is_accurate_near_zero() {
    let elu = |x: f64| if x < 0.0 { 0.7 * x.exp_m1() } else { x };
    check(Func::Elu(0.7), -100.0, 100.0, elu, 0.0, 3.0);
}

#[test]
fn the_cheap_functions_are_correctly_rounded() {
    check(Func::Sqrt, 0.0, f32::MAX, f64::sqrt, 0.0, 0.5);
    check(Func::Rsqrt, 1e-30, 1e30, |x| 1.0 / x.sqrt(), 0.0, 2.0);
    check(Func::Reciprocal, 1e-30, 1e30, |x| 1.0 / x, 0.0, 0.5);
    check(Func::Square, -1e15, 1e15, |x| x * x, 0.0, 0.5);
    check(Func::Cube, -1e10, 1e10, |x| x * x * x, 0.0, 1.5);
    check(
        Func::HardSwish,
        -10.0,
        10.0,
        |x| x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
        0.0,
        2.0,
    );
    check(Func::Floor, -1e9, 1e9, f64::floor, 0.0, 0.0);
}

#[test]
fn special_values_follow_ieee() {
    let cases: &[(Func, f32, f32)] = &[
        (Func::Exp, f32::NEG_INFINITY, 0.0),
        (Func::Exp, f32::INFINITY, f32::INFINITY),
        (Func::Exp, 0.0, 1.0),
        (Func::Exp, 89.0, f32::INFINITY),
        (Func::Log, 0.0, f32::NEG_INFINITY),
        (Func::Log, -0.0, f32::NEG_INFINITY),
        (Func::Log, 1.0, 0.0),
        (Func::Log, f32::INFINITY, f32::INFINITY),
        (Func::Sigmoid, f32::INFINITY, 1.0),
        (Func::Sigmoid, f32::NEG_INFINITY, 0.0),
        (Func::Tanh, f32::INFINITY, 1.0),
        (Func::Tanh, f32::NEG_INFINITY, -1.0),
        (Func::Erf, f32::INFINITY, 1.0),
        (Func::Erf, f32::NEG_INFINITY, -1.0),
        (Func::Elu(1.0), f32::NEG_INFINITY, -1.0),
        (Func::Neg, 0.0, -0.0),
    ];
    for (name, run) in paths() {
        for &(f, x, want) in cases {
            let mut out = [0f32; 3];
            run(f, &[x, x, x], &mut out);
            for y in out {
                assert!(
                    y == want && y.is_sign_negative() == want.is_sign_negative(),
                    "{f:?}({x}) on {name}: {y}, want {want}"
                );
            }
        }
        for f in [
            Func::Exp,
            Func::Log,
            Func::Sigmoid,
            Func::Tanh,
            Func::Erf,
            Func::GeluErf,
            Func::GeluTanh,
            Func::Elu(1.0),
        ] {
            let mut out = [0f32; 1];
            run(f, &[f32::NAN], &mut out);
            assert!(out[0].is_nan(), "{f:?}(NaN) on {name}: {}", out[0]);
        }
        let mut out = [0f32; 1];
        run(Func::Log, &[-1.0], &mut out);
        assert!(out[0].is_nan(), "log(-1) on {name}: {}", out[0]);
    }
}

#[test]
fn every_length_and_the_threaded_split_give_the_same_values() {
    let xs: Vec<f32> = (0..100_003)
        .map(|i| (i as f32 * 0.37).sin() * 12.0)
        .collect();
    let mut whole = vec![0f32; xs.len()];
    apply(Func::GeluErf, &xs, &mut whole);
    for len in [0, 1, 7, 8, 15, 16, 17, 33] {
        let mut part = vec![0f32; len];
        apply(Func::GeluErf, &xs[..len], &mut part);
        assert_eq!(part, whole[..len]);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("a pool");
    let mut threaded = vec![0f32; xs.len()];
    pool.install(|| apply_threaded(2, Func::GeluErf, &xs, &mut threaded));
    assert_eq!(threaded, whole);
    assert_eq!(eval(Func::GeluErf, xs[5]), whole[5]);
}

#[test]
fn max_and_the_softmax_exponentials_match_their_definitions() {
    let xs: Vec<f32> = (0..1037)
        .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 9.0)
        .collect();
    let want_max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    assert_eq!(max(&xs), want_max);
    assert_eq!(max(&[]), f32::NEG_INFINITY);
    assert_eq!(max(&[f32::NAN, 1.0, f32::NAN]), 1.0);
    let mut e = vec![0f32; xs.len()];
    let sum = exp_shifted(&xs, &mut e, want_max, 0.5);
    let mut want_sum = 0f64;
    for (&x, &y) in xs.iter().zip(&e) {
        let want = (f64::from(x - want_max) * 0.5).exp();
        want_sum += want;
        assert!(ulps(y, want) <= 2.0, "exp of {x}: {y}, want {want}");
    }
    assert!(
        (sum - want_sum).abs() <= 1e-6 * want_sum,
        "{sum} against {want_sum}"
    );
}

/// The softmax of lanes of every length around the vector widths (tails through the
/// padded copy), against its definition in f64.
#[test]
fn softmax_matches_its_definition() {
    for n in [1usize, 5, 8, 15, 16, 17, 197, 1037] {
        let xs: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 / 41.0 - 11.0)
            .collect();
        let mut got = vec![f32::NAN; n];
        softmax(&xs, &mut got, 0.5);
        let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f64> = xs
            .iter()
            .map(|&x| (f64::from(x - max) * 0.5).exp())
            .collect();
        let sum: f64 = e.iter().sum();
        for (i, (&y, &e)) in got.iter().zip(&e).enumerate() {
            let want = e / sum;
            assert!(
                (f64::from(y) - want).abs() <= 8.0 * f64::from(f32::EPSILON) * want,
                "length {n}, value {i}: {y} against {want}"
            );
        }
    }
}
