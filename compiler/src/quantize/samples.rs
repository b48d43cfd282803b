//! Calibration samples: the loader for the directory `nnc compile --quantize int8
//! --calibration DIR` names.
//!
//! Layout of DIR:
//!
//! - A model with one input: every `*.npy` file directly in DIR is one sample. Other files
//!   (`README`, ...) are ignored. The subdirectory layout below is accepted too.
//! - A model with several inputs: one subdirectory per sample, each holding one `.npy`
//!   file per input, named by the input: `DIR/sample_000/input_ids.npy`,
//!   `DIR/sample_000/attention_mask.npy`. Other files in a sample are ignored; an extra
//!   `.npy` is an error (most likely a misnamed input).
//!
//! Input names may hold characters a file name cannot (`encoder/x:0`): the file of an
//! input may also be named with each of `/ \ : * ? " < > |` and control characters
//! replaced by `_` (`encoder_x_0.npy`). Samples are taken in byte-wise order of their file
//! or subdirectory names. Names starting with `.` are ignored (`.DS_Store`, editors'
//! files), except a sample file named exactly after an input.
//!
//! Every sample file must be a regular file: a FIFO or a device is refused by name without
//! being opened. Memory is bounded: the samples' element bytes together may not exceed
//! `max_bytes`, and each file's size is checked against what is left before a byte of it is
//! read, so a huge file costs nothing.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::Metadata;
use std::io::Read;
use std::path::{Path, PathBuf};

use nnc_formats::limits::format_size;
use nnc_formats::nn::IoInfo;
use nnc_formats::npy::{NpyError, read_npy};
use nnc_formats::tensor::{DataType, HostTensor, element_count};
use nnc_runtime::key_file::{file_kind, open_nonblocking};

/// One calibration sample: one tensor per model input, in the model's input order.
pub type Sample = Vec<HostTensor>;

/// The samples of a calibration directory, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CalibrationSet {
    pub samples: Vec<Sample>,
    /// Where each tensor of `samples` came from (same indices), for messages.
    pub files: Vec<Vec<PathBuf>>,
}

/// Why calibration samples could not be loaded. Every message names the file or directory.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error("calibration directory {} does not exist", dir.display())]
    DirMissing { dir: PathBuf },
    #[error("calibration directory {} cannot be read: {source}", dir.display())]
    DirIo {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("calibration directory {} is a {kind}, not a directory", dir.display())]
    NotADirectory { dir: PathBuf, kind: &'static str },
    #[error(
        "no .npy samples in {}: a model with one input takes one .npy file per sample",
        dir.display()
    )]
    NoSamples { dir: PathBuf },
    #[error(
        "no sample subdirectories in {}: the model has {} inputs ({}), so each sample is a \
         subdirectory holding one .npy file per input, named by input (e.g. {}){}",
        dir.display(),
        inputs.len(),
        quoted_list(inputs),
        example_sample_file(dir, inputs),
        loose_npy_note(*loose_npy)
    )]
    NoSampleDirs {
        dir: PathBuf,
        inputs: Vec<String>,
        /// `.npy` files found directly in `dir` (the single-input layout).
        loose_npy: usize,
    },
    #[error(
        "calibration directory {} mixes layouts: it holds .npy files ({}) and subdirectories \
         ({}); use one .npy file per sample (one-input models) or one subdirectory per sample",
        dir.display(),
        npy_file.display(),
        subdir.display()
    )]
    MixedLayout {
        dir: PathBuf,
        npy_file: PathBuf,
        subdir: PathBuf,
    },
    #[error("sample {} has no file for input '{input}' (expected {expected})", sample.display())]
    MissingInputFile {
        sample: PathBuf,
        input: String,
        /// The file name(s) that would be taken.
        expected: String,
    },
    #[error(
        "sample {} has two files for input '{input}': {} and {}; keep one",
        sample.display(),
        first.display(),
        second.display()
    )]
    DuplicateInputFile {
        sample: PathBuf,
        input: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error(
        "{} could be the file of several inputs ({}); name each file exactly after its input",
        path.display(),
        quoted_list(inputs)
    )]
    AmbiguousFile { path: PathBuf, inputs: Vec<String> },
    #[error(
        "{} does not name a model input (the inputs are {})",
        path.display(),
        quoted_list(inputs)
    )]
    ExtraFile { path: PathBuf, inputs: Vec<String> },
    #[error("{} (input '{input}'): {source}", path.display())]
    Io {
        path: PathBuf,
        input: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{} (input '{input}') is a {kind}, not a regular file", path.display())]
    NotARegularFile {
        path: PathBuf,
        input: String,
        kind: &'static str,
    },
    #[error("{} (input '{input}'): {source}", path.display())]
    Malformed {
        path: PathBuf,
        input: String,
        #[source]
        source: NpyError,
    },
    #[error(
        "{} is {found} but input '{input}' is {expected}{}",
        path.display(),
        dtype_hint(*found, *expected)
    )]
    WrongDtype {
        path: PathBuf,
        input: String,
        found: DataType,
        expected: DataType,
    },
    #[error(
        "{} has shape {} but input '{input}' has shape {} (? is any size)",
        path.display(),
        shape_text(found),
        dims_text(expected)
    )]
    WrongShape {
        path: PathBuf,
        input: String,
        found: Vec<usize>,
        expected: Vec<u32>,
    },
    #[error(
        "{} (input '{input}') holds {count} NaN or infinite value(s), the first ({first_value}) \
         at flat index {first_index}; calibration needs finite values",
        path.display()
    )]
    NonFinite {
        path: PathBuf,
        input: String,
        count: usize,
        first_index: usize,
        first_value: &'static str,
    },
    #[error(
        "{} (input '{input}'): a {dtype} tensor of shape {} holds {actual} bytes, not the \
         {expected:?} its shape needs",
        path.display(),
        shape_text(shape)
    )]
    InconsistentTensor {
        path: PathBuf,
        input: String,
        dtype: DataType,
        shape: Vec<usize>,
        /// `None` when the shape's size overflows.
        expected: Option<usize>,
        actual: usize,
    },
    #[error(
        "{} takes the calibration samples beyond their limit of {} ({} of earlier samples \
         fit); raise it with --limit calibration=SIZE, or use fewer samples",
        path.display(),
        format_size(*limit),
        format_size(*loaded)
    )]
    LimitExceeded {
        path: PathBuf,
        limit: u64,
        /// Element bytes of the samples before `path`.
        loaded: u64,
    },
    #[error("the model has no inputs, so there is nothing to calibrate")]
    NoModelInputs,
}

