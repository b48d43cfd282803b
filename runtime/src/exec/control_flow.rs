//! IF and WHILE: operations that run referenced subgraphs.
//!
//! Every referenced subgraph is prepared once, as a [`Program`] of its own, held by the
//! top-level program (`Program::referenced`, graph `t` at `t - 1`). The executor runs an
//! IF or WHILE here instead of through a kernel: it runs the chosen subgraph's program
//! on the operation's input values and takes its outputs, whose shapes are known only
//! then (programs with control flow always compute shapes during execution). Programs
//! nest: a subgraph's program reaches the others through the execution's [`Flow`], so an
//! IF inside a WHILE body runs like one in `main`. The loop timeout is one deadline per
//! execution, checked before every iteration of every WHILE, however deeply nested.

use std::time::{Duration, Instant};

use nnc_formats::nn::{Lifetime, Operation, OperationType};

use super::execute::{InputTensor, OwnedSink};
use super::program::Program;
use crate::buffer::AlignedBuf;
use crate::error::{OpRef, Result, RuntimeError};
use crate::kernels::{Kernel, KernelContext};

/// The loop timeout when an execution sets none (NNAPI's default).
pub const DEFAULT_LOOP_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest loop timeout an execution may set (NNAPI's maximum).
pub const MAX_LOOP_TIMEOUT: Duration = Duration::from_secs(15);

/// The loop timeout an execution asked for (`None`: the default), checked against the
/// maximum.
pub fn check_loop_timeout(requested: Option<Duration>) -> Result<Duration> {
    let timeout = requested.unwrap_or(DEFAULT_LOOP_TIMEOUT);
    if timeout > MAX_LOOP_TIMEOUT {
        return Err(RuntimeError::LoopTimeoutTooLong {
            requested: timeout,
            max: MAX_LOOP_TIMEOUT,
        });
    }
    Ok(timeout)
}

/// What an execution's control flow needs: the referenced subgraphs' programs and the
/// loop deadline.
pub(crate) struct Flow<'a> {
    pub graphs: &'a [Program],
    pub deadline: Instant,
    pub timeout: Duration,
    /// The caller's deadline for the whole execution ([`ExecuteOptions::deadline`]).
    pub execution_deadline: Option<Instant>,
}

impl<'a> Flow<'a> {
    pub fn new(
        graphs: &'a [Program],
        timeout: Duration,
        execution_deadline: Option<Instant>,
    ) -> Flow<'a> {
        let now = Instant::now();
        Flow {
            graphs,
            deadline: now.checked_add(timeout).unwrap_or(now),
            timeout,
            execution_deadline,
        }
    }

    /// Fails once the execution's deadline has passed (checked before every operation,
    /// so a missed deadline stops the execution within one operation's time).
    pub fn check_deadline(&self, operation: impl FnOnce() -> OpRef) -> Result<()> {
        match self.execution_deadline {
            Some(deadline) if Instant::now() >= deadline => Err(RuntimeError::MissedDeadline {
                kind: crate::error::DeadlineKind::Transient,
                stage: crate::error::DeadlineStage::Execution,
                detail: format!("it passed before {} ran", operation()),
            }),
            _ => Ok(()),
        }
    }
}

/// The kernel slot of an IF or WHILE. The executor never runs it (it runs the
/// subgraphs); its only use is preparing the operation's weights (a constant passed to a
/// subgraph), which the default [`Kernel::prepare_weights`] presents as input tensors.
pub(crate) struct ControlFlowKernel;

impl Kernel for ControlFlowKernel {
    fn run(&self, _ctx: &mut KernelContext) -> Result<()> {
        Err(RuntimeError::Internal(
            "IF and WHILE run in the executor, not as kernels".into(),
        ))
    }
}

/// A value passed to or returned by a subgraph: its shape and bytes.
pub(crate) type Value = (Vec<usize>, AlignedBuf);

impl Program {
    /// Runs this (referenced subgraph's) program on `inputs`; returns its outputs.
    fn run_values(&self, flow: &Flow, inputs: &[(&[usize], &[u8])]) -> Result<Vec<Value>> {
        let views: Vec<InputTensor> = inputs
            .iter()
            .map(|(shape, data)| InputTensor::with_shape(shape, data))
            .collect();
        let mut sink = OwnedSink::default();
        let shapes = self.run_flow(&views, &mut sink, flow)?;
        shapes
            .into_iter()
            .zip(sink.outputs)
            .map(|(shape, bytes)| Ok((shape, AlignedBuf::from_bytes(&bytes)?)))
            .collect()
    }

