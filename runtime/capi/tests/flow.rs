//! The C API's asynchronous, fenced and burst computes, memory objects, load options and
//! deadlines, exercised through the exported functions.

mod common;

use std::os::unix::fs::FileExt;
use std::ptr::{null, null_mut};
use std::time::{Duration, Instant};

use common::{
    Execution, Model, compute, emit_model, execution, last_error, load_buffer, set_input,
    set_output, tiny,
};
use nnc_capi::*;

/// An event, freed on drop.
struct Event(*mut NncEvent);

impl Drop for Event {
    fn drop(&mut self) {
        nnc_event_free(self.0)
    }
}

fn user_event() -> Event {
    let mut e = null_mut();
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { nnc_event_create(&mut e) }, NncResult::NoError);
    Event(e)
}

fn start(
    e: &Execution,
    dependencies: &[&Event],
    timeout_after_ns: u64,
) -> Result<Event, NncResult> {
    let list: Vec<*const NncEvent> = dependencies.iter().map(|d| d.0.cast_const()).collect();
    let mut event = null_mut();
    // SAFETY: a live execution, `list.len()` live events, a valid out-pointer.
    let r = unsafe {
        nnc_execution_start_compute_with_dependencies(
            e.0,
            list.as_ptr(),
            list.len() as u32,
            timeout_after_ns,
            &mut event,
        )
    };
    if r == NncResult::NoError {
        Ok(Event(event))
    } else {
        assert!(event.is_null());
        Err(r)
    }
}

fn wait(event: &Event) -> NncResult {
    nnc_event_wait(event.0)
}

fn loaded_tiny() -> (Model, Vec<f32>, Vec<f32>) {
    let (bytes, key, input, reference) = tiny();
    let model = load_buffer(&bytes, Some(&key)).expect("tiny_cnn loads");
    (model, input, reference)
}

#[test]
fn an_asynchronous_compute_matches_the_synchronous_one() {
    let (model, input, reference) = loaded_tiny();
    let e = execution(&model);
    let mut out = vec![0f32; reference.len()];
    assert_eq!(set_input(&e, 0, &input), NncResult::NoError);
    assert_eq!(set_output(&e, 0, &mut out), NncResult::NoError);
    assert_eq!(compute(&e), NncResult::NoError, "{}", last_error());
    let synchronous = out.clone();
    out.fill(0.0);
    let mut event = null_mut();
    // SAFETY: a live execution whose buffers outlive the compute, a valid out-pointer.
    let r = unsafe { nnc_execution_start_compute(e.0, &mut event) };
    assert_eq!(r, NncResult::NoError, "{}", last_error());
    let event = Event(event);
    assert_eq!(wait(&event), NncResult::NoError, "{}", last_error());
    assert_eq!(wait(&event), NncResult::NoError, "waiting twice is fine");
    assert_eq!(out, synchronous);
    let (mut device, mut total) = (0, 0);
    // SAFETY: a live execution and valid out-pointers.
    let r = unsafe { nnc_execution_get_timing(e.0, &mut device, &mut total) };
    assert_eq!(r, NncResult::NoError);
    assert!(device > 0 && device <= total);
    // Not fenced: no fenced durations.
    // SAFETY: as above.
    let r = unsafe { nnc_execution_get_fenced_timing(e.0, &mut device, &mut total) };
    assert_eq!(r, NncResult::BadState);
}

