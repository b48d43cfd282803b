//! The enumerations of the NN operation set: operation types (with their numeric codes
//! and the HAL version that introduced them), operand types, lifetimes, and the small
//! enumerated parameters that operations take (fused activation, padding scheme).

use serde::{Serialize, Serializer};

use crate::minifloat::FloatFormat;

/// Declares a small enumeration that an extension operation takes as an INT32 code
/// (a function or reduction selector), with every variant in `ALL` and the code lookup.
macro_rules! coded_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $code:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(i32)]
        pub enum $name {
            $($(#[$vmeta])* $variant = $code,)*
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            pub fn from_code(code: i32) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| *v as i32 == code)
            }
        }
    };
}

/// The NN HAL version (Android feature level) that introduced an operation or type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HalVersion {
    /// HAL 1.0, Android API 27.
    V1_0,
    /// HAL 1.1, Android API 28.
    V1_1,
    /// HAL 1.2, Android API 29.
    V1_2,
    /// HAL 1.3, Android API 30.
    V1_3,
    /// NNAPI feature level 6 and later (the operations after HAL 1.3).
    FeatureLevel6,
    /// An operation of nnc's vendor extension ([`NNC_EXTENSION`]), not of any HAL.
    Extension,
}

impl HalVersion {
    pub fn name(self) -> &'static str {
        match self {
            HalVersion::V1_0 => "1.0",
            HalVersion::V1_1 => "1.1",
            HalVersion::V1_2 => "1.2",
            HalVersion::V1_3 => "1.3",
            HalVersion::FeatureLevel6 => "FL6",
            HalVersion::Extension => "ext",
        }
    }
}

impl Serialize for HalVersion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl std::fmt::Display for HalVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Declares `OperationType` from one table so that code, name and HAL version can never
/// drift apart.
macro_rules! operations {
    ($($variant:ident = $code:literal, $name:literal, $hal:ident;)*) => {
        /// An operation of the NN operation set, with its NNAPI numeric code.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(i32)]
        pub enum OperationType {
            $($variant = $code,)*
        }

        impl OperationType {
            /// Every operation, in code order.
            pub const ALL: &'static [OperationType] = &[$(OperationType::$variant,)*];

            /// The NNAPI numeric code.
            pub fn code(self) -> i32 {
                self as i32
            }

            /// IF and WHILE: operations that run referenced subgraphs.
            pub fn is_control_flow(self) -> bool {
                matches!(self, OperationType::If | OperationType::While)
            }

            pub fn from_code(code: i32) -> Option<OperationType> {
                match code {
                    $($code => Some(OperationType::$variant),)*
                    _ => None,
                }
            }

            /// The NNAPI name, e.g. `CONV_2D`.
            pub fn name(self) -> &'static str {
                match self {
                    $(OperationType::$variant => $name,)*
                }
            }

            pub fn from_name(name: &str) -> Option<OperationType> {
                match name {
                    $($name => Some(OperationType::$variant),)*
                    _ => None,
                }
            }

            /// The HAL version that introduced the operation. Later versions extended many
            /// operations (layout flags, dilation, more operand types); see
            /// [`crate::nn::ops::required_version`] for what a particular use needs.
            pub fn hal_version(self) -> HalVersion {
                match self {
                    $(OperationType::$variant => HalVersion::$hal,)*
                }
            }
        }
    };
}

