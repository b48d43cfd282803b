//! UNIDIRECTIONAL_SEQUENCE_LSTM and UNIDIRECTIONAL_SEQUENCE_RNN, as NNAPI defines them.
//!
//! Both run the whole recurrence in one operation: the input projections of every time
//! step are one GEMM per gate up front; each step then multiplies the previous state by
//! the recurrent weights and combines. Time-major (`[time, batch, input]`) and
//! batch-major (`[batch, time, input]`) layouts are read in place.
//!
//! LSTM, per step and batch entry, with `act` the operation's activation (none, relu,
//! relu6, tanh or sigmoid) and σ the logistic function:
//!
//! - `i = σ(Wi x + Ri h + Pi ⊙ c + bi)` (CIFG, no input gate weights: `i = 1 - f`)
//! - `f = σ(Wf x + Rf h + Pf ⊙ c + bf)`
//! - `c' = clip(f ⊙ c + i ⊙ act(Wc x + Rc h + bc))` (cell clip, 0 = none)
//! - `o = σ(Wo x + Ro h + Po ⊙ c' + bo)`
//! - `h' = o ⊙ act(c')`, then with projection `h' = clip(Wp h' + bp)` (projection clip)
//!
//! With layer-normalization weights, each gate's sum before its bias is normalized over
//! the units (mean 0, variance 1, epsilon 1e-8 added to the variance), scaled by the
//! gate's weights, and the bias added after. Peepholes are optional.
//!
//! RNN: `h' = act(W x + R h + b)` with a fused activation (none, relu, relu1, relu6).

use nnc_formats::nn::OperandType;
use nnc_formats::nn::ops::{LstmTerms, SequenceLstm as LstmParams, SequenceRnn as RnnParams};

use super::linalg::{Layout, matmul};
use super::util::zeroed_f32;
use super::{Clamp, Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};
use crate::tensor::TensorRef;

/// Epsilon added to the variance by layer normalization.
const LAYER_NORM_EPSILON: f32 = 1e-8;

fn require_f32(info: &OpInfo) -> Result<()> {
    let t = info.input_type(0)?;
    if t != OperandType::TensorFloat32 {
        return Err(info.unsupported(format!(
            "input type {t} (only TENSOR_FLOAT32 is implemented)"
        )));
    }
    Ok(())
}

/// The activation of the LSTM's cell input and output, read by the formats' decoder.
pub use nnc_formats::nn::ops::LstmActivation;

/// UNIDIRECTIONAL_SEQUENCE_LSTM, with the parameters the shape rule reads
/// ([`LstmParams::decode`]).
pub(crate) fn build_lstm(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    require_f32(info)?;
    let params = LstmParams::decode(info.views()).map_err(|e| info.signature_error(e))?;
    Ok(Box::new(SequenceLstm {
        activation: params.activation,
        cell_clip: params.cell_clip,
        projection_clip: params.projection_clip,
        time_major: params.time_major,
        terms: params.terms,
    }))
}

/// UNIDIRECTIONAL_SEQUENCE_RNN, with the parameters the shape rule reads
/// ([`RnnParams::decode`]).
pub(crate) fn build_rnn(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    require_f32(info)?;
    let params = RnnParams::decode(info.views()).map_err(|e| info.signature_error(e))?;
    Ok(Box::new(SequenceRnn {
        clamp: Clamp::new(params.activation),
        time_major: params.time_major,
    }))
}

fn activate(activation: LstmActivation, v: f32) -> f32 {
    match activation {
        LstmActivation::None => v,
        LstmActivation::Relu => v.max(0.0),
        LstmActivation::Relu6 => v.clamp(0.0, 6.0),
        LstmActivation::Tanh => v.tanh(),
        LstmActivation::Sigmoid => sigmoid(v),
    }
}

fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

/// `(time, batch, features)` of a sequence input.
fn sequence_dims(x: &TensorRef, time_major: bool) -> Result<(usize, usize, usize)> {
    match x.shape {
        [a, b, c] => Ok(if time_major {
            (*a, *b, *c)
        } else {
            (*b, *a, *c)
        }),
        other => Err(RuntimeError::kernel(format!(
            "the input must be 3-D, got {other:?}"
        ))),
    }
}

