//! Writing `.nnc` files.

use zeroize::Zeroizing;

use super::binary::Writer;
use super::envelope::{self, KeyBlock, SignatureBlock, Trailer};
use super::parse::ArenaSlot;
use super::{
    ALIGNMENT, ContainerError, CryptoConfig, Derivation, FLAG_ENCRYPTED, FLAG_REPRODUCIBLE,
    FLAG_SEGMENTED, FORMAT_MAJOR, FORMAT_MINOR_BASE, FORMAT_MINOR_CIPHER_BOUND,
    FORMAT_MINOR_ENVELOPE, FORMAT_MINOR_SUBGRAPHS, FieldTagWriter, FileKeys, HEADER_SIZE, MAGIC,
    METADATA_LENGTH_OFFSET, SECTION_ENTRY_SIZE, SECTION_REQUIRED, SectionKind, TAG_OFFSET,
    dtype_code, field_binding, gcm_nonce, key_id, label, tag,
};
use crate::crypto::{self, Key, Mode, PrivateKey, PublicKey};
use crate::nn::{Lifetime, Model, Pool, Subgraph};

/// How to write a model.
pub struct WriteOptions<'a> {
    /// The master key; `None` writes an unencrypted file (with SHA-256 digests).
    pub key: Option<&'a Key>,
    pub mode: Mode,
    /// With a key: keep the weights in plaintext and only authenticate the file
    /// (HMAC-SHA-256 under a key derived from the master key), for users who need
    /// integrity without secrecy.
    pub authenticate_only: bool,
    /// Derive the salt and every IV from the key and the content (a keyed PRF), so the
    /// same model, options and key give byte-identical files; different plaintexts never
    /// share an IV.
    pub reproducible: bool,
    /// Recorded in the header (e.g. `nnc 0.1.0`); at most 32 bytes.
    pub producer: String,
    /// The activation-arena plan: total size and, per operand, the slot of each temporary.
    pub arena: Option<(u64, Vec<Option<ArenaSlot>>)>,
    /// Further sections (e.g. the execution plan), each marked required.
    pub extra_sections: Vec<(SectionKind, Vec<u8>)>,
    /// Device recipients and a signature (format 1.3).
    pub envelope: Envelope<'a>,
}

/// Who else can open a file, and who vouches for it (format 1.3, docs/FORMAT.md).
#[derive(Default)]
pub struct Envelope<'a> {
    /// Device public keys (X25519) that receive the data key, besides the master key.
    pub recipients: &'a [PublicKey],
    /// The cipher of a file for devices only (no master key to name it); ignored when a
    /// master key is given.
    pub cipher: Option<crypto::Algorithm>,
    /// Signs the file with this key and provenance statement (UTF-8 JSON).
    pub signer: Option<(&'a PrivateKey, Vec<u8>)>,
}

/// Where a `.nnc` file goes: byte ranges written from several threads at once, so
/// that each weight field is stored as soon as it is encrypted (no second copy of the
/// whole file in memory).
pub trait Sink: Sync {
    /// Makes the output exactly `len` bytes long; bytes nobody writes read as zero.
    fn set_len(&self, len: u64) -> std::io::Result<()>;
    /// Writes all of `bytes` at `offset`.
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> std::io::Result<()>;
    /// Reads back `buf.len()` bytes at `offset` (what a signature hashes).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
}

impl Sink for std::fs::File {
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        std::fs::File::set_len(self, len)
    }

    #[cfg(unix)]
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, bytes, offset)
    }

    #[cfg(windows)]
    fn write_all_at(&self, mut bytes: &[u8], mut offset: u64) -> std::io::Result<()> {
        use std::os::windows::fs::FileExt;
        while !bytes.is_empty() {
            let n = self.seek_write(bytes, offset)?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            bytes = &bytes[n..];
            offset += n as u64;
        }
        Ok(())
    }

    #[cfg(not(any(unix, windows)))]
    fn write_all_at(&self, _: &[u8], _: u64) -> std::io::Result<()> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        // The one positional reader of files (the cache's and the sources').
        crate::cache::ReadAt::read_exact_at(self, buf, offset)
    }
}

/// A `.nnc` file built in memory ([`write()`]).
#[derive(Default)]
pub struct MemorySink(std::sync::Mutex<Vec<u8>>);

impl MemorySink {
    pub fn into_bytes(self) -> Vec<u8> {
        self.0.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl Sink for MemorySink {
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let len = usize::try_from(len).map_err(std::io::Error::other)?;
        let mut buf = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let more = len.saturating_sub(buf.len());
        buf.try_reserve_exact(more).map_err(std::io::Error::other)?;
        buf.resize(len, 0);
        Ok(())
    }

    fn write_all_at(&self, bytes: &[u8], offset: u64) -> std::io::Result<()> {
        let mut buf = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(offset).map_err(std::io::Error::other)?;
        let target = start
            .checked_add(bytes.len())
            .and_then(|end| buf.get_mut(start..end))
            .ok_or_else(|| std::io::Error::other("write beyond the end of the output"))?;
        target.copy_from_slice(bytes);
        Ok(())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let data = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(offset).map_err(std::io::Error::other)?;
        let source = start
            .checked_add(buf.len())
            .and_then(|end| data.get(start..end))
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(source);
        Ok(())
    }
}

/// What [`write_to`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub file_size: u64,
    /// The header's crypto configuration and key identifier (zero without a key).
    pub crypto: CryptoConfig,
    pub key_id: [u8; 16],
    pub weight_fields: usize,
    /// Plaintext bytes of every weight field (alignment padding inside fields included).
    pub weight_bytes: u64,
}

