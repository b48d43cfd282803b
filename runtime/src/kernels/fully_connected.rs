//! FULLY_CONNECTED: `out[b, u] = act(sum_k in[b, k] * w[u, k] + bias[u])`, the input
//! flattened to `[elements / K, K]`.
//!
//! Constant weights (processors that run [`super::gemm_f32`]) are packed once, when the
//! weights are prepared, into that GEMM's panels, and the bias and activation are applied
//! as it stores: at MobileNetV2's 1280 -> 1000 the layer is bound by reading the 5 MB of
//! weights, which the packed panels stream in order (the `gemm` crate's matrix-vector
//! path took twice as long). Weights computed at run time go through one `gemm` crate
//! product with the weights read in place as the column-major `[K, U]` right operand.
//! The bias is optional.

use nnc_formats::nn::OperandType;

use super::gemm_f32::{self, Epilogue};
use super::linalg::{Layout, matmul};
use super::{Clamp, Kernel, KernelContext, OpInfo, PreparedWeights};
use crate::buffer::AlignedBuf;
use crate::error::{Result, RuntimeError};

struct FullyConnected {
    clamp: Clamp,
    /// `(units, k)` of constant weights packed for [`gemm_f32`] when prepared.
    packed: Option<(usize, usize)>,
}

pub(crate) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(0)?;
    if t != OperandType::TensorFloat32 {
        return Err(info.unsupported(format!(
            "input type {t} (only TENSOR_FLOAT32 is implemented)"
        )));
    }
    let packed = match info.dims(1).as_deref() {
        Some(&[units, k]) if info.is_weight(1) && gemm_f32::available() && units * k > 0 => {
            Some((units, k))
        }
        _ => None,
    };
    Ok(Box::new(FullyConnected {
        clamp: Clamp::new(info.activation(3)?),
        packed,
    }))
}

impl Kernel for FullyConnected {
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        let mut prepared = PreparedWeights::empty();
        let Some((units, k)) = self.packed else {
            prepared.add_raw(weights, &[])?;
            return Ok(prepared);
        };
        let bytes = weights
            .get(1)
            .copied()
            .flatten()
            .ok_or_else(|| RuntimeError::kernel("constant weights are missing"))?;
        if bytes.len() != units * k * 4 {
            return Err(RuntimeError::kernel(format!(
                "weights of {} bytes for {units} x {k} float32 values",
                bytes.len()
            )));
        }
        let w = super::conv::f32_zeroizing(bytes);
        let too_large = || RuntimeError::kernel("weights too large");
        let len = gemm_f32::packed_len(k, units).ok_or_else(too_large)?;
        let mut storage = AlignedBuf::zeroed(len.checked_mul(4).ok_or_else(too_large)?)?;
        gemm_f32::pack(k, units, |kk, j| w[j * k + kk], storage.as_f32_mut());
        prepared.push(storage);
        prepared.add_raw(weights, &[1])?;
        Ok(prepared)
    }

    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        if let Some((units, k)) = self.packed {
            return self.run_packed(ctx, units, k);
        }
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
        let parallelism = ctx.gemm_parallelism();
        let out = ctx.output(0)?.f32_mut()?;
        let batch = check_sizes(x.len(), k, bias.map(<[f32]>::len), units, out.len())?;
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

impl FullyConnected {
    /// The product with weights packed when prepared; the bias and activation are
    /// applied as the GEMM stores.
    fn run_packed(&self, ctx: &mut KernelContext, units: usize, k: usize) -> Result<()> {
        let x = ctx.input(0)?.f32()?;
        let packed = ctx
            .weights
            .buffer(0)
            .ok_or_else(|| RuntimeError::kernel("prepared weights are missing"))?
            .as_f32();
        let zeros;
        let bias = match ctx.optional_input(2) {
            Some(b) => b.f32()?,
            None => {
                zeros = vec![0.0f32; units];
                &zeros
            }
        };
        let threads = ctx.threads;
        let out = ctx.output(0)?.f32_mut()?;
        let batch = check_sizes(x.len(), k, Some(bias.len()), units, out.len())?;
        let epilogue = Epilogue {
            bias,
            clamp: self.clamp,
        };
        gemm_f32::gemm(x, k, batch, k, packed, units, out, units, epilogue, threads)
    }
}

/// Checks the input (whole rows of `k`), the bias (`units` values) and the output
/// (`units` per row) against each other; returns the rows.
fn check_sizes(
    input: usize,
    k: usize,
    bias: Option<usize>,
    units: usize,
    output: usize,
) -> Result<usize> {
    if let Some(b) = bias
        && b != units
    {
        return Err(RuntimeError::kernel(format!(
            "bias of {b} values for {units} units"
        )));
    }
    if k == 0 || !input.is_multiple_of(k) {
        return Err(RuntimeError::kernel(format!(
            "input of {input} values is not a whole number of rows of {k}"
        )));
    }
    let batch = input / k;
    if batch.checked_mul(units) != Some(output) {
        return Err(RuntimeError::kernel(format!(
            "output holds {output} values, expected {batch} x {units}"
        )));
    }
    Ok(batch)
}
