//! The `nnc` binary end to end: keys, compile, verify, inspect, dump, exit codes, and
//! what a failed command leaves behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata")).join(rel)
}

fn tiny_cnn() -> PathBuf {
    testdata("models/tiny_cnn.onnx")
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("nnc runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn keygen(dir: &Path, algorithm: &str) -> PathBuf {
    let key = dir.join(format!("{algorithm}.key"));
    let o = run(nnc()
        .args(["keygen", "--algorithm", algorithm, "-o"])
        .arg(&key));
    assert!(o.status.success(), "{}", stderr(&o));
    key
}

#[cfg(unix)]
fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
#[cfg(unix)]
fn keygen_writes_a_private_hex_key_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    for (algorithm, bytes) in [("sm4", 16), ("aes128", 16), ("aes192", 24), ("aes256", 32)] {
        let key = keygen(dir.path(), algorithm);
        assert_eq!(mode_of(&key), 0o600);
        let text = std::fs::read_to_string(&key).unwrap();
        assert_eq!(text.trim().len(), 2 * bytes);
        assert!(text.trim().bytes().all(|b| b.is_ascii_hexdigit()));
    }
    let o = run(nnc()
        .args(["keygen", "--algorithm", "sm4", "-o"])
        .arg(dir.path().join("sm4.key")));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("exists"), "{}", stderr(&o));
}

#[test]
fn compile_verify_inspect_and_dump_a_compiled_model() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "sm4");
    let out = dir.path().join("tiny.nnc");
    let o = run(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "sm4", "--mode", "cbc", "--json", "--key-file"])
        .arg(&key));
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["schema"], "nnc.compile/1");
    assert_eq!(summary["encryption"]["algorithm"], "sm4");
    assert_eq!(summary["encryption"]["mode"], "cbc");
    assert!(summary["weight_fields"].as_u64().unwrap() > 0);

    let o = run(nnc().arg("verify").arg(&out).arg("--key-file").arg(&key));
    assert!(o.status.success(), "{}", stderr(&o));

    let o = run(nnc().arg("inspect").arg(&out).arg("--json"));
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["schema"], "nnc.inspect.compiled/1");
    assert_eq!(report["crypto"]["algorithm"], "sm4");
    assert_eq!(report["verified"], serde_json::Value::Null);
    assert!(
        report["units"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| !u["weights"].is_null())
    );

    let o = run(nnc().arg("inspect").arg(&out).arg("--key-file").arg(&key));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("verified: yes"));

    let o = run(nnc().arg("dump").arg(&out).args(["--format", "text"]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("CONV_2D"));
}

#[test]
fn a_wrong_key_fails_verification_as_wrong_key_or_tampered_file() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "aes128");
    let out = dir.path().join("m.nnc");
    let o = run(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&out)
        .arg("--key-file")
        .arg(&key));
    assert!(o.status.success(), "{}", stderr(&o));
    let other = dir.path().join("other.key");
    assert!(
        run(nnc()
            .args(["keygen", "--algorithm", "aes128", "-o"])
            .arg(&other))
        .status
        .success()
    );
    let o = run(nnc().arg("verify").arg(&out).arg("--key-file").arg(&other));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("wrong key or tampered file"),
        "{}",
        stderr(&o)
    );
    // A flipped byte in the weights: same message.
    let mut bytes = std::fs::read(&out).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0x40;
    std::fs::write(&out, &bytes).unwrap();
    let o = run(nnc().arg("verify").arg(&out).arg("--key-file").arg(&key));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("wrong key or tampered file"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn keys_come_from_the_environment_too() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "aes256");
    let hex = std::fs::read_to_string(&key).unwrap();
    let out = dir.path().join("m.nnc");
    let o = run(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "aes256", "--key-env", "NNC_TEST_KEY"])
        .env("NNC_TEST_KEY", hex.trim()));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(nnc()
        .arg("verify")
        .arg(&out)
        .args(["--key-env", "NNC_TEST_KEY"])
        .env("NNC_TEST_KEY", hex.trim()));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(nnc()
        .arg("verify")
        .arg(&out)
        .args(["--key-env", "NNC_UNSET_VARIABLE"]));
    assert!(stderr(&o).contains("NNC_UNSET_VARIABLE"), "{}", stderr(&o));
}

