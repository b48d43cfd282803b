//! bfloat16, float8 and 4-bit integers end to end: graph inputs and outputs of those
//! types read from and written to ONNX tensor files, casts that round to them, and
//! int4 weights dequantized, through `nnc compile` and `nnc run`.

use std::path::Path;
use std::process::{Command, Output};

use nnc_compiler::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, attribute_proto, decode_tensor, encode_model,
    encode_tensor, tensor_proto::DataType as T, tensor_shape_proto, type_proto,
};
use nnc_compiler::onnx::tensor::{ExternalDataContext, host_to_tensor, tensor_to_host};
use nnc_formats::minifloat::FloatFormat;
use nnc_formats::tensor::{DataType, HostTensor};

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn info(name: &str, elem: T, len: i64) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem as i32,
                shape: Some(TensorShapeProto {
                    dim: vec![tensor_shape_proto::Dimension {
                        value: Some(tensor_shape_proto::dimension::Value::DimValue(len)),
                        denotation: String::new(),
                    }],
                }),
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str, attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: output.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        attribute: attrs,
        ..Default::default()
    }
}

fn int_attr(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: Some(attribute_proto::AttributeType::Int as i32),
        i: Some(value),
        ..Default::default()
    }
}

fn write_pb(dir: &Path, name: &str, t: &HostTensor) -> String {
    let path = dir.join(format!("{name}.pb"));
    std::fs::write(&path, encode_tensor(&host_to_tensor(t, name))).unwrap();
    format!("{name}={}", path.display())
}

fn read_pb(path: &Path) -> HostTensor {
    let bytes = std::fs::read(path).unwrap();
    tensor_to_host(
        &decode_tensor(&bytes).unwrap(),
        &ExternalDataContext::none(),
    )
    .unwrap()
}

/// x (float8 e4m3fn) -> float32 -> * 3.3 -> bfloat16 output `y` and saturating int4
/// output `w`; q (int4) dequantized with an int4 zero point to float32 output `z`.
fn model() -> ModelProto {
    let factor = TensorProto {
        name: "factor".into(),
        data_type: T::Float as i32,
        float_data: vec![3.3],
        ..Default::default()
    };
    let scale = TensorProto {
        name: "scale".into(),
        data_type: T::Float as i32,
        float_data: vec![0.5],
        ..Default::default()
    };
    // One int4 zero point (-3), packed in the low nibble of an int32_data entry.
    let zp = TensorProto {
        name: "zp".into(),
        data_type: T::Int4 as i32,
        int32_data: vec![0x0d],
        ..Default::default()
    };
    ModelProto {
        ir_version: 10,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 21,
        }],
        graph: Some(GraphProto {
            node: vec![
                node("Cast", &["x"], "xf", vec![int_attr("to", T::Float as i64)]),
                node("Mul", &["xf", "factor"], "x3", vec![]),
                node(
                    "Cast",
                    &["x3"],
                    "y",
                    vec![int_attr("to", T::Bfloat16 as i64)],
                ),
                node("Cast", &["x3"], "w", vec![int_attr("to", T::Int4 as i64)]),
                node("DequantizeLinear", &["q", "scale", "zp"], "z", vec![]),
            ],
            name: "narrow".into(),
            initializer: vec![factor, scale, zp],
            input: vec![info("x", T::Float8e4m3fn, 5), info("q", T::Int4, 5)],
            output: vec![
                info("y", T::Bfloat16, 5),
                info("w", T::Int4, 5),
                info("z", T::Float, 5),
            ],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn narrow_inputs_and_outputs_cross_tensor_files_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("narrow.onnx");
    std::fs::write(&source, encode_model(&model())).unwrap();
    let compiled = dir.path().join("narrow.nnc");
    let o = nnc()
        .arg("compile")
        .arg(&source)
        .arg("-o")
        .arg(&compiled)
        .args(["--encrypt", "none"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));

    let e4m3 = FloatFormat::Float8E4M3Fn;
    let xs = [1.0f32, -2.5, 0.017578125, 448.0, -0.0];
    let x_codes: Vec<u8> = xs.iter().map(|&v| e4m3.encode(v, true) as u8).collect();
    let x = HostTensor::new(DataType::F8E4M3Fn, vec![5], x_codes).unwrap();
    let qs = [-8i8, -3, 0, 5, 7];
    let q = HostTensor::new(DataType::I4, vec![5], qs.iter().map(|&v| v as u8).collect()).unwrap();
    let out = dir.path().join("out");
    let o = nnc()
        .arg("run")
        .arg(&compiled)
        .args(["--input", &write_pb(dir.path(), "x", &x)])
        .args(["--input", &write_pb(dir.path(), "q", &q)])
        .arg("--output-dir")
        .arg(&out)
        .args(["--output-format", "pb"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));

    // y: the float8 values times 3.3, rounded to bfloat16 (ties to even), in the
    // declared type.
    let y = read_pb(&out.join("output_0.pb"));
    assert_eq!(y.dtype, DataType::Bf16);
    let expected: Vec<u16> = xs
        .iter()
        .map(|&v| FloatFormat::Bfloat16.encode(v * 3.3, false))
        .collect();
    let got: Vec<u16> = y
        .data
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(got, expected);
    // 3.3 is not a bfloat16: it rounded.
    assert_ne!(FloatFormat::Bfloat16.decode(got[0]), 3.3);

    // w: Cast-21 saturates into int4 (truncating toward zero first): 3.3, -8.25,
    // 0.058, 1478.4, -0.
    let w = read_pb(&out.join("output_1.pb"));
    assert_eq!(w.dtype, DataType::I4);
    let w: Vec<i8> = w.data.iter().map(|&b| b as i8).collect();
    assert_eq!(w, vec![3, -8, 0, 7, 0]);

    // z: (q - zp) * scale.
    let z = read_pb(&out.join("output_2.pb")).to_f32_vec().unwrap();
    let expected: Vec<f32> = qs.iter().map(|&v| (f32::from(v) + 3.0) * 0.5).collect();
    assert_eq!(z, expected);
}

#[test]
fn an_out_of_range_narrow_input_is_refused_naming_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("narrow.onnx");
    std::fs::write(&source, encode_model(&model())).unwrap();
    let x = HostTensor::new(DataType::F8E4M3Fn, vec![5], vec![0x38; 5]).unwrap();
    // int8 data is accepted for an int4 input when every value fits; 9 does not.
    let q = HostTensor::new(DataType::I8, vec![5], vec![0, 1, 9, 2, 3]).unwrap();
    let o = nnc()
        .arg("run")
        .arg(&source)
        .args(["--input", &write_pb(dir.path(), "x", &x)])
        .args(["--input", &write_pb(dir.path(), "q", &q)])
        .arg("--output-dir")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    let text = stderr(&o);
    assert!(
        text.contains("input 1: value 9 does not fit int4"),
        "{text}"
    );
}
