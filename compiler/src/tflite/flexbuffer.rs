//! A bounds-checked reader for the part of the FlexBuffers format that TFLite custom
//! operators use for their options: a root map from keys to scalars (integers, floats,
//! booleans) and vectors of integers.
//!
//! Custom options come from untrusted files, so every offset, width and length is
//! checked before it is followed; a malformed buffer is an error, never a panic or an
//! out-of-bounds read. Offsets always point backwards (towards the start of the buffer),
//! as the format requires, so following them cannot loop.

use std::fmt;

/// What went wrong reading a flexbuffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlexError(String);

impl fmt::Display for FlexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FlexError {}

type Result<T> = std::result::Result<T, FlexError>;

fn bad<T>(message: impl Into<String>) -> Result<T> {
    Err(FlexError(message.into()))
}

// Value types (the upper six bits of a packed type byte).
const NULL: u8 = 0;
const INT: u8 = 1;
const UINT: u8 = 2;
const FLOAT: u8 = 3;
const INDIRECT_INT: u8 = 6;
const INDIRECT_UINT: u8 = 7;
const INDIRECT_FLOAT: u8 = 8;
const MAP: u8 = 9;
const VECTOR: u8 = 10;
const VECTOR_INT: u8 = 11;
const VECTOR_UINT: u8 = 12;
const VECTOR_INT2: u8 = 16;
const VECTOR_UINT2: u8 = 17;
const VECTOR_INT3: u8 = 19;
const VECTOR_UINT3: u8 = 20;
const VECTOR_INT4: u8 = 22;
const VECTOR_UINT4: u8 = 23;
const BOOL: u8 = 26;

/// A value read from a flexbuffer.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    UInt(u64),
    Float(f64),
    Bool(bool),
    /// A vector whose elements are all integers.
    Ints(Vec<i64>),
    /// Anything else (strings, blobs, nested maps, float vectors), by type code.
    Other(u8),
}

impl Value {
    /// The value as a 32-bit integer, if it is an integer (or a boolean) that fits.
    pub fn as_i32(&self) -> Option<i32> {
        match *self {
            Value::Int(v) => i32::try_from(v).ok(),
            Value::UInt(v) => i32::try_from(v).ok(),
            Value::Bool(b) => Some(i32::from(b)),
            _ => None,
        }
    }

    /// The value as a float, if it is a number.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::Float(v) => Some(v as f32),
            Value::Int(v) => Some(v as f32),
            Value::UInt(v) => Some(v as f32),
            _ => None,
        }
    }

    /// A short description of the value's kind, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Int(_) | Value::UInt(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Bool(_) => "a boolean",
            Value::Ints(_) => "an integer vector",
            Value::Other(_) => "an unsupported value",
        }
    }
}

/// The root map of a flexbuffer, its entries decoded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Map {
    entries: Vec<(String, Value)>,
}

impl Map {
    /// The value stored under `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The keys, in stored order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }
}

/// Most entries a map or vector may declare: far above any operator's options, and it
/// bounds the work a crafted length can ask for.
const MAX_ELEMENTS: u64 = 1 << 20;

struct Reader<'a> {
    buf: &'a [u8],
}

