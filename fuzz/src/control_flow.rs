//! The `control_flow` target: control-flow structures of every size and shape (issue 29).
//!
//! The input does not hold a model: it is decoded into a structure (how many subgraphs,
//! which IF or WHILE runs which, self-references, cycles, references out of range,
//! chains, ladders, fans and rings of up to [`MAX_PATTERN`] subgraphs, the values carried
//! and the operand counts of branches, small breaks of the rules), from which a valid-
//! looking NN [`Model`] is built. The model is validated; a valid one is written as a
//! `.nnc` (weights of every graph encrypted), opened again, loaded on the simulated NPU
//! and run once on tiny tensors with a short loop timeout.
//!
//! Findings: a panic; a validation error without problems, with more than
//! [`MAX_PROBLEMS`] or with an unbounded message; a file nnc wrote that does not open,
//! or that opens although its model is invalid; an execution beyond the fuzzer's
//! timeout (20 s) or RSS limit (2 GiB). That validation grows linearly with the number
//! of subgraphs is asserted by `formats/tests/validate_scaling.rs`.

use nnc_formats::container::{Container, WriteOptions};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::validate::{MAX_PROBLEMS, MAX_SOURCE_BYTES};
use nnc_formats::nn::{IoInfo, Model, Operand, OperandType, OperationType, Subgraph, validate};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::{PreparedModel, SimulatedNpu};

use crate::{FUZZ_KEY, load_options};

/// Subgraphs a pattern (chain, ladder, fan, ...) may add: a tenth of the audit's
/// 200,000, which keeps an execution under a second.
pub const MAX_PATTERN: usize = 20_000;

/// Models with more graphs are validated and written, not prepared: preparing copies
/// per subgraph (issue 29 item 2) would make each execution slow.
pub const MAX_PREPARED_GRAPHS: usize = 512;

/// The input, read as bytes that are 0 once it is exhausted.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn below(&mut self, n: usize) -> usize {
        usize::from(self.u8()) % n.max(1)
    }
}

/// The kinds of values graphs carry: `bool[1]`, `i32[1]`, `f32[len]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Bool,
    I32,
    F32,
}

impl Kind {
    fn from(b: u8) -> Kind {
        [Kind::Bool, Kind::I32, Kind::F32][usize::from(b) % 3]
    }
}

/// What a graph returns: the carried values (a branch or a loop body), only the first
/// `k` of them, or one `bool[1]` (a loop condition).
#[derive(Clone, Copy, Debug)]
enum Returns {
    All,
    Prefix(usize),
    Condition,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// `v + v` (int or float), `NOT v` (bool), on the value `a` back from the newest.
    Arith {
        a: u8,
    },
    /// `v < c` on the newest int value.
    Less {
        c: i8,
    },
    If {
        then: u64,
        other: u64,
        mutation: u8,
    },
    While {
        cond: u64,
        body: u64,
        m: u8,
        mutation: u8,
    },
}

struct GraphSpec {
    returns: Returns,
    ops: Vec<Op>,
    /// Unused temporaries added to the graph (operand counts of branches).
    padding: usize,
}

struct Spec {
    /// Elements of every `f32` value (40 makes constants pooled: weight fields).
    len: u32,
    /// The values every graph takes as inputs, in order.
    carried: Vec<Kind>,
    /// Graph 0 is main.
    graphs: Vec<GraphSpec>,
    /// Inputs of the execution: the condition and the int values' start.
    cond: bool,
    start: i32,
}

/// A graph reference as the input names it: relative, to itself, to main, out of range
/// or anywhere.
fn graph_ref(input: &mut Input, t: usize, count: usize) -> u64 {
    let t = t as u64;
    match input.u8() % 8 {
        0 | 1 => t + 1,
        2 => t + 2,
        3 => t,
        4 => 0,
        5 => count as u64 + u64::from(input.u8()),
        6 => u64::MAX - u64::from(input.u8()),
        _ => input.below(count + 1) as u64,
    }
}

