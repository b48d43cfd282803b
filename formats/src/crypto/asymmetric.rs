//! Public-key cryptography for artifacts a fleet can trust (docs/SECURITY.md):
//!
//! - device key pairs (X25519) that receive a file's data key, wrapped with HPKE
//!   (RFC 9180, base mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-128-GCM);
//! - signing key pairs (Ed25519; ECDSA P-256 with SHA-256) that say who built a file;
//! - SM2 key pairs (GB/T 32918) for the Chinese commercial suite beside SM4: signatures
//!   with SM3 (the standard's default distinguishing identifier), and data keys wrapped
//!   for a device with SM2 public-key encryption (C1C3C2);
//! - AES key wrap (RFC 3394) of a data key under a symmetric key-encryption key.
//!
//! Keys travel as PEM that other tools read: PKCS#8 `PRIVATE KEY` and
//! SubjectPublicKeyInfo `PUBLIC KEY` (RFC 8410 for the 25519 curves, RFC 5480 for P-256);
//! OpenSSL's SEC1 `EC PRIVATE KEY` is read as well. The schemes are the RustCrypto crates'
//! (hpke, aes-kw, ed25519-dalek, p256); this module only chooses them, names them and turns
//! their errors into [`CryptoError`]s that never carry key material.

use std::fmt;

use ed25519_dalek::Signer as _;
use hpke::{Deserializable as _, Kem as _, Serializable as _};
use p256::ecdsa::signature::Verifier as _;
use pkcs8::der::{Decode as _, asn1::OctetStringRef};
use pkcs8::{
    DecodePrivateKey as _, DecodePublicKey as _, EncodePrivateKey as _, EncodePublicKey as _,
    LineEnding, ObjectIdentifier, PrivateKeyInfoRef, SubjectPublicKeyInfoRef,
};
use zeroize::Zeroizing;

use super::{CryptoError, sha256, try_random_bytes};

type HpkeKem = hpke::kem::X25519HkdfSha256;
type HpkeKdf = hpke::kdf::HkdfSha256;
type HpkeAead = hpke::aead::AesGcm128;

/// RFC 8410's object identifier of X25519 keys.
const X25519_OID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.110");
/// RFC 8410's object identifier of Ed25519 keys.
const ED25519_OID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.101.112");
/// RFC 5480's `id-ecPublicKey` (the curve is in the parameters).
const EC_PUBLIC_KEY_OID: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");

/// What a key pair is for and which scheme it uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyAlgorithm {
    /// A device's key pair: receives data keys (HPKE).
    X25519,
    /// Signs artifacts (RFC 8032).
    Ed25519,
    /// Signs artifacts (FIPS 186-5 ECDSA over P-256 with SHA-256); the form the OpenSSF
    /// model-signing tools take for bare keys.
    EcdsaP256,
    /// SM2: signs (with SM3) and receives data keys (SM2 encryption).
    Sm2,
}

impl KeyAlgorithm {
    /// The name users type (`nnc keygen --algorithm`).
    pub fn name(self) -> &'static str {
        match self {
            KeyAlgorithm::X25519 => "x25519",
            KeyAlgorithm::Ed25519 => "ed25519",
            KeyAlgorithm::EcdsaP256 => "ecdsa-p256",
            KeyAlgorithm::Sm2 => "sm2",
        }
    }

    /// True for key pairs that sign.
    pub fn signs(self) -> bool {
        !matches!(self, KeyAlgorithm::X25519)
    }

    /// True for key pairs that receive data keys (a device's).
    pub fn receives(self) -> bool {
        matches!(self, KeyAlgorithm::X25519 | KeyAlgorithm::Sm2)
    }

    /// The code a `.nnc` file records for a signature scheme (docs/FORMAT.md).
    pub fn signature_code(self) -> Option<u16> {
        match self {
            KeyAlgorithm::X25519 => None,
            KeyAlgorithm::Ed25519 => Some(1),
            KeyAlgorithm::EcdsaP256 => Some(2),
            KeyAlgorithm::Sm2 => Some(3),
        }
    }

    pub fn from_signature_code(code: u16) -> Option<KeyAlgorithm> {
        match code {
            1 => Some(KeyAlgorithm::Ed25519),
            2 => Some(KeyAlgorithm::EcdsaP256),
            3 => Some(KeyAlgorithm::Sm2),
            _ => None,
        }
    }
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A private key of one of the [`KeyAlgorithm`]s. Zeroized on drop by the crates that
/// hold it; `Debug` names only the algorithm.
#[derive(Clone)]
pub enum PrivateKey {
    X25519(<HpkeKem as hpke::Kem>::PrivateKey),
    Ed25519(ed25519_dalek::SigningKey),
    EcdsaP256(p256::ecdsa::SigningKey),
    Sm2(sm2::SecretKey),
}

