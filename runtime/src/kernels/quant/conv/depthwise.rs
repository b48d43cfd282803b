//! DEPTHWISE_CONV_2D: direct loops over contiguous channel blocks (see the parent
//! module).

use super::*;
use crate::buffer::WeightBuf;

pub(super) struct DepthwiseConv {
    pub(super) params: ConvParams,
    pub(super) oq: OutputQuant,
    pub(super) fq: FilterQuant,
    pub(super) filter_dims: Option<[usize; 4]>,
    /// The output stage, built once when the bias is a constant.
    pub(super) stage: ConstantStages,
}

/// The filter `[1, KH, KW, OC]` minus its zero point, as i16 in the same order.
fn widen_filter(filter: &[u8], fq: &FilterQuant) -> Result<zeroize::Zeroizing<Vec<i16>>> {
    let mut w = zeroize::Zeroizing::new(crate::kernels::util::filled(filter.len(), 0i16)?);
    for (d, &b) in w.iter_mut().zip(filter) {
        *d = widen(fq.qt, fq.zp, b);
    }
    Ok(w)
}

/// The depthwise filter for the AVX2 kernel: per block of 16 channels and per pair of
/// taps `(2p, 2p + 1)` (a missing last tap is zero), the weights interleaved exactly as
/// `vpunpcklwd` / `vpunpckhwd` interleave the two taps' inputs: 16 values for channels
/// {0-3, 8-11} then 16 for {4-7, 12-15}, each channel's two taps adjacent. Channels past
/// the last whole block are not packed (a scalar loop handles them).
fn pack_depthwise_pairs(w: &[i16], taps: usize, oc: usize) -> Result<Vec<i16>> {
    if w.len() != taps * oc {
        return Err(RuntimeError::kernel("filter does not match its shape"));
    }
    let blocks = oc / DW_BLOCK;
    let pairs = taps.div_ceil(2);
    let mut out = crate::kernels::util::filled(blocks * pairs * 2 * DW_BLOCK, 0i16)?;
    for b in 0..blocks {
        for p in 0..pairs {
            let dst = &mut out[(b * pairs + p) * 2 * DW_BLOCK..][..2 * DW_BLOCK];
            for (i, d) in dst.iter_mut().enumerate() {
                let (half, i) = (i / DW_BLOCK, i % DW_BLOCK);
                let (lane, j) = (i / 8, i % 8);
                let ch = b * DW_BLOCK + lane * 8 + half * 4 + j / 2;
                let tap = 2 * p + j % 2;
                *d = if tap < taps { w[tap * oc + ch] } else { 0 };
            }
        }
    }
    Ok(out)
}

/// Per output pixel of row `row`, the window offset of every tap (None: padding), each
/// checked to hold a whole pixel; None if a tap falls outside the window (which holds
/// input rows `y0..` of the row's image).
#[cfg(target_arch = "x86_64")]
fn tap_offsets(
    g: &Geometry,
    window_len: usize,
    y0: usize,
    row: usize,
    npairs: usize,
) -> Option<Vec<Option<usize>>> {
    let oy = row % g.oh;
    let mut offsets = vec![None; g.ow * 2 * npairs];
    for ox in 0..g.ow {
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                if let (Some(iy), Some(ix)) = (g.in_y(oy, ky), g.in_x(ox, kx)) {
                    let wy = iy.checked_sub(y0)?;
                    let at = (wy * g.iw + ix) * g.ic;
                    if at + g.ic > window_len {
                        return None;
                    }
                    offsets[ox * 2 * npairs + ky * g.kw + kx] = Some(at);
                }
            }
        }
    }
    Some(offsets)
}

/// One output row of a depth-multiplier-1 depthwise convolution, whole blocks of 16
/// channels, with the widest vectors this processor has: per pixel and block, the input
/// of pairs of taps (already widened to i16 minus the zero point) interleaved and
/// multiplied with `vpmaddwd` into i32 (exact: both operands lie in [-255, 255]), then
/// the vectorized requantizing stage. Taps in the padding contribute zero.
///
/// `window` holds input rows `y0..` of the row's image, widened. Returns false (having
/// written nothing) if a tap falls outside the window or a size does not fit.
///
/// # Safety
/// AVX2 is available.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn depthwise_row_pairs(
    g: &Geometry,
    window: &[i16],
    y0: usize,
    pairs: &[i16],
    row: usize,
    stage: &Stage,
    out_row: &mut [u8],
    signed_out: bool,
) -> bool {
    let taps = g.kh * g.kw;
    let npairs = taps.div_ceil(2);
    let blocks = g.oc / DW_BLOCK;
    if out_row.len() != g.ow * g.oc
        || pairs.len() != blocks * npairs * 2 * DW_BLOCK
        || g.ic != g.oc
        || stage.columns() != g.oc
    {
        return false;
    }
    let Some(offsets) = tap_offsets(g, window.len(), y0, row, npairs) else {
        return false;
    };
    let rows = DepthwiseRow {
        g,
        window,
        offsets: &offsets,
        pairs,
        npairs,
        stage,
        signed_out,
    };
    if crate::kernels::isa::int8_vnni() {
        // SAFETY: AVX512F/BW are available (int8_vnni implies them); the sizes and
        // offsets were checked above.
        unsafe { rows.avx512(out_row) }
    } else {
        // SAFETY: AVX2 (the caller's contract); as above.
        unsafe { rows.avx2(out_row, 0) }
    }
    true
}

