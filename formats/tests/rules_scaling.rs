//! The device rules over many IFs sharing subgraphs (issue 29): `check_operations` finds
//! each subgraph's verdict once per device and must answer exactly what `check` answers
//! operation by operation (which walks every graph an IF reaches, each time).

use std::time::{Duration, Instant};

use nnc_formats::device::DeviceProfile;
use nnc_formats::nn::{Model, Operand, OperandType, OperationType, Subgraph};

fn f32_op() -> Operand {
    Operand::new(OperandType::TensorFloat32, vec![1])
}

fn bool_op() -> Operand {
    Operand::new(OperandType::TensorBool8, vec![1])
}

/// Graph `t`'s inputs `(cond, x)`, added unless `t` is main.
fn graph_inputs(m: &mut Model, t: usize) -> (u32, u32) {
    if t == 0 && !m.main.inputs.is_empty() {
        return (m.main.inputs[0], m.main.inputs[1]);
    }
    let g = m.graph_mut(t).expect("graph exists");
    (g.add_input(bool_op()), g.add_input(f32_op()))
}

/// Appends `op` (ADD, MUL or SUB) reading and writing `x` to graph `t`.
fn add_plain(m: &mut Model, t: usize, op: OperationType, x: u32) {
    let act = m
        .add_constant_in(
            t,
            Operand::new(OperandType::Int32, vec![]),
            &0i32.to_le_bytes(),
        )
        .expect("graph exists");
    let g = m.graph_mut(t).expect("graph exists");
    let y = g.add_operand(f32_op());
    g.add_operation(op, vec![x, x, act], vec![y], "plain");
}

/// Appends an IF over graphs `a` and `b` to graph `t`.
fn add_if(m: &mut Model, t: usize, (cond, x): (u32, u32), a: u32, b: u32) {
    let a = m.add_subgraph_operand(t, a).expect("graph exists");
    let b = m.add_subgraph_operand(t, b).expect("graph exists");
    let g = m.graph_mut(t).expect("graph exists");
    let y = g.add_operand(f32_op());
    g.add_operation(OperationType::If, vec![cond, a, b, cond, x], vec![y], "if");
}

/// A device running ADD and, when `control_flow`, IF and WHILE.
fn device(control_flow: bool) -> DeviceProfile {
    DeviceProfile::from_json(
        &format!(
            r#"{{"name": "dev", "type": "accelerator", "version": "1",
                "control_flow": {control_flow},
                "default_performance": {{"exec_time": 0.5, "power_usage": 0.5}},
                "operations": [{{"types": ["ADD"]}}]}}"#
        ),
        "dev.json",
    )
    .expect("profile parses")
}

/// A pseudo-random model (not valid: references back to main, out of range, cycles and
/// self-references included) of `graphs` referenced subgraphs.
fn random_model(seed: u64, graphs: usize) -> Model {
    let mut state = seed;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let mut m = Model {
        referenced: vec![Subgraph::default(); graphs],
        ..Model::default()
    };
    for t in 0..=graphs {
        let ins = graph_inputs(&mut m, t);
        for _ in 0..next(6) {
            match next(5) {
                0 => add_plain(&mut m, t, OperationType::Mul, ins.1),
                1 | 2 => add_plain(&mut m, t, OperationType::Add, ins.1),
                _ => {
                    // Mostly forward references, some to any graph or beyond the last.
                    let pick = |r: u64| (r as usize % (graphs + 2)) as u32;
                    let a = pick(next(graphs as u64 + 2));
                    let b = if next(3) == 0 {
                        pick(next(graphs as u64 + 2))
                    } else {
                        (t + 1 + next(3) as usize) as u32
                    };
                    add_if(&mut m, t, ins, a, b);
                }
            }
        }
    }
    m
}

#[test]
fn check_operations_answers_what_check_answers() {
    let mut compared = 0;
    for seed in 0..300 {
        let m = random_model(seed, 1 + (seed as usize % 12));
        for d in [device(true), device(false)] {
            let all = d.check_operations(&m, None);
            assert_eq!(all.len(), m.main.operations.len());
            for (op, got) in m.main.operations.iter().zip(&all) {
                assert_eq!(got, &d.check(op, &m, None), "seed {seed}");
                compared += usize::from(got.is_err());
            }
        }
    }
    assert!(compared > 100, "too few declines compared: {compared}");
}

#[test]
fn many_ifs_over_one_large_subgraph_are_checked_in_linear_work() {
    let (ifs, body) = (20_000, 10_000);
    let mut m = Model {
        referenced: vec![Subgraph::default(); 2],
        ..Model::default()
    };
    for t in 1..=2 {
        let (_, x) = graph_inputs(&mut m, t);
        for k in 0..body {
            let op = if t == 2 && k + 1 == body {
                OperationType::Mul
            } else {
                OperationType::Add
            };
            add_plain(&mut m, t, op, x);
        }
    }
    let ins = graph_inputs(&mut m, 0);
    for _ in 0..ifs {
        add_if(&mut m, 0, ins, 1, 2);
    }
    let d = device(true);
    let start = Instant::now();
    let all = d.check_operations(&m, None);
    let took = start.elapsed();
    // One `check` per IF walks 20,000 operations each: about 30 s in all (measured).
    assert!(took < Duration::from_secs(20), "checking took {took:?}");
    assert_eq!(all.len(), ifs);
    let expected = d.check(&m.main.operations[0], &m, None);
    let detail = &expected.as_ref().expect_err("MUL is declined").detail;
    assert_eq!(
        detail,
        "subgraph 2 operation 9999 (MUL): MUL is not among its supported operations"
    );
    assert!(all.iter().all(|r| r == &expected));
}
