//! The execution API: reusable executions bound to memory objects, bursts, fenced and
//! queued executions, priorities, deadlines, memory domains and shared memory.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use nnc_formats::container::{WriteOptions, write};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::{IoInfo, Model, Operand, OperandType, OperationType};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::error::{DeadlineKind, DeadlineStage};
use nnc_runtime::execution::IoKind;
use nnc_runtime::{
    Burst, ExecuteOptions, Execution, Fence, FenceState, LoadOptions, Memory, MemoryDesc,
    PreparedModel, Priority, RuntimeError, Scheduler, SimulatedNpu,
};

/// `y = FC(...FC(FC(x)))`: `layers` FULLY_CONNECTED layers of width `n` with
/// deterministic weights, x and y `f32[1, n]`.
fn chain_model(n: u32, layers: usize) -> Model {
    let mut m = Model::default();
    let f32_op = |dims: Vec<u32>| Operand::new(OperandType::TensorFloat32, dims);
    let mut x = m.main.add_input(f32_op(vec![1, n]));
    for l in 0..layers {
        let weights: Vec<f32> = (0..n * n)
            .map(|k| ((k as usize * 7 + l * 13) % 17) as f32 / (17.0 * n as f32) - 0.02)
            .collect();
        let bias: Vec<f32> = (0..n).map(|k| (k % 5) as f32 * 0.01).collect();
        let w = m.add_f32_tensor(vec![n, n], &weights);
        let b = m.add_f32_tensor(vec![n], &bias);
        let act = m.add_i32(1); // RELU
        let y = if l + 1 == layers {
            m.main.add_output(f32_op(vec![1, n]))
        } else {
            m.add_operand(f32_op(vec![1, n]))
        };
        m.add_operation(
            OperationType::FullyConnected,
            vec![x, w, b, act],
            vec![y],
            format!("fc{l}"),
        );
        x = y;
    }
    let io = |name: &str| IoInfo {
        name: name.into(),
        dtype: DataType::F32,
        dims: vec![1, n],
    };
    m.input_info = vec![io("x")];
    m.output_info = vec![io("y")];
    m
}

fn load_with(model: &Model, options: &LoadOptions) -> Result<Arc<PreparedModel>, RuntimeError> {
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let bytes = write(
        model,
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
    PreparedModel::load_bytes(bytes, &npu, options).map(Arc::new)
}

fn load(model: &Model) -> Arc<PreparedModel> {
    load_with(model, &LoadOptions::default()).unwrap()
}

fn input_values(n: u32, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|k| ((k * 31 + seed * 7) % 23) as f32 / 23.0 - 0.3)
        .collect()
}

/// The plain path's output, for comparison.
fn plain(model: &PreparedModel, x: &[f32]) -> Vec<f32> {
    let t = HostTensor::from_f32(vec![1, x.len()], x).unwrap();
    model.run(&[t]).unwrap()[0].to_f32_vec().unwrap()
}

fn f32s_of(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn read_f32(memory: &Memory) -> Vec<f32> {
    memory.with_bytes(f32s_of).unwrap()
}

fn write_f32(memory: &Memory, values: &[f32]) {
    memory
        .with_bytes_mut(|b| b.copy_from_slice(bytemuck::cast_slice(values)))
        .unwrap();
}

/// An execution of `model` with x and y bound to fresh heap pools.
fn bound(model: &Arc<PreparedModel>, x: &[f32]) -> (Execution, Arc<Memory>, Arc<Memory>) {
    let input = Memory::from_bytes(bytemuck::cast_slice(x)).unwrap();
    let output = Memory::new(x.len() * 4).unwrap();
    let mut execution = Execution::new(model);
    execution.set_input_memory(0, &input).unwrap();
    execution.set_output_memory(0, &output).unwrap();
    (execution, input, output)
}

#[test]
fn a_reused_execution_gives_identical_outputs_over_100_computes() {
    let model = load(&chain_model(64, 4));
    let x = input_values(64, 1);
    let expected = plain(&model, &x);
    let (execution, _input, output) = bound(&model, &x);
    for k in 0..100 {
        let outcome = execution.compute().unwrap();
        assert_eq!(outcome.output_shapes, vec![vec![1, 64]]);
        assert_eq!(outcome.output_sizes, vec![256]);
        assert_eq!(read_f32(&output), expected, "compute {k}");
    }
}

#[test]
fn released_or_resized_memory_fails_clearly_until_bound_again() {
    let model = load(&chain_model(16, 2));
    let x = input_values(16, 2);
    let (mut execution, input, output) = bound(&model, &x);
    output.resize(128).unwrap();
    let err = execution.compute().unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Memory { memory, .. } if *memory == output.id()),
        "{err}"
    );
    assert!(err.to_string().contains("resized"), "{err}");
    execution.set_output(0, &output, 64, 64).unwrap();
    execution.compute().unwrap();
    input.release();
    let err = execution.compute().unwrap_err();
    assert!(err.to_string().contains("released"), "{err}");
    assert!(
        err.to_string().contains(&format!("memory {}", input.id())),
        "{err}"
    );
}

