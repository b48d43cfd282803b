//! Quantized convolutions: CONV_2D, GROUPED_CONV_2D, DEPTHWISE_CONV_2D and
//! TRANSPOSE_CONV_2D (uint8 and int8 activations; per-tensor uint8/int8 filters or
//! per-channel int8 filters; int32 biases).
//!
//! TFLite's reference arithmetic (`reference_ops::Conv`, `reference_integer_ops::
//! ConvPerChannel`, the depthwise and transpose variants): per output value
//! `acc = sum (x - x_zp) * (w - w_zp)` over the taps inside the input (taps in the
//! padding contribute nothing, as if the input were padded with its zero point),
//! `acc += bias`, then `MultiplyByQuantizedMultiplier(acc, M_c, shift_c)` with
//! `M_c = input_scale * filter_scale_c / output_scale` computed in double, plus the
//! output zero point, clamped to the fused activation's range.
//!
//! - CONV_2D / GROUPED_CONV_2D: a GEMM per group. Where the processor has 8-bit dot
//!   products (AVX512-VNNI) and the filter's values fit signed bytes, the
//!   [`super::gemm_u8i8`] GEMM on bytes (a 1x1, stride-1, unpadded uint8 convolution
//!   reads its input rows in place); otherwise the [`super::gemm`] GEMM on operands
//!   widened to i16. Others gather im2col tiles. Filters are packed, for the path this
//!   processor takes, when the weights are prepared.
//! - DEPTHWISE_CONV_2D: direct loops accumulating i32 over contiguous channel blocks
//!   (AVX2 on 16 channels, AVX-512 on 32 with the single-precision stage on 16 lanes,
//!   a portable loop elsewhere), then the vectorized requantizing stage.
//! - TRANSPOSE_CONV_2D: GEMM of the input with the repacked filter into per-pixel i32
//!   columns, scatter-added into an i32 accumulator of the output, then requantized.

use std::borrow::Cow;

use nnc_formats::nn::{FusedActivation, OperandType, OperationType, PaddingScheme};

use super::arith::{Multiplier, Q8, QType, activation_range};
use super::gemm::{self, Dst, Isa, MR, PackedRhs, Stage, pack_rhs, packed_len, padded_depth};
use super::gemm_u8i8;
use super::{activation_type, check_scale, for_row_tiles, output_type, q8_bytes, q8_bytes_mut, qp};
use crate::buffer::AlignedBuf;
use crate::error::{Result, RuntimeError};
use crate::kernels::conv::{Padding, window_extent};
use crate::kernels::util::{rank4, with_nhwc};
use crate::kernels::{Kernel, KernelContext, OpInfo, PreparedWeights, Requantization};

/// i16 values of A per GEMM tile (256 KiB): an im2col tile that stays in L2.
const A_TILE_BUDGET: usize = 1 << 17;

/// The quantization of a filter: element type, zero point (0 for per-channel filters)
/// and one multiplier per output channel (or one for all).
#[derive(Clone, Debug)]
pub(super) struct FilterQuant {
    pub qt: QType,
    pub zp: i32,
    pub multipliers: Vec<Multiplier>,
    /// The same ratios as single-precision scales, when requantizing in float.
    pub float_scales: Option<Vec<f32>>,
}

impl FilterQuant {
    /// The output stage of channels `c0..c0 + n`, in the operation's requantization.
    pub fn stage(
        &self,
        c0: usize,
        n: usize,
        bias: Option<&[i32]>,
        zp: i32,
        range: (i32, i32),
    ) -> Result<Stage> {
        let stage = Stage::new(n, bias, multipliers_of(&self.multipliers, c0, n), zp, range)?;
        match &self.float_scales {
            Some(scales) if scales.len() == 1 => stage.float_scales(scales),
            Some(scales) => stage.float_scales(&scales[c0..c0 + n]),
            None => Ok(stage),
        }
    }

    pub fn is_float(&self) -> bool {
        self.float_scales.is_some()
    }
}

/// Decodes a filter's quantization and the requantization multipliers
/// `input_scale * filter_scale_c / output_scale`, in the precision TFLite computes them:
/// per-channel multipliers (`PopulateConvolutionQuantizationParams`) entirely in double;
/// the per-tensor multiplier of uint8 convolutions and of FULLY_CONNECTED
/// (`GetQuantizedConvolutionMultipler`) from the float product `input_scale *
/// filter_scale`, divided in double.
pub(super) fn filter_quant(
    info: &OpInfo,
    filter_index: usize,
    channel_dim: u32,
    channels: Option<usize>,
) -> Result<FilterQuant> {
    let input = info.operand(0)?;
    let filter = info.operand(filter_index)?;
    let output = info.output_operand(0)?;
    check_scale(info, "input", input.scale)?;
    check_scale(info, "output", output.scale)?;
    let qt = QType::of_weights(filter.operand_type).ok_or_else(|| {
        info.unsupported(format!(
            "filter type {} with quantized input",
            filter.operand_type
        ))
    })?;
    let float_product = filter.operand_type != OperandType::TensorQuant8SymmPerChannel
        && (input.operand_type == OperandType::TensorQuant8Asymm
            || info.op_type() == OperationType::FullyConnected);
    let ratio = |filter_scale: f32| -> Result<Multiplier> {
        check_scale(info, "filter", filter_scale)?;
        let product = if float_product {
            f64::from(input.scale * filter_scale)
        } else {
            f64::from(input.scale) * f64::from(filter_scale)
        };
        Multiplier::new(product / f64::from(output.scale)).map_err(|e| info.invalid(e.to_string()))
    };
    // XNNPACK's order of single-precision operations.
    let float = info.requantization == Requantization::Float;
    let float_scale = |filter_scale: f32| input.scale * filter_scale / output.scale;
    if filter.operand_type == OperandType::TensorQuant8SymmPerChannel {
        let q = filter
            .channel_quant
            .as_ref()
            .ok_or_else(|| info.invalid("per-channel filter without its scales"))?;
        if q.channel_dim != channel_dim {
            return Err(info.invalid(format!(
                "per-channel filter quantized along dimension {}, expected {channel_dim}",
                q.channel_dim
            )));
        }
        if let Some(c) = channels
            && c != q.scales.len()
        {
            return Err(info.invalid(format!(
                "{} per-channel scales for {c} channels",
                q.scales.len()
            )));
        }
        Ok(FilterQuant {
            qt,
            zp: 0,
            multipliers: q.scales.iter().map(|&s| ratio(s)).collect::<Result<_>>()?,
            float_scales: float.then(|| q.scales.iter().map(|&s| float_scale(s)).collect()),
        })
    } else {
        Ok(FilterQuant {
            qt,
            zp: filter.zero_point,
            multipliers: vec![ratio(filter.scale)?],
            float_scales: float.then(|| vec![float_scale(filter.scale)]),
        })
    }
}

/// Filter bytes minus the zero point, as i16 (`[-255, 255]`).
#[inline(always)]
fn widen(qt: QType, zp: i32, b: u8) -> i16 {
    (qt.load(b) - zp) as i16
}

