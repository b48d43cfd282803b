//! FULLY_CONNECTED: `out[b, u] = act(sum_k in[b, k] * w[u, k] + bias[u])`, the input
//! flattened to `[elements / K, K]`.
//!
//! One GEMM with the weights read in place as the column-major `[K, U]` right operand
//! (the gemm crate packs its panels itself, and turns a one-row destination into its
//! matrix-vector case internally). At MobileNetV2's 1280 -> 1000 the layer is bound by
//! reading the 5 MB of weights. The bias is optional.

use nnc_formats::nn::OperandType;

use super::linalg::{Layout, matmul};
use super::{Clamp, Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

struct FullyConnected {
    clamp: Clamp,
}

pub(crate) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(0)?;
    if t != OperandType::TensorFloat32 {
        return Err(info.unsupported(format!(
            "input type {t} (only TENSOR_FLOAT32 is implemented)"
        )));
    }
    Ok(Box::new(FullyConnected {
        clamp: Clamp::new(info.activation(3)?),
    }))
}

impl Kernel for FullyConnected {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let x = ctx.input(0)?.f32()?;
        let weights = ctx.input(1)?;
        let w = weights.f32()?;
        let (units, k) = match weights.shape {
            [u, k] => (*u, *k),
            other => {
                return Err(RuntimeError::kernel(format!(
                    "weights must be 2-D, got {other:?}"
                )));
            }
        };
        if w.len() != units * k || k == 0 || units == 0 {
            return Err(RuntimeError::kernel("weights do not match their shape"));
        }
        let bias = match ctx.optional_input(2) {
            Some(b) => Some(b.f32()?),
            None => None,
        };
        if let Some(b) = bias
            && b.len() != units
        {
            return Err(RuntimeError::kernel(format!(
                "bias of {} values for {units} units",
                b.len()
            )));
        }
        if x.len() % k != 0 {
            return Err(RuntimeError::kernel(format!(
                "input of {} values is not a whole number of rows of {k}",
                x.len()
            )));
        }
        let batch = x.len() / k;
        let parallelism = ctx.gemm_parallelism();
        let out = ctx.output(0)?.f32_mut()?;
        if out.len() != batch * units {
            return Err(RuntimeError::kernel(format!(
                "output holds {} values, expected {batch} x {units}",
                out.len()
            )));
        }
        matmul(
            batch,
            units,
            k,
            out,
            Layout::row_major(units),
            x,
            Layout::row_major(k),
            w,
            Layout::col_major(k),
            false,
            parallelism,
        )?;
        for row in out.chunks_exact_mut(units) {
            match bias {
                Some(b) => row
                    .iter_mut()
                    .zip(b)
                    .for_each(|(v, b)| *v = self.clamp.apply(*v + *b)),
                None => self.clamp.apply_slice(row),
            }
        }
        Ok(())
    }
}