operations! {
    Add = 0, "ADD", V1_0;
    AveragePool2d = 1, "AVERAGE_POOL_2D", V1_0;
    Concatenation = 2, "CONCATENATION", V1_0;
    Conv2d = 3, "CONV_2D", V1_0;
    DepthwiseConv2d = 4, "DEPTHWISE_CONV_2D", V1_0;
    DepthToSpace = 5, "DEPTH_TO_SPACE", V1_0;
    Dequantize = 6, "DEQUANTIZE", V1_0;
    EmbeddingLookup = 7, "EMBEDDING_LOOKUP", V1_0;
    Floor = 8, "FLOOR", V1_0;
    FullyConnected = 9, "FULLY_CONNECTED", V1_0;
    HashtableLookup = 10, "HASHTABLE_LOOKUP", V1_0;
    L2Normalization = 11, "L2_NORMALIZATION", V1_0;
    L2Pool2d = 12, "L2_POOL_2D", V1_0;
    LocalResponseNormalization = 13, "LOCAL_RESPONSE_NORMALIZATION", V1_0;
    Logistic = 14, "LOGISTIC", V1_0;
    LshProjection = 15, "LSH_PROJECTION", V1_0;
    Lstm = 16, "LSTM", V1_0;
    MaxPool2d = 17, "MAX_POOL_2D", V1_0;
    Mul = 18, "MUL", V1_0;
    Relu = 19, "RELU", V1_0;
    Relu1 = 20, "RELU1", V1_0;
    Relu6 = 21, "RELU6", V1_0;
    Reshape = 22, "RESHAPE", V1_0;
    ResizeBilinear = 23, "RESIZE_BILINEAR", V1_0;
    Rnn = 24, "RNN", V1_0;
    Softmax = 25, "SOFTMAX", V1_0;
    SpaceToDepth = 26, "SPACE_TO_DEPTH", V1_0;
    Svdf = 27, "SVDF", V1_0;
    Tanh = 28, "TANH", V1_0;
    BatchToSpaceNd = 29, "BATCH_TO_SPACE_ND", V1_1;
    Div = 30, "DIV", V1_1;
    Mean = 31, "MEAN", V1_1;
    Pad = 32, "PAD", V1_1;
    SpaceToBatchNd = 33, "SPACE_TO_BATCH_ND", V1_1;
    Squeeze = 34, "SQUEEZE", V1_1;
    StridedSlice = 35, "STRIDED_SLICE", V1_1;
    Sub = 36, "SUB", V1_1;
    Transpose = 37, "TRANSPOSE", V1_1;
    Abs = 38, "ABS", V1_2;
    Argmax = 39, "ARGMAX", V1_2;
    Argmin = 40, "ARGMIN", V1_2;
    AxisAlignedBboxTransform = 41, "AXIS_ALIGNED_BBOX_TRANSFORM", V1_2;
    BidirectionalSequenceLstm = 42, "BIDIRECTIONAL_SEQUENCE_LSTM", V1_2;
    BidirectionalSequenceRnn = 43, "BIDIRECTIONAL_SEQUENCE_RNN", V1_2;
    BoxWithNmsLimit = 44, "BOX_WITH_NMS_LIMIT", V1_2;
    Cast = 45, "CAST", V1_2;
    ChannelShuffle = 46, "CHANNEL_SHUFFLE", V1_2;
    DetectionPostprocessing = 47, "DETECTION_POSTPROCESSING", V1_2;
    Equal = 48, "EQUAL", V1_2;
    Exp = 49, "EXP", V1_2;
    ExpandDims = 50, "EXPAND_DIMS", V1_2;
    Gather = 51, "GATHER", V1_2;
    GenerateProposals = 52, "GENERATE_PROPOSALS", V1_2;
    Greater = 53, "GREATER", V1_2;
    GreaterEqual = 54, "GREATER_EQUAL", V1_2;
    GroupedConv2d = 55, "GROUPED_CONV_2D", V1_2;
    HeatmapMaxKeypoint = 56, "HEATMAP_MAX_KEYPOINT", V1_2;
    InstanceNormalization = 57, "INSTANCE_NORMALIZATION", V1_2;
    Less = 58, "LESS", V1_2;
    LessEqual = 59, "LESS_EQUAL", V1_2;
    Log = 60, "LOG", V1_2;
    LogicalAnd = 61, "LOGICAL_AND", V1_2;
    LogicalNot = 62, "LOGICAL_NOT", V1_2;
    LogicalOr = 63, "LOGICAL_OR", V1_2;
    LogSoftmax = 64, "LOG_SOFTMAX", V1_2;
    Maximum = 65, "MAXIMUM", V1_2;
    Minimum = 66, "MINIMUM", V1_2;
    Neg = 67, "NEG", V1_2;
    NotEqual = 68, "NOT_EQUAL", V1_2;
    PadV2 = 69, "PAD_V2", V1_2;
    Pow = 70, "POW", V1_2;
    Prelu = 71, "PRELU", V1_2;
    Quantize = 72, "QUANTIZE", V1_2;
    Quantized16BitLstm = 73, "QUANTIZED_16BIT_LSTM", V1_2;
    RandomMultinomial = 74, "RANDOM_MULTINOMIAL", V1_2;
    ReduceAll = 75, "REDUCE_ALL", V1_2;
    ReduceAny = 76, "REDUCE_ANY", V1_2;
    ReduceMax = 77, "REDUCE_MAX", V1_2;
    ReduceMin = 78, "REDUCE_MIN", V1_2;
    ReduceProd = 79, "REDUCE_PROD", V1_2;
    ReduceSum = 80, "REDUCE_SUM", V1_2;
    RoiAlign = 81, "ROI_ALIGN", V1_2;
    RoiPooling = 82, "ROI_POOLING", V1_2;
    Rsqrt = 83, "RSQRT", V1_2;
    Select = 84, "SELECT", V1_2;
    Sin = 85, "SIN", V1_2;
    Slice = 86, "SLICE", V1_2;
    Split = 87, "SPLIT", V1_2;
    Sqrt = 88, "SQRT", V1_2;
    Tile = 89, "TILE", V1_2;
    TopkV2 = 90, "TOPK_V2", V1_2;
    TransposeConv2d = 91, "TRANSPOSE_CONV_2D", V1_2;
    UnidirectionalSequenceLstm = 92, "UNIDIRECTIONAL_SEQUENCE_LSTM", V1_2;
    UnidirectionalSequenceRnn = 93, "UNIDIRECTIONAL_SEQUENCE_RNN", V1_2;
    ResizeNearestNeighbor = 94, "RESIZE_NEAREST_NEIGHBOR", V1_2;
    QuantizedLstm = 95, "QUANTIZED_LSTM", V1_3;
    If = 96, "IF", V1_3;
    While = 97, "WHILE", V1_3;
    Elu = 98, "ELU", V1_3;
    HardSwish = 99, "HARD_SWISH", V1_3;
    Fill = 100, "FILL", V1_3;
    Rank = 101, "RANK", V1_3;
    BatchMatmul = 102, "BATCH_MATMUL", FeatureLevel6;
    Pack = 103, "PACK", FeatureLevel6;
    MirrorPad = 104, "MIRROR_PAD", FeatureLevel6;
    Reverse = 105, "REVERSE", FeatureLevel6;
    OemOperation = 10000, "OEM_OPERATION", V1_0;
    // nnc's extension (prefix 1): codes are (1 << 16) | code within the extension.
    LayerNormalization = 0x1_0000, "LAYER_NORMALIZATION", Extension;
    Gelu = 0x1_0001, "GELU", Extension;
    Erf = 0x1_0002, "ERF", Extension;
    GatherElements = 0x1_0003, "GATHER_ELEMENTS", Extension;
    GatherNd = 0x1_0004, "GATHER_ND", Extension;
    Mod = 0x1_0005, "MOD", Extension;
    MathUnary = 0x1_0006, "MATH_UNARY", Extension;
    ScatterElements = 0x1_0007, "SCATTER_ELEMENTS", Extension;
    ScatterNd = 0x1_0008, "SCATTER_ND", Extension;
    CumSum = 0x1_0009, "CUMSUM", Extension;
    Bitwise = 0x1_000A, "BITWISE", Extension;
    Resample = 0x1_000B, "RESAMPLE", Extension;
    GridSample = 0x1_000C, "GRID_SAMPLE", Extension;
    DynamicFullyConnected = 0x1_000D, "DYNAMIC_FULLY_CONNECTED", Extension;
    // 0x1_000E and 0x1_000F are reserved.
    // MediaPipe's TFLite custom operators (docs/EXTENSIONS.md).
    MaxPoolWithArgmax = 0x1_0010, "MAX_POOL_WITH_ARGMAX", Extension;
    MaxUnpooling = 0x1_0011, "MAX_UNPOOLING", Extension;
    LandmarksToTransformMatrix = 0x1_0012, "LANDMARKS_TO_TRANSFORM_MATRIX", Extension;
    TransformLandmarks = 0x1_0013, "TRANSFORM_LANDMARKS", Extension;
    TransformTensorBilinear = 0x1_0014, "TRANSFORM_TENSOR_BILINEAR", Extension;
    NonZero = 0x1_0015, "NON_ZERO", Extension;
    NonMaxSuppression = 0x1_0016, "NON_MAX_SUPPRESSION", Extension;
    Unique = 0x1_0017, "UNIQUE", Extension;
}

