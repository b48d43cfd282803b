//! Cache entries are bound to the model file, not only to the token (issue 29, item 8):
//! two models of the same architecture under one key, run with the same caller token,
//! never share an entry; the second is a miss that computes with its own weights and
//! replaces the first's entry. And a corrupt index is a reported miss (item 12).

mod common;

use std::path::Path;

use common::*;
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::tensor::HostTensor;
use nnc_runtime::{CacheConfig, CacheOutcome, LoadOptions, PreparedModel, SimulatedNpu};

const K: usize = 64;
const N: usize = 48;
const TOKEN: [u8; 32] = [0x5e; 32];

fn npu(key: Option<&Key>) -> SimulatedNpu {
    let npu = SimulatedNpu::new("npu0");
    if let Some(key) = key {
        npu.install_key(key.as_bytes());
    }
    npu
}

fn load(file: &[u8], key: Option<&Key>, cache: Option<&Path>) -> PreparedModel {
    let options = LoadOptions {
        cache: cache.map(|dir| CacheConfig {
            dir: dir.to_path_buf(),
            token: Some(TOKEN),
        }),
        ..LoadOptions::default()
    };
    PreparedModel::load_bytes(file.to_vec(), &npu(key), &options).expect("loads")
}

fn outputs(model: &PreparedModel, feeds: &[HostTensor]) -> Vec<f32> {
    f32s(&model.run(feeds).expect("runs")[0])
}

fn entry_dirs(cache: &Path) -> usize {
    std::fs::read_dir(cache)
        .expect("cache directory")
        .flatten()
        .filter(|e| e.path().is_dir())
        .count()
}

#[test]
fn a_second_model_with_the_first_models_token_is_a_miss_and_replaces_its_entry() {
    let key = Key::generate(Algorithm::Sm4).expect("key");
    for key in [Some(&key), None] {
        // Same architecture, same key, different weights.
        let (first, feeds) = fully_connected_file(K, N, 11, key, Mode::Cbc);
        let (second, _) = fully_connected_file(K, N, 12, key, Mode::Cbc);
        let first_expected = outputs(&load(&first, key, None), &feeds);
        let second_expected = outputs(&load(&second, key, None), &feeds);
        assert_ne!(first_expected, second_expected);

        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = tmp.path().join("cache");
        let a = load(&first, key, Some(&cache));
        assert_eq!(a.cache_report().outcome, CacheOutcome::Miss);
        let a = load(&first, key, Some(&cache));
        assert_eq!(a.cache_report().outcome, CacheOutcome::Hit);
        assert_eq!(outputs(&a, &feeds), first_expected);

        let b = load(&second, key, Some(&cache));
        let report = b.cache_report();
        assert_eq!(report.outcome, CacheOutcome::Miss, "{:?}", report.warnings);
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("another model file")),
            "{:?}",
            report.warnings
        );
        assert_eq!(
            outputs(&b, &feeds),
            second_expected,
            "key {}",
            key.is_some()
        );
        // The second model's entry replaced the first's (one slot per token).
        assert_eq!(entry_dirs(&cache), 1);
        let b = load(&second, key, Some(&cache));
        assert_eq!(b.cache_report().outcome, CacheOutcome::Hit);
        assert_eq!(outputs(&b, &feeds), second_expected);
        let a = load(&first, key, Some(&cache));
        assert_eq!(a.cache_report().outcome, CacheOutcome::Miss);
        assert_eq!(outputs(&a, &feeds), first_expected);
    }
}

#[test]
fn a_corrupt_index_is_a_miss_with_a_warning_saying_what_was_lost() {
    let key = Key::generate(Algorithm::Aes128).expect("key");
    let (file, feeds) = fully_connected_file(K, N, 11, Some(&key), Mode::Ctr);
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let expected = outputs(&load(&file, Some(&key), Some(&cache)), &feeds);
    std::fs::write(cache.join("index.json"), b"{\"format\": 3, \"entr").expect("write");
    let again = load(&file, Some(&key), Some(&cache));
    let report = again.cache_report();
    assert_eq!(report.outcome, CacheOutcome::Miss);
    assert!(
        report.warnings.iter().any(|w| w.contains("is corrupt")
            && w.contains("index.json")
            && w.contains("dropping the 1 cached entry")),
        "{:?}",
        report.warnings
    );
    assert_eq!(outputs(&again, &feeds), expected);
    // Reported once: the index written afterwards is sound, and the entry is back.
    let third = load(&file, Some(&key), Some(&cache));
    assert_eq!(third.cache_report().outcome, CacheOutcome::Hit);
    assert!(third.cache_report().warnings.is_empty());
    assert_eq!(entry_dirs(&cache), 1);
}
