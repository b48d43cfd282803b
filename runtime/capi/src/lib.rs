//! `nnc-runtime-capi`: the nnc runtime behind a C API, shaped like the runtime half of
//! the Android NN API (load a compiled model, create an execution, bind inputs and
//! outputs to caller memory, compute, read output shapes and timing).
//!
//! The header `include/nnc.h` is generated from this file by cbindgen (the test
//! `tests/header.rs` fails when it is stale; `NNC_UPDATE_HEADER=1` rewrites it).
//!
//! Every exported function catches panics and reports them as a result code; null
//! pointers and calls in the wrong state are result codes too, never crashes.

use std::ffi::{CStr, c_char, c_void};
use std::path::Path;

mod error;
mod flow;
mod handles;
mod imp;

pub use flow::*;

use error::{CapiError, guard, guard_void};

/// Freed memory is wiped, as in the `nnc` binary (see `nnc_runtime::alloc`).
#[cfg(feature = "wipe-freed-memory")]
#[global_allocator]
static ALLOCATOR: nnc_runtime::alloc::WipingAllocator = nnc_runtime::alloc::WipingAllocator;

/// Result codes, numbered like the NN API's (`ANEURALNETWORKS_*`) where one exists;
/// nnc's own codes start at 100. Every function returning an `NncResult` sets the
/// calling thread's last error message (`nnc_last_error_message`) when it fails and
/// clears it when it succeeds.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NncResult {
    /// Success.
    NoError = 0,
    /// Memory could not be allocated, or the model asks for more than the runtime's
    /// resource limits allow.
    OutOfMemory = 1,
    /// A pointer argument that must not be null was null.
    UnexpectedNull = 3,
    /// An argument is invalid: an index out of range, a buffer length that does not
    /// match the operand, a malformed model file or key.
    BadData = 4,
    /// An operation failed while computing (or an internal error in nnc).
    OpFailed = 5,
    /// The call is not valid in the object's state: computing with an unbound input or
    /// output, reading output shapes or timing before a compute, computing the same
    /// execution from two threads at once.
    BadState = 6,
    /// A file (model or key) could not be opened, read or mapped.
    Unmappable = 7,
    /// An output buffer is too small; the size needed is given by
    /// `nnc_execution_get_output_size` (and `NncOperandInfo.byte_size` when the output's
    /// shape is known before computing).
    OutputInsufficientSize = 8,
    /// The execution missed its deadline for reasons that may pass (a busy queue, a
    /// loaded machine): the same request may succeed later.
    MissedDeadlineTransient = 10,
    /// A loop of the model ran longer than the execution's loop timeout, or the
    /// deadline is shorter than the model has ever needed.
    MissedDeadlinePersistent = 11,
    /// Too many executions are queued; try again later.
    ResourceExhaustedTransient = 12,
    /// Wrong key, or the file was altered: the model does not authenticate.
    IntegrityFailure = 100,
    /// The model uses something this runtime does not support (format version, operation).
    Unsupported = 101,
    /// The file is encrypted or authenticated with a key, and no key was given.
    KeyRequired = 102,
}

/// Element types of model inputs and outputs, as the source model (ONNX, TFLite)
/// declared them; every element is stored little-endian, tensors row-major.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NncElementType {
    Float32 = 0,
    Float16 = 1,
    Float64 = 2,
    Int8 = 3,
    Uint8 = 4,
    Int16 = 5,
    Uint16 = 6,
    Int32 = 7,
    Uint32 = 8,
    Int64 = 9,
    Uint64 = 10,
    /// One byte per element, 0 or 1.
    Bool = 11,
    /// The narrow types, laid out as `ml_dtypes` lays them out in NumPy: bfloat16 in two
    /// bytes, the float8 and float4 formats one code per byte, the 4- and 2-bit
    /// integers one value per byte (sign-extended). The model computes them in float32
    /// or 8-bit integers; inputs may also be given in those types (float32 is rounded
    /// to the format).
    Bfloat16 = 12,
    Float8E4M3Fn = 13,
    Float8E4M3Fnuz = 14,
    Float8E5M2 = 15,
    Float8E5M2Fnuz = 16,
    Float4E2M1Fn = 17,
    Int4 = 18,
    Uint4 = 19,
    Int2 = 20,
    Uint2 = 21,
}

