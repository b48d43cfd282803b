//! Removes operations that compute their input unchanged: the explicit identities the
//! frontends emit for ONNX Identity and Dropout, and no-op forms of RESHAPE, TRANSPOSE,
//! SQUEEZE, EXPAND_DIMS, CONCATENATION, PAD, SLICE, STRIDED_SLICE, TILE and CAST, and
//! arithmetic with a neutral constant (x + 0, x * 1, ...). Chains of reshapes collapse
//! into one.

use std::collections::BTreeMap;

use nnc_formats::nn::ops::{NoOp, StridedSlice, schema};
use nnc_formats::nn::{FusedActivation, Model, OperandType, OperationType};

use super::graph::{self, GraphIndex};

/// Why operation `i` is an identity, if it is one, and which input it passes through.
fn identity_reason(model: &Model, i: usize) -> Option<(&'static str, usize)> {
    let op = &model.main.operations[i];
    let first = op.inputs.first().copied()?;
    let out = *op.outputs.first()?;
    let din = &model.main.operands[first as usize];
    let dout = &model.main.operands[out as usize];
    // Equal quantization too: a CAST between 8-bit operands of different scales is a
    // reinterpretation, not an identity.
    let like_output = |operand: u32| {
        model.main.operands.get(operand as usize).is_some_and(|d| {
            d.is_fully_specified()
                && d.dimensions == dout.dimensions
                && d.operand_type == dout.operand_type
                && d.scale == dout.scale
                && d.zero_point == dout.zero_point
        })
    };
    let same_dims = like_output(first);
    // Float or int32 constants only: a quantized constant's bytes are not its values.
    let all = |operand: u32, pred: &dyn Fn(f32) -> bool| -> bool {
        let int32 = model.main.operands.get(operand as usize).is_some_and(|o| {
            matches!(
                o.operand_type,
                OperandType::TensorInt32 | OperandType::Int32
            )
        });
        match graph::const_f32s(model, operand) {
            Some(v) => !v.is_empty() && v.iter().all(|&x| pred(x)),
            None if int32 => graph::const_i32s(model, operand)
                .is_some_and(|v| !v.is_empty() && v.iter().all(|&x| pred(x as f32))),
            None => false,
        }
    };
    let no_activation = || {
        graph::activation_input(op)
            .and_then(|k| graph::const_i32(model, op.inputs[k]))
            .is_some_and(|a| a == FusedActivation::None as i32)
    };
    // TRANSPOSE's permutation (input 1) and STRIDED_SLICE's strides.
    let identity_perm = || {
        graph::const_i32s(model, op.inputs[1])
            .is_some_and(|p| p.iter().enumerate().all(|(k, &v)| k as i32 == v))
    };
    let forward_strides = || {
        let slice = StridedSlice::decode(&graph::input_views(model, &op.inputs));
        slice.ok().and_then(|s| s.strides).is_some_and(|strides| {
            strides.len() == din.dimensions.len()
                && strides
                    .iter()
                    .zip(&din.dimensions)
                    .all(|(&s, &d)| s > 0 || d == 1)
        })
    };
    // x + 0 and x * 1, and for the commutative ADD and MUL also 0 + x and 1 * x: which
    // input passes through.
    let neutral = |value: f32, commutes: bool| -> Option<usize> {
        if !no_activation() {
            return None;
        }
        if same_dims && all(op.inputs[1], &|x| x == value) {
            return Some(0);
        }
        let second = op.inputs[1];
        (commutes && like_output(second) && all(first, &|x| x == value)).then_some(1)
    };
    // Which no-op form the operation has is the schema table's; the conditions are here.
    match schema(op.op_type).no_op_form()? {
        NoOp::SameShapeReshape => same_dims.then_some("reshape to the same shape"),
        NoOp::IdentityTranspose => (same_dims && identity_perm()).then_some("identity transpose"),
        NoOp::SingleConcatenation => {
            (op.inputs.len() == 2 && same_dims).then_some("concatenation of one tensor")
        }
        NoOp::ZeroPad => same_dims.then_some("zero padding"),
        NoOp::WholeSliceOrTile => same_dims.then_some("whole-tensor slice or tile"),
        // Same dimensions are not enough: a negative stride reverses the axis.
        NoOp::ForwardWholeSlice => {
            (same_dims && forward_strides()).then_some("whole-tensor slice or tile")
        }
        NoOp::SameTypeCast => same_dims.then_some("cast to the same type"),
        NoOp::AddsZero => {
            let passes = neutral(0.0, op.op_type == OperationType::Add)?;
            return Some(("adding zero", passes));
        }
        NoOp::MultipliesByOne => {
            let passes = neutral(1.0, op.op_type == OperationType::Mul)?;
            return Some(("multiplying by one", passes));
        }
    }
    .map(|reason| (reason, 0))
}