/// A public key of one of the [`KeyAlgorithm`]s.
#[derive(Clone, PartialEq, Eq)]
pub enum PublicKey {
    X25519([u8; 32]),
    Ed25519(ed25519_dalek::VerifyingKey),
    EcdsaP256(p256::ecdsa::VerifyingKey),
    Sm2(sm2::PublicKey),
}

/// SM2's default distinguishing identifier (GB/T 35276), used for every nnc signature.
const SM2_DISTID: &str = "1234567812345678";

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateKey({}, redacted)", self.algorithm())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PublicKey({}, {})",
            self.algorithm(),
            hex::encode(self.key_id())
        )
    }
}

fn key_error(message: impl Into<String>) -> CryptoError {
    CryptoError::KeyFormat(message.into())
}

impl PrivateKey {
    /// A new random key pair from the operating system's randomness.
    ///
    /// # Errors
    ///
    /// [`CryptoError::Rng`] when the operating system has no randomness to give.
    pub fn generate(algorithm: KeyAlgorithm) -> Result<PrivateKey, CryptoError> {
        let seed = Zeroizing::new(try_random_bytes::<32>()?);
        Ok(match algorithm {
            // RFC 9180's DeriveKeyPair from 32 random bytes, as the hpke crate's own
            // generator does.
            KeyAlgorithm::X25519 => PrivateKey::X25519(HpkeKem::derive_keypair(&seed[..]).0),
            KeyAlgorithm::Ed25519 => {
                PrivateKey::Ed25519(ed25519_dalek::SigningKey::from_bytes(&seed))
            }
            KeyAlgorithm::EcdsaP256 => {
                // A scalar of zero or beyond the group order (probability ~2^-32) is
                // rejected; draw again.
                let mut bytes = seed;
                loop {
                    if let Ok(key) = p256::ecdsa::SigningKey::from_slice(&bytes[..]) {
                        break PrivateKey::EcdsaP256(key);
                    }
                    bytes = Zeroizing::new(try_random_bytes::<32>()?);
                }
            }
            KeyAlgorithm::Sm2 => {
                let mut bytes = seed;
                loop {
                    if let Ok(key) = sm2::SecretKey::from_slice(&bytes[..]) {
                        break PrivateKey::Sm2(key);
                    }
                    bytes = Zeroizing::new(try_random_bytes::<32>()?);
                }
            }
        })
    }

    pub fn algorithm(&self) -> KeyAlgorithm {
        match self {
            PrivateKey::X25519(_) => KeyAlgorithm::X25519,
            PrivateKey::Ed25519(_) => KeyAlgorithm::Ed25519,
            PrivateKey::EcdsaP256(_) => KeyAlgorithm::EcdsaP256,
            PrivateKey::Sm2(_) => KeyAlgorithm::Sm2,
        }
    }

    pub fn public_key(&self) -> PublicKey {
        match self {
            PrivateKey::X25519(sk) => {
                let pk = HpkeKem::sk_to_pk(sk).to_bytes();
                let mut raw = [0u8; 32];
                raw.copy_from_slice(&pk);
                PublicKey::X25519(raw)
            }
            PrivateKey::Ed25519(sk) => PublicKey::Ed25519(sk.verifying_key()),
            PrivateKey::EcdsaP256(sk) => PublicKey::EcdsaP256(*sk.verifying_key()),
            PrivateKey::Sm2(sk) => PublicKey::Sm2(sk.public_key()),
        }
    }

