use super::*;
use nnc_formats::npy::write_npy_file;
use std::sync::mpsc;
use std::time::Duration;

fn input(name: &str, dtype: DataType, dims: &[u32]) -> IoInfo {
    IoInfo {
        name: name.to_string(),
        dtype,
        dims: dims.to_vec(),
    }
}

fn f32_tensor(shape: &[usize], values: &[f32]) -> HostTensor {
    HostTensor::from_f32(shape.to_vec(), values).expect("valid test tensor")
}

fn i64_tensor(shape: &[usize], values: &[i64]) -> HostTensor {
    HostTensor::new(
        DataType::I64,
        shape.to_vec(),
        bytemuck::cast_slice(values).to_vec(),
    )
    .expect("valid test tensor")
}

fn f64_tensor(shape: &[usize], values: &[f64]) -> HostTensor {
    HostTensor::new(
        DataType::F64,
        shape.to_vec(),
        bytemuck::cast_slice(values).to_vec(),
    )
    .expect("valid test tensor")
}

fn save(path: &Path, t: &HostTensor) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create sample dir");
    }
    write_npy_file(path, t).expect("write test .npy");
}

fn one_input() -> Vec<IoInfo> {
    vec![input("x", DataType::F32, &[1, 0])]
}

fn two_inputs() -> Vec<IoInfo> {
    vec![
        input("input_ids", DataType::I64, &[1, 0]),
        input("attention_mask", DataType::I64, &[1, 0]),
    ]
}

fn load(dir: &Path, inputs: &[IoInfo]) -> Result<CalibrationSet, CalibrationError> {
    load_calibration_dir(dir, inputs, u64::MAX)
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn single_input_loads_npy_files_in_byte_order_ignoring_others() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    for (name, v) in [
        ("b.npy", 2.0),
        ("a.npy", 1.0),
        ("B.npy", 0.5),
        ("c.npy", 3.0),
    ] {
        save(&d.join(name), &f32_tensor(&[1, 2], &[v, v]));
    }
    std::fs::write(d.join("README"), "samples").expect("write");
    std::fs::write(d.join(".DS_Store"), "junk").expect("write");
    std::fs::write(d.join(".hidden.npy"), "not npy").expect("write");
    std::fs::write(d.join("notes.txt"), "junk").expect("write");

    let set = load(d, &one_input()).expect("valid directory");
    let names: Vec<String> = set
        .files
        .iter()
        .map(|f| {
            f[0].file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names, ["B.npy", "a.npy", "b.npy", "c.npy"]);
    let firsts: Vec<f32> = set
        .samples
        .iter()
        .map(|s| {
            assert_eq!(s.len(), 1);
            s[0].to_f32_vec().expect("f32")[0]
        })
        .collect();
    assert_eq!(firsts, [0.5, 1.0, 2.0, 3.0]);
}

#[test]
fn single_input_dynamic_dims_may_differ_between_samples() {
    let tmp = tempfile::tempdir().expect("tempdir");
    save(
        &tmp.path().join("s0.npy"),
        &f32_tensor(&[1, 2], &[1.0, 2.0]),
    );
    save(
        &tmp.path().join("s1.npy"),
        &f32_tensor(&[1, 3], &[1.0, 2.0, 3.0]),
    );
    let set = load(tmp.path(), &one_input()).expect("valid");
    assert_eq!(set.samples[0][0].shape, [1, 2]);
    assert_eq!(set.samples[1][0].shape, [1, 3]);
}

#[test]
fn multi_input_loads_subdirectories_in_byte_order_and_input_order() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    // Dynamic dims differ between inputs of one sample and between samples: fine.
    for (sub, n, m) in [("s2", 2usize, 4usize), ("s10", 3, 3), ("s1", 5, 1)] {
        let ids: Vec<i64> = (0..n as i64).collect();
        let mask: Vec<i64> = vec![1; m];
        save(
            &d.join(sub).join("attention_mask.npy"),
            &i64_tensor(&[1, m], &mask),
        );
        save(
            &d.join(sub).join("input_ids.npy"),
            &i64_tensor(&[1, n], &ids),
        );
        std::fs::write(d.join(sub).join("README.md"), "ignored").expect("write");
    }
    std::fs::create_dir(d.join(".git")).expect("mkdir");
    std::fs::write(d.join("README"), "ignored").expect("write");

    let set = load(d, &two_inputs()).expect("valid directory");
    assert_eq!(set.samples.len(), 3);
    let order: Vec<String> = set
        .files
        .iter()
        .map(|f| {
            let parent = f[0].parent().expect("parent");
            parent
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(order, ["s1", "s10", "s2"]);
    for (sample, files) in set.samples.iter().zip(&set.files) {
        assert!(files[0].ends_with("input_ids.npy"), "{files:?}");
        assert!(files[1].ends_with("attention_mask.npy"), "{files:?}");
        assert_eq!(sample[0].dtype, DataType::I64);
    }
    assert_eq!(set.samples[0][0].shape, [1, 5]);
    assert_eq!(set.samples[0][1].shape, [1, 1]);
    assert_eq!(set.samples[2][0].shape, [1, 2]);
    assert_eq!(set.samples[2][1].shape, [1, 4]);
}

#[test]
fn single_input_accepts_the_subdirectory_layout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    save(
        &tmp.path().join("a").join("x.npy"),
        &f32_tensor(&[1, 1], &[1.0]),
    );
    let set = load(tmp.path(), &one_input()).expect("valid");
    assert_eq!(set.samples.len(), 1);
}

#[test]
fn missing_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("nope");
    let e = load(&dir, &one_input()).expect_err("missing");
    assert!(matches!(e, CalibrationError::DirMissing { .. }), "{e:?}");
    assert!(e.is_io());
    assert!(e.to_string().contains(&shown(&dir)), "{e}");
    assert!(e.to_string().contains("does not exist"), "{e}");
}

