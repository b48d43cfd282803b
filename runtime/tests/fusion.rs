//! Fused operations give the bits their operations give one at a time: a 1x1 expansion
//! convolution and the depthwise convolution reading it, over strides, kernel sizes,
//! implicit and explicit padding, batches, bands of one row and of many, and two threads;
//! LOGISTIC and the MUL of its input by its output (SiLU) in either operand order.

mod common;

use std::sync::Arc;

use common::*;
use nnc_formats::nn::{IoInfo, Lifetime, Model, OperationType};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::{HostWeights, PrepareOptions, Program};

#[derive(Clone, Copy, Debug)]
struct Pair {
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    /// Expansion channels.
    e: usize,
    k: usize,
    stride: usize,
    /// Implicit SAME (true) / VALID (false), or explicit (left, right, top, bottom).
    padding: Result<[usize; 4], bool>,
    act: i32,
}

/// CONV_2D 1x1 (x -> expansion) then DEPTHWISE_CONV_2D (expansion -> y), weights pooled
/// (prepared), with random values; returns the model and its input.
fn pair_model(p: Pair, rng: &mut Rng) -> (Model, HostTensor) {
    let mut m = Model::default();
    let mut x_operand = f32_operand(&[p.n, p.h, p.w, p.c]);
    x_operand.lifetime = Lifetime::SubgraphInput;
    let x = m.add_operand(x_operand);
    let expand_filter = m.add_constant(
        f32_operand(&[p.e, 1, 1, p.c]),
        &f32_bytes(&rng.f32s(p.e * p.c)),
    );
    let expand_bias = m.add_constant(f32_operand(&[p.e]), &f32_bytes(&rng.f32s(p.e)));
    let t = m.add_operand(f32_operand(&[p.n, p.h, p.w, p.e]));
    let (valid, same) = (m.add_i32(2), m.add_i32(1));
    let one = m.add_i32(1);
    let relu6 = m.add_i32(3);
    m.add_operation(
        OperationType::Conv2d,
        vec![x, expand_filter, expand_bias, valid, one, one, relu6],
        vec![t],
        "expand",
    );
    let (oh, ow) = match p.padding {
        Err(true) => (p.h.div_ceil(p.stride), p.w.div_ceil(p.stride)),
        Err(false) => ((p.h - p.k) / p.stride + 1, (p.w - p.k) / p.stride + 1),
        Ok([l, r, top, bottom]) => (
            (p.h + top + bottom - p.k) / p.stride + 1,
            (p.w + l + r - p.k) / p.stride + 1,
        ),
    };
    let dw_filter = m.add_constant(
        f32_operand(&[1, p.k, p.k, p.e]),
        &f32_bytes(&rng.f32s(p.k * p.k * p.e)),
    );
    let dw_bias = m.add_constant(f32_operand(&[p.e]), &f32_bytes(&rng.f32s(p.e)));
    let mut y_operand = f32_operand(&[p.n, oh, ow, p.e]);
    y_operand.lifetime = Lifetime::SubgraphOutput;
    let y = m.add_operand(y_operand);
    let mut inputs = vec![t, dw_filter, dw_bias];
    match p.padding {
        Err(is_same) => inputs.push(if is_same { same } else { valid }),
        Ok(pads) => inputs.extend(pads.map(|v| m.add_i32(v as i32))),
    }
    let stride = m.add_i32(p.stride as i32);
    let act = m.add_i32(p.act);
    inputs.extend([stride, stride, one, act]);
    m.add_operation(OperationType::DepthwiseConv2d, inputs, vec![y], "depthwise");
    m.main.inputs = vec![x];
    m.main.outputs = vec![y];
    let info = |name: &str, dims: &[usize]| IoInfo {
        name: name.into(),
        dtype: DataType::F32,
        dims: dims.iter().map(|&d| d as u32).collect(),
    };
    m.input_info = vec![info("x", &[p.n, p.h, p.w, p.c])];
    m.output_info = vec![info("y", &[p.n, oh, ow, p.e])];
    let input = HostTensor::new(
        DataType::F32,
        vec![p.n, p.h, p.w, p.c],
        f32_bytes(&rng.f32s(p.n * p.h * p.w * p.c)),
    )
    .unwrap();
    (m, input)
}

fn prepare(model: &Model, threads: usize, fusion: bool) -> Program {
    let weights = Arc::new(HostWeights::new(model).unwrap());
    let options = PrepareOptions {
        threads,
        fusion,
        ..Default::default()
    };
    Program::prepare(model, weights, &options).unwrap()
}

#[test]
fn an_expansion_and_its_depthwise_convolution_fused_give_the_same_bits() {
    let mut rng = Rng::new(11);
    let cases = [
        // MobileNetV2's first block: stride 2, SAME; bands of several rows.
        Pair {
            n: 1,
            h: 64,
            w: 64,
            c: 8,
            e: 192,
            k: 3,
            stride: 2,
            padding: Err(true),
            act: 3,
        },
        // Stride 1: two rows carried from band to band.
        Pair {
            n: 1,
            h: 66,
            w: 62,
            c: 8,
            e: 200,
            k: 3,
            stride: 1,
            padding: Err(true),
            act: 0,
        },
        // Two images (bands never cross one), VALID, odd channel counts.
        Pair {
            n: 2,
            h: 49,
            w: 50,
            c: 5,
            e: 170,
            k: 3,
            stride: 2,
            padding: Err(false),
            act: 1,
        },
        // 5x5 over wide rows: one output row per band.
        Pair {
            n: 1,
            h: 40,
            w: 40,
            c: 16,
            e: 512,
            k: 5,
            stride: 1,
            padding: Err(true),
            act: 3,
        },
        // Explicit, asymmetric padding.
        Pair {
            n: 1,
            h: 61,
            w: 57,
            c: 7,
            e: 240,
            k: 3,
            stride: 2,
            padding: Ok([0, 1, 1, 0]),
            act: 3,
        },
    ];
    for (i, p) in cases.into_iter().enumerate() {
        let (model, input) = pair_model(p, &mut rng);
        let unfused = prepare(&model, 1, false);
        assert!(unfused.fused_operations().is_empty());
        let expected = f32s(&unfused.execute_host(std::slice::from_ref(&input)).unwrap()[0]);
        for threads in [1, 2] {
            let fused = prepare(&model, threads, true);
            assert_eq!(fused.fused_operations(), vec![1], "case {i}: {p:?}");
            let got = f32s(&fused.execute_host(std::slice::from_ref(&input)).unwrap()[0]);
            assert_eq!(got.len(), expected.len());
            let same = got
                .iter()
                .zip(&expected)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "case {i} ({threads} threads): {p:?}");
        }
    }
}

