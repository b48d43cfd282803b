//! Little-endian encoding with a reader that never reads past its buffer and never
//! allocates more than the remaining bytes could describe.

use super::error::ContainerError;

/// Appends little-endian values.
#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn f32(&mut self, v: f32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn bytes(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
    }
    /// A length-prefixed (u32) UTF-8 string.
    pub fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s.as_bytes());
    }
}

/// Reads little-endian values from a slice; `section` names the region in errors.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    section: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8], section: &'static str) -> Reader<'a> {
        Reader {
            data,
            pos: 0,
            section,
        }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    fn error(&self, field: &str, message: String) -> ContainerError {
        ContainerError::Malformed {
            section: self.section,
            offset: self.pos as u64,
            field: field.to_string(),
            message,
        }
    }

    pub fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8], ContainerError> {
        if n > self.remaining() {
            return Err(self.error(
                field,
                format!("needs {n} bytes but only {} remain", self.remaining()),
            ));
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], ContainerError> {
        let s = self.take(N, field)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self, field: &str) -> Result<u8, ContainerError> {
        Ok(self.take(1, field)?[0])
    }
    pub fn u16(&mut self, field: &str) -> Result<u16, ContainerError> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }
    pub fn u32(&mut self, field: &str) -> Result<u32, ContainerError> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }
    pub fn i32(&mut self, field: &str) -> Result<i32, ContainerError> {
        Ok(i32::from_le_bytes(self.array(field)?))
    }
    pub fn u64(&mut self, field: &str) -> Result<u64, ContainerError> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }
    pub fn f32(&mut self, field: &str) -> Result<f32, ContainerError> {
        Ok(f32::from_le_bytes(self.array(field)?))
    }

    /// A count of items each at least `min_item_bytes` long: rejected when the remaining
    /// bytes could not hold that many, so no allocation is sized by an unchecked count.
    pub fn count(&mut self, field: &str, min_item_bytes: usize) -> Result<usize, ContainerError> {
        let n = self.u32(field)? as usize;
        let needed = n.checked_mul(min_item_bytes.max(1));
        match needed {
            Some(b) if b <= self.remaining() => Ok(n),
            _ => Err(self.error(
                field,
                format!(
                    "count {n} needs at least {} bytes but only {} remain",
                    n.saturating_mul(min_item_bytes.max(1)),
                    self.remaining()
                ),
            )),
        }
    }

    pub fn str(&mut self, field: &str) -> Result<String, ContainerError> {
        let n = self.u32(field)? as usize;
        let bytes = self.take(n, field)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| self.error(field, "is not valid UTF-8".into()))
    }

    pub fn expect_end(&self) -> Result<(), ContainerError> {
        if self.remaining() != 0 {
            return Err(self.error(
                "end",
                format!("{} unexpected trailing bytes", self.remaining()),
            ));
        }
        Ok(())
    }

    /// Builds an error at the current position (for semantic checks by callers).
    pub fn fail(&self, field: &str, message: impl Into<String>) -> ContainerError {
        self.error(field, message.into())
    }
}
