//! `nnc rewrap`: change who can open a compiled model (add or remove device recipients,
//! rotate the symmetric key) without the source model and without touching a byte of the
//! encrypted weights: only the header and the key block at the end of the file change.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use nnc_formats::container::{FileSource, RecipientChanges, copy_metadata_from, rewrap};
use nnc_formats::crypto::Algorithm;
use serde_json::json;

use crate::exit::{Exit, err};
use crate::keys::KeyArgs;
use crate::output;

#[derive(clap::Args)]
pub struct Args {
    /// The compiled model (format 1.3: compiled with a key or recipients by this nnc).
    pub model: PathBuf,
    /// Where to write the rewrapped model (may be the input itself: it is replaced
    /// atomically).
    #[arg(short, long, value_name = "OUT.nnc")]
    pub output: PathBuf,
    /// A key that opens the model now: its symmetric key, or a recipient device's key.
    #[command(flatten)]
    pub key: KeyArgs,
    /// Wrap the data key for another device (x25519 public key; repeatable).
    #[arg(long = "add-recipient", value_name = "DEVICE.pub")]
    pub add: Vec<PathBuf>,
    /// Remove a recipient: its public key file or its key id (32 hex digits, as `nnc
    /// inspect` lists them; repeatable).
    #[arg(long = "remove-recipient", value_name = "DEVICE.pub|KEY_ID")]
    pub remove: Vec<String>,
    /// Replace the symmetric key with this one (hex key file; the old one no longer
    /// opens the output).
    #[arg(long, value_name = "FILE")]
    pub new_key_file: Option<PathBuf>,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    if args.add.is_empty() && args.remove.is_empty() && args.new_key_file.is_none() {
        return Err(err(
            Exit::Usage,
            "nothing to change: give --add-recipient, --remove-recipient or --new-key-file",
        ));
    }
    let key = args.key.require_raw(&args.model.display().to_string())?;
    let add = crate::trust::recipients(&args.add)?;
    let mut remove = Vec::new();
    for r in &args.remove {
        remove.push(recipient_id(r)?);
    }
    let new_master = match &args.new_key_file {
        Some(path) => {
            let new = KeyArgs {
                key_file: Some(path.clone()),
                ..KeyArgs::default()
            };
            let bytes = new.require_raw("--new-key-file")?;
            if !matches!(bytes.len(), 16 | 24 | 32) {
                return Err(err(
                    Exit::Usage,
                    "--new-key-file takes a symmetric key (nnc keygen --algorithm aes128|...)",
                ));
            }
            Some(bytes)
        }
        None => None,
    };
    crate::input::check(&args.model, "model")?;
    let source = FileSource::open(&args.model)
        .with_context(|| format!("cannot read {}", args.model.display()))?;
    let meta = copy_metadata_from(&source)
        .with_context(|| format!("cannot read {}", args.model.display()))?;
    if let Some(new) = &new_master {
        // The new key must suit the file's cipher, as a compile would require.
        let algorithm = Algorithm::from_code(meta[72]);
        if let Some(a) = algorithm.filter(|a| a.key_len() != new.len()) {
            return Err(err(
                Exit::Usage,
                format!(
                    "--new-key-file holds a {}-byte key; the model is encrypted with {} ({}-byte keys)",
                    new.len(),
                    a.name(),
                    a.key_len()
                ),
            ));
        }
    }
    let changes = RecipientChanges {
        add: &add,
        remove: &remove,
        new_master: new_master.as_deref().map(|k| k.as_slice()),
    };
    let plan = rewrap(&meta, &key, &changes)
        .with_context(|| format!("cannot rewrap {}", args.model.display()))?;

    // Copy the file (the kernel's copy: reflinked or in-kernel, never through this
    // process's memory), then patch the header and replace the trailer.
    let inputs: Vec<&std::path::Path> = Vec::new();
    output::write_file_with(&args.output, output::Mode::Public, &inputs, |file| {
        let mut from = std::fs::File::open(&args.model)
            .with_context(|| format!("cannot read {}", args.model.display()))?;
        let mut to: &std::fs::File = file;
        std::io::copy(&mut (&mut from).take(plan.trailer_offset), &mut to)
            .context("cannot copy the weights")?;
        use nnc_formats::container::Sink as _;
        file.write_all_at(&plan.header, 0)
            .context("cannot write the header")?;
        file.write_all_at(&plan.trailer, plan.trailer_offset)
            .context("cannot write the key block")?;
        file.set_len(plan.file_len())
            .context("cannot size the output")?;
        to.flush().context("cannot write the output")?;
        Ok(())
    })?;
    let recipients: Vec<_> = plan
        .key_block
        .recipients
        .iter()
        .map(|r| json!({"kind": r.kind, "key_id": hex::encode(r.key_id)}))
        .collect();
    let ms = started.elapsed().as_secs_f64() * 1e3;
    if args.json {
        output::stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({
                "schema": "nnc.rewrap/1",
                "model": args.model.display().to_string(),
                "output": args.output.display().to_string(),
                "recipients": recipients,
                "weights_unchanged": true,
                "ms": ms,
            }))?
        ))?;
    } else {
        eprintln!(
            "wrote {}: {} recipient(s) ({}); weights unchanged ({ms:.1} ms)",
            args.output.display(),
            plan.key_block.recipients.len(),
            plan.key_block
                .recipients
                .iter()
                .map(|r| format!("{} {}", r.kind.name(), hex::encode(r.key_id)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A recipient named by its public key file or its key id.
fn recipient_id(text: &str) -> anyhow::Result<[u8; 16]> {
    if text.len() == 32
        && text.bytes().all(|b| b.is_ascii_hexdigit())
        && !std::path::Path::new(text).exists()
    {
        let mut id = [0u8; 16];
        hex::decode_to_slice(text, &mut id).map_err(|_| err(Exit::Usage, "bad key id"))?;
        return Ok(id);
    }
    let key = crate::trust::read_public_key(std::path::Path::new(text), "--remove-recipient")?;
    Ok(key.key_id())
}
