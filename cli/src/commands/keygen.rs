//! `nnc keygen`: a new random key, written to a file only its owner can read: a symmetric
//! key (hex) for the weight ciphers, or a key pair (PEM) for a device (x25519) or a signer
//! (ed25519, ecdsa-p256), whose public half goes to `NAME.pub`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nnc_formats::crypto::{Algorithm, Key, KeyAlgorithm, PrivateKey};
use serde_json::json;
use zeroize::Zeroizing;

use crate::exit::{Exit, err};
use crate::output;

/// What `--algorithm` makes.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum KeygenAlgorithm {
    /// A symmetric SM4 key (hex).
    Sm4,
    /// A symmetric AES-128 key (hex).
    #[value(alias = "aes-128")]
    Aes128,
    /// A symmetric AES-192 key (hex).
    #[value(alias = "aes-192")]
    Aes192,
    /// A symmetric AES-256 key (hex).
    #[value(alias = "aes-256")]
    Aes256,
    /// A device's key pair: models compiled with `--recipient NAME.pub` open with it.
    X25519,
    /// A signer's key pair: `compile --sign NAME`, `run/verify --trust NAME.pub`.
    Ed25519,
    /// A signer's key pair (ECDSA P-256, SHA-256): also what `nnc sign` and the OpenSSF
    /// model-signing tools take.
    EcdsaP256,
    /// An SM2 key pair (GB/T 32918), for the Chinese commercial suite: signs with SM3
    /// (`--sign`) or, as a device's key, receives models (`--recipient`).
    Sm2,
}

#[derive(clap::Args)]
pub struct Args {
    /// The cipher the key is for, or the key pair to make.
    #[arg(long, value_enum)]
    pub algorithm: KeygenAlgorithm,
    /// Where to write the key (mode 0600); a key pair's public key goes to FILE.pub.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Replace existing files.
    #[arg(long)]
    pub force: bool,
    /// Print a JSON summary on stdout (never the key).
    #[arg(long)]
    pub json: bool,
}

fn refuse_existing(path: &Path, force: bool) -> anyhow::Result<()> {
    if std::fs::symlink_metadata(path).is_ok() && !force {
        return Err(err(
            Exit::CannotWrite,
            format!("{} exists; pass --force to replace it", path.display()),
        ));
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let pair = match args.algorithm {
        KeygenAlgorithm::Sm4 => Err(Algorithm::Sm4),
        KeygenAlgorithm::Aes128 => Err(Algorithm::Aes128),
        KeygenAlgorithm::Aes192 => Err(Algorithm::Aes192),
        KeygenAlgorithm::Aes256 => Err(Algorithm::Aes256),
        KeygenAlgorithm::X25519 => Ok(KeyAlgorithm::X25519),
        KeygenAlgorithm::Ed25519 => Ok(KeyAlgorithm::Ed25519),
        KeygenAlgorithm::EcdsaP256 => Ok(KeyAlgorithm::EcdsaP256),
        KeygenAlgorithm::Sm2 => Ok(KeyAlgorithm::Sm2),
    };
    match pair {
        Err(cipher) => symmetric(&args, cipher),
        Ok(algorithm) => key_pair(&args, algorithm),
    }
}

fn symmetric(args: &Args, algorithm: Algorithm) -> anyhow::Result<ExitCode> {
    refuse_existing(&args.output, args.force)?;
    let key = Key::generate(algorithm)?;
    // The algorithm line lets compile pick the cipher the key was made for.
    let mut text: Zeroizing<String> = Zeroizing::new(format!(
        "{}{}\n",
        nnc_runtime::key_file::ALGORITHM_LINE,
        algorithm.name()
    ));
    text.push_str(&key.to_hex());
    text.push('\n');
    // Owner-only from the first byte: the temporary file is created 0600.
    output::write_file(&args.output, text.as_bytes(), output::Mode::Private, &[])?;
    let key_id = hex::encode(nnc_formats::container::key_id(key.as_bytes())?);
    if args.json {
        output::stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({
                "schema": "nnc.keygen/1",
                "output": args.output.display().to_string(),
                "algorithm": algorithm.name(),
                "key_id": key_id,
            }))?
        ))?;
    } else {
        eprintln!(
            "wrote a new {} key to {} (mode 600; key id {key_id})",
            algorithm.name(),
            args.output.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn key_pair(args: &Args, algorithm: KeyAlgorithm) -> anyhow::Result<ExitCode> {
    let mut public_path = args.output.clone().into_os_string();
    public_path.push(".pub");
    let public_path = PathBuf::from(public_path);
    refuse_existing(&args.output, args.force)?;
    refuse_existing(&public_path, args.force)?;
    let key = PrivateKey::generate(algorithm)?;
    let public = key.public_key();
    output::write_file(
        &args.output,
        key.to_pem()?.as_bytes(),
        output::Mode::Private,
        &[],
    )?;
    output::write_file(
        &public_path,
        public.to_pem()?.as_bytes(),
        output::Mode::Public,
        &[],
    )?;
    let key_id = hex::encode(public.key_id());
    let purpose = match (algorithm.signs(), algorithm.receives()) {
        (true, true) => "key pair (a signer's or a device's)",
        (true, false) => "signing key pair",
        _ => "device key pair",
    };
    if args.json {
        output::stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({
                "schema": "nnc.keygen/1",
                "output": args.output.display().to_string(),
                "public_key": public_path.display().to_string(),
                "algorithm": algorithm.name(),
                "key_id": key_id,
                "fingerprint": hex::encode(public.fingerprint()),
            }))?
        ))?;
    } else {
        eprintln!(
            "wrote a new {} {purpose}: private key {} (mode 600), public key {} (key id {key_id})",
            algorithm.name(),
            args.output.display(),
            public_path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
