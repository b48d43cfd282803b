//! Artifacts a fleet can trust (issue 34), end to end through the `nnc` binary: device
//! recipients, rewrapping without touching the weights, key rotation, embedded
//! signatures a key holder cannot forge, provenance, and detached OpenSSF Model Signing
//! signatures checked by the `model-signing` package itself.

mod interop;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nnc_formats::container::{Container, reseal_metadata};

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn tiny_cnn() -> PathBuf {
    root().join("testdata/models/tiny_cnn.onnx")
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("nnc runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(cmd: &mut Command) -> Output {
    let o = run(cmd);
    assert!(o.status.success(), "{:?}: {}", cmd, stderr(&o));
    o
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// `nnc keygen --algorithm ALGORITHM -o DIR/NAME`; returns the private key's path.
fn keygen(dir: &Path, algorithm: &str, name: &str) -> PathBuf {
    let path = dir.join(name);
    ok(nnc()
        .args(["keygen", "--algorithm", algorithm, "-o"])
        .arg(&path));
    path
}

fn public(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".pub");
    PathBuf::from(p)
}

/// The weight section of a compiled file: (offset, bytes).
fn weight_section(path: &Path) -> (u64, Vec<u8>) {
    let bytes = std::fs::read(path).unwrap();
    let c = Container::parse(&bytes).unwrap();
    let w = c
        .sections
        .iter()
        .find(|s| s.kind == nnc_formats::container::SectionKind::Weights as u32)
        .unwrap();
    (
        w.offset,
        bytes[w.offset as usize..(w.offset + w.length) as usize].to_vec(),
    )
}

fn verify(model: &Path, key: &Path, trust: Option<&Path>) -> Output {
    let mut cmd = nnc();
    cmd.arg("verify").arg(model).arg("--key-file").arg(key);
    if let Some(t) = trust {
        cmd.arg("--trust").arg(t);
    }
    run(&mut cmd)
}

#[test]
fn two_devices_run_a_model_that_a_third_cannot_open() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = keygen(d, "x25519", "device-a");
    let b = keygen(d, "x25519", "device-b");
    let c = keygen(d, "x25519", "device-c");
    let model = d.join("m.nnc");
    // No symmetric key at all: only the two devices can open it.
    ok(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&model)
        .arg("--recipient")
        .arg(public(&a))
        .arg("--recipient")
        .arg(public(&b)));
    let input = root().join("testdata/models/tiny_cnn.input.npy");
    let reference = root().join("testdata/models/tiny_cnn.output.npy");
    for key in [&a, &b] {
        let out = d.join(format!(
            "out-{}",
            key.file_name().unwrap().to_string_lossy()
        ));
        let o = ok(nnc()
            .arg("run")
            .arg(&model)
            .arg("--key-file")
            .arg(key)
            .arg("--input")
            .arg(&input)
            .arg("--output-dir")
            .arg(&out));
        // Anyone with a device's public key can write it a model: without --trust the
        // run says so.
        assert!(stderr(&o).contains("no --trust"), "{}", stderr(&o));
        ok(nnc()
            .arg("compare")
            .arg(out.join("output_0.npy"))
            .arg(&reference));
    }
    // A third device: refused as not a recipient (exit 3), naming the recipients.
    let o = verify(&model, &c, None);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not encrypted for this key"),
        "{}",
        stderr(&o)
    );
    // A public key opens nothing: a usage error that says which file to give.
    let o = verify(&model, &public(&a), None);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("public key"), "{}", stderr(&o));

    // Removing device B: every weight byte stays where it was; B is refused after.
    let rewrapped = d.join("m2.nnc");
    ok(nnc()
        .arg("rewrap")
        .arg(&model)
        .arg("-o")
        .arg(&rewrapped)
        .arg("--key-file")
        .arg(&a)
        .arg("--remove-recipient")
        .arg(public(&b)));
    assert_eq!(weight_section(&model), weight_section(&rewrapped));
    assert!(verify(&rewrapped, &a, None).status.success());
    let o = verify(&rewrapped, &b, None);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
}

