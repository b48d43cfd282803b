//! What IF and WHILE may cost (issue 29, items 3 and 11): every buffer an execution
//! allocates in proportion to the model's sizes (loop state, each iteration's new state,
//! a subgraph's arena) draws from one budget of the `arena` limit, so a loop beyond it
//! is refused with the limit named (at load when the sizes are known then, during the
//! execution otherwise) instead of exhausting memory; the loop state moves between
//! iterations without copies, so a loop fits in twice its state; and the loop timeout
//! stops an iteration in the middle, not after it.

use std::sync::Arc;
use std::time::Instant;

use nnc_formats::limits::{LimitKind, Limits};
use nnc_formats::nn::{IoInfo, Model, Operand, OperandType, OperationType, Subgraph};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::RuntimeError;
use nnc_runtime::exec::{ExecuteOptions, HostWeights, PrepareOptions, Program};

fn f32_op(len: Option<u32>) -> Operand {
    Operand::new(OperandType::TensorFloat32, vec![len.unwrap_or(0)])
}

fn i32_op() -> Operand {
    Operand::new(OperandType::TensorInt32, vec![1])
}

fn act(m: &mut Model, t: usize) -> u32 {
    m.add_constant_in(
        t,
        Operand::new(OperandType::Int32, vec![]),
        &0i32.to_le_bytes(),
    )
    .unwrap()
}

/// What a loop body does to `x` in each iteration.
#[derive(Clone, Copy)]
enum Body {
    /// `x + x`: doubles it.
    Double,
    /// `ops` operations each taking the maximum with `x` (which keeps it), run in the body
    /// or, with `nested`, in an IF the body runs.
    Long { ops: usize, nested: bool },
}

/// Adds a graph `(x) -> y` of `ops` MAXIMUM operations (`y = max(...max(x, x)..., x)`).
fn add_chain(m: &mut Model, len: Option<u32>, ops: usize) -> u32 {
    let t = m.add_subgraph(Subgraph::default());
    let g = m.graph_mut(t as usize).unwrap();
    let x = g.add_input(f32_op(len));
    let mut prev = x;
    for k in 0..ops {
        let next = if k + 1 == ops {
            g.add_output(f32_op(len))
        } else {
            g.add_operand(f32_op(len))
        };
        g.add_operation(OperationType::Maximum, vec![prev, x], vec![next], "chain");
        prev = next;
    }
    t
}

