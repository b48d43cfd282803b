//! Convolutions: CONV_2D, GROUPED_CONV_2D, DEPTHWISE_CONV_2D and TRANSPOSE_CONV_2D.
//!
//! Layout is NHWC; an NCHW layout flag is handled by transposing in and out.
//! - CONV_2D / GROUPED_CONV_2D: a 1x1, stride-1, unpadded convolution is one GEMM per
//!   group on the input as it lies; anything else goes through im2col tiles (bounded
//!   scratch) and a GEMM per tile and group. Filters are packed to `[K, O/groups]`
//!   row-major per group when the weights are prepared. Bias and activation are applied
//!   in one pass over each output tile while it is still in cache.
//! - DEPTHWISE_CONV_2D: one output row at a time by `depthwise_f32` (register kernels
//!   for square 3, 5 and 7 windows on AVX-512 and AVX2, a vectorized loop otherwise).
//! - TRANSPOSE_CONV_2D: GEMM of the input with the repacked filter into per-pixel
//!   columns, then a scatter-add (col2im) into the output initialized with the bias.

use std::borrow::Cow;

use nnc_formats::nn::OperandType;

use super::conv_indirect::INDIRECT_MIN_CHANNELS;
use super::depthwise_f32::depthwise_row;
use super::linalg::{Layout, matmul};
use super::util::{for_each_chunk, rank4, with_nhwc};
use super::window::{
    ConvParams, Geometry, TransposeParams, col2im, decode_conv, decode_transpose, im2col,
};
use super::{Clamp, Kernel, KernelContext, OpInfo, PreparedWeights, Scratch};
use crate::buffer::AlignedBuf;
use crate::error::{Result, RuntimeError};

/// Floats of im2col scratch per tile (1 MiB): keeps a tile and its GEMM panel in L2/L3.
const IM2COL_BUDGET: usize = 1 << 18;

/// Floats of output per pointwise-convolution tile (256 KiB).
const POINTWISE_TILE: usize = 1 << 16;

/// Which convolution an operation is, chosen where it is routed here (shared with the
/// quantized convolutions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConvKind {
    /// CONV_2D and GROUPED_CONV_2D (a plain convolution is one group).
    Grouped,
    /// DEPTHWISE_CONV_2D.
    Depthwise,
    /// TRANSPOSE_CONV_2D.
    Transpose,
}

pub(crate) fn build(info: &OpInfo, kind: ConvKind) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(0)?;
    if t != OperandType::TensorFloat32 {
        return Err(info.unsupported(format!(
            "input type {t} (only TENSOR_FLOAT32 is implemented)"
        )));
    }
    let filter_dims = if info.is_weight(1) {
        let dims = info
            .dims(1)
            .ok_or_else(|| info.invalid("constant filter with unknown dimensions"))?;
        Some(rank4(&dims, "filter")?)
    } else {
        None
    };
    let filter_is_weight = filter_dims.is_some();
    match kind {
        ConvKind::Transpose => {
            let params = decode_transpose(info)?;
            Ok(Box::new(TransposeConv {
                params,
                filter_dims,
                filter_is_weight,
            }))
        }
        ConvKind::Depthwise => {
            let params = decode_conv(info)?;
            Ok(Box::new(DepthwiseConv { params }))
        }
        ConvKind::Grouped => {
            let params = decode_conv(info)?;
            let winograd = filter_dims.and_then(|[o, kh, kw, cg]| {
                let out = info
                    .output_operand(0)
                    .ok()
                    .filter(|o| o.is_fully_specified());
                let output = out.and_then(|o| match *o.dimensions.as_slice() {
                    [_, _, h, w] if params.nchw => Some((h as usize, w as usize)),
                    [_, h, w, _] if !params.nchw => Some((h as usize, w as usize)),
                    _ => None,
                });
                super::winograd::choose(&super::winograd::Candidate {
                    kernel: (kh, kw),
                    stride: params.stride,
                    dilation: params.dilation,
                    groups: params.groups,
                    in_channels: cg * params.groups,
                    out_channels: o,
                    output,
                    fast_math: info.float_math == super::FloatMath::Fast,
                })
            });
            Ok(Box::new(Conv {
                params,
                filter_dims,
                filter_is_weight,
                packed_for_kernel: filter_is_weight && super::gemm_f32::available(),
                winograd,
                indirect: Default::default(),
            }))
        }
    }
}

