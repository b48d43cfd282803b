//! Quantized convolutions against an independent i64 reference of TFLite's arithmetic:
//! CONV_2D, GROUPED_CONV_2D, DEPTHWISE_CONV_2D and TRANSPOSE_CONV_2D over random sweeps
//! of shapes, strides, dilations, explicit and implicit padding, fused activations,
//! uint8 and int8 activations, per-tensor (with filter zero points) and per-channel
//! filters, zero points at the ends of their ranges, NHWC and NCHW, filters as prepared
//! weights, inline constants and run-time inputs, one and two threads. Bit-exact.

mod quant_common;

use nnc_formats::nn::{OperandType, OperationType};
use quant_common::*;

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
    /// Explicit (top, bottom, left, right) or implicit SAME (true) / VALID (false).
    padding: Result<(usize, usize, usize, usize), bool>,
    act: i32,
    ty: OperandType,
    per_channel: bool,
    nchw: bool,
    /// 0: prepared weight (pooled constant), 1: model input, 2: inline when small.
    filter_kind: usize,
    threads: usize,
}

/// TensorFlow's implicit padding: (output extent, padding before).
fn implicit(input: usize, k: usize, s: usize, d: usize, same: bool) -> Option<(usize, usize)> {
    let eff = (k - 1) * d + 1;
    if same {
        let out = input.div_ceil(s);
        let needed = ((out - 1) * s + eff).saturating_sub(input);
        Some((out, needed / 2))
    } else if input < eff {
        None
    } else {
        Some(((input - eff + 1).div_ceil(s), 0))
    }
}

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
            let (oh, pt) = implicit(c.h, c.kh, c.sh, c.dh, same)?;
            let (ow, pl) = implicit(c.w, c.kw, c.sw, c.dw, same)?;
            Some((oh, ow, pt, pl))
        }
    }
}

struct Quant {
    x: (f32, i32),
    out: (f32, i32),
    /// Filter zero point (0 for per-channel) and one scale per output channel (or one).
    w_zp: i32,
    w_scales: Vec<f32>,
}

impl Quant {
    /// The requantization multiplier of channel `oc`, in TFLite's precision.
    fn real(&self, oc: usize, ty: OperandType, per_channel: bool) -> f64 {
        let ws = self.w_scales[if self.w_scales.len() == 1 { 0 } else { oc }];
        let product = if !per_channel && ty == U8 {
            f64::from(self.x.0 * ws)
        } else {
            f64::from(self.x.0) * f64::from(ws)
        };
        product / f64::from(self.out.0)
    }
}

fn nhwc_to_nchw(x: &[i32], [n, h, w, c]: [usize; 4]) -> Vec<i32> {
    let mut out = vec![0; x.len()];
    for b in 0..n {
        for y in 0..h {
            for xx in 0..w {
                for ch in 0..c {
                    out[((b * c + ch) * h + y) * w + xx] = x[((b * h + y) * w + xx) * c + ch];
                }
            }
        }
    }
    out
}

fn nhwc_to_nchw_i64(x: &[i64], dims: [usize; 4]) -> Vec<i64> {
    let as32: Vec<i32> = x.iter().map(|&v| v as i32).collect();
    nhwc_to_nchw(&as32, dims)
        .into_iter()
        .map(i64::from)
        .collect()
}

fn filter_arg(kind: usize, operand: nnc_formats::nn::Operand, values: &[i32]) -> QArg {
    // Per-channel tensors have no host type: they are always constants.
    if kind == 1 && operand.operand_type != PER_CHANNEL {
        input(operand, q_bytes(values))
    } else {
        constant(operand, q_bytes(values))
    }
}