/// Below the size where fusing pays (the expansion fits the caches between the two
/// layers), the operations run one at a time.
#[test]
fn a_small_expansion_runs_unfused() {
    let mut rng = Rng::new(12);
    let p = Pair {
        n: 1,
        h: 28,
        w: 28,
        c: 32,
        e: 192,
        k: 3,
        stride: 1,
        padding: Err(true),
        act: 3,
    };
    let (model, input) = pair_model(p, &mut rng);
    let program = prepare(&model, 1, true);
    assert!(program.fused_operations().is_empty());
    program.execute_host(&[input]).unwrap();
}

/// x -> LOGISTIC -> s, then MUL(x, s) (or MUL(s, x)) with activation `act` -> y; with
/// `expose_sigmoid`, s is a model output too (so it must be written).
fn swish_model(shape: &[usize], sigmoid_first: bool, act: i32, expose_sigmoid: bool) -> Model {
    let mut m = Model::default();
    let mut x_operand = f32_operand(shape);
    x_operand.lifetime = Lifetime::SubgraphInput;
    let x = m.add_operand(x_operand);
    let mut s_operand = f32_operand(shape);
    if expose_sigmoid {
        s_operand.lifetime = Lifetime::SubgraphOutput;
    }
    let s = m.add_operand(s_operand);
    m.add_operation(OperationType::Logistic, vec![x], vec![s], "sigmoid");
    let mut y_operand = f32_operand(shape);
    y_operand.lifetime = Lifetime::SubgraphOutput;
    let y = m.add_operand(y_operand);
    let act = m.add_i32(act);
    let (a, b) = if sigmoid_first { (s, x) } else { (x, s) };
    m.add_operation(OperationType::Mul, vec![a, b, act], vec![y], "mul");
    let info = |name: &str| IoInfo {
        name: name.into(),
        dtype: DataType::F32,
        dims: shape.iter().map(|&d| d as u32).collect(),
    };
    m.main.inputs = vec![x];
    m.main.outputs = vec![y];
    m.input_info = vec![info("x")];
    m.output_info = vec![info("y")];
    if expose_sigmoid {
        m.main.outputs.push(s);
        m.output_info.push(info("s"));
    }
    m
}

#[test]
fn a_sigmoid_and_the_product_with_its_input_fuse_into_swish() {
    let mut rng = Rng::new(13);
    // Long enough to split over two threads, with a tail of a partial vector.
    let shape = [1, 45, 47, 33];
    let n: usize = shape.iter().product();
    let values: Vec<f32> = rng.f32s(n).iter().map(|v| v * 12.0).collect();
    let input = HostTensor::new(DataType::F32, shape.to_vec(), f32_bytes(&values)).unwrap();
    for sigmoid_first in [false, true] {
        let model = swish_model(&shape, sigmoid_first, 0, false);
        let unfused = prepare(&model, 1, false);
        assert!(unfused.fused_operations().is_empty());
        let expected = f32s(&unfused.execute_host(std::slice::from_ref(&input)).unwrap()[0]);
        for (v, e) in values.iter().zip(&expected) {
            let want = f64::from(*v) / (1.0 + (-f64::from(*v)).exp());
            assert!(
                (f64::from(*e) - want).abs() <= 1e-5 + 1e-6 * want.abs(),
                "{v}: {e}"
            );
        }
        for threads in [1, 2] {
            let fused = prepare(&model, threads, true);
            assert_eq!(
                fused.fused_operations(),
                vec![1],
                "sigmoid first: {sigmoid_first}"
            );
            let got = f32s(&fused.execute_host(std::slice::from_ref(&input)).unwrap()[0]);
            let same = got.len() == expected.len()
                && got
                    .iter()
                    .zip(&expected)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "sigmoid first: {sigmoid_first}, {threads} threads");
        }
    }
}

#[test]
fn a_swish_whose_sigmoid_is_needed_or_clamped_runs_unfused() {
    let shape = [2, 3, 5];
    // The sigmoid is a model output: it must be written.
    let exposed = prepare(&swish_model(&shape, false, 0, true), 1, true);
    assert!(exposed.fused_operations().is_empty());
    // A fused RELU on the MUL: not the kernel's function.
    let clamped = prepare(&swish_model(&shape, false, 1, false), 1, true);
    assert!(clamped.fused_operations().is_empty());
    let input = HostTensor::new(DataType::F32, shape.to_vec(), f32_bytes(&[-1.0; 30])).unwrap();
    let y = f32s(&clamped.execute_host(&[input]).unwrap()[0]);
    assert!(y.iter().all(|&v| v == 0.0), "{y:?}");
}
