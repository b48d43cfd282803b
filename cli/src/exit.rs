//! Exit codes and error reporting.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | failure (I/O, verification, execution) |
//! | 2 | bad command line (clap) |
//! | 65 | the input is malformed (model, tensor file, device profile, `.nnc`) |
//! | 69 | the model uses something nnc does not support (as `sysexits.h` EX_UNAVAILABLE) |

use std::process::ExitCode;

use nnc_compiler::CompileError;

pub const FAILURE: u8 = 1;
pub const DATA_ERROR: u8 = 65;
pub const UNSUPPORTED: u8 = 69;

/// The exit code an error maps to.
pub fn code_for(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<CompileError>() {
            return match e {
                CompileError::Unsupported(_) | CompileError::Placement(_) => UNSUPPORTED,
                CompileError::Io { .. } | CompileError::Options(_) => FAILURE,
                _ => DATA_ERROR,
            };
        }
        if cause
            .downcast_ref::<nnc_formats::device::DeviceError>()
            .is_some()
            || cause
                .downcast_ref::<nnc_formats::plan::PlanError>()
                .is_some()
        {
            return DATA_ERROR;
        }
        if let Some(e) = cause.downcast_ref::<nnc_runtime::RuntimeError>() {
            use nnc_runtime::RuntimeError as R;
            return match e {
                R::UnsupportedOperations(_) | R::Unsupported { .. } => UNSUPPORTED,
                R::Load(c) if !c.is_integrity() => DATA_ERROR,
                R::InvalidModel(_) | R::Input { .. } => DATA_ERROR,
                _ => FAILURE,
            };
        }
        if let Some(e) = cause.downcast_ref::<nnc_formats::container::ContainerError>() {
            return if e.is_integrity() {
                FAILURE
            } else {
                DATA_ERROR
            };
        }
    }
    FAILURE
}

/// Prints the error chain on stderr and returns the matching exit code.
pub fn report(err: &anyhow::Error) -> ExitCode {
    let mut message = format!("error: {err}");
    for cause in err.chain().skip(1) {
        // Library errors often embed their source's text already; print it once.
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(&format!("\n  caused by: {text}"));
        }
    }
    eprintln!("{message}");
    ExitCode::from(code_for(err))
}
