//! The simulated NPU and the weight provider it gives the executor.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use nnc_formats::container::{
    Container, ContainerError, CryptoConfig, FileKeys, Source, WeightField, authenticate_metadata,
    open_field,
};
use nnc_formats::crypto::WipedBytes;
use nnc_formats::nn::{Lifetime, Model};

use super::cache::{CacheStats, ParameterCache};
use super::key_store::KeyStore;
use crate::error::{OpRef, Result, RuntimeError};
use crate::exec::WeightProvider;
use crate::kernels::{Kernel, PreparedWeights};

/// The device's crypto control register, programmed by the host from a file's header.
pub type CryptoRegister = CryptoConfig;

/// A simulated NPU: a write-only key store and a bounded parameter cache per model.
#[derive(Debug)]
pub struct SimulatedNpu {
    name: String,
    key_store: KeyStore,
    /// Parameter-cache capacity in bytes per loaded model; `None` = unbounded.
    cache_capacity: Option<u64>,
}

impl SimulatedNpu {
    /// An NPU whose parameter cache holds every prepared weight (unbounded).
    pub fn new(name: impl Into<String>) -> SimulatedNpu {
        SimulatedNpu {
            name: name.into(),
            key_store: KeyStore::default(),
            cache_capacity: None,
        }
    }

