//! DEPTHWISE_CONV_2D of multiplier 1 on AVX2 processors without AVX-512 (any filter
//! size, stride, dilation and padding): `vpmaddwd` on pairs of horizontally adjacent
//! taps, read from a window whose pairs are already interleaved.
//!
//! Why not the pairs kernel of [`super::depthwise`]: that one interleaves the two taps'
//! inputs with `vpunpck{l,h}wd` per pixel (shuffles run on one port), looks up every tap
//! as an `Option` offset (a branch each), and its output stage did not fit in registers.
//! It ran the int8 depthwise layers of MobileNetV2 at 1.5x the time of the float ones.
//! Here:
//! - Each input row the window needs is widened once to i16 minus the zero point, with
//!   the padding as zeros (so no tap is ever out of bounds or special), channels
//!   rounded up to 8, and stored *pair-interleaved*: column `x` holds, per channel,
//!   `(v[x], v[x + dw])`. One 256-bit load at column `ox * sw + 2 j dw` then holds 8
//!   channels' inputs for the taps `2j` and `2j + 1` of a kernel row, exactly the
//!   operand `vpmaddwd` multiplies with the packed weights `(w[2j], w[2j + 1])`, and
//!   the sums come out in channel order. A kernel row of odd width pairs its last tap
//!   with a zero weight.
//! - The rows live in a ring of `(kh - 1) dh + 1` slots, so at stride 1 every input row
//!   is widened once per tile of output rows, not once per output row.
//! - A row of accumulators (16 channels x the output width, in L1) is filled first, 3x3
//!   filters with their 12 weight registers held across the row, then requantized in a
//!   second loop that holds the stage's constants.
//!
//! Every product is exact (both operands in [-255, 255]) and summed in i32 as the other
//! paths do, so the outputs are the same bytes (tested against the portable loop).

use std::arch::x86_64::*;

use super::*;

/// Channels per register of pairs (16 i16: 8 channels x 2 taps).
const LANES: usize = 8;
/// Channels per block of the main loop (two registers).
const BLOCK: usize = 16;

/// True when this kernel runs: multiplier 1 on a processor with AVX2 and no AVX-512
/// (AVX-512 processors take [`super::depthwise_vnni`] or the 32-channel kernel of
/// [`super::depthwise`]).
pub(super) fn applies(multiplier: usize) -> bool {
    multiplier == 1 && crate::kernels::isa::int8_avx2() && !crate::kernels::isa::float_avx512()
}

/// The shape this kernel's packing needs.
#[derive(Clone, Copy, Debug)]
struct Packing {
    kh: usize,
    /// Tap pairs per kernel row: `ceil(kw / 2)`.
    pairs: usize,
    /// Channels rounded up to a whole block of 16.
    cp: usize,
}

impl Packing {
    fn new(kh: usize, kw: usize, channels: usize) -> Packing {
        Packing {
            kh,
            pairs: kw.div_ceil(2),
            cp: channels.div_ceil(BLOCK) * BLOCK,
        }
    }

    /// i16 values of the packed filter.
    fn len(&self) -> usize {
        self.cp * self.kh * self.pairs * 2
    }

    /// Where the 16 values of channels `c8..c8 + 8` (c8 a multiple of 8) for kernel
    /// row `ky`, pair `j` start.
    fn at(&self, c8: usize, ky: usize, j: usize) -> usize {
        ((c8 / LANES * self.kh + ky) * self.pairs + j) * 2 * LANES
    }
}

/// The filter `[1, KH, KW, OC]` minus its zero point (as i16, the order of the input)
/// packed for [`run`]: per 8 channels, kernel row and pair of taps, each channel's two
/// weights adjacent (the second zero past the row's last tap, as are channels past OC).
pub(super) fn pack(w: &[i16], [_, kh, kw, oc]: [usize; 4]) -> Result<Vec<i16>> {
    if w.len() != kh * kw * oc {
        return Err(RuntimeError::kernel("filter does not match its shape"));
    }
    let p = Packing::new(kh, kw, oc);
    let mut out = crate::kernels::util::filled(p.len(), 0i16)?;
    for ky in 0..kh {
        for kx in 0..kw {
            for c in 0..oc {
                let at = p.at(c / LANES * LANES, ky, kx / 2) + 2 * (c % LANES) + kx % 2;
                out[at] = w[(ky * kw + kx) * oc + c];
            }
        }
    }
    Ok(out)
}

