//! Reductions, ARGMAX/ARGMIN, TOPK_V2 and the normalizations (SOFTMAX, LOG_SOFTMAX,
//! L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION, INSTANCE_NORMALIZATION).

mod common;

use common::*;
use nnc_formats::nn::{OperandType, OperationType};

fn coords(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        c[d] = i % shape[d];
        i /= shape[d];
    }
    c
}

#[test]
fn reductions_match_reference() {
    let mut rng = Rng::new(31);
    let ops = [
        OperationType::Mean,
        OperationType::ReduceSum,
        OperationType::ReduceMax,
        OperationType::ReduceMin,
        OperationType::ReduceProd,
    ];
    for case in 0..200 {
        let op = ops[rng.range(0, 4)];
        let r = rng.range(1, 4);
        let shape: Vec<usize> = (0..r).map(|_| rng.range(1, 5)).collect();
        let naxes = rng.range(1, r + 1);
        // Possibly negative and repeated axes.
        let axes: Vec<i32> = (0..naxes)
            .map(|_| {
                let a = rng.range(0, r - 1) as i32;
                if rng.bool() { a - r as i32 } else { a }
            })
            .collect();
        let reduced: Vec<bool> = (0..r)
            .map(|d| axes.iter().any(|&a| (a.rem_euclid(r as i32)) as usize == d))
            .collect();
        let keep = rng.bool();
        let n: usize = shape.iter().product();
        let x = rng.f32s(n);
        let kept_shape: Vec<usize> = shape
            .iter()
            .zip(&reduced)
            .filter(|(_, r)| !**r)
            .map(|(d, _)| *d)
            .collect();
        let out_count: usize = kept_shape.iter().product();
        let mut groups: Vec<Vec<f64>> = vec![Vec::new(); out_count];
        for (i, &v) in x.iter().enumerate() {
            let c = coords(i, &shape);
            let mut o = 0;
            for d in 0..r {
                if !reduced[d] {
                    o = o * shape[d] + c[d];
                }
            }
            groups[o].push(f64::from(v));
        }
        let expected: Vec<Ref> = groups
            .iter()
            .map(|g| {
                let abs: f64 = g.iter().map(|v| v.abs()).sum();
                match op {
                    OperationType::Mean => Ref {
                        value: g.iter().sum::<f64>() / g.len() as f64,
                        abs_sum: abs / g.len() as f64,
                    },
                    OperationType::ReduceSum => Ref {
                        value: g.iter().sum(),
                        abs_sum: abs,
                    },
                    OperationType::ReduceMax => {
                        Ref::exact(g.iter().copied().fold(f64::NEG_INFINITY, f64::max))
                    }
                    OperationType::ReduceMin => {
                        Ref::exact(g.iter().copied().fold(f64::INFINITY, f64::min))
                    }
                    _ => Ref::exact(g.iter().product()),
                }
            })
            .collect();
        let out_shape: Vec<usize> = if keep {
            shape
                .iter()
                .zip(&reduced)
                .map(|(&d, &r)| if r { 1 } else { d })
                .collect()
        } else if kept_shape.is_empty() {
            vec![1]
        } else {
            kept_shape.clone()
        };
        let keep_arg = if op == OperationType::Mean {
            Arg::I32(i32::from(keep))
        } else {
            Arg::Bool(keep)
        };
        let args = vec![input_f32(&shape, &x), i32_vec(&axes), keep_arg];
        let got = run_op(op, args, &[out_f32(&out_shape)])
            .unwrap_or_else(|e| panic!("case {case} {op}: {e}"));
        assert_close(
            &f32s(&got[0]),
            &expected,
            &format!("case {case} {op} {shape:?} axes {axes:?} keep {keep}"),
        );
    }
}

#[test]
fn reduce_any_all() {
    let x = [true, false, false, false, true, true];
    let any = run_op(
        OperationType::ReduceAny,
        vec![input_bool(&[2, 3], &x), i32_vec(&[1]), Arg::Bool(false)],
        &[out_bool(&[2])],
    )
    .unwrap();
    assert_eq!(bools(&any[0]), vec![true, true]);
    let all = run_op(
        OperationType::ReduceAll,
        vec![input_bool(&[2, 3], &x), i32_vec(&[-1]), Arg::Bool(true)],
        &[out_bool(&[2, 1])],
    )
    .unwrap();
    assert_eq!(bools(&all[0]), vec![false, false]);
    let all0 = run_op(
        OperationType::ReduceAll,
        vec![input_bool(&[2, 3], &x), i32_vec(&[0]), Arg::Bool(false)],
        &[out_bool(&[3])],
    )
    .unwrap();
    assert_eq!(bools(&all0[0]), vec![false, false, false]);
}

