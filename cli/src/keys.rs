//! Key material from files and environment variables; never from the command line.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use nnc_formats::crypto::{Algorithm, Key};
use zeroize::Zeroizing;

/// Where a key comes from.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct KeyArgs {
    /// File holding the key in hex (as `nnc keygen` writes it).
    #[arg(long, value_name = "FILE", conflicts_with = "key_env")]
    pub key_file: Option<PathBuf>,
    /// Environment variable holding the key in hex.
    #[arg(long, value_name = "VAR")]
    pub key_env: Option<String>,
}

impl KeyArgs {
    pub fn given(&self) -> bool {
        self.key_file.is_some() || self.key_env.is_some()
    }

    /// The hex text of the key, if one was given (zeroized when dropped).
    fn hex(&self) -> anyhow::Result<Option<(Zeroizing<String>, String)>> {
        if let Some(path) = &self.key_file {
            warn_if_readable_by_others(path);
            let text = Zeroizing::new(
                std::fs::read_to_string(path).with_context(|| format!("cannot read key file {}", path.display()))?,
            );
            return Ok(Some((text, format!("key file {}", path.display()))));
        }
        if let Some(var) = &self.key_env {
            let value = std::env::var(var).map_err(|_| anyhow::anyhow!("environment variable {var} is not set (or not UTF-8)"))?;
            return Ok(Some((Zeroizing::new(value), format!("environment variable {var}"))));
        }
        Ok(None)
    }

    /// The key for `algorithm`; an error names the source and what is wrong with it.
    pub fn load(&self, algorithm: Algorithm) -> anyhow::Result<Option<Key>> {
        let Some((hex, source)) = self.hex()? else { return Ok(None) };
        let key = Key::from_hex(algorithm, &hex).with_context(|| format!("{source} does not hold a valid {} key", algorithm.name()))?;
        Ok(Some(key))
    }

    /// A key whose algorithm is given by its length alone is ambiguous (SM4 and AES-128
    /// are both 16 bytes): callers that read a file use the file's algorithm instead.
    pub fn require(&self, algorithm: Algorithm) -> anyhow::Result<Key> {
        match self.load(algorithm)? {
            Some(k) => Ok(k),
            None => bail!("this file is encrypted with {}; give its key with --key-file FILE or --key-env VAR", algorithm.name()),
        }
    }
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
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
fn warn_if_readable_by_others(_: &Path) {}
