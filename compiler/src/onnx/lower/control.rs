//! ONNX control flow.
//!
//! `If` is folded whenever its condition is known at compile time (a constant, a value
//! computed from static shapes, or a graph input bound with `--bind-input`): the branch
//! taken is lowered in place, in a scope of its own, and the fold is counted for `nnc
//! inspect`. Otherwise it becomes the NN set's IF, each branch lowered into a referenced
//! subgraph. The NN set's subgraphs capture nothing, so every run-time value a branch
//! reads from the enclosing graphs (found by walking the branch and the graphs nested in
//! it) becomes an explicit input of both branches, in the same order.

use std::rc::Rc;

use nnc_formats::nn::{Lifetime, Operand, OperandType, OperationType};

use super::{Lowerer, NResult, Node, NodeError, TensorValue, Value, invalid, unsupported};
use crate::onnx::proto::{GraphProto, ValueInfoProto};
use crate::onnx::{MAX_GRAPH_NESTING, implicit_inputs, lower_graph, topological_order};

/// A branch or body lowered into a referenced subgraph.
pub(super) struct BuiltSubgraph {
    /// Its graph index for a SUBGRAPH operand (1 = the first referenced subgraph).
    pub graph: u64,
    /// Its outputs, as operands of the subgraph.
    pub outputs: Vec<TensorValue>,
}

/// How an input of a subgraph being built is declared: the name it is bound to (empty
/// for none), its operand (type, dimensions, quantization) and its ONNX view.
#[derive(Clone)]
pub(super) struct InputSpec {
    pub name: String,
    pub operand: Operand,
    pub dtype: nnc_formats::tensor::DataType,
    pub scalar: bool,
}

