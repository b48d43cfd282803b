//! CONV_2D and GROUPED_CONV_2D: a GEMM per group, on 8-bit dot products or on i16
//! operands (see the parent module).

use super::super::typed;
use super::*;
use crate::buffer::WeightBuf;
use crate::kernels::window::im2col;

pub(super) struct Conv {
    pub(super) params: ConvParams,
    pub(super) oq: OutputQuant,
    pub(super) fq: FilterQuant,
    pub(super) filter_dims: Option<[usize; 4]>,
    /// The 8-bit dot-product path ([`gemm_u8i8`]): a constant filter whose values fit
    /// signed bytes, on a processor with the instructions.
    pub(super) bytes: bool,
    /// The output stages of the groups, built at the first run when they depend only
    /// on constants (the filter, its sums, the bias).
    pub(super) stages: ConstantStages,
}

/// Packs a filter `[O, KH, KW, Cg]` for [`gemm_u8i8`], one right operand per group
/// (`B[k][j] = w[g * og + j][k] - w_zp` as i8), concatenated, and each output channel's
/// column sum (for the zero-point correction).
fn pack_conv_filter_bytes(
    filter: &[u8],
    [o, kh, kw, cg]: [usize; 4],
    groups: usize,
    fq: &FilterQuant,
) -> Result<(zeroize::Zeroizing<Vec<u8>>, Vec<i32>)> {
    if filter.len() != o * kh * kw * cg {
        return Err(RuntimeError::kernel("filter does not match its shape"));
    }
    if groups == 0 || o % groups != 0 {
        return Err(RuntimeError::kernel(format!(
            "{o} output channels do not split into {groups} groups"
        )));
    }
    if !gemm_u8i8::fits(fq.qt, fq.zp) {
        return Err(RuntimeError::Internal(
            "8-bit filter packing for values that do not fit a signed byte".into(),
        ));
    }
    let k = kh * kw * cg;
    let og = o / groups;
    let per_group =
        gemm_u8i8::packed_len(k, og).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    let mut packed =
        zeroize::Zeroizing::new(crate::kernels::util::filled(per_group * groups, 0u8)?);
    let mut sums = Vec::with_capacity(o);
    for g in 0..groups {
        sums.extend(gemm_u8i8::pack_rhs(
            k,
            og,
            // fits() guarantees the value is in [-128, 127].
            |kk, j| (fq.qt.load(filter[(g * og + j) * k + kk]) - fq.zp) as i8,
            &mut packed[g * per_group..(g + 1) * per_group],
        ));
    }
    Ok((packed, sums))
}

/// Packs a filter `[O, KH, KW, Cg]` into one GEMM right operand per group
/// (`B[k][j] = w[g * og + j][k] - w_zp`, k over (ky, kx, c)), concatenated.
fn pack_conv_filter(
    filter: &[u8],
    [o, kh, kw, cg]: [usize; 4],
    groups: usize,
    fq: &FilterQuant,
) -> Result<zeroize::Zeroizing<Vec<i16>>> {
    if filter.len() != o * kh * kw * cg {
        return Err(RuntimeError::kernel("filter does not match its shape"));
    }
    if groups == 0 || o % groups != 0 {
        return Err(RuntimeError::kernel(format!(
            "{o} output channels do not split into {groups} groups"
        )));
    }
    let k = kh * kw * cg;
    let og = o / groups;
    let per_group = packed_len(k, og).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    let mut packed =
        zeroize::Zeroizing::new(crate::kernels::util::filled(per_group * groups, 0i16)?);
    for g in 0..groups {
        pack_rhs(
            k,
            og,
            |kk, j| widen(fq.qt, fq.zp, filter[(g * og + j) * k + kk]),
            &mut packed[g * per_group..(g + 1) * per_group],
        );
    }
    Ok(packed)
}

