//! Quantized FULLY_CONNECTED, BATCH_MATMUL, pools, SOFTMAX, L2_NORMALIZATION, MEAN,
//! REDUCE_MAX/MIN, ARGMAX/ARGMIN, resizes, CONCATENATION, PAD/PAD_V2, SELECT and the
//! data-movement operations on 8-bit types, against independent references of
//! TFLite's arithmetic (bit-exact), or of the real function where TFLite's fixed point
//! is checked elsewhere (within one unit).

mod quant_common;

use nnc_formats::nn::{Operand, OperandType, OperationType};
use quant_common::*;

fn ty_of(rng: &mut Rng) -> OperandType {
    if rng.bool(0.5) { U8 } else { I8 }
}

#[test]
fn fully_connected_matches_reference() {
    let mut rng = Rng::new(21);
    for case in 0..120 {
        let ty = ty_of(&mut rng);
        let (batch, k, units) = (rng.usize(1, 9), rng.usize(1, 80), rng.usize(1, 40));
        let per_channel = rng.bool(0.3);
        let qx = (rng.scale(-7.0, 0.0), rng.zp(ty));
        let qo = (rng.scale(-6.0, 1.0), rng.zp(ty));
        let scales: Vec<f32> = (0..if per_channel { units } else { 1 })
            .map(|_| rng.scale(-10.0, -3.0))
            .collect();
        let (wty, wzp) = if per_channel {
            (PER_CHANNEL, 0)
        } else if ty == U8 {
            (U8, rng.zp(U8))
        } else {
            (I8, 0)
        };
        let w: Vec<i32> = if per_channel {
            (0..units * k).map(|_| rng.i32(-127, 127)).collect()
        } else {
            rng.values(wty, units * k)
        };
        let x = rng.values(ty, batch * k);
        let bias: Option<Vec<i32>> = rng
            .bool(0.8)
            .then(|| (0..units).map(|_| rng.i32(-30_000, 30_000)).collect());
        let act = rng.i32(0, 3);
        let (lo, hi) = ref_act_range(act, qo.0, qo.1, ty);
        let mut want = Vec::new();
        for b in 0..batch {
            for u in 0..units {
                let mut acc: i64 = bias.as_ref().map_or(0, |v| i64::from(v[u]));
                for kk in 0..k {
                    acc += i64::from(x[b * k + kk] - qx.1) * i64::from(w[u * k + kk] - wzp);
                }
                // Per-tensor: the float product; per-channel: all double. Single rounding.
                let ws = scales[if per_channel { u } else { 0 }];
                let real = if per_channel {
                    f64::from(qx.0) * f64::from(ws) / f64::from(qo.0)
                } else {
                    f64::from(qx.0 * ws) / f64::from(qo.0)
                };
                want.push((ref_mbqm_single(acc, real) + i64::from(qo.1)).clamp(lo, hi));
            }
        }
        let weights = if per_channel {
            quant_common::per_channel(&[units, k], 0, scales.clone())
        } else {
            qoperand(wty, &[units, k], scales[0], wzp)
        };
        let bias_arg = match &bias {
            Some(b) => constant(
                qoperand(OperandType::TensorInt32, &[units], qx.0 * scales[0], 0),
                bytemuck::cast_slice(b).to_vec(),
            ),
            None => QArg::NoValue(OperandType::TensorInt32),
        };
        let args = vec![
            q_input(ty, &[batch, k], qx.0, qx.1, &x),
            constant(weights, q_bytes(&w)),
            bias_arg,
            QArg::I32(act),
        ];
        let (model, feeds) = qmodel(
            OperationType::FullyConnected,
            args,
            &[out(ty, &[batch, units], qo.0, qo.1)],
        );
        let got =
            run_model(&model, &feeds, 1 + case % 2).unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_q_eq(
            &q_values(&got[0]),
            &want,
            &format!("FULLY_CONNECTED case {case}"),
        );
    }
}

