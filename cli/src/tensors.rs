//! Tensor files users hand to `nnc run`: numpy `.npy` and ONNX `TensorProto` `.pb`.

use std::path::Path;

use anyhow::Context;
use nnc_compiler::onnx::{proto, tensor};
use nnc_formats::limits::Limits;
use nnc_formats::tensor::HostTensor;

use crate::exit::{Exit, err};
use crate::input;

/// File formats for tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TensorFormat {
    Npy,
    Pb,
}

impl TensorFormat {
    pub fn extension(self) -> &'static str {
        match self {
            TensorFormat::Npy => "npy",
            TensorFormat::Pb => "pb",
        }
    }

    pub fn of(path: &Path) -> Option<TensorFormat> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "npy" => Some(TensorFormat::Npy),
            "pb" => Some(TensorFormat::Pb),
            _ => None,
        }
    }
}

/// Reads a tensor file, its format chosen by extension, within the default limits.
pub fn read(path: &Path) -> anyhow::Result<HostTensor> {
    read_within(path, &Limits::default())
}

/// Reads a tensor file, its format chosen by extension: a file or tensor beyond the
/// `tensor` limit is refused (exit 4) before its data is read.
pub fn read_within(path: &Path, limits: &Limits) -> anyhow::Result<HostTensor> {
    let format = TensorFormat::of(path).ok_or_else(|| {
        err(
            Exit::Malformed,
            format!(
                "{}: unknown tensor file type (expected .npy or .pb)",
                path.display()
            ),
        )
    })?;
    let bytes = input::read_tensor_file(path, limits)?;
    match format {
        TensorFormat::Npy => nnc_formats::npy::read_npy(&bytes)
            .with_context(|| format!("{} is not a valid .npy file", path.display())),
        TensorFormat::Pb => {
            let proto = proto::decode_tensor(&bytes)
                .with_context(|| format!("{} is not an ONNX TensorProto", path.display()))?;
            let context = tensor::ExternalDataContext::none().with_limits(*limits);
            tensor::tensor_to_host(&proto, &context).map_err(|e| {
                let what = format!("cannot read tensor file {}", path.display());
                match e {
                    // Classified by the limit (exit 4), not as a malformed file.
                    tensor::OnnxTensorError::Limit { source, .. } => {
                        anyhow::Error::new(source).context(what)
                    }
                    e => anyhow::Error::new(e).context(what),
                }
            })
        }
    }
}

/// Serializes a tensor in `format`.
pub fn encode(t: &HostTensor, name: &str, format: TensorFormat) -> Vec<u8> {
    match format {
        TensorFormat::Npy => nnc_formats::npy::write_npy(t),
        TensorFormat::Pb => proto::encode_tensor(&tensor::host_to_tensor(t, name)),
    }
}
