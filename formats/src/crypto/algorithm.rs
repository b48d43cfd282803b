//! Cipher, mode and padding identifiers: names for users, one-byte codes for files.
//!
//! The codes are part of the `.nnc` on-disk format: never renumber them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::CryptoError;

/// A block cipher. All of them have 16-byte blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// SM4 (GB/T 32907-2016), 128-bit key.
    Sm4,
    /// AES with a 128-bit key.
    Aes128,
    /// AES with a 192-bit key.
    Aes192,
    /// AES with a 256-bit key.
    Aes256,
}

impl Algorithm {
    /// Every algorithm, in code order.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::Sm4,
        Algorithm::Aes128,
        Algorithm::Aes192,
        Algorithm::Aes256,
    ];

    /// Key length in bytes.
    pub const fn key_len(self) -> usize {
        match self {
            Algorithm::Sm4 | Algorithm::Aes128 => 16,
            Algorithm::Aes192 => 24,
            Algorithm::Aes256 => 32,
        }
    }

    /// The name users type and JSON shows: `sm4`, `aes128`, `aes192`, `aes256`.
    pub const fn name(self) -> &'static str {
        match self {
            Algorithm::Sm4 => "sm4",
            Algorithm::Aes128 => "aes128",
            Algorithm::Aes192 => "aes192",
            Algorithm::Aes256 => "aes256",
        }
    }

    /// Stable on-disk code; 0 is reserved by the container for "not encrypted".
    pub const fn code(self) -> u8 {
        match self {
            Algorithm::Sm4 => 1,
            Algorithm::Aes128 => 2,
            Algorithm::Aes192 => 3,
            Algorithm::Aes256 => 4,
        }
    }

    /// Inverse of [`Algorithm::code`]; `None` for 0 and unknown codes.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Algorithm::Sm4),
            2 => Some(Algorithm::Aes128),
            3 => Some(Algorithm::Aes192),
            4 => Some(Algorithm::Aes256),
            _ => None,
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = CryptoError;

    /// Accepts the canonical names case-insensitively, and `aes-128` style spellings
    /// (OpenSSL's) as well.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let folded: String = s
            .trim()
            .chars()
            .filter(|c| *c != '-' && *c != '_')
            .map(|c| c.to_ascii_lowercase())
            .collect();
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == folded)
            .ok_or_else(|| CryptoError::UnknownAlgorithm(s.to_owned()))
    }
}

/// A block cipher mode of operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Electronic codebook; PKCS#7 padded, no IV.
    Ecb,
    /// Cipher block chaining; PKCS#7 padded.
    Cbc,
    /// Cipher feedback with full 128-bit feedback (CFB-128); no padding.
    Cfb,
    /// Output feedback; no padding.
    Ofb,
    /// Counter mode, the whole 16-byte IV is a big-endian counter (as OpenSSL and
    /// NIST SP 800-38A); no padding.
    Ctr,
    /// Galois/counter mode (NIST SP 800-38D; SM4-GCM as RFC 8998): encryption and a
    /// 128-bit tag in one pass, 96-bit nonce; no padding. Authenticated, so it is used
    /// through `crypto::gcm`, not the plain `encrypt`/`decrypt`.
    Gcm,
}

impl Mode {
    /// The confidentiality modes of SP 800-38A, in code order (what `encrypt` and
    /// `decrypt` take, and `openssl enc` computes).
    pub const ALL: [Mode; 5] = [Mode::Ecb, Mode::Cbc, Mode::Cfb, Mode::Ofb, Mode::Ctr];

    /// Every mode a `.nnc` file may use: [`Mode::ALL`] and GCM.
    pub const EVERY: [Mode; 6] = [
        Mode::Ecb,
        Mode::Cbc,
        Mode::Cfb,
        Mode::Ofb,
        Mode::Ctr,
        Mode::Gcm,
    ];

    /// Whether each block's encryption waits for the previous one's (CBC and CFB
    /// encryption, OFB both ways): such modes encrypt a weight field in independent
    /// segments so that many can run side by side (see `crypto::stream`).
    pub const fn is_chained(self) -> bool {
        matches!(self, Mode::Cbc | Mode::Cfb | Mode::Ofb)
    }

    /// The name users type and JSON shows: `ecb`, `cbc`, `cfb`, `ofb`, `ctr`.
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Ecb => "ecb",
            Mode::Cbc => "cbc",
            Mode::Cfb => "cfb",
            Mode::Ofb => "ofb",
            Mode::Ctr => "ctr",
            Mode::Gcm => "gcm",
        }
    }

    /// Stable on-disk code; 0 is reserved by the container.
    pub const fn code(self) -> u8 {
        match self {
            Mode::Ecb => 1,
            Mode::Cbc => 2,
            Mode::Cfb => 3,
            Mode::Ofb => 4,
            Mode::Ctr => 5,
            Mode::Gcm => 6,
        }
    }

    /// Inverse of [`Mode::code`]; `None` for 0 and unknown codes.
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Mode::Ecb),
            2 => Some(Mode::Cbc),
            3 => Some(Mode::Cfb),
            4 => Some(Mode::Ofb),
            5 => Some(Mode::Ctr),
            6 => Some(Mode::Gcm),
            _ => None,
        }
    }

    /// Whether the IV influences the output (every mode but ECB).
    pub const fn needs_iv(self) -> bool {
        !matches!(self, Mode::Ecb)
    }

    /// The padding this mode uses: PKCS#7 for the block modes, none for the stream modes.
    pub const fn padding(self) -> Padding {
        match self {
            Mode::Ecb | Mode::Cbc => Padding::Pkcs7,
            Mode::Cfb | Mode::Ofb | Mode::Ctr | Mode::Gcm => Padding::None,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = CryptoError;

    /// Accepts the canonical names case-insensitively; `cfb128` is accepted as `cfb`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let folded = s.trim().to_ascii_lowercase();
        let folded = if folded == "cfb128" { "cfb" } else { &folded };
        Mode::EVERY
            .into_iter()
            .find(|m| m.name() == folded)
            .ok_or_else(|| CryptoError::UnknownMode(s.to_owned()))
    }
}

