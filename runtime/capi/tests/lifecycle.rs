//! The lifecycle of events, executions, memories and handles through the C API, in the
//! orders a careless or hostile caller would use: signalling a compute's event, freeing
//! what a compute waits for, stale and foreign handles, and fd-backed memory truncated
//! by another party during and between computes.

mod common;

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use common::{Execution, compute, execution, last_error, load_buffer, set_input, set_output, tiny};
use nnc_capi::*;

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

fn start(e: &Execution, dependencies: &[&Event]) -> Event {
    let list: Vec<*const NncEvent> = dependencies.iter().map(|d| d.0.cast_const()).collect();
    let mut event = null_mut();
    // SAFETY: `list.len()` handles and a valid out-pointer.
    let r = unsafe {
        nnc_execution_start_compute_with_dependencies(
            e.0,
            list.as_ptr(),
            list.len() as u32,
            0,
            &mut event,
        )
    };
    assert_eq!(r, NncResult::NoError, "{}", last_error());
    Event(event)
}

/// Reads `out` through volatile loads: a compute in flight may be writing it.
fn all_zero(out: &[f32]) -> bool {
    // SAFETY: in bounds of a live slice.
    (0..out.len()).all(|k| unsafe { std::ptr::read_volatile(out.as_ptr().add(k)) } == 0.0)
}

/// tiny_cnn loaded, an execution bound to `input` and a zeroed output, and the output
/// a plain compute gives.
fn bound(out: &mut [f32]) -> (common::Model, Execution, Vec<f32>) {
    let (bytes, key, input, reference) = tiny();
    let model = load_buffer(&bytes, Some(&key)).expect("loads");
    let plain = {
        let e = execution(&model);
        let mut o = vec![0f32; reference.len()];
        assert_eq!(set_input(&e, 0, &input), NncResult::NoError);
        assert_eq!(set_output(&e, 0, &mut o), NncResult::NoError);
        assert_eq!(compute(&e), NncResult::NoError);
        o
    };
    assert_eq!(out.len(), plain.len());
    let e = execution(&model);
    // The input outlives every compute: leaked for the test's duration.
    let input: &'static [f32] = Vec::leak(input);
    assert_eq!(set_input(&e, 0, input), NncResult::NoError);
    assert_eq!(set_output(&e, 0, out), NncResult::NoError);
    (model, e, plain)
}

/// The audit's high-severity finding, scaled to one compute: the caller signals the
/// event of a fenced compute still waiting for its gate. That is refused, so the wait
/// cannot return before the compute has written its output.
#[test]
fn a_computes_event_cannot_be_signalled_by_the_caller() {
    let mut out = vec![0f32; 10];
    let (_model, e, plain) = bound(&mut out);
    let gate = user_event();
    let done = start(&e, &[&gate]);
    assert_eq!(nnc_event_signal(done.0), NncResult::BadState);
    assert!(
        last_error().contains("belongs to a compute"),
        "{}",
        last_error()
    );
    std::thread::sleep(Duration::from_millis(20));
    assert!(all_zero(&out), "nothing ran before the gate");
    assert_eq!(nnc_event_signal(gate.0), NncResult::NoError);
    assert_eq!(
        nnc_event_wait(done.0),
        NncResult::NoError,
        "{}",
        last_error()
    );
    assert_eq!(out, plain, "the wait returned after the compute's write");
    assert_eq!(
        nnc_event_signal(done.0),
        NncResult::BadState,
        "a finished compute's event is still the compute's"
    );
    // An asynchronous compute's event alike.
    let mut event = null_mut();
    assert_eq!(
        // SAFETY: a valid out-pointer.
        unsafe { nnc_execution_start_compute(e.0, &mut event) },
        NncResult::NoError
    );
    let event = Event(event);
    assert_eq!(nnc_event_signal(event.0), NncResult::BadState);
    assert_eq!(nnc_event_wait(event.0), NncResult::NoError);
}