#[test]
fn a_fenced_compute_waits_for_its_event_and_blocks_the_execution_meanwhile() {
    let (model, input, reference) = loaded_tiny();
    let e = execution(&model);
    let mut out = vec![0f32; reference.len()];
    assert_eq!(set_input(&e, 0, &input), NncResult::NoError);
    assert_eq!(set_output(&e, 0, &mut out), NncResult::NoError);
    let gate = user_event();
    let done = start(&e, &[&gate], 0).expect("starts");
    std::thread::sleep(Duration::from_millis(50));
    // SAFETY: `out` is bound and not written before the gate signals; read through a
    // volatile pointer so the check sees memory, not a cached value.
    let untouched =
        (0..out.len()).all(|k| unsafe { std::ptr::read_volatile(out.as_ptr().add(k)) } == 0.0);
    assert!(untouched, "nothing ran before the event it waits for");
    // Every other call on the execution is refused while the compute is in flight.
    assert_eq!(set_input(&e, 0, &input), NncResult::BadState);
    assert_eq!(compute(&e), NncResult::BadState);
    assert!(last_error().contains("in flight"), "{}", last_error());
    let signalled = Instant::now();
    assert_eq!(nnc_event_signal(gate.0), NncResult::NoError);
    assert_eq!(nnc_event_signal(gate.0), NncResult::BadState);
    assert_eq!(wait(&done), NncResult::NoError, "{}", last_error());
    let waited = signalled.elapsed();
    assert_eq!(out, reference_outputs(&model, &input, reference.len()));
    let (mut launched, mut fenced) = (0u64, 0u64);
    // SAFETY: a live execution and valid out-pointers.
    let r = unsafe { nnc_execution_get_fenced_timing(e.0, &mut launched, &mut fenced) };
    assert_eq!(r, NncResult::NoError, "{}", last_error());
    assert!(
        launched >= 50_000_000,
        "launched counts from the call: {launched} ns"
    );
    assert!(fenced <= launched && fenced as u128 <= waited.as_nanos() + 1_000_000);
    // The execution is usable again.
    assert_eq!(compute(&e), NncResult::NoError);
}

/// tiny_cnn's outputs through a plain synchronous compute on a fresh execution.
fn reference_outputs(model: &Model, input: &[f32], n: usize) -> Vec<f32> {
    let e = execution(model);
    let mut out = vec![0f32; n];
    assert_eq!(set_input(&e, 0, input), NncResult::NoError);
    assert_eq!(set_output(&e, 0, &mut out), NncResult::NoError);
    assert_eq!(compute(&e), NncResult::NoError);
    out
}

#[test]
fn a_failed_dependency_fails_the_fenced_compute_without_running_it() {
    // A loop that never ends, stopped by a 20 ms loop timeout: its event fails.
    let m = nnc_formats::test_support::control_flow::infinite_model();
    let looping = load_buffer(&emit_model(&m, None), None).expect("loads");
    let l = execution(&looping);
    let (i, limit) = ([0i32], [3i32]);
    let (acc, s) = ([0f32; 4], [1f32; 4]);
    let (mut i_out, mut acc_out) = ([0f32; 1], [0f32; 4]);
    // SAFETY: the buffers outlive the computes below.
    unsafe {
        assert_eq!(
            nnc_execution_set_input(l.0, 0, i.as_ptr().cast(), 4),
            NncResult::NoError
        );
        assert_eq!(
            nnc_execution_set_input(l.0, 3, limit.as_ptr().cast(), 4),
            NncResult::NoError
        );
        assert_eq!(
            nnc_execution_set_loop_timeout(l.0, 20_000_000),
            NncResult::NoError
        );
    }
    assert_eq!(set_input(&l, 1, &acc), NncResult::NoError);
    assert_eq!(set_input(&l, 2, &s), NncResult::NoError);
    assert_eq!(set_output(&l, 0, &mut i_out), NncResult::NoError);
    assert_eq!(set_output(&l, 1, &mut acc_out), NncResult::NoError);
    let failing = start(&l, &[], 0).expect("starts");

    let (model, input, reference) = loaded_tiny();
    let e = execution(&model);
    let mut out = vec![0f32; reference.len()];
    assert_eq!(set_input(&e, 0, &input), NncResult::NoError);
    assert_eq!(set_output(&e, 0, &mut out), NncResult::NoError);
    let dependent = start(&e, &[&failing], 0).expect("starts");
    assert_eq!(
        wait(&failing),
        NncResult::MissedDeadlinePersistent,
        "{}",
        last_error()
    );
    assert_eq!(wait(&dependent), NncResult::OpFailed);
    assert!(
        last_error().contains("an event it waited for failed"),
        "{}",
        last_error()
    );
    assert!(
        out.iter().all(|&v| v == 0.0),
        "the dependent compute never ran"
    );
    assert_eq!(
        compute(&e),
        NncResult::NoError,
        "the execution is usable again"
    );
}

