//! uint8 images end to end: `nnc compile --input-preprocess`, `nnc run --input
//! NAME=photo.png`, the decompression-bomb limit, and float64 tensor files for float32
//! inputs.
//!
//! The images are written here with the `image` crate (a deterministic pattern), so no
//! binary test data is committed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nnc_compiler::pipeline::LowerOptions;
use nnc_compiler::preprocess::InputPreprocess;
use nnc_formats::tensor::{DataType, HostTensor};

const H: usize = 32;
const W: usize = 32;
const MEAN: [f32; 3] = [123.675, 116.28, 103.53];
const STD: [f32; 3] = [58.395, 57.12, 57.375];
const SPEC: &str = "input=bgr,mean=123.675,116.28,103.53,std=58.395,57.12,57.375,layout=nhwc";

fn nnc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nnc"))
}

fn tiny_cnn() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/models/tiny_cnn.onnx"
    ))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A deterministic pattern over the whole 0..=255 range, `H` x `W` x 3 interleaved.
fn pixels(width: usize, height: usize) -> Vec<u8> {
    (0..width * height * 3)
        .map(|i| ((i * 7919 + 13) % 256) as u8)
        .collect()
}

fn write_png(path: &Path, width: usize, height: usize) -> Vec<u8> {
    let data = pixels(width, height);
    let img =
        image::RgbImage::from_raw(width as u32, height as u32, data.clone()).expect("pixel count");
    img.save(path).expect("writes the png");
    data
}

/// tiny_cnn compiled with `spec` by the library (as `nnc compile --input-preprocess`
/// does), unencrypted, into `dir/model.nnc`.
fn preprocessed_model(dir: &Path, spec: &str) -> PathBuf {
    let options = LowerOptions {
        input_preprocess: vec![spec.parse::<InputPreprocess>().expect("spec")],
        ..Default::default()
    };
    let lowered = nnc_compiler::pipeline::lower_file(&tiny_cnn(), &options).expect("lowers");
    let bytes = nnc_compiler::emit::emit(
        &lowered.model,
        nnc_compiler::emit::EmitOptions {
            key: None,
            mode: nnc_formats::crypto::Mode::Ctr,
            authenticate_only: false,
            reproducible: true,
            extra_sections: Vec::new(),
            envelope: Default::default(),
        },
    )
    .expect("emits");
    let path = dir.join("model.nnc");
    std::fs::write(&path, bytes).expect("writes the model");
    path
}

/// `nnc run MODEL --input input=FILE` into `dir/out`: output 0, and the whole run.
fn run(model: &Path, input: &Path, dir: &Path) -> (Option<HostTensor>, Output) {
    let out = dir.join("out");
    let o = nnc()
        .arg("run")
        .arg(model)
        .arg("--input")
        .arg(format!("input={}", input.display()))
        .arg("--output-dir")
        .arg(&out)
        .output()
        .expect("runs nnc");
    let output = o
        .status
        .success()
        .then(|| nnc_formats::npy::read_npy_file(out.join("output_0.npy")).expect("output"));
    (output, o)
}

fn run_ok(model: &Path, input: &Path, dir: &Path) -> (Vec<f32>, String) {
    let (output, o) = run(model, input, dir);
    let Some(output) = output else {
        panic!("nnc run failed: {}", stderr(&o));
    };
    (output.to_f32_vec().expect("float output"), stderr(&o))
}

fn assert_close(actual: &[f32], expected: &[f32]) {
    assert_eq!(actual.len(), expected.len());
    for (k, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!((a - e).abs() <= 1e-5, "output {k}: {a} against {e}");
    }
}

