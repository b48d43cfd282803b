//! Writing results: stdout that tolerates a closed pipe, and files written atomically.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

/// Writes to stdout; a reader that went away (`nnc dump ... | head`) is not an error.
pub fn stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e).context("cannot write to standard output"),
    }
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename,
/// so that a failure never leaves a partial file at `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot create a file in {}", dir.display()))?;
    tmp.write_all(bytes)
        .with_context(|| format!("cannot write {}", path.display()))?;
    // Temporary files are created 0600; outputs are ordinary files (keys use keygen).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .with_context(|| format!("cannot set permissions of {}", path.display()))?;
    }
    tmp.as_file()
        .sync_all()
        .with_context(|| format!("cannot write {}", path.display()))?;
    tmp.persist(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Writes to a file atomically, or to stdout when `path` is `None` or `-`.
pub fn to_file_or_stdout(path: Option<&Path>, text: &str) -> anyhow::Result<()> {
    match path {
        Some(p) if p != Path::new("-") => write_atomic(p, text.as_bytes()),
        _ => stdout(text),
    }
}
