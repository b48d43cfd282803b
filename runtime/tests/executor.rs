//! The executor: multi-operation graphs, memory planning, dynamic shapes, output
//! buffer checks, concurrency, threads, weight providers and constant folding.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use nnc_formats::nn::{IoInfo, Lifetime, Model, Operand, OperandType, OperationType};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::kernels::{Kernel, PreparedWeights};
use nnc_runtime::{
    ExecuteOptions, HostWeights, InputTensor, OutputBuffer, PrepareOptions, Program, RuntimeError,
    WeightProvider, evaluate_operation,
};

/// A small graph builder over the formats builder API.
struct Graph {
    model: Model,
    inputs: Vec<u32>,
    outputs: Vec<u32>,
}

impl Graph {
    fn new() -> Graph {
        Graph {
            model: Model::default(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        }
    }

    fn input(&mut self, t: OperandType, dims: &[u32]) -> u32 {
        let mut o = Operand::new(t, dims.to_vec());
        o.lifetime = Lifetime::SubgraphInput;
        let i = self.model.add_operand(o);
        self.inputs.push(i);
        i
    }

    fn temp(&mut self, t: OperandType, dims: &[u32]) -> u32 {
        self.model.add_operand(Operand::new(t, dims.to_vec()))
    }

    fn output(&mut self, t: OperandType, dims: &[u32]) -> u32 {
        let mut o = Operand::new(t, dims.to_vec());
        o.lifetime = Lifetime::SubgraphOutput;
        let i = self.model.add_operand(o);
        self.outputs.push(i);
        i
    }

    fn op(&mut self, t: OperationType, inputs: Vec<u32>, outputs: Vec<u32>, name: &str) {
        self.model.add_operation(t, inputs, outputs, name);
    }

    fn finish(mut self) -> Model {
        self.model.main.inputs = self.inputs.clone();
        self.model.main.outputs = self.outputs.clone();
        let info = |m: &Model, i: u32| {
            let o = &m.main.operands[i as usize];
            IoInfo {
                name: format!("t{i}"),
                dtype: nnc_runtime::exec::host_type(o.operand_type).unwrap_or(DataType::F32),
                dims: o.dimensions.clone(),
            }
        };
        self.model.input_info = self.inputs.iter().map(|&i| info(&self.model, i)).collect();
        self.model.output_info = self.outputs.iter().map(|&i| info(&self.model, i)).collect();
        nnc_formats::nn::validate(&self.model).expect("valid test model");
        self.model
    }
}

const F32: OperandType = OperandType::TensorFloat32;

/// conv 3x3 (16 ch, pooled weights) RELU6 -> depthwise 3x3/2 -> ADD const -> mean pool
/// -> RESHAPE -> FC 10 -> SOFTMAX; also outputs the conv activations.
fn mobilenet_like(rng: &mut Rng) -> (Model, Vec<Vec<f32>>) {
    let mut g = Graph::new();
    let x = g.input(F32, &[1, 8, 8, 3]);
    let w1 = rng.f32s(16 * 3 * 3 * 3);
    let b1 = rng.f32s(16);
    let f1 = g.model.add_f32_tensor(vec![16, 3, 3, 3], &w1);
    let bias1 = g.model.add_f32_tensor(vec![16], &b1);
    let t1 = g.output(F32, &[1, 8, 8, 16]);
    let args: Vec<u32> = [1, 1, 1, 3].map(|v| g.model.add_i32(v)).to_vec();
    g.op(
        OperationType::Conv2d,
        [vec![x, f1, bias1], args].concat(),
        vec![t1],
        "conv1",
    );
    let wd = rng.f32s(9 * 16);
    let bd = rng.f32s(16);
    let fd = g.model.add_f32_tensor(vec![1, 3, 3, 16], &wd);
    let biasd = g.model.add_f32_tensor(vec![16], &bd);
    let t2 = g.temp(F32, &[1, 4, 4, 16]);
    let args: Vec<u32> = [1, 2, 2, 1, 0].map(|v| g.model.add_i32(v)).to_vec();
    g.op(
        OperationType::DepthwiseConv2d,
        [vec![t1, fd, biasd], args].concat(),
        vec![t2],
        "dw1",
    );
    let c = rng.f32s(16);
    let cst = g.model.add_f32_tensor(vec![16], &c);
    let act = g.model.add_i32(1);
    let t3 = g.temp(F32, &[1, 4, 4, 16]);
    g.op(OperationType::Add, vec![t2, cst, act], vec![t3], "add1");
    let t4 = g.temp(F32, &[1, 1, 1, 16]);
    let args: Vec<u32> = [2, 1, 1, 4, 4, 0].map(|v| g.model.add_i32(v)).to_vec();
    g.op(
        OperationType::AveragePool2d,
        [vec![t3], args].concat(),
        vec![t4],
        "pool",
    );
    let shape = g.model.add_i32_vector(&[1, 16]);
    let t5 = g.temp(F32, &[1, 16]);
    g.op(OperationType::Reshape, vec![t4, shape], vec![t5], "reshape");
    let wf = rng.f32s(10 * 16);
    let bf = rng.f32s(10);
    let ff = g.model.add_f32_tensor(vec![10, 16], &wf);
    let biasf = g.model.add_f32_tensor(vec![10], &bf);
    let none = g.model.add_i32(0);
    let t6 = g.temp(F32, &[1, 10]);
    g.op(
        OperationType::FullyConnected,
        vec![t5, ff, biasf, none],
        vec![t6],
        "fc",
    );
    let beta = g.model.add_f32(1.0);
    let out = g.output(F32, &[1, 10]);
    g.op(OperationType::Softmax, vec![t6, beta], vec![out], "softmax");
    (g.finish(), vec![w1, b1, wd, bd, c, wf, bf])
}

/// The same graph evaluated one operation at a time (each already checked against float64
/// references): the executor must reproduce it bit for bit.
fn mobilenet_like_stepwise(model: &Model, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut values: std::collections::HashMap<u32, Vec<u8>> = std::collections::HashMap::new();
    values.insert(model.main.inputs[0], f32_bytes(x));
    let mut operands = model.main.operands.clone();
    for op in &model.main.operations {
        // Make every input a constant holding its current value.
        let mut m = model.clone();
        for &i in &op.inputs {
            if let Some(v) = values.get(&i) {
                let mut o = operands[i as usize].clone();
                o.lifetime = Lifetime::ConstantCopy;
                let idx = m.operand_values.len();
                m.operand_values.extend_from_slice(v);
                o.location = nnc_formats::nn::DataLocation {
                    pool_index: 0,
                    offset: idx as u64,
                    length: v.len() as u64,
                };
                m.main.operands[i as usize] = o;
            }
        }
        let outs = evaluate_operation(op, &m.main.operands, |i| m.constant_bytes(i)).unwrap();
        for (&o, bytes) in op.outputs.iter().zip(outs) {
            values.insert(o, bytes);
        }
        operands = model.main.operands.clone();
    }
    let get = |i: u32| bytemuck::cast_slice::<u8, f32>(&values[&i]).to_vec();
    (get(model.main.outputs[0]), get(model.main.outputs[1]))
}

#[test]
fn multi_operation_graph_matches_stepwise_evaluation() {
    let mut rng = Rng::new(51);
    let (model, _) = mobilenet_like(&mut rng);
    let program = prepare(&model, 1).unwrap();
    assert!(!program.is_dynamic());
    for _ in 0..3 {
        let x = rng.f32s(8 * 8 * 3);
        let mut conv = vec![0f32; 8 * 8 * 16];
        let mut probs = vec![0f32; 10];
        let result = program
            .execute(
                &[InputTensor::f32(&[1, 8, 8, 3], &x)],
                &mut [OutputBuffer::f32(&mut conv), OutputBuffer::f32(&mut probs)],
            )
            .unwrap();
        assert_eq!(result.output_shapes, vec![vec![1, 8, 8, 16], vec![1, 10]]);
        assert_eq!(result.output_sizes, vec![8 * 8 * 16 * 4, 40]);
        assert!(result.duration.is_none());
        let (conv_ref, probs_ref) = mobilenet_like_stepwise(&model, &x);
        assert_eq!(conv, conv_ref);
        assert_eq!(probs, probs_ref);
        assert!((probs.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        assert!(conv.iter().all(|&v| (0.0..=6.0).contains(&v)));
    }
    // The reshape aliases the pool output: the arena holds less than all temporaries.
    assert!(
        program.arena_size() < program.unplanned_size(),
        "{} vs {}",
        program.arena_size(),
        program.unplanned_size()
    );
}

#[test]
fn chain_reuses_arena_memory() {
    let mut g = Graph::new();
    let mut prev = g.input(F32, &[64, 64]);
    let one = g.model.add_f32_tensor(vec![1], &[1.0]);
    for i in 0..8 {
        let next = if i == 7 {
            g.output(F32, &[64, 64])
        } else {
            g.temp(F32, &[64, 64])
        };
        let act = g.model.add_i32(0);
        g.op(
            OperationType::Add,
            vec![prev, one, act],
            vec![next],
            &format!("add{i}"),
        );
        prev = next;
    }
    let model = g.finish();
    let program = prepare(&model, 1).unwrap();
    let buffer = 64 * 64 * 4;
    assert_eq!(program.unplanned_size(), 8 * buffer);
    // Two buffers alternate along the chain (the output is live to the end).
    assert!(
        program.arena_size() <= 3 * buffer,
        "arena {}",
        program.arena_size()
    );
    let x: Vec<f32> = (0..64 * 64).map(|v| v as f32).collect();
    let out = program
        .execute_host(&[HostTensor::from_f32(vec![64, 64], &x).unwrap()])
        .unwrap();
    let expected: Vec<f32> = x.iter().map(|v| v + 8.0).collect();
    assert_eq!(f32s(&out[0]), expected);
}

#[test]
fn dynamic_batch_dimension() {
    let mut g = Graph::new();
    let x = g.input(F32, &[0, 4]);
    let c = g.model.add_f32_tensor(vec![4], &[1.0, 2.0, 3.0, 4.0]);
    let act = g.model.add_i32(0);
    let t = g.temp(F32, &[0, 4]);
    g.op(OperationType::Mul, vec![x, c, act], vec![t], "mul");
    let axes = g.model.add_i32_vector(&[1]);
    let keep = g.model.add_bool(false);
    let out = g.output(F32, &[0]);
    g.op(
        OperationType::ReduceSum,
        vec![t, axes, keep],
        vec![out],
        "sum",
    );
    let model = g.finish();
    let program = prepare(&model, 1).unwrap();
    assert!(program.is_dynamic());
    assert_eq!(program.output_shape(0), None);
    for rows in [1usize, 3, 7] {
        let x: Vec<f32> = (0..rows * 4).map(|v| v as f32).collect();
        let mut out = vec![0f32; 16];
        let shape = [rows, 4];
        let result = program
            .execute(
                &[InputTensor::f32(&shape, &x)],
                &mut [OutputBuffer::f32(&mut out)],
            )
            .unwrap();
        assert_eq!(result.output_shapes, vec![vec![rows]]);
        assert_eq!(result.output_sizes, vec![rows * 4]);
        for r in 0..rows {
            let e: f32 = (0..4).map(|k| x[r * 4 + k] * (k + 1) as f32).sum();
            assert_eq!(out[r], e);
        }
        assert!(
            out[rows..].iter().all(|&v| v == 0.0),
            "nothing written past the output"
        );
    }
    // Without a shape for the dynamic input: a clear error naming the input.
    let err = program
        .execute(
            &[InputTensor::new(&[0u8; 16])],
            &mut [OutputBuffer::new(&mut [0u8; 64])],
        )
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Input { input: 0, .. }), "{err}");
}

#[test]
fn too_small_output_buffer_is_reported_before_any_write() {
    // Static: two outputs, the second too small; the first must stay untouched.
    let mut g = Graph::new();
    let x = g.input(F32, &[2, 3]);
    let act = g.model.add_i32(0);
    let a = g.output(F32, &[2, 3]);
    g.op(OperationType::Add, vec![x, x, act], vec![a], "double");
    let b = g.output(F32, &[2, 3]);
    let act2 = g.model.add_i32(0);
    g.op(OperationType::Mul, vec![x, x, act2], vec![b], "square");
    let model = g.finish();
    let program = prepare(&model, 1).unwrap();
    assert_eq!(program.output_byte_size(1), Some(24));
    let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    let mut first = [7u8; 24];
    let mut second = [7u8; 20];
    let err = program
        .execute(
            &[InputTensor::f32(&[2, 3], &x)],
            &mut [
                OutputBuffer::new(&mut first),
                OutputBuffer::new(&mut second),
            ],
        )
        .unwrap_err();
    match err {
        RuntimeError::OutputTooSmall {
            output,
            needed,
            provided,
        } => {
            assert_eq!((output, needed, provided), (1, 24, 20));
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(
        err_text_mentions(&program, &x),
        "message names the output and the size"
    );
    assert_eq!(first, [7u8; 24]);
    assert_eq!(second, [7u8; 20]);
    // Larger buffers are fine; only the needed bytes are written.
    let mut big = [7u8; 32];
    let mut ok = [0u8; 24];
    let result = program
        .execute(
            &[InputTensor::f32(&[2, 3], &x)],
            &mut [OutputBuffer::new(&mut big), OutputBuffer::new(&mut ok)],
        )
        .unwrap();
    assert_eq!(result.output_sizes, vec![24, 24]);
    assert_eq!(&big[24..], &[7u8; 8]);
    assert_eq!(
        bytemuck::cast_slice::<u8, f32>(&big[..24]),
        &[2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    );

    // Dynamic: the size is known only after computing, still nothing is written.
    let mut g = Graph::new();
    let x = g.input(F32, &[0]);
    let act = g.model.add_i32(0);
    let a = g.output(F32, &[0]);
    g.op(OperationType::Add, vec![x, x, act], vec![a], "double");
    let model = g.finish();
    let program = prepare(&model, 1).unwrap();
    let input = [1.0f32; 5];
    let mut small = [9u8; 16];
    let err = program
        .execute(
            &[InputTensor::f32(&[5], &input)],
            &mut [OutputBuffer::new(&mut small)],
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::OutputTooSmall {
                output: 0,
                needed: 20,
                provided: 16
            }
        ),
        "{err}"
    );
    assert_eq!(small, [9u8; 16]);
}

fn err_text_mentions(program: &Program, x: &[f32]) -> bool {
    let mut a = [0u8; 24];
    let mut b = [0u8; 4];
    let err = program
        .execute(
            &[InputTensor::f32(&[2, 3], x)],
            &mut [OutputBuffer::new(&mut a), OutputBuffer::new(&mut b)],
        )
        .unwrap_err()
        .to_string();
    err.contains("output 1") && err.contains("24 bytes are needed") && err.contains("4 bytes")
}

#[test]
fn concurrent_executions_of_one_program() {
    let mut rng = Rng::new(52);
    let (model, _) = mobilenet_like(&mut rng);
    for threads in [1, 2] {
        let program = Arc::new(prepare(&model, threads).unwrap());
        let inputs: Vec<Vec<f32>> = (0..4).map(|_| rng.f32s(8 * 8 * 3)).collect();
        let expected: Vec<Vec<f32>> = inputs
            .iter()
            .map(|x| {
                let out = program
                    .execute_host(&[HostTensor::from_f32(vec![1, 8, 8, 3], x).unwrap()])
                    .unwrap();
                f32s(&out[1])
            })
            .collect();
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let program = Arc::clone(&program);
                let x = inputs[t].clone();
                let want = expected[t].clone();
                std::thread::spawn(move || {
                    for _ in 0..25 {
                        let mut conv = vec![0f32; 8 * 8 * 16];
                        let mut probs = vec![0f32; 10];
                        program
                            .execute(
                                &[InputTensor::f32(&[1, 8, 8, 3], &x)],
                                &mut [OutputBuffer::f32(&mut conv), OutputBuffer::f32(&mut probs)],
                            )
                            .unwrap();
                        assert_eq!(probs, want, "thread {t}");
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }
}

#[test]
fn thread_count_does_not_change_results() {
    let mut rng = Rng::new(53);
    // Large enough for the GEMM and the depthwise rows to split across threads.
    let mut g = Graph::new();
    let x = g.input(F32, &[1, 24, 24, 32]);
    let w = rng.f32s(64 * 32);
    let f = g.model.add_f32_tensor(vec![64, 1, 1, 32], &w);
    let b = g.model.add_f32_tensor(vec![64], &rng.f32s(64));
    let t = g.temp(F32, &[1, 24, 24, 64]);
    let args: Vec<u32> = [1, 1, 1, 3].map(|v| g.model.add_i32(v)).to_vec();
    g.op(
        OperationType::Conv2d,
        [vec![x, f, b], args].concat(),
        vec![t],
        "pw",
    );
    let wd = g.model.add_f32_tensor(vec![1, 3, 3, 64], &rng.f32s(9 * 64));
    let bd = g.model.add_f32_tensor(vec![64], &rng.f32s(64));
    let out = g.output(F32, &[1, 24, 24, 64]);
    let args: Vec<u32> = [1, 1, 1, 1, 0].map(|v| g.model.add_i32(v)).to_vec();
    g.op(
        OperationType::DepthwiseConv2d,
        [vec![t, wd, bd], args].concat(),
        vec![out],
        "dw",
    );
    let model = g.finish();
    let input = HostTensor::from_f32(vec![1, 24, 24, 32], &rng.f32s(24 * 24 * 32)).unwrap();
    let one = prepare(&model, 1)
        .unwrap()
        .execute_host(std::slice::from_ref(&input))
        .unwrap();
    let two = prepare(&model, 2).unwrap();
    assert_eq!(two.threads(), 2);
    let two = two.execute_host(&[input]).unwrap();
    let (a, b) = (f32s(&one[0]), f32s(&two[0]));
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-5 + 1e-6 * x.abs(),
            "element {i}: {x} vs {y}"
        );
    }
}

#[test]
fn evaluate_operation_is_bit_identical_to_execution() {
    let mut rng = Rng::new(54);
    let x = rng.f32s(2 * 7 * 7 * 5);
    let w = rng.f32s(6 * 3 * 3 * 5);
    let b = rng.f32s(6);
    // Executed with the input fed at run time...
    let args = |input: Arg| {
        let mut a = vec![input, const_f32(&[6, 3, 3, 5], &w), const_f32(&[6], &b)];
        a.extend([1, 2, 2, 1].map(Arg::I32));
        a
    };
    let executed = run_op(
        OperationType::Conv2d,
        args(input_f32(&[2, 7, 7, 5], &x)),
        &[out_f32(&[2, 4, 4, 6])],
    )
    .unwrap();
    // ...and folded with the input as a (pooled) constant.
    let (model, _) = single_op(
        OperationType::Conv2d,
        args(const_f32(&[2, 7, 7, 5], &x)),
        &[out_f32(&[2, 4, 4, 6])],
    );
    let op = &model.main.operations[0];
    let folded = evaluate_operation(op, &model.main.operands, |i| model.constant_bytes(i)).unwrap();
    assert_eq!(folded.len(), 1);
    assert_eq!(folded[0], executed[0].data);
    // A non-constant input is refused.
    let (model, _) = single_op(
        OperationType::Conv2d,
        args(input_f32(&[2, 7, 7, 5], &x)),
        &[out_f32(&[2, 4, 4, 6])],
    );
    let err = evaluate_operation(&model.main.operations[0], &model.main.operands, |i| {
        model.constant_bytes(i)
    })
    .unwrap_err();
    assert!(err.to_string().contains("not a constant"), "{err}");
}

#[test]
fn inputs_are_validated() {
    let mut g = Graph::new();
    let x = g.input(F32, &[2, 3]);
    let act = g.model.add_i32(0);
    let out = g.output(F32, &[2, 3]);
    g.op(OperationType::Add, vec![x, x, act], vec![out], "add");
    let model = g.finish();
    let program = prepare(&model, 1).unwrap();
    let mut buf = [0u8; 24];
    let err = program
        .execute(
            &[InputTensor::new(&[0u8; 20])],
            &mut [OutputBuffer::new(&mut buf)],
        )
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Input { input: 0, message } if message.contains("20 bytes")),
        "{err}"
    );
    let data = [0f32; 6];
    let err = program
        .execute(
            &[InputTensor::f32(&[3, 2], &data)],
            &mut [OutputBuffer::new(&mut buf)],
        )
        .unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Input { input: 0, message } if message.contains("declared 2x3")),
        "{err}"
    );
    let err = program
        .execute(&[], &mut [OutputBuffer::new(&mut buf)])
        .unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::Count {
                expected: 1,
                actual: 0,
                ..
            }
        ),
        "{err}"
    );
    let err = program
        .execute(&[InputTensor::f32(&[2, 3], &data)], &mut [])
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Count { .. }), "{err}");
    // Host tensors of the wrong element type.
    let wrong = HostTensor::new(DataType::I32, vec![2, 3], vec![0; 24]).unwrap();
    let err = program.execute_host(&[wrong]).unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Input { input: 0, message } if message.contains("float32")),
        "{err}"
    );
    // Unaligned input bytes are accepted (copied).
    // A heap buffer is at least 8-byte aligned, so bytes[1..] is misaligned for f32.
    let mut bytes: Vec<u8> = std::iter::repeat_n(0u8, 25).collect();
    bytes[1..].copy_from_slice(bytemuck::cast_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let result = program
        .execute(
            &[InputTensor::new(&bytes[1..])],
            &mut [OutputBuffer::new(&mut buf)],
        )
        .unwrap();
    assert_eq!(result.output_shapes, vec![vec![2, 3]]);
    assert_eq!(
        bytemuck::cast_slice::<u8, f32>(&buf),
        &[2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    );
}

#[test]
fn unsupported_operation_is_a_preparation_error() {
    // QUANTIZE itself has a kernel; its float16 form does not (the CPU runtime has no
    // float16 arithmetic).
    let mut g = Graph::new();
    let x = g.input(OperandType::TensorFloat16, &[4]);
    let mut q = Operand::new(OperandType::TensorQuant8Asymm, vec![4]).with_quant(0.1, 128);
    q.lifetime = Lifetime::SubgraphOutput;
    let out = g.model.add_operand(q);
    g.outputs.push(out);
    g.op(OperationType::Quantize, vec![x], vec![out], "quant_node");
    let mut model = g.finish();
    model.output_info[0].dtype = DataType::U8;
    let err = prepare(&model, 1).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, RuntimeError::UnsupportedOperations(ref ops) if ops.len() == 1),
        "{text}"
    );
    assert!(
        text.contains("operation 0 (QUANTIZE from node 'quant_node')"),
        "{text}"
    );
}

