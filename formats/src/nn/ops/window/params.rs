//! Typed parameters of the window operations, decoded once and encoded once.
//!
//! An NN operation's parameters are positional scalar operands whose layout depends on
//! the operation and its input count (explicit or implicit padding, optional layout and
//! dilation tails). [`Conv2d`], [`TransposeConv2d`] and [`Pool2d`] are the one reader
//! (`decode`: the shape rules and the runtime's kernels) and the one writer (`encode`:
//! the frontends) of that layout.

use super::super::context::*;
use super::super::{InputView, Result, SignatureError};
use super::geometry::{Hw, WindowPadding};
use crate::nn::model::{Model, OperandIndex};
use crate::nn::types::{FusedActivation, OperandType, OperationType, PaddingScheme};

/// How a convolution's filter meets its input channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvKind {
    /// CONV_2D: filter `[out, h, w, in]`.
    Plain,
    /// DEPTHWISE_CONV_2D: filter `[1, h, w, in x multiplier]`.
    Depthwise { multiplier: u32 },
    /// GROUPED_CONV_2D: filter `[out, h, w, in / groups]`.
    Grouped { groups: u32 },
}

/// CONV_2D, DEPTHWISE_CONV_2D and GROUPED_CONV_2D: the parameters after the input, filter
/// and bias tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    pub kind: ConvKind,
    pub padding: WindowPadding,
    pub stride: Hw,
    pub dilation: Hw,
    pub activation: FusedActivation,
    /// NCHW data layout (NHWC when false).
    pub nchw: bool,
}

/// TRANSPOSE_CONV_2D's padding: explicit amounts, or an implicit scheme with the output
/// shape given as a tensor input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransposePadding {
    Explicit {
        left: u32,
        right: u32,
        top: u32,
        bottom: u32,
    },
    /// The output shape is input 3 (a TENSOR_INT32 of four values), not a parameter.
    Implicit(PaddingScheme),
}

/// TRANSPOSE_CONV_2D: the parameters after the input, filter and bias tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransposeConv2d {
    pub padding: TransposePadding,
    pub stride: Hw,
    pub activation: FusedActivation,
    pub nchw: bool,
}

/// AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D: the parameters after the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2d {
    pub padding: WindowPadding,
    pub stride: Hw,
    pub filter: Hw,
    pub activation: FusedActivation,
    pub nchw: bool,
}

const PAD_ROLES: [&str; 4] = ["pad_left", "pad_right", "pad_top", "pad_bottom"];

/// Explicit padding (four values from `first`) or an implicit scheme (one), then the
/// strides; returns them and the index after the strides.
fn read_padding_and_strides(
    ctx: &Operands,
    first: usize,
    explicit: bool,
) -> Result<(WindowPadding, Hw, usize)> {
    let (padding, next) = if explicit {
        let mut v = [0u32; 4];
        for (k, role) in PAD_ROLES.into_iter().enumerate() {
            v[k] = ctx.i32_at_least(first + k, role, 0)? as u32;
        }
        let [left, right, top, bottom] = v;
        let padding = WindowPadding::Explicit {
            left,
            right,
            top,
            bottom,
        };
        (padding, first + 4)
    } else {
        (WindowPadding::Implicit(scheme(ctx, first)?), first + 1)
    };
    let w = ctx.i32_at_least(next, "stride_width", 1)? as u32;
    let h = ctx.i32_at_least(next + 1, "stride_height", 1)? as u32;
    Ok((padding, Hw { h, w }, next + 2))
}

pub(in crate::nn::ops) fn scheme(ctx: &Operands, index: usize) -> Result<PaddingScheme> {
    let code = ctx.i32(index, "padding_scheme")?;
    PaddingScheme::from_code(code).ok_or(param_err(
        index,
        "padding_scheme",
        format!("must be 1 (SAME) or 2 (VALID), got {code}"),
    ))
}

/// Adds padding and strides as `read_padding_and_strides` reads them.
fn encode_padding_and_strides(
    model: &mut Model,
    padding: WindowPadding,
    stride: Hw,
    out: &mut Vec<OperandIndex>,
) {
    match padding {
        WindowPadding::Explicit {
            left,
            right,
            top,
            bottom,
        } => {
            for v in [left, right, top, bottom] {
                out.push(model.add_i32(v as i32));
            }
        }
        WindowPadding::Implicit(s) => out.push(model.add_i32(s as i32)),
    }
    out.push(model.add_i32(stride.w as i32));
    out.push(model.add_i32(stride.h as i32));
}

