//! Helpers for tests and benchmarks across the workspace (not part of the product API).

use std::path::PathBuf;

/// The shared data folder (`../shared` beside the repository), holding the real models.
///
/// Returns `None` after printing why when the folder is absent, so that a developer
/// without it can still run the rest of the suite. In CI (`CI` set) its absence is a
/// failure: nothing may be skipped there.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared"));
    if dir.join("models").is_dir() {
        return Some(dir);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "{} is missing, and CI must not skip tests that need it",
            dir.display()
        );
    }
    eprintln!(
        "skipping: {} is absent (the shared models are not available here)",
        dir.display()
    );
    None
}

/// A shared model file, or `None` (with the reason printed) when the folder is absent.
pub fn shared_model(name: &str) -> Option<PathBuf> {
    shared_dir().map(|d| d.join("models").join(name))
}

/// A model that a public Python package ships, extracted by `scripts/fetch-models` to
/// `testdata/external/PACKAGE/NAME`, or `None` (with the reason printed) when it has not
/// been fetched. In CI (`CI` set) a missing file is a failure, like a missing `../shared`.
pub fn external_model(package: &str, name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/external"))
        .join(package)
        .join(name);
    if path.is_file() {
        return Some(path);
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "{} is missing (scripts/setup runs scripts/fetch-models), and CI must not skip \
             tests that need it",
            path.display()
        );
    }
    eprintln!(
        "skipping: {} is absent (run scripts/fetch-models)",
        path.display()
    );
    None
}

/// Hand-built models with control flow (IF, WHILE), shared by the tests of every crate.
pub mod control_flow {
    use crate::nn::{IoInfo, Lifetime, Model, Operand, OperandType, OperationType, Subgraph};
    use crate::tensor::DataType;

    /// Elements of the IF model's value `x` (large enough that its constants are pooled).
    pub const IF_LEN: u32 = 40;

    fn f32_op(dims: Vec<u32>) -> Operand {
        Operand::new(OperandType::TensorFloat32, dims)
    }

    fn i32_op(dims: Vec<u32>) -> Operand {
        Operand::new(OperandType::TensorInt32, dims)
    }

    fn bool_op() -> Operand {
        Operand::new(OperandType::TensorBool8, vec![1])
    }

    fn io(name: &str, dtype: DataType, dims: Vec<u32>) -> IoInfo {
        IoInfo {
            name: name.into(),
            dtype,
            dims,
        }
    }

    fn main_input(m: &mut Model, operand: Operand) -> u32 {
        m.main.add_input(operand)
    }

    fn scalar_i32(m: &mut Model, t: usize, v: i32) -> u32 {
        m.add_constant_in(
            t,
            Operand::new(OperandType::Int32, vec![]),
            &v.to_le_bytes(),
        )
        .expect("graph exists")
    }

    fn f32_const(m: &mut Model, t: usize, dims: Vec<u32>, values: &[f32]) -> u32 {
        m.add_constant_in(t, f32_op(dims), bytemuck::cast_slice(values))
            .expect("graph exists")
    }

    fn i32_const(m: &mut Model, t: usize, values: &[i32]) -> u32 {
        m.add_constant_in(
            t,
            i32_op(vec![values.len() as u32]),
            bytemuck::cast_slice(values),
        )
        .expect("graph exists")
    }

    /// Constant added to `x` by the then branch (pooled: 160 bytes).
    pub fn then_constant() -> Vec<f32> {
        (0..IF_LEN).map(|i| i as f32).collect()
    }

    /// Constant multiplying `x` in the else branch (pooled).
    pub fn else_constant() -> Vec<f32> {
        (0..IF_LEN).map(|i| 1.0 + i as f32 * 0.5).collect()
    }

    /// `y = IF(cond, then, else, x)` with `x: f32[40]`; then: `y = x + c1` ([40]); else:
    /// `y = concat(x * c2, x)` ([80]). The IF's output has an unknown dimension.
    pub fn if_model() -> Model {
        let mut m = Model::default();
        let then_t = m.add_subgraph(Subgraph::default());
        let else_t = m.add_subgraph(Subgraph::default());
        let n = IF_LEN;
        // then
        {
            let t = then_t as usize;
            let c = f32_const(&mut m, t, vec![n], &then_constant());
            let act = scalar_i32(&mut m, t, 0);
            let g = m.graph_mut(t).expect("then");
            let x = g.add_input(f32_op(vec![n]));
            let y = g.add_output(f32_op(vec![n]));
            g.add_operation(OperationType::Add, vec![x, c, act], vec![y], "then/add");
        }
        // else
        {
            let t = else_t as usize;
            let c = f32_const(&mut m, t, vec![n], &else_constant());
            let act = scalar_i32(&mut m, t, 0);
            let axis = scalar_i32(&mut m, t, 0);
            let g = m.graph_mut(t).expect("else");
            let x = g.add_input(f32_op(vec![n]));
            let p = g.add_operand(f32_op(vec![n]));
            let y = g.add_output(f32_op(vec![2 * n]));
            g.add_operation(OperationType::Mul, vec![x, c, act], vec![p], "else/mul");
            g.add_operation(
                OperationType::Concatenation,
                vec![p, x, axis],
                vec![y],
                "else/concat",
            );
        }
        let cond = main_input(&mut m, bool_op());
        let x = main_input(&mut m, f32_op(vec![n]));
        let then_op = m.add_subgraph_operand(0, then_t).expect("main");
        let else_op = m.add_subgraph_operand(0, else_t).expect("main");
        let y = m.main.add_output(f32_op(vec![0]));
        m.add_operation(
            OperationType::If,
            vec![cond, then_op, else_op, x],
            vec![y],
            "if",
        );
        m.input_info = vec![
            io("cond", DataType::Bool, vec![1]),
            io("x", DataType::F32, vec![n]),
        ];
        m.output_info = vec![io("y", DataType::F32, vec![0])];
        m
    }

