//! The float GEMM of convolutions: `C = clamp(A * B + bias)` with B (the filter) packed
//! once, when the weights are prepared, into the layout the micro-kernel reads, and the
//! bias and fused activation applied as each block is stored.
//!
//! Why not the `gemm` crate here (it stays for products whose operands both change at
//! run time): it packs both operands at every call, 12% of MobileNetV2's time, and
//! leaves the bias and activation to a second pass over the output. A convolution's
//! filter never changes, and its A is read in place, one broadcast per value: NHWC rows
//! (1x1 convolutions), im2col tiles (inputs of few channels), or ([`Lhs::Indirect`], an
//! indirect GEMM) each output pixel's window as one run of input channels per tap.
//!
//! Layout of B ([`pack`]): panels of [`NR`] = 16 columns; within a panel, row `kk`'s 16
//! values together (one 512-bit or two 256-bit registers), columns past n zero.
//!
//! Micro-kernels, chosen at run time: AVX-512 (8 rows x 32 columns, 16 accumulators)
//! and AVX2+FMA (6 rows x 16 columns, 12 accumulators). Processors with neither use the
//! `gemm` crate path of the callers ([`available`] is false).

use crate::error::{Result, RuntimeError};
use crate::kernels::Clamp;
use crate::kernels::util::matrix_extent;

/// Columns per packed panel.
pub(crate) const NR: usize = 16;

/// Whether a product of `m` x `k` by `k` x `n` splits its columns, rather than its rows,
/// over threads: one row, or at most 128 rows against a filter of 2 MiB or more (a BERT
/// of 128 tokens: split by rows, each thread streamed all of a 9.4 MB filter; by columns
/// the model ran 5% faster on two threads). Smaller
/// filters are cheap to stream once per task from L2 or L3, and their few panels split
/// unevenly (MobileNetV2's 7 x 7 layers ran 10-40% slower split by columns).
pub(crate) fn splits_columns(m: usize, k: usize, n: usize) -> bool {
    n > 4 * NR && (m == 1 || (m <= 128 && k.saturating_mul(n) >= (2 << 20) / 4))
}

/// The most bytes of the next panels the AVX-512 kernel fetches ahead (`Block::ahead`):
/// larger ones (ResNet18's 3x3 layers from 256 channels: 0.3-0.6 MB per pair of panels)
/// would push the current panels out of L2, and ran 2-5% slower fetched ahead.
#[cfg(target_arch = "x86_64")]
const AHEAD_MAX_BYTES: usize = 128 << 10;

/// The smallest depth whose next rows of A the AVX-512 kernel fetches ahead.
#[cfg(target_arch = "x86_64")]
const AHEAD_ROWS_MIN_K: usize = 64;

/// The largest packed filter (bytes) the AVX2 kernel runs rows-outer: every panel for one
/// block of rows, then the next block. Larger filters run panel by panel, each panel
/// kept in cache while all rows stream past it.
#[cfg(target_arch = "x86_64")]
const ROWS_OUTER_MAX_FILTER_BYTES: usize = 64 << 10;

/// The smallest packed panel (bytes) whose rows the AVX2 kernel fetches ahead.
#[cfg(target_arch = "x86_64")]
const FETCH_PANEL_MIN_BYTES: usize = 64 << 10;

/// The smallest pair of panels (bytes) whose rows the AVX-512 kernel fetches ahead: above
/// L1's share, the pair is read from L2 at every step (ResNet18's 3x3 layers from 64
/// channels on: 2% faster each, the model 5%).
#[cfg(target_arch = "x86_64")]
const FETCH_PANELS_MIN_BYTES_AVX512: usize = 40 << 10;

/// How many rows of a panel ahead of the current step the kernels fetch (a 48 rows
/// distance measured the same).
#[cfg(target_arch = "x86_64")]
const FETCH_ROWS_AHEAD: usize = 24;

/// Whether this processor runs these kernels (AVX2 and FMA at least).
pub(crate) fn available() -> bool {
    super::isa::float_avx2_fma()
}

/// Values of a packed B of `k` x `n`.
pub(crate) fn packed_len(k: usize, n: usize) -> Option<usize> {
    k.checked_mul(n.div_ceil(NR))?.checked_mul(NR)
}

/// Packs B (`k` x `n`, element (kk, j) from `get`) into `out` (see the module docs).
pub(crate) fn pack(k: usize, n: usize, get: impl Fn(usize, usize) -> f32, out: &mut [f32]) {
    for t in 0..n.div_ceil(NR) {
        let panel = &mut out[t * k * NR..(t + 1) * k * NR];
        for (kk, row) in panel.chunks_exact_mut(NR).enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                let col = t * NR + j;
                *v = if col < n { get(kk, col) } else { 0.0 };
            }
        }
    }
}

/// What is done to each stored value: `clamp(acc + bias[col])`.
#[derive(Clone, Copy)]
pub(crate) struct Epilogue<'a> {
    /// One value per column (n).
    pub bias: &'a [f32],
    pub clamp: Clamp,
}

/// Where the micro-kernels read the rows of A.
#[derive(Clone, Copy)]
pub(crate) enum Lhs<'a> {
    /// A row-major matrix: row r at `a[r * lda..]`.
    Dense { a: &'a [f32], lda: usize },
    /// An indirect GEMM (a convolution without im2col): row r's k values are `segments`
    /// runs of `starts.seg` values, run s starting at `x[starts[r * segments + s]]`, or,
    /// for a start with the [`AUX`] bit set, at `aux[start - AUX]` (padding: a run of
    /// zeros, or a window row gathered with its padding).
    Indirect {
        x: &'a [f32],
        starts: Starts<'a>,
        segments: usize,
        aux: &'a [f32],
    },
}