/// A key held by the runtime: C code never sees its bytes again after creating it.
/// Create with `nnc_key_from_bytes` or `nnc_key_from_file`; free (and zeroize) with
/// `nnc_key_free`. A key may be freed as soon as the models that need it are loaded.
pub struct NncKey {
    bytes: zeroize::Zeroizing<Vec<u8>>,
}

/// A loaded, authenticated, prepared model. Create with `nnc_model_load_file` or
/// `nnc_model_load_buffer`; free with `nnc_model_free`. A model may be used from
/// several threads at once (each with its own executions). Executions keep what they
/// need of their model alive, so a model may be freed before its executions.
pub struct NncModel {
    inner: std::sync::Arc<imp::ModelInner>,
}

/// One execution of a model: bind every input and output once, then compute as often
/// as wanted (inputs are read and outputs written at each compute). Create with
/// `nnc_execution_create`; free with `nnc_execution_free`. An execution computes on one
/// thread at a time (a concurrent compute fails with `NNC_RESULT_BAD_STATE`).
pub struct NncExecution {
    inner: std::sync::Arc<std::sync::Mutex<imp::Execution>>,
    /// The asynchronous or fenced compute last started, if any: freeing the execution
    /// cancels it while it waits for its dependencies and waits for it otherwise, so nnc
    /// never writes caller memory after the free returns.
    in_flight: std::sync::Mutex<Option<flow::InFlight>>,
}

impl handles::Object for NncKey {
    const KIND: &'static str = "key";
}

impl handles::Object for NncModel {
    const KIND: &'static str = "model";
}

impl handles::Object for NncExecution {
    const KIND: &'static str = "execution";
}

/// Description of one model input or output. `name` and `dimensions` point into the
/// model and stay valid until `nnc_model_free`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NncOperandInfo {
    /// NUL-terminated name from the source model.
    pub name: *const c_char,
    pub element_type: NncElementType,
    /// Number of dimensions (0 for a scalar).
    pub rank: u32,
    /// `rank` dimensions; 0 is a dimension known only when computing.
    pub dimensions: *const u32,
    /// Bytes of the whole tensor, or 0 when a dimension is unknown.
    pub byte_size: usize,
}

pub(crate) fn non_null<T>(p: *const T, what: &'static str) -> Result<(), CapiError> {
    if p.is_null() {
        Err(CapiError::Null(what))
    } else {
        Ok(())
    }
}

/// The message of the last failed nnc call on the calling thread ("" when the last call
/// succeeded or none was made). The string belongs to nnc and stays valid until the
/// next nnc call on this thread; copy it to keep it. Never null.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_last_error_message() -> *const c_char {
    error::last_error_ptr()
}

/// A static name for a result code (`"NNC_RESULT_BAD_DATA"`), or
/// `"NNC_RESULT_UNKNOWN"`. Never null; never freed.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_result_name(code: i32) -> *const c_char {
    let name: &'static CStr = match code {
        0 => c"NNC_RESULT_NO_ERROR",
        1 => c"NNC_RESULT_OUT_OF_MEMORY",
        3 => c"NNC_RESULT_UNEXPECTED_NULL",
        4 => c"NNC_RESULT_BAD_DATA",
        5 => c"NNC_RESULT_OP_FAILED",
        6 => c"NNC_RESULT_BAD_STATE",
        7 => c"NNC_RESULT_UNMAPPABLE",
        8 => c"NNC_RESULT_OUTPUT_INSUFFICIENT_SIZE",
        11 => c"NNC_RESULT_MISSED_DEADLINE_PERSISTENT",
        100 => c"NNC_RESULT_INTEGRITY_FAILURE",
        101 => c"NNC_RESULT_UNSUPPORTED",
        102 => c"NNC_RESULT_KEY_REQUIRED",
        _ => c"NNC_RESULT_UNKNOWN",
    };
    name.as_ptr()
}

/// Bytes per element of `element_type` (0 for a value that is not an element type).
#[unsafe(no_mangle)]
pub extern "C" fn nnc_element_size(element_type: i32) -> usize {
    imp::element_type_from_code(element_type).map_or(0, |t| imp::data_type(t).size())
}

