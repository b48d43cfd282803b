//! The C API beyond one synchronous compute: load options (threads, priority,
//! preparation deadline, compilation cache, float math, requantization), execution deadlines, memory objects
//! (shared memory by file descriptor), events, asynchronous and fenced computes on the
//! runtime's bounded scheduler, and bursts.
//!
//! Asynchronous and fenced computes run on the process's one bounded worker pool
//! (`nnc_runtime::Scheduler::global`) at the model's priority, never on a thread of
//! their own. While one is in flight its execution refuses every other call
//! (`NNC_RESULT_BAD_STATE`) until its event has signalled, which happens only after the
//! compute's last write (the caller cannot signal a compute's event). Freeing the
//! execution cancels a compute still waiting for its events and waits for a started one.

use std::ffi::c_char;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nnc_runtime::{
    Burst, CacheConfig, Fence, FenceState, FloatMath, LoadOptions, Priority, Requantization,
};

use crate::error::{CapiError, guard, guard_void};
use crate::{
    NncExecution, NncKey, NncModel, NncResult, free_handed_out, hand_out, handles, imp, lock,
    non_null, path_arg,
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
/// `model` null or writable for one pointer; `options` null or a readable
/// `NncLoadOptions` (with `cache_dir` null or NUL-terminated).
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
        let key = handles::get_optional(key, "key")?;
        let loaded = imp::load(open()?, key.as_ref().map(|k| &k.bytes[..]), &options)?;
        // SAFETY: `model` is non-null (checked above) and writable (this function's
        // contract), as `hand_out` needs.
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
    // SAFETY: `load_with` needs `model` null or writable and `options` null or a
    // readable `NncLoadOptions` whose `cache_dir` is null or NUL-terminated: this
    // function's contract (through `nnc_model_load_file`'s and `NncLoadOptions`' docs).
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
    // SAFETY: `load_with` needs `model` null or writable and `options` null or a
    // readable `NncLoadOptions` whose `cache_dir` is null or NUL-terminated: this
    // function's contract (through `nnc_model_load_buffer`'s and `NncLoadOptions`' docs).
    unsafe { load_with(key, options, model, open) }
}

/// Sets the deadline of each compute of `execution`, in nanoseconds from its start (for
/// a fenced compute, from when its fences signalled); 0 removes it. A compute that
/// cannot finish in time fails with `NNC_RESULT_MISSED_DEADLINE_PERSISTENT` when the
/// model has never run that fast, `NNC_RESULT_MISSED_DEADLINE_TRANSIENT` otherwise; the
/// model and the execution stay usable.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_execution_set_timeout(
    execution: *mut NncExecution,
    duration_ns: u64,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        lock(&execution)?.set_timeout(duration_ns);
        Ok(())
    })
}

// ---- memory objects ---------------------------------------------------------------

/// Shared memory for inputs and outputs: anonymous shared memory (a memfd) or a caller's
/// file descriptor. Bind regions of it with `nnc_execution_set_input_from_memory` /
/// `_output_from_memory`; nnc reads and writes it at each compute, under a lock that
/// lets computes reading the same memory run together. Free with `nnc_memory_free`
/// (executions bound to it keep it alive).
///
/// No change another process makes to the file can crash nnc: only memfds sealed
/// against shrinking are mapped; any other descriptor is read and written with
/// `pread`/`pwrite` at each compute, and a file truncated below a binding fails that
/// compute with `NNC_RESULT_BAD_STATE`.
pub struct NncMemory {
    backing: imp::Backing,
}

impl handles::Object for NncMemory {
    const KIND: &'static str = "memory";
}

/// Creates `size` bytes of anonymous shared memory (a memfd), zeroed. Its file
/// descriptor (`nnc_memory_get_fd`) can be mapped by the caller or passed to another
/// process; it is sealed against shrinking and growing (`F_SEAL_SHRINK`,
/// `F_SEAL_GROW`), so its size stays `size`.
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
        let backing = imp::Backing::shared(size)?;
        // SAFETY: `memory` is non-null (checked above) and writable (this function's
        // contract), as `hand_out` needs.
        unsafe { hand_out(memory, NncMemory { backing }) };
        Ok(())
    })
}

/// Uses `size` bytes of the file descriptor `fd` from `offset` (the NN API's
/// `ANeuralNetworksMemory_createFromFd`): a regular file (a memfd, a shared-memory
/// object, a file) open for reading and writing (`O_RDWR`), holding those bytes.
/// Anything else is `NNC_RESULT_BAD_DATA`. nnc duplicates the descriptor: the caller
/// may close its own at once. A memfd sealed against shrinking (`F_SEAL_SHRINK`, and
/// neither `F_SEAL_WRITE` nor `F_SEAL_FUTURE_WRITE`) is mapped shared; any other file
/// is read with `pread` and written with `pwrite` at each compute, so another process
/// truncating it can never crash nnc (a compute that finds its bytes gone fails with
/// `NNC_RESULT_BAD_STATE`).
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
        let backing = imp::Backing::from_fd(owned, offset, size)?;
        // SAFETY: `memory` is non-null (checked above) and writable (this function's
        // contract), as `hand_out` needs.
        unsafe { hand_out(memory, NncMemory { backing }) };
        Ok(())
    })
}

