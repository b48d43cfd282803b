//! Post-training quantization on a real (small) model: the int8 arithmetic of weights
//! and biases, every calibration method, per-channel against per-tensor weights, mixed
//! precision, and refusals.

use std::path::PathBuf;
use std::sync::Arc;

use nnc_compiler::pipeline::{LowerOptions, lower_file};
use nnc_compiler::quantize::{
    self, CalibrationMethod, QuantizeError, QuantizeOptions, Quantized, RangeMethod, Sample,
};
use nnc_formats::nn::{Model, OperandType, OperationType};
use nnc_formats::tensor::HostTensor;
use nnc_runtime::{HostWeights, PrepareOptions, Program};

fn tiny_cnn() -> Model {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/models/tiny_cnn.onnx");
    lower_file(&path, &LowerOptions::default()).unwrap().model
}

/// Seeded samples of the model's input: images with a per-sample brightness and
/// contrast, so activations vary between samples as real data does.
fn samples(count: usize, seed: u64) -> Vec<Sample> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    (0..count)
        .map(|_| {
            let (offset, contrast) = (next() - 0.5, 0.5 + 1.5 * next());
            let values: Vec<f32> = (0..3 * 32 * 32)
                .map(|_| offset + contrast * (next() + next() + next() - 1.5))
                .collect();
            vec![HostTensor::from_f32(vec![1, 3, 32, 32], &values).unwrap()]
        })
        .collect()
}

fn run(model: &Model, sample: &Sample) -> Vec<f32> {
    let weights = Arc::new(HostWeights::new(model).unwrap());
    let program = Program::prepare(model, weights, &PrepareOptions::default()).unwrap();
    program.execute_host(sample).unwrap()[0]
        .to_f32_vec()
        .unwrap()
}

/// SQNR in dB of `q` against `r` over all the samples.
fn sqnr(float: &Model, quantized: &Model, held_out: &[Sample]) -> f64 {
    let (mut signal, mut noise) = (0f64, 0f64);
    for s in held_out {
        let (r, q) = (run(float, s), run(quantized, s));
        for (&r, &q) in r.iter().zip(&q) {
            signal += f64::from(r) * f64::from(r);
            noise += f64::from(r - q) * f64::from(r - q);
        }
    }
    10.0 * (signal / noise).log10()
}

