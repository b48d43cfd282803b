//! The execution API of the NN API's runtime half, beyond one-shot `run`:
//!
//! - [`Execution`]: inputs and outputs bound once to [`Memory`] objects, computed many
//!   times, synchronously ([`Execution::compute`]), queued
//!   ([`Execution::start_compute`]), after fences ([`Execution::start_compute_after`]),
//!   or through a [`Burst`].
//! - [`Memory`]: shared pools (heap, memfd, any mapped fd) and memory-domain buffers
//!   described by a [`MemoryDesc`] with roles.
//! - [`Scheduler`]: the bounded worker pool queued executions run on, by [`Priority`].
//! - [`Fence`]: one-shot signals fenced executions wait for and signal.
//!
//! Deadlines: [`Execution::set_timeout`] (and `ExecuteOptions::deadline`,
//! `LoadOptions::deadline` for preparation) fail with `RuntimeError::MissedDeadline`,
//! transient or persistent as the NN API distinguishes them
//! (`PreparedModel::under_deadline`).

mod bind;
mod fence;
mod memory;
mod pending;
mod scheduler;

pub use bind::{Burst, Execution, FencedExecution, FencedTiming, Outcome};
pub use fence::{Fence, FenceState};
pub use memory::{DomainDesc, IoKind, Memory, MemoryDesc, Role};
pub use pending::Pending;
pub use scheduler::{Priority, Scheduler};
