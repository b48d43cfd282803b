//! Helpers shared by the C API's integration tests: compiling models as `nnc compile`
//! does (the compiler's pipeline and emitter), keys, and reading C strings.

#![allow(dead_code)]

use std::ffi::{CStr, CString};
use std::ptr::null_mut;

use nnc_capi::*;
use std::path::{Path, PathBuf};
use std::process::Command;

use nnc_compiler::emit::{self, EmitOptions};
use nnc_compiler::pipeline::{self, LowerOptions};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::Model as NnModel;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A model of `testdata/models`.
pub fn testdata(name: &str) -> PathBuf {
    repo().join("testdata/models").join(name)
}

/// A fresh AES-128 key.
pub fn key() -> Key {
    Key::generate(Algorithm::Aes128).expect("a random key")
}

/// Emits an NN model, encrypted with `key` (AES-128-CTR) when one is given.
pub fn emit_model(model: &NnModel, key: Option<&Key>) -> Vec<u8> {
    emit::emit(
        model,
        EmitOptions {
            envelope: Default::default(),
            key,
            mode: Mode::Ctr,
            authenticate_only: false,
            reproducible: false,
            extra_sections: Vec::new(),
        },
    )
    .expect("the model emits")
}

/// Compiles a source model (.onnx, .tflite) to `.nnc` bytes as `nnc compile` does.
pub fn compile(source: &Path, key: Option<&Key>) -> Vec<u8> {
    let lowered = pipeline::lower_file(source, &LowerOptions::default())
        .unwrap_or_else(|e| panic!("{} compiles: {e}", source.display()));
    emit_model(&lowered.model, key)
}

/// Writes a key file as `nnc keygen` does (hex text and a newline).
pub fn write_key_file(path: &Path, key: &Key) {
    std::fs::write(path, format!("{}\n", &*key.to_hex())).expect("write the key file");
}

pub fn c_path(path: &Path) -> CString {
    CString::new(path.to_str().expect("UTF-8 path")).expect("no NUL in the path")
}

/// The calling thread's last error message.
pub fn last_error() -> String {
    // SAFETY: nnc_last_error_message never returns null and the string lives until the
    // next nnc call on this thread; it is copied at once.
    unsafe { CStr::from_ptr(nnc_capi::nnc_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

/// Index of the largest value (the first of equals).
pub fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best
}

/// A loaded model, freed on drop.
pub struct Model(pub *mut NncModel);

impl Drop for Model {
    fn drop(&mut self) {
        nnc_model_free(self.0)
    }
}

/// An execution, freed on drop.
pub struct Execution(pub *mut NncExecution);

impl Drop for Execution {
    fn drop(&mut self) {
        nnc_execution_free(self.0)
    }
}

pub fn key_object(bytes: &[u8]) -> *mut NncKey {
    let mut k = null_mut();
    // SAFETY: valid slice and out-pointer.
    let r = unsafe { nnc_key_from_bytes(bytes.as_ptr(), bytes.len(), &mut k) };
    assert_eq!(r, NncResult::NoError, "{}", last_error());
    k
}

pub fn load_buffer(bytes: &[u8], key: Option<&[u8]>) -> Result<Model, NncResult> {
    let k = key.map_or(null_mut(), key_object);
    let mut m = null_mut();
    // SAFETY: valid buffer, key (null or live) and out-pointer.
    let r = unsafe { nnc_model_load_buffer(bytes.as_ptr(), bytes.len(), k, &mut m) };
    nnc_key_free(k);
    if r == NncResult::NoError {
        assert!(!m.is_null());
        Ok(Model(m))
    } else {
        assert!(m.is_null(), "a failed load leaves the out-pointer null");
        Err(r)
    }
}

pub fn execution(model: &Model) -> Execution {
    let mut e = null_mut();
    // SAFETY: a live model and a valid out-pointer.
    let r = unsafe { nnc_execution_create(model.0, &mut e) };
    assert_eq!(r, NncResult::NoError, "{}", last_error());
    Execution(e)
}

pub fn set_input(e: &Execution, index: u32, data: &[f32]) -> NncResult {
    // SAFETY: the slice outlives every compute of the tests that bind it.
    unsafe {
        nnc_execution_set_input(
            e.0,
            index,
            data.as_ptr().cast(),
            std::mem::size_of_val(data),
        )
    }
}

pub fn set_output(e: &Execution, index: u32, data: &mut [f32]) -> NncResult {
    // SAFETY: the slice outlives every compute of the tests that bind it.
    unsafe {
        nnc_execution_set_output(
            e.0,
            index,
            data.as_mut_ptr().cast(),
            std::mem::size_of_val(data),
        )
    }
}

pub fn compute(e: &Execution) -> NncResult {
    // SAFETY: a live execution whose bound buffers are alive.
    unsafe { nnc_execution_compute(e.0) }
}

/// tiny_cnn compiled with a fresh key: the file, the key, its input and reference output.
pub fn tiny() -> (Vec<u8>, Vec<u8>, Vec<f32>, Vec<f32>) {
    let k = key();
    let bytes = compile(&testdata("tiny_cnn.onnx"), Some(&k));
    let input = nnc_formats::npy::read_npy_file(testdata("tiny_cnn.input.npy"))
        .expect("input")
        .to_f32_vec()
        .expect("float32");
    let reference = nnc_formats::npy::read_npy_file(testdata("tiny_cnn.output.npy"))
        .expect("reference")
        .to_f32_vec()
        .expect("float32");
    (bytes, k.as_bytes().to_vec(), input, reference)
}

/// The directory holding `libnnc_capi.so` built for this test run: the test binary's
/// own (`target/<profile>/deps`).
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe.parent().expect("a directory").to_path_buf();
    assert!(
        dir.join("libnnc_capi.so").is_file(),
        "no libnnc_capi.so beside the test binary in {}",
        dir.display()
    );
    dir
}

/// Builds the C program `source` with the system C compiler (strict warnings) against
/// this test run's library, as `dir/name`, with an rpath to that library.
pub fn build_c(source: &Path, dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(name);
    let lib = lib_dir();
    let out = Command::new("cc")
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            "-O1",
            "-g",
            "-I",
        ])
        .arg(repo().join("runtime/capi/include"))
        .arg("-o")
        .arg(&exe)
        .arg(source)
        .arg("-L")
        .arg(&lib)
        .arg("-lnnc_capi")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        // DT_RPATH, not DT_RUNPATH: searched before LD_LIBRARY_PATH, whose first entry
        // under cargo is target/<profile>, where an older build's library may lie.
        .arg("-Wl,--disable-new-dtags")
        .output()
        .expect("the system C compiler `cc` runs");
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Valgrind and the options the tests run it with: any memory error, or a definite
/// leak, exits 99.
pub const VALGRIND: &[&str] = &[
    "valgrind",
    "-q",
    "--error-exitcode=99",
    "--leak-check=full",
    "--errors-for-leak-kinds=definite",
];

/// Whether valgrind is installed. Its absence fails in CI (`scripts/setup` installs
/// it); elsewhere the caller skips its valgrind run.
pub fn valgrind_available() -> bool {
    let available = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !available {
        assert!(
            std::env::var_os("CI").is_none(),
            "valgrind is missing, and CI must not skip this test (scripts/setup installs it)"
        );
        eprintln!("skipping the valgrind run: valgrind is not installed");
    }
    available
}
