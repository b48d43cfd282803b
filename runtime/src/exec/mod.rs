//! The executor: preparing a model into a [`Program`] and running it.
//!
//! - [`plan`]: liveness and arena placement of temporaries.
//! - [`in_place`]: concatenations whose inputs are written straight into their output.
//! - [`program`]: preparation (kernels, shape propagation, memory plan, weights).
//! - [`image`]: the shapes and memory plan a model cache holds of a program.
//! - [`control_flow`]: IF and WHILE, running the referenced subgraphs' programs.
//! - [`execute`]: synchronous execution, static or with run-time shapes.
//! - [`io`]: the inputs, output buffers, options and results of an execution, and the
//!   sinks outputs are written to.
//! - `narrow`: inputs and outputs of types the model computes in a wider one (bfloat16,
//!   float8, 4- and 2-bit integers).
//! - [`profile`]: per-operation timing (`nnc bench --profile`).
//! - [`weights`]: the [`WeightProvider`] seam and [`HostWeights`].
//! - [`fold`]: [`evaluate_operation`] for the compiler's constant folding.
//! - `held`: buffers whose bytes are reserved in the execution's memory budget.

pub mod control_flow;
pub mod execute;
pub mod fold;
pub(crate) mod held;
pub mod image;
pub(crate) mod in_place;
pub mod io;
mod narrow;
pub mod plan;
pub mod profile;
pub mod program;
pub mod weights;

pub use control_flow::{DEFAULT_LOOP_TIMEOUT, MAX_LOOP_TIMEOUT};
pub use execute::host_type;
pub use fold::evaluate_operation;
pub use image::{PlanImage, ProgramImage};
pub use io::{ExecuteOptions, ExecutionResult, InputTensor, OutputBuffer};
pub use plan::{ArenaPlan, Interval, plan_arena};
pub use profile::OperationTime;
pub use program::{MAX_THREADS, PrepareOptions, Program};
pub use weights::{HostWeights, WeightProvider};
