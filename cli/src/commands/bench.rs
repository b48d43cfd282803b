//! `nnc bench`: execution latency of a model on this machine.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use nnc_formats::tensor::{DataType, HostTensor};
use serde_json::json;

use crate::output;

#[derive(clap::Args)]
pub struct Args {
    /// A compiled .nnc, or an .onnx/.tflite model (compiled in memory first).
    pub model: PathBuf,
    #[command(flatten)]
    pub key: crate::keys::KeyArgs,
    /// Input tensor files (as for `nnc run`); zeros of the declared shape when omitted.
    #[arg(long = "input", value_name = "[NAME=]FILE")]
    pub inputs: Vec<String>,
    /// Timed executions (after one untimed warm-up).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub runs: u32,
    /// Threads for the CPU kernels.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// How quantized convolutions, products and means requantize (as for `nnc run`).
    #[arg(long, value_enum, default_value_t = super::run::RequantizationArg::Float)]
    pub requantization: super::run::RequantizationArg,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub limits: super::LimitArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let run_args = super::run::Args {
        model: args.model.clone(),
        key: args.key.clone(),
        inputs: args.inputs.clone(),
        input_dir: None,
        output_dir: PathBuf::from("."),
        output_format: crate::tensors::TensorFormat::Npy,
        timing: false,
        json: false,
        threads: args.threads,
        requantization: args.requantization,
        parameter_cache: None,
        input_shapes: Vec::new(),
        cache_dir: None,
        token: None,
        limits: args.limits.clone(),
        streams: Vec::new(),
        feed_back: Vec::new(),
        loop_timeout: None,
    };
    let start = Instant::now();
    let progress = crate::progress::Progress::new(!args.json);
    progress.stage(format!("preparing {}", args.model.display()));
    let (model, _devices) = super::run::load(&run_args)?;
    let prepare = start.elapsed();
    // Nothing redraws while executions are timed.
    drop(progress);
    let inputs: Vec<HostTensor> = if args.inputs.is_empty() {
        model
            .inputs()
            .iter()
            .map(|info| {
                let shape: Vec<usize> = info.dims.iter().map(|&d| d.max(1) as usize).collect();
                let bytes = shape.iter().product::<usize>() * info.dtype.size();
                HostTensor::new(info.dtype, shape, vec![0; bytes])
                    .context("cannot build a zero input")
            })
            .collect::<anyhow::Result<_>>()?
    } else {
        super::run::gather_inputs(&run_args, model.inputs())?
    };
    model.run(&inputs).context("warm-up execution failed")?;
    let mut times: Vec<Duration> = Vec::with_capacity(args.runs as usize);
    for _ in 0..args.runs {
        let t = Instant::now();
        model.run(&inputs).context("execution failed")?;
        times.push(t.elapsed());
    }
    times.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let pick = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let (median, min, p90) = (ms(pick(0.5)), ms(times[0]), ms(pick(0.9)));
    if args.json {
        let report = json!({
            "schema": "nnc.bench/1",
            "model": args.model.display().to_string(),
            "threads": args.threads,
            "runs": args.runs,
            "prepare_ms": ms(prepare),
            "median_ms": median,
            "min_ms": min,
            "p90_ms": p90,
            "input_dtypes": inputs.iter().map(|t| t.dtype).collect::<Vec<DataType>>(),
        });
        output::stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    } else {
        output::stdout(&format!(
            "{}: {} runs, {} thread(s): median {median:.3} ms, min {min:.3} ms, p90 {p90:.3} ms (prepare {:.1} ms)\n",
            args.model.display(),
            args.runs,
            args.threads,
            ms(prepare)
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
