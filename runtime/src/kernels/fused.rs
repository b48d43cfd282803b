//! Adjacent operations the executor runs as one kernel, the first's output never
//! written (`exec/program.rs` decides, from the graph alone, which pairs may fuse; the
//! memory plan keeps such a pair's inputs apart from its output):
//! - a 1x1 expansion CONV_2D and the DEPTHWISE_CONV_2D reading it
//!   ([`ExpandDepthwise`]);
//! - LOGISTIC and the MUL of its input by its output: SiLU (swish), `x * sigmoid(x)`, as
//!   PyTorch exports it (EfficientNet, YOLO, MobileViT). One pass reads x and writes the
//!   product; unfused, the sigmoid is written and read back.

use nnc_formats::nn::{OperandType, Operation, OperationType};

use super::expand_depthwise::ExpandDepthwise;
use super::{OpInfo, PreparedWeights, vmath};
use crate::error::{Result, RuntimeError};
use crate::tensor::{TensorMut, TensorRef};

/// A fused pair's kernel.
#[derive(Debug)]
pub(crate) enum FusedPair {
    ExpandDepthwise(ExpandDepthwise),
    /// `x * sigmoid(x)`.
    Swish,
}

/// Whether `tail` (the operation after `head`) may run fused with it, as far as the
/// graph shows: the pair has a fused kernel's form and `tail` reads `head`'s one output
/// once. The caller checks that nothing else reads that output.
pub(crate) fn is_candidate(head: &Operation, tail: &Operation) -> bool {
    let &[t] = head.outputs.as_slice() else {
        return false;
    };
    let reads_once = tail.inputs.iter().filter(|&&o| o == t).count() == 1;
    let pair = (head.op_type, tail.op_type);
    if pair == (OperationType::Conv2d, OperationType::DepthwiseConv2d) {
        return reads_once && tail.inputs.first() == Some(&t);
    }
    if pair == (OperationType::Logistic, OperationType::Mul) {
        let (Some(&x), [a, b, ..]) = (head.inputs.first(), tail.inputs.as_slice()) else {
            return false;
        };
        return reads_once && ((*a == t && *b == x) || (*b == t && *a == x));
    }
    false
}

impl FusedPair {
    /// The fused kernel of a candidate pair ([`is_candidate`]) where its operands have
    /// the form the kernel runs; `shapes` are the head's input 0, its output and the
    /// tail's output, all known before execution.
    pub(crate) fn for_pair(
        head: &OpInfo,
        tail: &OpInfo,
        shapes: [&[usize]; 3],
    ) -> Option<FusedPair> {
        let pair = (head.op_type(), tail.op_type());
        if pair == (OperationType::Conv2d, OperationType::DepthwiseConv2d) {
            return ExpandDepthwise::for_pair(head, tail, shapes).map(FusedPair::ExpandDepthwise);
        }
        if pair == (OperationType::Logistic, OperationType::Mul) {
            let float = |info: &OpInfo, i: usize| {
                info.input_type(i)
                    .is_ok_and(|t| t == OperandType::TensorFloat32)
            };
            let [x, s, out] = shapes;
            let no_activation = tail.i32(2, "activation").ok() == Some(0);
            let fits = float(head, 0) && float(tail, 0) && float(tail, 1) && no_activation;
            return (fits && x == s && s == out).then_some(FusedPair::Swish);
        }
        None
    }

    /// Runs the pair. `head` and `tail` are the two operations' inputs as their own
    /// kernels would see them, except the tail's read of the head's output (absent);
    /// `head_weights` the head's prepared weights; `head_output_shape` the shape the
    /// head's output would have.
    pub(crate) fn run<'t>(
        &self,
        head: &[Option<TensorRef<'t>>],
        head_weights: &PreparedWeights,
        head_output_shape: &[usize],
        tail: &[Option<TensorRef<'t>>],
        out: &mut TensorMut,
        threads: usize,
    ) -> Result<()> {
        match self {
            FusedPair::ExpandDepthwise(pair) => {
                pair.run(head, head_weights, head_output_shape, tail, out, threads)
            }
            FusedPair::Swish => {
                let x = head
                    .first()
                    .copied()
                    .flatten()
                    .ok_or_else(|| RuntimeError::kernel("swish: the input is missing"))?;
                if out.row_stride.is_some() || x.shape != out.shape {
                    return Err(RuntimeError::kernel(
                        "swish: the output is not a contiguous tensor of the input's shape",
                    ));
                }
                let x = x.f32()?;
                let o = out.f32_mut()?;
                if x.len() != o.len() {
                    return Err(RuntimeError::kernel("swish: input and output sizes differ"));
                }
                vmath::apply_threaded(threads, vmath::Func::Silu, x, o);
                Ok(())
            }
        }
    }
}
