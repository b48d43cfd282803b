//! Synthetic source models for tests and benchmarks (not part of the product API):
//! long chains that measure how compilation scales with graph length, and must compile
//! without deep recursion or quadratic passes.

use crate::onnx::proto::{
    self, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};
use crate::tflite::schema_generated::tflite as fb;

/// Operators a chain can be made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChainOp {
    /// `y = Relu(x)`: fused into nothing, kept as RELU operations.
    Relu,
    /// `y = x + c` with one shared constant.
    Add,
    /// `y = Identity(x)`: every node is removed by the passes.
    Identity,
    /// `y = MaxPool(x)` (1x1 window): a layout-sensitive operation, lowered between
    /// transposes that the layout pass must cancel.
    MaxPool,
    /// `y = If(c) then Relu(x) else Neg(x)` with a constant condition: every If folds.
    IfFolded,
    /// The same with the condition a graph input `c`: every If stays an IF with two
    /// referenced subgraphs, each reading `x` from the enclosing graph.
    IfKept,
}

impl ChainOp {
    pub fn from_name(name: &str) -> Option<ChainOp> {
        match name.to_ascii_lowercase().as_str() {
            "relu" => Some(ChainOp::Relu),
            "add" => Some(ChainOp::Add),
            "identity" => Some(ChainOp::Identity),
            "maxpool" => Some(ChainOp::MaxPool),
            "if-folded" => Some(ChainOp::IfFolded),
            "if-kept" => Some(ChainOp::IfKept),
            _ => None,
        }
    }
}

fn float_value(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: proto::tensor_proto::DataType::Float as i32,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                            denotation: String::new(),
                        })
                        .collect(),
                }),
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

/// The encoded opset-13 model of `graph`.
fn opset13_model(graph: GraphProto) -> Vec<u8> {
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        producer_name: "nnc synthetic".into(),
        graph: Some(graph),
        ..Default::default()
    };
    proto::encode_model(&model)
}

