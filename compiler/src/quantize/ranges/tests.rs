use super::*;
use std::time::Instant;

/// SplitMix64: deterministic test data without a dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1).
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn gaussian(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
    fn laplace(&mut self, b: f64) -> f64 {
        let u = self.uniform() - 0.5;
        -b * u.signum() * (1.0 - 2.0 * u.abs()).ln()
    }
}

fn histogram_of(values: &[f32], bins: usize) -> Histogram {
    let mut mm = MinMax::new();
    mm.add(values);
    let mut h = Histogram::from_min_max(&mm, bins);
    h.add(values);
    h
}

/// Laplace(0, 1) plus 0.2% outliers of magnitude 40..80, shifted to be asymmetric.
fn heavy_tailed(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|_| {
            if rng.uniform() < 0.002 {
                let m = 40.0 + 40.0 * rng.uniform();
                if rng.uniform() < 0.3 { -m } else { m }
            } else {
                0.5 + rng.laplace(1.0)
            }
        })
        .map(|x| x as f32)
        .collect()
}

fn distributions() -> Vec<(&'static str, Vec<f32>)> {
    let mut rng = Rng(7);
    let n = 50_000;
    let gaussian: Vec<f32> = (0..n).map(|_| (0.2 + rng.gaussian()) as f32).collect();
    let relu: Vec<f32> = gaussian.iter().map(|&x| x.max(0.0)).collect();
    let negative: Vec<f32> = (0..n)
        .map(|_| (-1.0 - rng.uniform() * 3.0) as f32)
        .collect();
    let uniform: Vec<f32> = (0..n)
        .map(|_| (-1.0 + 6.0 * rng.uniform()) as f32)
        .collect();
    vec![
        ("gaussian", gaussian),
        ("relu", relu),
        ("negative", negative),
        ("uniform", uniform),
        ("heavy", heavy_tailed(n, 11)),
        ("constant", vec![0.75; 100]),
    ]
}

// ---- The NumPy reference ----

fn reference() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/quantize/ranges.json"
    );
    let text = std::fs::read_to_string(path).expect("testdata/quantize/ranges.json");
    serde_json::from_str(&text).expect("ranges.json parses")
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().expect("a number")
}

fn pair(v: &serde_json::Value) -> (f32, f32) {
    (f(&v[0]) as f32, f(&v[1]) as f32)
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()) + 1e-300
}

