//! `nnc`: the command-line face of the nnc toolchain.

mod commands;
mod exit;
mod input;
mod keys;
mod oms;
mod output;
mod progress;
mod quantize;
mod tensors;
mod trust;

use std::process::ExitCode;
use std::sync::Mutex;

use clap::{Parser, Subcommand};

/// Every freed block is wiped: decrypted weights pass through buffers nnc does not own
/// (the GEMM crate's packing scratch, reallocated vectors). See nnc_runtime::alloc.
#[global_allocator]
static ALLOCATOR: nnc_runtime::alloc::WipingAllocator = nnc_runtime::alloc::WipingAllocator;

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

/// Where a panic happened and what it said, for the error report (the default hook's
/// output, with its backtrace, is not what a user of a command-line tool should read).
static PANIC: Mutex<Option<String>> = Mutex::new(None);

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Known before parsing, so that even a command line clap refuses gets a JSON error.
    let json = argv.iter().any(|a| a == "--json");
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
                || matches!(
                    e.kind(),
                    ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                )
                || !json
            {
                e.exit();
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
            return ExitCode::from(exit::Exit::Usage.code());
        }
    };
    let command = cli.command.name();
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
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // How tests reach the internal-error path (exit 70); no input can.
        if std::env::var_os("NNC_TEST_INTERNAL_PANIC").is_some() {
            panic!("NNC_TEST_INTERNAL_PANIC is set");
        }
        cli.command.run()
    }));
    match result {
        Ok(Ok(code)) => code,
        Ok(Err(err)) => exit::report(&err, json, command),
        Err(_) => {
            let what = PANIC
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .unwrap_or_else(|| "a panic".into());
            exit::print_error(exit::Exit::Internal, &what, &[], json, command);
            ExitCode::from(exit::Exit::Internal.code())
        }
    }
}
