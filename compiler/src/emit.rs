//! Emission: an optimized NN model becomes `.nnc` bytes.

use nnc_formats::container::{self, Envelope, SectionKind, Sink, WriteOptions, Written};
use nnc_formats::crypto::{Key, Mode};
use nnc_formats::nn::Model;

use crate::error::CompileError;

/// How to emit a model.
pub struct EmitOptions<'a> {
    pub key: Option<&'a Key>,
    pub mode: Mode,
    /// With a key: plaintext weights, the file authenticated with it (no secrecy).
    pub authenticate_only: bool,
    pub reproducible: bool,
    /// Further sections to embed (the execution plan).
    pub extra_sections: Vec<(SectionKind, Vec<u8>)>,
    /// Device recipients and a signature (format 1.3).
    pub envelope: Envelope<'a>,
}

/// The producer string recorded in every file.
pub fn producer() -> String {
    format!("nnc {}", env!("CARGO_PKG_VERSION"))
}

/// Serializes `model` into a `.nnc` file held in memory.
pub fn emit(model: &Model, options: EmitOptions) -> Result<Vec<u8>, CompileError> {
    Ok(container::write(model, &write_options(options))?)
}

/// Writes `model` as a `.nnc` file into `sink` (a file: each weight field is stored as
/// soon as it is encrypted, without the whole file ever in memory).
pub fn emit_to(
    model: &Model,
    options: EmitOptions,
    sink: &impl Sink,
) -> Result<Written, CompileError> {
    Ok(container::write_to(model, &write_options(options), sink)?)
}

fn write_options(options: EmitOptions) -> WriteOptions {
    WriteOptions {
        envelope: options.envelope,
        key: options.key,
        mode: options.mode,
        authenticate_only: options.authenticate_only,
        reproducible: options.reproducible,
        producer: producer(),
        arena: None,
        extra_sections: options.extra_sections,
    }
}
