//! Partitioning on hand-built graphs whose right plan is known, and on MobileNetV2 with
//! the shipped device profiles.

use std::path::PathBuf;

use nnc_compiler::CompileError;
use nnc_compiler::partition::{PartitionOptions, partition};
use nnc_formats::crypto::{Algorithm, Mode};
use nnc_formats::device::{
    DecryptSupport, DeviceKind, DeviceProfile, OperationRule, PerformanceInfo, TransferCost,
    load_profiles,
};
use nnc_formats::nn::ops::{InputView, infer};
use nnc_formats::nn::{IoInfo, Lifetime, Model, Operand, OperandType, OperationType, validate};
use nnc_formats::plan::{ExecutionPlan, PartitionMode, Preference};
use nnc_formats::tensor::DataType;

// ---- graph building ----

/// A float32 graph under construction.
struct Graph {
    m: Model,
}

impl Graph {
    fn new() -> Graph {
        Graph {
            m: Model::default(),
        }
    }

    fn input(&mut self, dims: &[u32]) -> u32 {
        let mut o = Operand::new(OperandType::TensorFloat32, dims.to_vec());
        o.lifetime = Lifetime::SubgraphInput;
        let i = self.m.add_operand(o);
        self.m.main.inputs.push(i);
        self.m.input_info.push(IoInfo {
            name: format!("in{i}"),
            dtype: DataType::F32,
            dims: dims.to_vec(),
        });
        i
    }

    /// Adds `op` over `inputs`; its single output is a new temporary of inferred shape.
    fn op(&mut self, op: OperationType, inputs: Vec<u32>, name: &str) -> u32 {
        let shape = {
            let views: Vec<InputView> = inputs
                .iter()
                .map(|&i| InputView {
                    operand: &self.m.main.operands[i as usize],
                    value: self.m.constant_bytes(i),
                })
                .collect();
            let template = Operand::new(OperandType::TensorFloat32, vec![]);
            infer(op, &views, &[&template]).unwrap().remove(0)
        };
        let out = self
            .m
            .add_operand(Operand::new(shape.operand_type, shape.dimensions));
        self.m.add_operation(op, inputs, vec![out], name);
        out
    }

    fn constant(&mut self, dims: &[u32]) -> u32 {
        let n: u32 = dims.iter().product();
        self.m.add_f32_tensor(dims.to_vec(), &vec![0.5; n as usize])
    }

    /// x + constant (reads a weight).
    fn add_const(&mut self, x: u32, name: &str) -> u32 {
        let dims = self.m.main.operands[x as usize].dimensions.clone();
        let c = self.constant(&dims);
        let act = self.m.add_i32(0);
        self.op(OperationType::Add, vec![x, c, act], name)
    }

    fn unary(&mut self, op: OperationType, x: u32, name: &str) -> u32 {
        self.op(op, vec![x], name)
    }

    /// k x k convolution, explicit zero padding, stride 1.
    fn conv(&mut self, x: u32, k: u32, cout: u32, name: &str) -> u32 {
        let cin = *self.m.main.operands[x as usize].dimensions.last().unwrap();
        let filter = self.constant(&[cout, k, k, cin]);
        let bias = self.constant(&[cout]);
        let mut inputs = vec![x, filter, bias];
        for v in [0, 0, 0, 0, 1, 1, 0] {
            inputs.push(self.m.add_i32(v));
        }
        self.op(OperationType::Conv2d, inputs, name)
    }

    fn finish(mut self, outputs: &[u32]) -> Model {
        for &o in outputs {
            self.m.main.operands[o as usize].lifetime = Lifetime::SubgraphOutput;
            self.m.main.outputs.push(o);
            self.m.output_info.push(IoInfo {
                name: format!("out{o}"),
                dtype: DataType::F32,
                dims: self.m.main.operands[o as usize].dimensions.clone(),
            });
        }
        validate(&self.m).unwrap();
        self.m
    }
}

// ---- devices ----

/// A float accelerator running `ops` at `exec_time`, decrypting nothing, moving data for
/// free unless a test says otherwise.
fn accel(name: &str, exec_time: f64, ops: &[&str]) -> DeviceProfile {
    DeviceProfile {
        name: name.into(),
        kind: DeviceKind::Accelerator,
        version: "1".into(),
        performance: [(
            "TENSOR_FLOAT32".to_string(),
            PerformanceInfo {
                exec_time,
                power_usage: exec_time,
            },
        )]
        .into(),
        default_performance: None,
        operations: vec![OperationRule {
            types: ops.iter().map(|s| s.to_string()).collect(),
            operand_types: Some(vec!["TENSOR_FLOAT32".into()]),
            ..OperationRule::default()
        }],
        decrypts: Vec::new(),
        transfer: TransferCost::default(),
        extensions: Vec::new(),
        ..DeviceProfile::cpu()
    }
}

fn options(mode: PartitionMode) -> PartitionOptions {
    PartitionOptions {
        mode,
        ..PartitionOptions::default()
    }
}

fn run(
    model: &Model,
    devices: &[DeviceProfile],
    options: &PartitionOptions,
) -> (Model, ExecutionPlan) {
    let (reordered, plan) = partition(model, devices, options).unwrap();
    check_plan(model, &reordered, &plan);
    (reordered, plan)
}