#[test]
fn batch_matmul_matches_reference() {
    let mut rng = Rng::new(22);
    for case in 0..60 {
        let ty = ty_of(&mut rng);
        let (bt, m, k, n) = (
            rng.usize(1, 3),
            rng.usize(1, 9),
            rng.usize(1, 20),
            rng.usize(1, 19),
        );
        let (adj_a, adj_b) = (rng.bool(0.4), rng.bool(0.4));
        let qa = (rng.scale(-6.0, 0.0), rng.zp(ty));
        let qb = (rng.scale(-6.0, 0.0), rng.zp(ty));
        let qo = (rng.scale(-6.0, 2.0), rng.zp(ty));
        let sa = if adj_a { [bt, k, m] } else { [bt, m, k] };
        let sb = if adj_b { [bt, n, k] } else { [bt, k, n] };
        let a = rng.values(ty, bt * m * k);
        let b = rng.values(ty, bt * k * n);
        let (lo, hi) = range(ty);
        let mut want = Vec::new();
        for t in 0..bt {
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0i64;
                    for kk in 0..k {
                        let av = if adj_a {
                            a[(t * k + kk) * m + i]
                        } else {
                            a[(t * m + i) * k + kk]
                        };
                        let bv = if adj_b {
                            b[(t * n + j) * k + kk]
                        } else {
                            b[(t * k + kk) * n + j]
                        };
                        acc += i64::from(av - qa.1) * i64::from(bv - qb.1);
                    }
                    let real = f64::from(qa.0 * qb.0) / f64::from(qo.0);
                    want.push(
                        (ref_mbqm(acc, real) + i64::from(qo.1)).clamp(i64::from(lo), i64::from(hi)),
                    );
                }
            }
        }
        let got = run_q(
            OperationType::BatchMatmul,
            vec![
                q_input(ty, &sa, qa.0, qa.1, &a),
                q_input(ty, &sb, qb.0, qb.1, &b),
                QArg::Bool(adj_a),
                QArg::Bool(adj_b),
            ],
            &[out(ty, &[bt, m, n], qo.0, qo.1)],
        )
        .unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_q_eq(
            &q_values(&got[0]),
            &want,
            &format!("BATCH_MATMUL case {case}"),
        );
    }
}

#[test]
fn pools_match_reference() {
    let mut rng = Rng::new(23);
    for case in 0..120 {
        let max = case % 2 == 0;
        let ty = ty_of(&mut rng);
        let (n, h, w, c) = (
            rng.usize(1, 2),
            rng.usize(1, 9),
            rng.usize(1, 9),
            rng.usize(1, 20),
        );
        let (fh, fw, sh, sw) = (
            rng.usize(1, 4),
            rng.usize(1, 4),
            rng.usize(1, 3),
            rng.usize(1, 3),
        );
        let explicit = rng.bool(0.5);
        let (pt, pb, pl, pr) = if explicit {
            (
                rng.usize(0, fh - 1),
                rng.usize(0, fh - 1),
                rng.usize(0, fw - 1),
                rng.usize(0, fw - 1),
            )
        } else {
            (0, 0, 0, 0)
        };
        let same = rng.bool(0.5);
        let (oh, ow, pt, pl) = if explicit {
            if h + pt + pb < fh || w + pl + pr < fw {
                continue;
            }
            (
                (h + pt + pb - fh) / sh + 1,
                (w + pl + pr - fw) / sw + 1,
                pt,
                pl,
            )
        } else if same {
            let (oh, ow) = (h.div_ceil(sh), w.div_ceil(sw));
            let nh = ((oh - 1) * sh + fh).saturating_sub(h);
            let nw = ((ow - 1) * sw + fw).saturating_sub(w);
            (oh, ow, nh / 2, nw / 2)
        } else {
            if h < fh || w < fw {
                continue;
            }
            ((h - fh + 1).div_ceil(sh), (w - fw + 1).div_ceil(sw), 0, 0)
        };
        let q = (rng.scale(-6.0, 0.0), rng.zp(ty));
        let act = rng.i32(0, 3);
        let x = rng.values(ty, n * h * w * c);
        let (lo, hi) = ref_act_range(act, q.0, q.1, ty);
        let mut want = Vec::new();
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for ch in 0..c {
                        let mut vals = Vec::new();
                        for ky in 0..fh {
                            for kx in 0..fw {
                                let iy = (oy * sh + ky) as isize - pt as isize;
                                let ix = (ox * sw + kx) as isize - pl as isize;
                                if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                                    vals.push(i64::from(
                                        x[((b * h + iy as usize) * w + ix as usize) * c + ch],
                                    ));
                                }
                            }
                        }
                        let v = if max {
                            vals.iter().copied().max().unwrap_or(i64::from(range(ty).0))
                        } else if vals.is_empty() {
                            i64::from(q.1)
                        } else {
                            // Nearest, ties away from zero.
                            let (s, k) = (vals.iter().sum::<i64>(), vals.len() as i64);
                            if s > 0 {
                                (s + k / 2) / k
                            } else {
                                (s - k / 2) / k
                            }
                        };
                        want.push(v.clamp(lo, hi));
                    }
                }
            }
        }
        let mut args = vec![q_input(ty, &[n, h, w, c], q.0, q.1, &x)];
        if explicit {
            args.extend([pl, pr, pt, pb].map(|v| QArg::I32(v as i32)));
        } else {
            args.push(QArg::I32(if same { 1 } else { 2 }));
        }
        args.extend([sw, sh, fw, fh].map(|v| QArg::I32(v as i32)));
        args.push(QArg::I32(act));
        let op = if max {
            OperationType::MaxPool2d
        } else {
            OperationType::AveragePool2d
        };
        let (model, feeds) = qmodel(op, args, &[out(ty, &[n, oh, ow, c], q.0, q.1)]);
        let got =
            run_model(&model, &feeds, 1 + case % 2).unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_q_eq(&q_values(&got[0]), &want, &format!("{op} case {case}"));
    }
}