coded_enum! {
    /// How the extension operations SCATTER_ELEMENTS and SCATTER_ND combine an update with
    /// the element it lands on, by the code their `reduction` input holds.
    ScatterReduction {
        /// The update replaces the element.
        None = 0,
        Add = 1,
        Mul = 2,
        Max = 3,
        Min = 4,
    }
}

impl ScatterReduction {
    /// The reduction named as ONNX's `reduction` attribute names it.
    pub fn from_onnx_name(name: &str) -> Option<ScatterReduction> {
        match name {
            "none" => Some(ScatterReduction::None),
            "add" => Some(ScatterReduction::Add),
            "mul" => Some(ScatterReduction::Mul),
            "max" => Some(ScatterReduction::Max),
            "min" => Some(ScatterReduction::Min),
            _ => None,
        }
    }
}

coded_enum! {
    /// The functions of the extension operation BITWISE, by the code its `function` input
    /// holds. The right shift is arithmetic (sign-extending); a shift amount that is negative
    /// or 32 or more leaves only the sign extension: -1 for a right shift of a negative value,
    /// 0 otherwise (ONNX's BitShift, which values of narrower types computed as int32 also
    /// satisfy).
    BitwiseFunction {
        And = 0,
        Or = 1,
        Xor = 2,
        ShiftLeft = 3,
        ShiftRight = 4,
    }
}

