//! Random single-operation models with random parameters and data: whatever the
//! validator accepts must prepare and execute without panicking (errors are fine), and
//! what it rejects must never reach a kernel. Covers every operation with a CPU kernel.

mod common;

use common::*;
use nnc_formats::nn::ops::{self, InputView};
use nnc_formats::nn::{Lifetime, Operand, OperandType, OperationType};

const OPS: &[OperationType] = &[
    OperationType::Add,
    OperationType::Sub,
    OperationType::Mul,
    OperationType::Div,
    OperationType::Maximum,
    OperationType::Minimum,
    OperationType::Pow,
    OperationType::Prelu,
    OperationType::Abs,
    OperationType::Exp,
    OperationType::Neg,
    OperationType::Logistic,
    OperationType::Relu6,
    OperationType::HardSwish,
    OperationType::Elu,
    OperationType::LogicalNot,
    OperationType::Equal,
    OperationType::Less,
    OperationType::LogicalAnd,
    OperationType::Select,
    OperationType::Conv2d,
    OperationType::DepthwiseConv2d,
    OperationType::GroupedConv2d,
    OperationType::TransposeConv2d,
    OperationType::AveragePool2d,
    OperationType::MaxPool2d,
    OperationType::L2Pool2d,
    OperationType::FullyConnected,
    OperationType::BatchMatmul,
    OperationType::Mean,
    OperationType::ReduceSum,
    OperationType::ReduceMax,
    OperationType::ReduceAny,
    OperationType::Softmax,
    OperationType::LogSoftmax,
    OperationType::L2Normalization,
    OperationType::LocalResponseNormalization,
    OperationType::InstanceNormalization,
    OperationType::Reshape,
    OperationType::Squeeze,
    OperationType::ExpandDims,
    OperationType::Transpose,
    OperationType::Concatenation,
    OperationType::Split,
    OperationType::Slice,
    OperationType::StridedSlice,
    OperationType::Pad,
    OperationType::PadV2,
    OperationType::MirrorPad,
    OperationType::Gather,
    OperationType::Tile,
    OperationType::Pack,
    OperationType::Reverse,
    OperationType::DepthToSpace,
    OperationType::SpaceToDepth,
    OperationType::ChannelShuffle,
    OperationType::ResizeBilinear,
    OperationType::ResizeNearestNeighbor,
    OperationType::Argmax,
    OperationType::Argmin,
    OperationType::TopkV2,
    OperationType::Cast,
    OperationType::Fill,
    OperationType::Rank,
];

fn random_dims(rng: &mut Rng) -> Vec<usize> {
    let rank = [1, 2, 4, 4, 3][rng.range(0, 4)];
    (0..rank).map(|_| rng.range(1, 4)).collect()
}

fn random_tensor(rng: &mut Rng, ty: OperandType, dims: &[usize], as_const: bool) -> Arg {
    let n: usize = dims.iter().product();
    let data: Vec<u8> = match ty {
        OperandType::TensorFloat32 => f32_bytes(&rng.f32s(n)),
        OperandType::TensorInt32 => i32_bytes(&rng.i32s(n, -2, 4)),
        _ => (0..n).map(|_| u8::from(rng.bool())).collect(),
    };
    let dims: Vec<u32> = dims.iter().map(|&d| d as u32).collect();
    if as_const {
        Arg::Const { ty, dims, data }
    } else {
        Arg::Input { ty, dims, data }
    }
}

fn random_arg(rng: &mut Rng, first_dims: &[usize]) -> Arg {
    match rng.range(0, 10) {
        0 | 1 | 10 => Arg::I32(rng.i32s(1, -1, 4)[0]),
        2 => Arg::F32([0.5f32, 1.0, -1.0, 2.0][rng.range(0, 3)]),
        3 => Arg::Bool(rng.bool()),
        4 => {
            // A small int vector: axes, shapes, paddings, begins...
            let len = if rng.bool() {
                first_dims.len()
            } else {
                rng.range(1, 8)
            };
            let v = rng.i32s(len, -2, 4);
            const_i32(&[len], &v)
        }
        5 => {
            let v = rng.i32s(first_dims.len() * 2, 0, 2);
            const_i32(&[first_dims.len(), 2], &v)
        }
        6 => {
            let dims = if rng.bool() {
                first_dims.to_vec()
            } else {
                random_dims(rng)
            };
            let as_const = rng.bool();
            random_tensor(rng, OperandType::TensorFloat32, &dims, as_const)
        }
        7 => {
            let len = rng.range(1, 4);
            random_tensor(rng, OperandType::TensorInt32, &[len], false)
        }
        8 => Arg::NoValue(OperandType::TensorFloat32),
        _ => random_tensor(rng, OperandType::TensorBool8, first_dims, false),
    }
}

