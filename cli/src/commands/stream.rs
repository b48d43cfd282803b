//! `nnc run --stream`: run a model once per chunk of its streamed inputs, feeding chosen
//! outputs back as the next chunk's inputs, so that a streaming model (a voice-activity
//! detector, a wake-word model) runs over a whole signal with its state carried.
//!
//! Why stacked files rather than one long signal cut by the tool: chunking is the
//! model's contract (window, hop, padding), which the caller knows and nnc does not; a
//! `[steps, ...]` file states it exactly and is one numpy reshape away from a signal.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use nnc_formats::limits::{Budget, LimitKind, Limits, Reservation};
use nnc_formats::nn::IoInfo;
use nnc_formats::tensor::HostTensor;
use serde_json::json;

use super::run::{Args, check_input, given_input_files, load, write_outputs};
use crate::exit::{Exit, err};
use crate::output;
use crate::tensors;

/// Where each model input comes from at every step.
enum Source {
    /// Chunk `t` of a stacked file.
    Streamed { steps: HostTensor, path: PathBuf },
    /// The same tensor every step.
    Fixed(HostTensor),
    /// Output `from` of the previous step (this tensor at the first step).
    FedBack { from: usize, first: HostTensor },
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let (model, _devices) = load(&args)?;
    let prepare_ms = start.elapsed().as_secs_f64() * 1e3;
    let inputs = model.inputs().to_vec();
    let outputs = model.outputs().to_vec();
    let input_names: Vec<String> = inputs.iter().map(|i| i.name.clone()).collect();
    let output_names: Vec<String> = outputs.iter().map(|o| o.name.clone()).collect();

    let limits = args.limits.limits();
    let streamed = named_pairs(&args.streams, "--stream", "NAME=FILE")?;
    let fed_back = named_pairs(&args.feed_back, "--feed-back", "OUT=IN")?;
    let mut sources: Vec<Option<Source>> = inputs.iter().map(|_| None).collect();
    for (name, file) in &streamed {
        let k = position(&input_names, name, "--stream", "input")?;
        if sources[k].is_some() {
            return Err(err(
                Exit::Usage,
                format!("--stream names input '{name}' twice"),
            ));
        }
        let path = PathBuf::from(file);
        let steps = tensors::read_within(&path, &limits)?;
        sources[k] = Some(Source::Streamed { steps, path });
    }
    let mut elsewhere: Vec<String> = streamed.iter().map(|(n, _)| n.clone()).collect();
    let mut feeds = Vec::new();
    for (out, input) in &fed_back {
        let from = position(&output_names, out, "--feed-back", "output")?;
        let to = position(&input_names, input, "--feed-back", "input")?;
        if sources[to].is_some() || feeds.iter().any(|&(_, t)| t == to) {
            return Err(err(
                Exit::Usage,
                format!("--feed-back {out}={input}: input '{input}' is already given another way"),
            ));
        }
        feeds.push((from, to));
        elsewhere.push(input.clone());
    }
    // Positional --input files fill the inputs that are neither streamed nor fed back
    // (a fed-back input may still take its first value from a named --input).
    let files = given_input_files(&args, &input_names, &elsewhere)?;
    for (k, (info, file)) in inputs.iter().zip(&files).enumerate() {
        if sources[k].is_some() {
            if file.is_some() {
                return Err(err(
                    Exit::Usage,
                    format!(
                        "input '{}' is streamed and also given with --input",
                        info.name
                    ),
                ));
            }
            continue;
        }
        let first = match file {
            Some(path) => {
                let t = tensors::read_within(path, &limits)?;
                check_input(k, info, &t, path)?;
                Some(t)
            }
            None => None,
        };
        sources[k] = Some(match feeds.iter().find(|&&(_, to)| to == k) {
            Some(&(from, _)) => Source::FedBack {
                from,
                first: match first {
                    Some(t) => t,
                    None => zeros(info, &limits)?,
                },
            },
            None => Source::Fixed(first.ok_or_else(|| {
                err(
                    Exit::Usage,
                    format!(
                        "missing input '{}': stream it (--stream), feed an output back to it \
                         (--feed-back), or give it with --input",
                        info.name
                    ),
                )
            })?),
        });
    }
    let sources: Vec<Source> = sources.into_iter().flatten().collect();
    let steps = step_count(&sources)?;

