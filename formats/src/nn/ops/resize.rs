//! Resizing: RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR, and nnc's RESAMPLE and
//! GRID_SAMPLE.

use super::context::*;
use super::resize_params::{GridSample, Resize2d, ResizeSize};
use super::{OutputShape, Result};
use crate::nn::model::Operand;
use crate::nn::types::{OperandType, OperationType};

/// Resample.
pub(super) fn resample(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[6])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
    let taps = ctx.i32_values(1, "taps")?;
    ctx.tensor(2, "indices", INT_VECTOR)?;
    ctx.tensor(3, "weights", &[OperandType::TensorFloat32])?;
    ctx.f32(4, "extrapolation")?;
    let shape = ctx.i32_values(5, "output_shape")?;
    let Some(r) = rank(input) else {
        return single(input.operand_type, vec![0; shape.len()]);
    };
    if taps.len() != r || shape.len() != r {
        return Err(param_err(
            1,
            "taps",
            format!("taps and output_shape need {r} values"),
        ));
    }
    let mut total = 0u64;
    let mut dims = Vec::with_capacity(r);
    for d in 0..r {
        let (k, out) = (taps[d], shape[d]);
        if !(0..=256).contains(&k) || out < 1 {
            return Err(param_err(
                1,
                "taps",
                format!("axis {d}: {k} taps to {out} elements"),
            ));
        }
        if k == 0 && input.dimensions[d] != 0 && out as u32 != input.dimensions[d] {
            return Err(param_err(
                5,
                "output_shape",
                format!("axis {d} is not resampled but changes length"),
            ));
        }
        total += k as u64 * out as u64;
        dims.push(out as u32);
    }
    for (index, role) in [(2, "indices"), (3, "weights")] {
        let len: u64 = ctx
            .operand(index)
            .dimensions
            .iter()
            .map(|&d| u64::from(d))
            .product();
        if ctx.operand(index).dimensions.len() != 1 || len != total {
            return Err(param_err(index, role, format!("must hold {total} values")));
        }
    }
    if let Some(bytes) = ctx.inputs[2].value {
        let indices = decode_i32s(bytes);
        let mut at = 0usize;
        for d in 0..r {
            let n = taps[d] as usize * shape[d] as usize;
            let dim = input.dimensions[d];
            if let Some(bad) = indices[at..at + n]
                .iter()
                .find(|&&i| i < -1 || (dim != 0 && i >= dim as i32))
            {
                return Err(param_err(
                    2,
                    "indices",
                    format!("index {bad} is out of range for axis {d} of size {dim}"),
                ));
            }
            at += n;
        }
    }
    single(input.operand_type, dims)
}

/// GridSample: an NHWC input sampled at the grid's `(x, y)` points, one output pixel per
/// grid point.
pub(super) fn grid_sample(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[5])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
    require_rank(input, 0, "input", 4..=4)?;
    let grid = ctx.same_type(1, "grid", input.operand_type)?;
    require_rank(grid, 1, "grid", 4..=4)?;
    GridSample::decode_params(ctx)?;
    let at = |o: &Operand, d: usize| o.dimensions.get(d).copied().unwrap_or(0);
    if !matches!(at(grid, 3), 0 | 2) {
        return Err(param_err(
            1,
            "grid",
            format!("must hold 2 coordinates per point, got {}", at(grid, 3)),
        ));
    }
    let batch = merge_dim(at(input, 0), at(grid, 0), "input and grid batch")?;
    single(
        input.operand_type,
        vec![batch, at(grid, 1), at(grid, 2), at(input, 3)],
    )
}

/// ResizeBilinear, ResizeNearestNeighbor.
pub(super) fn resize(
    op: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    Resize2d::count(op, ctx)?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
    require_rank(input, 0, "input", 4..=4)?;
    if rank(input).is_none() {
        // The flags are checked whatever the rank; the size only against known extents.
        Resize2d::decode_flags(ctx)?;
        return single(input.operand_type, Vec::new());
    }
    let params = Resize2d::decode_params(ctx)?;
    let (n, h, w, c) = split_nhwc(&input.dimensions, params.nchw);
    let (ow, oh) = match params.size {
        ResizeSize::Output { width, height } => (width, height),
        ResizeSize::Scale { width, height } => {
            let scaled = |d: u32, s: f32| -> Result<u32> {
                if d == 0 {
                    return Ok(0);
                }
                let v = (f64::from(d) * f64::from(s)).floor();
                if !(1.0..=f64::from(u32::MAX)).contains(&v) {
                    return Err(shape_err(format!("scaled extent {v} is out of range")));
                }
                Ok(v as u32)
            };
            (scaled(w, width)?, scaled(h, height)?)
        }
    };
    single(input.operand_type, join_nhwc(n, oh, ow, c, params.nchw))
}

use super::Role as R;

pub(super) const RESIZE_ROLES: &[R] = &[
    R::Input,
    R::Width,
    R::Height,
    R::Layout,
    R::AlignCorners,
    R::HalfPixel,
];

pub(super) const RESAMPLE_ROLES: &[R] = &[
    R::Input,
    R::Taps,
    R::Indices,
    R::Weights,
    R::Extrapolation,
    R::OutputShape,
];

pub(super) const GRID_SAMPLE_ROLES: &[R] =
    &[R::Input, R::Grid, R::Mode, R::PaddingMode, R::AlignCorners];
