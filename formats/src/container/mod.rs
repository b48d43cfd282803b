//! The `.nnc` file: a compiled model whose weights are ciphertext.
//!
//! Layout (byte-level specification in `docs/FORMAT.md`):
//! - a 256-byte header: magic, version, producer, crypto configuration, key identifier,
//!   salt, section table location, and the metadata authentication tag;
//! - a section table;
//! - the operator-info section: the operand table (with storage info), one unit per
//!   operation (type, operands, and the storage info of that operation's weight field:
//!   offset, length, IV, plaintext length, tag), model inputs/outputs, and the inline
//!   (CONSTANT_COPY) values: scalars and int32 shape vectors only; every tensor constant
//!   that is model data travels encrypted in a weight field, whatever its size;
//! - the weight section: one field per operation that owns weights, each encrypted on
//!   its own so that it can be fetched and decrypted alone;
//! - optional further sections (the execution plan).
//!
//! Integrity (encrypt-then-MAC): every field carries an HMAC-SHA-256 tag over its
//! ciphertext, IV, index and position; the header carries a tag over every byte before
//! the weight section (header, section table, operator info with the field tags, further
//! sections, padding). A reader authenticates that region before parsing it. Keys for
//! encryption, authentication and IV derivation are derived from the master key with
//! HKDF-SHA-256 and the file's salt. Unencrypted files carry SHA-256 digests in the same
//! places. Every offset is 64-byte aligned. Readers take a [`Source`]: bytes in memory,
//! or a file read at offsets (never memory-mapped, so a file truncated under a reader is
//! an error, not a fault).

mod authenticate;
mod binary;
mod envelope;
mod error;
mod parse;
mod read;
mod rewrap;
mod source;
mod write;

pub use authenticate::{authenticate, authenticate_metadata, verify_signature};
pub use envelope::{
    DATA_KEY_LEN, KeyBlock, MAX_RECIPIENTS, Opener, Recipient, RecipientKind, SignatureBlock,
    Trailer, device_key_id,
};
pub use error::ContainerError;
pub use parse::{ArenaSlot, WeightField, copy_metadata, copy_metadata_from};
pub use read::{Container, open_field, reseal, reseal_metadata, verify_field};
pub use rewrap::{RecipientChanges, Rewrapped, rewrap};
pub use source::{FileSource, Source};
pub use write::{
    Envelope, MemorySink, Sink, WriteOptions, Written, is_weight, is_weight_in, weights_of, write,
    write_to,
};

use zeroize::Zeroizing;

use crate::crypto::{self, Algorithm, Key, Mode, Padding};

/// The first eight bytes of every `.nnc` file (PNG-style: a non-ASCII byte, the name, and
/// line-ending bytes that reveal text-mode corruption).
pub const MAGIC: [u8; 8] = *b"\x89NNC\r\n\x1a\n";
/// The format version this code reads; readers accept any minor of this major.
pub const FORMAT_MAJOR: u16 = 1;
/// The newest minor version this code reads (and writes, for every file with a key).
pub const FORMAT_MINOR: u16 = 3;
/// The minor version written for models without referenced subgraphs and without a key
/// (byte-identical to what nnc wrote before 1.1).
pub const FORMAT_MINOR_BASE: u16 = 0;
/// The minor version that added the referenced-subgraphs section (IF/WHILE bodies).
pub const FORMAT_MINOR_SUBGRAPHS: u16 = 1;
/// The minor version from which keys, the reproducible salt and IVs depend on the cipher
/// ([`Derivation::CipherBound`]); every file with a key is written so.
pub const FORMAT_MINOR_CIPHER_BOUND: u16 = 2;
/// First minor version with a data key wrapped per recipient (key block) and optional
/// signature, both in a trailer after the weights.
pub const FORMAT_MINOR_ENVELOPE: u16 = 3;
pub const HEADER_SIZE: usize = 256;
/// Every section and weight field starts at a multiple of this.
pub const ALIGNMENT: u64 = 64;
/// Offset of the metadata tag within the header.
pub const TAG_OFFSET: usize = 224;
/// Offset of `metadata_length`: the metadata tag covers bytes `[0, metadata_length)` of
/// the file except the tag itself.
pub const METADATA_LENGTH_OFFSET: usize = 128;
pub const SECTION_ENTRY_SIZE: usize = 32;
/// More sections than this is not a file nnc wrote.
pub const MAX_SECTIONS: usize = 64;

