//! The transformer models of `testdata/transformers` (torch + Hugging Face exports made by
//! `scripts/gen_transformer_models.py`: BERT with a padding mask, GPT-2 without a cache,
//! ViT and a Whisper encoder, each from the TorchScript exporter at opset 17 and the
//! dynamo exporter at opset 18) through the binary: `nnc compile` with AES-128-CTR and
//! with SM4-CBC, `nnc verify`, `nnc run`, against ONNX Runtime's outputs within 1e-4 of
//! the largest reference magnitude.

use std::path::{Path, PathBuf};
use std::process::Command;

use nnc_formats::npy::read_npy_file;

const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/transformers");

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn check(cmd: &mut Command) -> String {
    let o = cmd.output().expect("nnc runs");
    assert!(
        o.status.success(),
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn numbered(dir: &Path, kind: &str) -> Vec<PathBuf> {
    (0..)
        .map(|i| dir.join(format!("{kind}_{i}.npy")))
        .take_while(|p| p.is_file())
        .collect()
}

fn floats(path: &Path) -> Vec<f32> {
    read_npy_file(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_f32_vec()
        .expect("float32 outputs")
}

fn compile_verify_run(name: &str, algorithm: &str, mode: &str) {
    let case = Path::new(MODELS).join(name);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("weights.key");
    let compiled = dir.path().join("model.nnc");
    check(
        nnc()
            .args(["keygen", "--algorithm", algorithm, "-o"])
            .arg(&key),
    );
    check(
        nnc()
            .arg("compile")
            .arg(case.join("model.onnx"))
            .args(["--encrypt", algorithm, "--mode", mode])
            .arg("--key-file")
            .arg(&key)
            .arg("-o")
            .arg(&compiled),
    );
    check(
        nnc()
            .arg("verify")
            .arg(&compiled)
            .arg("--key-file")
            .arg(&key),
    );
    let outputs = dir.path().join("out");
    check(
        nnc()
            .arg("run")
            .arg(&compiled)
            .arg("--key-file")
            .arg(&key)
            .arg("--input-dir")
            .arg(&case)
            .arg("--output-dir")
            .arg(&outputs),
    );
    let references = numbered(&case, "output");
    assert!(!references.is_empty(), "{name}: no reference outputs");
    for reference in references {
        let expected = floats(&reference);
        let actual = floats(&outputs.join(reference.file_name().expect("file name")));
        assert_eq!(actual.len(), expected.len(), "{name}: output size");
        let largest = expected.iter().fold(0f32, |m, v| m.max(v.abs()));
        let tolerance = 1e-4 * largest;
        for (i, (&a, &e)) in actual.iter().zip(&expected).enumerate() {
            assert!(
                a.is_finite() && (a - e).abs() <= tolerance,
                "{name} ({algorithm}-{mode}) {}: element {i}: {a} vs {e} (tolerance {tolerance})",
                reference.display()
            );
        }
    }
}

macro_rules! transformer_tests {
    ($($test:ident: $name:literal;)*) => {
        $(
            #[test]
            fn $test() {
                compile_verify_run($name, "aes128", "ctr");
                compile_verify_run($name, "sm4", "cbc");
            }
        )*
    };
}

transformer_tests! {
    bert_opset17_matches_onnx_runtime: "bert_opset17";
    bert_dynamo_matches_onnx_runtime: "bert_dynamo";
    gpt2_opset17_matches_onnx_runtime: "gpt2_opset17";
    gpt2_dynamo_matches_onnx_runtime: "gpt2_dynamo";
    vit_opset17_matches_onnx_runtime: "vit_opset17";
    vit_dynamo_matches_onnx_runtime: "vit_dynamo";
    whisper_encoder_opset17_matches_onnx_runtime: "whisper_encoder_opset17";
    whisper_encoder_dynamo_matches_onnx_runtime: "whisper_encoder_dynamo";
}
