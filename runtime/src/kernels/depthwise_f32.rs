//! Float32 depthwise convolution, one output row at a time (DEPTHWISE_CONV_2D, and the
//! depthwise half of the fused expansion in `expand_depthwise`).
//!
//! Square 3x3, 5x5, 7x7 and 9x9 windows with multiplier 1 (the caller repeats channels for a
//! larger one) run a register kernel on AVX-512 (16 channels per vector) or AVX2 and FMA
//! (8): for each block of channels the filter taps are loaded once and stay in registers
//! while the block slides along the row, four output pixels at a time (four independent
//! accumulator chains: one would wait on the FMA latency at every tap), so each tap costs
//! one load of the input and one FMA. Pixels whose window crosses the left or right
//! padding take a checked path. Everything else runs a portable loop, vectorized by the
//! compiler over the channels (compiled with FMA where the processor has it).
//!
//! Every path sums in the same order (bias, then the window's rows, then its columns, one
//! fused multiply-add each), so every path gives the same bits; the tests compare them.

use super::Clamp;
use super::window::Geometry;

/// One output row `oy` of image `b`: `out_row` holds `ow * oc` values.
#[allow(clippy::too_many_arguments)]
pub(super) fn depthwise_row(
    g: &Geometry,
    m: usize,
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    clamp: Clamp,
    b: usize,
    oy: usize,
    out_row: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if m == 1 && x86::register_row(g, x, w, bias, clamp, b, oy, out_row) {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if super::isa::float_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked at run time just above).
        unsafe { x86::portable_row_fma(g, m, x, w, bias, clamp, b, oy, out_row) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    if super::isa::float_neon() {
        // SAFETY: the CPU supports NEON (checked at run time just above).
        unsafe { portable_row_neon(g, m, x, w, bias, clamp, b, oy, out_row) };
        return;
    }
    portable_row::<false>(g, m, x, w, bias, clamp, b, oy, out_row);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Clamp, Geometry};

    /// The register kernel for this processor and window, if there is one; false when
    /// nothing was computed (no kernel, or buffers without the geometry's sizes).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn register_row(
        g: &Geometry,
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        clamp: Clamp,
        b: usize,
        oy: usize,
        out_row: &mut [f32],
    ) -> bool {
        use crate::kernels::isa;
        let k = g.kh;
        if g.kw != k || !matches!(k, 3 | 5 | 7 | 9) {
            return false;
        }
        let Some(row) = Row::new(g, x, w, bias, clamp, b, oy, out_row) else {
            return false;
        };
        // SAFETY: each kernel runs only where `isa` found its features; `Row::new`
        // checked the buffers against the geometry (the kernels' remaining contract).
        unsafe {
            if isa::float_avx512() {
                match k {
                    3 => row_avx512::<3>(&row),
                    5 => row_avx512::<5>(&row),
                    7 => row_avx512::<7>(&row),
                    _ => row_avx512::<9>(&row),
                }
            } else if isa::float_avx2_fma() {
                match k {
                    3 => row_avx2::<3>(&row),
                    5 => row_avx2::<5>(&row),
                    7 => row_avx2::<7>(&row),
                    _ => row_avx2::<9>(&row),
                }
            } else {
                return false;
            }
        }
        true
    }

    /// [`super::portable_row`] with fused multiply-adds, compiled for AVX2 and FMA (it is
    /// inlined here).
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; there is no other requirement: the body is safe
    /// code.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn portable_row_fma(
        g: &Geometry,
        m: usize,
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        clamp: Clamp,
        b: usize,
        oy: usize,
        out_row: &mut [f32],
    ) {
        super::portable_row::<true>(g, m, x, w, bias, clamp, b, oy, out_row);
    }

    /// The largest window the register kernels take (ConvMixer's 9 x 9: the taps no
    /// longer fit in registers and are reloaded from the stack, one load beside each
    /// input load, still four times the portable loop's speed).
    const MAX_K: usize = 9;

    /// One row's operands, checked against the geometry by [`Row::new`].
    struct Row<'a> {
        g: &'a Geometry,
        x: *const f32,
        w: *const f32,
        bias: *const f32,
        out: *mut f32,
        clamp: Clamp,
        /// Where each filter row reads in the input (None: in the padding), for up to
        /// [`MAX_K`] rows.
        rows: [Option<usize>; MAX_K],
        /// The output pixels `first..end` have their whole window row inside the input.
        first: usize,
        end: usize,
        _borrow: std::marker::PhantomData<&'a mut [f32]>,
    }

    impl<'a> Row<'a> {
        #[allow(clippy::too_many_arguments)]
        fn new(
            g: &'a Geometry,
            x: &'a [f32],
            w: &'a [f32],
            bias: &'a [f32],
            clamp: Clamp,
            b: usize,
            oy: usize,
            out_row: &'a mut [f32],
        ) -> Option<Row<'a>> {
            let (c, k) = (g.oc, g.kh);
            let input = g.n.checked_mul(g.ih)?.checked_mul(g.iw)?.checked_mul(c)?;
            let fits = g.ic == c
                && g.kw == k
                && k <= MAX_K
                && bias.len() == c
                && w.len() >= k * k * c
                && out_row.len() == g.ow.checked_mul(c)?
                && b < g.n
                && x.len() >= input;
            if !fits {
                return None;
            }
            let inside = |ox: usize| g.in_x(ox, 0).is_some() && g.in_x(ox, k - 1).is_some();
            let first = (0..g.ow).find(|&ox| inside(ox)).unwrap_or(g.ow);
            let end = (first..g.ow).find(|&ox| !inside(ox)).unwrap_or(g.ow);
            Some(Row {
                g,
                x: x.as_ptr(),
                w: w.as_ptr(),
                bias: bias.as_ptr(),
                out: out_row.as_mut_ptr(),
                clamp,
                rows: std::array::from_fn(|ky| {
                    if ky < k {
                        g.in_y(oy, ky).map(|iy| (b * g.ih + iy) * g.iw)
                    } else {
                        None
                    }
                }),
                first,
                end,
                _borrow: std::marker::PhantomData,
            })
        }
    }

    /// A vector of float32 lanes with the operations the register kernel uses, on
    /// pointers (no bounds checks in the tap loop: [`Row::new`] checked the extents).
    /// Every method is `#[inline(always)]` so that it compiles into the
    /// `#[target_feature]` function instantiating the kernel; values of these types exist
    /// only there.
    trait Vector: Copy {
        const LANES: usize;
        type Mask: Copy;
        /// The first `lanes` lanes (1..=LANES).
        fn mask(lanes: usize) -> Self::Mask;
        fn splat(v: f32) -> Self;
        /// # Safety
        /// `LANES` values at `p` are readable (FULL) or the masked ones are.
        unsafe fn load<const FULL: bool>(p: *const f32, m: Self::Mask) -> Self;
        /// # Safety
        /// As [`Self::load`], writable.
        unsafe fn store<const FULL: bool>(self, p: *mut f32, m: Self::Mask);
        /// `x * w + self`, one rounding.
        fn fmadd(self, x: Self, w: Self) -> Self;
        /// `min(hi, max(lo, self))`: NaN stays NaN, as [`Clamp`] does.
        fn clamp(self, lo: Self, hi: Self) -> Self;
    }

    macro_rules! simd {
        ($e:expr) => {
            // SAFETY: these types exist only inside functions compiled for, and called
            // after detecting, their instruction set (the trait's docs); register-only
            // intrinsics, or memory ones whose extents the callers guarantee.
            unsafe { $e }
        };
    }

    #[derive(Clone, Copy)]
    struct Zmm(__m512);

    impl Vector for Zmm {
        const LANES: usize = 16;
        type Mask = __mmask16;
        #[inline(always)]
        fn mask(lanes: usize) -> __mmask16 {
            (((1u32 << lanes) - 1) & 0xffff) as u16
        }
        #[inline(always)]
        fn splat(v: f32) -> Zmm {
            Zmm(simd!(_mm512_set1_ps(v)))
        }
        /// # Safety
        /// As [`Vector::load`].
        #[inline(always)]
        unsafe fn load<const FULL: bool>(p: *const f32, m: __mmask16) -> Zmm {
            Zmm(if FULL {
                simd!(_mm512_loadu_ps(p))
            } else {
                simd!(_mm512_maskz_loadu_ps(m, p))
            })
        }
        /// # Safety
        /// As [`Vector::store`].
        #[inline(always)]
        unsafe fn store<const FULL: bool>(self, p: *mut f32, m: __mmask16) {
            // Full blocks store unmasked: masked 512-bit stores are slow on AMD Zen 4.
            if FULL {
                simd!(_mm512_storeu_ps(p, self.0))
            } else {
                simd!(_mm512_mask_storeu_ps(p, m, self.0))
            }
        }
        #[inline(always)]
        fn fmadd(self, x: Zmm, w: Zmm) -> Zmm {
            Zmm(simd!(_mm512_fmadd_ps(x.0, w.0, self.0)))
        }
        #[inline(always)]
        fn clamp(self, lo: Zmm, hi: Zmm) -> Zmm {
            Zmm(simd!(_mm512_min_ps(hi.0, _mm512_max_ps(lo.0, self.0))))
        }
    }

    #[derive(Clone, Copy)]
    struct Ymm(__m256);

    impl Vector for Ymm {
        const LANES: usize = 8;
        type Mask = __m256i;
        #[inline(always)]
        fn mask(lanes: usize) -> __m256i {
            simd!(_mm256_cmpgt_epi32(
                _mm256_set1_epi32(lanes as i32),
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            ))
        }
        #[inline(always)]
        fn splat(v: f32) -> Ymm {
            Ymm(simd!(_mm256_set1_ps(v)))
        }
        /// # Safety
        /// As [`Vector::load`].
        #[inline(always)]
        unsafe fn load<const FULL: bool>(p: *const f32, m: __m256i) -> Ymm {
            Ymm(if FULL {
                simd!(_mm256_loadu_ps(p))
            } else {
                simd!(_mm256_maskload_ps(p, m))
            })
        }
        /// # Safety
        /// As [`Vector::store`].
        #[inline(always)]
        unsafe fn store<const FULL: bool>(self, p: *mut f32, m: __m256i) {
            if FULL {
                simd!(_mm256_storeu_ps(p, self.0))
            } else {
                simd!(_mm256_maskstore_ps(p, m, self.0))
            }
        }
        #[inline(always)]
        fn fmadd(self, x: Ymm, w: Ymm) -> Ymm {
            Ymm(simd!(_mm256_fmadd_ps(x.0, w.0, self.0)))
        }
        #[inline(always)]
        fn clamp(self, lo: Ymm, hi: Ymm) -> Ymm {
            Ymm(simd!(_mm256_min_ps(hi.0, _mm256_max_ps(lo.0, self.0))))
        }
    }

    /// # Safety
    /// AVX-512F; `row` checked by [`Row::new`] for a K x K window.
    #[target_feature(enable = "avx512f")]
    unsafe fn row_avx512<const K: usize>(row: &Row) {
        // SAFETY: this function's contract.
        unsafe { row_simd::<Zmm, K>(row) }
    }

    /// # Safety
    /// AVX2 and FMA; `row` checked by [`Row::new`] for a K x K window.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn row_avx2<const K: usize>(row: &Row) {
        // SAFETY: this function's contract.
        unsafe { row_simd::<Ymm, K>(row) }
    }

    /// The whole row: full blocks of `V::LANES` channels, then the masked rest.
    ///
    /// # Safety
    /// `V`'s instruction set; `row` checked by [`Row::new`] for a K x K window.
    #[inline(always)]
    unsafe fn row_simd<V: Vector, const K: usize>(row: &Row) {
        let c = row.g.oc;
        let mut c0 = 0;
        while c0 + V::LANES <= c {
            // SAFETY: the block's channels c0..c0 + LANES are below c.
            unsafe { block::<V, K, true>(row, c0, V::mask(V::LANES)) };
            c0 += V::LANES;
        }
        if c0 < c {
            // SAFETY: the mask covers the channels c0..c only.
            unsafe { block::<V, K, false>(row, c0, V::mask(c - c0)) };
        }
    }

    /// Channels `c0..` (all `V::LANES` when FULL, else those `mask` names) of the row.
    ///
    /// # Safety
    /// As [`row_simd`]; the block's channels are below c. Every load and store is of the
    /// block's channels, and [`Row::new`]'s checks bound each index: (ky * K + kx) * c +
    /// c0 + lane < K * K * c, c0 + lane < c for the bias, (row + ix) * c + c0 + lane < n *
    /// ih * iw * c (row and ix from in_y and in_x, or between two columns in_x accepted
    /// for the same pixel), and ox * c + c0 + lane < ow * c.
    #[inline(always)]
    unsafe fn block<V: Vector, const K: usize, const FULL: bool>(
        row: &Row,
        c0: usize,
        mask: V::Mask,
    ) {
        let g = row.g;
        let c = g.oc;
        // Macros, not closures: a closure is a function of its own, compiled without the
        // caller's target features, and the intrinsics in it were not inlined (calls to
        // `_mm256_fmadd_ps` took 10% of MobileNetV2).
        macro_rules! load {
            ($p:expr) => {
                V::load::<FULL>($p, mask)
            };
        }
        let (lo, hi) = (V::splat(row.clamp.lo), V::splat(row.clamp.hi));
        macro_rules! store {
            ($ox:expr, $v:expr) => {
                $v.clamp(lo, hi)
                    .store::<FULL>(row.out.add($ox * c + c0), mask)
            };
        }
        // SAFETY: the extents in this function's contract.
        unsafe {
            let mut taps = [[V::splat(0.0); K]; K];
            for (ky, taps) in taps.iter_mut().enumerate() {
                for (kx, tap) in taps.iter_mut().enumerate() {
                    *tap = load!(row.w.add((ky * K + kx) * c + c0));
                }
            }
            let bias = load!(row.bias.add(c0));
            // Checked pixels (windows in the left or right padding).
            // Pixels whose window crosses the padding, up to four at a time (four
            // accumulator chains, as inside; one chain waited on the FMA latency at every
            // tap). Each pixel's columns inside the input are one range of taps, found
            // once (checking every tap was most of a 9 x 9 window's time on 16-pixel rows).
            macro_rules! checked {
                ($from:expr, $to:expr) => {{
                    let (from, to) = ($from, $to);
                    let mut acc = [bias; 4];
                    let mut range = [(0usize, 0usize, 0usize); 4];
                    for (p, range) in range.iter_mut().enumerate().take(to - from) {
                        let ox = from + p;
                        let kx0 = (0..K).find(|&kx| g.in_x(ox, kx).is_some()).unwrap_or(K);
                        let kx1 = (kx0..K).find(|&kx| g.in_x(ox, kx).is_none()).unwrap_or(K);
                        let ix0 = if kx0 < kx1 {
                            ox * g.sw + kx0 * g.dw - g.pad_left
                        } else {
                            0
                        };
                        *range = (kx0, kx1, ix0);
                    }
                    for ky in 0..K {
                        let Some(r) = row.rows[ky] else { continue };
                        for kx in 0..K {
                            for p in 0..4 {
                                let (kx0, kx1, ix0) = range[p];
                                if kx >= kx0 && kx < kx1 {
                                    let ix = ix0 + (kx - kx0) * g.dw;
                                    let xv = load!(row.x.add((r + ix) * c + c0));
                                    acc[p] = acc[p].fmadd(xv, taps[ky][kx]);
                                }
                            }
                        }
                    }
                    for p in 0..to - from {
                        store!(from + p, acc[p]);
                    }
                }};
            }
            // Small windows one pixel at a time: their few edge pixels ran 12% slower in
            // groups (MobileNetV2's 3 x 3 layers on AVX2).
            macro_rules! checked_run {
                ($from:expr, $to:expr) => {{
                    let (mut ox, to) = ($from, $to);
                    let group = if K >= 7 { 4 } else { 1 };
                    while ox < to {
                        let next = (ox + group).min(to);
                        checked!(ox, next);
                        ox = next;
                    }
                }};
            }
            // P pixels from `ox`, all inside: pixel p's tap (ky, kx) reads column ix0 + p
            // * sw + kx * dw. `$sw` and `$dw` are literals for the common strides (the
            // taps' column offsets then fold into addressing modes).
            macro_rules! inside_pixels {
                ($p:literal, $ox:expr, $sw:expr, $dw:expr) => {{
                    let ox = $ox;
                    let ix0 = ox * g.sw - g.pad_left;
                    let mut acc = [bias; $p];
                    for ky in 0..K {
                        let Some(r) = row.rows[ky] else { continue };
                        let base = row.x.add((r + ix0) * c + c0);
                        for kx in 0..K {
                            for p in 0..$p {
                                let xv = load!(base.add((p * $sw + kx * $dw) * c));
                                acc[p] = acc[p].fmadd(xv, taps[ky][kx]);
                            }
                        }
                    }
                    for p in 0..$p {
                        store!(ox + p, acc[p]);
                    }
                }};
            }
            macro_rules! inside_row {
                ($sw:expr, $dw:expr) => {{
                    let mut ox = row.first;
                    while ox + 4 <= row.end {
                        inside_pixels!(4, ox, $sw, $dw);
                        ox += 4;
                    }
                    while ox < row.end {
                        inside_pixels!(1, ox, $sw, $dw);
                        ox += 1;
                    }
                }};
            }
            checked_run!(0, row.first);
            match (g.sw, g.dw) {
                (1, 1) => inside_row!(1, 1),
                (2, 1) => inside_row!(2, 1),
                (sw, dw) => inside_row!(sw, dw),
            }
            checked_run!(row.end, g.ow);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::kernels::isa;

        /// Every register kernel this processor runs gives the portable path's bits:
        /// windows 3, 5 and 7, channels around the 8- and 16-lane blocks, strides,
        /// dilations, padding on either side, both images of a batch, and a clamp.
        #[test]
        fn register_kernels_give_the_portable_bits() {
            let mut rng = crate::kernels::util::test_rng::Rng(0x9e37_79b9_7f4a_7c15);
            let mut checked = 0;
            for k in [3, 5, 7, 9] {
                for c in [1, 7, 8, 9, 16, 17, 40] {
                    for (s, d, pad) in [(1, 1, k / 2), (2, 1, k / 2), (1, 2, k - 1), (2, 1, 0)] {
                        let (n, ih, iw) = (2, 11, 14);
                        let g = Geometry {
                            oc: c,
                            ..Geometry::square(n, (ih, iw, c), k, (s, d, pad))
                        };
                        let x = rng.f32s(n * ih * iw * c);
                        let w = rng.f32s(k * k * c);
                        let bias = rng.f32s(c);
                        let clamp = Clamp { lo: -0.5, hi: 0.75 };
                        for b in 0..n {
                            for oy in 0..g.oh {
                                let mut want = vec![0f32; g.ow * c];
                                super::super::portable_row::<true>(
                                    &g, 1, &x, &w, &bias, clamp, b, oy, &mut want,
                                );
                                let mut paths: Vec<(&str, Vec<f32>)> = Vec::new();
                                let mut run = |name, f: &dyn Fn(&Row)| {
                                    let mut got = vec![f32::NAN; g.ow * c];
                                    let row = Row::new(&g, &x, &w, &bias, clamp, b, oy, &mut got)
                                        .expect("the buffers fit");
                                    f(&row);
                                    paths.push((name, got));
                                };
                                if isa::float_avx512() {
                                    // SAFETY: AVX-512F was found; `Row::new` checked the row.
                                    run("avx512", &|r| unsafe {
                                        match k {
                                            3 => row_avx512::<3>(r),
                                            5 => row_avx512::<5>(r),
                                            7 => row_avx512::<7>(r),
                                            _ => row_avx512::<9>(r),
                                        }
                                    });
                                }
                                if isa::float_avx2_fma() {
                                    // SAFETY: AVX2 and FMA were found; as above.
                                    run("avx2", &|r| unsafe {
                                        match k {
                                            3 => row_avx2::<3>(r),
                                            5 => row_avx2::<5>(r),
                                            7 => row_avx2::<7>(r),
                                            _ => row_avx2::<9>(r),
                                        }
                                    });
                                }
                                for (name, got) in paths {
                                    let same = got
                                        .iter()
                                        .zip(&want)
                                        .all(|(a, b)| a.to_bits() == b.to_bits());
                                    assert!(
                                        same,
                                        "{name}: k {k} c {c} s {s} d {d} pad {pad} row {b},{oy}"
                                    );
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
            if isa::float_avx2_fma() {
                assert!(checked > 500, "only {checked} rows compared");
            }
        }
    }
}

/// [`portable_row`] with fused multiply-adds on NEON (64-bit Arm): the channel blocks
/// vectorize to `FMLA` on four lanes, the same sums in the same order as the x86 paths.
///
/// # Safety
/// The CPU supports NEON (`isa::float_neon`); there is no other requirement: the body
/// is safe code.
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
#[allow(clippy::too_many_arguments)]
unsafe fn portable_row_neon(
    g: &Geometry,
    m: usize,
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    clamp: Clamp,
    b: usize,
    oy: usize,
    out_row: &mut [f32],
) {
    portable_row::<true>(g, m, x, w, bias, clamp, b, oy, out_row);
}

#[inline(always)]
fn fmadd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// Channels per vector block: one AVX register of f32.
const LANES: usize = 8;

/// One block of `W` channels (M = 1) of one output pixel.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn portable_block<const W: usize, const FMA: bool>(
    g: &Geometry,
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    clamp: Clamp,
    b: usize,
    taps_y: &[(usize, usize)],
    ox: usize,
    c0: usize,
    px: &mut [f32],
) {
    let (ic, oc) = (g.ic, g.oc);
    let Some(&bias_v) = bias[c0..].first_chunk::<W>() else {
        return;
    };
    let mut acc = bias_v;
    for &(ky, iy) in taps_y {
        let row = (b * g.ih + iy) * g.iw;
        for kx in 0..g.kw {
            let Some(ix) = g.in_x(ox, kx) else { continue };
            let Some(xs) = x[(row + ix) * ic + c0..].first_chunk::<W>() else {
                continue;
            };
            let Some(ws) = w[(ky * g.kw + kx) * oc + c0..].first_chunk::<W>() else {
                continue;
            };
            for l in 0..W {
                acc[l] = fmadd::<FMA>(xs[l], ws[l], acc[l]);
            }
        }
    }
    if let Some(dst) = px[c0..].first_chunk_mut::<W>() {
        for l in 0..W {
            dst[l] = clamp.apply(acc[l]);
        }
    }
}

/// Any window and multiplier, in safe code the compiler vectorizes over the channels.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn portable_row<const FMA: bool>(
    g: &Geometry,
    m: usize,
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    clamp: Clamp,
    b: usize,
    oy: usize,
    out_row: &mut [f32],
) {
    let oc = g.oc;
    let ic = g.ic;
    // Kernel rows that fall inside the input for this output row.
    let taps_y: Vec<(usize, usize)> = (0..g.kh)
        .filter_map(|ky| g.in_y(oy, ky).map(|iy| (ky, iy)))
        .collect();
    if m == 1 {
        // Pixel by pixel so that the window of input rows stays in L1 as it slides;
        // within a pixel, wide blocks of 4 vectors give the FMA units four independent
        // accumulator chains (one chain would wait on the FMA latency at every tap).
        for (ox, px) in out_row.chunks_exact_mut(oc).enumerate() {
            let mut c0 = 0;
            while c0 + 4 * LANES <= oc {
                portable_block::<{ 4 * LANES }, FMA>(g, x, w, bias, clamp, b, &taps_y, ox, c0, px);
                c0 += 4 * LANES;
            }
            while c0 + LANES <= oc {
                portable_block::<LANES, FMA>(g, x, w, bias, clamp, b, &taps_y, ox, c0, px);
                c0 += LANES;
            }
            // Remaining channels, one at a time.
            for c in c0..oc {
                let mut acc = bias[c];
                for &(ky, iy) in &taps_y {
                    let row = (b * g.ih + iy) * g.iw;
                    for kx in 0..g.kw {
                        let Some(ix) = g.in_x(ox, kx) else { continue };
                        acc =
                            fmadd::<FMA>(x[(row + ix) * ic + c], w[(ky * g.kw + kx) * oc + c], acc);
                    }
                }
                px[c] = clamp.apply(acc);
            }
        }
        return;
    }
    for (ox, acc) in out_row.chunks_exact_mut(oc).enumerate() {
        acc.copy_from_slice(bias);
        for &(ky, iy) in &taps_y {
            let row = (b * g.ih + iy) * g.iw;
            for kx in 0..g.kw {
                let Some(ix) = g.in_x(ox, kx) else { continue };
                let xs = &x[(row + ix) * ic..(row + ix + 1) * ic];
                let ws = &w[(ky * g.kw + kx) * oc..(ky * g.kw + kx + 1) * oc];
                for ((a, wv), &xv) in acc.chunks_exact_mut(m).zip(ws.chunks_exact(m)).zip(xs) {
                    for (a, &wv) in a.iter_mut().zip(wv) {
                        *a = fmadd::<FMA>(xv, wv, *a);
                    }
                }
            }
        }
        for a in acc.iter_mut() {
            *a = clamp.apply(*a);
        }
    }
}