/// `dst[i] = src[i] - zp` as i16 for bytes of type `qt` (one loop per type, so it
/// vectorizes; compiled a second time for AVX2).
fn widen_bytes(qt: QType, zp: i32, src: &[u8], dst: &mut [i16]) {
    #[inline(always)]
    fn body(qt: QType, zp: i32, src: &[u8], dst: &mut [i16]) {
        // Values of 8-bit types lie in [-128, 255], so `v - zp` fits an i16.
        let zp = zp as i16;
        match qt {
            QType::U8 => {
                for (d, &v) in dst.iter_mut().zip(src) {
                    *d = i16::from(v).wrapping_sub(zp);
                }
            }
            QType::I8 => {
                for (d, &v) in dst.iter_mut().zip(src) {
                    *d = i16::from(v as i8).wrapping_sub(zp);
                }
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn avx2(qt: QType, zp: i32, src: &[u8], dst: &mut [i16]) {
        body(qt, zp, src, dst);
    }
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::isa::int8_avx2() {
        // SAFETY: AVX2 is available.
        return unsafe { avx2(qt, zp, src, dst) };
    }
    body(qt, zp, src, dst);
}

/// The multipliers of output channels `c0..c0 + n` (one shared, or per channel).
fn multipliers_of(all: &[Multiplier], c0: usize, n: usize) -> &[Multiplier] {
    if all.len() == 1 {
        all
    } else {
        &all[c0..c0 + n]
    }
}

#[derive(Clone, Debug)]
struct ConvParams {
    padding: Padding,
    /// (height, width)
    stride: (usize, usize),
    dilation: (usize, usize),
    act: FusedActivation,
    nchw: bool,
    groups: usize,
    multiplier: usize,
}

/// Decodes CONV_2D / DEPTHWISE_CONV_2D / GROUPED_CONV_2D parameters (the input counts
/// signature::infer accepts).
fn decode_conv(info: &OpInfo) -> Result<ConvParams> {
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
    let (padding, mut next) = if explicit {
        (
            Padding::Explicit {
                left: info.usize(3, "pad_left")?,
                right: info.usize(4, "pad_right")?,
                top: info.usize(5, "pad_top")?,
                bottom: info.usize(6, "pad_bottom")?,
            },
            7,
        )
    } else {
        let code = info.i32(3, "padding_scheme")?;
        let scheme = PaddingScheme::from_code(code)
            .ok_or_else(|| info.invalid(format!("unknown padding scheme {code}")))?;
        (Padding::Implicit(scheme), 4)
    };
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

/// Convolution sizes in NHWC terms.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    n: usize,
    ih: usize,
    iw: usize,
    ic: usize,
    oh: usize,
    ow: usize,
    oc: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    pad_top: usize,
    pad_left: usize,
}

impl Geometry {
    fn new(
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

    /// A 1x1, stride-1, unpadded convolution: its im2col rows are its input rows.
    fn is_pointwise(&self) -> bool {
        self.kh == 1
            && self.kw == 1
            && self.sh == 1
            && self.sw == 1
            && self.pad_top == 0
            && self.pad_left == 0
            && self.oh == self.ih
            && self.ow == self.iw
    }

    #[inline(always)]
    fn in_y(&self, oy: usize, ky: usize) -> Option<usize> {
        (oy * self.sh + ky * self.dh)
            .checked_sub(self.pad_top)
            .filter(|&y| y < self.ih)
    }

    #[inline(always)]
    fn in_x(&self, ox: usize, kx: usize) -> Option<usize> {
        (ox * self.sw + kx * self.dw)
            .checked_sub(self.pad_left)
            .filter(|&x| x < self.iw)
    }
}

/// Everything the requantizing stage needs, fixed at build time.
#[derive(Clone, Debug)]
struct OutputQuant {
    in_qt: QType,
    in_zp: i32,
    out_qt: QType,
    out_zp: i32,
    range: (i32, i32),
}

fn output_quant(info: &OpInfo, act: FusedActivation) -> Result<OutputQuant> {
    let in_qt = activation_type(info, 0)?;
    let out_qt = output_type(info, 0)?;
    if in_qt != out_qt {
        return Err(info.unsupported("input and output of different 8-bit types"));
    }
    let out = qp(info.output_operand(0)?);
    Ok(OutputQuant {
        in_qt,
        in_zp: info.operand(0)?.zero_point,
        out_qt,
        out_zp: out.zp,
        range: activation_range(act, out, out_qt),
    })
}

pub(super) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let filter_dims = if info.is_weight(1) {
        let dims = info
            .dims(1)
            .ok_or_else(|| info.invalid("constant filter with unknown dimensions"))?;
        Some(rank4(&dims, "filter")?)
    } else {
        None
    };
    if info.input_type(2)? != OperandType::TensorInt32 {
        return Err(info.unsupported("quantized convolution needs a TENSOR_INT32 bias"));
    }
    match info.op_type() {
        OperationType::TransposeConv2d => {
            let params = decode_transpose(info)?;
            let oq = output_quant(info, params.act)?;
            let channels = info.dims(1).map(|d| d[0]);
            let fq = filter_quant(info, 1, 0, channels)?;
            Ok(Box::new(TransposeConv {
                params,
                oq,
                fq,
                filter_dims,
            }))
        }
        OperationType::DepthwiseConv2d => {
            let params = decode_conv(info)?;
            let oq = output_quant(info, params.act)?;
            let channels = info.dims(1).map(|d| d[3]);
            let fq = filter_quant(info, 1, 3, channels)?;
            Ok(Box::new(DepthwiseConv {
                params,
                oq,
                fq,
                filter_dims,
                stage: ConstantStages::new(filter_dims.is_some() && info.is_weight(2)),
            }))
        }
        _ => {
            let params = decode_conv(info)?;
            let oq = output_quant(info, params.act)?;
            let channels = info.dims(1).map(|d| d[0]);
            let fq = filter_quant(info, 1, 0, channels)?;
            let bytes =
                filter_dims.is_some() && gemm_u8i8::available() && gemm_u8i8::fits(fq.qt, fq.zp);
            Ok(Box::new(Conv {
                params,
                oq,
                fq,
                filter_dims,
                bytes,
                stages: ConstantStages::new(filter_dims.is_some() && info.is_weight(2)),
            }))
        }
    }
}

/// Input `i`'s filter dims: from the build-time weight, else from the run-time tensor.
fn run_filter_dims(known: Option<[usize; 4]>, ctx: &KernelContext, i: usize) -> Result<[usize; 4]> {
    match (known, ctx.optional_input(i)) {
        (Some(d), _) => Ok(d),
        (None, Some(f)) => rank4(f.shape, "filter"),
        (None, None) => Err(RuntimeError::kernel("filter is missing")),
    }
}

/// The i16 view of a prepared buffer.
fn prepared_i16(weights: &PreparedWeights, index: usize) -> Result<&[i16]> {
    let buf = weights
        .buffer(index)
        .ok_or_else(|| RuntimeError::kernel("prepared filter is missing"))?;
    bytemuck::try_cast_slice(buf.as_bytes())
        .map_err(|e| RuntimeError::Internal(format!("prepared filter layout: {e:?}")))
}

fn i16_buffer(values: &[i16]) -> Result<AlignedBuf> {
    AlignedBuf::from_bytes(bytemuck::cast_slice(values))
}

/// The bias values (TENSOR_INT32), checked against the channel count.
fn bias_values<'a>(ctx: &KernelContext<'a>, channels: usize) -> Result<&'a [i32]> {
    let bias = ctx.input(2)?.i32()?;
    if bias.len() != channels {
        return Err(RuntimeError::kernel(format!(
            "bias of {} values for {channels} output channels",
            bias.len()
        )));
    }
    Ok(bias)
}

// ---------------------------------------------------------------------------------------
// CONV_2D and GROUPED_CONV_2D

struct Conv {
    params: ConvParams,
    oq: OutputQuant,
    fq: FilterQuant,
    filter_dims: Option<[usize; 4]>,
    /// The 8-bit dot-product path ([`gemm_u8i8`]): a constant filter whose values fit
    /// signed bytes, on a processor with the instructions.
    bytes: bool,
    /// The output stages of the groups, built at the first run when they depend only
    /// on constants (the filter, its sums, the bias).
    stages: ConstantStages,
}

/// Output stages built once, when everything they depend on is a constant operand.
struct ConstantStages {
    constant: bool,
    built: std::sync::OnceLock<Vec<Stage>>,
}

impl ConstantStages {
    fn new(constant: bool) -> ConstantStages {
        ConstantStages {
            constant,
            built: std::sync::OnceLock::new(),
        }
    }

    /// The stages: `build`'s, kept when constant (built again at every run otherwise).
    fn get_or_build<'a>(
        &'a self,
        fresh: &'a mut Option<Vec<Stage>>,
        build: impl FnOnce() -> Result<Vec<Stage>>,
    ) -> Result<&'a [Stage]> {
        if !self.constant {
            return Ok(fresh.insert(build()?));
        }
        if let Some(stages) = self.built.get() {
            return Ok(stages);
        }
        let stages = build()?;
        // Another execution may have set them meanwhile: they are equal.
        Ok(self.built.get_or_init(|| stages))
    }
}

/// Packs a filter `[O, KH, KW, Cg]` for [`gemm_u8i8`], one right operand per group
/// (`B[k][j] = w[g * og + j][k] - w_zp` as i8), concatenated, and each output channel's
/// column sum (for the zero-point correction).
fn pack_conv_filter_bytes(
    filter: &[u8],
    [o, kh, kw, cg]: [usize; 4],
    groups: usize,
    fq: &FilterQuant,
) -> Result<(zeroize::Zeroizing<Vec<u8>>, Vec<i32>)> {
    if filter.len() != o * kh * kw * cg {
        return Err(RuntimeError::kernel("filter does not match its shape"));
    }
    if groups == 0 || o % groups != 0 {
        return Err(RuntimeError::kernel(format!(
            "{o} output channels do not split into {groups} groups"
        )));
    }
    if !gemm_u8i8::fits(fq.qt, fq.zp) {
        return Err(RuntimeError::Internal(
            "8-bit filter packing for values that do not fit a signed byte".into(),
        ));
    }
    let k = kh * kw * cg;
    let og = o / groups;
    let per_group =
        gemm_u8i8::packed_len(k, og).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    let mut packed =
        zeroize::Zeroizing::new(crate::kernels::util::filled(per_group * groups, 0u8)?);
    let mut sums = Vec::with_capacity(o);
    for g in 0..groups {
        sums.extend(gemm_u8i8::pack_rhs(
            k,
            og,
            // fits() guarantees the value is in [-128, 127].
            |kk, j| (fq.qt.load(filter[(g * og + j) * k + kk]) - fq.zp) as i8,
            &mut packed[g * per_group..(g + 1) * per_group],
        ));
    }
    Ok((packed, sums))
}

/// Packs a filter `[O, KH, KW, Cg]` into one GEMM right operand per group
/// (`B[k][j] = w[g * og + j][k] - w_zp`, k over (ky, kx, c)), concatenated.
fn pack_conv_filter(
    filter: &[u8],
    [o, kh, kw, cg]: [usize; 4],
    groups: usize,
    fq: &FilterQuant,
) -> Result<zeroize::Zeroizing<Vec<i16>>> {
    if filter.len() != o * kh * kw * cg {
        return Err(RuntimeError::kernel("filter does not match its shape"));
    }
    if groups == 0 || o % groups != 0 {
        return Err(RuntimeError::kernel(format!(
            "{o} output channels do not split into {groups} groups"
        )));
    }
    let k = kh * kw * cg;
    let og = o / groups;
    let per_group = packed_len(k, og).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    let mut packed =
        zeroize::Zeroizing::new(crate::kernels::util::filled(per_group * groups, 0i16)?);
    for g in 0..groups {
        pack_rhs(
            k,
            og,
            |kk, j| widen(fq.qt, fq.zp, filter[(g * og + j) * k + kk]),
            &mut packed[g * per_group..(g + 1) * per_group],
        );
    }
    Ok(packed)
}

