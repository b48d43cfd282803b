//! `nnc-formats`: the vocabulary shared by the nnc compiler and runtime.
//!
//! - [`nn`]: the NN-operation-set IR (NNAPI operations and operand types), its validator,
//!   per-operation signatures and shape inference, and its text/JSON/Graphviz views.
//! - [`tensor`]: host tensors crossing the user boundary.
//! - [`npy`]: reading and writing numpy `.npy` files.
//! - [`crypto`]: the weight ciphers (SM4, AES) and modes, key handling, KDF and MAC.
//!
//! Nothing here depends on the compiler or the runtime: a device ships `formats` and
//! `runtime` only.

pub mod cache;
pub mod container;
pub mod crypto;
pub mod device;
pub mod limits;
pub mod minifloat;
pub mod nn;
pub mod npy;
pub mod parallel;
pub mod plan;
pub mod tensor;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
