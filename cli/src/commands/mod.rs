//! One module per subcommand, plus the options they share.

pub mod bench;
pub mod cache;
pub mod compare;
pub mod compile;
pub mod devices;
pub mod diff;
pub mod dump;
pub mod inspect;
pub mod keygen;
pub mod rewrap;
pub mod run;
pub mod sbom;
pub mod sign;
pub mod stream;
pub mod verify;

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use nnc_compiler::pipeline::{self, LowerOptions, Lowered};
use nnc_formats::limits::{LimitKind, Limits};

use crate::exit::{Exit, err};

/// `--limit NAME=SIZE`, shared by every command that lowers or loads a model.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LimitArgs {
    /// Set a resource limit (repeatable): `tensor` (the largest tensor; default 1G),
    /// `folded` (constants compile-time evaluation may create beyond the model's own
    /// weights; default 256M), `arena` (intermediate tensors of one execution; default
    /// 2G), `calibration` (the calibration samples of `--quantize`; default 4G). SIZE
    /// takes K, M, G or T.
    #[arg(long = "limit", value_name = "NAME=SIZE", value_parser = nnc_formats::limits::parse_limit)]
    pub limits: Vec<(LimitKind, u64)>,
}

impl LimitArgs {
    pub fn limits(&self) -> Limits {
        let mut limits = Limits::default();
        for &(kind, bytes) in &self.limits {
            limits.set(kind, bytes);
        }
        limits
    }
}

/// `--input-shape NAME=1x3x224x224` (also `NAME=1,3,224,224`).
pub fn parse_input_shape(text: &str) -> Result<(String, Vec<u32>), String> {
    let (name, dims) = text
        .rsplit_once('=')
        .ok_or_else(|| format!("'{text}' is not NAME=DIMS (e.g. input=1x3x224x224)"))?;
    if name.is_empty() {
        return Err(format!("'{text}' has no input name"));
    }
    let dims = dims
        .split(['x', ','])
        .map(|d| match d.trim().parse::<u32>() {
            Ok(v) if v >= 1 && v <= i32::MAX as u32 => Ok(v),
            _ => Err(format!(
                "'{d}' in '{text}' is not a dimension (a whole number from 1 to {})",
                i32::MAX
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((name.to_string(), dims))
}

/// `--bind-input NAME=FILE`.
pub fn parse_bind_input(text: &str) -> Result<(String, std::path::PathBuf), String> {
    let (name, file) = text
        .split_once('=')
        .ok_or_else(|| format!("'{text}' is not NAME=FILE (e.g. scales=scales.npy)"))?;
    if name.is_empty() || file.is_empty() {
        return Err(format!("'{text}' needs both an input name and a file"));
    }
    Ok((name.to_string(), std::path::PathBuf::from(file)))
}

/// Reads the tensor files of `--bind-input` into the import options.
pub fn bind_inputs(
    options: &mut LowerOptions,
    bindings: &[(String, std::path::PathBuf)],
) -> anyhow::Result<()> {
    for (name, file) in bindings {
        let value = crate::tensors::read_within(file, &options.import.limits)
            .with_context(|| format!("--bind-input {name}"))?;
        if options
            .import
            .bound_inputs
            .insert(name.clone(), value)
            .is_some()
        {
            return Err(err(
                Exit::Usage,
                format!("--bind-input is given twice for '{name}'"),
            ));
        }
    }
    Ok(())
}

/// Lowering options from the shared command-line flags.
pub fn lower_options(
    input_shapes: &[(String, Vec<u32>)],
    no_optimize: bool,
    limits: Limits,
) -> anyhow::Result<LowerOptions> {
    lower_options_with(input_shapes, &[], no_optimize, limits)
}

/// [`lower_options`] with `--input-preprocess` specifications (parsed here: their
/// errors already name the option).
pub fn lower_options_with(
    input_shapes: &[(String, Vec<u32>)],
    input_preprocess: &[String],
    no_optimize: bool,
    limits: Limits,
) -> anyhow::Result<LowerOptions> {
    let mut shapes = HashMap::new();
    for (name, dims) in input_shapes {
        if shapes.insert(name.clone(), dims.clone()).is_some() {
            return Err(err(
                Exit::Usage,
                format!("--input-shape is given twice for '{name}'"),
            ));
        }
    }
    let mut options = LowerOptions {
        no_optimize,
        ..Default::default()
    };
    options.import.input_shapes = shapes;
    options.import.limits = limits;
    for spec in input_preprocess {
        options.input_preprocess.push(spec.parse().map_err(
            |e: nnc_compiler::preprocess::PreprocessError| err(Exit::Usage, e.to_string()),
        )?);
    }
    Ok(options)
}

/// Lowers a source model, with the file named in errors.
/// Prints the importer's notes (what it computes differently from the source's own
/// types) as warnings on stderr.
pub fn warn_notes(lowered: &Lowered) {
    for note in &lowered.source.notes {
        eprintln!("warning: {note}");
    }
}

/// `what` is what the command does with the model ("compile", "inspect", "dump"), so the
/// error says what failed in the user's terms.
pub fn lower(path: &Path, options: &LowerOptions, what: &str) -> anyhow::Result<Lowered> {
    pipeline::lower_file(path, options).with_context(|| format!("cannot {what} {}", path.display()))
}

/// `--algorithm` of keygen.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum AlgorithmArg {
    Sm4,
    #[value(alias = "aes-128")]
    Aes128,
    #[value(alias = "aes-192")]
    Aes192,
    #[value(alias = "aes-256")]
    Aes256,
}

impl From<AlgorithmArg> for nnc_formats::crypto::Algorithm {
    fn from(a: AlgorithmArg) -> Self {
        use nnc_formats::crypto::Algorithm as A;
        match a {
            AlgorithmArg::Sm4 => A::Sm4,
            AlgorithmArg::Aes128 => A::Aes128,
            AlgorithmArg::Aes192 => A::Aes192,
            AlgorithmArg::Aes256 => A::Aes256,
        }
    }
}

/// `--encrypt` of compile.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum EncryptArg {
    Sm4,
    #[value(alias = "aes-128")]
    Aes128,
    #[value(alias = "aes-192")]
    Aes192,
    #[value(alias = "aes-256")]
    Aes256,
    None,
}

impl From<EncryptArg> for Option<nnc_formats::crypto::Algorithm> {
    fn from(a: EncryptArg) -> Self {
        match a {
            EncryptArg::Sm4 => Some(AlgorithmArg::Sm4.into()),
            EncryptArg::Aes128 => Some(AlgorithmArg::Aes128.into()),
            EncryptArg::Aes192 => Some(AlgorithmArg::Aes192.into()),
            EncryptArg::Aes256 => Some(AlgorithmArg::Aes256.into()),
            EncryptArg::None => None,
        }
    }
}

/// `--mode` of compile.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ModeArg {
    Ecb,
    Cbc,
    Cfb,
    Ofb,
    Ctr,
    /// GCM: encryption and a 128-bit tag per field in one pass (AES-GCM, SM4-GCM).
    Gcm,
}

impl From<ModeArg> for nnc_formats::crypto::Mode {
    fn from(m: ModeArg) -> Self {
        use nnc_formats::crypto::Mode as M;
        match m {
            ModeArg::Ecb => M::Ecb,
            ModeArg::Cbc => M::Cbc,
            ModeArg::Cfb => M::Cfb,
            ModeArg::Ofb => M::Ofb,
            ModeArg::Ctr => M::Ctr,
            ModeArg::Gcm => M::Gcm,
        }
    }
}

/// True when the file is a compiled model: it starts with the `.nnc` magic, or is named
/// `.nnc` (so that a damaged magic reads as a damaged `.nnc`, not as a source model).
pub fn is_compiled(path: &Path) -> anyhow::Result<bool> {
    use std::io::Read;
    let cannot = |e: std::io::Error| {
        err(
            Exit::MissingInput,
            format!("cannot read {}: {e}", path.display()),
        )
    };
    // Regular files only, opened without blocking (a FIFO would wait for a writer).
    let (mut f, _) = crate::input::open(path, "model")?;
    let mut magic = [0u8; 8];
    let mut n = 0;
    while n < magic.len() {
        match f.read(&mut magic[n..]).map_err(cannot)? {
            0 => break,
            k => n += k,
        }
    }
    let named_nnc = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("nnc"));
    Ok(named_nnc || (n == 8 && magic == nnc_formats::container::MAGIC))
}

