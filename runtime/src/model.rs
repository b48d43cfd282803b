//! Loading `.nnc` files and executing them: the host-side API.
//!
//! ```no_run
//! use nnc_runtime::{LoadOptions, PreparedModel, SimulatedNpu};
//! # fn run(key: &[u8], input: nnc_formats::tensor::HostTensor) -> Result<(), nnc_runtime::RuntimeError> {
//! let npu = SimulatedNpu::new("npu0");
//! npu.install_key(key); // write-only
//! let model = PreparedModel::load_file("model.nnc".as_ref(), &npu, &LoadOptions::default())?;
//! let outputs = model.run(&[input])?;
//! # Ok(()) }
//! ```

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nnc_formats::container::{
    Container, ContainerError, FileSource, Header, SectionKind, Source, copy_metadata_from,
};
use nnc_formats::nn::IoInfo;
use nnc_formats::plan::ExecutionPlan;
use nnc_formats::tensor::HostTensor;

use crate::cache::{self, CacheConfig, CacheOutcome, CacheReport};
use crate::device::{CacheStats, NpuWeights, SimulatedNpu};
use crate::error::{DeadlineKind, DeadlineStage, Result, RuntimeError};
use crate::exec::{
    ExecuteOptions, InputTensor, OutputBuffer, PrepareOptions, Program, WeightProvider,
};
use crate::execution::{IoKind, Pending, Priority, Scheduler};
use crate::kernels::{FloatMath, Kernel, KernelOptions, PreparedWeights, Requantization};

/// Where the devices a model runs on come from: a single device runs every step; a
/// [`Devices`] set maps each device a model's execution plan names to its simulation.
pub trait DeviceSource {
    /// The device for a plan's device name.
    fn device_for(&self, name: &str) -> &SimulatedNpu;
}

impl DeviceSource for SimulatedNpu {
    fn device_for(&self, _: &str) -> &SimulatedNpu {
        self
    }
}

/// Several simulated devices, looked up by name; the first serves plan devices it has no
/// match for.
pub struct Devices {
    devices: Vec<SimulatedNpu>,
}

impl Devices {
    /// A set of devices; it must not be empty.
    pub fn new(devices: Vec<SimulatedNpu>) -> Result<Devices> {
        if devices.is_empty() {
            return Err(RuntimeError::Internal(
                "a device set needs at least one device".into(),
            ));
        }
        Ok(Devices { devices })
    }

    /// Installs the same key in every device's key store (write-only).
    pub fn install_key(&self, key: &[u8]) {
        for d in &self.devices {
            d.install_key(key);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &SimulatedNpu> {
        self.devices.iter()
    }
}

impl DeviceSource for Devices {
    fn device_for(&self, name: &str) -> &SimulatedNpu {
        self.devices
            .iter()
            .find(|d| d.name() == name)
            .unwrap_or(&self.devices[0])
    }
}

/// Routes each operation's weight requests to the device that runs it.
struct PlanWeights {
    by_operation: Vec<usize>,
    devices: Vec<Arc<NpuWeights>>,
}

impl PlanWeights {
    fn device(&self, operation: usize) -> Result<&Arc<NpuWeights>> {
        self.by_operation
            .get(operation)
            .and_then(|&d| self.devices.get(d))
            .ok_or_else(|| RuntimeError::Internal(format!("no device runs operation {operation}")))
    }
}

impl WeightProvider for PlanWeights {
    fn weights(&self, operation: usize, kernel: &dyn Kernel) -> Result<Arc<PreparedWeights>> {
        self.device(operation)?.weights(operation, kernel)
    }

    fn preload(&self, operation: usize, kernel: &dyn Kernel) -> Result<()> {
        self.device(operation)?.preload(operation, kernel)
    }
}

/// The bytes of a `.nnc` file: an open file read at offsets, or bytes in memory. Open one
/// to read the file's public structure (such as its execution plan) and then load it.
pub struct ModelFile(ModelBytes);

enum ModelBytes {
    /// Read with positional reads, each into a buffer of the reader's own, never
    /// memory-mapped: a file truncated by another process is then an error
    /// ([`ContainerError::Shrank`]) rather than a SIGBUS, and a weight field is checked
    /// and decrypted from bytes no other process can change.
    File(FileSource),
    Owned(Vec<u8>),
}

impl ModelFile {
    /// Opens a `.nnc` file. Weights are read only when a device reads them, so a model
    /// prepared from a compilation cache never reads its weight region at all.
    pub fn open(path: &Path) -> Result<ModelFile> {
        let file = FileSource::open(path).map_err(|e| RuntimeError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Ok(ModelFile(ModelBytes::File(file)))
    }

    /// A `.nnc` file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> ModelFile {
        ModelFile(ModelBytes::Owned(bytes))
    }

    /// The file's public structure, parsed from a copy of its metadata region and not
    /// authenticated (a device authenticates the file when it loads).
    pub fn parse(&self) -> std::result::Result<Container<'_>, ContainerError> {
        let metadata = copy_metadata_from(self)?;
        Container::parse_source(self, metadata)
    }
}

impl Source for ModelFile {
    fn len(&self) -> u64 {
        match &self.0 {
            ModelBytes::File(f) => f.len(),
            ModelBytes::Owned(v) => Source::len(v),
        }
    }