/// Header flag: weights are encrypted.
pub const FLAG_ENCRYPTED: u32 = 1;
/// Header flag: the file was written with `--reproducible` (derived salt and IVs).
pub const FLAG_REPRODUCIBLE: u32 = 2;
/// Header flag: weight fields in a chained mode (CBC, CFB, OFB) are encrypted in
/// segments (`crypto::stream`, docs/FORMAT.md). Set by every writer since it was
/// introduced; files without it are read as single chains.
pub const FLAG_SEGMENTED: u32 = 4;
const KNOWN_FLAGS: u32 = FLAG_ENCRYPTED | FLAG_REPRODUCIBLE | FLAG_SEGMENTED;

/// Section-table flag: a reader that does not know this section kind must refuse the file.
pub const SECTION_REQUIRED: u32 = 1;

/// Kinds of sections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[repr(u32)]
pub enum SectionKind {
    OperatorInfo = 1,
    Weights = 2,
    ExecutionPlan = 3,
    /// The referenced subgraphs (IF/WHILE bodies); format 1.1 and later.
    Subgraphs = 4,
}

impl SectionKind {
    pub fn from_code(code: u32) -> Option<SectionKind> {
        match code {
            1 => Some(SectionKind::OperatorInfo),
            2 => Some(SectionKind::Weights),
            3 => Some(SectionKind::ExecutionPlan),
            4 => Some(SectionKind::Subgraphs),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SectionKind::OperatorInfo => "operator-info",
            SectionKind::Weights => "weights",
            SectionKind::ExecutionPlan => "execution-plan",
            SectionKind::Subgraphs => "subgraphs",
        }
    }
}

/// How a file's integrity is protected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Integrity {
    /// HMAC-SHA-256 under a key derived from the master key (encrypted files).
    HmacSha256,
    /// SHA-256 digests (unencrypted files: detects corruption, not forgery).
    Sha256,
}

impl Integrity {
    pub fn code(self) -> u8 {
        match self {
            Integrity::HmacSha256 => 1,
            Integrity::Sha256 => 2,
        }
    }

    pub fn from_code(code: u8) -> Option<Integrity> {
        match code {
            1 => Some(Integrity::HmacSha256),
            2 => Some(Integrity::Sha256),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Integrity::HmacSha256 => "HMAC-SHA-256",
            Integrity::Sha256 => "SHA-256",
        }
    }
}

/// The crypto configuration recorded in the header (what the patent's host side programs
/// into the NPU's crypto control register).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CryptoConfig {
    /// `None` for an unencrypted file.
    pub algorithm: Option<Algorithm>,
    pub mode: Option<Mode>,
    pub padding: Padding,
    pub integrity: Integrity,
    /// Chained-mode fields are encrypted in segments ([`FLAG_SEGMENTED`]).
    pub segmented: bool,
}

impl CryptoConfig {
    pub fn none() -> CryptoConfig {
        CryptoConfig {
            algorithm: None,
            mode: None,
            padding: Padding::None,
            integrity: Integrity::Sha256,
            segmented: false,
        }
    }

    /// Plaintext weights, authenticated with HMAC-SHA-256 under the key.
    pub fn authenticated() -> CryptoConfig {
        CryptoConfig {
            algorithm: None,
            mode: None,
            padding: Padding::None,
            integrity: Integrity::HmacSha256,
            segmented: false,
        }
    }

    /// What this writer records for `algorithm` in `mode` (chained modes segmented).
    pub fn encrypted(algorithm: Algorithm, mode: Mode) -> CryptoConfig {
        CryptoConfig {
            algorithm: Some(algorithm),
            mode: Some(mode),
            padding: mode.padding(),
            integrity: Integrity::HmacSha256,
            segmented: mode.is_chained(),
        }
    }

