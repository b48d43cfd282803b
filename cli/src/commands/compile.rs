//! `nnc compile`: a source model in, an encrypted `.nnc` out.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use nnc_compiler::emit::{self, EmitOptions};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::limits::{Limits, format_size};
use nnc_formats::nn::{Model, Pool};
use serde_json::json;

use super::{EncryptArg, ModeArg};
use crate::exit::{Exit, err};
use crate::keys::KeyArgs;
use crate::output;
use crate::progress::Progress;

#[derive(clap::Args)]
pub struct Args {
    /// The model: .onnx or .tflite.
    pub model: PathBuf,
    /// The .nnc file to write (atomically: a failed compile leaves nothing behind).
    #[arg(short, long, value_name = "OUT.nnc")]
    pub output: PathBuf,
    /// Weight cipher. The default, AES-128, runs on AES-NI; SM4 is for deployments that
    /// must use it. `none` writes plaintext weights: with a key, the file is still
    /// authenticated with it (HMAC-SHA-256); without one, only SHA-256 digests protect
    /// it against corruption (not against deliberate changes).
    /// Default: the cipher the key file records (`nnc keygen` writes it), else aes128.
    #[arg(long, value_enum)]
    pub encrypt: Option<EncryptArg>,
    /// Cipher mode. The default, CTR, needs no padding and decrypts in parallel, each
    /// field authenticated with HMAC-SHA-256; GCM encrypts and authenticates each field
    /// in one pass (AES-GCM, SM4-GCM per RFC 8998); ECB reveals repeated blocks and is
    /// offered only for compatibility.
    #[arg(long, value_enum, default_value = "ctr")]
    pub mode: ModeArg,
    #[command(flatten)]
    pub key: KeyArgs,
    /// Also wrap the file's data key for this device public key (x25519 PEM from `nnc
    /// keygen --algorithm x25519`; repeatable): the device opens the model with its
    /// private key. With recipients, --key-file is optional.
    #[arg(long = "recipient", value_name = "DEVICE.pub")]
    pub recipients: Vec<PathBuf>,
    /// Sign the file with this key (ed25519 or ecdsa-p256 PEM from `nnc keygen`): the
    /// signature covers the header, operator info and every weight byte, and carries a
    /// provenance statement (source digest, compiler, options, device profiles).
    /// `nnc run/verify --trust SIGNER.pub` then refuses anything else.
    #[arg(long, value_name = "SIGNER")]
    pub sign: Option<PathBuf>,
    /// Byte-identical output for the same model, options and key (IVs from a keyed PRF).
    #[arg(long)]
    pub reproducible: bool,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
    /// Fix a dynamic input dimension: NAME=1x3x224x224 (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = super::parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<u32>)>,
    /// Bake input preprocessing into the model, so an application feeds uint8 images:
    /// NAME=rgb|bgr,mean=R,G,B,std=R,G,B,layout=nhwc|nchw (colour and layout as the
    /// application supplies them; mean and std in 0..255 pixel units; repeatable).
    #[arg(long = "input-preprocess", value_name = "SPEC")]
    pub input_preprocess: Vec<String>,
    /// Bind a graph input to a fixed value at compile time: NAME=FILE (.npy or ONNX .pb;
    /// repeatable). The input becomes a constant and leaves the compiled model's inputs,
    /// for parameters the NN set needs at compile time (Resize's scales, TopK's k, ...).
    #[arg(long = "bind-input", value_name = "NAME=FILE", value_parser = super::parse_bind_input)]
    pub bind_inputs: Vec<(String, PathBuf)>,
    /// Device profiles to partition the model across (JSON; repeatable). Without any,
    /// the model runs on one device.
    #[arg(long = "devices", value_name = "FILE")]
    pub devices: Vec<PathBuf>,
    /// What the partitioner optimizes for.
    #[arg(long, value_enum, default_value = "fast-single-answer")]
    pub preference: super::PreferenceArg,
    /// cpu-only: everything on the CPU; fallback: what no device supports runs on the CPU;
    /// strict: an operation no listed device supports is an error.
    #[arg(long, value_enum, default_value = "fallback")]
    pub partition: super::PartitionArg,
    /// Refuse to place operations with encrypted weights on the CPU (their weights would be
    /// decrypted in host memory); list them instead.
    #[arg(long)]
    pub no_plaintext_fallback: bool,
    /// Let float32 operations run with float16 range and precision (the NN API's
    /// relaxComputationFloat32toFloat16, stored in the file): the runtime then takes the
    /// faster algorithms of `nnc run --float-math fast` by itself, and the partitioner
    /// rates devices by their relaxed float32 performance.
    #[arg(long)]
    pub relax_float32: bool,
    /// Also prepare the compiled model and write its compilation-cache artifacts here.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The token naming this model in the cache (64 hex digits); by default the file's
    /// checksum.
    #[arg(long, value_name = "HEX", requires = "cache_dir")]
    pub token: Option<String>,
    #[command(flatten)]
    pub quantize: crate::quantize::QuantizeArgs,
    #[command(flatten)]
    pub limits: super::LimitArgs,
}

