//! Integer GEMM with i32 accumulation and a fused requantizing output stage.
//!
//! `C[m x n] = A[m x k] * B[k x n]` where A holds activations and B weights, both already
//! offset by their zero points and widened to i16 (so every product is exact and no
//! zero-point correction terms are needed: `(x - x_zp) * (w - w_zp)` is what TFLite's
//! reference kernels accumulate). Operands lie in [-255, 255], so a pair of products
//! fits an i32 lane and AVX2's `vpmaddwd` computes exactly what the scalar code does.
//!
//! Layouts:
//! - A: row-major i16 rows of `kp` values (`kp` = k rounded up to even, the pad zero).
//! - B ([`pack_rhs`]): panels of [`NR`] = 16 columns; within a panel, for every pair of
//!   rows `(2p, 2p + 1)` the 16 columns' values interleaved as
//!   `b[2p][j], b[2p + 1][j]` (so one 32-bit broadcast of an A pair multiplies a whole
//!   row of a panel). Columns past n and the pad row are zero.
//!
//! The micro-kernel computes a [`MR`] x 16 block in registers (12 accumulators), loops
//! run panel-major so that a panel (at most `kp * 32` bytes) stays in L1 while the rows
//! of the current A tile stream past it. The output stage adds the bias, requantizes
//! per column (TFLite's `MultiplyByQuantizedMultiplier`), adds the zero point, clamps to
//! the activation range and stores bytes; or stores raw i32 for callers that finish
//! themselves (TRANSPOSE_CONV_2D).
//!
//! Implementations chosen at run time: AVX2 intrinsics, NEON intrinsics on 64-bit Arm
//! ([`super::gemm_neon::gemm_i16`]), and portable scalar code that computes
//! bit-identical results (tests compare them on random data).

use super::arith::{Multiplier, multiply_by_quantized_multiplier};
use crate::error::{Result, RuntimeError};
use crate::kernels::util::matrix_extent;

/// Columns per packed panel.
pub(crate) const NR: usize = 16;
/// Rows per micro-kernel block.
pub(crate) const MR: usize = 6;

/// `k` rounded up to even (the depth of packed A rows and B panels).
pub(crate) fn padded_depth(k: usize) -> usize {
    k + (k & 1)
}

/// i16 values of a packed B of `k` x `n`.
pub(crate) fn packed_len(k: usize, n: usize) -> Option<usize> {
    padded_depth(k).checked_mul(n.div_ceil(NR))?.checked_mul(NR)
}

/// Packs B (`k` x `n`, element (kk, j) from `get`) into `out` (see the module docs).
pub(crate) fn pack_rhs(k: usize, n: usize, get: impl Fn(usize, usize) -> i16, out: &mut [i16]) {
    let kp = padded_depth(k);
    let panels = n.div_ceil(NR);
    for t in 0..panels {
        let panel = &mut out[t * kp * NR..(t + 1) * kp * NR];
        for p in 0..kp / 2 {
            let row = &mut panel[p * 2 * NR..(p + 1) * 2 * NR];
            for j in 0..NR {
                let col = t * NR + j;
                for h in 0..2 {
                    let kk = 2 * p + h;
                    row[2 * j + h] = if col < n && kk < k { get(kk, col) } else { 0 };
                }
            }
        }
    }
}

/// A packed B and its dimensions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PackedRhs<'a> {
    pub data: &'a [i16],
    pub k: usize,
    pub n: usize,
}

/// The per-column output stage: bias, requantization, zero point and clamp. Arrays are
/// padded to whole panels.
#[derive(Clone, Debug)]
pub(crate) struct Stage {
    n: usize,
    bias: Vec<i32>,
    mult: Vec<i32>,
    lshift: Vec<i32>,
    rshift: Vec<i32>,
    /// `(1 << rshift) - 1` and half of it: the rounding-divide constants.
    mask: Vec<i32>,
    half: Vec<i32>,
    zp: i32,
    lo: i32,
    hi: i32,
    /// Single rounding (ruy's `MultiplyByQuantizedMultiplier`, which TFLite's
    /// FULLY_CONNECTED reaches): per column the total right shift `31 - shift` and its
    /// rounding term, as i64, in blocks of 8 columns with the even columns first.
    single: Option<(Vec<i64>, Vec<i64>)>,
    /// Single-precision requantization ([`crate::kernels::Requantization::Float`]): per column the
    /// scale, and the clamp range less the zero point, as f32.
    float: Option<FloatStage>,
}

/// [`Stage::float_constants`]: per column (padded to whole panels) the bias and scale;
/// the clamp range less the zero point (as f32) and the zero point.
/// [`Stage::apply`] is the definition of what they compute.
pub(crate) struct FloatConstants<'a> {
    pub bias: &'a [i32],
    pub scale: &'a [f32],
    pub lo_less_zp: f32,
    pub hi_less_zp: f32,
    pub zp: i32,
}

