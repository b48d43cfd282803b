//! `nnc-runtime`: executes NN-operation-set models on the CPU.
//!
//! The layers, bottom up:
//! - [`kernels`]: one float32 CPU kernel per operation (int32 and bool8 where cheap),
//!   built once per operation from its static parameters; weights reach kernels only as
//!   [`kernels::PreparedWeights`] (zeroized on drop).
//! - [`exec`]: [`Program::prepare`] validates a model, builds its kernels, propagates
//!   shapes and plans one activation arena; [`Program::execute`] runs it (concurrently
//!   from several threads if wanted), computing shapes at run time where the model
//!   leaves them unknown. Weights come from a [`WeightProvider`]: [`HostWeights`] for
//!   an in-memory model, a device's parameter cache later.
//! - [`evaluate_operation`]: one operation on constants, for constant folding.
//!
//! ```no_run
//! use std::sync::Arc;
//! use nnc_runtime::{HostWeights, InputTensor, OutputBuffer, PrepareOptions, Program};
//! # fn run(model: &nnc_formats::nn::Model) -> Result<(), nnc_runtime::RuntimeError> {
//! let weights = Arc::new(HostWeights::new(model)?);
//! let program = Program::prepare(model, weights, &PrepareOptions::default())?;
//! let input = vec![0.0f32; 224 * 224 * 3];
//! let mut output = vec![0.0f32; 1000];
//! let result = program.execute(
//!     &[InputTensor::f32(&[1, 224, 224, 3], &input)],
//!     &mut [OutputBuffer::f32(&mut output)],
//! )?;
//! println!("{:?}", result.output_shapes);
//! # Ok(()) }
//! ```

pub mod alloc;
pub mod buffer;
pub mod cache;
pub mod device;
pub mod error;
pub mod exec;
pub mod execution;
pub mod kernels;
pub mod key_file;
pub mod model;
pub mod tensor;

pub use cache::{CacheConfig, CacheOutcome, CacheReport};
pub use device::{CacheStats, SimulatedNpu};
pub use error::{OpRef, RuntimeError};
pub use exec::{
    ExecuteOptions, ExecutionResult, HostWeights, InputTensor, MAX_THREADS, OperationTime,
    OutputBuffer, PrepareOptions, Program, WeightProvider, evaluate_operation,
};
pub use execution::{
    Burst, Execution, Fence, FenceState, Memory, MemoryDesc, Pending, Priority, Scheduler,
};
pub use kernels::{
    FloatMath, Kernel, KernelContext, KernelOptions, PreparedWeights, Requantization,
};
pub use model::{DeviceSource, Devices, LoadOptions, ModelFile, PreparedModel, Timing};
