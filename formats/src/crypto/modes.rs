//! Encryption and decryption for every (algorithm x mode) pair.
//!
//! One generic in-place function per direction, monomorphised per cipher: the cipher is
//! a type parameter, so nothing is boxed and the crates' parallel (AES-NI) block paths
//! apply. The copying one-shot functions copy (and pad) into their output and run in
//! place there, except CTR, which XORs from input to output in one pass.
//! SM4 is [`Sm4Simd`] (SIMD kernels picked at run time, see `sm4_simd`); CTR is this
//! module's own [`ctr128_apply`], which batches counter blocks (see `ctr.rs`).
//!
//! The cipher crates wipe their expanded key schedules on drop only when their own
//! `zeroize` features are enabled (`aes`, `sm4` and each mode crate); this module
//! cannot do it for them without `unsafe`. [`Sm4Simd`] wipes its own.

use aes::{Aes128, Aes192, Aes256};
use cipher::{
    BlockCipherDecrypt, BlockCipherEncrypt, BlockModeDecrypt, BlockModeEncrypt, BlockSizeUser,
    InOutBuf, InvalidLength, KeyInit, KeyIvInit, StreamCipher, consts::U16,
};
use zeroize::Zeroize;

use super::ctr::{ctr128_apply, ctr128_apply_in_place};
use super::sm4_simd::Sm4Simd;
use super::{Algorithm, BLOCK_LEN, CryptoError, Key, Mode, Padding};

/// [`BLOCK_LEN`] for byte arithmetic.
const BLOCK_LEN_U8: u8 = 16;

/// Length of the ciphertext of `plaintext_len` bytes in `mode`: rounded up to the next
/// whole block (always adding 1 to 16 bytes) for PKCS#7 modes, unchanged otherwise.
pub fn ciphertext_len(mode: Mode, plaintext_len: usize) -> usize {
    match mode.padding() {
        Padding::Pkcs7 => (plaintext_len - plaintext_len % BLOCK_LEN).saturating_add(BLOCK_LEN),
        Padding::None => plaintext_len,
    }
}

/// Encrypts `plaintext` with `key` in `mode`. ECB ignores `iv`.
///
/// The IV must never repeat under one key for CBC/CFB/OFB/CTR; use
/// [`super::random_bytes`] for a fresh one.
///
/// # Errors
///
/// None in practice: every [`Key`] has the right length for its algorithm, and any
/// plaintext length is accepted.
pub fn encrypt(
    key: &Key,
    mode: Mode,
    iv: &[u8; 16],
    plaintext: &[u8],
) -> Result<Vec<u8>, CryptoError> {
    let mut out = Vec::new();
    encrypt_into(key, mode, iv, plaintext, &mut out)?;
    Ok(out)
}

/// Like [`encrypt`], writing the ciphertext into `out` (replacing its contents and
/// reusing its allocation when it is large enough).
///
/// # Errors
///
/// As [`encrypt`].
pub fn encrypt_into(
    key: &Key,
    mode: Mode,
    iv: &[u8; 16],
    plaintext: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), CryptoError> {
    refuse_aead(mode)?;
    let len = ciphertext_len(mode, plaintext.len());
    prepare(out, len);
    if mode == Mode::Ctr {
        // One pass from the input to the output (the hot one-shot case).
        return ctr_into(key, iv, plaintext, out);
    }
    // The other modes run in place: the plaintext and its PKCS#7 padding (1 to 16 bytes
    // of value n, for ECB and CBC) are copied into `out` first.
    let (message, padding) = out.split_at_mut(plaintext.len());
    message.copy_from_slice(plaintext);
    padding.fill(padding.len() as u8);
    encrypt_in_place(key, mode, iv, out)
}

/// Decrypts `ciphertext` with `key` in `mode`. ECB ignores `iv`.
///
/// Stream modes cannot detect a wrong key or tampering: authenticate before decrypting.
///
/// # Errors
///
/// For ECB/CBC, [`CryptoError::CiphertextLength`] if the ciphertext is not a non-zero
/// whole number of blocks and [`CryptoError::Padding`] if the padding is malformed.
/// Stream modes accept any ciphertext.
pub fn decrypt(
    key: &Key,
    mode: Mode,
    iv: &[u8; 16],
    ciphertext: &[u8],
) -> Result<Vec<u8>, CryptoError> {
    let mut out = Vec::new();
    decrypt_into(key, mode, iv, ciphertext, &mut out)?;
    Ok(out)
}

