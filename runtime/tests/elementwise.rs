//! Binary operations with broadcasting (ranks up to 6), unary functions, comparisons,
//! logical operations and SELECT, against float64 / hand-computed references.

mod common;

use common::*;
use nnc_formats::nn::{OperandType, OperationType};

/// NumPy broadcast of two shapes.
fn broadcast(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() >= r {
                a[i + a.len() - r]
            } else {
                1
            };
            let db = if i + b.len() >= r {
                b[i + b.len() - r]
            } else {
                1
            };
            da.max(db)
        })
        .collect()
}

/// Linear index into `shape` (right-aligned against `out`) of output index `idx`.
fn source_index(idx: usize, out: &[usize], shape: &[usize]) -> usize {
    let mut rem = idx;
    let mut coords = vec![0; out.len()];
    for d in (0..out.len()).rev() {
        coords[d] = rem % out[d];
        rem /= out[d];
    }
    let lead = out.len() - shape.len();
    let mut s = 0;
    for (d, &dim) in shape.iter().enumerate() {
        let c = if dim == 1 { 0 } else { coords[lead + d] };
        s = s * dim + c;
    }
    s
}

/// Random pair of broadcast-compatible shapes of rank up to 6.
fn random_shapes(rng: &mut Rng) -> (Vec<usize>, Vec<usize>) {
    let r = rng.range(1, 6);
    let full: Vec<usize> = (0..r).map(|_| rng.range(1, 4)).collect();
    let make = |rng: &mut Rng| -> Vec<usize> {
        let drop = rng.range(0, r - 1);
        full[drop..]
            .iter()
            .map(|&d| if rng.range(0, 2) == 0 { 1 } else { d })
            .collect()
    };
    match rng.range(0, 4) {
        0 => (full.clone(), full.clone()),
        1 => (full.clone(), vec![*full.last().unwrap()]),
        2 => (full.clone(), vec![1]),
        _ => (make(rng), make(rng)),
    }
}

#[test]
fn float_binary_ops_broadcast() {
    let mut rng = Rng::new(21);
    let ops = [
        OperationType::Add,
        OperationType::Sub,
        OperationType::Mul,
        OperationType::Div,
        OperationType::Maximum,
        OperationType::Minimum,
        OperationType::Pow,
        OperationType::Prelu,
    ];
    for case in 0..400 {
        let op = ops[rng.range(0, ops.len() - 1)];
        let (sa, sb) = random_shapes(&mut rng);
        let (sa, sb) = if rng.bool() { (sb, sa) } else { (sa, sb) };
        let out = broadcast(&sa, &sb);
        let na: usize = sa.iter().product();
        let nb: usize = sb.iter().product();
        let mut a = rng.f32s(na);
        let mut b = rng.f32s(nb);
        if op == OperationType::Pow {
            // Positive bases keep powf real.
            a.iter_mut().for_each(|v| *v = v.abs() + 0.1);
            b.iter_mut().for_each(|v| *v *= 3.0);
        }
        if op == OperationType::Div {
            b.iter_mut()
                .for_each(|v| *v = if v.abs() < 0.1 { 0.5 } else { *v });
        }
        let act = rng.range(0, 3) as i32;
        let fused = matches!(
            op,
            OperationType::Add | OperationType::Sub | OperationType::Mul | OperationType::Div
        );
        let n: usize = out.iter().product();
        let expected: Vec<f64> = (0..n)
            .map(|i| {
                let x = f64::from(a[source_index(i, &out, &sa)]);
                let y = f64::from(b[source_index(i, &out, &sb)]);
                let v = match op {
                    OperationType::Add => x + y,
                    OperationType::Sub => x - y,
                    OperationType::Mul => x * y,
                    OperationType::Div => x / y,
                    OperationType::Maximum => x.max(y),
                    OperationType::Minimum => x.min(y),
                    OperationType::Pow => x.powf(y),
                    _ => {
                        if x >= 0.0 {
                            x
                        } else {
                            x * y
                        }
                    }
                };
                if fused { activation(act, v) } else { v }
            })
            .collect();
        let mut args = vec![f32_arg(rng.range(0, 3) == 0, &sa, &a), input_f32(&sb, &b)];
        if fused {
            args.push(Arg::I32(act));
        }
        let got =
            run_op(op, args, &[out_f32(&out)]).unwrap_or_else(|e| panic!("case {case} {op}: {e}"));
        // POW goes through exp/log: allow a few more ulps of the result.
        let got = f32s(&got[0]);
        if op == OperationType::Pow {
            for (g, e) in got.iter().zip(&expected) {
                assert!(
                    (f64::from(*g) - e).abs() <= 1e-5 + 2e-6 * e.abs(),
                    "case {case} pow: {g} vs {e}"
                );
            }
        } else {
            assert_close_values(&got, &expected, &format!("case {case} {op} {sa:?} {sb:?}"));
        }
    }
}

