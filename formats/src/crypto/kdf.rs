//! Hashing, key derivation, message authentication and randomness (all SHA-256 based).

use std::io;

use hmac::{Hmac, KeyInit, Mac};
use rand::TryRng;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::CryptoError;

/// SHA-256 output and HMAC-SHA-256 tag length in bytes.
pub const SHA256_LEN: usize = 32;

/// The most HKDF-SHA-256 can produce (RFC 5869: 255 blocks of 32 bytes).
pub const HKDF_SHA256_MAX_LEN: usize = 255 * SHA256_LEN;

/// HKDF-SHA-256 (RFC 5869): extract with `salt` (empty means "no salt"), then expand
/// `out_len` bytes bound to `info`.
///
/// # Errors
///
/// [`CryptoError::KdfLength`] if `out_len` exceeds [`HKDF_SHA256_MAX_LEN`].
pub fn hkdf_sha256(
    ikm: &[u8],
    salt: &[u8],
    info: &[u8],
    out_len: usize,
) -> Result<Zeroizing<Vec<u8>>, CryptoError> {
    // Checked before allocating, so an absurd length is an error, not an abort.
    if out_len > HKDF_SHA256_MAX_LEN {
        return Err(CryptoError::KdfLength { requested: out_len });
    }
    let mut okm = Zeroizing::new(vec![0; out_len]);
    hkdf::Hkdf::<Sha256>::new(Some(salt), ikm)
        .expand(info, &mut okm)
        .map_err(|_| CryptoError::KdfLength { requested: out_len })?;
    Ok(okm)
}

/// HMAC-SHA-256 of the concatenation of `parts`, without concatenating them.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; SHA256_LEN] {
    let mut mac = HmacSha256Writer::new(key);
    for part in parts {
        mac.update(part);
    }
    mac.finalize()
}

/// SHA-256 of the concatenation of `parts`.
pub fn sha256(parts: &[&[u8]]) -> [u8; SHA256_LEN] {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// Incremental HMAC-SHA-256, also usable as an [`io::Write`] sink (e.g. a tee while
/// writing a file).
#[derive(Clone)]
pub struct HmacSha256Writer {
    mac: Hmac<Sha256>,
}

impl HmacSha256Writer {
    /// Starts a MAC under `key` (any length; RFC 2104 hashes long keys).
    ///
    /// # Panics
    ///
    /// Never: HMAC accepts every key length.
    pub fn new(key: &[u8]) -> Self {
        let mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
        HmacSha256Writer { mac }
    }

    /// Feeds more data.
    pub fn update(&mut self, data: &[u8]) {
        self.mac.update(data);
    }

    /// The tag over everything fed so far.
    pub fn finalize(self) -> [u8; SHA256_LEN] {
        self.mac.finalize().into_bytes().into()
    }

    /// Whether `expected` is the tag over everything fed so far, compared in constant
    /// time.
    pub fn verify(self, expected: &[u8]) -> bool {
        ct_eq(&self.finalize(), expected)
    }
}

impl std::fmt::Debug for HmacSha256Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HmacSha256Writer { .. }")
    }
}

impl io::Write for HmacSha256Writer {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Whether `a == b`, in time that depends only on the lengths (which are not secret
/// for tags), so a forger cannot find a tag byte by byte.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        // black_box keeps the optimiser from turning the fold into an early exit.
        diff = std::hint::black_box(diff | (x ^ y));
    }
    diff == 0
}

/// `N` bytes from the operating system's random number generator.
///
/// # Panics
///
/// If the operating system cannot provide randomness, which on supported platforms
/// does not happen after boot; use [`try_random_bytes`] to handle it instead.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    match try_random_bytes() {
        Ok(bytes) => bytes,
        Err(err) => panic!("{err}"),
    }
}

/// `N` bytes from the operating system's random number generator.
///
/// # Errors
///
/// [`CryptoError::Rng`] if the operating system cannot provide randomness.
pub fn try_random_bytes<const N: usize>() -> Result<[u8; N], CryptoError> {
    let mut bytes = [0; N];
    rand::rngs::SysRng
        .try_fill_bytes(&mut bytes)
        .map_err(|err| CryptoError::Rng(err.to_string()))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn ct_eq_compares_content_and_length() {
        assert!(ct_eq(b"", b""));
        assert!(ct_eq(b"tag", b"tag"));
        assert!(!ct_eq(b"tag", b"taG"));
        assert!(!ct_eq(b"tag", b"ta"));
        assert!(!ct_eq(&[0x80], &[0x00]));
    }

    #[test]
    fn writer_equals_one_shot_and_verifies() {
        let mut w = HmacSha256Writer::new(b"key");
        w.write_all(b"hello ").unwrap();
        w.update(b"world");
        let tag = hmac_sha256(b"key", &[b"hello", b" ", b"world"]);
        assert!(w.clone().verify(&tag));
        let mut wrong = tag;
        wrong[31] ^= 1;
        assert!(!w.clone().verify(&wrong));
        assert!(!w.clone().verify(&tag[..31]));
        assert_eq!(w.finalize(), tag);
    }

    #[test]
    fn random_bytes_differ() {
        let a: [u8; 32] = random_bytes();
        let b: [u8; 32] = random_bytes();
        assert_ne!(a, b);
    }

    #[test]
    fn hkdf_length_limit() {
        assert_eq!(
            hkdf_sha256(b"k", b"", b"", HKDF_SHA256_MAX_LEN)
                .unwrap()
                .len(),
            HKDF_SHA256_MAX_LEN
        );
        assert_eq!(
            hkdf_sha256(b"k", b"", b"", HKDF_SHA256_MAX_LEN + 1).unwrap_err(),
            CryptoError::KdfLength {
                requested: HKDF_SHA256_MAX_LEN + 1
            }
        );
        assert!(hkdf_sha256(b"k", b"", b"", 0).unwrap().is_empty());
    }
}