/// One operation's weight field: where its constants lie in its plaintext, and where
/// its stored bytes (ciphertext, or plaintext when unencrypted) go in the file.
struct FieldPlan<'a> {
    operation: usize,
    /// (offset in the plaintext, bytes); offsets ascending, multiples of 64.
    pieces: Vec<(u64, &'a [u8])>,
    plaintext_len: u64,
    stored_len: u64,
    offset: u64,
}

impl FieldPlan<'_> {
    /// Bytes `[start, end)` of the field's plaintext (constants and zero padding) in
    /// `buf`.
    fn assemble_range(&self, start: u64, end: u64, buf: &mut Vec<u8>) {
        buf.clear();
        buf.resize((end - start) as usize, 0);
        for &(at, bytes) in &self.pieces {
            let piece_end = at + bytes.len() as u64;
            if piece_end <= start || at >= end {
                continue;
            }
            let from = start.max(at);
            let to = end.min(piece_end);
            buf[(from - start) as usize..(to - start) as usize]
                .copy_from_slice(&bytes[(from - at) as usize..(to - at) as usize]);
        }
    }

    /// The plaintext as parts for hashing, without assembling it.
    fn parts(&self) -> Vec<&[u8]> {
        const ZEROS: [u8; ALIGNMENT as usize] = [0; ALIGNMENT as usize];
        let mut parts = Vec::with_capacity(self.pieces.len() * 2);
        let mut len = 0u64;
        for &(at, bytes) in &self.pieces {
            parts.push(&ZEROS[..(at - len) as usize]);
            parts.push(bytes);
            len = at + bytes.len() as u64;
        }
        parts
    }
}

/// What a worker found for one field: (field index, IV, tag).
type Sealed = (usize, [u8; 16], [u8; 32]);

/// Whether a constant operand is model data, judged by the operand alone: every tensor
/// constant is, whatever its size (a 16-channel bias is only 64 bytes but still a trained
/// parameter), and so is anything stored by reference, except plain TENSOR_INT32 vectors
/// (shapes, axes, paddings, permutations) and scalars, which are hyper-parameters and stay
/// inline as CONSTANT_COPY. [`is_weight_in`] also knows how the model reads it.
pub fn is_weight(operand: &crate::nn::Operand) -> bool {
    operand.lifetime.is_constant()
        && operand.operand_type.is_tensor()
        && (operand.lifetime == Lifetime::ConstantReference
            || !(operand.operand_type == crate::nn::OperandType::TensorInt32
                && operand.scale == 0.0))
}

/// [`is_weight`], and also an int32 vector with scale 0 that an operation reads as its
/// bias: with per-channel filters NNAPI gives the bias scale 0, yet it is trained data.
pub fn is_weight_in(model: &Model, index: u32) -> bool {
    weights_of(model)
        .get(index as usize)
        .copied()
        .unwrap_or(false)
}

/// [`is_weight_in`] for every operand at once, in one pass over the graph.
pub fn weights_of(model: &Model) -> Vec<bool> {
    weights_of_graph(&model.main)
}

/// [`weights_of`] for the operands of one graph (main or a referenced subgraph).
pub fn weights_of_graph(graph: &Subgraph) -> Vec<bool> {
    let operands = &graph.operands;
    let mut weight: Vec<bool> = operands.iter().map(is_weight).collect();
    for op in &graph.operations {
        for (k, &i) in op.inputs.iter().enumerate() {
            if let Some(o) = operands.get(i as usize)
                && !weight[i as usize]
                && o.lifetime.is_constant()
                && o.operand_type.is_tensor()
                && crate::nn::ops::input_role(op.op_type, k, op.inputs.len())
                    == crate::nn::ops::Role::Bias
            {
                weight[i as usize] = true;
            }
        }
    }
    weight
}

fn align(v: u64) -> u64 {
    v.div_ceil(ALIGNMENT) * ALIGNMENT
}

/// Serializes `model` as a `.nnc` file in memory.
pub fn write(model: &Model, options: &WriteOptions) -> Result<Vec<u8>, ContainerError> {
    let sink = MemorySink::default();
    write_to(model, options, &sink)?;
    Ok(sink.into_bytes())
}