/// Creates a key from raw bytes (16, 24 or 32: what `nnc keygen` makes). The bytes are
/// copied; the caller may wipe its copy at once.
///
/// # Safety
/// `bytes` must point to `length` readable bytes; `key` must point to writable storage
/// for one pointer. On success `*key` owns a new key (free with `nnc_key_free`); on
/// failure `*key` is set to null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_key_from_bytes(
    bytes: *const u8,
    length: usize,
    key: *mut *mut NncKey,
) -> NncResult {
    guard(|| {
        non_null(key, "key")?;
        // SAFETY: `key` is non-null and, by the contract, writable.
        unsafe { key.write(std::ptr::null_mut()) };
        non_null(bytes, "bytes")?;
        // SAFETY: by the contract, `bytes` points to `length` readable bytes.
        let raw = unsafe { std::slice::from_raw_parts(bytes, length) };
        let created = imp::key_from_bytes(raw)?;
        // SAFETY: `key` is non-null (checked above) and writable (this function's
        // contract), as `hand_out` needs.
        unsafe { hand_out(key, created) };
        Ok(())
    })
}

/// Creates a key from a key file as `nnc keygen` writes it: hex text (surrounding
/// whitespace and `#` comment lines ignored, at most 96 bytes), or a device's x25519 private key in PEM
/// (`nnc keygen --algorithm x25519`; it opens models compiled with `--recipient`, at
/// most 16 KiB). The file must be a regular file: anything else (a FIFO, a device such
/// as /dev/zero, a directory, a longer file) is `NNC_RESULT_BAD_DATA`, refused without
/// blocking and without reading past the bound; a file that cannot be opened is
/// `NNC_RESULT_UNMAPPABLE`.
///
/// # Safety
/// `path` must be a NUL-terminated string; `key` must point to writable storage for one
/// pointer. On success `*key` owns a new key (free with `nnc_key_free`); on failure it
/// is set to null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_key_from_file(
    path: *const c_char,
    key: *mut *mut NncKey,
) -> NncResult {
    guard(|| {
        non_null(key, "key")?;
        // SAFETY: `key` is non-null and, by the contract, writable.
        unsafe { key.write(std::ptr::null_mut()) };
        // SAFETY: by the contract, `path` is null or a NUL-terminated string.
        let path = unsafe { path_arg(path) }?;
        let created = imp::key_from_file(path)?;
        // SAFETY: `key` is non-null (checked above) and writable (this function's
        // contract), as `hand_out` needs.
        unsafe { hand_out(key, created) };
        Ok(())
    })
}

/// Zeroizes and frees a key. Null, and a key already freed, are ignored.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_key_free(key: *mut NncKey) {
    guard_void(|| free_handed_out(key))
}

/// A UTF-8 path from a C string.
///
/// # Safety
/// `path` must be null or a NUL-terminated string.
pub(crate) unsafe fn path_arg<'a>(path: *const c_char) -> Result<&'a Path, CapiError> {
    non_null(path, "path")?;
    // SAFETY: non-null and, by the caller's contract, NUL-terminated.
    let text = unsafe { CStr::from_ptr(path) };
    let text = text
        .to_str()
        .map_err(|_| CapiError::BadData("the path is not UTF-8".into()))?;
    Ok(Path::new(text))
}

/// Loads a compiled `.nnc` file (memory-mapped), authenticating it with `key` (null for
/// a file written without a key). The key is copied into the runtime's simulated device
/// for the load and wiped from it afterwards; the caller still owns `key`.
///
/// # Safety
/// `path` must be a NUL-terminated string; `model` must point to writable storage for
/// one pointer. On success `*model` owns a new model (free with `nnc_model_free`); on
/// failure it is set to null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_model_load_file(
    path: *const c_char,
    key: *const NncKey,
    model: *mut *mut NncModel,
) -> NncResult {
    // SAFETY: this function's contract is `nnc_model_load_file_with_options`'s for
    // `path` and `model`, and null options are allowed (the defaults).
    unsafe { flow::nnc_model_load_file_with_options(path, key, std::ptr::null(), model) }
}

/// Loads a compiled model from memory (the bytes of a `.nnc` file, copied: the caller
/// may free its buffer at once). Otherwise as `nnc_model_load_file`.
///
/// # Safety
/// `data` must point to `length` readable bytes; `model` must point to writable storage
/// for one pointer. On success `*model` owns a new model (free with `nnc_model_free`);
/// on failure it is set to null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_model_load_buffer(
    data: *const u8,
    length: usize,
    key: *const NncKey,
    model: *mut *mut NncModel,
) -> NncResult {
    // SAFETY: this function's contract is `nnc_model_load_buffer_with_options`'s for
    // `data`, `length` and `model`, and null options are allowed (the defaults).
    unsafe { flow::nnc_model_load_buffer_with_options(data, length, key, std::ptr::null(), model) }
}

