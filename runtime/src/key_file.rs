//! Reading a key file as `nnc keygen` writes it (a line naming the algorithm the key was
//! made for, `# nnc key: sm4`, then the key in hex), with a bound: the CLI's
//! `--key-file` and the C API's `nnc_key_from_file` share this reader. Lines starting
//! with `#` are comments, so a bare hex key (older files, keys made elsewhere) reads too.
//!
//! A key file is at most [`MAX_KEY_FILE_BYTES`] bytes. Anything that is not a regular
//! file is refused before a byte is read (`/dev/zero` would never end, a FIFO would
//! block), and at most one byte more than the bound is read, so a huge file costs
//! nothing. Errors never echo the file's contents.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

/// The longest key file: the algorithm line, 64 hex digits (a 32-byte key), newlines,
/// with room for CRLF line ends.
pub const MAX_KEY_FILE_BYTES: usize = 96;

/// How `nnc keygen` starts the line that names a symmetric key's algorithm.
pub const ALGORITHM_LINE: &str = "# nnc key: ";

/// A symmetric key file's text: the algorithm its `# nnc key: NAME` line records (the
/// name as written, if there is one) and its hex digits (every line that is not a `#`
/// comment, trimmed and joined; zeroized when dropped).
pub fn split_key_text(text: &str) -> (Option<&str>, Zeroizing<String>) {
    let mut algorithm = None;
    let mut hex = Zeroizing::new(String::with_capacity(text.len()));
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            if let Some(name) = line.strip_prefix(ALGORITHM_LINE.trim_end()) {
                algorithm = Some(name.trim());
            }
        } else {
            hex.push_str(line);
        }
    }
    (algorithm, hex)
}

/// The longest PEM key file (a device's or a signer's key, `nnc keygen`): a P-256 PKCS#8
/// key is about 240 bytes, so this bound leaves room for comments and line-ending
/// variants while costing nothing.
pub const MAX_PEM_FILE_BYTES: usize = 16 << 10;

/// Why a key file could not be read. None carries any of its contents.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// The file could not be opened, inspected or read.
    #[error("cannot read the key file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not a regular file (a FIFO, a device, a directory, a socket).
    #[error(
        "the key file {} is a {kind}, not a regular file (a key file is the hex text \
         `nnc keygen` writes)",
        path.display()
    )]
    NotAFile { path: PathBuf, kind: &'static str },
    /// Longer than any key file.
    #[error(
        "the key file {} holds more than {max} bytes: a key file is an algorithm line \
         and at most 64 hex digits, or a PEM key",
        path.display()
    )]
    TooLong { path: PathBuf, max: usize },
    /// Not UTF-8 text.
    #[error("the key file {} is not text: a key file holds hex digits", path.display())]
    NotText { path: PathBuf },
}

/// Reads a key file's text (zeroized when dropped), at most [`MAX_KEY_FILE_BYTES`]
/// bytes, refusing anything that is not a regular file without blocking on it.
pub fn read_key_file(path: &Path) -> Result<Zeroizing<String>, KeyFileError> {
    read_key_text(path, MAX_KEY_FILE_BYTES)
}

/// Reads a key file that may hold a hex key or a PEM key (a device's private key, a
/// signer's key, a public key): PEM text up to [`MAX_PEM_FILE_BYTES`], anything else up to
/// [`MAX_KEY_FILE_BYTES`].
pub fn read_key_or_pem_file(path: &Path) -> Result<Zeroizing<String>, KeyFileError> {
    // Too long for either: reported against the hex bound, the usual key file.
    let text = read_key_text(path, MAX_PEM_FILE_BYTES).map_err(|e| match e {
        KeyFileError::TooLong { path, .. } => KeyFileError::TooLong {
            path,
            max: MAX_KEY_FILE_BYTES,
        },
        other => other,
    })?;
    if !is_pem(&text) && text.len() > MAX_KEY_FILE_BYTES {
        return Err(KeyFileError::TooLong {
            path: path.to_path_buf(),
            max: MAX_KEY_FILE_BYTES,
        });
    }
    Ok(text)
}

/// Whether key-file text is PEM (starts with a `-----BEGIN` line).
pub fn is_pem(text: &str) -> bool {
    text.trim_start().starts_with("-----BEGIN ")
}