    pub fn is_encrypted(&self) -> bool {
        self.algorithm.is_some()
    }

    /// True when the file is authenticated with a key (encrypted or not); false for
    /// SHA-256 digests, which detect corruption but not deliberate modification.
    pub fn is_keyed(&self) -> bool {
        self.integrity == Integrity::HmacSha256
    }
}

/// The decoded fixed header.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Header {
    pub major: u16,
    pub minor: u16,
    pub file_size: u64,
    pub flags: u32,
    pub section_count: u32,
    pub section_table_offset: u64,
    /// Bytes `[0, metadata_length)` (all but the weight section) are authenticated by
    /// the header's tag.
    pub metadata_length: u64,
    pub producer: String,
    pub crypto: CryptoConfig,
    #[serde(serialize_with = "hex_ser")]
    pub key_id: [u8; 16],
    #[serde(serialize_with = "hex_ser")]
    pub salt: [u8; 32],
    #[serde(serialize_with = "hex_ser")]
    pub tag: [u8; 32],
    /// Format 1.3: where the key block and signature block lie (zero before 1.3).
    pub trailer: Trailer,
}

fn hex_ser<S: serde::Serializer, const N: usize>(v: &[u8; N], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(v))
}

/// One entry of the section table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SectionEntry {
    pub kind: u32,
    pub flags: u32,
    pub offset: u64,
    pub length: u64,
}

impl SectionEntry {
    pub fn kind_name(&self) -> String {
        SectionKind::from_code(self.kind)
            .map(|k| k.name().to_string())
            .unwrap_or_else(|| format!("unknown kind {}", self.kind))
    }
}

/// Domain-separation labels: each derived key and each MAC input says what it is for.
mod label {
    pub const KEY_ID: &[u8] = b"nnc/v1 key identifier";
    pub const ENCRYPTION: &[u8] = b"nnc/v1 weight encryption key";
    pub const AUTHENTICATION: &[u8] = b"nnc/v1 authentication key";
    pub const IV_DERIVATION: &[u8] = b"nnc/v1 iv derivation key";
    pub const SALT: &[u8] = b"nnc/v1 reproducible salt";
    // Format 1.2: followed by the header's algorithm and mode codes.
    pub const ENCRYPTION_1_2: &[u8] = b"nnc/v1.2 weight encryption key";
    pub const AUTHENTICATION_1_2: &[u8] = b"nnc/v1.2 authentication key";
    pub const IV_DERIVATION_1_2: &[u8] = b"nnc/v1.2 iv derivation key";
    pub const SALT_1_2: &[u8] = b"nnc/v1.2 reproducible salt";
    pub const METADATA: &[u8] = b"nnc/v1 metadata";
    pub const FIELD: &[u8] = b"nnc/v1 weight field";
    pub const IV: &[u8] = b"nnc/v1 iv";
    // Format 1.3: the data key, its wrapping and the signature.
    pub const KEY_WRAPPING: &[u8] = b"nnc/v1.3 key wrapping key";
    pub const HPKE_INFO: &[u8] = b"nnc/v1.3 data key";
    pub const REPRODUCIBLE_DATA_KEY: &[u8] = b"nnc/v1.3 reproducible data key";
    pub const CONTENT: &[u8] = b"nnc/v1.3 signed content";
    pub const WEIGHTS: &[u8] = b"nnc/v1.3 weights";
    pub const SIGNATURE: &[u8] = b"nnc/v1.3 signature";
}

/// A key identifier that reveals nothing about the key: a PRF output of it.
pub fn key_id(master: &[u8]) -> Result<[u8; 16], ContainerError> {
    let derived = crypto::hkdf_sha256(master, &[], label::KEY_ID, 16)?;
    let mut id = [0u8; 16];
    id.copy_from_slice(&derived);
    Ok(id)
}

