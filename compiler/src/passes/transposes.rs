//! Layout: sink TRANSPOSE operations toward the outputs and cancel inverse pairs.
//!
//! The ONNX frontend wraps every layout-sensitive operation in NCHW->NHWC and
//! NHWC->NCHW transposes. This pass moves each transpose past the operations after it
//! (elementwise operations, reductions, concatenations, reshapes that only move unit
//! dimensions) until it meets its inverse, where both vanish. A CNN keeps only the
//! transpose at its input.
//!
//! A transpose `y = T(x, p)` means `y.dims[k] = x.dims[p[k]]`.

use std::collections::{BTreeMap, VecDeque};

use nnc_formats::nn::ops::{Axes, Reduce, schema};
use nnc_formats::nn::{Lifetime, Model, Operand, OperandIndex, OperationType};

use super::graph::{self, GraphIndex};

fn perm_of(model: &Model, op_index: usize) -> Option<Vec<usize>> {
    let op = &model.main.operations[op_index];
    let rank = model.main.operands[op.inputs[0] as usize].dimensions.len();
    match op.inputs.get(1) {
        Some(&p) if model.main.operands[p as usize].lifetime != Lifetime::NoValue => {
            let v = graph::const_i32s(model, p)?;
            Some(v.into_iter().map(|x| x as usize).collect())
        }
        _ => Some((0..rank).rev().collect()),
    }
}

fn is_identity(p: &[usize]) -> bool {
    p.iter().enumerate().all(|(i, &v)| i == v)
}

fn inverse(p: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; p.len()];
    for (i, &v) in p.iter().enumerate() {
        inv[v] = i;
    }
    inv
}

/// True when permuting `dims` by `p` keeps every non-unit dimension in order: then the
/// transpose moves no data and equals a reshape.
fn moves_only_unit_dims(dims: &[u32], p: &[usize]) -> bool {
    let order: Vec<usize> = p.iter().copied().filter(|&i| dims[i] != 1).collect();
    order.windows(2).all(|w| w[0] < w[1]) && !dims.contains(&0)
}

/// A constant rank-extended to `rank` and permuted by `perm` (a new operand).
fn permuted_constant(
    model: &mut Model,
    c: OperandIndex,
    rank: usize,
    perm: &[usize],
) -> Option<OperandIndex> {
    let operand = model.main.operands[c as usize].clone();
    let bytes = model.constant_bytes(c)?.to_vec();
    if operand.dimensions.len() > rank {
        return None;
    }
    let mut dims = vec![1u32; rank - operand.dimensions.len()];
    dims.extend_from_slice(&operand.dimensions);
    let elem = graph::element_size(operand.operand_type);
    let data = graph::transpose_bytes(&bytes, &dims, perm, elem);
    let mut new = operand;
    new.dimensions = perm.iter().map(|&p| dims[p]).collect();
    new.name.clear();
    Some(model.add_constant(new, &data))
}

pub fn run(model: &mut Model) -> Result<BTreeMap<String, usize>, String> {
    let mut changes = BTreeMap::new();
    let mut index = GraphIndex::new(model);
    // A worklist of transposes: each rewrite queues the transposes it creates or changes,
    // so the pass costs time in proportion to the rewrites, not graph size times them.
    let mut work: VecDeque<usize> = (0..model.main.operations.len())
        .filter(|&t| model.main.operations[t].op_type == OperationType::Transpose)
        .collect();
    // Every rewrite moves a transpose toward the outputs or removes one; this bound only
    // turns a bug into an error instead of a hang.
    let mut budget = 64 * (model.main.operations.len() + 16);
    while let Some(t) = work.pop_front() {
        if index.is_removed(t) || model.main.operations[t].op_type != OperationType::Transpose {
            continue;
        }
        if budget == 0 {
            return Err("transpose optimization did not converge".into());
        }
        budget -= 1;
        let Some(p) = perm_of(model, t) else { continue };
        let (x, y) = (
            model.main.operations[t].inputs[0],
            model.main.operations[t].outputs[0],
        );
        if is_identity(&p) && graph::bypass_indexed(model, &mut index, t, 0) {
            *changes
                .entry("identity transposes removed".into())
                .or_insert(0) += 1;
            continue;
        }
        // T(T(w, p0), p) = T(w, p0 o p)
        if let Some(inner) = index.producer(x)
            && model.main.operations[inner].op_type == OperationType::Transpose
            && let Some(p0) = perm_of(model, inner)
            && p0.len() == p.len()
        {
            let w = model.main.operations[inner].inputs[0];
            let composed: Vec<usize> = p.iter().map(|&i| p0[i]).collect();
            let perm =
                model.add_i32_vector(&composed.iter().map(|&v| v as i32).collect::<Vec<_>>());
            index.set_inputs(model, t, vec![w, perm]);
            // Drop the inner transpose now if nothing else reads it, so that it does not
            // count as a reader in the rewrites that follow.
            if index.count(x) == 0 && !index.is_output(x) {
                index.remove(model, inner);
            }
            *changes
                .entry("transpose pairs composed".into())
                .or_insert(0) += 1;
            work.push_back(t);
            continue;
        }
        if index.is_output(y) {
            continue;
        }
        // Sink past each reader that allows it.
        for c in index.readers(model, y) {
            match sink(model, &mut index, t, &p, c)? {
                Sunk::No => {}
                Sunk::InPlace => {
                    *changes.entry("transposes sunk".into()).or_insert(0) += 1;
                }
                Sunk::Before(new_transpose) => {
                    *changes.entry("transposes sunk".into()).or_insert(0) += 1;
                    work.push_back(new_transpose);
                    // A transpose reading the new one may now compose with it.
                    let out = model.main.operations[new_transpose].outputs[0];
                    for r in index.readers(model, out) {
                        if model.main.operations[r].op_type == OperationType::Transpose {
                            work.push_back(r);
                        }
                    }
                }
            }
        }
        if index.count(y) == 0 && !index.is_output(y) {
            index.remove(model, t);
        }
    }
    index.compact(model);
    Ok(changes)
}

