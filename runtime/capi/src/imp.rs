//! What the exported functions do, in safe Rust where possible.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nnc_formats::container::SectionKind;
use nnc_formats::crypto::{KeyHexError, key_bytes_from_hex};
use nnc_formats::nn::IoInfo;
use nnc_formats::plan::ExecutionPlan;
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::{
    Burst, Devices, ExecuteOptions, LoadOptions, Memory, ModelFile, PreparedModel, SimulatedNpu,
};
use zeroize::Zeroizing;

use crate::error::CapiError;
use crate::{NncElementType, NncKey, NncModel, NncOperandInfo};

const ELEMENT_TYPES: [(NncElementType, DataType); 22] = [
    (NncElementType::Float32, DataType::F32),
    (NncElementType::Float16, DataType::F16),
    (NncElementType::Float64, DataType::F64),
    (NncElementType::Int8, DataType::I8),
    (NncElementType::Uint8, DataType::U8),
    (NncElementType::Int16, DataType::I16),
    (NncElementType::Uint16, DataType::U16),
    (NncElementType::Int32, DataType::I32),
    (NncElementType::Uint32, DataType::U32),
    (NncElementType::Int64, DataType::I64),
    (NncElementType::Uint64, DataType::U64),
    (NncElementType::Bool, DataType::Bool),
    (NncElementType::Bfloat16, DataType::Bf16),
    (NncElementType::Float8E4M3Fn, DataType::F8E4M3Fn),
    (NncElementType::Float8E4M3Fnuz, DataType::F8E4M3Fnuz),
    (NncElementType::Float8E5M2, DataType::F8E5M2),
    (NncElementType::Float8E5M2Fnuz, DataType::F8E5M2Fnuz),
    (NncElementType::Float4E2M1Fn, DataType::F4E2M1Fn),
    (NncElementType::Int4, DataType::I4),
    (NncElementType::Uint4, DataType::U4),
    (NncElementType::Int2, DataType::I2),
    (NncElementType::Uint2, DataType::U2),
];

pub(crate) fn element_type_from_code(code: i32) -> Option<NncElementType> {
    ELEMENT_TYPES
        .iter()
        .map(|&(t, _)| t)
        .find(|&t| t as i32 == code)
}

pub(crate) fn data_type(t: NncElementType) -> DataType {
    ELEMENT_TYPES
        .iter()
        .find(|&&(e, _)| e == t)
        .map_or(DataType::U8, |&(_, d)| d)
}

fn element_type(d: DataType) -> NncElementType {
    ELEMENT_TYPES
        .iter()
        .find(|&&(_, t)| t == d)
        .map_or(NncElementType::Uint8, |&(e, _)| e)
}

/// Key lengths nnc uses (AES-128/SM4, AES-192, AES-256).
const KEY_LENGTHS: [usize; 3] = [16, 24, 32];

pub(crate) fn key_from_bytes(raw: &[u8]) -> Result<NncKey, CapiError> {
    if !KEY_LENGTHS.contains(&raw.len()) {
        return Err(CapiError::BadData(format!(
            "a key of {} bytes: nnc keys are 16, 24 or 32 bytes (nnc keygen)",
            raw.len()
        )));
    }
    Ok(NncKey {
        bytes: Zeroizing::new(raw.to_vec()),
    })
}

/// Reads a key file as `nnc keygen` writes it: hex text (at most 96 bytes, `#` comment
/// lines allowed), or a
/// device's x25519 private key in PEM (format 1.3 files compiled with `--recipient`), a
/// regular file (the shared bounded reader of `nnc_runtime::key_file`). Errors never
/// echo key material.
pub(crate) fn key_from_file(path: &Path) -> Result<NncKey, CapiError> {
    use nnc_runtime::key_file::{KeyFileError, is_pem, read_key_or_pem_file};
    let text = read_key_or_pem_file(path).map_err(|e| match e {
        KeyFileError::Io { source, .. } => CapiError::Io {
            path: path.display().to_string(),
            message: source.to_string(),
        },
        other => CapiError::BadData(other.to_string()),
    })?;
    let what = || format!("the key file {}", path.display());
    if is_pem(&text) {
        // The runtime takes a device key as its PKCS#8 DER.
        let key = nnc_formats::crypto::PrivateKey::from_pem(&text)
            .map_err(|e| CapiError::BadData(format!("{}: {e}", what())))?;
        if !key.algorithm().receives() {
            return Err(CapiError::BadData(format!(
                "{} is a {} signing key; a model opens with its symmetric key or a device's \
                 x25519 or sm2 key",
                what(),
                key.algorithm()
            )));
        }
        let bytes = key
            .to_pkcs8_der()
            .map_err(|e| CapiError::BadData(format!("{}: {e}", what())))?;
        return Ok(NncKey { bytes });
    }
    // The `# nnc key: NAME` line is for the compiler; the file's header says the cipher.
    let (_, hex) = nnc_runtime::key_file::split_key_text(&text);
    let bytes = key_bytes_from_hex(&hex).map_err(|e| {
        CapiError::BadData(match e {
            KeyHexError::Digit { position } => format!(
                "{} is not a hex key: character {position} is not a hex digit",
                what()
            ),
            KeyHexError::OddLength { digits } => format!(
                "{} holds {digits} hex digits; nnc keys are 32, 48 or 64 digits (nnc keygen)",
                what()
            ),
        })
    })?;
    if !KEY_LENGTHS.contains(&bytes.len()) {
        return Err(CapiError::BadData(format!(
            "{} holds {} hex digits; nnc keys are 32, 48 or 64 digits (nnc keygen)",
            what(),
            bytes.len() * 2
        )));
    }
    Ok(NncKey { bytes })
}

