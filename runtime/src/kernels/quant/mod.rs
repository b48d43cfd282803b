//! Quantized kernels: TENSOR_QUANT8_ASYMM (uint8), TENSOR_QUANT8_ASYMM_SIGNED (int8),
//! TENSOR_QUANT8_SYMM_PER_CHANNEL filters and TENSOR_INT32 biases.
//!
//! Every kernel follows the integer arithmetic of TensorFlow Lite's reference kernels
//! (see [`arith`]), so results are bit-exact with TFLite's reference interpreter:
//! accumulation in i32 of `(x - x_zp) * (w - w_zp)`, requantization by a Q31 multiplier
//! and shift, saturation to the output type, fused activations as clamps in the
//! quantized domain.
//!
//! Layout:
//! - [`arith`]: fixed-point primitives (QuantizeMultiplier, SRDHM, RoundingDivideByPOT).
//! - [`gemm`]: the i16-operand / i32-accumulator GEMM (AVX2 and portable), with a fused
//!   requantizing output stage.
//! - [`conv`]: CONV_2D, GROUPED_CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV_2D.
//! - [`dense`]: FULLY_CONNECTED, BATCH_MATMUL.
//! - [`binary`]: ADD, SUB, MUL, MAXIMUM, MINIMUM, PRELU and the comparisons.
//! - [`unary`]: RELU/RELU1/RELU6, LOGISTIC, TANH, HARD_SWISH, QUANTIZE, DEQUANTIZE
//!   (256-entry tables computed at build time with the reference's arithmetic).
//! - [`pool`]: AVERAGE_POOL_2D, MAX_POOL_2D.
//! - [`softmax`]: SOFTMAX (gemmlowp fixed point), L2_NORMALIZATION.
//! - [`reduce`]: MEAN, REDUCE_MAX/MIN, ARGMAX/ARGMIN.
//! - [`resize`]: RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR.
//! - [`movement`]: CONCATENATION (requantizing), PAD/PAD_V2 (zero point), the block
//!   rearrangements, and the byte-moving operations of `shape.rs` opened to 8-bit types.
//!
//! [`build`] claims an operation when any of its tensors is quantized; it returns `None`
//! otherwise, so the float path is untouched.

use nnc_formats::nn::{FusedActivation, Operand, OperandType, OperationType};

use super::misc::Arg;
use super::util::for_row_tiles;
use super::{Kernel, OpInfo};
use crate::error::{Result, RuntimeError};
use crate::tensor::{TensorMut, TensorRef};

mod arith;
mod binary;
mod conv;
mod dense;
mod gemm;
mod gemm_u8i8;
mod movement;
mod pool;
mod reduce;
mod resize;
mod softmax;
mod unary;

use arith::{QType, Qp};

/// Whether an operand holds 8-bit quantized values.
fn is_quant8(t: OperandType) -> bool {
    matches!(
        t,
        OperandType::TensorQuant8Asymm
            | OperandType::TensorQuant8AsymmSigned
            | OperandType::TensorQuant8Symm
            | OperandType::TensorQuant8SymmPerChannel
    )
}