/// What the float model is fed for a BGR NHWC image: RGB, NCHW, `(x - mean) / std`.
fn normalised(bgr: &[u8]) -> HostTensor {
    let mut values = vec![0f32; 3 * H * W];
    for y in 0..H {
        for x in 0..W {
            for c in 0..3 {
                let v = f32::from(bgr[(y * W + x) * 3 + (2 - c)]);
                values[(c * H + y) * W + x] = (v - MEAN[c]) / STD[c];
            }
        }
    }
    HostTensor::from_f32(vec![1, 3, H, W], &values).expect("tensor")
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

#[test]
fn a_png_runs_as_its_pixels_do() {
    let d = temp();
    let model = preprocessed_model(d.path(), SPEC);
    let png = d.path().join("photo.png");
    let data = write_png(&png, W, H);
    let npy = d.path().join("photo.npy");
    let tensor = HostTensor::new(DataType::U8, vec![1, H, W, 3], data.clone()).expect("tensor");
    nnc_formats::npy::write_npy_file(&npy, &tensor).expect("writes");
    let (from_png, _) = run_ok(&model, &png, &d.path().join("a"));
    let (from_npy, _) = run_ok(&model, &npy, &d.path().join("b"));
    assert_eq!(from_png, from_npy);

    // And as the float model does on the normalised image.
    let float_input = d.path().join("float.npy");
    nnc_formats::npy::write_npy_file(&float_input, &normalised(&data)).expect("writes");
    let (expected, _) = run_ok(&tiny_cnn(), &float_input, &d.path().join("c"));
    assert_close(&from_png, &expected);
}

/// A PNG whose header declares `width` x `height` and which holds almost no pixel data:
/// a decoder would have to allocate the whole image.
fn png_header_only(width: u32, height: u32) -> Vec<u8> {
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    let mut ihdr = b"IHDR".to_vec();
    ihdr.extend(width.to_be_bytes());
    ihdr.extend(height.to_be_bytes());
    // 8-bit RGB, deflate, adaptive filtering, no interlace.
    ihdr.extend([8, 2, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    // The start of a zlib stream (a real bomb deflates gigabytes of zeros into it).
    let idat = [b"IDAT".as_slice(), &[0x78, 0x9c, 0x63, 0x00, 0x00]].concat();
    for chunk in [ihdr, idat, b"IEND".to_vec()] {
        png.extend((chunk.len() as u32 - 4).to_be_bytes());
        png.extend(&chunk);
        png.extend(crc32(&chunk).to_be_bytes());
    }
    png
}

#[test]
fn a_decompression_bomb_is_refused_by_its_header() {
    let d = temp();
    let model = preprocessed_model(d.path(), SPEC);
    let bomb = d.path().join("bomb.png");
    std::fs::write(&bomb, png_header_only(100_000, 100_000)).expect("writes");
    let (output, o) = run(&model, &bomb, d.path());
    assert!(output.is_none());
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("bomb.png"), "{e}");
    assert!(e.contains("100000x100000"), "{e}");
    assert!(
        e.contains("beyond the largest nnc decodes (67108864 pixels, 8192x8192)"),
        "{e}"
    );
}

#[test]
fn an_image_of_another_size_is_refused_not_resized() {
    // Needs `nnc run` to read inputs with `tensors::read_input` (the model's input shape).
    let d = temp();
    let model = preprocessed_model(d.path(), SPEC);
    let png = d.path().join("small.png");
    write_png(&png, 16, 12);
    let (output, o) = run(&model, &png, d.path());
    assert!(output.is_none());
    let e = stderr(&o);
    assert!(e.contains("small.png (input 'input') is 16x12"), "{e}");
    assert!(e.contains("the input takes 32x32 images"), "{e}");
    assert!(e.contains("does not resize"), "{e}");
}

#[test]
fn an_nchw_input_takes_the_image_planar() {
    // Needs `nnc run` to read inputs with `tensors::read_input` (the model's input shape).
    let d = temp();
    let model = preprocessed_model(
        d.path(),
        "input=bgr,mean=123.675,116.28,103.53,std=58.395,57.12,57.375,layout=nchw",
    );
    let png = d.path().join("photo.png");
    let data = write_png(&png, W, H);
    let (actual, _) = run_ok(&model, &png, &d.path().join("a"));
    let float_input = d.path().join("float.npy");
    nnc_formats::npy::write_npy_file(&float_input, &normalised(&data)).expect("writes");
    let (expected, _) = run_ok(&tiny_cnn(), &float_input, &d.path().join("b"));
    assert_close(&actual, &expected);
}

#[test]
fn float64_for_a_float32_input_is_converted_with_a_warning() {
    // Needs `nnc run` to read inputs with `tensors::read_input` (the model's input type).
    let d = temp();
    let f32_input = tiny_cnn().with_file_name("tiny_cnn.input.npy");
    let t = nnc_formats::npy::read_npy_file(&f32_input).expect("reads");
    let wide: Vec<u8> = t
        .to_f32_vec()
        .expect("float32")
        .iter()
        .flat_map(|&v| f64::from(v).to_le_bytes())
        .collect();
    let f64_input = d.path().join("x64.npy");
    let t64 = HostTensor::new(DataType::F64, t.shape.clone(), wide).expect("tensor");
    nnc_formats::npy::write_npy_file(&f64_input, &t64).expect("writes");
    let (expected, quiet) = run_ok(&tiny_cnn(), &f32_input, &d.path().join("a"));
    let (actual, warned) = run_ok(&tiny_cnn(), &f64_input, &d.path().join("b"));
    assert_eq!(actual, expected);
    assert!(!quiet.contains("float64"), "{quiet}");
    assert!(
        warned.contains("warning: input 'input': ")
            && warned.contains("holds float64 and the model takes float32"),
        "{warned}"
    );
}

#[test]
fn compile_input_preprocess_end_to_end() {
    // Needs the `--input-preprocess` flag of `nnc compile`.
    let d = temp();
    let model = d.path().join("model.nnc");
    let o = nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(&model)
        .args(["--encrypt", "none", "--input-preprocess", SPEC])
        .output()
        .expect("runs nnc");
    assert!(o.status.success(), "{}", stderr(&o));
    let png = d.path().join("photo.png");
    let data = write_png(&png, W, H);
    let (actual, _) = run_ok(&model, &png, &d.path().join("a"));
    let float_input = d.path().join("float.npy");
    nnc_formats::npy::write_npy_file(&float_input, &normalised(&data)).expect("writes");
    let (expected, _) = run_ok(&tiny_cnn(), &float_input, &d.path().join("b"));
    assert_close(&actual, &expected);

    // A mistake names the option and the model's inputs.
    let o = nnc()
        .arg("compile")
        .arg(tiny_cnn())
        .arg("-o")
        .arg(d.path().join("bad.nnc"))
        .args(["--encrypt", "none", "--input-preprocess", "data=rgb"])
        .output()
        .expect("runs nnc");
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains(
            "--input-preprocess data=rgb: the model has no input 'data'; its inputs are: input"
        ),
        "{}",
        stderr(&o)
    );
}
