//! Data-cache files: prepared constants, sealed with AES-256-GCM under a key derived from
//! the model's key, or checksummed with SHA-256 for an unencrypted model.
//!
//! AES-256-GCM because a cache hit must be fast (hardware AES and GHASH run at gigabytes
//! per second, where re-decrypting SM4 fields is the slow path the cache exists to skip)
//! and because it authenticates: a flipped bit, appended bytes, or another model's file
//! fail before a byte is used. The nonce is random per file; the associated data binds
//! the token and the file's position, so a file cannot be moved to another entry or slot.
//!
//! Layout: magic `NNCDCACH`, u16 version 1, u16 part, u16 part count, u8 protection
//! (1 AES-256-GCM, 2 SHA-256), u8 reserved 0, token [32], nonce [12], u64 payload length,
//! payload (GCM: ciphertext then 16-byte tag; SHA-256: plaintext then 32-byte digest).

use zeroize::Zeroizing;

use super::{CacheError, Token};
use crate::crypto::{self, Algorithm, Key, hkdf_sha256};

const MAGIC: &[u8; 8] = b"NNCDCACH";
const HEADER_LEN: usize = 8 + 2 + 2 + 2 + 1 + 1 + 32 + 12 + 8;
const GCM: u8 = 1;
const CHECKSUM: u8 = 2;

/// The keys of one cache entry of a model that has a key: HKDF-SHA-256 of the model's
/// master key with the step's token as salt, one for sealing the data-cache files
/// (AES-256-GCM) and one for authenticating the entry in the index (HMAC-SHA-256 over the
/// digests of every file of the entry). Zeroized on drop.
pub struct CacheKey {
    data: Zeroizing<Vec<u8>>,
    index: Zeroizing<Vec<u8>>,
}

impl CacheKey {
    pub fn derive(master: &[u8], token: &Token) -> Result<CacheKey, CacheError> {
        let derive = |label: &[u8]| {
            hkdf_sha256(master, token, label, 32).map_err(|e| CacheError::Options(e.to_string()))
        };
        Ok(CacheKey {
            data: derive(b"nnc/v1 data cache key")?,
            index: derive(b"nnc/v1 cache index key")?,
        })
    }

    /// The tag of an index entry: binds the token to the digest of every model- and
    /// data-cache file, so no file can be changed (nor its digest in the index) without
    /// the model's key.
    pub fn entry_tag(&self, token: &Token, model: &[String], data: &[String]) -> String {
        let mut parts: Vec<&[u8]> = vec![b"nnc/v1 cache entry", token];
        let counts = [model.len() as u32, data.len() as u32].map(u32::to_le_bytes);
        parts.push(&counts[0]);
        parts.extend(model.iter().map(String::as_bytes));
        parts.push(&counts[1]);
        parts.extend(data.iter().map(String::as_bytes));
        hex::encode(crypto::hmac_sha256(&self.index, &parts))
    }
}

fn header(
    token: &Token,
    part: u16,
    count: u16,
    protection: u8,
    nonce: &[u8; 12],
    payload_len: u64,
) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&part.to_le_bytes());
    h.extend_from_slice(&count.to_le_bytes());
    h.push(protection);
    h.push(0);
    h.extend_from_slice(token);
    h.extend_from_slice(nonce);
    h.extend_from_slice(&payload_len.to_le_bytes());
    h
}

/// Seals `plaintext` as data-cache file `part` of `count` for `token`.
pub fn seal_data(
    key: Option<&CacheKey>,
    token: &Token,
    part: u16,
    count: u16,
    plaintext: &[u8],
) -> Result<Vec<u8>, CacheError> {
    match key {
        Some(k) => {
            let nonce: [u8; 12] =
                crypto::try_random_bytes().map_err(|e| CacheError::Options(e.to_string()))?;
            let h = header(token, part, count, GCM, &nonce, plaintext.len() as u64 + 16);
            // Standard AES-256-GCM (the header is the associated data), through nnc's own
            // GCM: the `aes-gcm` crate's CTR ran at half of AES's speed.
            let key = Key::new(Algorithm::Aes256, &k.data)
                .map_err(|_| CacheError::Options("bad data-cache key".into()))?;
            let mut out = h;
            let body = out.len();
            out.extend_from_slice(plaintext);
            let aad = out[..body].to_vec();
            let sealer = crypto::GcmSealer::new(&key, &nonce, &aad)
                .map_err(|e| CacheError::Options(format!("data-cache encryption failed: {e}")))?;
            let tag = sealer
                .finish(&mut out[body..])
                .map_err(|e| CacheError::Options(format!("data-cache encryption failed: {e}")))?;
            out.extend_from_slice(&tag);
            Ok(out)
        }
        None => {
            let h = header(
                token,
                part,
                count,
                CHECKSUM,
                &[0; 12],
                plaintext.len() as u64 + 32,
            );
            let digest = crypto::sha256(&[&h, plaintext]);
            let mut out = h;
            out.extend_from_slice(plaintext);
            out.extend_from_slice(&digest);
            Ok(out)
        }
    }
}

