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
    /// Inputs rewritten to take uint8 images (`--input-preprocess`), applied after
    /// lowering and before the passes, so that they optimize the inserted operations too.
    pub input_preprocess: Vec<crate::preprocess::InputPreprocess>,
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

/// A source model read into memory once, so that it can be lowered several times (e.g.
/// again with inputs bound) without going back to the disk.
pub struct SourceFile {
    pub bytes: bytes::Bytes,
    /// The mapping behind `bytes`, when the file is memory-mapped.
    map: Option<std::sync::Arc<memmap2::Mmap>>,
    pub format: SourceFormat,
    pub ext: onnx::tensor::ExternalDataContext,
}

impl SourceFile {
    pub fn read(path: &Path) -> Result<SourceFile, CompileError> {
        let (bytes, map) = read_source(path).map_err(|source| CompileError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let format = detect_format(path, &bytes).ok_or_else(|| {
            CompileError::invalid(
                path.display().to_string(),
                "not a model nnc reads: expected an ONNX (.onnx), TFLite (.tflite) or compiled \
                 (.nnc) file",
            )
        })?;
        Ok(SourceFile {
            bytes,
            map,
            format,
            ext: onnx::tensor::ExternalDataContext::for_model_file(path),
        })
    }

    /// Lowers and optimizes the model. A memory-mapped source gives its pages back once
    /// the importer has copied the weights out (they would otherwise count twice in the
    /// compiler's peak memory); what is read again later faults back in from the file.
    pub fn lower(&self, options: &LowerOptions) -> Result<Lowered, CompileError> {
        let Some(map) = &self.map else {
            return lower_bytes(self.bytes.clone(), self.format, &self.ext, options);
        };
        let map = map.clone();
        let mut options = options.clone();
        options.import.release_source = Some(onnx::SourceRelease::new(move |bytes| {
            // Whole pages inside `bytes` (64 KiB-aligned: a multiple of every page size
            // Linux uses), or the whole mapping.
            const ALIGN: usize = 64 * 1024;
            let (offset, len) = match bytes {
                None => (0, map.len()),
                Some(b) => {
                    let start = (b.as_ptr() as usize).wrapping_sub(map.as_ptr() as usize);
                    if start > map.len() || b.len() > map.len() - start {
                        return; // not a slice of this mapping
                    }
                    let first = start.next_multiple_of(ALIGN);
                    let end = (start + b.len()) / ALIGN * ALIGN;
                    if end <= first {
                        return;
                    }
                    (first, end - first)
                }
            };
            // SAFETY: `offset..offset + len` lies inside the mapping (computed above).
            // The mapping is read-only, so no page holds changes of ours: dropped pages
            // are read again from the file when touched, and the slices that point into
            // them stay valid.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len)
            };
        }));
        lower_bytes(self.bytes.clone(), self.format, &self.ext, &options)
    }

    /// The inputs an ONNX model declares (initializers excluded), in order; empty for
    /// other formats. For matching tensor files to inputs before compiling.
    pub fn declared_inputs(&self) -> Result<Vec<onnx::DeclaredInput>, CompileError> {
        if self.format != SourceFormat::Onnx {
            return Ok(Vec::new());
        }
        let model = onnx::proto::decode_model(self.bytes.clone())?;
        Ok(onnx::declared_inputs(&model))
    }
}

