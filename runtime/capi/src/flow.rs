//! The C API beyond one synchronous compute: load options (threads, priority,
//! preparation deadline, compilation cache, float math, requantization), execution deadlines, memory objects
//! (shared memory by file descriptor), events, asynchronous and fenced computes on the
//! runtime's bounded scheduler, and bursts.
//!
//! Asynchronous and fenced computes run on the process's one bounded worker pool
//! (`nnc_runtime::Scheduler::global`) at the model's priority, never on a thread of
//! their own. While one is in flight its execution refuses every other call
//! (`NNC_RESULT_BAD_STATE`) until its event has signalled; freeing the execution waits
//! for it.

use std::ffi::c_char;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nnc_runtime::{
    Burst, CacheConfig, Fence, FenceState, FloatMath, LoadOptions, Memory, Priority, Requantization,
};

use crate::error::{CapiError, guard, guard_void};
use crate::{
    NncExecution, NncKey, NncModel, NncResult, free_handed_out, hand_out, imp, lock, non_null,
    path_arg,
};

/// Priorities of a model's executions among those queued for the same workers, valued
/// as the NN API's `ANEURALNETWORKS_PRIORITY_*`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NncPriority {
    Low = 90,
    Medium = 100,
    High = 110,
}

/// How closely float32 operations follow float32 arithmetic (`NncLoadOptions.float_math`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NncFloatMath {
    /// Direct float32 sums: results within the NN API's float32 tolerance (the default).
    Strict = 0,
    /// Faster algorithms that round more (Winograd 3x3 convolutions), within the NN
    /// API's relaxed (float16) tolerance. Models that allow relaxed computation get it
    /// whatever this says.
    Fast = 1,
}

/// How quantized convolutions and products requantize (`NncLoadOptions.requantization`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NncRequantization {
    /// The scale in single precision, rounded half to even: XNNPACK's arithmetic, which
    /// LiteRT runs by default (the default).
    Float = 0,
    /// A Q31 multiplier with gemmlowp's rounding: TensorFlow Lite's reference kernels
    /// and the NN API's reference implementation.
    FixedPoint = 1,
}

/// How to load a model. Start from `nnc_load_options_default()` and change fields.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NncLoadOptions {
    /// Threads for the kernels of one execution (1: none spawned); at most 256.
    pub threads: u32,
    /// An `NncPriority` value: how this model's asynchronous and fenced computes are
    /// ordered against other models' queued ones.
    pub priority: i32,
    /// Preparation must finish within this many nanoseconds (0: no deadline), or the
    /// load fails with `NNC_RESULT_MISSED_DEADLINE_TRANSIENT`.
    pub prepare_timeout_ns: u64,
    /// A compilation-cache directory (NUL-terminated path), or null for none. A hit
    /// prepares from the cache; a miss prepares and fills it.
    pub cache_dir: *const c_char,
    /// An `NncFloatMath` value.
    pub float_math: i32,
    /// An `NncRequantization` value.
    pub requantization: i32,
}

/// The defaults: one thread, medium priority, no deadline, no cache, strict float math,
/// single-precision requantization.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_load_options_default() -> NncLoadOptions {
    NncLoadOptions {
        threads: 1,
        priority: NncPriority::Medium as i32,
        prepare_timeout_ns: 0,
        cache_dir: std::ptr::null(),
        float_math: NncFloatMath::Strict as i32,
        requantization: NncRequantization::Float as i32,
    }
}

