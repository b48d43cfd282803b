//! The C ABI exercised from Rust through the exported functions: result codes for wrong
//! keys, null pointers, wrong states and small buffers; reusable executions; outputs
//! whose shape is known only when computing.

mod common;

use std::ffi::{CStr, c_void};
use std::ptr::{null, null_mut};

use common::{
    Execution, Model, argmax, c_path, compile, compute, emit_model, execution, key, last_error,
    load_buffer, set_input, set_output, testdata, tiny, write_key_file,
};
use nnc_capi::*;
use nnc_formats::tensor::HostTensor;

fn output_size(e: &Execution, index: u32) -> Result<usize, NncResult> {
    let mut size = 0;
    // SAFETY: a live execution and a valid out-pointer.
    match unsafe { nnc_execution_get_output_size(e.0, index, &mut size) } {
        NncResult::NoError => Ok(size),
        r => Err(r),
    }
}

fn output_dims(e: &Execution, index: u32) -> Result<Vec<u32>, NncResult> {
    let mut rank = 0;
    // SAFETY: a live execution and a valid out-pointer.
    let r = unsafe { nnc_execution_get_output_rank(e.0, index, &mut rank) };
    if r != NncResult::NoError {
        return Err(r);
    }
    let mut dims = vec![0u32; rank as usize];
    // SAFETY: `dims` holds `rank` values.
    let r = unsafe { nnc_execution_get_output_dimensions(e.0, index, dims.as_mut_ptr(), rank) };
    if r != NncResult::NoError {
        return Err(r);
    }
    Ok(dims)
}

fn info(
    model: &Model,
    input: bool,
    index: u32,
) -> Result<(String, NncElementType, Vec<u32>, usize), NncResult> {
    let mut i = NncOperandInfo {
        name: null(),
        element_type: NncElementType::Bool,
        rank: 0,
        dimensions: null(),
        byte_size: 0,
    };
    // SAFETY: a live model and a valid out-pointer.
    let r = unsafe {
        if input {
            nnc_model_get_input(model.0, index, &mut i)
        } else {
            nnc_model_get_output(model.0, index, &mut i)
        }
    };
    if r != NncResult::NoError {
        return Err(r);
    }
    // SAFETY: the name and dimensions point into the live model (rank values).
    let (name, dims) = unsafe {
        (
            CStr::from_ptr(i.name).to_string_lossy().into_owned(),
            std::slice::from_raw_parts(i.dimensions, i.rank as usize).to_vec(),
        )
    };
    Ok((name, i.element_type, dims, i.byte_size))
}

#[test]
fn wrong_key_missing_key_and_tampering_are_integrity_errors() {
    let (bytes, right, _, _) = tiny();
    let wrong = key();
    assert_eq!(
        load_buffer(&bytes, Some(wrong.as_bytes())).err(),
        Some(NncResult::IntegrityFailure)
    );
    assert!(
        last_error().contains("wrong key or tampered file"),
        "{}",
        last_error()
    );
    // A key of another length (another algorithm) is a wrong key too.
    assert_eq!(
        load_buffer(&bytes, Some(&[7u8; 32])).err(),
        Some(NncResult::IntegrityFailure)
    );
    assert_eq!(
        load_buffer(&bytes, None).err(),
        Some(NncResult::KeyRequired)
    );
    assert!(last_error().contains("key is required"), "{}", last_error());
    // One flipped byte in the authenticated metadata.
    let mut tampered = bytes.clone();
    let at = tampered.len() / 2;
    tampered[at] ^= 0x40;
    let r = load_buffer(&tampered, Some(&right)).err();
    assert!(
        matches!(r, Some(NncResult::IntegrityFailure | NncResult::BadData)),
        "{r:?}: {}",
        last_error()
    );
    assert_eq!(
        load_buffer(b"not a model", Some(&right)).err(),
        Some(NncResult::BadData)
    );
    // The right key loads, and success clears the message.
    assert!(load_buffer(&bytes, Some(&right)).is_ok());
    assert_eq!(last_error(), "");
}

