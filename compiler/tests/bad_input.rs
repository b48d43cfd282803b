//! Malformed and hostile ONNX input: every case must give a clear error (never a panic or
//! a hang), naming what is wrong and where.

use std::time::{Duration, Instant};

use nnc_compiler::CompileError;
use nnc_compiler::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, encode_model, tensor_shape_proto, type_proto,
};
use nnc_compiler::onnx::tensor::ExternalDataContext;
use nnc_compiler::pipeline::{LowerOptions, SourceFormat, lower_bytes};

const FLOAT: i32 = 1;

fn value_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
            denotation: String::new(),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: FLOAT,
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn model(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    opset: i64,
) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: "g".into(),
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A valid two-node model: relu(x) + relu(x).
fn valid() -> ModelProto {
    model(
        vec![
            node("Relu", "relu", &["x"], &["r"]),
            node("Add", "add", &["r", "r"], &["y"]),
        ],
        vec![value_info("x", &[1, 4])],
        vec![value_info("y", &[1, 4])],
        13,
    )
}

fn compile(bytes: Vec<u8>) -> Result<(), CompileError> {
    let start = Instant::now();
    let result = lower_bytes(
        bytes.into(),
        SourceFormat::Onnx,
        &ExternalDataContext::none(),
        &LowerOptions::default(),
    );
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "compilation took {:?}",
        start.elapsed()
    );
    result.map(|_| ())
}

fn compile_model(m: &ModelProto) -> Result<(), CompileError> {
    compile(encode_model(m))
}

#[test]
fn the_reference_model_compiles() {
    compile_model(&valid()).unwrap();
}

