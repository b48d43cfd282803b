//! Window operations: convolutions (plain, depthwise, grouped, transposed) and pools,
//! with the one geometry of windows (padding, strides, dilation, output extents).

use super::context::*;
use super::{OutputShape, Result};
use crate::nn::model::Operand;
use crate::nn::types::{HalVersion, OperandType, OperationType};

mod geometry;
mod params;

#[cfg(test)]
pub(super) use geometry::conv_out_implicit;
pub use geometry::{Hw, WindowPadding, implicit_padding};
pub(super) use geometry::{Window, window_output};
pub use params::{Conv2d, ConvKind, Pool2d, TransposeConv2d, TransposePadding};

/// The input, filter and bias of a convolution: 8-bit inputs take per-channel filters
/// and INT32 biases.
fn conv_tensors<'a>(ctx: &Operands<'a>) -> Result<(&'a Operand, &'a Operand, &'a Operand)> {
    let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
    require_rank(input, 0, "input", 4..=4)?;
    let filter_types: Vec<OperandType> = if QUANT8.contains(&input.operand_type) {
        vec![input.operand_type, OperandType::TensorQuant8SymmPerChannel]
    } else {
        vec![input.operand_type]
    };
    let filter = ctx.tensor(1, "filter", &filter_types)?;
    require_rank(filter, 1, "filter", 4..=4)?;
    let bias_type = if QUANT8.contains(&input.operand_type) {
        OperandType::TensorInt32
    } else {
        input.operand_type
    };
    let bias = ctx.tensor(2, "bias", &[bias_type])?;
    Ok((input, filter, bias))
}

/// CONV_2D, DEPTHWISE_CONV_2D, GROUPED_CONV_2D.
pub(super) fn conv(
    op: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    expect_outputs(outputs, 1)?;
    let explicit = Conv2d::form(op, ctx)?;
    let (input, filter, bias) = conv_tensors(ctx)?;
    require_rank(bias, 2, "bias", 1..=1)?;
    let conv = Conv2d::decode_params(op, ctx, explicit)?;
    let (kh, kw, out_channels) = match rank(filter) {
        Some(4) => {
            let f = &filter.dimensions;
            match conv.kind {
                ConvKind::Depthwise { .. } => {
                    if f[0] != 1 && f[0] != 0 {
                        return Err(param_err(
                            1,
                            "filter",
                            format!(
                                "must have shape [1, h, w, channels], got first dimension {}",
                                f[0]
                            ),
                        ));
                    }
                    (f[1], f[2], f[3])
                }
                ConvKind::Plain | ConvKind::Grouped { .. } => (f[1], f[2], f[0]),
            }
        }
        _ => (0, 0, 0),
    };
    if let Some(c) = filter.channel_quant.as_ref().map(|q| q.channel_dim) {
        let expected = match conv.kind {
            ConvKind::Depthwise { .. } => 3,
            ConvKind::Plain | ConvKind::Grouped { .. } => 0,
        };
        if c != expected {
            return Err(param_err(
                1,
                "filter",
                format!("per-channel quantization must be along dimension {expected}, got {c}"),
            ));
        }
    }
    if let Some(&b) = bias.dimensions.first() {
        merge_dim(b, out_channels, "bias length vs output channels")?;
    }
    if rank(input).is_some() && rank(filter).is_some() {
        let in_channels = split_nhwc(&input.dimensions, conv.nchw).3;
        check_conv_channels(conv.kind, in_channels, out_channels, filter.dimensions[3])?;
    }
    if kh == 0 || kw == 0 {
        let r = if rank(input).is_some() { 4 } else { 0 };
        return single(input.operand_type, vec![0; r]);
    }
    let window = Window {
        kernel: Hw { h: kh, w: kw },
        stride: conv.stride,
        dilation: conv.dilation,
        padding: conv.padding,
        nchw: conv.nchw,
    };
    single(
        input.operand_type,
        window_output(&window, input, out_channels)?,
    )
}

