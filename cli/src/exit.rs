//! Exit codes and error reporting: one table, used the same way by every subcommand
//! (documented in docs/CLI.md, one test per row in cli/tests/exit_codes.rs).
//!
//! | code | kind | meaning |
//! |---|---|---|
//! | 0 | | success |
//! | 1 | `failure` | the operation ran and failed: an execution error, `compare` found differences, `cache verify` found damage, an I/O error while working |
//! | 2 | `usage` | bad command line: unknown or conflicting options, a missing key, a bad `--limit` |
//! | 3 | `integrity` | verification failed: wrong key, tampered file, or a file not authenticated with the key given; a `.nnc` altered or truncated while it is read (a weight field read again during `run`) |
//! | 4 | `limit` | the input needs more memory than a resource limit allows (`--limit NAME=SIZE`) |
//! | 65 | `malformed-input` | a model, `.nnc`, tensor file or device profile is malformed, or of an unknown type |
//! | 66 | `missing-input` | an input file (model, key, tensor, profile) does not exist or cannot be read |
//! | 69 | `unsupported` | the model uses something nnc cannot compile or run (all of it is listed) |
//! | 70 | `internal` | a bug in nnc; the message says where |
//! | 73 | `cannot-write` | an output cannot be written: `-o` names a device, directory or an input, or the write failed |
//! | 130 | | interrupted by SIGINT (143: SIGTERM), as the shell reports it; no partial output is left |

use std::io::ErrorKind;

use nnc_compiler::CompileError;
use nnc_formats::container::ContainerError;
use serde_json::json;

/// The kinds of failure, each with its exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Failure = 1,
    Usage = 2,
    Integrity = 3,
    Limit = 4,
    Malformed = 65,
    MissingInput = 66,
    Unsupported = 69,
    Internal = 70,
    CannotWrite = 73,
}

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The name `--json` error objects carry.
    pub fn name(self) -> &'static str {
        match self {
            Exit::Failure => "failure",
            Exit::Usage => "usage",
            Exit::Integrity => "integrity",
            Exit::Limit => "limit",
            Exit::Malformed => "malformed-input",
            Exit::MissingInput => "missing-input",
            Exit::Unsupported => "unsupported",
            Exit::Internal => "internal",
            Exit::CannotWrite => "cannot-write",
        }
    }
}

/// An error the CLI itself raises, with its kind.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    pub kind: Exit,
    pub message: String,
}

/// An error of kind `kind`.
pub fn err(kind: Exit, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(CliError {
        kind,
        message: message.into(),
    })
}

fn container_kind(e: &ContainerError) -> Exit {
    match e {
        _ if e.is_integrity() => Exit::Integrity,
        ContainerError::KeyRequired { .. } => Exit::Usage,
        // A key of another length can only be the wrong key.
        ContainerError::KeyAlgorithm { .. } | ContainerError::Crypto(_) => Exit::Integrity,
        ContainerError::Unwritable(_) => Exit::Unsupported,
        // An I/O error reading a `.nnc` (its truncation while it is read is an integrity
        // failure above).
        ContainerError::Read { .. } => Exit::MissingInput,
        _ => Exit::Malformed,
    }
}

pub fn runtime_kind(e: &nnc_runtime::RuntimeError) -> Exit {
    use nnc_runtime::RuntimeError as R;
    match e {
        R::UnsupportedOperations(_) | R::Unsupported { .. } => Exit::Unsupported,
        R::Load(c) => container_kind(c),
        R::InvalidModel(_) | R::Input { .. } | R::InvalidPlan(_) | R::Count { .. } => {
            Exit::Malformed
        }
        R::Limit(_) => Exit::Limit,
        R::Io { .. } => Exit::MissingInput,
        R::Internal(_) => Exit::Internal,
        // An error inside an IF/WHILE subgraph is classified by what went wrong there.
        R::InSubgraph { source, .. } => runtime_kind(source),
        R::LoopTimeoutTooLong { .. } => Exit::Usage,
        // MissedDeadline (a loop ran past the loop timeout) and the rest: the execution
        // failed.
        _ => Exit::Failure,
    }
}

