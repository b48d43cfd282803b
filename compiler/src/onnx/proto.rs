//! ONNX protobuf messages, derived by hand with `prost` from the published field numbers
//! of `onnx.proto` (proto2, package `onnx`).
//!
//! Why hand-derived: the wire format is public and stable, prost decodes without panics,
//! and no code generator (`protoc`) is needed at build time.
//!
//! proto2 presence is kept where ONNX gives an explicit zero a meaning different from an
//! absent field (attribute values and their type, `dim_value`, `data_location`,
//! `raw_data`): those fields are `Option`s, so a set zero survives a round trip. Strings
//! stay plain `String`s (empty and absent mean the same in ONNX).
//!
//! Repeated scalars that proto2 declares unpacked are marked `packed = "false"` so that
//! encoding matches what the reference implementation writes; prost accepts both forms when
//! decoding, as protobuf requires.
//!
//! Large byte payloads (`TensorProto.raw_data`, `AttributeProto.s`/`strings`,
//! `TensorProto.string_data`) are `bytes::Bytes`: decoding from a `Bytes` buffer (see
//! [`decode_model`]) slices the input instead of copying weights.
//!
//! Nested messages and enums live in snake-case modules named after their parent, the
//! layout `prost-build` would produce (`tensor_proto::DataType`, `type_proto::Tensor`, ...).

use bytes::Bytes;
use prost::Message;

/// Why ONNX protobuf bytes could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum OnnxDecodeError {
    /// The bytes are not a valid protobuf encoding of the expected message.
    #[error("invalid ONNX {what} protobuf ({len} bytes): {source}")]
    Protobuf {
        /// Which message was being decoded (`ModelProto`, `TensorProto`).
        what: &'static str,
        /// Size of the input in bytes.
        len: usize,
        #[source]
        source: prost::DecodeError,
    },
    /// Messages nest deeper than the decoder allows (graphs within graph attributes:
    /// Ifs within Ifs), which bounds recursion on hostile input.
    #[error(
        "invalid ONNX {what} ({len} bytes): messages nest more than {PROTOBUF_NESTING_LIMIT} \
         levels deep (graphs within graph attributes, such as Ifs within Ifs)"
    )]
    TooDeep { what: &'static str, len: usize },
}

/// prost's recursion limit on nested messages.
pub const PROTOBUF_NESTING_LIMIT: usize = 100;

/// The decode error, with prost's nesting refusal (whose message spells out the whole
/// path of nested fields) said in one line. prost exposes the cause only as text.
fn decode_error(what: &'static str, len: usize, source: prost::DecodeError) -> OnnxDecodeError {
    if source.to_string().ends_with("recursion limit reached") {
        OnnxDecodeError::TooDeep { what, len }
    } else {
        OnnxDecodeError::Protobuf { what, len, source }
    }
}

/// Decodes a serialized `ModelProto`. Byte fields of the result share `buf` (no copy of the
/// weights).
pub fn decode_model(buf: Bytes) -> Result<ModelProto, OnnxDecodeError> {
    let len = buf.len();
    ModelProto::decode(buf).map_err(|source| decode_error("ModelProto", len, source))
}

/// Decodes a serialized `TensorProto` (the content of an ONNX test-data `.pb` file).
pub fn decode_tensor(buf: &[u8]) -> Result<TensorProto, OnnxDecodeError> {
    TensorProto::decode(buf).map_err(|source| decode_error("TensorProto", buf.len(), source))
}

/// Serializes a `TensorProto` (for writing `.pb` files).
pub fn encode_tensor(t: &TensorProto) -> Vec<u8> {
    t.encode_to_vec()
}

/// Serializes a `ModelProto`.
pub fn encode_model(m: &ModelProto) -> Vec<u8> {
    m.encode_to_vec()
}

/// A whole model: metadata, the operator sets it needs, and its main graph.
#[derive(Clone, PartialEq, Message)]
pub struct ModelProto {
    /// IR version of the file format.
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    /// Operator sets (domain and version) the model imports.
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    #[prost(string, tag = "2")]
    pub producer_name: String,
    #[prost(string, tag = "3")]
    pub producer_version: String,
    #[prost(string, tag = "4")]
    pub domain: String,
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// The computation.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
    #[prost(message, repeated, tag = "20")]
    pub training_info: Vec<TrainingInfoProto>,
    /// Model-local functions.
    #[prost(message, repeated, tag = "25")]
    pub functions: Vec<FunctionProto>,
}

