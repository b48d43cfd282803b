//! One definition per operation of what it accepts and what it produces.
//!
//! [`infer`] checks an operation's signature (operand count, operand types, parameter
//! values and ranges, shape compatibility) and computes the type and dimensions of its
//! outputs. The same function serves three callers, so they can never disagree:
//! the validator (declared outputs must match), the compiler's shape inference while
//! lowering, and the runtime, which calls it with the actual input shapes and values to
//! size outputs whose dimensions were unknown at compile time.
//!
//! Dimensions follow NNAPI: `0` is unknown, and a tensor with no dimensions has unknown
//! rank. Inference propagates unknowns; it fails only when the known facts contradict.
//!
//! Layout: [`schema`] is the one table, a row per [`OperationType`] (an exhaustive match,
//! so a new operation type does not compile until it has a row): its shape rule, the
//! roles of its inputs, the HAL version its optional arguments need, and whether it moves
//! quantized values unchanged. The shape rules live in one file per operation family
//! (the runtime's kernel families' names); [`context`] holds the accessors they share.

mod context;
mod control_flow;
mod dense;
mod detection;
pub use dense::DYNAMIC_FULLY_CONNECTED_MAX_DEPTH;
pub use detection::{NmsBoxes, Unique, decoded_values, select_boxes, unique_slices, unique_view};
pub use gather_scatter::non_zero_mask;
mod elementwise;
mod gather_scatter;
mod mediapipe;
mod normalization;
mod normalization_params;
mod reduce;
mod reduce_params;
mod resize;
mod resize_params;
mod roles;
mod sequence;
mod sequence_params;
mod shape;
mod shape_params;
mod window;

#[cfg(test)]
mod tests;

use super::types::{HalVersion, OperandType, OperationType};
use crate::nn::model::Operand;
use context::{QUANT8, shape_err};

pub use context::{MAX_RANK, Operands, broadcast_dims, f16_to_f32};
pub use control_flow::{infer_control_flow, merge_dims, value_fits};
pub use normalization_params::{
    InstanceNormalization, L2Normalization, LayerNormalization, LocalResponse, Softmax,
};
pub use reduce_params::Reduce;
pub use resize_params::{GridSample, Resize2d, ResizeSize};
pub use roles::Role;
pub use sequence::LSTM_ACTIVATIONS;
pub use sequence_params::{LstmActivation, LstmTerms, SequenceLstm, SequenceRnn};
pub use shape::strided_slice_range;
pub use shape_params::{Pad, PadFill, PadValue, StridedSlice};
pub use window::{
    Conv2d, ConvKind, Hw, Pool2d, TransposeConv2d, TransposePadding, WindowPadding,
    implicit_padding,
};

/// One input as seen by signature checking: its operand and, when known, its value
/// bytes (constants at compile time; every input at run time).
#[derive(Clone, Copy, Debug)]
pub struct InputView<'a> {
    pub operand: &'a Operand,
    pub value: Option<&'a [u8]>,
}

/// The inferred type and dimensions of one output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputShape {
    pub operand_type: OperandType,
    pub dimensions: Vec<u32>,
}

/// Why an operation's signature does not hold.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SignatureError {
    #[error("takes {expected} inputs, got {actual}")]
    InputCount { expected: String, actual: usize },
    #[error("produces {expected} outputs, got {actual}")]
    OutputCount { expected: String, actual: usize },
    #[error("input {index} ({role}) must be {expected}, got {actual}")]
    InputType {
        index: usize,
        role: &'static str,
        expected: String,
        actual: OperandType,
    },
    #[error("output {index} must be {expected}, got {actual}")]
    OutputType {
        index: usize,
        expected: String,
        actual: OperandType,
    },
    #[error("input {index} ({role}) must be a constant known at compile time")]
    NotConstant { index: usize, role: &'static str },
    #[error("input {index} ({role}) {message}")]
    Parameter {
        index: usize,
        role: &'static str,
        message: String,
    },
    #[error("{0}")]
    Shape(String),
    #[error("{0} is not supported by nnc's signature checks")]
    Unsupported(OperationType),
    /// A control-flow operation and the subgraphs it references disagree (counts, types,
    /// a missing subgraph); the message names the subgraph.
    #[error("{0}")]
    ControlFlow(String),
}

