//! Control flow through the compiler's back end: the full pass pipeline on a model whose
//! IF branches read pooled constants (dead-code removal re-packs a pool read only in
//! part, so a branch's constant moves), then emission, loading on the simulated NPU and running.

use nnc_compiler::emit::{self, EmitOptions};
use nnc_compiler::passes::optimize;
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::{DataLocation, Lifetime, Operand, OperandType, OperationType, Pool};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_formats::test_support::control_flow::{IF_LEN, else_constant, if_model, then_constant};
use nnc_runtime::{LoadOptions, PreparedModel, SimulatedNpu};

/// [`if_model`] with a dead operation in main whose pooled constant lies before a
/// branch's constant in pool 0.
fn model_with_dead_constant() -> nnc_formats::nn::Model {
    let mut m = if_model();
    let shift = 192u64; // 160 bytes of constant, padded to 64
    let dead: Vec<f32> = vec![7.0; IF_LEN as usize];
    let Some(Pool::Bytes(pool)) = m.pools.get_mut(0) else {
        panic!("if_model pools its constants");
    };
    let mut front = bytemuck::cast_slice::<f32, u8>(&dead).to_vec();
    front.resize(shift as usize, 0);
    pool.splice(0..0, front);
    for g in std::iter::once(&mut m.main).chain(m.referenced.iter_mut()) {
        for o in &mut g.operands {
            if o.lifetime == Lifetime::ConstantReference && o.location.pool_index == 0 {
                o.location.offset += shift;
            }
        }
    }
    let k = m.add_operand(Operand {
        lifetime: Lifetime::ConstantReference,
        location: DataLocation {
            pool_index: 0,
            offset: 0,
            length: u64::from(IF_LEN) * 4,
        },
        ..Operand::new(OperandType::TensorFloat32, vec![IF_LEN])
    });
    let act = m.add_i32(0);
    let d = m.add_operand(Operand::new(OperandType::TensorFloat32, vec![IF_LEN]));
    // x is main's operand 1; the dead ADD goes before the IF.
    m.main.operations.insert(
        0,
        nnc_formats::nn::Operation {
            op_type: OperationType::Add,
            inputs: vec![1, k, act],
            outputs: vec![d],
            source: "dead".into(),
        },
    );
    nnc_formats::nn::validate(&m).unwrap();
    m
}

#[test]
fn passes_keep_referenced_subgraphs_intact_and_the_result_runs() {
    let mut m = model_with_dead_constant();
    let pool_before = m.pools[0].size();
    let reports = optimize(&mut m).unwrap();
    // The dead operation and its constant are gone; the branches' constants moved.
    assert_eq!(m.main.operations.len(), 1);
    assert_eq!(m.main.operations[0].op_type, OperationType::If);
    assert!(m.pools[0].size() < pool_before);
    assert!(
        reports
            .iter()
            .any(|r| r.pass == "dead-code" && r.changes.contains_key("constant bytes released"))
    );
    assert_eq!(m.referenced.len(), 2);
    let then_g = &m.referenced[0];
    let c = &then_g.operands[then_g.operations[0].inputs[1] as usize];
    let bytes = nnc_formats::nn::model::constant_bytes(c, &m.operand_values, &m.pools).unwrap();
    assert_eq!(bytes, bytemuck::cast_slice::<f32, u8>(&then_constant()));

    let key = Key::generate(Algorithm::Aes128).unwrap();
    let file = emit::emit(
        &m,
        EmitOptions {
            envelope: Default::default(),
            key: Some(&key),
            mode: Mode::Cbc,
            authenticate_only: false,
            reproducible: true,
            extra_sections: Vec::new(),
        },
    )
    .unwrap();
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(key.as_bytes());
    let model = PreparedModel::load_bytes(file, &npu, &LoadOptions::default()).unwrap();
    let x: Vec<f32> = (0..IF_LEN).map(|i| i as f32 * 0.5 - 3.0).collect();
    let run = |cond: bool| {
        model
            .run(&[
                HostTensor::new(DataType::Bool, vec![1], vec![u8::from(cond)]).unwrap(),
                HostTensor::from_f32(vec![IF_LEN as usize], &x).unwrap(),
            ])
            .unwrap()
            .remove(0)
    };
    let then_out = run(true);
    let expected: Vec<f32> = x.iter().zip(then_constant()).map(|(a, b)| a + b).collect();
    assert_eq!(then_out.to_f32_vec().unwrap(), expected);
    let else_out = run(false);
    let mut expected: Vec<f32> = x.iter().zip(else_constant()).map(|(a, b)| a * b).collect();
    expected.extend_from_slice(&x);
    assert_eq!(else_out.shape, vec![2 * IF_LEN as usize]);
    assert_eq!(else_out.to_f32_vec().unwrap(), expected);
}