/// The cache configuration from `--cache-dir` and `--token`.
pub fn cache_config(
    dir: Option<&Path>,
    token: Option<&str>,
) -> anyhow::Result<Option<nnc_runtime::CacheConfig>> {
    let Some(dir) = dir else { return Ok(None) };
    let token = match token {
        Some(t) => Some(nnc_formats::cache::parse_token(t)?),
        None => None,
    };
    Ok(Some(nnc_runtime::CacheConfig {
        dir: dir.to_path_buf(),
        token,
    }))
}

/// `--preference` of compile.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum PreferenceArg {
    FastSingleAnswer,
    SustainedSpeed,
    LowPower,
}

impl From<PreferenceArg> for nnc_formats::plan::Preference {
    fn from(p: PreferenceArg) -> Self {
        use nnc_formats::plan::Preference as P;
        match p {
            PreferenceArg::FastSingleAnswer => P::FastSingleAnswer,
            PreferenceArg::SustainedSpeed => P::SustainedSpeed,
            PreferenceArg::LowPower => P::LowPower,
        }
    }
}

/// `--partition` of compile.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum PartitionArg {
    CpuOnly,
    Fallback,
    Strict,
}

impl From<PartitionArg> for nnc_formats::plan::PartitionMode {
    fn from(p: PartitionArg) -> Self {
        use nnc_formats::plan::PartitionMode as M;
        match p {
            PartitionArg::CpuOnly => M::CpuOnly,
            PartitionArg::Fallback => M::Fallback,
            PartitionArg::Strict => M::Strict,
        }
    }
}

/// The execution plan stored in a compiled file, if any.
pub fn stored_plan(
    c: &nnc_formats::container::Container,
) -> anyhow::Result<Option<nnc_formats::plan::ExecutionPlan>> {
    match c.section(nnc_formats::container::SectionKind::ExecutionPlan) {
        None => Ok(None),
        Some(bytes) => Ok(Some(nnc_formats::plan::ExecutionPlan::from_bytes(
            bytes,
            c.model.main.operations.len(),
            c.model.main.operands.len(),
        )?)),
    }
}
