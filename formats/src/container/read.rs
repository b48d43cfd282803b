//! Reading `.nnc` files: structural parsing (no key needed), verification, and per-field
//! decryption.

use zeroize::Zeroizing;

use super::binary::Reader;
use super::envelope::{self, KeyBlock, Opener, RESERVED_FROM, SignatureBlock, Trailer};
use super::source::Source;
use super::{
    ALIGNMENT, ContainerError, CryptoConfig, Derivation, FLAG_ENCRYPTED, FLAG_SEGMENTED,
    FORMAT_MAJOR, FORMAT_MINOR, FORMAT_MINOR_ENVELOPE, FORMAT_MINOR_SUBGRAPHS, FileKeys,
    HEADER_SIZE, Header, Integrity, KNOWN_FLAGS, MAGIC, MAX_SECTIONS, METADATA_LENGTH_OFFSET,
    SECTION_ENTRY_SIZE, SECTION_REQUIRED, SectionEntry, SectionKind, TAG_OFFSET, dtype_from_code,
    field_binding, gcm_nonce, key_id, label, stored_field_tag, tag,
};
use crate::crypto::{self, Algorithm, Mode, Padding};
use crate::nn::{
    ChannelQuant, DataLocation, IoInfo, Lifetime, Model, Operand, OperandType, Operation,
    OperationType, Pool, Subgraph,
};

/// Where a temporary lives in the activation arena (the compiler's memory plan).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ArenaSlot {
    pub offset: u64,
    pub size: u64,
}

/// The storage info of one operation's weight field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WeightField {
    /// Index among the file's fields (the order of operations that own one).
    pub index: u32,
    /// Absolute offset of the ciphertext in the file.
    pub offset: u64,
    /// Ciphertext length.
    pub length: u64,
    pub plaintext_length: u64,
    #[serde(serialize_with = "hex16")]
    pub iv: [u8; 16],
    #[serde(serialize_with = "hex32")]
    pub tag: [u8; 32],
}

fn hex16<S: serde::Serializer>(v: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(v))
}
fn hex32<S: serde::Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(v))
}

/// A parsed `.nnc` file. Parsing checks the structure completely (every count, offset,
/// length, code and the stored graph); [`Container::verify`] then checks authenticity.
///
/// Everything before the weights (header, section table, operator info, execution plan)
/// is read from a private copy taken once, so a file that another process changes cannot
/// show one set of bytes to authentication and another to the parser. Each weight field
/// is read from the file into a private buffer, checked against its tag there, and used
/// (decrypted) from that buffer only, every time it is read.
#[derive(Debug)]
pub struct Container<'a> {
    stored: Stored<'a>,
    /// The metadata region `[0, metadata_length)`, copied.
    meta: Vec<u8>,
    pub header: Header,
    pub sections: Vec<SectionEntry>,
    /// The graph. Constant weights are not at hand: pool `i` is operation `i`'s field
    /// (opaque, sized by its plaintext length).
    pub model: Model,
    /// Per operation, its weight field.
    pub fields: Vec<Option<WeightField>>,
    /// Total activation-arena size from the compiler's memory plan, when static.
    pub arena_size: Option<u64>,
    /// Per operand, its arena slot (temporaries of a static plan).
    pub arena: Vec<Option<ArenaSlot>>,
    /// Per operation with a field, where its tag sits in the file (for [`reseal`]).
    tag_offsets: Vec<Option<u64>>,
}

/// Where a container's weight fields are read from: the file's bytes in memory, or a
/// [`Source`] read at offsets.
#[derive(Clone, Copy)]
enum Stored<'a> {
    Memory(&'a [u8]),
    Source(&'a dyn Source),
}

impl std::fmt::Debug for Stored<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stored::Memory(b) => write!(f, "Memory({} bytes)", b.len()),
            Stored::Source(s) => write!(f, "Source({} bytes)", s.len()),
        }
    }
}

impl<'a> Stored<'a> {
    fn len(self) -> u64 {
        match self {
            Stored::Memory(b) => b.len() as u64,
            Stored::Source(s) => s.len(),
        }
    }

    fn memory(self) -> Option<&'a [u8]> {
        match self {
            Stored::Memory(b) => Some(b),
            Stored::Source(s) => s.in_memory(),
        }
    }

    /// The offset of the first non-zero byte in `[a, b)`, read in chunks.
    fn first_nonzero(self, a: u64, b: u64, what: &str) -> Result<Option<u64>, ContainerError> {
        if b <= a {
            return Ok(None);
        }
        if let Some(bytes) = self.memory() {
            let region = bytes.get(a as usize..b as usize).unwrap_or_default();
            return Ok(region.iter().position(|&x| x != 0).map(|k| a + k as u64));
        }
        let Stored::Source(src) = self else {
            return Ok(None);
        };
        const CHUNK: u64 = 64 << 10;
        let mut buf = vec![0u8; (b - a).min(CHUNK) as usize];
        let mut pos = a;
        while pos < b {
            let n = (b - pos).min(CHUNK) as usize;
            src.read_at(pos, &mut buf[..n], &|| what.to_string())?;
            if let Some(k) = buf[..n].iter().position(|&x| x != 0) {
                return Ok(Some(pos + k as u64));
            }
            pos += n as u64;
        }
        Ok(None)
    }
}

/// A copy of the metadata region of `bytes`: its length is read once from the header
/// and bounded by the file, and the region is copied in one go.
pub fn copy_metadata(bytes: &[u8]) -> Result<Vec<u8>, ContainerError> {
    copy_metadata_from(bytes)
}

/// [`copy_metadata`] from any [`Source`]: the header is read once, and the rest of the
/// region after it.
pub fn copy_metadata_from<S: Source + ?Sized>(src: &S) -> Result<Vec<u8>, ContainerError> {
    let file_len = src.len();
    let mut header = [0u8; HEADER_SIZE];
    let head = file_len.min(HEADER_SIZE as u64) as usize;
    src.read_at(0, &mut header[..head], &|| "the header".into())?;
    if head < 8 || header[..8] != MAGIC {
        return Err(ContainerError::BadMagic { expected: MAGIC });
    }
    if head < HEADER_SIZE {
        return Err(ContainerError::Truncated {
            what: "the header".into(),
            needed: HEADER_SIZE as u64,
            available: file_len,
        });
    }
    let mut length = [0u8; 8];
    length.copy_from_slice(&header[METADATA_LENGTH_OFFSET..METADATA_LENGTH_OFFSET + 8]);
    let metadata_length = u64::from_le_bytes(length);
    if metadata_length > file_len {
        return Err(ContainerError::Truncated {
            what: "the metadata region (header field 'metadata_length')".into(),
            needed: metadata_length,
            available: file_len,
        });
    }
    if metadata_length < HEADER_SIZE as u64 {
        return Err(ContainerError::HeaderField {
            field: "metadata_length",
            message: format!("is {metadata_length}, less than the {HEADER_SIZE}-byte header"),
        });
    }
    // Format 1.3: the trailer (key block, signature) is copied too, after the region:
    // a reader needs the key block before it can authenticate anything.
    let trailer = if u16::from_le_bytes([header[10], header[11]]) >= FORMAT_MINOR_ENVELOPE {
        // The trailer is found from the end of the file the header describes.
        check_file_size(
            u64::from_le_bytes(header[16..24].try_into().unwrap_or([0; 8])),
            file_len,
        )?;
        let t = Trailer::of_header(&header);
        t.check(metadata_length, file_len)?;
        Some(t)
    } else {
        None
    };
    let trailer_len = trailer.map_or(0, |t| t.len()) as usize;
    // The header is read once, so the copy describes itself: its length fields are the
    // lengths that were copied.
    let region = metadata_length as usize;
    let mut meta = vec![0u8; region + trailer_len];
    meta[..HEADER_SIZE].copy_from_slice(&header);
    src.read_at(HEADER_SIZE as u64, &mut meta[HEADER_SIZE..region], &|| {
        "the metadata region".into()
    })?;
    if let Some(t) = trailer {
        src.read_at(t.offset, &mut meta[region..], &|| {
            "the trailer (key block and signature)".into()
        })?;
    }
    Ok(meta)
}