impl Lowerer<'_> {
    pub(super) fn if_node(&mut self, n: &Node) -> NResult<()> {
        let then_branch = graph_attribute(n, "then_branch")?;
        let else_branch = graph_attribute(n, "else_branch")?;
        for (what, g) in [("then_branch", then_branch), ("else_branch", else_branch)] {
            if g.output.len() != n.proto.output.len() {
                return invalid(format!(
                    "its {what} has {} outputs, the node {}",
                    g.output.len(),
                    n.proto.output.len()
                ));
            }
            if !g.input.is_empty() {
                return invalid(format!("its {what} declares inputs; If branches take none"));
            }
        }
        match self.required(n, 0)? {
            Value::Const(c) => {
                let values = super::constant::to_i64s(&c);
                let [flag] = values.as_slice() else {
                    return invalid(format!(
                        "the condition must have one element, it has {}",
                        values.len()
                    ));
                };
                let (taken, branch) = if *flag != 0 {
                    ("then", then_branch)
                } else {
                    ("else", else_branch)
                };
                let outputs =
                    self.inline_graph(branch, &format!("{taken}_branch of '{}'", n.label))?;
                for (i, value) in outputs.into_iter().enumerate() {
                    self.set_output(n, i, value);
                }
                *self
                    .folded_ifs
                    .entry(format!("If folded to its {taken} branch"))
                    .or_insert(0) += 1;
                Ok(())
            }
            Value::Tensor(cond) => self.if_at_run_time(n, cond, then_branch, else_branch),
        }
    }

    /// Lowers `g`'s nodes into the current graph in a scope of their own (the names they
    /// define are gone afterwards) and returns the values of its outputs.
    fn inline_graph(&mut self, g: &GraphProto, what: &str) -> NResult<Vec<Value>> {
        let values = self.values.enter();
        let materialized = self.materialized.enter();
        let result = self.lower_body(g, what);
        self.values.leave(values);
        self.materialized.leave(materialized);
        result
    }

    /// Lowers the nodes of a branch or body where the enclosing graph's values (and, for
    /// a subgraph being built, its inputs) are in scope, and returns its outputs' values.
    pub(super) fn lower_body(&mut self, g: &GraphProto, what: &str) -> NResult<Vec<Value>> {
        if self.nesting >= MAX_GRAPH_NESTING {
            return invalid(format!(
                "graphs nest more than {MAX_GRAPH_NESTING} levels deep"
            ));
        }
        for t in &g.initializer {
            let host = crate::onnx::tensor::tensor_to_host(t, self.ext)
                .map_err(|e| NodeError::Nested(Box::new(e.into())))?;
            self.budget.charge(&host)?;
            self.values
                .insert(t.name.clone(), Value::Const(Rc::new(host)));
        }
        let order = topological_order(g, &|name| self.values.contains_key(name))
            .map_err(|e| nested_in(e, what))?;
        let mut report = crate::error::UnsupportedReport::new("ONNX");
        self.nesting += 1;
        let lowered = lower_graph(self, g, &order, &mut report, &|_| Vec::new());
        self.nesting -= 1;
        lowered.map_err(|e| nested_in(e, what))?;
        if !report.is_empty() {
            let count = report.node_count();
            self.nested_unsupported.merge(report);
            return unsupported(format!(
                "{count} node{} of its {what} cannot be lowered (listed with the others)",
                if count == 1 { "" } else { "s" }
            ));
        }
        let mut outputs = Vec::with_capacity(g.output.len());
        for o in &g.output {
            let value = self.values.get(&o.name).cloned().ok_or_else(|| {
                NodeError::Invalid(format!("its {what} never computes output '{}'", o.name))
            })?;
            outputs.push(self.refine_to_declared(o, value)?);
        }
        Ok(outputs)
    }

    /// A subgraph output whose dimensions nnc knows only at run time, where the graph
    /// declares them all, takes the declared ones through a RESHAPE (which fails at run
    /// time if the element count disagrees): a loop's carried values and scan outputs need
    /// their shapes before it runs.
    fn refine_to_declared(&mut self, o: &ValueInfoProto, value: Value) -> NResult<Value> {
        let Value::Tensor(tv) = value else {
            return Ok(value);
        };
        let dims = self.dims(tv);
        if !dims.contains(&0) {
            return Ok(value);
        }
        let Some(declared) = declared_static_dims(o) else {
            return Ok(value);
        };
        let fits = declared.len() == dims.len()
            && declared.iter().zip(&dims).all(|(&d, &k)| k == 0 || k == d);
        if !fits || declared.is_empty() {
            return Ok(value);
        }
        let shape: Vec<i32> = declared.iter().map(|&d| d as i32).collect();
        let shape = self.i32_vector(&shape);
        let operand = self.emit_raw(
            OperationType::Reshape,
            vec![tv.operand, shape],
            vec![None],
            &o.name,
        )?[0];
        Ok(Value::Tensor(TensorValue { operand, ..tv }))
    }

    fn if_at_run_time(
        &mut self,
        n: &Node,
        cond: TensorValue,
        then_branch: &GraphProto,
        else_branch: &GraphProto,
    ) -> NResult<()> {
        if cond.dtype != nnc_formats::tensor::DataType::Bool {
            return invalid(format!("the condition is {}, not bool", cond.dtype));
        }
        let cond = match self.dims(cond).as_slice() {
            [] | [1] => cond.operand,
            dims if dims.iter().all(|&d| d == 1 || d == 0) => {
                self.reshape_to(n, cond.operand, &[1])?
            }
            dims => {
                return invalid(format!(
                    "the condition must have one element, its shape is {dims:?}"
                ));
            }
        };
        // The run-time values the branches read from outside, passed to both.
        let captures: Vec<(String, TensorValue)> = implicit_inputs(n.proto)
            .into_iter()
            .filter_map(|name| match self.values.get(&name) {
                Some(Value::Tensor(tv)) => Some((name, *tv)),
                _ => None,
            })
            .collect();
        let then_built = self.runtime_branch(n, then_branch, "then_branch", &captures)?;
        let else_built = self.runtime_branch(n, else_branch, "else_branch", &captures)?;
        let mut outputs = Vec::with_capacity(then_built.outputs.len());
        for (k, (a, b)) in then_built
            .outputs
            .iter()
            .zip(&else_built.outputs)
            .enumerate()
        {
            let (a_op, b_op) = (
                &self.model.referenced[then_built.graph as usize - 1].operands[a.operand as usize],
                &self.model.referenced[else_built.graph as usize - 1].operands[b.operand as usize],
            );
            if a_op.operand_type != b_op.operand_type || a.dtype != b.dtype {
                return unsupported(format!(
                    "output {k}: the branches compute different types ({} and {})",
                    a.dtype, b.dtype
                ));
            }
            if a.scalar != b.scalar || a_op.dimensions.len() != b_op.dimensions.len() {
                return unsupported(format!(
                    "output {k}: the branches compute values of different ranks"
                ));
            }
            // A dimension the branches disagree on is known only at run time.
            let dims: Vec<u32> = a_op
                .dimensions
                .iter()
                .zip(&b_op.dimensions)
                .map(|(&x, &y)| if x == y { x } else { 0 })
                .collect();
            let mut operand = Operand::new(a_op.operand_type, dims);
            operand.scale = a_op.scale;
            operand.zero_point = a_op.zero_point;
            operand.lifetime = Lifetime::TemporaryVariable;
            outputs.push((operand, a.dtype, a.scalar));
        }
        let then_ref = self.subgraph_operand(then_built.graph);
        let else_ref = self.subgraph_operand(else_built.graph);
        let mut inputs = vec![cond, then_ref, else_ref];
        inputs.extend(captures.iter().map(|(_, tv)| tv.operand));
        let mut indices = Vec::with_capacity(outputs.len());
        for (i, (operand, dtype, scalar)) in outputs.into_iter().enumerate() {
            let index = self.model.add_operand(operand);
            indices.push(index);
            self.set_tensor(n, i, index, dtype, scalar);
        }
        self.model
            .add_operation(OperationType::If, inputs, indices, &n.label);
        Ok(())
    }

    /// Builds one branch of an If that stays an IF. A branch may be valid only for
    /// inputs other than the fixed ones (silero-vad's 8 kHz branch cannot take a 16 kHz
    /// chunk): it is never taken with them, but an IF must still compile it. That is
    /// reported as needing the condition at compile time, so that binding the inputs it
    /// derives from (`--bind-input`) folds the If instead.
    fn runtime_branch(
        &mut self,
        n: &Node,
        g: &GraphProto,
        which: &str,
        captures: &[(String, TensorValue)],
    ) -> NResult<BuiltSubgraph> {
        let what = format!("{which} of '{}'", n.label);
        match self.build_subgraph(g, &what, captures) {
            Err(NodeError::Nested(e))
                if matches!(*e, crate::error::CompileError::InvalidModel { .. }) =>
            {
                Err(self.needs_constant(
                    n,
                    &[0],
                    format!(
                        "its condition is computed at run time, so both branches must compile, \
                         but the {which} cannot with these input shapes ({e}); bind the inputs \
                         the condition depends on to fold the If"
                    ),
                ))
            }
            other => other,
        }
    }

    /// A SUBGRAPH operand naming graph `graph`.
    pub(super) fn subgraph_operand(&mut self, graph: u64) -> u32 {
        let mut operand = Operand::new(OperandType::Subgraph, vec![]);
        operand.lifetime = Lifetime::Subgraph;
        operand.location.offset = graph;
        self.model.add_operand(operand)
    }

    /// Lowers `g` into a new referenced subgraph whose inputs are `captures` (values of
    /// the current graph), in that order.
    fn build_subgraph(
        &mut self,
        g: &GraphProto,
        what: &str,
        captures: &[(String, TensorValue)],
    ) -> NResult<BuiltSubgraph> {
        let specs: Vec<InputSpec> = captures
            .iter()
            .map(|(name, tv)| self.input_spec(name, *tv))
            .collect();
        self.new_subgraph(&specs, |this, _| {
            let values = this.lower_body(g, what)?;
            Ok(g.output
                .iter()
                .map(|o| o.name.clone())
                .zip(values)
                .collect())
        })
    }

    /// How a subgraph input mirrors value `tv` of the current graph.
    pub(super) fn input_spec(&self, name: &str, tv: TensorValue) -> InputSpec {
        InputSpec {
            name: name.to_string(),
            operand: self.model.main.operands[tv.operand as usize].clone(),
            dtype: tv.dtype,
            scalar: tv.scalar,
        }
    }

    /// Builds a new referenced subgraph: its inputs are made from `inputs` (in order, each
    /// bound to its name when it has one), `body` emits its operations into it and returns
    /// its outputs by name. `body` may add inputs of its own ([`Self::subgraph_input`]) and
    /// reorder `self.model.main.inputs`. The enclosing graph's state is restored whatever
    /// happens.
    pub(super) fn new_subgraph(
        &mut self,
        inputs: &[InputSpec],
        body: impl FnOnce(&mut Self, &[TensorValue]) -> NResult<Vec<(String, Value)>>,
    ) -> NResult<BuiltSubgraph> {
        let outer_main = std::mem::take(&mut self.model.main);
        let values = self.values.enter();
        // The enclosing graph's operands mean nothing in the new one.
        let outer_materialized = std::mem::take(&mut self.materialized);
        let bound: Vec<TensorValue> = inputs
            .iter()
            .map(|spec| self.subgraph_input(spec))
            .collect();
        let result = body(self, &bound).and_then(|outputs| self.subgraph_outputs(&outputs));
        let built = std::mem::replace(&mut self.model.main, outer_main);
        self.values.leave(values);
        self.materialized = outer_materialized;
        let outputs = result?;
        self.model.referenced.push(built);
        Ok(BuiltSubgraph {
            graph: self.model.referenced.len() as u64,
            outputs,
        })
    }

    /// Adds an input to the subgraph being built, bound to its name when it has one.
    pub(super) fn subgraph_input(&mut self, spec: &InputSpec) -> TensorValue {
        let mut operand = spec.operand.clone();
        operand.lifetime = Lifetime::SubgraphInput;
        operand.location = Default::default();
        operand.name = spec.name.clone();
        let index = self.model.add_operand(operand);
        self.model.main.inputs.push(index);
        let tv = TensorValue {
            operand: index,
            dtype: spec.dtype,
            scalar: spec.scalar,
        };
        if !spec.name.is_empty() {
            self.values.insert(spec.name.clone(), Value::Tensor(tv));
        }
        tv
    }

    /// Makes `values` the outputs of the subgraph being built: each is written by an
    /// operation of its own (a copy when it is an input, a constant, or already listed).
    fn subgraph_outputs(&mut self, values: &[(String, Value)]) -> NResult<Vec<TensorValue>> {
        let mut outputs = Vec::with_capacity(values.len());
        for (name, value) in values {
            let mut tv = self.materialize(name, value)?;
            let operand = &self.model.main.operands[tv.operand as usize];
            if operand.lifetime != Lifetime::TemporaryVariable
                || self.model.main.outputs.contains(&tv.operand)
            {
                let template = copy_template(operand);
                tv.operand = self.emit_raw(
                    OperationType::Cast,
                    vec![tv.operand],
                    vec![Some(template)],
                    name,
                )?[0];
            }
            let operand = &mut self.model.main.operands[tv.operand as usize];
            operand.lifetime = Lifetime::SubgraphOutput;
            if operand.name.is_empty() {
                operand.name = name.clone();
            }
            self.model.main.outputs.push(tv.operand);
            outputs.push(tv);
        }
        Ok(outputs)
    }
}