/// The audit's key files: `/dev/zero` (read for 4 GB), `/dev/urandom` (never ended), a
/// FIFO (blocked) and an oversized file are refused at once, without reading them.
#[test]
fn key_files_that_are_not_small_regular_files_are_refused_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fifo = dir.path().join("fifo");
    let c = c_path(&fifo);
    // SAFETY: a NUL-terminated path and a valid mode.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let long = dir.path().join("long.key");
    // A valid key followed by more: a key file is at most 96 bytes.
    std::fs::write(&long, format!("{}\n{}", "ab".repeat(32), " ".repeat(64))).expect("write");
    let sparse = dir.path().join("sparse.key");
    std::fs::File::create(&sparse)
        .and_then(|f| f.set_len(4 << 30))
        .expect("a sparse file");
    let cases = [
        (std::path::PathBuf::from("/dev/zero"), "character device"),
        (std::path::PathBuf::from("/dev/urandom"), "character device"),
        (fifo, "FIFO"),
        (dir.path().to_path_buf(), "directory"),
        (long, "more than 96 bytes"),
        (sparse, "more than 96 bytes"),
    ];
    for (path, what) in cases {
        let started = std::time::Instant::now();
        let mut obj = null_mut();
        // SAFETY: a NUL-terminated path and a valid out-pointer.
        let r = unsafe { nnc_key_from_file(c_path(&path).as_ptr(), &mut obj) };
        assert_eq!(
            r,
            NncResult::BadData,
            "{}: {}",
            path.display(),
            last_error()
        );
        assert!(obj.is_null());
        assert!(last_error().contains(what), "{}", last_error());
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{} took {:?}",
            path.display(),
            started.elapsed()
        );
    }
}

#[test]
fn key_files_as_nnc_keygen_writes_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let k = key();
    let path = dir.path().join("model.key");
    write_key_file(&path, &k);
    let mut obj = null_mut();
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    let r = unsafe { nnc_key_from_file(c_path(&path).as_ptr(), &mut obj) };
    assert_eq!(r, NncResult::NoError, "{}", last_error());
    let bytes = compile(&testdata("tiny_cnn.onnx"), Some(&k));
    let model_path = dir.path().join("tiny.nnc");
    std::fs::write(&model_path, &bytes).expect("write the model");
    let mut m = null_mut();
    // SAFETY: valid path, live key, valid out-pointer.
    let r = unsafe { nnc_model_load_file(c_path(&model_path).as_ptr(), obj, &mut m) };
    assert_eq!(r, NncResult::NoError, "{}", last_error());
    let _model = Model(m);
    nnc_key_free(obj);

    let bad = dir.path().join("bad.key");
    for (text, what) in [
        ("00112233", "hex digits"),
        ("zz".repeat(16).as_str(), "not a hex digit"),
    ] {
        std::fs::write(&bad, text).expect("write");
        let mut obj = null_mut();
        // SAFETY: as above.
        let r = unsafe { nnc_key_from_file(c_path(&bad).as_ptr(), &mut obj) };
        assert_eq!(r, NncResult::BadData);
        assert!(obj.is_null());
        assert!(last_error().contains(what), "{}", last_error());
    }
    let mut obj = null_mut();
    // SAFETY: as above.
    let r = unsafe { nnc_key_from_file(c_path(&dir.path().join("absent")).as_ptr(), &mut obj) };
    assert_eq!(r, NncResult::Unmappable);
    let mut m = null_mut();
    // SAFETY: as above (null key: none).
    let r = unsafe {
        nnc_model_load_file(
            c_path(&dir.path().join("absent.nnc")).as_ptr(),
            null(),
            &mut m,
        )
    };
    assert_eq!(r, NncResult::Unmappable);
    // Key lengths other than 16, 24, 32 bytes.
    let mut obj = null_mut();
    // SAFETY: valid slice and out-pointer.
    let r = unsafe { nnc_key_from_bytes([1u8; 5].as_ptr(), 5, &mut obj) };
    assert_eq!(r, NncResult::BadData);
}

