//! Which NN operations ONNX LSTM and RNN lower to, and that both lowerings compute the
//! same thing.
//!
//! The corpus cases `lstm_sequence_op_forward` and `rnn_sequence_op_reverse_relu` lower
//! to one sequence operation. Variants of the same model (same weights and inputs) with
//! one attribute changed must unroll: a clip (here so large that it never binds, so the
//! result must not change), custom functions, input_forget. Outputs are compared with
//! ONNX Runtime's (the corpus references) and between the two lowerings.

mod common;

use std::path::PathBuf;

use common::{float_attr, int_attr};

use nnc_compiler::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, ValueInfoProto, attribute_proto::AttributeType,
    type_proto,
};
use nnc_compiler::onnx::tensor::ExternalDataContext;
use nnc_compiler::pipeline::{LowerOptions, SourceFormat, lower_bytes};
use nnc_formats::nn::{Model, dump, validate};
use nnc_formats::npy::read_npy_file;
use nnc_formats::tensor::HostTensor;
use prost::Message;

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/onnx");

fn case_dir(case: &str) -> PathBuf {
    PathBuf::from(CORPUS).join(case)
}

/// The corpus case's model with its recurrent node's attributes edited.
fn lower_variant(case: &str, edit: impl Fn(&mut Vec<AttributeProto>)) -> Model {
    lower_graph_variant(case, edit, |_| {})
}

/// [`lower_variant`] with the graph edited too.
fn lower_graph_variant(
    case: &str,
    edit: impl Fn(&mut Vec<AttributeProto>),
    edit_graph: impl Fn(&mut GraphProto),
) -> Model {
    let bytes = std::fs::read(case_dir(case).join("model.onnx")).expect("model");
    let mut proto = ModelProto::decode(bytes.as_slice()).expect("decodes");
    let graph = proto.graph.as_mut().expect("graph");
    edit_graph(graph);
    let node = graph
        .node
        .iter_mut()
        .find(|n| matches!(n.op_type.as_str(), "LSTM" | "RNN"))
        .expect("a recurrent node");
    edit(&mut node.attribute);
    let model = lower_bytes(
        proto.encode_to_vec().into(),
        SourceFormat::Onnx,
        &ExternalDataContext::none(),
        &LowerOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{case}: lowering failed: {e}"))
    .model;
    if let Err(e) = validate(&model) {
        panic!("{case}: invalid: {e}\n{}", dump::to_text(&model));
    }
    model
}

fn strings_attr(name: &str, v: &[&str]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: Some(AttributeType::Strings as i32),
        strings: v.iter().map(|s| s.as_bytes().to_vec().into()).collect(),
        ..Default::default()
    }
}

/// Sets (replacing) one attribute.
fn set(attr: AttributeProto) -> impl Fn(&mut Vec<AttributeProto>) {
    move |attrs: &mut Vec<AttributeProto>| {
        attrs.retain(|a| a.name != attr.name);
        attrs.push(attr.clone());
    }
}

fn count(model: &Model, op: &str) -> usize {
    model
        .operation_histogram()
        .get(op)
        .copied()
        .unwrap_or_default()
}

fn numbered(case: &str, kind: &str) -> Vec<HostTensor> {
    (0..)
        .map(|i| case_dir(case).join(format!("{kind}_{i}.npy")))
        .take_while(|p| p.is_file())
        .map(|p| read_npy_file(&p).expect("npy"))
        .collect()
}

fn run(model: &Model, inputs: &[HostTensor]) -> Vec<Vec<f32>> {
    common::run_on_npu(model, inputs)
        .iter()
        .map(|t| t.to_f32_vec().expect("float output"))
        .collect()
}

/// The largest difference between two sets of outputs (of equal shapes).
fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len(), "output count");
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len(), "output length");
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0.0, f32::max)
}

fn reference(case: &str) -> Vec<Vec<f32>> {
    numbered(case, "output")
        .iter()
        .map(|t| t.to_f32_vec().expect("float"))
        .collect()
}