/// Row of `(t, b)` in a `[time, batch]` or `[batch, time]` ordering.
fn row(time_major: bool, t: usize, b: usize, time: usize, batch: usize) -> usize {
    if time_major {
        t * batch + b
    } else {
        b * time + t
    }
}

/// Input `i` as f32 values of exactly `rows x cols`.
fn matrix<'a>(
    ctx: &KernelContext<'a>,
    i: usize,
    what: &str,
    rows: usize,
    cols: usize,
) -> Result<&'a [f32]> {
    let t = ctx.input(i)?;
    let v = t.f32()?;
    let expected = rows
        .checked_mul(cols)
        .ok_or_else(|| RuntimeError::kernel(format!("{what} is too large")))?;
    if v.len() != expected {
        return Err(RuntimeError::kernel(format!(
            "{what} holds {} values, expected {rows} x {cols}",
            v.len()
        )));
    }
    Ok(v)
}

/// Input `i` as f32 values of exactly `rows x cols` when `present` (an optional term
/// the decoder found), `None` otherwise.
fn optional_matrix<'a>(
    ctx: &KernelContext<'a>,
    present: bool,
    i: usize,
    what: &str,
    rows: usize,
    cols: usize,
) -> Result<Option<&'a [f32]>> {
    if present {
        matrix(ctx, i, what, rows, cols).map(Some)
    } else {
        Ok(None)
    }
}

fn checked(parts: &[usize]) -> Result<usize> {
    parts
        .iter()
        .try_fold(1usize, |acc, &p| acc.checked_mul(p))
        .ok_or_else(|| RuntimeError::kernel("sequence sizes overflow"))
}

/// `out[r, u] = sum_k x[r, k] * w[u, k]` for every row of `x`.
fn project(
    rows: usize,
    units: usize,
    k: usize,
    x: &[f32],
    w: &[f32],
    parallelism: gemm::Parallelism,
) -> Result<Vec<f32>> {
    let mut out = zeroed_f32(checked(&[rows, units])?)?;
    matmul(
        rows,
        units,
        k,
        &mut out,
        Layout::row_major(units),
        x,
        Layout::row_major(k),
        w,
        Layout::col_major(k),
        false,
        parallelism,
    )?;
    Ok(out)
}

/// Normalizes `v` to mean 0 and variance 1, then scales it by `weights`.
fn layer_norm(v: &mut [f32], weights: &[f32]) {
    let n = v.len() as f32;
    let mean = v.iter().sum::<f32>() / n;
    let variance = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / n;
    let inv = 1.0 / (variance + LAYER_NORM_EPSILON).sqrt();
    for (x, w) in v.iter_mut().zip(weights) {
        *x = (*x - mean) * inv * w;
    }
}

struct SequenceLstm {
    activation: LstmActivation,
    cell_clip: f32,
    projection_clip: f32,
    time_major: bool,
    terms: LstmTerms,
}

/// Gate order of the per-gate arrays below.
const INPUT: usize = 0;
const FORGET: usize = 1;
const CELL: usize = 2;
const OUTPUT: usize = 3;