/// Frees a model. Null, and a model already freed, are ignored. Executions created
/// from it stay usable. The `NncOperandInfo` pointers it handed out become invalid.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_model_free(model: *mut NncModel) {
    guard_void(|| free_handed_out(model))
}

/// The number of model inputs.
///
/// # Safety
/// `count` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_model_input_count(
    model: *const NncModel,
    count: *mut u32,
) -> NncResult {
    // SAFETY: `io_count` needs `count` null or writable: this function's contract.
    unsafe { io_count(model, count, true) }
}

/// The number of model outputs.
///
/// # Safety
/// `count` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_model_output_count(
    model: *const NncModel,
    count: *mut u32,
) -> NncResult {
    // SAFETY: `io_count` needs `count` null or writable: this function's contract.
    unsafe { io_count(model, count, false) }
}

/// # Safety
/// `count` null or writable.
unsafe fn io_count(model: *const NncModel, count: *mut u32, inputs: bool) -> NncResult {
    guard(|| {
        non_null(count, "count")?;
        let model = handles::get(model, "model")?;
        let n = if inputs {
            model.inner.inputs.len()
        } else {
            model.inner.outputs.len()
        };
        // SAFETY: non-null and, by the contract, writable.
        unsafe { count.write(n as u32) };
        Ok(())
    })
}

/// Describes input `index` (from 0): name, element type, rank, dimensions, byte size.
///
/// # Safety
/// `info` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_model_get_input(
    model: *const NncModel,
    index: u32,
    info: *mut NncOperandInfo,
) -> NncResult {
    // SAFETY: `io_info` needs `info` null or writable: this function's contract.
    unsafe { io_info(model, index, info, true) }
}

/// Describes output `index` (from 0): name, element type, rank, dimensions, byte size.
///
/// # Safety
/// `info` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_model_get_output(
    model: *const NncModel,
    index: u32,
    info: *mut NncOperandInfo,
) -> NncResult {
    // SAFETY: `io_info` needs `info` null or writable: this function's contract.
    unsafe { io_info(model, index, info, false) }
}

/// # Safety
/// `info` null or writable.
unsafe fn io_info(
    model: *const NncModel,
    index: u32,
    info: *mut NncOperandInfo,
    inputs: bool,
) -> NncResult {
    guard(|| {
        non_null(info, "info")?;
        let model = handles::get(model, "model")?;
        let desc = model.inner.io(inputs, index as usize)?;
        // SAFETY: non-null and, by the contract, writable.
        unsafe { info.write(desc.info()) };
        Ok(())
    })
}

/// Creates an execution of `model`, with nothing bound.
///
/// # Safety
/// `execution` null or writable. On success `*execution` owns a new execution (free
/// with `nnc_execution_free`); on failure it is set to null.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_create(
    model: *const NncModel,
    execution: *mut *mut NncExecution,
) -> NncResult {
    guard(|| {
        non_null(execution, "execution")?;
        // SAFETY: non-null and, by the contract, writable.
        unsafe { execution.write(std::ptr::null_mut()) };
        let model = handles::get(model, "model")?;
        let created = NncExecution {
            inner: std::sync::Arc::new(std::sync::Mutex::new(imp::Execution::new(
                std::sync::Arc::clone(&model.inner),
            ))),
            in_flight: std::sync::Mutex::new(None),
        };
        // SAFETY: `execution` is non-null (checked above) and writable (this function's
        // contract), as `hand_out` needs.
        unsafe { hand_out(execution, created) };
        Ok(())
    })
}

/// Frees an execution. Null, and an execution already freed, are ignored. A compute
/// still waiting for the events it depends on is cancelled (its event fails with
/// `NNC_RESULT_OP_FAILED`; nothing is read or written); one queued or running is waited
/// for, as is a compute of this execution on another thread: nnc writes no bound buffer
/// after this returns.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_execution_free(execution: *mut NncExecution) {
    guard_void(|| {
        if let Some(execution) = handles::take(execution) {
            execution.shut_down();
        }
    })
}

