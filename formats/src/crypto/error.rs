//! The one error type of [`crate::crypto`].

use super::{Algorithm, Mode};

/// Everything that can go wrong while handling keys, encrypting or decrypting.
///
/// No variant carries key material: a message may end up in a log or a bug report.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CryptoError {
    /// The key has the wrong number of bytes for its algorithm.
    #[error(
        "{algorithm} key must be {expected} bytes ({hex} hex digits), got {actual} bytes",
        hex = .expected * 2
    )]
    KeyLength {
        algorithm: Algorithm,
        expected: usize,
        actual: usize,
    },

    /// A hex key has an odd number of digits, so it cannot be bytes.
    #[error(
        "{algorithm} key in hex has an odd number of digits ({digits}); \
         it must be {expected} hex digits",
        expected = .algorithm.key_len() * 2
    )]
    KeyHexOddLength { algorithm: Algorithm, digits: usize },

    /// A hex key contains a character that is not a hex digit. Only the position is
    /// reported, never the character: it is part of the secret.
    #[error(
        "{algorithm} key in hex has a character that is not a hex digit at position \
         {position} (counting from 1); only 0-9, a-f and A-F are allowed"
    )]
    KeyHexDigit {
        algorithm: Algorithm,
        position: usize,
    },

    /// An ECB/CBC ciphertext is not a whole, non-zero number of 16-byte blocks.
    #[error(
        "{mode} ciphertext must be a non-zero multiple of 16 bytes, got {len} bytes \
         (truncated or corrupted data)"
    )]
    CiphertextLength { mode: Mode, len: usize },

    /// ECB/CBC decryption produced invalid PKCS#7 padding.
    #[error("{mode} decryption produced invalid padding: wrong key or IV, or corrupted data")]
    Padding { mode: Mode },

    /// An authenticated mode's tag does not match: the data, its associated data or
    /// nonce were altered, or the key is wrong.
    #[error("{mode} authentication failed: altered data or the wrong key")]
    Unauthentic { mode: Mode },

    /// An authenticated mode (GCM) asked of the plain `encrypt`/`decrypt`, which have
    /// nowhere to put its tag.
    #[error("{mode} is an authenticated mode: seal and open it through crypto::gcm")]
    NeedsTag { mode: Mode },

    /// A cipher name that is none of the supported algorithms.
    #[error("unknown cipher algorithm {0:?}; expected one of sm4, aes128, aes192, aes256")]
    UnknownAlgorithm(String),

    /// A mode name that is none of the supported modes.
    #[error("unknown cipher mode {0:?}; expected one of ecb, cbc, cfb, ofb, ctr, gcm")]
    UnknownMode(String),

    /// More HKDF-SHA-256 output was requested than RFC 5869 allows (255 * 32 bytes).
    #[error("HKDF-SHA-256 can derive at most 8160 bytes, {requested} were requested")]
    KdfLength { requested: usize },

    /// A key file or key bytes that are not a key nnc can use.
    #[error("{0}")]
    KeyFormat(String),

    /// A key used for what its algorithm does not do (a device key to sign, say).
    #[error("an {algorithm} key cannot be used for {purpose}")]
    KeyPurpose {
        algorithm: &'static str,
        purpose: &'static str,
    },

    /// A wrapped data key did not open: not wrapped for this key, or altered.
    #[error("the wrapped data key does not open with this key (another key's, or altered)")]
    Unwrap,

    /// The operating system's random number generator failed.
    #[error("the operating system random number generator failed: {0}")]
    Rng(String),
}
