//! `nnc sbom` (issue 34): the CycloneDX 1.6 ML-BOM of a compiled model validates against
//! the official schema (cyclonedx-python-lib's bundled copy, run by
//! scripts/validate_sbom.py from the virtual environment scripts/setup makes), names the
//! source model from the signed provenance, and the validator refuses a broken one.

mod interop;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(cmd: &mut Command) -> Output {
    let o = cmd.output().expect("runs");
    assert!(o.status.success(), "{cmd:?}: {}", stderr(&o));
    o
}

fn validate(python: &Path, bom: &Path) -> Output {
    Command::new(python)
        .arg(root().join("scripts/validate_sbom.py"))
        .arg(bom)
        .output()
        .expect("the validator runs")
}

#[test]
fn the_bom_of_a_signed_model_is_valid_cyclonedx_1_6() {
    let Some(python) = interop::tool("python") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key = d.join("k");
    let signer = d.join("signer");
    ok(nnc().args(["keygen", "--algorithm", "sm4", "-o"]).arg(&key));
    ok(nnc()
        .args(["keygen", "--algorithm", "ed25519", "-o"])
        .arg(&signer));
    let source = root().join("testdata/models/tiny_cnn.onnx");
    for signed in [true, false] {
        let model = d.join("tiny.nnc");
        let mut compile = nnc();
        compile.arg("compile").arg(&source).arg("-o").arg(&model);
        compile.args(["--encrypt", "sm4", "--key-file"]).arg(&key);
        if signed {
            compile.arg("--sign").arg(&signer);
        }
        let _ = std::fs::remove_file(&model);
        ok(&mut compile);
        let bom = d.join("bom.json");
        let _ = std::fs::remove_file(&bom);
        ok(nnc().arg("sbom").arg(&model).arg("-o").arg(&bom));
        let o = validate(&python, &bom);
        assert!(o.status.success(), "signed={signed}: {}", stderr(&o));
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&bom).unwrap()).unwrap();
        let component = &doc["metadata"]["component"];
        assert_eq!(component["type"], "machine-learning-model");
        let digest = hex::encode(nnc_formats::crypto::sha256(&[
            &std::fs::read(&model).unwrap()
        ]));
        assert_eq!(component["hashes"][0]["content"], digest.as_str());
        let ancestors = &component["pedigree"]["ancestors"];
        if signed {
            let source_digest =
                hex::encode(nnc_formats::crypto::sha256(&[
                    &std::fs::read(&source).unwrap()
                ]));
            assert_eq!(ancestors[0]["hashes"][0]["content"], source_digest.as_str());
        } else {
            assert!(ancestors.is_null());
        }
        // The validator can fail: a wrong hash algorithm name and an extra field.
        let mut broken = doc.clone();
        broken["metadata"]["component"]["hashes"][0]["alg"] = "sha256".into();
        broken["metadata"]["component"]["modelCard"]["modelParameters"]["shape"] = "x".into();
        let bad = d.join("bad.json");
        std::fs::write(&bad, serde_json::to_vec(&broken).unwrap()).unwrap();
        let o = validate(&python, &bad);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    }
}
