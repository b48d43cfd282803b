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
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nnc_formats::container::Header;
use nnc_formats::nn::IoInfo;
use nnc_formats::tensor::HostTensor;

use crate::device::{CacheStats, NpuWeights, SimulatedNpu};
use crate::error::{Result, RuntimeError};
use crate::exec::{
    ExecuteOptions, InputTensor, OutputBuffer, PrepareOptions, Program, WeightProvider,
};

/// The bytes of a model file: memory-mapped, or owned.
enum ModelBytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl AsRef<[u8]> for ModelBytes {
    fn as_ref(&self) -> &[u8] {
        match self {
            ModelBytes::Mapped(m) => m,
            ModelBytes::Owned(v) => v,
        }
    }
}

/// How to load a model.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Threads for intra-operation parallelism (1: nothing is spawned).
    pub threads: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { threads: 1 }
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
    weights: Arc<NpuWeights>,
    header: Header,
    prepare_time: Duration,
}

impl PreparedModel {
    /// Loads a `.nnc` file through a memory map.
    pub fn load_file(
        path: &Path,
        npu: &SimulatedNpu,
        options: &LoadOptions,
    ) -> Result<PreparedModel> {
        let file = std::fs::File::open(path).map_err(|e| RuntimeError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        // SAFETY: the mapping is read-only; if another process changes the file while it
        // is mapped, the bytes read may change but stay in bounds. Every weight field's
        // tag is checked again each time the device reads it, so altered weights are
        // refused rather than used.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| RuntimeError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        PreparedModel::load(Arc::new(ModelBytes::Mapped(map)), npu, options)
    }

    /// Loads a `.nnc` file held in memory.
    pub fn load_bytes(
        bytes: Vec<u8>,
        npu: &SimulatedNpu,
        options: &LoadOptions,
    ) -> Result<PreparedModel> {
        PreparedModel::load(Arc::new(ModelBytes::Owned(bytes)), npu, options)
    }

    fn load(
        bytes: Arc<ModelBytes>,
        npu: &SimulatedNpu,
        options: &LoadOptions,
    ) -> Result<PreparedModel> {
        let start = Instant::now();
        // Host side: parse the header and program the device's crypto control register.
        let header = Header::read((*bytes).as_ref())?;
        let register = header.crypto;
        // Device side: authenticate, parse the operator info, verify, set up decryption.
        let (model, weights) = npu.attach(bytes, register)?;
        let provider: Arc<dyn WeightProvider> = weights.clone();
        let program = Program::prepare(
            &model,
            provider,
            &PrepareOptions {
                threads: options.threads,
            },
        )?;
        Ok(PreparedModel {
            program,
            weights,
            header,
            prepare_time: start.elapsed(),
        })
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

    pub fn cache_stats(&self) -> CacheStats {
        self.weights.cache_stats()
    }

    /// Runs the model on host tensors (element types and shapes as the source model
    /// declared them) and returns its outputs.
    pub fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        self.program.execute_host(inputs)
    }

    /// [`PreparedModel::run`] with timing.
    pub fn run_timed(&self, inputs: &[HostTensor]) -> Result<(Vec<HostTensor>, Timing)> {
        let start = Instant::now();
        let (outputs, device) = self.program.execute_host_timed(inputs)?;
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
        self.program.execute_with(inputs, outputs, options)
    }

    /// Starts an execution on another thread; wait on the handle for its outputs.
    pub fn run_async(self: &Arc<Self>, inputs: Vec<HostTensor>) -> Execution {
        let model = Arc::clone(self);
        Execution {
            handle: std::thread::spawn(move || model.run(&inputs)),
        }
    }
}

/// An asynchronous execution in flight.
pub struct Execution {
    handle: JoinHandle<Result<Vec<HostTensor>>>,
}

impl Execution {
    /// Waits for the execution to finish.
    pub fn wait(self) -> Result<Vec<HostTensor>> {
        self.handle.join().unwrap_or_else(|_| {
            Err(RuntimeError::Internal(
                "an execution thread panicked".into(),
            ))
        })
    }

    /// True once the execution has finished (`wait` will not block).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}
