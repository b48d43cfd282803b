//! Helpers the ONNX-building integration tests share: float value infos, attributes,
//! lowering an in-memory model, and running a lowered model on the simulated NPU
//! (plaintext weights, as `nnc run` of an unencrypted file would).
// Each test crate uses the part it needs.
#![allow(dead_code)]

use nnc_compiler::CompileError;
use nnc_compiler::emit::{self, EmitOptions};
use nnc_compiler::onnx::proto::{
    AttributeProto, ModelProto, TensorShapeProto, TypeProto, ValueInfoProto,
    attribute_proto::AttributeType, encode_model, tensor_shape_proto, type_proto,
};
use nnc_compiler::onnx::tensor::ExternalDataContext;
use nnc_compiler::pipeline::{LowerOptions, SourceFormat, lower_bytes};
use nnc_formats::crypto::Mode;
use nnc_formats::nn::Model;
use nnc_formats::npy::read_npy_file;
use nnc_formats::tensor::HostTensor;
use nnc_runtime::{LoadOptions, PreparedModel, SimulatedNpu};

/// ONNX's FLOAT element type.
const FLOAT: i32 = 1;

/// A float tensor value: `None` leaves the shape unknown, a negative dimension dynamic.
pub fn float_value_info(name: &str, dims: Option<&[i64]>) -> ValueInfoProto {
    let shape = dims.map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .map(|&d| tensor_shape_proto::Dimension {
                value: Some(if d < 0 {
                    tensor_shape_proto::dimension::Value::DimParam("n".into())
                } else {
                    tensor_shape_proto::dimension::Value::DimValue(d)
                }),
                denotation: String::new(),
            })
            .collect(),
    });
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: FLOAT,
                shape,
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

pub fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

pub fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

pub fn float_attr(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: Some(AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}

/// Lowers an in-memory ONNX model with the default options.
pub fn lower_onnx(m: &ModelProto) -> Result<Model, CompileError> {
    lower_bytes(
        encode_model(m).into(),
        SourceFormat::Onnx,
        &ExternalDataContext::none(),
        &LowerOptions::default(),
    )
    .map(|l| l.model)
}

/// Emits `model` unencrypted, loads it on a simulated NPU and runs it once.
pub fn run_on_npu(model: &Model, inputs: &[HostTensor]) -> Vec<HostTensor> {
    let bytes = emit::emit(
        model,
        EmitOptions {
            envelope: Default::default(),
            key: None,
            mode: Mode::Ctr,
            authenticate_only: false,
            reproducible: true,
            extra_sections: Vec::new(),
        },
    )
    .expect("emits");
    let npu = SimulatedNpu::new("npu0");
    let prepared = PreparedModel::load_bytes(bytes, &npu, &LoadOptions::default()).expect("loads");
    prepared.run(inputs).expect("runs")
}

/// The tensors `dir/{kind}_0.npy`, `dir/{kind}_1.npy`, ... in order, up to the first
/// missing one.
pub fn numbered(dir: &std::path::Path, kind: &str) -> Vec<HostTensor> {
    (0..)
        .map(|i| dir.join(format!("{kind}_{i}.npy")))
        .take_while(|p| p.is_file())
        .map(|p| read_npy_file(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}