impl<'a> Container<'a> {
    /// Parses a file held in memory. Authenticity is not checked:
    /// see [`Container::authenticated`] and [`Container::verify`].
    pub fn parse(bytes: &'a [u8]) -> Result<Container<'a>, ContainerError> {
        let meta = copy_metadata(bytes)?;
        Container::parse_with_metadata(bytes, meta)
    }

    /// Parses a file whose metadata region was copied by [`copy_metadata`] (and perhaps
    /// authenticated with [`authenticate_metadata`]): the structure comes from `meta`,
    /// weight fields from `bytes`.
    pub fn parse_with_metadata(
        bytes: &'a [u8],
        meta: Vec<u8>,
    ) -> Result<Container<'a>, ContainerError> {
        Container::parse_stored(Stored::Memory(bytes), meta)
    }

    /// [`Container::parse_with_metadata`] of a file read from `source` (metadata copied by
    /// [`copy_metadata_from`]): weight fields are read from it at offsets, each into a
    /// buffer of the reader's own.
    pub fn parse_source(
        source: &'a dyn Source,
        meta: Vec<u8>,
    ) -> Result<Container<'a>, ContainerError> {
        Container::parse_stored(Stored::Source(source), meta)
    }

    fn parse_stored(stored: Stored<'a>, meta: Vec<u8>) -> Result<Container<'a>, ContainerError> {
        let file_len = stored.len();
        let header = parse_header(&meta, file_len)?;
        // Sections lie in the metadata region and, for the weights, before the trailer.
        let region = meta.get(..header.metadata_length as usize).ok_or_else(|| {
            ContainerError::HeaderField {
                field: "metadata_length",
                message: "exceeds the copied metadata".into(),
            }
        })?;
        let data_end = if header.minor >= FORMAT_MINOR_ENVELOPE {
            header.trailer.offset
        } else {
            file_len
        };
        let sections = parse_sections(region, &header, data_end)?;
        let info_entry = *find(&sections, SectionKind::OperatorInfo)?;
        let weights_entry = *find(&sections, SectionKind::Weights)?;
        if header.metadata_length != weights_entry.offset {
            return Err(ContainerError::HeaderField {
                field: "metadata_length",
                message: format!(
                    "is {}, but the weight section starts at {}",
                    header.metadata_length, weights_entry.offset
                ),
            });
        }
        let info = slice(&meta, &info_entry);
        let mut parsed = parse_operator_info(info, info_entry.offset, &header, &weights_entry)?;
        if let Some(entry) = sections
            .iter()
            .find(|s| s.kind == SectionKind::Subgraphs as u32)
        {
            if header.minor < FORMAT_MINOR_SUBGRAPHS {
                return Err(ContainerError::Section {
                    index: sections.iter().position(|s| s == entry).unwrap_or(0),
                    kind: entry.kind_name(),
                    message: format!(
                        "needs format 1.{FORMAT_MINOR_SUBGRAPHS} or later, but the file is 1.{}",
                        header.minor
                    ),
                });
            }
            parse_subgraphs(
                slice(&meta, entry),
                entry.offset,
                &header,
                &weights_entry,
                &mut parsed,
            )?;
        }
        finish_model(&mut parsed)?;
        let (model, fields, arena_size, arena, tag_offsets) = parsed;
        let container = Container {
            stored,
            meta,
            header,
            sections,
            model,
            fields,
            arena_size,
            arena,
            tag_offsets,
        };
        container.check_padding()?;
        Ok(container)
    }

    /// Authenticates and parses a file: its metadata region is copied once, that copy is
    /// authenticated (key identifier and metadata tag, or the digest of a file without a
    /// key), and the same copy is parsed. Weight fields are not checked here (see
    /// [`Container::verify`]). Returns the container and its keys (`None` for a file
    /// without a key).
    pub fn authenticated(
        bytes: &'a [u8],
        master: Option<&[u8]>,
    ) -> Result<(Container<'a>, Option<FileKeys>), ContainerError> {
        let meta = copy_for_authentication(bytes)?;
        authenticate_metadata(&meta, master)?;
        let container = Container::parse_with_metadata(bytes, meta)?;
        let keys = container.keys(master)?;
        Ok((container, keys))
    }

    /// Opens a file for use: authenticates it first (so that any alteration is an
    /// integrity error, never a parse error), then parses it and verifies every weight
    /// field. Returns the container and its keys (`None` when unencrypted).
    pub fn open(
        bytes: &'a [u8],
        master: Option<&[u8]>,
    ) -> Result<(Container<'a>, Option<FileKeys>), ContainerError> {
        let (container, keys) = Container::authenticated(bytes, master)?;
        container.verify_with(keys.as_ref())?;
        Ok((container, keys))
    }

    /// The raw bytes of a file held in memory; empty for one read from a [`Source`]
    /// (see [`Container::file_len`]).
    pub fn bytes(&self) -> &'a [u8] {
        self.stored.memory().unwrap_or_default()
    }

    /// The file's length in bytes.
    pub fn file_len(&self) -> u64 {
        self.stored.len()
    }

    /// The bytes of a section, if present (the weight section from a file held in memory,
    /// `None` for one read from a [`Source`]; every other one from the authenticated
    /// copy).
    pub fn section(&self, kind: SectionKind) -> Option<&[u8]> {
        let s = self.sections.iter().find(|s| s.kind == kind as u32)?;
        if kind == SectionKind::Weights {
            Some(slice(self.stored.memory()?, s))
        } else {
            Some(slice(&self.meta, s))
        }
    }

    pub fn is_encrypted(&self) -> bool {
        self.header.crypto.is_encrypted()
    }

    /// The trailer's bytes from the metadata copy: (key block, signature block).
    fn trailer_bytes(&self) -> (&[u8], &[u8]) {
        let start = (self.header.metadata_length as usize).min(self.meta.len());
        let key_end = (start + self.header.trailer.key_block_len as usize).min(self.meta.len());
        (&self.meta[start..key_end], &self.meta[key_end..])
    }

    /// The recipients of a 1.3 file with a key (`None` otherwise). Not authenticated by
    /// itself: a recipient list that was altered fails when the file is opened.
    pub fn key_block(&self) -> Result<Option<KeyBlock>, ContainerError> {
        let (bytes, _) = self.trailer_bytes();
        if bytes.is_empty() {
            return Ok(None);
        }
        KeyBlock::decode(bytes).map(Some)
    }

    /// The signature block, if the file is signed (not yet checked: see
    /// [`Container::verify_signature`]).
    pub fn signature(&self) -> Result<Option<SignatureBlock>, ContainerError> {
        let (_, bytes) = self.trailer_bytes();
        if bytes.is_empty() {
            return Ok(None);
        }
        SignatureBlock::decode(bytes).map(Some)
    }

    /// Checks the file's signature against `trusted` public keys (see the free
    /// [`verify_signature`]).
    pub fn verify_signature(
        &self,
        trusted: &[crypto::PublicKey],
    ) -> Result<SignatureBlock, ContainerError> {
        match &self.stored {
            Stored::Memory(bytes) => verify_signature(*bytes, &self.meta, trusted),
            Stored::Source(src) => verify_signature(*src, &self.meta, trusted),
        }
    }

    /// The file's keys from the master key's bytes, after [`authenticate`] has checked
    /// the key identifier and the metadata tag: a wrong key and an altered header both
    /// fail as integrity errors before the header's algorithm is trusted. `None` for an
    /// unencrypted file (whose metadata digest was checked).
    pub fn keys(&self, master: Option<&[u8]>) -> Result<Option<FileKeys>, ContainerError> {
        let Some(keys) = authenticate_metadata(&self.meta, master)? else {
            return Ok(None);
        };
        // Authenticated plaintext: the keys authenticate, nothing decrypts.
        let Some(algorithm) = self.header.crypto.algorithm else {
            return Ok(Some(keys));
        };
        let master = master.unwrap_or_default();
        // The header is authentic: its algorithm is the one the key was made for (a 1.3
        // file's keys derive from its data key, whatever opened it).
        if self.header.minor < FORMAT_MINOR_ENVELOPE && master.len() != algorithm.key_len() {
            return Err(ContainerError::KeyAlgorithm {
                key: "a key of another length",
                file: algorithm.name(),
            });
        }
        Ok(Some(keys.with_encryption(algorithm)?))
    }

    /// Verifies the whole file: the key identifier, the metadata tag (every byte before
    /// the weights, including the field tags), every weight field, and the zero padding
    /// between fields. Nothing should be decrypted or executed before this succeeds.
    pub fn verify(&self, master: Option<&[u8]>) -> Result<(), ContainerError> {
        let keys = self.keys(master)?;
        self.verify_with(keys.as_ref())
    }

    /// [`Container::verify`] with keys already derived (and the metadata authenticated).
    fn verify_with(&self, keys: Option<&FileKeys>) -> Result<(), ContainerError> {
        let mut scratch = Vec::new();
        for index in 0..self.fields.len() {
            if self.fields[index].is_some() {
                self.verify_field(keys, index, &mut scratch)?;
            }
        }
        // Between fields the weight section holds only zero padding, which no field tag
        // covers: any other byte there is tampering.
        let weights = self
            .sections
            .iter()
            .find(|s| s.kind == SectionKind::Weights as u32)
            .ok_or(ContainerError::MissingSection("weights"))?;
        let mut spans: Vec<(u64, u64)> = self
            .fields
            .iter()
            .flatten()
            .map(|f| (f.offset, f.offset + f.length))
            .collect();
        spans.sort_unstable();
        let end = weights.offset + weights.length;
        let mut pos = weights.offset;
        for (start, stop) in spans.into_iter().chain(std::iter::once((end, end))) {
            if let Some(at) =
                self.stored
                    .first_nonzero(pos, start, "the zero padding between weight fields")?
            {
                return Err(ContainerError::Integrity {
                    what: format!("the zero padding at byte {at}"),
                });
            }
            pos = pos.max(stop);
        }
        Ok(())
    }

    /// Checks the tag of operation `op`'s field (read into `scratch` unless the file is
    /// in memory).
    pub fn verify_field(
        &self,
        keys: Option<&FileKeys>,
        op: usize,
        scratch: &mut Vec<u8>,
    ) -> Result<(), ContainerError> {
        let field = self.field(op)?;
        let label = self.operation_label(op);
        let mode = self.header.crypto.mode;
        match self.stored {
            Stored::Memory(b) => verify_field(b, &field, keys, mode, &label, scratch),
            Stored::Source(s) => verify_field(s, &field, keys, mode, &label, scratch),
        }
    }

    /// How errors name operation `op` (global numbering: main's operations, then each
    /// referenced subgraph's): `operation 7 (CONV_2D from node 'conv3')`.
    pub fn operation_label(&self, op: usize) -> String {
        match self
            .model
            .graphs()
            .flat_map(|g| g.operations.iter())
            .nth(op)
        {
            Some(o) if o.source.is_empty() => format!("operation {op} ({})", o.op_type),
            Some(o) => format!("operation {op} ({} from node '{}')", o.op_type, o.source),
            None => format!("operation {op}"),
        }
    }

    /// Where operation `op`'s field tag lies in the file (its IV is the 16 bytes
    /// before); `None` when it has no field.
    pub fn tag_offset(&self, op: usize) -> Option<u64> {
        self.tag_offsets.get(op).copied().flatten()
    }

    fn field(&self, op: usize) -> Result<WeightField, ContainerError> {
        self.fields
            .get(op)
            .copied()
            .flatten()
            .ok_or_else(|| ContainerError::WeightField {
                operation: op,
                message: "does not exist".into(),
            })
    }

    /// Decrypts operation `op`'s weight field into `out` (replacing its contents), after
    /// verifying its tag. `keys` comes from [`Container::keys`].
    pub fn decrypt_field_into(
        &self,
        keys: Option<&FileKeys>,
        op: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), ContainerError> {
        let field = self.field(op)?;
        let label = self.operation_label(op);
        let crypto = &self.header.crypto;
        match self.stored {
            Stored::Memory(b) => open_field(b, &field, keys, crypto, &label, out),
            Stored::Source(s) => open_field(s, &field, keys, crypto, &label, out),
        }
    }

    /// Decrypts operation `op`'s field into a new zeroizing buffer.
    pub fn decrypt_field(
        &self,
        keys: Option<&FileKeys>,
        op: usize,
    ) -> Result<Zeroizing<Vec<u8>>, ContainerError> {
        let mut out = Zeroizing::new(Vec::new());
        self.decrypt_field_into(keys, op, &mut out)?;
        Ok(out)
    }

    /// Every byte outside the header, the section table and the sections is zero
    /// padding; anything else would be data no reader interprets.
    fn check_padding(&self) -> Result<(), ContainerError> {
        let table = self.header.section_table_offset;
        let mut covered: Vec<(u64, u64)> = vec![
            (0, HEADER_SIZE as u64),
            (
                table,
                table + (self.sections.len() * SECTION_ENTRY_SIZE) as u64,
            ),
        ];
        covered.extend(
            self.sections
                .iter()
                .map(|s| (s.offset, s.offset + s.length)),
        );
        let trailer = self.header.trailer;
        if !trailer.is_empty() {
            covered.push((trailer.offset, trailer.offset + trailer.len()));
        }
        covered.sort_unstable();
        let file_end = self.stored.len();
        let meta_end = self.header.metadata_length;
        // The first non-zero byte of [a, b): the metadata copy below its end, the file
        // beyond it.
        let nonzero = |a: u64, b: u64| -> Result<Option<u64>, ContainerError> {
            let in_meta = (a < meta_end)
                .then(|| {
                    self.meta[a as usize..b.min(meta_end) as usize]
                        .iter()
                        .position(|&x| x != 0)
                        .map(|k| a + k as u64)
                })
                .flatten();
            match in_meta {
                Some(at) => Ok(Some(at)),
                None => {
                    self.stored
                        .first_nonzero(a.max(meta_end), b, "the padding after the sections")
                }
            }
        };
        let mut pos = 0u64;
        for (start, end) in covered
            .into_iter()
            .chain(std::iter::once((file_end, file_end)))
        {
            if start > pos
                && let Some(offset) = nonzero(pos, start)?
            {
                return Err(ContainerError::NonZeroPadding {
                    region: "the file",
                    offset,
                });
            }
            pos = pos.max(end);
        }
        let reserved = if self.header.minor >= FORMAT_MINOR_ENVELOPE {
            (RESERVED_FROM..TAG_OFFSET, "reserved (152..224)")
        } else {
            (136..TAG_OFFSET, "reserved (136..224)")
        };
        for (range, field) in [(76..80, "reserved (76..80)"), reserved] {
            if !newer_minor(self.header.minor) && self.meta[range].iter().any(|&b| b != 0) {
                return Err(ContainerError::HeaderField {
                    field,
                    message: "must be zero".into(),
                });
            }
        }
        Ok(())
    }
}