/// Writes `model` as a `.nnc` file into `sink`: the weight fields first, each encrypted,
/// authenticated and stored by a worker as soon as it is ready (fields in parallel, one
/// reusable buffer pair per worker), then the metadata that describes them. Only the
/// model itself and the workers' buffers are ever in memory.
pub fn write_to(
    model: &Model,
    options: &WriteOptions,
    sink: &impl Sink,
) -> Result<Written, ContainerError> {
    let graphs: Vec<&Subgraph> = model.graphs().collect();
    check_writable(model, options, &graphs)?;
    let WeightPlan {
        owners,
        mut placements,
        pieces,
        field_lens,
    } = plan_weights(model, &graphs)?;
    let inline = inline_area(model, &graphs, &owners, &mut placements)?;
    let encoding = Encoding {
        model,
        owners: &owners,
        placements: &placements,
        inline: &inline,
        arena: options.arena.as_ref(),
    };
    let keyed = options.key.is_some() || !options.envelope.recipients.is_empty();
    let encrypt = keyed && !options.authenticate_only;
    let crypto_config = if encrypt {
        let algorithm = options
            .key
            .map(|k| k.algorithm())
            .or(options.envelope.cipher)
            .ok_or_else(|| {
                ContainerError::Unwritable("a file for device recipients needs a cipher".into())
            })?;
        CryptoConfig::encrypted(algorithm, options.mode)
    } else if keyed {
        CryptoConfig::authenticated()
    } else {
        CryptoConfig::none()
    };
    let mut fields: Vec<FieldPlan> = pieces
        .into_iter()
        .zip(field_lens)
        .enumerate()
        .filter(|(_, (_, len))| *len > 0)
        .map(|(operation, (pieces, plaintext_len))| FieldPlan {
            operation,
            pieces,
            plaintext_len,
            stored_len: if encrypt {
                crypto::ciphertext_len(options.mode, plaintext_len as usize) as u64
            } else {
                plaintext_len
            },
            offset: 0,
        })
        .collect();
    let (salt, keys, key_block) =
        salt_and_keys(options, &crypto_config, encrypt, &encoding, &fields)?;
    let signature_len = options
        .envelope
        .signer
        .as_ref()
        .map_or(0, |(signer, statement)| {
            signature_block_len(signer, statement)
        });

    let mut layout = Layout::plan(model, options, &encoding, &mut fields);
    // Format 1.3: the key block and the signature block after the weights.
    let trailer = (key_block.is_some() || signature_len > 0).then(|| Trailer {
        offset: layout.file_size,
        key_block_len: key_block.as_ref().map_or(0, |b| b.len() as u32),
        signature_len: signature_len as u32,
    });
    if let Some(t) = &trailer {
        layout.file_size += t.len();
    }
    usize::try_from(layout.file_size)
        .map_err(|_| ContainerError::Unwritable("file too large".into()))?;
    sink.set_len(layout.file_size).map_err(output_error)?;

    let sealed = seal_fields(
        &fields,
        keys.as_ref(),
        encrypt,
        crypto_config.segmented,
        options,
        sink,
    )?;
    let descriptors = descriptors(&fields, &sealed);
    let info = encoding.operator_info(&descriptors);
    debug_assert_eq!(info.len() as u64, layout.info_len);
    let subgraph_section = encoding.subgraphs(&descriptors);
    let sections = layout.sections(options, subgraph_section.as_deref());

    let id = match (options.key, options.envelope.recipients.first()) {
        (Some(k), _) => key_id(k.as_bytes())?,
        (None, Some(device)) => envelope::device_key_id(device),
        (None, None) => [0; 16],
    };
    let header = header(
        options,
        &layout,
        &crypto_config,
        encrypt,
        &salt,
        &id,
        &trailer,
    );
    let out = metadata(
        &layout,
        options,
        &header,
        &sections,
        &info,
        subgraph_section.as_deref(),
        keys.as_ref(),
    )?;
    sink.write_all_at(&out, 0).map_err(output_error)?;
    if let Some(t) = &trailer {
        let mut bytes = key_block.unwrap_or_default();
        if let Some((signer, statement)) = &options.envelope.signer {
            // The weights as stored, read back: the signature covers every byte a
            // reader will read, not what the writer meant to write.
            let weights = envelope::weights_digest(layout.weights_offset, t.offset, |at, buf| {
                sink.read_exact_at(buf, at).map_err(|e| {
                    ContainerError::Unwritable(format!("cannot read back the output: {e}"))
                })
            })?;
            let digest = envelope::content_digest(&out, &weights);
            let block = SignatureBlock::sign(signer, &digest, statement.clone())?.encode();
            if block.len() != signature_len {
                return Err(ContainerError::Unwritable(
                    "the signature has an unexpected length".into(),
                ));
            }
            bytes.extend_from_slice(&block);
        }
        sink.write_all_at(&bytes, t.offset).map_err(output_error)?;
    }
    Ok(Written {
        file_size: layout.file_size,
        crypto: crypto_config,
        key_id: id,
        weight_fields: fields.len(),
        weight_bytes: fields.iter().map(|f| f.plaintext_len).sum(),
    })
}

/// The prefix of a message about graph `t` (none for the main graph).
fn in_graph(t: usize) -> String {
    if t == 0 {
        String::new()
    } else {
        format!("subgraph {t}: ")
    }
}

/// Refuses what the format cannot hold: a long producer string, ranks above 255, more
/// operations or graphs than a u32 counts.
fn check_writable(
    model: &Model,
    options: &WriteOptions,
    graphs: &[&Subgraph],
) -> Result<(), ContainerError> {
    if options.producer.len() > 32 {
        return Err(ContainerError::Unwritable(
            "producer string exceeds 32 bytes".into(),
        ));
    }
    let too_high = |rank: usize| rank > u8::MAX as usize;
    for (t, graph) in graphs.iter().enumerate() {
        if let Some(i) = graph
            .operands
            .iter()
            .position(|o| too_high(o.dimensions.len()))
        {
            return Err(ContainerError::Unwritable(format!(
                "{}operand {i} has rank above 255",
                in_graph(t)
            )));
        }
    }
    let total_ops = model.total_operation_count();
    if u32::try_from(total_ops).is_err() || u32::try_from(graphs.len()).is_err() {
        return Err(ContainerError::Unwritable("too many operations".into()));
    }
    if model
        .input_info
        .iter()
        .chain(&model.output_info)
        .any(|io| too_high(io.dims.len()))
    {
        return Err(ContainerError::Unwritable(
            "a model input or output has rank above 255".into(),
        ));
    }
    Ok(())
}

/// Where every weight goes: into the field of one operation.
struct WeightPlan<'m> {
    /// Per graph, per operand: the global number of the operation whose field holds it.
    owners: Vec<Vec<Option<usize>>>,
    /// Per graph, per operand: (offset, length) in its field, or in the inline area.
    placements: Vec<Vec<(u64, u64)>>,
    /// Per operation: the constants of its field, (offset in the plaintext, bytes).
    pieces: Vec<Vec<(u64, &'m [u8])>>,
    /// Per operation: its field's plaintext length.
    field_lens: Vec<u64>,
}