#[test]
fn not_a_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("x.npy");
    save(&file, &f32_tensor(&[1, 1], &[1.0]));
    let e = load(&file, &one_input()).expect_err("a file");
    assert!(matches!(e, CalibrationError::NotADirectory { .. }), "{e:?}");
    assert!(e.is_io());
    assert!(e.to_string().contains(&shown(&file)), "{e}");
    assert!(e.to_string().contains("not a directory"), "{e}");
}

#[test]
fn empty_directory_single_input() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(tmp.path().join("README"), "no samples").expect("write");
    std::fs::write(tmp.path().join(".x.npy"), "hidden").expect("write");
    let e = load(tmp.path(), &one_input()).expect_err("empty");
    assert!(matches!(e, CalibrationError::NoSamples { .. }), "{e:?}");
    assert!(
        e.to_string()
            .contains(&format!("no .npy samples in {}", shown(tmp.path()))),
        "{e}"
    );
}

#[test]
fn empty_directory_multi_input() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let e = load(tmp.path(), &two_inputs()).expect_err("empty");
    assert!(
        matches!(e, CalibrationError::NoSampleDirs { loose_npy: 0, .. }),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(msg.contains("no sample subdirectories"), "{msg}");
    assert!(msg.contains(&shown(tmp.path())), "{msg}");
    assert!(msg.contains("sample_000/input_ids.npy"), "{msg}");
}