/// The memory's file descriptor (owned by the memory: do not close it).
///
/// # Safety
/// `fd` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_memory_get_fd(memory: *const NncMemory, fd: *mut i32) -> NncResult {
    guard(|| {
        let memory = handles::get(memory, "memory")?;
        non_null(fd, "fd")?;
        let raw = memory.backing.raw_fd().ok_or_else(|| {
            CapiError::BadState("the memory has no file descriptor (it was released)".into())
        })?;
        // SAFETY: non-null and, by the contract, writable.
        unsafe { fd.write(raw) };
        Ok(())
    })
}

/// Frees a memory object. Null, and a memory already freed, are ignored. Executions
/// still bound to it keep it alive, and so does a compute in flight.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_memory_free(memory: *mut NncMemory) {
    guard_void(|| free_handed_out(memory))
}

fn memory_region(
    memory: *const NncMemory,
    offset: usize,
    length: usize,
) -> Result<imp::Region, CapiError> {
    let memory = handles::get(memory, "memory")?;
    let available = memory.backing.len();
    if offset.checked_add(length).is_none_or(|end| end > available) {
        return Err(CapiError::BadData(format!(
            "bytes {offset}..{} are beyond the memory's {available} bytes",
            offset.saturating_add(length)
        )));
    }
    Ok(imp::Region::Memory {
        memory: memory.backing.clone(),
        offset,
        length,
    })
}

/// Binds input `index` to `length` bytes of `memory` at `offset`, laid out as for
/// `nnc_execution_set_input` (the input's element type and declared dimensions).
#[unsafe(no_mangle)]
pub extern "C" fn nnc_execution_set_input_from_memory(
    execution: *mut NncExecution,
    index: u32,
    memory: *const NncMemory,
    offset: usize,
    length: usize,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        let region = memory_region(memory, offset, length)?;
        lock(&execution)?.set_input(index as usize, None, region)
    })
}

/// Binds output `index` to `length` bytes of `memory` at `offset` (as
/// `nnc_execution_set_output`).
#[unsafe(no_mangle)]
pub extern "C" fn nnc_execution_set_output_from_memory(
    execution: *mut NncExecution,
    index: u32,
    memory: *const NncMemory,
    offset: usize,
    length: usize,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        let region = memory_region(memory, offset, length)?;
        lock(&execution)?.set_output(index as usize, region)
    })
}

// ---- events: asynchronous and fenced computes -------------------------------------

/// Who completes an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// Made by `nnc_event_create`: the caller signals it.
    Caller,
    /// A compute's: only the compute's completion signals it, after its last write.
    Compute,
}

/// A compute's outcome, stored before its fence signals.
type Outcome = Arc<Mutex<Option<(NncResult, String)>>>;

/// A one-shot completion signal: the event of an asynchronous or fenced compute, or one
/// the caller creates (`nnc_event_create`) and signals itself (`nnc_event_signal`), for
/// a fenced compute to wait for. Free with `nnc_event_free`.
pub struct NncEvent {
    fence: Fence,
    outcome: Outcome,
    owner: Owner,
}

impl handles::Object for NncEvent {
    const KIND: &'static str = "event";
}

impl NncEvent {
    fn new(owner: Owner) -> NncEvent {
        NncEvent {
            fence: Fence::new(),
            outcome: Arc::new(Mutex::new(None)),
            owner,
        }
    }
}

/// Records `result` as the outcome, then signals the fence (success) or fails it: a
/// waiter never sees the signal before the outcome.
fn complete(fence: &Fence, outcome: &Outcome, result: Result<(), CapiError>) {
    let (code, message) = match &result {
        Ok(()) => (NncResult::NoError, String::new()),
        Err(e) => (e.code(), e.to_string()),
    };
    *outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some((code, message.clone()));
    if code == NncResult::NoError {
        fence.signal();
    } else {
        fence.fail(message);
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
        unsafe { hand_out(event, NncEvent::new(Owner::Caller)) };
        Ok(())
    })
}