/// What every plan must satisfy, whatever the devices.
fn check_plan(original: &Model, reordered: &Model, plan: &ExecutionPlan) {
    validate(reordered).unwrap();
    plan.check(
        reordered.main.operations.len(),
        reordered.main.operands.len(),
    )
    .unwrap();
    let bytes = plan.to_bytes();
    ExecutionPlan::from_bytes(
        &bytes,
        reordered.main.operations.len(),
        reordered.main.operands.len(),
    )
    .unwrap();
    // Operands are untouched; operations are a permutation.
    assert_eq!(reordered.main.operands, original.main.operands);
    assert_eq!(reordered.main.inputs, original.main.inputs);
    assert_eq!(reordered.main.outputs, original.main.outputs);
    let mut a: Vec<String> = original
        .main
        .operations
        .iter()
        .map(|o| format!("{o:?}"))
        .collect();
    let mut b: Vec<String> = reordered
        .main
        .operations
        .iter()
        .map(|o| format!("{o:?}"))
        .collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    let step_of = plan.step_of_operations();
    for (i, p) in plan.placements.iter().enumerate() {
        assert_eq!(p.op_type, reordered.main.operations[i].op_type.name());
        assert_eq!(p.source, reordered.main.operations[i].source);
        assert_eq!(p.device, plan.steps[step_of[i]].device, "placement {i}");
        assert!(!p.reason.is_empty());
        for d in &p.declined {
            assert!(!d.rule.is_empty() && !d.detail.is_empty(), "{d:?}");
        }
    }
}

/// Device name of each step with its operations' source names.
fn summary(model: &Model, plan: &ExecutionPlan) -> Vec<(String, Vec<String>)> {
    plan.steps
        .iter()
        .map(|s| {
            (
                plan.devices[s.device as usize].name.clone(),
                s.operations
                    .iter()
                    .map(|&o| model.main.operations[o as usize].source.clone())
                    .collect(),
            )
        })
        .collect()
}

fn steps(list: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
    list.iter()
        .map(|(d, ops)| (d.to_string(), ops.iter().map(|s| s.to_string()).collect()))
        .collect()
}

fn placement<'a>(
    plan: &'a ExecutionPlan,
    model: &Model,
    source: &str,
) -> &'a nnc_formats::plan::Placement {
    let i = model
        .main
        .operations
        .iter()
        .position(|o| o.source == source)
        .unwrap();
    &plan.placements[i]
}

/// The message of a user-facing partition failure: a placement nothing satisfies, or an
/// unusable profile.
fn options_error(result: Result<(Model, ExecutionPlan), CompileError>) -> String {
    match result {
        Err(CompileError::Options(m)) | Err(CompileError::Placement(m)) => m,
        Err(other) => panic!("expected a placement or options error, got {other}"),
        Ok(_) => panic!("expected an error"),
    }
}

// ---- the reference algorithm ----

/// x -> relu -> tanh -> out
fn chain() -> Model {
    let mut g = Graph::new();
    let x = g.input(&[1, 8]);
    let a = g.unary(OperationType::Relu, x, "relu");
    let b = g.unary(OperationType::Tanh, a, "tanh");
    g.finish(&[b])
}

#[test]
fn extension_operations_run_only_where_the_extension_is_declared() {
    let mut g = Graph::new();
    let x = g.input(&[1, 8]);
    let a = g.unary(OperationType::Relu, x, "relu");
    let b = g.unary(OperationType::Erf, a, "erf");
    let m = g.finish(&[b]);
    // The wildcard covers every NN operation, not the extension's.
    let fast = accel("fast", 0.5, &["*"]);
    let (r, plan) = run(
        &m,
        std::slice::from_ref(&fast),
        &PartitionOptions::default(),
    );
    assert_eq!(
        summary(&r, &plan),
        steps(&[("fast", &["relu"]), ("cpu", &["erf"])])
    );
    let erf = placement(&plan, &r, "erf");
    assert_eq!(erf.declined.len(), 1);
    assert_eq!(erf.declined[0].rule, "extensions");
    assert!(
        erf.declined[0].detail.contains("org.nnc.core"),
        "{}",
        erf.declined[0].detail
    );
    // Declared, the device takes it.
    let declaring = DeviceProfile {
        extensions: vec!["org.nnc.core".into()],
        ..fast
    };
    let (r, plan) = run(&m, &[declaring], &PartitionOptions::default());
    assert_eq!(summary(&r, &plan), steps(&[("fast", &["relu", "erf"])]));
}

#[test]
fn ties_go_to_the_cpu() {
    let m = chain();
    let twin = accel("twin", 1.0, &["RELU", "TANH"]);
    let (r, plan) = run(
        &m,
        std::slice::from_ref(&twin),
        &PartitionOptions::default(),
    );
    assert_eq!(summary(&r, &plan), steps(&[("cpu", &["relu", "tanh"])]));
    let p = placement(&plan, &r, "relu");
    assert_eq!(
        p.reason,
        "exec_time for TENSOR_FLOAT32: cpu 1, twin 1; a tie goes to the CPU"
    );
    assert!(p.declined.is_empty());
    // Listed after the CPU or before it: the CPU still wins the tie.
    let (r, plan) = run(
        &m,
        &[DeviceProfile::cpu(), twin],
        &PartitionOptions::default(),
    );
    assert_eq!(summary(&r, &plan), steps(&[("cpu", &["relu", "tanh"])]));
}

#[test]
fn one_device_for_everything_is_a_single_step() {
    let m = chain();
    let fast = accel("fast", 0.5, &["RELU", "TANH"]);
    let (r, plan) = run(&m, &[fast], &PartitionOptions::default());
    assert_eq!(summary(&r, &plan), steps(&[("fast", &["relu", "tanh"])]));
    assert_eq!(plan.devices.len(), 1, "only used devices are listed");
    assert_eq!(plan.devices[0].kind, "accelerator");
    assert_eq!(plan.steps[0].inputs, m.main.inputs);
    assert_eq!(plan.steps[0].outputs, m.main.outputs);
    assert_eq!(
        placement(&plan, &r, "tanh").reason,
        "exec_time for TENSOR_FLOAT32: fast 0.5, cpu 1; lowest wins"
    );
}

