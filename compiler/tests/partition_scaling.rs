//! Partitioning a model whose many IFs share large subgraphs (issue 29): the device rules
//! and the plan's reasons looked at every operation of every subgraph an IF reaches, once
//! per IF, so 20,000 IFs over one subgraph of 1,000 operations checked 20 million
//! operations per device. Each subgraph's verdict is now found once per device, and the
//! graphs an IF reaches once per distinct set of branches.

use std::time::{Duration, Instant};

use nnc_compiler::partition::{PartitionOptions, partition};
use nnc_formats::device::DeviceProfile;
use nnc_formats::nn::{IoInfo, Model, Operand, OperandType, OperationType, Subgraph};
use nnc_formats::plan::ExecutionPlan;
use nnc_formats::tensor::DataType;

/// Quadratic work took over 30 s here (test profile); linear work takes well under one.
const BOUND: Duration = Duration::from_secs(60);

fn f32_op() -> Operand {
    Operand::new(OperandType::TensorFloat32, vec![1])
}

fn bool_op() -> Operand {
    Operand::new(OperandType::TensorBool8, vec![1])
}

fn io(name: &str, dtype: DataType) -> IoInfo {
    IoInfo {
        name: name.into(),
        dtype,
        dims: vec![1],
    }
}

/// Graph `t`'s inputs `(cond, x)`; main's exist already.
fn graph_inputs(m: &mut Model, t: usize) -> (u32, u32) {
    if t == 0 {
        return (m.main.inputs[0], m.main.inputs[1]);
    }
    let g = m.graph_mut(t).expect("graph exists");
    (g.add_input(bool_op()), g.add_input(f32_op()))
}

/// Graph `t` computes `ops` operations in a row from its input `x`, `ADD` but for the
/// last, which is `last`; the last result is the graph's output.
fn fill_body(m: &mut Model, t: usize, ops: usize, last: OperationType) {
    let (_, mut x) = graph_inputs(m, t);
    let act = m
        .add_constant_in(
            t,
            Operand::new(OperandType::Int32, vec![]),
            &0i32.to_le_bytes(),
        )
        .expect("graph exists");
    let g = m.graph_mut(t).expect("graph exists");
    for k in 0..ops {
        let y = if k + 1 == ops {
            g.add_output(f32_op())
        } else {
            g.add_operand(f32_op())
        };
        let op = if k + 1 == ops {
            last
        } else {
            OperationType::Add
        };
        g.add_operation(op, vec![x, x, act], vec![y], "body");
        x = y;
    }
}

/// Adds `y = IF(cond, a, b, cond, x)` to graph `t`; `y` is an output of `t` when
/// `output`.
fn add_if(m: &mut Model, t: usize, (cond, x): (u32, u32), (a, b): (u32, u32), output: bool) -> u32 {
    let a = m.add_subgraph_operand(t, a).expect("graph exists");
    let b = m.add_subgraph_operand(t, b).expect("graph exists");
    let g = m.graph_mut(t).expect("graph exists");
    let y = if output {
        g.add_output(f32_op())
    } else {
        g.add_operand(f32_op())
    };
    g.add_operation(OperationType::If, vec![cond, a, b, cond, x], vec![y], "if");
    y
}

/// Main runs `ifs` IFs in a row; every one's branches are graphs 1 and 2, which run
/// `body` operations each (graph 2's last one is `last`).
fn shared_branches(ifs: usize, body: usize, last: OperationType) -> Model {
    let mut m = Model::default();
    m.main.add_input(bool_op());
    m.main.add_input(f32_op());
    m.referenced = vec![Subgraph::default(); 2];
    m.input_info = vec![io("cond", DataType::Bool), io("x", DataType::F32)];
    m.output_info = vec![io("y", DataType::F32)];
    fill_body(&mut m, 1, body, OperationType::Add);
    fill_body(&mut m, 2, body, last);
    let (cond, mut x) = graph_inputs(&mut m, 0);
    for i in 0..ifs {
        x = add_if(&mut m, 0, (cond, x), (1, 2), i + 1 == ifs);
    }
    m
}