impl Kernel for SequenceLstm {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let x_t = ctx.input(0)?;
        let (time, batch, input_size) = sequence_dims(&x_t, self.time_major)?;
        let x = x_t.f32()?;
        let (units, output_size) = match ctx.input(6)?.shape {
            [u, o] => (*u, *o),
            other => {
                return Err(RuntimeError::kernel(format!(
                    "recurrent_to_forget_weights must be 2-D, got {other:?}"
                )));
            }
        };
        if units == 0 {
            return Err(RuntimeError::kernel("the LSTM has no units"));
        }
        let LstmTerms {
            cifg,
            peephole,
            projection,
            projection_bias,
            layer_norm,
        } = self.terms;
        let mut w_in: [Option<&[f32]>; 4] = [None; 4];
        let mut w_rec: [Option<&[f32]>; 4] = [None; 4];
        let mut bias: [Option<&[f32]>; 4] = [None; 4];
        let mut norm: [Option<&[f32]>; 4] = [None; 4];
        for g in 0..4 {
            if g == INPUT && cifg {
                continue;
            }
            w_in[g] = Some(matrix(ctx, 1 + g, "input weights", units, input_size)?);
            w_rec[g] = Some(matrix(ctx, 5 + g, "recurrent weights", units, output_size)?);
            bias[g] = Some(matrix(ctx, 12 + g, "gate bias", units, 1)?);
            norm[g] = optional_matrix(
                ctx,
                layer_norm,
                24 + g,
                "layer-normalization weights",
                units,
                1,
            )?;
        }
        let peep_i = optional_matrix(ctx, peephole && !cifg, 9, "cell_to_input_weights", units, 1)?;
        let peep_f = optional_matrix(ctx, peephole, 10, "cell_to_forget_weights", units, 1)?;
        let peep_o = optional_matrix(ctx, peephole, 11, "cell_to_output_weights", units, 1)?;
        let projection = optional_matrix(
            ctx,
            projection,
            16,
            "projection_weights",
            output_size,
            units,
        )?;
        let projection_bias =
            optional_matrix(ctx, projection_bias, 17, "projection_bias", output_size, 1)?;
        if projection.is_none() && output_size != units {
            return Err(RuntimeError::kernel(format!(
                "without projection the output size {output_size} must equal the units {units}"
            )));
        }
        let h_in = matrix(ctx, 18, "output_state_in", batch, output_size)?;
        let c_in = matrix(ctx, 19, "cell_state_in", batch, units)?;
        if x.len() != checked(&[time, batch, input_size])? {
            return Err(RuntimeError::kernel("the input does not match its shape"));
        }
        let parallelism = ctx.gemm_parallelism();
        let rows = checked(&[time, batch])?;
        // Input projections of every step, per gate: [rows, units].
        let mut xp: [Vec<f32>; 4] = Default::default();
        for g in 0..4 {
            if let Some(w) = w_in[g] {
                xp[g] = project(rows, units, input_size, x, w, parallelism)?;
            }
        }
        let mut h = h_in.to_vec();
        let mut c = c_in.to_vec();
        let mut cell_out = zeroed_f32(checked(&[batch, units])?)?;
        let mut gate = [
            zeroed_f32(units)?,
            zeroed_f32(units)?,
            zeroed_f32(units)?,
            zeroed_f32(units)?,
        ];
        let mut hidden = zeroed_f32(checked(&[batch, units])?)?;
        let mut out_seq = zeroed_f32(checked(&[rows, output_size])?)?;
        for t in 0..time {
            let mut hp: [Vec<f32>; 4] = Default::default();
            for g in 0..4 {
                if let Some(r) = w_rec[g] {
                    hp[g] = project(batch, units, output_size, &h, r, parallelism)?;
                }
            }
            for b in 0..batch {
                let r = row(self.time_major, t, b, time, batch);
                let cp = &c[b * units..(b + 1) * units];
                for g in 0..4 {
                    if w_in[g].is_none() {
                        continue;
                    }
                    let v = &mut gate[g];
                    for u in 0..units {
                        v[u] = xp[g][r * units + u] + hp[g][b * units + u];
                    }
                    let peep = match g {
                        INPUT => peep_i,
                        FORGET => peep_f,
                        _ => None,
                    };
                    if let Some(p) = peep {
                        for u in 0..units {
                            v[u] += p[u] * cp[u];
                        }
                    }
                    if g != OUTPUT {
                        finish_gate(v, norm[g], bias[g]);
                    }
                }
                let cell_row = &mut cell_out[b * units..(b + 1) * units];
                for u in 0..units {
                    let f = sigmoid(gate[FORGET][u]);
                    let i = if cifg {
                        1.0 - f
                    } else {
                        sigmoid(gate[INPUT][u])
                    };
                    let mut cn = f * cp[u] + i * activate(self.activation, gate[CELL][u]);
                    if self.cell_clip > 0.0 {
                        cn = cn.clamp(-self.cell_clip, self.cell_clip);
                    }
                    cell_row[u] = cn;
                }
                // The output gate reads the new cell state through its peephole.
                let o = &mut gate[OUTPUT];
                if let Some(p) = peep_o {
                    for u in 0..units {
                        o[u] += p[u] * cell_row[u];
                    }
                }
                finish_gate(o, norm[OUTPUT], bias[OUTPUT]);
                let hidden_row = &mut hidden[b * units..(b + 1) * units];
                for u in 0..units {
                    hidden_row[u] = sigmoid(o[u]) * activate(self.activation, cell_row[u]);
                }
            }
            c.copy_from_slice(&cell_out);
            let new_h = match projection {
                Some(wp) => {
                    let mut p = project(batch, output_size, units, &hidden, wp, parallelism)?;
                    for row in p.chunks_exact_mut(output_size) {
                        for (k, v) in row.iter_mut().enumerate() {
                            if let Some(pb) = projection_bias {
                                *v += pb[k];
                            }
                            if self.projection_clip > 0.0 {
                                *v = v.clamp(-self.projection_clip, self.projection_clip);
                            }
                        }
                    }
                    p
                }
                None => hidden.clone(),
            };
            for b in 0..batch {
                let r = row(self.time_major, t, b, time, batch);
                out_seq[r * output_size..(r + 1) * output_size]
                    .copy_from_slice(&new_h[b * output_size..(b + 1) * output_size]);
            }
            h = new_h;
        }
        write_output(ctx, 0, &out_seq)?;
        if ctx.outputs.len() == 3 {
            write_output(ctx, 1, &h)?;
            write_output(ctx, 2, &c)?;
        }
        Ok(())
    }
}