/// The window's dimensions for one geometry.
struct Window {
    /// Pair-interleaved columns per row: the last output's last pair starts at
    /// `(ow - 1) sw + 2 (pairs - 1) dw`.
    cols: usize,
    /// i16 values per row: `cols * cp * 2`.
    row_len: usize,
    /// Ring slots: the rows one output row reads.
    slots: usize,
}

impl Window {
    fn new(g: &Geometry, p: &Packing) -> Window {
        let cols = (g.ow - 1) * g.sw + 2 * (p.pairs - 1) * g.dw + 1;
        Window {
            cols,
            row_len: cols * p.cp * 2,
            slots: (g.kh - 1) * g.dh + 1,
        }
    }
}

/// Depthwise convolution of multiplier 1 (`g.ic == g.oc`) on NHWC bytes `x` of type and
/// zero point `input`, with the filter from [`pack`], writing `out` through `stage`.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    g: &Geometry,
    x: &[u8],
    input: (QType, i32),
    packed: &[i16],
    stage: &Stage,
    threads: usize,
    out: &mut [u8],
    signed: bool,
) -> Result<()> {
    let p = Packing::new(g.kh, g.kw, g.oc);
    if g.ic != g.oc
        || packed.len() != p.len()
        || stage.columns() != g.oc
        || x.len() != g.n * g.ih * g.iw * g.ic
        || out.len() != g.n * g.oh * g.ow * g.oc
    {
        return Err(RuntimeError::kernel(
            "depthwise operands do not match the geometry",
        ));
    }
    if !crate::kernels::isa::int8_avx2() {
        return Err(RuntimeError::Internal(
            "the AVX2 depthwise kernel on a processor without AVX2".into(),
        ));
    }
    if out.is_empty() {
        return Ok(());
    }
    let win = Window::new(g, &p);
    // Scratch: the ring of widened rows, one plain widened input row (with its padding
    // columns and the partner column past the last), and the accumulators of one
    // output row for a block (as i16 pairs: i32 values).
    let plain_len = (win.cols + g.dw) * p.cp;
    let acc_len = g.ow * BLOCK * 2;
    let scratch = win.slots * win.row_len + plain_len + acc_len;
    let row_len = g.ow * g.oc;
    // Tiles of output rows per task: the ring refills at each tile's start.
    let tile = (g.n * g.oh)
        .div_ceil(threads.max(1) * 2)
        .clamp(1, g.oh.max(1));
    for_row_tiles(
        threads,
        out,
        row_len,
        tile,
        scratch,
        |r0, out_rows, scratch: &mut [i16]| {
            let (ring, rest) = scratch.split_at_mut(win.slots * win.row_len);
            let (plain, acc) = rest.split_at_mut(plain_len);
            let mut ring_state = Ring::default();
            let mut slots = vec![0; g.kh];
            for (i, out_row) in out_rows.chunks_exact_mut(row_len).enumerate() {
                let row = r0 + i;
                let (b, oy) = (row / g.oh, row % g.oh);
                ring_state.fill(g, &p, &win, x, input, b, oy, ring, plain);
                for (ky, slot) in slots.iter_mut().enumerate() {
                    *slot = ((oy * g.sh + ky * g.dh) % win.slots) * win.row_len;
                }
                // SAFETY: AVX2 is present (checked above); the ring rows the slots name
                // were filled for this output row, each `win.row_len` values long, the
                // packed filter has `p.len()` values, `acc` holds ow * 16 i32 and `out_row`
                // ow * oc bytes (checked above).
                unsafe {
                    output_row(g, &p, ring, &slots, packed, acc, stage, out_row, signed);
                }
            }
            Ok(())
        },
    )
}

/// Which padded input rows the ring holds (for which image).
#[derive(Default)]
struct Ring {
    image: Option<usize>,
    /// Padded rows below this one are in the ring (the ring holds the last `slots`).
    next: usize,
}

impl Ring {
    /// Widens the padded rows output row `oy` of image `b` needs that the ring lacks.
    #[allow(clippy::too_many_arguments)]
    fn fill(
        &mut self,
        g: &Geometry,
        p: &Packing,
        win: &Window,
        x: &[u8],
        input: (QType, i32),
        b: usize,
        oy: usize,
        ring: &mut [i16],
        plain: &mut [i16],
    ) {
        let first = oy * g.sh;
        let last = first + (g.kh - 1) * g.dh;
        // The ring holds the `slots` rows below `next`, built in order; rows only move
        // down within an image, so the rows from `first` below `next` are still there.
        let start = if self.image == Some(b) && first < self.next {
            self.next
        } else {
            first
        };
        self.image = Some(b);
        for py in start..=last {
            let slot = (py % win.slots) * win.row_len;
            widen_row(
                g,
                p,
                win,
                x,
                input,
                b,
                py,
                plain,
                &mut ring[slot..slot + win.row_len],
            );
        }
        self.next = last + 1;
    }
}

