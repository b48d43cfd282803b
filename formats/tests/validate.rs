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

// ---- Control flow (IF, WHILE) ----

use nnc_formats::nn::ops::{InputView, infer_control_flow};
use nnc_formats::test_support::control_flow::{
    if_model, infinite_model, nested_model, while_model,
};

#[test]
fn control_flow_models_are_valid() {
    validate(&if_model()).unwrap();
    validate(&while_model()).unwrap();
    validate(&nested_model()).unwrap();
    validate(&infinite_model()).unwrap();
}

#[test]
fn if_condition_must_be_bool8_of_shape_1() {
    let mut m = if_model();
    m.main.operands[0].operand_type = OperandType::TensorInt32;
    m.input_info[0].dtype = DataType::I32;
    assert_problem(
        &m,
        "operation 0 (IF from node 'if'): input 0 (condition) must be TENSOR_BOOL8",
    );
    let mut m = if_model();
    m.main.operands[0].dimensions = vec![2];
    assert_problem(&m, "input 0 (condition) must have shape [1], has 2");
}

#[test]
fn if_branches_must_be_subgraph_operands() {
    let mut m = if_model();
    // Input 1 (then) replaced by the value x.
    m.main.operations[0].inputs[1] = 1;
    assert_problem(&m, "input 1 (then) must be SUBGRAPH, got TENSOR_FLOAT32");
}

#[test]
fn if_branch_must_exist() {
    let mut m = if_model();
    let then_operand = m.main.operations[0].inputs[1] as usize;
    m.main.operands[then_operand].location.offset = 9;
    assert_problem(
        &m,
        "input 1 (then) refers to subgraph 9, which does not exist (the model has 2 referenced subgraphs)",
    );
}

#[test]
fn if_branch_inputs_must_match_the_values_passed() {
    let mut m = if_model();
    m.main.operations[0].inputs.push(1); // x passed twice
    assert_problem(
        &m,
        "then subgraph 1 takes 1 inputs, but 2 values are passed to it",
    );
    let mut m = if_model();
    let x = m.referenced[1].inputs[0] as usize;
    m.referenced[1].operands[x].dimensions = vec![7];
    assert_problem(&m, "else subgraph 2: input 0 is TF32 7");
}

#[test]
fn if_branch_outputs_must_match_the_if() {
    let mut m = if_model();
    let extra = m
        .main
        .add_output(Operand::new(OperandType::TensorFloat32, vec![0]));
    m.main.operations[0].outputs.push(extra);
    m.output_info.push(m.output_info[0].clone());
    assert_problem(&m, "then subgraph 1 produces 1 outputs, but the IF has 2");
    let mut m = if_model();
    let out = m.referenced[1].outputs[0] as usize;
    m.referenced[1].operands[out].operand_type = OperandType::TensorInt32;
    assert_problem(&m, "else subgraph 2: output 0 is TI32");
}

#[test]
fn if_output_shapes_are_what_both_branches_agree_on() {
    let m = if_model();
    let op = &m.main.operations[0];
    let views: Vec<InputView> = op
        .inputs
        .iter()
        .map(|&i| InputView {
            operand: &m.main.operands[i as usize],
            value: None,
        })
        .collect();
    let declared: Vec<&Operand> = op
        .outputs
        .iter()
        .map(|&o| &m.main.operands[o as usize])
        .collect();
    let graphs: Vec<&Subgraph> = m.graphs().collect();
    let shapes = infer_control_flow(op.op_type, &views, &declared, &graphs).unwrap();
    // then gives [40], else [80]: the length is known only at run time.
    assert_eq!(shapes[0].dimensions, vec![0]);
    assert_eq!(shapes[0].operand_type, OperandType::TensorFloat32);
    // A branch producing [40] too makes it known.
    let mut m2 = m.clone();
    let out = m2.referenced[1].outputs[0] as usize;
    m2.referenced[1].operands[out].dimensions = vec![40];
    let graphs: Vec<&Subgraph> = m2.graphs().collect();
    let shapes = infer_control_flow(op.op_type, &views, &declared, &graphs).unwrap();
    assert_eq!(shapes[0].dimensions, vec![40]);
}