/// # Safety
/// `options` must be null (the defaults) or point to a readable `NncLoadOptions` whose
/// `cache_dir` is null or NUL-terminated.
unsafe fn load_options(options: *const NncLoadOptions) -> Result<LoadOptions, CapiError> {
    let start = Instant::now();
    // SAFETY: by the contract, null or readable.
    let Some(o) = (unsafe { options.as_ref() }) else {
        return Ok(LoadOptions::default());
    };
    if !(1..=256).contains(&o.threads) {
        return Err(CapiError::BadData(format!(
            "threads is {}: give 1 to 256",
            o.threads
        )));
    }
    let priority = match o.priority {
        p if p == NncPriority::Low as i32 => Priority::Low,
        p if p == NncPriority::Medium as i32 => Priority::Medium,
        p if p == NncPriority::High as i32 => Priority::High,
        other => {
            return Err(CapiError::BadData(format!(
                "priority {other} is not NNC_PRIORITY_LOW (90), _MEDIUM (100) or _HIGH (110)"
            )));
        }
    };
    let float_math = match o.float_math {
        m if m == NncFloatMath::Strict as i32 => FloatMath::Strict,
        m if m == NncFloatMath::Fast as i32 => FloatMath::Fast,
        other => {
            return Err(CapiError::BadData(format!(
                "float_math {other} is not NNC_FLOAT_MATH_STRICT (0) or NNC_FLOAT_MATH_FAST (1)"
            )));
        }
    };
    let requantization = match o.requantization {
        r if r == NncRequantization::Float as i32 => Requantization::Float,
        r if r == NncRequantization::FixedPoint as i32 => Requantization::FixedPoint,
        other => {
            return Err(CapiError::BadData(format!(
                "requantization {other} is not NNC_REQUANTIZATION_FLOAT (0) or NNC_REQUANTIZATION_FIXED_POINT (1)"
            )));
        }
    };
    let cache = if o.cache_dir.is_null() {
        None
    } else {
        // SAFETY: non-null and, by the contract, NUL-terminated.
        let dir = unsafe { path_arg(o.cache_dir) }?;
        Some(CacheConfig {
            dir: dir.to_path_buf(),
            token: None,
        })
    };
    Ok(LoadOptions {
        threads: o.threads as usize,
        priority,
        cache,
        float_math,
        requantization,
        deadline: (o.prepare_timeout_ns > 0)
            .then(|| start.checked_add(Duration::from_nanos(o.prepare_timeout_ns)))
            .flatten(),
        ..LoadOptions::default()
    })
}

/// What both loads with options do around opening the file: the out-pointer set to null
/// first, the options and key read, the model handed out on success.
///
/// # Safety
/// `model` null or writable for one pointer; `key` null or a live key; `options` null or
/// a readable `NncLoadOptions` (with `cache_dir` null or NUL-terminated).
unsafe fn load_with(
    key: *const NncKey,
    options: *const NncLoadOptions,
    model: *mut *mut NncModel,
    open: impl FnOnce() -> Result<nnc_runtime::ModelFile, CapiError>,
) -> NncResult {
    guard(|| {
        non_null(model, "model")?;
        // SAFETY: `model` is non-null and, by the contract, writable.
        unsafe { model.write(std::ptr::null_mut()) };
        // SAFETY: by the contract, `options` is null or readable.
        let options = unsafe { load_options(options) }?;
        // SAFETY: by the contract, `key` is null or a live key.
        let key = unsafe { key.as_ref() };
        let loaded = imp::load(open()?, key.map(|k| &k.bytes[..]), &options)?;
        // SAFETY: as above: the out-pointer is non-null and writable.
        unsafe { hand_out(model, loaded) };
        Ok(())
    })
}

/// `nnc_model_load_file` with options (null: the defaults).
///
/// # Safety
/// As `nnc_model_load_file`; `options` null or a readable `NncLoadOptions`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_model_load_file_with_options(
    path: *const c_char,
    key: *const NncKey,
    options: *const NncLoadOptions,
    model: *mut *mut NncModel,
) -> NncResult {
    let open = || {
        // SAFETY: by the contract, `path` is null or a NUL-terminated string.
        let path = unsafe { path_arg(path) }?;
        Ok(nnc_runtime::ModelFile::open(path)?)
    };
    // SAFETY: forwarded contract.
    unsafe { load_with(key, options, model, open) }
}