fn decode(data: &[u8]) -> Spec {
    let mut input = Input { data, pos: 0 };
    let len = [1, 3, 40][input.below(3)];
    let carried: Vec<Kind> = (0..input.below(9))
        .map(|_| Kind::from(input.u8()))
        .collect();
    let explicit = input.below(17);
    let pattern_kind = input.below(8);
    // Up to 255 subgraphs, or (one input in 16) up to 128 times as many.
    let base = usize::from(input.u8());
    let scale = match input.u8() {
        b if b >= 0xf0 => b & 7,
        _ => 0,
    };
    let pattern = (base << scale).min(MAX_PATTERN);
    let cond = input.u8() & 1 == 1;
    let start = i32::from(input.u8() as i8);
    let count = 1 + explicit;
    let mut graphs = Vec::with_capacity(count);
    for t in 0..count {
        let returns = match input.u8() % 4 {
            0 | 1 => Returns::All,
            2 => Returns::Prefix(input.below(carried.len() + 1)),
            _ => Returns::Condition,
        };
        let padding = match input.u8() {
            b if b >= 0xf0 => usize::from(input.u8()) * 16,
            _ => 0,
        };
        let mut ops = Vec::new();
        for _ in 0..input.below(9) {
            let op = match input.u8() % 6 {
                0 => Op::Arith { a: input.u8() },
                1 => Op::Less {
                    c: input.u8() as i8,
                },
                2 | 3 => Op::If {
                    then: graph_ref(&mut input, t, count),
                    other: graph_ref(&mut input, t, count),
                    mutation: input.u8(),
                },
                _ => Op::While {
                    cond: graph_ref(&mut input, t, count),
                    body: graph_ref(&mut input, t, count),
                    m: input.u8(),
                    mutation: input.u8(),
                },
            };
            ops.push(op);
        }
        graphs.push(GraphSpec {
            returns,
            ops,
            padding,
        });
    }
    add_pattern(&mut graphs, pattern_kind, pattern);
    Spec {
        len,
        carried,
        graphs,
        cond,
        start,
    }
}

/// Appends `n` subgraphs in one of the shapes that made validation quadratic, entered
/// from main.
fn add_pattern(graphs: &mut Vec<GraphSpec>, kind: usize, n: usize) {
    if n == 0 || kind == 0 {
        return;
    }
    let first = graphs.len() as u64;
    let branch = |ops: Vec<Op>| GraphSpec {
        returns: Returns::All,
        ops,
        padding: 0,
    };
    let if_op = |then: u64, other: u64| Op::If {
        then,
        other,
        mutation: 0,
    };
    let mut entry = Vec::new();
    for i in 0..n as u64 {
        let t = first + i;
        let last = i + 1 == n as u64;
        let spec = match kind {
            // chain: t runs t + 1; the last is a leaf.
            1 => branch(if last {
                vec![]
            } else {
                vec![if_op(t + 1, t + 1)]
            }),
            // ladder: t runs t + 1 and t + 2.
            2 => branch(if last {
                vec![]
            } else {
                vec![if_op(t + 1, (t + 2).min(first + n as u64 - 1))]
            }),
            // fan: main runs each leaf.
            3 => {
                entry.push(if_op(t, t));
                branch(vec![Op::Arith { a: 0 }])
            }
            // ring: t runs t + 1, the last runs the first.
            4 => {
                let next = if last { first } else { t + 1 };
                branch(vec![if_op(next, next)])
            }
            // each runs itself.
            5 => {
                entry.push(if_op(t, t));
                branch(vec![if_op(t, t)])
            }
            // while chain: the first is a condition, each body loops over the next.
            6 => {
                if i == 0 {
                    GraphSpec {
                        returns: Returns::Condition,
                        ops: vec![Op::Less { c: 3 }],
                        padding: 0,
                    }
                } else {
                    let ops = if last {
                        vec![]
                    } else {
                        vec![Op::While {
                            cond: first,
                            body: t + 1,
                            m: 0,
                            mutation: 0,
                        }]
                    };
                    branch(ops)
                }
            }
            // shared: main runs the one leaf n times.
            _ => {
                entry.extend(std::iter::repeat_n(if_op(first, first), n));
                graphs.push(branch(vec![Op::Arith { a: 0 }]));
                break;
            }
        };
        graphs.push(spec);
    }
    match kind {
        1 | 2 | 4 => entry.push(if_op(first, first)),
        6 if n > 1 => entry.push(Op::While {
            cond: first,
            body: first + 1,
            m: 0,
            mutation: 0,
        }),
        _ => {}
    }
    graphs[0].ops.extend(entry);
}

/// The values a graph has so far, and the newest of each kind (found by a scan, a main
/// of 20,000 IFs took seconds to build).
#[derive(Default)]
struct Values {
    list: Vec<(u32, Kind)>,
    newest: [Option<u32>; 3],
}