#[test]
fn while_condition_must_produce_one_bool8() {
    let mut m = while_model();
    let c = m.referenced[0].outputs[0] as usize;
    m.referenced[0].operands[c].operand_type = OperandType::TensorInt32;
    let all = problems(&m);
    assert!(
        all.iter().any(|p| p.contains(
            "operation 0 (WHILE from node 'while'): condition subgraph 1: its output must be TENSOR_BOOL8 of shape [1]"
        )),
        "{all:#?}"
    );
    let mut m = while_model();
    let extra = m.referenced[0].add_output(Operand::new(OperandType::TensorBool8, vec![1]));
    let first = m.referenced[0].operations[0].inputs.clone();
    m.referenced[0].add_operation(OperationType::Less, first, vec![extra], "");
    assert_problem(
        &m,
        "condition subgraph 1 must produce exactly 1 output, produces 2",
    );
}

#[test]
fn while_subgraphs_take_every_value() {
    let mut m = while_model();
    m.main.operations[0].inputs.pop(); // drop the input-only value
    assert_problem(
        &m,
        "condition subgraph 1 takes 4 inputs, but 3 values are passed to it",
    );
}

#[test]
fn while_body_outputs_replace_the_first_values() {
    let mut m = while_model();
    let body = &mut m.referenced[1];
    body.outputs.truncate(1);
    let dropped: Vec<u32> = vec![body.operations[1].outputs[0], body.operations[2].outputs[0]];
    for o in dropped {
        body.operands[o as usize].lifetime = Lifetime::TemporaryVariable;
    }
    assert_problem(
        &m,
        "body subgraph 2 produces 1 outputs; the WHILE has 2 outputs",
    );
    let mut m = while_model();
    let s_out = m.referenced[1].outputs[2] as usize;
    m.referenced[1].operands[s_out].dimensions = vec![5];
    let all = problems(&m);
    assert!(
        all.iter()
            .any(|p| p.contains("body subgraph 2: output 2 is TF32 5, which does not fit input 2")),
        "{all:#?}"
    );
}

#[test]
fn while_outputs_have_the_input_output_values_types() {
    let mut m = while_model();
    let out = m.main.outputs[0] as usize;
    m.main.operands[out].operand_type = OperandType::TensorFloat32;
    m.output_info[0].dtype = DataType::F32;
    assert_problem(&m, "output 0 is TF32 1 but input-output value 0 is TI32 1");
}

#[test]
fn while_needs_at_least_one_input_output_value() {
    let mut m = while_model();
    m.main.operations[0].outputs.clear();
    let all = problems(&m);
    assert!(
        all.iter()
            .any(|p| p.contains("WHILE from node 'while'): produces at least 1 outputs, got 0")),
        "{all:#?}"
    );
}

#[test]
fn nested_control_flow_errors_name_the_subgraph() {
    let mut m = nested_model();
    // The IF inside the body (subgraph 2) passes two values; break its then branch.
    let then_in = m.referenced[2].inputs[1] as usize;
    m.referenced[2].operands[then_in].operand_type = OperandType::TensorInt32;
    assert_problem(
        &m,
        "subgraph 2: operation 1 (IF from node 'body/if'): then subgraph 3: input 1 is TI32 4",
    );
}

#[test]
fn control_flow_nesting_is_bounded() {
    use nnc_formats::nn::validate::MAX_CONTROL_FLOW_DEPTH;
    use nnc_formats::test_support::control_flow::if_chain as build;
    validate(&build(MAX_CONTROL_FLOW_DEPTH)).unwrap();
    assert_problem(
        &build(MAX_CONTROL_FLOW_DEPTH + 1),
        "model: control flow nests 33 levels deep; at most 32 are allowed",
    );
}