#[test]
fn preference_picks_exec_time_or_power_usage() {
    let m = chain();
    let mut frugal = accel("frugal", 2.0, &["RELU", "TANH"]);
    frugal.performance.insert(
        "TENSOR_FLOAT32".into(),
        PerformanceInfo {
            exec_time: 2.0,
            power_usage: 0.3,
        },
    );
    let devices = [frugal];
    for (preference, device) in [
        (Preference::FastSingleAnswer, "cpu"),
        (Preference::SustainedSpeed, "cpu"),
        (Preference::LowPower, "frugal"),
    ] {
        let o = PartitionOptions {
            preference,
            ..PartitionOptions::default()
        };
        let (r, plan) = run(&m, &devices, &o);
        assert_eq!(
            summary(&r, &plan),
            steps(&[(device, &["relu", "tanh"])]),
            "{preference:?}"
        );
        assert_eq!(plan.preference, preference);
    }
}

#[test]
fn relaxed_models_use_relaxed_performance() {
    let mut m = chain();
    let mut dev = accel("half", 1.5, &["RELU", "TANH"]);
    dev.relaxed_performance.insert(
        "TENSOR_FLOAT32".into(),
        PerformanceInfo {
            exec_time: 0.5,
            power_usage: 0.5,
        },
    );
    let devices = [dev];
    let (r, plan) = run(&m, &devices, &PartitionOptions::default());
    assert_eq!(summary(&r, &plan)[0].0, "cpu");
    m.relax_computation_float32_to_float16 = true;
    let (r, plan) = run(&m, &devices, &PartitionOptions::default());
    assert_eq!(summary(&r, &plan)[0].0, "half");
    assert!(
        plan.placements[0].reason.contains("(relaxed to float16)"),
        "{}",
        plan.placements[0].reason
    );
}

#[test]
fn unsupported_operand_types_fall_back_with_the_rule() {
    let m = chain();
    let npu = load_profiles(&testdata("npu-int8.json")).unwrap();
    let (r, plan) = run(&m, &npu, &PartitionOptions::default());
    assert_eq!(summary(&r, &plan), steps(&[("cpu", &["relu", "tanh"])]));
    let relu = placement(&plan, &r, "relu");
    assert_eq!(
        relu.reason,
        "fallback to the CPU: no other device supports it"
    );
    assert_eq!(relu.declined.len(), 1);
    assert_eq!(relu.declined[0].device, "npu-int8");
    assert_eq!(relu.declined[0].rule, "operand_types");
    assert_eq!(
        relu.declined[0].detail,
        "input 0 is TENSOR_FLOAT32, not TENSOR_QUANT8_ASYMM_SIGNED or TENSOR_QUANT8_ASYMM"
    );
    // The NPU lists TANH, for int8 operands only.
    let tanh = placement(&plan, &r, "tanh");
    assert_eq!(tanh.declined[0].rule, "operand_types");
    // A listed CPU profile that declines too: the CPU runs it anyway (the runtime's CPU
    // runs everything), and says so.
    let mut narrow = DeviceProfile::cpu();
    narrow.operations[0].types = vec!["RELU".into()];
    let (r, plan) = run(&m, &[narrow], &PartitionOptions::default());
    assert_eq!(summary(&r, &plan), steps(&[("cpu", &["relu", "tanh"])]));
    let tanh = placement(&plan, &r, "tanh");
    assert_eq!(
        tanh.reason,
        "fallback: no device supports it, not even the CPU profile"
    );
    assert_eq!(tanh.declined[0].device, "cpu");
}

#[test]
fn a_7x7_convolution_is_declined_by_the_5x5_rule() {
    let mut g = Graph::new();
    let x = g.input(&[1, 16, 16, 4]);
    let a = g.conv(x, 3, 8, "conv3");
    let b = g.conv(a, 7, 8, "conv7");
    let m = g.finish(&[b]);
    let mut dev = accel("npu", 0.25, &["CONV_2D"]);
    dev.operations[0].max_kernel_size = Some(5);
    let (r, plan) = run(&m, &[dev], &PartitionOptions::default());
    assert_eq!(
        summary(&r, &plan),
        steps(&[("npu", &["conv3"]), ("cpu", &["conv7"])])
    );
    let p = placement(&plan, &r, "conv7");
    assert_eq!(p.declined.len(), 1);
    assert_eq!(
        (p.declined[0].rule.as_str(), p.declined[0].detail.as_str()),
        ("max_kernel_size", "kernel 7x7 exceeds 5x5")
    );
    assert_eq!(p.reason, "fallback to the CPU: no other device supports it");
}

