//! The runtime side of the compilation cache: a prepared step is written once (miss) and
//! later prepared straight from its cache files (hit); a cache that fails validation is
//! discarded with a warning and the step is prepared again.
//!
//! Per step, the model cache holds the prepared program (its operations, shapes and
//! memory plan; see [`ProgramImage`]) and the data cache the prepared weights of its
//! operations, sealed by the device under a key derived from the model's key. A hit
//! skips what makes preparation slow: verifying and decrypting every weight field and
//! re-laying the weights out for the kernels.

use std::path::PathBuf;
use std::sync::Arc;

use nnc_formats::cache::{
    CacheDir, CacheEntry, CacheError, Lookup, ModelDigest, Token, TokenInputs, open_data,
    seal_data, token,
};
use nnc_formats::plan::ExecutionPlan;

use crate::buffer::{PageBuf, WeightBuf, align_up};
use crate::error::{Result, RuntimeError};
use crate::exec::ProgramImage;
use crate::kernels::{FloatMath, PreparedWeights};

/// The nnc version caches are tied to: another version never reads them.
pub const CACHE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// How to use a compilation cache.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    pub dir: PathBuf,
    /// The caller's token, standing for the model in every step's token; by default the
    /// model file's checksum (its metadata tag, which authenticates every byte). Either
    /// way an entry is used only for the model file it was prepared from.
    pub token: Option<Token>,
}

/// What happened with the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheOutcome {
    /// Every step was prepared from its cache files.
    Hit,
    /// At least one step was prepared afresh, and its cache files written.
    Miss,
    /// No cache was used.
    None,
}

/// The cache's part in a load.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CacheReport {
    pub outcome: CacheOutcome,
    /// Caches discarded (and why), or that could not be written.
    pub warnings: Vec<String>,
}

impl CacheReport {
    pub fn none() -> CacheReport {
        CacheReport {
            outcome: CacheOutcome::None,
            warnings: Vec::new(),
        }
    }
}

/// One step as the cache sees it.
#[derive(Clone, Debug)]
pub(crate) struct CacheStep {
    pub token: Token,
    /// The model file's metadata tag: an entry prepared from another file is a miss,
    /// whatever the token (a caller's token names a model but cannot prove which).
    pub model_digest: ModelDigest,
    /// Index of the step's device among the attached devices.
    pub device: usize,
    pub operations: Vec<usize>,
    pub model_files: usize,
    pub data_files: usize,
}

/// What a step's token binds besides the nnc version: the kernels' instruction-set
/// paths, because prepared weights are laid out for them (a quantized filter is packed
/// as bytes for the dot-product path and as i16 pairs for the AVX2 one), so a cache
/// written on one processor is a miss, not a misreading, on another. Likewise the float
/// math the kernels are built with (the option, or fast for a model that allows relaxed
/// computation), under which 3x3 filters are prepared for the Winograd path, and the
/// fingerprint of the kernels' sources (which lay the prepared weights out).
fn kernel_build(float_math: FloatMath) -> String {
    let isa = crate::kernels::isa::report();
    let math = match float_math {
        FloatMath::Strict => "",
        FloatMath::Fast => " fast-math",
    };
    let kernels = crate::kernels::KERNELS_FINGERPRINT;
    format!(
        "{CACHE_VERSION} kernels:{kernels} float:{} int8:{}{math}",
        isa.float, isa.int8
    )
}

