//! DEPTHWISE_CONV_2D 3x3, depth multiplier 1, on AVX512-VNNI: four taps per `vpdpbusd`.
//!
//! The input bytes are read in place (no widened window): for each input column a window
//! touches and block of 64 channels, the column's three taps (kernel rows 0-2, and a
//! fourth slot of zero weight) are interleaved byte by byte (`vpunpck{l,h}bw` then
//! `vpunpck{l,h}wd`) into four registers whose every i32 lane holds one channel's taps,
//! and `vpdpbusd` multiplies them with the packed signed filter bytes and sums the
//! products into the lane. A window is three such columns; an interleaved column is kept
//! (a ring of the last three) for the next outputs whose windows share it, so at stride
//! 1 each output interleaves one new column instead of three. The twelve filter
//! registers stay loaded while the block slides along the row. The unpacks leave the channels of each 128-bit
//! lane in the order {0-3}, {4-7}, {8-11}, {12-15} across the four accumulators; the
//! output stage's per-channel constants are laid out in that order, and the saturating
//! packs (`vpackssdw`, then `vpack{s,u}swb`) put the bytes back in channel order.
//!
//! `vpdpbusd` takes unsigned inputs: int8 activations are flipped to `x + 128` (an XOR
//! of the sign bit) and the zero point with them. The products then hold `x_u * w`, not
//! `(x - x_zp) * w`; the difference, `x_zp_u * sum(w)` over all nine taps, is subtracted
//! from the bias once (taps in the padding read the zero point, so they contribute
//! exactly that share). Every sum is exact in i32, so the outputs are the same integers
//! as the other paths (and as TFLite's reference).

use super::*;

/// Channels per block: one 512-bit register of input bytes.
const BLOCK: usize = 64;
/// Taps of the filters this path takes (3x3) and their groups of four.
const TAPS: usize = 9;
const GROUPS: usize = 3;

/// True when this path runs for a depthwise convolution with these static parameters:
/// a constant 3x3 filter of multiplier 1 whose values are signed bytes with zero point 0
/// (so the packed filter is the filter itself), the single-precision output stage, on a
/// processor with AVX512-VNNI.
pub(super) fn applies(
    fq: &FilterQuant,
    multiplier: usize,
    filter_dims: Option<[usize; 4]>,
) -> bool {
    multiplier == 1
        && fq.qt == QType::I8
        && fq.zp == 0
        && fq.float_scales.is_some()
        && matches!(filter_dims, Some([1, 3, 3, _]))
        && crate::kernels::isa::int8_vnni()
}

/// The input zero point as the unsigned byte the kernel reads (int8 inputs are read
/// flipped to `x + 128`).
fn unsigned_zero_point((qt, zp): (QType, i32)) -> Result<u8> {
    let flipped = if qt == QType::I8 { zp + 128 } else { zp };
    u8::try_from(flipped).map_err(|_| RuntimeError::kernel("input zero point is outside its type"))
}

/// Index of channel `ch`, tap `tap` (`ky * 3 + kx`) in the packed filter: per block of
/// 64 channels, per kernel column `kx`, four registers (one per accumulator `k`), each
/// lane `l` of 128 bits holding channels `16 l + 4 k + j` (j = 0..3) as four tap bytes
/// (kernel rows 0-2, then a zero).
fn packed_index(ch: usize, tap: usize) -> usize {
    let (blk, within) = (ch / BLOCK, ch % BLOCK);
    let (lane, k, j) = (within / 16, within % 16 / 4, within % 4);
    let (q, t) = (tap % 3, tap / 3);
    (((blk * GROUPS + q) * 4 + k) * BLOCK) + lane * 16 + j * 4 + t
}