type Result<T> = std::result::Result<T, SignatureError>;

/// A shape rule: checks one operation's signature and infers its outputs.
type InferFn = fn(OperationType, &Operands, &[&Operand]) -> Result<Vec<OutputShape>>;

/// A rule that checks a control-flow operation against the subgraphs it references.
type SubgraphFn = fn(
    OperationType,
    &[InputView],
    &[&Operand],
    &[&super::model::Subgraph],
) -> Result<Vec<OutputShape>>;

/// The HAL version an operation's arguments need beyond its base version (optional
/// inputs and outputs that later HAL versions added), given its inputs and outputs.
type VersionFn = fn(&[&Operand], &[&Operand]) -> HalVersion;

/// The roles of an operation's inputs.
#[derive(Clone, Copy)]
enum Roles {
    /// The same names whatever the input count.
    Fixed(&'static [Role]),
    /// The role of input `index` of `count`, for operations whose inputs are named by
    /// their count (explicit or implicit padding, a trailing axis after variadic inputs).
    Computed(fn(usize, usize) -> Role),
}

/// What an operation's work is, for the operations whose work is multiply-accumulates
/// over a window or a matrix rather than proportional to the elements they move: the
/// partition cost model estimates it from this, and device rules bound the windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// CONV_2D: an `[out, h, w, in]` filter over each output.
    Convolution,
    /// GROUPED_CONV_2D: an `[out, h, w, in / groups]` filter, each output reading its
    /// group's channels.
    GroupedConvolution,
    /// DEPTHWISE_CONV_2D: a `[1, h, w, channels]` filter, one window per output element.
    DepthwiseConvolution,
    /// TRANSPOSE_CONV_2D: a filter scattered from each input element.
    TransposedConvolution,
    /// The pools: a window of `filter_w x filter_h` per output element.
    Pool,
    /// FULLY_CONNECTED: a `[units, depth]` matrix product.
    FullyConnected,
    /// BATCH_MATMUL: matrix products over the last two dimensions.
    BatchMatmul,
}

/// How nnc computes an operation in 8-bit (what the post-training quantizer turns
/// into int8, and with which output parameters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Int8 {
    /// No int8 form: the operation stays float (with a DEQUANTIZE and a QUANTIZE around
    /// it where int8 neighbours meet it).
    Float,
    /// A filter (input 1) and bias (input 2) with per-channel weights: the convolutions
    /// and FULLY_CONNECTED (see [`Work`] for the filter's layout).
    Weighted,
    /// Computes new values: the output's range is its own (calibrated).
    Rescales,
    /// An output range the NN set fixes: `scale` and `zero_point` of the signed output.
    Fixed { scale: f32, zero_point: i32 },
    /// Moves, selects, pools or resamples values within their range: the output keeps
    /// input `data`'s parameters.
    Keeps { data: usize },
}

/// How an operation treats its data's axes: whether, and how, a TRANSPOSE before it can
/// move after it (the transpose-sinking pass).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axes {
    /// Reads axes by position (layouts, windows, shapes): a transpose stops here.
    Positional,
    /// Elementwise on one tensor: any permutation commutes with it.
    Elementwise,
    /// Elementwise over two broadcast tensors (inputs 0 and 1).
    Broadcast,
    /// Reduces along the axes its axes input (input 1) names.
    Reduction,
    /// Works along the one axis its axis parameter names (SOFTMAX's and
    /// L2_NORMALIZATION's trailing `axis`).
    AlongAxis,
    /// Joins its inputs along its trailing axis parameter.
    Concatenation,
    /// Reinterprets the data in a new shape.
    Reshape,
}