impl CalibrationError {
    /// Exit-code class: true when the problem is a missing/unreadable file or directory
    /// (the CLI exits 66), false for bad content (exit 65). Samples that are not there
    /// (an empty directory, a sample without the file of an input) count as missing files,
    /// as a missing `--input-dir` file does; see also [`CalibrationError::is_limit`].
    pub fn is_io(&self) -> bool {
        use CalibrationError as E;
        matches!(
            self,
            E::DirMissing { .. }
                | E::DirIo { .. }
                | E::NotADirectory { .. }
                | E::NoSamples { .. }
                | E::NoSampleDirs { .. }
                | E::MissingInputFile { .. }
                | E::Io { .. }
                | E::NotARegularFile { .. }
        )
    }

    /// True when the samples are beyond the byte limit (docs/CLI.md's exit 4, `limit`).
    pub fn is_limit(&self) -> bool {
        matches!(self, CalibrationError::LimitExceeded { .. })
    }
}

/// Loads the calibration samples of `dir` (layout in the module documentation) for a model
/// with `inputs`, checking every tensor with [`check_sample_tensor`] and their total element
/// bytes against `max_bytes`.
pub fn load_calibration_dir(
    dir: &Path,
    inputs: &[IoInfo],
    max_bytes: u64,
) -> Result<CalibrationSet, CalibrationError> {
    if inputs.is_empty() {
        return Err(CalibrationError::NoModelInputs);
    }
    let meta = std::fs::metadata(dir).map_err(|source| dir_error(dir, source))?;
    if !meta.is_dir() {
        return Err(CalibrationError::NotADirectory {
            dir: dir.to_path_buf(),
            kind: kind_of(&meta),
        });
    }

    let mut npy_files = Vec::new();
    let mut subdirs = Vec::new();
    for (name, path) in list_dir(dir)? {
        if is_hidden(&name) {
            continue;
        }
        // `metadata` stats without opening, so a FIFO here cannot block.
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => subdirs.push(path),
            // A broken .npy entry is reported when it is loaded.
            _ if is_npy(&path) => npy_files.push(path),
            _ => {}
        }
    }
    if let (Some(npy_file), Some(subdir)) = (npy_files.first(), subdirs.first()) {
        return Err(CalibrationError::MixedLayout {
            dir: dir.to_path_buf(),
            npy_file: npy_file.clone(),
            subdir: subdir.clone(),
        });
    }

    let layout: Vec<Vec<PathBuf>> = if inputs.len() == 1 && !npy_files.is_empty() {
        npy_files.into_iter().map(|p| vec![p]).collect()
    } else if subdirs.is_empty() {
        return Err(if inputs.len() == 1 {
            CalibrationError::NoSamples {
                dir: dir.to_path_buf(),
            }
        } else {
            CalibrationError::NoSampleDirs {
                dir: dir.to_path_buf(),
                inputs: inputs.iter().map(|i| i.name.clone()).collect(),
                loose_npy: npy_files.len(),
            }
        });
    } else {
        // Every sample's files are matched before any is read: a naming mistake in the
        // last sample is reported before gigabytes of the first ones are loaded.
        subdirs
            .iter()
            .map(|s| sample_files(s, inputs))
            .collect::<Result<_, _>>()?
    };

    let mut budget = Budget {
        limit: max_bytes,
        used: 0,
    };
    let mut set = CalibrationSet::default();
    for files in layout {
        let sample = files
            .iter()
            .zip(inputs)
            .map(|(path, input)| load_sample_file(path, input, &mut budget))
            .collect::<Result<Sample, _>>()?;
        set.samples.push(sample);
        set.files.push(files);
    }
    Ok(set)
}

