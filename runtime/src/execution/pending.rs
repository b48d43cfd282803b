//! [`Pending`]: the handle of an execution queued on a [`Scheduler`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::fence::{Fence, FenceState};
use super::scheduler::{Priority, Scheduler};
use crate::error::{Result, RuntimeError};

/// An execution in flight: its fence signals when it is done, [`Pending::wait`] takes
/// its result.
pub struct Pending<T> {
    fence: Fence,
    slot: Arc<Mutex<Option<Result<T>>>>,
}

impl<T: Send + 'static> Pending<T> {
    /// Queues `job`; its result is stored before the fence signals.
    pub(crate) fn submit(
        scheduler: &Scheduler,
        priority: Priority,
        job: impl FnOnce() -> Result<T> + Send + 'static,
    ) -> Result<Pending<T>> {
        let pending = Pending::new();
        let (fence, slot) = (pending.fence.clone(), Arc::clone(&pending.slot));
        scheduler.submit(priority, move || {
            // A panicking kernel is a bug; it must still complete the handle, or its
            // waiter would hang.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                .unwrap_or_else(|_| Err(RuntimeError::Internal("an execution panicked".into())));
            complete(&fence, &slot, result);
        })?;
        Ok(pending)
    }

    pub(crate) fn new() -> Pending<T> {
        Pending {
            fence: Fence::new(),
            slot: Arc::new(Mutex::new(None)),
        }
    }

    /// The parts a job completes.
    pub(crate) fn parts(&self) -> (Fence, Arc<Mutex<Option<Result<T>>>>) {
        (self.fence.clone(), Arc::clone(&self.slot))
    }

    /// The fence that signals when the execution is done (failed if it failed).
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// True once the execution is done ([`Pending::wait`] will not block).
    pub fn is_finished(&self) -> bool {
        self.fence.state() != FenceState::Pending
    }

    /// Waits at most `timeout`; true when the execution is done.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        self.fence.wait(Some(timeout)) != FenceState::Pending
    }

    /// Waits for the execution and returns its result.
    pub fn wait(self) -> Result<T> {
        self.fence.wait(None);
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_else(|| {
                Err(RuntimeError::Internal(
                    "an execution signalled without a result".into(),
                ))
            })
    }
}

/// Stores a job's result and then signals its fence.
pub(crate) fn complete<T>(fence: &Fence, slot: &Mutex<Option<Result<T>>>, result: Result<T>) {
    let failure = result.as_ref().err().map(ToString::to_string);
    *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
    match failure {
        None => fence.signal(),
        Some(message) => fence.fail(message),
    };
}
