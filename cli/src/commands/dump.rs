//! `nnc dump`: a model's graph as Graphviz, JSON or text.

use std::path::PathBuf;

use anyhow::Context;
use std::process::ExitCode;

use nnc_formats::nn::dump::{self, DotOptions};

use crate::output;

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Dot,
    Json,
    Text,
}

#[derive(clap::Args)]
pub struct Args {
    /// The model: .onnx, .tflite or a compiled .nnc.
    pub model: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Write to FILE instead of standard output (atomically).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Fix a dynamic input dimension: NAME=1x3x224x224 (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = super::parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<u32>)>,
    /// Dump the model as the frontend lowered it, before optimization passes.
    #[arg(long)]
    pub no_optimize: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let model = if super::is_compiled(&args.model)? {
        let bytes = std::fs::read(&args.model)
            .with_context(|| format!("cannot read {}", args.model.display()))?;
        nnc_formats::container::Container::parse(&bytes)
            .with_context(|| format!("{} is not a valid nnc model file", args.model.display()))?
            .model
    } else {
        let options = super::lower_options(&args.input_shapes, args.no_optimize)?;
        super::lower(&args.model, &options)?.model
    };
    let model = &model;
    let text = match args.format {
        Format::Dot => dump::to_dot(
            model,
            &DotOptions {
                title: Some(args.model.display().to_string()),
                ..Default::default()
            },
        ),
        Format::Json => format!("{}\n", serde_json::to_string_pretty(&dump::to_json(model))?),
        Format::Text => dump::to_text(model),
    };
    output::to_file_or_stdout(args.output.as_deref(), &text)?;
    Ok(ExitCode::SUCCESS)
}
