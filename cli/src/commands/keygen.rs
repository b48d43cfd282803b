//! `nnc keygen`: a new random key, written to a file only its owner can read.

use std::path::PathBuf;
use std::process::ExitCode;

use nnc_formats::crypto::{Algorithm, Key};
use serde_json::json;
use zeroize::Zeroizing;

use super::AlgorithmArg;
use crate::exit::{Exit, err};
use crate::output;

#[derive(clap::Args)]
pub struct Args {
    /// The cipher the key is for (sets its length).
    #[arg(long, value_enum)]
    pub algorithm: AlgorithmArg,
    /// Where to write the key (hex, mode 0600).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Replace an existing file.
    #[arg(long)]
    pub force: bool,
    /// Print a JSON summary on stdout (never the key).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let algorithm: Algorithm = args.algorithm.into();
    if std::fs::symlink_metadata(&args.output).is_ok() && !args.force {
        return Err(err(
            Exit::CannotWrite,
            format!(
                "{} exists; pass --force to replace it",
                args.output.display()
            ),
        ));
    }
    let key = Key::generate(algorithm)?;
    let mut text: Zeroizing<String> = key.to_hex();
    text.push('\n');
    // Owner-only from the first byte: the temporary file is created 0600.
    output::write_file(&args.output, text.as_bytes(), output::Mode::Private, &[])?;
    let key_id = hex::encode(nnc_formats::container::key_id(key.as_bytes())?);
    if args.json {
        output::stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({
                "schema": "nnc.keygen/1",
                "output": args.output.display().to_string(),
                "algorithm": algorithm.name(),
                "key_id": key_id,
            }))?
        ))?;
    } else {
        eprintln!(
            "wrote a new {} key to {} (mode 600; key id {key_id})",
            algorithm.name(),
            args.output.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