/// What sinking a transpose into one reader did.
enum Sunk {
    /// The reader does not allow it.
    No,
    /// The reader now reads the transpose's input and needs no transpose after it.
    InPlace,
    /// The reader now reads the transpose's input and is followed by this new transpose.
    Before(usize),
}

/// How a transpose sinks past an operation that reads it.
enum Past {
    /// Unary elementwise: the transpose moves to the output unchanged.
    Unary,
    /// Binary elementwise: the other operand must be a constant (permuted here) or carry
    /// the same transpose.
    Binary,
    /// Reductions: the axes are mapped through the permutation.
    Reduction,
    /// An axis parameter (SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION) mapped through it.
    AxisParameter,
    /// The concatenation axis is mapped, the other inputs permuted or un-transposed.
    Concatenation,
    /// A transpose that moves only unit dimensions is a reshape: it merges into this one.
    Reshape,
    /// The transpose stops here.
    Stops,
}

/// How a transpose sinks past `op`: what the schema table says of its axes.
fn past(op: OperationType) -> Past {
    match schema(op).axes_kind() {
        Axes::Elementwise => Past::Unary,
        Axes::Broadcast => Past::Binary,
        Axes::Reduction => Past::Reduction,
        Axes::AlongAxis => Past::AxisParameter,
        Axes::Concatenation => Past::Concatenation,
        Axes::Reshape => Past::Reshape,
        Axes::Positional => Past::Stops,
    }
}

