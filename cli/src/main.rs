//! `nnc`: the command-line face of the nnc toolchain.

mod commands;
mod exit;
mod keys;
mod output;
mod tensors;

use std::process::ExitCode;

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
    /// Generate a random weight-encryption key.
    Keygen(commands::keygen::Args),
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => commands::inspect::run(args),
        Command::Dump(args) => commands::dump::run(args),
        Command::Compile(args) => commands::compile::run(args),
        Command::Verify(args) => commands::verify::run(args),
        Command::Keygen(args) => commands::keygen::run(args),
        Command::Run(args) => commands::run::run(args),
        Command::Compare(args) => commands::compare::run(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Cache(action) => commands::cache::run(action),
        Command::Devices(args) => commands::devices::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => exit::report(&err),
    }
}
