//! Memory objects that executions read inputs from and write outputs to.
//!
//! Two kinds, as the NN API's memory-pool page describes them:
//! - **Pools**: plain bytes the caller shares with the runtime: on the heap, or in a
//!   file descriptor ([`Memory::create_shared`], [`Memory::from_fd`]), so inputs and
//!   outputs travel between processes. No access to a file can fault when another
//!   process truncates it: only a memfd sealed against shrinking is mapped (zero-copy);
//!   any other regular file is read with `pread` and written with `pwrite` at each
//!   compute, where a truncation is an error, never a SIGBUS (see [`Memory::from_fd`]).
//! - **Domain buffers**: memory the device manages itself, described by a
//!   [`MemoryDesc`]: the roles (which inputs and outputs of which prepared models may
//!   use it) and dimensions that may be partly unknown until an execution writes it.
//!   Every use is checked against the roles when it is bound, and fails at once; its
//!   contents move to and from pools with [`Memory::copy`].
//!
//! Every memory has a process-unique identifier (bursts cache memories by it) and a
//! reader-writer lock: executions that only read a memory share it, an execution that
//! writes it holds it alone, so concurrent writers are serialized (never torn, never a
//! crash) and readers never see a half-written value. [`Memory::release`] ends a
//! memory's life early: executions still bound to it then fail with an error naming it.

use std::borrow::Cow;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use nnc_formats::nn::OperandType;

use crate::buffer::AlignedBuf;
use crate::error::{Result, RuntimeError};
use crate::model::PreparedModel;

static NEXT_MEMORY_ID: AtomicU64 = AtomicU64::new(1);

/// Which side of an execution a binding or role is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoKind {
    Input,
    Output,
}

impl std::fmt::Display for IoKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IoKind::Input => "input",
            IoKind::Output => "output",
        })
    }
}

/// One use a domain buffer is declared for: input or output `index` of a prepared model.
#[derive(Clone, Debug, PartialEq)]
pub struct Role {
    pub model: u64,
    pub kind: IoKind,
    pub index: usize,
    /// How often the buffer is expected to be used this way, in (0, 1] (a hint).
    pub frequency: f32,
}

/// The description a domain buffer is created from (the NN API's memory descriptor).
#[derive(Clone, Debug, Default)]
pub struct MemoryDesc {
    roles: Vec<Role>,
    operand_type: Option<(OperandType, u32, i32)>,
    /// Merged from every role's operand and [`MemoryDesc::set_dimensions`]; 0 = unknown.
    dims: Option<Vec<usize>>,
}

fn merge_dims(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    if a.is_empty() {
        return Some(b.to_vec());
    }
    if b.is_empty() {
        return Some(a.to_vec());
    }
    if a.len() != b.len() {
        return None;
    }
    a.iter()
        .zip(b)
        .map(|(&x, &y)| match (x, y) {
            (0, y) => Some(y),
            (x, 0) => Some(x),
            (x, y) if x == y => Some(x),
            _ => None,
        })
        .collect()
}

impl MemoryDesc {
    pub fn new() -> MemoryDesc {
        MemoryDesc::default()
    }

    /// Declares that input `index` of `model` may read the buffer.
    pub fn add_input_role(
        self,
        model: &PreparedModel,
        index: usize,
        frequency: f32,
    ) -> Result<MemoryDesc> {
        self.add_role(model, IoKind::Input, index, frequency)
    }

    /// Declares that output `index` of `model` may write the buffer.
    pub fn add_output_role(
        self,
        model: &PreparedModel,
        index: usize,
        frequency: f32,
    ) -> Result<MemoryDesc> {
        self.add_role(model, IoKind::Output, index, frequency)
    }