    fn read_at(
        &self,
        offset: u64,
        buf: &mut [u8],
        what: &dyn Fn() -> String,
    ) -> std::result::Result<(), ContainerError> {
        match &self.0 {
            ModelBytes::File(f) => f.read_at(offset, buf, what),
            ModelBytes::Owned(v) => v.read_at(offset, buf, what),
        }
    }

    fn in_memory(&self) -> Option<&[u8]> {
        match &self.0 {
            ModelBytes::File(_) => None,
            ModelBytes::Owned(v) => Some(v),
        }
    }
}

/// How to load a model.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Threads for intra-operation parallelism (1: nothing is spawned).
    pub threads: usize,
    /// Prepare from (and write) a compilation cache.
    pub cache: Option<CacheConfig>,
    /// How quantized convolutions and products requantize.
    pub requantization: Requantization,
    /// How closely float32 operations follow float32 arithmetic ([`FloatMath::Fast`]
    /// allows Winograd convolutions).
    pub float_math: FloatMath,
    /// How much memory the model may make the runtime allocate.
    pub limits: nnc_formats::limits::Limits,
    /// The model's priority among executions queued on the same scheduler.
    pub priority: Priority,
    /// Where asynchronous, fenced and burst executions queue (None: the process's
    /// [`Scheduler::global`]).
    pub scheduler: Option<Arc<Scheduler>>,
    /// When preparation must be done; checked between its phases (authentication,
    /// device attachment, kernel preparation), failing with
    /// [`RuntimeError::MissedDeadline`].
    pub deadline: Option<Instant>,
    /// Run adjacent operations as one where a fused kernel exists
    /// ([`PrepareOptions::fusion`]); the results are the same bits either way.
    pub fusion: bool,
    /// When not empty, only a file signed by one of these keys loads (format 1.3
    /// signatures, checked before the file is authenticated or parsed).
    pub trusted_signers: Vec<nnc_formats::crypto::PublicKey>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            threads: 1,
            cache: None,
            requantization: Requantization::default(),
            float_math: FloatMath::default(),
            limits: nnc_formats::limits::Limits::default(),
            priority: Priority::default(),
            scheduler: None,
            deadline: None,
            fusion: true,
            trusted_signers: Vec::new(),
        }
    }
}

/// Timing of one execution, when asked for (NNAPI's timing: on the device, and in the
/// driver including input and output conversion).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Timing {
    pub on_device: Duration,
    pub in_driver: Duration,
}