#[test]
fn strict_mode_lists_every_unsupported_operation_with_each_rule() {
    let mut g = Graph::new();
    let x = g.input(&[1, 16, 16, 4]);
    let a = g.conv(x, 7, 8, "big_conv");
    let b = g.unary(OperationType::Relu, a, "relu");
    let c = g.unary(OperationType::Logistic, b, "sigmoid");
    let m = g.finish(&[c]);
    let mut npu = accel("npu", 0.25, &["CONV_2D", "RELU"]);
    npu.operations[0].max_kernel_size = Some(5);
    let dsp = accel("dsp", 0.5, &["RELU"]);
    let err = options_error(partition(
        &m,
        &[npu.clone(), dsp.clone()],
        &options(PartitionMode::Strict),
    ));
    assert_eq!(
        err,
        "strict partitioning: 2 of 3 operations are supported by no listed device (npu, dsp); list a device that supports them, or allow CPU fallback:
  npu declined 2 of 3 operations; 1 by its max_kernel_size rule (kernel 7x7 exceeds 5x5)
  dsp declined 2 of 3 operations; 2 by its operations rule (e.g. CONV_2D is not among its supported operations)
  - operation 0 CONV_2D (node 'big_conv'):
      npu: max_kernel_size: kernel 7x7 exceeds 5x5
      dsp: operations: CONV_2D is not among its supported operations
  - operation 2 LOGISTIC (node 'sigmoid'):
      npu: operations: LOGISTIC is not among its supported operations
      dsp: operations: LOGISTIC is not among its supported operations"
    );
    // The CPU competes only when listed.
    let (r, plan) = run(
        &m,
        &[npu, dsp, DeviceProfile::cpu()],
        &options(PartitionMode::Strict),
    );
    assert_eq!(
        summary(&r, &plan),
        steps(&[
            ("cpu", &["big_conv"]),
            ("npu", &["relu"]),
            ("cpu", &["sigmoid"])
        ])
    );
    assert!(
        options_error(partition(&m, &[], &options(PartitionMode::Strict)))
            .contains("at least one device")
    );
}

#[test]
fn cpu_only_mode_is_one_cpu_step() {
    let m = chain();
    let (r, plan) = run(
        &m,
        &[accel("fast", 0.1, &["RELU", "TANH"])],
        &options(PartitionMode::CpuOnly),
    );
    assert_eq!(summary(&r, &plan), steps(&[("cpu", &["relu", "tanh"])]));
    assert_eq!(plan.mode, PartitionMode::CpuOnly);
    assert!(
        plan.placements
            .iter()
            .all(|p| p.reason == "cpu-only mode" && p.declined.is_empty())
    );
    // A listed CPU profile is the one used.
    let mut mine = DeviceProfile::cpu();
    mine.name = "host".into();
    let (_, plan) = run(&m, &[mine], &options(PartitionMode::CpuOnly));
    assert_eq!(plan.devices[0].name, "host");
}

// ---- steps ----

#[test]
fn cross_step_temporaries_and_per_step_constants() {
    // x -> A: add(x, c) [acc] -> t1 -> B: tanh [cpu] -> t2 -> C: add(t2, t1) [acc] -> y
    // and C also reads the constant c that A reads.
    let mut g = Graph::new();
    let x = g.input(&[1, 8]);
    let c = g.constant(&[1, 8]);
    let act = g.m.add_i32(0);
    let t1 = g.op(OperationType::Add, vec![x, c, act], "A");
    let t2 = g.unary(OperationType::Tanh, t1, "B");
    let t3 = g.op(OperationType::Add, vec![t2, t1, act], "C");
    let act2 = g.m.add_i32(0);
    let y = g.op(OperationType::Add, vec![t3, c, act2], "D");
    let m = g.finish(&[y]);
    let acc = accel("acc", 0.5, &["ADD"]);
    let (r, plan) = run(&m, &[acc], &PartitionOptions::default());
    assert_eq!(
        summary(&r, &plan),
        steps(&[("acc", &["A"]), ("cpu", &["B"]), ("acc", &["C", "D"])])
    );
    let s = &plan.steps;
    let sorted = |mut v: Vec<u32>| {
        v.sort();
        v
    };
    assert_eq!(s[0].inputs, vec![x]);
    assert_eq!(
        s[0].outputs,
        vec![t1],
        "t1 is read by B and C in later steps"
    );
    assert_eq!(s[0].constants, sorted(vec![c, act]));
    assert_eq!(s[1].inputs, vec![t1]);
    assert_eq!(s[1].outputs, vec![t2]);
    assert!(s[1].constants.is_empty());
    assert_eq!(s[2].inputs, sorted(vec![t1, t2]));
    assert_eq!(s[2].outputs, vec![y], "t3 stays inside the step");
    assert_eq!(
        s[2].constants,
        sorted(vec![c, act, act2]),
        "c and act are listed in both steps that read them"
    );
}

#[test]
fn operations_are_reordered_so_that_steps_are_contiguous() {
    // A [acc] and B [cpu] both read x; C [acc] reads A; D [cpu] reads B and C.
    // Original order A B C D; steps: acc {A, C}, cpu {B, D}.
    let mut g = Graph::new();
    let x = g.input(&[1, 8]);
    let a = g.add_const(x, "A");
    let b = g.unary(OperationType::Tanh, x, "B");
    let c = g.add_const(a, "C");
    let d = g.op(OperationType::Maximum, vec![b, c], "D");
    let m = g.finish(&[d]);
    let acc = accel("acc", 0.5, &["ADD"]);
    let (r, plan) = run(&m, &[acc], &PartitionOptions::default());
    assert_eq!(
        summary(&r, &plan),
        steps(&[("acc", &["A", "C"]), ("cpu", &["B", "D"])])
    );
    let order: Vec<&str> = r
        .main
        .operations
        .iter()
        .map(|o| o.source.as_str())
        .collect();
    assert_eq!(order, ["A", "C", "B", "D"]);
    assert_eq!(plan.steps[0].operations, vec![0, 1]);
    assert_eq!(plan.steps[1].operations, vec![2, 3]);
    assert_eq!(plan.steps[0].inputs, vec![x]);
    assert_eq!(plan.steps[0].outputs, vec![c]);
    assert_eq!(plan.steps[1].inputs, vec![x, c]);
    assert_eq!(plan.steps[1].outputs, vec![d]);
    assert_eq!(plan.placements[1].source, "C");
    assert_eq!(plan.placements[2].op_type, "TANH");
}