/// A caller's event freed before it signalled can never signal: the computes waiting
/// for it fail without running instead of waiting forever.
#[test]
fn freeing_a_callers_event_before_it_signals_fails_its_dependents() {
    let mut out = vec![0f32; 10];
    let (_model, e, plain) = bound(&mut out);
    let gate = user_event();
    let other = user_event();
    let done = start(&e, &[&gate, &other]);
    drop(gate);
    assert_eq!(nnc_event_signal(other.0), NncResult::NoError);
    assert_eq!(nnc_event_wait(done.0), NncResult::OpFailed);
    assert!(
        last_error().contains("freed before it was signalled"),
        "{}",
        last_error()
    );
    assert!(all_zero(&out), "the dependent compute never ran");
    assert_eq!(
        compute(&e),
        NncResult::NoError,
        "the execution is usable again"
    );
    assert_eq!(out, plain);
}

/// Freeing an execution cancels a compute still waiting for a gate nobody signals
/// (before, the free waited forever), and waits for one already started: nnc writes no
/// bound buffer after the free returns.
#[test]
fn freeing_an_execution_cancels_a_waiting_compute_and_waits_for_a_started_one() {
    let mut out = vec![0f32; 10];
    let (model, e, plain) = bound(&mut out);
    let gate = user_event();
    let done = start(&e, &[&gate]);
    let before = Instant::now();
    drop(e);
    assert!(
        before.elapsed() < Duration::from_secs(2),
        "the free returned"
    );
    assert_eq!(nnc_event_wait(done.0), NncResult::OpFailed);
    assert!(last_error().contains("never ran"), "{}", last_error());
    assert_eq!(nnc_event_signal(gate.0), NncResult::NoError);
    std::thread::sleep(Duration::from_millis(20));
    assert!(all_zero(&out), "the cancelled compute wrote nothing");

    // A started compute (queued or running) is waited for.
    let e = execution(&model);
    let (_, _, input, _) = tiny();
    assert_eq!(set_input(&e, 0, &input), NncResult::NoError);
    assert_eq!(set_output(&e, 0, &mut out), NncResult::NoError);
    let mut event = null_mut();
    assert_eq!(
        // SAFETY: a valid out-pointer.
        unsafe { nnc_execution_start_compute(e.0, &mut event) },
        NncResult::NoError
    );
    let event = Event(event);
    drop(e);
    assert_eq!(out, plain, "the compute finished before the free returned");
    assert_eq!(nnc_event_wait(event.0), NncResult::NoError);
}

/// Handles are checked, never dereferenced: freed ones, ones freed twice, handles of
/// another type and made-up values are `BAD_DATA`; null stays `UNEXPECTED_NULL`.
#[test]
fn stale_foreign_and_made_up_handles_are_refused() {
    let mut out = vec![0f32; 10];
    let (model, e, _) = bound(&mut out);
    let gate = user_event();
    let stale = gate.0;
    drop(gate);
    nnc_event_free(stale); // twice: ignored
    assert_eq!(nnc_event_wait(stale), NncResult::BadData);
    assert!(
        last_error().contains("not a live event"),
        "{}",
        last_error()
    );
    assert_eq!(nnc_event_signal(stale), NncResult::BadData);
    let mut event = null_mut();
    let deps = [stale.cast_const()];
    // SAFETY: one readable handle and a valid out-pointer.
    let r = unsafe {
        nnc_execution_start_compute_with_dependencies(e.0, deps.as_ptr(), 1, 0, &mut event)
    };
    assert_eq!(r, NncResult::BadData, "a freed dependency");
    assert!(event.is_null());
    assert_eq!(
        compute(&e),
        NncResult::NoError,
        "a refused start claims nothing"
    );
    // An execution's handle passed as an event, and a made-up value.
    assert_eq!(nnc_event_wait(e.0.cast()), NncResult::BadData);
    let made_up = std::ptr::without_provenance_mut::<NncEvent>(0xdead_bee0);
    assert_eq!(nnc_event_signal(made_up), NncResult::BadData);
    nnc_event_free(made_up);
    nnc_event_free(e.0.cast()); // not an event: ignored, the execution lives on
    assert_eq!(compute(&e), NncResult::NoError);
    assert_eq!(nnc_event_wait(null_mut()), NncResult::UnexpectedNull);
    // A freed execution and a freed model.
    let freed = e.0;
    drop(e);
    nnc_execution_free(freed);
    // SAFETY: a handle, checked.
    assert_eq!(unsafe { nnc_execution_compute(freed) }, NncResult::BadData);
    let m = model.0;
    drop(model);
    nnc_model_free(m);
    let mut created = null_mut();
    assert_eq!(
        // SAFETY: a valid out-pointer.
        unsafe { nnc_execution_create(m, &mut created) },
        NncResult::BadData
    );
    assert!(created.is_null());
}

