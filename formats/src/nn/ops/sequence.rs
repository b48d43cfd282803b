//! Recurrent sequence operations: UNIDIRECTIONAL_SEQUENCE_LSTM and _RNN.

use super::context::*;
use super::sequence_params::{SequenceLstm, SequenceRnn};
use super::{OutputShape, Result, SignatureError};
use crate::nn::model::Operand;
use crate::nn::types::{HalVersion, OperandType, OperationType};

/// The activation codes UNIDIRECTIONAL_SEQUENCE_LSTM accepts for its cell input and
/// output function: 0 none, 1 relu, 3 relu6, 4 tanh, 6 sigmoid (NNAPI lists exactly
/// these; 2 and 5 are not among them).
pub const LSTM_ACTIVATIONS: &[i32] = &[0, 1, 3, 4, 6];

/// A `[d0, d1]` tensor input of TENSOR_FLOAT32 whose dimensions must agree with
/// `expected` (0 = not yet known on either side); returns the merged dimensions.
pub(super) fn sequence_matrix(
    ctx: &Operands,
    index: usize,
    role: &'static str,
    expected: &[u32],
) -> Result<Vec<u32>> {
    let t = ctx.tensor(index, role, &[OperandType::TensorFloat32])?;
    if t.dimensions.is_empty() {
        return Ok(expected.to_vec());
    }
    if t.dimensions.len() != expected.len() {
        return Err(param_err(
            index,
            role,
            format!(
                "must have rank {}, got {}",
                expected.len(),
                t.dimensions.len()
            ),
        ));
    }
    t.dimensions
        .iter()
        .zip(expected)
        .map(|(&a, &b)| {
            merge_dim(a, b, role).map_err(|_| {
                param_err(
                    index,
                    role,
                    format!("has dimensions {:?}, expected {expected:?}", t.dimensions),
                )
            })
        })
        .collect()
}

/// The `[max_time, batch, input_size]` (time-major) or `[batch, max_time, input_size]`
/// input of a sequence operation, as (max_time, batch, input_size).
pub(super) fn sequence_input(ctx: &Operands, time_major: bool) -> Result<(u32, u32, u32)> {
    let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
    if input.dimensions.is_empty() {
        return Ok((0, 0, 0));
    }
    require_rank(input, 0, "input", 3..=3)?;
    let d = &input.dimensions;
    Ok(if time_major {
        (d[0], d[1], d[2])
    } else {
        (d[1], d[0], d[2])
    })
}

pub(super) fn sequence_output(time_major: bool, time: u32, batch: u32, units: u32) -> Vec<u32> {
    if time_major {
        vec![time, batch, units]
    } else {
        vec![batch, time, units]
    }
}

/// UNIDIRECTIONAL_SEQUENCE_LSTM (NNAPI feature level 3, outputs 1 and 2 from level 4).
///
/// Inputs: 0 input; 1-4 input-to-{input, forget, cell, output} weights `[units,
/// input_size]` (input gate optional: CIFG when absent); 5-8 recurrent-to-{...} weights
/// `[units, output_size]` (input gate optional, present exactly when 1 is); 9-11
/// cell-to-{input, forget, output} peephole weights `[units]` (optional, forget and
/// output together, input only without CIFG); 12-15 {input, forget, cell, output} gate
/// biases `[units]` (the input gate's exactly without CIFG); 16 projection weights
/// `[output_size, units]` and 17 projection bias `[output_size]` (optional; the bias
/// only with the weights; without projection output_size = units); 18 output state
/// `[batch, output_size]`; 19 cell state `[batch, units]`; 20 activation (INT32, one of
/// [`LSTM_ACTIVATIONS`]); 21 cell clip and 22 projection clip (FLOAT32 >= 0, 0 = none);
/// 23 time_major (BOOL); optionally 24-27 layer-normalization weights `[units]` for the
/// {input, forget, cell, output} gates (all of forget/cell/output or none; input only
/// without CIFG). Outputs: the output sequence, then optionally the final output state
/// and cell state together.
pub(super) fn lstm(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    let output_count = outputs.len();
    ctx.count(&[24, 28])?;
    if output_count != 1 && output_count != 3 {
        return Err(SignatureError::OutputCount {
            expected: "1 or 3".into(),
            actual: output_count,
        });
    }
    // The scalars and which optional tensors are present, checked before the tensors.
    let params = SequenceLstm::decode_params(ctx)?;
    let time_major = params.time_major;
    let cifg = params.terms.cifg;
    let (time, mut batch, mut input_size) = sequence_input(ctx, time_major)?;
    let forget = sequence_matrix(ctx, 2, "input_to_forget_weights", &[0, input_size])?;
    let mut units = forget[0];
    input_size = forget[1];
    for (i, role) in [(3, "input_to_cell_weights"), (4, "input_to_output_weights")] {
        let d = sequence_matrix(ctx, i, role, &[units, input_size])?;
        (units, input_size) = (d[0], d[1]);
    }
    if !cifg {
        units = sequence_matrix(ctx, 1, "input_to_input_weights", &[units, input_size])?[0];
    }
    let rf = sequence_matrix(ctx, 6, "recurrent_to_forget_weights", &[units, 0])?;
    units = rf[0];
    let mut output_size = rf[1];
    for (i, role) in [
        (7, "recurrent_to_cell_weights"),
        (8, "recurrent_to_output_weights"),
    ] {
        let d = sequence_matrix(ctx, i, role, &[units, output_size])?;
        (units, output_size) = (d[0], d[1]);
    }
    if !cifg {
        let d = sequence_matrix(ctx, 5, "recurrent_to_input_weights", &[units, output_size])?;
        (units, output_size) = (d[0], d[1]);
    }
    let vector = |index: usize, role: &'static str, units: u32| -> Result<u32> {
        Ok(sequence_matrix(ctx, index, role, &[units])?[0])
    };
    if params.terms.peephole {
        for (i, role) in [
            (9, "cell_to_input_weights"),
            (10, "cell_to_forget_weights"),
            (11, "cell_to_output_weights"),
        ] {
            if i != 9 || !cifg {
                units = vector(i, role, units)?;
            }
        }
    }
    for (i, role) in [
        (12, "input_gate_bias"),
        (13, "forget_gate_bias"),
        (14, "cell_bias"),
        (15, "output_gate_bias"),
    ] {
        if i != 12 || !cifg {
            units = vector(i, role, units)?;
        }
    }
    let projection = params.terms.projection;
    if projection {
        let d = sequence_matrix(ctx, 16, "projection_weights", &[output_size, units])?;
        (output_size, units) = (d[0], d[1]);
    } else {
        output_size = merge_dim(
            output_size,
            units,
            "output size without projection vs units",
        )?;
        units = output_size;
    }
    if params.terms.projection_bias {
        output_size = vector(17, "projection_bias", output_size)?;
    }
    let hs = sequence_matrix(ctx, 18, "output_state_in", &[batch, output_size])?;
    (batch, output_size) = (hs[0], hs[1]);
    let cs = sequence_matrix(ctx, 19, "cell_state_in", &[batch, units])?;
    (batch, units) = (cs[0], cs[1]);
    if params.terms.layer_norm {
        for (i, role) in [
            (24, "input_layer_norm_weights"),
            (25, "forget_layer_norm_weights"),
            (26, "cell_layer_norm_weights"),
            (27, "output_layer_norm_weights"),
        ] {
            if i != 24 || !cifg {
                units = vector(i, role, units)?;
            }
        }
    }
    if !projection {
        output_size = units;
    }
    let f32_out = |dimensions: Vec<u32>| OutputShape {
        operand_type: OperandType::TensorFloat32,
        dimensions,
    };
    let mut out = vec![f32_out(sequence_output(
        time_major,
        time,
        batch,
        output_size,
    ))];
    if output_count == 3 {
        out.push(f32_out(vec![batch, output_size]));
        out.push(f32_out(vec![batch, units]));
    }
    Ok(out)
}