/// The constants of the single-precision output stage.
#[derive(Clone, Debug)]
struct FloatStage {
    scale: Vec<f32>,
    lo: f32,
    hi: f32,
}

/// Where column `j`'s single-rounding constants live (even columns of each block of 8
/// first, matching the even/odd 64-bit products of AVX2).
fn permuted(j: usize) -> usize {
    let w = j % 8;
    j / 8 * 8
        + if w.is_multiple_of(2) {
            w / 2
        } else {
            4 + w / 2
        }
}

impl Stage {
    /// `multipliers` holds one entry (per tensor) or one per column; `bias` one per
    /// column or nothing.
    pub fn new(
        n: usize,
        bias: Option<&[i32]>,
        multipliers: &[Multiplier],
        zp: i32,
        (lo, hi): (i32, i32),
    ) -> Result<Stage> {
        if multipliers.len() != 1 && multipliers.len() != n {
            return Err(RuntimeError::kernel(format!(
                "{} requantization multipliers for {n} channels",
                multipliers.len()
            )));
        }
        if let Some(b) = bias
            && b.len() != n
        {
            return Err(RuntimeError::kernel(format!(
                "bias of {} values for {n} channels",
                b.len()
            )));
        }
        let padded = n.div_ceil(NR) * NR;
        let mut s = Stage {
            n,
            bias: vec![0; padded],
            mult: vec![0; padded],
            lshift: vec![0; padded],
            rshift: vec![0; padded],
            mask: vec![0; padded],
            half: vec![0; padded],
            zp,
            lo,
            hi,
            single: None,
            float: None,
        };
        for j in 0..n {
            let m = multipliers[if multipliers.len() == 1 { 0 } else { j }];
            if !(-31..=31).contains(&m.shift) || m.multiplier < 0 {
                return Err(RuntimeError::kernel(
                    "requantization multiplier out of range",
                ));
            }
            s.bias[j] = bias.map_or(0, |b| b[j]);
            s.mult[j] = m.multiplier;
            s.lshift[j] = m.shift.max(0);
            s.rshift[j] = (-m.shift).max(0);
            s.mask[j] = ((1i64 << s.rshift[j]) - 1) as i32;
            s.half[j] = s.mask[j] >> 1;
        }
        Ok(s)
    }

    /// Switches to single rounding: `(x * multiplier + 2^(30 - shift)) >> (31 - shift)`
    /// in 64 bits, rounding once, ties toward +infinity (ruy's
    /// `MultiplyByQuantizedMultiplier`, on TFLite's FULLY_CONNECTED path).
    pub fn single_rounding(mut self) -> Result<Stage> {
        let padded = self.mult.len();
        let mut shifts = vec![1i64; padded];
        let mut rounds = vec![0i64; padded];
        for j in 0..self.n {
            let shift = self.shift(j);
            if shift > 30 {
                return Err(RuntimeError::kernel(
                    "requantization multiplier out of range",
                ));
            }
            let total = i64::from(31 - shift);
            shifts[permuted(j)] = total;
            rounds[permuted(j)] = 1i64 << (total - 1);
        }
        self.single = Some((shifts, rounds));
        Ok(self)
    }

    /// Switches to single-precision requantization: the accumulator plus bias converted
    /// to f32, times the f32 scale `input_scale * filter_scale / output_scale`, clamped
    /// to the activation range less the zero point, rounded half to even, plus the zero
    /// point. `scales` holds one entry (per tensor) or one per column.
    pub fn float_scales(mut self, scales: &[f32]) -> Result<Stage> {
        if scales.len() != 1 && scales.len() != self.n {
            return Err(RuntimeError::kernel(format!(
                "{} requantization scales for {} channels",
                scales.len(),
                self.n
            )));
        }
        if scales.iter().any(|s| !s.is_finite() || *s <= 0.0) {
            return Err(RuntimeError::kernel(
                "requantization scale is not a positive finite number",
            ));
        }
        let mut scale = vec![0f32; self.mult.len()];
        for (j, s) in scale.iter_mut().enumerate().take(self.n) {
            *s = scales[if scales.len() == 1 { 0 } else { j }];
        }
        self.float = Some(FloatStage {
            scale,
            lo: (self.lo - self.zp) as f32,
            hi: (self.hi - self.zp) as f32,
        });
        Ok(self)
    }

    pub fn columns(&self) -> usize {
        self.n
    }

