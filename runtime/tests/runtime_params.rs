//! Operations whose parameter tensors are computed at run time (model inputs here):
//! reduction axes, STRIDED_SLICE begin / end / strides, PAD / MIRROR_PAD paddings in
//! NNAPI's [rank, 2] layout, SQUEEZE dims, RESHAPE shape and TILE multiples. Expected
//! values are computed independently (naive loops over coordinates, float64 sums).

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
fn reductions_read_run_time_axes() {
    let mut rng = Rng::new(7);
    for case in 0..60 {
        let r = rng.range(1, 4);
        let shape: Vec<usize> = (0..r).map(|_| rng.range(1, 4)).collect();
        // Distinct axes, possibly negative.
        let mut axes: Vec<i32> = Vec::new();
        for d in 0..r {
            if rng.bool() || (d == r - 1 && axes.is_empty()) {
                axes.push(if rng.bool() {
                    d as i32 - r as i32
                } else {
                    d as i32
                });
            }
        }
        let reduced: Vec<bool> = (0..r)
            .map(|d| axes.iter().any(|&a| a.rem_euclid(r as i32) as usize == d))
            .collect();
        let keep = rng.bool();
        let n: usize = shape.iter().product();
        let x = rng.f32s(n);
        let kept: Vec<usize> = (0..r).filter(|&d| !reduced[d]).map(|d| shape[d]).collect();
        let out_count: usize = kept.iter().product();
        let mut sums = vec![0f64; out_count];
        let mut maxes = vec![f64::NEG_INFINITY; out_count];
        for (i, &v) in x.iter().enumerate() {
            let c = coords(i, &shape);
            let mut o = 0;
            for d in 0..r {
                if !reduced[d] {
                    o = o * shape[d] + c[d];
                }
            }
            sums[o] += f64::from(v);
            maxes[o] = maxes[o].max(f64::from(v));
        }
        let mut out_dims: Vec<usize> = (0..r)
            .filter_map(|d| {
                if !reduced[d] {
                    Some(shape[d])
                } else if keep {
                    Some(1)
                } else {
                    None
                }
            })
            .collect();
        if out_dims.is_empty() {
            out_dims.push(1);
        }
        for op in [OperationType::ReduceSum, OperationType::ReduceMax] {
            let out = run_op(
                op,
                vec![
                    input_f32(&shape, &x),
                    input_i32(&[axes.len()], &axes),
                    Arg::Bool(keep),
                ],
                &[(OperandType::TensorFloat32, vec![0; out_dims.len()])],
            )
            .unwrap_or_else(|e| panic!("case {case} {op:?}: {e}"));
            assert_eq!(out[0].shape, out_dims, "case {case} {op:?} shape");
            let expected = if op == OperationType::ReduceSum {
                &sums
            } else {
                &maxes
            };
            assert_close_values(&f32s(&out[0]), expected, &format!("case {case} {op:?}"));
        }
    }
}

#[test]
fn strided_slice_reads_run_time_begin_end_strides() {
    // x[4, 5] = 10 * row + column; rows 3, 1 (stride -2, end 0 exclusive), columns 1, 3.
    let x: Vec<f32> = (0..20).map(|i| (10 * (i / 5) + i % 5) as f32).collect();
    let out = run_op(
        OperationType::StridedSlice,
        vec![
            input_f32(&[4, 5], &x),
            input_i32(&[2], &[3, 1]),
            input_i32(&[2], &[0, 5]),
            input_i32(&[2], &[-2, 2]),
            Arg::I32(0),
            Arg::I32(0),
            Arg::I32(0),
        ],
        &[(OperandType::TensorFloat32, vec![0, 0])],
    )
    .expect("strided slice");
    assert_eq!(out[0].shape, vec![2, 2]);
    assert_eq!(f32s(&out[0]), vec![31.0, 33.0, 11.0, 13.0]);
    // An end of -dim-1 with a negative stride reaches index 0.
    let out = run_op(
        OperationType::StridedSlice,
        vec![
            input_f32(&[4, 5], &x),
            input_i32(&[2], &[2, 0]),
            input_i32(&[2], &[-5, 1]),
            input_i32(&[2], &[-1, 1]),
            Arg::I32(0),
            Arg::I32(0),
            Arg::I32(0),
        ],
        &[(OperandType::TensorFloat32, vec![0, 0])],
    )
    .expect("strided slice to the front");
    assert_eq!(out[0].shape, vec![3, 1]);
    assert_eq!(f32s(&out[0]), vec![20.0, 10.0, 0.0]);
}