    /// Adds a counting-loop condition subgraph `i < limit` over values
    /// `(i: i32[1], acc: f32[4], s: f32[4], limit: i32[1])`.
    fn add_less_condition(m: &mut Model) -> u32 {
        let mut g = Subgraph::default();
        let i = g.add_input(i32_op(vec![1]));
        g.add_input(f32_op(vec![4]));
        g.add_input(f32_op(vec![4]));
        let limit = g.add_input(i32_op(vec![1]));
        let c = g.add_output(bool_op());
        g.add_operation(OperationType::Less, vec![i, limit], vec![c], "cond/less");
        m.add_subgraph(g)
    }

    /// The WHILE loop of [`while_model`] with a body built by `body`, which gets the
    /// model, the body's graph number and its inputs `(i, acc, s, limit)` and returns its
    /// outputs `(i', acc', s')`.
    fn while_with_body(body: impl FnOnce(&mut Model, usize, [u32; 4]) -> [u32; 3]) -> Model {
        let mut m = Model::default();
        let cond_t = add_less_condition(&mut m);
        let body_t = m.add_subgraph(Subgraph::default());
        {
            let g = m.graph_mut(body_t as usize).expect("body");
            let i = g.add_input(i32_op(vec![1]));
            let acc = g.add_input(f32_op(vec![4]));
            let s = g.add_input(f32_op(vec![4]));
            let limit = g.add_input(i32_op(vec![1]));
            let outs = body(&mut m, body_t as usize, [i, acc, s, limit]);
            let g = m.graph_mut(body_t as usize).expect("body");
            for o in outs {
                g.operands[o as usize].lifetime = Lifetime::SubgraphOutput;
                g.outputs.push(o);
            }
        }
        let i0 = main_input(&mut m, i32_op(vec![1]));
        let acc0 = main_input(&mut m, f32_op(vec![4]));
        let s0 = main_input(&mut m, f32_op(vec![4]));
        let limit = main_input(&mut m, i32_op(vec![1]));
        let cond_op = m.add_subgraph_operand(0, cond_t).expect("main");
        let body_op = m.add_subgraph_operand(0, body_t).expect("main");
        let i_out = m.main.add_output(i32_op(vec![1]));
        let acc_out = m.main.add_output(f32_op(vec![4]));
        m.add_operation(
            OperationType::While,
            vec![cond_op, body_op, i0, acc0, s0, limit],
            vec![i_out, acc_out],
            "while",
        );
        m.input_info = vec![
            io("i", DataType::I32, vec![1]),
            io("acc", DataType::F32, vec![4]),
            io("s", DataType::F32, vec![4]),
            io("limit", DataType::I32, vec![1]),
        ];
        m.output_info = vec![
            io("i_out", DataType::I32, vec![1]),
            io("acc_out", DataType::F32, vec![4]),
        ];
        m
    }

    /// A counting loop: `while i < limit { i += 1; acc += s; s *= 2 }`, outputs `(i, acc)`.
    /// Values: m = 2 input-output (`i: i32[1]`, `acc: f32[4]`), k = 1 state-only
    /// (`s: f32[4]`), n = 1 input-only (`limit: i32[1]`). From `i = 0`, `acc = 0`, `s = s0`
    /// and `limit = L`: `i = L`, `acc = (2^L - 1) * s0`.
    pub fn while_model() -> Model {
        while_with_body(|m, t, [i, acc, s, _limit]| {
            let one = i32_const(m, t, &[1]);
            let two = f32_const(m, t, vec![4], &[2.0; 4]);
            let act = scalar_i32(m, t, 0);
            let g = m.graph_mut(t).expect("body");
            let i2 = g.add_operand(i32_op(vec![1]));
            let acc2 = g.add_operand(f32_op(vec![4]));
            let s2 = g.add_operand(f32_op(vec![4]));
            g.add_operation(OperationType::Add, vec![i, one, act], vec![i2], "body/inc");
            g.add_operation(
                OperationType::Add,
                vec![acc, s, act],
                vec![acc2],
                "body/acc",
            );
            g.add_operation(
                OperationType::Mul,
                vec![s, two, act],
                vec![s2],
                "body/double",
            );
            [i2, acc2, s2]
        })
    }