    /// Runs IF or WHILE operation `i` (`op`) of this program on its input values (shape
    /// and bytes, in input order; SUBGRAPH inputs are ignored) and returns its outputs.
    pub(crate) fn run_control_flow(
        &self,
        flow: &Flow,
        i: usize,
        op: &Operation,
        inputs: &[(&[usize], &[u8])],
    ) -> Result<Vec<Value>> {
        let operands = &self.model.main.operands;
        let opref = || self.op_ref(i);
        let located = |message: String| RuntimeError::Operation {
            operation: opref(),
            message,
        };
        // The program of the subgraph input `k` refers to.
        let graph = |k: usize| -> Result<(usize, &Program)> {
            let operand = op
                .inputs
                .get(k)
                .and_then(|&o| operands.get(o as usize))
                .filter(|o| o.lifetime == Lifetime::Subgraph)
                .ok_or_else(|| located(format!("input {k} is not a subgraph")))?;
            let t = operand.location.offset as usize;
            let program = t
                .checked_sub(1)
                .and_then(|k| flow.graphs.get(k))
                .ok_or_else(|| located(format!("subgraph {t} was not prepared")))?;
            Ok((t, program))
        };
        let run = |t: usize, program: &Program, values: &[(&[usize], &[u8])]| {
            program.run_values(flow, values).map_err(|e| match e {
                // The deadline is the whole execution's: reported as it is.
                e @ (RuntimeError::LoopTimeout { .. } | RuntimeError::MissedDeadline { .. }) => e,
                e => RuntimeError::InSubgraph {
                    operation: opref(),
                    subgraph: t,
                    source: Box::new(e),
                },
            })
        };
        let truth = |what: &str, bytes: &[u8]| -> Result<bool> {
            match bytes {
                [b] => Ok(*b != 0),
                _ => Err(located(format!(
                    "the {what} holds {} values; it must hold exactly one",
                    bytes.len()
                ))),
            }
        };
        let values = inputs.get(
            if op.op_type == OperationType::If {
                3
            } else {
                2
            }..,
        );
        let values = values.ok_or_else(|| located("too few inputs".into()))?;
        match op.op_type {
            OperationType::If => {
                let (_, cond) = inputs
                    .first()
                    .ok_or_else(|| located("no condition".into()))?;
                let branch = if truth("condition", cond)? { 1 } else { 2 };
                let (t, program) = graph(branch)?;
                run(t, program, values)
            }
            OperationType::While => {
                let (cond_t, cond) = graph(0)?;
                let (body_t, body) = graph(1)?;
                let m = op.outputs.len();
                let mut state: Vec<Value> = values
                    .iter()
                    .map(|(shape, data)| Ok((shape.to_vec(), AlignedBuf::from_bytes(data)?)))
                    .collect::<Result<_>>()?;
                loop {
                    if Instant::now() >= flow.deadline {
                        return Err(RuntimeError::LoopTimeout {
                            operation: opref(),
                            timeout: flow.timeout,
                        });
                    }
                    let views: Vec<(&[usize], &[u8])> = state
                        .iter()
                        .map(|(s, b)| (s.as_slice(), b.as_bytes()))
                        .collect();
                    let c = run(cond_t, cond, &views)?;
                    let go = match c.first() {
                        Some((_, b)) => truth("condition subgraph's output", b.as_bytes())?,
                        None => return Err(located("the condition produced no output".into())),
                    };
                    if !go {
                        break;
                    }
                    let next = run(body_t, body, &views)?;
                    drop(views);
                    if next.len() < m || next.len() > state.len() {
                        return Err(located(format!(
                            "the body produced {} values for {} loop values",
                            next.len(),
                            state.len()
                        )));
                    }
                    for (slot, value) in state.iter_mut().zip(next) {
                        *slot = value;
                    }
                }
                state.truncate(m);
                Ok(state)
            }
            other => Err(RuntimeError::Internal(format!(
                "{} is not a control-flow operation",
                other.name()
            ))),
        }
    }
}