/// One row's operands, checked by [`depthwise_row_pairs`].
#[cfg(target_arch = "x86_64")]
struct DepthwiseRow<'a> {
    g: &'a Geometry,
    window: &'a [i16],
    /// [`tap_offsets`] of the row.
    offsets: &'a [Option<usize>],
    pairs: &'a [i16],
    npairs: usize,
    stage: &'a Stage,
    signed_out: bool,
}

/// One super-block of 32 channels: its first channel, where its two packed blocks of
/// 16 start, and their output stages.
#[cfg(target_arch = "x86_64")]
struct SuperBlock {
    c0: usize,
    wa: usize,
    wb: usize,
    f0: gemm::avx512::Float16,
    f1: gemm::avx512::Float16,
}

#[cfg(target_arch = "x86_64")]
impl DepthwiseRow<'_> {
    /// Blocks of 32 channels in 512-bit registers (two packed blocks of 16 side by
    /// side), the single-precision stage on 16 lanes; a last block of 16 and the
    /// fixed-point stages through [`Self::avx2`].
    ///
    /// # Safety
    /// AVX512F, AVX512BW and AVX2; the sizes checked by [`depthwise_row_pairs`].
    #[target_feature(enable = "avx512f,avx512bw,avx2")]
    unsafe fn avx512(&self, out_row: &mut [u8]) {
        let Some(float) = self.stage.float_constants() else {
            // SAFETY: this function's contract includes AVX2 and the sizes `avx2` needs.
            return unsafe { self.avx2(out_row, 0) };
        };
        let (g, npairs) = (self.g, self.npairs);
        let supers = g.oc / (2 * DW_BLOCK);
        for sb in 0..supers {
            let c0 = sb * 2 * DW_BLOCK;
            // The packed blocks 2 sb and 2 sb + 1: per pair, 16 values for the low
            // half of each 128-bit lane, then 16 for the high half.
            let (wa, wb) = (
                2 * sb * npairs * 2 * DW_BLOCK,
                (2 * sb + 1) * npairs * 2 * DW_BLOCK,
            );
            // SAFETY: AVX512F is this function's contract; the stage arrays are padded to
            // whole panels of 16 and c0 + 32 <= oc, so both loads of 16 are inside them.
            let (f0, f1) = unsafe {
                (
                    gemm::avx512::Float16::load(&float, c0),
                    gemm::avx512::Float16::load(&float, c0 + 16),
                )
            };
            let block = SuperBlock { c0, wa, wb, f0, f1 };
            // SAFETY: the features and sizes are this function's contract, and the
            // super-block's channels c0..c0 + 32 lie inside oc (sb < oc / 32).
            unsafe {
                match npairs {
                    // 3x3 filters: the weights of all five pairs held in registers.
                    5 => self.super_block::<5>(&block, out_row),
                    1 => self.super_block::<1>(&block, out_row),
                    2 => self.super_block::<2>(&block, out_row),
                    _ => self.super_block::<0>(&block, out_row),
                }
            }
        }
        // SAFETY: this function's contract includes AVX2 and the sizes `avx2` needs;
        // 2 * supers <= oc / 16 (the blocks before it are done).
        unsafe { self.avx2(out_row, 2 * supers) }
    }

    /// Every pixel of the row for one super-block of 32 channels. `NP` > 0: the filter
    /// has exactly `NP` pairs of taps, whose weights are loaded once and held in
    /// registers across the row (the loop over pairs unrolls); 0: any count, weights
    /// loaded per pixel.
    ///
    /// # Safety
    /// As [`Self::avx512`]; `block` lies inside the channels.
    #[target_feature(enable = "avx512f,avx512bw,avx2")]
    #[inline]
    unsafe fn super_block<const NP: usize>(&self, block: &SuperBlock, out_row: &mut [u8]) {
        use std::arch::x86_64::*;
        let (g, npairs) = (self.g, self.npairs);
        debug_assert!(NP == 0 || NP == npairs);
        let (oc, c0) = (g.oc, block.c0);
        let zeros = [0i16; 2 * DW_BLOCK];
        let window = self.window;
        let load = |at: Option<usize>| -> __m512i {
            // SAFETY: a tap offset starts a whole pixel inside the window (checked) and
            // c0 + 32 <= ic; otherwise 32 zeros (the padding minus the zero point).
            unsafe {
                match at {
                    Some(o) => _mm512_loadu_si512(window.as_ptr().add(o + c0) as *const _),
                    None => _mm512_loadu_si512(zeros.as_ptr() as *const _),
                }
            }
        };
        // Pair p's weights: the packed blocks' 16 values for the low half of each
        // 128-bit lane side by side, then those for the high half.
        let weights = |p: usize| -> (__m512i, __m512i) {
            // SAFETY: both packed blocks hold npairs * 32 values at wa and wb.
            unsafe {
                let at = |base: usize, half: usize| {
                    _mm256_loadu_si256(
                        self.pairs.as_ptr().add(base + p * 32 + half) as *const __m256i
                    )
                };
                (
                    _mm512_inserti64x4::<1>(
                        _mm512_castsi256_si512(at(block.wa, 0)),
                        at(block.wb, 0),
                    ),
                    _mm512_inserti64x4::<1>(
                        _mm512_castsi256_si512(at(block.wa, 16)),
                        at(block.wb, 16),
                    ),
                )
            }
        };
        let mut held = [(_mm512_setzero_si512(), _mm512_setzero_si512()); 8];
        for (p, w) in held.iter_mut().enumerate().take(NP) {
            *w = weights(p);
        }
        // Qwords of the two accumulators (lo: channels {0-3 | 8-11 | 16-19 | 24-27},
        // hi: {4-7 | 12-15 | 20-23 | 28-31}) in channel order: 0-15, then 16-31.
        let first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
        let second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
        let pairs = if NP > 0 { NP } else { npairs };
        for ox in 0..g.ow {
            let taps_at = &self.offsets[ox * 2 * npairs..(ox + 1) * 2 * npairs];
            let mut acc_lo = _mm512_setzero_si512();
            let mut acc_hi = _mm512_setzero_si512();
            for p in 0..pairs {
                let x0 = load(taps_at[2 * p]);
                let x1 = load(taps_at[2 * p + 1]);
                let (wl, wh) = if NP > 0 { held[p] } else { weights(p) };
                acc_lo =
                    _mm512_add_epi32(acc_lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(x0, x1), wl));
                acc_hi =
                    _mm512_add_epi32(acc_hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(x0, x1), wh));
            }
            let v0 = _mm512_permutex2var_epi64(acc_lo, first, acc_hi);
            let v1 = _mm512_permutex2var_epi64(acc_lo, second, acc_hi);
            let dst = &mut out_row[ox * oc + c0..ox * oc + c0 + 2 * DW_BLOCK];
            // SAFETY: dst holds 32 bytes.
            unsafe {
                _mm_storeu_si128(dst.as_mut_ptr() as *mut __m128i, block.f0.requantize(v0));
                _mm_storeu_si128(
                    dst.as_mut_ptr().add(16) as *mut __m128i,
                    block.f1.requantize(v1),
                );
            }
        }
    }

    /// Blocks `from_block..` of 16 channels in 256-bit registers.
    ///
    /// # Safety
    /// AVX2; the sizes checked by [`depthwise_row_pairs`].
    #[target_feature(enable = "avx2")]
    unsafe fn avx2(&self, out_row: &mut [u8], from_block: usize) {
        use std::arch::x86_64::*;
        let (g, npairs, pairs, stage, signed_out) =
            (self.g, self.npairs, self.pairs, self.stage, self.signed_out);
        let oc = g.oc;
        let blocks = oc / DW_BLOCK;
        let window = self.window;
        let offsets = self.offsets;
        let zeros = [0i16; DW_BLOCK];
        let load = |at: Option<usize>, c0: usize| -> __m256i {
            // SAFETY: a tap offset starts a whole pixel inside the window (checked above) and
            // c0 + 16 <= ic; otherwise 16 zeros (the padding minus the zero point) are read.
            unsafe {
                match at {
                    Some(o) => _mm256_loadu_si256(window.as_ptr().add(o + c0) as *const __m256i),
                    None => _mm256_loadu_si256(zeros.as_ptr() as *const __m256i),
                }
            }
        };
        for blk in from_block..blocks {
            let c0 = blk * DW_BLOCK;
            // SAFETY: the stage is padded to whole blocks of 16 channels.
            let (s0, s1) = unsafe {
                (
                    gemm::avx2::load_stage(stage, c0),
                    gemm::avx2::load_stage(stage, c0 + 8),
                )
            };
            let wb = &pairs[blk * npairs * 2 * DW_BLOCK..(blk + 1) * npairs * 2 * DW_BLOCK];
            for ox in 0..g.ow {
                let taps_at = &offsets[ox * 2 * npairs..(ox + 1) * 2 * npairs];
                let mut acc_lo = _mm256_setzero_si256();
                let mut acc_hi = _mm256_setzero_si256();
                for p in 0..npairs {
                    let x0 = load(taps_at[2 * p], c0);
                    let x1 = load(taps_at[2 * p + 1], c0);
                    // SAFETY: wb holds npairs * 32 values.
                    let (wl, wh) = unsafe {
                        (
                            _mm256_loadu_si256(wb.as_ptr().add(p * 32) as *const __m256i),
                            _mm256_loadu_si256(wb.as_ptr().add(p * 32 + 16) as *const __m256i),
                        )
                    };
                    acc_lo = _mm256_add_epi32(
                        acc_lo,
                        _mm256_madd_epi16(_mm256_unpacklo_epi16(x0, x1), wl),
                    );
                    acc_hi = _mm256_add_epi32(
                        acc_hi,
                        _mm256_madd_epi16(_mm256_unpackhi_epi16(x0, x1), wh),
                    );
                }
                // acc_lo holds channels {0-3 | 8-11}, acc_hi {4-7 | 12-15}.
                let v0 = _mm256_permute2x128_si256(acc_lo, acc_hi, 0x20);
                let v1 = _mm256_permute2x128_si256(acc_lo, acc_hi, 0x31);
                let bytes = gemm::avx2::narrow16(
                    gemm::avx2::requant8(v0, &s0),
                    gemm::avx2::requant8(v1, &s1),
                    signed_out,
                );
                let dst = &mut out_row[ox * oc + c0..ox * oc + c0 + DW_BLOCK];
                // SAFETY: dst holds 16 bytes.
                unsafe { _mm_storeu_si128(dst.as_mut_ptr() as *mut __m128i, bytes) };
            }
        }
    }
}