/// The cache steps of a model: the plan's steps, or one step of every operation.
/// `model_id` goes into the tokens (the caller's token or the metadata tag);
/// `model_digest` is the file's metadata tag, which every entry records.
pub(crate) fn steps(
    plan: Option<&ExecutionPlan>,
    operation_count: usize,
    model_id: &[u8],
    model_digest: &ModelDigest,
    default_device: &str,
    float_math: FloatMath,
) -> Vec<CacheStep> {
    let build = kernel_build(float_math);
    let make = |device: usize,
                ops: Vec<usize>,
                name: &str,
                version: &str,
                preference: &str,
                files: (u32, u32)| {
        let ops32: Vec<u32> = ops.iter().map(|&o| o as u32).collect();
        CacheStep {
            token: token(&TokenInputs {
                model: model_id,
                operations: &ops32,
                device_name: name,
                device_version: version,
                preference,
                nnc_version: &build,
            }),
            model_digest: *model_digest,
            device,
            operations: ops,
            model_files: files.0 as usize,
            data_files: files.1 as usize,
        }
    };
    match plan {
        None => vec![make(
            0,
            (0..operation_count).collect(),
            default_device,
            "simulated",
            "fast-single-answer",
            (1, 1),
        )],
        Some(plan) => plan
            .steps
            .iter()
            .map(|s| {
                let d = &plan.devices[s.device as usize];
                make(
                    s.device as usize,
                    s.operations.iter().map(|&o| o as usize).collect(),
                    &d.name,
                    &d.version,
                    plan.preference.name(),
                    (d.model_cache_files, d.data_cache_files),
                )
            })
            .collect(),
    }
}

/// Splits `payload` into `n` contiguous parts (the files a device declares).
pub(crate) fn split(payload: &[u8], n: usize) -> Vec<Vec<u8>> {
    if n == 0 {
        return Vec::new();
    }
    let chunk = payload.len().div_ceil(n).max(1);
    let mut parts: Vec<Vec<u8>> = payload.chunks(chunk).map(<[u8]>::to_vec).collect();
    parts.resize(n, Vec::new());
    parts
}

/// The model-cache payload of a step: its operations, then the program image.
pub(crate) fn encode_model(step: &CacheStep, image: &ProgramImage) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(step.operations.len() as u32).to_le_bytes());
    for &op in &step.operations {
        out.extend_from_slice(&(op as u32).to_le_bytes());
    }
    out.extend_from_slice(&image.to_bytes());
    out
}

/// Reads a step's model-cache payload back; the operations must be the step's own.
pub(crate) fn decode_model(step: &CacheStep, payload: &[u8]) -> Result<ProgramImage> {
    let bad = |m: &str| RuntimeError::Cache(format!("model file: {m}"));
    let n = payload
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or_else(|| bad("truncated"))?;
    let ops_end = n
        .checked_mul(4)
        .and_then(|v| v.checked_add(4))
        .filter(|&e| e <= payload.len())
        .ok_or_else(|| bad("truncated"))?;
    let ops: Vec<usize> = payload[4..ops_end]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    if ops != step.operations {
        return Err(bad("it was written for other operations"));
    }
    ProgramImage::from_bytes(&payload[ops_end..])
}

/// The data-cache plaintext of one file: a directory, then every prepared buffer at a
/// 64-byte offset, so that the plaintext read into one aligned allocation *is* the
/// weights' storage (each buffer a [`WeightBuf`] view of it; nothing copied or packed).
///
/// Layout: u32 record count; per record u32 operation, u32 buffer count, u32 view count,
/// each buffer's u64 offset and u64 length, each input view as u32 (u32::MAX: none);
/// zeros to a multiple of 64; the buffers at their offsets, zeros between them.
pub(crate) fn encode_data(
    records: &[(usize, Arc<PreparedWeights>)],
) -> Result<zeroize::Zeroizing<Vec<u8>>> {
    let directory: usize = 4 + records
        .iter()
        .map(|(_, w)| 12 + 16 * w.buffers().len() + 4 * w.input_views().len())
        .sum::<usize>();
    let too_large = || RuntimeError::Cache("data file: the weights are too large".into());
    let mut end = align_up(directory).ok_or_else(too_large)?;
    let mut offsets = Vec::new();
    for (_, w) in records {
        for b in w.buffers() {
            offsets.push(end);
            end = end
                .checked_add(b.len())
                .and_then(align_up)
                .ok_or_else(too_large)?;
        }
    }
    let mut out = zeroize::Zeroizing::new(Vec::new());
    out.try_reserve_exact(end)
        .map_err(|_| RuntimeError::OutOfMemory { bytes: end })?;
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    let mut next = offsets.iter();
    for (op, w) in records {
        out.extend_from_slice(&(*op as u32).to_le_bytes());
        out.extend_from_slice(&(w.buffers().len() as u32).to_le_bytes());
        out.extend_from_slice(&(w.input_views().len() as u32).to_le_bytes());
        for (b, offset) in w.buffers().iter().zip(next.by_ref()) {
            out.extend_from_slice(&(*offset as u64).to_le_bytes());
            out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        }
        for v in w.input_views() {
            out.extend_from_slice(&v.map_or(u32::MAX, |i| i as u32).to_le_bytes());
        }
    }
    let buffers = records.iter().flat_map(|(_, w)| w.buffers());
    for (b, &offset) in buffers.zip(&offsets) {
        out.resize(offset, 0);
        out.extend_from_slice(b.as_bytes());
    }
    out.resize(end, 0);
    Ok(out)
}