/// The header's `metadata_length` field (0 when the bytes are shorter than the header).
pub(super) fn metadata_length_of(header: &[u8]) -> u64 {
    header
        .get(METADATA_LENGTH_OFFSET..METADATA_LENGTH_OFFSET + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Checks the signature of the file in `src`, whose metadata copy (region and trailer,
/// [`copy_metadata_from`]) is `meta`, against `trusted` public keys, before anything in
/// the file is parsed: the file must be signed, by one of them, and the signature must
/// hold over the metadata region (but for what a rewrap changes), every byte of the weight
/// section and the provenance statement. Returns the signature block.
///
/// # Errors
///
/// [`ContainerError::Signature`] naming what failed (reading the weights may fail as a
/// read error).
pub fn verify_signature<S: Source + ?Sized>(
    src: &S,
    meta: &[u8],
    trusted: &[crypto::PublicKey],
) -> Result<SignatureBlock, ContainerError> {
    let unsigned = || {
        ContainerError::Signature(
            "the file is not signed, and --trust requires a signature by a trusted key".into(),
        )
    };
    if meta.len() < HEADER_SIZE || u16::from_le_bytes([meta[10], meta[11]]) < FORMAT_MINOR_ENVELOPE
    {
        return Err(unsigned());
    }
    let trailer = Trailer::of_header(meta);
    let metadata_length = metadata_length_of(meta);
    let region_end = usize::try_from(metadata_length).unwrap_or(usize::MAX);
    let signature_at = region_end.saturating_add(trailer.key_block_len as usize);
    let (Some(region), Some(bytes)) = (meta.get(..region_end), meta.get(signature_at..)) else {
        return Err(ContainerError::Signature(
            "the trailer does not match the header".into(),
        ));
    };
    if region.len() < HEADER_SIZE {
        return Err(unsigned());
    }
    if bytes.is_empty() {
        return Err(unsigned());
    }
    let block = SignatureBlock::decode(bytes)
        .map_err(|e| ContainerError::Signature(format!("the signature block is malformed: {e}")))?;
    let signer_id = hex::encode(block.signer.key_id());
    if !trusted.contains(&block.signer) {
        return Err(ContainerError::Signature(format!(
            "signed by {} key {signer_id}, which is not among the trusted keys",
            block.signer.algorithm()
        )));
    }
    let weights = envelope::weights_digest(metadata_length, trailer.offset, |at, buf| {
        src.read_at(at, buf, &|| "the weight section".into())
    })?;
    if !block.holds(&envelope::content_digest(region, &weights)) {
        return Err(ContainerError::Signature(format!(
            "the signature by {} key {signer_id} does not hold: the file was changed after \
             it was signed",
            block.signer.algorithm()
        )));
    }
    Ok(block)
}

/// Authenticates a file before anything in it is trusted: copies its metadata region
/// once and checks the key identifier and the metadata tag over that copy, reading only
/// fixed header positions, so that any altered byte there is an integrity error rather
/// than a parse error. Returns the authentication keys (the caller adds the encryption
/// key once the now-trustworthy header names the algorithm), or `None` for a file
/// without a key whose digest matched.
///
/// No downgrade: when a key is given, a file that is not authenticated with a key (SHA-256
/// digests only) is refused, since anyone could have written it.
pub fn authenticate(
    bytes: &[u8],
    master: Option<&[u8]>,
) -> Result<Option<FileKeys>, ContainerError> {
    let meta = copy_for_authentication(bytes)?;
    authenticate_metadata(&meta, master)
}

/// [`copy_metadata`] before authentication: a metadata length that does not fit a file
/// with a whole header is an altered header byte like any other.
fn copy_for_authentication(bytes: &[u8]) -> Result<Vec<u8>, ContainerError> {
    match copy_metadata(bytes) {
        Err(ContainerError::Truncated { .. } | ContainerError::HeaderField { .. })
            if bytes.len() >= HEADER_SIZE =>
        {
            Err(ContainerError::Integrity {
                what: "the metadata length".into(),
            })
        }
        other => other,
    }
}

/// [`authenticate`] on a metadata region already copied by [`copy_metadata`].
pub fn authenticate_metadata(
    meta: &[u8],
    master: Option<&[u8]>,
) -> Result<Option<FileKeys>, ContainerError> {
    let flags = u32::from_le_bytes([meta[24], meta[25], meta[26], meta[27]]);
    let encrypted = flags & FLAG_ENCRYPTED != 0;
    let keyed = encrypted || meta[75] == Integrity::HmacSha256.code();
    let minor = u16::from_le_bytes([meta[10], meta[11]]);
    let metadata_length = metadata_length_of(meta);
    // The copy holds the region and, in 1.3, the trailer after it.
    let region_end = if minor >= FORMAT_MINOR_ENVELOPE {
        usize::try_from(metadata_length)
            .ok()
            .filter(|&n| (HEADER_SIZE..=meta.len()).contains(&n))
            .ok_or_else(|| ContainerError::Integrity {
                what: "the metadata length".into(),
            })?
    } else {
        meta.len()
    };
    let keys = if keyed && minor >= FORMAT_MINOR_ENVELOPE {
        let algorithm = encrypted
            .then(|| Algorithm::from_code(meta[72]).map_or("an unknown algorithm", |a| a.name()));
        let key = master.ok_or(ContainerError::KeyRequired { algorithm })?;
        let opener = Opener::from_bytes(key)?;
        let data_key = envelope::open_data_key(meta, metadata_length, &opener)?;
        let mut salt = [0u8; 32];
        salt.copy_from_slice(&meta[96..128]);
        Some(FileKeys::derive(
            &data_key,
            &salt,
            Derivation::of_header(meta),
        )?)
    } else if keyed {
        let algorithm = encrypted
            .then(|| Algorithm::from_code(meta[72]).map_or("an unknown algorithm", |a| a.name()));
        let master = master.ok_or(ContainerError::KeyRequired { algorithm })?;
        if !crypto::ct_eq(&key_id(master)?, &meta[80..96]) {
            return Err(ContainerError::Integrity {
                what: "the key identifier".into(),
            });
        }
        let mut salt = [0u8; 32];
        salt.copy_from_slice(&meta[96..128]);
        Some(FileKeys::derive(
            master,
            &salt,
            Derivation::of_header(meta),
        )?)
    } else {
        if master.is_some() {
            return Err(ContainerError::NotAuthenticated);
        }
        None
    };
    let expected = tag(
        keys.as_ref(),
        label::METADATA,
        &[&meta[..TAG_OFFSET], &meta[HEADER_SIZE..region_end]],
    );
    if !crypto::ct_eq(&expected, &meta[TAG_OFFSET..TAG_OFFSET + 32]) {
        return Err(ContainerError::Integrity {
            what: "the header and operator info".into(),
        });
    }
    Ok(keys)
}

/// Recomputes every tag of a file in place (each weight field's over its bytes as they
/// are, then the metadata tag), as a writer holding `master` would, and sets the key
/// identifier. For fuzzing and tests: it turns any bytes into a file that authenticates,
/// so the parser and loader behind authentication can be exercised. Fields are re-tagged
/// only when the structure parses; the metadata tag always is.
#[doc(hidden)]
pub fn reseal(bytes: &mut [u8], master: Option<&[u8]>) -> Result<(), ContainerError> {
    reseal_with(bytes, master, true)
}

/// [`reseal`] of the metadata tag only, the field tags left as they are: for tests of
/// what a field's own tag binds, given metadata re-signed by a key holder.
#[doc(hidden)]
pub fn reseal_metadata(bytes: &mut [u8], master: Option<&[u8]>) -> Result<(), ContainerError> {
    reseal_with(bytes, master, false)
}

fn reseal_with(
    bytes: &mut [u8],
    master: Option<&[u8]>,
    fields_too: bool,
) -> Result<(), ContainerError> {
    if bytes.len() < HEADER_SIZE {
        return Err(ContainerError::Truncated {
            what: "the header".into(),
            needed: HEADER_SIZE as u64,
            available: bytes.len() as u64,
        });
    }
    let flags = u32::from_le_bytes([bytes[24], bytes[25], bytes[26], bytes[27]]);
    let keyed = flags & FLAG_ENCRYPTED != 0 || bytes[75] == Integrity::HmacSha256.code();
    let minor = u16::from_le_bytes([bytes[10], bytes[11]]);
    let keys = match (keyed, master) {
        (true, Some(master)) if minor >= FORMAT_MINOR_ENVELOPE => {
            // The key block decides the keys; the key identifier is the key's own.
            let meta = copy_metadata(bytes)?;
            let opener = Opener::from_bytes(master)?;
            let data_key = envelope::open_data_key(&meta, metadata_length_of(&meta), &opener)?;
            let mut salt = [0u8; 32];
            salt.copy_from_slice(&bytes[96..128]);
            Some(FileKeys::derive(
                &data_key,
                &salt,
                Derivation::of_header(bytes),
            )?)
        }
        (true, Some(master)) => {
            bytes[80..96].copy_from_slice(&key_id(master)?);
            let mut salt = [0u8; 32];
            salt.copy_from_slice(&bytes[96..128]);
            Some(FileKeys::derive(
                master,
                &salt,
                Derivation::of_header(bytes),
            )?)
        }
        (true, None) => return Err(ContainerError::KeyRequired { algorithm: None }),
        (false, _) => None,
    };
    let (fields, crypto): (Vec<(WeightField, u64)>, Option<CryptoConfig>) =
        match Container::parse(bytes) {
            Ok(c) => (
                c.fields
                    .iter()
                    .zip(&c.tag_offsets)
                    .filter_map(|(f, t)| Some(((*f)?, (*t)?)))
                    .collect(),
                Some(c.header.crypto),
            ),
            Err(_) => (Vec::new(), None),
        };
    let mode = crypto.and_then(|c| c.mode);
    // GCM tags need the encryption key too.
    let keys = match (keys, crypto.and_then(|c| c.algorithm)) {
        (Some(k), Some(algorithm)) if mode == Some(Mode::Gcm) => {
            Some(k.with_encryption(algorithm)?)
        }
        (k, _) => k,
    };
    for (field, tag_offset) in fields.into_iter().filter(|_| fields_too) {
        let end = field.offset.saturating_add(field.length);
        let (Some(ciphertext), Ok(at)) = (
            bytes.get(field.offset as usize..end as usize),
            usize::try_from(tag_offset),
        ) else {
            continue;
        };
        let Ok(t) = stored_field_tag(keys.as_ref(), mode, &field, ciphertext) else {
            continue;
        };
        if let Some(slot) = bytes.get_mut(at..at + 32) {
            slot.copy_from_slice(&t);
        }
    }
    let mut length = [0u8; 8];
    length.copy_from_slice(&bytes[METADATA_LENGTH_OFFSET..METADATA_LENGTH_OFFSET + 8]);
    let metadata_length = u64::from_le_bytes(length);
    if metadata_length < HEADER_SIZE as u64 || metadata_length > bytes.len() as u64 {
        return Err(ContainerError::HeaderField {
            field: "metadata_length",
            message: "lies outside the file".into(),
        });
    }
    let t = tag(
        keys.as_ref(),
        label::METADATA,
        &[
            &bytes[..TAG_OFFSET],
            &bytes[HEADER_SIZE..metadata_length as usize],
        ],
    );
    bytes[TAG_OFFSET..TAG_OFFSET + 32].copy_from_slice(&t);
    Ok(())
}

/// True for files of a newer minor version than this reader, whose reserved bytes,
/// unknown flags and optional unknown sections are ignored rather than refused.
fn newer_minor(minor: u16) -> bool {
    minor > FORMAT_MINOR
}

/// Checks the tag of a field of the file in `src`. The stored bytes are read once into
/// `scratch` (a file in memory is checked where it lies), so the tag is computed over
/// bytes no other process can change.
pub fn verify_field<S: Source + ?Sized>(
    src: &S,
    field: &WeightField,
    keys: Option<&FileKeys>,
    mode: Option<Mode>,
    op: &str,
    scratch: &mut Vec<u8>,
) -> Result<(), ContainerError> {
    let end = stored_end(src, field)?;
    let stored: &[u8] = match src.in_memory() {
        Some(bytes) => &bytes[field.offset as usize..end as usize],
        None => read_stored(src, field, op, scratch)?,
    };
    let expected = stored_field_tag(keys, mode, field, stored)?;
    if !crypto::ct_eq(&expected, &field.tag) {
        return Err(field_refused(field, op));
    }
    Ok(())
}

/// Where a field's stored bytes end in the file, or an integrity error when they lie
/// beyond it.
fn stored_end<S: Source + ?Sized>(src: &S, field: &WeightField) -> Result<u64, ContainerError> {
    field
        .offset
        .checked_add(field.length)
        .filter(|&end| end <= src.len() && usize::try_from(end).is_ok())
        .ok_or_else(|| ContainerError::Integrity {
            what: format!("weight field {} (beyond the end of the file)", field.index),
        })
}

/// Reads a field's stored bytes from `src` into the start of `buf` with one positional
/// read, and returns them: a file truncated since it was opened is
/// [`ContainerError::Shrank`]. A buffer too short is replaced by fresh zeroed memory (no
/// fill of the old one; the allocator hands large blocks out as fresh pages).
fn read_stored<'b, S: Source + ?Sized>(
    src: &S,
    field: &WeightField,
    op: &str,
    buf: &'b mut Vec<u8>,
) -> Result<&'b mut [u8], ContainerError> {
    let end = stored_end(src, field)?;
    let len = field.length as usize;
    if let Some(bytes) = src.in_memory() {
        buf.clear();
        buf.extend_from_slice(&bytes[field.offset as usize..end as usize]);
        return Ok(buf);
    }
    if buf.len() < len {
        *buf = vec![0u8; len];
    }
    let stored = &mut buf[..len];
    src.read_at(field.offset, stored, &|| {
        format!("weight field {} of {op}", field.index)
    })?;
    Ok(stored)
}

/// The error for a field whose tag does not match, naming its operation (`op`, as
/// [`Container::operation_label`] words it).
fn field_refused(field: &WeightField, op: &str) -> ContainerError {
    ContainerError::Integrity {
        what: format!("weight field {} of {op}", field.index),
    }
}

/// Verifies and decrypts one field of the file in `src` into `out` (replacing its
/// contents; on error `out` is left empty).
///
/// The stored bytes are read from `src` exactly once, into `out`; the tag is checked
/// on that copy and the copy is decrypted in place. A file changed on disk while it is
/// read can therefore never have one version authenticated and another decrypted, and
/// one truncated is an error ([`ContainerError::Shrank`]), never a fault.
pub fn open_field<S: Source + ?Sized>(
    src: &S,
    field: &WeightField,
    keys: Option<&FileKeys>,
    crypto: &CryptoConfig,
    op: &str,
    out: &mut Vec<u8>,
) -> Result<(), ContainerError> {
    // Emptied (and wiped), so the stored bytes fill `out` exactly.
    crypto::wipe_vec(out);
    if let Err(e) = read_stored(src, field, op, out) {
        crypto::wipe_vec(out);
        return Err(e);
    }
    out.truncate(field.length as usize);
    if crypto.mode == Some(Mode::Gcm) {
        // One pass checks the GCM tag and (only then) decrypts the copy.
        let key = keys.and_then(|k| k.encryption.as_ref());
        let opened = match key {
            Some(key) if field.tag[16..].iter().all(|&b| b == 0) => {
                let aad =
                    field_binding(field.index, field.offset, field.plaintext_length, &field.iv);
                let mut tag = [0u8; 16];
                tag.copy_from_slice(&field.tag[..16]);
                crypto::gcm_open_in_place(key, &gcm_nonce(&field.iv), &aad, out, &tag).is_ok()
            }
            _ => false,
        };
        if !opened || out.len() as u64 != field.plaintext_length {
            crypto::wipe_vec(out);
            return Err(field_refused(field, op));
        }
        return Ok(());
    }
    let expected = stored_field_tag(keys, crypto.mode, field, out)?;
    if !crypto::ct_eq(&expected, &field.tag) {
        crypto::wipe_vec(out);
        return Err(field_refused(field, op));
    }
    match (keys.and_then(|k| k.encryption.as_ref()), crypto.mode) {
        (Some(k), Some(mode)) if crypto.segmented => {
            crypto::decrypt_segmented_in_place(k, mode, &field.iv, out)?
        }
        (Some(k), Some(mode)) => crypto::decrypt_in_place(k, mode, &field.iv, out)?,
        (None, Some(_)) => {
            out.clear();
            return Err(ContainerError::Integrity {
                what: "the file's keys (an encrypted file read without them)".into(),
            });
        }
        _ => {}
    }
    if out.len() as u64 != field.plaintext_length {
        // Only a tampered (yet authenticated) file could get here; treat it so.
        crypto::wipe_vec(out);
        return Err(ContainerError::Integrity {
            what: format!("weight field {} (its length)", field.index),
        });
    }
    Ok(())
}

fn slice<'b>(bytes: &'b [u8], s: &SectionEntry) -> &'b [u8] {
    &bytes[s.offset as usize..(s.offset + s.length) as usize]
}