/// Which key schedule a file uses, fixed by its format version (docs/FORMAT.md, *Keys*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Derivation {
    /// Formats 1.0 and 1.1: keys, reproducible salt and IVs the same for every cipher.
    /// Only read: one model under one key in two modes could share keystream.
    Legacy,
    /// Format 1.2 on: every derived key and the reproducible salt bind the header's
    /// algorithm and mode codes (0 and 0 for authenticated plaintext).
    CipherBound { algorithm: u8, mode: u8 },
}

impl Derivation {
    /// The schedule of a file from fixed positions of its header (version, algorithm and
    /// mode bytes), read before anything is parsed or authenticated: those bytes are
    /// covered by the metadata tag that the keys derived from them check, so altering
    /// them is an integrity error.
    pub fn of_header(header: &[u8]) -> Derivation {
        let byte = |i: usize| header.get(i).copied().unwrap_or(0);
        let minor = u16::from_le_bytes([byte(10), byte(11)]);
        if minor < FORMAT_MINOR_CIPHER_BOUND {
            Derivation::Legacy
        } else {
            Derivation::CipherBound {
                algorithm: byte(72),
                mode: byte(73),
            }
        }
    }

    /// What this writer uses for a file with `crypto`.
    pub fn for_config(crypto: &CryptoConfig) -> Derivation {
        Derivation::CipherBound {
            algorithm: crypto.algorithm.map_or(0, |a| a.code()),
            mode: crypto.mode.map_or(0, |m| m.code()),
        }
    }

    /// The HKDF info (or PRF label) for a purpose: `legacy` alone, or `bound` followed
    /// by the algorithm and mode codes.
    fn info(self, legacy: &[u8], bound: &[u8]) -> Vec<u8> {
        match self {
            Derivation::Legacy => legacy.to_vec(),
            Derivation::CipherBound { algorithm, mode } => [bound, &[algorithm, mode]].concat(),
        }
    }

    /// The salt of a reproducible file: a keyed PRF of `content_digest` (never the bare
    /// digest, which would let anyone test a guess of the weights).
    pub fn reproducible_salt(self, master: &[u8], content_digest: &[u8; 32]) -> [u8; 32] {
        let label = self.info(label::SALT, label::SALT_1_2);
        crypto::hmac_sha256(master, &[&label, content_digest])
    }
}

/// The per-file keys derived from the master key and the file's salt. Zeroized on drop.
///
/// Authentication needs only the master key's bytes, not its algorithm, so a reader can
/// authenticate the header (which names the algorithm) before trusting anything in it.
pub struct FileKeys {
    /// What every key derives from: the master key (formats 1.0 to 1.2) or the file's
    /// data key (1.3).
    ikm: Zeroizing<Vec<u8>>,
    salt: [u8; 32],
    pub authentication: Zeroizing<Vec<u8>>,
    pub iv_derivation: Zeroizing<Vec<u8>>,
    /// `None` until the algorithm is known (the writer knows it; a reader learns it from
    /// the authenticated header).
    pub encryption: Option<Key>,
    derivation: Derivation,
}

/// Key material never appears in debug output.
impl std::fmt::Debug for FileKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.encryption.is_some() {
            "FileKeys(authentication, encryption: redacted)"
        } else {
            "FileKeys(authentication: redacted)"
        })
    }
}

impl FileKeys {
    /// The authentication and IV keys from `master` (the master key's bytes, or a 1.3
    /// file's data key), by `derivation`.
    pub fn derive(
        master: &[u8],
        salt: &[u8; 32],
        derivation: Derivation,
    ) -> Result<FileKeys, ContainerError> {
        let info = |legacy, bound| derivation.info(legacy, bound);
        Ok(FileKeys {
            authentication: crypto::hkdf_sha256(
                master,
                salt,
                &info(label::AUTHENTICATION, label::AUTHENTICATION_1_2),
                32,
            )?,
            iv_derivation: crypto::hkdf_sha256(
                master,
                salt,
                &info(label::IV_DERIVATION, label::IV_DERIVATION_1_2),
                32,
            )?,
            encryption: None,
            derivation,
            ikm: Zeroizing::new(master.to_vec()),
            salt: *salt,
        })
    }

