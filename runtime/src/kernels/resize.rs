//! RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR (NHWC; NCHW by transposing).
//!
//! The coordinate mapping is TFLite's reference kernels', in f32 arithmetic:
//! - scale = (in - 1) / (out - 1) with align_corners (and out > 1), else in / out;
//! - bilinear: `src = (dst + 0.5) * scale - 0.5` with half_pixel_centers, else
//!   `dst * scale`; lower = max(floor(src), 0), upper = min(ceil(src), in - 1), weights
//!   from `src - lower`;
//! - nearest: `round(dst * scale)` with align_corners, `floor((dst + 0.5) * scale)` with
//!   half_pixel_centers, else `floor(dst * scale)`; clamped to [0, in - 1]. (TFLite's
//!   current reference kernel floors in the half-pixel case; older versions rounded.)
//!
//! The output size comes from the output shape, which shape inference derives from the
//! size or scale inputs.

use nnc_formats::nn::ops::Resize2d;
use nnc_formats::nn::{OperandType, OperationType};

use super::util::{rank4, with_nhwc};
use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

struct Resize {
    bilinear: bool,
    nchw: bool,
    align_corners: bool,
    half_pixel: bool,
}

pub(crate) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(0)?;
    if t != OperandType::TensorFloat32 {
        return Err(info.unsupported(format!(
            "operand type {t} (only TENSOR_FLOAT32 is implemented)"
        )));
    }
    // FLOAT16 scales are not implemented (the decoded size does not keep their type).
    for i in [1, 2] {
        let st = info.input_type(i)?;
        if !matches!(st, OperandType::Int32 | OperandType::Float32) {
            return Err(info.unsupported(format!("size or scale input of type {st}")));
        }
    }
    let params =
        Resize2d::decode(info.op_type(), info.views()).map_err(|e| info.signature_error(e))?;
    Ok(Box::new(Resize {
        bilinear: info.op_type() == OperationType::ResizeBilinear,
        nchw: params.nchw,
        align_corners: params.align_corners,
        half_pixel: params.half_pixel_centers,
    }))
}

fn scale(input: usize, output: usize, align_corners: bool) -> f32 {
    if align_corners && output > 1 {
        (input as f32 - 1.0) / (output as f32 - 1.0)
    } else {
        input as f32 / output as f32
    }
}

/// (source coordinate, lower index, upper index) for bilinear interpolation.
fn interpolation(dst: usize, scale: f32, half_pixel: bool, input: usize) -> (f32, usize, usize) {
    let src = if half_pixel {
        (dst as f32 + 0.5) * scale - 0.5
    } else {
        dst as f32 * scale
    };
    let last = input.saturating_sub(1) as f32;
    let lower = src.floor().max(0.0).min(last) as usize;
    let upper = src.ceil().max(0.0).min(last) as usize;
    (src, lower, upper)
}

fn nearest(dst: usize, scale: f32, align_corners: bool, half_pixel: bool, input: usize) -> usize {
    let offset = if half_pixel { 0.5 } else { 0.0 };
    let v = (dst as f32 + offset) * scale;
    let v = if align_corners { v.round() } else { v.floor() };
    // `as` saturates; the clamp keeps the index inside the input either way.
    v.max(0.0).min(input.saturating_sub(1) as f32) as usize
}

impl Kernel for Resize {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = input.f32()?;
        let in4 = rank4(input.shape, "input")?;
        let (out_shape, out) = ctx.output(0)?.f32_parts()?;
        let out4 = rank4(out_shape, "output")?;
        with_nhwc(
            self.nchw,
            x,
            in4,
            out,
            out4,
            |x, [n, ih, iw, c], out, [on, oh, ow, oc]| {
                if on != n || oc != c || x.len() != n * ih * iw * c || out.len() != n * oh * ow * c
                {
                    return Err(RuntimeError::kernel(format!(
                        "output {:?} does not resize input {:?}",
                        [on, oh, ow, oc],
                        [n, ih, iw, c]
                    )));
                }
                let hs = scale(ih, oh, self.align_corners);
                let ws = scale(iw, ow, self.align_corners);
                let px = |b: usize, y: usize, xx: usize| &x[((b * ih + y) * iw + xx) * c..][..c];
                for b in 0..n {
                    for y in 0..oh {
                        for xo in 0..ow {
                            let dst = &mut out[((b * oh + y) * ow + xo) * c..][..c];
                            if self.bilinear {
                                let (sy, y0, y1) = interpolation(y, hs, self.half_pixel, ih);
                                let (sx, x0, x1) = interpolation(xo, ws, self.half_pixel, iw);
                                let dy = sy - y0 as f32;
                                let dx = sx - x0 as f32;
                                let (p00, p10, p01, p11) =
                                    (px(b, y0, x0), px(b, y1, x0), px(b, y0, x1), px(b, y1, x1));
                                for k in 0..c {
                                    dst[k] = p00[k] * (1.0 - dy) * (1.0 - dx)
                                        + p10[k] * dy * (1.0 - dx)
                                        + p01[k] * (1.0 - dy) * dx
                                        + p11[k] * dy * dx;
                                }
                            } else {
                                let sy = nearest(y, hs, self.align_corners, self.half_pixel, ih);
                                let sx = nearest(xo, ws, self.align_corners, self.half_pixel, iw);
                                dst.copy_from_slice(px(b, sy, sx));
                            }
                        }
                    }
                }
                Ok(())
            },
        )
    }
}