/// Places the weights in fields. Operations are numbered globally: main's first, then
/// each referenced subgraph's in graph order. Each weight goes into the field of the
/// first operation of its graph that reads it; a later reader refers to that field.
fn plan_weights<'m>(
    model: &'m Model,
    graphs: &[&'m Subgraph],
) -> Result<WeightPlan<'m>, ContainerError> {
    let total_ops = model.total_operation_count();
    let mut owners: Vec<Vec<Option<usize>>> = Vec::with_capacity(graphs.len());
    let mut placements: Vec<Vec<(u64, u64)>> = Vec::with_capacity(graphs.len());
    let mut pieces: Vec<Vec<(u64, &[u8])>> = vec![Vec::new(); total_ops];
    let mut field_lens: Vec<u64> = vec![0; total_ops];
    let mut base = 0usize;
    for (t, graph) in graphs.iter().enumerate() {
        let mut owner: Vec<Option<usize>> = vec![None; graph.operands.len()];
        let mut placement: Vec<(u64, u64)> = vec![(0, 0); graph.operands.len()];
        let weights = weights_of_graph(graph);
        for (op_index, op) in graph.operations.iter().enumerate() {
            for &input in &op.inputs {
                let i = input as usize;
                let operand = graph.operands.get(i).ok_or_else(|| {
                    ContainerError::Unwritable(format!(
                        "{}operation {op_index} reads missing operand {i}",
                        in_graph(t)
                    ))
                })?;
                if !weights[i] || owner[i].is_some() {
                    continue;
                }
                let available = operand.lifetime == Lifetime::ConstantCopy
                    || matches!(
                        model.pools.get(operand.location.pool_index as usize),
                        Some(Pool::Bytes(_))
                    );
                let bytes = match crate::nn::model::constant_bytes(
                    operand,
                    &model.operand_values,
                    &model.pools,
                ) {
                    Some(b) if available => b,
                    _ => {
                        return Err(ContainerError::Unwritable(format!(
                            "{}operand {i}: constant data is not available",
                            in_graph(t)
                        )));
                    }
                };
                let at = align(field_lens[base + op_index]);
                placement[i] = (at, bytes.len() as u64);
                pieces[base + op_index].push((at, bytes));
                field_lens[base + op_index] = at + bytes.len() as u64;
                owner[i] = Some(base + op_index);
            }
        }
        if let Some(i) = (0..graph.operands.len()).find(|&i| weights[i] && owner[i].is_none()) {
            return Err(ContainerError::Unwritable(format!(
                "{}operand {i} is a weight no operation reads",
                in_graph(t)
            )));
        }
        base += graph.operations.len();
        owners.push(owner);
        placements.push(placement);
    }
    Ok(WeightPlan {
        owners,
        placements,
        pieces,
        field_lens,
    })
}

/// The inline area (shared by every graph), placing each inline constant in
/// `placements`. It holds only what stays inline: a moved weight's bytes must not
/// remain there in plaintext.
fn inline_area(
    model: &Model,
    graphs: &[&Subgraph],
    owners: &[Vec<Option<usize>>],
    placements: &mut [Vec<(u64, u64)>],
) -> Result<Vec<u8>, ContainerError> {
    let mut inline = Writer::default();
    for (t, graph) in graphs.iter().enumerate() {
        for (i, o) in graph.operands.iter().enumerate() {
            if o.lifetime == Lifetime::ConstantCopy && owners[t][i].is_none() {
                let bytes =
                    crate::nn::model::constant_bytes(o, &model.operand_values, &model.pools)
                        .ok_or_else(|| {
                            ContainerError::Unwritable(format!(
                                "{}operand {i}: inline value out of range",
                                in_graph(t)
                            ))
                        })?;
                while !inline.buf.len().is_multiple_of(4) {
                    inline.u8(0);
                }
                placements[t][i] = (inline.buf.len() as u64, bytes.len() as u64);
                inline.bytes(bytes);
            }
        }
    }
    Ok(inline.buf)
}

/// The salt, keys and encoded key block of a file (`None`s without a key).
type Keying = ([u8; 32], Option<FileKeys>, Option<Vec<u8>>);

/// The file's salt, keys and key block. Every key, and a reproducible salt, depends on
/// the cipher (format 1.2), so that one model under one key gives each mode its own keys
/// and IVs. The keys derive from a fresh data key (format 1.3), which the key block holds
/// wrapped for the master key and each device recipient. The salt and data key are
/// random, or in reproducible mode keyed PRFs of the content under the master key.
fn salt_and_keys(
    options: &WriteOptions,
    crypto_config: &CryptoConfig,
    encrypt: bool,
    encoding: &Encoding,
    fields: &[FieldPlan],
) -> Result<Keying, ContainerError> {
    if !crypto_config.is_keyed() {
        return Ok(([0; 32], None, None));
    }
    let derivation = Derivation::for_config(crypto_config);
    let master = options.key.map(|k| k.as_bytes());
    let devices = options.envelope.recipients;
    let content = if options.reproducible {
        if master.is_none() || !devices.is_empty() {
            return Err(ContainerError::Unwritable(
                "a reproducible file needs a master key and no device recipients (HPKE wraps \
                 the data key with fresh randomness for each device)"
                    .into(),
            ));
        }
        let probe = encoding.operator_info(&[]);
        let probe_subgraphs = encoding.subgraphs(&[]);
        let mut parts: Vec<&[u8]> = vec![&probe];
        if let Some(p) = &probe_subgraphs {
            parts.push(p);
        }
        for f in fields {
            parts.extend(f.parts());
        }
        Some(crypto::sha256(&parts))
    } else {
        None
    };
    let salt = match (master, &content) {
        (Some(m), Some(digest)) => derivation.reproducible_salt(m, digest),
        _ => crypto::try_random_bytes::<32>()?,
    };
    let c = [
        crypto_config.algorithm.map_or(0, |a| a.code()),
        crypto_config.mode.map_or(0, |m| m.code()),
    ];
    let data_key = envelope::new_data_key(
        master.filter(|_| content.is_some()),
        c,
        &content.unwrap_or_default(),
    )?;
    let mut block = KeyBlock::default();
    if let Some(m) = master {
        block
            .recipients
            .push(envelope::wrap_for_master(m, &data_key, &salt, c)?);
    }
    for device in devices {
        let id = envelope::device_key_id(device);
        if block.recipients.iter().any(|r| r.key_id == id) {
            continue;
        }
        block
            .recipients
            .push(envelope::wrap_for_device(device, &data_key, &salt, c)?);
    }
    if block.recipients.len() > envelope::MAX_RECIPIENTS {
        return Err(ContainerError::Unwritable(format!(
            "{} recipients; a file holds at most {}",
            block.recipients.len(),
            envelope::MAX_RECIPIENTS
        )));
    }
    let keys = FileKeys::derive(&data_key, &salt, derivation)?;
    let keys = match crypto_config.algorithm {
        Some(algorithm) if encrypt => keys.with_encryption(algorithm)?,
        _ => keys,
    };
    Ok((salt, Some(keys), Some(block.encode())))
}

