//! Which operations become int8, with which parameters, and the rewritten model.
//!
//! Every float tensor an int8 operation reads or writes gets an int8 *twin* (a new
//! TENSOR_QUANT8_ASYMM_SIGNED operand); the float original stays where float operations
//! or the model's outputs read it. Where an int8 operation reads a value a float
//! operation (or the caller) produced, a QUANTIZE writes the twin; where a float
//! operation or a model output reads a value an int8 operation produced, a DEQUANTIZE
//! writes the original. The model's inputs and outputs keep their float types, so
//! callers feed and receive what they did before.

use std::collections::{BTreeSet, HashMap};

use nnc_formats::nn::{
    ChannelQuant, Lifetime, Model, Operand, OperandIndex, OperandType, Operation, OperationType,
    Pool,
};

use nnc_formats::nn::ops::{Int8, Work, schema};

use super::ranges::{self, QuantParams};
use super::{Calibration, QuantizeError, QuantizeOptions};
use crate::passes::graph::const_f32s;

/// How an operation type quantizes: one row per type that has an int8 form here.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QuantRule {
    /// A filter (input 1, constant) and bias (input 2) with symmetric int8 weights per
    /// output channel along `channel_dim` of the filter, an int32 bias at scale
    /// `input_scale * weight_scale`, and a calibrated output range.
    Weighted { channel_dim: usize, taps: Taps },
    /// Computes new values: every float input quantized, the output's range calibrated.
    Compute,
    /// An output range the NN set fixes (LOGISTIC and SOFTMAX: [0, 1); TANH: [-1, 1]).
    Fixed(QuantParams),
    /// Moves or selects values (and pools or resamples them within their range): the
    /// output keeps the data input's parameters. Quantized only where the data input is
    /// int8 already, so a float chain does not go through int8 for one reshape.
    Keeps { data: usize },
}

/// How a weighted operation's filter taps connect input channels to output channels:
/// what bias correction sums the weights' rounding over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taps {
    /// CONV_2D: an [out, h, w, in] filter, every output reads every input channel.
    Conv,
    /// GROUPED_CONV_2D: an [out, h, w, in / groups] filter, each output reads its group.
    Grouped,
    /// DEPTHWISE_CONV_2D: a [1, h, w, in * multiplier] filter, each output reads one input.
    Depthwise,
    /// FULLY_CONNECTED: an [out, in] filter.
    Dense,
    /// TRANSPOSE_CONV_2D scatters each input over several outputs: its bias is not
    /// corrected.
    Scattered,
}

/// The rule of an operation type, or `None` when it stays float: what the schema table
/// says of the operation's int8 form (`Int8`) and its work (`Work`, for the weighted
/// operations' filter layout).
pub fn rule(op: OperationType) -> Option<QuantRule> {
    let row = schema(op);
    Some(match row.int8_form() {
        Int8::Float => return None,
        Int8::Weighted => {
            let (channel_dim, taps) = match row.work_kind()? {
                Work::Convolution => (0, Taps::Conv),
                Work::GroupedConvolution => (0, Taps::Grouped),
                Work::DepthwiseConvolution => (3, Taps::Depthwise),
                Work::TransposedConvolution => (0, Taps::Scattered),
                Work::FullyConnected => (0, Taps::Dense),
                // No filter and bias to quantize per channel.
                Work::Pool | Work::BatchMatmul => return None,
            };
            QuantRule::Weighted { channel_dim, taps }
        }
        Int8::Rescales => QuantRule::Compute,
        Int8::Fixed { scale, zero_point } => QuantRule::Fixed(QuantParams { scale, zero_point }),
        Int8::Keeps { data } => QuantRule::Keeps { data },
    })
}

