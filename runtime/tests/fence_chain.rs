//! A long chain of fenced work whose first dependency fails unwinds iteratively: every
//! link ends failed, and the stack does not grow with the chain.

use std::sync::Arc;

use nnc_formats::container::{WriteOptions, write};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::{IoInfo, Model, Operand, OperandType, OperationType};
use nnc_formats::tensor::DataType;
use nnc_runtime::{Execution, Fence, FenceState, LoadOptions, Memory, PreparedModel, SimulatedNpu};

const LINKS: usize = 100_000;
/// Each execution keeps its own working state (about 160 KB here in a debug build), so
/// the chain of executions is shorter; it still overflows the small stack recursively.
const EXECUTIONS: usize = 1_000;

/// `y = relu(x)`, f32[1, 4].
fn load_model() -> Arc<PreparedModel> {
    let mut m = Model::default();
    let op = || Operand::new(OperandType::TensorFloat32, vec![1, 4]);
    let x = m.main.add_input(op());
    let y = m.main.add_output(op());
    m.add_operation(OperationType::Relu, vec![x], vec![y], "relu");
    let io = |name: &str| IoInfo {
        name: name.into(),
        dtype: DataType::F32,
        dims: vec![1, 4],
    };
    m.input_info = vec![io("x")];
    m.output_info = vec![io("y")];
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let bytes = write(
        &m,
        &WriteOptions {
            envelope: Default::default(),
            key: Some(&key),
            mode: Mode::Ctr,
            authenticate_only: false,
            reproducible: false,
            producer: "nnc test".into(),
            arena: None,
            extra_sections: Vec::new(),
        },
    )
    .unwrap();
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(key.as_bytes());
    Arc::new(PreparedModel::load_bytes(bytes, &npu, &LoadOptions::default()).unwrap())
}

/// 100,000 fences, each joining the previous one; the first fails. Run on a thread with
/// a small stack (256 KiB): recursion through the callbacks would need far more.
#[test]
fn a_failure_at_the_head_of_100000_chained_fences_fails_them_all() {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let head = Fence::new();
            let mut chain = Vec::with_capacity(LINKS);
            let mut last = head.clone();
            for _ in 0..LINKS {
                last = Fence::all(std::slice::from_ref(&last));
                chain.push(last.clone());
            }
            assert_eq!(last.state(), FenceState::Pending);
            head.fail("the first link failed");
            for fence in &chain {
                assert_eq!(
                    fence.state(),
                    FenceState::Failed("the first link failed".into())
                );
            }
        })
        .unwrap()
        .join()
        .unwrap();
}

/// 1,000 fenced executions, each waiting for the previous one's fence; the first
/// dependency fails, so none runs and every one ends failed, naming the cause.
#[test]
fn a_failure_at_the_head_of_chained_executions_fails_them_all() {
    let model = load_model();
    let input = Memory::new(16).unwrap();
    let output = Memory::new(16).unwrap();
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let head = Fence::new();
            let mut last = head.clone();
            let mut fenced = Vec::with_capacity(EXECUTIONS);
            for _ in 0..EXECUTIONS {
                let mut e = Execution::new(&model);
                e.set_input_memory(0, &input).unwrap();
                e.set_output_memory(0, &output).unwrap();
                let f = e
                    .start_compute_after(std::slice::from_ref(&last), None)
                    .unwrap();
                last = f.fence().clone();
                fenced.push((e, f));
            }
            head.fail("the producer failed");
            for (_, f) in fenced {
                assert!(matches!(f.fence().state(), FenceState::Failed(_)));
                let err = f.wait().unwrap_err();
                assert!(err.to_string().contains("the producer failed"), "{err}");
            }
        })
        .unwrap()
        .join()
        .unwrap();
}

/// A callback that panics in the middle of a chain does not strand the links behind it:
/// they still end failed, and the panic reaches whoever signalled the head.
#[test]
fn a_panicking_callback_does_not_strand_the_rest_of_the_chain() {
    let head = Fence::new();
    let first = Fence::all(std::slice::from_ref(&head));
    first.on_signal(|_| panic!("a callback's bug"));
    let mut chain = Vec::new();
    let mut last = first.clone();
    for _ in 0..100 {
        last = Fence::all(std::slice::from_ref(&last));
        chain.push(last.clone());
    }
    let signalled = std::panic::catch_unwind(|| head.fail("the first link failed"));
    assert!(signalled.is_err(), "the callback's panic is not swallowed");
    for fence in &chain {
        assert_eq!(
            fence.state(),
            FenceState::Failed("the first link failed".into())
        );
    }
}
