//! Reusable executions bound to memory objects, and bursts.
//!
//! An [`Execution`] belongs to one prepared model. Each input and output is bound once
//! to a region of a pool or to a domain buffer, checked when bound (index, range, size
//! for a known shape, the domain buffer's roles, overlaps with other bindings), and
//! checked again at every compute against what may have changed since (a memory
//! released, a pool resized or its file truncated). One execution computes one request
//! at a time; several executions of one model run concurrently.
//!
//! Locking: the memories of one compute are locked in identifier order (so two
//! executions never deadlock), shared for those it only reads and exclusive for those
//! it writes. Regions within one memory never overlap an output (checked at binding),
//! so the slices formed from one memory's bytes are disjoint.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use nnc_formats::tensor::HostTensor;

use super::fence::{Fence, FenceState};
use super::memory::{DomainValue, FilePool, IoKind, Memory, State, value_bytes};
use super::pending::{Pending, complete};
use crate::buffer::AlignedBuf;
use crate::error::{Result, RuntimeError};
use crate::exec::io::Sink;
use crate::exec::program::ExecState;
use crate::exec::{ExecuteOptions, InputTensor};
use crate::model::{PreparedModel, Timing};

/// One input's or output's binding.
#[derive(Clone)]
struct Binding {
    memory: Arc<Memory>,
    offset: usize,
    length: usize,
    /// For an input whose dimensions the model leaves unknown: the request's shape.
    shape: Option<Vec<usize>>,
    /// A pool's generation when bound (a resize changes it).
    generation: Option<u64>,
}

impl Binding {
    fn overlaps(&self, other: &Binding) -> bool {
        self.memory.id() == other.memory.id()
            && self.offset < other.offset + other.length.max(1)
            && other.offset < self.offset + self.length.max(1)
    }
}

/// What a compute reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The actual shape of every output.
    pub output_shapes: Vec<Vec<usize>>,
    /// Bytes written to every output.
    pub output_sizes: Vec<usize>,
    /// Running the graph, and the whole call (binding checks, locking, queueing).
    pub timing: Timing,
}

/// The two durations of a fenced execution (the NN API's driver page).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FencedTiming {
    /// From the call that launched it to its completion.
    pub launched: Duration,
    /// From when the last fence it waited for signalled to its completion.
    pub fenced: Duration,
}

/// A reusable execution (see the module documentation).
pub struct Execution {
    model: Arc<PreparedModel>,
    inputs: Vec<Option<Binding>>,
    outputs: Vec<Option<Binding>>,
    options: ExecuteOptions,
    timeout: Option<Duration>,
    running: Arc<AtomicBool>,
}