    /// The single-precision stage's constants, for kernels with vector code of their own
    /// (`None` in the fixed-point requantizations).
    pub(crate) fn float_constants(&self) -> Option<FloatConstants<'_>> {
        self.float.as_ref().map(|f| FloatConstants {
            bias: &self.bias,
            scale: &f.scale,
            lo_less_zp: f.lo,
            hi_less_zp: f.hi,
            zp: self.zp,
        })
    }

    fn shift(&self, j: usize) -> i32 {
        if self.lshift[j] > 0 {
            self.lshift[j]
        } else {
            -self.rshift[j]
        }
    }

    /// The stored value of column `j` for accumulator `acc` (before narrowing).
    #[inline(always)]
    pub fn apply(&self, j: usize, acc: i32) -> i32 {
        let x = acc.wrapping_add(self.bias[j]);
        if let Some(f) = &self.float {
            // Clamping before the conversion keeps out-of-range products defined; the
            // bounds are integers, so it commutes with the rounding.
            let v = (x as f32 * f.scale[j]).clamp(f.lo, f.hi);
            return (v.round_ties_even() as i32).wrapping_add(self.zp);
        }
        let v = match &self.single {
            Some((shifts, rounds)) => {
                let k = permuted(j);
                // Truncated to 32 bits as the C++ cast does.
                ((i64::from(x) * i64::from(self.mult[j]) + rounds[k]) >> shifts[k]) as i32
            }
            None => multiply_by_quantized_multiplier(x, self.mult[j], self.shift(j)),
        };
        v.wrapping_add(self.zp).clamp(self.lo, self.hi)
    }
}

/// Where the product goes.
pub(crate) enum Dst<'a> {
    /// Requantized 8-bit values, row `r` at `out[r * ld..]`, through `stage`.
    Q8 {
        out: &'a mut [u8],
        ld: usize,
        stage: &'a Stage,
        /// Read by the vector stages' saturating narrows (the portable stage stores
        /// the two's complement byte either way).
        #[cfg_attr(
            not(any(target_arch = "x86_64", target_arch = "aarch64")),
            allow(dead_code)
        )]
        signed: bool,
    },
    /// Raw i32 accumulators (no bias), row `r` at `out[r * ld..]`.
    I32 { out: &'a mut [i32], ld: usize },
}

/// Which implementation to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// 64-bit Arm: `SMLAL` on the interleaved pairs ([`super::gemm_neon::gemm_i16`]).
    #[cfg(target_arch = "aarch64")]
    Neon,
}

/// The best implementation this CPU supports (checked once).
pub(crate) fn best_isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::isa::int8_avx2() {
        return Isa::Avx2;
    }
    #[cfg(target_arch = "aarch64")]
    if crate::kernels::isa::int8_neon() {
        return Isa::Neon;
    }
    Isa::Portable
}

/// `dst = A (m x k, rows of `lda` i16) * B`, with the best implementation.
pub(crate) fn gemm(a: &[i16], lda: usize, m: usize, b: &PackedRhs, dst: Dst) -> Result<()> {
    gemm_with(best_isa(), a, lda, m, b, dst)
}

/// [`gemm`] with a chosen implementation (tests run both).
pub(crate) fn gemm_with(
    isa: Isa,
    a: &[i16],
    lda: usize,
    m: usize,
    b: &PackedRhs,
    dst: Dst,
) -> Result<()> {
    let kp = padded_depth(b.k);
    let n = b.n;
    let bad = |what: &str| RuntimeError::Internal(format!("quantized GEMM: {what}"));
    if lda < kp || matrix_extent(m, lda, kp).is_none_or(|e| e > a.len()) {
        return Err(bad("left operand too short"));
    }
    if packed_len(b.k, n) != Some(b.data.len()) {
        return Err(bad("packed right operand has the wrong size"));
    }
    match &dst {
        Dst::Q8 { out, ld, stage, .. } => {
            if *ld < n || matrix_extent(m, *ld, n).is_none_or(|e| e > out.len()) {
                return Err(bad("destination too short"));
            }
            if stage.n != n {
                return Err(bad("output stage does not match the columns"));
            }
        }
        Dst::I32 { out, ld } => {
            if *ld < n || matrix_extent(m, *ld, n).is_none_or(|e| e > out.len()) {
                return Err(bad("destination too short"));
            }
        }
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    match isa {
        Isa::Portable => portable::gemm(a, lda, m, b.data, kp, n, dst),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            if best_isa() != Isa::Avx2 {
                return Err(bad("AVX2 requested on a CPU without it"));
            }
            // SAFETY: AVX2 is available (checked just above); every index the kernel
            // forms is inside the slices, whose extents were checked above: A rows
            // `r < m` of `kp <= lda` values, B panels of `kp * NR` values, destination
            // rows `r < m` of `n <= ld` values, stage arrays padded to whole panels.
            unsafe { avx2::gemm(a, lda, m, b.data, kp, n, dst) }
        }
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => {
            if best_isa() != Isa::Neon {
                return Err(bad("NEON requested on a CPU without it"));
            }
            // SAFETY: NEON is available (checked just above); the extents were checked
            // above, as for the AVX2 kernel.
            unsafe { super::gemm_neon::gemm_i16(a, lda, m, b.data, kp, n, dst) }
        }
    }
    Ok(())
}

mod portable {
    use super::{Dst, MR, NR};

