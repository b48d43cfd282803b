//! SM4 kernels for x86-64, each chosen only after `is_x86_feature_detected!` said yes.
//!
//! Layout: blocks are loaded four words each, byte-swapped to native `u32`s and
//! transposed 4x4 within each 128-bit lane, so register `j` holds word `j` of every block
//! in the pass (16 blocks per zmm set, 8 per ymm set). A round is then the scalar round
//! applied lane-wise: `x0 ^= L(S(x1 ^ x2 ^ x3 ^ rk))`. Two independent sets are
//! interleaved per call so one set's S-box latency hides behind the other's work.
//!
//! The S-box never reads memory indexed by data: GFNI evaluates it as an affine map,
//! AES-field inversion and another affine map (`gf2p8affineqb`, `gf2p8affineinvqb`);
//! without GFNI, `aesenclast` with a zero round key does the inversion and `pshufb`
//! looks the affine maps up nibble by nibble in 16-byte constant tables held in
//! registers (the lookup is a register shuffle, constant-time). See `gf.rs`.

use core::arch::x86_64::*;

use cipher::{
    Block, BlockCipherDecBackend, BlockCipherDecClosure, BlockCipherEncBackend,
    BlockCipherEncClosure, BlockSizeUser, InOut, InOutBuf, ParBlocks, ParBlocksSizeUser,
    consts::{U16, U32},
};
use zeroize::Zeroize;

use super::gf;

/// A SIMD implementation, in order of preference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// GFNI + AVX-512 (F, BW): 32 blocks per call in zmm registers.
    Avx512Gfni,
    /// GFNI + AVX2: 16 blocks per call in ymm registers.
    Avx2Gfni,
    /// VAES + AVX2: `vaesenclast` on ymm, affine maps by `vpshufb`.
    Avx2Vaes,
    /// AES-NI + AVX2: `aesenclast` on each 128-bit half.
    Avx2AesNi,
}

impl Path {
    pub(crate) const ALL: [Path; 4] = [
        Path::Avx512Gfni,
        Path::Avx2Gfni,
        Path::Avx2Vaes,
        Path::Avx2AesNi,
    ];

    /// The best path this CPU supports, if any.
    pub(crate) fn detect() -> Option<Path> {
        Path::ALL.into_iter().find(|path| path.is_supported())
    }

    /// Whether this CPU has every feature the path's kernels are compiled with. A
    /// backend (and so a call into a kernel) exists only for paths that pass this.
    pub(crate) fn is_supported(self) -> bool {
        let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("avx");
        match self {
            Path::Avx512Gfni => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("gfni")
            }
            Path::Avx2Gfni => avx2 && is_x86_feature_detected!("gfni"),
            Path::Avx2Vaes => {
                avx2 && is_x86_feature_detected!("vaes")
                    && is_x86_feature_detected!("aes")
                    && is_x86_feature_detected!("ssse3")
            }
            Path::Avx2AesNi => {
                avx2 && is_x86_feature_detected!("aes") && is_x86_feature_detected!("ssse3")
            }
        }
    }
}

/// Runs `f` with `path`'s backend over round keys `rk` (encryption order).
pub(super) fn encrypt_with(
    path: Path,
    rk: &[u32; 32],
    f: impl BlockCipherEncClosure<BlockSize = U16>,
) {
    match path {
        Path::Avx512Gfni => f.call(&Avx512Gfni { rk }),
        Path::Avx2Gfni => f.call(&Avx2Gfni { rk }),
        Path::Avx2Vaes => f.call(&Avx2Vaes { rk }),
        Path::Avx2AesNi => f.call(&Avx2AesNi { rk }),
    }
}

/// Runs `f` with `path`'s backend over round keys `rk` (decryption order: reversed).
pub(super) fn decrypt_with(
    path: Path,
    rk: &[u32; 32],
    f: impl BlockCipherDecClosure<BlockSize = U16>,
) {
    match path {
        Path::Avx512Gfni => f.call(&Avx512Gfni { rk }),
        Path::Avx2Gfni => f.call(&Avx2Gfni { rk }),
        Path::Avx2Vaes => f.call(&Avx2Vaes { rk }),
        Path::Avx2AesNi => f.call(&Avx2AesNi { rk }),
    }
}

