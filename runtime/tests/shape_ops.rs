//! Data movement, resize, CAST, FILL and RANK, with hand-computed expectations.

mod common;

use common::*;
use nnc_formats::nn::{OperandType, OperationType};

fn iota(n: usize) -> Vec<f32> {
    (0..n).map(|v| v as f32).collect()
}

#[test]
fn reshape_squeeze_expand_dims() {
    let x = iota(6);
    let got = run_op(
        OperationType::Reshape,
        vec![input_f32(&[2, 3], &x), i32_vec(&[-1, 2])],
        &[out_f32(&[3, 2])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), x);
    assert_eq!(got[0].shape, vec![3, 2]);
    let got = run_op(
        OperationType::Squeeze,
        vec![input_f32(&[1, 6, 1], &x), i32_vec(&[0])],
        &[out_f32(&[6, 1])],
    )
    .unwrap();
    assert_eq!(got[0].shape, vec![6, 1]);
    let got = run_op(
        OperationType::Squeeze,
        vec![
            input_f32(&[1, 6, 1], &x),
            Arg::NoValue(OperandType::TensorInt32),
        ],
        &[out_f32(&[6])],
    )
    .unwrap();
    assert_eq!(got[0].shape, vec![6]);
    let got = run_op(
        OperationType::ExpandDims,
        vec![input_f32(&[2, 3], &x), Arg::I32(-1)],
        &[out_f32(&[2, 3, 1])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), x);
}

/// Reference transpose by index arithmetic.
fn transpose_ref(x: &[f32], shape: &[usize], perm: &[usize]) -> Vec<f32> {
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let n = x.len();
    let mut out = vec![0.0; n];
    for (i, v) in out.iter_mut().enumerate() {
        let mut rem = i;
        let mut oc = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            oc[d] = rem % out_shape[d];
            rem /= out_shape[d];
        }
        let mut ic = vec![0; shape.len()];
        for d in 0..shape.len() {
            ic[perm[d]] = oc[d];
        }
        let mut src = 0;
        for d in 0..shape.len() {
            src = src * shape[d] + ic[d];
        }
        *v = x[src];
    }
    out
}

#[test]
fn transpose_general_and_fast_paths() {
    let x = iota(24);
    let got = run_op(
        OperationType::Transpose,
        vec![input_f32(&[2, 3, 4], &x), i32_vec(&[2, 0, 1])],
        &[out_f32(&[4, 2, 3])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), transpose_ref(&x, &[2, 3, 4], &[2, 0, 1]));
    // Hand check of one element: out[1][0][2] = x[0][2][1] = 9.
    assert_eq!(f32s(&got[0])[6 + 2], 9.0);
    // Default permutation reverses the dimensions.
    let got = run_op(
        OperationType::Transpose,
        vec![
            input_f32(&[2, 3, 4], &x),
            Arg::NoValue(OperandType::TensorInt32),
        ],
        &[out_f32(&[4, 3, 2])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), transpose_ref(&x, &[2, 3, 4], &[2, 1, 0]));
    // 4-D layout permutations and random rank-6 permutations.
    let mut rng = Rng::new(41);
    let y = rng.f32s(2 * 3 * 4 * 5);
    for perm in [[0, 2, 3, 1], [0, 3, 1, 2], [3, 2, 1, 0]] {
        let out: Vec<usize> = perm.iter().map(|&p| [2, 3, 4, 5][p]).collect();
        let got = run_op(
            OperationType::Transpose,
            vec![
                input_f32(&[2, 3, 4, 5], &y),
                i32_vec(&perm.map(|p| p as i32)),
            ],
            &[out_f32(&out)],
        )
        .unwrap();
        assert_eq!(
            f32s(&got[0]),
            transpose_ref(&y, &[2, 3, 4, 5], &perm),
            "perm {perm:?}"
        );
    }
    for _ in 0..20 {
        let shape: Vec<usize> = (0..6).map(|_| rng.range(1, 3)).collect();
        let mut perm: Vec<usize> = (0..6).collect();
        for i in (1..6).rev() {
            perm.swap(i, rng.range(0, i));
        }
        let n: usize = shape.iter().product();
        let v = rng.i32s(n, -100, 100);
        let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let got = run_op(
            OperationType::Transpose,
            vec![
                input_i32(&shape, &v),
                i32_vec(&perm.iter().map(|&p| p as i32).collect::<Vec<_>>()),
            ],
            &[out_i32(&out)],
        )
        .unwrap();
        let vf: Vec<f32> = v.iter().map(|&a| a as f32).collect();
        let expected: Vec<i32> = transpose_ref(&vf, &shape, &perm)
            .iter()
            .map(|&a| a as i32)
            .collect();
        assert_eq!(i32s(&got[0]), expected, "{shape:?} {perm:?}");
    }
}

