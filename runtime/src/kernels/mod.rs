//! CPU kernels: one [`Kernel`] per operation, built once at preparation time.
//!
//! [`build`] decodes an operation's static parameters (strides, padding, activation,
//! axes, ...) from its CONSTANT_COPY inputs and picks the implementation for its operand
//! types; an unsupported combination is a build-time [`RuntimeError::Unsupported`],
//! never a run-time panic. Every kernel re-derives its geometry from the actual shapes
//! it is given at run time (so dynamic shapes work) and checks them, returning an error
//! on any inconsistency.
//!
//! Weights (CONSTANT_REFERENCE inputs) reach a kernel only through [`PreparedWeights`],
//! made by [`Kernel::prepare_weights`] when they enter a device's parameter cache. The
//! default keeps a plain aligned copy of each that the executor presents as an ordinary
//! input tensor; kernels that want another layout (convolutions pack their filters for
//! the GEMM) override it.
//!
//! [`build_with`] holds the one match over operation types: each arm picks the
//! operation's quantized kernel (module `quant`) when any of its tensors is 8-bit
//! quantized and it has one, its float kernel family otherwise. Each family then
//! dispatches on the operand type in its `build_*` function.

use nnc_formats::nn::ops::{self, InputView, Operands, SignatureError};
use nnc_formats::nn::{FusedActivation, Lifetime, Operand, OperandType, Operation, OperationType};

use crate::buffer::{AlignedBuf, WeightBuf};
use crate::error::{OpRef, Result, RuntimeError};
use crate::tensor::{TensorMut, TensorRef};

pub mod compare;
pub mod conv;
mod conv_indirect;
mod depthwise_f32;
mod detection;
pub mod elementwise;
pub(crate) mod expand_depthwise;
pub mod fully_connected;
pub(crate) mod fused;
pub mod gather;
mod gemm_f32;
pub mod grid_sample;
pub mod isa;
pub(crate) mod linalg;
pub mod matmul;
pub mod mediapipe;
pub mod misc;
pub mod pool;
mod quant;
pub mod reduce;
pub mod resample;
pub mod resize;
pub mod scan;
pub mod scatter;
pub mod sequence;
pub mod shape;
pub mod softmax;
pub mod transformer;
pub(crate) mod util;
pub(crate) mod vmath;
pub(crate) mod window;
mod winograd;

/// An operation's CPU implementation.
pub trait Kernel: Send + Sync {
    /// Turns the operation's CONSTANT_REFERENCE inputs (plaintext bytes by input
    /// position; `None` for other inputs) into what [`Kernel::run`] reads. Called when
    /// the weights enter a device's parameter cache; may be called again after eviction.
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        PreparedWeights::raw(weights, &[])
    }

    /// Computes the outputs from the inputs.
    fn run(&self, ctx: &mut KernelContext) -> Result<()>;
}

/// An operation's weights in the form its kernel reads, in zeroize-on-drop storage.
///
/// Buffers are addressed by index in the kernel's own convention; an input position can
/// also be mapped to a buffer, which the executor then presents to the kernel as that
/// input's tensor.
#[derive(Debug, Default)]
pub struct PreparedWeights {
    buffers: Vec<WeightBuf>,
    input_views: Vec<Option<usize>>,
}

impl PreparedWeights {
    /// No weights.
    pub fn empty() -> PreparedWeights {
        PreparedWeights::default()
    }

    /// A plain aligned copy of every present weight except those at positions in
    /// `except`, each presented as its input's tensor.
    pub fn raw(weights: &[Option<&[u8]>], except: &[usize]) -> Result<PreparedWeights> {
        let mut prepared = PreparedWeights::empty();
        prepared.add_raw(weights, except)?;
        Ok(prepared)
    }

    /// Adds a plain aligned copy of every present weight except those at positions in
    /// `except`, each presented as its input's tensor.
    pub fn add_raw(&mut self, weights: &[Option<&[u8]>], except: &[usize]) -> Result<()> {
        for (position, bytes) in weights.iter().enumerate() {
            if let Some(bytes) = bytes
                && !except.contains(&position)
            {
                let index = self.push(AlignedBuf::from_bytes(bytes)?);
                self.set_input_view(position, index);
            }
        }
        Ok(())
    }

    /// Adds a buffer and returns its index.
    pub fn push(&mut self, buffer: impl Into<WeightBuf>) -> usize {
        self.buffers.push(buffer.into());
        self.buffers.len() - 1
    }

    /// Presents buffer `buffer` as the tensor of input `position`.
    pub fn set_input_view(&mut self, position: usize, buffer: usize) {
        if self.input_views.len() <= position {
            self.input_views.resize(position + 1, None);
        }
        self.input_views[position] = Some(buffer);
    }