// ---------------------------------------------------------------------------------------
// Constants
// ---------------------------------------------------------------------------------------

/// 16 bytes as the two little-endian halves `_mm*_set*_epi64x` takes.
const fn halves(bytes: [u8; 16]) -> (i64, i64) {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    let mut i = 0;
    while i < 8 {
        lo[i] = bytes[i];
        hi[i] = bytes[i + 8];
        i += 1;
    }
    (i64::from_le_bytes(lo), i64::from_le_bytes(hi))
}

/// A `pshufb` pattern applying `within` to each little-endian 32-bit word: output byte
/// `k` of a word is input byte `within[k]` of the same word.
const fn per_word(within: [u8; 4]) -> (i64, i64) {
    let mut bytes = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        bytes[i] = (i as u8 & !3) + within[i % 4];
        i += 1;
    }
    halves(bytes)
}

/// Big-endian words to native ones and back.
const BSWAP32: (i64, i64) = per_word([3, 2, 1, 0]);
const ROL8: (i64, i64) = per_word([3, 0, 1, 2]);
const ROL16: (i64, i64) = per_word([2, 3, 0, 1]);
const ROL24: (i64, i64) = per_word([1, 2, 3, 0]);

/// Undoes the ShiftRows of `aesenclast`: AES's state byte `r + 4c` (row `r`, column
/// `c`) lands at `r + 4((c - r) mod 4)`, so the byte for position `r + 4c` is fetched
/// from there.
const INV_SHIFT_ROWS: (i64, i64) = {
    let mut bytes = [0u8; 16];
    let mut r = 0;
    while r < 4 {
        let mut c = 0;
        while c < 4 {
            bytes[r + 4 * c] = (r + 4 * ((c + 4 - r) % 4)) as u8;
            c += 1;
        }
        r += 1;
    }
    halves(bytes)
};

const PRE_MATRIX: i64 = gf::PRE.gfni_matrix() as i64;
const PRE_C: i32 = gf::PRE_C as i32;
const POST_MATRIX: i64 = gf::POST.gfni_matrix() as i64;
const POST_C: i32 = gf::POST_C as i32;

const PRE_TABLES: ([u8; 16], [u8; 16]) = gf::PRE.nibble_tables(gf::PRE_C);
const PRE_LO: (i64, i64) = halves(PRE_TABLES.0);
const PRE_HI: (i64, i64) = halves(PRE_TABLES.1);
const AESENC_POST_TABLES: ([u8; 16], [u8; 16]) = gf::AESENC_POST.nibble_tables(gf::AESENC_POST_C);
const POST_LO: (i64, i64) = halves(AESENC_POST_TABLES.0);
const POST_HI: (i64, i64) = halves(AESENC_POST_TABLES.1);

// ---------------------------------------------------------------------------------------
// One block at a time (CBC/CFB encryption, OFB): scalar rounds, vector S-box
// ---------------------------------------------------------------------------------------

/// `a ^ L(s)` on 32-bit lanes, SM4's linear transform
/// `L(s) = s ^ rol2(s) ^ rol10(s) ^ rol18(s) ^ rol24(s)`.
#[target_feature(enable = "sse2")]
#[inline]
fn xor_l128(a: __m128i, s: __m128i) -> __m128i {
    let r2 = _mm_or_si128(_mm_slli_epi32::<2>(s), _mm_srli_epi32::<30>(s));
    let r10 = _mm_or_si128(_mm_slli_epi32::<10>(s), _mm_srli_epi32::<22>(s));
    let r18 = _mm_or_si128(_mm_slli_epi32::<18>(s), _mm_srli_epi32::<14>(s));
    let r24 = _mm_or_si128(_mm_slli_epi32::<24>(s), _mm_srli_epi32::<8>(s));
    let t = _mm_xor_si128(_mm_xor_si128(a, s), _mm_xor_si128(r2, r10));
    _mm_xor_si128(t, _mm_xor_si128(r18, r24))
}