/// The length of the signature block `signer` writes with `statement` (both schemes'
/// signatures are 64 bytes).
fn signature_block_len(signer: &PrivateKey, statement: &[u8]) -> usize {
    SignatureBlock {
        signer: signer.public_key(),
        statement: statement.to_vec(),
        signature: vec![0; 64],
    }
    .encode()
    .len()
}

/// Where everything goes: header, section table, operator info, referenced subgraphs,
/// extra sections, weights. The lengths of the metadata sections do not depend on the
/// fields' IVs and tags, so the whole layout is known before anything is encrypted.
struct Layout {
    has_subgraphs: bool,
    section_count: usize,
    table_offset: u64,
    info_offset: u64,
    info_len: u64,
    subgraphs_offset: u64,
    subgraphs_len: u64,
    /// One offset per extra section.
    extra_offsets: Vec<u64>,
    weights_offset: u64,
    weights_len: u64,
    file_size: u64,
}

impl Layout {
    /// Lays the file out, setting each field's offset.
    fn plan(
        model: &Model,
        options: &WriteOptions,
        encoding: &Encoding,
        fields: &mut [FieldPlan],
    ) -> Layout {
        let has_subgraphs = !model.referenced.is_empty();
        let section_count = 2 + usize::from(has_subgraphs) + options.extra_sections.len();
        let table_offset = HEADER_SIZE as u64;
        let info_offset = align(table_offset + (section_count * SECTION_ENTRY_SIZE) as u64);
        let placeholder = descriptors(fields, &[]);
        let info_len = encoding.operator_info(&placeholder).len() as u64;
        let mut cursor = align(info_offset + info_len);
        let subgraphs_offset = cursor;
        let subgraphs_len = encoding
            .subgraphs(&placeholder)
            .map_or(0, |b| b.len() as u64);
        if has_subgraphs {
            cursor = align(cursor + subgraphs_len);
        }
        let mut extra_offsets = Vec::new();
        for (_, bytes) in &options.extra_sections {
            extra_offsets.push(cursor);
            cursor = align(cursor + bytes.len() as u64);
        }
        let weights_offset = cursor;
        for f in fields.iter_mut() {
            f.offset = cursor;
            cursor = align(cursor + f.stored_len);
        }
        Layout {
            has_subgraphs,
            section_count,
            table_offset,
            info_offset,
            info_len,
            subgraphs_offset,
            subgraphs_len,
            extra_offsets,
            weights_offset,
            weights_len: cursor - weights_offset,
            file_size: cursor.max(weights_offset),
        }
    }

    /// The section table's entries: (kind, offset, length).
    fn sections(&self, options: &WriteOptions, subgraphs: Option<&[u8]>) -> Vec<(u32, u64, u64)> {
        let mut sections: Vec<(u32, u64, u64)> = vec![(
            SectionKind::OperatorInfo as u32,
            self.info_offset,
            self.info_len,
        )];
        if let Some(bytes) = subgraphs {
            debug_assert_eq!(bytes.len() as u64, self.subgraphs_len);
            sections.push((
                SectionKind::Subgraphs as u32,
                self.subgraphs_offset,
                self.subgraphs_len,
            ));
        }
        for ((kind, bytes), &offset) in options.extra_sections.iter().zip(&self.extra_offsets) {
            sections.push((*kind as u32, offset, bytes.len() as u64));
        }
        sections.push((
            SectionKind::Weights as u32,
            self.weights_offset,
            self.weights_len,
        ));
        sections
    }
}

