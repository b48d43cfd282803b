//! Normalizations along one axis: SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION,
//! LOCAL_RESPONSE_NORMALIZATION, and INSTANCE_NORMALIZATION (over H and W per batch and
//! channel).
//!
//! Formulas (NNAPI / TFLite):
//! - SOFTMAX: `exp(beta * (x - max)) / sum`.
//! - LOG_SOFTMAX: `beta * x - m - log(sum(exp(beta * x - m)))` with `m = max(beta * x)`.
//! - L2_NORMALIZATION: `x / max(sqrt(sum(x^2)), 1e-6)` (TFLite's epsilon: zero stays zero).
//! - LOCAL_RESPONSE_NORMALIZATION: `x / (bias + alpha * sum_{|j-c| <= radius} x_j^2)^beta`.
//! - INSTANCE_NORMALIZATION: `gamma * (x - mean) / sqrt(var + epsilon) + beta`, population
//!   variance.
//!
//! Sums accumulate in f64.

use nnc_formats::nn::OperandType;
use nnc_formats::nn::ops as params;

use super::util::{axis, split_at_axis};
use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

#[derive(Clone, Copy, Debug, PartialEq)]
enum NormOp {
    Softmax {
        beta: f32,
    },
    LogSoftmax {
        beta: f32,
    },
    L2,
    Lrn {
        radius: usize,
        bias: f32,
        alpha: f32,
        beta: f32,
    },
}

struct AxisNorm {
    op: NormOp,
    axis: i32,
}

struct InstanceNorm {
    gamma: f32,
    beta: f32,
    epsilon: f32,
    nchw: bool,
}

/// The normalization an operation is, chosen where it is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Normalization {
    Softmax,
    LogSoftmax,
    L2,
    LocalResponse,
    Instance,
}

pub(crate) fn build(info: &OpInfo, normalization: Normalization) -> Result<Box<dyn Kernel>> {
    use Normalization as N;
    let t = info.input_type(0)?;
    if t != OperandType::TensorFloat32 {
        return Err(info.unsupported(format!(
            "operand type {t} (only TENSOR_FLOAT32 is implemented)"
        )));
    }
    let views = info.views();
    let decoded = |e| info.signature_error(e);
    let (op, axis) = match normalization {
        N::Softmax | N::LogSoftmax => {
            let p = params::Softmax::decode(info.op_type(), views).map_err(decoded)?;
            let op = if normalization == N::Softmax {
                NormOp::Softmax { beta: p.beta }
            } else {
                NormOp::LogSoftmax { beta: p.beta }
            };
            (op, p.axis)
        }
        N::L2 => (
            NormOp::L2,
            params::L2Normalization::decode(views)
                .map_err(decoded)?
                .axis,
        ),
        N::LocalResponse => {
            let p = params::LocalResponse::decode(views).map_err(decoded)?;
            let op = NormOp::Lrn {
                radius: p.radius as usize,
                bias: p.bias,
                alpha: p.alpha,
                beta: p.beta,
            };
            (op, p.axis)
        }
        N::Instance => {
            let p = params::InstanceNormalization::decode(views).map_err(decoded)?;
            return Ok(Box::new(InstanceNorm {
                gamma: p.gamma,
                beta: p.beta,
                epsilon: p.epsilon,
                nchw: p.nchw,
            }));
        }
    };
    Ok(Box::new(AxisNorm { op, axis }))
}

/// Elements below which the lanes are not split over threads.
const PARALLEL_MIN: usize = 16 * 1024;

/// Calls `f(lane_in, lane_out)` for every lane of `mid` elements spaced `inner` apart in
/// a `[outer, mid, inner]` view (contiguous lanes are passed directly, split over
/// `threads` when there are enough; strided ones via gather and scatter).
fn for_each_lane(
    threads: usize,
    x: &[f32],
    out: &mut [f32],
    (outer, mid, inner): (usize, usize, usize),
    f: impl Fn(&[f32], &mut [f32]) + Sync,
) -> Result<()> {
    if x.len() != outer * mid * inner || out.len() != x.len() {
        return Err(RuntimeError::kernel(
            "input and output sizes do not match the shape",
        ));
    }
    if inner == 1 && threads > 1 && x.len() >= 2 * PARALLEL_MIN && mid > 0 {
        // Contiguous lanes (attention's softmax rows): whole lanes per task, about two
        // tasks per thread.
        use rayon::prelude::*;
        let lanes_per_task = outer.div_ceil(2 * threads).max(PARALLEL_MIN.div_ceil(mid));
        let chunk = lanes_per_task * mid;
        x.par_chunks(chunk)
            .zip(out.par_chunks_mut(chunk))
            .for_each(|(xs, os)| {
                for (xi, oi) in xs.chunks_exact(mid).zip(os.chunks_exact_mut(mid)) {
                    f(xi, oi);
                }
            });
        return Ok(());
    }
    if inner == 1 {
        for (xi, oi) in x
            .chunks_exact(mid.max(1))
            .zip(out.chunks_exact_mut(mid.max(1)))
        {
            f(xi, oi);
        }
        return Ok(());
    }
    let mut lane = vec![0f32; mid];
    let mut lane_out = vec![0f32; mid];
    for o in 0..outer {
        for i in 0..inner {
            let base = o * mid * inner + i;
            for (j, v) in lane.iter_mut().enumerate() {
                *v = x[base + j * inner];
            }
            f(&lane, &mut lane_out);
            for (j, v) in lane_out.iter().enumerate() {
                out[base + j * inner] = *v;
            }
        }
    }
    Ok(())
}

fn softmax_lane(beta: f32, x: &[f32], out: &mut [f32]) {
    super::vmath::softmax(x, out, beta);
}