/// Like [`decrypt`], writing the plaintext into `out`, which afterwards holds exactly
/// the plaintext (empty on error).
///
/// Meant for buffers of secrets (a `Zeroizing<Vec<u8>>` deref-mutably): the buffer is
/// reused when its capacity suffices; when it must grow, the old allocation is wiped
/// before it is freed, so no stale plaintext is left in released memory.
///
/// # Errors
///
/// As [`decrypt`]; `out` is wiped and left empty.
pub fn decrypt_into(
    key: &Key,
    mode: Mode,
    iv: &[u8; 16],
    ciphertext: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), CryptoError> {
    if let Err(e) = refuse_aead(mode) {
        out.zeroize();
        return Err(e);
    }
    prepare(out, ciphertext.len());
    if mode == Mode::Ctr {
        let result = ctr_into(key, iv, ciphertext, out);
        if result.is_err() {
            out.zeroize();
        }
        return result;
    }
    out.copy_from_slice(ciphertext);
    decrypt_in_place(key, mode, iv, out)
}

/// Encrypts `buf` in place in `mode`, without padding: for ECB and CBC `buf` must be a
/// whole number of blocks (the caller pads the last piece of a message;
/// [`super::FieldEncryptor`] does).
///
/// # Errors
///
/// [`CryptoError::CiphertextLength`] for ECB/CBC input that is not whole blocks.
pub fn encrypt_in_place(
    key: &Key,
    mode: Mode,
    iv: &[u8; 16],
    buf: &mut [u8],
) -> Result<(), CryptoError> {
    refuse_aead(mode)?;
    if mode.padding() == Padding::Pkcs7 && !buf.len().is_multiple_of(BLOCK_LEN) {
        return Err(CryptoError::CiphertextLength {
            mode,
            len: buf.len(),
        });
    }
    let k = key.as_bytes();
    let result = match key.algorithm() {
        Algorithm::Sm4 => encrypt_in_place_with::<Sm4Simd>(k, mode, iv, buf),
        Algorithm::Aes128 => encrypt_in_place_with::<Aes128>(k, mode, iv, buf),
        Algorithm::Aes192 => encrypt_in_place_with::<Aes192>(k, mode, iv, buf),
        Algorithm::Aes256 => encrypt_in_place_with::<Aes256>(k, mode, iv, buf),
    };
    result.map_err(|InvalidLength| key_length_error(key))
}

/// Decrypts `buf` in place (removing and checking the PKCS#7 padding for ECB and CBC):
/// for a reader that has copied the ciphertext out of a file, authenticated that copy,
/// and must decrypt exactly the bytes it authenticated.
///
/// # Errors
///
/// As [`decrypt`]; `buf` is wiped and left empty.
pub fn decrypt_in_place(
    key: &Key,
    mode: Mode,
    iv: &[u8; 16],
    buf: &mut Vec<u8>,
) -> Result<(), CryptoError> {
    if let Err(e) = refuse_aead(mode) {
        buf.zeroize();
        return Err(e);
    }
    if mode.padding() == Padding::Pkcs7 && (buf.is_empty() || !buf.len().is_multiple_of(BLOCK_LEN))
    {
        let len = buf.len();
        buf.zeroize();
        return Err(CryptoError::CiphertextLength { mode, len });
    }
    let k = key.as_bytes();
    let result = match key.algorithm() {
        Algorithm::Sm4 => decrypt_in_place_with::<Sm4Simd>(k, mode, iv, buf),
        Algorithm::Aes128 => decrypt_in_place_with::<Aes128>(k, mode, iv, buf),
        Algorithm::Aes192 => decrypt_in_place_with::<Aes192>(k, mode, iv, buf),
        Algorithm::Aes256 => decrypt_in_place_with::<Aes256>(k, mode, iv, buf),
    };
    let result = match result {
        Ok(()) if mode.padding() == Padding::Pkcs7 => match pkcs7_len(buf) {
            Some(len) => {
                buf.truncate(len);
                Ok(())
            }
            None => Err(CryptoError::Padding { mode }),
        },
        Ok(()) => Ok(()),
        Err(InvalidLength) => Err(key_length_error(key)),
    };
    if result.is_err() {
        buf.zeroize();
    }
    result
}

