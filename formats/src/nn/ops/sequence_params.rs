//! Typed parameters of UNIDIRECTIONAL_SEQUENCE_RNN and UNIDIRECTIONAL_SEQUENCE_LSTM,
//! decoded once and encoded once.
//!
//! RNN: after its five tensors come the fused activation (INT32) and time_major (INT32,
//! 0 or 1). LSTM: after its twenty tensors come the activation (INT32), cell clip and
//! projection clip (FLOAT32) and time_major (BOOL), then optionally four layer-norm
//! weight tensors; which optional tensors are present says which gates and terms the
//! cell has. [`SequenceRnn`] and [`SequenceLstm`] are the one reader (`decode`: the shape
//! rules and the runtime's kernels) and the one writer (`encode`: the frontends) of the
//! scalar parameters.

use super::context::*;
use super::{InputView, Result};
use crate::nn::model::{Model, OperandIndex};
use crate::nn::types::FusedActivation;

/// The activation of UNIDIRECTIONAL_SEQUENCE_LSTM's cell input and output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LstmActivation {
    None,
    Relu,
    Relu6,
    Tanh,
    Sigmoid,
}

impl LstmActivation {
    /// NNAPI's codes: 0 none, 1 relu, 3 relu6, 4 tanh, 6 sigmoid.
    pub fn from_code(code: i32) -> Option<LstmActivation> {
        Some(match code {
            0 => LstmActivation::None,
            1 => LstmActivation::Relu,
            3 => LstmActivation::Relu6,
            4 => LstmActivation::Tanh,
            6 => LstmActivation::Sigmoid,
            _ => return None,
        })
    }

    /// The NNAPI code `from_code` reads.
    pub fn code(self) -> i32 {
        match self {
            LstmActivation::None => 0,
            LstmActivation::Relu => 1,
            LstmActivation::Relu6 => 3,
            LstmActivation::Tanh => 4,
            LstmActivation::Sigmoid => 6,
        }
    }
}

/// UNIDIRECTIONAL_SEQUENCE_RNN: the parameters after the hidden state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceRnn {
    pub activation: FusedActivation,
    /// `[time, batch, input]` (batch-major `[batch, time, input]` when false).
    pub time_major: bool,
}

/// Which of UNIDIRECTIONAL_SEQUENCE_LSTM's optional tensors are present; the decoder
/// checks they come in the combinations NNAPI allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LstmTerms {
    /// No input gate (inputs 1, 5, 9, 12 and 24 absent): `i = 1 - f`.
    pub cifg: bool,
    /// Cell-to-gate peephole weights (9 without CIFG, 10, 11).
    pub peephole: bool,
    /// Projection weights (16).
    pub projection: bool,
    /// Projection bias (17; only with the weights).
    pub projection_bias: bool,
    /// Layer-normalization weights (24 without CIFG, 25-27).
    pub layer_norm: bool,
}

/// UNIDIRECTIONAL_SEQUENCE_LSTM: the scalar parameters and the optional terms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SequenceLstm {
    pub activation: LstmActivation,
    /// Cell state clip (>= 0, 0 = none).
    pub cell_clip: f32,
    /// Projection output clip (>= 0, 0 = none).
    pub projection_clip: f32,
    pub time_major: bool,
    /// Read from which tensors are present; `encode` does not write them.
    pub terms: LstmTerms,
}

impl SequenceRnn {
    /// Reads the parameters of an RNN whose signature holds (the runtime's view).
    pub fn decode(inputs: &[InputView]) -> Result<SequenceRnn> {
        let ctx = Operands { inputs };
        ctx.count(&[7])?;
        SequenceRnn::decode_params(&ctx)
    }

    /// time_major (input 6), then the fused activation (input 5).
    pub(in crate::nn::ops) fn decode_params(ctx: &Operands) -> Result<SequenceRnn> {
        let time_major = match ctx.i32(6, "time_major")? {
            0 => false,
            1 => true,
            v => {
                return Err(param_err(
                    6,
                    "time_major",
                    format!("must be 0 or 1, got {v}"),
                ));
            }
        };
        Ok(SequenceRnn {
            activation: ctx.activation(5)?,
            time_major,
        })
    }

    /// Inputs 5 and 6, in order.
    pub fn encode(&self, model: &mut Model) -> Vec<OperandIndex> {
        vec![
            model.add_i32(self.activation as i32),
            model.add_i32(i32::from(self.time_major)),
        ]
    }
}

