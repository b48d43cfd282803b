//! Reading and writing numpy `.npy` files (format versions 1.0, 2.0 and 3.0).
//!
//! A file is: the magic `\x93NUMPY`, a major and minor version byte, the header length
//! (u16 little-endian in 1.0, u32 in 2.0/3.0), the header — a Python dict literal with the
//! keys `descr`, `fortran_order` and `shape` — and the raw element bytes.
//!
//! Reading accepts every [`DataType`] in either byte order (big-endian data is swapped to
//! little-endian) and Fortran-ordered arrays, which are transposed to row-major: numpy
//! writes `fortran_order: True` for any column-major array (`np.save(f, x.T)`), so refusing
//! them would refuse ordinary files. Structured dtypes, objects and strings are refused.
//!
//! Writing produces what `np.save` produces for the same array: version 1.0 (2.0 only if
//! the header would not fit), `descr` in little-endian form, and a header padded with
//! spaces so that the data starts on a 64-byte boundary.

use std::path::{Path, PathBuf};

use crate::tensor::{DataType, HostTensor, element_count};

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// numpy aligns the start of the data to this many bytes.
const ALIGN: usize = 64;
/// Digits numpy reserves in the header for the first dimension.
const GROWTH_DIGITS: usize = 21;
/// Nesting depth allowed in the header literal; real headers use at most 2.
const MAX_DEPTH: usize = 16;

/// Why a `.npy` file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("not a .npy file: it does not start with the magic \\x93NUMPY")]
    BadMagic,
    #[error("truncated .npy file: {len} bytes end inside the {len_field_bytes}-byte preamble")]
    TruncatedPreamble { len: usize, len_field_bytes: usize },
    #[error("unsupported .npy format version {major}.{minor} (supported: 1.0, 2.0, 3.0)")]
    UnsupportedVersion { major: u8, minor: u8 },
    #[error(
        "header length {header_len} extends beyond the end of the file ({available} bytes follow the preamble)"
    )]
    HeaderBeyondFile { header_len: usize, available: usize },
    #[error("header is not valid {encoding} text")]
    HeaderEncoding { encoding: &'static str },
    #[error("header dict syntax error at byte {at}: {message} (header: {header:?})")]
    HeaderSyntax {
        at: usize,
        message: String,
        header: String,
    },
    #[error("header has no {0:?} key")]
    MissingKey(&'static str),
    #[error("header has the key {0:?} more than once")]
    DuplicateKey(String),
    #[error("header has the unexpected key {0:?}")]
    UnknownKey(String),
    #[error("header value of {key:?} must be {expected}")]
    BadValue {
        key: &'static str,
        expected: &'static str,
    },
    #[error(
        "unsupported dtype descr {descr} (supported: f2 f4 f8 i1 u1 i2 u2 i4 u4 i8 u8 b1, byte order < or >)"
    )]
    UnknownDescr { descr: String },
    #[error("shape {shape:?} is too large")]
    ShapeOverflow { shape: Vec<usize> },
    #[error(
        "data size mismatch: {dtype} shape {shape:?} needs {expected} bytes but the file holds {actual}"
    )]
    SizeMismatch {
        dtype: DataType,
        shape: Vec<usize>,
        expected: usize,
        actual: usize,
    },
    #[error("bool element {index} has byte value {value} (expected 0 or 1)")]
    InvalidBool { index: usize, value: u8 },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Reads a `.npy` file from disk.
pub fn read_npy_file(path: impl AsRef<Path>) -> Result<HostTensor, NpyError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    read_npy(&bytes)
}

