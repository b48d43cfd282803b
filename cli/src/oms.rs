//! Detached signatures in the OpenSSF Model Signing (OMS) form, for one file with a bare
//! ECDSA P-256 key: a Sigstore bundle (v0.3) whose DSSE envelope carries an in-toto
//! statement naming the file's SHA-256. The `model-signing` package (`model_signing
//! verify key --public_key signer.pub --signature model.nnc.sig model.nnc`) verifies what
//! [`sign`] writes, and [`verify`] verifies what it writes. No crate implements this
//! small profile of the bundle format without a Sigstore client's network stack, so the
//! JSON is built and checked here; the cryptography is p256's.
//!
//! For a single file, OMS's "files" serialization has one resource named `.` whose digest
//! is the file's SHA-256, and the statement's subject digest is the SHA-256 of that raw
//! digest. The signature is ECDSA P-256 / SHA-256, DER-encoded, over DSSE's
//! pre-authentication encoding of the payload.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use nnc_formats::crypto::{PrivateKey, PublicKey, sha256};
use serde_json::{Value, json};

use crate::exit::{Exit, err};

const MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
const PREDICATE_TYPE: &str = "https://model_signing/signature/v1.0";
/// The longest bundle read: a one-file bundle is about 1.5 KB.
pub const MAX_BUNDLE_BYTES: u64 = 1 << 20;

/// DSSE v1 pre-authentication encoding.
fn pae(payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {PAYLOAD_TYPE} {} ",
        PAYLOAD_TYPE.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The public key's hint: SHA-256 of its PEM (as OpenSSL writes it), in hex.
fn hint(key: &PublicKey) -> anyhow::Result<String> {
    Ok(hex::encode(sha256(&[key.to_pem()?.as_bytes()])))
}

/// A detached signature bundle for the file at `model` (whose SHA-256 is `digest`).
pub fn sign(model: &Path, digest: &[u8; 32], key: &PrivateKey) -> anyhow::Result<String> {
    let name = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let statement = json!({
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": hex::encode(sha256(&[digest]))}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "serialization": {
                "method": "files",
                "hash_type": "sha256",
                "allow_symlinks": false,
                "ignore_paths": [".git", ".gitattributes", ".github", ".gitignore"],
            },
            "resources": [{"name": ".", "algorithm": "sha256", "digest": hex::encode(digest)}],
        },
    });
    let payload = serde_json::to_vec(&statement)?;
    let signature = key.sign_ecdsa_der(&pae(&payload))?;
    let bundle = json!({
        "mediaType": MEDIA_TYPE,
        "verificationMaterial": {
            "publicKey": {"hint": hint(&key.public_key())?},
            "tlogEntries": [],
        },
        "dsseEnvelope": {
            "payload": BASE64.encode(&payload),
            "payloadType": PAYLOAD_TYPE,
            "signatures": [{"sig": BASE64.encode(&signature), "keyid": ""}],
        },
    });
    Ok(serde_json::to_string(&bundle)?)
}

fn malformed(message: impl Into<String>) -> anyhow::Error {
    err(
        Exit::Malformed,
        format!("the signature bundle {}", message.into()),
    )
}

fn refused(message: impl Into<String>) -> anyhow::Error {
    err(Exit::Integrity, format!("signature: {}", message.into()))
}

