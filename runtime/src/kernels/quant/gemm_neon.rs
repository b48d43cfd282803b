//! The 8-bit GEMM of [`super::gemm_u8i8`] on 64-bit Arm NEON: the same packed B (panels
//! of 16 columns, each column's four bytes of a quad of rows together, 64 bytes a quad),
//! the same A (rows of `kq` bytes XORed with `flip`), the same accumulator and output
//! stage, so the bytes equal the portable path's (tested on random data).
//!
//! NEON multiplies signed bytes by signed bytes, where the layout's A is unsigned
//! (`u = x ^ flip`, 0..=255). The kernel reads `s = u - 128` (one XOR with `flip ^ 0x80`)
//! and starts each accumulator at `128 * colsum(b)`, computed per panel:
//! `sum u * b = sum s * b + 128 * sum b`, exactly, in wrapping i32 as the portable path.
//!
//! Two inner loops, chosen at run time:
//! - `SDOT` (FEAT_DotProd, [`crate::kernels::isa::int8_dotprod`]): four i8 x i8
//!   products into each i32 lane, one A quad of a row against four columns by lane
//!   index; 4 rows x 16 columns in 16 accumulators. The instruction is emitted by
//!   `asm!`: its intrinsic (`vdotq_laneq_s32`) is still unstable (`stdarch_neon_dotprod`)
//!   on stable Rust.
//! - widening multiplies (base NEON): `SMULL`/`SMULL2` of eight byte pairs into i16
//!   (a product of two i8 fits: at most 2^14), `SADALP` adding adjacent pairs into i32;
//!   each column then holds two partial sums, added at the end. 2 rows x 16 columns in
//!   16 accumulators.
//!
//! The single-precision output stage runs on four lanes (`SCVTF`, `FMUL`, `FMAX`/`FMIN`,
//! `FCVTNS` rounding half to even, the saturating narrows), lane for lane what
//! [`super::gemm::Stage::apply`] computes; the fixed-point stages call `apply` per column.

use std::arch::aarch64::*;

use super::gemm::{Dst, NR, Stage};
use crate::kernels::util::block_rows;

/// Rows per block on the `SDOT` path.
const MR_DOT: usize = 4;
/// Rows per block on the widening path.
const MR_WIDE: usize = 2;

/// `out = stage((A ^ flip) * B)` as [`super::gemm_u8i8::gemm`] defines it.
///
/// # Safety
/// NEON, and `SDOT` when `dot` ([`crate::kernels::isa::int8_dotprod`]); the slices have
/// the extents [`super::gemm_u8i8::gemm`] checks: A rows `r < m` of `kq <= lda` bytes,
/// B `n.div_ceil(NR)` panels of `kq * NR` bytes, destination rows `r < m` of `n <= ld`
/// bytes, the stage of `n` columns.
#[target_feature(enable = "neon")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm(
    dot: bool,
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
    debug_assert!(kq.is_multiple_of(4) && lda >= kq && b.len() >= n.div_ceil(NR) * kq * NR);
    let xor = vdupq_n_u8(flip ^ 0x80);
    for t in 0..n.div_ceil(NR) {
        let panel = &b[t * kq * NR..(t + 1) * kq * NR];
        let cols = (n - t * NR).min(NR);
        // SAFETY: the panel holds kq * NR bytes.
        let start = unsafe { offset_sums(panel, kq) };
        let mr = if dot { MR_DOT } else { MR_WIDE };
        let mut r0 = 0;
        while r0 < m {
            let rows = block_rows(m - r0, mr);
            let block = Block {
                a: &a[r0 * lda..],
                lda,
                xor,
                panel,
                kq,
                start,
            };
            let mut acc = [[0i32; NR]; MR_DOT];
            // SAFETY: `block.a` holds rows r0..r0 + rows <= m of kq bytes at lda
            // strides, the panel kq * NR bytes; SDOT is present when `dot` (the caller's
            // contract).
            unsafe {
                match (dot, rows) {
                    (true, 4) => block.dot::<4>(&mut acc),
                    (true, 3) => block.dot::<3>(&mut acc),
                    (true, 2) => block.dot::<2>(&mut acc),
                    (true, _) => block.dot::<1>(&mut acc),
                    (false, 2) => block.wide::<2>(&mut acc),
                    (false, _) => block.wide::<1>(&mut acc),
                }
            }
            for (r, acc) in acc.iter().enumerate().take(rows) {
                let row = &mut out[(r0 + r) * ld + t * NR..][..cols];
                // SAFETY: the stage arrays are padded to whole panels.
                unsafe { store_row(acc, stage, t * NR, row, signed) };
            }
            r0 += rows;
        }
    }
}