#[test]
fn bad_keys_are_clear_errors_that_never_echo_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "aes128"); // 16 bytes
    let out = dir.path().join("m.nnc");
    let o = run(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "aes256", "--key-file"])
        .arg(&key));
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("aes256") && err.contains("32") && err.contains("16"),
        "{err}"
    );
    let hex = std::fs::read_to_string(&key).unwrap();
    assert!(
        !err.contains(hex.trim()),
        "the key leaked into an error message"
    );
    assert!(
        !out.exists(),
        "a failed compile left {} behind",
        out.display()
    );
    // Not hex at all.
    let bad = dir.path().join("bad.key");
    std::fs::write(&bad, "zz112233445566778899aabbccddeeff\n").unwrap();
    let o = run(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&out)
        .arg("--key-file")
        .arg(&bad));
    assert!(!o.status.success());
    assert!(!stderr(&o).contains("zz1122"), "{}", stderr(&o));
}

#[test]
#[cfg(unix)]
fn a_key_file_readable_by_others_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "aes128");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = dir.path().join("m.nnc");
    let o = run(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&out)
        .arg("--key-file")
        .arg(&key));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: key file") && stderr(&o).contains("chmod 600"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn compile_without_a_key_explains_the_choice_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.nnc");
    let o = run(nnc().arg("compile").arg(tiny_cnn()).arg("-o").arg(&out));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--encrypt none"), "{}", stderr(&o));
    assert!(!out.exists());
    let o = run(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "none"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(nnc().arg("verify").arg(&out));
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_failed_compile_leaves_no_file_and_exits_69_for_unsupported_models() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.nnc");
    let o = run(nnc()
        .arg("compile")
        .arg(testdata("onnx/unsupported_ops/model.onnx"))
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "none"]));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(stderr(&o).contains("Erf"), "{}", stderr(&o));
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a temporary file was left behind"
    );
    // Malformed input is exit code 65.
    let garbage = dir.path().join("garbage.onnx");
    std::fs::write(&garbage, b"\x08\x07\x12\xff\xff\xff\xff\x0fnot a model").unwrap();
    let o = run(nnc().arg("inspect").arg(&garbage));
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
}

#[test]
fn reproducible_compiles_are_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "sm4");
    let build = |name: &str| {
        let out = dir.path().join(name);
        let o = run(nnc()
            .arg("compile")
            .arg(tiny_cnn())
            .arg("-o")
            .arg(&out)
            .args([
                "--encrypt",
                "sm4",
                "--mode",
                "ofb",
                "--reproducible",
                "--key-file",
            ])
            .arg(&key));
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::read(out).unwrap()
    };
    assert_eq!(build("a.nnc"), build("b.nnc"));
}

