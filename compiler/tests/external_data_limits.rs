//! Initializers are checked against the `tensor` limit from their declared dims before
//! any of their data is read or copied (issue 29, item 6: a 135-byte ONNX naming 3 GiB
//! of external data, a sparse file, made the importer allocate 6 GB before its limit
//! error). Scaled down: 1 GiB of sparse external data against a 64 MiB limit, in
//! process, with this test's peak resident set read back from /proc.

use std::path::Path;

use nnc_compiler::CompileError;
use nnc_compiler::onnx::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, encode_model, tensor_shape_proto, type_proto,
};
use nnc_compiler::onnx::tensor::{ExternalDataContext, OnnxTensorError, tensor_to_host};
use nnc_compiler::pipeline::{LowerOptions, lower_file};
use nnc_formats::limits::{LimitKind, Limits};

const FLOAT: i32 = 1;

fn output(name: &str, elements: i64) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: FLOAT,
                shape: Some(TensorShapeProto {
                    dim: vec![tensor_shape_proto::Dimension {
                        value: Some(tensor_shape_proto::dimension::Value::DimValue(elements)),
                        denotation: String::new(),
                    }],
                }),
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

/// `y = Identity(w)` with initializer `w` as given.
fn model_with(w: TensorProto, elements: i64) -> Vec<u8> {
    encode_model(&ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                op_type: "Identity".into(),
                input: vec!["w".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            name: "g".into(),
            initializer: vec![w],
            output: vec![output("y", elements)],
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn external_w(elements: i64) -> TensorProto {
    TensorProto {
        name: "w".into(),
        data_type: FLOAT,
        dims: vec![elements],
        data_location: Some(1),
        external_data: vec![StringStringEntryProto {
            key: "location".into(),
            value: "w.bin".into(),
        }],
        ..Default::default()
    }
}

fn sparse(path: &Path, bytes: u64) {
    std::fs::File::create(path).unwrap().set_len(bytes).unwrap();
}

/// This process's peak resident set (VmHWM), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a number of kB");
    kib * 1024
}

fn options(tensor_limit: u64) -> LowerOptions {
    let mut options = LowerOptions::default();
    options.import.limits = Limits {
        max_tensor_bytes: tensor_limit,
        ..Limits::default()
    };
    options
}

#[test]
fn a_sparse_external_initializer_beyond_the_limit_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let bytes: u64 = 1 << 30;
    let elements = (bytes / 4) as i64;
    sparse(&dir.path().join("w.bin"), bytes);
    let model = dir.path().join("ext.onnx");
    std::fs::write(&model, model_with(external_w(elements), elements)).unwrap();

    let error = lower_file(&model, &options(64 << 20))
        .err()
        .expect("refused");
    match &error {
        CompileError::Limit { error, .. } => {
            assert_eq!(error.kind, LimitKind::Tensor);
            assert_eq!(error.requested, Some(bytes));
            assert!(error.what.contains("tensor 'w'"), "{error}");
        }
        other => panic!("not a limit error: {other}"),
    }
    assert!(error.to_string().contains("--limit tensor=SIZE"), "{error}");
    // Nothing near the file's gigabyte was touched (the test binary itself is tens of
    // MiB).
    let peak = peak_rss();
    assert!(peak < 256 << 20, "peak RSS {} MiB", peak >> 20);

    // Within a raised limit the same file is read: the limit, not the size, refused it.
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    sparse(&small.join("w.bin"), 4096);
    let model = small.join("ext.onnx");
    std::fs::write(&model, model_with(external_w(1024), 1024)).unwrap();
    lower_file(&model, &options(4096)).expect("at the limit");
    assert!(matches!(
        lower_file(&model, &options(4095)),
        Err(CompileError::Limit { .. })
    ));
}

#[test]
fn inline_data_is_checked_against_the_limit_before_it_is_copied() {
    // raw_data and typed fields alike: the declared dims decide, before any copy.
    let raw = TensorProto {
        name: "w".into(),
        data_type: FLOAT,
        dims: vec![4096],
        raw_data: Some(vec![0u8; 4 * 4096].into()),
        ..Default::default()
    };
    let typed = TensorProto {
        raw_data: None,
        float_data: vec![0.0; 4096],
        ..raw.clone()
    };
    let limits = Limits {
        max_tensor_bytes: 1024,
        ..Limits::default()
    };
    for t in [&raw, &typed] {
        let context = ExternalDataContext::none().with_limits(limits);
        match tensor_to_host(t, &context) {
            Err(OnnxTensorError::Limit { source, .. }) => {
                assert_eq!(source.requested, Some(4 * 4096));
            }
            other => panic!("{other:?}"),
        }
        // Without limits (inline bytes the caller already holds), it converts.
        assert!(tensor_to_host(t, &ExternalDataContext::none()).is_ok());
    }
    // Through the importer, under the import's limits: a limit error, not malformed.
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("raw.onnx");
    std::fs::write(&model, model_with(raw, 4096)).unwrap();
    assert!(matches!(
        lower_file(&model, &options(1024)),
        Err(CompileError::Limit { .. })
    ));
}

#[test]
fn external_data_is_bounded_even_without_limits_given() {
    // A context built with a base directory but no limits still applies the defaults
    // to external data: 2 GiB declared against the default 1 GiB.
    let dir = tempfile::tempdir().unwrap();
    sparse(&dir.path().join("w.bin"), 2 << 30);
    let context = ExternalDataContext {
        base_dir: Some(dir.path().to_path_buf()),
        limits: None,
    };
    match tensor_to_host(&external_w(1 << 29), &context) {
        Err(OnnxTensorError::Limit { source, .. }) => {
            assert_eq!(source.limit, Limits::default().max_tensor_bytes);
        }
        other => panic!("{other:?}"),
    }
}
