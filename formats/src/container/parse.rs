//! Structural parsing of a `.nnc` file's metadata: the header, the section table, the
//! operator info and the referenced subgraphs, every count bounded by the bytes that
//! remain before anything is allocated (docs/FORMAT.md); and the private copy of the
//! metadata region (and format 1.3's trailer) that everything else reads.

use super::binary::Reader;
use super::envelope::Trailer;
use super::source::Source;
use super::{
    ALIGNMENT, ContainerError, CryptoConfig, FLAG_ENCRYPTED, FLAG_SEGMENTED, FORMAT_MAJOR,
    FORMAT_MINOR, FORMAT_MINOR_ENVELOPE, HEADER_SIZE, Header, Integrity, KNOWN_FLAGS, MAGIC,
    MAX_SECTIONS, METADATA_LENGTH_OFFSET, SECTION_ENTRY_SIZE, SECTION_REQUIRED, SectionEntry,
    SectionKind, TAG_OFFSET, dtype_from_code,
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

/// True for files of a newer minor version than this reader, whose reserved bytes,
/// unknown flags and optional unknown sections are ignored rather than refused.
pub(super) fn newer_minor(minor: u16) -> bool {
    minor > FORMAT_MINOR
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
pub(super) fn parse_header(bytes: &[u8], file_len: u64) -> Result<Header, ContainerError> {
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
pub(super) fn check_file_size(file_size: u64, file_len: u64) -> Result<(), ContainerError> {
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
pub(super) fn parse_sections(
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

pub(super) type OperatorInfo = (
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
pub(super) fn parse_operator_info(
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
pub(super) fn parse_subgraphs(
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
pub(super) fn finish_model(info: &mut OperatorInfo) -> Result<(), ContainerError> {
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