    let options = nnc_runtime::exec::ExecuteOptions {
        loop_timeout: args.loop_timeout,
        ..Default::default()
    };
    let mut previous: Option<Vec<HostTensor>> = None;
    let mut stacked: Vec<Option<HostTensor>> = outputs.iter().map(|_| None).collect();
    // The stacked outputs are held until they are written: they draw from the arena
    // limit's budget, reserved whole at the first step (each output keeps its shape).
    let budget = Budget::new(&limits, LimitKind::Arena);
    let mut held = Reservation::empty(&budget);
    let mut execute_ms = 0.0;
    for t in 0..steps {
        let mut step_inputs = Vec::with_capacity(sources.len());
        for (k, (source, info)) in sources.iter().zip(&inputs).enumerate() {
            let tensor = match source {
                Source::Streamed { steps, path } => {
                    let chunk = chunk(steps, t)?;
                    check_input(k, info, &chunk, path)
                        .with_context(|| format!("chunk {t} of {}", path.display()))?;
                    chunk
                }
                Source::Fixed(tensor) => tensor.clone(),
                Source::FedBack { from, first } => match &previous {
                    Some(outputs) => {
                        let fed = outputs[*from].clone();
                        check_fed_back(&output_names[*from], info, &fed, t)?;
                        fed
                    }
                    None => first.clone(),
                },
            };
            step_inputs.push(tensor);
        }
        let (results, timing) = model
            .run_with(&step_inputs, &options)
            .with_context(|| format!("execution failed at step {t} of {steps}"))?;
        execute_ms += timing.in_driver.as_secs_f64() * 1e3;
        if t == 0 {
            reserve_stacks(&results, &outputs, steps, &limits, &mut held)?;
        }
        for (k, result) in results.iter().enumerate() {
            append(&mut stacked[k], result, &outputs[k].name, t, steps)?;
        }
        previous = Some(results);
    }

