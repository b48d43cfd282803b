//! What `nnc compile` and `nnc run` tell a user in text (without --json): one placement
//! line per device with the root cause when a device takes nothing, what the
//! compilation cache did, and the small refusals of contradictory options.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nnc_formats::test_support::shared_model;

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata")).join(rel)
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn keygen(dir: &Path) -> PathBuf {
    let key = dir.join("k.key");
    let o = nnc()
        .args(["keygen", "--algorithm", "aes128", "-o"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    key
}

fn compile(source: &Path, out: &Path, key: &Path, extra: &[&str]) -> Output {
    nnc()
        .arg("compile")
        .arg(source)
        .arg("-o")
        .arg(out)
        .arg("--key-file")
        .arg(key)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn a_float_model_on_an_int8_device_says_why_in_one_line() {
    let Some(model) = shared_model("mobilenet_v2.onnx") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let profile = testdata("devices/npu-int8.json");
    let o = compile(
        &model,
        &dir.path().join("m.nnc"),
        &key,
        &["--devices", profile.to_str().unwrap()],
    );
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let npu: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("placement: npu-int8 (npu): "))
        .collect();
    assert_eq!(npu.len(), 1, "{err}");
    assert!(npu[0].contains("no operations"), "{}", npu[0]);
    assert!(npu[0].contains("operand_types"), "{}", npu[0]);
    assert!(
        npu[0].contains("--quantize int8 --calibration DIR"),
        "{}",
        npu[0]
    );
    let cpu: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("placement: cpu (cpu): 66 operations in 1 step"))
        .collect();
    assert_eq!(cpu.len(), 1, "{err}");

    // Strict partitioning gives the same root cause, and a bounded list.
    let o = compile(
        &model,
        &dir.path().join("s.nnc"),
        &key,
        &[
            "--devices",
            profile.to_str().unwrap(),
            "--partition",
            "strict",
        ],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(69), "{err}");
    assert!(
        err.contains("npu-int8 declined 66 of 66 operations"),
        "{err}"
    );
    assert!(err.contains("--quantize int8"), "{err}");
    assert!(err.contains("- and 56 more"), "{err}");
    assert!(
        err.lines().count() < 40,
        "{} lines:\n{err}",
        err.lines().count()
    );
    assert!(!dir.path().join("s.nnc").exists());
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn compile_and_run_say_what_the_cache_did() {
    let Some(model) = shared_model("mobilenet_v2_int8.tflite") else {
        return;
    };
    let input = shared_model("mobilenet_v2_int8.tflite.input.npy").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let cache = dir.path().join("cache");
    let out = dir.path().join("q.nnc");
    let profile = testdata("devices/npu-int8.json");
    let o = compile(
        &model,
        &out,
        &key,
        &[
            "--devices",
            profile.to_str().unwrap(),
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
    );
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("placement: npu-int8 (npu): 67 operations in 1 step")),
        "{err}"
    );
    assert!(
        err.lines().any(|l| l.starts_with("cache: miss in ")),
        "{err}"
    );
    // The cache compile filled serves run, which says so without --json.
    for _ in 0..2 {
        let o = nnc()
            .arg("run")
            .arg(&out)
            .arg("--key-file")
            .arg(&key)
            .arg("--input")
            .arg(&input)
            .arg("--output-dir")
            .arg(dir.path().join("outputs"))
            .arg("--cache-dir")
            .arg(&cache)
            .output()
            .unwrap();
        let (stdout, err) = text(&o);
        assert!(o.status.success(), "{err}");
        assert!(
            stdout.lines().any(|l| l.starts_with("cache: hit (")),
            "{stdout}"
        );
    }
}

#[test]
fn a_cache_no_device_keeps_is_reported_unused() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let cache = dir.path().join("cache");
    let o = compile(
        &testdata("models/tiny_cnn.onnx"),
        &dir.path().join("m.nnc"),
        &key,
        &[
            "--devices",
            testdata("devices/cpu.json").to_str().unwrap(),
            "--cache-dir",
            cache.to_str().unwrap(),
        ],
    );
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("no device this model runs on (cpu) keeps a compilation cache"));
    assert!(
        err.lines().any(|l| l.starts_with("cache: none in ")),
        "{err}"
    );
}

#[test]
fn contradictory_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let o = nnc()
        .arg("compile")
        .arg(testdata("models/tiny_cnn.onnx"))
        .arg("-o")
        .arg(dir.path().join("m.nnc"))
        .args(["--encrypt", "none", "--mode", "gcm"])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--mode gcm has no effect with --encrypt none"),
        "{err}"
    );
    assert!(!dir.path().join("m.nnc").exists());

    // An --output-dir that is a file is named as such before anything runs.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let o = nnc()
        .arg("run")
        .arg(testdata("models/tiny_cnn.onnx"))
        .arg("--output-dir")
        .arg(&file)
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(73), "{err}");
    assert!(err.contains("is a file, not a directory"), "{err}");
}