/// An imported operator set: `domain` ("" or "ai.onnx" for the default one) at `version`.
#[derive(Clone, PartialEq, Eq, Hash, Message)]
pub struct OperatorSetIdProto {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// A key/value string pair (metadata, external-data descriptors).
#[derive(Clone, PartialEq, Eq, Hash, Message)]
pub struct StringStringEntryProto {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

/// Names the tensors holding the quantization parameters of one tensor.
#[derive(Clone, PartialEq, Message)]
pub struct TensorAnnotation {
    #[prost(string, tag = "1")]
    pub tensor_name: String,
    #[prost(message, repeated, tag = "2")]
    pub quant_parameter_tensor_names: Vec<StringStringEntryProto>,
}

/// A dataflow graph: nodes in topological order, constant initializers, and typed
/// inputs/outputs.
#[derive(Clone, PartialEq, Message)]
pub struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    #[prost(string, tag = "2")]
    pub name: String,
    /// Constant tensors (weights); an initializer may share its name with a graph input.
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    #[prost(message, repeated, tag = "15")]
    pub sparse_initializer: Vec<SparseTensorProto>,
    #[prost(string, tag = "10")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    /// Optional type information for intermediate values.
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "14")]
    pub quantization_annotation: Vec<TensorAnnotation>,
    #[prost(message, repeated, tag = "16")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// One operator application.
#[derive(Clone, PartialEq, Message)]
pub struct NodeProto {
    /// Input value names; an empty name marks an omitted optional input.
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// Operator domain; "" means the default ONNX domain.
    #[prost(string, tag = "7")]
    pub domain: String,
    #[prost(string, tag = "8")]
    pub overload: String,
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    #[prost(string, tag = "6")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "9")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// A named attribute of a node or function. `type` says which value field is meaningful;
/// files older than IR version 2 may omit it, in which case the present field tells.
#[derive(Clone, PartialEq, Message)]
pub struct AttributeProto {
    #[prost(string, tag = "1")]
    pub name: String,
    /// In a function body: the name of the function attribute this one refers to.
    #[prost(string, tag = "21")]
    pub ref_attr_name: String,
    #[prost(string, tag = "13")]
    pub doc_string: String,
    /// An [`attribute_proto::AttributeType`] code; `None` when absent.
    #[prost(enumeration = "attribute_proto::AttributeType", optional, tag = "20")]
    pub r#type: Option<i32>,
    #[prost(float, optional, tag = "2")]
    pub f: Option<f32>,
    #[prost(int64, optional, tag = "3")]
    pub i: Option<i64>,
    /// A string value: bytes, UTF-8 by convention but not checked by the decoder.
    #[prost(bytes = "bytes", optional, tag = "4")]
    pub s: Option<Bytes>,
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    #[prost(message, optional, tag = "6")]
    pub g: Option<GraphProto>,
    #[prost(message, optional, tag = "22")]
    pub sparse_tensor: Option<SparseTensorProto>,
    #[prost(message, optional, tag = "14")]
    pub tp: Option<TypeProto>,
    #[prost(float, repeated, packed = "false", tag = "7")]
    pub floats: Vec<f32>,
    #[prost(int64, repeated, packed = "false", tag = "8")]
    pub ints: Vec<i64>,
    #[prost(bytes = "bytes", repeated, tag = "9")]
    pub strings: Vec<Bytes>,
    #[prost(message, repeated, tag = "10")]
    pub tensors: Vec<TensorProto>,
    #[prost(message, repeated, tag = "11")]
    pub graphs: Vec<GraphProto>,
    #[prost(message, repeated, tag = "23")]
    pub sparse_tensors: Vec<SparseTensorProto>,
    #[prost(message, repeated, tag = "15")]
    pub type_protos: Vec<TypeProto>,
}

/// Types nested in [`AttributeProto`].
pub mod attribute_proto {
    /// Which value field of an attribute is in use.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum AttributeType {
        Undefined = 0,
        Float = 1,
        Int = 2,
        String = 3,
        Tensor = 4,
        Graph = 5,
        SparseTensor = 11,
        TypeProto = 13,
        Floats = 6,
        Ints = 7,
        Strings = 8,
        Tensors = 9,
        Graphs = 10,
        SparseTensors = 12,
        TypeProtos = 14,
    }

    impl AttributeType {
        /// The upper-case name used by the ONNX specification (`FLOAT`, `INTS`, ...).
        pub fn name(self) -> &'static str {
            match self {
                AttributeType::Undefined => "UNDEFINED",
                AttributeType::Float => "FLOAT",
                AttributeType::Int => "INT",
                AttributeType::String => "STRING",
                AttributeType::Tensor => "TENSOR",
                AttributeType::Graph => "GRAPH",
                AttributeType::SparseTensor => "SPARSE_TENSOR",
                AttributeType::TypeProto => "TYPE_PROTO",
                AttributeType::Floats => "FLOATS",
                AttributeType::Ints => "INTS",
                AttributeType::Strings => "STRINGS",
                AttributeType::Tensors => "TENSORS",
                AttributeType::Graphs => "GRAPHS",
                AttributeType::SparseTensors => "SPARSE_TENSORS",
                AttributeType::TypeProtos => "TYPE_PROTOS",
            }
        }
    }
}

