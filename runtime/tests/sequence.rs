//! UNIDIRECTIONAL_SEQUENCE_LSTM and UNIDIRECTIONAL_SEQUENCE_RNN against float64
//! references written step by step from NNAPI's definitions.
#![allow(clippy::needless_range_loop)] // the references index as the equations do

mod common;

use common::*;
use nnc_formats::nn::{OperandType, OperationType};

/// Recurrences accumulate rounding over their steps: a little above one step's tolerance.
fn assert_near(actual: &[f32], expected: &[f64], context: &str) {
    assert_eq!(actual.len(), expected.len(), "{context}: length");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        let diff = (f64::from(*a) - e).abs();
        assert!(
            a.is_finite() && diff <= 2e-5 + 1e-5 * e.abs(),
            "{context}: element {i}: got {a}, expected {e} (diff {diff:e})"
        );
    }
}

fn act(code: i32, v: f64) -> f64 {
    match code {
        1 => v.max(0.0),
        3 => v.clamp(0.0, 6.0),
        4 => v.tanh(),
        6 => 1.0 / (1.0 + (-v).exp()),
        _ => v,
    }
}

fn sig(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

/// `w[u, k] . x` for a row-major `[units, k]` matrix.
fn dot_rows(w: &[f32], x: &[f64], units: usize) -> Vec<f64> {
    let k = x.len();
    (0..units)
        .map(|u| (0..k).map(|j| f64::from(w[u * k + j]) * x[j]).sum())
        .collect()
}

fn to64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

#[derive(Clone, Copy, Debug)]
struct LstmCase {
    time: usize,
    batch: usize,
    input: usize,
    units: usize,
    output: usize,
    time_major: bool,
    cifg: bool,
    peephole: bool,
    projection: bool,
    projection_bias: bool,
    layer_norm: bool,
    activation: i32,
    cell_clip: f32,
    projection_clip: f32,
    state_outputs: bool,
    constant_weights: bool,
}

struct LstmData {
    x: Vec<f32>,
    w_in: [Vec<f32>; 4],
    w_rec: [Vec<f32>; 4],
    peep: [Vec<f32>; 3],
    bias: [Vec<f32>; 4],
    proj: Vec<f32>,
    proj_bias: Vec<f32>,
    h0: Vec<f32>,
    c0: Vec<f32>,
    norm: [Vec<f32>; 4],
}

fn lstm_reference(c: &LstmCase, d: &LstmData) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (t_n, b_n, i_n, u_n, o_n) = (c.time, c.batch, c.input, c.units, c.output);
    let mut out = vec![0.0; t_n * b_n * o_n];
    let mut h_all = vec![0.0; b_n * o_n];
    let mut c_all = vec![0.0; b_n * u_n];
    for b in 0..b_n {
        let mut h = to64(&d.h0[b * o_n..(b + 1) * o_n]);
        let mut cell = to64(&d.c0[b * u_n..(b + 1) * u_n]);
        for t in 0..t_n {
            let row = if c.time_major {
                t * b_n + b
            } else {
                b * t_n + t
            };
            let x = to64(&d.x[row * i_n..(row + 1) * i_n]);
            // Pre-activation of gate g with peephole state `pc`.
            let gate = |g: usize, pc: Option<(&[f32], &[f64])>| -> Vec<f64> {
                let wx = dot_rows(&d.w_in[g], &x, u_n);
                let rh = dot_rows(&d.w_rec[g], &h, u_n);
                let mut v: Vec<f64> = (0..u_n).map(|u| wx[u] + rh[u]).collect();
                if let Some((p, cs)) = pc {
                    for u in 0..u_n {
                        v[u] += f64::from(p[u]) * cs[u];
                    }
                }
                if c.layer_norm {
                    let mean = v.iter().sum::<f64>() / u_n as f64;
                    let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / u_n as f64;
                    for u in 0..u_n {
                        v[u] = (v[u] - mean) / (var + 1e-8).sqrt() * f64::from(d.norm[g][u]);
                    }
                }
                for u in 0..u_n {
                    v[u] += f64::from(d.bias[g][u]);
                }
                v
            };
            let peep = |k: usize| {
                c.peephole
                    .then_some((d.peep[k].as_slice(), cell.as_slice()))
            };
            let f: Vec<f64> = gate(1, peep(1)).into_iter().map(sig).collect();
            let i: Vec<f64> = if c.cifg {
                f.iter().map(|f| 1.0 - f).collect()
            } else {
                gate(0, peep(0)).into_iter().map(sig).collect()
            };
            let g = gate(2, None);
            let mut new_c: Vec<f64> = (0..u_n)
                .map(|u| f[u] * cell[u] + i[u] * act(c.activation, g[u]))
                .collect();
            if c.cell_clip > 0.0 {
                let clip = f64::from(c.cell_clip);
                new_c.iter_mut().for_each(|v| *v = v.clamp(-clip, clip));
            }
            let po = c
                .peephole
                .then_some((d.peep[2].as_slice(), new_c.as_slice()));
            let o: Vec<f64> = gate(3, po).into_iter().map(sig).collect();
            let hidden: Vec<f64> = (0..u_n)
                .map(|u| o[u] * act(c.activation, new_c[u]))
                .collect();
            h = if c.projection {
                let mut p = dot_rows(&d.proj, &hidden, o_n);
                for k in 0..o_n {
                    if c.projection_bias {
                        p[k] += f64::from(d.proj_bias[k]);
                    }
                    if c.projection_clip > 0.0 {
                        let clip = f64::from(c.projection_clip);
                        p[k] = p[k].clamp(-clip, clip);
                    }
                }
                p
            } else {
                hidden
            };
            cell = new_c;
            out[row * o_n..(row + 1) * o_n].copy_from_slice(&h);
        }
        h_all[b * o_n..(b + 1) * o_n].copy_from_slice(&h);
        c_all[b * u_n..(b + 1) * u_n].copy_from_slice(&cell);
    }
    (out, h_all, c_all)
}

