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
//! - DEPTHWISE_CONV_2D: 3x3 filters of multiplier 1 with signed-byte weights, under the
//!   single-precision stage, on AVX512-VNNI: four taps per `vpdpbusd` over 64 channels,
//!   input bytes read in place ([`depthwise_vnni`]). On AVX2 processors without
//!   AVX-512, `vpmaddwd` on pairs of taps read from a pair-interleaved window widened to
//!   i16 ([`depthwise_avx2`]). Otherwise direct loops accumulating i32 over contiguous
//!   channel blocks of a window widened to i16 (AVX-512 on 32 channels with the
//!   single-precision stage on 16 lanes, AVX2 on a last block of 16, a portable loop
//!   elsewhere), then the vectorized requantizing stage.
//! - TRANSPOSE_CONV_2D: GEMM of the input with the repacked filter into per-pixel i32
//!   columns, scatter-added into an i32 accumulator of the output, then requantized.

use std::borrow::Cow;

use nnc_formats::nn::{FusedActivation, OperandType, OperationType};

use super::arith::{Multiplier, Q8, QType, activation_range};
use super::gemm::{self, Dst, Isa, MR, PackedRhs, Stage, pack_rhs, packed_len, padded_depth};
use super::gemm_u8i8;
use super::{activation_type, check_scale, for_row_tiles, output_type, q8_bytes, q8_bytes_mut, qp};
use crate::buffer::AlignedBuf;
use crate::error::{Result, RuntimeError};
use crate::kernels::conv::ConvKind;
use crate::kernels::util::{rank4, with_nhwc};
use crate::kernels::window::{ConvParams, Geometry, decode_conv};
use crate::kernels::{Kernel, KernelContext, OpInfo, PreparedWeights, Requantization};

mod conv2d;
mod depthwise;
#[cfg(target_arch = "x86_64")]
mod depthwise_avx2;
mod depthwise_vnni;
mod transpose;

use conv2d::Conv;
use depthwise::DepthwiseConv;
use transpose::{TransposeConv, decode_transpose};

/// i16 values of A per GEMM tile (256 KiB): an im2col tile that stays in L2.
const A_TILE_BUDGET: usize = 1 << 17;

/// Output rows per task of a convolution's GEMM: at most `budget` rows (what fits the
/// tile budget), a multiple of the micro-kernel's `mr`, and on several threads small
/// enough that each gets about two tasks. Without the last bound a pointwise layer of
/// few channels was one tile, so MobileNetV2's int8 convolutions ran on one thread
/// whatever the thread count.
fn row_tile(budget: usize, rows: usize, threads: usize, mr: usize) -> usize {
    let mr = mr.max(1);
    let mut tile = budget.max(mr) / mr * mr;
    if threads > 1 {
        tile = tile.min(rows.div_ceil(threads * 2).div_ceil(mr) * mr);
    }
    tile.clamp(1, rows.max(1))
}

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
#[cfg(target_arch = "x86_64")]
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

pub(crate) fn build(info: &OpInfo, kind: ConvKind) -> Result<Box<dyn Kernel>> {
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
    match kind {
        ConvKind::Transpose => {
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
        ConvKind::Depthwise => {
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
        ConvKind::Grouped => {
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

#[cfg(test)]
mod tests {
    use super::row_tile;

    #[test]
    fn row_tiles_give_every_thread_work_and_stay_whole_blocks() {
        // One thread: the budget, in whole blocks, at most the rows.
        assert_eq!(row_tile(8192, 3136, 1, 8), 3136);
        assert_eq!(row_tile(1000, 3136, 1, 8), 1000);
        assert_eq!(row_tile(3, 3136, 1, 8), 8);
        // Two threads: about two tasks each, rounded up to the block.
        assert_eq!(row_tile(8192, 3136, 2, 8), 784);
        assert_eq!(row_tile(8192, 49, 2, 6), 18);
        assert_eq!(row_tile(8192, 1, 2, 6), 1);
        assert_eq!(row_tile(8192, 0, 2, 6), 1);
    }
}
