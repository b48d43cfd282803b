//! Float convolutions without im2col: the packed micro-kernels of [`super::gemm_f32`]
//! read each output pixel's window in place, as runs of the NHWC input (an indirect
//! GEMM), through a table of where each run starts. The products are summed in im2col's
//! order, so the bits are those of the gathered product.

use super::gemm_f32::{AUX, Lhs, StartTable, gemm_lhs};
use super::window::Geometry;
use crate::error::{Result, RuntimeError};

/// Input channels (per group) from which a convolution reads its windows in place (an
/// indirect GEMM) instead of gathering them (im2col): each tap is then a run of at least
/// this many values, enough to amortize finding the run's start. At 16, RegNetY's grouped
/// 3x3 convolutions (8 channels per group) gathered their windows 8 values at a time and
/// took twice as long (5.3 -> 2.6 ms of the model on AVX2, 5.0 -> 2.4 on AVX-512).
pub(super) const INDIRECT_MIN_CHANNELS: usize = 8;

/// Bytes of start table a convolution keeps between executions ([`IndirectCache`]);
/// larger geometries (huge images) build each tile's starts as the tile runs.
const CACHED_TABLE_BYTES: usize = 8 << 20;

/// The start table of a convolution's last geometry, kept by its kernel: an execution of
/// the same shapes reuses it instead of recomputing and rechecking every start per tile
/// (3.5% of SqueezeNet did that).
pub(super) struct IndirectCache {
    table: std::sync::Mutex<Option<std::sync::Arc<IndirectTable>>>,
    max_bytes: usize,
}

impl Default for IndirectCache {
    fn default() -> IndirectCache {
        IndirectCache::with_limit(CACHED_TABLE_BYTES)
    }
}

impl IndirectCache {
    /// A cache keeping tables of at most `max_bytes`.
    fn with_limit(max_bytes: usize) -> IndirectCache {
        IndirectCache {
            table: std::sync::Mutex::new(None),
            max_bytes,
        }
    }

    /// The table of every output row of `g`, built on first use of these shapes, or
    /// `None` when it would be larger than the limit.
    fn table(&self, g: &Geometry, groups: usize) -> Result<Option<std::sync::Arc<IndirectTable>>> {
        let rows = g.n * g.oh * g.ow;
        let (taps, _) = runs_of(g, groups);
        if rows.saturating_mul(taps).saturating_mul(size_of::<usize>()) > self.max_bytes {
            return Ok(None);
        }
        // A poisoned lock only means another execution failed while building: rebuild.
        let mut held = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = held.as_ref()
            && t.geometry == *g
            && t.groups == groups
        {
            return Ok(Some(std::sync::Arc::clone(t)));
        }
        let table = std::sync::Arc::new(IndirectTable::build(g, groups, 0, rows)?);
        *held = Some(std::sync::Arc::clone(&table));
        Ok(Some(table))
    }
}

/// Runs per output pixel and values per run: a tap's channels, or, for inputs of few
/// channels, a whole window row (the kernel width's pixels are adjacent in NHWC).
fn runs_of(g: &Geometry, groups: usize) -> (usize, usize) {
    let cg = g.ic / groups.max(1);
    if cg < INDIRECT_MIN_CHANNELS {
        (g.kh, g.kw * g.ic)
    } else {
        (g.kh * g.kw, cg)
    }
}

/// Where the runs of output rows `r0..r0 + rows` start, relative to the first channel of
/// a group (a group's runs are the same ones shifted by its channel offset). The
/// auxiliary buffer holds a run of zeros (padding taps), then, for window-row runs, the
/// rows that meet the left or right padding, gathered from the input at each execution.
pub(super) struct IndirectTable {
    geometry: Geometry,
    groups: usize,
    r0: usize,
    taps: usize,
    starts: StartTable,
    /// Window rows gathered into the auxiliary buffer: (where, image, input row, output
    /// column), in the order of their places.
    gathers: Vec<(usize, usize, usize, usize)>,
}

