//! A `.nnc` file rewritten on disk while it is being loaded (memory-mapped) is either
//! loaded as it was when authenticated or refused: never a mix of two versions, and never
//! weights that differ from the ones whose tags were checked.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use nnc_formats::container;
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::OperationType;
use nnc_runtime::{LoadOptions, ModelFile, PreparedModel, SimulatedNpu};

const K: usize = 256;
const N: usize = 256;

/// Version `seed` of the model these tests rewrite on disk (encrypted under `key`).
fn version(key: &Key, seed: u64) -> (Vec<u8>, Vec<nnc_formats::tensor::HostTensor>) {
    fully_connected_file(K, N, seed, Some(key), Mode::Cbc)
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

/// Two FULLY_CONNECTED layers ('fc1', 'fc2') with weight fields of one length, written
/// with `key` in `mode`.
fn two_layers(key: &Key, mode: Mode) -> (Vec<u8>, Vec<nnc_formats::tensor::HostTensor>) {
    use nnc_formats::nn::{IoInfo, Lifetime, Model, Operand, OperandType};
    use nnc_formats::tensor::DataType;
    const W: usize = 64;
    let mut rng = Rng::new(11);
    let mut model = Model::default();
    let mut x = Operand::new(OperandType::TensorFloat32, vec![1, W as u32]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = model.add_operand(x);
    let mut previous = x;
    for name in ["fc1", "fc2"] {
        let w = model.add_f32_tensor(vec![W as u32, W as u32], &rng.f32s(W * W));
        let b = model.add_f32_tensor(vec![W as u32], &rng.f32s(W));
        let act = model.add_i32(0);
        let mut y = Operand::new(OperandType::TensorFloat32, vec![1, W as u32]);
        if name == "fc2" {
            y.lifetime = Lifetime::SubgraphOutput;
        }
        let y = model.add_operand(y);
        model.add_operation(
            OperationType::FullyConnected,
            vec![previous, w, b, act],
            vec![y],
            name,
        );
        previous = y;
    }
    model.main.inputs = vec![x];
    model.main.outputs = vec![previous];
    let io = |name: &str| IoInfo {
        name: name.into(),
        dtype: DataType::F32,
        dims: vec![1, W as u32],
    };
    model.input_info = vec![io("x")];
    model.output_info = vec![io("y")];
    let feeds = vec![
        nnc_formats::tensor::HostTensor::from_f32(vec![1, W], &Rng::new(3).f32s(W)).expect("input"),
    ];
    (write_file(&model, Some(key), mode), feeds)
}

fn load_error(bytes: Vec<u8>, npu: &SimulatedNpu) -> String {
    match PreparedModel::load_bytes(bytes, npu, &LoadOptions::default()) {
        Ok(_) => panic!("a tampered file loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_gcm_field_swapped_or_flipped_is_refused_naming_its_operation() {
    for algorithm in [Algorithm::Aes128, Algorithm::Sm4] {
        let key = Key::generate(algorithm).expect("key");
        let npu = SimulatedNpu::new("npu0");
        npu.install_key(key.as_bytes());
        let (file, feeds) = two_layers(&key, Mode::Gcm);
        let model = PreparedModel::load_bytes(file.clone(), &npu, &LoadOptions::default())
            .expect("the untouched file loads");
        assert_eq!(model.run(&feeds).expect("runs").len(), 1);
        let c = container::Container::parse(&file).expect("parses");
        assert_eq!(c.header.crypto.mode, Some(Mode::Gcm));
        let (a, b) = (
            c.fields[0].expect("fc1's field"),
            c.fields[1].expect("fc2's field"),
        );
        assert_eq!(a.length, b.length);
        let range = |f: &container::WeightField| f.offset as usize..(f.offset + f.length) as usize;

        // fc2's field stored where fc1's was, and fc1's where fc2's was.
        let mut swapped = file.clone();
        let (first, second) = (file[range(&a)].to_vec(), file[range(&b)].to_vec());
        swapped[range(&a)].copy_from_slice(&second);
        swapped[range(&b)].copy_from_slice(&first);
        let e = load_error(swapped, &npu);
        assert!(
            e.contains("FULLY_CONNECTED from node 'fc1'") && e.contains("does not authenticate"),
            "{algorithm:?}: {e}"
        );

        // One bit of fc2's field.
        let mut flipped = file.clone();
        flipped[b.offset as usize + 100] ^= 0x10;
        let e = load_error(flipped, &npu);
        assert!(
            e.contains("FULLY_CONNECTED from node 'fc2'") && e.contains("does not authenticate"),
            "{algorithm:?}: {e}"
        );
    }
}

#[test]
fn a_gcm_field_re_described_as_another_is_refused_by_its_own_tag() {
    // Even with the metadata re-signed (as only a key holder could), a field's GCM tag
    // binds its index, place and IV: moving fc2's bytes, IV and tag into fc1's slot fails.
    let key = Key::generate(Algorithm::Aes256).expect("key");
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(key.as_bytes());
    let (file, _) = two_layers(&key, Mode::Gcm);
    let c = container::Container::parse(&file).expect("parses");
    let (a, b) = (c.fields[0].expect("fc1"), c.fields[1].expect("fc2"));
    let (ta, tb) = (
        c.tag_offset(0).expect("fc1's tag") as usize,
        c.tag_offset(1).expect("fc2's tag") as usize,
    );
    let mut moved = file.clone();
    let src = b.offset as usize..(b.offset + b.length) as usize;
    let stored = file[src].to_vec();
    moved[a.offset as usize..(a.offset + a.length) as usize].copy_from_slice(&stored);
    // The IV lies just before the tag in the descriptor (docs/FORMAT.md).
    let descriptor_b = file[tb - 16..tb + 32].to_vec();
    moved[ta - 16..ta + 32].copy_from_slice(&descriptor_b);
    container::reseal_metadata(&mut moved, Some(key.as_bytes())).expect("re-signs");
    let e = load_error(moved, &npu);
    assert!(
        e.contains("weight field 0 of operation 0 (FULLY_CONNECTED from node 'fc1')"),
        "{e}"
    );
}
