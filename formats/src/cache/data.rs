//! Data-cache files: prepared constants, sealed with AES-256-GCM under a key derived from
//! the model's key, or checksummed with SHA-256 for an unencrypted model.
//!
//! AES-256-GCM because a cache hit must be fast (hardware AES and GHASH run at gigabytes
//! per second, where re-decrypting SM4 fields is the slow path the cache exists to skip)
//! and because it authenticates: a flipped bit, appended bytes, or another model's file
//! fail before a byte is used. Through `ring` (BoringSSL's AES-GCM, one pass with VAES
//! and VPCLMULQDQ: 7.5-8.5 GB/s on one core here, where nnc's own GCM, built from its
//! CTR and the `ghash` crate for the weight fields' streamed and SM4 variants, runs at
//! 2.8); the bytes are standard AES-256-GCM either way. The nonce is random per file; the associated data binds
//! the token and the file's position, so a file cannot be moved to another entry or slot.
//!
//! The plaintext is sealed in segments ([`SEGMENT_LEN`] bytes, the last shorter), each
//! with its own tag: a hit reads every segment straight into the storage the kernels
//! will use and authenticates and decrypts it there while it is still in the processor's
//! cache, on every core at once (one GCM over the whole file is one serial GHASH chain
//! and a second pass over memory). Segment `s` uses the file's nonce with its last four
//! bytes XORed with `s` (big-endian), as TLS 1.3 derives per-record nonces, and the
//! header as associated data; the header holds the plaintext length and the segment
//! length, so no segment can be dropped, reordered, repeated or truncated unnoticed.
//!
//! Layout (version 2): magic `NNCDCACH`, u16 version, u16 part, u16 part count, u8
//! protection (1 AES-256-GCM, 2 SHA-256), u8 reserved 0, token [32], nonce [12], u32
//! segment length, u64 plaintext length; then the sealed plaintext; then one
//! authenticator per segment (GCM: its 16-byte tag; SHA-256: the 32-byte digest of the
//! header, the segment's index as u64 and its plaintext).

use ring::aead;
use zeroize::Zeroizing;

use super::{CacheError, Token};
use crate::crypto::{self, hkdf_sha256};
use crate::parallel;

const MAGIC: &[u8; 8] = b"NNCDCACH";
const VERSION: u16 = 2;
const HEADER_LEN: usize = 8 + 2 + 2 + 2 + 1 + 1 + 32 + 12 + 4 + 8;
const GCM: u8 = 1;
const CHECKSUM: u8 = 2;
const GCM_TAG_LEN: usize = 16;
const DIGEST_LEN: usize = 32;

/// Plaintext bytes per sealed segment: small enough to stay in a core's L2 cache
/// between reading it and opening it, large enough that per-segment set-up is noise.
pub const SEGMENT_LEN: usize = 256 * 1024;

/// Segment lengths a reader accepts (a writer of another build may choose another).
const SEGMENT_LEN_RANGE: std::ops::RangeInclusive<usize> = 4096..=(64 << 20);
/// The keys of one cache entry of a model that has a key: HKDF-SHA-256 of the model's
/// master key with the step's token as salt, one for sealing the data-cache files
/// (AES-256-GCM) and one for authenticating the entry in the index (HMAC-SHA-256 over the
/// digests of every file of the entry). Zeroized on drop.
pub struct CacheKey {
    data: Zeroizing<Vec<u8>>,
    index: Zeroizing<Vec<u8>>,
}

impl CacheKey {
    pub fn derive(master: &[u8], token: &Token) -> Result<CacheKey, CacheError> {
        let derive = |label: &[u8]| {
            hkdf_sha256(master, token, label, 32).map_err(|e| CacheError::Options(e.to_string()))
        };
        Ok(CacheKey {
            data: derive(b"nnc/v1 data cache key")?,
            index: derive(b"nnc/v1 cache index key")?,
        })
    }

    /// The data-cache cipher. Boxed so that its key schedule lives on the heap, where a
    /// wiping allocator (the `nnc` binary's) clears it when freed: `ring` does not
    /// zeroize it.
    fn gcm(&self) -> Result<Box<aead::LessSafeKey>, ()> {
        let key = aead::UnboundKey::new(&aead::AES_256_GCM, &self.data).map_err(|_| ())?;
        Ok(Box::new(aead::LessSafeKey::new(key)))
    }

