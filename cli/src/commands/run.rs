//! `nnc run`: execute a model (compiled, or compiled in memory from a source model) on
//! tensor files.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use nnc_compiler::emit::{self, EmitOptions};
use nnc_formats::crypto::Mode;
use nnc_formats::nn::IoInfo;
use nnc_formats::tensor::HostTensor;
use nnc_runtime::{Devices, LoadOptions, ModelFile, PreparedModel, SimulatedNpu};
use serde_json::json;

use crate::exit::{Exit, err};
use crate::keys::KeyArgs;
use crate::output;
use crate::tensors::{self, TensorFormat};

#[derive(clap::Args)]
pub struct Args {
    /// A compiled .nnc, or an .onnx/.tflite model (compiled in memory first).
    pub model: PathBuf,
    #[command(flatten)]
    pub key: KeyArgs,
    #[command(flatten)]
    pub trust: crate::trust::TrustArgs,
    /// An input tensor file (.npy or ONNX .pb), as NAME=FILE or by position (repeatable).
    #[arg(long = "input", value_name = "[NAME=]FILE")]
    pub inputs: Vec<String>,
    /// A directory holding input_0.npy|pb, input_1.npy|pb, ... in model input order.
    #[arg(long, value_name = "DIR")]
    pub input_dir: Option<PathBuf>,
    /// Where to write output_0, output_1, ... in model output order.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub output_dir: PathBuf,
    /// File format of the outputs.
    #[arg(long, value_enum, default_value = "npy")]
    pub output_format: TensorFormat,
    /// Print preparation and execution times.
    #[arg(long)]
    pub timing: bool,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Threads for the CPU kernels.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: u16,
    /// How quantized convolutions, products and means requantize: `float` is XNNPACK's
    /// arithmetic (LiteRT's default CPU path), `fixed-point` TFLite's reference kernels.
    #[arg(long, value_enum, default_value_t = RequantizationArg::Float)]
    pub requantization: RequantizationArg,
    /// How closely float32 operations follow float32 arithmetic: `strict` within NNAPI's
    /// float32 tolerance, `fast` allows Winograd 3x3 convolutions (errors about ten times
    /// larger, within the relaxed tolerance; models that allow relaxed computation run
    /// this way anyway).
    #[arg(long, value_enum, default_value_t = FloatMathArg::Strict)]
    pub float_math: FloatMathArg,
    /// Run every operation on its own: no fused kernels (the results are the same bits;
    /// for comparing timings and per-operation profiles).
    #[arg(long)]
    pub no_fusion: bool,
    /// Bound the simulated NPU's parameter cache (bytes): weights beyond it are evicted
    /// and decrypted again when next used. Unbounded by default.
    #[arg(long, value_name = "BYTES")]
    pub parameter_cache: Option<u64>,
    /// Fix a dynamic input dimension of a source model: NAME=1x3x224x224 (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = super::parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<u32>)>,
    /// Prepare from this compilation cache (hit), or prepare and write it (miss).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The token naming this model in the cache (64 hex digits), as given to compile.
    #[arg(long, value_name = "HEX", requires = "cache_dir")]
    pub token: Option<String>,
    #[command(flatten)]
    pub limits: super::LimitArgs,
    /// Run once per chunk: FILE holds the chunks of input NAME stacked along a new first
    /// axis ([steps, ...input shape]); every output is written stacked the same way
    /// (repeatable; all streamed files need the same number of steps).
    #[arg(long = "stream", value_name = "NAME=FILE")]
    pub streams: Vec<String>,
    /// With --stream: output OUT of each step is input IN of the next, so a stateful
    /// model carries its state (repeatable). IN starts from its --input file, or zeros.
    #[arg(long = "feed-back", value_name = "OUT=IN", requires = "streams")]
    pub feed_back: Vec<String>,
    /// How long the WHILE loops of one execution may run in all (e.g. `500ms`, `5s`; a
    /// bare number is milliseconds). Default 2s, at most 15s; a model still looping
    /// then fails the execution (exit 1).
    #[arg(long, value_name = "DURATION", value_parser = parse_loop_timeout)]
    pub loop_timeout: Option<std::time::Duration>,
}

