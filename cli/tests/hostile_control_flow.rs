//! Control flow that once cost gigabytes at run time (issue 29, items 2 and 3), scaled
//! down: thousands of run-time Ifs (each subgraph's program held a copy of the whole
//! model's pool table: memory quadratic in the number of subgraphs), and ONNX Loops whose
//! scan-output accumulators were held several times over with no limit. Now every
//! subgraph's program holds only its own graph, and a loop's memory draws from the one
//! `arena` budget of the execution: refused at load when the sizes are known then (exit 4,
//! naming `--limit arena=SIZE`), and run in twice its state when it fits.

use std::path::Path;
use std::process::{Command, Output};

use nnc_compiler::onnx::proto::{
    self, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};
use nnc_formats::tensor::{DataType, HostTensor};

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("nnc runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// What a run of `nnc` did: its exit code, standard error and peak resident memory
/// (bytes; 0 where the platform does not say).
struct Measured {
    code: Option<i32>,
    stderr: String,
    peak: u64,
}

/// Runs `cmd`, measuring its own peak resident memory.
///
/// Not with `wait4` from here: Linux starts a spawned process's `ru_maxrss` at the
/// high-water mark of the process that spawned it (exec records the old address
/// space's peak), and this test process holds other tests' model bytes: a refusal that
/// used 10 MB measured 150 MB. So a fresh, small process does the spawning: this test
/// binary re-run as [`measuring_process`], which reports the child's code and peak.
fn run_measured(cmd: &mut Command) -> Measured {
    if !cfg!(target_os = "linux") {
        let o = run(cmd);
        return Measured {
            code: o.status.code(),
            stderr: stderr(&o),
            peak: 0,
        };
    }
    let args: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_str().expect("UTF-8 arguments").to_string())
        .collect();
    let o = run(Command::new(std::env::current_exe().unwrap())
        .args([
            "measuring_process",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("NNC_MEASURE_PROGRAM", cmd.get_program())
        .env("NNC_MEASURE_ARGS", args.join("\u{1f}")));
    let stdout = String::from_utf8_lossy(&o.stdout);
    // The harness prints "test measuring_process ... " before the report, on its line.
    let report = stdout
        .lines()
        .find_map(|l| l.split_once("NNC_MEASURED ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("the measuring process reported nothing: {stdout}"));
    let field = |name: &str| -> Option<u64> {
        report
            .split(' ')
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
    };
    Measured {
        code: field("code=").map(|c| c as i32),
        stderr: stderr(&o),
        peak: field("peak=").expect("a peak"),
    }
}

/// Not a test: the small process [`run_measured`] spawns its command from. It runs the
/// command in `NNC_MEASURE_PROGRAM` / `NNC_MEASURE_ARGS`, passes its standard error
/// through, and prints its exit code and peak resident memory (`wait4`).
#[test]
#[ignore = "run by run_measured only"]
#[cfg(target_os = "linux")]
fn measuring_process() {
    use std::io::Read;
    let program = std::env::var_os("NNC_MEASURE_PROGRAM").expect("run by run_measured");
    let args = std::env::var("NNC_MEASURE_ARGS").unwrap_or_default();
    // Reaped by wait4 below, which also reports the child's resource usage.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new(program)
        .args(args.split('\u{1f}').filter(|a| !a.is_empty()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("nnc runs");
    let mut text = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    eprint!("{text}");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: wait4 writes the child's status and resource usage into the zeroed values
    // it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::wait4(pid, &mut status, 0, &mut usage), pid);
        usage
    };
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status).to_string()
    } else {
        "none".into()
    };
    println!(
        "NNC_MEASURED code={code} peak={}",
        usage.ru_maxrss as u64 * 1024
    );
}

fn value(name: &str, elem: proto::tensor_proto::DataType, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem as i32,
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
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// An ONNX Loop of `steps` iterations (a constant trip count) over `v: f32[width]`, as
/// the audit's: `v = Sigmoid(v)` each iteration, with `scans` scan outputs (`Relu(v)`,
/// `Neg(v)`, `Abs(v)` of the iteration's input), each accumulated into a
/// `[steps, width]` tensor. Outputs: the final `v`, then the scan outputs.
fn loop_model(steps: i64, width: i64, scans: usize) -> Vec<u8> {
    use proto::tensor_proto::DataType as T;
    let scan_ops = ["Relu", "Neg", "Abs"];
    let mut body = GraphProto {
        name: "body".into(),
        node: vec![
            node("Identity", &["cond_in"], &["cond_out"]),
            node("Sigmoid", &["v_in"], &["v_out"]),
        ],
        input: vec![
            value("iter", T::Int64, &[]),
            value("cond_in", T::Bool, &[]),
            value("v_in", T::Float, &[width]),
        ],
        output: vec![
            value("cond_out", T::Bool, &[]),
            value("v_out", T::Float, &[width]),
        ],
        ..Default::default()
    };
    let mut outputs = vec![value("v_final", T::Float, &[width])];
    let mut node_outputs = vec!["v_final".to_string()];
    for (k, op) in scan_ops.iter().enumerate().take(scans) {
        let s = format!("s{k}");
        body.node.push(node(op, &["v_in"], &[&s]));
        body.output.push(value(&s, T::Float, &[width]));
        outputs.push(value(&format!("scan{k}"), T::Float, &[steps, width]));
        node_outputs.push(format!("scan{k}"));
    }
    let mut looped = node("Loop", &["M", "cond", "x"], &[]);
    looped.output = node_outputs;
    looped.attribute.push(AttributeProto {
        name: "body".into(),
        r#type: Some(proto::attribute_proto::AttributeType::Graph as i32),
        g: Some(body),
        ..Default::default()
    });
    let graph = GraphProto {
        name: "loop".into(),
        node: vec![looped],
        input: vec![value("x", T::Float, &[width])],
        output: outputs,
        initializer: vec![
            TensorProto {
                name: "M".into(),
                data_type: T::Int64 as i32,
                int64_data: vec![steps],
                ..Default::default()
            },
            TensorProto {
                name: "cond".into(),
                data_type: T::Bool as i32,
                int32_data: vec![1],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    proto::encode_model(&ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        producer_name: "nnc test".into(),
        graph: Some(graph),
        ..Default::default()
    })
}

/// Compiles `onnx` to `name.nnc` in `dir`.
fn compile(dir: &Path, name: &str, onnx: Vec<u8>) -> std::path::PathBuf {
    let source = dir.join(format!("{name}.onnx"));
    std::fs::write(&source, onnx).unwrap();
    let out = dir.join(format!("{name}.nnc"));
    let o = run(nnc()
        .arg("compile")
        .arg(&source)
        .arg("-o")
        .arg(&out)
        .args(["--encrypt", "none"]));
    assert!(o.status.success(), "{name}: {}", stderr(&o));
    out
}

fn run_loop(dir: &Path, model: &Path, limit: &str) -> Measured {
    run_measured(
        nnc()
            .arg("run")
            .arg(model)
            .arg("--input")
            .arg(dir.join("x.npy"))
            .arg("--output-dir")
            .arg(dir)
            .args(["--limit", limit, "--loop-timeout", "15s"]),
    )
}

/// Accumulators beyond what the compiler folds into constants (64 MiB), as the audit's
/// were, so that main computes them (FILL) before the loop: 17 iterations of 4 MiB rows.
const STEPS: usize = 17;
const WIDTH: usize = 1 << 20;
/// One accumulator's bytes (68 MiB).
const ACCUMULATOR: u64 = (STEPS * WIDTH * 4) as u64;

/// Writes the loop's input `x.npy` to `dir`.
fn write_loop_input(dir: &Path) -> Vec<f32> {
    let x: Vec<f32> = (0..WIDTH).map(|j| (j % 11) as f32 * 0.3 - 1.5).collect();
    nnc_formats::npy::write_npy_file(
        dir.join("x.npy"),
        &HostTensor::from_f32(vec![WIDTH], &x).unwrap(),
    )
    .unwrap();
    x
}

/// The audit's Loop with one scan output, scaled to a 68 MiB accumulator (A): main's
/// accumulator and the body's new one are known at load, 2 A together, so a limit below
/// that is refused before anything is allocated; above it the loop runs in about 2 A
/// (before: 5.7 A, 391 MB, and the default loop timeout ran out on the copies) and
/// computes what ONNX says.
#[test]
fn a_loop_accumulator_beyond_the_arena_limit_is_refused_and_one_within_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let model = compile(
        dir.path(),
        "loop",
        loop_model(STEPS as i64, WIDTH as i64, 1),
    );
    let x = write_loop_input(dir.path());
    let refused = run_loop(dir.path(), &model, "arena=128M");
    let text = &refused.stderr;
    assert_eq!(refused.code, Some(4), "{text}");
    assert!(text.contains("--limit arena=SIZE"), "{text}");
    assert!(text.contains("cannot load"), "{text}");
    assert!(!text.contains("panicked"), "{text}");
    assert!(
        refused.peak < ACCUMULATOR / 2,
        "refused at {} bytes",
        refused.peak
    );

    let ran = run_loop(dir.path(), &model, "arena=160M");
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    // The measurement sees the run's own memory: at least the accumulator it held.
    assert!(
        (ACCUMULATOR..3 * ACCUMULATOR).contains(&ran.peak),
        "peak resident memory {} bytes for an accumulator of {ACCUMULATOR}",
        ran.peak
    );
    let scan = nnc_formats::npy::read_npy_file(dir.path().join("output_1.npy")).unwrap();
    assert_eq!(scan.dtype, DataType::F32);
    assert_eq!(scan.shape, vec![STEPS, WIDTH]);
    let scan = scan.to_f32_vec().unwrap();
    // Row k is Relu of Sigmoid applied k times to x.
    let mut v = x;
    for (k, row) in scan.chunks_exact(WIDTH).enumerate() {
        for (j, (&got, &vj)) in row.iter().zip(&v).enumerate() {
            let want = vj.max(0.0);
            assert!(
                (got - want).abs() <= 1e-6,
                "row {k}, column {j}: {got} != {want}"
            );
        }
        for vj in &mut v {
            *vj = 1.0 / (1.0 + (-*vj).exp());
        }
    }
}

/// Three such accumulators (the audit's three 512 MiB ones against the default 2 GiB):
/// refused at load, below the memory of one of them.
#[test]
fn three_loop_accumulators_are_refused_beyond_the_arena_limit() {
    let dir = tempfile::tempdir().unwrap();
    let model = compile(
        dir.path(),
        "loop3",
        loop_model(STEPS as i64, WIDTH as i64, 3),
    );
    write_loop_input(dir.path());
    // compile says so first: the runtime will refuse it under that limit.
    let warned = run(nnc()
        .arg("compile")
        .arg(dir.path().join("loop3.onnx"))
        .arg("-o")
        .arg(dir.path().join("loop3-again.nnc"))
        .args(["--encrypt", "none", "--limit", "arena=300M"]));
    assert!(warned.status.success(), "{}", stderr(&warned));
    let text = stderr(&warned);
    assert!(
        text.contains("warning: ") && text.contains("--limit arena=SIZE"),
        "{text}"
    );
    let refused = run_loop(dir.path(), &model, "arena=300M");
    assert_eq!(refused.code, Some(4), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("--limit arena=SIZE"),
        "{}",
        refused.stderr
    );
    assert!(
        refused.peak < ACCUMULATOR / 2,
        "refused at {} bytes",
        refused.peak
    );
}

/// 2,000 Ifs kept as IF operations (4,000 subgraphs): the compiled model has a pool table
/// of 6,000 entries that every subgraph's program copied, 600 MB in all (5,000 Ifs: 3.6
/// GB, 20,000 aborted). Now each program holds only its own graph: tens of megabytes.
#[test]
fn thousands_of_run_time_ifs_run_in_memory_linear_in_the_model() {
    use nnc_compiler::synthetic::{ChainOp, onnx_chain};
    let dir = tempfile::tempdir().unwrap();
    let model = compile(dir.path(), "ifs", onnx_chain(ChainOp::IfKept, 2_000));
    let values: Vec<f32> = (0..16).map(|i| i as f32 * 0.25 - 2.0).collect();
    nnc_formats::npy::write_npy_file(
        dir.path().join("x.npy"),
        &HostTensor::from_f32(vec![1, 4, 2, 2], &values).unwrap(),
    )
    .unwrap();
    let relu: Vec<f32> = values.iter().map(|v| v.max(0.0)).collect();
    // Neg applied 2,000 times is the input itself.
    for (cond, expected) in [(true, relu), (false, values.clone())] {
        nnc_formats::npy::write_npy_file(
            dir.path().join("c.npy"),
            &HostTensor::new(DataType::Bool, vec![], vec![u8::from(cond)]).unwrap(),
        )
        .unwrap();
        let ran = run_measured(
            nnc()
                .arg("run")
                .arg(&model)
                .arg("--input")
                .arg(dir.path().join("x.npy"))
                .arg("--input")
                .arg(dir.path().join("c.npy"))
                .arg("--output-dir")
                .arg(dir.path()),
        );
        assert_eq!(ran.code, Some(0), "{}", ran.stderr);
        assert!(
            ran.peak < 150 << 20,
            "peak resident memory {} bytes",
            ran.peak
        );
        let y = nnc_formats::npy::read_npy_file(dir.path().join("output_0.npy")).unwrap();
        assert_eq!(y.to_f32_vec().unwrap(), expected, "condition {cond}");
    }
}