/// `nnc_model_load_buffer` with options (null: the defaults).
///
/// # Safety
/// As `nnc_model_load_buffer`; `options` null or a readable `NncLoadOptions`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_model_load_buffer_with_options(
    data: *const u8,
    length: usize,
    key: *const NncKey,
    options: *const NncLoadOptions,
    model: *mut *mut NncModel,
) -> NncResult {
    let open = || {
        non_null(data, "data")?;
        // SAFETY: by the contract, `data` points to `length` readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(data, length) }.to_vec();
        Ok(nnc_runtime::ModelFile::from_bytes(bytes))
    };
    // SAFETY: forwarded contract.
    unsafe { load_with(key, options, model, open) }
}

/// Sets the deadline of each compute of `execution`, in nanoseconds from its start (for
/// a fenced compute, from when its fences signalled); 0 removes it. A compute that
/// cannot finish in time fails with `NNC_RESULT_MISSED_DEADLINE_PERSISTENT` when the
/// model has never run that fast, `NNC_RESULT_MISSED_DEADLINE_TRANSIENT` otherwise; the
/// model and the execution stay usable.
///
/// # Safety
/// `execution` null or a live execution.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_set_timeout(
    execution: *mut NncExecution,
    duration_ns: u64,
) -> NncResult {
    guard(|| {
        // SAFETY: by the contract, `execution` is null or live.
        let execution = unsafe { execution.as_ref() }.ok_or(CapiError::Null("execution"))?;
        lock(execution)?.set_timeout(duration_ns);
        Ok(())
    })
}

// ---- memory objects ---------------------------------------------------------------

/// Shared memory for inputs and outputs: an anonymous shared region (memfd) or a mapped
/// file descriptor. Bind regions of it with `nnc_execution_set_input_from_memory` /
/// `_output_from_memory`; nnc reads and writes it at each compute, under a lock that
/// lets computes reading the same memory run together. Free with `nnc_memory_free`
/// (executions bound to it keep it alive).
pub struct NncMemory {
    memory: Arc<Memory>,
}

/// Creates `size` bytes of anonymous shared memory (a memfd), zeroed. Its file
/// descriptor (`nnc_memory_get_fd`) can be mapped by the caller or passed to another
/// process.
///
/// # Safety
/// `memory` null or writable for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_memory_create_shared(
    size: usize,
    memory: *mut *mut NncMemory,
) -> NncResult {
    guard(|| {
        non_null(memory, "memory")?;
        // SAFETY: non-null and, by the contract, writable.
        unsafe { memory.write(std::ptr::null_mut()) };
        let created = Memory::create_shared(size)?;
        // SAFETY: as above.
        unsafe { hand_out(memory, NncMemory { memory: created }) };
        Ok(())
    })
}

/// Maps `size` bytes of the file descriptor `fd` from `offset` (the NN API's
/// `ANeuralNetworksMemory_createFromFd`), shared and writable: the descriptor must be
/// open for reading and writing. nnc duplicates it: the caller may close its own at
/// once.
///
/// # Safety
/// `memory` null or writable for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_memory_create_from_fd(
    size: usize,
    fd: i32,
    offset: u64,
    memory: *mut *mut NncMemory,
) -> NncResult {
    guard(|| {
        non_null(memory, "memory")?;
        // SAFETY: non-null and, by the contract, writable.
        unsafe { memory.write(std::ptr::null_mut()) };
        if fd < 0 {
            return Err(CapiError::BadData(format!("{fd} is not a file descriptor")));
        }
        // SAFETY: the descriptor is only borrowed for the duplication below; a closed
        // or invalid one makes `fcntl` fail, which is an error here.
        let owned = unsafe { BorrowedFd::borrow_raw(fd as RawFd) }
            .try_clone_to_owned()
            .map_err(|e| CapiError::BadData(format!("file descriptor {fd}: {e}")))?;
        let created = Memory::from_fd(owned, offset, size)?;
        // SAFETY: as above.
        unsafe { hand_out(memory, NncMemory { memory: created }) };
        Ok(())
    })
}

