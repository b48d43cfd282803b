//! The `nnc` command-line tool as a library: the `nnc` binary, and the Python package's
//! `nnc` console script and functions, run the same commands with the same messages and
//! exit codes (one parser, one set of options).
//!
//! [`main`] is the whole tool (parse, run, report). [`run_in_process`] runs one command
//! for a program embedding nnc: nothing exits the process, standard output is captured
//! and returned, and a key can be handed over in memory instead of through a file.

pub mod commands;
pub mod exit;
mod input;
pub mod keys;
mod oms;
pub mod output;
mod progress;
mod quantize;
mod tensors;
mod trust;

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Mutex;

use clap::{Parser, Subcommand};

/// nnc: an ahead-of-time compiler for neural-network models into the NN operation set,
/// with encrypted weights.
#[derive(Parser)]
#[command(name = "nnc", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Summarize a model (source or compiled): inputs, outputs, operations, passes.
    Inspect(commands::inspect::Args),
    /// Print a model's graph as Graphviz, JSON or text.
    Dump(commands::dump::Args),
    /// Compile a model into an encrypted .nnc file.
    Compile(commands::compile::Args),
    /// Check a .nnc file's structure and authenticity.
    Verify(commands::verify::Args),
    /// Generate a random weight-encryption key, or a device or signing key pair.
    Keygen(commands::keygen::Args),
    /// Change who can open a compiled model (recipients, key rotation) without
    /// recompiling or touching its encrypted weights.
    Rewrap(commands::rewrap::Args),
    /// Write a detached OpenSSF Model Signing signature of a file.
    Sign(commands::sign::Args),
    /// Show what differs between two models (operations, shapes, quantization,
    /// placement, weights).
    Diff(commands::diff::Args),
    /// Write a CycloneDX 1.6 bill of materials (ML-BOM) for a compiled model.
    Sbom(commands::sbom::Args),
    /// Run a model on tensor files.
    Run(commands::run::Args),
    /// Compare two tensor files within a tolerance.
    Compare(commands::compare::Args),
    /// Measure a model's execution latency on this machine.
    Bench(commands::bench::Args),
    /// List device profiles and their capabilities.
    Devices(commands::devices::Args),
    /// List, verify or clean a compilation-cache directory.
    #[command(subcommand)]
    Cache(commands::cache::Action),
}

impl Command {
    fn name(&self) -> &'static str {
        match self {
            Command::Inspect(_) => "inspect",
            Command::Dump(_) => "dump",
            Command::Compile(_) => "compile",
            Command::Verify(_) => "verify",
            Command::Keygen(_) => "keygen",
            Command::Rewrap(_) => "rewrap",
            Command::Sign(_) => "sign",
            Command::Diff(_) => "diff",
            Command::Sbom(_) => "sbom",
            Command::Run(_) => "run",
            Command::Compare(_) => "compare",
            Command::Bench(_) => "bench",
            Command::Devices(_) => "devices",
            Command::Cache(_) => "cache",
        }
    }

    fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Inspect(args) => commands::inspect::run(args),
            Command::Dump(args) => commands::dump::run(args),
            Command::Compile(args) => commands::compile::run(args),
            Command::Verify(args) => commands::verify::run(args),
            Command::Keygen(args) => commands::keygen::run(args),
            Command::Rewrap(args) => commands::rewrap::run(args),
            Command::Sign(args) => commands::sign::run(args),
            Command::Diff(args) => commands::diff::run(args),
            Command::Sbom(args) => commands::sbom::run(args),
            Command::Run(args) => commands::run::run(args),
            Command::Compare(args) => commands::compare::run(args),
            Command::Bench(args) => commands::bench::run(args),
            Command::Cache(action) => commands::cache::run(action),
            Command::Devices(args) => commands::devices::run(args),
        }
    }
}