impl AttributeProto {
    /// The declared attribute type, if present and known.
    pub fn attribute_type(&self) -> Option<attribute_proto::AttributeType> {
        self.r#type
            .and_then(|code| attribute_proto::AttributeType::try_from(code).ok())
    }
}

/// A named value with an optional type (graph inputs, outputs, intermediate values).
#[derive(Clone, PartialEq, Message)]
pub struct ValueInfoProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
    #[prost(string, tag = "3")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "4")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// A dense tensor: dims, element type, and the data in exactly one of `raw_data`, a typed
/// field, or an external file.
///
/// `Debug` is written by hand so that printing a model does not dump megabytes of weights.
#[derive(Clone, PartialEq, Message)]
#[prost(skip_debug)]
pub struct TensorProto {
    #[prost(int64, repeated, packed = "false", tag = "1")]
    pub dims: Vec<i64>,
    /// A [`tensor_proto::DataType`] code (an `int32` on the wire, so unknown codes survive).
    #[prost(enumeration = "tensor_proto::DataType", tag = "2")]
    pub data_type: i32,
    /// Part of a tensor split across several protos (not supported by nnc).
    #[prost(message, optional, tag = "3")]
    pub segment: Option<tensor_proto::Segment>,
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    /// int32, and also int8/uint8/int16/uint16/bool/float16 (bits) elements, one per entry.
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    #[prost(bytes = "bytes", repeated, tag = "6")]
    pub string_data: Vec<Bytes>,
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    #[prost(string, tag = "8")]
    pub name: String,
    #[prost(string, tag = "12")]
    pub doc_string: String,
    /// Little-endian packed elements. `Some` even when empty if the field was present.
    #[prost(bytes = "bytes", optional, tag = "9")]
    pub raw_data: Option<Bytes>,
    /// Where external data lives: keys `location`, `offset`, `length`, `checksum`.
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    /// A [`tensor_proto::DataLocation`] code; `None` when absent (meaning DEFAULT).
    #[prost(enumeration = "tensor_proto::DataLocation", optional, tag = "14")]
    pub data_location: Option<i32>,
    #[prost(double, repeated, tag = "10")]
    pub double_data: Vec<f64>,
    /// uint32 and uint64 elements.
    #[prost(uint64, repeated, tag = "11")]
    pub uint64_data: Vec<u64>,
    #[prost(message, repeated, tag = "16")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

impl std::fmt::Debug for TensorProto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Summarize payloads by length; everything else is printed as is.
        let mut d = f.debug_struct("TensorProto");
        d.field("name", &self.name).field("dims", &self.dims).field(
            "data_type",
            &tensor_proto::DataType::describe(self.data_type),
        );
        if let Some(s) = &self.segment {
            d.field("segment", s);
        }
        if let Some(raw) = &self.raw_data {
            d.field("raw_data_len", &raw.len());
        }
        for (label, len) in [
            ("float_data_len", self.float_data.len()),
            ("int32_data_len", self.int32_data.len()),
            ("string_data_len", self.string_data.len()),
            ("int64_data_len", self.int64_data.len()),
            ("double_data_len", self.double_data.len()),
            ("uint64_data_len", self.uint64_data.len()),
        ] {
            if len > 0 {
                d.field(label, &len);
            }
        }
        if let Some(loc) = self.data_location {
            d.field("data_location", &loc);
        }
        if !self.external_data.is_empty() {
            d.field("external_data", &self.external_data);
        }
        if !self.doc_string.is_empty() {
            d.field("doc_string", &self.doc_string);
        }
        if !self.metadata_props.is_empty() {
            d.field("metadata_props", &self.metadata_props);
        }
        d.finish()
    }
}

impl TensorProto {
    /// The element type, if the code is one this schema knows.
    pub fn known_data_type(&self) -> Option<tensor_proto::DataType> {
        tensor_proto::DataType::try_from(self.data_type).ok()
    }

    /// True when the data lives in an external file.
    pub fn is_external(&self) -> bool {
        self.data_location == Some(tensor_proto::DataLocation::External as i32)
    }

    /// The value of an `external_data` key, if present (the last one wins, like a map).
    pub fn external_data_value(&self, key: &str) -> Option<&str> {
        self.external_data
            .iter()
            .rev()
            .find(|e| e.key == key)
            .map(|e| e.value.as_str())
    }
}

