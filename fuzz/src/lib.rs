//! The fuzz targets of nnc: one per parser and loader, each a function from bytes to
//! nothing that must never panic, abort, hang or allocate without bound on any input.
//!
//! `scripts/fuzz TARGET SECONDS` runs one under libFuzzer (`cargo fuzz`, stable toolchain,
//! no sanitizer: Rust's own checks plus overflow checks and debug assertions); the
//! binaries in `fuzz_targets/` are one line each. `tests/replay.rs` runs every target
//! over its committed corpus (`corpus/TARGET/`) and every input that once crashed it
//! (`regressions/TARGET/`), so CI replays them without a fuzzer.
//!
//! Errors are the expected outcome for almost every input; only a panic is a finding.
//! Each target uses small resource limits so that a run explores instead of
//! allocating: a limit hit is an error like any other.

use std::path::Path;

use bytes::Bytes;
use nnc_compiler::onnx::tensor::{ExternalDataContext, tensor_to_host};
use nnc_compiler::pipeline::{self, LowerOptions, SourceFormat};
use nnc_formats::container::Container;
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::limits::Limits;
use nnc_formats::tensor::HostTensor;
use nnc_runtime::{LoadOptions, PreparedModel, SimulatedNpu};

mod control_flow;
pub use control_flow::control_flow;

mod capi_sequence;
pub use capi_sequence::capi_sequence;

/// A fuzz target: bytes in, nothing out; only a panic (or abort, hang, runaway
/// allocation) is a finding.
pub type Target = fn(&[u8]);

/// Every target, by the name its binary and corpus directory carry.
pub const TARGETS: &[(&str, Target)] = &[
    ("onnx_import", onnx_import),
    ("tflite_import", tflite_import),
    ("nnc_file", nnc_file),
    ("cache_dir", cache_dir),
    ("device_profile", device_profile),
    ("npy", npy),
    ("tensor_proto", tensor_proto),
    ("compile_pipeline", compile_pipeline),
    ("quantize", quantize),
    ("control_flow", control_flow),
    ("capi_sequence", capi_sequence),
];

/// The fixed key of every file the targets seal: the fuzzer plays a key holder, so that
/// it reaches the parser and loader behind the authentication tags.
pub const FUZZ_KEY: [u8; 16] = *b"nnc fuzzing key!";

/// The signing key of the fuzzing seeds' signed files (a test key; format 1.3).
const FUZZ_SIGNER: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIMkdAMk7X1bH3zzvEVovXoFbxSsrGKv/Z6cbtxvU9V63
-----END PRIVATE KEY-----
";

/// A device key the seeds' files are also wrapped for (a test key; format 1.3).
const FUZZ_DEVICE: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VuBCIEIBDw8oBN5VuXQOq32r8VesZM+6lgjGha4UnADomPRuZk
-----END PRIVATE KEY-----
";

fn fuzz_key_pair(pem: &str) -> Option<nnc_formats::crypto::PrivateKey> {
    nnc_formats::crypto::PrivateKey::from_pem(pem).ok()
}

/// Limits small enough that a fuzzing run explores rather than allocates.
pub fn fuzz_limits() -> Limits {
    Limits {
        max_tensor_bytes: 16 << 20,
        max_folded_bytes: 32 << 20,
        max_arena_bytes: 64 << 20,
        max_calibration_bytes: 64 << 20,
    }
}

fn lower_options() -> LowerOptions {
    let mut options = LowerOptions::default();
    options.import.limits = fuzz_limits();
    options
}

/// ONNX model bytes through decoding, lowering and the optimization passes.
pub fn onnx_import(data: &[u8]) {
    let _ = lower(data, SourceFormat::Onnx);
}

/// TFLite model bytes through the flatbuffer verifier, lowering and the passes.
pub fn tflite_import(data: &[u8]) {
    let _ = lower(data, SourceFormat::Tflite);
}