/// Padded input row `py` of image `b`, widened minus the zero point with zeros in the
/// padding, pair-interleaved into `dst` (`win.row_len` values).
#[allow(clippy::too_many_arguments)]
fn widen_row(
    g: &Geometry,
    p: &Packing,
    win: &Window,
    x: &[u8],
    (qt, zp): (QType, i32),
    b: usize,
    py: usize,
    plain: &mut [i16],
    dst: &mut [i16],
) {
    let cp = p.cp;
    let total = win.cols + g.dw;
    match py.checked_sub(g.pad_top).filter(|&iy| iy < g.ih) {
        None => plain.fill(0),
        Some(iy) => {
            // The input pixels that land in the row (a stride can leave the last unused).
            let first = g.pad_left.min(total);
            let pixels = g.iw.min(total - first);
            plain[..first * cp].fill(0);
            plain[(first + pixels) * cp..total * cp].fill(0);
            let src = &x[((b * g.ih + iy) * g.iw) * g.ic..][..pixels * g.ic];
            let dst = &mut plain[first * cp..(first + pixels) * cp];
            if g.ic == cp {
                // Whole blocks of channels: the pixels are contiguous on both sides.
                super::widen_bytes(qt, zp, src, dst);
            } else {
                for (px, values) in dst.chunks_exact_mut(cp).zip(src.chunks_exact(g.ic)) {
                    super::widen_bytes(qt, zp, values, &mut px[..g.ic]);
                    px[g.ic..].fill(0);
                }
            }
        }
    }
    // SAFETY: AVX2 is present (`run` checked); `plain` holds
    // (cols + dw) * cp values and `dst` cols * cp * 2.
    unsafe { interleave(plain, g.dw, cp, win.cols, dst) }
}

/// `dst[(col * cp + c) * 2 + h] = plain[(col + h * dw) * cp + c]`, 8 channels per step.
///
/// # Safety
/// AVX2; `plain` holds `(cols + dw) * cp` values, `dst` `cols * cp * 2`, cp is a
/// multiple of 8.
#[target_feature(enable = "avx2")]
unsafe fn interleave(plain: &[i16], dw: usize, cp: usize, cols: usize, dst: &mut [i16]) {
    debug_assert!(plain.len() >= (cols + dw) * cp && dst.len() >= cols * cp * 2);
    let (src, out) = (plain.as_ptr(), dst.as_mut_ptr());
    for col in 0..cols {
        for c in (0..cp).step_by(LANES) {
            // SAFETY: col + dw < cols + dw and c + 8 <= cp, so both loads are inside
            // `plain`; the 16 values stored end at (col * cp + c + 8) * 2 <= cols * cp * 2.
            unsafe {
                let v0 = _mm_loadu_si128(src.add(col * cp + c) as *const __m128i);
                let v1 = _mm_loadu_si128(src.add((col + dw) * cp + c) as *const __m128i);
                let o = out.add((col * cp + c) * 2);
                _mm_storeu_si128(o as *mut __m128i, _mm_unpacklo_epi16(v0, v1));
                _mm_storeu_si128(o.add(LANES) as *mut __m128i, _mm_unpackhi_epi16(v0, v1));
            }
        }
    }
}

/// One output row, block by block of 16 channels: accumulate every pixel, then
/// requantize them.
///
/// # Safety
/// AVX2; `slots[ky]` starts a filled ring row (of the window's row length), `packed` holds
/// `p.len()` values, `acc` at least `ow * 32` (i16 storage for ow * 16 i32), `out_row`
/// `ow * oc` bytes.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn output_row(
    g: &Geometry,
    p: &Packing,
    ring: &[i16],
    slots: &[usize],
    packed: &[i16],
    acc: &mut [i16],
    stage: &Stage,
    out_row: &mut [u8],
    signed: bool,
) {
    for c0 in (0..p.cp).step_by(BLOCK) {
        // SAFETY: this function's contract; c0 + 16 <= cp.
        unsafe {
            if g.kh == 3 && p.pairs == 2 {
                accumulate::<3, 2>(g, p, ring, slots, packed, c0, acc);
            } else {
                accumulate::<0, 0>(g, p, ring, slots, packed, c0, acc);
            }
            requantize(g, acc, stage, c0, out_row, signed);
        }
    }
}