impl Command {
    /// Where the command takes its key from, for a key handed over in memory.
    fn key_args_mut(&mut self) -> Option<&mut keys::KeyArgs> {
        match self {
            Command::Inspect(a) => Some(&mut a.key),
            Command::Compile(a) => Some(&mut a.key),
            Command::Verify(a) => Some(&mut a.key),
            Command::Run(a) => Some(&mut a.key),
            Command::Bench(a) => Some(&mut a.key),
            Command::Diff(a) => Some(&mut a.key),
            Command::Rewrap(a) => Some(&mut a.key),
            Command::Dump(_)
            | Command::Keygen(_)
            | Command::Sign(_)
            | Command::Sbom(_)
            | Command::Compare(_)
            | Command::Devices(_)
            | Command::Cache(_) => None,
        }
    }
}

/// The exit status of a command's own result: commands return success or `failure`
/// (`compare` found differences, `cache verify` found damage); every other kind travels
/// as an error and is classified by [`exit::kind_of`].
fn status(code: ExitCode) -> u8 {
    if code == ExitCode::SUCCESS {
        0
    } else {
        exit::Exit::Failure.code()
    }
}

/// Where a panic happened and what it said, for the error report (the default hook's
/// output, with its backtrace, is not what a user of a command-line tool should read).
static PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Records panics in [`PANIC`] instead of printing them (installed once per process).
pub fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let location = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            let mut slot = PANIC.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert(format!("{message}{location}"));
        }));
    });
}

/// A command line clap refused: its exit status, after printing what clap says (help
/// and version requests are not errors). With `--json` the error is one JSON object.
fn refused(e: clap::Error, argv: &[OsString], json: bool, in_process: bool) -> u8 {
    use clap::error::ErrorKind;
    let informational = matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if informational || !json {
        if !in_process {
            e.exit();
        }
        // A program embedding nnc gets the text, and keeps running.
        let text = e.render().to_string();
        if e.use_stderr() {
            eprint!("{text}");
        } else {
            let _ = output::stdout(&text);
        }
        return if informational {
            0
        } else {
            exit::Exit::Usage.code()
        };
    }
    let command = argv
        .get(1)
        .and_then(|a| a.to_str())
        .unwrap_or("")
        .to_string();
    let message = e
        .kind()
        .as_str()
        .unwrap_or("invalid command line")
        .to_string();
    let detail = e.to_string();
    let first_line = detail
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches("error: ")
        .to_string();
    exit::print_error(
        exit::Exit::Usage,
        if first_line.is_empty() {
            &message
        } else {
            &first_line
        },
        &[],
        true,
        &command,
    );
    exit::Exit::Usage.code()
}

/// Parses and runs one command line (`argv[0]` is the program name); returns its exit
/// status after reporting any error.
fn execute(
    argv: Vec<OsString>,
    key_text: Option<zeroize::Zeroizing<String>>,
    in_process: bool,
) -> u8 {
    // Known before parsing, so that even a command line clap refuses gets a JSON error.
    let json = argv.iter().any(|a| a == "--json");
    let mut cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => return refused(e, &argv, json, in_process),
    };
    let command = cli.command.name();
    if let Some(text) = key_text {
        match cli.command.key_args_mut() {
            Some(key) => key.text = Some(text),
            None => {
                exit::print_error(
                    exit::Exit::Usage,
                    &format!("nnc {command} takes no key"),
                    &[],
                    json,
                    command,
                );
                return exit::Exit::Usage.code();
            }
        }
    }
    install_panic_hook();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // How tests reach the internal-error path (exit 70); no input can.
        if std::env::var_os("NNC_TEST_INTERNAL_PANIC").is_some() {
            panic!("NNC_TEST_INTERNAL_PANIC is set");
        }
        cli.command.run()
    }));
    match result {
        Ok(Ok(code)) => status(code),
        Ok(Err(err)) => exit::report(&err, json, command),
        Err(_) => {
            let what = take_panic();
            exit::print_error(exit::Exit::Internal, &what, &[], json, command);
            exit::Exit::Internal.code()
        }
    }
}

