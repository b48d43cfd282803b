use cipher::{
    Array, Block, BlockCipherDecrypt, BlockCipherEncrypt, BlockModeDecrypt, BlockModeEncrypt,
    BlockSizeUser, InnerIvInit, StreamCipher, StreamCipherCoreWrapper, common::InnerInit,
};
use sm4::Sm4;

use super::*;
use crate::crypto::Mode;

/// xorshift64*: deterministic test data, not for keys.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        self.fill(&mut out);
        out
    }

    fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let n = chunk.len();
            chunk.copy_from_slice(&self.next().to_le_bytes()[..n]);
        }
    }
}

/// Every path this CPU runs, each built directly.
fn supported_paths() -> Vec<Path> {
    let paths: Vec<Path> = Path::all()
        .into_iter()
        .filter(|p| p.is_supported())
        .collect();
    assert!(paths.contains(&Path::Portable));
    paths
}

fn cipher(key: &[u8; 16], path: Path) -> Sm4Simd {
    let cipher = Sm4Simd::with_path(key, path).expect("supported path");
    assert_eq!(cipher.path(), path);
    cipher
}

/// `data` through `mode` with `cipher` (ECB/CBC: whole blocks only, no padding).
fn run<C>(cipher: C, mode: Mode, decrypt: bool, iv: &[u8; 16], data: &[u8]) -> Vec<u8>
where
    C: BlockCipherEncrypt + BlockCipherDecrypt + BlockSizeUser<BlockSize = cipher::consts::U16>,
{
    let mut buf = data.to_vec();
    let iv: Array<u8, cipher::consts::U16> = (*iv).into();
    match (mode, decrypt) {
        (Mode::Ecb | Mode::Cbc, _) => {
            let (blocks, tail) = Array::slice_as_chunks_mut(&mut buf);
            assert!(tail.is_empty(), "ECB/CBC take whole blocks");
            let blocks: &mut [Block<C>] = blocks;
            match (mode, decrypt) {
                (Mode::Ecb, false) => ecb::Encryptor::inner_init(cipher).encrypt_blocks(blocks),
                (Mode::Ecb, true) => ecb::Decryptor::inner_init(cipher).decrypt_blocks(blocks),
                (_, false) => cbc::Encryptor::inner_iv_init(cipher, &iv).encrypt_blocks(blocks),
                (_, true) => cbc::Decryptor::inner_iv_init(cipher, &iv).decrypt_blocks(blocks),
            }
        }
        (Mode::Cfb, false) => cfb_mode::Encryptor::inner_iv_init(cipher, &iv).encrypt(&mut buf),
        (Mode::Cfb, true) => cfb_mode::Decryptor::inner_iv_init(cipher, &iv).decrypt(&mut buf),
        (Mode::Ofb, _) => {
            StreamCipherCoreWrapper::from_core(ofb::OfbCore::inner_iv_init(cipher, &iv))
                .apply_keystream(&mut buf)
        }
        (Mode::Ctr, _) => {
            StreamCipherCoreWrapper::from_core(
                ctr::CtrCore::<C, ctr::flavors::Ctr128BE>::inner_iv_init(cipher, &iv),
            )
            .apply_keystream(&mut buf);
        }
        // GCM is tested in `crypto::gcm` (through the CTR and block paths tested here).
        (Mode::Gcm, _) => {}
    }
    buf
}

const LENGTHS: [usize; 12] = [
    0,
    1,
    15,
    16,
    17,
    255,
    256,
    257,
    4096 + 5,
    16 * 33,
    16 * 47,
    16 * 64,
];

#[test]
fn standard_vector_on_every_path() {
    // GB/T 32907-2016, appendix A.1.
    let key: [u8; 16] = hex::decode("0123456789abcdeffedcba9876543210")
        .expect("hex")
        .try_into()
        .expect("16 bytes");
    let ciphertext = hex::decode("681edf34d206965e86b3e94f536e4246").expect("hex");
    for path in supported_paths() {
        let sm4 = cipher(&key, path);
        let mut block = Block::<Sm4Simd>::from(key);
        sm4.encrypt_block(&mut block);
        assert_eq!(block.as_slice(), ciphertext, "{path:?} encrypt_block");
        sm4.decrypt_block(&mut block);
        assert_eq!(block.as_slice(), key, "{path:?} decrypt_block");
        // The same block in every lane of a full parallel batch and a tail.
        for blocks in [64, 37] {
            let mut buf = vec![Block::<Sm4Simd>::from(key); blocks];
            sm4.encrypt_blocks(&mut buf);
            assert!(
                buf.iter().all(|b| b.as_slice() == ciphertext),
                "{path:?} x{blocks}"
            );
            sm4.decrypt_blocks(&mut buf);
            assert!(
                buf.iter().all(|b| b.as_slice() == key),
                "{path:?} x{blocks}"
            );
        }
    }
}

#[test]
fn standard_vector_iterated_a_million_times() {
    // GB/T 32907-2016, appendix A.2: the plaintext encrypted 1,000,000 times.
    let key: [u8; 16] = hex::decode("0123456789abcdeffedcba9876543210")
        .expect("hex")
        .try_into()
        .expect("16 bytes");
    let sm4 = Sm4Simd::new(&key.into());
    let mut block = Block::<Sm4Simd>::from(key);
    for _ in 0..1_000_000 {
        sm4.encrypt_block(&mut block);
    }
    assert_eq!(hex::encode(block), "595298c7c6fd271f0402f804c33d3f66");
}

