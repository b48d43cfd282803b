//! The compilation cache's data files as the runtime reads them: a hit prepares from one
//! read of the data file (no weight field decrypted) and computes what a fresh
//! preparation computes; a bounded parameter cache still works from a hit; and a data
//! file rewritten by whoever can write the cache directory (an unencrypted model's data
//! file carries only a checksum, which anyone can recompute) is discarded with a warning,
//! never used to read outside its storage or to feed a kernel buffers of the wrong size.

mod common;

use std::path::Path;

use common::*;
use nnc_formats::cache::seal_data;
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::tensor::HostTensor;
use nnc_runtime::{CacheConfig, CacheOutcome, LoadOptions, PreparedModel, SimulatedNpu};

const K: usize = 320;
/// Enough weights (N x K f32) for a data file of several sealed segments.
const N: usize = 400;

/// The model of these tests, written under `key` (or unencrypted).
fn model(key: Option<&Key>) -> (Vec<u8>, Vec<HostTensor>) {
    fully_connected_file(K, N, 11, key, Mode::Ctr)
}

fn load(file: &[u8], npu: &SimulatedNpu, cache: &Path) -> PreparedModel {
    let options = LoadOptions {
        cache: Some(CacheConfig {
            dir: cache.to_path_buf(),
            token: None,
        }),
        ..LoadOptions::default()
    };
    PreparedModel::load_bytes(file.to_vec(), npu, &options).expect("loads")
}

fn outputs(model: &PreparedModel, feeds: &[HostTensor]) -> Vec<f32> {
    f32s(&model.run(feeds).expect("runs")[0])
}

/// The data file of the cache's only entry.
fn data_file(cache: &Path) -> std::path::PathBuf {
    std::fs::read_dir(cache)
        .expect("cache directory")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("one entry")
        .join("data-0.bin")
}

#[test]
fn a_hit_reads_the_prepared_weights_and_computes_what_a_fresh_prepare_does() {
    let key = Key::generate(Algorithm::Sm4).expect("key");
    let (file, feeds) = model(Some(&key));
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    for capacity in [None, Some(64 * 1024)] {
        let npu = || {
            let npu = SimulatedNpu::new("npu0");
            let npu = match capacity {
                Some(bytes) => npu.with_cache_capacity(bytes),
                None => npu,
            };
            npu.install_key(key.as_bytes());
            npu
        };
        let _ = std::fs::remove_dir_all(&cache);
        let fresh = load(&file, &npu(), &cache);
        assert_eq!(fresh.cache_report().outcome, CacheOutcome::Miss);
        let expected = outputs(&fresh, &feeds);
        let hit = load(&file, &npu(), &cache);
        assert_eq!(
            hit.cache_report().outcome,
            CacheOutcome::Hit,
            "{:?}",
            hit.cache_report().warnings
        );
        let got = outputs(&hit, &feeds);
        assert_eq!(got, expected, "capacity {capacity:?}");
        if capacity.is_none() {
            // Everything came from the data file: no weight field was decrypted.
            assert_eq!(hit.cache_stats().decryptions, 0);
        }
    }
}

/// The data-cache plaintext of one record (operation 0): `buffers` as (offset, length),
/// input `view` presenting buffer 0, then `body_len` bytes of weights.
fn forged_plaintext(buffers: &[(u64, u64)], body_len: usize) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&1u32.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&(buffers.len() as u32).to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    for &(offset, len) in buffers {
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&len.to_le_bytes());
    }
    p.resize(64, 0);
    p.resize(64 + body_len, 0x3f);
    p
}

#[test]
fn a_rewritten_data_file_of_an_unencrypted_model_is_discarded_not_used() {
    let (file, feeds) = model(None);
    let npu = SimulatedNpu::new("npu0");
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let expected = outputs(&load(&file, &npu, &cache), &feeds);
    let data = data_file(&cache);
    let original = std::fs::read(&data).expect("data file");
    let mut token = [0u8; 32];
    token.copy_from_slice(&original[16..48]);
    let weights = (N * K * 4) as u64;
    let cases: [(&str, Vec<(u64, u64)>); 4] = [
        ("an unaligned buffer", vec![(65, 16)]),
        ("a buffer past the end", vec![(64, weights + 65)]),
        ("an absurd offset", vec![(u64::MAX - 63, 64)]),
        (
            "buffers of the wrong sizes",
            vec![(64, weights - 4), (weights + 64, 8)],
        ),
    ];
    for (what, buffers) in cases {
        let forged = seal_data(
            None,
            &token,
            0,
            1,
            &forged_plaintext(&buffers, N * K * 4 + 64),
        )
        .expect("seals");
        std::fs::write(&data, &forged).expect("rewrites");
        let model = load(&file, &npu, &cache);
        let report = model.cache_report();
        assert_eq!(report.outcome, CacheOutcome::Miss, "{what}");
        assert!(
            report.warnings.iter().any(|w| w.contains("discarded")),
            "{what}: {:?}",
            report.warnings
        );
        assert_eq!(outputs(&model, &feeds), expected, "{what}");
        // The miss wrote a good entry again; forge the next case over it.
    }
}