impl BitwiseFunction {
    pub fn apply(self, a: i32, b: i32) -> i32 {
        let shift = |f: fn(u32, u32) -> Option<u32>| {
            u32::try_from(b)
                .ok()
                .and_then(|amount| f(a as u32, amount))
                .unwrap_or(0) as i32
        };
        match self {
            BitwiseFunction::And => a & b,
            BitwiseFunction::Or => a | b,
            BitwiseFunction::Xor => a ^ b,
            BitwiseFunction::ShiftLeft => shift(u32::checked_shl),
            BitwiseFunction::ShiftRight => match u32::try_from(b) {
                Ok(amount) if amount < 32 => a >> amount,
                _ => {
                    if a < 0 {
                        -1
                    } else {
                        0
                    }
                }
            },
        }
    }
}

coded_enum! {
    /// The functions of the extension operation MATH_UNARY, by the code its `function`
    /// input holds.
    MathFunction {
        /// Round half to even.
        Round = 0,
        Tan = 1,
        Asin = 2,
        Acos = 3,
        Atan = 4,
        Sinh = 5,
        Cosh = 6,
        Asinh = 7,
        Acosh = 8,
        Atanh = 9,
        /// Round to the nearest bfloat16 (ties to even; beyond its range, infinity).
        RoundBfloat16 = 10,
        /// Round to the nearest value of a float8/float4 format, ties to even; values
        /// beyond the range saturate to the largest value of their sign (ONNX's Cast with
        /// `saturate = 1`; float4 e2m1 always saturates).
        RoundFloat8E4M3Fn = 11,
        RoundFloat8E4M3Fnuz = 12,
        RoundFloat8E5M2 = 13,
        RoundFloat8E5M2Fnuz = 14,
        RoundFloat4E2M1Fn = 15,
        /// The same without saturation: beyond the range, infinity (e5m2) or NaN.
        RoundFloat8E4M3FnExact = 16,
        RoundFloat8E4M3FnuzExact = 17,
        RoundFloat8E5M2Exact = 18,
        RoundFloat8E5M2FnuzExact = 19,
    }
}

impl MathFunction {
    /// The rounding function to a narrow float format, saturating or not.
    pub fn rounding(format: FloatFormat, saturate: bool) -> MathFunction {
        use FloatFormat as F;
        match (format, saturate) {
            (F::Bfloat16, _) => MathFunction::RoundBfloat16,
            (F::Float4E2M1Fn, _) => MathFunction::RoundFloat4E2M1Fn,
            (F::Float8E4M3Fn, true) => MathFunction::RoundFloat8E4M3Fn,
            (F::Float8E4M3Fnuz, true) => MathFunction::RoundFloat8E4M3Fnuz,
            (F::Float8E5M2, true) => MathFunction::RoundFloat8E5M2,
            (F::Float8E5M2Fnuz, true) => MathFunction::RoundFloat8E5M2Fnuz,
            (F::Float8E4M3Fn, false) => MathFunction::RoundFloat8E4M3FnExact,
            (F::Float8E4M3Fnuz, false) => MathFunction::RoundFloat8E4M3FnuzExact,
            (F::Float8E5M2, false) => MathFunction::RoundFloat8E5M2Exact,
            (F::Float8E5M2Fnuz, false) => MathFunction::RoundFloat8E5M2FnuzExact,
        }
    }

    /// The format and saturation of a rounding function.
    fn rounding_format(self) -> Option<(FloatFormat, bool)> {
        use FloatFormat as F;
        Some(match self {
            MathFunction::RoundBfloat16 => (F::Bfloat16, false),
            MathFunction::RoundFloat4E2M1Fn => (F::Float4E2M1Fn, true),
            MathFunction::RoundFloat8E4M3Fn => (F::Float8E4M3Fn, true),
            MathFunction::RoundFloat8E4M3Fnuz => (F::Float8E4M3Fnuz, true),
            MathFunction::RoundFloat8E5M2 => (F::Float8E5M2, true),
            MathFunction::RoundFloat8E5M2Fnuz => (F::Float8E5M2Fnuz, true),
            MathFunction::RoundFloat8E4M3FnExact => (F::Float8E4M3Fn, false),
            MathFunction::RoundFloat8E4M3FnuzExact => (F::Float8E4M3Fnuz, false),
            MathFunction::RoundFloat8E5M2Exact => (F::Float8E5M2, false),
            MathFunction::RoundFloat8E5M2FnuzExact => (F::Float8E5M2Fnuz, false),
            _ => return None,
        })
    }