#[test]
fn the_dot_output_renders_without_warnings() {
    let Ok(dot) = Command::new("dot").arg("-V").output() else {
        panic!("graphviz `dot` is not installed; run scripts/setup");
    };
    assert!(dot.status.success());
    let o = run(nnc().arg("dump").arg(tiny_cnn()).args(["--format", "dot"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&o.stdout).unwrap();
    let rendered = child.wait_with_output().unwrap();
    assert!(rendered.status.success(), "{}", stderr(&rendered));
    assert!(
        rendered.stderr.is_empty(),
        "dot warned: {}",
        stderr(&rendered)
    );
    let svg = String::from_utf8_lossy(&rendered.stdout);
    assert!(
        svg.contains("<svg") && svg.contains("CONV_2D"),
        "not an SVG of the model"
    );
}

#[test]
fn inspect_json_is_machine_readable() {
    let o = run(nnc().arg("inspect").arg(tiny_cnn()).arg("--json"));
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["schema"], "nnc.inspect.source/1");
    assert_eq!(v["format"], "ONNX");
    assert_eq!(v["inputs"][0]["shape"], serde_json::json!([1, 3, 32, 32]));
    assert!(
        v["source_operators"]["BatchNormalization"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        v["operations"].get("MUL").is_none(),
        "batch norm should be folded"
    );
    assert!(
        v["passes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pass"] == "fold-batch-norm")
    );
}

#[test]
fn a_closed_pipe_is_not_a_crash() {
    let mut child = nnc()
        .arg("dump")
        .arg(tiny_cnn())
        .args(["--format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader goes away at once
    let o = child.wait_with_output().unwrap();
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

#[test]
fn input_shape_flags_are_validated() {
    let o = run(nnc()
        .arg("inspect")
        .arg(tiny_cnn())
        .args(["--input-shape", "nosuch=1x3x32x32"]));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("nosuch"), "{}", stderr(&o));
    let o = run(nnc()
        .arg("inspect")
        .arg(tiny_cnn())
        .args(["--input-shape", "input=1xbadx2"]));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("'bad'"), "{}", stderr(&o));
}

#[test]
fn a_partitioned_model_compiles_explains_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path(), "aes128");
    let out = dir.path().join("p.nnc");
    let profile = testdata("devices/dsp-float.json");
    let o = run(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&out)
        .arg("--devices")
        .arg(&profile)
        .args(["--json", "--key-file"])
        .arg(&key));
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        summary["plan"]["steps"].as_array().unwrap().len() >= 2,
        "{}",
        summary["plan"]
    );

    let o = run(nnc()
        .arg("inspect")
        .arg(&out)
        .args(["--partition", "--json"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["schema"], "nnc.inspect.partition/1");
    let steps = report["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["device"] == "dsp-float"));
    assert!(
        report["placements"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| !p["reason"].as_str().unwrap().is_empty())
    );

    let outputs = dir.path().join("out");
    let o = run(nnc()
        .arg("run")
        .arg(&out)
        .arg("--key-file")
        .arg(&key)
        .arg("--input")
        .arg(testdata("models/tiny_cnn.input.npy"))
        .arg("--output-dir")
        .arg(&outputs)
        .arg("--json"));
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let devices: Vec<&str> = r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert!(
        devices.contains(&"dsp-float") && devices.len() >= 2,
        "{devices:?}"
    );
    let o = run(nnc()
        .arg("compare")
        .arg(outputs.join("output_0.npy"))
        .arg(testdata("models/tiny_cnn.output.npy"))
        .args(["--atol", "1e-5", "--rtol", "1e-4"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));

    // The dot dump draws the steps as clusters and renders.
    let o = run(nnc().arg("dump").arg(&out).args(["--format", "dot"]));
    let dot = String::from_utf8_lossy(&o.stdout);
    assert!(
        dot.contains("subgraph cluster_0") && dot.contains("dsp-float"),
        "{dot}"
    );

    // Strict partitioning onto a device that supports nothing here: exit 69, each
    // operation listed with its rule.
    let o = run(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(dir.path().join("strict.nnc"))
        .arg("--devices")
        .arg(testdata("devices/npu-int8.json"))
        .args(["--partition", "strict", "--key-file"])
        .arg(&key));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("npu-int8") && stderr(&o).contains("operand_types"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.path().join("strict.nnc").exists());

    // Refusing plaintext fallback lists the CPU-placed operations with encrypted weights.
    let o = run(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(dir.path().join("np.nnc"))
        .arg("--devices")
        .arg(&profile)
        .args([
            "--encrypt",
            "sm4",
            "--mode",
            "cbc",
            "--no-plaintext-fallback",
            "--key-file",
        ])
        .arg(keygen(dir.path(), "sm4")));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("host memory") || stderr(&o).contains("plaintext"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn devices_lists_profiles_and_names_malformed_fields() {
    let o = run(nnc()
        .arg("devices")
        .arg("--devices")
        .arg(testdata("devices/npu-int8.json")));
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("cpu (cpu") && text.contains("npu-int8 (npu"),
        "{text}"
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"name": "x", "type": "npu", "version": "1", "performance": {"TENSOR_FLOAT32": {"exec_time": -1, "power_usage": 1}}}"#).unwrap();
    let o = run(nnc().arg("devices").arg("--devices").arg(&bad));
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(stderr(&o).contains("exec_time"), "{}", stderr(&o));
}