#[test]
fn run_time_errors_name_the_operation() {
    let mut g = Graph::new();
    let data = g.input(OperandType::TensorInt32, &[3]);
    let idx = g.input(OperandType::TensorInt32, &[2]);
    let act = g.model.add_i32(0);
    let t = g.temp(OperandType::TensorInt32, &[2]);
    g.op(OperationType::Add, vec![idx, idx, act], vec![t], "double");
    let axis = g.model.add_i32(0);
    let out = g.output(OperandType::TensorInt32, &[2]);
    g.op(
        OperationType::Gather,
        vec![data, axis, t],
        vec![out],
        "lookup",
    );
    let model = g.finish();
    let program = prepare(&model, 1).unwrap();
    let feed = |v: &[i32]| HostTensor::new(DataType::I32, vec![v.len()], i32_bytes(v)).unwrap();
    let ok = program
        .execute_host(&[feed(&[10, 20, 30]), feed(&[1, 0])])
        .unwrap();
    assert_eq!(i32s(&ok[0]), vec![30, 10]);
    let err = program
        .execute_host(&[feed(&[10, 20, 30]), feed(&[2, 0])])
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("operation 1 (GATHER from node 'lookup')") && text.contains("index 4"),
        "{text}"
    );
}

#[test]
fn timing_is_measured_on_request() {
    let (model, feeds) = single_op(
        OperationType::Relu,
        vec![input_f32(&[4], &[-1.0, 0.5, 2.0, -3.0])],
        &[out_f32(&[4])],
    );
    let program = prepare(&model, 1).unwrap();
    let x = feeds[0].to_f32_vec().unwrap();
    let mut out = [0f32; 4];
    let result = program
        .execute_with(
            &[InputTensor::f32(&[4], &x)],
            &mut [OutputBuffer::f32(&mut out)],
            &ExecuteOptions {
                measure_timing: true,
                ..ExecuteOptions::default()
            },
        )
        .unwrap();
    assert!(result.duration.is_some());
    assert_eq!(out, [0.0, 0.5, 2.0, 0.0]);
}

