//! The device's key store: written by the host, read only by the device's decrypt unit.

use std::sync::Mutex;

use zeroize::Zeroizing;

/// Holds the master key. There is deliberately no way to read it back through the
/// public API; the decrypt unit borrows it for the duration of one derivation.
#[derive(Default)]
pub struct KeyStore {
    slot: Mutex<Option<Zeroizing<Vec<u8>>>>,
}

impl KeyStore {
    /// Installs a key, replacing (and zeroizing) any previous one.
    pub fn install(&self, key: &[u8]) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        *slot = Some(Zeroizing::new(key.to_vec()));
    }

    /// Removes (and zeroizes) the key.
    pub fn clear(&self) {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        *slot = None;
    }

    /// True when a key is installed (its value stays hidden).
    pub fn has_key(&self) -> bool {
        self.slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Lends the key to the device's decrypt unit.
    pub(crate) fn with_key<R>(&self, f: impl FnOnce(Option<&[u8]>) -> R) -> R {
        let slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        f(slot.as_ref().map(|k| k.as_slice()))
    }
}

impl std::fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KeyStore({})",
            if self.has_key() {
                "key installed"
            } else {
                "empty"
            }
        )
    }
}
