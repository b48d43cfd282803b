//! The transformer kernels of nnc's extension (`docs/EXTENSIONS.md`): LAYER_NORMALIZATION,
//! GELU and ERF, each one pass over its data rather than a chain of elementwise
//! operations.
//!
//! - LAYER_NORMALIZATION normalizes each lane of the trailing axes `axis..rank`:
//!   `(x - mean) / sqrt(var + epsilon) * gamma + beta`, population variance. Statistics
//!   accumulate in f64 in one read of the lane (sum and sum of squares of the lane's
//!   offsets from its first element, which keeps the cancellation of `E[x^2] - E[x]^2`
//!   harmless), then one write produces the output. With three outputs, the lane mean and
//!   `1 / sqrt(var + epsilon)` are written too (ONNX's Mean and InvStdDev).
//! - GELU: `x * Phi(x)`, exact (`0.5 * x * (1 + erf(x / sqrt 2))`) or the tanh
//!   approximation `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))`.
//! - ERF: the error function.
//!
//! GELU and ERF run on the vectorized approximations of [`super::vmath`] (within 3 ulp).
//! - MATH_UNARY: the elementwise functions the NN set lacks (round half to even, tan,
//!   the inverse and hyperbolic trigonometric functions), Rust's single-precision ones.

use super::{Kernel, KernelContext, OpInfo, vmath};
use crate::error::{Result, RuntimeError};
use nnc_formats::nn::ops::LayerNormalization;

/// LAYER_NORMALIZATION.
pub(crate) fn build_layer_normalization(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let params = LayerNormalization::decode(info.views()).map_err(|e| info.signature_error(e))?;
    Ok(Box::new(LayerNorm {
        epsilon: params.epsilon,
        axis: params.axis,
    }))
}

/// GELU.
pub(crate) fn build_gelu(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Gelu {
        approximate: info.bool(1, "approximate")?,
    }))
}

/// ERF (no static parameters).
pub(crate) fn build_erf() -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Erf))
}

/// MATH_UNARY, its function decoded.
pub(crate) fn build_math_unary(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let code = info.i32(1, "function")?;
    let function = nnc_formats::nn::MathFunction::from_code(code)
        .ok_or_else(|| info.invalid(format!("unknown MATH_UNARY function {code}")))?;
    Ok(Box::new(MathUnary { function }))
}

struct LayerNorm {
    epsilon: f32,
    axis: i32,
}

impl Kernel for LayerNorm {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = input.f32()?;
        let gamma = ctx.input(1)?.f32()?;
        let beta = ctx.input(2)?.f32()?;
        let a = super::util::axis(self.axis, input.rank())?;
        let lane: usize = input.shape[a..].iter().product();
        if gamma.len() != lane || beta.len() != lane {
            return Err(RuntimeError::kernel(format!(
                "gamma and beta hold {} and {} values, the normalized lanes {lane}",
                gamma.len(),
                beta.len()
            )));
        }
        let lanes = x.len().checked_div(lane).unwrap_or(0);
        let with_stats = ctx.outputs.len() == 3;
        let threads = ctx.threads;
        let out = ctx.output(0)?.f32_mut()?;
        if out.len() != x.len() {
            return Err(RuntimeError::kernel("output size differs from the input's"));
        }
        let eps = f64::from(self.epsilon);
        let lane = lane.max(1);
        let normalize = |xs: &[f32], os: &mut [f32]| normalize_lane(xs, os, gamma, beta, eps);
        if !with_stats && threads > 1 && x.len() >= 2 * PARALLEL_MIN {
            // Whole lanes per task, about two tasks per thread.
            use rayon::prelude::*;
            let chunk = lanes.div_ceil(2 * threads).max(PARALLEL_MIN.div_ceil(lane)) * lane;
            x.par_chunks(chunk)
                .zip(out.par_chunks_mut(chunk))
                .for_each(|(xs, os)| {
                    for (xl, ol) in xs.chunks_exact(lane).zip(os.chunks_exact_mut(lane)) {
                        normalize(xl, ol);
                    }
                });
            return Ok(());
        }
        let mut stats = if with_stats {
            Vec::with_capacity(lanes * 2)
        } else {
            Vec::new()
        };
        for (xs, os) in x.chunks_exact(lane).zip(out.chunks_exact_mut(lane)) {
            let lane_stats = normalize(xs, os);
            if with_stats {
                stats.push(lane_stats);
            }
        }
        if with_stats {
            let means = ctx.output(1)?.f32_mut()?;
            for (m, s) in means.iter_mut().zip(&stats) {
                *m = s.0;
            }
            let invs = ctx.output(2)?.f32_mut()?;
            for (v, s) in invs.iter_mut().zip(&stats) {
                *v = s.1;
            }
        }
        Ok(())
    }
}

/// Elements below which LAYER_NORMALIZATION's lanes are not split over threads.
const PARALLEL_MIN: usize = 16 * 1024;

/// Normalizes one lane; returns its mean and `1 / sqrt(var + epsilon)`.
fn normalize_lane(xs: &[f32], os: &mut [f32], gamma: &[f32], beta: &[f32], eps: f64) -> (f32, f32) {
    let (mean, var) = super::util::mean_variance(xs);
    let mean = mean as f32;
    let inv = (1.0 / (var + eps).sqrt()) as f32;
    for (((o, &v), &g), &b) in os.iter_mut().zip(xs).zip(gamma).zip(beta) {
        *o = (v - mean) * inv * g + b;
    }
    (mean, inv)
}

struct Gelu {
    approximate: bool,
}

impl Kernel for Gelu {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let f = if self.approximate {
            vmath::Func::GeluTanh
        } else {
            vmath::Func::GeluErf
        };
        elementwise(ctx, f)
    }
}

/// `out = f(x)` for an operation of one input and one output of its shape.
fn elementwise(ctx: &mut KernelContext, f: vmath::Func) -> Result<()> {
    let threads = ctx.threads;
    let x = ctx.input(0)?.f32()?;
    let out = ctx.output(0)?.f32_mut()?;
    if out.len() != x.len() {
        return Err(RuntimeError::kernel("output size differs from the input's"));
    }
    vmath::apply_threaded(threads, f, x, out);
    Ok(())
}

struct Erf;

impl Kernel for Erf {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        elementwise(ctx, vmath::Func::Erf)
    }
}

struct MathUnary {
    function: nnc_formats::nn::MathFunction,
}

impl Kernel for MathUnary {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let x = ctx.input(0)?.f32()?;
        let out = ctx.output(0)?.f32_mut()?;
        for (o, &v) in out.iter_mut().zip(x) {
            *o = self.function.apply(v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_matches_its_definitions() {
        // Phi(1) = 0.841344746..., so GELU(1) = 0.841344746.
        let exact = |x| vmath::eval(vmath::Func::GeluErf, x);
        let tanh_form = |x| vmath::eval(vmath::Func::GeluTanh, x);
        assert!((exact(1.0) - 0.841_344_7).abs() < 1e-6);
        assert!((exact(-1.0) + 0.158_655_25).abs() < 1e-6);
        assert_eq!(exact(0.0), 0.0);
        // The tanh form is within 1e-3 of the exact one near the origin.
        for i in -30..=30 {
            let x = i as f32 / 10.0;
            assert!((tanh_form(x) - exact(x)).abs() < 1e-3, "{x}");
        }
    }
}
