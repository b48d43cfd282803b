//! Window geometry, one place for every kernel that slides a window over an image
//! (convolutions, depthwise and transpose convolutions, pools; float and quantized
//! alike): how the parameters are decoded (padding, strides, dilations, and the checks
//! that they are usable), how implicit padding resolves, the output extent, which input
//! pixel each tap reads, which input pixels a pool's window covers ([`PoolGeometry`]),
//! and the one im2col and col2im, generic over the element type ([`im2col`],
//! [`col2im`]).

use nnc_formats::nn::ops::{
    Conv2d, ConvKind, Hw, Pool2d, TransposeConv2d, TransposePadding, WindowPadding,
    implicit_padding,
};
use nnc_formats::nn::{FusedActivation, PaddingScheme};

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

impl From<WindowPadding> for Padding {
    fn from(padding: WindowPadding) -> Padding {
        match padding {
            WindowPadding::Explicit {
                left,
                right,
                top,
                bottom,
            } => Padding::Explicit {
                top: top as usize,
                bottom: bottom as usize,
                left: left as usize,
                right: right as usize,
            },
            WindowPadding::Implicit(scheme) => Padding::Implicit(scheme),
        }
    }
}

/// (height, width) as sizes.
fn hw(v: Hw) -> (usize, usize) {
    (v.h as usize, v.w as usize)
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

/// Decodes CONV_2D / DEPTHWISE_CONV_2D / GROUPED_CONV_2D parameters with the one decoder
/// the shape rules use ([`Conv2d::decode`]).
pub(crate) fn decode_conv(info: &OpInfo) -> Result<ConvParams> {
    let conv = Conv2d::decode(info.op_type(), info.views()).map_err(|e| info.signature_error(e))?;
    let (groups, multiplier) = match conv.kind {
        ConvKind::Plain => (1, 1),
        ConvKind::Depthwise { multiplier } => (1, multiplier as usize),
        ConvKind::Grouped { groups } => (groups as usize, 1),
    };
    Ok(ConvParams {
        padding: conv.padding.into(),
        stride: hw(conv.stride),
        dilation: hw(conv.dilation),
        act: conv.activation,
        nchw: conv.nchw,
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
    #[cfg(test)]
    /// A convolution geometry from an `ih x iw x ic` input, square kernel, stride,
    /// dilation and padding (top and left; the bottom and right as much).
    pub(crate) fn square(
        n: usize,
        (ih, iw, ic): (usize, usize, usize),
        k: usize,
        (s, d, pad): (usize, usize, usize),
    ) -> Geometry {
        let span = (k - 1) * d + 1;
        Geometry {
            n,
            ih,
            iw,
            ic,
            oh: (ih + 2 * pad - span) / s + 1,
            ow: (iw + 2 * pad - span) / s + 1,
            oc: 1,
            kh: k,
            kw: k,
            sh: s,
            sw: s,
            dh: d,
            dw: d,
            pad_top: pad,
            pad_left: pad,
        }
    }

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

    /// The kernel columns `kx0..kx1` of output column `ox` that fall inside the input, for
    /// unit horizontal dilation (their input columns are then consecutive, from
    /// `ox * sw + kx0 - pad_left`).
    #[inline(always)]
    fn inside_columns(&self, ox: usize) -> (usize, usize) {
        let start = ox * self.sw;
        let kx0 = self.pad_left.saturating_sub(start).min(self.kw);
        let kx1 = (self.iw + self.pad_left)
            .saturating_sub(start)
            .min(self.kw)
            .max(kx0);
        (kx0, kx1)
    }

    /// Checks that an image (the input) and a matrix of `ld`-value rows from row `r0` on
    /// fit the geometry, for [`im2col`] and [`col2im`].
    fn check_columns(
        &self,
        image: usize,
        rows: usize,
        r0: usize,
        ld: usize,
        cg: usize,
    ) -> Result<()> {
        let pixels = self.n * self.oh * self.ow;
        let fits = image == self.n * self.ih * self.iw * self.ic
            && ld >= self.kh * self.kw * cg
            && r0.checked_add(rows).is_some_and(|end| end <= pixels);
        if fits {
            Ok(())
        } else {
            Err(RuntimeError::kernel(format!(
                "an image of {image} values or {rows} rows of {ld} from row {r0} do not fit the window geometry"
            )))
        }
    }
}

/// Fills `a` with rows `r0..` of the im2col matrix of the NHWC image `x` (`g`'s input):
/// one row per output pixel (as many as `a` holds), `ld` values apart, ordered
/// (ky, kx, c) over the channels `channels`; taps outside the input hold `pad` (0, or a
/// quantized input's zero point). A row's tail past `kh * kw * cg` (a GEMM's depth
/// padding) is left as it is: the quantized GEMMs' packed B is zero there, and filling
/// it cost a call per row of a 3-channel first layer. `copy` moves one contiguous run of
/// input values into the matrix (a copy, or a conversion such as widening); a run is a
/// channel group of one tap, or, with unit horizontal dilation and all channels, a
/// whole window row. A 1x1, stride-1, unpadded convolution's rows are its input rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn im2col<S: Copy, D: Copy>(
    g: &Geometry,
    x: &[S],
    channels: std::ops::Range<usize>,
    r0: usize,
    ld: usize,
    pad: D,
    a: &mut [D],
    copy: impl Fn(&mut [D], &[S]),
) -> Result<()> {
    let (c0, cg) = (channels.start, channels.len());
    let ld = ld.max(1);
    g.check_columns(x.len(), a.len() / ld, r0, ld, cg)?;
    if channels.end > g.ic {
        return Err(RuntimeError::kernel("im2col channels exceed the input's"));
    }
    let k = g.kh * g.kw * cg;
    if k == 0 {
        return Ok(());
    }
    let pointwise = g.is_pointwise();
    // With unit dilation and all channels, a window row is one run of kw * ic values.
    let contiguous = g.dw == 1 && cg == g.ic;
    let run = g.kw * cg;
    // The input row of each kernel row for the current output row, None in the padding
    // (recomputed when the output row changes, not per pixel).
    let mut rows_at: Option<(usize, usize)> = None;
    let mut bases: Vec<Option<usize>> = vec![None; g.kh];
    // The output pixels stepped row by row (two divisions per row were a large part of
    // gathering a 3-channel first layer's 27-byte rows).
    let pixels = g.pixels_from(r0);
    for ((r, dst), (b, oy, ox)) in a.chunks_exact_mut(ld).enumerate().zip(pixels) {
        let dst = &mut dst[..k];
        if pointwise {
            copy(dst, &x[(r0 + r) * g.ic + c0..][..cg]);
            continue;
        }
        if rows_at != Some((b, oy)) {
            rows_at = Some((b, oy));
            for (ky, base) in bases.iter_mut().enumerate() {
                *base = g.in_y(oy, ky).map(|iy| (b * g.ih + iy) * g.iw);
            }
        }
        if contiguous {
            let (kx0, kx1) = g.inside_columns(ox);
            if kx0 == 0 && kx1 == g.kw {
                // Inside the input horizontally (most windows): a run per kernel row.
                let ix0 = ox * g.sw - g.pad_left;
                for (drow, base) in dst.chunks_exact_mut(run).zip(&bases) {
                    match base {
                        Some(base) => copy(drow, &x[(base + ix0) * g.ic..][..run]),
                        None => drow.fill(pad),
                    }
                }
                continue;
            }
            for (drow, base) in dst.chunks_exact_mut(run).zip(&bases) {
                let Some(base) = base else {
                    drow.fill(pad);
                    continue;
                };
                // Only windows at the left and right edges meet padding.
                drow[..kx0 * cg].fill(pad);
                drow[kx1 * cg..].fill(pad);
                if kx1 > kx0 {
                    let ix0 = ox * g.sw + kx0 - g.pad_left;
                    let src = &x[(base + ix0) * g.ic..(base + ix0 + kx1 - kx0) * g.ic];
                    copy(&mut drow[kx0 * cg..kx1 * cg], src);
                }
            }
            continue;
        }
        for (drow, base) in dst.chunks_exact_mut(run).zip(&bases) {
            let Some(base) = base else {
                drow.fill(pad);
                continue;
            };
            for (kx, d) in drow.chunks_exact_mut(cg).enumerate() {
                match g.in_x(ox, kx) {
                    Some(ix) => copy(d, &x[(base + ix) * g.ic + c0..][..cg]),
                    None => d.fill(pad),
                }
            }
        }
    }
    Ok(())
}

/// The adjoint of [`im2col`] over all channels: adds rows `r0..` of a column matrix
/// (`ld` values apart, ordered (ky, kx, c)) into the NHWC image `image` (`g`'s input) at
/// the taps they were gathered from; taps outside the image are dropped. A transpose
/// convolution scatters its per-pixel products this way ([`TransposeParams::geometry`]).
/// `add` accumulates one run (one tap's channels, or with unit horizontal dilation the
/// consecutive taps of a kernel row inside the image); each image value receives its
/// terms in row, then kernel-row, then kernel-column order.
pub(crate) fn col2im<T: Copy>(
    g: &Geometry,
    cols: &[T],
    r0: usize,
    ld: usize,
    image: &mut [T],
    add: impl Fn(&mut [T], &[T]),
) -> Result<()> {
    let ld = ld.max(1);
    g.check_columns(image.len(), cols.len() / ld, r0, ld, g.ic)?;
    let (c, run) = (g.ic, g.kw * g.ic);
    if g.kh * run == 0 {
        return Ok(());
    }
    let mut rows_at: Option<(usize, usize)> = None;
    let mut bases: Vec<Option<usize>> = vec![None; g.kh];
    for (src, (b, oy, ox)) in cols.chunks_exact(ld).zip(g.pixels_from(r0)) {
        if rows_at != Some((b, oy)) {
            rows_at = Some((b, oy));
            for (ky, base) in bases.iter_mut().enumerate() {
                *base = g.in_y(oy, ky).map(|iy| (b * g.ih + iy) * g.iw);
            }
        }
        for (srow, base) in src[..g.kh * run].chunks_exact(run).zip(&bases) {
            let Some(base) = *base else { continue };
            if g.dw == 1 {
                let (kx0, kx1) = g.inside_columns(ox);
                if kx1 > kx0 {
                    let ix0 = ox * g.sw + kx0 - g.pad_left;
                    add(
                        &mut image[(base + ix0) * c..(base + ix0 + kx1 - kx0) * c],
                        &srow[kx0 * c..kx1 * c],
                    );
                }
                continue;
            }
            for (kx, s) in srow.chunks_exact(c).enumerate() {
                if let Some(ix) = g.in_x(ox, kx) {
                    add(&mut image[(base + ix) * c..][..c], s);
                }
            }
        }
    }
    Ok(())
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

impl TransposeParams {
    /// The geometry of the convolution this transpose convolution is the adjoint of,
    /// for [`col2im`]: that convolution's input is this one's output (`output`, NHWC)
    /// and its output pixels are this one's input pixels (`input`), under the same
    /// filter extent, strides and (top, left) padding.
    pub fn geometry(
        &self,
        [n, ih, iw, ic]: [usize; 4],
        (kh, kw): (usize, usize),
        [_, oh, ow, oc]: [usize; 4],
    ) -> Result<Geometry> {
        let (pad_top, pad_left) = self.pads((ih, iw), (kh, kw), (oh, ow))?;
        Ok(Geometry {
            n,
            ih: oh,
            iw: ow,
            ic: oc,
            oh: ih,
            ow: iw,
            oc: ic,
            kh,
            kw,
            sh: self.stride.0,
            sw: self.stride.1,
            dh: 1,
            dw: 1,
            pad_top,
            pad_left,
        })
    }
}

/// Decodes TRANSPOSE_CONV_2D parameters (11 inputs: explicit padding; 9: implicit).
pub(crate) fn decode_transpose(info: &OpInfo) -> Result<TransposeParams> {
    let conv = TransposeConv2d::decode(info.views()).map_err(|e| info.signature_error(e))?;
    let padding = match conv.padding {
        TransposePadding::Explicit {
            left,
            right,
            top,
            bottom,
        } => WindowPadding::Explicit {
            left,
            right,
            top,
            bottom,
        },
        TransposePadding::Implicit(scheme) => WindowPadding::Implicit(scheme),
    };
    Ok(TransposeParams {
        padding: padding.into(),
        stride: hw(conv.stride),
        act: conv.activation,
        nchw: conv.nchw,
    })
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

impl PoolParams {
    /// The window geometry of a pool from `input` to `output` (NHWC), which must have
    /// the batch, extent and channels the parameters give.
    pub fn geometry(&self, [n, ih, iw, c]: [usize; 4], output: [usize; 4]) -> Result<PoolGeometry> {
        let (fh, fw) = self.filter;
        let (sh, sw) = self.stride;
        let pad_h = self.padding.resolve(true, ih, fh, sh, 1)?;
        let pad_w = self.padding.resolve(false, iw, fw, sw, 1)?;
        let eh = window_extent(ih, fh, sh, 1, pad_h)?;
        let ew = window_extent(iw, fw, sw, 1, pad_w)?;
        if output != [n, eh, ew, c] {
            return Err(RuntimeError::kernel(format!(
                "output shape {output:?} (NHWC) does not match the computed {:?}",
                [n, eh, ew, c]
            )));
        }
        Ok(PoolGeometry {
            ih,
            iw,
            c,
            oh: eh,
            ow: ew,
            filter: self.filter,
            stride: self.stride,
            pad: (pad_h.0, pad_w.0),
        })
    }
}

/// Sizes a pool's output rows need (NHWC), and which input pixels each window covers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolGeometry {
    pub ih: usize,
    pub iw: usize,
    pub c: usize,
    pub oh: usize,
    pub ow: usize,
    /// (height, width)
    pub filter: (usize, usize),
    pub stride: (usize, usize),
    /// (top, left)
    pub pad: (usize, usize),
}

impl PoolGeometry {
    /// The input rows of output row `oy`'s window that lie inside the input (none for a
    /// window entirely in the padding).
    #[inline(always)]
    pub fn rows(&self, oy: usize) -> std::ops::Range<usize> {
        Self::inside(oy, self.stride.0, self.filter.0, self.pad.0, self.ih)
    }

    /// The input columns of output column `ox`'s window that lie inside the input.
    #[inline(always)]
    pub fn cols(&self, ox: usize) -> std::ops::Range<usize> {
        Self::inside(ox, self.stride.1, self.filter.1, self.pad.1, self.iw)
    }

    #[inline(always)]
    fn inside(
        o: usize,
        stride: usize,
        filter: usize,
        pad: usize,
        input: usize,
    ) -> std::ops::Range<usize> {
        let start = (o * stride).saturating_sub(pad);
        let end = (o * stride + filter).saturating_sub(pad).min(input);
        start..end.max(start)
    }
}

/// Decodes pooling parameters (10 or 11 inputs: explicit padding; 7 or 8: implicit).
pub(crate) fn decode_pool(info: &OpInfo) -> Result<PoolParams> {
    let pool = Pool2d::decode(info.views()).map_err(|e| info.signature_error(e))?;
    Ok(PoolParams {
        padding: pool.padding.into(),
        stride: hw(pool.stride),
        filter: hw(pool.filter),
        act: pool.activation,
        nchw: pool.nchw,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (geometry, groups): borders, strides, dilations, groups, a pointwise one, a
    /// 3-channel first layer, two images.
    fn cases() -> Vec<(Geometry, usize)> {
        vec![
            (Geometry::square(1, (7, 9, 3), 3, (2, 1, 1)), 1),
            (Geometry::square(2, (6, 5, 4), 3, (1, 1, 1)), 1),
            (Geometry::square(1, (8, 8, 6), 3, (1, 2, 2)), 1),
            (Geometry::square(1, (9, 7, 8), 3, (1, 1, 1)), 4),
            (Geometry::square(2, (5, 6, 4), 1, (1, 1, 0)), 2),
            (Geometry::square(1, (5, 6, 4), 1, (1, 1, 0)), 1),
            (Geometry::square(1, (11, 10, 3), 7, (2, 1, 3)), 1),
            (Geometry::square(1, (4, 4, 2), 5, (1, 1, 4)), 1),
        ]
    }

    /// The tap (ky, kx, c) of output row `r`, or None in the padding, computed directly.
    fn tap(g: &Geometry, x: &[i32], r: usize, (ky, kx, c): (usize, usize, usize)) -> Option<i32> {
        let (b, oy, ox) = (r / (g.oh * g.ow), (r / g.ow) % g.oh, r % g.ow);
        let iy = (oy * g.sh + ky * g.dh).checked_sub(g.pad_top)?;
        let ix = (ox * g.sw + kx * g.dw).checked_sub(g.pad_left)?;
        (iy < g.ih && ix < g.iw).then(|| x[((b * g.ih + iy) * g.iw + ix) * g.ic + c])
    }

    #[test]
    fn im2col_gathers_every_tap_or_the_pad_value() {
        for (case, (g, groups)) in cases().into_iter().enumerate() {
            let x: Vec<i32> = (1..=(g.n * g.ih * g.iw * g.ic) as i32).collect();
            let cg = g.ic / groups;
            let k = g.kh * g.kw * cg;
            // Depth padding of 3 that must be left alone; tiles of 5 rows from every r0.
            let ld = k + 3;
            let rows = g.n * g.oh * g.ow;
            for grp in 0..groups {
                for r0 in (0..rows).step_by(5) {
                    let t = 5.min(rows - r0);
                    let mut a = vec![i32::MIN; t * ld];
                    let channels = grp * cg..(grp + 1) * cg;
                    im2col(
                        &g,
                        &x,
                        channels,
                        r0,
                        ld,
                        -7,
                        &mut a,
                        <[i32]>::copy_from_slice,
                    )
                    .unwrap();
                    for (i, row) in a.chunks_exact(ld).enumerate() {
                        let want: Vec<i32> = (0..k)
                            .map(|j| (j / (g.kw * cg), (j / cg) % g.kw, grp * cg + j % cg))
                            .map(|t| tap(&g, &x, r0 + i, t).unwrap_or(-7))
                            .collect();
                        assert_eq!(row[..k], want, "case {case}, group {grp}, row {}", r0 + i);
                        assert!(row[k..].iter().all(|&v| v == i32::MIN), "case {case}");
                    }
                }
            }
        }
    }

    /// col2im adds each column back where im2col took it from: <im2col(x), c> equals
    /// <x, col2im(c)>, and scattering in tiles gives what scattering at once does.
    #[test]
    fn col2im_is_the_adjoint_of_im2col() {
        for (case, (g, _)) in cases().into_iter().enumerate() {
            let k = g.kh * g.kw * g.ic;
            let rows = g.n * g.oh * g.ow;
            let pixels = g.n * g.ih * g.iw * g.ic;
            let x: Vec<i64> = (0..pixels as i64).map(|i| (i * 37) % 23 - 11).collect();
            let c: Vec<i64> = (0..(rows * k) as i64).map(|i| (i * 53) % 29 - 14).collect();
            let mut a = vec![0i64; rows * k];
            im2col(&g, &x, 0..g.ic, 0, k, 0, &mut a, <[i64]>::copy_from_slice).unwrap();
            let add = |d: &mut [i64], s: &[i64]| d.iter_mut().zip(s).for_each(|(d, s)| *d += s);
            let mut image = vec![0i64; pixels];
            col2im(&g, &c, 0, k, &mut image, add).unwrap();
            let dot = |p: &[i64], q: &[i64]| p.iter().zip(q).map(|(p, q)| p * q).sum::<i64>();
            assert_eq!(dot(&a, &c), dot(&x, &image), "case {case}");
            let mut tiled = vec![0i64; pixels];
            for r0 in (0..rows).step_by(4) {
                let r1 = (r0 + 4).min(rows);
                col2im(&g, &c[r0 * k..r1 * k], r0, k, &mut tiled, add).unwrap();
            }
            assert_eq!(tiled, image, "case {case}");
        }
    }

    #[test]
    fn matrices_that_do_not_fit_the_geometry_are_errors() {
        let g = Geometry::square(1, (4, 4, 2), 3, (1, 1, 1));
        let x = vec![0u8; 4 * 4 * 2];
        let k = 9 * 2;
        let copy = <[u8]>::copy_from_slice;
        let mut a = vec![0u8; 2 * k];
        assert!(im2col(&g, &x, 0..2, 0, k, 0, &mut a, copy).is_ok());
        // Past the last output pixel, a short row, channels beyond the input's, a
        // short image.
        assert!(im2col(&g, &x, 0..2, 15, k, 0, &mut a, copy).is_err());
        assert!(im2col(&g, &x, 0..2, 0, k - 1, 0, &mut a, copy).is_err());
        assert!(im2col(&g, &x, 1..3, 0, 9, 0, &mut a, copy).is_err());
        assert!(im2col(&g, &x[1..], 0..2, 0, k, 0, &mut a, copy).is_err());
        let mut image = vec![0u8; 4 * 4 * 2 - 1];
        assert!(col2im(&g, &a, 0, k, &mut image, copy).is_err());
    }

    #[test]
    fn pool_windows_are_clipped_to_the_input() {
        let params = PoolParams {
            padding: Padding::Explicit {
                top: 1,
                bottom: 3,
                left: 0,
                right: 1,
            },
            stride: (2, 2),
            filter: (3, 2),
            act: FusedActivation::None,
            nchw: false,
        };
        // Height 1 + 5 + 3: windows of 3 rows from -1, 1, 3 and 5 (the last entirely in
        // the padding); width 4 + 1: windows of 2 columns from 0 and 2.
        let g = params.geometry([1, 5, 4, 3], [1, 4, 2, 3]).unwrap();
        assert_eq!(
            (0..4).map(|oy| g.rows(oy)).collect::<Vec<_>>(),
            [0..2, 1..4, 3..5, 5..5]
        );
        assert_eq!(
            (0..2).map(|ox| g.cols(ox)).collect::<Vec<_>>(),
            [0..2, 2..4]
        );
        assert!(params.geometry([1, 5, 4, 3], [1, 4, 3, 3]).is_err());
    }
}