/// Reads one data-cache plaintext (in its aligned storage) back into prepared weights per
/// operation, each buffer a view of `storage`. Every count, offset and length is checked.
pub(crate) fn decode_data(
    storage: &Arc<PageBuf>,
    step: &CacheStep,
) -> Result<Vec<(usize, PreparedWeights)>> {
    let plain = storage.as_bytes();
    let bad = |m: &str| RuntimeError::Cache(format!("data file: {m}"));
    let mut pos = 0usize;
    let mut take = |n: usize| -> Result<&[u8]> {
        let end = pos
            .checked_add(n)
            .filter(|&e| e <= plain.len())
            .ok_or_else(|| bad("truncated"))?;
        let s = &plain[pos..end];
        pos = end;
        Ok(s)
    };
    let u32_of = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    let u64_of = |b: &[u8]| {
        let mut v = [0u8; 8];
        v.copy_from_slice(b);
        usize::try_from(u64::from_le_bytes(v)).map_err(|_| bad("a buffer is too large"))
    };
    let count = u32_of(take(4)?);
    if count > plain.len() / 12 {
        return Err(bad("record count exceeds the data"));
    }
    // Vectors grow as records parse (a hostile count allocates nothing up front).
    let mut out = Vec::new();
    for _ in 0..count {
        let op = u32_of(take(4)?);
        if !step.operations.contains(&op) {
            return Err(bad("it holds weights of an operation outside the step"));
        }
        let buffers = u32_of(take(4)?);
        let views = u32_of(take(4)?);
        if buffers > plain.len() / 16 || views > plain.len() / 4 {
            return Err(bad("a record's counts exceed the data"));
        }
        let mut bufs = Vec::new();
        for _ in 0..buffers {
            let offset = u64_of(take(8)?)?;
            let len = u64_of(take(8)?)?;
            bufs.push(
                WeightBuf::view(storage, offset, len)
                    .map_err(|_| bad("a buffer is unaligned or lies outside the data"))?,
            );
        }
        let mut input_views = Vec::new();
        for _ in 0..views {
            let v = u32_of(take(4)?);
            input_views.push((v != u32::MAX as usize).then_some(v));
        }
        out.push((op, PreparedWeights::from_parts(bufs, input_views)?));
    }
    Ok(out)
}

/// Everything a hit provides: the program image and the prepared weights per operation.
pub(crate) struct Hit {
    pub image: ProgramImage,
    pub weights: Vec<(usize, usize, PreparedWeights)>,
}

fn cache_err(e: CacheError) -> RuntimeError {
    RuntimeError::Cache(e.to_string())
}

/// One step's entry, decoded: its program image (model-cache files) and its prepared
/// weights per operation (data-cache files, decrypted).
struct DecodedStep {
    image: Option<ProgramImage>,
    weights: Vec<(usize, PreparedWeights)>,
}

fn decode_entry(
    step: &CacheStep,
    entry: CacheEntry,
    key: Option<&nnc_formats::cache::CacheKey>,
) -> Result<DecodedStep> {
    let image = if step.model_files > 0 {
        let payload: Vec<u8> = entry.model.concat();
        Some(decode_model(step, &payload)?)
    } else {
        None
    };
    let mut weights = Vec::new();
    for (part, file) in entry.data.iter().enumerate() {
        let data = open_data(key, &step.token, part as u16, step.data_files as u16, file)
            .map_err(cache_err)?;
        // One read and one decryption, straight into the storage the kernels read.
        let mut storage = PageBuf::zeroed(data.plaintext_len())?;
        data.read_into(storage.as_bytes_mut()).map_err(cache_err)?;
        weights.extend(decode_data(&Arc::new(storage), step)?);
    }
    Ok(DecodedStep { image, weights })
}

