//! Convolutions and pools against float64 references over random parameter sweeps:
//! strides 1-3, dilations 1-2, explicit and SAME/VALID padding, odd sizes, batches,
//! every fused activation, NHWC and NCHW, weights as constants (inline or pooled, i.e.
//! prepared) and as run-time inputs.

mod common;

use common::*;
use nnc_formats::nn::{Model, OperandType, OperationType};
use nnc_formats::tensor::HostTensor;
use nnc_runtime::{FloatMath, HostWeights, PrepareOptions, Program};

#[derive(Clone, Debug)]
struct Case {
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    o: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    groups: usize,
    multiplier: usize,
    /// Explicit (top, bottom, left, right), or implicit SAME (true) / VALID (false).
    padding: Result<(usize, usize, usize, usize), bool>,
    act: i32,
    nchw: bool,
    filter_const: bool,
}

/// Output extents and leading pads, or None when the window does not fit.
fn geometry(c: &Case) -> Option<(usize, usize, usize, usize)> {
    match c.padding {
        Ok((t, b, l, r)) => {
            let eh = (c.kh - 1) * c.dh + 1;
            let ew = (c.kw - 1) * c.dw + 1;
            if c.h + t + b < eh || c.w + l + r < ew {
                return None;
            }
            Some((
                (c.h + t + b - eh) / c.sh + 1,
                (c.w + l + r - ew) / c.sw + 1,
                t,
                l,
            ))
        }
        Err(same) => {
            let (oh, pt) = implicit_pad(c.h, c.kh, c.sh, c.dh, same)?;
            let (ow, pl) = implicit_pad(c.w, c.kw, c.sw, c.dw, same)?;
            Some((oh, ow, pt, pl))
        }
    }
}

/// Grouped convolution reference (NHWC, filter [O, KH, KW, C/groups]).
#[allow(clippy::too_many_arguments)]
fn reference_conv(
    c: &Case,
    x: &[f32],
    f: &[f32],
    bias: &[f32],
    groups: usize,
    o: usize,
    (oh, ow, pt, pl): (usize, usize, usize, usize),
) -> Vec<Ref> {
    let cg = c.c / groups;
    let og = o / groups;
    let mut out = Vec::with_capacity(c.n * oh * ow * o);
    for b in 0..c.n {
        for oy in 0..oh {
            for ox in 0..ow {
                for oc in 0..o {
                    let g = oc / og;
                    let mut acc = f64::from(bias[oc]);
                    let mut abs = acc.abs();
                    for ky in 0..c.kh {
                        let iy = (oy * c.sh + ky * c.dh) as isize - pt as isize;
                        if iy < 0 || iy >= c.h as isize {
                            continue;
                        }
                        for kx in 0..c.kw {
                            let ix = (ox * c.sw + kx * c.dw) as isize - pl as isize;
                            if ix < 0 || ix >= c.w as isize {
                                continue;
                            }
                            for ci in 0..cg {
                                let xv = f64::from(
                                    x[((b * c.h + iy as usize) * c.w + ix as usize) * c.c
                                        + g * cg
                                        + ci],
                                );
                                let wv = f64::from(f[((oc * c.kh + ky) * c.kw + kx) * cg + ci]);
                                acc += xv * wv;
                                abs += (xv * wv).abs();
                            }
                        }
                    }
                    out.push(Ref {
                        value: activation(c.act, acc),
                        abs_sum: abs,
                    });
                }
            }
        }
    }
    out
}

fn padding_args(c: &Case) -> Vec<Arg> {
    match c.padding {
        Ok((t, b, l, r)) => vec![
            Arg::I32(l as i32),
            Arg::I32(r as i32),
            Arg::I32(t as i32),
            Arg::I32(b as i32),
        ],
        Err(same) => vec![Arg::I32(if same { 1 } else { 2 })],
    }
}

