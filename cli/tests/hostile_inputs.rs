//! Hostile input files as the audit of issue 29 met them, scaled down where the original
//! needs gigabytes: a stream whose stacked outputs outgrow every limit, an ONNX whose
//! external initializer is a sparse file of gigabytes, key files and models that are
//! FIFOs or devices. Each is refused cleanly, quickly and within a bound on the memory
//! of the `nnc` process (measured per child with `wait4`). Also the CLI parts of its
//! twelfth item: `bench --loop-timeout / --parameter-cache`, and compile's warning for a
//! memory plan beyond the arena limit.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nnc_compiler::onnx::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, encode_model, tensor_shape_proto, type_proto,
};
use nnc_formats::tensor::HostTensor;

const FLOAT: i32 = 1;
const INT64: i32 = 7;

/// What one `nnc` process did.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// Its peak resident set, in bytes. The kernel counts the spawning test process's
    /// own peak in it too (the child starts in its address space), so bounds here are
    /// well above what this test binary holds.
    peak_rss: u64,
    elapsed: Duration,
}

/// Runs `nnc ARGS`, killing it after `timeout`; its own peak RSS comes from `wait4`, so
/// tests running in parallel do not see each other's children.
#[allow(clippy::zombie_processes)] // reaped by wait4, which std's Child cannot see
fn nnc(args: &[&str], timeout: Duration) -> Outcome {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nnc"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nnc starts");
    let pid = child.id() as libc::pid_t;
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid; wait4 fills it and the status for our own
    // child, and the child is killed only while it is not yet reaped (its pid still ours).
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        loop {
            let r = libc::wait4(pid, &mut status, libc::WNOHANG, &mut u);
            if r == pid {
                break;
            }
            assert_eq!(r, 0, "wait4 failed");
            if started.elapsed() > timeout {
                libc::kill(pid, libc::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        u
    };
    let elapsed = started.elapsed();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Outcome {
        code,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        peak_rss: usage.ru_maxrss as u64 * 1024,
        elapsed,
    }
}

fn value_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
            denotation: String::new(),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: FLOAT,
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: format!("{op}_{}", outputs[0]),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn model(
    nodes: Vec<NodeProto>,
    initializer: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
) -> Vec<u8> {
    encode_model(&ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(GraphProto {
            node: nodes,
            name: "g".into(),
            initializer,
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The audit's streaming model: `y = Expand(x[1], [n])`, `n * 4` bytes out per step from
/// 4 bytes in.
fn expand_model(n: i64) -> Vec<u8> {
    let shape = TensorProto {
        name: "s".into(),
        data_type: INT64,
        dims: vec![1],
        raw_data: Some(n.to_le_bytes().to_vec().into()),
        ..Default::default()
    };
    model(
        vec![node("Expand", &["x", "s"], &["y"])],
        vec![shape],
        vec![value_info("x", &[1])],
        vec![value_info("y", &[n])],
    )
}

/// `steps` chunks of one float each, stacked: the audit's 928-byte file at 200 steps.
fn chunks(dir: &Path, steps: usize) -> PathBuf {
    let path = dir.join("chunks.npy");
    let t = HostTensor::from_f32(vec![steps, 1], &vec![1.0; steps]).unwrap();
    nnc_formats::npy::write_npy_file(&path, &t).unwrap();
    path
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(s(path)).unwrap();
    // SAFETY: a valid NUL-terminated path and mode.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

const MIB: u64 = 1 << 20;
/// What a refusal may cost, the test process's own share included (see `peak_rss`).
const SMALL: u64 = 256 * MIB;
const QUICK: Duration = Duration::from_secs(20);

/// Item 5: 64 KiB per step over 200 steps under a 1 MiB arena limit is refused before
/// the outputs are stacked, naming the limit; under a tensor limit below the stacked
/// output (but above one step's) likewise; within the limits it runs.
#[test]
fn streamed_outputs_are_bounded_by_the_arena_and_tensor_limits() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("expand.onnx");
    std::fs::write(&model, expand_model(16 * 1024)).unwrap();
    let chunks = chunks(dir.path(), 200);
    let out = dir.path().join("out");
    let stream = format!("x={}", s(&chunks));
    let base = [
        "run",
        s(&model),
        "--stream",
        &stream,
        "--output-dir",
        s(&out),
    ];

    let o = nnc(&[&base[..], &["--limit", "arena=1M"]].concat(), QUICK);
    assert_eq!(o.code, Some(4), "{}", o.stderr);
    assert!(o.stderr.contains("arena limit"), "{}", o.stderr);
    assert!(o.stderr.contains("--limit arena=SIZE"), "{}", o.stderr);
    assert!(o.stderr.contains("200 steps"), "{}", o.stderr);
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    assert!(!out.join("output_0.npy").exists());

    let o = nnc(&[&base[..], &["--limit", "tensor=4M"]].concat(), QUICK);
    assert_eq!(o.code, Some(4), "{}", o.stderr);
    assert!(o.stderr.contains("tensor limit"), "{}", o.stderr);
    assert!(
        o.stderr.contains("output 'y' stacked over 200 steps"),
        "{}",
        o.stderr
    );

    let o = nnc(&base, QUICK);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let stacked = nnc_formats::npy::read_npy_file(out.join("output_0.npy")).unwrap();
    assert_eq!(stacked.shape, vec![200, 16 * 1024]);
}

/// Item 5 at the audit's own size: 64 MiB per step over 200 steps (12.5 GiB stacked)
/// reached 4.4 GB and aborted; now the first step's outputs say the stack is beyond the
/// tensor limit, and the run stops there.
#[test]
fn the_audits_stream_is_refused_after_one_step() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("expand.onnx");
    std::fs::write(&model, expand_model(16 << 20)).unwrap();
    let chunks = chunks(dir.path(), 200);
    let stream = format!("x={}", s(&chunks));
    let out = dir.path().join("out");
    let o = nnc(
        &[
            "run",
            s(&model),
            "--stream",
            &stream,
            "--output-dir",
            s(&out),
        ],
        Duration::from_secs(60),
    );
    assert_eq!(o.code, Some(4), "{}", o.stderr);
    assert!(o.stderr.contains("--limit tensor=SIZE"), "{}", o.stderr);
    assert!(!o.stderr.contains("backtrace"), "{}", o.stderr);
    // One step's 64 MiB output (and the runtime's arena for it), not 200 of them.
    assert!(o.peak_rss < 512 * MIB, "peak RSS {} MiB", o.peak_rss / MIB);
}

/// An ONNX model whose only initializer `w` (float32 `[elements]`) lies in `w.bin`.
fn external_model(dir: &Path, elements: i64, file_bytes: u64) -> PathBuf {
    let w = TensorProto {
        name: "w".into(),
        data_type: FLOAT,
        dims: vec![elements],
        data_location: Some(1),
        external_data: vec![StringStringEntryProto {
            key: "location".into(),
            value: "w.bin".into(),
        }],
        ..Default::default()
    };
    let path = dir.join("ext.onnx");
    std::fs::write(
        &path,
        model(
            vec![node("Identity", &["w"], &["y"])],
            vec![w],
            vec![],
            vec![value_info("y", &[elements])],
        ),
    )
    .unwrap();
    // Sparse: costs nothing on disk, reads as zeros.
    let f = std::fs::File::create(dir.join("w.bin")).unwrap();
    f.set_len(file_bytes).unwrap();
    path
}

/// Item 6: an external initializer beyond the tensor limit is refused from its declared
/// dims before a byte of the file is read (the audit's 3 GiB made compile and inspect
/// use 6.15 GB first): scaled down, 1 GiB against a 64 MiB limit; and the audit's 3 and
/// 8 GiB against the default limit.
#[test]
fn external_data_beyond_the_tensor_limit_is_refused_before_it_is_read() {
    for (gib, limit) in [(1u64, Some("tensor=64M")), (3, None), (8, None)] {
        let dir = tempfile::tempdir().unwrap();
        let bytes = gib << 30;
        let model = external_model(dir.path(), (bytes / 4) as i64, bytes);
        let out = dir.path().join("out.nnc");
        for command in [
            vec!["compile", s(&model), "-o", s(&out), "--encrypt", "none"],
            vec!["inspect", s(&model)],
        ] {
            let mut args = command.clone();
            if let Some(l) = limit {
                args.extend(["--limit", l]);
            }
            let o = nnc(&args, QUICK);
            assert_eq!(o.code, Some(4), "{args:?}: {}", o.stderr);
            assert!(o.stderr.contains("tensor 'w'"), "{}", o.stderr);
            assert!(o.stderr.contains("--limit tensor=SIZE"), "{}", o.stderr);
            assert!(
                o.peak_rss < SMALL,
                "{args:?}: peak RSS {} MiB",
                o.peak_rss / MIB
            );
            assert!(!out.exists());
        }
    }
    // A declared size the file does not hold is malformed, whatever the limit.
    let dir = tempfile::tempdir().unwrap();
    let model = external_model(dir.path(), 1024, 100);
    let o = nnc(&["inspect", s(&model)], QUICK);
    assert_eq!(o.code, Some(65), "{}", o.stderr);
    assert!(o.stderr.contains("holds 100"), "{}", o.stderr);
}

/// Item 10: a key file is at most 96 bytes: /dev/zero (4.1 GB and 14 s before) and
/// /dev/urandom (endless) are refused at once as devices, a FIFO without blocking, a
/// large regular file unread.
#[test]
fn key_files_are_regular_and_small() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.onnx");
    std::fs::write(&model, expand_model(4)).unwrap();
    let out = dir.path().join("out.nnc");
    let fifo = dir.path().join("key.fifo");
    mkfifo(&fifo);
    let big = dir.path().join("big.key");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    for (key, code, says) in [
        (Path::new("/dev/zero"), 66, "character device"),
        (Path::new("/dev/urandom"), 66, "character device"),
        (fifo.as_path(), 66, "FIFO"),
        (dir.path(), 66, "directory"),
        (big.as_path(), 65, "more than 96 bytes"),
    ] {
        let o = nnc(
            &["compile", s(&model), "-o", s(&out), "--key-file", s(key)],
            Duration::from_secs(10),
        );
        assert_eq!(o.code, Some(code), "{}: {}", key.display(), o.stderr);
        assert!(o.stderr.contains(says), "{}: {}", key.display(), o.stderr);
        assert!(o.stderr.contains(s(key)), "{}: {}", key.display(), o.stderr);
        assert!(o.elapsed < Duration::from_secs(5), "{:?}", o.elapsed);
        assert!(o.peak_rss < SMALL, "peak RSS {} MiB", o.peak_rss / MIB);
        assert!(!out.exists());
    }
}

/// Item 10: every other input file is a regular file too; a FIFO or device given as a
/// model, `.nnc`, tensor file, stream, bound input or device profile is refused by
/// name, never waited on or read without end.
#[test]
fn inputs_that_are_not_regular_files_are_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.onnx");
    std::fs::write(&model, expand_model(4)).unwrap();
    let fifo_onnx = dir.path().join("fifo.onnx");
    let fifo_nnc = dir.path().join("fifo.nnc");
    let fifo_npy = dir.path().join("fifo.npy");
    let fifo_json = dir.path().join("fifo.json");
    for f in [&fifo_onnx, &fifo_nnc, &fifo_npy, &fifo_json] {
        mkfifo(f);
    }
    let out = dir.path().join("out.nnc");
    let input = format!("x={}", s(&fifo_npy));
    let bind = format!("x={}", s(&fifo_npy));
    let cases: Vec<Vec<&str>> = vec![
        vec!["compile", s(&fifo_onnx), "-o", s(&out), "--encrypt", "none"],
        vec!["inspect", s(&fifo_onnx)],
        vec!["inspect", s(&fifo_nnc)],
        vec!["dump", s(&fifo_nnc), "--format", "text"],
        vec!["verify", s(&fifo_nnc)],
        vec!["run", s(&fifo_nnc)],
        vec![
            "run",
            s(&model),
            "--input",
            &input,
            "--output-dir",
            s(dir.path()),
        ],
        vec![
            "run",
            s(&model),
            "--stream",
            &input,
            "--output-dir",
            s(dir.path()),
        ],
        vec![
            "compile",
            s(&model),
            "-o",
            s(&out),
            "--encrypt",
            "none",
            "--bind-input",
            &bind,
        ],
        vec![
            "compile",
            s(&model),
            "-o",
            s(&out),
            "--encrypt",
            "none",
            "--devices",
            s(&fifo_json),
        ],
        vec!["devices", "--devices", s(&fifo_json)],
        vec!["devices", "--devices", "/dev/zero"],
        vec!["compare", s(&fifo_npy), s(&fifo_npy)],
    ];
    for args in &cases {
        let o = nnc(args, Duration::from_secs(10));
        assert_eq!(o.code, Some(66), "{args:?}: {}", o.stderr);
        assert!(
            o.stderr.contains("not a regular file"),
            "{args:?}: {}",
            o.stderr
        );
        assert!(
            o.elapsed < Duration::from_secs(5),
            "{args:?}: {:?}",
            o.elapsed
        );
        assert!(!out.exists());
    }
}

/// Tensor files are read within the tensor limit: a larger file is refused unread
/// (exit 4), and so is a `.pb` whose dims declare more.
#[test]
fn tensor_files_are_read_within_the_tensor_limit() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.onnx");
    std::fs::write(&model, expand_model(4)).unwrap();
    // 4 MiB of stream chunks against a 1 MiB tensor limit.
    let big = dir.path().join("big.npy");
    let t = HostTensor::from_f32(vec![1 << 20, 1], &vec![0.0; 1 << 20]).unwrap();
    nnc_formats::npy::write_npy_file(&big, &t).unwrap();
    let stream = format!("x={}", s(&big));
    let o = nnc(
        &[
            "run",
            s(&model),
            "--stream",
            &stream,
            "--output-dir",
            s(dir.path()),
            "--limit",
            "tensor=1M",
        ],
        QUICK,
    );
    assert_eq!(o.code, Some(4), "{}", o.stderr);
    assert!(o.stderr.contains("tensor file"), "{}", o.stderr);
    assert!(o.stderr.contains("--limit tensor=SIZE"), "{}", o.stderr);
    // A small .pb declaring 2^40 floats in its dims.
    let pb = dir.path().join("x.pb");
    let proto = TensorProto {
        name: "x".into(),
        data_type: FLOAT,
        dims: vec![1 << 40],
        raw_data: Some(vec![0u8; 4].into()),
        ..Default::default()
    };
    std::fs::write(&pb, nnc_compiler::onnx::proto::encode_tensor(&proto)).unwrap();
    let input = format!("x={}", s(&pb));
    let o = nnc(
        &[
            "run",
            s(&model),
            "--input",
            &input,
            "--output-dir",
            s(dir.path()),
        ],
        QUICK,
    );
    assert_eq!(o.code, Some(4), "{}", o.stderr);
    assert!(o.stderr.contains("--limit tensor=SIZE"), "{}", o.stderr);
}

/// `tanh(sigmoid(x))` over `n` floats: one intermediate tensor of `4 n` bytes.
fn two_op_chain(n: i64) -> Vec<u8> {
    model(
        vec![
            node("Sigmoid", &["x"], &["h"]),
            node("Tanh", &["h"], &["y"]),
        ],
        vec![],
        vec![value_info("x", &[1, n])],
        vec![value_info("y", &[1, n])],
    )
}

/// Item 12: compile warns when the runtime's memory plan is beyond the arena limit (the
/// default, or the one given), since `nnc run` would refuse the file without a raised
/// limit; and it says nothing otherwise.
#[test]
fn compile_warns_of_a_plan_beyond_the_arena_limit() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("relu.onnx");
    std::fs::write(&model, two_op_chain(64 * 1024)).unwrap();
    let out = dir.path().join("relu.nnc");
    let compile = [
        "compile",
        s(&model),
        "-o",
        s(&out),
        "--encrypt",
        "none",
        "--json",
    ];
    let o = nnc(&compile, QUICK);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(!o.stderr.contains("warning"), "{}", o.stderr);
    let report: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let arena = report["arena_bytes"].as_u64().expect("a static plan");
    assert!(arena >= 256 * 1024, "{report}");

    let o = nnc(&[&compile[..], &["--limit", "arena=64K"]].concat(), QUICK);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.stderr.contains("warning: "), "{}", o.stderr);
    assert!(o.stderr.contains("--limit arena=SIZE"), "{}", o.stderr);
    assert!(o.stderr.contains("arena limit of 64 KiB"), "{}", o.stderr);
    // The warning is right: the runtime refuses the plan under that limit.
    let x = dir.path().join("x.npy");
    let t = HostTensor::from_f32(vec![1, 64 * 1024], &vec![1.0; 64 * 1024]).unwrap();
    nnc_formats::npy::write_npy_file(&x, &t).unwrap();
    let run = [
        "run",
        s(&out),
        "--input",
        s(&x),
        "--output-dir",
        s(dir.path()),
    ];
    let o = nnc(&[&run[..], &["--limit", "arena=64K"]].concat(), QUICK);
    assert_eq!(o.code, Some(4), "{}", o.stderr);
    let o = nnc(&run, QUICK);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
}

/// Item 12: bench takes run's `--loop-timeout` and `--parameter-cache`, with the same
/// meaning and the same bounds.
#[test]
fn bench_takes_the_loop_timeout_and_the_parameter_cache() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("relu.onnx");
    std::fs::write(&model, two_op_chain(16)).unwrap();
    let bench = ["bench", s(&model), "--runs", "2", "--json"];
    let o = nnc(
        &[
            &bench[..],
            &["--loop-timeout", "500ms", "--parameter-cache", "4096"],
        ]
        .concat(),
        QUICK,
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let report: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert!(report["parameter_cache"].is_object(), "{report}");
    let o = nnc(&[&bench[..2], &["--loop-timeout", "20s"]].concat(), QUICK);
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("maximum loop timeout"), "{}", o.stderr);
}
