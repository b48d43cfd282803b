//! Secret keys: length-checked at construction, wiped on drop, never printed.

use std::fmt;

use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

use super::{Algorithm, CryptoError, ct_eq, try_random_bytes};

/// Why hex text is not key bytes. Neither variant repeats any of the text: it is secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyHexError {
    /// The character at `position` (counting characters from 1, as an editor does) is not
    /// a hex digit.
    Digit { position: usize },
    /// The text has an odd number of hex digits.
    OddLength { digits: usize },
}

/// Key bytes from hex text (either case), ignoring surrounding whitespace: the one hex
/// key parser, for [`Key::from_hex`] and for readers that learn the algorithm only from
/// the file they open (and so check the length themselves). The bytes are wiped on drop.
///
/// # Errors
///
/// [`KeyHexError`], naming the position of the first non-hex character or the count of
/// digits.
pub fn key_bytes_from_hex(hex: &str) -> Result<Zeroizing<Vec<u8>>, KeyHexError> {
    let hex = hex.trim();
    if let Some(index) = hex.bytes().position(|b| !b.is_ascii_hexdigit()) {
        // Position in characters, not bytes, so that it matches what an editor shows.
        let position = hex.char_indices().take_while(|(i, _)| *i < index).count() + 1;
        return Err(KeyHexError::Digit { position });
    }
    let digits = hex.len();
    if !digits.is_multiple_of(2) {
        return Err(KeyHexError::OddLength { digits });
    }
    let mut bytes = Zeroizing::new(vec![0u8; digits / 2]);
    // Every character is a hex digit and the count is even, so this cannot fail; map the
    // error anyway rather than panic (hex's error would echo a character).
    hex::decode_to_slice(hex, &mut bytes[..]).map_err(|_| KeyHexError::OddLength { digits })?;
    Ok(bytes)
}

/// Longest key of any [`Algorithm`] (AES-256).
const MAX_KEY_LEN: usize = 32;

/// A secret key for one [`Algorithm`].
///
/// The bytes live inline in a fixed buffer (no heap copy that could be left behind by a
/// reallocation) and are zeroed when the key is dropped. `Debug` prints only the
/// algorithm.
#[derive(Clone)]
pub struct Key {
    algorithm: Algorithm,
    bytes: Zeroizing<[u8; MAX_KEY_LEN]>,
}

impl Key {
    /// A key from raw bytes, which must be exactly `algorithm.key_len()` long.
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyLength`] for any other length.
    pub fn new(algorithm: Algorithm, bytes: &[u8]) -> Result<Key, CryptoError> {
        let expected = algorithm.key_len();
        if bytes.len() != expected {
            return Err(CryptoError::KeyLength {
                algorithm,
                expected,
                actual: bytes.len(),
            });
        }
        let mut key = Key {
            algorithm,
            bytes: Zeroizing::new([0; MAX_KEY_LEN]),
        };
        key.bytes[..expected].copy_from_slice(bytes);
        Ok(key)
    }

    /// A key from hex (either case), ignoring surrounding whitespace.
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyHexDigit`] (with the position of the first non-hex character),
    /// [`CryptoError::KeyHexOddLength`] or [`CryptoError::KeyLength`]. None repeats any
    /// of the input.
    pub fn from_hex(algorithm: Algorithm, hex: &str) -> Result<Key, CryptoError> {
        let bytes = key_bytes_from_hex(hex).map_err(|e| match e {
            KeyHexError::Digit { position } => CryptoError::KeyHexDigit {
                algorithm,
                position,
            },
            KeyHexError::OddLength { digits } => CryptoError::KeyHexOddLength { algorithm, digits },
        })?;
        Key::new(algorithm, &bytes)
    }

    /// A fresh key from the operating system's random number generator.
    ///
    /// # Errors
    ///
    /// [`CryptoError::Rng`] if the operating system cannot provide randomness.
    pub fn generate(algorithm: Algorithm) -> Result<Key, CryptoError> {
        let mut bytes = Zeroizing::new(try_random_bytes::<MAX_KEY_LEN>()?);
        // Only the first key_len() bytes are the key; the rest of the buffer stays zero.
        bytes[algorithm.key_len()..].zeroize();
        Ok(Key { algorithm, bytes })
    }

    /// The algorithm this key is for.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The secret bytes, exactly `algorithm().key_len()` of them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.algorithm.key_len()]
    }

    /// The key in lowercase hex, in a string that is wiped on drop.
    pub fn to_hex(&self) -> Zeroizing<String> {
        Zeroizing::new(hex::encode(self.as_bytes()))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({}, <redacted>)", self.algorithm)
    }
}