/// The header up to (not including) its tag. A file with a key is format 1.2
/// (cipher-bound keys); one without is 1.1 with referenced subgraphs and 1.0 otherwise.
fn header(
    options: &WriteOptions,
    layout: &Layout,
    crypto_config: &CryptoConfig,
    encrypt: bool,
    salt: &[u8; 32],
    id: &[u8; 16],
    trailer: &Option<Trailer>,
) -> Vec<u8> {
    let mut h = Writer::default();
    h.bytes(&MAGIC);
    h.u16(FORMAT_MAJOR);
    h.u16(if trailer.is_some() {
        FORMAT_MINOR_ENVELOPE
    } else if options.key.is_some() {
        FORMAT_MINOR_CIPHER_BOUND
    } else if layout.has_subgraphs {
        FORMAT_MINOR_SUBGRAPHS
    } else {
        FORMAT_MINOR_BASE
    });
    h.u32(HEADER_SIZE as u32);
    h.u64(layout.file_size);
    let mut flags = 0;
    if encrypt {
        flags |= FLAG_ENCRYPTED;
    }
    if options.reproducible {
        flags |= FLAG_REPRODUCIBLE;
    }
    if crypto_config.segmented {
        flags |= FLAG_SEGMENTED;
    }
    h.u32(flags);
    h.u32(layout.section_count as u32);
    h.u64(layout.table_offset);
    let mut producer = [0u8; 32];
    producer[..options.producer.len()].copy_from_slice(options.producer.as_bytes());
    h.bytes(&producer);
    h.u8(crypto_config.algorithm.map_or(0, |a| a.code()));
    h.u8(crypto_config.mode.map_or(0, |m| m.code()));
    h.u8(crypto_config.padding.code());
    h.u8(crypto_config.integrity.code());
    h.bytes(&[0; 4]);
    h.bytes(id);
    h.bytes(salt);
    // metadata_length (written by `metadata`), then 1.3's trailer location.
    h.u64(0);
    if let Some(t) = trailer {
        h.u64(t.offset);
        h.u32(t.key_block_len);
        h.u32(t.signature_len);
    }
    debug_assert!(h.buf.len() <= TAG_OFFSET);
    h.buf
}

/// The metadata region, `[0, weights_offset)`: header, section table and sections,
/// with the metadata tag.
fn metadata(
    layout: &Layout,
    options: &WriteOptions,
    header: &[u8],
    sections: &[(u32, u64, u64)],
    info: &[u8],
    subgraph_section: Option<&[u8]>,
    keys: Option<&FileKeys>,
) -> Result<Vec<u8>, ContainerError> {
    let metadata_length = usize::try_from(layout.weights_offset)
        .map_err(|_| ContainerError::Unwritable("file too large".into()))?;
    let mut out = vec![0u8; metadata_length];
    out[..header.len()].copy_from_slice(header);
    // Section table.
    let mut t = Writer::default();
    for &(kind, offset, length) in sections {
        t.u32(kind);
        t.u32(SECTION_REQUIRED);
        t.u64(offset);
        t.u64(length);
        t.u64(0);
    }
    let table_offset = layout.table_offset as usize;
    out[table_offset..table_offset + t.buf.len()].copy_from_slice(&t.buf);
    // Sections.
    let (info_offset, info_len) = (layout.info_offset, layout.info_len);
    out[info_offset as usize..(info_offset + info_len) as usize].copy_from_slice(info);
    if let Some(bytes) = subgraph_section {
        let at = layout.subgraphs_offset as usize;
        out[at..at + bytes.len()].copy_from_slice(bytes);
    }
    for ((_, bytes), &offset) in options.extra_sections.iter().zip(&layout.extra_offsets) {
        out[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
    }
    // The metadata tag covers every byte before the weights (their own tags, in the
    // operator info, cover them), except the tag itself.
    out[METADATA_LENGTH_OFFSET..METADATA_LENGTH_OFFSET + 8]
        .copy_from_slice(&layout.weights_offset.to_le_bytes());
    let parts: Vec<&[u8]> = vec![&out[..TAG_OFFSET], &out[HEADER_SIZE..metadata_length]];
    let metadata = tag(keys, label::METADATA, &parts);
    out[TAG_OFFSET..TAG_OFFSET + 32].copy_from_slice(&metadata);
    Ok(out)
}

fn output_error(e: std::io::Error) -> ContainerError {
    ContainerError::Unwritable(format!("cannot write the output: {e}"))
}

/// How every field of one file is sealed.
#[derive(Clone, Copy)]
struct Seal<'a> {
    keys: Option<&'a FileKeys>,
    encrypt: bool,
    segmented: bool,
    options: &'a WriteOptions<'a>,
}

/// Plaintext bytes a worker seals at a time: small enough to stay in cache while it is
/// assembled, encrypted, tagged and written, so a field is never held whole.
const CHUNK: u64 = 256 * 1024;
// Chunks end on segment boundaries (only the last chunk of a field may end elsewhere).
const _: () = assert!((CHUNK as usize).is_multiple_of(crypto::SEGMENT_LEN));

/// Encrypts (when `encrypt`), authenticates and stores every field, largest first,
/// on as many workers as there are cores (at most 8). Chained modes are sequential
/// within a field, but fields are independent. Each worker keeps one chunk buffer
/// (wiped when it is dropped) for all its fields.
fn seal_fields(
    fields: &[FieldPlan],
    keys: Option<&FileKeys>,
    encrypt: bool,
    segmented: bool,
    options: &WriteOptions,
    sink: &impl Sink,
) -> Result<Vec<Sealed>, ContainerError> {
    let mut order: Vec<usize> = (0..fields.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(fields[i].plaintext_len));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .min(fields.len().max(1));
    let work = || -> Result<Vec<Sealed>, ContainerError> {
        let mut chunk = Zeroizing::new(Vec::with_capacity(CHUNK as usize + 16));
        let mut sealed = Vec::new();
        loop {
            if failed.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(sealed);
            }
            let Some(&index) = order.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
            else {
                return Ok(sealed);
            };
            let field = &fields[index];
            let how = Seal {
                keys,
                encrypt,
                segmented,
                options,
            };
            match seal_field(index, field, &how, sink, &mut chunk) {
                Ok(s) => sealed.push(s),
                Err(e) => {
                    failed.store(true, std::sync::atomic::Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
    };
    let results: Vec<Result<Vec<Sealed>, ContainerError>> = if workers <= 1 {
        vec![work()]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers).map(|_| scope.spawn(work)).collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(ContainerError::Unwritable("a writing worker failed".into()))
                    })
                })
                .collect()
        })
    };
    let mut all = Vec::with_capacity(fields.len());
    for r in results {
        all.extend(r?);
    }
    all.sort_by_key(|s| s.0);
    Ok(all)
}

