//! Fences: one-shot signals that executions wait for and signal.
//!
//! A [`Fence`] starts pending and is signalled exactly once, with success or with the
//! error message of what it stood for. Waiting is a `Mutex` + `Condvar` pair, which on
//! Linux is a futex: the OS primitive the NN API's sync fences wrap, without a file
//! descriptor per fence. Work that must start when a fence signals registers a callback
//! ([`Fence::on_signal`]) instead of parking a worker thread on it, so a bounded pool
//! can never deadlock on fences whose signallers are queued behind their waiters.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How a fence ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FenceState {
    /// Not signalled yet.
    Pending,
    /// Signalled: what it stood for completed.
    Signalled,
    /// Signalled with an error: what it stood for failed (the message says why).
    Failed(String),
}

type Callback = Box<dyn FnOnce(&FenceState) + Send>;

thread_local! {
    /// Whether this thread is running fence callbacks now.
    static DRAINING: Cell<bool> = const { Cell::new(false) };
    /// Callbacks of fences signalled from inside a callback on this thread, run by the
    /// outermost signal in order: a chain of fences (each failing the next) thus runs
    /// as a loop, not as a recursion as deep as the chain.
    static DEFERRED: RefCell<VecDeque<(Vec<Callback>, FenceState)>> =
        const { RefCell::new(VecDeque::new()) };
}

/// Runs `callbacks` with `state`, and every callback batch they cause, iteratively.
fn run_callbacks(callbacks: Vec<Callback>, state: FenceState) {
    if callbacks.is_empty() {
        return;
    }
    if DRAINING.with(Cell::get) {
        DEFERRED.with(|q| q.borrow_mut().push_back((callbacks, state)));
        return;
    }
    DRAINING.with(|d| d.set(true));
    // Resets the flag even if a callback panics, so later signals still run theirs.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DRAINING.with(|d| d.set(false));
        }
    }
    let _reset = Reset;
    // A panicking callback must not strand the callbacks queued behind it (their fences'
    // waiters would wait forever): every batch runs, then the first panic goes on.
    let mut panic = None;
    let mut batch = Some((callbacks, state));
    while let Some((callbacks, state)) = batch {
        for callback in callbacks {
            let run = std::panic::AssertUnwindSafe(|| callback(&state));
            if let Err(payload) = std::panic::catch_unwind(run) {
                panic.get_or_insert(payload);
            }
        }
        batch = DEFERRED.with(|q| q.borrow_mut().pop_front());
    }
    if let Some(payload) = panic {
        std::panic::resume_unwind(payload);
    }
}

struct Inner {
    state: FenceState,
    callbacks: Vec<Callback>,
    signalled_at: Option<Instant>,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: Condvar,
}

/// A one-shot completion signal, cheap to clone (clones are the same fence).
#[derive(Clone)]
pub struct Fence {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Fence").field(&self.state()).finish()
    }
}

impl Default for Fence {
    fn default() -> Self {
        Fence::new()
    }
}

impl Fence {
    /// A pending fence. Whoever holds it may signal it (the NN API's user-created fences).
    pub fn new() -> Fence {
        Fence {
            shared: Arc::new(Shared {
                inner: Mutex::new(Inner {
                    state: FenceState::Pending,
                    callbacks: Vec::new(),
                    signalled_at: None,
                }),
                changed: Condvar::new(),
            }),
        }
    }