#[test]
fn softmax_is_within_one_unit_of_the_real_function() {
    // Bit-exactness with TFLite's fixed point is checked by quant_tflite_vectors.rs.
    let mut rng = Rng::new(24);
    for case in 0..60 {
        let ty = ty_of(&mut rng);
        let (rows, len) = (rng.usize(1, 4), rng.usize(1, 50));
        let qi = (rng.scale(-6.0, 0.0), rng.zp(ty));
        let beta = [1.0f32, 0.5, 2.0, 0.3][case % 4];
        let standard = case % 5 != 0;
        let qo = if standard {
            (1.0 / 256.0, range(ty).0)
        } else {
            (rng.scale(-9.0, -6.0), rng.zp(ty))
        };
        let x = rng.values(ty, rows * len);
        let got = run_q(
            OperationType::Softmax,
            vec![q_input(ty, &[rows, len], qi.0, qi.1, &x), QArg::F32(beta)],
            &[out(ty, &[rows, len], qo.0, qo.1)],
        )
        .unwrap();
        let got = q_values(&got[0]);
        let (lo, hi) = range(ty);
        for r in 0..rows {
            let row = &x[r * len..(r + 1) * len];
            let max = *row.iter().max().unwrap();
            let e: Vec<f64> = row
                .iter()
                .map(|&v| (f64::from(beta) * f64::from(qi.0) * f64::from(v - max)).exp())
                .collect();
            let sum: f64 = e.iter().sum();
            for (c, ev) in e.iter().enumerate() {
                let want = (ev / sum / f64::from(qo.0) + f64::from(qo.1))
                    .clamp(f64::from(lo), f64::from(hi));
                let g = f64::from(got[r * len + c]);
                assert!(
                    (g - want).abs() <= 1.0,
                    "case {case} row {r} col {c}: {g} vs {want}"
                );
            }
        }
    }
}

#[test]
fn l2_normalization_is_within_one_unit_of_the_real_function() {
    let mut rng = Rng::new(25);
    for case in 0..40 {
        let ty = ty_of(&mut rng);
        let (rows, len) = (rng.usize(1, 4), rng.usize(1, 40));
        let qi = (rng.scale(-6.0, 0.0), rng.zp(ty));
        let qo = (1.0 / 128.0, if ty == U8 { 128 } else { 0 });
        let x = rng.values(ty, rows * len);
        let got = run_q(
            OperationType::L2Normalization,
            vec![q_input(ty, &[rows, len], qi.0, qi.1, &x)],
            &[out(ty, &[rows, len], qo.0, qo.1)],
        )
        .unwrap();
        let got = q_values(&got[0]);
        let (lo, hi) = range(ty);
        for r in 0..rows {
            let d: Vec<f64> = x[r * len..(r + 1) * len]
                .iter()
                .map(|&v| f64::from(v - qi.1))
                .collect();
            let norm = d.iter().map(|v| v * v).sum::<f64>().sqrt();
            for (c, v) in d.iter().enumerate() {
                if norm <= 1.0 {
                    continue; // TFLite treats a squared norm of 0 or 1 as 1 (no division).
                }
                let want = (v / norm * 128.0 + f64::from(qo.1)).clamp(f64::from(lo), f64::from(hi));
                let g = f64::from(got[r * len + c]);
                assert!((g - want).abs() <= 1.0, "case {case}: {g} vs {want}");
            }
        }
    }
}