    /// Adds the encryption key for `algorithm`.
    pub fn with_encryption(mut self, algorithm: Algorithm) -> Result<FileKeys, ContainerError> {
        let info = self
            .derivation
            .info(label::ENCRYPTION, label::ENCRYPTION_1_2);
        let enc = crypto::hkdf_sha256(&self.ikm, &self.salt, &info, algorithm.key_len())?;
        self.encryption = Some(Key::new(algorithm, &enc)?);
        Ok(self)
    }
}

/// Computes a tag over `parts` under `label`: HMAC-SHA-256 with the authentication key,
/// or plain SHA-256 when there is none (unencrypted files).
fn tag(keys: Option<&FileKeys>, label: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut all: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
    all.push(label);
    all.extend_from_slice(parts);
    match keys {
        Some(k) => crypto::hmac_sha256(&k.authentication, &all),
        None => crypto::sha256(&all),
    }
}

/// The tag of one weight field, binding its ciphertext to its index, place and IV.
fn field_tag(
    keys: Option<&FileKeys>,
    index: u32,
    offset: u64,
    plaintext_len: u64,
    iv: &[u8; 16],
    ciphertext: &[u8],
) -> [u8; 32] {
    let mut tag = FieldTagWriter::new(keys, index, offset, plaintext_len, iv);
    tag.update(ciphertext);
    tag.finish()
}

/// What ties a field's tag to its place: label, field index, offset, plaintext length and
/// IV. The HMAC of [`field_tag`] covers it before the ciphertext; GCM takes it as the
/// associated data. Either way a field moved, swapped or re-described is refused.
fn field_binding(index: u32, offset: u64, plaintext_len: u64, iv: &[u8; 16]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(label::FIELD.len() + 36);
    aad.extend_from_slice(label::FIELD);
    aad.extend_from_slice(&index.to_le_bytes());
    aad.extend_from_slice(&offset.to_le_bytes());
    aad.extend_from_slice(&plaintext_len.to_le_bytes());
    aad.extend_from_slice(iv);
    aad
}

/// The 96-bit GCM nonce of a field: the first 12 bytes of its IV (the writer leaves the
/// other 4 zero; all 16 are authenticated through [`gcm_aad`]).
fn gcm_nonce(iv: &[u8; 16]) -> [u8; 12] {
    std::array::from_fn(|i| iv[i])
}

/// The 32-byte tag slot of a field as its mode fills it: HMAC-SHA-256 (or SHA-256) of
/// [`field_tag`], or for GCM the 16-byte GCM tag followed by 16 zero bytes.
fn stored_field_tag(
    keys: Option<&FileKeys>,
    mode: Option<Mode>,
    field: &parse::WeightField,
    stored: &[u8],
) -> Result<[u8; 32], ContainerError> {
    if mode != Some(Mode::Gcm) {
        return Ok(field_tag(
            keys,
            field.index,
            field.offset,
            field.plaintext_length,
            &field.iv,
            stored,
        ));
    }
    let key =
        keys.and_then(|k| k.encryption.as_ref())
            .ok_or_else(|| ContainerError::Integrity {
                what: "the file's keys (an encrypted file read without them)".into(),
            })?;
    let aad = field_binding(field.index, field.offset, field.plaintext_length, &field.iv);
    let t = crypto::gcm_tag(key, &gcm_nonce(&field.iv), &aad, stored)?;
    let mut slot = [0u8; 32];
    slot[..16].copy_from_slice(&t);
    Ok(slot)
}

/// A field's tag computed as its stored bytes stream past, a chunk at a time (the
/// writer feeds it chunk by chunk; [`field_tag`] in one go).
struct FieldTagWriter(TagState);

enum TagState {
    Hmac(crypto::HmacSha256Writer),
    Digest(sha2::Sha256),
}

impl FieldTagWriter {
    fn new(
        keys: Option<&FileKeys>,
        index: u32,
        offset: u64,
        plaintext_len: u64,
        iv: &[u8; 16],
    ) -> FieldTagWriter {
        let mut w = FieldTagWriter(match keys {
            Some(k) => TagState::Hmac(crypto::HmacSha256Writer::new(&k.authentication)),
            None => TagState::Digest(sha2::Sha256::default()),
        });
        w.update(&field_binding(index, offset, plaintext_len, iv));
        w
    }

