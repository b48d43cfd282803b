//! A 1x1 expansion convolution and the depthwise convolution that reads it, run as one
//! pass over bands of rows (MobileNet's inverted residual blocks).
//!
//! Unfused, the expansion is written whole (4.8 MB at MobileNetV2's 112 x 112 x 96) and
//! read back by the depthwise convolution from memory: both layers then run at memory
//! speed, not at the speed of their arithmetic. Fused, the expansion rows one band of
//! depthwise output needs are computed into a buffer that stays in the core's L2 cache
//! and consumed there; the rows a band shares with the next (the window's overlap) are
//! moved to the buffer's front instead of being recomputed. The expansion tensor is never
//! written. Both halves run the unfused kernels' own code (the packed GEMM and the
//! depthwise row kernel) on the same values in the same order, so the outputs are the
//! same bits.
//!
//! The executor runs a pair here only when the memory plan keeps the pair's inputs apart
//! from its output (see `exec/program.rs`, `fuse_pairs`).

use nnc_formats::nn::{OperandType, OperationType};

use super::depthwise_f32::depthwise_row;
use super::gemm_f32::{self, Epilogue};
use super::util::{for_row_tiles, rank4};
use super::window::{ConvParams, Geometry, decode_conv};
use super::{OpInfo, PreparedWeights};
use crate::error::{Result, RuntimeError};
use crate::tensor::{TensorMut, TensorRef};

/// Floats of expansion rows per band (384 KiB): with the GEMM's filter panels and the
/// band's output rows it stays inside a 1 MiB L2 cache.
const BAND_FLOATS: usize = 96 * 1024;

/// The smallest expansion (bytes) worth fusing. Measured in MobileNetV2 on a Zen 4
/// core (1 MiB L2): the 4.8 MB expansion at 112 x 112 x 96 ran 0.86 -> 0.64 ms fused;
/// 1.8 MB ones (56 x 56 x 144), which the L3 cache holds between the two layers, gained
/// nothing, and 0.6 MB ones lost 10-15% to the smaller GEMMs and the band overlap.
const MIN_EXPANSION_BYTES: usize = 3 << 20;

/// A fused CONV_2D (1x1, stride 1, no padding, one group) -> DEPTHWISE_CONV_2D
/// (multiplier 1), both float32 in NHWC.
#[derive(Debug)]
pub(crate) struct ExpandDepthwise {
    expand: ConvParams,
    depthwise: ConvParams,
}

impl ExpandDepthwise {
    /// The fused kernel for `head` (the expansion) and `tail` (the depthwise
    /// convolution reading only the expansion's output), or None where the pair does not
    /// have the shape this kernel runs. `shapes` are the expansion's input, its output
    /// and the depthwise output, all known before execution.
    pub(crate) fn for_pair(
        head: &OpInfo,
        tail: &OpInfo,
        [input, expansion, output]: [&[usize]; 3],
    ) -> Option<ExpandDepthwise> {
        let float = |info: &OpInfo, i: usize| {
            info.input_type(i)
                .is_ok_and(|t| t == OperandType::TensorFloat32)
        };
        if head.op_type() != OperationType::Conv2d
            || tail.op_type() != OperationType::DepthwiseConv2d
            || !float(head, 0)
            || !float(tail, 0)
            // The expansion's filter packed for the GEMM micro-kernels at preparation.
            || !head.is_weight(1)
            || !gemm_f32::available()
        {
            return None;
        }
        let expand = decode_conv(head).ok()?;
        let depthwise = decode_conv(tail).ok()?;
        if expand.nchw || depthwise.nchw || expand.groups != 1 || depthwise.multiplier != 1 {
            return None;
        }
        let [oc, kh, kw, ic] = rank4(&head.dims(1)?, "filter").ok()?;
        let [_, dkh, dkw, _] = rank4(&tail.dims(1)?, "filter").ok()?;
        let geometry = |p: &ConvParams, i: &[usize], k, o: &[usize]| {
            Geometry::new(p, rank4(i, "input").ok()?, k, rank4(o, "output").ok()?).ok()
        };
        let ge = geometry(&expand, input, (kh, kw), expansion)?;
        let gd = geometry(&depthwise, expansion, (dkh, dkw), output)?;
        let large = expansion
            .iter()
            .try_fold(4usize, |bytes, &d| bytes.checked_mul(d))
            .is_some_and(|bytes| bytes >= MIN_EXPANSION_BYTES);
        (large && ge.is_pointwise() && ge.ic == ic && ge.oc == oc && gd.ic == oc && gd.oc == oc)
            .then_some(ExpandDepthwise { expand, depthwise })
    }