    /// The function in single precision.
    pub fn apply(self, x: f32) -> f32 {
        if let Some((format, saturate)) = self.rounding_format() {
            return format.round(x, saturate);
        }
        match self {
            MathFunction::Round => x.round_ties_even(),
            MathFunction::Tan => x.tan(),
            MathFunction::Asin => x.asin(),
            MathFunction::Acos => x.acos(),
            MathFunction::Atan => x.atan(),
            MathFunction::Sinh => x.sinh(),
            MathFunction::Cosh => x.cosh(),
            MathFunction::Asinh => x.asinh(),
            MathFunction::Acosh => x.acosh(),
            MathFunction::Atanh => x.atanh(),
            // Rounded above, by `rounding_format`.
            MathFunction::RoundBfloat16
            | MathFunction::RoundFloat8E4M3Fn
            | MathFunction::RoundFloat8E4M3Fnuz
            | MathFunction::RoundFloat8E5M2
            | MathFunction::RoundFloat8E5M2Fnuz
            | MathFunction::RoundFloat4E2M1Fn
            | MathFunction::RoundFloat8E4M3FnExact
            | MathFunction::RoundFloat8E4M3FnuzExact
            | MathFunction::RoundFloat8E5M2Exact
            | MathFunction::RoundFloat8E5M2FnuzExact => x,
        }
    }
}

coded_enum! {
    /// How the extension operation GRID_SAMPLE interpolates, by the code its `mode` input
    /// holds.
    GridSampleMode {
        /// The 2x2 neighbours, weighted by distance.
        Bilinear = 0,
        /// The nearest pixel, halfway cases to the even index.
        Nearest = 1,
        /// The 4x4 neighbours, Keys' cubic convolution with `a = -0.75`.
        Bicubic = 2,
    }
}

coded_enum! {
    /// What the extension operation GRID_SAMPLE reads for a pixel outside its input, by
    /// the code its `padding_mode` input holds.
    GridSamplePadding {
        /// Zero.
        Zeros = 0,
        /// The nearest edge pixel.
        Border = 1,
        /// The pixel mirrored at the edges, repeatedly.
        Reflection = 2,
    }
}

/// The name of nnc's vendor extension, in NNAPI's reverse-domain style. Its operations
/// (the [`HalVersion::Extension`] ones) are encoded as NNAPI encodes extension
/// operations, `(prefix << 16) | code`, with the prefix fixed at 1 in every nnc model.
/// Only devices whose profile declares the extension run them; the CPU runtime
/// implements all of them. Their semantics are in `docs/EXTENSIONS.md`.
pub const NNC_EXTENSION: &str = "org.nnc.core";

impl OperationType {
    /// The vendor extension an operation belongs to (`None` for NN set operations).
    pub fn extension(self) -> Option<&'static str> {
        (self.hal_version() == HalVersion::Extension).then_some(NNC_EXTENSION)
    }
}

impl Serialize for OperationType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl std::fmt::Display for OperationType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The type of an operand, with its NNAPI numeric code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(i32)]
pub enum OperandType {
    Float32 = 0,
    Int32 = 1,
    Uint32 = 2,
    TensorFloat32 = 3,
    TensorInt32 = 4,
    TensorQuant8Asymm = 5,
    Bool = 6,
    TensorQuant16Symm = 7,
    TensorFloat16 = 8,
    TensorBool8 = 9,
    Float16 = 10,
    TensorQuant8SymmPerChannel = 11,
    TensorQuant16Asymm = 12,
    TensorQuant8Symm = 13,
    TensorQuant8AsymmSigned = 14,
    Subgraph = 15,
    Oem = 10000,
    TensorOemByte = 10001,
}

