//! Tensor files users hand to `nnc run`: numpy `.npy` and ONNX `TensorProto` `.pb`.

use std::path::Path;

use anyhow::Context;
use nnc_compiler::onnx::{proto, tensor};
use nnc_formats::tensor::HostTensor;

use crate::exit::{Exit, err, read_input};

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

/// Reads a tensor file, its format chosen by extension.
pub fn read(path: &Path) -> anyhow::Result<HostTensor> {
    match TensorFormat::of(path) {
        Some(TensorFormat::Npy) => {
            let bytes = read_input(path, "tensor file")?;
            nnc_formats::npy::read_npy(&bytes)
                .with_context(|| format!("{} is not a valid .npy file", path.display()))
        }
        Some(TensorFormat::Pb) => {
            let bytes = read_input(path, "tensor file")?;
            let proto = proto::decode_tensor(&bytes)
                .with_context(|| format!("{} is not an ONNX TensorProto", path.display()))?;
            tensor::tensor_to_host(&proto, &tensor::ExternalDataContext::none())
                .with_context(|| format!("cannot read tensor file {}", path.display()))
        }
        None => Err(err(
            Exit::Malformed,
            format!(
                "{}: unknown tensor file type (expected .npy or .pb)",
                path.display()
            ),
        )),
    }
}

/// Serializes a tensor in `format`.
pub fn encode(t: &HostTensor, name: &str, format: TensorFormat) -> Vec<u8> {
    match format {
        TensorFormat::Npy => nnc_formats::npy::write_npy(t),
        TensorFormat::Pb => proto::encode_tensor(&tensor::host_to_tensor(t, name)),
    }
}