/// Clears an execution's running flag when a compute ends, however it ends.
struct RunningGuard(Arc<AtomicBool>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Everything a compute needs, owned, so a queued compute can outlive the call.
struct Request {
    model: Arc<PreparedModel>,
    inputs: Vec<Binding>,
    outputs: Vec<Binding>,
    options: ExecuteOptions,
    timeout: Option<Duration>,
}

impl Execution {
    /// A new execution of `model` with nothing bound.
    pub fn new(model: &Arc<PreparedModel>) -> Execution {
        Execution {
            inputs: vec![None; model.io_count(IoKind::Input)],
            outputs: vec![None; model.io_count(IoKind::Output)],
            model: Arc::clone(model),
            options: ExecuteOptions::default(),
            timeout: None,
            running: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn model(&self) -> &Arc<PreparedModel> {
        &self.model
    }

    /// Binds input `index` to `length` bytes of `memory` at `offset` (0 and 0 for a
    /// domain buffer). `shape` is required when the model leaves the input's dimensions
    /// unknown, and must agree with them otherwise.
    pub fn set_input(
        &mut self,
        index: usize,
        memory: &Arc<Memory>,
        offset: usize,
        length: usize,
        shape: Option<&[usize]>,
    ) -> Result<()> {
        self.bind(IoKind::Input, index, memory, offset, length, shape)
    }

    /// Binds output `index` (see [`Execution::set_input`]); the region must not overlap
    /// any other binding's.
    pub fn set_output(
        &mut self,
        index: usize,
        memory: &Arc<Memory>,
        offset: usize,
        length: usize,
    ) -> Result<()> {
        self.bind(IoKind::Output, index, memory, offset, length, None)
    }

    /// Binds a whole pool (offset 0, its length) or a domain buffer to input `index`.
    pub fn set_input_memory(&mut self, index: usize, memory: &Arc<Memory>) -> Result<()> {
        let length = memory.domain().map_or(memory.len(), |_| 0);
        self.set_input(index, memory, 0, length, None)
    }

    /// Binds a whole pool or a domain buffer to output `index`.
    pub fn set_output_memory(&mut self, index: usize, memory: &Arc<Memory>) -> Result<()> {
        let length = memory.domain().map_or(memory.len(), |_| 0);
        self.set_output(index, memory, 0, length)
    }

    /// The longest an execution may take, from the compute call (or the fences'
    /// signal, for a fenced one): missing it fails with a missed deadline.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// The loop timeout of the model's WHILE loops (default 2 s, at most 15 s).
    pub fn set_loop_timeout(&mut self, timeout: Duration) -> Result<()> {
        self.options = self.options.with_loop_timeout(timeout)?;
        Ok(())
    }

    fn bind(
        &mut self,
        kind: IoKind,
        index: usize,
        memory: &Arc<Memory>,
        offset: usize,
        length: usize,
        shape: Option<&[usize]>,
    ) -> Result<()> {
        if self.running.load(Ordering::Acquire) {
            return Err(RuntimeError::ExecutionState(
                "bindings cannot change while the execution computes".into(),
            ));
        }
        let fail = |message: String| RuntimeError::Binding {
            kind,
            index,
            message,
        };
        let count = self.model.io_count(kind);
        let operand = self
            .model
            .io_operand(kind, index)
            .ok_or_else(|| fail(format!("the model has {count} {kind}s")))?;
        let declared: Vec<usize> = operand.dimensions.iter().map(|&d| d as usize).collect();
        let shape = match shape {
            None => None,
            Some(s) => {
                let agrees = declared.is_empty()
                    || (declared.len() == s.len()
                        && declared.iter().zip(s).all(|(&d, &x)| d == 0 || d == x));
                if !agrees {
                    return Err(fail(format!(
                        "shape {s:?} disagrees with the model's {declared:?}"
                    )));
                }
                Some(s.to_vec())
            }
        };
        let generation = match memory.domain() {
            Some(desc) => {
                if !desc.allows(self.model.id(), kind, index) {
                    return Err(fail(format!(
                        "memory {} is a domain buffer not declared for {kind} {index} of this \
                         model (model {}); its roles: {}",
                        memory.id(),
                        self.model.id(),
                        desc.roles
                            .iter()
                            .map(|r| format!("model {} {} {}", r.model, r.kind, r.index))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                if offset != 0 || length != 0 {
                    return Err(fail(
                        "a domain buffer is bound whole: offset and length must be 0".into(),
                    ));
                }
                None
            }
            None => {
                let len = memory.len();
                let end = offset.checked_add(length).filter(|&e| e <= len);
                if end.is_none() {
                    return Err(fail(format!(
                        "bytes {offset}..{} are beyond memory {}'s {len} bytes",
                        offset.saturating_add(length),
                        memory.id()
                    )));
                }
                let known = shape.clone().or_else(|| {
                    (!declared.is_empty() && !declared.contains(&0)).then(|| declared.clone())
                });
                match (kind, known) {
                    (IoKind::Input, Some(s)) => {
                        let needed = value_bytes(operand.operand_type, &s);
                        if needed != Some(length) {
                            return Err(fail(format!(
                                "shape {s:?} of {} takes {} bytes; the region has {length}",
                                operand.operand_type,
                                needed.map_or("too many".into(), |n| n.to_string())
                            )));
                        }
                    }
                    (IoKind::Input, None) => {
                        return Err(fail(format!(
                            "the model's dimensions {declared:?} are not all known: give the \
                             input's shape"
                        )));
                    }
                    // An output whose size is known only when computed is checked then.
                    (IoKind::Output, _) => {}
                }
                memory.generation()
            }
        };
        let binding = Binding {
            memory: Arc::clone(memory),
            offset,
            length,
            shape,
            generation,
        };
        // An output may share a memory with other bindings only in disjoint regions: the
        // runtime writes it while reading the others.
        let others = self
            .inputs
            .iter()
            .enumerate()
            .map(|(k, b)| (IoKind::Input, k, b))
            .chain(
                self.outputs
                    .iter()
                    .enumerate()
                    .map(|(k, b)| (IoKind::Output, k, b)),
            )
            .filter(|&(other_kind, k, _)| (other_kind, k) != (kind, index));
        for (other_kind, k, other) in others {
            if let Some(other) = other
                && (kind == IoKind::Output || other_kind == IoKind::Output)
                && binding.overlaps(other)
            {
                return Err(fail(format!(
                    "its region of memory {} overlaps {other_kind} {k}'s, and one of them is \
                     written",
                    memory.id()
                )));
            }
        }
        let slot = match kind {
            IoKind::Input => &mut self.inputs[index],
            IoKind::Output => &mut self.outputs[index],
        };
        *slot = Some(binding);
        Ok(())
    }

    /// Claims the execution for one compute and snapshots its request.
    fn begin(&self) -> Result<(RunningGuard, Request)> {
        let complete = |list: &[Option<Binding>], kind: IoKind| -> Result<Vec<Binding>> {
            list.iter()
                .enumerate()
                .map(|(index, b)| {
                    b.clone().ok_or_else(|| RuntimeError::Binding {
                        kind,
                        index,
                        message: "not bound".into(),
                    })
                })
                .collect()
        };
        let inputs = complete(&self.inputs, IoKind::Input)?;
        let outputs = complete(&self.outputs, IoKind::Output)?;
        if self
            .running
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(RuntimeError::ExecutionState(
                "it is still computing (one execution computes one request at a time)".into(),
            ));
        }
        Ok((
            RunningGuard(Arc::clone(&self.running)),
            Request {
                model: Arc::clone(&self.model),
                inputs,
                outputs,
                options: self.options,
                timeout: self.timeout,
            },
        ))
    }

    /// Computes synchronously on this thread.
    pub fn compute(&self) -> Result<Outcome> {
        let (_running, request) = self.begin()?;
        request.run(Instant::now(), None, None)
    }

    /// Queues the compute on the model's scheduler at its priority.
    pub fn start_compute(&self) -> Result<Pending<Outcome>> {
        let (running, request) = self.begin()?;
        let submitted = Instant::now();
        let model = Arc::clone(&request.model);
        Pending::submit(&*model.scheduler()?, model.priority(), move || {
            let _running = running;
            request.run(submitted, None, None)
        })
    }

    /// A fenced compute: queued once every fence of `wait_for` has signalled (at once
    /// if there are none), failing without running if one of them failed; the returned
    /// fence signals when it is done. `timeout_after_fences` bounds the time from the
    /// fences' signal to completion (a missed deadline).
    pub fn start_compute_after(
        &self,
        wait_for: &[Fence],
        timeout_after_fences: Option<Duration>,
    ) -> Result<FencedExecution> {
        let (running, request) = self.begin()?;
        let called = Instant::now();
        let pending: Pending<(Outcome, FencedTiming)> = Pending::new();
        let (fence, slot) = pending.parts();
        // The callback runs once: on the thread that signals the last fence, or here.
        Fence::all(wait_for).on_signal(move |state| {
            if let FenceState::Failed(message) = state {
                drop(running);
                complete(
                    &fence,
                    &slot,
                    Err(RuntimeError::ExecutionState(format!(
                        "a fence it waited for failed: {message}"
                    ))),
                );
                return;
            }
            let signalled = Instant::now();
            let deadline = timeout_after_fences.and_then(|t| signalled.checked_add(t));
            let model = Arc::clone(&request.model);
            let (fence2, slot2) = (fence.clone(), Arc::clone(&slot));
            let queued = model.scheduler().and_then(|scheduler| {
                scheduler.submit(model.priority(), move || {
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        request.run(signalled, deadline, None)
                    }))
                    .unwrap_or_else(|_| Err(RuntimeError::Internal("an execution panicked".into())))
                    .map(|outcome| {
                        let done = Instant::now();
                        (
                            outcome,
                            FencedTiming {
                                launched: done - called,
                                fenced: done - signalled,
                            },
                        )
                    });
                    // Released before the fence signals, so a waiter woken by it may
                    // compute the execution again at once.
                    drop(running);
                    complete(&fence2, &slot2, result);
                })
            });
            if let Err(e) = queued {
                complete(&fence, &slot, Err(e));
            }
        });
        Ok(FencedExecution { pending })
    }

    /// Computes through `burst` (synchronously, on this thread): see [`Burst`].
    pub fn compute_in(&self, burst: &Burst) -> Result<Outcome> {
        if burst.model.id() != self.model.id() {
            return Err(RuntimeError::ExecutionState(format!(
                "the burst belongs to model {}, the execution to model {}",
                burst.model.id(),
                self.model.id()
            )));
        }
        let (_running, request) = self.begin()?;
        burst.remember(request.inputs.iter().chain(&request.outputs));
        let mut state = burst.state.lock().unwrap_or_else(PoisonError::into_inner);
        request.run(Instant::now(), None, Some(&mut state))
    }
}

/// A fenced execution in flight.
pub struct FencedExecution {
    pending: Pending<(Outcome, FencedTiming)>,
}

impl FencedExecution {
    /// Signals when the execution is done (failed if it failed).
    pub fn fence(&self) -> &Fence {
        self.pending.fence()
    }

    /// Waits for the execution: its outcome and its two durations.
    pub fn wait(self) -> Result<(Outcome, FencedTiming)> {
        self.pending.wait()
    }
}

/// A sequence of executions of one prepared model with the least overhead per
/// execution: it runs on the caller's thread on an execution state of its own (no
/// queue, no contention for the program's states), and keeps every memory it has seen,
/// by identifier, until [`Burst::forget`] (the NN API's burst memory cache: a cached
/// memory stays alive while the burst holds it).
pub struct Burst {
    model: Arc<PreparedModel>,
    memories: Mutex<HashMap<u64, Arc<Memory>>>,
    state: Mutex<ExecState>,
}

impl Burst {
    pub fn new(model: &Arc<PreparedModel>) -> Burst {
        Burst {
            model: Arc::clone(model),
            memories: Mutex::new(HashMap::new()),
            state: Mutex::new(ExecState::default()),
        }
    }

    fn remember<'a>(&self, bindings: impl Iterator<Item = &'a Binding>) {
        let mut memories = self.memories.lock().unwrap_or_else(PoisonError::into_inner);
        for b in bindings {
            memories
                .entry(b.memory.id())
                .or_insert_with(|| Arc::clone(&b.memory));
        }
    }

    /// Drops the burst's hold on a memory; true if it held it.
    pub fn forget(&self, memory: &Memory) -> bool {
        self.memories
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&memory.id())
            .is_some()
    }

    /// How many memories the burst holds.
    pub fn cached_memories(&self) -> usize {
        self.memories
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Runs the burst's model on host tensors (the source model's element types, as
    /// [`PreparedModel::run_with`]) on the burst's own execution state, on this thread:
    /// the path of callers that bind no memory objects (the C API's pointer bindings).
    pub fn run_host(
        &self,
        inputs: &[HostTensor],
        options: &ExecuteOptions,
    ) -> Result<(Vec<HostTensor>, Timing)> {
        let start = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let views: Vec<_> = inputs.iter().map(HostTensor::view).collect();
        let (outputs, device) = self.model.under_deadline(options, start, || {
            self.model
                .program()
                .execute_host_in(&views, options, Some(&mut state))
        })?;
        Ok((
            outputs,
            Timing {
                on_device: device,
                in_driver: start.elapsed(),
            },
        ))
    }
}

/// A memory's lock during one compute.
enum Guard<'m> {
    Read(RwLockReadGuard<'m, State>),
    Write(RwLockWriteGuard<'m, State>),
}

impl Guard<'_> {
    fn state(&self) -> &State {
        match self {
            Guard::Read(g) => g,
            Guard::Write(g) => g,
        }
    }
}

/// Whether a shape fits a domain buffer's dimensions.
type ShapeCheck = Box<dyn Fn(&[usize]) -> bool>;

/// Where a pool's bytes are during one compute.
#[derive(Clone)]
enum Base {
    /// An in-memory pool: pointer, length and generation, valid while its lock is held.
    Ptr(*mut u8, usize, u64),
    /// A file pool (never mapped): accessed with `pread`/`pwrite`, and its generation.
    File(Arc<FilePool>, u64),
}

/// A bound region of a pool during one compute.
enum Area {
    Ptr(*mut u8, usize),
    /// `length` bytes at `offset` of a file pool.
    File(Arc<FilePool>, usize, usize),
}

/// Where an output goes.
enum Target {
    /// A region of a pool: pointer and length, valid while its write lock is held.
    Region(*mut u8, usize),
    /// A region of a file pool: the memory's identifier, offset and length.
    File {
        memory: u64,
        file: Arc<FilePool>,
        offset: usize,
        length: usize,
    },
    /// A domain buffer: the value is stored after the run.
    Domain { memory: usize, accepts: ShapeCheck },
}

struct BindingSink {
    targets: Vec<Target>,
    shapes: Vec<Vec<usize>>,
    domain_values: Vec<Option<DomainValue>>,
}

// SAFETY: the raw pointers point into pools whose write locks the computing thread
// holds for the sink's whole life; the sink never leaves that thread's call.
unsafe impl Send for BindingSink {}

impl Sink for BindingSink {
    fn check(&mut self, shapes: &[Vec<usize>], sizes: &[usize]) -> Result<()> {
        for (output, (target, (shape, &needed))) in self
            .targets
            .iter()
            .zip(shapes.iter().zip(sizes))
            .enumerate()
        {
            match target {
                Target::Region(_, len) | Target::File { length: len, .. } if *len < needed => {
                    return Err(RuntimeError::OutputTooSmall {
                        output,
                        needed,
                        provided: *len,
                    });
                }
                Target::Domain { accepts, .. } if !accepts(shape) => {
                    return Err(RuntimeError::Binding {
                        kind: IoKind::Output,
                        index: output,
                        message: format!(
                            "the output's shape {shape:?} does not fit its domain buffer's \
                             dimensions"
                        ),
                    });
                }
                _ => {}
            }
        }
        self.shapes = shapes.to_vec();
        self.domain_values = self.targets.iter().map(|_| None).collect();
        Ok(())
    }

    fn write(&mut self, output: usize, bytes: &[u8]) -> Result<()> {
        match self.targets.get(output) {
            Some(Target::Region(ptr, len)) if bytes.len() <= *len => {
                // SAFETY: `ptr..ptr+len` is a region of a pool this thread holds
                // exclusively (write lock), disjoint from every other region formed in
                // this compute (checked at binding).
                let region = unsafe { std::slice::from_raw_parts_mut(*ptr, *len) };
                region[..bytes.len()].copy_from_slice(bytes);
                Ok(())
            }
            Some(Target::File {
                memory,
                file,
                offset,
                length,
            }) if bytes.len() <= *length => {
                file.write_at(*offset, bytes)
                    .map_err(|message| RuntimeError::Memory {
                        memory: *memory,
                        message,
                    })
            }
            Some(Target::Domain { .. }) => {
                self.domain_values[output] = Some(DomainValue {
                    shape: self.shapes.get(output).cloned().unwrap_or_default(),
                    data: AlignedBuf::from_bytes(bytes)?,
                });
                Ok(())
            }
            _ => Err(RuntimeError::Internal(format!(
                "output {output} has no room for {} bytes",
                bytes.len()
            ))),
        }
    }
}

impl Request {
    /// Runs the request: the deadline is the earlier of the execution's timeout from
    /// `start` and `deadline`.
    fn run(
        &self,
        start: Instant,
        deadline: Option<Instant>,
        state: Option<&mut ExecState>,
    ) -> Result<Outcome> {
        let timeout_deadline = self.timeout.and_then(|t| start.checked_add(t));
        let deadline = match (deadline, timeout_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let options = ExecuteOptions {
            deadline,
            ..self.options
        };
        let model = &self.model;
        let (output_shapes, device) = model.under_deadline(&options, start, || {
            // Lock every memory once, in identifier order.
            let mut order: Vec<(u64, &Arc<Memory>, bool)> = Vec::new();
            for (b, writes) in self
                .inputs
                .iter()
                .map(|b| (b, false))
                .chain(self.outputs.iter().map(|b| (b, true)))
            {
                match order.iter_mut().find(|(id, _, _)| *id == b.memory.id()) {
                    Some(entry) => entry.2 |= writes,
                    None => order.push((b.memory.id(), &b.memory, writes)),
                }
            }
            order.sort_by_key(|(id, _, _)| *id);
            let mut guards: Vec<(u64, Guard)> = order
                .iter()
                .map(|&(id, memory, writes)| {
                    (
                        id,
                        if writes {
                            Guard::Write(memory.write())
                        } else {
                            Guard::Read(memory.read())
                        },
                    )
                })
                .collect();
            let slot = |id: u64| guards.iter().position(|(g, _)| *g == id).unwrap_or(0);
            let slots: Vec<usize> = self
                .inputs
                .iter()
                .chain(&self.outputs)
                .map(|b| slot(b.memory.id()))
                .collect();
            // Base pointers of pools, taken once per memory (a write guard yields a
            // mutable pointer, from which every region of that memory is formed); file
            // pools are never mapped and are read and written through their descriptor.
            let mut bases: Vec<Option<Base>> = Vec::with_capacity(guards.len());
            for (id, guard) in guards.iter_mut() {
                let memory = order
                    .iter()
                    .find(|(m, _, _)| m == id)
                    .map(|(_, m, _)| *m)
                    .ok_or_else(|| RuntimeError::Internal("a lock without a memory".into()))?;
                bases.push(match guard {
                    Guard::Write(g) => match &mut **g {
                        State::Pool { pool, generation } => {
                            pool.check_file().map_err(|m| memory.error(m))?;
                            let generation = *generation;
                            Some(match pool.file() {
                                Some(f) => Base::File(Arc::clone(f), generation),
                                None => {
                                    let bytes = pool.bytes_mut().ok_or_else(|| {
                                        RuntimeError::Internal("a pool without bytes".into())
                                    })?;
                                    Base::Ptr(bytes.as_mut_ptr(), bytes.len(), generation)
                                }
                            })
                        }
                        State::Released => return Err(memory.error("it was released")),
                        State::Domain(_) => None,
                    },
                    Guard::Read(g) => match &**g {
                        State::Pool { pool, generation } => {
                            pool.check_file().map_err(|m| memory.error(m))?;
                            Some(match (pool.file(), pool.in_memory()) {
                                (Some(f), _) => Base::File(Arc::clone(f), *generation),
                                // Only read through: the memory is locked shared.
                                (None, Some(bytes)) => {
                                    Base::Ptr(bytes.as_ptr().cast_mut(), bytes.len(), *generation)
                                }
                                (None, None) => {
                                    return Err(RuntimeError::Internal(
                                        "a pool without bytes".into(),
                                    ));
                                }
                            })
                        }
                        State::Released => return Err(memory.error("it was released")),
                        State::Domain(_) => None,
                    },
                });
            }
            let region = |b: &Binding, base: &Option<Base>| -> Result<Area> {
                let stale = || {
                    b.memory
                        .error("it was resized after the execution was bound; bind it again")
                };
                match base {
                    None => Err(b.memory.error("not a pool")),
                    Some(Base::Ptr(ptr, len, generation)) => {
                        if b.generation != Some(*generation) || b.offset + b.length > *len {
                            return Err(stale());
                        }
                        // SAFETY: offset + length <= len, checked just above.
                        Ok(Area::Ptr(unsafe { ptr.add(b.offset) }, b.length))
                    }
                    Some(Base::File(file, generation)) => {
                        if b.generation != Some(*generation) || b.offset + b.length > file.len() {
                            return Err(stale());
                        }
                        Ok(Area::File(Arc::clone(file), b.offset, b.length))
                    }
                }
            };
            // Inputs in file pools are read now, with `pread`: a file truncated since is
            // an error here, never a fault during the run.
            let mut staged: Vec<Option<AlignedBuf>> = Vec::with_capacity(self.inputs.len());
            for (k, b) in self.inputs.iter().enumerate() {
                let g = slots[k];
                staged.push(match guards[g].1.state() {
                    State::Pool { .. } => match region(b, &bases[g])? {
                        Area::File(file, offset, length) => {
                            let mut buf = AlignedBuf::zeroed(length)?;
                            file.read_at(offset, buf.as_bytes_mut())
                                .map_err(|m| b.memory.error(m))?;
                            Some(buf)
                        }
                        Area::Ptr(..) => None,
                    },
                    _ => None,
                });
            }
            let mut input_tensors = Vec::with_capacity(self.inputs.len());
            for (k, b) in self.inputs.iter().enumerate() {
                let g = slots[k];
                input_tensors.push(match guards[g].1.state() {
                    State::Domain(None) => {
                        return Err(b.memory.error(
                            "the domain buffer has no value yet: an execution must write it \
                             or a pool be copied into it first",
                        ));
                    }
                    State::Domain(Some(v)) => InputTensor::with_shape(&v.shape, v.data.as_bytes()),
                    _ => {
                        let data = match (&staged[k], region(b, &bases[g])?) {
                            (Some(buf), _) => buf.as_bytes(),
                            (None, Area::Ptr(ptr, len)) => {
                                // SAFETY: a region of a pool locked for this compute; no
                                // output region overlaps it (checked at binding).
                                unsafe { std::slice::from_raw_parts(ptr.cast_const(), len) }
                            }
                            (None, Area::File(..)) => {
                                return Err(RuntimeError::Internal(
                                    "a file input was not read".into(),
                                ));
                            }
                        };
                        InputTensor {
                            data,
                            shape: b.shape.as_deref(),
                        }
                    }
                });
            }
            let mut targets = Vec::with_capacity(self.outputs.len());
            for (k, b) in self.outputs.iter().enumerate() {
                let g = slots[self.inputs.len() + k];
                targets.push(match b.memory.domain() {
                    Some(desc) => {
                        let desc = desc.clone();
                        Target::Domain {
                            memory: g,
                            accepts: Box::new(move |s| desc.accepts(s)),
                        }
                    }
                    None => match region(b, &bases[g])? {
                        Area::Ptr(ptr, len) => Target::Region(ptr, len),
                        Area::File(file, offset, length) => Target::File {
                            memory: b.memory.id(),
                            file,
                            offset,
                            length,
                        },
                    },
                });
            }
            let mut sink = BindingSink {
                targets,
                shapes: Vec::new(),
                domain_values: Vec::new(),
            };
            let ran = Instant::now();
            let shapes =
                model
                    .program()
                    .run_reserved(&input_tensors, &mut sink, &options, state)?;
            let device = ran.elapsed();
            drop(input_tensors);
            for (target, value) in sink.targets.iter().zip(sink.domain_values.drain(..)) {
                if let (Target::Domain { memory, .. }, Some(value)) = (target, value)
                    && let Guard::Write(g) = &mut guards[*memory].1
                {
                    **g = State::Domain(Some(value));
                }
            }
            Ok((shapes, device))
        })?;
        let output_sizes = output_shapes
            .iter()
            .enumerate()
            .map(|(k, s)| {
                model
                    .io_operand(IoKind::Output, k)
                    .and_then(|o| value_bytes(o.operand_type, s))
                    .unwrap_or(0)
            })
            .collect();
        Ok(Outcome {
            output_shapes,
            output_sizes,
            timing: Timing {
                on_device: device,
                in_driver: start.elapsed(),
            },
        })
    }
}
