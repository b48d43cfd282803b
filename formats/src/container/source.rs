//! Where a `.nnc` file's bytes are read from: memory, or a file read at offsets into
//! buffers the reader owns.
//!
//! A file is never memory-mapped for reading: a mapping of a file that another process
//! truncates faults (SIGBUS) at the first access past the new end, `MAP_PRIVATE` or not.
//! A positional read returns short instead, which becomes [`ContainerError::Shrank`]
//! naming what was being read.

use std::fs::File;

use super::ContainerError;
use crate::cache::ReadAt;

/// The bytes of a `.nnc` file, read at offsets.
pub trait Source: Send + Sync {
    /// The length of the file when it was opened; every offset is checked against it.
    fn len(&self) -> u64;

    /// True for an empty source.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the bytes at `offset`; `what` names them for the error when the
    /// source has become shorter since it was opened.
    fn read_at(
        &self,
        offset: u64,
        buf: &mut [u8],
        what: &dyn Fn() -> String,
    ) -> Result<(), ContainerError>;

    /// All of the bytes, when they are held in memory (read without a copy).
    fn in_memory(&self) -> Option<&[u8]> {
        None
    }
}

impl Source for [u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn read_at(
        &self,
        offset: u64,
        buf: &mut [u8],
        what: &dyn Fn() -> String,
    ) -> Result<(), ContainerError> {
        let bytes = usize::try_from(offset)
            .ok()
            .and_then(|start| self.get(start..start.checked_add(buf.len())?))
            .ok_or_else(|| ContainerError::Truncated {
                what: what(),
                needed: offset.saturating_add(buf.len() as u64),
                available: Source::len(self),
            })?;
        buf.copy_from_slice(bytes);
        Ok(())
    }

    fn in_memory(&self) -> Option<&[u8]> {
        Some(self)
    }
}

impl Source for Vec<u8> {
    fn len(&self) -> u64 {
        Source::len(self.as_slice())
    }

    fn read_at(
        &self,
        offset: u64,
        buf: &mut [u8],
        what: &dyn Fn() -> String,
    ) -> Result<(), ContainerError> {
        self.as_slice().read_at(offset, buf, what)
    }

    fn in_memory(&self) -> Option<&[u8]> {
        Some(self)
    }
}

/// A `.nnc` file on disk, read with positional reads (`pread`): any number of threads
/// read it at once, and a file truncated by another process yields an error.
#[derive(Debug)]
pub struct FileSource {
    file: File,
    len: u64,
}

impl FileSource {
    /// Reads `file`, whose length is taken now. Only regular files: a FIFO or a device
    /// has no length to check offsets against.
    pub fn new(file: File) -> std::io::Result<FileSource> {
        let metadata = file.metadata()?;
        if !metadata.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(FileSource {
            file,
            len: metadata.len(),
        })
    }

    /// Opens the file at `path` for reading.
    pub fn open(path: &std::path::Path) -> std::io::Result<FileSource> {
        FileSource::new(File::open(path)?)
    }
}

impl Source for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(
        &self,
        offset: u64,
        buf: &mut [u8],
        what: &dyn Fn() -> String,
    ) -> Result<(), ContainerError> {
        let length = buf.len() as u64;
        if offset.checked_add(length).is_none_or(|end| end > self.len) {
            return Err(ContainerError::Truncated {
                what: what(),
                needed: offset.saturating_add(length),
                available: self.len,
            });
        }
        match ReadAt::read_exact_at(&self.file, buf, offset) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Err(ContainerError::Shrank {
                    what: what(),
                    offset,
                    length,
                    opened: self.len,
                    now: ReadAt::byte_len(&self.file).unwrap_or(offset),
                })
            }
            Err(e) => Err(ContainerError::Read {
                what: what(),
                offset,
                message: e.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_shrinks_after_opening_is_an_error_naming_the_read() {
        let mut tmp = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut tmp, &[7u8; 4096]).unwrap();
        let source = FileSource::open(tmp.path()).unwrap();
        assert_eq!(Source::len(&source), 4096);
        let mut buf = [0u8; 100];
        source.read_at(1000, &mut buf, &|| "x".into()).unwrap();
        assert_eq!(buf, [7u8; 100]);
        tmp.as_file().set_len(1050).unwrap();
        let err = source
            .read_at(1000, &mut buf, &|| "weight field 3".into())
            .unwrap_err();
        assert!(err.is_integrity(), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("truncated while being read: weight field 3 at offset 1000")
                && text.contains("1050 bytes; 4096 when it was opened"),
            "{text}"
        );
        // Beyond the length at opening is the file's own truncation, not a change.
        let err = source.read_at(4090, &mut buf, &|| "y".into()).unwrap_err();
        assert!(matches!(err, ContainerError::Truncated { .. }), "{err}");
    }

    #[test]
    fn only_regular_files_are_sources() {
        let dir = tempfile::tempdir().unwrap();
        assert!(FileSource::open(dir.path()).is_err());
    }
}