/// Reduces `x` over the flagged axes with `f` (first value as the start).
fn reduce_ref(
    x: &[i32],
    shape: &[usize],
    reduced: &[bool],
    f: impl Fn(i64, i64) -> i64,
) -> (Vec<i64>, usize) {
    let kept: Vec<usize> = shape
        .iter()
        .zip(reduced)
        .map(|(&d, &r)| if r { 1 } else { d })
        .collect();
    let n_out: usize = kept.iter().product();
    let mut out: Vec<Option<i64>> = vec![None; n_out];
    for (i, &v) in x.iter().enumerate() {
        let mut rem = i;
        let mut idx = 0;
        let mut stride = 1;
        for d in (0..shape.len()).rev() {
            let c = rem % shape[d];
            rem /= shape[d];
            if !reduced[d] {
                idx += c * stride;
            }
            stride *= kept[d];
        }
        out[idx] = Some(match out[idx] {
            None => i64::from(v),
            Some(a) => f(a, i64::from(v)),
        });
    }
    let count = shape
        .iter()
        .zip(reduced)
        .filter(|(_, r)| **r)
        .map(|(d, _)| d)
        .product();
    (out.into_iter().map(|v| v.unwrap_or(0)).collect(), count)
}

#[test]
fn reductions_match_reference() {
    let mut rng = Rng::new(26);
    for case in 0..150 {
        let op = [
            OperationType::Mean,
            OperationType::ReduceMax,
            OperationType::ReduceMin,
        ][case % 3];
        let ty = ty_of(&mut rng);
        let r = rng.usize(1, 4);
        let shape: Vec<usize> = (0..r).map(|_| rng.usize(1, 7)).collect();
        let mut reduced = vec![false; r];
        let mut axes = Vec::new();
        for _ in 0..rng.usize(1, r) {
            let a = rng.usize(0, r - 1);
            reduced[a] = true;
            // Negative spellings too.
            axes.push(if rng.bool(0.3) {
                a as i32 - r as i32
            } else {
                a as i32
            });
        }
        let keep = rng.bool(0.5);
        let qi = (rng.scale(-6.0, 1.0), rng.zp(ty));
        let qo = if op != OperationType::Mean && rng.bool(0.7) {
            qi
        } else {
            (rng.scale(-6.0, 1.0), rng.zp(ty))
        };
        let x = rng.values(ty, shape.iter().product());
        let (lo, hi) = range(ty);
        let want: Vec<i64> = if op == OperationType::Mean {
            let (sums, count) = reduce_ref(&x, &shape, &reduced, |a, v| a + v);
            let (q, s) = ref_quantize_multiplier(f64::from(qi.0) / f64::from(qo.0));
            let count = count as i64;
            // TFLite folds 1 / count into the multiplier.
            let shift = (63 - count.leading_zeros() as i32)
                .min(32)
                .min(31 + s)
                .max(0);
            let q2 = (q << shift) / count;
            let s2 = s - shift;
            sums.iter()
                .map(|&sum| {
                    let v = sum - i64::from(qi.1) * count;
                    let scaled = ref_rounding_divide(ref_srdhm(v << s2.max(0), q2), (-s2).max(0));
                    (scaled + i64::from(qo.1)).clamp(i64::from(lo), i64::from(hi))
                })
                .collect()
        } else {
            let max = op == OperationType::ReduceMax;
            let (v, _) = reduce_ref(
                &x,
                &shape,
                &reduced,
                |a, b| if max { a.max(b) } else { a.min(b) },
            );
            v.into_iter()
                .map(|v| {
                    if qi == qo {
                        v
                    } else {
                        (ref_mbqm(v - i64::from(qi.1), f64::from(qi.0) / f64::from(qo.0))
                            + i64::from(qo.1))
                        .clamp(i64::from(lo), i64::from(hi))
                    }
                })
                .collect()
        };
        let out_dims: Vec<usize> = if keep {
            shape
                .iter()
                .zip(&reduced)
                .map(|(&d, &r)| if r { 1 } else { d })
                .collect()
        } else {
            let v: Vec<usize> = shape
                .iter()
                .zip(&reduced)
                .filter(|(_, r)| !**r)
                .map(|(d, _)| *d)
                .collect();
            if v.is_empty() { vec![1] } else { v }
        };
        let keep_arg = if op == OperationType::Mean {
            QArg::I32(i32::from(keep))
        } else {
            QArg::Bool(keep)
        };
        let got = run_q(
            op,
            vec![
                q_input(ty, &shape, qi.0, qi.1, &x),
                i32_const(&[axes.len()], &axes),
                keep_arg,
            ],
            &[out(ty, &out_dims, qo.0, qo.1)],
        )
        .unwrap_or_else(|e| panic!("{op} case {case}: {e}"));
        assert_q_eq(
            &q_values(&got[0]),
            &want,
            &format!("{op} case {case} {shape:?} {axes:?}"),
        );
    }
}

