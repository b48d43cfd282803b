//! `nnc._native`: the Rust side of nnc's Python package. It is deliberately thin: the
//! commands (`compile`, `inspect`, `verify`, the whole `nnc` console script) run the
//! CLI's own code in process ([`nnc_cli::run_in_process`]), so the package and the tool
//! take the same options and say the same things; only loading and running a model,
//! where numpy arrays meet the runtime, has code of its own here. The Python layer
//! (`python/nnc/__init__.py`) turns keyword arguments into command lines and
//! `NativeError`s into the package's exception classes.

use std::ffi::OsString;

use nnc_cli::Failure;
use nnc_formats::tensor::{DataType, HostTensorRef};
use nnc_runtime::{Devices, PreparedModel};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyByteArray;
use zeroize::Zeroizing;

/// Freed memory is wiped, as in the `nnc` binary (see `nnc_runtime::alloc`): decrypted
/// weights pass through buffers nnc does not own.
#[global_allocator]
static ALLOCATOR: nnc_runtime::alloc::WipingAllocator = nnc_runtime::alloc::WipingAllocator;

pyo3::create_exception!(
    _native,
    NativeError,
    PyException,
    "An nnc failure: args are (kind, exit status, message, causes)."
);

fn raise(f: Failure) -> PyErr {
    NativeError::new_err((f.kind, f.status, f.message, f.causes))
}

fn internal(message: String) -> PyErr {
    raise(Failure {
        status: 70,
        kind: "internal",
        message,
        causes: Vec::new(),
    })
}

/// Runs one `nnc` command line in process (`argv[0]` is the program name) and returns
/// `(exit status, captured standard output)`. The GIL is released while it runs.
#[pyfunction]
#[pyo3(signature = (argv, key=None))]
fn run_command(py: Python<'_>, argv: Vec<OsString>, key: Option<String>) -> (u8, String) {
    let key = key.map(Zeroizing::new);
    py.detach(move || {
        let outcome = nnc_cli::run_in_process(argv, key);
        (outcome.status, outcome.stdout)
    })
}

/// The `nnc` console script: the whole tool on `argv`; returns the exit status.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<OsString>) -> u8 {
    py.detach(move || nnc_cli::main(argv))
}

/// One input or output as Python sees it: (name, dtype name, dimensions; -1 where known
/// only at run time).
type IoDescription = (String, &'static str, Vec<i64>);

fn describe(info: &nnc_formats::nn::IoInfo) -> IoDescription {
    (
        info.name.clone(),
        info.dtype.name(),
        info.dims
            .iter()
            .map(|&d| if d == 0 { -1 } else { i64::from(d) })
            .collect(),
    )
}

/// One output as Python receives it: (name, dtype name, shape, element bytes).
type OutputArray<'py> = (String, &'static str, Vec<usize>, Bound<'py, PyByteArray>);

/// A compiled model loaded and prepared by the runtime, with the simulated devices that
/// hold its key.
#[pyclass(frozen, module = "nnc._native")]
struct NativeModel {
    model: PreparedModel,
    /// Kept alive with the model: the devices hold the key its weights decrypt with.
    _devices: Devices,
}

/// A numpy array's memory, borrowed for one execution: validated against what numpy says
/// of it, so the slice covers exactly the array's bytes.
struct Borrowed<'py> {
    /// Held so the memory stays alive (and owned by numpy) while the slice is used.
    _array: Bound<'py, PyAny>,
    dtype: DataType,
    shape: Vec<usize>,
    address: usize,
    len: usize,
}