/// Defines a one-block function: each state word lives in lane 0 of its own register,
/// so the S-box (`$sbox`, on 128-bit registers) needs no moves to and from scalar ones.
macro_rules! one_block {
    ($(#[$doc:meta])* $name:ident, $features:literal, $sbox:ident) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        fn $name(rk: &[u32; 32], block: &[u8; 16]) -> [u8; 16] {
            let word = |i: usize| {
                let w = u32::from_be_bytes([block[i], block[i + 1], block[i + 2], block[i + 3]]);
                _mm_cvtsi32_si128(w as i32)
            };
            let (mut x0, mut x1, mut x2, mut x3) = (word(0), word(4), word(8), word(12));
            // A closure, so that it inherits this function's target features.
            let round = |a: __m128i, b: __m128i, c: __m128i, d: __m128i, k: u32| {
                let k = _mm_cvtsi32_si128(k as i32);
                let t = _mm_xor_si128(_mm_xor_si128(b, c), _mm_xor_si128(d, k));
                xor_l128(a, $sbox(t))
            };
            for k in rk.chunks_exact(4) {
                x0 = round(x0, x1, x2, x3, k[0]);
                x1 = round(x1, x2, x3, x0, k[1]);
                x2 = round(x2, x3, x0, x1, k[2]);
                x3 = round(x3, x0, x1, x2, k[3]);
            }
            let mut out = [0u8; 16];
            for (chunk, x) in out.chunks_exact_mut(4).zip([x3, x2, x1, x0]) {
                chunk.copy_from_slice(&(_mm_cvtsi128_si32(x) as u32).to_be_bytes());
            }
            out
        }
    };
}

#[target_feature(enable = "gfni")]
#[inline]
fn sbox128_gfni(x: __m128i) -> __m128i {
    let t = _mm_gf2p8affine_epi64_epi8::<PRE_C>(x, _mm_set1_epi64x(PRE_MATRIX));
    _mm_gf2p8affineinv_epi64_epi8::<POST_C>(t, _mm_set1_epi64x(POST_MATRIX))
}

#[target_feature(enable = "ssse3")]
#[inline]
fn affine128(x: __m128i, lo: (i64, i64), hi: (i64, i64)) -> __m128i {
    let mask = _mm_set1_epi8(0x0F);
    let low = _mm_and_si128(x, mask);
    let high = _mm_and_si128(_mm_srli_epi16::<4>(x), mask);
    _mm_xor_si128(
        _mm_shuffle_epi8(_mm_set_epi64x(lo.1, lo.0), low),
        _mm_shuffle_epi8(_mm_set_epi64x(hi.1, hi.0), high),
    )
}

#[target_feature(enable = "aes,ssse3")]
#[inline]
fn sbox128_aesni(x: __m128i) -> __m128i {
    let u = affine128(x, PRE_LO, PRE_HI);
    let v = _mm_aesenclast_si128(u, _mm_setzero_si128());
    let v = _mm_shuffle_epi8(v, _mm_set_epi64x(INV_SHIFT_ROWS.1, INV_SHIFT_ROWS.0));
    affine128(v, POST_LO, POST_HI)
}

/// SM4's `tau` (the S-box on each byte of a word) with GFNI.
#[target_feature(enable = "gfni")]
#[inline]
fn tau_gfni(w: u32) -> u32 {
    _mm_cvtsi128_si32(sbox128_gfni(_mm_cvtsi32_si128(w as i32))) as u32
}

/// SM4's `tau` with AES-NI.
#[target_feature(enable = "aes,ssse3")]
#[inline]
fn tau_aesni(w: u32) -> u32 {
    _mm_cvtsi128_si32(sbox128_aesni(_mm_cvtsi32_si128(w as i32))) as u32
}

/// SM4's `tau` with `path`'s one-block S-box (for the key schedule).
///
/// # Safety
///
/// `path` is supported on this CPU ([`Path::is_supported`]).
pub(super) unsafe fn tau(path: Path, w: u32) -> u32 {
    match path {
        // SAFETY: both GFNI paths require GFNI, which is all `tau_gfni` uses.
        Path::Avx512Gfni | Path::Avx2Gfni => unsafe { tau_gfni(w) },
        // SAFETY: both AES paths require AES-NI and SSSE3, all `tau_aesni` uses.
        Path::Avx2Vaes | Path::Avx2AesNi => unsafe { tau_aesni(w) },
    }
}

one_block!(
    /// One block with GFNI.
    crypt1_gfni,
    "gfni",
    sbox128_gfni
);
one_block!(
    /// One block with AES-NI.
    crypt1_aesni,
    "aes,ssse3",
    sbox128_aesni
);

