//! DEPTHWISE_CONV_2D 3x3, depth multiplier 1, on AVX512-VNNI: four taps per `vpdpbusd`.
//!
//! The input bytes are read in place (no widened window): for each output pixel and
//! block of 64 channels, the inputs of four taps are interleaved byte by byte
//! (`vpunpck{l,h}bw` then `vpunpck{l,h}wd`) into four registers whose every i32 lane
//! holds one channel's four taps, and `vpdpbusd` multiplies them with the packed signed
//! filter bytes and sums the four products into the lane. Nine taps are three such
//! groups (the last padded with zero weights); the twelve filter registers stay loaded
//! while the block slides along the row. The unpacks leave the channels of each 128-bit
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

/// Index of channel `ch`, tap `tap` in the packed filter: per block of 64 channels, per
/// group of four taps, four registers (one per accumulator `k`), each lane `l` of 128
/// bits holding channels `16 l + 4 k + j` (j = 0..3) as four tap bytes.
fn packed_index(ch: usize, tap: usize) -> usize {
    let (blk, within) = (ch / BLOCK, ch % BLOCK);
    let (lane, k, j) = (within / 16, within % 16 / 4, within % 4);
    let (q, t) = (tap / 4, tap % 4);
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

/// The operands every row reads, checked by [`run`].
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
    /// Output row `row` (image `row / oh`, row `row % oh`).
    ///
    /// # Safety
    /// AVX512F, AVX512BW and AVX512-VNNI; the sizes checked by [`run`]; `out_row` is one
    /// output row.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn row(&self, row: usize, out_row: &mut [u8]) {
        use std::arch::x86_64::*;
        let g = self.g;
        let c = g.oc;
        if out_row.len() != g.ow * c {
            return;
        }
        let (b, oy) = (row / g.oh, row % g.oh);
        let rows: [Option<usize>; 3] =
            std::array::from_fn(|ky| g.in_y(oy, ky).map(|iy| (b * g.ih + iy) * g.iw));
        let flip = _mm512_set1_epi8(if self.signed_in { i8::MIN } else { 0 });
        let zp = _mm512_set1_epi8(self.zp_byte as i8);
        let (xp, op) = (self.x.as_ptr(), out_row.as_mut_ptr());
        for blk in 0..c.div_ceil(BLOCK) {
            let c0 = blk * BLOCK;
            let lanes = (c - c0).min(BLOCK);
            let mask: __mmask64 = if lanes == BLOCK {
                u64::MAX
            } else {
                (1u64 << lanes) - 1
            };
            // SAFETY (loads and stores below): the packed filter holds GROUPS * 4
            // registers per block; the stage constants 4 * 16 per block; an input load
            // starts at a pixel inside the input (rows and in_x) and reads the block's
            // channels under `mask`; a store writes the block's channels of pixel ox.
            let weights: [[__m512i; 4]; GROUPS] = std::array::from_fn(|q| {
                std::array::from_fn(|k| unsafe {
                    _mm512_loadu_si512(
                        self.packed
                            .as_ptr()
                            .add(((blk * GROUPS + q) * 4 + k) * BLOCK)
                            as *const _,
                    )
                })
            });
            let stages: [gemm::avx512::Float16; 4] = std::array::from_fn(|k| unsafe {
                gemm::avx512::Float16::load(self.constants, (blk * 4 + k) * 16)
            });
            for ox in 0..g.ow {
                let mut acc = [_mm512_setzero_si512(); 4];
                for (q, w) in weights.iter().enumerate() {
                    let tap = |t: usize| -> __m512i {
                        let tap = 4 * q + t;
                        if tap >= TAPS {
                            return zp;
                        }
                        match (rows[tap / 3], g.in_x(ox, tap % 3)) {
                            (Some(r), Some(ix)) => _mm512_xor_si512(
                                unsafe {
                                    _mm512_maskz_loadu_epi8(
                                        mask,
                                        xp.add((r + ix) * c + c0) as *const i8,
                                    )
                                },
                                flip,
                            ),
                            _ => zp,
                        }
                    };
                    let (t0, t1, t2, t3) = (tap(0), tap(1), tap(2), tap(3));
                    let (lo01, hi01) = (_mm512_unpacklo_epi8(t0, t1), _mm512_unpackhi_epi8(t0, t1));
                    let (lo23, hi23) = (_mm512_unpacklo_epi8(t2, t3), _mm512_unpackhi_epi8(t2, t3));
                    let grouped = [
                        _mm512_unpacklo_epi16(lo01, lo23),
                        _mm512_unpackhi_epi16(lo01, lo23),
                        _mm512_unpacklo_epi16(hi01, hi23),
                        _mm512_unpackhi_epi16(hi01, hi23),
                    ];
                    for k in 0..4 {
                        acc[k] = _mm512_dpbusd_epi32(acc[k], grouped[k], w[k]);
                    }
                }
                let q: [__m512i; 4] = std::array::from_fn(|k| stages[k].requantize_i32(acc[k]));
                // In the 8-bit range already, so the saturating packs only reorder.
                let words = (
                    _mm512_packs_epi32(q[0], q[1]),
                    _mm512_packs_epi32(q[2], q[3]),
                );
                let bytes = if self.signed_out {
                    _mm512_packs_epi16(words.0, words.1)
                } else {
                    _mm512_packus_epi16(words.0, words.1)
                };
                unsafe { _mm512_mask_storeu_epi8(op.add(ox * c + c0) as *mut i8, mask, bytes) };
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn row(&self, _row: usize, _out_row: &mut [u8]) {}
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
        for oc in [1usize, 16, 63, 64, 65, 130] {
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
        assert_eq!(cases, 72);
    }
}
