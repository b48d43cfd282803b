//! What a new user meets in the first hour (issue 35): a model with dynamic input
//! dimensions (PaddleOCR's text detector, `x` [-1, 3, -1, -1]) is inspected, and its
//! compile error gives a ready `--input-shape` line; a partitioned Graphviz dump stays
//! readable; inspect shows quantization parameters; verify names what authenticates a
//! GCM file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use nnc_formats::test_support::{external_model, shared_model};

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("nnc runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(rel)
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

fn detector() -> Option<PathBuf> {
    external_model("rapidocr-onnxruntime", "ch_PP-OCRv4_det_infer.onnx")
}

#[test]
fn inspect_shows_the_paddleocr_detector_and_the_shape_it_needs() {
    let Some(model) = detector() else { return };
    let o = run(nnc().arg("inspect").arg(&model));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(
            "  x float32 [p2o.DynamicDimension.0, 3, p2o.DynamicDimension.1, \
             p2o.DynamicDimension.2]\n"
        ),
        "{text}"
    );
    assert!(text.contains("inputs that need --input-shape:"), "{text}");
    assert!(
        text.contains("x (dimensions 0, 2, 3 unknown): e.g. --input-shape x=1,3,640,640"),
        "{text}"
    );

    let o = run(nnc().arg("inspect").arg(&model).arg("--json"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["lowered"], false);
    let x = &v["inputs"][0];
    assert_eq!(x["name"], "x");
    assert_eq!(x["dtype"], "float32");
    assert_eq!(x["shape"], serde_json::json!([null, 3, null, null]));
    assert_eq!(
        x["declared_shape"],
        serde_json::json!([
            "p2o.DynamicDimension.0",
            3,
            "p2o.DynamicDimension.1",
            "p2o.DynamicDimension.2"
        ])
    );
    let hint = &v["needs_input_shape"][0];
    assert_eq!(hint["name"], "x");
    assert_eq!(hint["flag"], "--input-shape x=1,3,640,640");
    assert_eq!(
        hint["fills"],
        serde_json::json!(["batch", null, "image-size", "image-size"])
    );

    // With the shape, inspect lowers it and shows both the shape and the declaration.
    let o = run(nnc()
        .arg("inspect")
        .arg(&model)
        .args(["--input-shape", "x=1,3,320,320"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("  x float32 [1, 3, 320, 320] (declared [p2o.DynamicDimension.0, 3,"),
        "{text}"
    );
    assert!(text.contains("optimized operations ("), "{text}");
}

#[test]
fn compiling_the_paddleocr_detector_without_a_shape_says_which_to_give() {
    let Some(model) = detector() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("det.nnc");
    let o = run(nnc()
        .arg("compile")
        .arg(&model)
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "none"]));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("--input-shape x="), "{err}");
    // Nothing is missing from nnc, so the message leads with what the user must give.
    assert!(
        err.contains("the ONNX model needs its input dimensions at compile time"),
        "{err}"
    );
    assert!(!err.contains("that nnc cannot lower"), "{err}");
    assert!(
        err.contains("input 'x' [p2o.DynamicDimension.0, 3,"),
        "{err}"
    );
    assert!(err.contains("unknown dimensions 0, 2, 3"), "{err}");
    assert!(err.contains("placeholder"), "{err}");
    assert!(!out.exists());

    // The line given is ready to paste.
    let line = err
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("--input-shape x="))
        .expect("a line with the flag alone");
    let o = run(nnc()
        .arg("compile")
        .arg(&model)
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "none"])
        .args(line.split_once(' ').map(|(a, b)| [a, b]).unwrap()));
    assert_eq!(o.status.code(), Some(0), "{line}: {}", stderr(&o));
    assert!(out.exists());
}

/// Resize of `x` [batch, 3, height, width] by 2 (constant scales), written to
/// `dir/resize.onnx`: its output size needs the input's dimensions.
fn dynamic_resize(dir: &Path) -> PathBuf {
    use nnc_compiler::onnx::proto::{
        GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
        TypeProto, ValueInfoProto, encode_model, tensor_shape_proto, type_proto,
    };
    use tensor_shape_proto::dimension::Value as D;
    let info = |name: &str, dims: Vec<D>| ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: 1,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .into_iter()
                        .map(|d| tensor_shape_proto::Dimension {
                            value: Some(d),
                            denotation: String::new(),
                        })
                        .collect(),
                }),
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    };
    let named = |n: &str| D::DimParam(n.into());
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                op_type: "Resize".into(),
                name: "upsample".into(),
                input: vec!["x".into(), String::new(), "scales".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            name: "g".into(),
            initializer: vec![TensorProto {
                name: "scales".into(),
                dims: vec![4],
                data_type: 1,
                float_data: vec![1.0, 1.0, 2.0, 2.0],
                ..Default::default()
            }],
            input: vec![info(
                "x",
                vec![
                    named("batch"),
                    D::DimValue(3),
                    named("height"),
                    named("width"),
                ],
            )],
            output: vec![info(
                "y",
                vec![named("batch"), D::DimValue(3), named("h2"), named("w2")],
            )],
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.join("resize.onnx");
    std::fs::write(&path, encode_model(&model)).unwrap();
    path
}