/// `model` with every DIV by a constant without zeros turned into a MUL by the
/// reciprocal (`None` when there is none): int8 has no division, and a division left in
/// float would cost a DEQUANTIZE and a QUANTIZE around it (hard-swish written as
/// `x * relu6(x + 3) / 6` has one per activation in PaddleOCR's models). The product
/// differs from the quotient by at most an ulp, far below int8's step.
pub fn divisions_as_products(model: &Model) -> Option<Model> {
    let g = &model.main;
    let constant_divisor = |op: &Operation| {
        op.op_type == OperationType::Div
            && op.inputs.get(1).is_some_and(|&d| {
                let o = &g.operands[d as usize];
                is_f32_tensor(o)
                    && o.lifetime.is_constant()
                    && const_f32s(model, d)
                        .is_some_and(|v| v.iter().all(|v| *v != 0.0 && v.is_finite()))
            })
    };
    if !g.operations.iter().any(constant_divisor) {
        return None;
    }
    let mut out = model.clone();
    for i in 0..out.main.operations.len() {
        if !constant_divisor(&model.main.operations[i]) {
            continue;
        }
        let d = model.main.operations[i].inputs[1];
        let reciprocal: Vec<u8> = const_f32s(model, d)
            .unwrap_or_default()
            .iter()
            .flat_map(|v| (1.0 / v).to_le_bytes())
            .collect();
        let operand = Operand::new(
            OperandType::TensorFloat32,
            model.main.operands[d as usize].dimensions.clone(),
        )
        .with_name(format!("1/{}", model.main.operands[d as usize].name));
        let r = out.add_constant_owned(operand, reciprocal);
        let op = &mut out.main.operations[i];
        op.op_type = OperationType::Mul;
        op.inputs[1] = r;
    }
    crate::passes::dead_code::compact(&mut out);
    Some(out)
}

/// Why an operation stays float.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeptReason {
    /// The user or the automatic search kept it.
    Requested,
    /// The operation type has no int8 form here.
    NoInt8Form,
    /// It moves values, and its input is float.
    FloatInput,
    /// Its weights are not constant float32 tensors.
    WeightsNotConstant,
    /// An operand is not float32 (float16, integers): nothing to quantize.
    NotFloat32,
    /// An input has no calibrated range (a value from a control-flow subgraph).
    NoRange,
    /// Its operands are 8-bit already (a model quantized before nnc saw it).
    AlreadyQuantized,
    /// A fixed-range output (SOFTMAX, LOGISTIC, TANH) that only float operations or the
    /// model's outputs read: int8 would gain nothing there and lose every probability
    /// below 1/256.
    FloatOutputOnly,
}

impl KeptReason {
    pub fn text(self) -> &'static str {
        match self {
            KeptReason::Requested => "kept in float as requested",
            KeptReason::NoInt8Form => "no int8 form",
            KeptReason::FloatInput => "moves values and its input is float",
            KeptReason::WeightsNotConstant => "weights or bias not constant",
            KeptReason::NotFloat32 => "not a float32 operation",
            KeptReason::NoRange => "an input has no calibrated range",
            KeptReason::AlreadyQuantized => "already 8-bit",
            KeptReason::FloatOutputOnly => {
                "fixed-range output read only in float (int8 would drop small probabilities)"
            }
        }
    }
}

/// What the rewrite will do.
pub struct Plan {
    /// Per main-graph operation: `Ok(())` when it becomes int8, else why not.
    pub decisions: Vec<Result<(), KeptReason>>,
    /// The parameters of every float operand that gets an int8 twin.
    pub params: HashMap<OperandIndex, QuantParams>,
}

impl Plan {
    pub fn is_quantized(&self, op: usize) -> bool {
        matches!(self.decisions.get(op), Some(Ok(())))
    }

    /// The parameters of operand `t`'s int8 twin (the planner gives every float tensor
    /// an int8 operation touches one; a missing one is a quantizer bug, not a panic).
    fn param(&self, t: OperandIndex) -> Result<QuantParams, QuantizeError> {
        self.params.get(&t).copied().ok_or_else(|| {
            QuantizeError::Pass(format!(
                "operand {t} has no int8 parameters (a planner bug)"
            ))
        })
    }
}