/// The quantized kernel of an operation, or `None` when none of its tensors is
/// quantized (or the operation is not one this module implements).
pub(super) fn build(info: &OpInfo) -> Option<Result<Box<dyn Kernel>>> {
    let quantized = info
        .views()
        .iter()
        .any(|v| is_quant8(v.operand.operand_type))
        || info.outputs.iter().any(|o| is_quant8(o.operand_type));
    if !quantized {
        return None;
    }
    use super::conv::ConvKind;
    use super::shape::Movement as Mv;
    use OperationType as O;
    use binary::{Arith, Cmp};
    use movement::Rearrangement as Re;
    use unary::TableFn;
    // One arm per operation type, as in the float dispatch: a new type fails to compile
    // here until someone decides whether it has a quantized kernel.
    let kernel = match info.op_type() {
        O::Conv2d | O::GroupedConv2d => conv::build(info, ConvKind::Grouped),
        O::DepthwiseConv2d => conv::build(info, ConvKind::Depthwise),
        O::TransposeConv2d => conv::build(info, ConvKind::Transpose),
        O::FullyConnected => dense::build_fully_connected(info),
        O::BatchMatmul => dense::build_batch_matmul(info),
        O::Add => binary::build(info, Arith::Add),
        O::Sub => binary::build(info, Arith::Sub),
        O::Mul => binary::build(info, Arith::Mul),
        O::Maximum => binary::build(info, Arith::Maximum),
        O::Minimum => binary::build(info, Arith::Minimum),
        O::Prelu => binary::build(info, Arith::Prelu),
        O::Equal => binary::build_compare(info, Cmp::Eq),
        O::NotEqual => binary::build_compare(info, Cmp::Ne),
        O::Less => binary::build_compare(info, Cmp::Lt),
        O::LessEqual => binary::build_compare(info, Cmp::Le),
        O::Greater => binary::build_compare(info, Cmp::Gt),
        O::GreaterEqual => binary::build_compare(info, Cmp::Ge),
        O::Relu => unary::build(info, TableFn::Clamp(FusedActivation::Relu)),
        O::Relu1 => unary::build(info, TableFn::Clamp(FusedActivation::Relu1)),
        O::Relu6 => unary::build(info, TableFn::Clamp(FusedActivation::Relu6)),
        O::Logistic => unary::build(info, TableFn::Logistic),
        O::Tanh => unary::build(info, TableFn::Tanh),
        O::HardSwish => unary::build(info, TableFn::HardSwish),
        O::Quantize => unary::build_quantize(info),
        O::Dequantize => unary::build_dequantize(info),
        O::AveragePool2d | O::MaxPool2d => pool::build(info),
        O::Softmax => softmax::build_softmax(info),
        O::L2Normalization => softmax::build_l2_normalization(info),
        O::Mean => reduce::build(info, reduce::Reduction::Mean),
        O::ReduceMax => reduce::build(info, reduce::Reduction::Max),
        O::ReduceMin => reduce::build(info, reduce::Reduction::Min),
        O::Argmax => reduce::build_arg(info, Arg::Max),
        O::Argmin => reduce::build_arg(info, Arg::Min),
        O::ResizeBilinear | O::ResizeNearestNeighbor => resize::build(info),
        O::Concatenation => movement::build_concat(info),
        O::Pad | O::PadV2 => movement::build_pad(info),
        O::DepthToSpace => movement::build_block(info, Re::DepthToSpace),
        O::SpaceToDepth => movement::build_block(info, Re::SpaceToDepth),
        O::ChannelShuffle => movement::build_block(info, Re::ChannelShuffle),
        O::Reshape | O::Squeeze | O::ExpandDims => movement::build_bytes(info, Mv::Copy),
        O::Transpose => movement::build_bytes(info, Mv::Transpose),
        O::Split => movement::build_bytes(info, Mv::Split),
        O::Slice => movement::build_bytes(info, Mv::Slice),
        O::StridedSlice => movement::build_bytes(info, Mv::StridedSlice),
        O::Gather => movement::build_bytes(info, Mv::Gather),
        O::Tile => movement::build_bytes(info, Mv::Tile),
        O::Pack => movement::build_bytes(info, Mv::Pack),
        O::Reverse => movement::build_bytes(info, Mv::Reverse),
        O::MirrorPad => movement::build_bytes(info, Mv::MirrorPad),
        // No quantized kernel: the float dispatch reports what it makes of the quantized
        // operands (CAST, for one, converts 8-bit types itself).
        O::EmbeddingLookup
        | O::Floor
        | O::HashtableLookup
        | O::L2Pool2d
        | O::LocalResponseNormalization
        | O::LshProjection
        | O::Lstm
        | O::Rnn
        | O::Svdf
        | O::BatchToSpaceNd
        | O::Div
        | O::SpaceToBatchNd
        | O::Abs
        | O::AxisAlignedBboxTransform
        | O::BidirectionalSequenceLstm
        | O::BidirectionalSequenceRnn
        | O::BoxWithNmsLimit
        | O::Cast
        | O::DetectionPostprocessing
        | O::Exp
        | O::GenerateProposals
        | O::HeatmapMaxKeypoint
        | O::InstanceNormalization
        | O::Log
        | O::LogicalAnd
        | O::LogicalNot
        | O::LogicalOr
        | O::LogSoftmax
        | O::Neg
        | O::Pow
        | O::Quantized16BitLstm
        | O::RandomMultinomial
        | O::ReduceAll
        | O::ReduceAny
        | O::ReduceProd
        | O::ReduceSum
        | O::RoiAlign
        | O::RoiPooling
        | O::Rsqrt
        | O::Select
        | O::Sin
        | O::Sqrt
        | O::TopkV2
        | O::UnidirectionalSequenceLstm
        | O::UnidirectionalSequenceRnn
        | O::QuantizedLstm
        | O::If
        | O::While
        | O::Elu
        | O::Fill
        | O::Rank
        | O::OemOperation
        | O::LayerNormalization
        | O::Gelu
        | O::Erf
        | O::GatherElements
        | O::GatherNd
        | O::Mod
        | O::MathUnary
        | O::ScatterElements
        | O::ScatterNd
        | O::CumSum
        | O::Bitwise
        | O::Resample
        | O::MaxPoolWithArgmax
        | O::MaxUnpooling
        | O::LandmarksToTransformMatrix
        | O::TransformLandmarks
        | O::TransformTensorBilinear => return None,
    };
    Some(kernel)
}

