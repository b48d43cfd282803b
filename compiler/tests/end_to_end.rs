//! Compile, load and run: the runtime on compiled files, checked against a real engine's
//! output (ONNX Runtime's, in ../shared/models) and against itself.

use std::sync::{Arc, OnceLock};

use nnc_compiler::emit::{self, EmitOptions};
use nnc_compiler::pipeline::{LowerOptions, lower_file};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::Model;
use nnc_formats::npy::read_npy_file;
use nnc_formats::tensor::HostTensor;
use nnc_formats::test_support::shared_model;
use nnc_runtime::exec::{ExecuteOptions, InputTensor, OutputBuffer};
use nnc_runtime::{LoadOptions, PreparedModel, RuntimeError, SimulatedNpu};

struct Mobilenet {
    model: Model,
    input: HostTensor,
    expected: Vec<f32>,
}

fn mobilenet() -> Option<&'static Mobilenet> {
    static M: OnceLock<Option<Mobilenet>> = OnceLock::new();
    M.get_or_init(|| {
        let path = shared_model("mobilenet_v2.onnx")?;
        let model = lower_file(&path, &LowerOptions::default())
            .expect("lowers")
            .model;
        let input = read_npy_file(path.with_extension("onnx.input.npy")).expect("input");
        let expected = read_npy_file(path.with_extension("onnx.output.npy"))
            .expect("output")
            .to_f32_vec()
            .expect("float output");
        Some(Mobilenet {
            model,
            input,
            expected,
        })
    })
    .as_ref()
}

fn compile(model: &Model, key: Option<&Key>, mode: Mode) -> Vec<u8> {
    emit::emit(
        model,
        EmitOptions {
            envelope: Default::default(),
            key,
            mode,
            authenticate_only: false,
            reproducible: false,
            extra_sections: Vec::new(),
        },
    )
    .expect("emit")
}

fn load(
    bytes: Vec<u8>,
    key: Option<&Key>,
    npu: SimulatedNpu,
) -> Result<PreparedModel, RuntimeError> {
    if let Some(k) = key {
        npu.install_key(k.as_bytes());
    }
    PreparedModel::load_bytes(bytes, &npu, &LoadOptions::default())
}

