//! Steps from a placement: NNAPI's per-device ready queues, and the operands each step
//! exchanges with the others.

use std::collections::{BTreeSet, VecDeque};

use nnc_formats::nn::{Lifetime, Model};
use nnc_formats::plan::PlanStep;

/// One operand that carries data at run time (a model input, a temporary or a model
/// output): who writes it, who reads it, how big it is.
pub(crate) struct Flow {
    pub producer: Option<usize>,
    /// Distinct reading operations.
    pub consumers: Vec<usize>,
    pub is_model_output: bool,
    /// Size in bytes (unknown dimensions count as 1: an estimate for costs only).
    pub bytes: f64,
}

/// The dependency structure the step builder and the cost model share.
pub(crate) struct Graph {
    /// Per operation: how many distinct operands it reads that another operation writes.
    pending: Vec<usize>,
    /// Per operation: for each operand it writes, each distinct operation reading it.
    notify: Vec<Vec<usize>>,
    pub flows: Vec<Flow>,
}

impl Graph {
    /// Built from a validated model (indices in range, operations in topological order).
    pub fn new(model: &Model) -> Graph {
        let n = model.main.operations.len();
        let producers = model.producers();
        let consumers = model.consumers();
        let mut pending = vec![0; n];
        for (i, op) in model.main.operations.iter().enumerate() {
            let produced: BTreeSet<u32> = op
                .inputs
                .iter()
                .copied()
                .filter(|&o| producers.get(o as usize).is_some_and(Option::is_some))
                .collect();
            pending[i] = produced.len();
        }
        let mut notify = vec![Vec::new(); n];
        for (i, op) in model.main.operations.iter().enumerate() {
            for &o in &op.outputs {
                if let Some(readers) = consumers.get(o as usize) {
                    notify[i].extend(readers.iter().copied());
                }
            }
        }
        let is_output: BTreeSet<u32> = model.main.outputs.iter().copied().collect();
        let mut flows = Vec::new();
        for (index, operand) in model.main.operands.iter().enumerate() {
            let carries_data = matches!(
                operand.lifetime,
                Lifetime::TemporaryVariable | Lifetime::SubgraphInput | Lifetime::SubgraphOutput
            );
            if !carries_data {
                continue;
            }
            let elements: f64 = operand
                .dimensions
                .iter()
                .map(|&d| f64::from(d.max(1)))
                .product();
            let size = operand.operand_type.element_size().unwrap_or(4) as f64;
            flows.push(Flow {
                producer: producers.get(index).copied().flatten(),
                consumers: consumers.get(index).cloned().unwrap_or_default(),
                is_model_output: is_output.contains(&(index as u32)),
                bytes: elements * size,
            });
        }
        Graph {
            pending,
            notify,
            flows,
        }
    }

    pub fn operation_count(&self) -> usize {
        self.pending.len()
    }
}

/// A run of operations on one device (original operation indices, increasing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub device: usize,
    pub operations: Vec<usize>,
}

/// NNAPI's step construction: one ready queue per device (an operation is ready when
/// every operand it reads from another operation has been produced); repeatedly take the
/// first non-empty queue in `order`, open a step for that device and drain the queue,
/// which may make more operations ready on it. Within a step, operations keep their
/// original order, which is topological, so the concatenated steps are too.
pub(crate) fn build_steps(graph: &Graph, assign: &[usize], order: &[usize]) -> Vec<Step> {
    let n = graph.operation_count();
    let device_count = order.iter().copied().max().map_or(0, |m| m + 1);
    let mut queues: Vec<VecDeque<usize>> = vec![VecDeque::new(); device_count];
    let mut pending = graph.pending.clone();
    for (i, &p) in pending.iter().enumerate() {
        if p == 0
            && let Some(q) = assign.get(i).and_then(|&d| queues.get_mut(d))
        {
            q.push_back(i);
        }
    }
    let mut steps = Vec::new();
    let mut placed = 0;
    while let Some(&device) = order.iter().find(|&&d| !queues[d].is_empty()) {
        let mut operations = Vec::new();
        while let Some(op) = queues[device].pop_front() {
            operations.push(op);
            for &reader in &graph.notify[op] {
                // Checked so that a malformed graph cannot underflow or queue twice.
                if pending[reader] == 0 {
                    continue;
                }
                pending[reader] -= 1;
                if pending[reader] == 0
                    && let Some(q) = assign.get(reader).and_then(|&d| queues.get_mut(d))
                {
                    q.push_back(reader);
                }
            }
        }
        placed += operations.len();
        operations.sort_unstable();
        steps.push(Step { device, operations });
    }
    debug_assert_eq!(placed, n, "a validated model's operations all become ready");
    steps
}

/// The operands each step exchanges: inputs it reads from earlier steps or the model,
/// outputs later steps or the model read, and the constants it reads (every step reading
/// a constant lists it). All sorted by operand index. `operations` are filled in by the
/// caller (they are renumbered).
pub(crate) fn step_operands(model: &Model, steps: &[Step]) -> Vec<PlanStep> {
    let ops = &model.main.operations;
    let mut step_of = vec![usize::MAX; ops.len()];
    for (s, step) in steps.iter().enumerate() {
        for &op in &step.operations {
            step_of[op] = s;
        }
    }
    let consumers = model.consumers();
    let is_output: BTreeSet<u32> = model.main.outputs.iter().copied().collect();
    steps
        .iter()
        .enumerate()
        .map(|(s, step)| {
            let produced: BTreeSet<u32> = step
                .operations
                .iter()
                .flat_map(|&op| ops[op].outputs.iter().copied())
                .collect();
            let mut inputs = BTreeSet::new();
            let mut constants = BTreeSet::new();
            for &op in &step.operations {
                for &o in &ops[op].inputs {
                    let Some(operand) = model.operand(o) else {
                        continue;
                    };
                    if operand.lifetime.is_constant() {
                        constants.insert(o);
                    } else if matches!(
                        operand.lifetime,
                        Lifetime::TemporaryVariable
                            | Lifetime::SubgraphInput
                            | Lifetime::SubgraphOutput
                    ) && !produced.contains(&o)
                    {
                        inputs.insert(o);
                    }
                }
            }
            let outputs: BTreeSet<u32> = produced
                .iter()
                .copied()
                .filter(|&o| {
                    is_output.contains(&o)
                        || consumers
                            .get(o as usize)
                            .is_some_and(|readers| readers.iter().any(|&r| step_of[r] != s))
                })
                .collect();
            PlanStep {
                device: step.device as u32,
                operations: Vec::new(),
                inputs: inputs.into_iter().collect(),
                outputs: outputs.into_iter().collect(),
                constants: constants.into_iter().collect(),
            }
        })
        .collect()
}