fn run_lstm_case(c: &LstmCase, rng: &mut Rng, context: &str) {
    let (t_n, b_n, i_n, u_n, o_n) = (c.time, c.batch, c.input, c.units, c.output);
    let data = LstmData {
        x: rng.f32s(t_n * b_n * i_n),
        w_in: std::array::from_fn(|_| rng.f32s(u_n * i_n)),
        w_rec: std::array::from_fn(|_| rng.f32s(u_n * o_n)),
        peep: std::array::from_fn(|_| rng.f32s(u_n)),
        bias: std::array::from_fn(|_| rng.f32s(u_n)),
        proj: rng.f32s(o_n * u_n),
        proj_bias: rng.f32s(o_n),
        h0: rng.f32s(b_n * o_n),
        c0: rng.f32s(b_n * u_n),
        norm: std::array::from_fn(|_| rng.f32s(u_n)),
    };
    let (e_out, e_h, e_c) = lstm_reference(c, &data);
    let none = || Arg::NoValue(OperandType::TensorFloat32);
    let w = |dims: &[usize], v: &[f32]| f32_arg(c.constant_weights, dims, v);
    let mut args = Vec::new();
    let x_dims = if c.time_major {
        [t_n, b_n, i_n]
    } else {
        [b_n, t_n, i_n]
    };
    args.push(input_f32(&x_dims, &data.x));
    for g in 0..4 {
        args.push(if g == 0 && c.cifg {
            none()
        } else {
            w(&[u_n, i_n], &data.w_in[g])
        });
    }
    for g in 0..4 {
        args.push(if g == 0 && c.cifg {
            none()
        } else {
            w(&[u_n, o_n], &data.w_rec[g])
        });
    }
    for k in 0..3 {
        args.push(if !c.peephole || (k == 0 && c.cifg) {
            none()
        } else {
            // NNAPI's order: cell_to_input, cell_to_forget, cell_to_output; the
            // reference's peep[] is (input, forget, output) too.
            w(&[u_n], &data.peep[k])
        });
    }
    for g in 0..4 {
        args.push(if g == 0 && c.cifg {
            none()
        } else {
            w(&[u_n], &data.bias[g])
        });
    }
    args.push(if c.projection {
        w(&[o_n, u_n], &data.proj)
    } else {
        none()
    });
    args.push(if c.projection && c.projection_bias {
        w(&[o_n], &data.proj_bias)
    } else {
        none()
    });
    args.push(input_f32(&[b_n, o_n], &data.h0));
    args.push(input_f32(&[b_n, u_n], &data.c0));
    args.push(Arg::I32(c.activation));
    args.push(Arg::F32(c.cell_clip));
    args.push(Arg::F32(c.projection_clip));
    args.push(Arg::Bool(c.time_major));
    if c.layer_norm {
        for g in 0..4 {
            args.push(if g == 0 && c.cifg {
                none()
            } else {
                w(&[u_n], &data.norm[g])
            });
        }
    }
    let out_dims = if c.time_major {
        [t_n, b_n, o_n]
    } else {
        [b_n, t_n, o_n]
    };
    let mut outs = vec![out_f32(&out_dims)];
    if c.state_outputs {
        outs.push(out_f32(&[b_n, o_n]));
        outs.push(out_f32(&[b_n, u_n]));
    }
    let got = run_op(OperationType::UnidirectionalSequenceLstm, args, &outs)
        .unwrap_or_else(|e| panic!("{context}: {e}"));
    assert_near(&f32s(&got[0]), &e_out, &format!("{context}: output"));
    if c.state_outputs {
        assert_near(&f32s(&got[1]), &e_h, &format!("{context}: output state"));
        assert_near(&f32s(&got[2]), &e_c, &format!("{context}: cell state"));
    }
}