#[test]
fn loose_npy_files_for_a_multi_input_model() {
    let tmp = tempfile::tempdir().expect("tempdir");
    save(&tmp.path().join("a.npy"), &i64_tensor(&[1, 1], &[1]));
    let e = load(tmp.path(), &two_inputs()).expect_err("flat layout");
    assert!(
        matches!(e, CalibrationError::NoSampleDirs { loose_npy: 1, .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("the 1 .npy file(s) directly in it"),
        "{e}"
    );
}

#[test]
fn mixed_layout() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let npy = tmp.path().join("a.npy");
    save(&npy, &f32_tensor(&[1, 1], &[1.0]));
    save(
        &tmp.path().join("s0").join("x.npy"),
        &f32_tensor(&[1, 1], &[1.0]),
    );
    for inputs in [one_input(), two_inputs()] {
        let e = load(tmp.path(), &inputs).expect_err("mixed");
        assert!(matches!(e, CalibrationError::MixedLayout { .. }), "{e:?}");
        assert!(!e.is_io());
        let msg = e.to_string();
        assert!(msg.contains("mixes layouts"), "{msg}");
        assert!(msg.contains(&shown(&npy)), "{msg}");
    }
}

#[test]
fn sample_missing_an_input_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let good = tmp.path().join("s0");
    save(&good.join("input_ids.npy"), &i64_tensor(&[1, 1], &[1]));
    save(&good.join("attention_mask.npy"), &i64_tensor(&[1, 1], &[1]));
    let bad = tmp.path().join("s3");
    save(&bad.join("input_ids.npy"), &i64_tensor(&[1, 1], &[1]));
    let e = load(tmp.path(), &two_inputs()).expect_err("missing input file");
    assert!(
        matches!(e, CalibrationError::MissingInputFile { .. }),
        "{e:?}"
    );
    assert!(e.is_io());
    assert_eq!(
        e.to_string(),
        format!(
            "sample {} has no file for input 'attention_mask' (expected attention_mask.npy)",
            shown(&bad)
        )
    );
}

#[test]
fn extra_npy_in_a_sample() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = tmp.path().join("s0");
    save(&s.join("input_ids.npy"), &i64_tensor(&[1, 1], &[1]));
    save(&s.join("attention_mask.npy"), &i64_tensor(&[1, 1], &[1]));
    let extra = s.join("token_type_ids.npy");
    save(&extra, &i64_tensor(&[1, 1], &[0]));
    let e = load(tmp.path(), &two_inputs()).expect_err("extra file");
    assert!(matches!(e, CalibrationError::ExtraFile { .. }), "{e:?}");
    assert!(!e.is_io());
    let msg = e.to_string();
    assert!(msg.contains(&shown(&extra)), "{msg}");
    assert!(msg.contains("'input_ids', 'attention_mask'"), "{msg}");
}

#[test]
fn input_names_with_path_characters_take_replaced_file_names() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let inputs = vec![
        input("encoder/x:0", DataType::F32, &[1]),
        input("mask:0", DataType::F32, &[1]),
    ];
    let s = tmp.path().join("s0");
    save(&s.join("encoder_x_0.npy"), &f32_tensor(&[1], &[1.0]));
    // A name that is a valid file name is taken as is.
    save(&s.join("mask:0.npy"), &f32_tensor(&[1], &[2.0]));
    let set = load(tmp.path(), &inputs).expect("valid");
    assert!(set.files[0][0].ends_with("encoder_x_0.npy"));
    assert!(set.files[0][1].ends_with("mask:0.npy"));

    // Both spellings of one input: which one is meant is unclear.
    save(&s.join("mask_0.npy"), &f32_tensor(&[1], &[3.0]));
    let e = load(tmp.path(), &inputs).expect_err("two files for one input");
    assert!(
        matches!(e, CalibrationError::DuplicateInputFile { .. }),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("mask:0.npy") && msg.contains("mask_0.npy"),
        "{msg}"
    );
}

#[test]
fn one_file_for_two_inputs_is_ambiguous() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let inputs = vec![
        input("a/b", DataType::F32, &[1]),
        input("a:b", DataType::F32, &[1]),
    ];
    let file = tmp.path().join("s0").join("a_b.npy");
    save(&file, &f32_tensor(&[1], &[1.0]));
    let e = load(tmp.path(), &inputs).expect_err("ambiguous");
    assert!(matches!(e, CalibrationError::AmbiguousFile { .. }), "{e:?}");
    assert!(e.to_string().contains(&shown(&file)), "{e}");
}