/// When an operation computes the identity, so that the pass removing no-ops can
/// replace its output by its input (each also needs the output to have the input's
/// dimensions, type and quantization).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoOp {
    /// RESHAPE, SQUEEZE, EXPAND_DIMS to the same shape.
    SameShapeReshape,
    /// A TRANSPOSE whose permutation (input 1) is the identity.
    IdentityTranspose,
    /// A CONCATENATION of a single tensor.
    SingleConcatenation,
    /// A pad that adds nothing.
    ZeroPad,
    /// A SLICE or TILE of the whole tensor.
    WholeSliceOrTile,
    /// A STRIDED_SLICE of the whole tensor with forward strides (input 3).
    ForwardWholeSlice,
    /// A CAST to the same type.
    SameTypeCast,
    /// ADD or SUB of a constant zero (input 1) without a fused activation.
    AddsZero,
    /// MUL or DIV by a constant one (input 1) without a fused activation.
    MultipliesByOne,
}

/// One row of the operation table.
#[derive(Clone, Copy)]
pub struct OpSchema {
    /// The shape rule; `None` for operation types nnc does not implement.
    infer: Option<InferFn>,
    roles: Roles,
    version: VersionFn,
    /// The data input whose scale and zero point 8-bit outputs must keep: operations
    /// that move quantized values without rescaling them (NNAPI requires it).
    keeps_quantization_of: Option<usize>,
    /// For IF and WHILE: the check against the referenced subgraphs, which the shape
    /// rule (seeing only the operation) cannot do.
    subgraph_rule: Option<SubgraphFn>,
    work: Option<Work>,
    int8: Int8,
    axes: Axes,
    no_op: Option<NoOp>,
    /// Whether the `activation` input is a fused output clamp (NONE, RELU, RELU1, RELU6)
    /// that a following activation can merge into; the recurrent operations'
    /// `activation` is their cell's function instead.
    fused_activation: bool,
}

impl OpSchema {
    const fn new(infer: InferFn, roles: &'static [Role]) -> OpSchema {
        OpSchema {
            infer: Some(infer),
            roles: Roles::Fixed(roles),
            version: base_version,
            keeps_quantization_of: None,
            subgraph_rule: None,
            work: None,
            int8: Int8::Float,
            axes: Axes::Positional,
            no_op: None,
            fused_activation: false,
        }
    }

    const fn work(mut self, work: Work) -> OpSchema {
        self.work = Some(work);
        self
    }

    const fn axes(mut self, axes: Axes) -> OpSchema {
        self.axes = axes;
        self
    }

    const fn no_op(mut self, no_op: NoOp) -> OpSchema {
        self.no_op = Some(no_op);
        self
    }

    const fn int8(mut self, int8: Int8) -> OpSchema {
        self.int8 = int8;
        self
    }

    /// Moves quantized values unchanged: outputs keep input `data`'s scale and zero point
    /// (NNAPI requires it), and the quantizer gives the output the input's parameters.
    const fn moves_quantized(self, data: usize) -> OpSchema {
        self.keeps_quantization_of(data).int8(Int8::Keeps { data })
    }

    const fn fused_activation(mut self) -> OpSchema {
        self.fused_activation = true;
        self
    }

    const fn subgraphs(mut self, rule: SubgraphFn) -> OpSchema {
        self.subgraph_rule = Some(rule);
        self
    }

    const fn roles_by_count(mut self, roles: fn(usize, usize) -> Role) -> OpSchema {
        self.roles = Roles::Computed(roles);
        self
    }

    const fn version(mut self, version: VersionFn) -> OpSchema {
        self.version = version;
        self
    }

    const fn keeps_quantization_of(mut self, input: usize) -> OpSchema {
        self.keeps_quantization_of = Some(input);
        self
    }

    /// An operation type of the NN set that nnc does not implement.
    const fn unsupported() -> OpSchema {
        OpSchema {
            infer: None,
            roles: Roles::Fixed(&[]),
            version: base_version,
            keeps_quantization_of: None,
            subgraph_rule: None,
            work: None,
            int8: Int8::Float,
            axes: Axes::Positional,
            no_op: None,
            fused_activation: false,
        }
    }

