//! [`Program`]: a model prepared for execution.
//!
//! Preparation validates the model, builds one kernel per operation, propagates shapes
//! through the graph (with ops::infer, the one definition of every operation's
//! output shapes), plans the activation arena when every shape is known, and asks the
//! weight provider to load each operation's weights. A program keeps the graph and its
//! inline constants but no pool bytes: weights live with the provider.

use std::sync::{Arc, Mutex};

use nnc_formats::limits::{LimitKind, Limits, Reservation};
use nnc_formats::nn::ops::{self, InputView};
use nnc_formats::nn::{Lifetime, Model, Operand, OperandType, OperationType, Pool};

use super::control_flow::ControlFlow;
use super::image::{PlanImage, ProgramImage};
use super::in_place::{Uses, in_place_concat, row_strides};
use super::plan::{ArenaPlan, Interval, plan_arena};
use super::weights::WeightProvider;
use crate::buffer::AlignedBuf;
use crate::error::{OpRef, Result, RuntimeError};
use crate::kernels::fused::{self, FusedPair};
use crate::kernels::{self, FloatMath, Kernel, KernelOptions, Requantization, Scratch};
use crate::tensor::byte_size;

/// How to prepare a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareOptions {
    /// Threads for intra-operation parallelism (1 = run on the caller's thread only,
    /// nothing is spawned).
    pub threads: usize,
    /// How quantized convolutions and products requantize.
    pub requantization: Requantization,
    /// How closely float32 operations follow float32 arithmetic.
    pub float_math: FloatMath,
    /// How much memory the model may make the runtime allocate.
    pub limits: Limits,
    /// Run adjacent operations as one where a fused kernel exists (a 1x1 expansion
    /// convolution and the depthwise convolution reading it); the results are the same
    /// bits either way.
    pub fusion: bool,
}

impl PrepareOptions {
    /// The kernel options of `model`'s operations.
    pub fn kernel_options(&self, model: &Model) -> KernelOptions {
        KernelOptions {
            requantization: self.requantization,
            float_math: self.float_math,
        }
        .for_model(model.relax_computation_float32_to_float16)
    }
}

impl Default for PrepareOptions {
    fn default() -> Self {
        PrepareOptions {
            threads: 1,
            requantization: Requantization::default(),
            float_math: FloatMath::default(),
            limits: Limits::default(),
            fusion: true,
        }
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
    /// Operations that are no-ops: their output aliases their input, or their inputs
    /// are slices of their output ([`super::in_place`]).
    pub skip: Vec<bool>,
    /// For every operand written as a slice of a larger tensor, its row stride.
    pub row_strides: Vec<Option<usize>>,
    pub arena: ArenaPlan,
}

/// Per-execution memory, reused across executions.
#[derive(Default)]
pub(crate) struct ExecState {
    pub arena: AlignedBuf,
    pub scratch: Scratch,
    /// When profiling ([`Program::profile_host`]): each main-graph operation's time in
    /// the last execution.
    pub op_times: Option<Vec<std::time::Duration>>,
    /// The arena's bytes in the budget of the execution using this state (static
    /// programs; released when the execution ends).
    pub reservation: Option<Reservation>,
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
    /// At operation `i`, the kernel that runs `i` and `i + 1` together (static plans
    /// only; the executor then skips `i + 1`).
    pub(crate) fused: Vec<Option<FusedPair>>,
    pub(crate) weights: Arc<dyn WeightProvider>,
    pub(crate) threads: usize,
    /// What the kernels were built with (the options, made fast for a relaxed model).
    pub(crate) kernel_options: KernelOptions,
    pub(crate) limits: Limits,
    /// The process's pool of this size, shared with every other program of as many
    /// threads ([`shared_pool`]).
    pub(crate) pool: Option<Arc<rayon::ThreadPool>>,
    pub(crate) states: Mutex<Vec<ExecState>>,
    /// The programs of the referenced subgraphs (`referenced[t - 1]` runs graph `t`), in
    /// the top-level program only; a subgraph's own program reaches them through the
    /// execution's [`super::control_flow::Flow`].
    pub(crate) referenced: Vec<Program>,
    /// The global number of this program's first operation (main's operations first,
    /// then each referenced subgraph's): weights are asked for by global number.
    pub(crate) op_base: usize,
    /// Which graph of the model this program runs (0: main).
    pub(crate) graph: usize,
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
        Program::prepare_with(model, weights, options, None)
    }

