//! Weight encryption: SM4 and AES-128/192/256 in ECB, CBC, CFB-128, OFB and CTR, key
//! handling, HKDF/HMAC-SHA-256 and randomness.
//!
//! Output is byte-identical to `openssl enc -<cipher>-<mode> -nosalt -K .. -iv ..`:
//! ECB/CBC use PKCS#7 padding, the other modes none; CTR counts over the whole 16-byte
//! IV, big-endian. The ciphers come from the RustCrypto crates (AES-NI is picked at run
//! time); this module adds the (algorithm x mode) dispatch, padding checks that never
//! panic, and key hygiene.
//!
//! None of these modes authenticates: callers MAC the ciphertext (encrypt-then-MAC,
//! e.g. [`hmac_sha256`] under a key separated with [`hkdf_sha256`]) and verify the tag
//! before calling [`decrypt`].

mod algorithm;
mod asymmetric;
mod ctr;
mod error;
mod gcm;
mod kdf;
mod key;
mod modes;
mod sm4_simd;
mod stream;
mod wipe;

pub use algorithm::{Algorithm, Mode, Padding};
pub use asymmetric::{KeyAlgorithm, PrivateKey, PublicKey, aes_key_unwrap, aes_key_wrap};
pub use error::CryptoError;
pub use gcm::{GCM_MAX_LEN, GcmSealer, gcm_open_in_place, gcm_tag};
pub use kdf::{
    HKDF_SHA256_MAX_LEN, HmacSha256Writer, SHA256_LEN, ct_eq, hkdf_sha256, hmac_sha256,
    random_bytes, sha256, try_random_bytes,
};
pub use key::{Key, KeyHexError, key_bytes_from_hex};
pub use modes::{
    ciphertext_len, decrypt, decrypt_in_place, decrypt_into, encrypt, encrypt_in_place,
    encrypt_into,
};
pub use stream::{FieldEncryptor, SEGMENT_LEN, decrypt_segmented_in_place};
pub use wipe::{WipedBytes, wipe, wipe_vec};

/// Block size of every supported cipher, in bytes.
pub const BLOCK_LEN: usize = 16;

/// IV length of every mode, in bytes (ECB takes one too, and ignores it).
pub const IV_LEN: usize = 16;
