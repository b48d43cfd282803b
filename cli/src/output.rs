//! Writing results: stdout that tolerates a closed pipe, and output files written so that
//! no failure, kill or race leaves anything half-written or replaces what it must not.
//!
//! An output path must be a regular file or a new path: a device, FIFO, socket, directory
//! or symbolic link there is refused, as is a path that is one of the command's inputs
//! (the same file, by device and inode). The bytes go to an unnamed temporary file
//! (Linux `O_TMPFILE`, mode 0600) that is linked into the directory only when complete and
//! then renamed over the target, so a killed process leaves no file at all. Where
//! `O_TMPFILE` is unavailable, a named temporary file of nnc's own pattern is used; each
//! writer holds a lock on its temporary file, and every write first removes the
//! temporary files of that pattern that nobody holds (leftovers of killed writers).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::exit::{Exit, err};

std::thread_local! {
    /// Standard output of the commands this thread runs in process, while [`capture`]
    /// collects it.
    static CAPTURED: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with everything written through [`stdout`] on this thread collected instead
/// of printed; returns its result and the text.
pub fn capture<T>(f: impl FnOnce() -> T) -> (T, String) {
    let outer = CAPTURED.with(|c| c.borrow_mut().replace(String::new()));
    let value = f();
    let text = CAPTURED.with(|c| std::mem::replace(&mut *c.borrow_mut(), outer));
    (value, text.unwrap_or_default())
}

/// Writes to stdout; a reader that went away (`nnc dump ... | head`) is not an error.
pub fn stdout(text: &str) -> anyhow::Result<()> {
    let captured = CAPTURED.with(|c| match c.borrow_mut().as_mut() {
        Some(buffer) => {
            buffer.push_str(text);
            true
        }
        None => false,
    });
    if captured {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(err(
            Exit::Failure,
            format!("cannot write to standard output: {e}"),
        )),
    }
}

/// Permissions of an output: ordinary files, or owner-only (keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Public,
    Private,
}

impl Mode {
    #[cfg(unix)]
    fn bits(self) -> u32 {
        match self {
            Mode::Public => 0o644,
            Mode::Private => 0o600,
        }
    }
}