impl Values {
    fn push(&mut self, value: u32, kind: Kind) {
        self.list.push((value, kind));
        self.newest[kind as usize] = Some(value);
    }
}

/// Builds one graph after another into a model.
struct Builder<'s> {
    spec: &'s Spec,
    model: Model,
}

impl Builder<'_> {
    fn operand(&self, kind: Kind) -> Operand {
        match kind {
            Kind::Bool => Operand::new(OperandType::TensorBool8, vec![1]),
            Kind::I32 => Operand::new(OperandType::TensorInt32, vec![1]),
            Kind::F32 => Operand::new(OperandType::TensorFloat32, vec![self.spec.len]),
        }
    }

    fn constant(&mut self, t: usize, kind: Kind, value: i32) -> u32 {
        let bytes: Vec<u8> = match kind {
            Kind::Bool => vec![u8::from(value != 0)],
            Kind::I32 => value.to_le_bytes().to_vec(),
            Kind::F32 => (0..self.spec.len)
                .flat_map(|i| (value as f32 + i as f32 * 0.25).to_le_bytes())
                .collect(),
        };
        let operand = self.operand(kind);
        self.model
            .add_constant_in(t, operand, &bytes)
            .unwrap_or_default()
    }

    fn scalar(&mut self, t: usize, value: i32) -> u32 {
        let operand = Operand::new(OperandType::Int32, vec![]);
        self.model
            .add_constant_in(t, operand, &value.to_le_bytes())
            .unwrap_or_default()
    }

    fn temporary(&mut self, t: usize, kind: Kind) -> u32 {
        let operand = self.operand(kind);
        match self.model.graph_mut(t) {
            Some(g) => g.add_operand(operand),
            None => 0,
        }
    }

    fn push(&mut self, t: usize, op: OperationType, inputs: Vec<u32>, outputs: Vec<u32>) {
        if let Some(g) = self.model.graph_mut(t) {
            g.add_operation(op, inputs, outputs, format!("{}{t}", op.name()));
        }
    }

    /// The newest value of `kind` in `values`, or a new constant of it.
    fn newest(&mut self, t: usize, values: &Values, kind: Kind, constant: i32) -> u32 {
        match values.newest[kind as usize] {
            Some(i) => i,
            None => self.constant(t, kind, constant),
        }
    }

    /// Writes a new value of `kind` computed from `values`: `+ 1` for ints (so that a
    /// loop over `i < c` ends), `+ x` for floats, `NOT` for bools.
    fn derive(&mut self, t: usize, values: &Values, kind: Kind) -> u32 {
        let y = self.temporary(t, kind);
        match kind {
            Kind::Bool => {
                let b = self.newest(t, values, Kind::Bool, 1);
                self.push(t, OperationType::LogicalNot, vec![b], vec![y]);
            }
            Kind::I32 | Kind::F32 => {
                let x = self.newest(t, values, kind, 0);
                let one = self.constant(t, kind, 1);
                let act = self.scalar(t, 0);
                self.push(t, OperationType::Add, vec![x, one, act], vec![y]);
            }
        }
        y
    }

    /// The SUBGRAPH operand naming graph `target`.
    fn reference(&mut self, t: usize, target: u64) -> u32 {
        let mut operand = Operand::new(OperandType::Subgraph, vec![]);
        operand.lifetime = nnc_formats::nn::Lifetime::Subgraph;
        operand.location.offset = target;
        match self.model.graph_mut(t) {
            Some(g) => g.add_operand(operand),
            None => 0,
        }
    }

    /// What graph `target` returns, as kinds (the carried values for a graph that does
    /// not exist).
    fn returns(&self, target: u64) -> Vec<Kind> {
        let carried = &self.spec.carried;
        let spec = usize::try_from(target)
            .ok()
            .and_then(|t| self.spec.graphs.get(t));
        match spec.map(|g| g.returns) {
            Some(Returns::Condition) => vec![Kind::Bool],
            Some(Returns::Prefix(k)) => carried[..k.min(carried.len())].to_vec(),
            _ => carried.clone(),
        }
    }

    /// Breaks one rule of an IF or WHILE, as `mutation` says (most say none).
    fn mutate(&mut self, t: usize, mutation: u8, inputs: &mut Vec<u32>, outputs: &mut Vec<u32>) {
        match mutation % 32 {
            1 => {
                inputs.pop();
            }
            2 => inputs.push(inputs.last().copied().unwrap_or(0)),
            3 => {
                if let Some(o) = outputs.first_mut() {
                    *o = self.temporary(t, Kind::F32);
                }
            }
            4 => {
                if let Some(&o) = outputs.first()
                    && let Some(g) = self.model.graph_mut(t)
                {
                    g.operands[o as usize].dimensions = vec![0];
                }
            }
            5 => {
                let last = inputs.len().saturating_sub(1);
                inputs.swap(0, last);
            }
            6 => {
                if let Some(&o) = outputs.first() {
                    outputs.push(o);
                }
            }
            7 => outputs.clear(),
            8 => {
                let kind = Kind::from(mutation / 32);
                let x = self.constant(t, kind, 0);
                if let Some(i) = inputs.get_mut(usize::from(mutation / 32) % 3) {
                    *i = x;
                }
            }
            _ => {}
        }
    }

    fn graph(&mut self, t: usize) {
        let spec = self.spec;
        let g = &spec.graphs[t];
        // The carried values are the graph's inputs.
        let mut values = Values::default();
        for &kind in &spec.carried {
            let operand = self.operand(kind);
            if let Some(graph) = self.model.graph_mut(t) {
                values.push(graph.add_input(operand), kind);
            }
        }
        for _ in 0..g.padding {
            self.temporary(t, Kind::F32);
        }
        for &op in &g.ops {
            match op {
                Op::Arith { a } => {
                    let Some(&(x, kind)) = values
                        .list
                        .iter()
                        .rev()
                        .nth(usize::from(a) % values.list.len().max(1))
                    else {
                        continue;
                    };
                    let y = self.temporary(t, kind);
                    if kind == Kind::Bool {
                        self.push(t, OperationType::LogicalNot, vec![x], vec![y]);
                    } else {
                        let act = self.scalar(t, 0);
                        self.push(t, OperationType::Add, vec![x, x, act], vec![y]);
                    }
                    values.push(y, kind);
                }
                Op::Less { c } => {
                    let x = self.newest(t, &values, Kind::I32, 0);
                    let c = self.constant(t, Kind::I32, i32::from(c));
                    let y = self.temporary(t, Kind::Bool);
                    self.push(t, OperationType::Less, vec![x, c], vec![y]);
                    values.push(y, Kind::Bool);
                }
                Op::If {
                    then,
                    other,
                    mutation,
                } => {
                    let cond = self.newest(t, &values, Kind::Bool, i32::from(spec.cond));
                    let a = self.reference(t, then);
                    let b = self.reference(t, other);
                    let mut inputs = vec![cond, a, b];
                    inputs.extend(values.list.iter().take(spec.carried.len()).map(|v| v.0));
                    let kinds = self.returns(then);
                    let mut outputs: Vec<u32> =
                        kinds.iter().map(|&k| self.temporary(t, k)).collect();
                    self.mutate(t, mutation, &mut inputs, &mut outputs);
                    self.push(t, OperationType::If, inputs, outputs.clone());
                    for (y, kind) in outputs.into_iter().zip(kinds) {
                        values.push(y, kind);
                    }
                }
                Op::While {
                    cond,
                    body,
                    m,
                    mutation,
                } => {
                    let a = self.reference(t, cond);
                    let b = self.reference(t, body);
                    let mut inputs = vec![a, b];
                    inputs.extend(values.list.iter().take(spec.carried.len()).map(|v| v.0));
                    let carried = &spec.carried;
                    let m = 1 + usize::from(m) % carried.len().max(1);
                    let kinds = carried[..m.min(carried.len())].to_vec();
                    let mut outputs: Vec<u32> =
                        kinds.iter().map(|&k| self.temporary(t, k)).collect();
                    self.mutate(t, mutation, &mut inputs, &mut outputs);
                    self.push(t, OperationType::While, inputs, outputs.clone());
                    for (y, kind) in outputs.into_iter().zip(kinds) {
                        values.push(y, kind);
                    }
                }
            }
        }
        // The outputs: a value computed here for each kind returned (never an input).
        let kinds = self.returns(t as u64);
        let mut used = vec![false; values.list.len()];
        let mut outputs = Vec::with_capacity(kinds.len());
        for kind in kinds {
            let computed = (spec.carried.len()..values.list.len())
                .rev()
                .find(|&k| !used[k] && values.list[k].1 == kind);
            let y = match computed {
                Some(k) => {
                    used[k] = true;
                    values.list[k].0
                }
                None => self.derive(t, &values, kind),
            };
            outputs.push(y);
        }
        if let Some(graph) = self.model.graph_mut(t) {
            for y in outputs {
                if let Some(o) = graph.operands.get_mut(y as usize) {
                    o.lifetime = nnc_formats::nn::Lifetime::SubgraphOutput;
                }
                graph.outputs.push(y);
            }
        }
    }

    fn io(&self, kind: Kind, k: usize, what: &str) -> IoInfo {
        let (dtype, dims) = match kind {
            Kind::Bool => (DataType::Bool, vec![1]),
            Kind::I32 => (DataType::I32, vec![1]),
            Kind::F32 => (DataType::F32, vec![self.spec.len]),
        };
        IoInfo {
            name: format!("{what}{k}"),
            dtype,
            dims,
        }
    }
}