/// The memory's file descriptor (owned by the memory: do not close it).
///
/// # Safety
/// `memory` null or a live memory; `fd` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_memory_get_fd(memory: *const NncMemory, fd: *mut i32) -> NncResult {
    guard(|| {
        // SAFETY: by the contract, null or live.
        let memory = unsafe { memory.as_ref() }.ok_or(CapiError::Null("memory"))?;
        non_null(fd, "fd")?;
        let raw = memory.memory.raw_fd().ok_or_else(|| {
            CapiError::BadState("the memory has no file descriptor (it was released)".into())
        })?;
        // SAFETY: non-null and, by the contract, writable.
        unsafe { fd.write(raw) };
        Ok(())
    })
}

/// Frees a memory object. Null is ignored. Executions still bound to it keep it alive.
///
/// # Safety
/// `memory` null or a memory from `nnc_memory_create_*` not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_memory_free(memory: *mut NncMemory) {
    // SAFETY: forwarded contract: null, or from `hand_out` and freed once.
    guard_void(|| unsafe { free_handed_out(memory) })
}

fn memory_region(
    memory: *const NncMemory,
    offset: usize,
    length: usize,
) -> Result<imp::Region, CapiError> {
    // SAFETY: by the callers' contract, null or live.
    let memory = unsafe { memory.as_ref() }.ok_or(CapiError::Null("memory"))?;
    let available = memory.memory.len();
    if offset.checked_add(length).is_none_or(|end| end > available) {
        return Err(CapiError::BadData(format!(
            "bytes {offset}..{} are beyond the memory's {available} bytes",
            offset.saturating_add(length)
        )));
    }
    Ok(imp::Region::Memory {
        memory: Arc::clone(&memory.memory),
        offset,
        length,
    })
}

/// Binds input `index` to `length` bytes of `memory` at `offset`, laid out as for
/// `nnc_execution_set_input` (the input's element type and declared dimensions).
///
/// # Safety
/// `execution` null or a live execution; `memory` null or a live memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_set_input_from_memory(
    execution: *mut NncExecution,
    index: u32,
    memory: *const NncMemory,
    offset: usize,
    length: usize,
) -> NncResult {
    guard(|| {
        // SAFETY: by the contract, `execution` is null or live.
        let execution = unsafe { execution.as_ref() }.ok_or(CapiError::Null("execution"))?;
        let region = memory_region(memory, offset, length)?;
        lock(execution)?.set_input(index as usize, None, region)
    })
}

/// Binds output `index` to `length` bytes of `memory` at `offset` (as
/// `nnc_execution_set_output`).
///
/// # Safety
/// `execution` null or a live execution; `memory` null or a live memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_set_output_from_memory(
    execution: *mut NncExecution,
    index: u32,
    memory: *const NncMemory,
    offset: usize,
    length: usize,
) -> NncResult {
    guard(|| {
        // SAFETY: by the contract, `execution` is null or live.
        let execution = unsafe { execution.as_ref() }.ok_or(CapiError::Null("execution"))?;
        let region = memory_region(memory, offset, length)?;
        lock(execution)?.set_output(index as usize, region)
    })
}

// ---- events: asynchronous and fenced computes -------------------------------------

/// A one-shot completion signal: the event of an asynchronous or fenced compute, or one
/// the caller creates (`nnc_event_create`) and signals itself (`nnc_event_signal`), for
/// a fenced compute to wait for. Free with `nnc_event_free`.
pub struct NncEvent {
    fence: Fence,
    /// A compute's outcome, stored before its fence signals.
    outcome: Arc<Mutex<Option<(NncResult, String)>>>,
}

impl NncEvent {
    fn new() -> NncEvent {
        NncEvent {
            fence: Fence::new(),
            outcome: Arc::new(Mutex::new(None)),
        }
    }
}

/// Creates an event that the caller signals with `nnc_event_signal`.
///
/// # Safety
/// `event` null or writable for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_event_create(event: *mut *mut NncEvent) -> NncResult {
    guard(|| {
        non_null(event, "event")?;
        // SAFETY: non-null and, by the contract, writable.
        unsafe { hand_out(event, NncEvent::new()) };
        Ok(())
    })
}