    /// The loop of [`while_model`] whose body adds, through a nested IF, `s` to `acc`
    /// while `i < 3` and `10 * s` afterwards (then `s *= 1`): from `acc = 0`, `s = s0`,
    /// `limit = L > 3`: `acc = (3 + 10 (L - 3)) * s0`.
    pub fn nested_model() -> Model {
        while_with_body(|m, t, [i, acc, s, _limit]| {
            // then: acc + s; else: acc + 10 s. Inputs (acc, s).
            let then_t = {
                let mut g = Subgraph::default();
                let a = g.add_input(f32_op(vec![4]));
                let b = g.add_input(f32_op(vec![4]));
                let o = g.add_output(f32_op(vec![4]));
                let t2 = m.add_subgraph(g) as usize;
                let act = scalar_i32(m, t2, 0);
                m.graph_mut(t2).expect("then").add_operation(
                    OperationType::Add,
                    vec![a, b, act],
                    vec![o],
                    "then/add",
                );
                t2 as u32
            };
            let else_t = {
                let mut g = Subgraph::default();
                let a = g.add_input(f32_op(vec![4]));
                let b = g.add_input(f32_op(vec![4]));
                let tmp = g.add_operand(f32_op(vec![4]));
                let o = g.add_output(f32_op(vec![4]));
                let t2 = m.add_subgraph(g) as usize;
                let act = scalar_i32(m, t2, 0);
                let ten = f32_const(m, t2, vec![4], &[10.0; 4]);
                let g = m.graph_mut(t2).expect("else");
                g.add_operation(OperationType::Mul, vec![b, ten, act], vec![tmp], "else/mul");
                g.add_operation(OperationType::Add, vec![a, tmp, act], vec![o], "else/add");
                t2 as u32
            };
            let one = i32_const(m, t, &[1]);
            let three = i32_const(m, t, &[3]);
            let act = scalar_i32(m, t, 0);
            let then_op = m.add_subgraph_operand(t, then_t).expect("body");
            let else_op = m.add_subgraph_operand(t, else_t).expect("body");
            let g = m.graph_mut(t).expect("body");
            let i2 = g.add_operand(i32_op(vec![1]));
            let cond = g.add_operand(bool_op());
            let acc2 = g.add_operand(f32_op(vec![4]));
            let s2 = g.add_operand(f32_op(vec![4]));
            g.add_operation(OperationType::Less, vec![i, three], vec![cond], "body/less");
            g.add_operation(
                OperationType::If,
                vec![cond, then_op, else_op, acc, s],
                vec![acc2],
                "body/if",
            );
            g.add_operation(OperationType::Add, vec![i, one, act], vec![i2], "body/inc");
            // s' = s, through a MAXIMUM with itself.
            g.add_operation(OperationType::Maximum, vec![s, s], vec![s2], "body/keep");
            [i2, acc2, s2]
        })
    }

    /// A WHILE whose condition is always true (`i == i`): it runs until the loop timeout.
    pub fn infinite_model() -> Model {
        let mut m = while_model();
        let cond = m.graph_mut(1).expect("condition");
        let op = &mut cond.operations[0];
        op.op_type = OperationType::Equal;
        op.inputs[1] = op.inputs[0];
        m
    }

    /// IFs nested `levels` deep: main's IF runs graph 1 in both branches, graph t's IF
    /// runs graph t + 1, and the last graph computes `x + x`. Inputs `(cond: bool[1],
    /// x: f32[2])`, output `2 x`.
    pub fn if_chain(levels: usize) -> Model {
        let mut m = Model::default();
        for _ in 0..levels {
            m.add_subgraph(Subgraph::default());
        }
        for t in 1..=levels {
            let act = scalar_i32(&mut m, t, 0);
            let sub = (t < levels).then(|| {
                m.add_subgraph_operand(t, t as u32 + 1)
                    .expect("graph exists")
            });
            let g = m.graph_mut(t).expect("graph exists");
            let c = g.add_input(bool_op());
            let x = g.add_input(f32_op(vec![2]));
            let y = g.add_output(f32_op(vec![2]));
            match sub {
                Some(s) => g.add_operation(OperationType::If, vec![c, s, s, c, x], vec![y], ""),
                None => g.add_operation(OperationType::Add, vec![x, x, act], vec![y], ""),
            };
        }
        let c = main_input(&mut m, bool_op());
        let x = main_input(&mut m, f32_op(vec![2]));
        let s = m.add_subgraph_operand(0, 1).expect("main");
        let y = m.main.add_output(f32_op(vec![2]));
        m.add_operation(OperationType::If, vec![c, s, s, c, x], vec![y], "if");
        m.input_info = vec![
            io("cond", DataType::Bool, vec![1]),
            io("x", DataType::F32, vec![2]),
        ];
        m.output_info = vec![io("y", DataType::F32, vec![2])];
        m
    }
}