    /// The tag of an index entry: binds the token and the model file's digest (see
    /// [`super::IndexEntry::model_digest`]) to the digest of every model- and data-cache
    /// file, so no file can be changed (nor its digest in the index), and no entry of
    /// another model passed off as this one's, without the model's key.
    pub fn entry_tag(
        &self,
        token: &Token,
        model_digest: &str,
        model: &[String],
        data: &[String],
    ) -> String {
        let digest_len = (model_digest.len() as u32).to_le_bytes();
        let mut parts: Vec<&[u8]> = vec![
            b"nnc/v1 cache entry of a model",
            token,
            &digest_len,
            model_digest.as_bytes(),
        ];
        let counts = [model.len() as u32, data.len() as u32].map(u32::to_le_bytes);
        parts.push(&counts[0]);
        parts.extend(model.iter().map(String::as_bytes));
        parts.push(&counts[1]);
        parts.extend(data.iter().map(String::as_bytes));
        hex::encode(crypto::hmac_sha256(&self.index, &parts))
    }
}

/// Where a data-cache file is read from: a file (read at offsets, from several threads),
/// or bytes in memory.
pub trait ReadAt: Sync {
    /// The source's length in bytes.
    fn byte_len(&self) -> std::io::Result<u64>;
    /// Fills `buf` from `offset`; fails if the source ends first.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
}

impl ReadAt for std::fs::File {
    fn byte_len(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    #[cfg(unix)]
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }

    #[cfg(windows)]
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
        use std::os::windows::fs::FileExt;
        while !buf.is_empty() {
            match self.seek_read(buf, offset)? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }
}

impl ReadAt for [u8] {
    fn byte_len(&self) -> std::io::Result<u64> {
        Ok(self.len() as u64)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let bytes = usize::try_from(offset)
            .ok()
            .and_then(|start| self.get(start..start.checked_add(buf.len())?))
            .ok_or(std::io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(bytes);
        Ok(())
    }
}

fn header(
    token: &Token,
    part: u16,
    count: u16,
    protection: u8,
    nonce: &[u8; 12],
    plaintext_len: u64,
) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..10].copy_from_slice(&VERSION.to_le_bytes());
    h[10..12].copy_from_slice(&part.to_le_bytes());
    h[12..14].copy_from_slice(&count.to_le_bytes());
    h[14] = protection;
    h[16..48].copy_from_slice(token);
    h[48..60].copy_from_slice(nonce);
    h[60..64].copy_from_slice(&(SEGMENT_LEN as u32).to_le_bytes());
    h[64..72].copy_from_slice(&plaintext_len.to_le_bytes());
    h
}

/// How many segments a plaintext of `len` bytes is sealed in: at least one, so that
/// even an empty plaintext carries an authenticator.
fn segment_count(len: usize, segment_len: usize) -> usize {
    len.div_ceil(segment_len).max(1)
}

/// The nonce of segment `index`.
fn segment_nonce(nonce: &[u8; 12], index: usize) -> [u8; 12] {
    let mut n = *nonce;
    for (b, i) in n[8..].iter_mut().zip((index as u32).to_be_bytes()) {
        *b ^= i;
    }
    n
}

fn segment_digest(header: &[u8], index: usize, plaintext: &[u8]) -> [u8; DIGEST_LEN] {
    crypto::sha256(&[header, &(index as u64).to_le_bytes(), plaintext])
}

