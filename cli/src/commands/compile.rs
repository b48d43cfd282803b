//! `nnc compile`: a source model in, an encrypted `.nnc` out.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use nnc_compiler::emit::{self, EmitOptions};
use nnc_formats::container::Container;
use nnc_formats::crypto::{Algorithm, Mode};
use serde_json::json;

use super::{EncryptArg, ModeArg};
use crate::keys::KeyArgs;
use crate::output;

#[derive(clap::Args)]
pub struct Args {
    /// The model: .onnx or .tflite.
    pub model: PathBuf,
    /// The .nnc file to write (atomically: a failed compile leaves nothing behind).
    #[arg(short, long, value_name = "OUT.nnc")]
    pub output: PathBuf,
    /// Weight cipher. The default, AES-128, runs on AES-NI; SM4 is for deployments that
    /// must use it. `none` writes plaintext weights (still integrity-checked).
    #[arg(long, value_enum, default_value = "aes128")]
    pub encrypt: EncryptArg,
    /// Cipher mode. The default, CTR, needs no padding and decrypts in parallel; ECB
    /// reveals repeated blocks and is offered only for compatibility.
    #[arg(long, value_enum, default_value = "ctr")]
    pub mode: ModeArg,
    #[command(flatten)]
    pub key: KeyArgs,
    /// Byte-identical output for the same model, options and key (IVs from a keyed PRF).
    #[arg(long)]
    pub reproducible: bool,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
    /// Fix a dynamic input dimension: NAME=1x3x224x224 (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = super::parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<u32>)>,
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
    /// Also prepare the compiled model and write its compilation-cache artifacts here.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The token naming this model in the cache (64 hex digits); by default the file's
    /// checksum.
    #[arg(long, value_name = "HEX", requires = "cache_dir")]
    pub token: Option<String>,
}

/// Stage messages on stderr, only when a person is watching.
struct Progress {
    on: bool,
    start: Instant,
}