/// `128 * colsum` of a panel's 16 columns (wrapping), the accumulators' start.
///
/// # Safety
/// NEON; `panel` holds `kq * NR` bytes.
#[target_feature(enable = "neon")]
unsafe fn offset_sums(panel: &[u8], kq: usize) -> [int32x4_t; 4] {
    debug_assert!(panel.len() >= kq * NR);
    let mut sums = [vdupq_n_s32(0); 4];
    let p = panel.as_ptr() as *const i8;
    for q in 0..kq / 4 {
        for (j, s) in sums.iter_mut().enumerate() {
            // SAFETY: 16 bytes at q * 64 + 16 j end inside the panel (q < kq / 4).
            let v = unsafe { vld1q_s8(p.add(q * 4 * NR + 16 * j)) };
            // Each column's four bytes: two pairwise widening additions.
            *s = vpadalq_s16(*s, vpaddlq_s8(v));
        }
    }
    for s in sums.iter_mut() {
        *s = vshlq_n_s32::<7>(*s);
    }
    sums
}

/// Rows per block of the i16 GEMM (16 accumulators).
const MR_I16: usize = 2;

/// The i16 GEMM of [`super::gemm`] (A rows of `kp` i16, B panels of interleaved pairs):
/// per pair of depths, each column's two products into two lanes by `SMLAL`/`SMLAL2`
/// (a product of operands in [-255, 255] is exact in i32), the lanes of a column added
/// at the end. Wrapping i32 sums in another order: the same bits as the portable path.
///
/// # Safety
/// NEON; the extents [`super::gemm::gemm_with`] checks: A rows `r < m` of `kp <= lda`
/// values, B `n.div_ceil(NR)` panels of `kp * NR` values, destination rows `r < m` of
/// `n <= ld` values, the stage of `n` columns.
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemm_i16(
    a: &[i16],
    lda: usize,
    m: usize,
    b: &[i16],
    kp: usize,
    n: usize,
    dst: Dst,
) {
    debug_assert!(kp.is_multiple_of(2) && lda >= kp && b.len() >= n.div_ceil(NR) * kp * NR);
    let mut dst = dst;
    for t in 0..n.div_ceil(NR) {
        let panel = &b[t * kp * NR..(t + 1) * kp * NR];
        let cols = (n - t * NR).min(NR);
        let mut r0 = 0;
        while r0 < m {
            let rows = block_rows(m - r0, MR_I16);
            let mut acc = [[0i32; NR]; MR_I16];
            // SAFETY: rows r0..r0 + rows <= m of A hold kp values at lda strides, the
            // panel kp * NR values.
            unsafe {
                if rows == 2 {
                    pairs_block::<2>(&a[r0 * lda..], lda, panel, kp, &mut acc);
                } else {
                    pairs_block::<1>(&a[r0 * lda..], lda, panel, kp, &mut acc);
                }
            }
            for (r, acc) in acc.iter().enumerate().take(rows) {
                match &mut dst {
                    Dst::Q8 {
                        out,
                        ld,
                        stage,
                        signed,
                    } => {
                        let row = &mut out[(r0 + r) * *ld + t * NR..][..cols];
                        // SAFETY: the stage arrays are padded to whole panels.
                        unsafe { store_row(acc, stage, t * NR, row, *signed) };
                    }
                    Dst::I32 { out, ld } => {
                        out[(r0 + r) * *ld + t * NR..][..cols].copy_from_slice(&acc[..cols]);
                    }
                }
            }
            r0 += rows;
        }
    }
}

