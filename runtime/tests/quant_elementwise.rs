//! Quantized elementwise operations against independent references of TFLite's
//! arithmetic: ADD, SUB, MUL, MAXIMUM, MINIMUM, PRELU and the comparisons with NumPy
//! broadcasting; RELU, RELU1, RELU6, LOGISTIC, TANH, HARD_SWISH, QUANTIZE (from float
//! and between 8-bit types) and DEQUANTIZE (per-tensor and per-channel). Random scales
//! and zero points (at the ends of their ranges too), every fused activation,
//! saturating cases. Bit-exact unless stated.

mod quant_common;

use nnc_formats::nn::{OperandType, OperationType};
use quant_common::*;

/// Right-aligned broadcast of two shapes.
fn broadcast(a: &[usize], b: &[usize]) -> Vec<usize> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let da = if i + a.len() >= n {
                a[i + a.len() - n]
            } else {
                1
            };
            let db = if i + b.len() >= n {
                b[i + b.len() - n]
            } else {
                1
            };
            da.max(db)
        })
        .collect()
}

/// The flat index into `shape` of output element `i` of `out` (broadcasting).
fn source_index(i: usize, out: &[usize], shape: &[usize]) -> usize {
    let mut rem = i;
    let mut coords = vec![0; out.len()];
    for d in (0..out.len()).rev() {
        coords[d] = rem % out[d];
        rem /= out[d];
    }
    let lead = out.len() - shape.len();
    let mut idx = 0;
    for (d, &s) in shape.iter().enumerate() {
        idx = idx * s + if s == 1 { 0 } else { coords[lead + d] };
    }
    idx
}