fn quantize_with(model: &Model, options: QuantizeOptions) -> Quantized {
    quantize::quantize(model, &samples(16, 1), &options).unwrap()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Pairs each weighted operation of the float model with its int8 counterpart (by
/// source node).
fn weighted_pairs<'a>(
    float: &'a Model,
    quantized: &'a Model,
) -> Vec<(
    &'a nnc_formats::nn::Operation,
    &'a nnc_formats::nn::Operation,
)> {
    let weighted = |t: OperationType| {
        matches!(
            t,
            OperationType::Conv2d | OperationType::DepthwiseConv2d | OperationType::FullyConnected
        )
    };
    float
        .main
        .operations
        .iter()
        .filter(|op| weighted(op.op_type))
        .map(|f| {
            let q = quantized
                .main
                .operations
                .iter()
                .find(|q| q.op_type == f.op_type && q.source == f.source)
                .unwrap_or_else(|| panic!("no int8 {} for '{}'", f.op_type.name(), f.source));
            (f, q)
        })
        .collect()
}

#[test]
fn weights_are_symmetric_per_channel_and_biases_at_input_times_weight_scale() {
    let float = tiny_cnn();
    let q = quantize_with(
        &float,
        QuantizeOptions {
            bias_correction: false,
            ..Default::default()
        },
    )
    .model;
    let pairs = weighted_pairs(&float, &q);
    assert_eq!(pairs.len(), 4, "three convolutions and the classifier");
    for (f, op) in pairs {
        let input = &q.main.operands[op.inputs[0] as usize];
        assert_eq!(input.operand_type, OperandType::TensorQuant8AsymmSigned);
        let filter = &q.main.operands[op.inputs[1] as usize];
        assert_eq!(filter.operand_type, OperandType::TensorQuant8SymmPerChannel);
        let cq = filter.channel_quant.as_ref().unwrap();
        let channel_dim = cq.channel_dim as usize;
        let expected_dim = if op.op_type == OperationType::DepthwiseConv2d {
            3
        } else {
            0
        };
        assert_eq!(channel_dim, expected_dim);
        let w = f32s(float.constant_bytes(f.inputs[1]).unwrap());
        let wq = q.constant_bytes(op.inputs[1]).unwrap();
        let dims: Vec<usize> = filter.dimensions.iter().map(|&d| d as usize).collect();
        let inner: usize = dims[channel_dim + 1..].iter().product();
        let channel = |k: usize| (k / inner) % dims[channel_dim];
        // Each channel's largest magnitude maps to +-127, and every weight is within
        // half a step of its float value.
        let mut largest = vec![0i32; dims[channel_dim]];
        for (k, (&w, &b)) in w.iter().zip(wq).enumerate() {
            let c = channel(k);
            let v = i32::from(b as i8);
            largest[c] = largest[c].max(v.abs());
            let err = (w - cq.scales[c] * v as f32).abs();
            assert!(err <= cq.scales[c] * 0.5 + 1e-7, "weight {k}: {err}");
        }
        assert!(largest.iter().all(|&m| m == 127), "{largest:?}");
        // Bias: int32 at input_scale * weight_scale[c], scale 0 in the operand.
        let bias = &q.main.operands[op.inputs[2] as usize];
        assert_eq!(bias.operand_type, OperandType::TensorInt32);
        assert_eq!(bias.scale, 0.0);
        let b = f32s(float.constant_bytes(f.inputs[2]).unwrap());
        let bq: Vec<i32> = q
            .constant_bytes(op.inputs[2])
            .unwrap()
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        for (c, (&b, &bq)) in b.iter().zip(&bq).enumerate() {
            let s = f64::from(input.scale) * f64::from(cq.scales[c]);
            assert_eq!(bq, (f64::from(b) / s).round_ties_even() as i32, "bias {c}");
        }
    }
}

#[test]
fn every_calibration_method_gives_a_close_model_on_held_out_inputs() {
    let float = tiny_cnn();
    let held_out = samples(8, 99);
    let mut uniform = Vec::new();
    for method in CalibrationMethod::ALL {
        let q = quantize_with(
            &float,
            QuantizeOptions {
                method: RangeMethod::Fixed(method),
                ..Default::default()
            },
        );
        assert_eq!(q.report.method, method.name());
        // Eight of the ten operations are int8: the input's layout transpose (on a float
        // input) and the final SOFTMAX (read only as the float output) stay float.
        assert_eq!(q.report.operations_quantized, 8, "{}", method.name());
        let softmax = q
            .report
            .float_operations
            .iter()
            .find(|f| f.op_type == "SOFTMAX")
            .unwrap();
        assert!(
            softmax.reason.contains("read only in float"),
            "{}",
            softmax.reason
        );
        let db = sqnr(&float, &q.model, &held_out);
        assert!(db > 25.0, "{}: {db:.1} dB", method.name());
        // The report's output SQNR (calibration samples) is of the same order.
        assert!((q.report.outputs[0].sqnr_db - db).abs() < 12.0);
        uniform.push(q.report.outputs[0].sqnr_db);
    }
    // The search starts from the best of them and only keeps changes that help, on the
    // same samples (all 16 score candidates).
    let auto = quantize_with(&float, QuantizeOptions::default());
    assert_eq!(auto.report.method, "auto");
    let search = auto.report.search.as_ref().unwrap();
    assert_eq!(search.samples, 16);
    let best = uniform.iter().copied().fold(f64::MIN, f64::max);
    assert!(
        auto.report.outputs[0].sqnr_db >= best - 0.01,
        "auto {} dB, best single method {best} dB",
        auto.report.outputs[0].sqnr_db
    );
    assert!(sqnr(&float, &auto.model, &held_out) > 25.0);
}

#[test]
fn per_channel_weights_lose_less_than_per_tensor() {
    let float = tiny_cnn();
    let weight_error = |q: &Model| -> f64 {
        weighted_pairs(&float, q)
            .into_iter()
            .map(|(f, op)| {
                let w = f32s(float.constant_bytes(f.inputs[1]).unwrap());
                let filter = &q.main.operands[op.inputs[1] as usize];
                let bytes = q.constant_bytes(op.inputs[1]).unwrap();
                let scale_of = |k: usize| match &filter.channel_quant {
                    Some(cq) => {
                        let dims = &filter.dimensions;
                        let d = cq.channel_dim as usize;
                        let inner: usize = dims[d + 1..].iter().map(|&x| x as usize).product();
                        cq.scales[(k / inner) % dims[d] as usize]
                    }
                    None => filter.scale,
                };
                w.iter()
                    .zip(bytes)
                    .enumerate()
                    .map(|(k, (&w, &b))| {
                        let e = f64::from(w - scale_of(k) * f32::from(b as i8));
                        e * e
                    })
                    .sum::<f64>()
            })
            .sum()
    };
    let channel = quantize_with(&float, QuantizeOptions::default());
    let tensor = quantize_with(
        &float,
        QuantizeOptions {
            per_channel: false,
            ..Default::default()
        },
    );
    assert!(channel.report.per_channel && !tensor.report.per_channel);
    let per_tensor_filter = weighted_pairs(&float, &tensor.model)
        .into_iter()
        .map(|(_, op)| tensor.model.main.operands[op.inputs[1] as usize].operand_type)
        .collect::<Vec<_>>();
    assert!(
        per_tensor_filter
            .iter()
            .all(|&t| t == OperandType::TensorQuant8AsymmSigned)
    );
    let (c, t) = (weight_error(&channel.model), weight_error(&tensor.model));
    assert!(c < t, "per-channel {c} vs per-tensor {t}");
    // Both run.
    let held_out = samples(4, 7);
    assert!(sqnr(&float, &tensor.model, &held_out) > 15.0);
}

#[test]
fn keep_float_keeps_the_named_operations_in_float() {
    let float = tiny_cnn();
    let conv = float
        .main
        .operations
        .iter()
        .find(|op| op.op_type == OperationType::Conv2d)
        .unwrap()
        .source
        .clone();
    let q = quantize_with(
        &float,
        QuantizeOptions {
            keep_float: vec![conv.clone()],
            ..Default::default()
        },
    );
    let kept = q
        .report
        .float_operations
        .iter()
        .find(|f| f.source == conv)
        .expect("the named convolution is reported float");
    assert!(kept.reason.contains("--keep-float"), "{}", kept.reason);
    let op = q
        .model
        .main
        .operations
        .iter()
        .find(|op| op.source == conv && op.op_type == OperationType::Conv2d)
        .unwrap();
    let input = &q.model.main.operands[op.inputs[0] as usize];
    assert_eq!(input.operand_type, OperandType::TensorFloat32);
    // An unknown name is refused.
    let err = quantize::quantize(
        &float,
        &samples(2, 1),
        &QuantizeOptions {
            keep_float: vec!["no such node".into()],
            ..Default::default()
        },
    )
    .err()
    .unwrap();
    assert!(matches!(err, QuantizeError::UnknownKeepFloat(_)), "{err}");
}

#[test]
fn target_sqnr_keeps_the_most_sensitive_operations_in_float() {
    let float = tiny_cnn();
    let plain = quantize_with(&float, QuantizeOptions::default());
    let target = plain.report.outputs[0].sqnr_db + 6.0;
    let mixed = quantize_with(
        &float,
        QuantizeOptions {
            target_sqnr_db: Some(target),
            ..Default::default()
        },
    );
    let automatic: Vec<_> = mixed
        .report
        .float_operations
        .iter()
        .filter(|f| f.reason.starts_with("automatic"))
        .collect();
    assert!(!automatic.is_empty());
    assert!(mixed.report.operations_quantized < plain.report.operations_quantized);
    assert!(
        mixed.report.outputs[0].sqnr_db >= target || mixed.report.operations_quantized == 0,
        "{} dB after keeping {} in float",
        mixed.report.outputs[0].sqnr_db,
        automatic.len()
    );
}

#[test]
fn non_finite_calibration_values_are_refused() {
    let float = tiny_cnn();
    let mut bad = samples(2, 3);
    let mut values = bad[1][0].to_f32_vec().unwrap();
    values[17] = f32::NAN;
    bad[1][0] = HostTensor::from_f32(vec![1, 3, 32, 32], &values).unwrap();
    let err = quantize::quantize(&float, &bad, &QuantizeOptions::default())
        .err()
        .unwrap();
    assert!(
        matches!(err, QuantizeError::NonFinite { ref tensor, .. } if tensor == "input"),
        "{err}"
    );
    let none = quantize::quantize(&float, &[], &QuantizeOptions::default())
        .err()
        .unwrap();
    assert!(matches!(none, QuantizeError::NoSamples));
}

#[test]
fn bias_correction_cancels_the_mean_shift_of_rounded_weights() {
    let float = tiny_cnn();
    let calibration = samples(16, 1);
    let q = quantize_with(&float, QuantizeOptions::default()).model;
    // The first convolution reads the model input (NCHW, transposed to NHWC): its input
    // channel means are the input's per-channel means over the calibration samples.
    let (f, op) = weighted_pairs(&float, &q)
        .into_iter()
        .find(|(f, _)| f.op_type == OperationType::Conv2d)
        .unwrap();
    let mut means = [0f64; 3];
    for s in &calibration {
        let v = s[0].to_f32_vec().unwrap();
        for (c, mean) in means.iter_mut().enumerate() {
            let plane = &v[c * 1024..(c + 1) * 1024];
            *mean += plane.iter().map(|&x| f64::from(x)).sum::<f64>() / 1024.0 / 16.0;
        }
    }
    let filter = &q.main.operands[op.inputs[1] as usize];
    let scales = &filter.channel_quant.as_ref().unwrap().scales;
    let dims = &filter.dimensions;
    let per_out = (dims[1] * dims[2] * dims[3]) as usize;
    let w = f32s(float.constant_bytes(f.inputs[1]).unwrap());
    let wq = q.constant_bytes(op.inputs[1]).unwrap();
    let b = f32s(float.constant_bytes(f.inputs[2]).unwrap());
    let bq: Vec<i32> = q
        .constant_bytes(op.inputs[2])
        .unwrap()
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let input_scale = f64::from(q.main.operands[op.inputs[0] as usize].scale);
    let mut corrected = 0;
    for (o, (&b, &bq)) in b.iter().zip(&bq).enumerate() {
        let shift: f64 = (0..per_out)
            .map(|t| {
                let k = o * per_out + t;
                let rounding = f64::from(scales[o]) * f64::from(wq[k] as i8) - f64::from(w[k]);
                rounding * means[t % 3]
            })
            .sum();
        let s = input_scale * f64::from(scales[o]);
        let expected = ((f64::from(b) - shift) / s).round_ties_even() as i32;
        assert!(
            (bq - expected).abs() <= 1,
            "channel {o}: {bq} vs {expected}"
        );
        corrected += usize::from(bq != (f64::from(b) / s).round_ties_even() as i32);
    }
    assert!(corrected > 0, "the correction changed no bias");
}

/// A float TFLite model quantizes like an ONNX one (the quantizer works on the NN IR
/// both frontends produce).
#[test]
fn float_tflite_models_quantize_too() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/models/mobilenet_v2.tflite");
    assert!(
        path.exists(),
        "{} is missing: ../shared must sit beside the project",
        path.display()
    );
    let float = lower_file(&path, &LowerOptions::default()).unwrap().model;
    let reference =
        nnc_formats::npy::read_npy_file(path.with_extension("tflite.input.npy")).unwrap();
    let image = reference.to_f32_vec().unwrap();
    // Two calibration images near the reference one, a third held out.
    let near = |k: u32| -> Sample {
        let values: Vec<f32> = image
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                v + 0.05 * (((i as u32).wrapping_mul(2_654_435_761) ^ k) % 7) as f32 / 7.0
            })
            .collect();
        vec![HostTensor::from_f32(reference.shape.clone(), &values).unwrap()]
    };
    let q = quantize::quantize(
        &float,
        &[near(1), near(2)],
        &QuantizeOptions {
            method: RangeMethod::Fixed(CalibrationMethod::MinMax),
            ..Default::default()
        },
    )
    .unwrap();
    let convs = q
        .model
        .main
        .operations
        .iter()
        .filter(|op| {
            matches!(
                op.op_type,
                OperationType::Conv2d | OperationType::DepthwiseConv2d
            )
        })
        .filter(|op| {
            q.model.main.operands[op.inputs[0] as usize].operand_type
                == OperandType::TensorQuant8AsymmSigned
        })
        .count();
    assert_eq!(convs, 52);
    let db = sqnr(&float, &q.model, &[near(3)]);
    assert!(db > 15.0, "{db:.1} dB");
}