fn random_case(rng: &mut Rng, kind: OperationType) -> Case {
    let depthwise = kind == OperationType::DepthwiseConv2d;
    let grouped = kind == OperationType::GroupedConv2d;
    let groups = if grouped { rng.range(1, 3) } else { 1 };
    let multiplier = if depthwise { rng.range(1, 3) } else { 1 };
    let c = if depthwise {
        // Cover the 32- and 8-channel vector blocks and the scalar tail.
        [1, 3, 8, 11, 19, 32, 41][rng.range(0, 6)]
    } else {
        groups * rng.range(1, 4)
    };
    let o = if depthwise {
        c * multiplier
    } else {
        groups * rng.range(1, 4)
    };
    let padding = if rng.range(0, 2) == 0 {
        Err(rng.bool())
    } else {
        Ok((
            rng.range(0, 2),
            rng.range(0, 2),
            rng.range(0, 2),
            rng.range(0, 2),
        ))
    };
    Case {
        n: rng.range(1, 2),
        h: rng.range(1, 9),
        w: rng.range(1, 9),
        c,
        o,
        kh: rng.range(1, 3),
        kw: rng.range(1, 3),
        sh: rng.range(1, 3),
        sw: rng.range(1, 3),
        // GROUPED_CONV_2D has no dilation inputs.
        dh: if grouped { 1 } else { rng.range(1, 2) },
        dw: if grouped { 1 } else { rng.range(1, 2) },
        groups,
        multiplier,
        padding,
        act: rng.range(0, 3) as i32,
        nchw: rng.range(0, 3) == 0,
        filter_const: rng.range(0, 3) != 0,
    }
}

/// Runs one case; false when its window does not fit (nothing to check).
fn run_conv_case(kind: OperationType, case: &Case, rng: &mut Rng) -> bool {
    let Some(geom) = geometry(case) else {
        return false;
    };
    let (oh, ow, _, _) = geom;
    let depthwise = kind == OperationType::DepthwiseConv2d;
    let x = rng.f32s(case.n * case.h * case.w * case.c);
    let (fdims, fsize) = if depthwise {
        ([1, case.kh, case.kw, case.o], case.kh * case.kw * case.o)
    } else {
        let cg = case.c / case.groups;
        (
            [case.o, case.kh, case.kw, cg],
            case.o * case.kh * case.kw * cg,
        )
    };
    let f = rng.f32s(fsize);
    let bias = rng.f32s(case.o);
    // Reference: depthwise as a grouped convolution with one group per input channel.
    let expected = if depthwise {
        let mut gf = vec![0.0f32; fsize];
        for oc in 0..case.o {
            for t in 0..case.kh * case.kw {
                gf[oc * case.kh * case.kw + t] = f[t * case.o + oc];
            }
        }
        reference_conv(case, &x, &gf, &bias, case.c, case.o, geom)
    } else {
        reference_conv(case, &x, &f, &bias, case.groups, case.o, geom)
    };
    let in_dims = [case.n, case.h, case.w, case.c];
    let out_dims = [case.n, oh, ow, case.o];
    let (x_arg, out_decl) = if case.nchw {
        (nhwc_to_nchw(&x, in_dims), vec![case.n, case.o, oh, ow])
    } else {
        (x.clone(), out_dims.to_vec())
    };
    let x_shape = if case.nchw {
        vec![case.n, case.c, case.h, case.w]
    } else {
        in_dims.to_vec()
    };
    let mut args = vec![
        input_f32(&x_shape, &x_arg),
        f32_arg(case.filter_const, &fdims, &f),
        f32_arg(case.filter_const, &[case.o], &bias),
    ];
    args.extend(padding_args(case));
    args.push(Arg::I32(case.sw as i32));
    args.push(Arg::I32(case.sh as i32));
    match kind {
        OperationType::DepthwiseConv2d => args.push(Arg::I32(case.multiplier as i32)),
        OperationType::GroupedConv2d => args.push(Arg::I32(case.groups as i32)),
        _ => {}
    }
    args.push(Arg::I32(case.act));
    let needs_tail =
        case.nchw || case.dh != 1 || case.dw != 1 || kind == OperationType::GroupedConv2d;
    if needs_tail || rng.bool() {
        args.push(Arg::Bool(case.nchw));
        if kind != OperationType::GroupedConv2d && (case.dh != 1 || case.dw != 1 || rng.bool()) {
            args.push(Arg::I32(case.dw as i32));
            args.push(Arg::I32(case.dh as i32));
        }
    }
    let outputs =
        run_op(kind, args, &[out_f32(&out_decl)]).unwrap_or_else(|e| panic!("{case:?}: {e}"));
    let mut got = f32s(&outputs[0]);
    if case.nchw {
        got = nchw_to_nhwc(&got, [case.n, case.o, oh, ow]);
    }
    assert_close(&got, &expected, &format!("{kind} {case:?}"));
    true
}

