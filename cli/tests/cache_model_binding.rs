//! `nnc run --cache-dir DIR --token T` with two models of the same architecture under one
//! key (issue 29, item 8): the second model is a miss, never a hit with the first's
//! weights. And a corrupt index is reported in `cache_warnings` (item 12); the lock file
//! is private.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const TOKEN: &str = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";

/// `x + c` four times over, with the constant `c` (0.5 in the generator) replaced by
/// `value`: same architecture, other weights.
fn chain_with_constant(value: f32) -> Vec<u8> {
    use nnc_compiler::synthetic::{ChainOp, onnx_chain};
    let mut bytes = onnx_chain(ChainOp::Add, 4);
    let half = 0.5f32.to_le_bytes();
    let at: Vec<usize> = bytes
        .windows(4)
        .enumerate()
        .filter(|(_, w)| *w == half)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "the constant must appear once to be replaced");
    bytes[at[0]..at[0] + 4].copy_from_slice(&value.to_le_bytes());
    bytes
}

struct Setup {
    dir: tempfile::TempDir,
    key: PathBuf,
    input: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k.key");
        let o = nnc()
            .args(["keygen", "--algorithm", "aes128", "-o"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let input = dir.path().join("x.npy");
        let x = nnc_formats::tensor::HostTensor::from_f32(vec![1, 4, 2, 2], &[0.25; 16]).unwrap();
        nnc_formats::npy::write_npy_file(&input, &x).unwrap();
        Setup { dir, key, input }
    }

    /// Compiles `onnx` with the key (CTR, the default) to `name`.nnc.
    fn compile(&self, name: &str, onnx: Vec<u8>) -> PathBuf {
        let source = self.dir.path().join(format!("{name}.onnx"));
        std::fs::write(&source, onnx).unwrap();
        let model = self.dir.path().join(format!("{name}.nnc"));
        let o = nnc()
            .arg("compile")
            .arg(&source)
            .arg("-o")
            .arg(&model)
            .arg("--key-file")
            .arg(&self.key)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        model
    }

    /// Runs `model` (with the cache and the token when `cache` is given); returns the
    /// cache outcome, the cache warnings and the output file's bytes.
    fn run(&self, model: &Path, cache: Option<&Path>, out: &str) -> (String, Vec<String>, Vec<u8>) {
        let outputs = self.dir.path().join(out);
        let mut cmd = nnc();
        cmd.arg("run")
            .arg(model)
            .arg("--key-file")
            .arg(&self.key)
            .arg("--input")
            .arg(&self.input)
            .arg("--output-dir")
            .arg(&outputs)
            .arg("--json");
        if let Some(c) = cache {
            cmd.args(["--token", TOKEN, "--cache-dir"]).arg(c);
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let warnings = v["cache_warnings"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|w| w.as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default();
        let output = std::fs::read(outputs.join("output_0.npy")).unwrap();
        (
            v["cache"].as_str().unwrap_or("none").to_string(),
            warnings,
            output,
        )
    }
}

#[test]
fn a_second_model_run_with_the_first_models_token_is_a_miss() {
    let s = Setup::new();
    let first = s.compile("first", chain_with_constant(0.5));
    let second = s.compile("second", chain_with_constant(0.75));
    let (_, _, first_expected) = s.run(&first, None, "first-plain");
    let (_, _, second_expected) = s.run(&second, None, "second-plain");
    assert_ne!(first_expected, second_expected);

    let cache = s.dir.path().join("cache");
    assert_eq!(s.run(&first, Some(&cache), "a1").0, "miss");
    let (outcome, _, output) = s.run(&first, Some(&cache), "a2");
    assert_eq!((outcome.as_str(), &output), ("hit", &first_expected));

    let (outcome, warnings, output) = s.run(&second, Some(&cache), "b1");
    assert_eq!(outcome, "miss", "{warnings:?}");
    assert!(
        warnings.iter().any(|w| w.contains("another model file")),
        "{warnings:?}"
    );
    assert_eq!(
        output, second_expected,
        "computed with the first model's weights"
    );
    let (outcome, _, output) = s.run(&second, Some(&cache), "b2");
    assert_eq!((outcome.as_str(), &output), ("hit", &second_expected));

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(cache.join("lock"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[test]
fn a_corrupt_index_is_reported_in_the_cache_warnings() {
    let s = Setup::new();
    let model = s.compile("m", chain_with_constant(0.5));
    let cache = s.dir.path().join("cache");
    let (_, _, expected) = s.run(&model, Some(&cache), "first");
    std::fs::write(cache.join("index.json"), b"\x00garbage").unwrap();
    let (outcome, warnings, output) = s.run(&model, Some(&cache), "second");
    assert_eq!(outcome, "miss");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("is corrupt") && w.contains("dropping the 1 cached entry")),
        "{warnings:?}"
    );
    assert_eq!(output, expected);
    let (outcome, warnings, _) = s.run(&model, Some(&cache), "third");
    assert_eq!((outcome.as_str(), warnings.len()), ("hit", 0));
}
