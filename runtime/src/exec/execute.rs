//! Executing a [`Program`].
//!
//! Synchronous, and `&self`: several threads may execute one program at once; each
//! execution takes its own arena and scratch from a small pool behind a mutex.
//!
//! Static programs (every shape known at preparation) run in the planned arena and check
//! the caller's output buffers before computing anything. Dynamic programs compute each
//! operation's output shapes right before running it, with ops::infer fed the
//! actual shapes and values, allocate per-operand buffers (freed after their last use),
//! and check the output buffers after computing but before writing any of them.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nnc_formats::nn::model::dims_compatible;
use nnc_formats::nn::ops::{self, InputView};
use nnc_formats::nn::{Lifetime, Operand, OperandType, OperationType};
use nnc_formats::tensor::{DataType, HostTensor, HostTensorRef};

use super::control_flow::{Arg, Flow};
use super::held::Held;
use super::io::{
    CallerSink, ExecuteOptions, ExecutionResult, InputData, InputTensor, OutputBuffer, OwnedSink,
    Sink,
};
use super::profile::OpClock;
use super::program::{ExecState, Program, Storage};
use crate::buffer::AlignedBuf;
use crate::error::{Result, RuntimeError};
use crate::kernels::{KernelContext, PreparedWeights};
use crate::tensor::{TensorMut, TensorRef, byte_size};

/// Keeps the pool's other workers taking work for the whole of an execution: each runs
/// a job that steals whatever the operations split off (`rayon::yield_now`) and spins
/// when there is none, until the execution ends (this guard drops). Left to themselves,
/// rayon's workers fall asleep during the operations that run on one thread (a
/// concatenation, a transpose) and the next split waits for a wake-up: on two threads
/// that cost SqueezeNet about a tenth of its time. The price is a core kept busy while
/// an execution runs, as ONNX Runtime's spinning pool does.
struct KeepAwake {
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl KeepAwake {
    /// Starts `helpers` spinning jobs on the current rayon pool.
    fn start(helpers: usize) -> KeepAwake {
        use std::sync::atomic::{AtomicBool, Ordering};
        let done = Arc::new(AtomicBool::new(false));
        for _ in 0..helpers {
            let done = Arc::clone(&done);
            rayon::spawn(move || {
                while !done.load(Ordering::Acquire) {
                    if rayon::yield_now() != Some(rayon::Yield::Executed) {
                        std::hint::spin_loop();
                    }
                }
            });
        }
        KeepAwake { done }
    }
}

impl Drop for KeepAwake {
    fn drop(&mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Release);
    }
}

fn empty_weights() -> Arc<PreparedWeights> {
    static EMPTY: OnceLock<Arc<PreparedWeights>> = OnceLock::new();
    Arc::clone(EMPTY.get_or_init(|| Arc::new(PreparedWeights::empty())))
}

/// Shared read regions and exclusive write regions of the arena.
type Regions<'a> = (Vec<&'a [u8]>, Vec<&'a mut [u8]>);

/// Splits `arena` into the read regions (shared) and write regions (exclusive) one
/// operation uses. Regions are (offset, length); identical read regions are shared; any
/// other overlap is a planner bug and an error.
fn split_regions<'a>(
    arena: &'a mut [u8],
    reads: &[(usize, usize)],
    writes: &[(usize, usize)],
) -> Result<Regions<'a>> {
    // (offset, length, is_write, index)
    let mut regions: Vec<(usize, usize, bool, usize)> =
        Vec::with_capacity(reads.len() + writes.len());
    regions.extend(
        reads
            .iter()
            .enumerate()
            .map(|(i, &(o, l))| (o, l, false, i)),
    );
    regions.extend(
        writes
            .iter()
            .enumerate()
            .map(|(i, &(o, l))| (o, l, true, i)),
    );
    regions.sort_unstable();
    let mut read_out: Vec<Option<&'a [u8]>> = vec![None; reads.len()];
    let mut write_out: Vec<Option<&'a mut [u8]>> = (0..writes.len()).map(|_| None).collect();
    let mut rest: &'a mut [u8] = arena;
    let mut pos = 0usize;
    let mut last_read: Option<(usize, usize, &'a [u8])> = None;
    for (offset, len, is_write, index) in regions {
        if !is_write
            && let Some((o, l, piece)) = last_read
            && o == offset
            && l == len
        {
            read_out[index] = Some(piece);
            continue;
        }
        let skip = offset.checked_sub(pos).ok_or_else(|| {
            RuntimeError::Internal(format!("arena regions overlap at offset {offset}"))
        })?;
        let tail = std::mem::take(&mut rest);
        if skip.checked_add(len).is_none_or(|end| end > tail.len()) {
            return Err(RuntimeError::Internal(format!(
                "arena region {offset}+{len} is out of range"
            )));
        }
        let (_, tail) = tail.split_at_mut(skip);
        let (piece, tail) = tail.split_at_mut(len);
        rest = tail;
        pos = offset + len;
        if is_write {
            write_out[index] = Some(piece);
            last_read = None;
        } else {
            let piece: &'a [u8] = piece;
            read_out[index] = Some(piece);
            last_read = Some((offset, len, piece));
        }
    }
    let missing = || RuntimeError::Internal("arena region missing".into());
    Ok((
        read_out
            .into_iter()
            .map(|r| r.ok_or_else(missing))
            .collect::<Result<_>>()?,
        write_out
            .into_iter()
            .map(|w| w.ok_or_else(missing))
            .collect::<Result<_>>()?,
    ))
}