fn lower(
    data: &[u8],
    format: SourceFormat,
) -> Result<pipeline::Lowered, nnc_compiler::CompileError> {
    pipeline::lower_bytes(
        Bytes::copy_from_slice(data),
        format,
        &ExternalDataContext::none(),
        &lower_options(),
    )
}

/// `.nnc` bytes as a reader meets them (verify, inspect, load with a key), then the same
/// bytes sealed again with the key, which takes them past authentication into the
/// structural parser, the field checks, the decryption and the runtime's loader.
pub fn nnc_file(data: &[u8]) {
    examine_nnc(data);
    let mut sealed = data.to_vec();
    if nnc_formats::container::reseal(&mut sealed, Some(&FUZZ_KEY)).is_ok() {
        examine_nnc(&sealed);
    }
}

fn examine_nnc(bytes: &[u8]) {
    // Format 1.3's trailer: the signature checked before any parse, a rewrap planned with
    // the key (which authenticates first), the device key opening the file.
    if let (Ok(meta), Some(signer), Some(device)) = (
        nnc_formats::container::copy_metadata(bytes),
        fuzz_key_pair(FUZZ_SIGNER),
        fuzz_key_pair(FUZZ_DEVICE),
    ) {
        let _ = nnc_formats::container::verify_signature(bytes, &meta, &[signer.public_key()]);
        let _ = nnc_formats::container::rewrap(
            &meta,
            &FUZZ_KEY,
            &nnc_formats::container::RecipientChanges {
                add: &[device.public_key()],
                ..Default::default()
            },
        );
        if let Ok(der) = device.to_pkcs8_der() {
            let _ = Container::open(bytes, Some(&der));
        }
    }
    if let Ok(c) = Container::parse(bytes) {
        let _ = c.key_block();
        let _ = c.signature();
        let _ = c.verify(Some(&FUZZ_KEY));
        let _ = c.verify(None);
        // What `nnc inspect` and `nnc dump` render.
        let _ = nnc_formats::nn::dump::to_text(&c.model);
        let _ = nnc_formats::nn::dump::to_json(&c.model);
        let _ = nnc_formats::nn::dump::to_dot(&c.model, &Default::default());
        if let Some(plan) = c.section(nnc_formats::container::SectionKind::ExecutionPlan) {
            let _ = nnc_formats::plan::ExecutionPlan::from_bytes(
                plan,
                c.model.main.operations.len(),
                c.model.main.operands.len(),
            );
        }
    }
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(&FUZZ_KEY);
    if let Ok(model) = PreparedModel::load_bytes(bytes.to_vec(), &npu, &load_options()) {
        run_with_zeros(&model);
    }
}

fn load_options() -> LoadOptions {
    LoadOptions {
        limits: fuzz_limits(),
        ..LoadOptions::default()
    }
}

/// Runs a prepared model once on zero inputs of its declared shapes (unknown dimensions
/// taken as 1), unless they would be large.
fn run_with_zeros(model: &PreparedModel) {
    let mut inputs = Vec::new();
    for info in model.inputs() {
        let shape: Vec<usize> = info.dims.iter().map(|&d| (d as usize).max(1)).collect();
        let bytes = shape
            .iter()
            .try_fold(info.dtype.size(), |acc, &d| acc.checked_mul(d));
        match bytes {
            Some(n) if n <= 1 << 20 => inputs.push(HostTensor {
                dtype: info.dtype,
                shape,
                data: vec![0; n],
            }),
            _ => return,
        }
    }
    // A WHILE that never ends stops at a short loop timeout, not NNAPI's 2 s default.
    let options = nnc_runtime::exec::ExecuteOptions {
        loop_timeout: Some(std::time::Duration::from_millis(20)),
        ..Default::default()
    };
    let _ = model.run_with(&inputs, &options);
}