#[test]
fn argmax_and_argmin_take_the_first_extremum() {
    let mut rng = Rng::new(27);
    for case in 0..40 {
        let ty = ty_of(&mut rng);
        let r = rng.usize(1, 3);
        let shape: Vec<usize> = (0..r).map(|_| rng.usize(1, 6)).collect();
        let axis = rng.usize(0, r - 1);
        let max = case % 2 == 0;
        // Few distinct values: many ties.
        let x: Vec<i32> = (0..shape.iter().product())
            .map(|_| range(ty).0 + rng.i32(0, 3))
            .collect();
        let (outer, mid, inner) = (
            shape[..axis].iter().product::<usize>(),
            shape[axis],
            shape[axis + 1..].iter().product::<usize>(),
        );
        let mut want = Vec::new();
        for o in 0..outer {
            for i in 0..inner {
                let vals: Vec<i32> = (0..mid).map(|j| x[(o * mid + j) * inner + i]).collect();
                let best = if max {
                    *vals.iter().max().unwrap()
                } else {
                    *vals.iter().min().unwrap()
                };
                want.push(vals.iter().position(|&v| v == best).unwrap() as i64);
            }
        }
        let mut od: Vec<usize> = shape.clone();
        od.remove(axis);
        if od.is_empty() {
            od.push(1);
        }
        let op = if max {
            OperationType::Argmax
        } else {
            OperationType::Argmin
        };
        let got = run_q(
            op,
            vec![q_input(ty, &shape, 0.5, 3, &x), QArg::I32(axis as i32)],
            &[out(OperandType::TensorInt32, &od, 0.0, 0)],
        )
        .unwrap();
        assert_q_eq(&i32_values(&got[0]), &want, &format!("{op} case {case}"));
    }
}

/// TFLite's resize coordinate scale in float.
fn scale_f32(input: usize, output: usize, align: bool) -> f32 {
    if align && output > 1 {
        (input as f32 - 1.0) / (output as f32 - 1.0)
    } else {
        input as f32 / output as f32
    }
}