/// Structured arguments for the window operations, with edge-case parameter values
/// (padding beyond the kernel, strides beyond the input, dilation, both layouts), which
/// fully random arguments rarely get past the validator.
fn window_args(rng: &mut Rng, op: OperationType) -> Option<Vec<Arg>> {
    use OperationType as O;
    let (n, h, w, c) = (
        rng.range(1, 2),
        rng.range(1, 5),
        rng.range(1, 5),
        rng.range(1, 4),
    );
    let nchw = rng.bool();
    let x_dims = if nchw {
        vec![n, c, h, w]
    } else {
        vec![n, h, w, c]
    };
    let x = random_tensor(rng, OperandType::TensorFloat32, &x_dims, false);
    let (kh, kw) = (rng.range(1, 4), rng.range(1, 4));
    let small = |rng: &mut Rng| Arg::I32(rng.range(0, 4) as i32);
    let positive = |rng: &mut Rng| Arg::I32(rng.range(1, 4) as i32);
    let explicit = rng.bool();
    let mut args = vec![x];
    let padding = |rng: &mut Rng, args: &mut Vec<Arg>| {
        if explicit {
            for _ in 0..4 {
                args.push(small(rng));
            }
        } else {
            args.push(Arg::I32(rng.range(1, 2) as i32));
        }
    };
    match op {
        O::Conv2d | O::DepthwiseConv2d | O::GroupedConv2d => {
            let groups = if op == O::GroupedConv2d {
                [1, c][rng.range(0, 1)]
            } else {
                1
            };
            let m = if op == O::DepthwiseConv2d {
                rng.range(1, 3)
            } else {
                1
            };
            let o = if op == O::DepthwiseConv2d {
                c * m
            } else {
                groups * rng.range(1, 3)
            };
            let fdims = if op == O::DepthwiseConv2d {
                vec![1, kh, kw, o]
            } else {
                vec![o, kh, kw, c / groups]
            };
            let as_const = rng.bool();
            args.push(random_tensor(
                rng,
                OperandType::TensorFloat32,
                &fdims,
                as_const,
            ));
            args.push(random_tensor(
                rng,
                OperandType::TensorFloat32,
                &[o],
                as_const,
            ));
            padding(rng, &mut args);
            args.push(positive(rng));
            args.push(positive(rng));
            match op {
                O::DepthwiseConv2d => args.push(Arg::I32(m as i32)),
                O::GroupedConv2d => args.push(Arg::I32(groups as i32)),
                _ => {}
            }
            args.push(Arg::I32(rng.range(0, 3) as i32));
            if op == O::GroupedConv2d || nchw || rng.bool() {
                args.push(Arg::Bool(nchw));
                if op != O::GroupedConv2d && rng.bool() {
                    args.push(positive(rng));
                    args.push(positive(rng));
                }
            }
        }
        O::TransposeConv2d => {
            let o = rng.range(1, 3);
            let as_const = rng.bool();
            args.push(random_tensor(
                rng,
                OperandType::TensorFloat32,
                &[o, kh, kw, c],
                as_const,
            ));
            args.push(random_tensor(rng, OperandType::TensorFloat32, &[o], false));
            if explicit {
                for _ in 0..4 {
                    args.push(small(rng));
                }
            } else {
                let shape: Vec<i32> = if nchw {
                    vec![
                        n as i32,
                        o as i32,
                        rng.range(1, 9) as i32,
                        rng.range(1, 9) as i32,
                    ]
                } else {
                    vec![
                        n as i32,
                        rng.range(1, 9) as i32,
                        rng.range(1, 9) as i32,
                        o as i32,
                    ]
                };
                args.push(const_i32(&[4], &shape));
                args.push(Arg::I32(rng.range(1, 2) as i32));
            }
            args.push(positive(rng));
            args.push(positive(rng));
            args.push(Arg::I32(rng.range(0, 3) as i32));
            args.push(Arg::Bool(nchw));
        }
        O::AveragePool2d | O::MaxPool2d | O::L2Pool2d => {
            padding(rng, &mut args);
            for _ in 0..4 {
                args.push(positive(rng));
            }
            args.push(Arg::I32(rng.range(0, 3) as i32));
            if nchw || rng.bool() {
                args.push(Arg::Bool(nchw));
            }
        }
        O::ResizeBilinear | O::ResizeNearestNeighbor => {
            if rng.bool() {
                args.push(positive(rng));
                args.push(positive(rng));
            } else {
                args.push(Arg::F32([0.3f32, 0.5, 1.0, 2.5][rng.range(0, 3)]));
                args.push(Arg::F32([0.3f32, 0.5, 1.0, 2.5][rng.range(0, 3)]));
            }
            args.push(Arg::Bool(nchw));
            if rng.bool() {
                let align = rng.bool();
                args.push(Arg::Bool(align));
                args.push(Arg::Bool(!align && rng.bool()));
            }
        }
        O::FullyConnected => {
            let k = [1, 2, 3, 4][rng.range(0, 3)];
            let u = rng.range(1, 4);
            let as_const = rng.bool();
            args.push(random_tensor(
                rng,
                OperandType::TensorFloat32,
                &[u, k],
                as_const,
            ));
            if rng.bool() {
                args.push(random_tensor(rng, OperandType::TensorFloat32, &[u], false));
            } else {
                args.push(Arg::NoValue(OperandType::TensorFloat32));
            }
            args.push(Arg::I32(rng.range(0, 3) as i32));
        }
        _ => return None,
    }
    Some(args)
}