// ---------------------------------------------------------------------------------------
// AVX-512 + GFNI: 2 x 16 blocks
// ---------------------------------------------------------------------------------------

#[target_feature(enable = "avx512f")]
#[inline]
fn bcast512(pattern: (i64, i64)) -> __m512i {
    _mm512_broadcast_i32x4(_mm_set_epi64x(pattern.1, pattern.0))
}

/// 4x4 transpose of 32-bit words within each 128-bit lane (its own inverse).
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose512([a, b, c, d]: [__m512i; 4]) -> [__m512i; 4] {
    let ab_lo = _mm512_unpacklo_epi32(a, b);
    let ab_hi = _mm512_unpackhi_epi32(a, b);
    let cd_lo = _mm512_unpacklo_epi32(c, d);
    let cd_hi = _mm512_unpackhi_epi32(c, d);
    [
        _mm512_unpacklo_epi64(ab_lo, cd_lo),
        _mm512_unpackhi_epi64(ab_lo, cd_lo),
        _mm512_unpacklo_epi64(ab_hi, cd_hi),
        _mm512_unpackhi_epi64(ab_hi, cd_hi),
    ]
}

#[target_feature(enable = "avx512f,gfni")]
#[inline]
fn sbox512(x: __m512i) -> __m512i {
    let t = _mm512_gf2p8affine_epi64_epi8::<PRE_C>(x, _mm512_set1_epi64(PRE_MATRIX));
    _mm512_gf2p8affineinv_epi64_epi8::<POST_C>(t, _mm512_set1_epi64(POST_MATRIX))
}

/// `a ^ L(S(b ^ c ^ d ^ k))`.
#[target_feature(enable = "avx512f,gfni")]
#[inline]
fn round512(a: __m512i, b: __m512i, c: __m512i, d: __m512i, k: __m512i) -> __m512i {
    const XOR3: i32 = 0x96;
    let t = _mm512_xor_si512(_mm512_ternarylogic_epi32::<XOR3>(b, c, d), k);
    let s = sbox512(t);
    let u = _mm512_ternarylogic_epi32::<XOR3>(a, s, _mm512_rol_epi32::<2>(s));
    let u =
        _mm512_ternarylogic_epi32::<XOR3>(u, _mm512_rol_epi32::<10>(s), _mm512_rol_epi32::<18>(s));
    _mm512_xor_si512(u, _mm512_rol_epi32::<24>(s))
}

/// Loads 16 blocks from `src` as transposed native words.
///
/// # Safety
///
/// The CPU supports AVX-512F and AVX-512BW; `src` must be valid for reading 256 bytes.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn load16_512(src: *const u8) -> [__m512i; 4] {
    let bswap = bcast512(BSWAP32);
    let mut r = [_mm512_setzero_si512(); 4];
    for (i, reg) in r.iter_mut().enumerate() {
        // SAFETY: i < 4, so the 64 bytes read lie within the caller's 256.
        let v = unsafe { _mm512_loadu_si512(src.add(64 * i).cast()) };
        *reg = _mm512_shuffle_epi8(v, bswap);
    }
    transpose512(r)
}

/// Stores the output words `x` (in SM4's reversed order) of 16 blocks to `dst`.
///
/// # Safety
///
/// The CPU supports AVX-512F and AVX-512BW; `dst` must be valid for writing 256 bytes.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn store16_512(dst: *mut u8, [x0, x1, x2, x3]: [__m512i; 4]) {
    let bswap = bcast512(BSWAP32);
    for (i, v) in transpose512([x3, x2, x1, x0]).into_iter().enumerate() {
        // SAFETY: i < 4, so the 64 bytes written lie within the caller's 256.
        unsafe { _mm512_storeu_si512(dst.add(64 * i).cast(), _mm512_shuffle_epi8(v, bswap)) };
    }
}

