//! One model under one key in every cipher mode (issue 29, item 7): the salts of any two
//! modes differ (reproducible or not), CTR and GCM never share a counter block, the
//! reproducible output of a mode stays byte-identical, everything reads back, and files
//! written before format 1.2 (committed in `tests/data/legacy/`) still load.

use std::collections::HashSet;

use nnc_formats::container::{Container, FileKeys, WriteOptions, write};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::{IoInfo, Lifetime, Model, Operand, OperandType, OperationType};
use nnc_formats::tensor::DataType;

const N: u32 = 24;

/// x[1,24] -> FC(w1, b1) -> FC(w2, b2) -> y: two weight fields. The legacy fixtures were
/// written from exactly this model, so it must not change.
fn model() -> Model {
    let mut m = Model::default();
    let mut x = Operand::new(OperandType::TensorFloat32, vec![1, N]);
    x.lifetime = Lifetime::SubgraphInput;
    let x = m.add_operand(x);
    let w1: Vec<f32> = (0..N * N)
        .map(|i| ((i * 7) % 31) as f32 * 0.1 - 1.5)
        .collect();
    let w1 = m.add_f32_tensor(vec![N, N], &w1);
    let b1: Vec<f32> = (0..N).map(|i| i as f32 * 0.25).collect();
    let b1 = m.add_f32_tensor(vec![N], &b1);
    let act = m.add_i32(1);
    let h = m.add_operand(Operand::new(OperandType::TensorFloat32, vec![1, N]));
    m.add_operation(
        OperationType::FullyConnected,
        vec![x, w1, b1, act],
        vec![h],
        "fc1",
    );
    let w2: Vec<f32> = (0..N * N)
        .map(|i| ((i * 13) % 17) as f32 * -0.2 + 0.7)
        .collect();
    let w2 = m.add_f32_tensor(vec![N, N], &w2);
    let b2: Vec<f32> = (0..N).map(|i| 1.0 - i as f32 * 0.125).collect();
    let b2 = m.add_f32_tensor(vec![N], &b2);
    let mut y = Operand::new(OperandType::TensorFloat32, vec![1, N]);
    y.lifetime = Lifetime::SubgraphOutput;
    let y = m.add_operand(y);
    m.add_operation(
        OperationType::FullyConnected,
        vec![h, w2, b2, act],
        vec![y],
        "fc2",
    );
    m.main.inputs = vec![x];
    m.main.outputs = vec![y];
    let info = |n: &str| IoInfo {
        name: n.into(),
        dtype: DataType::F32,
        dims: vec![1, N],
    };
    m.input_info = vec![info("x")];
    m.output_info = vec![info("y")];
    m
}

fn options(key: &Key, mode: Mode, reproducible: bool, authenticate_only: bool) -> WriteOptions<'_> {
    WriteOptions {
        envelope: Default::default(),
        key: Some(key),
        mode,
        authenticate_only,
        reproducible,
        producer: "nnc test".into(),
        arena: None,
        extra_sections: Vec::new(),
    }
}

/// Opens `bytes` with `key` and checks every weight constant of every graph decrypts to
/// the bytes `original` holds for that operand.
fn assert_reads_back(bytes: &[u8], key: &Key, original: &Model, what: &str) {
    let (c, keys) = Container::open(bytes, Some(key.as_bytes()))
        .unwrap_or_else(|e| panic!("{what}: does not open: {e}"));
    let mut checked = 0;
    for (t, graph) in c.model.graphs().enumerate() {
        let source = original.graph(t).expect("same graphs");
        for (i, operand) in graph.operands.iter().enumerate() {
            if operand.lifetime != Lifetime::ConstantReference {
                continue;
            }
            let loc = operand.location;
            let field = c
                .decrypt_field(keys.as_ref(), loc.pool_index as usize)
                .unwrap_or_else(|e| panic!("{what}: field of operand {i}: {e}"));
            let got = &field[loc.offset as usize..(loc.offset + loc.length) as usize];
            let want = nnc_formats::nn::model::constant_bytes(
                &source.operands[i],
                &original.operand_values,
                &original.pools,
            )
            .expect("a constant");
            assert_eq!(got, want, "{what}: operand {i} of graph {t}");
            checked += 1;
        }
    }
    assert!(checked >= 2, "{what}: only {checked} weights checked");
}