/// Constant-time in the key bytes, so comparing keys leaks nothing through timing.
impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.algorithm == other.algorithm && ct_eq(self.as_bytes(), other.as_bytes())
    }
}

impl Eq for Key {}

// `bytes` is `Zeroizing`, which wipes itself when the key drops.
impl ZeroizeOnDrop for Key {}

#[cfg(test)]
mod tests {
    use super::*;

    const SM4_HEX: &str = "0123456789abcdeffedcba9876543210";

    #[test]
    fn from_hex_round_trips_and_trims() {
        let key = Key::from_hex(Algorithm::Sm4, &format!("  {}\n", SM4_HEX.to_uppercase()))
            .expect("valid key");
        assert_eq!(key.as_bytes().len(), 16);
        assert_eq!(key.as_bytes()[0], 0x01);
        assert_eq!(key.as_bytes()[15], 0x10);
        assert_eq!(key.to_hex().as_str(), SM4_HEX);
    }

    #[test]
    fn hex_errors_name_the_problem_not_the_key() {
        let bad = "0123456789abcdeffedcba987654321z";
        let err = Key::from_hex(Algorithm::Aes128, bad).unwrap_err();
        assert_eq!(
            err,
            CryptoError::KeyHexDigit {
                algorithm: Algorithm::Aes128,
                position: 32
            }
        );
        let msg = err.to_string();
        assert!(!msg.contains("0123456789"), "{msg}");
        assert!(!msg.contains('z'), "{msg}");

        let err = Key::from_hex(Algorithm::Aes128, "abc").unwrap_err();
        assert_eq!(
            err,
            CryptoError::KeyHexOddLength {
                algorithm: Algorithm::Aes128,
                digits: 3
            }
        );
        assert!(!err.to_string().contains("abc"), "{err}");

        let err = Key::from_hex(Algorithm::Aes256, SM4_HEX).unwrap_err();
        assert_eq!(
            err,
            CryptoError::KeyLength {
                algorithm: Algorithm::Aes256,
                expected: 32,
                actual: 16
            }
        );
        assert!(err.to_string().contains("64 hex digits"), "{err}");
    }

    #[test]
    fn non_ascii_position_counts_characters() {
        let err = Key::from_hex(Algorithm::Sm4, "ab\u{e9}d").unwrap_err();
        assert_eq!(
            err,
            CryptoError::KeyHexDigit {
                algorithm: Algorithm::Sm4,
                position: 3
            }
        );
    }

    #[test]
    fn generate_fills_exactly_key_len_bytes() {
        for a in Algorithm::ALL {
            let k1 = Key::generate(a).expect("os rng");
            let k2 = Key::generate(a).expect("os rng");
            assert_eq!(k1.as_bytes().len(), a.key_len());
            assert_ne!(k1, k2, "two random {a} keys collided");
            assert!(k1.bytes[a.key_len()..].iter().all(|b| *b == 0));
        }
    }

    #[test]
    fn debug_is_redacted() {
        let key = Key::from_hex(Algorithm::Sm4, SM4_HEX).expect("valid key");
        assert_eq!(format!("{key:?}"), "Key(sm4, <redacted>)");
    }
}
