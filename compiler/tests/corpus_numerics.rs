//! Every case of the ONNX corpus (`testdata/onnx`) compiled, loaded and run on the CPU
//! kernels, its outputs compared with ONNX Runtime's (the `.npy` files the generator
//! wrote). Float32 must agree within atol 1e-5 + rtol 1e-4, float16 within NNAPI's
//! float16 tolerance (atol = rtol = 5 * 2^-10: ONNX Runtime rounds every float16
//! intermediate, nnc only the outputs); NaN only where ONNX Runtime has NaN; integers and
//! booleans exactly.

mod common;

use std::path::{Path, PathBuf};

use nnc_compiler::emit::{self, EmitOptions};
use nnc_compiler::pipeline::{LowerOptions, lower_file};
use nnc_formats::crypto::Mode;
use nnc_formats::tensor::DataType;
use nnc_runtime::{LoadOptions, PreparedModel, SimulatedNpu};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/onnx");
const ATOL: f64 = 1e-5;
const RTOL: f64 = 1e-4;
const F16_TOL: f64 = 5.0 / 1024.0;

fn cases() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(CORPUS)
        .expect("testdata/onnx")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir() && p.join("output_0.npy").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// Runs one case; `Err` describes the first disagreement.
fn check(dir: &Path) -> Result<(), String> {
    let model = lower_file(&dir.join("model.onnx"), &LowerOptions::default())
        .map_err(|e| format!("lowering: {e}"))?
        .model;
    let bytes = emit::emit(
        &model,
        EmitOptions {
            envelope: Default::default(),
            key: None,
            mode: Mode::Ctr,
            authenticate_only: false,
            reproducible: true,
            extra_sections: Vec::new(),
        },
    )
    .map_err(|e| format!("emit: {e}"))?;
    let npu = SimulatedNpu::new("npu0");
    let prepared = PreparedModel::load_bytes(bytes, &npu, &LoadOptions::default())
        .map_err(|e| format!("load: {e}"))?;
    let actual = prepared
        .run(&common::numbered(dir, "input"))
        .map_err(|e| format!("run: {e}"))?;
    let expected = common::numbered(dir, "output");
    if actual.len() != expected.len() {
        return Err(format!(
            "{} outputs, ONNX Runtime has {}",
            actual.len(),
            expected.len()
        ));
    }
    for (k, (a, e)) in actual.iter().zip(&expected).enumerate() {
        if a.shape != e.shape || a.dtype != e.dtype {
            return Err(format!(
                "output {k}: {:?} {:?}, ONNX Runtime {:?} {:?}",
                a.dtype, a.shape, e.dtype, e.shape
            ));
        }
        let (av, ev) = (a.values_f64(), e.values_f64());
        let exact = !matches!(e.dtype, DataType::F32 | DataType::F16 | DataType::F64);
        let (atol, rtol) = if e.dtype == DataType::F16 {
            (F16_TOL, F16_TOL)
        } else {
            (ATOL, RTOL)
        };
        for (i, (&x, &y)) in av.iter().zip(&ev).enumerate() {
            let ok = if exact {
                x == y
            } else if y.is_nan() {
                x.is_nan()
            } else if y.is_infinite() {
                x == y
            } else {
                x.is_finite() && (x - y).abs() <= atol + rtol * y.abs()
            };
            if !ok {
                return Err(format!("output {k}, element {i}: {x} vs {y}"));
            }
        }
    }
    Ok(())
}

#[test]
fn every_corpus_case_matches_onnx_runtime() {
    let cases = cases();
    assert!(cases.len() > 100, "the corpus is missing");
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|dir| {
            check(dir).err().map(|why| {
                format!(
                    "{}: {why}",
                    dir.file_name().unwrap_or_default().to_string_lossy()
                )
            })
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree with ONNX Runtime:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