#[test]
fn concatenation_and_split() {
    let a = [1.0, 2.0, 3.0, 4.0];
    let b = [5.0, 6.0];
    let got = run_op(
        OperationType::Concatenation,
        vec![input_f32(&[2, 2], &a), const_f32(&[2, 1], &b), Arg::I32(-1)],
        &[out_f32(&[2, 3])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![1.0, 2.0, 5.0, 3.0, 4.0, 6.0]);
    let got = run_op(
        OperationType::Concatenation,
        vec![
            input_i32(&[1, 2], &[1, 2]),
            input_i32(&[2, 2], &[3, 4, 5, 6]),
            Arg::I32(0),
        ],
        &[out_i32(&[3, 2])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![1, 2, 3, 4, 5, 6]);
    let got = run_op(
        OperationType::Concatenation,
        vec![
            input_bool(&[1], &[true]),
            input_bool(&[2], &[false, true]),
            Arg::I32(0),
        ],
        &[out_bool(&[3])],
    )
    .unwrap();
    assert_eq!(bools(&got[0]), vec![true, false, true]);
    let x = iota(12);
    let got = run_op(
        OperationType::Split,
        vec![input_f32(&[2, 6], &x), Arg::I32(1), Arg::I32(3)],
        &[out_f32(&[2, 2]), out_f32(&[2, 2]), out_f32(&[2, 2])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![0.0, 1.0, 6.0, 7.0]);
    assert_eq!(f32s(&got[1]), vec![2.0, 3.0, 8.0, 9.0]);
    assert_eq!(f32s(&got[2]), vec![4.0, 5.0, 10.0, 11.0]);
}

#[test]
fn slice_constant_and_runtime_parameters() {
    let x = iota(12); // [3, 4]
    let got = run_op(
        OperationType::Slice,
        vec![input_f32(&[3, 4], &x), i32_vec(&[1, 1]), i32_vec(&[-1, 2])],
        &[out_f32(&[2, 2])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![5.0, 6.0, 9.0, 10.0]);
    // begin and size fed at run time: the output shape is known only then.
    let got = run_op(
        OperationType::Slice,
        vec![
            input_f32(&[3, 4], &x),
            input_i32(&[2], &[0, 2]),
            input_i32(&[2], &[2, -1]),
        ],
        &[out_f32(&[0, 0])],
    )
    .unwrap();
    assert_eq!(got[0].shape, vec![2, 2]);
    assert_eq!(f32s(&got[0]), vec![2.0, 3.0, 6.0, 7.0]);
    // A run-time slice leaving the input is an error, not a panic.
    let err = run_op(
        OperationType::Slice,
        vec![
            input_f32(&[3, 4], &x),
            input_i32(&[2], &[0, 3]),
            input_i32(&[2], &[1, 5]),
        ],
        &[out_f32(&[0, 0])],
    )
    .unwrap_err();
    assert!(err.to_string().contains("operation 0 (SLICE"), "{err}");
}

#[test]
fn strided_slice_masks_and_negative_strides() {
    let x = iota(12); // [3, 4]
    // Rows 0..3 step 2, columns reversed from 3 down to 1.
    let args = vec![
        input_f32(&[3, 4], &x),
        i32_vec(&[0, -1]),
        i32_vec(&[3, 0]),
        i32_vec(&[2, -1]),
        Arg::I32(0),
        Arg::I32(0),
        Arg::I32(0),
    ];
    let got = run_op(OperationType::StridedSlice, args, &[out_f32(&[2, 3])]).unwrap();
    assert_eq!(f32s(&got[0]), vec![3.0, 2.0, 1.0, 11.0, 10.0, 9.0]);
    // begin_mask on axis 0, end_mask on axis 1, shrink axis 0 -> row 0 only, rank 1.
    let args = vec![
        input_f32(&[3, 4], &x),
        i32_vec(&[2, 1]),
        i32_vec(&[3, 2]),
        i32_vec(&[1, 1]),
        Arg::I32(0b01),
        Arg::I32(0b10),
        Arg::I32(0b01),
    ];
    let got = run_op(OperationType::StridedSlice, args, &[out_f32(&[3])]).unwrap();
    assert_eq!(f32s(&got[0]), vec![1.0, 2.0, 3.0]);
    assert_eq!(got[0].shape, vec![3]);
}

#[test]
fn pads() {
    let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // [2, 3]
    let got = run_op(
        OperationType::Pad,
        vec![input_f32(&[2, 3], &x), const_i32(&[2, 2], &[1, 0, 0, 1])],
        &[out_f32(&[3, 4])],
    )
    .unwrap();
    assert_eq!(
        f32s(&got[0]),
        vec![0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 4.0, 5.0, 6.0, 0.0]
    );
    let got = run_op(
        OperationType::PadV2,
        vec![
            input_f32(&[2, 3], &x),
            const_i32(&[2, 2], &[0, 0, 2, 0]),
            Arg::F32(-1.5),
        ],
        &[out_f32(&[2, 5])],
    )
    .unwrap();
    assert_eq!(
        f32s(&got[0]),
        vec![-1.5, -1.5, 1.0, 2.0, 3.0, -1.5, -1.5, 4.0, 5.0, 6.0]
    );
    let got = run_op(
        OperationType::PadV2,
        vec![
            input_i32(&[3], &[1, 2, 3]),
            const_i32(&[1, 2], &[1, 1]),
            Arg::I32(9),
        ],
        &[out_i32(&[5])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![9, 1, 2, 3, 9]);
    // REFLECT excludes the edge, SYMMETRIC repeats it.
    let row = [1.0, 2.0, 3.0];
    let got = run_op(
        OperationType::MirrorPad,
        vec![
            input_f32(&[3], &row),
            const_i32(&[1, 2], &[2, 2]),
            Arg::I32(0),
        ],
        &[out_f32(&[7])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]);
    let got = run_op(
        OperationType::MirrorPad,
        vec![
            input_f32(&[3], &row),
            const_i32(&[1, 2], &[2, 3]),
            Arg::I32(1),
        ],
        &[out_f32(&[8])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![2.0, 1.0, 1.0, 2.0, 3.0, 3.0, 2.0, 1.0]);
    let got = run_op(
        OperationType::MirrorPad,
        vec![
            input_f32(&[2, 3], &x),
            const_i32(&[2, 2], &[1, 0, 0, 1]),
            Arg::I32(0),
        ],
        &[out_f32(&[3, 4])],
    )
    .unwrap();
    assert_eq!(
        f32s(&got[0]),
        vec![4.0, 5.0, 6.0, 5.0, 1.0, 2.0, 3.0, 2.0, 4.0, 5.0, 6.0, 5.0]
    );
}

#[test]
fn gather_and_its_range_check() {
    let x = iota(12); // [3, 4]
    let got = run_op(
        OperationType::Gather,
        vec![
            input_f32(&[3, 4], &x),
            Arg::I32(1),
            const_i32(&[2, 2], &[3, 0, 1, 1]),
        ],
        &[out_f32(&[3, 2, 2])],
    )
    .unwrap();
    assert_eq!(
        f32s(&got[0]),
        vec![3.0, 0.0, 1.0, 1.0, 7.0, 4.0, 5.0, 5.0, 11.0, 8.0, 9.0, 9.0]
    );
    let got = run_op(
        OperationType::Gather,
        vec![
            input_i32(&[3], &[7, 8, 9]),
            Arg::I32(0),
            input_i32(&[2], &[2, 0]),
        ],
        &[out_i32(&[2])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![9, 7]);
    let err = run_op(
        OperationType::Gather,
        vec![
            input_i32(&[3], &[7, 8, 9]),
            Arg::I32(0),
            input_i32(&[2], &[3, 0]),
        ],
        &[out_i32(&[2])],
    )
    .unwrap_err();
    assert!(err.to_string().contains("index 3"), "{err}");
    let err = run_op(
        OperationType::Gather,
        vec![
            input_i32(&[3], &[7, 8, 9]),
            Arg::I32(0),
            input_i32(&[1], &[-1]),
        ],
        &[out_i32(&[1])],
    )
    .unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
}

#[test]
fn tile_pack_reverse() {
    let got = run_op(
        OperationType::Tile,
        vec![input_f32(&[2, 2], &[1.0, 2.0, 3.0, 4.0]), i32_vec(&[2, 3])],
        &[out_f32(&[4, 6])],
    )
    .unwrap();
    assert_eq!(
        f32s(&got[0]),
        vec![
            1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0, 3.0, 4.0, 1.0, 2.0, 1.0, 2.0, 1.0,
            2.0, 3.0, 4.0, 3.0, 4.0, 3.0, 4.0
        ]
    );
    let got = run_op(
        OperationType::Pack,
        vec![
            Arg::I32(1),
            input_f32(&[2], &[1.0, 2.0]),
            input_f32(&[2], &[3.0, 4.0]),
            input_f32(&[2], &[5.0, 6.0]),
        ],
        &[out_f32(&[2, 3])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
    let got = run_op(
        OperationType::Pack,
        vec![
            Arg::I32(0),
            input_i32(&[2], &[1, 2]),
            input_i32(&[2], &[3, 4]),
        ],
        &[out_i32(&[2, 2])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![1, 2, 3, 4]);
    let got = run_op(
        OperationType::Reverse,
        vec![input_f32(&[2, 3], &iota(6)), i32_vec(&[1])],
        &[out_f32(&[2, 3])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![2.0, 1.0, 0.0, 5.0, 4.0, 3.0]);
    let got = run_op(
        OperationType::Reverse,
        vec![input_f32(&[2, 3], &iota(6)), i32_vec(&[-2])],
        &[out_f32(&[2, 3])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![3.0, 4.0, 5.0, 0.0, 1.0, 2.0]);
}

#[test]
fn depth_to_space_and_back() {
    // [1, 1, 1, 8] with block 2 -> [1, 2, 2, 2]:
    // out[0, i, j, c] = in[0, 0, 0, (i * 2 + j) * 2 + c].
    let x = iota(8);
    let got = run_op(
        OperationType::DepthToSpace,
        vec![input_f32(&[1, 1, 1, 8], &x), Arg::I32(2)],
        &[out_f32(&[1, 2, 2, 2])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), x);
    // [1, 1, 2, 4] block 2 -> [1, 2, 4, 1].
    let x = iota(8);
    let got = run_op(
        OperationType::DepthToSpace,
        vec![input_f32(&[1, 1, 2, 4], &x), Arg::I32(2)],
        &[out_f32(&[1, 2, 4, 1])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![0.0, 1.0, 4.0, 5.0, 2.0, 3.0, 6.0, 7.0]);
    let back = run_op(
        OperationType::SpaceToDepth,
        vec![input_f32(&[1, 2, 4, 1], &f32s(&got[0])), Arg::I32(2)],
        &[out_f32(&[1, 1, 2, 4])],
    )
    .unwrap();
    assert_eq!(f32s(&back[0]), x);
    // NCHW gives the same logical result.
    let mut rng = Rng::new(42);
    let y = rng.f32s(2 * 2 * 3 * 8);
    let nhwc = run_op(
        OperationType::DepthToSpace,
        vec![input_f32(&[2, 2, 3, 8], &y), Arg::I32(2), Arg::Bool(false)],
        &[out_f32(&[2, 4, 6, 2])],
    )
    .unwrap();
    let nchw_in = nhwc_to_nchw(&y, [2, 2, 3, 8]);
    let nchw = run_op(
        OperationType::DepthToSpace,
        vec![
            input_f32(&[2, 8, 2, 3], &nchw_in),
            Arg::I32(2),
            Arg::Bool(true),
        ],
        &[out_f32(&[2, 2, 4, 6])],
    )
    .unwrap();
    assert_eq!(nchw_to_nhwc(&f32s(&nchw[0]), [2, 2, 4, 6]), f32s(&nhwc[0]));
    let s2d = run_op(
        OperationType::SpaceToDepth,
        vec![
            input_f32(&[2, 2, 4, 6], &f32s(&nchw[0])),
            Arg::I32(2),
            Arg::Bool(true),
        ],
        &[out_f32(&[2, 8, 2, 3])],
    )
    .unwrap();
    assert_eq!(f32s(&s2d[0]), nchw_in);
}

#[test]
fn channel_shuffle() {
    // 6 channels, 2 groups: [0 1 2 | 3 4 5] -> [0 3 1 4 2 5].
    let got = run_op(
        OperationType::ChannelShuffle,
        vec![input_f32(&[1, 6], &iota(6)), Arg::I32(2), Arg::I32(-1)],
        &[out_f32(&[1, 6])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
}

#[test]
fn resize_bilinear_conventions() {
    let x = [0.0, 1.0, 2.0, 3.0]; // [1, 2, 2, 1]
    let run = |args: Vec<Arg>, out: [usize; 4]| {
        f32s(&run_op(OperationType::ResizeBilinear, args, &[out_f32(&out)]).unwrap()[0])
    };
    // Default: src = dst * in / out.
    let got = run(
        vec![input_f32(&[1, 2, 2, 1], &x), Arg::I32(4), Arg::I32(4)],
        [1, 4, 4, 1],
    );
    assert_eq!(
        got,
        vec![
            0.0, 0.5, 1.0, 1.0, 1.0, 1.5, 2.0, 2.0, 2.0, 2.5, 3.0, 3.0, 2.0, 2.5, 3.0, 3.0
        ]
    );
    // Scale inputs give the same output size and values.
    let scaled = run(
        vec![input_f32(&[1, 2, 2, 1], &x), Arg::F32(2.0), Arg::F32(2.0)],
        [1, 4, 4, 1],
    );
    assert_eq!(scaled, got);
    // align_corners: scale (in - 1) / (out - 1).
    let got = run(
        vec![
            input_f32(&[1, 2, 2, 1], &x),
            Arg::I32(3),
            Arg::I32(3),
            Arg::Bool(false),
            Arg::Bool(true),
            Arg::Bool(false),
        ],
        [1, 3, 3, 1],
    );
    assert_eq!(got, vec![0.0, 0.5, 1.0, 1.0, 1.5, 2.0, 2.0, 2.5, 3.0]);
    // half_pixel_centers: src = (dst + 0.5) * scale - 0.5, clamped.
    let got = run(
        vec![
            input_f32(&[1, 2, 2, 1], &x),
            Arg::I32(4),
            Arg::I32(4),
            Arg::Bool(false),
            Arg::Bool(false),
            Arg::Bool(true),
        ],
        [1, 4, 4, 1],
    );
    let xi = [0.0, 0.25, 0.75, 1.0];
    let expected: Vec<f32> = (0..16).map(|i| xi[i % 4] + 2.0 * xi[i / 4]).collect();
    assert_eq!(got, expected);
    // NCHW with two channels.
    let two: Vec<f32> = [0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0].to_vec(); // [1, 2(c), 2, 2]
    let got = run(
        vec![
            input_f32(&[1, 2, 2, 2], &two),
            Arg::I32(4),
            Arg::I32(4),
            Arg::Bool(true),
        ],
        [1, 2, 4, 4],
    );
    let first = [
        0.0, 0.5, 1.0, 1.0, 1.0, 1.5, 2.0, 2.0, 2.0, 2.5, 3.0, 3.0, 2.0, 2.5, 3.0, 3.0,
    ];
    assert_eq!(&got[..16], &first);
    assert_eq!(
        got[16..].to_vec(),
        first.iter().map(|v| v + 10.0).collect::<Vec<_>>()
    );
}

#[test]
fn resize_nearest_conventions() {
    let row3 = [10.0, 20.0, 30.0]; // [1, 1, 3, 1]
    let run = |args: Vec<Arg>, out: [usize; 4]| {
        f32s(&run_op(OperationType::ResizeNearestNeighbor, args, &[out_f32(&out)]).unwrap()[0])
    };
    let base = |w: i32| {
        vec![
            input_f32(&[1, 1, 3, 1], &row3),
            Arg::I32(w),
            Arg::I32(1),
            Arg::Bool(false),
        ]
    };
    // floor(dst * 1.5): 0, 1.
    assert_eq!(run(base(2), [1, 1, 2, 1]), vec![10.0, 20.0]);
    // align_corners: round(dst * 2): 0, 2.
    let mut args = base(2);
    args.extend([Arg::Bool(true), Arg::Bool(false)]);
    assert_eq!(run(args, [1, 1, 2, 1]), vec![10.0, 30.0]);
    // half_pixel_centers: floor((dst + 0.5) * 1.5): 0, 2.
    let mut args = base(2);
    args.extend([Arg::Bool(false), Arg::Bool(true)]);
    assert_eq!(run(args, [1, 1, 2, 1]), vec![10.0, 30.0]);
    // Upscale 3 -> 6 (scale 0.5): floor gives 0 0 1 1 2 2.
    assert_eq!(
        run(base(6), [1, 1, 6, 1]),
        vec![10.0, 10.0, 20.0, 20.0, 30.0, 30.0]
    );
    // align_corners 3 -> 4: scale 2/3, round(0, 0.67, 1.33, 2) = 0 1 1 2.
    let mut args = base(4);
    args.extend([Arg::Bool(true), Arg::Bool(false)]);
    assert_eq!(run(args, [1, 1, 4, 1]), vec![10.0, 20.0, 20.0, 30.0]);
}

#[test]
fn cast_fill_rank() {
    let x = [1.9f32, -1.9, 3.0e10, -3.0e10, f32::NAN, 0.0];
    let got = run_op(
        OperationType::Cast,
        vec![input_f32(&[6], &x)],
        &[out_i32(&[6])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![1, -1, i32::MAX, i32::MIN, 0, 0]);
    let got = run_op(
        OperationType::Cast,
        vec![input_i32(&[3], &[-2, 0, 7])],
        &[out_f32(&[3])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![-2.0, 0.0, 7.0]);
    let got = run_op(
        OperationType::Cast,
        vec![input_f32(&[3], &[0.0, 0.5, -2.0])],
        &[out_bool(&[3])],
    )
    .unwrap();
    assert_eq!(bools(&got[0]), vec![false, true, true]);
    let got = run_op(
        OperationType::Cast,
        vec![input_bool(&[2], &[true, false])],
        &[out_f32(&[2])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![1.0, 0.0]);
    let got = run_op(
        OperationType::Cast,
        vec![input_bool(&[2], &[true, false])],
        &[out_i32(&[2])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![1, 0]);
    let got = run_op(
        OperationType::Fill,
        vec![i32_vec(&[2, 3]), Arg::F32(1.5)],
        &[out_f32(&[2, 3])],
    )
    .unwrap();
    assert_eq!(f32s(&got[0]), vec![1.5; 6]);
    // Dimensions fed at run time.
    let got = run_op(
        OperationType::Fill,
        vec![input_i32(&[2], &[3, 1]), Arg::I32(-4)],
        &[out_i32(&[0, 0])],
    )
    .unwrap();
    assert_eq!(got[0].shape, vec![3, 1]);
    assert_eq!(i32s(&got[0]), vec![-4; 3]);
    let got = run_op(
        OperationType::Rank,
        vec![input_f32(&[2, 1, 3], &iota(6))],
        &[(OperandType::Int32, vec![])],
    )
    .unwrap();
    assert_eq!(i32s(&got[0]), vec![3]);
    assert!(got[0].shape.is_empty());
}

#[test]
fn non_zero_lists_coordinates_row_by_row() {
    // [[0, 5, 0], [-2, 0, 7]]: three hits; the output [2, 3] holds their rows, then
    // their columns. The output is declared [2, 0] (unknown count): the executor sizes
    // it from the data.
    let got = run_op(
        OperationType::NonZero,
        vec![input_i32(&[2, 3], &[0, 5, 0, -2, 0, 7])],
        &[(OperandType::TensorInt32, vec![2, 0])],
    )
    .unwrap();
    assert_eq!(got[0].shape, vec![2, 3]);
    assert_eq!(i32s(&got[0]), vec![0, 1, 1, 1, 0, 2]);
    let got = run_op(
        OperationType::NonZero,
        vec![input_f32(&[4], &[0.0, -0.0, 1e-30, f32::NAN])],
        &[(OperandType::TensorInt32, vec![1, 0])],
    )
    .unwrap();
    // -0 is zero; a denormal and NaN are not.
    assert_eq!(i32s(&got[0]), vec![2, 3]);
}

#[test]
fn non_max_suppression_keeps_the_best_of_overlapping_boxes() {
    // Three boxes of one class: the first two overlap (IoU 0.81), the third is apart.
    // Scores 0.9, 0.95, 0.5: box 1 wins its pair, box 2 is kept, box 0 suppressed; with
    // a limit of 2 per class the selection is [(0, 0, 1), (0, 0, 2)].
    let boxes = [
        0.0f32, 0.0, 10.0, 10.0, 0.5, 0.5, 10.0, 10.0, 20.0, 20.0, 30.0, 30.0,
    ];
    let scores = [0.9f32, 0.95, 0.5];
    let args = |limit: i32, score_threshold: f32| {
        vec![
            input_f32(&[1, 3, 4], &boxes),
            input_f32(&[1, 1, 3], &scores),
            input_i32(&[1], &[limit]),
            input_f32(&[1], &[0.5]),
            input_f32(&[1], &[score_threshold]),
            Arg::Bool(false),
        ]
    };
    let out = [(OperandType::TensorInt32, vec![0, 3])];
    let got = run_op(OperationType::NonMaxSuppression, args(2, 0.0), &out).unwrap();
    assert_eq!(got[0].shape, vec![2, 3]);
    assert_eq!(i32s(&got[0]), vec![0, 0, 1, 0, 0, 2]);
    // A score threshold of 0.6 leaves box 2 out; a limit of 1 keeps only the best.
    let got = run_op(OperationType::NonMaxSuppression, args(5, 0.6), &out).unwrap();
    assert_eq!(i32s(&got[0]), vec![0, 0, 1]);
    let got = run_op(OperationType::NonMaxSuppression, args(1, 0.0), &out).unwrap();
    assert_eq!(i32s(&got[0]), vec![0, 0, 1]);
}
