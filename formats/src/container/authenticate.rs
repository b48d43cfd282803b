//! Authentication before anything is trusted: the key identifier or key block and the
//! metadata tag (`authenticate_metadata`), the signature of a format 1.3 file
//! (`verify_signature`, which needs no key and no parse).

use super::envelope::{self, Opener, SignatureBlock, Trailer};
use super::parse::copy_metadata;
use super::source::Source;
use super::{
    ContainerError, Derivation, FLAG_ENCRYPTED, FORMAT_MINOR_ENVELOPE, FileKeys, HEADER_SIZE,
    Integrity, METADATA_LENGTH_OFFSET, TAG_OFFSET, key_id, label, tag,
};
use crate::crypto::{self, Algorithm};

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
pub(super) fn copy_for_authentication(bytes: &[u8]) -> Result<Vec<u8>, ContainerError> {
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
    // A copy from `copy_metadata` has the whole header; anything shorter is refused
    // rather than indexed.
    if meta.len() < HEADER_SIZE {
        return Err(ContainerError::Truncated {
            what: "the header".into(),
            needed: HEADER_SIZE as u64,
            available: meta.len() as u64,
        });
    }
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
