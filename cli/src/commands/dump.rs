//! `nnc dump`: a model's graph as Graphviz, JSON or text.

use std::path::PathBuf;

use anyhow::Context;
use std::process::ExitCode;

use nnc_formats::nn::dump::{self, DotOptions};
use serde_json::json;

use crate::exit::{Exit, err};
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
    /// Bind a source model's input to a fixed value, as `nnc compile --bind-input` does
    /// (an `If` on it folds): NAME=FILE (repeatable).
    #[arg(long = "bind-input", value_name = "NAME=FILE", value_parser = super::parse_bind_input)]
    pub bind_inputs: Vec<(String, std::path::PathBuf)>,
    /// Dump the model as the frontend lowered it, before optimization passes.
    #[arg(long)]
    pub no_optimize: bool,
    #[command(flatten)]
    pub limits: super::LimitArgs,
    /// JSON on stdout: the graph as JSON (as `--format json`), or with `-o`, a summary of
    /// what was written. Failures are one JSON error object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let to_stdout = args
        .output
        .as_deref()
        .is_none_or(|p| p == std::path::Path::new("-"));
    let format = match (args.json, args.format) {
        (true, Format::Text) if to_stdout => Format::Json,
        (true, Format::Json) | (false, _) => args.format,
        (true, _) if !to_stdout => args.format,
        (true, _) => {
            return Err(err(
                Exit::Usage,
                "--json prints the graph as JSON on stdout; with --format dot, write the graph with -o FILE",
            ));
        }
    };
    let (model, plan) = if super::is_compiled(&args.model)? {
        let bytes = crate::input::read_model(&args.model, "model")?;
        let container = nnc_formats::container::Container::parse(&bytes)
            .with_context(|| format!("{} is not a valid nnc model file", args.model.display()))?;
        let plan = super::stored_plan(&container)?;
        (container.model, plan)
    } else {
        let mut options =
            super::lower_options(&args.input_shapes, args.no_optimize, args.limits.limits())?;
        super::bind_inputs(&mut options, &args.bind_inputs)?;
        (lower_or_fill_shapes(&args.model, options)?.model, None)
    };
    let model = &model;
    let mut dot_options = DotOptions {
        title: Some(args.model.display().to_string()),
        ..Default::default()
    };
    if let Some(plan) = &plan {
        // One cluster per step, coloured by device; cross-step tensors stand out.
        const PALETTE: [&str; 6] = [
            "#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860",
        ];
        for (i, step) in plan.steps.iter().enumerate() {
            let device = &plan.devices[step.device as usize];
            dot_options
                .clusters
                .push(nnc_formats::nn::dump::DotCluster {
                    label: format!("step {i}: {} ({})", device.name, device.kind),
                    color: PALETTE[step.device as usize % PALETTE.len()].to_string(),
                    operations: step.operations.iter().map(|&o| o as usize).collect(),
                });
            for &o in step.inputs.iter().chain(&step.outputs) {
                let operand = &model.main.operands[o as usize];
                if operand.lifetime == nnc_formats::nn::Lifetime::TemporaryVariable {
                    dot_options.highlighted_operands.insert(o);
                }
            }
        }
    }
    let text = match format {
        Format::Dot => dump::to_dot(model, &dot_options),
        Format::Json => format!("{}\n", serde_json::to_string_pretty(&dump::to_json(model))?),
        Format::Text => dump::to_text(model),
    };
    output::to_file_or_stdout(args.output.as_deref(), &text, &[args.model.as_path()])?;
    if args.json && !to_stdout {
        let written = args.output.as_ref().map(|p| p.display().to_string());
        output::stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({
                "schema": "nnc.dump/1",
                "model": args.model.display().to_string(),
                "format": match format { Format::Dot => "dot", Format::Json => "json", Format::Text => "text" },
                "output": written,
                "bytes": text.len(),
            }))?
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Lowers the model; when that fails only for want of input dimensions, lowers it again
/// with the shapes the error suggests, and says so on stderr (a graph drawn for a
/// placeholder size beats no graph; `--input-shape` gives the real one).
fn lower_or_fill_shapes(
    path: &std::path::Path,
    mut options: nnc_compiler::pipeline::LowerOptions,
) -> anyhow::Result<nnc_compiler::pipeline::Lowered> {
    let first = match super::lower(path, &options, "dump") {
        Ok(lowered) => return Ok(lowered),
        Err(e) => e,
    };
    let hints = match first.downcast_ref::<nnc_compiler::CompileError>() {
        Some(nnc_compiler::CompileError::Unsupported(r))
            if r.only_needs_input_shapes() && !r.input_shapes.is_empty() =>
        {
            r.input_shapes.clone()
        }
        _ => return Err(first),
    };
    for h in &hints {
        options
            .import
            .input_shapes
            .insert(h.name.clone(), h.suggested.clone());
    }
    let Ok(lowered) = super::lower(path, &options, "dump") else {
        return Err(first);
    };
    for h in &hints {
        eprintln!(
            "warning: input '{}' has unknown dimensions; dumped as if given {} ({}); pass \
             --input-shape for the sizes you use",
            h.name,
            h.flag(),
            h.explanation()
        );
    }
    Ok(lowered)
}
