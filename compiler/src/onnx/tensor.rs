//! Conversion between ONNX [`TensorProto`]s and [`HostTensor`]s.
//!
//! A `TensorProto` holds its elements in exactly one place: `raw_data` (little-endian
//! packed), one typed field chosen by the element type (see [`typed_field_for`]), or an
//! external file (`data_location == EXTERNAL`). Every size is checked against the dims
//! before anything is allocated, so a hostile file can make nnc allocate at most what the
//! file itself provides.
//!
//! External files are resolved under a base directory only (the directory of the model);
//! absolute paths, `..` components and symlinks leading outside it are rejected. The
//! optional `checksum` key is not verified (ONNX specifies SHA-1, which nnc does not carry).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use nnc_formats::limits::{LimitError, LimitKind, Limits};
use nnc_formats::tensor::{DataType as HostDataType, HostTensor, HostTensorError};

use super::proto::TensorProto;
use super::proto::tensor_proto::{DataLocation, DataType as OnnxDataType};

/// Where external tensor data may be read from, and how large a tensor may be.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExternalDataContext {
    /// Directory that external `location`s are relative to, and must stay inside.
    /// `None` (a model decoded from bytes) makes any external reference an error.
    pub base_dir: Option<PathBuf>,
    /// Limits whose `tensor` limit every tensor's declared size is checked against
    /// before its data is read, copied or converted. `None`: inline data is bounded by
    /// the bytes the caller already holds; external data is checked against the default
    /// limits.
    pub limits: Option<Limits>,
}

impl ExternalDataContext {
    /// No base directory: external data is refused.
    pub fn none() -> Self {
        ExternalDataContext {
            base_dir: None,
            limits: None,
        }
    }

    /// External data is read from under `dir`, within the default limits.
    pub fn with_base_dir(dir: impl Into<PathBuf>) -> Self {
        ExternalDataContext {
            base_dir: Some(dir.into()),
            limits: Some(Limits::default()),
        }
    }

    /// This context with `limits` in force.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// The context for a model loaded from `model_path`: its parent directory.
    pub fn for_model_file(model_path: &Path) -> Self {
        let dir = match model_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        ExternalDataContext::with_base_dir(dir)
    }
}

/// Why a `TensorProto` could not be turned into a host tensor.
#[derive(Debug, thiserror::Error)]
pub enum OnnxTensorError {
    #[error("tensor {tensor}: data type {data_type} is not supported")]
    UnsupportedDataType { tensor: String, data_type: String },
    #[error("tensor {tensor}: segmented tensors are not supported")]
    Segmented { tensor: String },
    #[error("tensor {tensor}: dimension {index} of dims {dims:?} is negative")]
    NegativeDim {
        tensor: String,
        dims: Vec<i64>,
        index: usize,
    },
    #[error("tensor {tensor}: dims {dims:?} describe more bytes than fit in memory")]
    TooLarge { tensor: String, dims: Vec<i64> },
    #[error(
        "tensor {tensor}: {dtype} dims {dims:?} need {expected} {unit} but {source_name} holds {actual}"
    )]
    SizeMismatch {
        tensor: String,
        source_name: String,
        dtype: HostDataType,
        dims: Vec<i64>,
        expected: usize,
        actual: usize,
        unit: &'static str,
    },
    #[error("tensor {tensor}: data is given both in {first} and in {second}")]
    ConflictingData {
        tensor: String,
        first: &'static str,
        second: &'static str,
    },
    #[error(
        "tensor {tensor}: a {data_type} tensor cannot carry data in {field} (expected {expected})"
    )]
    WrongTypedField {
        tensor: String,
        data_type: &'static str,
        field: &'static str,
        expected: &'static str,
    },
    #[error("tensor {tensor}: {field}[{index}] = {value} is out of range for {dtype}")]
    ValueOutOfRange {
        tensor: String,
        field: &'static str,
        index: usize,
        value: i128,
        dtype: HostDataType,
    },
    #[error("tensor {tensor}: bool element {index} has byte value {value} (expected 0 or 1)")]
    InvalidBool {
        tensor: String,
        index: usize,
        value: u8,
    },
    #[error("tensor {tensor}: unknown data_location {code}")]
    UnknownDataLocation { tensor: String, code: i32 },
    #[error(
        "tensor {tensor}: references external data but the model has no base directory (it was not loaded from a file)"
    )]
    ExternalWithoutBaseDir { tensor: String },
    #[error("tensor {tensor}: external data has no `location`")]
    ExternalMissingLocation { tensor: String },
    #[error("tensor {tensor}: external data key `{key}` = {value:?} is not a non-negative integer")]
    ExternalBadNumber {
        tensor: String,
        key: &'static str,
        value: String,
    },
    #[error("tensor {tensor}: external data location {location:?} rejected: {reason}")]
    ExternalUnsafePath {
        tensor: String,
        location: String,
        reason: &'static str,
    },
    #[error("tensor {tensor}: external data file {}: {source}", path.display())]
    ExternalIo {
        tensor: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("tensor {tensor}: external data file {} is not a regular file", path.display())]
    ExternalNotAFile { tensor: String, path: PathBuf },
    #[error(
        "tensor {tensor}: external data range offset {offset} length {length} exceeds file {} of {file_size} bytes",
        path.display()
    )]
    ExternalOutOfRange {
        tensor: String,
        path: PathBuf,
        offset: u64,
        length: u64,
        file_size: u64,
    },
    /// The tensor is larger than the `tensor` limit; nothing of it was read.
    #[error("{source}")]
    Limit {
        tensor: String,
        #[source]
        source: LimitError,
    },
    #[error("tensor {tensor}: {source}")]
    Host {
        tensor: String,
        #[source]
        source: HostTensorError,
    },
}

/// How a tensor is named in messages: quoted, or `<unnamed>`.
fn display_name(t: &TensorProto) -> String {
    if t.name.is_empty() {
        "<unnamed>".to_string()
    } else {
        format!("'{}'", t.name)
    }
}