#[test]
fn bindings_are_checked_when_made() {
    let model = load(&chain_model(16, 1));
    let mut execution = Execution::new(&model);
    let small = Memory::new(32).unwrap();
    let err = execution.set_input(0, &small, 0, 32, None).unwrap_err();
    assert!(err.to_string().contains("takes 64 bytes"), "{err}");
    let err = execution.set_input(0, &small, 16, 64, None).unwrap_err();
    assert!(err.to_string().contains("beyond"), "{err}");
    let err = execution.set_input(1, &small, 0, 0, None).unwrap_err();
    assert!(
        matches!(err, RuntimeError::Binding { index: 1, .. }),
        "{err}"
    );
    // An output overlapping an input of the same memory is refused.
    let shared = Memory::new(128).unwrap();
    execution.set_input(0, &shared, 0, 64, None).unwrap();
    let err = execution.set_output(0, &shared, 32, 64).unwrap_err();
    assert!(err.to_string().contains("overlaps"), "{err}");
    execution.set_output(0, &shared, 64, 64).unwrap();
    execution.compute().unwrap();
    // Nothing bound: named.
    let err = Execution::new(&model).compute().unwrap_err();
    assert!(err.to_string().contains("input 0: not bound"), "{err}");
}

#[test]
fn a_burst_of_1000_executions_matches_the_plain_path() {
    let model = load(&chain_model(32, 3));
    let (execution, input, output) = bound(&model, &input_values(32, 0));
    let burst = Burst::new(&model);
    for k in 0..1000u32 {
        let x = input_values(32, k);
        write_f32(&input, &x);
        execution.compute_in(&burst).unwrap();
        assert_eq!(read_f32(&output), plain(&model, &x), "execution {k}");
    }
    assert_eq!(burst.cached_memories(), 2);
    assert!(burst.forget(&input));
    assert!(!burst.forget(&input));
    // A burst is tied to one model.
    let other = load(&chain_model(32, 3));
    let err = Execution::new(&other).compute_in(&burst).unwrap_err();
    assert!(matches!(err, RuntimeError::ExecutionState(_)), "{err}");
}

