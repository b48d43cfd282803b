//! ONNX Loop and Scan as the NN set's WHILE.
//!
//! WHILE carries `m` input-output values, `k` state-only values and `n` input-only values
//! through a condition subgraph and a body subgraph that take the same inputs. nnc lays a
//! Loop out as
//!
//! - m: the loop-carried values, one accumulator per scan output, the iteration count;
//! - k: the loop condition;
//! - n: a run-time trip count, then the values the body reads from enclosing graphs;
//!
//! and a Scan as m: the state values and one accumulator per scan output; k: the
//! iteration count; n: the scanned tensors, then the captured values. Each iteration of a
//! scan input is read with SLICE at the iteration (from the end for a reverse
//! direction); each scan output element is written into its accumulator (a [T, ...]
//! tensor of zeros) with SCATTER_ND at the iteration, so that shapes never change between
//! iterations. A Loop that may stop early returns its accumulators sliced to the count of
//! iterations it ran. Why accumulators rather than growing concatenations: the NN set has
//! no empty tensor to start from, and a fixed shape keeps each iteration's memory
//! planned once.

use nnc_formats::nn::{Lifetime, Operand, OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::control::{InputSpec, graph_attribute};
use super::{Lowerer, NResult, Node, NodeError, TensorValue, Value, invalid, unsupported};
use crate::onnx::implicit_inputs;

/// The most iterations nnc unrolls into an accumulator (a Loop's scan outputs need the
/// trip count at compile time; beyond it the accumulators would dwarf the model).
const MAX_ACCUMULATED_ITERATIONS: i64 = 1 << 20;

/// How often a Loop may run.
enum TripCount {
    /// No trip count: the condition alone decides.
    Unbounded,
    Constant(i32),
    RunTime(TensorValue),
}

impl Lowerer<'_> {
    /// An int32 [1] operand (an ONNX int64 scalar) holding `v`.
    fn int_scalar(&mut self, v: i32) -> TensorValue {
        TensorValue {
            operand: self.scalar_tensor(OperandType::TensorInt32, f64::from(v)),
            dtype: DataType::I64,
            scalar: true,
        }
    }

    /// `value` as a bool [1] operand (ONNX conditions are one-element bool tensors).
    fn condition_operand(&mut self, n: &Node, name: &str, value: &Value) -> NResult<u32> {
        let tv = self.materialize(name, value)?;
        if tv.dtype != DataType::Bool {
            return invalid(format!("the condition is {}, not bool", tv.dtype));
        }
        match self.dims(tv).as_slice() {
            [] | [1] => Ok(tv.operand),
            dims if dims.iter().all(|&d| d <= 1) => self.reshape_to(n, tv.operand, &[1]),
            dims => invalid(format!(
                "the condition must have one element, its shape is {dims:?}"
            )),
        }
    }

    /// The run-time values of enclosing graphs that `n`'s subgraphs read.
    fn captures(&self, n: &Node) -> Vec<(String, TensorValue)> {
        implicit_inputs(n.proto)
            .into_iter()
            .filter_map(|name| match self.values.get(&name) {
                Some(Value::Tensor(tv)) => Some((name, *tv)),
                _ => None,
            })
            .collect()
    }

    /// An accumulator of `steps` elements shaped like `element` (all zeros), as the
    /// initial value of a scan output.
    fn zero_accumulator(&mut self, n: &Node, steps: u32, element: &Operand) -> NResult<u32> {
        let mut dims = vec![steps];
        dims.extend(&element.dimensions);
        let elements = nnc_formats::limits::element_count(&dims);
        let size = element.operand_type.element_size().unwrap_or(4) as u64;
        let bytes = self.limits.check_tensor(
            || format!("an accumulator of '{}'", n.label),
            elements,
            size,
        )?;
        match element.operand_type {
            OperandType::TensorFloat32 | OperandType::TensorInt32 => {
                let shape: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
                let shape = self.i32_vector(&shape);
                let zero = if element.operand_type == OperandType::TensorFloat32 {
                    self.f32_const(0.0)
                } else {
                    self.i32_const(0)
                };
                self.emit_declared(n, OperationType::Fill, vec![shape, zero], dims)
            }
            _ => {
                let mut operand = Operand::new(element.operand_type, dims);
                operand.scale = element.scale;
                operand.zero_point = element.zero_point;
                let zeros = vec![0u8; bytes as usize];
                Ok(self.model.add_constant(operand, &zeros))
            }
        }
    }

    /// `accumulator` with `element` written at `index` (an int32 [1] operand) of its first
    /// axis.
    fn accumulate(
        &mut self,
        n: &Node,
        accumulator: u32,
        index: u32,
        element: TensorValue,
    ) -> NResult<u32> {
        let indices = self.reshape_to(n, index, &[1, 1])?;
        let mut dims = vec![1];
        if !element.scalar {
            dims.extend(self.dims(element));
        }
        let update = self.reshape_to(n, element.operand, &dims)?;
        let none = self.i32_const(0);
        self.emit(
            n,
            OperationType::ScatterNd,
            vec![accumulator, indices, update, none],
        )
    }

    /// The element shape of a scan output: fully known, since its accumulator is
    /// allocated before the loop.
    fn scan_element(&mut self, n: &Node, name: &str, value: &Value) -> NResult<TensorValue> {
        let tv = self.materialize(name, value)?;
        if self.dims(tv).contains(&0) {
            return unsupported(format!(
                "{}: scan output '{name}' has dimensions known only at run time",
                n.op()
            ));
        }
        Ok(tv)
    }

    /// A loop body's result for a value it carries (`before` is the body's input for it),
    /// which must keep its type and what is known of its shape.
    fn carried_value(
        &mut self,
        name: &str,
        value: &Value,
        before: TensorValue,
        what: &str,
    ) -> NResult<TensorValue> {
        let tv = self.materialize(name, value)?;
        let (now, was) = (
            &self.model.main.operands[tv.operand as usize],
            &self.model.main.operands[before.operand as usize],
        );
        if !carries(was, now) {
            return unsupported(format!(
                "{what} '{name}' changes from {} {:?} to {} {:?} in an iteration",
                was.operand_type, was.dimensions, now.operand_type, now.dimensions
            ));
        }
        Ok(tv)
    }

    /// One iteration's element of a scan output: a new body input for its accumulator of
    /// `steps` elements, the body output that writes the element at `index`, and the
    /// element's shape and type (for the accumulator's initial value).
    fn scan_output_step(
        &mut self,
        n: &Node,
        name: &str,
        value: &Value,
        steps: u32,
        index: u32,
    ) -> NResult<ScanOutputStep> {
        let element = self.scan_element(n, name, value)?;
        let mut element_operand = self.model.main.operands[element.operand as usize].clone();
        if element.scalar {
            element_operand.dimensions = Vec::new();
        }
        let mut acc = element_operand.clone();
        acc.dimensions = std::iter::once(steps)
            .chain(element_operand.dimensions.iter().copied())
            .collect();
        let acc_in = self.subgraph_input(&InputSpec {
            name: String::new(),
            operand: acc,
            dtype: element.dtype,
            scalar: false,
        });
        let next = self.accumulate(n, acc_in.operand, index, element)?;
        let output = (
            format!("{name} (accumulated)"),
            Value::Tensor(TensorValue {
                operand: next,
                dtype: element.dtype,
                scalar: false,
            }),
        );
        Ok(ScanOutputStep {
            accumulator_input: acc_in.operand,
            output,
            element: (element_operand, element.dtype),
        })
    }

    /// The body output counting iterations: `iter + 1`.
    fn next_count(&mut self, n: &Node, iter: TensorValue) -> NResult<(String, Value)> {
        let one = self.scalar_tensor(OperandType::TensorInt32, 1.0);
        let next = self.arith(n, OperationType::Add, iter.operand, one)?;
        Ok((
            "iteration count".into(),
            Value::Tensor(TensorValue {
                operand: next,
                ..iter
            }),
        ))
    }

    /// Inputs declared like those of built subgraph `graph` (a WHILE's condition takes the
    /// body's inputs).
    fn inputs_of(&self, graph: u64) -> Vec<InputSpec> {
        let g = &self.model.referenced[graph as usize - 1];
        g.inputs
            .iter()
            .map(|&i| InputSpec {
                name: String::new(),
                operand: g.operands[i as usize].clone(),
                dtype: DataType::F32,
                scalar: false,
            })
            .collect()
    }

    /// Emits a WHILE of subgraphs `cond` and `body` over `values` (m + k + n of them)
    /// whose outputs are the body's first `m` outputs; returns them.
    fn emit_while(
        &mut self,
        n: &Node,
        cond: u64,
        body: u64,
        values: Vec<u32>,
        m: usize,
    ) -> Vec<u32> {
        let mut inputs = vec![self.subgraph_operand(cond), self.subgraph_operand(body)];
        inputs.extend(values);
        let g = &self.model.referenced[body as usize - 1];
        let templates: Vec<Operand> = g.outputs[..m]
            .iter()
            .map(|&o| Operand {
                lifetime: Lifetime::TemporaryVariable,
                name: String::new(),
                ..g.operands[o as usize].clone()
            })
            .collect();
        let outs: Vec<u32> = templates
            .into_iter()
            .map(|o| self.model.add_operand(o))
            .collect();
        self.model
            .add_operation(OperationType::While, inputs, outs.clone(), &n.label);
        outs
    }

    /// The value of a one-element integer operand that the operations already emitted
    /// compute from constants alone, evaluated with the runtime's kernels (as the
    /// fold-constants pass would); `None` when it depends on anything else.
    fn evaluate_small_int(&self, operand: u32) -> Option<i64> {
        /// How many operations the chain may have: trip counts are short expressions.
        const MAX_CHAIN: usize = 32;
        let graph = &self.model.main;
        let mut values: std::collections::HashMap<u32, Vec<u8>> = Default::default();
        // Producers of the chain, found depth first, evaluated in dependency order.
        let mut order: Vec<usize> = Vec::new();
        let mut stack = vec![operand];
        while let Some(o) = stack.pop() {
            let op = graph.operands.get(o as usize)?;
            if op.lifetime.is_constant() || values.contains_key(&o) {
                continue;
            }
            let producer = graph
                .operations
                .iter()
                .position(|p| p.outputs.contains(&o))?;
            if order.contains(&producer) {
                continue;
            }
            order.push(producer);
            if order.len() > MAX_CHAIN {
                return None;
            }
            stack.extend(&graph.operations[producer].inputs);
        }
        order.sort_unstable();
        // Evaluated results read as constants by the operations after them.
        let mut operands = graph.operands.clone();
        for p in order {
            let op = &graph.operations[p];
            let results = {
                let constant = |k: u32| {
                    values
                        .get(&k)
                        .map(Vec::as_slice)
                        .or_else(|| self.model.constant_bytes(k))
                };
                nnc_runtime::evaluate_operation(op, &operands, constant).ok()?
            };
            for (&o, bytes) in op.outputs.iter().zip(results) {
                if bytes.len() > 1 << 16 {
                    return None;
                }
                operands[o as usize].lifetime = Lifetime::ConstantCopy;
                values.insert(o, bytes);
            }
        }
        let bytes = values.get(&operand)?;
        match graph.operands[operand as usize].operand_type {
            OperandType::TensorInt32 if bytes.len() == 4 => {
                Some(i64::from(i32::from_le_bytes(bytes[..4].try_into().ok()?)))
            }
            _ => None,
        }
    }

    pub(super) fn loop_node(&mut self, n: &Node) -> NResult<()> {
        let body = graph_attribute(n, "body")?;
        let carried = n.proto.input.len().saturating_sub(2);
        if body.input.len() != carried + 2 {
            return invalid(format!(
                "the body takes {} inputs; a Loop with {carried} loop-carried values needs {}",
                body.input.len(),
                carried + 2
            ));
        }
        if body.output.len() < carried + 1 {
            return invalid(format!(
                "the body has {} outputs; it needs the condition and {carried} loop-carried \
                 values",
                body.output.len()
            ));
        }
        let scans = body.output.len() - 1 - carried;
        let trips = match self.input(n, 0)? {
            None => TripCount::Unbounded,
            Some(Value::Const(c)) => {
                let v = *super::constant::to_i64s(&c)
                    .first()
                    .ok_or_else(|| NodeError::Invalid("the trip count has no element".into()))?;
                // Exporters write INT64_MAX for "no bound": the NN set counts in int32,
                // and no loop nnc runs comes near 2^31 iterations within its timeout.
                TripCount::Constant(v.clamp(0, i64::from(i32::MAX)) as i32)
            }
            Some(Value::Tensor(tv)) if let Some(v) = self.evaluate_small_int(tv.operand) => {
                // Computed from constants by operations the importer does not fold
                // itself (Range's expansion divides and rounds floats).
                TripCount::Constant(v.clamp(0, i64::from(i32::MAX)) as i32)
            }
            Some(Value::Tensor(tv)) => {
                if scans > 0 {
                    return Err(self.needs_constant(
                        n,
                        &[0],
                        "a Loop with scan outputs needs its trip count at compile time (the \
                         outputs are allocated before it runs)",
                    ));
                }
                TripCount::RunTime(tv)
            }
        };
        let steps = match trips {
            TripCount::Constant(t) => Some(t),
            _ => None,
        };
        if scans > 0 {
            match steps {
                None => {
                    return unsupported(
                        "a Loop with scan outputs and no trip count (the outputs are \
                         allocated before it runs)",
                    );
                }
                Some(0) => return unsupported("a Loop that never runs has empty scan outputs"),
                Some(t) if i64::from(t) > MAX_ACCUMULATED_ITERATIONS => {
                    return unsupported(format!(
                        "a Loop with scan outputs over {t} iterations (nnc accumulates at \
                         most {MAX_ACCUMULATED_ITERATIONS})"
                    ));
                }
                _ => {}
            }
        }
        let cond0 = match self.input(n, 1)? {
            None => self.scalar_tensor(OperandType::TensorBool8, 1.0),
            Some(value) => {
                let name = self.input_name(n, 1).unwrap_or("").to_string();
                self.condition_operand(n, &name, &value)?
            }
        };
        let mut initial = Vec::with_capacity(carried);
        for i in 0..carried {
            let tv = self.tensor(n, 2 + i)?;
            initial.push(tv);
        }
        let captures = self.captures(n);
        let iter0 = self.int_scalar(0);
        let cond_value = TensorValue {
            operand: cond0,
            dtype: DataType::Bool,
            scalar: true,
        };

        // Inputs as the body names them; the order is fixed after the body is built.
        let mut specs: Vec<InputSpec> = initial
            .iter()
            .zip(&body.input[2..])
            .map(|(tv, input)| self.input_spec(&input.name, *tv))
            .collect();
        specs.push(self.input_spec(&body.input[0].name, iter0));
        specs.push(self.input_spec(&body.input[1].name, cond_value));
        let trip_input = match trips {
            TripCount::RunTime(tv) => {
                specs.push(self.input_spec("", tv));
                Some(tv)
            }
            _ => None,
        };
        specs.extend(captures.iter().map(|(name, tv)| self.input_spec(name, *tv)));

        let what = format!("body of '{}'", n.label);
        let mut accumulators: Vec<(Operand, DataType)> = Vec::new();
        let mut runs_every_trip = false;
        let body_built = self.new_subgraph(&specs, |this, inputs| {
            let values = this.lower_body(body, &what)?;
            runs_every_trip = matches!(&values[0], Value::Const(c)
                if super::constant::to_i64s(c).first() == Some(&1));
            let mut outputs: Vec<(String, Value)> = Vec::new();
            for (i, (value, input)) in values[1..=carried]
                .iter()
                .zip(&inputs[..carried])
                .enumerate()
            {
                let name = &body.output[1 + i].name;
                let tv = this.carried_value(name, value, *input, "loop-carried value")?;
                outputs.push((name.clone(), Value::Tensor(tv)));
            }
            let iter = inputs[carried];
            let mut accumulator_inputs = Vec::new();
            for (k, value) in values[1 + carried..].iter().enumerate() {
                let name = body.output[1 + carried + k].name.clone();
                let steps = steps.unwrap_or(1) as u32;
                let step = this.scan_output_step(n, &name, value, steps, iter.operand)?;
                accumulator_inputs.push(step.accumulator_input);
                outputs.push(step.output);
                accumulators.push(step.element);
            }
            outputs.push(this.next_count(n, iter)?);
            let cond_name = body.output[0].name.clone();
            let cond_out = this.condition_operand(n, &cond_name, &values[0])?;
            outputs.push((
                cond_name,
                Value::Tensor(TensorValue {
                    operand: cond_out,
                    dtype: DataType::Bool,
                    scalar: true,
                }),
            ));
            // m: carried values, accumulators, the count; k: the condition; n: the rest.
            this.model.main.inputs[carried..].rotate_right(accumulator_inputs.len());
            Ok(outputs)
        })?;

        // The condition subgraph takes the same inputs: it reads the count and condition.
        let cond_specs = self.inputs_of(body_built.graph);
        let count_at = carried + scans;
        let cond_built = self.new_subgraph(&cond_specs, |this, inputs| {
            let count = inputs[count_at].operand;
            let go = inputs[count_at + 1].operand;
            let limit = match (&trips, trip_input) {
                (TripCount::Constant(t), _) => {
                    Some(this.scalar_tensor(OperandType::TensorInt32, f64::from(*t)))
                }
                (_, Some(_)) => Some(inputs[count_at + 2].operand),
                _ => None,
            };
            let result = match limit {
                Some(limit) => {
                    let below = this.emit(n, OperationType::Less, vec![count, limit])?;
                    this.emit(n, OperationType::LogicalAnd, vec![below, go])?
                }
                None => go,
            };
            Ok(vec![continue_output(result)])
        })?;

        // The WHILE: outputs are the m values.
        let mut inputs: Vec<u32> = initial.iter().map(|tv| tv.operand).collect();
        for (element, _) in &accumulators {
            let acc = self.zero_accumulator(n, steps.unwrap_or(1) as u32, element)?;
            inputs.push(acc);
        }
        inputs.push(iter0.operand);
        inputs.push(cond0);
        if let Some(tv) = trip_input {
            inputs.push(tv.operand);
        }
        inputs.extend(captures.iter().map(|(_, tv)| tv.operand));
        let outs = self.emit_while(
            n,
            cond_built.graph,
            body_built.graph,
            inputs,
            carried + scans + 1,
        );
        for (i, tv) in initial.iter().enumerate() {
            self.set_tensor(n, i, outs[i], tv.dtype, tv.scalar);
        }
        let count = outs[carried + scans];
        for (k, (element, dtype)) in accumulators.iter().enumerate() {
            let acc = outs[carried + k];
            let y = if runs_every_trip && self.input(n, 1)?.is_none() {
                acc
            } else {
                // Only the iterations that ran: the first `count` rows.
                let rank = element.dimensions.len() + 1;
                let begin = self.i32_vector(&vec![0; rank]);
                let size = if element.dimensions.is_empty() {
                    count
                } else {
                    let rest: Vec<i32> = element.dimensions.iter().map(|&d| d as i32).collect();
                    let rest = self.i32_vector(&rest);
                    let axis = self.i32_const(0);
                    self.emit(n, OperationType::Concatenation, vec![count, rest, axis])?
                };
                let mut dims = vec![0];
                dims.extend(&element.dimensions);
                let sliced = self.emit(n, OperationType::Slice, vec![acc, begin, size])?;
                self.model.main.operands[sliced as usize].dimensions = dims;
                sliced
            };
            self.set_tensor(n, carried + k, y, *dtype, false);
        }
        Ok(())
    }

    pub(super) fn scan_node(&mut self, n: &Node) -> NResult<()> {
        if n.version < 9 {
            return self.scan8_node(n);
        }
        let body = graph_attribute(n, "body")?;
        let scan_inputs = usize::try_from(
            n.attrs
                .int("num_scan_inputs")?
                .ok_or_else(|| NodeError::Invalid("Scan needs num_scan_inputs".into()))?,
        )
        .map_err(|_| NodeError::Invalid("num_scan_inputs is negative".into()))?;
        let total = n.proto.input.len();
        if scan_inputs == 0 || scan_inputs > total {
            return invalid(format!(
                "num_scan_inputs is {scan_inputs}, the node has {total} inputs"
            ));
        }
        let states = total - scan_inputs;
        if body.input.len() != total {
            return invalid(format!(
                "the body takes {} inputs, the node passes {total}",
                body.input.len()
            ));
        }
        if body.output.len() < states {
            return invalid("the body returns fewer values than the Scan carries");
        }
        let scan_outputs = body.output.len() - states;
        if states + scan_outputs == 0 {
            return unsupported("a Scan with no state and no scan output computes nothing");
        }
        let directions = |attr: &str, count: usize| -> NResult<Vec<bool>> {
            let v = n.attrs.ints(attr)?.unwrap_or_else(|| vec![0; count]);
            if v.len() != count || v.iter().any(|&d| d != 0 && d != 1) {
                return invalid(format!("{attr} must hold {count} values of 0 or 1"));
            }
            Ok(v.into_iter().map(|d| d == 1).collect())
        };
        let input_reversed = directions("scan_input_directions", scan_inputs)?;
        let output_reversed = directions("scan_output_directions", scan_outputs)?;
        let input_axes = n
            .attrs
            .ints("scan_input_axes")?
            .unwrap_or_else(|| vec![0; scan_inputs]);
        let output_axes = n
            .attrs
            .ints("scan_output_axes")?
            .unwrap_or_else(|| vec![0; scan_outputs]);
        if input_axes.len() != scan_inputs || output_axes.len() != scan_outputs {
            return invalid("scan_input_axes and scan_output_axes must have one value per scan");
        }
        let mut initial = Vec::with_capacity(states);
        for i in 0..states {
            initial.push(self.tensor(n, i)?);
        }
        let mut scanned = Vec::with_capacity(scan_inputs);
        for j in 0..scan_inputs {
            scanned.push(self.tensor(n, states + j)?);
        }
        let outputs = self.scan_lowered(
            n,
            body,
            &initial,
            &scanned,
            ScanAxes {
                input_axes,
                input_reversed,
                output_axes,
                output_reversed,
            },
        )?;
        for (i, tv) in outputs.into_iter().enumerate() {
            self.set_tensor(n, i, tv.operand, tv.dtype, tv.scalar);
        }
        Ok(())
    }

    /// Scan-8: a leading batch axis on every state and scan input, and an optional
    /// `sequence_lens` first input. nnc lowers a batch of one (the body then runs on the
    /// tensors without it, as Scan-9 does) with every sequence at full length.
    fn scan8_node(&mut self, n: &Node) -> NResult<()> {
        let body = graph_attribute(n, "body")?;
        let scan_inputs = usize::try_from(
            n.attrs
                .int("num_scan_inputs")?
                .ok_or_else(|| NodeError::Invalid("Scan needs num_scan_inputs".into()))?,
        )
        .map_err(|_| NodeError::Invalid("num_scan_inputs is negative".into()))?;
        let total = n.proto.input.len().saturating_sub(1);
        if scan_inputs == 0 || scan_inputs > total || body.input.len() != total {
            return invalid(format!(
                "num_scan_inputs is {scan_inputs}; the node has {total} inputs after \
                 sequence_lens and the body takes {}",
                body.input.len()
            ));
        }
        let states = total - scan_inputs;
        let scan_outputs = body.output.len().saturating_sub(states);
        let reversed = n
            .attrs
            .ints("directions")?
            .unwrap_or_else(|| vec![0; scan_inputs]);
        if reversed.len() != scan_inputs || reversed.iter().any(|&d| d != 0 && d != 1) {
            return invalid(format!(
                "directions must hold {scan_inputs} values of 0 or 1"
            ));
        }
        let unbatched = |this: &mut Self, i: usize| -> NResult<TensorValue> {
            let tv = this.tensor(n, i)?;
            let dims = this.known_dims(tv)?;
            match dims.split_first() {
                Some((1, rest)) => {
                    let scalar = rest.is_empty();
                    let operand =
                        this.reshape_to(n, tv.operand, if scalar { &[1] } else { rest })?;
                    Ok(TensorValue {
                        operand,
                        dtype: tv.dtype,
                        scalar,
                    })
                }
                Some((b, _)) => unsupported(format!(
                    "Scan-8 over a batch of {b} (nnc lowers a batch of 1)"
                )),
                None => invalid("Scan-8 inputs need a batch axis"),
            }
        };
        let mut initial = Vec::with_capacity(states);
        for i in 0..states {
            initial.push(unbatched(self, 1 + i)?);
        }
        let mut scanned = Vec::with_capacity(scan_inputs);
        for j in 0..scan_inputs {
            scanned.push(unbatched(self, 1 + states + j)?);
        }
        if let Some(lens) = self.input(n, 0)? {
            let full = scanned
                .first()
                .and_then(|tv| self.dims(*tv).first().copied())
                .map(i64::from);
            let all_full = match &lens {
                Value::Const(c) => super::constant::to_i64s(c).iter().all(|&l| Some(l) == full),
                Value::Tensor(_) => false,
            };
            if !all_full {
                return unsupported("Scan-8 with sequence_lens shorter than the sequences");
            }
        }
        let outputs = self.scan_lowered(
            n,
            body,
            &initial,
            &scanned,
            ScanAxes {
                input_axes: vec![0; scan_inputs],
                input_reversed: reversed.into_iter().map(|d| d == 1).collect(),
                output_axes: vec![0; scan_outputs],
                output_reversed: vec![false; scan_outputs],
            },
        )?;
        for (i, tv) in outputs.into_iter().enumerate() {
            let mut dims = vec![1];
            if !tv.scalar {
                dims.extend(self.dims(tv));
            }
            let operand = self.reshape_to(n, tv.operand, &dims)?;
            self.set_tensor(n, i, operand, tv.dtype, false);
        }
        Ok(())
    }

    /// The WHILE of a Scan over `scanned` with `initial` states; returns the final states
    /// and the scan outputs, in the body's output order.
    fn scan_lowered(
        &mut self,
        n: &Node,
        body: &crate::onnx::proto::GraphProto,
        initial: &[TensorValue],
        scanned_values: &[TensorValue],
        axes: ScanAxes,
    ) -> NResult<Vec<TensorValue>> {
        let ScanAxes {
            input_axes,
            input_reversed,
            output_axes,
            output_reversed,
        } = axes;
        let states = initial.len();
        let scan_outputs = body.output.len().saturating_sub(states);
        if body.input.len() != states + scanned_values.len() || body.output.len() < states {
            return invalid("the body's inputs and outputs do not match the Scan's");
        }
        if states + scan_outputs == 0 {
            return unsupported("a Scan with no state and no scan output computes nothing");
        }
        let mut scanned = Vec::with_capacity(scanned_values.len());
        let mut steps: Option<u32> = None;
        for (j, &tv) in scanned_values.iter().enumerate() {
            let dims = self.known_dims(tv)?;
            let axis = super::axis(input_axes[j], dims.len())?;
            let t = dims[axis];
            if steps.is_some_and(|s| s != t) {
                return invalid(format!(
                    "scan inputs have {} and {t} elements along their scan axes",
                    steps.unwrap_or(0)
                ));
            }
            steps = Some(t);
            scanned.push((tv, dims, axis));
        }
        let steps = steps.unwrap_or(0);
        if steps == 0 {
            return unsupported("a Scan over no elements has empty outputs");
        }
        let captures = self.captures(n);
        let iter0 = self.int_scalar(0);

        let mut specs: Vec<InputSpec> = initial
            .iter()
            .zip(&body.input[..states])
            .map(|(tv, input)| self.input_spec(&input.name, *tv))
            .collect();
        specs.push(self.input_spec("", iter0));
        for (tv, _, _) in &scanned {
            specs.push(self.input_spec("", *tv));
        }
        specs.extend(captures.iter().map(|(name, tv)| self.input_spec(name, *tv)));

        let what = format!("body of '{}'", n.label);
        let mut accumulators: Vec<(Operand, DataType)> = Vec::new();
        let body_built = self.new_subgraph(&specs, |this, inputs| {
            let iter = inputs[states];
            let last = this.scalar_tensor(OperandType::TensorInt32, f64::from(steps - 1));
            let reversed_iter = this.arith(n, OperationType::Sub, last, iter.operand)?;
            // Bind each scan input's element at this iteration to the body's name for it.
            for (j, (tv, dims, axis)) in scanned.iter().enumerate() {
                let whole = inputs[states + 1 + j];
                let index = if input_reversed[j] {
                    reversed_iter
                } else {
                    iter.operand
                };
                let onehot: Vec<i32> = (0..dims.len()).map(|d| i32::from(d == *axis)).collect();
                let onehot = this.i32_vector(&onehot);
                let begin = this.arith(n, OperationType::Mul, index, onehot)?;
                let mut size: Vec<u32> = dims.clone();
                size[*axis] = 1;
                let size_op = this.i32_vector(&size.iter().map(|&d| d as i32).collect::<Vec<_>>());
                let slice =
                    this.emit(n, OperationType::Slice, vec![whole.operand, begin, size_op])?;
                this.model.main.operands[slice as usize].dimensions = size.clone();
                let mut element_dims = dims.clone();
                element_dims.remove(*axis);
                let scalar = element_dims.is_empty();
                let element =
                    this.reshape_to(n, slice, if scalar { &[1] } else { &element_dims })?;
                this.values.insert(
                    body.input[states + j].name.clone(),
                    Value::Tensor(TensorValue {
                        operand: element,
                        dtype: tv.dtype,
                        scalar,
                    }),
                );
            }
            let values = this.lower_body(body, &what)?;
            let mut outputs: Vec<(String, Value)> = Vec::new();
            for (i, (value, input)) in values[..states].iter().zip(&inputs[..states]).enumerate() {
                let name = &body.output[i].name;
                let tv = this.carried_value(name, value, *input, "state")?;
                outputs.push((name.clone(), Value::Tensor(tv)));
            }
            let mut accumulator_inputs = Vec::new();
            for (k, value) in values[states..].iter().enumerate() {
                let name = body.output[states + k].name.clone();
                let index = if output_reversed[k] {
                    reversed_iter
                } else {
                    iter.operand
                };
                let step = this.scan_output_step(n, &name, value, steps, index)?;
                accumulator_inputs.push(step.accumulator_input);
                outputs.push(step.output);
                accumulators.push(step.element);
            }
            outputs.push(this.next_count(n, iter)?);
            // m: states, accumulators; k: the count; n: scanned tensors, captures.
            this.model.main.inputs[states..].rotate_right(accumulator_inputs.len());
            Ok(outputs)
        })?;

        let cond_specs = self.inputs_of(body_built.graph);
        let count_at = states + scan_outputs;
        let cond_built = self.new_subgraph(&cond_specs, |this, inputs| {
            let limit = this.scalar_tensor(OperandType::TensorInt32, f64::from(steps));
            let go = this.emit(
                n,
                OperationType::Less,
                vec![inputs[count_at].operand, limit],
            )?;
            Ok(vec![continue_output(go)])
        })?;

        let mut inputs: Vec<u32> = initial.iter().map(|tv| tv.operand).collect();
        for (element, _) in &accumulators {
            let acc = self.zero_accumulator(n, steps, element)?;
            inputs.push(acc);
        }
        inputs.push(iter0.operand);
        inputs.extend(scanned.iter().map(|(tv, _, _)| tv.operand));
        inputs.extend(captures.iter().map(|(_, tv)| tv.operand));
        let outs = self.emit_while(
            n,
            cond_built.graph,
            body_built.graph,
            inputs,
            states + scan_outputs,
        );
        let mut results: Vec<TensorValue> = initial
            .iter()
            .zip(&outs)
            .map(|(tv, &operand)| TensorValue { operand, ..*tv })
            .collect();
        for (k, (element, dtype)) in accumulators.iter().enumerate() {
            let acc = outs[states + k];
            let rank = element.dimensions.len() + 1;
            let axis = super::axis(output_axes[k], rank)?;
            let y = if axis == 0 {
                acc
            } else {
                // Accumulated along axis 0; ONNX wants the scan axis at `axis`.
                let mut perm: Vec<i32> = (1..rank as i32).collect();
                perm.insert(axis, 0);
                self.transpose_op(n, acc, &perm)?
            };
            results.push(TensorValue {
                operand: y,
                dtype: *dtype,
                scalar: false,
            });
        }
        Ok(results)
    }
}

