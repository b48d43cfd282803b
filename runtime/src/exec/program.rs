//! [`Program`]: a model prepared for execution.
//!
//! Preparation validates the model, builds one kernel per operation, propagates shapes
//! through the graph (with signature::infer, the one definition of every operation's
//! output shapes), plans the activation arena when every shape is known, and asks the
//! weight provider to load each operation's weights. A program keeps the graph and its
//! inline constants but no pool bytes: weights live with the provider.

use std::sync::{Arc, Mutex};

use nnc_formats::nn::signature::{self, InputView};
use nnc_formats::nn::{Lifetime, Model, Operand, OperandType, OperationType, Pool};

use super::plan::{ArenaPlan, Interval, plan_arena};
use super::weights::WeightProvider;
use crate::buffer::AlignedBuf;
use crate::error::{OpRef, Result, RuntimeError};
use crate::kernels::{self, Kernel, Scratch};
use crate::tensor::byte_size;

/// How to prepare a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareOptions {
    /// Threads for intra-operation parallelism (1 = run on the caller's thread only,
    /// nothing is spawned).
    pub threads: usize,
}

impl Default for PrepareOptions {
    fn default() -> Self {
        PrepareOptions { threads: 1 }
    }
}

/// Where an operand's value lives during an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Storage {
    /// Model input number k (the caller's buffer).
    Input(usize),
    /// Inline constant held by the program.
    Constant,
    /// CONSTANT_REFERENCE: reaches the kernel through its prepared weights.
    Weight,
    NoValue,
    /// Written by an operation: the arena (static shapes) or a per-execution buffer.
    Computed,
    /// Not used by any operation.
    Unused,
}

/// The memory plan of a program whose shapes are all known before execution.
#[derive(Debug)]
pub(crate) struct StaticPlan {
    /// Arena offset of every computed operand (aliases share their root's offset).
    pub offsets: Vec<Option<usize>>,
    /// Bytes of every operand with a known shape.
    pub sizes: Vec<usize>,
    /// Operations that are no-ops because their output aliases their input.
    pub skip: Vec<bool>,
    pub arena: ArenaPlan,
}

/// Per-execution memory, reused across executions.
#[derive(Default)]
pub(crate) struct ExecState {
    pub arena: AlignedBuf,
    pub scratch: Scratch,
}

/// A prepared model. `&self` methods may run concurrently from several threads.
pub struct Program {
    pub(crate) model: Model,
    pub(crate) kernels: Vec<Box<dyn Kernel>>,
    pub(crate) has_weights: Vec<bool>,
    pub(crate) storage: Vec<Storage>,
    pub(crate) constants: Vec<Option<AlignedBuf>>,
    /// Shapes known at preparation (every operand's when the plan is static).
    pub(crate) static_shapes: Vec<Option<Vec<usize>>>,
    /// For every operand, the last operation reading it (`usize::MAX` for model outputs).
    pub(crate) last_use: Vec<usize>,
    pub(crate) plan: Option<StaticPlan>,
    pub(crate) weights: Arc<dyn WeightProvider>,
    pub(crate) threads: usize,
    pub(crate) pool: Option<rayon::ThreadPool>,
    pub(crate) states: Mutex<Vec<ExecState>>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("operations", &self.kernels.len())
            .field("static_plan", &self.plan.is_some())
            .field("arena_size", &self.arena_size())
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

fn usize_dims(dims: &[u32]) -> Vec<usize> {
    dims.iter().map(|&d| d as usize).collect()
}

fn fully_known(operand_type: OperandType, dims: &[u32]) -> bool {
    operand_type.is_scalar() || (!dims.is_empty() && dims.iter().all(|&d| d != 0))
}

/// Merges declared dimensions with inferred ones (known values win).
fn merge_dims(declared: &[u32], inferred: &[u32]) -> Vec<u32> {
    if inferred.is_empty() {
        return declared.to_vec();
    }
    if declared.len() != inferred.len() {
        return inferred.to_vec();
    }
    declared
        .iter()
        .zip(inferred)
        .map(|(&d, &i)| if i != 0 { i } else { d })
        .collect()
}

impl Program {
    /// Prepares `model` for execution with weights from `weights`.
    pub fn prepare(
        model: &Model,
        weights: Arc<dyn WeightProvider>,
        options: &PrepareOptions,
    ) -> Result<Program> {
        nnc_formats::nn::validate(model)?;
        let operands = &model.main.operands;
        let ops = &model.main.operations;
        let n_ops = ops.len();

        // Kernels see inline constants only (as a device holding encrypted weights would).
        let inline = |i: u32| -> Option<&[u8]> {
            match operands.get(i as usize)?.lifetime {
                Lifetime::ConstantCopy => model.constant_bytes(i),
                _ => None,
            }
        };
        // Build every kernel before failing, so that all unsupported operations are
        // reported together.
        let mut kernels = Vec::with_capacity(n_ops);
        let mut unsupported = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            match kernels::build(op, operands, inline).map_err(|e| e.locate(i, op)) {
                Ok(k) => kernels.push(k),
                Err(RuntimeError::Unsupported { operation, reason }) => {
                    unsupported.push((operation, reason))
                }
                Err(e) => return Err(e),
            }
        }
        if !unsupported.is_empty() {
            return Err(RuntimeError::UnsupportedOperations(unsupported));
        }

