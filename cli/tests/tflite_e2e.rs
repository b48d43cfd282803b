//! The shipped TFLite models end to end through the binary: `nnc compile` with encrypted
//! weights, then `nnc run` on the reference input, against the output LiteRT produced
//! (../shared/models), with the tolerances.

use std::path::{Path, PathBuf};
use std::process::Command;

use nnc_formats::npy::read_npy_file;
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_formats::test_support::shared_model;

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn check(cmd: &mut Command) {
    let o = cmd.output().expect("nnc runs");
    assert!(
        o.status.success(),
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Compiles `model` encrypted with `algorithm`/`mode`, runs it on its reference input
/// with `extra` run arguments, and returns (nnc's output, the reference output).
fn compile_and_run(
    model: &Path,
    algorithm: &str,
    mode: &str,
    extra: &[&str],
) -> (HostTensor, HostTensor) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("weights.key");
    let compiled = dir.path().join("model.nnc");
    check(
        nnc()
            .args(["keygen", "--algorithm", algorithm, "-o"])
            .arg(&key),
    );
    check(
        nnc()
            .arg("compile")
            .arg(model)
            .args(["--encrypt", algorithm, "--mode", mode])
            .arg("--key-file")
            .arg(&key)
            .arg("-o")
            .arg(&compiled),
    );
    let input = sibling(model, "input.npy");
    check(
        nnc()
            .arg("run")
            .arg(&compiled)
            .arg("--key-file")
            .arg(&key)
            .arg("--input")
            .arg(&input)
            .arg("--output-dir")
            .arg(dir.path())
            .args(extra),
    );
    let ours = read_npy_file(dir.path().join("output_0.npy")).unwrap();
    let reference = read_npy_file(sibling(model, "output.npy")).unwrap();
    assert_eq!(
        ours.shape,
        reference.shape,
        "{}: output shape",
        model.display()
    );
    assert_eq!(
        ours.dtype,
        reference.dtype,
        "{}: output type",
        model.display()
    );
    (ours, reference)
}

fn sibling(model: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}.{suffix}", model.display()))
}

/// The largest difference between two int8 tensors, in quantized units.
fn max_int8_difference(a: &HostTensor, b: &HostTensor) -> i32 {
    assert_eq!(a.dtype, DataType::I8);
    a.data
        .iter()
        .zip(&b.data)
        .map(|(&x, &y)| (i32::from(x as i8) - i32::from(y as i8)).abs())
        .max()
        .unwrap_or(0)
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn mobilenet_v2_float_tflite_matches_litert() {
    let Some(model) = shared_model("mobilenet_v2.tflite") else {
        return;
    };
    let (ours, reference) = compile_and_run(&model, "sm4", "cbc", &[]);
    let (ours, reference) = (ours.to_f32_vec().unwrap(), reference.to_f32_vec().unwrap());
    for (i, (&a, &e)) in ours.iter().zip(&reference).enumerate() {
        assert!(
            a.is_finite() && (a - e).abs() <= 1e-5 + 1e-3 * e.abs(),
            "element {i}: {a} vs {e}"
        );
    }
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn mobilenet_v2_int8_logits_within_three_units_of_litert() {
    let Some(model) = shared_model("mobilenet_v2_int8_logits.tflite") else {
        return;
    };
    let (ours, reference) = compile_and_run(&model, "aes128", "ofb", &[]);
    let diff = max_int8_difference(&ours, &reference);
    assert!(diff <= 3, "logits differ by up to {diff} units");
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn mobilenet_v2_int8_within_one_unit_of_litert() {
    let Some(model) = shared_model("mobilenet_v2_int8.tflite") else {
        return;
    };
    let (ours, reference) = compile_and_run(&model, "aes256", "cfb", &[]);
    let diff = max_int8_difference(&ours, &reference);
    assert!(diff <= 1, "outputs differ by up to {diff} units");
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn fixed_point_requantization_is_a_different_faithful_arithmetic() {
    // TFLite's reference arithmetic runs the same model to a different answer: the
    // network amplifies last-unit rounding differences. The run option exists, and it
    // really changes the arithmetic (if it did not, this would be equal).
    let Some(model) = shared_model("mobilenet_v2_int8_logits.tflite") else {
        return;
    };
    let (float, _) = compile_and_run(&model, "sm4", "ecb", &[]);
    let (fixed, reference) =
        compile_and_run(&model, "sm4", "ecb", &["--requantization", "fixed-point"]);
    assert_ne!(float.data, fixed.data);
    assert!(max_int8_difference(&fixed, &reference) > 0);
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn every_kernel_path_computes_the_same_int8_bytes() {
    // The 8-bit dot-product, AVX2 and portable paths accumulate exactly the same
    // integers through the same output stage: capping the paths (NNC_MAX_ISA) must not
    // change a byte, whichever of them this processor has.
    for name in [
        "mobilenet_v2_int8.tflite",
        "mobilenet_v2_int8_logits.tflite",
    ] {
        let Some(model) = shared_model(name) else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let compiled = dir.path().join("model.nnc");
        check(
            nnc()
                .arg("compile")
                .arg(&model)
                .args(["--encrypt", "none", "-o"])
                .arg(&compiled),
        );
        let mut outputs = Vec::new();
        for isa in ["native", "avx2", "portable"] {
            let out = dir.path().join(isa);
            check(
                nnc()
                    .env("NNC_MAX_ISA", isa)
                    .arg("run")
                    .arg(&compiled)
                    .arg("--input")
                    .arg(sibling(&model, "input.npy"))
                    .arg("--output-dir")
                    .arg(&out),
            );
            outputs.push((isa, read_npy_file(out.join("output_0.npy")).unwrap()));
        }
        let reference = read_npy_file(sibling(&model, "output.npy")).unwrap();
        for (isa, output) in &outputs {
            assert_eq!(
                output.data, outputs[0].1.data,
                "{name}: {isa} differs from native"
            );
        }
        assert!(
            max_int8_difference(&outputs[0].1, &reference) <= 1,
            "{name}"
        );
    }
}