/// Adds `bias` to every row of `rows` (row length = bias length) and applies the clamp.
fn bias_activation(rows: &mut [f32], bias: &[f32], clamp: Clamp) {
    if bias.is_empty() {
        return;
    }
    for row in rows.chunks_exact_mut(bias.len()) {
        for (v, b) in row.iter_mut().zip(bias) {
            *v = clamp.apply(*v + *b);
        }
    }
}

/// Weight bytes as f32 values in storage that is zeroized when dropped.
pub(crate) fn f32_zeroizing(bytes: &[u8]) -> zeroize::Zeroizing<Vec<f32>> {
    zeroize::Zeroizing::new(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

fn check_len(what: &str, data: &[f32], shape: &[usize]) -> Result<()> {
    let n: usize = shape.iter().product();
    if data.len() == n {
        Ok(())
    } else {
        Err(RuntimeError::kernel(format!(
            "{what} holds {} values, shape {shape:?} needs {n}",
            data.len()
        )))
    }
}

// ---------------------------------------------------------------------------------------
// CONV_2D and GROUPED_CONV_2D

struct Conv {
    params: ConvParams,
    filter_dims: Option<[usize; 4]>,
    filter_is_weight: bool,
    /// A constant filter packed for nnc's own micro-kernels ([`super::gemm_f32`], with
    /// the bias and activation fused), on processors that run them; otherwise the
    /// `gemm` crate's row-major layout.
    packed_for_kernel: bool,
    /// The [`super::winograd`] tiling a constant 3x3 stride-1 filter is transformed for
    /// (decided from the shapes and the float-math option when the kernel is built).
    winograd: Option<super::winograd::Tiling>,
    /// Where the windows of the last input shape start (indirect convolutions).
    indirect: super::conv_indirect::IndirectCache,
}

/// Packs a filter `[O, KH, KW, Cg]` for [`super::gemm_f32`], one right operand per
/// group (`B[k][j] = w[g * og + j][k]`), concatenated, straight into the aligned storage
/// the kernel reads.
pub(super) fn pack_conv_filter_panels(
    filter: &[f32],
    [o, kh, kw, cg]: [usize; 4],
    groups: usize,
) -> Result<AlignedBuf> {
    let (k, og) = filter_groups(filter, [o, kh, kw, cg], groups)?;
    let too_large = || RuntimeError::kernel("filter too large");
    let per_group = super::gemm_f32::packed_len(k, og).ok_or_else(too_large)?;
    let bytes = per_group
        .checked_mul(groups)
        .and_then(|v| v.checked_mul(4))
        .ok_or_else(too_large)?;
    let mut storage = AlignedBuf::zeroed(bytes)?;
    let packed = storage.as_f32_mut();
    for g in 0..groups {
        super::gemm_f32::pack(
            k,
            og,
            |kk, j| filter[(g * og + j) * k + kk],
            &mut packed[g * per_group..(g + 1) * per_group],
        );
    }
    Ok(storage)
}

/// Checks a filter `[O, KH, KW, Cg]` against its shape and group count; returns the
/// GEMM depth `K = KH * KW * Cg` and the output channels per group.
fn filter_groups(
    filter: &[f32],
    [o, kh, kw, cg]: [usize; 4],
    groups: usize,
) -> Result<(usize, usize)> {
    check_len("filter", filter, &[o, kh, kw, cg])?;
    if groups == 0 || o % groups != 0 {
        return Err(RuntimeError::kernel(format!(
            "{o} output channels do not split into {groups} groups"
        )));
    }
    Ok((kh * kw * cg, o / groups))
}

/// Packs a filter `[O, KH, KW, Cg]` into `groups` row-major `[K, O/groups]` matrices.
fn pack_conv_filter(
    filter: &[f32],
    [o, kh, kw, cg]: [usize; 4],
    groups: usize,
) -> Result<Vec<f32>> {
    let (k, og) = filter_groups(filter, [o, kh, kw, cg], groups)?;
    let mut packed = super::util::zeroed_f32(filter.len())?;
    for g in 0..groups {
        let dst = &mut packed[g * k * og..(g + 1) * k * og];
        for j in 0..og {
            let src = &filter[(g * og + j) * k..(g * og + j + 1) * k];
            for (kk, &v) in src.iter().enumerate() {
                dst[kk * og + j] = v;
            }
        }
    }
    Ok(packed)
}

impl Conv {
    fn filter_dims(&self, ctx: &KernelContext) -> Result<[usize; 4]> {
        match (self.filter_dims, ctx.optional_input(1)) {
            (Some(d), _) => Ok(d),
            (None, Some(f)) => rank4(f.shape, "filter"),
            (None, None) => Err(RuntimeError::kernel("filter is missing")),
        }
    }
}

impl Kernel for Conv {
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        let mut prepared = PreparedWeights::empty();
        if let (Some(Some(bytes)), Some(dims)) = (weights.get(1), self.filter_dims) {
            let filter = f32_zeroizing(bytes);
            let packed = if let Some(tiling) = self.winograd {
                super::winograd::prepare_filter(&filter, dims, tiling)?
            } else if self.packed_for_kernel {
                pack_conv_filter_panels(&filter, dims, self.params.groups)?
            } else {
                let rows =
                    zeroize::Zeroizing::new(pack_conv_filter(&filter, dims, self.params.groups)?);
                AlignedBuf::from_f32(&rows)?
            };
            prepared.push(packed);
        }
        prepared.add_raw(weights, &[1])?;
        Ok(prepared)
    }

    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let p = &self.params;
        let input = ctx.input(0)?;
        let bias = ctx.input(2)?.f32()?;
        let fdims = self.filter_dims(ctx)?;
        let weights = ctx.weights;
        let packed: Cow<[f32]> = if self.filter_is_weight {
            Cow::Borrowed(
                weights
                    .buffer(0)
                    .ok_or_else(|| RuntimeError::kernel("prepared filter is missing"))?
                    .as_f32(),
            )
        } else {
            Cow::Owned(pack_conv_filter(ctx.input(1)?.f32()?, fdims, p.groups)?)
        };
        let in_shape = rank4(input.shape, "input")?;
        let x = input.f32()?;
        check_len("input", x, input.shape)?;
        let threads = ctx.threads;
        let parallelism = ctx.gemm_parallelism();
        let (out_t, scratch) = ctx.output_and_scratch(0)?;
        let (out_shape, out, row_stride) = out_t.f32_rows()?;
        let out_shape = rank4(out_shape, "output")?;
        let run = Run {
            x,
            in_shape,
            packed: &packed,
            fdims,
            bias,
            out_shape,
            threads,
            parallelism,
        };
        let last = out_shape[3];
        // Only the packed micro-kernels write a slice of a larger tensor themselves; the
        // other paths compute densely and the rows are then placed (the copy an
        // out-of-place concatenation would have made).
        if row_stride == last || (self.packed_for_kernel && self.winograd.is_none() && !p.nchw) {
            if row_stride == last {
                check_len("output", out, &out_shape)?;
                return self.compute(&run, out, None, scratch);
            }
            return self.compute(&run, out, Some(row_stride), scratch);
        }
        // The dense result in the execution's scratch, kept from run to run (a fresh
        // buffer each run is fresh pages to fault in); the one path here that also needs
        // scratch (the non-x86 GEMM's im2col) grows a second one.
        let mut held = std::mem::take(scratch);
        let placed = held.f32(out_shape.iter().product()).and_then(|dense| {
            self.compute(&run, dense, None, scratch)?;
            // (No channels: nothing to place; `row_stride` exceeds `last`, so it is not 0.)
            let rows = dense.chunks_exact(last.max(1));
            for (src, dst) in rows.zip(out.chunks_mut(row_stride)) {
                dst[..last].copy_from_slice(src);
            }
            Ok(())
        });
        *scratch = held;
        placed
    }
}