/// The dimensions a graph output declares, when every one is a positive number.
fn declared_static_dims(o: &ValueInfoProto) -> Option<Vec<u32>> {
    use crate::onnx::proto::tensor_shape_proto::dimension::Value as D;
    let Some(crate::onnx::proto::type_proto::Value::TensorType(tt)) =
        o.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return None;
    };
    tt.shape
        .as_ref()?
        .dim
        .iter()
        .map(|d| match d.value {
            Some(D::DimValue(v)) if v >= 1 && v <= i64::from(i32::MAX) => Some(v as u32),
            _ => None,
        })
        .collect()
}

/// The output template of a copy of `operand`: same type and quantization.
fn copy_template(operand: &Operand) -> Operand {
    let mut template = Operand::new(operand.operand_type, vec![]);
    template.scale = operand.scale;
    template.zero_point = operand.zero_point;
    template
}

/// The graph held by attribute `name`.
pub(super) fn graph_attribute<'a>(n: &Node<'a>, name: &str) -> NResult<&'a GraphProto> {
    n.proto
        .attribute
        .iter()
        .find(|a| a.name == name)
        .and_then(|a| a.g.as_ref())
        .ok_or_else(|| NodeError::Invalid(format!("{} needs the graph attribute '{name}'", n.op())))
}

/// An error met inside a subgraph, with the subgraph named in its location.
fn nested_in(e: crate::error::CompileError, what: &str) -> NodeError {
    use crate::error::CompileError;
    NodeError::Nested(Box::new(match e {
        CompileError::InvalidModel { location, message } => CompileError::InvalidModel {
            location: format!("{what}: {location}"),
            message,
        },
        CompileError::Limit { location, error } => CompileError::Limit {
            location: format!("{what}: {location}"),
            error,
        },
        other => other,
    }))
}