// ---- fd-backed memory -------------------------------------------------------------

fn memfd(name: &str, size: u64, seal_shrink: bool) -> File {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: a NUL-terminated name and valid flags; the result is checked.
    let fd = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a new descriptor owned by nothing else.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(size).unwrap();
    if seal_shrink {
        // SAFETY: a live descriptor and a valid command.
        let r = unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    }
    file
}

fn memory_from_fd(file: &File, size: usize) -> Result<*mut NncMemory, NncResult> {
    let mut m = null_mut();
    // SAFETY: a valid out-pointer; the descriptor is duplicated by nnc.
    let r = unsafe { nnc_memory_create_from_fd(size, file.as_raw_fd(), 0, &mut m) };
    if r == NncResult::NoError {
        Ok(m)
    } else {
        assert!(m.is_null());
        Err(r)
    }
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Whether this process maps a memfd named `name`.
fn mapped(name: &str) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .contains(&format!("/memfd:{name} "))
}

/// A memory over an unsealed memfd holding tiny_cnn's input and output, bound to an
/// execution: the file, the memory, the execution, and the expected output bytes.
fn file_bound(name: &str) -> (common::Model, File, Execution, Vec<u8>, usize) {
    let (bytes, key, input, reference) = tiny();
    let model = load_buffer(&bytes, Some(&key)).expect("loads");
    let plain = {
        let e = execution(&model);
        let mut o = vec![0f32; reference.len()];
        assert_eq!(set_input(&e, 0, &input), NncResult::NoError);
        assert_eq!(set_output(&e, 0, &mut o), NncResult::NoError);
        assert_eq!(compute(&e), NncResult::NoError);
        f32_bytes(&o)
    };
    let input = f32_bytes(&input);
    let size = input.len() + plain.len();
    let file = memfd(name, size as u64, false);
    file.write_all_at(&input, 0).unwrap();
    let memory = memory_from_fd(&file, size).expect("an unsealed memfd is accepted");
    assert!(!mapped(name), "an unsealed memfd is not mapped");
    let e = execution(&model);
    assert_eq!(
        nnc_execution_set_input_from_memory(e.0, 0, memory, 0, input.len()),
        NncResult::NoError,
        "{}",
        last_error()
    );
    assert_eq!(
        nnc_execution_set_output_from_memory(e.0, 0, memory, input.len(), plain.len()),
        NncResult::NoError
    );
    nnc_memory_free(memory); // the execution keeps it
    (model, file, e, plain, input.len())
}

/// The audit's SIGBUS, between computes: the file shrinks below the bound input, then
/// below the bound output. Each compute fails with `BAD_STATE` naming the truncation;
/// nothing grows the file back; restored, it computes again.
#[test]
fn a_file_truncated_between_computes_fails_them_cleanly() {
    let (_model, file, e, plain, in_len) = file_bound("nnc-test-between");
    assert_eq!(compute(&e), NncResult::NoError, "{}", last_error());
    let mut got = vec![0u8; plain.len()];
    file.read_exact_at(&mut got, in_len as u64).unwrap();
    assert_eq!(got, plain);
    let input = {
        let mut b = vec![0u8; in_len];
        file.read_exact_at(&mut b, 0).unwrap();
        b
    };
    file.set_len(0).unwrap();
    assert_eq!(compute(&e), NncResult::BadState, "input truncated away");
    assert!(last_error().contains("truncated"), "{}", last_error());
    // The input is back, the output's bytes are not.
    file.write_all_at(&input, 0).unwrap();
    assert_eq!(compute(&e), NncResult::BadState, "output truncated away");
    assert!(last_error().contains("truncated"), "{}", last_error());
    assert_eq!(
        file.metadata().unwrap().len(),
        in_len as u64,
        "a refused write does not grow the file"
    );
    // Asynchronously: the event reports it.
    let mut event = null_mut();
    assert_eq!(
        // SAFETY: a valid out-pointer.
        unsafe { nnc_execution_start_compute(e.0, &mut event) },
        NncResult::NoError
    );
    let event = Event(event);
    assert_eq!(nnc_event_wait(event.0), NncResult::BadState);
    file.set_len((in_len + plain.len()) as u64).unwrap();
    assert_eq!(compute(&e), NncResult::NoError, "{}", last_error());
    file.read_exact_at(&mut got, in_len as u64).unwrap();
    assert_eq!(got, plain);
}