    /// What the operation's work is, when it is multiply-accumulates over a window or a
    /// matrix (`None`: proportional to the elements it reads and writes).
    pub fn work_kind(&self) -> Option<Work> {
        self.work
    }

    /// How the operation treats its data's axes.
    pub fn axes_kind(&self) -> Axes {
        self.axes
    }

    /// When the operation computes the identity, if it can.
    pub fn no_op_form(&self) -> Option<NoOp> {
        self.no_op
    }

    /// How nnc computes the operation in 8-bit.
    pub fn int8_form(&self) -> Int8 {
        self.int8
    }

    /// Whether nnc checks (and so compiles and runs) this operation type at all.
    pub fn is_supported(&self) -> bool {
        self.infer.is_some()
    }
}

/// No optional argument raises the version.
fn base_version(_: &[&Operand], _: &[&Operand]) -> HalVersion {
    HalVersion::V1_0
}

/// More than `N` inputs (optional trailing arguments) need HAL 1.2.
fn more_inputs_than<const N: usize>(inputs: &[&Operand], _: &[&Operand]) -> HalVersion {
    if inputs.len() > N {
        HalVersion::V1_2
    } else {
        HalVersion::V1_0
    }
}

// Role lists and an int8 form several rows of the table share. Every input of an
// operation whose roles are not named is `input`.
const UNNAMED: &[Role] = &[];
const BINARY_ACTIVATION: &[Role] = &[Role::Input0, Role::Input1, Role::Activation];
const INPUT_AXIS: &[Role] = &[Role::Input, Role::Axis];
const REDUCE: &[Role] = &[Role::Input, Role::Axes, Role::KeepDims];
const PAD: &[Role] = &[Role::Input, Role::Paddings, Role::Value];
/// Outputs in [0, 1) at scale 1/256 (LOGISTIC, SOFTMAX).
const UNIT_INTERVAL: Int8 = Int8::Fixed {
    scale: 1.0 / 256.0,
    zero_point: -128,
};