    pub fn buffer(&self, index: usize) -> Option<&WeightBuf> {
        self.buffers.get(index)
    }

    /// The bytes presented as input `position`, if any.
    pub fn input_view(&self, position: usize) -> Option<&[u8]> {
        let index = (*self.input_views.get(position)?)?;
        self.buffers.get(index).map(WeightBuf::as_bytes)
    }

    /// Bytes of memory held, for cache accounting.
    pub fn byte_size(&self) -> usize {
        self.buffers.iter().map(WeightBuf::capacity).sum()
    }

    pub fn buffer_count(&self) -> usize {
        self.buffers.len()
    }

    /// The length of every buffer and which buffer each input sees: what a kernel's
    /// preparation determines from its static parameters alone, whatever the weights.
    pub fn layout(&self) -> (Vec<usize>, Vec<Option<usize>>) {
        (
            self.buffers.iter().map(WeightBuf::len).collect(),
            self.input_views.clone(),
        )
    }

    /// The buffers, by index.
    pub fn buffers(&self) -> &[WeightBuf] {
        &self.buffers
    }

    /// Which buffer each input position sees.
    pub fn input_views(&self) -> &[Option<usize>] {
        &self.input_views
    }

    /// Prepared weights from their parts (as a data cache stores them); every view must
    /// name one of the buffers.
    pub fn from_parts(
        buffers: Vec<WeightBuf>,
        input_views: Vec<Option<usize>>,
    ) -> Result<PreparedWeights> {
        if input_views.iter().flatten().any(|&v| v >= buffers.len()) {
            return Err(RuntimeError::Internal(
                "prepared weights: a view names a missing buffer".into(),
            ));
        }
        Ok(PreparedWeights {
            buffers,
            input_views,
        })
    }

    /// The same weights with every buffer of its own (views of shared storage copied):
    /// for a bounded parameter cache, whose evictions must free what they account for.
    pub fn into_own(self) -> Result<PreparedWeights> {
        Ok(PreparedWeights {
            buffers: self
                .buffers
                .into_iter()
                .map(WeightBuf::into_own)
                .collect::<Result<_>>()?,
            input_views: self.input_views,
        })
    }
}

/// Growable per-execution scratch memory for kernels (im2col tiles, transposes).
#[derive(Debug, Default)]
pub struct Scratch {
    f32: Vec<f32>,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch::default()
    }

    /// At least `n` f32 values of scratch (contents unspecified).
    pub fn f32(&mut self, n: usize) -> Result<&mut [f32]> {
        if self.f32.len() < n {
            let extra = n - self.f32.len();
            self.f32
                .try_reserve_exact(extra)
                .map_err(|_| RuntimeError::OutOfMemory {
                    bytes: n.saturating_mul(4),
                })?;
            self.f32.resize(n, 0.0);
        }
        Ok(&mut self.f32[..n])
    }
}

/// What a kernel sees while it runs.
pub struct KernelContext<'a> {
    /// One entry per operation input: `None` for an omitted optional input and for a
    /// weight the kernel consumed in [`Kernel::prepare_weights`] without presenting it.
    pub inputs: Vec<Option<TensorRef<'a>>>,
    /// One entry per operation output, shaped by the executor.
    pub outputs: Vec<TensorMut<'a>>,
    /// This operation's prepared weights.
    pub weights: &'a PreparedWeights,
    pub scratch: &'a mut Scratch,
    /// Threads the kernel may use (1 = stay on the calling thread). When above 1 the
    /// executor runs inside a rayon pool of that many threads.
    pub threads: usize,
}

impl<'a> KernelContext<'a> {
    /// Input `i`, which must be present.
    pub fn input(&self, i: usize) -> Result<TensorRef<'a>> {
        self.inputs
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| RuntimeError::kernel(format!("input {i} is missing")))
    }

    /// Input `i` if present.
    pub fn optional_input(&self, i: usize) -> Option<TensorRef<'a>> {
        self.inputs.get(i).copied().flatten()
    }

    /// Output `i`.
    pub fn output(&mut self, i: usize) -> Result<&mut TensorMut<'a>> {
        self.outputs
            .get_mut(i)
            .ok_or_else(|| RuntimeError::kernel(format!("output {i} is missing")))
    }

    /// Output `i` together with the scratch memory (both borrowed mutably).
    pub fn output_and_scratch(&mut self, i: usize) -> Result<(&mut TensorMut<'a>, &mut Scratch)> {
        let out = self
            .outputs
            .get_mut(i)
            .ok_or_else(|| RuntimeError::kernel(format!("output {i} is missing")))?;
        Ok((out, &mut *self.scratch))
    }

    /// The GEMM parallelism matching the thread budget.
    pub(crate) fn gemm_parallelism(&self) -> ::gemm::Parallelism {
        if self.threads > 1 {
            ::gemm::Parallelism::Rayon(self.threads)
        } else {
            ::gemm::Parallelism::None
        }
    }
}