/// The weight cipher: `--encrypt`, else the one the key records, else AES-128. A key
/// made for one cipher is refused for another (SM4 and AES-128 keys have the same
/// length, so nothing else would notice).
fn cipher(args: &Args) -> anyhow::Result<Option<Algorithm>> {
    let recorded = args.key.recorded_algorithm()?;
    match (args.encrypt.map(Option::<Algorithm>::from), recorded) {
        (Some(Some(asked)), Some(made)) if asked != made => Err(err(
            Exit::Usage,
            format!(
                "the key was made for {} (`nnc keygen --algorithm {}`), not for --encrypt {}: \
                 drop --encrypt to use {}, or make a key for {}",
                made.name(),
                made.name(),
                asked.name(),
                made.name(),
                asked.name()
            ),
        )),
        (Some(asked), _) => Ok(asked),
        (None, Some(made)) => Ok(Some(made)),
        (None, None) => Ok(Some(Algorithm::Aes128)),
    }
}

/// The key of `--encrypt none` with a key: any nnc key authenticates (its length only
/// decides which AES key type carries it; it encrypts nothing).
fn authentication_key(args: &Args) -> anyhow::Result<Key> {
    let raw = args.key.require_raw("--encrypt none with a key")?;
    let algorithm = match raw.len() {
        24 => Algorithm::Aes192,
        32 => Algorithm::Aes256,
        _ => Algorithm::Aes128,
    };
    Ok(Key::new(algorithm, &raw)?)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Every weight this process handles comes from a plaintext source file: wiping freed
    // copies of them would protect nothing (see `set_wiping`); keys wipe themselves.
    nnc_runtime::alloc::set_wiping(false);
    let progress = Progress::new(!args.json);
    let algorithm = cipher(&args)?;
    let mode: Mode = args.mode.into();
    if algorithm.is_none() && mode != Mode::Ctr {
        return Err(err(
            Exit::Usage,
            format!(
                "--mode {} has no effect with --encrypt none: nothing is encrypted (drop --mode, \
                 or choose a cipher with --encrypt)",
                mode.name()
            ),
        ));
    }
    let recipients = crate::trust::recipients(&args.recipients)?;
    let signer = args
        .sign
        .as_deref()
        .map(crate::trust::signing_key)
        .transpose()?;
    let key = match algorithm {
        Some(a) => match args.key.load(a)? {
            Some(k) => Some(k),
            None if !recipients.is_empty() => None,
            None => {
                return Err(err(
                    Exit::Usage,
                    format!(
                        "nnc compile encrypts weights ({}-{} by default) and needs a key: pass --key-file FILE or --key-env VAR \
                         (make one with `nnc keygen --algorithm {} -o FILE`), or --encrypt none",
                        a.name(),
                        mode.name(),
                        a.name()
                    ),
                ));
            }
        },
        None if args.key.given() => Some(authentication_key(&args)?),
        None => None,
    };
    let authenticate_only = algorithm.is_none() && (key.is_some() || !recipients.is_empty());
    // Every file the command reads; the output may be none of them.
    let mut inputs: Vec<&Path> = vec![args.model.as_path()];
    inputs.extend(args.bind_inputs.iter().map(|(_, p)| p.as_path()));
    inputs.extend(args.devices.iter().map(PathBuf::as_path));
    inputs.extend(args.key.key_file.as_deref());
    inputs.extend(args.recipients.iter().map(PathBuf::as_path));
    inputs.extend(args.sign.as_deref());
    inputs.extend(args.quantize.inputs());
    output::check_output(&args.output, &inputs)?;
    args.quantize.check()?;
    args.quantize.check_report_path(&inputs)?;
    if mode == Mode::Ecb && algorithm.is_some() {
        eprintln!(
            "warning: ECB encrypts equal weight blocks to equal ciphertext blocks, revealing patterns; prefer ctr or cbc"
        );
    }
    // A FIFO or device is refused by name before the compiler opens it.
    crate::input::check(&args.model, "model")?;
    progress.stage(format!("lowering {}", args.model.display()));
    let mut options = super::lower_options_with(
        &args.input_shapes,
        &args.input_preprocess,
        false,
        args.limits.limits(),
    )?;
    super::bind_inputs(&mut options, &args.bind_inputs)?;
    let started = Instant::now();
    let lowered = super::lower(&args.model, &options, "compile")?;
    super::warn_notes(&lowered);
    let lower_ms = started.elapsed().as_secs_f64() * 1e3;
    progress.stage(format!(
        "lowered to {} operations",
        lowered.model.main.operations.len()
    ));
    // Partition when device profiles or a partition policy other than the default ask.
    let partitioned = !args.devices.is_empty()
        || !matches!(args.partition, super::PartitionArg::Fallback)
        || args.no_plaintext_fallback;
    let mut model = lowered.model;
    let started = Instant::now();
    if args.quantize.quantize.is_some() {
        progress.stage("calibrating and quantizing");
    }
    let quant_report = args
        .quantize
        .apply(&mut model, &args.limits.limits(), args.json)
        .with_context(|| format!("cannot compile {}", args.model.display()))?;
    let quantize_ms = started.elapsed().as_secs_f64() * 1e3;
    // Set before partitioning: relaxed models are placed by relaxed performance.
    model.relax_computation_float32_to_float16 |= args.relax_float32;
    let mut extra_sections = Vec::new();
    let mut plan_summary = serde_json::Value::Null;
    if partitioned {
        let mut profiles = Vec::new();
        for path in &args.devices {
            profiles.extend(crate::input::read_profiles(path)?);
        }
        progress.stage(format!(
            "partitioning across {} device profile(s)",
            profiles.len()
        ));
        let options = nnc_compiler::partition::PartitionOptions {
            mode: args.partition.into(),
            preference: args.preference.into(),
            encryption: algorithm.map(|a| (a, mode)),
            no_plaintext_fallback: args.no_plaintext_fallback,
        };
        let (reordered, plan) = nnc_compiler::partition::partition(&model, &profiles, &options)
            .with_context(|| format!("cannot partition {}", args.model.display()))?;
        let host: Vec<String> = plan
            .placements
            .iter()
            .filter(|p| p.host_decrypted)
            .map(|p| format!("{} {} ('{}')", p.operation, p.op_type, p.source))
            .collect();
        if !host.is_empty() && !args.json {
            const SHOWN: usize = 5;
            let mut list = host
                .iter()
                .take(SHOWN)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if host.len() > SHOWN {
                list.push_str(&format!(
                    " and {} more (`nnc inspect OUT.nnc --partition` lists all)",
                    host.len() - SHOWN
                ));
            }
            eprintln!(
                "warning: {} operation(s) run on the CPU with encrypted weights, which are decrypted in host memory \
                 (--no-plaintext-fallback refuses this): {list}",
                host.len()
            );
        }
        let placement = placement_by_device(&plan, &profiles, &reordered);
        if !args.json {
            for device in &placement {
                eprintln!("{}", device.line());
            }
        }
        plan_summary = json!({
            "mode": plan.mode.name(),
            "preference": plan.preference.name(),
            "devices": placement.iter().map(DevicePlacement::to_json).collect::<Vec<_>>(),
            "steps": plan.steps.iter().map(|s| json!({
                "device": plan.devices[s.device as usize].name,
                "operations": s.operations.len(),
            })).collect::<Vec<_>>(),
            "host_decrypted": host,
        });
        extra_sections.push((
            nnc_formats::container::SectionKind::ExecutionPlan,
            plan.to_bytes(),
        ));
        model = reordered;
    }
    let started = Instant::now();
    progress.stage(if algorithm.is_some() {
        "encrypting the weights"
    } else {
        "writing the weights"
    });
    let statement = match &signer {
        Some(_) => Some(provenance(&args, algorithm, &recipients)?),
        None => None,
    };
    let emit_options = EmitOptions {
        key: key.as_ref(),
        mode,
        authenticate_only,
        reproducible: args.reproducible,
        extra_sections,
        envelope: nnc_formats::container::Envelope {
            recipients: &recipients,
            cipher: algorithm,
            signer: signer.as_ref().zip(statement),
        },
    };
    progress.stage(format!("writing {}", args.output.display()));
    let written = output::write_file_with(&args.output, output::Mode::Public, &inputs, |file| {
        emit::emit_to(&model, emit_options, file)
            .with_context(|| format!("cannot compile {}", args.model.display()))
    })?;
    let emit_ms = started.elapsed().as_secs_f64() * 1e3;
    // The accuracy report goes out with the model it describes, never before it.
    if let Some(crate::quantize::Quantization::Static(report)) = &quant_report {
        let mut not_over = inputs.clone();
        not_over.push(&args.output);
        args.quantize.write_report(report, &not_over)?;
    }
    let limits = args.limits.limits();
    let (arena, held) = planned_memory(&mut model, &limits).unzip();
    let arena = arena.flatten();
    if let Some(bytes) = held.filter(|&b| b > limits.max_arena_bytes) {
        eprintln!(
            "warning: {} holds at least {} of tensors per execution, beyond the arena \
             limit of {}: the runtime will refuse it unless run with --limit arena=SIZE \
             (SIZE at least {})",
            args.output.display(),
            format_size(bytes),
            format_size(limits.max_arena_bytes),
            format_size(bytes)
        );
    }
    let cache = match super::cache_config(args.cache_dir.as_deref(), args.token.as_deref())? {
        None => serde_json::Value::Null,
        Some(config) => {
            progress.stage("preparing the compiled model to fill the compilation cache");
            let dir = config.dir.display().to_string();
            let npu = nnc_runtime::SimulatedNpu::new("npu0");
            match &key {
                Some(k) => npu.install_key(k.as_bytes()),
                None if !recipients.is_empty() => {
                    return Err(err(
                        Exit::Usage,
                        "--cache-dir prepares the model with its symmetric key; a model for \
                         device recipients only fills its cache on the device \
                         (`nnc run --cache-dir` with the device's key)",
                    ));
                }
                None => {}
            }
            let options = nnc_runtime::LoadOptions {
                threads: 1,
                cache: Some(config),
                limits: args.limits.limits(),
                ..Default::default()
            };
            let bytes = std::fs::read(&args.output)
                .with_context(|| format!("cannot read back {}", args.output.display()))?;
            let prepared = nnc_runtime::PreparedModel::load_bytes(bytes, &npu, &options)
                .context("cannot prepare the compiled model for the cache")?;
            let report = prepared.cache_report();
            if let Some(w) = report
                .warnings
                .iter()
                .find(|w| w.starts_with("could not write"))
            {
                return Err(err(Exit::CannotWrite, w.clone()));
            }
            for w in &report.warnings {
                eprintln!("warning: {w}");
            }
            if !args.json {
                eprintln!(
                    "cache: {} in {dir} ({})",
                    match report.outcome {
                        nnc_runtime::CacheOutcome::Hit => "hit",
                        nnc_runtime::CacheOutcome::Miss => "miss",
                        nnc_runtime::CacheOutcome::None => "none",
                    },
                    match report.outcome {
                        nnc_runtime::CacheOutcome::Hit =>
                            "it already held this model's prepared form; nothing was written",
                        nnc_runtime::CacheOutcome::Miss =>
                            "prepared the model and wrote its artifacts; `nnc run --cache-dir` now starts from them",
                        nnc_runtime::CacheOutcome::None => "the cache was not used",
                    }
                );
            }
            json!({"dir": dir, "outcome": report.outcome, "warnings": report.warnings})
        }
    };
    let crypto = written.crypto;
    let summary = json!({
        "schema": "nnc.compile/1",
        "model": args.model.display().to_string(),
        "output": args.output.display().to_string(),
        "bytes": written.file_size,
        "operations": model.main.operations.len(),
        "weight_fields": written.weight_fields,
        "weight_bytes": written.weight_bytes,
        "encryption": {
            "algorithm": algorithm.map_or("none", |a| a.name()),
            "mode": if algorithm.is_some() { mode.name() } else { "none" },
            "padding": crypto.padding.name(),
            "integrity": crypto.integrity.name(),
            "key_id": key.as_ref().map(|_| hex::encode(written.key_id)),
            "recipients": recipients.iter().map(|r| hex::encode(r.key_id())).collect::<Vec<_>>(),
        },
        "signature": signer.as_ref().map(|s| json!({
            "algorithm": s.algorithm().name(),
            "signer_key_id": hex::encode(s.public_key().key_id()),
        })),
        "reproducible": args.reproducible,
        "relax_float32": model.relax_computation_float32_to_float16,
        "arena_bytes": arena,
        "cache": cache,
        "plan": plan_summary,
        "quantization": quant_report.as_ref().map(crate::quantize::Quantization::to_json),
        "timing_ms": { "lower": lower_ms, "quantize": quantize_ms, "emit": emit_ms },
    });
    if args.json {
        output::stdout(&format!("{}\n", serde_json::to_string_pretty(&summary)?))?;
    } else {
        eprintln!(
            "wrote {} ({} bytes): {} operations, {} weight fields ({} bytes), {}",
            args.output.display(),
            written.file_size,
            model.main.operations.len(),
            written.weight_fields,
            written.weight_bytes,
            match algorithm {
                Some(a) if mode == Mode::Gcm => format!(
                    "{}-gcm (each field authenticated by its GCM tag, the metadata with {})",
                    a.name(),
                    crypto.integrity.name()
                ),
                Some(a) => format!(
                    "{}-{} with {}",
                    a.name(),
                    mode.name(),
                    crypto.integrity.name()
                ),
                None if key.is_some() || !recipients.is_empty() => {
                    "unencrypted, authenticated with the key (HMAC-SHA-256)".into()
                }
                None => "unencrypted and unauthenticated (SHA-256 digests detect corruption only)"
                    .into(),
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What the partitioner gave one device.
struct DevicePlacement {
    name: String,
    kind: String,
    operations: usize,
    steps: usize,
    /// Bytes of the weights its operations read (a weight shared by two devices counts
    /// for both).
    weight_bytes: u64,
    /// Operations with encrypted weights that run here decrypted in host memory.
    host_decrypted: usize,
    /// Why it took nothing, when it took nothing.
    root_cause: Option<String>,
}

impl DevicePlacement {
    /// `placement: NAME (KIND): ...`, one line per device.
    fn line(&self) -> String {
        let head = format!("placement: {} ({})", self.name, self.kind);
        if self.operations == 0 {
            return format!(
                "{head}: no operations{}",
                self.root_cause
                    .as_ref()
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default()
            );
        }
        let mut line = format!(
            "{head}: {} operation{} in {} step{}, {} of weights",
            self.operations,
            if self.operations == 1 { "" } else { "s" },
            self.steps,
            if self.steps == 1 { "" } else { "s" },
            format_size(self.weight_bytes)
        );
        if self.host_decrypted > 0 {
            line.push_str(&format!(
                " ({} operation{} decrypting weights in host memory)",
                self.host_decrypted,
                if self.host_decrypted == 1 { "" } else { "s" }
            ));
        }
        line
    }

    fn to_json(&self) -> serde_json::Value {
        json!({
            "name": self.name,
            "kind": self.kind,
            "operations": self.operations,
            "steps": self.steps,
            "weight_bytes": self.weight_bytes,
            "host_decrypted": self.host_decrypted,
            "root_cause": self.root_cause,
        })
    }
}

/// Each device of `plan`, and each requested profile the plan left out, with what it
/// runs of `model` (the partitioned model).
fn placement_by_device(
    plan: &nnc_formats::plan::ExecutionPlan,
    profiles: &[nnc_formats::device::DeviceProfile],
    model: &Model,
) -> Vec<DevicePlacement> {
    let total = plan.placements.len();
    let mut devices: Vec<(String, String, Option<usize>)> = plan
        .devices
        .iter()
        .enumerate()
        .map(|(d, device)| (device.name.clone(), device.kind.clone(), Some(d)))
        .collect();
    for profile in profiles {
        if !devices.iter().any(|(name, _, _)| *name == profile.name) {
            devices.push((profile.name.clone(), profile.kind.name().to_string(), None));
        }
    }
    devices
        .into_iter()
        .map(|(name, kind, index)| {
            let here: Vec<&nnc_formats::plan::Placement> = plan
                .placements
                .iter()
                .filter(|p| Some(p.device as usize) == index)
                .collect();
            let mut weights = std::collections::BTreeSet::new();
            for p in &here {
                let Some(op) = model.main.operations.get(p.operation as usize) else {
                    continue;
                };
                weights.extend(op.inputs.iter().copied().filter(|&i| {
                    model
                        .main
                        .operands
                        .get(i as usize)
                        .is_some_and(|o| o.lifetime == nnc_formats::nn::Lifetime::ConstantReference)
                }));
            }
            let weight_bytes = weights
                .iter()
                .filter_map(|&i| model.main.operands.get(i as usize))
                .map(|o| o.location.length)
                .sum();
            let declines: Vec<&nnc_formats::plan::Decline> = plan
                .placements
                .iter()
                .flat_map(|p| &p.declined)
                .filter(|x| x.device == name)
                .collect();
            DevicePlacement {
                root_cause: if here.is_empty() {
                    nnc_compiler::partition::root_cause(&name, &declines, total)
                } else {
                    None
                },
                name,
                kind,
                operations: here.len(),
                steps: plan
                    .steps
                    .iter()
                    .filter(|s| Some(s.device as usize) == index)
                    .count(),
                weight_bytes,
                host_decrypted: here.iter().filter(|p| p.host_decrypted).count(),
            }
        })
        .collect()
}

/// The provenance statement a signature carries: what was compiled, by which compiler,
/// how, and for which devices (every file by name and SHA-256).
fn provenance(
    args: &Args,
    algorithm: Option<Algorithm>,
    recipients: &[nnc_formats::crypto::PublicKey],
) -> anyhow::Result<Vec<u8>> {
    let files = |paths: &[PathBuf]| -> anyhow::Result<Vec<serde_json::Value>> {
        paths.iter().map(|p| crate::trust::file_entry(p)).collect()
    };
    let bound: Vec<PathBuf> = args.bind_inputs.iter().map(|(_, p)| p.clone()).collect();
    let statement = json!({
        "schema": "nnc.provenance/1",
        "source": crate::trust::file_entry(&args.model)?,
        "compiler": emit::producer(),
        "options": {
            "encrypt": algorithm.map_or("none", |a| a.name()),
            "mode": Mode::from(args.mode).name(),
            "reproducible": args.reproducible,
            "relax_float32": args.relax_float32,
            "input_shapes": args.input_shapes.iter().map(|(n, d)| json!({"name": n, "dims": d})).collect::<Vec<_>>(),
            "input_preprocess": args.input_preprocess,
            "bind_inputs": files(&bound)?,
            "partition": nnc_formats::plan::PartitionMode::from(args.partition).name(),
            "quantize": args.quantize.quantize.is_some(),
        },
        "devices": files(&args.devices)?,
        "recipients": recipients.iter().map(|r| hex::encode(r.key_id())).collect::<Vec<_>>(),
    });
    Ok(serde_json::to_vec(&statement)?)
}

/// The activation arena the runtime's memory plan gives `model` (as `nnc run` would
/// prepare it; `None` when it has no static plan: control flow, dynamic shapes), and what
/// one execution holds at least (the arena, or the lower bound a load checks for control
/// flow); `None` when the model cannot be prepared here. The model's weights are dropped
/// first: the plan needs their sizes only, and the file is written.
fn planned_memory(model: &mut Model, limits: &Limits) -> Option<(Option<u64>, u64)> {
    for pool in &mut model.pools {
        *pool = Pool::Opaque { size: pool.size() };
    }
    let options = nnc_runtime::exec::PrepareOptions {
        // The plan is measured here, not refused: the warning says what it needs.
        limits: Limits {
            max_arena_bytes: u64::MAX,
            ..*limits
        },
        ..Default::default()
    };
    let program =
        nnc_runtime::exec::Program::prepare(model, std::sync::Arc::new(NoWeights), &options)
            .ok()?;
    let size = program.arena_size() as u64;
    Some(((size > 0).then_some(size), program.memory_lower_bound()))
}

/// A weight provider for measuring a plan: nothing runs, so no weights are needed.
struct NoWeights;

impl nnc_runtime::exec::WeightProvider for NoWeights {
    fn weights(
        &self,
        _operation: usize,
        _kernel: &dyn nnc_runtime::Kernel,
    ) -> nnc_runtime::error::Result<std::sync::Arc<nnc_runtime::PreparedWeights>> {
        Err(nnc_runtime::RuntimeError::Internal(
            "no weights are loaded when measuring a memory plan".into(),
        ))
    }

    fn preload(
        &self,
        _operation: usize,
        _kernel: &dyn nnc_runtime::Kernel,
    ) -> nnc_runtime::error::Result<()> {
        Ok(())
    }
}
