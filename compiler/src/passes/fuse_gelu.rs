//! Fuses GELU written out elementwise, as PyTorch and Hugging Face export it, into the
//! one GELU operation of nnc's extension: five to eight operations, and as many passes
//! over memory, become one (ONNX Runtime's GeluFusion and FastGeluFusion do the same).
//! The forms matched, each intermediate read only by the next operation:
//!
//! ```text
//! erf form:  e = ERF(DIV(x, sqrt 2))  or  ERF(MUL(x, 1/sqrt 2))
//! tanh form: e = TANH(MUL(ADD(x, MUL(POW(x, 3), 0.044715)), sqrt(2/pi)))
//! then:      a = ADD(e, 1);  y = MUL(MUL(x, a), 0.5)  or  MUL(MUL(x, 0.5), a)
//! ```
//!
//! with the operands of each ADD and MUL in either order, every constant a single
//! float32 value, no fused activation, and `y` of `x`'s type and shape. The erf form
//! becomes the exact GELU, the tanh form the approximate one (torch's
//! `approximate="tanh"`, GPT-2's `gelu_new`).

use std::collections::BTreeMap;

use nnc_formats::nn::{Model, OperandIndex, OperandType, OperationType};

use super::graph::{self, GraphIndex};

pub fn run(model: &mut Model) -> Result<BTreeMap<String, usize>, String> {
    let mut changes = BTreeMap::new();
    let mut index = GraphIndex::new(model);
    for i in 0..model.main.operations.len() {
        if index.is_removed(i) {
            continue;
        }
        let op_type = model.main.operations[i].op_type;
        let found = if op_type == OperationType::Erf {
            match_erf_form(model, &index, i).map(|c| (c, "erf"))
        } else if op_type == OperationType::Tanh {
            match_tanh_form(model, &index, i).map(|c| (c, "tanh"))
        } else {
            None
        };
        if let Some((chain, form)) = found {
            rewrite(model, &mut index, chain);
            *changes
                .entry(format!("GELU fused ({form} form)"))
                .or_insert(0) += 1;
        }
    }
    index.compact(model);
    Ok(changes)
}

/// A matched GELU: the operations to remove, the last one (rewritten into GELU), its
/// input x, and which GELU it computes.
struct Chain {
    removed: Vec<usize>,
    last: usize,
    x: OperandIndex,
    approximate: bool,
}

/// The single float32 value of a constant operand.
fn scalar(model: &Model, operand: OperandIndex) -> Option<f32> {
    match graph::const_f32s(model, operand)?.as_slice() {
        [v] => Some(*v),
        _ => None,
    }
}

fn near(v: f32, want: f64) -> bool {
    (f64::from(v) - want).abs() <= 1e-6 * want.abs()
}

/// Operation `op`'s two operands when it is a binary operation of `op_type` without a
/// fused activation.
fn binary(
    model: &Model,
    op: usize,
    op_type: OperationType,
) -> Option<(OperandIndex, OperandIndex)> {
    let o = &model.main.operations[op];
    let [a, b, act] = o.inputs.as_slice() else {
        return None;
    };
    (o.op_type == op_type && graph::const_i32(model, *act) == Some(0)).then_some((*a, *b))
}

/// Of a binary operation's operands, the one that is not the constant `value` (either
/// order), when the other is.
fn other_than_constant(
    model: &Model,
    (a, b): (OperandIndex, OperandIndex),
    value: f64,
) -> Option<OperandIndex> {
    if scalar(model, b).is_some_and(|v| near(v, value)) {
        Some(a)
    } else if scalar(model, a).is_some_and(|v| near(v, value)) {
        Some(b)
    } else {
        None
    }
}

/// The one operation reading `operand` (once; not a model output) and its output.
fn next(model: &Model, index: &GraphIndex, operand: OperandIndex) -> Option<(usize, OperandIndex)> {
    let op = index.single_reader(model, operand)?;
    let &[out] = model.main.operations[op].outputs.as_slice() else {
        return None;
    };
    Some((op, out))
}