#[test]
fn pads_read_run_time_paddings_in_rank_by_two_layout() {
    let x: Vec<f32> = (1..=6).map(|v| v as f32).collect(); // [2, 3]
    let out = run_op(
        OperationType::Pad,
        vec![input_f32(&[2, 3], &x), input_i32(&[2, 2], &[1, 0, 0, 2])],
        &[(OperandType::TensorFloat32, vec![0, 0])],
    )
    .expect("pad");
    assert_eq!(out[0].shape, vec![3, 5]);
    #[rustfmt::skip]
    let expected = vec![
        0.0, 0.0, 0.0, 0.0, 0.0,
        1.0, 2.0, 3.0, 0.0, 0.0,
        4.0, 5.0, 6.0, 0.0, 0.0,
    ];
    assert_eq!(f32s(&out[0]), expected);
    let out = run_op(
        OperationType::MirrorPad,
        vec![
            input_f32(&[2, 3], &x),
            input_i32(&[2, 2], &[0, 0, 2, 1]),
            Arg::I32(0),
        ],
        &[(OperandType::TensorFloat32, vec![0, 0])],
    )
    .expect("mirror pad");
    assert_eq!(out[0].shape, vec![2, 6]);
    assert_eq!(
        f32s(&out[0]),
        vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 6.0, 5.0, 4.0, 5.0, 6.0, 5.0]
    );
    // Negative paddings are rejected at run time, not applied.
    let err = run_op(
        OperationType::Pad,
        vec![input_f32(&[2, 3], &x), input_i32(&[2, 2], &[-1, 0, 0, 0])],
        &[(OperandType::TensorFloat32, vec![0, 0])],
    );
    assert!(err.is_err());
}

#[test]
fn squeeze_reshape_and_tile_read_run_time_parameters() {
    let x: Vec<f32> = (0..6).map(|v| v as f32).collect();
    let out = run_op(
        OperationType::Squeeze,
        vec![input_f32(&[1, 2, 1, 3], &x), input_i32(&[2], &[-2, 0])],
        &[(OperandType::TensorFloat32, vec![0, 0])],
    )
    .expect("squeeze");
    assert_eq!(out[0].shape, vec![2, 3]);
    assert_eq!(f32s(&out[0]), x);
    // Squeezing a dimension that is not 1 fails.
    assert!(
        run_op(
            OperationType::Squeeze,
            vec![input_f32(&[1, 2, 1, 3], &x), input_i32(&[1], &[1])],
            &[(OperandType::TensorFloat32, vec![0, 0, 0])],
        )
        .is_err()
    );
    let out = run_op(
        OperationType::Reshape,
        vec![input_f32(&[2, 3], &x), input_i32(&[3], &[3, -1, 1])],
        &[(OperandType::TensorFloat32, vec![0, 0, 0])],
    )
    .expect("reshape");
    assert_eq!(out[0].shape, vec![3, 2, 1]);
    let out = run_op(
        OperationType::Tile,
        vec![input_f32(&[2, 3], &x), input_i32(&[2], &[2, 1])],
        &[(OperandType::TensorFloat32, vec![0, 0])],
    )
    .expect("tile");
    assert_eq!(out[0].shape, vec![4, 3]);
    let mut expected = x.clone();
    expected.extend_from_slice(&x);
    assert_eq!(f32s(&out[0]), expected);
}