/// The host element type for an ONNX data-type code, if nnc supports it.
pub fn host_data_type(code: i32) -> Option<HostDataType> {
    let t = OnnxDataType::try_from(code).ok()?;
    Some(match t {
        OnnxDataType::Float => HostDataType::F32,
        OnnxDataType::Uint8 => HostDataType::U8,
        OnnxDataType::Int8 => HostDataType::I8,
        OnnxDataType::Uint16 => HostDataType::U16,
        OnnxDataType::Int16 => HostDataType::I16,
        OnnxDataType::Int32 => HostDataType::I32,
        OnnxDataType::Int64 => HostDataType::I64,
        OnnxDataType::Bool => HostDataType::Bool,
        OnnxDataType::Float16 => HostDataType::F16,
        OnnxDataType::Double => HostDataType::F64,
        OnnxDataType::Uint32 => HostDataType::U32,
        OnnxDataType::Uint64 => HostDataType::U64,
        OnnxDataType::Bfloat16 => HostDataType::Bf16,
        OnnxDataType::Float8e4m3fn => HostDataType::F8E4M3Fn,
        OnnxDataType::Float8e4m3fnuz => HostDataType::F8E4M3Fnuz,
        OnnxDataType::Float8e5m2 => HostDataType::F8E5M2,
        OnnxDataType::Float8e5m2fnuz => HostDataType::F8E5M2Fnuz,
        OnnxDataType::Float4e2m1 => HostDataType::F4E2M1Fn,
        OnnxDataType::Int4 => HostDataType::I4,
        OnnxDataType::Uint4 => HostDataType::U4,
        OnnxDataType::Int2 => HostDataType::I2,
        OnnxDataType::Uint2 => HostDataType::U2,
        _ => return None,
    })
}

/// Bits per element of the types ONNX packs several to a byte (first element in the low
/// bits); host tensors hold them one per byte.
fn packed_bits(t: HostDataType) -> Option<u32> {
    match t {
        HostDataType::I4 | HostDataType::U4 | HostDataType::F4E2M1Fn => Some(4),
        HostDataType::I2 | HostDataType::U2 => Some(2),
        _ => None,
    }
}

/// The ONNX data type of a host element type.
pub fn onnx_data_type(t: HostDataType) -> OnnxDataType {
    match t {
        HostDataType::F32 => OnnxDataType::Float,
        HostDataType::F16 => OnnxDataType::Float16,
        HostDataType::F64 => OnnxDataType::Double,
        HostDataType::I8 => OnnxDataType::Int8,
        HostDataType::U8 => OnnxDataType::Uint8,
        HostDataType::I16 => OnnxDataType::Int16,
        HostDataType::U16 => OnnxDataType::Uint16,
        HostDataType::I32 => OnnxDataType::Int32,
        HostDataType::U32 => OnnxDataType::Uint32,
        HostDataType::I64 => OnnxDataType::Int64,
        HostDataType::U64 => OnnxDataType::Uint64,
        HostDataType::Bool => OnnxDataType::Bool,
        HostDataType::Bf16 => OnnxDataType::Bfloat16,
        HostDataType::F8E4M3Fn => OnnxDataType::Float8e4m3fn,
        HostDataType::F8E4M3Fnuz => OnnxDataType::Float8e4m3fnuz,
        HostDataType::F8E5M2 => OnnxDataType::Float8e5m2,
        HostDataType::F8E5M2Fnuz => OnnxDataType::Float8e5m2fnuz,
        HostDataType::F4E2M1Fn => OnnxDataType::Float4e2m1,
        HostDataType::I4 => OnnxDataType::Int4,
        HostDataType::U4 => OnnxDataType::Uint4,
        HostDataType::I2 => OnnxDataType::Int2,
        HostDataType::U2 => OnnxDataType::Uint2,
    }
}

/// The typed field of `TensorProto` that carries elements of `t` when `raw_data` is not used.
pub fn typed_field_for(t: HostDataType) -> &'static str {
    match t {
        HostDataType::F32 => "float_data",
        HostDataType::F64 => "double_data",
        HostDataType::I64 => "int64_data",
        HostDataType::U32 | HostDataType::U64 => "uint64_data",
        HostDataType::F16
        | HostDataType::I8
        | HostDataType::U8
        | HostDataType::I16
        | HostDataType::U16
        | HostDataType::I32
        | HostDataType::Bool
        | HostDataType::Bf16
        | HostDataType::F8E4M3Fn
        | HostDataType::F8E4M3Fnuz
        | HostDataType::F8E5M2
        | HostDataType::F8E5M2Fnuz
        | HostDataType::F4E2M1Fn
        | HostDataType::I4
        | HostDataType::U4
        | HostDataType::I2
        | HostDataType::U2 => "int32_data",
    }
}

/// Validated shape of a tensor: the host dims and the byte size they need.
struct Layout {
    shape: Vec<usize>,
    count: usize,
    bytes: usize,
}

fn layout(t: &TensorProto, dtype: HostDataType) -> Result<Layout, OnnxTensorError> {
    let mut shape = Vec::with_capacity(t.dims.len());
    for (index, &d) in t.dims.iter().enumerate() {
        let d = usize::try_from(d).map_err(|_| {
            if d < 0 {
                OnnxTensorError::NegativeDim {
                    tensor: display_name(t),
                    dims: t.dims.clone(),
                    index,
                }
            } else {
                OnnxTensorError::TooLarge {
                    tensor: display_name(t),
                    dims: t.dims.clone(),
                }
            }
        })?;
        shape.push(d);
    }
    // A zero dimension makes the tensor empty whatever the others say.
    let count = if shape.contains(&0) {
        Some(0)
    } else {
        nnc_formats::tensor::element_count(&shape)
    };
    // What the proto stores: packed types take a fraction of a byte per element.
    let bytes = match packed_bits(dtype) {
        Some(bits) => count.map(|n| n.div_ceil((8 / bits) as usize)),
        None => count.and_then(|n| n.checked_mul(dtype.size())),
    }
    .filter(|&b| b <= isize::MAX as usize);
    match (count, bytes) {
        (Some(count), Some(bytes)) => Ok(Layout {
            shape,
            count,
            bytes,
        }),
        _ => Err(OnnxTensorError::TooLarge {
            tensor: display_name(t),
            dims: t.dims.clone(),
        }),
    }
}