fn log_softmax_lane(beta: f32, x: &[f32], out: &mut [f32]) {
    let max = x
        .iter()
        .map(|&v| beta * v)
        .fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = x.iter().map(|&v| f64::from((beta * v - max).exp())).sum();
    let log_sum = sum.ln() as f32;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = beta * v - max - log_sum;
    }
}

fn l2_lane(x: &[f32], out: &mut [f32]) {
    let sum: f64 = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
    let norm = (sum.sqrt() as f32).max(1e-6);
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v / norm;
    }
}

fn lrn_lane(radius: usize, bias: f32, alpha: f32, beta: f32, x: &[f32], out: &mut [f32]) {
    let n = x.len();
    for (c, o) in out.iter_mut().enumerate() {
        let lo = c.saturating_sub(radius);
        let hi = c.saturating_add(radius).min(n.saturating_sub(1));
        let sum: f64 = x[lo..=hi]
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum();
        let denom = (f64::from(bias) + f64::from(alpha) * sum).powf(f64::from(beta));
        *o = (f64::from(x[c]) / denom) as f32;
    }
}

impl Kernel for AxisNorm {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = input.f32()?;
        let a = axis(self.axis, input.rank())?;
        let dims = split_at_axis(input.shape, a);
        let threads = ctx.threads;
        let out = ctx.output(0)?.f32_mut()?;
        match self.op {
            NormOp::Softmax { beta } => {
                for_each_lane(threads, x, out, dims, |x, o| softmax_lane(beta, x, o))
            }
            NormOp::LogSoftmax { beta } => {
                for_each_lane(threads, x, out, dims, |x, o| log_softmax_lane(beta, x, o))
            }
            NormOp::L2 => for_each_lane(threads, x, out, dims, l2_lane),
            NormOp::Lrn {
                radius,
                bias,
                alpha,
                beta,
            } => for_each_lane(threads, x, out, dims, |x, o| {
                lrn_lane(radius, bias, alpha, beta, x, o)
            }),
        }
    }
}

impl Kernel for InstanceNorm {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = input.f32()?;
        let [n, d1, d2, d3] = super::util::rank4(input.shape, "input")?;
        let out = ctx.output(0)?.f32_mut()?;
        if x.len() != n * d1 * d2 * d3 || out.len() != x.len() {
            return Err(RuntimeError::kernel(
                "input and output sizes do not match the shape",
            ));
        }
        let (gamma, beta, eps) = (
            f64::from(self.gamma),
            f64::from(self.beta),
            f64::from(self.epsilon),
        );
        // Per image and channel: the statistics, then `x * scale + shift`.
        let affine = |mean: f64, var: f64| {
            let scale = gamma / (var + eps).sqrt();
            (scale as f32, (beta - mean * scale) as f32)
        };
        if self.nchw || d3 == 1 {
            // Contiguous lanes of H*W (NCHW, or NHWC with one channel: GroupNorm with one
            // group, as PyTorch exports it, normalizes [N, 1, C*H*W]; the NHWC sweep took
            // a row per value there, 0.26 ms per PoolFormer block).
            let lane = if self.nchw { d2 * d3 } else { d1 * d2 };
            for (xs, os) in x.chunks(lane.max(1)).zip(out.chunks_mut(lane.max(1))) {
                let (mean, var) = super::util::mean_variance(xs);
                let (scale, shift) = affine(mean, var);
                for (o, &v) in os.iter_mut().zip(xs) {
                    *o = v * scale + shift;
                }
            }
            return Ok(());
        }
        // NHWC: sweep each image's rows of C channels twice, contiguously (gathering
        // each channel's lane, C apart, ran 17 ns per element on wav2vec2's 512 x 3199).
        let (pixels, channels) = (d1 * d2, d3);
        let image = pixels * channels;
        for (xs, os) in x.chunks(image.max(1)).zip(out.chunks_mut(image.max(1))) {
            let mut stats = ChannelStats::new(channels);
            xs.chunks_exact(channels.max(1))
                .for_each(|row| stats.add_row(row));
            let (scales, shifts): (Vec<f32>, Vec<f32>) = (0..channels)
                .map(|c| {
                    let (mean, var) = stats.channel(c);
                    affine(mean, var)
                })
                .unzip();
            for (xr, or) in xs
                .chunks_exact(channels.max(1))
                .zip(os.chunks_exact_mut(channels.max(1)))
            {
                for (((o, &v), &scale), &shift) in or.iter_mut().zip(xr).zip(&scales).zip(&shifts) {
                    *o = v * scale + shift;
                }
            }
        }
        Ok(())
    }
}

/// Running sums of each channel over rows of one value per channel, in f64, of the
/// values' offsets from each channel's first value (see `util::shifted_moments`).
struct ChannelStats {
    first: Vec<f64>,
    sum: Vec<f64>,
    squares: Vec<f64>,
    rows: usize,
}

impl ChannelStats {
    fn new(channels: usize) -> ChannelStats {
        ChannelStats {
            first: vec![0.0; channels],
            sum: vec![0.0; channels],
            squares: vec![0.0; channels],
            rows: 0,
        }
    }

    fn add_row(&mut self, row: &[f32]) {
        if self.rows == 0 {
            for (f, &v) in self.first.iter_mut().zip(row) {
                *f = f64::from(v);
            }
        }
        for (((s, q), &f), &v) in self
            .sum
            .iter_mut()
            .zip(&mut self.squares)
            .zip(&self.first)
            .zip(row)
        {
            let d = f64::from(v) - f;
            *s += d;
            *q += d * d;
        }
        self.rows += 1;
    }

    /// Channel `c`'s (mean, population variance).
    fn channel(&self, c: usize) -> (f64, f64) {
        super::util::shifted_moments(self.first[c], self.sum[c], self.squares[c], self.rows)
    }
}
