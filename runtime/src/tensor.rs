//! Tensor views handed to kernels: an operand type, a shape and the value's bytes.
//!
//! Views carry raw little-endian bytes; typed accessors check the operand type and cast
//! without copying (the executor guarantees 64-byte aligned storage, and that the byte
//! length matches the shape).

use nnc_formats::nn::OperandType;

use crate::error::{Result, RuntimeError};

/// Number of elements of `shape` (1 for a scalar's empty shape), `None` on overflow.
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Bytes per element of an operand type the runtime stores.
pub fn element_size(t: OperandType) -> Option<usize> {
    t.element_size()
}

/// Bytes a value of type `t` and shape `shape` occupies, `None` on overflow or for types
/// without a fixed element size.
pub fn byte_size(t: OperandType, shape: &[usize]) -> Option<usize> {
    element_count(shape)?.checked_mul(element_size(t)?)
}

fn cast<'a, T: bytemuck::Pod>(bytes: &'a [u8], t: OperandType, wanted: &str) -> Result<&'a [T]> {
    bytemuck::try_cast_slice(bytes)
        .map_err(|e| RuntimeError::kernel(format!("cannot view {t} data as {wanted}: {e:?}")))
}

fn cast_mut<'a, T: bytemuck::Pod>(
    bytes: &'a mut [u8],
    t: OperandType,
    wanted: &str,
) -> Result<&'a mut [T]> {
    bytemuck::try_cast_slice_mut(bytes)
        .map_err(|e| RuntimeError::kernel(format!("cannot view {t} data as {wanted}: {e:?}")))
}

fn expect(t: OperandType, allowed: &[OperandType], wanted: &str) -> Result<()> {
    if allowed.contains(&t) {
        Ok(())
    } else {
        Err(RuntimeError::kernel(format!(
            "expected {wanted} data, got {t}"
        )))
    }
}

const F32_TYPES: &[OperandType] = &[OperandType::TensorFloat32, OperandType::Float32];
const I32_TYPES: &[OperandType] = &[OperandType::TensorInt32, OperandType::Int32];
const U8_TYPES: &[OperandType] = &[
    OperandType::TensorBool8,
    OperandType::Bool,
    OperandType::TensorQuant8Asymm,
];

const Q8_TYPES: &[OperandType] = &[
    OperandType::TensorQuant8Asymm,
    OperandType::TensorQuant8AsymmSigned,
];

/// A read-only tensor (or scalar) value.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    pub operand_type: OperandType,
    /// Actual dimensions; empty for scalars.
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
    /// Quantization parameters of the operand (unused by float kernels).
    pub scale: f32,
    pub zero_point: i32,
}

impl<'a> TensorRef<'a> {
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn element_count(&self) -> usize {
        element_count(self.shape).unwrap_or(0)
    }

    pub fn f32(&self) -> Result<&'a [f32]> {
        expect(self.operand_type, F32_TYPES, "float32")?;
        cast(self.bytes, self.operand_type, "f32")
    }

    pub fn i32(&self) -> Result<&'a [i32]> {
        expect(self.operand_type, I32_TYPES, "int32")?;
        cast(self.bytes, self.operand_type, "i32")
    }

    /// Bool8 (0 or non-zero per byte) or unsigned 8-bit quantized data.
    pub fn u8(&self) -> Result<&'a [u8]> {
        expect(self.operand_type, U8_TYPES, "8-bit")?;
        Ok(self.bytes)
    }

    /// The stored bytes of an 8-bit quantized tensor of either signedness.
    pub fn q8(&self) -> Result<&'a [u8]> {
        expect(self.operand_type, Q8_TYPES, "8-bit quantized")?;
        Ok(self.bytes)
    }

    /// The single value of an INT32 scalar or one-element tensor.
    pub fn scalar_i32(&self) -> Result<i32> {
        match self.i32()? {
            [v] => Ok(*v),
            other => Err(RuntimeError::kernel(format!(
                "expected one int32 value, got {}",
                other.len()
            ))),
        }
    }

    /// The single value of a FLOAT32 scalar or one-element tensor.
    pub fn scalar_f32(&self) -> Result<f32> {
        match self.f32()? {
            [v] => Ok(*v),
            other => Err(RuntimeError::kernel(format!(
                "expected one float32 value, got {}",
                other.len()
            ))),
        }
    }
}

