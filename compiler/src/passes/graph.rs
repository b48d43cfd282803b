//! Graph-editing helpers shared by the passes.
//!
//! Passes edit `model.main` in place and keep two invariants: operations stay in
//! topological order, and every operand has at most one writer. Removed operations are
//! deleted immediately; operands they leave unused are collected by the dead-code pass.

use nnc_formats::nn::ops::{InputView, infer};
use nnc_formats::nn::{
    Lifetime, Model, Operand, OperandIndex, OperandType, Operation, OperationType,
};

/// Readers of each operand (operation indices, possibly repeated) and whether it is a
/// model output.
pub struct Uses {
    pub readers: Vec<Vec<usize>>,
    pub is_output: Vec<bool>,
}

impl Uses {
    pub fn of(model: &Model) -> Uses {
        let mut readers = vec![Vec::new(); model.main.operands.len()];
        for (i, op) in model.main.operations.iter().enumerate() {
            for &input in &op.inputs {
                if let Some(r) = readers.get_mut(input as usize) {
                    r.push(i);
                }
            }
        }
        let mut is_output = vec![false; model.main.operands.len()];
        for &o in &model.main.outputs {
            if let Some(flag) = is_output.get_mut(o as usize) {
                *flag = true;
            }
        }
        Uses { readers, is_output }
    }

    /// Number of reads of an operand (an operation reading it twice counts twice).
    pub fn count(&self, operand: OperandIndex) -> usize {
        self.readers[operand as usize].len()
    }

    /// True when the operand is read by exactly one operation, once, and is not an output.
    pub fn single_reader(&self, operand: OperandIndex) -> Option<usize> {
        match self.readers[operand as usize].as_slice() {
            [only] if !self.is_output[operand as usize] => Some(*only),
            _ => None,
        }
    }
}

/// Readers and writers of every operand, kept current while a pass edits the graph, so
/// that a pass over n operations costs O(n) instead of recomputing [`Uses`] after each
/// change (which made long chains quadratic). Operations are removed lazily: they are
/// marked, keep their index until [`GraphIndex::compact`], and no longer count as
/// readers or writers. Operands may be added at any time.
pub struct GraphIndex {
    /// Per operand, operations that read it; may hold stale entries (removed operations,
    /// or ones rewired since), which the accessors filter out.
    readers: Vec<Vec<usize>>,
    /// Per operand, how many live reads it has (an operation reading it twice counts
    /// twice).
    read_count: Vec<usize>,
    producer: Vec<Option<usize>>,
    is_output: Vec<bool>,
    removed: Vec<bool>,
    /// Per operation, where it belongs in the final order: (position of the original
    /// operation it was placed after, sequence). Only operations added by
    /// [`GraphIndex::push_after`] make compaction re-sort the graph.
    order: Vec<(usize, usize)>,
    pushed: usize,
}

impl GraphIndex {
    pub fn new(model: &Model) -> GraphIndex {
        let n = model.main.operands.len();
        let mut index = GraphIndex {
            readers: vec![Vec::new(); n],
            read_count: vec![0; n],
            producer: vec![None; n],
            is_output: vec![false; n],
            removed: vec![false; model.main.operations.len()],
            order: (0..model.main.operations.len()).map(|i| (i, 0)).collect(),
            pushed: 0,
        };
        for (i, op) in model.main.operations.iter().enumerate() {
            for &input in &op.inputs {
                index.add_read(input, i);
            }
            for &output in &op.outputs {
                if let Some(slot) = index.producer.get_mut(output as usize) {
                    *slot = Some(i);
                }
            }
        }
        for &o in &model.main.outputs {
            if let Some(flag) = index.is_output.get_mut(o as usize) {
                *flag = true;
            }
        }
        index
    }

    /// Makes room for operands added since the index was built.
    fn grow(&mut self, operand: OperandIndex) {
        let need = operand as usize + 1;
        if self.readers.len() < need {
            self.readers.resize(need, Vec::new());
            self.read_count.resize(need, 0);
            self.producer.resize(need, None);
            self.is_output.resize(need, false);
        }
    }

    fn add_read(&mut self, operand: OperandIndex, op: usize) {
        self.grow(operand);
        let readers = &mut self.readers[operand as usize];
        if readers.last() != Some(&op) {
            readers.push(op);
        }
        self.read_count[operand as usize] += 1;
    }