/// 32 blocks from `src` to `dst` with round keys `rk`.
///
/// # Safety
///
/// The CPU supports [`Path::Avx512Gfni`]; `src` is valid for reading and `dst` for
/// writing 512 bytes. They may be equal (all input is read before any output is written)
/// but must not overlap otherwise.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn crypt32_avx512_gfni(rk: &[u32; 32], src: *const u8, dst: *mut u8) {
    // SAFETY: AVX-512F/BW are this function's contract; the caller's 512 readable
    // bytes hold bytes 0..256 of `src`.
    let [mut x0, mut x1, mut x2, mut x3] = unsafe { load16_512(src) };
    // SAFETY: as for the first half: bytes 256..512 of `src`.
    let [mut y0, mut y1, mut y2, mut y3] = unsafe { load16_512(src.add(256)) };
    for k in rk.chunks_exact(4) {
        let k0 = _mm512_set1_epi32(k[0] as i32);
        x0 = round512(x0, x1, x2, x3, k0);
        y0 = round512(y0, y1, y2, y3, k0);
        let k1 = _mm512_set1_epi32(k[1] as i32);
        x1 = round512(x1, x2, x3, x0, k1);
        y1 = round512(y1, y2, y3, y0, k1);
        let k2 = _mm512_set1_epi32(k[2] as i32);
        x2 = round512(x2, x3, x0, x1, k2);
        y2 = round512(y2, y3, y0, y1, k2);
        let k3 = _mm512_set1_epi32(k[3] as i32);
        x3 = round512(x3, x0, x1, x2, k3);
        y3 = round512(y3, y0, y1, y2, k3);
    }
    // SAFETY: AVX-512F/BW are this function's contract; the caller's 512 writable bytes
    // at `dst` cover both 256-byte halves, and every input was read above.
    unsafe {
        store16_512(dst, [x0, x1, x2, x3]);
        store16_512(dst.add(256), [y0, y1, y2, y3]);
    }
}

// ---------------------------------------------------------------------------------------
// AVX2: 2 x 8 blocks, three S-box flavours
// ---------------------------------------------------------------------------------------

#[target_feature(enable = "avx2")]
#[inline]
fn bcast256(pattern: (i64, i64)) -> __m256i {
    _mm256_set_epi64x(pattern.1, pattern.0, pattern.1, pattern.0)
}

#[target_feature(enable = "avx2")]
#[inline]
fn transpose256([a, b, c, d]: [__m256i; 4]) -> [__m256i; 4] {
    let ab_lo = _mm256_unpacklo_epi32(a, b);
    let ab_hi = _mm256_unpackhi_epi32(a, b);
    let cd_lo = _mm256_unpacklo_epi32(c, d);
    let cd_hi = _mm256_unpackhi_epi32(c, d);
    [
        _mm256_unpacklo_epi64(ab_lo, cd_lo),
        _mm256_unpackhi_epi64(ab_lo, cd_lo),
        _mm256_unpacklo_epi64(ab_hi, cd_hi),
        _mm256_unpackhi_epi64(ab_hi, cd_hi),
    ]
}

/// `a ^ L(s)`, with the byte-multiple rotations as shuffles:
/// `L(s) = s ^ rol24(s) ^ rol2(s ^ rol8(s) ^ rol16(s))`.
#[target_feature(enable = "avx2")]
#[inline]
fn xor_l256(a: __m256i, s: __m256i) -> __m256i {
    let t = _mm256_xor_si256(
        _mm256_xor_si256(s, _mm256_shuffle_epi8(s, bcast256(ROL8))),
        _mm256_shuffle_epi8(s, bcast256(ROL16)),
    );
    let t = _mm256_or_si256(_mm256_slli_epi32::<2>(t), _mm256_srli_epi32::<30>(t));
    let u = _mm256_xor_si256(
        _mm256_xor_si256(a, s),
        _mm256_shuffle_epi8(s, bcast256(ROL24)),
    );
    _mm256_xor_si256(u, t)
}

#[target_feature(enable = "avx2,gfni")]
#[inline]
fn sbox256_gfni(x: __m256i) -> __m256i {
    let t = _mm256_gf2p8affine_epi64_epi8::<PRE_C>(x, _mm256_set1_epi64x(PRE_MATRIX));
    _mm256_gf2p8affineinv_epi64_epi8::<POST_C>(t, _mm256_set1_epi64x(POST_MATRIX))
}

#[target_feature(enable = "avx2")]
#[inline]
fn affine256(x: __m256i, lo: (i64, i64), hi: (i64, i64)) -> __m256i {
    let mask = _mm256_set1_epi8(0x0F);
    let low = _mm256_and_si256(x, mask);
    let high = _mm256_and_si256(_mm256_srli_epi16::<4>(x), mask);
    _mm256_xor_si256(
        _mm256_shuffle_epi8(bcast256(lo), low),
        _mm256_shuffle_epi8(bcast256(hi), high),
    )
}

