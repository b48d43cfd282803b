//! The parameter cache: prepared (decrypted, re-laid-out) weights held inside the
//! device, bounded in bytes, least-recently-used entries evicted first. An evicted
//! entry's memory is zeroized when the last execution using it lets go of it.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::kernels::PreparedWeights;

/// Counters of a parameter cache, for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// Weight fields decrypted (a miss may decrypt several, or share one).
    pub decryptions: u64,
    pub resident_bytes: u64,
    /// `None` = unbounded.
    pub capacity_bytes: Option<u64>,
}

struct Entry {
    weights: Arc<PreparedWeights>,
    bytes: u64,
    last_use: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<usize, Entry>,
    resident: u64,
    clock: u64,
}

pub(crate) struct ParameterCache {
    capacity: Option<u64>,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    pub(crate) decryptions: AtomicU64,
}

impl ParameterCache {
    pub(crate) fn new(capacity: Option<u64>) -> ParameterCache {
        ParameterCache {
            capacity,
            inner: Mutex::new(Inner::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            decryptions: AtomicU64::new(0),
        }
    }

    pub(crate) fn is_bounded(&self) -> bool {
        self.capacity.is_some()
    }

    pub(crate) fn get(&self, op: usize) -> Option<Arc<PreparedWeights>> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.clock += 1;
        let now = inner.clock;
        match inner.entries.get_mut(&op) {
            Some(e) => {
                e.last_use = now;
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(e.weights.clone())
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Keeps `weights` for operation `op` when they fit, evicting the least recently used
    /// entries to make room; weights larger than the whole cache are not kept (they are
    /// decrypted again on every use).
    pub(crate) fn insert(&self, op: usize, weights: &Arc<PreparedWeights>) {
        let bytes = weights.byte_size() as u64;
        if self.capacity.is_some_and(|c| bytes > c) {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(capacity) = self.capacity {
            while inner.resident + bytes > capacity {
                let Some((&victim, _)) = inner.entries.iter().min_by_key(|(_, e)| e.last_use)
                else {
                    break;
                };
                if let Some(e) = inner.entries.remove(&victim) {
                    inner.resident -= e.bytes;
                    self.evictions.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        inner.clock += 1;
        let last_use = inner.clock;
        if let Some(old) = inner.entries.insert(
            op,
            Entry {
                weights: weights.clone(),
                bytes,
                last_use,
            },
        ) {
            inner.resident -= old.bytes;
        }
        inner.resident += bytes;
    }

    pub(crate) fn stats(&self) -> CacheStats {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            decryptions: self.decryptions.load(Ordering::Relaxed),
            resident_bytes: inner.resident,
            capacity_bytes: self.capacity,
        }
    }
}