/// The bit of an [`Lhs::Indirect`] start that says the run is in `aux`.
pub(crate) const AUX: usize = 1 << (usize::BITS - 1);

/// Run starts of an indirect operand with the extents their runs reach in `x` and in
/// `aux`, found once when the table is made: a GEMM then checks a table it is given
/// against its slices in constant time, however often the table is used.
pub(crate) struct StartTable {
    starts: Vec<usize>,
    seg: usize,
    x_end: usize,
    aux_end: usize,
}

impl StartTable {
    /// A table of runs of `seg` values each.
    pub(crate) fn new(starts: Vec<usize>, seg: usize) -> Result<StartTable> {
        let (mut x_end, mut aux_end) = (0usize, 0usize);
        for &st in &starts {
            let (end, start) = if st & AUX != 0 {
                (&mut aux_end, st & !AUX)
            } else {
                (&mut x_end, st)
            };
            let e = start.checked_add(seg).ok_or_else(|| {
                RuntimeError::Internal("float GEMM: a run start overflows".into())
            })?;
            *end = (*end).max(e);
        }
        Ok(StartTable {
            starts,
            seg,
            x_end,
            aux_end,
        })
    }

    /// Starts `from..from + len` (clamped to the table), with the table's extents.
    pub(crate) fn view(&self, from: usize, len: usize) -> Starts<'_> {
        let from = from.min(self.starts.len());
        let to = from.saturating_add(len).min(self.starts.len());
        Starts {
            starts: &self.starts[from..to],
            seg: self.seg,
            x_end: self.x_end,
            aux_end: self.aux_end,
        }
    }
}

/// A view of a [`StartTable`]: its extents bound every start of the view.
#[derive(Clone, Copy)]
pub(crate) struct Starts<'a> {
    starts: &'a [usize],
    seg: usize,
    x_end: usize,
    aux_end: usize,
}

impl<'a> Lhs<'a> {
    /// Runs per row and values per run, for a depth of `k`.
    #[cfg(target_arch = "x86_64")]
    fn runs(&self, k: usize) -> (usize, usize) {
        match *self {
            Lhs::Dense { .. } => (1, k),
            Lhs::Indirect {
                segments, starts, ..
            } => (segments, starts.seg),
        }
    }

    /// The rows from `r0` on.
    fn rows_from(self, r0: usize) -> Lhs<'a> {
        match self {
            Lhs::Dense { a, lda } => Lhs::Dense {
                a: &a[(r0 * lda).min(a.len())..],
                lda,
            },
            Lhs::Indirect {
                x,
                starts,
                segments,
                aux,
            } => Lhs::Indirect {
                x,
                starts: Starts {
                    starts: &starts.starts[(r0 * segments).min(starts.starts.len())..],
                    ..starts
                },
                segments,
                aux,
            },
        }
    }

    /// Whether `m` rows of depth `k` are inside the slices.
    fn covers(&self, m: usize, k: usize) -> bool {
        match *self {
            Lhs::Dense { a, lda } => {
                lda >= k && matrix_extent(m, lda, k).is_some_and(|e| e <= a.len())
            }
            Lhs::Indirect {
                x,
                starts,
                segments,
                aux,
            } => {
                segments.checked_mul(starts.seg) == Some(k)
                    && m.checked_mul(segments)
                        .is_some_and(|n| n <= starts.starts.len())
                    && starts.x_end <= x.len()
                    && starts.aux_end <= aux.len()
            }
        }
    }
}

/// `out[r * ldc + j] = clamp(sum_kk a[r * lda + kk] * B[kk][j] + bias[j])` for `r < m`,
/// `j < n`, with B packed by [`pack`]; rows split over the current rayon pool when
/// `threads > 1`. Requires [`available`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm(
    a: &[f32],
    lda: usize,
    m: usize,
    k: usize,
    b: &[f32],
    n: usize,
    out: &mut [f32],
    ldc: usize,
    epilogue: Epilogue,
    threads: usize,
) -> Result<()> {
    gemm_lhs(
        Lhs::Dense { a, lda },
        m,
        k,
        b,
        n,
        out,
        ldc,
        epilogue,
        threads,
    )
}