/// The operation writing `operand` when `operand` is read only by that operation's
/// successor in the chain (once; not a model output).
fn producer_of_intermediate(
    model: &Model,
    index: &GraphIndex,
    operand: OperandIndex,
) -> Option<usize> {
    index.single_reader(model, operand)?;
    index.producer(operand)
}

/// The unary operation `op`'s input and output.
fn unary(model: &Model, op: usize) -> Option<(OperandIndex, OperandIndex)> {
    let o = &model.main.operations[op];
    match (o.inputs.as_slice(), o.outputs.as_slice()) {
        (&[i], &[out]) => Some((i, out)),
        _ => None,
    }
}

/// ERF(x / sqrt 2) (or x * 1/sqrt 2), then the common tail.
fn match_erf_form(model: &Model, index: &GraphIndex, erf: usize) -> Option<Chain> {
    let (d, e) = unary(model, erf)?;
    let scale = producer_of_intermediate(model, index, d)?;
    let x = binary(model, scale, OperationType::Div)
        .and_then(|(a, b)| {
            scalar(model, b)
                .is_some_and(|v| near(v, std::f64::consts::SQRT_2))
                .then_some(a)
        })
        .or_else(|| {
            let operands = binary(model, scale, OperationType::Mul)?;
            other_than_constant(model, operands, std::f64::consts::FRAC_1_SQRT_2)
        })?;
    let mut chain = match_tail(model, index, x, e)?;
    chain.removed.extend([scale, erf]);
    Some(chain)
}

/// TANH(sqrt(2/pi) (x + 0.044715 x^3)), then the common tail.
fn match_tanh_form(model: &Model, index: &GraphIndex, tanh: usize) -> Option<Chain> {
    let (u, t) = unary(model, tanh)?;
    let scale = producer_of_intermediate(model, index, u)?;
    let sqrt_2_over_pi = (2.0 / std::f64::consts::PI).sqrt();
    let s = other_than_constant(
        model,
        binary(model, scale, OperationType::Mul)?,
        sqrt_2_over_pi,
    )?;
    let sum = producer_of_intermediate(model, index, s)?;
    let (a, b) = binary(model, sum, OperationType::Add)?;
    // One operand of the sum is x, the other 0.044715 * POW(x, 3).
    let cubic = |x: OperandIndex, q: OperandIndex| -> Option<[usize; 2]> {
        let weigh = producer_of_intermediate(model, index, q)?;
        let p = other_than_constant(model, binary(model, weigh, OperationType::Mul)?, 0.044715)?;
        let pow = producer_of_intermediate(model, index, p)?;
        let o = &model.main.operations[pow];
        let is_cube = o.op_type == OperationType::Pow
            && o.inputs.first() == Some(&x)
            && o.inputs.get(1).and_then(|&e| scalar(model, e)) == Some(3.0);
        is_cube.then_some([pow, weigh])
    };
    let (x, [pow, weigh]) = cubic(a, b)
        .map(|ops| (a, ops))
        .or_else(|| cubic(b, a).map(|ops| (b, ops)))?;
    let mut chain = match_tail(model, index, x, t)?;
    chain.removed.extend([pow, weigh, sum, scale, tanh]);
    chain.approximate = true;
    Some(chain)
}

/// `y = x * (e + 1) * 0.5`, the multiplications in either order.
fn match_tail(
    model: &Model,
    index: &GraphIndex,
    x: OperandIndex,
    e: OperandIndex,
) -> Option<Chain> {
    // a = e + 1.
    let (add, a) = next(model, index, e)?;
    if other_than_constant(model, binary(model, add, OperationType::Add)?, 1.0)? != e {
        return None;
    }
    // The product of x, a and 0.5, in either order.
    let (product, p) = next(model, index, a)?;
    let (u, v) = binary(model, product, OperationType::Mul)?;
    let other = if u == a { v } else { u };
    let (removed, last, y) = if other == x {
        // (x * a) * 0.5
        let (halve, y) = next(model, index, p)?;
        if other_than_constant(model, binary(model, halve, OperationType::Mul)?, 0.5)? != p {
            return None;
        }
        (vec![add, product], halve, y)
    } else {
        // (x * 0.5) * a: `other` is x * 0.5, read only here.
        let halve = producer_of_intermediate(model, index, other)?;
        if other_than_constant(model, binary(model, halve, OperationType::Mul)?, 0.5)? != x {
            return None;
        }
        (vec![add, halve], product, p)
    };
    let (xo, yo) = (model.operand(x)?, model.operand(y)?);
    let float = |t| t == OperandType::TensorFloat32;
    (float(xo.operand_type) && float(yo.operand_type) && xo.dimensions == yo.dimensions).then_some(
        Chain {
            removed,
            last,
            x,
            approximate: false,
        },
    )
}