#[test]
fn a_burst_of_computes_matches_the_plain_path() {
    let (model, input, reference) = loaded_tiny();
    let e = execution(&model);
    let mut out = vec![0f32; reference.len()];
    assert_eq!(set_input(&e, 0, &input), NncResult::NoError);
    assert_eq!(set_output(&e, 0, &mut out), NncResult::NoError);
    let plain = reference_outputs(&model, &input, reference.len());
    let mut burst = null_mut();
    assert_eq!(
        // SAFETY: a live model and a valid out-pointer.
        unsafe { nnc_burst_create(model.0, &mut burst) },
        NncResult::NoError
    );
    for k in 0..100 {
        out.fill(f32::NAN);
        // SAFETY: a live execution with live buffers, a live burst.
        let r = unsafe { nnc_execution_burst_compute(e.0, burst) };
        assert_eq!(r, NncResult::NoError, "{}", last_error());
        assert_eq!(out, plain, "burst compute {k}");
    }
    // A burst of another model is refused.
    let (other, _, _) = loaded_tiny();
    let mut foreign = null_mut();
    // SAFETY: as above.
    unsafe {
        assert_eq!(nnc_burst_create(other.0, &mut foreign), NncResult::NoError);
        assert_eq!(
            nnc_execution_burst_compute(e.0, foreign),
            NncResult::BadData
        );
        assert_eq!(
            nnc_execution_burst_compute(e.0, null()),
            NncResult::UnexpectedNull
        );
        nnc_burst_free(foreign);
        nnc_burst_free(burst);
        nnc_burst_free(null_mut());
    }
}

#[test]
fn memory_objects_carry_inputs_and_outputs_through_file_descriptors() {
    let (model, input, reference) = loaded_tiny();
    let plain = reference_outputs(&model, &input, reference.len());
    // The input in a file, mapped at an offset; the output in anonymous shared memory.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.bin");
    let bytes: Vec<u8> = input.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut file_bytes = vec![0xAAu8; 4096];
    file_bytes.extend_from_slice(&bytes);
    std::fs::write(&path, &file_bytes).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    use std::os::fd::AsRawFd;
    let (mut input_memory, mut output_memory) = (null_mut(), null_mut());
    // SAFETY: a valid descriptor (duplicated by nnc) and out-pointers.
    unsafe {
        let r = nnc_memory_create_from_fd(file_bytes.len(), file.as_raw_fd(), 0, &mut input_memory);
        assert_eq!(r, NncResult::NoError, "{}", last_error());
        let r = nnc_memory_create_shared(plain.len() * 4, &mut output_memory);
        assert_eq!(r, NncResult::NoError, "{}", last_error());
        assert_eq!(
            nnc_memory_create_from_fd(16, -1, 0, &mut null_mut()),
            NncResult::BadData
        );
    }
    drop(file);
    let e = execution(&model);
    assert_eq!(
        nnc_execution_set_input_from_memory(e.0, 0, input_memory, 4096, bytes.len() + 4),
        NncResult::BadData,
        "a region beyond the memory"
    );
    assert_eq!(
        nnc_execution_set_input_from_memory(e.0, 0, input_memory, 4096, bytes.len()),
        NncResult::NoError,
        "{}",
        last_error()
    );
    assert_eq!(
        nnc_execution_set_output_from_memory(e.0, 0, output_memory, 0, plain.len() * 4),
        NncResult::NoError
    );
    // Executions keep bound memories alive.
    nnc_memory_free(input_memory);
    assert_eq!(compute(&e), NncResult::NoError, "{}", last_error());
    let mut fd = -1;
    assert_eq!(
        // SAFETY: a live memory and a valid out-pointer.
        unsafe { nnc_memory_get_fd(output_memory, &mut fd) },
        NncResult::NoError
    );
    // Read the output through the memory's own descriptor, as another process would.
    // SAFETY: the descriptor stays open while the memory lives; ManuallyDrop keeps the
    // File from closing it.
    let shared = std::mem::ManuallyDrop::new(unsafe {
        <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd)
    });
    let mut read = vec![0u8; plain.len() * 4];
    shared.read_exact_at(&mut read, 0).unwrap();
    let got: Vec<f32> = read
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(got, plain);
    drop(e);
    nnc_memory_free(output_memory);
}

/// Outputs within float32 rounding of the reference (ONNX Runtime's).
fn assert_near(got: &[f32], reference: &[f32]) {
    assert_eq!(got.len(), reference.len());
    for (i, (a, b)) in got.iter().zip(reference).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 + 1e-4 * b.abs(),
            "output {i}: {a} against {b}"
        );
    }
}

