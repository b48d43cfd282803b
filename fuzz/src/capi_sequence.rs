//! The `capi_sequence` target: C API call sequences decoded from the input, in any
//! order a caller could issue them: creating, binding, computing (synchronously,
//! asynchronously, fenced, in a burst), signalling, waiting for and freeing executions,
//! events, memories and bursts, with stale, foreign, null and made-up handles, and
//! fd-backed memories truncated behind nnc's back.
//!
//! A shadow model of the objects predicts what each call must answer. Where the answer
//! is certain it is asserted exactly (signalling a compute's event is `BAD_STATE`, a
//! freed handle is `BAD_DATA`, an execution whose compute waits for an unsignalled event
//! refuses every call with `BAD_STATE`, ...); where it depends on timing (a compute that
//! may or may not have finished) the code must be one of the documented few. And nnc
//! must write no caller buffer after the event the caller waited for has signalled, or
//! after the execution was freed: such buffers are filled with a canary and checked
//! before anything may legitimately write them again.
//!
//! The model is the small FULLY_CONNECTED one of [`super::cached_model`] ([1, 4] float
//! in and out), loaded once per process. Calls that could only block forever (waiting
//! for an event that nobody can signal any more) are never issued; everything else is.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::null_mut;
use std::sync::OnceLock;

use NncResult::{BadData, BadState, NoError, OpFailed, UnexpectedNull};
use nnc_capi::*;

/// Bytes of the model's input and of its output.
const IO_BYTES: usize = 16;
/// Most calls decoded from one input, and most objects of each kind.
const MAX_CALLS: usize = 96;
const MAX_OBJECTS: usize = 12;
const MAX_EVENTS: usize = 32;
/// The canary that fills buffers nnc must no longer write.
const CANARY: f32 = -7.25;

/// The shared model's handle, loaded once (never freed).
fn model() -> Option<usize> {
    static MODEL: OnceLock<Option<usize>> = OnceLock::new();
    *MODEL.get_or_init(|| {
        let (bytes, key) = super::cached_model()?;
        let mut k = null_mut();
        let key = key.as_bytes();
        // SAFETY: a valid slice and out-pointer.
        let r = unsafe { nnc_key_from_bytes(key.as_ptr(), key.len(), &mut k) };
        if r != NoError {
            return None;
        }
        let mut m = null_mut();
        // SAFETY: a valid buffer, a live key and a valid out-pointer.
        let r = unsafe { nnc_model_load_buffer(bytes.as_ptr(), bytes.len(), k, &mut m) };
        nnc_key_free(k);
        (r == NoError).then_some(m.addr())
    })
}

/// Runs one call sequence; panics when nnc answers outside its contract.
pub fn capi_sequence(data: &[u8]) {
    let Some(model) = model() else {
        panic!("the fuzzing model does not load");
    };
    let mut s = Shadow {
        model: std::ptr::without_provenance_mut(model),
        ..Shadow::default()
    };
    let mut input = Input { data, pos: 0 };
    let mut calls = 0;
    while let Some(op) = input.next() {
        if calls == MAX_CALLS {
            break;
        }
        calls += 1;
        s.step(op, &mut input);
    }
    s.finish();
}

struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn next(&mut self) -> Option<u8> {
        let b = self.data.get(self.pos).copied();
        self.pos += 1;
        b
    }

    fn byte(&mut self) -> u8 {
        self.next().unwrap_or(0)
    }
}

/// Which object a call names.
#[derive(Clone, Copy, Debug)]
enum Pick {
    /// One the sequence created (perhaps freed since).
    Index(usize),
    Null,
    /// A value nnc never handed out.
    MadeUp,
}

fn pick(len: usize, b: u8) -> Pick {
    match b {
        0xff => Pick::Null,
        0xfe => Pick::MadeUp,
        _ if len == 0 => Pick::Null,
        _ => Pick::Index(b as usize % len),
    }
}

fn made_up<T>() -> *mut T {
    // Not a multiple of 16, so never one of nnc's handles.
    std::ptr::without_provenance_mut(0x6e6e_6301)
}

/// A caller buffer of one [1, 4] float tensor, freed at the end of the sequence (after
/// every execution), accessed only through raw pointers since nnc writes it.
#[derive(Clone, Copy)]
struct Buffer(*mut [f32; 4]);

