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
        let lines: Vec<&str> = text.lines().collect();
        // The cipher the key was made for, then the key in hex.
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0], format!("# nnc key: {algorithm}"));
        assert_eq!(lines[1].len(), 2 * bytes);
        assert!(lines[1].bytes().all(|b| b.is_ascii_hexdigit()));
    }
    let o = run(nnc()
        .args(["keygen", "--algorithm", "sm4", "-o"])
        .arg(dir.path().join("sm4.key")));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("exists"), "{}", stderr(&o));
    // The spelling with a hyphen names the same cipher, and the key file records the
    // canonical name.
    let key = keygen(dir.path(), "aes-256");
    let text = std::fs::read_to_string(&key).unwrap();
    assert!(text.starts_with("# nnc key: aes256\n"), "{text}");
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
    assert_eq!(o.status.code(), Some(3), "integrity failures exit 3");
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
    let made = keygen(dir.path(), "aes128"); // 16 bytes
    let text = std::fs::read_to_string(&made).unwrap();
    let hex = text.lines().last().unwrap();
    let out = dir.path().join("m.nnc");
    // The key file says it is an AES-128 key: another cipher is refused by name.
    let o = run(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "sm4", "--key-file"])
        .arg(&made));
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("the key was made for aes128"), "{err}");
    assert!(!err.contains(hex), "the key leaked into an error message");
    // A bare hex key (made elsewhere) of the wrong length for the cipher.
    let key = dir.path().join("bare.key");
    std::fs::write(&key, format!("{hex}\n")).unwrap();
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
    assert!(!err.contains(hex), "the key leaked into an error message");
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
    assert!(stderr(&o).contains("Det"), "{}", stderr(&o));
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

#[test]
fn devices_json_reports_capabilities_the_same_at_every_start() {
    let ask = || {
        let o = run(nnc()
            .args(["devices", "--json", "--devices"])
            .arg(testdata("devices/npu-int8.json")));
        assert!(o.status.success(), "{}", stderr(&o));
        o.stdout
    };
    let first = ask();
    assert_eq!(first, ask(), "two processes give the same answer");
    let r: serde_json::Value = serde_json::from_slice(&first).unwrap();
    let devices = r["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    for d in devices {
        let caps = &d["capabilities"];
        let perf = caps["operand_performance"].as_array().unwrap();
        // Every operand type but SUBGRAPH and the OEM types, in code order.
        let codes: Vec<i64> = perf.iter().map(|p| p["code"].as_i64().unwrap()).collect();
        assert_eq!(codes, (0..=14).collect::<Vec<i64>>(), "{caps}");
        assert!(perf.iter().all(|p| p["exec_time"].as_f64().unwrap() > 0.0));
        for field in [
            "type",
            "version",
            "extensions",
            "cache_files",
            "if_performance",
        ] {
            assert!(!caps[field].is_null(), "{field} missing: {caps}");
        }
    }
    assert_eq!(
        devices[0]["capabilities"]["extensions"][0]["name"],
        "org.nnc.core"
    );
    let kernels = &r["host_kernels"];
    assert!(
        ["avx512", "avx2+fma", "portable"].contains(&kernels["float"].as_str().unwrap()),
        "{kernels}"
    );
    assert!(kernels["cpu_features"]["avx2"].is_boolean());
}