// ---- the transfer-cost guard ----

/// x[1, n] -> tanh [cpu only] -> mul by constant [acc or cpu] -> tanh [cpu only] -> y
fn bounce(n: u32) -> Model {
    let mut g = Graph::new();
    let x = g.input(&[1, n]);
    let a = g.unary(OperationType::Tanh, x, "tanh1");
    let c = g.constant(&[1, n]);
    let act = g.m.add_i32(0);
    let b = g.op(OperationType::Mul, vec![a, c, act], "mul");
    let y = g.unary(OperationType::Tanh, b, "tanh2");
    g.finish(&[y])
}

#[test]
fn transfer_guard_keeps_a_cheap_operation_off_the_accelerator() {
    let m = bounce(1000);
    // Free transfers: the reference plan bounces mul to the accelerator and back.
    let acc = accel("acc", 0.5, &["MUL"]);
    let (r, plan) = run(&m, std::slice::from_ref(&acc), &PartitionOptions::default());
    assert_eq!(
        summary(&r, &plan),
        steps(&[("cpu", &["tanh1"]), ("acc", &["mul"]), ("cpu", &["tanh2"])])
    );
    // Costed transfers: mul's work is 1000 elements, 500 units saved at exec_time 0.5;
    // moving its 4000-byte input in and output out costs 8000 x 0.1 = 800 units. It stays.
    let costly = DeviceProfile {
        transfer: TransferCost {
            cost_per_byte: 0.1,
            cost_per_step: 0.0,
        },
        ..acc.clone()
    };
    let (r, plan) = run(
        &m,
        std::slice::from_ref(&costly),
        &PartitionOptions::default(),
    );
    assert_eq!(
        summary(&r, &plan),
        steps(&[("cpu", &["tanh1", "mul", "tanh2"])])
    );
    let mul = placement(&plan, &r, "mul");
    assert_eq!(
        mul.reason,
        "transfer cost guard: acc would compute this operation 500 units cheaper, but data movement and step launches would cost 800 units more; runs on cpu"
    );
    // A per-step launch cost alone has the same effect.
    let launchy = DeviceProfile {
        transfer: TransferCost {
            cost_per_byte: 0.0,
            cost_per_step: 501.0,
        },
        ..acc.clone()
    };
    let (r, plan) = run(&m, &[launchy], &PartitionOptions::default());
    assert_eq!(plan.steps.len(), 1, "{:?}", summary(&r, &plan));
    // Cheaper transfers than savings: 8000 x 0.05 = 400 < 500, the accelerator keeps it.
    let cheap = DeviceProfile {
        transfer: TransferCost {
            cost_per_byte: 0.05,
            cost_per_step: 0.0,
        },
        ..acc
    };
    let (r, plan) = run(&m, &[cheap], &PartitionOptions::default());
    assert_eq!(plan.steps.len(), 3, "{:?}", summary(&r, &plan));
}

#[test]
fn transfer_guard_sends_heavy_work_despite_transfers() {
    // A 3x3 convolution 16 -> 64 channels on 32x32: 9.4M MACs; transfers are ~330 KB.
    let mut g = Graph::new();
    let x = g.input(&[1, 32, 32, 16]);
    let a = g.unary(OperationType::Tanh, x, "tanh1");
    let b = g.conv(a, 3, 64, "conv");
    let y = g.unary(OperationType::Tanh, b, "tanh2");
    let m = g.finish(&[y]);
    let mut acc = accel("acc", 0.25, &["CONV_2D"]);
    acc.transfer = TransferCost {
        cost_per_byte: 1.0,
        cost_per_step: 10_000.0,
    };
    let (r, plan) = run(&m, &[acc], &PartitionOptions::default());
    assert_eq!(
        summary(&r, &plan),
        steps(&[("cpu", &["tanh1"]), ("acc", &["conv"]), ("cpu", &["tanh2"])])
    );
}

// ---- encryption ----

/// x -> add(x, weight) -> relu -> add(t, weight) -> y: two weight readers, one not.
fn weighted() -> Model {
    let mut g = Graph::new();
    let x = g.input(&[1, 8]);
    let a = g.add_const(x, "add1");
    let b = g.unary(OperationType::Relu, a, "relu");
    let c = g.add_const(b, "add2");
    g.finish(&[c])
}

fn sm4_device() -> DeviceProfile {
    let mut d = accel("npu", 0.5, &["ADD", "RELU"]);
    d.decrypts = vec![DecryptSupport {
        algorithm: Algorithm::Sm4,
        modes: vec![Mode::Cbc, Mode::Ctr],
    }];
    d
}