/// The input channels against the filter's depth (0 = unknown on either side).
fn check_conv_channels(
    kind: ConvKind,
    in_channels: u32,
    out_channels: u32,
    depth: u32,
) -> Result<()> {
    match kind {
        ConvKind::Plain => {
            merge_dim(in_channels, depth, "input channels vs filter depth")?;
        }
        ConvKind::Depthwise { multiplier } => {
            if in_channels != 0
                && depth != 0
                && u64::from(depth) != u64::from(in_channels) * u64::from(multiplier)
            {
                return Err(shape_err(format!(
                    "filter depth {depth} != input channels {in_channels} x depth_multiplier {multiplier}"
                )));
            }
        }
        ConvKind::Grouped { groups } => {
            if in_channels != 0
                && depth != 0
                && (!in_channels.is_multiple_of(groups)
                    || u64::from(depth) * u64::from(groups) != u64::from(in_channels))
            {
                return Err(shape_err(format!(
                    "input channels {in_channels} != {groups} groups x filter depth {depth}"
                )));
            }
            if out_channels != 0 && !out_channels.is_multiple_of(groups) {
                return Err(shape_err(format!(
                    "output channels {out_channels} not divisible by {groups} groups"
                )));
            }
        }
    }
    Ok(())
}

/// TRANSPOSE_CONV_2D.
pub(super) fn transpose_conv(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    expect_outputs(outputs, 1)?;
    ctx.count(&[9, 11])?;
    let explicit = ctx.inputs.len() == 11;
    let (input, filter, _) = conv_tensors(ctx)?;
    if !explicit {
        let shape = ctx.i32_values(3, "output_shape")?;
        TransposeConv2d::decode_params(ctx, false)?;
        if shape.len() != 4 || shape.iter().any(|&d| d < 1) {
            return Err(param_err(
                3,
                "output_shape",
                format!("must hold 4 positive values, got {shape:?}"),
            ));
        }
        return single(
            input.operand_type,
            shape.iter().map(|&d| d as u32).collect(),
        );
    }
    let params = TransposeConv2d::decode_params(ctx, true)?;
    if rank(input).is_none() || rank(filter).is_none() {
        return single(input.operand_type, Vec::new());
    }
    let TransposePadding::Explicit {
        left,
        right,
        top,
        bottom,
    } = params.padding
    else {
        return Err(shape_err("internal: explicit padding expected"));
    };
    let (n, h, w, c) = split_nhwc(&input.dimensions, params.nchw);
    let f = &filter.dimensions;
    merge_dim(c, f[3], "input channels vs filter depth")?;
    let extent = |i: u32, s: u32, k: u32, a: u32, b: u32| -> Result<u32> {
        if i == 0 {
            return Ok(0);
        }
        let full = i64::from(s) * (i64::from(i) - 1) + i64::from(k);
        let out = full - i64::from(a) - i64::from(b);
        if out < 1 {
            return Err(shape_err(format!(
                "padding ({a}, {b}) removes the whole output extent {full}"
            )));
        }
        u32::try_from(out).map_err(|_| shape_err("output extent overflows"))
    };
    let oh = extent(h, params.stride.h, f[1], top, bottom)?;
    let ow = extent(w, params.stride.w, f[2], left, right)?;
    single(input.operand_type, join_nhwc(n, oh, ow, f[0], params.nchw))
}

/// AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D.
pub(super) fn pool(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    expect_outputs(outputs, 1)?;
    ctx.count(&[7, 8, 10, 11])?;
    let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
    require_rank(input, 0, "input", 4..=4)?;
    let pool = Pool2d::decode_params(ctx)?;
    let window = Window {
        kernel: pool.filter,
        stride: pool.stride,
        dilation: Hw::ONE,
        padding: pool.padding,
        nchw: pool.nchw,
    };
    let channels = if rank(input).is_some() {
        split_nhwc(&input.dimensions, pool.nchw).3
    } else {
        0
    };
    single(input.operand_type, window_output(&window, input, channels)?)
}

// Input roles. Input counts shared by the explicit and implicit forms (10 for CONV_2D, 11
// for DEPTHWISE_CONV_2D) are named as the explicit form, which is what nnc emits.

use super::roles::Role as R;

