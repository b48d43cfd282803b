//! FULLY_CONNECTED and BATCH_MATMUL against float64 references.

mod common;

use common::*;
use nnc_formats::nn::{OperandType, OperationType};

#[test]
fn fully_connected_matches_reference() {
    let mut rng = Rng::new(11);
    for case in 0..150 {
        let batch = rng.range(1, 5);
        let k = [1, 3, 7, 16, 33, 130][rng.range(0, 5)];
        let units = rng.range(1, 12);
        let act = rng.range(0, 3) as i32;
        let with_bias = rng.bool();
        let weights_const = rng.range(0, 3) != 0;
        // The input may be rank > 2: it is flattened to [elements / K, K].
        let in_dims = if rng.bool() {
            vec![batch, k]
        } else {
            vec![batch, 1, k]
        };
        let x = rng.f32s(batch * k);
        let w = rng.f32s(units * k);
        let bias = rng.f32s(units);
        let mut expected = Vec::new();
        for b in 0..batch {
            for u in 0..units {
                let mut acc = if with_bias { f64::from(bias[u]) } else { 0.0 };
                let mut abs = acc.abs();
                for kk in 0..k {
                    let t = f64::from(x[b * k + kk]) * f64::from(w[u * k + kk]);
                    acc += t;
                    abs += t.abs();
                }
                expected.push(Ref {
                    value: activation(act, acc),
                    abs_sum: abs,
                });
            }
        }
        let bias_arg = if with_bias {
            f32_arg(weights_const, &[units], &bias)
        } else {
            Arg::NoValue(OperandType::TensorFloat32)
        };
        let args = vec![
            input_f32(&in_dims, &x),
            f32_arg(weights_const, &[units, k], &w),
            bias_arg,
            Arg::I32(act),
        ];
        let out = run_op(
            OperationType::FullyConnected,
            args,
            &[out_f32(&[batch, units])],
        )
        .unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_close(
            &f32s(&out[0]),
            &expected,
            &format!("case {case}: batch {batch} k {k} units {units} bias {with_bias} act {act}"),
        );
    }
}

#[test]
fn fully_connected_matrix_vector_size() {
    let mut rng = Rng::new(12);
    let (k, units) = (1280, 100);
    let x = rng.f32s(k);
    let w = rng.f32s(units * k);
    let bias = rng.f32s(units);
    let expected: Vec<Ref> = (0..units)
        .map(|u| {
            let terms: Vec<f64> = (0..k)
                .map(|i| f64::from(x[i]) * f64::from(w[u * k + i]))
                .collect();
            Ref {
                value: terms.iter().sum::<f64>() + f64::from(bias[u]),
                abs_sum: terms.iter().map(|t| t.abs()).sum::<f64>() + f64::from(bias[u]).abs(),
            }
        })
        .collect();
    let args = vec![
        input_f32(&[1, k], &x),
        const_f32(&[units, k], &w),
        const_f32(&[units], &bias),
        Arg::I32(0),
    ];
    let out = run_op(OperationType::FullyConnected, args, &[out_f32(&[1, units])]).unwrap();
    assert_close(&f32s(&out[0]), &expected, "fc 1280");
}

#[test]
fn batch_matmul_matches_reference() {
    let mut rng = Rng::new(13);
    for case in 0..120 {
        let rank = rng.range(2, 4);
        let batch: Vec<usize> = (0..rank - 2).map(|_| rng.range(1, 3)).collect();
        let (m, k, n) = (rng.range(1, 6), rng.range(1, 9), rng.range(1, 6));
        let (adj_x, adj_y) = (rng.bool(), rng.bool());
        let bcount: usize = batch.iter().product();
        let a = rng.f32s(bcount * m * k);
        let b = rng.f32s(bcount * k * n);
        let mut a_dims = batch.clone();
        a_dims.extend(if adj_x { [k, m] } else { [m, k] });
        let mut b_dims = batch.clone();
        b_dims.extend(if adj_y { [n, k] } else { [k, n] });
        let mut out_dims = batch.clone();
        out_dims.extend([m, n]);
        let mut expected = Vec::new();
        for bi in 0..bcount {
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0f64;
                    let mut abs = 0f64;
                    for kk in 0..k {
                        let av = if adj_x {
                            a[bi * m * k + kk * m + i]
                        } else {
                            a[bi * m * k + i * k + kk]
                        };
                        let bv = if adj_y {
                            b[bi * k * n + j * k + kk]
                        } else {
                            b[bi * k * n + kk * n + j]
                        };
                        let t = f64::from(av) * f64::from(bv);
                        acc += t;
                        abs += t.abs();
                    }
                    expected.push(Ref {
                        value: acc,
                        abs_sum: abs,
                    });
                }
            }
        }
        let args = vec![
            input_f32(&a_dims, &a),
            f32_arg(rng.bool(), &b_dims, &b),
            Arg::Bool(adj_x),
            Arg::Bool(adj_y),
        ];
        let out = run_op(OperationType::BatchMatmul, args, &[out_f32(&out_dims)])
            .unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_close(
            &f32s(&out[0]),
            &expected,
            &format!("case {case}: {a_dims:?} x {b_dims:?} adj {adj_x} {adj_y}"),
        );
    }
}