/// The table: one row per operation type.
pub fn schema(op: OperationType) -> OpSchema {
    use OperationType as O;
    use Role as R;
    let row = OpSchema::new;
    match op {
        // Elementwise.
        O::Add | O::Sub => row(elementwise::arithmetic, BINARY_ACTIVATION)
            .fused_activation()
            .int8(Int8::Rescales)
            .axes(Axes::Broadcast)
            .no_op(NoOp::AddsZero),
        O::Mul => row(elementwise::arithmetic, BINARY_ACTIVATION)
            .fused_activation()
            .int8(Int8::Rescales)
            .axes(Axes::Broadcast)
            .no_op(NoOp::MultipliesByOne),
        O::Div => row(elementwise::arithmetic, BINARY_ACTIVATION)
            .fused_activation()
            .axes(Axes::Broadcast)
            .no_op(NoOp::MultipliesByOne),
        O::Maximum | O::Minimum => row(elementwise::min_max, UNNAMED)
            .int8(Int8::Rescales)
            .axes(Axes::Broadcast),
        O::Pow => row(elementwise::pow, UNNAMED).axes(Axes::Broadcast),
        O::Prelu => row(elementwise::prelu, &[R::Input, R::Alpha])
            .int8(Int8::Rescales)
            .axes(Axes::Broadcast),
        O::Equal | O::NotEqual | O::Less | O::LessEqual | O::Greater | O::GreaterEqual => {
            row(elementwise::comparison, UNNAMED).axes(Axes::Broadcast)
        }
        O::LogicalAnd | O::LogicalOr => {
            row(elementwise::logical_binary, UNNAMED).axes(Axes::Broadcast)
        }
        O::LogicalNot => row(elementwise::logical_not, UNNAMED).axes(Axes::Elementwise),
        O::Abs | O::Neg => row(elementwise::signed_unary, UNNAMED).axes(Axes::Elementwise),
        O::Exp | O::Log | O::Sqrt | O::Rsqrt | O::Sin | O::Floor => {
            row(elementwise::float_unary, UNNAMED).axes(Axes::Elementwise)
        }
        // LOGISTIC's output is in [0, 1), TANH's in [-1, 1]: the NN set fixes their scales.
        O::Logistic => row(elementwise::activation, UNNAMED)
            .int8(UNIT_INTERVAL)
            .axes(Axes::Elementwise),
        O::Tanh => row(elementwise::activation, UNNAMED)
            .int8(Int8::Fixed {
                scale: 1.0 / 128.0,
                zero_point: 0,
            })
            .axes(Axes::Elementwise),
        O::Relu | O::Relu1 | O::Relu6 | O::HardSwish => row(elementwise::activation, UNNAMED)
            .int8(Int8::Rescales)
            .axes(Axes::Elementwise),
        O::Elu => row(elementwise::elu, &[R::Input, R::Alpha]).axes(Axes::Elementwise),
        O::Cast => row(elementwise::cast, UNNAMED)
            .axes(Axes::Elementwise)
            .no_op(NoOp::SameTypeCast),
        O::Quantize => row(elementwise::quantize, UNNAMED).axes(Axes::Elementwise),
        O::Dequantize => row(elementwise::dequantize, UNNAMED).axes(Axes::Elementwise),
        O::Select => row(
            elementwise::select,
            &[R::Condition, R::InputTrue, R::InputFalse],
        ),
        O::Gelu => row(elementwise::gelu, &[R::Input, R::Approximate]).axes(Axes::Elementwise),
        O::Erf => row(elementwise::erf, UNNAMED).axes(Axes::Elementwise),
        O::Mod => row(elementwise::modulo, &[R::Input0, R::Input1, R::Fmod]),
        O::Bitwise => row(elementwise::bitwise, &[R::Input0, R::Input1, R::Function]),
        O::MathUnary => row(elementwise::math_unary, &[R::Input, R::Function]),
        // Windows: convolutions and pools.
        O::Conv2d => row(window::conv, &[])
            .roles_by_count(window::conv_roles)
            .version(window::conv_version)
            .work(Work::Convolution)
            .int8(Int8::Weighted)
            .fused_activation(),
        O::DepthwiseConv2d => row(window::conv, &[])
            .roles_by_count(window::depthwise_roles)
            .version(window::depthwise_version)
            .work(Work::DepthwiseConvolution)
            .int8(Int8::Weighted)
            .fused_activation(),
        O::GroupedConv2d => row(window::conv, &[])
            .roles_by_count(window::grouped_roles)
            .work(Work::GroupedConvolution)
            .int8(Int8::Weighted)
            .fused_activation(),
        O::TransposeConv2d => row(window::transpose_conv, &[])
            .roles_by_count(window::transpose_roles)
            .work(Work::TransposedConvolution)
            .int8(Int8::Weighted)
            .fused_activation(),
        O::AveragePool2d | O::MaxPool2d => row(window::pool, &[])
            .roles_by_count(window::pool_roles)
            .version(window::pool_version)
            .work(Work::Pool)
            .int8(Int8::Keeps { data: 0 })
            .fused_activation(),
        O::L2Pool2d => row(window::pool, &[])
            .roles_by_count(window::pool_roles)
            .version(window::pool_version)
            .work(Work::Pool)
            .fused_activation(),
        // Dense linear algebra.
        O::FullyConnected => row(
            dense::fully_connected,
            &[R::Input, R::Weights, R::Bias, R::Activation],
        )
        .work(Work::FullyConnected)
        .int8(Int8::Weighted)
        .fused_activation(),
        O::DynamicFullyConnected => row(
            dense::dynamic_fully_connected,
            &[R::Input, R::Weights, R::Bias, R::Activation],
        )
        .work(Work::FullyConnected)
        .fused_activation(),
        O::BatchMatmul => row(dense::batch_matmul, &[R::Lhs, R::Rhs, R::AdjLhs, R::AdjRhs])
            .work(Work::BatchMatmul)
            .int8(Int8::Rescales),
        // Shape and data movement.
        O::Concatenation => row(shape::concatenation, &[])
            .roles_by_count(shape::concatenation_roles)
            .int8(Int8::Rescales)
            .axes(Axes::Concatenation)
            .no_op(NoOp::SingleConcatenation),
        O::Reshape => row(shape::reshape, &[R::Input, R::Shape])
            .moves_quantized(0)
            .axes(Axes::Reshape)
            .no_op(NoOp::SameShapeReshape),
        O::Transpose => row(shape::transpose, &[R::Input, R::Perm])
            .moves_quantized(0)
            .no_op(NoOp::IdentityTranspose),
        O::Squeeze => row(shape::squeeze, &[R::Input, R::SqueezeDims])
            .moves_quantized(0)
            .no_op(NoOp::SameShapeReshape),
        O::ExpandDims => row(shape::expand_dims, INPUT_AXIS)
            .moves_quantized(0)
            .no_op(NoOp::SameShapeReshape),
        O::Pad => row(shape::pad, PAD).moves_quantized(0).no_op(NoOp::ZeroPad),
        O::PadV2 => row(shape::pad, PAD)
            .keeps_quantization_of(0)
            .no_op(NoOp::ZeroPad),
        O::MirrorPad => row(shape::pad, PAD)
            .keeps_quantization_of(0)
            .no_op(NoOp::ZeroPad),
        O::Slice => row(shape::slice, &[R::Input, R::Begin, R::Size])
            .moves_quantized(0)
            .no_op(NoOp::WholeSliceOrTile),
        O::StridedSlice => row(
            shape::strided_slice,
            &[
                R::Input,
                R::Begin,
                R::End,
                R::Strides,
                R::BeginMask,
                R::EndMask,
                R::ShrinkMask,
            ],
        )
        .moves_quantized(0)
        .no_op(NoOp::ForwardWholeSlice),
        O::Split => row(shape::split, &[R::Input, R::Axis, R::NumSplits]).moves_quantized(0),
        O::Tile => row(shape::tile, &[R::Input, R::Multiples])
            .moves_quantized(0)
            .no_op(NoOp::WholeSliceOrTile),
        O::Pack => row(shape::pack, &[R::Axis]).keeps_quantization_of(1),
        O::Reverse => row(shape::reverse, INPUT_AXIS).moves_quantized(0),
        O::DepthToSpace | O::SpaceToDepth => {
            row(shape::depth_space, &[R::Input, R::BlockSize, R::Layout]).moves_quantized(0)
        }
        O::ChannelShuffle => row(shape::channel_shuffle, UNNAMED).moves_quantized(0),
        O::Fill => row(shape::fill, UNNAMED),
        O::Rank => row(shape::tensor_rank, UNNAMED),
        // Gather and scatter.
        O::Gather => {
            row(gather_scatter::gather, &[R::Input, R::Axis, R::Indices]).moves_quantized(0)
        }
        O::GatherElements => row(
            gather_scatter::gather_elements,
            &[R::Input, R::Axis, R::Indices],
        )
        .keeps_quantization_of(0),
        O::GatherNd => row(
            gather_scatter::gather_nd,
            &[R::Input, R::Indices, R::BatchDims],
        )
        .keeps_quantization_of(0),
        O::NonZero => row(gather_scatter::non_zero, &[R::Input]),
        O::NonMaxSuppression => row(detection::non_max_suppression, detection::NMS_ROLES),
        O::Unique => row(detection::unique, detection::UNIQUE_ROLES),
        O::ScatterElements => row(
            gather_scatter::scatter_elements,
            &[R::Input, R::Indices, R::Updates, R::Axis, R::Reduction],
        )
        .keeps_quantization_of(0),
        O::ScatterNd => row(
            gather_scatter::scatter_nd,
            &[R::Input, R::Indices, R::Updates, R::Reduction],
        )
        .keeps_quantization_of(0),
        // Reductions.
        O::ReduceAny | O::ReduceAll => row(reduce::reduce_logical, REDUCE).axes(Axes::Reduction),
        O::ReduceSum | O::ReduceProd => {
            row(reduce::reduce_arithmetic, REDUCE).axes(Axes::Reduction)
        }
        O::Mean => row(reduce::reduce_ordered, REDUCE)
            .int8(Int8::Rescales)
            .axes(Axes::Reduction),
        O::ReduceMax | O::ReduceMin => row(reduce::reduce_ordered, REDUCE).axes(Axes::Reduction),
        O::Argmax | O::Argmin => row(reduce::arg_reduce, INPUT_AXIS),
        O::TopkV2 => row(reduce::top_k, &[R::Input, R::K]),
        O::CumSum => row(
            reduce::cumulative_sum,
            &[R::Input, R::Axis, R::Exclusive, R::Reverse],
        ),
        // Normalization.
        O::Softmax => row(normalization::softmax, &[R::Input, R::Beta, R::Axis])
            .version(more_inputs_than::<2>)
            .int8(UNIT_INTERVAL)
            .axes(Axes::AlongAxis),
        O::LogSoftmax => {
            row(normalization::softmax, &[R::Input, R::Beta, R::Axis]).axes(Axes::AlongAxis)
        }
        O::L2Normalization => row(normalization::l2_normalization, UNNAMED)
            .version(more_inputs_than::<1>)
            .axes(Axes::AlongAxis),
        O::LocalResponseNormalization => row(
            normalization::local_response,
            &[R::Input, R::Radius, R::Bias, R::Alpha, R::Beta, R::Axis],
        )
        .version(more_inputs_than::<5>),
        O::LayerNormalization => row(
            normalization::layer_normalization,
            &[R::Input, R::Gamma, R::Beta, R::Epsilon, R::Axis],
        ),
        O::InstanceNormalization => row(
            normalization::instance_normalization,
            &[R::Input, R::Gamma, R::Beta, R::Epsilon, R::Layout],
        ),
        // Resizing.
        O::ResizeBilinear => row(resize::resize, resize::RESIZE_ROLES)
            .version(more_inputs_than::<3>)
            .int8(Int8::Keeps { data: 0 }),
        O::ResizeNearestNeighbor => {
            row(resize::resize, resize::RESIZE_ROLES).int8(Int8::Keeps { data: 0 })
        }
        O::Resample => row(resize::resample, resize::RESAMPLE_ROLES),
        O::GridSample => row(resize::grid_sample, resize::GRID_SAMPLE_ROLES),
        // MediaPipe's custom operations.
        O::MaxPoolWithArgmax => row(
            mediapipe::max_pool_with_argmax,
            mediapipe::MAX_POOL_WITH_ARGMAX_ROLES,
        )
        .work(Work::Pool),
        O::MaxUnpooling => row(mediapipe::max_unpooling, mediapipe::MAX_UNPOOLING_ROLES),
        O::LandmarksToTransformMatrix => row(
            mediapipe::landmarks_to_transform_matrix,
            mediapipe::LANDMARKS_TO_TRANSFORM_MATRIX_ROLES,
        ),
        O::TransformLandmarks => row(mediapipe::transform_landmarks, &[R::Landmarks, R::Matrix]),
        O::TransformTensorBilinear => row(
            mediapipe::transform_tensor_bilinear,
            &[R::Input, R::Matrix, R::OutputWidth, R::OutputHeight],
        ),
        // Recurrent sequences.
        O::UnidirectionalSequenceLstm => {
            row(sequence::lstm, sequence::LSTM_ROLES).version(sequence::state_outputs_version)
        }
        O::UnidirectionalSequenceRnn => {
            row(sequence::rnn, sequence::RNN_ROLES).version(sequence::state_outputs_version)
        }
        // Control flow (the subgraphs are checked by `infer_control_flow`).
        O::If => row(control_flow::structure, &[R::Condition, R::Then, R::Else])
            .subgraphs(control_flow::infer_if),
        O::While => row(control_flow::structure, &[R::Condition, R::Body])
            .subgraphs(control_flow::infer_while),
        // Operation types of the NN set that nnc does not implement: each refused by name.
        O::EmbeddingLookup
        | O::HashtableLookup
        | O::LshProjection
        | O::Lstm
        | O::Rnn
        | O::Svdf
        | O::BatchToSpaceNd
        | O::SpaceToBatchNd
        | O::AxisAlignedBboxTransform
        | O::BidirectionalSequenceLstm
        | O::BidirectionalSequenceRnn
        | O::BoxWithNmsLimit
        | O::DetectionPostprocessing
        | O::GenerateProposals
        | O::HeatmapMaxKeypoint
        | O::Quantized16BitLstm
        | O::RandomMultinomial
        | O::RoiAlign
        | O::RoiPooling
        | O::QuantizedLstm
        | O::OemOperation => OpSchema::unsupported(),
    }
}