/// UNIDIRECTIONAL_SEQUENCE_LSTM: time-major input [3, 2, 4], 5 units, no projection,
/// no peepholes; `layer_norm` adds the four optional layer-normalization weights.
fn sequence_lstm(layer_norm: bool, state_outputs: bool) -> Model {
    let (t, b, i, u) = (3u32, 2u32, 4u32, 5u32);
    let mut m = Model::default();
    let mut x = Operand::new(OperandType::TensorFloat32, vec![t, b, i]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = m.add_operand(x);
    let mut inputs = vec![x];
    for _ in 0..4 {
        inputs.push(m.add_f32_tensor(vec![u, i], &vec![0.1; (u * i) as usize]));
    }
    for _ in 0..4 {
        inputs.push(m.add_f32_tensor(vec![u, u], &vec![0.1; (u * u) as usize]));
    }
    for _ in 0..3 {
        inputs.push(m.add_no_value(OperandType::TensorFloat32));
    }
    for _ in 0..4 {
        inputs.push(m.add_f32_tensor(vec![u], &vec![0.0; u as usize]));
    }
    inputs.push(m.add_no_value(OperandType::TensorFloat32));
    inputs.push(m.add_no_value(OperandType::TensorFloat32));
    inputs.push(m.add_f32_tensor(vec![b, u], &vec![0.0; (b * u) as usize]));
    inputs.push(m.add_f32_tensor(vec![b, u], &vec![0.0; (b * u) as usize]));
    inputs.push(m.add_i32(4));
    inputs.push(m.add_f32(0.0));
    inputs.push(m.add_f32(0.0));
    inputs.push(m.add_bool(true));
    if layer_norm {
        for _ in 0..4 {
            inputs.push(m.add_f32_tensor(vec![u], &vec![1.0; u as usize]));
        }
    }
    let mut dims = vec![vec![t, b, u]];
    if state_outputs {
        dims.push(vec![b, u]);
        dims.push(vec![b, u]);
    }
    let outs: Vec<u32> = dims
        .iter()
        .map(|d| {
            let mut y = Operand::new(OperandType::TensorFloat32, d.clone());
            y.lifetime = Lifetime::SubgraphOutput;
            m.add_operand(y)
        })
        .collect();
    m.add_operation(
        OperationType::UnidirectionalSequenceLstm,
        inputs,
        outs.clone(),
        "lstm",
    );
    m.main.inputs = vec![x];
    m.main.outputs = outs.clone();
    m.input_info = vec![IoInfo {
        name: "x".into(),
        dtype: DataType::F32,
        dims: vec![t, b, i],
    }];
    m.output_info = dims
        .iter()
        .enumerate()
        .map(|(k, d)| IoInfo {
            name: format!("y{k}"),
            dtype: DataType::F32,
            dims: d.clone(),
        })
        .collect();
    m
}

/// Replaces input `k` of operation 0 with a new operand.
fn set_input(m: &mut Model, k: usize, operand: u32) {
    m.main.operations[0].inputs[k] = operand;
}

#[test]
fn sequence_lstm_signature() {
    validate(&sequence_lstm(false, false)).unwrap();
    validate(&sequence_lstm(true, true)).unwrap();

    let mut m = sequence_lstm(false, false);
    m.main.operations[0].inputs.pop();
    assert_problem(&m, "takes 24 or 28 inputs, got 23");

    let mut m = sequence_lstm(false, false);
    let a = m.add_i32(2);
    set_input(&mut m, 20, a);
    assert_problem(
        &m,
        "must be 0 (none), 1 (relu), 3 (relu6), 4 (tanh) or 6 (sigmoid), got 2",
    );

    let mut m = sequence_lstm(false, false);
    let c = m.add_f32(-1.0);
    set_input(&mut m, 21, c);
    assert_problem(
        &m,
        "input 21 (cell_clip) must be a finite number >= 0, got -1",
    );

    // CIFG is all or nothing across the input gate's weights and bias.
    let mut m = sequence_lstm(false, false);
    let none = m.add_no_value(OperandType::TensorFloat32);
    set_input(&mut m, 5, none);
    assert_problem(
        &m,
        "input 5 (recurrent_to_input_weights) must be present exactly when input_to_input_weights is",
    );
    let mut m = sequence_lstm(false, false);
    let none = m.add_no_value(OperandType::TensorFloat32);
    set_input(&mut m, 1, none);
    set_input(&mut m, 5, none);
    assert_problem(
        &m,
        "input 12 (input_gate_bias) must be present exactly when input_to_input_weights is",
    );
    set_input(&mut m, 12, none);
    validate(&m).unwrap();

    // Peepholes: forget and output together.
    let mut m = sequence_lstm(false, false);
    let p = m.add_f32_tensor(vec![5], &[0.0; 5]);
    set_input(&mut m, 10, p);
    assert_problem(
        &m,
        "input 11 (cell_to_output_weights) must be present exactly when cell_to_forget_weights is",
    );

    let mut m = sequence_lstm(false, false);
    let pb = m.add_f32_tensor(vec![5], &[0.0; 5]);
    set_input(&mut m, 17, pb);
    assert_problem(&m, "input 17 (projection_bias) needs projection_weights");

    let mut m = sequence_lstm(false, false);
    let w = m.add_f32_tensor(vec![5, 3], &[0.0; 15]);
    set_input(&mut m, 3, w);
    assert_problem(
        &m,
        "input 3 (input_to_cell_weights) has dimensions [5, 3], expected [5, 4]",
    );

    // Batch-major reads the same input as [batch 3, time 2]: the states' batch of 2 no
    // longer agrees.
    let mut m = sequence_lstm(false, false);
    let tm = m.add_bool(false);
    set_input(&mut m, 23, tm);
    assert_problem(
        &m,
        "input 18 (output_state_in) has dimensions [2, 5], expected [3, 5]",
    );

    let mut m = sequence_lstm(false, true);
    let y = m.main.outputs[2] as usize;
    m.main.operands[y].dimensions = vec![2, 4];
    assert_problem(
        &m,
        "output 2 is declared 2x4 but the operation produces 2x5",
    );

    let mut m = sequence_lstm(false, false);
    m.main.operands[0].operand_type = OperandType::TensorFloat16;
    assert_problem(
        &m,
        "input 0 (input) must be TENSOR_FLOAT32, got TENSOR_FLOAT16",
    );

    let mut m = sequence_lstm(false, true);
    m.main.operations[0].outputs.pop();
    assert_problem(&m, "produces 1 or 3 outputs, got 2");

    let mut m = sequence_lstm(true, false);
    let none = m.add_no_value(OperandType::TensorFloat32);
    set_input(&mut m, 26, none);
    assert_problem(
        &m,
        "layer normalization weights of the forget, cell and output gates go together",
    );
}

/// UNIDIRECTIONAL_SEQUENCE_RNN: batch-major input [2, 3, 4], 5 units.
fn sequence_rnn(activation: i32, time_major: i32) -> Model {
    let mut m = Model::default();
    let mut x = Operand::new(OperandType::TensorFloat32, vec![2, 3, 4]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = m.add_operand(x);
    let w = m.add_f32_tensor(vec![5, 4], &[0.1; 20]);
    let r = m.add_f32_tensor(vec![5, 5], &[0.1; 25]);
    let bias = m.add_f32_tensor(vec![5], &[0.0; 5]);
    let h = m.add_f32_tensor(vec![2, 5], &[0.0; 10]);
    let a = m.add_i32(activation);
    let tm = m.add_i32(time_major);
    let mut y = Operand::new(OperandType::TensorFloat32, vec![2, 3, 5]);
    y.lifetime = Lifetime::SubgraphOutput;
    let y = m.add_operand(y);
    m.add_operation(
        OperationType::UnidirectionalSequenceRnn,
        vec![x, w, r, bias, h, a, tm],
        vec![y],
        "rnn",
    );
    m.main.inputs = vec![x];
    m.main.outputs = vec![y];
    m.input_info = vec![IoInfo {
        name: "x".into(),
        dtype: DataType::F32,
        dims: vec![2, 3, 4],
    }];
    m.output_info = vec![IoInfo {
        name: "y".into(),
        dtype: DataType::F32,
        dims: vec![2, 3, 5],
    }];
    m
}

#[test]
fn sequence_rnn_signature() {
    validate(&sequence_rnn(1, 0)).unwrap();
    assert_problem(
        &sequence_rnn(1, 2),
        "input 6 (time_major) must be 0 or 1, got 2",
    );
    assert_problem(
        &sequence_rnn(4, 0),
        "must be 0 (NONE), 1 (RELU), 2 (RELU1) or 3 (RELU6), got 4",
    );
    // Time-major reads the same input as [time 2, batch 3]: the state's batch of 2
    // no longer agrees.
    assert_problem(
        &sequence_rnn(0, 1),
        "input 4 (hidden_state) has dimensions [2, 5], expected [3, 5]",
    );
    let mut m = sequence_rnn(0, 0);
    let r = m.add_f32_tensor(vec![5, 4], &[0.0; 20]);
    set_input(&mut m, 2, r);
    assert_problem(&m, "recurrent_weights");
    let mut m = sequence_rnn(0, 0);
    m.main.operations[0].inputs.pop();
    assert_problem(&m, "takes 7 inputs, got 6");
}