/// A model that is 8-bit already keeps its path (bit-exact with LiteRT, tested in the
/// runtime's corpus): quantizing changes nothing and says why.
#[test]
fn an_int8_model_is_left_as_it_is() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/models/mobilenet_v2_int8.tflite");
    assert!(
        path.exists(),
        "{} is missing: ../shared must sit beside the project",
        path.display()
    );
    let model = lower_file(&path, &LowerOptions::default()).unwrap().model;
    let input = nnc_formats::npy::read_npy_file(path.with_extension("tflite.input.npy")).unwrap();
    let q = quantize::quantize(
        &model,
        &[vec![input]],
        &QuantizeOptions {
            method: RangeMethod::Fixed(CalibrationMethod::MinMax),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(q.report.operations_quantized, 0);
    assert!(
        q.report
            .float_operations
            .iter()
            .all(|f| f.reason == "already 8-bit"),
        "{:?}",
        q.report.float_operations
    );
    assert_eq!(q.model.main.operations, model.main.operations);
    assert_eq!(q.model.main.operands, model.main.operands);
}

/// A BERT-style encoder (three inputs, token ids) quantizes statically: its projections
/// and attention products run in int8, LayerNorm-style arithmetic stays float.
#[test]
fn a_transformer_encoder_quantizes_statically() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/transformers/bert_opset17/model.onnx");
    let float = lower_file(&path, &LowerOptions::default()).unwrap().model;
    let q = quantize::quantize(
        &float,
        &[bert_input(1), bert_input(2), bert_input(3)],
        &QuantizeOptions {
            method: RangeMethod::Fixed(CalibrationMethod::MinMax),
            ..Default::default()
        },
    )
    .unwrap();
    let int8_ops = |t: OperationType| {
        q.model
            .main
            .operations
            .iter()
            .filter(|op| op.op_type == t)
            .filter(|op| {
                q.model.main.operands[op.outputs[0] as usize].operand_type
                    == OperandType::TensorQuant8AsymmSigned
            })
            .count()
    };
    assert!(int8_ops(OperationType::FullyConnected) >= 8);
    assert!(int8_ops(OperationType::BatchMatmul) >= 4);
    for output in &q.report.outputs {
        assert!(
            output.sqnr_db > 25.0,
            "{}: {} dB",
            output.name,
            output.sqnr_db
        );
    }
    // Held out: the quantized model's first output stays close.
    let held_out = [bert_input(7)];
    assert!(sqnr(&float, &q.model, &held_out) > 25.0);
}