    /// Reads a PEM private key: PKCS#8 (`PRIVATE KEY`) of any [`KeyAlgorithm`], or SEC1
    /// (`EC PRIVATE KEY`) of a P-256 key.
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyFormat`] naming what is wrong (never echoing the text).
    pub fn from_pem(text: &str) -> Result<PrivateKey, CryptoError> {
        let text = text.trim_start();
        if text.starts_with("-----BEGIN EC PRIVATE KEY-----") {
            let key = p256::SecretKey::from_sec1_pem(text)
                .map_err(|_| key_error("an EC PRIVATE KEY that is not a valid P-256 key (SEC1)"))?;
            return Ok(PrivateKey::EcdsaP256(key.into()));
        }
        let (label, der) = pkcs8::SecretDocument::from_pem(text)
            .map_err(|_| key_error("not a PEM private key (PKCS#8 \"PRIVATE KEY\")"))?;
        if label != "PRIVATE KEY" {
            return Err(key_error(format!(
                "a PEM \"{label}\", not a \"PRIVATE KEY\""
            )));
        }
        PrivateKey::from_pkcs8_der(der.as_bytes())
    }

    /// Reads a PKCS#8 DER private key.
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyFormat`] for malformed DER or a key of another algorithm.
    pub fn from_pkcs8_der(der: &[u8]) -> Result<PrivateKey, CryptoError> {
        let info = PrivateKeyInfoRef::from_der(der)
            .map_err(|_| key_error("malformed PKCS#8 private key"))?;
        match info.algorithm.oid {
            X25519_OID => {
                // RFC 8410: the key is an OCTET STRING inside the PKCS#8 OCTET STRING.
                // (tag 0x04, length 0x20, then the 32 key bytes).
                let [0x04, 0x20, raw @ ..] = info.private_key.as_bytes() else {
                    return Err(key_error("malformed X25519 private key"));
                };
                let sk = <HpkeKem as hpke::Kem>::PrivateKey::from_bytes(raw)
                    .map_err(|_| key_error("an X25519 private key must be 32 bytes"))?;
                Ok(PrivateKey::X25519(sk))
            }
            ED25519_OID => ed25519_dalek::SigningKey::from_pkcs8_der(der)
                .map(PrivateKey::Ed25519)
                .map_err(|_| key_error("malformed Ed25519 private key")),
            // The curve is in the parameters: P-256 or SM2.
            EC_PUBLIC_KEY_OID => p256::SecretKey::from_pkcs8_der(der)
                .map(|k| PrivateKey::EcdsaP256(k.into()))
                .or_else(|_| sm2::SecretKey::from_pkcs8_der(der).map(PrivateKey::Sm2))
                .map_err(|_| key_error("an EC private key on a curve other than P-256 and SM2")),
            other => Err(key_error(format!(
                "a private key of algorithm {other}, which nnc does not use \
                 (x25519, ed25519 or ecdsa-p256)"
            ))),
        }
    }

    /// The key as PKCS#8 DER (wiped on drop).
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyFormat`] if the encoder fails (it does not for these keys).
    pub fn to_pkcs8_der(&self) -> Result<Zeroizing<Vec<u8>>, CryptoError> {
        let encoding_failed = |_| key_error("cannot encode the private key as PKCS#8");
        // RFC 8410's form for the 25519 curves: version 1 (no public key), the key as an
        // OCTET STRING inside the PKCS#8 one. (ed25519-dalek writes version 2 with the
        // public key, which OpenSSL 3.0 cannot read.)
        let curve25519 = |oid: ObjectIdentifier, raw: &[u8]| {
            let mut inner = Zeroizing::new(vec![0x04, 0x20]);
            inner.extend_from_slice(raw);
            let info = PrivateKeyInfoRef::new(
                pkcs8::AlgorithmIdentifierRef {
                    oid,
                    parameters: None,
                },
                OctetStringRef::new(&inner).map_err(|_| key_error("cannot encode the key"))?,
            );
            pkcs8::SecretDocument::encode_msg(&info).map_err(|_| key_error("cannot encode the key"))
        };
        let doc = match self {
            PrivateKey::X25519(sk) => curve25519(X25519_OID, &Zeroizing::new(sk.to_bytes())[..])?,
            PrivateKey::Ed25519(sk) => curve25519(ED25519_OID, &Zeroizing::new(sk.to_bytes())[..])?,
            PrivateKey::EcdsaP256(sk) => sk.to_pkcs8_der().map_err(encoding_failed)?,
            PrivateKey::Sm2(sk) => sk.to_pkcs8_der().map_err(encoding_failed)?,
        };
        Ok(Zeroizing::new(doc.as_bytes().to_vec()))
    }

    /// The key as PKCS#8 PEM (wiped on drop).
    ///
    /// # Errors
    ///
    /// As [`PrivateKey::to_pkcs8_der`].
    pub fn to_pem(&self) -> Result<Zeroizing<String>, CryptoError> {
        let der = self.to_pkcs8_der()?;
        let doc = pkcs8::SecretDocument::try_from(der.as_slice())
            .map_err(|_| key_error("cannot encode the private key as PEM"))?;
        doc.to_pem("PRIVATE KEY", LineEnding::LF)
            .map_err(|_| key_error("cannot encode the private key as PEM"))
    }

    /// Signs `message` (Ed25519: the message itself; ECDSA: its SHA-256, deterministic
    /// nonces per RFC 6979). The signature is 64 bytes: Ed25519's, or ECDSA's `r || s`.
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyPurpose`] for a device (X25519) key.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, CryptoError> {
        match self {
            PrivateKey::X25519(_) => Err(CryptoError::KeyPurpose {
                algorithm: "x25519",
                purpose: "signing (it is a device key: use an ed25519 or ecdsa-p256 key)",
            }),
            PrivateKey::Ed25519(sk) => Ok(sk.sign(message).to_bytes().to_vec()),
            PrivateKey::EcdsaP256(sk) => {
                let signature: p256::ecdsa::Signature = sk.sign(message);
                Ok(signature.to_bytes().to_vec())
            }
            PrivateKey::Sm2(sk) => {
                let signer = sm2::dsa::SigningKey::new(SM2_DISTID, sk)
                    .map_err(|_| key_error("not a usable SM2 signing key"))?;
                let signature: sm2::dsa::Signature = signer
                    .try_sign(message)
                    .map_err(|_| key_error("SM2 signing failed"))?;
                Ok(signature.to_bytes().to_vec())
            }
        }
    }

    /// ECDSA P-256 signature of `message` in ASN.1 DER (the form DSSE envelopes carry).
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyPurpose`] for any other key.
    pub fn sign_ecdsa_der(&self, message: &[u8]) -> Result<Vec<u8>, CryptoError> {
        match self {
            PrivateKey::EcdsaP256(sk) => {
                let signature: p256::ecdsa::Signature = sk.sign(message);
                Ok(signature.to_der().as_bytes().to_vec())
            }
            other => Err(CryptoError::KeyPurpose {
                algorithm: other.algorithm().name(),
                purpose: "a detached OpenSSF model signature (it takes an ecdsa-p256 key)",
            }),
        }
    }

    /// Opens a data key that [`PublicKey::seal_data_key`] wrapped for this device key.
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyPurpose`] for a signing key; [`CryptoError::Unwrap`] when the
    /// wrapped key was not made for this key or was altered.
    pub fn open_data_key(
        &self,
        encapsulated: &[u8],
        wrapped: &[u8],
        info: &[u8],
        aad: &[u8],
    ) -> Result<Zeroizing<Vec<u8>>, CryptoError> {
        if let PrivateKey::Sm2(sk) = self {
            // SM2 encryption binds nothing else: the binding travels inside the plaintext.
            let opened = Zeroizing::new(
                sm2::pke::DecryptingKey::new_with_mode(
                    sk.to_nonzero_scalar(),
                    sm2::pke::Mode::C1C3C2,
                )
                .decrypt(wrapped)
                .map_err(|_| CryptoError::Unwrap)?,
            );
            let binding = sm2_binding(info, aad);
            let split = opened
                .len()
                .checked_sub(binding.len())
                .ok_or(CryptoError::Unwrap)?;
            if !encapsulated.is_empty() || !super::ct_eq(&opened[split..], &binding) {
                return Err(CryptoError::Unwrap);
            }
            return Ok(Zeroizing::new(opened[..split].to_vec()));
        }
        let PrivateKey::X25519(sk) = self else {
            return Err(CryptoError::KeyPurpose {
                algorithm: self.algorithm().name(),
                purpose: "decryption (it is a signing key: use the device's x25519 or sm2 key)",
            });
        };
        let enc = <HpkeKem as hpke::Kem>::EncappedKey::from_bytes(encapsulated)
            .map_err(|_| CryptoError::Unwrap)?;
        hpke::single_shot_open::<HpkeAead, HpkeKdf, HpkeKem>(
            &hpke::OpModeR::Base,
            sk,
            &enc,
            info,
            wrapped,
            aad,
        )
        .map(Zeroizing::new)
        .map_err(|_| CryptoError::Unwrap)
    }
}

