//! `nnc cache ls|verify|clean DIR`: look after a compilation-cache directory.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use nnc_formats::cache::{CacheDir, EntryStatus};
use serde_json::json;

use crate::output;

#[derive(clap::Subcommand)]
pub enum Action {
    /// List entries with their size and last use, most recent first.
    Ls(Dir),
    /// Check every entry's files against the index, and with the models' key, each
    /// authenticated entry's tag; exit 1 if any is damaged.
    Verify {
        #[command(flatten)]
        dir: Dir,
        /// The models' key: entries of models with a key are checked only with it.
        #[command(flatten)]
        key: crate::keys::KeyArgs,
    },
    /// Remove least-recently-used entries beyond a size limit, and leftovers of
    /// interrupted writes.
    Clean {
        #[command(flatten)]
        dir: Dir,
        /// Keep at most this much (e.g. 500M, 2G, 123456; default 0: remove everything).
        #[arg(long, value_name = "SIZE", value_parser = nnc_formats::limits::parse_size, default_value = "0")]
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

fn open(dir: &std::path::Path) -> anyhow::Result<CacheDir> {
    if !dir.is_dir() {
        return Err(crate::exit::err(
            crate::exit::Exit::MissingInput,
            format!("{} is not a cache directory", dir.display()),
        ));
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
        Action::Verify { dir: d, key } => {
            let master = if key.given() {
                Some(key.require_raw("the cache's models")?)
            } else {
                None
            };
            let results = open(&d.dir)?.verify(master.as_deref().map(|k| k.as_slice()))?;
            let bad = results
                .iter()
                .filter(|(_, s)| matches!(s, EntryStatus::Damaged(_)))
                .count();
            let unchecked = results
                .iter()
                .filter(|(_, s)| matches!(s, EntryStatus::Unchecked(_)))
                .count();
            if d.json {
                let list: Vec<_> = results
                    .iter()
                    .map(|(e, s)| match s {
                        EntryStatus::Ok => json!({"token": e.token, "status": "ok", "ok": true}),
                        EntryStatus::Unchecked(why) => json!({"token": e.token, "status": "unchecked", "ok": true, "problem": why}),
                        EntryStatus::Damaged(why) => json!({"token": e.token, "status": "damaged", "ok": false, "problem": why}),
                    })
                    .collect();
                output::stdout(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(
                        &json!({"schema": "nnc.cache.verify/1", "entries": list})
                    )?
                ))?;
            } else {
                let mut text = String::new();
                for (e, s) in &results {
                    match s {
                        EntryStatus::Ok => text.push_str(&format!("  {}  OK\n", e.token)),
                        EntryStatus::Unchecked(why) => {
                            text.push_str(&format!("  {}  NOT CHECKED: {why}\n", e.token))
                        }
                        EntryStatus::Damaged(why) => {
                            text.push_str(&format!("  {}  DAMAGED: {why}\n", e.token))
                        }
                    }
                }
                text.push_str(&format!(
                    "{} entries, {bad} damaged, {unchecked} not checked\n",
                    results.len()
                ));
                output::stdout(&text)?;
            }
            Ok(if bad == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(crate::exit::Exit::Failure.code())
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