#[test]
fn resizes_match_reference() {
    let mut rng = Rng::new(28);
    for case in 0..120 {
        let ty = ty_of(&mut rng);
        let bilinear = case % 2 == 0;
        let (n, h, w, c) = (1, rng.usize(1, 7), rng.usize(1, 7), rng.usize(1, 4));
        let (oh, ow) = (rng.usize(1, 13), rng.usize(1, 13));
        let align = rng.bool(0.3);
        let half = !align && rng.bool(0.5);
        let q = (rng.scale(-6.0, 0.0), rng.zp(ty));
        let x = rng.values(ty, n * h * w * c);
        let px = |y: usize, xx: usize, ch: usize| i64::from(x[(y * w + xx) * c + ch]);
        let mut want = Vec::new();
        for y in 0..oh {
            for xo in 0..ow {
                for ch in 0..c {
                    let v = if !bilinear {
                        let near = |d: usize, i: usize, o: usize| {
                            let v =
                                (d as f32 + if half { 0.5 } else { 0.0 }) * scale_f32(i, o, align);
                            let v = if align { v.round() } else { v.floor() };
                            (v as i64).clamp(0, i as i64 - 1) as usize
                        };
                        px(near(y, h, oh), near(xo, w, ow), ch)
                    } else if ty == I8 {
                        // ResizeBilinearInteger: Q10 scales and coordinates.
                        let s10 = |i: usize, o: usize| {
                            let (i, o) = if align && o > 1 {
                                (i - 1, o - 1)
                            } else {
                                (i, o)
                            };
                            ((1i64 << 10) * i as i64 + o as i64 / 2) / o as i64
                        };
                        let coord = |d: usize, s: i64, i: usize| {
                            let v = if half {
                                d as i64 * s + s / 2 - 512
                            } else {
                                d as i64 * s
                            };
                            let lo = (if v >= 0 { v / 1024 } else { -((-v) / 1024) }).max(0);
                            let up = ((v + 1023) / 1024).min(i as i64 - 1);
                            (v, lo as usize, up.max(0) as usize)
                        };
                        let (sy, y0, y1) = coord(y, s10(h, oh), h);
                        let (sx, x0, x1) = coord(xo, s10(w, ow), w);
                        let (dy, dx) = (sy - 1024 * y0 as i64, sx - 1024 * x0 as i64);
                        let sum = px(y0, x0, ch) * (1024 - dy) * (1024 - dx)
                            + px(y1, x0, ch) * dy * (1024 - dx)
                            + px(y0, x1, ch) * (1024 - dy) * dx
                            + px(y1, x1, ch) * dy * dx;
                        let r = if sum > 0 { 1 << 19 } else { -(1 << 19) };
                        let q = sum + r;
                        if q >= 0 {
                            q / (1 << 20)
                        } else {
                            -((-q) / (1 << 20))
                        }
                    } else {
                        // ResizeBilinear<uint8_t>: float weights, + 0.5, truncated.
                        let coord = |d: usize, i: usize, o: usize| {
                            let s = scale_f32(i, o, align);
                            let v = if half {
                                (d as f32 + 0.5) * s - 0.5
                            } else {
                                d as f32 * s
                            };
                            (
                                v,
                                (v.floor() as i64).max(0) as usize,
                                (v.ceil() as i64).min(i as i64 - 1).max(0) as usize,
                            )
                        };
                        let (sy, y0, y1) = coord(y, h, oh);
                        let (sx, x0, x1) = coord(xo, w, ow);
                        let (dy, dx) = (sy - y0 as f32, sx - x0 as f32);
                        let f = |v: i64| v as f32;
                        let s = f(px(y0, x0, ch)) * (1.0 - dy) * (1.0 - dx)
                            + f(px(y1, x0, ch)) * dy * (1.0 - dx)
                            + f(px(y0, x1, ch)) * (1.0 - dy) * dx
                            + f(px(y1, x1, ch)) * dy * dx
                            + 0.5;
                        s as i64
                    };
                    want.push(v);
                }
            }
        }
        let op = if bilinear {
            OperationType::ResizeBilinear
        } else {
            OperationType::ResizeNearestNeighbor
        };
        let args = vec![
            q_input(ty, &[n, h, w, c], q.0, q.1, &x),
            QArg::I32(ow as i32),
            QArg::I32(oh as i32),
            QArg::Bool(false),
            QArg::Bool(align),
            QArg::Bool(half),
        ];
        let got = run_q(op, args, &[out(ty, &[n, oh, ow, c], q.0, q.1)])
            .unwrap_or_else(|e| panic!("{op} case {case}: {e}"));
        assert_q_eq(
            &q_values(&got[0]),
            &want,
            &format!("{op} case {case} {h}x{w} -> {oh}x{ow} align {align} half {half}"),
        );
    }
}

