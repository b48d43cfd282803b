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
        let mut accumulators: Vec<(Operand, DataType, bool)> = Vec::new();
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
                let tv = this.materialize(name, value)?;
                let (now, before) = (
                    &this.model.main.operands[tv.operand as usize],
                    &this.model.main.operands[input.operand as usize],
                );
                if !carries(before, now) {
                    return unsupported(format!(
                        "loop-carried value '{name}' changes from {} {:?} to {} {:?} in an \
                         iteration",
                        before.operand_type, before.dimensions, now.operand_type, now.dimensions
                    ));
                }
                outputs.push((name.clone(), Value::Tensor(tv)));
            }
            let iter = inputs[carried];
            let mut accumulator_inputs = Vec::new();
            for (k, value) in values[1 + carried..].iter().enumerate() {
                let name = body.output[1 + carried + k].name.clone();
                let element = this.scan_element(n, &name, value)?;
                let element_operand = this.model.main.operands[element.operand as usize].clone();
                let mut acc = element_operand.clone();
                acc.dimensions = std::iter::once(steps.unwrap_or(1) as u32)
                    .chain(if element.scalar {
                        vec![]
                    } else {
                        element_operand.dimensions.clone()
                    })
                    .collect();
                let acc_in = this.subgraph_input(&InputSpec {
                    name: String::new(),
                    operand: acc.clone(),
                    dtype: element.dtype,
                    scalar: false,
                });
                accumulator_inputs.push(acc_in.operand);
                let next = this.accumulate(n, acc_in.operand, iter.operand, element)?;
                outputs.push((
                    format!("{name} (accumulated)"),
                    Value::Tensor(TensorValue {
                        operand: next,
                        dtype: element.dtype,
                        scalar: false,
                    }),
                ));
                let mut element_shape = element_operand;
                if element.scalar {
                    element_shape.dimensions = Vec::new();
                }
                accumulators.push((element_shape, element.dtype, element.scalar));
            }
            let one = this.scalar_tensor(OperandType::TensorInt32, 1.0);
            let next = this.arith(n, OperationType::Add, iter.operand, one)?;
            outputs.push((
                "iteration count".into(),
                Value::Tensor(TensorValue {
                    operand: next,
                    ..iter
                }),
            ));
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
            let all = std::mem::take(&mut this.model.main.inputs);
            let mut order: Vec<u32> = all[..carried].to_vec();
            order.extend(&accumulator_inputs);
            order.push(all[carried]);
            order.push(all[carried + 1]);
            order.extend(&all[carried + 2..all.len() - accumulator_inputs.len()]);
            this.model.main.inputs = order;
            Ok(outputs)
        })?;

        // The condition subgraph takes the same inputs: it reads the count and condition.
        let body_graph = &self.model.referenced[body_built.graph as usize - 1];
        let cond_specs: Vec<InputSpec> = body_graph
            .inputs
            .iter()
            .map(|&i| InputSpec {
                name: String::new(),
                operand: body_graph.operands[i as usize].clone(),
                dtype: DataType::F32,
                scalar: false,
            })
            .collect();
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
            Ok(vec![(
                "continue".into(),
                Value::Tensor(TensorValue {
                    operand: result,
                    dtype: DataType::Bool,
                    scalar: true,
                }),
            )])
        })?;

        // The WHILE: outputs are the m values.
        let cond_ref = self.subgraph_operand(cond_built.graph);
        let body_ref = self.subgraph_operand(body_built.graph);
        let mut inputs = vec![cond_ref, body_ref];
        inputs.extend(initial.iter().map(|tv| tv.operand));
        for (element, _, _) in &accumulators {
            let acc = self.zero_accumulator(n, steps.unwrap_or(1) as u32, element)?;
            inputs.push(acc);
        }
        inputs.push(iter0.operand);
        inputs.push(cond0);
        if let Some(tv) = trip_input {
            inputs.push(tv.operand);
        }
        inputs.extend(captures.iter().map(|(_, tv)| tv.operand));
        let body_graph = &self.model.referenced[body_built.graph as usize - 1];
        let mut out_operands = Vec::new();
        for &o in &body_graph.outputs[..carried + scans + 1] {
            let mut operand = body_graph.operands[o as usize].clone();
            operand.lifetime = Lifetime::TemporaryVariable;
            operand.name = String::new();
            out_operands.push(operand);
        }
        let outs: Vec<u32> = out_operands
            .into_iter()
            .map(|o| self.model.add_operand(o))
            .collect();
        self.model
            .add_operation(OperationType::While, inputs, outs.clone(), &n.label);
        for (i, tv) in initial.iter().enumerate() {
            self.set_tensor(n, i, outs[i], tv.dtype, tv.scalar);
        }
        let count = outs[carried + scans];
        for (k, (element, dtype, _)) in accumulators.iter().enumerate() {
            let acc = outs[carried + k];
            let y = if runs_every_trip && self.input(n, 1)?.is_none() {
                acc
            } else {
                // Only the iterations that ran: the first `count` rows.
                let rank = element.dimensions.len() + 1;
                let begin = self.i32_vector(&vec![0; rank]);
                let rest: Vec<i32> = element.dimensions.iter().map(|&d| d as i32).collect();
                let rest = self.i32_vector(&rest);
                let axis = self.i32_const(0);
                let size = if rest_is_empty(element) {
                    count
                } else {
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
        let mut steps: Option<u32> = None;
        #[allow(clippy::needless_range_loop)] // j also numbers the node's inputs
        for j in 0..scan_inputs {
            let tv = self.tensor(n, states + j)?;
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
                let tv = this.materialize(name, value)?;
                let (now, before) = (
                    &this.model.main.operands[tv.operand as usize],
                    &this.model.main.operands[input.operand as usize],
                );
                if !carries(before, now) {
                    return unsupported(format!(
                        "state '{name}' changes from {} {:?} to {} {:?} in an iteration",
                        before.operand_type, before.dimensions, now.operand_type, now.dimensions
                    ));
                }
                outputs.push((name.clone(), Value::Tensor(tv)));
            }
            let mut accumulator_inputs = Vec::new();
            for (k, value) in values[states..].iter().enumerate() {
                let name = body.output[states + k].name.clone();
                let element = this.scan_element(n, &name, value)?;
                let mut element_operand =
                    this.model.main.operands[element.operand as usize].clone();
                if element.scalar {
                    element_operand.dimensions = Vec::new();
                }
                let mut acc = element_operand.clone();
                acc.dimensions = std::iter::once(steps)
                    .chain(element_operand.dimensions.clone())
                    .collect();
                let acc_in = this.subgraph_input(&InputSpec {
                    name: String::new(),
                    operand: acc,
                    dtype: element.dtype,
                    scalar: false,
                });
                accumulator_inputs.push(acc_in.operand);
                let index = if output_reversed[k] {
                    reversed_iter
                } else {
                    iter.operand
                };
                let next = this.accumulate(n, acc_in.operand, index, element)?;
                outputs.push((
                    format!("{name} (accumulated)"),
                    Value::Tensor(TensorValue {
                        operand: next,
                        dtype: element.dtype,
                        scalar: false,
                    }),
                ));
                accumulators.push((element_operand, element.dtype));
            }
            let one = this.scalar_tensor(OperandType::TensorInt32, 1.0);
            let next = this.arith(n, OperationType::Add, iter.operand, one)?;
            outputs.push((
                "iteration count".into(),
                Value::Tensor(TensorValue {
                    operand: next,
                    ..iter
                }),
            ));
            // m: states, accumulators; k: the count; n: scanned tensors, captures.
            let all = std::mem::take(&mut this.model.main.inputs);
            let mut order: Vec<u32> = all[..states].to_vec();
            order.extend(&accumulator_inputs);
            order.extend(&all[states..all.len() - accumulator_inputs.len()]);
            this.model.main.inputs = order;
            Ok(outputs)
        })?;

        let body_graph = &self.model.referenced[body_built.graph as usize - 1];
        let cond_specs: Vec<InputSpec> = body_graph
            .inputs
            .iter()
            .map(|&i| InputSpec {
                name: String::new(),
                operand: body_graph.operands[i as usize].clone(),
                dtype: DataType::F32,
                scalar: false,
            })
            .collect();
        let count_at = states + scan_outputs;
        let cond_built = self.new_subgraph(&cond_specs, |this, inputs| {
            let limit = this.scalar_tensor(OperandType::TensorInt32, f64::from(steps));
            let go = this.emit(
                n,
                OperationType::Less,
                vec![inputs[count_at].operand, limit],
            )?;
            Ok(vec![(
                "continue".into(),
                Value::Tensor(TensorValue {
                    operand: go,
                    dtype: DataType::Bool,
                    scalar: true,
                }),
            )])
        })?;

        let cond_ref = self.subgraph_operand(cond_built.graph);
        let body_ref = self.subgraph_operand(body_built.graph);
        let mut inputs = vec![cond_ref, body_ref];
        inputs.extend(initial.iter().map(|tv| tv.operand));
        for (element, _) in &accumulators {
            let acc = self.zero_accumulator(n, steps, element)?;
            inputs.push(acc);
        }
        inputs.push(iter0.operand);
        inputs.extend(scanned.iter().map(|(tv, _, _)| tv.operand));
        inputs.extend(captures.iter().map(|(_, tv)| tv.operand));
        let body_graph = &self.model.referenced[body_built.graph as usize - 1];
        let mut out_operands = Vec::new();
        for &o in &body_graph.outputs[..states + scan_outputs] {
            let mut operand = body_graph.operands[o as usize].clone();
            operand.lifetime = Lifetime::TemporaryVariable;
            operand.name = String::new();
            out_operands.push(operand);
        }
        let outs: Vec<u32> = out_operands
            .into_iter()
            .map(|o| self.model.add_operand(o))
            .collect();
        self.model
            .add_operation(OperationType::While, inputs, outs.clone(), &n.label);
        for (i, tv) in initial.iter().enumerate() {
            self.set_tensor(n, i, outs[i], tv.dtype, tv.scalar);
        }
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
            self.set_tensor(n, states + k, y, *dtype, false);
        }
        Ok(())
    }
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

/// True for a scalar element (its accumulator is 1-D).
fn rest_is_empty(element: &Operand) -> bool {
    element.dimensions.is_empty()
}
