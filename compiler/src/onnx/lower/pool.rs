//! MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.

use nnc_formats::nn::OperationType;

use super::conv::read_spatial;
use super::{Lowerer, NResult, Node, unsupported};

impl Lowerer<'_> {
    pub(super) fn pool(&mut self, n: &Node) -> NResult<()> {
        let max = n.op() == "MaxPool";
        if max && self.output_used(n, 1) {
            return unsupported("MaxPool's Indices output is not supported");
        }
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let rank = self.rank(x);
        let kernel = n
            .attrs
            .ints("kernel_shape")?
            .ok_or_else(|| super::NodeError::Invalid("kernel_shape is required".into()))?;
        if kernel.len() + 2 != rank {
            return unsupported(format!(
                "{}-D pooling of a rank-{rank} input is not supported",
                kernel.len()
            ));
        }
        let dims = self.dims(x);
        let sp = read_spatial(n, &kernel, &dims[2..], max)?;
        if sp.dilations != [1, 1] {
            return unsupported("dilated MaxPool is not supported");
        }
        let ceil_mode = n.attrs.int_or("ceil_mode", 0)? != 0;
        let count_include_pad = !max && n.attrs.int_or("count_include_pad", 0)? != 0;
        let (x4, d4) = self.as_4d(n, x)?;
        let [mut top, mut left, mut bottom, mut right] = sp.pads;
        let mut xh = self.to_nhwc(n, x4)?;
        // The ceil-mode overhang is computed from the original padding, before any
        // explicit zero padding for count_include_pad replaces it.
        let (mut extra_h, mut extra_w) = (0, 0);
        if ceil_mode {
            // Extra end padding turns the NN set's floor division into a ceiling; NN pools
            // ignore padded elements, as ONNX does for the ceil-mode overhang.
            let (h, w) = (d4[2], d4[3]);
            if h == 0 || w == 0 {
                return unsupported(
                    "ceil_mode needs the spatial size at compile time; use --input-shape",
                );
            }
            let extra = |input: u32, k: u32, s: u32, a: u32, b: u32| -> u32 {
                let span = i64::from(input) + i64::from(a) + i64::from(b) - i64::from(k);
                if span < 0 {
                    return 0;
                }
                let floor_out = span / i64::from(s) + 1;
                let mut ceil_out = (span + i64::from(s) - 1) / i64::from(s) + 1;
                // The last window must start inside the input or its begin padding.
                if (ceil_out - 1) * i64::from(s) >= i64::from(input) + i64::from(a) {
                    ceil_out -= 1;
                }
                if ceil_out > floor_out { s - 1 } else { 0 }
            };
            extra_h = extra(h, sp.kernel[0], sp.strides[0], top, bottom);
            extra_w = extra(w, sp.kernel[1], sp.strides[1], left, right);
        }
        if count_include_pad && sp.pads.iter().any(|&p| p > 0) {
            // NN pools never count padding; padding with explicit zeros first does.
            let paddings = self.i32_vector(&[
                0,
                0,
                top as i32,
                bottom as i32,
                left as i32,
                right as i32,
                0,
                0,
            ]);
            xh = self.emit(n, OperationType::Pad, vec![xh, paddings])?;
            (top, left, bottom, right) = (0, 0, 0, 0);
        }
        let op = if max {
            OperationType::MaxPool2d
        } else {
            OperationType::AveragePool2d
        };
        let mut inputs = vec![xh];
        for v in [
            left,
            right + extra_w,
            top,
            bottom + extra_h,
            sp.strides[1],
            sp.strides[0],
            sp.kernel[1],
            sp.kernel[0],
            0,
        ] {
            inputs.push(self.i32_const(v as i32));
        }
        let yh = self.emit(n, op, inputs)?;
        let y4 = self.to_nchw(n, yh)?;
        let y = self.back_from_4d(n, y4, rank)?;
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }

    pub(super) fn global_pool(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let rank = self.rank(x);
        if rank < 3 {
            return Err(super::NodeError::Invalid(format!(
                "{} needs an input of rank >= 3",
                n.op()
            )));
        }
        let axes: Vec<i32> = (2..rank as i32).collect();
        let axes = self.i32_vector(&axes);
        let y = if n.op() == "GlobalAveragePool" {
            let keep = self.i32_const(1);
            self.emit(n, OperationType::Mean, vec![x.operand, axes, keep])?
        } else {
            let keep = self.bool_const(true);
            self.emit(n, OperationType::ReduceMax, vec![x.operand, axes, keep])?
        };
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }
}
