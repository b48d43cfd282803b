//! The validator: one malformed model per rule, each failing with its own message, and
//! a model with several problems reporting all of them.

use nnc_formats::nn::validate::Location;
use nnc_formats::nn::{
    ChannelQuant, DataLocation, IoInfo, Lifetime, Model, Operand, OperandType, OperationType,
    Subgraph, validate,
};
use nnc_formats::tensor::DataType;

/// input [1,4] -> ADD(x, c, act) -> output [1,4]
fn valid() -> Model {
    let mut m = Model::default();
    let mut x = Operand::new(OperandType::TensorFloat32, vec![1, 4]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = m.add_operand(x);
    let c = m.add_f32_tensor(vec![4], &[1.0, 2.0, 3.0, 4.0]);
    let act = m.add_i32(0);
    let mut y = Operand::new(OperandType::TensorFloat32, vec![1, 4]);
    y.lifetime = Lifetime::SubgraphOutput;
    let y = m.add_operand(y);
    m.add_operation(OperationType::Add, vec![x, c, act], vec![y], "add_node");
    m.main.inputs = vec![x];
    m.main.outputs = vec![y];
    let info = |name: &str| IoInfo {
        name: name.into(),
        dtype: DataType::F32,
        dims: vec![1, 4],
    };
    m.input_info = vec![info("x")];
    m.output_info = vec![info("y")];
    m
}

/// Validates and returns every problem message, asserting there is at least one.
fn problems(m: &Model) -> Vec<String> {
    let err = validate(m).expect_err("the model should be invalid");
    assert!(!err.problems.is_empty());
    err.problems.iter().map(|p| p.to_string()).collect()
}

fn assert_problem(m: &Model, needle: &str) {
    let all = problems(m);
    assert!(
        all.iter().any(|p| p.contains(needle)),
        "no problem mentions {needle:?}: {all:#?}"
    );
}

#[test]
fn the_reference_model_is_valid() {
    validate(&valid()).unwrap();
}

#[test]
fn scalars_have_no_dimensions() {
    let mut m = valid();
    m.main.operands[2].dimensions = vec![1];
    assert_problem(&m, "operand 2: scalar INT32 must have no dimensions");
}

#[test]
fn constant_tensors_have_known_dimensions() {
    let mut m = valid();
    m.main.operands[1].dimensions = vec![0];
    assert_problem(
        &m,
        "operand 1: constant tensor must have all dimensions known",
    );
}

#[test]
fn quantization_parameters_match_the_type() {
    let mut m = valid();
    let mut q = Operand::new(OperandType::TensorQuant8Asymm, vec![2]).with_quant(0.5, 300);
    q.lifetime = Lifetime::TemporaryVariable;
    m.add_operand(q);
    assert_problem(&m, "zero point in [0, 255], got scale 0.5, zero point 300");

    let mut m = valid();
    m.main.operands[0].scale = 0.25;
    assert_problem(
        &m,
        "operand 0: TENSOR_FLOAT32 must have scale 0 and zero point 0",
    );

    let mut m = valid();
    m.add_operand(Operand::new(OperandType::TensorQuant8AsymmSigned, vec![2]).with_quant(0.0, 0));
    assert_problem(&m, "TENSOR_QUANT8_ASYMM_SIGNED needs scale > 0");
}

#[test]
fn per_channel_quantization_is_complete() {
    let mut m = valid();
    m.add_operand(Operand::new(
        OperandType::TensorQuant8SymmPerChannel,
        vec![3, 2],
    ));
    assert_problem(&m, "needs per-channel quantization parameters");

    let mut m = valid();
    let mut o = Operand::new(OperandType::TensorQuant8SymmPerChannel, vec![3, 2]);
    o.channel_quant = Some(ChannelQuant {
        scales: vec![0.1, 0.2],
        channel_dim: 0,
    });
    m.add_operand(o);
    assert_problem(&m, "2 per-channel scales for 3 channels");
}

#[test]
fn constant_locations_stay_inside_their_storage() {
    let mut m = valid();
    m.main.operands[2].location.offset = u64::MAX - 1; // overflows offset + length
    assert_problem(
        &m,
        "operand 2: data at offset 18446744073709551614 length 4 lies outside the inline values",
    );

    let mut m = valid();
    let mut big = Operand::new(OperandType::TensorFloat32, vec![64]);
    big.lifetime = Lifetime::ConstantReference;
    big.location = DataLocation {
        pool_index: 7,
        offset: 0,
        length: 256,
    };
    m.add_operand(big);
    assert_problem(&m, "refers to pool 7 but the model has");
}

#[test]
fn constant_lengths_match_their_type_and_shape() {
    let mut m = valid();
    m.main.operands[1].dimensions = vec![5];
    assert_problem(
        &m,
        "operand 1: holds 16 bytes but TENSOR_FLOAT32 5 needs 20",
    );
}

#[test]
fn non_constants_have_no_data_location() {
    let mut m = valid();
    m.main.operands[0].location.length = 4;
    assert_problem(
        &m,
        "operand 0: SUBGRAPH_INPUT operand must not have a data location",
    );
}

#[test]
fn input_and_output_lists_agree_with_lifetimes() {
    let mut m = valid();
    m.main.inputs.clear();
    m.input_info.clear();
    assert_problem(
        &m,
        "operand 0: has lifetime SUBGRAPH_INPUT but is not in the input list",
    );

    let mut m = valid();
    m.main.inputs.push(1);
    m.input_info.push(m.input_info[0].clone());
    assert_problem(
        &m,
        "operand 1: listed as an input but its lifetime is CONSTANT_COPY",
    );

    let mut m = valid();
    m.main.outputs.push(3);
    m.output_info.push(m.output_info[0].clone());
    assert_problem(&m, "operand 3 appears twice in the output list");

    let mut m = valid();
    m.main.outputs.push(99);
    assert_problem(&m, "output list names operand 99");

    let mut m = valid();
    m.output_info.clear();
    assert_problem(&m, "model: 0 output descriptions for 1 outputs");
}

#[test]
fn operations_are_in_topological_order() {
    // y2 = RELU(t) is listed before t = RELU(x) is computed.
    let mut m = valid();
    let t = m.add_operand(Operand::new(OperandType::TensorFloat32, vec![1, 4]));
    let mut y2 = Operand::new(OperandType::TensorFloat32, vec![1, 4]);
    y2.lifetime = Lifetime::SubgraphOutput;
    let y2 = m.add_operand(y2);
    m.main.outputs.push(y2);
    m.output_info.push(m.output_info[0].clone());
    m.main.operations.insert(
        0,
        nnc_formats::nn::Operation {
            op_type: OperationType::Relu,
            inputs: vec![t],
            outputs: vec![y2],
            source: "early".into(),
        },
    );
    m.add_operation(OperationType::Relu, vec![0], vec![t], "late");
    assert_problem(
        &m,
        "operation 0 (RELU from node 'early'): input 0 (operand 4) is read before the operation that writes it",
    );
}

#[test]
fn every_read_operand_is_written() {
    let mut m = valid();
    let dangling = m.add_operand(Operand::new(OperandType::TensorFloat32, vec![1, 4]));
    m.main.operations[0].inputs[0] = dangling;
    assert_problem(
        &m,
        "operation 0 (ADD from node 'add_node'): input 0 (operand 4) is never written",
    );
}

#[test]
fn every_operand_has_one_writer() {
    let mut m = valid();
    m.add_operation(OperationType::Relu, vec![0], vec![3], "second_writer");
    assert_problem(&m, "operand 3: is written by 2 operations");
}

#[test]
fn constants_and_inputs_are_never_written() {
    let mut m = valid();
    m.main.operations[0].outputs[0] = 1;
    assert_problem(
        &m,
        "writes operand 1, whose lifetime CONSTANT_COPY cannot be written",
    );
}

#[test]
fn outputs_are_written() {
    let mut m = valid();
    m.main.operations.clear();
    assert_problem(&m, "operand 3: is a model output that no operation writes");
}

#[test]
fn operation_signatures_are_checked() {
    let mut m = valid();
    m.main.operations[0].inputs.pop();
    assert_problem(
        &m,
        "operation 0 (ADD from node 'add_node'): takes 3 inputs, got 2",
    );

    let mut m = valid();
    m.main.operations[0].inputs[2] = 1; // a tensor where the activation scalar goes
    assert_problem(
        &m,
        "input 2 (fused_activation) must be INT32, got TENSOR_FLOAT32",
    );

    let mut m = valid();
    let bad = m.add_i32(7);
    m.main.operations[0].inputs[2] = bad;
    assert_problem(
        &m,
        "must be 0 (NONE), 1 (RELU), 2 (RELU1) or 3 (RELU6), got 7",
    );

    let mut m = valid();
    m.main.operands[3].dimensions = vec![1, 5];
    assert_problem(
        &m,
        "output 0 is declared 1x5 but the operation produces 1x4",
    );

    let mut m = valid();
    m.main.operands[3].operand_type = OperandType::TensorInt32;
    assert_problem(
        &m,
        "output 0 is declared TENSOR_INT32 but the operation produces TENSOR_FLOAT32",
    );
}

#[test]
fn convolution_parameters_are_range_checked() {
    let mut m = Model::default();
    let mut x = Operand::new(OperandType::TensorFloat32, vec![1, 5, 5, 2]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = m.add_operand(x);
    let f = m.add_f32_tensor(vec![3, 3, 3, 2], &[0.0; 54]);
    let b = m.add_f32_tensor(vec![3], &[0.0; 3]);
    let mut inputs = vec![x, f, b];
    for v in [0, 0, 0, 0, 0, 1, 0] {
        inputs.push(m.add_i32(v)); // stride_width 0
    }
    let mut y = Operand::new(OperandType::TensorFloat32, vec![]);
    y.lifetime = Lifetime::SubgraphOutput;
    let y = m.add_operand(y);
    m.add_operation(OperationType::Conv2d, inputs, vec![y], "conv");
    m.main.inputs = vec![x];
    m.main.outputs = vec![y];
    m.input_info = vec![IoInfo {
        name: "x".into(),
        dtype: DataType::F32,
        dims: vec![],
    }];
    m.output_info = m.input_info.clone();
    assert_problem(
        &m,
        "operation 0 (CONV_2D from node 'conv'): input 7 (stride_width) must be >= 1, got 0",
    );
}

#[test]
fn subgraph_references_have_no_cycles() {
    let mut m = valid();
    let reference = |target: u64| {
        let mut o = Operand::new(OperandType::Subgraph, vec![]);
        o.lifetime = Lifetime::Subgraph;
        o.location.offset = target;
        o
    };
    let mut a = Subgraph::default();
    a.operands.push(reference(2));
    let mut b = Subgraph::default();
    b.operands.push(reference(1));
    m.referenced = vec![a, b];
    assert_problem(&m, "subgraph references form a cycle");
}

#[test]
fn every_problem_is_reported_at_once_with_its_location() {
    let mut m = valid();
    m.main.operands[2].dimensions = vec![1]; // scalar with dims
    m.main.operands[0].scale = 1.0; // float with a scale
    m.main.operands[3].dimensions = vec![2, 4]; // wrong output shape
    let err = validate(&m).unwrap_err();
    assert!(err.problems.len() >= 3, "{err}");
    assert!(err.problems.iter().any(|p| matches!(
        &p.location,
        Location::Operation { operation: 0, source, .. } if source == "add_node"
    )));
    let text = err.to_string();
    assert!(text.starts_with("the model is invalid ("), "{text}");
    assert!(
        text.contains("operand 2") && text.contains("operand 0") && text.contains("operation 0"),
        "{text}"
    );
}