/// i16 values of the widened input window of the vectorized depthwise kernel (128 KiB):
/// the rows a band of output rows reads, kept in L2.
const DW_WINDOW_BUDGET: usize = 1 << 16;

/// Channels `c0..oc` of one depth-multiplier-1 output row, one at a time.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn depthwise_tail<T: Q8>(
    g: &Geometry,
    x: &[T],
    zp: i32,
    w: &[i16],
    row: usize,
    c0: usize,
    stage: &Stage,
    out_row: &mut [u8],
) {
    let b = row / g.oh;
    let oy = row % g.oh;
    for ox in 0..g.ow {
        for c in c0..g.oc {
            let mut acc = 0i32;
            for ky in 0..g.kh {
                let Some(iy) = g.in_y(oy, ky) else { continue };
                for kx in 0..g.kw {
                    let Some(ix) = g.in_x(ox, kx) else { continue };
                    let xv = x[((b * g.ih + iy) * g.iw + ix) * g.ic + c].to_i32() - zp;
                    acc += xv * i32::from(w[(ky * g.kw + kx) * g.oc + c]);
                }
            }
            out_row[ox * g.oc + c] = stage.apply(c, acc) as u8;
        }
    }
}

/// Whether the pair-interleaved AVX2 kernel (`depthwise_avx2`) runs (x86 only).
fn interleaved_applies(multiplier: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    return depthwise_avx2::applies(multiplier);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = multiplier;
        false
    }
}