impl Conv2d {
    /// The operation type this convolution is.
    pub fn op_type(&self) -> OperationType {
        match self.kind {
            ConvKind::Plain => OperationType::Conv2d,
            ConvKind::Depthwise { .. } => OperationType::DepthwiseConv2d,
            ConvKind::Grouped { .. } => OperationType::GroupedConv2d,
        }
    }

    /// Reads the parameters of a convolution whose signature holds (the runtime's view:
    /// every parameter is a constant).
    pub fn decode(op: OperationType, inputs: &[InputView]) -> Result<Conv2d> {
        let ctx = Operands { inputs };
        let explicit = Conv2d::form(op, &ctx)?;
        Conv2d::decode_params(op, &ctx, explicit)
    }

    /// Whether the input count means explicit padding (with the optional layout and
    /// dilation tails); an error lists the counts the operation takes.
    pub(in crate::nn::ops) fn form(op: OperationType, ctx: &Operands) -> Result<bool> {
        use OperationType as O;
        let (explicit_counts, implicit_counts): (&[usize], &[usize]) = if op == O::Conv2d {
            (&[10, 11, 13], &[7, 8, 10])
        } else if op == O::DepthwiseConv2d {
            (&[11, 12, 14], &[8, 9, 11])
        } else {
            (&[12], &[9])
        };
        let n = ctx.inputs.len();
        if op == O::Conv2d && n == 10 {
            // 10 inputs is ambiguous for CONV_2D: explicit without tail, or implicit with
            // layout and dilation. The type of input 7 decides (BOOL layout vs INT32 stride).
            return Ok(ctx.operand(7).operand_type == OperandType::Int32);
        }
        if op == O::DepthwiseConv2d && n == 11 {
            return Ok(ctx.operand(8).operand_type == OperandType::Int32);
        }
        if explicit_counts.contains(&n) {
            return Ok(true);
        }
        if implicit_counts.contains(&n) {
            return Ok(false);
        }
        let mut all: Vec<usize> = explicit_counts
            .iter()
            .chain(implicit_counts)
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        Err(SignatureError::InputCount {
            expected: all
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" or "),
            actual: n,
        })
    }

    /// The parameters from input 3 on, in the form `form` chose.
    pub(in crate::nn::ops) fn decode_params(
        op: OperationType,
        ctx: &Operands,
        explicit: bool,
    ) -> Result<Conv2d> {
        let (padding, stride, mut next) = read_padding_and_strides(ctx, 3, explicit)?;
        let kind = if op == OperationType::DepthwiseConv2d {
            next += 1;
            ConvKind::Depthwise {
                multiplier: ctx.i32_at_least(next - 1, "depth_multiplier", 1)? as u32,
            }
        } else if op == OperationType::GroupedConv2d {
            next += 1;
            ConvKind::Grouped {
                groups: ctx.i32_at_least(next - 1, "num_groups", 1)? as u32,
            }
        } else {
            ConvKind::Plain
        };
        let activation = ctx.activation(next)?;
        let nchw = match kind {
            ConvKind::Grouped { .. } => ctx.bool(next + 1, "layout")?,
            ConvKind::Plain | ConvKind::Depthwise { .. } => {
                ctx.optional_bool(next + 1, "layout")?
            }
        };
        let dilation = if ctx.inputs.len() > next + 2 {
            Hw {
                w: ctx.i32_at_least(next + 2, "dilation_width", 1)? as u32,
                h: ctx.i32_at_least(next + 3, "dilation_height", 1)? as u32,
            }
        } else {
            Hw::ONE
        };
        Ok(Conv2d {
            kind,
            padding,
            stride,
            dilation,
            activation,
            nchw,
        })
    }

    /// Adds the parameter operands (everything after input, filter and bias) to `model`,
    /// in the order `decode` reads them; the layout flag and dilation only when needed.
    pub fn encode(&self, model: &mut Model) -> Vec<OperandIndex> {
        let mut out = Vec::with_capacity(11);
        encode_padding_and_strides(model, self.padding, self.stride, &mut out);
        match self.kind {
            ConvKind::Plain => {}
            ConvKind::Depthwise { multiplier } => out.push(model.add_i32(multiplier as i32)),
            ConvKind::Grouped { groups } => out.push(model.add_i32(groups as i32)),
        }
        out.push(model.add_i32(self.activation as i32));
        let dilated = self.dilation != Hw::ONE;
        let grouped = matches!(self.kind, ConvKind::Grouped { .. });
        if grouped || dilated || self.nchw {
            out.push(model.add_bool(self.nchw));
        }
        if dilated {
            out.push(model.add_i32(self.dilation.w as i32));
            out.push(model.add_i32(self.dilation.h as i32));
        }
        out
    }
}