fn find(sections: &[SectionEntry], kind: SectionKind) -> Result<&SectionEntry, ContainerError> {
    sections
        .iter()
        .find(|s| s.kind == kind as u32)
        .ok_or(ContainerError::MissingSection(kind.name()))
}

impl Header {
    /// Reads and checks the fixed header alone (what a host does before handing the
    /// rest of the file to a device).
    pub fn read(bytes: &[u8]) -> Result<Header, ContainerError> {
        parse_header(bytes, bytes.len() as u64)
    }
}

/// The fixed header from the start of `bytes` (a metadata copy or the whole file) of a
/// file of `file_len` bytes.
fn parse_header(bytes: &[u8], file_len: u64) -> Result<Header, ContainerError> {
    if bytes.len() < 8 || bytes[..8] != MAGIC {
        return Err(ContainerError::BadMagic { expected: MAGIC });
    }
    if bytes.len() < HEADER_SIZE {
        return Err(ContainerError::Truncated {
            what: "the header".into(),
            needed: HEADER_SIZE as u64,
            available: bytes.len() as u64,
        });
    }
    let mut r = Reader::new(&bytes[..HEADER_SIZE], "header");
    r.take(8, "magic")?;
    let major = r.u16("format_major")?;
    let minor = r.u16("format_minor")?;
    if major != FORMAT_MAJOR {
        return Err(ContainerError::UnsupportedVersion {
            major,
            minor,
            supported: FORMAT_MAJOR,
        });
    }
    let header_size = r.u32("header_size")?;
    if header_size as usize != HEADER_SIZE {
        return Err(ContainerError::HeaderField {
            field: "header_size",
            message: format!("is {header_size}, format 1.x headers are {HEADER_SIZE} bytes"),
        });
    }
    let file_size = r.u64("file_size")?;
    check_file_size(file_size, file_len)?;
    let flags = r.u32("flags")?;
    if !newer_minor(minor) && flags & !KNOWN_FLAGS != 0 {
        return Err(ContainerError::HeaderField {
            field: "flags",
            message: format!("has unknown bits {:#x}", flags & !KNOWN_FLAGS),
        });
    }
    let section_count = r.u32("section_count")?;
    if section_count as usize > MAX_SECTIONS || section_count < 2 {
        return Err(ContainerError::HeaderField {
            field: "section_count",
            message: format!("is {section_count}, expected 2..={MAX_SECTIONS}"),
        });
    }
    let section_table_offset = r.u64("section_table_offset")?;
    let producer_bytes = r.take(32, "producer")?;
    let end = producer_bytes.iter().position(|&b| b == 0).unwrap_or(32);
    if producer_bytes[end..].iter().any(|&b| b != 0) {
        return Err(ContainerError::HeaderField {
            field: "producer",
            message: "has bytes after its terminating NUL".into(),
        });
    }
    let producer = std::str::from_utf8(&producer_bytes[..end])
        .map_err(|_| ContainerError::HeaderField {
            field: "producer",
            message: "is not UTF-8".into(),
        })?
        .to_string();
    let algorithm_code = r.u8("algorithm")?;
    let mode_code = r.u8("mode")?;
    let padding_code = r.u8("padding")?;
    let integrity_code = r.u8("integrity")?;
    r.take(4, "reserved")?;
    let key_id: [u8; 16] = r.array("key_id")?;
    let salt: [u8; 32] = r.array("salt")?;
    let metadata_length = r.u64("metadata_length")?;
    let trailer = if minor >= FORMAT_MINOR_ENVELOPE {
        let t = Trailer::of_header(bytes);
        t.check(metadata_length, file_len)?;
        t
    } else {
        Trailer::default()
    };
    let tag: [u8; 32] = bytes[TAG_OFFSET..TAG_OFFSET + 32]
        .try_into()
        .unwrap_or([0; 32]);
    let encrypted = flags & FLAG_ENCRYPTED != 0;
    let crypto = parse_crypto(
        encrypted,
        flags & FLAG_SEGMENTED != 0,
        algorithm_code,
        mode_code,
        padding_code,
        integrity_code,
    )?;
    Ok(Header {
        major,
        minor,
        file_size,
        flags,
        section_count,
        section_table_offset,
        metadata_length,
        producer,
        crypto,
        key_id,
        salt,
        tag,
        trailer,
    })
}

