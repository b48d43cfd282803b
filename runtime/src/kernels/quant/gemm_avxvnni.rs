//! The 8-bit GEMM of [`super::gemm_u8i8`] on 256-bit registers with AVX-VNNI: the
//! VEX-encoded `vpdpbusd` of Intel's client processors from Alder Lake on (and others
//! without AVX-512), four u8 x i8 products summed into each i32 lane as the AVX512-VNNI
//! kernel does. Same packed B, same A, same exact sums, so the bytes equal the other
//! paths' (tested against the portable code).
//!
//! Why its own kernel and not the AVX-512 one narrowed: with 16 ymm registers (not 32
//! zmm) the block is 6 rows x one panel of 16 columns (12 accumulators, the panel's two
//! halves, one broadcast), where the 512-bit kernel holds 8 rows x two panels. Per quad
//! of depth that is 12 `vpdpbusd` (384 products) against 6 broadcasts and 2 loads, four
//! times the products per instruction of an FMA on floats. The output stage is the AVX2
//! one of [`super::gemm`] (every requantization mode, 8 lanes at a time).

use std::arch::x86_64::*;

use super::gemm::avx2::{load_stage, narrow16, requant8, store16};
use super::gemm::{NR, Stage};
use crate::kernels::util::block_rows;

/// Rows per micro-kernel block.
const MR: usize = 6;

/// `out = stage((A ^ flip) * B)` as [`super::gemm_u8i8::gemm`] defines it.
///
/// # Safety
/// The CPU supports AVX2 and AVX-VNNI, and the slices have the extents
/// [`super::gemm_u8i8::gemm`] checks: A rows `r < m` of `kq <= lda` bytes, B panels of
/// `kq * NR` bytes covering `n` columns, destination rows `r < m` of `n <= ld` bytes,
/// stage arrays padded to whole panels.
#[target_feature(enable = "avx2,avxvnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm(
    a: &[u8],
    flip: u8,
    lda: usize,
    m: usize,
    b: &[u8],
    kq: usize,
    n: usize,
    out: &mut [u8],
    ld: usize,
    stage: &Stage,
    signed: bool,
) {
    let flip = i32::from_ne_bytes([flip; 4]);
    for t in 0..n.div_ceil(NR) {
        let panel = &b[t * kq * NR..(t + 1) * kq * NR];
        let c0 = t * NR;
        let cols = (n - c0).min(NR);
        let mut r0 = 0;
        while r0 < m {
            let rows = block_rows(m - r0, MR);
            let block = Block {
                a: &a[r0 * lda..],
                flip,
                lda,
                panel,
                kq,
                c0,
                cols,
                stage,
                signed,
            };
            let dst = &mut out[r0 * ld..];
            // SAFETY: the features are this function's contract; `block.a` starts at
            // row r0 and rows r0..r0 + rows <= m hold kq bytes at lda strides, the panel
            // holds kq * NR bytes, and `dst`'s rows hold columns c0..c0 + cols (the
            // extents `gemm_u8i8::gemm` checks).
            unsafe {
                match rows {
                    6 => block.run::<6>(dst, ld),
                    5 => block.run::<5>(dst, ld),
                    4 => block.run::<4>(dst, ld),
                    3 => block.run::<3>(dst, ld),
                    2 => block.run::<2>(dst, ld),
                    _ => block.run::<1>(dst, ld),
                }
            }
            r0 += rows;
        }
    }
}

/// The dot products of R rows of A (`lda` bytes apart, each four bytes XORed with
/// `flip`) with one panel of B, over the depth `kq`: per row, columns 0-7 and 8-15.
///
/// # Safety
/// AVX2 and AVX-VNNI; `a` holds R rows of `kq` bytes at `lda` strides, `panel` `kq * NR`
/// bytes.
#[target_feature(enable = "avx2,avxvnni")]
#[inline]
unsafe fn dot_block<const R: usize>(
    a: &[u8],
    flip: i32,
    lda: usize,
    panel: &[u8],
    kq: usize,
) -> [[__m256i; 2]; R] {
    debug_assert!(a.len() >= (R - 1) * lda + kq);
    debug_assert!(panel.len() >= kq * NR);
    let mut acc = [[_mm256_setzero_si256(); 2]; R];
    // Opaque to the optimizer, as in the AVX-512 kernel: each row is then one XOR after
    // a broadcast from memory, not a shuffle.
    let flip = std::hint::black_box(_mm256_set1_epi32(flip));
    let ap = a.as_ptr();
    let bp = panel.as_ptr();
    for q in 0..kq / 4 {
        // SAFETY: quad q's 64 bytes end at (q + 1) * 64 <= kq * NR.
        let (b0, b1) = unsafe {
            (
                _mm256_loadu_si256(bp.add(q * 4 * NR) as *const __m256i),
                _mm256_loadu_si256(bp.add(q * 4 * NR + 32) as *const __m256i),
            )
        };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: row r's quad q ends at r * lda + 4q + 4 <= r * lda + kq.
            let quad = unsafe { (ap.add(r * lda + 4 * q) as *const i32).read_unaligned() };
            let av = _mm256_xor_si256(_mm256_set1_epi32(quad), flip);
            acc[0] = _mm256_dpbusd_avx_epi32(acc[0], av, b0);
            acc[1] = _mm256_dpbusd_avx_epi32(acc[1], av, b1);
        }
    }
    acc
}