/// Types nested in [`TensorProto`].
pub mod tensor_proto {
    /// Element type codes. Codes beyond the ones listed (added by later ONNX versions)
    /// stay representable in [`super::TensorProto::data_type`] as plain integers.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum DataType {
        Undefined = 0,
        Float = 1,
        Uint8 = 2,
        Int8 = 3,
        Uint16 = 4,
        Int16 = 5,
        Int32 = 6,
        Int64 = 7,
        String = 8,
        Bool = 9,
        Float16 = 10,
        Double = 11,
        Uint32 = 12,
        Uint64 = 13,
        Complex64 = 14,
        Complex128 = 15,
        Bfloat16 = 16,
        Float8e4m3fn = 17,
        Float8e4m3fnuz = 18,
        Float8e5m2 = 19,
        Float8e5m2fnuz = 20,
        Uint4 = 21,
        Int4 = 22,
        Float4e2m1 = 23,
        Float8e8m0 = 24,
        Uint2 = 25,
        Int2 = 26,
    }

    impl DataType {
        /// The upper-case name used by the ONNX specification (`FLOAT`, `INT64`, ...).
        pub fn name(self) -> &'static str {
            match self {
                DataType::Undefined => "UNDEFINED",
                DataType::Float => "FLOAT",
                DataType::Uint8 => "UINT8",
                DataType::Int8 => "INT8",
                DataType::Uint16 => "UINT16",
                DataType::Int16 => "INT16",
                DataType::Int32 => "INT32",
                DataType::Int64 => "INT64",
                DataType::String => "STRING",
                DataType::Bool => "BOOL",
                DataType::Float16 => "FLOAT16",
                DataType::Double => "DOUBLE",
                DataType::Uint32 => "UINT32",
                DataType::Uint64 => "UINT64",
                DataType::Complex64 => "COMPLEX64",
                DataType::Complex128 => "COMPLEX128",
                DataType::Bfloat16 => "BFLOAT16",
                DataType::Float8e4m3fn => "FLOAT8E4M3FN",
                DataType::Float8e4m3fnuz => "FLOAT8E4M3FNUZ",
                DataType::Float8e5m2 => "FLOAT8E5M2",
                DataType::Float8e5m2fnuz => "FLOAT8E5M2FNUZ",
                DataType::Uint4 => "UINT4",
                DataType::Int4 => "INT4",
                DataType::Float4e2m1 => "FLOAT4E2M1",
                DataType::Float8e8m0 => "FLOAT8E8M0",
                DataType::Uint2 => "UINT2",
                DataType::Int2 => "INT2",
            }
        }

        /// A printable name for any code: the spec name, or `unknown data type N`.
        pub fn describe(code: i32) -> String {
            match DataType::try_from(code) {
                Ok(t) => t.name().to_string(),
                Err(_) => format!("unknown data type {code}"),
            }
        }
    }

    /// Whether the data is stored in the proto or in a separate file.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum DataLocation {
        Default = 0,
        External = 1,
    }

    /// The element range `[begin, end)` one proto holds of a segmented tensor.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
    pub struct Segment {
        #[prost(int64, tag = "1")]
        pub begin: i64,
        #[prost(int64, tag = "2")]
        pub end: i64,
    }
}

/// A sparse tensor in coordinate form.
#[derive(Clone, PartialEq, Message)]
pub struct SparseTensorProto {
    /// The non-zero values (a 1-D tensor of NNZ elements).
    #[prost(message, optional, tag = "1")]
    pub values: Option<TensorProto>,
    /// int64 indices: `[NNZ, rank]` coordinates or `[NNZ]` linearized.
    #[prost(message, optional, tag = "2")]
    pub indices: Option<TensorProto>,
    #[prost(int64, repeated, packed = "false", tag = "3")]
    pub dims: Vec<i64>,
}

/// A tensor shape whose dimensions may be known, symbolic, or unknown.
#[derive(Clone, PartialEq, Eq, Hash, Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<tensor_shape_proto::Dimension>,
}

/// Types nested in [`TensorShapeProto`].
pub mod tensor_shape_proto {
    /// One dimension: a number, a symbolic name, or neither (unknown).
    #[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
    pub struct Dimension {
        #[prost(oneof = "dimension::Value", tags = "1, 2")]
        pub value: Option<dimension::Value>,
        #[prost(string, tag = "3")]
        pub denotation: String,
    }