    fn add_role(
        mut self,
        model: &PreparedModel,
        kind: IoKind,
        index: usize,
        frequency: f32,
    ) -> Result<MemoryDesc> {
        let bad = |message: String| RuntimeError::MemoryDesc(message);
        if !(frequency > 0.0 && frequency <= 1.0) {
            return Err(bad(format!(
                "a role's frequency must be in (0, 1], not {frequency}"
            )));
        }
        let operand = model.io_operand(kind, index).ok_or_else(|| {
            bad(format!(
                "the model has no {kind} {index} ({} {kind}s)",
                model.io_count(kind)
            ))
        })?;
        if self
            .roles
            .iter()
            .any(|r| r.model == model.id() && r.kind == kind && r.index == index)
        {
            return Err(bad(format!(
                "{kind} {index} of this model is declared twice"
            )));
        }
        let ty = (
            operand.operand_type,
            operand.scale.to_bits(),
            operand.zero_point,
        );
        match self.operand_type {
            Some(t) if t != ty => {
                return Err(bad(format!(
                    "{kind} {index} is {} (scale {}, zero point {}), but earlier roles are {} \
                     (scale {}, zero point {}): a buffer holds one type",
                    operand.operand_type,
                    operand.scale,
                    operand.zero_point,
                    t.0,
                    f32::from_bits(t.1),
                    t.2
                )));
            }
            _ => self.operand_type = Some(ty),
        }
        let dims = match &self.dims {
            None => operand.dimensions.iter().map(|&d| d as usize).collect(),
            Some(d) => merge_dims(
                d,
                &operand
                    .dimensions
                    .iter()
                    .map(|&d| d as usize)
                    .collect::<Vec<_>>(),
            )
            .ok_or_else(|| {
                bad(format!(
                    "{kind} {index} has dimensions {:?}, incompatible with {d:?}",
                    operand.dimensions
                ))
            })?,
        };
        self.dims = Some(dims);
        self.roles.push(Role {
            model: model.id(),
            kind,
            index,
            frequency,
        });
        Ok(self)
    }

    /// Sets the buffer's dimensions (0 = unknown), which must agree with every role.
    pub fn set_dimensions(mut self, dims: &[usize]) -> Result<MemoryDesc> {
        let merged = match &self.dims {
            None => dims.to_vec(),
            Some(d) => merge_dims(d, dims).ok_or_else(|| {
                RuntimeError::MemoryDesc(format!(
                    "dimensions {dims:?} disagree with the roles' {d:?}"
                ))
            })?,
        };
        self.dims = Some(merged);
        Ok(self)
    }

    /// Creates the buffer. Its contents are undefined (reading fails) until an
    /// execution writes it or a pool is copied into it.
    pub fn finish(self) -> Result<Arc<Memory>> {
        let (operand_type, scale, zero_point) = self.operand_type.ok_or_else(|| {
            RuntimeError::MemoryDesc("a memory descriptor needs at least one role".into())
        })?;
        Ok(Memory::with_state(
            MemoryKind::Domain(DomainDesc {
                roles: self.roles,
                operand_type,
                scale: f32::from_bits(scale),
                zero_point,
                dims: self.dims.unwrap_or_default(),
            }),
            State::Domain(None),
        ))
    }
}

/// Bytes a value of `shape` takes, when it is representable.
pub(crate) fn value_bytes(operand_type: OperandType, shape: &[usize]) -> Option<usize> {
    shape
        .iter()
        .try_fold(operand_type.element_size()?, |n, &d| n.checked_mul(d))
}

/// A domain buffer's fixed description.
#[derive(Clone, Debug)]
pub struct DomainDesc {
    pub roles: Vec<Role>,
    pub operand_type: OperandType,
    pub scale: f32,
    pub zero_point: i32,
    /// 0 = unknown until written.
    pub dims: Vec<usize>,
}

impl DomainDesc {
    pub fn allows(&self, model: u64, kind: IoKind, index: usize) -> bool {
        self.roles
            .iter()
            .any(|r| r.model == model && r.kind == kind && r.index == index)
    }

    /// True when `shape` fits the declared dimensions.
    pub fn accepts(&self, shape: &[usize]) -> bool {
        self.dims.is_empty()
            || (self.dims.len() == shape.len()
                && self.dims.iter().zip(shape).all(|(&d, &s)| d == 0 || d == s))
    }
}

#[derive(Debug)]
pub(crate) enum MemoryKind {
    Pool,
    Domain(DomainDesc),
}