/// The header's `file_size` against the file's length.
fn check_file_size(file_size: u64, file_len: u64) -> Result<(), ContainerError> {
    if file_size == file_len {
        return Ok(());
    }
    Err(if file_size > file_len {
        ContainerError::Truncated {
            what: "the file (header field 'file_size')".into(),
            needed: file_size,
            available: file_len,
        }
    } else {
        ContainerError::HeaderField {
            field: "file_size",
            message: format!("says {file_size} bytes but the file has {file_len} (trailing data)"),
        }
    })
}

fn parse_crypto(
    encrypted: bool,
    segmented: bool,
    a: u8,
    m: u8,
    p: u8,
    i: u8,
) -> Result<CryptoConfig, ContainerError> {
    let field_err =
        |field: &'static str, message: String| ContainerError::HeaderField { field, message };
    let integrity = Integrity::from_code(i)
        .ok_or_else(|| field_err("integrity", format!("unknown code {i}")))?;
    let padding =
        Padding::from_code(p).ok_or_else(|| field_err("padding", format!("unknown code {p}")))?;
    if !encrypted {
        if segmented {
            return Err(field_err(
                "flags",
                "an unencrypted file cannot have segmented fields".into(),
            ));
        }
        if a != 0 || m != 0 || p != 0 {
            return Err(field_err(
                "algorithm",
                "an unencrypted file must have algorithm, mode and padding 0".into(),
            ));
        }
        // Unencrypted: SHA-256 digests, or HMAC-SHA-256 under the key (authenticated
        // plaintext).
        return Ok(match integrity {
            Integrity::Sha256 => CryptoConfig::none(),
            Integrity::HmacSha256 => CryptoConfig::authenticated(),
        });
    }
    let algorithm = Algorithm::from_code(a)
        .ok_or_else(|| field_err("algorithm", format!("unknown code {a}")))?;
    let mode = Mode::from_code(m).ok_or_else(|| field_err("mode", format!("unknown code {m}")))?;
    if padding != mode.padding() {
        return Err(field_err(
            "padding",
            format!("{} requires padding {}", mode.name(), mode.padding().name()),
        ));
    }
    if integrity != Integrity::HmacSha256 {
        return Err(field_err(
            "integrity",
            "an encrypted file uses HMAC-SHA-256 (code 1)".into(),
        ));
    }
    if segmented && !mode.is_chained() {
        return Err(field_err(
            "flags",
            format!("{} fields are never segmented", mode.name()),
        ));
    }
    Ok(CryptoConfig {
        algorithm: Some(algorithm),
        mode: Some(mode),
        padding,
        integrity,
        segmented,
    })
}