impl Kernel for Conv {
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        let mut prepared = PreparedWeights::empty();
        if let (Some(Some(filter)), Some(dims)) = (weights.get(1), self.filter_dims) {
            if self.bytes {
                let (packed, sums) =
                    pack_conv_filter_bytes(filter, dims, self.params.groups, &self.fq)?;
                prepared.push(AlignedBuf::from_bytes(&packed)?);
                prepared.push(AlignedBuf::from_bytes(bytemuck::cast_slice(&sums))?);
            } else {
                let packed = pack_conv_filter(filter, dims, self.params.groups, &self.fq)?;
                prepared.push(i16_buffer(&packed)?);
            }
        }
        prepared.add_raw(weights, &[1])?;
        Ok(prepared)
    }

    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let p = &self.params;
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let in_shape = rank4(input.shape, "input")?;
        let fdims = run_filter_dims(self.filter_dims, ctx, 1)?;
        let groups = p.groups;
        let filter = if self.bytes {
            let buffer = |i: usize, what: &str| {
                ctx.weights
                    .buffer(i)
                    .map(AlignedBuf::as_bytes)
                    .ok_or_else(|| RuntimeError::kernel(format!("prepared {what} is missing")))
            };
            let sums: &[i32] = bytemuck::try_cast_slice(buffer(1, "filter sums")?)
                .map_err(|e| RuntimeError::Internal(format!("prepared filter sums: {e:?}")))?;
            if sums.len() != fdims[0] {
                return Err(RuntimeError::kernel("filter sums do not match the filter"));
            }
            PackedFilter::Bytes {
                packed: buffer(0, "filter")?,
                sums,
            }
        } else if self.filter_dims.is_some() {
            PackedFilter::Wide(Cow::Borrowed(prepared_i16(ctx.weights, 0)?))
        } else {
            let f = ctx.input(1)?;
            let packed = pack_conv_filter(q8_bytes(&f, "filter")?, fdims, groups, &self.fq)?;
            PackedFilter::Wide(Cow::Owned(packed.to_vec()))
        };
        let bias = bias_values(ctx, fdims[0])?;
        if self.fq.multipliers.len() != 1 && self.fq.multipliers.len() != fdims[0] {
            return Err(RuntimeError::kernel(
                "per-channel scales do not match the filter",
            ));
        }
        // The input's zero point in the unsigned bytes the 8-bit GEMM reads.
        let a_zp = match self.oq.in_qt {
            QType::U8 => self.oq.in_zp,
            QType::I8 => self.oq.in_zp + 128,
        };
        let threads = ctx.threads;
        let (oq, fq) = (&self.oq, &self.fq);
        let out_t = ctx.output(0)?;
        let out_shape = rank4(out_t.shape, "output")?;
        let out = q8_bytes_mut(out_t, "output")?;
        with_nhwc(
            p.nchw,
            x,
            in_shape,
            out,
            out_shape,
            |x, in_shape, out, out_shape| {
                let g = Geometry::new(p, in_shape, (fdims[1], fdims[2]), out_shape)?;
                if g.oc != fdims[0] || fdims[3] * groups != g.ic || g.oc % groups != 0 {
                    return Err(RuntimeError::kernel(format!(
                        "filter {fdims:?} and {groups} groups do not fit input channels {} and output channels {}",
                        g.ic, g.oc
                    )));
                }
                let og = g.oc / groups;
                let mut fresh = None;
                let stages = self.stages.get_or_build(&mut fresh, || {
                    (0..groups)
                        .map(|grp| {
                            let columns = grp * og..(grp + 1) * og;
                            let bias = &bias[columns.clone()];
                            match &filter {
                                // The zero-point correction of the 8-bit path is part of
                                // the bias.
                                PackedFilter::Bytes { sums, .. } => {
                                    let corrected =
                                        gemm_u8i8::corrected_bias(Some(bias), &sums[columns], a_zp);
                                    fq.stage(grp * og, og, Some(&corrected), oq.out_zp, oq.range)
                                }
                                PackedFilter::Wide(_) => {
                                    fq.stage(grp * og, og, Some(bias), oq.out_zp, oq.range)
                                }
                            }
                        })
                        .collect()
                })?;
                match &filter {
                    PackedFilter::Bytes { packed, .. } => {
                        conv_nhwc_bytes(&g, groups, x, oq, a_zp, packed, stages, out, threads)
                    }
                    PackedFilter::Wide(packed) => {
                        conv_nhwc(&g, groups, x, oq, packed, stages, out, threads)
                    }
                }
            },
        )
    }
}

/// A convolution's filter as its GEMM reads it.
enum PackedFilter<'a> {
    /// Signed bytes for [`gemm_u8i8`], and each output channel's sum.
    Bytes { packed: &'a [u8], sums: &'a [i32] },
    /// i16 pairs for [`gemm`].
    Wide(Cow<'a, [i16]>),
}

/// [`conv_nhwc`] on the 8-bit dot-product path: im2col tiles of the input's bytes (taps
/// in the padding set to its zero point), or for a 1x1 stride-1 unpadded convolution
/// whose depth is a multiple of 4, the input rows in place; int8 bytes are offset by 128
/// as the GEMM reads them.
#[allow(clippy::too_many_arguments)]
fn conv_nhwc_bytes(
    g: &Geometry,
    groups: usize,
    x: &[u8],
    oq: &OutputQuant,
    a_zp: i32,
    packed: &[u8],
    stages: &[Stage],
    out: &mut [u8],
    threads: usize,
) -> Result<()> {
    let cg = g.ic / groups;
    let og = g.oc / groups;
    let k = g.kh * g.kw * cg;
    let kq = gemm_u8i8::quad_depth(k);
    let per_group =
        gemm_u8i8::packed_len(k, og).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    if packed.len() != per_group * groups || x.len() != g.n * g.ih * g.iw * g.ic {
        return Err(RuntimeError::kernel(
            "packed filter or input has the wrong size",
        ));
    }
    let rows = g.n * g.oh * g.ow;
    if out.len() != rows * g.oc {
        return Err(RuntimeError::kernel("output has the wrong size"));
    }
    let signed = oq.out_qt == QType::I8;
    // Bytes of A per tile: the same L2 budget as the i16 path's.
    let tile = (2 * A_TILE_BUDGET / kq.max(1)).max(gemm_u8i8::MR) / gemm_u8i8::MR * gemm_u8i8::MR;
    let tile = tile.min(rows.max(1));
    let rhs = |grp: usize| gemm_u8i8::PackedRhs {
        data: &packed[grp * per_group..(grp + 1) * per_group],
        k,
        n: og,
    };
    let flip = if oq.in_qt == QType::I8 { 0x80 } else { 0 };
    if groups == 1 && g.is_pointwise() && kq == k {
        return for_row_tiles::<u8, u8>(threads, out, g.oc, tile, 0, |r0, out_rows, _| {
            let t = out_rows.len() / g.oc.max(1);
            let a = &x[r0 * g.ic..(r0 + t) * g.ic];
            let (rhs, stage) = (&rhs(0), &stages[0]);
            gemm_u8i8::gemm(true, a, flip, g.ic, t, rhs, out_rows, g.oc, stage, signed)
        });
    }
    // The zero point as the input stores it (the GEMM flips it with the rest).
    let pad = (a_zp as u8) ^ flip;
    for_row_tiles(
        threads,
        out,
        g.oc,
        tile,
        tile * kq,
        |r0, out_rows, a: &mut [u8]| {
            let t = out_rows.len() / g.oc.max(1);
            let a = &mut a[..t * kq];
            for grp in 0..groups {
                im2col_bytes(g, x, pad, grp * cg, cg, r0, kq, a);
                gemm_u8i8::gemm(
                    true,
                    a,
                    flip,
                    kq,
                    t,
                    &rhs(grp),
                    &mut out_rows[grp * og..],
                    g.oc,
                    &stages[grp],
                    signed,
                )?;
            }
            Ok(())
        },
    )
}

