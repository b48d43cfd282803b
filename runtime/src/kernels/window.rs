//! Window geometry, one place for every kernel that slides a window over an image
//! (convolutions, depthwise and transpose convolutions, float and quantized alike; the
//! pools share the padding and extent arithmetic): how the parameters are decoded
//! (padding, strides, dilations, and the checks that they are usable), how implicit
//! padding resolves, the output extent, and which input pixel each tap reads.

use nnc_formats::nn::signature::implicit_padding;
use nnc_formats::nn::{FusedActivation, OperandType, OperationType, PaddingScheme};

use super::{Clamp, OpInfo};
use crate::error::{Result, RuntimeError};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Padding {
    Explicit {
        top: usize,
        bottom: usize,
        left: usize,
        right: usize,
    },
    Implicit(PaddingScheme),
}

impl Padding {
    /// (before, after) padding of the height axis (`vertical`) or the width axis.
    pub(crate) fn resolve(
        &self,
        vertical: bool,
        input: usize,
        kernel: usize,
        stride: usize,
        dilation: usize,
    ) -> Result<(usize, usize)> {
        match *self {
            Padding::Explicit {
                top,
                bottom,
                left,
                right,
            } => Ok(if vertical {
                (top, bottom)
            } else {
                (left, right)
            }),
            Padding::Implicit(scheme) => {
                let c = |v: usize| {
                    u32::try_from(v).map_err(|_| RuntimeError::kernel("dimension exceeds u32"))
                };
                let (a, b) =
                    implicit_padding(c(input)?, c(kernel)?, c(stride)?, c(dilation)?, scheme);
                Ok((a as usize, b as usize))
            }
        }
    }
}

/// The padding operands from input `at`: explicit (left, right, top, bottom) there, or
/// an implicit scheme's code.
fn padding_at(info: &OpInfo, explicit: bool, at: usize) -> Result<Padding> {
    if explicit {
        Ok(Padding::Explicit {
            left: info.usize(at, "pad_left")?,
            right: info.usize(at + 1, "pad_right")?,
            top: info.usize(at + 2, "pad_top")?,
            bottom: info.usize(at + 3, "pad_bottom")?,
        })
    } else {
        let code = info.i32(at, "padding_scheme")?;
        PaddingScheme::from_code(code)
            .map(Padding::Implicit)
            .ok_or_else(|| info.invalid(format!("unknown padding scheme {code}")))
    }
}

/// Output extent of a window operation along one axis; errors when the window does not fit.
pub(crate) fn window_extent(
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad: (usize, usize),
) -> Result<usize> {
    let effective = kernel
        .checked_sub(1)
        .and_then(|k| k.checked_mul(dilation))
        .and_then(|k| k.checked_add(1))
        .ok_or_else(|| RuntimeError::kernel("kernel extent overflows"))?;
    let padded = input
        .checked_add(pad.0)
        .and_then(|v| v.checked_add(pad.1))
        .ok_or_else(|| RuntimeError::kernel("padded extent overflows"))?;
    if padded < effective || stride == 0 {
        return Err(RuntimeError::kernel(format!(
            "kernel extent {effective} exceeds padded input extent {padded}"
        )));
    }
    Ok((padded - effective) / stride + 1)
}

#[derive(Clone, Debug)]
pub(crate) struct ConvParams {
    pub padding: Padding,
    /// (height, width)
    pub stride: (usize, usize),
    pub dilation: (usize, usize),
    /// The fused activation (the float kernels clamp with [`ConvParams::clamp`], the
    /// quantized ones turn it into an integer range).
    pub act: FusedActivation,
    pub nchw: bool,
    pub groups: usize,
    pub multiplier: usize,
}

impl ConvParams {
    /// The fused activation as float bounds.
    pub fn clamp(&self) -> Clamp {
        Clamp::new(self.act)
    }
}

