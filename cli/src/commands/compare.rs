//! `nnc compare`: are two tensor files equal within a tolerance?

use std::path::PathBuf;
use std::process::ExitCode;

use nnc_formats::tensor::DataType;
use serde_json::json;

use crate::exit::{Exit, err};
use crate::output;
use crate::tensors;

#[derive(clap::Args)]
pub struct Args {
    /// The tensor to check (.npy or .pb).
    pub actual: PathBuf,
    /// The reference (.npy or .pb).
    pub expected: PathBuf,
    /// Absolute tolerance for floating-point elements.
    #[arg(long, default_value_t = 1e-5)]
    pub atol: f64,
    /// Relative tolerance (of the expected value) for floating-point elements.
    #[arg(long, default_value_t = 1e-3)]
    pub rtol: f64,
    /// Tolerance for integer elements (e.g. 1 for quantized outputs).
    #[arg(long, default_value_t = 0)]
    pub int_tolerance: i64,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let actual = tensors::read(&args.actual)?;
    let expected = tensors::read(&args.expected)?;
    if actual.dtype != expected.dtype {
        return Err(err(
            Exit::Failure,
            format!(
                "element types differ: {} vs {}",
                actual.dtype, expected.dtype
            ),
        ));
    }
    if actual.shape != expected.shape {
        return Err(err(
            Exit::Failure,
            format!("shapes differ: {:?} vs {:?}", actual.shape, expected.shape),
        ));
    }
    let float = matches!(actual.dtype, DataType::F32 | DataType::F64 | DataType::F16);
    let (a, e) = (actual.values_f64(), expected.values_f64());
    let mut failures = 0usize;
    let mut worst = (0usize, 0.0f64);
    for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
        let diff = (x - y).abs();
        // NaN and infinity never pass.
        let ok = if float {
            x.is_finite() && y.is_finite() && diff <= args.atol + args.rtol * y.abs()
        } else {
            diff <= args.int_tolerance as f64
        };
        if !ok {
            failures += 1;
        }
        if diff > worst.1 || diff.is_nan() {
            worst = (i, diff);
        }
    }
    let summary = format!(
        "{} elements, {} outside tolerance (atol {}, rtol {}{}); largest difference {} at element {}\n",
        a.len(),
        failures,
        args.atol,
        args.rtol,
        if float {
            String::new()
        } else {
            format!(", integer tolerance {}", args.int_tolerance)
        },
        worst.1,
        worst.0
    );
    if args.json {
        let report = json!({
            "schema": "nnc.compare/1",
            "ok": failures == 0,
            "elements": a.len(),
            "outside_tolerance": failures,
            "largest_difference": if worst.1.is_finite() { json!(worst.1) } else { json!(null) },
            "at_element": worst.0,
            "atol": args.atol,
            "rtol": args.rtol,
            "int_tolerance": args.int_tolerance,
        });
        output::stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    } else {
        output::stdout(&summary)?;
    }
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(Exit::Failure.code())
    })
}
