//! Quantized RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR (NHWC; NCHW by transposing).
//!
//! - Bilinear on int8 follows TFLite's `reference_ops::ResizeBilinearInteger`: scales in
//!   Q10 (`((in << 10) + out / 2) / out`, or `(in - 1, out - 1)` with align_corners),
//!   source coordinates in Q10 (half-pixel: `x * scale + scale / 2 - 512`), the four
//!   weights in Q10 each, the Q20 sum rounded half away from zero.
//! - Bilinear on uint8 follows `reference_ops::ResizeBilinear<uint8_t>`: float
//!   coordinates and weights, the weighted sum plus 0.5 truncated.
//! - Nearest neighbor (`reference_ops::ResizeNearestNeighbor`): `floor((x + offset) *
//!   scale)` (rounded with align_corners), clamped; values are copied.
//!
//! Both keep the input's quantization (TFLite requires the output to share it); a
//! different output quantization is reached by requantizing each result.

use nnc_formats::nn::ops::Resize2d;
use nnc_formats::nn::{OperandType, OperationType};

use super::arith::{Multiplier, QType, Qp};
use super::{activation_type, check_scale, output_type, q8_bytes, q8_bytes_mut, qp};
use crate::error::{Result, RuntimeError};
use crate::kernels::util::{rank4, with_nhwc};
use crate::kernels::{Kernel, KernelContext, OpInfo};

struct Resize {
    bilinear: bool,
    nchw: bool,
    align_corners: bool,
    half_pixel: bool,
    qt: QType,
    input: Qp,
    output: Qp,
    rescale: Option<Multiplier>,
}

pub(crate) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let qt = activation_type(info, 0)?;
    if output_type(info, 0)? != qt {
        return Err(info.unsupported("input and output of different 8-bit types"));
    }
    // FLOAT16 scales are not implemented (the decoded size does not keep their type).
    for i in [1, 2] {
        let st = info.input_type(i)?;
        if !matches!(st, OperandType::Int32 | OperandType::Float32) {
            return Err(info.unsupported(format!("size or scale input of type {st}")));
        }
    }
    let (input, output) = (qp(info.operand(0)?), qp(info.output_operand(0)?));
    check_scale(info, "input", input.scale)?;
    check_scale(info, "output", output.scale)?;
    let rescale = if input == output {
        None
    } else {
        Some(
            Multiplier::from_f64_ratio(input.scale, output.scale)
                .map_err(|e| info.invalid(e.to_string()))?,
        )
    };
    let params =
        Resize2d::decode(info.op_type(), info.views()).map_err(|e| info.signature_error(e))?;
    Ok(Box::new(Resize {
        bilinear: info.op_type() == OperationType::ResizeBilinear,
        nchw: params.nchw,
        align_corners: params.align_corners,
        half_pixel: params.half_pixel_centers,
        qt,
        input,
        output,
        rescale,
    }))
}

/// TFLite's float resize scale.
fn scale_f32(input: usize, output: usize, align_corners: bool) -> f32 {
    if align_corners && output > 1 {
        (input as f32 - 1.0) / (output as f32 - 1.0)
    } else {
        input as f32 / output as f32
    }
}

/// TFLite's `GetNearestNeighbor`.
fn nearest(
    dst: usize,
    input: usize,
    output: usize,
    align_corners: bool,
    half_pixel: bool,
) -> usize {
    let scale = scale_f32(input, output, align_corners);
    let offset = if half_pixel { 0.5 } else { 0.0 };
    let v = (dst as f32 + offset) * scale;
    let v = if align_corners { v.round() } else { v.floor() };
    // `as` saturates (negative values to 0); then clamp into the input.
    (v as i64).clamp(0, input as i64 - 1) as usize
}

/// Q10 source coordinate and the two neighbours (`ComputeInterpolationValuesInteger`).
fn interpolation_q10(
    dst: usize,
    scale_10: i64,
    half_pixel: bool,
    input: usize,
) -> (i64, usize, usize) {
    let v = dst as i64;
    let scaled = if half_pixel {
        v * scale_10 + scale_10 / 2 - (1 << 9)
    } else {
        v * scale_10
    };
    // C++ division truncates toward zero.
    let lower = (scaled / (1 << 10)).max(0);
    let upper = ((scaled + (1 << 10) - 1) / (1 << 10)).min(input as i64 - 1);
    (scaled, lower.max(0) as usize, upper.max(0) as usize)
}

fn scale_q10(input: usize, output: usize, align_corners: bool) -> i64 {
    let (i, o) = if align_corners && output > 1 {
        (input - 1, output - 1)
    } else {
        (input, output)
    };
    (((1i64 << 10) * i as i64) + o as i64 / 2) / (o as i64).max(1)
}

