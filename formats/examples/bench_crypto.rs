//! Throughput of every (algorithm x mode x direction) of `nnc_formats::crypto`.
//!
//! ```text
//! cargo run --release -p nnc-formats --example bench_crypto -- [--size-mib N] [--runs N] [--json]
//! ```
//!
//! Each case encrypts (or decrypts) one buffer `--runs` times after a warm-up run and
//! reports the median, in MB/s with 1 MB = 10^6 bytes. Output buffers are reused, as
//! the runtime does, so allocation is not measured. `scripts/bench-crypto` puts these
//! numbers next to `openssl speed`.

use std::process::ExitCode;
use std::time::Instant;

use nnc_formats::crypto::{Algorithm, Key, Mode, decrypt_into, encrypt_into, random_bytes};

struct Options {
    size_mib: usize,
    runs: usize,
    json: bool,
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        size_mib: 16,
        runs: 7,
        json: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            let value = args.next().ok_or(format!("{name} needs a value"))?;
            match value.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{name} must be a positive integer, got {value:?}")),
            }
        };
        match arg.as_str() {
            "--size-mib" => options.size_mib = number("--size-mib")?,
            "--runs" => options.runs = number("--runs")?,
            "--json" => options.json = true,
            "-h" | "--help" => {
                return Err("usage: bench_crypto [--size-mib N] [--runs N] [--json]".into());
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(options)
}

/// The name `openssl speed -evp` knows the cipher by.
fn openssl_name(algorithm: Algorithm, mode: Mode) -> String {
    let alg = match algorithm {
        Algorithm::Sm4 => "sm4",
        Algorithm::Aes128 => "aes-128",
        Algorithm::Aes192 => "aes-192",
        Algorithm::Aes256 => "aes-256",
    };
    format!("{alg}-{}", mode.name())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Median MB/s of `runs` timed calls of `f` on `bytes` bytes, after one warm-up call.
fn measure(runs: usize, bytes: usize, mut f: impl FnMut()) -> f64 {
    f();
    let rates = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            bytes as f64 / 1e6 / start.elapsed().as_secs_f64()
        })
        .collect();
    median(rates)
}

struct Row {
    algorithm: Algorithm,
    mode: Mode,
    direction: &'static str,
    mb_per_s: f64,
}

fn run(options: &Options) -> Result<Vec<Row>, String> {
    let size = options.size_mib * 1024 * 1024;
    // Incompressible content; its exact bytes do not affect speed.
    let chunk: [u8; 4096] = random_bytes();
    let data: Vec<u8> = chunk.iter().copied().cycle().take(size).collect();
    let iv: [u8; 16] = random_bytes();
    let mut ciphertext = Vec::new();
    let mut plaintext = Vec::new();
    let mut rows = Vec::new();

    for algorithm in Algorithm::ALL {
        let key = Key::generate(algorithm).map_err(|e| e.to_string())?;
        for mode in Mode::ALL {
            eprintln!("bench_crypto: {algorithm}-{mode}");
            let mut failure = None;
            let enc = measure(options.runs, size, || {
                if let Err(err) = encrypt_into(&key, mode, &iv, &data, &mut ciphertext) {
                    failure = Some(err);
                }
            });
            let dec = measure(options.runs, size, || {
                if let Err(err) = decrypt_into(&key, mode, &iv, &ciphertext, &mut plaintext) {
                    failure = Some(err);
                }
            });
            if let Some(err) = failure {
                return Err(format!("{algorithm}-{mode}: {err}"));
            }
            if plaintext != data {
                return Err(format!("{algorithm}-{mode}: decryption did not round-trip"));
            }
            for (direction, mb_per_s) in [("encrypt", enc), ("decrypt", dec)] {
                rows.push(Row {
                    algorithm,
                    mode,
                    direction,
                    mb_per_s,
                });
            }
        }
    }
    Ok(rows)
}

fn main() -> ExitCode {
    let options = match parse_args() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("bench_crypto: {message}");
            return ExitCode::from(2);
        }
    };
    let rows = match run(&options) {
        Ok(rows) => rows,
        Err(message) => {
            eprintln!("bench_crypto: {message}");
            return ExitCode::FAILURE;
        }
    };

    if options.json {
        let results: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "algorithm": r.algorithm,
                    "mode": r.mode,
                    "direction": r.direction,
                    "openssl_cipher": openssl_name(r.algorithm, r.mode),
                    "mb_per_s": (r.mb_per_s * 10.0).round() / 10.0,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "size_bytes": options.size_mib * 1024 * 1024,
            "runs": options.runs,
            "unit": "MB/s (10^6 bytes per second), median",
            "results": results,
        });
        println!("{doc:#}");
    } else {
        println!(
            "{} MiB buffer, median of {} runs, MB/s (10^6 bytes/s)",
            options.size_mib, options.runs
        );
        println!(
            "{:<8} {:<5} {:>10} {:>10}",
            "cipher", "mode", "encrypt", "decrypt"
        );
        for pair in rows.chunks(2) {
            if let [enc, dec] = pair {
                println!(
                    "{:<8} {:<5} {:>10.1} {:>10.1}",
                    enc.algorithm.name(),
                    enc.mode.name(),
                    enc.mb_per_s,
                    dec.mb_per_s
                );
            }
        }
    }
    ExitCode::SUCCESS
}
