//! Errors inside the C API, their result codes, the thread-local last error message, and
//! the guard every exported function runs its body in (no panic crosses the boundary).

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use nnc_formats::container::ContainerError;
use nnc_runtime::RuntimeError;

use crate::NncResult;

/// Why a call failed (Rust side); [`CapiError::code`] is what C sees.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CapiError {
    /// A pointer argument that must not be null was null.
    #[error("argument '{0}' is null")]
    Null(&'static str),
    /// An argument is invalid (index out of range, length that does not match, ...).
    #[error("{0}")]
    BadData(String),
    /// The call is not valid in the object's current state.
    #[error("{0}")]
    BadState(String),
    /// A buffer bound for an output is too small.
    #[error("output {output}: buffer of {provided} bytes is too small, {needed} bytes are needed")]
    OutputTooSmall {
        output: usize,
        needed: usize,
        provided: usize,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {message}")]
    Io { path: String, message: String },
    /// The runtime refused or failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A failure reported earlier, on another thread (an asynchronous compute's), passed
    /// on with its code and message to the thread that waits for it.
    #[error("{message}")]
    Reported { code: NncResult, message: String },
}

impl CapiError {
    pub(crate) fn code(&self) -> NncResult {
        match self {
            CapiError::Null(_) => NncResult::UnexpectedNull,
            CapiError::BadData(_) => NncResult::BadData,
            CapiError::BadState(_) => NncResult::BadState,
            CapiError::OutputTooSmall { .. } => NncResult::OutputInsufficientSize,
            CapiError::Io { .. } => NncResult::Unmappable,
            CapiError::Runtime(e) => runtime_code(e),
            CapiError::Reported { code, .. } => *code,
        }
    }
}

/// The result code of a runtime error.
fn runtime_code(e: &RuntimeError) -> NncResult {
    match e {
        RuntimeError::Load(c) => match c {
            c if c.is_integrity() => NncResult::IntegrityFailure,
            // A key of another algorithm than the file's is a wrong key.
            ContainerError::KeyAlgorithm { .. } => NncResult::IntegrityFailure,
            ContainerError::KeyRequired { .. } => NncResult::KeyRequired,
            ContainerError::UnsupportedVersion { .. } => NncResult::Unsupported,
            _ => NncResult::BadData,
        },
        RuntimeError::Io { .. } => NncResult::Unmappable,
        RuntimeError::Unsupported { .. } | RuntimeError::UnsupportedOperations(_) => {
            NncResult::Unsupported
        }
        RuntimeError::InvalidModel(_)
        | RuntimeError::InvalidPlan(_)
        | RuntimeError::Input { .. }
        | RuntimeError::Count { .. }
        | RuntimeError::LoopTimeoutTooLong { .. } => NncResult::BadData,
        RuntimeError::OutputTooSmall { .. } => NncResult::OutputInsufficientSize,
        RuntimeError::Limit(_) | RuntimeError::OutOfMemory { .. } => NncResult::OutOfMemory,
        RuntimeError::LoopTimeout { .. } => NncResult::MissedDeadlinePersistent,
        RuntimeError::MissedDeadline { kind, .. } => match kind {
            nnc_runtime::error::DeadlineKind::Transient => NncResult::MissedDeadlineTransient,
            nnc_runtime::error::DeadlineKind::Persistent => NncResult::MissedDeadlinePersistent,
        },
        RuntimeError::Memory { .. }
        | RuntimeError::MemoryDesc(_)
        | RuntimeError::Binding { .. } => NncResult::BadData,
        RuntimeError::ExecutionState(_) => NncResult::BadState,
        RuntimeError::QueueFull { .. } => NncResult::ResourceExhaustedTransient,
        RuntimeError::InSubgraph { source, .. } => runtime_code(source),
        RuntimeError::Cache(_)
        | RuntimeError::Operation { .. }
        | RuntimeError::Kernel(_)
        | RuntimeError::Output { .. }
        | RuntimeError::Weights { .. }
        | RuntimeError::ThreadPool(_)
        | RuntimeError::Internal(_) => NncResult::OpFailed,
    }
}

thread_local! {
    /// The message of the last failed call on this thread ("" after a successful one).
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // A message never holds NUL in practice; if one does, it is cut there rather than lost.
    let text = message.split('\0').next().unwrap_or_default();
    let c = CString::new(text).unwrap_or_default();
    LAST_ERROR.with(|slot| *slot.borrow_mut() = c);
}

/// The current thread's last error message; valid until the next nnc call on this thread.
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR.with(|slot| slot.borrow().as_ptr())
}

/// Runs `body`, catching panics: success clears the last error message, a failure sets
/// it and returns the failure's code; a panic is reported as [`NncResult::OpFailed`].
pub(crate) fn guard(body: impl FnOnce() -> Result<(), CapiError>) -> NncResult {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            set_last_error("");
            NncResult::NoError
        }
        Ok(Err(e)) => {
            set_last_error(&e.to_string());
            e.code()
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown cause".into());
            set_last_error(&format!("internal error in nnc (a bug): panic: {what}"));
            NncResult::OpFailed
        }
    }
}

/// Runs a function that returns no code (the `*_free` functions), swallowing any panic.
pub(crate) fn guard_void(body: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(body));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> String {
        // SAFETY: the pointer is the thread-local CString's, alive until the next set.
        unsafe { std::ffi::CStr::from_ptr(last_error_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_op_failed_with_a_message() {
        let code = guard(|| panic!("boom {}", 7));
        assert_eq!(code, NncResult::OpFailed);
        assert!(last().contains("panic: boom 7"), "{}", last());
        assert_eq!(guard(|| Ok(())), NncResult::NoError);
        assert_eq!(last(), "");
    }

    #[test]
    fn errors_map_to_codes_and_messages() {
        assert_eq!(
            guard(|| Err(CapiError::Null("model"))),
            NncResult::UnexpectedNull
        );
        assert_eq!(last(), "argument 'model' is null");
        let integrity = RuntimeError::Load(ContainerError::Integrity {
            what: "the header".into(),
        });
        assert_eq!(guard(|| Err(integrity.into())), NncResult::IntegrityFailure);
        assert!(last().starts_with("cannot load the model: wrong key"));
        let nested = RuntimeError::InSubgraph {
            operation: nnc_runtime::OpRef {
                index: Some(0),
                op_type: nnc_formats::nn::OperationType::If,
                node: String::new(),
            },
            subgraph: 1,
            source: Box::new(RuntimeError::OutOfMemory { bytes: 10 }),
        };
        assert_eq!(guard(|| Err(nested.into())), NncResult::OutOfMemory);
        set_last_error("a\0b");
        assert_eq!(last(), "a");
    }
}