        let mut storage: Vec<Storage> = operands
            .iter()
            .map(|o| match o.lifetime {
                Lifetime::ConstantCopy => Storage::Constant,
                Lifetime::ConstantReference => Storage::Weight,
                Lifetime::NoValue => Storage::NoValue,
                _ => Storage::Unused,
            })
            .collect();
        for (k, &i) in model.main.inputs.iter().enumerate() {
            storage[i as usize] = Storage::Input(k);
        }
        let mut producer = vec![usize::MAX; operands.len()];
        let mut last_use = vec![0usize; operands.len()];
        for (i, op) in ops.iter().enumerate() {
            for &o in &op.outputs {
                storage[o as usize] = Storage::Computed;
                producer[o as usize] = i;
                last_use[o as usize] = i;
            }
            for &o in &op.inputs {
                last_use[o as usize] = last_use[o as usize].max(i);
            }
        }
        for &o in &model.main.outputs {
            last_use[o as usize] = usize::MAX;
        }

        let mut constants: Vec<Option<AlignedBuf>> = Vec::with_capacity(operands.len());
        for (i, o) in operands.iter().enumerate() {
            constants.push(if o.lifetime == Lifetime::ConstantCopy {
                let bytes = model.constant_bytes(i as u32).ok_or_else(|| {
                    RuntimeError::Internal(format!("inline constant {i} is out of range"))
                })?;
                Some(AlignedBuf::from_bytes(bytes)?)
            } else {
                None
            });
        }

        let dims = propagate_shapes(model)?;
        let static_shapes: Vec<Option<Vec<usize>>> = operands
            .iter()
            .zip(&dims)
            .map(|(o, d)| fully_known(o.operand_type, d).then(|| usize_dims(d)))
            .collect();
        let all_static = operands
            .iter()
            .zip(&static_shapes)
            .zip(&storage)
            .all(|((_, s), st)| {
                !matches!(st, Storage::Input(_) | Storage::Computed) || s.is_some()
            });
        let plan = if all_static {
            Some(static_plan(
                model,
                &storage,
                &static_shapes,
                &producer,
                &last_use,
            )?)
        } else {
            None
        };

        let has_weights: Vec<bool> = ops
            .iter()
            .map(|op| {
                op.inputs
                    .iter()
                    .any(|&i| storage[i as usize] == Storage::Weight)
            })
            .collect();
        for (i, kernel) in kernels.iter().enumerate() {
            if has_weights[i] {
                weights
                    .preload(i, kernel.as_ref())
                    .map_err(|e| e.locate(i, &ops[i]))?;
            }
        }

        let threads = options.threads.max(1);
        let pool = if threads > 1 {
            Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("nnc-runtime-{i}"))
                    .build()
                    .map_err(|e| RuntimeError::ThreadPool(e.to_string()))?,
            )
        } else {
            None
        };

        // Keep the graph and inline values; pools only by size (weights stay with the
        // provider).
        let mut kept = model.clone();
        kept.pools = model
            .pools
            .iter()
            .map(|p| Pool::Opaque { size: p.size() })
            .collect();

        Ok(Program {
            model: kept,
            kernels,
            has_weights,
            storage,
            constants,
            static_shapes,
            last_use,
            plan,
            weights,
            threads,
            pool,
            states: Mutex::new(Vec::new()),
        })
    }

    /// The prepared graph (pools are opaque).
    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn input_count(&self) -> usize {
        self.model.main.inputs.len()
    }

    pub fn output_count(&self) -> usize {
        self.model.main.outputs.len()
    }

    /// The operand of model input `k`.
    pub fn input_operand(&self, k: usize) -> Option<&Operand> {
        self.model.operand(*self.model.main.inputs.get(k)?)
    }

    /// The operand of model output `k`.
    pub fn output_operand(&self, k: usize) -> Option<&Operand> {
        self.model.operand(*self.model.main.outputs.get(k)?)
    }

    /// The shape of output `k` when it is known before execution.
    pub fn output_shape(&self, k: usize) -> Option<&[usize]> {
        let o = *self.model.main.outputs.get(k)?;
        self.static_shapes.get(o as usize)?.as_deref()
    }

    /// Bytes output `k` needs, when known before execution.
    pub fn output_byte_size(&self, k: usize) -> Option<usize> {
        byte_size(self.output_operand(k)?.operand_type, self.output_shape(k)?)
    }

    /// Whether shapes are computed per execution (some dimension is unknown until then).
    pub fn is_dynamic(&self) -> bool {
        self.plan.is_none()
    }

    /// Bytes of the activation arena each execution uses (0 for dynamic programs).
    pub fn arena_size(&self) -> usize {
        self.plan.as_ref().map_or(0, |p| p.arena.arena_size)
    }

    /// Sum of the sizes of all arena buffers, i.e. the arena size without reuse.
    pub fn unplanned_size(&self) -> usize {
        self.plan.as_ref().map_or(0, |p| p.arena.total_size)
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    pub(crate) fn take_state(&self) -> ExecState {
        self.states
            .lock()
            .ok()
            .and_then(|mut s| s.pop())
            .unwrap_or_default()
    }

    pub(crate) fn return_state(&self, state: ExecState) {
        if let Ok(mut states) = self.states.lock()
            && states.len() < self.threads.max(4)
        {
            states.push(state);
        }
    }

    pub(crate) fn op_ref(&self, i: usize) -> OpRef {
        match self.model.main.operations.get(i) {
            Some(op) => OpRef::new(Some(i), op),
            None => OpRef {
                index: Some(i),
                op_type: OperationType::OemOperation,
                node: String::new(),
            },
        }
    }
}