/// Main runs `ifs` IFs in a row, IF i over graphs `2i + 1` and `2i + 2` of its own; each
/// of those runs one IF over the graphs `s` and `s + 1` that every branch shares, which
/// start a ladder `depth` levels deep (graph k runs k + 1 and k + 2) of leaves running
/// `body` operations. The shared ladder's last leaf ends in `last`.
fn own_branches_over_a_shared_ladder(
    ifs: usize,
    depth: usize,
    body: usize,
    last: OperationType,
) -> Model {
    let s = 2 * ifs + 1;
    let mut m = Model::default();
    m.main.add_input(bool_op());
    m.main.add_input(f32_op());
    m.referenced = vec![Subgraph::default(); 2 * ifs + depth + 1];
    m.input_info = vec![io("cond", DataType::Bool), io("x", DataType::F32)];
    m.output_info = vec![io("y", DataType::F32)];
    for k in 0..depth - 1 {
        let ins = graph_inputs(&mut m, s + k);
        let (a, b) = ((s + k + 1) as u32, (s + k + 2) as u32);
        add_if(&mut m, s + k, ins, (a, b), true);
    }
    fill_body(&mut m, s + depth - 1, body, OperationType::Add);
    fill_body(&mut m, s + depth, body, last);
    let (cond, mut x) = graph_inputs(&mut m, 0);
    for i in 0..ifs {
        for t in [2 * i + 1, 2 * i + 2] {
            let ins = graph_inputs(&mut m, t);
            add_if(&mut m, t, ins, (s as u32, (s + 1) as u32), true);
        }
        x = add_if(
            &mut m,
            0,
            (cond, x),
            ((2 * i + 1) as u32, (2 * i + 2) as u32),
            i + 1 == ifs,
        );
    }
    m
}

/// An accelerator running control flow and ADD (not MUL), preferred to the CPU.
fn accelerator() -> DeviceProfile {
    DeviceProfile::from_json(
        r#"{"name": "fast", "type": "accelerator", "version": "1", "control_flow": true,
            "default_performance": {"exec_time": 0.1, "power_usage": 0.1},
            "operations": [{"types": ["ADD"]}]}"#,
        "fast.json",
    )
    .expect("profile parses")
}

/// Partitions `model` for the accelerator (and the CPU as fallback), within [`BOUND`].
fn timed_partition(model: &Model) -> ExecutionPlan {
    let start = Instant::now();
    let (_, plan) =
        partition(model, &[accelerator()], &PartitionOptions::default()).expect("partitions");
    let took = start.elapsed();
    assert!(took < BOUND, "partitioning took {took:?}");
    plan
}

#[test]
fn many_ifs_over_one_large_subgraph_are_partitioned_in_linear_work() {
    let ifs = 20_000;
    let plan = timed_partition(&shared_branches(ifs, 10_000, OperationType::Add));
    assert_eq!(plan.placements.len(), ifs);
    for p in &plan.placements {
        assert_eq!(plan.devices[p.device as usize].name, "fast", "{p:?}");
        assert!(
            p.reason
                .ends_with("; runs subgraph(s) 1, 2 with all their operations on fast"),
            "{}",
            p.reason
        );
    }
}

#[test]
fn a_declined_operation_deep_in_a_shared_subgraph_is_named_for_every_if() {
    let ifs = 20_000;
    let plan = timed_partition(&shared_branches(ifs, 10_000, OperationType::Mul));
    assert_eq!(plan.placements.len(), ifs);
    for p in &plan.placements {
        assert_eq!(plan.devices[p.device as usize].name, "cpu", "{p:?}");
        assert_eq!(p.declined.len(), 1, "{p:?}");
        let d = &p.declined[0];
        assert_eq!((d.device.as_str(), d.rule.as_str()), ("fast", "operations"));
        assert_eq!(
            d.detail,
            "subgraph 2 operation 9999 (MUL): MUL is not among its supported operations"
        );
        assert!(
            p.reason.ends_with("with all their operations on cpu"),
            "{}",
            p.reason
        );
    }
}

#[test]
fn ifs_with_own_branches_over_a_shared_ladder_are_partitioned_in_linear_work() {
    let (ifs, depth) = (5_000, 20);
    let s = 2 * ifs + 1;
    let model = own_branches_over_a_shared_ladder(ifs, depth, 500, OperationType::Mul);
    let plan = timed_partition(&model);
    assert_eq!(plan.placements.len(), ifs);
    let ladder: Vec<String> = (s..=s + depth).map(|t| t.to_string()).collect();
    for (i, p) in plan.placements.iter().enumerate() {
        assert_eq!(plan.devices[p.device as usize].name, "cpu", "{p:?}");
        // The lowest-numbered graph that declines is the ladder's last leaf.
        assert_eq!(
            p.declined[0].detail,
            format!(
                "subgraph {} operation 499 (MUL): MUL is not among its supported operations",
                s + depth
            )
        );
        // The reason lists the first 16 graphs reached and counts the rest.
        let expected = format!(
            "; runs subgraph(s) {}, {}, {} and {} more with all their operations on cpu",
            2 * i + 1,
            2 * i + 2,
            ladder[..14].join(", "),
            ladder.len() - 14
        );
        assert!(p.reason.ends_with(&expected), "{}", p.reason);
    }
}
