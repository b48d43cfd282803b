//! Host tensors: the element types and row-major byte buffers that cross the boundary
//! between users' files (`.npy`, ONNX `.pb`) and nnc (runtime inputs and outputs).
//!
//! These are *source-level* element types (int64 and float64 exist here); the NN operand
//! types of [`crate::nn`] are what a compiled model computes in.

use serde::Serialize;

/// Element type of a host tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataType {
    F32,
    F16,
    F64,
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    Bool,
}

impl DataType {
    pub const ALL: [DataType; 12] = [
        DataType::F32,
        DataType::F16,
        DataType::F64,
        DataType::I8,
        DataType::U8,
        DataType::I16,
        DataType::U16,
        DataType::I32,
        DataType::U32,
        DataType::I64,
        DataType::U64,
        DataType::Bool,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::I8 | DataType::U8 | DataType::Bool => 1,
            DataType::F16 | DataType::I16 | DataType::U16 => 2,
            DataType::F32 | DataType::I32 | DataType::U32 => 4,
            DataType::F64 | DataType::I64 | DataType::U64 => 8,
        }
    }

    /// The conventional lower-case name (`float32`, `int64`, ...), as numpy spells it.
    pub fn name(self) -> &'static str {
        match self {
            DataType::F32 => "float32",
            DataType::F16 => "float16",
            DataType::F64 => "float64",
            DataType::I8 => "int8",
            DataType::U8 => "uint8",
            DataType::I16 => "int16",
            DataType::U16 => "uint16",
            DataType::I32 => "int32",
            DataType::U32 => "uint32",
            DataType::I64 => "int64",
            DataType::U64 => "uint64",
            DataType::Bool => "bool",
        }
    }

    pub fn from_name(name: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A dense row-major tensor with little-endian element bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub dtype: DataType,
    pub shape: Vec<usize>,
    pub data: Vec<u8>,
}

/// Why a host tensor could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HostTensorError {
    #[error("shape {shape:?} overflows the address space")]
    ShapeOverflow { shape: Vec<usize> },
    #[error("shape {shape:?} of {dtype} needs {expected} bytes, got {actual}")]
    SizeMismatch {
        dtype: DataType,
        shape: Vec<usize>,
        expected: usize,
        actual: usize,
    },
}

/// Number of elements a shape holds, or `None` on overflow.
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// A host tensor borrowed from its owner: an application's array, read where it lies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostTensorRef<'a> {
    pub dtype: DataType,
    pub shape: &'a [usize],
    pub data: &'a [u8],
}

impl<'a> HostTensorRef<'a> {
    /// A view, checking that `data` holds exactly `shape` elements of `dtype`.
    pub fn new(
        dtype: DataType,
        shape: &'a [usize],
        data: &'a [u8],
    ) -> Result<Self, HostTensorError> {
        let expected = element_count(shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .ok_or_else(|| HostTensorError::ShapeOverflow {
                shape: shape.to_vec(),
            })?;
        if expected != data.len() {
            return Err(HostTensorError::SizeMismatch {
                dtype,
                shape: shape.to_vec(),
                expected,
                actual: data.len(),
            });
        }
        Ok(HostTensorRef { dtype, shape, data })
    }

    pub fn element_count(&self) -> usize {
        self.data.len() / self.dtype.size()
    }
}

impl HostTensor {
    /// The tensor as a borrowed view.
    pub fn view(&self) -> HostTensorRef<'_> {
        HostTensorRef {
            dtype: self.dtype,
            shape: &self.shape,
            data: &self.data,
        }
    }

    /// Builds a tensor, checking that `data` holds exactly `shape` elements of `dtype`.
    pub fn new(dtype: DataType, shape: Vec<usize>, data: Vec<u8>) -> Result<Self, HostTensorError> {
        let expected = element_count(&shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .ok_or_else(|| HostTensorError::ShapeOverflow {
                shape: shape.clone(),
            })?;
        if expected != data.len() {
            return Err(HostTensorError::SizeMismatch {
                dtype,
                shape,
                expected,
                actual: data.len(),
            });
        }
        Ok(HostTensor { dtype, shape, data })
    }

    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> Result<Self, HostTensorError> {
        HostTensor::new(DataType::F32, shape, bytemuck::cast_slice(values).to_vec())
    }

    pub fn element_count(&self) -> usize {
        self.data.len() / self.dtype.size()
    }

    /// The elements as f32, if this is a float32 tensor.
    pub fn to_f32_vec(&self) -> Option<Vec<f32>> {
        (self.dtype == DataType::F32).then(|| {
            self.data
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
    }
}