/// The filter packed for the pair-interleaved AVX2 kernel (only where
/// [`interleaved_applies`]).
fn interleaved_pack(w: &[i16], dims: [usize; 4]) -> Result<Vec<i16>> {
    #[cfg(target_arch = "x86_64")]
    return depthwise_avx2::pack(w, dims);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (w, dims);
        Err(RuntimeError::Internal(
            "the AVX2 depthwise packing on another architecture".into(),
        ))
    }
}

impl Kernel for DepthwiseConv {
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        let mut prepared = PreparedWeights::empty();
        if let (Some(Some(bytes)), Some(dims)) = (weights.get(1), self.filter_dims) {
            if bytes.len() != dims.iter().product::<usize>() {
                return Err(RuntimeError::kernel("filter does not match its shape"));
            }
            let w = widen_filter(bytes, &self.fq)?;
            // One layout per kernel: the dot-product kernel's packed bytes and sums, or
            // the widened filter and its interleaved pairs.
            if depthwise_vnni::applies(&self.fq, self.params.multiplier, self.filter_dims) {
                let (packed, sums) = depthwise_vnni::pack(&w, dims[3])?;
                prepared.push(AlignedBuf::from_bytes(&packed)?);
                prepared.push(AlignedBuf::from_bytes(bytemuck::cast_slice(&sums))?);
            } else if interleaved_applies(self.params.multiplier) {
                prepared.push(i16_buffer(&w)?);
                prepared.push(i16_buffer(&interleaved_pack(&w, dims)?)?);
            } else {
                prepared.push(i16_buffer(&w)?);
                let pairs = pack_depthwise_pairs(&w, dims[1] * dims[2], dims[3])?;
                prepared.push(i16_buffer(&pairs)?);
            }
        }
        prepared.add_raw(weights, &[1])?;
        Ok(prepared)
    }

    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let p = &self.params;
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let in_shape = rank4(input.shape, "input")?;
        let fdims = run_filter_dims(self.filter_dims, ctx, 1)?;
        let vnni_applies = depthwise_vnni::applies(&self.fq, p.multiplier, self.filter_dims);
        let (w, pairs): (Cow<[i16]>, Cow<[i16]>) = if vnni_applies {
            (Cow::Borrowed(&[]), Cow::Borrowed(&[]))
        } else if self.filter_dims.is_some() {
            (
                Cow::Borrowed(prepared_i16(ctx.weights, 0)?),
                Cow::Borrowed(prepared_i16(ctx.weights, 1)?),
            )
        } else {
            let f = ctx.input(1)?;
            let w = widen_filter(q8_bytes(&f, "filter")?, &self.fq)?;
            let pairs = if interleaved_applies(p.multiplier) {
                interleaved_pack(&w, fdims)?
            } else {
                pack_depthwise_pairs(&w, fdims[1] * fdims[2], fdims[3])?
            };
            (Cow::Owned(w.to_vec()), Cow::Owned(pairs.to_vec()))
        };
        let bias = bias_values(ctx, fdims[3])?;
        // The 8-bit dot-product kernel's packed filter and per-channel weight sums.
        let vnni: Option<(&[u8], &[i32])> = if vnni_applies {
            let packed = ctx
                .weights
                .buffer(0)
                .map(WeightBuf::as_bytes)
                .ok_or_else(|| RuntimeError::kernel("packed filter is missing"))?;
            let sums = ctx
                .weights
                .buffer(1)
                .map(WeightBuf::as_bytes)
                .and_then(|b| bytemuck::try_cast_slice(b).ok())
                .ok_or_else(|| RuntimeError::kernel("filter sums are missing"))?;
            Some((packed, sums))
        } else {
            None
        };
        // Built once when the bias is constant; for the dot-product kernel, in the order
        // its accumulators hold the channels, with the zero-point correction in the bias.
        let mut fresh = None;
        let stage = &self.stage.get_or_build(&mut fresh, || {
            Ok(vec![match vnni {
                Some((_, sums)) => depthwise_vnni::stage(
                    &self.fq,
                    bias,
                    sums,
                    (self.oq.in_qt, self.oq.in_zp),
                    self.oq.out_zp,
                    self.oq.range,
                )?,
                None => self
                    .fq
                    .stage(0, fdims[3], Some(bias), self.oq.out_zp, self.oq.range)?,
            }])
        })?[0];
        let threads = ctx.threads;
        let oq = &self.oq;
        let out_t = ctx.output(0)?;
        let out_shape = rank4(out_t.shape, "output")?;
        let out = q8_bytes_mut(out_t, "output")?;
        with_nhwc(
            p.nchw,
            x,
            in_shape,
            out,
            out_shape,
            |x, in_shape, out, out_shape| {
                let g = Geometry::new(p, in_shape, (fdims[1], fdims[2]), out_shape)?;
                let m = p.multiplier;
                if fdims[0] != 1
                    || fdims[3] != g.oc
                    || g.ic * m != g.oc
                    || (vnni.is_none() && w.len() != fdims.iter().product::<usize>())
                {
                    return Err(RuntimeError::kernel(format!(
                        "filter {fdims:?} and depth multiplier {m} do not fit input channels {} and output channels {}",
                        g.ic, g.oc
                    )));
                }
                if x.len() != g.n * g.ih * g.iw * g.ic || out.len() != g.n * g.oh * g.ow * g.oc {
                    return Err(RuntimeError::kernel("input or output has the wrong size"));
                }
                let signed = oq.out_qt == QType::I8;
                if let Some((packed, _)) = vnni {
                    return depthwise_vnni::run(
                        &g,
                        x,
                        (oq.in_qt, oq.in_zp),
                        packed,
                        stage,
                        threads,
                        out,
                        signed,
                    );
                }
                #[cfg(target_arch = "x86_64")]
                if interleaved_applies(m) {
                    return depthwise_avx2::run(
                        &g,
                        x,
                        (oq.in_qt, oq.in_zp),
                        &pairs,
                        stage,
                        threads,
                        out,
                        signed,
                    );
                }
                let taps = g.kh * g.kw;
                if pairs.len() != (g.oc / DW_BLOCK) * taps.div_ceil(2) * 2 * DW_BLOCK {
                    return Err(RuntimeError::kernel(
                        "packed depthwise filter has the wrong size",
                    ));
                }
                let row_len = g.ow * g.oc;
                let isa = gemm::best_isa();
                let fast = cfg!(target_arch = "x86_64")
                    && isa != Isa::Portable
                    && m == 1
                    && g.oc >= DW_BLOCK;
                // The vectorized path reads a window of input rows widened to i16 minus
                // the zero point (each value is read about kh * kw / (sh * sw) times),
                // refilled as the output rows advance: at least the rows one output row
                // needs, up to the budget.
                let pixel_row = g.iw * g.ic;
                let needed = (g.kh - 1) * g.dh + 1;
                let window_rows =
                    (DW_WINDOW_BUDGET / pixel_row.max(1)).clamp(needed, g.ih.max(needed));
                let band = (window_rows.saturating_sub(needed) / g.sh + 1).max(1);
                let scratch = if fast { window_rows * pixel_row } else { 0 };
                let tile = if fast { band } else { 1 };
                for_row_tiles(
                    threads,
                    out,
                    row_len,
                    tile,
                    scratch,
                    |r0, out_rows, window: &mut [i16]| {
                        // The widened window serves only the x86 path.
                        #[cfg(not(target_arch = "x86_64"))]
                        let _ = (window, fast);
                        #[cfg(target_arch = "x86_64")]
                        if fast {
                            let done = g.oc / DW_BLOCK * DW_BLOCK;
                            // The window's image and first row; None until filled.
                            let mut held: Option<(usize, usize, usize)> = None;
                            for (i, out_row) in out_rows.chunks_exact_mut(row_len).enumerate() {
                                let row = r0 + i;
                                let (b, oy) = (row / g.oh, row % g.oh);
                                let lo = (oy * g.sh).saturating_sub(g.pad_top).min(g.ih);
                                let hi = (oy * g.sh + needed).saturating_sub(g.pad_top).min(g.ih);
                                let covered = matches!(held, Some((hb, y0, y1)) if hb == b && y0 <= lo && hi <= y1);
                                if !covered {
                                    let y1 = (lo + window_rows).min(g.ih);
                                    let src = &x
                                        [(b * g.ih + lo) * pixel_row..(b * g.ih + y1) * pixel_row];
                                    widen_bytes(oq.in_qt, oq.in_zp, src, window);
                                    held = Some((b, lo, y1));
                                }
                                let (_, y0, y1) = held.unwrap_or((b, lo, lo));
                                let filled = &window[..(y1 - y0) * pixel_row];
                                // SAFETY: AVX2 is available (best_isa); the kernel checks its
                                // offsets against the window and its other sizes.
                                let ok = unsafe {
                                    depthwise_row_pairs(
                                        &g, filled, y0, &pairs, row, stage, out_row, signed,
                                    )
                                };
                                if !ok {
                                    return Err(RuntimeError::Internal(
                                        "depthwise window does not cover the taps".into(),
                                    ));
                                }
                                if done < g.oc {
                                    match oq.in_qt {
                                        QType::U8 => depthwise_tail::<u8>(
                                            &g,
                                            super::super::typed(x),
                                            oq.in_zp,
                                            &w,
                                            row,
                                            done,
                                            stage,
                                            out_row,
                                        ),
                                        QType::I8 => depthwise_tail::<i8>(
                                            &g,
                                            super::super::typed(x),
                                            oq.in_zp,
                                            &w,
                                            row,
                                            done,
                                            stage,
                                            out_row,
                                        ),
                                    }
                                }
                            }
                            return Ok(());
                        }
                        let out_row = out_rows;
                        let row = r0;
                        let mut acc = vec![0i32; g.oc];
                        match oq.in_qt {
                            QType::U8 => depthwise_row::<u8>(
                                &g,
                                m,
                                super::super::typed(x),
                                oq.in_zp,
                                &w,
                                row,
                                &mut acc,
                                stage,
                                out_row,
                                signed,
                            ),
                            QType::I8 => depthwise_row::<i8>(
                                &g,
                                m,
                                super::super::typed(x),
                                oq.in_zp,
                                &w,
                                row,
                                &mut acc,
                                stage,
                                out_row,
                                signed,
                            ),
                        }
                        Ok(())
                    },
                )
            },
        )
    }
}

