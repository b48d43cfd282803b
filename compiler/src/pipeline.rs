//! The compiler's front door: read a source model, lower it, optimize it.

use std::collections::BTreeMap;
use std::path::Path;

use nnc_formats::nn::Model;

use crate::error::CompileError;
use crate::onnx::{self, ImportOptions, SourceSummary};
use crate::passes::{self, PassReport};

/// Source model formats nnc reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum SourceFormat {
    Onnx,
    Tflite,
}

impl SourceFormat {
    pub fn name(self) -> &'static str {
        match self {
            SourceFormat::Onnx => "ONNX",
            SourceFormat::Tflite => "TFLite",
        }
    }
}

/// Identifies a source format from the file's bytes (TFLite's flatbuffer identifier),
/// falling back to the extension. `None` when neither says.
pub fn detect_format(path: &Path, bytes: &[u8]) -> Option<SourceFormat> {
    if bytes.len() >= 8 && &bytes[4..8] == b"TFL3" {
        return Some(SourceFormat::Tflite);
    }
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("onnx") => Some(SourceFormat::Onnx),
        Some("tflite") => Some(SourceFormat::Tflite),
        _ => None,
    }
}

/// Options for lowering a source model.
#[derive(Clone, Debug, Default)]
pub struct LowerOptions {
    pub import: ImportOptions,
    /// Skip the optimization passes (for debugging the frontends).
    pub no_optimize: bool,
}

/// A source model lowered to the NN IR and optimized.
pub struct Lowered {
    pub model: Model,
    pub format: SourceFormat,
    pub source: SourceSummary,
    /// Operation histogram straight out of the frontend, before any pass.
    pub lowered_histogram: BTreeMap<&'static str, usize>,
    pub passes: Vec<PassReport>,
}

/// Reads, lowers and optimizes the model at `path`.
pub fn lower_file(path: &Path, options: &LowerOptions) -> Result<Lowered, CompileError> {
    let bytes = std::fs::read(path).map_err(|source| CompileError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let format = detect_format(path, &bytes).ok_or_else(|| {
        CompileError::Options(format!(
            "{}: cannot tell the model format (expected a .onnx or .tflite file)",
            path.display()
        ))
    })?;
    let ext = onnx::tensor::ExternalDataContext::for_model_file(path);
    lower_bytes(bytes.into(), format, &ext, options)
}

/// Lowers and optimizes a model held in memory.
pub fn lower_bytes(
    bytes: bytes::Bytes,
    format: SourceFormat,
    ext: &onnx::tensor::ExternalDataContext,
    options: &LowerOptions,
) -> Result<Lowered, CompileError> {
    let imported = match format {
        SourceFormat::Onnx => onnx::import_bytes(bytes, &options.import, ext)?,
        SourceFormat::Tflite => {
            if !options.import.bound_inputs.is_empty() {
                return Err(CompileError::Options(
                    "--bind-input applies to ONNX models only (TFLite models carry their \
                     parameters as constants already)"
                        .into(),
                ));
            }
            crate::tflite::import_bytes(bytes, &options.import)?
        }
    };
    let mut model = imported.model;
    let lowered_histogram = model.operation_histogram();
    let passes = if options.no_optimize {
        Vec::new()
    } else {
        passes::optimize(&mut model)?
    };
    Ok(Lowered {
        model,
        format,
        source: imported.source,
        lowered_histogram,
        passes,
    })
}

/// The inputs a source ONNX model declares (initializers excluded), in order; empty for
/// other formats. For matching tensor files to inputs before compiling.
pub fn declared_inputs(path: &Path) -> Result<Vec<onnx::DeclaredInput>, CompileError> {
    let bytes = std::fs::read(path).map_err(|source| CompileError::Io {
        path: path.display().to_string(),
        source,
    })?;
    if detect_format(path, &bytes) != Some(SourceFormat::Onnx) {
        return Ok(Vec::new());
    }
    let model = onnx::proto::decode_model(bytes.into())?;
    Ok(onnx::declared_inputs(&model))
}