/// A CONV_2D model of `case` (NHWC, constant filter, explicit activation), its input,
/// and the float64 reference.
fn conv_model(case: &Case, rng: &mut Rng) -> (Model, Vec<HostTensor>, Vec<Ref>) {
    let geom = geometry(case).expect("the window fits");
    let (oh, ow, _, _) = geom;
    let x = rng.f32s(case.n * case.h * case.w * case.c);
    let f = rng.f32s(case.o * case.kh * case.kw * case.c);
    let bias = rng.f32s(case.o);
    let expected = reference_conv(case, &x, &f, &bias, 1, case.o, geom);
    let mut args = vec![
        input_f32(&[case.n, case.h, case.w, case.c], &x),
        f32_arg(true, &[case.o, case.kh, case.kw, case.c], &f),
        f32_arg(true, &[case.o], &bias),
    ];
    args.extend(padding_args(case));
    args.push(Arg::I32(case.sw as i32));
    args.push(Arg::I32(case.sh as i32));
    args.push(Arg::I32(case.act));
    let (model, feeds) = single_op(
        OperationType::Conv2d,
        args,
        &[out_f32(&[case.n, oh, ow, case.o])],
    );
    (model, feeds, expected)
}

fn run_with(model: &Model, feeds: &[HostTensor], float_math: FloatMath) -> Vec<f32> {
    let weights = std::sync::Arc::new(HostWeights::new(model).unwrap());
    let options = PrepareOptions {
        float_math,
        ..Default::default()
    };
    let program = Program::prepare(model, weights, &options).unwrap();
    f32s(&program.execute_host(feeds).unwrap()[0])
}

/// `FloatMath::Fast` (Winograd F(4x4, 3x3) or F(2x2, 3x3) on the 3x3 stride-1 layers
/// they take):
/// outputs differ from the strict path's (another algorithm ran), stay within NNAPI's
/// relaxed tolerance, and within ten times the strict path's error model (see
/// `assert_close`). A model that allows relaxed computation gets the same bits without
/// asking.
#[test]
fn fast_float_math_runs_3x3_layers_within_the_relaxed_tolerance() {
    let mut rng = Rng::new(7);
    for (n, h, w, c, o, pad, act) in [
        (1, 30, 30, 64, 48, Err(true), 0),
        (2, 9, 13, 19, 21, Ok((1, 1, 1, 1)), 3),
        (1, 12, 10, 32, 16, Err(false), 1),
        // A 7x7 output: F(2x2, 3x3).
        (1, 7, 7, 48, 40, Err(true), 1),
    ] {
        let case = Case {
            n,
            h,
            w,
            c,
            o,
            kh: 3,
            kw: 3,
            sh: 1,
            sw: 1,
            dh: 1,
            dw: 1,
            groups: 1,
            multiplier: 1,
            padding: pad,
            act,
            nchw: false,
            filter_const: true,
        };
        let (mut model, feeds, expected) = conv_model(&case, &mut rng);
        let strict = run_with(&model, &feeds, FloatMath::Strict);
        assert_close(&strict, &expected, &format!("strict {case:?}"));
        let fast = run_with(&model, &feeds, FloatMath::Fast);
        if cfg!(target_arch = "x86_64") {
            assert_ne!(
                strict, fast,
                "{case:?}: the fast path computed the strict path's bits"
            );
        } else {
            // Winograd kernels exist on x86 only: elsewhere fast math is the strict path.
            assert_eq!(strict, fast, "{case:?}: no Winograd path, yet other bits");
        }
        let relaxed = 5.0 / 1024.0;
        for (i, (&a, e)) in fast.iter().zip(&expected).enumerate() {
            let diff = (f64::from(a) - e.value).abs();
            assert!(
                diff <= relaxed + relaxed * e.value.abs(),
                "{case:?}: element {i}: {a} against {} outside the relaxed tolerance",
                e.value
            );
            let ten_times = 1e-4 + 50.0 * f64::from(f32::EPSILON) * e.value.abs().max(e.abs_sum);
            assert!(
                diff <= ten_times,
                "{case:?}: element {i}: {a} against {} (diff {diff:e} > {ten_times:e})",
                e.value
            );
        }
        model.relax_computation_float32_to_float16 = true;
        assert_eq!(
            run_with(&model, &feeds, FloatMath::Strict),
            fast,
            "{case:?}: relaxed model"
        );
    }
}

