//! Runs a model on the runtime's kernels with chosen intermediate tensors as extra
//! outputs: calibration statistics and accuracy analysis read what every operation
//! computed, exactly as the runtime computes it.

use std::sync::Arc;

use nnc_formats::nn::{IoInfo, Lifetime, Model, OperandIndex, OperandType};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::{HostWeights, PrepareOptions, Program};

use super::{QuantizeError, Sample};

/// The float32 activations of the main graph: its inputs and every tensor an operation
/// writes (constants are not activations; their ranges come from their values).
pub fn float_activations(model: &Model) -> Vec<OperandIndex> {
    let mut seen = vec![false; model.main.operands.len()];
    let mut out = Vec::new();
    let mut push = |i: OperandIndex, out: &mut Vec<OperandIndex>| {
        let ok = model.main.operands.get(i as usize).is_some_and(|o| {
            o.operand_type == OperandType::TensorFloat32 && !o.lifetime.is_constant()
        });
        if ok && !std::mem::replace(&mut seen[i as usize], true) {
            out.push(i);
        }
    };
    for &i in &model.main.inputs {
        push(i, &mut out);
    }
    for op in &model.main.operations {
        for &o in &op.outputs {
            push(o, &mut out);
        }
    }
    out
}

/// Where an observed tensor's values come from in one run.
#[derive(Clone, Copy)]
enum Source {
    /// The sample's k-th input (a model input is read as given).
    Input(usize),
    /// The observing program's k-th output.
    Output(usize),
}

/// A model prepared to report the values of chosen operands.
pub struct Observer {
    program: Program,
    sources: Vec<Source>,
    /// Scale and zero point of each observed operand that holds int8 values.
    dequantize: Vec<Option<(f32, i32)>>,
    what: &'static str,
}

impl Observer {
    /// Prepares `model` with `operands` (of its main graph: float32 or 8-bit quantized
    /// tensors) made model outputs.
    pub fn new(
        model: &Model,
        operands: &[OperandIndex],
        what: &'static str,
        threads: usize,
    ) -> Result<Observer, QuantizeError> {
        let mut observing = model.clone();
        let mut sources = Vec::with_capacity(operands.len());
        let mut dequantize = Vec::with_capacity(operands.len());
        for &i in operands {
            let operand = &model.main.operands[i as usize];
            dequantize.push(match operand.operand_type {
                OperandType::TensorQuant8AsymmSigned => Some((operand.scale, operand.zero_point)),
                _ => None,
            });
            if let Some(k) = model.main.inputs.iter().position(|&x| x == i) {
                sources.push(Source::Input(k));
                continue;
            }
            if let Some(k) = observing.main.outputs.iter().position(|&x| x == i) {
                sources.push(Source::Output(k));
                continue;
            }
            let dtype = match operand.operand_type {
                OperandType::TensorQuant8AsymmSigned => DataType::I8,
                _ => DataType::F32,
            };
            observing.main.operands[i as usize].lifetime = Lifetime::SubgraphOutput;
            observing.main.outputs.push(i);
            observing.output_info.push(IoInfo {
                name: super::operand_label(model, i),
                dtype,
                dims: operand.dimensions.clone(),
            });
            sources.push(Source::Output(observing.main.outputs.len() - 1));
        }
        // The plain kernels: a fused pair's intermediate would not be observable.
        let program = prepare(&observing, what, threads, false)?;
        Ok(Observer {
            program,
            sources,
            dequantize,
            what,
        })
    }

    /// Runs sample number `index` and hands each observed tensor's values, as float32
    /// (int8 ones dequantized), to `visit` with its position in the observed list.
    pub fn run(
        &self,
        sample: &Sample,
        index: usize,
        mut visit: impl FnMut(usize, &[f32]),
    ) -> Result<(), QuantizeError> {
        let outputs = self
            .program
            .execute_host(sample)
            .map_err(|source| QuantizeError::Run {
                sample: index,
                what: self.what,
                source,
            })?;
        let mut scratch = Vec::new();
        for (k, source) in self.sources.iter().enumerate() {
            let tensor = match *source {
                Source::Input(i) => &sample[i],
                Source::Output(i) => &outputs[i],
            };
            let values = as_f32(tensor, self.dequantize[k], &mut scratch);
            visit(k, values);
        }
        Ok(())
    }
}

/// `model` prepared on the host with its weights in memory, on `threads` threads.
pub(crate) fn prepare(
    model: &Model,
    what: &'static str,
    threads: usize,
    fusion: bool,
) -> Result<Program, QuantizeError> {
    let error = |source| QuantizeError::Prepare { what, source };
    let weights = Arc::new(HostWeights::new(model).map_err(error)?);
    let options = PrepareOptions {
        threads: threads.max(1),
        fusion,
        ..Default::default()
    };
    Program::prepare(model, weights, &options).map_err(error)
}

/// A tensor's values as float32: float32 read in place (when aligned), int8 dequantized,
/// anything else converted into `scratch`.
fn as_f32<'a>(
    tensor: &'a HostTensor,
    quant: Option<(f32, i32)>,
    scratch: &'a mut Vec<f32>,
) -> &'a [f32] {
    scratch.clear();
    match tensor.dtype {
        DataType::F32 => {
            if let Ok(values) = bytemuck::try_cast_slice::<u8, f32>(&tensor.data) {
                return values;
            }
            scratch.extend(
                tensor
                    .data
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            );
        }
        DataType::I8 => {
            let (scale, zp) = quant.unwrap_or((1.0, 0));
            scratch.extend(
                tensor
                    .data
                    .iter()
                    .map(|&b| scale * (i32::from(b as i8) - zp) as f32),
            );
        }
        DataType::F16 => scratch.extend(
            tensor
                .data
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        _ => {}
    }
    scratch
}