impl IndirectTable {
    fn build(g: &Geometry, groups: usize, r0: usize, rows: usize) -> Result<IndirectTable> {
        let by_rows = g.ic / groups.max(1) < INDIRECT_MIN_CHANNELS;
        if by_rows && (groups != 1 || g.dw != 1) {
            return Err(RuntimeError::Internal(
                "window-row runs need one group and unit horizontal dilation".into(),
            ));
        }
        let (taps, seg) = runs_of(g, groups);
        let mut starts = vec![0usize; rows * taps];
        let mut gathers = Vec::new();
        if by_rows {
            window_row_starts(g, r0, seg, &mut starts, &mut gathers);
        } else {
            window_starts(g, &tap_offsets(g), 0, r0, &mut starts, AUX);
        }
        Ok(IndirectTable {
            geometry: *g,
            groups,
            r0,
            taps,
            starts: StartTable::new(starts, seg)?,
            gathers,
        })
    }

    /// The auxiliary buffer for input `x`: the zero run, then the gathered window rows.
    fn aux(&self, x: &[f32]) -> Result<Vec<f32>> {
        let g = &self.geometry;
        let seg = runs_of(g, self.groups).1;
        let mut aux = super::util::zeroed_f32(seg * (1 + self.gathers.len()))?;
        for &(at, b, iy, ox) in &self.gathers {
            for kx in 0..g.kw {
                if let Some(ix) = g.in_x(ox, kx) {
                    let p = ((b * g.ih + iy) * g.iw + ix) * g.ic;
                    aux[at + kx * g.ic..][..g.ic].copy_from_slice(&x[p..p + g.ic]);
                }
            }
        }
        Ok(aux)
    }

    /// The left operand of rows `r..r + rows` of group `grp`.
    fn lhs<'a>(
        &'a self,
        x: &'a [f32],
        aux: &'a [f32],
        grp: usize,
        r: usize,
        rows: usize,
    ) -> Lhs<'a> {
        let c0 = grp * (self.geometry.ic / self.groups.max(1));
        Lhs::Indirect {
            x: x.get(c0..).unwrap_or(&[]),
            starts: self
                .starts
                .view((r - self.r0) * self.taps, rows * self.taps),
            segments: self.taps,
            aux,
        }
    }
}

/// [`conv_nhwc_panels`] without im2col: for every output pixel and every tap of its
/// window, where the tap's input channels start (or that it is padding), and the
/// micro-kernels read the windows in place ([`super::gemm_f32::Lhs::Indirect`]). The
/// products are summed in the im2col order, so the bits are the same; the gathering
/// copied 9x the input of a 3x3 layer (7% of ResNet18). The starts are computed once
/// per geometry (`cache`), or per tile for very large ones.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_indirect<'a>(
    g: &Geometry,
    groups: usize,
    x: &[f32],
    packed: &[f32],
    per_group: usize,
    epilogue: impl Fn(usize) -> super::gemm_f32::Epilogue<'a> + Sync,
    (out, ldo): (&mut [f32], usize),
    tile: usize,
    threads: usize,
    cache: &IndirectCache,
) -> Result<()> {
    let og = g.oc / groups;
    let rows = g.n * g.oh * g.ow;
    let k = {
        let (taps, seg) = runs_of(g, groups);
        taps * seg
    };
    // The whole convolution's table and auxiliary buffer, when the kernel keeps one.
    let whole = match cache.table(g, groups)? {
        Some(table) => {
            let aux = table.aux(x)?;
            Some((table, aux))
        }
        None => None,
    };
    // With one tile, the product itself is split over the threads.
    let inner = if rows > tile { 1 } else { threads };
    let tiles = |r0: usize, out_rows: &mut [f32], _: &mut [u8]| {
        let t = super::util::rows_in(out_rows.len(), g.oc, ldo);
        let own;
        let (table, aux) = match &whole {
            Some((table, aux)) => (&**table, &aux[..]),
            None => {
                let table = IndirectTable::build(g, groups, r0, t)?;
                let aux = table.aux(x)?;
                own = (table, aux);
                (&own.0, &own.1[..])
            }
        };
        for grp in 0..groups {
            gemm_lhs(
                table.lhs(x, aux, grp, r0, t),
                t,
                k,
                &packed[grp * per_group..(grp + 1) * per_group],
                og,
                &mut out_rows[grp * og..],
                ldo,
                epilogue(grp),
                inner,
            )?;
        }
        Ok(())
    };
    let out = super::util::strided_rows(out, rows, g.oc, ldo)?;
    super::util::for_row_tiles(threads, out, ldo, tile, 0, tiles)
}

