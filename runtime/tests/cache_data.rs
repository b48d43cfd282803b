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

/// A 3x3 CONV_2D of 16 channels on a 12x12 image (SAME padding), unencrypted: a layer
/// the Winograd path takes under `FloatMath::Fast` (or when `relaxed`, the model allows
/// relaxed computation).
fn conv3x3_file(relaxed: bool) -> (Vec<u8>, Vec<HostTensor>) {
    let mut rng = Rng::new(5);
    let (mut model, feeds) = single_op(
        nnc_formats::nn::OperationType::Conv2d,
        vec![
            input_f32(&[1, 12, 12, 16], &rng.f32s(12 * 12 * 16)),
            const_f32(&[16, 3, 3, 16], &rng.f32s(16 * 9 * 16)),
            const_f32(&[16], &rng.f32s(16)),
            Arg::I32(1),
            Arg::I32(1),
            Arg::I32(1),
            Arg::I32(0),
        ],
        &[out_f32(&[1, 12, 12, 16])],
    );
    model.relax_computation_float32_to_float16 = relaxed;
    (write_file(&model, None, Mode::Ctr), feeds)
}

/// Filters are prepared differently under the two float-math options, so the cache
/// keeps an entry per option: loading under the other option is a miss (never a
/// misreading of the other layout), and each option's hit computes what a fresh
/// prepare under it does.
#[test]
fn the_float_math_option_has_its_own_cache_entry() {
    use nnc_runtime::FloatMath;
    let (file, feeds) = conv3x3_file(false);
    let npu = SimulatedNpu::new("npu0");
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let load_with = |float_math: FloatMath, cached: bool| {
        let options = LoadOptions {
            cache: cached.then(|| CacheConfig {
                dir: cache.clone(),
                token: None,
            }),
            float_math,
            ..LoadOptions::default()
        };
        PreparedModel::load_bytes(file.to_vec(), &npu, &options).expect("loads")
    };
    let fresh_strict = outputs(&load_with(FloatMath::Strict, false), &feeds);
    let fresh_fast = outputs(&load_with(FloatMath::Fast, false), &feeds);
    assert_ne!(fresh_strict, fresh_fast, "the fast path did not run");
    for (math, expected, outcome) in [
        (FloatMath::Strict, &fresh_strict, CacheOutcome::Miss),
        (FloatMath::Fast, &fresh_fast, CacheOutcome::Miss),
        (FloatMath::Fast, &fresh_fast, CacheOutcome::Hit),
        (FloatMath::Strict, &fresh_strict, CacheOutcome::Hit),
    ] {
        let model = load_with(math, true);
        let report = model.cache_report();
        assert_eq!(report.outcome, outcome, "{math:?}: {:?}", report.warnings);
        assert!(
            report.warnings.is_empty(),
            "{math:?}: {:?}",
            report.warnings
        );
        assert_eq!(&outputs(&model, &feeds), expected, "{math:?}");
    }
}

/// A model that allows relaxed computation is prepared with fast float math whatever
/// the option says, so its cache entry is the same under both: the second load hits.
#[test]
fn a_relaxed_model_has_one_cache_entry_for_both_options() {
    use nnc_runtime::FloatMath;
    let (file, feeds) = conv3x3_file(true);
    let npu = SimulatedNpu::new("npu0");
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut first = None;
    for (math, outcome) in [
        (FloatMath::Strict, CacheOutcome::Miss),
        (FloatMath::Fast, CacheOutcome::Hit),
    ] {
        let options = LoadOptions {
            cache: Some(CacheConfig {
                dir: tmp.path().join("cache"),
                token: None,
            }),
            float_math: math,
            ..LoadOptions::default()
        };
        let model = PreparedModel::load_bytes(file.clone(), &npu, &options).expect("loads");
        let report = model.cache_report();
        assert_eq!(report.outcome, outcome, "{math:?}: {:?}", report.warnings);
        let got = outputs(&model, &feeds);
        assert_eq!(first.get_or_insert_with(|| got.clone()), &got, "{math:?}");
    }
}