impl OperandType {
    pub const ALL: &'static [OperandType] = &[
        OperandType::Float32,
        OperandType::Int32,
        OperandType::Uint32,
        OperandType::TensorFloat32,
        OperandType::TensorInt32,
        OperandType::TensorQuant8Asymm,
        OperandType::Bool,
        OperandType::TensorQuant16Symm,
        OperandType::TensorFloat16,
        OperandType::TensorBool8,
        OperandType::Float16,
        OperandType::TensorQuant8SymmPerChannel,
        OperandType::TensorQuant16Asymm,
        OperandType::TensorQuant8Symm,
        OperandType::TensorQuant8AsymmSigned,
        OperandType::Subgraph,
        OperandType::Oem,
        OperandType::TensorOemByte,
    ];

    pub fn code(self) -> i32 {
        self as i32
    }

    pub fn from_code(code: i32) -> Option<OperandType> {
        OperandType::ALL.iter().copied().find(|t| t.code() == code)
    }

    /// The NNAPI name, e.g. `TENSOR_FLOAT32`.
    pub fn name(self) -> &'static str {
        match self {
            OperandType::Float32 => "FLOAT32",
            OperandType::Int32 => "INT32",
            OperandType::Uint32 => "UINT32",
            OperandType::TensorFloat32 => "TENSOR_FLOAT32",
            OperandType::TensorInt32 => "TENSOR_INT32",
            OperandType::TensorQuant8Asymm => "TENSOR_QUANT8_ASYMM",
            OperandType::Bool => "BOOL",
            OperandType::TensorQuant16Symm => "TENSOR_QUANT16_SYMM",
            OperandType::TensorFloat16 => "TENSOR_FLOAT16",
            OperandType::TensorBool8 => "TENSOR_BOOL8",
            OperandType::Float16 => "FLOAT16",
            OperandType::TensorQuant8SymmPerChannel => "TENSOR_QUANT8_SYMM_PER_CHANNEL",
            OperandType::TensorQuant16Asymm => "TENSOR_QUANT16_ASYMM",
            OperandType::TensorQuant8Symm => "TENSOR_QUANT8_SYMM",
            OperandType::TensorQuant8AsymmSigned => "TENSOR_QUANT8_ASYMM_SIGNED",
            OperandType::Subgraph => "SUBGRAPH",
            OperandType::Oem => "OEM",
            OperandType::TensorOemByte => "TENSOR_OEM_BYTE",
        }
    }

    /// The short form used in Graphviz labels (`TF32`, `TQ8A`, ...).
    pub fn short_name(self) -> &'static str {
        match self {
            OperandType::Float32 => "F32",
            OperandType::Int32 => "I32",
            OperandType::Uint32 => "U32",
            OperandType::TensorFloat32 => "TF32",
            OperandType::TensorInt32 => "TI32",
            OperandType::TensorQuant8Asymm => "TQ8A",
            OperandType::Bool => "BOOL",
            OperandType::TensorQuant16Symm => "TQ16S",
            OperandType::TensorFloat16 => "TF16",
            OperandType::TensorBool8 => "TBOOL",
            OperandType::Float16 => "F16",
            OperandType::TensorQuant8SymmPerChannel => "TQ8SC",
            OperandType::TensorQuant16Asymm => "TQ16A",
            OperandType::TensorQuant8Symm => "TQ8S",
            OperandType::TensorQuant8AsymmSigned => "TQ8AS",
            OperandType::Subgraph => "SUBGRAPH",
            OperandType::Oem => "OEM",
            OperandType::TensorOemByte => "TOEMB",
        }
    }

    pub fn is_scalar(self) -> bool {
        matches!(
            self,
            OperandType::Float32
                | OperandType::Int32
                | OperandType::Uint32
                | OperandType::Bool
                | OperandType::Float16
                | OperandType::Subgraph
                | OperandType::Oem
        )
    }

    pub fn is_tensor(self) -> bool {
        !self.is_scalar()
    }

    /// Quantized tensor types (those whose values are scaled integers).
    pub fn is_quantized(self) -> bool {
        matches!(
            self,
            OperandType::TensorQuant8Asymm
                | OperandType::TensorQuant8AsymmSigned
                | OperandType::TensorQuant8Symm
                | OperandType::TensorQuant8SymmPerChannel
                | OperandType::TensorQuant16Symm
                | OperandType::TensorQuant16Asymm
        )
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            OperandType::TensorFloat32
                | OperandType::TensorFloat16
                | OperandType::Float32
                | OperandType::Float16
        )
    }

    /// Bytes per element (per value for scalars); `None` for types without a fixed size.
    pub fn element_size(self) -> Option<usize> {
        match self {
            OperandType::Float32 | OperandType::Int32 | OperandType::Uint32 => Some(4),
            OperandType::TensorFloat32 | OperandType::TensorInt32 => Some(4),
            OperandType::Bool | OperandType::TensorBool8 => Some(1),
            OperandType::TensorQuant8Asymm
            | OperandType::TensorQuant8AsymmSigned
            | OperandType::TensorQuant8Symm
            | OperandType::TensorQuant8SymmPerChannel
            | OperandType::TensorOemByte => Some(1),
            OperandType::Float16
            | OperandType::TensorFloat16
            | OperandType::TensorQuant16Symm
            | OperandType::TensorQuant16Asymm => Some(2),
            OperandType::Subgraph | OperandType::Oem => None,
        }
    }

    /// The HAL version that introduced the type.
    pub fn hal_version(self) -> HalVersion {
        match self {
            OperandType::Float32
            | OperandType::Int32
            | OperandType::Uint32
            | OperandType::TensorFloat32
            | OperandType::TensorInt32
            | OperandType::TensorQuant8Asymm
            | OperandType::Oem
            | OperandType::TensorOemByte => HalVersion::V1_0,
            OperandType::Bool
            | OperandType::TensorQuant16Symm
            | OperandType::TensorFloat16
            | OperandType::TensorBool8
            | OperandType::Float16
            | OperandType::TensorQuant8SymmPerChannel
            | OperandType::TensorQuant16Asymm
            | OperandType::TensorQuant8Symm => HalVersion::V1_2,
            OperandType::TensorQuant8AsymmSigned | OperandType::Subgraph => HalVersion::V1_3,
        }
    }

    /// The tensor type holding elements of this scalar type (and tensors map to themselves).
    pub fn tensor_of(self) -> OperandType {
        match self {
            OperandType::Float32 => OperandType::TensorFloat32,
            OperandType::Int32 | OperandType::Uint32 => OperandType::TensorInt32,
            OperandType::Bool => OperandType::TensorBool8,
            OperandType::Float16 => OperandType::TensorFloat16,
            other => other,
        }
    }
}