#[test]
fn rotating_the_key_keeps_the_weights_and_refuses_the_old_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let old = keygen(d, "aes128", "old.key");
    let new = keygen(d, "aes128", "new.key");
    let model = d.join("m.nnc");
    ok(nnc()
        .arg("compile")
        .arg(root().join("../shared/models/mobilenet_v2.onnx"))
        .arg("-o")
        .arg(&model)
        .arg("--key-file")
        .arg(&old));
    let o = ok(nnc()
        .arg("rewrap")
        .arg(&model)
        .arg("-o")
        .arg(&model)
        .arg("--key-file")
        .arg(&old)
        .arg("--new-key-file")
        .arg(&new)
        .arg("--json"));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    eprintln!("rewrap of MobileNetV2 took {} ms", summary["ms"]);
    assert!(verify(&model, &new, None).status.success());
    let o = verify(&model, &old, None);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    // Nothing to change is a usage error; a key of the wrong length for the cipher too.
    let o = run(nnc()
        .arg("rewrap")
        .arg(&model)
        .arg("-o")
        .arg(d.join("x.nnc"))
        .arg("--key-file")
        .arg(&new));
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let wide = keygen(d, "aes256", "wide.key");
    let o = run(nnc()
        .arg("rewrap")
        .arg(&model)
        .arg("-o")
        .arg(d.join("x.nnc"))
        .arg("--key-file")
        .arg(&new)
        .arg("--new-key-file")
        .arg(&wide));
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(!d.join("x.nnc").exists());
}

#[test]
fn a_decryption_key_holder_cannot_forge_a_signed_model() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let master = keygen(d, "sm4", "master.key");
    for scheme in ["ed25519", "ecdsa-p256", "sm2"] {
        let signer = keygen(d, scheme, &format!("{scheme}-signer"));
        let model = d.join(format!("{scheme}.nnc"));
        ok(nnc()
            .arg("compile")
            .arg(tiny_cnn())
            .arg("-o")
            .arg(&model)
            .args(["--encrypt", "sm4", "--mode", "gcm", "--key-file"])
            .arg(&master)
            .arg("--sign")
            .arg(&signer));
        let o = verify(&model, &master, Some(&public(&signer)));
        assert!(o.status.success(), "{}", stderr(&o));
        // The provenance statement names the source model by its digest.
        let o = ok(nnc()
            .arg("inspect")
            .arg(&model)
            .arg("--json")
            .arg("--trust")
            .arg(public(&signer)));
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let source = std::fs::read(tiny_cnn()).unwrap();
        assert_eq!(
            report["signature"]["statement"]["source"]["sha256"],
            hex::encode(nnc_formats::crypto::sha256(&[&source]))
        );
        assert_eq!(report["signature"]["verified"], true);

        // Whoever holds the key changes operator-info bytes and recomputes the HMAC.
        let bytes = std::fs::read(&model).unwrap();
        let c = Container::parse(&bytes).unwrap();
        let info = c.sections[0];
        let key = std::fs::read_to_string(&master).unwrap();
        let key = hex::decode(key.lines().last().unwrap().trim()).unwrap();
        let step = (info.length / 12).max(1);
        for at in (info.offset..info.offset + info.length).step_by(step as usize) {
            let mut forged = bytes.clone();
            forged[at as usize] ^= 0x04;
            reseal_metadata(&mut forged, Some(&key)).unwrap();
            let path = d.join("forged.nnc");
            std::fs::write(&path, &forged).unwrap();
            let o = verify(&path, &master, Some(&public(&signer)));
            assert_eq!(code(&o), 3, "byte {at}: {}", stderr(&o));
            assert!(stderr(&o).contains("signature"), "{}", stderr(&o));
            let o = run(nnc()
                .arg("run")
                .arg(&path)
                .arg("--key-file")
                .arg(&master)
                .arg("--trust")
                .arg(public(&signer))
                .arg("--input")
                .arg(root().join("testdata/models/tiny_cnn.input.npy"))
                .arg("--output-dir")
                .arg(d.join("out")));
            assert_eq!(code(&o), 3, "byte {at}: {}", stderr(&o));
        }
        // Under a signer nobody trusts, and unsigned, it is refused too.
        let stranger = keygen(d, scheme, &format!("{scheme}-stranger"));
        let o = verify(&model, &master, Some(&public(&stranger)));
        assert_eq!(code(&o), 3, "{}", stderr(&o));
    }
    let unsigned = d.join("unsigned.nnc");
    ok(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&unsigned)
        .args(["--encrypt", "sm4", "--key-file"])
        .arg(&master));
    let signer = public(&d.join("ed25519-signer"));
    let o = verify(&unsigned, &master, Some(&signer));
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(stderr(&o).contains("not signed"), "{}", stderr(&o));
}