/// What one execution of a [`Conv`] computes from.
struct Run<'r> {
    x: &'r [f32],
    in_shape: [usize; 4],
    packed: &'r [f32],
    fdims: [usize; 4],
    bias: &'r [f32],
    out_shape: [usize; 4],
    threads: usize,
    parallelism: gemm::Parallelism,
}

impl Conv {
    /// Computes the output into `out`: dense, or (on the packed micro-kernels' NHWC path
    /// only) with its rows (output pixels) `row_stride` floats apart.
    fn compute(
        &self,
        run: &Run,
        out: &mut [f32],
        row_stride: Option<usize>,
        scratch: &mut super::Scratch,
    ) -> Result<()> {
        let p = &self.params;
        let &Run {
            x,
            in_shape,
            packed,
            fdims,
            bias,
            out_shape,
            threads,
            parallelism,
        } = run;
        with_nhwc(
            p.nchw,
            x,
            in_shape,
            out,
            out_shape,
            |x, in_shape, out, out_shape| {
                let g = Geometry::new(p, in_shape, (fdims[1], fdims[2]), out_shape)?;
                let groups = p.groups;
                if g.oc != fdims[0]
                    || fdims[3] * groups != g.ic
                    || g.oc % groups != 0
                    || bias.len() != g.oc
                {
                    return Err(RuntimeError::kernel(format!(
                        "filter {fdims:?}, {groups} groups, bias of {} and input channels {} do not fit output channels {}",
                        bias.len(),
                        g.ic,
                        g.oc
                    )));
                }
                if self.packed_for_kernel && self.winograd.is_none() {
                    return conv_nhwc_panels(
                        &g,
                        groups,
                        x,
                        packed,
                        bias,
                        p.clamp(),
                        (out, row_stride.unwrap_or(g.oc)),
                        threads,
                        &self.indirect,
                    );
                }
                if row_stride.is_some() {
                    return Err(RuntimeError::Internal(
                        "this convolution path writes dense outputs only".into(),
                    ));
                }
                if let Some(tiling) = self.winograd {
                    return super::winograd::conv(
                        &g,
                        tiling,
                        x,
                        packed,
                        bias,
                        p.clamp(),
                        out,
                        threads,
                    );
                }
                if packed.len() != fdims.iter().product::<usize>() {
                    return Err(RuntimeError::kernel("packed filter has the wrong size"));
                }
                conv_nhwc(
                    &g,
                    groups,
                    x,
                    packed,
                    bias,
                    p.clamp(),
                    out,
                    scratch,
                    threads,
                    parallelism,
                )
            },
        )
    }
}