/// The section table, read from the metadata copy `meta` of a `file_len`-byte file. Every
/// section but the weights must lie inside the metadata region, which the header's tag
/// authenticates.
fn parse_sections(
    meta: &[u8],
    header: &Header,
    file_len: u64,
) -> Result<Vec<SectionEntry>, ContainerError> {
    let bytes = meta;
    let count = header.section_count as usize;
    let table_len = (count * SECTION_ENTRY_SIZE) as u64;
    let table_offset = header.section_table_offset;
    if table_offset < HEADER_SIZE as u64 || !table_offset.is_multiple_of(8) {
        return Err(ContainerError::HeaderField {
            field: "section_table_offset",
            message: format!(
                "is {table_offset}; the table must follow the {HEADER_SIZE}-byte header, 8-byte aligned"
            ),
        });
    }
    match table_offset.checked_add(table_len) {
        Some(end) if end <= bytes.len() as u64 => {}
        Some(end) if end <= file_len => {
            return Err(ContainerError::HeaderField {
                field: "section_table_offset",
                message: format!(
                    "puts the table at {table_offset}..{end}, beyond the metadata region (0..{})",
                    bytes.len()
                ),
            });
        }
        _ => {
            return Err(ContainerError::Truncated {
                what: format!("the section table ({count} entries at offset {table_offset})"),
                needed: table_offset.saturating_add(table_len),
                available: file_len,
            });
        }
    }
    let mut r = Reader::new(
        &bytes[table_offset as usize..(table_offset + table_len) as usize],
        "section table",
    );
    let mut sections = Vec::with_capacity(count);
    for index in 0..count {
        let kind = r.u32("kind")?;
        let flags = r.u32("flags")?;
        let offset = r.u64("offset")?;
        let length = r.u64("length")?;
        let reserved = r.u64("reserved")?;
        let entry = SectionEntry {
            kind,
            flags,
            offset,
            length,
        };
        let err = |message: String| ContainerError::Section {
            index,
            kind: entry.kind_name(),
            message,
        };
        if reserved != 0 && !newer_minor(header.minor) {
            return Err(err("reserved field must be zero".into()));
        }
        if SectionKind::from_code(kind).is_none()
            && (flags & SECTION_REQUIRED != 0 || !newer_minor(header.minor))
        {
            return Err(err(
                "is a section kind this nnc does not know, and the file requires it".into(),
            ));
        }
        if !offset.is_multiple_of(ALIGNMENT) {
            return Err(err(format!(
                "offset {offset} is not {ALIGNMENT}-byte aligned"
            )));
        }
        match offset.checked_add(length) {
            Some(end) if end <= file_len => {
                if kind != SectionKind::Weights as u32 && end > bytes.len() as u64 {
                    return Err(err(format!(
                        "offset {offset} + length {length} lies outside the authenticated \
                         metadata region (0..{}); only the weight section may follow it",
                        bytes.len()
                    )));
                }
            }
            _ => {
                return Err(err(format!(
                    "offset {offset} + length {length} lies beyond the end of the file ({file_len} bytes)"
                )));
            }
        }
        if offset < table_offset + table_len && offset + length > 0 {
            return Err(err(format!(
                "offset {offset} overlaps the header or section table"
            )));
        }
        if sections.iter().any(|s: &SectionEntry| s.kind == kind) {
            return Err(err("appears twice".into()));
        }
        sections.push(entry);
    }
    let mut sorted = sections.clone();
    sorted.sort_by_key(|s| s.offset);
    for w in sorted.windows(2) {
        if w[0].offset + w[0].length > w[1].offset {
            return Err(ContainerError::SectionsOverlap {
                first: w[0].kind_name(),
                second: w[1].kind_name(),
            });
        }
    }
    Ok(sections)
}