fn io_kind(e: &std::io::Error) -> Exit {
    match e.kind() {
        ErrorKind::NotFound | ErrorKind::PermissionDenied | ErrorKind::IsADirectory => {
            Exit::MissingInput
        }
        _ => Exit::Failure,
    }
}

/// The kind an error maps to: the first cause in its chain that says.
pub fn kind_of(err: &anyhow::Error) -> Exit {
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<CliError>() {
            return e.kind;
        }
        if cause
            .downcast_ref::<nnc_formats::limits::LimitError>()
            .is_some()
        {
            return Exit::Limit;
        }
        if let Some(e) = cause.downcast_ref::<CompileError>() {
            return match e {
                CompileError::Unsupported(_) | CompileError::Placement(_) => Exit::Unsupported,
                CompileError::Io { source, .. } => io_kind(source),
                CompileError::Options(_) => Exit::Usage,
                CompileError::Limit { .. } => Exit::Limit,
                CompileError::Pass { .. } => Exit::Internal,
                CompileError::Container(c) => container_kind(c),
                _ => Exit::Malformed,
            };
        }
        if let Some(e) = cause.downcast_ref::<nnc_runtime::RuntimeError>() {
            return runtime_kind(e);
        }
        if let Some(e) = cause.downcast_ref::<ContainerError>() {
            return container_kind(e);
        }
        if let Some(e) = cause.downcast_ref::<nnc_formats::device::DeviceError>() {
            return match e {
                nnc_formats::device::DeviceError::Io { source, .. } => io_kind(source),
                _ => Exit::Malformed,
            };
        }
        if cause
            .downcast_ref::<nnc_formats::plan::PlanError>()
            .is_some()
        {
            return Exit::Malformed;
        }
        if let Some(e) = cause.downcast_ref::<nnc_formats::npy::NpyError>() {
            return match e {
                nnc_formats::npy::NpyError::Io { source, .. } => io_kind(source),
                _ => Exit::Malformed,
            };
        }
        if let Some(e) = cause.downcast_ref::<nnc_formats::cache::CacheError>() {
            return match e {
                nnc_formats::cache::CacheError::Options(_) => Exit::Usage,
                _ => Exit::Failure,
            };
        }
        if cause
            .downcast_ref::<nnc_compiler::onnx::proto::OnnxDecodeError>()
            .is_some()
            || cause
                .downcast_ref::<nnc_compiler::onnx::tensor::OnnxTensorError>()
                .is_some()
        {
            return Exit::Malformed;
        }
        if let Some(e) = cause.downcast_ref::<std::io::Error>() {
            return io_kind(e);
        }
    }
    Exit::Failure
}

/// The error's message and its causes, each said once (library errors often embed their
/// source's text already).
pub fn messages(err: &anyhow::Error) -> (String, Vec<String>) {
    let head = err.to_string();
    let mut seen = head.clone();
    let mut causes = Vec::new();
    for cause in err.chain().skip(1) {
        let text = cause.to_string();
        if !seen.contains(&text) {
            seen.push_str(&text);
            causes.push(text);
        }
    }
    (head, causes)
}

/// Prints an error (on stderr, or as one JSON object on stdout with `--json`) and returns
/// its exit code.
pub fn report(err: &anyhow::Error, json: bool, command: &str) -> u8 {
    let kind = kind_of(err);
    let (message, causes) = messages(err);
    print_error(kind, &message, &causes, json, command);
    kind.code()
}

/// Prints an error of a known kind.
pub fn print_error(kind: Exit, message: &str, causes: &[String], json: bool, command: &str) {
    if json {
        let object = json!({
            "schema": "nnc.error/1",
            "command": command,
            "ok": false,
            "exit_code": kind.code(),
            "kind": kind.name(),
            "message": message,
            "causes": causes,
        });
        let text = serde_json::to_string_pretty(&object).unwrap_or_else(|_| "{}".into());
        let _ = crate::output::stdout(&format!("{text}\n"));
    } else {
        let mut text = match kind {
            Exit::Internal => format!("internal error: {message}"),
            _ => format!("error: {message}"),
        };
        for cause in causes {
            text.push_str(&format!("\n  caused by: {cause}"));
        }
        if kind == Exit::Internal {
            text.push_str(
                "\n  (this is a bug in nnc; please report it with the command that caused it)",
            );
        }
        eprintln!("{text}");
    }
}
