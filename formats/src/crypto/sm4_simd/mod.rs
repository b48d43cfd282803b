//! SM4 (GB/T 32907) with SIMD kernels chosen at run time, behind the `cipher` 0.5 traits.
//!
//! No crate offers a SIMD SM4, and the `sm4` crate's table-based rounds manage about
//! 90 MB/s. [`Sm4Simd`] picks, once per key, the best of (see `x86.rs`):
//!
//! - GFNI + AVX-512: 32 blocks per call, S-box = `gf2p8affineqb` + `gf2p8affineinvqb`;
//! - GFNI + AVX2, VAES + AVX2, AES-NI + AVX2: 16 blocks per call, S-box by GFNI or by
//!   `aesenclast` between two `pshufb` nibble-table affine maps;
//! - anything else (no AVX2, or not x86-64): the `sm4` crate.
//!
//! The parallel modes (ECB, CTR, CBC and CFB decryption) get many blocks per call through
//! the backend's `ParBlocksSize`; the serial ones (CBC and CFB encryption, OFB) run one
//! block at a time with scalar rounds and the same vector S-box. No path reads memory
//! indexed by secret data, including the key schedule (run with the path's own S-box); the portable fallback is the `sm4` crate's table.
//!
//! Round keys are wiped on drop.

#[cfg(any(test, target_arch = "x86_64"))]
mod gf;
#[cfg(target_arch = "x86_64")]
mod x86;

use core::fmt;

use cipher::{
    AlgorithmName, BlockCipherDecClosure, BlockCipherDecrypt, BlockCipherEncClosure,
    BlockCipherEncrypt, BlockSizeUser, Key, KeyInit, KeySizeUser, consts::U16,
};
#[cfg(any(test, target_arch = "x86_64"))]
use zeroize::Zeroize;
use zeroize::ZeroizeOnDrop;

/// The system parameter `FK` of GB/T 32907 (section 7.3).
#[cfg(any(test, target_arch = "x86_64"))]
const FK: [u32; 4] = [0xA3B1_BAC6, 0x56AA_3350, 0x677D_9197, 0xB270_22DC];

/// The fixed parameters `CK_i` of GB/T 32907: byte `j` of `CK_i` is `(4i + j) * 7 mod 256`.
#[cfg(any(test, target_arch = "x86_64"))]
const CK: [u32; 32] = {
    let mut ck = [0u32; 32];
    let mut i = 0;
    while i < 32 {
        let mut j = 0;
        while j < 4 {
            ck[i] = (ck[i] << 8) | (((4 * i + j) * 7) % 256) as u32;
            j += 1;
        }
        i += 1;
    }
    ck
};

/// The 32 round keys of `key`, in encryption order, with `tau` applying the S-box to
/// each byte of a word (SM4's `tau`, in constant time).
#[cfg(any(test, target_arch = "x86_64"))]
fn expand_key(key: &[u8; 16], tau: impl Fn(u32) -> u32) -> [u32; 32] {
    let mut k = [0u32; 4];
    for (i, (word, chunk)) in k.iter_mut().zip(key.chunks_exact(4)).enumerate() {
        *word = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]) ^ FK[i];
    }
    let mut rk = [0u32; 32];
    for (i, out) in rk.iter_mut().enumerate() {
        let b = tau(k[(i + 1) % 4] ^ k[(i + 2) % 4] ^ k[(i + 3) % 4] ^ CK[i]);
        k[i % 4] ^= b ^ b.rotate_left(13) ^ b.rotate_left(23);
        *out = k[i % 4];
    }
    k.zeroize();
    rk
}

/// The implementation an [`Sm4Simd`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    #[cfg(target_arch = "x86_64")]
    X86(x86::Path),
    /// The `sm4` crate.
    Portable,
}

impl Path {
    /// Every path, best first; not all run on every CPU.
    #[cfg(test)]
    pub(crate) fn all() -> Vec<Path> {
        #[cfg(target_arch = "x86_64")]
        let mut all: Vec<Path> = x86::Path::ALL.into_iter().map(Path::X86).collect();
        #[cfg(not(target_arch = "x86_64"))]
        let mut all = Vec::new();
        all.push(Path::Portable);
        all
    }

