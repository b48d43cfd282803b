//! `nnc diff` (issue 34): a model against its re-export with one Conv's filter changed
//! names exactly that operation and that field, for source models and for compiled ones
//! opened with their key; identical models are identical; structure changes show up.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nnc_compiler::onnx::proto::{ModelProto, decode_model};
use prost::Message;

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn tiny_cnn() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/models/tiny_cnn.onnx"
    ))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn load(path: &Path) -> ModelProto {
    decode_model(std::fs::read(path).unwrap().into()).unwrap()
}

/// tiny_cnn with element `at` of the filter of Conv node `conv` scaled by 1.5. Returns
/// the node's name.
fn re_export(out: &Path, conv: usize, at: usize) -> String {
    let mut m = load(&tiny_cnn());
    let graph = m.graph.as_mut().unwrap();
    let node = graph
        .node
        .iter()
        .filter(|n| n.op_type == "Conv")
        .nth(conv)
        .unwrap()
        .clone();
    let weight = &node.input[1];
    let t = graph
        .initializer
        .iter_mut()
        .find(|t| &t.name == weight)
        .unwrap();
    match &t.raw_data {
        Some(raw) => {
            let mut raw = raw.to_vec();
            let v = f32::from_le_bytes(raw[at * 4..at * 4 + 4].try_into().unwrap());
            raw[at * 4..at * 4 + 4].copy_from_slice(&(v * 1.5 + 0.25).to_le_bytes());
            t.raw_data = Some(raw.into());
        }
        None => t.float_data[at] = t.float_data[at] * 1.5 + 0.25,
    }
    std::fs::write(out, m.encode_to_vec()).unwrap();
    node.name
}

fn diff(a: &Path, b: &Path, extra: &[&str]) -> (Output, serde_json::Value) {
    let o = nnc()
        .arg("diff")
        .arg(a)
        .arg(b)
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    (o, v)
}

#[test]
fn one_changed_conv_is_named_with_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let changed = d.join("changed.onnx");
    let name = re_export(&changed, 1, 3);

    // Identical models: exit 0, nothing listed.
    let (o, v) = diff(&tiny_cnn(), &tiny_cnn(), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(v["identical"], true);

    let check = |v: &serde_json::Value, what: &str| {
        assert_eq!(v["identical"], false, "{what}");
        assert_eq!(v["added"].as_array().unwrap().len(), 0, "{what}: {v}");
        assert_eq!(v["removed"].as_array().unwrap().len(), 0, "{what}: {v}");
        let changed = v["changed"].as_array().unwrap();
        assert_eq!(changed.len(), 1, "{what}: {v}");
        assert_eq!(changed[0]["name"], name.as_str(), "{what}: {v}");
        let changes = changed[0]["changes"].as_array().unwrap();
        assert_eq!(changes.len(), 1, "{what}: {v}");
        assert_eq!(changes[0]["field"], "input 1 (filter)", "{what}: {v}");
        assert_eq!(changes[0]["elements_changed"], 1, "{what}: {v}");
        assert!(changes[0]["max_abs_diff"].as_f64().unwrap() > 0.0, "{what}");
    };
    // Source models: weights are plaintext.
    let (o, v) = diff(&tiny_cnn(), &changed, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    check(&v, "source");

    // Compiled models, opened with their key.
    let key = d.join("k");
    assert!(
        nnc()
            .args(["keygen", "--algorithm", "aes128", "-o"])
            .arg(&key)
            .status()
            .unwrap()
            .success()
    );
    let compile = |src: &Path, out: &Path| {
        let o = nnc()
            .arg("compile")
            .arg(src)
            .arg("-o")
            .arg(out)
            .arg("--key-file")
            .arg(&key)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    };
    let (ca, cb) = (d.join("a.nnc"), d.join("b.nnc"));
    compile(&tiny_cnn(), &ca);
    compile(&changed, &cb);
    let (o, v) = diff(&ca, &cb, &["--key-file", key.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    check(&v, "compiled");
    // Without the key the weights cannot be compared, and it says so.
    let (_, v) = diff(&ca, &cb, &[]);
    assert_eq!(v["weights_compared"], false);

    // The Graphviz form colours the changed operation.
    let o = nnc()
        .arg("diff")
        .arg(tiny_cnn())
        .arg(&changed)
        .args(["--format", "dot"])
        .output()
        .unwrap();
    let dot = String::from_utf8_lossy(&o.stdout);
    assert_eq!(dot.matches("#f5a623").count(), 1, "{dot}");
}