impl TransposeConv2d {
    /// Reads the parameters of a transposed convolution whose signature holds.
    pub fn decode(inputs: &[InputView]) -> Result<TransposeConv2d> {
        let ctx = Operands { inputs };
        ctx.count(&[9, 11])?;
        TransposeConv2d::decode_params(&ctx, ctx.inputs.len() == 11)
    }

    /// The parameters after the input, filter and bias (and, implicitly padded, the
    /// output shape).
    pub(in crate::nn::ops) fn decode_params(ctx: &Operands, explicit: bool) -> Result<Self> {
        let (padding, stride, next) = if explicit {
            let (padding, stride, next) = read_padding_and_strides(ctx, 3, true)?;
            let WindowPadding::Explicit {
                left,
                right,
                top,
                bottom,
            } = padding
            else {
                return Err(shape_err("internal: explicit padding expected"));
            };
            let padding = TransposePadding::Explicit {
                left,
                right,
                top,
                bottom,
            };
            (padding, stride, next)
        } else {
            let padding = TransposePadding::Implicit(scheme(ctx, 4)?);
            let w = ctx.i32_at_least(5, "stride_width", 1)? as u32;
            let h = ctx.i32_at_least(6, "stride_height", 1)? as u32;
            (padding, Hw { h, w }, 7)
        };
        let activation = ctx.activation(next)?;
        let nchw = ctx.bool(next + 1, "layout")?;
        Ok(TransposeConv2d {
            padding,
            stride,
            activation,
            nchw,
        })
    }

    /// The parameter operands after the input, filter and bias, in the order `decode`
    /// reads them; with implicit padding, `output_shape` (a TENSOR_INT32 of four values)
    /// comes first.
    pub fn encode(
        &self,
        model: &mut Model,
        output_shape: Option<OperandIndex>,
    ) -> Vec<OperandIndex> {
        let mut out = Vec::with_capacity(8);
        match self.padding {
            TransposePadding::Explicit {
                left,
                right,
                top,
                bottom,
            } => {
                let padding = WindowPadding::Explicit {
                    left,
                    right,
                    top,
                    bottom,
                };
                encode_padding_and_strides(model, padding, self.stride, &mut out);
            }
            TransposePadding::Implicit(s) => {
                out.extend(output_shape);
                encode_padding_and_strides(
                    model,
                    WindowPadding::Implicit(s),
                    self.stride,
                    &mut out,
                );
            }
        }
        out.push(model.add_i32(self.activation as i32));
        out.push(model.add_bool(self.nchw));
        out
    }
}

impl Pool2d {
    /// Reads the parameters of a pool whose signature holds.
    pub fn decode(inputs: &[InputView]) -> Result<Pool2d> {
        let ctx = Operands { inputs };
        ctx.count(&[7, 8, 10, 11])?;
        Pool2d::decode_params(&ctx)
    }

    /// The parameters after the input.
    pub(in crate::nn::ops) fn decode_params(ctx: &Operands) -> Result<Pool2d> {
        let explicit = ctx.inputs.len() >= 10;
        let (padding, stride, next) = read_padding_and_strides(ctx, 1, explicit)?;
        let w = ctx.i32_at_least(next, "filter_width", 1)? as u32;
        let h = ctx.i32_at_least(next + 1, "filter_height", 1)? as u32;
        let activation = ctx.activation(next + 2)?;
        let nchw = ctx.optional_bool(next + 3, "layout")?;
        Ok(Pool2d {
            padding,
            stride,
            filter: Hw { h, w },
            activation,
            nchw,
        })
    }

    /// The parameter operands after the input, in the order `decode` reads them; the
    /// layout flag only for NCHW.
    pub fn encode(&self, model: &mut Model) -> Vec<OperandIndex> {
        let mut out = Vec::with_capacity(10);
        encode_padding_and_strides(model, self.padding, self.stride, &mut out);
        out.push(model.add_i32(self.filter.w as i32));
        out.push(model.add_i32(self.filter.h as i32));
        out.push(model.add_i32(self.activation as i32));
        if self.nchw {
            out.push(model.add_bool(true));
        }
        out
    }
}