#[test]
fn devices_that_cannot_decrypt_decline_weight_readers() {
    let m = weighted();
    let devices = [sm4_device()];
    let encrypted = |a, mode| PartitionOptions {
        encryption: Some((a, mode)),
        ..PartitionOptions::default()
    };
    // Not encrypted, or encrypted with what the device decrypts: all on the device.
    for o in [
        PartitionOptions::default(),
        encrypted(Algorithm::Sm4, Mode::Ctr),
    ] {
        let (r, plan) = run(&m, &devices, &o);
        assert_eq!(
            summary(&r, &plan),
            steps(&[("npu", &["add1", "relu", "add2"])])
        );
        assert!(plan.placements.iter().all(|p| !p.host_decrypted));
    }
    // AES-256: weight readers go to the CPU and decrypt in host memory; relu stays.
    let (r, plan) = run(&m, &devices, &encrypted(Algorithm::Aes256, Mode::Cbc));
    assert_eq!(
        summary(&r, &plan),
        steps(&[("cpu", &["add1"]), ("npu", &["relu"]), ("cpu", &["add2"])])
    );
    let add1 = placement(&plan, &r, "add1");
    assert!(add1.host_decrypted);
    assert_eq!(add1.declined.len(), 1);
    assert_eq!(add1.declined[0].rule, "encryption");
    assert_eq!(
        add1.declined[0].detail,
        "its weights are encrypted with aes256-cbc; it decrypts sm4-cbc, sm4-ctr"
    );
    assert!(!placement(&plan, &r, "relu").host_decrypted);
    // Shape vectors and scalars are not weights: a RESHAPE reading a constant shape is
    // not declined.
    let mut g = Graph::new();
    let x = g.input(&[2, 4]);
    let shape = g.m.add_i32_vector(&[8]);
    let y = g.op(OperationType::Reshape, vec![x, shape], "reshape");
    let m = g.finish(&[y]);
    let (r, plan) = run(
        &m,
        &[accel("acc", 0.5, &["RESHAPE"])],
        &encrypted(Algorithm::Aes256, Mode::Cbc),
    );
    assert_eq!(summary(&r, &plan), steps(&[("acc", &["reshape"])]));
}

#[test]
fn no_plaintext_fallback_lists_every_operation() {
    let m = weighted();
    let o = PartitionOptions {
        encryption: Some((Algorithm::Aes128, Mode::Cbc)),
        no_plaintext_fallback: true,
        ..PartitionOptions::default()
    };
    let err = options_error(partition(&m, &[sm4_device()], &o));
    assert_eq!(
        err,
        "plaintext fallback refused: 2 of 3 operations read weights encrypted with aes128-cbc that no device able to run them decrypts itself, so they would be decrypted in host memory on the CPU; list a device that decrypts aes128-cbc and supports them, or allow plaintext fallback:
  - operation 0 ADD (node 'add1'):
      npu: encryption: its weights are encrypted with aes128-cbc; it decrypts sm4-cbc, sm4-ctr
      cpu: no_plaintext_fallback: its encrypted weights would be decrypted in host memory
  - operation 2 ADD (node 'add2'):
      npu: encryption: its weights are encrypted with aes128-cbc; it decrypts sm4-cbc, sm4-ctr
      cpu: no_plaintext_fallback: its encrypted weights would be decrypted in host memory"
    );
    // CPU-only mode cannot keep weights off the host either.
    let err = options_error(partition(
        &m,
        &[],
        &PartitionOptions {
            mode: PartitionMode::CpuOnly,
            ..o
        },
    ));
    assert!(
        err.starts_with("plaintext fallback refused: 2 of 3 operations"),
        "{err}"
    );
    assert!(err.contains("cpu-only mode places it on the CPU"), "{err}");
    // Strict mode with the CPU listed: the same refusal.
    let err = options_error(partition(
        &m,
        &[sm4_device(), DeviceProfile::cpu()],
        &PartitionOptions {
            mode: PartitionMode::Strict,
            ..o
        },
    ));
    assert!(
        err.starts_with("plaintext fallback refused: 2 of 3"),
        "{err}"
    );
    // With a device that decrypts it, everything stays off the host.
    let o = PartitionOptions {
        encryption: Some((Algorithm::Sm4, Mode::Cbc)),
        ..o
    };
    let (r, plan) = run(&m, &[sm4_device()], &o);
    assert_eq!(
        summary(&r, &plan),
        steps(&[("npu", &["add1", "relu", "add2"])])
    );
}

#[test]
fn no_plaintext_fallback_takes_a_decrypting_device_over_a_cpu_tie() {
    let m = weighted();
    let mut twin = sm4_device();
    twin.performance
        .insert("TENSOR_FLOAT32".into(), PerformanceInfo::CPU);
    let o = PartitionOptions {
        encryption: Some((Algorithm::Sm4, Mode::Cbc)),
        ..PartitionOptions::default()
    };
    let (r, plan) = run(&m, std::slice::from_ref(&twin), &o);
    assert_eq!(
        summary(&r, &plan)[0],
        (
            "cpu".to_string(),
            vec!["add1".to_string(), "relu".into(), "add2".into()]
        )
    );
    assert!(placement(&plan, &r, "add1").host_decrypted);
    assert!(!placement(&plan, &r, "relu").host_decrypted);
    let (r, plan) = run(
        &m,
        &[twin],
        &PartitionOptions {
            no_plaintext_fallback: true,
            ..o
        },
    );
    let add1 = placement(&plan, &r, "add1");
    assert_eq!(plan.devices[add1.device as usize].name, "npu");
    assert!(!add1.host_decrypted);
    assert_eq!(add1.declined[0].rule, "no_plaintext_fallback");
    assert!(plan.placements.iter().all(|p| !p.host_decrypted));
}

// ---- bad input ----