/// Decodes CONV_2D / DEPTHWISE_CONV_2D / GROUPED_CONV_2D parameters, following the input
/// counts signature::infer accepts.
pub(crate) fn decode_conv(info: &OpInfo) -> Result<ConvParams> {
    let op = info.op_type();
    let n = info.input_count();
    let (explicit_counts, implicit_counts): (&[usize], &[usize]) = match op {
        OperationType::Conv2d => (&[10, 11, 13], &[7, 8, 10]),
        OperationType::DepthwiseConv2d => (&[11, 12, 14], &[8, 9, 11]),
        _ => (&[12], &[9]),
    };
    let explicit = if op == OperationType::Conv2d && n == 10 {
        info.input_type(7)? == OperandType::Int32
    } else if op == OperationType::DepthwiseConv2d && n == 11 {
        info.input_type(8)? == OperandType::Int32
    } else if explicit_counts.contains(&n) {
        true
    } else if implicit_counts.contains(&n) {
        false
    } else {
        return Err(info.invalid(format!("unexpected input count {n}")));
    };
    let padding = padding_at(info, explicit, 3)?;
    let mut next = if explicit { 7 } else { 4 };
    let sw = info.usize(next, "stride_width")?;
    let sh = info.usize(next + 1, "stride_height")?;
    next += 2;
    let (mut groups, mut multiplier) = (1, 1);
    match op {
        OperationType::DepthwiseConv2d => {
            multiplier = info.usize(next, "depth_multiplier")?;
            next += 1;
        }
        OperationType::GroupedConv2d => {
            groups = info.usize(next, "num_groups")?;
            next += 1;
        }
        _ => {}
    }
    let act = info.activation(next)?;
    let nchw = info.optional_bool(next + 1, "layout")?;
    let dilation = if info.input_count() > next + 2 {
        (
            info.usize(next + 3, "dilation_height")?,
            info.usize(next + 2, "dilation_width")?,
        )
    } else {
        (1, 1)
    };
    if sw == 0 || sh == 0 || dilation.0 == 0 || dilation.1 == 0 || groups == 0 || multiplier == 0 {
        return Err(info.invalid("strides, dilations, groups and depth multiplier must be >= 1"));
    }
    Ok(ConvParams {
        padding,
        stride: (sh, sw),
        dilation,
        act,
        nchw,
        groups,
        multiplier,
    })
}

/// Everything a convolution needs to know about sizes, in NHWC terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub n: usize,
    pub ih: usize,
    pub iw: usize,
    pub ic: usize,
    pub oh: usize,
    pub ow: usize,
    pub oc: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub dh: usize,
    pub dw: usize,
    pub pad_top: usize,
    pub pad_left: usize,
}

impl Geometry {
    /// Checks the input, kernel and output sizes against each other.
    pub fn new(
        p: &ConvParams,
        input: [usize; 4],
        (kh, kw): (usize, usize),
        output: [usize; 4],
    ) -> Result<Geometry> {
        let [n, ih, iw, ic] = input;
        let (sh, sw) = p.stride;
        let (dh, dw) = p.dilation;
        let pad_h = p.padding.resolve(true, ih, kh, sh, dh)?;
        let pad_w = p.padding.resolve(false, iw, kw, sw, dw)?;
        let oh = window_extent(ih, kh, sh, dh, pad_h)?;
        let ow = window_extent(iw, kw, sw, dw, pad_w)?;
        if output[0] != n || output[1] != oh || output[2] != ow {
            return Err(RuntimeError::kernel(format!(
                "output shape {output:?} (NHWC) does not match the computed [{n}, {oh}, {ow}, _]"
            )));
        }
        Ok(Geometry {
            n,
            ih,
            iw,
            ic,
            oh,
            ow,
            oc: output[3],
            kh,
            kw,
            sh,
            sw,
            dh,
            dw,
            pad_top: pad_h.0,
            pad_left: pad_w.0,
        })
    }

    /// The output pixels `(image, oy, ox)` from row `r0` on (rows count pixels over the
    /// batch), stepped without a division per pixel.
    pub fn pixels_from(&self, r0: usize) -> impl Iterator<Item = (usize, usize, usize)> {
        let (oh, ow) = (self.oh.max(1), self.ow.max(1));
        let mut at = (r0 / (oh * ow), (r0 / ow) % oh, r0 % ow);
        std::iter::from_fn(move || {
            let here = at;
            at.2 += 1;
            if at.2 == ow {
                at.2 = 0;
                at.1 += 1;
                if at.1 == oh {
                    at.1 = 0;
                    at.0 += 1;
                }
            }
            Some(here)
        })
    }

    /// A 1x1, stride-1, unpadded convolution: its im2col rows are its input rows.
    pub fn is_pointwise(&self) -> bool {
        self.kh == 1
            && self.kw == 1
            && self.sh == 1
            && self.sw == 1
            && self.pad_top == 0
            && self.pad_left == 0
            && self.oh == self.ih
            && self.ow == self.iw
    }

    /// Input row for output row `oy` and kernel row `ky`, if inside the input.
    #[inline(always)]
    pub fn in_y(&self, oy: usize, ky: usize) -> Option<usize> {
        (oy * self.sh + ky * self.dh)
            .checked_sub(self.pad_top)
            .filter(|&y| y < self.ih)
    }

