//! The simulated NPU: where encrypted weights become plaintext, and nowhere else.
//!
//! It follows the co-operative inference patent (seed 001): the host parses a model
//! file's header and programs the device's crypto control register; the device reads
//! the operator-info block, fetches each operation's weight ciphertext by its storage
//! info, decrypts it with the key from its own key store into its bounded parameter
//! cache, prepares it for its kernels and runs the operation. The host API can install
//! a key but never read one back, and no host-visible buffer ever holds plaintext
//! weights (see docs/SECURITY.md for what a software simulation can and cannot promise).

mod cache;
mod key_store;
mod npu;

pub use cache::CacheStats;
pub use key_store::KeyStore;
pub use npu::{CryptoRegister, NpuWeights, SimulatedNpu};