    /// [`Program::prepare`], taking the shapes and memory plan from a cached
    /// [`ProgramImage`] instead of deriving them, after checking that the image fits the
    /// model (counts, every arena slot inside the arena, aliases only where allowed).
    pub fn prepare_with(
        model: &Model,
        weights: Arc<dyn WeightProvider>,
        options: &PrepareOptions,
        image: Option<&ProgramImage>,
    ) -> Result<Program> {
        nnc_formats::nn::validate(model)?;
        let mut program = Program::prepare_graph(model, 0, Arc::clone(&weights), options, image)?;
        // One program per referenced subgraph, kernels and weights prepared now, so an
        // IF or WHILE only runs already-built programs. Operations are numbered globally:
        // main's first, then each subgraph's in order.
        let mut op_base = model.main.operations.len();
        for t in 1..=model.referenced.len() {
            let sub = graph_model(model, t)?;
            let mut p = Program::prepare_graph(&sub, t, Arc::clone(&weights), options, None)?;
            p.op_base = op_base;
            op_base += sub.main.operations.len();
            p.preload_weights()?;
            program.referenced.push(p);
        }
        // What an execution will hold at once, as far as sizes are known now: refused
        // at load when even that is beyond the arena limit (as a static program's plan
        // is), before an execution allocates the first of it.
        if program.plan.is_none() {
            let peak = program.memory_lower_bound();
            options.limits.check(
                LimitKind::Arena,
                || {
                    "the tensors one execution holds at once (counting those whose size is \
                     known before it runs, with every WHILE running its body once)"
                        .to_string()
                },
                Some(peak),
            )?;
        }
        Ok(program)
    }

    /// Asks the weight provider to load every operation's weights (by global number), on
    /// every core: each operation's fields are authenticated, decrypted and laid out for
    /// its kernel independently of the others'.
    fn preload_weights(&self) -> Result<()> {
        let ops = &self.model.main.operations;
        let with_weights = || {
            self.kernels
                .iter()
                .enumerate()
                .filter(|&(i, _)| self.has_weights[i])
        };
        let workers = nnc_formats::parallel::workers_for(with_weights().count());
        nnc_formats::parallel::for_each(with_weights(), workers, |(i, kernel)| {
            self.weights
                .preload(self.op_base + i, kernel.as_ref())
                .map_err(|e| e.locate(i, &ops[i]))
        })
    }