/// The filter `[1, 3, 3, oc]` (minus its zero point, as i16) packed for the kernel, and
/// each channel's sum of weights (for the zero-point correction).
pub(super) fn pack(w: &[i16], oc: usize) -> Result<(Vec<u8>, Vec<i32>)> {
    if w.len() != TAPS * oc {
        return Err(RuntimeError::kernel("filter does not match its shape"));
    }
    let blocks = oc.div_ceil(BLOCK);
    let mut packed = crate::kernels::util::filled(blocks * GROUPS * 4 * BLOCK, 0u8)?;
    let mut sums = crate::kernels::util::filled(oc, 0i32)?;
    for (tap, row) in w.chunks_exact(oc).enumerate() {
        for (ch, &v) in row.iter().enumerate() {
            let byte = i8::try_from(v)
                .map_err(|_| RuntimeError::kernel("a filter value does not fit a signed byte"))?;
            packed[packed_index(ch, tap)] = byte as u8;
            sums[ch] += i32::from(v);
        }
    }
    Ok((packed, sums))
}

/// The channel whose output lane `at` of the permuted stage holds: entry
/// `(blk * 4 + k) * 16 + 4 l + j` is channel `64 blk + 16 l + 4 k + j`, the order the
/// unpacks leave the channels in the accumulators (None past the last channel).
fn channel_at(at: usize, channels: usize) -> Option<usize> {
    let (blk, within) = (at / BLOCK, at % BLOCK);
    let (k, lane, j) = (within / 16, within % 16 / 4, within % 4);
    Some(blk * BLOCK + 16 * lane + 4 * k + j).filter(|&ch| ch < channels)
}

/// This kernel's output stage (single precision): per-channel constants in the
/// accumulators' order ([`channel_at`]), the zero-point correction `-x_zp_u * sum(w)`
/// in the bias. Lanes past the last channel take channel 0's scale (their outputs are
/// never stored). Built once per kernel when the bias is constant.
pub(super) fn stage(
    fq: &FilterQuant,
    bias: &[i32],
    sums: &[i32],
    input: (QType, i32),
    out_zp: i32,
    range: (i32, i32),
) -> Result<Stage> {
    let oc = sums.len();
    let Some(scales) = &fq.float_scales else {
        return Err(RuntimeError::Internal(
            "the dot-product depthwise kernel needs the single-precision stage".into(),
        ));
    };
    if bias.len() != oc || (scales.len() != 1 && scales.len() != oc) {
        return Err(RuntimeError::kernel(
            "bias or scales do not fit the channels",
        ));
    }
    let zp = i32::from(unsigned_zero_point(input)?);
    let n = oc.div_ceil(BLOCK) * BLOCK;
    let per_channel = |all_len: usize, at: usize| {
        if all_len == 1 {
            0
        } else {
            channel_at(at, oc).unwrap_or(0)
        }
    };
    let permuted_bias: Vec<i32> = (0..n)
        .map(|at| {
            channel_at(at, oc).map_or(0, |ch| bias[ch].wrapping_sub(zp.wrapping_mul(sums[ch])))
        })
        .collect();
    let multipliers: Vec<Multiplier> = (0..n)
        .map(|at| {
            fq.multipliers
                .get(per_channel(fq.multipliers.len(), at))
                .copied()
        })
        .collect::<Option<_>>()
        .ok_or_else(|| {
            RuntimeError::kernel("requantization multipliers do not fit the channels")
        })?;
    let permuted_scales: Vec<f32> = (0..n)
        .map(|at| scales[per_channel(scales.len(), at)])
        .collect();
    Stage::new(n, Some(&permuted_bias), &multipliers, out_zp, range)?.float_scales(&permuted_scales)
}