#[test]
fn bad_profiles_and_models_are_errors_not_panics() {
    let m = chain();
    let a = accel("same", 0.5, &["RELU"]);
    let err = options_error(partition(
        &m,
        &[a.clone(), a.clone()],
        &PartitionOptions::default(),
    ));
    assert!(
        err.contains("two device profiles are named 'same'"),
        "{err}"
    );
    let mut nan = a.clone();
    nan.performance.get_mut("TENSOR_FLOAT32").unwrap().exec_time = f64::NAN;
    let err = options_error(partition(&m, &[nan], &PartitionOptions::default()));
    assert!(
        err.contains("device profile 'same': performance.TENSOR_FLOAT32.exec_time"),
        "{err}"
    );
    let mut broken = m.clone();
    broken.main.operations[1].inputs[0] = 99;
    assert!(matches!(
        partition(&broken, &[a], &PartitionOptions::default()),
        Err(CompileError::Validation(_))
    ));
    // A profile without performance information still takes what only it supports.
    let mut unknown = accel("mystery", 1.0, &["RELU", "TANH"]);
    unknown.performance.clear();
    let (r, plan) = run(&m, &[unknown.clone()], &options(PartitionMode::Strict));
    assert_eq!(summary(&r, &plan), steps(&[("mystery", &["relu", "tanh"])]));
    assert!(
        plan.placements[0].reason.contains("mystery unknown"),
        "{}",
        plan.placements[0].reason
    );
    let (r, plan) = run(&m, &[unknown], &PartitionOptions::default());
    assert_eq!(summary(&r, &plan), steps(&[("cpu", &["relu", "tanh"])]));
}

#[test]
fn an_empty_model_is_an_error_not_a_panic() {
    assert!(matches!(
        partition(&Model::default(), &[], &PartitionOptions::default()),
        Err(CompileError::Validation(_))
    ));
}

#[test]
fn partitioning_is_deterministic() {
    let m = weighted();
    let o = PartitionOptions {
        encryption: Some((Algorithm::Aes256, Mode::Cbc)),
        ..PartitionOptions::default()
    };
    let first = partition(&m, &[sm4_device()], &o).unwrap();
    for _ in 0..3 {
        assert_eq!(partition(&m, &[sm4_device()], &o).unwrap(), first);
    }
}

// ---- MobileNetV2 with the shipped profiles ----

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/devices")).join(name)
}

#[test]
#[cfg_attr(
    shared_absent,
    ignore = "needs ../shared (the real models), which is absent"
)]
fn mobilenet_v2_partitions_for_every_shipped_profile() {
    let Some(path) = nnc_formats::test_support::shared_model("mobilenet_v2.onnx") else {
        return;
    };
    let model = nnc_compiler::pipeline::lower_file(&path, &Default::default())
        .unwrap()
        .model;
    let cpu = load_profiles(&testdata("cpu.json")).unwrap();
    let mut multi_step = Vec::new();
    for name in ["npu-int8.json", "dsp-float.json", "cpu.json"] {
        let mut devices = load_profiles(&testdata(name)).unwrap();
        if name != "cpu.json" {
            devices.extend(cpu.iter().cloned());
        }
        for mode in [
            PartitionMode::Fallback,
            PartitionMode::Strict,
            PartitionMode::CpuOnly,
        ] {
            for encryption in [
                None,
                Some((Algorithm::Sm4, Mode::Cbc)),
                Some((Algorithm::Aes256, Mode::Cbc)),
                Some((Algorithm::Aes256, Mode::Ctr)),
            ] {
                let o = PartitionOptions {
                    mode,
                    encryption,
                    ..PartitionOptions::default()
                };
                let (r, plan) = run(&model, &devices, &o);
                let names: Vec<String> = summary(&r, &plan)
                    .iter()
                    .map(|(d, ops)| format!("{d} x{}", ops.len()))
                    .collect();
                eprintln!("{name} {mode:?} {encryption:?}: {}", names.join(", "));
                if plan.steps.len() > 1 {
                    multi_step.push((name, encryption));
                }
                for p in &plan.placements {
                    let on_cpu = plan.devices[p.device as usize].kind == "cpu";
                    assert_eq!(
                        p.host_decrypted,
                        on_cpu
                            && encryption.is_some()
                            && r.main.operations[p.operation as usize]
                                .inputs
                                .iter()
                                .any(|&i| nnc_formats::container::is_weight(
                                    &r.main.operands[i as usize]
                                ))
                    );
                }
            }
        }
    }
    // The DSP decrypts aes256-ctr but not aes256-cbc: with the latter every weight
    // reader declines, and the guard gathers the rest onto the CPU.
    assert!(
        multi_step.contains(&("dsp-float.json", None)),
        "{multi_step:?}"
    );
    assert!(
        multi_step.contains(&("dsp-float.json", Some((Algorithm::Aes256, Mode::Ctr)))),
        "{multi_step:?}"
    );
    assert!(
        !multi_step.contains(&("dsp-float.json", Some((Algorithm::Aes256, Mode::Cbc)))),
        "{multi_step:?}"
    );

    // The float DSP: convolutions and additions on the DSP, except the 1280-channel
    // convolution (max_channels 1024); MEAN and FULLY_CONNECTED on the CPU, and the
    // RESHAPE between them, which the DSP supports, stays there (transfer guard).
    let mut devices = load_profiles(&testdata("dsp-float.json")).unwrap();
    devices.extend(cpu);
    let (r, plan) = run(&model, &devices, &PartitionOptions::default());
    let steps: Vec<(String, usize)> = summary(&r, &plan)
        .into_iter()
        .map(|(d, ops)| (d, ops.len()))
        .collect();
    assert_eq!(
        steps,
        [("dsp-float".to_string(), 62), ("cpu".to_string(), 4)]
    );
    let by_type = |t: &str| -> Vec<&nnc_formats::plan::Placement> {
        plan.placements.iter().filter(|p| p.op_type == t).collect()
    };
    let wide = by_type("CONV_2D")
        .into_iter()
        .find(|p| plan.devices[p.device as usize].name == "cpu")
        .unwrap();
    assert_eq!(wide.declined[0].rule, "max_channels");
    assert_eq!(
        wide.declined[0].detail,
        "output 0 has 1280 channels, above 1024"
    );
    let reshape = by_type("RESHAPE")[0];
    assert!(
        reshape.reason.starts_with("transfer cost guard"),
        "{}",
        reshape.reason
    );
    assert_eq!(by_type("MEAN")[0].declined[0].rule, "operations");
    assert_eq!(by_type("FULLY_CONNECTED")[0].declined[0].rule, "operations");
    let boundary = &plan.steps[1];
    assert_eq!(
        boundary.inputs.len(),
        1,
        "only the 7x7x320 activation crosses"
    );
    assert_eq!(
        r.main.operands[boundary.inputs[0] as usize].dimensions,
        vec![1, 7, 7, 320]
    );

    // Strict without the CPU: every operation the DSP declines is listed.
    let dsp = load_profiles(&testdata("dsp-float.json")).unwrap();
    let err = options_error(partition(&model, &dsp, &options(PartitionMode::Strict)));
    assert!(
        err.starts_with("strict partitioning: 3 of 66 operations"),
        "{err}"
    );
    for t in ["CONV_2D", "MEAN", "FULLY_CONNECTED"] {
        assert!(err.contains(t), "{t}: {err}");
    }
}