    #[inline(always)]
    pub fn in_x(&self, ox: usize, kx: usize) -> Option<usize> {
        (ox * self.sw + kx * self.dw)
            .checked_sub(self.pad_left)
            .filter(|&x| x < self.iw)
    }
}

/// TRANSPOSE_CONV_2D parameters (explicit padding, or an implicit scheme resolved
/// against the output shape, which is then an input).
#[derive(Clone, Debug)]
pub(crate) struct TransposeParams {
    pub padding: Padding,
    /// (height, width)
    pub stride: (usize, usize),
    pub act: FusedActivation,
    pub nchw: bool,
}

impl TransposeParams {
    /// The fused activation as float bounds.
    pub fn clamp(&self) -> Clamp {
        Clamp::new(self.act)
    }

    /// (top, left) padding of a transpose convolution from an `ih x iw` input with a
    /// `kh x kw` filter to an `oh x ow` output; explicit padding must produce exactly
    /// that output.
    pub fn pads(
        &self,
        (ih, iw): (usize, usize),
        (kh, kw): (usize, usize),
        (oh, ow): (usize, usize),
    ) -> Result<(usize, usize)> {
        let (sh, sw) = self.stride;
        match self.padding {
            Padding::Explicit {
                top,
                bottom,
                left,
                right,
            } => {
                let extent = |i: usize, s: usize, k: usize, pads: usize| {
                    i.saturating_sub(1)
                        .checked_mul(s)
                        .and_then(|v| v.checked_add(k))
                        .and_then(|v| v.checked_sub(pads))
                };
                let eh = top.checked_add(bottom).and_then(|p| extent(ih, sh, kh, p));
                let ew = left.checked_add(right).and_then(|p| extent(iw, sw, kw, p));
                if eh != Some(oh) || ew != Some(ow) {
                    return Err(RuntimeError::kernel(format!(
                        "output extent {oh}x{ow} does not match the padding and strides"
                    )));
                }
                Ok((top, left))
            }
            Padding::Implicit(scheme) => {
                let before = |i: usize, s: usize, k: usize, o: usize| -> usize {
                    let total = i
                        .saturating_sub(1)
                        .saturating_mul(s)
                        .saturating_add(k)
                        .saturating_sub(o);
                    if scheme == PaddingScheme::Same {
                        total / 2
                    } else {
                        0
                    }
                };
                Ok((before(ih, sh, kh, oh), before(iw, sw, kw, ow)))
            }
        }
    }
}

/// Decodes TRANSPOSE_CONV_2D parameters (11 inputs: explicit padding; 9: implicit).
pub(crate) fn decode_transpose(info: &OpInfo) -> Result<TransposeParams> {
    let params = if info.input_count() == 11 {
        TransposeParams {
            padding: padding_at(info, true, 3)?,
            stride: (
                info.usize(8, "stride_height")?,
                info.usize(7, "stride_width")?,
            ),
            act: info.activation(9)?,
            nchw: info.bool(10, "layout")?,
        }
    } else {
        TransposeParams {
            padding: padding_at(info, false, 4)?,
            stride: (
                info.usize(6, "stride_height")?,
                info.usize(5, "stride_width")?,
            ),
            act: info.activation(7)?,
            nchw: info.bool(8, "layout")?,
        }
    };
    if params.stride.0 == 0 || params.stride.1 == 0 {
        return Err(info.invalid("strides must be >= 1"));
    }
    Ok(params)
}

/// AVERAGE_POOL_2D / MAX_POOL_2D / L2_POOL_2D parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolParams {
    pub padding: Padding,
    /// (height, width)
    pub stride: (usize, usize),
    /// (height, width)
    pub filter: (usize, usize),
    pub act: FusedActivation,
    pub nchw: bool,
}

/// Decodes pooling parameters (10 or 11 inputs: explicit padding; 7 or 8: implicit).
pub(crate) fn decode_pool(info: &OpInfo) -> Result<PoolParams> {
    let explicit = info.input_count() >= 10;
    let padding = padding_at(info, explicit, 1)?;
    let next = if explicit { 5 } else { 2 };
    let sw = info.usize(next, "stride_width")?;
    let sh = info.usize(next + 1, "stride_height")?;
    let fw = info.usize(next + 2, "filter_width")?;
    let fh = info.usize(next + 3, "filter_height")?;
    if sw == 0 || sh == 0 || fw == 0 || fh == 0 {
        return Err(info.invalid("strides and filter sizes must be >= 1"));
    }
    Ok(PoolParams {
        padding,
        stride: (sh, sw),
        filter: (fh, fw),
        act: info.activation(next + 4)?,
        nchw: info.optional_bool(next + 5, "layout")?,
    })
}
