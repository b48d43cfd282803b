//! Host tensors: the element types and row-major byte buffers that cross the boundary
//! between users' files (`.npy`, ONNX `.pb`) and nnc (runtime inputs and outputs).
//!
//! These are *source-level* element types (int64 and float64 exist here); the NN operand
//! types of [`crate::nn`] are what a compiled model computes in.

use serde::Serialize;

use crate::minifloat::{FloatFormat, NarrowInt};

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
    /// Narrow types (see [`crate::minifloat`]): floats computed as float32, the 4- and
    /// 2-bit integers as 8-bit ones. Host tensors hold one value per element-sized slot:
    /// bfloat16 in two bytes, the others one byte each (the integers sign-extended), as
    /// `ml_dtypes` lays them out in NumPy; only ONNX's protos pack the sub-byte types.
    Bf16,
    F8E4M3Fn,
    F8E4M3Fnuz,
    F8E5M2,
    F8E5M2Fnuz,
    F4E2M1Fn,
    I4,
    U4,
    I2,
    U2,
}

impl DataType {
    pub const ALL: [DataType; 22] = [
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
        DataType::Bf16,
        DataType::F8E4M3Fn,
        DataType::F8E4M3Fnuz,
        DataType::F8E5M2,
        DataType::F8E5M2Fnuz,
        DataType::F4E2M1Fn,
        DataType::I4,
        DataType::U4,
        DataType::I2,
        DataType::U2,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DataType::I8
            | DataType::U8
            | DataType::Bool
            | DataType::F8E4M3Fn
            | DataType::F8E4M3Fnuz
            | DataType::F8E5M2
            | DataType::F8E5M2Fnuz
            | DataType::F4E2M1Fn
            | DataType::I4
            | DataType::U4
            | DataType::I2
            | DataType::U2 => 1,
            DataType::F16 | DataType::Bf16 | DataType::I16 | DataType::U16 => 2,
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
            DataType::Bf16 => "bfloat16",
            DataType::F8E4M3Fn => "float8_e4m3fn",
            DataType::F8E4M3Fnuz => "float8_e4m3fnuz",
            DataType::F8E5M2 => "float8_e5m2",
            DataType::F8E5M2Fnuz => "float8_e5m2fnuz",
            DataType::F4E2M1Fn => "float4_e2m1fn",
            DataType::I4 => "int4",
            DataType::U4 => "uint4",
            DataType::I2 => "int2",
            DataType::U2 => "uint2",
        }
    }

    /// Whether this is a type nnc computes in a wider one (the narrow floats and the
    /// sub-byte integers).
    pub fn is_narrow(self) -> bool {
        self.float_format().is_some() || self.narrow_int().is_some()
    }

    /// The type a narrow type computes in (float32, int8 or uint8), which holds each of
    /// its values exactly; any other type itself.
    pub fn wide_type(self) -> DataType {
        match (self.float_format(), self.narrow_int()) {
            (Some(_), _) => DataType::F32,
            (None, Some(n)) if n.signed => DataType::I8,
            (None, Some(_)) => DataType::U8,
            (None, None) => self,
        }
    }

    /// The narrow float format this type holds, if it is one (computed as float32).
    pub fn float_format(self) -> Option<FloatFormat> {
        Some(match self {
            DataType::Bf16 => FloatFormat::Bfloat16,
            DataType::F8E4M3Fn => FloatFormat::Float8E4M3Fn,
            DataType::F8E4M3Fnuz => FloatFormat::Float8E4M3Fnuz,
            DataType::F8E5M2 => FloatFormat::Float8E5M2,
            DataType::F8E5M2Fnuz => FloatFormat::Float8E5M2Fnuz,
            DataType::F4E2M1Fn => FloatFormat::Float4E2M1Fn,
            _ => return None,
        })
    }

    /// The sub-byte integer this type holds, if it is one (computed as int8 or uint8).
    pub fn narrow_int(self) -> Option<NarrowInt> {
        let (bits, signed) = match self {
            DataType::I4 => (4, true),
            DataType::U4 => (4, false),
            DataType::I2 => (2, true),
            DataType::U2 => (2, false),
            _ => return None,
        };
        Some(NarrowInt { bits, signed })
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

    /// A narrow tensor (bfloat16, float8, float4, 4- and 2-bit integers) as the wide type
    /// that holds its values exactly: float32, int8 or uint8. Other tensors are returned
    /// as they are.
    pub fn widened(&self) -> HostTensor {
        if let Some(format) = self.dtype.float_format() {
            let values: Vec<f32> = if format == FloatFormat::Bfloat16 {
                self.data
                    .chunks_exact(2)
                    .map(|c| format.decode(u16::from_le_bytes([c[0], c[1]])))
                    .collect()
            } else {
                self.data
                    .iter()
                    .map(|&b| format.decode(u16::from(b)))
                    .collect()
            };
            return HostTensor {
                dtype: DataType::F32,
                shape: self.shape.clone(),
                data: bytemuck::cast_slice(&values).to_vec(),
            };
        }
        // The sub-byte integers are held sign- (or zero-) extended already: only the
        // label changes.
        HostTensor {
            dtype: self.dtype.wide_type(),
            shape: self.shape.clone(),
            data: self.data.clone(),
        }
    }

    /// Every element as f64 (exact for every type but the 64-bit integers beyond 2^53).
    pub fn values_f64(&self) -> Vec<f64> {
        let d = &self.data;
        match self.dtype {
            DataType::F32 => d
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            DataType::F64 => d
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            DataType::F16 => d
                .chunks_exact(2)
                .map(|c| f64::from(half::f16::from_le_bytes([c[0], c[1]]).to_f32()))
                .collect(),
            DataType::I8 => d.iter().map(|&b| f64::from(b as i8)).collect(),
            DataType::U8 | DataType::Bool => d.iter().map(|&b| f64::from(b)).collect(),
            DataType::I16 => d
                .chunks_exact(2)
                .map(|c| f64::from(i16::from_le_bytes([c[0], c[1]])))
                .collect(),
            DataType::U16 => d
                .chunks_exact(2)
                .map(|c| f64::from(u16::from_le_bytes([c[0], c[1]])))
                .collect(),
            DataType::I32 => d
                .chunks_exact(4)
                .map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            DataType::U32 => d
                .chunks_exact(4)
                .map(|c| f64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            DataType::I64 => d
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64)
                .collect(),
            DataType::U64 => d
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64)
                .collect(),
            // The narrow types: their exact widened values.
            _ => self.widened().values_f64(),
        }
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