/// R rows x 16 columns of the i16 GEMM.
///
/// # Safety
/// NEON; `a` holds R rows of `kp` values at `lda` strides, `panel` `kp * NR` values.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn pairs_block<const R: usize>(
    a: &[i16],
    lda: usize,
    panel: &[i16],
    kp: usize,
    out: &mut [[i32; NR]; MR_I16],
) {
    debug_assert!(R <= MR_I16 && a.len() >= (R - 1) * lda + kp && panel.len() >= kp * NR);
    // Register 2j + h: columns 4j + 2h and 4j + 2h + 1, even and odd depths apart.
    let mut acc = [[vdupq_n_s32(0); 8]; R];
    let (ap, bp) = (a.as_ptr(), panel.as_ptr());
    for p in 0..kp / 2 {
        // SAFETY: p < kp / 2: the pair's 32 values of B end at (p + 1) * 32 <= kp * NR,
        // row r's pair at r * lda + 2p + 2 <= r * lda + kp.
        unsafe {
            let bq = bp.add(p * 2 * NR);
            let b = [
                vld1q_s16(bq),
                vld1q_s16(bq.add(8)),
                vld1q_s16(bq.add(16)),
                vld1q_s16(bq.add(24)),
            ];
            for (r, acc) in acc.iter_mut().enumerate() {
                let pair = (ap.add(r * lda + 2 * p) as *const i32).read_unaligned();
                let av = vreinterpretq_s16_s32(vdupq_n_s32(pair));
                for j in 0..4 {
                    acc[2 * j] = vmlal_s16(acc[2 * j], vget_low_s16(b[j]), vget_low_s16(av));
                    acc[2 * j + 1] = vmlal_high_s16(acc[2 * j + 1], b[j], av);
                }
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for j in 0..4 {
            let v = vpaddq_s32(acc[2 * j], acc[2 * j + 1]);
            // SAFETY: 4 lanes at 4 j < NR.
            unsafe { vst1q_s32(out[r].as_mut_ptr().add(4 * j), v) };
        }
    }
}

/// One block's operands.
struct Block<'a> {
    a: &'a [u8],
    lda: usize,
    /// `flip ^ 0x80`: A's stored bytes to signed `u - 128`.
    xor: uint8x16_t,
    panel: &'a [u8],
    kq: usize,
    start: [int32x4_t; 4],
}

/// `acc += dot(b's four bytes per lane, a's quad LANE)`: `SDOT` by element. Used inside
/// `unsafe` blocks of functions whose contract includes SDOT; registers only.
macro_rules! sdot {
    ($acc:expr, $b:expr, $a:expr, $lane:literal) => {
        core::arch::asm!(
            concat!("sdot {acc:v}.4s, {b:v}.16b, {a:v}.4b[", $lane, "]"),
            acc = inout(vreg) $acc,
            b = in(vreg) $b,
            a = in(vreg) $a,
            options(pure, nomem, nostack, preserves_flags),
        )
    };
}

impl Block<'_> {
    /// The B registers of quad `q`: columns 4j..4j + 4 in register j.
    ///
    /// # Safety
    /// NEON; q < kq / 4.
    #[target_feature(enable = "neon")]
    #[inline]
    unsafe fn b_quad(&self, q: usize) -> [int8x16_t; 4] {
        let p = self.panel.as_ptr() as *const i8;
        // SAFETY: the quad's 64 bytes end at (q + 1) * 64 <= kq * NR.
        unsafe {
            [
                vld1q_s8(p.add(q * 64)),
                vld1q_s8(p.add(q * 64 + 16)),
                vld1q_s8(p.add(q * 64 + 32)),
                vld1q_s8(p.add(q * 64 + 48)),
            ]
        }
    }

    /// Row r's 16 bytes from byte `at`, as signed `u - 128`.
    ///
    /// # Safety
    /// NEON; at + 16 <= kq, r below the block's rows.
    #[target_feature(enable = "neon")]
    #[inline]
    unsafe fn a16(&self, r: usize, at: usize) -> int8x16_t {
        // SAFETY: by the contract, inside row r's kq bytes.
        let v = unsafe { vld1q_u8(self.a.as_ptr().add(r * self.lda + at)) };
        vreinterpretq_s8_u8(veorq_u8(v, self.xor))
    }

    /// Row r's quad at byte `at`, in every 32-bit lane, as signed `u - 128`.
    ///
    /// # Safety
    /// NEON; at + 4 <= kq, r below the block's rows.
    #[target_feature(enable = "neon")]
    #[inline]
    unsafe fn a4(&self, r: usize, at: usize) -> int8x16_t {
        // SAFETY: by the contract, inside row r's kq bytes.
        let w = unsafe { (self.a.as_ptr().add(r * self.lda + at) as *const u32).read_unaligned() };
        vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_u32(vdupq_n_u32(w)), self.xor))
    }

    /// R rows x 16 columns on `SDOT`.
    ///
    /// # Safety
    /// NEON and SDOT; `a` holds R rows of kq bytes at lda strides.
    #[target_feature(enable = "neon,dotprod")]
    #[inline]
    unsafe fn dot<const R: usize>(&self, out: &mut [[i32; NR]; MR_DOT]) {
        debug_assert!(R <= MR_DOT && self.a.len() >= (R - 1) * self.lda + self.kq);
        let mut acc = [self.start; R];
        let quads = self.kq / 4;
        let mut q = 0;
        // Four quads a step: one 16-byte load of A per row, SDOT by lane.
        while q + 4 <= quads {
            // SAFETY: q + 4 <= kq / 4, so A's 16 bytes and the four quads of B are inside.
            unsafe {
                let mut av = [vdupq_n_s8(0); R];
                for (r, v) in av.iter_mut().enumerate() {
                    *v = self.a16(r, 4 * q);
                }
                let b = self.b_quad(q);
                for r in 0..R {
                    for j in 0..4 {
                        sdot!(acc[r][j], b[j], av[r], "0");
                    }
                }
                let b = self.b_quad(q + 1);
                for r in 0..R {
                    for j in 0..4 {
                        sdot!(acc[r][j], b[j], av[r], "1");
                    }
                }
                let b = self.b_quad(q + 2);
                for r in 0..R {
                    for j in 0..4 {
                        sdot!(acc[r][j], b[j], av[r], "2");
                    }
                }
                let b = self.b_quad(q + 3);
                for r in 0..R {
                    for j in 0..4 {
                        sdot!(acc[r][j], b[j], av[r], "3");
                    }
                }
            }
            q += 4;
        }
        while q < quads {
            // SAFETY: q < kq / 4.
            unsafe {
                let b = self.b_quad(q);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let av = self.a4(r, 4 * q);
                    for j in 0..4 {
                        sdot!(acc[j], b[j], av, "0");
                    }
                }
            }
            q += 1;
        }
        for (r, acc) in acc.iter().enumerate() {
            for (j, v) in acc.iter().enumerate() {
                // SAFETY: 4 lanes at 4 j < NR.
                unsafe { vst1q_s32(out[r].as_mut_ptr().add(4 * j), *v) };
            }
        }
    }

    /// R rows x 16 columns on widening multiplies.
    ///
    /// # Safety
    /// NEON; `a` holds R rows of kq bytes at lda strides.
    #[target_feature(enable = "neon")]
    #[inline]
    unsafe fn wide<const R: usize>(&self, out: &mut [[i32; NR]; MR_DOT]) {
        debug_assert!(R <= MR_WIDE && self.a.len() >= (R - 1) * self.lda + self.kq);
        // Register 2j + h: columns 4j + 2h and 4j + 2h + 1, two partial sums each.
        let mut acc = [[vdupq_n_s32(0); 8]; R];
        for q in 0..self.kq / 4 {
            // SAFETY: q < kq / 4.
            unsafe {
                let b = self.b_quad(q);
                for (r, acc) in acc.iter_mut().enumerate() {
                    let av = self.a4(r, 4 * q);
                    for j in 0..4 {
                        let lo = vmull_s8(vget_low_s8(b[j]), vget_low_s8(av));
                        let hi = vmull_high_s8(b[j], av);
                        acc[2 * j] = vpadalq_s16(acc[2 * j], lo);
                        acc[2 * j + 1] = vpadalq_s16(acc[2 * j + 1], hi);
                    }
                }
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            for j in 0..4 {
                let v = vaddq_s32(self.start[j], vpaddq_s32(acc[2 * j], acc[2 * j + 1]));
                // SAFETY: 4 lanes at 4 j < NR.
                unsafe { vst1q_s32(out[r].as_mut_ptr().add(4 * j), v) };
            }
        }
    }
}