/// Random quantization for a case whose filter has `channels` output channels.
fn random_quant(rng: &mut Rng, c: &Case, channels: usize) -> Quant {
    let w_scales = if c.per_channel {
        (0..channels).map(|_| rng.scale(-10.0, -3.0)).collect()
    } else {
        vec![rng.scale(-10.0, -3.0)]
    };
    let w_zp = if c.per_channel {
        0
    } else if c.ty == U8 {
        rng.zp(U8)
    } else if rng.bool(0.7) {
        0
    } else {
        rng.i32(-20, 20)
    };
    Quant {
        x: (rng.scale(-8.0, 0.0), rng.zp(c.ty)),
        out: (rng.scale(-6.0, 1.0), rng.zp(c.ty)),
        w_zp,
        w_scales,
    }
}

fn filter_values(rng: &mut Rng, c: &Case, q: &Quant, n: usize) -> (OperandType, Vec<i32>) {
    if c.per_channel {
        (PER_CHANNEL, (0..n).map(|_| rng.i32(-127, 127)).collect())
    } else {
        (
            c.ty,
            rng.values(c.ty, n)
                .into_iter()
                .map(|v| {
                    if c.ty == I8 && q.w_zp != 0 {
                        v.clamp(-100, 100)
                    } else {
                        v
                    }
                })
                .collect(),
        )
    }
}

fn filter_operand(
    ty: OperandType,
    dims: &[usize],
    q: &Quant,
    channel_dim: u32,
) -> nnc_formats::nn::Operand {
    if ty == PER_CHANNEL {
        per_channel(dims, channel_dim, q.w_scales.clone())
    } else {
        qoperand(ty, dims, q.w_scales[0], q.w_zp)
    }
}

fn padding_args(c: &Case) -> Vec<QArg> {
    match c.padding {
        Ok((t, b, l, r)) => vec![
            QArg::I32(l as i32),
            QArg::I32(r as i32),
            QArg::I32(t as i32),
            QArg::I32(b as i32),
        ],
        Err(same) => vec![QArg::I32(if same { 1 } else { 2 })],
    }
}

/// Runs CONV_2D / GROUPED_CONV_2D / DEPTHWISE_CONV_2D for a case and compares.
fn check_conv(op: OperationType, c: &Case, seed: u64) {
    let Some((oh, ow, pt, pl)) = geometry(c) else {
        return;
    };
    let mut rng = Rng::new(seed);
    let depthwise = op == OperationType::DepthwiseConv2d;
    let o = if depthwise { c.c * c.multiplier } else { c.o };
    let cg = c.c / c.groups;
    let q = random_quant(&mut rng, c, o);
    let fdims = if depthwise {
        [1, c.kh, c.kw, o]
    } else {
        [o, c.kh, c.kw, cg]
    };
    let (fty, wv) = filter_values(&mut rng, c, &q, fdims.iter().product());
    let xv = rng.values(c.ty, c.n * c.h * c.w * c.c);
    let bias: Vec<i32> = (0..o).map(|_| rng.i32(-20_000, 20_000)).collect();
    // Reference (NHWC).
    let mut want = Vec::with_capacity(c.n * oh * ow * o);
    let (lo, hi) = ref_act_range(c.act, q.out.0, q.out.1, c.ty);
    let og = o / c.groups;
    for b in 0..c.n {
        for oy in 0..oh {
            for ox in 0..ow {
                for oc in 0..o {
                    let mut acc = i64::from(bias[oc]);
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
                            let px = ((b * c.h + iy as usize) * c.w + ix as usize) * c.c;
                            if depthwise {
                                let ic = oc / c.multiplier;
                                let xv = i64::from(xv[px + ic] - q.x.1);
                                let wv = i64::from(wv[(ky * c.kw + kx) * o + oc] - q.w_zp);
                                acc += xv * wv;
                            } else {
                                let g = oc / og;
                                for ci in 0..cg {
                                    let xv = i64::from(xv[px + g * cg + ci] - q.x.1);
                                    let wv = i64::from(
                                        wv[((oc * c.kh + ky) * c.kw + kx) * cg + ci] - q.w_zp,
                                    );
                                    acc += xv * wv;
                                }
                            }
                        }
                    }
                    let v = ref_mbqm(acc, q.real(oc, c.ty, c.per_channel)) + i64::from(q.out.1);
                    want.push(v.clamp(lo, hi));
                }
            }
        }
    }
    let in_dims = [c.n, c.h, c.w, c.c];
    let out_dims = [c.n, oh, ow, o];
    let (x_arg_dims, x_vals, o_dims, want) = if c.nchw {
        (
            vec![c.n, c.c, c.h, c.w],
            nhwc_to_nchw(&xv, in_dims),
            vec![c.n, o, oh, ow],
            nhwc_to_nchw_i64(&want, out_dims),
        )
    } else {
        (in_dims.to_vec(), xv, out_dims.to_vec(), want)
    };
    let mut args = vec![
        q_input(c.ty, &x_arg_dims, q.x.0, q.x.1, &x_vals),
        filter_arg(
            c.filter_kind,
            filter_operand(fty, &fdims, &q, if depthwise { 3 } else { 0 }),
            &wv,
        ),
        constant(
            qoperand(OperandType::TensorInt32, &[o], q.x.0 * q.w_scales[0], 0),
            bytemuck::cast_slice(&bias).to_vec(),
        ),
    ];
    args.extend(padding_args(c));
    args.push(QArg::I32(c.sw as i32));
    args.push(QArg::I32(c.sh as i32));
    match op {
        OperationType::DepthwiseConv2d => args.push(QArg::I32(c.multiplier as i32)),
        OperationType::GroupedConv2d => args.push(QArg::I32(c.groups as i32)),
        _ => {}
    }
    args.push(QArg::I32(c.act));
    let with_dilation = c.dh != 1 || c.dw != 1;
    if c.nchw || with_dilation || op == OperationType::GroupedConv2d {
        args.push(QArg::Bool(c.nchw));
    }
    if with_dilation {
        args.push(QArg::I32(c.dw as i32));
        args.push(QArg::I32(c.dh as i32));
    }
    let (model, feeds) = qmodel(op, args, &[out(c.ty, &o_dims, q.out.0, q.out.1)]);
    let got = run_model(&model, &feeds, c.threads).unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert_q_eq(&q_values(&got[0]), &want, &format!("{op} {c:?}"));
}

