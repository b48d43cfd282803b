//! `nnc verify`: checks a `.nnc` file completely: structure, key, every tag.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use nnc_formats::container::Container;
use serde_json::json;

use crate::keys::KeyArgs;
use crate::output;

#[derive(clap::Args)]
pub struct Args {
    /// The compiled model.
    pub model: PathBuf,
    #[command(flatten)]
    pub key: KeyArgs,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(&args.model)
        .with_context(|| format!("cannot read {}", args.model.display()))?;
    // A key only when one is given: an encrypted file without one fails with a message
    // that says so.
    let key = if args.key.given() {
        Some(args.key.require_raw(&args.model.display().to_string())?)
    } else {
        None
    };
    let (container, _) = Container::open(&bytes, key.as_deref().map(|k| k.as_slice()))
        .with_context(|| format!("{} failed verification", args.model.display()))?;
    let fields = container.fields.iter().flatten().count();
    if args.json {
        output::stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({
                "schema": "nnc.verify/1",
                "model": args.model.display().to_string(),
                "ok": true,
                "encrypted": container.is_encrypted(),
                "weight_fields": fields,
            }))?
        ))?;
    } else {
        output::stdout(&format!(
            "{}: OK ({} weight fields and the metadata authenticate{})\n",
            args.model.display(),
            fields,
            if container.is_encrypted() {
                " under the given key"
            } else {
                "; unencrypted, SHA-256 digests"
            }
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