#[test]
fn default_lstm_is_one_sequence_operation_and_a_clipped_one_unrolls() {
    let case = "lstm_sequence_op_forward";
    let inputs = numbered(case, "input");
    let expected = reference(case);

    let sequence = lower_variant(case, |_| {});
    assert_eq!(count(&sequence, "UNIDIRECTIONAL_SEQUENCE_LSTM"), 1);
    assert_eq!(count(&sequence, "FULLY_CONNECTED"), 0);
    let seq_out = run(&sequence, &inputs);
    let seq_err = max_diff(&seq_out, &expected);
    assert!(seq_err < 1e-5, "sequence op vs ONNX Runtime: {seq_err}");

    // ONNX clips the gates' inputs, NNAPI the cell state: not the same, so unrolled.
    let clipped = lower_variant(case, set(float_attr("clip", 1e6)));
    assert_eq!(count(&clipped, "UNIDIRECTIONAL_SEQUENCE_LSTM"), 0);
    assert!(count(&clipped, "FULLY_CONNECTED") > 4, "unrolled per step");
    let unrolled_out = run(&clipped, &inputs);
    let both = max_diff(&seq_out, &unrolled_out);
    assert!(both < 1e-5, "sequence op vs unrolled: {both}");
    eprintln!("LSTM: sequence op vs ONNX Runtime {seq_err:e}, vs unrolled {both:e}");
}

#[test]
fn lstm_functions_the_nn_operation_cannot_express_unroll() {
    let case = "lstm_sequence_op_forward";
    // g and h must be one function the NN activation names; f must be Sigmoid.
    for fns in [
        ["Sigmoid", "Tanh", "Relu"],
        ["HardSigmoid", "Tanh", "Tanh"],
        ["Sigmoid", "Softsign", "Softsign"],
    ] {
        let m = lower_variant(case, set(strings_attr("activations", &fns)));
        assert_eq!(
            count(&m, "UNIDIRECTIONAL_SEQUENCE_LSTM"),
            0,
            "{fns:?} must unroll"
        );
    }
    // Expressible: the same function for g and h (Relu, Sigmoid, and Tanh named
    // explicitly).
    for g in ["Relu", "Sigmoid", "Tanh"] {
        let m = lower_variant(case, set(strings_attr("activations", &["Sigmoid", g, g])));
        assert_eq!(count(&m, "UNIDIRECTIONAL_SEQUENCE_LSTM"), 1, "{g}");
    }
    // Coupled input and forget gates differ from NNAPI's CIFG (i = 1 - f).
    let m = lower_variant(case, set(int_attr("input_forget", 1)));
    assert_eq!(count(&m, "UNIDIRECTIONAL_SEQUENCE_LSTM"), 0);
}

#[test]
fn partial_sequence_lengths_unroll() {
    let m = lower_variant("lstm_bidirectional_sequence_lens", |_| {});
    assert_eq!(count(&m, "UNIDIRECTIONAL_SEQUENCE_LSTM"), 0);
    let full = lower_variant("lstm_sequence_op_bidirectional_peepholes_full_lens", |_| {});
    assert_eq!(count(&full, "UNIDIRECTIONAL_SEQUENCE_LSTM"), 2);
    assert_eq!(count(&full, "SELECT"), 0);
}

#[test]
fn relu_rnn_is_one_sequence_operation_and_tanh_or_clip_unrolls() {
    let case = "rnn_sequence_op_reverse_relu";
    let inputs = numbered(case, "input");
    let expected = reference(case);

    let sequence = lower_variant(case, |_| {});
    assert_eq!(count(&sequence, "UNIDIRECTIONAL_SEQUENCE_RNN"), 1);
    assert_eq!(count(&sequence, "REVERSE"), 2);
    let seq_out = run(&sequence, &inputs);
    let seq_err = max_diff(&seq_out, &expected);
    assert!(seq_err < 1e-5, "sequence op vs ONNX Runtime: {seq_err}");

    let clipped = lower_variant(case, set(float_attr("clip", 1e6)));
    assert_eq!(count(&clipped, "UNIDIRECTIONAL_SEQUENCE_RNN"), 0);
    let both = max_diff(&seq_out, &run(&clipped, &inputs));
    assert!(both < 1e-5, "sequence op vs unrolled: {both}");
    eprintln!("RNN: sequence op vs ONNX Runtime {seq_err:e}, vs unrolled {both:e}");

    // NNAPI's RNN activation is a fused activation (NONE, RELU, RELU1, RELU6): ONNX's
    // default Tanh has no code, so a default RNN unrolls.
    let default = lower_variant(case, |attrs| attrs.retain(|a| a.name != "activations"));
    assert_eq!(count(&default, "UNIDIRECTIONAL_SEQUENCE_RNN"), 0);
    assert!(count(&default, "TANH") > 0);
}