impl Program {
    /// Executes the program: `inputs` in model-input order, one buffer per model output.
    pub fn execute(
        &self,
        inputs: &[InputTensor],
        outputs: &mut [OutputBuffer],
    ) -> Result<ExecutionResult> {
        self.execute_with(inputs, outputs, &ExecuteOptions::default())
    }

    /// [`Program::execute`] with options (timing).
    pub fn execute_with(
        &self,
        inputs: &[InputTensor],
        outputs: &mut [OutputBuffer],
        options: &ExecuteOptions,
    ) -> Result<ExecutionResult> {
        if outputs.len() != self.output_count() {
            return Err(RuntimeError::Count {
                what: "output buffers",
                expected: self.output_count(),
                actual: outputs.len(),
            });
        }
        let start = options.measure_timing.then(Instant::now);
        let mut sink = CallerSink { buffers: outputs };
        let shapes = self.run(inputs, &mut sink, options)?;
        let output_sizes = self.output_sizes(&shapes)?;
        Ok(ExecutionResult {
            output_shapes: shapes,
            output_sizes,
            duration: start.map(|s| s.elapsed()),
        })
    }

    /// Executes with host tensors in and out. Element types map TENSOR_FLOAT32 <-> F32,
    /// TENSOR_INT32 <-> I32, TENSOR_BOOL8 <-> Bool, TENSOR_QUANT8_ASYMM <-> U8,
    /// TENSOR_QUANT8_ASYMM_SIGNED <-> I8. Where the source model declared an int64 value
    /// computed as TENSOR_INT32, I64 is converted at the boundary (an input value outside
    /// the int32 range is an error), and a source-level rank-0 value is accepted and
    /// returned as such.
    pub fn execute_host(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.execute_host_timed(inputs).map(|(outputs, _)| outputs)
    }

    /// [`Program::execute_host`], also returning the time spent running operations
    /// (excluding the conversion of inputs and outputs).
    pub fn execute_host_timed(&self, inputs: &[HostTensor]) -> Result<(Vec<HostTensor>, Duration)> {
        self.execute_host_with(inputs, &ExecuteOptions::default())
    }

    /// [`Program::execute_host_timed`] with options (the loop timeout).
    pub fn execute_host_with(
        &self,
        inputs: &[HostTensor],
        options: &ExecuteOptions,
    ) -> Result<(Vec<HostTensor>, Duration)> {
        let views: Vec<HostTensorRef> = inputs.iter().map(HostTensor::view).collect();
        self.execute_host_in(&views, options, None)
    }

    /// [`Program::execute_host_with`] on borrowed inputs (an application's arrays, read
    /// where they lie when they need no conversion).
    pub fn execute_host_views_with(
        &self,
        inputs: &[HostTensorRef],
        options: &ExecuteOptions,
    ) -> Result<(Vec<HostTensor>, Duration)> {
        self.execute_host_in(inputs, options, None)
    }

    /// [`Program::execute_host_with`] on a caller-held execution state when one is given
    /// (a burst's).
    pub(crate) fn execute_host_in(
        &self,
        inputs: &[HostTensorRef],
        options: &ExecuteOptions,
        state: Option<&mut ExecState>,
    ) -> Result<(Vec<HostTensor>, Duration)> {
        if inputs.len() != self.input_count() {
            return Err(RuntimeError::Count {
                what: "inputs",
                expected: self.input_count(),
                actual: inputs.len(),
            });
        }
        // Inputs already of the operand's type are read where they lie (a copy of a
        // 600 KB image per execution, into freshly faulted pages, was 2% of MobileNetV2).
        let mut converted: Vec<(Vec<usize>, Cow<[u8]>)> = Vec::with_capacity(inputs.len());
        for (k, t) in inputs.iter().enumerate() {
            converted.push(self.host_input_view(k, *t)?);
        }
        let views: Vec<InputTensor> = converted
            .iter()
            .map(|(s, d)| InputTensor::with_shape(s, d))
            .collect();
        let mut sink = OwnedSink::default();
        let start = Instant::now();
        let shapes = self.run_reserved(&views, &mut sink, options, state)?;
        let device = start.elapsed();
        let mut result = Vec::with_capacity(shapes.len());
        for (k, (shape, bytes)) in shapes.into_iter().zip(sink.outputs).enumerate() {
            result.push(self.host_output(k, shape, bytes)?);
        }
        Ok((result, device))
    }

    /// Input `k` as the model's input operand takes it (shape and bytes of its NN
    /// operand type), converted from the source model's element type as
    /// [`Program::execute_host`] converts it: for binding memory objects, which hold NN
    /// operand values.
    pub fn host_input(&self, k: usize, t: &HostTensor) -> Result<(Vec<usize>, Vec<u8>)> {
        self.host_input_view(k, t.view())
            .map(|(shape, data)| (shape, data.into_owned()))
    }