impl Reader<'_> {
    fn bytes(&self, pos: usize, width: usize) -> Result<&[u8]> {
        match pos.checked_add(width) {
            Some(end) if end <= self.buf.len() => Ok(&self.buf[pos..end]),
            _ => bad(format!(
                "reads {width} bytes at offset {pos}, past the end of its {} bytes",
                self.buf.len()
            )),
        }
    }

    fn uint(&self, pos: usize, width: usize) -> Result<u64> {
        let b = self.bytes(pos, width)?;
        Ok(match width {
            1 => u64::from(b[0]),
            2 => u64::from(u16::from_le_bytes([b[0], b[1]])),
            4 => u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            8 => u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            _ => return bad(format!("has an invalid byte width {width}")),
        })
    }

    fn int(&self, pos: usize, width: usize) -> Result<i64> {
        let v = self.uint(pos, width)?;
        let shift = 64 - 8 * width as u32;
        Ok(((v << shift) as i64) >> shift)
    }

    fn float(&self, pos: usize, width: usize) -> Result<f64> {
        match width {
            4 => Ok(f64::from(f32::from_bits(self.uint(pos, 4)? as u32))),
            8 => Ok(f64::from_bits(self.uint(pos, 8)?)),
            _ => bad(format!("has a float of {width} bytes")),
        }
    }

    /// Follows the backward offset stored at `pos` (strictly backward: a zero offset
    /// would point at itself).
    fn indirect(&self, pos: usize, width: usize) -> Result<usize> {
        let offset = self.uint(pos, width)?;
        usize::try_from(offset)
            .ok()
            .filter(|&o| o > 0)
            .and_then(|o| pos.checked_sub(o))
            .map_or_else(
                || {
                    bad(format!(
                        "has an offset at {pos} that does not point backwards"
                    ))
                },
                Ok,
            )
    }

    /// The element count stored just before a vector at `at` (elements `width` wide),
    /// checked to leave room for `count * per_element` bytes from `at`.
    fn count(&self, at: usize, width: usize, per_element: usize) -> Result<usize> {
        let Some(size_at) = at.checked_sub(width) else {
            return bad("has a vector without room for its length");
        };
        let n = self.uint(size_at, width)?;
        let room = (self.buf.len() - at.min(self.buf.len())) as u64;
        if n > MAX_ELEMENTS || n.saturating_mul(per_element as u64) > room {
            return bad(format!("declares {n} elements, more than it holds"));
        }
        Ok(n as usize)
    }

    fn key(&self, pos: usize) -> Result<String> {
        let rest = self.buf.get(pos..).unwrap_or(&[]);
        let Some(end) = rest.iter().position(|&b| b == 0) else {
            return bad("has a key without its terminating zero");
        };
        String::from_utf8(rest[..end].to_vec())
            .map_or_else(|_| bad("has a key that is not UTF-8"), Ok)
    }

    /// The value at `pos`, stored `parent` bytes wide, with packed type `packed`.
    fn value(&self, pos: usize, parent: usize, packed: u8) -> Result<Value> {
        let ty = packed >> 2;
        let child = 1usize << (packed & 3);
        Ok(match ty {
            NULL => Value::Null,
            INT => Value::Int(self.int(pos, parent)?),
            UINT => Value::UInt(self.uint(pos, parent)?),
            FLOAT => Value::Float(self.float(pos, parent)?),
            BOOL => Value::Bool(self.uint(pos, parent)? != 0),
            INDIRECT_INT => Value::Int(self.int(self.indirect(pos, parent)?, child)?),
            INDIRECT_UINT => Value::UInt(self.uint(self.indirect(pos, parent)?, child)?),
            INDIRECT_FLOAT => Value::Float(self.float(self.indirect(pos, parent)?, child)?),
            VECTOR_INT | VECTOR_UINT | VECTOR_INT2 | VECTOR_UINT2 | VECTOR_INT3 | VECTOR_UINT3
            | VECTOR_INT4 | VECTOR_UINT4 => {
                let at = self.indirect(pos, parent)?;
                let n = match ty {
                    VECTOR_INT | VECTOR_UINT => self.count(at, child, child)?,
                    VECTOR_INT2 | VECTOR_UINT2 => 2,
                    VECTOR_INT3 | VECTOR_UINT3 => 3,
                    _ => 4,
                };
                let signed = matches!(ty, VECTOR_INT | VECTOR_INT2 | VECTOR_INT3 | VECTOR_INT4);
                let mut values = Vec::with_capacity(n);
                for k in 0..n {
                    let p = at + k * child;
                    values.push(if signed {
                        self.int(p, child)?
                    } else {
                        i64::try_from(self.uint(p, child)?)
                            .map_or_else(|_| bad("has an unsigned value above 2^63"), Ok)?
                    });
                }
                Value::Ints(values)
            }
            VECTOR => {
                // Untyped: elements, then one packed type byte per element.
                let at = self.indirect(pos, parent)?;
                let n = self.count(at, child, child + 1)?;
                let mut values = Vec::with_capacity(n);
                for k in 0..n {
                    let packed = self.uint(at + n * child + k, 1)? as u8;
                    // Only scalar elements: nothing nests, so nothing recurses.
                    if !matches!(packed >> 2, INT | UINT | INDIRECT_INT | INDIRECT_UINT) {
                        return Ok(Value::Other(VECTOR));
                    }
                    match self.value(at + k * child, child, packed)? {
                        Value::Int(v) => values.push(v),
                        Value::UInt(v) => values.push(
                            i64::try_from(v)
                                .map_or_else(|_| bad("has an unsigned value above 2^63"), Ok)?,
                        ),
                        _ => return Ok(Value::Other(VECTOR)),
                    }
                }
                Value::Ints(values)
            }
            other => Value::Other(other),
        })
    }
}