#[test]
fn int64_boundary_conversion_and_rank0_values() {
    // GATHER with indices declared int64 by the source model and an ARGMAX whose int64
    // output is rank 0 at the source level.
    let mut g = Graph::new();
    let data = g.input(F32, &[4]);
    let idx = g.input(OperandType::TensorInt32, &[1]);
    let axis = g.model.add_i32(0);
    let gathered = g.output(F32, &[1]);
    g.op(
        OperationType::Gather,
        vec![data, axis, idx],
        vec![gathered],
        "gather",
    );
    let axis2 = g.model.add_i32(0);
    let arg = g.output(OperandType::TensorInt32, &[1]);
    g.op(
        OperationType::Argmax,
        vec![data, axis2],
        vec![arg],
        "argmax",
    );
    let mut model = g.finish();
    model.input_info[1].dtype = DataType::I64;
    model.input_info[1].dims = vec![];
    model.output_info[1].dtype = DataType::I64;
    model.output_info[1].dims = vec![];
    let program = prepare(&model, 1).unwrap();
    let data = HostTensor::from_f32(vec![4], &[0.5, 3.0, -1.0, 2.0]).unwrap();
    let idx = HostTensor::new(DataType::I64, vec![], 3i64.to_le_bytes().to_vec()).unwrap();
    let out = program.execute_host(&[data.clone(), idx]).unwrap();
    assert_eq!(f32s(&out[0]), vec![2.0]);
    assert_eq!(out[1].dtype, DataType::I64);
    assert!(out[1].shape.is_empty());
    assert_eq!(out[1].data, 1i64.to_le_bytes().to_vec());
    let too_big =
        HostTensor::new(DataType::I64, vec![], (1i64 << 40).to_le_bytes().to_vec()).unwrap();
    let err = program.execute_host(&[data, too_big]).unwrap_err();
    assert!(matches!(err, RuntimeError::Input { input: 1, .. }), "{err}");
}