/// Runs the convolution into `out` (NHWC) with the output stage [`stage`] built.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    g: &Geometry,
    x: &[u8],
    input: (QType, i32),
    packed: &[u8],
    stage: &Stage,
    threads: usize,
    out: &mut [u8],
    signed_out: bool,
) -> Result<()> {
    let Some(constants) = stage.float_constants() else {
        return Err(RuntimeError::Internal(
            "the dot-product depthwise kernel needs the single-precision stage".into(),
        ));
    };
    let blocks = g.oc.div_ceil(BLOCK);
    let sizes_fit = g.kh == 3
        && g.kw == 3
        && g.ic == g.oc
        && stage.columns() == blocks * BLOCK
        && packed.len() == blocks * GROUPS * 4 * BLOCK
        && x.len() == g.n * g.ih * g.iw * g.ic
        && out.len() == g.n * g.oh * g.ow * g.oc;
    if !sizes_fit {
        return Err(RuntimeError::Internal(
            "depthwise operands do not fit the geometry".into(),
        ));
    }
    let rows = Rows {
        g,
        x,
        packed,
        constants: &constants,
        zp_byte: unsigned_zero_point(input)?,
        signed_in: input.0 == QType::I8,
        signed_out,
    };
    let row_len = g.ow * g.oc;
    for_row_tiles::<u8, u8>(threads, out, row_len, 1, 0, |row, out_row, _| {
        // SAFETY: AVX512F/BW/VNNI are present (`applies` checked int8_vnni when the
        // kernel was built); the sizes were checked above.
        unsafe { rows.row(row, out_row) };
        Ok(())
    })
}

/// The operands every row reads, checked by [`run`] (read by the x86-64 kernel only).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Rows<'a> {
    g: &'a Geometry,
    x: &'a [u8],
    packed: &'a [u8],
    constants: &'a gemm::FloatConstants<'a>,
    zp_byte: u8,
    signed_in: bool,
    signed_out: bool,
}