type OperatorInfo = (
    Model,
    Vec<Option<WeightField>>,
    Option<u64>,
    Vec<Option<ArenaSlot>>,
    Vec<Option<u64>>,
);

/// Smallest encoded sizes, for bounding counts before allocating.
const MIN_OPERAND_BYTES: usize = 16 + 20 + 4;
const MIN_OPERATION_BYTES: usize = 4 + 4 + 4 + 4 + 4;
const MIN_IO_BYTES: usize = 4 + 4;

/// The operator-info section `info`, which starts at `info_offset` in the file. Returns
/// the graph, the fields, the arena plan and, per field, where its tag lies in the file.
fn parse_operator_info(
    info: &[u8],
    info_offset: u64,
    header: &Header,
    weights: &SectionEntry,
) -> Result<OperatorInfo, ContainerError> {
    let mut r = Reader::new(info, "operator-info");
    let operand_count = r.count("operand_count", MIN_OPERAND_BYTES)?;
    let operation_count = r.count("operation_count", MIN_OPERATION_BYTES)?;
    let input_count = r.count("input_count", 4 + MIN_IO_BYTES)?;
    let output_count = r.count("output_count", 4 + MIN_IO_BYTES)?;
    let flags = r.u32("flags")?;
    let inline_len = r.u64("inline_values_length")?;
    if inline_len > r.remaining() as u64 {
        return Err(r.fail(
            "inline_values_length",
            format!("{inline_len} exceeds the section"),
        ));
    }
    let arena_size = r.u64("arena_size")?;
    let arena_size = (arena_size != u64::MAX).then_some(arena_size);
    let mut model = Model {
        relax_computation_float32_to_float16: flags & 1 != 0,
        ..Default::default()
    };
    let mut arena = Vec::with_capacity(operand_count);
    for i in 0..operand_count {
        let (operand, slot) = read_operand(&mut r, 0, i, arena_size)?;
        model.main.operands.push(operand);
        arena.push(slot);
    }
    read_io_lists(&mut r, 0, &mut model.main, input_count, output_count)?;
    for k in 0..input_count + output_count {
        let name = r.str("io.name")?;
        let code = r.u8("io.dtype")?;
        let dtype = dtype_from_code(code)
            .ok_or_else(|| r.fail("io.dtype", format!("unknown element type {code}")))?;
        let rank = r.u8("io.rank")? as usize;
        r.u16("io.reserved")?;
        let mut dims = Vec::with_capacity(rank);
        for _ in 0..rank {
            dims.push(r.u32("io.dims")?);
        }
        let info = IoInfo { name, dtype, dims };
        if k < input_count {
            model.input_info.push(info);
        } else {
            model.output_info.push(info);
        }
    }
    let mut fields = Vec::with_capacity(operation_count);
    let mut tag_offsets = Vec::with_capacity(operation_count);
    read_units(
        &mut r,
        0,
        0,
        operation_count,
        info_offset,
        header,
        weights,
        &mut model.main,
        &mut fields,
        &mut tag_offsets,
        &mut 0,
    )?;
    model.operand_values = r.take(inline_len as usize, "inline_values")?.to_vec();
    r.expect_end()?;
    Ok((model, fields, arena_size, arena, tag_offsets))
}

/// The referenced-subgraphs section (kind 4), whose operations continue the global
/// numbering after main's: appends the subgraphs to `model` and their units' fields.
fn parse_subgraphs(
    bytes: &[u8],
    section_offset: u64,
    header: &Header,
    weights: &SectionEntry,
    info: &mut OperatorInfo,
) -> Result<(), ContainerError> {
    let (model, fields, _, _, tag_offsets) = info;
    let mut r = Reader::new(bytes, "subgraphs");
    let count = r.count("subgraph_count", 16)?;
    if count == 0 {
        return Err(r.fail(
            "subgraph_count",
            "is 0; a file without referenced subgraphs has no subgraphs section",
        ));
    }
    let mut base = model.main.operations.len();
    // Counted once here, not per graph (recounting was quadratic in subgraphs).
    let mut next_field = fields.iter().flatten().count() as u32;
    for k in 0..count {
        let t = k + 1;
        let operand_count = r.count("subgraph.operand_count", MIN_OPERAND_BYTES)?;
        let operation_count = r.count("subgraph.operation_count", MIN_OPERATION_BYTES)?;
        let input_count = r.count("subgraph.input_count", 4)?;
        let output_count = r.count("subgraph.output_count", 4)?;
        let mut graph = Subgraph::default();
        graph.operands.reserve(operand_count);
        for i in 0..operand_count {
            let (operand, _) = read_operand(&mut r, t, i, None)?;
            graph.operands.push(operand);
        }
        read_io_lists(&mut r, t, &mut graph, input_count, output_count)?;
        read_units(
            &mut r,
            t,
            base,
            operation_count,
            section_offset,
            header,
            weights,
            &mut graph,
            fields,
            tag_offsets,
            &mut next_field,
        )?;
        base += operation_count;
        model.referenced.push(graph);
    }
    r.expect_end()
}

/// The input and output lists of graph `t`.
fn read_io_lists(
    r: &mut Reader,
    t: usize,
    graph: &mut Subgraph,
    input_count: usize,
    output_count: usize,
) -> Result<(), ContainerError> {
    let operand_count = graph.operands.len();
    for (what, count) in [("inputs", input_count), ("outputs", output_count)] {
        for _ in 0..count {
            let v = r.u32(what)?;
            if v as usize >= operand_count {
                return Err(r.fail(
                    what,
                    format!(
                        "{}names operand {v}, but there are {operand_count}",
                        graph_prefix(t)
                    ),
                ));
            }
            if what == "inputs" {
                graph.inputs.push(v);
            } else {
                graph.outputs.push(v);
            }
        }
    }
    Ok(())
}