    pub(super) fn gemm(a: &[i16], lda: usize, m: usize, b: &[i16], kp: usize, n: usize, dst: Dst) {
        let panels = n.div_ceil(NR);
        let mut dst = dst;
        for t in 0..panels {
            let panel = &b[t * kp * NR..(t + 1) * kp * NR];
            let cols = (n - t * NR).min(NR);
            let mut r0 = 0;
            while r0 < m {
                let rows = (m - r0).min(MR);
                let mut acc = [[0i32; NR]; MR];
                for (r, acc_row) in acc.iter_mut().enumerate().take(rows) {
                    let arow = &a[(r0 + r) * lda..(r0 + r) * lda + kp];
                    for (p, pair) in arow.chunks_exact(2).enumerate() {
                        let brow = &panel[p * 2 * NR..(p + 1) * 2 * NR];
                        let (a0, a1) = (i32::from(pair[0]), i32::from(pair[1]));
                        for (j, acc) in acc_row.iter_mut().enumerate() {
                            // What vpmaddwd computes: the pair sum, wrapping in i32.
                            let s = (a0 * i32::from(brow[2 * j]))
                                .wrapping_add(a1 * i32::from(brow[2 * j + 1]));
                            *acc = acc.wrapping_add(s);
                        }
                    }
                }
                for (r, acc_row) in acc.iter().enumerate().take(rows) {
                    match &mut dst {
                        Dst::Q8 { out, ld, stage, .. } => {
                            let row = &mut out[(r0 + r) * *ld + t * NR..][..cols];
                            for (j, o) in row.iter_mut().enumerate() {
                                // The clamp keeps the value in the 8-bit range; the byte
                                // is its two's complement either way.
                                *o = stage.apply(t * NR + j, acc_row[j]) as u8;
                            }
                        }
                        Dst::I32 { out, ld } => {
                            out[(r0 + r) * *ld + t * NR..][..cols]
                                .copy_from_slice(&acc_row[..cols]);
                        }
                    }
                }
                r0 += rows;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{Dst, MR, NR, Stage};

    /// # Safety
    /// The CPU supports AVX2, and the slices have the extents [`super::gemm_with`]
    /// checks.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn gemm(
        a: &[i16],
        lda: usize,
        m: usize,
        b: &[i16],
        kp: usize,
        n: usize,
        dst: Dst,
    ) {
        let panels = n.div_ceil(NR);
        let mut dst = dst;
        for t in 0..panels {
            let panel = &b[t * kp * NR..(t + 1) * kp * NR];
            let cols = (n - t * NR).min(NR);
            let mut r0 = 0;
            while r0 < m {
                let rows = (m - r0).min(MR);
                let a0 = &a[r0 * lda..];
                // SAFETY: AVX2 is this function's contract; `a0` starts at row r0 and
                // holds rows r0..r0 + rows <= m of kp values at lda strides, the panel
                // slice holds kp * NR values, and the destination rows are this
                // function's contract (each call is one of these for its R = rows).
                unsafe {
                    match rows {
                        6 => block::<6>(a0, lda, panel, kp, &mut dst, r0, t, cols),
                        5 => block::<5>(a0, lda, panel, kp, &mut dst, r0, t, cols),
                        4 => block::<4>(a0, lda, panel, kp, &mut dst, r0, t, cols),
                        3 => block::<3>(a0, lda, panel, kp, &mut dst, r0, t, cols),
                        2 => block::<2>(a0, lda, panel, kp, &mut dst, r0, t, cols),
                        _ => block::<1>(a0, lda, panel, kp, &mut dst, r0, t, cols),
                    }
                }
                r0 += rows;
            }
        }
    }

    /// One R x 16 block: accumulate over the depth, then run the output stage.
    ///
    /// # Safety
    /// AVX2; `a` holds R rows of `kp` values at `lda` strides, `panel` `kp * NR` values;
    /// the destination rows r0..r0 + R hold columns t * NR + cols.
    #[target_feature(enable = "avx2")]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    unsafe fn block<const R: usize>(
        a: &[i16],
        lda: usize,
        panel: &[i16],
        kp: usize,
        dst: &mut Dst,
        r0: usize,
        t: usize,
        cols: usize,
    ) {
        debug_assert!(a.len() >= (R - 1) * lda + kp && panel.len() >= kp * NR);
        let mut acc = [[_mm256_setzero_si256(); 2]; R];
        let ap = a.as_ptr();
        let bp = panel.as_ptr();
        for p in 0..kp / 2 {
            // SAFETY: p < kp / 2, so the two 16-value loads end at (p + 1) * 32 <=
            // kp * NR, and the A pair at row r ends at r * lda + 2p + 2 <= r * lda + kp.
            unsafe {
                let b0 = _mm256_loadu_si256(bp.add(p * 2 * NR) as *const __m256i);
                let b1 = _mm256_loadu_si256(bp.add(p * 2 * NR + 16) as *const __m256i);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let pair = (ap.add(r * lda + 2 * p) as *const i32).read_unaligned();
                    let av = _mm256_set1_epi32(pair);
                    acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(av, b0));
                    acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(av, b1));
                }
            }
        }
        match dst {
            Dst::Q8 {
                out,
                ld,
                stage,
                signed,
            } => {
                let c0 = t * NR;
                // SAFETY: the stage arrays are padded to whole panels; c0 is a multiple
                // of 16.
                let (s0, s1) = unsafe { (load_stage(stage, c0), load_stage(stage, c0 + 8)) };
                for (r, acc) in acc.iter().enumerate() {
                    let bytes = narrow16(requant8(acc[0], &s0), requant8(acc[1], &s1), *signed);
                    store16(&mut out[(r0 + r) * *ld + c0..][..cols], bytes);
                }
            }
            Dst::I32 { out, ld } => {
                for (r, acc) in acc.iter().enumerate() {
                    let mut tmp = [0i32; NR];
                    // SAFETY: tmp holds NR i32 values.
                    unsafe {
                        _mm256_storeu_si256(tmp.as_mut_ptr() as *mut __m256i, acc[0]);
                        _mm256_storeu_si256(tmp.as_mut_ptr().add(8) as *mut __m256i, acc[1]);
                    }
                    out[(r0 + r) * *ld + t * NR..][..cols].copy_from_slice(&tmp[..cols]);
                }
            }
        }
    }

    /// [`super::requantize_row`] on whole blocks of 16 columns below `n`; returns how
    /// many columns it wrote.
    ///
    /// # Safety
    /// AVX2; `n` is at most `acc.len()`, `out.len()` and the stage's columns.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn requantize_prefix(
        acc: &[i32],
        stage: &Stage,
        out: &mut [u8],
        n: usize,
        signed: bool,
    ) -> usize {
        debug_assert!(n <= acc.len() && n <= out.len() && n <= stage.columns());
        let mut c = 0;
        while c + NR <= n {
            // SAFETY: acc and out hold c + 16 values, the stage arrays are padded to
            // whole panels (>= n rounded up to 16).
            unsafe {
                let v0 = _mm256_loadu_si256(acc.as_ptr().add(c) as *const __m256i);
                let v1 = _mm256_loadu_si256(acc.as_ptr().add(c + 8) as *const __m256i);
                let (s0, s1) = (load_stage(stage, c), load_stage(stage, c + 8));
                let bytes = narrow16(requant8(v0, &s0), requant8(v1, &s1), signed);
                _mm_storeu_si128(out.as_mut_ptr().add(c) as *mut __m128i, bytes);
            }
            c += NR;
        }
        c
    }

    /// The stage constants of 8 columns, loaded once and applied to many rows.
    #[derive(Clone, Copy)]
    pub(crate) struct Stage8 {
        bias: __m256i,
        mult: __m256i,
        mult_odd: __m256i,
        lsh: __m256i,
        rsh: __m256i,
        mask: __m256i,
        half: __m256i,
        /// Single rounding: total shifts and rounding terms of the even and odd columns.
        single: Option<[__m256i; 4]>,
        /// Single precision: scales, and the clamp range less the zero point.
        float: Option<[__m256; 3]>,
        zp: __m256i,
        lo: __m256i,
        hi: __m256i,
    }

    /// Loads the stage constants of columns c..c + 8.
    ///
    /// # Safety
    /// AVX2; c is a multiple of 8 and the stage arrays (padded to whole panels) hold at
    /// least c + 8 values.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) unsafe fn load_stage(s: &Stage, c: usize) -> Stage8 {
        debug_assert!(c.is_multiple_of(8) && s.mult.len() >= c + 8);
        let load = |v: &[i32]| {
            // SAFETY: v holds c + 8 values (caller's contract).
            unsafe { _mm256_loadu_si256(v.as_ptr().add(c) as *const __m256i) }
        };
        let load64 = |v: &[i64], at: usize| {
            // SAFETY: the permuted arrays have the padded length too.
            unsafe { _mm256_loadu_si256(v.as_ptr().add(at) as *const __m256i) }
        };
        let mult = load(&s.mult);
        Stage8 {
            bias: load(&s.bias),
            mult,
            mult_odd: _mm256_shuffle_epi32(mult, 0b11_11_01_01),
            lsh: load(&s.lshift),
            rsh: load(&s.rshift),
            mask: load(&s.mask),
            half: load(&s.half),
            single: s.single.as_ref().map(|(shifts, rounds)| {
                [
                    load64(shifts, c),
                    load64(shifts, c + 4),
                    load64(rounds, c),
                    load64(rounds, c + 4),
                ]
            }),
            float: s.float.as_ref().map(|f| {
                [
                    // SAFETY: the scale array has the padded length too.
                    unsafe { _mm256_loadu_ps(f.scale.as_ptr().add(c)) },
                    _mm256_set1_ps(f.lo),
                    _mm256_set1_ps(f.hi),
                ]
            }),
            zp: _mm256_set1_epi32(s.zp),
            lo: _mm256_set1_epi32(s.lo),
            hi: _mm256_set1_epi32(s.hi),
        }
    }

    /// The output stage on 8 accumulators, as i32 in the clamp range: bias, TFLite's
    /// `MultiplyByQuantizedMultiplier` (or ruy's single-rounding one), zero point, clamp.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn requant8(acc: __m256i, s: &Stage8) -> __m256i {
        let zero = _mm256_setzero_si256();
        let q = if let Some([scale, lo, hi]) = s.float {
            let x = _mm256_cvtepi32_ps(_mm256_add_epi32(acc, s.bias));
            let v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(x, scale), lo), hi);
            // The default MXCSR rounding: to nearest, ties to even.
            _mm256_cvtps_epi32(v)
        } else if let Some([se, so, re, ro]) = s.single {
            let x = _mm256_add_epi32(acc, s.bias);
            let even = _mm256_add_epi64(_mm256_mul_epi32(x, s.mult), re);
            let odd = _mm256_add_epi64(
                _mm256_mul_epi32(_mm256_shuffle_epi32(x, 0b11_11_01_01), s.mult_odd),
                ro,
            );
            // Arithmetic 64-bit shifts from logical ones: !((!v) >> n) for negative v.
            let arith = |v: __m256i, n: __m256i| {
                let sign = _mm256_cmpgt_epi64(zero, v);
                _mm256_xor_si256(_mm256_srlv_epi64(_mm256_xor_si256(v, sign), n), sign)
            };
            let even = arith(even, se);
            let odd = _mm256_slli_epi64(arith(odd, so), 32);
            _mm256_blend_epi32(even, odd, 0b1010_1010)
        } else {
            let x = _mm256_sllv_epi32(_mm256_add_epi32(acc, s.bias), s.lsh);
            // SaturatingRoundingDoublingHighMul with a non-negative multiplier: the
            // 64-bit product p, then floor((p + 2^30) / 2^31), which equals gemmlowp's
            // truncating division of p + nudge for either sign of p. Only bits 31..62 of
            // p + 2^30 are kept, so logical shifts give the same bits as arithmetic ones.
            let nudge = _mm256_set1_epi64x(1 << 30);
            let even = _mm256_mul_epi32(x, s.mult);
            // The odd lanes moved down by a shuffle (not a shift: the sign bits must stay,
            // or the multiply is rewritten as an unsigned one plus corrections).
            let odd = _mm256_mul_epi32(_mm256_shuffle_epi32(x, 0b11_11_01_01), s.mult_odd);
            let even = _mm256_srli_epi64(_mm256_add_epi64(even, nudge), 31);
            let odd = _mm256_slli_epi64(_mm256_add_epi64(odd, nudge), 1);
            let high = _mm256_blend_epi32(even, odd, 0b1010_1010);
            // RoundingDivideByPOT: arithmetic shift plus one when the remainder exceeds
            // half the divisor (half + 1 for negative values).
            let negative = _mm256_cmpgt_epi32(zero, high);
            let threshold = _mm256_sub_epi32(s.half, negative);
            let remainder = _mm256_and_si256(high, s.mask);
            let round_up = _mm256_cmpgt_epi32(remainder, threshold);
            _mm256_sub_epi32(_mm256_srav_epi32(high, s.rsh), round_up)
        };
        let q = _mm256_add_epi32(q, s.zp);
        _mm256_min_epi32(_mm256_max_epi32(q, s.lo), s.hi)
    }

    /// Stores the first `dst.len()` (at most 16) of `bytes`: one unaligned store for a
    /// whole 16, through a buffer for a last partial block of columns.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn store16(dst: &mut [u8], bytes: __m128i) {
        let mut tmp = [0u8; 16];
        let whole = dst.len() == 16;
        let at = if whole {
            dst.as_mut_ptr()
        } else {
            tmp.as_mut_ptr()
        };
        // SAFETY: `at` points at 16 writable bytes: `dst` when it holds 16, else `tmp`.
        unsafe { _mm_storeu_si128(at as *mut __m128i, bytes) };
        if !whole {
            let n = dst.len().min(16);
            dst[..n].copy_from_slice(&tmp[..n]);
        }
    }

    /// Two vectors of in-range i32 values to 16 bytes, in order.
    #[target_feature(enable = "avx2")]
    #[inline]
    pub(crate) fn narrow16(q0: __m256i, q1: __m256i, signed: bool) -> __m128i {
        // packs interleaves 128-bit lanes: [q0 0-3, q1 0-3 | q0 4-7, q1 4-7]; the
        // permute restores [q0 0-7 | q1 0-7].
        let w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0b11_01_10_00);
        let (lo, hi) = (_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
        if signed {
            _mm_packs_epi16(lo, hi)
        } else {
            _mm_packus_epi16(lo, hi)
        }
    }
}