/// One scan output's part of a loop body (see `Lowerer::scan_output_step`).
struct ScanOutputStep {
    /// The body input holding the accumulator.
    accumulator_input: u32,
    /// The body output: the accumulator with this iteration's element written.
    output: (String, Value),
    /// The element's shape and type.
    element: (Operand, DataType),
}

/// A WHILE condition subgraph's one output.
fn continue_output(operand: u32) -> (String, Value) {
    (
        "continue".into(),
        Value::Tensor(TensorValue {
            operand,
            dtype: DataType::Bool,
            scalar: true,
        }),
    )
}

/// Where a Scan reads and writes along its tensors.
struct ScanAxes {
    input_axes: Vec<i64>,
    input_reversed: Vec<bool>,
    output_axes: Vec<i64>,
    output_reversed: Vec<bool>,
}

/// Whether an iteration's result `now` can be the next iteration's `before`: the same
/// type and rank, and no dimension known on both sides that differs (one known only at
/// run time is checked by the executor when the value is fed back).
fn carries(before: &Operand, now: &Operand) -> bool {
    now.operand_type == before.operand_type
        && now.scale == before.scale
        && now.zero_point == before.zero_point
        && now.dimensions.len() == before.dimensions.len()
        && now
            .dimensions
            .iter()
            .zip(&before.dimensions)
            .all(|(&a, &b)| a == b || a == 0 || b == 0)
}
