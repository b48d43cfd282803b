//! The execution queue: a bounded pool of worker threads shared by the process, with
//! one FIFO queue per priority.
//!
//! Asynchronous, fenced and burst executions never spawn a thread: they are jobs in a
//! [`Scheduler`]. A worker always takes the oldest job of the highest priority waiting,
//! so a high-priority model's executions overtake queued low-priority ones (the NN
//! API's priority is a property of the prepared model, honoured "when executions queue
//! for the same device"; here the device's queue is its scheduler). The queue itself is
//! bounded too: a submission beyond [`Scheduler::MAX_QUEUED`] is refused, so a caller
//! that submits faster than the device computes gets an error, not unbounded memory.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

use crate::error::{Result, RuntimeError};

/// A prepared model's priority (the NN API's `PRIORITY_LOW/MEDIUM/HIGH`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Low,
    #[default]
    Medium,
    High,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Low, Priority::Medium, Priority::High];

    fn slot(self) -> usize {
        self as usize
    }
}

impl std::str::FromStr for Priority {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Priority, String> {
        match s {
            "low" => Ok(Priority::Low),
            "medium" => Ok(Priority::Medium),
            "high" => Ok(Priority::High),
            other => Err(format!(
                "unknown priority '{other}' (expected low, medium or high)"
            )),
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queue {
    /// Indexed by [`Priority::slot`].
    jobs: [VecDeque<Job>; 3],
    queued: usize,
    shutdown: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Jobs run outside the lock and panics in them are caught, so the queue is
        // consistent even if a thread panicked while holding it.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A fixed set of worker threads and their priority queues.
pub struct Scheduler {
    shared: Arc<Shared>,
    workers: usize,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("workers", &self.workers)
            .field("queued", &self.queued())
            .finish()
    }
}

impl Scheduler {
    /// Jobs waiting at most (all priorities together).
    pub const MAX_QUEUED: usize = 4096;

    /// Starts `workers` threads (at least 1).
    pub fn new(workers: usize) -> Result<Arc<Scheduler>> {
        let workers = workers.max(1);
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
        });
        for n in 0..workers {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("nnc-exec-{n}"))
                .spawn(move || worker(&shared))
                .map_err(|e| RuntimeError::ThreadPool(e.to_string()))?;
        }
        Ok(Arc::new(Scheduler { shared, workers }))
    }

    /// The process's scheduler, started on first use with one worker per available core
    /// (at most 8): executions queue here unless a model was loaded with its own.
    pub fn global() -> Result<Arc<Scheduler>> {
        static GLOBAL: OnceLock<Arc<Scheduler>> = OnceLock::new();
        if let Some(s) = GLOBAL.get() {
            return Ok(Arc::clone(s));
        }
        let workers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(8);
        let created = Scheduler::new(workers)?;
        Ok(Arc::clone(GLOBAL.get_or_init(|| created)))
    }

    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Jobs waiting for a worker.
    pub fn queued(&self) -> usize {
        self.shared.lock().queued
    }

    /// Queues a job; refused when the queue is full.
    pub fn submit(&self, priority: Priority, job: impl FnOnce() + Send + 'static) -> Result<()> {
        {
            let mut queue = self.shared.lock();
            if queue.queued >= Self::MAX_QUEUED {
                return Err(RuntimeError::QueueFull {
                    queued: queue.queued,
                });
            }
            queue.jobs[priority.slot()].push_back(Box::new(job));
            queue.queued += 1;
        }
        self.shared.work.notify_one();
        Ok(())
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // Workers finish what is queued, then exit; nothing joins them here, because the
        // last handle may be dropped by a job running on one of them.
        self.shared.lock().shutdown = true;
        self.shared.work.notify_all();
    }
}

fn worker(shared: &Shared) {
    loop {
        let job = {
            let mut queue = shared.lock();
            loop {
                let next = queue.jobs.iter_mut().rev().find_map(VecDeque::pop_front);
                if let Some(job) = next {
                    queue.queued -= 1;
                    break job;
                }
                if queue.shutdown {
                    return;
                }
                queue = shared
                    .work
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        // A job reports its own failures; a panic must not take the worker with it.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::execution::Fence;

    #[test]
    fn highest_priority_first_then_fifo() {
        let scheduler = Scheduler::new(1).unwrap();
        let gate = Fence::new();
        let order = Arc::new(Mutex::new(Vec::new()));
        {
            let gate = gate.clone();
            scheduler
                .submit(Priority::Low, move || {
                    gate.wait(None);
                })
                .unwrap();
        }
        // Wait until the worker holds the gate job, so the rest queue behind it.
        while scheduler.queued() > 0 {
            std::thread::yield_now();
        }
        let done = Fence::new();
        let jobs = [
            (Priority::Low, "low 1"),
            (Priority::Medium, "medium"),
            (Priority::Low, "low 2"),
            (Priority::High, "high"),
        ];
        for (priority, name) in jobs {
            let order = Arc::clone(&order);
            scheduler
                .submit(priority, move || order.lock().unwrap().push(name))
                .unwrap();
        }
        {
            let done = done.clone();
            scheduler
                .submit(Priority::Low, move || {
                    done.signal();
                })
                .unwrap();
        }
        gate.signal();
        done.wait(None);
        assert_eq!(
            *order.lock().unwrap(),
            vec!["high", "medium", "low 1", "low 2"]
        );
    }

    #[test]
    fn a_panicking_job_does_not_kill_the_worker() {
        let scheduler = Scheduler::new(1).unwrap();
        scheduler
            .submit(Priority::High, || panic!("job panics"))
            .unwrap();
        let done = Fence::new();
        let d = done.clone();
        scheduler
            .submit(Priority::High, move || {
                d.signal();
            })
            .unwrap();
        assert_eq!(
            done.wait(Some(std::time::Duration::from_secs(10))),
            crate::execution::FenceState::Signalled
        );
    }

    #[test]
    fn parses_priorities() {
        assert_eq!("high".parse::<Priority>(), Ok(Priority::High));
        assert!("urgent".parse::<Priority>().is_err());
    }
}