#[test]
fn load_options_are_checked_and_applied() {
    let (bytes, key, input, reference) = tiny();
    let mut k = null_mut();
    assert_eq!(
        // SAFETY: a valid key slice and out-pointer.
        unsafe { nnc_key_from_bytes(key.as_ptr(), key.len(), &mut k) },
        NncResult::NoError
    );
    let load = |options: &NncLoadOptions| {
        let mut m = null_mut();
        // SAFETY: a valid buffer, key, options and out-pointer.
        let r = unsafe {
            nnc_model_load_buffer_with_options(bytes.as_ptr(), bytes.len(), k, options, &mut m)
        };
        (r, m)
    };
    let defaults = nnc_load_options_default();
    assert_eq!(defaults.threads, 1);
    assert_eq!(defaults.priority, NncPriority::Medium as i32);
    let (r, m) = load(&NncLoadOptions {
        priority: 7,
        ..defaults
    });
    assert_eq!(r, NncResult::BadData);
    assert!(
        m.is_null() && last_error().contains("priority 7"),
        "{}",
        last_error()
    );
    let (r, _) = load(&NncLoadOptions {
        threads: 0,
        ..defaults
    });
    assert_eq!(r, NncResult::BadData);
    assert_eq!(defaults.float_math, NncFloatMath::Strict as i32);
    assert_eq!(defaults.requantization, NncRequantization::Float as i32);
    let (r, _) = load(&NncLoadOptions {
        float_math: 5,
        ..defaults
    });
    assert_eq!(r, NncResult::BadData);
    assert!(last_error().contains("float_math 5"), "{}", last_error());
    let (r, _) = load(&NncLoadOptions {
        requantization: -1,
        ..defaults
    });
    assert_eq!(r, NncResult::BadData);
    assert!(
        last_error().contains("requantization -1"),
        "{}",
        last_error()
    );
    // A preparation deadline of 1 ns cannot be met.
    let (r, _) = load(&NncLoadOptions {
        prepare_timeout_ns: 1,
        ..defaults
    });
    assert_eq!(r, NncResult::MissedDeadlineTransient, "{}", last_error());
    // Two threads, high priority and a compilation cache: the second load fills nothing
    // new (a hit), and both compute the reference.
    let cache = tempfile::tempdir().unwrap();
    let dir = common::c_path(cache.path());
    let options = NncLoadOptions {
        threads: 2,
        priority: NncPriority::High as i32,
        cache_dir: dir.as_ptr(),
        ..defaults
    };
    for _ in 0..2 {
        let (r, m) = load(&options);
        assert_eq!(r, NncResult::NoError, "{}", last_error());
        let model = Model(m);
        assert_near(
            &reference_outputs(&model, &input, reference.len()),
            &reference,
        );
    }
    let cached = std::fs::read_dir(cache.path()).unwrap().count();
    assert!(cached > 0, "the cache directory was filled");
    // The float math reaches the kernels: the cache binds it, so a fast load is a miss
    // that adds its own entry, and it still computes the reference (this model has no
    // layer the fast path changes). The requantization is accepted alike.
    let (r, m) = load(&NncLoadOptions {
        float_math: NncFloatMath::Fast as i32,
        requantization: NncRequantization::FixedPoint as i32,
        ..options
    });
    assert_eq!(r, NncResult::NoError, "{}", last_error());
    assert_near(
        &reference_outputs(&Model(m), &input, reference.len()),
        &reference,
    );
    assert!(
        std::fs::read_dir(cache.path()).unwrap().count() > cached,
        "a fast load has its own cache entry"
    );
    nnc_key_free(k);
}

#[test]
fn an_execution_deadline_fails_in_time_and_leaves_the_execution_usable() {
    let (model, input, reference) = loaded_tiny();
    let e = execution(&model);
    let mut out = vec![0f32; reference.len()];
    assert_eq!(set_input(&e, 0, &input), NncResult::NoError);
    assert_eq!(set_output(&e, 0, &mut out), NncResult::NoError);
    assert_eq!(compute(&e), NncResult::NoError);
    // SAFETY: a live execution.
    assert_eq!(nnc_execution_set_timeout(e.0, 1), NncResult::NoError);
    let r = compute(&e);
    assert_eq!(
        r,
        NncResult::MissedDeadlinePersistent,
        "a 1 ns budget is below the fastest run: {}",
        last_error()
    );
    // SAFETY: as above.
    assert_eq!(nnc_execution_set_timeout(e.0, 0), NncResult::NoError);
    assert_eq!(compute(&e), NncResult::NoError, "{}", last_error());
}