    /// The best path this CPU runs.
    pub(crate) fn detect() -> Path {
        #[cfg(target_arch = "x86_64")]
        if let Some(path) = x86::Path::detect() {
            return Path::X86(path);
        }
        Path::Portable
    }

    pub(crate) fn is_supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Path::X86(path) => path.is_supported(),
            Path::Portable => true,
        }
    }
}

enum Inner {
    #[cfg(target_arch = "x86_64")]
    X86 {
        /// Checked with `is_supported` before it is stored here.
        path: x86::Path,
        /// Round keys in encryption order.
        enc: [u32; 32],
        /// The same, reversed, for decryption.
        dec: [u32; 32],
    },
    Portable(sm4::Sm4),
}

/// The SM4 block cipher, vectorised where the CPU allows (see the module docs).
pub(crate) struct Sm4Simd {
    inner: Inner,
}

impl Sm4Simd {
    /// `key` on `path`, or `None` if this CPU cannot run `path`.
    pub(crate) fn with_path(key: &[u8; 16], path: Path) -> Option<Self> {
        if !path.is_supported() {
            return None;
        }
        let inner = match path {
            #[cfg(target_arch = "x86_64")]
            Path::X86(path) => {
                // SAFETY: `path` passed `is_supported` above.
                let enc = expand_key(key, |w| unsafe { x86::tau(path, w) });
                let mut dec = enc;
                dec.reverse();
                Inner::X86 { path, enc, dec }
            }
            Path::Portable => Inner::Portable(sm4::Sm4::new(&(*key).into())),
        };
        Some(Self { inner })
    }

    /// The path this instance runs.
    #[cfg(test)]
    pub(crate) fn path(&self) -> Path {
        match &self.inner {
            #[cfg(target_arch = "x86_64")]
            Inner::X86 { path, .. } => Path::X86(*path),
            Inner::Portable(_) => Path::Portable,
        }
    }
}

impl KeySizeUser for Sm4Simd {
    type KeySize = U16;
}

impl KeyInit for Sm4Simd {
    fn new(key: &Key<Self>) -> Self {
        let key: [u8; 16] = (*key).into();
        let path = Path::detect();
        match Self::with_path(&key, path) {
            Some(cipher) => cipher,
            // `detect` returns only supported paths, so this is unreachable; the
            // fallback keeps it panic-free anyway.
            None => Self {
                inner: Inner::Portable(sm4::Sm4::new(&key.into())),
            },
        }
    }
}

impl BlockSizeUser for Sm4Simd {
    type BlockSize = U16;
}

impl BlockCipherEncrypt for Sm4Simd {
    fn encrypt_with_backend(&self, f: impl BlockCipherEncClosure<BlockSize = U16>) {
        match &self.inner {
            #[cfg(target_arch = "x86_64")]
            Inner::X86 { path, enc, .. } => x86::encrypt_with(*path, enc, f),
            Inner::Portable(cipher) => cipher.encrypt_with_backend(f),
        }
    }
}

impl BlockCipherDecrypt for Sm4Simd {
    fn decrypt_with_backend(&self, f: impl BlockCipherDecClosure<BlockSize = U16>) {
        match &self.inner {
            #[cfg(target_arch = "x86_64")]
            Inner::X86 { path, dec, .. } => x86::decrypt_with(*path, dec, f),
            Inner::Portable(cipher) => cipher.decrypt_with_backend(f),
        }
    }
}

impl AlgorithmName for Sm4Simd {
    fn write_alg_name(f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sm4")
    }
}

impl fmt::Debug for Sm4Simd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sm4Simd { .. }")
    }
}

impl Drop for Sm4Simd {
    fn drop(&mut self) {
        match &mut self.inner {
            #[cfg(target_arch = "x86_64")]
            Inner::X86 { enc, dec, .. } => {
                enc.zeroize();
                dec.zeroize();
            }
            // Wipes its own round keys on drop (the `sm4` crate's `zeroize` feature).
            Inner::Portable(_) => {}
        }
    }
}

impl ZeroizeOnDrop for Sm4Simd {}

#[cfg(test)]
mod tests;