/// Checks what spans every graph (fields do not overlap), sets the pools (pool `i` is
/// operation `i`'s field) and validates the model.
fn finish_model(info: &mut OperatorInfo) -> Result<(), ContainerError> {
    let (model, fields, _, _, _) = info;
    // Fields must not overlap each other.
    let mut spans: Vec<(u64, u64, usize)> = fields
        .iter()
        .enumerate()
        .filter_map(|(i, f)| f.map(|f| (f.offset, f.offset + f.length, i)))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        if w[0].1 > w[1].0 {
            return Err(ContainerError::WeightField {
                operation: w[1].2,
                message: format!("overlaps the field of operation {}", w[0].2),
            });
        }
    }
    // Pool i is operation i's field, so the validator checks every weight reference.
    model.pools = fields
        .iter()
        .map(|f| Pool::Opaque {
            size: f.map_or(0, |f| f.plaintext_length),
        })
        .collect();
    crate::nn::validate(model)?;
    Ok(())
}

/// `subgraph t: ` for a referenced subgraph, nothing for main.
fn graph_prefix(t: usize) -> String {
    if t == 0 {
        String::new()
    } else {
        format!("subgraph {t}: ")
    }
}

/// One operand of the operand table of graph `t` (the arena plan is main's only).
fn read_operand(
    r: &mut Reader,
    t: usize,
    i: usize,
    arena_size: Option<u64>,
) -> Result<(Operand, Option<ArenaSlot>), ContainerError> {
    let code = r.i32("operand.type")?;
    let operand_type = OperandType::from_code(code).ok_or_else(|| {
        r.fail(
            "operand.type",
            format!("{}operand {i}: unknown type {code}", graph_prefix(t)),
        )
    })?;
    let lifetime_code = r.u8("operand.lifetime")?;
    let lifetime = Lifetime::from_code(i32::from(lifetime_code)).ok_or_else(|| {
        r.fail(
            "operand.lifetime",
            format!(
                "{}operand {i}: unknown lifetime {lifetime_code}",
                graph_prefix(t)
            ),
        )
    })?;
    let rank = r.u8("operand.rank")? as usize;
    let oflags = r.u8("operand.flags")?;
    r.u8("operand.reserved")?;
    let scale = r.f32("operand.scale")?;
    let zero_point = r.i32("operand.zero_point")?;
    let mut dimensions = Vec::with_capacity(rank);
    for _ in 0..rank {
        dimensions.push(r.u32("operand.dimensions")?);
    }
    let location_index = r.u32("operand.location_index")?;
    let location_offset = r.u64("operand.location_offset")?;
    let location_length = r.u64("operand.location_length")?;
    let channel_quant = if oflags & 1 != 0 {
        let channel_dim = r.u32("operand.channel_dim")?;
        let n = r.count("operand.channel_scales", 4)?;
        let mut scales = Vec::with_capacity(n);
        for _ in 0..n {
            scales.push(r.f32("operand.channel_scales")?);
        }
        Some(ChannelQuant {
            scales,
            channel_dim,
        })
    } else {
        None
    };
    let name = r.str("operand.name")?;
    let (location, slot) = match lifetime {
        Lifetime::ConstantCopy | Lifetime::ConstantReference | Lifetime::Subgraph => (
            DataLocation {
                pool_index: location_index,
                offset: location_offset,
                length: location_length,
            },
            None,
        ),
        Lifetime::TemporaryVariable if location_offset != u64::MAX => {
            let slot = ArenaSlot {
                offset: location_offset,
                size: location_length,
            };
            if let Some(total) = arena_size
                && location_offset
                    .checked_add(location_length)
                    .is_none_or(|end| end > total)
            {
                return Err(r.fail(
                    "operand.location",
                    format!(
                        "{}operand {i}: arena slot beyond the arena of {total} bytes",
                        graph_prefix(t)
                    ),
                ));
            }
            (DataLocation::default(), Some(slot))
        }
        _ => (DataLocation::default(), None),
    };
    let operand = Operand {
        operand_type,
        dimensions,
        scale,
        zero_point,
        lifetime,
        location,
        channel_quant,
        name,
    };
    if t != 0 && slot.is_some() {
        return Err(r.fail(
            "operand.location",
            format!(
                "subgraph {t}: operand {i}: a referenced subgraph's temporary has no arena slot"
            ),
        ));
    }
    Ok((operand, slot))
}

/// The units of graph `t`'s `operation_count` operations, numbered globally from
/// `base`, appended to `graph`, `fields` and `tag_offsets`; `next_field` is the number
/// of fields so far.
#[allow(clippy::too_many_arguments)]
fn read_units(
    r: &mut Reader,
    t: usize,
    base: usize,
    operation_count: usize,
    section_offset: u64,
    header: &Header,
    weights: &SectionEntry,
    graph: &mut Subgraph,
    fields: &mut Vec<Option<WeightField>>,
    tag_offsets: &mut Vec<Option<u64>>,
    next_field: &mut u32,
) -> Result<(), ContainerError> {
    let operand_count = graph.operands.len();
    let index = |r: &mut Reader, field: &str| -> Result<u32, ContainerError> {
        let v = r.u32(field)?;
        if v as usize >= operand_count {
            return Err(r.fail(
                field,
                format!(
                    "{}names operand {v}, but there are {operand_count}",
                    graph_prefix(t)
                ),
            ));
        }
        Ok(v)
    };
    let weights_end = weights.offset + weights.length;
    for op_index in base..base + operation_count {
        let code = r.i32("operation.type")?;
        let op_type = OperationType::from_code(code).ok_or_else(|| {
            r.fail(
                "operation.type",
                format!(
                    "{}operation {}: unknown operation type {code}",
                    graph_prefix(t),
                    op_index - base
                ),
            )
        })?;
        let n_in = r.count("operation.input_count", 4)?;
        let mut inputs = Vec::with_capacity(n_in);
        for _ in 0..n_in {
            inputs.push(index(r, "operation.inputs")?);
        }
        let n_out = r.count("operation.output_count", 4)?;
        let mut outputs = Vec::with_capacity(n_out);
        for _ in 0..n_out {
            outputs.push(index(r, "operation.outputs")?);
        }
        let source = r.str("operation.source")?;
        let has_weights = r.u8("operation.has_weights")?;
        r.take(3, "operation.reserved")?;
        let field = match has_weights {
            0 => None,
            1 => {
                let offset = r.u64("field.offset")?;
                let length = r.u64("field.length")?;
                let plaintext_length = r.u64("field.plaintext_length")?;
                let iv: [u8; 16] = r.array("field.iv")?;
                let tag_offset = section_offset + r.position() as u64;
                let tag: [u8; 32] = r.array("field.tag")?;
                let err = |message: String| ContainerError::WeightField {
                    operation: op_index,
                    message,
                };
                if !offset.is_multiple_of(ALIGNMENT) {
                    return Err(err(format!(
                        "offset {offset} is not {ALIGNMENT}-byte aligned"
                    )));
                }
                match offset.checked_add(length) {
                    Some(end) if offset >= weights.offset && end <= weights_end => {}
                    _ => {
                        return Err(err(format!(
                            "offset {offset} length {length} lies outside the weight section ({}..{weights_end})",
                            weights.offset
                        )));
                    }
                }
                let expected = match header.crypto.mode {
                    Some(m) => crypto::ciphertext_len(m, plaintext_length as usize) as u64,
                    None => plaintext_length,
                };
                if plaintext_length == 0 || length != expected {
                    return Err(err(format!(
                        "ciphertext length {length} does not fit plaintext length {plaintext_length}"
                    )));
                }
                let f = WeightField {
                    index: *next_field,
                    offset,
                    length,
                    plaintext_length,
                    iv,
                    tag,
                };
                *next_field += 1;
                tag_offsets.push(Some(tag_offset));
                Some(f)
            }
            other => {
                return Err(r.fail(
                    "operation.has_weights",
                    format!("is {other}, expected 0 or 1"),
                ));
            }
        };
        if field.is_none() {
            tag_offsets.push(None);
        }
        fields.push(field);
        graph.operations.push(Operation {
            op_type,
            inputs,
            outputs,
            source,
        });
    }
    Ok(())
}