fn sweep(kind: OperationType, seed: u64, cases: usize) {
    let mut rng = Rng::new(seed);
    let mut ran = 0;
    for _ in 0..cases {
        let case = random_case(&mut rng, kind);
        ran += usize::from(run_conv_case(kind, &case, &mut rng));
    }
    assert!(
        ran * 10 >= cases * 7,
        "only {ran} of {cases} cases were valid"
    );
}

#[test]
fn conv2d_matches_reference() {
    sweep(OperationType::Conv2d, 1, 250);
}

#[test]
fn conv2d_pointwise_and_larger_layers() {
    let mut rng = Rng::new(2);
    // 1x1 stride 1 unpadded (the direct GEMM path), with enough rows for several tiles.
    for (h, c, o) in [(40, 24, 36), (9, 5, 7), (70, 3, 700)] {
        let case = Case {
            n: 1,
            h,
            w: h,
            c,
            o,
            kh: 1,
            kw: 1,
            sh: 1,
            sw: 1,
            dh: 1,
            dw: 1,
            groups: 1,
            multiplier: 1,
            padding: Err(true),
            act: 3,
            nchw: false,
            filter_const: true,
        };
        assert!(run_conv_case(OperationType::Conv2d, &case, &mut rng));
    }
    // A 3x3 layer with a long reduction (K = 3 * 3 * 64) and several im2col tiles.
    let case = Case {
        n: 1,
        h: 30,
        w: 30,
        c: 64,
        o: 48,
        kh: 3,
        kw: 3,
        sh: 1,
        sw: 1,
        dh: 1,
        dw: 1,
        groups: 1,
        multiplier: 1,
        padding: Err(true),
        act: 0,
        nchw: false,
        filter_const: true,
    };
    assert!(run_conv_case(OperationType::Conv2d, &case, &mut rng));
}

#[test]
fn grouped_conv2d_matches_reference() {
    sweep(OperationType::GroupedConv2d, 3, 200);
}

#[test]
fn depthwise_conv2d_matches_reference() {
    sweep(OperationType::DepthwiseConv2d, 4, 250);
}

#[test]
fn depthwise_mobilenet_like_blocks() {
    let mut rng = Rng::new(5);
    for (h, c, s) in [(12, 96, 1), (12, 96, 2), (7, 144, 2), (5, 40, 1)] {
        let case = Case {
            n: 1,
            h,
            w: h,
            c,
            o: c,
            kh: 3,
            kw: 3,
            sh: s,
            sw: s,
            dh: 1,
            dw: 1,
            groups: 1,
            multiplier: 1,
            padding: Err(true),
            act: 3,
            nchw: false,
            filter_const: true,
        };
        assert!(run_conv_case(
            OperationType::DepthwiseConv2d,
            &case,
            &mut rng
        ));
    }
}