/// Signals an event the caller created. Signalling an event twice, or one that belongs
/// to a compute, is `NNC_RESULT_BAD_STATE`.
///
/// # Safety
/// `event` null or a live event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_event_signal(event: *mut NncEvent) -> NncResult {
    guard(|| {
        // SAFETY: by the contract, null or live.
        let event = unsafe { event.as_ref() }.ok_or(CapiError::Null("event"))?;
        if event.fence.signal() {
            Ok(())
        } else {
            Err(CapiError::BadState(
                "the event has already signalled".into(),
            ))
        }
    })
}

/// Waits until the event signals and returns the outcome of what it stands for: the
/// compute's result code (its message in `nnc_last_error_message`), or for an event the
/// caller created, `NNC_RESULT_NO_ERROR`. May be called more than once.
///
/// # Safety
/// `event` null or a live event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_event_wait(event: *mut NncEvent) -> NncResult {
    guard(|| {
        // SAFETY: by the contract, null or live.
        let event = unsafe { event.as_ref() }.ok_or(CapiError::Null("event"))?;
        let state = event.fence.wait(None);
        let outcome = event
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match (outcome, state) {
            (Some((NncResult::NoError, _)), _) | (None, FenceState::Signalled) => Ok(()),
            (Some((code, message)), _) => Err(CapiError::Reported { code, message }),
            (None, FenceState::Failed(message)) => Err(CapiError::Reported {
                code: NncResult::OpFailed,
                message,
            }),
            (None, FenceState::Pending) => {
                Err(CapiError::BadState("the event never signalled".into()))
            }
        }
    })
}

/// Frees an event. Null is ignored. Freeing the event of a compute in flight does not
/// cancel the compute.
///
/// # Safety
/// `event` null or an event not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_event_free(event: *mut NncEvent) {
    // SAFETY: forwarded contract: null, or from `hand_out` and freed once.
    guard_void(|| unsafe { free_handed_out(event) })
}

/// Claims an execution for a compute in flight: checks its bindings, marks it busy and
/// records the event that freeing it must wait for.
fn claim(
    execution: &NncExecution,
    event: &NncEvent,
) -> Result<Arc<nnc_runtime::PreparedModel>, CapiError> {
    let mut state = lock(execution)?;
    state.check_bound()?;
    state.busy = true;
    *execution
        .in_flight
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some(event.fence.clone());
    Ok(Arc::clone(&state.model().model))
}

/// The job of a compute in flight: computes under the execution's lock (blocking: the
/// claim keeps every other caller out), releases it, then completes the event.
struct Job {
    inner: Arc<Mutex<imp::Execution>>,
    fence: Fence,
    outcome: Arc<Mutex<Option<(NncResult, String)>>>,
}

impl Job {
    /// Computes: the deadline counts from `started` (the call, or the dependencies'
    /// signal); a fenced compute records its durations from `called` and `started`.
    fn run(self, called: Instant, started: Instant, deadline: Option<Instant>, fenced: bool) {
        let result = {
            let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: the C contract keeps bound buffers valid until the event
                // signals (nnc_execution_start_compute).
                unsafe { state.compute(imp::Via::Plain, started, deadline) }
            }))
            .unwrap_or_else(|_| {
                Err(CapiError::BadState(
                    "internal error in nnc (a bug): an asynchronous compute panicked".into(),
                ))
            });
            if result.is_ok() && fenced {
                let done = Instant::now();
                state.set_fenced_timing(done - called, done - started);
            }
            state.busy = false;
            result
        };
        self.finish(result);
    }

    fn finish(self, result: Result<(), CapiError>) {
        let (code, message) = match &result {
            Ok(()) => (NncResult::NoError, String::new()),
            Err(e) => (e.code(), e.to_string()),
        };
        *self.outcome.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((code, message.clone()));
        if code == NncResult::NoError {
            self.fence.signal();
        } else {
            self.fence.fail(message);
        }
    }

    /// Completes the event without computing (a failed dependency, a full queue).
    fn abandon(self, error: CapiError) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .busy = false;
        self.finish(Err(error));
    }
}