/// `--loop-timeout`: `250ms`, `5s`, `1.5s` or a bare number of milliseconds, at most the
/// runtime's maximum (15 s).
pub fn parse_loop_timeout(text: &str) -> Result<std::time::Duration, String> {
    use std::time::Duration;
    let t = text.trim();
    let bad = || format!("'{text}' is not a duration (e.g. 500ms, 5s)");
    let duration = if let Some(ms) = t.strip_suffix("ms") {
        Duration::from_millis(ms.trim().parse::<u64>().map_err(|_| bad())?)
    } else if let Some(s) = t.strip_suffix('s') {
        let secs: f64 = s.trim().parse().map_err(|_| bad())?;
        if !(0.0..=1e6).contains(&secs) {
            return Err(bad());
        }
        Duration::from_secs_f64(secs)
    } else {
        Duration::from_millis(t.parse::<u64>().map_err(|_| bad())?)
    };
    let max = nnc_runtime::exec::MAX_LOOP_TIMEOUT;
    if duration > max {
        return Err(format!(
            "{} ms is above the maximum loop timeout of {} ms",
            duration.as_millis(),
            max.as_millis()
        ));
    }
    Ok(duration)
}

/// Loads the model named in `args` onto a fresh simulated NPU (compiling a source model in
/// memory first). Returns the model and the device it lives on.
pub fn load(args: &Args) -> anyhow::Result<(PreparedModel, Devices)> {
    let (model, devices, _) = load_binding(args, false)?;
    Ok((model, devices))
}

/// Inputs of a source model that were bound at compile time, and the input tensors of
/// the model compiled with them (in its input order), already read.
pub struct Bound {
    pub names: Vec<String>,
    pub inputs: Vec<HostTensor>,
}

/// [`load`]; with `bind`, a source model that can be compiled only with some inputs known
/// at compile time has exactly those bound to the supplied input files (with a note).
pub fn load_binding(
    args: &Args,
    bind: bool,
) -> anyhow::Result<(PreparedModel, Devices, Option<Bound>)> {
    let options = LoadOptions {
        threads: usize::from(args.threads),
        cache: super::cache_config(args.cache_dir.as_deref(), args.token.as_deref())?,
        requantization: args.requantization.into(),
        float_math: args.float_math.into(),
        limits: args.limits.limits(),
        fusion: !args.no_fusion,
        trusted_signers: args.trust.keys()?,
        ..LoadOptions::default()
    };
    let device = |name: &str| {
        let npu = SimulatedNpu::new(name);
        match args.parameter_cache {
            Some(bytes) => npu.with_cache_capacity(bytes),
            None => npu,
        }
    };
    if super::is_compiled(&args.model)? {
        // Opened, not read whole: a model prepared from a compilation cache never reads
        // its weight region.
        let file = ModelFile::open(&args.model)
            .with_context(|| format!("cannot read {}", args.model.display()))?;
        // One simulated device per device of the model's execution plan (the plan is
        // public structure; nothing is trusted until a device authenticates the file).
        let names: Vec<String> = match file
            .parse()
            .ok()
            .and_then(|c| super::stored_plan(&c).ok().flatten())
        {
            Some(plan) => plan.devices.iter().map(|d| d.name.clone()).collect(),
            None => vec!["npu0".to_string()],
        };
        let devices = Devices::new(names.iter().map(|n| device(n)).collect())?;
        if args.key.given() {
            let key = args.key.require_raw(&args.model.display().to_string())?;
            if !matches!(key.len(), 16 | 24 | 32) && !args.trust.given() {
                // HPKE and SM2 encryption do not authenticate the sender.
                eprintln!(
                    "warning: opened with a device key and no --trust: anyone holding this \
                     device's public key could have written {}; give --trust SIGNER.pub to \
                     accept only models your build signed",
                    args.model.display()
                );
            }
            devices.install_key(&key);
        }
        let model = PreparedModel::load(file, &devices, &options)
            .with_context(|| format!("cannot load {}", args.model.display()))?;
        Ok((model, devices, None))
    } else {
        if args.trust.given() {
            return Err(err(
                Exit::Usage,
                format!(
                    "{} is a source model: only a compiled .nnc carries a signature for --trust",
                    args.model.display()
                ),
            ));
        }
        if args.key.given() {
            return Err(err(
                Exit::Usage,
                format!(
                    "{} is a source model: it is compiled in memory without encryption, so it takes no key",
                    args.model.display()
                ),
            ));
        }
        let (lowered, bound) = compile_source(args, bind)?;
        super::warn_notes(&lowered);
        let bytes = emit::emit(
            &lowered.model,
            EmitOptions {
                key: None,
                mode: Mode::Ctr,
                authenticate_only: false,
                reproducible: true,
                extra_sections: Vec::new(),
                envelope: Default::default(),
            },
        )?;
        let devices = Devices::new(vec![device("npu0")])?;
        let model = PreparedModel::load_bytes(bytes, &devices, &options)
            .with_context(|| format!("cannot prepare {}", args.model.display()))?;
        Ok((model, devices, bound))
    }
}