    /// Bounds the parameter cache: weights beyond it are evicted and decrypted again on
    /// their next use.
    pub fn with_cache_capacity(mut self, bytes: u64) -> SimulatedNpu {
        self.cache_capacity = Some(bytes);
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Installs the master key (write-only: nothing reads it back).
    pub fn install_key(&self, key: &[u8]) {
        self.key_store.install(key);
    }

    pub fn clear_key(&self) {
        self.key_store.clear();
    }

    pub fn has_key(&self) -> bool {
        self.key_store.has_key()
    }

    /// The key sealing this device's data caches for `token`, derived inside the device
    /// from its master key; `None` when no key is installed (an unencrypted model, whose
    /// data caches are checksummed instead).
    pub(crate) fn cache_key(
        &self,
        token: &nnc_formats::cache::Token,
    ) -> Result<Option<nnc_formats::cache::CacheKey>> {
        self.key_store.with_key(|key| match key {
            Some(k) => nnc_formats::cache::CacheKey::derive(k, token)
                .map(Some)
                .map_err(|e| RuntimeError::Internal(e.to_string())),
            None => Ok(None),
        })
    }

    /// Authenticates a model file's metadata region (copied once by
    /// [`nnc_formats::container::copy_metadata`]) with the key in this device's key store
    /// (the key never leaves the device): any altered byte before the weights, a wrong
    /// key, or a file not authenticated with a key while one is installed fails here.
    pub fn authenticate(&self, metadata: &[u8]) -> Result<()> {
        self.key_store
            .with_key(|key| authenticate_metadata(metadata, key).map(|_| ()))?;
        Ok(())
    }

    /// The device side of loading a model file whose header the host parsed into
    /// `register`: authenticate the file with the device's own key, parse the
    /// operator-info block, verify the weight fields of the operations this device runs
    /// (`operations`; `None` = all), and set up the decrypt path. Returns the graph and the
    /// device's weight provider for it.
    ///
    /// `bytes` is the file (read at offsets, never mapped): every weight field is read
    /// into the device's own buffer, checked there and decrypted from that buffer.
    pub fn attach(
        &self,
        bytes: Arc<dyn Source>,
        metadata: Vec<u8>,
        register: CryptoRegister,
        operations: Option<&[usize]>,
        verify_fields: bool,
    ) -> Result<(Model, Arc<NpuWeights>)> {
        let data: &dyn Source = &*bytes;
        // The device authenticates the host's copy of the metadata and parses that same
        // copy: nothing it trusts is read twice from a file that might change.
        let (container, keys) =
            self.key_store
                .with_key(|key| -> std::result::Result<_, ContainerError> {
                    authenticate_metadata(&metadata, key)?;
                    let container = Container::parse_source(data, metadata)?;
                    let keys = container.keys(key)?;
                    Ok((container, keys))
                })?;
        if container.header.crypto != register {
            return Err(RuntimeError::Load(ContainerError::HeaderField {
                field: "crypto",
                message: "the device's crypto register does not match the file's header".into(),
            }));
        }
        let model = container.model.clone();
        // Operations by global number (main's, then each referenced subgraph's); a
        // referenced subgraph's operations belong to the device running the IF or WHILE
        // of main that runs them.
        let runner = model.main_operation_of();
        let mine: Vec<bool> = match operations {
            None => vec![true; runner.len()],
            Some(list) => {
                let mut main = vec![false; model.main.operations.len()];
                for &op in list {
                    if let Some(slot) = main.get_mut(op) {
                        *slot = true;
                    }
                }
                runner.iter().map(|r| r.is_some_and(|m| main[m])).collect()
            }
        };
        let refs: Vec<Vec<WeightRef>> = model
            .graphs()
            .flat_map(|g| g.operations.iter().map(move |op| (g, op)))
            .map(|(g, op)| {
                op.inputs
                    .iter()
                    .map(|&i| {
                        let o = g.operands.get(i as usize)?;
                        (o.lifetime == Lifetime::ConstantReference).then_some((
                            o.location.pool_index as usize,
                            o.location.offset as usize,
                            o.location.length as usize,
                        ))
                    })
                    .collect()
            })
            .collect();
        // Verify every field this device will read before anything runs.
        let mut fields_needed: Vec<usize> = refs
            .iter()
            .enumerate()
            .filter(|(op, _)| mine[*op])
            .flat_map(|(_, r)| r.iter().flatten().map(|&(owner, _, _)| owner))
            .collect();
        fields_needed.sort_unstable();
        fields_needed.dedup();
        // (A cache hit supplies prepared weights instead; any field read later is still
        // checked when it is decrypted.)
        if verify_fields {
            let mut scratch = Vec::new();
            for owner in fields_needed {
                container.verify_field(keys.as_ref(), owner, &mut scratch)?;
            }
        }
        let weights = NpuWeights {
            fields: container.fields.clone(),
            bytes,
            keys,
            crypto: register,
            refs,
            mine,
            ops: model
                .graphs()
                .flat_map(|g| g.operations.iter())
                .enumerate()
                .map(|(i, op)| OpRef::new(Some(i), op))
                .collect(),
            cache: ParameterCache::new(self.cache_capacity),
            device: self.name.clone(),
        };
        Ok((model, Arc::new(weights)))
    }
}

/// Where each weight input of an operation lives: (owning operation, offset in its
/// field's plaintext, length).
type WeightRef = Option<(usize, usize, usize)>;

/// The NPU's decrypt unit and parameter cache for one loaded model. Its keys and
/// plaintext never leave it: it hands the executor only prepared weights, which live in
/// the cache and are zeroized when dropped.
pub struct NpuWeights {
    /// The file, read at offsets: a field evicted from the parameter cache is read again
    /// into a fresh buffer, checked and decrypted there.
    bytes: Arc<dyn Source>,
    fields: Vec<Option<WeightField>>,
    keys: Option<FileKeys>,
    crypto: CryptoRegister,
    refs: Vec<Vec<WeightRef>>,
    /// The operations this device runs (others are refused).
    mine: Vec<bool>,
    ops: Vec<OpRef>,
    cache: ParameterCache,
    device: String,
}

impl NpuWeights {
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// The name of the device holding these weights.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Puts prepared weights (from a data cache) into the parameter cache. A bounded
    /// cache gets buffers of their own: weights that are views of a cache hit's shared
    /// storage would keep all of it alive after an eviction accounted it freed.
    pub(crate) fn insert_prepared(&self, op: usize, weights: PreparedWeights) -> Result<()> {
        let weights = if self.cache.is_bounded() {
            weights.into_own()?
        } else {
            weights
        };
        self.cache.insert(op, &Arc::new(weights));
        Ok(())
    }