/// Block padding scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Padding {
    /// No padding: the ciphertext is as long as the plaintext.
    None,
    /// PKCS#7: 1 to 16 bytes, each holding the padding length.
    Pkcs7,
}

impl Padding {
    /// `none` or `pkcs7`.
    pub const fn name(self) -> &'static str {
        match self {
            Padding::None => "none",
            Padding::Pkcs7 => "pkcs7",
        }
    }

    /// Stable on-disk code.
    pub const fn code(self) -> u8 {
        match self {
            Padding::None => 0,
            Padding::Pkcs7 => 1,
        }
    }

    /// Inverse of [`Padding::code`].
    pub const fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Padding::None),
            1 => Some(Padding::Pkcs7),
            _ => None,
        }
    }
}

impl fmt::Display for Padding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// Serialized by name (not by variant identifier) so JSON matches what users type.
macro_rules! serde_by_name {
    ($($ty:ty),*) => {$(
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.name())
            }
        }
    )*};
}
serde_by_name!(Algorithm, Mode, Padding);

macro_rules! deserialize_from_str {
    ($($ty:ty),*) => {$(
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let name = String::deserialize(deserializer)?;
                name.parse().map_err(serde::de::Error::custom)
            }
        }
    )*};
}
deserialize_from_str!(Algorithm, Mode);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_zero_is_reserved() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_code(a.code()), Some(a));
            assert_eq!(a.name().parse::<Algorithm>().ok(), Some(a));
        }
        for m in Mode::EVERY {
            assert_eq!(Mode::from_code(m.code()), Some(m));
            assert_eq!(m.name().parse::<Mode>().ok(), Some(m));
        }
        for p in [Padding::None, Padding::Pkcs7] {
            assert_eq!(Padding::from_code(p.code()), Some(p));
        }
        assert_eq!(Algorithm::from_code(0), None);
        assert_eq!(Algorithm::from_code(5), None);
        assert_eq!(Mode::from_code(0), None);
        assert_eq!(Mode::from_code(7), None);
        assert_eq!(Padding::from_code(2), None);
    }

    #[test]
    fn on_disk_codes_are_the_documented_ones() {
        let alg: Vec<u8> = Algorithm::ALL.iter().map(|a| a.code()).collect();
        assert_eq!(alg, [1, 2, 3, 4]);
        let modes: Vec<u8> = Mode::EVERY.iter().map(|m| m.code()).collect();
        assert_eq!(modes, [1, 2, 3, 4, 5, 6]);
        assert_eq!((Padding::None.code(), Padding::Pkcs7.code()), (0, 1));
    }

    #[test]
    fn parsing_is_lenient_about_case_and_dashes_only() {
        assert_eq!("AES-128".parse::<Algorithm>().ok(), Some(Algorithm::Aes128));
        assert_eq!(" Sm4 ".parse::<Algorithm>().ok(), Some(Algorithm::Sm4));
        assert_eq!("CFB128".parse::<Mode>().ok(), Some(Mode::Cfb));
        let err = "aes512".parse::<Algorithm>().unwrap_err();
        assert_eq!(err, CryptoError::UnknownAlgorithm("aes512".into()));
        assert!(err.to_string().contains("aes256"), "{err}");
        assert_eq!("GCM".parse::<Mode>().ok(), Some(Mode::Gcm));
        assert!(matches!(
            "ccm".parse::<Mode>(),
            Err(CryptoError::UnknownMode(_))
        ));
    }

    #[test]
    fn modes_declare_padding_and_iv() {
        assert_eq!(Mode::Ecb.padding(), Padding::Pkcs7);
        assert_eq!(Mode::Cbc.padding(), Padding::Pkcs7);
        for m in [Mode::Cfb, Mode::Ofb, Mode::Ctr] {
            assert_eq!(m.padding(), Padding::None);
            assert!(m.needs_iv());
        }
        assert!(!Mode::Ecb.needs_iv());
        assert!(Mode::Cbc.needs_iv());
    }

    #[test]
    fn serde_uses_names() {
        let json = serde_json::to_string(&(Algorithm::Aes192, Mode::Ctr, Padding::Pkcs7)).unwrap();
        assert_eq!(json, r#"["aes192","ctr","pkcs7"]"#);
        let back: (Algorithm, Mode) = serde_json::from_str(r#"["sm4","cbc"]"#).unwrap();
        assert_eq!(back, (Algorithm::Sm4, Mode::Cbc));
        assert!(serde_json::from_str::<Mode>(r#""xts""#).is_err());
    }
}
