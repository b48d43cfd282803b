//! AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D (NHWC; NCHW by transposing).
//!
//! Conventions (TFLite's): the average and the L2 mean divide by the number of window
//! positions inside the input (padding is excluded); a window entirely in padding gives
//! 0 for those two and `f32::MIN` (the maximum of nothing, as TFLite initializes it) for
//! MAX_POOL_2D, before the fused activation.

use std::ops::Range;

use nnc_formats::nn::OperandType;

use super::util::{for_each_chunk, rank4, with_nhwc};
use super::window::{PoolGeometry, PoolParams, decode_pool};
use super::{Clamp, Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

/// Which pool an operation is, chosen where it is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolKind {
    Average,
    Max,
    L2,
}

struct Pool {
    kind: PoolKind,
    window: PoolParams,
    clamp: Clamp,
}

pub(crate) fn build(info: &OpInfo, kind: PoolKind) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(0)?;
    if t != OperandType::TensorFloat32 {
        return Err(info.unsupported(format!(
            "input type {t} (only TENSOR_FLOAT32 is implemented)"
        )));
    }
    let window = decode_pool(info)?;
    Ok(Box::new(Pool {
        kind,
        window,
        clamp: Clamp::new(window.act),
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
            self.window.nchw,
            x,
            in_shape,
            out,
            out_shape,
            |x, in_shape, out, out_shape| {
                let g = self.window.geometry(in_shape, out_shape)?;
                let (kind, clamp) = (self.kind, self.clamp);
                for_each_chunk(threads, out, g.ow * g.c, |row, out_row| {
                    pool_row(&g, kind, clamp, x, row, out_row);
                });
                Ok(())
            },
        )
    }
}

/// One output row (`row` counts rows over the batch), compiled a second time for AVX2:
/// the channel loops vectorize, and one loop per pool kind keeps the choice out of them.
fn pool_row(
    g: &PoolGeometry,
    kind: PoolKind,
    clamp: Clamp,
    x: &[f32],
    row: usize,
    out_row: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn avx2(
        g: &PoolGeometry,
        kind: PoolKind,
        clamp: Clamp,
        x: &[f32],
        row: usize,
        out_row: &mut [f32],
    ) {
        pool_row_body(g, kind, clamp, x, row, out_row);
    }
    #[cfg(target_arch = "x86_64")]
    if kind == PoolKind::Max
        && super::isa::float_avx512()
        // SAFETY: AVX-512F is available (`float_avx512`, checked at run time just above);
        // the kernel checks the buffers' sizes itself.
        && unsafe { max_row_avx512(g, clamp, x, row, out_row) }
    {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if super::util::has_avx2_fma() {
        // SAFETY: AVX2 and FMA are available (`has_avx2_fma`, checked at run time just
        // above), which is all `avx2` needs: its body is safe code.
        return unsafe { avx2(g, kind, clamp, x, row, out_row) };
    }
    pool_row_body(g, kind, clamp, x, row, out_row);
}

/// One output row of a max pool on AVX-512: for each output pixel, up to 64 channels at a
/// time are held in four registers while the window's pixels are read (each pixel's
/// channels one contiguous run), then clamped and stored. The same maxima as
/// [`pool_row_body`] (`_mm512_max_ps(v, m)` returns `m` when `v` is NaN, as `if v > m`
/// does). ONNX Runtime's pools ran 30-70% faster than the portable loop on SqueezeNet's
/// three. Returns false, computing nothing, when the buffers do not have the geometry's
/// sizes.
///
/// # Safety
/// The CPU supports AVX-512F (`isa::float_avx512`). The sizes are checked here.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn max_row_avx512(
    g: &PoolGeometry,
    clamp: Clamp,
    x: &[f32],
    row: usize,
    out_row: &mut [f32],
) -> bool {
    use std::arch::x86_64::*;
    let (ih, iw, c) = (g.ih, g.iw, g.c);
    let b = row / g.oh.max(1);
    let oy = row % g.oh.max(1);
    if out_row.len() != g.ow * c || x.len() < (b + 1) * ih * iw * c {
        return false;
    }
    let Range { start: ys, end: ye } = g.rows(oy);
    let (lo, hi) = (_mm512_set1_ps(clamp.lo), _mm512_set1_ps(clamp.hi));
    let (xp, op) = (x.as_ptr(), out_row.as_mut_ptr());
    for ox in 0..g.ow {
        let Range { start: xs, end: xe } = g.cols(ox);
        let mut c0 = 0;
        while c0 < c {
            let width = (c - c0).min(64);
            let masks: [__mmask16; 4] = std::array::from_fn(|v| {
                let lanes = width.saturating_sub(16 * v).min(16);
                (((1u32 << lanes) - 1) & 0xffff) as u16
            });
            let mut m = [_mm512_set1_ps(f32::MIN); 4];
            for iy in ys..ye {
                for ix in xs..xe {
                    let at = ((b * ih + iy) * iw + ix) * c + c0;
                    for (v, m) in m.iter_mut().enumerate() {
                        if masks[v] != 0 {
                            // SAFETY: iy < ih, ix < iw, b < n (the length check above):
                            // the pixel's channels c0 + 16v + lane < c are inside x.
                            let xv =
                                unsafe { _mm512_maskz_loadu_ps(masks[v], xp.add(at + 16 * v)) };
                            *m = _mm512_max_ps(xv, *m);
                        }
                    }
                }
            }
            for (v, m) in m.iter().enumerate() {
                if masks[v] != 0 {
                    let clamped = _mm512_min_ps(hi, _mm512_max_ps(lo, *m));
                    // SAFETY: ox < ow, channels c0 + 16v + lane < c: inside the row.
                    unsafe {
                        _mm512_mask_storeu_ps(op.add(ox * c + c0 + 16 * v), masks[v], clamped)
                    };
                }
            }
            c0 += width;
        }
    }
    true
}

