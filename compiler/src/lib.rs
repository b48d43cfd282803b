//! `nnc-compiler`: from ONNX and TFLite models to validated, optimized, encrypted `.nnc`
//! files.
//!
//! The pipeline: a frontend ([`onnx`]) decodes and lowers a source model to the NN IR of
//! `nnc-formats`; [`passes`] optimize it; later stages partition and emit it.

pub mod emit;
pub mod error;
pub mod onnx;
pub mod partition;
pub mod passes;
pub mod pipeline;
pub mod preprocess;
pub mod quantize;
#[cfg(any(test, feature = "test-support"))]
pub mod synthetic;
pub mod tflite;

pub use error::{CompileError, UnsupportedReport};
