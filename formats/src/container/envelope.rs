//! Format 1.3: envelope encryption and signatures (docs/FORMAT.md, *Key block* and
//! *Signature*).
//!
//! Every file with a key has a random 32-byte *data key*: the file's encryption,
//! authentication and IV keys derive from it exactly as they derived from the master key
//! in 1.2. The data key itself is stored only wrapped, once per recipient, in the *key
//! block*: under a key-encryption key derived from a symmetric master key (AES key
//! wrap), or for a device's X25519 public key (HPKE). The key block and an optional
//! *signature block* form the file's trailer, after the weights, so that changing
//! recipients (`nnc rewrap`) rewrites only the trailer, the header's trailer lengths and
//! the metadata tag: every weight field keeps its bytes and its offset.
//!
//! The trailer is read before authentication (a reader needs the data key to check the
//! metadata tag) and is not under that tag: a key block that was altered either does
//! not unwrap or gives a data key under which the metadata tag fails. A signature covers
//! everything but the trailer, the header's trailer lengths, file size, key identifier
//! and tag, so it survives rewrapping.

use zeroize::Zeroizing;

use super::binary::{Reader, Writer};
use super::{ContainerError, HEADER_SIZE, TAG_OFFSET, key_id, label};
use crate::crypto::{self, KeyAlgorithm, PrivateKey, PublicKey};

/// Header position of the trailer's offset (u64; the end of the weight section).
pub const TRAILER_OFFSET_AT: usize = 136;
/// Header position of the key block's length (u32).
pub const KEY_BLOCK_LEN_AT: usize = 144;
/// Header position of the signature block's length (u32).
pub const SIGNATURE_LEN_AT: usize = 148;
/// First reserved header byte of format 1.3.
pub const RESERVED_FROM: usize = 152;

/// Length of every data key.
pub const DATA_KEY_LEN: usize = 32;
/// The most trailer bytes a reader copies (64 recipients and a signature with a long
/// statement fit many times over).
pub const MAX_TRAILER_LEN: u64 = 1 << 20;
/// The most recipients a key block holds.
pub const MAX_RECIPIENTS: usize = 64;
/// The longest provenance statement a signature block holds.
pub const MAX_STATEMENT_LEN: usize = 256 << 10;

const KEY_BLOCK_MAGIC: &[u8; 4] = b"NKEY";
const SIGNATURE_MAGIC: &[u8; 4] = b"NSIG";
const BLOCK_VERSION: u16 = 1;

/// Where a 1.3 file's trailer lies, from fixed header positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
pub struct Trailer {
    /// Offset of the key block (the signature block follows it); the end of the weights.
    pub offset: u64,
    pub key_block_len: u32,
    pub signature_len: u32,
}

impl Trailer {
    /// The trailer fields of a header (the first 256 bytes of a 1.3 file).
    pub fn of_header(header: &[u8]) -> Trailer {
        // Zero (no trailer) where the bytes are shorter than the header.
        let field = |at: usize, len: usize| -> u64 {
            header.get(at..at + len).map_or(0, |b| {
                b.iter()
                    .rev()
                    .fold(0u64, |acc, &x| (acc << 8) | u64::from(x))
            })
        };
        Trailer {
            offset: field(TRAILER_OFFSET_AT, 8),
            key_block_len: field(KEY_BLOCK_LEN_AT, 4) as u32,
            signature_len: field(SIGNATURE_LEN_AT, 4) as u32,
        }
    }

    /// Writes the trailer fields into a header.
    pub fn store(&self, header: &mut [u8]) {
        header[TRAILER_OFFSET_AT..TRAILER_OFFSET_AT + 8]
            .copy_from_slice(&self.offset.to_le_bytes());
        header[KEY_BLOCK_LEN_AT..KEY_BLOCK_LEN_AT + 4]
            .copy_from_slice(&self.key_block_len.to_le_bytes());
        header[SIGNATURE_LEN_AT..SIGNATURE_LEN_AT + 4]
            .copy_from_slice(&self.signature_len.to_le_bytes());
    }