    fn update(&mut self, bytes: &[u8]) {
        match &mut self.0 {
            TagState::Hmac(m) => m.update(bytes),
            TagState::Digest(d) => sha2::Digest::update(d, bytes),
        }
    }

    fn finish(self) -> [u8; 32] {
        match self.0 {
            TagState::Hmac(m) => m.finalize(),
            TagState::Digest(d) => sha2::Digest::finalize(d).into(),
        }
    }
}

/// Element-type codes of model input/output descriptions.
fn dtype_code(t: crate::tensor::DataType) -> u8 {
    use crate::tensor::DataType as D;
    match t {
        D::F32 => 1,
        D::F16 => 2,
        D::F64 => 3,
        D::I8 => 4,
        D::U8 => 5,
        D::I16 => 6,
        D::U16 => 7,
        D::I32 => 8,
        D::U32 => 9,
        D::I64 => 10,
        D::U64 => 11,
        D::Bool => 12,
        D::Bf16 => 13,
        D::F8E4M3Fn => 14,
        D::F8E4M3Fnuz => 15,
        D::F8E5M2 => 16,
        D::F8E5M2Fnuz => 17,
        D::F4E2M1Fn => 18,
        D::I4 => 19,
        D::U4 => 20,
        D::I2 => 21,
        D::U2 => 22,
    }
}