impl Rows<'_> {
    /// Output row `row` (image `row / oh`, row `row % oh`): the channels in blocks of
    /// 64 on 512-bit registers, a last block of at most 32 channels on 256-bit ones
    /// (half the work where a 512-bit block would compute lanes it never stores:
    /// MobileNetV2's 32-channel layer, and the 32- or 16-channel tails of 96 and 144).
    ///
    /// # Safety
    /// AVX512F, AVX512BW, AVX512VL and AVX512-VNNI; the sizes checked by [`run`];
    /// `out_row` is one output row.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn row(&self, row: usize, out_row: &mut [u8]) {
        let g = self.g;
        if out_row.len() != g.ow * g.oc {
            return;
        }
        let (b, oy) = (row / g.oh, row % g.oh);
        let mut rows = [None; 3];
        for (ky, r) in rows.iter_mut().enumerate() {
            *r = g.in_y(oy, ky).map(|iy| (b * g.ih + iy) * g.iw);
        }
        for blk in 0..g.oc.div_ceil(BLOCK) {
            let lanes = (g.oc - blk * BLOCK).min(BLOCK);
            // SAFETY: the CPU features, the sizes and `out_row` are this function's
            // contract; blk < oc / 64 rounded up, and `lanes`, the channels left from
            // blk * 64, is at most the chosen width's LANES.
            unsafe {
                if lanes <= <simd::Ymm as simd::Width>::LANES {
                    self.block::<simd::Ymm>(&rows, blk, lanes, out_row);
                } else {
                    self.block::<simd::Zmm>(&rows, blk, lanes, out_row);
                }
            }
        }
    }

    /// Block `blk`'s first `lanes` channels (at most `W::LANES`) of every pixel of the
    /// output row, whose kernel rows start at the input pixels `rows` (None: padding).
    ///
    /// # Safety
    /// As [`Self::row`]; `lanes <= W::LANES`.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn block<W: simd::Width>(
        &self,
        rows: &[Option<usize>; 3],
        blk: usize,
        lanes: usize,
        out_row: &mut [u8],
    ) {
        let g = self.g;
        let (c, c0) = (g.oc, blk * BLOCK);
        let mask = W::mask(lanes);
        let (xp, op) = (self.x.as_ptr(), out_row.as_mut_ptr());
        // SAFETY: the CPU features are this function's contract. The loads and stores
        // are in bounds by the sizes `run` checked: the packed filter holds GROUPS * 4
        // registers of 64 bytes per block and the stage constants (padded to whole
        // blocks) 4 * 16 per block, of which W reads the first W::LANES bytes or
        // W::LANES / 4 values; an input load starts at a pixel inside the input (`rows`
        // and in_x) and reads the block's `lanes` channels under `mask`; a store writes
        // those channels of pixel ox < ow of `out_row`.
        unsafe {
            let flip = W::splat8(if self.signed_in { i8::MIN } else { 0 });
            let zp = W::splat8(self.zp_byte as i8);
            let mut weights = [[zp; 4]; GROUPS];
            for (q, group) in weights.iter_mut().enumerate() {
                for (k, w) in group.iter_mut().enumerate() {
                    *w = W::load(
                        self.packed
                            .as_ptr()
                            .add(((blk * GROUPS + q) * 4 + k) * BLOCK),
                    );
                }
            }
            let f = self.constants;
            let mut bias = [zp; 4];
            let mut scale = [W::splat_ps(0.0); 4];
            for k in 0..4 {
                let at = (blk * 4 + k) * 16;
                bias[k] = W::load(f.bias.as_ptr().add(at) as *const u8);
                scale[k] = W::load_ps(f.scale.as_ptr().add(at));
            }
            let stage = simd::Narrow::<W> {
                hi_less_zp: W::splat_ps(f.hi_less_zp),
                zp: W::splat16(f.zp as i16),
                lo: W::splat8((f.lo_less_zp as i32 + f.zp) as i8),
                signed: self.signed_out,
            };
            // The last three interleaved input columns, at `ix % 3`, tagged with `ix`.
            let mut ring = [[zp; 4]; 3];
            let mut tags = [usize::MAX; 3];
            for ox in 0..g.ow {
                // The bias is the accumulators' start (one addition fewer per register).
                let mut acc = bias;
                for (kx, w) in weights.iter().enumerate() {
                    // A column in the padding is the zero point throughout (interleaving
                    // equal bytes leaves them equal).
                    let mut grouped = [zp; 4];
                    if let Some(ix) = g.in_x(ox, kx) {
                        let slot = ix % 3;
                        if tags[slot] != ix {
                            let mut t = [zp; 4];
                            for (t, r) in t.iter_mut().zip(rows) {
                                if let Some(r) = r {
                                    *t = W::load_bytes(mask, xp.add((r + ix) * c + c0), flip);
                                }
                            }
                            ring[slot] = W::interleave(t);
                            tags[slot] = ix;
                        }
                        grouped = ring[slot];
                    }
                    for k in 0..4 {
                        acc[k] = W::dot(acc[k], grouped[k], w[k]);
                    }
                }
                let mut scaled = acc;
                for k in 0..4 {
                    scaled[k] = W::scaled(acc[k], scale[k], stage.hi_less_zp);
                }
                W::store_bytes(mask, op.add(ox * c + c0), stage.narrow(scaled));
            }
        }
    }

    /// Never called: [`applies`] is false on other architectures.
    ///
    /// # Safety
    /// None (it does nothing); `unsafe` to match the x86-64 version.
    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn row(&self, _row: usize, _out_row: &mut [u8]) {}
}

