//! `nnc`: the command-line face of the nnc toolchain (the commands live in the library,
//! which the Python package's `nnc` console script runs too).

use std::process::ExitCode;

/// Every freed block is wiped: decrypted weights pass through buffers nnc does not own
/// (the GEMM crate's packing scratch, reallocated vectors). See nnc_runtime::alloc.
#[global_allocator]
static ALLOCATOR: nnc_runtime::alloc::WipingAllocator = nnc_runtime::alloc::WipingAllocator;

fn main() -> ExitCode {
    ExitCode::from(nnc_cli::main(std::env::args_os().collect()))
}