/// POW by 1, 2, 3 or -1 (the same value in every element of the exponent, a weight or an
/// input) is a product: it gives `powf`'s values, special values included; other
/// exponents, and exponents that widen the base, take the general path.
#[test]
fn pow_by_small_integers_matches_powf() {
    let base = [
        -3.5f32,
        -1.0,
        -0.0,
        0.0,
        0.5,
        2.0,
        1e20,
        -1e20,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        7.25,
        1.0e-30,
        3.0,
        -2.5,
        0.1,
        -0.1,
        1.5,
        -1.5,
    ];
    let shape = [base.len()];
    for exponent in [1.0f32, 2.0, 3.0, -1.0, 2.5, 0.5] {
        for exponent_shape in [vec![1], vec![1, 1]] {
            for as_weight in [false, true] {
                let out_shape = if exponent_shape.len() == 2 {
                    vec![1, base.len()]
                } else {
                    shape.to_vec()
                };
                let args = vec![
                    input_f32(&shape, &base),
                    f32_arg(as_weight, &exponent_shape, &[exponent]),
                ];
                let got = run_op(OperationType::Pow, args, &[out_f32(&out_shape)]).unwrap();
                for (x, y) in base.iter().zip(f32s(&got[0])) {
                    let want = x.powf(exponent);
                    let same = (want.is_nan() && y.is_nan())
                        || (want == y && want.is_sign_negative() == y.is_sign_negative())
                        || (f64::from(y) - f64::from(want)).abs() <= 2e-7 * f64::from(want.abs());
                    assert!(same, "pow({x}, {exponent}) = {y}, powf gives {want}");
                }
            }
        }
    }
}

#[test]
fn int32_binary_ops() {
    let mut rng = Rng::new(22);
    let ops = [
        OperationType::Add,
        OperationType::Sub,
        OperationType::Mul,
        OperationType::Div,
        OperationType::Maximum,
        OperationType::Minimum,
    ];
    for case in 0..200 {
        let op = ops[rng.range(0, ops.len() - 1)];
        let (sa, sb) = random_shapes(&mut rng);
        let out = broadcast(&sa, &sb);
        let a = rng.i32s(sa.iter().product(), -50, 50);
        let b = rng.i32s(sb.iter().product(), -7, 7);
        let n: usize = out.iter().product();
        let expected: Vec<i32> = (0..n)
            .map(|i| {
                let x = a[source_index(i, &out, &sa)];
                let y = b[source_index(i, &out, &sb)];
                match op {
                    OperationType::Add => x + y,
                    OperationType::Sub => x - y,
                    OperationType::Mul => x * y,
                    OperationType::Div => {
                        if y == 0 {
                            0
                        } else {
                            (f64::from(x) / f64::from(y)).floor() as i32
                        }
                    }
                    OperationType::Maximum => x.max(y),
                    _ => x.min(y),
                }
            })
            .collect();
        let mut args = vec![input_i32(&sa, &a), input_i32(&sb, &b)];
        if !matches!(op, OperationType::Maximum | OperationType::Minimum) {
            args.push(Arg::I32(0));
        }
        let got =
            run_op(op, args, &[out_i32(&out)]).unwrap_or_else(|e| panic!("case {case} {op}: {e}"));
        assert_eq!(i32s(&got[0]), expected, "case {case} {op} {sa:?} {sb:?}");
    }
}

#[test]
fn int32_overflow_wraps_and_division_by_zero_is_zero() {
    let a = [i32::MAX, i32::MIN, 7, -7];
    let b = [1, -1, 0, 2];
    let add = run_op(
        OperationType::Add,
        vec![input_i32(&[4], &a), input_i32(&[4], &b), Arg::I32(0)],
        &[out_i32(&[4])],
    )
    .unwrap();
    assert_eq!(i32s(&add[0]), vec![i32::MIN, i32::MAX, 7, -5]);
    let div = run_op(
        OperationType::Div,
        vec![input_i32(&[4], &a), input_i32(&[4], &b), Arg::I32(0)],
        &[out_i32(&[4])],
    )
    .unwrap();
    assert_eq!(i32s(&div[0]), vec![i32::MAX, i32::MIN, 0, -4]);
}