#[test]
fn key_files_are_standard_pem() {
    let dir = tempfile::tempdir().unwrap();
    for algorithm in ["x25519", "ed25519", "ecdsa-p256", "sm2"] {
        let key = keygen(dir.path(), algorithm, algorithm);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{algorithm}");
        }
        // OpenSSL derives the same public key from the private one.
        let o = Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(&key)
            .output()
            .expect("openssl runs (scripts/setup installs it)");
        assert!(o.status.success(), "{algorithm}: {}", stderr(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            std::fs::read_to_string(public(&key)).unwrap(),
            "{algorithm}"
        );
    }
}

#[test]
fn detached_signatures_interoperate_with_the_model_signing_package() {
    let Some(tool) = interop::tool("model_signing") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let master = keygen(d, "aes128", "master.key");
    let signer = keygen(d, "ecdsa-p256", "signer");
    let model = d.join("model.nnc");
    ok(nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&model)
        .arg("--key-file")
        .arg(&master));
    let bundle = d.join("model.nnc.sig");
    ok(nnc()
        .arg("sign")
        .arg(&model)
        .arg("--key")
        .arg(&signer)
        .arg("-o")
        .arg(&bundle));
    let package_verify = |file: &Path, bundle: &Path| {
        Command::new(&tool)
            .args(["verify", "key", "--public_key"])
            .arg(public(&signer))
            .arg("--signature")
            .arg(bundle)
            .arg(file)
            .output()
            .unwrap()
    };
    let o = package_verify(&model, &bundle);
    assert!(
        o.status.success(),
        "model_signing refused nnc's signature: {}{}",
        String::from_utf8_lossy(&o.stdout),
        stderr(&o)
    );
    // One byte changed: the package refuses it, and so does nnc.
    let mut bytes = std::fs::read(&model).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    let altered = d.join("altered.nnc");
    std::fs::write(&altered, &bytes).unwrap();
    assert!(!package_verify(&altered, &bundle).status.success());
    let nnc_verify = |file: &Path, bundle: &Path| {
        run(nnc()
            .arg("verify")
            .arg(file)
            .arg("--signature")
            .arg(bundle)
            .arg("--trust")
            .arg(public(&signer)))
    };
    let o = nnc_verify(&altered, &bundle);
    assert_eq!(code(&o), 3, "{}", stderr(&o));

    // The other way: the package signs, nnc verifies.
    let theirs = d.join("theirs.sig");
    let o = Command::new(&tool)
        .args(["sign", "key", "--private_key"])
        .arg(&signer)
        .arg("--signature")
        .arg(&theirs)
        .arg(&model)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = nnc_verify(&model, &theirs);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = nnc_verify(&altered, &theirs);
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    // Another signer's key is not trusted.
    let stranger = keygen(d, "ecdsa-p256", "stranger");
    let o = run(nnc()
        .arg("verify")
        .arg(&model)
        .arg("--signature")
        .arg(&theirs)
        .arg("--trust")
        .arg(public(&stranger)));
    assert_eq!(code(&o), 3, "{}", stderr(&o));
}