    /// [`Program::host_input`], borrowing the data when it needs no conversion.
    fn host_input_view<'t>(
        &self,
        k: usize,
        t: HostTensorRef<'t>,
    ) -> Result<(Vec<usize>, Cow<'t, [u8]>)> {
        let err = |message: String| RuntimeError::Input { input: k, message };
        let operand = self
            .input_operand(k)
            .ok_or_else(|| err("no such input".into()))?;
        let info_dtype = self.model.input_info.get(k).map(|i| i.dtype);
        let expected = host_type(operand.operand_type).ok_or_else(|| {
            err(format!(
                "inputs of type {} are not supported",
                operand.operand_type
            ))
        })?;
        let narrow = info_dtype.filter(|d| d.is_narrow());
        let data = if let Some(declared) = narrow {
            // Bfloat16, float8 and the sub-byte integers compute in a wider type.
            Cow::Owned(super::narrow::input(declared, t).map_err(err)?)
        } else if t.dtype == expected {
            Cow::Borrowed(t.data)
        } else if expected == DataType::I32
            && info_dtype == Some(t.dtype)
            && WIDENED_INTEGERS.contains(&t.dtype)
        {
            // An integer type the model computes as int32: every value must fit.
            let mut out = Vec::with_capacity(t.element_count() * 4);
            for v in integers(t.dtype, t.data) {
                let v = i32::try_from(v).map_err(|_| {
                    err(format!(
                        "value {v} does not fit the int32 the model computes in"
                    ))
                })?;
                out.extend_from_slice(&v.to_le_bytes());
            }
            Cow::Owned(out)
        } else if t.dtype == DataType::F64
            && expected == DataType::F32
            && info_dtype == Some(DataType::F64)
        {
            // The model computes this float64 input in float32 (rounded to nearest); a
            // finite value beyond float32's range is refused rather than made infinite.
            let mut out = Vec::with_capacity(t.data.len() / 2);
            for c in t.data.chunks_exact(8) {
                let v = f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
                let narrowed = v as f32;
                if v.is_finite() && !narrowed.is_finite() {
                    return Err(err(format!(
                        "value {v:e} does not fit the float32 the model computes in"
                    )));
                }
                out.extend_from_slice(&narrowed.to_le_bytes());
            }
            Cow::Owned(out)
        } else {
            return Err(err(format!("expected {expected} data, got {}", t.dtype)));
        };
        // A source-level rank-0 value is a one-element tensor in the model.
        let mut shape = t.shape.to_vec();
        let declared = &operand.dimensions;
        if shape.is_empty() && !declared.is_empty() && declared.iter().all(|&d| d == 1 || d == 0) {
            shape = vec![1; declared.len()];
        }
        Ok((shape, data))
    }

    fn host_output(&self, k: usize, shape: Vec<usize>, bytes: Vec<u8>) -> Result<HostTensor> {
        let err = |message: String| RuntimeError::Output { output: k, message };
        let operand = self
            .output_operand(k)
            .ok_or_else(|| err("no such output".into()))?;
        let info = self.model.output_info.get(k);
        let dtype = host_type(operand.operand_type).ok_or_else(|| {
            err(format!(
                "outputs of type {} are not supported",
                operand.operand_type
            ))
        })?;
        let widened = info
            .map(|i| i.dtype)
            .filter(|t| dtype == DataType::I32 && WIDENED_INTEGERS.contains(t));
        let narrow = info.map(|i| i.dtype).filter(|d| d.is_narrow());
        let (dtype, data) = if let Some(declared) = narrow {
            (
                declared,
                super::narrow::output(declared, dtype, &bytes).map_err(err)?,
            )
        } else if let Some(target) = widened {
            let mut out = Vec::with_capacity(bytes.len() / 4 * target.size());
            for c in bytes.chunks_exact(4) {
                let v = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                push_integer(target, i64::from(v), &mut out).map_err(|()| {
                    err(format!("value {v} does not fit the output's type {target}"))
                })?;
            }
            (target, out)
        } else if dtype == DataType::F32 && info.is_some_and(|i| i.dtype == DataType::F64) {
            let mut out = Vec::with_capacity(bytes.len() * 2);
            for c in bytes.chunks_exact(4) {
                out.extend_from_slice(
                    &f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes(),
                );
            }
            (DataType::F64, out)
        } else {
            (dtype, bytes)
        };
        let rank0 = info.is_some_and(|i| i.dims.is_empty()) && shape.iter().all(|&d| d == 1);
        let shape = if rank0 || operand.operand_type.is_scalar() {
            Vec::new()
        } else {
            shape
        };
        HostTensor::new(dtype, shape, data).map_err(|e| err(e.to_string()))
    }

    fn output_sizes(&self, shapes: &[Vec<usize>]) -> Result<Vec<usize>> {
        shapes
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let t = self
                    .output_operand(k)
                    .map(|o| o.operand_type)
                    .unwrap_or(OperandType::TensorFloat32);
                byte_size(t, s).ok_or_else(|| RuntimeError::Output {
                    output: k,
                    message: "size overflows".into(),
                })
            })
            .collect()
    }

    /// Checks one input and returns its actual shape.
    fn input_shape(&self, k: usize, input: &InputTensor) -> Result<Vec<usize>> {
        let err = |message: String| RuntimeError::Input { input: k, message };
        let operand = self
            .input_operand(k)
            .ok_or_else(|| err("no such input".into()))?;
        let declared = &operand.dimensions;
        let shape: Vec<usize> = match input.shape {
            Some(s) => s.to_vec(),
            None if operand.is_fully_specified() => declared.iter().map(|&d| d as usize).collect(),
            None => {
                return Err(err(format!(
                    "the model declares dimensions {} with unknown values: pass the input's shape",
                    nnc_formats::nn::model::dims_to_string(declared)
                )));
            }
        };
        if operand.operand_type.is_scalar() {
            if !shape.is_empty() {
                return Err(err(format!("a scalar has no dimensions, got {shape:?}")));
            }
        } else {
            if shape.is_empty() || shape.contains(&0) {
                return Err(err(format!(
                    "shape {shape:?} must have rank >= 1 and no zero dimension"
                )));
            }
            if !declared.is_empty() {
                let matches = declared.len() == shape.len()
                    && declared
                        .iter()
                        .zip(&shape)
                        .all(|(&d, &s)| d == 0 || d as usize == s);
                if !matches {
                    return Err(err(format!(
                        "shape {shape:?} does not match the declared {}",
                        nnc_formats::nn::model::dims_to_string(declared)
                    )));
                }
            }
        }
        let needed = byte_size(operand.operand_type, &shape).ok_or_else(|| {
            err(format!(
                "shape {shape:?} of {} has no byte size",
                operand.operand_type
            ))
        })?;
        if needed != input.data.len() {
            return Err(err(format!(
                "holds {} bytes, but {} {shape:?} needs {needed}",
                input.data.len(),
                operand.operand_type
            )));
        }
        Ok(shape)
    }

    pub(crate) fn run(
        &self,
        inputs: &[InputTensor],
        sink: &mut dyn Sink,
        options: &ExecuteOptions,
    ) -> Result<Vec<Vec<usize>>> {
        self.run_reserved(inputs, sink, options, None)
    }

    /// [`Program::run`] on a caller-held execution state when one is given (a burst
    /// keeps its own, so its executions never wait for the program's pool of states).
    pub(crate) fn run_reserved(
        &self,
        inputs: &[InputTensor],
        sink: &mut dyn Sink,
        options: &ExecuteOptions,
        state: Option<&mut ExecState>,
    ) -> Result<Vec<Vec<usize>>> {
        let timeout = super::control_flow::check_loop_timeout(options.loop_timeout)?;
        let flow = Flow::new(&self.referenced, timeout, options.deadline, &self.limits);
        match state {
            Some(state) => {
                let result = self.run_flow_in(inputs, sink, &flow, Some(&mut *state));
                // The arena stays with the caller's state; the bytes it held in this
                // execution's budget do not.
                state.reservation = None;
                result
            }
            None => self.run_flow_in(inputs, sink, &flow, None),
        }
    }

    /// Runs the program within an execution's control flow (the top-level program, or a
    /// referenced subgraph's run by an IF or WHILE), in `reserved` when given, otherwise
    /// in a state from the program's pool.
    pub(super) fn run_flow_in(
        &self,
        inputs: &[InputTensor],
        sink: &mut dyn Sink,
        flow: &Flow,
        reserved: Option<&mut ExecState>,
    ) -> Result<Vec<Vec<usize>>> {
        if inputs.len() != self.input_count() {
            return Err(RuntimeError::Count {
                what: "inputs",
                expected: self.input_count(),
                actual: inputs.len(),
            });
        }
        let mut shapes = Vec::with_capacity(inputs.len());
        let mut data = Vec::with_capacity(inputs.len());
        for (k, input) in inputs.iter().enumerate() {
            shapes.push(self.input_shape(k, input)?);
            // Kernels view data as f32/i32 in place: copy inputs that are not aligned.
            data.push(if (input.data.as_ptr() as usize).is_multiple_of(8) {
                InputData::Borrowed(input.data)
            } else {
                InputData::Owned(AlignedBuf::from_bytes(input.data)?)
            });
        }
        let mut pooled = None;
        let state = match reserved {
            Some(state) => state,
            None => pooled.insert(self.take_state()),
        };
        let result = match &self.pool {
            Some(pool) => pool.install(|| {
                let _awake = KeepAwake::start(pool.current_num_threads().saturating_sub(1));
                self.run_graph(&shapes, &data, state, sink, flow)
            }),
            None => self.run_graph(&shapes, &data, state, sink, flow),
        };
        if let Some(mut state) = pooled {
            state.reservation = None;
            self.return_state(state);
        }
        result
    }

    fn run_graph(
        &self,
        in_shapes: &[Vec<usize>],
        in_data: &[InputData],
        state: &mut ExecState,
        sink: &mut dyn Sink,
        flow: &Flow,
    ) -> Result<Vec<Vec<usize>>> {
        if self.plan.is_some() {
            self.run_static(in_shapes, in_data, state, sink, flow)
        } else {
            self.run_dynamic(in_shapes, in_data, state, sink, flow)
        }
    }

    fn weights_for(&self, i: usize) -> Result<Arc<PreparedWeights>> {
        if !self.has_weights.get(i).copied().unwrap_or(false) {
            return Ok(empty_weights());
        }
        let kernel = self
            .kernels
            .get(i)
            .ok_or_else(|| RuntimeError::Internal(format!("no kernel {i}")))?;
        self.weights
            .weights(self.op_base + i, kernel.as_ref())
            .map_err(|e| match e {
                // A weight field that fails authentication (or was truncated) when read
                // again keeps its integrity classification (the CLI's exit 3), and a
                // limit its limit (exit 4).
                RuntimeError::Weights { .. } | RuntimeError::Load(_) | RuntimeError::Limit(_) => e,
                other => RuntimeError::Weights {
                    operation: self.op_ref(i),
                    message: other.to_string(),
                },
            })
    }

    fn tensor_ref<'a>(
        &self,
        operand: &Operand,
        shape: &'a [usize],
        bytes: &'a [u8],
    ) -> TensorRef<'a> {
        TensorRef {
            operand_type: operand.operand_type,
            shape,
            bytes,
            scale: operand.scale,
            zero_point: operand.zero_point,
        }
    }

    fn run_static(
        &self,
        in_shapes: &[Vec<usize>],
        in_data: &[InputData],
        state: &mut ExecState,
        sink: &mut dyn Sink,
        flow: &Flow,
    ) -> Result<Vec<Vec<usize>>> {
        let plan = self
            .plan
            .as_ref()
            .ok_or_else(|| RuntimeError::Internal("no static plan".into()))?;
        let operands = &self.model.main.operands;
        let missing_shape =
            |o: u32| RuntimeError::Internal(format!("operand {o} has no static shape"));
        let shape_of = |o: u32| -> Result<&[usize]> {
            self.static_shapes
                .get(o as usize)
                .and_then(|s| s.as_deref())
                .ok_or_else(|| missing_shape(o))
        };
        let out_shapes: Vec<Vec<usize>> = self
            .model
            .main
            .outputs
            .iter()
            .map(|&o| shape_of(o).map(<[usize]>::to_vec))
            .collect::<Result<_>>()?;
        let out_sizes = self.output_sizes(&out_shapes)?;
        // Before computing anything: every output must fit its buffer.
        sink.check(&out_shapes, &out_sizes)?;

        let ExecState {
            arena,
            scratch,
            op_times,
            reservation,
        } = state;
        let mut clock = OpClock::new(op_times.as_mut());
        // The arena holds its bytes in the budget while the execution (or the loop that
        // keeps this state) uses it.
        *reservation = None;
        *reservation = Some(
            flow.budget
                .reserve(|| self.describe_arena(), Some(plan.arena.arena_size as u64))?,
        );
        arena.ensure_len(plan.arena.arena_size)?;
        let region = |o: u32| -> Result<(usize, usize)> {
            let offset = plan
                .offsets
                .get(o as usize)
                .copied()
                .flatten()
                .ok_or_else(|| {
                    RuntimeError::Internal(format!("operand {o} has no arena offset"))
                })?;
            Ok((offset, plan.sizes[o as usize]))
        };
        // Outputs written as slices of a concatenation's output (`super::in_place`).
        let row_stride = |o: u32| plan.row_strides.get(o as usize).copied().flatten();
        let ops = &self.model.main.operations;
        // The second operation of a pair that just ran fused.
        let mut done = usize::MAX;
        for (i, op) in ops.iter().enumerate() {
            if plan.skip[i] || i == done {
                continue;
            }
            clock.start(i);
            flow.check_deadline(|| self.op_ref(i))?;
            let weights = self.weights_for(i)?;
            // Which operations' inputs this step reads: its own, and with a fused pair
            // the second's (whose input 0, the first's output, is never written).
            let pair = self.fused.get(i).and_then(Option::as_ref);
            let tail = match pair {
                Some(_) => Some((&ops[i + 1], self.weights_for(i + 1)?)),
                None => None,
            };
            let writes_of = tail.as_ref().map_or(op, |(t, _)| *t);
            let mut reads = Vec::new();
            let mut read_slot = vec![usize::MAX; op.inputs.len()];
            let mut tail_slot = vec![usize::MAX; tail.as_ref().map_or(0, |(t, _)| t.inputs.len())];
            for (pos, &o) in op.inputs.iter().enumerate() {
                if self.storage[o as usize] == Storage::Computed {
                    read_slot[pos] = reads.len();
                    reads.push(region(o)?);
                }
            }
            if let Some((t, _)) = &tail {
                // The head's output is never written: the tail does not read it.
                for (pos, &o) in t.inputs.iter().enumerate() {
                    if op.outputs.contains(&o) {
                        continue;
                    }
                    if self.storage[o as usize] == Storage::Computed {
                        tail_slot[pos] = reads.len();
                        reads.push(region(o)?);
                    }
                }
            }
            let writes: Vec<(usize, usize)> = writes_of
                .outputs
                .iter()
                .map(|&o| region(o))
                .collect::<Result<_>>()?;
            let (read_slices, write_slices) = split_regions(arena.as_bytes_mut(), &reads, &writes)?;
            // Input `pos` (operand `o`) of the step's first operation, or of the fused
            // pair's second.
            let input_of = |o: u32, pos: usize, of_tail: bool| {
                let (weights, slot) = match &tail {
                    Some((_, tail_weights)) if of_tail => (tail_weights, &tail_slot),
                    _ => (&weights, &read_slot),
                };
                let operand = &operands[o as usize];
                Ok(match self.storage[o as usize] {
                    Storage::Input(k) => {
                        Some(self.tensor_ref(operand, &in_shapes[k], in_data[k].bytes()))
                    }
                    Storage::Constant => {
                        let bytes = self.constants[o as usize]
                            .as_ref()
                            .map(AlignedBuf::as_bytes)
                            .unwrap_or(&[]);
                        Some(self.tensor_ref(operand, shape_of(o)?, bytes))
                    }
                    Storage::Weight => match weights.input_view(pos) {
                        Some(bytes) => Some(self.tensor_ref(operand, shape_of(o)?, bytes)),
                        None => None,
                    },
                    Storage::Computed if slot[pos] != usize::MAX => {
                        Some(self.tensor_ref(operand, shape_of(o)?, read_slices[slot[pos]]))
                    }
                    Storage::Computed | Storage::NoValue | Storage::Unused => None,
                })
            };
            let inputs_of = |operation: &nnc_formats::nn::Operation, of_tail: bool| {
                let inputs = operation.inputs.iter().enumerate();
                inputs
                    .map(|(pos, &o)| input_of(o, pos, of_tail))
                    .collect::<Result<Vec<_>>>()
            };
            let inputs = inputs_of(op, false)?;
            if let (Some(pair), Some((t, _))) = (pair, &tail) {
                let tail_inputs = inputs_of(t, true)?;
                let (&out, bytes) = t
                    .outputs
                    .first()
                    .zip(write_slices.into_iter().next())
                    .ok_or_else(|| RuntimeError::Internal("fused pair without output".into()))?;
                let operand = &operands[out as usize];
                let mut output = TensorMut {
                    operand_type: operand.operand_type,
                    shape: shape_of(out)?,
                    bytes,
                    scale: operand.scale,
                    zero_point: operand.zero_point,
                    row_stride: row_stride(out),
                };
                pair.run(
                    &inputs,
                    &weights,
                    shape_of(op.outputs[0])?,
                    &tail_inputs,
                    &mut output,
                    self.threads,
                )
                .map_err(|e| e.locate(i, op))?;
                done = i + 1;
                continue;
            }
            let mut outputs = Vec::with_capacity(op.outputs.len());
            for (&o, bytes) in op.outputs.iter().zip(write_slices) {
                let operand = &operands[o as usize];
                outputs.push(TensorMut {
                    operand_type: operand.operand_type,
                    shape: shape_of(o)?,
                    bytes,
                    scale: operand.scale,
                    zero_point: operand.zero_point,
                    row_stride: row_stride(o),
                });
            }
            let mut ctx = KernelContext {
                inputs,
                outputs,
                weights: &weights,
                scratch,
                threads: self.threads,
            };
            self.kernels[i].run(&mut ctx).map_err(|e| e.locate(i, op))?;
        }
        clock.stop();
        let bytes = arena.as_bytes();
        for (k, &o) in self.model.main.outputs.iter().enumerate() {
            let (offset, len) = region(o)?;
            if sink.place(k, offset..offset + len)? {
                continue;
            }
            let src = bytes
                .get(offset..offset + len)
                .ok_or_else(|| RuntimeError::Internal("output region out of range".into()))?;
            sink.write(k, src)?;
        }
        Ok(out_shapes)
    }

    fn run_dynamic(
        &self,
        in_shapes: &[Vec<usize>],
        in_data: &[InputData],
        state: &mut ExecState,
        sink: &mut dyn Sink,
        flow: &Flow,
    ) -> Result<Vec<Vec<usize>>> {
        let operands = &self.model.main.operands;
        let n = operands.len();
        let mut shapes: Vec<Option<Vec<usize>>> = self.static_shapes.clone();
        for (k, &o) in self.model.main.inputs.iter().enumerate() {
            shapes[o as usize] = Some(in_shapes[k].clone());
        }
        // Every computed value's buffer, holding its bytes in the execution's budget.
        let mut buffers: Vec<Option<Held>> = (0..n).map(|_| None).collect();
        let scratch = &mut state.scratch;
        let mut clock = OpClock::new(state.op_times.as_mut());
        for (i, op) in self.model.main.operations.iter().enumerate() {
            clock.start(i);
            flow.check_deadline(|| self.op_ref(i))?;
            // A WHILE takes over the buffers it is the last to read (once each): the loop
            // frees them when its first iteration replaces them, instead of holding them
            // here until it ends.
            let mut given: Vec<Option<Held>> = Vec::new();
            if op.op_type == OperationType::While {
                let mut sorted = op.inputs.clone();
                sorted.sort_unstable();
                for &o in &op.inputs {
                    let once = sorted.partition_point(|&x| x <= o)
                        - sorted.partition_point(|&x| x < o)
                        == 1;
                    given.push(
                        if once
                            && self.storage[o as usize] == Storage::Computed
                            && self.last_use[o as usize] == i
                        {
                            buffers[o as usize].take()
                        } else {
                            None
                        },
                    );
                }
            }
            let weights = self.weights_for(i)?;
            let located = |message: String| RuntimeError::Operation {
                operation: self.op_ref(i),
                message,
            };
            // Input values as they are now, for shape inference and for the kernel.
            let value = |pos: usize, o: u32| -> Option<&[u8]> {
                match self.storage[o as usize] {
                    Storage::Input(k) => Some(in_data[k].bytes()),
                    Storage::Constant => self.constants[o as usize]
                        .as_ref()
                        .map(AlignedBuf::as_bytes),
                    Storage::Weight => weights.input_view(pos),
                    Storage::Computed => buffers[o as usize].as_ref().map(Held::as_bytes),
                    Storage::NoValue | Storage::Unused => None,
                }
            };
            if op.op_type.is_control_flow() {
                let mut args: Vec<Arg> = Vec::with_capacity(op.inputs.len());
                for (pos, &o) in op.inputs.iter().enumerate() {
                    let shape = shapes[o as usize].as_deref();
                    if let (Some(held), Some(shape)) =
                        (given.get_mut(pos).and_then(Option::take), shape)
                    {
                        args.push(Arg::Owned((shape.to_vec(), held)));
                        continue;
                    }
                    let is_subgraph = operands[o as usize].lifetime == Lifetime::Subgraph;
                    args.push(match (value(pos, o), shape) {
                        (Some(bytes), Some(shape)) => Arg::Borrowed(shape, bytes),
                        _ if is_subgraph => Arg::Borrowed(&[], &[]),
                        _ => return Err(located(format!("input {pos} has no value"))),
                    });
                }
                let results = self.run_control_flow(flow, i, op, args)?;
                if results.len() != op.outputs.len() {
                    return Err(located(format!(
                        "produced {} values for {} outputs",
                        results.len(),
                        op.outputs.len()
                    )));
                }
                for (k, (&o, (shape, buf))) in op.outputs.iter().zip(results).enumerate() {
                    let operand = &operands[o as usize];
                    let dims: Vec<u32> = shape
                        .iter()
                        .map(|&d| u32::try_from(d).unwrap_or(0))
                        .collect();
                    if !dims_compatible(&operand.dimensions, &dims) || dims.contains(&0) {
                        return Err(located(format!(
                            "output {k} has shape {shape:?}, but the operation declares {}",
                            nnc_formats::nn::model::dims_to_string(&operand.dimensions)
                        )));
                    }
                    self.limits.check(
                        nnc_formats::limits::LimitKind::Tensor,
                        || format!("output {k} of {}", op.op_type.name()),
                        Some(buf.as_bytes().len() as u64),
                    )?;
                    shapes[o as usize] = Some(shape);
                    buffers[o as usize] = Some(buf);
                }
                for &o in &op.inputs {
                    if self.storage[o as usize] == Storage::Computed
                        && self.last_use[o as usize] == i
                    {
                        buffers[o as usize] = None;
                    }
                }
                continue;
            }
            // Output shapes from the actual input shapes and values.
            let actual: Vec<Operand> = op
                .inputs
                .iter()
                .map(|&o| {
                    let mut operand = operands[o as usize].clone();
                    if let Some(s) = &shapes[o as usize] {
                        operand.dimensions =
                            s.iter().map(|&d| u32::try_from(d).unwrap_or(0)).collect();
                    }
                    operand
                })
                .collect();
            let views: Vec<InputView> = actual
                .iter()
                .zip(&op.inputs)
                .enumerate()
                .map(|(pos, (operand, &o))| InputView {
                    operand,
                    value: value(pos, o),
                })
                .collect();
            let declared: Vec<&Operand> =
                op.outputs.iter().map(|&o| &operands[o as usize]).collect();
            let inferred =
                ops::infer(op.op_type, &views, &declared).map_err(|e| located(e.to_string()))?;
            let mut out_bufs = Vec::with_capacity(op.outputs.len());
            for (k, (&o, shape)) in op.outputs.iter().zip(&inferred).enumerate() {
                let operand = &operands[o as usize];
                let known = operand.operand_type.is_scalar()
                    || (!shape.dimensions.is_empty() && !shape.dimensions.contains(&0));
                if !known || !dims_compatible(&operand.dimensions, &shape.dimensions) {
                    return Err(located(format!(
                        "cannot determine output {k}'s shape (got {}, declared {})",
                        nnc_formats::nn::model::dims_to_string(&shape.dimensions),
                        nnc_formats::nn::model::dims_to_string(&operand.dimensions)
                    )));
                }
                let dims: Vec<usize> = shape.dimensions.iter().map(|&d| d as usize).collect();
                let size = byte_size(operand.operand_type, &dims)
                    .ok_or_else(|| located(format!("output {k} has no byte size")))?;
                self.limits.check(
                    nnc_formats::limits::LimitKind::Tensor,
                    || format!("output {k} of {}", op.op_type.name()),
                    Some(size as u64),
                )?;
                out_bufs.push(Held::zeroed(&flow.budget, size, || {
                    format!("output {k} of {}{}", self.op_ref(i), self.graph_suffix())
                })?);
                shapes[o as usize] = Some(dims);
            }
            drop(views);
            let mut inputs = Vec::with_capacity(op.inputs.len());
            for (pos, &o) in op.inputs.iter().enumerate() {
                let operand = &operands[o as usize];
                inputs.push(match (value(pos, o), shapes[o as usize].as_deref()) {
                    (Some(bytes), Some(shape)) => Some(self.tensor_ref(operand, shape, bytes)),
                    _ => None,
                });
            }
            let mut outputs = Vec::with_capacity(op.outputs.len());
            for (&o, buf) in op.outputs.iter().zip(out_bufs.iter_mut()) {
                let operand = &operands[o as usize];
                outputs.push(TensorMut {
                    operand_type: operand.operand_type,
                    shape: shapes[o as usize].as_deref().unwrap_or(&[]),
                    bytes: buf.as_bytes_mut(),
                    scale: operand.scale,
                    zero_point: operand.zero_point,
                    row_stride: None,
                });
            }
            let mut ctx = KernelContext {
                inputs,
                outputs,
                weights: &weights,
                scratch,
                threads: self.threads,
            };
            self.kernels[i].run(&mut ctx).map_err(|e| e.locate(i, op))?;
            drop(ctx);
            for (&o, buf) in op.outputs.iter().zip(out_bufs) {
                buffers[o as usize] = Some(buf);
            }
            for &o in &op.inputs {
                if self.storage[o as usize] == Storage::Computed && self.last_use[o as usize] == i {
                    buffers[o as usize] = None;
                }
            }
        }
        clock.stop();
        let outputs = &self.model.main.outputs;
        let mut out_shapes = Vec::with_capacity(self.output_count());
        for &o in outputs {
            out_shapes.push(shapes[o as usize].clone().ok_or_else(|| {
                RuntimeError::Internal(format!("output operand {o} was not computed"))
            })?);
        }
        let out_sizes = self.output_sizes(&out_shapes)?;
        sink.check(&out_shapes, &out_sizes)?;
        let not_computed =
            |o: u32| RuntimeError::Internal(format!("output operand {o} was not computed"));
        // Each operand's last position among the outputs (one pass, not a search of the
        // later outputs for every output).
        let mut last_output = vec![usize::MAX; n];
        for (k, &o) in outputs.iter().enumerate() {
            last_output[o as usize] = k;
        }
        for (k, &o) in outputs.iter().enumerate() {
            // An operand that is output again later is copied; otherwise its buffer is
            // given to the sink.
            if last_output[o as usize] != k {
                let bytes = buffers[o as usize]
                    .as_ref()
                    .ok_or_else(|| not_computed(o))?;
                sink.write(k, bytes.as_bytes())?;
            } else {
                let held = buffers[o as usize].take().ok_or_else(|| not_computed(o))?;
                sink.take(k, held)?;
            }
        }
        Ok(out_shapes)
    }
}