#[test]
fn missing_file_message_names_both_spellings() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let inputs = vec![
        input("x", DataType::F32, &[1]),
        input("a:b", DataType::F32, &[1]),
        input("c/d", DataType::F32, &[1]),
    ];
    let s = tmp.path().join("s0");
    save(&s.join("x.npy"), &f32_tensor(&[1], &[1.0]));
    let e = load(tmp.path(), &inputs).expect_err("missing");
    assert!(
        e.to_string().contains("(expected a:b.npy or a_b.npy)"),
        "{e}"
    );
    save(&s.join("a_b.npy"), &f32_tensor(&[1], &[1.0]));
    let e = load(tmp.path(), &inputs).expect_err("missing");
    assert!(e.to_string().contains("(expected c_d.npy)"), "{e}");
}

#[test]
fn wrong_dtype_float64_gets_a_hint() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("a.npy");
    save(&file, &f64_tensor(&[1, 2], &[1.0, 2.0]));
    let e = load(tmp.path(), &one_input()).expect_err("float64");
    assert!(matches!(e, CalibrationError::WrongDtype { .. }), "{e:?}");
    assert!(!e.is_io());
    let msg = e.to_string();
    assert!(msg.contains(&shown(&file)), "{msg}");
    assert!(msg.contains("float64 but input 'x' is float32"), "{msg}");
    assert!(msg.contains("astype(np.float32)"), "{msg}");
}

#[test]
fn dtype_rules() {
    let p = Path::new("t.npy");
    let f16_in = input("h", DataType::F16, &[2]);
    let f32_t = f32_tensor(&[2], &[1.0, 2.0]);
    check_sample_tensor(&f32_t, &f16_in, p).expect("float32 feeds a float16 input");
    let f16_t = HostTensor::new(DataType::F16, vec![2], vec![0, 0x3c, 0, 0x40]).expect("f16");
    check_sample_tensor(&f16_t, &f16_in, p).expect("float16 feeds a float16 input");
    let f32_in = input("f", DataType::F32, &[2]);
    let e = check_sample_tensor(&f16_t, &f32_in, p).expect_err("float16 for float32");
    assert!(matches!(e, CalibrationError::WrongDtype { .. }), "{e:?}");

    let ids = input("ids", DataType::I64, &[2]);
    let i32_t = HostTensor::new(DataType::I32, vec![2], vec![0; 8]).expect("i32");
    let e = check_sample_tensor(&i32_t, &ids, p).expect_err("int32 for int64");
    let msg = e.to_string();
    assert!(msg.contains("int32 but input 'ids' is int64"), "{msg}");
    assert!(msg.contains("astype(np.int64)"), "{msg}");
    // No cast hint across kinds: float token ids are a mistake, not a format.
    let e = check_sample_tensor(&f32_t, &ids, p).expect_err("float32 for int64");
    assert!(!e.to_string().contains("astype"), "{e}");
    check_sample_tensor(&i64_tensor(&[2], &[1, 2]), &ids, p).expect("int64 ids");
}

#[test]
fn wrong_shape_shows_both_shapes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("a.npy");
    save(&file, &f32_tensor(&[2, 3, 1], &[0.0; 6]));
    let e = load(tmp.path(), &one_input()).expect_err("rank");
    assert!(matches!(e, CalibrationError::WrongShape { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&shown(&file)), "{msg}");
    assert!(
        msg.contains("shape [2, 3, 1] but input 'x' has shape [1, ?]"),
        "{msg}"
    );

    let p = Path::new("t.npy");
    let x = input("x", DataType::F32, &[1, 0]);
    let e = check_sample_tensor(&f32_tensor(&[2, 3], &[0.0; 6]), &x, p).expect_err("dim");
    assert!(matches!(e, CalibrationError::WrongShape { .. }), "{e:?}");
    check_sample_tensor(&f32_tensor(&[1, 6], &[0.0; 6]), &x, p).expect("dynamic dim");
    let scalar = input("s", DataType::F32, &[]);
    check_sample_tensor(&f32_tensor(&[], &[1.0]), &scalar, p).expect("rank 0");
    let e = check_sample_tensor(&f32_tensor(&[1], &[1.0]), &scalar, p).expect_err("rank 1");
    assert!(
        e.to_string()
            .contains("has shape [1] but input 's' has shape []"),
        "{e}"
    );
}