fn is_f32_tensor(o: &Operand) -> bool {
    o.operand_type == OperandType::TensorFloat32
}

/// Decides, operation by operation in order, which become int8 and the parameters of
/// every tensor they touch.
pub fn plan(
    model: &Model,
    ranges: &HashMap<OperandIndex, (f32, f32)>,
    keep: &BTreeSet<usize>,
) -> Plan {
    let g = &model.main;
    let mut params: HashMap<OperandIndex, QuantParams> = HashMap::new();
    // Operands an int8 operation writes.
    let mut int8 = vec![false; g.operands.len()];
    let mut decisions = Vec::with_capacity(g.operations.len());
    let feeds = feeds_int8_compute(model, keep);
    for (i, op) in g.operations.iter().enumerate() {
        let mut decision = decide(model, op, ranges, &int8, keep.contains(&i));
        if decision.is_ok()
            && matches!(rule(op.op_type), Some(QuantRule::Fixed(_)))
            && !op.outputs.iter().any(|&o| feeds[o as usize])
        {
            decision = Err(KeptReason::FloatOutputOnly);
        }
        if decision.is_ok() {
            let rule = rule(op.op_type).expect("decided ops have a rule");
            // Parameters of the float inputs it reads (weights are quantized on their own).
            for (k, &input) in op.inputs.iter().enumerate() {
                let o = &g.operands[input as usize];
                if !is_f32_tensor(o) || matches!(rule, QuantRule::Weighted { .. }) && k > 0 {
                    continue;
                }
                if params.contains_key(&input) {
                    continue;
                }
                let p = if o.lifetime.is_constant() {
                    constant_params(model, input)
                } else {
                    ranges
                        .get(&input)
                        .map(|&(lo, hi)| ranges::asymmetric_int8(lo, hi))
                };
                if let Some(p) = p {
                    params.insert(input, p);
                }
            }
            for &output in &op.outputs {
                let p = match rule {
                    QuantRule::Fixed(p) => p,
                    QuantRule::Keeps { data } => params[&op.inputs[data]],
                    QuantRule::Weighted { .. } | QuantRule::Compute => {
                        let (lo, hi) = ranges[&output];
                        ranges::asymmetric_int8(lo, hi)
                    }
                };
                params.insert(output, p);
                int8[output as usize] = true;
            }
        }
        decisions.push(decision);
    }
    Plan { decisions, params }
}

/// For every operand: whether an operation that computes in int8 (weighted or compute
/// rule, not kept in float) reads it, directly or through operations that only move
/// values.
fn feeds_int8_compute(model: &Model, keep: &BTreeSet<usize>) -> Vec<bool> {
    let g = &model.main;
    let mut feeds = vec![false; g.operands.len()];
    for (i, op) in g.operations.iter().enumerate().rev() {
        let reads = match rule(op.op_type) {
            _ if keep.contains(&i) => false,
            Some(QuantRule::Weighted { .. } | QuantRule::Compute) => true,
            Some(QuantRule::Keeps { .. } | QuantRule::Fixed(_)) => {
                op.outputs.iter().any(|&o| feeds[o as usize])
            }
            None => false,
        };
        if reads {
            for &input in &op.inputs {
                feeds[input as usize] = true;
            }
        }
    }
    feeds
}

