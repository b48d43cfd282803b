//! `nnc verify`: checks a `.nnc` file completely: structure, key, every tag, its
//! signature when asked to trust only some signers, and says what protects it. With
//! `--signature`, checks a detached OpenSSF Model Signing signature of any file instead.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use nnc_formats::container::{Container, CryptoConfig};
use serde_json::json;

use crate::exit::{Exit, err};
use crate::keys::KeyArgs;
use crate::output;
use crate::trust::TrustArgs;

#[derive(clap::Args)]
pub struct Args {
    /// The compiled model (or, with --signature, any signed file).
    pub model: PathBuf,
    #[command(flatten)]
    pub key: KeyArgs,
    #[command(flatten)]
    pub trust: TrustArgs,
    /// Check this detached signature bundle (`nnc sign`, `model_signing sign key`) over
    /// the file's bytes against the --trust keys, instead of opening the model.
    #[arg(long, value_name = "FILE.sig", requires = "trust")]
    pub signature: Option<PathBuf>,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The cipher as its standard names it: `AES-128-GCM`, `SM4-CTR`.
fn cipher_name(crypto: &CryptoConfig) -> Option<String> {
    use nnc_formats::crypto::Algorithm;
    let algorithm = match crypto.algorithm? {
        Algorithm::Sm4 => "SM4",
        Algorithm::Aes128 => "AES-128",
        Algorithm::Aes192 => "AES-192",
        Algorithm::Aes256 => "AES-256",
    };
    let mode = crypto.mode.map_or("?", |m| m.name()).to_ascii_uppercase();
    Some(format!("{algorithm}-{mode}"))
}

/// What authenticates the weight fields and what the metadata, as read from the
/// header's crypto configuration: in GCM each field carries its own GCM tag (no HMAC
/// over it) and the metadata its HMAC-SHA-256; in the other keyed modes HMAC-SHA-256
/// covers both; without a key, SHA-256 digests.
pub fn integrity(crypto: &CryptoConfig) -> (String, &'static str) {
    let metadata = crypto.integrity.name();
    if crypto.mode == Some(nnc_formats::crypto::Mode::Gcm)
        && let Some(cipher) = cipher_name(crypto)
    {
        return (cipher, metadata);
    }
    (metadata.to_string(), metadata)
}

/// What protects a file, in one word (`--json`) and in a sentence.
pub fn protection(crypto: &CryptoConfig) -> (&'static str, String) {
    let (weights, metadata) = integrity(crypto);
    let how = if weights == metadata {
        metadata.to_string()
    } else {
        format!("{weights} tags for the weight fields, {metadata} for the metadata")
    };
    match (crypto.is_encrypted(), crypto.is_keyed()) {
        (true, _) => (
            "encrypted",
            format!(
                "weights encrypted with {}; every byte authenticated with the key ({how})",
                cipher_name(crypto).unwrap_or_else(|| "?".into())
            ),
        ),
        (false, true) => (
            "authenticated",
            format!("weights NOT encrypted; every byte authenticated with the key ({how})"),
        ),
        (false, false) => (
            "digests",
            "NOT encrypted and NOT authenticated: SHA-256 digests detect corruption only; \
             anyone can write a file that passes (compile with a key for authenticity)"
                .into(),
        ),
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(bundle) = &args.signature {
        return detached(&args, bundle);
    }
    let bytes = crate::input::read_model(&args.model, "model")?;
    // The signature first: it needs no secret, and a file no trusted key signed is
    // refused before anything in it is interpreted.
    let signature = crate::trust::check(&bytes, &args.trust, &args.model)?;
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
    let recipients: Vec<_> = container
        .key_block()
        .ok()
        .flatten()
        .map(|b| b.recipients)
        .unwrap_or_default();
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
                "cipher": cipher_name(&container.header.crypto),
                "integrity": {
                    "weights": integrity(&container.header.crypto).0,
                    "metadata": integrity(&container.header.crypto).1,
                },
                "weight_fields": fields,
                "recipients": recipients,
                "signature": signature.as_ref().map(|s| crate::trust::signature_json(s, Some(true))),
            }))?
        ))?;
    } else {
        let signed = match &signature {
            Some(s) => format!(
                "; signed by trusted {} key {}",
                s.signer.algorithm(),
                hex::encode(s.signer.key_id())
            ),
            None => String::new(),
        };
        output::stdout(&format!(
            "{}: OK ({} weight fields and the metadata check out): {sentence}{signed}\n",
            args.model.display(),
            fields,
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--signature`: a detached OpenSSF model signature over the file's bytes.
fn detached(args: &Args, bundle_path: &std::path::Path) -> anyhow::Result<ExitCode> {
    if args.key.given() {
        return Err(err(
            Exit::Usage,
            "--signature checks a detached signature over the file's bytes; it takes no key",
        ));
    }
    let trusted = args.trust.keys()?;
    crate::input::check(&args.model, "model")?;
    let bundle =
        crate::input::read_small(bundle_path, "--signature", crate::oms::MAX_BUNDLE_BYTES)?;
    let digest = crate::trust::file_digest(&args.model)?;
    let signer = crate::oms::verify(&bundle, &digest, &trusted)
        .with_context(|| format!("{} failed verification", args.model.display()))?;
    let key_id = hex::encode(signer.key_id());
    if args.json {
        output::stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({
                "schema": "nnc.verify/1",
                "model": args.model.display().to_string(),
                "ok": true,
                "detached_signature": bundle_path.display().to_string(),
                "sha256": hex::encode(digest),
                "signer_key_id": key_id,
            }))?
        ))?;
    } else {
        output::stdout(&format!(
            "{}: OK: its SHA-256 {} is signed by trusted {} key {key_id} ({})\n",
            args.model.display(),
            hex::encode(digest),
            signer.algorithm(),
            bundle_path.display()
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
