//! Typed parameters of RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR and nnc's GRID_SAMPLE,
//! decoded once and encoded once.
//!
//! After the input come the output size (two INT32 scalars) or the scales (two FLOAT32
//! or FLOAT16 scalars), width first, then the optional layout, align_corners and
//! half_pixel_centers BOOLs. [`Resize2d`] is the one reader (`decode`: the shape rule and
//! the runtime's kernels) and the one writer (`encode`: the frontends) of that layout.

use super::context::*;
use super::{InputView, Result};
use crate::nn::model::{Model, OperandIndex};
use crate::nn::types::{GridSampleMode, GridSamplePadding, OperandType, OperationType};

/// How the output's spatial extent is given.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ResizeSize {
    /// The output width and height (INT32 scalars, each >= 1).
    Output { width: u32, height: u32 },
    /// Factors applied to the input's width and height (each > 0; the output extent is
    /// the floor of the product).
    Scale { width: f32, height: f32 },
}

/// RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR: the parameters after the input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Resize2d {
    pub size: ResizeSize,
    /// NCHW data layout (NHWC when false).
    pub nchw: bool,
    pub align_corners: bool,
    pub half_pixel_centers: bool,
}

impl Resize2d {
    /// Reads the parameters of a resize whose signature holds (the runtime's view: every
    /// parameter is a constant).
    pub fn decode(op: OperationType, inputs: &[InputView]) -> Result<Resize2d> {
        let ctx = Operands { inputs };
        Resize2d::count(op, &ctx)?;
        Resize2d::decode_params(&ctx)
    }

    /// The input counts `op` takes: RESIZE_NEAREST_NEIGHBOR needs the layout flag.
    pub(in crate::nn::ops) fn count(op: OperationType, ctx: &Operands) -> Result<()> {
        if op == OperationType::ResizeBilinear {
            ctx.count(&[3, 4, 6])
        } else {
            ctx.count(&[4, 6])
        }
    }

    /// The parameters after the input: the flags, then the size.
    pub(in crate::nn::ops) fn decode_params(ctx: &Operands) -> Result<Resize2d> {
        let (nchw, align_corners, half_pixel_centers) = Resize2d::decode_flags(ctx)?;
        Ok(Resize2d {
            size: Resize2d::decode_size(ctx)?,
            nchw,
            align_corners,
            half_pixel_centers,
        })
    }

    /// Layout, align_corners and half_pixel_centers (absent ones false); the last two
    /// exclude each other.
    pub(in crate::nn::ops) fn decode_flags(ctx: &Operands) -> Result<(bool, bool, bool)> {
        let nchw = ctx.optional_bool(3, "layout")?;
        let align = ctx.optional_bool(4, "align_corners")?;
        let half = ctx.optional_bool(5, "half_pixel_centers")?;
        if align && half {
            return Err(param_err(
                5,
                "half_pixel_centers",
                "cannot be combined with align_corners",
            ));
        }
        Ok((nchw, align, half))
    }

    /// Inputs 1 and 2: an output size when input 1 is INT32, scales otherwise.
    fn decode_size(ctx: &Operands) -> Result<ResizeSize> {
        if ctx.operand(1).operand_type == OperandType::Int32 {
            return Ok(ResizeSize::Output {
                width: ctx.i32_at_least(1, "output_width", 1)? as u32,
                height: ctx.i32_at_least(2, "output_height", 1)? as u32,
            });
        }
        let width = ctx.f32(1, "width_scale")?;
        let height = ctx.f32(2, "height_scale")?;
        if !(width > 0.0 && height > 0.0) {
            return Err(param_err(1, "width_scale", "scales must be > 0"));
        }
        Ok(ResizeSize::Scale { width, height })
    }

    /// The parameter operands after the input, in the order `decode` reads them: the size
    /// (INT32) or the scales (FLOAT32), then all three flags, the count both operations
    /// accept.
    pub fn encode(&self, model: &mut Model) -> Vec<OperandIndex> {
        let mut out = Vec::with_capacity(5);
        match self.size {
            ResizeSize::Output { width, height } => {
                out.push(model.add_i32(width as i32));
                out.push(model.add_i32(height as i32));
            }
            ResizeSize::Scale { width, height } => {
                out.push(model.add_f32(width));
                out.push(model.add_f32(height));
            }
        }
        for flag in [self.nchw, self.align_corners, self.half_pixel_centers] {
            out.push(model.add_bool(flag));
        }
        out
    }
}

/// GRID_SAMPLE: input, grid, then the mode and padding mode codes and align_corners.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridSample {
    pub mode: GridSampleMode,
    pub padding: GridSamplePadding,
    pub align_corners: bool,
}

impl GridSample {
    pub fn decode(inputs: &[InputView]) -> Result<GridSample> {
        let ctx = Operands { inputs };
        ctx.count(&[5])?;
        GridSample::decode_params(&ctx)
    }

    pub(in crate::nn::ops) fn decode_params(ctx: &Operands) -> Result<GridSample> {
        let mode = ctx.i32(2, "mode")?;
        let mode = GridSampleMode::from_code(mode)
            .ok_or_else(|| param_err(2, "mode", format!("unknown mode code {mode}")))?;
        let padding = ctx.i32(3, "padding_mode")?;
        let padding = GridSamplePadding::from_code(padding).ok_or_else(|| {
            param_err(
                3,
                "padding_mode",
                format!("unknown padding mode code {padding}"),
            )
        })?;
        Ok(GridSample {
            mode,
            padding,
            align_corners: ctx.bool(4, "align_corners")?,
        })
    }

    /// The parameter operands after the input and the grid.
    pub fn encode(&self, model: &mut Model) -> Vec<OperandIndex> {
        vec![
            model.add_i32(self.mode as i32),
            model.add_i32(self.padding as i32),
            model.add_bool(self.align_corners),
        ]
    }
}