fn decide(
    model: &Model,
    op: &Operation,
    ranges: &HashMap<OperandIndex, (f32, f32)>,
    int8: &[bool],
    kept: bool,
) -> Result<(), KeptReason> {
    let g = &model.main;
    let rule = rule(op.op_type).ok_or(KeptReason::NoInt8Form)?;
    if kept {
        return Err(KeptReason::Requested);
    }
    let operand = |i: OperandIndex| &g.operands[i as usize];
    for &o in &op.outputs {
        if !is_f32_tensor(operand(o)) {
            let quant8 = matches!(
                operand(o).operand_type,
                OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned
            );
            return Err(if quant8 {
                KeptReason::AlreadyQuantized
            } else {
                KeptReason::NotFloat32
            });
        }
        if !matches!(rule, QuantRule::Fixed(_) | QuantRule::Keeps { .. })
            && !ranges.contains_key(&o)
        {
            return Err(KeptReason::NoRange);
        }
    }
    match rule {
        QuantRule::Weighted { .. } => {
            let filter = op.inputs.get(1).map(|&i| operand(i));
            let bias = op.inputs.get(2).map(|&i| operand(i));
            let filter_ok = filter.is_some_and(|f| {
                is_f32_tensor(f) && f.lifetime.is_constant() && f.is_fully_specified()
            });
            let bias_ok = bias.is_some_and(|b| {
                b.lifetime == Lifetime::NoValue || is_f32_tensor(b) && b.lifetime.is_constant()
            });
            if !filter_ok || !bias_ok {
                return Err(KeptReason::WeightsNotConstant);
            }
            check_data_input(model, op.inputs[0], ranges, int8)
        }
        QuantRule::Keeps { data } => {
            let input = *op.inputs.get(data).ok_or(KeptReason::NotFloat32)?;
            if !is_f32_tensor(operand(input)) {
                return Err(KeptReason::NotFloat32);
            }
            if !int8[input as usize] {
                return Err(KeptReason::FloatInput);
            }
            Ok(())
        }
        QuantRule::Compute | QuantRule::Fixed(_) => {
            let mut any = false;
            for &input in &op.inputs {
                let o = operand(input);
                if o.operand_type == OperandType::TensorFloat16 {
                    return Err(KeptReason::NotFloat32);
                }
                if !is_f32_tensor(o) {
                    continue;
                }
                any = true;
                if !o.lifetime.is_constant() {
                    check_data_input(model, input, ranges, int8)?;
                } else if model.constant_bytes(input).is_none() {
                    return Err(KeptReason::WeightsNotConstant);
                }
            }
            if any {
                Ok(())
            } else {
                Err(KeptReason::NotFloat32)
            }
        }
    }
}

fn check_data_input(
    model: &Model,
    input: OperandIndex,
    ranges: &HashMap<OperandIndex, (f32, f32)>,
    int8: &[bool],
) -> Result<(), KeptReason> {
    let o = &model.main.operands[input as usize];
    if !is_f32_tensor(o) {
        return Err(KeptReason::NotFloat32);
    }
    if int8[input as usize] || ranges.contains_key(&input) {
        Ok(())
    } else {
        Err(KeptReason::NoRange)
    }
}