/// For output rows `r0..` (one per `g.kh` entries of `starts`), where each window row
/// (kw pixels of all channels: one group, unit horizontal dilation) starts in the NHWC
/// input; a row in the vertical padding is the auxiliary buffer's leading zeros, and one
/// that meets the left or right padding is recorded in `gathers` with its place in the
/// auxiliary buffer (after the `seg` zeros, `seg` values each).
fn window_row_starts(
    g: &Geometry,
    r0: usize,
    seg: usize,
    starts: &mut [usize],
    gathers: &mut Vec<(usize, usize, usize, usize)>,
) {
    for (row, (b, oy, ox)) in starts.chunks_exact_mut(g.kh.max(1)).zip(g.pixels_from(r0)) {
        let ix0 = (ox * g.sw)
            .checked_sub(g.pad_left)
            .filter(|&i| i + g.kw <= g.iw);
        for (ky, st) in row.iter_mut().enumerate() {
            *st = match (g.in_y(oy, ky), ix0) {
                (None, _) => AUX,
                (Some(iy), Some(ix0)) => ((b * g.ih + iy) * g.iw + ix0) * g.ic,
                (Some(iy), None) => {
                    let at = seg * (1 + gathers.len());
                    gathers.push((at, b, iy, ox));
                    AUX | at
                }
            };
        }
    }
}

/// For output rows `r0..` (one per entry of `starts` / taps), where each tap's `cg`
/// input channels from `c0` start in the NHWC input, or `zero` for a tap in the padding.
/// A window wholly inside the input is its first tap's start plus `offsets` (one per tap,
/// [`tap_offsets`]).
fn window_starts(
    g: &Geometry,
    offsets: &[usize],
    c0: usize,
    r0: usize,
    starts: &mut [usize],
    zero: usize,
) {
    let taps = g.kh * g.kw;
    // The window of output (oy, ox) spans input rows oy * sh - pad_top + [0, span_y).
    let (span_y, span_x) = ((g.kh - 1) * g.dh + 1, (g.kw - 1) * g.dw + 1);
    let inside = |o: usize, stride: usize, pad: usize, span: usize, extent: usize| {
        (o * stride)
            .checked_sub(pad)
            .filter(|&i| i + span <= extent)
    };
    for (row, (b, oy, ox)) in starts.chunks_exact_mut(taps.max(1)).zip(g.pixels_from(r0)) {
        match (
            inside(oy, g.sh, g.pad_top, span_y, g.ih),
            inside(ox, g.sw, g.pad_left, span_x, g.iw),
        ) {
            (Some(iy), Some(ix)) => {
                let first = ((b * g.ih + iy) * g.iw + ix) * g.ic + c0;
                for (st, off) in row.iter_mut().zip(offsets) {
                    *st = first + off;
                }
            }
            _ => {
                for ky in 0..g.kh {
                    let iy = g.in_y(oy, ky);
                    for kx in 0..g.kw {
                        row[ky * g.kw + kx] = match (iy, g.in_x(ox, kx)) {
                            (Some(iy), Some(ix)) => ((b * g.ih + iy) * g.iw + ix) * g.ic + c0,
                            _ => zero,
                        };
                    }
                }
            }
        }
    }
}