    /// Types nested in [`Dimension`].
    pub mod dimension {
        /// The dimension's value.
        #[derive(Clone, PartialEq, Eq, Hash, prost::Oneof)]
        pub enum Value {
            #[prost(int64, tag = "1")]
            DimValue(i64),
            #[prost(string, tag = "2")]
            DimParam(String),
        }
    }
}

/// The type of a value: tensor, sequence, map, optional, or sparse tensor.
#[derive(Clone, PartialEq, Message)]
pub struct TypeProto {
    #[prost(oneof = "type_proto::Value", tags = "1, 4, 5, 9, 8")]
    pub value: Option<type_proto::Value>,
    #[prost(string, tag = "6")]
    pub denotation: String,
}

/// Types nested in [`TypeProto`].
pub mod type_proto {
    use super::{TensorShapeProto, TypeProto};

    /// A dense tensor type.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Tensor {
        /// A [`super::tensor_proto::DataType`] code.
        #[prost(int32, tag = "1")]
        pub elem_type: i32,
        #[prost(message, optional, tag = "2")]
        pub shape: Option<TensorShapeProto>,
    }

    /// A sequence of values of one type.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sequence {
        #[prost(message, optional, boxed, tag = "1")]
        pub elem_type: Option<Box<TypeProto>>,
    }

    /// A map from a scalar key type to a value type.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Map {
        /// A [`super::tensor_proto::DataType`] code (integral or string).
        #[prost(int32, tag = "1")]
        pub key_type: i32,
        #[prost(message, optional, boxed, tag = "2")]
        pub value_type: Option<Box<TypeProto>>,
    }

    /// A value that may be absent.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Optional {
        #[prost(message, optional, boxed, tag = "1")]
        pub elem_type: Option<Box<TypeProto>>,
    }

    /// A sparse tensor type.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SparseTensor {
        /// A [`super::tensor_proto::DataType`] code.
        #[prost(int32, tag = "1")]
        pub elem_type: i32,
        #[prost(message, optional, tag = "2")]
        pub shape: Option<TensorShapeProto>,
    }

    /// Which kind of type this is.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(message, tag = "1")]
        TensorType(Tensor),
        #[prost(message, tag = "4")]
        SequenceType(Sequence),
        #[prost(message, tag = "5")]
        MapType(Map),
        #[prost(message, tag = "9")]
        OptionalType(Optional),
        #[prost(message, tag = "8")]
        SparseTensorType(SparseTensor),
    }
}

/// A model-local function: a named subgraph usable as an operator.
#[derive(Clone, PartialEq, Message)]
pub struct FunctionProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, repeated, tag = "4")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "5")]
    pub output: Vec<String>,
    /// Names of attributes without defaults.
    #[prost(string, repeated, tag = "6")]
    pub attribute: Vec<String>,
    /// Attributes with default values.
    #[prost(message, repeated, tag = "11")]
    pub attribute_proto: Vec<AttributeProto>,
    #[prost(message, repeated, tag = "7")]
    pub node: Vec<NodeProto>,
    #[prost(string, tag = "8")]
    pub doc_string: String,
    #[prost(message, repeated, tag = "9")]
    pub opset_import: Vec<OperatorSetIdProto>,
    #[prost(string, tag = "10")]
    pub domain: String,
    #[prost(string, tag = "13")]
    pub overload: String,
    #[prost(message, repeated, tag = "12")]
    pub value_info: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// Training-specific graphs (nnc ignores them; kept so they decode).
#[derive(Clone, PartialEq, Message)]
pub struct TrainingInfoProto {
    #[prost(message, optional, tag = "1")]
    pub initialization: Option<GraphProto>,
    #[prost(message, optional, tag = "2")]
    pub algorithm: Option<GraphProto>,
    #[prost(message, repeated, tag = "3")]
    pub initialization_binding: Vec<StringStringEntryProto>,
    #[prost(message, repeated, tag = "4")]
    pub update_binding: Vec<StringStringEntryProto>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use tensor_shape_proto::dimension::Value as Dim;

