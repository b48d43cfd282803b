//! The indexed gathers of nnc's extension (`docs/EXTENSIONS.md`), for data of any element
//! type (they move elements without looking at them):
//!
//! - GATHER_ELEMENTS: `out[i] = input[i with i[axis] replaced by indices[i]]`; `indices`
//!   has the input's rank, the output its shape.
//! - GATHER_ND: `indices` of shape `[b..., n..., k]` picks, per batch, the slices
//!   `input[b..., indices[b..., n..., :], ...]`; the output is
//!   `indices.shape[..-1] + input.shape[batch_dims + k..]`.
//!
//! Negative indices count from the end of their axis (ONNX); an index outside its axis
//! is an execution error naming it, never a read outside the input.
//!
//! And NON_ZERO, the coordinates of the non-zero elements (`[rank, count]`): the one
//! operation here whose output shape depends on its data (the executor sizes the output
//! from the shape rule, which counts them).

use super::util::{resolve_index, strides_of};
use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

/// Which gather an operation is, chosen where it is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GatherKind {
    Elements,
    Nd,
}

pub(crate) fn build(info: &OpInfo, kind: GatherKind) -> Result<Box<dyn Kernel>> {
    let element_size = info
        .input_type(0)?
        .element_size()
        .ok_or_else(|| info.unsupported("an input without a fixed element size"))?;
    match kind {
        GatherKind::Elements => Ok(Box::new(GatherElements {
            axis: info.i32(1, "axis")?,
            element_size,
        })),
        GatherKind::Nd => Ok(Box::new(GatherNd {
            batch_dims: info.usize(2, "batch_dims")?,
            element_size,
        })),
    }
}

pub(crate) fn build_non_zero() -> Result<Box<dyn Kernel>> {
    Ok(Box::new(NonZero))
}

struct NonZero;

impl Kernel for NonZero {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let mask =
            nnc_formats::nn::ops::non_zero_mask(input.operand_type, input.zero_point, input.bytes);
        let shape = input.shape.to_vec();
        let strides = strides_of(&shape);
        let out = ctx.output(0)?;
        let count = out.shape.get(1).copied().unwrap_or(0);
        let found = mask.iter().filter(|&&m| m).count();
        if out.shape.len() != 2 || out.shape[0] != shape.len() || count != found {
            return err(format!(
                "output shape {:?} does not hold the {found} non-zero elements of {shape:?}",
                out.shape
            ));
        }
        let values = out.i32_mut()?;
        for (k, flat) in mask
            .iter()
            .enumerate()
            .filter(|&(_, &m)| m)
            .map(|(i, _)| i)
            .enumerate()
        {
            for (d, &stride) in strides.iter().enumerate() {
                values[d * count + k] = ((flat / stride) % shape[d]) as i32;
            }
        }
        Ok(())
    }
}

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(RuntimeError::kernel(message))
}

struct GatherElements {
    axis: i32,
    element_size: usize,
}

impl Kernel for GatherElements {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let indices_t = ctx.input(2)?;
        let indices = indices_t.i32()?;
        let r = input.rank();
        let a = super::util::axis(self.axis, r)?;
        if indices_t.rank() != r {
            return err("indices must have the input's rank");
        }
        let es = self.element_size;
        let in_strides = strides_of(input.shape);
        let out = ctx.output(0)?;
        if out.bytes.len() != indices.len() * es || input.bytes.len() != input.element_count() * es
        {
            return err("buffer sizes do not match the shapes");
        }
        let ishape = indices_t.shape;
        for (d, (&i, &x)) in ishape.iter().zip(input.shape).enumerate() {
            if d != a && i > x {
                return err(format!(
                    "indices dimension {d} ({i}) exceeds the input's ({x})"
                ));
            }
        }
        let mut position = vec![0usize; r];
        for (k, &index) in indices.iter().enumerate() {
            let along = resolve_index(index, input.shape[a], "GATHER_ELEMENTS")?;
            let mut src = 0;
            for d in 0..r {
                let i = if d == a { along } else { position[d] };
                src += i * in_strides[d];
            }
            out.bytes[k * es..(k + 1) * es].copy_from_slice(&input.bytes[src * es..(src + 1) * es]);
            for d in (0..r).rev() {
                position[d] += 1;
                if position[d] < ishape[d] {
                    break;
                }
                position[d] = 0;
            }
        }
        Ok(())
    }
}

struct GatherNd {
    batch_dims: usize,
    element_size: usize,
}

impl Kernel for GatherNd {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let indices_t = ctx.input(1)?;
        let indices = indices_t.i32()?;
        let (r, ri, b) = (input.rank(), indices_t.rank(), self.batch_dims);
        let Some(&depth) = indices_t.shape.last() else {
            return err("indices must have rank 1 or more");
        };
        if b >= ri || b + depth > r || indices_t.shape[..b] != input.shape[..b] {
            return err("indices do not fit the input's shape");
        }
        let es = self.element_size;
        // One batch of the input holds `batch_size` elements; one gathered slice `slice`.
        let batches: usize = input.shape[..b].iter().product();
        let batch_size: usize = input.shape[b..].iter().product();
        let slice: usize = input.shape[b + depth..].iter().product();
        let tuples_per_batch = if batches == 0 || depth == 0 && indices.is_empty() {
            0
        } else {
            indices_t.shape[b..ri - 1].iter().product()
        };
        let strides = strides_of(&input.shape[b..]);
        let out = ctx.output(0)?;
        if out.bytes.len() != batches * tuples_per_batch * slice * es {
            return err("output size does not match the gathered shape");
        }
        let chunk = slice * es;
        let mut dst = 0;
        for batch in 0..batches {
            for t in 0..tuples_per_batch {
                let tuple = &indices[(batch * tuples_per_batch + t) * depth..][..depth];
                let mut src = batch * batch_size;
                for (j, &index) in tuple.iter().enumerate() {
                    src += resolve_index(index, input.shape[b + j], "GATHER_ND")? * strides[j];
                }
                out.bytes[dst..dst + chunk]
                    .copy_from_slice(&input.bytes[src * es..src * es + chunk]);
                dst += chunk;
            }
        }
        Ok(())
    }
}