/// [`super::gemm::requantize_row`] (the depthwise kernels' stage) on whole blocks of 16
/// columns below `n`; returns how many columns it wrote.
///
/// # Safety
/// NEON; `n` is at most `acc.len()`, `out.len()` and the stage's columns.
#[target_feature(enable = "neon")]
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
        if let Some(block) = acc[c..].first_chunk::<NR>() {
            // SAFETY: the stage arrays are padded to whole panels, so they hold c + 16.
            unsafe { store_row(block, stage, c, &mut out[c..c + NR], signed) };
        }
        c += NR;
    }
    c
}

/// The output stage of one row's 16 accumulators (columns c0..c0 + 16), the first
/// `row.len()` stored.
///
/// # Safety
/// NEON; the stage arrays hold c0 + 16 values (padded to whole panels), `row.len() <= 16`.
#[target_feature(enable = "neon")]
unsafe fn store_row(acc: &[i32; NR], stage: &Stage, c0: usize, row: &mut [u8], signed: bool) {
    debug_assert!(row.len() <= NR);
    let Some(f) = stage.float_constants() else {
        for (j, o) in row.iter_mut().enumerate() {
            // The clamp keeps the value in the 8-bit range; the byte is its two's
            // complement either way.
            *o = stage.apply(c0 + j, acc[j]) as u8;
        }
        return;
    };
    debug_assert!(f.bias.len() >= c0 + NR && f.scale.len() >= c0 + NR);
    let (lo, hi, zp) = (
        vdupq_n_f32(f.lo_less_zp),
        vdupq_n_f32(f.hi_less_zp),
        vdupq_n_s32(f.zp),
    );
    let mut q = [vdupq_n_s32(0); 4];
    for (j, q) in q.iter_mut().enumerate() {
        // SAFETY: acc holds 16 values; bias and scale c0 + 16 (the contract).
        unsafe {
            let x = vaddq_s32(
                vld1q_s32(acc.as_ptr().add(4 * j)),
                vld1q_s32(f.bias.as_ptr().add(c0 + 4 * j)),
            );
            let v = vmulq_f32(
                vcvtq_f32_s32(x),
                vld1q_f32(f.scale.as_ptr().add(c0 + 4 * j)),
            );
            // Round to nearest, ties to even, as `round_ties_even`; the clamped value
            // is in the 8-bit range less the zero point, so the narrows are exact.
            *q = vaddq_s32(vcvtnq_s32_f32(vminq_f32(vmaxq_f32(v, lo), hi)), zp);
        }
    }
    let lo16 = vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]));
    let hi16 = vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]));
    let bytes = if signed {
        vreinterpretq_u8_s8(vcombine_s8(vqmovn_s16(lo16), vqmovn_s16(hi16)))
    } else {
        vcombine_u8(vqmovun_s16(lo16), vqmovun_s16(hi16))
    };
    if row.len() == NR {
        // SAFETY: the row holds 16 bytes.
        unsafe { vst1q_u8(row.as_mut_ptr(), bytes) };
    } else {
        let mut tmp = [0u8; NR];
        // SAFETY: tmp holds 16 bytes.
        unsafe { vst1q_u8(tmp.as_mut_ptr(), bytes) };
        let len = row.len();
        row.copy_from_slice(&tmp[..len]);
    }
}