#[test]
fn concatenation_requantizes_inputs_with_other_quantization() {
    let mut rng = Rng::new(29);
    for case in 0..60 {
        let ty = ty_of(&mut rng);
        let r = rng.usize(1, 4);
        let base: Vec<usize> = (0..r).map(|_| rng.usize(1, 4)).collect();
        let axis = rng.usize(0, r - 1);
        let qo = (rng.scale(-6.0, 0.0), rng.zp(ty));
        let mut parts = Vec::new();
        for _ in 0..rng.usize(2, 4) {
            let mut s = base.clone();
            s[axis] = rng.usize(1, 3);
            let q = if rng.bool(0.4) {
                qo
            } else {
                (rng.scale(-6.0, 0.0), rng.zp(ty))
            };
            let v = rng.values(ty, s.iter().product());
            parts.push((s, q, v));
        }
        let mut od = base.clone();
        od[axis] = parts.iter().map(|p| p.0[axis]).sum();
        let outer: usize = base[..axis].iter().product();
        let (lo, hi) = range(ty);
        let mut want = Vec::new();
        for o in 0..outer {
            for (s, q, v) in &parts {
                let len: usize = s[axis..].iter().product();
                for &x in &v[o * len..(o + 1) * len] {
                    want.push(if *q == qo {
                        i64::from(x)
                    } else {
                        // ConcatenationWithScaling, in float.
                        let scale = q.0 * (1.0 / qo.0);
                        let bias = -(q.1 as f32) * scale;
                        ((x as f32 * scale + bias).round() as i64 + i64::from(qo.1))
                            .clamp(i64::from(lo), i64::from(hi))
                    });
                }
            }
        }
        let mut args: Vec<QArg> = parts
            .iter()
            .map(|(s, q, v)| q_input(ty, s, q.0, q.1, v))
            .collect();
        args.push(QArg::I32(if rng.bool(0.3) {
            axis as i32 - r as i32
        } else {
            axis as i32
        }));
        let got = run_q(
            OperationType::Concatenation,
            args,
            &[out(ty, &od, qo.0, qo.1)],
        )
        .unwrap_or_else(|e| panic!("case {case}: {e}"));
        assert_q_eq(
            &q_values(&got[0]),
            &want,
            &format!("CONCATENATION case {case}"),
        );
    }
}

#[test]
fn pad_fills_with_the_zero_point_and_pad_v2_with_its_value() {
    for (ty, zp) in [(U8, 7), (I8, -128), (I8, 127)] {
        let x = vec![1, 2, 3, 4, 5, 6];
        let got = run_q(
            OperationType::Pad,
            vec![
                q_input(ty, &[1, 2, 3], 0.5, zp, &x),
                i32_const(&[3, 2], &[0, 0, 1, 0, 0, 2]),
            ],
            &[out(ty, &[1, 3, 5], 0.5, zp)],
        )
        .unwrap();
        let z = zp;
        assert_eq!(
            q_values(&got[0]),
            vec![z, z, z, z, z, 1, 2, 3, z, z, 4, 5, 6, z, z]
        );
        let got = run_q(
            OperationType::PadV2,
            vec![
                q_input(ty, &[2, 3], 0.5, zp, &x),
                i32_const(&[2, 2], &[1, 0, 0, 1]),
                QArg::I32(9),
            ],
            &[out(ty, &[3, 4], 0.5, zp)],
        )
        .unwrap();
        assert_eq!(q_values(&got[0]), vec![9, 9, 9, 9, 1, 2, 3, 9, 4, 5, 6, 9]);
    }
}