/// AVX-512 pieces of the output stage, for kernels that accumulate in 512-bit registers.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    use super::FloatConstants;

    /// The single-precision output stage of 16 columns in one register each: what
    /// [`super::Stage::apply`] computes with float scales, lane for lane (the same conversions,
    /// the MXCSR's round-half-to-even, the same clamps), so its bytes equal the AVX2
    /// and portable stages'.
    pub(crate) struct Float16 {
        bias: __m512i,
        scale: __m512,
        lo_less_zp: __m512,
        hi_less_zp: __m512,
        zp: __m512i,
    }

    impl Float16 {
        /// # Safety
        /// AVX512F; `f.bias` and `f.scale` hold at least c + 16 values.
        #[target_feature(enable = "avx512f")]
        #[inline]
        pub(crate) unsafe fn load(f: &FloatConstants, c: usize) -> Float16 {
            debug_assert!(f.bias.len() >= c + 16 && f.scale.len() >= c + 16);
            // SAFETY: by the caller's contract.
            unsafe {
                Float16 {
                    bias: _mm512_loadu_si512(f.bias.as_ptr().add(c) as *const _),
                    scale: _mm512_loadu_ps(f.scale.as_ptr().add(c)),
                    lo_less_zp: _mm512_set1_ps(f.lo_less_zp),
                    hi_less_zp: _mm512_set1_ps(f.hi_less_zp),
                    zp: _mm512_set1_epi32(f.zp),
                }
            }
        }

        /// 16 accumulators to 16 output bytes.
        #[target_feature(enable = "avx512f")]
        #[inline]
        pub(crate) fn requantize(&self, acc: __m512i) -> __m128i {
            let x = _mm512_cvtepi32_ps(_mm512_add_epi32(acc, self.bias));
            let v = _mm512_min_ps(
                _mm512_max_ps(_mm512_mul_ps(x, self.scale), self.lo_less_zp),
                self.hi_less_zp,
            );
            // The default MXCSR rounding: to nearest, ties to even. No integer clamp
            // after it: the bounds less the zero point are integers (exact in f32), so
            // the rounded value stays inside them, and `max_ps` returns its second
            // operand for a NaN, so none gets through (the stage's hottest instructions:
            // it runs once per output). In the 8-bit range: the low byte of each lane is
            // the stored byte.
            _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(v), self.zp))
        }
    }
}