#[test]
fn non_finite_values_are_counted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("a.npy");
    let values = [1.0, f32::NAN, 2.0, f32::NEG_INFINITY, 3.0, f32::INFINITY];
    save(&file, &f32_tensor(&[1, 6], &values));
    let e = load(tmp.path(), &one_input()).expect_err("NaN");
    match &e {
        CalibrationError::NonFinite {
            count,
            first_index,
            first_value,
            ..
        } => {
            assert_eq!((*count, *first_index, *first_value), (3, 1, "NaN"));
        }
        other => panic!("expected NonFinite, got {other:?}"),
    }
    assert!(!e.is_io());
    let msg = e.to_string();
    assert!(msg.contains(&shown(&file)), "{msg}");
    assert!(
        msg.contains("3 NaN or infinite") && msg.contains("flat index 1"),
        "{msg}"
    );

    let p = Path::new("t.npy");
    let d = input("d", DataType::F64, &[3]);
    let e = check_sample_tensor(&f64_tensor(&[3], &[0.0, 0.0, f64::NEG_INFINITY]), &d, p)
        .expect_err("-inf");
    assert!(e.to_string().contains("(-inf) at flat index 2"), "{e}");
    // float16: 0x7e00 is NaN, 0x7c00 infinity, 0x3c00 one.
    let h = input("h", DataType::F16, &[3]);
    let f16_t = HostTensor::new(
        DataType::F16,
        vec![3],
        vec![0x00, 0x3c, 0x00, 0x7c, 0x00, 0x7e],
    )
    .expect("f16");
    let e = check_sample_tensor(&f16_t, &h, p).expect_err("f16 inf");
    assert!(
        matches!(
            e,
            CalibrationError::NonFinite {
                count: 2,
                first_index: 1,
                ..
            }
        ),
        "{e:?}"
    );
    // Integers have no NaN.
    let ids = input("ids", DataType::I64, &[2]);
    check_sample_tensor(&i64_tensor(&[2], &[-1, i64::MAX]), &ids, p).expect("ints");
}

#[test]
fn inconsistent_hand_built_tensor_is_refused() {
    let t = HostTensor {
        dtype: DataType::F32,
        shape: vec![4],
        data: vec![0; 5],
    };
    let e = check_sample_tensor(&t, &input("x", DataType::F32, &[4]), Path::new("mem"))
        .expect_err("5 bytes for 4 floats");
    assert!(
        matches!(e, CalibrationError::InconsistentTensor { .. }),
        "{e:?}"
    );
}

#[test]
fn malformed_npy() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("a.npy");
    std::fs::write(&file, b"this is not numpy").expect("write");
    let e = load(tmp.path(), &one_input()).expect_err("garbage");
    assert!(matches!(e, CalibrationError::Malformed { .. }), "{e:?}");
    assert!(!e.is_io());
    let msg = e.to_string();
    assert!(
        msg.contains(&shown(&file)) && msg.contains("input 'x'"),
        "{msg}"
    );
    assert!(msg.contains("magic"), "{msg}");
}