/// Reads a flexbuffer whose root is a map (empty input is an empty map).
pub fn read_map(buf: &[u8]) -> Result<Map> {
    if buf.is_empty() {
        return Ok(Map::default());
    }
    let r = Reader { buf };
    if buf.len() < 3 {
        return bad(format!(
            "is {} bytes long, too short for a flexbuffer",
            buf.len()
        ));
    }
    let width = usize::from(buf[buf.len() - 1]);
    let packed = buf[buf.len() - 2];
    if !matches!(width, 1 | 2 | 4 | 8) {
        return bad(format!("has an invalid root byte width {width}"));
    }
    let Some(root) = (buf.len() - 2).checked_sub(width) else {
        return bad("is too short for its root value");
    };
    if packed >> 2 != MAP {
        return bad("has a root that is not a map");
    }
    let child = 1usize << (packed & 3);
    let at = r.indirect(root, width)?;
    // Before the values: the keys vector's offset, its byte width, and the count.
    let n = r.count(at, child, child + 1)?;
    let keys_field = at
        .checked_sub(3 * child)
        .map_or_else(|| bad("has a map without room for its keys"), Ok)?;
    let keys_at = r.indirect(keys_field, child)?;
    let key_width = r.uint(keys_field + child, child)? as usize;
    if !matches!(key_width, 1 | 2 | 4 | 8) {
        return bad(format!("has an invalid key byte width {key_width}"));
    }
    let key_count = r.count(keys_at, key_width, key_width)?;
    if key_count != n {
        return bad(format!("has {key_count} keys for {n} values"));
    }
    let mut entries = Vec::with_capacity(n);
    for k in 0..n {
        let key = r.key(r.indirect(keys_at + k * key_width, key_width)?)?;
        let packed = r.uint(at + n * child + k, 1)? as u8;
        let value = r.value(at + k * child, child, packed)?;
        entries.push((key, value));
    }
    Ok(Map { entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{"output_height": 16, "output_width": 16}` as MediaPipe's converter wrote it.
    const BILINEAR: &str =
        "6f75747075745f686569676874006f75747075745f776964746800021c0f02010210100404042401";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn reads_a_map_of_integers() {
        let map = read_map(&hex(BILINEAR)).unwrap();
        assert_eq!(
            map.keys().collect::<Vec<_>>(),
            ["output_height", "output_width"]
        );
        assert_eq!(map.get("output_height").and_then(Value::as_i32), Some(16));
        assert_eq!(map.get("output_width").and_then(Value::as_i32), Some(16));
        assert_eq!(map.get("missing"), None);
    }

    /// The options of one of face_landmark_with_attention's Landmarks2TransformMatrix
    /// operators: 71 int16 indices, int32 and float32 scalars.
    const LANDMARKS: &str = concat!(
        "6c6566745f726f746174696f6e5f696478006f75747075745f686569676874006f75747075745f",
        "77696474680072696768745f726f746174696f6e5f696478007363616c655f78007363616c655f",
        "79007375627365745f6964787300470021000700a3009000910099009a009b008500f600a100a0",
        "009f009e009d00ad00820019006e001800170016001a007000f300f7001e001d001b001c003800",
        "be00e2001f00e400e500e600e700e800e900f4007100e100e000df00de00dd00bd0023007c002e",
        "003500340041008f006f00750076007700780079008000f5009c0046003f00690042006b003700",
        "c1007461726765745f726f746174696f6e5f72616469616e730008000601f600ea00df00ce00c8",
        "00c20028000000120000000200000008000000210000001000000010000000850000000000c03f",
        "0000c03fde00000000000000060606060e0e2d0e282601",
    );

    #[test]
    fn reads_mediapipe_landmark_options() {
        let map = read_map(&hex(LANDMARKS)).unwrap();
        let Some(Value::Ints(subset)) = map.get("subset_idxs") else {
            panic!("subset_idxs: {:?}", map.get("subset_idxs"));
        };
        assert_eq!(subset.len(), 71);
        assert_eq!(subset[..4], [33, 7, 163, 144]);
        assert_eq!(subset[70], 193);
        let int = |k: &str| map.get(k).and_then(Value::as_i32);
        let float = |k: &str| map.get(k).and_then(Value::as_f32);
        assert_eq!(int("left_rotation_idx"), Some(33));
        assert_eq!(int("right_rotation_idx"), Some(133));
        assert_eq!(int("output_height"), Some(16));
        assert_eq!(int("output_width"), Some(16));
        assert_eq!(float("scale_x"), Some(1.5));
        assert_eq!(float("scale_y"), Some(1.5));
        assert_eq!(float("target_rotation_radians"), Some(0.0));
        // Every truncation and single-bit flip is an error or some value, never a panic.
        let good = hex(LANDMARKS);
        for len in 0..good.len() {
            let _ = read_map(&good[..len]);
        }
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut b = good.clone();
                b[i] ^= 1 << bit;
                let _ = read_map(&b);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = read_map(&bytes);
        }
    }

    #[test]
    fn empty_is_an_empty_map() {
        assert_eq!(read_map(&[]).unwrap(), Map::default());
    }

    #[test]
    fn every_truncation_and_byte_flip_is_an_error_or_a_value() {
        let good = hex(BILINEAR);
        for len in 0..good.len() {
            let _ = read_map(&good[..len]);
        }
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut b = good.clone();
                b[i] ^= 1 << bit;
                let _ = read_map(&b);
            }
        }
    }

    #[test]
    fn refuses_a_non_map_root() {
        // The integer 7, one byte wide.
        assert!(read_map(&[7, INT << 2, 1]).is_err());
    }
}