/// Token ids of the test BERT (vocabulary 100, sequence 12, batch 2) with a mask and
/// type ids.
fn bert_input(seed: i64) -> Sample {
    let tensor = |values: Vec<i64>| {
        HostTensor::new(
            nnc_formats::tensor::DataType::I64,
            vec![2, 12],
            values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
        .unwrap()
    };
    vec![
        tensor((0..24).map(|k| (k * 37 + seed * 11) % 100).collect()),
        tensor(vec![1; 24]),
        tensor(vec![0; 24]),
    ]
}

fn count(model: &Model, t: OperationType) -> usize {
    model
        .main
        .operations
        .iter()
        .filter(|op| op.op_type == t)
        .count()
}

#[test]
fn dynamic_quantization_turns_every_constant_matmul_into_int8_weights() {
    use quantize::dynamic::{DynamicOptions, quantize_dynamic};
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/transformers/bert_opset17/model.onnx");
    let float = lower_file(&path, &LowerOptions::default()).unwrap().model;
    let fcs = count(&float, OperationType::FullyConnected);
    assert!(fcs >= 8, "{fcs} FULLY_CONNECTED in the test BERT");
    let options = DynamicOptions {
        per_channel: true,
        keep_float: Vec::new(),
    };
    let (q, summary) = quantize_dynamic(&float, &options).unwrap();
    assert_eq!(summary.quantized, fcs);
    assert_eq!(count(&q, OperationType::DynamicFullyConnected), fcs);
    assert_eq!(count(&q, OperationType::FullyConnected), 0);
    assert_eq!(summary.weight_bytes_int8 * 4, summary.weight_bytes_float);
    // Every weight is int8 now, one scale per unit; the float weights are gone.
    for op in &q.main.operations {
        if op.op_type == OperationType::DynamicFullyConnected {
            let w = &q.main.operands[op.inputs[1] as usize];
            assert_eq!(w.operand_type, OperandType::TensorQuant8SymmPerChannel);
            assert_eq!(
                w.channel_quant.as_ref().map(|c| c.scales.len()),
                Some(w.dimensions[0] as usize)
            );
        }
    }
    let constant_bytes = |m: &Model| -> usize {
        m.main
            .operands
            .iter()
            .enumerate()
            .filter_map(|(i, _)| m.constant_bytes(i as u32).map(<[u8]>::len))
            .sum()
    };
    assert!(constant_bytes(&q) < constant_bytes(&float));
    // Close to the float model on inputs never seen (there is no calibration at all),
    // closer than static int8 (25 dB in the test above).
    let held_out = [bert_input(7), bert_input(8)];
    let per_channel = sqnr(&float, &q, &held_out);
    assert!(per_channel > 30.0, "{per_channel} dB");
    // One scale per tensor loses more; --keep-float keeps an operation as it was.
    let (per_tensor, _) = quantize_dynamic(
        &float,
        &DynamicOptions {
            per_channel: false,
            keep_float: Vec::new(),
        },
    )
    .unwrap();
    let w = per_tensor
        .main
        .operations
        .iter()
        .find(|op| op.op_type == OperationType::DynamicFullyConnected)
        .map(|op| &per_tensor.main.operands[op.inputs[1] as usize])
        .unwrap();
    assert_eq!(w.operand_type, OperandType::TensorQuant8Symm);
    assert!(sqnr(&float, &per_tensor, &held_out) < per_channel);
    let first = float
        .main
        .operations
        .iter()
        .find(|op| op.op_type == OperationType::FullyConnected)
        .map(|op| op.source.clone())
        .unwrap();
    let (kept, summary) = quantize_dynamic(
        &float,
        &DynamicOptions {
            per_channel: true,
            keep_float: vec![first.clone()],
        },
    )
    .unwrap();
    assert!(count(&kept, OperationType::FullyConnected) >= 1);
    assert!(
        summary
            .kept
            .iter()
            .any(|(name, why)| *name == first && why.contains("--keep-float"))
    );
}
