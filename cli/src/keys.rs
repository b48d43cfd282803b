//! Key material from files and environment variables; never from the command line.

use std::path::{Path, PathBuf};

use nnc_formats::crypto::PrivateKey;
use nnc_formats::crypto::{Algorithm, Key, KeyHexError, key_bytes_from_hex};
use nnc_runtime::key_file::{is_pem, read_key_or_pem_file, split_key_text};
use zeroize::Zeroizing;

use crate::exit::{Exit, err};

/// Key bytes, where they came from (for messages), and whether they are a device's
/// private key (PKCS#8 DER) rather than a symmetric key.
type KeyMaterial = (Zeroizing<Vec<u8>>, String, bool);

/// Where a key comes from.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct KeyArgs {
    /// File holding the key: a symmetric key in hex, or to open a model, a device's
    /// private key (PEM, as `nnc keygen --algorithm x25519` writes it).
    #[arg(long, value_name = "FILE", conflicts_with = "key_env")]
    pub key_file: Option<PathBuf>,
    /// Environment variable holding the key in hex.
    #[arg(long, value_name = "VAR")]
    pub key_env: Option<String>,
    /// The key's text (hex, or a device's PEM private key) handed over in memory by a
    /// program embedding nnc ([`crate::run_in_process`]); never from the command line.
    #[arg(skip)]
    pub text: Option<Zeroizing<String>>,
}

impl KeyArgs {
    pub fn given(&self) -> bool {
        self.key_file.is_some() || self.key_env.is_some() || self.text.is_some()
    }

    /// The hex text of the key, if one was given (zeroized when dropped).
    fn hex(&self) -> anyhow::Result<Option<(Zeroizing<String>, String)>> {
        if let Some(path) = &self.key_file {
            // Bounded and non-blocking: a FIFO, /dev/zero or a huge file is refused
            // before anything proportional to it is read.
            let text = read_key_or_pem_file(path).map_err(|e| {
                use nnc_runtime::key_file::KeyFileError as E;
                let kind = match e {
                    E::Io { .. } | E::NotAFile { .. } => Exit::MissingInput,
                    E::TooLong { .. } | E::NotText { .. } => Exit::Malformed,
                };
                err(kind, format!("--key-file: {e}"))
            })?;
            if is_pem(&text) && text.contains("PUBLIC KEY-----") {
                return Err(err(
                    Exit::Usage,
                    format!(
                        "--key-file {} is a public key; a model opens with its symmetric key or \
                         a device's PRIVATE key (the file without .pub)",
                        path.display()
                    ),
                ));
            }
            warn_if_readable_by_others(path);
            return Ok(Some((text, format!("key file {}", path.display()))));
        }
        if let Some(text) = &self.text {
            return Ok(Some((text.clone(), "the key given".to_string())));
        }
        if let Some(var) = &self.key_env {
            let value = std::env::var(var).map_err(|_| {
                err(
                    Exit::MissingInput,
                    format!("environment variable {var} (given with --key-env) is not set (or not UTF-8)"),
                )
            })?;
            return Ok(Some((
                Zeroizing::new(value),
                format!("environment variable {var}"),
            )));
        }
        Ok(None)
    }

    /// The key bytes, if a key was given, their source, and whether they are a device's
    /// private key (PKCS#8 DER from PEM) rather than a symmetric key from hex: one parser
    /// and one wording for every command (never echoing key material: only the position or
    /// the count).
    fn bytes(&self) -> anyhow::Result<Option<KeyMaterial>> {
        let Some((hex, source)) = self.hex()? else {
            return Ok(None);
        };
        if is_pem(&hex) {
            // A device's private key: its PKCS#8 DER opens files that name it a recipient.
            let key = PrivateKey::from_pem(&hex)
                .map_err(|e| err(Exit::Malformed, format!("{source}: {e}")))?;
            if !key.algorithm().receives() {
                return Err(err(
                    Exit::Usage,
                    format!(
                        "{source} is a {} signing key; a model opens with its symmetric key or a \
                         device's x25519 or sm2 key (signing keys go to --sign, their .pub to --trust)",
                        key.algorithm()
                    ),
                ));
            }
            let der = key
                .to_pkcs8_der()
                .map_err(|e| err(Exit::Malformed, format!("{source}: {e}")))?;
            return Ok(Some((der, source, true)));
        }
        let (_, digits) = split_key_text(&hex);
        let bytes = key_bytes_from_hex(&digits).map_err(|e| {
            let problem = match e {
                KeyHexError::Digit { position } => {
                    format!("character {position} is not a hex digit")
                }
                KeyHexError::OddLength { digits } => {
                    format!("it has an odd number of digits ({digits})")
                }
            };
            err(
                Exit::Malformed,
                format!("{source} is not a hex key: {problem}"),
            )
        })?;
        Ok(Some((bytes, source, false)))
    }

    /// The cipher a symmetric key was made for, when its text records it (the
    /// `# nnc key: NAME` line `nnc keygen` writes).
    pub fn recorded_algorithm(&self) -> anyhow::Result<Option<Algorithm>> {
        let Some((text, source)) = self.hex()? else {
            return Ok(None);
        };
        if is_pem(&text) {
            return Ok(None);
        }
        let Some(name) = split_key_text(&text).0 else {
            return Ok(None);
        };
        let known = Algorithm::ALL.iter().copied().find(|a| a.name() == name);
        known.map(Some).ok_or_else(|| {
            err(
                Exit::Malformed,
                format!(
                    "{source} was made for '{name}', which is not a cipher nnc knows (sm4, \
                     aes128, aes192, aes256)"
                ),
            )
        })
    }

    /// The key for `algorithm`; an error names the source and what is wrong with it.
    pub fn load(&self, algorithm: Algorithm) -> anyhow::Result<Option<Key>> {
        let Some((bytes, source, device)) = self.bytes()? else {
            return Ok(None);
        };
        if device {
            return Err(err(
                Exit::Usage,
                format!(
                    "{source} is a device's private key; compiling takes a symmetric key \
                     (--key-file) and/or the device's public key (--recipient DEVICE.pub)"
                ),
            ));
        }
        let key = Key::new(algorithm, &bytes).map_err(|e| {
            err(
                Exit::Malformed,
                format!(
                    "{source} does not hold a valid {} key: {e}",
                    algorithm.name()
                ),
            )
        })?;
        Ok(Some(key))
    }

    /// The raw key bytes for reading a file: the file's authenticated header, not the key,
    /// says which algorithm they are for. `what` names the file in the error.
    pub fn require_raw(&self, what: &str) -> anyhow::Result<Zeroizing<Vec<u8>>> {
        let Some((bytes, source, device)) = self.bytes()? else {
            return Err(err(
                Exit::Usage,
                format!("{what} needs its key; give it with --key-file FILE or --key-env VAR"),
            ));
        };
        // A symmetric key is 16, 24 or 32 bytes; a device key is its PKCS#8 DER.
        if !device && !matches!(bytes.len(), 16 | 24 | 32) {
            return Err(err(
                Exit::Malformed,
                format!(
                    "{source} holds {} bytes; nnc keys are 16, 24 or 32 bytes (nnc keygen)",
                    bytes.len()
                ),
            ));
        }
        Ok(bytes)
    }
}

#[cfg(unix)]
pub(crate) fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            eprintln!(
                "warning: key file {} is accessible by other users (mode {:o}); run `chmod 600 {}`",
                path.display(),
                mode & 0o777,
                path.display()
            );
        }
    }
}

#[cfg(not(unix))]
pub(crate) fn warn_if_readable_by_others(_: &Path) {}
