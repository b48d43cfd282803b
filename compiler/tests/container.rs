//! The encrypted model file on a real model (MobileNetV2): round trips for every
//! algorithm and mode, no plaintext left behind, tampering and truncation detected
//! everywhere, malformed headers named.

use std::collections::HashSet;
use std::sync::OnceLock;

use nnc_compiler::emit::{self, EmitOptions};
use nnc_compiler::pipeline::{LowerOptions, lower_file};
use nnc_formats::container::{Container, ContainerError, SectionKind, is_weight};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::Model;
use nnc_formats::test_support::shared_model;

/// MobileNetV2 lowered and optimized once for the whole file.
fn mobilenet() -> Option<&'static Model> {
    static MODEL: OnceLock<Option<Model>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let path = shared_model("mobilenet_v2.onnx")?;
            Some(
                lower_file(&path, &LowerOptions::default())
                    .expect("MobileNetV2 lowers")
                    .model,
            )
        })
        .as_ref()
}

fn compile(model: &Model, key: Option<&Key>, mode: Mode) -> Vec<u8> {
    emit::emit(
        model,
        EmitOptions {
            envelope: Default::default(),
            key,
            mode,
            authenticate_only: false,
            reproducible: false,
            extra_sections: Vec::new(),
        },
    )
    .expect("emit")
}