#[test]
fn bench_burst_times_both_paths() {
    let o = run(nnc()
        .arg("bench")
        .arg(tiny_cnn())
        .args(["--runs", "20", "--burst", "--json"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for path in [&r, &r["burst"]] {
        let median = path["median_ms"].as_f64().unwrap();
        let overhead = path["overhead_median_ms"].as_f64().unwrap();
        assert!(median > 0.0 && (0.0..=median).contains(&overhead), "{r}");
    }
    assert!(r["arena_bytes"].as_u64().unwrap() > 0, "{r}");
    assert!(r["kernels"]["int8"].is_string(), "{r}");
    let text = run(nnc()
        .arg("bench")
        .arg(tiny_cnn())
        .args(["--runs", "5", "--burst"]));
    let printed = String::from_utf8_lossy(&text.stdout);
    assert!(
        printed.contains("plain: median") && printed.contains("burst: median"),
        "{printed}"
    );
}

/// `nnc bench --profile` times every operation: the JSON lists each one in graph order
/// with its type and median time, the text shows them by time and per type; a model with
/// control flow (run with shapes known only at run time) is profiled too.
#[test]
fn bench_profile_times_every_operation() {
    let o = run(nnc()
        .arg("bench")
        .arg(tiny_cnn())
        .args(["--runs", "5", "--profile", "--json"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ops = r["operations"].as_array().expect("operations");
    let inspect = run(nnc().arg("inspect").arg(tiny_cnn()).arg("--json"));
    let summary: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    // The optimized graph's operations, as `inspect` counts them.
    let declared = summary["operation_count"].as_u64();
    assert!(
        !ops.is_empty() && Some(ops.len() as u64) == declared,
        "{r}\n{summary}"
    );
    for (i, op) in ops.iter().enumerate() {
        assert_eq!(op["index"], i, "{op}");
        assert!(op["type"].as_str().is_some_and(|t| !t.is_empty()), "{op}");
        assert!(op["median_ms"].as_f64().is_some_and(|t| t >= 0.0), "{op}");
        // An operation the plan elides takes no time.
        let elided = op["elided"].as_bool().expect("elided");
        assert!(!elided || op["median_ms"].as_f64() == Some(0.0), "{op}");
    }
    assert!(
        ops.iter().any(|op| op["median_ms"].as_f64() > Some(0.0)),
        "no operation took any time: {r}"
    );
    // Without --profile, no profile.
    let plain = run(nnc()
        .arg("bench")
        .arg(tiny_cnn())
        .args(["--runs", "2", "--json"]));
    let plain: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(plain.get("operations").is_none(), "{plain}");

    let model = testdata("onnx/if_branches_differ_in_shape");
    let o = run(nnc()
        .arg("bench")
        .arg(model.join("model.onnx"))
        .arg("--input")
        .arg(model.join("input_0.npy"))
        .arg("--input")
        .arg(model.join("input_1.npy"))
        .args(["--runs", "3", "--profile"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("operations by median time") && text.contains("by operation type"),
        "{text}"
    );
    assert!(text.contains("IF") && text.contains("dynamic"), "{text}");
}

#[test]
fn bench_reports_the_float_math_it_ran_with() {
    for math in ["strict", "fast"] {
        let o = run(nnc().arg("bench").arg(tiny_cnn()).args([
            "--runs",
            "3",
            "--json",
            "--float-math",
            math,
        ]));
        assert!(o.status.success(), "{}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(r["float_math"], math, "{r}");
    }
    let o = run(nnc()
        .arg("bench")
        .arg(tiny_cnn())
        .args(["--float-math", "sloppy"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// `nnc compile --relax-float32` stores the NN API's relaxed-computation flag: the summary
/// and the dump say so, and the runtime runs such a model with fast float math without
/// being asked (which `nnc bench --json` reports); without the flag, strict.
#[test]
fn relax_float32_is_stored_and_makes_the_runtime_fast() {
    let dir = tempfile::tempdir().unwrap();
    for relax in [false, true] {
        let out = dir.path().join(format!("relax-{relax}.nnc"));
        let mut cmd = nnc();
        cmd.arg("compile")
            .arg(tiny_cnn())
            .arg("-o")
            .arg(&out)
            .args(["--encrypt", "none", "--json"]);
        if relax {
            cmd.arg("--relax-float32");
        }
        let o = run(&mut cmd);
        assert!(o.status.success(), "{}", stderr(&o));
        let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(summary["relax_float32"], relax, "{summary}");
        let o = run(nnc().arg("dump").arg(&out).args(["--format", "json"]));
        assert!(o.status.success(), "{}", stderr(&o));
        let dump: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            dump["relax_computation_float32_to_float16"], relax,
            "{dump}"
        );
        let o = run(nnc().arg("bench").arg(&out).args(["--runs", "2", "--json"]));
        assert!(o.status.success(), "{}", stderr(&o));
        let bench: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let expected = if relax { "fast" } else { "strict" };
        assert_eq!(bench["float_math"], expected, "{bench}");
    }
}

// ---- compile-time input binding -------------------------------------------------------

/// Resize(X [1,1,2,2], scales) with `scales` a graph input, written to `dir/model.onnx`,
/// with X = [[1,2],[3,4]] and scales = [1,1,2,3] beside it as .npy files.
fn resize_with_runtime_scales(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use nnc_compiler::onnx::proto::{
        GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto,
        ValueInfoProto, encode_model, tensor_shape_proto, type_proto,
    };
    use nnc_formats::tensor::{DataType, HostTensor};
    let info = |name: &str, dims: &[i64]| ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: 1,
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
    };
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 19,
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                op_type: "Resize".into(),
                name: "resize".into(),
                input: vec!["X".into(), String::new(), "scales".into()],
                output: vec!["Y".into()],
                ..Default::default()
            }],
            name: "g".into(),
            input: vec![info("X", &[1, 1, 2, 2]), info("scales", &[4])],
            output: vec![info("Y", &[1, 1, 4, 6])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.join("model.onnx");
    std::fs::write(&path, encode_model(&model)).unwrap();
    let f32s = |shape: Vec<usize>, v: &[f32]| HostTensor {
        dtype: DataType::F32,
        shape,
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    let x = dir.join("x.npy");
    nnc_formats::npy::write_npy_file(&x, &f32s(vec![1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0])).unwrap();
    let scales = dir.join("scales.npy");
    nnc_formats::npy::write_npy_file(&scales, &f32s(vec![4], &[1.0, 1.0, 2.0, 3.0])).unwrap();
    (path, x, scales)
}

/// Nearest resize of [[1,2],[3,4]] by (2, 3).
const RESIZED: [f32; 24] = [
    1., 1., 1., 2., 2., 2., 1., 1., 1., 2., 2., 2., 3., 3., 3., 4., 4., 4., 3., 3., 3., 4., 4., 4.,
];

fn read_f32s(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let t = nnc_formats::npy::read_npy_file(path).unwrap();
    let v = t
        .data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    (t.shape, v)
}

#[test]
fn compile_bind_input_freezes_a_graph_input() {
    let dir = tempfile::tempdir().unwrap();
    let (model, x, scales) = resize_with_runtime_scales(dir.path());
    let out = dir.path().join("m.nnc");
    // Unbound: unsupported, naming the input and the flag.
    let o = run(nnc()
        .arg("compile")
        .arg(&model)
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "none"]));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    let text = stderr(&o);
    assert!(text.contains("Resize with run-time scales"), "{text}");
    assert!(
        text.contains("graph input 'scales' is needed at compile time")
            && text.contains("--bind-input NAME=FILE"),
        "{text}"
    );
    assert!(!out.exists());
    // An unknown name, a mistyped value and a malformed flag are clear errors.
    let o = run(nnc()
        .arg("compile")
        .arg(&model)
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "none", "--bind-input"])
        .arg(format!("scale={}", scales.display())));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("'scale'") && stderr(&o).contains("X, scales"),
        "{}",
        stderr(&o)
    );
    let o = run(nnc()
        .arg("compile")
        .arg(&model)
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "none", "--bind-input"])
        .arg(format!("scales={}", x.display())));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--bind-input scales: the model declares shape [4]"),
        "{}",
        stderr(&o)
    );
    let o = run(nnc().arg("compile").arg(&model).arg("-o").arg(&out).args([
        "--encrypt",
        "none",
        "--bind-input",
        "scales",
    ]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // Bound: compiles; the compiled model takes X only and runs without a note.
    let o = run(nnc()
        .arg("compile")
        .arg(&model)
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "none", "--bind-input"])
        .arg(format!("scales={}", scales.display())));
    assert!(o.status.success(), "{}", stderr(&o));
    let results = dir.path().join("out");
    let o = run(nnc()
        .arg("run")
        .arg(&out)
        .arg("--input")
        .arg(&x)
        .arg("--output-dir")
        .arg(&results));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("note:"), "{}", stderr(&o));
    assert_eq!(
        read_f32s(&results.join("output_0.npy")),
        (vec![1, 1, 4, 6], RESIZED.to_vec())
    );
}

#[test]
fn run_binds_compile_time_inputs_of_a_source_model_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let (model, x, scales) = resize_with_runtime_scales(dir.path());
    // By name and through --input-dir (input_0 = X, input_1 = scales).
    let inputs = dir.path().join("inputs");
    std::fs::create_dir(&inputs).unwrap();
    std::fs::copy(&x, inputs.join("input_0.npy")).unwrap();
    std::fs::copy(&scales, inputs.join("input_1.npy")).unwrap();
    for (k, args) in [
        vec![
            "--input".to_string(),
            format!("scales={}", scales.display()),
            "--input".to_string(),
            format!("X={}", x.display()),
        ],
        vec!["--input-dir".to_string(), inputs.display().to_string()],
    ]
    .into_iter()
    .enumerate()
    {
        let results = dir.path().join(format!("out{k}"));
        let o = run(nnc()
            .arg("run")
            .arg(&model)
            .args(&args)
            .arg("--output-dir")
            .arg(&results));
        assert!(o.status.success(), "{}", stderr(&o));
        let notes: Vec<String> = stderr(&o)
            .lines()
            .filter(|l| l.starts_with("note:"))
            .map(str::to_string)
            .collect();
        assert_eq!(notes.len(), 1, "{}", stderr(&o));
        assert!(
            notes[0].contains("needs input 'scales' at compile time"),
            "{}",
            notes[0]
        );
        assert_eq!(
            read_f32s(&results.join("output_0.npy")),
            (vec![1, 1, 4, 6], RESIZED.to_vec())
        );
    }
    // A missing compile-time input is still an error naming what is missing.
    let o = run(nnc()
        .arg("run")
        .arg(&model)
        .arg("--input")
        .arg(format!("X={}", x.display()))
        .arg("--output-dir")
        .arg(dir.path().join("out2")));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("'scales'"), "{}", stderr(&o));
}

