//! Concatenations done in place: convolutions write straight into their slices of the
//! concatenation's output (a SqueezeNet fire module's shape), the concatenation is
//! skipped, and the results have the bits of the same graph run out of place, over 1x1
//! and 3x3 producers, batches, threads, NCHW and Winograd producers (which compute
//! densely and place their rows), and a cached plan (which is checked when loaded).

mod common;

use std::sync::Arc;

use common::*;
use nnc_formats::nn::{IoInfo, Lifetime, Model, OperationType};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::exec::ProgramImage;
use nnc_runtime::kernels::FloatMath;
use nnc_runtime::{HostWeights, PrepareOptions, Program};

#[derive(Clone, Copy, Debug)]
struct Fire {
    n: usize,
    h: usize,
    w: usize,
    c: usize,
    squeeze: usize,
    /// Output channels of the 1x1 and the 3x3 expansion.
    e1: usize,
    e3: usize,
    /// The expansions in NCHW layout (the concatenation then joins along W).
    nchw: bool,
    /// The 1x1 expansion's output is also a model output, so it must stay a buffer of
    /// its own and the concatenation runs out of place.
    expose_e1: bool,
}

/// x -> squeeze 1x1 (ReLU) -> [expand 1x1 (ReLU), expand 3x3 SAME (ReLU)] -> concat on
/// the last axis -> 1x1 convolution; random weights (pooled, as compiled models have
/// them) and input.
fn fire_model(f: Fire, rng: &mut Rng) -> (Model, HostTensor) {
    let mut m = Model::default();
    let mut x_operand = f32_operand(&[f.n, f.h, f.w, f.c]);
    x_operand.lifetime = Lifetime::SubgraphInput;
    let x = m.add_operand(x_operand);
    let (same, one, relu) = (m.add_i32(1), m.add_i32(1), m.add_i32(1));
    let nhwc = m.add_bool(false);
    let conv = |m: &mut Model, rng: &mut Rng, input, k: usize, cin, cout, nchw: bool, name| {
        let filter = m.add_constant(
            f32_operand(&[cout, k, k, cin]),
            &f32_bytes(&rng.f32s(cout * k * k * cin)),
        );
        let bias = m.add_constant(f32_operand(&[cout]), &f32_bytes(&rng.f32s(cout)));
        let dims = if nchw {
            [f.n, cout, f.h, f.w]
        } else {
            [f.n, f.h, f.w, cout]
        };
        let out = m.add_operand(f32_operand(&dims));
        let layout = if nchw { m.add_bool(true) } else { nhwc };
        m.add_operation(
            OperationType::Conv2d,
            vec![input, filter, bias, same, one, one, relu, layout],
            vec![out],
            name,
        );
        out
    };
    let s = conv(&mut m, rng, x, 1, f.c, f.squeeze, false, "squeeze");
    let (s_in, e1_dims, e3_dims, cat_dims) = if f.nchw {
        // The expansions read the squeeze output as NCHW data of the same element count.
        let reshaped = m.add_operand(f32_operand(&[f.n, f.squeeze, f.h, f.w]));
        let shape = m.add_i32_vector(&[f.n as i32, f.squeeze as i32, f.h as i32, f.w as i32]);
        m.add_operation(
            OperationType::Reshape,
            vec![s, shape],
            vec![reshaped],
            "as nchw",
        );
        (reshaped, [f.n, f.e1, f.h, f.w], [f.n, f.e3, f.h, f.w], None)
    } else {
        (
            s,
            [f.n, f.h, f.w, f.e1],
            [f.n, f.h, f.w, f.e3],
            Some([f.n, f.h, f.w, f.e1 + f.e3]),
        )
    };
    let e1 = conv(&mut m, rng, s_in, 1, f.squeeze, f.e1, f.nchw, "expand1x1");
    let e3 = conv(&mut m, rng, s_in, 3, f.squeeze, f.e3, f.nchw, "expand3x3");
    assert_eq!(m.main.operands[e1 as usize].dimensions.len(), e1_dims.len());
    assert_eq!(m.main.operands[e3 as usize].dimensions.len(), e3_dims.len());
    let axis = m.add_i32(3);
    let (cat_dims, head_in) = match cat_dims {
        Some(d) => (d, d[3]),
        // NCHW: joined along W, so the head sees [n, e, h, 2w] as NHWC channels 2w.
        None => {
            assert_eq!(f.e1, f.e3);
            ([f.n, f.e1, f.h, 2 * f.w], 2 * f.w)
        }
    };
    let cat = m.add_operand(f32_operand(&cat_dims));
    m.add_operation(
        OperationType::Concatenation,
        vec![e1, e3, axis],
        vec![cat],
        "concat",
    );
    let head_filter = m.add_constant(
        f32_operand(&[8, 1, 1, head_in]),
        &f32_bytes(&rng.f32s(8 * head_in)),
    );
    let head_bias = m.add_constant(f32_operand(&[8]), &f32_bytes(&rng.f32s(8)));
    let y_dims = [cat_dims[0], cat_dims[1], cat_dims[2], 8];
    let mut y_operand = f32_operand(&y_dims);
    y_operand.lifetime = Lifetime::SubgraphOutput;
    let y = m.add_operand(y_operand);
    let none = m.add_i32(0);
    m.add_operation(
        OperationType::Conv2d,
        vec![cat, head_filter, head_bias, same, one, one, none, nhwc],
        vec![y],
        "head",
    );
    let info = |name: &str, dims: &[usize]| IoInfo {
        name: name.into(),
        dtype: DataType::F32,
        dims: dims.iter().map(|&d| d as u32).collect(),
    };
    m.main.inputs = vec![x];
    m.main.outputs = vec![y];
    m.input_info = vec![info("x", &[f.n, f.h, f.w, f.c])];
    m.output_info = vec![info("y", &y_dims)];
    if f.expose_e1 {
        m.main.operands[e1 as usize].lifetime = Lifetime::SubgraphOutput;
        m.main.outputs.push(e1);
        m.output_info.push(info("e1", &e1_dims));
    }
    let input = HostTensor::new(
        DataType::F32,
        vec![f.n, f.h, f.w, f.c],
        f32_bytes(&rng.f32s(f.n * f.h * f.w * f.c)),
    )
    .unwrap();
    (m, input)
}