impl Kernel for Conv {
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        let mut prepared = PreparedWeights::empty();
        if let (Some(Some(filter)), Some(dims)) = (weights.get(1), self.filter_dims) {
            if self.bytes {
                let (packed, sums) =
                    pack_conv_filter_bytes(filter, dims, self.params.groups, &self.fq)?;
                prepared.push(AlignedBuf::from_bytes(&packed)?);
                prepared.push(AlignedBuf::from_bytes(bytemuck::cast_slice(&sums))?);
            } else {
                let packed = pack_conv_filter(filter, dims, self.params.groups, &self.fq)?;
                prepared.push(i16_buffer(&packed)?);
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
        let groups = p.groups;
        let filter = if self.bytes {
            let buffer = |i: usize, what: &str| {
                ctx.weights
                    .buffer(i)
                    .map(WeightBuf::as_bytes)
                    .ok_or_else(|| RuntimeError::kernel(format!("prepared {what} is missing")))
            };
            let sums: &[i32] = bytemuck::try_cast_slice(buffer(1, "filter sums")?)
                .map_err(|e| RuntimeError::Internal(format!("prepared filter sums: {e:?}")))?;
            if sums.len() != fdims[0] {
                return Err(RuntimeError::kernel("filter sums do not match the filter"));
            }
            PackedFilter::Bytes {
                packed: buffer(0, "filter")?,
                sums,
            }
        } else if self.filter_dims.is_some() {
            PackedFilter::Wide(Cow::Borrowed(prepared_i16(ctx.weights, 0)?))
        } else {
            let f = ctx.input(1)?;
            let packed = pack_conv_filter(q8_bytes(&f, "filter")?, fdims, groups, &self.fq)?;
            PackedFilter::Wide(Cow::Owned(packed.to_vec()))
        };
        let bias = bias_values(ctx, fdims[0])?;
        if self.fq.multipliers.len() != 1 && self.fq.multipliers.len() != fdims[0] {
            return Err(RuntimeError::kernel(
                "per-channel scales do not match the filter",
            ));
        }
        // The input's zero point in the unsigned bytes the 8-bit GEMM reads.
        let a_zp = match self.oq.in_qt {
            QType::U8 => self.oq.in_zp,
            QType::I8 => self.oq.in_zp + 128,
        };
        let threads = ctx.threads;
        let (oq, fq) = (&self.oq, &self.fq);
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
                if g.oc != fdims[0] || fdims[3] * groups != g.ic || g.oc % groups != 0 {
                    return Err(RuntimeError::kernel(format!(
                        "filter {fdims:?} and {groups} groups do not fit input channels {} and output channels {}",
                        g.ic, g.oc
                    )));
                }
                let og = g.oc / groups;
                let mut fresh = None;
                let stages = self.stages.get_or_build(&mut fresh, || {
                    (0..groups)
                        .map(|grp| {
                            let columns = grp * og..(grp + 1) * og;
                            let bias = &bias[columns.clone()];
                            match &filter {
                                // The zero-point correction of the 8-bit path is part of
                                // the bias.
                                PackedFilter::Bytes { sums, .. } => {
                                    let corrected =
                                        gemm_u8i8::corrected_bias(Some(bias), &sums[columns], a_zp);
                                    fq.stage(grp * og, og, Some(&corrected), oq.out_zp, oq.range)
                                }
                                PackedFilter::Wide(_) => {
                                    fq.stage(grp * og, og, Some(bias), oq.out_zp, oq.range)
                                }
                            }
                        })
                        .collect()
                })?;
                match &filter {
                    PackedFilter::Bytes { packed, .. } => {
                        conv_nhwc_bytes(&g, groups, x, oq, a_zp, packed, stages, out, threads)
                    }
                    PackedFilter::Wide(packed) => {
                        conv_nhwc(&g, groups, x, oq, packed, stages, out, threads)
                    }
                }
            },
        )
    }
}

/// A convolution's filter as its GEMM reads it.
enum PackedFilter<'a> {
    /// Signed bytes for [`gemm_u8i8`], and each output channel's sum.
    Bytes { packed: &'a [u8], sums: &'a [i32] },
    /// i16 pairs for [`gemm`].
    Wide(Cow<'a, [i16]>),
}

/// [`conv_nhwc`] on the 8-bit dot-product path: im2col tiles of the input's bytes (taps
/// in the padding set to its zero point), or for a 1x1 stride-1 unpadded convolution
/// whose depth is a multiple of 4, the input rows in place; int8 bytes are offset by 128
/// as the GEMM reads them.
#[allow(clippy::too_many_arguments)]
fn conv_nhwc_bytes(
    g: &Geometry,
    groups: usize,
    x: &[u8],
    oq: &OutputQuant,
    a_zp: i32,
    packed: &[u8],
    stages: &[Stage],
    out: &mut [u8],
    threads: usize,
) -> Result<()> {
    let cg = g.ic / groups;
    let og = g.oc / groups;
    let k = g.kh * g.kw * cg;
    let kq = gemm_u8i8::quad_depth(k);
    let per_group =
        gemm_u8i8::packed_len(k, og).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    if packed.len() != per_group * groups || x.len() != g.n * g.ih * g.iw * g.ic {
        return Err(RuntimeError::kernel(
            "packed filter or input has the wrong size",
        ));
    }
    let rows = g.n * g.oh * g.ow;
    if out.len() != rows * g.oc {
        return Err(RuntimeError::kernel("output has the wrong size"));
    }
    let signed = oq.out_qt == QType::I8;
    // Bytes of A per tile: the same L2 budget as the i16 path's.
    let tile = row_tile(2 * A_TILE_BUDGET / kq.max(1), rows, threads, gemm_u8i8::MR);
    let rhs = |grp: usize| gemm_u8i8::PackedRhs {
        data: &packed[grp * per_group..(grp + 1) * per_group],
        k,
        n: og,
    };
    let flip = if oq.in_qt == QType::I8 { 0x80 } else { 0 };
    if groups == 1 && g.is_pointwise() && kq == k {
        return for_row_tiles::<u8, u8>(threads, out, g.oc, tile, 0, |r0, out_rows, _| {
            let t = out_rows.len() / g.oc.max(1);
            let a = &x[r0 * g.ic..(r0 + t) * g.ic];
            let (rhs, stage) = (&rhs(0), &stages[0]);
            gemm_u8i8::gemm(true, a, flip, g.ic, t, rhs, out_rows, g.oc, stage, signed)
        });
    }
    // The zero point as the input stores it (the GEMM flips it with the rest).
    let pad = (a_zp as u8) ^ flip;
    for_row_tiles(
        threads,
        out,
        g.oc,
        tile,
        tile * kq,
        |r0, out_rows, a: &mut [u8]| {
            let t = out_rows.len() / g.oc.max(1);
            let a = &mut a[..t * kq];
            for grp in 0..groups {
                im2col(g, x, grp * cg..(grp + 1) * cg, r0, kq, pad, a, copy_short)?;
                gemm_u8i8::gemm(
                    true,
                    a,
                    flip,
                    kq,
                    t,
                    &rhs(grp),
                    &mut out_rows[grp * og..],
                    g.oc,
                    &stages[grp],
                    signed,
                )?;
            }
            Ok(())
        },
    )
}