    fn drop_read(&mut self, operand: OperandIndex) {
        if let Some(c) = self.read_count.get_mut(operand as usize) {
            *c = c.saturating_sub(1);
        }
    }

    pub fn is_removed(&self, op: usize) -> bool {
        self.removed.get(op).copied().unwrap_or(true)
    }

    pub fn is_output(&self, operand: OperandIndex) -> bool {
        self.is_output
            .get(operand as usize)
            .copied()
            .unwrap_or(false)
    }

    /// Live reads of an operand.
    pub fn count(&self, operand: OperandIndex) -> usize {
        self.read_count.get(operand as usize).copied().unwrap_or(0)
    }

    /// The live operations reading `operand`, each once, in graph order.
    pub fn readers(&self, model: &Model, operand: OperandIndex) -> Vec<usize> {
        let mut out: Vec<usize> = self
            .readers
            .get(operand as usize)
            .map(|r| {
                r.iter()
                    .copied()
                    .filter(|&op| {
                        !self.removed[op] && model.main.operations[op].inputs.contains(&operand)
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The one operation reading `operand` once, when it is not a model output.
    pub fn single_reader(&self, model: &Model, operand: OperandIndex) -> Option<usize> {
        if self.count(operand) != 1 || self.is_output(operand) {
            return None;
        }
        self.readers(model, operand).first().copied()
    }

    pub fn producer(&self, operand: OperandIndex) -> Option<usize> {
        self.producer
            .get(operand as usize)
            .copied()
            .flatten()
            .filter(|&op| !self.removed[op])
    }

    /// Sets input `k` of operation `op`.
    pub fn set_input(&mut self, model: &mut Model, op: usize, k: usize, operand: OperandIndex) {
        let old = model.main.operations[op].inputs[k];
        self.drop_read(old);
        model.main.operations[op].inputs[k] = operand;
        self.add_read(operand, op);
    }

    /// Sets output `k` of operation `op`.
    pub fn set_output(&mut self, model: &mut Model, op: usize, k: usize, operand: OperandIndex) {
        let old = model.main.operations[op].outputs[k];
        if let Some(slot) = self.producer.get_mut(old as usize)
            && *slot == Some(op)
        {
            *slot = None;
        }
        model.main.operations[op].outputs[k] = operand;
        self.grow(operand);
        self.producer[operand as usize] = Some(op);
    }

    /// Replaces every input of operation `op`.
    pub fn set_inputs(&mut self, model: &mut Model, op: usize, inputs: Vec<OperandIndex>) {
        for &old in &model.main.operations[op].inputs {
            self.drop_read(old);
        }
        for &new in &inputs {
            self.add_read(new, op);
        }
        model.main.operations[op].inputs = inputs;
    }

    /// Marks operation `op` removed: its reads and writes no longer count.
    pub fn remove(&mut self, model: &Model, op: usize) {
        if self.is_removed(op) {
            return;
        }
        self.removed[op] = true;
        for &input in &model.main.operations[op].inputs {
            self.drop_read(input);
        }
        for &output in &model.main.operations[op].outputs {
            if let Some(slot) = self.producer.get_mut(output as usize)
                && *slot == Some(op)
            {
                *slot = None;
            }
        }
    }

    /// Makes every live reader of `from` read `to` instead.
    pub fn replace_reads(&mut self, model: &mut Model, from: OperandIndex, to: OperandIndex) {
        for op in self.readers(model, from) {
            for k in 0..model.main.operations[op].inputs.len() {
                if model.main.operations[op].inputs[k] == from {
                    self.set_input(model, op, k, to);
                }
            }
        }
    }

    /// Adds an operation to be placed right after operation `after` (it may read what
    /// `after` writes); returns its index. Its outputs must be operands nothing else
    /// writes.
    pub fn push_after(&mut self, model: &mut Model, after: usize, op: Operation) -> usize {
        let i = model.main.operations.len();
        self.pushed += 1;
        self.order.push((self.order[after].0, self.pushed));
        self.removed.push(false);
        for &input in &op.inputs {
            self.add_read(input, i);
        }
        for &output in &op.outputs {
            self.grow(output);
            self.producer[output as usize] = Some(i);
        }
        model.main.operations.push(op);
        i
    }

    /// Drops the removed operations from the model (indices change afterwards) and,
    /// when operations were added, restores a topological order: dependencies first,
    /// otherwise each operation where it was placed.
    pub fn compact(self, model: &mut Model) {
        let ops = std::mem::take(&mut model.main.operations);
        let live: Vec<usize> = (0..ops.len()).filter(|&i| !self.removed[i]).collect();
        if self.pushed == 0 {
            model.main.operations = ops
                .into_iter()
                .enumerate()
                .filter_map(|(i, op)| (!self.removed[i]).then_some(op))
                .collect();
            return;
        }
        // Kahn's algorithm, taking ready operations by their placement.
        let mut pending = vec![0usize; ops.len()];
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); ops.len()];
        for &i in &live {
            for &input in &ops[i].inputs {
                if let Some(p) = self.producer.get(input as usize).copied().flatten()
                    && p != i
                    && !self.removed[p]
                {
                    pending[i] += 1;
                    dependents[p].push(i);
                }
            }
        }
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<((usize, usize), usize)>> =
            live.iter()
                .filter(|&&i| pending[i] == 0)
                .map(|&i| std::cmp::Reverse((self.order[i], i)))
                .collect();
        let mut sorted = Vec::with_capacity(live.len());
        while let Some(std::cmp::Reverse((_, i))) = ready.pop() {
            sorted.push(i);
            for &d in &dependents[i] {
                pending[d] -= 1;
                if pending[d] == 0 {
                    ready.push(std::cmp::Reverse((self.order[d], d)));
                }
            }
        }
        debug_assert_eq!(sorted.len(), live.len(), "a pass created a cycle");
        let mut slots: Vec<Option<Operation>> = ops.into_iter().map(Some).collect();
        model.main.operations = sorted.into_iter().filter_map(|i| slots[i].take()).collect();
    }
}

/// The operation writing each operand.
pub fn producers(model: &Model) -> Vec<Option<usize>> {
    model.producers()
}

pub fn is_constant(model: &Model, operand: OperandIndex) -> bool {
    model
        .operand(operand)
        .is_some_and(|o| o.lifetime.is_constant())
}

/// Little-endian i32 values of a constant operand.
pub fn const_i32s(model: &Model, operand: OperandIndex) -> Option<Vec<i32>> {
    let bytes = model.constant_bytes(operand)?;
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

pub fn const_i32(model: &Model, operand: OperandIndex) -> Option<i32> {
    const_i32s(model, operand).and_then(|v| (v.len() == 1).then(|| v[0]))
}

pub fn const_bool(model: &Model, operand: OperandIndex) -> Option<bool> {
    let b = model.constant_bytes(operand)?;
    (b.len() == 1).then(|| b[0] != 0)
}

pub fn const_f32s(model: &Model, operand: OperandIndex) -> Option<Vec<f32>> {
    let o = model.operand(operand)?;
    if !matches!(
        o.operand_type,
        OperandType::TensorFloat32 | OperandType::Float32
    ) {
        return None;
    }
    let bytes = model.constant_bytes(operand)?;
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// Replaces every read of `from` by `to` in operations at or after `start`.
pub fn replace_reads(model: &mut Model, from: OperandIndex, to: OperandIndex, start: usize) {
    for op in model.main.operations.iter_mut().skip(start) {
        for input in &mut op.inputs {
            if *input == from {
                *input = to;
            }
        }
    }
}

/// Removes an operation that passes its only data input through unchanged (`y = x`),
/// rewiring readers of `y` to `x`. When `y` is a model output, the writer of `x` writes
/// `y` instead, if `x` is a temporary nobody else reads. Returns false (and changes
/// nothing) when neither is possible.
pub fn bypass(model: &mut Model, op_index: usize, data_input: usize) -> bool {
    let mut index = GraphIndex::new(model);
    let done = bypass_indexed(model, &mut index, op_index, data_input);
    index.compact(model);
    done
}

/// [`bypass`] on a pass's [`GraphIndex`]: the operation is marked removed.
pub fn bypass_indexed(
    model: &mut Model,
    index: &mut GraphIndex,
    op_index: usize,
    data_input: usize,
) -> bool {
    let op = &model.main.operations[op_index];
    let (x, y) = (op.inputs[data_input], op.outputs[0]);
    if !index.is_output(y) {
        index.remove(model, op_index);
        index.replace_reads(model, y, x);
        return true;
    }
    let x_operand = &model.main.operands[x as usize];
    if x_operand.lifetime != Lifetime::TemporaryVariable
        || index.count(x) != 1
        || index.is_output(x)
    {
        return false;
    }
    let Some(writer) = index.producer(x) else {
        return false;
    };
    // The output operand takes over x's shape (they are equal for a pass-through).
    index.remove(model, op_index);
    for k in 0..model.main.operations[writer].outputs.len() {
        if model.main.operations[writer].outputs[k] == x {
            index.set_output(model, writer, k, y);
        }
    }
    true
}

/// Inserts an operation at `position` whose output operands are fresh temporaries with
/// inferred shapes, copying type and quantization from `templates`. Returns the outputs.
pub fn insert_operation(
    model: &mut Model,
    position: usize,
    op_type: OperationType,
    inputs: Vec<OperandIndex>,
    templates: &[Operand],
    source: &str,
) -> Result<Vec<OperandIndex>, String> {
    let outputs = new_outputs(model, op_type, &inputs, templates)?;
    model.main.operations.insert(
        position,
        Operation {
            op_type,
            inputs,
            outputs: outputs.clone(),
            source: source.to_string(),
        },
    );
    Ok(outputs)
}

/// The inputs `inputs` as the schema's shape rules and parameter decoders read them:
/// each operand with its value when it is a constant.
pub fn input_views<'m>(model: &'m Model, inputs: &[OperandIndex]) -> Vec<InputView<'m>> {
    inputs
        .iter()
        .map(|&i| InputView {
            operand: &model.main.operands[i as usize],
            value: model.constant_bytes(i),
        })
        .collect()
}

/// Fresh temporaries for the outputs of an `op_type` operation on `inputs`, with inferred
/// shapes and the type and quantization of `templates`.
pub fn new_outputs(
    model: &mut Model,
    op_type: OperationType,
    inputs: &[OperandIndex],
    templates: &[Operand],
) -> Result<Vec<OperandIndex>, String> {
    let shapes = {
        let views = input_views(model, inputs);
        let declared: Vec<&Operand> = templates.iter().collect();
        infer(op_type, &views, &declared).map_err(|e| format!("{}: {e}", op_type.name()))?
    };
    let mut outputs = Vec::with_capacity(shapes.len());
    for (template, shape) in templates.iter().zip(shapes) {
        let mut operand = template.clone();
        operand.operand_type = shape.operand_type;
        operand.dimensions = shape.dimensions;
        operand.lifetime = Lifetime::TemporaryVariable;
        operand.location = Default::default();
        outputs.push(model.add_operand(operand));
    }
    Ok(outputs)
}

/// Recomputes the output dimensions of operation `index` from its inputs.
pub fn refresh_shapes(model: &mut Model, index: usize) -> Result<(), String> {
    let op = model.main.operations[index].clone();
    let shapes = {
        let views = input_views(model, &op.inputs);
        let declared: Vec<&Operand> = op
            .outputs
            .iter()
            .map(|&o| &model.main.operands[o as usize])
            .collect();
        infer(op.op_type, &views, &declared).map_err(|e| format!("{}: {e}", op.op_type.name()))?
    };
    for (&o, shape) in op.outputs.iter().zip(shapes) {
        model.main.operands[o as usize].dimensions = shape.dimensions;
    }
    Ok(())
}

/// Index of the fused-activation input of an operation, when it has one (the schema
/// table says which operations have a fused output clamp).
pub fn activation_input(op: &Operation) -> Option<usize> {
    nnc_formats::nn::ops::fused_activation_input(op.op_type, op.inputs.len())
}

/// Element size of an operand type, for byte-level constant rewrites.
pub fn element_size(t: OperandType) -> usize {
    t.element_size().unwrap_or(1)
}

/// Transposes a constant's bytes: `out[i] = in[perm applied]` with `out.dims[k] = dims[perm[k]]`.
pub fn transpose_bytes(bytes: &[u8], dims: &[u32], perm: &[usize], elem: usize) -> Vec<u8> {
    let r = dims.len();
    let mut strides = vec![1usize; r];
    for i in (0..r.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1] as usize;
    }
    let out_dims: Vec<usize> = perm.iter().map(|&p| dims[p] as usize).collect();
    let total: usize = out_dims.iter().product();
    let mut out = Vec::with_capacity(total * elem);
    let mut idx = vec![0usize; r];
    for _ in 0..total {
        let src: usize = (0..r).map(|d| idx[d] * strides[perm[d]]).sum();
        out.extend_from_slice(&bytes[src * elem..(src + 1) * elem]);
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < out_dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}
