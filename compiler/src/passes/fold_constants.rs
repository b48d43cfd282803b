//! Constant folding: an operation whose inputs are all constants is evaluated at compile
//! time and replaced by constants holding its results.
//!
//! Evaluation runs the runtime's own CPU kernels (`nnc_runtime::evaluate_operation`), so
//! a folded value is bit-identical to what executing the operation would produce.

use std::collections::BTreeMap;

use nnc_formats::nn::{Lifetime, Model, Operand};

use super::graph::GraphIndex;

/// Results larger than this stay computed at run time (folding would bloat the file).
const MAX_FOLDED_BYTES: u64 = 64 << 20;
/// Nor does one run fold more than this in all: a small model must not grow into a large
/// file (the runtime computes what is not folded).
const MAX_FOLDED_TOTAL: u64 = 256 << 20;

pub fn run(model: &mut Model) -> Result<BTreeMap<String, usize>, String> {
    let mut changes = BTreeMap::new();
    let mut index = GraphIndex::new(model);
    let mut total = 0u64;
    for i in 0..model.main.operations.len() {
        if index.is_removed(i) {
            continue;
        }
        if fold(model, &mut index, i, &mut total)? {
            let name = "operations evaluated at compile time".to_string();
            *changes.entry(name).or_insert(0) += 1;
        }
    }
    index.compact(model);
    Ok(changes)
}

fn fold(
    model: &mut Model,
    index: &mut GraphIndex,
    i: usize,
    folded_so_far: &mut u64,
) -> Result<bool, String> {
    let op = model.main.operations[i].clone();
    let all_constant = op.inputs.iter().all(|&x| {
        matches!(
            model.main.operands[x as usize].lifetime,
            Lifetime::ConstantCopy | Lifetime::ConstantReference | Lifetime::NoValue
        )
    });
    if !all_constant {
        return Ok(false);
    }
    let mut total = 0u64;
    for &o in &op.outputs {
        let operand = &model.main.operands[o as usize];
        // A model output must stay written by an operation.
        if index.is_output(o) || !operand.is_fully_specified() {
            return Ok(false);
        }
        total = total.saturating_add(operand.byte_size().unwrap_or(u64::MAX));
    }
    if total > MAX_FOLDED_BYTES || folded_so_far.saturating_add(total) > MAX_FOLDED_TOTAL {
        return Ok(false);
    }
    let results = {
        let constant = |k: u32| model.constant_bytes(k);
        match nnc_runtime::evaluate_operation(&op, &model.main.operands, constant) {
            Ok(r) => r,
            // Operations the CPU kernels cannot run stay in the graph; execution will
            // report them. Folding is an optimization, never a requirement.
            Err(_) => return Ok(false),
        }
    };
    *folded_so_far += total;
    index.remove(model, i);
    for (&o, bytes) in op.outputs.iter().zip(results) {
        let template = model.main.operands[o as usize].clone();
        let folded = model.add_constant(
            Operand {
                lifetime: Lifetime::TemporaryVariable,
                location: Default::default(),
                ..template
            },
            &bytes,
        );
        index.replace_reads(model, o, folded);
    }
    Ok(true)
}