/// The whole `nnc` tool on a command line (`argv[0]` is the program name): returns the
/// exit status. Help and version requests, and refused command lines without `--json`,
/// exit the process as clap does.
pub fn main(argv: Vec<OsString>) -> u8 {
    execute(argv, None, false)
}

/// What a command run in process printed and how it ended.
#[derive(Debug)]
pub struct Outcome {
    /// The exit status `nnc` would have exited with.
    pub status: u8,
    /// Everything the command wrote to standard output (with `--json`: its JSON object,
    /// or on failure the `nnc.error/1` object).
    pub stdout: String,
}

/// Runs one command line in this process for a program embedding nnc (the Python
/// package): nothing exits the process, standard output is captured (standard error,
/// with warnings and progress, is the process's), and `key_text` (hex or PEM) is the key
/// of a command that takes one, as `--key-file` would give it.
pub fn run_in_process(
    argv: Vec<OsString>,
    key_text: Option<zeroize::Zeroizing<String>>,
) -> Outcome {
    let (status, stdout) = output::capture(|| execute(argv, key_text, true));
    Outcome { status, stdout }
}

/// An error as `nnc` reports it: exit status, kind (`--json`'s `kind`), message, causes.
#[derive(Debug, Clone)]
pub struct Failure {
    pub status: u8,
    pub kind: &'static str,
    pub message: String,
    pub causes: Vec<String>,
}

impl Failure {
    fn from_error(err: &anyhow::Error) -> Failure {
        let kind = exit::kind_of(err);
        let (message, causes) = exit::messages(err);
        Failure {
            status: kind.code(),
            kind: kind.name(),
            message,
            causes,
        }
    }

    fn of(kind: exit::Exit, message: String) -> Failure {
        Failure {
            status: kind.code(),
            kind: kind.name(),
            message,
            causes: Vec::new(),
        }
    }
}

/// A model opened as `nnc run` opens it, for a program embedding nnc: `argv` is an `nnc
/// run` command line without input files (`["nnc", "run", "MODEL.nnc", "--threads",
/// "2", ...]`), `key_text` the key as [`run_in_process`] takes it. Returns the prepared
/// model and the simulated devices holding its key (keep both alive together).
pub fn open_model(
    argv: Vec<OsString>,
    key_text: Option<zeroize::Zeroizing<String>>,
) -> Result<(nnc_runtime::PreparedModel, nnc_runtime::Devices), Failure> {
    let cli = Cli::try_parse_from(&argv).map_err(|e| {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or("invalid options");
        Failure::of(
            exit::Exit::Usage,
            first.trim_start_matches("error: ").into(),
        )
    })?;
    let Command::Run(mut args) = cli.command else {
        return Err(Failure::of(
            exit::Exit::Internal,
            "open_model takes an `nnc run` command line".into(),
        ));
    };
    if let Some(text) = key_text {
        args.key.text = Some(text);
    }
    install_panic_hook();
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commands::run::load(&args))) {
        Ok(Ok(opened)) => Ok(opened),
        Ok(Err(err)) => Err(Failure::from_error(&err)),
        Err(_) => Err(Failure::of(exit::Exit::Internal, take_panic())),
    }
}

/// The message of the panic caught last on any thread (see [`install_panic_hook`]).
fn take_panic() -> String {
    PANIC
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_else(|| "a panic".into())
}

/// Classifies a runtime error as `nnc run` does (for executions a program runs itself).
pub fn runtime_failure(err: nnc_runtime::RuntimeError) -> Failure {
    Failure::from_error(&anyhow::Error::new(err))
}

/// The message of the last panic caught (with [`install_panic_hook`] installed), for
/// embedders that catch panics themselves.
pub fn panic_message() -> String {
    take_panic()
}