/// One output row (batch b, row oy = `row`): accumulate, then requantize per pixel.
#[allow(clippy::too_many_arguments)]
fn depthwise_row<T: Q8>(
    g: &Geometry,
    m: usize,
    x: &[T],
    zp: i32,
    w: &[i16],
    row: usize,
    acc: &mut [i32],
    stage: &Stage,
    out_row: &mut [u8],
    signed: bool,
) {
    let isa = gemm::best_isa();
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: AVX2 is available (best_isa checked it at run time).
        unsafe { depthwise_row_avx2(g, m, x, zp, w, row, acc, stage, out_row, signed) };
        return;
    }
    depthwise_row_impl(isa, g, m, x, zp, w, row, acc, stage, out_row, signed);
}

/// [`depthwise_row_impl`] compiled for AVX2 (it is inlined here), for processors that
/// have it.
///
/// # Safety
/// The CPU supports AVX2 (as `gemm::best_isa` returning [`Isa::Avx2`] says); there is
/// no other requirement: the body is safe code.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn depthwise_row_avx2<T: Q8>(
    g: &Geometry,
    m: usize,
    x: &[T],
    zp: i32,
    w: &[i16],
    row: usize,
    acc: &mut [i32],
    stage: &Stage,
    out_row: &mut [u8],
    signed: bool,
) {
    depthwise_row_impl(Isa::Avx2, g, m, x, zp, w, row, acc, stage, out_row, signed);
}