/// GCM has a tag, which these functions have nowhere to put: it goes through
/// `crypto::gcm`. Every public function here calls this first, so the generic functions
/// below never see GCM.
fn refuse_aead(mode: Mode) -> Result<(), CryptoError> {
    match mode {
        Mode::Gcm => Err(CryptoError::NeedsTag { mode }),
        _ => Ok(()),
    }
}

/// Makes `out` exactly `len` bytes long, wiping the old allocation if it must move.
fn prepare(out: &mut Vec<u8>, len: usize) {
    if out.capacity() < len {
        let mut old = std::mem::replace(out, Vec::with_capacity(len));
        old.zeroize();
    }
    out.truncate(len);
    out.resize(len, 0);
}

/// Unreachable in practice (a [`Key`] is length-checked), but reported, not panicked.
fn key_length_error(key: &Key) -> CryptoError {
    let algorithm = key.algorithm();
    CryptoError::KeyLength {
        algorithm,
        expected: algorithm.key_len(),
        actual: key.as_bytes().len(),
    }
}

/// A 128-bit block cipher usable in every mode, in both directions.
trait Cipher128:
    KeyInit + BlockCipherEncrypt + BlockCipherDecrypt + BlockSizeUser<BlockSize = U16>
{
}

impl<C> Cipher128 for C where
    C: KeyInit + BlockCipherEncrypt + BlockCipherDecrypt + BlockSizeUser<BlockSize = U16>
{
}

/// `buf` is whole blocks for ECB/CBC (checked by the caller).
fn encrypt_in_place_with<C: Cipher128>(
    key: &[u8],
    mode: Mode,
    iv: &[u8; 16],
    buf: &mut [u8],
) -> Result<(), InvalidLength> {
    match mode {
        Mode::Ecb => {
            let (blocks, _) = InOutBuf::from(buf).into_chunks::<U16>();
            ecb::Encryptor::<C>::new_from_slice(key)?.encrypt_blocks_inout(blocks);
        }
        Mode::Cbc => {
            let (blocks, _) = InOutBuf::from(buf).into_chunks::<U16>();
            cbc::Encryptor::<C>::new_from_slices(key, iv)?.encrypt_blocks_inout(blocks);
        }
        Mode::Cfb => {
            cfb_mode::Encryptor::<C>::new_from_slices(key, iv)?.encrypt_inout(InOutBuf::from(buf));
        }
        Mode::Ofb => ofb::Ofb::<C>::new_from_slices(key, iv)?
            .unchecked_apply_keystream_inout(InOutBuf::from(buf)),
        Mode::Ctr => ctr128_apply_in_place(&C::new_from_slice(key)?, iv, buf),
        Mode::Gcm => {} // refused by `refuse_aead`
    }
    Ok(())
}

/// `buf` is whole blocks for ECB/CBC (checked by the caller); the padding stays in it.
fn decrypt_in_place_with<C: Cipher128>(
    key: &[u8],
    mode: Mode,
    iv: &[u8; 16],
    buf: &mut [u8],
) -> Result<(), InvalidLength> {
    match mode {
        Mode::Ecb => {
            let (blocks, _) = InOutBuf::from(buf).into_chunks::<U16>();
            ecb::Decryptor::<C>::new_from_slice(key)?.decrypt_blocks_inout(blocks);
        }
        Mode::Cbc => {
            let (blocks, _) = InOutBuf::from(buf).into_chunks::<U16>();
            cbc::Decryptor::<C>::new_from_slices(key, iv)?.decrypt_blocks_inout(blocks);
        }
        Mode::Cfb => {
            cfb_mode::Decryptor::<C>::new_from_slices(key, iv)?.decrypt_inout(InOutBuf::from(buf));
        }
        Mode::Ofb => ofb::Ofb::<C>::new_from_slices(key, iv)?
            .unchecked_apply_keystream_inout(InOutBuf::from(buf)),
        Mode::Ctr => ctr128_apply_in_place(&C::new_from_slice(key)?, iv, buf),
        Mode::Gcm => {} // refused by `refuse_aead`
    }
    Ok(())
}