/// A partitioned IF model: the accelerator declaring control flow runs the IF, and the
/// weights of both branches are decrypted by that device (the plan lists main's
/// operations; the runtime maps each subgraph's operations to its IF's device).
#[test]
fn a_partitioned_if_runs_its_branches_on_the_if_device() {
    use nnc_compiler::partition::{PartitionOptions, partition};
    use nnc_formats::container::SectionKind;
    use nnc_formats::device::DeviceProfile;
    use nnc_runtime::Devices;
    let profile = DeviceProfile::from_json(
        r#"{"name": "fast", "type": "accelerator", "version": "1", "control_flow": true,
            "default_performance": {"exec_time": 0.5, "power_usage": 0.5},
            "operations": [{"types": ["ADD", "MUL", "CONCATENATION"]}],
            "decrypts": [{"algorithm": "aes128", "modes": ["ctr"]}]}"#,
        "fast.json",
    )
    .unwrap();
    let options = PartitionOptions {
        encryption: Some((Algorithm::Aes128, Mode::Ctr)),
        ..PartitionOptions::default()
    };
    let (model, plan) = partition(&if_model(), &[profile], &options).unwrap();
    assert_eq!(plan.steps.len(), 1);
    assert_eq!(plan.devices[plan.steps[0].device as usize].name, "fast");
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let file = emit::emit(
        &model,
        EmitOptions {
            envelope: Default::default(),
            key: Some(&key),
            mode: Mode::Ctr,
            authenticate_only: false,
            reproducible: false,
            extra_sections: vec![(SectionKind::ExecutionPlan, plan.to_bytes())],
        },
    )
    .unwrap();
    let devices = Devices::new(
        plan.devices
            .iter()
            .map(|d| SimulatedNpu::new(d.name.clone()))
            .collect(),
    )
    .unwrap();
    devices.install_key(key.as_bytes());
    let loaded = PreparedModel::load_bytes(file, &devices, &LoadOptions::default()).unwrap();
    let x: Vec<f32> = (0..IF_LEN).map(|i| i as f32).collect();
    let out = loaded
        .run(&[
            HostTensor::new(DataType::Bool, vec![1], vec![0]).unwrap(),
            HostTensor::from_f32(vec![IF_LEN as usize], &x).unwrap(),
        ])
        .unwrap();
    assert_eq!(out[0].to_f32_vec().unwrap()[3], x[3] * else_constant()[3]);
    let stats = loaded.device_stats();
    let fast = stats.iter().find(|(n, _)| n == "fast").unwrap();
    assert!(fast.1.decryptions >= 2, "{stats:?}");
    for (name, s) in &stats {
        if name != "fast" {
            assert_eq!(s.decryptions, 0, "{name}");
        }
    }
}

fn loop_inputs() -> Vec<HostTensor> {
    let i32t = |v: i32| HostTensor::new(DataType::I32, vec![1], v.to_le_bytes().to_vec()).unwrap();
    vec![
        i32t(0),
        HostTensor::from_f32(vec![4], &[0.0; 4]).unwrap(),
        HostTensor::from_f32(vec![4], &[1.0, 2.0, 3.0, 4.0]).unwrap(),
        i32t(6),
    ]
}

/// A compilation cache for a control-flow model: the second load is a hit (main's
/// program and weights from the cache; the subgraphs' weights decrypted and checked
/// again), and it computes the same.
#[test]
fn control_flow_models_use_the_compilation_cache() {
    use nnc_formats::container::{WriteOptions, write};
    use nnc_formats::crypto::{Algorithm, Key, Mode};
    use nnc_runtime::cache::{CacheConfig, CacheOutcome};
    use nnc_runtime::{LoadOptions, PreparedModel, SimulatedNpu};
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let file = write(
        &nnc_formats::test_support::control_flow::nested_model(),
        &WriteOptions {
            envelope: Default::default(),
            key: Some(&key),
            mode: Mode::Cbc,
            authenticate_only: false,
            reproducible: false,
            producer: "nnc test".into(),
            arena: None,
            extra_sections: Vec::new(),
        },
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = LoadOptions {
        cache: Some(CacheConfig {
            dir: dir.path().to_path_buf(),
            token: None,
        }),
        ..LoadOptions::default()
    };
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(key.as_bytes());
    let first = PreparedModel::load_bytes(file.clone(), &npu, &options).unwrap();
    assert_eq!(first.cache_report().outcome, CacheOutcome::Miss);
    let expected = first.run(&loop_inputs()).unwrap();
    let second = PreparedModel::load_bytes(file, &npu, &options).unwrap();
    assert_eq!(second.cache_report().outcome, CacheOutcome::Hit);
    assert!(
        second.cache_report().warnings.is_empty(),
        "{:?}",
        second.cache_report().warnings
    );
    assert_eq!(second.run(&loop_inputs()).unwrap(), expected);
}