/// Checks and infers the outputs of one operation.
///
/// `outputs` are the operands the operation declares it writes; their count is checked,
/// and operations whose output type is chosen by the model (CAST, QUANTIZE, DEQUANTIZE)
/// take it from them.
pub fn infer(
    op: OperationType,
    inputs: &[InputView],
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    let row = schema(op);
    let infer = row.infer.ok_or(SignatureError::Unsupported(op))?;
    let shapes = infer(op, &Operands { inputs }, outputs)?;
    if let Some(data) = row.keeps_quantization_of {
        check_kept_quantization(data, inputs, outputs)?;
    }
    Ok(shapes)
}

/// NNAPI requires the outputs of operations that move 8-bit quantized values without
/// rescaling them to keep the data input's scale and zero point.
fn check_kept_quantization(data: usize, inputs: &[InputView], outputs: &[&Operand]) -> Result<()> {
    let Some(input) = inputs.get(data).map(|v| v.operand) else {
        return Ok(());
    };
    if !QUANT8.contains(&input.operand_type) {
        return Ok(());
    }
    for (k, out) in outputs.iter().enumerate() {
        // A zero scale is an unset template (the validator rejects it on its own).
        if out.operand_type == input.operand_type
            && out.scale != 0.0
            && (out.scale != input.scale || out.zero_point != input.zero_point)
        {
            return Err(shape_err(format!(
                "output {k} must keep the input's scale {} and zero point {}, got {} and {}",
                input.scale, input.zero_point, out.scale, out.zero_point
            )));
        }
    }
    Ok(())
}

