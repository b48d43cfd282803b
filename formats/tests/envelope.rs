//! Format 1.3 (issue 34): a data key wrapped per recipient, rewrapping without touching
//! the weights, and signatures that a holder of the decryption key cannot forge.

use nnc_formats::container::{
    Container, ContainerError, Envelope, RecipientChanges, RecipientKind, WriteOptions,
    copy_metadata, reseal_metadata, rewrap, verify_signature, write,
};
use nnc_formats::crypto::{Algorithm, Key, KeyAlgorithm, Mode, PrivateKey, PublicKey};
use nnc_formats::test_support::control_flow::if_model;

fn device() -> (PrivateKey, Vec<u8>) {
    let sk = PrivateKey::generate(KeyAlgorithm::X25519).unwrap();
    let der = sk.to_pkcs8_der().unwrap().to_vec();
    (sk, der)
}

fn options<'a>(
    key: Option<&'a Key>,
    mode: Mode,
    recipients: &'a [PublicKey],
    signer: Option<&'a PrivateKey>,
) -> WriteOptions<'a> {
    WriteOptions {
        key,
        mode,
        authenticate_only: false,
        reproducible: false,
        producer: "nnc test".into(),
        arena: None,
        extra_sections: Vec::new(),
        envelope: Envelope {
            recipients,
            cipher: Some(Algorithm::Aes256),
            signer: signer.map(|s| (s, br#"{"source":"test"}"#.to_vec())),
        },
    }
}

/// Every weight field's stored bytes, by offset.
fn fields(bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let c = Container::parse(bytes).unwrap();
    c.fields
        .iter()
        .flatten()
        .map(|f| {
            (
                f.offset,
                bytes[f.offset as usize..(f.offset + f.length) as usize].to_vec(),
            )
        })
        .collect()
}

/// Applies a rewrap plan to a file in memory.
fn apply(bytes: &[u8], key: &[u8], changes: &RecipientChanges) -> Vec<u8> {
    let plan = rewrap(&copy_metadata(bytes).unwrap(), key, changes).unwrap();
    let mut out = bytes[..plan.trailer_offset as usize].to_vec();
    out[..256].copy_from_slice(&plan.header);
    out.extend_from_slice(&plan.trailer);
    assert_eq!(out.len() as u64, plan.file_len());
    out
}

fn opens(bytes: &[u8], key: &[u8]) -> Result<(), ContainerError> {
    Container::open(bytes, Some(key)).map(|_| ())
}

#[test]
fn two_devices_open_a_file_and_nobody_else() {
    let m = if_model();
    let (a, a_der) = device();
    let (b, b_der) = device();
    let (_, c_der) = device();
    for mode in [Mode::Ctr, Mode::Gcm, Mode::Cbc] {
        let recipients = [a.public_key(), b.public_key()];
        let bytes = write(&m, &options(None, mode, &recipients, None)).unwrap();
        let c = Container::parse(&bytes).unwrap();
        assert_eq!((c.header.minor, c.is_encrypted()), (3, true));
        let block = c.key_block().unwrap().unwrap();
        assert!(
            block
                .recipients
                .iter()
                .all(|r| r.kind == RecipientKind::X25519)
        );
        opens(&bytes, &a_der).unwrap();
        opens(&bytes, &b_der).unwrap();
        let err = opens(&bytes, &c_der).unwrap_err();
        assert!(
            matches!(err, ContainerError::NotARecipient { .. }),
            "{mode:?}: {err}"
        );
        assert!(err.is_integrity());
        // A public key opens nothing (its DER is no private key).
        let public = a.public_key().to_spki_der().unwrap();
        assert!(opens(&bytes, &public).is_err());
        // Neither does a symmetric key.
        let master = Key::generate(Algorithm::Aes256).unwrap();
        assert!(opens(&bytes, master.as_bytes()).is_err());
    }
}

#[test]
fn sm2_and_x25519_devices_side_by_side() {
    let m = if_model();
    let sm2 = PrivateKey::generate(KeyAlgorithm::Sm2).unwrap();
    let (x, x_der) = device();
    let recipients = [sm2.public_key(), x.public_key()];
    let mut o = options(None, Mode::Cbc, &recipients, Some(&sm2));
    o.envelope.cipher = Some(Algorithm::Sm4);
    let bytes = write(&m, &o).unwrap();
    let c = Container::parse(&bytes).unwrap();
    let kinds: Vec<RecipientKind> = c
        .key_block()
        .unwrap()
        .unwrap()
        .recipients
        .iter()
        .map(|r| r.kind)
        .collect();
    assert_eq!(kinds, [RecipientKind::Sm2, RecipientKind::X25519]);
    opens(&bytes, &sm2.to_pkcs8_der().unwrap()).unwrap();
    opens(&bytes, &x_der).unwrap();
    let other = PrivateKey::generate(KeyAlgorithm::Sm2).unwrap();
    assert!(matches!(
        opens(&bytes, &other.to_pkcs8_der().unwrap()).unwrap_err(),
        ContainerError::NotARecipient { .. }
    ));
    // The SM2 signature (with SM3) holds, and names the SM2 key.
    let block = c.verify_signature(&[sm2.public_key()]).unwrap();
    assert_eq!(block.signer.algorithm(), KeyAlgorithm::Sm2);
    // A signing-only key opens nothing.
    let ed = PrivateKey::generate(KeyAlgorithm::Ed25519).unwrap();
    assert!(opens(&bytes, &ed.to_pkcs8_der().unwrap()).is_err());
}

#[test]
fn master_key_and_devices_together() {
    let m = if_model();
    let master = Key::generate(Algorithm::Sm4).unwrap();
    let (a, a_der) = device();
    let recipients = [a.public_key()];
    let bytes = write(&m, &options(Some(&master), Mode::Ofb, &recipients, None)).unwrap();
    opens(&bytes, master.as_bytes()).unwrap();
    opens(&bytes, &a_der).unwrap();
    // The device key unwraps the same data key: both decrypt the same plaintext.
    let (c1, k1) = Container::open(&bytes, Some(master.as_bytes())).unwrap();
    let (_, k2) = Container::open(&bytes, Some(&a_der)).unwrap();
    let index = c1.fields.iter().position(Option::is_some).unwrap();
    assert_eq!(
        c1.decrypt_field(k1.as_ref(), index).unwrap(),
        c1.decrypt_field(k2.as_ref(), index).unwrap()
    );
}

#[test]
fn removing_a_recipient_keeps_every_weight_byte() {
    let m = if_model();
    let (a, a_der) = device();
    let (b, b_der) = device();
    let recipients = [a.public_key(), b.public_key()];
    let bytes = write(&m, &options(None, Mode::Ctr, &recipients, None)).unwrap();
    let b_id = b.public_key().key_id();
    let out = apply(
        &bytes,
        &a_der,
        &RecipientChanges {
            remove: &[b_id],
            ..Default::default()
        },
    );
    assert_eq!(fields(&bytes), fields(&out));
    opens(&out, &a_der).unwrap();
    assert!(matches!(
        opens(&out, &b_der).unwrap_err(),
        ContainerError::NotARecipient { .. }
    ));
    // Adding it back (by someone who can open the file) works again.
    let back = apply(
        &out,
        &a_der,
        &RecipientChanges {
            add: &[b.public_key()],
            ..Default::default()
        },
    );
    opens(&back, &b_der).unwrap();
    // Removing the last recipient is refused.
    let a_id = a.public_key().key_id();
    let err = rewrap(
        &copy_metadata(&out).unwrap(),
        &a_der,
        &RecipientChanges {
            remove: &[a_id],
            ..Default::default()
        },
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("no recipient"), "{err}");
}

#[test]
fn rotating_the_master_key_refuses_the_old_one() {
    let m = if_model();
    let old = Key::generate(Algorithm::Aes128).unwrap();
    let new = Key::generate(Algorithm::Aes128).unwrap();
    let bytes = write(&m, &options(Some(&old), Mode::Cbc, &[], None)).unwrap();
    let out = apply(
        &bytes,
        old.as_bytes(),
        &RecipientChanges {
            new_master: Some(new.as_bytes()),
            ..Default::default()
        },
    );
    assert_eq!(fields(&bytes), fields(&out));
    opens(&out, new.as_bytes()).unwrap();
    let err = opens(&out, old.as_bytes()).unwrap_err();
    assert!(err.is_integrity(), "{err}");
    // A wrong key cannot rewrap.
    assert!(
        rewrap(
            &copy_metadata(&out).unwrap(),
            old.as_bytes(),
            &RecipientChanges::default()
        )
        .is_err()
    );
}

#[test]
fn a_tampered_key_block_is_an_integrity_error() {
    let m = if_model();
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let bytes = write(&m, &options(Some(&key), Mode::Ctr, &[], None)).unwrap();
    let c = Container::parse(&bytes).unwrap();
    let t = c.header.trailer;
    for at in t.offset..t.offset + u64::from(t.key_block_len) {
        let mut bad = bytes.clone();
        bad[at as usize] ^= 0x01;
        let err = opens(&bad, key.as_bytes()).unwrap_err();
        assert!(err.is_integrity(), "byte {at}: {err}");
    }
}

#[test]
fn signatures_survive_rewrap_and_stop_forgers() {
    let m = if_model();
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let (device_key, device_der) = device();
    let recipients = [device_key.public_key()];
    for scheme in [KeyAlgorithm::Ed25519, KeyAlgorithm::EcdsaP256] {
        for mode in [Mode::Ctr, Mode::Gcm] {
            let signer = PrivateKey::generate(scheme).unwrap();
            let trusted = [signer.public_key()];
            let bytes = write(&m, &options(Some(&key), mode, &recipients, Some(&signer))).unwrap();
            let c = Container::parse(&bytes).unwrap();
            let block = c.verify_signature(&trusted).unwrap();
            assert_eq!(block.statement, br#"{"source":"test"}"#);
            // Someone else's key is not trusted.
            let stranger = [PrivateKey::generate(scheme).unwrap().public_key()];
            let err = c.verify_signature(&stranger).unwrap_err();
            assert!(err.to_string().contains("not among the trusted"), "{err}");

            // The device holder changes a byte of the operator info and re-authenticates
            // the file with the data key it can unwrap: it opens, but the signature fails.
            let mut forged = bytes.clone();
            let info = c.sections[0].offset as usize + 40;
            forged[info] ^= 0x01;
            reseal_metadata(&mut forged, Some(&device_der)).unwrap();
            // Checked before parsing, as `nnc run --trust` does: whatever the byte did to
            // the graph, the signature names it.
            let meta = copy_metadata(&forged).unwrap();
            let err = verify_signature(&forged[..], &meta, &trusted).unwrap_err();
            assert!(
                matches!(err, ContainerError::Signature(_)),
                "{scheme} {mode:?}: {err}"
            );
            assert!(err.is_integrity());
            assert!(err.to_string().contains("changed after"), "{err}");
            // A changed weight byte (the field re-tagged too) fails the signature.
            let mut weights = bytes.clone();
            let field = c.fields.iter().flatten().next().unwrap();
            weights[field.offset as usize] ^= 0x80;
            nnc_formats::container::reseal(&mut weights, Some(&device_der)).unwrap();
            let err = Container::parse(&weights)
                .unwrap()
                .verify_signature(&trusted)
                .unwrap_err();
            assert!(matches!(err, ContainerError::Signature(_)), "{err}");

            // Rewrapping keeps the signature valid.
            let out = apply(
                &bytes,
                key.as_bytes(),
                &RecipientChanges {
                    remove: &[device_key.public_key().key_id()],
                    ..Default::default()
                },
            );
            Container::parse(&out)
                .unwrap()
                .verify_signature(&trusted)
                .unwrap();
        }
    }
}

#[test]
fn an_unsigned_file_fails_under_trust_and_unkeyed_files_can_be_signed() {
    let m = if_model();
    let signer = PrivateKey::generate(KeyAlgorithm::Ed25519).unwrap();
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let unsigned = write(&m, &options(Some(&key), Mode::Ctr, &[], None)).unwrap();
    let err = Container::parse(&unsigned)
        .unwrap()
        .verify_signature(&[signer.public_key()])
        .unwrap_err();
    assert!(err.to_string().contains("not signed"), "{err}");
    // A file without a key, signed: 1.3 with a signature and no key block.
    let mut o = options(None, Mode::Ctr, &[], Some(&signer));
    o.envelope.cipher = None;
    let bytes = write(&m, &o).unwrap();
    let (c, _) = Container::open(&bytes, None).unwrap();
    assert_eq!(c.header.minor, 3);
    assert!(c.key_block().unwrap().is_none());
    c.verify_signature(&[signer.public_key()]).unwrap();
}

#[test]
fn reproducible_files_need_a_master_key_only() {
    let m = if_model();
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let (a, _) = device();
    let recipients = [a.public_key()];
    let mut o = options(Some(&key), Mode::Ctr, &recipients, None);
    o.reproducible = true;
    let err = write(&m, &o).unwrap_err();
    assert!(err.to_string().contains("reproducible"), "{err}");
    let mut o = options(Some(&key), Mode::Ctr, &[], None);
    o.reproducible = true;
    assert_eq!(write(&m, &o).unwrap(), write(&m, &o).unwrap());
}

#[test]
fn trailer_lengths_are_checked_before_anything_is_read() {
    let m = if_model();
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let bytes = write(&m, &options(Some(&key), Mode::Ctr, &[], None)).unwrap();
    for (at, value) in [(144usize, u32::MAX), (144, 0), (148, 5)] {
        let mut bad = bytes.clone();
        bad[at..at + 4].copy_from_slice(&value.to_le_bytes());
        let err = opens(&bad, key.as_bytes()).unwrap_err();
        assert!(err.is_integrity(), "{at}={value}: {err}");
        assert!(Container::parse(&bad).is_err());
    }
}