    /// Prepares graph `model.main` (graph number `graph` of the original model) without
    /// validating (the whole model was validated) and without its referenced subgraphs.
    fn prepare_graph(
        model: &Model,
        graph: usize,
        weights: Arc<dyn WeightProvider>,
        options: &PrepareOptions,
        image: Option<&ProgramImage>,
    ) -> Result<Program> {
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
        let kernel_options = options.kernel_options(model);
        let mut kernels: Vec<Box<dyn Kernel>> = Vec::with_capacity(n_ops);
        let mut unsupported = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            if op.op_type.is_control_flow() {
                // Run by the executor, which runs the referenced subgraphs' programs.
                kernels.push(Box::new(super::control_flow::ControlFlowKernel));
                continue;
            }
            match kernels::build_with(op, operands, inline, kernel_options)
                .map_err(|e| e.locate(i, op))
            {
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
        let uses = Uses::of(model);
        let mut last_use = vec![0usize; operands.len()];
        for (i, op) in ops.iter().enumerate() {
            for &o in &op.outputs {
                storage[o as usize] = Storage::Computed;
                last_use[o as usize] = i;
            }
            for &o in &op.inputs {
                last_use[o as usize] = last_use[o as usize].max(i);
            }
        }
        for &o in &model.main.outputs {
            last_use[o as usize] = usize::MAX;
        }
        // A pair that may run fused reads its first operation's inputs while it writes
        // the second's output: those inputs stay live through the second operation, so
        // the plan never gives the output their memory.
        let candidates: Vec<usize> = fusion_candidates(ops, &last_use).collect();
        for &i in &candidates {
            for &o in &ops[i].inputs {
                if last_use[o as usize] == i {
                    last_use[o as usize] = i + 1;
                }
            }
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

        let static_shapes: Vec<Option<Vec<usize>>> = match image {
            Some(image) => {
                image.check(model, &uses)?;
                image.shapes.clone()
            }
            None => {
                let dims = propagate_shapes(model)?;
                operands
                    .iter()
                    .zip(&dims)
                    .map(|(o, d)| fully_known(o.operand_type, d).then(|| usize_dims(d)))
                    .collect()
            }
        };
        // Nothing is allocated for a tensor beyond the limits, however the model got its
        // shapes (declared, inferred, or from a cached program).
        for (i, (o, shape)) in operands.iter().zip(&static_shapes).enumerate() {
            if let Some(dims) = shape {
                let elements = dims
                    .iter()
                    .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
                let size = o.operand_type.element_size().unwrap_or(1) as u64;
                options
                    .limits
                    .check_tensor(|| format!("operand {i}"), elements, size)?;
            }
        }
        let all_static = operands
            .iter()
            .zip(&static_shapes)
            .zip(&storage)
            .all(|((_, s), st)| {
                !matches!(st, Storage::Input(_) | Storage::Computed) || s.is_some()
            });
        // A program with IF or WHILE runs with shapes computed during execution: what
        // the subgraphs produce is known only once they have run.
        let control_flow = ops.iter().any(|op| op.op_type.is_control_flow());
        if control_flow && image.is_some_and(|i| i.plan.is_some()) {
            return Err(RuntimeError::Internal(
                "the cached program has a memory plan, but the model has control flow".into(),
            ));
        }
        let plan = match image {
            Some(image) => image
                .plan
                .as_ref()
                .map(|p| p.to_plan(model, &image.shapes, &uses)),
            None if all_static && !control_flow => Some(static_plan(
                model,
                &storage,
                &static_shapes,
                &uses,
                &last_use,
            )?),
            None => None,
        };
        if let Some(p) = &plan {
            options.limits.check(
                LimitKind::Arena,
                || match graph {
                    0 => "the model's memory plan".to_string(),
                    t => format!("the memory plan of subgraph {t}"),
                },
                Some(p.arena.arena_size as u64),
            )?;
        }
        if plan.is_none() && all_static && !control_flow && image.is_some() {
            return Err(RuntimeError::Internal(
                "the cached program lacks the memory plan its shapes call for".into(),
            ));
        }

        let fused = match &plan {
            Some(plan) if options.fusion => {
                fuse_pairs(model, inline, &candidates, &storage, &static_shapes, plan)
            }
            _ => (0..n_ops).map(|_| None).collect(),
        };

        let has_weights: Vec<bool> = ops
            .iter()
            .map(|op| {
                op.inputs
                    .iter()
                    .any(|&i| storage[i as usize] == Storage::Weight)
            })
            .collect();
        let threads = options.threads.max(1);
        // A referenced subgraph runs inside its IF or WHILE, on the top-level program's
        // threads.
        let pool = if threads > 1 && graph == 0 {
            Some(shared_pool(threads)?)
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
            fused,
            weights,
            threads,
            kernel_options,
            limits: options.limits,
            pool,
            states: Mutex::new(Vec::new()),
            referenced: Vec::new(),
            op_base: 0,
            graph,
        })
        .and_then(|p| {
            if graph == 0 {
                p.preload_weights()?;
            }
            Ok(p)
        })
    }

    /// Operation `op`'s prepared weights, from its weight provider (for a data cache);
    /// `None` when the operation has no weights.
    pub(crate) fn prepared_weights(
        &self,
        op: usize,
    ) -> Result<Option<Arc<crate::kernels::PreparedWeights>>> {
        match (self.has_weights.get(op), self.kernels.get(op)) {
            (Some(true), Some(kernel)) => self.weights.weights(op, kernel.as_ref()).map(Some),
            _ => Ok(None),
        }
    }

    /// The operations of the main graph that run fused into the operation before them
    /// (their time is that operation's when profiling).
    pub fn fused_operations(&self) -> Vec<usize> {
        self.fused
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.as_ref().map(|_| i + 1))
            .collect()
    }