/// Checks one loaded tensor against the input it feeds (used also by the in-memory API):
/// dtype (exactly the declared one; float32 also for a float16 input, which the runtime
/// converts), shape (IoInfo dims of 0 are dynamic: any size), finite values. `file` names
/// the tensor in messages.
pub fn check_sample_tensor(
    t: &HostTensor,
    input: &IoInfo,
    file: &Path,
) -> Result<(), CalibrationError> {
    let accepted =
        t.dtype == input.dtype || (input.dtype == DataType::F16 && t.dtype == DataType::F32);
    if !accepted {
        return Err(CalibrationError::WrongDtype {
            path: file.to_path_buf(),
            input: input.name.clone(),
            found: t.dtype,
            expected: input.dtype,
        });
    }
    let shape_fits = t.shape.len() == input.dims.len()
        && t.shape
            .iter()
            .zip(&input.dims)
            .all(|(&n, &d)| d == 0 || usize::try_from(d).is_ok_and(|d| d == n));
    if !shape_fits {
        return Err(CalibrationError::WrongShape {
            path: file.to_path_buf(),
            input: input.name.clone(),
            found: t.shape.clone(),
            expected: input.dims.clone(),
        });
    }
    // The fields are public: a tensor built by hand may disagree with its shape.
    let expected = element_count(&t.shape).and_then(|n| n.checked_mul(t.dtype.size()));
    if expected != Some(t.data.len()) {
        return Err(CalibrationError::InconsistentTensor {
            path: file.to_path_buf(),
            input: input.name.clone(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            expected,
            actual: t.data.len(),
        });
    }
    if let Some(bad) = non_finite(t) {
        return Err(CalibrationError::NonFinite {
            path: file.to_path_buf(),
            input: input.name.clone(),
            count: bad.count,
            first_index: bad.first_index,
            first_value: bad.first_value,
        });
    }
    Ok(())
}

/// Element bytes loaded so far against the limit.
struct Budget {
    limit: u64,
    used: u64,
}

impl Budget {
    /// Refuses `bytes` more (`path`'s share) if they would pass the limit.
    fn check(&self, path: &Path, bytes: u64) -> Result<(), CalibrationError> {
        if self.used.saturating_add(bytes) > self.limit {
            return Err(CalibrationError::LimitExceeded {
                path: path.to_path_buf(),
                limit: self.limit,
                loaded: self.used,
            });
        }
        Ok(())
    }

    /// Refuses a file whose data cannot fit what is left, from its size alone: all of it
    /// but a generous header could be data. Reading an admitted file thus holds at most
    /// `HEADER_ALLOWANCE` bytes beyond the limit; the exact count is checked once parsed.
    fn check_file(&self, path: &Path, file_len: u64) -> Result<(), CalibrationError> {
        self.check(path, file_len.saturating_sub(HEADER_ALLOWANCE))
    }
}

/// Header bytes a `.npy` file may have beyond the limit (numpy writes 64 or 128; `np.load`
/// refuses more than 10000 by default).
const HEADER_ALLOWANCE: u64 = 64 << 10;

/// Reads one sample file for `input`: refused unless a regular file whose size fits the
/// budget, then parsed and checked.
fn load_sample_file(
    path: &Path,
    input: &IoInfo,
    budget: &mut Budget,
) -> Result<HostTensor, CalibrationError> {
    let io = |source: std::io::Error| CalibrationError::Io {
        path: path.to_path_buf(),
        input: input.name.clone(),
        source,
    };
    let not_a_file = |meta: &Metadata| CalibrationError::NotARegularFile {
        path: path.to_path_buf(),
        input: input.name.clone(),
        kind: kind_of(meta),
    };
    // Stat before opening: a FIFO or device is refused without being touched.
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(not_a_file(&meta));
    }
    budget.check_file(path, meta.len())?;
    // Non-blocking, and checked again on the handle: the path may have been replaced by a
    // FIFO since the stat.
    let file = open_nonblocking(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(not_a_file(&meta));
    }
    let len = meta.len();
    budget.check_file(path, len)?;
    let mut bytes = Vec::new();
    let capacity = usize::try_from(len).unwrap_or(usize::MAX);
    bytes
        .try_reserve_exact(capacity)
        .map_err(|_| io(std::io::ErrorKind::OutOfMemory.into()))?;
    // Bounded by the size just checked, should the file grow meanwhile.
    file.take(len).read_to_end(&mut bytes).map_err(io)?;
    let t = read_npy(&bytes).map_err(|source| CalibrationError::Malformed {
        path: path.to_path_buf(),
        input: input.name.clone(),
        source,
    })?;
    drop(bytes);
    check_sample_tensor(&t, input, path)?;
    let data_len = u64::try_from(t.data.len()).unwrap_or(u64::MAX);
    budget.check(path, data_len)?;
    budget.used += data_len;
    Ok(t)
}