// ---- control flow ----

/// An accelerator for the IF model's branches (ADD, MUL, CONCATENATION on float32),
/// with or without control-flow support.
fn flow_accel(control_flow: bool, ops: &[&str]) -> DeviceProfile {
    DeviceProfile {
        control_flow,
        default_performance: Some(PerformanceInfo {
            exec_time: 0.5,
            power_usage: 0.5,
        }),
        operations: vec![OperationRule {
            types: ops.iter().map(|s| s.to_string()).collect(),
            ..OperationRule::default()
        }],
        ..accel("fast", 0.5, &[])
    }
}

#[test]
fn control_flow_needs_a_device_declaring_it() {
    use nnc_formats::test_support::control_flow::if_model;
    let m = if_model();
    let ops = ["ADD", "MUL", "CONCATENATION"];
    // Without `control_flow`, the IF and its branches run on the CPU.
    let (r, plan) = run(&m, &[flow_accel(false, &ops)], &PartitionOptions::default());
    assert_eq!(summary(&r, &plan), steps(&[("cpu", &["if"])]));
    let p = placement(&plan, &r, "if");
    assert_eq!(p.declined[0].rule, "control_flow");
    assert!(
        p.declined[0].detail.contains("\"control_flow\": true"),
        "{:?}",
        p.declined
    );
    assert!(
        p.reason
            .ends_with("; runs subgraph(s) 1, 2 with all their operations on cpu"),
        "{}",
        p.reason
    );
    // Declared, with every operation of both branches supported: the device takes all.
    let (r, plan) = run(&m, &[flow_accel(true, &ops)], &PartitionOptions::default());
    assert_eq!(summary(&r, &plan), steps(&[("fast", &["if"])]));
    assert!(placement(&plan, &r, "if").reason.ends_with("on fast"));
    // One operation of the else branch it cannot run keeps the whole IF off it, and the
    // decline names the subgraph and the operation.
    let (r, plan) = run(
        &m,
        &[flow_accel(true, &["ADD", "MUL"])],
        &PartitionOptions::default(),
    );
    assert_eq!(summary(&r, &plan), steps(&[("cpu", &["if"])]));
    let d = &placement(&plan, &r, "if").declined[0];
    assert_eq!(d.rule, "operations");
    assert_eq!(
        d.detail,
        "subgraph 2 operation 1 (CONCATENATION): CONCATENATION is not among its supported operations"
    );
}

#[test]
fn nested_control_flow_is_placed_whole() {
    use nnc_formats::test_support::control_flow::nested_model;
    let m = nested_model();
    let all = ["ADD", "MUL", "LESS", "MAXIMUM"];
    let (r, plan) = run(&m, &[flow_accel(true, &all)], &PartitionOptions::default());
    assert_eq!(summary(&r, &plan), steps(&[("fast", &["while"])]));
    let reason = &placement(&plan, &r, "while").reason;
    assert!(
        reason.ends_with("; runs subgraph(s) 1, 2, 3, 4 with all their operations on fast"),
        "{reason}"
    );
    // LESS missing (used by the condition and inside the body): CPU.
    let (r, plan) = run(
        &m,
        &[flow_accel(true, &["ADD", "MUL", "MAXIMUM"])],
        &PartitionOptions::default(),
    );
    assert_eq!(summary(&r, &plan), steps(&[("cpu", &["while"])]));
}

#[test]
fn the_control_flow_field_is_parsed_and_checked() {
    let text = r#"{"name": "n", "type": "npu", "version": "1", "control_flow": true}"#;
    let p = DeviceProfile::from_json(text, "t.json").unwrap();
    assert!(p.control_flow);
    let text = r#"{"name": "n", "type": "npu", "version": "1"}"#;
    let p = DeviceProfile::from_json(text, "t.json").unwrap();
    assert!(!p.control_flow);
    let text = r#"{"name": "n", "type": "npu", "version": "1", "control_flow": "yes"}"#;
    let err = DeviceProfile::from_json(text, "t.json")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("t.json") && err.contains("control_flow"),
        "{err}"
    );
}