fn random_case(rng: &mut Rng, depthwise: bool, grouped: bool) -> Case {
    let groups = if grouped { rng.usize(1, 3) } else { 1 };
    let dilated = rng.bool(0.25);
    let padding = if rng.bool(0.5) {
        Ok((
            rng.usize(0, 2),
            rng.usize(0, 2),
            rng.usize(0, 2),
            rng.usize(0, 2),
        ))
    } else {
        Err(rng.bool(0.5))
    };
    let ty = if rng.bool(0.5) { U8 } else { I8 };
    Case {
        n: rng.usize(1, 2),
        h: rng.usize(1, 9),
        w: rng.usize(1, 9),
        c: if depthwise {
            rng.pick(&[1, 3, 8, 16, 19, 32, 37])
        } else {
            groups * rng.usize(1, 12)
        },
        o: groups * rng.usize(1, 20),
        kh: rng.usize(1, 3),
        kw: rng.usize(1, 3),
        sh: rng.usize(1, 3),
        sw: rng.usize(1, 3),
        dh: if dilated { rng.usize(1, 3) } else { 1 },
        dw: if dilated { rng.usize(1, 3) } else { 1 },
        groups,
        multiplier: if depthwise {
            rng.pick(&[1, 1, 1, 2, 3])
        } else {
            1
        },
        padding,
        act: rng.i32(0, 3),
        ty,
        per_channel: rng.bool(0.5),
        nchw: rng.bool(0.2),
        filter_kind: rng.usize(0, 2),
        threads: if rng.bool(0.3) { 2 } else { 1 },
    }
}

#[test]
fn conv2d_matches_reference() {
    let mut rng = Rng::new(1);
    for i in 0..160 {
        let c = random_case(&mut rng, false, false);
        check_conv(OperationType::Conv2d, &c, 1000 + i);
    }
}

