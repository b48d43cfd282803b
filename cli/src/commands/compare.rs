//! `nnc compare`: are two tensor files equal within a tolerance?

use std::path::PathBuf;
use std::process::ExitCode;

use nnc_formats::tensor::{DataType, HostTensor};
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

fn values(t: &HostTensor) -> Vec<f64> {
    let d = &t.data;
    match t.dtype {
        DataType::F32 => d
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        DataType::F64 => d
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        DataType::F16 => d
            .chunks_exact(2)
            .map(|c| {
                f64::from(nnc_formats::nn::ops::f16_to_f32(u16::from_le_bytes([
                    c[0], c[1],
                ])))
            })
            .collect(),
        DataType::I8 => d.iter().map(|&b| f64::from(b as i8)).collect(),
        DataType::U8 | DataType::Bool => d.iter().map(|&b| f64::from(b)).collect(),
        DataType::I16 => d
            .chunks_exact(2)
            .map(|c| f64::from(i16::from_le_bytes([c[0], c[1]])))
            .collect(),
        DataType::U16 => d
            .chunks_exact(2)
            .map(|c| f64::from(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        DataType::I32 => d
            .chunks_exact(4)
            .map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        DataType::U32 => d
            .chunks_exact(4)
            .map(|c| f64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        DataType::I64 => d
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64)
            .collect(),
        DataType::U64 => d
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f64)
            .collect(),
    }
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
    let (a, e) = (values(&actual), values(&expected));
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
