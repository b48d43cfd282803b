//! Per-operation timing: [`Program::profile_host`] (behind `nnc bench --profile`) and
//! the clock the executors read between operations when an execution state asks.

use std::time::{Duration, Instant};

use nnc_formats::tensor::HostTensor;

use super::io::ExecuteOptions;
use super::program::Program;
use crate::error::{OpRef, Result};

/// One main-graph operation's time in a profile ([`Program::profile_host`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperationTime {
    /// Index in the main graph's operation list.
    pub index: usize,
    pub operation: OpRef,
    /// The first output's shape, when known before execution.
    pub output_shape: Option<Vec<usize>>,
    /// The median over the profiled executions (an IF or WHILE includes its subgraphs;
    /// an operation the plan elides, a reshape aliasing its input, is zero, and so is
    /// one run fused into the operation before it, whose time includes it).
    pub median: Duration,
    /// The operation this one ran fused into ([`Program::fused_operations`]).
    pub fused_into: Option<usize>,
    /// The memory plan makes this operation no work: a reshape whose output is its
    /// input's bytes, or a concatenation whose producers wrote its output in place.
    pub elided: bool,
}

/// Times each operation of one execution into the state's `op_times` when profiling;
/// does nothing otherwise (one branch per operation).
pub(super) struct OpClock<'a> {
    times: Option<&'a mut Vec<Duration>>,
    current: Option<(usize, Instant)>,
}

impl<'a> OpClock<'a> {
    pub(super) fn new(times: Option<&'a mut Vec<Duration>>) -> OpClock<'a> {
        OpClock {
            times,
            current: None,
        }
    }

    /// Ends the running operation's interval and starts operation `i`'s.
    pub(super) fn start(&mut self, i: usize) {
        if self.times.is_some() {
            self.stop();
            self.current = Some((i, Instant::now()));
        }
    }

    pub(super) fn stop(&mut self) {
        if let (Some(times), Some((i, at))) = (self.times.as_deref_mut(), self.current.take())
            && let Some(t) = times.get_mut(i)
        {
            *t += at.elapsed();
        }
    }
}

impl Program {
    /// Executes `runs` times with host tensors, timing every main-graph operation, and
    /// returns each operation's median time in graph order. For finding where an
    /// execution's time goes (`nnc bench --profile`); the clock reads add a little time
    /// per operation, so the executions of [`Program::execute_host`] stay unprofiled.
    pub fn profile_host(&self, inputs: &[HostTensor], runs: usize) -> Result<Vec<OperationTime>> {
        let count = self.model.main.operations.len();
        let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(runs); count];
        let mut state = self.take_state();
        let inputs: Vec<_> = inputs.iter().map(HostTensor::view).collect();
        let mut result = Ok(());
        for _ in 0..runs.max(1) {
            state.op_times = Some(vec![Duration::ZERO; count]);
            if let Err(e) =
                self.execute_host_in(&inputs, &ExecuteOptions::default(), Some(&mut state))
            {
                result = Err(e);
                break;
            }
            for (sample, &t) in samples.iter_mut().zip(state.op_times.iter().flatten()) {
                sample.push(t);
            }
        }
        state.op_times = None;
        self.return_state(state);
        result?;
        Ok(samples
            .into_iter()
            .enumerate()
            .map(|(index, mut times)| {
                times.sort_unstable();
                OperationTime {
                    index,
                    operation: self.op_ref(index),
                    output_shape: self.model.main.operations[index]
                        .outputs
                        .first()
                        .and_then(|&o| self.static_shapes.get(o as usize).cloned().flatten()),
                    median: times.get(times.len() / 2).copied().unwrap_or_default(),
                    fused_into: index
                        .checked_sub(1)
                        .filter(|&head| self.fused.get(head).is_some_and(Option::is_some)),
                    elided: self
                        .plan
                        .as_ref()
                        .is_some_and(|p| p.skip.get(index) == Some(&true)),
                }
            })
            .collect())
    }
}