/// `dst.copy_from_slice(src)` for the short runs of an im2col row: lengths of 4 to 16
/// bytes as two overlapping moves of 4 or 8 bytes (a call to memcpy per 9-byte run of a
/// 3-channel first layer cost more than the copy), longer ones through memcpy.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = dst.len();
    if src.len() != n {
        dst.copy_from_slice(src);
        return;
    }
    if (8..=16).contains(&n) {
        let head = u64::from_ne_bytes(src[..8].try_into().unwrap_or([0; 8]));
        let tail = u64::from_ne_bytes(src[n - 8..].try_into().unwrap_or([0; 8]));
        dst[..8].copy_from_slice(&head.to_ne_bytes());
        dst[n - 8..].copy_from_slice(&tail.to_ne_bytes());
    } else if (4..8).contains(&n) {
        let head = u32::from_ne_bytes(src[..4].try_into().unwrap_or([0; 4]));
        let tail = u32::from_ne_bytes(src[n - 4..].try_into().unwrap_or([0; 4]));
        dst[..4].copy_from_slice(&head.to_ne_bytes());
        dst[n - 4..].copy_from_slice(&tail.to_ne_bytes());
    } else {
        dst.copy_from_slice(src);
    }
}

#[allow(clippy::too_many_arguments)]
fn conv_nhwc(
    g: &Geometry,
    groups: usize,
    x: &[u8],
    oq: &OutputQuant,
    packed: &[i16],
    stages: &[Stage],
    out: &mut [u8],
    threads: usize,
) -> Result<()> {
    let cg = g.ic / groups;
    let og = g.oc / groups;
    let k = g.kh * g.kw * cg;
    let kp = padded_depth(k);
    let per_group = packed_len(k, og).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    if packed.len() != per_group * groups || x.len() != g.n * g.ih * g.iw * g.ic {
        return Err(RuntimeError::kernel(
            "packed filter or input has the wrong size",
        ));
    }
    let rows = g.n * g.oh * g.ow;
    if out.len() != rows * g.oc {
        return Err(RuntimeError::kernel("output has the wrong size"));
    }
    let tile = row_tile(A_TILE_BUDGET / kp.max(1), rows, threads, MR);
    let signed = oq.out_qt == QType::I8;
    let (qt, zp) = (oq.in_qt, oq.in_zp);
    for_row_tiles(threads, out, g.oc, tile, tile * kp, |r0, out_rows, a| {
        let t = out_rows.len() / g.oc.max(1);
        let a = &mut a[..t * kp];
        for grp in 0..groups {
            // Widened minus the zero point: taps in the padding are 0 (`x_zp - x_zp`); the
            // depth's padding to `kp` is left as it is (B is zero there).
            let channels = grp * cg..(grp + 1) * cg;
            match qt {
                QType::U8 => im2col::<u8, i16>(g, typed(x), channels, r0, kp, 0, a, |d, s| {
                    widen_into(d, s, zp)
                })?,
                QType::I8 => im2col::<i8, i16>(g, typed(x), channels, r0, kp, 0, a, |d, s| {
                    widen_into(d, s, zp)
                })?,
            }
            let rhs = PackedRhs {
                data: &packed[grp * per_group..(grp + 1) * per_group],
                k,
                n: og,
            };
            gemm::gemm(
                a,
                kp,
                t,
                &rhs,
                Dst::Q8 {
                    out: &mut out_rows[grp * og..],
                    ld: g.oc,
                    stage: &stages[grp],
                    signed,
                },
            )?;
        }
        Ok(())
    })
}

/// `dst[i] = src[i] - zp` as i16.
#[inline(always)]
fn widen_into<T: Q8>(dst: &mut [i16], src: &[T], zp: i32) {
    for (d, &v) in dst.iter_mut().zip(src) {
        *d = (v.to_i32() - zp) as i16;
    }
}