impl Buffer {
    fn new(value: f32) -> Buffer {
        Buffer(Box::into_raw(Box::new([value; 4])))
    }

    fn fill(self, value: f32) {
        for k in 0..4 {
            // SAFETY: a live allocation of four floats; no compute may write it now.
            unsafe { std::ptr::write_volatile(self.0.cast::<f32>().add(k), value) };
        }
    }

    fn holds(self, value: f32) -> bool {
        // SAFETY: as above; a late write by nnc is what this detects.
        (0..4).all(|k| unsafe { std::ptr::read_volatile(self.0.cast::<f32>().add(k)) } == value)
    }
}

#[derive(Default)]
struct Exec {
    handle: usize,
    freed: bool,
    input: bool,
    output: bool,
    /// The pointer buffer bound as its output, if it is one.
    out_buffer: Option<usize>,
    /// The event of its last asynchronous or fenced compute, until known complete.
    in_flight: Option<usize>,
}

enum EventKind {
    Caller { signalled: bool },
    Compute { exec: usize, deps: Vec<usize> },
}

struct Ev {
    handle: usize,
    freed: bool,
    kind: EventKind,
    /// Known complete (waited for, or cancelled by its execution's free).
    complete: bool,
    /// Its execution was freed while it waited for its dependencies.
    cancelled: bool,
}

struct Mem {
    handle: usize,
    freed: bool,
    size: usize,
    /// The caller's descriptor of an fd-backed memory (to truncate it).
    file: Option<File>,
}

#[derive(Default)]
struct Shadow {
    model: *mut NncModel,
    execs: Vec<Exec>,
    events: Vec<Ev>,
    memories: Vec<Mem>,
    bursts: Vec<(usize, bool)>,
    buffers: Vec<Buffer>,
    /// Buffers holding the canary, that nnc must not write.
    guarded: Vec<usize>,
}

/// Asserts that `got` is one of `allowed`.
#[track_caller]
fn expect(call: &str, got: NncResult, allowed: &[NncResult]) {
    assert!(
        allowed.contains(&got),
        "{call}: {got:?}, expected one of {allowed:?}: {}",
        last_error()
    );
}

