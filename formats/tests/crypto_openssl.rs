//! Cross-checks `nnc_formats::crypto` against the `openssl enc` command line: same bytes
//! out for every (algorithm x mode), and openssl's ciphertext decrypts with ours.
//!
//! Requires the `openssl` binary (1.1.1 or newer, with SM4). A missing binary fails the
//! test on purpose: CI installs it, and a silent skip would hide a broken cross-check.

use std::io::Write;
use std::process::{Command, Stdio};

use nnc_formats::crypto::{Algorithm, Key, Mode, decrypt, encrypt, random_bytes};
use rand::Rng;

const LENGTHS: [usize; 6] = [0, 1, 15, 16, 17, 1000];

fn openssl_cipher(algorithm: Algorithm, mode: Mode) -> String {
    let alg = match algorithm {
        Algorithm::Sm4 => "sm4",
        Algorithm::Aes128 => "aes-128",
        Algorithm::Aes192 => "aes-192",
        Algorithm::Aes256 => "aes-256",
    };
    format!("-{alg}-{}", mode.name())
}

/// Runs `openssl enc -e` on `input`; panics with a readable message on any failure.
fn openssl_encrypt(
    algorithm: Algorithm,
    mode: Mode,
    key: &Key,
    iv: &[u8; 16],
    input: &[u8],
) -> Vec<u8> {
    let cipher = openssl_cipher(algorithm, mode);
    let mut cmd = Command::new("openssl");
    cmd.args(["enc", "-e", &cipher, "-nosalt", "-K"])
        .arg(key.to_hex().as_str());
    if mode.needs_iv() {
        cmd.arg("-iv").arg(hex::encode(iv));
    }
    let mut child = match cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => panic!(
            "the `openssl` command is not installed, and this test compares against it: \
             install OpenSSL (e.g. `apt-get install openssl`, `brew install openssl`)"
        ),
        Err(err) => panic!("cannot run openssl: {err}"),
    };
    // Write from another thread so a large input cannot deadlock against full pipes.
    let mut stdin = child.stdin.take().expect("stdin was piped");
    let data = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let output = child.wait_with_output().expect("openssl ran");
    writer
        .join()
        .expect("writer thread")
        .expect("wrote plaintext to openssl");
    assert!(
        output.status.success(),
        "openssl enc {cipher} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

#[test]
fn crypto_matches_openssl_enc_for_every_algorithm_and_mode() {
    let mut rng = rand::rng();
    for algorithm in Algorithm::ALL {
        for mode in Mode::ALL {
            for len in LENGTHS {
                let key_bytes: [u8; 32] = random_bytes();
                let key = Key::new(algorithm, &key_bytes[..algorithm.key_len()]).unwrap();
                let iv: [u8; 16] = random_bytes();
                let mut plaintext = vec![0; len];
                rng.fill_bytes(&mut plaintext);
                // Test keys only; printed so a failure can be replayed by hand.
                let case = format!(
                    "{} len={len} key={} iv={}",
                    openssl_cipher(algorithm, mode),
                    key.to_hex().as_str(),
                    hex::encode(iv)
                );

                let theirs = openssl_encrypt(algorithm, mode, &key, &iv, &plaintext);
                let ours = encrypt(&key, mode, &iv, &plaintext).unwrap();
                assert_eq!(hex::encode(&ours), hex::encode(&theirs), "{case}");
                let back = decrypt(&key, mode, &iv, &theirs).unwrap();
                assert_eq!(back, plaintext, "{case}: decrypting openssl's output");
            }
        }
    }
}