pub fn run(model: &mut Model) -> Result<BTreeMap<String, usize>, String> {
    let mut changes: BTreeMap<String, usize> = BTreeMap::new();
    // One sweep rewires whole chains (readers are rewired as each identity goes); a
    // second finds nothing more unless a collapse exposed a new identity.
    loop {
        let mut changed = false;
        let mut index = GraphIndex::new(model);
        for i in 0..model.main.operations.len() {
            if index.is_removed(i) {
                continue;
            }
            if let Some((reason, passes)) = identity_reason(model, i)
                && graph::bypass_indexed(model, &mut index, i, passes)
            {
                *changes.entry(format!("removed: {reason}")).or_insert(0) += 1;
                changed = true;
                continue;
            }
            if collapse_reshape_chain(model, &mut index, i) {
                *changes
                    .entry("reshape chains collapsed".into())
                    .or_insert(0) += 1;
                changed = true;
            }
        }
        index.compact(model);
        if !changed {
            break;
        }
    }
    Ok(changes)
}

/// `RESHAPE(RESHAPE(x))` reads `x` directly (the inner one dies if nothing else reads it).
fn collapse_reshape_chain(model: &mut Model, index: &mut GraphIndex, i: usize) -> bool {
    let op = &model.main.operations[i];
    if !matches!(
        op.op_type,
        OperationType::Reshape | OperationType::Squeeze | OperationType::ExpandDims
    ) {
        return false;
    }
    let out = op.outputs[0];
    if !model.main.operands[out as usize].is_fully_specified() {
        return false;
    }
    let input = op.inputs[0];
    let Some(p) = index.producer(input) else {
        return false;
    };
    let inner = &model.main.operations[p];
    if !matches!(
        inner.op_type,
        OperationType::Reshape | OperationType::Squeeze | OperationType::ExpandDims
    ) {
        return false;
    }
    let source = inner.inputs[0];
    let dims = model.main.operands[out as usize].dimensions.clone();
    let shape = model.add_i32_vector(&dims.iter().map(|&d| d as i32).collect::<Vec<_>>());
    model.main.operations[i].op_type = OperationType::Reshape;
    index.set_inputs(model, i, vec![source, shape]);
    true
}

#[cfg(test)]
mod tests {
    use nnc_formats::nn::{Lifetime, Model, Operand, OperandType, OperationType};

    /// `STRIDED_SLICE(x)` over all of `x` (1x8) with the given stride on the last axis.
    fn whole_slice(stride: i32) -> Model {
        let mut m = Model::default();
        let mut x = Operand::new(OperandType::TensorFloat32, vec![1, 8]);
        x.lifetime = Lifetime::SubgraphInput;
        let x = m.add_operand(x);
        let (begin, end) = if stride > 0 { (0, 8) } else { (7, -9) };
        let b = m.add_i32_vector(&[0, begin]);
        let e = m.add_i32_vector(&[1, end]);
        let s = m.add_i32_vector(&[1, stride]);
        let masks: Vec<u32> = (0..3).map(|_| m.add_i32(0)).collect();
        let mut y = Operand::new(OperandType::TensorFloat32, vec![1, 8]);
        y.lifetime = Lifetime::SubgraphOutput;
        let y = m.add_operand(y);
        let mut inputs = vec![x, b, e, s];
        inputs.extend(masks);
        m.add_operation(OperationType::StridedSlice, inputs, vec![y], "slice");
        m.main.inputs = vec![x];
        m.main.outputs = vec![y];
        m
    }