/// The accumulators of channels `c0..c0 + 16` for every pixel of the row. `KH`, `PJ` >
/// 0: the filter has that many rows and pairs per row, and its weights stay in
/// registers; 0: any size, weights read per pixel.
///
/// # Safety
/// As [`output_row`], with c0 + 16 <= cp.
#[target_feature(enable = "avx2")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn accumulate<const KH: usize, const PJ: usize>(
    g: &Geometry,
    p: &Packing,
    ring: &[i16],
    slots: &[usize],
    packed: &[i16],
    c0: usize,
    acc: &mut [i16],
) {
    let (kh, pairs) = if KH > 0 { (KH, PJ) } else { (g.kh, p.pairs) };
    debug_assert!(slots.len() == kh && acc.len() >= g.ow * BLOCK * 2);
    let wp = packed.as_ptr();
    let weight = |ky: usize, j: usize, half: usize| {
        // SAFETY: c0 + 8 half < cp, ky < kh and j < pairs: inside the packed filter.
        unsafe { _mm256_loadu_si256(wp.add(p.at(c0 + half * LANES, ky, j)) as *const __m256i) }
    };
    let mut held = [[[_mm256_setzero_si256(); 2]; 2]; 3];
    if KH > 0 {
        for (ky, row) in held.iter_mut().enumerate().take(KH) {
            for (j, pair) in row.iter_mut().enumerate().take(PJ) {
                *pair = [weight(ky, j, 0), weight(ky, j, 1)];
            }
        }
    }
    let rp = ring.as_ptr();
    let step = g.sw * p.cp * 2;
    let pair_step = 2 * g.dw * p.cp * 2;
    let ap = acc.as_mut_ptr();
    for ox in 0..g.ow {
        let mut a0 = _mm256_setzero_si256();
        let mut a1 = _mm256_setzero_si256();
        for (ky, &slot) in slots.iter().enumerate().take(kh) {
            let base = slot + ox * step + c0 * 2;
            // `j` also forms the offset, and `held` is read only when KH > 0.
            #[allow(clippy::needless_range_loop)]
            for j in 0..pairs {
                let at = base + j * pair_step;
                // SAFETY: column ox * sw + 2 j dw < win.cols and c0 + 16 <= cp, so the
                // 32 values end inside the ring row at `slot`.
                let (x0, x1) = unsafe {
                    (
                        _mm256_loadu_si256(rp.add(at) as *const __m256i),
                        _mm256_loadu_si256(rp.add(at + 2 * LANES) as *const __m256i),
                    )
                };
                let [w0, w1] = if KH > 0 {
                    held[ky][j]
                } else {
                    [weight(ky, j, 0), weight(ky, j, 1)]
                };
                a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(x0, w0));
                a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(x1, w1));
            }
        }
        // SAFETY: acc holds ow * 16 i32 (as i16 pairs); pixel ox's 16 end inside.
        unsafe {
            _mm256_storeu_si256(ap.add(ox * BLOCK * 2) as *mut __m256i, a0);
            _mm256_storeu_si256(ap.add(ox * BLOCK * 2 + 2 * LANES) as *mut __m256i, a1);
        }
    }
}

/// The output stage of channels `c0..c0 + 16` (those below oc) for every pixel.
///
/// # Safety
/// AVX2; `acc` holds the row's accumulators, `out_row` ow * oc bytes, the stage is
/// padded to whole blocks of 16 columns.
#[target_feature(enable = "avx2")]
unsafe fn requantize(
    g: &Geometry,
    acc: &[i16],
    stage: &Stage,
    c0: usize,
    out_row: &mut [u8],
    signed: bool,
) {
    // SAFETY: the stage arrays are padded to whole panels of 16 and c0 is a multiple of
    // 16 below oc.
    let (s0, s1) = unsafe {
        (
            gemm::avx2::load_stage(stage, c0),
            gemm::avx2::load_stage(stage, c0 + LANES),
        )
    };
    let cols = (g.oc - c0).min(BLOCK);
    let ap = acc.as_ptr();
    for ox in 0..g.ow {
        // SAFETY: pixel ox's 16 i32 lie inside acc.
        let (v0, v1) = unsafe {
            (
                _mm256_loadu_si256(ap.add(ox * BLOCK * 2) as *const __m256i),
                _mm256_loadu_si256(ap.add(ox * BLOCK * 2 + 2 * LANES) as *const __m256i),
            )
        };
        let bytes = gemm::avx2::narrow16(
            gemm::avx2::requant8(v0, &s0),
            gemm::avx2::requant8(v1, &s1),
            signed,
        );
        gemm::avx2::store16(&mut out_row[ox * g.oc + c0..ox * g.oc + c0 + cols], bytes);
    }
}