/// A model input or output as C sees it.
pub(crate) struct IoDesc {
    name: CString,
    dtype: DataType,
    dims: Vec<u32>,
    /// Bytes of the whole tensor, when every dimension is known.
    byte_size: Option<usize>,
}

impl IoDesc {
    fn new(info: &IoInfo) -> IoDesc {
        let text = info.name.split('\0').next().unwrap_or_default();
        let byte_size = if info.dims.contains(&0) {
            None
        } else {
            info.dims
                .iter()
                .try_fold(info.dtype.size(), |acc, &d| acc.checked_mul(d as usize))
        };
        IoDesc {
            name: CString::new(text).unwrap_or_default(),
            dtype: info.dtype,
            dims: info.dims.clone(),
            byte_size,
        }
    }

    pub(crate) fn info(&self) -> NncOperandInfo {
        NncOperandInfo {
            name: self.name.as_ptr(),
            element_type: element_type(self.dtype),
            rank: self.dims.len() as u32,
            dimensions: self.dims.as_ptr(),
            byte_size: self.byte_size.unwrap_or(0),
        }
    }

    fn label(&self, what: &str, index: usize) -> String {
        format!("{what} {index} ('{}')", self.name.to_string_lossy())
    }
}

/// A prepared model and the descriptions of its inputs and outputs.
pub(crate) struct ModelInner {
    pub(crate) model: Arc<PreparedModel>,
    pub(crate) inputs: Vec<IoDesc>,
    pub(crate) outputs: Vec<IoDesc>,
}

impl ModelInner {
    pub(crate) fn io(&self, inputs: bool, index: usize) -> Result<&IoDesc, CapiError> {
        let (list, what) = if inputs {
            (&self.inputs, "input")
        } else {
            (&self.outputs, "output")
        };
        list.get(index).ok_or_else(|| {
            CapiError::BadData(format!(
                "{what} {index} does not exist: the model has {} {what}(s)",
                list.len()
            ))
        })
    }
}

/// Loads a model as `nnc run` does: one simulated device per device of the file's
/// execution plan (one when it has none), the key installed in each for the load and
/// wiped from every device afterwards (the prepared model keeps only derived keys).
pub(crate) fn load(
    file: ModelFile,
    key: Option<&[u8]>,
    options: &LoadOptions,
) -> Result<NncModel, CapiError> {
    // The plan is public structure; nothing is trusted until a device authenticates it.
    let names: Vec<String> = file
        .parse()
        .ok()
        .and_then(|c| {
            let section = c.section(SectionKind::ExecutionPlan)?;
            ExecutionPlan::from_bytes(
                section,
                c.model.main.operations.len(),
                c.model.main.operands.len(),
            )
            .ok()
        })
        .map(|plan| plan.devices.iter().map(|d| d.name.clone()).collect())
        .unwrap_or_else(|| vec!["npu0".to_string()]);
    let devices = Devices::new(names.into_iter().map(SimulatedNpu::new).collect())?;
    if let Some(key) = key {
        devices.install_key(key);
    }
    let loaded = PreparedModel::load(file, &devices, options);
    for d in devices.iter() {
        d.clear_key();
    }
    let model = Arc::new(loaded?);
    let inputs = model.inputs().iter().map(IoDesc::new).collect();
    let outputs = model.outputs().iter().map(IoDesc::new).collect();
    Ok(NncModel {
        inner: Arc::new(ModelInner {
            model,
            inputs,
            outputs,
        }),
    })
}