impl SequenceLstm {
    /// Reads the parameters of an LSTM whose signature holds (the runtime's view).
    pub fn decode(inputs: &[InputView]) -> Result<SequenceLstm> {
        let ctx = Operands { inputs };
        ctx.count(&[24, 28])?;
        SequenceLstm::decode_params(&ctx)
    }

    /// time_major, the optional terms, the activation and clips, then the layer-norm
    /// terms: the order of the checks the shape rule made when it read them in place.
    pub(in crate::nn::ops) fn decode_params(ctx: &Operands) -> Result<SequenceLstm> {
        let time_major = ctx.bool(23, "time_major")?;
        let cifg = !ctx.present(1);
        if ctx.present(5) == cifg {
            return Err(param_err(
                5,
                "recurrent_to_input_weights",
                "must be present exactly when input_to_input_weights is",
            ));
        }
        // Peepholes: forget and output together; input with them unless CIFG.
        let peephole = ctx.present(10);
        if ctx.present(11) != peephole {
            return Err(param_err(
                11,
                "cell_to_output_weights",
                "must be present exactly when cell_to_forget_weights is",
            ));
        }
        if ctx.present(9) != (peephole && !cifg) {
            return Err(param_err(
                9,
                "cell_to_input_weights",
                "must be present exactly when the other peepholes are and the input gate is",
            ));
        }
        if ctx.present(12) == cifg {
            return Err(param_err(
                12,
                "input_gate_bias",
                "must be present exactly when input_to_input_weights is",
            ));
        }
        let projection = ctx.present(16);
        let projection_bias = ctx.present(17);
        if !projection && projection_bias {
            return Err(param_err(17, "projection_bias", "needs projection_weights"));
        }
        let code = ctx.i32(20, "activation")?;
        let activation = LstmActivation::from_code(code).ok_or_else(|| {
            param_err(
                20,
                "activation",
                format!(
                    "must be 0 (none), 1 (relu), 3 (relu6), 4 (tanh) or 6 (sigmoid), got {code}"
                ),
            )
        })?;
        let cell_clip = non_negative_f32(ctx, 21, "cell_clip")?;
        let projection_clip = non_negative_f32(ctx, 22, "projection_clip")?;
        let layer_norm = ctx.inputs.len() == 28 && SequenceLstm::layer_norm(ctx, cifg)?;
        Ok(SequenceLstm {
            activation,
            cell_clip,
            projection_clip,
            time_major,
            terms: LstmTerms {
                cifg,
                peephole,
                projection,
                projection_bias,
                layer_norm,
            },
        })
    }

    /// Whether inputs 24-27 hold layer-normalization weights: forget, cell and output
    /// together, input with them unless CIFG.
    fn layer_norm(ctx: &Operands, cifg: bool) -> Result<bool> {
        let any = (25..28).any(|i| ctx.present(i));
        for (i, role) in [
            (25, "forget_layer_norm_weights"),
            (26, "cell_layer_norm_weights"),
            (27, "output_layer_norm_weights"),
        ] {
            if ctx.present(i) != any {
                return Err(param_err(
                    i,
                    role,
                    "layer normalization weights of the forget, cell and output gates go together",
                ));
            }
        }
        if ctx.present(24) != (any && !cifg) {
            return Err(param_err(
                24,
                "input_layer_norm_weights",
                "must be present exactly when the other layer normalization weights are and the input gate is",
            ));
        }
        Ok(any)
    }

    /// Inputs 20-23 (activation, cell clip, projection clip, time_major), in order; the
    /// terms are the frontend's choice of tensors.
    pub fn encode(&self, model: &mut Model) -> Vec<OperandIndex> {
        vec![
            model.add_i32(self.activation.code()),
            model.add_f32(self.cell_clip),
            model.add_f32(self.projection_clip),
            model.add_bool(self.time_major),
        ]
    }
}

fn non_negative_f32(ctx: &Operands, index: usize, role: &'static str) -> Result<f32> {
    let v = ctx.f32(index, role)?;
    if !v.is_finite() || v < 0.0 {
        return Err(param_err(
            index,
            role,
            format!("must be a finite number >= 0, got {v}"),
        ));
    }
    Ok(v)
}