/// One field: its IV chosen, then chunk by chunk assembled, encrypted, tagged and
/// stored.
fn seal_field(
    index: usize,
    field: &FieldPlan,
    how: &Seal,
    sink: &impl Sink,
    chunk: &mut Vec<u8>,
) -> Result<Sealed, ContainerError> {
    let Seal {
        keys,
        encrypt,
        segmented,
        options,
    } = *how;
    let gcm = encrypt && options.mode == crypto::Mode::Gcm;
    let mut iv = [0u8; 16];
    let mut cipher = match keys.filter(|_| encrypt) {
        Some(k) => {
            iv = if options.reproducible {
                let digest = crypto::sha256(&field.parts());
                let full = crypto::hmac_sha256(
                    &k.iv_derivation,
                    &[label::IV, &(index as u32).to_le_bytes(), &digest],
                );
                let mut iv = [0u8; 16];
                iv.copy_from_slice(&full[..16]);
                iv
            } else {
                crypto::try_random_bytes::<16>()?
            };
            reserve_counter_space(options.mode, &mut iv);
            let key = k
                .encryption
                .as_ref()
                .ok_or_else(|| ContainerError::Unwritable("no encryption key".into()))?;
            if gcm {
                let aad = field_binding(index as u32, field.offset, field.plaintext_len, &iv);
                FieldCipher::Gcm(crypto::GcmSealer::new(key, &gcm_nonce(&iv), &aad)?)
            } else {
                FieldCipher::Blocks(crypto::FieldEncryptor::new(
                    key,
                    options.mode,
                    &iv,
                    segmented,
                ))
            }
        }
        None => FieldCipher::Plain,
    };
    // GCM's tag authenticates the field; the other modes are encrypt-then-MAC.
    let mut mac = (!gcm)
        .then(|| FieldTagWriter::new(keys, index as u32, field.offset, field.plaintext_len, &iv));
    let mut gcm_tag = [0u8; 16];
    let mut at = 0u64;
    loop {
        let end = (at + CHUNK).min(field.plaintext_len);
        field.assemble_range(at, end, chunk);
        let last = end == field.plaintext_len;
        match (std::mem::replace(&mut cipher, FieldCipher::Plain), last) {
            (FieldCipher::Blocks(e), true) => e.finish(chunk)?,
            (FieldCipher::Gcm(g), true) => gcm_tag = g.finish(chunk)?,
            (FieldCipher::Blocks(mut e), false) => {
                e.update(chunk)?;
                cipher = FieldCipher::Blocks(e);
            }
            (FieldCipher::Gcm(mut g), false) => {
                g.update(chunk)?;
                cipher = FieldCipher::Gcm(g);
            }
            (FieldCipher::Plain, _) => {}
        }
        if let Some(m) = mac.as_mut() {
            m.update(chunk);
        }

        sink.write_all_at(chunk, field.offset + at)
            .map_err(output_error)?;
        if last {
            debug_assert_eq!(at + chunk.len() as u64, field.stored_len);
            let tag = match mac {
                Some(m) => m.finish(),
                None => {
                    let mut slot = [0u8; 32];
                    slot[..16].copy_from_slice(&gcm_tag);
                    slot
                }
            };
            return Ok((index, iv, tag));
        }
        at = end;
    }
}

/// Keeps the counter blocks of CTR and GCM apart whatever the keys: a CTR IV starts
/// with bits `10`, so its blocks `IV + j` (j < 2^64) all have the top bit set; a GCM
/// nonce has it clear, and so do its blocks `nonce || c`. GCM's nonce is 96 bits, the
/// IV's last 4 bytes zero. Other modes' IVs are left as drawn.
fn reserve_counter_space(mode: Mode, iv: &mut [u8; 16]) {
    match mode {
        Mode::Ctr => iv[0] = (iv[0] & 0x3f) | 0x80,
        Mode::Gcm => {
            iv[0] &= 0x7f;
            iv[12..].fill(0);
        }
        _ => {}
    }
}

/// How a field's stored bytes are made from its plaintext.
enum FieldCipher<'k> {
    /// Unencrypted (digests or authenticated plaintext).
    Plain,
    /// A confidentiality mode, tagged with HMAC-SHA-256.
    Blocks(crypto::FieldEncryptor<'k>),
    /// GCM, which tags itself.
    Gcm(crypto::GcmSealer<'k>),
}

/// Field descriptor per operation: (operation, offset, stored length, plaintext
/// length, IV, tag).
type Descriptor = (usize, u64, u64, u64, [u8; 16], [u8; 32]);

/// The descriptors of `fields`, with the IVs and tags of `sealed` (zero where a field
/// has none yet: the layout pass needs only the lengths).
fn descriptors(fields: &[FieldPlan], sealed: &[Sealed]) -> Vec<Descriptor> {
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (iv, tag) = sealed.get(i).map_or(([0; 16], [0; 32]), |s| (s.1, s.2));
            (
                f.operation,
                f.offset,
                f.stored_len,
                f.plaintext_len,
                iv,
                tag,
            )
        })
        .collect()
}

/// What the operator-info and subgraph sections encode, per graph (0 = main): which
/// operation's field holds each weight, and where each constant lies.
struct Encoding<'a> {
    model: &'a Model,
    owners: &'a [Vec<Option<usize>>],
    placements: &'a [Vec<(u64, u64)>],
    inline: &'a [u8],
    arena: Option<&'a (u64, Vec<Option<ArenaSlot>>)>,
}