fn random_shapes(rng: &mut Rng) -> (Vec<usize>, Vec<usize>) {
    let r = rng.usize(1, 4);
    let full: Vec<usize> = (0..r).map(|_| rng.usize(1, 5)).collect();
    let mut other: Vec<usize> = full
        .iter()
        .map(|&d| if rng.bool(0.4) { 1 } else { d })
        .collect();
    if rng.bool(0.3) {
        other = other[rng.usize(0, r - 1)..].to_vec();
    }
    if rng.bool(0.5) {
        (full, other)
    } else {
        (other, full)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Bin {
    Add,
    Sub,
    Mul,
    Max,
    Min,
    Prelu,
}

fn reference(
    op: Bin,
    a: i64,
    b: i64,
    qa: (f32, i32),
    qb: (f32, i32),
    qo: (f32, i32),
    range: (i64, i64),
) -> i64 {
    let (za, zb, zo) = (i64::from(qa.1), i64::from(qb.1), i64::from(qo.1));
    let v = match op {
        Bin::Add | Bin::Sub => {
            let twice_max = f64::from(2.0 * qa.0.max(qb.0));
            let s1 = ref_mbqm((a - za) << 20, f64::from(qa.0) / twice_max);
            let s2 = ref_mbqm((b - zb) << 20, f64::from(qb.0) / twice_max);
            let raw = if op == Bin::Add { s1 + s2 } else { s1 - s2 };
            ref_mbqm(raw, twice_max / f64::from((1 << 20) as f32 * qo.0)) + zo
        }
        Bin::Mul => ref_mbqm((a - za) * (b - zb), f64::from(qa.0 * qb.0 / qo.0)) + zo,
        Bin::Max | Bin::Min => {
            if qa == qo && qb == qo {
                if op == Bin::Max { a.max(b) } else { a.min(b) }
            } else {
                let x = (ref_mbqm(a - za, f64::from(qa.0) / f64::from(qo.0)) + zo)
                    .clamp(range.0, range.1);
                let y = (ref_mbqm(b - zb, f64::from(qb.0) / f64::from(qo.0)) + zo)
                    .clamp(range.0, range.1);
                if op == Bin::Max { x.max(y) } else { x.min(y) }
            }
        }
        Bin::Prelu => {
            if a >= za {
                ref_mbqm(a - za, f64::from(qa.0 / qo.0)) + zo
            } else {
                ref_mbqm((a - za) * (b - zb), f64::from(qa.0 * qb.0 / qo.0)) + zo
            }
        }
    };
    v.clamp(range.0, range.1)
}

#[test]
fn binary_operations_match_reference() {
    let mut rng = Rng::new(11);
    for case in 0..400 {
        let op = [Bin::Add, Bin::Sub, Bin::Mul, Bin::Max, Bin::Min, Bin::Prelu][case % 6];
        let ty = if rng.bool(0.5) { U8 } else { I8 };
        let (sa, sb) = random_shapes(&mut rng);
        let so = broadcast(&sa, &sb);
        let q = |rng: &mut Rng| (rng.scale(-8.0, 1.0), rng.zp(ty));
        let (qa, mut qb, mut qo) = (q(&mut rng), q(&mut rng), q(&mut rng));
        if matches!(op, Bin::Max | Bin::Min) && rng.bool(0.5) {
            (qb, qo) = (qa, qa);
        }
        let act = if matches!(op, Bin::Add | Bin::Sub | Bin::Mul) {
            rng.i32(0, 3)
        } else {
            0
        };
        let a = rng.values(ty, sa.iter().product());
        let b = rng.values(ty, sb.iter().product());
        let range = ref_act_range(act, qo.0, qo.1, ty);
        let n: usize = so.iter().product();
        let want: Vec<i64> = (0..n)
            .map(|i| {
                let x = i64::from(a[source_index(i, &so, &sa)]);
                let y = i64::from(b[source_index(i, &so, &sb)]);
                reference(op, x, y, qa, qb, qo, range)
            })
            .collect();
        let nn_op = match op {
            Bin::Add => OperationType::Add,
            Bin::Sub => OperationType::Sub,
            Bin::Mul => OperationType::Mul,
            Bin::Max => OperationType::Maximum,
            Bin::Min => OperationType::Minimum,
            Bin::Prelu => OperationType::Prelu,
        };
        let mut args = vec![q_input(ty, &sa, qa.0, qa.1, &a)];
        args.push(if rng.bool(0.5) {
            q_const(ty, &sb, qb.0, qb.1, &b)
        } else {
            q_input(ty, &sb, qb.0, qb.1, &b)
        });
        if matches!(op, Bin::Add | Bin::Sub | Bin::Mul) {
            args.push(QArg::I32(act));
        }
        let got = run_q(nn_op, args, &[out(ty, &so, qo.0, qo.1)])
            .unwrap_or_else(|e| panic!("{op:?} case {case}: {e}"));
        assert_q_eq(
            &q_values(&got[0]),
            &want,
            &format!("{op:?} case {case} {sa:?} {sb:?} {qa:?} {qb:?} {qo:?} act {act}"),
        );
    }
}

#[test]
fn add_saturates_and_hand_checked() {
    // Equal scales 0.5, zero points 0: 100 + 100 = 200 real 100 -> saturates at 127.
    let got = run_q(
        OperationType::Add,
        vec![
            q_input(I8, &[3], 0.5, 0, &[100, -100, 3]),
            q_input(I8, &[3], 0.5, 0, &[100, -100, 4]),
            QArg::I32(0),
        ],
        &[out(I8, &[3], 0.5, 0)],
    )
    .unwrap();
    assert_eq!(q_values(&got[0]), vec![127, -128, 7]);
    // MUL uint8 with RELU6: (10 - 2) * 0.25 * (6 - 1) * 0.5 = 5.0 -> 5 / 0.1 = 50; 60 -> 6.0 clamp.
    let got = run_q(
        OperationType::Mul,
        vec![
            q_input(U8, &[2], 0.25, 2, &[10, 250]),
            q_input(U8, &[2], 0.5, 1, &[6, 200]),
            QArg::I32(3),
        ],
        &[out(U8, &[2], 0.1, 0)],
    )
    .unwrap();
    assert_eq!(q_values(&got[0]), vec![50, 60]);
}

#[test]
fn comparisons_match_reference() {
    let ops = [
        OperationType::Equal,
        OperationType::NotEqual,
        OperationType::Less,
        OperationType::LessEqual,
        OperationType::Greater,
        OperationType::GreaterEqual,
    ];
    let mut rng = Rng::new(12);
    for case in 0..240 {
        let op = ops[case % 6];
        let ty = if rng.bool(0.5) { U8 } else { I8 };
        let (sa, sb) = random_shapes(&mut rng);
        let so = broadcast(&sa, &sb);
        // Scales below 1 follow TFLite's fixed point; 1 or more compare exact values.
        let hi = if case % 4 == 0 { 3.0 } else { -0.01 };
        let qa = (rng.scale(-8.0, hi), rng.zp(ty));
        let qb = if rng.bool(0.3) {
            qa
        } else {
            (rng.scale(-8.0, hi), rng.zp(ty))
        };
        let a = rng.values(ty, sa.iter().product());
        let b = rng.values(ty, sb.iter().product());
        let exact = qa.0 >= 1.0 || qb.0 >= 1.0;
        let want: Vec<i64> = (0..so.iter().product::<usize>())
            .map(|i| {
                let x = i64::from(a[source_index(i, &so, &sa)]);
                let y = i64::from(b[source_index(i, &so, &sb)]);
                let (p, q) = if exact {
                    // Compared as exact rationals: (x - zp) * scale, scales as f32.
                    let p = (x - i64::from(qa.1)) as f64 * f64::from(qa.0);
                    let q = (y - i64::from(qb.1)) as f64 * f64::from(qb.0);
                    (p, q)
                } else {
                    (
                        ref_mbqm((x - i64::from(qa.1)) << 8, f64::from(qa.0)) as f64,
                        ref_mbqm((y - i64::from(qb.1)) << 8, f64::from(qb.0)) as f64,
                    )
                };
                i64::from(match op {
                    OperationType::Equal => p == q,
                    OperationType::NotEqual => p != q,
                    OperationType::Less => p < q,
                    OperationType::LessEqual => p <= q,
                    OperationType::Greater => p > q,
                    _ => p >= q,
                })
            })
            .collect();
        let got = run_q(
            op,
            vec![
                q_input(ty, &sa, qa.0, qa.1, &a),
                q_input(ty, &sb, qb.0, qb.1, &b),
            ],
            &[out(OperandType::TensorBool8, &so, 0.0, 0)],
        )
        .unwrap_or_else(|e| panic!("{op} case {case}: {e}"));
        let got: Vec<i32> = got[0].data.iter().map(|&v| i32::from(v)).collect();
        assert_q_eq(&got, &want, &format!("{op} case {case}"));
    }
}

/// Every value of the type, as a model input of shape [256].
fn all_values(ty: OperandType) -> Vec<i32> {
    let (lo, hi) = range(ty);
    (lo..=hi).collect()
}

fn run_unary(
    op: OperationType,
    ty: OperandType,
    qi: (f32, i32),
    out_ty: OperandType,
    qo: (f32, i32),
) -> Vec<i32> {
    let x = all_values(ty);
    let got = run_q(
        op,
        vec![q_input(ty, &[x.len()], qi.0, qi.1, &x)],
        &[out(out_ty, &[x.len()], qo.0, qo.1)],
    )
    .unwrap_or_else(|e| panic!("{op}: {e}"));
    q_values(&got[0])
}

#[test]
fn relu_family_matches_reference() {
    let mut rng = Rng::new(13);
    for case in 0..90 {
        let (op, act) = [
            (OperationType::Relu, 1),
            (OperationType::Relu1, 2),
            (OperationType::Relu6, 3),
        ][case % 3];
        let ty = if rng.bool(0.5) { U8 } else { I8 };
        let qi = (rng.scale(-7.0, 1.0), rng.zp(ty));
        let qo = if rng.bool(0.3) {
            qi
        } else {
            (rng.scale(-7.0, 1.0), rng.zp(ty))
        };
        let (lo, hi) = ref_act_range(act, qo.0, qo.1, ty);
        let want: Vec<i64> = all_values(ty)
            .into_iter()
            .map(|x| {
                (ref_mbqm(i64::from(x - qi.1), f64::from(qi.0 / qo.0)) + i64::from(qo.1))
                    .clamp(lo, hi)
            })
            .collect();
        assert_q_eq(
            &run_unary(op, ty, qi, ty, qo),
            &want,
            &format!("{op} {qi:?} {qo:?}"),
        );
    }
}

/// TFLite's LUTPopulate, in float.
fn lut_reference(
    ty: OperandType,
    qi: (f32, i32),
    qo: (f32, i32),
    f: impl Fn(f32) -> f32,
) -> Vec<i64> {
    let (lo, hi) = range(ty);
    let inverse = 1.0 / qo.0;
    all_values(ty)
        .into_iter()
        .map(|x| {
            let y = f(qi.0 * (x - qi.1) as f32);
            let q = ((y * inverse).round() + qo.1 as f32) as i64;
            q.clamp(i64::from(lo), i64::from(hi))
        })
        .collect()
}

#[test]
fn logistic_and_tanh_match_reference() {
    let mut rng = Rng::new(14);
    for case in 0..60 {
        let ty = if rng.bool(0.5) { U8 } else { I8 };
        let qi = (rng.scale(-7.0, 0.0), rng.zp(ty));
        let (op, qo) = if case % 2 == 0 {
            (
                OperationType::Logistic,
                (1.0 / 256.0, if ty == U8 { 0 } else { -128 }),
            )
        } else if case % 4 == 1 {
            (
                OperationType::Tanh,
                (1.0 / 128.0, if ty == U8 { 128 } else { 0 }),
            )
        } else {
            (OperationType::Tanh, (rng.scale(-8.0, 0.0), rng.zp(ty)))
        };
        let want = if op == OperationType::Logistic {
            lut_reference(ty, qi, qo, |v| 1.0 / (1.0 + (-v).exp()))
        } else {
            lut_reference(ty, qi, qo, f32::tanh)
        };
        let got = run_unary(op, ty, qi, ty, qo);
        assert_q_eq(&got, &want, &format!("{op} {qi:?} {qo:?}"));
        // And within one unit of the exact function in double.
        for (x, &g) in all_values(ty).into_iter().zip(&got) {
            let r = f64::from(qi.0) * f64::from(x - qi.1);
            let y = if op == OperationType::Logistic {
                1.0 / (1.0 + (-r).exp())
            } else {
                r.tanh()
            };
            let (lo, hi) = range(ty);
            let e = (y / f64::from(qo.0) + f64::from(qo.1)).clamp(f64::from(lo), f64::from(hi));
            assert!((f64::from(g) - e).abs() <= 1.0, "{op} x {x}: {g} vs {e}");
        }
    }
}

#[test]
fn hard_swish_is_within_one_unit_of_the_real_function() {
    // Bit-exactness with TFLite's fixed point is checked by quant_tflite_vectors.rs.
    let mut rng = Rng::new(15);
    for _ in 0..40 {
        let ty = if rng.bool(0.5) { U8 } else { I8 };
        let qi = (rng.scale(-7.0, -1.0), rng.zp(ty));
        let qo = (rng.scale(-7.0, -1.0), rng.zp(ty));
        let got = run_unary(OperationType::HardSwish, ty, qi, ty, qo);
        let (lo, hi) = range(ty);
        for (x, &g) in all_values(ty).into_iter().zip(&got) {
            let r = f64::from(qi.0) * f64::from(x - qi.1);
            let y = r * (r + 3.0).clamp(0.0, 6.0) / 6.0;
            let e = (y / f64::from(qo.0) + f64::from(qo.1)).clamp(f64::from(lo), f64::from(hi));
            assert!(
                (f64::from(g) - e).abs() <= 1.5,
                "HARD_SWISH {qi:?} {qo:?} x {x}: {g} vs {e}"
            );
        }
    }
}

#[test]
fn requantize_matches_reference() {
    let mut rng = Rng::new(16);
    for _ in 0..80 {
        let ti = if rng.bool(0.5) { U8 } else { I8 };
        let to = if rng.bool(0.5) { U8 } else { I8 };
        let qi = (rng.scale(-8.0, 2.0), rng.zp(ti));
        let qo = (rng.scale(-8.0, 2.0), rng.zp(to));
        let (lo, hi) = range(to);
        let want: Vec<i64> = all_values(ti)
            .into_iter()
            .map(|x| {
                (ref_mbqm(i64::from(x - qi.1), f64::from(qi.0) / f64::from(qo.0)) + i64::from(qo.1))
                    .clamp(i64::from(lo), i64::from(hi))
            })
            .collect();
        assert_q_eq(
            &run_unary(OperationType::Quantize, ti, qi, to, qo),
            &want,
            &format!("QUANTIZE {qi:?} -> {qo:?}"),
        );
    }
}

#[test]
fn quantize_from_float_rounds_half_away_from_zero() {
    let mut rng = Rng::new(17);
    for _ in 0..40 {
        let ty = if rng.bool(0.5) { U8 } else { I8 };
        let (scale, zp) = (rng.scale(-6.0, 0.0), rng.zp(ty));
        let mut x: Vec<f32> = (0..64)
            .map(|_| ((rng.unit() - 0.5) * 600.0) as f32 * scale)
            .collect();
        // Exact halves, both signs, and saturating values.
        x.extend([
            2.5 * scale,
            -2.5 * scale,
            0.5 * scale,
            -0.5 * scale,
            1e9,
            -1e9,
            0.0,
        ]);
        let (lo, hi) = range(ty);
        let want: Vec<i64> = x
            .iter()
            .map(|&v| {
                let q = v / scale;
                let r = q.trunc()
                    + if (q - q.trunc()).abs() >= 0.5 {
                        q.signum()
                    } else {
                        0.0
                    };
                (r as i64 + i64::from(zp)).clamp(i64::from(lo), i64::from(hi))
            })
            .collect();
        let got = run_q(
            OperationType::Quantize,
            vec![input(
                nnc_formats::nn::Operand::new(OperandType::TensorFloat32, vec![x.len() as u32]),
                bytemuck::cast_slice(&x).to_vec(),
            )],
            &[out(ty, &[x.len()], scale, zp)],
        )
        .unwrap();
        assert_q_eq(
            &q_values(&got[0]),
            &want,
            &format!("QUANTIZE float -> {scale} {zp}"),
        );
    }
}

#[test]
fn dequantize_per_tensor_and_per_channel() {
    let mut rng = Rng::new(18);
    for _ in 0..20 {
        let ty = if rng.bool(0.5) { U8 } else { I8 };
        let (scale, zp) = (rng.scale(-8.0, 3.0), rng.zp(ty));
        let x = all_values(ty);
        let got = run_q(
            OperationType::Dequantize,
            vec![q_input(ty, &[x.len()], scale, zp, &x)],
            &[out(OperandType::TensorFloat32, &[x.len()], 0.0, 0)],
        )
        .unwrap();
        let want: Vec<f32> = x.iter().map(|&v| (v - zp) as f32 * scale).collect();
        assert_eq!(f32_values(&got[0]), want);
    }
    // Per-channel along dimension 1 of [2, 3, 2].
    let scales = vec![0.5, 0.25, 2.0];
    let values: Vec<i32> = (0..12).map(|i| i * 11 - 60).collect();
    let got = run_q(
        OperationType::Dequantize,
        vec![constant(
            per_channel(&[2, 3, 2], 1, scales.clone()),
            q_bytes(&values),
        )],
        &[out(OperandType::TensorFloat32, &[2, 3, 2], 0.0, 0)],
    )
    .unwrap();
    let want: Vec<f32> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| v as f32 * scales[(i / 2) % 3])
        .collect();
    assert_eq!(f32_values(&got[0]), want);
}