/// [`conv_nhwc`] with a filter packed by [`pack_conv_filter_panels`]: the bias and
/// activation are applied as [`super::gemm_f32`] stores each block. `out` is the output
/// and the distance between the starts of its rows (output pixels), `g.oc` or more.
#[allow(clippy::too_many_arguments)]
fn conv_nhwc_panels(
    g: &Geometry,
    groups: usize,
    x: &[f32],
    packed: &[f32],
    bias: &[f32],
    clamp: Clamp,
    (out, ldo): (&mut [f32], usize),
    threads: usize,
    indirect: &super::conv_indirect::IndirectCache,
) -> Result<()> {
    use super::gemm_f32::{Epilogue, gemm, packed_len};
    let cg = g.ic / groups;
    let og = g.oc / groups;
    let k = g.kh * g.kw * cg;
    let rows = g.n * g.oh * g.ow;
    let per_group = packed_len(k, og).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    if packed.len() != per_group * groups {
        return Err(RuntimeError::kernel("packed filter has the wrong size"));
    }
    let out = super::util::strided_rows(out, rows, g.oc, ldo)?;
    let epilogue = |grp: usize| Epilogue {
        bias: &bias[grp * og..(grp + 1) * og],
        clamp,
    };
    let pointwise = g.is_pointwise();
    if pointwise {
        // The input is already the [rows, C] im2col matrix.
        for grp in 0..groups {
            gemm(
                &x[grp * cg..],
                g.ic,
                rows,
                k,
                &packed[grp * per_group..(grp + 1) * per_group],
                og,
                &mut out[grp * og..],
                ldo,
                epilogue(grp),
                threads,
            )?;
        }
        return Ok(());
    }
    // Tiles of rows, each gathered and multiplied by one thread: with several threads,
    // the tiles run in parallel (each in its thread's scratch), so the gathering is not
    // a serial part of the convolution.
    let mut tile = (IM2COL_BUDGET / k.max(1)).clamp(1, rows.max(1));
    // Few rows in one tile: the product splits its columns over the threads instead.
    let one_split_tile = tile == rows && super::gemm_f32::splits_columns(rows, k, og);
    if threads > 1 && !one_split_tile {
        // At least two tiles per thread, as many for each thread: ResNet18's first
        // layer came to seven whole tiles and a sliver.
        let tiles = rows
            .div_ceil(tile.min(rows.div_ceil(2 * threads)).max(1))
            .next_multiple_of(threads);
        tile = rows.div_ceil(tiles).max(8);
    }
    // Few channels: whole window rows are runs (one group, unit horizontal dilation).
    let row_runs = groups == 1 && g.dw == 1 && g.kw * g.ic >= 8;
    if cg >= INDIRECT_MIN_CHANNELS || row_runs {
        return super::conv_indirect::conv_indirect(
            g,
            groups,
            x,
            packed,
            per_group,
            epilogue,
            (out, ldo),
            tile,
            threads,
            indirect,
        );
    }
    // With one tile, the product itself is split over the threads.
    let inner = if rows > tile { 1 } else { threads };
    let tiles = |r0: usize, out_rows: &mut [f32], col: &mut [f32]| {
        let t = super::util::rows_in(out_rows.len(), g.oc, ldo);
        let col = &mut col[..t * k];
        for grp in 0..groups {
            im2col_f32(g, x, grp * cg, cg, r0, col)?;
            gemm(
                col,
                k,
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
    super::util::for_row_tiles(threads, out, ldo, tile, tile * k, tiles)
}

#[allow(clippy::too_many_arguments)]
fn conv_nhwc(
    g: &Geometry,
    groups: usize,
    x: &[f32],
    packed: &[f32],
    bias: &[f32],
    clamp: Clamp,
    out: &mut [f32],
    scratch: &mut super::Scratch,
    threads: usize,
    parallelism: gemm::Parallelism,
) -> Result<()> {
    let cg = g.ic / groups;
    let og = g.oc / groups;
    let k = g.kh * g.kw * cg;
    let rows = g.n * g.oh * g.ow;
    let pointwise = g.is_pointwise();
    if pointwise {
        // The input is already the [rows, C] im2col matrix. Row tiles keep each output
        // tile in cache for the bias and activation pass.
        let tile = (POINTWISE_TILE / g.oc.max(1)).max(64).min(rows.max(1));
        let mut r0 = 0;
        while r0 < rows {
            let r1 = (r0 + tile).min(rows);
            for grp in 0..groups {
                matmul(
                    r1 - r0,
                    og,
                    k,
                    &mut out[r0 * g.oc + grp * og..r1 * g.oc],
                    Layout::row_major(g.oc),
                    &x[r0 * g.ic + grp * cg..r1 * g.ic],
                    Layout::row_major(g.ic),
                    &packed[grp * k * og..(grp + 1) * k * og],
                    Layout::row_major(og),
                    false,
                    parallelism,
                )?;
            }
            bias_activation(&mut out[r0 * g.oc..r1 * g.oc], bias, clamp);
            r0 = r1;
        }
        let _ = threads;
        return Ok(());
    }
    let tile = (IM2COL_BUDGET / k.max(1)).clamp(1, rows.max(1));
    let col = scratch.f32(tile * k)?;
    let mut r0 = 0;
    while r0 < rows {
        let r1 = (r0 + tile).min(rows);
        let t = r1 - r0;
        for grp in 0..groups {
            im2col_f32(g, x, grp * cg, cg, r0, &mut col[..t * k])?;
            matmul(
                t,
                og,
                k,
                &mut out[r0 * g.oc + grp * og..r1 * g.oc],
                Layout::row_major(g.oc),
                &col[..t * k],
                Layout::row_major(k),
                &packed[grp * k * og..(grp + 1) * k * og],
                Layout::row_major(og),
                false,
                parallelism,
            )?;
        }
        bias_activation(&mut out[r0 * g.oc..r1 * g.oc], bias, clamp);
        r0 = r1;
    }
    Ok(())
}

/// Fills `col` with rows `r0..` of the im2col matrix (each `[KH, KW, cg]`, as many as
/// `col` holds) for the channel range `c0..c0 + cg`, padding with zeros.
pub(super) fn im2col_f32(
    g: &Geometry,
    x: &[f32],
    c0: usize,
    cg: usize,
    r0: usize,
    col: &mut [f32],
) -> Result<()> {
    let k = g.kh * g.kw * cg;
    im2col(g, x, c0..c0 + cg, r0, k, 0.0, col, <[f32]>::copy_from_slice)
}

// ---------------------------------------------------------------------------------------
// DEPTHWISE_CONV_2D

struct DepthwiseConv {
    params: ConvParams,
}

impl Kernel for DepthwiseConv {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let p = &self.params;
        let input = ctx.input(0)?;
        let filter = ctx.input(1)?;
        let w = filter.f32()?;
        let bias = ctx.input(2)?.f32()?;
        let fdims = rank4(filter.shape, "filter")?;
        check_len("filter", w, filter.shape)?;
        let in_shape = rank4(input.shape, "input")?;
        let x = input.f32()?;
        check_len("input", x, input.shape)?;
        let threads = ctx.threads;
        let (out_t, scratch) = ctx.output_and_scratch(0)?;
        let (out_shape, out) = out_t.f32_parts()?;
        let out_shape = rank4(out_shape, "output")?;
        check_len("output", out, &out_shape)?;
        with_nhwc(
            p.nchw,
            x,
            in_shape,
            out,
            out_shape,
            |x, in_shape, out, out_shape| {
                let g = Geometry::new(p, in_shape, (fdims[1], fdims[2]), out_shape)?;
                let m = p.multiplier;
                if fdims[0] != 1 || fdims[3] != g.oc || g.ic * m != g.oc || bias.len() != g.oc {
                    return Err(RuntimeError::kernel(format!(
                        "filter {fdims:?}, multiplier {m}, bias of {} and input channels {} do not fit output channels {}",
                        bias.len(),
                        g.ic,
                        g.oc
                    )));
                }
                // A depth multiplier above 1: each input channel repeated m times, so that
                // output channel c reads channel c and the vectorized multiplier-1 kernels
                // run (the general loop ran at 1.6 GMAC/s on FastViT's 7 x 7, multiplier 2
                // layers, 10% of its time).
                let (x, g, m) = if m > 1 {
                    let expanded = repeat_channels(x, m, scratch)?;
                    let ic = g.oc;
                    (expanded, Geometry { ic, ..g }, 1)
                } else {
                    (x, g, m)
                };
                let row_len = g.ow * g.oc;
                for_each_chunk(threads, out, row_len, |row, out_row| {
                    let b = row / g.oh;
                    let oy = row % g.oh;
                    depthwise_row(&g, m, x, w, bias, p.clamp(), b, oy, out_row);
                });
                Ok(())
            },
        )
    }
}

/// `x` (NHWC) with each value repeated `m` times where it stands: channel c becomes
/// channels c * m .. c * m + m. Written into the kernel's scratch, which persists
/// between runs, so no execution allocates it again.
fn repeat_channels<'s>(x: &[f32], m: usize, scratch: &'s mut Scratch) -> Result<&'s [f32]> {
    let len = x
        .len()
        .checked_mul(m)
        .ok_or_else(|| RuntimeError::kernel("depthwise input too large"))?;
    let out = scratch.f32(len)?;
    for (o, &v) in out.chunks_exact_mut(m).zip(x) {
        o.fill(v);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// TRANSPOSE_CONV_2D

struct TransposeConv {
    params: TransposeParams,
    filter_dims: Option<[usize; 4]>,
    filter_is_weight: bool,
}

/// Packs a filter `[O, KH, KW, C]` into a row-major `[C, KH * KW * O]` matrix.
fn pack_transpose_filter(filter: &[f32], [o, kh, kw, c]: [usize; 4]) -> Result<Vec<f32>> {
    check_len("filter", filter, &[o, kh, kw, c])?;
    let cols = kh * kw * o;
    let mut packed = super::util::zeroed_f32(filter.len())?;
    for oo in 0..o {
        for t in 0..kh * kw {
            let src = &filter[(oo * kh * kw + t) * c..(oo * kh * kw + t + 1) * c];
            for (cc, &v) in src.iter().enumerate() {
                packed[cc * cols + t * o + oo] = v;
            }
        }
    }
    Ok(packed)
}

impl Kernel for TransposeConv {
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        let mut prepared = PreparedWeights::empty();
        if let (Some(Some(bytes)), Some(dims)) = (weights.get(1), self.filter_dims) {
            let filter = f32_zeroizing(bytes);
            let packed = zeroize::Zeroizing::new(pack_transpose_filter(&filter, dims)?);
            prepared.push(AlignedBuf::from_f32(&packed)?);
        }
        prepared.add_raw(weights, &[1])?;
        Ok(prepared)
    }

    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let p = &self.params;
        let input = ctx.input(0)?;
        let bias = ctx.input(2)?.f32()?;
        let fdims = match (self.filter_dims, ctx.optional_input(1)) {
            (Some(d), _) => d,
            (None, Some(f)) => rank4(f.shape, "filter")?,
            (None, None) => return Err(RuntimeError::kernel("filter is missing")),
        };
        let weights = ctx.weights;
        let packed: Cow<[f32]> = if self.filter_is_weight {
            Cow::Borrowed(
                weights
                    .buffer(0)
                    .ok_or_else(|| RuntimeError::kernel("prepared filter is missing"))?
                    .as_f32(),
            )
        } else {
            Cow::Owned(pack_transpose_filter(ctx.input(1)?.f32()?, fdims)?)
        };
        let in_shape = rank4(input.shape, "input")?;
        let x = input.f32()?;
        check_len("input", x, input.shape)?;
        let parallelism = ctx.gemm_parallelism();
        let (out_t, scratch) = ctx.output_and_scratch(0)?;
        let (out_shape, out) = out_t.f32_parts()?;
        let out_shape = rank4(out_shape, "output")?;
        check_len("output", out, &out_shape)?;
        with_nhwc(
            p.nchw,
            x,
            in_shape,
            out,
            out_shape,
            |x, [n, ih, iw, ic], out, [on, oh, ow, oc]| {
                let [fo, kh, kw, fc] = fdims;
                if fo != oc
                    || fc != ic
                    || on != n
                    || bias.len() != oc
                    || packed.len() != fo * kh * kw * fc
                {
                    return Err(RuntimeError::kernel(format!(
                        "filter {fdims:?}, bias of {}, input channels {ic} and output {:?} do not fit",
                        bias.len(),
                        [on, oh, ow, oc]
                    )));
                }
                let g = p.geometry([n, ih, iw, ic], (kh, kw), [on, oh, ow, oc])?;
                // out = bias, then scatter-add the per-pixel columns.
                for row in out.chunks_exact_mut(oc) {
                    row.copy_from_slice(bias);
                }
                let cols = kh * kw * oc;
                let pixels = n * ih * iw;
                let tile = (IM2COL_BUDGET / cols.max(1)).clamp(1, pixels.max(1));
                let col = scratch.f32(tile * cols)?;
                let mut p0 = 0;
                while p0 < pixels {
                    let p1 = (p0 + tile).min(pixels);
                    let t = p1 - p0;
                    let col = &mut col[..t * cols];
                    matmul(
                        t,
                        cols,
                        ic,
                        col,
                        Layout::row_major(cols),
                        &x[p0 * ic..p1 * ic],
                        Layout::row_major(ic),
                        &packed,
                        Layout::row_major(cols),
                        false,
                        parallelism,
                    )?;
                    col2im(&g, col, p0, cols, out, |dst, src| {
                        for (d, s) in dst.iter_mut().zip(src) {
                            *d += *s;
                        }
                    })?;
                    p0 = p1;
                }
                p.clamp().apply_slice(out);
                Ok(())
            },
        )
    }
}
