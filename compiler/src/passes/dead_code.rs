//! Dead-operation and dead-operand elimination, and compaction.
//!
//! Removes operations none of whose outputs is read or is a model output, then drops
//! every operand no operation or model list refers to, renumbering the rest and
//! re-packing constant storage so that unreferenced weights leave the model. Only main
//! is rewritten; the constants of referenced subgraphs (IF/WHILE bodies) are re-packed
//! with main's, since they share the model's storage.

use std::collections::BTreeMap;

use nnc_formats::nn::{DataLocation, Lifetime, Model, Operand, OperandIndex, Pool};

use super::graph::Uses;

pub fn run(model: &mut Model) -> Result<BTreeMap<String, usize>, String> {
    let mut changes = BTreeMap::new();
    // Dead operations, last to first: an operation dies when nothing reads its outputs,
    // and its own reads stop counting at once, so a whole dead chain goes in one sweep.
    let uses = Uses::of(model);
    let mut reads: Vec<usize> = uses.readers.iter().map(Vec::len).collect();
    let count = model.main.operations.len();
    let mut keep = vec![true; count];
    for (i, op) in model.main.operations.iter().enumerate().rev() {
        let live = op
            .outputs
            .iter()
            .any(|&o| uses.is_output[o as usize] || reads[o as usize] > 0);
        if !live {
            keep[i] = false;
            for &input in &op.inputs {
                reads[input as usize] -= 1;
            }
        }
    }
    let mut idx = 0;
    model.main.operations.retain(|_| {
        let k = keep[idx];
        idx += 1;
        k
    });
    let removed_ops = count - model.main.operations.len();
    if removed_ops > 0 {
        changes.insert("dead operations removed".into(), removed_ops);
    }
    let before_operands = model.main.operands.len();
    let before_bytes =
        model.constant_byte_count() + model.pools.iter().map(|p| p.size()).sum::<u64>();
    compact(model);
    let removed_operands = before_operands - model.main.operands.len();
    if removed_operands > 0 {
        changes.insert("dead operands removed".into(), removed_operands);
    }
    let after_bytes =
        model.constant_byte_count() + model.pools.iter().map(|p| p.size()).sum::<u64>();
    if after_bytes < before_bytes {
        changes.insert(
            "constant bytes released".into(),
            (before_bytes - after_bytes) as usize,
        );
    }
    Ok(changes)
}

/// Keeps only referenced operands (in their original order), re-packs the inline
/// constants and releases the pooled bytes of dead constants. A pool read whole stays
/// where it is (the frontends give each constant its own): copying every weight again
/// would cost more than all the passes. Returns each old operand's new index
/// (`u32::MAX` for a dropped one); kept operands keep their relative order.
pub fn compact(model: &mut Model) -> Vec<OperandIndex> {
    let n = model.main.operands.len();
    let mut used = vec![false; n];
    for op in &model.main.operations {
        for &i in op.inputs.iter().chain(&op.outputs) {
            used[i as usize] = true;
        }
    }
    for &i in model.main.inputs.iter().chain(&model.main.outputs) {
        used[i as usize] = true;
    }
    let mut remap = vec![u32::MAX; n];
    let old_operands = std::mem::take(&mut model.main.operands);
    let old_values = std::mem::take(&mut model.operand_values);
    // Opaque pools (a compiled model without its key) cannot be re-packed: keep them.
    let opaque = model.pools.iter().any(|p| matches!(p, Pool::Opaque { .. }));
    if opaque {
        model.operand_values = old_values.clone();
    }
    let repack = |model: &mut Model, operand: Operand| -> Operand {
        let kept = operand.clone();
        let bytes = nnc_formats::nn::model::constant_bytes(&operand, &old_values, &[])
            .map(<[u8]>::to_vec)
            .unwrap_or_default();
        let fresh = Operand {
            lifetime: Lifetime::TemporaryVariable,
            location: DataLocation::default(),
            ..operand
        };
        // Stored through main, then taken back out for the caller to place.
        model.add_constant(fresh, &bytes);
        model.main.operands.pop().unwrap_or(kept)
    };
    for (i, operand) in old_operands.into_iter().enumerate() {
        if !used[i] {
            continue;
        }
        let operand = if operand.lifetime == Lifetime::ConstantCopy && !opaque {
            repack(model, operand)
        } else {
            operand
        };
        remap[i] = model.add_operand(operand);
    }
    // Referenced subgraphs (IF/WHILE bodies) share the model's inline storage: their
    // inline constants move into the re-packed storage too (the passes rewrite main
    // only, so every operand of a referenced subgraph is kept as it is).
    if !opaque {
        for t in 1..=model.referenced.len() {
            let count = model.referenced[t - 1].operands.len();
            for i in 0..count {
                let operand = model.referenced[t - 1].operands[i].clone();
                if operand.lifetime == Lifetime::ConstantCopy {
                    model.referenced[t - 1].operands[i] = repack(model, operand);
                }
            }
        }
    }
    model.release_unreferenced_constants();
    let map = |i: &mut OperandIndex| *i = remap[*i as usize];
    for op in &mut model.main.operations {
        op.inputs.iter_mut().for_each(map);
        op.outputs.iter_mut().for_each(map);
    }
    model.main.inputs.iter_mut().for_each(map);
    model.main.outputs.iter_mut().for_each(map);
    remap
}