impl Progress {
    fn stage(&self, what: &str) {
        if self.on {
            eprintln!("nnc: [{:>6.2}s] {what}", self.start.elapsed().as_secs_f64());
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let progress = Progress {
        on: std::io::stderr().is_terminal() && !args.json,
        start: Instant::now(),
    };
    let algorithm: Option<Algorithm> = args.encrypt.into();
    let mode: Mode = args.mode.into();
    let key = match algorithm {
        Some(a) => match args.key.load(a)? {
            Some(k) => Some(k),
            None => bail!(
                "nnc compile encrypts weights ({}-{} by default) and needs a key: pass --key-file FILE or --key-env VAR \
                 (make one with `nnc keygen --algorithm {} -o FILE`), or --encrypt none",
                a.name(),
                mode.name(),
                a.name()
            ),
        },
        None => {
            if args.key.given() {
                bail!("--encrypt none takes no key");
            }
            None
        }
    };
    if mode == Mode::Ecb && key.is_some() {
        eprintln!(
            "warning: ECB encrypts equal weight blocks to equal ciphertext blocks, revealing patterns; prefer ctr or cbc"
        );
    }
    progress.stage(&format!("lowering {}", args.model.display()));
    let mut options = super::lower_options(&args.input_shapes, false)?;
    super::bind_inputs(&mut options, &args.bind_inputs)?;
    let started = Instant::now();
    let lowered = super::lower(&args.model, &options)?;
    let lower_ms = started.elapsed().as_secs_f64() * 1e3;
    progress.stage(&format!(
        "lowered to {} operations",
        lowered.model.main.operations.len()
    ));
    // Partition when device profiles or a partition policy other than the default ask.
    let partitioned = !args.devices.is_empty()
        || !matches!(args.partition, super::PartitionArg::Fallback)
        || args.no_plaintext_fallback;
    let mut model = lowered.model;
    let mut extra_sections = Vec::new();
    let mut plan_summary = serde_json::Value::Null;
    if partitioned {
        let mut profiles = Vec::new();
        for path in &args.devices {
            profiles.extend(
                nnc_formats::device::load_profiles(path)
                    .map_err(nnc_compiler::CompileError::from)?,
            );
        }
        progress.stage(&format!(
            "partitioning across {} device profile(s)",
            profiles.len()
        ));
        let options = nnc_compiler::partition::PartitionOptions {
            mode: args.partition.into(),
            preference: args.preference.into(),
            encryption: key.as_ref().map(|k| (k.algorithm(), mode)),
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
        plan_summary = json!({
            "mode": plan.mode.name(),
            "preference": plan.preference.name(),
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
    let bytes = emit::emit(
        &model,
        EmitOptions {
            key: key.as_ref(),
            mode,
            reproducible: args.reproducible,
            extra_sections,
        },
    )
    .with_context(|| format!("cannot compile {}", args.model.display()))?;
    let emit_ms = started.elapsed().as_secs_f64() * 1e3;
    progress.stage(&format!("writing {}", args.output.display()));
    output::write_atomic(&args.output, &bytes)?;
    let container =
        Container::parse(&bytes).context("internal error: the written file does not parse")?;
    let cache = match super::cache_config(args.cache_dir.as_deref(), args.token.as_deref())? {
        None => serde_json::Value::Null,
        Some(config) => {
            progress.stage("preparing the compiled model to fill the compilation cache");
            let dir = config.dir.display().to_string();
            let npu = nnc_runtime::SimulatedNpu::new("npu0");
            if let Some(k) = &key {
                npu.install_key(k.as_bytes());
            }
            let options = nnc_runtime::LoadOptions {
                threads: 1,
                cache: Some(config),
                ..Default::default()
            };
            let prepared = nnc_runtime::PreparedModel::load_bytes(bytes.clone(), &npu, &options)
                .context("cannot prepare the compiled model for the cache")?;
            let report = prepared.cache_report();
            if let Some(w) = report
                .warnings
                .iter()
                .find(|w| w.starts_with("could not write"))
            {
                bail!("{w}");
            }
            for w in &report.warnings {
                eprintln!("warning: {w}");
            }
            json!({"dir": dir, "outcome": report.outcome, "warnings": report.warnings})
        }
    };
    let fields: Vec<_> = container.fields.iter().flatten().collect();
    let weight_bytes: u64 = fields.iter().map(|f| f.plaintext_length).sum();
    let summary = json!({
        "schema": "nnc.compile/1",
        "model": args.model.display().to_string(),
        "output": args.output.display().to_string(),
        "bytes": bytes.len(),
        "operations": container.model.main.operations.len(),
        "weight_fields": fields.len(),
        "weight_bytes": weight_bytes,
        "encryption": {
            "algorithm": algorithm.map_or("none", |a| a.name()),
            "mode": if key.is_some() { mode.name() } else { "none" },
            "padding": container.header.crypto.padding.name(),
            "integrity": container.header.crypto.integrity.name(),
            "key_id": key.as_ref().map(|_| hex::encode(container.header.key_id)),
        },
        "reproducible": args.reproducible,
        "cache": cache,
        "plan": plan_summary,
        "timing_ms": { "lower": lower_ms, "emit": emit_ms },
    });
    if args.json {
        output::stdout(&format!("{}\n", serde_json::to_string_pretty(&summary)?))?;
    } else {
        eprintln!(
            "wrote {} ({} bytes): {} operations, {} weight fields ({} bytes), {}",
            args.output.display(),
            bytes.len(),
            container.model.main.operations.len(),
            fields.len(),
            weight_bytes,
            match algorithm {
                Some(a) => format!(
                    "{}-{} with {}",
                    a.name(),
                    mode.name(),
                    container.header.crypto.integrity.name()
                ),
                None => "unencrypted (SHA-256 digests)".into(),
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}