/// The derived constant-time S-box drives a scalar SM4 that agrees with the `sm4` crate
/// on encryptions which, together, feed every one of the 256 inputs to the S-box: an
/// entry that differed from the standard's table would change some ciphertext.
#[test]
fn derived_sbox_equals_sm4_on_all_256_inputs() {
    let mut rng = Rng(0x5EED_0001);
    let mut seen = [false; 256];
    let tau = |w: u32, seen: &mut [bool; 256]| {
        for b in w.to_be_bytes() {
            seen[usize::from(b)] = true;
        }
        gf::tau(w)
    };
    let l =
        |b: u32| b ^ b.rotate_left(2) ^ b.rotate_left(10) ^ b.rotate_left(18) ^ b.rotate_left(24);
    for _ in 0..64 {
        let key: [u8; 16] = rng.bytes();
        let plaintext: [u8; 16] = rng.bytes();
        let rk = expand_key(&key, gf::tau);
        let word = |i: usize| {
            u32::from_be_bytes([
                plaintext[i],
                plaintext[i + 1],
                plaintext[i + 2],
                plaintext[i + 3],
            ])
        };
        let mut x = [word(0), word(4), word(8), word(12)];
        for (i, k) in rk.iter().enumerate() {
            let t = tau(
                x[(i + 1) % 4] ^ x[(i + 2) % 4] ^ x[(i + 3) % 4] ^ k,
                &mut seen,
            );
            x[i % 4] ^= l(t);
        }
        let mut ours = [0u8; 16];
        for (chunk, w) in ours.chunks_exact_mut(4).zip([x[3], x[2], x[1], x[0]]) {
            chunk.copy_from_slice(&w.to_be_bytes());
        }
        let mut reference = Block::<Sm4>::from(plaintext);
        Sm4::new(&key.into()).encrypt_block(&mut reference);
        assert_eq!(ours, reference.as_slice());
    }
    assert!(seen.iter().all(|&s| s), "every S-box input was exercised");
}

#[test]
#[cfg(target_arch = "x86_64")]
fn every_simd_sbox_equals_the_derived_one() {
    let inputs: Vec<u8> = (0..=255).collect();
    for path in x86::Path::ALL {
        for chunk in inputs.chunks_exact(64) {
            let bytes: [u8; 64] = chunk.try_into().expect("64 bytes");
            let Some((vector, single)) = x86::sbox_for_test(path, &bytes) else {
                continue;
            };
            let expected = bytes.map(gf::sbox);
            assert_eq!(vector, expected, "{path:?} vector S-box");
            assert_eq!(single, expected, "{path:?} one-block S-box");
        }
    }
}

#[test]
fn every_path_equals_sm4_crate_in_every_mode() {
    let mut rng = Rng(0x5EED_0002);
    for path in supported_paths() {
        for mode in Mode::ALL {
            for decrypt in [false, true] {
                for len in LENGTHS {
                    let len = match mode {
                        Mode::Ecb | Mode::Cbc => len - len % 16,
                        _ => len,
                    };
                    let key: [u8; 16] = rng.bytes();
                    let iv: [u8; 16] = rng.bytes();
                    let mut data = vec![0u8; len];
                    rng.fill(&mut data);
                    let ours = run(cipher(&key, path), mode, decrypt, &iv, &data);
                    let reference = run(Sm4::new(&key.into()), mode, decrypt, &iv, &data);
                    assert_eq!(
                        ours, reference,
                        "{path:?} {mode} decrypt={decrypt} len={len}"
                    );
                }
            }
        }
    }
}

#[test]
fn ctr_counter_wraps_like_the_reference() {
    let mut rng = Rng(0x5EED_0003);
    let mut data = vec![0u8; 4096 + 5];
    rng.fill(&mut data);
    for path in supported_paths() {
        for iv_hex in [
            "ffffffffffffffffffffffffffffffff",
            "fffffffffffffffffffffffffffffff0",
            "0123456789abcdefffffffffffffffe0",
            "00000000ffffffffffffffffffffffff",
        ] {
            let iv: [u8; 16] = hex::decode(iv_hex).expect("hex").try_into().expect("16");
            let key: [u8; 16] = rng.bytes();
            let ours = run(cipher(&key, path), Mode::Ctr, false, &iv, &data);
            let reference = run(Sm4::new(&key.into()), Mode::Ctr, false, &iv, &data);
            assert_eq!(ours, reference, "{path:?} iv={iv_hex}");
        }
    }
}

#[test]
fn round_keys_are_wiped_on_drop() {
    fn assert_zeroize_on_drop<T: ZeroizeOnDrop>() {}
    assert_zeroize_on_drop::<Sm4Simd>();
}

#[test]
fn detection_picks_a_supported_path() {
    let path = Path::detect();
    assert!(path.is_supported());
    let sm4 = Sm4Simd::new(&[7u8; 16].into());
    assert_eq!(sm4.path(), path);
}