#[test]
fn a_fenced_execution_waits_for_its_input_fence_and_signals_its_own() {
    let model = load(&chain_model(32, 2));
    let x = input_values(32, 3);
    let expected = plain(&model, &x);
    let (execution, _input, output) = bound(&model, &x);
    let gate = Fence::new();
    let fenced = execution
        .start_compute_after(std::slice::from_ref(&gate), None)
        .unwrap();
    assert_eq!(
        fenced.fence().wait(Some(Duration::from_millis(100))),
        FenceState::Pending,
        "it must not run before its fence signals"
    );
    assert_eq!(read_f32(&output), vec![0.0; 32]);
    // While it waits, the execution is busy.
    assert!(matches!(
        execution.compute(),
        Err(RuntimeError::ExecutionState(_))
    ));
    gate.signal();
    let done = fenced.fence().clone();
    let (outcome, timing) = fenced.wait().unwrap();
    assert_eq!(done.state(), FenceState::Signalled);
    assert_eq!(outcome.output_shapes, vec![vec![1, 32]]);
    assert_eq!(read_f32(&output), expected);
    assert!(timing.launched >= Duration::from_millis(100), "{timing:?}");
    assert!(timing.fenced <= timing.launched, "{timing:?}");

    // A chain: the second waits for the first's fence; a failed fence fails its waiter
    // without running it.
    let (second, _i2, out2) = bound(&model, &x);
    let gate = Fence::new();
    let first = execution
        .start_compute_after(std::slice::from_ref(&gate), None)
        .unwrap();
    let then = second
        .start_compute_after(std::slice::from_ref(first.fence()), None)
        .unwrap();
    gate.signal();
    first.wait().unwrap();
    then.wait().unwrap();
    assert_eq!(read_f32(&out2), expected);
    let broken = Fence::new();
    let (third, _i3, out3) = bound(&model, &x);
    let waiting = third
        .start_compute_after(&[Fence::signalled(), broken.clone()], None)
        .unwrap();
    broken.fail("the producer failed");
    let err = waiting.wait().unwrap_err();
    assert!(err.to_string().contains("the producer failed"), "{err}");
    assert_eq!(
        read_f32(&out3),
        vec![0.0; 32],
        "a failed dependency must not run it"
    );
}

#[test]
fn high_priority_executions_overtake_queued_low_priority_ones() {
    let scheduler = Scheduler::new(1).unwrap();
    let options = |priority| LoadOptions {
        priority,
        scheduler: Some(Arc::clone(&scheduler)),
        ..LoadOptions::default()
    };
    let low = load_with(&chain_model(32, 2), &options(Priority::Low)).unwrap();
    let high = load_with(&chain_model(32, 2), &options(Priority::High)).unwrap();
    // Hold the only worker so that everything queues.
    let gate = Fence::new();
    let held = gate.clone();
    scheduler
        .submit(Priority::High, move || {
            held.wait(None);
        })
        .unwrap();
    while scheduler.queued() > 0 {
        std::thread::yield_now();
    }
    let x = input_values(32, 4);
    let lows: Vec<_> = (0..4).map(|_| bound(&low, &x)).collect();
    let low_runs: Vec<_> = lows
        .iter()
        .map(|(e, _, _)| e.start_compute().unwrap())
        .collect();
    let (high_exec, _hi, high_out) = bound(&high, &x);
    let high_run = high_exec.start_compute().unwrap();
    assert_eq!(scheduler.queued(), 5);
    gate.signal();
    let high_done = {
        let fence = high_run.fence().clone();
        high_run.wait().unwrap();
        fence.signalled_at().unwrap()
    };
    for run in low_runs {
        let fence = run.fence().clone();
        run.wait().unwrap();
        assert!(
            fence.signalled_at().unwrap() > high_done,
            "a low one ran first"
        );
    }
    assert_eq!(read_f32(&high_out), plain(&high, &x));
}