/// Dimensions of every operand after propagating known shapes and constant values
/// through the graph in order (`0` where still unknown).
fn propagate_shapes(model: &Model) -> Result<Vec<Vec<u32>>> {
    let operands = &model.main.operands;
    let mut dims: Vec<Vec<u32>> = operands.iter().map(|o| o.dimensions.clone()).collect();
    for (i, op) in model.main.operations.iter().enumerate() {
        let inputs: Vec<Operand> = op
            .inputs
            .iter()
            .map(|&k| {
                let mut o = operands[k as usize].clone();
                o.dimensions = dims[k as usize].clone();
                o
            })
            .collect();
        let views: Vec<InputView> = inputs
            .iter()
            .zip(&op.inputs)
            .map(|(o, &k)| InputView {
                operand: o,
                value: if o.lifetime.is_constant() {
                    model.constant_bytes(k)
                } else {
                    None
                },
            })
            .collect();
        let declared: Vec<&Operand> = op.outputs.iter().map(|&k| &operands[k as usize]).collect();
        let inferred = signature::infer(op.op_type, &views, &declared).map_err(|e| {
            RuntimeError::Operation {
                operation: OpRef::new(Some(i), op),
                message: e.to_string(),
            }
        })?;
        for (&k, shape) in op.outputs.iter().zip(&inferred) {
            let merged = merge_dims(&operands[k as usize].dimensions, &shape.dimensions);
            dims[k as usize] = merged;
        }
    }
    Ok(dims)
}

/// Liveness, aliasing of RESHAPE-like operations, and arena placement.
fn static_plan(
    model: &Model,
    storage: &[Storage],
    shapes: &[Option<Vec<usize>>],
    producer: &[usize],
    last_use: &[usize],
) -> Result<StaticPlan> {
    let operands = &model.main.operands;
    let ops = &model.main.operations;
    let n_ops = ops.len();
    let mut sizes = vec![0usize; operands.len()];
    for (i, o) in operands.iter().enumerate() {
        if let Some(s) = &shapes[i] {
            sizes[i] = byte_size(o.operand_type, s).ok_or_else(|| {
                RuntimeError::Internal(format!(
                    "operand {i} of type {} has no fixed size",
                    o.operand_type
                ))
            })?;
        }
    }
    // Aliases: the output of a RESHAPE / SQUEEZE / EXPAND_DIMS of a computed value is the
    // same bytes, so the operation becomes a no-op.
    let mut root: Vec<usize> = (0..operands.len()).collect();
    let mut skip = vec![false; n_ops];
    for (i, op) in ops.iter().enumerate() {
        if matches!(
            op.op_type,
            OperationType::Reshape | OperationType::Squeeze | OperationType::ExpandDims
        ) && let (Some(&input), Some(&output)) = (op.inputs.first(), op.outputs.first())
            && storage[input as usize] == Storage::Computed
            && sizes[input as usize] == sizes[output as usize]
            && operands[input as usize].operand_type == operands[output as usize].operand_type
        {
            root[output as usize] = root[input as usize];
            skip[i] = true;
        }
    }
    // One interval per root covering all its aliases.
    let mut interval_of: Vec<Option<usize>> = vec![None; operands.len()];
    let mut intervals: Vec<Interval> = Vec::new();
    for i in 0..operands.len() {
        if storage[i] != Storage::Computed {
            continue;
        }
        let r = root[i];
        let last = if last_use[i] == usize::MAX {
            n_ops
        } else {
            last_use[i]
        };
        match interval_of[r] {
            Some(k) => intervals[k].last = intervals[k].last.max(last),
            None => {
                interval_of[r] = Some(intervals.len());
                intervals.push(Interval {
                    first: producer[r],
                    last,
                    size: sizes[r],
                });
            }
        }
    }
    let arena = plan_arena(&intervals)?;
    let offsets = (0..operands.len())
        .map(|i| {
            (storage[i] == Storage::Computed)
                .then(|| interval_of[root[i]].map(|k| arena.offsets[k]))
                .flatten()
        })
        .collect();
    Ok(StaticPlan {
        offsets,
        sizes,
        skip,
        arena,
    })
}