/// [`im2col`] in the input's own bytes for [`gemm_u8i8`]: rows r0.. of `kq` bytes,
/// ordered (ky, kx, c), channels `c0..c0 + cg`; taps outside the input hold `pad` (the
/// input's zero point, so they contribute nothing after the correction).
#[allow(clippy::too_many_arguments)]
fn im2col_bytes(
    g: &Geometry,
    x: &[u8],
    pad: u8,
    c0: usize,
    cg: usize,
    r0: usize,
    kq: usize,
    a: &mut [u8],
) {
    let k = g.kh * g.kw * cg;
    let pointwise = g.is_pointwise();
    let contiguous = g.dw == 1 && cg == g.ic;
    for (r, dst) in a.chunks_exact_mut(kq).enumerate() {
        dst[k..].fill(0);
        let row = r0 + r;
        if pointwise {
            dst[..cg].copy_from_slice(&x[row * g.ic + c0..][..cg]);
            continue;
        }
        let ox = row % g.ow;
        let oy = (row / g.ow) % g.oh;
        let b = row / (g.ow * g.oh);
        for ky in 0..g.kh {
            let drow = &mut dst[ky * g.kw * cg..(ky + 1) * g.kw * cg];
            let Some(iy) = g.in_y(oy, ky) else {
                drow.fill(pad);
                continue;
            };
            let base = (b * g.ih + iy) * g.iw;
            if contiguous {
                let start = ox * g.sw;
                let kx0 = g.pad_left.saturating_sub(start).min(g.kw);
                let kx1 = (g.iw + g.pad_left).saturating_sub(start).min(g.kw).max(kx0);
                drow[..kx0 * cg].fill(pad);
                drow[kx1 * cg..].fill(pad);
                if kx1 > kx0 {
                    let ix0 = start + kx0 - g.pad_left;
                    let src = &x[(base + ix0) * g.ic..(base + ix0 + kx1 - kx0) * g.ic];
                    drow[kx0 * cg..kx1 * cg].copy_from_slice(src);
                }
            } else {
                for kx in 0..g.kw {
                    let d = &mut drow[kx * cg..(kx + 1) * cg];
                    match g.in_x(ox, kx) {
                        Some(ix) => d.copy_from_slice(&x[(base + ix) * g.ic + c0..][..cg]),
                        None => d.fill(pad),
                    }
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn conv_nhwc(
    g: &Geometry,
    groups: usize,
    x: &[u8],
    oq: &OutputQuant,
    packed: &[i16],
    stages: &[Stage],
    out: &mut [u8],
    threads: usize,
) -> Result<()> {
    let cg = g.ic / groups;
    let og = g.oc / groups;
    let k = g.kh * g.kw * cg;
    let kp = padded_depth(k);
    let per_group = packed_len(k, og).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    if packed.len() != per_group * groups || x.len() != g.n * g.ih * g.iw * g.ic {
        return Err(RuntimeError::kernel(
            "packed filter or input has the wrong size",
        ));
    }
    let rows = g.n * g.oh * g.ow;
    if out.len() != rows * g.oc {
        return Err(RuntimeError::kernel("output has the wrong size"));
    }
    let tile = (A_TILE_BUDGET / kp.max(1)).max(MR) / MR * MR;
    let tile = tile.min(rows.max(1));
    let signed = oq.out_qt == QType::I8;
    let (qt, zp) = (oq.in_qt, oq.in_zp);
    for_row_tiles(threads, out, g.oc, tile, tile * kp, |r0, out_rows, a| {
        let t = out_rows.len() / g.oc.max(1);
        let a = &mut a[..t * kp];
        for grp in 0..groups {
            match qt {
                QType::U8 => im2col::<u8>(g, super::typed(x), zp, grp * cg, cg, r0, kp, a),
                QType::I8 => im2col::<i8>(g, super::typed(x), zp, grp * cg, cg, r0, kp, a),
            }
            let rhs = PackedRhs {
                data: &packed[grp * per_group..(grp + 1) * per_group],
                k,
                n: og,
            };
            gemm::gemm(
                a,
                kp,
                t,
                &rhs,
                Dst::Q8 {
                    out: &mut out_rows[grp * og..],
                    ld: g.oc,
                    stage: &stages[grp],
                    signed,
                },
            )?;
        }
        Ok(())
    })
}

/// `dst[i] = src[i] - zp` as i16.
#[inline(always)]
fn widen_into<T: Q8>(dst: &mut [i16], src: &[T], zp: i32) {
    for (d, &v) in dst.iter_mut().zip(src) {
        *d = (v.to_i32() - zp) as i16;
    }
}

/// Fills `a` (rows r0.. of the im2col matrix, `kp` values each, ordered (ky, kx, c)) for
/// channels `c0..c0 + cg`, widened minus the zero point; taps outside the input are 0
/// (`x_zp - x_zp`). A 1x1 stride-1 unpadded convolution's rows are its input rows.
#[allow(clippy::too_many_arguments)]
fn im2col<T: Q8>(
    g: &Geometry,
    x: &[T],
    zp: i32,
    c0: usize,
    cg: usize,
    r0: usize,
    kp: usize,
    a: &mut [i16],
) {
    let k = g.kh * g.kw * cg;
    let pointwise = g.is_pointwise();
    // With unit dilation and all channels, a kernel row is one contiguous input span.
    let contiguous = g.dw == 1 && cg == g.ic;
    for (r, dst) in a.chunks_exact_mut(kp).enumerate() {
        dst[k..].fill(0);
        let row = r0 + r;
        if pointwise {
            widen_into(&mut dst[..cg], &x[row * g.ic + c0..][..cg], zp);
            continue;
        }
        let ox = row % g.ow;
        let oy = (row / g.ow) % g.oh;
        let b = row / (g.ow * g.oh);
        for ky in 0..g.kh {
            let drow = &mut dst[ky * g.kw * cg..(ky + 1) * g.kw * cg];
            let Some(iy) = g.in_y(oy, ky) else {
                drow.fill(0);
                continue;
            };
            let base = (b * g.ih + iy) * g.iw;
            if contiguous {
                // Valid kx range: 0 <= ox * sw + kx - pad_left < iw.
                let start = ox * g.sw;
                let kx0 = g.pad_left.saturating_sub(start).min(g.kw);
                let kx1 = (g.iw + g.pad_left).saturating_sub(start).min(g.kw).max(kx0);
                drow[..kx0 * cg].fill(0);
                drow[kx1 * cg..].fill(0);
                if kx1 > kx0 {
                    let ix0 = start + kx0 - g.pad_left;
                    let src = &x[(base + ix0) * g.ic..(base + ix0 + kx1 - kx0) * g.ic];
                    widen_into(&mut drow[kx0 * cg..kx1 * cg], src, zp);
                }
            } else {
                for kx in 0..g.kw {
                    let d = &mut drow[kx * cg..(kx + 1) * cg];
                    match g.in_x(ox, kx) {
                        Some(ix) => widen_into(d, &x[(base + ix) * g.ic + c0..][..cg], zp),
                        None => d.fill(0),
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// DEPTHWISE_CONV_2D

struct DepthwiseConv {
    params: ConvParams,
    oq: OutputQuant,
    fq: FilterQuant,
    filter_dims: Option<[usize; 4]>,
    /// The output stage, built once when the bias is a constant.
    stage: ConstantStages,
}

/// The filter `[1, KH, KW, OC]` minus its zero point, as i16 in the same order.
fn widen_filter(filter: &[u8], fq: &FilterQuant) -> Result<zeroize::Zeroizing<Vec<i16>>> {
    let mut w = zeroize::Zeroizing::new(crate::kernels::util::filled(filter.len(), 0i16)?);
    for (d, &b) in w.iter_mut().zip(filter) {
        *d = widen(fq.qt, fq.zp, b);
    }
    Ok(w)
}

/// The depthwise filter for the AVX2 kernel: per block of 16 channels and per pair of
/// taps `(2p, 2p + 1)` (a missing last tap is zero), the weights interleaved exactly as
/// `vpunpcklwd` / `vpunpckhwd` interleave the two taps' inputs: 16 values for channels
/// {0-3, 8-11} then 16 for {4-7, 12-15}, each channel's two taps adjacent. Channels past
/// the last whole block are not packed (a scalar loop handles them).
fn pack_depthwise_pairs(w: &[i16], taps: usize, oc: usize) -> Result<Vec<i16>> {
    if w.len() != taps * oc {
        return Err(RuntimeError::kernel("filter does not match its shape"));
    }
    let blocks = oc / DW_BLOCK;
    let pairs = taps.div_ceil(2);
    let mut out = crate::kernels::util::filled(blocks * pairs * 2 * DW_BLOCK, 0i16)?;
    for b in 0..blocks {
        for p in 0..pairs {
            let dst = &mut out[(b * pairs + p) * 2 * DW_BLOCK..][..2 * DW_BLOCK];
            for (i, d) in dst.iter_mut().enumerate() {
                let (half, i) = (i / DW_BLOCK, i % DW_BLOCK);
                let (lane, j) = (i / 8, i % 8);
                let ch = b * DW_BLOCK + lane * 8 + half * 4 + j / 2;
                let tap = 2 * p + j % 2;
                *d = if tap < taps { w[tap * oc + ch] } else { 0 };
            }
        }
    }
    Ok(out)
}

/// Per output pixel of row `row`, the window offset of every tap (None: padding), each
/// checked to hold a whole pixel; None if a tap falls outside the window (which holds
/// input rows `y0..` of the row's image).
fn tap_offsets(
    g: &Geometry,
    window_len: usize,
    y0: usize,
    row: usize,
    npairs: usize,
) -> Option<Vec<Option<usize>>> {
    let oy = row % g.oh;
    let mut offsets = vec![None; g.ow * 2 * npairs];
    for ox in 0..g.ow {
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                if let (Some(iy), Some(ix)) = (g.in_y(oy, ky), g.in_x(ox, kx)) {
                    let wy = iy.checked_sub(y0)?;
                    let at = (wy * g.iw + ix) * g.ic;
                    if at + g.ic > window_len {
                        return None;
                    }
                    offsets[ox * 2 * npairs + ky * g.kw + kx] = Some(at);
                }
            }
        }
    }
    Some(offsets)
}

/// One output row of a depth-multiplier-1 depthwise convolution, whole blocks of 16
/// channels, with the widest vectors this processor has: per pixel and block, the input
/// of pairs of taps (already widened to i16 minus the zero point) interleaved and
/// multiplied with `vpmaddwd` into i32 (exact: both operands lie in [-255, 255]), then
/// the vectorized requantizing stage. Taps in the padding contribute zero.
///
/// `window` holds input rows `y0..` of the row's image, widened. Returns false (having
/// written nothing) if a tap falls outside the window or a size does not fit.
///
/// # Safety
/// AVX2 is available.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn depthwise_row_pairs(
    g: &Geometry,
    window: &[i16],
    y0: usize,
    pairs: &[i16],
    row: usize,
    stage: &Stage,
    out_row: &mut [u8],
    signed_out: bool,
) -> bool {
    let taps = g.kh * g.kw;
    let npairs = taps.div_ceil(2);
    let blocks = g.oc / DW_BLOCK;
    if out_row.len() != g.ow * g.oc
        || pairs.len() != blocks * npairs * 2 * DW_BLOCK
        || g.ic != g.oc
        || stage.columns() != g.oc
    {
        return false;
    }
    let Some(offsets) = tap_offsets(g, window.len(), y0, row, npairs) else {
        return false;
    };
    let rows = DepthwiseRow {
        g,
        window,
        offsets: &offsets,
        pairs,
        npairs,
        stage,
        signed_out,
    };
    if crate::kernels::isa::int8_vnni() {
        // SAFETY: AVX512F/BW are available (int8_vnni implies them); the sizes and
        // offsets were checked above.
        unsafe { rows.avx512(out_row) }
    } else {
        // SAFETY: AVX2 (the caller's contract); as above.
        unsafe { rows.avx2(out_row, 0) }
    }
    true
}

/// One row's operands, checked by [`depthwise_row_pairs`].
#[cfg(target_arch = "x86_64")]
struct DepthwiseRow<'a> {
    g: &'a Geometry,
    window: &'a [i16],
    /// [`tap_offsets`] of the row.
    offsets: &'a [Option<usize>],
    pairs: &'a [i16],
    npairs: usize,
    stage: &'a Stage,
    signed_out: bool,
}

/// One super-block of 32 channels: its first channel, where its two packed blocks of
/// 16 start, and their output stages.
#[cfg(target_arch = "x86_64")]
struct SuperBlock {
    c0: usize,
    wa: usize,
    wb: usize,
    f0: gemm::avx512::Float16,
    f1: gemm::avx512::Float16,
}

#[cfg(target_arch = "x86_64")]
impl DepthwiseRow<'_> {
    /// Blocks of 32 channels in 512-bit registers (two packed blocks of 16 side by
    /// side), the single-precision stage on 16 lanes; a last block of 16 and the
    /// fixed-point stages through [`Self::avx2`].
    ///
    /// # Safety
    /// AVX512F, AVX512BW and AVX2; the sizes checked by [`depthwise_row_pairs`].
    #[target_feature(enable = "avx512f,avx512bw,avx2")]
    unsafe fn avx512(&self, out_row: &mut [u8]) {
        let Some(float) = self.stage.float_constants() else {
            // SAFETY: forwarded.
            return unsafe { self.avx2(out_row, 0) };
        };
        let (g, npairs) = (self.g, self.npairs);
        let supers = g.oc / (2 * DW_BLOCK);
        for sb in 0..supers {
            let c0 = sb * 2 * DW_BLOCK;
            // The packed blocks 2 sb and 2 sb + 1: per pair, 16 values for the low
            // half of each 128-bit lane, then 16 for the high half.
            let (wa, wb) = (
                2 * sb * npairs * 2 * DW_BLOCK,
                (2 * sb + 1) * npairs * 2 * DW_BLOCK,
            );
            // SAFETY: the stage arrays are padded to whole panels of 16 (c0 + 32 <= oc).
            let (f0, f1) = unsafe {
                (
                    gemm::avx512::Float16::load(&float, c0),
                    gemm::avx512::Float16::load(&float, c0 + 16),
                )
            };
            let block = SuperBlock { c0, wa, wb, f0, f1 };
            // SAFETY (each call): as this function's; the super-block is inside oc.
            unsafe {
                match npairs {
                    // 3x3 filters: the weights of all five pairs held in registers.
                    5 => self.super_block::<5>(&block, out_row),
                    1 => self.super_block::<1>(&block, out_row),
                    2 => self.super_block::<2>(&block, out_row),
                    _ => self.super_block::<0>(&block, out_row),
                }
            }
        }
        // SAFETY: forwarded; the blocks before 2 * supers are done.
        unsafe { self.avx2(out_row, 2 * supers) }
    }

    /// Every pixel of the row for one super-block of 32 channels. `NP` > 0: the filter
    /// has exactly `NP` pairs of taps, whose weights are loaded once and held in
    /// registers across the row (the loop over pairs unrolls); 0: any count, weights
    /// loaded per pixel.
    ///
    /// # Safety
    /// As [`Self::avx512`]; `block` lies inside the channels.
    #[target_feature(enable = "avx512f,avx512bw,avx2")]
    #[inline]
    unsafe fn super_block<const NP: usize>(&self, block: &SuperBlock, out_row: &mut [u8]) {
        use std::arch::x86_64::*;
        let (g, npairs) = (self.g, self.npairs);
        debug_assert!(NP == 0 || NP == npairs);
        let (oc, c0) = (g.oc, block.c0);
        let zeros = [0i16; 2 * DW_BLOCK];
        let window = self.window;
        let load = |at: Option<usize>| -> __m512i {
            // SAFETY: a tap offset starts a whole pixel inside the window (checked) and
            // c0 + 32 <= ic; otherwise 32 zeros (the padding minus the zero point).
            unsafe {
                match at {
                    Some(o) => _mm512_loadu_si512(window.as_ptr().add(o + c0) as *const _),
                    None => _mm512_loadu_si512(zeros.as_ptr() as *const _),
                }
            }
        };
        // Pair p's weights: the packed blocks' 16 values for the low half of each
        // 128-bit lane side by side, then those for the high half.
        let weights = |p: usize| -> (__m512i, __m512i) {
            // SAFETY: both packed blocks hold npairs * 32 values at wa and wb.
            unsafe {
                let at = |base: usize, half: usize| {
                    _mm256_loadu_si256(
                        self.pairs.as_ptr().add(base + p * 32 + half) as *const __m256i
                    )
                };
                (
                    _mm512_inserti64x4::<1>(
                        _mm512_castsi256_si512(at(block.wa, 0)),
                        at(block.wb, 0),
                    ),
                    _mm512_inserti64x4::<1>(
                        _mm512_castsi256_si512(at(block.wa, 16)),
                        at(block.wb, 16),
                    ),
                )
            }
        };
        let mut held = [(_mm512_setzero_si512(), _mm512_setzero_si512()); 8];
        for (p, w) in held.iter_mut().enumerate().take(NP) {
            *w = weights(p);
        }
        // Qwords of the two accumulators (lo: channels {0-3 | 8-11 | 16-19 | 24-27},
        // hi: {4-7 | 12-15 | 20-23 | 28-31}) in channel order: 0-15, then 16-31.
        let first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
        let second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
        let pairs = if NP > 0 { NP } else { npairs };
        for ox in 0..g.ow {
            let taps_at = &self.offsets[ox * 2 * npairs..(ox + 1) * 2 * npairs];
            let mut acc_lo = _mm512_setzero_si512();
            let mut acc_hi = _mm512_setzero_si512();
            for p in 0..pairs {
                let x0 = load(taps_at[2 * p]);
                let x1 = load(taps_at[2 * p + 1]);
                let (wl, wh) = if NP > 0 { held[p] } else { weights(p) };
                acc_lo =
                    _mm512_add_epi32(acc_lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(x0, x1), wl));
                acc_hi =
                    _mm512_add_epi32(acc_hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(x0, x1), wh));
            }
            let v0 = _mm512_permutex2var_epi64(acc_lo, first, acc_hi);
            let v1 = _mm512_permutex2var_epi64(acc_lo, second, acc_hi);
            let dst = &mut out_row[ox * oc + c0..ox * oc + c0 + 2 * DW_BLOCK];
            // SAFETY: dst holds 32 bytes.
            unsafe {
                _mm_storeu_si128(dst.as_mut_ptr() as *mut __m128i, block.f0.requantize(v0));
                _mm_storeu_si128(
                    dst.as_mut_ptr().add(16) as *mut __m128i,
                    block.f1.requantize(v1),
                );
            }
        }
    }

    /// Blocks `from_block..` of 16 channels in 256-bit registers.
    ///
    /// # Safety
    /// AVX2; the sizes checked by [`depthwise_row_pairs`].
    #[target_feature(enable = "avx2")]
    unsafe fn avx2(&self, out_row: &mut [u8], from_block: usize) {
        use std::arch::x86_64::*;
        let (g, npairs, pairs, stage, signed_out) =
            (self.g, self.npairs, self.pairs, self.stage, self.signed_out);
        let oc = g.oc;
        let blocks = oc / DW_BLOCK;
        let window = self.window;
        let offsets = self.offsets;
        let zeros = [0i16; DW_BLOCK];
        let load = |at: Option<usize>, c0: usize| -> __m256i {
            // SAFETY: a tap offset starts a whole pixel inside the window (checked above) and
            // c0 + 16 <= ic; otherwise 16 zeros (the padding minus the zero point) are read.
            unsafe {
                match at {
                    Some(o) => _mm256_loadu_si256(window.as_ptr().add(o + c0) as *const __m256i),
                    None => _mm256_loadu_si256(zeros.as_ptr() as *const __m256i),
                }
            }
        };
        for blk in from_block..blocks {
            let c0 = blk * DW_BLOCK;
            // SAFETY: the stage is padded to whole blocks of 16 channels.
            let (s0, s1) = unsafe {
                (
                    gemm::avx2::load_stage(stage, c0),
                    gemm::avx2::load_stage(stage, c0 + 8),
                )
            };
            let wb = &pairs[blk * npairs * 2 * DW_BLOCK..(blk + 1) * npairs * 2 * DW_BLOCK];
            for ox in 0..g.ow {
                let taps_at = &offsets[ox * 2 * npairs..(ox + 1) * 2 * npairs];
                let mut acc_lo = _mm256_setzero_si256();
                let mut acc_hi = _mm256_setzero_si256();
                for p in 0..npairs {
                    let x0 = load(taps_at[2 * p], c0);
                    let x1 = load(taps_at[2 * p + 1], c0);
                    // SAFETY: wb holds npairs * 32 values.
                    let (wl, wh) = unsafe {
                        (
                            _mm256_loadu_si256(wb.as_ptr().add(p * 32) as *const __m256i),
                            _mm256_loadu_si256(wb.as_ptr().add(p * 32 + 16) as *const __m256i),
                        )
                    };
                    acc_lo = _mm256_add_epi32(
                        acc_lo,
                        _mm256_madd_epi16(_mm256_unpacklo_epi16(x0, x1), wl),
                    );
                    acc_hi = _mm256_add_epi32(
                        acc_hi,
                        _mm256_madd_epi16(_mm256_unpackhi_epi16(x0, x1), wh),
                    );
                }
                // acc_lo holds channels {0-3 | 8-11}, acc_hi {4-7 | 12-15}.
                let v0 = _mm256_permute2x128_si256(acc_lo, acc_hi, 0x20);
                let v1 = _mm256_permute2x128_si256(acc_lo, acc_hi, 0x31);
                let bytes = gemm::avx2::narrow16(
                    gemm::avx2::requant8(v0, &s0),
                    gemm::avx2::requant8(v1, &s1),
                    signed_out,
                );
                let dst = &mut out_row[ox * oc + c0..ox * oc + c0 + DW_BLOCK];
                // SAFETY: dst holds 16 bytes.
                unsafe { _mm_storeu_si128(dst.as_mut_ptr() as *mut __m128i, bytes) };
            }
        }
    }
}

/// i16 values of the widened input window of the vectorized depthwise kernel (128 KiB):
/// the rows a band of output rows reads, kept in L2.
const DW_WINDOW_BUDGET: usize = 1 << 16;

/// Channels `c0..oc` of one depth-multiplier-1 output row, one at a time.
#[allow(clippy::too_many_arguments)]
fn depthwise_tail<T: Q8>(
    g: &Geometry,
    x: &[T],
    zp: i32,
    w: &[i16],
    row: usize,
    c0: usize,
    stage: &Stage,
    out_row: &mut [u8],
) {
    let b = row / g.oh;
    let oy = row % g.oh;
    for ox in 0..g.ow {
        for c in c0..g.oc {
            let mut acc = 0i32;
            for ky in 0..g.kh {
                let Some(iy) = g.in_y(oy, ky) else { continue };
                for kx in 0..g.kw {
                    let Some(ix) = g.in_x(ox, kx) else { continue };
                    let xv = x[((b * g.ih + iy) * g.iw + ix) * g.ic + c].to_i32() - zp;
                    acc += xv * i32::from(w[(ky * g.kw + kx) * g.oc + c]);
                }
            }
            out_row[ox * g.oc + c] = stage.apply(c, acc) as u8;
        }
    }
}

impl Kernel for DepthwiseConv {
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        let mut prepared = PreparedWeights::empty();
        if let (Some(Some(bytes)), Some(dims)) = (weights.get(1), self.filter_dims) {
            if bytes.len() != dims.iter().product::<usize>() {
                return Err(RuntimeError::kernel("filter does not match its shape"));
            }
            let w = widen_filter(bytes, &self.fq)?;
            prepared.push(i16_buffer(&w)?);
            let pairs = pack_depthwise_pairs(&w, dims[1] * dims[2], dims[3])?;
            prepared.push(i16_buffer(&pairs)?);
        }
        prepared.add_raw(weights, &[1])?;
        Ok(prepared)
    }

    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let p = &self.params;
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let in_shape = rank4(input.shape, "input")?;
        let fdims = run_filter_dims(self.filter_dims, ctx, 1)?;
        let (w, pairs): (Cow<[i16]>, Cow<[i16]>) = if self.filter_dims.is_some() {
            (
                Cow::Borrowed(prepared_i16(ctx.weights, 0)?),
                Cow::Borrowed(prepared_i16(ctx.weights, 1)?),
            )
        } else {
            let f = ctx.input(1)?;
            let w = widen_filter(q8_bytes(&f, "filter")?, &self.fq)?;
            let pairs = pack_depthwise_pairs(&w, fdims[1] * fdims[2], fdims[3])?;
            (Cow::Owned(w.to_vec()), Cow::Owned(pairs.to_vec()))
        };
        let bias = bias_values(ctx, fdims[3])?;
        let mut fresh = None;
        let stage = &self.stage.get_or_build(&mut fresh, || {
            Ok(vec![self.fq.stage(
                0,
                fdims[3],
                Some(bias),
                self.oq.out_zp,
                self.oq.range,
            )?])
        })?[0];
        let threads = ctx.threads;
        let oq = &self.oq;
        let out_t = ctx.output(0)?;
        let out_shape = rank4(out_t.shape, "output")?;
        let out = q8_bytes_mut(out_t, "output")?;
        with_nhwc(
            p.nchw,
            x,
            in_shape,
            out,
            out_shape,
            |x, in_shape, out, out_shape| {
                let g = Geometry::new(p, in_shape, (fdims[1], fdims[2]), out_shape)?;
                let m = p.multiplier;
                if fdims[0] != 1
                    || fdims[3] != g.oc
                    || g.ic * m != g.oc
                    || w.len() != fdims.iter().product::<usize>()
                {
                    return Err(RuntimeError::kernel(format!(
                        "filter {fdims:?} and depth multiplier {m} do not fit input channels {} and output channels {}",
                        g.ic, g.oc
                    )));
                }
                if x.len() != g.n * g.ih * g.iw * g.ic || out.len() != g.n * g.oh * g.ow * g.oc {
                    return Err(RuntimeError::kernel("input or output has the wrong size"));
                }
                let taps = g.kh * g.kw;
                if pairs.len() != (g.oc / DW_BLOCK) * taps.div_ceil(2) * 2 * DW_BLOCK {
                    return Err(RuntimeError::kernel(
                        "packed depthwise filter has the wrong size",
                    ));
                }
                let row_len = g.ow * g.oc;
                let signed = oq.out_qt == QType::I8;
                let isa = gemm::best_isa();
                let fast = cfg!(target_arch = "x86_64")
                    && isa != Isa::Portable
                    && m == 1
                    && g.oc >= DW_BLOCK;
                // The vectorized path reads a window of input rows widened to i16 minus
                // the zero point (each value is read about kh * kw / (sh * sw) times),
                // refilled as the output rows advance: at least the rows one output row
                // needs, up to the budget.
                let pixel_row = g.iw * g.ic;
                let needed = (g.kh - 1) * g.dh + 1;
                let window_rows =
                    (DW_WINDOW_BUDGET / pixel_row.max(1)).clamp(needed, g.ih.max(needed));
                let band = (window_rows.saturating_sub(needed) / g.sh + 1).max(1);
                let scratch = if fast { window_rows * pixel_row } else { 0 };
                let tile = if fast { band } else { 1 };
                for_row_tiles(
                    threads,
                    out,
                    row_len,
                    tile,
                    scratch,
                    |r0, out_rows, window| {
                        #[cfg(target_arch = "x86_64")]
                        if fast {
                            let done = g.oc / DW_BLOCK * DW_BLOCK;
                            // The window's image and first row; None until filled.
                            let mut held: Option<(usize, usize, usize)> = None;
                            for (i, out_row) in out_rows.chunks_exact_mut(row_len).enumerate() {
                                let row = r0 + i;
                                let (b, oy) = (row / g.oh, row % g.oh);
                                let lo = (oy * g.sh).saturating_sub(g.pad_top).min(g.ih);
                                let hi = (oy * g.sh + needed).saturating_sub(g.pad_top).min(g.ih);
                                let covered = matches!(held, Some((hb, y0, y1)) if hb == b && y0 <= lo && hi <= y1);
                                if !covered {
                                    let y1 = (lo + window_rows).min(g.ih);
                                    let src = &x
                                        [(b * g.ih + lo) * pixel_row..(b * g.ih + y1) * pixel_row];
                                    widen_bytes(oq.in_qt, oq.in_zp, src, window);
                                    held = Some((b, lo, y1));
                                }
                                let (_, y0, y1) = held.unwrap_or((b, lo, lo));
                                let filled = &window[..(y1 - y0) * pixel_row];
                                // SAFETY: AVX2 is available (best_isa); the kernel checks its
                                // offsets against the window and its other sizes.
                                let ok = unsafe {
                                    depthwise_row_pairs(
                                        &g, filled, y0, &pairs, row, stage, out_row, signed,
                                    )
                                };
                                if !ok {
                                    return Err(RuntimeError::Internal(
                                        "depthwise window does not cover the taps".into(),
                                    ));
                                }
                                if done < g.oc {
                                    match oq.in_qt {
                                        QType::U8 => depthwise_tail::<u8>(
                                            &g,
                                            super::typed(x),
                                            oq.in_zp,
                                            &w,
                                            row,
                                            done,
                                            stage,
                                            out_row,
                                        ),
                                        QType::I8 => depthwise_tail::<i8>(
                                            &g,
                                            super::typed(x),
                                            oq.in_zp,
                                            &w,
                                            row,
                                            done,
                                            stage,
                                            out_row,
                                        ),
                                    }
                                }
                            }
                            return Ok(());
                        }
                        let out_row = out_rows;
                        let row = r0;
                        let mut acc = vec![0i32; g.oc];
                        match oq.in_qt {
                            QType::U8 => depthwise_row::<u8>(
                                &g,
                                m,
                                super::typed(x),
                                oq.in_zp,
                                &w,
                                row,
                                &mut acc,
                                stage,
                                out_row,
                                signed,
                            ),
                            QType::I8 => depthwise_row::<i8>(
                                &g,
                                m,
                                super::typed(x),
                                oq.in_zp,
                                &w,
                                row,
                                &mut acc,
                                stage,
                                out_row,
                                signed,
                            ),
                        }
                        Ok(())
                    },
                )
            },
        )
    }
}

/// One output row (batch b, row oy = `row`): accumulate, then requantize per pixel.
#[allow(clippy::too_many_arguments)]
fn depthwise_row<T: Q8>(
    g: &Geometry,
    m: usize,
    x: &[T],
    zp: i32,
    w: &[i16],
    row: usize,
    acc: &mut [i32],
    stage: &Stage,
    out_row: &mut [u8],
    signed: bool,
) {
    let isa = gemm::best_isa();
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 {
        // SAFETY: AVX2 is available (best_isa checked it at run time).
        unsafe { depthwise_row_avx2(g, m, x, zp, w, row, acc, stage, out_row, signed) };
        return;
    }
    depthwise_row_impl(isa, g, m, x, zp, w, row, acc, stage, out_row, signed);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn depthwise_row_avx2<T: Q8>(
    g: &Geometry,
    m: usize,
    x: &[T],
    zp: i32,
    w: &[i16],
    row: usize,
    acc: &mut [i32],
    stage: &Stage,
    out_row: &mut [u8],
    signed: bool,
) {
    depthwise_row_impl(Isa::Avx2, g, m, x, zp, w, row, acc, stage, out_row, signed);
}

/// Channels per accumulation block: two AVX2 registers of i32.
const DW_BLOCK: usize = 16;

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn depthwise_row_impl<T: Q8>(
    isa: Isa,
    g: &Geometry,
    m: usize,
    x: &[T],
    zp: i32,
    w: &[i16],
    row: usize,
    acc: &mut [i32],
    stage: &Stage,
    out_row: &mut [u8],
    signed: bool,
) {
    let (oc, ic) = (g.oc, g.ic);
    let b = row / g.oh;
    let oy = row % g.oh;
    // Kernel rows inside the input for this output row.
    let taps_y: Vec<(usize, usize)> = (0..g.kh)
        .filter_map(|ky| g.in_y(oy, ky).map(|iy| (ky, iy)))
        .collect();
    let taps_y = &taps_y[..];
    for (ox, px) in out_row.chunks_exact_mut(oc).enumerate() {
        if m == 1 {
            let mut c0 = 0;
            while c0 + DW_BLOCK <= oc {
                let mut blk = [0i32; DW_BLOCK];
                for &(ky, iy) in taps_y {
                    let base = (b * g.ih + iy) * g.iw;
                    for kx in 0..g.kw {
                        let Some(ix) = g.in_x(ox, kx) else { continue };
                        let Some(xs) = x[(base + ix) * ic + c0..].first_chunk::<DW_BLOCK>() else {
                            continue;
                        };
                        let Some(ws) = w[(ky * g.kw + kx) * oc + c0..].first_chunk::<DW_BLOCK>()
                        else {
                            continue;
                        };
                        for l in 0..DW_BLOCK {
                            blk[l] += (xs[l].to_i32() - zp) * i32::from(ws[l]);
                        }
                    }
                }
                acc[c0..c0 + DW_BLOCK].copy_from_slice(&blk);
                c0 += DW_BLOCK;
            }
            if c0 < oc {
                acc[c0..].fill(0);
                for &(ky, iy) in taps_y {
                    let base = (b * g.ih + iy) * g.iw;
                    for kx in 0..g.kw {
                        let Some(ix) = g.in_x(ox, kx) else { continue };
                        let xs = &x[(base + ix) * ic + c0..(base + ix + 1) * ic];
                        let ws = &w[(ky * g.kw + kx) * oc + c0..(ky * g.kw + kx + 1) * oc];
                        for ((a, &xv), &wv) in acc[c0..].iter_mut().zip(xs).zip(ws) {
                            *a += (xv.to_i32() - zp) * i32::from(wv);
                        }
                    }
                }
            }
        } else {
            acc.fill(0);
            for &(ky, iy) in taps_y {
                let base = (b * g.ih + iy) * g.iw;
                for kx in 0..g.kw {
                    let Some(ix) = g.in_x(ox, kx) else { continue };
                    let xs = &x[(base + ix) * ic..(base + ix + 1) * ic];
                    let ws = &w[(ky * g.kw + kx) * oc..(ky * g.kw + kx + 1) * oc];
                    for ((a, wv), &xv) in acc.chunks_exact_mut(m).zip(ws.chunks_exact(m)).zip(xs) {
                        let xv = xv.to_i32() - zp;
                        for (a, &wv) in a.iter_mut().zip(wv) {
                            *a += xv * i32::from(wv);
                        }
                    }
                }
            }
        }
        gemm::requantize_row(isa, acc, stage, px, signed);
    }
}

// ---------------------------------------------------------------------------------------
// TRANSPOSE_CONV_2D

#[derive(Clone, Debug)]
enum TransposePadding {
    Explicit {
        top: usize,
        left: usize,
        bottom: usize,
        right: usize,
    },
    Implicit(PaddingScheme),
}

#[derive(Clone, Debug)]
struct TransposeParams {
    padding: TransposePadding,
    stride: (usize, usize),
    act: FusedActivation,
    nchw: bool,
}

fn decode_transpose(info: &OpInfo) -> Result<TransposeParams> {
    let params = if info.input_count() == 11 {
        TransposeParams {
            padding: TransposePadding::Explicit {
                left: info.usize(3, "pad_left")?,
                right: info.usize(4, "pad_right")?,
                top: info.usize(5, "pad_top")?,
                bottom: info.usize(6, "pad_bottom")?,
            },
            stride: (
                info.usize(8, "stride_height")?,
                info.usize(7, "stride_width")?,
            ),
            act: info.activation(9)?,
            nchw: info.bool(10, "layout")?,
        }
    } else {
        let code = info.i32(4, "padding_scheme")?;
        let scheme = PaddingScheme::from_code(code)
            .ok_or_else(|| info.invalid(format!("unknown padding scheme {code}")))?;
        TransposeParams {
            padding: TransposePadding::Implicit(scheme),
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

struct TransposeConv {
    params: TransposeParams,
    oq: OutputQuant,
    fq: FilterQuant,
    filter_dims: Option<[usize; 4]>,
}

/// Packs a filter `[O, KH, KW, C]` as the GEMM right operand `[C, KH * KW * O]`
/// (`B[c][(t, o)] = w[o][t][c] - w_zp`).
fn pack_transpose_filter(
    filter: &[u8],
    [o, kh, kw, c]: [usize; 4],
    fq: &FilterQuant,
) -> Result<zeroize::Zeroizing<Vec<i16>>> {
    if filter.len() != o * kh * kw * c {
        return Err(RuntimeError::kernel("filter does not match its shape"));
    }
    let cols = kh * kw * o;
    let len = packed_len(c, cols).ok_or_else(|| RuntimeError::kernel("filter too large"))?;
    let mut packed = zeroize::Zeroizing::new(crate::kernels::util::filled(len, 0i16)?);
    pack_rhs(
        c,
        cols,
        |cc, j| {
            let (t, oo) = (j / o, j % o);
            widen(fq.qt, fq.zp, filter[(oo * kh * kw + t) * c + cc])
        },
        &mut packed,
    );
    Ok(packed)
}

impl Kernel for TransposeConv {
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        let mut prepared = PreparedWeights::empty();
        if let (Some(Some(bytes)), Some(dims)) = (weights.get(1), self.filter_dims) {
            prepared.push(i16_buffer(&pack_transpose_filter(bytes, dims, &self.fq)?)?);
        }
        prepared.add_raw(weights, &[1])?;
        Ok(prepared)
    }

    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let p = &self.params;
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let in_shape = rank4(input.shape, "input")?;
        let fdims = run_filter_dims(self.filter_dims, ctx, 1)?;
        let packed: Cow<[i16]> = if self.filter_dims.is_some() {
            Cow::Borrowed(prepared_i16(ctx.weights, 0)?)
        } else {
            let f = ctx.input(1)?;
            Cow::Owned(pack_transpose_filter(q8_bytes(&f, "filter")?, fdims, &self.fq)?.to_vec())
        };
        let bias = bias_values(ctx, fdims[0])?;
        let stage = self
            .fq
            .stage(0, fdims[0], Some(bias), self.oq.out_zp, self.oq.range)?;
        let oq = &self.oq;
        let out_t = ctx.output(0)?;
        let out_shape = rank4(out_t.shape, "output")?;
        let out = q8_bytes_mut(out_t, "output")?;
        with_nhwc(
            p.nchw,
            x,
            in_shape,
            out,
            out_shape,
            |x, [n, ih, iw, ic], out, [on, oh, ow, oc]| {
                let [fo, kh, kw, fc] = fdims;
                if fo != oc || fc != ic || on != n {
                    return Err(RuntimeError::kernel(format!(
                        "filter {fdims:?}, input channels {ic} and output {:?} do not fit",
                        [on, oh, ow, oc]
                    )));
                }
                if x.len() != n * ih * iw * ic || out.len() != n * oh * ow * oc {
                    return Err(RuntimeError::kernel("input or output has the wrong size"));
                }
                let (sh, sw) = p.stride;
                let (pad_top, pad_left) = match p.padding {
                    TransposePadding::Explicit {
                        top,
                        bottom,
                        left,
                        right,
                    } => {
                        let eh = (sh * ih.saturating_sub(1) + kh).checked_sub(top + bottom);
                        let ew = (sw * iw.saturating_sub(1) + kw).checked_sub(left + right);
                        if eh != Some(oh) || ew != Some(ow) {
                            return Err(RuntimeError::kernel(format!(
                                "output extent {oh}x{ow} does not match the padding and strides"
                            )));
                        }
                        (top, left)
                    }
                    TransposePadding::Implicit(scheme) => {
                        let before = |i: usize, s: usize, k: usize, o: usize| -> usize {
                            let total = (i.saturating_sub(1) * s + k).saturating_sub(o);
                            if scheme == PaddingScheme::Same {
                                total / 2
                            } else {
                                0
                            }
                        };
                        (before(ih, sh, kh, oh), before(iw, sw, kw, ow))
                    }
                };
                let cols = kh * kw * oc;
                let kp = padded_depth(ic);
                let mut acc = crate::kernels::util::filled(n * oh * ow * oc, 0i32)?;
                let pixels = n * ih * iw;
                let tile = (A_TILE_BUDGET / cols.max(kp).max(1)).clamp(1, pixels.max(1));
                let mut a = crate::kernels::util::filled(tile * kp, 0i16)?;
                let mut col = crate::kernels::util::filled(tile * cols, 0i32)?;
                let rhs = PackedRhs {
                    data: &packed,
                    k: ic,
                    n: cols,
                };
                let mut p0 = 0;
                while p0 < pixels {
                    let p1 = (p0 + tile).min(pixels);
                    let t = p1 - p0;
                    for (r, dst) in a.chunks_exact_mut(kp).take(t).enumerate() {
                        let src = &x[(p0 + r) * ic..(p0 + r + 1) * ic];
                        for (d, &v) in dst.iter_mut().zip(src) {
                            *d = widen(oq.in_qt, oq.in_zp, v);
                        }
                        dst[ic..].fill(0);
                    }
                    gemm::gemm(
                        &a[..t * kp],
                        kp,
                        t,
                        &rhs,
                        Dst::I32 {
                            out: &mut col[..t * cols],
                            ld: cols,
                        },
                    )?;
                    for (pix, c) in (p0..p1).zip(col.chunks_exact(cols)) {
                        let ix = pix % iw;
                        let iy = (pix / iw) % ih;
                        let b = pix / (iw * ih);
                        for ky in 0..kh {
                            let Some(oy) = (iy * sh + ky).checked_sub(pad_top).filter(|&v| v < oh)
                            else {
                                continue;
                            };
                            for kx in 0..kw {
                                let Some(ox) =
                                    (ix * sw + kx).checked_sub(pad_left).filter(|&v| v < ow)
                                else {
                                    continue;
                                };
                                let dst = &mut acc[((b * oh + oy) * ow + ox) * oc..][..oc];
                                let src = &c[(ky * kw + kx) * oc..][..oc];
                                for (d, s) in dst.iter_mut().zip(src) {
                                    *d = d.wrapping_add(*s);
                                }
                            }
                        }
                    }
                    p0 = p1;
                }
                let isa = gemm::best_isa();
                let signed = oq.out_qt == QType::I8;
                for (a_row, o_row) in acc.chunks_exact(oc).zip(out.chunks_exact_mut(oc)) {
                    gemm::requantize_row(isa, a_row, &stage, o_row, signed);
                }
                Ok(())
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::gemm::tests::Rng;

    /// The AVX2 depthwise kernel (both input variants, plus the scalar tail) against the
    /// portable loops, on random geometry and data.
    #[test]
    fn depthwise_paths_agree() {
        if gemm::best_isa() == Isa::Portable {
            return;
        }
        let mut rng = Rng(0x5151_7a7a_0101_3c3c);
        for case in 0..60 {
            let (ih, iw) = (rng.range(1, 9) as usize, rng.range(1, 9) as usize);
            let c = [16, 19, 32, 35, 48][case % 5];
            let (kh, kw) = (rng.range(1, 4) as usize, rng.range(1, 4) as usize);
            let (sh, sw) = (rng.range(1, 2) as usize, rng.range(1, 2) as usize);
            let (dh, dw) = (rng.range(1, 2) as usize, rng.range(1, 2) as usize);
            let (pt, pl) = (rng.range(0, 2) as usize, rng.range(0, 2) as usize);
            let (eh, ew) = ((kh - 1) * dh + 1, (kw - 1) * dw + 1);
            if ih + 2 * pt < eh || iw + 2 * pl < ew {
                continue;
            }
            let g = Geometry {
                n: 1,
                ih,
                iw,
                ic: c,
                oh: (ih + 2 * pt - eh) / sh + 1,
                ow: (iw + 2 * pl - ew) / sw + 1,
                oc: c,
                kh,
                kw,
                sh,
                sw,
                dh,
                dw,
                pad_top: pt,
                pad_left: pl,
            };
            let signed = case % 2 == 0;
            let qt = if signed { QType::I8 } else { QType::U8 };
            let zp = rng.range(qt.min(), qt.max());
            let x: Vec<u8> = (0..ih * iw * c).map(|_| rng.next() as u8).collect();
            let w: Vec<i16> = (0..kh * kw * c)
                .map(|_| rng.range(-255, 255) as i16)
                .collect();
            let pairs = pack_depthwise_pairs(&w, kh * kw, c).unwrap();
            let bias: Vec<i32> = (0..c).map(|_| rng.range(-50_000, 50_000)).collect();
            let mults: Vec<Multiplier> = (0..c)
                .map(|_| Multiplier::new(f64::from(rng.range(1, 1000)) * 1e-5).unwrap())
                .collect();
            let stage =
                Stage::new(c, Some(&bias), &mults, rng.range(-128, 127), (-128, 127)).unwrap();
            // Two cases in three requantize in single precision (the default, which the
            // 512-bit path vectorizes on 16 lanes).
            let stage = if case % 3 == 0 {
                stage
            } else {
                let scales: Vec<f32> = (0..c).map(|_| rng.range(1, 1000) as f32 * 1e-5).collect();
                stage.float_scales(&scales).unwrap()
            };
            let wide: Vec<i16> = x.iter().map(|&b| widen(qt, zp, b)).collect();
            let row_len = g.ow * c;
            for row in 0..g.oh {
                let mut want = vec![0u8; row_len];
                let mut acc = vec![0i32; c];
                if signed {
                    depthwise_row_impl::<i8>(
                        Isa::Portable,
                        &g,
                        1,
                        bytemuck::cast_slice(&x),
                        zp,
                        &w,
                        row,
                        &mut acc,
                        &stage,
                        &mut want,
                        true,
                    );
                } else {
                    depthwise_row_impl::<u8>(
                        Isa::Portable,
                        &g,
                        1,
                        &x,
                        zp,
                        &w,
                        row,
                        &mut acc,
                        &stage,
                        &mut want,
                        true,
                    );
                }
                let done = c / DW_BLOCK * DW_BLOCK;
                for variant in 0..2 {
                    let mut got = vec![0u8; row_len];
                    // Variant 0: the whole image as the window; 1: only the rows needed.
                    let (lo, hi) = if variant == 0 {
                        (0, ih)
                    } else {
                        let lo = (row * sh).saturating_sub(pt).min(ih);
                        (lo, (row * sh + eh).saturating_sub(pt).min(ih).max(lo))
                    };
                    // SAFETY: AVX2 is available (checked above).
                    let ok = unsafe {
                        depthwise_row_pairs(
                            &g,
                            &wide[lo * iw * c..hi * iw * c],
                            lo,
                            &pairs,
                            row,
                            &stage,
                            &mut got,
                            true,
                        )
                    };
                    assert!(ok, "case {case} row {row}");
                    if done < c {
                        if signed {
                            depthwise_tail::<i8>(
                                &g,
                                bytemuck::cast_slice(&x),
                                zp,
                                &w,
                                row,
                                done,
                                &stage,
                                &mut got,
                            );
                        } else {
                            depthwise_tail::<u8>(&g, &x, zp, &w, row, done, &stage, &mut got);
                        }
                    }
                    assert_eq!(got, want, "case {case} row {row} variant {variant}");
                }
            }
        }
    }
}