/// Compiles a source model in memory. When `bind` is set, input files are supplied and
/// the only obstacle is graph inputs needed at compile time (Resize's scales, TopK's k,
/// ...), those inputs are bound to the supplied values and the model is compiled again,
/// as `nnc compile --bind-input` would; a note on stderr names them.
fn compile_source(
    args: &Args,
    bind: bool,
) -> anyhow::Result<(nnc_compiler::pipeline::Lowered, Option<Bound>)> {
    use nnc_compiler::CompileError;
    let context = || format!("cannot compile {}", args.model.display());
    let mut options = super::lower_options(&args.input_shapes, false, args.limits.limits())?;
    let source = nnc_compiler::pipeline::SourceFile::read(&args.model).with_context(context)?;
    let first = source.lower(&options);
    let supplied = args.input_dir.is_some() || !args.inputs.is_empty();
    let mut needed = match &first {
        Err(CompileError::Unsupported(report)) if bind && supplied => {
            match report.only_needs_bound_inputs() {
                Some(needed) => needed,
                None => return Ok((first.with_context(context)?, None)),
            }
        }
        _ => return Ok((first.with_context(context)?, None)),
    };
    let declared = source.declared_inputs().with_context(context)?;
    let names: Vec<String> = declared.iter().map(|d| d.name.clone()).collect();
    let files = input_files(args, &names)?;
    let mut tensors: Vec<Option<HostTensor>> = vec![None; names.len()];
    let mut bound: Vec<String> = Vec::new();
    let result = loop {
        for name in &needed {
            let Some(k) = names.iter().position(|n| n == name) else {
                return Err(err(
                    Exit::Internal,
                    format!("the model needs unknown input '{name}' at compile time"),
                ));
            };
            let value = match &tensors[k] {
                Some(t) => t.clone(),
                None => {
                    let t = tensors::read_within(&files[k], &args.limits.limits())?;
                    tensors[k] = Some(t.clone());
                    t
                }
            };
            options.import.bound_inputs.insert(name.clone(), value);
            bound.push(name.clone());
        }
        match source.lower(&options) {
            // Binding may make later nodes lowerable that need further inputs.
            Err(CompileError::Unsupported(report)) => match report.only_needs_bound_inputs() {
                Some(more) if more.iter().all(|m| !bound.contains(m)) => needed = more,
                _ => break Err(CompileError::Unsupported(report)),
            },
            other => break other,
        }
    };
    let list: Vec<String> = bound.iter().map(|b| format!("'{b}'")).collect();
    eprintln!(
        "note: {} needs {} {} at compile time; bound {} to the supplied value{} \
         (as `nnc compile --bind-input NAME=FILE` would)",
        args.model.display(),
        if bound.len() == 1 { "input" } else { "inputs" },
        list.join(", "),
        if bound.len() == 1 { "it" } else { "them" },
        if bound.len() == 1 { "" } else { "s" },
    );
    let lowered = result.with_context(context)?;
    let mut inputs = Vec::with_capacity(lowered.model.input_info.len());
    for (k, info) in lowered.model.input_info.iter().enumerate() {
        let j = names
            .iter()
            .position(|n| *n == info.name)
            .with_context(|| format!("internal: compiled input '{}' is not declared", info.name))?;
        let t = match tensors[j].take() {
            Some(t) => t,
            None => tensors::read_input(&files[j], &args.limits.limits(), info)?,
        };
        check_input(k, info, &t, &files[j])?;
        inputs.push(t);
    }
    Ok((
        lowered,
        Some(Bound {
            names: bound,
            inputs,
        }),
    ))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.streams.is_empty() {
        return super::stream::run(args);
    }
    check_output_dir(&args.output_dir)?;
    let start = Instant::now();
    let progress = crate::progress::Progress::new(!args.json);
    progress.stage(format!("preparing {}", args.model.display()));
    let (model, _devices, bound) = load_binding(&args, true)?;
    let prepare_ms = start.elapsed().as_secs_f64() * 1e3;
    progress.stage("running");
    for w in &model.cache_report().warnings {
        eprintln!("warning: {w}");
    }
    let (inputs, bound_names) = match bound {
        Some(b) => (b.inputs, b.names),
        None => (gather_inputs(&args, model.inputs())?, Vec::new()),
    };
    let options = nnc_runtime::exec::ExecuteOptions {
        loop_timeout: args.loop_timeout,
        ..Default::default()
    };
    let (outputs, timing) = model
        .run_with(&inputs, &options)
        .context("execution failed")?;
    drop(progress);
    // No output may replace a file the run read.
    let mut read: Vec<PathBuf> = vec![args.model.clone()];
    if let Ok(files) = input_files(
        &args,
        &model
            .inputs()
            .iter()
            .map(|i| i.name.clone())
            .collect::<Vec<_>>(),
    ) {
        read.extend(files);
    }
    let read: Vec<&Path> = read.iter().map(PathBuf::as_path).collect();
    let reported = write_outputs(&args, outputs.iter().zip(model.outputs()), &read)?;
    let execute_ms = timing.in_driver.as_secs_f64() * 1e3;
    if args.json {
        let report = json!({
            "schema": "nnc.run/1",
            "model": args.model.display().to_string(),
            "outputs": reported,
            "bound_inputs": bound_names,
            "timing": {
                "prepare_ms": prepare_ms,
                "execute_ms": execute_ms,
                "on_device_ms": timing.on_device.as_secs_f64() * 1e3,
            },
            "cache": model.cache_report().outcome,
            "cache_warnings": model.cache_report().warnings,
            "devices": model.device_stats().into_iter().map(|(name, stats)| json!({"name": name, "parameter_cache": stats})).collect::<Vec<_>>(),
            "parameter_cache": model.cache_stats(),
        });
        output::stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    } else {
        let mut text = String::new();
        for r in &reported {
            text.push_str(&format!(
                "{} {} {:?} -> {}\n",
                r["name"].as_str().unwrap_or(""),
                r["dtype"].as_str().unwrap_or(""),
                r["shape"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|d| d.as_u64()).collect::<Vec<_>>())
                    .unwrap_or_default(),
                r["file"].as_str().unwrap_or("")
            ));
        }
        if let Some(dir) = &args.cache_dir {
            text.push_str(&format!(
                "cache: {} ({})\n",
                match model.cache_report().outcome {
                    nnc_runtime::CacheOutcome::Hit => "hit",
                    nnc_runtime::CacheOutcome::Miss => "miss",
                    nnc_runtime::CacheOutcome::None => "none",
                },
                dir.display()
            ));
        }
        if args.timing {
            text.push_str(&format!(
                "timing: prepare {prepare_ms:.2} ms, execute {execute_ms:.2} ms (on device {:.2} ms)\n",
                timing.on_device.as_secs_f64() * 1e3
            ));
        }
        output::stdout(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses an --output-dir that exists and is not a directory, before anything runs.
fn check_output_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Err(err(
            Exit::CannotWrite,
            format!(
                "--output-dir {} is a file, not a directory: give the directory (created if \
                 missing) to write output_0, output_1, ... into",
                dir.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// Writes `output_K` files into --output-dir (created if missing), refusing to replace
/// any file in `read`; returns the JSON entry of each (name, shape, dtype, file).
pub fn write_outputs<'a>(
    args: &Args,
    outputs: impl Iterator<Item = (&'a HostTensor, &'a IoInfo)>,
    read: &[&Path],
) -> anyhow::Result<Vec<serde_json::Value>> {
    check_output_dir(&args.output_dir)?;
    std::fs::create_dir_all(&args.output_dir).map_err(|e| {
        err(
            Exit::CannotWrite,
            format!("cannot create {}: {e}", args.output_dir.display()),
        )
    })?;
    let mut reported = Vec::new();
    for (k, (tensor, info)) in outputs.enumerate() {
        let file = args
            .output_dir
            .join(format!("output_{k}.{}", args.output_format.extension()));
        output::write_file(
            &file,
            &tensors::encode(tensor, &info.name, args.output_format),
            output::Mode::Public,
            read,
        )?;
        reported.push(json!({
            "name": info.name,
            "shape": tensor.shape,
            "dtype": tensor.dtype.name(),
            "file": file.display().to_string(),
        }));
    }
    Ok(reported)
}

/// The input tensors in model input order, from --input and --input-dir, each checked
/// against what the model declares.
pub fn gather_inputs(args: &Args, declared: &[IoInfo]) -> anyhow::Result<Vec<HostTensor>> {
    let names: Vec<String> = declared.iter().map(|d| d.name.clone()).collect();
    let files = input_files(args, &names)?;
    files
        .iter()
        .zip(declared)
        .enumerate()
        .map(|(k, (path, info))| {
            let t = tensors::read_input(path, &args.limits.limits(), info)?;
            check_input(k, info, &t, path)?;
            Ok(t)
        })
        .collect()
}

/// The file of every input named in `declared` (in that order), from --input and
/// --input-dir.
pub fn input_files(args: &Args, declared: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    let files = given_input_files(args, declared, &[])?;
    let missing: Vec<String> = files
        .iter()
        .zip(declared)
        .filter(|(f, _)| f.is_none())
        .map(|(_, d)| format!("'{d}'"))
        .collect();
    if !missing.is_empty() {
        return Err(err(
            Exit::Usage,
            format!(
                "missing input(s) {}: give them with --input [NAME=]FILE or --input-dir DIR",
                missing.join(", ")
            ),
        ));
    }
    Ok(files.into_iter().flatten().collect())
}

/// The files --input and --input-dir give for the inputs named in `declared` (in that
/// order); positional files skip the inputs in `elsewhere` (given another way).
pub fn given_input_files(
    args: &Args,
    declared: &[String],
    elsewhere: &[String],
) -> anyhow::Result<Vec<Option<PathBuf>>> {
    let mut files: Vec<Option<PathBuf>> = vec![None; declared.len()];
    if let Some(dir) = &args.input_dir {
        for (k, slot) in files.iter_mut().enumerate() {
            let found = ["npy", "pb"]
                .iter()
                .map(|ext| dir.join(format!("input_{k}.{ext}")))
                .find(|p| p.is_file());
            match found {
                Some(p) => *slot = Some(p),
                None => {
                    return Err(err(
                        Exit::MissingInput,
                        format!(
                            "{} has no input_{k}.npy or input_{k}.pb (input '{}')",
                            dir.display(),
                            declared[k]
                        ),
                    ));
                }
            }
        }
    }
    let names: HashSet<&str> = declared.iter().map(String::as_str).collect();
    let mut next_positional = 0;
    for entry in &args.inputs {
        let named = entry
            .split_once('=')
            .filter(|(name, _)| names.contains(name));
        // NAME=FILE naming no input of the model (and not itself a file path).
        if named.is_none()
            && let Some((name, _)) = entry.split_once('=')
            && !Path::new(entry).exists()
        {
            return Err(err(
                Exit::Usage,
                format!(
                    "--input {entry}: the model has no input '{name}'; its inputs are: {}",
                    input_list(declared)
                ),
            ));
        }
        let (k, path) = match named {
            Some((name, path)) => (declared.iter().position(|d| d == name).unwrap_or(0), path),
            None => {
                while next_positional < files.len()
                    && (files[next_positional].is_some()
                        || elsewhere.contains(&declared[next_positional]))
                {
                    next_positional += 1;
                }
                if next_positional >= files.len() {
                    return Err(err(
                        Exit::Usage,
                        format!(
                            "too many inputs: the model takes {} ({})",
                            declared.len(),
                            input_list(declared)
                        ),
                    ));
                }
                (next_positional, entry.as_str())
            }
        };
        files[k] = Some(PathBuf::from(path));
    }
    Ok(files)
}

fn input_list(declared: &[String]) -> String {
    declared.join(", ")
}

pub fn check_input(k: usize, info: &IoInfo, t: &HostTensor, path: &Path) -> anyhow::Result<()> {
    let fits = t.shape.len() == info.dims.len()
        && t.shape
            .iter()
            .zip(&info.dims)
            .all(|(&a, &d)| d == 0 || a == d as usize);
    // A narrow type (bfloat16, float8, int4, ...) also takes data of the type it
    // computes in: NumPy has no such types (the runtime rounds or range-checks it).
    let type_fits =
        t.dtype == info.dtype || (info.dtype.is_narrow() && t.dtype == info.dtype.wide_type());
    if !type_fits || !fits {
        let dims: Vec<String> = info
            .dims
            .iter()
            .map(|&d| if d == 0 { "?".into() } else { d.to_string() })
            .collect();
        let what = match (!type_fits, !fits) {
            (true, true) => "type and shape",
            (true, false) => "type",
            _ => "shape",
        };
        return Err(err(
            Exit::Malformed,
            format!(
                "input '{}' (#{k}): wrong {what}: the model expects {} [{}], but {} holds {} {:?}",
                info.name,
                info.dtype,
                dims.join(", "),
                path.display(),
                t.dtype,
                t.shape
            ),
        ));
    }
    Ok(())
}

/// `--requantization`: the runtime's [`nnc_runtime::Requantization`] as a command-line value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RequantizationArg {
    Float,
    FixedPoint,
}

impl From<RequantizationArg> for nnc_runtime::Requantization {
    fn from(arg: RequantizationArg) -> Self {
        match arg {
            RequantizationArg::Float => nnc_runtime::Requantization::Float,
            RequantizationArg::FixedPoint => nnc_runtime::Requantization::FixedPoint,
        }
    }
}

/// `--float-math`: the runtime's [`nnc_runtime::FloatMath`] as a command-line value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FloatMathArg {
    Strict,
    Fast,
}

impl From<FloatMathArg> for nnc_runtime::FloatMath {
    fn from(arg: FloatMathArg) -> Self {
        match arg {
            FloatMathArg::Strict => nnc_runtime::FloatMath::Strict,
            FloatMathArg::Fast => nnc_runtime::FloatMath::Fast,
        }
    }
}