/// The 3x3 and 5x5 depthwise kernels that keep the filter in registers: channel counts
/// around the 16-lane blocks, rows wide enough for groups of four pixels with both
/// padded edges, strides, dilations, explicit and implicit padding, a batch, and every
/// activation.
#[test]
fn depthwise_register_kernels_at_every_edge() {
    let mut rng = Rng::new(9);
    let mut ran = 0;
    for k in [3, 5] {
        for c in [1, 15, 16, 17, 40] {
            for (s, d) in [(1, 1), (2, 1), (1, 2)] {
                for padding in [Err(true), Err(false), Ok((2, 0, 1, 3))] {
                    let case = Case {
                        n: 2,
                        h: 6,
                        w: 13,
                        c,
                        o: c,
                        kh: k,
                        kw: k,
                        sh: s,
                        sw: s,
                        dh: d,
                        dw: d,
                        groups: 1,
                        multiplier: 1,
                        padding,
                        act: (c % 4) as i32,
                        nchw: false,
                        filter_const: true,
                    };
                    ran += usize::from(run_conv_case(
                        OperationType::DepthwiseConv2d,
                        &case,
                        &mut rng,
                    ));
                }
            }
        }
    }
    assert!(ran >= 70, "only {ran} cases fit");
}

// ---------------------------------------------------------------------------------------
// TRANSPOSE_CONV_2D

#[allow(clippy::too_many_arguments)]
fn reference_transpose(
    x: &[f32],
    [n, ih, iw, c]: [usize; 4],
    f: &[f32],
    [o, kh, kw]: [usize; 3],
    bias: &[f32],
    (sh, sw): (usize, usize),
    (pt, pl): (usize, usize),
    (oh, ow): (usize, usize),
    act: i32,
) -> Vec<Ref> {
    let mut acc = vec![0f64; n * oh * ow * o];
    let mut abs = vec![0f64; n * oh * ow * o];
    for b in 0..n {
        for (i, (a, s)) in acc
            .chunks_mut(o)
            .zip(abs.chunks_mut(o))
            .enumerate()
            .skip(b * oh * ow)
            .take(oh * ow)
        {
            let _ = i;
            for oc in 0..o {
                a[oc] = f64::from(bias[oc]);
                s[oc] = a[oc].abs();
            }
        }
        for iy in 0..ih {
            for ix in 0..iw {
                for ky in 0..kh {
                    let oy = (iy * sh + ky) as isize - pt as isize;
                    if oy < 0 || oy >= oh as isize {
                        continue;
                    }
                    for kx in 0..kw {
                        let ox = (ix * sw + kx) as isize - pl as isize;
                        if ox < 0 || ox >= ow as isize {
                            continue;
                        }
                        for oc in 0..o {
                            let idx = ((b * oh + oy as usize) * ow + ox as usize) * o + oc;
                            for ci in 0..c {
                                let t = f64::from(x[((b * ih + iy) * iw + ix) * c + ci])
                                    * f64::from(f[((oc * kh + ky) * kw + kx) * c + ci]);
                                acc[idx] += t;
                                abs[idx] += t.abs();
                            }
                        }
                    }
                }
            }
        }
    }
    acc.iter()
        .zip(&abs)
        .map(|(&v, &s)| Ref {
            value: activation(act, v),
            abs_sum: s,
        })
        .collect()
}