#[test]
fn pointwise_and_large_conv2d_match_reference() {
    // 1x1 stride-1 unpadded convolutions take the direct GEMM path; larger ones span
    // several GEMM tiles and panels.
    let mut rng = Rng::new(2);
    for i in 0..12 {
        let mut c = random_case(&mut rng, false, false);
        (c.kh, c.kw, c.sh, c.sw, c.dh, c.dw) = (1, 1, 1, 1, 1, 1);
        c.padding = Err(rng.bool(0.5));
        (c.h, c.w, c.c, c.o) = (
            rng.usize(5, 20),
            rng.usize(5, 20),
            rng.usize(1, 70),
            rng.usize(1, 70),
        );
        check_conv(OperationType::Conv2d, &c, 2000 + i);
    }
    let mut c = random_case(&mut rng, false, false);
    (c.n, c.h, c.w, c.c, c.o, c.kh, c.kw, c.sh, c.sw) = (1, 40, 37, 24, 40, 3, 3, 1, 1);
    (c.dh, c.dw, c.padding, c.threads) = (1, 1, Err(true), 2);
    check_conv(OperationType::Conv2d, &c, 2100);
}

#[test]
fn grouped_conv2d_matches_reference() {
    let mut rng = Rng::new(3);
    for i in 0..60 {
        let mut c = random_case(&mut rng, false, true);
        (c.dh, c.dw) = (1, 1);
        check_conv(OperationType::GroupedConv2d, &c, 3000 + i);
    }
}

#[test]
fn depthwise_matches_reference() {
    let mut rng = Rng::new(4);
    for i in 0..160 {
        let c = random_case(&mut rng, true, false);
        check_conv(OperationType::DepthwiseConv2d, &c, 4000 + i);
    }
    // MobileNet-like: whole blocks of 16 channels (the vectorized path) plus a tail.
    for (i, (h, ch, s)) in [(12, 48, 1), (13, 35, 2), (9, 64, 1)]
        .into_iter()
        .enumerate()
    {
        let mut c = random_case(&mut rng, true, false);
        (c.h, c.w, c.c, c.kh, c.kw, c.sh, c.sw, c.multiplier) = (h, h, ch, 3, 3, s, s, 1);
        (c.dh, c.dw, c.padding) = (1, 1, Err(true));
        check_conv(OperationType::DepthwiseConv2d, &c, 4500 + i as u64);
    }
}

/// 3x3 depthwise convolutions of multiplier 1 with per-channel signed filters (those the
/// 8-bit dot-product kernel takes under the single-precision stage; under the reference
/// fixed-point stage these tests use, it hands them to the i16 kernels, checked here):
/// uint8 and int8 activations, channel counts around 64-channel blocks, strides,
/// dilations, padding on every side. The dot-product kernel itself is checked against
/// the definition in its module's tests.
#[test]
fn depthwise_3x3_per_channel_matches_reference() {
    let mut rng = Rng::new(6);
    let mut seed = 4600;
    for ch in [1, 16, 63, 64, 65, 130] {
        for (s, d) in [(1, 1), (2, 1), (1, 2)] {
            let mut c = random_case(&mut rng, true, false);
            (c.h, c.w, c.c, c.kh, c.kw, c.multiplier) = (7, 11, ch, 3, 3, 1);
            (c.sh, c.sw, c.dh, c.dw, c.per_channel, c.filter_kind) = (s, s, d, d, true, 0);
            c.padding = match seed % 3 {
                0 => Err(true),
                1 => Err(false),
                _ => Ok((1, 2, 2, 0)),
            };
            c.ty = if seed % 2 == 0 { U8 } else { I8 };
            c.nchw = false;
            check_conv(OperationType::DepthwiseConv2d, &c, seed);
            seed += 1;
        }
    }
}

