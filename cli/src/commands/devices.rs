//! `nnc devices`: the device profiles nnc knows and what each can do.

use std::path::PathBuf;
use std::process::ExitCode;

use nnc_formats::device::DeviceProfile;
use serde_json::json;

use crate::output;

#[derive(clap::Args)]
pub struct Args {
    /// Device profile files (JSON; repeatable). The built-in CPU is always listed.
    #[arg(long = "devices", value_name = "FILE")]
    pub devices: Vec<PathBuf>,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut profiles = vec![DeviceProfile::cpu()];
    for path in &args.devices {
        profiles.extend(crate::input::read_profiles(path)?);
    }
    let kernels = nnc_runtime::kernels::isa::report();
    if args.json {
        // Each device's profile, and its capabilities as the NN API's driver reports
        // them (the same answer at every start: derived from the profile alone).
        let devices: Vec<serde_json::Value> = profiles
            .iter()
            .map(|p| {
                let mut v = serde_json::to_value(p)?;
                v["capabilities"] = serde_json::to_value(p.capabilities())?;
                Ok(v)
            })
            .collect::<serde_json::Result<_>>()?;
        output::stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({
                "schema": "nnc.devices/1",
                "host_kernels": kernels,
                "devices": devices,
            }))?
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = format!("host kernels: {}\n", kernels.summary());
    for p in &profiles {
        text.push_str(&format!(
            "{} ({}, version {})\n",
            p.name,
            p.kind.name(),
            p.version
        ));
        let perf: Vec<String> = p
            .performance
            .iter()
            .map(|(t, v)| format!("{t} exec {} power {}", v.exec_time, v.power_usage))
            .collect();
        text.push_str(&format!(
            "  performance: {}\n",
            if perf.is_empty() {
                "1.0 for every type (the CPU baseline)".to_string()
            } else {
                perf.join("; ")
            }
        ));
        if p.operations.is_empty() {
            text.push_str("  operations: every operation nnc runs\n");
        } else {
            for rule in &p.operations {
                let mut limits = Vec::new();
                if let Some(t) = &rule.operand_types {
                    limits.push(format!("types {}", t.join("/")));
                }
                for (name, v) in [
                    ("kernel", rule.max_kernel_size),
                    ("stride", rule.max_stride),
                    ("dilation", rule.max_dilation),
                    ("channels", rule.max_channels),
                    ("rank", rule.max_rank),
                ] {
                    if let Some(v) = v {
                        limits.push(format!("{name} <= {v}"));
                    }
                }
                if let Some(b) = rule.max_tensor_bytes {
                    limits.push(format!("tensors <= {b} bytes"));
                }
                text.push_str(&format!(
                    "  {}: {}\n",
                    rule.types.join(", "),
                    if limits.is_empty() {
                        "any".into()
                    } else {
                        limits.join(", ")
                    }
                ));
            }
        }
        if let Some(b) = p.memory_budget_bytes {
            text.push_str(&format!("  on-chip memory: {b} bytes\n"));
        }
        let decrypts: Vec<String> = p
            .decrypts
            .iter()
            .map(|d| {
                format!(
                    "{} ({})",
                    d.algorithm.name(),
                    d.modes
                        .iter()
                        .map(|m| m.name())
                        .collect::<Vec<_>>()
                        .join("/")
                )
            })
            .collect();
        if !p.extensions.is_empty() {
            text.push_str(&format!("  extensions: {}\n", p.extensions.join(", ")));
        }
        text.push_str(&format!(
            "  decrypts: {}\n  cache files: {} model, {} data\n",
            if decrypts.is_empty() {
                "nothing".to_string()
            } else {
                decrypts.join(", ")
            },
            p.cache_files.model,
            p.cache_files.data
        ));
    }
    output::stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}