/// Writes a tensor to a `.npy` file on disk.
pub fn write_npy_file(path: impl AsRef<Path>, t: &HostTensor) -> Result<(), NpyError> {
    let path = path.as_ref();
    std::fs::write(path, write_npy(t)).map_err(|source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses the bytes of a `.npy` file.
pub fn read_npy(bytes: &[u8]) -> Result<HostTensor, NpyError> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(NpyError::BadMagic);
    }
    let (major, minor) = match bytes.get(6..8) {
        Some(v) => (v[0], v[1]),
        None => {
            return Err(NpyError::TruncatedPreamble {
                len: bytes.len(),
                len_field_bytes: 8,
            });
        }
    };
    let len_field_bytes = match (major, minor) {
        (1, 0) => 2,
        (2, 0) | (3, 0) => 4,
        _ => return Err(NpyError::UnsupportedVersion { major, minor }),
    };
    let preamble = 8 + len_field_bytes;
    let Some(len_field) = bytes.get(8..preamble) else {
        return Err(NpyError::TruncatedPreamble {
            len: bytes.len(),
            len_field_bytes: preamble,
        });
    };
    let header_len = len_field
        .iter()
        .rev()
        .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
    let available = bytes.len() - preamble;
    if header_len > available {
        return Err(NpyError::HeaderBeyondFile {
            header_len,
            available,
        });
    }
    let header_bytes = &bytes[preamble..preamble + header_len];
    let data = &bytes[preamble + header_len..];

    // 1.0 and 2.0 headers are latin-1, 3.0 headers UTF-8.
    let header: String = if major == 3 {
        std::str::from_utf8(header_bytes)
            .map_err(|_| NpyError::HeaderEncoding { encoding: "UTF-8" })?
            .to_string()
    } else {
        header_bytes.iter().map(|&b| char::from(b)).collect()
    };
    let header = parse_header(&header)?;
    let (dtype, big_endian) = parse_descr(&header.descr)?;

    let shape = header.shape;
    let expected = element_count(&shape)
        .and_then(|n| n.checked_mul(dtype.size()))
        .ok_or_else(|| NpyError::ShapeOverflow {
            shape: shape.clone(),
        })?;
    if data.len() != expected {
        return Err(NpyError::SizeMismatch {
            dtype,
            shape,
            expected,
            actual: data.len(),
        });
    }

    let mut out = data.to_vec();
    if big_endian {
        for elem in out.chunks_exact_mut(dtype.size()) {
            elem.reverse();
        }
    }
    if dtype == DataType::Bool
        && let Some((index, &value)) = out.iter().enumerate().find(|&(_, &b)| b > 1)
    {
        return Err(NpyError::InvalidBool { index, value });
    }
    // Non-empty data implies every stride fits in usize (each is at most the count).
    if header.fortran_order && shape.len() > 1 && !out.is_empty() {
        out = fortran_to_c(&out, &shape, dtype.size());
    }
    // The size was checked above.
    Ok(HostTensor {
        dtype,
        shape,
        data: out,
    })
}

/// Reorders column-major element bytes of `shape` into row-major order.
fn fortran_to_c(data: &[u8], shape: &[usize], elem: usize) -> Vec<u8> {
    let rank = shape.len();
    // Column-major strides, in elements: the first axis varies fastest.
    let mut fstride = vec![1usize; rank];
    for k in 1..rank {
        fstride[k] = fstride[k - 1] * shape[k - 1];
    }
    let mut out = Vec::with_capacity(data.len());
    let count = data.len() / elem;
    let mut index = vec![0usize; rank];
    let mut src = 0usize;
    for _ in 0..count {
        out.extend_from_slice(&data[src * elem..(src + 1) * elem]);
        // Advance the row-major odometer (last axis fastest), tracking the source offset.
        for k in (0..rank).rev() {
            index[k] += 1;
            src += fstride[k];
            if index[k] < shape[k] {
                break;
            }
            src -= fstride[k] * shape[k];
            index[k] = 0;
        }
    }
    out
}

/// Maps a descr string to the element type and whether the data is big-endian.
fn parse_descr(descr: &str) -> Result<(DataType, bool), NpyError> {
    let unknown = || NpyError::UnknownDescr {
        descr: format!("{descr:?}"),
    };
    let mut chars = descr.chars();
    let order = chars.next().ok_or_else(unknown)?;
    let dtype = match chars.as_str() {
        "f2" => DataType::F16,
        "f4" => DataType::F32,
        "f8" => DataType::F64,
        "i1" => DataType::I8,
        "u1" => DataType::U8,
        "i2" => DataType::I16,
        "u2" => DataType::U16,
        "i4" => DataType::I32,
        "u4" => DataType::U32,
        "i8" => DataType::I64,
        "u8" => DataType::U64,
        "b1" => DataType::Bool,
        _ => return Err(unknown()),
    };
    match order {
        '<' => Ok((dtype, false)),
        '>' => Ok((dtype, dtype.size() > 1)),
        // "Not applicable" and "native" orders are unambiguous only for single bytes.
        '|' | '=' if dtype.size() == 1 => Ok((dtype, false)),
        _ => Err(unknown()),
    }
}