/// Layer normalization (when weighted) and the bias, in NNAPI's order.
fn finish_gate(v: &mut [f32], norm: Option<&[f32]>, bias: Option<&[f32]>) {
    if let Some(w) = norm {
        layer_norm(v, w);
    }
    if let Some(b) = bias {
        for (x, b) in v.iter_mut().zip(b) {
            *x += b;
        }
    }
}

fn write_output(ctx: &mut KernelContext, i: usize, values: &[f32]) -> Result<()> {
    let out = ctx.output(i)?.f32_mut()?;
    if out.len() != values.len() {
        return Err(RuntimeError::kernel(format!(
            "output {i} holds {} values, expected {}",
            out.len(),
            values.len()
        )));
    }
    out.copy_from_slice(values);
    Ok(())
}

struct SequenceRnn {
    clamp: Clamp,
    time_major: bool,
}

impl Kernel for SequenceRnn {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let x_t = ctx.input(0)?;
        let (time, batch, input_size) = sequence_dims(&x_t, self.time_major)?;
        let x = x_t.f32()?;
        let units = match ctx.input(1)?.shape {
            [u, _] => *u,
            other => {
                return Err(RuntimeError::kernel(format!(
                    "weights must be 2-D, got {other:?}"
                )));
            }
        };
        let w = matrix(ctx, 1, "weights", units, input_size)?;
        let r = matrix(ctx, 2, "recurrent_weights", units, units)?;
        let bias = matrix(ctx, 3, "bias", units, 1)?;
        let h_in = matrix(ctx, 4, "hidden_state", batch, units)?;
        if x.len() != checked(&[time, batch, input_size])? {
            return Err(RuntimeError::kernel("the input does not match its shape"));
        }
        let parallelism = ctx.gemm_parallelism();
        let rows = checked(&[time, batch])?;
        let xp = project(rows, units, input_size, x, w, parallelism)?;
        let mut h = h_in.to_vec();
        let mut out_seq = zeroed_f32(checked(&[rows, units])?)?;
        for t in 0..time {
            let mut hp = project(batch, units, units, &h, r, parallelism)?;
            for b in 0..batch {
                let row_index = row(self.time_major, t, b, time, batch);
                let hr = &mut hp[b * units..(b + 1) * units];
                for u in 0..units {
                    hr[u] = self
                        .clamp
                        .apply(xp[row_index * units + u] + hr[u] + bias[u]);
                }
                out_seq[row_index * units..(row_index + 1) * units].copy_from_slice(hr);
            }
            h = hp;
        }
        write_output(ctx, 0, &out_seq)?;
        if ctx.outputs.len() == 2 {
            write_output(ctx, 1, &h)?;
        }
        Ok(())
    }
}