/// A pool's bytes.
pub(crate) enum Pool {
    Heap(AlignedBuf),
    /// A memfd sealed against shrinking: its pages exist as long as the mapping does.
    Mapped {
        map: memmap2::MmapMut,
        file: File,
        /// Where the mapping starts in the file.
        offset: u64,
    },
    /// Any other regular file: never mapped, accessed with `pread`/`pwrite`.
    File(Arc<FilePool>),
}

/// `len` bytes of a file from `offset`, read with `pread` and written with `pwrite`, so
/// that another process truncating the file causes an error rather than a SIGBUS.
pub(crate) struct FilePool {
    file: File,
    offset: u64,
    len: usize,
}

impl FilePool {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Fills `out` from byte `at` of the pool (the caller checked `at + out.len()`
    /// against the pool's length).
    pub(crate) fn read_at(&self, at: usize, out: &mut [u8]) -> std::result::Result<(), String> {
        self.file
            .read_exact_at(out, self.offset + at as u64)
            .map_err(|e| self.failed(e, at, out.len()))
    }

    /// Writes `data` at byte `at` of the pool, refusing to grow a truncated file back.
    pub(crate) fn write_at(&self, at: usize, data: &[u8]) -> std::result::Result<(), String> {
        let start = self.offset + at as u64;
        let size = self
            .file
            .metadata()
            .map_err(|e| self.failed(e, at, data.len()))?
            .len();
        if size < start + data.len() as u64 {
            return Err(self.truncated(size, at, data.len()));
        }
        self.file
            .write_all_at(data, start)
            .map_err(|e| self.failed(e, at, data.len()))
    }

    fn truncated(&self, size: u64, at: usize, length: usize) -> String {
        let start = self.offset + at as u64;
        format!(
            "its file now holds {size} bytes: bytes {start}..{} are beyond it (it was \
             truncated after the memory was created)",
            start + length as u64
        )
    }

    fn failed(&self, e: std::io::Error, at: usize, length: usize) -> String {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            let size = self.file.metadata().map_or(0, |m| m.len());
            return self.truncated(size, at, length);
        }
        format!("cannot access its file: {e}")
    }
}

impl Pool {
    pub(crate) fn len(&self) -> usize {
        match self {
            Pool::Heap(b) => b.len(),
            Pool::Mapped { map, .. } => map.len(),
            Pool::File(f) => f.len,
        }
    }

