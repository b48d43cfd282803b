//! What goes into and out of an execution: the caller's inputs and output buffers, the
//! options and the result, and the sinks the outputs are written to (the caller's
//! buffers, owned tensors, or values kept for the next step of a control-flow
//! subgraph).

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nnc_formats::limits::Budget;

use super::held::Held;
use crate::buffer::AlignedBuf;
use crate::error::{Result, RuntimeError};

/// One model input: its bytes (little-endian elements of the input operand's type) and,
/// when the model leaves some of its dimensions unknown, its shape.
#[derive(Clone, Copy, Debug)]
pub struct InputTensor<'a> {
    pub data: &'a [u8],
    /// Required when the input's declared dimensions are not all known; otherwise, when
    /// given, it must match them.
    pub shape: Option<&'a [usize]>,
}

impl<'a> InputTensor<'a> {
    /// An input with the model's declared shape.
    pub fn new(data: &'a [u8]) -> InputTensor<'a> {
        InputTensor { data, shape: None }
    }

    pub fn with_shape(shape: &'a [usize], data: &'a [u8]) -> InputTensor<'a> {
        InputTensor {
            data,
            shape: Some(shape),
        }
    }

    pub fn f32(shape: &'a [usize], values: &'a [f32]) -> InputTensor<'a> {
        InputTensor::with_shape(shape, bytemuck::cast_slice(values))
    }

    pub fn i32(shape: &'a [usize], values: &'a [i32]) -> InputTensor<'a> {
        InputTensor::with_shape(shape, bytemuck::cast_slice(values))
    }
}

/// A caller-owned buffer receiving one model output (at least as large as the output).
#[derive(Debug)]
pub struct OutputBuffer<'a> {
    pub data: &'a mut [u8],
}

impl<'a> OutputBuffer<'a> {
    pub fn new(data: &'a mut [u8]) -> OutputBuffer<'a> {
        OutputBuffer { data }
    }

    pub fn f32(values: &'a mut [f32]) -> OutputBuffer<'a> {
        OutputBuffer {
            data: bytemuck::cast_slice_mut(values),
        }
    }
}

/// Per-execution options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecuteOptions {
    /// Measure the execution's wall-clock duration.
    pub measure_timing: bool,
    /// When the execution must be done: checked before every operation, and missing it
    /// fails with [`RuntimeError::MissedDeadline`] (the prepared model stays usable).
    pub deadline: Option<Instant>,
    /// How long the WHILE loops of one execution may run in all before it fails with
    /// [`RuntimeError::LoopTimeout`]; `None` is the default of 2 s
    /// ([`super::control_flow::DEFAULT_LOOP_TIMEOUT`]), and more than 15 s
    /// ([`super::control_flow::MAX_LOOP_TIMEOUT`]) is refused with
    /// [`RuntimeError::LoopTimeoutTooLong`].
    pub loop_timeout: Option<Duration>,
}

impl ExecuteOptions {
    /// Options with the given loop timeout, checked against the maximum.
    pub fn with_loop_timeout(mut self, timeout: Duration) -> Result<ExecuteOptions> {
        super::control_flow::check_loop_timeout(Some(timeout))?;
        self.loop_timeout = Some(timeout);
        Ok(self)
    }
}

/// What an execution reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionResult {
    /// The actual shape of every output.
    pub output_shapes: Vec<Vec<usize>>,
    /// Bytes written to every output buffer.
    pub output_sizes: Vec<usize>,
    /// Wall-clock duration, when measured.
    pub duration: Option<Duration>,
}

/// Receives the outputs: checked all at once before the first is written.
pub(crate) trait Sink: Send {
    fn check(&mut self, shapes: &[Vec<usize>], sizes: &[usize]) -> Result<()>;
    fn write(&mut self, output: usize, bytes: &[u8]) -> Result<()>;
    /// Output `output` as a buffer the execution gives up (a sink that can keep it
    /// avoids a copy).
    fn take(&mut self, output: usize, buffer: Held) -> Result<()> {
        self.write(output, buffer.as_bytes())
    }
    /// Whether output `output` of a static program may stay where it was computed,
    /// `range` of the execution state's arena (for a caller that keeps that state: a
    /// WHILE running its body in two states in turn); otherwise it is written.
    fn place(&mut self, _output: usize, _range: Range<usize>) -> Result<bool> {
        Ok(false)
    }
}

