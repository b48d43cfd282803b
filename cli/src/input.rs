//! Reading input files: every file the CLI reads (models, `.nnc` files, tensor files,
//! stream chunks, device profiles, `--bind-input` files) is opened here.
//!
//! Only regular files are read. The file is opened with `O_NONBLOCK` (a FIFO without a
//! writer would otherwise block the open forever) and its type checked on the opened
//! descriptor, so `/dev/zero`, `/dev/urandom`, FIFOs, sockets and directories are refused
//! by name before a byte is read. Reads are bounded by what the kind of file can hold,
//! checked against the size when opened and enforced while reading (a file that grows
//! meanwhile is not followed).

use std::fs::{File, Metadata};
use std::io::Read;
use std::path::Path;

use nnc_formats::limits::{LimitKind, Limits};

use crate::exit::{Exit, err};

/// The largest device profile or other small JSON input.
pub const MAX_PROFILE_BYTES: u64 = 4 << 20;

/// Room for a tensor file's header (`.npy` header, `TensorProto` fields) beyond the
/// tensor's own bytes.
const TENSOR_FILE_OVERHEAD: u64 = 1 << 20;

/// Opens `path` for reading without blocking and refuses anything but a regular file,
/// naming `what` and the path.
pub fn open(path: &Path, what: &str) -> anyhow::Result<(File, Metadata)> {
    let cannot = |e: std::io::Error| {
        err(
            Exit::MissingInput,
            format!("cannot read {what} {}: {e}", path.display()),
        )
    };
    let file = nnc_runtime::key_file::open_nonblocking(path).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(err(
            Exit::MissingInput,
            format!(
                "cannot read {what} {}: it is a {}, not a regular file",
                path.display(),
                nnc_runtime::key_file::file_kind(&meta)
            ),
        ));
    }
    Ok((file, meta))
}

/// Checks that `path` is a regular file that can be opened (for inputs a library opens
/// itself afterwards).
pub fn check(path: &Path, what: &str) -> anyhow::Result<()> {
    open(path, what).map(|_| ())
}

/// Reads a whole file of at most `max` bytes; a larger one is refused as malformed.
pub fn read_small(path: &Path, what: &str, max: u64) -> anyhow::Result<Vec<u8>> {
    let (file, meta) = open(path, what)?;
    let too_large = || {
        err(
            Exit::Malformed,
            format!(
                "{what} {} is larger than any {what} nnc reads (at most {})",
                path.display(),
                nnc_formats::limits::format_size(max)
            ),
        )
    };
    if meta.len() > max {
        return Err(too_large());
    }
    // One byte past the bound tells a file that grew since it was opened.
    let bytes = read_up_to(file, path, what, meta.len(), max.saturating_add(1))?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Reads a model file whole: the bytes it holds when opened, never more.
pub fn read_model(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    let (file, meta) = open(path, what)?;
    read_up_to(file, path, what, meta.len(), meta.len())
}

/// Reads a tensor file: one larger than the `tensor` limit (and room for its header)
/// cannot hold a tensor within it, and is refused with that limit (exit 4) unread.
pub fn read_tensor_file(path: &Path, limits: &Limits) -> anyhow::Result<Vec<u8>> {
    let what = "tensor file";
    let (file, meta) = open(path, what)?;
    let max = limits
        .get(LimitKind::Tensor)
        .saturating_add(TENSOR_FILE_OVERHEAD);
    let refuse = |size: u64| -> anyhow::Result<()> {
        limits.check(
            LimitKind::Tensor,
            || format!("tensor file {} (of {size} bytes)", path.display()),
            Some(size.saturating_sub(TENSOR_FILE_OVERHEAD)),
        )?;
        Ok(())
    };
    if meta.len() > max {
        refuse(meta.len())?;
    }
    let bytes = read_up_to(file, path, what, meta.len(), max.saturating_add(1))?;
    if bytes.len() as u64 > max {
        refuse(bytes.len() as u64)?;
    }
    Ok(bytes)
}

/// Reads at most `limit` bytes, with room for `expected` of them reserved up front (a
/// reservation that cannot be made, as for a huge sparse file, is an error as with
/// `std::fs::read`, never an abort).
fn read_up_to(
    file: File,
    path: &Path,
    what: &str,
    expected: u64,
    limit: u64,
) -> anyhow::Result<Vec<u8>> {
    let cannot = |e: std::io::Error| {
        err(
            Exit::MissingInput,
            format!("cannot read {what} {}: {e}", path.display()),
        )
    };
    let mut bytes = Vec::new();
    let reserve = usize::try_from(expected.min(limit)).unwrap_or(usize::MAX);
    bytes
        .try_reserve_exact(reserve)
        .map_err(|_| cannot(std::io::ErrorKind::OutOfMemory.into()))?;
    file.take(limit).read_to_end(&mut bytes).map_err(cannot)?;
    Ok(bytes)
}

/// Reads a device-profile file (a profile, a list, or `{"devices": [...]}`), at most
/// [`MAX_PROFILE_BYTES`].
pub fn read_profiles(path: &Path) -> anyhow::Result<Vec<nnc_formats::device::DeviceProfile>> {
    let what = "device profile";
    let bytes = read_small(path, what, MAX_PROFILE_BYTES)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        err(
            Exit::Malformed,
            format!("{what} {} is not UTF-8 text", path.display()),
        )
    })?;
    // Named as a device profile: the parser's messages say only where in the file.
    Ok(nnc_formats::device::parse_profiles(
        &text,
        &format!("{what} {}", path.display()),
    )?)
}