#[test]
fn truncated_models_fail_cleanly_at_every_length() {
    let bytes = encode_model(&valid());
    for len in 0..bytes.len() {
        match compile(bytes[..len].to_vec()) {
            Ok(()) => {} // a prefix can be a smaller valid message; it must then be checked
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}

#[test]
fn garbage_bytes_are_a_decode_error() {
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let err = compile(garbage).unwrap_err();
    assert!(
        matches!(
            err,
            CompileError::OnnxDecode(_) | CompileError::InvalidModel { .. }
        ),
        "{err}"
    );
}

#[test]
fn an_unknown_opset_is_rejected_naming_the_newest_known() {
    let mut m = valid();
    m.opset_import[0].version = 99;
    let err = compile_model(&m).unwrap_err();
    assert!(matches!(err, CompileError::Unsupported(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("opset 99") && text.contains("newest nnc knows (28)"),
        "{text}"
    );
    m.opset_import.clear();
    let err = compile_model(&m).unwrap_err().to_string();
    assert!(err.contains("opset"), "{err}");
}

#[test]
fn a_missing_initializer_names_the_node_and_value() {
    // Conv reads weights "w" that are neither an initializer nor an input.
    let m = model(
        vec![node("Conv", "conv1", &["x", "w"], &["y"])],
        vec![value_info("x", &[1, 3, 8, 8])],
        vec![value_info("y", &[1, 4, 8, 8])],
        13,
    );
    let err = compile_model(&m).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, CompileError::InvalidModel { .. }), "{text}");
    assert!(
        text.contains("conv1") && text.contains("'w'") && text.contains("missing initializer"),
        "{text}"
    );
}

#[test]
fn a_dangling_input_names_the_value() {
    let m = model(
        vec![node("Relu", "relu", &["nowhere"], &["y"])],
        vec![value_info("x", &[1, 4])],
        vec![value_info("y", &[1, 4])],
        13,
    );
    let text = compile_model(&m).unwrap_err().to_string();
    assert!(
        text.contains("'nowhere'") && text.contains("relu"),
        "{text}"
    );
}

#[test]
fn a_cycle_is_found_and_named() {
    let m = model(
        vec![
            node("Add", "a", &["x", "c"], &["b"]),
            node("Relu", "b_node", &["b"], &["c"]),
            node("Relu", "out", &["b"], &["y"]),
        ],
        vec![value_info("x", &[1, 4])],
        vec![value_info("y", &[1, 4])],
        13,
    );
    let text = compile_model(&m).unwrap_err().to_string();
    assert!(
        text.contains("cycle") && text.contains("'a'") && text.contains("'b_node'"),
        "{text}"
    );
}

#[test]
fn absurd_dimensions_are_rejected() {
    for dims in [vec![1, 1i64 << 40], vec![1, -3]] {
        let m = model(
            vec![node("Relu", "relu", &["x"], &["y"])],
            vec![value_info("x", &dims)],
            vec![value_info("y", &dims)],
            13,
        );
        let text = compile_model(&m).unwrap_err().to_string();
        assert!(
            text.contains("graph input 'x'") && text.contains("dimension 1"),
            "{text}"
        );
    }
    // An initializer claiming 2^62 elements: refused before anything is allocated.
    let mut m = valid();
    let g = m.graph.as_mut().unwrap();
    g.initializer.push(TensorProto {
        name: "huge".into(),
        data_type: FLOAT,
        dims: vec![1 << 31, 1 << 31],
        ..Default::default()
    });
    g.node.push(node("Add", "add2", &["y", "huge"], &["z"]));
    let text = compile_model(&m).unwrap_err().to_string();
    assert!(text.contains("huge"), "{text}");
}

#[test]
fn a_constant_of_shape_bomb_is_refused() {
    let mut m = valid();
    let g = m.graph.as_mut().unwrap();
    g.initializer.push(TensorProto {
        name: "shape".into(),
        data_type: 7, // int64
        dims: vec![3],
        int64_data: vec![1 << 20, 1 << 20, 1 << 20],
        ..Default::default()
    });
    g.node
        .push(node("ConstantOfShape", "bomb", &["shape"], &["big"]));
    g.node.push(node("Add", "use", &["y", "big"], &["z"]));
    g.output = vec![value_info("z", &[1, 4])];
    let err = compile_model(&m).unwrap_err();
    assert!(matches!(err, CompileError::Limit { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("bomb") && text.contains("--limit folded=SIZE"),
        "{text}"
    );
}

#[test]
fn contradictory_shapes_are_invalid_not_a_panic() {
    let m = model(
        vec![node("Add", "add", &["x", "z"], &["y"])],
        vec![value_info("x", &[1, 4]), value_info("z", &[1, 5])],
        vec![value_info("y", &[1, 4])],
        13,
    );
    let err = compile_model(&m).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("add") && text.contains("broadcast"), "{text}");
}

#[test]
fn a_wrongly_typed_attribute_is_named() {
    let mut m = valid();
    let g = m.graph.as_mut().unwrap();
    g.node.push(NodeProto {
        attribute: vec![AttributeProto {
            name: "axis".into(),
            r#type: Some(3), // STRING
            s: Some(b"one".to_vec().into()),
            ..Default::default()
        }],
        ..node("Softmax", "soft", &["y"], &["z"])
    });
    g.output = vec![value_info("z", &[1, 4])];
    let text = compile_model(&m).unwrap_err().to_string();
    assert!(text.contains("soft") && text.contains("'axis'"), "{text}");
}

#[test]
fn two_writers_of_one_value_are_rejected() {
    let m = model(
        vec![
            node("Relu", "r1", &["x"], &["y"]),
            node("Relu", "r2", &["x"], &["y"]),
        ],
        vec![value_info("x", &[1, 4])],
        vec![value_info("y", &[1, 4])],
        13,
    );
    let text = compile_model(&m).unwrap_err().to_string();
    assert!(
        text.contains("'y'") && text.contains("also writes"),
        "{text}"
    );
}

#[test]
fn every_unsupported_operator_is_listed_in_one_error() {
    let m = model(
        vec![
            node("Det", "det1", &["x"], &["a"]),
            node("Det", "det2", &["a"], &["b"]),
            NodeProto {
                domain: "com.example".into(),
                ..node("Custom", "custom1", &["b"], &["c"])
            },
            node("Relu", "after", &["c"], &["y"]),
        ],
        vec![value_info("x", &[1, 4])],
        vec![value_info("y", &[1, 4])],
        13,
    );
    let mut m = m;
    m.opset_import.push(OperatorSetIdProto {
        domain: "com.example".into(),
        version: 1,
    });
    let err = compile_model(&m).unwrap_err();
    let CompileError::Unsupported(report) = &err else {
        panic!("{err}")
    };
    assert_eq!(report.operators["Det"].len(), 2);
    assert_eq!(report.operators["com.example.Custom"].len(), 1);
    assert!(
        !report.operators.contains_key("Relu"),
        "supported ops are not listed"
    );
    let text = err.to_string();
    assert!(
        text.contains("Det x2")
            && text.contains("'det1'")
            && text.contains("'det2'")
            && text.contains("custom1"),
        "{text}"
    );
}

#[test]
fn a_node_of_a_domain_the_model_does_not_import_is_malformed() {
    let m = model(
        vec![NodeProto {
            domain: "com.example".into(),
            ..node("Custom", "custom1", &["x"], &["y"])
        }],
        vec![value_info("x", &[1, 4])],
        vec![value_info("y", &[1, 4])],
        13,
    );
    let err = compile_model(&m).unwrap_err();
    assert!(matches!(err, CompileError::InvalidModel { .. }), "{err}");
    assert!(err.to_string().contains("does not import"), "{err}");
}

#[test]
fn operators_are_checked_against_their_own_definitions() {
    // Opset 28 (onnx 1.23) is read; Relu's definition there is version 14.
    let relu = model(
        vec![node("Relu", "r", &["x"], &["y"])],
        vec![value_info("x", &[1, 4])],
        vec![value_info("y", &[1, 4])],
        28,
    );
    compile_model(&relu).unwrap();
    // Dropout at opset 6 is the `is_test` definition nnc does not lower: refused by
    // name and version.
    let dropout = model(
        vec![node("Dropout", "d", &["x"], &["y"])],
        vec![value_info("x", &[1, 4])],
        vec![value_info("y", &[1, 4])],
        6,
    );
    let text = compile_model(&dropout).unwrap_err().to_string();
    assert!(text.contains("Dropout version 6 (model opset 6)"), "{text}");
    // An operator used before ONNX introduced it is malformed.
    let gelu = model(
        vec![node("Gelu", "g", &["x"], &["y"])],
        vec![value_info("x", &[1, 4])],
        vec![value_info("y", &[1, 4])],
        17,
    );
    let err = compile_model(&gelu).unwrap_err();
    assert!(matches!(err, CompileError::InvalidModel { .. }), "{err}");
    assert!(err.to_string().contains("introduced in opset 20"), "{err}");
    // A future opset is unsupported, not malformed.
    let future = model(
        vec![node("Relu", "r", &["x"], &["y"])],
        vec![value_info("x", &[1, 4])],
        vec![value_info("y", &[1, 4])],
        29,
    );
    assert!(matches!(
        compile_model(&future).unwrap_err(),
        CompileError::Unsupported(_)
    ));
}

/// Random byte mutations of a valid model never panic or hang.
#[test]
fn mutated_models_never_panic() {
    let bytes = encode_model(&valid());
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let mut b = bytes.clone();
        for _ in 0..1 + next() % 4 {
            let pos = (next() as usize) % b.len();
            b[pos] = next() as u8;
        }
        let _ = compile(b);
    }
}

/// `value_info` with another element type.
fn typed_value_info(name: &str, dims: &[i64], elem_type: i32) -> ValueInfoProto {
    let mut v = value_info(name, dims);
    if let Some(TypeProto {
        value: Some(type_proto::Value::TensorType(t)),
        ..
    }) = v.r#type.as_mut()
    {
        t.elem_type = elem_type;
    }
    v
}

#[test]
fn valid_types_nnc_does_not_run_are_unsupported_naming_type_and_tensor() {
    const STRING: i32 = 8;
    let m = model(
        vec![node("Identity", "id", &["words"], &["y"])],
        vec![typed_value_info("words", &[2], STRING)],
        vec![typed_value_info("y", &[2], STRING)],
        13,
    );
    let err = compile_model(&m).unwrap_err();
    assert!(matches!(err, CompileError::Unsupported(_)), "{err}");
    let text = err.to_string();
    assert!(text.contains("STRING") && text.contains("words"), "{text}");
    // An element type ONNX does not define is malformed.
    let m = model(
        vec![node("Identity", "id", &["x"], &["y"])],
        vec![typed_value_info("x", &[2], 99)],
        vec![value_info("y", &[2])],
        13,
    );
    let err = compile_model(&m).unwrap_err();
    assert!(matches!(err, CompileError::InvalidModel { .. }), "{err}");
}

#[test]
fn a_model_of_ai_onnx_ml_operators_only_is_unsupported_naming_them() {
    let mut m = model(
        vec![NodeProto {
            domain: "ai.onnx.ml".into(),
            ..node("SVMRegressor", "svm", &["x"], &["y"])
        }],
        vec![value_info("x", &[1, 4])],
        vec![value_info("y", &[1, 4])],
        13,
    );
    // Such models import only ai.onnx.ml.
    m.opset_import = vec![OperatorSetIdProto {
        domain: "ai.onnx.ml".into(),
        version: 3,
    }];
    let err = compile_model(&m).unwrap_err();
    let CompileError::Unsupported(report) = &err else {
        panic!("{err}")
    };
    assert!(
        report.operators.contains_key("ai.onnx.ml.SVMRegressor"),
        "{err}"
    );
    assert!(
        err.to_string().contains("ai.onnx.ml operator SVMRegressor"),
        "{err}"
    );
}
