//! IF and WHILE: branches chosen at run time (outputs of different shapes), a counting
//! loop with input-output, state-only and input-only values, an IF nested in a WHILE
//! body, the loop timeout (an infinite loop fails in about the timeout) and its maximum.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nnc_formats::tensor::{DataType, HostTensor};
use nnc_formats::test_support::control_flow::{
    IF_LEN, else_constant, if_model, infinite_model, nested_model, then_constant, while_model,
};
use nnc_runtime::RuntimeError;
use nnc_runtime::exec::{ExecuteOptions, HostWeights, PrepareOptions, Program};

fn prepare(model: &nnc_formats::nn::Model) -> Program {
    let weights = Arc::new(HostWeights::new(model).unwrap());
    Program::prepare(model, weights, &PrepareOptions::default()).unwrap()
}

fn bool_tensor(v: bool) -> HostTensor {
    HostTensor::new(DataType::Bool, vec![1], vec![u8::from(v)]).unwrap()
}

fn i32_tensor(values: &[i32]) -> HostTensor {
    HostTensor::new(
        DataType::I32,
        vec![values.len()],
        bytemuck::cast_slice(values).to_vec(),
    )
    .unwrap()
}

fn i32_values(t: &HostTensor) -> Vec<i32> {
    t.data
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn x_values() -> Vec<f32> {
    (0..IF_LEN).map(|i| 1.0 - i as f32 * 0.25).collect()
}

#[test]
fn if_runs_the_then_branch() {
    let program = prepare(&if_model());
    let x = x_values();
    let out = program
        .execute_host(&[
            bool_tensor(true),
            HostTensor::from_f32(vec![IF_LEN as usize], &x).unwrap(),
        ])
        .unwrap();
    let expected: Vec<f32> = x.iter().zip(then_constant()).map(|(a, b)| a + b).collect();
    assert_eq!(out[0].shape, vec![IF_LEN as usize]);
    assert_eq!(out[0].to_f32_vec().unwrap(), expected);
}

#[test]
fn if_runs_the_else_branch_with_another_output_shape() {
    let program = prepare(&if_model());
    let x = x_values();
    let out = program
        .execute_host(&[
            bool_tensor(false),
            HostTensor::from_f32(vec![IF_LEN as usize], &x).unwrap(),
        ])
        .unwrap();
    let mut expected: Vec<f32> = x.iter().zip(else_constant()).map(|(a, b)| a * b).collect();
    expected.extend_from_slice(&x);
    assert_eq!(out[0].shape, vec![2 * IF_LEN as usize]);
    assert_eq!(out[0].to_f32_vec().unwrap(), expected);
}

fn loop_inputs(limit: i32) -> Vec<HostTensor> {
    vec![
        i32_tensor(&[0]),
        HostTensor::from_f32(vec![4], &[0.0; 4]).unwrap(),
        HostTensor::from_f32(vec![4], &[1.0, -2.0, 0.5, 3.0]).unwrap(),
        i32_tensor(&[limit]),
    ]
}

#[test]
fn while_counts_to_the_limit() {
    let program = prepare(&while_model());
    let out = program.execute_host(&loop_inputs(10)).unwrap();
    assert_eq!(out.len(), 2, "only the input-output values are outputs");
    assert_eq!(i32_values(&out[0]), vec![10]);
    // acc = sum of s * 2^j for j < 10 = 1023 s (the state-only s doubles each time).
    assert_eq!(
        out[1].to_f32_vec().unwrap(),
        vec![1023.0, -2046.0, 511.5, 3069.0]
    );
    // A condition false from the start returns the initial values.
    let out = program.execute_host(&loop_inputs(0)).unwrap();
    assert_eq!(i32_values(&out[0]), vec![0]);
    assert_eq!(out[1].to_f32_vec().unwrap(), vec![0.0; 4]);
}

#[test]
fn if_nested_in_a_while_body() {
    let program = prepare(&nested_model());
    let out = program.execute_host(&loop_inputs(6)).unwrap();
    assert_eq!(i32_values(&out[0]), vec![6]);
    // i = 0, 1, 2 add s; i = 3, 4, 5 add 10 s: 33 s.
    let s = [1.0f32, -2.0, 0.5, 3.0];
    let expected: Vec<f32> = s.iter().map(|v| 33.0 * v).collect();
    assert_eq!(out[1].to_f32_vec().unwrap(), expected);
}

#[test]
fn an_infinite_loop_misses_the_deadline() {
    let program = prepare(&infinite_model());
    let options = ExecuteOptions::default()
        .with_loop_timeout(Duration::from_millis(50))
        .unwrap();
    let start = Instant::now();
    let err = program
        .execute_host_with(&loop_inputs(10), &options)
        .unwrap_err();
    let elapsed = start.elapsed();
    assert!(
        matches!(
            err,
            RuntimeError::LoopTimeout { timeout, .. } if timeout == Duration::from_millis(50)
        ),
        "{err}"
    );
    assert!(err.to_string().contains("missed the deadline"), "{err}");
    assert!(elapsed >= Duration::from_millis(50), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
}

#[test]
fn the_loop_timeout_is_at_most_15_seconds() {
    let too_long = ExecuteOptions::default().with_loop_timeout(Duration::from_millis(15_001));
    assert!(matches!(
        too_long,
        Err(RuntimeError::LoopTimeoutTooLong { max, .. }) if max == Duration::from_secs(15)
    ));
    ExecuteOptions::default()
        .with_loop_timeout(Duration::from_secs(15))
        .unwrap();
    // Set directly, it is refused when the execution starts.
    let program = prepare(&while_model());
    let options = ExecuteOptions {
        loop_timeout: Some(Duration::from_secs(16)),
        ..ExecuteOptions::default()
    };
    let err = program
        .execute_host_with(&loop_inputs(1), &options)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("a loop timeout of 16000 ms is above the maximum of 15000 ms"),
        "{err}"
    );
}

#[test]
fn an_if_condition_must_hold_one_value() {
    let program = prepare(&if_model());
    let err = program
        .execute_host(&[
            HostTensor::new(DataType::Bool, vec![2], vec![1, 0]).unwrap(),
            HostTensor::from_f32(vec![IF_LEN as usize], &x_values()).unwrap(),
        ])
        .unwrap_err();
    assert!(err.to_string().contains("input 0"), "{err}");
    assert!(err.to_string().contains("[2]"), "{err}");
}

/// The models written as encrypted `.nnc` files and loaded on the simulated NPU: the
/// referenced subgraphs' weights are decrypted by the device like main's.
#[test]
fn control_flow_models_run_from_encrypted_files() {
    use nnc_formats::container::{WriteOptions, write};
    use nnc_formats::crypto::{Algorithm, Key, Mode};
    use nnc_runtime::{LoadOptions, PreparedModel, SimulatedNpu};
    let key = Key::generate(Algorithm::Sm4).unwrap();
    let options = WriteOptions {
        envelope: Default::default(),
        key: Some(&key),
        mode: Mode::Ctr,
        authenticate_only: false,
        reproducible: false,
        producer: "nnc test".into(),
        arena: None,
        extra_sections: Vec::new(),
    };
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(key.as_bytes());
    let load = |m: &nnc_formats::nn::Model| {
        PreparedModel::load_bytes(write(m, &options).unwrap(), &npu, &LoadOptions::default())
            .unwrap()
    };
    let x = x_values();
    let model = load(&if_model());
    for (cond, len) in [(true, IF_LEN), (false, 2 * IF_LEN)] {
        let out = model
            .run(&[
                bool_tensor(cond),
                HostTensor::from_f32(vec![IF_LEN as usize], &x).unwrap(),
            ])
            .unwrap();
        assert_eq!(out[0].shape, vec![len as usize]);
        let first = if cond {
            x[1] + then_constant()[1]
        } else {
            x[1] * else_constant()[1]
        };
        assert_eq!(out[0].to_f32_vec().unwrap()[1], first);
    }
    // Every field was decrypted by the device (main has no weights of its own).
    assert!(model.cache_stats().decryptions >= 2);
    let model = load(&while_model());
    let out = model.run(&loop_inputs(10)).unwrap();
    assert_eq!(i32_values(&out[0]), vec![10]);
    assert_eq!(out[1].to_f32_vec().unwrap()[0], 1023.0);
    let model = load(&nested_model());
    let out = model.run(&loop_inputs(6)).unwrap();
    assert_eq!(out[1].to_f32_vec().unwrap()[0], 33.0);
    // The loop timeout through the loaded model.
    let model = load(&infinite_model());
    let options = ExecuteOptions::default()
        .with_loop_timeout(Duration::from_millis(30))
        .unwrap();
    let err = model.run_with(&loop_inputs(1), &options).unwrap_err();
    assert!(matches!(err, RuntimeError::LoopTimeout { .. }), "{err}");
}

#[test]
fn control_flow_nested_as_deep_as_allowed_runs() {
    use nnc_formats::nn::validate::MAX_CONTROL_FLOW_DEPTH;
    use nnc_formats::test_support::control_flow::if_chain;
    let program = prepare(&if_chain(MAX_CONTROL_FLOW_DEPTH));
    let out = program
        .execute_host(&[
            bool_tensor(true),
            HostTensor::from_f32(vec![2], &[1.5, -4.0]).unwrap(),
        ])
        .unwrap();
    assert_eq!(out[0].to_f32_vec().unwrap(), vec![3.0, -8.0]);
    // One level more is refused at preparation.
    let weights = Arc::new(HostWeights::new(&if_chain(MAX_CONTROL_FLOW_DEPTH + 1)).unwrap());
    let err = Program::prepare(
        &if_chain(MAX_CONTROL_FLOW_DEPTH + 1),
        weights,
        &PrepareOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("nests 33 levels deep"), "{err}");
}

#[test]
fn an_error_inside_a_subgraph_names_the_subgraph() {
    // The then branch declares its input [40] but the IF passes a value the model
    // declares [0] (known only at run time): a [3] value fails inside subgraph 1.
    let mut m = if_model();
    m.main.operands[1].dimensions = vec![0];
    m.input_info[1].dims = vec![0];
    let program = prepare(&m);
    let err = program
        .execute_host(&[
            bool_tensor(true),
            HostTensor::from_f32(vec![3], &[1.0, 2.0, 3.0]).unwrap(),
        ])
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::InSubgraph { subgraph: 1, .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("operation 0 (IF from node 'if'): in subgraph 1: input 0"),
        "{text}"
    );
}

/// Altered subgraph sections (resealed so they authenticate) either fail to load with an
/// error or load and run (or fail) without a panic, within the loop timeout.
#[test]
fn altered_subgraph_sections_never_panic_the_runtime() {
    use nnc_formats::container::{Container, SectionKind, WriteOptions, reseal, write};
    use nnc_runtime::{LoadOptions, PreparedModel, SimulatedNpu};
    let options = WriteOptions {
        envelope: Default::default(),
        key: None,
        mode: nnc_formats::crypto::Mode::Ctr,
        authenticate_only: false,
        reproducible: true,
        producer: "nnc test".into(),
        arena: None,
        extra_sections: Vec::new(),
    };
    let bytes = write(&nested_model(), &options).unwrap();
    let c = Container::parse(&bytes).unwrap();
    let s = c
        .sections
        .iter()
        .find(|s| s.kind == SectionKind::Subgraphs as u32)
        .unwrap();
    let (start, end) = (s.offset as usize, (s.offset + s.length) as usize);
    let npu = SimulatedNpu::new("npu0");
    let run = ExecuteOptions::default()
        .with_loop_timeout(Duration::from_millis(5))
        .unwrap();
    let mut ran = 0;
    for at in start..end {
        for value in [0u8, bytes[at] ^ 0x01] {
            if value == bytes[at] {
                continue;
            }
            let mut bad = bytes.clone();
            bad[at] = value;
            reseal(&mut bad, None).unwrap();
            let Ok(model) = PreparedModel::load_bytes(bad, &npu, &LoadOptions::default()) else {
                continue;
            };
            let _ = model.run_with(&loop_inputs(4), &run);
            ran += 1;
        }
    }
    assert!(ran > 0);
}