/// The NNAPI comparison rule: |a - e| <= atol + rtol * |e|, NaN never passes.
fn assert_close(actual: &[f32], expected: &[f32], atol: f32, rtol: f32, what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            a.is_finite() && (a - e).abs() <= atol + rtol * e.abs(),
            "{what}: element {i}: {a} vs {e}"
        );
    }
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn mobilenet_v2_encrypted_reproduces_onnx_runtime() {
    let Some(m) = mobilenet() else { return };
    for (algorithm, mode) in [(Algorithm::Sm4, Mode::Cbc), (Algorithm::Aes128, Mode::Ctr)] {
        let key = Key::generate(algorithm).unwrap();
        let bytes = compile(&m.model, Some(&key), mode);
        let prepared = load(bytes, Some(&key), SimulatedNpu::new("npu0")).unwrap();
        let outputs = prepared.run(std::slice::from_ref(&m.input)).unwrap();
        assert_eq!(outputs[0].shape, vec![1, 1000]);
        // ONNX Runtime's own output is the reference: the tolerance.
        assert_close(
            &outputs[0].to_f32_vec().unwrap(),
            &m.expected,
            1e-4,
            1e-3,
            &format!("{algorithm:?}-{mode:?}"),
        );
    }
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn tampered_files_and_wrong_keys_are_refused_at_load() {
    let Some(m) = mobilenet() else { return };
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let bytes = compile(&m.model, Some(&key), Mode::Ctr);
    // Wrong key.
    let wrong = Key::generate(Algorithm::Aes128).unwrap();
    let err = load(bytes.clone(), Some(&wrong), SimulatedNpu::new("npu0"))
        .err()
        .expect("wrong key must fail");
    assert!(
        err.to_string().contains("wrong key or tampered file"),
        "{err}"
    );
    // No key at all.
    let err = load(bytes.clone(), None, SimulatedNpu::new("npu0"))
        .err()
        .expect("missing key must fail");
    assert!(err.to_string().contains("key is required"), "{err}");
    // One flipped bit in the operator info, and one in the last weight field.
    let last_field = nnc_formats::container::Container::parse(&bytes)
        .unwrap()
        .fields
        .iter()
        .flatten()
        .last()
        .map(|f| (f.offset + f.length - 100) as usize)
        .unwrap();
    for position in [600, last_field] {
        let mut tampered = bytes.clone();
        tampered[position] ^= 0x08;
        let err = load(tampered, Some(&key), SimulatedNpu::new("npu0"))
            .err()
            .expect("tampering must fail");
        assert!(
            err.to_string().contains("wrong key or tampered file"),
            "byte {position}: {err}"
        );
    }
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn a_parameter_cache_smaller_than_the_model_gives_the_same_outputs() {
    let Some(m) = mobilenet() else { return };
    let key = Key::generate(Algorithm::Sm4).unwrap();
    let bytes = compile(&m.model, Some(&key), Mode::Ofb);
    let full = load(bytes.clone(), Some(&key), SimulatedNpu::new("npu0")).unwrap();
    let reference = full.run(std::slice::from_ref(&m.input)).unwrap();
    // 2 MB for 14 MB of weights: most must be evicted and decrypted again.
    let small = load(
        bytes,
        Some(&key),
        SimulatedNpu::new("npu1").with_cache_capacity(2 << 20),
    )
    .unwrap();
    for round in 0..2 {
        let out = small.run(std::slice::from_ref(&m.input)).unwrap();
        assert_eq!(
            out[0].data, reference[0].data,
            "round {round}: outputs differ from the unbounded cache"
        );
    }
    let stats = small.cache_stats();
    assert!(stats.evictions > 0, "{stats:?}");
    assert!(stats.resident_bytes <= 2 << 20, "{stats:?}");
    assert!(
        stats.decryptions > 53,
        "fields were not decrypted again after eviction: {stats:?}"
    );
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn four_threads_executing_one_prepared_model_all_get_correct_results() {
    let Some(m) = mobilenet() else { return };
    let bytes = compile(&m.model, None, Mode::Ctr);
    let prepared = Arc::new(load(bytes, None, SimulatedNpu::new("npu0")).unwrap());
    // Each thread runs its own input (a scaled copy) and checks against a serial run.
    let inputs: Vec<HostTensor> = (0..4)
        .map(|k| {
            let values: Vec<f32> = m
                .input
                .to_f32_vec()
                .unwrap()
                .iter()
                .map(|v| v * (1.0 + k as f32 * 0.1))
                .collect();
            HostTensor::from_f32(m.input.shape.clone(), &values).unwrap()
        })
        .collect();
    let serial: Vec<Vec<u8>> = inputs
        .iter()
        .map(|x| {
            prepared.run(std::slice::from_ref(x)).unwrap()[0]
                .data
                .clone()
        })
        .collect();
    let handles: Vec<_> = inputs
        .iter()
        .cloned()
        .map(|x| {
            let p = Arc::clone(&prepared);
            std::thread::spawn(move || {
                (0..3)
                    .map(|_| p.run(std::slice::from_ref(&x)).unwrap()[0].data.clone())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for (k, h) in handles.into_iter().enumerate() {
        for out in h.join().unwrap() {
            assert_eq!(out, serial[k], "thread {k} got a different result");
        }
    }
    // Asynchronous executions on the same model.
    let pending: Vec<_> = inputs
        .iter()
        .map(|x| prepared.run_async(vec![x.clone()]).unwrap())
        .collect();
    for (k, e) in pending.into_iter().enumerate() {
        assert_eq!(e.wait().unwrap()[0].data, serial[k], "async execution {k}");
    }
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn several_prepared_models_coexist_on_one_device() {
    let Some(m) = mobilenet() else { return };
    let tiny = lower_file(
        std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/models/tiny_cnn.onnx"
        )),
        &LowerOptions::default(),
    )
    .unwrap()
    .model;
    let key = Key::generate(Algorithm::Aes256).unwrap();
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(key.as_bytes());
    let big = PreparedModel::load_bytes(
        compile(&m.model, Some(&key), Mode::Cbc),
        &npu,
        &LoadOptions::default(),
    )
    .unwrap();
    let small = PreparedModel::load_bytes(
        compile(&tiny, Some(&key), Mode::Cfb),
        &npu,
        &LoadOptions::default(),
    )
    .unwrap();
    let tiny_input = read_npy_file(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/models/tiny_cnn.input.npy"
    ))
    .unwrap();
    let tiny_expected = read_npy_file(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/models/tiny_cnn.output.npy"
    ))
    .unwrap()
    .to_f32_vec()
    .unwrap();
    for _ in 0..2 {
        let a = big.run(std::slice::from_ref(&m.input)).unwrap();
        assert_close(
            &a[0].to_f32_vec().unwrap(),
            &m.expected,
            1e-4,
            1e-3,
            "MobileNetV2",
        );
        let b = small.run(std::slice::from_ref(&tiny_input)).unwrap();
        assert_close(
            &b[0].to_f32_vec().unwrap(),
            &tiny_expected,
            1e-5,
            1e-4,
            "tiny_cnn",
        );
    }
}

#[test]
fn a_too_small_output_buffer_is_reported_per_output() {
    let tiny = lower_file(
        std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/onnx/split_equal/model.onnx"
        )),
        &LowerOptions::default(),
    )
    .unwrap()
    .model;
    assert!(
        tiny.main.outputs.len() >= 2,
        "the case needs several outputs"
    );
    let prepared = load(
        compile(&tiny, None, Mode::Ctr),
        None,
        SimulatedNpu::new("npu0"),
    )
    .unwrap();
    let input = read_npy_file(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/onnx/split_equal/input_0.npy"
    ))
    .unwrap();
    let shape = input.shape.clone();
    let sizes: Vec<usize> = (0..tiny.main.outputs.len())
        .map(|k| {
            prepared
                .program()
                .output_byte_size(k)
                .expect("static output size")
        })
        .collect();
    // Every output gets a buffer one element short, in turn: the error names it.
    for short in 0..sizes.len() {
        let mut buffers: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0xAB; n]).collect();
        buffers[short].truncate(sizes[short] - 4);
        let mut outs: Vec<OutputBuffer> =
            buffers.iter_mut().map(|b| OutputBuffer::new(b)).collect();
        let err = prepared
            .execute(
                &[InputTensor::with_shape(&shape, &input.data)],
                &mut outs,
                &ExecuteOptions::default(),
            )
            .unwrap_err();
        match err {
            RuntimeError::OutputTooSmall {
                output,
                needed,
                provided,
            } => {
                assert_eq!(
                    (output, needed, provided),
                    (short, sizes[short], sizes[short] - 4)
                );
            }
            other => panic!("expected OutputTooSmall, got {other}"),
        }
        drop(outs);
        assert!(
            buffers.iter().all(|b| b.iter().all(|&x| x == 0xAB)),
            "an output was written before the size check"
        );
    }
}

#[test]
fn timing_is_reported_only_when_asked() {
    let tiny = lower_file(
        std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/models/tiny_cnn.onnx"
        )),
        &LowerOptions::default(),
    )
    .unwrap()
    .model;
    let prepared = load(
        compile(&tiny, None, Mode::Ctr),
        None,
        SimulatedNpu::new("npu0"),
    )
    .unwrap();
    let input = read_npy_file(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/models/tiny_cnn.input.npy"
    ))
    .unwrap();
    let size = prepared.program().output_byte_size(0).unwrap();
    let mut out = vec![0u8; size];
    let run = |measure: bool, out: &mut Vec<u8>| {
        let mut bufs = [OutputBuffer::new(out)];
        prepared
            .execute(
                &[InputTensor::with_shape(&input.shape, &input.data)],
                &mut bufs,
                &ExecuteOptions {
                    measure_timing: measure,
                    ..ExecuteOptions::default()
                },
            )
            .unwrap()
    };
    assert!(run(false, &mut out).duration.is_none());
    assert!(run(true, &mut out).duration.is_some());
    let (_, timing) = prepared.run_timed(std::slice::from_ref(&input)).unwrap();
    assert!(timing.in_driver >= timing.on_device);
}