#[target_feature(enable = "avx2,vaes")]
#[inline]
fn sbox256_vaes(x: __m256i) -> __m256i {
    let u = affine256(x, PRE_LO, PRE_HI);
    let v = _mm256_aesenclast_epi128(u, _mm256_setzero_si256());
    let v = _mm256_shuffle_epi8(v, bcast256(INV_SHIFT_ROWS));
    affine256(v, POST_LO, POST_HI)
}

#[target_feature(enable = "avx2,aes")]
#[inline]
fn sbox256_aesni(x: __m256i) -> __m256i {
    let u = affine256(x, PRE_LO, PRE_HI);
    let zero = _mm_setzero_si128();
    let lo = _mm_aesenclast_si128(_mm256_castsi256_si128(u), zero);
    let hi = _mm_aesenclast_si128(_mm256_extracti128_si256::<1>(u), zero);
    let v = _mm256_shuffle_epi8(_mm256_set_m128i(hi, lo), bcast256(INV_SHIFT_ROWS));
    affine256(v, POST_LO, POST_HI)
}

/// Loads 8 blocks from `src` as transposed native words.
///
/// # Safety
///
/// The CPU supports AVX2; `src` must be valid for reading 128 bytes.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn load8_256(src: *const u8) -> [__m256i; 4] {
    let bswap = bcast256(BSWAP32);
    let mut r = [_mm256_setzero_si256(); 4];
    for (i, reg) in r.iter_mut().enumerate() {
        // SAFETY: i < 4, so the 32 bytes read lie within the caller's 128.
        let v = unsafe { _mm256_loadu_si256(src.add(32 * i).cast()) };
        *reg = _mm256_shuffle_epi8(v, bswap);
    }
    transpose256(r)
}

/// Stores the output words `x` (in SM4's reversed order) of 8 blocks to `dst`.
///
/// # Safety
///
/// The CPU supports AVX2; `dst` must be valid for writing 128 bytes.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn store8_256(dst: *mut u8, [x0, x1, x2, x3]: [__m256i; 4]) {
    let bswap = bcast256(BSWAP32);
    for (i, v) in transpose256([x3, x2, x1, x0]).into_iter().enumerate() {
        // SAFETY: i < 4, so the 32 bytes written lie within the caller's 128.
        unsafe { _mm256_storeu_si256(dst.add(32 * i).cast(), _mm256_shuffle_epi8(v, bswap)) };
    }
}