#[test]
fn matches_numpy_reference() {
    let data = reference();
    assert_eq!(f(&data["min_scale"]) as f32, MIN_SCALE);
    let cases = data["cases"].as_array().expect("cases");
    assert!(cases.len() >= 6);
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let bins = case["bins"].as_u64().expect("bins") as usize;
        let hist = if let Some(samples) = case["samples"].as_array() {
            let values: Vec<f32> = samples.iter().map(|v| f(v) as f32).collect();
            let h = histogram_of(&values, bins);
            assert_eq!((h.lo, h.hi), pair(&case["hist_range"]), "{name}: range");
            let digest = case["digest"].as_array().expect("digest");
            let mine: [u64; 3] = h.counts.iter().enumerate().fold([0; 3], |d, (i, &c)| {
                let i = i as u64;
                [d[0] + c, d[1] + i * c, d[2] + i * i * c]
            });
            for (k, d) in digest.iter().enumerate() {
                assert_eq!(mine[k], d.as_u64().expect("u64"), "{name}: digest {k}");
            }
            h
        } else {
            let (lo, hi) = pair(&case["hist_range"]);
            let mut h = Histogram::new(lo, hi, bins);
            let counts = case["counts"].as_array().expect("counts");
            assert_eq!(counts.len(), bins);
            for (c, v) in h.counts.iter_mut().zip(counts) {
                *c = v.as_u64().expect("count");
            }
            h
        };
        let bin = ((hist.hi as f64 - hist.lo as f64) / bins as f64).max(1e-7);
        for (key, want) in case["ranges"].as_object().expect("ranges") {
            let (method, options) = match key.as_str() {
                "percentile_99" => (
                    CalibrationMethod::Percentile,
                    RangeOptions { percentile: 99.0 },
                ),
                other => (
                    CalibrationMethod::from_name(other).expect("method name"),
                    RangeOptions::default(),
                ),
            };
            let (want_lo, want_hi) = pair(want);
            let (lo, hi) = choose_range(method, &hist, &options);
            // The searches agree within a bin (sums in another order may break a
            // near-tie differently); the closed forms agree to rounding.
            let tol = match method {
                CalibrationMethod::Entropy | CalibrationMethod::Mse => bin,
                _ => 1e-6 * bin,
            };
            assert!(
                (lo as f64 - want_lo as f64).abs() <= tol
                    && (hi as f64 - want_hi as f64).abs() <= tol,
                "{name} {key}: [{lo}, {hi}], NumPy [{want_lo}, {want_hi}], tolerance {tol}"
            );
            // Parameters exactly, from the reference's range.
            let p = asymmetric_int8(want_lo, want_hi);
            let want_p = &case["params"][key];
            assert_eq!(p.scale, f(&want_p[0]) as f32, "{name} {key}: scale");
            assert_eq!(
                p.zero_point as i64,
                want_p[1].as_i64().expect("zp"),
                "{name} {key}"
            );
            let e = expected_error(&hist, want_lo, want_hi);
            let want_e = f(&case["expected_error"][key]);
            assert!(
                close(e, want_e, 1e-9),
                "{name} {key}: error {e} vs {want_e}"
            );
        }
        if let Some(w) = case["entropy_window"].as_array() {
            let b = Bins::of(&hist);
            let (j, k) = (
                w[0].as_u64().expect("j") as usize,
                w[1].as_u64().expect("k") as usize,
            );
            let kl = KlTable::new(&b)
                .kl(j, k, window_levels(&b, j, k))
                .expect("finite");
            let want = f(&case["entropy_kl"]);
            assert!(
                close(kl, want, 1e-9) || (kl - want).abs() < 1e-12,
                "{name}: KL {kl} vs {want}"
            );
        }
    }
    for c in data["param_cases"].as_array().expect("param_cases") {
        let p = asymmetric_int8(f(&c[0]) as f32, f(&c[1]) as f32);
        assert_eq!(p.scale, f(&c[2]) as f32, "{c}");
        assert_eq!(p.zero_point as i64, c[3].as_i64().expect("zp"), "{c}");
    }
}

// ---- Properties ----

#[test]
fn mse_beats_minmax_and_percentile_on_heavy_tails() {
    let check = |name: &str, h: &Histogram| {
        let err = |m, pct| {
            let (lo, hi) = choose_range(m, h, &RangeOptions { percentile: pct });
            expected_error(h, lo, hi)
        };
        let mse = err(CalibrationMethod::Mse, 99.999);
        let minmax = err(CalibrationMethod::MinMax, 99.999);
        assert!(mse <= minmax, "{name}: {mse} vs {minmax}");
        for pct in [99.0, 99.9, 99.99, 99.999] {
            let p = err(CalibrationMethod::Percentile, pct);
            assert!(mse <= p, "{name}: mse {mse} > percentile {pct} {p}");
        }
        (mse, minmax)
    };
    for seed in [1, 2, 3] {
        // Laplace with 0.2% far outliers, and Cauchy (0.5 + 0.3 * t with 1 dof).
        check(
            "outliers",
            &histogram_of(&heavy_tailed(100_000, seed), DEFAULT_BINS),
        );
        let mut rng = Rng(100 + seed);
        let cauchy: Vec<f32> = (0..100_000)
            .map(|_| (0.5 + 0.3 * (std::f64::consts::PI * (rng.uniform() - 0.5)).tan()) as f32)
            .collect();
        check("cauchy", &histogram_of(&cauchy, DEFAULT_BINS));
        // Clipping an outlier at distance d costs p * d^2 for its share p and saves
        // about (d / 255)^2 / 12: it pays below p ~ 1e-6. 1e7 Laplace values (100k
        // drawn, each counted 100 times) with 5 outliers at 40..80.
        let mut bulk = heavy_tailed(100_000, 30 + seed);
        bulk.retain(|x| x.abs() < 30.0);
        let outliers = [-47.0, 44.0, 52.0, 67.0, 79.0];
        let mut h = Histogram::new(-47.0, 79.0, DEFAULT_BINS);
        h.add(&bulk);
        for c in &mut h.counts {
            *c *= 100;
        }
        h.add(&outliers);
        assert_eq!(h.total(), bulk.len() as u64 * 100 + 5);
        let (mse, minmax) = check("rare outliers", &h);
        let (lo, hi) = choose_range(CalibrationMethod::Mse, &h, &RangeOptions::default());
        assert!(mse < 0.5 * minmax, "{seed}: {mse} vs {minmax}");
        assert!(
            hi > 5.0 && hi < 30.0 && lo < -4.0 && lo > -30.0,
            "{seed}: [{lo}, {hi}]"
        );
    }
}