/// `x = 2 x0; while i < n { i += 1; x = body(x) }` returning `(i, x)`, with `x: f32[len]`
/// (`None`: a length known only when the model runs). WHILE values: m = 2 (`i`, `x`),
/// n = 1 (`n`). The WHILE is the last to read main's `x`, so the loop takes it over.
fn loop_model(len: Option<u32>, body: Body) -> Model {
    let mut m = Model::default();
    let cond_t = {
        let mut g = Subgraph::default();
        let i = g.add_input(i32_op());
        g.add_input(f32_op(len));
        let n = g.add_input(i32_op());
        let c = g.add_output(Operand::new(OperandType::TensorBool8, vec![1]));
        g.add_operation(OperationType::Less, vec![i, n], vec![c], "cond/less");
        m.add_subgraph(g)
    };
    let chain = match body {
        Body::Long { ops, nested: true } => Some(add_chain(&mut m, len, ops)),
        _ => None,
    };
    let body_t = m.add_subgraph(Subgraph::default()) as usize;
    let one = m
        .add_constant_in(body_t, i32_op(), &1i32.to_le_bytes())
        .unwrap();
    let a = act(&mut m, body_t);
    let chain_op = chain.map(|t| m.add_subgraph_operand(body_t, t).unwrap());
    let g = m.graph_mut(body_t).unwrap();
    let i = g.add_input(i32_op());
    let x = g.add_input(f32_op(len));
    let n = g.add_input(i32_op());
    let i2 = g.add_output(i32_op());
    g.add_operation(OperationType::Add, vec![i, one, a], vec![i2], "body/inc");
    match body {
        Body::Double => {
            let x2 = g.add_output(f32_op(len));
            g.add_operation(OperationType::Add, vec![x, x, a], vec![x2], "body/double");
        }
        Body::Long { ops, nested: false } => {
            let mut prev = x;
            for k in 0..ops {
                let next = if k + 1 == ops {
                    g.add_output(f32_op(len))
                } else {
                    g.add_operand(f32_op(len))
                };
                g.add_operation(
                    OperationType::Maximum,
                    vec![prev, x],
                    vec![next],
                    "body/max",
                );
                prev = next;
            }
        }
        Body::Long { nested: true, .. } => {
            let chain_op = chain_op.unwrap();
            let c = g.add_operand(Operand::new(OperandType::TensorBool8, vec![1]));
            g.add_operation(OperationType::Less, vec![i, n], vec![c], "body/less");
            let x2 = g.add_output(f32_op(len));
            g.add_operation(
                OperationType::If,
                vec![c, chain_op, chain_op, x],
                vec![x2],
                "body/if",
            );
        }
    }
    let main_act = act(&mut m, 0);
    let i0 = m.main.add_input(i32_op());
    let x0 = m.main.add_input(f32_op(len));
    let n = m.main.add_input(i32_op());
    let x1 = m.main.add_operand(f32_op(len));
    m.add_operation(
        OperationType::Add,
        vec![x0, x0, main_act],
        vec![x1],
        "double",
    );
    let cond_op = m.add_subgraph_operand(0, cond_t).unwrap();
    let body_op = m.add_subgraph_operand(0, body_t as u32).unwrap();
    let i_out = m.main.add_output(i32_op());
    let x_out = m.main.add_output(f32_op(len));
    m.add_operation(
        OperationType::While,
        vec![cond_op, body_op, i0, x1, n],
        vec![i_out, x_out],
        "while",
    );
    let dims = vec![len.unwrap_or(0)];
    let io = |name: &str, dtype, dims: Vec<u32>| IoInfo {
        name: name.into(),
        dtype,
        dims,
    };
    m.input_info = vec![
        io("i", DataType::I32, vec![1]),
        io("x", DataType::F32, dims.clone()),
        io("n", DataType::I32, vec![1]),
    ];
    m.output_info = vec![
        io("i", DataType::I32, vec![1]),
        io("x", DataType::F32, dims),
    ];
    m
}

fn prepare(model: &Model, arena: u64) -> Result<Program, RuntimeError> {
    let weights = Arc::new(HostWeights::new(model).unwrap());
    let options = PrepareOptions {
        limits: Limits {
            max_arena_bytes: arena,
            ..Limits::default()
        },
        ..PrepareOptions::default()
    };
    Program::prepare(model, weights, &options)
}

fn i32_tensor(v: i32) -> HostTensor {
    HostTensor::new(DataType::I32, vec![1], v.to_le_bytes().to_vec()).unwrap()
}

fn inputs(x: &[f32], iterations: i32) -> Vec<HostTensor> {
    vec![
        i32_tensor(0),
        HostTensor::from_f32(vec![x.len()], x).unwrap(),
        i32_tensor(iterations),
    ]
}

fn run(program: &Program, x: &[f32], iterations: i32) -> Result<Vec<HostTensor>, RuntimeError> {
    program.execute_host(&inputs(x, iterations))
}

/// The arena limit an error names, when it is that limit's refusal.
fn arena_refusal(err: &RuntimeError) -> bool {
    let limit = match err {
        RuntimeError::Limit(e) => e,
        RuntimeError::InSubgraph { source, .. } => return arena_refusal(source),
        _ => return false,
    };
    limit.kind == LimitKind::Arena && err.to_string().contains("--limit arena=SIZE")
}

/// The state `x` of S bytes needs 2 S during an iteration (old state and new); before,
/// the body's outputs were copied twice more, the loop's initial values once, and main
/// kept its `x` through the loop, so 2.5 S was not enough. Beyond the limit, the
/// execution is refused with the limit named.
#[test]
fn a_loop_holds_twice_its_state_and_no_more_dynamic_body() {
    const LEN: usize = 1 << 16;
    let state = (LEN * 4) as u64;
    let x: Vec<f32> = (0..LEN).map(|i| (i % 7) as f32 - 3.0).collect();
    let model = loop_model(None, Body::Double);
    // Shapes unknown at load: nothing to refuse then.
    let program = prepare(&model, state * 5 / 2).unwrap();
    let out = run(&program, &x, 5).unwrap();
    assert_eq!(out[0].data, 5i32.to_le_bytes());
    let doubled: Vec<f32> = x.iter().map(|v| v * 64.0).collect();
    assert_eq!(out[1].to_f32_vec().unwrap(), doubled);
    // Twice the state is beyond 1.5 S: refused during the second iteration.
    let program = prepare(&model, state * 3 / 2).unwrap();
    let err = run(&program, &x, 5).unwrap_err();
    assert!(arena_refusal(&err), "{err}");
    // No iteration fits: main's `x` becomes the loop's result as it is.
    let out = run(&program, &x, 0).unwrap();
    assert_eq!(out[1].to_f32_vec().unwrap()[..3], [-6.0, -4.0, -2.0]);
    // And the budget is per execution: the refusal left nothing reserved.
    assert!(run(&program, &x, 0).is_ok());
}

