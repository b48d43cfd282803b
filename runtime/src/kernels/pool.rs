//! AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D (NHWC; NCHW by transposing).
//!
//! Conventions (TFLite's): the average and the L2 mean divide by the number of window
//! positions inside the input (padding is excluded); a window entirely in padding gives
//! 0 for those two and `f32::MIN` (the maximum of nothing, as TFLite initializes it) for
//! MAX_POOL_2D, before the fused activation.

use nnc_formats::nn::{OperandType, OperationType};

use super::util::{for_each_chunk, rank4, with_nhwc};
use super::window::{Padding, decode_pool, window_extent};
use super::{Clamp, Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PoolKind {
    Average,
    Max,
    L2,
}

struct Pool {
    kind: PoolKind,
    padding: Padding,
    /// (height, width)
    stride: (usize, usize),
    filter: (usize, usize),
    clamp: Clamp,
    nchw: bool,
}

pub(crate) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(0)?;
    if t != OperandType::TensorFloat32 {
        return Err(info.unsupported(format!(
            "input type {t} (only TENSOR_FLOAT32 is implemented)"
        )));
    }
    let kind = match info.op_type() {
        OperationType::AveragePool2d => PoolKind::Average,
        OperationType::MaxPool2d => PoolKind::Max,
        _ => PoolKind::L2,
    };
    let w = decode_pool(info)?;
    Ok(Box::new(Pool {
        kind,
        padding: w.padding,
        stride: w.stride,
        filter: w.filter,
        clamp: Clamp::new(w.act),
        nchw: w.nchw,
    }))
}

impl Kernel for Pool {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = input.f32()?;
        let in_shape = rank4(input.shape, "input")?;
        let threads = ctx.threads;
        let (out_shape, out) = ctx.output(0)?.f32_parts()?;
        let out_shape = rank4(out_shape, "output")?;
        if x.len() != in_shape.iter().product::<usize>()
            || out.len() != out_shape.iter().product::<usize>()
        {
            return Err(RuntimeError::kernel(
                "tensor sizes do not match their shapes",
            ));
        }
        with_nhwc(
            self.nchw,
            x,
            in_shape,
            out,
            out_shape,
            |x, [n, ih, iw, c], out, [on, oh, ow, oc]| {
                let (fh, fw) = self.filter;
                let (sh, sw) = self.stride;
                let pad_h = self.padding.resolve(true, ih, fh, sh, 1)?;
                let pad_w = self.padding.resolve(false, iw, fw, sw, 1)?;
                let eh = window_extent(ih, fh, sh, 1, pad_h)?;
                let ew = window_extent(iw, fw, sw, 1, pad_w)?;
                if [on, oh, ow, oc] != [n, eh, ew, c] {
                    return Err(RuntimeError::kernel(format!(
                        "output shape {:?} (NHWC) does not match the computed {:?}",
                        [on, oh, ow, oc],
                        [n, eh, ew, c]
                    )));
                }
                let (pt, pl) = (pad_h.0, pad_w.0);
                let kind = self.kind;
                let clamp = self.clamp;
                let geometry = RowGeometry {
                    input: [ih, iw, c],
                    output: [oh, ow],
                    filter: (fh, fw),
                    stride: (sh, sw),
                    pad: (pt, pl),
                };
                for_each_chunk(threads, out, ow * c, |row, out_row| {
                    pool_row(&geometry, kind, clamp, x, row, out_row);
                });
                Ok(())
            },
        )
    }
}

/// Sizes one output row of a pool needs.
struct RowGeometry {
    /// Input height, width, channels (NHWC).
    input: [usize; 3],
    /// Output height and width.
    output: [usize; 2],
    filter: (usize, usize),
    stride: (usize, usize),
    /// Top and left padding.
    pad: (usize, usize),
}