/// Asymmetric parameters from a constant's own values.
fn constant_params(model: &Model, index: OperandIndex) -> Option<QuantParams> {
    let values = const_f32s(model, index)?;
    let (lo, hi) = values
        .iter()
        .fold((0f32, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    Some(ranges::asymmetric_int8(lo, hi))
}

/// Builds the int8 model `plan` describes.
pub fn build(
    model: &Model,
    plan: &Plan,
    calibration: &Calibration,
    options: &QuantizeOptions,
) -> Result<Built, QuantizeError> {
    let g = &model.main;
    let mut out = clone_without_replaced_weights(model, plan);
    out.main.operations.clear();
    // Which float operands are still read as float: by float operations or as outputs.
    let mut float_readers = vec![false; g.operands.len()];
    for (i, op) in g.operations.iter().enumerate() {
        if !plan.is_quantized(i) {
            for &input in &op.inputs {
                float_readers[input as usize] = true;
            }
        }
    }
    for &o in &g.outputs {
        float_readers[o as usize] = true;
    }
    let mut twins: HashMap<OperandIndex, OperandIndex> = HashMap::new();
    for (i, op) in g.operations.iter().enumerate() {
        if !plan.is_quantized(i) {
            out.main.operations.push(op.clone());
            continue;
        }
        let rule = rule(op.op_type).expect("quantized ops have a rule");
        let mut inputs = op.inputs.clone();
        if let QuantRule::Weighted { channel_dim, taps } = rule {
            let input_scale = plan.param(op.inputs[0])?.scale;
            let computed;
            let weights = match calibration.weights.get(&i) {
                Some(w) => w,
                None => {
                    computed =
                        quantize_weights(model, op, channel_dim, taps, calibration, options)?;
                    &computed
                }
            };
            inputs[1] = out.add_constant_owned(weights.operand.clone(), weights.bytes.clone());
            let (scales, shift) = (&weights.scales, weights.shift.as_deref());
            if let Some(&bias) = op.inputs.get(2)
                && g.operands[bias as usize].lifetime != Lifetime::NoValue
            {
                inputs[2] =
                    quantize_bias(&mut out, model, bias, input_scale, scales, shift, options)?;
            } else if let Some(slot) = inputs.get_mut(2) {
                *slot = out.add_no_value(OperandType::TensorInt32);
            }
        }
        for (k, &input) in op.inputs.iter().enumerate() {
            if matches!(rule, QuantRule::Weighted { .. }) && k > 0 {
                continue;
            }
            let o = &g.operands[input as usize];
            if !is_f32_tensor(o) {
                continue;
            }
            inputs[k] = twin_for_read(&mut out, model, plan, &mut twins, input, &op.source)?;
        }
        let mut outputs = op.outputs.clone();
        for (k, &output) in op.outputs.iter().enumerate() {
            let twin = new_twin(&mut out, model, output, plan.param(output)?);
            twins.insert(output, twin);
            outputs[k] = twin;
        }
        out.main.operations.push(Operation {
            op_type: op.op_type,
            inputs,
            outputs: outputs.clone(),
            source: op.source.clone(),
        });
        for (&output, &twin) in op.outputs.iter().zip(&outputs) {
            if float_readers[output as usize] {
                out.main.operations.push(Operation {
                    op_type: OperationType::Dequantize,
                    inputs: vec![twin],
                    outputs: vec![output],
                    source: op.source.clone(),
                });
            }
        }
    }
    // The float weights and the values only int8 operations read now are dead.
    let remap = crate::passes::dead_code::compact(&mut out);
    nnc_formats::nn::validate(&out)?;
    let twins = twins
        .into_iter()
        .filter_map(|(float, int8)| {
            let int8 = *remap.get(int8 as usize)?;
            (int8 != u32::MAX).then_some((float, int8))
        })
        .collect();
    Ok(Built { model: out, twins })
}

/// A rewritten model.
pub struct Built {
    pub model: Model,
    /// Float operand of the source model -> its int8 twin in `model`.
    pub twins: HashMap<OperandIndex, OperandIndex>,
}

/// The int8 operand an int8 operation reads for float operand `input`: its twin, made
/// here by a QUANTIZE (of a float value) or from a constant's values when it has none.
fn twin_for_read(
    out: &mut Model,
    model: &Model,
    plan: &Plan,
    twins: &mut HashMap<OperandIndex, OperandIndex>,
    input: OperandIndex,
    source: &str,
) -> Result<OperandIndex, QuantizeError> {
    if let Some(&t) = twins.get(&input) {
        return Ok(t);
    }
    let p = plan.param(input)?;
    let o = &model.main.operands[input as usize];
    let twin = if o.lifetime.is_constant() {
        let values = const_f32s(model, input).unwrap_or_default();
        let bytes: Vec<u8> = values
            .iter()
            .map(|&v| ranges::quantize_value(v, p) as u8)
            .collect();
        let operand = Operand::new(OperandType::TensorQuant8AsymmSigned, o.dimensions.clone())
            .with_quant(p.scale, p.zero_point)
            .with_name(o.name.clone());
        out.add_constant_owned(operand, bytes)
    } else {
        let twin = new_twin(out, model, input, p);
        out.main.operations.push(Operation {
            op_type: OperationType::Quantize,
            inputs: vec![input],
            outputs: vec![twin],
            source: source.to_string(),
        });
        twin
    };
    twins.insert(input, twin);
    Ok(twin)
}

fn new_twin(out: &mut Model, model: &Model, of: OperandIndex, p: QuantParams) -> OperandIndex {
    let o = &model.main.operands[of as usize];
    out.add_operand(
        Operand::new(OperandType::TensorQuant8AsymmSigned, o.dimensions.clone())
            .with_quant(p.scale, p.zero_point)
            .with_name(o.name.clone()),
    )
}

/// A weighted operation's int8 filter, made once per quantization (it does not depend
/// on the activation ranges), and the bias shift its rounding causes.
pub struct QuantizedWeights {
    pub operand: Operand,
    pub bytes: Vec<u8>,
    pub scales: Vec<f32>,
    /// Bias correction: how much the rounding moves each output channel's mean.
    pub shift: Option<Vec<f64>>,
}

/// The int8 weights of every weighted operation with a constant float32 filter, by
/// operation index.
pub fn quantize_all_weights(
    model: &Model,
    calibration: &Calibration,
    options: &QuantizeOptions,
) -> Result<HashMap<usize, QuantizedWeights>, QuantizeError> {
    let g = &model.main;
    let mut all = HashMap::new();
    for (i, op) in g.operations.iter().enumerate() {
        let Some(QuantRule::Weighted { channel_dim, taps }) = rule(op.op_type) else {
            continue;
        };
        let constant = op.inputs.get(1).is_some_and(|&f| {
            let f = &g.operands[f as usize];
            is_f32_tensor(f) && f.lifetime.is_constant() && f.is_fully_specified()
        });
        if constant && model.constant_bytes(op.inputs[1]).is_some() {
            all.insert(
                i,
                quantize_weights(model, op, channel_dim, taps, calibration, options)?,
            );
        }
    }
    Ok(all)
}

/// Weights as symmetric int8 values (two's complement bytes in [-127, 127]), the scale of
/// each channel along `channel_dim` (one for the whole tensor unless `per_channel`), and
/// each value's rounding error `q * scale - v`.
pub struct SymmetricWeights {
    pub bytes: Vec<u8>,
    pub scales: Vec<f32>,
    pub rounding: Vec<f32>,
}

/// [`SymmetricWeights`] of `values` (dimensions `dims`): each channel's scale maps its
/// largest magnitude to 127, values round half to even.
pub fn symmetric_weights(
    values: &[f32],
    dims: &[usize],
    channel_dim: usize,
    per_channel: bool,
) -> SymmetricWeights {
    let channels = if per_channel {
        dims.get(channel_dim).copied().unwrap_or(1).max(1)
    } else {
        1
    };
    let inner: usize = dims.iter().skip(channel_dim + 1).product();
    let channel_of = |flat: usize| {
        if channels == 1 {
            0
        } else {
            (flat / inner.max(1)) % channels
        }
    };
    let mut abs_max = vec![0f32; channels];
    for (k, &v) in values.iter().enumerate() {
        let c = channel_of(k);
        abs_max[c] = abs_max[c].max(v.abs());
    }
    let scales: Vec<f32> = abs_max
        .iter()
        .map(|&m| ranges::symmetric_int8_scale(m))
        .collect();
    let mut rounding = Vec::with_capacity(values.len());
    let bytes = values
        .iter()
        .enumerate()
        .map(|(k, &v)| {
            let scale = scales[channel_of(k)];
            let q = (v / scale).round_ties_even().clamp(-127.0, 127.0);
            rounding.push(q * scale - v);
            q as i8 as u8
        })
        .collect();
    SymmetricWeights {
        bytes,
        scales,
        rounding,
    }
}

/// Symmetric int8 weights, one scale per output channel along `channel_dim` (or one for
/// the whole tensor), and the bias shift their rounding causes.
fn quantize_weights(
    model: &Model,
    op: &Operation,
    channel_dim: usize,
    taps: Taps,
    calibration: &Calibration,
    options: &QuantizeOptions,
) -> Result<QuantizedWeights, QuantizeError> {
    let filter = op.inputs[1];
    let o = &model.main.operands[filter as usize];
    let values = const_f32s(model, filter).ok_or_else(|| {
        QuantizeError::Pass(format!("filter operand {filter} has no value at hand"))
    })?;
    let dims: Vec<usize> = o.dimensions.iter().map(|&d| d as usize).collect();
    let channel_dim = channel_dim.min(dims.len().saturating_sub(1));
    let SymmetricWeights {
        bytes,
        scales,
        rounding,
    } = symmetric_weights(&values, &dims, channel_dim, options.per_channel);
    let operand = if options.per_channel {
        Operand {
            channel_quant: Some(ChannelQuant {
                scales: scales.clone(),
                channel_dim: channel_dim as u32,
            }),
            ..Operand::new(
                OperandType::TensorQuant8SymmPerChannel,
                o.dimensions.clone(),
            )
        }
    } else {
        Operand::new(OperandType::TensorQuant8AsymmSigned, o.dimensions.clone())
            .with_quant(scales[0], 0)
    }
    .with_name(o.name.clone());
    let shift = if options.bias_correction {
        calibration
            .channel_means
            .get(&op.inputs[0])
            .and_then(|means| output_mean_shift(taps, &o.dimensions, &rounding, means))
    } else {
        None
    };
    Ok(QuantizedWeights {
        operand,
        bytes,
        scales,
        shift,
    })
}

/// `model` without the bytes of the float filters the int8 operations replace (a
/// pool read only by such filters is left empty; compaction drops it), so building a
/// candidate does not copy every weight of the model.
fn clone_without_replaced_weights(model: &Model, plan: &Plan) -> Model {
    let g = &model.main;
    let mut replaced = vec![false; g.operands.len()];
    for (i, op) in g.operations.iter().enumerate() {
        if plan.is_quantized(i)
            && matches!(rule(op.op_type), Some(QuantRule::Weighted { .. }))
            && let Some(&f) = op.inputs.get(1)
        {
            replaced[f as usize] = true;
        }
    }
    // A pool stays when anything else reads it: another operand, float operations'
    // filters, any subgraph's constants.
    let mut needed = vec![false; model.pools.len()];
    for (t, graph) in model.graphs().enumerate() {
        for (k, o) in graph.operands.iter().enumerate() {
            if o.lifetime == Lifetime::ConstantReference
                && !(t == 0 && replaced[k])
                && let Some(n) = needed.get_mut(o.location.pool_index as usize)
            {
                *n = true;
            }
        }
    }
    // Filters still read by a float operation keep their bytes.
    for (i, op) in g.operations.iter().enumerate() {
        if !plan.is_quantized(i) {
            for &input in &op.inputs {
                let o = &g.operands[input as usize];
                if o.lifetime == Lifetime::ConstantReference
                    && let Some(n) = needed.get_mut(o.location.pool_index as usize)
                {
                    *n = true;
                }
            }
        }
    }
    Model {
        main: model.main.clone(),
        referenced: model.referenced.clone(),
        operand_values: model.operand_values.clone(),
        pools: model
            .pools
            .iter()
            .zip(&needed)
            .map(|(p, &n)| {
                if n {
                    p.clone()
                } else {
                    Pool::Bytes(Vec::new())
                }
            })
            .collect(),
        relax_computation_float32_to_float16: model.relax_computation_float32_to_float16,
        input_info: model.input_info.clone(),
        output_info: model.output_info.clone(),
    }
}

/// The data inputs of the weighted operations whose bias can be corrected, with their
/// channel counts (the last dimension).
pub fn weighted_inputs(model: &Model) -> HashMap<OperandIndex, usize> {
    let g = &model.main;
    g.operations
        .iter()
        .filter(|op| {
            matches!(rule(op.op_type), Some(QuantRule::Weighted { taps, .. }) if taps != Taps::Scattered)
        })
        .filter_map(|op| {
            let input = *op.inputs.first()?;
            let channels = *g.operands.get(input as usize)?.dimensions.last()?;
            (channels > 0).then_some((input, channels as usize))
        })
        .collect()
}

/// How much the weights' rounding moves each output channel's mean, given the mean of
/// each input channel: `sum over taps of rounding * mean(input channel of the tap)`.
/// Padding is taken as data (the shift at the borders is slightly off). `None` when the
/// layout does not match the means (then the bias stays as it is).
fn output_mean_shift(
    taps: Taps,
    filter_dims: &[u32],
    rounding: &[f32],
    means: &[f64],
) -> Option<Vec<f64>> {
    let dims: Vec<usize> = filter_dims.iter().map(|&d| d as usize).collect();
    let c = means.len();
    if rounding.len() != dims.iter().product::<usize>() {
        return None;
    }
    // (output channels, element k -> (its output channel, the input channel it reads))
    type Map = Box<dyn Fn(usize) -> (usize, usize)>;
    let (outputs, map): (usize, Map) = match (taps, &dims[..]) {
        (Taps::Conv, &[o, h, w, i]) if i == c => (o, Box::new(move |k| (k / (h * w * i), k % i))),
        (Taps::Grouped, &[o, h, w, i]) if i > 0 && c.is_multiple_of(i) => {
            let groups = c / i;
            if groups == 0 || !o.is_multiple_of(groups) {
                return None;
            }
            let per_group = o / groups;
            (
                o,
                Box::new(move |k| {
                    let out = k / (h * w * i);
                    (out, (out / per_group) * i + k % i)
                }),
            )
        }
        (Taps::Depthwise, &[1, _, _, o]) if c > 0 && o.is_multiple_of(c) => {
            let multiplier = o / c;
            (o, Box::new(move |k| (k % o, (k % o) / multiplier)))
        }
        (Taps::Dense, &[o, i]) if i == c => (o, Box::new(move |k| (k / i, k % i))),
        // A filter whose shape does not match the input's channels: no correction.
        (Taps::Conv | Taps::Grouped | Taps::Depthwise | Taps::Dense, _) => return None,
        (Taps::Scattered, _) => return None,
    };
    let mut shift = vec![0f64; outputs];
    for (k, &r) in rounding.iter().enumerate() {
        let (out, input) = map(k);
        shift[out] += f64::from(r) * means[input];
    }
    Some(shift)
}

/// An int32 bias at scale `input_scale * weight_scale` (per channel: the NN set's bias
/// operand then carries scale 0 and each value its channel's product), less `shift`
/// (bias correction) where given.
fn quantize_bias(
    out: &mut Model,
    model: &Model,
    bias: OperandIndex,
    input_scale: f32,
    weight_scales: &[f32],
    shift: Option<&[f64]>,
    options: &QuantizeOptions,
) -> Result<OperandIndex, QuantizeError> {
    let o = &model.main.operands[bias as usize];
    let values = const_f32s(model, bias)
        .ok_or_else(|| QuantizeError::Pass(format!("bias operand {bias} has no value at hand")))?;
    // One scale per channel, or one for the tensor (a validated model has a bias per
    // output channel).
    let scale_of = |c: usize| {
        input_scale
            * weight_scales
                .get(c)
                .or(weight_scales.first())
                .copied()
                .unwrap_or(1.0)
    };
    let bytes: Vec<u8> = values
        .iter()
        .enumerate()
        .flat_map(|(c, &v)| {
            // The corrected bias cancels the mean shift of the rounded weights.
            let v = f64::from(v) - shift.and_then(|s| s.get(c)).copied().unwrap_or(0.0);
            let q = (v / f64::from(scale_of(c)))
                .round_ties_even()
                .clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32;
            q.to_le_bytes()
        })
        .collect();
    let scale = if options.per_channel {
        0.0
    } else {
        scale_of(0)
    };
    let operand = Operand::new(OperandType::TensorInt32, o.dimensions.clone())
        .with_quant(scale, 0)
        .with_name(o.name.clone());
    Ok(out.add_constant_owned(operand, bytes))
}