/// Locks an execution for one call; a compute running on another thread, or an
/// asynchronous compute in flight, is a bad state.
pub(crate) fn lock(
    execution: &NncExecution,
) -> Result<std::sync::MutexGuard<'_, imp::Execution>, CapiError> {
    let guard = match execution.inner.try_lock() {
        Ok(g) => g,
        // A panic while locked left nothing half-done that matters: bindings are plain
        // values, and results are replaced at the next compute.
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            return Err(CapiError::BadState(
                "the execution is in use on another thread (an execution computes on one \
                 thread at a time)"
                    .into(),
            ));
        }
    };
    if guard.freed {
        return Err(CapiError::BadState("the execution is being freed".into()));
    }
    if guard.busy {
        return Err(CapiError::BadState(
            "an asynchronous compute of this execution is in flight: wait for its event \
             first"
                .into(),
        ));
    }
    Ok(guard)
}

/// Binds input `index` to `length` bytes at `buffer`, laid out as the input's element
/// type and declared dimensions (`NncOperandInfo.byte_size` bytes exactly). The input
/// must have no unknown dimension (use `nnc_execution_set_input_with_dimensions`).
/// nnc reads the buffer at every compute and never writes it: it must stay valid until
/// the input is bound again or the execution is freed.
///
/// # Safety
/// `buffer` must stay readable for `length` bytes for as long as it is bound.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_set_input(
    execution: *mut NncExecution,
    index: u32,
    buffer: *const c_void,
    length: usize,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        non_null(buffer, "buffer")?;
        lock(&execution)?.set_input(
            index as usize,
            None,
            imp::Region::Pointer(buffer.cast_mut().cast(), length),
        )
    })
}

/// Binds input `index` with its dimensions for this execution (`rank` values at
/// `dimensions`, which must agree with every known declared dimension), for inputs
/// declared with unknown dimensions. `length` must be exactly the bytes of that shape.
/// The dimensions are copied; the buffer as for `nnc_execution_set_input`.
///
/// # Safety
/// `dimensions` null or `rank` readable values; `buffer` must stay readable for
/// `length` bytes for as long as it is bound.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_set_input_with_dimensions(
    execution: *mut NncExecution,
    index: u32,
    dimensions: *const u32,
    rank: u32,
    buffer: *const c_void,
    length: usize,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        non_null(buffer, "buffer")?;
        let dims: Vec<usize> = if rank == 0 {
            Vec::new()
        } else {
            non_null(dimensions, "dimensions")?;
            // SAFETY: non-null and, by the contract, `rank` readable values.
            unsafe { std::slice::from_raw_parts(dimensions, rank as usize) }
                .iter()
                .map(|&d| d as usize)
                .collect()
        };
        lock(&execution)?.set_input(
            index as usize,
            Some(dims),
            imp::Region::Pointer(buffer.cast_mut().cast(), length),
        )
    })
}

/// Binds output `index` to `length` writable bytes at `buffer`. When the output's size
/// is known before computing and `length` is smaller, fails with
/// `NNC_RESULT_OUTPUT_INSUFFICIENT_SIZE` (the size needed is `NncOperandInfo.byte_size`
/// and `nnc_execution_get_output_size`). nnc writes the buffer at every successful
/// compute: it must stay valid until the output is bound again or the execution is freed.
///
/// # Safety
/// `buffer` must stay writable for `length` bytes for as long as it is bound, and must
/// not be read or written by the caller during a compute.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_set_output(
    execution: *mut NncExecution,
    index: u32,
    buffer: *mut c_void,
    length: usize,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        non_null(buffer, "buffer")?;
        lock(&execution)?.set_output(index as usize, imp::Region::Pointer(buffer.cast(), length))
    })
}

/// Sets how long the loops (WHILE operations) of one compute may run in all, in
/// nanoseconds, before it fails with `NNC_RESULT_MISSED_DEADLINE_PERSISTENT` (the NN
/// API's loop timeout). The default is 2 s; more than 15 s is `NNC_RESULT_BAD_DATA`.
#[unsafe(no_mangle)]
pub extern "C" fn nnc_execution_set_loop_timeout(
    execution: *mut NncExecution,
    duration_ns: u64,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        lock(&execution)?.set_loop_timeout(duration_ns)
    })
}