/// The declared outputs the signature infers for these inputs (types, unknown dims).
fn outputs_for(
    op: OperationType,
    args: &[Arg],
    n_out: usize,
) -> Option<Vec<(OperandType, Vec<u32>)>> {
    let (model, _) = single_op(
        op,
        args.to_vec(),
        &vec![(OperandType::TensorFloat32, vec![]); n_out],
    );
    let operation = &model.main.operations[0];
    let views: Vec<InputView> = operation
        .inputs
        .iter()
        .map(|&i| InputView {
            operand: &model.main.operands[i as usize],
            value: model.constant_bytes(i),
        })
        .collect();
    let declared: Vec<&Operand> = operation
        .outputs
        .iter()
        .map(|&o| &model.main.operands[o as usize])
        .collect();
    let inferred = ops::infer(op, &views, &declared).ok()?;
    Some(
        inferred
            .into_iter()
            .map(|s| {
                // Unknown dimensions (or unknown rank) so execution infers them again.
                let dims = if s.operand_type.is_scalar() {
                    vec![]
                } else {
                    vec![0; s.dimensions.len()]
                };
                (s.operand_type, dims)
            })
            .collect(),
    )
}

#[test]
fn random_operations_never_panic() {
    let mut rng = Rng::new(61);
    let mut executed = 0;
    let mut attempts = 0;
    let mut succeeded = std::collections::BTreeSet::new();
    while attempts < 200_000 && executed < 20_000 {
        attempts += 1;
        let op = OPS[rng.range(0, OPS.len() - 1)];
        let first_ty = [
            OperandType::TensorFloat32,
            OperandType::TensorFloat32,
            OperandType::TensorInt32,
            OperandType::TensorBool8,
        ][rng.range(0, 3)];
        let dims = random_dims(&mut rng);
        let mut args: Vec<Arg> = Vec::new();
        if let Some(structured) = window_args(&mut rng, op) {
            args = structured;
        } else if op == OperationType::Pack || op == OperationType::Fill {
            args.push(random_arg(&mut rng, &dims));
        }
        let data_ty = first_ty;
        let extra = if args.len() > 1 {
            0
        } else {
            args.push(random_tensor(&mut rng, data_ty, &dims, false));
            // Most operations take two to four inputs.
            [0, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6][rng.range(0, 10)]
        };
        for k in 0..extra {
            // Often repeat the data tensor's type and shape (second operands).
            if (k == 0 && rng.bool()) || rng.range(0, 5) == 0 {
                let as_const = rng.bool();
                args.push(random_tensor(&mut rng, data_ty, &dims, as_const));
            } else {
                args.push(random_arg(&mut rng, &dims));
            }
        }
        let n_out = match op {
            OperationType::TopkV2 => 2,
            OperationType::Split => match args.get(2) {
                Some(Arg::I32(n)) if (1..=4).contains(n) => *n as usize,
                _ => 1,
            },
            _ => 1,
        };
        let Some(outputs) = outputs_for(op, &args, n_out) else {
            continue;
        };
        let (mut model, feeds) = single_op(op, args, &outputs);
        if nnc_formats::nn::validate(&model).is_err() {
            continue;
        }
        // Sometimes make an input dynamic (unknown dimensions).
        if rng.bool()
            && let Some(&i) = model.main.inputs.first()
        {
            let o = &mut model.main.operands[i as usize];
            if o.lifetime == Lifetime::SubgraphInput && o.operand_type.is_tensor() {
                o.dimensions.iter_mut().for_each(|d| *d = 0);
                model.input_info[0].dims = o.dimensions.clone();
            }
        }
        executed += 1;
        // Errors are fine; panics fail the test.
        if let Ok(program) = prepare(&model, 1)
            && program.execute_host(&feeds).is_ok()
        {
            succeeded.insert(op);
        }
    }
    assert!(executed > 300, "only {executed} random models were valid");
    // Most operations ran to completion at least once (the rest erred cleanly).
    let missing: Vec<_> = OPS.iter().filter(|op| !succeeded.contains(op)).collect();
    assert!(
        missing.len() < OPS.len() / 4,
        "never completed: {missing:?}"
    );
    println!("never completed: {missing:?}, valid models {executed}, attempts {attempts}");
}