fn prepare(model: &Model, threads: usize, float_math: FloatMath) -> Program {
    let weights = Arc::new(HostWeights::new(model).unwrap());
    let options = PrepareOptions {
        threads,
        float_math,
        ..Default::default()
    };
    Program::prepare(model, weights, &options).unwrap()
}

/// Whether the program skips its concatenation (operation 3 or, in NCHW, 4).
fn concat_skipped(program: &Program, model: &Model) -> bool {
    let at = model
        .main
        .operations
        .iter()
        .position(|op| op.op_type == OperationType::Concatenation)
        .unwrap();
    program.image().plan.unwrap().skip[at]
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

const BASE: Fire = Fire {
    n: 1,
    h: 23,
    w: 21,
    c: 24,
    squeeze: 16,
    e1: 32,
    e3: 40,
    nchw: false,
    expose_e1: false,
};

#[test]
fn a_concatenation_of_convolutions_is_done_in_place_with_the_same_bits() {
    let cases = [
        BASE,
        // Two images; channel counts that are not multiples of the vector width.
        Fire {
            n: 2,
            e1: 13,
            e3: 19,
            ..BASE
        },
        // NCHW expansions: joined along W, which they compute densely and place.
        Fire {
            nchw: true,
            e1: 24,
            e3: 24,
            ..BASE
        },
    ];
    for (i, f) in cases.into_iter().enumerate() {
        let seed = 21 + i as u64;
        let (model, input) = fire_model(f, &mut Rng::new(seed));
        // The same graph and values with the 1x1 expansion also an output: out of place.
        let (reference_model, _) = fire_model(
            Fire {
                expose_e1: true,
                ..f
            },
            &mut Rng::new(seed),
        );
        for math in [FloatMath::Strict, FloatMath::Fast] {
            let reference = prepare(&reference_model, 1, math);
            assert!(!concat_skipped(&reference, &reference_model), "case {i}");
            let expected = reference
                .execute_host(std::slice::from_ref(&input))
                .unwrap();
            let expected = f32s(&expected[0]);
            for threads in [1, 2] {
                let program = prepare(&model, threads, math);
                assert!(concat_skipped(&program, &model), "case {i}: {f:?}");
                let got = program.execute_host(std::slice::from_ref(&input)).unwrap();
                // The profile says the concatenation was no work.
                let profile = program
                    .profile_host(std::slice::from_ref(&input), 1)
                    .unwrap();
                let concat = profile
                    .iter()
                    .find(|t| t.operation.op_type == OperationType::Concatenation)
                    .unwrap();
                assert!(concat.elided && concat.median.is_zero(), "case {i}");
                assert!(
                    same_bits(&f32s(&got[0]), &expected),
                    "case {i} ({threads} threads, {math:?}): {f:?}"
                );
            }
        }
    }
}

/// A cached plan with the concatenation in place loads and runs; one whose slice is
/// moved by a float is refused.
#[test]
fn a_cached_in_place_plan_is_checked_when_loaded() {
    let (model, input) = fire_model(BASE, &mut Rng::new(22));
    let program = prepare(&model, 1, FloatMath::Strict);
    let expected = f32s(&program.execute_host(std::slice::from_ref(&input)).unwrap()[0]);
    let image = ProgramImage::from_bytes(&program.image().to_bytes()).unwrap();
    let weights = Arc::new(HostWeights::new(&model).unwrap());
    let options = PrepareOptions::default();
    let cached = Program::prepare_with(&model, weights.clone(), &options, Some(&image)).unwrap();
    let got = f32s(&cached.execute_host(std::slice::from_ref(&input)).unwrap()[0]);
    assert!(same_bits(&got, &expected));

    // The 3x3 expansion's slice (operand written by operation 2) one float further on.
    let e3 = model.main.operations[2].outputs[0] as usize;
    let mut moved = image.clone();
    let plan = moved.plan.as_mut().unwrap();
    *plan.offsets[e3].as_mut().unwrap() += 4;
    let err = Program::prepare_with(&model, weights, &options, Some(&moved)).unwrap_err();
    assert!(
        err.to_string().contains("in-place concatenation"),
        "unexpected error: {err}"
    );
}
