//! The compilation cache on disk: what a device writes after preparing a step, so that
//! the next start prepares from it.
//!
//! Following the NNAPI caching contract (seeds 000/002):
//! - a **token** (32 bytes, SHA-256) names a step: the model's checksum (or the caller's
//!   token), the step's operations, the device's name and version, the execution
//!   preference, and the nnc version;
//! - per step, **model-cache** files (the prepared program: security-sensitive) and
//!   **data-cache** files (prepared constants), as many of each as the device declares;
//! - a persistent **index** `token -> SHA-256 of each model-cache file`, kept apart from
//!   the cache files (`index.json` at the top of the directory) and reset whenever the nnc
//!   version changes, so that a model cache is used only if it hashes to what this nnc
//!   wrote. Each entry also records the model file it was prepared from (its metadata
//!   tag): a token stands for a model, but an entry of another model file under it is a
//!   miss, and is replaced. A corrupt or unreadable index is a miss reported to the
//!   caller ([`Lookup::IndexDamaged`], saying how many entries it drops);
//! - reading takes each byte of a file **once** into memory and hashes, authenticates and
//!   parses that copy (no time-of-check/time-of-use gap; a data-cache file is read segment
//!   by segment straight into the storage its plaintext will live in); writing hashes the buffer before writing it, writes a
//!   0600 temporary file and renames it into place, and updates the index last, atomically;
//! - a lock (`lock` file, 0600 like every other file: shared for reading, exclusive for
//!   writing) keeps any write from running beside another read or write;
//! - a data cache carries its own authentication: AES-256-GCM under a key derived from the
//!   model's key (so it holds no plaintext weights) with the token and file position as
//!   associated data; for an unencrypted model, a SHA-256 checksum.
//!
//! Layout: `DIR/index.json`, `DIR/lock`, `DIR/<token hex>/model-<i>.bin`,
//! `DIR/<token hex>/data-<i>.bin`.

mod data;
mod dir;
mod index;

pub use data::{CacheKey, DataFile, ReadAt, SEGMENT_LEN, open_data, seal_data};
pub use dir::{CacheDir, CacheEntry, CacheLock, CleanReport, EntryInfo, EntryStatus, Lookup};
pub use index::{INDEX_FORMAT, Index, IndexEntry};

use crate::crypto::sha256;

/// A cache token: names one step of one model on one device.
pub type Token = [u8; 32];

/// The model file an entry is prepared from: its metadata tag ([`IndexEntry::model_digest`]).
pub type ModelDigest = [u8; 32];

/// Most cache files of either kind a device may declare (NNAPI's limit).
pub const MAX_CACHE_FILES: usize = 32;

/// Why a cache operation failed. Failures while *reading* a cache never stop a
/// preparation: the runtime warns, discards the entry and prepares afresh.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cache directory {path}: {message}")]
    Io { path: String, message: String },
    #[error("cache entry {token}: {message}")]
    Invalid { token: String, message: String },
    #[error("cache index {path}: {message}")]
    Index { path: String, message: String },
    #[error("cache: {0}")]
    Options(String),
}

impl CacheError {
    pub(crate) fn io(path: &std::path::Path, e: impl std::fmt::Display) -> CacheError {
        CacheError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        }
    }
}

/// What identifies a step for caching.
pub struct TokenInputs<'a> {
    /// The caller's token, or the model's checksum (the `.nnc` metadata tag, which
    /// authenticates every byte of the file).
    pub model: &'a [u8],
    /// The step's operations, as indices into the model.
    pub operations: &'a [u32],
    pub device_name: &'a str,
    pub device_version: &'a str,
    /// The execution preference (e.g. `fast-single-answer`).
    pub preference: &'a str,
    pub nnc_version: &'a str,
}

/// The token of a step: SHA-256 over every input, each length-prefixed so that no two
/// different inputs can run together into the same bytes.
pub fn token(inputs: &TokenInputs) -> Token {
    let ops: Vec<u8> = inputs
        .operations
        .iter()
        .flat_map(|o| o.to_le_bytes())
        .collect();
    let mut parts: Vec<Vec<u8>> = Vec::new();
    for field in [
        b"nnc/v1 cache token".as_slice(),
        inputs.model,
        &ops,
        inputs.device_name.as_bytes(),
        inputs.device_version.as_bytes(),
        inputs.preference.as_bytes(),
        inputs.nnc_version.as_bytes(),
    ] {
        parts.push((field.len() as u64).to_le_bytes().to_vec());
        parts.push(field.to_vec());
    }
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    sha256(&refs)
}

/// Parses a 64-digit hex token (`--token`).
pub fn parse_token(hex_text: &str) -> Result<Token, CacheError> {
    let mut t = [0u8; 32];
    hex::decode_to_slice(hex_text.trim(), &mut t).map_err(|_| {
        CacheError::Options(format!(
            "a token is 64 hex digits, got '{}'",
            hex_text.trim()
        ))
    })?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(model: &'a [u8], ops: &'a [u32]) -> TokenInputs<'a> {
        TokenInputs {
            model,
            operations: ops,
            device_name: "npu0",
            device_version: "1.0",
            preference: "fast-single-answer",
            nnc_version: "0.1.0",
        }
    }

    #[test]
    fn tokens_change_with_every_input() {
        let base = token(&inputs(b"model", &[0, 1, 2]));
        assert_eq!(base, token(&inputs(b"model", &[0, 1, 2])));
        assert_ne!(base, token(&inputs(b"other", &[0, 1, 2])));
        assert_ne!(base, token(&inputs(b"model", &[0, 1])));
        let mut i = inputs(b"model", &[0, 1, 2]);
        i.device_version = "1.1";
        assert_ne!(base, token(&i));
        let mut i = inputs(b"model", &[0, 1, 2]);
        i.preference = "low-power";
        assert_ne!(base, token(&i));
        let mut i = inputs(b"model", &[0, 1, 2]);
        i.nnc_version = "0.2.0";
        assert_ne!(base, token(&i));
        // Length prefixes: moving a byte from one field to the next changes the token.
        let mut a = inputs(b"mode", &[0, 1, 2]);
        a.device_name = "lnpu0";
        assert_ne!(base, token(&a));
    }

    #[test]
    fn tokens_parse_from_hex() {
        let t = parse_token(&"ab".repeat(32)).unwrap();
        assert_eq!(t, [0xab; 32]);
        assert!(parse_token("xyz").is_err());
        assert!(parse_token(&"ab".repeat(31)).is_err());
    }
}
