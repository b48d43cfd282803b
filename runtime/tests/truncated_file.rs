//! A `.nnc` file truncated or altered by another process while a model loads from it, or
//! after it loaded (a bounded parameter cache reads evicted weight fields again during
//! execution), is a clean error: never a signal (the file is read at offsets, never
//! memory-mapped), and an altered field is refused as an integrity failure.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use common::*;
use nnc_formats::container::{self, ContainerError};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::{IoInfo, Lifetime, Model, Operand, OperandType, OperationType};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::{LoadOptions, ModelFile, PreparedModel, RuntimeError, SimulatedNpu};

const W: usize = 128;
const LAYERS: usize = 3;

/// LAYERS fully connected layers of W x W (a weight field each), encrypted under `key`.
fn layers(key: &Key) -> (Vec<u8>, Vec<HostTensor>) {
    let mut rng = Rng::new(5);
    let mut model = Model::default();
    let mut x = Operand::new(OperandType::TensorFloat32, vec![1, W as u32]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = model.add_operand(x);
    let mut previous = x;
    for layer in 0..LAYERS {
        let w = model.add_f32_tensor(vec![W as u32, W as u32], &rng.f32s(W * W));
        let b = model.add_f32_tensor(vec![W as u32], &rng.f32s(W));
        let act = model.add_i32(0);
        let mut y = Operand::new(OperandType::TensorFloat32, vec![1, W as u32]);
        if layer == LAYERS - 1 {
            y.lifetime = Lifetime::SubgraphOutput;
        }
        let y = model.add_operand(y);
        model.add_operation(
            OperationType::FullyConnected,
            vec![previous, w, b, act],
            vec![y],
            format!("fc{layer}"),
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
    let feeds = vec![HostTensor::from_f32(vec![1, W], &Rng::new(3).f32s(W)).expect("input")];
    (write_file(&model, Some(key), Mode::Ctr), feeds)
}

/// A device whose parameter cache keeps nothing: every execution reads every weight field
/// from the file again.
fn device(key: &Key) -> SimulatedNpu {
    let npu = SimulatedNpu::new("npu0").with_cache_capacity(1);
    npu.install_key(key.as_bytes());
    npu
}

fn load(path: &Path, npu: &SimulatedNpu) -> Result<PreparedModel, RuntimeError> {
    PreparedModel::load(ModelFile::open(path)?, npu, &LoadOptions::default())
}

/// The container error an error is about, when it is classified as one (what the CLI
/// and the C API map to their integrity codes).
fn container_error(e: &RuntimeError) -> Option<&ContainerError> {
    match e {
        RuntimeError::Load(c) => Some(c),
        _ => None,
    }
}

#[test]
fn a_file_truncated_after_loading_fails_the_run_cleanly_and_as_an_integrity_failure() {
    let key = Key::generate(Algorithm::Aes128).expect("key");
    let npu = device(&key);
    let (bytes, feeds) = layers(&key);
    let c = container::Container::parse(&bytes).expect("parses");
    let fields: Vec<container::WeightField> = c.fields.iter().flatten().copied().collect();
    assert_eq!(fields.len(), LAYERS);
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("model.nnc");
    std::fs::write(&path, &bytes).expect("writes");
    let model = load(&path, &npu).expect("loads");
    let expected = f32s(&model.run(&feeds).expect("runs")[0]);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("opens for writing");
    // Into the last field, at its start, into the first, and down to nothing.
    let last = fields[LAYERS - 1];
    for len in [
        last.offset + last.length - 1,
        last.offset,
        fields[0].offset + 100,
        0,
    ] {
        file.set_len(len).expect("truncates");
        let e = model.run(&feeds).expect_err("a truncated file cannot run");
        let text = e.to_string();
        assert!(
            text.contains("truncated while being read: weight field"),
            "truncated to {len}: {text}"
        );
        assert!(
            container_error(&e).is_some_and(|c| c.is_integrity()),
            "truncated to {len}: not classified as an integrity failure: {e:?}"
        );
        // Written back, the same file runs again: nothing was cached from the failure.
        file.write_all_at(&bytes, 0).expect("restores");
        assert_eq!(f32s(&model.run(&feeds).expect("runs")[0]), expected);
    }
    // Truncated before it loads (after it was opened): refused at load, as the file has
    // changed since it was opened.
    let opened = ModelFile::open(&path).expect("opens");
    file.set_len(fields[1].offset).expect("truncates");
    let e = PreparedModel::load(opened, &npu, &LoadOptions::default())
        .err()
        .expect("a truncated file cannot load");
    assert!(
        container_error(&e).is_some_and(|c| matches!(c, ContainerError::Shrank { .. })),
        "{e}"
    );
    // Opened once truncated: the file is shorter than its header says (malformed).
    let e = load(&path, &npu).err().expect("cannot load");
    assert!(
        container_error(&e).is_some_and(|c| matches!(c, ContainerError::Truncated { .. })),
        "{e}"
    );
}

#[test]
fn a_weight_field_altered_after_loading_fails_the_run_as_an_integrity_failure() {
    let key = Key::generate(Algorithm::Aes128).expect("key");
    let npu = device(&key);
    let (bytes, feeds) = layers(&key);
    let c = container::Container::parse(&bytes).expect("parses");
    let field = c.fields[1].expect("fc1's field");
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("model.nnc");
    std::fs::write(&path, &bytes).expect("writes");
    let model = load(&path, &npu).expect("loads");
    model.run(&feeds).expect("runs");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("opens for writing");
    let at = field.offset + field.length / 2;
    file.write_all_at(&[bytes[at as usize] ^ 0x01], at)
        .expect("alters one bit");
    let e = model.run(&feeds).expect_err("an altered field cannot run");
    assert!(
        container_error(&e).is_some_and(|c| c.is_integrity()),
        "not classified as an integrity failure: {e:?}"
    );
    assert!(
        e.to_string().contains(
            "wrong key or tampered file: weight field 1 of operation 1 \
             (FULLY_CONNECTED from node 'fc1') does not authenticate"
        ),
        "{e}"
    );
}

#[test]
fn forty_truncations_at_random_moments_while_loading_and_running_are_clean_errors() {
    let key = Key::generate(Algorithm::Aes128).expect("key");
    let npu = device(&key);
    let (bytes, feeds) = layers(&key);
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("model.nnc");
    let mut rng = Rng::new(29);
    let (mut ran, mut refused) = (0, 0);
    for _ in 0..40 {
        std::fs::write(&path, &bytes).expect("writes");
        let len = rng.range(0, bytes.len() - 1) as u64;
        let delay = std::time::Duration::from_micros(rng.range(0, 3000) as u64);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(delay);
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .expect("opens for writing");
                file.set_len(len).expect("truncates");
            });
            let outcome = load(&path, &npu).and_then(|model| {
                for _ in 0..5 {
                    model.run(&feeds)?;
                }
                Ok(())
            });
            match outcome {
                Ok(()) => ran += 1,
                Err(e) => {
                    // Refused as a changed file, or (opened after the truncation) as one
                    // shorter than its header says; never anything else.
                    let clean = container_error(&e).is_some_and(|c| {
                        c.is_integrity()
                            || matches!(
                                c,
                                ContainerError::Truncated { .. } | ContainerError::BadMagic { .. }
                            )
                    });
                    assert!(clean, "truncated to {len} after {delay:?}: {e:?}");
                    refused += 1;
                }
            }
        });
    }
    eprintln!("{ran} ran through, {refused} were refused");
    assert_eq!(ran + refused, 40);
    assert!(refused > 0, "no truncation hit the load or the runs");
}
