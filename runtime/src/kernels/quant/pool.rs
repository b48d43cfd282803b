//! Quantized AVERAGE_POOL_2D and MAX_POOL_2D (NHWC; NCHW by transposing).
//!
//! TFLite's reference arithmetic (`reference_integer_ops::AveragePool` / `MaxPool`): over
//! the window positions inside the input, the average of the stored values rounded to
//! nearest with ties away from zero (`(acc +- count / 2) / count`), or their maximum,
//! then clamped to the fused activation's range. TFLite requires the output to share the
//! input's scale and zero point; when they differ, nnc requantizes the pooled value
//! (`MultiplyByQuantizedMultiplier(v - in_zp, in_scale / out_scale) + out_zp`). A window
//! entirely in the padding (TFLite rejects it) averages to the real value 0 and has the
//! type's lowest value as its maximum.

use std::ops::Range;

use nnc_formats::nn::OperationType;

use super::arith::{Multiplier, Q8, QType, Qp, activation_range};
use super::{
    activation_type, check_scale, for_row_tiles, output_type, q8_bytes, q8_bytes_mut, qp, typed,
    typed_mut,
};
use crate::error::Result;
use crate::kernels::util::{rank4, with_nhwc};
use crate::kernels::window::{PoolGeometry, PoolParams, decode_pool};
use crate::kernels::{Kernel, KernelContext, OpInfo};

struct Pool {
    max: bool,
    window: PoolParams,
    qt: QType,
    input: Qp,
    output: Qp,
    /// Requantization when the output's quantization differs from the input's.
    rescale: Option<Multiplier>,
    range: (i32, i32),
}

pub(crate) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let qt = activation_type(info, 0)?;
    if output_type(info, 0)? != qt {
        return Err(info.unsupported("input and output of different 8-bit types"));
    }
    let window = decode_pool(info)?;
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
    Ok(Box::new(Pool {
        max: info.op_type() == OperationType::MaxPool2d,
        window,
        qt,
        input,
        output,
        rescale,
        range: activation_range(window.act, output, qt),
    }))
}

impl Kernel for Pool {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let in_shape = rank4(input.shape, "input")?;
        let threads = ctx.threads;
        let out_t = ctx.output(0)?;
        let out_shape = rank4(out_t.shape, "output")?;
        let out = q8_bytes_mut(out_t, "output")?;
        with_nhwc(
            self.window.nchw,
            x,
            in_shape,
            out,
            out_shape,
            |x, in_shape, out, out_shape| {
                let g = self.window.geometry(in_shape, out_shape)?;
                for_row_tiles(
                    threads,
                    out,
                    g.ow * g.c,
                    1,
                    0,
                    |row, out_row, _: &mut [u8]| {
                        match self.qt {
                            QType::U8 => self.row::<u8>(&g, typed(x), row, typed_mut(out_row)),
                            QType::I8 => self.row::<i8>(&g, typed(x), row, typed_mut(out_row)),
                        }
                        Ok(())
                    },
                )
            },
        )
    }
}

impl Pool {
    /// One output row (batch, output row `row`).
    fn row<T: Q8>(&self, g: &PoolGeometry, x: &[T], row: usize, out_row: &mut [T]) {
        let b = row / g.oh;
        let oy = row % g.oh;
        let Range { start: ys, end: ye } = g.rows(oy);
        let mut acc = vec![0i32; g.c];
        for (ox, px) in out_row.chunks_exact_mut(g.c).enumerate() {
            let Range { start: xs, end: xe } = g.cols(ox);
            let count = ((ye - ys) * (xe - xs)) as i32;
            acc.fill(if self.max { T::MIN } else { 0 });
            for iy in ys..ye {
                for ix in xs..xe {
                    let src = &x[((b * g.ih + iy) * g.iw + ix) * g.c..][..g.c];
                    if self.max {
                        for (a, v) in acc.iter_mut().zip(src) {
                            *a = (*a).max(v.to_i32());
                        }
                    } else {
                        for (a, v) in acc.iter_mut().zip(src) {
                            *a += v.to_i32();
                        }
                    }
                }
            }
            for (o, &a) in px.iter_mut().zip(&acc) {
                let v = if self.max {
                    a
                } else if count > 0 {
                    // Round to nearest, ties away from zero.
                    if a > 0 {
                        (a + count / 2) / count
                    } else {
                        (a - count / 2) / count
                    }
                } else {
                    self.input.zp
                };
                let v = match self.rescale {
                    Some(m) => m.apply(v - self.input.zp).wrapping_add(self.output.zp),
                    None => v,
                };
                *o = T::from_i32(v.clamp(self.range.0, self.range.1));
            }
        }
    }
}