/// [`gemm`] with A's rows where `lhs` says (an indirect GEMM: each row's values gathered
/// from runs of the input, in the order of B's rows, summed in the same order as the
/// dense product of the gathered matrix, so it gives the same bits).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_lhs(
    lhs: Lhs,
    m: usize,
    k: usize,
    b: &[f32],
    n: usize,
    out: &mut [f32],
    ldc: usize,
    epilogue: Epilogue,
    threads: usize,
) -> Result<()> {
    let bad = |what: &str| RuntimeError::Internal(format!("float GEMM: {what}"));
    if !lhs.covers(m, k) {
        return Err(bad("left operand too short"));
    }
    if packed_len(k, n) != Some(b.len()) {
        return Err(bad("packed right operand has the wrong size"));
    }
    if ldc < n || matrix_extent(m, ldc, n).is_none_or(|e| e > out.len()) {
        return Err(bad("destination too short"));
    }
    if epilogue.bias.len() != n {
        return Err(bad("bias does not match the columns"));
    }
    if !available() {
        return Err(bad("AVX2 and FMA requested on a processor without them"));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let wide = super::isa::float_avx512();
    // Two tasks per thread of equal rows (work stealing evens out the rest): rounding
    // tasks to whole micro-kernel heights left late layers (7 x 7 = 49 rows) split 24 +
    // 24 + 1 over two threads.
    let rows_per_task = if threads > 1 {
        m.div_ceil(2 * threads).max(8)
    } else {
        m
    };
    // The micro-kernels on `rows` rows of `lhs` and the columns whose panels start `b`,
    // bias values in `e`.
    let kernel =
        |lhs: Lhs, rows: usize, b: &[f32], n: usize, out: &mut [f32], ldc, e: &Epilogue| {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the features were checked (`available`, `float_avx512`); every index the
            // kernels form is inside the slices: A rows r < rows of k values (`covers`), B
            // panels of k * NR values, destination rows r < rows of n <= ldc values, bias
            // of n values (checked above, and by each caller for its share of the columns).
            unsafe {
                if wide {
                    x86::gemm_avx512(lhs, rows, k, b, n, out, ldc, e);
                } else {
                    x86::gemm_avx2(lhs, rows, k, b, n, out, ldc, e);
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (lhs, rows, b, n, out, ldc, e, wide);
        };
    let run = |r0: usize, out: &mut [f32]| {
        let rows = (m - r0).min(rows_per_task);
        kernel(lhs.rows_from(r0), rows, b, n, out, ldc, &epilogue);
    };
    if threads > 1 && splits_columns(m, k, n) {
        // Few rows and a large filter (a classifier on one input, ResNet18's 7 x 7
        // layers): the columns are split instead, in whole pairs of panels, so that each
        // task streams only its share of the filter (split by rows, every task streamed
        // all of it: those layers read their 9.4 MB filters four times over on two
        // threads). Each task computes into a buffer of its own, then its columns are
        // placed; each column is summed as it would be unsplit.
        use rayon::prelude::*;
        let cols = n.div_ceil(2 * threads).div_ceil(2 * NR) * 2 * NR;
        let parts = (0..n.div_ceil(cols))
            .into_par_iter()
            .map(|i| {
                let c0 = i * cols;
                let width = (n - c0).min(cols);
                let mut part = super::util::zeroed_f32(m * width)?;
                let e = Epilogue {
                    bias: &epilogue.bias[c0..c0 + width],
                    clamp: epilogue.clamp,
                };
                // Columns c0..c0 + width: their panels start at b's panel c0 / NR, and
                // `part` holds m rows of `width`.
                kernel(
                    lhs,
                    m,
                    &b[(c0 / NR) * k * NR..],
                    width,
                    &mut part,
                    width,
                    &e,
                );
                Ok((c0, width, part))
            })
            .collect::<Result<Vec<_>>>()?;
        for (c0, width, part) in parts {
            for (r, row) in part.chunks_exact(width).enumerate() {
                out[r * ldc + c0..r * ldc + c0 + width].copy_from_slice(row);
            }
        }
        return Ok(());
    }
    if threads > 1 && m > rows_per_task {
        use rayon::prelude::*;
        // Each task's rows: `rows_per_task * ldc` values of the destination (the last
        // task's slice may be shorter, ending at its last row's n-th value).
        let chunk = rows_per_task * ldc;
        let used = matrix_extent(m, ldc, n).unwrap_or(0);
        out[..used]
            .par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, o)| run(i * rows_per_task, o));
    } else {
        run(0, out);
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{
        AHEAD_MAX_BYTES, AHEAD_ROWS_MIN_K, AUX, Epilogue, FETCH_PANEL_MIN_BYTES,
        FETCH_PANELS_MIN_BYTES_AVX512, FETCH_ROWS_AHEAD, Lhs, NR, ROWS_OUTER_MAX_FILTER_BYTES,
    };
    use crate::kernels::util::{Panels, block_rows};

    /// # Safety
    /// AVX512F, AVX2 and FMA; the extents [`super::gemm`] checks.
    #[target_feature(enable = "avx512f,avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn gemm_avx512(
        lhs: Lhs,
        m: usize,
        k: usize,
        b: &[f32],
        n: usize,
        out: &mut [f32],
        ldc: usize,
        e: &Epilogue,
    ) {
        let panels = n.div_ceil(NR);
        let blocks = m.div_ceil(8);
        let mut t = 0;
        while t < panels {
            let panel = Panels::from(t, panels, n, NR);
            // The next panels' filter values, a share per row block, fetched while this
            // block computes (see `Block::ahead`).
            let next = t + panel.count();
            let count = if next < panels {
                Panels::from(next, panels, n, NR).count()
            } else {
                0
            };
            let ahead: &[f32] = if blocks >= 2 && count * k * NR * 4 <= AHEAD_MAX_BYTES {
                &b[next * k * NR..(next + count) * k * NR]
            } else {
                &[]
            };
            let share = ahead.len().div_ceil(16).div_ceil(blocks) * 16;
            let mut block = 0;
            let mut r0 = 0;
            while r0 < m {
                let rows = block_rows(m - r0, 8);
                let from = (block * share).min(ahead.len());
                block += 1;
                let blk = Block {
                    lhs: lhs.rows_from(r0),
                    k,
                    b: &b[t * k * NR..],
                    n,
                    t,
                    e,
                    ahead: &ahead[from..(from + share).min(ahead.len())],
                    ahead_rows: match lhs.rows_from(r0 + rows) {
                        Lhs::Dense { a, lda } if k >= AHEAD_ROWS_MIN_K => {
                            &a[..(block_rows(m - r0, 8) * lda).min(a.len())]
                        }
                        _ => &[],
                    },
                };
                let o = &mut out[r0 * ldc..];
                // SAFETY: AVX512F, AVX2 and FMA are this function's contract; `blk.lhs`
                // starts at row r0 and holds rows r0..r0 + rows <= m, `blk.b` starts at
                // panel t and the panels `panel` names exist (t + count <= panels), and
                // `o`'s rows hold their columns below n (the extents `super::gemm`
                // checks).
                unsafe {
                    match rows {
                        8 => blk.zmm_panels::<8>(panel, o, ldc),
                        7 => blk.zmm_panels::<7>(panel, o, ldc),
                        6 => blk.zmm_panels::<6>(panel, o, ldc),
                        5 => blk.zmm_panels::<5>(panel, o, ldc),
                        4 => blk.zmm_panels::<4>(panel, o, ldc),
                        3 => blk.zmm_panels::<3>(panel, o, ldc),
                        2 => blk.zmm_panels::<2>(panel, o, ldc),
                        _ => blk.zmm_panels::<1>(panel, o, ldc),
                    }
                }
                r0 += rows;
            }
            t += panel.count();
        }
    }

    /// # Safety
    /// AVX2 and FMA; the extents [`super::gemm`] checks.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn gemm_avx2(
        lhs: Lhs,
        m: usize,
        k: usize,
        b: &[f32],
        n: usize,
        out: &mut [f32],
        ldc: usize,
        e: &Epilogue,
    ) {
        // A panel larger than L1 is read from L2 or beyond by every row block: its rows
        // are then fetched a few steps ahead of the FMAs (ResNet18's 7 x 7 x 512 layers
        // 9% faster; the panels that stay in L1 ran 2% slower with the extra hints).
        let fetch = k * NR * 4 > FETCH_PANEL_MIN_BYTES;
        let panels = n.div_ceil(NR);
        // Rows r0..r0 + rows of panel t (with the next when it is a half panel, in
        // blocks of at most 4 rows: 12 accumulators).
        let tile = |t: usize, r0: usize, rows: usize, out: &mut [f32]| {
            macro_rules! run {
                ($v:literal, $fetch:literal, $blk:expr, $o:expr, $rows:expr, [$($r:literal)*]) => {
                    match $rows {
                        $($r => $blk.ymm::<$r, $v, $fetch>($o, ldc),)*
                        _ => $blk.ymm::<1, $v, $fetch>($o, ldc),
                    }
                };
            }
            let half = Panels::from(t, panels, n, NR) == Panels::OneAndHalf;
            let (height, end) = (if half { 4 } else { 6 }, r0 + rows);
            let mut r = r0;
            while r < end {
                let rows = block_rows(end - r, height);
                let blk = Block {
                    lhs: lhs.rows_from(r),
                    k,
                    b: &b[t * k * NR..],
                    n,
                    t,
                    e,
                    ahead: &[],
                    ahead_rows: &[],
                };
                let o = &mut out[r * ldc..];
                // SAFETY: AVX2 and FMA are this function's contract; as in
                // `gemm_avx512`: panel t, and t + 1 for a half panel (which exists).
                unsafe {
                    match (half, fetch) {
                        (false, false) => run!(2, false, blk, o, rows, [6 5 4 3 2]),
                        (false, true) => run!(2, true, blk, o, rows, [6 5 4 3 2]),
                        (true, false) => run!(3, false, blk, o, rows, [4 3 2]),
                        (true, true) => run!(3, true, blk, o, rows, [4 3 2]),
                    }
                }
                r += rows;
            }
        };
        // The panels a block covers from panel t: a half panel goes with the one before.
        let step = |t: usize| {
            if Panels::from(t, panels, n, NR) == Panels::OneAndHalf {
                2
            } else {
                1
            }
        };
        if b.len() * 4 <= ROWS_OUTER_MAX_FILTER_BYTES {
            // A small filter stays in cache whole: each block of rows runs every panel
            // while its rows of A are in L1, and writes its output rows in one sweep.
            let mut r0 = 0;
            while r0 < m {
                let rows = block_rows(m - r0, 6);
                let mut t = 0;
                while t < panels {
                    tile(t, r0, rows, out);
                    t += step(t);
                }
                r0 += rows;
            }
        } else {
            let mut t = 0;
            while t < panels {
                let mut r0 = 0;
                while r0 < m {
                    let rows = block_rows(m - r0, 6);
                    tile(t, r0, rows, out);
                    r0 += rows;
                }
                t += step(t);
            }
        }
    }

    /// One block's operands: rows of A from `lhs`, panels of B from `b` (panel `t` first).
    struct Block<'a> {
        lhs: Lhs<'a>,
        k: usize,
        b: &'a [f32],
        n: usize,
        t: usize,
        e: &'a Epilogue<'a>,
        /// Values to fetch into the caches while the block computes, a cache line per
        /// step of its k loop: its share of the next panels' filter. With few rows (7 x 7
        /// layers) each panel's first block otherwise waits on the filter from memory
        /// (MobileNetV2's 160 -> 960 expansions: 0.13 ms with the filter in cache, 0.17
        /// in the model); spread over the steps, the fetches do not queue ahead of the
        /// block's own loads, as a burst of them did.
        ahead: &'a [f32],
        /// Likewise the next block's rows of a dense A, a cache line per step, when the
        /// rows are long (an NHWC input of many channels that the previous layer left in
        /// L3: the broadcasts of 8 rows at once otherwise wait on it line by line).
        ahead_rows: &'a [f32],
    }

    impl Block<'_> {
        /// At step `step` of the k loop, fetches the step-th cache line of `ahead`.
        #[inline(always)]
        fn fetch_ahead(&self, step: usize) {
            if let Some(v) = self.ahead.get(step * 16) {
                // SAFETY: a hint on an address inside `ahead`.
                unsafe { _mm_prefetch::<_MM_HINT_T1>((v as *const f32).cast()) };
            }
            if let Some(v) = self.ahead_rows.get(step * 16) {
                // SAFETY: a hint on an address inside `ahead_rows`.
                unsafe { _mm_prefetch::<_MM_HINT_T0>((v as *const f32).cast()) };
            }
        }

        /// Where run `s` of rows 0..R starts.
        ///
        /// # Safety
        /// The block's rows are inside `lhs` (as [`super::gemm_lhs`] checks).
        #[inline(always)]
        unsafe fn run_starts<const R: usize>(&self, s: usize, seg: usize) -> [*const f32; R] {
            match self.lhs {
                Lhs::Dense { a, lda } => std::array::from_fn(|r| {
                    // SAFETY: row r < R starts at r * lda inside A (the caller's
                    // contract), and a dense row is one run (s = 0).
                    unsafe { a.as_ptr().add(r * lda + s * seg) }
                }),
                Lhs::Indirect {
                    x,
                    starts,
                    segments,
                    aux,
                } => std::array::from_fn(|r| {
                    let st = starts.starts[r * segments + s];
                    // SAFETY: every start begins a run of seg values inside x, or with
                    // the AUX bit, inside aux (the table's extents, checked by `covers`).
                    unsafe {
                        if st & AUX != 0 {
                            aux.as_ptr().add(st & !AUX)
                        } else {
                            x.as_ptr().add(st)
                        }
                    }
                }),
            }
        }

        /// R rows x 16 P columns in 512-bit registers.
        ///
        /// # Safety
        /// AVX512F and FMA; `a` holds R rows of k values at lda strides, `b` P panels
        /// of k * NR values, `out` R rows at ldc strides holding the block's columns.
        #[target_feature(enable = "avx512f,avx2,fma")]
        #[inline]
        unsafe fn zmm<const R: usize, const P: usize>(&self, out: &mut [f32], ldc: usize) {
            debug_assert!(self.b.len() >= P * self.k * NR);
            let mut acc = [[_mm512_setzero_ps(); P]; R];
            let bp = self.b.as_ptr();
            // Panels that do not stay in L1 between steps: their rows fetched ahead.
            let deep = P * self.k * NR * 4 > FETCH_PANELS_MIN_BYTES_AVX512;
            let (runs, seg) = self.lhs.runs(self.k);
            for s in 0..runs {
                // SAFETY: the block's rows are inside A (the caller's contract).
                let rows = unsafe { self.run_starts::<R>(s, seg) };
                for kk in 0..seg {
                    let row_k = s * seg + kk;
                    self.fetch_ahead(row_k);
                    if deep {
                        for p in 0..P {
                            _mm_prefetch::<_MM_HINT_T0>(
                                bp.wrapping_add(p * self.k * NR + (row_k + FETCH_ROWS_AHEAD) * NR)
                                    .cast(),
                            );
                        }
                    }
                    let mut bv = [_mm512_setzero_ps(); P];
                    for (p, v) in bv.iter_mut().enumerate() {
                        // SAFETY: panel p's row row_k ends at p * k * NR + (row_k + 1) * NR.
                        *v = unsafe { _mm512_loadu_ps(bp.add(p * self.k * NR + row_k * NR)) };
                    }
                    for (acc, row) in acc.iter_mut().zip(&rows) {
                        // SAFETY: each run holds seg values.
                        let av = _mm512_set1_ps(unsafe { *row.add(kk) });
                        for (acc, &b) in acc.iter_mut().zip(&bv) {
                            *acc = _mm512_fmadd_ps(av, b, *acc);
                        }
                    }
                }
            }
            let (lo, hi) = (
                _mm512_set1_ps(self.e.clamp.lo),
                _mm512_set1_ps(self.e.clamp.hi),
            );
            for p in 0..P {
                let c0 = (self.t + p) * NR;
                let cols = (self.n - c0).min(NR);
                let mask: __mmask16 = if cols == NR { !0 } else { (1u16 << cols) - 1 };
                // SAFETY: the bias holds n values; the mask reads only columns < n.
                let bias = unsafe { _mm512_maskz_loadu_ps(mask, self.e.bias.as_ptr().add(c0)) };
                for (r, acc) in acc.iter().enumerate() {
                    // max(lo, x) then min(hi, x) return x when it is NaN, as Clamp does.
                    let v = _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_add_ps(acc[p], bias)));
                    let dst = out.as_mut_ptr().wrapping_add(r * ldc + c0);
                    // A full panel stores without a mask: masked 512-bit stores are
                    // slower on some processors (AMD Zen 4).
                    // SAFETY: row r holds columns c0..c0 + cols (the mask, or all 16).
                    unsafe {
                        if cols == NR {
                            _mm512_storeu_ps(dst, v);
                        } else {
                            _mm512_mask_storeu_ps(dst, mask, v);
                        }
                    }
                }
            }
        }

        /// R rows of the panels `panel` names, on the kernel for them.
        ///
        /// # Safety
        /// As [`Self::zmm`] for those panels.
        #[target_feature(enable = "avx512f,avx2,fma")]
        #[inline]
        unsafe fn zmm_panels<const R: usize>(&self, panel: Panels, out: &mut [f32], ldc: usize) {
            // SAFETY: this function's contract is `zmm`'s for the panels `panel` names:
            // one, two, or one and a half (`zmm_half`'s P = 2 case).
            unsafe {
                match panel {
                    Panels::One => self.zmm::<R, 1>(out, ldc),
                    Panels::Two => self.zmm::<R, 2>(out, ldc),
                    Panels::OneAndHalf => self.zmm_half::<R>(out, ldc),
                }
            }
        }

        /// R rows x (16 + at most 8) columns: the first panel in 512-bit registers, the
        /// second panel's first 8 columns (all it has below n) in 256-bit ones. Each
        /// lane computes what [`Self::zmm`] computes, in the same order.
        ///
        /// # Safety
        /// As [`Self::zmm`] with P = 2, the second panel holding at most 8 columns.
        #[target_feature(enable = "avx512f,avx2,fma")]
        #[inline]
        unsafe fn zmm_half<const R: usize>(&self, out: &mut [f32], ldc: usize) {
            debug_assert!(self.b.len() >= 2 * self.k * NR);
            let mut acc = [_mm512_setzero_ps(); R];
            let mut acc_half = [_mm256_setzero_ps(); R];
            let bp = self.b.as_ptr();
            let (runs, seg) = self.lhs.runs(self.k);
            for s in 0..runs {
                // SAFETY: the block's rows are inside A (the caller's contract).
                let rows = unsafe { self.run_starts::<R>(s, seg) };
                for kk in 0..seg {
                    let row_k = s * seg + kk;
                    self.fetch_ahead(row_k);
                    // SAFETY: both panels' row row_k end inside the two panels.
                    let (b0, b1) = unsafe {
                        (
                            _mm512_loadu_ps(bp.add(row_k * NR)),
                            _mm256_loadu_ps(bp.add(self.k * NR + row_k * NR)),
                        )
                    };
                    for r in 0..R {
                        // SAFETY: each run holds seg values.
                        let av = _mm512_set1_ps(unsafe { *rows[r].add(kk) });
                        acc[r] = _mm512_fmadd_ps(av, b0, acc[r]);
                        acc_half[r] = _mm256_fmadd_ps(_mm512_castps512_ps256(av), b1, acc_half[r]);
                    }
                }
            }
            let c0 = self.t * NR;
            let c1 = c0 + NR;
            let cols = self.n - c1;
            let (lo, hi) = (
                _mm512_set1_ps(self.e.clamp.lo),
                _mm512_set1_ps(self.e.clamp.hi),
            );
            // AVX's masked moves (AVX512VL's are not among the features this path needs).
            let mask = _mm256_cmpgt_epi32(
                _mm256_set1_epi32(cols as i32),
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            );
            // SAFETY: the bias holds n values: 16 from c0, `cols` (masked) from c1.
            let (bias, bias_half) = unsafe {
                (
                    _mm512_loadu_ps(self.e.bias.as_ptr().add(c0)),
                    _mm256_maskload_ps(self.e.bias.as_ptr().add(c1), mask),
                )
            };
            let (lo_half, hi_half) = (_mm512_castps512_ps256(lo), _mm512_castps512_ps256(hi));
            for r in 0..R {
                // max(lo, x) then min(hi, x) return x when it is NaN, as Clamp does.
                let v = _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_add_ps(acc[r], bias)));
                let w = _mm256_min_ps(
                    hi_half,
                    _mm256_max_ps(lo_half, _mm256_add_ps(acc_half[r], bias_half)),
                );
                let dst = out.as_mut_ptr().wrapping_add(r * ldc + c0);
                // SAFETY: row r holds columns c0..c1 + cols.
                unsafe {
                    _mm512_storeu_ps(dst, v);
                    if cols == 8 {
                        _mm256_storeu_ps(dst.add(NR), w);
                    } else {
                        _mm256_maskstore_ps(dst.add(NR), mask, w);
                    }
                }
            }
        }

        /// R rows x 8 V columns in 256-bit registers: one panel (V = 2), or a panel and
        /// the first 8 columns of the next (V = 3, R <= 4: all the next panel has below
        /// n, as `Panels::OneAndHalf` says; MobileNetV2's 24-channel projections computed
        /// a quarter of their products on zeros as two whole panels).
        ///
        /// # Safety
        /// AVX2 and FMA; as [`Self::zmm`] with P = 1, or P = 2 for V = 3.
        #[target_feature(enable = "avx2,fma")]
        #[inline]
        unsafe fn ymm<const R: usize, const V: usize, const FETCH: bool>(
            &self,
            out: &mut [f32],
            ldc: usize,
        ) {
            debug_assert!(self.b.len() >= V.div_ceil(2) * self.k * NR);
            let mut acc = [[_mm256_setzero_ps(); V]; R];
            let bp = self.b.as_ptr();
            // Where vector v of B's row row_k is: within the panel, or in the next one.
            let at = |v: usize, row_k: usize| (v / 2) * self.k * NR + row_k * NR + (v % 2) * 8;
            let (runs, seg) = self.lhs.runs(self.k);
            for s in 0..runs {
                // SAFETY: the block's rows are inside A (the caller's contract).
                let rows = unsafe { self.run_starts::<R>(s, seg) };
                for kk in 0..seg {
                    let row_k = s * seg + kk;
                    if FETCH {
                        // Hints: any address is allowed.
                        for v in (0..V).step_by(2) {
                            _mm_prefetch::<_MM_HINT_T0>(
                                bp.wrapping_add(at(v, row_k + FETCH_ROWS_AHEAD)).cast(),
                            );
                        }
                    }
                    let mut bv = [_mm256_setzero_ps(); V];
                    for (v, b) in bv.iter_mut().enumerate() {
                        // SAFETY: the panels' row row_k ends inside them.
                        *b = unsafe { _mm256_loadu_ps(bp.add(at(v, row_k))) };
                    }
                    for (acc, row) in acc.iter_mut().zip(&rows) {
                        // SAFETY: each run holds seg values.
                        let av = _mm256_set1_ps(unsafe { *row.add(kk) });
                        for (acc, &b) in acc.iter_mut().zip(&bv) {
                            *acc = _mm256_fmadd_ps(av, b, *acc);
                        }
                    }
                }
            }
            let c0 = self.t * NR;
            let cols = (self.n - c0).min(8 * V);
            let (lo, hi) = (
                _mm256_set1_ps(self.e.clamp.lo),
                _mm256_set1_ps(self.e.clamp.hi),
            );
            // The first `cols` columns (AVX's masked moves for a partial block): no copies
            // through a buffer, which compiled to `memcpy` calls in every block.
            let full = cols == 8 * V;
            let masks: [__m256i; V] = std::array::from_fn(|v| {
                _mm256_cmpgt_epi32(
                    _mm256_set1_epi32(cols.saturating_sub(8 * v).min(8) as i32),
                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                )
            });
            let bias = self.e.bias.as_ptr().wrapping_add(c0);
            let mut bias_v = [_mm256_setzero_ps(); V];
            for (v, b) in bias_v.iter_mut().enumerate() {
                // SAFETY: the bias holds n values: 8 V from c0 (full), or the masked ones.
                *b = unsafe {
                    if full {
                        _mm256_loadu_ps(bias.add(8 * v))
                    } else {
                        _mm256_maskload_ps(bias.add(8 * v), masks[v])
                    }
                };
            }
            for (r, acc) in acc.iter().enumerate() {
                let dst = out.as_mut_ptr().wrapping_add(r * ldc + c0);
                for v in 0..V {
                    let x = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_add_ps(acc[v], bias_v[v])));
                    // SAFETY: row r holds columns c0..c0 + cols (all 8 V, or the masks).
                    unsafe {
                        if full {
                            _mm256_storeu_ps(dst.add(8 * v), x);
                        } else {
                            _mm256_maskstore_ps(dst.add(8 * v), masks[v], x);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_match_the_plain_sum() {
        if !available() {
            return;
        }
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % 2001) as f32 / 1000.0 - 1.0
        };
        for case in 0..60 {
            let m = 1 + case % 23;
            let k = 1 + (case * 7) % 41;
            let n = 1 + (case * 13) % 53;
            let lda = k + case % 3;
            let ldc = n + case % 4;
            let a: Vec<f32> = (0..m * lda).map(|_| next()).collect();
            let bm: Vec<f32> = (0..k * n).map(|_| next()).collect();
            let bias: Vec<f32> = (0..n).map(|_| next()).collect();
            let mut packed = vec![0f32; packed_len(k, n).unwrap()];
            pack(k, n, |kk, j| bm[kk * n + j], &mut packed);
            let clamp = if case % 2 == 0 {
                Clamp::none()
            } else {
                Clamp { lo: 0.0, hi: 0.5 }
            };
            for threads in [1, 3] {
                let mut out = vec![f32::NAN; m * ldc];
                let e = Epilogue { bias: &bias, clamp };
                gemm(&a, lda, m, k, &packed, n, &mut out, ldc, e, threads).unwrap();
                for r in 0..m {
                    for j in 0..n {
                        let want: f32 = (0..k).map(|kk| a[r * lda + kk] * bm[kk * n + j]).sum();
                        let want = clamp.apply(want + bias[j]);
                        let got = out[r * ldc + j];
                        assert!(
                            (got - want).abs() <= 1e-5 + 1e-5 * want.abs(),
                            "case {case} threads {threads} ({r}, {j}): {got} vs {want}"
                        );
                    }
                    // Columns past n are not written.
                    for j in n..ldc {
                        if r * ldc + j < out.len() {
                            assert!(out[r * ldc + j].is_nan(), "case {case}: wrote past n");
                        }
                    }
                }
            }
        }
    }

    /// Random operands of an `m x k` by `k x n` product: A, the bias, B and B packed.
    fn random_product(
        rng: &mut crate::kernels::util::test_rng::Rng,
        m: usize,
        n: usize,
        k: usize,
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
        let a = rng.f32s(m * k);
        let bias = rng.f32s(n);
        let bm = rng.f32s(k * n);
        let mut packed = vec![0f32; packed_len(k, n).unwrap()];
        pack(k, n, |kk, j| bm[kk * n + j], &mut packed);
        (a, bias, bm, packed)
    }

    /// Products split by columns over threads (one row, or few rows and a large filter)
    /// give the bits of one thread, and write nothing past n.
    #[test]
    fn products_split_by_columns_give_the_same_bits() {
        if !available() {
            return;
        }
        let mut rng = crate::kernels::util::test_rng::Rng(0x9e37_79b9_7f4a_7c15);
        let cases = [
            (1, 65, 37),
            (1, 100, 5),
            (1, 129, 64),
            (1, 1000, 130),
            (49, 520, 1024),
            (3, 1100, 480),
        ];
        for (m, n, k) in cases {
            assert!(splits_columns(m, k, n));
            let (a, bias, bm, packed) = random_product(&mut rng, m, n, k);
            let e = Epilogue {
                bias: &bias,
                clamp: Clamp { lo: -0.5, hi: 2.0 },
            };
            // Rows of n + 3: the gaps must stay untouched.
            let ldc = n + 3;
            let product = |threads: usize| {
                let mut out = vec![f32::NAN; m * ldc];
                gemm(&a, k, m, k, &packed, n, &mut out, ldc, e, threads).unwrap();
                out
            };
            let one = product(1);
            for r in 0..m.min(2) {
                for (j, &got) in one[r * ldc..r * ldc + n].iter().enumerate() {
                    let want: f32 = (0..k).map(|kk| a[r * k + kk] * bm[kk * n + j]).sum();
                    let want = e.clamp.apply(want + bias[j]);
                    assert!((got - want).abs() <= 1e-3, "({r}, {j}): {got} vs {want}");
                }
            }
            for threads in [2, 3] {
                let split = product(threads);
                for (r, (x, y)) in one.chunks(ldc).zip(split.chunks(ldc)).enumerate() {
                    assert!(y[n..].iter().all(|v| v.is_nan()), "m {m} n {n}: past n");
                    let same = x[..n]
                        .iter()
                        .zip(&y[..n])
                        .all(|(p, q)| p.to_bits() == q.to_bits());
                    assert!(same, "m {m} n {n}, row {r}, {threads} threads");
                }
            }
        }
    }

    /// The AVX2 kernels give the AVX-512 kernels' bits (both sum each output in the
    /// order of k), and both the plain sum, over the shapes that pick their variants:
    /// half panels (n = 16 j + 8 or less), rows outer (small filters) and panel by panel,
    /// panels fetched ahead (deep k), partial panels and short blocks of rows.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_kernels_give_the_avx512_bits() {
        if !crate::kernels::isa::float_avx2_fma() {
            return;
        }
        let mut rng = crate::kernels::util::test_rng::Rng(0x2545_f491_4f6c_dd1d);
        let cases = [
            (7, 5, 24),
            (13, 24, 144),
            (6, 40, 16),
            (25, 17, 33),
            (9, 8, 3),
            (50, 96, 16),
            (11, 1100, 64),
            (14, 24, 1200),
            (5, 300, 2000),
        ];
        for (m, n, k) in cases {
            let (a, bias, bm, packed) = random_product(&mut rng, m, n, k);
            let e = Epilogue {
                bias: &bias,
                clamp: Clamp { lo: -4.0, hi: 3.0 },
            };
            let ldc = n + 5;
            let lhs = Lhs::Dense { a: &a, lda: k };
            let mut avx2 = vec![f32::NAN; m * ldc];
            // SAFETY: AVX2 and FMA were found; the operands have the sizes `gemm` checks.
            unsafe { x86::gemm_avx2(lhs, m, k, &packed, n, &mut avx2, ldc, &e) };
            for r in 0..m {
                assert!(
                    avx2[r * ldc + n..(r + 1) * ldc].iter().all(|v| v.is_nan()),
                    "past n"
                );
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|kk| f64::from(a[r * k + kk]) * f64::from(bm[kk * n + j]))
                        .sum::<f64>()
                        + f64::from(bias[j]);
                    let want = want.clamp(-4.0, 3.0) as f32;
                    let got = avx2[r * ldc + j];
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + k as f32).sqrt(),
                        "m {m} n {n} k {k} ({r}, {j}): {got} vs {want}"
                    );
                }
            }
            if crate::kernels::isa::float_avx512() {
                let mut wide = vec![f32::NAN; m * ldc];
                // SAFETY: AVX-512F was found; as above.
                unsafe { x86::gemm_avx512(lhs, m, k, &packed, n, &mut wide, ldc, &e) };
                let same = avx2
                    .iter()
                    .zip(&wide)
                    .all(|(p, q)| p.to_bits() == q.to_bits());
                assert!(same, "m {m} n {n} k {k}: the AVX2 and AVX-512 bits differ");
            }
        }
    }

    /// An indirect left operand is checked whole before the kernels read it: a run past
    /// the input or past `aux`, or too few starts, are refused.
    #[test]
    fn indirect_operands_are_checked() {
        if !available() {
            return;
        }
        let x = vec![1.0f32; 40];
        let zeros = vec![0.0f32; 8];
        let b = vec![0.5f32; packed_len(16, 3).unwrap()];
        let bias = [0.0f32; 3];
        let e = Epilogue {
            bias: &bias,
            clamp: Clamp::none(),
        };
        let run = |starts: &[usize], aux: &[f32]| {
            let mut out = vec![0.0f32; 2 * 3];
            let table = StartTable::new(starts.to_vec(), 8)?;
            let lhs = Lhs::Indirect {
                x: &x,
                starts: table.view(0, starts.len()),
                segments: 2,
                aux,
            };
            gemm_lhs(lhs, 2, 16, &b, 3, &mut out, 3, e, 1).map(|()| out)
        };
        // Row 0: x[0..8] and zeros; row 1: x[32..40] and x[8..16]: 8 and 16 ones.
        let out = run(&[0, AUX, 32, 8], &zeros).unwrap();
        assert_eq!(out, [4.0, 4.0, 4.0, 8.0, 8.0, 8.0]);
        assert!(run(&[0, AUX, 33, 8], &zeros).is_err(), "a run past x");
        assert!(run(&[0, AUX, 32], &zeros).is_err(), "too few starts");
        assert!(run(&[0, AUX | 1, 32, 8], &zeros).is_err(), "a run past aux");
        assert!(run(&[0, AUX, 32, 8], &zeros[..7]).is_err(), "short aux");
    }

    #[test]
    fn nan_passes_the_clamp_as_it_does_elsewhere() {
        if !available() {
            return;
        }
        let a = [f32::NAN, 1.0];
        let mut packed = vec![0f32; packed_len(1, 1).unwrap()];
        pack(1, 1, |_, _| 1.0, &mut packed);
        let mut out = [0f32; 2];
        let e = Epilogue {
            bias: &[0.0],
            clamp: Clamp { lo: 0.0, hi: 0.5 },
        };
        gemm(&a, 1, 2, 1, &packed, 1, &mut out, 1, e, 1).unwrap();
        assert!(out[0].is_nan());
        assert_eq!(out[1], 0.5);
    }
}
