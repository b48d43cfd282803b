//! Typed parameters of the normalizations, decoded once and encoded once.
//!
//! Each type is the one reader (`decode`: the shape rule and the runtime's kernels) and
//! the one writer (`encode`: the frontends) of its operation's scalar parameters:
//! - SOFTMAX, LOG_SOFTMAX: input, beta, axis (optional for SOFTMAX: -1);
//! - L2_NORMALIZATION: input, axis (optional: -1);
//! - LOCAL_RESPONSE_NORMALIZATION: input, radius, bias, alpha, beta, axis (optional: -1);
//! - INSTANCE_NORMALIZATION: input, gamma, beta, epsilon, layout;
//! - LAYER_NORMALIZATION (nnc): input, gamma and beta tensors, epsilon, axis.

use super::context::*;
use super::{InputView, Result};
use crate::nn::model::{Model, OperandIndex};
use crate::nn::types::OperationType;

/// SOFTMAX and LOG_SOFTMAX: `exp(beta * x)` normalized along `axis`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Softmax {
    /// > 0.
    pub beta: f32,
    pub axis: i32,
}

/// L2_NORMALIZATION along `axis`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L2Normalization {
    pub axis: i32,
}

/// LOCAL_RESPONSE_NORMALIZATION: `x / (bias + alpha * sum(x^2 over radius))^beta`
/// along `axis`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LocalResponse {
    pub radius: u32,
    pub bias: f32,
    pub alpha: f32,
    pub beta: f32,
    pub axis: i32,
}

/// INSTANCE_NORMALIZATION of a rank-4 tensor over its spatial dimensions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InstanceNormalization {
    pub gamma: f32,
    pub beta: f32,
    /// >= 0.
    pub epsilon: f32,
    /// NCHW data layout (NHWC when false).
    pub nchw: bool,
}

/// LAYER_NORMALIZATION over the dimensions from `axis` on; its scalar parameters, after
/// the input and the gamma and beta tensors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNormalization {
    /// Finite, >= 0.
    pub epsilon: f32,
    pub axis: i32,
}

/// An axis input that may be omitted (then the last dimension, -1).
fn optional_axis(ctx: &Operands, index: usize) -> Result<i32> {
    if ctx.present(index) {
        ctx.i32(index, "axis")
    } else {
        Ok(-1)
    }
}

impl Softmax {
    /// Reads the parameters of a SOFTMAX or LOG_SOFTMAX.
    pub fn decode(op: OperationType, inputs: &[InputView]) -> Result<Softmax> {
        let ctx = Operands { inputs };
        Softmax::count(op, &ctx)?;
        Softmax::decode_params(&ctx)
    }

    /// SOFTMAX may omit its axis, LOG_SOFTMAX may not.
    pub(in crate::nn::ops) fn count(op: OperationType, ctx: &Operands) -> Result<()> {
        ctx.count(if op == OperationType::Softmax {
            &[2, 3]
        } else {
            &[3]
        })
    }

    pub(in crate::nn::ops) fn decode_params(ctx: &Operands) -> Result<Softmax> {
        let beta = ctx.f32(1, "beta")?;
        if beta.is_nan() || beta <= 0.0 {
            return Err(param_err(1, "beta", format!("must be > 0, got {beta}")));
        }
        Ok(Softmax {
            beta,
            axis: optional_axis(ctx, 2)?,
        })
    }

    /// The parameter operands after the input: beta, then the axis. SOFTMAX over the
    /// last axis leaves it out: that is the form NN API 1.0 defined, so the operation
    /// stays within reach of the oldest devices.
    pub fn encode(&self, op: OperationType, model: &mut Model) -> Vec<OperandIndex> {
        let mut out = vec![model.add_f32(self.beta)];
        if op != OperationType::Softmax || self.axis != -1 {
            out.push(model.add_i32(self.axis));
        }
        out
    }
}