/// A static body runs in two arenas in turn, each iteration reading the state where the
/// previous one wrote it: 2 S again, with the outputs copied once, after the loop.
#[test]
fn a_loop_holds_twice_its_state_and_no_more_static_body() {
    const LEN: u32 = 1 << 16;
    let state = u64::from(LEN) * 4;
    let x: Vec<f32> = (0..LEN).map(|i| (i % 5) as f32 * 0.5 - 1.0).collect();
    let model = loop_model(Some(LEN), Body::Double);
    let program = prepare(&model, state * 5 / 2).unwrap();
    for iterations in [0, 1, 2, 7] {
        let out = run(&program, &x, iterations).unwrap();
        assert_eq!(out[0].data, iterations.to_le_bytes());
        let scale = (2u32 << iterations) as f32;
        let expected: Vec<f32> = x.iter().map(|v| v * scale).collect();
        assert_eq!(out[1].to_f32_vec().unwrap(), expected, "{iterations}");
    }
    // Main's `x` and the body's arena are known at load, 2 S together: a limit below
    // that is refused then, before any execution allocates anything.
    let err = prepare(&model, state * 3 / 2).unwrap_err();
    assert!(arena_refusal(&err), "{err}");
    assert!(
        err.to_string().contains("WHILE running its body once"),
        "{err}"
    );
    // A limit below the body's arena alone is refused as that subgraph's plan.
    let err = prepare(&model, state / 2).unwrap_err();
    assert!(arena_refusal(&err), "{err}");
    assert!(
        err.to_string().contains("memory plan of subgraph 2"),
        "{err}"
    );
}

/// Many loops in a row: each gives its memory back when it ends.
#[test]
fn loops_give_their_memory_back() {
    const LEN: u32 = 1 << 12;
    let x = vec![1.0f32; LEN as usize];
    for len in [None, Some(LEN)] {
        let program = prepare(&loop_model(len, Body::Double), u64::from(LEN) * 4 * 3).unwrap();
        for _ in 0..20 {
            let out = run(&program, &x, 3).unwrap();
            assert_eq!(out[1].to_f32_vec().unwrap()[0], 16.0);
        }
    }
}

/// The loop timeout is checked between a body's operations too: an iteration far longer
/// than the timeout stops within about one operation of it (before, the iteration ran
/// to its end), also inside an IF the body runs.
#[test]
fn the_loop_timeout_stops_an_iteration_in_the_middle() {
    const LEN: u32 = 1 << 16;
    let x = vec![0.5f32; LEN as usize];
    for nested in [false, true] {
        for len in [None, Some(LEN)] {
            let model = loop_model(len, Body::Long { ops: 1500, nested });
            let program = prepare(&model, 1 << 30).unwrap();
            // One iteration, timed.
            let start = Instant::now();
            let out = run(&program, &x, 1).unwrap();
            let iteration = start.elapsed();
            assert_eq!(out[1].to_f32_vec().unwrap(), vec![1.0; LEN as usize]);
            let timeout = iteration / 10;
            let options = ExecuteOptions::default()
                .with_loop_timeout(timeout)
                .unwrap();
            let start = Instant::now();
            let err = program
                .execute_host_with(&inputs(&x, 1_000_000), &options)
                .unwrap_err();
            let elapsed = start.elapsed();
            assert!(
                matches!(&err, RuntimeError::LoopTimeout { operation, .. }
                    if operation.op_type == OperationType::While),
                "{err}"
            );
            assert!(
                elapsed < iteration / 2,
                "nested {nested}, {len:?}: one iteration takes {iteration:?}, the loop \
                 stopped after {elapsed:?} with a timeout of {timeout:?}"
            );
        }
    }
}