/// A provider that counts requests and can be told to fail.
struct CountingProvider {
    inner: HostWeights,
    requests: AtomicUsize,
    fail: Mutex<bool>,
}

impl WeightProvider for CountingProvider {
    fn weights(
        &self,
        operation: usize,
        kernel: &dyn Kernel,
    ) -> Result<Arc<PreparedWeights>, RuntimeError> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        if *self.fail.lock().unwrap() {
            return Err(RuntimeError::Internal("device cache unavailable".into()));
        }
        self.inner.weights(operation, kernel)
    }
}

#[test]
fn weight_provider_seam() {
    let mut rng = Rng::new(55);
    let (model, _) = mobilenet_like(&mut rng);
    let provider = Arc::new(CountingProvider {
        inner: HostWeights::new(&model).unwrap(),
        requests: AtomicUsize::new(0),
        fail: Mutex::new(false),
    });
    let program = Program::prepare(&model, provider.clone(), &PrepareOptions::default()).unwrap();
    // Operations with pooled weights: conv, depthwise (filter 576 B) and FC (640 B).
    let preloads = provider.requests.load(Ordering::SeqCst);
    assert_eq!(preloads, 3);
    assert!(provider.inner.prepared_bytes() > 0);
    // The program keeps no pool bytes.
    assert!(program.model().pools.iter().all(|p| p.bytes().is_none()));
    let x = HostTensor::from_f32(vec![1, 8, 8, 3], &rng.f32s(192)).unwrap();
    program.execute_host(std::slice::from_ref(&x)).unwrap();
    assert_eq!(provider.requests.load(Ordering::SeqCst), preloads + 3);
    *provider.fail.lock().unwrap() = true;
    let err = program.execute_host(&[x]).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, RuntimeError::Weights { .. })
            && text.contains("operation 0 (CONV_2D from node 'conv1')"),
        "{text}"
    );
}

#[test]
fn reshape_output_as_model_output_and_aliasing() {
    // x -> ADD -> RESHAPE (output) and the ADD result also consumed after the reshape.
    let mut g = Graph::new();
    let x = g.input(F32, &[2, 3]);
    let act = g.model.add_i32(0);
    let t = g.temp(F32, &[2, 3]);
    g.op(OperationType::Add, vec![x, x, act], vec![t], "double");
    let shape = g.model.add_i32_vector(&[6]);
    let r = g.output(F32, &[6]);
    g.op(OperationType::Reshape, vec![t, shape], vec![r], "flatten");
    let act2 = g.model.add_i32(0);
    let s = g.output(F32, &[2, 3]);
    g.op(OperationType::Mul, vec![t, x, act2], vec![s], "mul");
    let model = g.finish();
    let program = prepare(&model, 1).unwrap();
    let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    let out = program
        .execute_host(&[HostTensor::from_f32(vec![2, 3], &x).unwrap()])
        .unwrap();
    assert_eq!(f32s(&out[0]), vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
    assert_eq!(out[0].shape, vec![6]);
    assert_eq!(f32s(&out[1]), vec![2.0, 8.0, 18.0, 32.0, 50.0, 72.0]);
}
