//! Constant folding: an operation whose inputs are all constants is evaluated at compile
//! time and replaced by constants holding its results.
//!
//! Evaluation runs the runtime's own CPU kernels (`nnc_runtime::evaluate_operation`), so
//! a folded value is bit-identical to what executing the operation would produce.

use std::collections::BTreeMap;

use nnc_formats::nn::{Lifetime, Model, Operand};

use super::graph::{self, Uses};

/// Results larger than this stay computed at run time (folding would bloat the file).
const MAX_FOLDED_BYTES: u64 = 64 << 20;

pub fn run(model: &mut Model) -> Result<BTreeMap<String, usize>, String> {
    let mut changes = BTreeMap::new();
    let mut i = 0;
    while i < model.main.operations.len() {
        if fold(model, i)? {
            let name = "operations evaluated at compile time".to_string();
            *changes.entry(name).or_insert(0) += 1;
            continue;
        }
        i += 1;
    }
    Ok(changes)
}

fn fold(model: &mut Model, i: usize) -> Result<bool, String> {
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
    let uses = Uses::of(model);
    let mut total = 0u64;
    for &o in &op.outputs {
        let operand = &model.main.operands[o as usize];
        // A model output must stay written by an operation.
        if uses.is_output[o as usize] || !operand.is_fully_specified() {
            return Ok(false);
        }
        total += operand.byte_size().unwrap_or(u64::MAX);
    }
    if total > MAX_FOLDED_BYTES {
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
        graph::replace_reads(model, o, folded, i + 1);
    }
    model.main.operations.remove(i);
    Ok(true)
}
