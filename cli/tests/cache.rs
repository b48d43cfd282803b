//! The compilation cache: the three flows, the NNAPI reference suite's corruption cases,
//! concurrent processes, processes killed while writing, and no plaintext on disk.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata")).join(rel)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

struct Fixture {
    dir: tempfile::TempDir,
    key: PathBuf,
    model: PathBuf,
    input: PathBuf,
    expected: PathBuf,
}

/// A key and `source` compiled with it (SM4-CBC: the slow cipher the cache exists for).
fn fixture(source: &Path, input: &Path, expected: &Path) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k.key");
    assert!(
        nnc()
            .args(["keygen", "--algorithm", "sm4", "-o"])
            .arg(&key)
            .output()
            .unwrap()
            .status
            .success()
    );
    let model = dir.path().join("m.nnc");
    let o = nnc()
        .arg("compile")
        .arg(source)
        .arg("-o")
        .arg(&model)
        .args(["--encrypt", "sm4", "--mode", "cbc", "--key-file"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    Fixture {
        dir,
        key,
        model,
        input: input.to_path_buf(),
        expected: expected.to_path_buf(),
    }
}

fn tiny() -> Fixture {
    fixture(
        &testdata("models/tiny_cnn.onnx"),
        &testdata("models/tiny_cnn.input.npy"),
        &testdata("models/tiny_cnn.output.npy"),
    )
}

/// `nnc run` of the fixture's model with an optional cache; returns (outcome, warnings,
/// output file).
fn run(f: &Fixture, cache: Option<&Path>, out: &str) -> (String, Vec<String>, PathBuf) {
    let outputs = f.dir.path().join(out);
    let mut cmd = nnc();
    cmd.arg("run")
        .arg(&f.model)
        .arg("--key-file")
        .arg(&f.key)
        .arg("--input")
        .arg(&f.input)
        .arg("--output-dir")
        .arg(&outputs)
        .arg("--json");
    if let Some(c) = cache {
        cmd.arg("--cache-dir").arg(c);
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
    (
        v["cache"].as_str().unwrap().to_string(),
        warnings,
        outputs.join("output_0.npy"),
    )
}

fn assert_correct(f: &Fixture, output: &Path) {
    let o = nnc()
        .arg("compare")
        .arg(output)
        .arg(&f.expected)
        .args(["--atol", "1e-5", "--rtol", "1e-4"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "wrong output: {}",
        String::from_utf8_lossy(&o.stdout)
    );
}

fn entry_files(cache: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    // The adversary may look before the first prepare has created the directory.
    let Ok(top) = std::fs::read_dir(cache) else {
        return files;
    };
    for e in top.flatten() {
        // A concurrent prepare may remove a directory between the two listings.
        if let Ok(entries) = std::fs::read_dir(e.path()) {
            files.extend(entries.flatten().map(|f| f.path()));
        }
    }
    files.sort();
    files
}

fn file_named(cache: &Path, prefix: &str) -> PathBuf {
    entry_files(cache)
        .into_iter()
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} file in {}", cache.display()))
}

#[test]
fn the_three_flows_give_identical_outputs() {
    let f = tiny();
    let cache = f.dir.path().join("cache");
    let (none, _, a) = run(&f, None, "none");
    assert_eq!(none, "none");
    let (miss, w, b) = run(&f, Some(&cache), "miss");
    assert_eq!((miss.as_str(), w.len()), ("miss", 0), "{w:?}");
    let (hit, w, c) = run(&f, Some(&cache), "hit");
    assert_eq!((hit.as_str(), w.len()), ("hit", 0), "{w:?}");
    assert_correct(&f, &a);
    let (a, b, c) = (
        std::fs::read(a).unwrap(),
        std::fs::read(b).unwrap(),
        std::fs::read(c).unwrap(),
    );
    assert!(
        a == b && b == c,
        "a cache hit must give the outputs of a fresh prepare"
    );
}

#[test]
fn a_cache_written_by_compile_is_a_hit_for_run() {
    let f = tiny();
    let cache = f.dir.path().join("cache");
    let o = nnc()
        .arg("compile")
        .arg(testdata("models/tiny_cnn.onnx"))
        .arg("-o")
        .arg(&f.model)
        .args(["--encrypt", "sm4", "--mode", "cbc", "--json", "--key-file"])
        .arg(&f.key)
        .arg("--cache-dir")
        .arg(&cache)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["cache"]["outcome"], "miss");
    let (outcome, _, out) = run(&f, Some(&cache), "out");
    assert_eq!(outcome, "hit");
    assert_correct(&f, &out);
}

#[test]
fn a_caller_token_names_the_model_and_a_wrong_token_never_hits() {
    let f = tiny();
    let cache = f.dir.path().join("cache");
    let token_a = "aa".repeat(32);
    let token_b = "bb".repeat(32);
    let run_with = |token: &str, out: &str| {
        let o = nnc()
            .arg("run")
            .arg(&f.model)
            .arg("--key-file")
            .arg(&f.key)
            .arg("--input")
            .arg(&f.input)
            .arg("--output-dir")
            .arg(f.dir.path().join(out))
            .args(["--json", "--token", token, "--cache-dir"])
            .arg(&cache)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["cache"].as_str().unwrap().to_string()
    };
    assert_eq!(run_with(&token_a, "a1"), "miss");
    assert_eq!(run_with(&token_a, "a2"), "hit");
    assert_eq!(
        run_with(&token_b, "b1"),
        "miss",
        "another token must not find A's entry"
    );
}

/// Corrupts a file of a written entry with `damage`, then checks the next run discards the
/// entry with a warning, prepares afresh, gives correct outputs, and repairs the cache.
fn corruption_case(prefix: &str, damage: impl Fn(&Path)) {
    let f = tiny();
    let cache = f.dir.path().join("cache");
    run(&f, Some(&cache), "first");
    damage(&file_named(&cache, prefix));
    let (outcome, warnings, out) = run(&f, Some(&cache), "second");
    assert_eq!(outcome, "miss", "a damaged {prefix} cache must not be used");
    assert!(
        warnings.iter().any(|w| w.contains("discarded")),
        "no warning: {warnings:?}"
    );
    assert_correct(&f, &out);
    let (outcome, warnings, out) = run(&f, Some(&cache), "third");
    assert_eq!(
        (outcome.as_str(), warnings.len()),
        ("hit", 0),
        "{warnings:?}"
    );
    assert_correct(&f, &out);
}

fn flip_bit(path: &Path) {
    let mut b = std::fs::read(path).unwrap();
    let i = b.len() / 2;
    b[i] ^= 0x04;
    std::fs::write(path, b).unwrap();
}

fn append(path: &Path) {
    let mut b = std::fs::read(path).unwrap();
    b.extend_from_slice(b"appended");
    std::fs::write(path, b).unwrap();
}

#[test]
fn a_one_bit_flip_in_the_model_cache_is_rejected() {
    corruption_case("model-", flip_bit);
}

#[test]
fn appended_bytes_in_the_model_cache_are_rejected() {
    corruption_case("model-", append);
}

#[test]
fn a_one_bit_flip_in_the_data_cache_never_gives_wrong_outputs() {
    corruption_case("data-", flip_bit);
}

#[test]
fn appended_bytes_in_the_data_cache_never_give_wrong_outputs() {
    corruption_case("data-", append);
}

#[test]
fn another_models_cache_swapped_in_is_rejected() {
    let a = tiny();
    let b = fixture(
        &testdata("onnx/conv_relu/model.onnx"),
        &testdata("onnx/conv_relu/input_0.npy"),
        &testdata("onnx/conv_relu/output_0.npy"),
    );
    let cache_a = a.dir.path().join("cache");
    let cache_b = b.dir.path().join("cache");
    run(&a, Some(&cache_a), "a");
    run(&b, Some(&cache_b), "b");
    for name in ["model-0.bin", "data-0.bin"] {
        std::fs::copy(
            file_named(&cache_b, name.split('.').next().unwrap()),
            file_named(&cache_a, name.split('.').next().unwrap()),
        )
        .unwrap();
    }
    let (outcome, warnings, out) = run(&a, Some(&cache_a), "swapped");
    assert_eq!(outcome, "miss");
    assert!(!warnings.is_empty());
    assert_correct(&a, &out);
}

#[test]
fn another_models_cache_copied_over_during_prepares_never_crashes_or_misleads() {
    use nnc_runtime::{CacheConfig, LoadOptions, PreparedModel, SimulatedNpu};
    let a = tiny();
    let b = fixture(
        &testdata("onnx/conv_relu/model.onnx"),
        &testdata("onnx/conv_relu/input_0.npy"),
        &testdata("onnx/conv_relu/output_0.npy"),
    );
    let cache = a.dir.path().join("cache");
    let other = b.dir.path().join("cache");
    run(&b, Some(&other), "b");
    let b_files = entry_files(&other);
    let input = nnc_formats::npy::read_npy_file(&a.input).unwrap();
    let expected = nnc_formats::npy::read_npy_file(&a.expected)
        .unwrap()
        .to_f32_vec()
        .unwrap();
    let key_hex = std::fs::read_to_string(&a.key).unwrap();
    let key = hex::decode(key_hex.lines().last().unwrap().trim()).unwrap();
    let model_bytes = std::fs::read(&a.model).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        // The adversary: keeps copying the other model's files over whatever entry A has,
        // without taking the cache's lock.
        scope.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for target in entry_files(&cache) {
                    let name = target.file_name().unwrap().to_string_lossy().to_string();
                    if let Some(src) = b_files
                        .iter()
                        .find(|p| p.file_name().unwrap().to_string_lossy() == name)
                    {
                        let _ = std::fs::copy(src, &target);
                    }
                }
                std::thread::yield_now();
            }
        });
        for round in 0..100 {
            let npu = SimulatedNpu::new("npu0");
            npu.install_key(&key);
            let options = LoadOptions {
                threads: 1,
                cache: Some(CacheConfig {
                    dir: cache.clone(),
                    token: None,
                }),
                ..Default::default()
            };
            let model = PreparedModel::load_bytes(model_bytes.clone(), &npu, &options)
                .unwrap_or_else(|e| panic!("round {round}: prepare failed: {e}"));
            let out = model.run(std::slice::from_ref(&input)).unwrap()[0]
                .to_f32_vec()
                .unwrap();
            for (x, y) in out.iter().zip(&expected) {
                assert!(
                    (x - y).abs() <= 1e-5 + 1e-4 * y.abs(),
                    "round {round}: wrong output {x} vs {y}"
                );
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
}

#[test]
fn eight_processes_preparing_into_one_empty_cache_all_succeed() {
    let f = tiny();
    let cache = f.dir.path().join("cache");
    let children: Vec<_> = (0..8)
        .map(|k| {
            nnc()
                .arg("run")
                .arg(&f.model)
                .arg("--key-file")
                .arg(&f.key)
                .arg("--input")
                .arg(&f.input)
                .arg("--output-dir")
                .arg(f.dir.path().join(format!("p{k}")))
                .arg("--cache-dir")
                .arg(&cache)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (k, child) in children.into_iter().enumerate() {
        let o = child.wait_with_output().unwrap();
        assert!(o.status.success(), "process {k}: {}", stderr(&o));
        assert_correct(&f, &f.dir.path().join(format!("p{k}/output_0.npy")));
    }
    let o = nnc()
        .args(["cache", "ls", "--json"])
        .arg(&cache)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["entries"].as_array().unwrap().len(),
        1,
        "exactly one entry remains"
    );
    let o = nnc()
        .args(["cache", "verify"])
        .arg(&cache)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let (outcome, _, _) = run(&f, Some(&cache), "after");
    assert_eq!(outcome, "hit");
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
#[cfg(unix)]
fn a_process_killed_while_writing_never_leaves_a_usable_partial_file() {
    // MobileNetV2's 14 MB of weights make the write long enough to interrupt.
    let Some(source) = nnc_formats::test_support::shared_model("mobilenet_v2.onnx") else {
        return;
    };
    let f = fixture(
        &source,
        &source.with_extension("onnx.input.npy"),
        &source.with_extension("onnx.output.npy"),
    );
    // How long one cold run takes, to spread the kills over it.
    let t = Instant::now();
    run(&f, Some(&f.dir.path().join("probe")), "probe");
    let span = t.elapsed().as_micros().max(1) as u64;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let cache = f.dir.path().join("cache");
    for round in 0..50 {
        let mut child = nnc()
            .arg("run")
            .arg(&f.model)
            .arg("--key-file")
            .arg(&f.key)
            .arg("--input")
            .arg(&f.input)
            .arg("--output-dir")
            .arg(f.dir.path().join("killed"))
            .arg("--cache-dir")
            .arg(&cache)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(next() % span));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let (outcome, _, out) = run(&f, Some(&cache), "next");
        assert!(
            outcome == "hit" || outcome == "miss",
            "round {round}: {outcome}"
        );
        let o = nnc()
            .arg("compare")
            .arg(&out)
            .arg(&f.expected)
            .args(["--atol", "1e-4", "--rtol", "1e-3"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "round {round}: wrong output after a kill"
        );
        // Start every round from an empty cache again, so each kill can hit a write.
        let _ = nnc().args(["cache", "clean"]).arg(&cache).output();
    }
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn no_plaintext_weight_window_is_in_the_cache_directory() {
    let Some(source) = nnc_formats::test_support::shared_model("mobilenet_v2.onnx") else {
        return;
    };
    let f = fixture(
        &source,
        &source.with_extension("onnx.input.npy"),
        &source.with_extension("onnx.output.npy"),
    );
    let cache = f.dir.path().join("cache");
    run(&f, Some(&cache), "out");
    let (outcome, _, _) = run(&f, Some(&cache), "out2");
    assert_eq!(outcome, "hit");
    let model = nnc_compiler::pipeline::lower_file(&source, &Default::default())
        .unwrap()
        .model;
    // Every 32-byte window that is not a single repeated byte, of every weight.
    let mut windows: HashSet<[u8; 32]> = HashSet::new();
    for (i, o) in model.main.operands.iter().enumerate() {
        if !nnc_formats::container::is_weight(o) {
            continue;
        }
        let bytes = model.constant_bytes(i as u32).unwrap();
        // Windows at every 4-byte step (element boundaries): prepared layouts move whole
        // elements, so any surviving plaintext run is element-aligned.
        for w in bytes.windows(32).step_by(4) {
            if w.iter().any(|&b| b != w[0]) {
                windows.insert(w.try_into().unwrap());
            }
        }
    }
    assert!(windows.len() > 100_000);
    let mut files = entry_files(&cache);
    files.push(cache.join("index.json"));
    for file in files {
        let data = std::fs::read(&file).unwrap();
        for w in data.windows(32) {
            assert!(
                !windows.contains(w),
                "{} holds plaintext weight bytes",
                file.display()
            );
        }
    }
    // The check can fail: an unencrypted model's data cache does hold its weights.
    let plain = fixture(
        &source,
        &source.with_extension("onnx.input.npy"),
        &source.with_extension("onnx.output.npy"),
    );
    let o = nnc()
        .arg("compile")
        .arg(&source)
        .arg("-o")
        .arg(&plain.model)
        .args(["--encrypt", "none"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let plain_cache = plain.dir.path().join("cache");
    let o = nnc()
        .arg("run")
        .arg(&plain.model)
        .arg("--input")
        .arg(&plain.input)
        .arg("--output-dir")
        .arg(plain.dir.path().join("o"))
        .arg("--cache-dir")
        .arg(&plain_cache)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let data = std::fs::read(file_named(&plain_cache, "data-")).unwrap();
    assert!(
        data.windows(32).any(|w| windows.contains(w)),
        "the scan would not notice plaintext"
    );
}

/// Edits a cached program and writes its new digest into the index, as anyone who can
/// write the cache directory could.
fn edit_program_and_its_digest(cache: &Path) {
    let model_file = file_named(cache, "model-");
    let mut bytes = std::fs::read(&model_file).unwrap();
    let last = bytes.len() - 9;
    bytes[last] ^= 0x41;
    std::fs::write(&model_file, &bytes).unwrap();
    let index_path = cache.join("index.json");
    let mut index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&index_path).unwrap()).unwrap();
    let digest = {
        use std::fmt::Write;
        let d = nnc_formats::crypto::sha256(&[&bytes]);
        d.iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    };
    index["entries"][0]["model"][0] = serde_json::Value::String(digest);
    std::fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
}

#[test]
fn an_edited_program_with_an_updated_digest_is_a_reported_and_cleaned_miss() {
    let f = tiny();
    let cache = f.dir.path().join("cache");
    run(&f, Some(&cache), "first");
    edit_program_and_its_digest(&cache);
    // `cache verify` finds it with the model's key, and says what it could not check
    // without.
    let o = nnc()
        .args(["cache", "verify"])
        .arg(&cache)
        .arg("--key-file")
        .arg(&f.key)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("DAMAGED"));
    let o = nnc()
        .args(["cache", "verify"])
        .arg(&cache)
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("NOT CHECKED"));
    // A run never fails on it: a miss, reported, the entry replaced.
    let (outcome, warnings, out) = run(&f, Some(&cache), "second");
    assert_eq!(outcome, "miss");
    assert!(
        warnings.iter().any(|w| w.contains("authenticate")),
        "{warnings:?}"
    );
    assert_correct(&f, &out);
    let (outcome, warnings, out) = run(&f, Some(&cache), "third");
    assert_eq!(
        (outcome.as_str(), warnings.len()),
        ("hit", 0),
        "{warnings:?}"
    );
    assert_correct(&f, &out);
    let o = nnc()
        .args(["cache", "verify"])
        .arg(&cache)
        .arg("--key-file")
        .arg(&f.key)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn an_unkeyed_models_edited_program_is_only_compared_never_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.nnc");
    let o = nnc()
        .arg("compile")
        .arg(testdata("models/tiny_cnn.onnx"))
        .arg("-o")
        .arg(&model)
        .args(["--encrypt", "none"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let cache = dir.path().join("cache");
    let run_once = |out: &str| {
        let o = nnc()
            .arg("run")
            .arg(&model)
            .arg("--input")
            .arg(testdata("models/tiny_cnn.input.npy"))
            .arg("--output-dir")
            .arg(dir.path().join(out))
            .arg("--cache-dir")
            .arg(&cache)
            .arg("--json")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let compare = nnc()
            .arg("compare")
            .arg(dir.path().join(out).join("output_0.npy"))
            .arg(testdata("models/tiny_cnn.output.npy"))
            .output()
            .unwrap();
        assert!(
            compare.status.success(),
            "wrong output after an edited cache"
        );
        v["cache"].as_str().unwrap().to_string()
    };
    assert_eq!(run_once("first"), "miss");
    assert_eq!(run_once("second"), "hit");
    edit_program_and_its_digest(&cache);
    assert_eq!(run_once("third"), "miss");
    assert_eq!(run_once("fourth"), "hit");
}
