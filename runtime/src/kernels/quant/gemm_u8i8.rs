//! Integer GEMM on 8-bit operands with the processor's dot-product instructions
//! (AVX512-VNNI `vpdpbusd`: four u8 x i8 products summed into each i32 lane), with the
//! requantizing output stage of [`super::gemm`].
//!
//! Why a second GEMM: [`super::gemm`] widens both operands to i16 so that every product
//! `(x - x_zp) * (w - w_zp)` is exact, which doubles the bytes moved and halves the
//! products per instruction. Here A holds activations as unsigned bytes (int8 inputs
//! are read as they are and offset by 128 in the kernel, `x ^ 0x80`, so a pointwise
//! convolution reads its input in place), and B weights as signed bytes `w - w_zp`
//! (which must fit:
//! int8 filters with zero point 0, the per-channel filters of TFLite's int8 models, or
//! uint8 filters with zero point 128). Then
//!
//! `sum (x - x_zp) * b = sum a * b - a_zp * sum b`, with `a = x (+ 128)`, `a_zp = x_zp
//! (+ 128)`,
//!
//! and the correction `-a_zp * colsum(b)` is folded into each column's bias, so the
//! accumulator the output stage sees is exactly the one of the i16 path: the outputs are
//! bit-identical (tested against it on random data). Taps in a convolution's padding are
//! filled with `a_zp`, so they contribute `a_zp * b - a_zp * b = 0` as they must.
//! `vpdpbusd` (not the saturating `vpdpbusds`) sums exactly: 4 * 255 * 128 fits an i32
//! lane with room for a depth of millions.
//!
//! Layouts:
//! - A: row-major rows of `kq` bytes (`kq` = k rounded up to a multiple of 4; the tail
//!   may hold anything, B is zero there), each byte XORed with `flip` as it is read
//!   (0x80 for int8 activations, 0 for uint8).
//! - B ([`pack_rhs`]): panels of [`NR`] = 16 columns; within a panel, for every quad of
//!   rows `4q..4q + 4`, each column's four bytes together (64 bytes: one register), so
//!   one 32-bit broadcast of four A bytes meets a whole panel row.
//!
//! The micro-kernel keeps an [`MR`] x 32 block (two panels, 16 accumulators) in
//! registers. Processors with AVX-VNNI and no AVX-512 run the 256-bit kernel of
//! [`super::gemm_avxvnni`], and on 64-bit Arm the NEON kernels of [`super::gemm_neon`]:
//! both read the same layout. x86 processors without either use [`super::gemm`]; the portable code
//! here computes the same values and is what the tests compare the intrinsics with.

use super::gemm::{NR, Stage};
use crate::error::{Result, RuntimeError};
use crate::kernels::util::matrix_extent;

/// Rows per micro-kernel block.
pub(crate) const MR: usize = 8;

/// `k` rounded up to a multiple of 4.
pub(crate) fn quad_depth(k: usize) -> usize {
    k.div_ceil(4) * 4
}

/// Bytes of a packed B of `k` x `n`.
pub(crate) fn packed_len(k: usize, n: usize) -> Option<usize> {
    quad_depth(k).checked_mul(n.div_ceil(NR))?.checked_mul(NR)
}

/// Whether this processor runs the 8-bit path (checked once): AVX512-VNNI or AVX-VNNI
/// ([`super::gemm_avxvnni`]) on x86-64, NEON on 64-bit Arm ([`super::gemm_neon`]).
pub(crate) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::kernels::isa::int8_vnni() || crate::kernels::isa::int8_avx_vnni();
    #[cfg(target_arch = "aarch64")]
    return crate::kernels::isa::int8_neon();
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    false
}

/// Whether weights of this type and zero point fit the signed bytes of B.
pub(crate) fn fits(qt: super::arith::QType, zero_point: i32) -> bool {
    match qt {
        super::arith::QType::I8 => zero_point == 0,
        super::arith::QType::U8 => zero_point == 128,
    }
}

/// Packs B (`k` x `n`, element (kk, j) from `get`) into `out` (see the module docs), and
/// returns each column's sum (for the zero-point correction).
pub(crate) fn pack_rhs(
    k: usize,
    n: usize,
    get: impl Fn(usize, usize) -> i8,
    out: &mut [u8],
) -> Vec<i32> {
    let kq = quad_depth(k);
    let mut sums = vec![0i32; n];
    for t in 0..n.div_ceil(NR) {
        let panel = &mut out[t * kq * NR..(t + 1) * kq * NR];
        for q in 0..kq / 4 {
            let row = &mut panel[q * 4 * NR..(q + 1) * 4 * NR];
            for j in 0..NR {
                let col = t * NR + j;
                for h in 0..4 {
                    let kk = 4 * q + h;
                    let v = if col < n && kk < k { get(kk, col) } else { 0 };
                    if col < n {
                        sums[col] += i32::from(v);
                    }
                    row[4 * j + h] = v as u8;
                }
            }
        }
    }
    sums
}