/// What a memory object (`NncMemory`) holds its bytes in: one of the runtime's memory
/// objects, which applies the rule that nothing another process does to a file can
/// fault (only a memfd sealed against shrinking is mapped; any other regular file is
/// read with `pread` and written with `pwrite`; see `nnc_runtime::Memory::from_fd`).
/// The copy costs nothing extra: the C boundary copies inputs into and outputs out of
/// the runtime's tensors in any case.
#[derive(Clone)]
pub(crate) struct Backing(Arc<Memory>);

impl Backing {
    /// `len` zero bytes of anonymous shared memory: a memfd sealed against shrinking
    /// and growing, mapped.
    pub(crate) fn shared(len: usize) -> Result<Backing, CapiError> {
        Memory::create_shared(len)
            .map(Backing)
            .map_err(|e| CapiError::BadData(e.to_string()))
    }

    /// `len` bytes at `offset` of the caller's descriptor (already duplicated): a
    /// regular file open for reading and writing; anything else is `BAD_DATA`.
    pub(crate) fn from_fd(fd: OwnedFd, offset: u64, len: usize) -> Result<Backing, CapiError> {
        let raw = fd.as_raw_fd();
        Memory::from_fd(fd, offset, len)
            .map(Backing)
            .map_err(|e| CapiError::BadData(format!("file descriptor {raw}: {e}")))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The memory's own descriptor (valid while the memory lives).
    pub(crate) fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.0.raw_fd()
    }

    /// Copies `length` bytes at `offset` (checked against the memory's size when
    /// bound) out of the memory; a file truncated since is `BAD_STATE`.
    fn read(&self, offset: usize, length: usize) -> Result<Vec<u8>, CapiError> {
        self.0
            .read_region(offset, length)
            .map_err(|e| CapiError::BadState(e.to_string()))
    }

    /// Writes `data` at `offset` (the binding, of `length` bytes, holds it).
    fn write(&self, offset: usize, length: usize, data: &[u8]) -> Result<(), CapiError> {
        if data.len() > length {
            return Err(CapiError::BadData(format!(
                "{} bytes do not fit the bound {length}",
                data.len()
            )));
        }
        self.0
            .write_region(offset, data)
            .map_err(|e| CapiError::BadState(e.to_string()))
    }
}

/// Where a bound input or output lives: caller memory, or a region of a memory object.
pub(crate) enum Region {
    /// Caller memory, valid while bound by the C contract.
    Pointer(*mut u8, usize),
    /// `length` bytes at `offset` of a memory object (checked against its size when
    /// bound, and again at every compute: a file may be truncated after binding).
    Memory {
        memory: Backing,
        offset: usize,
        length: usize,
    },
}

impl Region {
    fn len(&self) -> usize {
        match self {
            Region::Pointer(_, len) => *len,
            Region::Memory { length, .. } => *length,
        }
    }

    /// Copies the bound bytes out.
    ///
    /// # Safety
    /// A `Pointer` region must be readable for its length (the binding's contract).
    unsafe fn read(&self) -> Result<Vec<u8>, CapiError> {
        match self {
            Region::Pointer(data, len) => {
                // SAFETY: `data` was checked non-null when bound, and this function's
                // contract makes it readable for `len` bytes; the slice is copied before
                // this returns.
                Ok(unsafe { std::slice::from_raw_parts(*data, *len) }.to_vec())
            }
            Region::Memory {
                memory,
                offset,
                length,
            } => memory.read(*offset, *length),
        }
    }

    /// Writes `data` at the start of the region (its length was checked to fit).
    ///
    /// # Safety
    /// A `Pointer` region must be writable for its length (the binding's contract).
    unsafe fn write(&self, data: &[u8]) -> Result<(), CapiError> {
        match self {
            Region::Pointer(ptr, len) => {
                if data.len() > *len {
                    return Err(CapiError::BadData(format!(
                        "{} bytes do not fit a buffer of {len}",
                        data.len()
                    )));
                }
                // SAFETY: by this function's contract `ptr` is writable for `len` bytes,
                // and `data` (our own vector) cannot overlap caller memory.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), *ptr, data.len()) };
                Ok(())
            }
            Region::Memory {
                memory,
                offset,
                length,
            } => memory.write(*offset, *length, data),
        }
    }
}

/// One input's binding.
struct InputBinding {
    region: Region,
    shape: Vec<usize>,
}

/// What the last compute found out.
struct LastRun {
    shapes: Vec<Vec<usize>>,
    sizes: Vec<usize>,
    /// Nanoseconds on the device and in all, when the compute succeeded.
    timing: Option<(u64, u64)>,
    /// A fenced compute's durations (launched, fenced), in nanoseconds.
    fenced: Option<(u64, u64)>,
}