    pub fn len(&self) -> u64 {
        u64::from(self.key_block_len) + u64::from(self.signature_len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks the trailer against the file: it starts at or after the metadata region,
    /// ends exactly at the end of the file, and is at most [`MAX_TRAILER_LEN`] bytes.
    pub fn check(&self, metadata_length: u64, file_len: u64) -> Result<(), ContainerError> {
        let bad = |message: String| ContainerError::HeaderField {
            field: "trailer",
            message,
        };
        if self.len() > MAX_TRAILER_LEN {
            return Err(bad(format!(
                "is {} bytes, more than the {MAX_TRAILER_LEN} a reader accepts",
                self.len()
            )));
        }
        if self.offset < metadata_length {
            return Err(bad(format!(
                "starts at {}, inside the metadata region (which ends at {metadata_length})",
                self.offset
            )));
        }
        let end = self.offset.checked_add(self.len());
        if end.is_none_or(|end| end > file_len) {
            return Err(ContainerError::Truncated {
                what: "the trailer (key block and signature)".into(),
                needed: end.unwrap_or(u64::MAX),
                available: file_len,
            });
        }
        if end != Some(file_len) {
            return Err(bad(format!(
                "at {} with {} bytes does not end at the end of the file ({file_len} bytes)",
                self.offset,
                self.len()
            )));
        }
        Ok(())
    }
}

/// A trailer block's writer, its magic and version written.
fn block_writer(magic: &[u8; 4]) -> Writer {
    let mut w = Writer::default();
    w.bytes(magic);
    w.u16(BLOCK_VERSION);
    w
}

/// A trailer block's reader, its magic and version checked.
fn block_reader<'a>(
    bytes: &'a [u8],
    what: &'static str,
    magic: &[u8; 4],
) -> Result<Reader<'a>, ContainerError> {
    let mut r = Reader::new(bytes, what);
    if r.take(4, "magic")? != magic {
        return Err(r.fail(
            "magic",
            format!("is not \"{}\"", String::from_utf8_lossy(magic)),
        ));
    }
    let version = r.u16("version")?;
    if version != BLOCK_VERSION {
        return Err(r.fail("version", format!("is {version}, expected {BLOCK_VERSION}")));
    }
    Ok(r)
}

/// How a recipient's copy of the data key is wrapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecipientKind {
    /// AES-256 key wrap (RFC 3394) under a key derived from a symmetric master key.
    MasterKey,
    /// HPKE base mode for a device's X25519 public key (RFC 9180).
    X25519,
    /// SM2 public-key encryption (GB/T 32918.4, C1C3C2) for a device's SM2 key.
    Sm2,
}

impl RecipientKind {
    fn code(self) -> u8 {
        match self {
            RecipientKind::MasterKey => 1,
            RecipientKind::X25519 => 2,
            RecipientKind::Sm2 => 3,
        }
    }

    fn from_code(code: u8) -> Option<RecipientKind> {
        match code {
            1 => Some(RecipientKind::MasterKey),
            2 => Some(RecipientKind::X25519),
            3 => Some(RecipientKind::Sm2),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RecipientKind::MasterKey => "master key (AES-256 key wrap)",
            RecipientKind::X25519 => "x25519 device key (HPKE)",
            RecipientKind::Sm2 => "sm2 device key (SM2 encryption)",
        }
    }
}

/// One wrapped copy of the data key.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Recipient {
    pub kind: RecipientKind,
    /// The master key's identifier ([`key_id`]) or the device key's ([`device_key_id`]).
    #[serde(serialize_with = "hex_ser")]
    pub key_id: [u8; 16],
    /// HPKE's encapsulated key (empty for a master key).
    #[serde(skip)]
    pub encapsulated: Vec<u8>,
    #[serde(skip)]
    pub wrapped: Vec<u8>,
}