/// Defines a 16-block AVX2 kernel around an S-box function.
macro_rules! avx2_kernel {
    ($(#[$doc:meta])* $name:ident, $features:literal, $sbox:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// The CPU supports the features named in `target_feature`; `src` is valid for
        /// reading and `dst` for writing 256 bytes. They may be equal (all input is read
        /// before any output is written) but must not overlap otherwise.
        #[target_feature(enable = $features)]
        unsafe fn $name(rk: &[u32; 32], src: *const u8, dst: *mut u8) {
            // A closure, so that it inherits this function's target features.
            let round = |a: __m256i, b: __m256i, c: __m256i, d: __m256i, k: __m256i| {
                let t = _mm256_xor_si256(_mm256_xor_si256(b, c), _mm256_xor_si256(d, k));
                xor_l256(a, $sbox(t))
            };
            // SAFETY: AVX2 is among this function's features (its contract); the
            // caller's 256 readable bytes hold bytes 0..128 of `src`.
            let [mut x0, mut x1, mut x2, mut x3] = unsafe { load8_256(src) };
            // SAFETY: as for the first half: bytes 128..256 of `src`.
            let [mut y0, mut y1, mut y2, mut y3] = unsafe { load8_256(src.add(128)) };
            for k in rk.chunks_exact(4) {
                let k0 = _mm256_set1_epi32(k[0] as i32);
                x0 = round(x0, x1, x2, x3, k0);
                y0 = round(y0, y1, y2, y3, k0);
                let k1 = _mm256_set1_epi32(k[1] as i32);
                x1 = round(x1, x2, x3, x0, k1);
                y1 = round(y1, y2, y3, y0, k1);
                let k2 = _mm256_set1_epi32(k[2] as i32);
                x2 = round(x2, x3, x0, x1, k2);
                y2 = round(y2, y3, y0, y1, k2);
                let k3 = _mm256_set1_epi32(k[3] as i32);
                x3 = round(x3, x0, x1, x2, k3);
                y3 = round(y3, y0, y1, y2, k3);
            }
            // SAFETY: AVX2 as above; the caller's 256 writable bytes at `dst` cover both
            // 128-byte halves, and every input was read above.
            unsafe {
                store8_256(dst, [x0, x1, x2, x3]);
                store8_256(dst.add(128), [y0, y1, y2, y3]);
            }
        }
    };
}

avx2_kernel!(
    /// 16 blocks with AVX2 and GFNI.
    crypt16_avx2_gfni,
    "avx2,gfni",
    sbox256_gfni
);
avx2_kernel!(
    /// 16 blocks with AVX2 and VAES.
    crypt16_avx2_vaes,
    "avx2,vaes",
    sbox256_vaes
);
avx2_kernel!(
    /// 16 blocks with AVX2 and AES-NI.
    crypt16_avx2_aesni,
    "avx2,aes",
    sbox256_aesni
);

// ---------------------------------------------------------------------------------------
// Backends for the `cipher` traits
// ---------------------------------------------------------------------------------------

/// Defines a backend type running `$kernel` on `$par` blocks at a time and `$single` on
/// one. Backends are built only by `encrypt_with`/`decrypt_with`, i.e. for a path the
/// caller checked with [`Path::is_supported`] (`Sm4Simd` stores only such paths).
macro_rules! backend {
    ($name:ident, $par:ty, $kernel:ident, $single:ident) => {
        struct $name<'a> {
            rk: &'a [u32; 32],
        }

        impl BlockSizeUser for $name<'_> {
            type BlockSize = U16;
        }

        impl ParBlocksSizeUser for $name<'_> {
            type ParBlocksSize = $par;
        }

        impl $name<'_> {
            const PAR_BYTES: usize = <$par as cipher::typenum::Unsigned>::USIZE * 16;

            #[inline]
            fn one(&self, mut block: InOut<'_, '_, Block<Self>>) {
                let mut input = [0u8; 16];
                input.copy_from_slice(block.get_in());
                // SAFETY: this backend exists only for a detected path (see the macro's
                // doc comment), which includes the features `$single` is compiled with.
                let output = unsafe { $single(self.rk, &input) };
                block.get_out().copy_from_slice(&output);
            }

            #[inline]
            fn par(&self, blocks: InOut<'_, '_, ParBlocks<Self>>) {
                let (src, dst) = blocks.into_raw();
                // SAFETY: features as in `one`. `src` and `dst` point to `ParBlocksSize`
                // contiguous blocks (`Array` is an array of arrays of bytes), i.e.
                // `PAR_BYTES` bytes; `InOut` makes them either equal or disjoint.
                unsafe { $kernel(self.rk, src.cast(), dst.cast()) }
            }

            /// Any number of blocks: whole batches directly, the rest through a
            /// zero-padded batch on the stack, wiped afterwards.
            #[inline]
            fn any(&self, blocks: InOutBuf<'_, '_, Block<Self>>) {
                let (batches, mut rest) = blocks.into_chunks::<$par>();
                for batch in batches {
                    self.par(batch);
                }
                if rest.is_empty() {
                    return;
                }
                let mut buf = [0u8; Self::PAR_BYTES];
                for (chunk, block) in buf.chunks_exact_mut(16).zip(rest.get_in()) {
                    chunk.copy_from_slice(block);
                }
                let p = buf.as_mut_ptr();
                // SAFETY: features as in `one`; `buf` is `PAR_BYTES` long, read and
                // written in place.
                unsafe { $kernel(self.rk, p.cast_const(), p) };
                for (block, chunk) in rest.get_out().iter_mut().zip(buf.chunks_exact(16)) {
                    block.copy_from_slice(chunk);
                }
                buf.zeroize();
            }
        }

        impl BlockCipherEncBackend for $name<'_> {
            #[inline]
            fn encrypt_block(&self, block: InOut<'_, '_, Block<Self>>) {
                self.one(block);
            }

            #[inline]
            fn encrypt_par_blocks(&self, blocks: InOut<'_, '_, ParBlocks<Self>>) {
                self.par(blocks);
            }

            #[inline]
            fn encrypt_tail_blocks(&self, blocks: InOutBuf<'_, '_, Block<Self>>) {
                self.any(blocks);
            }
        }

        impl BlockCipherDecBackend for $name<'_> {
            #[inline]
            fn decrypt_block(&self, block: InOut<'_, '_, Block<Self>>) {
                self.one(block);
            }

            #[inline]
            fn decrypt_par_blocks(&self, blocks: InOut<'_, '_, ParBlocks<Self>>) {
                self.par(blocks);
            }

            #[inline]
            fn decrypt_tail_blocks(&self, blocks: InOutBuf<'_, '_, Block<Self>>) {
                self.any(blocks);
            }
        }
    };
}