fn dtype_from_code(code: u8) -> Option<crate::tensor::DataType> {
    crate::tensor::DataType::ALL
        .into_iter()
        .find(|&t| dtype_code(t) == code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::{IoInfo, Lifetime, Model, Operand, OperandType, OperationType};
    use crate::tensor::DataType;

    /// x[1,64] -> FC(w[32,64] shared, b) -> RELU -> FC(w again? no: w2) -> out; plus a
    /// weight read by two operations.
    fn model() -> Model {
        let mut m = Model::default();
        let mut x = Operand::new(OperandType::TensorFloat32, vec![1, 64]);
        x.lifetime = Lifetime::SubgraphInput;
        let x = m.add_operand(x);
        let w: Vec<f32> = (0..64 * 64).map(|i| (i % 97) as f32 * 0.01).collect();
        let w = m.add_f32_tensor(vec![64, 64], &w);
        let b = m.add_f32_tensor(vec![64], &[0.5; 64]);
        let act = m.add_i32(1);
        let h = m.add_operand(Operand::new(OperandType::TensorFloat32, vec![1, 64]));
        m.add_operation(
            OperationType::FullyConnected,
            vec![x, w, b, act],
            vec![h],
            "fc1",
        );
        let mut y = Operand::new(OperandType::TensorFloat32, vec![1, 64]);
        y.lifetime = Lifetime::SubgraphOutput;
        let y = m.add_operand(y);
        m.add_operation(
            OperationType::FullyConnected,
            vec![h, w, b, act],
            vec![y],
            "fc2",
        );
        m.main.inputs = vec![x];
        m.main.outputs = vec![y];
        let info = |n: &str| IoInfo {
            name: n.into(),
            dtype: DataType::F32,
            dims: vec![1, 64],
        };
        m.input_info = vec![info("x")];
        m.output_info = vec![info("y")];
        m
    }

    fn options(key: Option<&Key>, mode: Mode, reproducible: bool) -> WriteOptions<'_> {
        WriteOptions {
            key,
            mode,
            reproducible,
            authenticate_only: false,
            producer: "nnc test".into(),
            arena: None,
            extra_sections: Vec::new(),
            envelope: Default::default(),
        }
    }

    #[test]
    fn every_algorithm_and_mode_round_trips() {
        let m = model();
        let w_bytes = m.constant_bytes(1).unwrap().to_vec();
        for algorithm in Algorithm::ALL {
            let key = Key::generate(algorithm).unwrap();
            for mode in Mode::ALL {
                let bytes = write(&m, &options(Some(&key), mode, false)).unwrap();
                let c = Container::parse(&bytes).unwrap();
                c.verify(Some(key.as_bytes())).unwrap();
                let keys = c.keys(Some(key.as_bytes())).unwrap();
                // The shared weight sits in operation 0's field; operation 1 refers to it.
                assert!(c.fields[0].is_some() && c.fields[1].is_none());
                let plain = c.decrypt_field(keys.as_ref(), 0).unwrap();
                let loc = c.model.main.operands[1].location;
                assert_eq!(loc.pool_index, 0);
                assert_eq!(
                    &plain[loc.offset as usize..(loc.offset + loc.length) as usize],
                    &w_bytes[..]
                );
                // No plaintext window survives in the file.
                assert!(
                    !bytes.windows(32).any(|win| win == &w_bytes[64..96]),
                    "{algorithm:?} {mode:?}"
                );
            }
        }
    }

    #[test]
    fn unencrypted_files_carry_digests_and_plaintext() {
        let m = model();
        let bytes = write(&m, &options(None, Mode::Ctr, false)).unwrap();
        let c = Container::parse(&bytes).unwrap();
        c.verify(None).unwrap();
        let mut flipped = bytes.clone();
        let last = c.fields[0].unwrap().offset as usize + 5;
        flipped[last] ^= 1;
        let c = Container::parse(&flipped).unwrap();
        assert!(c.verify(None).unwrap_err().is_integrity());
    }

    #[test]
    fn reproducible_output_is_byte_identical_and_random_output_is_not() {
        let m = model();
        let key = Key::generate(Algorithm::Aes128).unwrap();
        let a = write(&m, &options(Some(&key), Mode::Cbc, true)).unwrap();
        let b = write(&m, &options(Some(&key), Mode::Cbc, true)).unwrap();
        assert_eq!(a, b);
        let c = write(&m, &options(Some(&key), Mode::Cbc, false)).unwrap();
        let d = write(&m, &options(Some(&key), Mode::Cbc, false)).unwrap();
        assert_ne!(c, d);
        // A different key gives a different file.
        let other = Key::generate(Algorithm::Aes128).unwrap();
        assert_ne!(
            a,
            write(&m, &options(Some(&other), Mode::Cbc, true)).unwrap()
        );
    }

    #[test]
    fn a_wrong_key_is_an_integrity_error() {
        let m = model();
        let key = Key::generate(Algorithm::Sm4).unwrap();
        let bytes = write(&m, &options(Some(&key), Mode::Ofb, false)).unwrap();
        let c = Container::parse(&bytes).unwrap();
        let wrong = Key::generate(Algorithm::Sm4).unwrap();
        let err = c.verify(Some(wrong.as_bytes())).unwrap_err();
        assert!(
            err.to_string().starts_with("wrong key or tampered file"),
            "{err}"
        );
        // A key made for another algorithm is just a wrong key.
        for other in [Algorithm::Aes128, Algorithm::Aes256] {
            let err = c
                .verify(Some(Key::generate(other).unwrap().as_bytes()))
                .unwrap_err();
            assert!(err.is_integrity(), "{err}");
        }
        assert!(matches!(
            c.verify(None).unwrap_err(),
            ContainerError::KeyRequired { .. }
        ));
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let m = model();
        let key = Key::generate(Algorithm::Aes256).unwrap();
        let bytes = write(&m, &options(Some(&key), Mode::Ctr, false)).unwrap();
        for pos in 0..bytes.len() {
            let mut b = bytes.clone();
            b[pos] ^= 0x10;
            let err = Container::open(&b, Some(key.as_bytes()))
                .map(|_| ())
                .unwrap_err();
            // The magic says what kind of file this is; every other byte authenticates.
            if pos < MAGIC.len() {
                assert!(
                    matches!(err, ContainerError::BadMagic { .. }),
                    "flip at {pos}: {err}"
                );
            } else {
                assert!(err.is_integrity(), "flip at {pos}: {err}");
            }
        }
    }

    #[test]
    fn authenticated_plaintext_needs_its_key_and_no_key_means_no_downgrade() {
        let m = model();
        let key = Key::generate(Algorithm::Aes128).unwrap();
        let mut o = options(Some(&key), Mode::Ctr, false);
        o.authenticate_only = true;
        let bytes = write(&m, &o).unwrap();
        // The weights are in plaintext, the file is authenticated with the key.
        let w = m.constant_bytes(1).unwrap();
        assert!(bytes.windows(64).any(|win| win == &w[..64]));
        let (c, keys) = Container::open(&bytes, Some(key.as_bytes())).unwrap();
        assert!(!c.is_encrypted() && c.header.crypto.is_keyed());
        let plain = c.decrypt_field(keys.as_ref(), 0).unwrap();
        assert_eq!(&plain[..w.len()], w);
        assert!(matches!(
            Container::open(&bytes, None).unwrap_err(),
            ContainerError::KeyRequired { algorithm: None }
        ));
        let other = Key::generate(Algorithm::Aes128).unwrap();
        assert!(
            Container::open(&bytes, Some(other.as_bytes()))
                .unwrap_err()
                .is_integrity()
        );
        // Every byte is covered, as in an encrypted file.
        for pos in 8..bytes.len() {
            let mut b = bytes.clone();
            b[pos] ^= 0x01;
            assert!(
                Container::open(&b, Some(key.as_bytes())).is_err(),
                "flip at {pos}"
            );
        }
        // A file with digests only is refused whenever a key is given: anyone could have
        // written it in place of the real one.
        let plain_file = write(&m, &options(None, Mode::Ctr, false)).unwrap();
        Container::open(&plain_file, None).unwrap();
        assert!(matches!(
            Container::open(&plain_file, Some(key.as_bytes())).unwrap_err(),
            ContainerError::NotAuthenticated
        ));
        assert!(matches!(
            authenticate(&plain_file, Some(key.as_bytes())).unwrap_err(),
            ContainerError::NotAuthenticated
        ));
    }

    #[test]
    fn sections_other_than_the_weights_lie_in_the_authenticated_region() {
        let m = model();
        let key = Key::generate(Algorithm::Aes128).unwrap();
        let mut o = options(Some(&key), Mode::Ctr, false);
        o.extra_sections = vec![(SectionKind::ExecutionPlan, vec![7u8; 40])];
        let mut bytes = write(&m, &o).unwrap();
        let c = Container::parse(&bytes).unwrap();
        let weights = *c
            .sections
            .iter()
            .find(|s| s.kind == SectionKind::Weights as u32)
            .unwrap();
        let plan_index = c
            .sections
            .iter()
            .position(|s| s.kind == SectionKind::ExecutionPlan as u32)
            .unwrap();
        // Point the plan at the weight section's bytes (after the metadata region).
        let entry = c.header.section_table_offset as usize + plan_index * SECTION_ENTRY_SIZE;
        bytes[entry + 8..entry + 16].copy_from_slice(&weights.offset.to_le_bytes());
        reseal(&mut bytes, Some(key.as_bytes())).unwrap();
        let err = Container::open(&bytes, Some(key.as_bytes())).unwrap_err();
        assert!(err.to_string().contains("authenticated"), "{err}");
    }

    #[test]
    fn resealing_makes_any_edit_authenticate() {
        let m = model();
        let key = Key::generate(Algorithm::Sm4).unwrap();
        let mut bytes = write(&m, &options(Some(&key), Mode::Cbc, false)).unwrap();
        let c = Container::parse(&bytes).unwrap();
        let field = c.fields[0].unwrap();
        bytes[field.offset as usize + 3] ^= 0x20;
        assert!(Container::open(&bytes, Some(key.as_bytes())).is_err());
        reseal(&mut bytes, Some(key.as_bytes())).unwrap();
        Container::open(&bytes, Some(key.as_bytes())).unwrap();
    }

    #[test]
    fn truncation_at_every_length_is_an_error() {
        let m = model();
        let bytes = write(&m, &options(None, Mode::Ctr, false)).unwrap();
        for len in 0..bytes.len() {
            assert!(
                Container::parse(&bytes[..len]).is_err(),
                "truncation to {len} went unnoticed"
            );
        }
    }
}
