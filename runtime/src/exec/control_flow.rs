//! IF and WHILE: operations that run referenced subgraphs.
//!
//! Every referenced subgraph is prepared once, as a [`Program`] of its own, held by the
//! top-level program (`Program::referenced`, graph `t` at `t - 1`). The executor runs an
//! IF or WHILE here instead of through a kernel: it runs the chosen subgraph's program
//! on the operation's input values and takes its outputs, whose shapes are known only
//! then (programs with control flow always compute shapes during execution). Programs
//! nest: a subgraph's program reaches the others through the execution's [`Flow`], so an
//! IF inside a WHILE body runs like one in `main`.
//!
//! The loop timeout is one deadline per execution, checked before every iteration of
//! every WHILE and before every operation of a condition or body, however deeply nested,
//! so a loop stops within one operation's time of it.
//!
//! Memory: a subgraph's outputs are moved out of it, never copied; a WHILE takes over the
//! enclosing graph's buffers that it is the last to read, and each iteration's outputs
//! replace the loop state, so a loop holds at most its state, the iteration's new state
//! and the body's temporaries. Every one of those buffers holds its bytes in the
//! execution's memory budget ([`Flow::budget`]).

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nnc_formats::limits::{Budget, LimitKind, Limits};
use nnc_formats::nn::{Lifetime, Operation, OperationType};

use super::held::Held;
use super::io::{InputTensor, Placed, ValueSink};
use super::program::{ExecState, Program};
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

/// What an execution's control flow needs: the referenced subgraphs' programs, the loop
/// deadline and the memory budget.
pub(crate) struct Flow<'a> {
    pub graphs: &'a [Program],
    pub deadline: Instant,
    pub timeout: Duration,
    /// The caller's deadline for the whole execution ([`ExecuteOptions::deadline`]).
    pub execution_deadline: Option<Instant>,
    /// The execution's memory budget (the `arena` limit): every buffer the execution
    /// allocates in proportion to sizes the model declares holds its bytes here.
    pub budget: Arc<Budget>,
    /// Whether this runs inside a WHILE (its condition or body, at any depth): the loop
    /// deadline is then checked before every operation.
    pub in_loop: bool,
}

impl<'a> Flow<'a> {
    pub fn new(
        graphs: &'a [Program],
        timeout: Duration,
        execution_deadline: Option<Instant>,
        limits: &Limits,
    ) -> Flow<'a> {
        let now = Instant::now();
        Flow {
            graphs,
            deadline: now.checked_add(timeout).unwrap_or(now),
            timeout,
            execution_deadline,
            budget: Budget::new(limits, LimitKind::Arena),
            in_loop: false,
        }
    }

    /// This flow, for running a WHILE's condition and body.
    fn inside_loop(&self) -> Flow<'a> {
        Flow {
            budget: Arc::clone(&self.budget),
            in_loop: true,
            ..*self
        }
    }

    /// Fails once the execution's deadline has passed, or inside a loop once the loop
    /// deadline has (checked before every operation, so a missed deadline stops the
    /// execution within one operation's time).
    pub fn check_deadline(&self, operation: impl FnOnce() -> OpRef) -> Result<()> {
        if self.execution_deadline.is_none() && !self.in_loop {
            return Ok(());
        }
        let now = Instant::now();
        if self.execution_deadline.is_some_and(|d| now >= d) {
            return Err(RuntimeError::MissedDeadline {
                kind: crate::error::DeadlineKind::Transient,
                stage: crate::error::DeadlineStage::Execution,
                detail: format!("it passed before {} ran", operation()),
            });
        }
        if self.in_loop && now >= self.deadline {
            return Err(RuntimeError::LoopTimeout {
                operation: operation(),
                timeout: self.timeout,
            });
        }
        Ok(())
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

/// Which control-flow operation an operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ControlFlow {
    /// IF: inputs condition, then-graph, else-graph, then the values.
    If,
    /// WHILE: inputs condition graph, body graph, then the loop values.
    While,
}

/// The operation types the executor runs itself rather than through a kernel.
const CONTROL_FLOW: &[(OperationType, ControlFlow)] = &[
    (OperationType::If, ControlFlow::If),
    (OperationType::While, ControlFlow::While),
];