#[test]
fn mse_search_is_a_local_minimum() {
    let h = histogram_of(&distributions()[0].1, DEFAULT_BINS);
    let (lo, hi) = choose_range(CalibrationMethod::Mse, &h, &RangeOptions::default());
    let best = expected_error(&h, lo, hi);
    for (dl, dh) in [(1.02, 1.0), (0.98, 1.0), (1.0, 1.02), (1.0, 0.98)] {
        let e = expected_error(&h, lo * dl, hi * dh);
        assert!(
            best <= e * (1.0 + 1e-9),
            "[{lo}, {hi}] x ({dl}, {dh}): {best} > {e}"
        );
    }
}

#[test]
fn fast_error_matches_direct_integral() {
    let mut rng = Rng(5);
    for (name, values) in distributions() {
        let h = histogram_of(&values, DEFAULT_BINS);
        let b = Bins::of(&h);
        if !b.searchable() {
            continue;
        }
        let table = MseTable::new(&b);
        for _ in 0..200 {
            // Ranges inside, around and beyond the data, including ones past 0.
            let lo = (b.lo.min(0.0) * 1.5 * rng.uniform()) as f32;
            let hi = (b.hi.max(0.0) * 1.5 * rng.uniform()) as f32;
            let (fast, direct) = (table.error(lo, hi), expected_error(&h, lo, hi));
            assert!(
                close(fast, direct, 1e-7),
                "{name} [{lo}, {hi}]: {fast} vs {direct}"
            );
        }
    }
}

#[test]
fn every_method_contains_zero_and_stays_in_the_data() {
    for (name, values) in distributions() {
        let h = histogram_of(&values, DEFAULT_BINS);
        for m in CalibrationMethod::ALL {
            let (lo, hi) = choose_range(m, &h, &RangeOptions::default());
            assert!(lo.is_finite() && hi.is_finite(), "{name} {m:?}");
            assert!(
                lo <= 0.0 && 0.0 <= hi && lo < hi,
                "{name} {m:?}: [{lo}, {hi}]"
            );
            assert!(
                lo >= h.lo.min(0.0) && hi <= h.hi.max(0.0),
                "{name} {m:?}: [{lo}, {hi}]"
            );
            if h.lo >= 0.0 {
                assert_eq!(lo, 0.0, "{name} {m:?}");
            }
            if h.hi <= 0.0 {
                assert_eq!(hi, 0.0, "{name} {m:?}");
            }
        }
    }
}