impl PublicKey {
    pub fn algorithm(&self) -> KeyAlgorithm {
        match self {
            PublicKey::X25519(_) => KeyAlgorithm::X25519,
            PublicKey::Ed25519(_) => KeyAlgorithm::Ed25519,
            PublicKey::EcdsaP256(_) => KeyAlgorithm::EcdsaP256,
            PublicKey::Sm2(_) => KeyAlgorithm::Sm2,
        }
    }

    /// The key's bytes as a `.nnc` file stores them: 32 for the 25519 curves, 65 (SEC1
    /// uncompressed point) for P-256.
    pub fn raw(&self) -> Vec<u8> {
        match self {
            PublicKey::X25519(raw) => raw.to_vec(),
            PublicKey::Ed25519(vk) => vk.to_bytes().to_vec(),
            PublicKey::EcdsaP256(vk) => vk.to_sec1_point(false).as_bytes().to_vec(),
            PublicKey::Sm2(pk) => {
                use sm2::elliptic_curve::sec1::ToSec1Point as _;
                pk.to_sec1_point(false).as_bytes().to_vec()
            }
        }
    }

    /// The key from [`PublicKey::raw`] bytes.
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyFormat`] when the bytes are no valid key of `algorithm`.
    pub fn from_raw(algorithm: KeyAlgorithm, raw: &[u8]) -> Result<PublicKey, CryptoError> {
        let bad = || key_error(format!("not a valid {algorithm} public key"));
        match algorithm {
            KeyAlgorithm::X25519 => Ok(PublicKey::X25519(raw.try_into().map_err(|_| bad())?)),
            KeyAlgorithm::Ed25519 => {
                let bytes: [u8; 32] = raw.try_into().map_err(|_| bad())?;
                ed25519_dalek::VerifyingKey::from_bytes(&bytes)
                    .map(PublicKey::Ed25519)
                    .map_err(|_| bad())
            }
            KeyAlgorithm::EcdsaP256 => p256::ecdsa::VerifyingKey::from_sec1_bytes(raw)
                .map(PublicKey::EcdsaP256)
                .map_err(|_| bad()),
            KeyAlgorithm::Sm2 => sm2::PublicKey::from_sec1_bytes(raw)
                .map(PublicKey::Sm2)
                .map_err(|_| bad()),
        }
    }

    /// Reads a PEM SubjectPublicKeyInfo (`PUBLIC KEY`).
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyFormat`] naming what is wrong.
    pub fn from_pem(text: &str) -> Result<PublicKey, CryptoError> {
        let text = text.trim_start();
        if text.starts_with("-----BEGIN PRIVATE KEY-----")
            || text.starts_with("-----BEGIN EC PRIVATE KEY-----")
        {
            return Err(key_error(
                "a PRIVATE key where a public key belongs (give the .pub file)",
            ));
        }
        let (label, der) = pkcs8::Document::from_pem(text)
            .map_err(|_| key_error("not a PEM public key (\"PUBLIC KEY\")"))?;
        if label != "PUBLIC KEY" {
            return Err(key_error(format!(
                "a PEM \"{label}\", not a \"PUBLIC KEY\""
            )));
        }
        PublicKey::from_spki_der(der.as_bytes())
    }

    /// Reads a DER SubjectPublicKeyInfo.
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyFormat`] for malformed DER or a key of another algorithm.
    pub fn from_spki_der(der: &[u8]) -> Result<PublicKey, CryptoError> {
        let info = SubjectPublicKeyInfoRef::from_der(der)
            .map_err(|_| key_error("malformed public key (SubjectPublicKeyInfo)"))?;
        match info.algorithm.oid {
            X25519_OID => {
                let raw = info
                    .subject_public_key
                    .as_bytes()
                    .ok_or_else(|| key_error("malformed X25519 public key"))?;
                PublicKey::from_raw(KeyAlgorithm::X25519, raw)
            }
            ED25519_OID => ed25519_dalek::VerifyingKey::from_public_key_der(der)
                .map(PublicKey::Ed25519)
                .map_err(|_| key_error("malformed Ed25519 public key")),
            EC_PUBLIC_KEY_OID => p256::ecdsa::VerifyingKey::from_public_key_der(der)
                .map(PublicKey::EcdsaP256)
                .or_else(|_| sm2::PublicKey::from_public_key_der(der).map(PublicKey::Sm2))
                .map_err(|_| key_error("an EC public key on a curve other than P-256 and SM2")),
            other => Err(key_error(format!(
                "a public key of algorithm {other}, which nnc does not use \
                 (x25519, ed25519 or ecdsa-p256)"
            ))),
        }
    }

    /// The key as DER SubjectPublicKeyInfo.
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyFormat`] if the encoder fails (it does not for these keys).
    pub fn to_spki_der(&self) -> Result<Vec<u8>, CryptoError> {
        let failed = |_| key_error("cannot encode the public key");
        let doc = match self {
            PublicKey::X25519(raw) => {
                let info = SubjectPublicKeyInfoRef {
                    algorithm: pkcs8::AlgorithmIdentifierRef {
                        oid: X25519_OID,
                        parameters: None,
                    },
                    subject_public_key: pkcs8::der::asn1::BitStringRef::new(0, raw)
                        .map_err(|_| key_error("cannot encode the public key"))?,
                };
                pkcs8::Document::encode_msg(&info).map_err(|_| key_error("X25519 key"))?
            }
            PublicKey::Ed25519(vk) => vk.to_public_key_der().map_err(failed)?,
            PublicKey::EcdsaP256(vk) => vk.to_public_key_der().map_err(failed)?,
            PublicKey::Sm2(pk) => pk.to_public_key_der().map_err(failed)?,
        };
        Ok(doc.as_bytes().to_vec())
    }

    /// The key as PEM SubjectPublicKeyInfo.
    ///
    /// # Errors
    ///
    /// As [`PublicKey::to_spki_der`].
    pub fn to_pem(&self) -> Result<String, CryptoError> {
        let der = self.to_spki_der()?;
        let doc = pkcs8::Document::try_from(der.as_slice())
            .map_err(|_| key_error("cannot encode the public key as PEM"))?;
        doc.to_pem("PUBLIC KEY", LineEnding::LF)
            .map_err(|_| key_error("cannot encode the public key as PEM"))
    }

    /// SHA-256 of the DER SubjectPublicKeyInfo: the fingerprint `openssl pkey -pubin
    /// -outform DER | sha256sum` prints.
    pub fn fingerprint(&self) -> [u8; 32] {
        // Encoding these fixed-size keys cannot fail; fall back to the raw bytes anyway
        // rather than panic.
        let der = self.to_spki_der().unwrap_or_else(|_| self.raw());
        sha256(&[&der])
    }

    /// The first 16 bytes of the [`PublicKey::fingerprint`]: how a file names a recipient
    /// or a signer.
    pub fn key_id(&self) -> [u8; 16] {
        let mut id = [0u8; 16];
        id.copy_from_slice(&self.fingerprint()[..16]);
        id
    }

    /// Whether `signature` (as [`PrivateKey::sign`] makes it) signs `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        match self {
            PublicKey::X25519(_) => false,
            PublicKey::Ed25519(vk) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|s| vk.verify_strict(message, &s).is_ok()),
            PublicKey::EcdsaP256(vk) => p256::ecdsa::Signature::from_slice(signature)
                .is_ok_and(|s| vk.verify(message, &s).is_ok()),
            PublicKey::Sm2(pk) => {
                let Ok(vk) = sm2::dsa::VerifyingKey::new(SM2_DISTID, *pk) else {
                    return false;
                };
                sm2::dsa::Signature::from_slice(signature)
                    .is_ok_and(|s| vk.verify(message, &s).is_ok())
            }
        }
    }

    /// Whether a DER ECDSA `signature` signs `message` (SHA-256) under this P-256 key.
    pub fn verify_ecdsa_der(&self, message: &[u8], signature: &[u8]) -> bool {
        match self {
            PublicKey::EcdsaP256(vk) => p256::ecdsa::Signature::from_der(signature)
                .is_ok_and(|s| vk.verify(message, &s).is_ok()),
            _ => false,
        }
    }

    /// Wraps `data_key` for the holder of this device key: HPKE base mode, bound to
    /// `info` and `aad`. Returns the encapsulated key (32 bytes) and the sealed data key
    /// (its length plus a 16-byte tag).
    ///
    /// # Errors
    ///
    /// [`CryptoError::KeyPurpose`] for a signing key; [`CryptoError::KeyFormat`] when
    /// HPKE refuses the public key (the all-zero point, say).
    pub fn seal_data_key(
        &self,
        data_key: &[u8],
        info: &[u8],
        aad: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>), CryptoError> {
        if let PublicKey::Sm2(pk) = self {
            let mut plaintext = Zeroizing::new(data_key.to_vec());
            plaintext.extend_from_slice(&sm2_binding(info, aad));
            let sealed = sm2::pke::EncryptingKey::new_with_mode(*pk, sm2::pke::Mode::C1C3C2)
                .encrypt(&mut rand::rngs::SysRng, &plaintext)
                .map_err(|_| key_error("SM2 encryption failed"))?;
            return Ok((Vec::new(), sealed));
        }
        let PublicKey::X25519(raw) = self else {
            return Err(CryptoError::KeyPurpose {
                algorithm: self.algorithm().name(),
                purpose: "a recipient (it is a signing key: give the device's x25519 or sm2 .pub)",
            });
        };
        let pk = <HpkeKem as hpke::Kem>::PublicKey::from_bytes(raw)
            .map_err(|_| key_error("not a usable X25519 public key"))?;
        let (enc, sealed) = hpke::single_shot_seal::<HpkeAead, HpkeKdf, HpkeKem>(
            &hpke::OpModeS::Base,
            &pk,
            info,
            data_key,
            aad,
        )
        .map_err(|_| key_error("HPKE refused the X25519 public key"))?;
        Ok((enc.to_bytes().to_vec(), sealed))
    }
}