    /// The pool's bytes: borrowed when in memory, read from the file otherwise.
    pub(crate) fn bytes(&self) -> std::result::Result<Cow<'_, [u8]>, String> {
        match self {
            Pool::Heap(b) => Ok(Cow::Borrowed(b.as_bytes())),
            Pool::Mapped { map, .. } => Ok(Cow::Borrowed(map)),
            Pool::File(f) => {
                let mut out = vec![0u8; f.len];
                f.read_at(0, &mut out)?;
                Ok(Cow::Owned(out))
            }
        }
    }

    /// Writes `data` at `at` of a file pool (in-memory pools are written through
    /// [`Pool::bytes_mut`]).
    pub(crate) fn write_at(&self, at: usize, data: &[u8]) -> std::result::Result<(), String> {
        match self {
            Pool::File(f) => f.write_at(at, data),
            _ => Err("not a file pool".into()),
        }
    }

    /// The bytes of an in-memory pool (None for a file pool), without copying.
    pub(crate) fn in_memory(&self) -> Option<&[u8]> {
        match self {
            Pool::Heap(b) => Some(b.as_bytes()),
            Pool::Mapped { map, .. } => Some(map),
            Pool::File(_) => None,
        }
    }

    /// The file of a file pool.
    pub(crate) fn file(&self) -> Option<&Arc<FilePool>> {
        match self {
            Pool::File(f) => Some(f),
            _ => None,
        }
    }

    /// The bytes of an in-memory pool (None for a file pool).
    pub(crate) fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            Pool::Heap(b) => Some(b.as_bytes_mut()),
            Pool::Mapped { map, .. } => Some(map),
            Pool::File(_) => None,
        }
    }

    /// For a mapped pool: the file must still cover the mapping. Only memfds sealed
    /// against shrinking are mapped, so this holds by construction; the check stays as
    /// a cheap guard should the sealing rule ever be loosened.
    pub(crate) fn check_file(&self) -> std::result::Result<(), String> {
        if let Pool::Mapped { map, file, offset } = self {
            let size = file.metadata().map_err(|e| e.to_string())?.len();
            let needed = offset + map.len() as u64;
            if size < needed {
                return Err(format!(
                    "its file was truncated to {size} bytes; the mapping needs {needed}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
fn fcntl(fd: &File, command: libc::c_int, arg: libc::c_int) -> std::io::Result<libc::c_int> {
    // SAFETY: `fd` is an open descriptor; the commands used take an int argument.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), command, arg) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Seals that rule out a shared writable mapping of a memfd.
#[cfg(target_os = "linux")]
const WRITE_SEALS: libc::c_int = libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE;

/// A domain buffer's value once written.
pub(crate) struct DomainValue {
    pub shape: Vec<usize>,
    pub data: AlignedBuf,
}

pub(crate) enum State {
    Pool { pool: Pool, generation: u64 },
    Domain(Option<DomainValue>),
    Released,
}

/// A memory object (see the module documentation).
pub struct Memory {
    id: u64,
    kind: MemoryKind,
    state: RwLock<State>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .finish()
    }
}

impl Memory {
    fn with_state(kind: MemoryKind, state: State) -> Arc<Memory> {
        Arc::new(Memory {
            id: NEXT_MEMORY_ID.fetch_add(1, Ordering::Relaxed),
            kind,
            state: RwLock::new(state),
        })
    }

    fn pool(pool: Pool) -> Arc<Memory> {
        Memory::with_state(
            MemoryKind::Pool,
            State::Pool {
                pool,
                generation: 0,
            },
        )
    }

    /// A zero-filled pool of `len` bytes on the heap (64-byte aligned).
    pub fn new(len: usize) -> Result<Arc<Memory>> {
        Ok(Memory::pool(Pool::Heap(AlignedBuf::zeroed(len)?)))
    }

    /// A heap pool holding a copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Result<Arc<Memory>> {
        Ok(Memory::pool(Pool::Heap(AlignedBuf::from_bytes(bytes)?)))
    }

    /// A pool of `len` zero bytes in a new anonymous shared-memory file (Linux memfd),
    /// mapped here; [`Memory::raw_fd`] hands the descriptor to another process. The
    /// memfd is sealed against shrinking and growing, so whoever holds the descriptor
    /// cannot truncate it under the mapping.
    #[cfg(target_os = "linux")]
    pub fn create_shared(len: usize) -> Result<Arc<Memory>> {
        let io = |what: &str, e: std::io::Error| RuntimeError::Memory {
            memory: 0,
            message: format!("cannot {what} a shared-memory file of {len} bytes: {e}"),
        };
        if len == 0 {
            return Err(RuntimeError::Memory {
                memory: 0,
                message: "a memory needs at least one byte".into(),
            });
        }
        // SAFETY: a constant NUL-terminated name and valid flags; the result is checked.
        let fd = unsafe {
            libc::memfd_create(
                c"nnc-memory".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(io("create", std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just returned by memfd_create and is owned by nothing else.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        file.set_len(len as u64).map_err(|e| io("size", e))?;
        fcntl(
            &file,
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
        )
        .map_err(|e| io("seal", e))?;
        Memory::map_sealed(file, 0, len)
    }

    /// A pool over `len` bytes of a file descriptor at `offset`: a regular file (a
    /// memfd, a shared-memory object, a file) open for reading and writing (`O_RDWR`).
    ///
    /// Nothing another process does to the file can make the runtime fault:
    /// - a memfd sealed against shrinking (`F_SEAL_SHRINK`, without `F_SEAL_WRITE` or
    ///   `F_SEAL_FUTURE_WRITE`) is mapped shared (zero-copy): its pages exist as long as
    ///   the mapping does;
    /// - any other regular file is never mapped: each compute reads its bound inputs
    ///   with `pread` and writes its outputs with `pwrite`, and a file truncated below a
    ///   bound region fails that compute with an error naming the truncation (a write
    ///   never grows a truncated file back);
    /// - anything else (a pipe, a socket, a device, a descriptor not open `O_RDWR`),
    ///   zero bytes and bytes beyond the file are refused.
    #[cfg(target_os = "linux")]
    pub fn from_fd(fd: OwnedFd, offset: u64, len: usize) -> Result<Arc<Memory>> {
        let file = File::from(fd);
        let fail = |message: String| RuntimeError::Memory { memory: 0, message };
        if len == 0 {
            return Err(fail("a memory needs at least one byte".into()));
        }
        let meta = file
            .metadata()
            .map_err(|e| fail(format!("cannot inspect the file: {e}")))?;
        if !meta.is_file() {
            return Err(fail(
                "not a regular file: give a memfd, a shared-memory object or a file".into(),
            ));
        }
        let mode = fcntl(&file, libc::F_GETFL, 0)
            .map_err(|e| fail(format!("cannot read the descriptor's flags: {e}")))?;
        if mode & libc::O_ACCMODE != libc::O_RDWR {
            return Err(fail("not open for reading and writing (O_RDWR)".into()));
        }
        let end = offset
            .checked_add(len as u64)
            .filter(|&end| end <= i64::MAX as u64)
            .ok_or_else(|| fail("offset plus length overflows".into()))?;
        if end > meta.len() {
            return Err(fail(format!(
                "bytes {offset}..{end} are beyond the file's {} bytes",
                meta.len()
            )));
        }
        // Files that cannot be sealed (not a memfd) answer EINVAL: no seals.
        let seals = fcntl(&file, libc::F_GET_SEALS, 0).unwrap_or(0);
        if seals & libc::F_SEAL_SHRINK != 0 && seals & WRITE_SEALS == 0 {
            return Memory::map_sealed(file, offset, len);
        }
        Ok(Memory::pool(Pool::File(Arc::new(FilePool {
            file,
            offset,
            len,
        }))))
    }

    /// Maps a memfd sealed against shrinking (the callers checked the seal and that the
    /// file covers the region).
    fn map_sealed(file: File, offset: u64, len: usize) -> Result<Arc<Memory>> {
        // SAFETY: the file is a memfd sealed against shrinking, so every page of the
        // mapping stays backed while it lives: no access can raise SIGBUS. It is shared
        // with other processes by design; the runtime only forms slices of it while
        // holding the memory's lock, and what another process writes concurrently is
        // data, never a memory-safety issue for plain bytes.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(offset)
                .len(len)
                .map_mut(&file)
        }
        .map_err(|e| RuntimeError::Memory {
            memory: 0,
            message: format!("cannot map the file: {e}"),
        })?;
        Ok(Memory::pool(Pool::Mapped { map, file, offset }))
    }

    /// The process-unique identifier.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The domain buffer's description, for a domain buffer.
    pub fn domain(&self) -> Option<&DomainDesc> {
        match &self.kind {
            MemoryKind::Domain(d) => Some(d),
            MemoryKind::Pool => None,
        }
    }

    /// The descriptor of a file-backed pool (valid while the memory lives).
    pub fn raw_fd(&self) -> Option<RawFd> {
        match &*self.read() {
            State::Pool {
                pool: Pool::Mapped { file, .. },
                ..
            } => Some(file.as_raw_fd()),
            State::Pool {
                pool: Pool::File(f),
                ..
            } => Some(f.file.as_raw_fd()),
            _ => None,
        }
    }

    /// A pool's length in bytes (0 once released, and for domain buffers).
    pub fn len(&self) -> usize {
        match &*self.read() {
            State::Pool { pool, .. } => pool.len(),
            _ => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State> {
        // Writers never leave a state half-changed (a failed execution leaves outputs
        // unspecified, as the NN API allows), so a poisoned lock is still usable.
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn error(&self, message: impl Into<String>) -> RuntimeError {
        RuntimeError::Memory {
            memory: self.id,
            message: message.into(),
        }
    }

    /// The pool's generation: it changes whenever the pool is resized, so bindings made
    /// before can tell.
    pub(crate) fn generation(&self) -> Option<u64> {
        match &*self.read() {
            State::Pool { generation, .. } => Some(*generation),
            _ => None,
        }
    }

    /// Releases the memory now (its bytes are freed or unmapped); executions bound to it
    /// fail from then on, naming it. Waits for executions using it to finish.
    pub fn release(&self) {
        *self.write() = State::Released;
    }

    /// Resizes a heap pool (contents kept up to the shorter length, the rest zero).
    /// Executions bound to it before fail until bound again: their offsets and lengths
    /// were checked against the old size.
    pub fn resize(&self, len: usize) -> Result<()> {
        let mut state = self.write();
        match &mut *state {
            State::Pool {
                pool: Pool::Heap(buf),
                generation,
            } => {
                let mut grown = AlignedBuf::zeroed(len)?;
                let keep = len.min(buf.len());
                grown.as_bytes_mut()[..keep].copy_from_slice(&buf.as_bytes()[..keep]);
                *buf = grown;
                *generation += 1;
                Ok(())
            }
            State::Released => Err(self.error("it was released")),
            _ => Err(self.error("only heap pools can be resized")),
        }
    }

    /// Reads a pool's bytes (a file pool's are read from its file first).
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        match &*self.read() {
            State::Pool { pool, .. } => {
                pool.check_file().map_err(|m| self.error(m))?;
                Ok(f(&pool.bytes().map_err(|m| self.error(m))?))
            }
            State::Released => Err(self.error("it was released")),
            State::Domain(_) => Err(self.error(
                "a domain buffer's bytes are the device's: copy them to a pool with Memory::copy",
            )),
        }
    }

    /// Writes a pool's bytes (a file pool's are read from its file, then written back).
    pub fn with_bytes_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        match &mut *self.write() {
            State::Pool { pool, .. } => {
                pool.check_file().map_err(|m| self.error(m))?;
                if let Some(bytes) = pool.bytes_mut() {
                    return Ok(f(bytes));
                }
                let mut bytes = pool.bytes().map_err(|m| self.error(m))?.into_owned();
                let r = f(&mut bytes);
                pool.write_at(0, &bytes).map_err(|m| self.error(m))?;
                Ok(r)
            }
            State::Released => Err(self.error("it was released")),
            State::Domain(_) => Err(self.error(
                "a domain buffer's bytes are the device's: copy a pool into it with Memory::copy",
            )),
        }
    }

    /// Copies `length` bytes at `offset` out of a pool. A file truncated below them
    /// since the memory was created is an error naming the truncation.
    pub fn read_region(&self, offset: usize, length: usize) -> Result<Vec<u8>> {
        match &*self.read() {
            State::Pool { pool, .. } => {
                pool.check_file().map_err(|m| self.error(m))?;
                let end = self.region_end(pool, offset, length)?;
                match pool {
                    Pool::File(f) => {
                        let mut out = vec![0u8; length];
                        f.read_at(offset, &mut out).map_err(|m| self.error(m))?;
                        Ok(out)
                    }
                    _ => Ok(pool.bytes().map_err(|m| self.error(m))?[offset..end].to_vec()),
                }
            }
            State::Released => Err(self.error("it was released")),
            State::Domain(_) => Err(self.error("a domain buffer has no bytes to read")),
        }
    }

    /// Writes `data` at `offset` of a pool (a file truncated below it since the memory
    /// was created is an error, and is not grown back).
    pub fn write_region(&self, offset: usize, data: &[u8]) -> Result<()> {
        match &mut *self.write() {
            State::Pool { pool, .. } => {
                pool.check_file().map_err(|m| self.error(m))?;
                let end = self.region_end(pool, offset, data.len())?;
                match pool.bytes_mut() {
                    Some(bytes) => {
                        bytes[offset..end].copy_from_slice(data);
                        Ok(())
                    }
                    None => pool.write_at(offset, data).map_err(|m| self.error(m)),
                }
            }
            State::Released => Err(self.error("it was released")),
            State::Domain(_) => Err(self.error("a domain buffer has no bytes to write")),
        }
    }

    fn region_end(&self, pool: &Pool, offset: usize, length: usize) -> Result<usize> {
        offset
            .checked_add(length)
            .filter(|&end| end <= pool.len())
            .ok_or_else(|| {
                self.error(format!(
                    "bytes {offset}..{} are beyond its {} bytes",
                    offset.saturating_add(length),
                    pool.len()
                ))
            })
    }

    /// The shape of a domain buffer's current value (None until written).
    pub fn shape(&self) -> Option<Vec<usize>> {
        match &*self.read() {
            State::Domain(Some(v)) => Some(v.shape.clone()),
            _ => None,
        }
    }

    /// Copies `src` into `dst` (the NN API's memory copy): pool to pool of equal length,
    /// pool to a domain buffer with fully known dimensions (the pool's length must be
    /// the buffer's), a domain buffer to a pool of its value's length, or between
    /// domain buffers of one type.
    pub fn copy(src: &Memory, dst: &Memory) -> Result<()> {
        if src.id == dst.id {
            return Err(src.error("cannot copy a memory onto itself"));
        }
        // Lock in identifier order so two opposite copies cannot deadlock.
        let (src_state, mut dst_state) = if src.id < dst.id {
            let s = src.read();
            (s, dst.write())
        } else {
            let d = dst.write();
            (src.read(), d)
        };
        let (shape, bytes): (Option<Vec<usize>>, Cow<'_, [u8]>) = match &*src_state {
            State::Released => return Err(src.error("it was released")),
            State::Pool { pool, .. } => {
                pool.check_file().map_err(|m| src.error(m))?;
                (None, pool.bytes().map_err(|m| src.error(m))?)
            }
            State::Domain(None) => {
                return Err(src.error("the domain buffer has no value yet"));
            }
            State::Domain(Some(v)) => (Some(v.shape.clone()), Cow::Borrowed(v.data.as_bytes())),
        };
        match (&mut *dst_state, dst.domain()) {
            (State::Released, _) => Err(dst.error("it was released")),
            (State::Pool { pool, .. }, _) => {
                pool.check_file().map_err(|m| dst.error(m))?;
                if pool.len() != bytes.len() {
                    return Err(dst.error(format!(
                        "it holds {} bytes; the source holds {}",
                        pool.len(),
                        bytes.len()
                    )));
                }
                match pool.bytes_mut() {
                    Some(out) => {
                        out.copy_from_slice(&bytes);
                        Ok(())
                    }
                    None => pool.write_at(0, &bytes).map_err(|m| dst.error(m)),
                }
            }
            (State::Domain(value), Some(desc)) => {
                if let Some(src_desc) = src.domain()
                    && src_desc.operand_type != desc.operand_type
                {
                    return Err(dst.error(format!(
                        "it holds {}; the source holds {}",
                        desc.operand_type, src_desc.operand_type
                    )));
                }
                let shape = match shape {
                    Some(s) => s,
                    None => {
                        if desc.dims.is_empty() || desc.dims.contains(&0) {
                            return Err(dst.error(format!(
                                "its dimensions {:?} are not fully known, so a pool's bytes \
                                 cannot be given a shape",
                                desc.dims
                            )));
                        }
                        desc.dims.clone()
                    }
                };
                if !desc.accepts(&shape) {
                    return Err(dst.error(format!(
                        "a value of shape {shape:?} does not fit its dimensions {:?}",
                        desc.dims
                    )));
                }
                let needed = value_bytes(desc.operand_type, &shape);
                if needed != Some(bytes.len()) {
                    return Err(dst.error(format!(
                        "shape {shape:?} of {} needs {} bytes; the source holds {}",
                        desc.operand_type,
                        needed.map_or("too many".into(), |n| n.to_string()),
                        bytes.len()
                    )));
                }
                *value = Some(DomainValue {
                    shape,
                    data: AlignedBuf::from_bytes(&bytes)?,
                });
                Ok(())
            }
            (State::Domain(_), None) => Err(RuntimeError::Internal(
                "a domain state on a pool memory".into(),
            )),
        }
    }
}