impl<'py> Borrowed<'py> {
    fn new(array: Bound<'py, PyAny>, position: usize) -> PyResult<Borrowed<'py>> {
        let bad = |what: String| {
            raise(Failure {
                status: 65,
                kind: "malformed-input",
                message: format!("input {position}: {what}"),
                causes: Vec::new(),
            })
        };
        let contiguous: bool = array.getattr("flags")?.getattr("c_contiguous")?.extract()?;
        if !contiguous {
            return Err(bad("the array is not C-contiguous".into()));
        }
        let dtype_name: String = array.getattr("dtype")?.getattr("name")?.extract()?;
        let dtype = DataType::from_name(&dtype_name)
            .ok_or_else(|| bad(format!("arrays of {dtype_name} are not supported")))?;
        let shape: Vec<usize> = array.getattr("shape")?.extract()?;
        let len: usize = array.getattr("nbytes")?.extract()?;
        let interface = array.getattr("__array_interface__")?;
        let (address, _read_only): (usize, bool) = interface.get_item("data")?.extract()?;
        let expected = shape
            .iter()
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
            .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
        if expected != len || (len > 0 && address == 0) {
            return Err(bad(format!(
                "numpy reports {len} bytes at {address:#x} for shape {shape:?} of {dtype_name}"
            )));
        }
        Ok(Borrowed {
            _array: array,
            dtype,
            shape,
            address,
            len,
        })
    }

    fn view(&self) -> HostTensorRef<'_> {
        let data: &[u8] = if self.len == 0 {
            &[]
        } else {
            // SAFETY: numpy reports `len` contiguous bytes at `address` (checked against
            // the shape and dtype above), and `_array` keeps that memory alive for as
            // long as `self` is borrowed.
            unsafe { std::slice::from_raw_parts(self.address as *const u8, self.len) }
        };
        HostTensorRef {
            dtype: self.dtype,
            shape: &self.shape,
            data,
        }
    }
}

#[pymethods]
impl NativeModel {
    /// The model's inputs: [(name, dtype, dims)], -1 for a dimension given at run time.
    fn inputs(&self) -> Vec<IoDescription> {
        self.model.inputs().iter().map(describe).collect()
    }

    /// The model's outputs: [(name, dtype, dims)].
    fn outputs(&self) -> Vec<IoDescription> {
        self.model.outputs().iter().map(describe).collect()
    }

    /// The file's format version and cipher, for `repr`.
    fn summary(&self) -> String {
        let header = self.model.header();
        let crypto = &header.crypto;
        let cipher = match (crypto.algorithm, crypto.mode) {
            (Some(a), Some(m)) => format!("{}-{}", a.name(), m.name()),
            _ => "unencrypted".to_string(),
        };
        format!("format {}.{}, {cipher}", header.major, header.minor)
    }

    /// Runs the model on C-contiguous numpy arrays in input order; returns [(name, dtype,
    /// shape, bytearray)] in output order. The arrays are read where they lie when the
    /// model computes in their type; the GIL is released while the model runs.
    fn run<'py>(
        &self,
        py: Python<'py>,
        arrays: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Vec<OutputArray<'py>>> {
        let borrowed = arrays
            .into_iter()
            .enumerate()
            .map(|(k, a)| Borrowed::new(a, k))
            .collect::<PyResult<Vec<_>>>()?;
        let views: Vec<HostTensorRef> = borrowed.iter().map(Borrowed::view).collect();
        let model = &self.model;
        let result = py.detach(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                model.run_views(&views, &nnc_runtime::ExecuteOptions::default())
            }))
        });
        let outputs = match result {
            Ok(Ok((outputs, _timing))) => outputs,
            Ok(Err(e)) => return Err(raise(nnc_cli::runtime_failure(e))),
            Err(_) => return Err(internal(nnc_cli::panic_message())),
        };
        outputs
            .into_iter()
            .zip(self.model.outputs())
            .map(|(t, info)| {
                Ok((
                    info.name.clone(),
                    t.dtype.name(),
                    t.shape,
                    PyByteArray::new(py, &t.data),
                ))
            })
            .collect()
    }
}

/// Opens a compiled model as `nnc run` would (`argv`: an `nnc run` command line without
/// inputs), with `key` (hex or PEM text) when given.
#[pyfunction]
#[pyo3(signature = (argv, key=None))]
fn load(py: Python<'_>, argv: Vec<OsString>, key: Option<String>) -> PyResult<NativeModel> {
    let key = key.map(Zeroizing::new);
    let opened = py.detach(move || nnc_cli::open_model(argv, key));
    let (model, devices) = opened.map_err(raise)?;
    Ok(NativeModel {
        model,
        _devices: devices,
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    nnc_cli::install_panic_hook();
    m.add("NativeError", m.py().get_type::<NativeError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<NativeModel>()?;
    m.add_function(wrap_pyfunction!(run_command, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    Ok(())
}