/// A loaded, verified, prepared model. Executions take `&self` and may run concurrently.
pub struct PreparedModel {
    program: Program,
    /// One per device the model runs on (one without an execution plan).
    devices: Vec<Arc<NpuWeights>>,
    plan: Option<ExecutionPlan>,
    header: Header,
    prepare_time: Duration,
    cache_report: CacheReport,
    /// Process-unique: memory-domain roles and bursts name models by it.
    id: u64,
    priority: Priority,
    scheduler: Option<Arc<Scheduler>>,
    /// The fastest completed execution, in nanoseconds (u64::MAX: none yet); a deadline
    /// shorter than this is a persistent miss.
    fastest: AtomicU64,
}

static NEXT_MODEL_ID: AtomicU64 = AtomicU64::new(1);

/// Fails when a preparation deadline has passed (checked between phases).
fn check_prepare_deadline(deadline: Option<Instant>, phase: &str) -> Result<()> {
    match deadline {
        Some(d) if Instant::now() >= d => Err(RuntimeError::MissedDeadline {
            kind: DeadlineKind::Transient,
            stage: DeadlineStage::Preparation,
            detail: format!("it passed {phase}"),
        }),
        _ => Ok(()),
    }
}

impl PreparedModel {
    /// Loads a `.nnc` file, reading it at offsets (never memory-mapped).
    pub fn load_file(
        path: &Path,
        devices: &impl DeviceSource,
        options: &LoadOptions,
    ) -> Result<PreparedModel> {
        PreparedModel::load(ModelFile::open(path)?, devices, options)
    }

    /// Loads a `.nnc` file held in memory.
    pub fn load_bytes(
        bytes: Vec<u8>,
        devices: &impl DeviceSource,
        options: &LoadOptions,
    ) -> Result<PreparedModel> {
        PreparedModel::load(ModelFile::from_bytes(bytes), devices, options)
    }

    /// Loads an opened `.nnc` file.
    pub fn load(
        file: ModelFile,
        devices: &impl DeviceSource,
        options: &LoadOptions,
    ) -> Result<PreparedModel> {
        PreparedModel::load_shared(Arc::new(file), devices, options)
    }

