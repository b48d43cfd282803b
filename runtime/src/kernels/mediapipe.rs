//! The extension operations that MediaPipe's TFLite custom operators lower to
//! (`docs/EXTENSIONS.md`): MAX_POOL_WITH_ARGMAX, MAX_UNPOOLING,
//! LANDMARKS_TO_TRANSFORM_MATRIX, TRANSFORM_LANDMARKS and TRANSFORM_TENSOR_BILINEAR.
//!
//! Each follows the arithmetic MediaPipe's CPU kernels define, including where they
//! compute in single and where in double precision, so results agree to the last bit
//! or two; the geometry is re-derived from the run-time shapes and checked, and every
//! index read from a tensor is bounds-checked.

use super::{Clamp, Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

/// MAX_POOL_WITH_ARGMAX.
pub(crate) fn build_max_pool_with_argmax(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(MaxPoolArgmax {
        pad_left: info.usize(1, "pad_left")?,
        pad_top: info.usize(3, "pad_top")?,
        stride: (info.usize(5, "stride_w")?, info.usize(6, "stride_h")?),
        filter: (info.usize(7, "filter_w")?, info.usize(8, "filter_h")?),
        clamp: Clamp::new(info.activation(9)?),
    }))
}

/// MAX_UNPOOLING.
pub(crate) fn build_max_unpooling(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(MaxUnpool {
        pad_left: info.usize(2, "pad_left")?,
        pad_top: info.usize(3, "pad_top")?,
        stride: (info.usize(4, "stride_w")?, info.usize(5, "stride_h")?),
        filter: (info.usize(6, "filter_w")?, info.usize(7, "filter_h")?),
    }))
}

/// LANDMARKS_TO_TRANSFORM_MATRIX.
pub(crate) fn build_landmarks_to_transform_matrix(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(LandmarksToMatrix {
        left: info.usize(2, "left_index")?,
        right: info.usize(3, "right_index")?,
        target_rotation: info.f32(4, "target_rotation")?,
        output_size: (
            info.usize(5, "output_width")?,
            info.usize(6, "output_height")?,
        ),
        scale: (info.f32(7, "scale_x")?, info.f32(8, "scale_y")?),
    }))
}

/// TRANSFORM_LANDMARKS (no static parameters).
pub(crate) fn build_transform_landmarks() -> Result<Box<dyn Kernel>> {
    Ok(Box::new(TransformLandmarks))
}

/// TRANSFORM_TENSOR_BILINEAR (no static parameters).
pub(crate) fn build_transform_tensor_bilinear() -> Result<Box<dyn Kernel>> {
    Ok(Box::new(TransformBilinear))
}

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(RuntimeError::kernel(message))
}

/// A rank-4 shape as (batch, height, width, channels).
fn nhwc(shape: &[usize], what: &str) -> Result<(usize, usize, usize, usize)> {
    match shape {
        &[n, h, w, c] => Ok((n, h, w, c)),
        _ => err(format!("{what} must be 4-D, got {shape:?}")),
    }
}

/// The 16 values of a [1, 4, 4] transformation matrix input.
fn matrix<'a>(ctx: &KernelContext<'a>, i: usize) -> Result<&'a [f32]> {
    let m = ctx.input(i)?.f32()?;
    if m.len() != 16 {
        return err(format!("the matrix must hold 16 values, got {}", m.len()));
    }
    Ok(m)
}

struct MaxPoolArgmax {
    pad_left: usize,
    pad_top: usize,
    stride: (usize, usize),
    filter: (usize, usize),
    clamp: Clamp,
}

impl Kernel for MaxPoolArgmax {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let (n, h, w, c) = nhwc(input.shape, "input")?;
        let x = input.f32()?;
        let [values, indices] = ctx.outputs.as_mut_slice() else {
            return err("MAX_POOL_WITH_ARGMAX writes two outputs");
        };
        let (on, oh, ow, oc) = nhwc(values.shape, "output")?;
        if (on, oc) != (n, c) || indices.shape != values.shape {
            return err("output shapes do not match the input");
        }
        let values = values.f32_mut()?;
        let indices = indices.f32_mut()?;
        let (sw, sh) = self.stride;
        let (fw, fh) = self.filter;
        for b in 0..n {
            for oy in 0..oh {
                // Window origin (may lie in the padding) and the filter rows inside
                // the input.
                let y0 = (oy * sh) as i64 - self.pad_top as i64;
                let fy_start = (-y0).max(0) as usize;
                let fy_end = (h as i64 - y0).clamp(0, fh as i64) as usize;
                for ox in 0..ow {
                    let x0 = (ox * sw) as i64 - self.pad_left as i64;
                    let fx_start = (-x0).max(0) as usize;
                    let fx_end = (w as i64 - x0).clamp(0, fw as i64) as usize;
                    let out_base = ((b * oh + oy) * ow + ox) * c;
                    for ch in 0..c {
                        let mut best = f32::MIN;
                        let (mut best_x, mut best_y) = (0usize, 0usize);
                        for fy in fy_start..fy_end {
                            let iy = (y0 + fy as i64) as usize;
                            for fx in fx_start..fx_end {
                                let ix = (x0 + fx as i64) as usize;
                                let v = x[((b * h + iy) * w + ix) * c + ch];
                                if v > best {
                                    best = v;
                                    best_x = fx;
                                    best_y = fy;
                                }
                            }
                        }
                        values[out_base + ch] = self.clamp.apply(best);
                        indices[out_base + ch] = (best_y * fw + best_x) as f32 + 0.1;
                    }
                }
            }
        }
        Ok(())
    }
}