/// Seals `plaintext` as data-cache file `part` of `count` for `token`.
pub fn seal_data(
    key: Option<&CacheKey>,
    token: &Token,
    part: u16,
    count: u16,
    plaintext: &[u8],
) -> Result<Vec<u8>, CacheError> {
    let failed = |m: String| CacheError::Options(format!("data-cache sealing failed: {m}"));
    let segments = segment_count(plaintext.len(), SEGMENT_LEN);
    let (protection, nonce, auth_len) = match key {
        Some(_) => {
            let nonce: [u8; 12] = crypto::try_random_bytes().map_err(|e| failed(e.to_string()))?;
            (GCM, nonce, GCM_TAG_LEN)
        }
        None => (CHECKSUM, [0; 12], DIGEST_LEN),
    };
    let h = header(
        token,
        part,
        count,
        protection,
        &nonce,
        plaintext.len() as u64,
    );
    let total = segments
        .checked_mul(auth_len)
        .and_then(|a| (HEADER_LEN + plaintext.len()).checked_add(a))
        .ok_or_else(|| failed("too large".into()))?;
    let mut out = Vec::new();
    out.try_reserve_exact(total)
        .map_err(|_| failed("out of memory".into()))?;
    out.extend_from_slice(&h);
    out.extend_from_slice(plaintext);
    out.resize(total, 0);
    let (body, auth) = out[HEADER_LEN..].split_at_mut(plaintext.len());
    let mut body_segments: Vec<&mut [u8]> = body.chunks_mut(SEGMENT_LEN).collect();
    if body_segments.is_empty() {
        body_segments.push(&mut []);
    }
    let items = body_segments
        .into_iter()
        .zip(auth.chunks_mut(auth_len))
        .enumerate();
    let cipher = match key {
        Some(k) => Some(k.gcm().map_err(|()| failed("bad data-cache key".into()))?),
        None => None,
    };
    parallel::for_each(
        items,
        parallel::workers_for(segments),
        |(s, (segment, slot))| {
            match &cipher {
                Some(cipher) => {
                    let tag = cipher
                        .seal_in_place_separate_tag(
                            aead::Nonce::assume_unique_for_key(segment_nonce(&nonce, s)),
                            aead::Aad::from(&h),
                            segment,
                        )
                        .map_err(|_| failed("the segment is too long".into()))?;
                    slot.copy_from_slice(tag.as_ref());
                }
                None => slot.copy_from_slice(&segment_digest(&h, s, segment)),
            }
            Ok(())
        },
    )?;
    Ok(out)
}

/// A data-cache file whose header and authenticators have been read and checked against
/// the expected token and slot; [`DataFile::read_into`] reads and opens its plaintext.
pub struct DataFile<'s, S: ReadAt + ?Sized> {
    source: &'s S,
    header: [u8; HEADER_LEN],
    cipher: Option<Box<aead::LessSafeKey>>,
    nonce: [u8; 12],
    segment_len: usize,
    plaintext_len: usize,
    /// One authenticator per segment.
    auth: Vec<u8>,
    auth_len: usize,
    part: u16,
    token: Token,
}

impl<S: ReadAt + ?Sized> std::fmt::Debug for DataFile<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataFile")
            .field("part", &self.part)
            .field("plaintext_len", &self.plaintext_len)
            .finish_non_exhaustive()
    }
}

fn invalid_for(token: &Token, part: u16, m: &str) -> CacheError {
    CacheError::Invalid {
        token: hex::encode(token),
        message: format!("data cache file {part}: {m}"),
    }
}

/// Opens data-cache file `part` of `count` for `token`: reads and checks its header
/// (magic, version, slot, token, protection against whether the model has a key,
/// lengths against the file's) and its authenticators. The plaintext is read by
/// [`DataFile::read_into`], which authenticates every byte before returning it.
pub fn open_data<'s, S: ReadAt + ?Sized>(
    key: Option<&CacheKey>,
    token: &Token,
    part: u16,
    count: u16,
    source: &'s S,
) -> Result<DataFile<'s, S>, CacheError> {
    let invalid = |m: &str| invalid_for(token, part, m);
    let io = |e: std::io::Error| invalid(&format!("cannot be read: {e}"));
    let file_len = source.byte_len().map_err(io)?;
    let mut h = [0u8; HEADER_LEN];
    if file_len < HEADER_LEN as u64 {
        return Err(invalid("not a data-cache file"));
    }
    source.read_exact_at(&mut h, 0).map_err(io)?;
    if &h[..8] != MAGIC {
        return Err(invalid("not a data-cache file"));
    }
    let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
    if u16_at(8) != VERSION {
        return Err(invalid("unknown version"));
    }
    if u16_at(10) != part || u16_at(12) != count {
        return Err(invalid("belongs to another slot"));
    }
    if &h[16..48] != token {
        return Err(invalid("belongs to another cache entry (token mismatch)"));
    }
    let (cipher, auth_len) = match (h[14], key) {
        (GCM, Some(k)) => (Some(k.gcm().map_err(|()| invalid("bad key"))?), GCM_TAG_LEN),
        (CHECKSUM, None) => (None, DIGEST_LEN),
        (GCM, None) => return Err(invalid("is encrypted but the model is not")),
        (CHECKSUM, Some(_)) => return Err(invalid("is not encrypted but the model is")),
        _ => return Err(invalid("unknown protection")),
    };
    let segment_len = u32::from_le_bytes([h[60], h[61], h[62], h[63]]) as usize;
    if !SEGMENT_LEN_RANGE.contains(&segment_len) || !segment_len.is_multiple_of(16) {
        return Err(invalid("bad segment length"));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&h[64..72]);
    let plaintext_len = u64::from_le_bytes(len);
    // Every length is checked against the file's before anything is allocated.
    let body_len = file_len - HEADER_LEN as u64;
    let lengths = usize::try_from(plaintext_len)
        .ok()
        .filter(|_| plaintext_len <= body_len)
        .map(|len| (len, segment_count(len, segment_len)))
        .filter(|&(_, n)| n <= u32::MAX as usize)
        .filter(|&(_, n)| plaintext_len.checked_add((n * auth_len) as u64) == Some(body_len));
    let Some((plaintext_len, segments)) = lengths else {
        return Err(invalid(
            "length does not match (truncated or appended bytes)",
        ));
    };
    let auth_total = segments * auth_len;
    let mut auth = vec![0u8; auth_total];
    source
        .read_exact_at(&mut auth, (HEADER_LEN + plaintext_len) as u64)
        .map_err(io)?;
    let mut nonce = [0u8; 12];
    nonce.copy_from_slice(&h[48..60]);
    Ok(DataFile {
        source,
        header: h,
        cipher,
        nonce,
        segment_len,
        plaintext_len,
        auth,
        auth_len,
        part,
        token: *token,
    })
}