/// How the quantized kernels that accumulate (the convolutions, FULLY_CONNECTED,
/// BATCH_MATMUL, MEAN) bring an i32 accumulator back to 8 bits.
///
/// Both are faithful to the quantized model; they differ in the last unit now and then,
/// and deep networks can amplify that (MobileNetV2 int8 logits differ by up to 21 units
/// between the two). Every other quantized kernel computes the same either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Requantization {
    /// The scale `input_scale * filter_scale / output_scale` in single precision, the
    /// accumulator converted to f32 and multiplied, rounded half to even: the arithmetic
    /// of XNNPACK, which LiteRT runs quantized models on by default.
    #[default]
    Float,
    /// A Q31 multiplier and shift with gemmlowp's rounding: TensorFlow Lite's reference
    /// kernels (and the NNAPI reference implementation built on them), bit for bit.
    FixedPoint,
}

/// How closely float32 operations must follow float32 arithmetic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FloatMath {
    /// Every product and sum as a direct float32 computation would round it: results
    /// within NNAPI's float32 tolerance.
    #[default]
    Strict,
    /// Faster algorithms that round more: 3x3 stride-1 convolutions as Winograd F(4x4,
    /// 3x3) (F(2x2, 3x3) on outputs smaller than 8x8), whose errors are about ten times
    /// a direct sum's (ResNet18's logits: 3.0e-6 from ONNX Runtime's against 2.4e-6),
    /// well inside NNAPI's relaxed (float16) tolerance. Like Arm Compute Library's `fast_math` and ncnn's default. Models
    /// that allow relaxed computation (`relax_computation_float32_to_float16`) get it
    /// whatever this option says.
    Fast,
}

/// A fingerprint of the kernels' sources (`build.rs`). A compilation cache holds
/// prepared weights, and the nnc version alone does not tell builds apart: an entry from
/// a build whose kernels differ in any way is a miss, not a misreading.
pub(crate) const KERNELS_FINGERPRINT: &str = env!("NNC_KERNELS_FINGERPRINT");

/// How kernels are built: options that change what they compute or how exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KernelOptions {
    pub requantization: Requantization,
    pub float_math: FloatMath,
}

impl KernelOptions {
    /// The options a model gets: [`FloatMath::Fast`] when it allows relaxed float32
    /// computation.
    pub fn for_model(self, relaxed: bool) -> KernelOptions {
        KernelOptions {
            float_math: if relaxed {
                FloatMath::Fast
            } else {
                self.float_math
            },
            ..self
        }
    }
}

/// Builds the kernel of one operation with the default [`KernelOptions`].
///
/// `constant` yields the bytes of constant operands by operand index; only inline
/// (CONSTANT_COPY) values are needed, so a device that keeps its weights encrypted can
/// build kernels without them.
pub fn build<'c>(
    op: &Operation,
    operands: &[Operand],
    constant: impl Fn(u32) -> Option<&'c [u8]>,
) -> Result<Box<dyn Kernel>> {
    build_with(op, operands, constant, KernelOptions::default())
}

/// The fused kernel of `head` and `tail` (a candidate pair, [`fused::is_candidate`]) where
/// their operands have the form it runs; `shapes` are the head's input 0, its output and
/// the tail's output.
pub(crate) fn fused_pair<'c>(
    head: &Operation,
    tail: &Operation,
    operands: &[Operand],
    constant: impl Fn(u32) -> Option<&'c [u8]>,
    shapes: [&[usize]; 3],
) -> Option<fused::FusedPair> {
    let head = OpInfo::new(head, operands, &constant).ok()?;
    let tail = OpInfo::new(tail, operands, &constant).ok()?;
    head.check_signature().ok()?;
    tail.check_signature().ok()?;
    fused::FusedPair::for_pair(&head, &tail, shapes)
}

/// Whether the kernel [`build_with`] makes for `op` writes its output 0 as a slice of a
/// larger tensor's last dimension ([`TensorMut::row_stride`]), whatever options it is
/// built with: the float convolutions. The memory planner places such outputs straight
/// in the concatenation that reads them. A function of the graph alone, as the plan
/// (which a cache stores) must be.
pub(crate) fn writes_row_slices(op: &Operation, operands: &[Operand]) -> bool {
    let float = |list: &[u32]| {
        list.first()
            .and_then(|&o| operands.get(o as usize))
            .is_some_and(|o| o.operand_type == nnc_formats::nn::OperandType::TensorFloat32)
    };
    matches!(
        op.op_type,
        OperationType::Conv2d | OperationType::GroupedConv2d
    ) && op.outputs.len() == 1
        && float(&op.inputs)
        && float(&op.outputs)
}