fn hex_ser<S: serde::Serializer>(v: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(v))
}

/// The identifier a file gives a device key: its fingerprint's first 16 bytes
/// ([`PublicKey::key_id`]).
pub fn device_key_id(key: &PublicKey) -> [u8; 16] {
    key.key_id()
}

/// The recipients of a file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyBlock {
    pub recipients: Vec<Recipient>,
}

impl KeyBlock {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = block_writer(KEY_BLOCK_MAGIC);
        w.u16(self.recipients.len() as u16);
        for r in &self.recipients {
            w.u8(r.kind.code());
            w.bytes(&[0; 3]);
            w.bytes(&r.key_id);
            w.u16(r.encapsulated.len() as u16);
            w.bytes(&r.encapsulated);
            w.u16(r.wrapped.len() as u16);
            w.bytes(&r.wrapped);
        }
        w.buf
    }

    /// Decodes a key block; every count is bounded by the bytes that remain.
    pub fn decode(bytes: &[u8]) -> Result<KeyBlock, ContainerError> {
        let mut r = block_reader(bytes, "key block", KEY_BLOCK_MAGIC)?;
        let count = usize::from(r.u16("recipient_count")?);
        if count == 0 || count > MAX_RECIPIENTS {
            return Err(r.fail(
                "recipient_count",
                format!("is {count}, expected 1..={MAX_RECIPIENTS}"),
            ));
        }
        let mut recipients = Vec::with_capacity(count);
        for _ in 0..count {
            let code = r.u8("kind")?;
            let kind = RecipientKind::from_code(code)
                .ok_or_else(|| r.fail("kind", format!("is {code}, expected 1, 2 or 3")))?;
            if r.take(3, "reserved")?.iter().any(|&b| b != 0) {
                return Err(r.fail("reserved", "must be zero"));
            }
            let key_id = r.array("key_id")?;
            let n = usize::from(r.u16("encapsulated_length")?);
            let encapsulated = r.take(n, "encapsulated")?.to_vec();
            let n = usize::from(r.u16("wrapped_length")?);
            let wrapped = r.take(n, "wrapped")?.to_vec();
            recipients.push(Recipient {
                kind,
                key_id,
                encapsulated,
                wrapped,
            });
        }
        r.expect_end()?;
        Ok(KeyBlock { recipients })
    }
}

/// What the user gave to open a file: a symmetric master key (16, 24 or 32 bytes) or a
/// device's private key (PKCS#8 DER, as a key file's PEM decodes to). One byte string
/// names both, so every API that took a master key takes a device key unchanged.
pub enum Opener {
    Master(Zeroizing<Vec<u8>>),
    Device(Box<PrivateKey>),
}

impl Opener {
    /// Classifies key bytes: 16, 24 or 32 bytes are a master key, anything else must be a
    /// PKCS#8 private key.
    pub fn from_bytes(key: &[u8]) -> Result<Opener, ContainerError> {
        if matches!(key.len(), 16 | 24 | 32) {
            return Ok(Opener::Master(Zeroizing::new(key.to_vec())));
        }
        let private = PrivateKey::from_pkcs8_der(key)?;
        if !private.algorithm().receives() {
            return Err(crypto::CryptoError::KeyPurpose {
                algorithm: private.algorithm().name(),
                purpose: "opening a model (it is a signing key: give a device's x25519 or \
                          sm2 key, or the model's symmetric key)",
            }
            .into());
        }
        Ok(Opener::Device(Box::new(private)))
    }

    /// The identifier a key block lists this key under.
    pub fn key_id(&self) -> Result<[u8; 16], ContainerError> {
        match self {
            Opener::Master(k) => key_id(k),
            Opener::Device(sk) => Ok(device_key_id(&sk.public_key())),
        }
    }
}

/// The cipher binding `c` of the header (algorithm and mode bytes).
fn cipher_binding(header: &[u8]) -> [u8; 2] {
    [header[72], header[73]]
}

