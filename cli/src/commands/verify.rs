//! `nnc verify`: checks a `.nnc` file completely: structure, key, every tag, and says
//! what protects it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use nnc_formats::container::{Container, CryptoConfig};
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

/// What protects a file, in one word (`--json`) and in a sentence.
pub fn protection(crypto: &CryptoConfig) -> (&'static str, &'static str) {
    match (crypto.is_encrypted(), crypto.is_keyed()) {
        (true, _) => (
            "encrypted",
            "weights encrypted; every byte authenticated with the key (HMAC-SHA-256)",
        ),
        (false, true) => (
            "authenticated",
            "weights NOT encrypted; every byte authenticated with the key (HMAC-SHA-256)",
        ),
        (false, false) => (
            "digests",
            "NOT encrypted and NOT authenticated: SHA-256 digests detect corruption only; \
             anyone can write a file that passes (compile with a key for authenticity)",
        ),
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let bytes = crate::input::read_model(&args.model, "model")?;
    // A key only when one is given: a file that needs one fails with a message that says
    // so, and a key given for a file that is not authenticated with one is refused.
    let key = if args.key.given() {
        Some(args.key.require_raw(&args.model.display().to_string())?)
    } else {
        None
    };
    let (container, _) = Container::open(&bytes, key.as_deref().map(|k| k.as_slice()))
        .with_context(|| format!("{} failed verification", args.model.display()))?;
    let fields = container.fields.iter().flatten().count();
    let (kind, sentence) = protection(&container.header.crypto);
    if args.json {
        output::stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({
                "schema": "nnc.verify/1",
                "model": args.model.display().to_string(),
                "ok": true,
                "encrypted": container.is_encrypted(),
                "authenticated": container.header.crypto.is_keyed(),
                "protection": kind,
                "weight_fields": fields,
            }))?
        ))?;
    } else {
        output::stdout(&format!(
            "{}: OK ({} weight fields and the metadata check out): {sentence}\n",
            args.model.display(),
            fields,
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