impl ControlFlow {
    /// The control flow `op_type` is; `None` for an operation a kernel runs.
    pub(crate) fn of(op_type: OperationType) -> Option<ControlFlow> {
        CONTROL_FLOW
            .iter()
            .find(|(t, _)| *t == op_type)
            .map(|&(_, flow)| flow)
    }

    /// The position of the first value input (after the condition and the subgraphs).
    fn first_value(self) -> usize {
        match self {
            ControlFlow::If => 3,
            ControlFlow::While => 2,
        }
    }
}

/// A value returned by a subgraph: its shape and bytes.
pub(crate) type Value = (Vec<usize>, Held);

/// A value passed to an IF or WHILE: borrowed from the enclosing graph, owned (a buffer
/// the enclosing graph gave up, or one an iteration produced), or where a static body
/// computed it in the arena of the state it last ran in.
pub(crate) enum Arg<'a> {
    Borrowed(&'a [usize], &'a [u8]),
    Owned(Value),
    InArena(Vec<usize>, Range<usize>),
}

impl Arg<'_> {
    /// The value's shape and bytes (`arena`: that of the state the body last ran in).
    fn view<'s>(&'s self, arena: &'s [u8]) -> Result<(&'s [usize], &'s [u8])> {
        match self {
            Arg::Borrowed(shape, bytes) => Ok((shape, bytes)),
            Arg::Owned((shape, held)) => Ok((shape, held.as_bytes())),
            Arg::InArena(shape, range) => match arena.get(range.clone()) {
                Some(bytes) => Ok((shape, bytes)),
                None => Err(RuntimeError::Internal(format!(
                    "a loop value lies outside its arena ({range:?})"
                ))),
            },
        }
    }

    /// The value as one an IF or WHILE returns: owned as it is, others copied.
    fn into_value(
        self,
        arena: &[u8],
        budget: &Arc<Budget>,
        what: impl FnOnce() -> String,
    ) -> Result<Value> {
        if let Arg::Owned(value) = self {
            return Ok(value);
        }
        let (shape, bytes) = self.view(arena)?;
        Ok((shape.to_vec(), Held::copy_of(budget, bytes, what)?))
    }
}