backend!(Avx512Gfni, U32, crypt32_avx512_gfni, crypt1_gfni);
backend!(Avx2Gfni, U16, crypt16_avx2_gfni, crypt1_gfni);
backend!(Avx2Vaes, U16, crypt16_avx2_vaes, crypt1_aesni);
backend!(Avx2AesNi, U16, crypt16_avx2_aesni, crypt1_aesni);

/// Each path's vector S-box and its one-block S-box, applied to `bytes`, for the tests;
/// `None` if this CPU lacks the path.
#[cfg(test)]
pub(super) fn sbox_for_test(path: Path, bytes: &[u8; 64]) -> Option<([u8; 64], [u8; 64])> {
    /// `f` on each 32-byte half of `bytes`.
    #[inline(always)]
    fn ymm(bytes: &[u8; 64], f: impl Fn(__m256i) -> __m256i) -> [u8; 64] {
        let mut out = [0u8; 64];
        for half in [0, 32] {
            // SAFETY: inlined only into functions with AVX2 enabled, called after
            // detection; each access is 32 bytes within a 64-byte array.
            unsafe {
                let x = _mm256_loadu_si256(bytes.as_ptr().add(half).cast());
                _mm256_storeu_si256(out.as_mut_ptr().add(half).cast(), f(x));
            }
        }
        out
    }
    #[target_feature(enable = "avx512f,gfni")]
    fn zmm_gfni(bytes: &[u8; 64]) -> [u8; 64] {
        let mut out = [0u8; 64];
        // SAFETY: 64 bytes read from and written to 64-byte arrays.
        unsafe {
            let x = _mm512_loadu_si512(bytes.as_ptr().cast());
            _mm512_storeu_si512(out.as_mut_ptr().cast(), sbox512(x));
        }
        out
    }
    #[target_feature(enable = "avx2,gfni")]
    fn ymm_gfni(bytes: &[u8; 64]) -> [u8; 64] {
        ymm(bytes, |x| sbox256_gfni(x))
    }
    #[target_feature(enable = "avx2,vaes")]
    fn ymm_vaes(bytes: &[u8; 64]) -> [u8; 64] {
        ymm(bytes, |x| sbox256_vaes(x))
    }
    #[target_feature(enable = "avx2,aes")]
    fn ymm_aesni(bytes: &[u8; 64]) -> [u8; 64] {
        ymm(bytes, |x| sbox256_aesni(x))
    }
    fn words(bytes: &[u8; 64], tau: impl Fn(u32) -> u32) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (o, i) in out.chunks_exact_mut(4).zip(bytes.chunks_exact(4)) {
            o.copy_from_slice(&tau(u32::from_be_bytes([i[0], i[1], i[2], i[3]])).to_be_bytes());
        }
        out
    }

    if !path.is_supported() {
        return None;
    }
    // SAFETY: the path's features, which include those of its S-box functions, were
    // just detected.
    Some(unsafe {
        match path {
            Path::Avx512Gfni => (zmm_gfni(bytes), words(bytes, |w| tau_gfni(w))),
            Path::Avx2Gfni => (ymm_gfni(bytes), words(bytes, |w| tau_gfni(w))),
            Path::Avx2Vaes => (ymm_vaes(bytes), words(bytes, |w| tau_aesni(w))),
            Path::Avx2AesNi => (ymm_aesni(bytes), words(bytes, |w| tau_aesni(w))),
        }
    })
}