#[test]
fn methods_behave_as_documented() {
    let d = distributions();
    let h = histogram_of(&d[0].1, DEFAULT_BINS); // gaussian(0.2, 1), 50k values
    let range = |m, pct| choose_range(m, &h, &RangeOptions { percentile: pct });
    assert_eq!(range(CalibrationMethod::MinMax, 99.999), (h.lo, h.hi));
    assert_eq!(range(CalibrationMethod::Percentile, 100.0), (h.lo, h.hi));
    let (lo, hi) = range(CalibrationMethod::Percentile, 99.0);
    // N(0.2, 1): the 1% and 99% quantiles are 0.2 -+ 2.326.
    assert!(
        (hi - 2.526).abs() < 0.06 && (lo + 2.126).abs() < 0.06,
        "[{lo}, {hi}]"
    );
    let (lo, hi) = range(CalibrationMethod::Entropy, 99.0);
    assert!(
        hi > 2.0 && hi <= h.hi && lo < -1.5 && lo >= h.lo,
        "entropy [{lo}, {hi}]"
    );
    // On heavy tails entropy clips outliers (not necessarily on both sides: the
    // divergence is flat there).
    let heavy = histogram_of(&heavy_tailed(100_000, 4), DEFAULT_BINS);
    let (lo, hi) = choose_range(CalibrationMethod::Entropy, &heavy, &RangeOptions::default());
    assert!(
        hi - lo < 0.5 * (heavy.hi - heavy.lo),
        "entropy heavy [{lo}, {hi}] of [{}, {}]",
        heavy.lo,
        heavy.hi
    );
    // ReLU: the spike at 0 must not force the narrowest window.
    let relu = histogram_of(&d[1].1, DEFAULT_BINS);
    let (lo, hi) = choose_range(CalibrationMethod::Entropy, &relu, &RangeOptions::default());
    assert!(lo == 0.0 && hi > 2.0, "entropy relu [{lo}, {hi}]");
}

#[test]
fn zero_is_exactly_representable() {
    let mut rng = Rng(9);
    let mut cases = vec![
        (0.0, 0.0),
        (-1.0, 0.0),
        (0.0, 1.0),
        (-3.7, 12.1),
        (2.0, 5.0),
        (-5.0, -2.0),
        (-1e-30, 1e-30),
        (f32::MIN, f32::MAX),
        (f32::NEG_INFINITY, f32::NAN),
        (-0.0, -0.0),
    ];
    for _ in 0..2000 {
        let lo = -(10f64.powf(rng.uniform() * 8.0 - 4.0) * rng.uniform()) as f32;
        let hi = (10f64.powf(rng.uniform() * 8.0 - 4.0) * rng.uniform()) as f32;
        cases.push((lo, hi));
    }
    for (lo, hi) in cases {
        let p = asymmetric_int8(lo, hi);
        assert!(p.scale > 0.0 && p.scale.is_finite(), "[{lo}, {hi}]: {p:?}");
        assert!((-128..=127).contains(&p.zero_point), "[{lo}, {hi}]: {p:?}");
        assert_eq!(quantize_value(0.0, p) as i32, p.zero_point);
        assert_eq!(dequantize_value(p.zero_point as i8, p), 0.0);
        // The covered range is the requested one within half a step.
        if lo.is_finite() && hi.is_finite() && p.scale > MIN_SCALE {
            let (s, a, b) = covered(lo, hi);
            let (l, h) = (lo.min(0.0) as f64, hi.max(0.0) as f64);
            assert!(
                (a - l).abs() <= 0.5001 * s && (b - h).abs() <= 0.5001 * s,
                "[{lo}, {hi}]"
            );
        }
    }
    let p = asymmetric_int8(0.0, 0.0);
    assert_eq!(
        p,
        QuantParams {
            scale: MIN_SCALE,
            zero_point: -128
        }
    );
    assert_eq!(asymmetric_int8(-2.55, 0.0).zero_point, 127);
    assert_eq!(asymmetric_int8(0.0, 2.55).zero_point, -128);
}