/// Scale and zero point of an operand.
fn qp(o: &Operand) -> Qp {
    Qp {
        scale: o.scale,
        zp: o.zero_point,
    }
}

/// The 8-bit activation type of input `i`, or an unsupported-type error.
fn activation_type(info: &OpInfo, i: usize) -> Result<QType> {
    let t = info.input_type(i)?;
    QType::of(t).ok_or_else(|| info.unsupported(format!("quantized kernel for input type {t}")))
}

/// The 8-bit activation type of output `i`.
fn output_type(info: &OpInfo, i: usize) -> Result<QType> {
    let t = info.output_operand(i)?.operand_type;
    QType::of(t).ok_or_else(|| info.unsupported(format!("quantized kernel for output type {t}")))
}

/// Requires a positive finite scale (the validator also does; kernels never divide by
/// an unchecked one).
fn check_scale(info: &OpInfo, what: &str, scale: f32) -> Result<()> {
    if scale.is_finite() && scale > 0.0 {
        Ok(())
    } else {
        Err(info.invalid(format!("{what} needs a positive scale, got {scale}")))
    }
}

/// The stored bytes of an 8-bit tensor, checked against its shape.
fn q8_bytes<'a>(t: &TensorRef<'a>, what: &str) -> Result<&'a [u8]> {
    if QType::of_weights(t.operand_type).is_none() {
        return Err(RuntimeError::kernel(format!(
            "{what}: expected 8-bit quantized data, got {}",
            t.operand_type
        )));
    }
    let n = crate::tensor::element_count(t.shape)
        .ok_or_else(|| RuntimeError::kernel(format!("{what}: shape overflows")))?;
    if t.bytes.len() != n {
        return Err(RuntimeError::kernel(format!(
            "{what}: {} bytes for shape {:?}",
            t.bytes.len(),
            t.shape
        )));
    }
    Ok(t.bytes)
}

/// The bytes of an 8-bit output, checked against its shape.
fn q8_bytes_mut<'a, 'b>(t: &'b mut TensorMut<'a>, what: &str) -> Result<&'b mut [u8]> {
    if QType::of(t.operand_type).is_none() {
        return Err(RuntimeError::kernel(format!(
            "{what}: expected 8-bit quantized data, got {}",
            t.operand_type
        )));
    }
    let n = crate::tensor::element_count(t.shape)
        .ok_or_else(|| RuntimeError::kernel(format!("{what}: shape overflows")))?;
    if t.bytes.len() != n {
        return Err(RuntimeError::kernel(format!(
            "{what}: {} bytes for shape {:?}",
            t.bytes.len(),
            t.shape
        )));
    }
    Ok(t.bytes)
}

/// Bytes viewed as the element type (u8 or i8: same size and alignment).
fn typed<T: arith::Q8>(bytes: &[u8]) -> &[T] {
    bytemuck::cast_slice(bytes)
}

fn typed_mut<T: arith::Q8>(bytes: &mut [u8]) -> &mut [T] {
    bytemuck::cast_slice_mut(bytes)
}