/// A model compiled for a device's public key (format 1.3 recipients) loads with the
/// device's PEM private key file, and not with another device's.
#[test]
fn device_key_files_open_models_compiled_for_them() {
    use nnc_formats::container::{Envelope, WriteOptions};
    use nnc_formats::crypto::{KeyAlgorithm, PrivateKey};
    let dir = tempfile::tempdir().expect("temp dir");
    let device = PrivateKey::generate(KeyAlgorithm::X25519).expect("a device key");
    let other = PrivateKey::generate(KeyAlgorithm::X25519).expect("another key");
    let lowered = nnc_compiler::pipeline::lower_file(
        &testdata("tiny_cnn.onnx"),
        &nnc_compiler::pipeline::LowerOptions::default(),
    )
    .expect("compiles");
    let recipients = [device.public_key()];
    let bytes = nnc_formats::container::write(
        &lowered.model,
        &WriteOptions {
            key: None,
            mode: nnc_formats::crypto::Mode::Ctr,
            authenticate_only: false,
            reproducible: false,
            producer: "test".into(),
            arena: None,
            extra_sections: Vec::new(),
            envelope: Envelope {
                recipients: &recipients,
                cipher: Some(nnc_formats::crypto::Algorithm::Aes128),
                signer: None,
            },
        },
    )
    .expect("writes");
    let model_path = dir.path().join("tiny.nnc");
    std::fs::write(&model_path, &bytes).expect("write the model");
    for (key, expected) in [
        (&device, NncResult::NoError),
        (&other, NncResult::IntegrityFailure),
    ] {
        let path = dir.path().join("device.pem");
        std::fs::write(&path, key.to_pem().expect("pem").as_bytes()).expect("write");
        let mut obj = null_mut();
        // SAFETY: a NUL-terminated path and a valid out-pointer.
        let r = unsafe { nnc_key_from_file(c_path(&path).as_ptr(), &mut obj) };
        assert_eq!(r, NncResult::NoError, "{}", last_error());
        let mut m = null_mut();
        // SAFETY: valid path, live key, valid out-pointer.
        let r = unsafe { nnc_model_load_file(c_path(&model_path).as_ptr(), obj, &mut m) };
        assert_eq!(r, expected, "{}", last_error());
        if r == NncResult::NoError {
            drop(Model(m));
        }
        nnc_key_free(obj);
    }
    // A signing key is not a device key.
    let signer = PrivateKey::generate(KeyAlgorithm::Ed25519).expect("a signing key");
    let path = dir.path().join("signer.pem");
    std::fs::write(&path, signer.to_pem().expect("pem").as_bytes()).expect("write");
    let mut obj = null_mut();
    // SAFETY: as above.
    let r = unsafe { nnc_key_from_file(c_path(&path).as_ptr(), &mut obj) };
    assert_eq!(r, NncResult::BadData);
    assert!(last_error().contains("signing key"), "{}", last_error());
}

#[test]
fn null_pointers_are_error_codes() {
    let (bytes, k, input, _) = tiny();
    let model = load_buffer(&bytes, Some(&k)).expect("loads");
    let e = execution(&model);
    let mut out = null_mut();
    let mut count = 0u32;
    let mut size = 0usize;
    let mut ns = 0u64;
    // SAFETY: every call gets null where the contract allows checking it; the other
    // pointers are valid.
    unsafe {
        assert_eq!(
            nnc_model_load_file(null(), null(), &mut out),
            NncResult::UnexpectedNull
        );
        assert!(last_error().contains("'path' is null"), "{}", last_error());
        assert_eq!(
            nnc_model_load_file(c"x.nnc".as_ptr(), null(), null_mut()),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_model_load_buffer(null(), 10, null(), &mut out),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_key_from_bytes(null(), 16, &mut null_mut()),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_key_from_file(null(), &mut null_mut()),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_model_input_count(null(), &mut count),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_model_output_count(model.0, null_mut()),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_model_get_input(model.0, 0, null_mut()),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_execution_create(null(), &mut null_mut()),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_execution_create(model.0, null_mut()),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_execution_set_input(e.0, 0, null(), 4),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_execution_set_input(null_mut(), 0, input.as_ptr().cast(), 4),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_execution_set_output(e.0, 0, null_mut(), 40),
            NncResult::UnexpectedNull
        );
        assert_eq!(nnc_execution_compute(null_mut()), NncResult::UnexpectedNull);
        assert_eq!(
            nnc_execution_get_output_size(e.0, 0, null_mut()),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_execution_get_output_rank(null_mut(), 0, &mut count),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_execution_get_timing(e.0, &mut ns, null_mut()),
            NncResult::UnexpectedNull
        );
        assert_eq!(
            nnc_execution_get_output_size(null_mut(), 0, &mut size),
            NncResult::UnexpectedNull
        );
        // Freeing null is a no-op.
        nnc_key_free(null_mut());
        nnc_model_free(null_mut());
        nnc_execution_free(null_mut());
        // Names of codes, and element sizes, for any integer.
        assert_eq!(
            CStr::from_ptr(nnc_result_name(NncResult::IntegrityFailure as i32)),
            c"NNC_RESULT_INTEGRITY_FAILURE"
        );
        assert_eq!(CStr::from_ptr(nnc_result_name(-3)), c"NNC_RESULT_UNKNOWN");
        assert_eq!(nnc_element_size(NncElementType::Int64 as i32), 8);
        assert_eq!(nnc_element_size(99), 0);
    }
}