#[test]
fn transpose_conv_matches_reference() {
    let mut rng = Rng::new(5);
    for case in 0..100 {
        let ty = if rng.bool(0.5) { U8 } else { I8 };
        let c = Case {
            n: rng.usize(1, 2),
            h: rng.usize(1, 6),
            w: rng.usize(1, 6),
            c: rng.usize(1, 9),
            o: rng.usize(1, 20),
            kh: rng.usize(1, 4),
            kw: rng.usize(1, 4),
            sh: rng.usize(1, 3),
            sw: rng.usize(1, 3),
            dh: 1,
            dw: 1,
            groups: 1,
            multiplier: 1,
            padding: if rng.bool(0.5) {
                Ok((
                    rng.usize(0, 1),
                    rng.usize(0, 1),
                    rng.usize(0, 1),
                    rng.usize(0, 1),
                ))
            } else {
                Err(rng.bool(0.5))
            },
            act: rng.i32(0, 3),
            ty,
            per_channel: rng.bool(0.5),
            nchw: rng.bool(0.2),
            filter_kind: rng.usize(0, 2),
            threads: 1,
        };
        // Output extent and leading padding per axis.
        let extent = |i: usize,
                      s: usize,
                      k: usize,
                      pads: Option<(usize, usize)>,
                      same: bool|
         -> Option<(usize, usize)> {
            let full = s * (i - 1) + k;
            match pads {
                Some((a, b)) => full.checked_sub(a + b).filter(|&o| o >= 1).map(|o| (o, a)),
                None => {
                    let o = if same { i * s } else { full };
                    let total = full.saturating_sub(o);
                    Some((o, if same { total / 2 } else { 0 }))
                }
            }
        };
        let (ph, pw, same) = match c.padding {
            Ok((t, b, l, r)) => (Some((t, b)), Some((l, r)), false),
            Err(s) => (None, None, s),
        };
        let (Some((oh, pt)), Some((ow, pl))) = (
            extent(c.h, c.sh, c.kh, ph, same),
            extent(c.w, c.sw, c.kw, pw, same),
        ) else {
            continue;
        };
        let mut rng2 = Rng::new(5000 + case);
        let q = random_quant(&mut rng2, &c, c.o);
        let fdims = [c.o, c.kh, c.kw, c.c];
        let (fty, wv) = filter_values(&mut rng2, &c, &q, fdims.iter().product());
        let xv = rng2.values(ty, c.n * c.h * c.w * c.c);
        let bias: Vec<i32> = (0..c.o).map(|_| rng2.i32(-20_000, 20_000)).collect();
        let mut acc = vec![0i64; c.n * oh * ow * c.o];
        for b in 0..c.n {
            for iy in 0..c.h {
                for ix in 0..c.w {
                    for ky in 0..c.kh {
                        for kx in 0..c.kw {
                            let oy = (iy * c.sh + ky) as isize - pt as isize;
                            let ox = (ix * c.sw + kx) as isize - pl as isize;
                            if oy < 0 || ox < 0 || oy >= oh as isize || ox >= ow as isize {
                                continue;
                            }
                            for oc in 0..c.o {
                                for ic in 0..c.c {
                                    let xv = i64::from(
                                        xv[((b * c.h + iy) * c.w + ix) * c.c + ic] - q.x.1,
                                    );
                                    let wv = i64::from(
                                        wv[((oc * c.kh + ky) * c.kw + kx) * c.c + ic] - q.w_zp,
                                    );
                                    acc[((b * oh + oy as usize) * ow + ox as usize) * c.o + oc] +=
                                        xv * wv;
                                }
                            }
                        }
                    }
                }
            }
        }
        let (lo, hi) = ref_act_range(c.act, q.out.0, q.out.1, ty);
        let want: Vec<i64> = acc
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                let oc = i % c.o;
                (ref_mbqm(a + i64::from(bias[oc]), q.real(oc, ty, c.per_channel))
                    + i64::from(q.out.1))
                .clamp(lo, hi)
            })
            .collect();
        let in_dims = [c.n, c.h, c.w, c.c];
        let out_dims = [c.n, oh, ow, c.o];
        let (xd, xvals, od, want) = if c.nchw {
            (
                vec![c.n, c.c, c.h, c.w],
                nhwc_to_nchw(&xv, in_dims),
                vec![c.n, c.o, oh, ow],
                nhwc_to_nchw_i64(&want, out_dims),
            )
        } else {
            (in_dims.to_vec(), xv, out_dims.to_vec(), want)
        };
        let mut args = vec![
            q_input(ty, &xd, q.x.0, q.x.1, &xvals),
            filter_arg(c.filter_kind, filter_operand(fty, &fdims, &q, 0), &wv),
            constant(
                qoperand(OperandType::TensorInt32, &[c.o], q.x.0 * q.w_scales[0], 0),
                bytemuck::cast_slice(&bias).to_vec(),
            ),
        ];
        match c.padding {
            Ok(_) => {
                args.extend(padding_args(&c));
                args.extend([QArg::I32(c.sw as i32), QArg::I32(c.sh as i32)]);
            }
            Err(s) => {
                let shape: Vec<i32> = od.iter().map(|&d| d as i32).collect();
                args.push(i32_const(&[4], &shape));
                args.extend([
                    QArg::I32(if s { 1 } else { 2 }),
                    QArg::I32(c.sw as i32),
                    QArg::I32(c.sh as i32),
                ]);
            }
        }
        args.extend([QArg::I32(c.act), QArg::Bool(c.nchw)]);
        let got = run_q(
            OperationType::TransposeConv2d,
            args,
            &[out(ty, &od, q.out.0, q.out.1)],
        )
        .unwrap_or_else(|e| panic!("{c:?}: {e}"));
        assert_q_eq(
            &q_values(&got[0]),
            &want,
            &format!("TRANSPOSE_CONV_2D {c:?}"),
        );
    }
}