// ---- 8-bit integer tensors ------------------------------------------------------------

#[test]
fn uint8_arithmetic_wraps_like_numpy_through_npy_and_pb_files() {
    use nnc_compiler::onnx::proto::{
        GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto, TypeProto,
        ValueInfoProto, decode_tensor, encode_model, tensor_shape_proto, type_proto,
    };
    use nnc_formats::tensor::{DataType, HostTensor};
    let dir = tempfile::tempdir().unwrap();
    let info = |name: &str, elem_type: i32| ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type,
                shape: Some(TensorShapeProto {
                    dim: vec![tensor_shape_proto::Dimension {
                        value: Some(tensor_shape_proto::dimension::Value::DimValue(4)),
                        denotation: String::new(),
                    }],
                }),
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    };
    let node = |op: &str, inputs: &[&str], output: &str| NodeProto {
        op_type: op.into(),
        name: output.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    };
    // uint8: sum = a + b, product = a * b, diff = a - b; int8: m = max(c, d).
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 14,
        }],
        graph: Some(GraphProto {
            node: vec![
                node("Add", &["a", "b"], "sum"),
                node("Mul", &["a", "b"], "product"),
                node("Sub", &["a", "b"], "diff"),
                node("Max", &["c", "d"], "m"),
            ],
            name: "g".into(),
            input: vec![info("a", 2), info("b", 2), info("c", 3), info("d", 3)],
            output: vec![
                info("sum", 2),
                info("product", 2),
                info("diff", 2),
                info("m", 3),
            ],
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, encode_model(&model)).unwrap();
    let write = |name: &str, dtype: DataType, data: Vec<u8>| {
        let file = dir.path().join(format!("{name}.npy"));
        let t = HostTensor {
            dtype,
            shape: vec![4],
            data,
        };
        nnc_formats::npy::write_npy_file(&file, &t).unwrap();
        format!("{name}={}", file.display())
    };
    let (a, b) = ([200u8, 17, 0, 255], [100u8, 15, 1, 255]);
    let (c, d) = ([-128i8, 5, 127, -1], [3i8, -7, 0, -2]);
    let out = dir.path().join("out");
    let o = run(nnc()
        .arg("run")
        .arg(&path)
        .args(["--input", &write("a", DataType::U8, a.to_vec())])
        .args(["--input", &write("b", DataType::U8, b.to_vec())])
        .args([
            "--input",
            &write("c", DataType::I8, c.iter().map(|&v| v as u8).collect()),
        ])
        .args([
            "--input",
            &write("d", DataType::I8, d.iter().map(|&v| v as u8).collect()),
        ])
        .arg("--output-dir")
        .arg(&out)
        .args(["--output-format", "pb"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let read = |k: usize| {
        let bytes = std::fs::read(out.join(format!("output_{k}.pb"))).unwrap();
        let t = nnc_compiler::onnx::tensor::tensor_to_host(
            &decode_tensor(&bytes).unwrap(),
            &nnc_compiler::onnx::tensor::ExternalDataContext::none(),
        )
        .unwrap();
        (t.dtype, t.data)
    };
    let wrap =
        |f: fn(u8, u8) -> u8| -> Vec<u8> { a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect() };
    assert_eq!(read(0), (DataType::U8, wrap(u8::wrapping_add)));
    assert_eq!(read(1), (DataType::U8, wrap(u8::wrapping_mul)));
    assert_eq!(read(2), (DataType::U8, wrap(u8::wrapping_sub)));
    let max: Vec<u8> = c.iter().zip(&d).map(|(&x, &y)| x.max(y) as u8).collect();
    assert_eq!(read(3), (DataType::I8, max));
}

/// Errors a user meets on real models name what is wrong and how to put it right.
#[test]
fn input_and_key_errors_name_the_input_the_flag_and_both_sides() {
    let dir = tempfile::tempdir().unwrap();
    let input = testdata("models/tiny_cnn.input.npy");
    // --input NAME=FILE with a NAME the model does not have: the model's inputs listed.
    let o = run(nnc()
        .arg("run")
        .arg(tiny_cnn())
        .arg("--input")
        .arg(format!("image={}", input.display()))
        .arg("--output-dir")
        .arg(dir.path()));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let message = stderr(&o);
    assert!(
        message.contains("the model has no input 'image'; its inputs are: input"),
        "{message}"
    );
    // A missing key file: which flag, which path.
    let missing = dir.path().join("no-such.key");
    let o = run(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(dir.path().join("m.nnc"))
        .arg("--key-file")
        .arg(&missing));
    assert_eq!(o.status.code(), Some(66), "{}", stderr(&o));
    let message = stderr(&o);
    assert!(
        message.contains("--key-file") && message.contains(&missing.display().to_string()),
        "{message}"
    );
    // An input file of the wrong shape and type: both shapes, both types.
    let wrong = dir.path().join("wrong.npy");
    std::fs::write(
        &wrong,
        nnc_formats::npy::write_npy(&nnc_formats::tensor::HostTensor {
            dtype: nnc_formats::tensor::DataType::I64,
            shape: vec![2, 3],
            data: vec![0; 48],
        }),
    )
    .unwrap();
    let o = run(nnc()
        .arg("run")
        .arg(tiny_cnn())
        .arg("--input")
        .arg(&wrong)
        .arg("--output-dir")
        .arg(dir.path()));
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    let message = stderr(&o);
    assert!(
        message.contains(
            "input 'input' (#0): wrong type and shape: the model expects float32 [1, 3, 32, 32]"
        ) && message.contains("holds int64 [2, 3]"),
        "{message}"
    );
}

/// `nnc run --stream` runs once per chunk; `--feed-back` carries an output into the next
/// chunk's input. A feed-back whose output does not fit its input is refused.
#[test]
fn streamed_runs_stack_their_outputs_and_check_feed_back() {
    let dir = tempfile::tempdir().unwrap();
    let one = nnc_formats::npy::read_npy_file(testdata("models/tiny_cnn.input.npy")).unwrap();
    let mut stacked = one.clone();
    stacked.shape.insert(0, 3);
    stacked.data = [one.data.clone(), one.data.clone(), one.data.clone()].concat();
    let chunks = dir.path().join("chunks.npy");
    std::fs::write(&chunks, nnc_formats::npy::write_npy(&stacked)).unwrap();
    let o = run(nnc()
        .arg("run")
        .arg(tiny_cnn())
        .arg("--stream")
        .arg(format!("input={}", chunks.display()))
        .arg("--output-dir")
        .arg(dir.path()));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = nnc_formats::npy::read_npy_file(dir.path().join("output_0.npy")).unwrap();
    let single = nnc_formats::npy::read_npy_file(testdata("models/tiny_cnn.output.npy")).unwrap();
    assert_eq!(out.shape[0], 3);
    assert_eq!(&out.shape[1..], &single.shape[..]);
    // Every chunk is the same input, so every step is the reference output.
    let step = single.data.len();
    for t in 0..3 {
        let ours: Vec<f32> = out.data[t * step..(t + 1) * step]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let reference: Vec<f32> = single
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        for (a, b) in ours.iter().zip(&reference) {
            assert!((a - b).abs() <= 1e-4, "step {t}: {a} vs {b}");
        }
    }
    // Feed-back names are checked against the model.
    let o = run(nnc()
        .arg("run")
        .arg(tiny_cnn())
        .arg("--stream")
        .arg(format!("input={}", chunks.display()))
        .arg("--feed-back")
        .arg("probabilities=nope")
        .arg("--output-dir")
        .arg(dir.path()));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the model has no input 'nope'; its inputs are: input"),
        "{}",
        stderr(&o)
    );
}