/// The bytes of a source model: a large regular file is memory-mapped (its weights are
/// then read straight from the page cache, without a copy into the heap and the page
/// faults of a fresh buffer), a small one read, up to its size when opened and no
/// further. Anything but a regular file (a FIFO that would block, a device that never
/// ends, a directory) is refused before it is opened.
///
/// Like LLVM's `MemoryBuffer`, the mapping trusts that the file is not truncated while
/// the compiler reads it (a truncated mapping faults); the model's own bytes, however
/// hostile, are parsed with bounds checks either way.
fn read_source(
    path: &Path,
) -> std::io::Result<(bytes::Bytes, Option<std::sync::Arc<memmap2::Mmap>>)> {
    const MAP_FROM: u64 = 1 << 20;
    // stat before open: opening a FIFO for reading waits for a writer.
    refuse_special(&std::fs::metadata(path)?)?;
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    refuse_special(&meta)?;
    if meta.len() >= MAP_FROM {
        // SAFETY: a read-only shared mapping of a regular file. Rust only allows it if
        // nothing changes the file while it is mapped: as the function's doc says, the
        // compiler trusts that (a truncation would fault with SIGBUS, a concurrent
        // write change bytes under shared borrows); it never writes through the map.
        let map = std::sync::Arc::new(unsafe { memmap2::MmapOptions::new().map(&file) }?);
        return Ok((bytes::Bytes::from_owner(SharedMap(map.clone())), Some(map)));
    }
    let len = meta.len();
    let mut bytes = Vec::with_capacity(len as usize);
    std::io::Read::read_to_end(&mut std::io::Read::take(&file, len), &mut bytes)?;
    Ok((bytes.into(), None))
}

/// A model source must be a regular file.
fn refuse_special(meta: &std::fs::Metadata) -> std::io::Result<()> {
    if meta.is_file() {
        return Ok(());
    }
    let kind = if meta.is_dir() {
        std::io::ErrorKind::IsADirectory
    } else {
        std::io::ErrorKind::InvalidInput
    };
    Err(std::io::Error::new(
        kind,
        "not a regular file (a model is read from a file, not a FIFO, device or directory)",
    ))
}

/// A shared mapping as the owner of a `Bytes`.
struct SharedMap(std::sync::Arc<memmap2::Mmap>);

impl AsRef<[u8]> for SharedMap {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Refuses a model with a tensor beyond the `tensor` limit: the runtime would have to
/// allocate it (declared shapes cost nothing to write down).
fn check_tensor_sizes(
    model: &Model,
    limits: &nnc_formats::limits::Limits,
) -> Result<(), CompileError> {
    for (i, o) in model.main.operands.iter().enumerate() {
        if o.dimensions.contains(&0) {
            continue;
        }
        let elements = nnc_formats::limits::element_count(&o.dimensions);
        let size = o.operand_type.element_size().unwrap_or(1) as u64;
        limits
            .check_tensor(
                || {
                    if o.name.is_empty() {
                        format!("operand {i}")
                    } else {
                        format!("operand {i} ('{}')", o.name)
                    }
                },
                elements,
                size,
            )
            .map_err(|e| CompileError::limit("model", e))?;
    }
    Ok(())
}

/// Reads, lowers and optimizes the model at `path`.
pub fn lower_file(path: &Path, options: &LowerOptions) -> Result<Lowered, CompileError> {
    SourceFile::read(path)?.lower(options)
}

/// Lowers and optimizes a model held in memory.
pub fn lower_bytes(
    bytes: bytes::Bytes,
    format: SourceFormat,
    ext: &onnx::tensor::ExternalDataContext,
    options: &LowerOptions,
) -> Result<Lowered, CompileError> {
    // External data is checked against the limits the import runs under.
    let ext = ext.clone().with_limits(options.import.limits);
    let imported = match format {
        SourceFormat::Onnx => onnx::import_bytes(bytes, &options.import, &ext)?,
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
    check_tensor_sizes(&model, &options.import.limits)?;
    crate::preprocess::apply_all(&mut model, &options.input_preprocess)
        .map_err(|e| CompileError::Options(e.to_string()))?;
    let lowered_histogram = model.operation_histogram();
    let mut passes = imported.frontend_passes;
    if !options.no_optimize {
        passes.extend(passes::optimize(&mut model)?);
    }
    Ok(Lowered {
        model,
        format,
        source: imported.source,
        lowered_histogram,
        passes,
    })
}