/// The instructions of a block at two register widths: [`Zmm`] (512 bits, 64 channels)
/// and [`Ymm`] (256 bits, 32 channels). Within each 128-bit lane both do the same, so the
/// packed filter and the stage constants serve both (a 256-bit block reads the first half
/// of each 512-bit group).
#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    /// # Safety (every method)
    /// AVX512F, AVX512BW, AVX512VL and AVX512-VNNI; pointers hold what is read or
    /// written (`LANES` bytes, or `LANES / 4` values, under the mask where there is one).
    pub(super) trait Width {
        /// Channels (bytes) per register.
        const LANES: usize;
        type V: Copy;
        type F: Copy;
        type M: Copy;
        fn mask(lanes: usize) -> Self::M;
        unsafe fn splat8(v: i8) -> Self::V;
        unsafe fn splat16(v: i16) -> Self::V;
        unsafe fn splat_ps(v: f32) -> Self::F;
        unsafe fn load(p: *const u8) -> Self::V;
        unsafe fn load_ps(p: *const f32) -> Self::F;
        /// The masked bytes at `p` XOR `flip` (zero outside the mask).
        unsafe fn load_bytes(m: Self::M, p: *const u8, flip: Self::V) -> Self::V;
        unsafe fn store_bytes(m: Self::M, p: *mut u8, v: Self::V);
        /// Four taps' bytes to four registers whose every i32 lane holds one channel's
        /// four taps (channels `16 l + 4 k + j` in register k, lane l, element j).
        unsafe fn interleave(t: [Self::V; 4]) -> [Self::V; 4];
        unsafe fn dot(acc: Self::V, a: Self::V, w: Self::V) -> Self::V;
        /// `round(min(acc * scale, hi_less_zp))` as i32 (the stage before the zero
        /// point and the lower bound, which [`Narrow`] applies after narrowing).
        unsafe fn scaled(acc: Self::V, scale: Self::F, hi_less_zp: Self::F) -> Self::V;
        unsafe fn packs32(a: Self::V, b: Self::V) -> Self::V;
        unsafe fn adds16(a: Self::V, b: Self::V) -> Self::V;
        unsafe fn packs16(a: Self::V, b: Self::V, signed: bool) -> Self::V;
        unsafe fn max8(a: Self::V, b: Self::V, signed: bool) -> Self::V;
    }

    /// The output stage's narrowing constants.
    pub(super) struct Narrow<W: Width> {
        pub hi_less_zp: W::F,
        pub zp: W::V,
        pub lo: W::V,
        pub signed: bool,
    }

    impl<W: Width> Narrow<W> {
        /// Four registers of scaled i32 to one of bytes, in channel order: saturating
        /// packs to i16, the zero point added (saturating), saturating packs to bytes,
        /// then the lower bound. Values below the bound saturate on the way and end at
        /// it; the upper bound was applied before rounding, so nothing above it is left.
        ///
        /// # Safety
        /// As [`Width`].
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        pub unsafe fn narrow(&self, q: [W::V; 4]) -> W::V {
            // SAFETY: the CPU features are this function's contract, and these methods
            // only operate on registers.
            unsafe {
                let w01 = W::adds16(W::packs32(q[0], q[1]), self.zp);
                let w23 = W::adds16(W::packs32(q[2], q[3]), self.zp);
                W::max8(W::packs16(w01, w23, self.signed), self.lo, self.signed)
            }
        }
    }

    pub(super) struct Zmm;
    pub(super) struct Ymm;

    impl Width for Zmm {
        const LANES: usize = 64;
        type V = __m512i;
        type F = __m512;
        type M = __mmask64;
        fn mask(lanes: usize) -> __mmask64 {
            if lanes >= 64 {
                u64::MAX
            } else {
                (1u64 << lanes) - 1
            }
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn splat8(v: i8) -> __m512i {
            _mm512_set1_epi8(v)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn splat16(v: i16) -> __m512i {
            _mm512_set1_epi16(v)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn splat_ps(v: f32) -> __m512 {
            _mm512_set1_ps(v)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`);
        /// `p` is readable for 64 bytes (any alignment).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn load(p: *const u8) -> __m512i {
            // SAFETY: AVX512F and 64 readable bytes at `p` are this function's contract.
            unsafe { _mm512_loadu_si512(p as *const _) }
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`);
        /// `p` is readable for 16 `f32` (any alignment).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn load_ps(p: *const f32) -> __m512 {
            // SAFETY: AVX512F and 16 readable `f32` at `p` are this function's contract.
            unsafe { _mm512_loadu_ps(p) }
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`);
        /// `p` is readable at each of the 64 bytes `m` selects (the others are not
        /// read, and cannot fault).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn load_bytes(m: __mmask64, p: *const u8, flip: __m512i) -> __m512i {
            // SAFETY: AVX512BW and the bytes `m` selects being readable at `p` are this
            // function's contract; a masked load does not touch the others.
            let bytes = unsafe { _mm512_maskz_loadu_epi8(m, p as *const i8) };
            _mm512_xor_si512(bytes, flip)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`);
        /// `p` is writable at each of the 64 bytes `m` selects (the others are not
        /// written).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn store_bytes(m: __mmask64, p: *mut u8, v: __m512i) {
            // SAFETY: AVX512BW and the bytes `m` selects being writable at `p` are this
            // function's contract; a masked store does not touch the others.
            unsafe { _mm512_mask_storeu_epi8(p as *mut i8, m, v) }
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn interleave([t0, t1, t2, t3]: [__m512i; 4]) -> [__m512i; 4] {
            let (lo01, hi01) = (_mm512_unpacklo_epi8(t0, t1), _mm512_unpackhi_epi8(t0, t1));
            let (lo23, hi23) = (_mm512_unpacklo_epi8(t2, t3), _mm512_unpackhi_epi8(t2, t3));
            [
                _mm512_unpacklo_epi16(lo01, lo23),
                _mm512_unpackhi_epi16(lo01, lo23),
                _mm512_unpacklo_epi16(hi01, hi23),
                _mm512_unpackhi_epi16(hi01, hi23),
            ]
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn dot(acc: __m512i, a: __m512i, w: __m512i) -> __m512i {
            _mm512_dpbusd_epi32(acc, a, w)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn scaled(acc: __m512i, scale: __m512, hi_less_zp: __m512) -> __m512i {
            // The default MXCSR rounding: to nearest, ties to even, as the stage's
            // definition rounds.
            _mm512_cvtps_epi32(_mm512_min_ps(
                _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale),
                hi_less_zp,
            ))
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn packs32(a: __m512i, b: __m512i) -> __m512i {
            _mm512_packs_epi32(a, b)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn adds16(a: __m512i, b: __m512i) -> __m512i {
            _mm512_adds_epi16(a, b)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn packs16(a: __m512i, b: __m512i, signed: bool) -> __m512i {
            if signed {
                _mm512_packs_epi16(a, b)
            } else {
                _mm512_packus_epi16(a, b)
            }
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn max8(a: __m512i, b: __m512i, signed: bool) -> __m512i {
            if signed {
                _mm512_max_epi8(a, b)
            } else {
                _mm512_max_epu8(a, b)
            }
        }
    }

    impl Width for Ymm {
        const LANES: usize = 32;
        type V = __m256i;
        type F = __m256;
        type M = __mmask32;
        fn mask(lanes: usize) -> __mmask32 {
            if lanes >= 32 {
                u32::MAX
            } else {
                (1u32 << lanes) - 1
            }
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn splat8(v: i8) -> __m256i {
            _mm256_set1_epi8(v)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn splat16(v: i16) -> __m256i {
            _mm256_set1_epi16(v)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn splat_ps(v: f32) -> __m256 {
            _mm256_set1_ps(v)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`);
        /// `p` is readable for 32 bytes (any alignment).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn load(p: *const u8) -> __m256i {
            // SAFETY: AVX and 32 readable bytes at `p` are this function's contract.
            unsafe { _mm256_loadu_si256(p as *const _) }
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`);
        /// `p` is readable for 8 `f32` (any alignment).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn load_ps(p: *const f32) -> __m256 {
            // SAFETY: AVX and 8 readable `f32` at `p` are this function's contract.
            unsafe { _mm256_loadu_ps(p) }
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`);
        /// `p` is readable at each of the 32 bytes `m` selects (the others are not
        /// read, and cannot fault).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn load_bytes(m: __mmask32, p: *const u8, flip: __m256i) -> __m256i {
            // SAFETY: AVX512BW/VL and the bytes `m` selects being readable at `p` are this
            // function's contract; a masked load does not touch the others.
            let bytes = unsafe { _mm256_maskz_loadu_epi8(m, p as *const i8) };
            _mm256_xor_si256(bytes, flip)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`);
        /// `p` is writable at each of the 32 bytes `m` selects (the others are not
        /// written).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn store_bytes(m: __mmask32, p: *mut u8, v: __m256i) {
            // SAFETY: AVX512BW/VL and the bytes `m` selects being writable at `p` are this
            // function's contract; a masked store does not touch the others.
            unsafe { _mm256_mask_storeu_epi8(p as *mut i8, m, v) }
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn interleave([t0, t1, t2, t3]: [__m256i; 4]) -> [__m256i; 4] {
            let (lo01, hi01) = (_mm256_unpacklo_epi8(t0, t1), _mm256_unpackhi_epi8(t0, t1));
            let (lo23, hi23) = (_mm256_unpacklo_epi8(t2, t3), _mm256_unpackhi_epi8(t2, t3));
            [
                _mm256_unpacklo_epi16(lo01, lo23),
                _mm256_unpackhi_epi16(lo01, lo23),
                _mm256_unpacklo_epi16(hi01, hi23),
                _mm256_unpackhi_epi16(hi01, hi23),
            ]
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn dot(acc: __m256i, a: __m256i, w: __m256i) -> __m256i {
            _mm256_dpbusd_epi32(acc, a, w)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn scaled(acc: __m256i, scale: __m256, hi_less_zp: __m256) -> __m256i {
            _mm256_cvtps_epi32(_mm256_min_ps(
                _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale),
                hi_less_zp,
            ))
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn packs32(a: __m256i, b: __m256i) -> __m256i {
            _mm256_packs_epi32(a, b)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn adds16(a: __m256i, b: __m256i) -> __m256i {
            _mm256_adds_epi16(a, b)
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn packs16(a: __m256i, b: __m256i, signed: bool) -> __m256i {
            if signed {
                _mm256_packs_epi16(a, b)
            } else {
                _mm256_packus_epi16(a, b)
            }
        }
        /// # Safety
        /// The CPU supports AVX512F, AVX512BW, AVX512VL and AVX512-VNNI (`isa::int8_vnni`).
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        #[inline]
        unsafe fn max8(a: __m256i, b: __m256i, signed: bool) -> __m256i {
            if signed {
                _mm256_max_epi8(a, b)
            } else {
                _mm256_max_epu8(a, b)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_channel_and_tap_has_its_own_packed_byte() {
        let oc: usize = 150;
        let mut seen = vec![false; oc.div_ceil(BLOCK) * GROUPS * 4 * BLOCK];
        for ch in 0..oc {
            for tap in 0..TAPS {
                let at = packed_index(ch, tap);
                assert!(!seen[at], "channel {ch} tap {tap}");
                seen[at] = true;
            }
        }
        let w: Vec<i16> = (0..TAPS * oc).map(|i| (i % 255) as i16 - 127).collect();
        let (packed, sums) = pack(&w, oc).unwrap();
        assert_eq!(packed[packed_index(70, 4)] as i8, w[4 * oc + 70] as i8);
        assert_eq!(
            sums[3],
            (0..TAPS).map(|t| i32::from(w[t * oc + 3])).sum::<i32>()
        );
        assert!(
            pack(&[200; TAPS], 1).is_err(),
            "a weight beyond a signed byte"
        );
    }

    /// A small deterministic generator (xorshift) for the test's values.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> i32 {
            (self.next() % n) as i32
        }
    }

    /// The kernel against the definition, `stage(sum over taps inside the input of
    /// (x - x_zp) * w)`, through the scalar stage: both activation types, channel counts
    /// around the 64-channel blocks, strides, dilations, padding on every side, a batch,
    /// an activation range, one and two threads.
    #[test]
    fn the_kernel_computes_the_definition() {
        if !crate::kernels::isa::int8_vnni() {
            return; // Nothing to compare on this processor: the path never runs.
        }
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut cases = 0;
        for oc in [1usize, 16, 32, 63, 64, 65, 96, 130] {
            for (stride, dilation, pads) in [(1, 1, (1, 1)), (2, 1, (0, 2)), (1, 2, (2, 1))] {
                for in_qt in [QType::U8, QType::I8] {
                    let (n, ih, iw) = (2, 6, 9);
                    let extent = 2 * dilation + 1;
                    let oh = (ih + pads.0 + pads.1 - extent) / stride + 1;
                    let ow = (iw + pads.1 + pads.0 - extent) / stride + 1;
                    let g = Geometry {
                        n,
                        ih,
                        iw,
                        ic: oc,
                        oh,
                        ow,
                        oc,
                        kh: 3,
                        kw: 3,
                        sh: stride,
                        sw: stride,
                        dh: dilation,
                        dw: dilation,
                        pad_top: pads.0,
                        pad_left: pads.1,
                    };
                    let x: Vec<u8> = (0..n * ih * iw * oc)
                        .map(|_| rng.below(256) as u8)
                        .collect();
                    let w: Vec<i16> = (0..TAPS * oc)
                        .map(|_| (rng.below(255) - 127) as i16)
                        .collect();
                    let bias: Vec<i32> = (0..oc).map(|_| rng.below(20_001) - 10_000).collect();
                    let zp = rng.below(256) - if in_qt == QType::I8 { 128 } else { 0 };
                    let (out_zp, range, signed) = match in_qt {
                        QType::U8 => (rng.below(256), (10, 240), false),
                        QType::I8 => (rng.below(256) - 128, (-128, 100), true),
                    };
                    let multipliers: Vec<Multiplier> = (0..oc)
                        .map(|c| Multiplier::new(0.001 + 0.0005 * (c % 7) as f64).unwrap())
                        .collect();
                    let scales: Vec<f32> = (0..oc)
                        .map(|c| (0.001 + 0.0005 * (c % 7) as f64) as f32)
                        .collect();
                    let stage = Stage::new(oc, Some(&bias), &multipliers, out_zp, range)
                        .unwrap()
                        .float_scales(&scales)
                        .unwrap();
                    let (packed, sums) = pack(&w, oc).unwrap();
                    let fq = FilterQuant {
                        qt: QType::I8,
                        zp: 0,
                        multipliers: multipliers.clone(),
                        float_scales: Some(scales.clone()),
                    };
                    let kernel_stage =
                        super::stage(&fq, &bias, &sums, (in_qt, zp), out_zp, range).unwrap();
                    let mut want = vec![0u8; n * oh * ow * oc];
                    for (i, o) in want.iter_mut().enumerate() {
                        let (pixel, c) = (i / oc, i % oc);
                        let (b, oy, ox) = (pixel / (oh * ow), pixel / ow % oh, pixel % ow);
                        let mut acc = 0i32;
                        for ky in 0..3 {
                            for kx in 0..3 {
                                if let (Some(iy), Some(ix)) = (g.in_y(oy, ky), g.in_x(ox, kx)) {
                                    let byte = x[((b * ih + iy) * iw + ix) * oc + c];
                                    let v = in_qt.load(byte) - zp;
                                    acc += v * i32::from(w[(ky * 3 + kx) * oc + c]);
                                }
                            }
                        }
                        *o = stage.apply(c, acc) as u8;
                    }
                    for threads in [1, 2] {
                        let mut got = vec![0u8; want.len()];
                        run(
                            &g,
                            &x,
                            (in_qt, zp),
                            &packed,
                            &kernel_stage,
                            threads,
                            &mut got,
                            signed,
                        )
                        .unwrap();
                        assert!(
                            got == want,
                            "oc {oc} stride {stride} dilation {dilation} {in_qt:?} threads {threads}"
                        );
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 96);
    }
}