/// [`super::gemm_u8i8::gemm_i32`] on AVX-VNNI: the raw sums, rows of `n` i32 at `ld`
/// strides.
///
/// # Safety
/// As [`gemm`], with `out` rows `r < m` of `n <= ld` values.
#[target_feature(enable = "avx2,avxvnni")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm_i32(
    a: &[u8],
    flip: u8,
    lda: usize,
    m: usize,
    b: &[u8],
    kq: usize,
    n: usize,
    out: &mut [i32],
    ld: usize,
) {
    let flip = i32::from_ne_bytes([flip; 4]);
    for t in 0..n.div_ceil(NR) {
        let (c0, cols) = (t * NR, (n - t * NR).min(NR));
        let panel = &b[t * kq * NR..(t + 1) * kq * NR];
        let mut r0 = 0;
        while r0 < m {
            let rows = block_rows(m - r0, MR);
            let a0 = &a[r0 * lda..];
            let dst = &mut out[r0 * ld..];
            // SAFETY: the features are this function's contract; rows r0..r0 + rows <= m
            // of A, the panel and the destination rows lie inside their slices.
            unsafe {
                match rows {
                    6 => store_i32(&dot_block::<6>(a0, flip, lda, panel, kq), dst, ld, c0, cols),
                    5 => store_i32(&dot_block::<5>(a0, flip, lda, panel, kq), dst, ld, c0, cols),
                    4 => store_i32(&dot_block::<4>(a0, flip, lda, panel, kq), dst, ld, c0, cols),
                    3 => store_i32(&dot_block::<3>(a0, flip, lda, panel, kq), dst, ld, c0, cols),
                    2 => store_i32(&dot_block::<2>(a0, flip, lda, panel, kq), dst, ld, c0, cols),
                    _ => store_i32(&dot_block::<1>(a0, flip, lda, panel, kq), dst, ld, c0, cols),
                }
            }
            r0 += rows;
        }
    }
}

/// Stores columns c0..c0 + cols of each accumulator row r at `out[r * ld..]`.
///
/// # Safety
/// AVX2; `out` holds the rows' columns.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn store_i32(acc: &[[__m256i; 2]], out: &mut [i32], ld: usize, c0: usize, cols: usize) {
    for (r, acc) in acc.iter().enumerate() {
        let mut tmp = [0i32; NR];
        // SAFETY: tmp holds 16 values.
        unsafe {
            _mm256_storeu_si256(tmp.as_mut_ptr() as *mut __m256i, acc[0]);
            _mm256_storeu_si256(tmp.as_mut_ptr().add(8) as *mut __m256i, acc[1]);
        }
        out[r * ld + c0..][..cols].copy_from_slice(&tmp[..cols]);
    }
}

/// One block's operands: R rows of A from `a`, one panel of B.
struct Block<'a> {
    a: &'a [u8],
    /// XORed into every four bytes of A.
    flip: i32,
    lda: usize,
    panel: &'a [u8],
    kq: usize,
    /// The panel's first column, and how many of its columns exist.
    c0: usize,
    cols: usize,
    stage: &'a Stage,
    signed: bool,
}