#[test]
fn hand_checked_conv() {
    // uint8, 1x1 input, 2x1x1x1 filter with zero point 128, scales 0.5 * 0.25 / 0.125 = 1:
    // out = (x - 10) * (w - 128) + bias, then + 3.
    let got = run_q(
        OperationType::Conv2d,
        vec![
            q_input(U8, &[1, 1, 1, 1], 0.5, 10, &[14]),
            q_const(U8, &[2, 1, 1, 1], 0.25, 128, &[130, 125]),
            i32_const(&[2], &[1, -2]),
            QArg::I32(2),
            QArg::I32(1),
            QArg::I32(1),
            QArg::I32(0),
        ],
        &[out(U8, &[1, 1, 1, 2], 0.125, 3)],
    )
    .unwrap();
    // (4 * 2 + 1) + 3 = 12; (4 * -3 - 2) + 3 = -11 -> saturates to 0.
    assert_eq!(q_values(&got[0]), vec![12, 0]);
}

#[test]
fn invalid_quantized_conv_parameters_are_errors() {
    // Per-channel scales that do not match the output channels, and a zero output
    // scale, are reported, not panics.
    let bad_scales = run_q(
        OperationType::Conv2d,
        vec![
            q_input(I8, &[1, 2, 2, 1], 0.5, 0, &[1, 2, 3, 4]),
            constant(per_channel(&[2, 1, 1, 1], 0, vec![0.1]), vec![1, 2]),
            i32_const(&[2], &[0, 0]),
            QArg::I32(2),
            QArg::I32(1),
            QArg::I32(1),
            QArg::I32(0),
        ],
        &[out(I8, &[1, 2, 2, 2], 0.5, 0)],
    );
    assert!(bad_scales.is_err());
    let zero_scale = run_q(
        OperationType::Conv2d,
        vec![
            q_input(I8, &[1, 2, 2, 1], 0.5, 0, &[1, 2, 3, 4]),
            q_const(I8, &[1, 1, 1, 1], 0.5, 0, &[3]),
            i32_const(&[1], &[0]),
            QArg::I32(2),
            QArg::I32(1),
            QArg::I32(1),
            QArg::I32(0),
        ],
        &[out(I8, &[1, 2, 2, 1], 0.0, 0)],
    );
    assert!(zero_scale.is_err());
}
