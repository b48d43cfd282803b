//! Changing who can open a 1.3 file without touching its weights: add or remove device
//! recipients, or replace the master key (rotation). Only the header (file size, key
//! identifier, key block length, metadata tag) and the trailer change; every weight
//! field keeps its bytes and offset, and a signature keeps holding (it does not cover
//! the key block).

use super::envelope::{self, KeyBlock, Opener, RecipientKind, Trailer};
use super::{
    ContainerError, Derivation, FORMAT_MINOR_ENVELOPE, FileKeys, HEADER_SIZE, TAG_OFFSET, label,
    tag,
};
use crate::crypto::PublicKey;

/// What a rewrap changes.
#[derive(Default)]
pub struct RecipientChanges<'a> {
    /// Device keys to add (already present ones are left as they are).
    pub add: &'a [PublicKey],
    /// Recipients to remove, by key identifier.
    pub remove: &'a [[u8; 16]],
    /// Replaces every master-key recipient with this key (16, 24 or 32 bytes).
    pub new_master: Option<&'a [u8]>,
}

/// The bytes that change: write `header` at offset 0, cut the file to `trailer_offset`
/// and append `trailer`.
pub struct Rewrapped {
    pub header: [u8; HEADER_SIZE],
    pub trailer_offset: u64,
    pub trailer: Vec<u8>,
    pub key_block: KeyBlock,
}

impl Rewrapped {
    pub fn file_len(&self) -> u64 {
        self.trailer_offset + self.trailer.len() as u64
    }
}

/// Plans a rewrap of the file whose metadata copy ([`super::copy_metadata_from`]: region
/// and trailer) is `meta`, opened with `key` (a master key or a device's PKCS#8 private
/// key): the file is authenticated with it first.
///
/// # Errors
///
/// Anything opening the file raises; [`ContainerError::Unwritable`] for a file before
/// format 1.3 or without a key, for removing a recipient the file does not have, or for a
/// change that would leave nobody able to open the file.
pub fn rewrap(
    meta: &[u8],
    key: &[u8],
    changes: &RecipientChanges,
) -> Result<Rewrapped, ContainerError> {
    if meta.len() < HEADER_SIZE {
        return Err(ContainerError::Truncated {
            what: "the header".into(),
            needed: HEADER_SIZE as u64,
            available: meta.len() as u64,
        });
    }
    let minor = u16::from_le_bytes([meta[10], meta[11]]);
    if minor < FORMAT_MINOR_ENVELOPE || !is_keyed(meta) {
        return Err(ContainerError::Unwritable(format!(
            "the file is format 1.{minor}{}; only 1.3 files with a key have recipients to \
             change (compile the model again with this nnc)",
            if is_keyed(meta) { "" } else { " without a key" }
        )));
    }
    super::authenticate_metadata(meta, Some(key))?;
    let opener = Opener::from_bytes(key)?;
    let metadata_length = super::authenticate::metadata_length_of(meta);
    let data_key = envelope::open_data_key(meta, metadata_length, &opener)?;
    let old = Trailer::of_header(meta);
    let region_end = metadata_length as usize;
    let key_block_end = region_end + old.key_block_len as usize;
    let (Some(key_block), Some(signature)) = (
        meta.get(region_end..key_block_end),
        meta.get(key_block_end..),
    ) else {
        return Err(ContainerError::Integrity {
            what: "the key block".into(),
        });
    };
    let mut block = KeyBlock::decode(key_block)?;

    let mut salt = [0u8; 32];
    salt.copy_from_slice(&meta[96..128]);
    let c = [meta[72], meta[73]];
    for id in changes.remove {
        let before = block.recipients.len();
        block.recipients.retain(|r| r.key_id != *id);
        if block.recipients.len() == before {
            return Err(ContainerError::Unwritable(format!(
                "the file has no recipient with key id {}",
                hex::encode(id)
            )));
        }
    }
    if let Some(master) = changes.new_master {
        block
            .recipients
            .retain(|r| r.kind != RecipientKind::MasterKey);
        block
            .recipients
            .insert(0, envelope::wrap_for_master(master, &data_key, &salt, c)?);
    }
    for device in changes.add {
        let id = envelope::device_key_id(device);
        if !block.recipients.iter().any(|r| r.key_id == id) {
            block
                .recipients
                .push(envelope::wrap_for_device(device, &data_key, &salt, c)?);
        }
    }
    if block.recipients.is_empty() {
        return Err(ContainerError::Unwritable(
            "the change would leave the file with no recipient: nobody could open it".into(),
        ));
    }
    if block.recipients.len() > envelope::MAX_RECIPIENTS {
        return Err(ContainerError::Unwritable(format!(
            "{} recipients; a file holds at most {}",
            block.recipients.len(),
            envelope::MAX_RECIPIENTS
        )));
    }

    let key_bytes = block.encode();
    let new = Trailer {
        offset: old.offset,
        key_block_len: key_bytes.len() as u32,
        signature_len: signature.len() as u32,
    };
    let mut trailer = key_bytes;
    trailer.extend_from_slice(signature);
    let mut header = [0u8; HEADER_SIZE];
    header.copy_from_slice(&meta[..HEADER_SIZE]);
    header[16..24].copy_from_slice(&(new.offset + new.len()).to_le_bytes());
    header[80..96].copy_from_slice(&block.recipients[0].key_id);
    new.store(&mut header);
    let keys = FileKeys::derive(&data_key, &salt, Derivation::of_header(&header))?;
    let t = tag(
        Some(&keys),
        label::METADATA,
        &[&header[..TAG_OFFSET], &meta[HEADER_SIZE..region_end]],
    );
    header[TAG_OFFSET..].copy_from_slice(&t);
    Ok(Rewrapped {
        header,
        trailer_offset: new.offset,
        trailer,
        key_block: block,
    })
}

fn is_keyed(meta: &[u8]) -> bool {
    let flags = u32::from_le_bytes([meta[24], meta[25], meta[26], meta[27]]);
    flags & super::FLAG_ENCRYPTED != 0 || meta[75] == super::Integrity::HmacSha256.code()
}