/// The key-encryption key a master key wraps data keys under, per file (its salt) and
/// per cipher.
fn key_wrapping_key(
    master: &[u8],
    salt: &[u8; 32],
    c: [u8; 2],
) -> Result<Zeroizing<Vec<u8>>, ContainerError> {
    Ok(crypto::hkdf_sha256(
        master,
        salt,
        &[label::KEY_WRAPPING, &c].concat(),
        32,
    )?)
}

/// HPKE's `info` and associated data: the cipher binding and the file's salt, so a
/// wrapped key cannot be moved to another file or cipher.
fn hpke_context(salt: &[u8; 32], c: [u8; 2]) -> (Vec<u8>, Vec<u8>) {
    ([label::HPKE_INFO, &c].concat(), salt.to_vec())
}

/// Wraps `data_key` for a master key.
pub fn wrap_for_master(
    master: &[u8],
    data_key: &[u8],
    salt: &[u8; 32],
    c: [u8; 2],
) -> Result<Recipient, ContainerError> {
    let kek = key_wrapping_key(master, salt, c)?;
    Ok(Recipient {
        kind: RecipientKind::MasterKey,
        key_id: key_id(master)?,
        encapsulated: Vec::new(),
        wrapped: crypto::aes_key_wrap(&kek, data_key)?,
    })
}

/// Wraps `data_key` for a device's public key.
pub fn wrap_for_device(
    device: &PublicKey,
    data_key: &[u8],
    salt: &[u8; 32],
    c: [u8; 2],
) -> Result<Recipient, ContainerError> {
    let (info, aad) = hpke_context(salt, c);
    let (encapsulated, wrapped) = device.seal_data_key(data_key, &info, &aad)?;
    Ok(Recipient {
        kind: device_kind(device.algorithm()),
        key_id: device_key_id(device),
        encapsulated,
        wrapped,
    })
}

/// How a device key of `algorithm` receives data keys.
fn device_kind(algorithm: KeyAlgorithm) -> RecipientKind {
    if algorithm == KeyAlgorithm::Sm2 {
        RecipientKind::Sm2
    } else {
        RecipientKind::X25519
    }
}