impl Serialize for OperandType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl std::fmt::Display for OperandType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where an operand's value comes from, with its NNAPI numeric code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Lifetime {
    TemporaryVariable = 0,
    SubgraphInput = 1,
    SubgraphOutput = 2,
    /// Value copied inline into the model (128 bytes or less).
    ConstantCopy = 3,
    /// Value in a memory pool (weights).
    ConstantReference = 4,
    /// An omitted optional input.
    NoValue = 5,
    /// A reference to another subgraph (IF/WHILE arguments).
    Subgraph = 6,
}

impl Lifetime {
    pub const ALL: [Lifetime; 7] = [
        Lifetime::TemporaryVariable,
        Lifetime::SubgraphInput,
        Lifetime::SubgraphOutput,
        Lifetime::ConstantCopy,
        Lifetime::ConstantReference,
        Lifetime::NoValue,
        Lifetime::Subgraph,
    ];

    pub fn code(self) -> i32 {
        self as i32
    }

    pub fn from_code(code: i32) -> Option<Lifetime> {
        Lifetime::ALL.into_iter().find(|l| l.code() == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            Lifetime::TemporaryVariable => "TEMPORARY_VARIABLE",
            Lifetime::SubgraphInput => "SUBGRAPH_INPUT",
            Lifetime::SubgraphOutput => "SUBGRAPH_OUTPUT",
            Lifetime::ConstantCopy => "CONSTANT_COPY",
            Lifetime::ConstantReference => "CONSTANT_REFERENCE",
            Lifetime::NoValue => "NO_VALUE",
            Lifetime::Subgraph => "SUBGRAPH",
        }
    }

    /// The short form used in Graphviz labels.
    pub fn short_name(self) -> &'static str {
        match self {
            Lifetime::TemporaryVariable => "TEMP",
            Lifetime::SubgraphInput => "IN",
            Lifetime::SubgraphOutput => "OUT",
            Lifetime::ConstantCopy => "COPY",
            Lifetime::ConstantReference => "REF",
            Lifetime::NoValue => "NO_VALUE",
            Lifetime::Subgraph => "SUBGRAPH",
        }
    }

    pub fn is_constant(self) -> bool {
        matches!(self, Lifetime::ConstantCopy | Lifetime::ConstantReference)
    }
}

impl Serialize for Lifetime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// The fused activation applied by operations that take one (`ADD`, `CONV_2D`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[repr(i32)]
pub enum FusedActivation {
    #[serde(rename = "NONE")]
    None = 0,
    #[serde(rename = "RELU")]
    Relu = 1,
    #[serde(rename = "RELU1")]
    Relu1 = 2,
    #[serde(rename = "RELU6")]
    Relu6 = 3,
}