#[test]
fn unary_functions() {
    let mut rng = Rng::new(23);
    let x: Vec<f32> = rng.f32s(64).iter().map(|v| v * 8.0).collect();
    let positive: Vec<f32> = x.iter().map(|v| v.abs() + 0.01).collect();
    type F = fn(f64) -> f64;
    let cases: Vec<(OperationType, F, bool)> = vec![
        (OperationType::Abs, |v| v.abs(), false),
        (OperationType::Exp, |v| v.exp(), false),
        (OperationType::Log, |v| v.ln(), true),
        (OperationType::Sqrt, |v| v.sqrt(), true),
        (OperationType::Rsqrt, |v| 1.0 / v.sqrt(), true),
        (OperationType::Neg, |v| -v, false),
        (OperationType::Floor, |v| v.floor(), false),
        (OperationType::Sin, |v| v.sin(), false),
        (OperationType::Logistic, |v| 1.0 / (1.0 + (-v).exp()), false),
        (OperationType::Tanh, |v| v.tanh(), false),
        (OperationType::Relu, |v| v.max(0.0), false),
        (OperationType::Relu1, |v| v.clamp(-1.0, 1.0), false),
        (OperationType::Relu6, |v| v.clamp(0.0, 6.0), false),
        (
            OperationType::HardSwish,
            |v| v * (v + 3.0).clamp(0.0, 6.0) / 6.0,
            false,
        ),
    ];
    for (op, f, needs_positive) in cases {
        let input = if needs_positive { &positive } else { &x };
        let expected: Vec<f64> = input.iter().map(|&v| f(f64::from(v))).collect();
        let got = run_op(op, vec![input_f32(&[4, 16], input)], &[out_f32(&[4, 16])]).unwrap();
        let got = f32s(&got[0]);
        // Transcendentals from libm are within a couple of ulps.
        let ulps = if matches!(
            op,
            OperationType::Exp
                | OperationType::Log
                | OperationType::Sin
                | OperationType::Tanh
                | OperationType::Logistic
        ) {
            4.0
        } else {
            1.0
        };
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            let tol = 1e-5 + ulps * 5.0 * EPS * e.abs();
            assert!(
                (f64::from(*g) - e).abs() <= tol,
                "{op} element {i}: {g} vs {e}"
            );
        }
    }
    // ELU(alpha)
    let expected: Vec<f64> = x
        .iter()
        .map(|&v| {
            if v < 0.0 {
                0.5 * (f64::from(v).exp() - 1.0)
            } else {
                f64::from(v)
            }
        })
        .collect();
    let got = run_op(
        OperationType::Elu,
        vec![input_f32(&[64], &x), Arg::F32(0.5)],
        &[out_f32(&[64])],
    )
    .unwrap();
    assert_close_values(&f32s(&got[0]), &expected, "ELU");
    // Extremes: no overflow in LOGISTIC, NaN passes through RELU.
    let ext = [-1000.0f32, 1000.0, f32::NAN];
    let got = run_op(
        OperationType::Logistic,
        vec![input_f32(&[3], &ext)],
        &[out_f32(&[3])],
    )
    .unwrap();
    let got = f32s(&got[0]);
    assert_eq!(&got[..2], &[0.0, 1.0]);
    assert!(got[2].is_nan());
    let got = run_op(
        OperationType::Relu,
        vec![input_f32(&[3], &ext)],
        &[out_f32(&[3])],
    )
    .unwrap();
    let got = f32s(&got[0]);
    assert_eq!(&got[..2], &[0.0, 1000.0]);
    assert!(got[2].is_nan());
}