/// Reads at most `max` bytes of text from a regular file.
fn read_key_text(path: &Path, max: usize) -> Result<Zeroizing<String>, KeyFileError> {
    let io = |source: std::io::Error| KeyFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = open_nonblocking(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(KeyFileError::NotAFile {
            path: path.to_path_buf(),
            kind: file_kind(&meta),
        });
    }
    if meta.len() > max as u64 {
        return Err(KeyFileError::TooLong {
            path: path.to_path_buf(),
            max,
        });
    }
    // Room for one byte past the bound (a file that grew since fstat), so the vector
    // never reallocates and leaves a copy of key material behind.
    let mut bytes = Zeroizing::new(Vec::with_capacity(max + 2));
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() > max {
        return Err(KeyFileError::TooLong {
            path: path.to_path_buf(),
            max,
        });
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| KeyFileError::NotText {
        path: path.to_path_buf(),
    })?;
    Ok(Zeroizing::new(text.to_owned()))
}

/// Opens `path` for reading without blocking on a FIFO or a terminal (shared with the
/// CLI's reader of every input file).
#[cfg(unix)]
pub fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

#[cfg(not(unix))]
pub fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

/// What a file that is not a regular file is, for an error message.
#[cfg(unix)]
pub fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

#[cfg(not(unix))]
pub fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    if meta.is_dir() {
        "directory"
    } else {
        "special file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_keygen_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";
        std::fs::write(&path, hex).unwrap();
        assert_eq!(read_key_file(&path).unwrap().as_str(), hex);
    }

    #[test]
    fn a_key_file_records_its_algorithm_in_a_comment() {
        let hex = "00112233445566778899aabbccddeeff";
        let text = format!("# nnc key: sm4\r\n{hex}\r\n");
        let (algorithm, digits) = split_key_text(&text);
        assert_eq!((algorithm, digits.as_str()), (Some("sm4"), hex));
        // Older files and keys made elsewhere: hex alone, other comments ignored.
        let text = format!("# made by hand\n {hex} \n");
        let (algorithm, digits) = split_key_text(&text);
        assert_eq!((algorithm, digits.as_str()), (None, hex));
        // The longest file keygen writes fits the bound.
        let longest = format!("{ALGORITHM_LINE}aes256\r\n{}\r\n", "ab".repeat(32));
        assert!(longest.len() <= MAX_KEY_FILE_BYTES);
    }

    #[test]
    fn refuses_long_files_without_reading_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, "a".repeat(MAX_KEY_FILE_BYTES + 1)).unwrap();
        assert!(matches!(
            read_key_file(&path),
            Err(KeyFileError::TooLong { .. })
        ));
        // A sparse 4 GiB file (the audit's /dev/zero, as a regular file) is refused at
        // once: nothing proportional to its size is read or allocated.
        let big = File::create(dir.path().join("big")).unwrap();
        big.set_len(4 << 30).unwrap();
        let started = std::time::Instant::now();
        assert!(matches!(
            read_key_file(&dir.path().join("big")),
            Err(KeyFileError::TooLong { .. })
        ));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[cfg(unix)]
    #[test]
    fn refuses_devices_fifos_and_directories_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        for (path, kind) in [
            (PathBuf::from("/dev/zero"), "character device"),
            (PathBuf::from("/dev/urandom"), "character device"),
            (dir.path().to_path_buf(), "directory"),
        ] {
            match read_key_file(&path) {
                Err(KeyFileError::NotAFile { kind: k, .. }) => assert_eq!(k, kind),
                other => panic!("{}: {other:?}", path.display()),
            }
        }
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path and mode.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Without O_NONBLOCK this open would wait for a writer forever.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(read_key_file(&fifo).map(|_| ())));
        let result = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("reading a FIFO returns at once");
        assert!(
            matches!(result, Err(KeyFileError::NotAFile { kind: "FIFO", .. })),
            "{result:?}"
        );
    }

    #[test]
    fn errors_never_hold_the_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(&path, [0xffu8, 0xfe, b'Q', b'%', b'Z']).unwrap();
        let e = read_key_file(&path).unwrap_err();
        assert!(matches!(e, KeyFileError::NotText { .. }));
        assert!(!e.to_string().contains("Q%Z"));
    }
}