/// The data key of a 1.3 file whose metadata copy (header first, trailer appended) is
/// `meta`, opened with `opener`.
///
/// # Errors
///
/// [`ContainerError::NotARecipient`] when no recipient has the key's identifier;
/// [`ContainerError::Integrity`] when the key block is malformed or its entry for this
/// key does not unwrap (a tampered file, or a key that only shares the identifier).
pub fn open_data_key(
    meta: &[u8],
    metadata_length: u64,
    opener: &Opener,
) -> Result<Zeroizing<Vec<u8>>, ContainerError> {
    let trailer = Trailer::of_header(meta);
    let start = usize::try_from(metadata_length).unwrap_or(usize::MAX);
    let end = start.saturating_add(trailer.key_block_len as usize);
    let tampered = || ContainerError::Integrity {
        what: "the key block".into(),
    };
    let bytes = meta.get(start..end).ok_or_else(tampered)?;
    let block = KeyBlock::decode(bytes).map_err(|_| tampered())?;
    let id = opener.key_id()?;
    let wanted = match opener {
        Opener::Master(_) => RecipientKind::MasterKey,
        Opener::Device(sk) => device_kind(sk.algorithm()),
    };
    let Some(entry) = block
        .recipients
        .iter()
        .find(|r| r.kind == wanted && crypto::ct_eq(&r.key_id, &id))
    else {
        // A symmetric key that is not the file's reads as every wrong key always has.
        if matches!(opener, Opener::Master(_))
            && block
                .recipients
                .iter()
                .any(|r| r.kind == RecipientKind::MasterKey)
        {
            return Err(ContainerError::Integrity {
                what: "the key identifier".into(),
            });
        }
        return Err(ContainerError::NotARecipient {
            key: hex::encode(id),
            recipients: block
                .recipients
                .iter()
                .map(|r| hex::encode(r.key_id))
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    let mut salt = [0u8; 32];
    salt.copy_from_slice(&meta[96..128]);
    let c = cipher_binding(meta);
    let data_key = match opener {
        Opener::Master(master) => {
            let kek = key_wrapping_key(master, &salt, c)?;
            crypto::aes_key_unwrap(&kek, &entry.wrapped).map_err(|_| tampered())?
        }
        Opener::Device(sk) => {
            let (info, aad) = hpke_context(&salt, c);
            sk.open_data_key(&entry.encapsulated, &entry.wrapped, &info, &aad)
                .map_err(|_| tampered())?
        }
    };
    if data_key.len() != DATA_KEY_LEN {
        return Err(tampered());
    }
    Ok(data_key)
}

/// A new data key: random, or for a reproducible file a keyed PRF of the content under
/// the master key (so the same model, options and key give the same file).
pub fn new_data_key(
    reproducible_master: Option<&[u8]>,
    c: [u8; 2],
    content_digest: &[u8; 32],
) -> Result<Zeroizing<Vec<u8>>, ContainerError> {
    Ok(Zeroizing::new(match reproducible_master {
        Some(master) => {
            crypto::hmac_sha256(master, &[label::REPRODUCIBLE_DATA_KEY, &c, content_digest])
                .to_vec()
        }
        None => crypto::try_random_bytes::<DATA_KEY_LEN>()?.to_vec(),
    }))
}

/// The signature block: who signed, what they state about the build, and the signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureBlock {
    pub signer: PublicKey,
    /// The provenance statement (UTF-8 JSON: source digest, compiler, options, devices).
    pub statement: Vec<u8>,
    pub signature: Vec<u8>,
}

impl SignatureBlock {
    /// Signs a file's content digest and a statement.
    pub fn sign(
        signer: &PrivateKey,
        content_digest: &[u8; 32],
        statement: Vec<u8>,
    ) -> Result<SignatureBlock, ContainerError> {
        let public = signer.public_key();
        let message = signed_message(public.algorithm(), content_digest, &statement);
        let signature = signer.sign(&message)?;
        Ok(SignatureBlock {
            signer: public,
            statement,
            signature,
        })
    }

    /// Whether the signature holds over `content_digest` and the statement.
    pub fn holds(&self, content_digest: &[u8; 32]) -> bool {
        let message = signed_message(self.signer.algorithm(), content_digest, &self.statement);
        self.signer.verify(&message, &self.signature)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = block_writer(SIGNATURE_MAGIC);
        w.u16(self.signer.algorithm().signature_code().unwrap_or(0));
        let raw = self.signer.raw();
        w.u16(raw.len() as u16);
        w.bytes(&raw);
        w.u32(self.statement.len() as u32);
        w.bytes(&self.statement);
        w.u16(self.signature.len() as u16);
        w.bytes(&self.signature);
        w.buf
    }

    pub fn decode(bytes: &[u8]) -> Result<SignatureBlock, ContainerError> {
        let mut r = block_reader(bytes, "signature block", SIGNATURE_MAGIC)?;
        let code = r.u16("algorithm")?;
        let algorithm = KeyAlgorithm::from_signature_code(code)
            .ok_or_else(|| r.fail("algorithm", format!("is {code}, expected 1 or 2")))?;
        let n = usize::from(r.u16("public_key_length")?);
        let raw = r.take(n, "public_key")?;
        let signer =
            PublicKey::from_raw(algorithm, raw).map_err(|e| r.fail("public_key", e.to_string()))?;
        let n = r.u32("statement_length")? as usize;
        if n > MAX_STATEMENT_LEN {
            return Err(r.fail(
                "statement_length",
                format!("is {n}, more than {MAX_STATEMENT_LEN}"),
            ));
        }
        let statement = r.take(n, "statement")?.to_vec();
        let n = usize::from(r.u16("signature_length")?);
        let signature = r.take(n, "signature")?.to_vec();
        r.expect_end()?;
        Ok(SignatureBlock {
            signer,
            statement,
            signature,
        })
    }
}

/// What a signature signs: the scheme, the content digest and the statement's digest.
fn signed_message(algorithm: KeyAlgorithm, content_digest: &[u8; 32], statement: &[u8]) -> Vec<u8> {
    let code = algorithm.signature_code().unwrap_or(0);
    [
        label::SIGNATURE,
        &code.to_le_bytes(),
        content_digest,
        &crypto::sha256(&[statement]),
    ]
    .concat()
}

/// The digest of a file's weight section `[start, end)` (the metadata length to the
/// trailer), every stored byte including the zero padding between fields, read through
/// `read(offset, buffer)` in 1 MiB pieces. Needs no parsing, so a signature is checked
/// before anything in the file is interpreted.
pub fn weights_digest<E>(
    start: u64,
    end: u64,
    mut read: impl FnMut(u64, &mut [u8]) -> Result<(), E>,
) -> Result<[u8; 32], E> {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    hasher.update(label::WEIGHTS);
    let mut buf = vec![0u8; (end.saturating_sub(start)).min(1 << 20) as usize];
    let mut at = start;
    while at < end {
        let n = (end - at).min(buf.len() as u64) as usize;
        read(at, &mut buf[..n])?;
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hasher.finalize().into())
}

/// The digest a signature covers, over a file's metadata region `region` (`[0,
/// metadata_length)`) and the SHA-256 of its weight section (`weights_digest`): the
/// header with its file size, key identifier, trailer lengths and tag zeroed (the
/// things `rewrap` changes), then the rest of the region.
pub fn content_digest(region: &[u8], weights_digest: &[u8; 32]) -> [u8; 32] {
    let mut header = [0u8; HEADER_SIZE];
    header.copy_from_slice(&region[..HEADER_SIZE]);
    header[16..24].fill(0);
    header[80..96].fill(0);
    header[KEY_BLOCK_LEN_AT..RESERVED_FROM].fill(0);
    header[TAG_OFFSET..].fill(0);
    crypto::sha256(&[
        label::CONTENT,
        &header,
        &region[HEADER_SIZE..],
        weights_digest,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_block_round_trips_and_refuses_garbage() {
        let block = KeyBlock {
            recipients: vec![
                Recipient {
                    kind: RecipientKind::MasterKey,
                    key_id: [1; 16],
                    encapsulated: vec![],
                    wrapped: vec![9; 40],
                },
                Recipient {
                    kind: RecipientKind::X25519,
                    key_id: [2; 16],
                    encapsulated: vec![3; 32],
                    wrapped: vec![4; 48],
                },
            ],
        };
        let bytes = block.encode();
        assert_eq!(KeyBlock::decode(&bytes).unwrap(), block);
        for cut in 0..bytes.len() {
            assert!(KeyBlock::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(KeyBlock::decode(&extra).is_err());
        let mut kind = bytes;
        kind[8] = 7;
        assert!(KeyBlock::decode(&kind).is_err());
    }

    #[test]
    fn signature_block_round_trips_and_binds_statement() {
        for algorithm in [KeyAlgorithm::Ed25519, KeyAlgorithm::EcdsaP256] {
            let signer = PrivateKey::generate(algorithm).unwrap();
            let digest = [5u8; 32];
            let block = SignatureBlock::sign(&signer, &digest, b"{\"a\":1}".to_vec()).unwrap();
            let back = SignatureBlock::decode(&block.encode()).unwrap();
            assert_eq!(back, block);
            assert!(back.holds(&digest));
            assert!(!back.holds(&[6u8; 32]));
            let mut other = back.clone();
            other.statement = b"{\"a\":2}".to_vec();
            assert!(!other.holds(&digest));
        }
    }
}