/// The descr numpy writes for a little-endian array of `dtype`.
fn descr_of(dtype: DataType) -> &'static str {
    match dtype {
        DataType::F16 => "<f2",
        DataType::F32 => "<f4",
        DataType::F64 => "<f8",
        DataType::I8 => "|i1",
        DataType::U8 => "|u1",
        DataType::I16 => "<i2",
        DataType::U16 => "<u2",
        DataType::I32 => "<i4",
        DataType::U32 => "<u4",
        DataType::I64 => "<i8",
        DataType::U64 => "<u8",
        DataType::Bool => "|b1",
        // Written widened (see `write_npy`): NumPy has no such types ('<V1' to it).
        DataType::Bf16
        | DataType::F8E4M3Fn
        | DataType::F8E4M3Fnuz
        | DataType::F8E5M2
        | DataType::F8E5M2Fnuz
        | DataType::F4E2M1Fn => "<f4",
        DataType::I4 | DataType::I2 => "|i1",
        DataType::U4 | DataType::U2 => "|u1",
    }
}

/// Serializes a tensor as a `.npy` file, byte-identical to what `np.save` writes.
///
/// NumPy has no bfloat16, float8, float4 or sub-byte integer types (`ml_dtypes` saves
/// them as opaque `<V1`/`<V2` records that no reader can interpret), so those tensors
/// are written widened, exactly: as float32, int8 or uint8.
pub fn write_npy(t: &HostTensor) -> Vec<u8> {
    let widened;
    let t = if t.dtype.float_format().is_some() || t.dtype.narrow_int().is_some() {
        widened = t.widened();
        &widened
    } else {
        t
    };
    let shape = match t.shape.as_slice() {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        dims => {
            let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    };
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr_of(t.dtype)
    );
    // numpy leaves room for the first axis to grow to 21 digits, so that appending along
    // it can rewrite the header in place; matching it keeps the output byte-identical.
    if let Some(first) = t.shape.first() {
        let digits = first.to_string().len();
        dict.extend(std::iter::repeat_n(
            ' ',
            GROWTH_DIGITS.saturating_sub(digits),
        ));
    }
    // numpy pads with 1..=ALIGN spaces (a full block when already aligned), then '\n'.
    let header_len = |preamble: usize| {
        let unpadded = preamble + dict.len() + 1;
        dict.len() + 1 + (ALIGN - unpadded % ALIGN)
    };
    let (version, preamble) = if header_len(10) <= usize::from(u16::MAX) {
        (1u8, 10)
    } else {
        (2u8, 12)
    };
    let header_len = header_len(preamble);
    let mut out = Vec::with_capacity(preamble + header_len + t.data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        // Fits: checked against u16::MAX above.
        out.extend_from_slice(&(header_len as u16).to_le_bytes());
    } else {
        // A header beyond 4 GiB would need a shape with hundreds of millions of dims.
        out.extend_from_slice(&u32::try_from(header_len).unwrap_or(u32::MAX).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(preamble + header_len - 1, b' ');
    out.push(b'\n');
    out.extend_from_slice(&t.data);
    out
}

/// The three header entries.
struct Header {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// A value of the tiny Python-literal subset a header uses.
#[derive(Debug)]
enum Value {
    Str(String),
    Bool(bool),
    Int(i128),
    Seq(Vec<Value>),
    None,
}

fn parse_header(text: &str) -> Result<Header, NpyError> {
    let mut p = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    let entries = p.dict()?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    for (key, value) in entries {
        let slot_taken = match key.as_str() {
            "descr" => descr.replace(value).is_some(),
            "fortran_order" => fortran.replace(value).is_some(),
            "shape" => shape.replace(value).is_some(),
            _ => return Err(NpyError::UnknownKey(key)),
        };
        if slot_taken {
            return Err(NpyError::DuplicateKey(key));
        }
    }
    let descr = match descr.ok_or(NpyError::MissingKey("descr"))? {
        Value::Str(s) => s,
        Value::Seq(_) => {
            return Err(NpyError::UnknownDescr {
                descr: "a structured dtype".to_string(),
            });
        }
        _ => {
            return Err(NpyError::BadValue {
                key: "descr",
                expected: "a string",
            });
        }
    };
    let fortran_order = match fortran.ok_or(NpyError::MissingKey("fortran_order"))? {
        Value::Bool(b) => b,
        _ => {
            return Err(NpyError::BadValue {
                key: "fortran_order",
                expected: "True or False",
            });
        }
    };
    let bad_shape = NpyError::BadValue {
        key: "shape",
        expected: "a tuple of non-negative integers",
    };
    let shape = match shape.ok_or(NpyError::MissingKey("shape"))? {
        Value::Seq(items) => items
            .into_iter()
            .map(|v| match v {
                Value::Int(n) => usize::try_from(n).ok(),
                _ => None,
            })
            .collect::<Option<Vec<usize>>>()
            .ok_or(bad_shape)?,
        _ => return Err(bad_shape),
    };
    Ok(Header {
        descr,
        fortran_order,
        shape,
    })
}

/// A recursive-descent parser over the header text.
struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn error(&self, message: impl Into<String>) -> NpyError {
        NpyError::HeaderSyntax {
            at: self.pos,
            message: message.into(),
            header: self.text.trim_end().chars().take(200).collect(),
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r' | b'\0') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.bytes.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), NpyError> {
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(format!("expected '{}'", char::from(c))))
        }
    }

    /// `{ key: value, ... }` followed by nothing but whitespace (numpy pads with spaces).
    fn dict(&mut self) -> Result<Vec<(String, Value)>, NpyError> {
        self.expect(b'{')?;
        let mut entries = Vec::new();
        loop {
            if self.peek() == Some(b'}') {
                self.pos += 1;
                break;
            }
            let key = match self.value(1)? {
                Value::Str(s) => s,
                _ => return Err(self.error("dict keys must be strings")),
            };
            self.expect(b':')?;
            let value = self.value(1)?;
            entries.push((key, value));
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
        if self.peek().is_some() {
            return Err(self.error("unexpected text after the dict"));
        }
        Ok(entries)
    }

    fn value(&mut self, depth: usize) -> Result<Value, NpyError> {
        if depth > MAX_DEPTH {
            return Err(self.error("nesting too deep"));
        }
        match self.peek() {
            Some(q @ (b'\'' | b'"')) => self.string(q),
            Some(open @ (b'(' | b'[')) => {
                self.pos += 1;
                let close = if open == b'(' { b')' } else { b']' };
                let mut items = Vec::new();
                let mut saw_comma = false;
                loop {
                    if self.peek() == Some(close) {
                        self.pos += 1;
                        break;
                    }
                    items.push(self.value(depth + 1)?);
                    match self.peek() {
                        Some(b',') => {
                            self.pos += 1;
                            saw_comma = true;
                        }
                        Some(c) if c == close => {}
                        _ => return Err(self.error("expected ',' or a closing bracket")),
                    }
                }
                // `(x)` is just a parenthesized x in Python, not a tuple.
                if open == b'(' && items.len() == 1 && !saw_comma {
                    return Ok(items.pop().unwrap_or(Value::None));
                }
                Ok(Value::Seq(items))
            }
            Some(b'0'..=b'9' | b'-' | b'+') => self.int(),
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.pos;
                while self
                    .bytes
                    .get(self.pos)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                {
                    self.pos += 1;
                }
                match &self.text[start..self.pos] {
                    "True" => Ok(Value::Bool(true)),
                    "False" => Ok(Value::Bool(false)),
                    "None" => Ok(Value::None),
                    word => {
                        let msg = format!("unexpected word {word:?}");
                        self.pos = start;
                        Err(self.error(msg))
                    }
                }
            }
            Some(_) => Err(self.error("expected a value")),
            None => Err(self.error("header ends where a value was expected")),
        }
    }

    /// An integer, optionally signed, with Python 2's `L` suffix tolerated.
    fn int(&mut self) -> Result<Value, NpyError> {
        let negative = match self.bytes.get(self.pos) {
            Some(b'-') => {
                self.pos += 1;
                true
            }
            Some(b'+') => {
                self.pos += 1;
                false
            }
            _ => false,
        };
        let start = self.pos;
        let mut n: i128 = 0;
        while let Some(&c) = self.bytes.get(self.pos).filter(|c| c.is_ascii_digit()) {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(i128::from(c - b'0')))
                .ok_or_else(|| self.error("integer too large"))?;
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.error("expected digits"));
        }
        if let Some(b'L' | b'l') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
        Ok(Value::Int(if negative { -n } else { n }))
    }

    /// A quoted string; backslash escapes the next character.
    fn string(&mut self, quote: u8) -> Result<Value, NpyError> {
        self.pos += 1;
        let mut s = String::new();
        let mut chars = self.text[self.pos..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, e)) => s.push(e),
                    None => break,
                },
                c if c as u32 == u32::from(quote) => {
                    self.pos += i + 1;
                    return Ok(Value::Str(s));
                }
                c => s.push(c),
            }
        }
        self.pos = self.bytes.len();
        Err(self.error("unterminated string"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn npy(version: u8, header: &str, data: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[version, 0]);
        if version == 1 {
            out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn shared_models_dir() -> Option<PathBuf> {
        let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/models"));
        if dir.is_dir() {
            return Some(dir);
        }
        assert!(
            std::env::var_os("CI").is_none(),
            "shared models folder {} is missing (required when CI is set)",
            dir.display()
        );
        eprintln!("skipping: shared models folder {} is absent", dir.display());
        None
    }

    #[test]
    fn reads_real_mobilenet_float_input() {
        let Some(dir) = shared_models_dir() else {
            return;
        };
        let t = read_npy_file(dir.join("mobilenet_v2.onnx.input.npy")).expect("valid npy");
        assert_eq!(t.dtype, DataType::F32);
        assert_eq!(t.shape, vec![1, 3, 224, 224]);
        assert_eq!(t.data.len(), 3 * 224 * 224 * 4);
        let values = t.to_f32_vec().expect("f32");
        assert!(values.iter().all(|v| v.is_finite()));
        // Writing it back must reproduce what numpy wrote.
        let original = std::fs::read(dir.join("mobilenet_v2.onnx.input.npy")).expect("read");
        assert_eq!(write_npy(&t), original);
    }

    #[test]
    fn reads_real_mobilenet_int8_input() {
        let Some(dir) = shared_models_dir() else {
            return;
        };
        let t = read_npy_file(dir.join("mobilenet_v2_int8.tflite.input.npy")).expect("valid npy");
        assert_eq!(t.dtype, DataType::I8);
        assert_eq!(t.element_count(), t.shape.iter().product::<usize>());
        assert!(!t.shape.is_empty());
        let original = std::fs::read(dir.join("mobilenet_v2_int8.tflite.input.npy")).expect("read");
        assert_eq!(write_npy(&t), original);
    }

    #[test]
    fn writer_matches_numpy_bytes() {
        // What numpy 2.4 `np.save` wrote for these arrays (118-byte headers: 21 - 1 spaces
        // of growth room for the first axis, then padding to 128 bytes).
        let expect = |dict: &str, data: &[u8]| {
            let mut header = dict.to_string();
            header.push_str(&" ".repeat(117 - dict.len()));
            header.push('\n');
            npy(1, &header, data)
        };
        let t = HostTensor::from_f32(vec![2], &[1.0, 2.0]).expect("tensor");
        assert_eq!(
            write_npy(&t),
            expect(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                bytemuck::cast_slice(&[1.0f32, 2.0])
            )
        );
        let t = HostTensor::new(DataType::I64, vec![], 3i64.to_le_bytes().to_vec()).expect("0-d");
        assert_eq!(
            write_npy(&t),
            expect(
                "{'descr': '<i8', 'fortran_order': False, 'shape': (), }",
                &3i64.to_le_bytes()
            )
        );
    }

    #[test]
    fn round_trips_every_dtype_and_rank() {
        for dtype in DataType::ALL.into_iter().filter(|t| !t.is_narrow()) {
            for shape in [
                vec![],
                vec![0],
                vec![3],
                vec![2, 3],
                vec![2, 1, 2, 2],
                vec![4, 0, 2],
            ] {
                let n: usize = shape.iter().product();
                let data: Vec<u8> = (0..n * dtype.size())
                    .map(|i| {
                        if dtype == DataType::Bool {
                            (i % 2) as u8
                        } else {
                            i as u8
                        }
                    })
                    .collect();
                let t = HostTensor::new(dtype, shape.clone(), data).expect("tensor");
                let back = read_npy(&write_npy(&t)).expect("round trip");
                assert_eq!(back, t, "{dtype} {shape:?}");
            }
        }
    }

    #[test]
    fn zero_d_shape() {
        let t = read_npy(&npy(
            1,
            "{'descr': '<i8', 'fortran_order': False, 'shape': ()}",
            &7i64.to_le_bytes(),
        ))
        .expect("0-d");
        assert_eq!(t.shape, Vec::<usize>::new());
        assert_eq!(t.data, 7i64.to_le_bytes());
    }

    #[test]
    fn keys_in_any_order_with_spacing_and_trailing_commas() {
        let headers = [
            "{'shape': (2, 2,), 'descr': '<u2', 'fortran_order': False,}\n",
            "{ \"fortran_order\" : False , \"shape\":(2,2), \"descr\":\"<u2\" }   \n",
            "{'descr':'<u2','fortran_order':False,'shape':(2L, 2L)}",
            "{'descr': '<u2', 'fortran_order': False, 'shape': [2, 2], }",
        ];
        let data: Vec<u8> = [1u16, 2, 3, 4]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        for h in headers {
            let t = read_npy(&npy(1, h, &data)).unwrap_or_else(|e| panic!("{h}: {e}"));
            assert_eq!(
                (t.dtype, t.shape.clone(), t.data.clone()),
                (DataType::U16, vec![2, 2], data.clone())
            );
        }
    }

    #[test]
    fn versions_two_and_three() {
        let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n";
        let data = 1.5f32.to_le_bytes();
        for v in [2, 3] {
            let t = read_npy(&npy(v, h, &data)).expect("version");
            assert_eq!(t.to_f32_vec(), Some(vec![1.5]));
        }
        // 3.0 headers are UTF-8; invalid UTF-8 is reported as such.
        let mut bad = npy(3, h, &data);
        bad[12] = 0xff;
        assert!(matches!(
            read_npy(&bad),
            Err(NpyError::HeaderEncoding { .. })
        ));
        let unsupported = npy(4, h, &data);
        assert!(matches!(
            read_npy(&unsupported),
            Err(NpyError::UnsupportedVersion { major: 4, minor: 0 })
        ));
    }

    #[test]
    fn big_endian_is_swapped() {
        let cases: [(&str, DataType, Vec<u8>, Vec<u8>); 4] = [
            (
                ">f4",
                DataType::F32,
                1.5f32.to_be_bytes().to_vec(),
                1.5f32.to_le_bytes().to_vec(),
            ),
            (
                ">i8",
                DataType::I64,
                (-3i64).to_be_bytes().to_vec(),
                (-3i64).to_le_bytes().to_vec(),
            ),
            (
                ">u2",
                DataType::U16,
                0x1234u16.to_be_bytes().to_vec(),
                0x1234u16.to_le_bytes().to_vec(),
            ),
            (">i1", DataType::I8, vec![0xfe], vec![0xfe]),
        ];
        for (descr, dtype, be, le) in cases {
            let h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (1,)}}");
            let t = read_npy(&npy(1, &h, &be)).expect(descr);
            assert_eq!((t.dtype, t.data), (dtype, le), "{descr}");
        }
    }

    #[test]
    fn narrow_types_are_written_widened() {
        let codes = [0x38u8, 0xb8, 0x7f];
        let t = HostTensor::new(DataType::F8E4M3Fn, vec![3], codes.to_vec()).unwrap();
        let back = read_npy(&write_npy(&t)).unwrap();
        assert_eq!(back.dtype, DataType::F32);
        let v = back.to_f32_vec().unwrap();
        assert_eq!(&v[..2], &[1.0, -1.0]);
        assert!(v[2].is_nan());
        let t = HostTensor::new(DataType::I4, vec![2], vec![0xf8, 7]).unwrap();
        let back = read_npy(&write_npy(&t)).unwrap();
        assert_eq!((back.dtype, back.data), (DataType::I8, vec![0xf8, 7]));
    }

    #[test]
    fn every_descr_maps() {
        for dtype in DataType::ALL.into_iter().filter(|t| !t.is_narrow()) {
            assert_eq!(parse_descr(descr_of(dtype)).expect("descr").0, dtype);
            if dtype.size() > 1 {
                let be = format!(">{}", &descr_of(dtype)[1..]);
                assert_eq!(parse_descr(&be).expect("be"), (dtype, true));
            }
        }
        for bad in ["", "<", "<f16", "<c8", "|f4", "=i4", "<U10", "O", "xf4"] {
            assert!(
                matches!(parse_descr(bad), Err(NpyError::UnknownDescr { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn fortran_order_is_transposed() {
        // np.asfortranarray(np.arange(6).reshape(2, 3)) stores 0 3 1 4 2 5.
        let fdata: Vec<u8> = [0i32, 3, 1, 4, 2, 5]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let h = "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }";
        let t = read_npy(&npy(1, h, &fdata)).expect("fortran");
        let c: Vec<u8> = (0i32..6).flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!((t.shape.clone(), t.data), (vec![2, 3], c));

        // 3-d: element [i, j, k] of shape (2, 3, 4) at column-major offset i + 2j + 6k.
        let shape = [2usize, 3, 4];
        let mut f = vec![0u8; 24];
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..4 {
                    f[i + 2 * j + 6 * k] = (i * 12 + j * 4 + k) as u8;
                }
            }
        }
        let h = "{'descr': '|u1', 'fortran_order': True, 'shape': (2, 3, 4), }";
        let t = read_npy(&npy(1, h, &f)).expect("fortran 3-d");
        assert_eq!(t.shape, shape.to_vec());
        assert_eq!(t.data, (0u8..24).collect::<Vec<_>>());
    }

    #[test]
    fn errors_name_the_problem() {
        let ok_h = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
        let data = [0u8; 8];

        assert!(matches!(read_npy(b""), Err(NpyError::BadMagic)));
        assert!(matches!(
            read_npy(b"\x93NUMPZ\x01\x00"),
            Err(NpyError::BadMagic)
        ));
        assert!(matches!(
            read_npy(b"\x93NUMPY\x01"),
            Err(NpyError::TruncatedPreamble { .. })
        ));
        assert!(matches!(
            read_npy(b"\x93NUMPY\x02\x00\x10\x00"),
            Err(NpyError::TruncatedPreamble { .. })
        ));

        let mut beyond = npy(1, ok_h, &[]);
        beyond[8] = 0xff;
        beyond[9] = 0xff;
        let e = read_npy(&beyond).expect_err("beyond");
        assert!(
            matches!(
                e,
                NpyError::HeaderBeyondFile {
                    header_len: 65535,
                    ..
                }
            ),
            "{e}"
        );

        let e = read_npy(&npy(1, ok_h, &data[..7])).expect_err("short data");
        assert!(
            matches!(
                e,
                NpyError::SizeMismatch {
                    expected: 8,
                    actual: 7,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains("needs 8 bytes but the file holds 7"),
            "{e}"
        );
        let e = read_npy(&npy(1, ok_h, &[0u8; 9])).expect_err("long data");
        assert!(
            matches!(
                e,
                NpyError::SizeMismatch {
                    expected: 8,
                    actual: 9,
                    ..
                }
            ),
            "{e}"
        );

        let e = read_npy(&npy(
            1,
            "{'descr': '<c16', 'fortran_order': False, 'shape': (2,)}",
            &data,
        ))
        .expect_err("descr");
        assert!(e.to_string().contains("<c16"), "{e}");
        let e = read_npy(&npy(
            1,
            "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}",
            &data,
        ))
        .expect_err("structured");
        assert!(e.to_string().contains("structured"), "{e}");

        type Check = fn(&NpyError) -> bool;
        let cases: [(&str, Check); 10] = [
            ("{'descr': '<f4', 'shape': (2,)}", |e| {
                matches!(e, NpyError::MissingKey("fortran_order"))
            }),
            ("{'descr': '<f4', 'fortran_order': False}", |e| {
                matches!(e, NpyError::MissingKey("shape"))
            }),
            ("{'fortran_order': False, 'shape': (2,)}", |e| {
                matches!(e, NpyError::MissingKey("descr"))
            }),
            (
                "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
                |e| matches!(e, NpyError::DuplicateKey(_)),
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",
                |e| matches!(e, NpyError::UnknownKey(_)),
            ),
            ("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", |e| {
                matches!(
                    e,
                    NpyError::BadValue {
                        key: "fortran_order",
                        ..
                    }
                )
            }),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
                |e| matches!(e, NpyError::BadValue { key: "shape", .. }),
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
                |e| matches!(e, NpyError::BadValue { key: "shape", .. }),
            ),
            (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x",
                |e| matches!(e, NpyError::HeaderSyntax { .. }),
            ),
            (
                "{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}",
                |e| matches!(e, NpyError::HeaderSyntax { .. }),
            ),
        ];
        for (h, check) in cases {
            let e = read_npy(&npy(1, h, &data)).expect_err(h);
            assert!(check(&e), "{h}: {e}");
        }

        let e = read_npy(&npy(
            1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}",
            &data,
        ))
        .expect_err("overflow");
        assert!(matches!(e, NpyError::ShapeOverflow { .. }), "{e}");

        let e = read_npy(&npy(
            1,
            "{'descr': '|b1', 'fortran_order': False, 'shape': (2,)}",
            &[1, 2],
        ))
        .expect_err("bool");
        assert!(
            matches!(e, NpyError::InvalidBool { index: 1, value: 2 }),
            "{e}"
        );

        let deep = format!(
            "{{'descr': '<f4', 'fortran_order': False, 'shape': {}2{}}}",
            "(".repeat(100),
            ")".repeat(100)
        );
        let e = read_npy(&npy(1, &deep, &data)).expect_err("deep");
        assert!(e.to_string().contains("nesting too deep"), "{e}");

        let e = read_npy_file("/nonexistent/x.npy").expect_err("io");
        assert!(e.to_string().contains("/nonexistent/x.npy"), "{e}");
    }

    #[test]
    fn file_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.npy");
        let t = HostTensor::new(
            DataType::I64,
            vec![2],
            [5i64, -6].iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
        .expect("tensor");
        write_npy_file(&path, &t).expect("write");
        assert_eq!(read_npy_file(&path).expect("read"), t);
    }

    fn valid_file() -> Vec<u8> {
        let t = HostTensor::from_f32(vec![2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).expect("tensor");
        write_npy(&t)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = read_npy(&bytes);
            let mut with_magic = MAGIC.to_vec();
            with_magic.extend_from_slice(&bytes);
            let _ = read_npy(&with_magic);
        }

        #[test]
        fn mutated_valid_file_never_panics(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = valid_file();
            for (at, value) in flips {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            let _ = read_npy(&bytes);
            let _ = read_npy(&bytes[..cut.index(bytes.len())]);
        }

        #[test]
        fn random_headers_never_panic(header in "[{}()\\[\\]'\":, a-zA-Z0-9<>|=_\\\\-]{0,80}") {
            let _ = read_npy(&npy(1, &header, &[0u8; 8]));
            let _ = read_npy(&npy(3, &header, &[0u8; 8]));
        }
    }
}