/// [`build`] with explicit [`KernelOptions`].
pub fn build_with<'c>(
    op: &Operation,
    operands: &[Operand],
    constant: impl Fn(u32) -> Option<&'c [u8]>,
    options: KernelOptions,
) -> Result<Box<dyn Kernel>> {
    let mut info = OpInfo::new(op, operands, &constant)?;
    info.requantization = options.requantization;
    info.float_math = options.float_math;
    info.check_signature()?;
    use FusedActivation as Act;
    use OperationType as O;
    use compare::CompareOp as Cmp;
    use conv::ConvKind;
    use elementwise::{BinaryOp as Bin, UnaryOp as Un};
    use quant::binary::{Arith, Cmp as QCmp};
    use quant::movement::Rearrangement as Re;
    use quant::reduce::Reduction as QRed;
    use quant::unary::TableFn;
    use reduce::ReduceOp as Red;
    use shape::Movement as Mv;
    use softmax::Normalization as Norm;
    // One arm per operation type deciding both its kernels, each family handed a typed
    // selector so that it never re-dispatches on the operation type. An operation with a
    // quantized kernel builds it when any of its tensors is 8-bit (`if_quantized`), its
    // float kernel otherwise. A new type fails to compile here until its kernels are
    // decided; a float-only one needs nothing in `quant`, and its float family reports
    // what it makes of quantized operands (CAST converts them itself).
    match op.op_type {
        O::Conv2d | O::GroupedConv2d => info
            .if_quantized(|| quant::conv::build(&info, ConvKind::Grouped))
            .unwrap_or_else(|| conv::build(&info, ConvKind::Grouped)),
        O::DepthwiseConv2d => info
            .if_quantized(|| quant::conv::build(&info, ConvKind::Depthwise))
            .unwrap_or_else(|| conv::build(&info, ConvKind::Depthwise)),
        O::TransposeConv2d => info
            .if_quantized(|| quant::conv::build(&info, ConvKind::Transpose))
            .unwrap_or_else(|| conv::build(&info, ConvKind::Transpose)),
        O::AveragePool2d => info
            .if_quantized(|| quant::pool::build(&info))
            .unwrap_or_else(|| pool::build(&info, pool::PoolKind::Average)),
        O::MaxPool2d => info
            .if_quantized(|| quant::pool::build(&info))
            .unwrap_or_else(|| pool::build(&info, pool::PoolKind::Max)),
        O::L2Pool2d => pool::build(&info, pool::PoolKind::L2),
        O::FullyConnected => info
            .if_quantized(|| quant::dense::build_fully_connected(&info))
            .unwrap_or_else(|| fully_connected::build(&info)),
        O::BatchMatmul => info
            .if_quantized(|| quant::dense::build_batch_matmul(&info))
            .unwrap_or_else(|| matmul::build(&info)),
        O::Add => info
            .if_quantized(|| quant::binary::build(&info, Arith::Add))
            .unwrap_or_else(|| elementwise::build_binary(&info, Bin::Add)),
        O::Sub => info
            .if_quantized(|| quant::binary::build(&info, Arith::Sub))
            .unwrap_or_else(|| elementwise::build_binary(&info, Bin::Sub)),
        O::Mul => info
            .if_quantized(|| quant::binary::build(&info, Arith::Mul))
            .unwrap_or_else(|| elementwise::build_binary(&info, Bin::Mul)),
        O::Div => elementwise::build_binary(&info, Bin::Div),
        O::Maximum => info
            .if_quantized(|| quant::binary::build(&info, Arith::Maximum))
            .unwrap_or_else(|| elementwise::build_binary(&info, Bin::Max)),
        O::Minimum => info
            .if_quantized(|| quant::binary::build(&info, Arith::Minimum))
            .unwrap_or_else(|| elementwise::build_binary(&info, Bin::Min)),
        O::Pow => elementwise::build_binary(&info, Bin::Pow),
        O::Prelu => info
            .if_quantized(|| quant::binary::build(&info, Arith::Prelu))
            .unwrap_or_else(|| elementwise::build_binary(&info, Bin::Prelu)),
        O::Mod => elementwise::build_mod(&info),
        O::Bitwise => elementwise::build_bitwise(&info),
        O::Abs => elementwise::build_unary(&info, Un::Abs),
        O::Exp => elementwise::build_unary(&info, Un::Exp),
        O::Log => elementwise::build_unary(&info, Un::Log),
        O::Sqrt => elementwise::build_unary(&info, Un::Sqrt),
        O::Rsqrt => elementwise::build_unary(&info, Un::Rsqrt),
        O::Neg => elementwise::build_unary(&info, Un::Neg),
        O::Floor => elementwise::build_unary(&info, Un::Floor),
        O::Sin => elementwise::build_unary(&info, Un::Sin),
        O::Logistic => info
            .if_quantized(|| quant::unary::build(&info, TableFn::Logistic))
            .unwrap_or_else(|| elementwise::build_unary(&info, Un::Logistic)),
        O::Tanh => info
            .if_quantized(|| quant::unary::build(&info, TableFn::Tanh))
            .unwrap_or_else(|| elementwise::build_unary(&info, Un::Tanh)),
        O::Relu => info
            .if_quantized(|| quant::unary::build(&info, TableFn::Clamp(Act::Relu)))
            .unwrap_or_else(|| elementwise::build_unary(&info, Un::Clamp(Clamp::new(Act::Relu)))),
        O::Relu1 => info
            .if_quantized(|| quant::unary::build(&info, TableFn::Clamp(Act::Relu1)))
            .unwrap_or_else(|| elementwise::build_unary(&info, Un::Clamp(Clamp::new(Act::Relu1)))),
        O::Relu6 => info
            .if_quantized(|| quant::unary::build(&info, TableFn::Clamp(Act::Relu6)))
            .unwrap_or_else(|| elementwise::build_unary(&info, Un::Clamp(Clamp::new(Act::Relu6)))),
        O::HardSwish => info
            .if_quantized(|| quant::unary::build(&info, TableFn::HardSwish))
            .unwrap_or_else(|| elementwise::build_unary(&info, Un::HardSwish)),
        O::Elu => elementwise::build_elu(&info),
        O::LogicalNot => elementwise::build_unary(&info, Un::Not),
        O::Equal => info
            .if_quantized(|| quant::binary::build_compare(&info, QCmp::Eq))
            .unwrap_or_else(|| compare::build(&info, Cmp::Eq)),
        O::NotEqual => info
            .if_quantized(|| quant::binary::build_compare(&info, QCmp::Ne))
            .unwrap_or_else(|| compare::build(&info, Cmp::Ne)),
        O::Less => info
            .if_quantized(|| quant::binary::build_compare(&info, QCmp::Lt))
            .unwrap_or_else(|| compare::build(&info, Cmp::Lt)),
        O::LessEqual => info
            .if_quantized(|| quant::binary::build_compare(&info, QCmp::Le))
            .unwrap_or_else(|| compare::build(&info, Cmp::Le)),
        O::Greater => info
            .if_quantized(|| quant::binary::build_compare(&info, QCmp::Gt))
            .unwrap_or_else(|| compare::build(&info, Cmp::Gt)),
        O::GreaterEqual => info
            .if_quantized(|| quant::binary::build_compare(&info, QCmp::Ge))
            .unwrap_or_else(|| compare::build(&info, Cmp::Ge)),
        O::LogicalAnd => compare::build(&info, Cmp::And),
        O::LogicalOr => compare::build(&info, Cmp::Or),
        O::Select => compare::build_select(&info),
        O::Mean => info
            .if_quantized(|| quant::reduce::build(&info, QRed::Mean))
            .unwrap_or_else(|| reduce::build(&info, Red::Mean)),
        O::ReduceSum => reduce::build(&info, Red::Sum),
        O::ReduceMax => info
            .if_quantized(|| quant::reduce::build(&info, QRed::Max))
            .unwrap_or_else(|| reduce::build(&info, Red::Max)),
        O::ReduceMin => info
            .if_quantized(|| quant::reduce::build(&info, QRed::Min))
            .unwrap_or_else(|| reduce::build(&info, Red::Min)),
        O::ReduceProd => reduce::build(&info, Red::Prod),
        O::ReduceAny => reduce::build(&info, Red::Any),
        O::ReduceAll => reduce::build(&info, Red::All),
        O::Softmax => info
            .if_quantized(|| quant::softmax::build_softmax(&info))
            .unwrap_or_else(|| softmax::build(&info, Norm::Softmax)),
        O::LogSoftmax => softmax::build(&info, Norm::LogSoftmax),
        O::L2Normalization => info
            .if_quantized(|| quant::softmax::build_l2_normalization(&info))
            .unwrap_or_else(|| softmax::build(&info, Norm::L2)),
        O::LocalResponseNormalization => softmax::build(&info, Norm::LocalResponse),
        O::InstanceNormalization => softmax::build(&info, Norm::Instance),
        O::Reshape | O::Squeeze | O::ExpandDims => info
            .if_quantized(|| quant::movement::build_bytes(&info, Mv::Copy))
            .unwrap_or_else(|| shape::build(&info, Mv::Copy)),
        O::Transpose => info
            .if_quantized(|| quant::movement::build_bytes(&info, Mv::Transpose))
            .unwrap_or_else(|| shape::build(&info, Mv::Transpose)),
        O::Concatenation => info
            .if_quantized(|| quant::movement::build_concat(&info))
            .unwrap_or_else(|| shape::build(&info, Mv::Concatenation)),
        O::Split => info
            .if_quantized(|| quant::movement::build_bytes(&info, Mv::Split))
            .unwrap_or_else(|| shape::build(&info, Mv::Split)),
        O::Slice => info
            .if_quantized(|| quant::movement::build_bytes(&info, Mv::Slice))
            .unwrap_or_else(|| shape::build(&info, Mv::Slice)),
        O::StridedSlice => info
            .if_quantized(|| quant::movement::build_bytes(&info, Mv::StridedSlice))
            .unwrap_or_else(|| shape::build(&info, Mv::StridedSlice)),
        O::Pad => info
            .if_quantized(|| quant::movement::build_pad(&info))
            .unwrap_or_else(|| shape::build(&info, Mv::Pad)),
        O::PadV2 => info
            .if_quantized(|| quant::movement::build_pad(&info))
            .unwrap_or_else(|| shape::build(&info, Mv::PadV2)),
        O::MirrorPad => info
            .if_quantized(|| quant::movement::build_bytes(&info, Mv::MirrorPad))
            .unwrap_or_else(|| shape::build(&info, Mv::MirrorPad)),
        O::Gather => info
            .if_quantized(|| quant::movement::build_bytes(&info, Mv::Gather))
            .unwrap_or_else(|| shape::build(&info, Mv::Gather)),
        O::Tile => info
            .if_quantized(|| quant::movement::build_bytes(&info, Mv::Tile))
            .unwrap_or_else(|| shape::build(&info, Mv::Tile)),
        O::Pack => info
            .if_quantized(|| quant::movement::build_bytes(&info, Mv::Pack))
            .unwrap_or_else(|| shape::build(&info, Mv::Pack)),
        O::Reverse => info
            .if_quantized(|| quant::movement::build_bytes(&info, Mv::Reverse))
            .unwrap_or_else(|| shape::build(&info, Mv::Reverse)),
        O::DepthToSpace => info
            .if_quantized(|| quant::movement::build_block(&info, Re::DepthToSpace))
            .unwrap_or_else(|| shape::build(&info, Mv::DepthToSpace)),
        O::SpaceToDepth => info
            .if_quantized(|| quant::movement::build_block(&info, Re::SpaceToDepth))
            .unwrap_or_else(|| shape::build(&info, Mv::SpaceToDepth)),
        O::ChannelShuffle => info
            .if_quantized(|| quant::movement::build_block(&info, Re::ChannelShuffle))
            .unwrap_or_else(|| shape::build(&info, Mv::ChannelShuffle)),
        O::ResizeBilinear | O::ResizeNearestNeighbor => info
            .if_quantized(|| quant::resize::build(&info))
            .unwrap_or_else(|| resize::build(&info)),
        O::Argmax => info
            .if_quantized(|| quant::reduce::build_arg(&info, misc::Arg::Max))
            .unwrap_or_else(|| misc::build_arg(&info, misc::Arg::Max)),
        O::Argmin => info
            .if_quantized(|| quant::reduce::build_arg(&info, misc::Arg::Min))
            .unwrap_or_else(|| misc::build_arg(&info, misc::Arg::Min)),
        O::TopkV2 => misc::build_topk(&info),
        O::Cast => misc::build_cast(&info),
        O::Fill => misc::build_fill(&info),
        O::Rank => misc::build_rank(),
        O::LayerNormalization => transformer::build_layer_normalization(&info),
        O::Gelu => transformer::build_gelu(&info),
        O::Erf => transformer::build_erf(),
        O::MathUnary => transformer::build_math_unary(&info),
        O::GatherElements => gather::build(&info, gather::GatherKind::Elements),
        O::GatherNd => gather::build(&info, gather::GatherKind::Nd),
        O::NonZero => gather::build_non_zero(),
        O::NonMaxSuppression => detection::build_non_max_suppression(&info),
        O::Unique => detection::build_unique(&info),
        O::CumSum => scan::build(&info),
        O::Resample => resample::build(&info),
        O::GridSample => grid_sample::build(&info),
        O::DynamicFullyConnected => quant::dynamic_dense::build(&info),
        O::MaxPoolWithArgmax => mediapipe::build_max_pool_with_argmax(&info),
        O::MaxUnpooling => mediapipe::build_max_unpooling(&info),
        O::LandmarksToTransformMatrix => mediapipe::build_landmarks_to_transform_matrix(&info),
        O::TransformLandmarks => mediapipe::build_transform_landmarks(),
        O::TransformTensorBilinear => mediapipe::build_transform_tensor_bilinear(),
        O::ScatterElements => scatter::build(&info, scatter::ScatterKind::Elements),
        O::ScatterNd => scatter::build(&info, scatter::ScatterKind::Nd),
        O::UnidirectionalSequenceLstm => sequence::build_lstm(&info),
        O::UnidirectionalSequenceRnn => sequence::build_rnn(&info),
        // Quantized kernels only.
        O::Quantize => info
            .if_quantized(|| quant::unary::build_quantize(&info))
            .unwrap_or_else(|| Err(info.unsupported(NO_KERNEL))),
        O::Dequantize => info
            .if_quantized(|| quant::unary::build_dequantize(&info))
            .unwrap_or_else(|| Err(info.unsupported(NO_KERNEL))),
        // No CPU kernel: listed rather than matched by a wildcard, so that a new operation
        // type does not compile until its kernel is decided. (IF and WHILE are run by the
        // executor.)
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
        | O::If
        | O::While
        | O::OemOperation => Err(info.unsupported(NO_KERNEL)),
    }
}