/// A rank-0 bool graph value (an If's condition).
fn bool_scalar_value(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: proto::tensor_proto::DataType::Bool as i32,
                shape: Some(TensorShapeProto { dim: Vec::new() }),
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

/// An ONNX model (opset 13) of `length` nodes, each reading the previous one's output,
/// on a float input of shape [1, 4, 2, 2].
pub fn onnx_chain(op: ChainOp, length: usize) -> Vec<u8> {
    let dims = [1, 4, 2, 2];
    let mut graph = GraphProto {
        name: "chain".into(),
        input: vec![float_value("x", &dims)],
        ..Default::default()
    };
    match op {
        ChainOp::IfKept => graph.input.push(bool_scalar_value("c")),
        ChainOp::IfFolded => graph.initializer.push(TensorProto {
            name: "c".into(),
            data_type: proto::tensor_proto::DataType::Bool as i32,
            int32_data: vec![1],
            ..Default::default()
        }),
        _ => {}
    }
    if op == ChainOp::Add {
        graph.initializer.push(TensorProto {
            name: "c".into(),
            dims: vec![1],
            data_type: proto::tensor_proto::DataType::Float as i32,
            float_data: vec![0.5],
            ..Default::default()
        });
    }
    let mut prev = "x".to_string();
    for i in 0..length {
        let out = format!("v{i}");
        let mut node = NodeProto {
            input: vec![prev.clone()],
            output: vec![out.clone()],
            ..Default::default()
        };
        match op {
            ChainOp::Relu => node.op_type = "Relu".into(),
            ChainOp::Identity => node.op_type = "Identity".into(),
            ChainOp::Add => {
                node.op_type = "Add".into();
                node.input.push("c".into());
            }
            ChainOp::IfFolded | ChainOp::IfKept => {
                node.op_type = "If".into();
                node.input = vec!["c".into()];
                let branch = |name: &str, op_type: &str| GraphProto {
                    name: name.into(),
                    node: vec![NodeProto {
                        op_type: op_type.into(),
                        input: vec![prev.clone()],
                        output: vec![format!("{out}_{name}")],
                        ..Default::default()
                    }],
                    output: vec![float_value(&format!("{out}_{name}"), &dims)],
                    ..Default::default()
                };
                for (attr, name, op_type) in [
                    ("then_branch", "then", "Relu"),
                    ("else_branch", "else", "Neg"),
                ] {
                    node.attribute.push(proto::AttributeProto {
                        name: attr.into(),
                        r#type: Some(proto::attribute_proto::AttributeType::Graph as i32),
                        g: Some(branch(name, op_type)),
                        ..Default::default()
                    });
                }
            }
            ChainOp::MaxPool => {
                node.op_type = "MaxPool".into();
                node.attribute.push(proto::AttributeProto {
                    name: "kernel_shape".into(),
                    r#type: Some(proto::attribute_proto::AttributeType::Ints as i32),
                    ints: vec![1, 1],
                    ..Default::default()
                });
            }
        }
        graph.node.push(node);
        prev = out;
    }
    graph.output.push(float_value(&prev, &dims));
    opset13_model(graph)
}

/// An ONNX model whose Ifs nest `depth` deep: each then branch holds the next If, the
/// innermost computes `Relu(x)`, every else branch `Neg(x)`; the condition is the graph
/// input `c`, so nothing folds. For testing nesting bounds.
pub fn onnx_nested_ifs(depth: usize) -> Vec<u8> {
    let dims = [2];
    let leaf = |name: String, op_type: &str| GraphProto {
        name: name.clone(),
        node: vec![NodeProto {
            op_type: op_type.into(),
            input: vec!["x".into()],
            output: vec![name.clone()],
            ..Default::default()
        }],
        output: vec![float_value(&name, &dims)],
        ..Default::default()
    };
    let mut inner = leaf(format!("y{depth}"), "Relu");
    for d in (0..depth).rev() {
        let out = format!("y{d}");
        let node = NodeProto {
            op_type: "If".into(),
            input: vec!["c".into()],
            output: vec![out.clone()],
            attribute: vec![
                proto::AttributeProto {
                    name: "then_branch".into(),
                    r#type: Some(proto::attribute_proto::AttributeType::Graph as i32),
                    g: Some(inner),
                    ..Default::default()
                },
                proto::AttributeProto {
                    name: "else_branch".into(),
                    r#type: Some(proto::attribute_proto::AttributeType::Graph as i32),
                    g: Some(leaf(format!("{out}_else"), "Neg")),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        inner = GraphProto {
            name: format!("g{d}"),
            node: vec![node],
            output: vec![float_value(&out, &dims)],
            ..Default::default()
        };
    }
    let graph = GraphProto {
        name: "nested".into(),
        input: vec![float_value("x", &dims), bool_scalar_value("c")],
        ..inner
    };
    opset13_model(graph)
}

/// A TFLite model of `length` RELU operators in a chain, on a float [1, 4] input.
pub fn tflite_chain(length: usize) -> Vec<u8> {
    let mut b = flatbuffers::FlatBufferBuilder::new();
    let shape = b.create_vector(&[1i32, 4]);
    let mut tensors = Vec::with_capacity(length + 1);
    for i in 0..=length {
        let name = b.create_string(&format!("t{i}"));
        tensors.push(fb::Tensor::create(
            &mut b,
            &fb::TensorArgs {
                shape: Some(shape),
                type_: fb::TensorType::FLOAT32,
                buffer: 0,
                name: Some(name),
                ..Default::default()
            },
        ));
    }
    let mut operators = Vec::with_capacity(length);
    for i in 0..length {
        let inputs = b.create_vector(&[i as i32]);
        let outputs = b.create_vector(&[i as i32 + 1]);
        operators.push(fb::Operator::create(
            &mut b,
            &fb::OperatorArgs {
                opcode_index: 0,
                inputs: Some(inputs),
                outputs: Some(outputs),
                ..Default::default()
            },
        ));
    }
    let tensors = b.create_vector(&tensors);
    let operators = b.create_vector(&operators);
    let inputs = b.create_vector(&[0i32]);
    let outputs = b.create_vector(&[length as i32]);
    let subgraph = fb::SubGraph::create(
        &mut b,
        &fb::SubGraphArgs {
            tensors: Some(tensors),
            inputs: Some(inputs),
            outputs: Some(outputs),
            operators: Some(operators),
            name: None,
        },
    );
    let code = fb::OperatorCode::create(
        &mut b,
        &fb::OperatorCodeArgs {
            deprecated_builtin_code: fb::BuiltinOperator::RELU.0 as i8,
            custom_code: None,
            version: 1,
            builtin_code: fb::BuiltinOperator::RELU,
        },
    );
    let empty = fb::Buffer::create(&mut b, &fb::BufferArgs::default());
    let codes = b.create_vector(&[code]);
    let subgraphs = b.create_vector(&[subgraph]);
    let buffers = b.create_vector(&[empty]);
    let model = fb::Model::create(
        &mut b,
        &fb::ModelArgs {
            version: 3,
            operator_codes: Some(codes),
            subgraphs: Some(subgraphs),
            description: None,
            buffers: Some(buffers),
        },
    );
    b.finish(model, Some("TFL3"));
    b.finished_data().to_vec()
}