/// Converts a `TensorProto` to a host tensor, reading external data through `ctx`.
pub fn tensor_to_host(
    t: &TensorProto,
    ctx: &ExternalDataContext,
) -> Result<HostTensor, OnnxTensorError> {
    let Some(dtype) = host_data_type(t.data_type) else {
        return Err(OnnxTensorError::UnsupportedDataType {
            tensor: display_name(t),
            data_type: OnnxDataType::describe(t.data_type),
        });
    };
    if t.segment.is_some() {
        return Err(OnnxTensorError::Segmented {
            tensor: display_name(t),
        });
    }
    let layout = layout(t, dtype)?;
    // Before any byte of the data is read or copied: a few bytes of dims can declare
    // gigabytes, and external data can name a sparse file of any size.
    let external = t.data_location == Some(DataLocation::External as i32);
    if let Some(limits) = ctx.limits.or_else(|| external.then(Limits::default)) {
        limits
            .check(
                LimitKind::Tensor,
                || format!("tensor {} ({dtype} {:?})", display_name(t), t.dims),
                Some(layout.bytes as u64),
            )
            .map_err(|source| OnnxTensorError::Limit {
                tensor: display_name(t),
                source,
            })?;
    }
    let typed = nonempty_typed_field(t);

    let data = match t.data_location {
        None => None,
        Some(code) => match DataLocation::try_from(code) {
            Ok(DataLocation::Default) => None,
            Ok(DataLocation::External) => {
                if let Some(field) = inline_source(t, typed) {
                    return Err(OnnxTensorError::ConflictingData {
                        tensor: display_name(t),
                        first: "external data",
                        second: field,
                    });
                }
                Some(read_external(t, ctx, dtype, &layout)?)
            }
            Err(_) => {
                return Err(OnnxTensorError::UnknownDataLocation {
                    tensor: display_name(t),
                    code,
                });
            }
        },
    };
    let data = match data {
        Some(d) => d,
        None => match (&t.raw_data, typed) {
            // An empty raw_data next to a typed field is tolerated: the typed field wins.
            (Some(raw), Some(field)) if !raw.is_empty() => {
                return Err(OnnxTensorError::ConflictingData {
                    tensor: display_name(t),
                    first: "raw_data",
                    second: field,
                });
            }
            (Some(raw), None) => {
                check_bytes(t, dtype, &layout, "raw_data", raw.len())?;
                raw.to_vec()
            }
            _ => from_typed_fields(t, dtype, &layout)?,
        },
    };
    // Packed types are unpacked to one element per byte (integers sign-extended).
    let data = match packed_bits(dtype) {
        Some(bits) => {
            let fields = nnc_formats::minifloat::unpack_fields(&data, bits, layout.count)
                .ok_or_else(|| OnnxTensorError::SizeMismatch {
                    tensor: display_name(t),
                    source_name: "packed data".to_string(),
                    dtype,
                    dims: t.dims.clone(),
                    expected: layout.bytes,
                    actual: data.len(),
                    unit: "bytes",
                })?;
            match dtype.narrow_int() {
                Some(n) => fields
                    .into_iter()
                    .map(|f| n.from_field(f) as i8 as u8)
                    .collect(),
                None => fields,
            }
        }
        None => data,
    };
    if dtype == HostDataType::Bool
        && let Some((index, &value)) = data.iter().enumerate().find(|&(_, &b)| b > 1)
    {
        return Err(OnnxTensorError::InvalidBool {
            tensor: display_name(t),
            index,
            value,
        });
    }
    HostTensor::new(dtype, layout.shape, data).map_err(|source| OnnxTensorError::Host {
        tensor: display_name(t),
        source,
    })
}

/// The first non-empty typed data field, by name.
fn nonempty_typed_field(t: &TensorProto) -> Option<&'static str> {
    [
        ("float_data", t.float_data.is_empty()),
        ("int32_data", t.int32_data.is_empty()),
        ("string_data", t.string_data.is_empty()),
        ("int64_data", t.int64_data.is_empty()),
        ("double_data", t.double_data.is_empty()),
        ("uint64_data", t.uint64_data.is_empty()),
    ]
    .into_iter()
    .find(|&(_, empty)| !empty)
    .map(|(name, _)| name)
}