impl Block<'_> {
    /// Accumulates an R x 16 block over the depth, then runs the output stage.
    ///
    /// # Safety
    /// AVX2 and AVX-VNNI; `a` holds R rows of `kq` bytes at `lda` strides, the panel
    /// `kq * NR` bytes, `out` R rows at `ld` strides holding columns c0..c0 + cols.
    #[target_feature(enable = "avx2,avxvnni")]
    #[inline]
    unsafe fn run<const R: usize>(&self, out: &mut [u8], ld: usize) {
        debug_assert!(self.a.len() >= (R - 1) * self.lda + self.kq);
        debug_assert!(self.panel.len() >= self.kq * NR);
        // SAFETY: the features and the operands' extents are this function's contract.
        let acc = unsafe { dot_block::<R>(self.a, self.flip, self.lda, self.panel, self.kq) };
        // SAFETY: the stage arrays are padded to whole panels; c0 is a multiple of 16.
        let (s0, s1) = unsafe {
            (
                load_stage(self.stage, self.c0),
                load_stage(self.stage, self.c0 + 8),
            )
        };
        for (r, acc) in acc.iter().enumerate() {
            let bytes = narrow16(requant8(acc[0], &s0), requant8(acc[1], &s1), self.signed);
            store16(&mut out[r * ld + self.c0..][..self.cols], bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::arith::Multiplier;
    use super::super::gemm::tests::Rng;
    use super::super::gemm_u8i8::quad_depth;
    use super::super::gemm_u8i8::tests::random_rhs;
    use super::super::gemm_u8i8::{PackedRhs, corrected_bias, gemm as portable_path};
    use super::*;

    /// The AVX-VNNI kernel's bytes equal the portable path's on random operands, in
    /// every requantization mode (runs where the processor has AVX-VNNI, whichever path
    /// the dispatcher would choose).
    #[test]
    fn avx_vnni_bytes_equal_the_portable_path() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("avxvnni")) {
            eprintln!("no AVX-VNNI on this processor: nothing to compare");
            return;
        }
        let mut rng = Rng(0x7a7a_1313_4242_9090);
        for case in 0..90 {
            let m = rng.range(1, 23) as usize;
            let k = rng.range(1, 300) as usize;
            let n = rng.range(1, 70) as usize;
            let kq = quad_depth(k);
            let lda = kq + 4 * rng.range(0, 2) as usize;
            let a: Vec<u8> = (0..m * lda).map(|_| rng.range(0, 255) as u8).collect();
            let flip = if case % 4 < 2 { 0x80 } else { 0 };
            let (_, packed, sums) = random_rhs(&mut rng, k, n);
            let bias: Vec<i32> = (0..n).map(|_| rng.range(-100_000, 100_000)).collect();
            let bias = corrected_bias(Some(&bias), &sums, rng.range(0, 255));
            let mults: Vec<Multiplier> = (0..n)
                .map(|_| Multiplier::new(2f64.powi(rng.range(-20, -6))).unwrap())
                .collect();
            let signed = case % 2 == 0;
            let range = if signed { (-128, 127) } else { (0, 255) };
            let zp = rng.range(range.0, range.1);
            let mut stage = Stage::new(n, Some(&bias), &mults, zp, range).unwrap();
            match case % 3 {
                0 => {
                    let scales: Vec<f32> = (0..n)
                        .map(|_| 2f32.powi(rng.range(-20, -6)) * 1.3)
                        .collect();
                    stage = stage.float_scales(&scales).unwrap();
                }
                1 => stage = stage.single_rounding().unwrap(),
                _ => {}
            }
            let rhs = PackedRhs {
                data: &packed,
                k,
                n,
            };
            let ld = n + 3;
            let mut want = vec![0u8; m * ld];
            portable_path(false, &a, flip, lda, m, &rhs, &mut want, ld, &stage, signed).unwrap();
            let mut got = vec![0u8; m * ld];
            // SAFETY: AVX2 and AVX-VNNI were detected above; the extents are those the
            // portable call just checked.
            unsafe {
                gemm(
                    &a, flip, lda, m, &packed, kq, n, &mut got, ld, &stage, signed,
                )
            };
            for r in 0..m {
                assert_eq!(
                    &got[r * ld..r * ld + n],
                    &want[r * ld..r * ld + n],
                    "case {case} row {r} (m {m} k {k} n {n})"
                );
            }
        }
    }

    /// The raw i32 sums of the AVX-VNNI kernel equal the portable ones.
    #[test]
    fn avx_vnni_sums_equal_the_portable_path() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("avxvnni")) {
            eprintln!("no AVX-VNNI on this processor: nothing to compare");
            return;
        }
        let mut rng = Rng(0x1313_7a7a_9090_4242);
        for case in 0..40 {
            let m = rng.range(1, 23) as usize;
            let k = rng.range(1, 300) as usize;
            let n = rng.range(1, 70) as usize;
            let kq = quad_depth(k);
            let a: Vec<u8> = (0..m * kq).map(|_| rng.range(0, 255) as u8).collect();
            let flip = if case % 2 == 0 { 0x80 } else { 0 };
            let (_, packed, _) = random_rhs(&mut rng, k, n);
            let rhs = PackedRhs {
                data: &packed,
                k,
                n,
            };
            let ld = n + 2;
            let mut want = vec![0i32; m * ld];
            super::super::gemm_u8i8::gemm_i32(false, &a, flip, kq, m, &rhs, &mut want, ld).unwrap();
            let mut got = vec![0i32; m * ld];
            // SAFETY: AVX2 and AVX-VNNI were detected above; the extents are those the
            // portable call just checked.
            unsafe { gemm_i32(&a, flip, kq, m, &packed, kq, n, &mut got, ld) };
            for r in 0..m {
                assert_eq!(
                    &got[r * ld..r * ld + n],
                    &want[r * ld..r * ld + n],
                    "case {case} row {r}"
                );
            }
        }
    }
}