/// Starts the compute of `execution` once every event of `dependencies` (`count` of
/// them; none: at once) has signalled, on the shared worker pool at the model's
/// priority, and creates the event that signals when it is done (the NN API's fenced
/// execution). If a dependency fails, the compute does not run and its event fails with
/// `NNC_RESULT_OP_FAILED`. `timeout_after_ns` (0: none) bounds the time from the
/// dependencies' signal to completion (a missed deadline). The bound buffers must stay
/// valid, and untouched by the caller, until the event signals.
///
/// # Safety
/// `execution` null or a live execution; `dependencies` null (with `count` 0) or
/// `count` live events; `event` null or writable for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_start_compute_with_dependencies(
    execution: *mut NncExecution,
    dependencies: *const *const NncEvent,
    count: u32,
    timeout_after_ns: u64,
    event: *mut *mut NncEvent,
) -> NncResult {
    guard(|| {
        non_null(event, "event")?;
        // SAFETY: non-null and, by the contract, writable.
        unsafe { event.write(std::ptr::null_mut()) };
        // SAFETY: by the contract, `execution` is null or live.
        let execution = unsafe { execution.as_ref() }.ok_or(CapiError::Null("execution"))?;
        let mut fences = Vec::with_capacity(count as usize);
        if count > 0 {
            non_null(dependencies, "dependencies")?;
            // SAFETY: non-null and, by the contract, `count` readable pointers.
            let list = unsafe { std::slice::from_raw_parts(dependencies, count as usize) };
            for (k, &dependency) in list.iter().enumerate() {
                // SAFETY: by the contract, each is null or a live event.
                let dependency = unsafe { dependency.as_ref() }
                    .ok_or_else(|| CapiError::BadData(format!("dependency {k} is null")))?;
                fences.push(dependency.fence.clone());
            }
        }
        let created = NncEvent::new();
        let model = claim(execution, &created)?;
        let job = Job {
            inner: Arc::clone(&execution.inner),
            fence: created.fence.clone(),
            outcome: Arc::clone(&created.outcome),
        };
        let called = Instant::now();
        let timeout = (timeout_after_ns > 0).then(|| Duration::from_nanos(timeout_after_ns));
        let fenced = count > 0;
        // The callback runs once: on the thread that signals the last dependency, or
        // here when there are none (or all have signalled).
        Fence::all(&fences).on_signal(move |state| {
            if let FenceState::Failed(message) = state {
                job.abandon(CapiError::Reported {
                    code: NncResult::OpFailed,
                    message: format!("an event it waited for failed: {message}"),
                });
                return;
            }
            let signalled = Instant::now();
            let deadline = timeout.and_then(|t| signalled.checked_add(t));
            let scheduler = match model.scheduler() {
                Ok(s) => s,
                Err(e) => return job.abandon(e.into()),
            };
            // The job must come back if the queue refuses it, to complete its event.
            let slot = Arc::new(Mutex::new(Some(job)));
            let queued = Arc::clone(&slot);
            let submitted = scheduler.submit(model.priority(), move || {
                if let Some(job) = queued.lock().unwrap_or_else(PoisonError::into_inner).take() {
                    let started = if fenced { signalled } else { called };
                    job.run(called, started, deadline, fenced);
                }
            });
            if let Err(e) = submitted
                && let Some(job) = slot.lock().unwrap_or_else(PoisonError::into_inner).take()
            {
                job.abandon(e.into());
            }
        });
        // SAFETY: as above: the out-pointer is non-null and writable.
        unsafe { hand_out(event, created) };
        Ok(())
    })
}