    /// A fence already signalled.
    pub fn signalled() -> Fence {
        let fence = Fence::new();
        fence.signal();
        fence
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A callback never runs under the lock, so a poisoned lock only means a waiter
        // panicked; the state itself is always consistent.
        self.shared
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Signals success. Returns false (and changes nothing) if it was already signalled.
    pub fn signal(&self) -> bool {
        self.finish(FenceState::Signalled)
    }

    /// Signals failure with a message. Returns false if it was already signalled.
    pub fn fail(&self, message: impl Into<String>) -> bool {
        self.finish(FenceState::Failed(message.into()))
    }

    fn finish(&self, state: FenceState) -> bool {
        let callbacks = {
            let mut inner = self.lock();
            if inner.state != FenceState::Pending {
                return false;
            }
            inner.state = state.clone();
            inner.signalled_at = Some(Instant::now());
            std::mem::take(&mut inner.callbacks)
        };
        self.shared.changed.notify_all();
        run_callbacks(callbacks, state);
        true
    }

    /// The current state, without waiting.
    pub fn state(&self) -> FenceState {
        self.lock().state.clone()
    }

    /// When the fence was signalled, if it was.
    pub fn signalled_at(&self) -> Option<Instant> {
        self.lock().signalled_at
    }

    /// Waits until the fence is signalled, or at most `timeout`; returns the state then
    /// (still [`FenceState::Pending`] when the timeout passed first).
    pub fn wait(&self, timeout: Option<Duration>) -> FenceState {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut inner = self.lock();
        while inner.state == FenceState::Pending {
            inner = match deadline {
                None => self
                    .shared
                    .changed
                    .wait(inner)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    self.shared
                        .changed
                        .wait_timeout(inner, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        inner.state.clone()
    }

    /// Runs `callback` once the fence is signalled: at once on this thread if it already
    /// is, otherwise on the thread that signals it. Callbacks must be short (they run
    /// on the signaller's thread, typically a worker of the execution pool). A fence
    /// signalled from inside a callback runs its own callbacks after that callback
    /// returns (iteratively, so long chains cannot overflow the stack).
    pub fn on_signal(&self, callback: impl FnOnce(&FenceState) + Send + 'static) {
        let state = {
            let mut inner = self.lock();
            if inner.state == FenceState::Pending {
                inner.callbacks.push(Box::new(callback));
                return;
            }
            inner.state.clone()
        };
        callback(&state);
    }

    /// True when both handles are the same fence.
    pub fn same_as(&self, other: &Fence) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// A fence that signals once every one of `fences` has signalled (at once when there
    /// are none), failing with the first failure's message if any of them failed. It
    /// registers callbacks only, so waiting for it parks no thread.
    pub fn all(fences: &[Fence]) -> Fence {
        let joined = Fence::new();
        if fences.is_empty() {
            joined.signal();
            return joined;
        }
        let left = Arc::new(AtomicUsize::new(fences.len()));
        let failure: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        for dependency in fences {
            let (left, failure, joined) = (Arc::clone(&left), Arc::clone(&failure), joined.clone());
            dependency.on_signal(move |state| {
                if let FenceState::Failed(message) = state {
                    failure
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get_or_insert_with(|| message.clone());
                }
                if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                    let failed = failure
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .take();
                    match failed {
                        Some(message) => joined.fail(message),
                        None => joined.signal(),
                    };
                }
            });
        }
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_once_and_wakes_waiters() {
        let fence = Fence::new();
        let waiter = {
            let fence = fence.clone();
            std::thread::spawn(move || fence.wait(None))
        };
        assert_eq!(
            fence.wait(Some(Duration::from_millis(10))),
            FenceState::Pending
        );
        assert!(fence.signal());
        assert!(!fence.fail("late"), "a fence signals once");
        assert_eq!(waiter.join().unwrap(), FenceState::Signalled);
        assert!(fence.signalled_at().is_some());
    }

    #[test]
    fn all_signals_after_the_last_and_fails_with_the_first_failure() {
        assert_eq!(Fence::all(&[]).state(), FenceState::Signalled);
        let (a, b) = (Fence::new(), Fence::new());
        let joined = Fence::all(&[a.clone(), b.clone()]);
        a.signal();
        assert_eq!(joined.state(), FenceState::Pending);
        b.signal();
        assert_eq!(joined.wait(None), FenceState::Signalled);

        let (a, b, c) = (Fence::new(), Fence::new(), Fence::new());
        let joined = Fence::all(&[a.clone(), b.clone(), c.clone()]);
        b.fail("input not ready");
        assert_eq!(joined.state(), FenceState::Pending, "waits for every fence");
        a.signal();
        c.fail("later failure");
        assert_eq!(joined.state(), FenceState::Failed("input not ready".into()));
    }

    #[test]
    fn callbacks_run_on_signal_or_at_once() {
        let fence = Fence::new();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        fence.on_signal(move |state| s.lock().unwrap().push(state.clone()));
        assert!(seen.lock().unwrap().is_empty());
        fence.fail("broken");
        let s = Arc::clone(&seen);
        fence.on_signal(move |state| s.lock().unwrap().push(state.clone()));
        assert_eq!(
            *seen.lock().unwrap(),
            vec![FenceState::Failed("broken".into()); 2]
        );
    }
}