    /// True when `weights` have the layout `kernel` prepares for operation `op` (buffer
    /// sizes and views), found by preparing zeros of the weights' sizes: nothing is
    /// decrypted. For prepared weights nothing authenticated (the data cache of a model
    /// without a key), so that kernels never meet buffers of the wrong size.
    pub(crate) fn layout_matches(
        &self,
        op: usize,
        kernel: &dyn Kernel,
        weights: &PreparedWeights,
    ) -> bool {
        let Some(refs) = self.refs.get(op) else {
            return false;
        };
        let zeros: Vec<Option<Vec<u8>>> = refs
            .iter()
            .map(|r| r.map(|(_, _, length)| vec![0u8; length]))
            .collect();
        let slices: Vec<Option<&[u8]>> = zeros.iter().map(|z| z.as_deref()).collect();
        match kernel.prepare_weights(&slices) {
            Ok(expected) => expected.layout() == weights.layout(),
            Err(_) => false,
        }
    }

    /// True when this device runs operation `op`.
    pub fn runs(&self, op: usize) -> bool {
        self.mine.get(op).copied().unwrap_or(false)
    }

    fn prepare(&self, operation: usize, kernel: &dyn Kernel) -> Result<Arc<PreparedWeights>> {
        let (Some(op), Some(refs)) = (self.ops.get(operation), self.refs.get(operation)) else {
            return Err(RuntimeError::Internal(format!(
                "weights asked for missing operation {operation}"
            )));
        };
        let opref = || op.clone();
        // Decrypt each field this operation reads once (a shared constant may live in
        // another operation's field), verifying its tag against the bytes as they are now.
        let mut plaintext: HashMap<usize, WipedBytes> = HashMap::new();
        for &(owner, _, _) in refs.iter().flatten() {
            if plaintext.contains_key(&owner) {
                continue;
            }
            let field =
                self.fields
                    .get(owner)
                    .copied()
                    .flatten()
                    .ok_or_else(|| RuntimeError::Weights {
                        operation: opref(),
                        message: format!("weight field of operation {owner} is missing"),
                    })?;
            let mut buf = WipedBytes::default();
            open_field(
                &*self.bytes,
                &field,
                self.keys.as_ref(),
                &self.crypto,
                &self
                    .ops
                    .get(owner)
                    .map_or_else(|| format!("operation {owner}"), ToString::to_string),
                &mut buf,
            )?;
            self.cache.decryptions.fetch_add(1, Ordering::Relaxed);
            plaintext.insert(owner, buf);
        }
        let mut slices: Vec<Option<&[u8]>> = Vec::with_capacity(refs.len());
        for r in refs {
            slices.push(match r {
                Some((owner, offset, length)) => {
                    let field = &plaintext[owner];
                    let slice = offset
                        .checked_add(*length)
                        .and_then(|end| field.get(*offset..end))
                        .ok_or_else(|| RuntimeError::Weights {
                            operation: opref(),
                            message: format!("a weight lies outside field {owner}"),
                        })?;
                    Some(slice)
                }
                None => None,
            });
        }
        let prepared = kernel.prepare_weights(&slices).map_err(|e| match e {
            RuntimeError::Kernel(message) => RuntimeError::Operation {
                operation: opref(),
                message,
            },
            other => other,
        })?;
        Ok(Arc::new(prepared))
        // `plaintext` is dropped (wiped) here: only the prepared form remains.
    }
}

impl WeightProvider for NpuWeights {
    fn weights(&self, operation: usize, kernel: &dyn Kernel) -> Result<Arc<PreparedWeights>> {
        if let Some(w) = self.cache.get(operation) {
            return Ok(w);
        }
        let w = self.prepare(operation, kernel)?;
        self.cache.insert(operation, &w);
        Ok(w)
    }

    /// An unbounded cache is filled at load (execution then never decrypts); a bounded
    /// one fills on demand.
    fn preload(&self, operation: usize, kernel: &dyn Kernel) -> Result<()> {
        if self.cache.is_bounded() || !self.runs(operation) {
            Ok(())
        } else {
            self.weights(operation, kernel).map(|_| ())
        }
    }
}