#[test]
fn sequence_lstm_matches_reference() {
    let mut rng = Rng::new(92);
    for case in 0..120 {
        let units = rng.range(1, 6);
        let projection = rng.bool();
        let c = LstmCase {
            time: rng.range(1, 5),
            batch: rng.range(1, 3),
            input: rng.range(1, 5),
            units,
            output: if projection { rng.range(1, 5) } else { units },
            time_major: rng.bool(),
            cifg: rng.range(0, 3) == 0,
            peephole: rng.bool(),
            projection,
            projection_bias: rng.bool(),
            layer_norm: rng.range(0, 3) == 0 && units > 1,
            activation: [0, 1, 3, 4, 6][rng.range(0, 4)],
            cell_clip: if rng.bool() { 0.0 } else { 0.5 },
            projection_clip: if rng.bool() { 0.0 } else { 0.3 },
            state_outputs: rng.bool(),
            constant_weights: rng.bool(),
        };
        run_lstm_case(&c, &mut rng, &format!("case {case}: {c:?}"));
    }
}

#[test]
fn sequence_lstm_defaults_over_a_long_sequence() {
    let mut rng = Rng::new(7);
    let c = LstmCase {
        time: 40,
        batch: 2,
        input: 6,
        units: 8,
        output: 8,
        time_major: true,
        cifg: false,
        peephole: false,
        projection: false,
        projection_bias: false,
        layer_norm: false,
        activation: 4,
        cell_clip: 0.0,
        projection_clip: 0.0,
        state_outputs: true,
        constant_weights: true,
    };
    run_lstm_case(&c, &mut rng, "long sequence");
}

#[test]
fn sequence_rnn_matches_reference() {
    let mut rng = Rng::new(93);
    for case in 0..80 {
        let time = rng.range(1, 6);
        let batch = rng.range(1, 3);
        let input = rng.range(1, 5);
        let units = rng.range(1, 6);
        let time_major = rng.bool();
        let activation = rng.range(0, 3) as i32;
        let state_out = rng.bool();
        let consts = rng.bool();
        let x = rng.f32s(time * batch * input);
        let w = rng.f32s(units * input);
        let r: Vec<f32> = rng.f32s(units * units).iter().map(|v| v * 0.5).collect();
        let bias = rng.f32s(units);
        let h0 = rng.f32s(batch * units);
        let mut expected = vec![0.0; time * batch * units];
        let mut last = vec![0.0; batch * units];
        for b in 0..batch {
            let mut h = to64(&h0[b * units..(b + 1) * units]);
            for t in 0..time {
                let row = if time_major {
                    t * batch + b
                } else {
                    b * time + t
                };
                let xv = to64(&x[row * input..(row + 1) * input]);
                let wx = dot_rows(&w, &xv, units);
                let rh = dot_rows(&r, &h, units);
                h = (0..units)
                    .map(|u| activation_ref(activation, wx[u] + rh[u] + f64::from(bias[u])))
                    .collect();
                expected[row * units..(row + 1) * units].copy_from_slice(&h);
            }
            last[b * units..(b + 1) * units].copy_from_slice(&h);
        }
        let x_dims = if time_major {
            [time, batch, input]
        } else {
            [batch, time, input]
        };
        let args = vec![
            input_f32(&x_dims, &x),
            f32_arg(consts, &[units, input], &w),
            f32_arg(consts, &[units, units], &r),
            f32_arg(consts, &[units], &bias),
            input_f32(&[batch, units], &h0),
            Arg::I32(activation),
            Arg::I32(i32::from(time_major)),
        ];
        let out_dims = if time_major {
            [time, batch, units]
        } else {
            [batch, time, units]
        };
        let mut outs = vec![out_f32(&out_dims)];
        if state_out {
            outs.push(out_f32(&[batch, units]));
        }
        let context = format!(
            "case {case}: t {time} b {batch} i {input} u {units} tm {time_major} act {activation}"
        );
        let got = run_op(OperationType::UnidirectionalSequenceRnn, args, &outs)
            .unwrap_or_else(|e| panic!("{context}: {e}"));
        assert_near(&f32s(&got[0]), &expected, &context);
        if state_out {
            assert_near(&f32s(&got[1]), &last, &format!("{context}: state"));
        }
    }
}

fn activation_ref(code: i32, v: f64) -> f64 {
    activation(code, v)
}

#[test]
fn sequence_ops_refuse_what_nnapi_does_not_define() {
    // RNN: time_major must be 0 or 1, the activation a fuse code.
    let rnn = |act: i32, tm: i32| {
        run_op(
            OperationType::UnidirectionalSequenceRnn,
            vec![
                input_f32(&[2, 1, 1], &[1.0, 2.0]),
                const_f32(&[1, 1], &[1.0]),
                const_f32(&[1, 1], &[1.0]),
                const_f32(&[1], &[0.0]),
                input_f32(&[1, 1], &[0.0]),
                Arg::I32(act),
                Arg::I32(tm),
            ],
            &[out_f32(&[2, 1, 1])],
        )
    };
    assert!(rnn(0, 1).is_ok());
    let e = rnn(0, 2).unwrap_err().to_string();
    assert!(e.contains("time_major"), "{e}");
    let e = rnn(4, 1).unwrap_err().to_string();
    assert!(e.contains("fused_activation"), "{e}");
}