impl Encoding<'_> {
    /// Field descriptors by global operation number.
    fn field_of<'d>(&self, fields: &'d [Descriptor]) -> Vec<Option<&'d Descriptor>> {
        let mut field_of: Vec<Option<&Descriptor>> = vec![None; self.model.total_operation_count()];
        for d in fields {
            if let Some(slot) = field_of.get_mut(d.0) {
                *slot = Some(d);
            }
        }
        field_of
    }

    /// The operator-info section (see docs/FORMAT.md for the byte layout).
    fn operator_info(&self, fields: &[Descriptor]) -> Vec<u8> {
        let model = self.model;
        let g = &model.main;
        let field_of = self.field_of(fields);
        let mut w = Writer::default();
        w.u32(g.operands.len() as u32);
        w.u32(g.operations.len() as u32);
        w.u32(g.inputs.len() as u32);
        w.u32(g.outputs.len() as u32);
        w.u32(u32::from(model.relax_computation_float32_to_float16));
        w.u64(self.inline.len() as u64);
        w.u64(self.arena.map_or(u64::MAX, |a| a.0));
        self.operands(&mut w, 0);
        for &i in &g.inputs {
            w.u32(i);
        }
        for &o in &g.outputs {
            w.u32(o);
        }
        for info in model.input_info.iter().chain(&model.output_info) {
            w.str(&info.name);
            w.u8(dtype_code(info.dtype));
            w.u8(info.dims.len() as u8);
            w.u16(0);
            for &d in &info.dims {
                w.u32(d);
            }
        }
        units(&mut w, g, &field_of[..g.operations.len()]);
        w.bytes(self.inline);
        w.buf
    }

    /// The referenced-subgraphs section (kind 4), `None` when the model has none.
    fn subgraphs(&self, fields: &[Descriptor]) -> Option<Vec<u8>> {
        let model = self.model;
        if model.referenced.is_empty() {
            return None;
        }
        let field_of = self.field_of(fields);
        let mut w = Writer::default();
        w.u32(model.referenced.len() as u32);
        let mut base = model.main.operations.len();
        for (k, g) in model.referenced.iter().enumerate() {
            w.u32(g.operands.len() as u32);
            w.u32(g.operations.len() as u32);
            w.u32(g.inputs.len() as u32);
            w.u32(g.outputs.len() as u32);
            self.operands(&mut w, k + 1);
            for &i in &g.inputs {
                w.u32(i);
            }
            for &o in &g.outputs {
                w.u32(o);
            }
            let end = base + g.operations.len();
            units(&mut w, g, field_of.get(base..end).unwrap_or(&[]));
            base = end;
        }
        Some(w.buf)
    }

    /// The operand table of graph `t`.
    fn operands(&self, w: &mut Writer, t: usize) {
        let Some(g) = self.model.graph(t) else {
            return;
        };
        let (owner, placement) = (&self.owners[t], &self.placements[t]);
        for (i, o) in g.operands.iter().enumerate() {
            // Weights are stored in fields whatever their size: they become
            // CONSTANT_REFERENCE.
            let lifetime = if owner[i].is_some() {
                Lifetime::ConstantReference
            } else {
                o.lifetime
            };
            w.i32(o.operand_type.code());
            w.u8(lifetime.code() as u8);
            w.u8(o.dimensions.len() as u8);
            w.u8(u8::from(o.channel_quant.is_some()));
            w.u8(0);
            w.f32(o.scale);
            w.i32(o.zero_point);
            for &d in &o.dimensions {
                w.u32(d);
            }
            // Only main's temporaries have arena slots (the memory plan is main's).
            let slot = if t == 0 {
                self.arena.and_then(|a| a.1.get(i).copied().flatten())
            } else {
                None
            };
            let (index, offset, length) = match lifetime {
                Lifetime::ConstantReference => {
                    (owner[i].unwrap_or(0) as u32, placement[i].0, placement[i].1)
                }
                Lifetime::ConstantCopy => (0, placement[i].0, placement[i].1),
                Lifetime::Subgraph => (o.location.pool_index, o.location.offset, o.location.length),
                Lifetime::TemporaryVariable => match slot {
                    Some(slot) => (0, slot.offset, slot.size),
                    None => (0, u64::MAX, 0),
                },
                _ => (0, 0, 0),
            };
            w.u32(index);
            w.u64(offset);
            w.u64(length);
            if let Some(q) = &o.channel_quant {
                w.u32(q.channel_dim);
                w.u32(q.scales.len() as u32);
                for &s in &q.scales {
                    w.f32(s);
                }
            }
            w.str(&o.name);
        }
    }
}

/// The units of a graph's operations; `field_of[k]` is operation k's field.
fn units(w: &mut Writer, g: &Subgraph, field_of: &[Option<&Descriptor>]) {
    for (op_index, op) in g.operations.iter().enumerate() {
        w.i32(op.op_type.code());
        w.u32(op.inputs.len() as u32);
        for &i in &op.inputs {
            w.u32(i);
        }
        w.u32(op.outputs.len() as u32);
        for &o in &op.outputs {
            w.u32(o);
        }
        w.str(&op.source);
        match field_of.get(op_index).copied().flatten() {
            Some(&(_, offset, length, plaintext_len, iv, tag)) => {
                w.u8(1);
                w.bytes(&[0; 3]);
                w.u64(offset);
                w.u64(length);
                w.u64(plaintext_len);
                w.bytes(&iv);
                w.bytes(&tag);
            }
            None => {
                w.u8(0);
                w.bytes(&[0; 3]);
            }
        }
    }
}