    /// What preparation derived (shapes and memory plan), for a model cache.
    pub fn image(&self) -> ProgramImage {
        ProgramImage {
            operand_count: self.model.main.operands.len(),
            operation_count: self.model.main.operations.len(),
            shapes: self.static_shapes.clone(),
            plan: self.plan.as_ref().map(|p| PlanImage {
                offsets: p.offsets.clone(),
                sizes: p.sizes.clone(),
                skip: p.skip.clone(),
                arena_size: p.arena.arena_size,
                total_size: p.arena.total_size,
            }),
        }
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

    /// What the kernels were built with: the prepare options, with fast float math for
    /// a model that allows relaxed computation.
    pub fn kernel_options(&self) -> KernelOptions {
        self.kernel_options
    }

    /// Bytes of the activation arena each execution uses (0 for dynamic programs).
    pub fn arena_size(&self) -> usize {
        self.plan.as_ref().map_or(0, |p| p.arena.arena_size)
    }

    /// What one execution will hold at once as far as sizes are known at preparation:
    /// the static plan's arena, or (control flow, unknown shapes) the lower bound a load
    /// checks against the arena limit, every WHILE running its body once.
    pub fn memory_lower_bound(&self) -> u64 {
        if self.plan.is_some() {
            return self.arena_size() as u64;
        }
        let mut memo = vec![Peak::Unknown; self.referenced.len() + 1];
        known_peak(self, &self.referenced, &mut memo, false)
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

    /// What a limit error says of this program's arena.
    pub(crate) fn describe_arena(&self) -> String {
        match self.graph {
            0 => "the model's memory plan".into(),
            t => format!("the arena of subgraph {t}"),
        }
    }

    /// ` in subgraph t` for a referenced subgraph's program (operation numbers are the
    /// subgraph's own), nothing for main's.
    pub(crate) fn graph_suffix(&self) -> String {
        match self.graph {
            0 => String::new(),
            t => format!(" in subgraph {t}"),
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

/// Referenced subgraph `t` of `model` as a model of its own (its graph as `main`), for
/// preparing its program. It holds only what is its own, so that the programs of all
/// subgraphs together stay proportional to the model: its inline values, copied out of
/// the model's (each at most `MAX_INLINE_CONSTANT_BYTES`, at the same offset modulo 16
/// so they keep their alignment), and no pool table (kernels reach pooled weights through
/// the weight provider, and a missing pool reads as the opaque one did: no bytes).
fn graph_model(model: &Model, t: usize) -> Result<Model> {
    let graph = model
        .graph(t)
        .ok_or_else(|| RuntimeError::Internal(format!("subgraph {t} does not exist")))?;
    let mut main = graph.clone();
    let mut values: Vec<u8> = Vec::new();
    for (i, o) in main.operands.iter_mut().enumerate() {
        if o.lifetime != Lifetime::ConstantCopy {
            continue;
        }
        let bytes = nnc_formats::nn::model::constant_bytes(o, &model.operand_values, &[])
            .ok_or_else(|| {
                RuntimeError::Internal(format!(
                    "inline constant {i} of subgraph {t} is out of range"
                ))
            })?;
        let phase = (o.location.offset % 16) as usize;
        let pad = (phase + 16 - values.len() % 16) % 16;
        values.resize(values.len() + pad, 0);
        o.location.offset = values.len() as u64;
        values.extend_from_slice(bytes);
    }
    Ok(Model {
        main,
        referenced: Vec::new(),
        operand_values: values,
        pools: Vec::new(),
        relax_computation_float32_to_float16: model.relax_computation_float32_to_float16,
        input_info: Vec::new(),
        output_info: Vec::new(),
    })
}

/// A graph's [`known_peak`], memoized per graph number.
#[derive(Clone, Copy, Debug)]
enum Peak {
    Unknown,
    Visiting,
    Known(u64),
}

/// A lower bound of the bytes an execution of `program` holds in its budget at once: at
/// every operation, the computed values of known size that are alive (from the operation
/// writing them through the last reading them), plus, at an IF, the cheaper branch and,
/// at a WHILE, the larger of its condition and body (a loop runs its body at least once
/// unless its condition is false from the start). A static program holds its arena, and
/// as a subgraph also its outputs, copied out of it unless they stay in place (a WHILE's
/// static body: `placing`). `graphs[t - 1]` runs graph `t`.
fn known_peak(program: &Program, graphs: &[Program], memo: &mut [Peak], placing: bool) -> u64 {
    if let Some(plan) = &program.plan {
        let outputs: u64 = if program.graph == 0 || placing {
            0
        } else {
            program
                .model
                .main
                .outputs
                .iter()
                .map(|&o| plan.sizes.get(o as usize).copied().unwrap_or(0) as u64)
                .sum()
        };
        return (plan.arena.arena_size as u64).saturating_add(outputs);
    }
    let operands = &program.model.main.operands;
    let ops = &program.model.main.operations;
    let n = ops.len();
    if n == 0 {
        return 0;
    }
    let size = |o: usize| -> u64 {
        match (program.storage.get(o), program.static_shapes.get(o)) {
            (Some(Storage::Computed), Some(Some(shape))) => {
                byte_size(operands[o].operand_type, shape).unwrap_or(0) as u64
            }
            _ => 0,
        }
    };
    // Bytes alive at each operation, as differences.
    let mut delta = vec![0i128; n + 1];
    for (i, op) in ops.iter().enumerate() {
        // An IF's or WHILE's outputs are its subgraph's, counted in the subgraph's peak.
        let first = i + usize::from(op.op_type.is_control_flow());
        for &o in &op.outputs {
            let last = program
                .last_use
                .get(o as usize)
                .map_or(i, |&l| l.min(n - 1));
            let bytes = i128::from(size(o as usize));
            if bytes > 0 && first <= last {
                delta[first] += bytes;
                delta[last + 1] -= bytes;
            }
        }
    }
    let mut peak: i128 = 0;
    let mut alive: i128 = 0;
    for (i, op) in ops.iter().enumerate() {
        alive += delta[i];
        let sub = |k: usize, memo: &mut [Peak], placing: bool| -> u64 {
            let t = op
                .inputs
                .get(k)
                .and_then(|&o| operands.get(o as usize))
                .filter(|o| o.lifetime == Lifetime::Subgraph)
                .and_then(|o| usize::try_from(o.location.offset).ok());
            match t {
                Some(t) => graph_peak(t, graphs, memo, placing),
                None => 0,
            }
        };
        let inner = match ControlFlow::of(op.op_type) {
            Some(ControlFlow::If) => sub(1, memo, false).min(sub(2, memo, false)),
            Some(ControlFlow::While) => sub(0, memo, false).max(sub(1, memo, true)),
            None => 0,
        };
        peak = peak.max(alive + i128::from(inner));
    }
    u64::try_from(peak).unwrap_or(u64::MAX)
}

/// [`known_peak`] of graph `t` (at least 1), computed once when it is dynamic.
fn graph_peak(t: usize, graphs: &[Program], memo: &mut [Peak], placing: bool) -> u64 {
    let Some(program) = t.checked_sub(1).and_then(|k| graphs.get(k)) else {
        return 0;
    };
    if program.plan.is_some() {
        return known_peak(program, graphs, memo, placing);
    }
    match memo.get(t) {
        Some(Peak::Known(p)) => return *p,
        // Validation refuses cycles; were there one, it adds nothing.
        Some(Peak::Visiting) | None => return 0,
        Some(Peak::Unknown) => {}
    }
    memo[t] = Peak::Visiting;
    let peak = known_peak(program, graphs, memo, false);
    memo[t] = Peak::Known(peak);
    peak
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
        let inferred =
            ops::infer(op.op_type, &views, &declared).map_err(|e| RuntimeError::Operation {
                operation: OpRef::new(Some(i), op),
                message: e.to_string(),
            })?;
        for (&k, shape) in op.outputs.iter().zip(&inferred) {
            let merged = merge_dims(&operands[k as usize].dimensions, &shape.dimensions);
            dims[k as usize] = merged;
        }
    }
    Ok(dims)
}

/// The operations `i` whose output only operation `i + 1` reads, where the pair has the
/// form of a fused kernel ([`fused::is_candidate`]): the pairs a fused kernel may run
/// (decided from the graph alone, so that the memory plan, which a model cache stores,
/// does not depend on the processor).
fn fusion_candidates<'m>(
    ops: &'m [nnc_formats::nn::Operation],
    last_use: &'m [usize],
) -> impl Iterator<Item = usize> + 'm {
    ops.windows(2).enumerate().filter_map(move |(i, pair)| {
        let (head, tail) = (&pair[0], &pair[1]);
        (fused::is_candidate(head, tail)
            && head.outputs.iter().all(|&t| last_use[t as usize] == i + 1))
        .then_some(i)
    })
}

/// The fused kernels of the candidate pairs that have one and whose memory the plan
/// keeps apart: the first operation's computed inputs and the second's other inputs
/// must not share bytes with the second's outputs (a cached plan from before the
/// lifetimes were extended may place them together; such a pair runs unfused).
fn fuse_pairs<'c>(
    model: &Model,
    constant: impl Fn(u32) -> Option<&'c [u8]> + Copy,
    candidates: &[usize],
    storage: &[Storage],
    shapes: &[Option<Vec<usize>>],
    plan: &StaticPlan,
) -> Vec<Option<FusedPair>> {
    let ops = &model.main.operations;
    let mut fused: Vec<Option<FusedPair>> = (0..ops.len()).map(|_| None).collect();
    let region = |o: u32| {
        let o = o as usize;
        let at = plan.offsets.get(o).copied().flatten()?;
        Some((at, at.checked_add(*plan.sizes.get(o)?)?))
    };
    let apart = |reads: &[u32], writes: &[u32]| {
        reads.iter().all(|&r| {
            storage[r as usize] != Storage::Computed
                || region(r).is_some_and(|(r0, r1)| {
                    writes
                        .iter()
                        .all(|&w| region(w).is_some_and(|(w0, w1)| r1 <= w0 || w1 <= r0))
                })
        })
    };
    for &i in candidates {
        let (head, tail) = (&ops[i], &ops[i + 1]);
        let shape = |o: u32| shapes.get(o as usize).and_then(|s| s.as_deref());
        let operand_shape = |list: &[u32]| list.first().and_then(|&o| shape(o));
        let (Some(x), Some(expansion), Some(out)) = (
            operand_shape(&head.inputs),
            operand_shape(&head.outputs),
            operand_shape(&tail.outputs),
        ) else {
            continue;
        };
        let tail_reads: Vec<u32> = tail
            .inputs
            .iter()
            .copied()
            .filter(|o| !head.outputs.contains(o))
            .collect();
        if plan.skip[i]
            || plan.skip[i + 1]
            || !apart(&head.inputs, &tail.outputs)
            || !apart(&tail_reads, &tail.outputs)
        {
            continue;
        }
        fused[i] = kernels::fused_pair(
            head,
            tail,
            &model.main.operands,
            constant,
            [x, expansion, out],
        );
    }
    fused
}

/// Liveness, aliasing of RESHAPE-like operations, and arena placement.
fn static_plan(
    model: &Model,
    storage: &[Storage],
    shapes: &[Option<Vec<usize>>],
    uses: &Uses,
    last_use: &[usize],
) -> Result<StaticPlan> {
    let producer = &uses.producer;
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
    // Concatenations whose inputs their producers write in place: each input becomes a
    // slice of the output's buffer, which lives from the first of those producers on.
    let mut slice_of: Vec<Option<(usize, usize)>> = vec![None; operands.len()];
    let mut starts_early: Vec<usize> = (0..operands.len()).map(|o| producer[o]).collect();
    for (i, skipped) in skip.iter_mut().enumerate() {
        let Some(concat) = in_place_concat(model, i, shapes, uses) else {
            continue;
        };
        let out = concat.output as usize;
        if root[out] != out || storage[out] != Storage::Computed {
            continue;
        }
        *skipped = true;
        for s in &concat.slices {
            let t = s.operand as usize;
            slice_of[t] = Some((out, s.offset));
            sizes[t] = s.span;
            starts_early[out] = starts_early[out].min(producer[t]);
        }
    }
    // One interval per root covering all its aliases.
    let mut interval_of: Vec<Option<usize>> = vec![None; operands.len()];
    let mut intervals: Vec<Interval> = Vec::new();
    for i in 0..operands.len() {
        if storage[i] != Storage::Computed || slice_of[i].is_some() {
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
                    first: starts_early[r],
                    last,
                    size: sizes[r],
                });
            }
        }
    }
    let arena = plan_arena(&intervals)?;
    let offset_of = |i: usize| interval_of[root[i]].map(|k| arena.offsets[k]);
    let offsets = (0..operands.len())
        .map(|i| {
            if storage[i] != Storage::Computed {
                return None;
            }
            match slice_of[i] {
                Some((out, bytes)) => offset_of(out).map(|o| o + bytes),
                None => offset_of(i),
            }
        })
        .collect();
    let row_strides = row_strides(model, &skip, shapes, uses);
    Ok(StaticPlan {
        offsets,
        sizes,
        skip,
        row_strides,
        arena,
    })
}