#[test]
fn transpose_conv2d_matches_reference() {
    let mut rng = Rng::new(6);
    let mut ran = 0;
    for _ in 0..200 {
        let (n, ih, iw, c, o) = (
            rng.range(1, 2),
            rng.range(1, 6),
            rng.range(1, 6),
            rng.range(1, 4),
            rng.range(1, 4),
        );
        let (kh, kw, sh, sw) = (
            rng.range(1, 4),
            rng.range(1, 4),
            rng.range(1, 3),
            rng.range(1, 3),
        );
        let act = rng.range(0, 3) as i32;
        let nchw = rng.range(0, 3) == 0;
        let filter_const = rng.bool();
        let explicit = rng.bool();
        let (oh, ow, pt, pl, pads_or_shape) = if explicit {
            let (t, b, l, r) = (
                rng.range(0, 2),
                rng.range(0, 2),
                rng.range(0, 2),
                rng.range(0, 2),
            );
            let fh = sh * (ih - 1) + kh;
            let fw = sw * (iw - 1) + kw;
            if fh <= t + b || fw <= l + r {
                continue;
            }
            (fh - t - b, fw - l - r, t, l, Ok((t, b, l, r)))
        } else {
            let same = rng.bool();
            // NNAPI's usual output sizes, sometimes another size to exercise the
            // padding-from-output-shape rule.
            let pick = |rng: &mut Rng, i: usize, s: usize, k: usize| -> usize {
                match rng.range(0, 2) {
                    0 => i * s,
                    1 => (i - 1) * s + k,
                    _ => rng.range(1, (i - 1) * s + k + 1),
                }
            };
            let oh = pick(&mut rng, ih, sh, kh);
            let ow = pick(&mut rng, iw, sw, kw);
            let pad = |i: usize, s: usize, k: usize, out: usize| {
                let total = ((i - 1) * s + k).saturating_sub(out);
                if same { total / 2 } else { 0 }
            };
            (oh, ow, pad(ih, sh, kh, oh), pad(iw, sw, kw, ow), Err(same))
        };
        let x = rng.f32s(n * ih * iw * c);
        let f = rng.f32s(o * kh * kw * c);
        let bias = rng.f32s(o);
        let expected = reference_transpose(
            &x,
            [n, ih, iw, c],
            &f,
            [o, kh, kw],
            &bias,
            (sh, sw),
            (pt, pl),
            (oh, ow),
            act,
        );
        let (x_arg, x_shape, out_decl) = if nchw {
            (
                nhwc_to_nchw(&x, [n, ih, iw, c]),
                vec![n, c, ih, iw],
                vec![n, o, oh, ow],
            )
        } else {
            (x.clone(), vec![n, ih, iw, c], vec![n, oh, ow, o])
        };
        let mut args = vec![
            input_f32(&x_shape, &x_arg),
            f32_arg(filter_const, &[o, kh, kw, c], &f),
            f32_arg(filter_const, &[o], &bias),
        ];
        match pads_or_shape {
            Ok((t, b, l, r)) => {
                args.extend([l, r, t, b].map(|v| Arg::I32(v as i32)));
            }
            Err(same) => {
                args.push(i32_vec(
                    &out_decl.iter().map(|&d| d as i32).collect::<Vec<_>>(),
                ));
                args.push(Arg::I32(if same { 1 } else { 2 }));
            }
        }
        args.push(Arg::I32(sw as i32));
        args.push(Arg::I32(sh as i32));
        args.push(Arg::I32(act));
        args.push(Arg::Bool(nchw));
        let context = format!(
            "n{n} {ih}x{iw}x{c} -> {oh}x{ow}x{o} k{kh}x{kw} s{sh}x{sw} pad ({pt},{pl}) act {act} nchw {nchw} explicit {explicit}"
        );
        let outputs = run_op(OperationType::TransposeConv2d, args, &[out_f32(&out_decl)])
            .unwrap_or_else(|e| panic!("{context}: {e}"));
        let mut got = f32s(&outputs[0]);
        if nchw {
            got = nchw_to_nhwc(&got, [n, o, oh, ow]);
        }
        assert_close(&got, &expected, &context);
        ran += 1;
    }
    assert!(ran > 100);
}

// ---------------------------------------------------------------------------------------
// Pools

