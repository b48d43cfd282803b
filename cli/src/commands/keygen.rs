//! `nnc keygen`: a new random key, written to a file only its owner can read.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use nnc_formats::crypto::{Algorithm, Key};

use super::AlgorithmArg;

#[derive(clap::Args)]
pub struct Args {
    /// The cipher the key is for (sets its length).
    #[arg(long, value_enum)]
    pub algorithm: AlgorithmArg,
    /// Where to write the key (hex, mode 0600).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Replace an existing file.
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let algorithm: Algorithm = args.algorithm.into();
    if args.output.exists() && !args.force {
        bail!(
            "{} exists; pass --force to replace it",
            args.output.display()
        );
    }
    let key = Key::generate(algorithm)?;
    let hex = key.to_hex();
    let dir = match args.output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // NamedTempFile is created with mode 0600, so the key is never readable by others,
    // not even for a moment; the rename then puts it in place.
    let mut tmp = tempfile::NamedTempFile::new_in(&dir)
        .with_context(|| format!("cannot create a file in {}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o600))
            .context("cannot restrict the key file's permissions")?;
    }
    tmp.write_all(hex.as_bytes())
        .and_then(|()| tmp.write_all(b"\n"))
        .context("cannot write the key")?;
    tmp.as_file().sync_all().context("cannot write the key")?;
    if args.force {
        tmp.persist(&args.output)
    } else {
        tmp.persist_noclobber(&args.output)
    }
    .with_context(|| format!("cannot write {}", args.output.display()))?;
    eprintln!(
        "wrote a new {} key to {} (mode 600)",
        algorithm.name(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}