    fn load_shared(
        bytes: Arc<ModelFile>,
        devices: &impl DeviceSource,
        options: &LoadOptions,
    ) -> Result<PreparedModel> {
        let start = Instant::now();
        check_prepare_deadline(options.deadline, "before preparation began")?;
        // Host side: parse the header and the file's public structure (the execution
        // plan), and program each device's crypto control register.
        let data: &ModelFile = &bytes;
        // Nothing of the file is trusted before a device holding the key authenticates it.
        // The metadata region is copied once; authentication, the host's parse and every
        // device's parse read that copy, never the file again.
        let metadata = copy_metadata_from(data)?;
        // A signature needs no secret: whoever holds a decryption key could re-tag a file,
        // but only the signer can sign one.
        if !options.trusted_signers.is_empty() {
            nnc_formats::container::verify_signature(data, &metadata, &options.trusted_signers)?;
        }
        devices.device_for("").authenticate(&metadata)?;
        check_prepare_deadline(options.deadline, "while the file was authenticated")?;
        let (header, plan, op_count, kernel_options) = {
            let container = Container::parse_source(data, metadata.clone())?;
            let op_count = container.model.main.operations.len();
            // What the kernels are built with, as the program will build them (a model
            // that allows relaxed computation gets fast float math whatever the option).
            let kernel_options = KernelOptions {
                requantization: options.requantization,
                float_math: options.float_math,
            }
            .for_model(container.model.relax_computation_float32_to_float16);
            let plan = match container.section(SectionKind::ExecutionPlan) {
                Some(section) => Some(
                    ExecutionPlan::from_bytes(
                        section,
                        op_count,
                        container.model.main.operands.len(),
                    )
                    .map_err(|e| RuntimeError::InvalidPlan(e.to_string()))?,
                ),
                None => None,
            };
            (container.header.clone(), plan, op_count, kernel_options)
        };
        let register = header.crypto;
        // Compilation cache: try every step's entry before touching a weight field.
        let mut report = CacheReport::none();
        let mut cache_dir = match &options.cache {
            Some(cfg) => Some((
                nnc_formats::cache::CacheDir::open(&cfg.dir, cache::CACHE_VERSION)
                    .map_err(|e| RuntimeError::Cache(e.to_string()))?,
                cfg,
            )),
            None => None,
        };
        let device_names: Vec<String> = match &plan {
            Some(p) => p.devices.iter().map(|d| d.name.clone()).collect(),
            None => vec![devices.device_for("").name().to_string()],
        };
        let key_for = |device: usize, token: &nnc_formats::cache::Token| {
            devices
                .device_for(device_names.get(device).map_or("", String::as_str))
                .cache_key(token)
        };
        let mut hit = None;
        let mut steps = Vec::new();
        if let Some((dir, cfg)) = &cache_dir {
            let model_id: Vec<u8> = cfg.token.map_or(header.tag.to_vec(), |t| t.to_vec());
            steps = cache::steps(
                plan.as_ref(),
                op_count,
                &model_id,
                &header.tag,
                &device_names[0],
                kernel_options.float_math,
            );
            hit = cache::try_hit(dir, &steps, &key_for, &mut report.warnings)?;
            report.outcome = if hit.is_some() {
                CacheOutcome::Hit
            } else {
                CacheOutcome::Miss
            };
        }
        if cache_dir.is_some() && steps.iter().all(|s| s.model_files == 0) {
            // Every device the plan uses declares no cache files (as NNAPI drivers without
            // caching support do): there is nothing to prepare from or to write.
            let names: Vec<&str> = plan
                .as_ref()
                .map(|p| p.devices.iter().map(|d| d.name.as_str()).collect())
                .unwrap_or_default();
            report.warnings.push(format!(
                "the cache directory is not used: no device this model runs on ({}) keeps a \
                 compilation cache (their profiles declare cache_files 0)",
                names.join(", ")
            ));
            report.outcome = CacheOutcome::None;
            cache_dir = None;
        }
        // Device side: each device authenticates the file, verifies the weight fields of
        // the operations it runs (unless the cache supplies their prepared weights), and
        // sets up its decrypt path.
        let verify_fields = hit.is_none();
        let shared: Arc<dyn Source> = bytes;
        let (model, attached, by_operation) = match &plan {
            None => {
                let (model, w) = devices.device_for("").attach(
                    shared,
                    metadata,
                    register,
                    None,
                    verify_fields,
                )?;
                let n = model.total_operation_count();
                (model, vec![w], vec![0; n])
            }
            Some(plan) => {
                let mut attached = Vec::with_capacity(plan.devices.len());
                let mut model = None;
                for (d, device) in plan.devices.iter().enumerate() {
                    let ops: Vec<usize> = plan
                        .steps
                        .iter()
                        .filter(|s| s.device as usize == d)
                        .flat_map(|s| s.operations.iter().map(|&o| o as usize))
                        .collect();
                    let (m, w) = devices.device_for(&device.name).attach(
                        Arc::clone(&shared),
                        metadata.clone(),
                        register,
                        Some(&ops),
                        verify_fields,
                    )?;
                    model.get_or_insert(m);
                    attached.push(w);
                }
                let model =
                    model.ok_or_else(|| RuntimeError::InvalidPlan("it lists no device".into()))?;
                let mut by_main = vec![0; model.main.operations.len()];
                for step in &plan.steps {
                    for &op in &step.operations {
                        if let Some(slot) = by_main.get_mut(op as usize) {
                            *slot = step.device as usize;
                        }
                    }
                }
                // A referenced subgraph's operations run on the device of the IF or
                // WHILE that runs them.
                let by_operation = model
                    .main_operation_of()
                    .iter()
                    .map(|m| m.and_then(|m| by_main.get(m).copied()).unwrap_or(0))
                    .collect();
                (model, attached, by_operation)
            }
        };
        check_prepare_deadline(options.deadline, "while the devices verified the weights")?;
        // What nothing authenticates (the cache of a model without a key) is checked
        // before use: prepared weights must have the layout their kernels expect, and the
        // cached program is only compared with the one derived here.
        let keyed = header.crypto.is_keyed();
        let mut cached_image = None;
        if let Some(h) = hit.take() {
            let bad_layout = (!keyed)
                .then(|| {
                    h.weights.iter().find(|(device, op, weights)| {
                        !prepared_layout_ok(
                            &model,
                            &attached,
                            *device,
                            *op,
                            weights,
                            kernel_options,
                        )
                    })
                })
                .flatten()
                .map(|(_, op, _)| *op);
            match bad_layout {
                Some(op) => {
                    report.warnings.push(format!(
                        "discarded the cache: the prepared weights of operation {op} do not \
                         have the layout its kernel expects"
                    ));
                    report.outcome = CacheOutcome::Miss;
                    if let Some((dir, _)) = &cache_dir {
                        for step in &steps {
                            let _ = dir.remove(&step.token);
                        }
                    }
                }
                None => {
                    for (device, op, weights) in h.weights {
                        if let Some(d) = attached.get(device) {
                            d.insert_prepared(op, weights)?;
                        }
                    }
                    cached_image = Some(h.image);
                }
            }
        }
        let image = if keyed { cached_image.clone() } else { None };
        let provider: Arc<dyn WeightProvider> = Arc::new(PlanWeights {
            by_operation,
            devices: attached.clone(),
        });
        // One program runs every step in order (steps are contiguous runs of operations),
        // so a partitioned model computes exactly what a single-device one does; each
        // step's weights come from its own device.
        let prepare_options = PrepareOptions {
            threads: options.threads,
            requantization: options.requantization,
            float_math: options.float_math,
            limits: options.limits,
            fusion: options.fusion,
        };
        let program = match (
            &image,
            Program::prepare_with(
                &model,
                Arc::clone(&provider),
                &prepare_options,
                image.as_ref(),
            ),
        ) {
            (_, Ok(p)) => p,
            (Some(_), Err(e)) => {
                // A cached program that does not fit is never used: prepare afresh.
                report
                    .warnings
                    .push(format!("discarded the cached program: {e}"));
                report.outcome = CacheOutcome::Miss;
                Program::prepare(&model, provider, &prepare_options)?
            }
            (None, Err(e)) => return Err(e),
        };
        check_prepare_deadline(options.deadline, "while the kernels were prepared")?;
        if !keyed
            && let Some(cached) = &cached_image
            && *cached != program.image()
        {
            report.warnings.push(
                "discarded the cached program: it differs from the one this model prepares \
                 to (stale or altered)"
                    .into(),
            );
            report.outcome = CacheOutcome::Miss;
        }
        if report.outcome == CacheOutcome::Miss
            && let Some((dir, _)) = &cache_dir
            && !report.warnings.is_empty()
        {
            // A bad entry is cleaned before it is written anew.
            for step in &steps {
                let _ = dir.remove(&step.token);
            }
        }
        if let (Some((dir, _)), CacheOutcome::Miss) = (&cache_dir, report.outcome) {
            let image = program.image();
            let prepared = |op: usize| program.prepared_weights(op);
            if let Err(e) = cache::store(dir, &steps, &image, &prepared, &key_for) {
                report
                    .warnings
                    .push(format!("could not write the cache: {e}"));
            }
        }
        Ok(PreparedModel {
            program,
            devices: attached,
            plan,
            header,
            prepare_time: start.elapsed(),
            cache_report: report,
            id: NEXT_MODEL_ID.fetch_add(1, Ordering::Relaxed),
            priority: options.priority,
            scheduler: options.scheduler.clone(),
            fastest: AtomicU64::new(u64::MAX),
        })
    }