/// UNIDIRECTIONAL_SEQUENCE_RNN (NNAPI feature level 3, output 1 from level 4).
///
/// Inputs: 0 input; 1 weights `[units, input_size]`; 2 recurrent weights `[units,
/// units]`; 3 bias `[units]`; 4 hidden state `[batch, units]`; 5 fused activation (a
/// FuseCode: 0 none, 1 relu, 2 relu1, 3 relu6); 6 time_major (INT32, 0 or 1). Outputs:
/// the output sequence, optionally the final hidden state.
pub(super) fn rnn(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    let output_count = outputs.len();
    ctx.count(&[7])?;
    if output_count != 1 && output_count != 2 {
        return Err(SignatureError::OutputCount {
            expected: "1 or 2".into(),
            actual: output_count,
        });
    }
    // time_major and the activation, checked before the tensors.
    let time_major = SequenceRnn::decode_params(ctx)?.time_major;
    let (time, batch, input_size) = sequence_input(ctx, time_major)?;
    let w = sequence_matrix(ctx, 1, "weights", &[0, input_size])?;
    let r = sequence_matrix(ctx, 2, "recurrent_weights", &[w[0], w[0]])?;
    let units = merge_dim(r[0], r[1], "recurrent weights rows vs columns")?;
    let units = sequence_matrix(ctx, 3, "bias", &[units])?[0];
    let h = sequence_matrix(ctx, 4, "hidden_state", &[batch, units])?;
    let (batch, units) = (h[0], h[1]);
    let f32_out = |dimensions: Vec<u32>| OutputShape {
        operand_type: OperandType::TensorFloat32,
        dimensions,
    };
    let mut out = vec![f32_out(sequence_output(time_major, time, batch, units))];
    if output_count == 2 {
        out.push(f32_out(vec![batch, units]));
    }
    Ok(out)
}

use super::Role as R;

pub(super) const RNN_ROLES: &[R] = &[
    R::Input,
    R::Weights,
    R::RecurrentWeights,
    R::Bias,
    R::HiddenState,
    R::Activation,
    R::TimeMajor,
];

pub(super) const LSTM_ROLES: &[R] = &[
    R::Input,
    R::InputToInputWeights,
    R::InputToForgetWeights,
    R::InputToCellWeights,
    R::InputToOutputWeights,
    R::RecurrentToInputWeights,
    R::RecurrentToForgetWeights,
    R::RecurrentToCellWeights,
    R::RecurrentToOutputWeights,
    R::CellToInputWeights,
    R::CellToForgetWeights,
    R::CellToOutputWeights,
    R::InputGateBias,
    R::ForgetGateBias,
    R::CellBias,
    R::OutputGateBias,
    R::ProjectionWeights,
    R::ProjectionBias,
    R::OutputStateIn,
    R::CellStateIn,
    R::Activation,
    R::CellClip,
    R::ProjectionClip,
    R::TimeMajor,
    R::InputLayerNormWeights,
    R::ForgetLayerNormWeights,
    R::CellLayerNormWeights,
    R::OutputLayerNormWeights,
];

/// The sequence operations' final-state outputs arrived in HAL 1.3.
pub(super) fn state_outputs_version(_: &[&Operand], outputs: &[&Operand]) -> HalVersion {
    if outputs.len() > 1 {
        HalVersion::V1_3
    } else {
        HalVersion::V1_0
    }
}