#[cfg(test)]
mod tests {
    use super::super::arith::Multiplier;
    use super::super::gemm::tests::Rng;
    use super::super::gemm_u8i8::{PackedRhs, gemm as gemm_u8i8, quad_depth};
    use super::*;

    /// Both NEON loops (SDOT where the processor has it) against the portable 8-bit GEMM
    /// on random operands: odd depths (quad tails after the four-quad steps), column
    /// tails, row counts that leave partial blocks, both flips, both stages.
    #[test]
    fn neon_paths_equal_the_portable_path() {
        let mut rng = Rng(0x0a64_5eed_1234_5678);
        let mut paths = vec![false];
        if crate::kernels::isa::int8_dotprod() {
            paths.push(true);
        }
        for case in 0..120 {
            let m = rng.range(1, 23) as usize;
            let k = rng.range(1, 300) as usize;
            let n = rng.range(1, 70) as usize;
            let kq = quad_depth(k);
            let lda = kq + 4 * rng.range(0, 2) as usize;
            let a: Vec<u8> = (0..m * lda).map(|_| rng.range(0, 255) as u8).collect();
            let flip = if case % 4 < 2 { 0x80 } else { 0 };
            let (_, packed, sums) = super::super::gemm_u8i8::tests::random_rhs(&mut rng, k, n);
            let bias = super::super::gemm_u8i8::corrected_bias(
                Some(
                    &(0..n)
                        .map(|_| rng.range(-100_000, 100_000))
                        .collect::<Vec<_>>(),
                ),
                &sums,
                rng.range(0, 255),
            );
            let mults: Vec<Multiplier> = (0..n)
                .map(|_| Multiplier::new(2f64.powi(rng.range(-20, -6))).unwrap())
                .collect();
            let signed = case % 2 == 0;
            let range = if signed { (-128, 127) } else { (0, 255) };
            let zp = rng.range(range.0, range.1);
            let mut stage = Stage::new(n, Some(&bias), &mults, zp, range).unwrap();
            if case % 3 != 0 {
                let scales: Vec<f32> = (0..n)
                    .map(|_| 2f32.powi(rng.range(-20, -6)) * 1.3)
                    .collect();
                stage = stage.float_scales(&scales).unwrap();
            }
            let rhs = PackedRhs {
                data: &packed,
                k,
                n,
            };
            let ld = n + 3;
            let mut want = vec![0u8; m * ld];
            gemm_u8i8(false, &a, flip, lda, m, &rhs, &mut want, ld, &stage, signed).unwrap();
            for &dot in &paths {
                let mut got = vec![0u8; m * ld];
                // SAFETY: NEON is in the base architecture, SDOT was detected when
                // `dot`; the extents are the ones the checked entry point accepted.
                unsafe {
                    gemm(
                        dot, &a, flip, lda, m, &packed, kq, n, &mut got, ld, &stage, signed,
                    )
                };
                for r in 0..m {
                    assert_eq!(
                        &got[r * ld..r * ld + n],
                        &want[r * ld..r * ld + n],
                        "case {case} dot {dot} row {r} (m {m} k {k} n {n})"
                    );
                }
            }
            // The depthwise kernels' stage on the same accumulators.
            let acc: Vec<i32> = (0..n)
                .map(|_| rng.range(-1_000_000_000, 1_000_000_000))
                .collect();
            let want: Vec<u8> = (0..n).map(|j| stage.apply(j, acc[j]) as u8).collect();
            let mut got = vec![0u8; n];
            // SAFETY: NEON is in the base architecture; n is every length's bound.
            let done = unsafe { requantize_prefix(&acc, &stage, &mut got, n, signed) };
            assert_eq!(done, n / NR * NR);
            assert_eq!(&got[..done], &want[..done], "case {case} requantize_prefix");
        }
    }
}