/// Refuses an output path that is not a regular file or a new path, or that is the same
/// file as one of `inputs`.
pub fn check_output(path: &Path, inputs: &[&Path]) -> anyhow::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(err(
                Exit::CannotWrite,
                format!("cannot write {}: {e}", path.display()),
            ));
        }
    };
    let ft = meta.file_type();
    if !ft.is_file() {
        let what = if ft.is_dir() {
            "a directory"
        } else if ft.is_symlink() {
            "a symbolic link"
        } else {
            file_kind(&ft)
        };
        return Err(err(
            Exit::CannotWrite,
            format!(
                "refusing to write {}: it is {what}; nnc writes only regular files (or a new path)",
                path.display()
            ),
        ));
    }
    for input in inputs {
        if same_file(path, input) {
            return Err(err(
                Exit::CannotWrite,
                format!(
                    "refusing to write {}: it is an input of this command ({})",
                    path.display(),
                    input.display()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(unix)]
fn file_kind(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(not(unix))]
fn file_kind(_: &std::fs::FileType) -> &'static str {
    "not a regular file"
}

#[cfg(unix)]
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(a: &Path, b: &Path) -> bool {
    matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// Writes `bytes` to `path` (checked with [`check_output`] against `inputs`) so that the
/// file appears complete or not at all.
pub fn write_file(path: &Path, bytes: &[u8], mode: Mode, inputs: &[&Path]) -> anyhow::Result<()> {
    write_file_with(path, mode, inputs, |file| {
        let mut file = file;
        file.write_all(bytes).map_err(|e| {
            err(
                Exit::CannotWrite,
                format!("cannot write {}: {e}", path.display()),
            )
        })
    })
}

/// Like [`write_file`], with `fill` writing the contents into the (temporary) file;
/// when `fill` fails, its error is returned and nothing is left behind.
pub fn write_file_with<T>(
    path: &Path,
    mode: Mode,
    inputs: &[&Path],
    fill: impl FnOnce(&File) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    check_output(path, inputs)?;
    let cannot = |e: std::io::Error| {
        err(
            Exit::CannotWrite,
            format!("cannot write {}: {e}", path.display()),
        )
    };
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| {
            err(
                Exit::CannotWrite,
                format!("cannot write {}: it names no file", path.display()),
            )
        })?
        .to_string_lossy()
        .into_owned();
    let prefix = format!(".{name}.nnc-tmp-");
    remove_stale_temporaries(&dir, &prefix);
    let file = match unnamed_temporary(&dir) {
        Some(f) => f,
        None => named_temporary(&dir, &prefix).map_err(cannot)?.0,
    };
    let value = fill(&file.handle)?;
    publish(file, &dir, &prefix, path, mode).map_err(cannot)?;
    Ok(value)
}

/// Gives the filled `file` a temporary name if it has none and renames it over `target`.
///
/// The rename makes the file appear complete or not at all to every reader, whatever
/// happens to this process. Flushing to the disk (`fsync` of the file and of the
/// directory) is kept for private files, keys: a key lost to a power failure loses
/// every model encrypted with it. Public outputs (models, dumps) are rebuilt by running
/// the command again, like a compiler's object files; their two flushes cost about 15 ms,
/// half of what ONNX Runtime needs to load MobileNetV2.
fn publish(
    mut file: TempFile,
    dir: &Path,
    prefix: &str,
    target: &Path,
    mode: Mode,
) -> std::io::Result<()> {
    let durable = mode == Mode::Private;
    if durable {
        file.handle.sync_all()?;
    }
    let temp_path = match &file.path {
        Some(p) => p.clone(),
        None => link_unnamed(&file.handle, dir, prefix)?,
    };
    file.path = Some(temp_path.clone());
    replace(&temp_path, target)?;
    file.path = None;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.handle
            .set_permissions(std::fs::Permissions::from_mode(mode.bits()))?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    if durable && let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Moves the complete temporary file to `target`. On Linux an existing target is swapped
/// with it (`renameat2` with `RENAME_EXCHANGE`, as atomic as a rename) and the old file,
/// now under the temporary name, is then removed: ext4 flushes a new file's data before a
/// rename that replaces another file (its `auto_da_alloc` safeguard), which took 10 to 35 ms
/// for a 47 MB model, most of `nnc rewrap`'s time; an exchange takes 0.2 ms. Where the
/// file system cannot exchange, and elsewhere, a plain rename.
#[cfg(target_os = "linux")]
fn replace(temp: &Path, target: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let is_file = std::fs::symlink_metadata(target).is_ok_and(|m| m.file_type().is_file());
    if is_file {
        let from =
            std::ffi::CString::new(temp.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        let to =
            std::ffi::CString::new(target.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        // SAFETY: both paths are NUL-terminated C strings that outlive the call.
        let r = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        if r == 0 {
            // The old file; a failure leaves a stale temporary that a later write removes.
            let _ = std::fs::remove_file(temp);
            return Ok(());
        }
    }
    std::fs::rename(temp, target)
}

#[cfg(not(target_os = "linux"))]
fn replace(temp: &Path, target: &Path) -> std::io::Result<()> {
    std::fs::rename(temp, target)
}

/// A temporary file being written: locked for as long as it is open, and removed if
/// dropped while it still has a temporary name.
struct TempFile {
    handle: File,
    path: Option<PathBuf>,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// An unnamed file in `dir` (Linux `O_TMPFILE`, mode 0600), or `None` where the kernel
/// or file system does not offer them.
#[cfg(target_os = "linux")]
fn unnamed_temporary(dir: &Path) -> Option<TempFile> {
    use std::os::unix::fs::OpenOptionsExt;
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
        .ok()?;
    handle.try_lock().ok()?;
    Some(TempFile { handle, path: None })
}

#[cfg(not(target_os = "linux"))]
fn unnamed_temporary(_: &Path) -> Option<TempFile> {
    None
}

/// Gives an unnamed file a temporary name in `dir` (hard-linking its `/proc` entry).
#[cfg(target_os = "linux")]
fn link_unnamed(file: &File, dir: &Path, prefix: &str) -> std::io::Result<PathBuf> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let source = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(std::io::Error::other)?;
    for _ in 0..16 {
        let target = dir.join(format!("{prefix}{:016x}", rand_suffix()));
        let c_target =
            std::ffi::CString::new(target.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        // SAFETY: both paths are NUL-terminated C strings that outlive the call.
        let r = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                source.as_ptr(),
                libc::AT_FDCWD,
                c_target.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if r == 0 {
            return Ok(target);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    Err(std::io::Error::other("no free temporary name"))
}

#[cfg(not(target_os = "linux"))]
fn link_unnamed(_: &File, _: &Path, _: &str) -> std::io::Result<PathBuf> {
    Err(std::io::Error::other(
        "unnamed temporary files are not supported",
    ))
}

/// A new named temporary file (mode 0600, locked) of nnc's pattern in `dir`.
fn named_temporary(dir: &Path, prefix: &str) -> std::io::Result<(TempFile, PathBuf)> {
    for _ in 0..16 {
        let path = dir.join(format!("{prefix}{:016x}", rand_suffix()));
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        match options.open(&path) {
            Ok(handle) => {
                handle.lock()?;
                return Ok((
                    TempFile {
                        handle,
                        path: Some(path.clone()),
                    },
                    path,
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free temporary name"))
}

/// Removes temporary files of `prefix` in `dir` that no live writer holds locked.
fn remove_stale_temporaries(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(prefix) {
            continue;
        }
        let path = entry.path();
        if let Ok(f) = File::open(&path)
            && f.try_lock().is_ok()
        {
            let _ = std::fs::remove_file(&path);
        }
    }
}

fn rand_suffix() -> u64 {
    nnc_formats::crypto::try_random_bytes::<8>().map_or_else(
        |_| u64::from(std::process::id()) ^ 0x9e37_79b9_7f4a_7c15,
        u64::from_le_bytes,
    )
}

/// Writes text to a file (see [`write_file`]), or to stdout when `path` is `None` or `-`.
pub fn to_file_or_stdout(path: Option<&Path>, text: &str, inputs: &[&Path]) -> anyhow::Result<()> {
    match path {
        Some(p) if p != Path::new("-") => write_file(p, text.as_bytes(), Mode::Public, inputs),
        _ => stdout(text),
    }
}