/// One output row (`row` counts rows over the batch), compiled a second time for AVX2:
/// the channel loops vectorize, and one loop per pool kind keeps the choice out of them.
fn pool_row(
    g: &RowGeometry,
    kind: PoolKind,
    clamp: Clamp,
    x: &[f32],
    row: usize,
    out_row: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn avx2(
        g: &RowGeometry,
        kind: PoolKind,
        clamp: Clamp,
        x: &[f32],
        row: usize,
        out_row: &mut [f32],
    ) {
        pool_row_body(g, kind, clamp, x, row, out_row);
    }
    #[cfg(target_arch = "x86_64")]
    if super::util::has_avx2_fma() {
        // SAFETY: AVX2 and FMA are available (checked at run time).
        return unsafe { avx2(g, kind, clamp, x, row, out_row) };
    }
    pool_row_body(g, kind, clamp, x, row, out_row);
}

#[inline(always)]
fn pool_row_body(
    g: &RowGeometry,
    kind: PoolKind,
    clamp: Clamp,
    x: &[f32],
    row: usize,
    out_row: &mut [f32],
) {
    let [ih, iw, c] = g.input;
    let [oh, _] = g.output;
    let ((fh, fw), (sh, sw), (pt, pl)) = (g.filter, g.stride, g.pad);
    let b = row / oh;
    let oy = row % oh;
    // Window rows inside the input: [y0, y1).
    let ys = (oy * sh).saturating_sub(pt);
    let ye = (oy * sh + fh).saturating_sub(pt).min(ih);
    for (ox, acc) in out_row.chunks_exact_mut(c).enumerate() {
        let xs = (ox * sw).saturating_sub(pl);
        let xe = (ox * sw + fw).saturating_sub(pl).min(iw);
        let count = ye.saturating_sub(ys) * xe.saturating_sub(xs);
        match kind {
            PoolKind::Max => {
                // Channels in blocks held in registers over the whole window (the output
                // row as the running maximum cost a load and a store per tap).
                let at = |iy: usize, ix: usize| ((b * ih + iy) * iw + ix) * c;
                let window = (ys..ye).flat_map(|iy| (xs..xe).map(move |ix| at(iy, ix)));
                let mut c0 = 0;
                while c0 + 32 <= c {
                    max_block::<32>(x, window.clone(), c0, clamp, &mut acc[c0..c0 + 32]);
                    c0 += 32;
                }
                while c0 + 8 <= c {
                    max_block::<8>(x, window.clone(), c0, clamp, &mut acc[c0..c0 + 8]);
                    c0 += 8;
                }
                while c0 < c {
                    max_block::<1>(x, window.clone(), c0, clamp, &mut acc[c0..c0 + 1]);
                    c0 += 1;
                }
            }
            PoolKind::Average | PoolKind::L2 => {
                acc.fill(0.0);
                for iy in ys..ye {
                    for ix in xs..xe {
                        let px = &x[((b * ih + iy) * iw + ix) * c..][..c];
                        if kind == PoolKind::L2 {
                            acc.iter_mut().zip(px).for_each(|(a, v)| *a += *v * *v);
                        } else {
                            acc.iter_mut().zip(px).for_each(|(a, v)| *a += *v);
                        }
                    }
                }
                let d = count as f32;
                acc.iter_mut().for_each(|a| {
                    *a = clamp.apply(match kind {
                        _ if count == 0 => *a,
                        PoolKind::L2 => (*a / d).sqrt(),
                        _ => *a / d,
                    })
                });
            }
        }
    }
}

/// The clamped maximum of W channels from `c0` over the window's pixels (their offsets in
/// `x`), a window of none giving `f32::MIN`. `if v > m { v } else { m }` is one vector
/// max whose NaN rule (the second operand when either is NaN) ignores a NaN input, as the
/// reference kernels' `if v > m { m = v }` does; the running maximum is never NaN.
#[inline(always)]
fn max_block<const W: usize>(
    x: &[f32],
    window: impl Iterator<Item = usize>,
    c0: usize,
    clamp: Clamp,
    out: &mut [f32],
) {
    let mut m = [f32::MIN; W];
    for p in window {
        let px = &x[p + c0..][..W];
        for (m, &v) in m.iter_mut().zip(px) {
            *m = if v > *m { v } else { *m };
        }
    }
    for (o, m) in out.iter_mut().zip(m) {
        *o = clamp.apply(m);
    }
}