/// Where each tap of a window starts relative to its first tap, in the NHWC input.
fn tap_offsets(g: &Geometry) -> Vec<usize> {
    (0..g.kh * g.kw)
        .map(|t| ((t / g.kw) * g.dh * g.iw + (t % g.kw) * g.dw) * g.ic)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Clamp;
    use crate::kernels::conv::{im2col_f32, pack_conv_filter_panels};
    use crate::kernels::gemm_f32::{self, Epilogue};

    /// The indirect GEMM reads the same windows im2col gathers, in the same order: the
    /// same bits, at every border, with strides, dilations, groups, two images, several
    /// tiles, on one and two threads, by taps and (few channels) by window rows.
    #[test]
    fn indirect_windows_give_the_bits_of_im2col() {
        if !gemm_f32::available() {
            return;
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let mut rng = crate::kernels::util::test_rng::Rng(0x1234_5678_9abc_def1);
        // (n, ih, iw, ic, oc, kh, kw, stride, dilation, pad, groups)
        for (case, &(n, ih, iw, ic, oc, kh, kw, s, d, pad, groups)) in [
            (1, 9, 11, 16, 20, 3, 3, 1, 1, 1, 1),
            (2, 10, 7, 32, 17, 3, 3, 2, 1, 1, 1),
            (1, 12, 12, 16, 24, 5, 5, 1, 2, 3, 1),
            (1, 8, 9, 32, 32, 3, 3, 1, 1, 0, 2),
            (1, 6, 6, 24, 16, 7, 7, 2, 1, 3, 1),
            // Few channels: whole window rows are the runs, gathered at the borders.
            (1, 13, 12, 3, 32, 3, 3, 2, 1, 1, 1),
            (2, 15, 15, 3, 16, 7, 7, 2, 1, 3, 1),
            (1, 9, 8, 4, 8, 3, 3, 1, 1, 0, 1),
        ]
        .iter()
        .enumerate()
        {
            let (span_h, span_w) = ((kh - 1) * d + 1, (kw - 1) * d + 1);
            let g = Geometry {
                n,
                ih,
                iw,
                ic,
                oh: (ih + 2 * pad - span_h) / s + 1,
                ow: (iw + 2 * pad - span_w) / s + 1,
                oc,
                kh,
                kw,
                sh: s,
                sw: s,
                dh: d,
                dw: d,
                pad_top: pad,
                pad_left: pad,
            };
            let (cg, og) = (ic / groups, oc / groups);
            let x = rng.f32s(n * ih * iw * ic);
            let filter = rng.f32s(oc * kh * kw * cg);
            let bias = rng.f32s(oc);
            let packed = pack_conv_filter_panels(&filter, [oc, kh, kw, cg], groups).unwrap();
            let packed = packed.as_f32();
            let k = kh * kw * cg;
            let per_group = gemm_f32::packed_len(k, og).unwrap();
            let rows = n * g.oh * g.ow;
            let clamp = Clamp { lo: -0.5, hi: 6.0 };
            let epilogue = |grp: usize| Epilogue {
                bias: &bias[grp * og..(grp + 1) * og],
                clamp,
            };
            let mut expected = vec![0.0f32; rows * oc];
            let mut col = vec![0.0f32; rows * k];
            for grp in 0..groups {
                im2col_f32(&g, &x, grp * cg, cg, 0, &mut col).unwrap();
                gemm_f32::gemm(
                    &col,
                    k,
                    rows,
                    k,
                    &packed[grp * per_group..(grp + 1) * per_group],
                    og,
                    &mut expected[grp * og..],
                    oc,
                    epilogue(grp),
                    1,
                )
                .unwrap();
            }
            // Kept tables (each used twice), and tables built per tile.
            let kept = IndirectCache::default();
            let per_tile = IndirectCache::with_limit(0);
            for (tile, threads) in [(rows, 1), (7, 1), (7, 2), (8, 2), (rows, 2)] {
                for (cache, name) in [(&kept, "kept"), (&per_tile, "per tile")] {
                    // Dense, and as channels 3.. of rows of oc + 5 (an in-place
                    // concatenation): the slice gets the same bits, nothing else is written.
                    for (ldo, first) in [(oc, 0), (oc + 5, 3)] {
                        let mut got = vec![f32::NAN; rows * ldo];
                        let extent = (rows - 1) * ldo + oc;
                        pool.install(|| {
                            conv_indirect(
                                &g,
                                groups,
                                &x,
                                packed,
                                per_group,
                                epilogue,
                                (&mut got[first..first + extent], ldo),
                                tile,
                                threads,
                                cache,
                            )
                        })
                        .unwrap();
                        for (r, row) in got.chunks_exact(ldo).enumerate() {
                            let want = &expected[r * oc..(r + 1) * oc];
                            let same = row[first..first + oc]
                                .iter()
                                .zip(want)
                                .all(|(a, b)| a.to_bits() == b.to_bits());
                            let untouched = row[..first]
                                .iter()
                                .chain(&row[first + oc..])
                                .all(|v| v.is_nan());
                            assert!(
                                same && untouched,
                                "case {case}, tile {tile}, {threads} threads, {name}, row stride {ldo}"
                            );
                        }
                    }
                }
            }
        }
    }
}
