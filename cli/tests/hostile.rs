//! Hostile and careless input, as `nnc` meets it: crafted models that once made the
//! compiler panic or allocate gigabytes, graphs long enough to expose recursion or
//! quadratic passes, outputs that must not replace what they name, interrupted writes,
//! and files that are not authenticated with the key a user gives.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata")).join(rel)
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("nnc runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn keygen(dir: &Path) -> PathBuf {
    let key = dir.join("k.key");
    let o = run(nnc()
        .args(["keygen", "--algorithm", "aes128", "-o"])
        .arg(&key));
    assert!(o.status.success(), "{}", stderr(&o));
    key
}

/// The largest resident set of any child process this test binary has waited for.
#[cfg(target_os = "linux")]
fn peak_child_rss_bytes() -> u64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_CHILDREN, &mut u), 0);
        u
    };
    usage.ru_maxrss as u64 * 1024
}

#[test]
fn every_crafted_model_is_refused_cleanly_within_a_gigabyte() {
    let dir = tempfile::tempdir().unwrap();
    let mut models: Vec<PathBuf> = std::fs::read_dir(testdata("hostile"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
        .collect();
    models.sort();
    assert!(
        models.len() >= 14,
        "testdata/hostile has {} models",
        models.len()
    );
    for model in &models {
        let out = dir.path().join("out.nnc");
        let o = run(nnc()
            .arg("compile")
            .arg(model)
            .arg("-o")
            .arg(&out)
            .args(["--encrypt", "none"]));
        let code = o.status.code();
        let text = stderr(&o);
        // Malformed (65) or beyond a limit (4): never a panic (70, 101) or a signal.
        assert!(
            matches!(code, Some(65) | Some(4)),
            "{}: exit {code:?}\n{text}",
            model.display()
        );
        assert!(text.starts_with("error: "), "{}: {text}", model.display());
        assert!(!text.contains("panicked"), "{}: {text}", model.display());
        if code == Some(4) {
            assert!(text.contains("--limit "), "{}: {text}", model.display());
        }
        assert!(!out.exists(), "{} left an output", model.display());
        // Nothing else is left behind either.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
    #[cfg(target_os = "linux")]
    {
        let peak = peak_child_rss_bytes();
        assert!(peak < 1 << 30, "peak resident memory {peak} bytes");
    }
}

#[test]
fn a_limit_can_be_raised_and_lowered() {
    let dir = tempfile::tempdir().unwrap();
    let model = testdata("hostile/constant_of_shape_many.onnx");
    let out = dir.path().join("out.nnc");
    let o = run(nnc().arg("compile").arg(&model).arg("-o").arg(&out).args([
        "--encrypt",
        "none",
        "--limit",
        "folded=1K",
    ]));
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("folded limit"), "{}", stderr(&o));
    let o = run(nnc().args(["inspect", "--limit", "folded=2Q"]).arg(&model));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = run(nnc().args(["inspect", "--limit", "speed=2G"]).arg(&model));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // A tensor limit below the model's tensors refuses even a small valid model.
    let o = run(nnc()
        .args(["inspect", "--limit", "tensor=64"])
        .arg(testdata("models/tiny_cnn.onnx")));
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("--limit tensor=SIZE"), "{}", stderr(&o));
}

/// Writes a synthetic chain model and compiles it; chains this long must compile (the
/// passes are linear, nothing recurses per node).
fn compile_chain(dir: &Path, name: &str, bytes: Vec<u8>) {
    let model = dir.join(name);
    std::fs::write(&model, bytes).unwrap();
    let out = dir.join(format!("{name}.nnc"));
    let o = run(nnc().arg("compile").arg(&model).arg("-o").arg(&out).args([
        "--encrypt",
        "none",
        "--json",
    ]));
    assert!(o.status.success(), "{name}: {}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(report["operations"].as_u64().unwrap() >= 1, "{report}");
}

/// Ifs nested in Ifs: a moderate depth compiles (every level an IF with its subgraphs);
/// a hostile depth is refused as malformed, never a stack overflow.
#[test]
fn nested_ifs_compile_to_a_bound_and_are_refused_beyond_it() {
    use nnc_compiler::synthetic::onnx_nested_ifs;
    let dir = tempfile::tempdir().unwrap();
    compile_chain(dir.path(), "nested-8.onnx", onnx_nested_ifs(8));
    for depth in [40, 1_000] {
        let model = dir.path().join(format!("nested-{depth}.onnx"));
        std::fs::write(&model, onnx_nested_ifs(depth)).unwrap();
        let o = run(nnc()
            .arg("compile")
            .arg(&model)
            .arg("-o")
            .arg(dir.path().join("out.nnc"))
            .args(["--encrypt", "none"]));
        assert_eq!(o.status.code(), Some(65), "depth {depth}: {}", stderr(&o));
        let message = stderr(&o);
        assert!(
            message.contains("nest more than 100 levels deep") && message.len() < 400,
            "depth {depth}: {message}"
        );
        assert!(!dir.path().join("out.nnc").exists());
    }
}

#[test]
fn chains_of_a_hundred_thousand_nodes_compile() {
    use nnc_compiler::synthetic::{ChainOp, onnx_chain, tflite_chain};
    let dir = tempfile::tempdir().unwrap();
    compile_chain(dir.path(), "relu.onnx", onnx_chain(ChainOp::Relu, 100_000));
    // And the runtime prepares and runs one (its memory planner is not quadratic).
    let x = nnc_formats::tensor::HostTensor::from_f32(vec![1, 4, 2, 2], &[0.5; 16]).unwrap();
    nnc_formats::npy::write_npy_file(dir.path().join("x.npy"), &x).unwrap();
    let o = run(nnc()
        .arg("run")
        .arg(dir.path().join("relu.onnx.nnc"))
        .arg("--input")
        .arg(dir.path().join("x.npy"))
        .arg("--output-dir")
        .arg(dir.path()));
    assert!(o.status.success(), "{}", stderr(&o));
    compile_chain(
        dir.path(),
        "identity.onnx",
        onnx_chain(ChainOp::Identity, 100_000),
    );
    compile_chain(dir.path(), "relu.tflite", tflite_chain(100_000));
    // Control flow: 20,000 Ifs that fold, and 5,000 that stay IF operations with two
    // referenced subgraphs each (every one capturing a value of the enclosing graph).
    compile_chain(
        dir.path(),
        "if-folded.onnx",
        onnx_chain(ChainOp::IfFolded, 20_000),
    );
    compile_chain(
        dir.path(),
        "if-kept.onnx",
        onnx_chain(ChainOp::IfKept, 5_000),
    );
    // Layout operations: 20,000 pools wrapped in 40,000 transposes that must cancel.
    compile_chain(
        dir.path(),
        "maxpool.onnx",
        onnx_chain(ChainOp::MaxPool, 20_000),
    );
}

#[test]
#[cfg(unix)]
fn outputs_never_replace_devices_directories_links_or_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.onnx");
    std::fs::copy(testdata("models/tiny_cnn.onnx"), &model).unwrap();
    let original = std::fs::read(&model).unwrap();
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let link = dir.path().join("link.nnc");
    std::os::unix::fs::symlink(dir.path().join("target.nnc"), &link).unwrap();
    let subdir = dir.path().join("sub");
    std::fs::create_dir(&subdir).unwrap();
    let targets: [(&Path, &str); 5] = [
        (Path::new("/dev/null"), "a device"),
        (&fifo, "a FIFO"),
        (&link, "a symbolic link"),
        (&subdir, "a directory"),
        (&model, "an input"),
    ];
    for (target, what) in targets {
        let o = run(nnc()
            .arg("compile")
            .arg(&model)
            .arg("-o")
            .arg(target)
            .args(["--encrypt", "none"]));
        assert_eq!(o.status.code(), Some(73), "{what}: {}", stderr(&o));
        assert!(stderr(&o).contains(what), "{what}: {}", stderr(&o));
        let o = run(nnc().arg("dump").arg(&model).arg("-o").arg(target));
        assert_eq!(
            o.status.code(),
            Some(73),
            "dump onto {what}: {}",
            stderr(&o)
        );
    }
    assert!(
        Path::new("/dev/null")
            .metadata()
            .unwrap()
            .file_type()
            .is_char_device_like()
    );
    assert_eq!(std::fs::read(&model).unwrap(), original);
    assert!(!dir.path().join("target.nnc").exists());
}

/// `FileType::is_char_device` under a name that reads well in the assertion above.
trait CharDevice {
    fn is_char_device_like(&self) -> bool;
}

#[cfg(unix)]
impl CharDevice for std::fs::FileType {
    fn is_char_device_like(&self) -> bool {
        use std::os::unix::fs::FileTypeExt;
        self.is_char_device()
    }
}

#[test]
#[cfg(unix)]
fn a_killed_compile_leaves_nothing_behind() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("chain.onnx");
    std::fs::write(
        &model,
        nnc_compiler::synthetic::onnx_chain(nnc_compiler::synthetic::ChainOp::Relu, 60_000),
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("m.nnc");
    // Where the file system offers unnamed temporary files (O_TMPFILE) a kill leaves
    // nothing; elsewhere nnc falls back to locked named ones, which the next write removes.
    let unnamed = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE)
            .open(&out_dir)
            .is_ok()
    };
    for delay_ms in [5u64, 40, 120, 300, 700] {
        let mut child = nnc()
            .arg("compile")
            .arg(&model)
            .arg("-o")
            .arg(&out)
            .args(["--encrypt", "none"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        // Either nothing, or the complete output; never a temporary file (or, without
        // O_TMPFILE, only a private one of nnc's pattern, which the next write removes).
        for entry in std::fs::read_dir(&out_dir).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !unnamed && name.starts_with(".m.nnc.nnc-tmp-") {
                let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{name}");
                let o = run(nnc()
                    .arg("compile")
                    .arg(&model)
                    .arg("-o")
                    .arg(&out)
                    .args(["--encrypt", "none"]));
                assert!(o.status.success(), "{}", stderr(&o));
                assert!(!entry.path().exists(), "the next write left {name}");
                continue;
            }
            assert_eq!(name, "m.nnc", "a kill after {delay_ms} ms left {name}");
            let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644, "{name}");
            let o = run(nnc().arg("verify").arg(entry.path()));
            assert!(o.status.success(), "{}", stderr(&o));
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
}

#[test]
fn a_key_never_accepts_a_file_that_is_not_authenticated_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let model = testdata("models/tiny_cnn.onnx");
    let input = testdata("models/tiny_cnn.input.npy");
    // Digests only: anyone can write such a file, so a user holding a key refuses it.
    let plain = dir.path().join("plain.nnc");
    let o = run(nnc()
        .arg("compile")
        .arg(&model)
        .arg("-o")
        .arg(&plain)
        .args(["--encrypt", "none"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(nnc().arg("verify").arg(&plain));
    assert!(o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("NOT authenticated"),
        "verify must say the file is protected against corruption only"
    );
    for command in ["verify", "inspect"] {
        let o = run(nnc().arg(command).arg(&plain).arg("--key-file").arg(&key));
        assert_eq!(o.status.code(), Some(3), "{command}: {}", stderr(&o));
        assert!(stderr(&o).contains("not authenticated"), "{}", stderr(&o));
    }
    let o = run(nnc()
        .arg("run")
        .arg(&plain)
        .arg("--key-file")
        .arg(&key)
        .arg("--input")
        .arg(&input)
        .arg("--output-dir")
        .arg(dir.path()));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    // Authenticated plaintext: integrity without secrecy.
    let authed = dir.path().join("authed.nnc");
    let o = run(nnc()
        .arg("compile")
        .arg(&model)
        .arg("-o")
        .arg(&authed)
        .args(["--encrypt", "none", "--key-file"])
        .arg(&key));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(nnc().arg("verify").arg(&authed).arg("--key-file").arg(&key));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("NOT encrypted"));
    let o = run(nnc().arg("verify").arg(&authed));
    assert_eq!(o.status.code(), Some(2), "a missing key: {}", stderr(&o));
    let other = dir.path().join("other.key");
    let o = run(nnc()
        .args(["keygen", "--algorithm", "aes256", "-o"])
        .arg(&other));
    assert!(o.status.success());
    let o = run(nnc()
        .arg("verify")
        .arg(&authed)
        .arg("--key-file")
        .arg(&other));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let o = run(nnc()
        .arg("run")
        .arg(&authed)
        .arg("--key-file")
        .arg(&key)
        .arg("--input")
        .arg(&input)
        .arg("--output-dir")
        .arg(dir.path()));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(nnc()
        .arg("compare")
        .arg(dir.path().join("output_0.npy"))
        .arg(testdata("models/tiny_cnn.output.npy")));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}