/// Looks every step up. `Ok(None)` is a miss (with `warnings` for discarded entries).
pub(crate) fn try_hit(
    dir: &CacheDir,
    steps: &[CacheStep],
    key_for: &dyn Fn(usize, &Token) -> Result<Option<nnc_formats::cache::CacheKey>>,
    warnings: &mut Vec<String>,
) -> Result<Option<Hit>> {
    let mut image: Option<ProgramImage> = None;
    let mut weights = Vec::new();
    for step in steps {
        let key = key_for(step.device, &step.token)?;
        let entry = match dir
            .lookup(
                &step.token,
                &step.model_digest,
                step.model_files,
                step.data_files,
                key.as_ref(),
            )
            .map_err(cache_err)?
        {
            Lookup::Miss => return Ok(None),
            Lookup::IndexDamaged(why) => {
                warnings.push(why);
                return Ok(None);
            }
            Lookup::Invalid(reason) => {
                warnings.push(format!(
                    "discarded cache entry {}: {reason}",
                    hex::encode(step.token)
                ));
                let _ = dir.remove(&step.token);
                return Ok(None);
            }
            Lookup::Hit(entry) => entry,
        };
        let decoded = decode_entry(step, entry, key.as_ref());
        match decoded {
            Ok(DecodedStep {
                image: step_image,
                weights: prepared,
            }) => {
                if let Some(img) = step_image {
                    match &image {
                        Some(existing) if *existing != img => {
                            warnings.push(format!(
                                "discarded cache entry {}: its program disagrees with the other steps'",
                                hex::encode(step.token)
                            ));
                            let _ = dir.remove(&step.token);
                            return Ok(None);
                        }
                        _ => image = Some(img),
                    }
                }
                weights.extend(prepared.into_iter().map(|(op, w)| (step.device, op, w)));
            }
            Err(e) => {
                warnings.push(format!(
                    "discarded cache entry {}: {e}",
                    hex::encode(step.token)
                ));
                let _ = dir.remove(&step.token);
                return Ok(None);
            }
        }
    }
    match image {
        Some(image) => Ok(Some(Hit { image, weights })),
        // No step keeps a model cache: nothing says how to prepare; prepare afresh.
        None => Ok(None),
    }
}

/// Writes every step's cache files.
pub(crate) fn store(
    dir: &CacheDir,
    steps: &[CacheStep],
    image: &ProgramImage,
    prepared: &dyn Fn(usize) -> Result<Option<Arc<PreparedWeights>>>,
    key_for: &dyn Fn(usize, &Token) -> Result<Option<nnc_formats::cache::CacheKey>>,
) -> Result<()> {
    for step in steps {
        let model_parts = split(&encode_model(step, image), step.model_files);
        let mut records: Vec<Vec<(usize, Arc<PreparedWeights>)>> =
            (0..step.data_files).map(|_| Vec::new()).collect();
        if step.data_files > 0 {
            for (k, &op) in step.operations.iter().enumerate() {
                if let Some(weights) = prepared(op)? {
                    records[k % step.data_files].push((op, weights));
                }
            }
        }
        let key = key_for(step.device, &step.token)?;
        let mut data_files = Vec::with_capacity(step.data_files);
        for (part, recs) in records.iter().enumerate() {
            let plain = encode_data(recs)?;
            data_files.push(
                seal_data(
                    key.as_ref(),
                    &step.token,
                    part as u16,
                    step.data_files as u16,
                    &plain,
                )
                .map_err(cache_err)?,
            );
        }
        dir.store(
            &step.token,
            &step.model_digest,
            &model_parts,
            &data_files,
            key.as_ref(),
        )
        .map_err(cache_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_split_and_join() {
        let payload: Vec<u8> = (0..100).collect();
        for n in 1..5 {
            let parts = split(&payload, n);
            assert_eq!(parts.len(), n);
            assert_eq!(parts.concat(), payload);
        }
        assert!(split(&payload, 0).is_empty());
        assert_eq!(split(&[], 3), vec![Vec::<u8>::new(); 3]);
    }
}