fn build(spec: &Spec) -> Model {
    let mut b = Builder {
        spec,
        model: Model::default(),
    };
    b.model.referenced = (1..spec.graphs.len())
        .map(|_| Subgraph::default())
        .collect();
    for t in 0..spec.graphs.len() {
        b.graph(t);
    }
    let main_returns = b.returns(0);
    b.model.input_info = spec
        .carried
        .iter()
        .enumerate()
        .map(|(k, &kind)| b.io(kind, k, "in"))
        .collect();
    b.model.output_info = main_returns
        .iter()
        .enumerate()
        .map(|(k, &kind)| b.io(kind, k, "out"))
        .collect();
    b.model
}

/// The execution's inputs: the condition, the start of the int values, floats.
fn inputs(spec: &Spec) -> Vec<HostTensor> {
    spec.carried
        .iter()
        .map(|kind| match kind {
            Kind::Bool => HostTensor {
                dtype: DataType::Bool,
                shape: vec![1],
                data: vec![u8::from(spec.cond)],
            },
            Kind::I32 => HostTensor {
                dtype: DataType::I32,
                shape: vec![1],
                data: spec.start.to_le_bytes().to_vec(),
            },
            Kind::F32 => HostTensor {
                dtype: DataType::F32,
                shape: vec![spec.len as usize],
                data: (0..spec.len)
                    .flat_map(|i| (i as f32).to_le_bytes())
                    .collect(),
            },
        })
        .collect()
}

