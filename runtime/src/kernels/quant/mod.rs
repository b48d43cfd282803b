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
//! - [`dynamic_dense`]: the extension DYNAMIC_FULLY_CONNECTED (float rows quantized when
//!   it runs, int8 weights).
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
//! The kernel dispatch (`super::build_with`) builds an operation's quantized kernel when
//! [`has_quant8_tensor`] says any of its tensors is 8-bit quantized and the operation
//! has one; otherwise its float kernel.

use nnc_formats::nn::{Operand, OperandType};

use super::OpInfo;
use super::util::for_row_tiles;
use crate::error::{Result, RuntimeError};
use crate::tensor::{TensorMut, TensorRef};

mod arith;
pub(super) mod binary;
pub(super) mod conv;
pub(super) mod dense;
pub(super) mod dynamic_dense;
mod gemm;
#[cfg(target_arch = "x86_64")]
mod gemm_avxvnni;
#[cfg(target_arch = "aarch64")]
mod gemm_neon;
mod gemm_u8i8;
pub(super) mod movement;
pub(super) mod pool;
pub(super) mod reduce;
pub(super) mod resize;
pub(super) mod softmax;
pub(super) mod unary;

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

/// Whether any input or output of the operation holds 8-bit quantized values: then its
/// quantized kernel, if it has one, is built rather than its float kernel.
pub(super) fn has_quant8_tensor(info: &OpInfo) -> bool {
    info.views()
        .iter()
        .any(|v| is_quant8(v.operand.operand_type))
        || info.outputs.iter().any(|o| is_quant8(o.operand_type))
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