#[test]
fn byte_limit_refuses() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for name in ["a.npy", "b.npy", "c.npy"] {
        save(&tmp.path().join(name), &f32_tensor(&[1, 4], &[1.0; 4]));
    }
    // 3 samples of 16 bytes: exactly 48 fits.
    let set = load_calibration_dir(tmp.path(), &one_input(), 48).expect("fits");
    assert_eq!(set.samples.len(), 3);
    let e = load_calibration_dir(tmp.path(), &one_input(), 40).expect_err("over");
    assert!(matches!(e, CalibrationError::LimitExceeded { .. }), "{e:?}");
    assert!(e.is_limit() && !e.is_io());
    let msg = e.to_string();
    assert!(msg.contains("--limit calibration=SIZE"), "{msg}");
    assert!(
        msg.contains("limit of 40 B (32 B of earlier samples fit)"),
        "{msg}"
    );
    assert!(msg.contains(&shown(&tmp.path().join("c.npy"))), "{msg}");
}

#[test]
fn huge_file_is_refused_before_reading() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("huge.npy");
    // Sparse: 100 GiB of size, no disk used; reading it would exhaust memory.
    let f = std::fs::File::create(&file).expect("create");
    f.set_len(100 << 30).expect("set_len");
    let e = load_calibration_dir(tmp.path(), &one_input(), 1 << 30).expect_err("huge");
    assert!(matches!(e, CalibrationError::LimitExceeded { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&shown(&file)) && msg.contains("1 GiB"),
        "{msg}"
    );
}

/// Runs `f` on another thread and fails instead of hanging if it blocks.
fn within_seconds<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("loading blocked on a FIFO")
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo {} failed", path.display());
}

#[test]
fn fifo_is_refused_without_blocking() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fifo = tmp.path().join("a.npy");
    mkfifo(&fifo);
    let dir = tmp.path().to_path_buf();
    let e = within_seconds(move || load(&dir, &one_input())).expect_err("FIFO");
    assert!(
        matches!(e, CalibrationError::NotARegularFile { .. }),
        "{e:?}"
    );
    assert!(e.is_io());
    let msg = e.to_string();
    assert!(msg.contains(&shown(&fifo)) && msg.contains("FIFO"), "{msg}");

    // The same inside a sample directory.
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = tmp.path().join("s0");
    save(&s.join("input_ids.npy"), &i64_tensor(&[1, 1], &[1]));
    let fifo = s.join("attention_mask.npy");
    mkfifo(&fifo);
    let dir = tmp.path().to_path_buf();
    let e = within_seconds(move || load(&dir, &two_inputs())).expect_err("FIFO");
    assert!(
        matches!(e, CalibrationError::NotARegularFile { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains(&shown(&fifo)), "{e}");
}

#[test]
fn fifo_not_named_npy_is_ignored() {
    let tmp = tempfile::tempdir().expect("tempdir");
    mkfifo(&tmp.path().join("pipe"));
    save(&tmp.path().join("a.npy"), &f32_tensor(&[1, 1], &[1.0]));
    let dir = tmp.path().to_path_buf();
    let set = within_seconds(move || load(&dir, &one_input())).expect("valid");
    assert_eq!(set.samples.len(), 1);
}

#[test]
fn directory_named_like_an_input_file_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = tmp.path().join("s0");
    save(&s.join("input_ids.npy"), &i64_tensor(&[1, 1], &[1]));
    let d = s.join("attention_mask.npy");
    std::fs::create_dir(&d).expect("mkdir");
    let e = load(tmp.path(), &two_inputs()).expect_err("directory");
    assert!(
        matches!(
            e,
            CalibrationError::NotARegularFile {
                kind: "directory",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains(&shown(&d)), "{e}");
}

#[cfg(unix)]
#[test]
fn dangling_symlink_is_an_io_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let link = tmp.path().join("a.npy");
    std::os::unix::fs::symlink(tmp.path().join("gone"), &link).expect("symlink");
    let e = load(tmp.path(), &one_input()).expect_err("dangling");
    assert!(matches!(e, CalibrationError::Io { .. }), "{e:?}");
    assert!(e.is_io());
    assert!(e.to_string().contains(&shown(&link)), "{e}");
}

#[test]
fn model_without_inputs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let e = load(tmp.path(), &[]).expect_err("no inputs");
    assert!(matches!(e, CalibrationError::NoModelInputs), "{e:?}");
}