    /// A small model written by the reference implementation (onnx 1.17 Python `helper`):
    /// explicitly-set zero attributes and dims, every typed initializer field, an external
    /// tensor (`w.bin`, offset 4, length 8), a subgraph, a TYPE_PROTO attribute, a sequence
    /// output, a function, metadata and training info.
    const FIXTURE_HEX: &[&str] = &[
        "080a12076669787475726528003aae050a8a020a01780a01771201791a026e302206437573746f6d2a0d0a067a65726f",
        "5f691800a001022a100a067a65726f5f661500000000a001012a0e0a07656d7074795f732200a001032a180a04696e74",
        "73400140feffffffffffffffff014003a001072a150a06666c6f6174733d0000003f3d00000000a001062a0e0a047374",
        "72734a01614a00a001082a1d0a01742a15080210073a0b07f8ffffffffffffffff0142027474a001042a410a01673239",
        "0a100a016112016222084964656e7469747912037375625a0f0a0161120a0a08080112040a020801620f0a0162120a0a",
        "08080112040a020801a001052a180a027470720f0a0d080112090a0312014e0a020803a0010d3a05636f6d2e78120167",
        "2a1908010802100142077261775f6633324a080000c03f000000c02a130802100122080000c03f000000c04203663332",
        "2a16080310032a0c80ffffffffffffffff01007f420269382a0d080210022a0300ff01420275382a18080210052a0d80",
        "80feffffffffffff01ffff0142036931362a0f080210042a0400ffff0342037531362a16080210062a0bfbffffffffff",
        "ffffff010642036933322a100802100a2a05807880f00242036631362a0c080310092a030100014201622a1608021007",
        "3a0b8080808080e0ffffff010342036936342a130801100b42036636345208000000000000d03f2a110802100c420375",
        "33325a0600ffffffff0f2a150801100d42037536345a0affffffffffffffffff012a1010012204000040404206736361",
        "6c61722a380802100142036578746a110a086c6f636174696f6e1205772e62696e6a0b0a066f66667365741201346a0b",
        "0a066c656e67746812013870012a160801100122040000803f42087a65726f5f6c6f6370005a180a017812130a110801",
        "120d0a0312014e0a0208000a020803620d0a0179120822060a040a02080142040a00101142090a05636f6d2e78100172",
        "060a016b120176a201080a061204696e6974ca012f0a01462201612a01623205616c7068613a100a0161120162220849",
        "64656e746974794a040a0010115205636f6d2e78",
    ];

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// The fixture model's bytes.
    pub(crate) fn fixture_bytes() -> Vec<u8> {
        unhex(&FIXTURE_HEX.concat())
    }

    /// The shared models folder, or `None` (skip) when absent outside CI.
    pub(crate) fn shared_models_dir() -> Option<std::path::PathBuf> {
        let dir =
            std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/models"));
        if dir.is_dir() {
            return Some(dir);
        }
        assert!(
            std::env::var_os("CI").is_none(),
            "shared models folder {} is missing (required when CI is set)",
            dir.display()
        );
        eprintln!("skipping: shared models folder {} is absent", dir.display());
        None
    }

