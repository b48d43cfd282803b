//! GCM (NIST SP 800-38D) over every weight cipher: AES-GCM, and SM4-GCM as RFC 8998
//! defines it (the same construction with SM4 as the block cipher). One pass gives
//! secrecy and integrity.
//!
//! Built from this module's CTR (`modes::encrypt_in_place` in CTR mode: the counter
//! blocks of GCM, `J0 + 1, J0 + 2, ...`, are a 128-bit big-endian count that never
//! carries out of the low 32 bits for the lengths allowed here, so it equals GCM's
//! `inc32`) and the `ghash` crate, so that a weight field is sealed a chunk at a time
//! like the other modes (the `aes-gcm` crate takes one whole message) and AES and SM4
//! keep their fast multi-block paths. Nonces are 96 bits (`J0 = nonce || 0^31 || 1`),
//! tags 128 bits.

use ghash::GHash;
use ghash::universal_hash::UniversalHash;
use zeroize::Zeroize;

use super::{CryptoError, Key, Mode};

/// The longest message GCM may encrypt under one nonce: `2^32 - 2` blocks.
pub const GCM_MAX_LEN: u64 = ((1u64 << 32) - 2) * 16;

/// A message being sealed: [`GcmSealer::update`] for every chunk but the last (each a
/// whole number of 16-byte blocks), then [`GcmSealer::finish`], which returns the tag.
pub struct GcmSealer<'k> {
    state: Gcm<'k>,
}

impl<'k> GcmSealer<'k> {
    /// Starts sealing under `key` with `nonce`, authenticating `aad` too.
    ///
    /// # Errors
    ///
    /// Only a key of the wrong length, which [`Key`] rules out.
    pub fn new(key: &'k Key, nonce: &[u8; 12], aad: &[u8]) -> Result<GcmSealer<'k>, CryptoError> {
        Ok(GcmSealer {
            state: Gcm::new(key, nonce, aad)?,
        })
    }

    /// Encrypts `chunk` (whole blocks) in place.
    ///
    /// # Errors
    ///
    /// [`CryptoError::CiphertextLength`] for a chunk that is not whole blocks or that
    /// would take the message beyond [`GCM_MAX_LEN`].
    pub fn update(&mut self, chunk: &mut [u8]) -> Result<(), CryptoError> {
        self.state.check_chunk(chunk.len(), false)?;
        self.state.keystream(chunk)?;
        self.state.hash(chunk);
        Ok(())
    }

    /// Encrypts the last chunk in place and returns the tag.
    ///
    /// # Errors
    ///
    /// As [`GcmSealer::update`].
    pub fn finish(mut self, last: &mut [u8]) -> Result<[u8; 16], CryptoError> {
        self.state.check_chunk(last.len(), true)?;
        self.state.keystream(last)?;
        self.state.hash(last);
        Ok(self.state.tag())
    }
}

/// The tag of `ciphertext` under `key`, `nonce` and `aad`, without decrypting it: for
/// checking a stored field (compare with [`super::ct_eq`]).
///
/// # Errors
///
/// [`CryptoError::CiphertextLength`] beyond [`GCM_MAX_LEN`].
pub fn gcm_tag(
    key: &Key,
    nonce: &[u8; 12],
    aad: &[u8],
    ciphertext: &[u8],
) -> Result<[u8; 16], CryptoError> {
    let mut gcm = Gcm::new(key, nonce, aad)?;
    gcm.check_chunk(ciphertext.len(), true)?;
    gcm.hash(ciphertext);
    Ok(gcm.tag())
}

/// Checks `tag` over the ciphertext in `buf`, then decrypts `buf` in place. On a tag
/// that does not match, `buf` is left as it was (still ciphertext) and an error returned.
///
/// # Errors
///
/// [`CryptoError::Unauthentic`] when the tag does not match;
/// [`CryptoError::CiphertextLength`] beyond [`GCM_MAX_LEN`].
pub fn gcm_open_in_place(
    key: &Key,
    nonce: &[u8; 12],
    aad: &[u8],
    buf: &mut [u8],
    tag: &[u8; 16],
) -> Result<(), CryptoError> {
    let mut gcm = Gcm::new(key, nonce, aad)?;
    gcm.check_chunk(buf.len(), true)?;
    gcm.hash(buf);
    let expected = gcm.tag();
    if !super::ct_eq(&expected, tag) {
        return Err(CryptoError::Unauthentic { mode: Mode::Gcm });
    }
    // Counter blocks from J0 + 1, as sealing used.
    let mut fresh = Gcm::new(key, nonce, &[])?;
    fresh.keystream(buf)
}

/// The state shared by sealing, tagging and opening.
struct Gcm<'k> {
    key: &'k Key,
    /// The next counter block (starts at `J0 + 1`).
    counter: u128,
    ghash: GHash,
    /// `E_K(J0)`, which masks the tag.
    masked_j0: [u8; 16],
    aad_len: u64,
    text_len: u64,
    /// Set once a chunk that is not whole blocks (the last) has been hashed.
    ended: bool,
}

