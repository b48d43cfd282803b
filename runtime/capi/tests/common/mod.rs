//! Helpers shared by the C API's integration tests: compiling models as `nnc compile`
//! does (the compiler's pipeline and emitter), keys, and reading C strings.

#![allow(dead_code)]

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

use nnc_compiler::emit::{self, EmitOptions};
use nnc_compiler::pipeline::{self, LowerOptions};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::Model;

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
pub fn emit_model(model: &Model, key: Option<&Key>) -> Vec<u8> {
    emit::emit(
        model,
        EmitOptions {
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