impl FusedActivation {
    /// Every activation, in code order.
    pub const ALL: &'static [FusedActivation] = &[
        FusedActivation::None,
        FusedActivation::Relu,
        FusedActivation::Relu1,
        FusedActivation::Relu6,
    ];

    pub fn from_code(code: i32) -> Option<FusedActivation> {
        match code {
            0 => Some(FusedActivation::None),
            1 => Some(FusedActivation::Relu),
            2 => Some(FusedActivation::Relu1),
            3 => Some(FusedActivation::Relu6),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FusedActivation::None => "NONE",
            FusedActivation::Relu => "RELU",
            FusedActivation::Relu1 => "RELU1",
            FusedActivation::Relu6 => "RELU6",
        }
    }

    /// The clamp range `[lo, hi]` the activation applies to real values.
    pub fn range(self) -> (f32, f32) {
        match self {
            FusedActivation::None => (f32::NEG_INFINITY, f32::INFINITY),
            FusedActivation::Relu => (0.0, f32::INFINITY),
            FusedActivation::Relu1 => (-1.0, 1.0),
            FusedActivation::Relu6 => (0.0, 6.0),
        }
    }

    /// The standalone operation equivalent to this activation.
    pub fn operation(self) -> Option<OperationType> {
        match self {
            FusedActivation::None => None,
            FusedActivation::Relu => Some(OperationType::Relu),
            FusedActivation::Relu1 => Some(OperationType::Relu1),
            FusedActivation::Relu6 => Some(OperationType::Relu6),
        }
    }

    /// The activation a standalone `RELU`/`RELU1`/`RELU6` operation performs: the inverse
    /// of [`FusedActivation::operation`], so the two cannot drift apart.
    pub fn from_operation(op: OperationType) -> Option<FusedActivation> {
        FusedActivation::ALL
            .iter()
            .copied()
            .find(|a| a.operation() == Some(op))
    }
}

/// The implicit padding scheme of convolutions and pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[repr(i32)]
pub enum PaddingScheme {
    #[serde(rename = "SAME")]
    Same = 1,
    #[serde(rename = "VALID")]
    Valid = 2,
}

impl PaddingScheme {
    pub fn from_code(code: i32) -> Option<PaddingScheme> {
        match code {
            1 => Some(PaddingScheme::Same),
            2 => Some(PaddingScheme::Valid),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_codes_are_contiguous_per_hal_version() {
        let codes: Vec<i32> = OperationType::ALL
            .iter()
            .map(|o| o.code())
            .filter(|&c| c != 10000 && c < 1 << 16)
            .collect();
        assert_eq!(codes, (0..=105).collect::<Vec<_>>());
        // The extension's codes: prefix 1, then contiguous from 0, except that codes of
        // the reserved range 0xE..=0xF may be missing.
        let extension: Vec<i32> = OperationType::ALL
            .iter()
            .map(|o| o.code())
            .filter(|&c| c >= 1 << 16)
            .collect();
        let last = extension.last().copied().unwrap_or(1 << 16);
        let expected: Vec<i32> = ((1 << 16)..=last)
            .filter(|c| !(0x1_000E..=0x1_000F).contains(c) || extension.contains(c))
            .collect();
        assert_eq!(extension, expected);
        for op in OperationType::ALL {
            let expected = match op.code() {
                0..=28 | 10000 => HalVersion::V1_0,
                29..=37 => HalVersion::V1_1,
                38..=94 => HalVersion::V1_2,
                95..=101 => HalVersion::V1_3,
                102..=105 => HalVersion::FeatureLevel6,
                _ => HalVersion::Extension,
            };
            assert_eq!(
                op.extension(),
                (expected == HalVersion::Extension).then_some(NNC_EXTENSION)
            );
            assert_eq!(op.hal_version(), expected, "{op}");
            assert_eq!(OperationType::from_code(op.code()), Some(*op));
            assert_eq!(OperationType::from_name(op.name()), Some(*op));
        }
        assert_eq!(OperationType::from_code(106), None);
    }

    #[test]
    fn spot_check_operation_codes() {
        assert_eq!(OperationType::Conv2d.code(), 3);
        assert_eq!(OperationType::Tanh.code(), 28);
        assert_eq!(OperationType::Transpose.code(), 37);
        assert_eq!(OperationType::GroupedConv2d.code(), 55);
        assert_eq!(OperationType::ResizeNearestNeighbor.code(), 94);
        assert_eq!(OperationType::HardSwish.code(), 99);
        assert_eq!(OperationType::Reverse.code(), 105);
    }

    #[test]
    fn standalone_activations_round_trip() {
        let standalone: Vec<(OperationType, FusedActivation)> = OperationType::ALL
            .iter()
            .filter_map(|&op| FusedActivation::from_operation(op).map(|a| (op, a)))
            .collect();
        assert_eq!(
            standalone,
            [
                (OperationType::Relu, FusedActivation::Relu),
                (OperationType::Relu1, FusedActivation::Relu1),
                (OperationType::Relu6, FusedActivation::Relu6),
            ]
        );
        for (code, a) in FusedActivation::ALL.iter().enumerate() {
            assert_eq!(FusedActivation::from_code(code as i32), Some(*a));
        }
    }

    #[test]
    fn operand_type_codes_round_trip() {
        for t in OperandType::ALL {
            assert_eq!(OperandType::from_code(t.code()), Some(*t));
        }
        assert_eq!(OperandType::TensorQuant8AsymmSigned.code(), 14);
        assert_eq!(OperandType::TensorOemByte.code(), 10001);
        assert_eq!(OperandType::from_code(16), None);
    }
}