#[test]
fn introspection_states_sizes_and_reuse() {
    let (bytes, k, input, reference) = tiny();
    let model = load_buffer(&bytes, Some(&k)).expect("loads");
    let mut n_in = 0;
    let mut n_out = 0;
    // SAFETY: a live model and valid out-pointers.
    unsafe {
        assert_eq!(
            nnc_model_input_count(model.0, &mut n_in),
            NncResult::NoError
        );
        assert_eq!(
            nnc_model_output_count(model.0, &mut n_out),
            NncResult::NoError
        );
    }
    assert_eq!((n_in, n_out), (1, 1));
    let (name, t, dims, size) = info(&model, true, 0).expect("input 0");
    assert!(!name.is_empty());
    assert_eq!(
        (t, dims.as_slice(), size),
        (
            NncElementType::Float32,
            &[1, 3, 32, 32][..],
            3 * 32 * 32 * 4
        )
    );
    let (_, t, dims, size) = info(&model, false, 0).expect("output 0");
    assert_eq!(
        (t, dims.as_slice(), size),
        (NncElementType::Float32, &[1, 10][..], 40)
    );
    assert_eq!(info(&model, true, 1).err(), Some(NncResult::BadData));
    assert!(
        last_error().contains("input 1 does not exist"),
        "{}",
        last_error()
    );

    let e = execution(&model);
    // Wrong states: nothing bound, nothing computed.
    assert_eq!(compute(&e), NncResult::BadState);
    assert!(last_error().contains("is not bound"), "{}", last_error());
    assert_eq!(output_dims(&e, 0).err(), Some(NncResult::BadState));
    let (mut dev, mut total) = (0u64, 0u64);
    // SAFETY: a live execution and valid out-pointers.
    let r = unsafe { nnc_execution_get_timing(e.0, &mut dev, &mut total) };
    assert_eq!(r, NncResult::BadState);
    // Before a compute, the declared size.
    assert_eq!(output_size(&e, 0), Ok(40));
    // Bad bindings.
    assert_eq!(set_input(&e, 0, &input[1..]), NncResult::BadData);
    assert!(
        last_error().contains("12284 bytes given, 12288 expected"),
        "{}",
        last_error()
    );
    assert_eq!(set_input(&e, 1, &input), NncResult::BadData);
    let mut small = [0f32; 9];
    assert_eq!(
        set_output(&e, 0, &mut small),
        NncResult::OutputInsufficientSize
    );
    assert!(
        last_error().contains("36 bytes is too small, 40 bytes are needed"),
        "{}",
        last_error()
    );
    assert_eq!(set_input(&e, 0, &input), NncResult::NoError);
    // The output is still unbound after the refused binding.
    assert_eq!(compute(&e), NncResult::BadState);

    // Bound once, computed 100 times: identical outputs, matching the reference.
    let mut out = vec![0f32; 10];
    assert_eq!(set_output(&e, 0, &mut out), NncResult::NoError);
    assert_eq!(compute(&e), NncResult::NoError, "{}", last_error());
    let first = out.clone();
    for (a, b) in first.iter().zip(&reference) {
        assert!(
            (a - b).abs() <= 1e-4 * b.abs().max(1.0),
            "{first:?} vs {reference:?}"
        );
    }
    assert_eq!(argmax(&first), argmax(&reference));
    for run in 0..100 {
        out.fill(f32::NAN);
        assert_eq!(
            compute(&e),
            NncResult::NoError,
            "run {run}: {}",
            last_error()
        );
        assert_eq!(
            out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            first.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "run {run}"
        );
    }
    assert_eq!(output_dims(&e, 0), Ok(vec![1, 10]));
    assert_eq!(output_size(&e, 0), Ok(40));
    let mut one = [0u32; 1];
    // SAFETY: `one` holds one value, as the capacity says.
    let r = unsafe { nnc_execution_get_output_dimensions(e.0, 0, one.as_mut_ptr(), 1) };
    assert_eq!(r, NncResult::BadData, "a capacity below the rank");
    // SAFETY: a live execution and valid out-pointers.
    let r = unsafe { nnc_execution_get_timing(e.0, &mut dev, &mut total) };
    assert_eq!(r, NncResult::NoError);
    assert!(dev > 0 && total >= dev, "{dev} {total}");

    // The model freed first: the execution still computes.
    drop(model);
    out.fill(0.0);
    assert_eq!(compute(&e), NncResult::NoError, "{}", last_error());
    assert_eq!(out, first);
}