    /// Runs the pair. `head` and `tail` are the two operations' inputs as their own
    /// kernels would see them (the tail's input 0, the expansion, is absent);
    /// `head_weights` the expansion's prepared weights (its packed filter first);
    /// `expansion_shape` the shape the expansion would have.
    pub(crate) fn run<'t>(
        &self,
        head: &[Option<TensorRef<'t>>],
        head_weights: &PreparedWeights,
        expansion_shape: &[usize],
        tail: &[Option<TensorRef<'t>>],
        out: &mut TensorMut,
        threads: usize,
    ) -> Result<()> {
        let bad = |m: String| RuntimeError::kernel(format!("expansion and depthwise: {m}"));
        let input = |list: &[Option<TensorRef<'t>>], i: usize, what: &str| {
            list.get(i)
                .copied()
                .flatten()
                .ok_or_else(|| bad(format!("{what} is missing")))
        };
        let x_t = input(head, 0, "input")?;
        let x = x_t.f32()?;
        let packed = head_weights
            .buffer(0)
            .ok_or_else(|| bad("prepared filter is missing".into()))?
            .as_f32();
        let expand_bias = input(head, 2, "expansion bias")?.f32()?;
        let filter = input(tail, 1, "depthwise filter")?;
        let w = filter.f32()?;
        let depthwise_bias = input(tail, 2, "depthwise bias")?.f32()?;
        let (out_shape, out) = out.f32_parts()?;

        let in_shape = rank4(x_t.shape, "input")?;
        let t_shape = rank4(expansion_shape, "expansion")?;
        let out_shape = rank4(out_shape, "output")?;
        let fdims = rank4(filter.shape, "filter")?;
        let ge = Geometry::new(&self.expand, in_shape, (1, 1), t_shape)?;
        let gd = Geometry::new(&self.depthwise, t_shape, (fdims[1], fdims[2]), out_shape)?;
        let (ic, ec) = (ge.ic, ge.oc);
        let sizes_fit = ge.is_pointwise()
            && gemm_f32::packed_len(ic, ec) == Some(packed.len())
            && expand_bias.len() == ec
            && fdims[0] == 1
            && fdims[3] == ec
            && gd.ic == ec
            && gd.oc == ec
            && depthwise_bias.len() == ec
            && x.len() == in_shape.iter().product::<usize>()
            && w.len() == fdims.iter().product::<usize>()
            && out.len() == out_shape.iter().product::<usize>();
        if !sizes_fit {
            return Err(bad(format!(
                "input {in_shape:?}, expansion {t_shape:?}, depthwise filter {fdims:?} and output {out_shape:?} do not fit"
            )));
        }
        let row = gd.iw * ec; // floats of one expansion row
        let window_rows = (gd.kh - 1) * gd.dh + 1;
        // Output rows per band: as many as BAND_FLOATS of expansion rows feed.
        let band = (BAND_FLOATS / row.max(1)).saturating_sub(window_rows) / gd.sh + 1;
        let band_floats = ((band - 1) * gd.sh + window_rows) * row;
        let rows = gd.n * gd.oh;
        // Tiles of output rows run independently (each recomputes its first band's
        // overlap); one tile per thread pair of tasks, the whole tensor on one thread.
        let tile = if threads > 1 {
            rows.div_ceil(2 * threads).max(band)
        } else {
            rows
        };
        let expand_clamp = self.expand.clamp();
        let dw_clamp = self.depthwise.clamp();
        // Expansion rows [lo, hi) that output row oy reads (clamped to the input).
        let needs = |oy: usize| {
            let top = oy * gd.sh;
            let lo = top.saturating_sub(gd.pad_top).min(gd.ih);
            let hi = (top + window_rows).saturating_sub(gd.pad_top).min(gd.ih);
            (lo, hi.max(lo))
        };
        for_row_tiles(
            threads,
            &mut out[..rows * gd.ow * ec],
            gd.ow * ec,
            tile,
            band_floats,
            |r0, out_rows: &mut [f32], buf: &mut [f32]| {
                let r_end = r0 + out_rows.len() / (gd.ow * ec);
                // The expansion rows [lo, hi) of image `b` the buffer holds.
                let mut held: Option<(usize, usize, usize)> = None;
                let mut r = r0;
                while r < r_end {
                    let (b, oy) = (r / gd.oh, r % gd.oh);
                    let oy_end = (oy + band).min(gd.oh).min(oy + (r_end - r));
                    let (lo, _) = needs(oy);
                    let (_, hi) = needs(oy_end - 1);
                    // Rows already computed for the previous band move to the front.
                    let kept_to = match held {
                        Some((hb, h_lo, h_hi)) if hb == b && lo >= h_lo && lo < h_hi => {
                            buf.copy_within((lo - h_lo) * row..(h_hi - h_lo) * row, 0);
                            h_hi.min(hi)
                        }
                        _ => lo,
                    };
                    let new_rows = hi - kept_to;
                    if new_rows > 0 {
                        let src = (b * gd.ih + kept_to) * gd.iw * ic;
                        gemm_f32::gemm(
                            &x[src..src + new_rows * gd.iw * ic],
                            ic,
                            new_rows * gd.iw,
                            ic,
                            packed,
                            ec,
                            &mut buf[(kept_to - lo) * row..(hi - lo) * row],
                            ec,
                            Epilogue {
                                bias: expand_bias,
                                clamp: expand_clamp,
                            },
                            1,
                        )?;
                    }
                    held = Some((b, lo, hi));
                    // The depthwise convolution of this band, reading the buffer as the
                    // rows [lo, hi) of a one-image input: rows above lo that a window
                    // reaches are padding (lo is where the band's first window starts).
                    let band_geometry = Geometry {
                        n: 1,
                        ih: hi - lo,
                        pad_top: gd.pad_top + lo,
                        ..gd
                    };
                    let first = (r - r0) * gd.ow * ec;
                    for (k, out_row) in out_rows[first..]
                        .chunks_exact_mut(gd.ow * ec)
                        .take(oy_end - oy)
                        .enumerate()
                    {
                        depthwise_row(
                            &band_geometry,
                            1,
                            &buf[..(hi - lo) * row],
                            w,
                            depthwise_bias,
                            dw_clamp,
                            0,
                            oy + k,
                            out_row,
                        );
                    }
                    r += oy_end - oy;
                }
                Ok(())
            },
        )
    }
}