/// Verifies a detached bundle over the file whose SHA-256 is `digest` against `trusted`
/// keys, as `model_signing verify key` does. Returns the key that signed.
pub fn verify(
    bundle: &[u8],
    digest: &[u8; 32],
    trusted: &[PublicKey],
) -> anyhow::Result<PublicKey> {
    let bundle: Value =
        serde_json::from_slice(bundle).map_err(|e| malformed(format!("is not JSON: {e}")))?;
    let field = |v: &Value, name: &str| -> anyhow::Result<Value> {
        v.get(name)
            .cloned()
            .ok_or_else(|| malformed(format!("has no '{name}'")))
    };
    let text = |v: &Value, name: &str| -> anyhow::Result<String> {
        field(v, name)?
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| malformed(format!("'{name}' is not a string")))
    };
    if text(&bundle, "mediaType")? != MEDIA_TYPE {
        return Err(malformed(format!("is not a {MEDIA_TYPE} bundle")));
    }
    let envelope = field(&bundle, "dsseEnvelope")?;
    if text(&envelope, "payloadType")? != PAYLOAD_TYPE {
        return Err(malformed("does not carry an in-toto statement"));
    }
    let payload = BASE64
        .decode(text(&envelope, "payload")?)
        .map_err(|_| malformed("payload is not base64"))?;
    let signature = field(&envelope, "signatures")?
        .get(0)
        .and_then(|s| s.get("sig"))
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("has no signature"))
        .and_then(|s| {
            BASE64
                .decode(s)
                .map_err(|_| malformed("signature is not base64"))
        })?;
    let hint_given = bundle
        .pointer("/verificationMaterial/publicKey/hint")
        .and_then(Value::as_str)
        .unwrap_or("");
    let message = pae(&payload);
    let mut signer = None;
    for key in trusted {
        if !hint_given.is_empty() && hint(key)? != hint_given {
            continue;
        }
        if key.verify_ecdsa_der(&message, &signature) {
            signer = Some(key.clone());
            break;
        }
    }
    let Some(signer) = signer else {
        return Err(refused(
            "the detached signature is not by a trusted key (or does not match its statement)",
        ));
    };
    // The statement must name exactly this file's digest.
    let statement: Value =
        serde_json::from_slice(&payload).map_err(|_| malformed("statement is not JSON"))?;
    if statement.get("_type").and_then(Value::as_str) != Some(STATEMENT_TYPE)
        || statement.get("predicateType").and_then(Value::as_str) != Some(PREDICATE_TYPE)
    {
        return Err(malformed("statement is not an OpenSSF model signature"));
    }
    let resources = statement
        .pointer("/predicate/resources")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("statement lists no resources"))?;
    let [resource] = resources.as_slice() else {
        return Err(refused(format!(
            "the signature covers {} files, not one",
            resources.len()
        )));
    };
    let named_self = matches!(
        resource.get("name").and_then(Value::as_str),
        Some("." | "./")
    );
    let signed_digest = resource
        .get("digest")
        .and_then(Value::as_str)
        .and_then(|d| hex::decode(d).ok());
    if !named_self
        || resource.get("algorithm").and_then(Value::as_str) != Some("sha256")
        || signed_digest.as_deref() != Some(&digest[..])
    {
        return Err(refused(
            "the file's SHA-256 is not the one signed (the file changed after signing)",
        ));
    }
    let subject = statement
        .pointer("/subject/0/digest/sha256")
        .and_then(Value::as_str);
    if subject != Some(hex::encode(sha256(&[digest])).as_str()) {
        return Err(refused("the statement's subject digest does not match"));
    }
    Ok(signer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnc_formats::crypto::KeyAlgorithm;

    /// The worked example from the model-signing package (1.1.1): its RFC 6979
    /// signature over the example statement, which `model_signing verify key` accepted.
    #[test]
    fn verifies_the_packages_example_bundle() {
        let public = PublicKey::from_pem(
            "-----BEGIN PUBLIC KEY-----\n\
             MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEm9+VRld7LfVkICGMDV1V16n7mQLM\n\
             J1cE3uJOgbEj99pv1iYx0jPZtKNFxq4JvMBWxN82o0KhKM4OYiu3im8T/A==\n\
             -----END PUBLIC KEY-----\n",
        )
        .unwrap();
        assert_eq!(
            hint(&public).unwrap(),
            "dec5633b2fb1d8a1cdba3ed2eb3bcadf7bbfcad4fbd5552750bfabd3ee2b9ba1"
        );
        let file = b"hello model\n\x00\x01\x02";
        let digest = sha256(&[file]);
        let bundle = include_str!("../tests/data/oms-example.sig");
        assert!(verify(bundle.as_bytes(), &digest, std::slice::from_ref(&public)).is_ok());
        let other = sha256(&[b"hello model\n\x00\x01\x03"]);
        assert!(verify(bundle.as_bytes(), &other, &[public]).is_err());
    }

    #[test]
    fn round_trip_and_refusals() {
        let key = PrivateKey::generate(KeyAlgorithm::EcdsaP256).unwrap();
        let digest = [7u8; 32];
        let bundle = sign(Path::new("m.nnc"), &digest, &key).unwrap();
        let public = key.public_key();
        assert!(verify(bundle.as_bytes(), &digest, std::slice::from_ref(&public)).is_ok());
        assert!(verify(bundle.as_bytes(), &[8u8; 32], std::slice::from_ref(&public)).is_err());
        let stranger = PrivateKey::generate(KeyAlgorithm::EcdsaP256)
            .unwrap()
            .public_key();
        assert!(verify(bundle.as_bytes(), &digest, &[stranger]).is_err());
        let ed = PrivateKey::generate(KeyAlgorithm::Ed25519).unwrap();
        assert!(sign(Path::new("m.nnc"), &digest, &ed).is_err());
    }
}