/// `data` of `shape` with its axes permuted (`out axis k` = `in axis perm[k]`).
fn permute(data: &[f32], shape: &[usize], perm: &[usize]) -> (Vec<f32>, Vec<usize>) {
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let strides: Vec<usize> = (0..shape.len())
        .map(|k| shape[k + 1..].iter().product())
        .collect();
    let mut out = Vec::with_capacity(data.len());
    let mut index = vec![0usize; shape.len()];
    for _ in 0..data.len() {
        let src: usize = (0..perm.len()).map(|k| index[k] * strides[perm[k]]).sum();
        out.push(data[src]);
        for k in (0..index.len()).rev() {
            index[k] += 1;
            if index[k] < out_shape[k] {
                break;
            }
            index[k] = 0;
        }
    }
    (out, out_shape)
}

fn f32_tensor(data: &[f32], shape: Vec<usize>) -> HostTensor {
    HostTensor {
        dtype: nnc_formats::tensor::DataType::F32,
        shape,
        data: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}

/// ONNX Runtime refuses layout 1, so the batch-major form is checked against the
/// time-major references with every input and output transposed: bidirectional, so the
/// reverse direction's REVERSE runs along the batch-major time axis.
#[test]
fn batch_major_layout_matches_the_time_major_references() {
    for (case, op) in [
        (
            "lstm_sequence_op_bidirectional_peepholes_full_lens",
            "UNIDIRECTIONAL_SEQUENCE_LSTM",
        ),
        (
            "rnn_sequence_op_bidirectional_relu",
            "UNIDIRECTIONAL_SEQUENCE_RNN",
        ),
    ] {
        // The graph's declared shapes become batch-major too.
        let model = lower_graph_variant(case, set(int_attr("layout", 1)), |g| {
            for v in g.input.iter_mut().chain(g.output.iter_mut()) {
                permute_declared(v);
            }
        });
        assert_eq!(count(&model, op), 2, "{case}");
        // X [S, B, I] -> [B, S, I]; initial states [D, B, H] -> [B, D, H].
        let inputs: Vec<HostTensor> = numbered(case, "input")
            .iter()
            .map(|t| {
                let (v, shape) = permute(&t.to_f32_vec().expect("float"), &t.shape, &[1, 0, 2]);
                f32_tensor(&v, shape)
            })
            .collect();
        // Y [S, D, B, H] -> [B, S, D, H]; final states [D, B, H] -> [B, D, H].
        let expected: Vec<Vec<f32>> = numbered(case, "output")
            .iter()
            .map(|t| {
                let perm: &[usize] = if t.shape.len() == 4 {
                    &[2, 0, 1, 3]
                } else {
                    &[1, 0, 2]
                };
                permute(&t.to_f32_vec().expect("float"), &t.shape, perm).0
            })
            .collect();
        let err = max_diff(&run(&model, &inputs), &expected);
        assert!(err < 1e-5, "{case}: batch-major vs ONNX Runtime: {err}");
        eprintln!("{case} (layout 1): {err:e}");
    }
}

/// Permutes a declared rank-3 ([S|D, B, ..] -> [B, S|D, ..]) or rank-4 ([S, D, B, H] ->
/// [B, S, D, H]) shape into layout 1.
fn permute_declared(v: &mut ValueInfoProto) {
    let Some(type_proto::Value::TensorType(t)) = v.r#type.as_mut().and_then(|t| t.value.as_mut())
    else {
        return;
    };
    let Some(shape) = t.shape.as_mut() else {
        return;
    };
    let d = shape.dim.clone();
    shape.dim = match d.len() {
        3 => vec![d[1].clone(), d[0].clone(), d[2].clone()],
        4 => vec![d[2].clone(), d[0].clone(), d[1].clone(), d[3].clone()],
        _ => d,
    };
}