#[test]
fn quantize_rounds_half_to_even_and_saturates() {
    let p = QuantParams {
        scale: 0.5,
        zero_point: 3,
    };
    for q in i8::MIN..=i8::MAX {
        assert_eq!(quantize_value(dequantize_value(q, p), p), q);
    }
    let p0 = QuantParams {
        scale: 0.5,
        zero_point: 0,
    };
    assert_eq!(quantize_value(0.25, p0), 0); // 0.5 -> 0
    assert_eq!(quantize_value(0.75, p0), 2); // 1.5 -> 2
    assert_eq!(quantize_value(1.25, p0), 2); // 2.5 -> 2
    assert_eq!(quantize_value(-0.75, p0), -2);
    assert_eq!(quantize_value(1e9, p), 127);
    assert_eq!(quantize_value(-1e9, p), -128);
    assert_eq!(quantize_value(f32::INFINITY, p), 127);
    assert_eq!(quantize_value(f32::NAN, p), 3);
    // Round trip within half a step across a real range.
    let p = asymmetric_int8(-1.3, 4.2);
    for i in 0..=1000 {
        let x = -1.3 + 5.5 * i as f32 / 1000.0;
        let y = dequantize_value(quantize_value(x, p), p);
        assert!((x - y).abs() <= 0.5 * p.scale * 1.0001, "{x} -> {y}");
    }
}

#[test]
fn symmetric_weight_scale() {
    assert_eq!(symmetric_int8_scale(127.0), 1.0);
    assert_eq!(symmetric_int8_scale(-12.7), 0.1);
    assert_eq!(symmetric_int8_scale(0.0), 1.0);
    assert_eq!(symmetric_int8_scale(f32::NAN), 1.0);
    assert_eq!(symmetric_int8_scale(1e-30), MIN_SCALE);
    assert!(symmetric_int8_scale(f32::INFINITY).is_finite());
    let w = [0.3f32, -0.91, 0.05];
    let s = symmetric_int8_scale(0.91);
    let p = QuantParams {
        scale: s,
        zero_point: 0,
    };
    let q: Vec<i8> = w.iter().map(|&x| quantize_value(x, p)).collect();
    assert_eq!(q[1], -127);
    assert!(q.iter().all(|&q| (-127..=127).contains(&q)));
}

#[test]
fn degenerate_inputs() {
    let opts = RangeOptions::default();
    // No values at all.
    let mm = MinMax::new();
    assert_eq!(mm.range(), None);
    let empty = Histogram::from_min_max(&mm, DEFAULT_BINS);
    for m in CalibrationMethod::ALL {
        assert_eq!(choose_range(m, &empty, &opts), (0.0, 0.0), "{m:?}");
    }
    assert_eq!(expected_error(&empty, 0.0, 0.0), 0.0);
    // A single value, and all zeros.
    for (v, want) in [(3.5f32, (0.0, 3.5)), (-2.0, (-2.0, 0.0)), (0.0, (0.0, 0.0))] {
        let h = histogram_of(&[v, v, v], DEFAULT_BINS);
        assert_eq!(h.total(), 3);
        for m in CalibrationMethod::ALL {
            assert_eq!(choose_range(m, &h, &opts), want, "{v} {m:?}");
        }
        let (lo, hi) = want;
        let p = asymmetric_int8(lo, hi);
        assert!(p.scale > 0.0 && !p.scale.is_nan());
        assert!(expected_error(&h, lo, hi).is_finite());
    }
    // All the mass in one bin of a wide histogram.
    let mut h = Histogram::new(-4.0, 6.0, DEFAULT_BINS);
    h.add(&[-4.0, 6.0]);
    h.counts[1500] += 10_000;
    for m in CalibrationMethod::ALL {
        let (lo, hi) = choose_range(m, &h, &opts);
        assert!(
            lo <= 0.0 && hi >= 0.0 && lo >= -4.0 && hi <= 6.0,
            "{m:?}: [{lo}, {hi}]"
        );
    }
    // Non-finite values are counted by pass 1 and skipped by pass 2.
    let values = [1.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 2.0, -0.5];
    let mut mm = MinMax::new();
    mm.add(&values);
    assert_eq!((mm.min, mm.max, mm.non_finite, mm.count), (-0.5, 2.0, 3, 3));
    let mut h = Histogram::from_min_max(&mm, 16);
    h.add(&values);
    assert_eq!(h.total(), 3);
    // -0.5, 1.0 and 2.0 over [-0.5, 2] in 16 bins: bins 0, 9.6 -> 9, and the last.
    assert_eq!((h.counts[0], h.counts[9], h.counts[15]), (1, 1, 1));
    // Hand-built histograms with nonsense fields do not panic.
    let odd = [
        Histogram {
            lo: f32::NAN,
            hi: 1.0,
            counts: vec![1, 2, 3],
        },
        Histogram {
            lo: 2.0,
            hi: 1.0,
            counts: vec![5],
        },
        Histogram {
            lo: -1.0,
            hi: 1.0,
            counts: vec![],
        },
        Histogram {
            lo: -1.0,
            hi: 1.0,
            counts: vec![u64::MAX, u64::MAX],
        },
    ];
    for mut h in odd {
        h.add(&[0.5, -3.0]);
        for m in CalibrationMethod::ALL {
            let (lo, hi) = choose_range(
                m,
                &h,
                &RangeOptions {
                    percentile: f64::NAN,
                },
            );
            assert!(
                lo <= 0.0 && hi >= 0.0 && lo.is_finite() && hi.is_finite(),
                "{h:?}"
            );
        }
        assert!(expected_error(&h, -1.0, 1.0).is_finite());
    }
}