#[test]
fn executions_of_one_model_compute_on_several_threads() {
    let (bytes, k, input, _) = tiny();
    let model = load_buffer(&bytes, Some(&k)).expect("loads");
    let expected = {
        let e = execution(&model);
        let mut out = vec![0f32; 10];
        assert_eq!(set_input(&e, 0, &input), NncResult::NoError);
        assert_eq!(set_output(&e, 0, &mut out), NncResult::NoError);
        assert_eq!(compute(&e), NncResult::NoError);
        out
    };
    // Raw pointers are not Send; the model is shared by address (it is thread-safe).
    let address = model.0 as usize;
    std::thread::scope(|s| {
        for _ in 0..3 {
            let (input, expected) = (&input, &expected);
            s.spawn(move || {
                let m = Model(address as *mut NncModel);
                let e = execution(&m);
                std::mem::forget(m); // owned by the outer scope
                let mut out = vec![0f32; 10];
                assert_eq!(set_input(&e, 0, input), NncResult::NoError);
                assert_eq!(set_output(&e, 0, &mut out), NncResult::NoError);
                for _ in 0..5 {
                    assert_eq!(compute(&e), NncResult::NoError, "{}", last_error());
                    assert_eq!(&out, expected);
                }
            });
        }
    });
}

#[test]
fn outputs_known_only_when_computing() {
    // y = IF(cond, x + c1 (40 values), concat(x * c2, x) (80 values)): unknown length.
    let m = nnc_formats::test_support::control_flow::if_model();
    let bytes = emit_model(&m, None);
    let model = load_buffer(&bytes, None).expect("loads");
    let (_, t, dims, size) = info(&model, false, 0).expect("output 0");
    assert_eq!(
        (t, dims.as_slice(), size),
        (NncElementType::Float32, &[0][..], 0)
    );
    let e = execution(&model);
    assert_eq!(output_size(&e, 0).err(), Some(NncResult::BadState));
    let x: Vec<f32> = (0..40).map(|i| i as f32).collect();
    let cond_false = [0u8];
    // SAFETY: the one-byte condition outlives the computes below.
    let r = unsafe { nnc_execution_set_input(e.0, 0, cond_false.as_ptr().cast::<c_void>(), 1) };
    assert_eq!(r, NncResult::NoError, "{}", last_error());
    assert_eq!(set_input(&e, 1, &x), NncResult::NoError);
    let mut small = vec![-1f32; 40];
    assert_eq!(set_output(&e, 0, &mut small), NncResult::NoError);
    assert_eq!(compute(&e), NncResult::OutputInsufficientSize);
    assert!(
        last_error().contains("320 bytes are needed"),
        "{}",
        last_error()
    );
    assert!(small.iter().all(|&v| v == -1.0), "nothing written");
    assert_eq!(output_size(&e, 0), Ok(320));
    assert_eq!(output_dims(&e, 0), Ok(vec![80]));
    let mut timing = (0u64, 0u64);
    // SAFETY: a live execution and valid out-pointers.
    let r = unsafe { nnc_execution_get_timing(e.0, &mut timing.0, &mut timing.1) };
    assert_eq!(r, NncResult::BadState, "no timing for a failed compute");
    let mut big = vec![0f32; 80];
    assert_eq!(set_output(&e, 0, &mut big), NncResult::NoError);
    assert_eq!(compute(&e), NncResult::NoError, "{}", last_error());
    let c2 = nnc_formats::test_support::control_flow::else_constant();
    let expected: Vec<f32> = x
        .iter()
        .zip(&c2)
        .map(|(a, b)| a * b)
        .chain(x.iter().copied())
        .collect();
    assert_eq!(big, expected);
    // Dimensions given for an input declared with known ones must agree.
    let wrong = [41u32];
    // SAFETY: one dimension, and a buffer of 41 floats' worth is not read (refused).
    let r = unsafe {
        nnc_execution_set_input_with_dimensions(e.0, 1, wrong.as_ptr(), 1, x.as_ptr().cast(), 164)
    };
    assert_eq!(r, NncResult::BadData);
    let right = [40u32];
    // SAFETY: one dimension and a buffer of 40 floats.
    let r = unsafe {
        nnc_execution_set_input_with_dimensions(e.0, 1, right.as_ptr(), 1, x.as_ptr().cast(), 160)
    };
    assert_eq!(r, NncResult::NoError, "{}", last_error());
    let reference = HostTensor::from_f32(vec![80], &expected).expect("tensor");
    assert_eq!(reference.to_f32_vec(), Some(big));
}