pub(crate) struct CallerSink<'s, 'a> {
    pub(crate) buffers: &'s mut [OutputBuffer<'a>],
}

impl Sink for CallerSink<'_, '_> {
    fn check(&mut self, _shapes: &[Vec<usize>], sizes: &[usize]) -> Result<()> {
        for (output, (&needed, buffer)) in sizes.iter().zip(self.buffers.iter()).enumerate() {
            if buffer.data.len() < needed {
                return Err(RuntimeError::OutputTooSmall {
                    output,
                    needed,
                    provided: buffer.data.len(),
                });
            }
        }
        Ok(())
    }

    fn write(&mut self, output: usize, bytes: &[u8]) -> Result<()> {
        let buffer = self
            .buffers
            .get_mut(output)
            .ok_or_else(|| RuntimeError::Output {
                output,
                message: "no buffer".into(),
            })?;
        let provided = buffer.data.len();
        let dst = buffer
            .data
            .get_mut(..bytes.len())
            .ok_or(RuntimeError::OutputTooSmall {
                output,
                needed: bytes.len(),
                provided,
            })?;
        dst.copy_from_slice(bytes);
        Ok(())
    }
}

#[derive(Default)]
pub(crate) struct OwnedSink {
    pub(crate) outputs: Vec<Vec<u8>>,
}

impl Sink for OwnedSink {
    fn check(&mut self, _shapes: &[Vec<usize>], sizes: &[usize]) -> Result<()> {
        self.outputs = sizes.iter().map(|_| Vec::new()).collect();
        Ok(())
    }

    fn write(&mut self, output: usize, bytes: &[u8]) -> Result<()> {
        let slot = self
            .outputs
            .get_mut(output)
            .ok_or_else(|| RuntimeError::Output {
                output,
                message: "no slot".into(),
            })?;
        *slot = bytes.to_vec();
        Ok(())
    }
}

/// Receives a subgraph's outputs for its IF or WHILE: buffers of the subgraph are kept
/// as they are, and what must be copied (an output of a static program, which lives in
/// its arena) holds its bytes in the execution's budget.
pub(crate) struct ValueSink {
    budget: Arc<Budget>,
    /// Whether outputs of a static program stay in its arena ([`Sink::place`]).
    placing: bool,
    pub(crate) outputs: Vec<Option<Placed>>,
}

/// Where a subgraph's output is: a buffer of its own, or a range of the arena of the
/// state the subgraph ran in.
pub(crate) enum Placed {
    Held(Held),
    InArena(Range<usize>),
}

impl ValueSink {
    pub(crate) fn new(budget: &Arc<Budget>, placing: bool) -> ValueSink {
        ValueSink {
            budget: Arc::clone(budget),
            placing,
            outputs: Vec::new(),
        }
    }

    fn slot(&mut self, output: usize) -> Result<&mut Option<Placed>> {
        self.outputs
            .get_mut(output)
            .ok_or_else(|| RuntimeError::Output {
                output,
                message: "no slot".into(),
            })
    }
}

impl Sink for ValueSink {
    fn check(&mut self, _shapes: &[Vec<usize>], sizes: &[usize]) -> Result<()> {
        self.outputs = sizes.iter().map(|_| None).collect();
        Ok(())
    }

    fn write(&mut self, output: usize, bytes: &[u8]) -> Result<()> {
        let held = Held::copy_of(&self.budget, bytes, || format!("subgraph output {output}"))?;
        *self.slot(output)? = Some(Placed::Held(held));
        Ok(())
    }

    fn take(&mut self, output: usize, buffer: Held) -> Result<()> {
        *self.slot(output)? = Some(Placed::Held(buffer));
        Ok(())
    }

    fn place(&mut self, output: usize, range: Range<usize>) -> Result<bool> {
        if self.placing {
            *self.slot(output)? = Some(Placed::InArena(range));
        }
        Ok(self.placing)
    }
}

/// An input's bytes, borrowed when suitably aligned, copied otherwise.
pub(crate) enum InputData<'a> {
    Borrowed(&'a [u8]),
    Owned(AlignedBuf),
}

impl InputData<'_> {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            InputData::Borrowed(b) => b,
            InputData::Owned(b) => b.as_bytes(),
        }
    }
}