/// The most threads a program may ask for: pools live as long as the process, so an
/// embedder's mistake must not start thousands of threads.
pub const MAX_THREADS: usize = 256;

/// The process's rayon pool of `threads` workers, started the first time a program asks
/// for that many and kept for the life of the process: loading and dropping models never
/// starts threads again, and programs of one size share workers instead of each
/// oversubscribing the cores with its own. One pool per size rather than one for all
/// because a rayon pool cannot cap a single job's parallelism below its own size.
pub(crate) fn shared_pool(threads: usize) -> Result<Arc<rayon::ThreadPool>> {
    use std::collections::HashMap;
    if threads > MAX_THREADS {
        return Err(RuntimeError::ThreadPool(format!(
            "{threads} threads asked for; at most {MAX_THREADS}"
        )));
    }
    use std::sync::OnceLock;
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let pools = POOLS.get_or_init(Default::default);
    // A poisoned lock only means another thread panicked between lookup and insert; the
    // map itself is always consistent.
    let mut pools = pools
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(pool) = pools.get(&threads) {
        return Ok(Arc::clone(pool));
    }
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("nnc-runtime-{threads}-{i}"))
            .build()
            .map_err(|e| RuntimeError::ThreadPool(e.to_string()))?,
    );
    pools.insert(threads, Arc::clone(&pool));
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_of_one_size_share_the_process_pool() {
        let a = shared_pool(3).unwrap();
        let b = shared_pool(3).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.current_num_threads(), 3);
        let c = shared_pool(5).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.current_num_threads(), 5);
    }

    #[test]
    fn more_threads_than_the_maximum_are_refused() {
        let err = shared_pool(MAX_THREADS + 1).unwrap_err();
        assert!(err.to_string().contains("at most 256"), "{err}");
    }
}