#[test]
fn argmax_argmin_ties_pick_the_first() {
    // [2, 3, 2]: along axis 1.
    // Lanes along axis 1: (1, 5, 0), (5, 2, 3), (9, 9, 4), (4, 9, -1).
    let x = [
        1.0f32, 5.0, 5.0, 2.0, 0.0, 3.0, 9.0, 4.0, 9.0, 9.0, 4.0, -1.0,
    ];
    let got = run_op(
        OperationType::Argmax,
        vec![input_f32(&[2, 3, 2], &x), Arg::I32(1)],
        &[out_i32(&[2, 2])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![1, 0, 0, 1]);
    let got = run_op(
        OperationType::Argmin,
        vec![input_f32(&[2, 3, 2], &x), Arg::I32(-2)],
        &[out_i32(&[2, 2])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![2, 1, 2, 2]);
    let got = run_op(
        OperationType::Argmax,
        vec![input_i32(&[4], &[3, 7, 7, 1]), Arg::I32(0)],
        &[out_i32(&[1])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![1]);
    let got = run_op(
        OperationType::Argmin,
        vec![input_i32(&[4], &[3, 1, 1, 7]), Arg::I32(0)],
        &[out_i32(&[1])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![1]);
}

#[test]
fn topk_sorted_with_index_ties() {
    let x = [3.0f32, 1.0, 3.0, 2.0, -1.0, 0.0, 0.0, 5.0];
    let got = run_op(
        OperationType::TopkV2,
        vec![input_f32(&[2, 4], &x), Arg::I32(3)],
        &[out_f32(&[2, 3]), out_i32(&[2, 3])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![3.0, 3.0, 2.0, 5.0, 0.0, 0.0]);
    assert_eq!(i32s(&got[1]), vec![0, 2, 3, 3, 1, 2]);
    let got = run_op(
        OperationType::TopkV2,
        vec![input_i32(&[5], &[1, 9, 9, 4, 9]), Arg::I32(5)],
        &[out_i32(&[5]), out_i32(&[5])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![9, 9, 9, 4, 1]);
    assert_eq!(i32s(&got[1]), vec![1, 2, 4, 3, 0]);
}

/// (outer, axis, inner) lanes of a shape.
fn lanes(shape: &[usize], axis: usize) -> Vec<Vec<usize>> {
    let outer: usize = shape[..axis].iter().product();
    let mid = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out = Vec::new();
    for o in 0..outer {
        for i in 0..inner {
            out.push((0..mid).map(|j| (o * mid + j) * inner + i).collect());
        }
    }
    out
}

#[test]
fn softmax_family_matches_reference() {
    let mut rng = Rng::new(32);
    for case in 0..80 {
        let r = rng.range(1, 4);
        let shape: Vec<usize> = (0..r).map(|_| rng.range(1, 6)).collect();
        let axis = rng.range(0, r - 1);
        let axis_arg = if rng.bool() {
            axis as i32 - r as i32
        } else {
            axis as i32
        };
        let n: usize = shape.iter().product();
        let x: Vec<f32> = rng.f32s(n).iter().map(|v| v * 4.0).collect();
        let beta = [1.0f32, 0.5, 2.0][rng.range(0, 2)];
        let mut soft = vec![0f64; n];
        let mut logsoft = vec![0f64; n];
        let mut l2 = vec![0f64; n];
        let mut lrn = vec![0f64; n];
        let (radius, bias, alpha, lbeta) = (rng.range(0, 2), 1.5f32, 0.3f32, 0.75f32);
        for lane in lanes(&shape, axis) {
            let vals: Vec<f64> = lane.iter().map(|&i| f64::from(x[i])).collect();
            let max = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let b = f64::from(beta);
            let sum: f64 = vals.iter().map(|v| (b * (v - max)).exp()).sum();
            let norm = vals.iter().map(|v| v * v).sum::<f64>().sqrt();
            for (j, &i) in lane.iter().enumerate() {
                soft[i] = (b * (vals[j] - max)).exp() / sum;
                logsoft[i] = b * vals[j] - b * max - sum.ln();
                l2[i] = vals[j] / norm;
                let lo = j.saturating_sub(radius);
                let hi = (j + radius).min(vals.len() - 1);
                let sq: f64 = vals[lo..=hi].iter().map(|v| v * v).sum();
                lrn[i] = vals[j] / (f64::from(bias) + f64::from(alpha) * sq).powf(f64::from(lbeta));
            }
        }
        let context = format!("case {case} {shape:?} axis {axis_arg} beta {beta}");
        let mut args = vec![input_f32(&shape, &x), Arg::F32(beta)];
        let last = axis == r - 1;
        if !last || rng.bool() {
            args.push(Arg::I32(axis_arg));
        }
        let got = run_op(OperationType::Softmax, args, &[out_f32(&shape)]).unwrap();
        assert_close_values(&f32s(&got[0]), &soft, &format!("softmax {context}"));
        let got = run_op(
            OperationType::LogSoftmax,
            vec![input_f32(&shape, &x), Arg::F32(beta), Arg::I32(axis_arg)],
            &[out_f32(&shape)],
        )
        .unwrap();
        // log-sum-exp of up to 5 terms: a few ulps of the largest term.
        let refs: Vec<Ref> = logsoft
            .iter()
            .map(|&v| Ref {
                value: v,
                abs_sum: v.abs() + 8.0,
            })
            .collect();
        assert_close(&f32s(&got[0]), &refs, &format!("log_softmax {context}"));
        let mut args = vec![input_f32(&shape, &x)];
        if !last || rng.bool() {
            args.push(Arg::I32(axis_arg));
        }
        let got = run_op(OperationType::L2Normalization, args, &[out_f32(&shape)]).unwrap();
        assert_close_values(&f32s(&got[0]), &l2, &format!("l2 {context}"));
        let mut args = vec![
            input_f32(&shape, &x),
            Arg::I32(radius as i32),
            Arg::F32(bias),
            Arg::F32(alpha),
            Arg::F32(lbeta),
        ];
        if !last || rng.bool() {
            args.push(Arg::I32(axis_arg));
        }
        let got = run_op(
            OperationType::LocalResponseNormalization,
            args,
            &[out_f32(&shape)],
        )
        .unwrap();
        assert_close_values(&f32s(&got[0]), &lrn, &format!("lrn {context}"));
    }
}

#[test]
fn l2_normalization_of_zero_is_zero() {
    let got = run_op(
        OperationType::L2Normalization,
        vec![input_f32(&[2, 2], &[0.0, 0.0, 3.0, 4.0])],
        &[out_f32(&[2, 2])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![0.0, 0.0, 0.6, 0.8]);
}

#[test]
fn instance_normalization_nhwc_and_nchw() {
    let mut rng = Rng::new(33);
    for nchw in [false, true] {
        let (n, h, w, c) = (2, 3, 4, 5);
        let x = rng.f32s(n * h * w * c);
        let (gamma, beta, eps) = (1.5f32, -0.25f32, 1e-3f32);
        let mut expected = vec![0f64; x.len()];
        for b in 0..n {
            for ch in 0..c {
                let idx: Vec<usize> = (0..h * w).map(|p| (b * h * w + p) * c + ch).collect();
                let vals: Vec<f64> = idx.iter().map(|&i| f64::from(x[i])).collect();
                let mean = vals.iter().sum::<f64>() / vals.len() as f64;
                let var = vals.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / vals.len() as f64;
                for (&i, v) in idx.iter().zip(&vals) {
                    expected[i] = f64::from(gamma) * (v - mean) / (var + f64::from(eps)).sqrt()
                        + f64::from(beta);
                }
            }
        }
        let (input, dims) = if nchw {
            (nhwc_to_nchw(&x, [n, h, w, c]), vec![n, c, h, w])
        } else {
            (x.clone(), vec![n, h, w, c])
        };
        let args = vec![
            input_f32(&dims, &input),
            Arg::F32(gamma),
            Arg::F32(beta),
            Arg::F32(eps),
            Arg::Bool(nchw),
        ];
        let got = run_op(
            OperationType::InstanceNormalization,
            args,
            &[out_f32(&dims)],
        )
        .unwrap();
        let mut got = f32s(&got[0]);
        if nchw {
            got = nchw_to_nhwc(&got, [n, c, h, w]);
        }
        assert_close_values(&got, &expected, &format!("instance norm nchw {nchw}"));
    }
}

#[test]
fn mean_keep_dims_int32_flag() {
    let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let got = run_op(
        OperationType::Mean,
        vec![input_f32(&[1, 2, 2, 3], &x), i32_vec(&[1, 2]), Arg::I32(1)],
        &[out_f32(&[1, 1, 1, 3])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![4.5, 5.5, 6.5]);
    assert_eq!(got[0].shape, vec![1, 1, 1, 3]);
    let _ = OperandType::TensorFloat32;
}

/// SOFTMAX and LAYER_NORMALIZATION over enough lanes to split them over two threads give
/// the bits one thread gives (each lane is computed by one thread, in the same order),
/// and the softmax rows sum to 1.
#[test]
fn lanes_split_over_threads_give_the_same_bits() {
    let mut rng = Rng::new(31);
    let (rows, width) = (67, 1031);
    let x = rng.f32s(rows * width);
    let gamma = rng.f32s(width);
    let beta = rng.f32s(width);
    let cases = [
        (
            OperationType::Softmax,
            vec![input_f32(&[rows, width], &x), Arg::F32(1.0)],
        ),
        (
            OperationType::LayerNormalization,
            vec![
                input_f32(&[rows, width], &x),
                const_f32(&[width], &gamma),
                const_f32(&[width], &beta),
                Arg::F32(1e-5),
                Arg::I32(-1),
            ],
        ),
    ];
    for (op, args) in cases {
        let (model, feeds) = single_op(op, args, &[out_f32(&[rows, width])]);
        let one = f32s(&prepare(&model, 1).unwrap().execute_host(&feeds).unwrap()[0]);
        let two = f32s(&prepare(&model, 2).unwrap().execute_host(&feeds).unwrap()[0]);
        assert_eq!(one.len(), rows * width);
        assert!(
            one.iter()
                .zip(&two)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{op}"
        );
        if op == OperationType::Softmax {
            for row in one.chunks_exact(width) {
                let sum: f64 = row.iter().map(|&v| f64::from(v)).sum();
                assert!((sum - 1.0).abs() < 1e-5, "{sum}");
            }
        }
    }
}