#[test]
fn data_movement_moves_quantized_bytes() {
    for ty in [U8, I8] {
        let (lo, _) = range(ty);
        let x: Vec<i32> = (0..24).map(|i| lo + i * 5).collect();
        let q = (0.25, if ty == U8 { 3 } else { -3 });
        let run = |op: OperationType, args: Vec<QArg>, od: &[usize]| {
            q_values(
                &run_q(op, args, &[out(ty, od, q.0, q.1)]).unwrap_or_else(|e| panic!("{op}: {e}"))
                    [0],
            )
        };
        let xin = || q_input(ty, &[2, 3, 4], q.0, q.1, &x);
        assert_eq!(
            run(
                OperationType::Reshape,
                vec![xin(), i32_const(&[2], &[4, 6])],
                &[4, 6]
            ),
            x
        );
        let t = run(
            OperationType::Transpose,
            vec![xin(), i32_const(&[3], &[2, 0, 1])],
            &[4, 2, 3],
        );
        assert_eq!(t[..4], [x[0], x[4], x[8], x[12]]);
        let s = run(
            OperationType::Slice,
            vec![
                xin(),
                i32_const(&[3], &[1, 1, 2]),
                i32_const(&[3], &[1, 2, 2]),
            ],
            &[1, 2, 2],
        );
        assert_eq!(s, vec![x[18], x[19], x[22], x[23]]);
        let g = run(
            OperationType::Gather,
            vec![xin(), QArg::I32(1), i32_const(&[2], &[2, 0])],
            &[2, 2, 4],
        );
        assert_eq!(g[..8], [x[8], x[9], x[10], x[11], x[0], x[1], x[2], x[3]]);
        let sq = run(
            OperationType::Squeeze,
            vec![q_input(ty, &[1, 6, 1], q.0, q.1, &x[..6])],
            &[6],
        );
        assert_eq!(sq, x[..6]);
        let d2s = run(
            OperationType::DepthToSpace,
            vec![q_input(ty, &[1, 1, 1, 4], q.0, q.1, &x[..4]), QArg::I32(2)],
            &[1, 2, 2, 1],
        );
        assert_eq!(d2s, x[..4]);
        let s2d = run(
            OperationType::SpaceToDepth,
            vec![q_input(ty, &[1, 2, 2, 2], q.0, q.1, &x[..8]), QArg::I32(2)],
            &[1, 1, 1, 8],
        );
        assert_eq!(s2d, x[..8]);
        let sh = run(
            OperationType::ChannelShuffle,
            vec![
                q_input(ty, &[1, 6], q.0, q.1, &x[..6]),
                QArg::I32(2),
                QArg::I32(1),
            ],
            &[1, 6],
        );
        assert_eq!(sh, vec![x[0], x[3], x[1], x[4], x[2], x[5]]);
    }
}

#[test]
fn data_movement_requires_equal_quantization() {
    // NNAPI requires RESHAPE's output to keep the input's scale and zero point.
    let r = run_q(
        OperationType::Reshape,
        vec![
            q_input(I8, &[2, 2], 0.5, 0, &[1, 2, 3, 4]),
            i32_const(&[1], &[4]),
        ],
        &[out(I8, &[4], 0.25, 0)],
    );
    assert!(r.is_err());
}

#[test]
fn unsupported_quantized_combinations_are_errors_not_panics() {
    // Input and output of different 8-bit types, and a non-standard L2 output scale.
    let r = run_q(
        OperationType::Relu,
        vec![q_input(I8, &[2], 0.5, 0, &[1, 2])],
        &[out(U8, &[2], 0.5, 0)],
    );
    assert!(r.is_err());
    let r = run_q(
        OperationType::L2Normalization,
        vec![q_input(I8, &[2], 0.5, 0, &[1, 2])],
        &[out(I8, &[2], 0.5, 0)],
    );
    assert!(r.is_err());
    // A 0 scale on an input.
    let r = run_q(
        OperationType::Add,
        vec![
            q_input(I8, &[2], 0.0, 0, &[1, 2]),
            q_input(I8, &[2], 0.5, 0, &[1, 2]),
            QArg::I32(0),
        ],
        &[out(I8, &[2], 0.5, 0)],
    );
    assert!(r.is_err());
}

#[test]
fn select_on_8bit_values_requantizes_into_the_output() {
    for ty in [
        OperandType::TensorQuant8Asymm,
        OperandType::TensorQuant8AsymmSigned,
    ] {
        let zp = if ty == OperandType::TensorQuant8Asymm {
            128
        } else {
            0
        };
        let cond = input(
            Operand::new(OperandType::TensorBool8, vec![4]),
            vec![1, 0, 1, 0],
        );
        // Both hold the values 1, 2, -3, 4, at scales 0.5 and 0.25.
        let a = q_input(ty, &[4], 0.5, zp, &[zp + 2, zp + 4, zp - 6, zp + 8]);
        let b = q_input(ty, &[4], 0.25, zp, &[zp + 4, zp + 8, zp - 12, zp + 16]);
        let got = run_q(
            OperationType::Select,
            vec![cond, a, b],
            &[out(ty, &[4], 0.5, zp)],
        )
        .unwrap();
        // a's bytes as they are, b's requantized to the output's scale.
        assert_eq!(
            q_values(&got[0]),
            vec![zp + 2, zp + 4, zp - 6, zp + 8],
            "{ty}"
        );
    }
}