/// Float source coordinate and the two neighbours (`ComputeInterpolationValues`).
fn interpolation_f32(
    dst: usize,
    scale: f32,
    half_pixel: bool,
    input: usize,
) -> (f32, usize, usize) {
    let scaled = if half_pixel {
        (dst as f32 + 0.5) * scale - 0.5
    } else {
        dst as f32 * scale
    };
    let lower = (scaled.floor() as i64).max(0);
    let upper = (scaled.ceil() as i64).min(input as i64 - 1);
    (scaled, lower.max(0) as usize, upper.max(0) as usize)
}

impl Kernel for Resize {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let in4 = rank4(input.shape, "input")?;
        let out_t = ctx.output(0)?;
        let out4 = rank4(out_t.shape, "output")?;
        let out = q8_bytes_mut(out_t, "output")?;
        with_nhwc(
            self.nchw,
            x,
            in4,
            out,
            out4,
            |x, [n, ih, iw, c], out, [on, oh, ow, oc]| {
                if on != n
                    || oc != c
                    || ih == 0
                    || iw == 0
                    || x.len() != n * ih * iw * c
                    || out.len() != n * oh * ow * c
                {
                    return Err(RuntimeError::kernel(format!(
                        "output {:?} does not resize input {:?}",
                        [on, oh, ow, oc],
                        [n, ih, iw, c]
                    )));
                }
                let qt = self.qt;
                let px = |b: usize, y: usize, xx: usize| &x[((b * ih + y) * iw + xx) * c..][..c];
                let finish = |v: i32| -> u8 {
                    match self.rescale {
                        Some(m) => {
                            qt.store(m.apply(v - self.input.zp).wrapping_add(self.output.zp))
                        }
                        None => qt.store(v),
                    }
                };
                let (hs10, ws10) = (
                    scale_q10(ih, oh, self.align_corners),
                    scale_q10(iw, ow, self.align_corners),
                );
                let (hs, ws) = (
                    scale_f32(ih, oh, self.align_corners),
                    scale_f32(iw, ow, self.align_corners),
                );
                for b in 0..n {
                    for y in 0..oh {
                        for xo in 0..ow {
                            let dst = &mut out[((b * oh + y) * ow + xo) * c..][..c];
                            if !self.bilinear {
                                let sy = nearest(y, ih, oh, self.align_corners, self.half_pixel);
                                let sx = nearest(xo, iw, ow, self.align_corners, self.half_pixel);
                                for (d, &s) in dst.iter_mut().zip(px(b, sy, sx)) {
                                    *d = finish(qt.load(s));
                                }
                            } else if qt == QType::I8 {
                                let (sy, y0, y1) = interpolation_q10(y, hs10, self.half_pixel, ih);
                                let (sx, x0, x1) = interpolation_q10(xo, ws10, self.half_pixel, iw);
                                let dy = sy - (1 << 10) * y0 as i64;
                                let dx = sx - (1 << 10) * x0 as i64;
                                let (p00, p10, p01, p11) =
                                    (px(b, y0, x0), px(b, y1, x0), px(b, y0, x1), px(b, y1, x1));
                                for k in 0..c {
                                    let v = |p: &[u8]| i64::from(qt.load(p[k]));
                                    let sum = v(p00) * ((1 << 10) - dy) * ((1 << 10) - dx)
                                        + v(p10) * dy * ((1 << 10) - dx)
                                        + v(p01) * ((1 << 10) - dy) * dx
                                        + v(p11) * dy * dx;
                                    let round = if sum > 0 { 1 << 19 } else { -(1 << 19) };
                                    // Truncating division, as in C++; the cast keeps the low byte
                                    // like the reference's static_cast<int8_t>.
                                    dst[k] = finish(i32::from(((sum + round) / (1 << 20)) as i8));
                                }
                            } else {
                                let (sy, y0, y1) = interpolation_f32(y, hs, self.half_pixel, ih);
                                let (sx, x0, x1) = interpolation_f32(xo, ws, self.half_pixel, iw);
                                let (dy, dx) = (sy - y0 as f32, sx - x0 as f32);
                                let (p00, p10, p01, p11) =
                                    (px(b, y0, x0), px(b, y1, x0), px(b, y0, x1), px(b, y1, x1));
                                for k in 0..c {
                                    let v = |p: &[u8]| f32::from(p[k]);
                                    let sum = v(p00) * (1.0 - dy) * (1.0 - dx)
                                        + v(p10) * dy * (1.0 - dx)
                                        + v(p01) * (1.0 - dy) * dx
                                        + v(p11) * dy * dx
                                        + 0.5;
                                    // static_cast<uint8_t>: truncation (the sum lies in [0, 255.5]).
                                    dst[k] = finish(sum as u8 as i32);
                                }
                            }
                        }
                    }
                }
                Ok(())
            },
        )
    }
}