/// The fused-activation input of an operation with `input_count` inputs, when it has
/// one (see [`OpSchema`]'s `fused_activation`).
pub fn fused_activation_input(op: OperationType, input_count: usize) -> Option<usize> {
    schema(op)
        .fused_activation
        .then(|| (0..input_count).find(|&k| input_role(op, k, input_count) == Role::Activation))
        .flatten()
}

/// The role of input `index` of an operation with `input_count` inputs, for dumps,
/// messages, device rules and the cost model. Positions past the listed roles (variadic
/// inputs) are [`Role::Input`].
pub fn input_role(op: OperationType, index: usize, input_count: usize) -> Role {
    match schema(op).roles {
        Roles::Fixed(roles) => roles.get(index).copied().unwrap_or(Role::Input),
        Roles::Computed(role) => role(index, input_count),
    }
}

/// The earliest HAL version whose operation set can express this particular use of an
/// operation: its base version, raised by newer operand types and optional arguments.
pub fn required_version(
    op: OperationType,
    inputs: &[&Operand],
    outputs: &[&Operand],
) -> HalVersion {
    let mut v = op.hal_version();
    for operand in inputs.iter().chain(outputs) {
        v = v.max(operand.operand_type.hal_version());
    }
    v.max((schema(op).version)(inputs, outputs))
}