/// A compilation-cache directory whose files come from the input, looked up for a small
/// model that was compiled and cached properly first: the runtime must treat whatever it
/// finds as a hit or a miss, never fail the load; `nnc cache` listing, verification and
/// cleaning must cope too.
///
/// The input is split into files at `\n--\n` separators: index, model cache, data cache.
pub fn cache_dir(data: &[u8]) {
    let Some(real) = real_cache() else {
        return;
    };
    let Ok(tmp) = tempfile::tempdir() else { return };
    let root = tmp.path().join("cache");
    let entry = root.join(&real.entry);
    if std::fs::create_dir_all(&entry).is_err() {
        return;
    }
    // The real entry's files, each replaced by a part of the input where there is one.
    let mut parts = split_parts(data).into_iter();
    for (path, good) in [
        (root.join("index.json"), &real.files[0]),
        (entry.join("model-0.bin"), &real.files[1]),
        (entry.join("data-0.bin"), &real.files[2]),
    ] {
        let bytes: &[u8] = parts.next().unwrap_or(good);
        let _ = std::fs::write(&path, bytes);
    }
    let options = LoadOptions {
        cache: Some(nnc_runtime::CacheConfig {
            dir: root.clone(),
            token: None,
        }),
        ..load_options()
    };
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(real.key.as_bytes());
    match PreparedModel::load_bytes(real.model.clone(), &npu, &options) {
        Ok(prepared) => run_with_zeros(&prepared),
        Err(e) => panic!("a cache directory made the load fail: {e}"),
    }
    if let Ok(dir) = nnc_formats::cache::CacheDir::open(&root, nnc_runtime::cache::CACHE_VERSION) {
        let _ = dir.list();
        let _ = dir.verify(Some(&FUZZ_KEY));
        let _ = dir.verify(None);
        let _ = dir.clean(0);
    }
}

/// A small compiled model, its key, and the files of its real cache entry, made once.
struct RealCache {
    model: Vec<u8>,
    key: Key,
    entry: String,
    files: [Vec<u8>; 3],
}

fn real_cache() -> Option<&'static RealCache> {
    static REAL: std::sync::OnceLock<Option<RealCache>> = std::sync::OnceLock::new();
    REAL.get_or_init(|| {
        let (model, key) = cached_model()?;
        let tmp = tempfile::tempdir().ok()?;
        let root = tmp.path().join("cache");
        let options = LoadOptions {
            cache: Some(nnc_runtime::CacheConfig {
                dir: root.clone(),
                token: None,
            }),
            ..load_options()
        };
        let npu = SimulatedNpu::new("npu0");
        npu.install_key(key.as_bytes());
        PreparedModel::load_bytes(model.clone(), &npu, &options).ok()?;
        let entry_dir = first_entry(&root)?;
        let entry = entry_dir.file_name()?.to_string_lossy().into_owned();
        let files = [
            std::fs::read(root.join("index.json")).ok()?,
            std::fs::read(entry_dir.join("model-0.bin")).ok()?,
            std::fs::read(entry_dir.join("data-0.bin")).ok()?,
        ];
        Some(RealCache {
            model,
            key,
            entry,
            files,
        })
    })
    .as_ref()
}

fn split_parts(data: &[u8]) -> Vec<&[u8]> {
    let sep = b"\n--\n";
    let mut parts = Vec::new();
    let mut rest = data;
    while let Some(pos) = rest.windows(sep.len()).position(|w| w == sep) {
        parts.push(&rest[..pos]);
        rest = &rest[pos + sep.len()..];
    }
    parts.push(rest);
    parts
}

fn first_entry(root: &Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(root)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
}

/// A tiny compiled model (FULLY_CONNECTED with weights and a fused RELU) and its key.
fn cached_model() -> Option<(Vec<u8>, Key)> {
    let m = cached_model_graph()?;
    let key = Key::new(Algorithm::Aes128, &FUZZ_KEY).ok()?;
    let bytes = nnc_compiler::emit::emit(
        &m,
        nnc_compiler::emit::EmitOptions {
            envelope: Default::default(),
            key: Some(&key),
            mode: Mode::Ctr,
            authenticate_only: false,
            reproducible: true,
            extra_sections: Vec::new(),
        },
    )
    .ok()?;
    Some((bytes, key))
}

