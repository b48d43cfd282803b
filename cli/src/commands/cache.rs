//! `nnc cache ls|verify|clean DIR`: look after a compilation-cache directory.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use nnc_formats::cache::CacheDir;
use serde_json::json;

use crate::output;

#[derive(clap::Subcommand)]
pub enum Action {
    /// List entries with their size and last use, most recent first.
    Ls(Dir),
    /// Check every entry's files against the index; exit 1 if any is damaged.
    Verify(Dir),
    /// Remove least-recently-used entries beyond a size limit, and leftovers of
    /// interrupted writes.
    Clean {
        #[command(flatten)]
        dir: Dir,
        /// Keep at most this much (e.g. 500M, 2G, 123456; default 0: remove everything).
        #[arg(long, value_name = "SIZE", value_parser = parse_size, default_value = "0")]
        max_size: u64,
    },
}

#[derive(clap::Args)]
pub struct Dir {
    /// The cache directory.
    pub dir: PathBuf,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `123`, `64K`, `500M`, `2G` (powers of 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a size (e.g. 500M)"))?;
    let scale: u64 = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" | "KIB" => 1 << 10,
        "M" | "MB" | "MIB" => 1 << 20,
        "G" | "GB" | "GIB" => 1 << 30,
        _ => {
            return Err(format!(
                "'{text}': unknown size unit '{unit}' (use K, M or G)"
            ));
        }
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("'{text}' is too large"))
}

fn open(dir: &std::path::Path) -> anyhow::Result<CacheDir> {
    if !dir.is_dir() {
        anyhow::bail!("{} is not a cache directory", dir.display());
    }
    CacheDir::open(dir, nnc_runtime::cache::CACHE_VERSION)
        .with_context(|| format!("cannot open cache {}", dir.display()))
}

pub fn run(action: Action) -> anyhow::Result<ExitCode> {
    match action {
        Action::Ls(d) => {
            let entries = open(&d.dir)?.list()?;
            if d.json {
                output::stdout(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(
                        &json!({"schema": "nnc.cache.ls/1", "entries": entries})
                    )?
                ))?;
            } else {
                let mut text = format!("{} entries in {}\n", entries.len(), d.dir.display());
                for e in &entries {
                    text.push_str(&format!(
                        "  {}  {:>10} bytes  {} model + {} data files  last used {}\n",
                        e.token, e.bytes, e.model_files, e.data_files, e.last_used
                    ));
                }
                output::stdout(&text)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Action::Verify(d) => {
            let results = open(&d.dir)?.verify()?;
            let bad = results.iter().filter(|(_, p)| p.is_some()).count();
            if d.json {
                let list: Vec<_> = results
                    .iter()
                    .map(|(e, p)| json!({"token": e.token, "ok": p.is_none(), "problem": p}))
                    .collect();
                output::stdout(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(
                        &json!({"schema": "nnc.cache.verify/1", "entries": list})
                    )?
                ))?;
            } else {
                let mut text = String::new();
                for (e, p) in &results {
                    match p {
                        None => text.push_str(&format!("  {}  OK\n", e.token)),
                        Some(p) => text.push_str(&format!("  {}  DAMAGED: {p}\n", e.token)),
                    }
                }
                text.push_str(&format!("{} entries, {bad} damaged\n", results.len()));
                output::stdout(&text)?;
            }
            Ok(if bad == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(crate::exit::FAILURE)
            })
        }
        Action::Clean { dir, max_size } => {
            let report = open(&dir.dir)?.clean(max_size)?;
            if dir.json {
                output::stdout(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(
                        &json!({"schema": "nnc.cache.clean/1", "report": report})
                    )?
                ))?;
            } else {
                output::stdout(&format!(
                    "removed {} entries ({} bytes) and {} leftovers; {} bytes remain\n",
                    report.removed_entries.len(),
                    report.removed_bytes,
                    report.removed_strays,
                    report.remaining_bytes
                ))?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