#[test]
fn a_deadline_shorter_than_the_run_fails_and_leaves_the_model_usable() {
    let model = load(&chain_model(256, 24));
    let x = input_values(256, 5);
    let expected = plain(&model, &x);
    let fastest = model.fastest_execution().unwrap();
    let (mut execution, _input, output) = bound(&model, &x);
    // Shorter than the model has ever needed: persistent, refused before running.
    execution.set_timeout(Some(fastest / 20));
    let err = execution.compute().unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::MissedDeadline {
                kind: DeadlineKind::Persistent,
                stage: DeadlineStage::Execution,
                ..
            }
        ),
        "{err}"
    );
    // The model stays usable.
    execution.set_timeout(None);
    execution.compute().unwrap();
    assert_eq!(read_f32(&output), expected);
    // A deadline that passes during the run stops it within an operation.
    let fresh = load(&chain_model(256, 24));
    let options = ExecuteOptions {
        deadline: Some(Instant::now() + Duration::from_micros(50)),
        ..ExecuteOptions::default()
    };
    let t = HostTensor::from_f32(vec![1, 256], &x).unwrap();
    let err = fresh
        .run_with(std::slice::from_ref(&t), &options)
        .unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::MissedDeadline {
                kind: DeadlineKind::Transient,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(fresh.run(&[t]).unwrap()[0].to_f32_vec().unwrap(), expected);
    // Preparation deadlines.
    let err = load_with(
        &chain_model(16, 1),
        &LoadOptions {
            deadline: Some(Instant::now()),
            ..LoadOptions::default()
        },
    )
    .err()
    .unwrap();
    assert!(
        matches!(
            err,
            RuntimeError::MissedDeadline {
                stage: DeadlineStage::Preparation,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_domain_buffer_used_in_a_role_it_was_not_declared_for_fails_at_once() {
    let model = load(&chain_model(16, 2));
    let other = load(&chain_model(16, 2));
    let y = MemoryDesc::new()
        .add_output_role(&model, 0, 1.0)
        .unwrap()
        .add_input_role(&model, 0, 1.0)
        .unwrap()
        .finish()
        .unwrap();
    assert_eq!(y.domain().unwrap().dims, vec![1, 16]);
    let out_only = MemoryDesc::new()
        .add_output_role(&model, 0, 1.0)
        .unwrap()
        .finish()
        .unwrap();
    let mut execution = Execution::new(&model);
    let err = execution.set_input_memory(0, &out_only).unwrap_err();
    assert!(
        matches!(
            &err,
            RuntimeError::Binding {
                kind: IoKind::Input,
                index: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("not declared"), "{err}");
    // Another model's execution may not use it either.
    let err = Execution::new(&other).set_output_memory(0, &y).unwrap_err();
    assert!(err.to_string().contains("not declared"), "{err}");
    // Bad descriptors.
    assert!(MemoryDesc::new().finish().is_err());
    assert!(MemoryDesc::new().add_input_role(&model, 3, 1.0).is_err());
    assert!(MemoryDesc::new().add_input_role(&model, 0, 0.0).is_err());
    assert!(
        MemoryDesc::new()
            .add_input_role(&model, 0, 1.0)
            .unwrap()
            .set_dimensions(&[2, 16])
            .is_err()
    );

    // Chained through the device: run 1 writes y, run 2 reads it, a pool copies it out.
    let x = input_values(16, 6);
    let once = plain(&model, &x);
    let twice = plain(&model, &once);
    let input = Memory::from_bytes(bytemuck::cast_slice(&x)).unwrap();
    execution.set_input_memory(0, &input).unwrap();
    execution.set_output_memory(0, &y).unwrap();
    let mut reader = Execution::new(&model);
    reader.set_input_memory(0, &y).unwrap();
    let result = Memory::new(64).unwrap();
    reader.set_output_memory(0, &result).unwrap();
    let err = reader.compute().unwrap_err();
    assert!(err.to_string().contains("no value yet"), "{err}");
    execution.compute().unwrap();
    assert_eq!(y.shape(), Some(vec![1, 16]));
    reader.compute().unwrap();
    assert_eq!(read_f32(&result), twice);
    let pool = Memory::new(64).unwrap();
    Memory::copy(&y, &pool).unwrap();
    assert_eq!(read_f32(&pool), once);
    // Copies into the buffer check sizes.
    assert!(Memory::copy(&Memory::new(60).unwrap(), &y).is_err());
    Memory::copy(&Memory::from_bytes(bytemuck::cast_slice(&x)).unwrap(), &y).unwrap();
    reader.compute().unwrap();
    assert_eq!(read_f32(&result), once);
}

#[test]
fn eight_threads_writing_one_domain_buffer_neither_crash_nor_hang() {
    let model = load(&chain_model(64, 2));
    let y = MemoryDesc::new()
        .add_output_role(&model, 0, 1.0)
        .unwrap()
        .finish()
        .unwrap();
    let inputs: Vec<Vec<f32>> = (0..8).map(|t| input_values(64, t)).collect();
    let valid: Vec<Vec<f32>> = inputs.iter().map(|x| plain(&model, x)).collect();
    let barrier = Arc::new(Barrier::new(9));
    // Writers keep computing until the reader has copied the buffer a few times while
    // they run (at least 40 computes each): on a loaded machine a fixed number of
    // computes can finish before the reader's first copy gets in.
    let readers_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = inputs
        .iter()
        .map(|x| {
            let (model, y, barrier) = (Arc::clone(&model), Arc::clone(&y), Arc::clone(&barrier));
            let done = Arc::clone(&readers_done);
            let x = x.clone();
            std::thread::spawn(move || {
                let input = Memory::from_bytes(bytemuck::cast_slice(&x)).unwrap();
                let mut execution = Execution::new(&model);
                execution.set_input_memory(0, &input).unwrap();
                execution.set_output_memory(0, &y).unwrap();
                barrier.wait();
                let mut computes = 0;
                while computes < 40 || !done.load(std::sync::atomic::Ordering::Acquire) {
                    execution.compute().unwrap();
                    computes += 1;
                }
            })
        })
        .collect();
    barrier.wait();
    // Readers copy the buffer out while the writers run: every copy is one whole value.
    let pool = Memory::new(256).unwrap();
    let start = Instant::now();
    let mut copies = 0;
    while writers.iter().any(|w| !w.is_finished()) {
        assert!(start.elapsed() < Duration::from_secs(120), "hung");
        if Memory::copy(&y, &pool).is_ok() {
            assert!(valid.contains(&read_f32(&pool)), "a torn value");
            copies += 1;
            if copies >= 5 {
                readers_done.store(true, std::sync::atomic::Ordering::Release);
            }
        } else {
            std::thread::yield_now();
        }
    }
    for w in writers {
        w.join().unwrap();
    }
    Memory::copy(&y, &pool).unwrap();
    assert!(valid.contains(&read_f32(&pool)));
    assert!(
        copies >= 5,
        "only {copies} copies got in while the writers ran"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn shared_memory_file_descriptors_carry_inputs_and_outputs_without_copies() {
    use std::os::fd::{AsRawFd, BorrowedFd};
    let model = load(&chain_model(32, 2));
    let x = input_values(32, 7);
    let shared = Memory::create_shared(4096).unwrap();
    shared
        .with_bytes_mut(|b| b[..128].copy_from_slice(bytemuck::cast_slice(&x)))
        .unwrap();
    let mut execution = Execution::new(&model);
    execution.set_input(0, &shared, 0, 128, None).unwrap();
    execution.set_output(0, &shared, 1024, 128).unwrap();
    execution.compute().unwrap();
    // Another mapping of the same file (as another process would map it) sees the output.
    let fd = shared.raw_fd().unwrap();
    // SAFETY: `fd` is open while `shared` lives; the clone owns its own descriptor.
    let dup = unsafe { BorrowedFd::borrow_raw(fd) }
        .try_clone_to_owned()
        .unwrap();
    assert_ne!(dup.as_raw_fd(), fd);
    let view = Memory::from_fd(dup, 0, 4096).unwrap();
    let y = view.with_bytes(|b| f32s_of(&b[1024..1152])).unwrap();
    assert_eq!(y, plain(&model, &x));
    // A mapping beyond the file is refused when made.
    // SAFETY: as above: `fd` is open while `shared` lives.
    let dup = unsafe { BorrowedFd::borrow_raw(fd) }
        .try_clone_to_owned()
        .unwrap();
    let err = Memory::from_fd(dup, 4096, 1).unwrap_err();
    assert!(err.to_string().contains("beyond"), "{err}");
}

#[test]
fn asynchronous_executions_run_on_the_shared_pool() {
    let model = load(&chain_model(32, 2));
    let x = input_values(32, 8);
    let runs: Vec<_> = (0..16)
        .map(|_| {
            model
                .run_async(vec![HostTensor::from_f32(vec![1, 32], &x).unwrap()])
                .unwrap()
        })
        .collect();
    let expected = plain(&model, &x);
    for run in runs {
        assert_eq!(run.wait().unwrap()[0].to_f32_vec().unwrap(), expected);
    }
    let (execution, _input, output) = bound(&model, &x);
    let pending = execution.start_compute().unwrap();
    assert!(pending.wait_timeout(Duration::from_secs(60)));
    pending.wait().unwrap();
    assert_eq!(read_f32(&output), expected);
}