#[test]
fn merging_equals_one_pass() {
    let values = heavy_tailed(10_000, 21);
    let (a, b) = values.split_at(3_333);
    let whole = histogram_of(&values, 256);
    let mut m1 = MinMax::new();
    m1.add(a);
    let mut m2 = MinMax::new();
    m2.add(b);
    m1.merge(&m2);
    let mut all = MinMax::new();
    all.add(&values);
    assert_eq!(m1, all);
    let mut h1 = Histogram::from_min_max(&all, 256);
    let mut h2 = h1.clone();
    h1.add(a);
    h2.add(b);
    h1.merge(&h2).expect("same bins");
    assert_eq!(h1, whole);
    let other = Histogram::new(0.0, 1.0, 256);
    assert!(matches!(
        h1.merge(&other),
        Err(RangeError::HistogramMismatch { .. })
    ));
}

#[test]
fn names_and_options() {
    for m in CalibrationMethod::ALL {
        assert_eq!(CalibrationMethod::from_name(m.name()), Some(m));
        let json = serde_json::to_string(&m).expect("serializes");
        assert_eq!(json, format!("\"{}\"", m.name()));
    }
    assert_eq!(
        CalibrationMethod::from_name("MSE"),
        Some(CalibrationMethod::Mse)
    );
    assert_eq!(CalibrationMethod::from_name("kl"), None);
    assert!(RangeOptions::default().validate().is_ok());
    assert!(RangeOptions { percentile: 101.0 }.validate().is_err());
    assert!(
        RangeOptions {
            percentile: f64::NAN
        }
        .validate()
        .is_err()
    );
}

#[test]
fn method_timing_2048_bins() {
    let h = histogram_of(&heavy_tailed(200_000, 8), DEFAULT_BINS);
    let relu: Vec<f32> = distributions()[1].1.clone();
    let hr = histogram_of(&relu, DEFAULT_BINS);
    for m in CalibrationMethod::ALL {
        for (name, h) in [("two-sided", &h), ("relu", &hr)] {
            let start = Instant::now();
            let reps = 5;
            for _ in 0..reps {
                std::hint::black_box(choose_range(m, h, &RangeOptions::default()));
            }
            let per = start.elapsed() / reps;
            eprintln!(
                "timing: {:<10} {name:<9} {per:?} per 2048-bin histogram",
                m.name()
            );
            // Generous: the machine is shared; this catches an accidental O(bins^2).
            assert!(per.as_millis() < 500, "{m:?} {name}: {per:?}");
        }
    }
}
