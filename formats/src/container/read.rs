//! Reading `.nnc` files: the `Container` (its metadata copied and parsed by `parse.rs`,
//! after `authenticate.rs` has checked the copy), field verification, per-field decryption,
//! and `reseal`, which re-tags any bytes as a key holder would (for fuzzing and tests).

use zeroize::Zeroizing;

use super::authenticate::metadata_length_of;
use super::authenticate::{authenticate_metadata, copy_for_authentication, verify_signature};
use super::envelope::{self, Opener};
use super::envelope::{KeyBlock, RESERVED_FROM, SignatureBlock};
use super::parse::{
    ArenaSlot, WeightField, copy_metadata, finish_model, newer_minor, parse_header,
    parse_operator_info, parse_sections, parse_subgraphs,
};
use super::source::Source;
use super::{
    ContainerError, CryptoConfig, FORMAT_MINOR_ENVELOPE, FORMAT_MINOR_SUBGRAPHS, FileKeys,
    HEADER_SIZE, Header, METADATA_LENGTH_OFFSET, SECTION_ENTRY_SIZE, SectionEntry, SectionKind,
    TAG_OFFSET, field_binding, gcm_nonce, stored_field_tag,
};
use super::{Derivation, FLAG_ENCRYPTED, Integrity, key_id, label, tag};
use crate::crypto::{self, Mode};
use crate::nn::Model;

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
    pub(super) tag_offsets: Vec<Option<u64>>,
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