/// The file of each input in sample directory `sample`, in input order.
fn sample_files(sample: &Path, inputs: &[IoInfo]) -> Result<Vec<PathBuf>, CalibrationError> {
    let mut by_stem: BTreeMap<OsString, PathBuf> = BTreeMap::new();
    for (_, path) in list_dir(sample)? {
        if is_npy(&path)
            && let Some(stem) = path.file_stem()
        {
            by_stem.insert(stem.to_os_string(), path);
        }
    }

    let mut chosen = Vec::with_capacity(inputs.len());
    // Which inputs took each file, to catch one file serving two inputs.
    let mut claimed: BTreeMap<&OsStr, Vec<&str>> = BTreeMap::new();
    for input in inputs {
        let safe = safe_file_stem(&input.name);
        let mut found: Vec<(&OsStr, &PathBuf)> = Vec::new();
        for stem in [input.name.as_str(), safe.as_str()] {
            if let Some((key, path)) = by_stem.get_key_value(OsStr::new(stem))
                && !found.iter().any(|(k, _)| *k == key.as_os_str())
            {
                found.push((key.as_os_str(), path));
            }
        }
        match found.as_slice() {
            [] => {
                return Err(CalibrationError::MissingInputFile {
                    sample: sample.to_path_buf(),
                    input: input.name.clone(),
                    expected: expected_file_names(&input.name),
                });
            }
            [(key, path)] => {
                claimed.entry(*key).or_default().push(&input.name);
                chosen.push((*path).clone());
            }
            [(_, first), (_, second), ..] => {
                return Err(CalibrationError::DuplicateInputFile {
                    sample: sample.to_path_buf(),
                    input: input.name.clone(),
                    first: (*first).clone(),
                    second: (*second).clone(),
                });
            }
        }
    }
    for (stem, names) in &claimed {
        if names.len() > 1 {
            return Err(CalibrationError::AmbiguousFile {
                path: by_stem[*stem].clone(),
                inputs: names.iter().map(|n| n.to_string()).collect(),
            });
        }
    }
    if let Some((_, path)) = by_stem
        .iter()
        .find(|(stem, _)| !claimed.contains_key(stem.as_os_str()) && !is_hidden(stem))
    {
        return Err(CalibrationError::ExtraFile {
            path: path.clone(),
            inputs: inputs.iter().map(|i| i.name.clone()).collect(),
        });
    }
    Ok(chosen)
}