    #[test]
    fn a_forward_whole_slice_is_removed_a_reversing_one_is_not() {
        assert_eq!(
            super::identity_reason(&whole_slice(1), 0),
            Some(("whole-tensor slice or tile", 0))
        );
        assert_eq!(super::identity_reason(&whole_slice(-1), 0), None);
    }

    /// `op(a, b)` with the constant `value` first or second.
    fn with_constant(op: OperationType, value: f32, constant_first: bool) -> Model {
        let mut m = Model::default();
        let mut xo = Operand::new(OperandType::TensorFloat32, vec![2, 3]);
        xo.lifetime = Lifetime::SubgraphInput;
        let x = m.add_operand(xo);
        let c = m.add_f32_tensor(vec![1], &[value]);
        let mut yo = Operand::new(OperandType::TensorFloat32, vec![2, 3]);
        yo.lifetime = Lifetime::SubgraphOutput;
        let y = m.add_operand(yo);
        let none = m.add_i32(0);
        let (a, b) = if constant_first { (c, x) } else { (x, c) };
        m.add_operation(op, vec![a, b, none], vec![y], "neutral");
        m.main.inputs = vec![x];
        m.main.outputs = vec![y];
        m
    }

    #[test]
    fn a_neutral_constant_on_either_side_of_add_and_mul_is_removed() {
        use super::identity_reason;
        let add = OperationType::Add;
        let mul = OperationType::Mul;
        assert_eq!(
            identity_reason(&with_constant(add, 0.0, false), 0),
            Some(("adding zero", 0))
        );
        assert_eq!(
            identity_reason(&with_constant(add, 0.0, true), 0),
            Some(("adding zero", 1))
        );
        assert_eq!(
            identity_reason(&with_constant(mul, 1.0, true), 0),
            Some(("multiplying by one", 1))
        );
        // 0 - x and 1 / x are not identities; x * 2 is not either.
        assert_eq!(
            identity_reason(&with_constant(OperationType::Sub, 0.0, true), 0),
            None
        );
        assert_eq!(
            identity_reason(&with_constant(OperationType::Div, 1.0, true), 0),
            None
        );
        assert_eq!(identity_reason(&with_constant(mul, 2.0, true), 0), None);
        // The whole pass: x = ABS(input), y = 1 * x leaves ABS writing y.
        let mut m = Model::default();
        let mut io = Operand::new(OperandType::TensorFloat32, vec![2, 3]);
        io.lifetime = Lifetime::SubgraphInput;
        let input = m.add_operand(io);
        let x = m.add_operand(Operand::new(OperandType::TensorFloat32, vec![2, 3]));
        m.add_operation(OperationType::Abs, vec![input], vec![x], "abs");
        let one = m.add_f32_tensor(vec![1], &[1.0]);
        let mut yo = Operand::new(OperandType::TensorFloat32, vec![2, 3]);
        yo.lifetime = Lifetime::SubgraphOutput;
        let y = m.add_operand(yo);
        let none = m.add_i32(0);
        m.add_operation(mul, vec![one, x, none], vec![y], "scale");
        m.main.inputs = vec![input];
        m.main.outputs = vec![y];
        let changes = super::run(&mut m).unwrap();
        assert_eq!(changes.get("removed: multiplying by one"), Some(&1));
        assert_eq!(m.main.operations.len(), 1);
        assert_eq!(m.main.operations[0].op_type, OperationType::Abs);
        assert_eq!(m.main.operations[0].outputs, vec![y]);
    }
}
