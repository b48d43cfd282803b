//! CTR mode with a 128-bit big-endian counter over the whole IV, wrapping (OpenSSL's
//! `-ctr`, the `ctr` crate's `Ctr128BE`).
//!
//! The `ctr` crate builds the counter blocks of each `ParBlocksSize` batch on the stack,
//! encrypts them there and XORs them into the output in a separate step per batch; with
//! AES (VAES, 64 blocks per batch) that overhead held AES-128-CTR to about half of
//! OpenSSL. Here each chunk of the output (a few KiB, so it stays in L1) is filled with
//! counter blocks, encrypted in place with the cipher's multi-block call, then XORed with
//! the input in wide words: one pass over the input and one over the output.

use cipher::{Array, Block, BlockCipherEncrypt, BlockSizeUser, consts::U16};
use zeroize::Zeroize;

/// Blocks per chunk: 4 KiB.
const CHUNK_BLOCKS: usize = 256;

/// `out = input ^ keystream`, the keystream being `E(iv), E(iv + 1), ...` with the IV
/// read as a big-endian 128-bit number that wraps at 2^128. `out` and `input` must have
/// the same length; only `min` of the two is processed otherwise.
pub(super) fn ctr128_apply<C>(cipher: &C, iv: &[u8; 16], input: &[u8], out: &mut [u8])
where
    C: BlockCipherEncrypt + BlockSizeUser<BlockSize = U16>,
{
    let len = input.len().min(out.len());
    let (input, out) = (&input[..len], &mut out[..len]);
    let mut counter = u128::from_be_bytes(*iv);
    for (inp, outp) in input
        .chunks(CHUNK_BLOCKS * 16)
        .zip(out.chunks_mut(CHUNK_BLOCKS * 16))
    {
        let whole = outp.len() - outp.len() % 16;
        let (out_blocks, out_tail) = outp.split_at_mut(whole);
        let (blocks, _) = Array::<u8, U16>::slice_as_chunks_mut(out_blocks);
        let blocks: &mut [Block<C>] = blocks;
        for block in blocks.iter_mut() {
            *block = counter.to_be_bytes().into();
            counter = counter.wrapping_add(1);
        }
        cipher.encrypt_blocks(blocks);
        xor_into(out_blocks, &inp[..whole]);
        if !out_tail.is_empty() {
            // Only the last chunk has a partial block.
            let mut block: Block<C> = counter.to_be_bytes().into();
            cipher.encrypt_block(&mut block);
            out_tail.copy_from_slice(&block[..out_tail.len()]);
            xor_into(out_tail, &inp[whole..]);
            block.zeroize();
        }
    }
}

/// `dst ^= src`, eight bytes at a time (the compiler widens it to vectors).
/// [`ctr128_apply`] in place: `buf ^= keystream`, the keystream made a chunk at a time in
/// a buffer on the stack (wiped afterwards).
pub(super) fn ctr128_apply_in_place<C>(cipher: &C, iv: &[u8; 16], buf: &mut [u8])
where
    C: BlockCipherEncrypt + BlockSizeUser<BlockSize = U16>,
{
    let mut keystream = [0u8; CHUNK_BLOCKS * 16];
    let mut counter = u128::from_be_bytes(*iv);
    for chunk in buf.chunks_mut(CHUNK_BLOCKS * 16) {
        let used = chunk.len().next_multiple_of(16);
        let (blocks, _) = Array::<u8, U16>::slice_as_chunks_mut(&mut keystream[..used]);
        let blocks: &mut [Block<C>] = blocks;
        for block in blocks.iter_mut() {
            *block = counter.to_be_bytes().into();
            counter = counter.wrapping_add(1);
        }
        cipher.encrypt_blocks(blocks);
        xor_into(chunk, &keystream[..chunk.len()]);
    }
    keystream.zeroize();
}

fn xor_into(dst: &mut [u8], src: &[u8]) {
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (d, s) in (&mut d).zip(&mut s) {
        let x = u64::from_ne_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
            ^ u64::from_ne_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]);
        d.copy_from_slice(&x.to_ne_bytes());
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d ^= s;
    }
}

#[cfg(test)]
mod tests {
    use aes::{Aes128, Aes256};
    use cipher::{KeyInit, KeyIvInit, StreamCipher};
    use sm4::Sm4;

    use super::*;
    use crate::crypto::sm4_simd::Sm4Simd;

    fn reference<C>(key: &[u8], iv: &[u8; 16], data: &[u8]) -> Vec<u8>
    where
        C: BlockCipherEncrypt + BlockSizeUser<BlockSize = U16> + KeyInit,
    {
        let mut buf = data.to_vec();
        ctr::Ctr128BE::<C>::new_from_slices(key, iv)
            .expect("key length")
            .apply_keystream(&mut buf);
        buf
    }

    fn ours<C>(key: &[u8], iv: &[u8; 16], data: &[u8]) -> Vec<u8>
    where
        C: BlockCipherEncrypt + BlockSizeUser<BlockSize = U16> + KeyInit,
    {
        let mut out = vec![0xAA; data.len()];
        ctr128_apply(
            &C::new_from_slice(key).expect("key length"),
            iv,
            data,
            &mut out,
        );
        out
    }

    #[test]
    fn equals_ctr128be_on_lengths_and_wrapping_ivs() {
        let data: Vec<u8> = (0..3 * CHUNK_BLOCKS * 16 + 40)
            .map(|i| (i * 131 % 251) as u8)
            .collect();
        let ivs = [
            [0u8; 16],
            [0xFF; 16],
            {
                let mut iv = [0xFF; 16];
                iv[0] = 0x12;
                iv[15] = 0xF0;
                iv
            },
            *b"0123456789abcdef",
        ];
        let lengths = [
            0,
            1,
            15,
            16,
            17,
            255,
            256,
            257,
            4096 + 5,
            CHUNK_BLOCKS * 16,
            CHUNK_BLOCKS * 16 + 1,
            data.len(),
        ];
        for iv in &ivs {
            for &len in &lengths {
                let d = &data[..len];
                let k16 = [0x42u8; 16];
                let k32 = [0x24u8; 32];
                assert_eq!(
                    ours::<Aes128>(&k16, iv, d),
                    reference::<Aes128>(&k16, iv, d)
                );
                assert_eq!(
                    ours::<Aes256>(&k32, iv, d),
                    reference::<Aes256>(&k32, iv, d)
                );
                assert_eq!(ours::<Sm4Simd>(&k16, iv, d), reference::<Sm4>(&k16, iv, d));
            }
        }
    }
}