/// The inline data source that conflicts with external data, if any. An empty but present
/// `raw_data` is tolerated: some writers leave it set when moving data out.
fn inline_source(t: &TensorProto, typed: Option<&'static str>) -> Option<&'static str> {
    if t.raw_data.as_ref().is_some_and(|r| !r.is_empty()) {
        Some("raw_data")
    } else {
        typed
    }
}

fn check_bytes(
    t: &TensorProto,
    dtype: HostDataType,
    layout: &Layout,
    source_name: &str,
    actual: usize,
) -> Result<(), OnnxTensorError> {
    if actual == layout.bytes {
        Ok(())
    } else {
        Err(OnnxTensorError::SizeMismatch {
            tensor: display_name(t),
            source_name: source_name.to_string(),
            dtype,
            dims: t.dims.clone(),
            expected: layout.bytes,
            actual,
            unit: "bytes",
        })
    }
}

fn check_count(
    t: &TensorProto,
    dtype: HostDataType,
    layout: &Layout,
    field: &'static str,
    actual: usize,
) -> Result<(), OnnxTensorError> {
    if actual == layout.count {
        Ok(())
    } else {
        Err(OnnxTensorError::SizeMismatch {
            tensor: display_name(t),
            source_name: field.to_string(),
            dtype,
            dims: t.dims.clone(),
            expected: layout.count,
            actual,
            unit: "elements",
        })
    }
}

/// Builds little-endian bytes from the typed field that `dtype` uses.
fn from_typed_fields(
    t: &TensorProto,
    dtype: HostDataType,
    layout: &Layout,
) -> Result<Vec<u8>, OnnxTensorError> {
    let expected = typed_field_for(dtype);
    // Data in any other typed field is a producer error, not something to ignore.
    for (field, empty) in [
        ("float_data", t.float_data.is_empty()),
        ("int32_data", t.int32_data.is_empty()),
        ("string_data", t.string_data.is_empty()),
        ("int64_data", t.int64_data.is_empty()),
        ("double_data", t.double_data.is_empty()),
        ("uint64_data", t.uint64_data.is_empty()),
    ] {
        if field != expected && !empty {
            return Err(OnnxTensorError::WrongTypedField {
                tensor: display_name(t),
                data_type: onnx_data_type(dtype).name(),
                field,
                expected,
            });
        }
    }
    // The counts are checked before allocating: the output is exactly `layout.bytes`.
    let mut out = Vec::new();
    match dtype {
        HostDataType::F32 => {
            check_count(t, dtype, layout, expected, t.float_data.len())?;
            out.reserve_exact(layout.bytes);
            for v in &t.float_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        HostDataType::F64 => {
            check_count(t, dtype, layout, expected, t.double_data.len())?;
            out.reserve_exact(layout.bytes);
            for v in &t.double_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        HostDataType::I64 => {
            check_count(t, dtype, layout, expected, t.int64_data.len())?;
            out.reserve_exact(layout.bytes);
            for v in &t.int64_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        HostDataType::U64 => {
            check_count(t, dtype, layout, expected, t.uint64_data.len())?;
            out.reserve_exact(layout.bytes);
            for v in &t.uint64_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        HostDataType::U32 => {
            check_count(t, dtype, layout, expected, t.uint64_data.len())?;
            out.reserve_exact(layout.bytes);
            for (index, &v) in t.uint64_data.iter().enumerate() {
                let v = u32::try_from(v).map_err(|_| out_of_range(t, expected, index, v, dtype))?;
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        HostDataType::I32 => {
            check_count(t, dtype, layout, expected, t.int32_data.len())?;
            out.reserve_exact(layout.bytes);
            for v in &t.int32_data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        // Packed types travel one packed byte per int32 entry.
        HostDataType::I4
        | HostDataType::U4
        | HostDataType::I2
        | HostDataType::U2
        | HostDataType::F4E2M1Fn => {
            check_bytes(t, dtype, layout, expected, t.int32_data.len())?;
            out.reserve_exact(layout.bytes);
            for (index, &v) in t.int32_data.iter().enumerate() {
                out.push(u8::try_from(v).map_err(|_| out_of_range(t, expected, index, v, dtype))?);
            }
        }
        // Narrow types travel one element per int32 entry; values must fit the type
        // (float16 and bfloat16 as their bit patterns, 0..=65535; float8 as its code).
        // Truncating silently would hide corruption.
        HostDataType::I8
        | HostDataType::U8
        | HostDataType::Bool
        | HostDataType::F8E4M3Fn
        | HostDataType::F8E4M3Fnuz
        | HostDataType::F8E5M2
        | HostDataType::F8E5M2Fnuz => {
            check_count(t, dtype, layout, expected, t.int32_data.len())?;
            out.reserve_exact(layout.bytes);
            for (index, &v) in t.int32_data.iter().enumerate() {
                let byte = match dtype {
                    HostDataType::I8 => i8::try_from(v).map(|b| b as u8).ok(),
                    HostDataType::Bool => (v == 0 || v == 1).then_some(v as u8),
                    _ => u8::try_from(v).ok(),
                };
                out.push(byte.ok_or_else(|| out_of_range(t, expected, index, v, dtype))?);
            }
        }
        HostDataType::I16 | HostDataType::U16 | HostDataType::F16 | HostDataType::Bf16 => {
            check_count(t, dtype, layout, expected, t.int32_data.len())?;
            out.reserve_exact(layout.bytes);
            for (index, &v) in t.int32_data.iter().enumerate() {
                let half = match dtype {
                    HostDataType::I16 => i16::try_from(v).map(|h| h.to_le_bytes()).ok(),
                    _ => u16::try_from(v).map(|h| h.to_le_bytes()).ok(),
                };
                out.extend_from_slice(
                    &half.ok_or_else(|| out_of_range(t, expected, index, v, dtype))?,
                );
            }
        }
    }
    Ok(out)
}

fn out_of_range(
    t: &TensorProto,
    field: &'static str,
    index: usize,
    value: impl Into<i128>,
    dtype: HostDataType,
) -> OnnxTensorError {
    OnnxTensorError::ValueOutOfRange {
        tensor: display_name(t),
        field,
        index,
        value: value.into(),
        dtype,
    }
}

fn parse_external_number(
    t: &TensorProto,
    key: &'static str,
) -> Result<Option<u64>, OnnxTensorError> {
    match t.external_data_value(key) {
        None => Ok(None),
        Some(value) => {
            value
                .trim()
                .parse::<u64>()
                .map(Some)
                .map_err(|_| OnnxTensorError::ExternalBadNumber {
                    tensor: display_name(t),
                    key,
                    value: value.to_string(),
                })
        }
    }
}

/// Resolves `location` under `base`, refusing anything that could leave it.
fn resolve_external_path(
    t: &TensorProto,
    base: &Path,
    location: &str,
) -> Result<PathBuf, OnnxTensorError> {
    let unsafe_path = |reason| OnnxTensorError::ExternalUnsafePath {
        tensor: display_name(t),
        location: location.to_string(),
        reason,
    };
    let rel = Path::new(location);
    // Lexical checks first: they reject escapes even when the target does not exist.
    if rel.is_absolute() || rel.has_root() {
        return Err(unsafe_path("absolute paths are not allowed"));
    }
    for c in rel.components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(unsafe_path("`..` components are not allowed")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(unsafe_path("absolute paths are not allowed"));
            }
        }
    }
    let io_err = |path: &Path, source| OnnxTensorError::ExternalIo {
        tensor: display_name(t),
        path: path.to_path_buf(),
        source,
    };
    let joined = base.join(rel);
    // Canonical forms resolve symlinks, so a link pointing outside the base is caught.
    let base_canon = base.canonicalize().map_err(|e| io_err(base, e))?;
    let canon = joined.canonicalize().map_err(|e| io_err(&joined, e))?;
    if !canon.starts_with(&base_canon) {
        return Err(unsafe_path("it resolves outside the model directory"));
    }
    Ok(canon)
}

fn read_external(
    t: &TensorProto,
    ctx: &ExternalDataContext,
    dtype: HostDataType,
    layout: &Layout,
) -> Result<Vec<u8>, OnnxTensorError> {
    let Some(base) = &ctx.base_dir else {
        return Err(OnnxTensorError::ExternalWithoutBaseDir {
            tensor: display_name(t),
        });
    };
    let location = match t.external_data_value("location") {
        Some(l) if !l.is_empty() => l,
        _ => {
            return Err(OnnxTensorError::ExternalMissingLocation {
                tensor: display_name(t),
            });
        }
    };
    let offset = parse_external_number(t, "offset")?.unwrap_or(0);
    let length = parse_external_number(t, "length")?;
    let path = resolve_external_path(t, base, location)?;
    let io_err = |source| OnnxTensorError::ExternalIo {
        tensor: display_name(t),
        path: path.clone(),
        source,
    };

    let mut file = File::open(&path).map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    // Devices and FIFOs could block or be endless; only plain files are data.
    if !meta.is_file() {
        return Err(OnnxTensorError::ExternalNotAFile {
            tensor: display_name(t),
            path,
        });
    }
    let file_size = meta.len();
    let out_of_range = |length| OnnxTensorError::ExternalOutOfRange {
        tensor: display_name(t),
        path: path.clone(),
        offset,
        length,
        file_size,
    };
    // Without `length` the data runs to the end of the file.
    let length = match length {
        Some(l) => l,
        None => file_size
            .checked_sub(offset)
            .ok_or_else(|| out_of_range(0))?,
    };
    match offset.checked_add(length) {
        Some(end) if end <= file_size => {}
        _ => return Err(out_of_range(length)),
    }
    let source_name = format!("external file {} at offset {offset}", path.display());
    let length = usize::try_from(length).map_err(|_| out_of_range(length))?;
    check_bytes(t, dtype, layout, &source_name, length)?;

    file.seek(SeekFrom::Start(offset)).map_err(io_err)?;
    let mut data = vec![0u8; length];
    file.read_exact(&mut data).map_err(io_err)?;
    Ok(data)
}

/// Builds a `TensorProto` in `raw_data` form from a host tensor (for writing `.pb` files).
///
/// Dimensions larger than `i64::MAX` (only possible for empty tensors) are saturated.
pub fn host_to_tensor(t: &HostTensor, name: &str) -> TensorProto {
    let raw = match packed_bits(t.dtype) {
        Some(bits) => nnc_formats::minifloat::pack_fields(&t.data, bits),
        None => t.data.clone(),
    };
    TensorProto {
        dims: t
            .shape
            .iter()
            .map(|&d| i64::try_from(d).unwrap_or(i64::MAX))
            .collect(),
        data_type: onnx_data_type(t.dtype) as i32,
        name: name.to_string(),
        raw_data: Some(Bytes::from(raw)),
        ..TensorProto::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::proto::tests::fixture_bytes;
    use crate::onnx::proto::{StringStringEntryProto, decode_model, decode_tensor, encode_tensor};

    fn proto(name: &str, dtype: OnnxDataType, dims: &[i64]) -> TensorProto {
        TensorProto {
            name: name.into(),
            data_type: dtype as i32,
            dims: dims.to_vec(),
            ..TensorProto::default()
        }
    }

    fn le<T: Copy, const N: usize>(values: &[T], to: fn(T) -> [u8; N]) -> Vec<u8> {
        values.iter().flat_map(|&v| to(v)).collect()
    }

    fn none() -> ExternalDataContext {
        ExternalDataContext::none()
    }

    fn external(name: &str, dims: &[i64], entries: &[(&str, &str)]) -> TensorProto {
        TensorProto {
            data_location: Some(DataLocation::External as i32),
            external_data: entries
                .iter()
                .map(|(k, v)| StringStringEntryProto {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            ..proto(name, OnnxDataType::Float, dims)
        }
    }

    #[test]
    fn fixture_initializers_convert() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut w = b"ABCD".to_vec();
        w.extend(le(&[4.0f32, -1.0], f32::to_le_bytes));
        w.extend(b"TAIL");
        std::fs::write(dir.path().join("w.bin"), w).expect("write");
        let ctx = ExternalDataContext::with_base_dir(dir.path());

        let m = decode_model(Bytes::from(fixture_bytes())).expect("decode");
        let g = m.graph.expect("graph");
        let get = |name: &str| {
            let t = g.initializer.iter().find(|t| t.name == name).expect(name);
            tensor_to_host(t, &ctx).unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        let check = |name: &str, dtype: HostDataType, shape: &[usize], data: Vec<u8>| {
            let t = get(name);
            assert_eq!(
                (t.dtype, t.shape.as_slice(), &t.data),
                (dtype, shape, &data),
                "{name}"
            );
        };
        use HostDataType as H;
        check(
            "raw_f32",
            H::F32,
            &[1, 2],
            le(&[1.5f32, -2.0], f32::to_le_bytes),
        );
        check("f32", H::F32, &[2], le(&[1.5f32, -2.0], f32::to_le_bytes));
        check("i8", H::I8, &[3], vec![0x80, 0, 0x7f]);
        check("u8", H::U8, &[2], vec![0, 255]);
        check(
            "i16",
            H::I16,
            &[2],
            le(&[i16::MIN, i16::MAX], i16::to_le_bytes),
        );
        check("u16", H::U16, &[2], le(&[0u16, u16::MAX], u16::to_le_bytes));
        check("i32", H::I32, &[2], le(&[-5i32, 6], i32::to_le_bytes));
        // float16 1.0 = 0x3c00, -0.5 = 0xb800
        check(
            "f16",
            H::F16,
            &[2],
            le(&[0x3c00u16, 0xb800], u16::to_le_bytes),
        );
        check("b", H::Bool, &[3], vec![1, 0, 1]);
        check(
            "i64",
            H::I64,
            &[2],
            le(&[-(1i64 << 40), 3], i64::to_le_bytes),
        );
        check("f64", H::F64, &[1], 0.25f64.to_le_bytes().to_vec());
        check("u32", H::U32, &[2], le(&[0u32, u32::MAX], u32::to_le_bytes));
        check("u64", H::U64, &[1], u64::MAX.to_le_bytes().to_vec());
        check("scalar", H::F32, &[], 3.0f32.to_le_bytes().to_vec());
        check("ext", H::F32, &[2], le(&[4.0f32, -1.0], f32::to_le_bytes));
        check("zero_loc", H::F32, &[1], 1.0f32.to_le_bytes().to_vec());

        // The same model decoded from bytes alone cannot reach its external data.
        let ext = g.initializer.iter().find(|t| t.name == "ext").expect("ext");
        let e = tensor_to_host(ext, &none()).expect_err("no base dir");
        assert!(
            matches!(e, OnnxTensorError::ExternalWithoutBaseDir { .. }),
            "{e}"
        );
        assert!(
            e.to_string().contains("'ext'") && e.to_string().contains("base directory"),
            "{e}"
        );
    }

    #[test]
    fn typed_fields_every_path() {
        use HostDataType as H;
        use OnnxDataType as O;
        let cases: Vec<(TensorProto, H, Vec<u8>)> = vec![
            (
                TensorProto {
                    float_data: vec![1.0, f32::NAN],
                    ..proto("a", O::Float, &[2])
                },
                H::F32,
                le(&[1.0f32, f32::NAN], f32::to_le_bytes),
            ),
            (
                TensorProto {
                    double_data: vec![-1.5],
                    ..proto("a", O::Double, &[1, 1])
                },
                H::F64,
                (-1.5f64).to_le_bytes().to_vec(),
            ),
            (
                TensorProto {
                    int64_data: vec![i64::MIN, i64::MAX],
                    ..proto("a", O::Int64, &[2])
                },
                H::I64,
                le(&[i64::MIN, i64::MAX], i64::to_le_bytes),
            ),
            (
                TensorProto {
                    uint64_data: vec![u64::MAX, 0],
                    ..proto("a", O::Uint64, &[2])
                },
                H::U64,
                le(&[u64::MAX, 0], u64::to_le_bytes),
            ),
            (
                TensorProto {
                    uint64_data: vec![7, u64::from(u32::MAX)],
                    ..proto("a", O::Uint32, &[2])
                },
                H::U32,
                le(&[7u32, u32::MAX], u32::to_le_bytes),
            ),
            (
                TensorProto {
                    int32_data: vec![i32::MIN, -1],
                    ..proto("a", O::Int32, &[2])
                },
                H::I32,
                le(&[i32::MIN, -1], i32::to_le_bytes),
            ),
            (
                TensorProto {
                    int32_data: vec![-128, 127, -1],
                    ..proto("a", O::Int8, &[3])
                },
                H::I8,
                vec![0x80, 0x7f, 0xff],
            ),
            (
                TensorProto {
                    int32_data: vec![0, 255],
                    ..proto("a", O::Uint8, &[2])
                },
                H::U8,
                vec![0, 255],
            ),
            (
                TensorProto {
                    int32_data: vec![-32768, 32767],
                    ..proto("a", O::Int16, &[2])
                },
                H::I16,
                le(&[i16::MIN, i16::MAX], i16::to_le_bytes),
            ),
            (
                TensorProto {
                    int32_data: vec![0, 65535],
                    ..proto("a", O::Uint16, &[2])
                },
                H::U16,
                le(&[0u16, u16::MAX], u16::to_le_bytes),
            ),
            (
                TensorProto {
                    int32_data: vec![0x3c00, 0xfbff],
                    ..proto("a", O::Float16, &[2])
                },
                H::F16,
                le(&[0x3c00u16, 0xfbff], u16::to_le_bytes),
            ),
            (
                TensorProto {
                    int32_data: vec![1, 0],
                    ..proto("a", O::Bool, &[2])
                },
                H::Bool,
                vec![1, 0],
            ),
            // Empty tensors need no data at all.
            (proto("a", O::Float, &[3, 0]), H::F32, vec![]),
            // A zero dim makes absurd other dims harmless.
            (
                proto("a", O::Int64, &[0, i64::MAX, i64::MAX]),
                H::I64,
                vec![],
            ),
        ];
        for (t, dtype, data) in cases {
            let h = tensor_to_host(&t, &none()).unwrap_or_else(|e| panic!("{t:?}: {e}"));
            assert_eq!((h.dtype, h.data), (dtype, data), "{t:?}");
            let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
            assert_eq!(h.shape, dims);
        }
    }

    #[test]
    fn out_of_range_typed_values_are_rejected() {
        use OnnxDataType as O;
        let cases = [
            (
                TensorProto {
                    int32_data: vec![0, 128],
                    ..proto("q", O::Int8, &[2])
                },
                1,
                "128",
            ),
            (
                TensorProto {
                    int32_data: vec![-1],
                    ..proto("q", O::Uint8, &[1])
                },
                0,
                "-1",
            ),
            (
                TensorProto {
                    int32_data: vec![65536],
                    ..proto("q", O::Float16, &[1])
                },
                0,
                "65536",
            ),
            (
                TensorProto {
                    int32_data: vec![40000],
                    ..proto("q", O::Int16, &[1])
                },
                0,
                "40000",
            ),
            (
                TensorProto {
                    int32_data: vec![1, 2],
                    ..proto("q", O::Bool, &[2])
                },
                1,
                "2",
            ),
            (
                TensorProto {
                    uint64_data: vec![1 << 32],
                    ..proto("q", O::Uint32, &[1])
                },
                0,
                "4294967296",
            ),
        ];
        for (t, index, value) in cases {
            let e = tensor_to_host(&t, &none()).expect_err("out of range");
            assert!(
                matches!(e, OnnxTensorError::ValueOutOfRange { index: i, .. } if i == index),
                "{e}"
            );
            let msg = e.to_string();
            assert!(msg.contains("'q'") && msg.contains(value), "{msg}");
        }
    }

    #[test]
    fn raw_data_and_its_errors() {
        use OnnxDataType as O;
        let t = TensorProto {
            raw_data: Some(Bytes::from(le(&[1i16, -2, 3], i16::to_le_bytes))),
            ..proto("r", O::Int16, &[3])
        };
        let h = tensor_to_host(&t, &none()).expect("raw");
        assert_eq!(h.data, le(&[1i16, -2, 3], i16::to_le_bytes));

        let short = TensorProto {
            raw_data: Some(Bytes::from_static(&[0; 5])),
            ..proto("r", O::Int16, &[3])
        };
        let e = tensor_to_host(&short, &none()).expect_err("short");
        assert!(
            matches!(
                e,
                OnnxTensorError::SizeMismatch {
                    expected: 6,
                    actual: 5,
                    unit: "bytes",
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains("'r'") && e.to_string().contains("raw_data"),
            "{e}"
        );

        let both = TensorProto {
            float_data: vec![1.0],
            raw_data: Some(Bytes::from_static(&[0; 4])),
            ..proto("r", O::Float, &[1])
        };
        let e = tensor_to_host(&both, &none()).expect_err("both");
        assert!(
            matches!(
                e,
                OnnxTensorError::ConflictingData {
                    first: "raw_data",
                    second: "float_data",
                    ..
                }
            ),
            "{e}"
        );

        let bad_bool = TensorProto {
            raw_data: Some(Bytes::from_static(&[1, 0, 7])),
            ..proto("r", O::Bool, &[3])
        };
        let e = tensor_to_host(&bad_bool, &none()).expect_err("bool");
        assert!(
            matches!(
                e,
                OnnxTensorError::InvalidBool {
                    index: 2,
                    value: 7,
                    ..
                }
            ),
            "{e}"
        );

        // Present-but-empty raw_data is the storage of an empty tensor.
        let empty = TensorProto {
            raw_data: Some(Bytes::new()),
            ..proto("r", O::Float, &[0])
        };
        assert!(
            tensor_to_host(&empty, &none())
                .expect("empty")
                .data
                .is_empty()
        );
    }

    #[test]
    fn typed_field_errors() {
        use OnnxDataType as O;
        let wrong = TensorProto {
            int64_data: vec![1],
            ..proto("w", O::Float, &[1])
        };
        let e = tensor_to_host(&wrong, &none()).expect_err("wrong field");
        assert!(
            e.to_string().contains("int64_data") && e.to_string().contains("float_data"),
            "{e}"
        );

        let few = TensorProto {
            float_data: vec![1.0, 2.0],
            ..proto("w", O::Float, &[3])
        };
        let e = tensor_to_host(&few, &none()).expect_err("count");
        assert!(
            matches!(
                e,
                OnnxTensorError::SizeMismatch {
                    expected: 3,
                    actual: 2,
                    unit: "elements",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("'w'"), "{e}");

        // A scalar with no data anywhere is a size mismatch, not a zero.
        let e = tensor_to_host(&proto("s", O::Float, &[]), &none()).expect_err("no data");
        assert!(
            matches!(
                e,
                OnnxTensorError::SizeMismatch {
                    expected: 1,
                    actual: 0,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn bad_dims_are_rejected() {
        use OnnxDataType as O;
        let e = tensor_to_host(&proto("d", O::Float, &[2, -1]), &none()).expect_err("negative");
        assert!(
            matches!(e, OnnxTensorError::NegativeDim { index: 1, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("'d'"), "{e}");
        for dims in [
            &[i64::MAX, 2][..],
            &[1 << 31, 1 << 31, 1 << 31],
            &[i64::MAX / 2],
        ] {
            let e = tensor_to_host(&proto("d", O::Float, dims), &none()).expect_err("overflow");
            assert!(
                matches!(e, OnnxTensorError::TooLarge { .. }),
                "{dims:?}: {e}"
            );
        }
    }

    #[test]
    fn unsupported_types_and_segments() {
        use OnnxDataType as O;
        for (dtype, name) in [
            (O::String, "STRING"),
            (O::Complex64, "COMPLEX64"),
            (O::Complex128, "COMPLEX128"),
            (O::Float8e8m0, "FLOAT8E8M0"),
            (O::Undefined, "UNDEFINED"),
        ] {
            let e = tensor_to_host(&proto("u", dtype, &[1]), &none()).expect_err(name);
            assert_eq!(
                e.to_string(),
                format!("tensor 'u': data type {name} is not supported")
            );
        }
        let t = TensorProto {
            data_type: 999,
            ..proto("u", O::Float, &[1])
        };
        let e = tensor_to_host(&t, &none()).expect_err("unknown");
        assert!(e.to_string().contains("unknown data type 999"), "{e}");

        let seg = TensorProto {
            segment: Some(crate::onnx::proto::tensor_proto::Segment { begin: 0, end: 1 }),
            float_data: vec![1.0],
            ..proto("s", O::Float, &[1])
        };
        let e = tensor_to_host(&seg, &none()).expect_err("segment");
        assert_eq!(
            e.to_string(),
            "tensor 's': segmented tensors are not supported"
        );

        let loc = TensorProto {
            data_location: Some(7),
            float_data: vec![1.0],
            ..proto("l", O::Float, &[1])
        };
        let e = tensor_to_host(&loc, &none()).expect_err("location");
        assert!(
            matches!(e, OnnxTensorError::UnknownDataLocation { code: 7, .. }),
            "{e}"
        );
    }

    #[test]
    fn external_data_reads_and_bounds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().join("model");
        std::fs::create_dir_all(base.join("sub")).expect("mkdir");
        let values = le(&[1.0f32, 2.0, 3.0, 4.0], f32::to_le_bytes);
        std::fs::write(base.join("data.bin"), &values).expect("write");
        std::fs::write(base.join("sub/exact.bin"), &values[4..12]).expect("write");
        let ctx = ExternalDataContext::with_base_dir(&base);
        let read = |t: &TensorProto| tensor_to_host(t, &ctx);

        let t = external(
            "e",
            &[2],
            &[("location", "data.bin"), ("offset", "8"), ("length", "8")],
        );
        assert_eq!(read(&t).expect("slice").data, values[8..16]);
        // No length: to the end of the file.
        let t = external("e", &[2], &[("location", "./sub/exact.bin")]);
        assert_eq!(read(&t).expect("whole").data, values[4..12]);
        let t = external("e", &[1], &[("location", "data.bin"), ("offset", "12")]);
        assert_eq!(read(&t).expect("tail").data, values[12..16]);

        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (
                vec![("location", "data.bin"), ("offset", "12"), ("length", "8")],
                "exceeds file",
            ),
            (
                vec![("location", "data.bin"), ("offset", "17")],
                "exceeds file",
            ),
            (
                vec![
                    ("location", "data.bin"),
                    ("offset", "18446744073709551615"),
                    ("length", "8"),
                ],
                "exceeds file",
            ),
            (
                vec![("location", "data.bin"), ("length", "18446744073709551615")],
                "exceeds file",
            ),
            (
                vec![("location", "data.bin"), ("length", "12")],
                "need 8 bytes",
            ),
            (vec![("location", "data.bin")], "need 8 bytes"),
            (
                vec![("location", "data.bin"), ("offset", "-4")],
                "not a non-negative integer",
            ),
            (
                vec![("location", "data.bin"), ("length", "eight")],
                "not a non-negative integer",
            ),
            (vec![("offset", "0")], "no `location`"),
            (vec![("location", "missing.bin")], "missing.bin"),
            (vec![("location", "sub")], "not a regular file"),
        ];
        for (entries, needle) in cases {
            let t = external("ext_t", &[2], &entries);
            let e = read(&t).expect_err(needle);
            let msg = e.to_string();
            assert!(
                msg.contains(needle) && msg.contains("'ext_t'"),
                "{entries:?}: {msg}"
            );
        }
        // Errors about the file name it.
        let t = external(
            "e",
            &[2],
            &[("location", "data.bin"), ("offset", "12"), ("length", "8")],
        );
        assert!(
            read(&t)
                .expect_err("range")
                .to_string()
                .contains("data.bin")
        );
    }

    #[test]
    fn external_path_escapes_are_rejected() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().join("model");
        std::fs::create_dir_all(base.join("sub")).expect("mkdir");
        let secret = dir.path().join("secret.bin");
        std::fs::write(&secret, [0u8; 8]).expect("write");
        std::fs::write(base.join("ok.bin"), [0u8; 8]).expect("write");
        let ctx = ExternalDataContext::with_base_dir(&base);

        let absolute = secret.to_string_lossy().into_owned();
        for location in [
            absolute.as_str(),
            "../secret.bin",
            "sub/../../secret.bin",
            "sub/../ok.bin",
            "/etc/passwd",
        ] {
            let t = external("x", &[2], &[("location", location)]);
            let e = tensor_to_host(&t, &ctx).expect_err(location);
            assert!(
                matches!(e, OnnxTensorError::ExternalUnsafePath { .. }),
                "{location}: {e}"
            );
        }

        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&secret, base.join("link.bin")).expect("symlink");
            std::os::unix::fs::symlink(dir.path(), base.join("sub/up")).expect("symlink");
            for location in ["link.bin", "sub/up/secret.bin"] {
                let t = external("x", &[2], &[("location", location)]);
                let e = tensor_to_host(&t, &ctx).expect_err(location);
                assert!(
                    e.to_string().contains("outside the model directory"),
                    "{location}: {e}"
                );
            }
            // A symlink that stays inside is fine.
            std::os::unix::fs::symlink(base.join("ok.bin"), base.join("sub/inside.bin"))
                .expect("symlink");
            let t = external("x", &[2], &[("location", "sub/inside.bin")]);
            assert_eq!(tensor_to_host(&t, &ctx).expect("inside").data, vec![0u8; 8]);
        }

        // External data alongside inline data is contradictory.
        let mut t = external("x", &[2], &[("location", "ok.bin")]);
        t.float_data = vec![1.0, 2.0];
        let e = tensor_to_host(&t, &ctx).expect_err("both");
        assert!(matches!(e, OnnxTensorError::ConflictingData { .. }), "{e}");
    }

    #[test]
    fn model_file_context_uses_parent_dir() {
        assert_eq!(
            ExternalDataContext::for_model_file(Path::new("/a/b/m.onnx")).base_dir,
            Some(PathBuf::from("/a/b"))
        );
        assert_eq!(
            ExternalDataContext::for_model_file(Path::new("m.onnx")).base_dir,
            Some(PathBuf::from("."))
        );
    }

    #[test]
    fn real_mobilenet_initializers_convert() {
        let Some(dir) = crate::onnx::proto::tests::shared_models_dir() else {
            return;
        };
        let path = dir.join("mobilenet_v2.onnx");
        let bytes = std::fs::read(&path).expect("read model");
        let m = decode_model(Bytes::from(bytes)).expect("decode");
        let ctx = ExternalDataContext::for_model_file(&path);
        let mut total = 0;
        for t in &m.graph.expect("graph").initializer {
            let h = tensor_to_host(t, &ctx).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(h.dtype, HostDataType::F32);
            total += h.data.len();
        }
        // MobileNetV2 has about 3.5 million float parameters.
        assert!((13_000_000..15_000_000).contains(&total), "{total}");
    }

    #[test]
    fn host_round_trip_through_pb_bytes() {
        for dtype in HostDataType::ALL {
            for shape in [vec![], vec![0], vec![3], vec![2, 2, 1]] {
                let n: usize = shape.iter().product();
                let data: Vec<u8> = (0..n * dtype.size())
                    .map(|i| {
                        if dtype == HostDataType::Bool {
                            (i % 2) as u8
                        } else if let Some(int) = dtype.narrow_int() {
                            // In range, held extended as host tensors hold them.
                            int.from_field((i * 37) as u8) as i8 as u8
                        } else if dtype == HostDataType::F4E2M1Fn {
                            (i * 37 % 16) as u8
                        } else {
                            (i * 37) as u8
                        }
                    })
                    .collect();
                let host = HostTensor::new(dtype, shape.clone(), data).expect("host");
                let t = host_to_tensor(&host, "out");
                assert_eq!(t.name, "out");
                assert_eq!(host_data_type(t.data_type), Some(dtype));
                let back = decode_tensor(&encode_tensor(&t)).expect("decode");
                assert_eq!(back, t);
                assert_eq!(
                    tensor_to_host(&back, &none()).expect("to host"),
                    host,
                    "{dtype} {shape:?}"
                );
            }
        }
    }
}