/// The host element type of an operand type.
/// The source integer types a model computes as int32 (their values are range-checked at
/// the model's inputs and outputs).
const WIDENED_INTEGERS: &[DataType] = &[
    DataType::I64,
    DataType::I16,
    DataType::U16,
    DataType::U32,
    DataType::U64,
];

/// The values of an integer tensor's little-endian bytes (i128 holds every one of them,
/// so a range error names the value as the file holds it).
fn integers(t: DataType, bytes: &[u8]) -> Vec<i128> {
    let size = t.size();
    bytes
        .chunks_exact(size)
        .map(|c| {
            let mut wide = [0u8; 8];
            wide[..size].copy_from_slice(c);
            match t {
                DataType::I16 => i128::from(i16::from_le_bytes([c[0], c[1]])),
                DataType::U16 => i128::from(u16::from_le_bytes([c[0], c[1]])),
                DataType::U32 => i128::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                DataType::U64 => i128::from(u64::from_le_bytes(wide)),
                _ => i128::from(i64::from_le_bytes(wide)),
            }
        })
        .collect()
}

/// Appends `v` as type `t`, or `Err` when it does not fit.
fn push_integer(t: DataType, v: i64, out: &mut Vec<u8>) -> std::result::Result<(), ()> {
    match t {
        DataType::I16 => out.extend_from_slice(&i16::try_from(v).map_err(|_| ())?.to_le_bytes()),
        DataType::U16 => out.extend_from_slice(&u16::try_from(v).map_err(|_| ())?.to_le_bytes()),
        DataType::U32 => out.extend_from_slice(&u32::try_from(v).map_err(|_| ())?.to_le_bytes()),
        DataType::U64 => out.extend_from_slice(&u64::try_from(v).map_err(|_| ())?.to_le_bytes()),
        _ => out.extend_from_slice(&v.to_le_bytes()),
    }
    Ok(())
}

pub fn host_type(t: OperandType) -> Option<DataType> {
    match t {
        OperandType::TensorFloat32 | OperandType::Float32 => Some(DataType::F32),
        OperandType::TensorInt32 | OperandType::Int32 => Some(DataType::I32),
        OperandType::TensorBool8 | OperandType::Bool => Some(DataType::Bool),
        OperandType::TensorQuant8Asymm => Some(DataType::U8),
        OperandType::TensorQuant8AsymmSigned => Some(DataType::I8),
        OperandType::TensorFloat16 | OperandType::Float16 => Some(DataType::F16),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_split_and_share() {
        let mut arena = vec![0u8; 256];
        let (r, mut w) =
            split_regions(&mut arena, &[(0, 64), (128, 64), (0, 64)], &[(64, 64)]).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].as_ptr(), r[2].as_ptr());
        w[0][0] = 1;
        assert!(split_regions(&mut arena, &[(0, 64)], &[(32, 64)]).is_err());
        assert!(split_regions(&mut arena, &[(0, 64)], &[(224, 64)]).is_err());
    }
}
