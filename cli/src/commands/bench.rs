//! `nnc bench`: execution latency of a model on this machine.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::{Burst, Execution, Memory, PreparedModel, Timing};
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
    /// How closely float32 operations follow float32 arithmetic (as for `nnc run`).
    #[arg(long, value_enum, default_value_t = super::run::FloatMathArg::Strict)]
    pub float_math: super::run::FloatMathArg,
    /// Run every operation on its own (as for `nnc run`).
    #[arg(long)]
    pub no_fusion: bool,
    /// Also time the same number of executions through a burst (an execution bound once
    /// to memory objects, computed through `nnc_runtime::Burst`), printed beside the
    /// plain path with each path's per-execution overhead.
    #[arg(long)]
    pub burst: bool,
    /// Also time every operation over the same number of executions (separate from the
    /// timed ones, which stay unprofiled) and print where the time goes: the operations
    /// by median time, and the total per operation type.
    #[arg(long)]
    pub profile: bool,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub limits: super::LimitArgs,
    /// Bound the simulated NPU's parameter cache (bytes), as for `nnc run`: weights
    /// beyond it are evicted and decrypted again when next used. Unbounded by default.
    #[arg(long, value_name = "BYTES")]
    pub parameter_cache: Option<u64>,
    /// How long the WHILE loops of one execution may run in all, as for `nnc run` (e.g.
    /// `500ms`, `5s`; a bare number is milliseconds). Default 2s, at most 15s.
    #[arg(long, value_name = "DURATION", value_parser = super::run::parse_loop_timeout)]
    pub loop_timeout: Option<Duration>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let run_args = super::run::Args {
        model: args.model.clone(),
        key: args.key.clone(),
        trust: Default::default(),
        inputs: args.inputs.clone(),
        input_dir: None,
        output_dir: PathBuf::from("."),
        output_format: crate::tensors::TensorFormat::Npy,
        timing: false,
        json: false,
        threads: args.threads,
        requantization: args.requantization,
        float_math: args.float_math,
        no_fusion: args.no_fusion,
        parameter_cache: args.parameter_cache,
        input_shapes: Vec::new(),
        cache_dir: None,
        token: None,
        limits: args.limits.clone(),
        streams: Vec::new(),
        feed_back: Vec::new(),
        loop_timeout: args.loop_timeout,
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
    let model = Arc::new(model);
    let options = nnc_runtime::exec::ExecuteOptions {
        loop_timeout: args.loop_timeout,
        ..Default::default()
    };
    let (warm_up, _) = model
        .run_with(&inputs, &options)
        .context("warm-up execution failed")?;
    let plain = time_runs(args.runs, || {
        let (_, timing) = model
            .run_with(&inputs, &options)
            .context("execution failed")?;
        Ok(timing)
    })?;
    let burst = if args.burst {
        Some(time_burst(
            &model,
            &inputs,
            &warm_up,
            args.runs,
            args.loop_timeout,
        )?)
    } else {
        None
    };
    let profile = if args.profile {
        Some(
            model
                .program()
                .profile_host(&inputs, args.runs as usize)
                .context("profiled execution failed")?,
        )
    } else {
        None
    };
    let kernels = nnc_runtime::kernels::isa::report();
    if args.json {
        let mut report = json!({
            "schema": "nnc.bench/1",
            "model": args.model.display().to_string(),
            "threads": args.threads,
            "runs": args.runs,
            "prepare_ms": ms(prepare),
            "median_ms": plain.median,
            "min_ms": plain.min,
            "p90_ms": plain.p90,
            "overhead_median_ms": plain.overhead_median,
            "arena_bytes": model.program().arena_size(),
            "kernels": kernels,
            // What ran: a model that allows relaxed computation runs fast either way.
            "float_math": match model.program().kernel_options().float_math {
                nnc_runtime::FloatMath::Strict => "strict",
                nnc_runtime::FloatMath::Fast => "fast",
            },
            "input_dtypes": inputs.iter().map(|t| t.dtype).collect::<Vec<DataType>>(),
            "parameter_cache": model.cache_stats(),
        });
        if let Some(b) = &burst {
            report["burst"] = json!({
                "median_ms": b.median,
                "min_ms": b.min,
                "p90_ms": b.p90,
                "overhead_median_ms": b.overhead_median,
            });
        }
        if let Some(p) = &profile {
            report["operations"] = p
                .iter()
                .map(|t| {
                    json!({
                        "index": t.index,
                        "type": t.operation.op_type.name(),
                        "node": t.operation.node,
                        "output_shape": t.output_shape,
                        "median_ms": ms(t.median),
                        "fused_into": t.fused_into,
                        "elided": t.elided,
                    })
                })
                .collect();
        }
        output::stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    } else {
        let mut text = format!(
            "{}: {} runs, {} thread(s), kernels {}: median {:.3} ms, min {:.3} ms, p90 {:.3} ms (prepare {:.1} ms)\n",
            args.model.display(),
            args.runs,
            args.threads,
            kernels.summary(),
            plain.median,
            plain.min,
            plain.p90,
            ms(prepare)
        );
        if let Some(b) = &burst {
            text.push_str(&format!(
                "  plain: median {:.3} ms, overhead {:.4} ms per execution\n  burst: median {:.3} ms, overhead {:.4} ms per execution\n",
                plain.median, plain.overhead_median, b.median, b.overhead_median
            ));
        }
        if let Some(p) = &profile {
            text.push_str(&profile_text(p, args.runs));
        }
        output::stdout(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Operations shown by name in the text profile; the rest are summed on one line.
const PROFILE_TOP: usize = 25;

/// The text form of a profile: the slowest operations, then the time per type.
fn profile_text(profile: &[nnc_runtime::OperationTime], runs: u32) -> String {
    let total: Duration = profile.iter().map(|t| t.median).sum();
    let share = |d: Duration| {
        if total.is_zero() {
            0.0
        } else {
            100.0 * d.as_secs_f64() / total.as_secs_f64()
        }
    };
    let mut by_time: Vec<&nnc_runtime::OperationTime> = profile.iter().collect();
    by_time.sort_by(|a, b| b.median.cmp(&a.median).then(a.index.cmp(&b.index)));
    let mut text = format!(
        "operations by median time over {runs} profiled runs (sum of medians {:.3} ms):\n{:>6}  {:<24} {:<20} {:>9} {:>7}  node\n",
        ms(total),
        "#",
        "operation",
        "output shape",
        "ms",
        "share"
    );
    for t in by_time.iter().take(PROFILE_TOP) {
        let shape = t.output_shape.as_ref().map_or_else(
            || "dynamic".to_string(),
            |s| format!("{s:?}").replace(' ', ""),
        );
        text.push_str(&format!(
            "{:>6}  {:<24} {:<20} {:>9.4} {:>6.1}%  {}\n",
            t.index,
            t.operation.op_type.name(),
            shape,
            ms(t.median),
            share(t.median),
            short_node(&t.operation.node)
        ));
    }
    if by_time.len() > PROFILE_TOP {
        let rest: Duration = by_time[PROFILE_TOP..].iter().map(|t| t.median).sum();
        text.push_str(&format!(
            "{:>6}  {:<45} {:>9.4} {:>6.1}%\n",
            "",
            format!("{} more operations", by_time.len() - PROFILE_TOP),
            ms(rest),
            share(rest)
        ));
    }
    let fused: Vec<String> = profile
        .iter()
        .filter_map(|t| {
            t.fused_into
                .map(|head| format!("#{} into #{head}", t.index))
        })
        .collect();
    if !fused.is_empty() {
        text.push_str(&format!(
            "fused (timed with the operation they ran in): {}\n",
            fused.join(", ")
        ));
    }
    let elided: Vec<String> = profile
        .iter()
        .filter(|t| t.elided)
        .map(|t| format!("#{} {}", t.index, t.operation.op_type.name()))
        .collect();
    if !elided.is_empty() {
        text.push_str(&format!(
            "no work (their outputs are their inputs' memory, or were written in place): {}\n",
            elided.join(", ")
        ));
    }
    // Per type, in order of total time.
    let mut types: Vec<(&str, usize, Duration)> = Vec::new();
    for t in profile {
        let name = t.operation.op_type.name();
        match types.iter_mut().find(|(n, _, _)| *n == name) {
            Some((_, count, sum)) => {
                *count += 1;
                *sum += t.median;
            }
            None => types.push((name, 1, t.median)),
        }
    }
    types.sort_by_key(|t| std::cmp::Reverse(t.2));
    text.push_str("by operation type:\n");
    for (name, count, sum) in types {
        text.push_str(&format!(
            "  {:<24} {:>4} {:<3} {:>9.4} ms {:>6.1}%\n",
            name,
            count,
            if count == 1 { "op" } else { "ops" },
            ms(sum),
            share(sum)
        ));
    }
    text
}

/// A source node's name as the text profile shows it: converters fuse long names (a
/// TFLite node can name every operation folded into it), so long ones are cut; the JSON
/// profile has them whole.
fn short_node(node: &str) -> String {
    const SHOWN: usize = 60;
    if node.chars().count() <= SHOWN {
        return node.to_string();
    }
    let head: String = node.chars().take(SHOWN - 3).collect();
    format!("{head}...")
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Medians and spread of timed executions, in milliseconds.
struct Summary {
    median: f64,
    min: f64,
    p90: f64,
    /// Median of each execution's time outside the graph's operations (binding checks,
    /// conversion, allocation, queueing): the whole call minus `Timing::on_device`.
    overhead_median: f64,
}

fn time_runs(
    runs: u32,
    mut execute: impl FnMut() -> anyhow::Result<Timing>,
) -> anyhow::Result<Summary> {
    let mut wall: Vec<Duration> = Vec::with_capacity(runs as usize);
    let mut overhead: Vec<Duration> = Vec::with_capacity(runs as usize);
    for _ in 0..runs {
        let t = Instant::now();
        let timing = execute()?;
        let elapsed = t.elapsed();
        wall.push(elapsed);
        overhead.push(elapsed.saturating_sub(timing.on_device));
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort_unstable();
        v[((v.len() - 1) as f64 * 0.5).round() as usize]
    };
    let overhead_median = ms(median(&mut overhead));
    let median_wall = ms(median(&mut wall));
    Ok(Summary {
        median: median_wall,
        min: ms(wall[0]),
        p90: ms(wall[((wall.len() - 1) as f64 * 0.9).round() as usize]),
        overhead_median,
    })
}

/// Times `runs` executions through a burst: one execution bound once to memory objects
/// (inputs converted to the model's operand types, outputs sized by the warm-up run).
fn time_burst(
    model: &Arc<PreparedModel>,
    inputs: &[HostTensor],
    warm_up: &[HostTensor],
    runs: u32,
    loop_timeout: Option<Duration>,
) -> anyhow::Result<Summary> {
    let mut execution = Execution::new(model);
    if let Some(timeout) = loop_timeout {
        execution.set_loop_timeout(timeout)?;
    }
    for (k, t) in inputs.iter().enumerate() {
        let (shape, bytes) = model.program().host_input(k, t)?;
        let memory = Memory::from_bytes(&bytes)?;
        execution.set_input(k, &memory, 0, bytes.len(), Some(&shape))?;
    }
    for (k, t) in warm_up.iter().enumerate() {
        // A source-typed output is never smaller than its operand's value (int64 values
        // compute as int32), so its size bounds what the output needs.
        let memory = Memory::new(t.data.len().max(1))?;
        execution.set_output(k, &memory, 0, memory.len())?;
    }
    let burst = Burst::new(model);
    execution
        .compute_in(&burst)
        .context("burst warm-up execution failed")?;
    time_runs(runs, || {
        Ok(execution
            .compute_in(&burst)
            .context("burst execution failed")?
            .timing)
    })
}