fn rewrite(model: &mut Model, index: &mut GraphIndex, chain: Chain) {
    for op in chain.removed {
        index.remove(model, op);
    }
    let approximate = model.add_bool(chain.approximate);
    index.set_inputs(model, chain.last, vec![chain.x, approximate]);
    model.main.operations[chain.last].op_type = OperationType::Gelu;
}

#[cfg(test)]
mod tests {
    use nnc_formats::nn::{Lifetime, Operand};

    use super::*;

    /// x -> the erf form of GELU (torch's order, or transformers' with `halve_first`)
    /// -> y; returns the model.
    fn gelu_model(halve_first: bool, reciprocal_scale: bool, swap: bool) -> Model {
        let mut m = Model::default();
        let shape = vec![2, 8];
        let tensor = |lifetime| {
            let mut o = Operand::new(OperandType::TensorFloat32, shape.clone());
            o.lifetime = lifetime;
            o
        };
        let x = m.add_operand(tensor(Lifetime::SubgraphInput));
        let none = m.add_i32(0);
        let binary = |m: &mut Model, op, a, b, lifetime| {
            let out = m.add_operand(tensor(lifetime));
            let (a, b) = if swap { (b, a) } else { (a, b) };
            m.add_operation(op, vec![a, b, none], vec![out], "");
            out
        };
        let t = Lifetime::TemporaryVariable;
        let d = if reciprocal_scale {
            let c = m.add_f32_tensor(vec![1], &[std::f32::consts::FRAC_1_SQRT_2]);
            binary(&mut m, OperationType::Mul, x, c, t)
        } else {
            let c = m.add_f32_tensor(vec![], &[std::f32::consts::SQRT_2]);
            let out = m.add_operand(tensor(t));
            m.add_operation(OperationType::Div, vec![x, c, none], vec![out], "");
            out
        };
        let e = m.add_operand(tensor(t));
        m.add_operation(OperationType::Erf, vec![d], vec![e], "");
        let one = m.add_f32_tensor(vec![1], &[1.0]);
        let a = binary(&mut m, OperationType::Add, e, one, t);
        let half = m.add_f32_tensor(vec![1], &[0.5]);
        let out = Lifetime::SubgraphOutput;
        let y = if halve_first {
            let h = binary(&mut m, OperationType::Mul, x, half, t);
            binary(&mut m, OperationType::Mul, h, a, out)
        } else {
            let p = binary(&mut m, OperationType::Mul, x, a, t);
            binary(&mut m, OperationType::Mul, p, half, out)
        };
        m.main.inputs = vec![x];
        m.main.outputs = vec![y];
        m
    }

    #[test]
    fn both_exported_forms_become_one_gelu() {
        for halve_first in [false, true] {
            for reciprocal_scale in [false, true] {
                for swap in [false, true] {
                    let mut m = gelu_model(halve_first, reciprocal_scale, swap);
                    let changes = run(&mut m).unwrap();
                    assert_eq!(changes.get("GELU fused (erf form)"), Some(&1));
                    let ops = &m.main.operations;
                    assert_eq!(ops.len(), 1, "{halve_first} {reciprocal_scale} {swap}");
                    assert_eq!(ops[0].op_type, OperationType::Gelu);
                    assert_eq!(ops[0].inputs[0], m.main.inputs[0]);
                    assert_eq!(graph::const_bool(&m, ops[0].inputs[1]), Some(false));
                    assert_eq!(ops[0].outputs, m.main.outputs);
                }
            }
        }
    }