#[inline(always)]
fn pool_row_body(
    g: &PoolGeometry,
    kind: PoolKind,
    clamp: Clamp,
    x: &[f32],
    row: usize,
    out_row: &mut [f32],
) {
    let (ih, iw, c) = (g.ih, g.iw, g.c);
    let b = row / g.oh;
    let oy = row % g.oh;
    let Range { start: ys, end: ye } = g.rows(oy);
    for (ox, acc) in out_row.chunks_exact_mut(c).enumerate() {
        let Range { start: xs, end: xe } = g.cols(ox);
        let count = (ye - ys) * (xe - xs);
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

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The AVX-512 max-pool row gives the portable loop's bits: windows inside and across
    /// the padding, strides 1 to 3, channel counts around the 16- and 64-lane blocks,
    /// NaN inputs, clamps, two images.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_avx512_max_row_matches_the_portable_one() {
        if !crate::kernels::isa::float_avx512() {
            return;
        }
        let mut rng = crate::kernels::util::test_rng::Rng(0x5eed_0f90_0100);
        let cases = [
            // (ih, iw, c, filter, stride, pad (top, left))
            (9, 11, 64, (3, 3), (2, 2), (0, 0)),
            (8, 7, 17, (3, 3), (1, 1), (1, 1)),
            (10, 10, 130, (2, 3), (2, 1), (1, 0)),
            (5, 6, 1, (3, 2), (3, 3), (2, 1)),
            (7, 7, 80, (7, 7), (1, 1), (3, 3)),
        ];
        for (case, &(ih, iw, c, (fh, fw), (sh, sw), (pt, pl))) in cases.iter().enumerate() {
            let oh = (ih + 2 * pt - fh) / sh + 1;
            let ow = (iw + 2 * pl - fw) / sw + 1;
            let g = PoolGeometry {
                ih,
                iw,
                c,
                oh,
                ow,
                filter: (fh, fw),
                stride: (sh, sw),
                pad: (pt, pl),
            };
            let mut x = rng.f32s(2 * ih * iw * c);
            for v in x.iter_mut().step_by(7) {
                *v = f32::NAN;
            }
            for clamp in [Clamp::none(), Clamp { lo: -0.25, hi: 0.5 }] {
                for row in 0..2 * oh {
                    let mut want = vec![0.0f32; ow * c];
                    let mut got = vec![1.0f32; ow * c];
                    pool_row_body(&g, PoolKind::Max, clamp, &x, row, &mut want);
                    // SAFETY: the feature was checked above.
                    assert!(unsafe { max_row_avx512(&g, clamp, &x, row, &mut got) });
                    let same = want
                        .iter()
                        .zip(&got)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "case {case}, row {row}");
                }
            }
        }
    }
}
