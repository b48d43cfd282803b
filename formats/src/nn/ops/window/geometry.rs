//! The one geometry of 2-D windows: output extents for explicit and implicit padding,
//! the padding an implicit scheme means, and the output shape of a window operation.

use super::super::Result;
use super::super::context::*;
use crate::nn::model::Operand;
use crate::nn::types::PaddingScheme;

/// Output size of a convolution or pool along one spatial axis with explicit padding.
pub(in crate::nn::ops) fn conv_out(
    input: u32,
    kernel: u32,
    stride: u32,
    dilation: u32,
    pad_a: u32,
    pad_b: u32,
) -> Result<u32> {
    if input == 0 {
        return Ok(0);
    }
    let effective = (u64::from(kernel) - 1) * u64::from(dilation) + 1;
    let padded = u64::from(input) + u64::from(pad_a) + u64::from(pad_b);
    if padded < effective {
        return Err(shape_err(format!(
            "kernel extent {effective} exceeds padded input extent {padded}"
        )));
    }
    u32::try_from((padded - effective) / u64::from(stride) + 1)
        .map_err(|_| shape_err("output extent overflows"))
}

/// Output size with an implicit padding scheme.
pub(in crate::nn::ops) fn conv_out_implicit(
    input: u32,
    kernel: u32,
    stride: u32,
    dilation: u32,
    scheme: PaddingScheme,
) -> Result<u32> {
    if input == 0 {
        return Ok(0);
    }
    let effective = (u64::from(kernel) - 1) * u64::from(dilation) + 1;
    let s = u64::from(stride);
    let i = u64::from(input);
    let out = match scheme {
        PaddingScheme::Same => i.div_ceil(s),
        PaddingScheme::Valid => {
            if i < effective {
                return Err(shape_err(format!(
                    "kernel extent {effective} exceeds input extent {i}"
                )));
            }
            (i - effective + 1).div_ceil(s)
        }
    };
    u32::try_from(out).map_err(|_| shape_err("output extent overflows"))
}

/// The explicit padding `(before, after)` that an implicit scheme means for one axis.
pub fn implicit_padding(
    input: u32,
    kernel: u32,
    stride: u32,
    dilation: u32,
    scheme: PaddingScheme,
) -> (u32, u32) {
    match scheme {
        PaddingScheme::Valid => (0, 0),
        PaddingScheme::Same => {
            let effective = (i64::from(kernel) - 1) * i64::from(dilation) + 1;
            let out = (i64::from(input) + i64::from(stride) - 1) / i64::from(stride.max(1));
            let needed = ((out - 1) * i64::from(stride) + effective - i64::from(input)).max(0);
            let before = needed / 2;
            (before as u32, (needed - before) as u32)
        }
    }
}

/// Spatial geometry of a 2-D window operation after decoding its parameters.
pub(in crate::nn::ops) struct Window {
    pub(in crate::nn::ops) kernel: Hw,
    pub(in crate::nn::ops) stride: Hw,
    pub(in crate::nn::ops) dilation: Hw,
    pub(in crate::nn::ops) padding: WindowPadding,
    pub(in crate::nn::ops) nchw: bool,
}

/// The padding of a 2-D window operation: four explicit amounts, or an implicit scheme
/// that the input size resolves ([`implicit_padding`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowPadding {
    Explicit {
        left: u32,
        right: u32,
        top: u32,
        bottom: u32,
    },
    Implicit(PaddingScheme),
}

pub(in crate::nn::ops) fn window_output(
    window: &Window,
    input: &Operand,
    out_channels: u32,
) -> Result<Vec<u32>> {
    if rank(input).is_none() {
        return Ok(Vec::new());
    }
    let (n, h, w, _) = split_nhwc(&input.dimensions, window.nchw);
    let Hw { h: kh, w: kw } = window.kernel;
    let Hw { h: sh, w: sw } = window.stride;
    let Hw { h: dh, w: dw } = window.dilation;
    let (oh, ow) = match window.padding {
        WindowPadding::Explicit {
            left,
            right,
            top,
            bottom,
        } => (
            conv_out(h, kh, sh, dh, top, bottom)?,
            conv_out(w, kw, sw, dw, left, right)?,
        ),
        WindowPadding::Implicit(s) => (
            conv_out_implicit(h, kh, sh, dh, s)?,
            conv_out_implicit(w, kw, sw, dw, s)?,
        ),
    };
    Ok(join_nhwc(n, oh, ow, out_channels, window.nchw))
}

/// A height and a width (strides, dilations, pool windows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hw {
    pub h: u32,
    pub w: u32,
}

impl Hw {
    pub const ONE: Hw = Hw { h: 1, w: 1 };
}
