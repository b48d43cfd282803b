//! nnc's RESAMPLE extension operation (`docs/EXTENSIONS.md`): separable resampling with
//! per-axis tap tables the compiler computed (ONNX Resize's nearest, linear and cubic
//! modes under every coordinate transformation, `exclude_outside`, and
//! `tf_crop_and_resize` extrapolation). Each resampled axis is one pass, innermost axis
//! first as ONNX's reference nests them: output element `o` along the axis is
//! `sum_t weight[o, t] * input[index[o, t]]`, or the extrapolation value when the table
//! marks `o` out of range (index -1).

use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

pub(crate) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(Resample {
        extrapolation: info.f32(4, "extrapolation")?,
    }))
}

struct Resample {
    extrapolation: f32,
}

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(RuntimeError::kernel(message))
}

impl Kernel for Resample {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let taps = ctx.input(1)?.i32()?;
        let indices = ctx.input(2)?.i32()?;
        let weights = ctx.input(3)?.f32()?;
        let out_shape = ctx.input(5)?.i32()?;
        let r = input.rank();
        if taps.len() != r || out_shape.len() != r || indices.len() != weights.len() {
            return err("tap tables do not match the input rank");
        }
        // Where each axis's table starts.
        let mut starts = Vec::with_capacity(r);
        let mut at = 0usize;
        for d in 0..r {
            starts.push(at);
            at += taps[d].max(0) as usize * out_shape[d].max(0) as usize;
        }
        if at != indices.len() {
            return err("tap tables have the wrong length");
        }
        let mut shape = input.shape.to_vec();
        let mut data = input.f32()?.to_vec();
        for d in (0..r).rev() {
            let k = taps[d].max(0) as usize;
            if k == 0 {
                continue;
            }
            let out_len = out_shape[d] as usize;
            let in_len = shape[d];
            let outer: usize = shape[..d].iter().product();
            let inner: usize = shape[d + 1..].iter().product();
            let table = starts[d]..starts[d] + out_len * k;
            let (idx, w) = (&indices[table.clone()], &weights[table]);
            if idx.iter().any(|&i| i < -1 || i >= in_len as i32) {
                return err(format!("a tap of axis {d} leaves its {in_len} elements"));
            }
            let mut next = vec![0f32; outer * out_len * inner];
            for b in 0..outer {
                let src = &data[b * in_len * inner..(b + 1) * in_len * inner];
                let dst = &mut next[b * out_len * inner..(b + 1) * out_len * inner];
                for o in 0..out_len {
                    let row = &mut dst[o * inner..(o + 1) * inner];
                    let (ti, tw) = (&idx[o * k..(o + 1) * k], &w[o * k..(o + 1) * k]);
                    if ti[0] < 0 {
                        row.fill(self.extrapolation);
                        continue;
                    }
                    for (&i, &weight) in ti.iter().zip(tw) {
                        if weight == 0.0 {
                            continue;
                        }
                        let line = &src[i as usize * inner..(i as usize + 1) * inner];
                        for (v, &x) in row.iter_mut().zip(line) {
                            *v += weight * x;
                        }
                    }
                }
            }
            data = next;
            shape[d] = out_len;
        }
        let out = ctx.output(0)?.f32_mut()?;
        if out.len() != data.len() {
            return err("output size does not match the resampled shape");
        }
        out.copy_from_slice(&data);
        Ok(())
    }
}
