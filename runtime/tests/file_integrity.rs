//! A `.nnc` file rewritten on disk while it is being loaded (memory-mapped) is either
//! loaded as it was when authenticated or refused: never a mix of two versions, and never
//! weights that differ from the ones whose tags were checked.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use nnc_formats::container::{self, WriteOptions};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::OperationType;
use nnc_runtime::{LoadOptions, ModelFile, PreparedModel, SimulatedNpu};

const K: usize = 256;
const N: usize = 256;

/// FULLY_CONNECTED of a [1, K] input with [N, K] weights filled from `seed`, written
/// encrypted under `key`; returns the file and the input to feed it.
fn version(key: &Key, seed: u64) -> (Vec<u8>, Vec<nnc_formats::tensor::HostTensor>) {
    let mut rng = Rng::new(seed);
    let (model, feeds) = single_op(
        OperationType::FullyConnected,
        vec![
            input_f32(&[1, K], &Rng::new(7).f32s(K)),
            const_f32(&[N, K], &rng.f32s(N * K)),
            const_f32(&[N], &rng.f32s(N)),
            Arg::I32(0),
        ],
        &[out_f32(&[1, N])],
    );
    let options = WriteOptions {
        key: Some(key),
        mode: Mode::Cbc,
        authenticate_only: false,
        reproducible: false,
        producer: "test".into(),
        arena: None,
        extra_sections: Vec::new(),
    };
    (container::write(&model, &options).expect("writes"), feeds)
}

fn run(
    file: ModelFile,
    npu: &SimulatedNpu,
    feeds: &[nnc_formats::tensor::HostTensor],
) -> Option<Vec<f32>> {
    let model = PreparedModel::load(file, npu, &LoadOptions::default()).ok()?;
    Some(f32s(&model.run(feeds).expect("a loaded model runs")[0]))
}

#[test]
fn a_file_rewritten_while_it_loads_is_one_version_or_refused() {
    let key = Key::generate(Algorithm::Aes128).expect("key");
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(key.as_bytes());
    let (a, feeds) = version(&key, 1);
    let (b, _) = version(&key, 2);
    assert_eq!(a.len(), b.len(), "both versions have one layout");
    let expected_a = run(ModelFile::from_bytes(a.clone()), &npu, &feeds).expect("A loads");
    let expected_b = run(ModelFile::from_bytes(b.clone()), &npu, &feeds).expect("B loads");
    assert_ne!(expected_a, expected_b);

    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("model.nnc");
    std::fs::write(&path, &a).expect("writes the file");
    let stop = AtomicBool::new(false);
    let (mut loaded, mut refused) = (0, 0);
    std::thread::scope(|scope| {
        // The writer flips the file between A and B half by half, so that every mix of
        // the two (A's metadata with B's weights, half a field of each) is on disk at
        // some moment while the loader reads it.
        scope.spawn(|| {
            use std::os::unix::fs::FileExt;
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .expect("opens the file for writing");
            let half = a.len() / 2;
            while !stop.load(Ordering::Relaxed) {
                for v in [&b, &a] {
                    file.write_all_at(&v[half..], half as u64).expect("writes");
                    file.write_all_at(&v[..half], 0).expect("writes");
                }
            }
        });
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(2) {
            let file = ModelFile::open(&path).expect("opens the file");
            match run(file, &npu, &feeds) {
                Some(out) => {
                    assert!(
                        out == expected_a || out == expected_b,
                        "a load that succeeded computed with weights of neither version"
                    );
                    loaded += 1;
                }
                None => refused += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    eprintln!("{loaded} loads succeeded, {refused} were refused");
    assert!(loaded + refused > 0);
    // Once the file holds one version again, it loads.
    std::fs::write(&path, &b).expect("writes the file");
    let file = ModelFile::open(&path).expect("opens the file");
    assert_eq!(run(file, &npu, &feeds), Some(expected_b));
}