struct MaxUnpool {
    pad_left: usize,
    pad_top: usize,
    stride: (usize, usize),
    filter: (usize, usize),
}

impl Kernel for MaxUnpool {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let index_tensor = ctx.input(1)?;
        let (n, h, w, c) = nhwc(input.shape, "input")?;
        if index_tensor.shape != input.shape {
            return err("indices and input shapes differ");
        }
        let x = input.f32()?;
        let indices = index_tensor.f32()?;
        let out = ctx.output(0)?;
        let (on, oh, ow, oc) = nhwc(out.shape, "output")?;
        if (on, oc) != (n, c) {
            return err("the output shape does not match the input");
        }
        let y = out.f32_mut()?;
        y.fill(0.0);
        let (sw, sh) = (self.stride.0 as i64, self.stride.1 as i64);
        let fw = self.filter.0 as i64;
        for b in 0..n {
            for iy in 0..h {
                for ix in 0..w {
                    let at = ((b * h + iy) * w + ix) * c;
                    for ch in 0..c {
                        let v = indices[at + ch];
                        // A float index converts to an integer by truncation; one that
                        // does not fit 32 bits (or is NaN) names no location.
                        if v.is_nan() || v.abs() >= 2_147_483_648.0 {
                            continue;
                        }
                        let idx = v.trunc() as i64;
                        // Truncating division and remainder, as in C.
                        let (wy, wx) = (idx / fw, idx % fw);
                        let oy_ = iy as i64 * sh - self.pad_top as i64 + wy;
                        let ox_ = ix as i64 * sw - self.pad_left as i64 + wx;
                        if (0..oh as i64).contains(&oy_) && (0..ow as i64).contains(&ox_) {
                            let o = ((b * oh + oy_ as usize) * ow + ox_ as usize) * c + ch;
                            y[o] = x[at + ch];
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

struct LandmarksToMatrix {
    left: usize,
    right: usize,
    target_rotation: f32,
    /// (width, height)
    output_size: (usize, usize),
    /// (x, y)
    scale: (f32, f32),
}

type Mat4 = [[f64; 4]; 4];

fn mat_mul(a: &Mat4, b: &Mat4) -> Mat4 {
    let mut r = [[0.0; 4]; 4];
    for (i, row) in r.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = (0..4).map(|k| a[i][k] * b[k][j]).sum();
        }
    }
    r
}

impl Kernel for LandmarksToMatrix {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let subset = ctx.input(1)?.i32()?;
        let landmarks = input.f32()?;
        let count = match input.shape {
            &[1, n, 3] => n,
            s => return err(format!("landmarks must be [1, n, 3], got {s:?}")),
        };
        let point = |i: usize| -> Result<(f64, f64)> {
            if i >= count {
                return err(format!(
                    "landmark index {i} is out of range for {count} landmarks"
                ));
            }
            Ok((f64::from(landmarks[i * 3]), f64::from(landmarks[i * 3 + 1])))
        };
        let (lx, ly) = point(self.left)?;
        let (rx, ry) = point(self.right)?;
        let rotation = f64::from(self.target_rotation) - (ry - ly).atan2(rx - lx);
        let (sin, cos) = rotation.sin_cos();
        // The subset's bounding box in the rotated frame.
        let mut min = (f64::INFINITY, f64::INFINITY);
        let mut max = (f64::NEG_INFINITY, f64::NEG_INFINITY);
        if subset.is_empty() {
            return err("the landmark subset is empty");
        }
        for (k, &i) in subset.iter().enumerate() {
            let i = usize::try_from(i)
                .map_err(|_| RuntimeError::kernel(format!("subset index {i} is negative")))?;
            let (x, y) = point(i)?;
            let (u, v) = (cos * x - sin * y, sin * x + cos * y);
            if k == 0 {
                (min, max) = ((u, v), (u, v));
                continue;
            }
            // Comparisons as MediaPipe writes them (a NaN coordinate never replaces).
            if max.0 < u {
                max.0 = u;
            }
            if max.1 < v {
                max.1 = v;
            }
            if min.0 > u {
                min.0 = u;
            }
            if min.1 > v {
                min.1 = v;
            }
        }
        let (crop_w, crop_h) = (max.0 - min.0, max.1 - min.1);
        let (mu, mv) = ((min.0 + max.0) / 2.0, (min.1 + max.1) / 2.0);
        // The box centre rotated back to the landmarks' frame.
        let (cx, cy) = (cos * mu + sin * mv, -sin * mu + cos * mv);
        let (ow, oh) = (self.output_size.0 as f64, self.output_size.1 as f64);
        let sx = f64::from(self.scale.0) * crop_w / ow;
        let sy = f64::from(self.scale.1) * crop_h / oh;
        let shift = |x: f64, y: f64| -> Mat4 {
            [
                [1.0, 0.0, 0.0, x],
                [0.0, 1.0, 0.0, y],
                [0.0, 0.0, 1.0, 0.0],
                [0.0, 0.0, 0.0, 1.0],
            ]
        };
        // Rotation by -rotation.
        let rotate: Mat4 = [
            [cos, sin, 0.0, 0.0],
            [-sin, cos, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        let scale: Mat4 = [
            [sx, 0.0, 0.0, 0.0],
            [0.0, sy, 0.0, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 1.0],
        ];
        let t = mat_mul(
            &mat_mul(&mat_mul(&shift(cx, cy), &rotate), &scale),
            &shift(-ow / 2.0, -oh / 2.0),
        );
        let out = ctx.output(0)?.f32_mut()?;
        if out.len() != 16 {
            return err("the output must hold 16 values");
        }
        for (o, v) in out.iter_mut().zip(t.iter().flatten()) {
            *o = *v as f32;
        }
        Ok(())
    }
}

struct TransformLandmarks;

impl Kernel for TransformLandmarks {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let (count, dims) = match input.shape {
            &[1, n, d @ (2 | 3)] => (n, d),
            s => return err(format!("landmarks must be [1, n, 2 or 3], got {s:?}")),
        };
        let x = input.f32()?;
        let m = matrix(ctx, 1)?;
        let out = ctx.output(0)?.f32_mut()?;
        if out.len() != x.len() {
            return err("input and output sizes differ");
        }
        for i in 0..count {
            let p = &x[i * dims..(i + 1) * dims];
            // The dot product of a matrix row with (x, y, 0, 1), in single precision
            // and in MediaPipe's order.
            let row = |r: &[f32]| ((r[0] * p[0] + r[1] * p[1]) + r[2] * 0.0) + r[3];
            let o = &mut out[i * dims..(i + 1) * dims];
            o[0] = row(&m[0..4]);
            o[1] = row(&m[4..8]);
            if dims == 3 {
                o[2] = p[2];
            }
        }
        Ok(())
    }
}

struct TransformBilinear;

impl Kernel for TransformBilinear {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let (n, h, w, c) = nhwc(input.shape, "input")?;
        if n != 1 {
            return err("the input must have batch size 1");
        }
        let x = input.f32()?;
        let m = matrix(ctx, 1)?;
        let out = ctx.output(0)?;
        let (on, oh, ow, oc) = nhwc(out.shape, "output")?;
        if (on, oc) != (1, c) {
            return err("the output shape does not match the input");
        }
        let y = out.f32_mut()?;
        // Sampling at pixel centres: the matrix's translation, corrected in double
        // precision and rounded back, as MediaPipe does.
        let shift = |r: &[f32]| -> f32 {
            (f64::from(r[3]) + (f64::from(r[0]) * 0.5 + f64::from(r[1]) * 0.5 - 0.5)) as f32
        };
        let rx = [m[0], m[1], m[2], shift(&m[0..4])];
        let ry = [m[4], m[5], m[6], shift(&m[4..8])];
        let read = |row: i64, col: i64, ch: usize| -> f32 {
            if row < 0 || col < 0 || row >= h as i64 || col >= w as i64 {
                0.0
            } else {
                x[(row as usize * w + col as usize) * c + ch]
            }
        };
        for oy in 0..oh {
            for ox in 0..ow {
                let (fx, fy) = (ox as f32, oy as f32);
                let tx = ((rx[0] * fx + rx[1] * fy) + rx[2] * 0.0) + rx[3];
                let ty = ((ry[0] * fx + ry[1] * fy) + ry[2] * 0.0) + ry[3];
                let o = &mut y[(oy * ow + ox) * c..(oy * ow + ox + 1) * c];
                // Outside the input (or NaN): zeros.
                let inside =
                    tx >= 0.0 && tx <= (w as f32 - 1.0) && ty >= 0.0 && ty <= (h as f32 - 1.0);
                if !inside {
                    o.fill(0.0);
                    continue;
                }
                let (x0, y0) = (tx.floor(), ty.floor());
                let (right, lower) = (tx - x0, ty - y0);
                let (col, row) = (x0 as i64, y0 as i64);
                for (ch, v) in o.iter_mut().enumerate() {
                    let q11 = read(row, col, ch);
                    let q21 = read(row, col + 1, ch);
                    let q12 = read(row + 1, col, ch);
                    let q22 = read(row + 1, col + 1, ch);
                    let mix = |a: f32, b: f32| -> f32 {
                        ((1.0 - f64::from(right)) * f64::from(a) + f64::from(right * b)) as f32
                    };
                    let (upper, bottom) = (mix(q11, q21), mix(q12, q22));
                    *v = (f64::from(lower * bottom) + (1.0 - f64::from(lower)) * f64::from(upper))
                        as f32;
                }
            }
        }
        Ok(())
    }
}