/// Rewrites reader `c` of transpose `t` to read the transpose's input, re-applying the
/// transpose to `c`'s output.
fn sink(
    model: &mut Model,
    index: &mut GraphIndex,
    t: usize,
    p: &[usize],
    c: usize,
) -> Result<Sunk, String> {
    use OperationType as O;
    let x = model.main.operations[t].inputs[0];
    let y = model.main.operations[t].outputs[0];
    let rank = p.len();
    let reader = model.main.operations[c].clone();
    if reader.outputs.len() != 1 {
        return Ok(Sunk::No);
    }
    let out = reader.outputs[0];
    let out_operand = model.main.operands[out as usize].clone();
    let inv = inverse(p);
    let new_inputs: Vec<OperandIndex>;
    let mut out_perm = p.to_vec();
    match past(reader.op_type) {
        Past::Unary => {
            if reader.inputs[0] != y {
                return Ok(Sunk::No);
            }
            let mut inputs = reader.inputs.clone();
            inputs[0] = x;
            new_inputs = inputs;
        }
        Past::Binary => {
            let mut inputs = reader.inputs.clone();
            for slot in inputs.iter_mut().take(2) {
                let v = *slot;
                if v == y {
                    *slot = x;
                } else if graph::is_constant(model, v) {
                    let Some(pc) = permuted_constant(model, v, rank, &inv) else {
                        return Ok(Sunk::No);
                    };
                    *slot = pc;
                } else {
                    // Another transposed value with the same permutation.
                    match index.producer(v) {
                        Some(q)
                            if model.main.operations[q].op_type == O::Transpose
                                && perm_of(model, q).as_deref() == Some(p) =>
                        {
                            *slot = model.main.operations[q].inputs[0];
                        }
                        _ => return Ok(Sunk::No),
                    }
                }
            }
            new_inputs = inputs;
        }
        Past::Reduction => {
            if reader.inputs[0] != y {
                return Ok(Sunk::No);
            }
            let Ok(Reduce {
                axes: Some(axes),
                keep_dims: keep,
            }) = Reduce::decode(reader.op_type, &graph::input_views(model, &reader.inputs))
            else {
                return Ok(Sunk::No);
            };
            let mapped: Vec<usize> = axes
                .iter()
                .map(|&a| {
                    p[if a < 0 {
                        (a + rank as i32) as usize
                    } else {
                        a as usize
                    }]
                })
                .collect();
            if !keep {
                // Dropped axes leave the surviving dimensions' permutation, renumbered.
                let kept: Vec<usize> = (0..rank)
                    .filter(|&k| !mapped.contains(&p[k]))
                    .map(|k| p[k])
                    .collect();
                if kept.is_empty() {
                    out_perm = vec![0];
                } else {
                    let mut sorted = kept.clone();
                    sorted.sort_unstable();
                    out_perm = kept
                        .iter()
                        .map(|v| sorted.iter().position(|s| s == v).unwrap_or(0))
                        .collect();
                }
            }
            let axes_operand =
                model.add_i32_vector(&mapped.iter().map(|&a| a as i32).collect::<Vec<_>>());
            let params = Reduce {
                axes: axes_operand,
                keep_dims: keep,
            }
            .encode(reader.op_type, model);
            new_inputs = [vec![x], params].concat();
        }
        Past::AxisParameter => {
            if reader.inputs[0] != y {
                return Ok(Sunk::No);
            }
            let axis_index = if reader.op_type == O::L2Normalization {
                1
            } else {
                2
            };
            let axis = match reader.inputs.get(axis_index) {
                Some(&a) => match graph::const_i32(model, a) {
                    Some(v) => v,
                    None => return Ok(Sunk::No),
                },
                None => -1,
            };
            let a = if axis < 0 {
                (axis + rank as i32) as usize
            } else {
                axis as usize
            };
            let mut inputs = reader.inputs.clone();
            inputs[0] = x;
            let new_axis = model.add_i32(p[a] as i32);
            if inputs.len() > axis_index {
                inputs[axis_index] = new_axis;
            } else {
                inputs.push(new_axis);
            }
            new_inputs = inputs;
        }
        Past::Concatenation => {
            let n = reader.inputs.len() - 1;
            let Some(axis) = graph::const_i32(model, reader.inputs[n]) else {
                return Ok(Sunk::No);
            };
            let mut inputs = Vec::with_capacity(n + 1);
            for &v in &reader.inputs[..n] {
                if v == y {
                    inputs.push(x);
                } else if graph::is_constant(model, v) {
                    match permuted_constant(model, v, rank, &inv) {
                        Some(pc) => inputs.push(pc),
                        None => return Ok(Sunk::No),
                    }
                } else {
                    match index.producer(v) {
                        Some(q)
                            if model.main.operations[q].op_type == O::Transpose
                                && perm_of(model, q).as_deref() == Some(p) =>
                        {
                            inputs.push(model.main.operations[q].inputs[0]);
                        }
                        _ => return Ok(Sunk::No),
                    }
                }
            }
            let a = if axis < 0 {
                (axis + rank as i32) as usize
            } else {
                axis as usize
            };
            inputs.push(model.add_i32(p[a] as i32));
            new_inputs = inputs;
        }
        Past::Reshape => {
            // A transpose that moves only unit dimensions is itself a reshape.
            let x_dims = model.main.operands[x as usize].dimensions.clone();
            if reader.inputs[0] != y || !moves_only_unit_dims(&x_dims, p) {
                return Ok(Sunk::No);
            }
            index.set_input(model, c, 0, x);
            return Ok(Sunk::InPlace);
        }
        Past::Stops => return Ok(Sunk::No),
    }
    // Replace the reader by its rewritten form followed by the transpose.
    let template = Operand {
        dimensions: Vec::new(),
        name: String::new(),
        ..out_operand.clone()
    };
    let source = reader.source.clone();
    // The reader, rewritten in place, writes a new operand; a new transpose after it
    // writes the reader's original output.
    let new_out = graph::new_outputs(model, reader.op_type, &new_inputs, &[template])?[0];
    index.set_inputs(model, c, new_inputs);
    index.set_output(model, c, 0, new_out);
    let perm_operand =
        model.add_i32_vector(&out_perm.iter().map(|&v| v as i32).collect::<Vec<_>>());
    let new_transpose = index.push_after(
        model,
        c,
        nnc_formats::nn::Operation {
            op_type: O::Transpose,
            inputs: vec![new_out, perm_operand],
            outputs: vec![out],
            source,
        },
    );
    let _ = t;
    Ok(Sunk::Before(new_transpose))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nnc_formats::nn::{IoInfo, OperandType, validate};
    use nnc_formats::tensor::DataType;

    fn io(model: &mut Model, dims: Vec<u32>, lifetime: Lifetime) -> OperandIndex {
        let mut o = Operand::new(OperandType::TensorFloat32, dims.clone());
        o.lifetime = lifetime;
        let i = model.add_operand(o);
        let info = IoInfo {
            name: format!("v{i}"),
            dtype: DataType::F32,
            dims,
        };
        if lifetime == Lifetime::SubgraphInput {
            model.main.inputs.push(i);
            model.input_info.push(info);
        } else {
            model.main.outputs.push(i);
            model.output_info.push(info);
        }
        i
    }

    fn emit(model: &mut Model, op: OperationType, inputs: Vec<OperandIndex>) -> OperandIndex {
        let n = model.main.operations.len();
        graph::insert_operation(
            model,
            n,
            op,
            inputs,
            &[Operand::new(OperandType::TensorFloat32, vec![])],
            "t",
        )
        .unwrap()[0]
    }

    fn transpose(model: &mut Model, x: OperandIndex, p: &[i32]) -> OperandIndex {
        let perm = model.add_i32_vector(p);
        emit(model, OperationType::Transpose, vec![x, perm])
    }

    fn histogram(model: &Model, op: &str) -> usize {
        model.operation_histogram().get(op).copied().unwrap_or(0)
    }

    #[test]
    fn inverse_pairs_around_elementwise_ops_cancel() {
        // NHWC in -> T(to NCHW) -> RELU -> ADD(const per-channel [C,1,1]) -> T(to NHWC) -> out
        let mut m = Model::default();
        let x = io(&mut m, vec![1, 4, 5, 3], Lifetime::SubgraphInput);
        let a = transpose(&mut m, x, &[0, 3, 1, 2]);
        let r = emit(&mut m, OperationType::Relu, vec![a]);
        let c = m.add_f32_tensor(vec![3, 1, 1], &[1.0, 2.0, 3.0]);
        let act = m.add_i32(0);
        let s = emit(&mut m, OperationType::Add, vec![r, c, act]);
        let b = transpose(&mut m, s, &[0, 2, 3, 1]);
        let out = io(&mut m, vec![1, 4, 5, 3], Lifetime::SubgraphOutput);
        let last = m.main.operations.len() - 1;
        m.main.operations[last].outputs[0] = out;
        let _ = b;
        run(&mut m).unwrap();
        super::super::dead_code::run(&mut m).unwrap();
        assert_eq!(
            histogram(&m, "TRANSPOSE"),
            0,
            "{}",
            nnc_formats::nn::dump::to_text(&m)
        );
        validate(&m).unwrap();
        // The constant was permuted to broadcast along the last axis.
        let add = m
            .main
            .operations
            .iter()
            .find(|o| o.op_type == OperationType::Add)
            .unwrap();
        assert_eq!(
            m.main.operands[add.inputs[1] as usize].dimensions,
            vec![1, 1, 1, 3]
        );
    }

    #[test]
    fn reductions_remap_axes_and_unit_transposes_become_reshapes() {
        let mut m = Model::default();
        let x = io(&mut m, vec![1, 7, 7, 8], Lifetime::SubgraphInput);
        let a = transpose(&mut m, x, &[0, 3, 1, 2]);
        let axes = m.add_i32_vector(&[2, 3]);
        let keep = m.add_i32(1);
        let mean = emit(&mut m, OperationType::Mean, vec![a, axes, keep]);
        let shape = m.add_i32_vector(&[1, 8]);
        let _ = emit(&mut m, OperationType::Reshape, vec![mean, shape]);
        let out = io(&mut m, vec![1, 8], Lifetime::SubgraphOutput);
        let last = m.main.operations.len() - 1;
        m.main.operations[last].outputs[0] = out;
        run(&mut m).unwrap();
        super::super::dead_code::run(&mut m).unwrap();
        validate(&m).unwrap();
        assert_eq!(
            histogram(&m, "TRANSPOSE"),
            0,
            "{}",
            nnc_formats::nn::dump::to_text(&m)
        );
        let mean = m
            .main
            .operations
            .iter()
            .find(|o| o.op_type == OperationType::Mean)
            .unwrap();
        assert_eq!(graph::const_i32s(&m, mean.inputs[1]), Some(vec![1, 2]));
    }

    #[test]
    fn a_transpose_feeding_an_output_stays() {
        let mut m = Model::default();
        let x = io(&mut m, vec![1, 2, 3, 4], Lifetime::SubgraphInput);
        let _ = transpose(&mut m, x, &[0, 3, 1, 2]);
        let out = io(&mut m, vec![1, 4, 2, 3], Lifetime::SubgraphOutput);
        m.main.operations[0].outputs[0] = out;
        run(&mut m).unwrap();
        assert_eq!(histogram(&m, "TRANSPOSE"), 1);
        validate(&m).unwrap();
    }
}