/// The plaintext of an opened data-cache file: decrypted in place inside the buffer the
/// file was read into (no copy of the weights), zeroized when dropped.
pub struct OpenedData {
    buf: Zeroizing<Vec<u8>>,
    range: std::ops::Range<usize>,
}

impl std::ops::Deref for OpenedData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.range.clone()]
    }
}

/// Opens data-cache file `part` of `count` for `token`: checks its header, then its
/// authentication (GCM tag, or SHA-256 checksum), and returns the plaintext. A file from
/// another model, slot or token, or with any changed or appended byte, is an error.
pub fn open_data(
    key: Option<&CacheKey>,
    token: &Token,
    part: u16,
    count: u16,
    file: Vec<u8>,
) -> Result<OpenedData, CacheError> {
    let mut file = Zeroizing::new(file);
    let invalid = |m: &str| CacheError::Invalid {
        token: hex::encode(token),
        message: format!("data cache file {part}: {m}"),
    };
    if file.len() < HEADER_LEN || &file[..8] != MAGIC {
        return Err(invalid("not a data-cache file"));
    }
    let u16_at = |f: &[u8], o: usize| u16::from_le_bytes([f[o], f[o + 1]]);
    if u16_at(&file, 8) != 1 {
        return Err(invalid("unknown version"));
    }
    if u16_at(&file, 10) != part || u16_at(&file, 12) != count {
        return Err(invalid("belongs to another slot"));
    }
    if &file[16..48] != token {
        return Err(invalid("belongs to another cache entry (token mismatch)"));
    }
    let protection = file[14];
    let mut len = [0u8; 8];
    len.copy_from_slice(&file[60..68]);
    let payload_len = u64::from_le_bytes(len);
    if payload_len != (file.len() - HEADER_LEN) as u64 {
        return Err(invalid(
            "length does not match (truncated or appended bytes)",
        ));
    }
    let total = file.len();
    match (protection, key) {
        (GCM, Some(k)) => {
            if total < HEADER_LEN + 16 {
                return Err(invalid("too short"));
            }
            let mut nonce = [0u8; 12];
            nonce.copy_from_slice(&file[48..60]);
            let mut tag = [0u8; 16];
            tag.copy_from_slice(&file[total - 16..]);
            let key = Key::new(Algorithm::Aes256, &k.data).map_err(|_| invalid("bad key"))?;
            let (header, rest) = file.split_at_mut(HEADER_LEN);
            let body = &mut rest[..total - HEADER_LEN - 16];
            crypto::gcm_open_in_place(&key, &nonce, header, body, &tag).map_err(|_| {
                invalid("does not authenticate (altered, or sealed under another key)")
            })?;
            Ok(OpenedData {
                buf: file,
                range: HEADER_LEN..total - 16,
            })
        }
        (CHECKSUM, None) => {
            if total < HEADER_LEN + 32 {
                return Err(invalid("too short"));
            }
            let (h, payload) = file.split_at(HEADER_LEN);
            let (plain, digest) = payload.split_at(payload.len() - 32);
            if !crypto::ct_eq(&crypto::sha256(&[h, plain]), digest) {
                return Err(invalid("checksum mismatch"));
            }
            Ok(OpenedData {
                buf: file,
                range: HEADER_LEN..total - 32,
            })
        }
        (GCM, None) => Err(invalid("is encrypted but the model is not")),
        (CHECKSUM, Some(_)) => Err(invalid("is not encrypted but the model is")),
        _ => Err(invalid("unknown protection")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_data_round_trips_and_rejects_every_alteration() {
        let token = [7u8; 32];
        let key = CacheKey::derive(b"0123456789abcdef", &token).unwrap();
        let plain: Vec<u8> = (0..1000u32).map(|i| (i * 31) as u8).collect();
        for k in [Some(&key), None] {
            let file = seal_data(k, &token, 1, 2, &plain).unwrap();
            assert_eq!(
                &open_data(k, &token, 1, 2, file.clone()).unwrap()[..],
                &plain[..]
            );
            for pos in (0..file.len()).step_by(7) {
                let mut f = file.clone();
                f[pos] ^= 1;
                assert!(open_data(k, &token, 1, 2, f).is_err(), "flip at {pos}");
            }
            let mut longer = file.clone();
            longer.push(0);
            assert!(open_data(k, &token, 1, 2, longer).is_err());
            assert!(
                open_data(k, &[8; 32], 1, 2, file.clone()).is_err(),
                "another token"
            );
            assert!(
                open_data(k, &token, 0, 2, file.clone()).is_err(),
                "another slot"
            );
        }
        // Encrypted: the plaintext appears nowhere in the file.
        let file = seal_data(Some(&key), &token, 0, 1, &plain).unwrap();
        assert!(!file.windows(32).any(|w| w == &plain[100..132]));
        // Another model's key cannot open it.
        let other = CacheKey::derive(b"fedcba9876543210", &token).unwrap();
        assert!(open_data(Some(&other), &token, 0, 1, file).is_err());
    }
}