/// Every 16-byte block a field's keystream is made from, as the block cipher's input:
/// CTR encrypts `IV, IV + 1, ...` (128-bit big-endian), GCM `J0 = nonce || 1` (which
/// masks the tag) and `nonce || 2, 3, ...`.
fn counter_blocks(c: &Container, mode: Mode) -> Vec<u128> {
    let mut blocks = Vec::new();
    for field in c.fields.iter().flatten() {
        let n = field.length.div_ceil(16) as u128;
        let iv = u128::from_be_bytes(field.iv);
        match mode {
            Mode::Ctr => blocks.extend((0..n).map(|j| iv.wrapping_add(j))),
            Mode::Gcm => {
                let nonce = iv >> 32 << 32;
                blocks.extend((1..=n + 1).map(|j| nonce | j));
            }
            _ => unreachable!("only CTR and GCM have counter blocks"),
        }
    }
    blocks
}

#[test]
fn every_mode_has_its_own_salt_and_ctr_and_gcm_share_no_counter_block() {
    let m = model();
    for algorithm in [Algorithm::Aes128, Algorithm::Sm4, Algorithm::Aes256] {
        let key = Key::generate(algorithm).unwrap();
        for reproducible in [true, false] {
            let mut files: Vec<(String, Vec<u8>)> = Mode::EVERY
                .iter()
                .map(|&mode| {
                    let bytes = write(&m, &options(&key, mode, reproducible, false)).unwrap();
                    (format!("{algorithm} {mode:?}"), bytes)
                })
                .collect();
            files.push((
                format!("{algorithm} authenticated"),
                write(&m, &options(&key, Mode::Ctr, reproducible, true)).unwrap(),
            ));
            // (a) Pairwise different salts.
            let mut salts = HashSet::new();
            for (what, bytes) in &files {
                let c = Container::parse(bytes).unwrap();
                assert!(
                    salts.insert(c.header.salt),
                    "{what} (reproducible {reproducible}) repeats another mode's salt"
                );
                // (d) Everything reads back.
                assert_reads_back(bytes, &key, &m, what);
            }
            // (b) No counter block of any CTR field is one of any GCM field's, nor does
            // any lie in a GCM nonce's whole counter space (the 2^32 blocks sharing its
            // first 12 bytes), so no longer field or other length could make them meet.
            let ctr = Container::parse(&files[4].1).unwrap();
            let gcm = Container::parse(&files[5].1).unwrap();
            assert_eq!(ctr.header.crypto.mode, Some(Mode::Ctr));
            assert_eq!(gcm.header.crypto.mode, Some(Mode::Gcm));
            let ctr_blocks = counter_blocks(&ctr, Mode::Ctr);
            let gcm_blocks: HashSet<u128> = counter_blocks(&gcm, Mode::Gcm).into_iter().collect();
            let gcm_nonces: HashSet<u128> = gcm_blocks.iter().map(|b| b >> 32).collect();
            assert!(ctr_blocks.len() > 100 && gcm_blocks.len() > 100);
            for b in &ctr_blocks {
                assert!(!gcm_blocks.contains(b), "shared counter block {b:032x}");
                assert!(
                    !gcm_nonces.contains(&(b >> 32)),
                    "CTR block {b:032x} lies in a GCM nonce's counter space"
                );
            }
        }
    }
}

#[test]
fn reproducible_output_is_byte_identical_in_every_mode() {
    let m = model();
    let key = Key::generate(Algorithm::Aes128).unwrap();
    for mode in Mode::EVERY {
        let a = write(&m, &options(&key, mode, true, false)).unwrap();
        let b = write(&m, &options(&key, mode, true, false)).unwrap();
        assert_eq!(a, b, "{mode:?}");
        let r = write(&m, &options(&key, mode, false, false)).unwrap();
        assert_ne!(a, r, "{mode:?}: a random salt gave the reproducible file");
    }
}

/// The writer's keyed files are all 1.3 (a data key in a key block); the legacy files
/// are 1.0, 1.1 and 1.2.
#[test]
fn keyed_files_are_format_1_3() {
    let m = model();
    let key = Key::generate(Algorithm::Aes128).unwrap();
    for authenticate_only in [false, true] {
        let bytes = write(&m, &options(&key, Mode::Ctr, true, authenticate_only)).unwrap();
        let c = Container::parse(&bytes).unwrap();
        assert_eq!((c.header.major, c.header.minor), (1, 3));
        let block = c.key_block().unwrap().unwrap();
        assert_eq!(block.recipients.len(), 1);
        assert_eq!(block.recipients[0].key_id, c.header.key_id);
    }
}

