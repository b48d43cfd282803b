//! `nnc sign`: a detached signature of a file in the OpenSSF Model Signing form (a
//! Sigstore bundle with an in-toto statement), which `model_signing verify key` and `nnc
//! verify --signature` accept. The embedded signature of `compile --sign` is nnc's own
//! and survives `rewrap`; this one covers the file's exact bytes.

use std::path::PathBuf;
use std::process::ExitCode;

use nnc_formats::crypto::KeyAlgorithm;
use serde_json::json;

use crate::exit::{Exit, err};
use crate::output;

#[derive(clap::Args)]
pub struct Args {
    /// The file to sign (a compiled .nnc, or any model file).
    pub model: PathBuf,
    /// The signing key: an ecdsa-p256 PEM private key (`nnc keygen --algorithm
    /// ecdsa-p256`, or OpenSSL's `EC PRIVATE KEY`).
    #[arg(long, value_name = "SIGNER")]
    pub key: PathBuf,
    /// Where to write the signature bundle (default: MODEL.sig).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print a JSON summary on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let key = crate::trust::read_private_key(&args.key, "--key")?;
    if key.algorithm() != KeyAlgorithm::EcdsaP256 {
        return Err(err(
            Exit::Usage,
            format!(
                "--key {}: an {} key; OpenSSF model signatures with bare keys are ECDSA \
                 (make one with `nnc keygen --algorithm ecdsa-p256 -o signer`)",
                args.key.display(),
                key.algorithm()
            ),
        ));
    }
    crate::input::check(&args.model, "model")?;
    let output = args.output.clone().unwrap_or_else(|| {
        let mut p = args.model.clone().into_os_string();
        p.push(".sig");
        PathBuf::from(p)
    });
    let digest = crate::trust::file_digest(&args.model)?;
    let bundle = crate::oms::sign(&args.model, &digest, &key)?;
    output::write_file(
        &output,
        bundle.as_bytes(),
        output::Mode::Public,
        &[args.model.as_path(), args.key.as_path()],
    )?;
    let key_id = hex::encode(key.public_key().key_id());
    if args.json {
        output::stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({
                "schema": "nnc.sign/1",
                "model": args.model.display().to_string(),
                "signature": output.display().to_string(),
                "sha256": hex::encode(digest),
                "signer_key_id": key_id,
            }))?
        ))?;
    } else {
        eprintln!(
            "wrote {}: an OpenSSF model signature of {} (sha256 {}) by key {key_id}",
            output.display(),
            args.model.display(),
            hex::encode(digest)
        );
    }
    Ok(ExitCode::SUCCESS)
}