/// The error of an operation the CPU runtime cannot run.
const NO_KERNEL: &str = "the CPU runtime has no kernel for this operation";

/// An operation under construction: its operands and inline values, with accessors that
/// turn every mismatch into an error naming the operation.
pub(crate) struct OpInfo<'a> {
    pub op: &'a Operation,
    /// The inputs with their values where known, read through
    /// [`nnc_formats::nn::ops::Operands`], the accessor the shape rules use.
    inputs: Vec<InputView<'a>>,
    outputs: Vec<&'a Operand>,
    pub requantization: Requantization,
    pub float_math: FloatMath,
}

impl<'a> OpInfo<'a> {
    fn new<'c: 'a>(
        op: &'a Operation,
        operands: &'a [Operand],
        constant: &dyn Fn(u32) -> Option<&'c [u8]>,
    ) -> Result<OpInfo<'a>> {
        let lookup = |i: u32, what: &str, k: usize| -> Result<&'a Operand> {
            operands
                .get(i as usize)
                .ok_or_else(|| RuntimeError::Operation {
                    operation: OpRef::new(None, op),
                    message: format!(
                        "{what} {k} names operand {i}, but there are {}",
                        operands.len()
                    ),
                })
        };
        let mut inputs = Vec::with_capacity(op.inputs.len());
        for (k, &i) in op.inputs.iter().enumerate() {
            let operand = lookup(i, "input", k)?;
            let value = if operand.lifetime.is_constant() {
                constant(i)
            } else {
                None
            };
            inputs.push(InputView { operand, value });
        }
        let mut outputs = Vec::with_capacity(op.outputs.len());
        for (k, &i) in op.outputs.iter().enumerate() {
            outputs.push(lookup(i, "output", k)?);
        }
        Ok(OpInfo {
            op,
            inputs,
            outputs,
            requantization: Requantization::default(),
            float_math: FloatMath::default(),
        })
    }

    /// What `quantized` builds when any input or output of the operation is 8-bit
    /// quantized; `None` otherwise, for its float kernel to decide.
    fn if_quantized(
        &self,
        quantized: impl FnOnce() -> Result<Box<dyn Kernel>>,
    ) -> Option<Result<Box<dyn Kernel>>> {
        quant::has_quant8_tensor(self).then(quantized)
    }

    /// Runs the operation's signature check (the one definition of what it accepts).
    fn check_signature(&self) -> Result<()> {
        ops::infer(self.op.op_type, &self.inputs, &self.outputs)
            .map(|_| ())
            .map_err(|e| self.invalid(e.to_string()))
    }

    /// The inputs as views, for the typed parameter decoders of `nnc_formats::nn::ops`.
    pub fn views(&self) -> &[InputView<'a>] {
        &self.inputs
    }

    /// The accessor over the inputs.
    fn operands(&self) -> Operands<'_> {
        Operands::new(&self.inputs)
    }

    /// A signature error of this operation as a runtime error naming it.
    pub fn signature_error(&self, e: SignatureError) -> RuntimeError {
        self.invalid(e.to_string())
    }

    pub fn op_type(&self) -> OperationType {
        self.op.op_type
    }

    pub fn unsupported(&self, reason: impl Into<String>) -> RuntimeError {
        RuntimeError::Unsupported {
            operation: OpRef::new(None, self.op),
            reason: reason.into(),
        }
    }

    pub fn invalid(&self, message: impl Into<String>) -> RuntimeError {
        RuntimeError::Operation {
            operation: OpRef::new(None, self.op),
            message: message.into(),
        }
    }

    pub fn input_count(&self) -> usize {
        self.inputs.len()
    }

    pub fn operand(&self, i: usize) -> Result<&'a Operand> {
        self.inputs
            .get(i)
            .map(|v| v.operand)
            .ok_or_else(|| self.invalid(format!("input {i} is missing")))
    }

    pub fn output_operand(&self, i: usize) -> Result<&'a Operand> {
        self.outputs
            .get(i)
            .copied()
            .ok_or_else(|| self.invalid(format!("output {i} is missing")))
    }

    pub fn input_type(&self, i: usize) -> Result<OperandType> {
        Ok(self.operand(i)?.operand_type)
    }

    /// Whether input `i` exists and has a value (is not NO_VALUE).
    pub fn present(&self, i: usize) -> bool {
        self.operands().present(i)
    }

    /// Whether input `i` is a CONSTANT_REFERENCE (a weight).
    pub fn is_weight(&self, i: usize) -> bool {
        self.inputs
            .get(i)
            .is_some_and(|v| v.operand.lifetime == Lifetime::ConstantReference)
    }

    pub fn i32(&self, i: usize, what: &'static str) -> Result<i32> {
        self.operands()
            .i32(i, what)
            .map_err(|e| self.signature_error(e))
    }

    /// A non-negative INT32 scalar as usize.
    pub fn usize(&self, i: usize, what: &'static str) -> Result<usize> {
        let v = self
            .operands()
            .i32_at_least(i, what, 0)
            .map_err(|e| self.signature_error(e))?;
        Ok(v as usize)
    }

    /// A FLOAT32 scalar; FLOAT16 parameters belong to float16 kernels, which do not exist yet.
    pub fn f32(&self, i: usize, what: &'static str) -> Result<f32> {
        let t = self.input_type(i)?;
        if t != OperandType::Float32 {
            return Err(self.unsupported(format!("input {i} ({what}) of type {t}")));
        }
        self.operands()
            .f32(i, what)
            .map_err(|e| self.signature_error(e))
    }

    pub fn bool(&self, i: usize, what: &'static str) -> Result<bool> {
        self.operands()
            .bool(i, what)
            .map_err(|e| self.signature_error(e))
    }

    /// An optional trailing BOOL (absent or NO_VALUE is `false`).
    pub fn optional_bool(&self, i: usize, what: &'static str) -> Result<bool> {
        self.operands()
            .optional_bool(i, what)
            .map_err(|e| self.signature_error(e))
    }

    pub fn activation(&self, i: usize) -> Result<FusedActivation> {
        self.operands()
            .activation(i)
            .map_err(|e| self.signature_error(e))
    }

    /// The values of a constant TENSOR_INT32 input, `None` when it is not constant.
    pub fn i32_values(&self, i: usize) -> Result<Option<Vec<i32>>> {
        if self.input_type(i)? != OperandType::TensorInt32 {
            return Ok(None);
        }
        Ok(self.inputs.get(i).and_then(|v| v.value).map(decode_i32s))
    }

    /// Fully known dimensions of input `i`.
    pub fn dims(&self, i: usize) -> Option<Vec<usize>> {
        let o = self.inputs.get(i)?.operand;
        o.is_fully_specified()
            .then(|| o.dimensions.iter().map(|&d| d as usize).collect())
    }
}