/// (operand index, its bytes) for every weight of the lowered model.
fn weights(model: &Model) -> Vec<(usize, Vec<u8>)> {
    model
        .main
        .operands
        .iter()
        .enumerate()
        .filter(|(_, o)| is_weight(o))
        .map(|(i, _)| {
            (
                i,
                model
                    .constant_bytes(i as u32)
                    .expect("weight bytes")
                    .to_vec(),
            )
        })
        .collect()
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn every_algorithm_and_mode_decrypts_to_the_lowered_weights() {
    let Some(model) = mobilenet() else { return };
    let expected = weights(model);
    assert!(
        expected.len() > 100,
        "MobileNetV2 has {} weight tensors",
        expected.len()
    );
    for algorithm in Algorithm::ALL {
        let key = Key::generate(algorithm).unwrap();
        for mode in Mode::ALL {
            let bytes = compile(model, Some(&key), mode);
            let c = Container::parse(&bytes).unwrap();
            c.verify(Some(key.as_bytes())).unwrap();
            let keys = c.keys(Some(key.as_bytes())).unwrap();
            let mut fields = std::collections::HashMap::new();
            for &(i, ref plain) in &expected {
                let loc = c.model.main.operands[i].location;
                let field = fields.entry(loc.pool_index).or_insert_with(|| {
                    c.decrypt_field(keys.as_ref(), loc.pool_index as usize)
                        .unwrap()
                });
                let got = &field[loc.offset as usize..(loc.offset + loc.length) as usize];
                assert!(
                    got == plain.as_slice(),
                    "{algorithm:?}-{mode:?}: operand {i} differs after decryption"
                );
            }
        }
    }
}

/// Every 16-byte block of `file` at offsets that are multiples of 16.
fn aligned_blocks(file: &[u8]) -> HashSet<[u8; 16]> {
    file.chunks_exact(16)
        .map(|c| c.try_into().unwrap())
        .collect()
}

/// Looks for any 32-byte window of `data` inside `file`. Any 32-byte common substring
/// fully contains a 16-byte block of `file` at an offset that is a multiple of 16, so
/// checking those blocks first finds every candidate; each is then confirmed in full.
/// Windows of one repeated byte (zero runs) are skipped: the file's zero padding holds
/// them and they reveal nothing.
fn find_window(file: &[u8], blocks: &HashSet<[u8; 16]>, data: &[u8]) -> Option<usize> {
    if data.len() < 32 {
        return None;
    }
    for start in 0..=data.len() - 16 {
        let block: [u8; 16] = data[start..start + 16].try_into().unwrap();
        if !blocks.contains(&block) {
            continue;
        }
        // Confirm: some 32-byte window of `data` containing this block occurs in `file`.
        let lo = start.saturating_sub(16);
        for w in lo..=start.min(data.len() - 32) {
            let window = &data[w..w + 32];
            if window.iter().all(|&b| b == window[0]) {
                continue;
            }
            if file.windows(32).any(|f| f == window) {
                return Some(w);
            }
        }
    }
    None
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn no_plaintext_window_of_any_weight_survives() {
    let Some(model) = mobilenet() else { return };
    let expected = weights(model);
    for (algorithm, mode) in [
        (Algorithm::Aes128, Mode::Ecb),
        (Algorithm::Aes128, Mode::Cbc),
        (Algorithm::Aes192, Mode::Cfb),
        (Algorithm::Aes256, Mode::Ofb),
        (Algorithm::Sm4, Mode::Ctr),
    ] {
        let key = Key::generate(algorithm).unwrap();
        let file = compile(model, Some(&key), mode);
        let blocks = aligned_blocks(&file);
        for (i, data) in &expected {
            assert_eq!(
                find_window(&file, &blocks, data),
                None,
                "{algorithm:?}-{mode:?}: a plaintext window of operand {i} appears in the file"
            );
        }
    }
    // The search itself works: an unencrypted file does contain its weights.
    let plain = compile(model, None, Mode::Ctr);
    let blocks = aligned_blocks(&plain);
    let (_, big) = expected.iter().max_by_key(|(_, d)| d.len()).unwrap();
    assert!(find_window(&plain, &blocks, big).is_some());
}

fn section(c: &Container, kind: SectionKind) -> (usize, usize) {
    let s = c.sections.iter().find(|s| s.kind == kind as u32).unwrap();
    (s.offset as usize, (s.offset + s.length) as usize)
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn a_flipped_byte_anywhere_fails_verification() {
    let Some(model) = mobilenet() else { return };
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let bytes = compile(model, Some(&key), Mode::Ctr);
    let c = Container::parse(&bytes).unwrap();
    let table = c.header.section_table_offset as usize;
    let (info_start, info_end) = section(&c, SectionKind::OperatorInfo);
    let (w_start, w_end) = section(&c, SectionKind::Weights);
    // Every header and section-table byte, a dense sample of the operator info, and a
    // sample of the weights that includes every field's first and last byte and the
    // padding between fields.
    let mut positions: Vec<usize> = (0..table + c.sections.len() * 32).collect();
    positions.extend((info_start..info_end).step_by(((info_end - info_start) / 300).max(1)));
    positions.extend((w_start..w_end).step_by((w_end - w_start) / 500));
    for f in c.fields.iter().flatten() {
        positions.push(f.offset as usize);
        positions.push((f.offset + f.length) as usize - 1);
        positions.push((f.offset + f.length) as usize); // padding (or the next field)
    }
    positions.retain(|&p| p < bytes.len());
    positions.sort_unstable();
    positions.dedup();
    assert!(
        positions.len() >= 1000,
        "only {} positions",
        positions.len()
    );
    let mut per_region = [0usize; 4];
    for &pos in &positions {
        let mut b = bytes.clone();
        b[pos] ^= 1 << (pos % 8);
        // Opening authenticates before parsing: every alteration is an integrity error
        // (the magic says what kind of file it is).
        match Container::open(&b, Some(key.as_bytes())) {
            Ok(_) => panic!("a flipped bit at byte {pos} went unnoticed"),
            Err(ContainerError::BadMagic { .. }) if pos < 8 => {}
            Err(e) => assert!(e.is_integrity(), "byte {pos}: not an integrity error: {e}"),
        }
        let region = match pos {
            p if p < 256 => 0,
            p if p < info_start => 1,
            p if p < info_end => 2,
            _ => 3,
        };
        per_region[region] += 1;
    }
    assert!(
        per_region.iter().all(|&n| n > 0),
        "positions per region: {per_region:?}"
    );
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn truncation_at_every_section_boundary_is_detected() {
    let Some(model) = mobilenet() else { return };
    let key = Key::generate(Algorithm::Sm4).unwrap();
    let bytes = compile(model, Some(&key), Mode::Cbc);
    let c = Container::parse(&bytes).unwrap();
    let mut cuts = vec![0, 7, 8, 255, 256];
    for s in &c.sections {
        cuts.extend([
            s.offset as usize - 1,
            s.offset as usize,
            s.offset as usize + 1,
            (s.offset + s.length) as usize - 1,
        ]);
    }
    for f in c.fields.iter().flatten() {
        cuts.push(f.offset as usize);
    }
    cuts.push(bytes.len() - 1);
    for cut in cuts {
        let err = Container::parse(&bytes[..cut]).unwrap_err();
        assert!(
            matches!(
                err,
                ContainerError::Truncated { .. } | ContainerError::BadMagic { .. }
            ),
            "cut at {cut}: {err}"
        );
    }
    // Appended bytes are refused as well.
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0; 64]);
    assert!(
        Container::parse(&longer)
            .unwrap_err()
            .to_string()
            .contains("file_size")
    );
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn a_wrong_key_is_reported_as_wrong_key_or_tampered_file() {
    let Some(model) = mobilenet() else { return };
    let key = Key::generate(Algorithm::Aes256).unwrap();
    let bytes = compile(model, Some(&key), Mode::Cfb);
    let c = Container::parse(&bytes).unwrap();
    let wrong = Key::generate(Algorithm::Aes256).unwrap();
    let err = c.verify(Some(wrong.as_bytes())).unwrap_err();
    assert!(
        err.to_string().starts_with("wrong key or tampered file"),
        "{err}"
    );
    // Decrypting a field with the wrong key is refused too: never garbage weights.
    let err = c.keys(Some(wrong.as_bytes())).map(|_| ()).unwrap_err();
    assert!(err.is_integrity());
}

/// Writes `value` at `offset` of a copy of `bytes`.
fn patched(bytes: &[u8], offset: usize, value: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[offset..offset + value.len()].copy_from_slice(value);
    b
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn every_malformed_header_field_is_named() {
    let Some(model) = mobilenet() else { return };
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let bytes = compile(model, Some(&key), Mode::Cbc);
    let c = Container::parse(&bytes).unwrap();
    let table = c.header.section_table_offset as usize;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("magic", patched(&bytes, 0, b"NOTNNC!!"), "bad magic"),
        (
            "major version",
            patched(&bytes, 8, &2u16.to_le_bytes()),
            // A keyed file's minor version is 3 (a data key in a key block).
            "unsupported format version 2.3",
        ),
        (
            "header size",
            patched(&bytes, 12, &512u32.to_le_bytes()),
            "header_size",
        ),
        (
            "file size",
            patched(&bytes, 16, &1u64.to_le_bytes()),
            "file_size",
        ),
        (
            "flags",
            patched(&bytes, 24, &0x80u32.to_le_bytes()),
            "flags",
        ),
        (
            "section count",
            patched(&bytes, 28, &1_000_000u32.to_le_bytes()),
            "section_count",
        ),
        (
            "section table offset",
            patched(&bytes, 32, &(u64::MAX - 7).to_le_bytes()),
            "section table",
        ),
        ("producer", patched(&bytes, 40, &[0xff, 0xfe]), "producer"),
        ("algorithm", patched(&bytes, 72, &[9]), "algorithm"),
        ("mode", patched(&bytes, 73, &[9]), "mode"),
        ("padding", patched(&bytes, 74, &[0]), "padding"),
        ("integrity", patched(&bytes, 75, &[7]), "integrity"),
        ("reserved", patched(&bytes, 160, &[1]), "reserved"),
        (
            "metadata length",
            patched(&bytes, 128, &64u64.to_le_bytes()),
            "metadata_length",
        ),
        (
            "section kind",
            patched(&bytes, table, &99u32.to_le_bytes()),
            "section kind",
        ),
        (
            "section offset",
            patched(&bytes, table + 8, &(1u64 << 40).to_le_bytes()),
            "beyond the end of the file",
        ),
        (
            "section alignment",
            patched(&bytes, table + 8, &321u64.to_le_bytes()),
            "aligned",
        ),
        (
            "section length",
            patched(&bytes, table + 16, &u64::MAX.to_le_bytes()),
            "beyond the end of the file",
        ),
        (
            "overlapping sections",
            patched(&bytes, table + 32 + 8, &c.sections[0].offset.to_le_bytes()),
            "overlap",
        ),
        (
            "operand count",
            patched(
                &bytes,
                c.sections[0].offset as usize,
                &u32::MAX.to_le_bytes(),
            ),
            "operand_count",
        ),
        (
            "operation count",
            patched(
                &bytes,
                c.sections[0].offset as usize + 4,
                &u32::MAX.to_le_bytes(),
            ),
            "operation_count",
        ),
        (
            "inline length",
            patched(
                &bytes,
                c.sections[0].offset as usize + 20,
                &u64::MAX.to_le_bytes(),
            ),
            "inline_values_length",
        ),
    ];
    for (what, b, needle) in cases {
        let err = match Container::parse(&b) {
            Err(e) => e,
            Ok(c) => c.verify(Some(key.as_bytes())).expect_err(what),
        };
        let text = err.to_string();
        assert!(
            text.contains(needle),
            "{what}: expected '{needle}' in: {text}"
        );
    }
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn reproducible_files_are_byte_identical() {
    let Some(model) = mobilenet() else { return };
    let key = Key::generate(Algorithm::Sm4).unwrap();
    let build = || {
        emit::emit(
            model,
            EmitOptions {
                envelope: Default::default(),
                key: Some(&key),
                mode: Mode::Cbc,
                authenticate_only: false,
                reproducible: true,
                extra_sections: Vec::new(),
            },
        )
        .unwrap()
    };
    let (a, b) = (build(), build());
    assert!(a == b, "two reproducible builds differ");
    // Different fields never share an IV.
    let c = Container::parse(&a).unwrap();
    let ivs: HashSet<[u8; 16]> = c.fields.iter().flatten().map(|f| f.iv).collect();
    assert_eq!(ivs.len(), c.fields.iter().flatten().count());
}

/// The README's example model, compiled with `key` (small enough to flip every byte).
fn tiny_compiled(key: &Key, mode: Mode) -> Vec<u8> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/models/tiny_cnn.onnx");
    let model = lower_file(&path, &LowerOptions::default()).unwrap().model;
    compile(&model, Some(key), mode)
}

#[test]
fn every_metadata_byte_and_sampled_weight_bytes_are_refused_by_reader_and_runtime() {
    use nnc_runtime::{LoadOptions, PreparedModel, SimulatedNpu};
    let key = Key::generate(Algorithm::Aes256).unwrap();
    let bytes = tiny_compiled(&key, Mode::Cbc);
    let c = Container::parse(&bytes).unwrap();
    let metadata = c.header.metadata_length as usize;
    // Every byte of the header, section table and operation table (the whole metadata
    // region), then 16 bytes of every weight field: its first, its last, and 14 between.
    let mut positions: Vec<usize> = (0..metadata).collect();
    let mut fields = 0;
    for f in c.fields.iter().flatten() {
        fields += 1;
        let (start, len) = (f.offset as usize, f.length as usize);
        positions.extend((0..16).map(|k| start + k * (len - 1) / 15));
    }
    assert!(fields >= 4, "{fields} weight fields");
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(key.as_bytes());
    // The unaltered file loads, so each failure below is the flip's doing.
    PreparedModel::load_bytes(bytes.clone(), &npu, &LoadOptions::default()).unwrap();
    for &pos in &positions {
        let mut b = bytes.clone();
        b[pos] ^= 1 << (pos % 8);
        match Container::open(&b, Some(key.as_bytes())) {
            Ok(_) => panic!("a flipped bit at byte {pos} went unnoticed by the reader"),
            Err(ContainerError::BadMagic { .. }) if pos < 8 => {}
            Err(e) => assert!(e.is_integrity(), "byte {pos}: {e}"),
        }
        assert!(
            PreparedModel::load_bytes(b, &npu, &LoadOptions::default()).is_err(),
            "a flipped bit at byte {pos} went unnoticed by the runtime"
        );
    }
    assert!(positions.len() > metadata, "{} positions", positions.len());
}