/// CTR from `input` into `out` (of the same length).
fn ctr_into(key: &Key, iv: &[u8; 16], input: &[u8], out: &mut [u8]) -> Result<(), CryptoError> {
    fn with<C: Cipher128>(
        key: &[u8],
        iv: &[u8; 16],
        input: &[u8],
        out: &mut [u8],
    ) -> Result<(), InvalidLength> {
        ctr128_apply(&C::new_from_slice(key)?, iv, input, out);
        Ok(())
    }
    let k = key.as_bytes();
    let result = match key.algorithm() {
        Algorithm::Sm4 => with::<Sm4Simd>(k, iv, input, out),
        Algorithm::Aes128 => with::<Aes128>(k, iv, input, out),
        Algorithm::Aes192 => with::<Aes192>(k, iv, input, out),
        Algorithm::Aes256 => with::<Aes256>(k, iv, input, out),
    };
    result.map_err(|InvalidLength| key_length_error(key))
}

/// Length of the message inside a PKCS#7-padded buffer, or `None` if the padding is
/// malformed. Examines the whole last block without data-dependent branches, so the
/// time taken does not reveal where the padding went wrong.
pub(super) fn pkcs7_len(buf: &[u8]) -> Option<usize> {
    let last_block = buf
        .len()
        .checked_sub(BLOCK_LEN)
        .map(|start| &buf[start..])?;
    let n = last_block[BLOCK_LEN - 1];
    // bad != 0 iff n == 0 or n > 16.
    let mut bad = u8::from(n == 0) | u8::from(n > BLOCK_LEN_U8);
    for (i, &b) in (0u8..).zip(last_block) {
        // Byte i is padding iff its distance from the end (16 - i) is at most n.
        let in_pad = u8::from(BLOCK_LEN_U8 - i <= n);
        bad |= in_pad & u8::from(b != n);
    }
    (bad == 0).then(|| buf.len() - usize::from(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkcs7_len_accepts_only_well_formed_padding() {
        let mut block = [0xaa_u8; 32];
        block[31] = 1;
        assert_eq!(pkcs7_len(&block), Some(31));
        block[16..].fill(16);
        assert_eq!(pkcs7_len(&block), Some(16));
        block[29..].fill(3);
        block[28] = 0x55;
        assert_eq!(pkcs7_len(&block), Some(29));
        block[30] = 2;
        assert_eq!(pkcs7_len(&block), None, "inconsistent padding bytes");
        block[31] = 0;
        assert_eq!(pkcs7_len(&block), None, "zero padding length");
        block[31] = 17;
        assert_eq!(pkcs7_len(&block), None, "padding longer than a block");
        assert_eq!(pkcs7_len(&[1; 15]), None, "shorter than a block");
        assert_eq!(pkcs7_len(&[]), None);
    }

    #[test]
    fn ciphertext_len_pads_to_next_block() {
        assert_eq!(ciphertext_len(Mode::Cbc, 0), 16);
        assert_eq!(ciphertext_len(Mode::Ecb, 15), 16);
        assert_eq!(ciphertext_len(Mode::Ecb, 16), 32);
        assert_eq!(ciphertext_len(Mode::Cbc, 17), 32);
        assert_eq!(ciphertext_len(Mode::Ctr, 17), 17);
        assert_eq!(ciphertext_len(Mode::Cfb, 0), 0);
        assert_eq!(ciphertext_len(Mode::Ofb, 1000), 1000);
        assert_eq!(ciphertext_len(Mode::Cbc, usize::MAX), usize::MAX);
    }

    #[test]
    fn prepare_reuses_or_replaces() {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&[7; 40]);
        let ptr = buf.as_ptr();
        prepare(&mut buf, 20);
        assert_eq!(buf, [7; 20]);
        assert_eq!(buf.as_ptr(), ptr, "reused the allocation");
        prepare(&mut buf, 30);
        assert_eq!(&buf[20..], [0; 10]);
        prepare(&mut buf, 1000);
        assert_eq!(buf.len(), 1000);
    }
}