/// An execution's bindings and the results of its last compute.
pub(crate) struct Execution {
    model: Arc<ModelInner>,
    inputs: Vec<Option<InputBinding>>,
    outputs: Vec<Option<Region>>,
    options: ExecuteOptions,
    /// `nnc_execution_set_timeout`: from the start of each compute.
    timeout: Option<Duration>,
    /// An asynchronous or fenced compute is queued or running: every other call on the
    /// execution is a bad state until it completes.
    pub(crate) busy: bool,
    /// `nnc_execution_free` has begun: every call is refused.
    pub(crate) freed: bool,
    last: Option<LastRun>,
}

// SAFETY: the raw pointers are caller memory that the C contract keeps valid while bound
// (`nnc_execution_set_input`/`_output`); they are only dereferenced inside `compute`,
// under the execution's mutex, so moving the execution between threads is sound.
unsafe impl Send for Execution {}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// How a compute runs: on the model's shared execution states, or on a burst's own.
pub(crate) enum Via<'a> {
    Plain,
    Burst(&'a Burst),
}

impl Execution {
    pub(crate) fn new(model: Arc<ModelInner>) -> Execution {
        let (n_in, n_out) = (model.inputs.len(), model.outputs.len());
        Execution {
            model,
            inputs: (0..n_in).map(|_| None).collect(),
            outputs: (0..n_out).map(|_| None).collect(),
            options: ExecuteOptions::default(),
            timeout: None,
            busy: false,
            freed: false,
            last: None,
        }
    }

    pub(crate) fn model(&self) -> &Arc<ModelInner> {
        &self.model
    }

    pub(crate) fn set_input(
        &mut self,
        index: usize,
        dims: Option<Vec<usize>>,
        region: Region,
    ) -> Result<(), CapiError> {
        let desc = self.model.io(true, index)?;
        let label = desc.label("input", index);
        let shape = match dims {
            None => {
                if desc.byte_size.is_none() {
                    return Err(CapiError::BadData(format!(
                        "{label} has unknown dimensions {:?}: bind it with \
                         nnc_execution_set_input_with_dimensions",
                        desc.dims
                    )));
                }
                desc.dims.iter().map(|&d| d as usize).collect()
            }
            Some(dims) => {
                let fits = dims.len() == desc.dims.len()
                    && dims
                        .iter()
                        .zip(&desc.dims)
                        .all(|(&d, &declared)| declared == 0 || d == declared as usize);
                if !fits {
                    return Err(CapiError::BadData(format!(
                        "{label}: dimensions {dims:?} do not match the declared {:?} \
                         (0: any)",
                        desc.dims
                    )));
                }
                dims
            }
        };
        let needed = shape
            .iter()
            .try_fold(desc.dtype.size(), |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| CapiError::BadData(format!("{label}: dimensions {shape:?} overflow")))?;
        if needed != region.len() {
            return Err(CapiError::BadData(format!(
                "{label}: {} bytes given, {needed} expected ({} {:?})",
                region.len(),
                desc.dtype,
                shape
            )));
        }
        self.inputs[index] = Some(InputBinding { region, shape });
        Ok(())
    }

    pub(crate) fn set_loop_timeout(&mut self, nanos: u64) -> Result<(), CapiError> {
        self.options = self
            .options
            .with_loop_timeout(Duration::from_nanos(nanos))?;
        Ok(())
    }

    pub(crate) fn set_timeout(&mut self, nanos: u64) {
        self.timeout = (nanos > 0).then(|| Duration::from_nanos(nanos));
    }

    pub(crate) fn set_output(&mut self, index: usize, region: Region) -> Result<(), CapiError> {
        let desc = self.model.io(false, index)?;
        if let Some(needed) = desc.byte_size
            && region.len() < needed
        {
            return Err(CapiError::OutputTooSmall {
                output: index,
                needed,
                provided: region.len(),
            });
        }
        self.outputs[index] = Some(region);
        Ok(())
    }

    /// Fails unless every input and output is bound.
    pub(crate) fn check_bound(&self) -> Result<(), CapiError> {
        if let Some(k) = self.inputs.iter().position(Option::is_none) {
            return Err(CapiError::BadState(format!(
                "{} is not bound (nnc_execution_set_input)",
                self.model.inputs[k].label("input", k)
            )));
        }
        if let Some(k) = self.outputs.iter().position(Option::is_none) {
            return Err(CapiError::BadState(format!(
                "{} is not bound (nnc_execution_set_output)",
                self.model.outputs[k].label("output", k)
            )));
        }
        Ok(())
    }