impl<S: ReadAt + ?Sized> DataFile<'_, S> {
    /// Bytes of plaintext the file holds.
    pub fn plaintext_len(&self) -> usize {
        self.plaintext_len
    }

    /// Reads the plaintext into `dst` (exactly [`DataFile::plaintext_len`] bytes): every
    /// segment is read once, straight into its place in `dst`, authenticated there and
    /// decrypted in place, segments on several threads. The file is never read twice, so
    /// one changed while it is read is refused, not half used. On an error `dst` holds
    /// nothing usable (the caller discards it).
    pub fn read_into(&self, dst: &mut [u8]) -> Result<(), CacheError> {
        let invalid = |m: &str| invalid_for(&self.token, self.part, m);
        if dst.len() != self.plaintext_len {
            return Err(invalid(
                "the destination does not have the plaintext's length",
            ));
        }
        let segments = segment_count(self.plaintext_len, self.segment_len);
        let mut parts: Vec<&mut [u8]> = dst.chunks_mut(self.segment_len).collect();
        if parts.is_empty() {
            parts.push(&mut []);
        }
        let items = parts
            .into_iter()
            .zip(self.auth.chunks(self.auth_len))
            .enumerate();
        let result = parallel::for_each(
            items,
            parallel::workers_for(segments),
            |(s, (segment, auth))| {
                let offset = (HEADER_LEN + s * self.segment_len) as u64;
                self.source
                    .read_exact_at(segment, offset)
                    .map_err(|e| invalid(&format!("cannot be read: {e}")))?;
                match &self.cipher {
                    Some(cipher) => {
                        let mut tag = [0u8; GCM_TAG_LEN];
                        tag.copy_from_slice(auth);
                        let nonce = segment_nonce(&self.nonce, s);
                        cipher
                            .open_in_place_separate_tag(
                                aead::Nonce::assume_unique_for_key(nonce),
                                aead::Aad::from(&self.header),
                                aead::Tag::from(tag),
                                segment,
                                0..,
                            )
                            .map(|_| ())
                            .map_err(|_| {
                                invalid(&format!(
                                    "segment {s} does not authenticate (altered, or sealed under \
                                 another key)"
                                ))
                            })
                    }
                    None if crypto::ct_eq(&segment_digest(&self.header, s, segment), auth) => {
                        Ok(())
                    }
                    None => Err(invalid(&format!("checksum mismatch in segment {s}"))),
                }
            },
        );
        if result.is_err() {
            zeroize::Zeroize::zeroize(dst);
        }
        result
    }

    /// The plaintext in a new buffer, zeroized when dropped (for tests: the runtime
    /// reads into the storage its weights live in).
    #[cfg(test)]
    fn read_to_vec(&self) -> Result<Zeroizing<Vec<u8>>, CacheError> {
        let mut out = Zeroizing::new(Vec::new());
        out.try_reserve_exact(self.plaintext_len)
            .map_err(|_| invalid_for(&self.token, self.part, "too large to read"))?;
        out.resize(self.plaintext_len, 0);
        self.read_into(&mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(
        key: Option<&CacheKey>,
        token: &Token,
        part: u16,
        count: u16,
        file: &[u8],
    ) -> Result<Zeroizing<Vec<u8>>, CacheError> {
        open_data(key, token, part, count, file)?.read_to_vec()
    }

    #[test]
    fn sealed_data_round_trips_and_rejects_every_alteration() {
        let token = [7u8; 32];
        let key = CacheKey::derive(b"0123456789abcdef", &token).unwrap();
        let plain: Vec<u8> = (0..1000u32).map(|i| (i * 31) as u8).collect();
        for k in [Some(&key), None] {
            let file = seal_data(k, &token, 1, 2, &plain).unwrap();
            assert_eq!(&open(k, &token, 1, 2, &file).unwrap()[..], &plain[..]);
            for pos in (0..file.len()).step_by(7) {
                let mut f = file.clone();
                f[pos] ^= 1;
                assert!(open(k, &token, 1, 2, &f).is_err(), "flip at {pos}");
            }
            let mut longer = file.clone();
            longer.push(0);
            assert!(open(k, &token, 1, 2, &longer).is_err());
            assert!(open(k, &token, 1, 2, &file[..file.len() - 1]).is_err());
            assert!(open(k, &[8; 32], 1, 2, &file).is_err(), "another token");
            assert!(open(k, &token, 0, 2, &file).is_err(), "another slot");
        }
        // Encrypted: the plaintext appears nowhere in the file.
        let file = seal_data(Some(&key), &token, 0, 1, &plain).unwrap();
        assert!(!file.windows(32).any(|w| w == &plain[100..132]));
        // Another model's key cannot open it.
        let other = CacheKey::derive(b"fedcba9876543210", &token).unwrap();
        assert!(open(Some(&other), &token, 0, 1, &file).is_err());
    }

    #[test]
    fn segments_are_bound_to_their_place() {
        let token = [3u8; 32];
        let key = CacheKey::derive(b"0123456789abcdef", &token).unwrap();
        // Three segments, the last short; then an empty plaintext (one empty segment).
        let plain: Vec<u8> = (0..2 * SEGMENT_LEN + 1000)
            .map(|i| (i % 251) as u8)
            .collect();
        for k in [Some(&key), None] {
            let file = seal_data(k, &token, 0, 1, &plain).unwrap();
            let opened = open(k, &token, 0, 1, &file).unwrap();
            assert!(opened[..] == plain[..]);
            // The first two segments swapped, with their authenticators.
            let auth_len = if k.is_some() { GCM_TAG_LEN } else { DIGEST_LEN };
            let mut swapped = file.clone();
            let (a, b) = (HEADER_LEN, HEADER_LEN + SEGMENT_LEN);
            let first = file[a..b].to_vec();
            swapped.copy_within(b..b + SEGMENT_LEN, a);
            swapped[b..b + SEGMENT_LEN].copy_from_slice(&first);
            let tags = HEADER_LEN + plain.len();
            let first_tag = file[tags..tags + auth_len].to_vec();
            swapped.copy_within(tags + auth_len..tags + 2 * auth_len, tags);
            swapped[tags + auth_len..tags + 2 * auth_len].copy_from_slice(&first_tag);
            let err = open(k, &token, 0, 1, &swapped).unwrap_err().to_string();
            assert!(err.contains("segment"), "{err}");
            // The last segment dropped (and the length in the header left alone).
            let short = [
                &file[..HEADER_LEN + 2 * SEGMENT_LEN],
                &file[tags..tags + 2 * auth_len],
            ]
            .concat();
            assert!(open(k, &token, 0, 1, &short).is_err());
            let empty = seal_data(k, &token, 0, 1, &[]).unwrap();
            assert_eq!(empty.len(), HEADER_LEN + auth_len);
            assert!(open(k, &token, 0, 1, &empty).unwrap().is_empty());
            let mut flipped = empty.clone();
            flipped[HEADER_LEN] ^= 1;
            assert!(open(k, &token, 0, 1, &flipped).is_err());
        }
    }

    #[test]
    fn a_hostile_header_allocates_nothing_it_cannot_back() {
        let token = [5u8; 32];
        let mut file = seal_data(None, &token, 0, 1, &[1, 2, 3]).unwrap();
        // A plaintext length far beyond the file.
        file[64..72].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(open_data(None, &token, 0, 1, &file[..]).is_err());
        file[64..72].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(open_data(None, &token, 0, 1, &file[..]).is_err());
        // A segment length outside the accepted range.
        let mut file = seal_data(None, &token, 0, 1, &[1, 2, 3]).unwrap();
        file[60..64].copy_from_slice(&1u32.to_le_bytes());
        assert!(open_data(None, &token, 0, 1, &file[..]).is_err());
    }
}
