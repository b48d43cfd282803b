//! Partitioned models end to end: the real MobileNetV2s compiled for every shipped device
//! profile run on their plans' simulated devices and reproduce the CPU-only build bit for
//! bit; the placement report explains every declined operation.

use std::path::{Path, PathBuf};

use nnc_compiler::emit::{self, EmitOptions};
use nnc_compiler::partition::{PartitionOptions, partition};
use nnc_compiler::pipeline::{LowerOptions, lower_file};
use nnc_formats::container::SectionKind;
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::device::load_profiles;
use nnc_formats::nn::Model;
use nnc_formats::npy::read_npy_file;
use nnc_formats::plan::{ExecutionPlan, PartitionMode, Preference};
use nnc_formats::test_support::shared_model;
use nnc_runtime::{Devices, LoadOptions, PreparedModel, SimulatedNpu};

fn profiles_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/devices"))
}

fn profile_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(profiles_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 3,
        "testdata/devices ships at least three profiles"
    );
    files
}

/// Compiles `model` (AES-128-CTR, which every shipped accelerator decrypts) for the given
/// profiles and mode; returns the file and its plan.
fn compile(
    model: &Model,
    key: &Key,
    profiles: &[PathBuf],
    mode: PartitionMode,
) -> (Vec<u8>, ExecutionPlan) {
    let mut loaded = Vec::new();
    for p in profiles {
        loaded.extend(load_profiles(p).unwrap());
    }
    let options = PartitionOptions {
        mode,
        preference: Preference::FastSingleAnswer,
        encryption: Some((Algorithm::Aes128, Mode::Ctr)),
        no_plaintext_fallback: false,
    };
    let (reordered, plan) = partition(model, &loaded, &options).unwrap();
    let bytes = emit::emit(
        &reordered,
        EmitOptions {
            envelope: Default::default(),
            key: Some(key),
            mode: Mode::Ctr,
            authenticate_only: false,
            reproducible: false,
            extra_sections: vec![(SectionKind::ExecutionPlan, plan.to_bytes())],
        },
    )
    .unwrap();
    (bytes, plan)
}

/// Runs a compiled file on one simulated device per plan device.
fn run(
    bytes: Vec<u8>,
    plan: &ExecutionPlan,
    key: &Key,
    input: &nnc_formats::tensor::HostTensor,
) -> Vec<u8> {
    let devices = Devices::new(
        plan.devices
            .iter()
            .map(|d| SimulatedNpu::new(d.name.clone()))
            .collect(),
    )
    .unwrap();
    devices.install_key(key.as_bytes());
    let model = PreparedModel::load_bytes(bytes, &devices, &LoadOptions::default()).unwrap();
    assert_eq!(model.plan().map(|p| p.steps.len()), Some(plan.steps.len()));
    let stats = model.device_stats();
    assert_eq!(
        stats.len(),
        plan.devices.len(),
        "one simulated device per plan device"
    );
    model
        .run(std::slice::from_ref(input))
        .unwrap()
        .remove(0)
        .data
}

fn check(model_name: &str, input_name: &str) -> bool {
    let Some(path) = shared_model(model_name) else {
        return false;
    };
    let model = lower_file(&path, &LowerOptions::default()).unwrap().model;
    let input = read_npy_file(path.with_file_name(input_name)).unwrap();
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let (cpu_bytes, cpu_plan) = compile(&model, &key, &[], PartitionMode::CpuOnly);
    assert_eq!(cpu_plan.steps.len(), 1);
    let reference = run(cpu_bytes, &cpu_plan, &key, &input);
    let mut multi_step = false;
    for profile in profile_files() {
        let (bytes, plan) = compile(
            &model,
            &key,
            std::slice::from_ref(&profile),
            PartitionMode::Fallback,
        );
        multi_step |= plan.steps.len() > 1;
        for placement in &plan.placements {
            for d in &placement.declined {
                assert!(
                    !d.rule.is_empty() && !d.detail.is_empty(),
                    "{model_name} on {}: operation {} declined without a rule",
                    profile.display(),
                    placement.operation
                );
            }
        }
        // Every operation a listed device does not run says why.
        let listed = load_profiles(&profile).unwrap();
        for placement in &plan.placements {
            let device = &plan.devices[placement.device as usize].name;
            for p in &listed {
                if &p.name != device {
                    assert!(
                        placement.declined.iter().any(|d| d.device == p.name)
                            || placement.reason.contains("transfer"),
                        "{model_name}: operation {} on {device}: no word on why {} did not take it",
                        placement.operation,
                        p.name
                    );
                }
            }
        }
        let out = run(bytes, &plan, &key, &input);
        assert!(
            out == reference,
            "{model_name} with {}: outputs differ from the CPU-only build",
            profile.display()
        );
    }
    multi_step
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn partitioned_mobilenets_match_the_cpu_only_build_bit_for_bit() {
    let a = check("mobilenet_v2.onnx", "mobilenet_v2.onnx.input.npy");
    let b = check(
        "mobilenet_v2_int8_logits.tflite",
        "mobilenet_v2_int8_logits.tflite.input.npy",
    );
    if shared_model("mobilenet_v2.onnx").is_some() {
        assert!(a || b, "no shipped profile yields a multi-step plan");
    }
}

#[test]
fn the_plan_survives_the_file() {
    // The plan survives the file: read back from the section, it is the plan compiled in.
    let tiny = lower_file(
        Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/models/tiny_cnn.onnx"
        )),
        &LowerOptions::default(),
    )
    .unwrap()
    .model;
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let (bytes, plan) = compile(
        &tiny,
        &key,
        &[profiles_dir().join("dsp-float.json")],
        PartitionMode::Fallback,
    );
    let container = nnc_formats::container::Container::parse(&bytes).unwrap();
    let stored = ExecutionPlan::from_bytes(
        container.section(SectionKind::ExecutionPlan).unwrap(),
        container.model.main.operations.len(),
        container.model.main.operands.len(),
    )
    .unwrap();
    assert_eq!(stored, plan);
}