/// Signals an event the caller created. Signalling an event twice, or one that belongs
/// to a compute (from `nnc_execution_start_compute*`, whether in flight or done), is
/// `NNC_RESULT_BAD_STATE`: only a compute's completion signals its event, after its
/// last write to the bound buffers.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_event_signal(event: *mut NncEvent) -> NncResult {
    guard(|| {
        let event = handles::get(event, "event")?;
        if event.owner == Owner::Compute {
            return Err(CapiError::BadState(
                "the event belongs to a compute: only the compute's completion signals it \
                 (wait for it with nnc_event_wait)"
                    .into(),
            ));
        }
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
/// caller created, `NNC_RESULT_NO_ERROR`. When it returns, the compute has written
/// everything it will write: the bound buffers are the caller's again. May be called
/// more than once, and from several threads.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_event_wait(event: *mut NncEvent) -> NncResult {
    guard(|| {
        let event = handles::get(event, "event")?;
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

/// Frees an event. Null, and an event already freed, are ignored. Freeing the event of
/// a compute in flight does not cancel the compute. Freeing a caller's event that has
/// not signalled fails it (no one can signal it any more): the fenced computes waiting
/// for it fail with `NNC_RESULT_OP_FAILED` without running.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_event_free(event: *mut NncEvent) {
    guard_void(|| {
        if let Some(event) = handles::take(event)
            && event.owner == Owner::Caller
        {
            event
                .fence
                .fail("the event was freed before it was signalled");
        }
    })
}

/// Stages of a compute in flight ([`InFlight::stage`]).
const WAITING: u8 = 0;
/// Queued or running: it completes on its own.
const STARTED: u8 = 1;
/// Its execution was freed while it waited for its dependencies: it never runs.
const CANCELLED: u8 = 2;

/// The asynchronous or fenced compute an execution last started.
pub(crate) struct InFlight {
    fence: Fence,
    outcome: Outcome,
    /// [`WAITING`], then [`STARTED`] (by the job) or [`CANCELLED`] (by the free):
    /// whichever moves it first decides, exactly once, who completes the event.
    stage: Arc<AtomicU8>,
}

impl NncExecution {
    /// What `nnc_execution_free` does before dropping the execution: refuses every
    /// later call, cancels a compute still waiting for its dependencies (which may never
    /// signal), and waits for one queued or running and for a call on another thread,
    /// so that nnc writes no bound buffer after the free returns.
    pub(crate) fn shut_down(&self) {
        let in_flight = {
            // Blocks while a compute holds the execution (a synchronous call on another
            // thread, or a started job computing).
            let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            state.freed = true;
            self.in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        };
        let Some(in_flight) = in_flight else {
            return;
        };
        let cancelled = in_flight
            .stage
            .compare_exchange(WAITING, CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if cancelled {
            complete(
                &in_flight.fence,
                &in_flight.outcome,
                Err(CapiError::Reported {
                    code: NncResult::OpFailed,
                    message: "the execution was freed while its compute waited for the events \
                              it depends on: the compute never ran"
                        .into(),
                }),
            );
        } else {
            in_flight.fence.wait(None);
        }
    }
}

/// Claims an execution for a compute in flight: checks its bindings, marks it busy and
/// records the compute for freeing to cancel or wait for.
fn claim(
    execution: &NncExecution,
    event: &NncEvent,
    stage: &Arc<AtomicU8>,
) -> Result<Arc<nnc_runtime::PreparedModel>, CapiError> {
    let mut state = lock(execution)?;
    state.check_bound()?;
    state.busy = true;
    *execution
        .in_flight
        .lock()
        .unwrap_or_else(PoisonError::into_inner) = Some(InFlight {
        fence: event.fence.clone(),
        outcome: Arc::clone(&event.outcome),
        stage: Arc::clone(stage),
    });
    Ok(Arc::clone(&state.model().model))
}

/// The job of a compute in flight: computes under the execution's lock (blocking: the
/// claim keeps every other caller out), releases it, then completes the event.
struct Job {
    inner: Arc<Mutex<imp::Execution>>,
    fence: Fence,
    outcome: Outcome,
    stage: Arc<AtomicU8>,
}

impl Job {
    /// Takes the compute out of [`WAITING`]; false when the execution's free cancelled
    /// it first (the event is completed already; nothing may be touched).
    fn begin(&self) -> bool {
        self.stage
            .compare_exchange(WAITING, STARTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Computes: the deadline counts from `started` (the call, or the dependencies'
    /// signal); a fenced compute records its durations from `called` and `started`.
    fn run(self, called: Instant, started: Instant, deadline: Option<Instant>, fenced: bool) {
        let result = {
            let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: the C contract keeps bound buffers valid until the event
                // signals (nnc_execution_start_compute), and the free of the execution
                // waits for this job (`shut_down`).
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
        // Every write to the bound buffers happened above: only now may a waiter return.
        complete(&self.fence, &self.outcome, result);
    }

    /// Completes the event without computing (a failed dependency, a full queue).
    fn abandon(self, error: CapiError) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .busy = false;
        complete(&self.fence, &self.outcome, Err(error));
    }
}

/// Starts the compute of `execution` once every event of `dependencies` (`count` of
/// them; none: at once) has signalled, on the shared worker pool at the model's
/// priority, and creates the event that signals when it is done (the NN API's fenced
/// execution). If a dependency fails (a failed compute, or a caller's event freed
/// before it signalled), the compute does not run and its event fails with
/// `NNC_RESULT_OP_FAILED`. `timeout_after_ns` (0: none) bounds the time from the
/// dependencies' signal to completion (a missed deadline). The bound buffers must stay
/// valid, and untouched by the caller, until the event signals. Freeing the execution
/// while the compute still waits for its dependencies cancels it.
///
/// # Safety
/// `dependencies` null (with `count` 0) or `count` readable handles; `event` null or
/// writable for one pointer.
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
        let execution = handles::get(execution, "execution")?;
        let mut fences = Vec::new();
        if count > 0 {
            non_null(dependencies, "dependencies")?;
            // SAFETY: non-null and, by the contract, `count` readable handles.
            let list = unsafe { std::slice::from_raw_parts(dependencies, count as usize) };
            for (k, &dependency) in list.iter().enumerate() {
                if dependency.is_null() {
                    return Err(CapiError::BadData(format!("dependency {k} is null")));
                }
                fences.push(handles::get(dependency, "dependency")?.fence.clone());
            }
        }
        let created = NncEvent::new(Owner::Compute);
        let stage = Arc::new(AtomicU8::new(WAITING));
        let model = claim(&execution, &created, &stage)?;
        let job = Job {
            inner: Arc::clone(&execution.inner),
            fence: created.fence.clone(),
            outcome: Arc::clone(&created.outcome),
            stage,
        };
        let called = Instant::now();
        let timeout = (timeout_after_ns > 0).then(|| Duration::from_nanos(timeout_after_ns));
        let fenced = count > 0;
        // The callback runs once: on the thread that signals the last dependency, or
        // here when there are none (or all have signalled).
        Fence::all(&fences).on_signal(move |state| {
            if !job.begin() {
                return;
            }
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
        // SAFETY: `event` is non-null (checked above) and writable (this function's
        // contract), as `hand_out` needs.
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
/// `event` null or writable for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_start_compute(
    execution: *mut NncExecution,
    event: *mut *mut NncEvent,
) -> NncResult {
    // SAFETY: with no dependencies (null, count 0, which the callee allows) its
    // contract is this function's: `event` null or writable.
    unsafe {
        nnc_execution_start_compute_with_dependencies(execution, std::ptr::null(), 0, 0, event)
    }
}

/// The two durations of the last fenced compute (with at least one dependency), in
/// nanoseconds: `launched` from the call that started it to its completion, `fenced`
/// from when its dependencies signalled to its completion.
///
/// # Safety
/// `launched_ns` and `fenced_ns` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_get_fenced_timing(
    execution: *mut NncExecution,
    launched_ns: *mut u64,
    fenced_ns: *mut u64,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        non_null(launched_ns, "launched_ns")?;
        non_null(fenced_ns, "fenced_ns")?;
        let (launched, fenced) = lock(&execution)?.fenced_timing()?;
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

impl handles::Object for NncBurst {
    const KIND: &'static str = "burst";
}

/// Creates a burst for `model`.
///
/// # Safety
/// `burst` null or writable for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_burst_create(
    model: *const NncModel,
    burst: *mut *mut NncBurst,
) -> NncResult {
    guard(|| {
        non_null(burst, "burst")?;
        // SAFETY: non-null and, by the contract, writable.
        unsafe { burst.write(std::ptr::null_mut()) };
        let model = handles::get(model, "model")?;
        let created = NncBurst {
            burst: Burst::new(&model.inner.model),
            model: model.inner.model.id(),
        };
        // SAFETY: `burst` is non-null (checked above) and writable (this function's
        // contract), as `hand_out` needs.
        unsafe { hand_out(burst, created) };
        Ok(())
    })
}

/// Frees a burst. Null, and a burst already freed, are ignored; a compute through it
/// on another thread keeps it alive until it returns.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_burst_free(burst: *mut NncBurst) {
    guard_void(|| free_handed_out(burst))
}

/// Computes `execution` synchronously through `burst` (which must belong to the same
/// model); otherwise as `nnc_execution_compute`.
///
/// # Safety
/// The execution's bound buffers must all still be valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_burst_compute(
    execution: *mut NncExecution,
    burst: *const NncBurst,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        let burst = handles::get(burst, "burst")?;
        let mut state = lock(&execution)?;
        if state.model().model.id() != burst.model {
            return Err(CapiError::BadData(
                "the burst was created for another model".into(),
            ));
        }
        // SAFETY: by the contract, every bound buffer is still valid.
        unsafe { state.compute(imp::Via::Burst(&burst.burst), Instant::now(), None) }
    })
}