const EXPLICIT_CONV: &[R] = &[
    R::Input,
    R::Filter,
    R::Bias,
    R::PadLeft,
    R::PadRight,
    R::PadTop,
    R::PadBottom,
    R::StrideW,
    R::StrideH,
    R::Activation,
    R::Layout,
    R::DilationW,
    R::DilationH,
];
const IMPLICIT_CONV: &[R] = &[
    R::Input,
    R::Filter,
    R::Bias,
    R::Padding,
    R::StrideW,
    R::StrideH,
    R::Activation,
    R::Layout,
    R::DilationW,
    R::DilationH,
];
const EXPLICIT_DEPTHWISE: &[R] = &[
    R::Input,
    R::Filter,
    R::Bias,
    R::PadLeft,
    R::PadRight,
    R::PadTop,
    R::PadBottom,
    R::StrideW,
    R::StrideH,
    R::Multiplier,
    R::Activation,
    R::Layout,
    R::DilationW,
    R::DilationH,
];
const IMPLICIT_DEPTHWISE: &[R] = &[
    R::Input,
    R::Filter,
    R::Bias,
    R::Padding,
    R::StrideW,
    R::StrideH,
    R::Multiplier,
    R::Activation,
    R::Layout,
    R::DilationW,
    R::DilationH,
];
const EXPLICIT_GROUPED: &[R] = &[
    R::Input,
    R::Filter,
    R::Bias,
    R::PadLeft,
    R::PadRight,
    R::PadTop,
    R::PadBottom,
    R::StrideW,
    R::StrideH,
    R::Groups,
    R::Activation,
    R::Layout,
];
const IMPLICIT_GROUPED: &[R] = &[
    R::Input,
    R::Filter,
    R::Bias,
    R::Padding,
    R::StrideW,
    R::StrideH,
    R::Groups,
    R::Activation,
    R::Layout,
];
const EXPLICIT_TRANSPOSE: &[R] = &[
    R::Input,
    R::Filter,
    R::Bias,
    R::PadLeft,
    R::PadRight,
    R::PadTop,
    R::PadBottom,
    R::StrideW,
    R::StrideH,
    R::Activation,
    R::Layout,
];
const IMPLICIT_TRANSPOSE: &[R] = &[
    R::Input,
    R::Filter,
    R::Bias,
    R::OutputShape,
    R::Padding,
    R::StrideW,
    R::StrideH,
    R::Activation,
    R::Layout,
];
const EXPLICIT_POOL: &[R] = &[
    R::Input,
    R::PadLeft,
    R::PadRight,
    R::PadTop,
    R::PadBottom,
    R::StrideW,
    R::StrideH,
    R::FilterW,
    R::FilterH,
    R::Activation,
    R::Layout,
];
const IMPLICIT_POOL: &[R] = &[
    R::Input,
    R::Padding,
    R::StrideW,
    R::StrideH,
    R::FilterW,
    R::FilterH,
    R::Activation,
    R::Layout,
];

fn pick(roles: &[R], index: usize) -> R {
    roles.get(index).copied().unwrap_or(R::Input)
}

pub(super) fn conv_roles(index: usize, count: usize) -> R {
    let explicit = matches!(count, 10 | 11 | 13);
    pick(
        if explicit {
            EXPLICIT_CONV
        } else {
            IMPLICIT_CONV
        },
        index,
    )
}

pub(super) fn depthwise_roles(index: usize, count: usize) -> R {
    let explicit = matches!(count, 11 | 12 | 14);
    pick(
        if explicit {
            EXPLICIT_DEPTHWISE
        } else {
            IMPLICIT_DEPTHWISE
        },
        index,
    )
}

pub(super) fn grouped_roles(index: usize, count: usize) -> R {
    pick(
        if count == 12 {
            EXPLICIT_GROUPED
        } else {
            IMPLICIT_GROUPED
        },
        index,
    )
}

pub(super) fn transpose_roles(index: usize, count: usize) -> R {
    pick(
        if count == 11 {
            EXPLICIT_TRANSPOSE
        } else {
            IMPLICIT_TRANSPOSE
        },
        index,
    )
}

pub(super) fn pool_roles(index: usize, count: usize) -> R {
    pick(
        if count >= 10 {
            EXPLICIT_POOL
        } else {
            IMPLICIT_POOL
        },
        index,
    )
}

// Versions: the layout flag and dilation arrived in HAL 1.2 for the HAL 1.0 window
// operations.

fn since_v1_2(extended: bool) -> HalVersion {
    if extended {
        HalVersion::V1_2
    } else {
        HalVersion::V1_0
    }
}

pub(super) fn conv_version(inputs: &[&Operand], _: &[&Operand]) -> HalVersion {
    since_v1_2(
        inputs.len() > 10
            || (inputs.len() == 8 || inputs.len() == 10)
                && inputs[7].operand_type == OperandType::Bool,
    )
}

pub(super) fn depthwise_version(inputs: &[&Operand], _: &[&Operand]) -> HalVersion {
    since_v1_2(
        inputs.len() > 11
            || (inputs.len() == 9 || inputs.len() == 11)
                && inputs[8].operand_type == OperandType::Bool,
    )
}

pub(super) fn pool_version(inputs: &[&Operand], _: &[&Operand]) -> HalVersion {
    since_v1_2(inputs.len() == 8 || inputs.len() == 11)
}
