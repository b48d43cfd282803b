//! Fingerprints the kernels' sources for the compilation cache: prepared weights are
//! laid out by the kernels, so a cache entry from a build whose kernels differ in any way
//! must be a miss, not a misreading. (A hand-kept layout revision was forgotten once: an
//! entry of the previous layout was then a hit that a kernel refused.) Any change to a
//! kernel source file, comments included, gives a new fingerprint; a miss only costs a
//! cold prepare.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

fn main() {
    let kernels = Path::new("src/kernels");
    println!("cargo:rerun-if-changed=src/kernels");
    let mut files = Vec::new();
    collect(kernels, &mut files);
    files.sort();
    let mut hash = Sha256::new();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        // Paths with '/' whatever the platform, so the fingerprint names the sources only.
        let name = file.to_string_lossy().replace('\\', "/");
        let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("reading {name}: {e}"));
        hash.update((name.len() as u64).to_le_bytes());
        hash.update(name.as_bytes());
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(&bytes);
    }
    let digest = hash.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=NNC_KERNELS_FINGERPRINT={hex}");
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