/// Starts the compute of `execution` asynchronously on the shared worker pool, at the
/// model's priority, and creates the event that signals when it is done
/// (`nnc_event_wait` returns its result). Until then the execution refuses every other
/// call, and the bound buffers must stay valid and untouched by the caller.
///
/// # Safety
/// `execution` null or a live execution; `event` null or writable for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_start_compute(
    execution: *mut NncExecution,
    event: *mut *mut NncEvent,
) -> NncResult {
    // SAFETY: forwarded contract; no dependencies.
    unsafe {
        nnc_execution_start_compute_with_dependencies(execution, std::ptr::null(), 0, 0, event)
    }
}

/// The two durations of the last fenced compute (with at least one dependency), in
/// nanoseconds: `launched` from the call that started it to its completion, `fenced`
/// from when its dependencies signalled to its completion.
///
/// # Safety
/// `execution` null or a live execution; `launched_ns` and `fenced_ns` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_get_fenced_timing(
    execution: *mut NncExecution,
    launched_ns: *mut u64,
    fenced_ns: *mut u64,
) -> NncResult {
    guard(|| {
        // SAFETY: by the contract, `execution` is null or live.
        let execution = unsafe { execution.as_ref() }.ok_or(CapiError::Null("execution"))?;
        non_null(launched_ns, "launched_ns")?;
        non_null(fenced_ns, "fenced_ns")?;
        let (launched, fenced) = lock(execution)?.fenced_timing()?;
        // SAFETY: both non-null and, by the contract, writable.
        unsafe {
            launched_ns.write(launched);
            fenced_ns.write(fenced);
        }
        Ok(())
    })
}

// ---- bursts -------------------------------------------------------------------------

/// A burst: a sequence of computes of one model with the least overhead per compute
/// (each runs on the caller's thread on the burst's own execution state). Create with
/// `nnc_burst_create`, compute with `nnc_execution_burst_compute`, free with
/// `nnc_burst_free`. One burst computes one execution at a time.
pub struct NncBurst {
    burst: Burst,
    model: u64,
}

/// Creates a burst for `model`.
///
/// # Safety
/// `model` null or a live model; `burst` null or writable for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_burst_create(
    model: *const NncModel,
    burst: *mut *mut NncBurst,
) -> NncResult {
    guard(|| {
        non_null(burst, "burst")?;
        // SAFETY: non-null and, by the contract, writable.
        unsafe { burst.write(std::ptr::null_mut()) };
        // SAFETY: by the contract, `model` is null or live.
        let model = unsafe { model.as_ref() }.ok_or(CapiError::Null("model"))?;
        let created = NncBurst {
            burst: Burst::new(&model.inner.model),
            model: model.inner.model.id(),
        };
        // SAFETY: as above.
        unsafe { hand_out(burst, created) };
        Ok(())
    })
}

/// Frees a burst. Null is ignored.
///
/// # Safety
/// `burst` null or a burst not yet freed, not computing on another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_burst_free(burst: *mut NncBurst) {
    // SAFETY: forwarded contract: null, or from `hand_out` and freed once.
    guard_void(|| unsafe { free_handed_out(burst) })
}

/// Computes `execution` synchronously through `burst` (which must belong to the same
/// model); otherwise as `nnc_execution_compute`.
///
/// # Safety
/// `execution` null or a live execution whose bound buffers are valid; `burst` null or
/// a live burst.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_burst_compute(
    execution: *mut NncExecution,
    burst: *const NncBurst,
) -> NncResult {
    guard(|| {
        // SAFETY: by the contract, `execution` is null or live.
        let execution = unsafe { execution.as_ref() }.ok_or(CapiError::Null("execution"))?;
        // SAFETY: by the contract, `burst` is null or live.
        let burst = unsafe { burst.as_ref() }.ok_or(CapiError::Null("burst"))?;
        let mut state = lock(execution)?;
        if state.model().model.id() != burst.model {
            return Err(CapiError::BadData(
                "the burst was created for another model".into(),
            ));
        }
        // SAFETY: by the contract, every bound buffer is still valid.
        unsafe { state.compute(imp::Via::Burst(&burst.burst), Instant::now(), None) }
    })
}