#[test]
fn pools_match_reference() {
    let mut rng = Rng::new(7);
    let mut ran = 0;
    for _ in 0..300 {
        let kind = [
            OperationType::AveragePool2d,
            OperationType::MaxPool2d,
            OperationType::L2Pool2d,
        ][rng.range(0, 2)];
        // Channel counts that take each of the max kernel's blocks (32, 8, single).
        let (n, h, w, c) = (
            rng.range(1, 2),
            rng.range(1, 8),
            rng.range(1, 8),
            [1, 2, 5, 8, 13, 32, 45][rng.range(0, 6)],
        );
        let (fh, fw, sh, sw) = (
            rng.range(1, 3),
            rng.range(1, 3),
            rng.range(1, 3),
            rng.range(1, 3),
        );
        let act = rng.range(0, 3) as i32;
        let nchw = rng.range(0, 3) == 0;
        let explicit = rng.bool();
        let (oh, ow, pt, pl, padding) = if explicit {
            // Padding smaller than the filter, so every window touches the input.
            let (t, b, l, r) = (
                rng.range(0, fh - 1),
                rng.range(0, fh - 1),
                rng.range(0, fw - 1),
                rng.range(0, fw - 1),
            );
            if h + t + b < fh || w + l + r < fw {
                continue;
            }
            (
                (h + t + b - fh) / sh + 1,
                (w + l + r - fw) / sw + 1,
                t,
                l,
                Ok((t, b, l, r)),
            )
        } else {
            let same = rng.bool();
            let (Some((oh, pt)), Some((ow, pl))) = (
                implicit_pad(h, fh, sh, 1, same),
                implicit_pad(w, fw, sw, 1, same),
            ) else {
                continue;
            };
            (oh, ow, pt, pl, Err(same))
        };
        let mut x = rng.f32s(n * h * w * c);
        // A maximum ignores a NaN input, as the reference kernels do.
        if kind == OperationType::MaxPool2d && rng.bool() {
            let at = rng.range(0, x.len() - 1);
            x[at] = f32::NAN;
        }
        let mut expected = Vec::new();
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for ch in 0..c {
                        let mut vals = Vec::new();
                        for ky in 0..fh {
                            for kx in 0..fw {
                                let iy = (oy * sh + ky) as isize - pt as isize;
                                let ix = (ox * sw + kx) as isize - pl as isize;
                                if iy >= 0 && iy < h as isize && ix >= 0 && ix < w as isize {
                                    vals.push(f64::from(
                                        x[((b * h + iy as usize) * w + ix as usize) * c + ch],
                                    ));
                                }
                            }
                        }
                        let count = vals.len() as f64;
                        let (v, abs) = match kind {
                            OperationType::AveragePool2d => (
                                vals.iter().sum::<f64>() / count,
                                vals.iter().map(|v| v.abs()).sum::<f64>() / count,
                            ),
                            OperationType::MaxPool2d => {
                                // f64::max skips the NaN; a window of nothing else gives
                                // f32::MIN, the maximum of nothing.
                                let m = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                                let m = if m == f64::NEG_INFINITY {
                                    f64::from(f32::MIN)
                                } else {
                                    m
                                };
                                (m, m.abs())
                            }
                            _ => {
                                let s = (vals.iter().map(|v| v * v).sum::<f64>() / count).sqrt();
                                (s, s)
                            }
                        };
                        expected.push(Ref {
                            value: activation(act, v),
                            abs_sum: abs,
                        });
                    }
                }
            }
        }
        let (x_arg, x_shape, out_decl) = if nchw {
            (
                nhwc_to_nchw(&x, [n, h, w, c]),
                vec![n, c, h, w],
                vec![n, c, oh, ow],
            )
        } else {
            (x.clone(), vec![n, h, w, c], vec![n, oh, ow, c])
        };
        let mut args = vec![input_f32(&x_shape, &x_arg)];
        match padding {
            Ok((t, b, l, r)) => args.extend([l, r, t, b].map(|v| Arg::I32(v as i32))),
            Err(same) => args.push(Arg::I32(if same { 1 } else { 2 })),
        }
        args.extend([sw, sh, fw, fh].map(|v| Arg::I32(v as i32)));
        args.push(Arg::I32(act));
        if nchw || rng.bool() {
            args.push(Arg::Bool(nchw));
        }
        let context = format!(
            "{kind} n{n} {h}x{w}x{c} f{fh}x{fw} s{sh}x{sw} pad ({pt},{pl}) {padding:?} act {act} nchw {nchw}"
        );
        let outputs =
            run_op(kind, args, &[out_f32(&out_decl)]).unwrap_or_else(|e| panic!("{context}: {e}"));
        let mut got = f32s(&outputs[0]);
        if nchw {
            got = nchw_to_nhwc(&got, [n, c, oh, ow]);
        }
        assert_close(&got, &expected, &context);
        ran += 1;
    }
    assert!(ran > 200);
}

