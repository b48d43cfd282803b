//! Public keys and signing keys from files: `--recipient`, `--sign`, `--trust`, and the
//! provenance statement a signature carries.

use std::path::{Path, PathBuf};

use nnc_formats::container::{ContainerError, SignatureBlock};
use nnc_formats::crypto::{PrivateKey, PublicKey};
use nnc_runtime::key_file::read_key_or_pem_file;
use serde_json::json;

use crate::exit::{Exit, err};

/// `--trust FILE` (repeatable): the public keys whose signatures a command accepts.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TrustArgs {
    /// Accept the model only if it is signed by this public key (PEM, as `nnc keygen
    /// --algorithm ed25519|ecdsa-p256` writes NAME.pub; repeatable: any one of them).
    /// An unsigned model, or one signed by another key, is refused (exit 3).
    #[arg(long = "trust", value_name = "SIGNER.pub")]
    pub trust: Vec<PathBuf>,
}

impl TrustArgs {
    pub fn given(&self) -> bool {
        !self.trust.is_empty()
    }

    /// The trusted keys.
    pub fn keys(&self) -> anyhow::Result<Vec<PublicKey>> {
        let mut keys = Vec::new();
        for path in &self.trust {
            let key = read_public_key(path, "--trust")?;
            if !key.algorithm().signs() {
                return Err(err(
                    Exit::Usage,
                    format!(
                        "--trust {}: an {} key is a device's key, not a signer's (give the \
                         .pub of an ed25519 or ecdsa-p256 key)",
                        path.display(),
                        key.algorithm()
                    ),
                ));
            }
            keys.push(key);
        }
        Ok(keys)
    }
}

/// A PEM public key from `path`; errors name the option and the file.
pub fn read_public_key(path: &Path, option: &str) -> anyhow::Result<PublicKey> {
    let text = read_pem(path, option)?;
    PublicKey::from_pem(&text)
        .map_err(|e| err(Exit::Malformed, format!("{option} {}: {e}", path.display())))
}

/// A PEM private key from `path` (warning when others can read it).
pub fn read_private_key(path: &Path, option: &str) -> anyhow::Result<PrivateKey> {
    let text = read_pem(path, option)?;
    crate::keys::warn_if_readable_by_others(path);
    PrivateKey::from_pem(&text)
        .map_err(|e| err(Exit::Malformed, format!("{option} {}: {e}", path.display())))
}

fn read_pem(path: &Path, option: &str) -> anyhow::Result<zeroize::Zeroizing<String>> {
    use nnc_runtime::key_file::KeyFileError as E;
    read_key_or_pem_file(path).map_err(|e| {
        let kind = match e {
            E::Io { .. } | E::NotAFile { .. } => Exit::MissingInput,
            E::TooLong { .. } | E::NotText { .. } => Exit::Malformed,
        };
        err(kind, format!("{option}: {e}"))
    })
}

/// The signing key of `--sign`, refusing a device key.
pub fn signing_key(path: &Path) -> anyhow::Result<PrivateKey> {
    let key = read_private_key(path, "--sign")?;
    if !key.algorithm().signs() {
        return Err(err(
            Exit::Usage,
            format!(
                "--sign {}: an x25519 key is a device's decryption key; sign with an ed25519 \
                 or ecdsa-p256 key (`nnc keygen --algorithm ed25519 -o signer`)",
                path.display()
            ),
        ));
    }
    Ok(key)
}

/// The device keys of `--recipient`, refusing signing keys.
pub fn recipients(paths: &[PathBuf]) -> anyhow::Result<Vec<PublicKey>> {
    let mut keys = Vec::new();
    for path in paths {
        let key = read_public_key(path, "--recipient")?;
        if !key.algorithm().receives() {
            return Err(err(
                Exit::Usage,
                format!(
                    "--recipient {}: an {} key signs; a recipient is a device's x25519 or sm2 \
                     key (`nnc keygen --algorithm x25519 -o device`)",
                    path.display(),
                    key.algorithm()
                ),
            ));
        }
        keys.push(key);
    }
    Ok(keys)
}

/// SHA-256 of a file in hex (for the provenance statement).
pub fn file_sha256(path: &Path) -> anyhow::Result<String> {
    Ok(hex::encode(file_digest(path)?))
}

/// SHA-256 of a file, read in pieces.
pub fn file_digest(path: &Path) -> anyhow::Result<[u8; 32]> {
    use sha2::Digest as _;
    use std::io::Read as _;
    let mut file = std::fs::File::open(path)
        .map_err(|e| err(Exit::MissingInput, format!("{}: {e}", path.display())))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| err(Exit::MissingInput, format!("{}: {e}", path.display())))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().into())
}

/// A file's name and digest, for a statement.
pub fn file_entry(path: &Path) -> anyhow::Result<serde_json::Value> {
    Ok(json!({
        "name": path.file_name().map(|n| n.to_string_lossy().into_owned()),
        "sha256": file_sha256(path)?,
    }))
}

/// What `inspect` and `verify` show of a signature.
pub fn signature_json(block: &SignatureBlock, verified: Option<bool>) -> serde_json::Value {
    let statement: serde_json::Value = serde_json::from_slice(&block.statement)
        .unwrap_or_else(|_| json!(String::from_utf8_lossy(&block.statement)));
    json!({
        "algorithm": block.signer.algorithm().name(),
        "signer_key_id": hex::encode(block.signer.key_id()),
        "signer_fingerprint": hex::encode(block.signer.fingerprint()),
        "verified": verified,
        "statement": statement,
    })
}

/// Checks `--trust` on a file held in memory, before anything else reads it.
pub fn check(
    bytes: &[u8],
    trust: &TrustArgs,
    what: &Path,
) -> anyhow::Result<Option<SignatureBlock>> {
    if !trust.given() {
        return Ok(None);
    }
    let keys = trust.keys()?;
    let meta = nnc_formats::container::copy_metadata(bytes).map_err(|e| trust_error(e, what))?;
    nnc_formats::container::verify_signature(bytes, &meta, &keys)
        .map(Some)
        .map_err(|e| trust_error(e, what))
}

fn trust_error(e: ContainerError, what: &Path) -> anyhow::Error {
    anyhow::Error::new(e).context(format!("{} is refused under --trust", what.display()))
}