/// Computes synchronously: reads every bound input, runs the model, and writes every
/// bound output. All inputs and outputs must be bound. If an output buffer is too small
/// for the output computed (outputs whose shape is known only when computing), fails
/// with `NNC_RESULT_OUTPUT_INSUFFICIENT_SIZE` before writing any output; the sizes and
/// shapes needed are then readable with `nnc_execution_get_output_size` and
/// `nnc_execution_get_output_dimensions`. May be called again and again.
///
/// # Safety
/// The execution's bound buffers must all still be valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_compute(execution: *mut NncExecution) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        let mut state = lock(&execution)?;
        // SAFETY: by the contract, every bound buffer is still valid.
        unsafe { state.compute(imp::Via::Plain, std::time::Instant::now(), None) }
    })
}

/// The rank of output `index` as computed by the last compute (also after one that
/// failed with `NNC_RESULT_OUTPUT_INSUFFICIENT_SIZE`).
///
/// # Safety
/// `rank` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_get_output_rank(
    execution: *mut NncExecution,
    index: u32,
    rank: *mut u32,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        non_null(rank, "rank")?;
        let state = lock(&execution)?;
        let shape = state.output_shape(index as usize)?;
        // SAFETY: non-null and, by the contract, writable.
        unsafe { rank.write(shape.len() as u32) };
        Ok(())
    })
}

/// The dimensions of output `index` as computed by the last compute: writes `rank`
/// values (see `nnc_execution_get_output_rank`) to `dimensions`, which holds `capacity`.
/// A capacity below the rank is `NNC_RESULT_BAD_DATA` (nothing written). `dimensions`
/// may be null when the rank is 0.
///
/// # Safety
/// `dimensions` null or writable for `capacity` values.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_get_output_dimensions(
    execution: *mut NncExecution,
    index: u32,
    dimensions: *mut u32,
    capacity: u32,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        let state = lock(&execution)?;
        let shape = state.output_shape(index as usize)?;
        if shape.is_empty() {
            return Ok(());
        }
        non_null(dimensions, "dimensions")?;
        if (capacity as usize) < shape.len() {
            return Err(CapiError::BadData(format!(
                "output {index} has rank {}, but dimensions holds {capacity}",
                shape.len()
            )));
        }
        for (k, &d) in shape.iter().enumerate() {
            let d = u32::try_from(d).map_err(|_| {
                CapiError::BadData(format!("output {index}: dimension {d} exceeds 32 bits"))
            })?;
            // SAFETY: k < shape.len() <= capacity, and by the contract `dimensions` is
            // writable for `capacity` values.
            unsafe { dimensions.add(k).write(d) };
        }
        Ok(())
    })
}

/// The bytes output `index` needs: as computed by the last compute (also after one that
/// failed with `NNC_RESULT_OUTPUT_INSUFFICIENT_SIZE`), or before any compute, its
/// declared size when that is known (`NNC_RESULT_BAD_STATE` otherwise).
///
/// # Safety
/// `size` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_get_output_size(
    execution: *mut NncExecution,
    index: u32,
    size: *mut usize,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        non_null(size, "size")?;
        let n = lock(&execution)?.output_size(index as usize)?;
        // SAFETY: non-null and, by the contract, writable.
        unsafe { size.write(n) };
        Ok(())
    })
}

/// Timing of the last successful compute, in nanoseconds: `on_device` running the
/// model's operations, `total` the whole call (input and output conversion and copies
/// included). `NNC_RESULT_BAD_STATE` before a successful compute.
///
/// # Safety
/// `on_device_ns` and `total_ns` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nnc_execution_get_timing(
    execution: *mut NncExecution,
    on_device_ns: *mut u64,
    total_ns: *mut u64,
) -> NncResult {
    guard(|| {
        let execution = handles::get(execution, "execution")?;
        non_null(on_device_ns, "on_device_ns")?;
        non_null(total_ns, "total_ns")?;
        let (device, total) = lock(&execution)?.timing()?;
        // SAFETY: both non-null and, by the contract, writable.
        unsafe {
            on_device_ns.write(device);
            total_ns.write(total);
        }
        Ok(())
    })
}

/// Gives C a new handle to `value` through the out-pointer `out`.
///
/// # Safety
/// `out` must be non-null and writable.
pub(crate) unsafe fn hand_out<T: handles::Object>(out: *mut *mut T, value: T) {
    let handle = handles::register(value);
    // SAFETY: by this function's contract.
    unsafe { out.write(handle) };
}

/// Takes back and drops what [`hand_out`] gave; null, and handles already freed or
/// never given, are ignored.
pub(crate) fn free_handed_out<T: handles::Object>(handle: *mut T) {
    drop(handles::take(handle));
}