/// The audit's SIGBUS, during computes: another thread truncates and restores the file
/// as fast as it can while computes run. Every compute succeeds or fails with
/// `BAD_STATE`; the process never receives a signal (with a mapping, it did).
#[test]
fn a_file_truncated_during_computes_never_raises_a_signal() {
    let (_model, file, e, plain, in_len) = file_bound("nnc-test-during");
    let input = {
        let mut b = vec![0u8; in_len];
        file.read_exact_at(&mut b, 0).unwrap();
        b
    };
    let size = (in_len + plain.len()) as u64;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let truncator = {
        let file = file.try_clone().unwrap();
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                file.set_len(0).unwrap();
                file.set_len(size).unwrap();
                file.write_all_at(&input, 0).unwrap();
                flips += 1;
            }
            flips
        })
    };
    let (mut ok, mut refused) = (0, 0);
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        match compute(&e) {
            NncResult::NoError => ok += 1,
            NncResult::BadState => refused += 1,
            other => panic!("{other:?}: {}", last_error()),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = truncator.join().unwrap();
    assert!(flips > 0 && ok + refused > 0, "{flips} {ok} {refused}");
}

/// Memfds sealed against shrinking are mapped (no copy through pread), and nnc's own
/// shared memory is sealed, so whoever holds its descriptor cannot truncate it.
#[test]
fn sealed_memfds_are_mapped_and_nnc_shared_memory_cannot_shrink() {
    let sealed = memfd("nnc-test-sealed", 4096, true);
    let m = memory_from_fd(&sealed, 4096).expect("a sealed memfd is accepted");
    assert!(mapped("nnc-test-sealed"), "a sealed memfd is mapped");
    assert!(sealed.set_len(0).is_err(), "the seal forbids shrinking");
    nnc_memory_free(m);

    let mut shared = null_mut();
    assert_eq!(
        // SAFETY: a valid out-pointer.
        unsafe { nnc_memory_create_shared(4096, &mut shared) },
        NncResult::NoError
    );
    let mut fd = -1;
    assert_eq!(
        // SAFETY: a valid out-pointer.
        unsafe { nnc_memory_get_fd(shared, &mut fd) },
        NncResult::NoError
    );
    // SAFETY: the memory's live descriptor, with a valid command.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    assert!(seals & libc::F_SEAL_SHRINK != 0, "seals {seals:#x}");
    // SAFETY: as above; the call must fail.
    assert_ne!(unsafe { libc::ftruncate(fd, 0) }, 0, "cannot shrink");
    nnc_memory_free(shared);
    nnc_memory_free(shared); // twice: ignored
}

/// What `nnc_memory_create_from_fd` refuses, with `BAD_DATA` and a message saying why:
/// a pipe, a device, a read-only file, bytes beyond the file, zero bytes.
#[test]
fn descriptors_that_are_not_read_write_regular_files_are_refused() {
    let mut fds = [0i32; 2];
    // SAFETY: a valid array for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just made and are owned here.
    let (r, w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    let zero = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/zero")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("read-only");
    std::fs::write(&path, [0u8; 64]).unwrap();
    let read_only = File::open(&path).unwrap();
    let small = memfd("nnc-test-small", 64, false);
    for (file, size, what) in [
        (&r, 16, "not a regular file"),
        (&w, 16, "not a regular file"),
        (&zero, 16, "not a regular file"),
        (&read_only, 16, "O_RDWR"),
        (&small, 65, "beyond the file's 64 bytes"),
        (&small, 0, "at least one byte"),
    ] {
        assert_eq!(
            memory_from_fd(file, size),
            Err(NncResult::BadData),
            "{what}"
        );
        assert!(last_error().contains(what), "{what}: {}", last_error());
    }
}