fn cached_model_graph() -> Option<nnc_formats::nn::Model> {
    use nnc_formats::nn::{IoInfo, Lifetime, Model, Operand, OperandType, OperationType};
    use nnc_formats::tensor::DataType;
    let mut m = Model::default();
    let mut x = Operand::new(OperandType::TensorFloat32, vec![1, 4]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = m.add_operand(x);
    let w: Vec<f32> = (0..16).map(|i| i as f32 * 0.25 - 2.0).collect();
    let w = m.add_f32_tensor(vec![4, 4], &w);
    let b = m.add_f32_tensor(vec![4], &[0.5; 4]);
    let act = m.add_i32(1);
    let mut y = Operand::new(OperandType::TensorFloat32, vec![1, 4]);
    y.lifetime = Lifetime::SubgraphOutput;
    let y = m.add_operand(y);
    m.add_operation(
        OperationType::FullyConnected,
        vec![x, w, b, act],
        vec![y],
        "fc",
    );
    m.main.inputs = vec![x];
    m.main.outputs = vec![y];
    let info = |n: &str| IoInfo {
        name: n.into(),
        dtype: DataType::F32,
        dims: vec![1, 4],
    };
    m.input_info = vec![info("x")];
    m.output_info = vec![info("y")];
    Some(m)
}

/// Device-profile JSON through parsing and validation, and, when it is accepted,
/// partitioning a small model across it.
pub fn device_profile(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(profiles) = nnc_formats::device::parse_profiles(text, "fuzz.json") else {
        return;
    };
    let Some(model) = small_model() else { return };
    for mode in [
        nnc_formats::plan::PartitionMode::Fallback,
        nnc_formats::plan::PartitionMode::Strict,
    ] {
        let options = nnc_compiler::partition::PartitionOptions {
            mode,
            preference: nnc_formats::plan::Preference::FastSingleAnswer,
            encryption: Some((Algorithm::Aes128, Mode::Ctr)),
            no_plaintext_fallback: false,
        };
        let _ = nnc_compiler::partition::partition(&model, &profiles, &options);
    }
}

/// The README's example model, lowered (it mixes convolutions, pools, fully-connected
/// and elementwise operations, so a profile's rules all have something to decide).
fn small_model() -> Option<nnc_formats::nn::Model> {
    static MODEL: std::sync::OnceLock<Option<nnc_formats::nn::Model>> = std::sync::OnceLock::new();
    MODEL
        .get_or_init(|| {
            let bytes = include_bytes!("../../testdata/models/tiny_cnn.onnx");
            pipeline::lower_bytes(
                Bytes::from_static(bytes),
                SourceFormat::Onnx,
                &ExternalDataContext::none(),
                &LowerOptions::default(),
            )
            .ok()
            .map(|l| l.model)
        })
        .clone()
}

/// `.npy` bytes: reading, and when accepted, writing and reading back the same tensor.
pub fn npy(data: &[u8]) {
    if let Ok(t) = nnc_formats::npy::read_npy(data) {
        let again = nnc_formats::npy::read_npy(&nnc_formats::npy::write_npy(&t))
            .expect("a tensor nnc wrote must read back");
        assert_eq!(again, t, "npy round trip changed the tensor");
    }
}

/// ONNX `TensorProto` bytes (the `.pb` tensor files of `nnc run` and the ONNX test
/// suites): decoding and conversion to a host tensor.
pub fn tensor_proto(data: &[u8]) {
    if let Ok(proto) = nnc_compiler::onnx::proto::decode_tensor(data) {
        let _ = tensor_to_host(&proto, &ExternalDataContext::none());
    }
}

/// A source model (ONNX or TFLite, told apart as `nnc compile` does) through the whole
/// pipeline: lowering, optimization, encryption into a `.nnc`, verification, loading on
/// the simulated NPU, and one execution.
pub fn compile_pipeline(data: &[u8]) {
    let format = if data.len() >= 8 && &data[4..8] == b"TFL3" {
        SourceFormat::Tflite
    } else {
        SourceFormat::Onnx
    };
    let Ok(lowered) = lower(data, format) else {
        return;
    };
    let Ok(key) = Key::new(Algorithm::Aes128, &FUZZ_KEY) else {
        return;
    };
    let bytes = nnc_compiler::emit::emit(
        &lowered.model,
        nnc_compiler::emit::EmitOptions {
            envelope: Default::default(),
            key: Some(&key),
            mode: Mode::Cbc,
            authenticate_only: false,
            reproducible: true,
            extra_sections: Vec::new(),
        },
    )
    .expect("a model nnc lowered and validated must emit");
    let (container, _) =
        Container::open(&bytes, Some(&FUZZ_KEY)).expect("a file nnc wrote must open with its key");
    drop(container);
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(&FUZZ_KEY);
    if let Ok(model) = PreparedModel::load_bytes(bytes, &npu, &load_options()) {
        run_with_zeros(&model);
    }
}

/// A source model lowered, then quantized (every method, the range search on a small
/// budget, mixed precision) with two calibration samples of its declared inputs; a
/// quantized model must validate (the quantizer checks it) and run.
pub fn quantize(data: &[u8]) {
    use nnc_compiler::quantize::{self, CalibrationMethod, QuantizeOptions, RangeMethod};
    use nnc_formats::tensor::{DataType, HostTensor};
    let format = if data.len() >= 8 && &data[4..8] == b"TFL3" {
        SourceFormat::Tflite
    } else {
        SourceFormat::Onnx
    };
    let Ok(lowered) = lower(data, format) else {
        return;
    };
    let model = lowered.model;
    // Samples: each input filled with a ramp (and its negation), when its shape is known
    // and small; integer inputs get small non-negative values (ids, indices).
    let sample = |sign: f32| -> Option<Vec<HostTensor>> {
        model
            .input_info
            .iter()
            .map(|info| {
                let shape: Vec<usize> = info.dims.iter().map(|&d| d as usize).collect();
                let n = shape
                    .iter()
                    .try_fold(1usize, |a, &d| (d > 0).then(|| a.checked_mul(d)).flatten())?;
                if n > 1 << 16 {
                    return None;
                }
                let data: Vec<u8> = match info.dtype {
                    DataType::F32 => (0..n)
                        .flat_map(|i| (sign * (i % 17) as f32 / 4.0 - 1.0).to_le_bytes())
                        .collect(),
                    DataType::I64 => (0..n as i64).flat_map(|i| (i % 2).to_le_bytes()).collect(),
                    DataType::I32 => (0..n as i32).flat_map(|i| (i % 2).to_le_bytes()).collect(),
                    DataType::Bool | DataType::U8 | DataType::I8 => vec![0; n],
                    _ => return None,
                };
                HostTensor::new(info.dtype, shape, data).ok()
            })
            .collect()
    };
    let (Some(a), Some(b)) = (sample(1.0), sample(-1.0)) else {
        return;
    };
    let samples = [a, b];
    let runs = [
        QuantizeOptions {
            method: RangeMethod::Fixed(CalibrationMethod::MinMax),
            ..Default::default()
        },
        QuantizeOptions {
            search_evaluations: 12,
            per_channel: false,
            target_sqnr_db: Some(60.0),
            ..Default::default()
        },
    ];
    for options in runs {
        if let Ok(q) = quantize::quantize(&model, &samples, &options) {
            nnc_formats::nn::validate(&q.model).expect("a quantized model must validate");
        }
    }
    // Dynamic quantization (no samples needed; it validates its result itself), then the
    // quantized model run on a sample: its kernel must refuse or compute, never panic.
    let options = quantize::dynamic::DynamicOptions {
        per_channel: true,
        keep_float: Vec::new(),
    };
    if let Ok((q, summary)) = quantize::dynamic::quantize_dynamic(&model, &options)
        && summary.quantized > 0
        && let Ok(weights) = nnc_runtime::HostWeights::new(&q)
        && let Ok(program) = nnc_runtime::Program::prepare(
            &q,
            std::sync::Arc::new(weights),
            &nnc_runtime::PrepareOptions::default(),
        )
    {
        let _ = program.execute_host(&samples[0]);
    }
}

/// Seeds made by nnc itself for `target` (file name, bytes): what no file in the
/// repository provides. Empty for targets seeded from files only.
pub fn generated_seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    match target {
        "nnc_file" => {
            use nnc_formats::test_support::control_flow;
            let models: Vec<(&str, nnc_formats::nn::Model)> = [
                ("fc", cached_model_graph()),
                ("tiny_cnn", small_model()),
                // Control flow: the subgraphs section, IF, WHILE and nesting.
                ("if", Some(control_flow::if_model())),
                ("while", Some(control_flow::while_model())),
                ("nested", Some(control_flow::nested_model())),
            ]
            .into_iter()
            .filter_map(|(n, m)| Some((n, m?)))
            .collect();
            let Ok(key) = Key::new(Algorithm::Aes128, &FUZZ_KEY) else {
                return out;
            };
            for (name, model) in &models {
                for (label, key, mode, authenticate_only) in [
                    ("none", None, Mode::Ctr, false),
                    ("hmac", Some(&key), Mode::Ctr, true),
                    ("ctr", Some(&key), Mode::Ctr, false),
                    ("cbc", Some(&key), Mode::Cbc, false),
                    ("ecb", Some(&key), Mode::Ecb, false),
                ] {
                    if let Ok(bytes) = nnc_compiler::emit::emit(
                        model,
                        nnc_compiler::emit::EmitOptions {
                            envelope: Default::default(),
                            key,
                            mode,
                            authenticate_only,
                            reproducible: true,
                            extra_sections: Vec::new(),
                        },
                    ) {
                        out.push((format!("{name}-{label}.nnc"), bytes));
                    }
                }
                // Format 1.3 with a device recipient and a signature (GCM and CBC).
                let (Some(signer), Some(device)) =
                    (fuzz_key_pair(FUZZ_SIGNER), fuzz_key_pair(FUZZ_DEVICE))
                else {
                    continue;
                };
                let recipients = [device.public_key()];
                for (label, mode) in [("signed-gcm", Mode::Gcm), ("signed-cbc", Mode::Cbc)] {
                    if let Ok(bytes) = nnc_compiler::emit::emit(
                        model,
                        nnc_compiler::emit::EmitOptions {
                            envelope: nnc_formats::container::Envelope {
                                recipients: &recipients,
                                cipher: None,
                                signer: Some((&signer, br#"{"seed":true}"#.to_vec())),
                            },
                            key: Some(&key),
                            mode,
                            authenticate_only: false,
                            reproducible: false,
                            extra_sections: Vec::new(),
                        },
                    ) {
                        out.push((format!("{name}-{label}.nnc"), bytes));
                    }
                }
            }
        }
        "cache_dir" => {
            if let Some(real) = real_cache() {
                out.push(("cache.bin".into(), real.files.join(&b"\n--\n"[..])));
                // A cache without the index, and one with the index alone.
                out.push((
                    "no-index.bin".into(),
                    [&b""[..], &real.files[1], &real.files[2]].join(&b"\n--\n"[..]),
                ));
                out.push(("index-only.bin".into(), real.files[0].clone()));
            }
        }
        "npy" => {
            use nnc_formats::tensor::DataType;
            for dtype in DataType::ALL {
                let t = HostTensor {
                    dtype,
                    shape: vec![2, 3],
                    data: (0..6 * dtype.size()).map(|i| i as u8).collect(),
                };
                out.push((
                    format!("{}.npy", dtype.name()),
                    nnc_formats::npy::write_npy(&t),
                ));
            }
        }
        _ => {}
    }
    out
}