impl L2Normalization {
    pub fn decode(inputs: &[InputView]) -> Result<L2Normalization> {
        let ctx = Operands { inputs };
        ctx.count(&[1, 2])?;
        L2Normalization::decode_params(&ctx)
    }

    pub(in crate::nn::ops) fn decode_params(ctx: &Operands) -> Result<L2Normalization> {
        Ok(L2Normalization {
            axis: optional_axis(ctx, 1)?,
        })
    }

    /// The axis operand, left out for the last axis (NN API 1.0's form).
    pub fn encode(&self, model: &mut Model) -> Vec<OperandIndex> {
        if self.axis == -1 {
            Vec::new()
        } else {
            vec![model.add_i32(self.axis)]
        }
    }
}

impl LocalResponse {
    pub fn decode(inputs: &[InputView]) -> Result<LocalResponse> {
        let ctx = Operands { inputs };
        ctx.count(&[5, 6])?;
        LocalResponse::decode_params(&ctx)
    }

    pub(in crate::nn::ops) fn decode_params(ctx: &Operands) -> Result<LocalResponse> {
        Ok(LocalResponse {
            radius: ctx.i32_at_least(1, "radius", 0)? as u32,
            bias: ctx.f32(2, "bias")?,
            alpha: ctx.f32(3, "alpha")?,
            beta: ctx.f32(4, "beta")?,
            axis: optional_axis(ctx, 5)?,
        })
    }

    /// The parameter operands after the input; the axis left out when it is the last
    /// (NN API 1.0's form).
    pub fn encode(&self, model: &mut Model) -> Vec<OperandIndex> {
        let mut out = vec![
            model.add_i32(self.radius as i32),
            model.add_f32(self.bias),
            model.add_f32(self.alpha),
            model.add_f32(self.beta),
        ];
        if self.axis != -1 {
            out.push(model.add_i32(self.axis));
        }
        out
    }
}

impl InstanceNormalization {
    pub fn decode(inputs: &[InputView]) -> Result<InstanceNormalization> {
        let ctx = Operands { inputs };
        ctx.count(&[5])?;
        InstanceNormalization::decode_params(&ctx)
    }

    pub(in crate::nn::ops) fn decode_params(ctx: &Operands) -> Result<InstanceNormalization> {
        let gamma = ctx.f32(1, "gamma")?;
        let beta = ctx.f32(2, "beta")?;
        let epsilon = ctx.f32(3, "epsilon")?;
        if epsilon.is_nan() || epsilon < 0.0 {
            return Err(param_err(
                3,
                "epsilon",
                format!("must be >= 0, got {epsilon}"),
            ));
        }
        Ok(InstanceNormalization {
            gamma,
            beta,
            epsilon,
            nchw: ctx.bool(4, "layout")?,
        })
    }

    pub fn encode(&self, model: &mut Model) -> Vec<OperandIndex> {
        vec![
            model.add_f32(self.gamma),
            model.add_f32(self.beta),
            model.add_f32(self.epsilon),
            model.add_bool(self.nchw),
        ]
    }
}

impl LayerNormalization {
    pub fn decode(inputs: &[InputView]) -> Result<LayerNormalization> {
        let ctx = Operands { inputs };
        ctx.count(&[5])?;
        LayerNormalization::decode_params(&ctx)
    }

    pub(in crate::nn::ops) fn decode_params(ctx: &Operands) -> Result<LayerNormalization> {
        let epsilon = ctx.f32(3, "epsilon")?;
        if !epsilon.is_finite() || epsilon < 0.0 {
            return Err(param_err(
                3,
                "epsilon",
                format!("must be >= 0, got {epsilon}"),
            ));
        }
        Ok(LayerNormalization {
            epsilon,
            axis: ctx.i32(4, "axis")?,
        })
    }

    /// The parameter operands after the input, gamma and beta.
    pub fn encode(&self, model: &mut Model) -> Vec<OperandIndex> {
        vec![model.add_f32(self.epsilon), model.add_i32(self.axis)]
    }
}