    /// The process-unique identifier of this prepared model.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The priority its queued executions have.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// The scheduler its asynchronous executions queue on.
    pub fn scheduler(&self) -> Result<Arc<Scheduler>> {
        match &self.scheduler {
            Some(s) => Ok(Arc::clone(s)),
            None => Scheduler::global(),
        }
    }

    /// The fastest execution completed so far, if any.
    pub fn fastest_execution(&self) -> Option<Duration> {
        match self.fastest.load(Ordering::Relaxed) {
            u64::MAX => None,
            n => Some(Duration::from_nanos(n)),
        }
    }

    /// The NN operand of input or output `index`.
    pub fn io_operand(&self, kind: IoKind, index: usize) -> Option<&nnc_formats::nn::Operand> {
        let main = &self.program.model().main;
        let list = match kind {
            IoKind::Input => &main.inputs,
            IoKind::Output => &main.outputs,
        };
        main.operands.get(*list.get(index)? as usize)
    }

    /// How many inputs or outputs the model has.
    pub fn io_count(&self, kind: IoKind) -> usize {
        let main = &self.program.model().main;
        match kind {
            IoKind::Input => main.inputs.len(),
            IoKind::Output => main.outputs.len(),
        }
    }

    /// Runs `execute` under `options.deadline`, as the NN API asks of deadlines: an
    /// execution that cannot finish in time (its budget, from `submitted`, is shorter
    /// than the fastest run of this model so far) fails before it starts, as a
    /// persistent miss; one that runs past its deadline stops within an operation and
    /// is a transient miss unless the budget was below the fastest run. Successful runs
    /// update the fastest time.
    pub(crate) fn under_deadline<T>(
        &self,
        options: &ExecuteOptions,
        submitted: Instant,
        execute: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        let fastest = self.fastest_execution();
        let kind = |deadline: Instant| match fastest {
            Some(f) if deadline.saturating_duration_since(submitted) < f => {
                DeadlineKind::Persistent
            }
            _ => DeadlineKind::Transient,
        };
        if let Some(deadline) = options.deadline {
            let now = Instant::now();
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() || fastest.is_some_and(|f| left < f) {
                return Err(RuntimeError::MissedDeadline {
                    kind: kind(deadline),
                    stage: DeadlineStage::Execution,
                    detail: format!(
                        "{} us were left; this model has never run in less than {} us",
                        left.as_micros(),
                        fastest.unwrap_or_default().as_micros()
                    ),
                });
            }
        }
        let start = Instant::now();
        match execute() {
            Ok(value) => {
                let took = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX - 1);
                self.fastest.fetch_min(took, Ordering::Relaxed);
                Ok(value)
            }
            Err(RuntimeError::MissedDeadline {
                stage: DeadlineStage::Execution,
                detail,
                ..
            }) if options.deadline.is_some() => Err(RuntimeError::MissedDeadline {
                kind: options.deadline.map_or(DeadlineKind::Transient, kind),
                stage: DeadlineStage::Execution,
                detail,
            }),
            Err(e) => Err(e),
        }
    }

    /// The file's header (format version, crypto configuration, producer).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// What loading took: verification, parsing, kernel building, memory planning, and
    /// (with an unbounded parameter cache) decrypting and preparing every weight.
    pub fn prepare_time(&self) -> Duration {
        self.prepare_time
    }

    pub fn inputs(&self) -> &[IoInfo] {
        &self.program.model().input_info
    }

    pub fn outputs(&self) -> &[IoInfo] {
        &self.program.model().output_info
    }

    /// The prepared program (graph, memory plan).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Parameter-cache counters summed over the model's devices.
    pub fn cache_stats(&self) -> CacheStats {
        let mut total = CacheStats::default();
        for d in &self.devices {
            let s = d.cache_stats();
            total.hits += s.hits;
            total.misses += s.misses;
            total.evictions += s.evictions;
            total.decryptions += s.decryptions;
            total.resident_bytes += s.resident_bytes;
            total.capacity_bytes = match (total.capacity_bytes, s.capacity_bytes) {
                (Some(a), Some(b)) => Some(a + b),
                (None, c) if self.devices.len() == 1 => c,
                (c, _) => c,
            };
        }
        total
    }

    /// Parameter-cache counters per device, by device name.
    pub fn device_stats(&self) -> Vec<(String, CacheStats)> {
        self.devices
            .iter()
            .map(|d| (d.device().to_string(), d.cache_stats()))
            .collect()
    }

    /// What the compilation cache did during loading.
    pub fn cache_report(&self) -> &CacheReport {
        &self.cache_report
    }

    /// The execution plan, when the model was partitioned.
    pub fn plan(&self) -> Option<&ExecutionPlan> {
        self.plan.as_ref()
    }

    /// Runs the model on host tensors (element types and shapes as the source model
    /// declared them) and returns its outputs.
    pub fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.run_with(inputs, &ExecuteOptions::default())
            .map(|(outputs, _)| outputs)
    }

    /// [`PreparedModel::run`] with timing.
    pub fn run_timed(&self, inputs: &[HostTensor]) -> Result<(Vec<HostTensor>, Timing)> {
        self.run_with(inputs, &ExecuteOptions::default())
    }

    /// [`PreparedModel::run_timed`] with per-execution options, such as the loop timeout
    /// of IF/WHILE models (`ExecuteOptions::loop_timeout`, default 2 s, at most 15 s).
    pub fn run_with(
        &self,
        inputs: &[HostTensor],
        options: &ExecuteOptions,
    ) -> Result<(Vec<HostTensor>, Timing)> {
        let views: Vec<_> = inputs.iter().map(HostTensor::view).collect();
        self.run_views(&views, options)
    }

    /// [`PreparedModel::run_with`] on borrowed inputs (an application's arrays: read where
    /// they lie when already of the type the model computes in).
    pub fn run_views(
        &self,
        inputs: &[nnc_formats::tensor::HostTensorRef],
        options: &ExecuteOptions,
    ) -> Result<(Vec<HostTensor>, Timing)> {
        let start = Instant::now();
        let (outputs, device) = self.under_deadline(options, start, || {
            self.program.execute_host_views_with(inputs, options)
        })?;
        Ok((
            outputs,
            Timing {
                on_device: device,
                in_driver: start.elapsed(),
            },
        ))
    }

    /// Runs into caller buffers (NN operand types and shapes): outputs whose shapes are
    /// known only at run time report them in the result; a buffer too small for its
    /// output fails naming the output and the bytes needed, before anything is written.
    pub fn execute(
        &self,
        inputs: &[InputTensor],
        outputs: &mut [OutputBuffer],
        options: &ExecuteOptions,
    ) -> Result<crate::exec::ExecutionResult> {
        self.under_deadline(options, Instant::now(), || {
            self.program.execute_with(inputs, outputs, options)
        })
    }

    /// Queues an execution on the model's scheduler (a bounded pool shared by the
    /// process; see [`Scheduler`]) at the model's priority; wait on the handle for its
    /// outputs.
    pub fn run_async(
        self: &Arc<Self>,
        inputs: Vec<HostTensor>,
    ) -> Result<Pending<Vec<HostTensor>>> {
        let model = Arc::clone(self);
        Pending::submit(&*self.scheduler()?, self.priority, move || {
            model.run(&inputs)
        })
    }
}

/// True when cached prepared weights for operation `op` have the layout its kernel
/// prepares (see [`NpuWeights::layout_matches`]).
fn prepared_layout_ok(
    model: &nnc_formats::nn::Model,
    attached: &[Arc<NpuWeights>],
    device: usize,
    op: usize,
    weights: &PreparedWeights,
    kernel_options: KernelOptions,
) -> bool {
    let (Some(d), Some(operation)) = (attached.get(device), model.main.operations.get(op)) else {
        return false;
    };
    let inline = |i: u32| match model.main.operands.get(i as usize)?.lifetime {
        nnc_formats::nn::Lifetime::ConstantCopy => model.constant_bytes(i),
        _ => None,
    };
    match crate::kernels::build_with(operation, &model.main.operands, inline, kernel_options) {
        Ok(kernel) => d.layout_matches(op, kernel.as_ref(), weights),
        Err(_) => false,
    }
}