/// The entries of `dir` as (file name, path), sorted byte-wise by name.
fn list_dir(dir: &Path) -> Result<Vec<(OsString, PathBuf)>, CalibrationError> {
    let err = |source| dir_error(dir, source);
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(err)? {
        let entry = entry.map_err(err)?;
        entries.push((entry.file_name(), entry.path()));
    }
    // OsString orders by bytes on Unix.
    entries.sort();
    Ok(entries)
}

fn dir_error(dir: &Path, source: std::io::Error) -> CalibrationError {
    if source.kind() == std::io::ErrorKind::NotFound {
        CalibrationError::DirMissing {
            dir: dir.to_path_buf(),
        }
    } else {
        CalibrationError::DirIo {
            dir: dir.to_path_buf(),
            source,
        }
    }
}

fn is_hidden(name: &OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
}

fn is_npy(path: &Path) -> bool {
    path.extension() == Some(OsStr::new("npy"))
}

fn kind_of(meta: &Metadata) -> &'static str {
    if meta.is_file() {
        "regular file"
    } else {
        file_kind(meta)
    }
}

/// `name` with the characters file systems refuse (or that would make a path) replaced by `_`.
fn safe_file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if matches!(c, '/' | '\\' | ':' | '*' | '?' | '"' | '<' | '>' | '|') || c.is_control() {
                '_'
            } else {
                c
            }
        })
        .collect()
}

fn expected_file_names(name: &str) -> String {
    let safe = safe_file_stem(name);
    if safe == name {
        format!("{name}.npy")
    } else if name.contains(['/', '\0']) {
        // No file can have the exact name.
        format!("{safe}.npy")
    } else {
        format!("{name}.npy or {safe}.npy")
    }
}

fn example_sample_file(dir: &Path, inputs: &[String]) -> String {
    let stem = inputs
        .first()
        .map_or_else(String::new, |n| safe_file_stem(n));
    dir.join("sample_000")
        .join(format!("{stem}.npy"))
        .display()
        .to_string()
}

fn loose_npy_note(loose_npy: usize) -> String {
    match loose_npy {
        0 => String::new(),
        n => format!("; the {n} .npy file(s) directly in it are the one-input layout"),
    }
}

fn quoted_list(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn shape_text(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    format!("[{}]", dims.join(", "))
}

fn dims_text(dims: &[u32]) -> String {
    let dims: Vec<String> = dims
        .iter()
        .map(|&d| match d {
            0 => "?".to_string(),
            d => d.to_string(),
        })
        .collect();
    format!("[{}]", dims.join(", "))
}

fn is_float(t: DataType) -> bool {
    matches!(t, DataType::F16 | DataType::F32 | DataType::F64)
}

fn is_integer(t: DataType) -> bool {
    !is_float(t) && t != DataType::Bool
}

fn dtype_hint(found: DataType, expected: DataType) -> String {
    let mut hint = String::new();
    if expected == DataType::F16 {
        hint.push_str(" (float32 files are accepted too)");
    }
    // Only within a kind: floats cast to token ids would be a silent mistake.
    if (is_float(found) && is_float(expected)) || (is_integer(found) && is_integer(expected)) {
        hint.push_str(&format!("; convert it with numpy: a.astype(np.{expected})"));
    }
    hint
}

struct NonFinite {
    count: usize,
    first_index: usize,
    first_value: &'static str,
}

/// The NaN and infinite elements of a float tensor, if any.
fn non_finite(t: &HostTensor) -> Option<NonFinite> {
    fn scan(values: impl Iterator<Item = f64>) -> Option<NonFinite> {
        let mut found: Option<NonFinite> = None;
        for (index, v) in values.enumerate() {
            if v.is_finite() {
                continue;
            }
            match &mut found {
                Some(f) => f.count += 1,
                None => {
                    found = Some(NonFinite {
                        count: 1,
                        first_index: index,
                        first_value: if v.is_nan() {
                            "NaN"
                        } else if v > 0.0 {
                            "inf"
                        } else {
                            "-inf"
                        },
                    });
                }
            }
        }
        found
    }
    let d = &t.data;
    match t.dtype {
        DataType::F32 => scan(
            d.chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        ),
        DataType::F64 => scan(d.chunks_exact(8).map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            f64::from_le_bytes(b)
        })),
        DataType::F16 => scan(
            d.chunks_exact(2)
                .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64()),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