#[test]
fn a_loop_past_its_timeout_misses_the_deadline() {
    // while i == i { ... }: runs until the loop timeout.
    let m = nnc_formats::test_support::control_flow::infinite_model();
    let model = load_buffer(&emit_model(&m, None), None).expect("loads");
    let e = execution(&model);
    let i = [0i32];
    let acc = [0f32; 4];
    let s = [1f32; 4];
    let limit = [3i32];
    // SAFETY: the buffers outlive the compute below.
    unsafe {
        assert_eq!(
            nnc_execution_set_input(e.0, 0, i.as_ptr().cast(), 4),
            NncResult::NoError
        );
        assert_eq!(
            nnc_execution_set_input(e.0, 3, limit.as_ptr().cast(), 4),
            NncResult::NoError
        );
        assert_eq!(
            nnc_execution_set_loop_timeout(e.0, 16_000_000_000),
            NncResult::BadData
        );
        assert_eq!(
            nnc_execution_set_loop_timeout(e.0, 20_000_000),
            NncResult::NoError
        );
        assert_eq!(
            nnc_execution_set_loop_timeout(null_mut(), 1),
            NncResult::UnexpectedNull
        );
    }
    assert_eq!(set_input(&e, 1, &acc), NncResult::NoError);
    assert_eq!(set_input(&e, 2, &s), NncResult::NoError);
    let mut i_out = [0f32; 1];
    let mut acc_out = [0f32; 4];
    assert_eq!(set_output(&e, 0, &mut i_out), NncResult::NoError);
    assert_eq!(set_output(&e, 1, &mut acc_out), NncResult::NoError);
    let start = std::time::Instant::now();
    assert_eq!(
        compute(&e),
        NncResult::MissedDeadlinePersistent,
        "{}",
        last_error()
    );
    assert!(
        last_error().contains("missed the deadline"),
        "{}",
        last_error()
    );
    assert!(
        start.elapsed() < std::time::Duration::from_secs(2),
        "the 20 ms timeout applied"
    );
}