#[test]
fn a_model_needing_input_dimensions_is_inspected_dumped_and_explained() {
    let dir = tempfile::tempdir().unwrap();
    let model = dynamic_resize(dir.path());
    let out = dir.path().join("m.nnc");

    let o = run(nnc()
        .arg("compile")
        .arg(&model)
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "none"]));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("input 'x' [batch, 3, height, width] has unknown dimensions 0, 2, 3"),
        "{err}"
    );
    assert!(
        err.contains("\n      --input-shape x=1,3,640,640\n"),
        "{err}"
    );
    assert!(err.contains("dimension 0 = 1: the batch size"), "{err}");
    assert!(
        err.contains("dimensions 2, 3 = 640: a placeholder for the image height and width"),
        "{err}"
    );

    // inspect: exit 0, the declared names, and which input needs --input-shape.
    let o = run(nnc().arg("inspect").arg(&model));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("  x float32 [batch, 3, height, width]\n"),
        "{text}"
    );
    assert!(text.contains("  y float32 [batch, 3, h2, w2]\n"), "{text}");
    assert!(
        text.contains(
            "not lowered: 1 node needs input dimensions at compile time (Resize 'upsample')"
        ),
        "{text}"
    );
    assert!(text.contains("--input-shape x=1,3,640,640"), "{text}");

    // dump draws it for the suggested shape, and says so.
    let o = run(nnc().arg("dump").arg(&model));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("1x3x640x640"), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("warning: input 'x' has unknown dimensions; dumped as if given --input-shape x=1,3,640,640"),
        "{}",
        stderr(&o)
    );

    // With the shape given, everything lowers and no hint is printed.
    let o = run(nnc()
        .arg("inspect")
        .arg(&model)
        .args(["--input-shape", "x=2,3,8,8", "--json"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["lowered"], true);
    assert!(v.get("needs_input_shape").is_none(), "{v}");
    assert_eq!(v["outputs"][0]["shape"], serde_json::json!([2, 3, 16, 16]));
    assert_eq!(
        v["inputs"][0]["declared_shape"],
        serde_json::json!(["batch", 3, "height", "width"])
    );
}

#[test]
fn an_operator_nnc_lacks_still_fails_inspect_with_69() {
    // Only a want of input dimensions is shown as a model to fix; a missing operator
    // stays an error.
    let o = run(nnc()
        .arg("inspect")
        .arg(testdata("onnx/unsupported_ops/model.onnx")));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(!stderr(&o).contains("--input-shape"), "{}", stderr(&o));
}

/// The size Graphviz gives an SVG, in points.
fn svg_size(dot_source: &[u8]) -> (f64, f64) {
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("graphviz `dot` is installed (scripts/setup)");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(dot_source).unwrap();
    let rendered = child.wait_with_output().unwrap();
    assert!(rendered.status.success(), "{}", stderr(&rendered));
    let svg = String::from_utf8_lossy(&rendered.stdout);
    let attr = |name: &str| -> f64 {
        let start = svg.find("<svg width=\"").expect("an svg element");
        let rest = &svg[start..];
        let at = rest.find(&format!("{name}=\"")).expect(name) + name.len() + 2;
        let value = &rest[at..];
        let end = value.find("pt\"").expect("a size in points");
        value[..end].parse().unwrap()
    };
    (attr("width"), attr("height"))
}

fn partitioned(dir: &Path, model: &Path) -> PathBuf {
    let out = dir.join("p.nnc");
    let o = run(nnc()
        .arg("compile")
        .arg(model)
        .arg("-o")
        .arg(&out)
        .arg("--devices")
        .arg(testdata("devices/dsp-float.json"))
        .arg("--devices")
        .arg(testdata("devices/cpu.json"))
        .args(["--encrypt", "none", "--json"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let summary = json(&o);
    assert!(
        summary["plan"]["steps"].as_array().unwrap().len() >= 2,
        "{}",
        summary["plan"]
    );
    out
}

#[test]
fn a_partitioned_dot_dump_has_a_cluster_per_step_and_runs_top_to_bottom() {
    let dir = tempfile::tempdir().unwrap();
    let compiled = partitioned(dir.path(), &testdata("models/tiny_cnn.onnx"));
    let o = run(nnc().arg("dump").arg(&compiled).args(["--format", "dot"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let dot = stdout(&o);
    assert!(dot.contains("rankdir=TB;"), "{dot}");
    assert!(dot.contains("subgraph cluster_0 {"), "{dot}");
    assert!(dot.contains("subgraph cluster_1 {"), "{dot}");
    // Scalar parameters are in the operation's label, not nodes of their own.
    assert!(dot.contains("stride_w="), "{dot}");
    assert!(!dot.contains("\\nCOPY\\nI32"), "{dot}");
    assert!(
        !dot.lines()
            .any(|l| l.contains("shape=ellipse") && l.contains("\\n= ")),
        "{dot}"
    );
    // Operands written in a step are drawn inside its cluster.
    let cluster = &dot[dot.find("subgraph cluster_0 {").unwrap()..];
    let cluster = &cluster[..cluster.find("\n  }\n").unwrap()];
    assert!(cluster.contains("shape=ellipse"), "{cluster}");
    let (width, height) = svg_size(dot.as_bytes());
    assert!(height > width, "{width} x {height}");
}

#[test]
fn a_partitioned_mobilenet_v2_renders_narrow() {
    let Some(model) = shared_model("mobilenet_v2.onnx") else {
        return;
    };
    if !model.is_file() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let compiled = partitioned(dir.path(), &model);
    let o = run(nnc().arg("dump").arg(&compiled).args(["--format", "dot"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let (width, height) = svg_size(&o.stdout);
    // 1,500 points is 2,000 pixels at 96 dpi (it was 54,313 points wide).
    assert!(width < 1500.0, "{width} x {height}");
    assert!(height > 10.0 * width, "{width} x {height}");
}

#[test]
fn inspect_shows_the_quantization_of_int8_inputs_and_outputs() {
    let model = testdata("tflite/add_int8/model.tflite");
    let o = run(nnc().arg("inspect").arg(&model).arg("--json"));
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    for e in v["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .chain(v["outputs"].as_array().unwrap())
    {
        let q = &e["quantization"];
        assert!(q["scale"].as_f64().is_some_and(|s| s > 0.0), "{e}");
        assert!(q["zero_point"].is_i64(), "{e}");
    }
    let o = run(nnc().arg("inspect").arg(&model));
    let text = stdout(&o);
    let scale = v["inputs"][0]["quantization"]["scale"].as_f64().unwrap() as f32;
    let zp = &v["inputs"][0]["quantization"]["zero_point"];
    assert!(
        text.contains(&format!(", scale {scale}, zero point {zp})")),
        "{text}"
    );
    // A float model has none.
    let o = run(nnc()
        .arg("inspect")
        .arg(testdata("models/tiny_cnn.onnx"))
        .arg("--json"));
    assert!(json(&o)["inputs"][0].get("quantization").is_none());

    // MobileNetV2 int8: input scale 1/127.5, zero point -1.
    let Some(model) = shared_model("mobilenet_v2_int8.tflite") else {
        return;
    };
    if !model.is_file() {
        return;
    }
    let o = run(nnc().arg("inspect").arg(&model));
    assert!(
        stdout(&o).contains("scale 0.007843133, zero point -1)"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn verify_names_gcm_as_what_authenticates_the_weights() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k.key");
    let o = run(nnc()
        .args(["keygen", "--algorithm", "aes128", "-o"])
        .arg(&key));
    assert!(o.status.success(), "{}", stderr(&o));
    let compile = |mode: &str| {
        let out = dir.path().join(format!("{mode}.nnc"));
        let o = run(nnc()
            .arg("compile")
            .arg(testdata("models/tiny_cnn.onnx"))
            .arg("-o")
            .arg(&out)
            .args(["--encrypt", "aes128", "--mode", mode, "--key-file"])
            .arg(&key));
        assert!(o.status.success(), "{}", stderr(&o));
        out
    };
    let gcm = compile("gcm");
    let o = run(nnc().arg("verify").arg(&gcm).arg("--key-file").arg(&key));
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(
            "weights encrypted with AES-128-GCM; every byte authenticated with the key \
             (AES-128-GCM tags for the weight fields, HMAC-SHA-256 for the metadata)"
        ),
        "{text}"
    );
    let o = run(nnc()
        .arg("verify")
        .arg(&gcm)
        .arg("--key-file")
        .arg(&key)
        .arg("--json"));
    let v = json(&o);
    assert_eq!(v["cipher"], "AES-128-GCM");
    assert_eq!(v["integrity"]["weights"], "AES-128-GCM");
    assert_eq!(v["integrity"]["metadata"], "HMAC-SHA-256");

    // CTR is encrypt-then-MAC: HMAC-SHA-256 covers the weights too.
    let ctr = compile("ctr");
    let o = run(nnc()
        .arg("verify")
        .arg(&ctr)
        .arg("--key-file")
        .arg(&key)
        .arg("--json"));
    let v = json(&o);
    assert_eq!(v["cipher"], "AES-128-CTR");
    assert_eq!(v["integrity"]["weights"], "HMAC-SHA-256");
    let o = run(nnc().arg("verify").arg(&ctr).arg("--key-file").arg(&key));
    assert!(
        stdout(&o).contains("weights encrypted with AES-128-CTR; every byte authenticated with the key (HMAC-SHA-256)"),
        "{}",
        stdout(&o)
    );
}