/// The bias of each column with the zero-point correction folded in:
/// `bias - a_zp * colsum` (wrapping, as the accumulator arithmetic does).
pub(crate) fn corrected_bias(bias: Option<&[i32]>, sums: &[i32], a_zp: i32) -> Vec<i32> {
    sums.iter()
        .enumerate()
        .map(|(j, &s)| bias.map_or(0, |b| b[j]).wrapping_sub(a_zp.wrapping_mul(s)))
        .collect()
}

/// A packed B and its dimensions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PackedRhs<'a> {
    pub data: &'a [u8],
    pub k: usize,
    pub n: usize,
}

/// `out = stage((A ^ flip) (m x kq, rows of `lda` bytes) * B)`, as bytes (two's
/// complement when `signed`), row `r` at `out[r * ld..]`. `simd` selects the intrinsics
/// (which must be [`available`]: AVX512-VNNI on x86-64, NEON on 64-bit Arm, with `SDOT`
/// where present) or the portable code.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm(
    simd: bool,
    a: &[u8],
    flip: u8,
    lda: usize,
    m: usize,
    b: &PackedRhs,
    out: &mut [u8],
    ld: usize,
    stage: &Stage,
    signed: bool,
) -> Result<()> {
    let (kq, n) = (quad_depth(b.k), b.n);
    let bad = |what: &str| RuntimeError::Internal(format!("8-bit GEMM: {what}"));
    check_extents(a.len(), lda, m, b, out.len(), ld)?;
    if stage.columns() != n {
        return Err(bad("output stage does not match the columns"));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if simd {
        if crate::kernels::isa::int8_vnni() {
            // SAFETY: AVX512-VNNI (with F, BW and AVX2) is available, checked just above;
            // every index the kernel forms is inside the slices, whose extents were
            // checked above: A rows `r < m` of `kq <= lda` bytes, B panels of `kq * NR`
            // bytes, destination rows `r < m` of `n <= ld` bytes, stage arrays padded to
            // whole panels.
            unsafe { avx512::gemm(a, flip, lda, m, b.data, kq, n, out, ld, stage, signed) };
            return Ok(());
        }
        if crate::kernels::isa::int8_avx_vnni() {
            // SAFETY: AVX2 and AVX-VNNI are available, checked just above; the extents
            // were checked above, as for the AVX-512 kernel.
            unsafe {
                super::gemm_avxvnni::gemm(a, flip, lda, m, b.data, kq, n, out, ld, stage, signed)
            };
            return Ok(());
        }
        return Err(bad(
            "an 8-bit dot-product path requested on a CPU without one",
        ));
    }
    #[cfg(target_arch = "aarch64")]
    if simd {
        if !available() {
            return Err(bad("NEON requested on a CPU without it"));
        }
        // SAFETY: NEON is available (checked just above) and SDOT where `int8_dotprod`
        // says so; the extents were checked above, as for the x86 kernel.
        unsafe {
            super::gemm_neon::gemm(
                crate::kernels::isa::int8_dotprod(),
                a,
                flip,
                lda,
                m,
                b.data,
                kq,
                n,
                out,
                ld,
                stage,
                signed,
            )
        };
        return Ok(());
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    if simd {
        return Err(bad("no 8-bit dot-product path on this processor"));
    }
    // The portable stage stores the two's complement byte for either signedness.
    let _ = signed;
    portable(a, flip, lda, m, b.data, kq, n, out, ld, stage);
    Ok(())
}

/// The operand extents both GEMM entries check before any kernel indexes them: A rows
/// `r < m` of `kq <= lda` bytes, B of its packed size, destination rows `r < m` of
/// `n <= ld` elements.
fn check_extents(
    a_len: usize,
    lda: usize,
    m: usize,
    b: &PackedRhs,
    out_len: usize,
    ld: usize,
) -> Result<()> {
    let (kq, n) = (quad_depth(b.k), b.n);
    let bad = |what: &str| Err(RuntimeError::Internal(format!("8-bit GEMM: {what}")));
    if lda < kq || matrix_extent(m, lda, kq).is_none_or(|e| e > a_len) {
        return bad("left operand too short");
    }
    if packed_len(b.k, n) != Some(b.data.len()) {
        return bad("packed right operand has the wrong size");
    }
    if ld < n || matrix_extent(m, ld, n).is_none_or(|e| e > out_len) {
        return bad("destination too short");
    }
    Ok(())
}

/// Whether [`gemm_i32`] has a dot-product kernel here (x86-64 with AVX512-VNNI or
/// AVX-VNNI; the NEON kernels write bytes only).
pub(crate) fn i32_available() -> bool {
    cfg!(target_arch = "x86_64") && available()
}

/// `out = (A ^ flip) * B` as raw i32 sums (no bias, no zero-point correction: the caller
/// subtracts `a_zp * colsum`), row `r` at `out[r * ld..]`; `simd` selects the
/// dot-product kernel (which must be [`i32_available`]) or the portable code.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_i32(
    simd: bool,
    a: &[u8],
    flip: u8,
    lda: usize,
    m: usize,
    b: &PackedRhs,
    out: &mut [i32],
    ld: usize,
) -> Result<()> {
    let (kq, n) = (quad_depth(b.k), b.n);
    let bad = |what: &str| RuntimeError::Internal(format!("8-bit GEMM: {what}"));
    check_extents(a.len(), lda, m, b, out.len(), ld)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if simd {
        if crate::kernels::isa::int8_vnni() {
            // SAFETY: AVX512-VNNI (with F, BW, VL and AVX2) is available; the extents
            // were checked above.
            unsafe { avx512::gemm_i32(a, flip, lda, m, b.data, kq, n, out, ld) };
            return Ok(());
        }
        if crate::kernels::isa::int8_avx_vnni() {
            // SAFETY: AVX2 and AVX-VNNI are available; the extents were checked above.
            unsafe { super::gemm_avxvnni::gemm_i32(a, flip, lda, m, b.data, kq, n, out, ld) };
            return Ok(());
        }
    }
    if simd {
        return Err(bad(
            "an 8-bit dot-product path requested on a CPU without one",
        ));
    }
    for t in 0..n.div_ceil(NR) {
        let panel = &b.data[t * kq * NR..(t + 1) * kq * NR];
        let cols = (n - t * NR).min(NR);
        for r in 0..m {
            let arow = &a[r * lda..r * lda + kq];
            let row = &mut out[r * ld + t * NR..][..cols];
            row.fill(0);
            for (q, quad) in arow.chunks_exact(4).enumerate() {
                let brow = &panel[q * 4 * NR..(q + 1) * 4 * NR];
                for (j, acc) in row.iter_mut().enumerate() {
                    let s = quad_dot(quad, &brow[4 * j..4 * j + 4], flip);
                    *acc = acc.wrapping_add(s);
                }
            }
        }
    }
    Ok(())
}

/// What `vpdpbusd` computes for one lane: four products of A's bytes (un-flipped) by
/// B's signed bytes, summed in i32 (at most 4 * 255 * 128 in magnitude: no overflow).
#[inline(always)]
fn quad_dot(quad: &[u8], b: &[u8], flip: u8) -> i32 {
    quad.iter()
        .zip(b)
        .map(|(&a, &b)| i32::from(a ^ flip) * i32::from(b as i8))
        .sum()
}

#[allow(clippy::too_many_arguments)]
fn portable(
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
) {
    for t in 0..n.div_ceil(NR) {
        let panel = &b[t * kq * NR..(t + 1) * kq * NR];
        let cols = (n - t * NR).min(NR);
        for r in 0..m {
            let arow = &a[r * lda..r * lda + kq];
            let mut acc = [0i32; NR];
            for (q, quad) in arow.chunks_exact(4).enumerate() {
                let brow = &panel[q * 4 * NR..(q + 1) * 4 * NR];
                for (j, acc) in acc.iter_mut().enumerate() {
                    let s = quad_dot(quad, &brow[4 * j..4 * j + 4], flip);
                    *acc = acc.wrapping_add(s);
                }
            }
            for (j, o) in out[r * ld + t * NR..][..cols].iter_mut().enumerate() {
                // The clamp keeps the value in the 8-bit range; the byte is its two's
                // complement either way.
                *o = stage.apply(t * NR + j, acc[j]) as u8;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::super::gemm::avx2::{load_stage, narrow16, requant8, store16};
    use super::{MR, NR, Stage};
    use crate::kernels::util::{Panels, block_rows};

    /// # Safety
    /// The CPU supports AVX512F, AVX512BW, AVX512VL, AVX512-VNNI and AVX2, and the
    /// slices have the extents [`super::gemm`] checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2")]
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
        let panels = n.div_ceil(NR);
        let mut t = 0;
        while t < panels {
            let panel = Panels::from(t, panels, n, NR);
            let mut r0 = 0;
            while r0 < m {
                let rows = block_rows(m - r0, MR);
                let block = Block {
                    a: &a[r0 * lda..],
                    flip: i32::from_ne_bytes([flip; 4]),
                    lda,
                    b: &b[t * kq * NR..],
                    kq,
                    n,
                    t,
                    stage,
                    signed,
                };
                let dst = &mut out[r0 * ld..];
                // SAFETY: the CPU features are this function's contract; `block.a` starts
                // at row r0 and rows r0..r0 + rows <= m hold kq bytes at lda strides,
                // `block.b` starts at panel t and the panels `panel` names exist (t +
                // count <= panels), and `dst`'s rows hold those panels' columns below n
                // (the extents `super::gemm` checks).
                unsafe {
                    match rows {
                        8 => block.run_panels::<8>(panel, dst, ld),
                        7 => block.run_panels::<7>(panel, dst, ld),
                        6 => block.run_panels::<6>(panel, dst, ld),
                        5 => block.run_panels::<5>(panel, dst, ld),
                        4 => block.run_panels::<4>(panel, dst, ld),
                        3 => block.run_panels::<3>(panel, dst, ld),
                        2 => block.run_panels::<2>(panel, dst, ld),
                        _ => block.run_panels::<1>(panel, dst, ld),
                    }
                }
                r0 += rows;
            }
            t += panel.count();
        }
    }

    /// `start` plus the dot products of R rows of A (`lda` bytes apart, each four bytes
    /// XORed with `flip`) with P panels of B (`kq * NR` bytes each), over the depth `kq`.
    ///
    /// # Safety
    /// The CPU features of [`gemm`]; `a` holds R rows of `kq` bytes at `lda` strides, `b`
    /// P panels.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2")]
    #[inline]
    unsafe fn dot_block<const R: usize, const P: usize, const FLIP: bool>(
        a: &[u8],
        flip: i32,
        lda: usize,
        b: &[u8],
        kq: usize,
        start: [__m512i; P],
    ) -> [[__m512i; P]; R] {
        debug_assert!(a.len() >= (R - 1) * lda + kq);
        debug_assert!(b.len() >= P * kq * NR);
        let mut acc = [start; R];
        // Opaque to the optimizer: knowing it a splat, LLVM XORs the four bytes before
        // broadcasting them, which takes a register broadcast (a shuffle) per row;
        // opaque, each row is one XOR with an embedded memory broadcast. int8
        // MobileNetV2 ran 4-7% faster (alternated A/B).
        let flip = std::hint::black_box(_mm512_set1_epi32(flip));
        let ap = a.as_ptr();
        let bp = b.as_ptr();
        for q in 0..kq / 4 {
            let mut bv = [_mm512_setzero_si512(); P];
            for (p, v) in bv.iter_mut().enumerate() {
                // SAFETY: panel p's quad q ends at p * kq * NR + (q + 1) * 64 <= P * kq * NR.
                *v = unsafe { _mm512_loadu_si512(bp.add(p * kq * NR + q * 4 * NR) as *const _) };
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: row r's quad q ends at r * lda + 4q + 4 <= r * lda + kq.
                let quad = unsafe { (ap.add(r * lda + 4 * q) as *const i32).read_unaligned() };
                // A broadcast from memory, then the offset in a vector register (none
                // when FLIP is false: A is unsigned bytes as stored).
                let av = if FLIP {
                    _mm512_xor_si512(_mm512_set1_epi32(quad), flip)
                } else {
                    _mm512_set1_epi32(quad)
                };
                for (acc, &b) in acc.iter_mut().zip(&bv) {
                    *acc = _mm512_dpbusd_epi32(*acc, av, b);
                }
            }
        }
        acc
    }

    /// [`super::gemm_i32`] on AVX512-VNNI: blocks of 8 rows x 32 columns (two panels;
    /// a last odd panel alone).
    ///
    /// # Safety
    /// As [`gemm`], with `out` rows `r < m` of `n <= ld` values.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2")]
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
        let panels = n.div_ceil(NR);
        let mut t = 0;
        while t < panels {
            let pair = t + 1 < panels;
            let c0 = t * NR;
            let b0 = &b[t * kq * NR..];
            let mut r0 = 0;
            while r0 < m {
                let rows = block_rows(m - r0, MR);
                let block = I32Block {
                    a: &a[r0 * lda..],
                    flip: i32::from_ne_bytes([flip; 4]),
                    lda,
                    b: b0,
                    kq,
                    c0,
                    n,
                };
                let dst = &mut out[r0 * ld..];
                // SAFETY: the features are this function's contract; rows r0..r0 + rows
                // <= m of A, the panels from t (two only when t + 1 exists) and the
                // destination rows are inside their slices (the extents
                // `super::gemm_i32` checks).
                unsafe {
                    match (rows, pair) {
                        (8, true) => block.run::<8, 2>(dst, ld),
                        (7, true) => block.run::<7, 2>(dst, ld),
                        (6, true) => block.run::<6, 2>(dst, ld),
                        (5, true) => block.run::<5, 2>(dst, ld),
                        (4, true) => block.run::<4, 2>(dst, ld),
                        (3, true) => block.run::<3, 2>(dst, ld),
                        (2, true) => block.run::<2, 2>(dst, ld),
                        (_, true) => block.run::<1, 2>(dst, ld),
                        (8, false) => block.run::<8, 1>(dst, ld),
                        (7, false) => block.run::<7, 1>(dst, ld),
                        (6, false) => block.run::<6, 1>(dst, ld),
                        (5, false) => block.run::<5, 1>(dst, ld),
                        (4, false) => block.run::<4, 1>(dst, ld),
                        (3, false) => block.run::<3, 1>(dst, ld),
                        (2, false) => block.run::<2, 1>(dst, ld),
                        (_, false) => block.run::<1, 1>(dst, ld),
                    }
                }
                r0 += rows;
            }
            t += if pair { 2 } else { 1 };
        }
    }

    /// One block of [`gemm_i32`]: R rows of A, P panels of B from column c0.
    struct I32Block<'a> {
        a: &'a [u8],
        flip: i32,
        lda: usize,
        b: &'a [u8],
        kq: usize,
        c0: usize,
        n: usize,
    }

    impl I32Block<'_> {
        /// # Safety
        /// As [`gemm_i32`]'s calls: R rows of A, P panels of B, `out` R rows at `ld`
        /// strides holding the block's columns below n.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2")]
        #[inline]
        unsafe fn run<const R: usize, const P: usize>(&self, out: &mut [i32], ld: usize) {
            let zero = [_mm512_setzero_si512(); P];
            let (a, lda, b, kq) = (self.a, self.lda, self.b, self.kq);
            // SAFETY: the features and the operands' extents are this function's contract.
            let acc = unsafe {
                if self.flip == 0 {
                    dot_block::<R, P, false>(a, 0, lda, b, kq, zero)
                } else {
                    dot_block::<R, P, true>(a, self.flip, lda, b, kq, zero)
                }
            };
            for p in 0..P {
                let c = self.c0 + p * NR;
                let cols = (self.n - c).min(NR);
                let mask: u16 = if cols >= NR {
                    u16::MAX
                } else {
                    (1 << cols) - 1
                };
                for (r, acc) in acc.iter().enumerate() {
                    let dst = &mut out[r * ld + c..][..cols];
                    // SAFETY: the mask writes the `cols` values `dst` holds.
                    unsafe { _mm512_mask_storeu_epi32(dst.as_mut_ptr(), mask, acc[p]) };
                }
            }
        }
    }

    /// The single-precision stage's constants for the block's panels (the bias is the
    /// accumulators' start, so it is not here).
    struct FloatPanels<const P: usize> {
        scale: [__m512; P],
        hi_less_zp: __m512,
        zp: __m512i,
        lo: __m512i,
        /// Dword `d` of the result from dword `4 (d % 4) + d / 4` of the packed bytes.
        order: __m512i,
    }

    /// One block's operands: R rows of A from `a`, P panels of B from `b`.
    struct Block<'a> {
        a: &'a [u8],
        /// XORed into every four bytes of A.
        flip: i32,
        lda: usize,
        b: &'a [u8],
        kq: usize,
        n: usize,
        /// The first panel's index.
        t: usize,
        stage: &'a Stage,
        signed: bool,
    }

    impl Block<'_> {
        /// Accumulates an R x (16 P) block over the depth, then runs the output stage.
        ///
        /// # Safety
        /// As [`gemm`]'s calls: `a` holds R rows of `kq` bytes at `lda` strides, `b` P
        /// panels of `kq * NR` bytes, `out` R rows at `ld` strides holding the block's
        /// columns below n.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2")]
        #[inline]
        unsafe fn run<const R: usize, const P: usize>(&self, out: &mut [u8], ld: usize) {
            debug_assert!(self.a.len() >= (R - 1) * self.lda + self.kq);
            debug_assert!(self.b.len() >= P * self.kq * NR);
            let float = self.stage.float_constants();
            // The single-precision stage starts the accumulators at the bias (one
            // addition fewer per register); the fixed-point stage adds it itself.
            let mut start = [_mm512_setzero_si512(); P];
            if let Some(f) = &float {
                for (p, v) in start.iter_mut().enumerate() {
                    // SAFETY: the stage arrays are padded to whole panels.
                    *v = unsafe {
                        _mm512_loadu_si512(f.bias.as_ptr().add((self.t + p) * NR) as *const _)
                    };
                }
            }
            // SAFETY: the features and the operands' extents are this function's contract.
            let acc = unsafe {
                dot_block::<R, P, true>(self.a, self.flip, self.lda, self.b, self.kq, start)
            };
            // SAFETY: the features, `out` and the block's extents are this function's
            // contract; with a single-precision stage the accumulators started at the
            // bias (as `store_float` needs), otherwise at zero (as `store_fixed` needs).
            unsafe {
                match &float {
                    Some(f) => self.store_float::<R, P>(&acc, f, out, ld),
                    None => self.store_fixed::<R, P>(&acc, out, ld),
                }
            }
        }

        /// R rows of the panels `panel` names, on the kernel for them.
        ///
        /// # Safety
        /// As [`Self::run`] for those panels.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2")]
        #[inline]
        unsafe fn run_panels<const R: usize>(&self, panel: Panels, out: &mut [u8], ld: usize) {
            // SAFETY: this function's contract is `run`'s for the panels `panel` names:
            // one, two, or one and a half (`run_half`'s P = 2 case).
            unsafe {
                match panel {
                    Panels::One => self.run::<R, 1>(out, ld),
                    Panels::Two => self.run::<R, 2>(out, ld),
                    Panels::OneAndHalf => self.run_half::<R>(out, ld),
                }
            }
        }

        /// [`Self::run`] with P = 2 for a second panel of at most 8 columns: its dot
        /// products on the first half of each 64-byte quad row, in 256-bit registers,
        /// widened (upper lanes zero, never stored) for the output stage.
        ///
        /// # Safety
        /// As [`Self::run`] with P = 2.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2")]
        #[inline]
        unsafe fn run_half<const R: usize>(&self, out: &mut [u8], ld: usize) {
            debug_assert!(self.a.len() >= (R - 1) * self.lda + self.kq);
            debug_assert!(self.b.len() >= 2 * self.kq * NR);
            let float = self.stage.float_constants();
            let (mut start, mut start_half) = (_mm512_setzero_si512(), _mm256_setzero_si256());
            if let Some(f) = &float {
                let c0 = self.t * NR;
                // SAFETY: the stage arrays are padded to whole panels.
                unsafe {
                    start = _mm512_loadu_si512(f.bias.as_ptr().add(c0) as *const _);
                    start_half = _mm256_loadu_si256(f.bias.as_ptr().add(c0 + NR) as *const _);
                }
            }
            let mut acc = [start; R];
            let mut acc_half = [start_half; R];
            // Opaque to the optimizer, as in `run`.
            let flip = std::hint::black_box(_mm512_set1_epi32(self.flip));
            let ap = self.a.as_ptr();
            let bp = self.b.as_ptr();
            for q in 0..self.kq / 4 {
                // SAFETY: both panels' quad q rows end inside the two panels.
                let (b0, b1) = unsafe {
                    (
                        _mm512_loadu_si512(bp.add(q * 4 * NR) as *const _),
                        _mm256_loadu_si256(bp.add(self.kq * NR + q * 4 * NR) as *const _),
                    )
                };
                for r in 0..R {
                    // SAFETY: row r's quad q ends at r * lda + 4q + 4 <= r * lda + kq.
                    let quad =
                        unsafe { (ap.add(r * self.lda + 4 * q) as *const i32).read_unaligned() };
                    let av = _mm512_xor_si512(_mm512_set1_epi32(quad), flip);
                    acc[r] = _mm512_dpbusd_epi32(acc[r], av, b0);
                    acc_half[r] = _mm256_dpbusd_epi32(acc_half[r], _mm512_castsi512_si256(av), b1);
                }
            }
            let mut both = [[_mm512_setzero_si512(); 2]; R];
            for r in 0..R {
                both[r] = [acc[r], _mm512_zextsi256_si512(acc_half[r])];
            }
            // SAFETY: as in `run`: the contract holds for P = 2, and the accumulators
            // (the half panel's widened with zero upper lanes) started at the bias with a
            // single-precision stage, otherwise at zero.
            unsafe {
                match &float {
                    Some(f) => self.store_float::<R, 2>(&both, f, out, ld),
                    None => self.store_fixed::<R, 2>(&both, out, ld),
                }
            }
        }

        /// The single-precision stage four registers at a time: scaled and rounded under
        /// the upper bound, then saturating packs to i16, the zero point added, packs to
        /// bytes, the lower bound, and one permutation that puts each row's bytes
        /// together (two rows of 32 columns, or four of 16, per 64 bytes). Values below
        /// the lower bound saturate on the way down and end at it.
        ///
        /// # Safety
        /// As [`Self::run`]; `acc` started at the bias.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2")]
        #[inline]
        unsafe fn store_float<const R: usize, const P: usize>(
            &self,
            acc: &[[__m512i; P]; R],
            f: &super::super::gemm::FloatConstants,
            out: &mut [u8],
            ld: usize,
        ) {
            let c0 = self.t * NR;
            let mut scale = [_mm512_setzero_ps(); P];
            for (p, s) in scale.iter_mut().enumerate() {
                // SAFETY: the stage arrays are padded to whole panels.
                *s = unsafe { _mm512_loadu_ps(f.scale.as_ptr().add(c0 + p * NR)) };
            }
            let k = FloatPanels::<P> {
                scale,
                hi_less_zp: _mm512_set1_ps(f.hi_less_zp),
                zp: _mm512_set1_epi16(f.zp as i16),
                lo: _mm512_set1_epi8((f.lo_less_zp as i32 + f.zp) as i8),
                order: _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0),
            };
            let scaled = |r: usize, p: usize| {
                let v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[r][p]), k.scale[p]);
                // The default MXCSR rounding: to nearest, ties to even.
                _mm512_cvtps_epi32(_mm512_min_ps(v, k.hi_less_zp))
            };
            let narrow = |q: [__m512i; 4]| {
                let w01 = _mm512_adds_epi16(_mm512_packs_epi32(q[0], q[1]), k.zp);
                let w23 = _mm512_adds_epi16(_mm512_packs_epi32(q[2], q[3]), k.zp);
                let bytes = if self.signed {
                    _mm512_max_epi8(_mm512_packs_epi16(w01, w23), k.lo)
                } else {
                    _mm512_max_epu8(_mm512_packus_epi16(w01, w23), k.lo)
                };
                _mm512_permutexvar_epi32(k.order, bytes)
            };
            let cols = (self.n - c0).min(P * NR);
            let op = out.as_mut_ptr();
            if P == 2 {
                let mask = if cols == 32 {
                    u32::MAX
                } else {
                    (1u32 << cols) - 1
                };
                let mut r = 0;
                while r < R {
                    // An odd last row is paired with itself; its copy is not stored.
                    let r1 = (r + 1).min(R - 1);
                    let bytes = narrow([scaled(r, 0), scaled(r, 1), scaled(r1, 0), scaled(r1, 1)]);
                    let halves = [
                        _mm512_castsi512_si256(bytes),
                        _mm512_extracti64x4_epi64::<1>(bytes),
                    ];
                    for (i, half) in halves.into_iter().enumerate().take(R - r) {
                        // SAFETY: row r + i < R holds the block's columns c0..c0 + cols.
                        unsafe {
                            let dst = op.add((r + i) * ld + c0);
                            if cols == 32 {
                                _mm256_storeu_si256(dst as *mut __m256i, half);
                            } else {
                                _mm256_mask_storeu_epi8(dst as *mut i8, mask, half);
                            }
                        }
                    }
                    r += 2;
                }
            } else {
                let mask = if cols == 16 {
                    u16::MAX
                } else {
                    (1u16 << cols) - 1
                };
                let mut r = 0;
                while r < R {
                    let at = |i: usize| scaled((r + i).min(R - 1), 0);
                    let bytes = narrow([at(0), at(1), at(2), at(3)]);
                    let quarters = [
                        _mm512_castsi512_si128(bytes),
                        _mm512_extracti32x4_epi32::<1>(bytes),
                        _mm512_extracti32x4_epi32::<2>(bytes),
                        _mm512_extracti32x4_epi32::<3>(bytes),
                    ];
                    for (i, quarter) in quarters.into_iter().enumerate().take(R - r) {
                        // SAFETY: row r + i < R holds the block's columns c0..c0 + cols.
                        unsafe {
                            let dst = op.add((r + i) * ld + c0);
                            if cols == 16 {
                                _mm_storeu_si128(dst as *mut __m128i, quarter);
                            } else {
                                _mm_mask_storeu_epi8(dst as *mut i8, mask, quarter);
                            }
                        }
                    }
                    r += 4;
                }
            }
        }

        /// The fixed-point stage through the AVX2 code, 8 lanes at a time.
        ///
        /// # Safety
        /// As [`Self::run`]; `acc` started at zero.
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2")]
        #[inline]
        unsafe fn store_fixed<const R: usize, const P: usize>(
            &self,
            acc: &[[__m512i; P]; R],
            out: &mut [u8],
            ld: usize,
        ) {
            for p in 0..P {
                let c0 = (self.t + p) * NR;
                let cols = (self.n - c0).min(NR);
                // SAFETY: the stage arrays are padded to whole panels, and c0 is a
                // multiple of 16.
                let (s0, s1) =
                    unsafe { (load_stage(self.stage, c0), load_stage(self.stage, c0 + 8)) };
                for (r, acc) in acc.iter().enumerate() {
                    let lo = _mm512_castsi512_si256(acc[p]);
                    let hi = _mm512_extracti64x4_epi64::<1>(acc[p]);
                    let bytes = narrow16(requant8(lo, &s0), requant8(hi, &s1), self.signed);
                    store16(&mut out[r * ld + c0..][..cols], bytes);
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::arith::Multiplier;
    use super::super::gemm::{self as wide, Dst};
    use super::*;

    use super::super::gemm::tests::Rng;

    /// A random `k x n` matrix of signed bytes, packed, and its column sums.
    pub(crate) fn random_rhs(rng: &mut Rng, k: usize, n: usize) -> (Vec<i8>, Vec<u8>, Vec<i32>) {
        let b: Vec<i8> = (0..k * n).map(|_| rng.range(-128, 127) as i8).collect();
        let mut packed = vec![0u8; packed_len(k, n).unwrap()];
        let sums = pack_rhs(k, n, |kk, j| b[kk * n + j], &mut packed);
        (b, packed, sums)
    }

    /// Random u8 activations with zero point `a_zp` and i8 weights: the bytes of the
    /// 8-bit path must equal those of the i16 path on `(a - a_zp)` and `b`, in both
    /// requantizations and with the stage's bias corrected.
    #[test]
    fn outputs_equal_the_widened_gemm() {
        let mut rng = Rng(0x5151_2323_8989_0101);
        let mut paths = vec![false];
        if available() {
            paths.push(true);
        }
        for case in 0..80 {
            let m = rng.range(1, 20) as usize;
            let k = rng.range(1, 200) as usize;
            let n = rng.range(1, 70) as usize;
            let a_zp = rng.range(0, 255);
            let kq = quad_depth(k);
            let lda = kq + 4 * rng.range(0, 2) as usize;
            let a: Vec<u8> = (0..m * lda).map(|_| rng.range(0, 255) as u8).collect();
            // Half the cases read A through the int8 offset: the same unsigned values
            // stored flipped.
            let flip = if case % 4 < 2 { 0x80 } else { 0 };
            let stored: Vec<u8> = a.iter().map(|&v| v ^ flip).collect();
            let (b, packed, sums) = random_rhs(&mut rng, k, n);
            let bias: Vec<i32> = (0..n).map(|_| rng.range(-100_000, 100_000)).collect();
            let mults: Vec<Multiplier> = (0..n)
                .map(|_| Multiplier::new(2f64.powi(rng.range(-20, -6))).unwrap())
                .collect();
            let scales: Vec<f32> = (0..n)
                .map(|_| 2f32.powi(rng.range(-20, -6)) * 1.3)
                .collect();
            let signed = case % 2 == 0;
            // Every fifth case clamps to an activation's range inside the type's.
            let range = match (signed, case % 5 == 0) {
                (true, false) => (-128, 127),
                (true, true) => (-100, 90),
                (false, false) => (0, 255),
                (false, true) => (20, 230),
            };
            let zp = rng.range(range.0, range.1);
            let float = case % 3 == 0;
            let stage_with = |bias: &[i32]| {
                let s = Stage::new(n, Some(bias), &mults, zp, range).unwrap();
                if float {
                    s.float_scales(&scales).unwrap()
                } else {
                    s
                }
            };
            // The reference: widened operands through the i16 GEMM.
            let kp = wide::padded_depth(k);
            let mut wa = vec![0i16; m * kp];
            for r in 0..m {
                for kk in 0..k {
                    wa[r * kp + kk] = (i32::from(a[r * lda + kk]) - a_zp) as i16;
                }
            }
            let mut wb = vec![0i16; wide::packed_len(k, n).unwrap()];
            wide::pack_rhs(k, n, |kk, j| i16::from(b[kk * n + j]), &mut wb);
            let reference_stage = stage_with(&bias);
            let mut want = vec![0u8; m * n];
            let rhs = wide::PackedRhs { data: &wb, k, n };
            wide::gemm_with(
                wide::Isa::Portable,
                &wa,
                kp,
                m,
                &rhs,
                Dst::Q8 {
                    out: &mut want,
                    ld: n,
                    stage: &reference_stage,
                    signed,
                },
            )
            .unwrap();
            let stage = stage_with(&corrected_bias(Some(&bias), &sums, a_zp));
            for &vnni in &paths {
                let ld = n + 5;
                let mut got = vec![0u8; m * ld];
                let rhs = PackedRhs {
                    data: &packed,
                    k,
                    n,
                };
                gemm(
                    vnni, &stored, flip, lda, m, &rhs, &mut got, ld, &stage, signed,
                )
                .unwrap();
                for r in 0..m {
                    assert_eq!(
                        &got[r * ld..r * ld + n],
                        &want[r * n..(r + 1) * n],
                        "case {case} vnni {vnni} row {r} (m {m} k {k} n {n})"
                    );
                }
            }
        }
    }

    /// The raw sums of the dot-product kernel equal the portable ones, with and without
    /// the int8 offset.
    #[test]
    fn raw_sums_equal_the_portable_path() {
        if !i32_available() {
            return;
        }
        let mut rng = Rng(0x0123_4567_89ab_cdef);
        for case in 0..60 {
            let m = rng.range(1, 20) as usize;
            let k = rng.range(1, 200) as usize;
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
            let ld = n + 1;
            let (mut want, mut got) = (vec![0i32; m * ld], vec![0i32; m * ld]);
            gemm_i32(false, &a, flip, kq, m, &rhs, &mut want, ld).unwrap();
            gemm_i32(true, &a, flip, kq, m, &rhs, &mut got, ld).unwrap();
            for r in 0..m {
                assert_eq!(
                    &got[r * ld..r * ld + n],
                    &want[r * ld..r * ld + n],
                    "case {case}"
                );
            }
        }
    }

    #[test]
    fn short_operands_are_errors() {
        let stage = Stage::new(3, None, &[Multiplier::new(0.5).unwrap()], 0, (0, 255)).unwrap();
        let packed = vec![0u8; packed_len(5, 3).unwrap()];
        let rhs = PackedRhs {
            data: &packed,
            k: 5,
            n: 3,
        };
        let mut out = vec![0u8; 6];
        assert!(gemm(false, &[0u8; 7], 0, 8, 1, &rhs, &mut out, 3, &stage, false).is_err());
        assert!(
            gemm(
                false,
                &[0u8; 16],
                0,
                8,
                2,
                &rhs,
                &mut out[..4],
                3,
                &stage,
                false
            )
            .is_err()
        );
        assert!(gemm(false, &[0u8; 16], 0, 8, 2, &rhs, &mut out, 3, &stage, false).is_ok());
    }
}