/// What an SM2-wrapped data key carries after the key, in place of HPKE's context:
/// 16 bytes of SM3's cousin SHA-256 over the same `info` and `aad` (the file's cipher and
/// salt), so a wrapped key cannot be moved to another file or cipher.
fn sm2_binding(info: &[u8], aad: &[u8]) -> [u8; 16] {
    let digest = sha256(&[
        b"nnc/v1.3 sm2 binding",
        &(info.len() as u32).to_le_bytes(),
        info,
        aad,
    ]);
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

/// AES-256 key wrap (RFC 3394) of `data_key` (a multiple of 8 bytes, at least 16) under
/// `kek` (32 bytes): 8 bytes longer than the key.
///
/// # Errors
///
/// [`CryptoError::KeyFormat`] for lengths the scheme does not take.
pub fn aes_key_wrap(kek: &[u8], data_key: &[u8]) -> Result<Vec<u8>, CryptoError> {
    use aes_kw::cipher::KeyInit as _;
    let kw = aes_kw::KwAes256::new_from_slice(kek)
        .map_err(|_| key_error("the key-wrapping key must be 32 bytes"))?;
    let mut out = vec![0u8; data_key.len() + 8];
    let len = kw
        .wrap_key(data_key, &mut out)
        .map_err(|_| key_error("a wrapped key must be a multiple of 8 bytes, at least 16"))?
        .len();
    out.truncate(len);
    Ok(out)
}

/// Undoes [`aes_key_wrap`], checking RFC 3394's integrity value.
///
/// # Errors
///
/// [`CryptoError::Unwrap`] when the key-encryption key is wrong or the bytes were altered.
pub fn aes_key_unwrap(kek: &[u8], wrapped: &[u8]) -> Result<Zeroizing<Vec<u8>>, CryptoError> {
    use aes_kw::cipher::KeyInit as _;
    let kw = aes_kw::KwAes256::new_from_slice(kek).map_err(|_| CryptoError::Unwrap)?;
    if wrapped.len() < 24 || !wrapped.len().is_multiple_of(8) {
        return Err(CryptoError::Unwrap);
    }
    let mut out = Zeroizing::new(vec![0u8; wrapped.len() - 8]);
    let len = kw
        .unwrap_key(wrapped, &mut out)
        .map_err(|_| CryptoError::Unwrap)?
        .len();
    out.truncate(len);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [KeyAlgorithm; 4] = [
        KeyAlgorithm::X25519,
        KeyAlgorithm::Ed25519,
        KeyAlgorithm::EcdsaP256,
        KeyAlgorithm::Sm2,
    ];

    #[test]
    fn pem_round_trips_for_every_algorithm() {
        for algorithm in ALL {
            let sk = PrivateKey::generate(algorithm).unwrap();
            let pem = sk.to_pem().unwrap();
            assert!(
                pem.starts_with("-----BEGIN PRIVATE KEY-----"),
                "{algorithm}"
            );
            let back = PrivateKey::from_pem(&pem).unwrap();
            assert_eq!(back.public_key(), sk.public_key(), "{algorithm}");
            let pub_pem = sk.public_key().to_pem().unwrap();
            let pk = PublicKey::from_pem(&pub_pem).unwrap();
            assert_eq!(pk, sk.public_key());
            assert_eq!(
                PublicKey::from_raw(algorithm, &pk.raw()).unwrap(),
                pk,
                "{algorithm}"
            );
            // A private key where a public one belongs is named as such.
            let err = PublicKey::from_pem(&pem).unwrap_err().to_string();
            assert!(err.contains("PRIVATE key"), "{err}");
        }
    }

    #[test]
    fn x25519_pkcs8_is_rfc8410() {
        // RFC 8410 section 10.3's example private key.
        let pem = "-----BEGIN PRIVATE KEY-----\n\
                   MC4CAQAwBQYDK2VuBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n\
                   -----END PRIVATE KEY-----\n";
        let sk = PrivateKey::from_pem(pem).unwrap();
        assert_eq!(sk.algorithm(), KeyAlgorithm::X25519);
        // The scalar is stored clamped (RFC 7748), so the re-encoded key may differ in
        // its low bits; it is the same key.
        let again = PrivateKey::from_pem(&sk.to_pem().unwrap()).unwrap();
        assert_eq!(again.public_key(), sk.public_key());
        assert_eq!(sk.to_pkcs8_der().unwrap().len(), 48);
    }

    #[test]
    fn signatures_verify_and_bind_the_message() {
        for algorithm in [
            KeyAlgorithm::Ed25519,
            KeyAlgorithm::EcdsaP256,
            KeyAlgorithm::Sm2,
        ] {
            let sk = PrivateKey::generate(algorithm).unwrap();
            let pk = sk.public_key();
            let sig = sk.sign(b"model digest").unwrap();
            assert_eq!(sig.len(), 64);
            assert!(pk.verify(b"model digest", &sig));
            assert!(!pk.verify(b"model digesT", &sig));
            let other = PrivateKey::generate(algorithm).unwrap().public_key();
            assert!(!other.verify(b"model digest", &sig));
        }
        let device = PrivateKey::generate(KeyAlgorithm::X25519).unwrap();
        assert!(matches!(
            device.sign(b"x"),
            Err(CryptoError::KeyPurpose { .. })
        ));
    }

    #[test]
    fn ecdsa_der_signatures() {
        let sk = PrivateKey::generate(KeyAlgorithm::EcdsaP256).unwrap();
        let sig = sk.sign_ecdsa_der(b"payload").unwrap();
        assert_eq!(sig[0], 0x30);
        assert!(sk.public_key().verify_ecdsa_der(b"payload", &sig));
        assert!(!sk.public_key().verify_ecdsa_der(b"payloaD", &sig));
    }

    #[test]
    fn sm2_wraps_for_one_device_only() {
        let device = PrivateKey::generate(KeyAlgorithm::Sm2).unwrap();
        let other = PrivateKey::generate(KeyAlgorithm::Sm2).unwrap();
        let data_key = [9u8; 32];
        let (enc, sealed) = device
            .public_key()
            .seal_data_key(&data_key, b"info", b"aad")
            .unwrap();
        assert!(enc.is_empty());
        let opened = device
            .open_data_key(&enc, &sealed, b"info", b"aad")
            .unwrap();
        assert_eq!(opened.as_slice(), &data_key);
        assert!(other.open_data_key(&enc, &sealed, b"info", b"aad").is_err());
        assert!(
            device
                .open_data_key(&enc, &sealed, b"infO", b"aad")
                .is_err()
        );
        assert!(
            device
                .open_data_key(&enc, &sealed, b"info", b"aaD")
                .is_err()
        );
        let mut altered = sealed.clone();
        altered[70] ^= 1;
        assert!(
            device
                .open_data_key(&enc, &altered, b"info", b"aad")
                .is_err()
        );
    }

    #[test]
    fn hpke_wraps_for_one_device_only() {
        let device = PrivateKey::generate(KeyAlgorithm::X25519).unwrap();
        let other = PrivateKey::generate(KeyAlgorithm::X25519).unwrap();
        let data_key = [7u8; 32];
        let (enc, sealed) = device
            .public_key()
            .seal_data_key(&data_key, b"info", b"aad")
            .unwrap();
        assert_eq!((enc.len(), sealed.len()), (32, 48));
        let opened = device
            .open_data_key(&enc, &sealed, b"info", b"aad")
            .unwrap();
        assert_eq!(opened.as_slice(), &data_key);
        for (key, info, aad) in [
            (&other, &b"info"[..], &b"aad"[..]),
            (&device, b"infO", b"aad"),
            (&device, b"info", b"aaD"),
        ] {
            assert_eq!(
                key.open_data_key(&enc, &sealed, info, aad).unwrap_err(),
                CryptoError::Unwrap
            );
        }
        let mut altered = sealed.clone();
        altered[3] ^= 1;
        assert!(
            device
                .open_data_key(&enc, &altered, b"info", b"aad")
                .is_err()
        );
    }

    #[test]
    fn aes_key_wrap_rfc3394_vector() {
        // RFC 3394 section 4.6: 256-bit key data with a 256-bit KEK.
        let kek = hex::decode("000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F")
            .unwrap();
        let data = hex::decode("00112233445566778899AABBCCDDEEFF000102030405060708090A0B0C0D0E0F")
            .unwrap();
        let wrapped = aes_key_wrap(&kek, &data).unwrap();
        assert_eq!(
            hex::encode_upper(&wrapped),
            "28C9F404C4B810F4CBCCB35CFB87F8263F5786E2D80ED326CBC7F0E71A99F43BFB988B9B7A02DD21"
        );
        assert_eq!(
            aes_key_unwrap(&kek, &wrapped).unwrap().as_slice(),
            &data[..]
        );
        let mut wrong = kek.clone();
        wrong[0] ^= 1;
        assert_eq!(
            aes_key_unwrap(&wrong, &wrapped).unwrap_err(),
            CryptoError::Unwrap
        );
    }
}