    /// x -> GPT-2's tanh form of GELU -> y (constants first where `swap`).
    fn gelu_tanh_model(swap: bool) -> Model {
        let mut m = Model::default();
        let shape = vec![4, 6];
        let tensor = |lifetime| {
            let mut o = Operand::new(OperandType::TensorFloat32, shape.clone());
            o.lifetime = lifetime;
            o
        };
        let x = m.add_operand(tensor(Lifetime::SubgraphInput));
        let none = m.add_i32(0);
        let t = Lifetime::TemporaryVariable;
        let binary = |m: &mut Model, op, a, b, lifetime| {
            let out = m.add_operand(tensor(lifetime));
            let (a, b) = if swap { (b, a) } else { (a, b) };
            m.add_operation(op, vec![a, b, none], vec![out], "");
            out
        };
        let constant = |m: &mut Model, v: f32| m.add_f32_tensor(vec![1], &[v]);
        let half = constant(&mut m, 0.5);
        let h = binary(&mut m, OperationType::Mul, x, half, t);
        let three = constant(&mut m, 3.0);
        let p = m.add_operand(tensor(t));
        m.add_operation(OperationType::Pow, vec![x, three], vec![p], "");
        let k = constant(&mut m, 0.044_715);
        let q = binary(&mut m, OperationType::Mul, p, k, t);
        let s = binary(&mut m, OperationType::Add, x, q, t);
        let c = constant(&mut m, 0.797_884_6);
        let u = binary(&mut m, OperationType::Mul, s, c, t);
        let e = m.add_operand(tensor(t));
        m.add_operation(OperationType::Tanh, vec![u], vec![e], "");
        let one = constant(&mut m, 1.0);
        let a = binary(&mut m, OperationType::Add, e, one, t);
        let y = binary(&mut m, OperationType::Mul, h, a, Lifetime::SubgraphOutput);
        m.main.inputs = vec![x];
        m.main.outputs = vec![y];
        m
    }

    #[test]
    fn the_tanh_form_becomes_the_approximate_gelu() {
        for swap in [false, true] {
            let mut m = gelu_tanh_model(swap);
            assert_eq!(m.main.operations.len(), 8);
            let changes = run(&mut m).unwrap();
            assert_eq!(changes.get("GELU fused (tanh form)"), Some(&1), "{swap}");
            let ops = &m.main.operations;
            assert_eq!(ops.len(), 1);
            assert_eq!(ops[0].op_type, OperationType::Gelu);
            assert_eq!(ops[0].inputs[0], m.main.inputs[0]);
            assert_eq!(graph::const_bool(&m, ops[0].inputs[1]), Some(true));
            assert_eq!(ops[0].outputs, m.main.outputs);
        }
        // x^2 instead of x^3: not GELU.
        let mut m = gelu_tanh_model(false);
        let pow = m
            .main
            .operations
            .iter()
            .position(|o| o.op_type == OperationType::Pow)
            .unwrap();
        m.main.operations[pow].inputs[1] = m.add_f32_tensor(vec![1], &[2.0]);
        assert!(run(&mut m).unwrap().is_empty());
        assert_eq!(m.main.operations.len(), 8);
    }

    #[test]
    fn other_constants_or_a_shared_intermediate_are_left_alone() {
        // 0.6 instead of 0.5 in the last multiply.
        let mut m = gelu_model(false, false, false);
        let last = m.main.operations.len() - 1;
        m.main.operations[last].inputs[1] = m.add_f32_tensor(vec![1], &[0.6]);
        assert!(run(&mut m).unwrap().is_empty());
        assert_eq!(m.main.operations.len(), 5);
        // The ERF's output is a model output too.
        let mut m = gelu_model(true, false, false);
        let e = m.main.operations[1].outputs[0];
        m.main.outputs.push(e);
        assert!(run(&mut m).unwrap().is_empty());
        assert_eq!(m.main.operations.len(), 5);
        // A fused activation on the ADD.
        let mut m = gelu_model(false, true, false);
        m.main.operations[2].inputs[2] = m.add_i32(1);
        assert!(run(&mut m).unwrap().is_empty());
    }
}