impl<'k> Gcm<'k> {
    fn new(key: &'k Key, nonce: &[u8; 12], aad: &[u8]) -> Result<Gcm<'k>, CryptoError> {
        let mut h = [0u8; 16];
        super::modes::encrypt_in_place(key, Mode::Ecb, &[0; 16], &mut h)?;
        let mut j0 = [0u8; 16];
        j0[..12].copy_from_slice(nonce);
        j0[15] = 1;
        let mut masked_j0 = j0;
        super::modes::encrypt_in_place(key, Mode::Ecb, &[0; 16], &mut masked_j0)?;
        let mut ghash = GHash::new(&h.into());
        h.zeroize();
        ghash.update_padded(aad);
        Ok(Gcm {
            key,
            counter: u128::from_be_bytes(j0).wrapping_add(1),
            ghash,
            masked_j0,
            aad_len: aad.len() as u64,
            text_len: 0,
            ended: false,
        })
    }

    fn check_chunk(&mut self, len: usize, last: bool) -> Result<(), CryptoError> {
        let total = self.text_len.checked_add(len as u64);
        if self.ended || (!last && !len.is_multiple_of(16)) || total.is_none_or(|t| t > GCM_MAX_LEN)
        {
            return Err(CryptoError::CiphertextLength {
                mode: Mode::Gcm,
                len,
            });
        }
        self.ended = last;
        Ok(())
    }

    /// XORs the next counter blocks' keystream into `buf`.
    fn keystream(&mut self, buf: &mut [u8]) -> Result<(), CryptoError> {
        let iv = self.counter.to_be_bytes();
        super::modes::encrypt_in_place(self.key, Mode::Ctr, &iv, buf)?;
        self.counter = self.counter.wrapping_add(buf.len().div_ceil(16) as u128);
        Ok(())
    }

    /// Adds ciphertext to the hash (zero-padded to a block: only the last chunk may end
    /// inside one).
    fn hash(&mut self, ciphertext: &[u8]) {
        self.ghash.update_padded(ciphertext);
        self.text_len += ciphertext.len() as u64;
    }

    fn tag(self) -> [u8; 16] {
        let mut ghash = self.ghash;
        let mut lengths = [0u8; 16];
        lengths[..8].copy_from_slice(&(self.aad_len * 8).to_be_bytes());
        lengths[8..].copy_from_slice(&(self.text_len * 8).to_be_bytes());
        ghash.update(&[lengths.into()]);
        let s: [u8; 16] = ghash.finalize().into();
        std::array::from_fn(|i| s[i] ^ self.masked_j0[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::Algorithm;
    use aes_gcm::aead::{AeadInOut, KeyInit as _};
    use cipher::consts::U12;

    /// The `aes-gcm` crate (with the `sm4` crate for SM4-GCM) as the reference.
    fn reference(key: &Key, nonce: &[u8; 12], aad: &[u8], plain: &[u8]) -> (Vec<u8>, [u8; 16]) {
        let mut buf = plain.to_vec();
        let n = aes_gcm::Nonce::from(*nonce);
        let tag = match key.algorithm() {
            Algorithm::Aes128 => aes_gcm::Aes128Gcm::new_from_slice(key.as_bytes())
                .expect("key")
                .encrypt_inout_detached(&n, aad, buf.as_mut_slice().into()),
            Algorithm::Aes256 => aes_gcm::Aes256Gcm::new_from_slice(key.as_bytes())
                .expect("key")
                .encrypt_inout_detached(&n, aad, buf.as_mut_slice().into()),
            Algorithm::Aes192 => {
                aes_gcm::AesGcm::<aes::Aes192, U12>::new_from_slice(key.as_bytes())
                    .expect("key")
                    .encrypt_inout_detached(&n, aad, buf.as_mut_slice().into())
            }
            Algorithm::Sm4 => aes_gcm::AesGcm::<sm4::Sm4, U12>::new_from_slice(key.as_bytes())
                .expect("key")
                .encrypt_inout_detached(&n, aad, buf.as_mut_slice().into()),
        }
        .expect("seals");
        (buf, tag.into())
    }

    #[test]
    fn streamed_gcm_equals_the_reference_and_opens_back() {
        let plain: Vec<u8> = (0..3000u32).map(|i| (i * 97 + 3) as u8).collect();
        let nonce: [u8; 12] = std::array::from_fn(|i| 0xA0 + i as u8);
        let aad = b"nnc/v1 weight field: index, offset, length";
        for algorithm in [
            Algorithm::Sm4,
            Algorithm::Aes128,
            Algorithm::Aes192,
            Algorithm::Aes256,
        ] {
            let key = Key::generate(algorithm).expect("key");
            for len in [0, 1, 15, 16, 17, 512, 1000, 3000] {
                for chunk in [16, 64, 1024] {
                    let (expected, expected_tag) = reference(&key, &nonce, aad, &plain[..len]);
                    let mut sealer = GcmSealer::new(&key, &nonce, aad).expect("starts");
                    let mut out = Vec::new();
                    let mut rest = &plain[..len];
                    while rest.len() > chunk {
                        let mut c = rest[..chunk].to_vec();
                        sealer.update(&mut c).expect("whole blocks");
                        out.extend_from_slice(&c);
                        rest = &rest[chunk..];
                    }
                    let mut last = rest.to_vec();
                    let tag = sealer.finish(&mut last).expect("seals");
                    out.extend_from_slice(&last);
                    assert_eq!(out, expected, "{algorithm:?} length {len} chunks {chunk}");
                    assert_eq!(tag, expected_tag, "{algorithm:?} length {len} tag");
                    assert_eq!(gcm_tag(&key, &nonce, aad, &out).expect("tags"), tag);
                    gcm_open_in_place(&key, &nonce, aad, &mut out, &tag).expect("opens");
                    assert_eq!(out, &plain[..len]);
                }
            }
        }
    }

    #[test]
    fn any_change_is_refused_and_leaves_the_ciphertext() {
        let key = Key::generate(Algorithm::Sm4).expect("key");
        let nonce = [7u8; 12];
        let (sealed, tag) = reference(&key, &nonce, b"aad", &[5u8; 100]);
        let mut flipped = sealed.clone();
        flipped[40] ^= 1;
        let before = flipped.clone();
        let e = gcm_open_in_place(&key, &nonce, b"aad", &mut flipped, &tag).unwrap_err();
        assert_eq!(e, CryptoError::Unauthentic { mode: Mode::Gcm });
        assert_eq!(flipped, before, "nothing decrypted");
        let mut other_aad = sealed.clone();
        assert!(gcm_open_in_place(&key, &nonce, b"aad!", &mut other_aad, &tag).is_err());
        let mut other_nonce = sealed;
        assert!(gcm_open_in_place(&key, &[8; 12], b"aad", &mut other_nonce, &tag).is_err());
    }
}
