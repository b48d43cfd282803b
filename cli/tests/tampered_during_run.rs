//! A `.nnc` changed by another process while `nnc run` uses it: a weight field altered
//! after the model loaded (read again during the run by a bounded parameter cache) exits
//! 3 like any integrity failure, and a file truncated while it is read exits cleanly
//! (3, or 65 when it was already shorter than its header says), never by a signal.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use nnc_formats::container::Container;

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata")).join(rel)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A key and tiny_cnn compiled with it, in `dir`.
fn compiled(dir: &Path) -> (PathBuf, PathBuf) {
    let key = dir.join("key");
    let o = nnc()
        .args(["keygen", "--algorithm", "aes128", "-o"])
        .arg(&key)
        .output()
        .expect("nnc runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let model = dir.join("m.nnc");
    let o = nnc()
        .arg("compile")
        .arg(testdata("models/tiny_cnn.onnx"))
        .arg("-o")
        .arg(&model)
        .arg("--key-file")
        .arg(&key)
        .output()
        .expect("nnc runs");
    assert!(o.status.success(), "{}", stderr(&o));
    (key, model)
}

fn run(model: &Path, key: &Path, extra: &[&str], out: &Path) -> Output {
    nnc()
        .arg("run")
        .arg(model)
        .arg("--key-file")
        .arg(key)
        .arg("--input")
        .arg(testdata("models/tiny_cnn.input.npy"))
        .arg("--output-dir")
        .arg(out)
        .args(extra)
        .output()
        .expect("nnc runs")
}

#[test]
fn a_weight_field_failing_authentication_during_the_run_exits_3() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (key, model) = compiled(dir.path());
    let cache = dir.path().join("cache");
    let cache = cache.to_str().expect("a UTF-8 path");
    // The first run writes the compilation cache; a run that hits it prepares without
    // reading a weight field, so the altered field is first read during execution.
    let o = run(
        &model,
        &key,
        &["--cache-dir", cache],
        &dir.path().join("o1"),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let mut bytes = std::fs::read(&model).expect("reads the model");
    let field = {
        let c = Container::parse(&bytes).expect("parses");
        c.fields
            .iter()
            .flatten()
            .max_by_key(|f| f.length)
            .copied()
            .expect("a weight field")
    };
    bytes[(field.offset + field.length / 2) as usize] ^= 0x01;
    std::fs::write(&model, &bytes).expect("alters the model");
    let small = ["--cache-dir", cache, "--parameter-cache", "1"];
    let o = run(&model, &key, &small, &dir.path().join("o2"));
    let text = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{text}");
    assert!(
        text.contains("execution failed")
            && text.contains(&format!("weight field {} of operation", field.index))
            && text.contains("does not authenticate"),
        "{text}"
    );
    let mut json = small.to_vec();
    json.push("--json");
    let o = run(&model, &key, &json, &dir.path().join("o3"));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(v["kind"], "integrity");
    assert_eq!(v["exit_code"], 3);
    // Without the cache the load itself reads the field: refused there, also exit 3.
    let o = run(&model, &key, &[], &dir.path().join("o4"));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot load"), "{}", stderr(&o));
}

/// LAYERS fully connected layers of W x W (a 1 MiB weight field each), written encrypted
/// under a fresh key; returns the model file and the key file.
fn layers(dir: &Path) -> (PathBuf, PathBuf) {
    use nnc_formats::container::{WriteOptions, write};
    use nnc_formats::crypto::{Algorithm, Key, Mode};
    use nnc_formats::nn::{IoInfo, Lifetime, Model, Operand, OperandType, OperationType};
    const W: usize = 512;
    const LAYERS: usize = 8;
    let mut model = Model::default();
    let mut x = Operand::new(OperandType::TensorFloat32, vec![1, W as u32]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = model.add_operand(x);
    let mut previous = x;
    for layer in 0..LAYERS {
        let weights: Vec<f32> = (0..W * W)
            .map(|i| ((i * 7 + layer) % 13) as f32 * 1e-3)
            .collect();
        let w = model.add_f32_tensor(vec![W as u32, W as u32], &weights);
        let b = model.add_f32_tensor(vec![W as u32], &[0.5; W]);
        let act = model.add_i32(0);
        let mut y = Operand::new(OperandType::TensorFloat32, vec![1, W as u32]);
        if layer == LAYERS - 1 {
            y.lifetime = Lifetime::SubgraphOutput;
        }
        let y = model.add_operand(y);
        model.add_operation(
            OperationType::FullyConnected,
            vec![previous, w, b, act],
            vec![y],
            format!("fc{layer}"),
        );
        previous = y;
    }
    model.main.inputs = vec![x];
    model.main.outputs = vec![previous];
    let io = |name: &str| IoInfo {
        name: name.into(),
        dtype: nnc_formats::tensor::DataType::F32,
        dims: vec![1, W as u32],
    };
    model.input_info = vec![io("x")];
    model.output_info = vec![io("y")];
    let key = Key::generate(Algorithm::Aes128).expect("a key");
    let bytes = write(
        &model,
        &WriteOptions {
            envelope: Default::default(),
            key: Some(&key),
            mode: Mode::Ctr,
            authenticate_only: false,
            reproducible: false,
            producer: "test".into(),
            arena: None,
            extra_sections: Vec::new(),
        },
    )
    .expect("writes the model");
    let (model_path, key_path) = (dir.join("layers.nnc"), dir.join("layers.key"));
    std::fs::write(&model_path, bytes).expect("writes the model");
    std::fs::write(&key_path, key.to_hex().as_bytes()).expect("writes the key");
    std::fs::set_permissions(
        &key_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("makes the key private");
    (model_path, key_path)
}

#[test]
fn a_file_truncated_while_run_reads_it_exits_cleanly() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (model, key) = layers(dir.path());
    let pristine = std::fs::read(&model).expect("reads the model");
    // A stream of steps keeps the run going, each step reading every weight field again
    // (the parameter cache keeps nothing).
    let steps = 40;
    let chunks = dir.path().join("chunks.npy");
    let t = nnc_formats::tensor::HostTensor::from_f32(vec![steps, 1, 512], &vec![1.0; steps * 512])
        .expect("a tensor");
    nnc_formats::npy::write_npy_file(&chunks, &t).expect("writes the chunks");
    let stream = format!("x={}", chunks.display());
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |bound: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    };
    let mut codes = std::collections::BTreeMap::new();
    for _ in 0..6 {
        std::fs::write(&model, &pristine).expect("writes the model");
        let started = std::time::Instant::now();
        let child = nnc()
            .arg("run")
            .arg(&model)
            .arg("--key-file")
            .arg(&key)
            .args([
                "--stream",
                &stream,
                "--parameter-cache",
                "1",
                "--output-dir",
            ])
            .arg(dir.path().join("out"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("nnc starts");
        std::thread::sleep(Duration::from_millis(next(500)));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&model)
            .expect("opens the model");
        file.set_len(next(pristine.len() as u64))
            .expect("truncates");
        let o = child.wait_with_output().expect("nnc ends");
        let text = stderr(&o);
        let code = o.status.code();
        assert!(
            matches!(code, Some(0 | 3 | 65)),
            "exit {:?} (None: killed by a signal): {text}",
            o.status
        );
        assert!(!text.contains("panicked"), "{text}");
        if code == Some(3) {
            assert!(text.contains("truncated while being read"), "{text}");
        }
        eprintln!("exit {code:?} after {:?}", started.elapsed());
        *codes.entry(code).or_insert(0) += 1;
    }
    eprintln!("exit codes: {codes:?}");
}