pub(crate) fn decode_i32s(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A fused activation as a clamp on real values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Clamp {
    pub lo: f32,
    pub hi: f32,
}

impl Clamp {
    pub fn new(activation: FusedActivation) -> Clamp {
        let (lo, hi) = activation.range();
        Clamp { lo, hi }
    }

    pub fn none() -> Clamp {
        Clamp::new(FusedActivation::None)
    }

    pub fn is_none(&self) -> bool {
        self.lo == f32::NEG_INFINITY && self.hi == f32::INFINITY
    }

    #[inline(always)]
    pub fn apply(&self, x: f32) -> f32 {
        // Comparisons rather than f32::max/min: NaN passes through unchanged, as in
        // TFLite's std::min(std::max(x, lo), hi).
        let x = if x < self.lo { self.lo } else { x };
        if x > self.hi { self.hi } else { x }
    }

    pub fn apply_slice(&self, data: &mut [f32]) {
        if self.is_none() {
            return;
        }
        let c = *self;
        for v in data {
            *v = c.apply(*v);
        }
    }

    /// The same bounds in integers (for TENSOR_INT32 arithmetic).
    pub fn apply_i32(&self, x: i32) -> i32 {
        let mut v = x;
        if self.lo.is_finite() {
            v = v.max(self.lo as i32);
        }
        if self.hi.is_finite() {
            v = v.min(self.hi as i32);
        }
        v
    }
}