#[test]
fn int_and_bool_unary() {
    let got = run_op(
        OperationType::Abs,
        vec![input_i32(&[3], &[-3, 0, i32::MIN])],
        &[out_i32(&[3])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![3, 0, i32::MIN]);
    let got = run_op(
        OperationType::Neg,
        vec![input_i32(&[2], &[5, -6])],
        &[out_i32(&[2])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![-5, 6]);
    let got = run_op(
        OperationType::LogicalNot,
        vec![input_bool(&[3], &[true, false, true])],
        &[out_bool(&[3])],
    )
    .unwrap();
    assert_eq!(bools(&got[0]), vec![false, true, false]);
}

#[test]
fn comparisons_broadcast() {
    let mut rng = Rng::new(24);
    let ops = [
        OperationType::Equal,
        OperationType::NotEqual,
        OperationType::Less,
        OperationType::LessEqual,
        OperationType::Greater,
        OperationType::GreaterEqual,
    ];
    for case in 0..150 {
        let op = ops[rng.range(0, 5)];
        let (sa, sb) = random_shapes(&mut rng);
        let out = broadcast(&sa, &sb);
        let n: usize = out.iter().product();
        let cmp = |x: f64, y: f64| match op {
            OperationType::Equal => x == y,
            OperationType::NotEqual => x != y,
            OperationType::Less => x < y,
            OperationType::LessEqual => x <= y,
            OperationType::Greater => x > y,
            _ => x >= y,
        };
        if rng.bool() {
            // Small integers make ties common.
            let a = rng.i32s(sa.iter().product(), -2, 2);
            let b = rng.i32s(sb.iter().product(), -2, 2);
            let expected: Vec<bool> = (0..n)
                .map(|i| {
                    cmp(
                        f64::from(a[source_index(i, &out, &sa)]),
                        f64::from(b[source_index(i, &out, &sb)]),
                    )
                })
                .collect();
            let got = run_op(
                op,
                vec![input_i32(&sa, &a), input_i32(&sb, &b)],
                &[out_bool(&out)],
            )
            .unwrap();
            assert_eq!(bools(&got[0]), expected, "case {case} {op} int32");
        } else {
            let a: Vec<f32> = rng
                .i32s(sa.iter().product(), -2, 2)
                .iter()
                .map(|&v| v as f32 * 0.5)
                .collect();
            let b: Vec<f32> = rng
                .i32s(sb.iter().product(), -2, 2)
                .iter()
                .map(|&v| v as f32 * 0.5)
                .collect();
            let expected: Vec<bool> = (0..n)
                .map(|i| {
                    cmp(
                        f64::from(a[source_index(i, &out, &sa)]),
                        f64::from(b[source_index(i, &out, &sb)]),
                    )
                })
                .collect();
            let got = run_op(
                op,
                vec![input_f32(&sa, &a), input_f32(&sb, &b)],
                &[out_bool(&out)],
            )
            .unwrap();
            assert_eq!(bools(&got[0]), expected, "case {case} {op} float32");
        }
    }
}

#[test]
fn logical_ops_and_select() {
    let a = [true, false, true, false];
    let b = [true, true];
    let and = run_op(
        OperationType::LogicalAnd,
        vec![input_bool(&[2, 2], &a), input_bool(&[2], &b)],
        &[out_bool(&[2, 2])],
    )
    .unwrap();
    assert_eq!(bools(&and[0]), vec![true, false, true, false]);
    let or = run_op(
        OperationType::LogicalOr,
        vec![input_bool(&[2, 2], &a), input_bool(&[1], &[false])],
        &[out_bool(&[2, 2])],
    )
    .unwrap();
    assert_eq!(bools(&or[0]), vec![true, false, true, false]);
    // SELECT with three-way broadcasting: condition [2, 1], values [1, 3] and [2, 3].
    let cond = [true, false];
    let t = [1.0f32, 2.0, 3.0];
    let f = [10.0f32, 20.0, 30.0, 40.0, 50.0, 60.0];
    let got = run_op(
        OperationType::Select,
        vec![
            input_bool(&[2, 1], &cond),
            input_f32(&[1, 3], &t),
            input_f32(&[2, 3], &f),
        ],
        &[out_f32(&[2, 3])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![1.0, 2.0, 3.0, 40.0, 50.0, 60.0]);
    let got = run_op(
        OperationType::Select,
        vec![
            input_bool(&[3], &[false, true, false]),
            input_i32(&[3], &[1, 2, 3]),
            input_i32(&[3], &[4, 5, 6]),
        ],
        &[out_i32(&[3])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![4, 2, 6]);
}

#[test]
fn equal_on_bool8() {
    let got = run_op(
        OperationType::Equal,
        vec![
            input_bool(&[3], &[true, false, true]),
            input_bool(&[3], &[true, true, false]),
        ],
        &[out_bool(&[3])],
    )
    .unwrap();
    assert_eq!(bools(&got[0]), vec![true, false, false]);
}

#[test]
fn unsupported_operand_type_is_a_build_error() {
    // The CPU kernels have no float16 arithmetic; the model is valid NN IR, so this is
    // an unsupported-operation error naming the type, not a validation error.
    let half = |v: f32| -> Vec<u8> { f32_to_f16_bits(v).to_le_bytes().to_vec() };
    let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|&v| half(v)).collect();
    let args = vec![
        Arg::Input {
            ty: OperandType::TensorFloat16,
            dims: vec![2],
            data: data.clone(),
        },
        Arg::Input {
            ty: OperandType::TensorFloat16,
            dims: vec![2],
            data,
        },
        Arg::I32(0),
    ];
    let (model, _) = single_op(
        OperationType::Add,
        args,
        &[(OperandType::TensorFloat16, vec![2])],
    );
    let err = prepare(&model, 1).unwrap_err();
    assert!(
        matches!(err, nnc_runtime::RuntimeError::UnsupportedOperations(ref ops) if ops.len() == 1),
        "{err}"
    );
    assert!(err.to_string().contains("TENSOR_FLOAT16"), "{err}");
}

/// IEEE 754 binary16 bits of a float that is exactly representable.
fn f32_to_f16_bits(v: f32) -> u16 {
    let bits = v.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mantissa = ((bits >> 13) & 0x3ff) as u16;
    sign | ((exp as u16) << 10) | mantissa
}