/// Channels per accumulation block: two AVX2 registers of i32.
const DW_BLOCK: usize = 16;

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn depthwise_row_impl<T: Q8>(
    isa: Isa,
    g: &Geometry,
    m: usize,
    x: &[T],
    zp: i32,
    w: &[i16],
    row: usize,
    acc: &mut [i32],
    stage: &Stage,
    out_row: &mut [u8],
    signed: bool,
) {
    let (oc, ic) = (g.oc, g.ic);
    let b = row / g.oh;
    let oy = row % g.oh;
    // Kernel rows inside the input for this output row.
    let taps_y: Vec<(usize, usize)> = (0..g.kh)
        .filter_map(|ky| g.in_y(oy, ky).map(|iy| (ky, iy)))
        .collect();
    let taps_y = &taps_y[..];
    for (ox, px) in out_row.chunks_exact_mut(oc).enumerate() {
        if m == 1 {
            let mut c0 = 0;
            while c0 + DW_BLOCK <= oc {
                let mut blk = [0i32; DW_BLOCK];
                for &(ky, iy) in taps_y {
                    let base = (b * g.ih + iy) * g.iw;
                    for kx in 0..g.kw {
                        let Some(ix) = g.in_x(ox, kx) else { continue };
                        let Some(xs) = x[(base + ix) * ic + c0..].first_chunk::<DW_BLOCK>() else {
                            continue;
                        };
                        let Some(ws) = w[(ky * g.kw + kx) * oc + c0..].first_chunk::<DW_BLOCK>()
                        else {
                            continue;
                        };
                        for l in 0..DW_BLOCK {
                            blk[l] += (xs[l].to_i32() - zp) * i32::from(ws[l]);
                        }
                    }
                }
                acc[c0..c0 + DW_BLOCK].copy_from_slice(&blk);
                c0 += DW_BLOCK;
            }
            if c0 < oc {
                acc[c0..].fill(0);
                for &(ky, iy) in taps_y {
                    let base = (b * g.ih + iy) * g.iw;
                    for kx in 0..g.kw {
                        let Some(ix) = g.in_x(ox, kx) else { continue };
                        let xs = &x[(base + ix) * ic + c0..(base + ix + 1) * ic];
                        let ws = &w[(ky * g.kw + kx) * oc + c0..(ky * g.kw + kx + 1) * oc];
                        for ((a, &xv), &wv) in acc[c0..].iter_mut().zip(xs).zip(ws) {
                            *a += (xv.to_i32() - zp) * i32::from(wv);
                        }
                    }
                }
            }
        } else {
            acc.fill(0);
            for &(ky, iy) in taps_y {
                let base = (b * g.ih + iy) * g.iw;
                for kx in 0..g.kw {
                    let Some(ix) = g.in_x(ox, kx) else { continue };
                    let xs = &x[(base + ix) * ic..(base + ix + 1) * ic];
                    let ws = &w[(ky * g.kw + kx) * oc..(ky * g.kw + kx + 1) * oc];
                    for ((a, wv), &xv) in acc.chunks_exact_mut(m).zip(ws.chunks_exact(m)).zip(xs) {
                        let xv = xv.to_i32() - zp;
                        for (a, &wv) in a.iter_mut().zip(wv) {
                            *a += xv * i32::from(wv);
                        }
                    }
                }
            }
        }
        gemm::requantize_row(isa, acc, stage, px, signed);
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    use super::super::gemm::tests::Rng;

    /// A depthwise geometry: input `[n, ih, iw, c]`, filter, strides and dilations, and
    /// the padding above/below and left/right; None when the window does not fit.
    type Shape = ([usize; 4], [usize; 2], [usize; 2], [usize; 2]);
    fn geometry(
        ([n, ih, iw, c], [kh, kw], [sh, sw], [dh, dw]): Shape,
        [pt, pb]: [usize; 2],
        [pl, pr]: [usize; 2],
    ) -> Option<Geometry> {
        let (eh, ew) = ((kh - 1) * dh + 1, (kw - 1) * dw + 1);
        Some(Geometry {
            n,
            ih,
            iw,
            ic: c,
            oh: (ih + pt + pb).checked_sub(eh)? / sh + 1,
            ow: (iw + pl + pr).checked_sub(ew)? / sw + 1,
            oc: c,
            kh,
            kw,
            sh,
            sw,
            dh,
            dw,
            pad_top: pt,
            pad_left: pl,
        })
    }

    /// The AVX2 depthwise kernel (both input variants, plus the scalar tail) against the
    /// portable loops, on random geometry and data.
    #[test]
    fn depthwise_paths_agree() {
        if gemm::best_isa() == Isa::Portable {
            return;
        }
        let mut rng = Rng(0x5151_7a7a_0101_3c3c);
        for case in 0..60 {
            let (ih, iw) = (rng.range(1, 9) as usize, rng.range(1, 9) as usize);
            let c = [16, 19, 32, 35, 48][case % 5];
            let (kh, kw) = (rng.range(1, 4) as usize, rng.range(1, 4) as usize);
            let (sh, sw) = (rng.range(1, 2) as usize, rng.range(1, 2) as usize);
            let (dh, dw) = (rng.range(1, 2) as usize, rng.range(1, 2) as usize);
            let (pt, pl) = (rng.range(0, 2) as usize, rng.range(0, 2) as usize);
            let eh = (kh - 1) * dh + 1;
            let shape = ([1, ih, iw, c], [kh, kw], [sh, sw], [dh, dw]);
            let Some(g) = geometry(shape, [pt, pt], [pl, pl]) else {
                continue;
            };
            let signed = case % 2 == 0;
            let qt = if signed { QType::I8 } else { QType::U8 };
            let zp = rng.range(qt.min(), qt.max());
            let x: Vec<u8> = (0..ih * iw * c).map(|_| rng.next() as u8).collect();
            let w: Vec<i16> = (0..kh * kw * c)
                .map(|_| rng.range(-255, 255) as i16)
                .collect();
            let pairs = pack_depthwise_pairs(&w, kh * kw, c).unwrap();
            let bias: Vec<i32> = (0..c).map(|_| rng.range(-50_000, 50_000)).collect();
            let mults: Vec<Multiplier> = (0..c)
                .map(|_| Multiplier::new(f64::from(rng.range(1, 1000)) * 1e-5).unwrap())
                .collect();
            let stage =
                Stage::new(c, Some(&bias), &mults, rng.range(-128, 127), (-128, 127)).unwrap();
            // Two cases in three requantize in single precision (the default, which the
            // 512-bit path vectorizes on 16 lanes).
            let stage = if case % 3 == 0 {
                stage
            } else {
                let scales: Vec<f32> = (0..c).map(|_| rng.range(1, 1000) as f32 * 1e-5).collect();
                stage.float_scales(&scales).unwrap()
            };
            let wide: Vec<i16> = x.iter().map(|&b| widen(qt, zp, b)).collect();
            let row_len = g.ow * c;
            for row in 0..g.oh {
                let mut want = vec![0u8; row_len];
                let mut acc = vec![0i32; c];
                if signed {
                    depthwise_row_impl::<i8>(
                        Isa::Portable,
                        &g,
                        1,
                        bytemuck::cast_slice(&x),
                        zp,
                        &w,
                        row,
                        &mut acc,
                        &stage,
                        &mut want,
                        true,
                    );
                } else {
                    depthwise_row_impl::<u8>(
                        Isa::Portable,
                        &g,
                        1,
                        &x,
                        zp,
                        &w,
                        row,
                        &mut acc,
                        &stage,
                        &mut want,
                        true,
                    );
                }
                let done = c / DW_BLOCK * DW_BLOCK;
                for variant in 0..2 {
                    let mut got = vec![0u8; row_len];
                    // Variant 0: the whole image as the window; 1: only the rows needed.
                    let (lo, hi) = if variant == 0 {
                        (0, ih)
                    } else {
                        let lo = (row * sh).saturating_sub(pt).min(ih);
                        (lo, (row * sh + eh).saturating_sub(pt).min(ih).max(lo))
                    };
                    // SAFETY: AVX2 is available (checked above).
                    let ok = unsafe {
                        depthwise_row_pairs(
                            &g,
                            &wide[lo * iw * c..hi * iw * c],
                            lo,
                            &pairs,
                            row,
                            &stage,
                            &mut got,
                            true,
                        )
                    };
                    assert!(ok, "case {case} row {row}");
                    if done < c {
                        if signed {
                            depthwise_tail::<i8>(
                                &g,
                                bytemuck::cast_slice(&x),
                                zp,
                                &w,
                                row,
                                done,
                                &stage,
                                &mut got,
                            );
                        } else {
                            depthwise_tail::<u8>(&g, &x, zp, &w, row, done, &stage, &mut got);
                        }
                    }
                    assert_eq!(got, want, "case {case} row {row} variant {variant}");
                }
            }
        }
    }

    /// The pair-interleaved AVX2 kernel against the portable loop: random geometry
    /// (filters 1x1 to 5x5, strides to 3, dilations, padding on every side, batches,
    /// channel counts off the blocks), both input types, every requantization mode, one
    /// and two threads.
    #[test]
    fn interleaved_kernel_equals_the_portable_loop() {
        if !crate::kernels::isa::int8_avx2() {
            return;
        }
        let mut rng = Rng(0x0dd_ba11_5eed_1234);
        for case in 0..120 {
            let n = rng.range(1, 2) as usize;
            let (ih, iw) = (rng.range(1, 12) as usize, rng.range(1, 12) as usize);
            let c = [1, 8, 16, 19, 32, 35, 48][case % 7];
            let (kh, kw) = (rng.range(1, 5) as usize, rng.range(1, 5) as usize);
            let (sh, sw) = (rng.range(1, 3) as usize, rng.range(1, 3) as usize);
            let (dh, dw) = (rng.range(1, 2) as usize, rng.range(1, 2) as usize);
            let (pt, pl) = (rng.range(0, 2) as usize, rng.range(0, 2) as usize);
            let (pb, pr) = (rng.range(0, 2) as usize, rng.range(0, 2) as usize);
            let shape = ([n, ih, iw, c], [kh, kw], [sh, sw], [dh, dw]);
            let Some(g) = geometry(shape, [pt, pb], [pl, pr]) else {
                continue;
            };
            let signed_in = case % 2 == 0;
            let qt = if signed_in { QType::I8 } else { QType::U8 };
            let zp = rng.range(qt.min(), qt.max());
            let x: Vec<u8> = (0..n * ih * iw * c).map(|_| rng.next() as u8).collect();
            let w: Vec<i16> = (0..kh * kw * c)
                .map(|_| rng.range(-255, 255) as i16)
                .collect();
            let bias: Vec<i32> = (0..c).map(|_| rng.range(-50_000, 50_000)).collect();
            let mults: Vec<Multiplier> = (0..c)
                .map(|_| Multiplier::new(f64::from(rng.range(1, 1000)) * 1e-5).unwrap())
                .collect();
            let signed = case % 4 < 2;
            let range = if signed { (-128, 127) } else { (0, 255) };
            let stage =
                Stage::new(c, Some(&bias), &mults, rng.range(range.0, range.1), range).unwrap();
            let stage = match case % 3 {
                0 => stage,
                1 => stage.single_rounding().unwrap(),
                _ => {
                    let scales: Vec<f32> =
                        (0..c).map(|_| rng.range(1, 1000) as f32 * 1e-5).collect();
                    stage.float_scales(&scales).unwrap()
                }
            };
            let row_len = g.ow * c;
            let mut want = vec![0u8; n * g.oh * row_len];
            let mut acc = vec![0i32; c];
            for (row, out) in want.chunks_exact_mut(row_len).enumerate() {
                if signed_in {
                    depthwise_row_impl::<i8>(
                        Isa::Portable,
                        &g,
                        1,
                        bytemuck::cast_slice(&x),
                        zp,
                        &w,
                        row,
                        &mut acc,
                        &stage,
                        out,
                        signed,
                    );
                } else {
                    depthwise_row_impl::<u8>(
                        Isa::Portable,
                        &g,
                        1,
                        &x,
                        zp,
                        &w,
                        row,
                        &mut acc,
                        &stage,
                        out,
                        signed,
                    );
                }
            }
            let packed = depthwise_avx2::pack(&w, [1, kh, kw, c]).unwrap();
            for threads in [1, 2] {
                let mut got = vec![0u8; want.len()];
                depthwise_avx2::run(&g, &x, (qt, zp), &packed, &stage, threads, &mut got, signed)
                    .unwrap();
                assert_eq!(got, want, "case {case} threads {threads} geometry {g:?}");
            }
        }
    }
}