    let mut read: Vec<PathBuf> = vec![args.model.clone()];
    read.extend(files.into_iter().flatten());
    read.extend(streamed.iter().map(|(_, f)| PathBuf::from(f)));
    let read: Vec<&Path> = read.iter().map(PathBuf::as_path).collect();
    let stacked: Vec<HostTensor> = stacked.into_iter().flatten().collect();
    // Encoding copies one output at a time (a .pb twice: the proto, then its bytes).
    let copies = match args.output_format {
        tensors::TensorFormat::Npy => 1,
        tensors::TensorFormat::Pb => 2,
    };
    let largest = stacked
        .iter()
        .map(|s| s.data.len() as u64)
        .max()
        .unwrap_or(0);
    let total = held.bytes();
    held.resize(
        || "the stacked outputs and the encoding of the largest".to_string(),
        largest
            .checked_mul(copies)
            .and_then(|e| e.checked_add(total)),
    )?;
    let reported = write_outputs(&args, stacked.iter().zip(&outputs), &read)?;
    if args.json {
        let report = json!({
            "schema": "nnc.run/1",
            "model": args.model.display().to_string(),
            "steps": steps,
            "outputs": reported,
            "timing": { "prepare_ms": prepare_ms, "execute_ms": execute_ms },
        });
        output::stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    } else {
        let mut text = format!("{steps} steps\n");
        for r in &reported {
            text.push_str(&format!(
                "{} {} {} -> {}\n",
                r["name"].as_str().unwrap_or(""),
                r["dtype"].as_str().unwrap_or(""),
                r["shape"],
                r["file"].as_str().unwrap_or("")
            ));
        }
        if args.timing {
            text.push_str(&format!(
                "timing: prepare {prepare_ms:.2} ms, execute {execute_ms:.2} ms over {steps} steps\n"
            ));
        }
        output::stdout(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `A=B` pairs of a repeatable flag.
fn named_pairs(
    entries: &[String],
    flag: &str,
    form: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    entries
        .iter()
        .map(|e| match e.split_once('=') {
            Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_string(), b.to_string())),
            _ => Err(err(Exit::Usage, format!("{flag} {e}: expected {form}"))),
        })
        .collect()
}

fn position(names: &[String], name: &str, flag: &str, what: &str) -> anyhow::Result<usize> {
    names.iter().position(|n| n == name).ok_or_else(|| {
        err(
            Exit::Usage,
            format!(
                "{flag}: the model has no {what} '{name}'; its {what}s are: {}",
                names.join(", ")
            ),
        )
    })
}

/// Zeros of a fed-back input's declared shape (its first value when none is given).
fn zeros(info: &IoInfo, limits: &Limits) -> anyhow::Result<HostTensor> {
    if info.dims.contains(&0) {
        return Err(err(
            Exit::Usage,
            format!(
                "input '{}' is fed back but has dynamic dimensions, so its first value cannot \
                 default to zeros: give it with --input {}=FILE",
                info.name, info.name
            ),
        ));
    }
    let shape: Vec<usize> = info.dims.iter().map(|&d| d as usize).collect();
    let bytes = limits.check_tensor(
        || format!("the first value of input '{}'", info.name),
        nnc_formats::limits::element_count(&info.dims),
        info.dtype.size() as u64,
    )?;
    HostTensor::new(info.dtype, shape, vec![0; bytes as usize])
        .map_err(|e| err(Exit::Failure, e.to_string()))
}

/// The number of steps: the first dimension every streamed file shares.
fn step_count(sources: &[Source]) -> anyhow::Result<usize> {
    let mut steps: Option<(usize, &Path)> = None;
    for source in sources {
        if let Source::Streamed { steps: t, path } = source {
            let Some(&n) = t.shape.first() else {
                return Err(err(
                    Exit::Malformed,
                    format!(
                        "{} holds a scalar; a streamed file stacks its chunks along a first axis",
                        path.display()
                    ),
                ));
            };
            match steps {
                Some((m, other)) if m != n => {
                    return Err(err(
                        Exit::Malformed,
                        format!(
                            "{} holds {n} steps but {} holds {m}",
                            path.display(),
                            other.display()
                        ),
                    ));
                }
                _ => steps = Some((n, path)),
            }
        }
    }
    match steps {
        Some((0, path)) => Err(err(
            Exit::Malformed,
            format!("{} holds no steps", path.display()),
        )),
        Some((n, _)) => Ok(n),
        None => Err(err(Exit::Usage, "--stream names no input")),
    }
}

/// Chunk `t` of a `[steps, ...]` tensor.
fn chunk(steps: &HostTensor, t: usize) -> anyhow::Result<HostTensor> {
    let shape = steps.shape[1..].to_vec();
    let size = shape.iter().product::<usize>() * steps.dtype.size();
    let data = steps.data[t * size..(t + 1) * size].to_vec();
    HostTensor::new(steps.dtype, shape, data).map_err(|e| err(Exit::Failure, e.to_string()))
}

/// Checks each output stacked over `steps` steps (one tensor) against the tensor limit,
/// and reserves all of them from the budget `held` draws on, before any is built: the
/// first step's outputs give their sizes, and every later step must match them.
fn reserve_stacks(
    results: &[HostTensor],
    outputs: &[IoInfo],
    steps: usize,
    limits: &Limits,
    held: &mut Reservation,
) -> anyhow::Result<()> {
    let mut total = Some(0u64);
    for (result, info) in results.iter().zip(outputs) {
        let bytes = (result.data.len() as u64).checked_mul(steps as u64);
        limits.check(
            LimitKind::Tensor,
            || format!("output '{}' stacked over {steps} steps", info.name),
            bytes,
        )?;
        total = total.zip(bytes).and_then(|(a, b)| a.checked_add(b));
    }
    held.resize(
        || format!("the outputs of {steps} steps, held until they are written"),
        total,
    )?;
    Ok(())
}

/// Appends one step's output to its stack, which needs the same shape at every step
/// (room for all `steps` is made at the first).
fn append(
    stack: &mut Option<HostTensor>,
    result: &HostTensor,
    name: &str,
    t: usize,
    steps: usize,
) -> anyhow::Result<()> {
    match stack {
        None => {
            let mut shape = vec![1];
            shape.extend(&result.shape);
            // Reserved in the budget already; never grown by doubling.
            let mut data = Vec::with_capacity(result.data.len().saturating_mul(steps));
            data.extend_from_slice(&result.data);
            *stack = Some(
                HostTensor::new(result.dtype, shape, data)
                    .map_err(|e| err(Exit::Failure, e.to_string()))?,
            );
        }
        Some(s) => {
            if s.shape[1..] != result.shape[..] || s.dtype != result.dtype {
                return Err(err(
                    Exit::Failure,
                    format!(
                        "output '{name}' is {} {:?} at step {t} but {} {:?} before: outputs \
                         of different shapes cannot be stacked",
                        result.dtype,
                        result.shape,
                        s.dtype,
                        &s.shape[1..]
                    ),
                ));
            }
            s.shape[0] += 1;
            s.data.extend_from_slice(&result.data);
        }
    }
    Ok(())
}

/// A fed-back output must fit the input it feeds.
fn check_fed_back(output: &str, info: &IoInfo, t: &HostTensor, step: usize) -> anyhow::Result<()> {
    let fits = t.dtype == info.dtype
        && t.shape.len() == info.dims.len()
        && t.shape
            .iter()
            .zip(&info.dims)
            .all(|(&a, &d)| d == 0 || a == d as usize);
    if fits {
        return Ok(());
    }
    Err(err(
        Exit::Usage,
        format!(
            "--feed-back {output}={}: at step {step} output '{output}' is {} {:?}, but input \
             '{}' takes {} {:?}",
            info.name, t.dtype, t.shape, info.name, info.dtype, info.dims
        ),
    ))
}
