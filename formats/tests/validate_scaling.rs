//! The validator's work on models with many subgraphs (issue 29, item 9): a chain of
//! 200,000 IF subgraphs took 177 s and 442 MB before its refusal, because every IF or
//! WHILE collected every graph again. Chains, Fibonacci ladders, fans and cycles of tens
//! of thousands of subgraphs are validated here under a counting allocator: the bytes
//! allocated while validating a model four times larger must grow about four times
//! (quadratic work grew them sixteen times, 3.2 GB allocated for 20,000 subgraphs), and
//! the problems kept stay bounded whatever the file breaks.
//!
//! The counters are per thread, so the tests of this binary may run in parallel.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use nnc_formats::nn::validate::{MAX_CONTROL_FLOW_DEPTH, MAX_PROBLEMS, MAX_SOURCE_BYTES};
use nnc_formats::nn::{
    IoInfo, Lifetime, Model, Operand, OperandType, OperationType, Subgraph, ValidationError,
    validate,
};
use nnc_formats::tensor::DataType;

/// Counts the bytes this thread allocates (in total, and the peak live above a mark).
struct Counting;

thread_local! {
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn on_alloc(size: usize) {
    // `try_with`: a thread being torn down has no counters any more.
    let _ = ALLOCATED.try_with(|a| a.set(a.get() + size as u64));
    let _ = LIVE.try_with(|l| {
        let now = l.get() + size as i64;
        l.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

fn on_free(size: usize) {
    let _ = LIVE.try_with(|l| l.set(l.get() - size as i64));
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are
// const-initialized thread-locals without destructors, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        on_alloc(layout.size());
        // SAFETY: the caller's layout is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        on_alloc(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        on_free(layout.size());
        // SAFETY: `ptr` came from this allocator with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        on_free(layout.size());
        on_alloc(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// What one validation cost this thread: bytes allocated in total, and the most held at
/// once beyond what was held before it.
#[derive(Debug, Clone, Copy)]
struct Cost {
    allocated: u64,
    peak: u64,
}

fn measured<T>(run: impl FnOnce() -> T) -> (T, Cost) {
    let start_allocated = ALLOCATED.with(Cell::get);
    let start_live = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start_live));
    let result = run();
    let cost = Cost {
        allocated: ALLOCATED.with(Cell::get) - start_allocated,
        peak: (PEAK.with(Cell::get) - start_live).max(0) as u64,
    };
    (result, cost)
}

/// Validates `build(n)` and `build(4 * n)`; asserts that the larger costs at most about
/// four times the smaller (a quadratic validator costs sixteen times), and returns both
/// results for the caller's own checks.
fn assert_linear(
    what: &str,
    n: usize,
    build: impl Fn(usize) -> Model,
) -> [Result<(), ValidationError>; 2] {
    assert_linear_with(what, n, build, validate)
}

/// [`assert_linear`] for any work `run` does on the model.
fn assert_linear_with<T>(
    what: &str,
    n: usize,
    build: impl Fn(usize) -> Model,
    run: impl Fn(&Model) -> T,
) -> [T; 2] {
    let small = build(n);
    let (small_result, small_cost) = measured(|| run(&small));
    drop(small);
    let large = build(4 * n);
    let (large_result, large_cost) = measured(|| run(&large));
    eprintln!("{what}: {n} -> {small_cost:?}, {} -> {large_cost:?}", 4 * n);
    // 4x for 4x the graphs, and a margin for vectors that grow by doubling.
    for (name, a, b) in [
        ("allocated", small_cost.allocated, large_cost.allocated),
        ("peak", small_cost.peak, large_cost.peak),
    ] {
        assert!(
            b <= 6 * a + (64 << 10),
            "{what}: {name} bytes grew from {a} for {n} to {b} for {}: not linear",
            4 * n
        );
    }
    // And in absolute terms: a few hundred bytes per graph, not a copy of all of them.
    let per_graph = large_cost.allocated / large.graphs().count() as u64;
    assert!(
        per_graph < 1024,
        "{what}: {per_graph} bytes allocated per graph"
    );
    [small_result, large_result]
}

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

/// `subgraphs` empty referenced subgraphs, and main with inputs `(cond, x)`.
fn new_model(subgraphs: usize) -> Model {
    let mut m = Model::default();
    m.main.add_input(bool_op());
    m.main.add_input(f32_op());
    m.referenced = vec![Subgraph::default(); subgraphs];
    m.input_info = vec![io("cond", DataType::Bool), io("x", DataType::F32)];
    m.output_info = vec![io("y", DataType::F32)];
    m
}

/// Graph `t`'s inputs `(cond, x)`, added unless `t` is main (which has them).
fn graph_inputs(m: &mut Model, t: usize) -> (u32, u32) {
    if t == 0 {
        return (m.main.inputs[0], m.main.inputs[1]);
    }
    let g = m.graph_mut(t).expect("graph exists");
    (g.add_input(bool_op()), g.add_input(f32_op()))
}

/// Makes graph `t` a leaf: inputs `(cond, x)`, output `x + x`.
fn fill_leaf(m: &mut Model, t: usize) {
    let (_, x) = graph_inputs(m, t);
    let act = m
        .add_constant_in(
            t,
            Operand::new(OperandType::Int32, vec![]),
            &0i32.to_le_bytes(),
        )
        .expect("graph exists");
    let g = m.graph_mut(t).expect("graph exists");
    let y = g.add_output(f32_op());
    g.add_operation(OperationType::Add, vec![x, x, act], vec![y], "leaf");
}

/// Adds `y = IF(cond, then, else, cond, x)` to graph `t` (one SUBGRAPH operand when
/// both branches are one graph): `y` a new output of `t` when `output`, a temporary
/// otherwise.
fn add_if(
    m: &mut Model,
    t: usize,
    (cond, x): (u32, u32),
    branches: (u32, u32),
    output: bool,
) -> u32 {
    let a = m.add_subgraph_operand(t, branches.0).expect("graph exists");
    let b = if branches.1 == branches.0 {
        a
    } else {
        m.add_subgraph_operand(t, branches.1).expect("graph exists")
    };
    let g = m.graph_mut(t).expect("graph exists");
    let y = if output {
        g.add_output(f32_op())
    } else {
        g.add_operand(f32_op())
    };
    g.add_operation(OperationType::If, vec![cond, a, b, cond, x], vec![y], "if");
    y
}

/// Graph k (main is 0) runs graph k + 1 in both branches of an IF; graph n is a leaf.
/// The audit's file: n levels of control flow.
fn chain(n: usize) -> Model {
    let mut m = new_model(n);
    for k in 0..n {
        let ins = graph_inputs(&mut m, k);
        let next = (k + 1) as u32;
        add_if(&mut m, k, ins, (next, next), true);
    }
    fill_leaf(&mut m, n);
    m
}

/// Graph k runs graphs k + 1 and k + 2: n levels deep with Fibonacci-many paths, which
/// a depth computation without memo walks one by one.
fn ladder(n: usize) -> Model {
    let mut m = new_model(n + 1);
    for k in 0..n {
        let ins = graph_inputs(&mut m, k);
        add_if(&mut m, k, ins, ((k + 1) as u32, (k + 2) as u32), true);
    }
    fill_leaf(&mut m, n);
    fill_leaf(&mut m, n + 1);
    m
}

/// Main runs `ifs` IFs in sequence, each over two leaves of its own: valid, one level
/// deep, `2 * ifs` subgraphs.
fn fan(ifs: usize) -> Model {
    let mut m = new_model(2 * ifs);
    let (cond, mut x) = graph_inputs(&mut m, 0);
    for i in 0..ifs {
        let (a, b) = (2 * i + 1, 2 * i + 2);
        fill_leaf(&mut m, a);
        fill_leaf(&mut m, b);
        x = add_if(&mut m, 0, (cond, x), (a as u32, b as u32), i + 1 == ifs);
    }
    m
}

/// `n` subgraphs in one ring (graph k runs k + 1, the last runs 1), entered from main.
fn ring(n: usize) -> Model {
    let mut m = chain(n);
    // Graph n was the leaf: make it run graph 1 again.
    let g = &mut m.referenced[n - 1];
    *g = Subgraph::default();
    let ins = graph_inputs(&mut m, n);
    add_if(&mut m, n, ins, (1, 1), true);
    m
}

/// Main runs `n` IFs in sequence whose branches are subgraphs that each run
/// themselves: every one is a problem.
fn self_references(n: usize) -> Model {
    let mut m = new_model(n);
    let (cond, mut x) = graph_inputs(&mut m, 0);
    for i in 0..n {
        let t = i + 1;
        let ins = graph_inputs(&mut m, t);
        add_if(&mut m, t, ins, (t as u32, t as u32), true);
        x = add_if(&mut m, 0, (cond, x), (t as u32, t as u32), i + 1 == n);
    }
    m
}

fn messages(result: &Result<(), ValidationError>) -> Vec<String> {
    match result {
        Ok(()) => Vec::new(),
        Err(e) => e.problems.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn a_long_chain_is_refused_for_its_depth_in_linear_work() {
    let [small, large] = assert_linear("chain", 20_000, chain);
    for (result, n) in [(small, 20_000), (large, 80_000)] {
        assert_eq!(
            messages(&result),
            [format!(
                "model: control flow nests {n} levels deep; at most {MAX_CONTROL_FLOW_DEPTH} are allowed"
            )]
        );
    }
}

#[test]
fn a_ladder_with_exponentially_many_paths_is_measured_once_per_graph() {
    let [small, large] = assert_linear("ladder", 20_000, ladder);
    for (result, n) in [(small, 20_000), (large, 80_000)] {
        assert_eq!(
            messages(&result),
            [format!(
                "model: control flow nests {n} levels deep; at most {MAX_CONTROL_FLOW_DEPTH} are allowed"
            )]
        );
    }
    // The deepest a model may nest, with its 2^32-odd paths, is valid.
    validate(&ladder(MAX_CONTROL_FLOW_DEPTH)).unwrap();
    let all = messages(&validate(&ladder(MAX_CONTROL_FLOW_DEPTH + 1)));
    assert!(all[0].contains("nests 33 levels deep"), "{all:?}");
}

#[test]
fn a_wide_fan_of_subgraphs_is_valid_in_linear_work() {
    let [small, large] = assert_linear("fan", 10_000, fan);
    small.unwrap();
    large.unwrap();
}

#[test]
fn a_long_ring_of_subgraphs_is_one_cycle() {
    let [small, large] = assert_linear("ring", 20_000, ring);
    for (result, n) in [(small, 20_000), (large, 80_000)] {
        // The ring, closed once, and the depth of the path into it.
        assert_eq!(
            messages(&result),
            [
                format!("subgraph {n}: subgraph references form a cycle through subgraph 1"),
                format!(
                    "model: control flow nests {n} levels deep; at most {MAX_CONTROL_FLOW_DEPTH} are allowed"
                ),
            ]
        );
    }
}

#[test]
fn problems_beyond_the_cap_are_counted_not_kept() {
    let [small, large] = assert_linear("self-references", 5_000, self_references);
    for (result, n) in [(small, 5_000), (large, 20_000)] {
        let err = result.unwrap_err();
        assert_eq!(err.problems.len(), MAX_PROBLEMS);
        // Each subgraph refers to itself and closes a cycle.
        assert_eq!(err.problems.len() + err.omitted, 2 * n);
        let text = err.to_string();
        assert!(
            text.starts_with(&format!("the model is invalid ({} problems)", 2 * n)),
            "{}",
            &text[..200]
        );
        assert!(
            text.ends_with(&format!("\n  - and {} more", 2 * n - MAX_PROBLEMS)),
            "{}",
            &text[text.len() - 200..]
        );
    }
}

/// One operation reading one unwritten operand 20,000 times, named by a 64 KiB node
/// name: each problem named the node in full (1.3 GB for a 150 KB file).
#[test]
fn a_long_node_name_is_cut_in_every_problem() {
    let mut m = new_model(0);
    let dangling = m.main.add_operand(f32_op());
    let axis = m.add_i32(0);
    let y = m
        .main
        .add_output(Operand::new(OperandType::TensorFloat32, vec![0]));
    let mut inputs = vec![dangling; 20_000];
    inputs.push(axis);
    // Byte 256 falls inside a character.
    let name = format!("x{}", "é".repeat(32 << 10));
    m.add_operation(OperationType::Concatenation, inputs, vec![y], name.as_str());
    let (result, cost) = measured(|| validate(&m));
    let err = result.unwrap_err();
    assert_eq!(err.problems.len(), MAX_PROBLEMS);
    assert!(err.omitted >= 20_000 - MAX_PROBLEMS, "{}", err.omitted);
    for p in &err.problems {
        if let nnc_formats::nn::validate::Location::Operation { source, .. } = &p.location {
            assert!(source.len() <= MAX_SOURCE_BYTES + 3, "{}", source.len());
            assert!(name.starts_with(source.trim_end_matches("...")));
        }
    }
    assert!(
        cost.peak < 8 << 20,
        "validation held {} bytes for {} problems",
        cost.peak,
        err.problems.len()
    );
}

/// Unreferenced and out-of-range references in a large model are reported, not
/// followed.
#[test]
fn references_out_of_range_are_refused_in_a_large_model() {
    let mut m = fan(5_000);
    let beyond = m.referenced.len() as u64 + 1;
    let sub = m.main.operations[17].inputs[1] as usize;
    assert_eq!(m.main.operands[sub].lifetime, Lifetime::Subgraph);
    m.main.operands[sub].location.offset = beyond;
    let all = messages(&validate(&m));
    assert!(
        all.iter()
            .any(|p| p.contains(&format!("refers to subgraph {beyond} which does not exist"))),
        "{all:?}"
    );
}

/// Which IF of main runs each operation: one walk for all of main's IFs (a walk per IF,
/// each with a table of every graph, was quadratic in the runtime's load).
#[test]
fn the_main_operation_of_every_operation_is_found_in_linear_work() {
    let [small, large] = assert_linear_with("fan roots", 10_000, fan, Model::main_operation_of);
    for (roots, ifs) in [(small, 10_000), (large, 40_000)] {
        // Main's IFs, then each leaf's ADD, run by the IF that names its graph.
        let expected: Vec<Option<usize>> = (0..ifs)
            .map(Some)
            .chain((0..2 * ifs).map(|k| Some(k / 2)))
            .collect();
        assert_eq!(roots, expected);
    }
    let [small, large] = assert_linear_with("chain roots", 20_000, chain, Model::main_operation_of);
    for (roots, n) in [(small, 20_000), (large, 80_000)] {
        assert_eq!(roots, vec![Some(0); n + 1]);
    }
    // A graph two IFs reach belongs to the first; what only the second reaches, to it.
    let mut m = fan(2);
    let shared = m.main.operations[0].inputs[1];
    m.main.operations[1].inputs[1] = shared;
    assert_eq!(
        m.main_operation_of(),
        [Some(0), Some(1), Some(0), Some(0), None, Some(1)]
    );
}

/// The graphs each IF of a wide fan reaches, asked once per IF: work per IF
/// proportional to what it reaches.
#[test]
fn the_graphs_an_operation_reaches_cost_what_it_reaches() {
    let per_if = |m: &Model| -> Vec<Vec<usize>> {
        (0..m.main.operations.len())
            .map(|i| m.graphs_reached(0, i))
            .collect()
    };
    let [small, large] = assert_linear_with("fan reach", 10_000, fan, per_if);
    for (reached, ifs) in [(small, 10_000), (large, 40_000)] {
        let expected: Vec<Vec<usize>> = (0..ifs).map(|i| vec![2 * i + 1, 2 * i + 2]).collect();
        assert_eq!(reached, expected);
    }
    let m = ladder(5);
    assert_eq!(m.graphs_reached(0, 0), [1, 2, 3, 4, 5, 6]);
    assert_eq!(m.graphs_reached(3, 0), [4, 5, 6]);
    assert_eq!(m.graphs_reached(3, 1), Vec::<usize>::new());
}
