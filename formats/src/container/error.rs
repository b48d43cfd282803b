//! Errors of reading, verifying and writing `.nnc` files. Every variant names the field
//! or region at fault.

use crate::crypto::CryptoError;
use crate::nn::ValidationError;

#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("not an nnc model file: bad magic bytes (expected {expected:02x?})")]
    BadMagic { expected: [u8; 8] },
    #[error("file is truncated: {what} needs {needed} bytes, the file has {available}")]
    Truncated {
        what: String,
        needed: u64,
        available: u64,
    },
    #[error("unsupported format version {major}.{minor}: this nnc reads major version {supported}")]
    UnsupportedVersion {
        major: u16,
        minor: u16,
        supported: u16,
    },
    #[error("header field '{field}': {message}")]
    HeaderField {
        field: &'static str,
        message: String,
    },
    #[error("section table entry {index} ({kind}): {message}")]
    Section {
        index: usize,
        kind: String,
        message: String,
    },
    #[error("sections '{first}' and '{second}' overlap")]
    SectionsOverlap { first: String, second: String },
    #[error("the file has no '{0}' section")]
    MissingSection(&'static str),
    #[error("{section} section, byte {offset}: field '{field}' {message}")]
    Malformed {
        section: &'static str,
        offset: u64,
        field: String,
        message: String,
    },
    #[error("operation {operation}: weight field {message}")]
    WeightField { operation: usize, message: String },
    #[error("the model graph stored in the file is invalid: {0}")]
    Graph(#[from] ValidationError),
    #[error("{region} holds non-zero bytes at offset {offset} where only zero padding may be")]
    NonZeroPadding { region: &'static str, offset: u64 },
    /// The one message for every integrity failure: nnc cannot tell a wrong key from an
    /// altered file, and says so.
    #[error("wrong key or tampered file: {what} does not authenticate")]
    Integrity { what: String },
    /// The file is encrypted (`algorithm`) or authenticated with a key (`None`), and no
    /// key was given.
    #[error("{}", key_required(.algorithm))]
    KeyRequired { algorithm: Option<&'static str> },
    /// A key was given but the file is not authenticated with any key (SHA-256 digests
    /// only): accepting it would let whoever can replace the file substitute any model.
    #[error(
        "the file is not authenticated with a key (SHA-256 digests only, written with \
         --encrypt none and no key), but a key was given: refusing it, as anyone could \
         have written it"
    )]
    NotAuthenticated,
    /// A 1.3 file has no wrapped data key for the given key.
    #[error(
        "the file is not encrypted for this key (key id {key}); it opens with the keys \
         {recipients} (see `nnc inspect`)"
    )]
    NotARecipient { key: String, recipients: String },
    /// A signature that is missing where one is required, does not hold, or is by a key
    /// nobody trusts.
    #[error("signature: {0}")]
    Signature(String),
    #[error("the key is for {key} but the file is encrypted with {file}")]
    KeyAlgorithm {
        key: &'static str,
        file: &'static str,
    },
    /// The file became shorter while it was being read (another process truncated it):
    /// what was opened and authenticated can no longer be read back.
    #[error(
        "the file was truncated while being read: {what} at offset {offset} ({length} bytes) \
         lies beyond its end now ({now} bytes; {opened} when it was opened)"
    )]
    Shrank {
        what: String,
        offset: u64,
        length: u64,
        opened: u64,
        now: u64,
    },
    /// Reading the file failed (an I/O error other than its end).
    #[error("cannot read {what} at offset {offset}: {message}")]
    Read {
        what: String,
        offset: u64,
        message: String,
    },
    #[error("cannot write the model: {0}")]
    Unwritable(String),
    #[error(transparent)]
    Crypto(#[from] CryptoError),
}

fn key_required(algorithm: &Option<&'static str>) -> String {
    match algorithm {
        Some(a) => {
            format!("the file is encrypted ({a}); its key is required (--key-file or --key-env)")
        }
        None => "the file is authenticated with a key (its weights are not encrypted); the key is \
                 required (--key-file or --key-env)"
            .into(),
    }
}

impl ContainerError {
    /// True for failures that mean "wrong key or tampered file" (a file truncated while
    /// it is read was altered after it was opened, too).
    pub fn is_integrity(&self) -> bool {
        matches!(
            self,
            ContainerError::Integrity { .. }
                | ContainerError::NotAuthenticated
                | ContainerError::NotARecipient { .. }
                | ContainerError::Signature(_)
                | ContainerError::Shrank { .. }
        )
    }
}