#[test]
fn average_pool_excludes_padding_by_hand() {
    // 2x2 input, 3x3 window, SAME padding, stride 1: corner windows see 4 values.
    let x = [1.0, 2.0, 3.0, 4.0];
    let args = vec![
        input_f32(&[1, 2, 2, 1], &x),
        Arg::I32(1),
        Arg::I32(1),
        Arg::I32(1),
        Arg::I32(3),
        Arg::I32(3),
        Arg::I32(0),
    ];
    let out = run_op(
        OperationType::AveragePool2d,
        args,
        &[out_f32(&[1, 2, 2, 1])],
    )
    .unwrap();
    assert_eq!(f32s(&out[0]), vec![2.5; 4]);
}

#[test]
fn conv_with_unsupported_type_fails_at_preparation() {
    let mut model_args = vec![
        Arg::Input {
            ty: OperandType::TensorFloat16,
            dims: vec![1, 2, 2, 1],
            data: vec![0; 8],
        },
        Arg::Const {
            ty: OperandType::TensorFloat16,
            dims: vec![1, 1, 1, 1],
            data: vec![0; 2],
        },
        Arg::Const {
            ty: OperandType::TensorFloat16,
            dims: vec![1],
            data: vec![0; 2],
        },
    ];
    model_args.extend([0, 0, 0, 0, 1, 1, 0].map(Arg::I32));
    let (model, _) = single_op(
        OperationType::Conv2d,
        model_args,
        &[(OperandType::TensorFloat16, vec![1, 2, 2, 1])],
    );
    let err = prepare(&model, 1).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, nnc_runtime::RuntimeError::UnsupportedOperations(ref ops) if ops.len() == 1)
            && text.contains("operation 0 (CONV_2D from node 'test_node')"),
        "{text}"
    );
}

#[test]
fn pool_windows_entirely_in_padding() {
    // One input pixel, 2 columns of left padding, 1x1 window: the first two windows see
    // only padding. Average and L2 give 0 there, MAX_POOL f32::MIN (before activation).
    let run = |kind: OperationType, act: i32| {
        let mut args = vec![input_f32(&[1, 1, 1, 1], &[5.0])];
        args.extend([2, 0, 0, 0, 1, 1, 1, 1].map(Arg::I32));
        args.push(Arg::I32(act));
        f32s(&run_op(kind, args, &[out_f32(&[1, 1, 3, 1])]).unwrap()[0])
    };
    assert_eq!(run(OperationType::AveragePool2d, 0), vec![0.0, 0.0, 5.0]);
    assert_eq!(run(OperationType::L2Pool2d, 0), vec![0.0, 0.0, 5.0]);
    assert_eq!(
        run(OperationType::MaxPool2d, 0),
        vec![f32::MIN, f32::MIN, 5.0]
    );
    assert_eq!(run(OperationType::MaxPool2d, 1), vec![0.0, 0.0, 5.0]);
}