fn legacy(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/legacy/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn legacy_aes() -> Key {
    Key::from_hex(Algorithm::Aes128, "6e6e632d6c65676163792d6165733132").unwrap()
}

/// Files the writers of formats 1.0 to 1.2 produced, committed as they came out (the keys
/// are test keys): they load, authenticate and decrypt with the derivation of their
/// version.
#[test]
fn files_written_before_1_3_still_load() {
    let sm4 = Key::from_hex(Algorithm::Sm4, "6e6e632d6c65676163792d736d342121").unwrap();
    let aes = legacy_aes();
    let cases: [(&str, &Key, u16, bool); 9] = [
        ("v1.2-aes128-ctr.nnc", &aes, 2, false),
        ("v1.2-aes128-gcm.nnc", &aes, 2, false),
        ("v1.2-sm4-cbc.nnc", &sm4, 2, false),
        ("v1.2-aes128-authenticated.nnc", &aes, 2, false),
        ("aes128-ctr.nnc", &aes, 0, false),
        ("aes128-gcm.nnc", &aes, 0, false),
        ("sm4-cbc.nnc", &sm4, 0, false),
        ("aes128-authenticated.nnc", &aes, 0, false),
        ("if-aes128-ofb.nnc", &aes, 1, true),
    ];
    for (name, key, minor, control_flow) in cases {
        let bytes = legacy(name);
        let c = Container::parse(&bytes).unwrap();
        assert_eq!((c.header.major, c.header.minor), (1, minor), "{name}");
        let original = if control_flow {
            nnc_formats::test_support::control_flow::if_model()
        } else {
            model()
        };
        assert_reads_back(&bytes, key, &original, name);
    }
    // What 1.2 fixes: the old CTR and GCM files of one model under one key had one salt.
    assert_eq!(
        Container::parse(&legacy("aes128-ctr.nnc"))
            .unwrap()
            .header
            .salt,
        Container::parse(&legacy("aes128-gcm.nnc"))
            .unwrap()
            .header
            .salt
    );
}

/// The version byte selects the derivation and is itself authenticated by it: relabelling
/// an old file as 1.2, or a new one as 1.1, is "wrong key or tampered file".
#[test]
fn the_version_cannot_be_changed_to_pick_the_other_derivation() {
    let key = legacy_aes();
    let mut old = legacy("aes128-ctr.nnc");
    old[10] = 2;
    let new = write(&model(), &options(&key, Mode::Ctr, true, false)).unwrap();
    let mut downgraded = new.clone();
    downgraded[10] = 1;
    let mut old_as_envelope = legacy("v1.2-aes128-ctr.nnc");
    old_as_envelope[10] = 3;
    let mut envelope_as_1_2 = new.clone();
    envelope_as_1_2[10] = 2;
    for (what, bytes) in [
        ("1.0 as 1.2", old),
        ("1.3 as 1.1", downgraded),
        ("1.2 as 1.3", old_as_envelope),
        ("1.3 as 1.2", envelope_as_1_2),
    ] {
        let err = Container::open(&bytes, Some(key.as_bytes()))
            .map(|_| ())
            .unwrap_err();
        assert!(err.is_integrity(), "{what}: {err}");
    }
    Container::open(&new, Some(key.as_bytes())).unwrap();
}

/// Equal salts would still give each cipher its own keys: HKDF's info binds the header's
/// algorithm and mode codes.
#[test]
fn equal_salts_give_every_mode_its_own_keys() {
    let key = legacy_aes();
    let m = model();
    let mut seen_enc = HashSet::new();
    let mut seen_auth = HashSet::new();
    for mode in Mode::EVERY {
        let mut bytes = write(&m, &options(&key, mode, true, false)).unwrap();
        // Give every file the same salt; the keys come from the header as it is then.
        bytes[96..128].fill(0x5a);
        let derived: FileKeys = FileKeys::derive(
            key.as_bytes(),
            &[0x5a; 32],
            nnc_formats::container::Derivation::of_header(&bytes),
        )
        .unwrap()
        .with_encryption(Algorithm::Aes128)
        .unwrap();
        let enc = derived.encryption.as_ref().unwrap().as_bytes().to_vec();
        assert!(seen_enc.insert(enc), "{mode:?} repeats an encryption key");
        assert!(
            seen_auth.insert(derived.authentication.to_vec()),
            "{mode:?} repeats an authentication key"
        );
    }
}