impl Program {
    /// Runs this (referenced subgraph's) program on `inputs` in `state` (its arena and
    /// scratch); returns its outputs, moved out of it, or with `placing`, left in
    /// `state`'s arena when the program is static.
    fn run_values(
        &self,
        flow: &Flow,
        inputs: &[(&[usize], &[u8])],
        state: &mut ExecState,
        placing: bool,
    ) -> Result<Vec<Arg<'static>>> {
        let views: Vec<InputTensor> = inputs
            .iter()
            .map(|(shape, data)| InputTensor::with_shape(shape, data))
            .collect();
        let mut sink = ValueSink::new(&flow.budget, placing);
        let shapes = self.run_flow_in(&views, &mut sink, flow, Some(state))?;
        shapes
            .into_iter()
            .zip(sink.outputs)
            .enumerate()
            .map(|(k, (shape, placed))| match placed {
                Some(Placed::Held(held)) => Ok(Arg::Owned((shape, held))),
                Some(Placed::InArena(range)) => Ok(Arg::InArena(shape, range)),
                None => Err(RuntimeError::Internal(format!(
                    "subgraph output {k} was not written"
                ))),
            })
            .collect()
    }

    /// Runs IF or WHILE operation `i` (`op`) of this program on its input values (in
    /// input order; SUBGRAPH inputs are ignored) and returns its outputs.
    pub(crate) fn run_control_flow(
        &self,
        flow: &Flow,
        i: usize,
        op: &Operation,
        mut inputs: Vec<Arg<'_>>,
    ) -> Result<Vec<Value>> {
        let Some(kind) = ControlFlow::of(op.op_type) else {
            return Err(RuntimeError::Internal(format!(
                "{} is not a control-flow operation",
                op.op_type.name()
            )));
        };
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
        let run = |flow: &Flow,
                   t: usize,
                   program: &Program,
                   values: &[(&[usize], &[u8])],
                   state: &mut ExecState,
                   placing: bool| {
            program
                .run_values(flow, values, state, placing)
                .map_err(|e| match e {
                    // The loop timeout names the loop it stopped (the outermost of the
                    // graph that runs it).
                    RuntimeError::LoopTimeout { timeout, .. } if kind == ControlFlow::While => {
                        RuntimeError::LoopTimeout {
                            operation: opref(),
                            timeout,
                        }
                    }
                    // The deadline is the whole execution's: reported as it is.
                    e
                    @ (RuntimeError::LoopTimeout { .. } | RuntimeError::MissedDeadline { .. }) => e,
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
        let output = |k: usize| move || format!("output {k} of {}", opref());
        let first_value = kind.first_value();
        if inputs.len() < first_value {
            return Err(located("too few inputs".into()));
        }
        let mut values: Vec<Arg> = inputs.split_off(first_value);
        match kind {
            ControlFlow::If => {
                let (_, cond) = match inputs.first() {
                    Some(arg) => arg.view(&[])?,
                    None => return Err(located("no condition".into())),
                };
                let branch = if truth("condition", cond)? { 1 } else { 2 };
                let (t, program) = graph(branch)?;
                let views: Vec<(&[usize], &[u8])> =
                    values.iter().map(|v| v.view(&[])).collect::<Result<_>>()?;
                let results = run(flow, t, program, &views, &mut ExecState::default(), false)?;
                results
                    .into_iter()
                    .enumerate()
                    .map(|(k, arg)| arg.into_value(&[], &flow.budget, output(k)))
                    .collect()
            }
            ControlFlow::While => {
                let (cond_t, cond) = graph(0)?;
                let (body_t, body) = graph(1)?;
                let m = op.outputs.len();
                let inner = flow.inside_loop();
                let mut cond_state = ExecState::default();
                // A static body runs in two states in turn: an iteration reads the loop
                // values where the previous one computed them, in one state's arena, and
                // computes the next in the other's, so no value is copied. A dynamic
                // body's outputs are buffers of their own, moved into the loop values.
                let placing = !body.is_dynamic();
                let mut states = [ExecState::default(), ExecState::default()];
                // The state the body runs in next; the other holds the loop values.
                let mut next_state = 0;
                loop {
                    if Instant::now() >= flow.deadline {
                        return Err(RuntimeError::LoopTimeout {
                            operation: opref(),
                            timeout: flow.timeout,
                        });
                    }
                    let (first, second) = states.split_at_mut(1);
                    let (run_in, held_in) = if next_state == 0 {
                        (&mut first[0], &second[0])
                    } else {
                        (&mut second[0], &first[0])
                    };
                    let arena = held_in.arena.as_bytes();
                    let views: Vec<(&[usize], &[u8])> = values
                        .iter()
                        .map(|v| v.view(arena))
                        .collect::<Result<_>>()?;
                    let c = run(&inner, cond_t, cond, &views, &mut cond_state, false)?;
                    let go = match c.first() {
                        Some(arg) => truth("condition subgraph's output", arg.view(&[])?.1)?,
                        None => return Err(located("the condition produced no output".into())),
                    };
                    drop(c);
                    if !go {
                        break;
                    }
                    let next = run(&inner, body_t, body, &views, run_in, placing)?;
                    drop(views);
                    if next.len() < m || next.len() > values.len() {
                        return Err(located(format!(
                            "the body produced {} values for {} loop values",
                            next.len(),
                            values.len()
                        )));
                    }
                    // The new values replace the old, whose buffers are freed now (a
                    // static body's old values stay in the arena it computes in next).
                    for (slot, value) in values.iter_mut().zip(next) {
                        *slot = value;
                    }
                    next_state = 1 - next_state;
                }
                // The state the body would run in next holds nothing the loop returns.
                states[next_state] = ExecState::default();
                drop(cond_state);
                values.truncate(m);
                let arena = states[1 - next_state].arena.as_bytes();
                values
                    .into_iter()
                    .enumerate()
                    .map(|(k, arg)| arg.into_value(arena, &flow.budget, output(k)))
                    .collect()
            }
        }
    }
}