    fn attr<'a>(node: &'a NodeProto, name: &str) -> &'a AttributeProto {
        node.attribute
            .iter()
            .find(|a| a.name == name)
            .unwrap_or_else(|| panic!("attribute {name}"))
    }

    #[test]
    fn decodes_reference_fixture() {
        let m = decode_model(Bytes::from(fixture_bytes())).expect("decode");
        assert_eq!(m.ir_version, 10);
        assert_eq!(m.producer_name, "fixture");
        let opsets: Vec<(&str, i64)> = m
            .opset_import
            .iter()
            .map(|o| (o.domain.as_str(), o.version))
            .collect();
        assert_eq!(opsets, vec![("", 17), ("com.x", 1)]);
        assert_eq!(m.metadata_props[0].key, "k");
        assert_eq!(m.metadata_props[0].value, "v");
        assert_eq!(
            m.training_info[0]
                .initialization
                .as_ref()
                .map(|g| g.name.as_str()),
            Some("init")
        );
        assert_eq!(m.functions[0].name, "F");
        assert_eq!(m.functions[0].attribute, vec!["alpha".to_string()]);

        let g = m.graph.as_ref().expect("graph");
        let node = &g.node[0];
        assert_eq!(
            (node.op_type.as_str(), node.domain.as_str()),
            ("Custom", "com.x")
        );
        assert_eq!(node.input, vec!["x".to_string(), "w".to_string()]);

        // Explicit zeros survive as Some(0), distinct from absence.
        let zero_i = attr(node, "zero_i");
        assert_eq!(zero_i.i, Some(0));
        assert_eq!(
            zero_i.attribute_type(),
            Some(attribute_proto::AttributeType::Int)
        );
        assert_eq!(zero_i.f, None);
        assert_eq!(attr(node, "zero_f").f, Some(0.0));
        assert_eq!(attr(node, "empty_s").s.as_deref(), Some(&b""[..]));
        assert_eq!(attr(node, "empty_s").i, None);
        assert_eq!(attr(node, "ints").ints, vec![1, -2, 3]);
        assert_eq!(attr(node, "floats").floats, vec![0.5, 0.0]);
        assert_eq!(
            attr(node, "strs").strings,
            vec![Bytes::from_static(b"a"), Bytes::new()]
        );
        let t = attr(node, "t").t.as_ref().expect("tensor attribute");
        assert_eq!(
            (t.dims.as_slice(), t.int64_data.as_slice()),
            (&[2i64][..], &[7i64, -8][..])
        );
        assert_eq!(
            attr(node, "g").g.as_ref().map(|g| g.name.as_str()),
            Some("sub")
        );
        let tp = attr(node, "tp").tp.as_ref().expect("type attribute");
        let Some(type_proto::Value::TensorType(tt)) = &tp.value else {
            panic!("tensor type expected: {tp:?}");
        };
        let dims: Vec<_> = tt
            .shape
            .as_ref()
            .expect("shape")
            .dim
            .iter()
            .map(|d| d.value.clone())
            .collect();
        assert_eq!(
            dims,
            vec![Some(Dim::DimParam("N".into())), Some(Dim::DimValue(3))]
        );

        // Input x: ["N", 0, 3] keeps the explicit zero dim.
        let Some(type_proto::Value::TensorType(xt)) =
            g.input[0].r#type.as_ref().and_then(|t| t.value.clone())
        else {
            panic!("input type");
        };
        let dims: Vec<_> = xt
            .shape
            .expect("shape")
            .dim
            .into_iter()
            .map(|d| d.value)
            .collect();
        assert_eq!(
            dims,
            vec![
                Some(Dim::DimParam("N".into())),
                Some(Dim::DimValue(0)),
                Some(Dim::DimValue(3))
            ]
        );
        // Output y: a sequence of float tensors.
        let Some(type_proto::Value::SequenceType(seq)) =
            g.output[0].r#type.as_ref().and_then(|t| t.value.clone())
        else {
            panic!("output type");
        };
        let elem = seq.elem_type.expect("sequence element type");
        assert!(
            matches!(elem.value, Some(type_proto::Value::TensorType(ref t)) if t.elem_type == 1)
        );

        let init = |name: &str| {
            g.initializer
                .iter()
                .find(|t| t.name == name)
                .unwrap_or_else(|| panic!("initializer {name}"))
        };
        assert_eq!(init("zero_loc").data_location, Some(0));
        assert_eq!(init("f32").data_location, None);
        assert!(init("ext").is_external());
        assert_eq!(init("ext").external_data_value("location"), Some("w.bin"));
        assert_eq!(init("u64").uint64_data, vec![u64::MAX]);
        assert_eq!(
            init("raw_f32").known_data_type(),
            Some(tensor_proto::DataType::Float)
        );
        // Debug summarizes payloads instead of dumping them.
        let shown = format!("{:?}", init("raw_f32"));
        assert!(shown.contains("raw_data_len: 8"), "{shown}");
    }

    #[test]
    fn reencoding_round_trips() {
        // prost omits empty strings and zero plain scalars that the reference writer emitted
        // when set explicitly (`domain: ""`, `model_version: 0`); the ONNX meaning is the same.
        // Everything else, including field order and packing, matches byte for byte: the
        // re-encoded fixture is 6 bytes shorter, exactly those three fields.
        let bytes = fixture_bytes();
        let m = decode_model(Bytes::from(bytes.clone())).expect("decode");
        let again = encode_model(&m);
        assert_eq!(again.len(), bytes.len() - 6);
        assert_eq!(decode_model(Bytes::from(again)).expect("decode again"), m);
    }

    #[test]
    fn set_zero_and_absent_differ_on_the_wire() {
        let set = AttributeProto {
            name: "a".into(),
            i: Some(0),
            r#type: Some(attribute_proto::AttributeType::Int as i32),
            ..Default::default()
        };
        let unset = AttributeProto {
            name: "a".into(),
            ..Default::default()
        };
        let set_bytes = set.encode_to_vec();
        assert_ne!(set_bytes, unset.encode_to_vec());
        assert_eq!(AttributeProto::decode(&set_bytes[..]).expect("decode"), set);
        let back = AttributeProto::decode(&unset.encode_to_vec()[..]).expect("decode");
        assert_eq!(
            (back.i, back.r#type, back.f, back.s),
            (None, None, None, None)
        );

        let dim = tensor_shape_proto::Dimension {
            value: Some(Dim::DimValue(0)),
            denotation: String::new(),
        };
        let back = tensor_shape_proto::Dimension::decode(&dim.encode_to_vec()[..]).expect("decode");
        assert_eq!(back.value, Some(Dim::DimValue(0)));
    }

    #[test]
    fn raw_data_is_not_copied() {
        let buf = Bytes::from(fixture_bytes());
        let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
        let m = decode_model(buf.clone()).expect("decode");
        let raw = m.graph.as_ref().expect("graph").initializer[0]
            .raw_data
            .as_ref()
            .expect("raw_data");
        assert!(
            range.contains(&(raw.as_ptr() as usize)),
            "raw_data was copied"
        );
    }

    #[test]
    fn tensor_encode_decode_round_trip() {
        let t = TensorProto {
            dims: vec![2, 0],
            data_type: tensor_proto::DataType::Int8 as i32,
            name: "t".into(),
            raw_data: Some(Bytes::new()),
            data_location: Some(0),
            ..Default::default()
        };
        let back = decode_tensor(&encode_tensor(&t)).expect("decode");
        assert_eq!(back, t);
        assert_eq!(
            back.raw_data,
            Some(Bytes::new()),
            "present-but-empty raw_data is kept"
        );
    }

    #[test]
    fn decode_errors_say_what_failed() {
        let e = decode_model(Bytes::from_static(&[0x0a, 0x05, 0x01])).expect_err("truncated");
        let msg = e.to_string();
        assert!(
            msg.contains("ModelProto") && msg.contains("3 bytes"),
            "{msg}"
        );
        let e = decode_tensor(&[0xff; 4]).expect_err("garbage");
        assert!(e.to_string().contains("TensorProto"), "{e}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        // TypeProto { sequence_type { elem_type { sequence_type { ... } } } }, 2000 levels.
        fn wrap(tag: u8, inner: Vec<u8>) -> Vec<u8> {
            let mut out = vec![tag];
            let mut n = inner.len();
            loop {
                let byte = (n & 0x7f) as u8;
                n >>= 7;
                if n == 0 {
                    out.push(byte);
                    break;
                }
                out.push(byte | 0x80);
            }
            out.extend(inner);
            out
        }
        let mut bytes = Vec::new();
        for _ in 0..2000 {
            bytes = wrap((1 << 3) | 2, wrap((4 << 3) | 2, bytes)); // elem_type(sequence_type(..))
        }
        let bytes = &bytes[2..]; // drop the outermost elem_type wrapper: starts at a TypeProto
        let _ = type_proto::Sequence::decode(bytes);
        assert!(TypeProto::decode(bytes).is_err());
    }

    #[test]
    fn decodes_real_mobilenet() {
        let Some(dir) = shared_models_dir() else {
            return;
        };
        let bytes = std::fs::read(dir.join("mobilenet_v2.onnx")).expect("read model");
        let m = decode_model(Bytes::from(bytes)).expect("decode");
        let g = m.graph.as_ref().expect("graph");
        assert_eq!(g.node.len(), 170);
        assert_eq!(g.initializer.len(), 106);
        assert_eq!(g.input[0].name, "input");
        assert!(
            m.opset_import
                .iter()
                .any(|o| o.domain.is_empty() && o.version == 13)
        );
    }

    /// Everything a decoded model holds must also be safe to inspect and convert.
    fn exercise(m: &ModelProto) {
        let _ = format!("{m:?}");
        let ctx = crate::onnx::tensor::ExternalDataContext::none();
        if let Some(g) = &m.graph {
            for t in &g.initializer {
                let _ = crate::onnx::tensor::tensor_to_host(t, &ctx);
            }
            for n in &g.node {
                for a in &n.attribute {
                    let _ = a.attribute_type();
                    if let Some(t) = &a.t {
                        let _ = crate::onnx::tensor::tensor_to_host(t, &ctx);
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1500))]

        #[test]
        fn truncated_model_never_panics(cut in any::<prop::sample::Index>()) {
            let bytes = fixture_bytes();
            let cut = cut.index(bytes.len() + 1);
            if let Ok(m) = decode_model(Bytes::copy_from_slice(&bytes[..cut])) {
                exercise(&m);
            }
        }

        #[test]
        fn mutated_model_never_panics(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..10),
        ) {
            let mut bytes = fixture_bytes();
            for (at, value, kind) in edits {
                let i = at.index(bytes.len());
                match kind {
                    0 => bytes[i] ^= 1 << (value % 8),       // bit flip
                    1 => bytes[i] = value,                   // byte overwrite
                    _ => bytes.insert(i, value),             // insertion
                }
            }
            if let Ok(m) = decode_model(Bytes::from(bytes.clone())) {
                exercise(&m);
            }
            let _ = decode_tensor(&bytes);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            if let Ok(m) = decode_model(Bytes::from(bytes.clone())) {
                exercise(&m);
            }
            if let Ok(t) = decode_tensor(&bytes) {
                let _ = crate::onnx::tensor::tensor_to_host(
                    &t,
                    &crate::onnx::tensor::ExternalDataContext::none(),
                );
            }
        }
    }
}