fn last_error() -> String {
    // SAFETY: never null; copied at once.
    unsafe { std::ffi::CStr::from_ptr(nnc_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

impl Shadow {
    fn step(&mut self, op: u8, input: &mut Input) {
        match op % 18 {
            0 => self.create_execution(input.byte()),
            1 => self.free_execution(input.byte()),
            2 => self.bind_pointer(input.byte(), true, input.byte()),
            3 => self.bind_pointer(input.byte(), false, input.byte()),
            4 => self.bind_memory(input.byte(), input.byte(), input.byte(), true),
            5 => self.bind_memory(input.byte(), input.byte(), input.byte(), false),
            6 => self.compute(input.byte()),
            7 => self.start(input.byte(), &[]),
            8 => {
                let e = input.byte();
                let n = input.byte() % 4;
                let deps: Vec<u8> = (0..n).map(|_| input.byte()).collect();
                self.start(e, &deps);
            }
            9 => self.create_event(),
            10 => self.signal(input.byte()),
            11 => self.wait(input.byte()),
            12 => self.free_event(input.byte()),
            13 => self.create_memory(input.byte(), input.byte()),
            14 => self.truncate(input.byte(), input.byte()),
            15 => self.free_memory(input.byte()),
            16 => self.burst_compute(input.byte(), input.byte()),
            _ => self.burst_create_or_free(input.byte()),
        }
    }

    // ---- what the shadow knows -----------------------------------------------------

    /// For every event, whether it cannot complete without a caller's action: a caller
    /// event not yet signalled (nor freed, which fails it), or a compute not yet
    /// complete nor cancelled with such an event among its dependencies. Dependencies
    /// are always older events, so one pass in order decides all.
    fn blocked_all(&self) -> Vec<bool> {
        let mut blocked = Vec::with_capacity(self.events.len());
        for ev in &self.events {
            let b = match &ev.kind {
                EventKind::Caller { signalled } => !signalled && !ev.freed,
                EventKind::Compute { deps, .. } => {
                    !ev.complete && !ev.cancelled && deps.iter().any(|&d| blocked[d])
                }
            };
            blocked.push(b);
        }
        blocked
    }

    fn blocked(&self, k: usize) -> bool {
        self.blocked_all()[k]
    }

    /// Whether the compute of event `k` must fail without running: its execution
    /// cancelled it, or a dependency failed for certain (a caller event freed before
    /// it signalled, or such a compute).
    fn must_fail(&self, k: usize) -> bool {
        let mut failed = Vec::with_capacity(k + 1);
        for ev in &self.events[..=k] {
            let f = match &ev.kind {
                EventKind::Caller { signalled } => !signalled && ev.freed,
                EventKind::Compute { deps, .. } => ev.cancelled || deps.iter().any(|&d| failed[d]),
            };
            failed.push(f);
        }
        failed[k]
    }

    /// The execution's compute in flight, when one may be: (event, certainly waiting).
    fn flight(&self, x: usize) -> Option<(usize, bool)> {
        let k = self.execs[x].in_flight?;
        (!self.events[k].complete).then(|| (k, self.blocked(k)))
    }

    /// What a call on execution `x` (by pick) must answer before its own checks: a
    /// null, made-up or freed handle, or an execution blocked by a compute in flight.
    fn exec_precheck(&self, p: Pick) -> Result<usize, NncResult> {
        match p {
            Pick::Null => Err(UnexpectedNull),
            Pick::MadeUp => Err(BadData),
            Pick::Index(x) if self.execs[x].freed => Err(BadData),
            Pick::Index(x) => Ok(x),
        }
    }

    fn exec_handle(&self, p: Pick) -> *mut NncExecution {
        match p {
            Pick::Null => null_mut(),
            Pick::MadeUp => made_up(),
            Pick::Index(x) => std::ptr::without_provenance_mut(self.execs[x].handle),
        }
    }

    fn event_handle(&self, p: Pick) -> *mut NncEvent {
        match p {
            Pick::Null => null_mut(),
            Pick::MadeUp => made_up(),
            Pick::Index(k) => std::ptr::without_provenance_mut(self.events[k].handle),
        }
    }

    fn memory_handle(&self, p: Pick) -> *mut NncMemory {
        match p {
            Pick::Null => null_mut(),
            Pick::MadeUp => made_up(),
            Pick::Index(k) => std::ptr::without_provenance_mut(self.memories[k].handle),
        }
    }

    /// Checks that no guarded buffer of execution `x` was written, before a call that
    /// may write it legitimately, and stops guarding them.
    fn release_guard(&mut self, x: usize) {
        if let Some(b) = self.execs[x].out_buffer {
            self.check_guard(b);
            self.guarded.retain(|&g| g != b);
        }
    }

    #[track_caller]
    fn check_guard(&self, b: usize) {
        if self.guarded.contains(&b) {
            assert!(
                self.buffers[b].holds(CANARY),
                "nnc wrote a caller buffer after the event the caller waited for had \
                 signalled (or after its execution was freed)"
            );
        }
    }

    fn guard(&mut self, b: usize) {
        self.buffers[b].fill(CANARY);
        if !self.guarded.contains(&b) {
            self.guarded.push(b);
        }
    }

    // ---- executions ----------------------------------------------------------------

    /// Creates an execution, and binds its input and output to new buffers as `flags`
    /// asks (bits 0 and 1), so that most sequences reach computes quickly.
    fn create_execution(&mut self, flags: u8) {
        if self.execs.len() == MAX_OBJECTS {
            return;
        }
        let mut e = null_mut();
        // SAFETY: a valid out-pointer.
        let r = unsafe { nnc_execution_create(self.model, &mut e) };
        expect("nnc_execution_create", r, &[NoError]);
        self.execs.push(Exec {
            handle: e.addr(),
            ..Exec::default()
        });
        let x = (self.execs.len() - 1) as u8;
        if flags & 1 != 0 {
            self.bind_pointer(x, true, flags);
        }
        if flags & 2 != 0 {
            self.bind_pointer(x, false, flags);
        }
    }

    fn free_execution(&mut self, b: u8) {
        let p = pick(self.execs.len(), b);
        nnc_execution_free(self.exec_handle(p));
        let Pick::Index(x) = p else { return };
        if self.execs[x].freed {
            return;
        }
        if let Some((k, blocked)) = self.flight(x) {
            if blocked {
                self.events[k].cancelled = true;
            }
            self.events[k].complete = true;
        }
        self.execs[x].freed = true;
        self.execs[x].in_flight = None;
        // nnc writes no bound buffer after the free returns.
        if let Some(buffer) = self.execs[x].out_buffer {
            self.guard(buffer);
        }
    }

    /// The answer every call changing or computing execution `x` gets while its compute
    /// is in flight: certainly `BAD_STATE` while it waits for an unsignalled event.
    fn busy_codes(&self, x: usize) -> Option<&'static [NncResult]> {
        match self.flight(x) {
            Some((_, true)) => Some(&[BadState]),
            Some((_, false)) => Some(&[NoError, BadState]),
            None => None,
        }
    }

    fn bind_pointer(&mut self, b: u8, input: bool, value: u8) {
        let p = pick(self.execs.len(), b);
        let buffer = self.buffers.len();
        self.buffers.push(Buffer::new(f32::from(value) / 16.0));
        let ptr = self.buffers[buffer].0;
        let h = self.exec_handle(p);
        // SAFETY: the buffer lives until the end of the sequence, after every execution
        // is freed.
        let r = unsafe {
            if input {
                nnc_execution_set_input(h, 0, ptr.cast(), IO_BYTES)
            } else {
                nnc_execution_set_output(h, 0, ptr.cast(), IO_BYTES)
            }
        };
        let x = match self.exec_precheck(p) {
            Err(code) => return expect("set_input/output", r, &[code]),
            Ok(x) => x,
        };
        let allowed = self.busy_codes(x).unwrap_or(&[NoError]);
        expect("set_input/output", r, allowed);
        if r == NoError {
            let e = &mut self.execs[x];
            if input {
                e.input = true;
            } else {
                e.output = true;
                e.out_buffer = Some(buffer);
            }
            e.in_flight = None;
        }
    }

    fn bind_memory(&mut self, b: u8, m: u8, offset: u8, input: bool) {
        let p = pick(self.execs.len(), b);
        let pm = pick(self.memories.len(), m);
        let offset = usize::from(offset % 4) * IO_BYTES;
        let (h, mh) = (self.exec_handle(p), self.memory_handle(pm));
        let r = if input {
            nnc_execution_set_input_from_memory(h, 0, mh, offset, IO_BYTES)
        } else {
            nnc_execution_set_output_from_memory(h, 0, mh, offset, IO_BYTES)
        };
        let x = match self.exec_precheck(p) {
            Err(code) => return expect("set_*_from_memory", r, &[code]),
            Ok(x) => x,
        };
        let fits = match pm {
            Pick::Null => return expect("set_*_from_memory", r, &[UnexpectedNull]),
            Pick::MadeUp => return expect("set_*_from_memory", r, &[BadData]),
            Pick::Index(k) if self.memories[k].freed => {
                return expect("set_*_from_memory", r, &[BadData]);
            }
            Pick::Index(k) => offset + IO_BYTES <= self.memories[k].size,
        };
        if !fits {
            return expect("set_*_from_memory", r, &[BadData]);
        }
        let allowed = self.busy_codes(x).unwrap_or(&[NoError]);
        expect("set_*_from_memory", r, allowed);
        if r == NoError {
            let e = &mut self.execs[x];
            if input {
                e.input = true;
            } else {
                e.output = true;
                e.out_buffer = None;
            }
            e.in_flight = None;
        }
    }

    /// The codes a compute of execution `x` may answer (bindings, flight, truncated
    /// memories).
    fn compute_codes(&self, x: usize) -> &'static [NncResult] {
        if let Some(codes) = self.busy_codes(x) {
            return codes;
        }
        let e = &self.execs[x];
        if !(e.input && e.output) {
            return &[BadState];
        }
        // A memory truncated since binding fails the compute with BAD_STATE.
        &[NoError, BadState]
    }

    fn compute(&mut self, b: u8) {
        let p = pick(self.execs.len(), b);
        if let Pick::Index(x) = p
            && !self.execs[x].freed
            && self.flight(x).is_none()
        {
            self.release_guard(x);
        }
        // SAFETY: every bound buffer lives until the end of the sequence.
        let r = unsafe { nnc_execution_compute(self.exec_handle(p)) };
        let x = match self.exec_precheck(p) {
            Err(code) => return expect("nnc_execution_compute", r, &[code]),
            Ok(x) => x,
        };
        expect("nnc_execution_compute", r, self.compute_codes(x));
        if r == NoError {
            self.execs[x].in_flight = None;
        }
    }

    fn burst_compute(&mut self, b: u8, burst: u8) {
        let p = pick(self.execs.len(), b);
        let pb = pick(self.bursts.len(), burst);
        let bh: *const NncBurst = match pb {
            Pick::Null => std::ptr::null(),
            Pick::MadeUp => made_up(),
            Pick::Index(k) => std::ptr::without_provenance(self.bursts[k].0),
        };
        if let Pick::Index(x) = p
            && !self.execs[x].freed
            && self.flight(x).is_none()
        {
            self.release_guard(x);
        }
        // SAFETY: every bound buffer lives until the end of the sequence.
        let r = unsafe { nnc_execution_burst_compute(self.exec_handle(p), bh) };
        let x = match self.exec_precheck(p) {
            Err(code) => return expect("nnc_execution_burst_compute", r, &[code]),
            Ok(x) => x,
        };
        match pb {
            Pick::Null => return expect("burst_compute", r, &[UnexpectedNull]),
            Pick::MadeUp => return expect("burst_compute", r, &[BadData]),
            Pick::Index(k) if self.bursts[k].1 => return expect("burst_compute", r, &[BadData]),
            Pick::Index(_) => {}
        }
        expect("nnc_execution_burst_compute", r, self.compute_codes(x));
        if r == NoError {
            self.execs[x].in_flight = None;
        }
    }

    fn burst_create_or_free(&mut self, b: u8) {
        if b & 1 == 0 && self.bursts.len() < MAX_OBJECTS {
            let mut burst = null_mut();
            // SAFETY: a valid out-pointer.
            let r = unsafe { nnc_burst_create(self.model, &mut burst) };
            expect("nnc_burst_create", r, &[NoError]);
            self.bursts.push((burst.addr(), false));
        } else if let Pick::Index(k) = pick(self.bursts.len(), b >> 1) {
            nnc_burst_free(std::ptr::without_provenance_mut(self.bursts[k].0));
            self.bursts[k].1 = true;
        }
    }

    fn start(&mut self, b: u8, dep_picks: &[u8]) {
        if self.events.len() >= MAX_EVENTS {
            return;
        }
        let p = pick(self.execs.len(), b);
        let deps: Vec<Pick> = dep_picks
            .iter()
            .map(|&d| pick(self.events.len(), d))
            .collect();
        let handles: Vec<*const NncEvent> = deps
            .iter()
            .map(|&d| self.event_handle(d).cast_const())
            .collect();
        if let Pick::Index(x) = p
            && !self.execs[x].freed
            && self.flight(x).is_none()
        {
            self.release_guard(x);
        }
        let mut event = null_mut();
        // SAFETY: `handles.len()` readable handles and a valid out-pointer.
        let r = unsafe {
            nnc_execution_start_compute_with_dependencies(
                self.exec_handle(p),
                handles.as_ptr(),
                handles.len() as u32,
                0,
                &mut event,
            )
        };
        let x = match self.exec_precheck(p) {
            Err(code) => return expect("start_compute", r, &[code]),
            Ok(x) => x,
        };
        let bad_dependency = deps.iter().any(|&d| match d {
            Pick::Null | Pick::MadeUp => true,
            Pick::Index(k) => self.events[k].freed,
        });
        if bad_dependency {
            return expect("start_compute", r, &[BadData]);
        }
        expect("start_compute", r, self.compute_codes(x));
        if r != NoError {
            assert!(event.is_null(), "a refused start hands out no event");
            return;
        }
        self.push_compute_event(event, x, &deps);
    }

    fn push_compute_event(&mut self, event: *mut NncEvent, x: usize, deps: &[Pick]) {
        let deps = deps
            .iter()
            .filter_map(|&d| match d {
                Pick::Index(k) => Some(k),
                _ => None,
            })
            .collect();
        self.events.push(Ev {
            handle: event.addr(),
            freed: false,
            kind: EventKind::Compute { exec: x, deps },
            complete: false,
            cancelled: false,
        });
        self.execs[x].in_flight = Some(self.events.len() - 1);
    }

    // ---- events --------------------------------------------------------------------

    fn create_event(&mut self) {
        if self.events.len() >= MAX_EVENTS {
            return;
        }
        let mut e = null_mut();
        // SAFETY: a valid out-pointer.
        let r = unsafe { nnc_event_create(&mut e) };
        expect("nnc_event_create", r, &[NoError]);
        self.events.push(Ev {
            handle: e.addr(),
            freed: false,
            kind: EventKind::Caller { signalled: false },
            complete: false,
            cancelled: false,
        });
    }

    fn signal(&mut self, b: u8) {
        let p = pick(self.events.len(), b);
        let r = nnc_event_signal(self.event_handle(p));
        let k = match p {
            Pick::Null => return expect("nnc_event_signal", r, &[UnexpectedNull]),
            Pick::MadeUp => return expect("nnc_event_signal", r, &[BadData]),
            Pick::Index(k) => k,
        };
        if self.events[k].freed {
            return expect("nnc_event_signal", r, &[BadData]);
        }
        match &mut self.events[k].kind {
            // Only a compute signals its event: the audit's memory corruption.
            EventKind::Compute { .. } => expect("nnc_event_signal (a compute's)", r, &[BadState]),
            EventKind::Caller { signalled } => {
                let expected = if *signalled { BadState } else { NoError };
                expect("nnc_event_signal", r, &[expected]);
                *signalled = true;
            }
        }
    }

    fn wait(&mut self, b: u8) {
        let p = pick(self.events.len(), b);
        let k = match p {
            Pick::Index(k) => k,
            _ => {
                let r = nnc_event_wait(self.event_handle(p));
                let code = if matches!(p, Pick::Null) {
                    UnexpectedNull
                } else {
                    BadData
                };
                return expect("nnc_event_wait", r, &[code]);
            }
        };
        if self.events[k].freed {
            let r = nnc_event_wait(self.event_handle(p));
            return expect("nnc_event_wait", r, &[BadData]);
        }
        if self.blocked(k) {
            // Waiting would never return. Its execution refuses every call instead.
            if let EventKind::Compute { exec, .. } = self.events[k].kind
                && !self.execs[exec].freed
                && self.execs[exec].in_flight == Some(k)
            {
                // SAFETY: a handle, checked; a busy execution reads no buffer.
                let r = unsafe { nnc_execution_compute(self.exec_handle(Pick::Index(exec))) };
                expect("compute while waiting for an event", r, &[BadState]);
            }
            return;
        }
        let r = nnc_event_wait(self.event_handle(p));
        self.after_wait(k, r);
    }

    /// Checks a wait's answer for event `k` and records what it implies.
    fn after_wait(&mut self, k: usize, r: NncResult) {
        let exec = match self.events[k].kind {
            EventKind::Caller { .. } => return expect("nnc_event_wait", r, &[NoError]),
            EventKind::Compute { exec, .. } => exec,
        };
        if self.must_fail(k) {
            expect(
                "nnc_event_wait (cancelled or failed dependency)",
                r,
                &[OpFailed],
            );
        } else {
            // A failed dependency, a memory truncated under the compute, a full queue.
            expect(
                "nnc_event_wait",
                r,
                &[
                    NoError,
                    OpFailed,
                    BadState,
                    NncResult::ResourceExhaustedTransient,
                ],
            );
        }
        self.events[k].complete = true;
        let e = &mut self.execs[exec];
        if e.in_flight == Some(k) {
            e.in_flight = None;
            // The event has signalled: the buffer is the caller's again.
            if !e.freed
                && let Some(b) = e.out_buffer
            {
                self.guard(b);
            }
        }
    }

    fn free_event(&mut self, b: u8) {
        let p = pick(self.events.len(), b);
        nnc_event_free(self.event_handle(p));
        if let Pick::Index(k) = p {
            self.events[k].freed = true;
        }
    }

    // ---- memories ------------------------------------------------------------------

    fn create_memory(&mut self, kind: u8, size: u8) {
        if self.memories.len() == MAX_OBJECTS {
            return;
        }
        let size = usize::from(size % 5) * IO_BYTES; // 0 (refused) to 64 bytes
        let mut m = null_mut();
        let (r, file) = match kind % 3 {
            0 => {
                // SAFETY: a valid out-pointer.
                (unsafe { nnc_memory_create_shared(size, &mut m) }, None)
            }
            k => {
                let Some(file) = memfd(size, k == 2) else {
                    return;
                };
                // SAFETY: a valid out-pointer; nnc duplicates the descriptor.
                let r = unsafe { nnc_memory_create_from_fd(size, file.as_raw_fd(), 0, &mut m) };
                (r, Some(file))
            }
        };
        let expected = if size == 0 { BadData } else { NoError };
        expect("nnc_memory_create_*", r, &[expected]);
        if r == NoError {
            self.memories.push(Mem {
                handle: m.addr(),
                freed: false,
                size,
                file,
            });
        }
    }

    /// Truncates (or restores) an fd-backed memory's file behind nnc's back: a sealed
    /// memfd refuses to shrink; any other makes computes fail, never fault.
    fn truncate(&mut self, m: u8, len: u8) {
        let Pick::Index(k) = pick(self.memories.len(), m) else {
            return;
        };
        let memory = &self.memories[k];
        match &memory.file {
            Some(file) => {
                let _ = file.set_len(u64::from(len % 5) * IO_BYTES as u64);
            }
            None if !memory.freed => {
                // nnc's own shared memory is sealed: its descriptor cannot shrink it.
                let mut fd = -1;
                // SAFETY: a handle, checked, and a valid out-pointer.
                let r = unsafe {
                    nnc_memory_get_fd(std::ptr::without_provenance(memory.handle), &mut fd)
                };
                expect("nnc_memory_get_fd", r, &[NoError]);
                // SAFETY: the memory's live descriptor; the call must fail.
                let truncated = unsafe { libc::ftruncate(fd, 0) } == 0;
                assert!(!truncated, "nnc's shared memory could be truncated");
            }
            None => {}
        }
    }

    fn free_memory(&mut self, b: u8) {
        let p = pick(self.memories.len(), b);
        nnc_memory_free(self.memory_handle(p));
        if let Pick::Index(k) = p {
            self.memories[k].freed = true;
        }
    }

    // ---- the end -------------------------------------------------------------------

    /// Frees everything: executions first (cancelling computes that wait for events
    /// nobody will signal, waiting for the others), then every event is waited for
    /// (none can block any more) and freed, then memories, bursts and buffers; every
    /// guarded buffer is checked last.
    fn finish(mut self) {
        for b in self.guarded.clone() {
            self.check_guard(b);
        }
        for x in 0..self.execs.len() {
            if !self.execs[x].freed {
                self.free_execution(x as u8);
            }
        }
        for k in 0..self.events.len() {
            if self.events[k].freed || self.blocked(k) {
                continue;
            }
            let r = nnc_event_wait(self.event_handle(Pick::Index(k)));
            self.after_wait(k, r);
        }
        for k in 0..self.events.len() {
            nnc_event_free(self.event_handle(Pick::Index(k)));
        }
        for m in &self.memories {
            nnc_memory_free(std::ptr::without_provenance_mut(m.handle));
        }
        for &(b, _) in &self.bursts {
            nnc_burst_free(std::ptr::without_provenance_mut(b));
        }
        for b in self.guarded.clone() {
            self.check_guard(b);
        }
        for b in self.buffers.drain(..) {
            // SAFETY: from Box::into_raw, freed once, after every execution.
            drop(unsafe { Box::from_raw(b.0) });
        }
    }
}

/// A memfd of `size` bytes, sealed against shrinking when asked.
fn memfd(size: usize, seal: bool) -> Option<File> {
    // SAFETY: a constant NUL-terminated name and valid flags; the result is checked.
    let fd = unsafe {
        libc::memfd_create(
            c"nnc-fuzz".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a new descriptor owned by nothing else.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(size as u64).ok()?;
    if seal {
        // SAFETY: a live descriptor and a valid command.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } != 0 {
            return None;
        }
    }
    Some(file)
}