/// A writable output tensor.
#[derive(Debug)]
pub struct TensorMut<'a> {
    pub operand_type: OperandType,
    pub shape: &'a [usize],
    pub bytes: &'a mut [u8],
    pub scale: f32,
    pub zero_point: i32,
    /// `None` for a dense tensor. `Some(stride)` when the tensor is a slice of the last
    /// dimension of a larger one (a concatenation done in place): its rows (runs of the
    /// last dimension) start `stride` elements apart in `bytes`, which spans from the
    /// first row's start to the last row's end. Only kernels that say they write such
    /// outputs get them ([`crate::kernels::writes_row_slices`]); the dense accessors
    /// refuse them, so another kernel fails instead of writing the wrong places.
    pub row_stride: Option<usize>,
}

impl<'a> TensorMut<'a> {
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn element_count(&self) -> usize {
        element_count(self.shape).unwrap_or(0)
    }

    pub fn f32_mut(&mut self) -> Result<&mut [f32]> {
        self.dense()?;
        expect(self.operand_type, F32_TYPES, "float32")?;
        cast_mut(self.bytes, self.operand_type, "f32")
    }

    pub fn i32_mut(&mut self) -> Result<&mut [i32]> {
        self.dense()?;
        expect(self.operand_type, I32_TYPES, "int32")?;
        cast_mut(self.bytes, self.operand_type, "i32")
    }

    pub fn u8_mut(&mut self) -> Result<&mut [u8]> {
        self.dense()?;
        expect(self.operand_type, U8_TYPES, "8-bit")?;
        Ok(self.bytes)
    }

    /// The stored bytes of an 8-bit quantized output of either signedness.
    pub fn q8_mut(&mut self) -> Result<&mut [u8]> {
        self.dense()?;
        expect(self.operand_type, Q8_TYPES, "8-bit quantized")?;
        Ok(self.bytes)
    }

    fn dense(&self) -> Result<()> {
        match self.row_stride {
            None => Ok(()),
            Some(_) => Err(RuntimeError::Internal(
                "a kernel that writes dense outputs was given a slice of a larger tensor".into(),
            )),
        }
    }

    /// Shape, f32 data and row stride in elements (the last dimension for a dense
    /// tensor; see [`TensorMut::row_stride`]). The data holds `(rows - 1) * stride +
    /// last` elements or more.
    pub fn f32_rows(&mut self) -> Result<(&'a [usize], &mut [f32], usize)> {
        expect(self.operand_type, F32_TYPES, "float32")?;
        let shape = self.shape;
        let last = shape.last().copied().unwrap_or(1);
        let stride = self.row_stride.unwrap_or(last);
        let rows = shape
            .iter()
            .rev()
            .skip(1)
            .try_fold(1usize, |a, &d| a.checked_mul(d));
        let data: &mut [f32] = cast_mut(self.bytes, self.operand_type, "f32")?;
        let needed = rows.and_then(|r| match r {
            0 => Some(0),
            r => (r - 1).checked_mul(stride)?.checked_add(last),
        });
        if stride < last || needed.is_none_or(|n| n > data.len()) {
            return Err(RuntimeError::Internal(format!(
                "output rows of {last} every {stride} elements do not fit {} elements",
                data.len()
            )));
        }
        Ok((shape, data, stride))
    }

    /// Shape and mutable f32 data at once (the shape borrow is independent of the data).
    pub fn f32_parts(&mut self) -> Result<(&'a [usize], &mut [f32])> {
        let shape = self.shape;
        Ok((shape, self.f32_mut()?))
    }
}