/// Applies `stage` to a row of i32 accumulators (columns 0..n), writing bytes: the
/// stage of [`gemm`] for callers that accumulate themselves (depthwise, transpose conv).
pub(crate) fn requantize_row(isa: Isa, acc: &[i32], stage: &Stage, out: &mut [u8], signed: bool) {
    let n = stage.columns().min(acc.len()).min(out.len());
    #[cfg(target_arch = "x86_64")]
    let c = if isa == Isa::Avx2 && best_isa() == Isa::Avx2 {
        // SAFETY: AVX2 is available (checked just above).
        unsafe { avx2::requantize_prefix(acc, stage, out, n, signed) }
    } else {
        0
    };
    #[cfg(target_arch = "aarch64")]
    let c = {
        let _ = isa;
        if crate::kernels::isa::int8_neon() {
            // SAFETY: NEON is available (checked just above).
            unsafe { super::gemm_neon::requantize_prefix(acc, stage, out, n, signed) }
        } else {
            0
        }
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let c = {
        let _ = (isa, signed);
        0
    };
    for j in c..n {
        out[j] = stage.apply(j, acc[j]) as u8;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) use crate::kernels::util::test_rng::Rng;

    /// The product computed plainly, in i64.
    fn reference(a: &[i16], lda: usize, m: usize, k: usize, b: &[i16], n: usize) -> Vec<i64> {
        let mut c = vec![0i64; m * n];
        for i in 0..m {
            for j in 0..n {
                for kk in 0..k {
                    c[i * n + j] += i64::from(a[i * lda + kk]) * i64::from(b[kk * n + j]);
                }
            }
        }
        c
    }

    fn isas() -> Vec<Isa> {
        let mut v = vec![Isa::Portable];
        if best_isa() != Isa::Portable {
            v.push(best_isa());
        }
        v
    }

    #[test]
    fn raw_products_match_the_plain_sum_on_every_path() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for case in 0..60 {
            let m = rng.range(1, 20) as usize;
            let k = rng.range(1, 70) as usize;
            let n = rng.range(1, 40) as usize;
            let kp = padded_depth(k);
            let lda = kp + rng.range(0, 3) as usize * 2;
            let mut a = vec![0i16; m * lda];
            for i in 0..m {
                for kk in 0..k {
                    a[i * lda + kk] = rng.range(-255, 255) as i16;
                }
            }
            let b: Vec<i16> = (0..k * n).map(|_| rng.range(-255, 255) as i16).collect();
            let mut packed = vec![0i16; packed_len(k, n).unwrap()];
            pack_rhs(k, n, |kk, j| b[kk * n + j], &mut packed);
            let want = reference(&a, lda, m, k, &b, n);
            for isa in isas() {
                let ld = n + 3;
                let mut out = vec![0i32; m * ld];
                let rhs = PackedRhs {
                    data: &packed,
                    k,
                    n,
                };
                gemm_with(isa, &a, lda, m, &rhs, Dst::I32 { out: &mut out, ld }).unwrap();
                for i in 0..m {
                    for j in 0..n {
                        assert_eq!(
                            i64::from(out[i * ld + j]),
                            want[i * n + j],
                            "case {case} {isa:?} ({i}, {j})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn float_requantization_rounds_half_to_even_and_clamps() {
        let stage = Stage::new(
            1,
            Some(&[0]),
            &[Multiplier::new(0.5).unwrap()],
            3,
            (-128, 127),
        )
        .unwrap()
        .float_scales(&[0.5])
        .unwrap();
        // 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, then the zero point.
        assert_eq!(stage.apply(0, 5), 2 + 3);
        assert_eq!(stage.apply(0, 7), 4 + 3);
        assert_eq!(stage.apply(0, -5), -2 + 3);
        // Far out of range saturates, both ways.
        assert_eq!(stage.apply(0, i32::MAX), 127);
        assert_eq!(stage.apply(0, i32::MIN), -128);
        assert!(
            Stage::new(1, None, &[Multiplier::new(0.5).unwrap()], 0, (0, 255))
                .unwrap()
                .float_scales(&[f32::NAN])
                .is_err()
        );
    }

    #[test]
    fn requantized_outputs_are_identical_on_every_path() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..80 {
            let m = rng.range(1, 15) as usize;
            let k = rng.range(1, 300) as usize;
            let n = rng.range(1, 50) as usize;
            let kp = padded_depth(k);
            let a: Vec<i16> = (0..m * kp)
                .map(|i| {
                    if i % kp < k {
                        rng.range(-255, 255) as i16
                    } else {
                        0
                    }
                })
                .collect();
            let b: Vec<i16> = (0..k * n).map(|_| rng.range(-255, 255) as i16).collect();
            let mut packed = vec![0i16; packed_len(k, n).unwrap()];
            pack_rhs(k, n, |kk, j| b[kk * n + j], &mut packed);
            let bias: Vec<i32> = (0..n).map(|_| rng.range(-100_000, 100_000)).collect();
            // Multipliers from tiny (large right shifts) to > 1 (left shifts).
            let reals: Vec<f64> = (0..n)
                .map(|_| {
                    let e = rng.range(-30, 3);
                    let frac = 0.5 + (rng.next() % 1000) as f64 / 2000.0;
                    frac * 2f64.powi(e)
                })
                .collect();
            let mults: Vec<Multiplier> =
                reals.iter().map(|&r| Multiplier::new(r).unwrap()).collect();
            let scales: Vec<f32> = reals.iter().map(|&r| r as f32).collect();
            let signed = case % 2 == 0;
            let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
            let zp = rng.range(lo, hi);
            let stage = Stage::new(n, Some(&bias), &mults, zp, (lo, hi)).unwrap();
            let stage = match case % 3 {
                0 => stage.single_rounding().unwrap(),
                1 => stage.float_scales(&scales).unwrap(),
                _ => stage,
            };
            let want = reference(&a, kp, m, k, &b, n);
            let mut results = Vec::new();
            for isa in isas() {
                let mut out = vec![0u8; m * n];
                let rhs = PackedRhs {
                    data: &packed,
                    k,
                    n,
                };
                let dst = Dst::Q8 {
                    out: &mut out,
                    ld: n,
                    stage: &stage,
                    signed,
                };
                gemm_with(isa, &a, kp, m, &rhs, dst).unwrap();
                results.push(out);
            }
            for out in &results {
                for i in 0..m {
                    for j in 0..n {
                        let acc = want[i * n + j] as i32;
                        let expect = stage.apply(j, acc);
                        let got = if signed {
                            i32::from(out[i * n + j] as i8)
                        } else {
                            i32::from(out[i * n + j])
                        };
                        assert_eq!(got, expect, "case {case} ({i}, {j})");
                    }
                }
            }
            // requantize_row agrees too.
            let row: Vec<i32> = (0..n).map(|j| want[j] as i32).collect();
            for isa in isas() {
                let mut out = vec![0u8; n];
                requantize_row(isa, &row, &stage, &mut out, signed);
                assert_eq!(&out[..], &results[0][..n], "case {case} {isa:?} row");
            }
        }
    }

    #[test]
    fn bad_extents_are_errors() {
        let packed = vec![0i16; packed_len(3, 2).unwrap()];
        let rhs = PackedRhs {
            data: &packed,
            k: 3,
            n: 2,
        };
        let mut out = vec![0i32; 3];
        let a = vec![0i16; 4];
        assert!(
            gemm(
                &a,
                4,
                2,
                &rhs,
                Dst::I32 {
                    out: &mut out,
                    ld: 2
                }
            )
            .is_err()
        );
        let mut out = vec![0i32; 4];
        assert!(
            gemm(
                &a,
                4,
                2,
                &rhs,
                Dst::I32 {
                    out: &mut out,
                    ld: 2
                }
            )
            .is_err()
        );
    }
}