    /// Computes once. `started` is when the deadline counts from (the call, or for a
    /// fenced compute the fences' signal); `deadline` an extra bound (a fenced compute's
    /// timeout after its fences).
    ///
    /// # Safety
    /// Every bound caller buffer must still be valid as its binding's contract says.
    pub(crate) unsafe fn compute(
        &mut self,
        via: Via<'_>,
        started: Instant,
        deadline: Option<Instant>,
    ) -> Result<(), CapiError> {
        let start = Instant::now();
        self.last = None;
        self.check_bound()?;
        let mut tensors = Vec::with_capacity(self.inputs.len());
        for (k, binding) in self.inputs.iter().enumerate() {
            let desc = &self.model.inputs[k];
            let Some(b) = binding else {
                return Err(CapiError::BadState("an input lost its binding".into()));
            };
            // SAFETY: by this function's contract, bound caller memory is readable.
            let bytes = unsafe { b.region.read() }?;
            let t = HostTensor::new(desc.dtype, b.shape.clone(), bytes)
                .map_err(|e| CapiError::BadData(format!("{}: {e}", desc.label("input", k))))?;
            tensors.push(t);
        }
        let timeout_deadline = self.timeout.and_then(|t| started.checked_add(t));
        let options = ExecuteOptions {
            deadline: match (deadline, timeout_deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            ..self.options
        };
        let (results, timing) = match via {
            Via::Plain => self.model.model.run_with(&tensors, &options)?,
            Via::Burst(burst) => burst.run_host(&tensors, &options)?,
        };
        drop(tensors);
        let mut last = LastRun {
            shapes: results.iter().map(|t| t.shape.clone()).collect(),
            sizes: results.iter().map(|t| t.data.len()).collect(),
            timing: None,
            fenced: None,
        };
        // Every buffer is checked before any is written.
        let too_small =
            self.outputs
                .iter()
                .zip(&last.sizes)
                .enumerate()
                .find_map(|(k, (b, &needed))| {
                    let provided = b.as_ref().map_or(0, Region::len);
                    (provided < needed).then_some(CapiError::OutputTooSmall {
                        output: k,
                        needed,
                        provided,
                    })
                });
        if let Some(e) = too_small {
            self.last = Some(last);
            return Err(e);
        }
        for (b, t) in self.outputs.iter().zip(&results) {
            if let Some(b) = b {
                // SAFETY: by this function's contract, bound caller memory is writable;
                // its length was checked above.
                unsafe { b.write(&t.data) }?;
            }
        }
        last.timing = Some((nanos(timing.on_device), nanos(start.elapsed())));
        self.last = Some(last);
        Ok(())
    }

    /// Records a fenced compute's two durations.
    pub(crate) fn set_fenced_timing(&mut self, launched: Duration, fenced: Duration) {
        if let Some(last) = &mut self.last {
            last.fenced = Some((nanos(launched), nanos(fenced)));
        }
    }

    fn last(&self) -> Result<&LastRun, CapiError> {
        self.last.as_ref().ok_or_else(|| {
            CapiError::BadState(
                "no compute has produced output shapes yet (nnc_execution_compute)".into(),
            )
        })
    }

    pub(crate) fn output_shape(&self, index: usize) -> Result<&[usize], CapiError> {
        self.model.io(false, index)?;
        self.last()?
            .shapes
            .get(index)
            .map(Vec::as_slice)
            .ok_or_else(|| CapiError::BadState(format!("output {index} was not computed")))
    }

    pub(crate) fn output_size(&self, index: usize) -> Result<usize, CapiError> {
        let desc = self.model.io(false, index)?;
        if let Some(&size) = self.last.as_ref().and_then(|l| l.sizes.get(index)) {
            return Ok(size);
        }
        desc.byte_size.ok_or_else(|| {
            CapiError::BadState(format!(
                "{} has unknown dimensions {:?}: its size is known after a compute",
                desc.label("output", index),
                desc.dims
            ))
        })
    }

    pub(crate) fn timing(&self) -> Result<(u64, u64), CapiError> {
        self.last
            .as_ref()
            .and_then(|l| l.timing)
            .ok_or_else(|| CapiError::BadState("no compute has succeeded yet".into()))
    }

    pub(crate) fn fenced_timing(&self) -> Result<(u64, u64), CapiError> {
        self.last.as_ref().and_then(|l| l.fenced).ok_or_else(|| {
            CapiError::BadState(
                "the last compute was not a successful fenced one \
                     (nnc_execution_start_compute_with_dependencies)"
                    .into(),
            )
        })
    }
}