/// The target.
pub fn control_flow(data: &[u8]) {
    let spec = decode(data);
    let model = build(&spec);
    let verdict = validate(&model);
    if let Err(e) = &verdict {
        assert!(
            !e.problems.is_empty(),
            "a validation error without problems"
        );
        assert!(
            e.problems.len() <= MAX_PROBLEMS,
            "{} problems kept",
            e.problems.len()
        );
        for p in &e.problems {
            // A node name here is at most 16 bytes; messages name sizes, not contents.
            assert!(
                p.to_string().len() <= 1024 + MAX_SOURCE_BYTES,
                "an unbounded problem: {p}"
            );
        }
    }
    let Ok(key) = Key::new(Algorithm::Aes128, &FUZZ_KEY) else {
        return;
    };
    let options = WriteOptions {
        envelope: Default::default(),
        key: Some(&key),
        mode: Mode::Ctr,
        reproducible: true,
        authenticate_only: false,
        producer: "nnc fuzz".into(),
        arena: None,
        extra_sections: Vec::new(),
    };
    // The writer may refuse what it cannot lay out; what it writes must read back as
    // valid exactly when the model is.
    let Ok(bytes) = nnc_formats::container::write(&model, &options) else {
        return;
    };
    let opened = Container::open(&bytes, Some(&FUZZ_KEY));
    match (&verdict, &opened) {
        (Ok(()), Err(e)) => panic!("a valid model nnc wrote does not open: {e}"),
        (Err(v), Ok(_)) => panic!("an invalid model opened after writing: {v}"),
        _ => {}
    }
    drop(opened);
    if verdict.is_err() || spec.graphs.len() > MAX_PREPARED_GRAPHS {
        return;
    }
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(&FUZZ_KEY);
    let Ok(prepared) = PreparedModel::load_bytes(bytes, &npu, &load_options()) else {
        return;
    };
    let options = nnc_runtime::exec::ExecuteOptions {
        loop_timeout: Some(std::time::Duration::from_millis(10)),
        ..Default::default()
    };
    if let Err(e) = prepared.run_with(&inputs(&spec), &options) {
        assert!(!e.to_string().is_empty());
    }
}
