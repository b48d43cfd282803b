//! Lowering ONNX nodes to NN operations.
//!
//! The [`Lowerer`] keeps a table from ONNX value names to either a compile-time constant
//! or an NN operand. Constants stay unmaterialized until an operation needs them as an
//! operand, so shape arithmetic folds away and weights can be re-laid-out (OIHW -> OHWI)
//! before they become operands. Every emitted operation gets its output shapes from
//! [`nnc_formats::nn::ops::infer`], the same definition the validator and runtime
//! use.
//!
//! Parameters that ONNX passes as tensors (reduction axes, Reshape's shape, Slice's
//! starts/ends/axes/steps, Pad's pads, Split's sizes, Tile's repeats, Expand's shape,
//! Clip's bounds, convolution weights, normalization statistics) may be computed at run
//! time. They are lowered to NN operations that take the same parameter as a tensor
//! operand (REDUCE_*, RESHAPE, STRIDED_SLICE, PAD, SLICE, TILE, FILL, ...), with ONNX's own
//! index normalization computed by NN integer operations; the output shapes are then
//! known only at run time, and the executor checks them against what is declared here.
//! Where the NN set takes such a parameter only as a scalar (TOPK_V2's k, the RESIZE_*
//! output size) or fixes it per operand (quantization), a run-time value is reported as
//! [`NodeError::NeedsConstant`], naming the values; the importer traces them back to
//! graph inputs, which `--bind-input` (or `nnc run`, from its input files) can bind.
//!
//! Each submodule lowers one family of operators.

mod activation;
mod attention;
mod control;
mod conv;
mod detection;
mod dynamic_quant;
mod einsum;
mod elementwise;
mod grid;
mod loops;
mod loss;
mod matmul;
mod ml;
mod normalization;
mod pool;
mod quant;
mod recurrent;
mod reduce;
pub mod registry;
mod resize;
mod scatter;
mod shape;
mod transformer;

use std::collections::HashMap;
use std::rc::Rc;

use nnc_formats::nn::ops::{InputView, infer};
use nnc_formats::nn::{IoInfo, Lifetime, MathFunction, Model, Operand, OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::attrs::Attrs;
use super::constant::{self, ConstTensor};
use super::proto::{GraphProto, NodeProto, tensor_proto};
use super::tensor::{ExternalDataContext, tensor_to_host};
use super::{ImportOptions, nn_type_for, node_label};
use crate::error::CompileError;

/// Why a node could not be lowered.
#[derive(Debug)]
pub enum NodeError {
    /// Well-formed, but beyond what nnc lowers (listed in the unsupported report).
    Unsupported(String),
    /// The node breaks ONNX's rules (a malformed model).
    Invalid(String),
    /// Well-formed, but it needs the values named in `values` (inputs of the node) at
    /// compile time, and they are computed at run time. Binding the graph inputs they
    /// derive from (`--bind-input`) makes them constants.
    NeedsConstant { values: Vec<String>, reason: String },
    /// Well-formed, but it needs dimensions that are unknown until run time (they come
    /// from a graph input's dynamic dimensions): `--input-shape` fixes them. The report
    /// names the inputs and a shape to give.
    NeedsInputShape(String),
    /// Lowering it would exceed a resource limit.
    Limit(nnc_formats::limits::LimitError),
    /// A node inside one of its subgraphs (an If branch, a Loop body) failed in a way
    /// that ends the import (malformed, or over a limit), already located there.
    Nested(Box<CompileError>),
}

pub type NResult<T> = Result<T, NodeError>;

pub(crate) fn unsupported<T>(message: impl Into<String>) -> NResult<T> {
    Err(NodeError::Unsupported(message.into()))
}

/// The node needs dimensions a graph input leaves unknown (see [`NodeError::NeedsInputShape`]).
pub(crate) fn needs_input_shape<T>(message: impl Into<String>) -> NResult<T> {
    Err(NodeError::NeedsInputShape(message.into()))
}

pub(crate) fn invalid<T>(message: impl Into<String>) -> NResult<T> {
    Err(NodeError::Invalid(message.into()))
}

impl From<String> for NodeError {
    /// Attribute and constant-evaluation errors describe malformed nodes.
    fn from(message: String) -> NodeError {
        NodeError::Invalid(message)
    }
}

impl From<constant::EvalError> for NodeError {
    fn from(e: constant::EvalError) -> NodeError {
        match e {
            constant::EvalError::Invalid(m) => NodeError::Invalid(m),
            constant::EvalError::Limit(l) => NodeError::Limit(l),
        }
    }
}

impl From<nnc_formats::limits::LimitError> for NodeError {
    fn from(e: nnc_formats::limits::LimitError) -> NodeError {
        NodeError::Limit(e)
    }
}

/// A value of the ONNX graph.
#[derive(Clone, Debug)]
pub enum Value {
    /// Known at compile time.
    Const(Rc<ConstTensor>),
    /// Computed at run time into an NN operand.
    Tensor(TensorValue),
}

/// A run-time value: its operand, its ONNX element type, and whether ONNX sees it as
/// rank 0 (the NN operand then has dimensions `[1]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorValue {
    pub operand: u32,
    pub dtype: DataType,
    pub scalar: bool,
}

/// The node being lowered.
pub struct Node<'a> {
    pub proto: &'a NodeProto,
    pub attrs: Attrs<'a>,
    pub label: String,
    /// The operator's definition in force (its ONNX since version).
    pub version: i64,
}

impl Node<'_> {
    pub fn op(&self) -> &str {
        &self.proto.op_type
    }
}

/// A name table whose changes inside a scope can be undone. Subgraphs (If branches,
/// loop bodies) bind names that must vanish when the subgraph is done; copying the whole
/// table for each would make a model of many small Ifs quadratic.
pub struct ScopedTable<V> {
    map: HashMap<String, V>,
    /// What each insert inside a scope replaced, to undo it when the scope ends.
    journal: Vec<(String, Option<V>)>,
    depth: usize,
}

impl<V> Default for ScopedTable<V> {
    fn default() -> Self {
        ScopedTable {
            map: HashMap::new(),
            journal: Vec::new(),
            depth: 0,
        }
    }
}

impl<V> ScopedTable<V> {
    pub fn get(&self, name: &str) -> Option<&V> {
        self.map.get(name)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    pub fn insert(&mut self, name: String, value: V) {
        let previous = self.map.insert(name.clone(), value);
        if self.depth > 0 {
            self.journal.push((name, previous));
        }
    }

    /// Removes `name` when no scope is open (inside one, a removal would have to be
    /// undone too); returns whether it did.
    pub fn remove_outside_scopes(&mut self, name: &str) -> bool {
        self.depth == 0 && self.map.remove(name).is_some()
    }

    /// Opens a scope; [`Self::leave`] with the mark undoes every insert made since.
    pub fn enter(&mut self) -> usize {
        self.depth += 1;
        self.journal.len()
    }

    pub fn leave(&mut self, mark: usize) {
        while self.journal.len() > mark {
            let Some((name, previous)) = self.journal.pop() else {
                break;
            };
            match previous {
                Some(v) => {
                    self.map.insert(name, v);
                }
                None => {
                    self.map.remove(&name);
                }
            }
        }
        self.depth = self.depth.saturating_sub(1);
    }
}

pub struct Lowerer<'e> {
    pub model: Model,
    values: ScopedTable<Value>,
    /// Constant name -> its materialized operand, so a shared constant becomes one operand.
    materialized: ScopedTable<TensorValue>,
    pub opset: i64,
    ext: &'e ExternalDataContext,
    pub limits: nnc_formats::limits::Limits,
    /// What compile-time evaluation may still allocate.
    pub budget: constant::FoldBudget,
    /// Whether a float64 value was met (it computes as float32; the import notes it).
    pub computes_float64_as_float32: bool,
    /// The operator sets the model imports (subgraph nodes are resolved against them).
    pub opsets: registry::Opsets,
    /// How many graph attributes enclose the nodes being lowered now.
    pub nesting: usize,
    /// If nodes folded at compile time: which branch -> count (`nnc inspect` lists them).
    pub folded_ifs: std::collections::BTreeMap<String, usize>,
    /// Nodes inside subgraphs that cannot be lowered, for the unsupported report.
    pub nested_unsupported: crate::error::UnsupportedReport,
    /// What the user should know about how a node was read (printed as warnings).
    pub notes: Vec<String>,
    /// What the pre-lowering rewrites did (`onnx/fuse.rs`), for the unsupported report.
    pub rewrites: super::fuse::RewriteNotes,
}

impl<'e> Lowerer<'e> {
    pub fn new(
        opset: i64,
        ext: &'e ExternalDataContext,
        limits: &nnc_formats::limits::Limits,
    ) -> Lowerer<'e> {
        Lowerer {
            model: Model::default(),
            values: ScopedTable::default(),
            materialized: ScopedTable::default(),
            opset,
            ext,
            limits: *limits,
            budget: constant::FoldBudget::new(limits, 0),
            computes_float64_as_float32: false,
            opsets: registry::Opsets::default(),
            nesting: 0,
            folded_ifs: Default::default(),
            nested_unsupported: crate::error::UnsupportedReport::new("ONNX"),
            notes: Vec::new(),
            rewrites: Default::default(),
        }
    }

    pub fn finish(self) -> Model {
        self.model
    }

    /// Forgets the compile-time constant `name` once no node is left to read it (at the
    /// main graph's level only): an initializer's copy of the weights is dropped as soon
    /// as its NN operand exists, so a model's weights are not held twice while it is
    /// lowered.
    pub fn release_constant(&mut self, name: &str) {
        if matches!(self.values.get(name), Some(Value::Const(_))) {
            self.values.remove_outside_scopes(name);
        }
    }

    /// Converts the graph's initializers to compile-time constants; `release` is told
    /// of each one's source bytes once they are copied.
    pub fn add_initializers(
        &mut self,
        graph: &GraphProto,
        release: Option<&crate::onnx::SourceRelease>,
    ) -> Result<(), CompileError> {
        if let Some(sparse) = graph.sparse_initializer.first() {
            let name = sparse
                .values
                .as_ref()
                .map(|v| v.name.as_str())
                .unwrap_or("");
            let mut report = crate::error::UnsupportedReport::new("ONNX");
            report.add(
                "sparse_initializer",
                name,
                "sparse initializers are not supported",
            );
            return Err(CompileError::Unsupported(report));
        }
        let mut weight_bytes = 0u64;
        for t in &graph.initializer {
            let host = tensor_to_host(t, self.ext)?;
            if let (Some(release), Some(raw)) = (release, &t.raw_data) {
                release.release(raw);
            }
            weight_bytes = weight_bytes.saturating_add(host.data.len() as u64);
            self.values
                .insert(t.name.clone(), Value::Const(Rc::new(host)));
        }
        // Folding may transform the model's own weights (dequantize, re-lay out) freely.
        self.budget = constant::FoldBudget::new(&self.limits, weight_bytes);
        Ok(())
    }

    pub fn add_inputs(
        &mut self,
        graph: &GraphProto,
        options: &ImportOptions,
    ) -> Result<(), CompileError> {
        let real_inputs: Vec<_> = graph
            .input
            .iter()
            .filter(|i| !self.values.contains_key(&i.name))
            .collect();
        for (name, value) in &options.bound_inputs {
            let Some(input) = real_inputs.iter().find(|i| &i.name == name) else {
                let names: Vec<&str> = real_inputs.iter().map(|i| i.name.as_str()).collect();
                return Err(CompileError::Options(format!(
                    "--bind-input names '{name}', but the model's inputs are: {}",
                    names.join(", ")
                )));
            };
            if options.input_shapes.contains_key(name) {
                return Err(CompileError::Options(format!(
                    "'{name}' is given both --bind-input and --input-shape; a bound input's \
                     shape is its value's"
                )));
            }
            check_bound_input(&super::declared_input(input), value)?;
        }
        for (name, value) in &options.bound_inputs {
            self.values
                .insert(name.clone(), Value::Const(Rc::new(value.clone())));
        }
        let real_inputs: Vec<_> = real_inputs
            .into_iter()
            .filter(|i| !options.bound_inputs.contains_key(&i.name))
            .collect();
        for name in options.input_shapes.keys() {
            if !real_inputs.iter().any(|i| &i.name == name) {
                let names: Vec<&str> = real_inputs.iter().map(|i| i.name.as_str()).collect();
                return Err(CompileError::Options(format!(
                    "--input-shape names '{name}', but the model's inputs are: {}",
                    names.join(", ")
                )));
            }
        }
        // A trailing input with a static zero-sized dimension has no elements, so its
        // value is fully known: it becomes an empty constant instead of a model input
        // (the NN set has no empty tensors). Only trailing ones, so that the remaining
        // inputs keep their positions.
        let static_empty = |i: &super::proto::ValueInfoProto| -> bool {
            use super::proto::tensor_shape_proto::dimension::Value as D;
            match i.r#type.as_ref().and_then(|t| t.value.as_ref()) {
                Some(super::proto::type_proto::Value::TensorType(tt)) => {
                    tt.shape.as_ref().is_some_and(|s| {
                        s.dim
                            .iter()
                            .any(|d| matches!(d.value, Some(D::DimValue(0))))
                            && s.dim
                                .iter()
                                .all(|d| matches!(d.value, Some(D::DimValue(_))))
                    }) && !options.input_shapes.contains_key(&i.name)
                }
                _ => false,
            }
        };
        let mut real_inputs = real_inputs;
        while let Some(last) = real_inputs.last() {
            if !static_empty(last) {
                break;
            }
            let Some(super::proto::type_proto::Value::TensorType(tt)) =
                last.r#type.as_ref().and_then(|t| t.value.as_ref())
            else {
                break;
            };
            let Some(dtype) = super::tensor::host_data_type(tt.elem_type) else {
                break;
            };
            use super::proto::tensor_shape_proto::dimension::Value as D;
            let shape: Vec<usize> = tt
                .shape
                .iter()
                .flat_map(|s| s.dim.iter())
                .map(|d| match d.value {
                    Some(D::DimValue(v)) => usize::try_from(v).unwrap_or(0),
                    _ => 0,
                })
                .collect();
            self.values.insert(
                last.name.clone(),
                Value::Const(Rc::new(ConstTensor {
                    dtype,
                    shape,
                    data: Vec::new(),
                })),
            );
            real_inputs.pop();
        }
        for input in real_inputs {
            let location = format!("graph input '{}'", input.name);
            let Some(super::proto::type_proto::Value::TensorType(tt)) =
                input.r#type.as_ref().and_then(|t| t.value.as_ref())
            else {
                let mut report = crate::error::UnsupportedReport::new("ONNX");
                report.add(
                    "input",
                    &input.name,
                    "only tensor-typed inputs are supported",
                );
                return Err(CompileError::Unsupported(report));
            };
            let Some(dtype) = super::tensor::host_data_type(tt.elem_type) else {
                let known = tensor_proto::DataType::try_from(tt.elem_type)
                    .is_ok_and(|t| t != tensor_proto::DataType::Undefined);
                if !known {
                    return Err(CompileError::invalid(
                        location,
                        format!(
                            "element type {} is not an ONNX data type",
                            tensor_proto::DataType::describe(tt.elem_type)
                        ),
                    ));
                }
                // A valid type nnc does not compute with (string, bfloat16, float8, int4,
                // complex): the model is fine, nnc is not.
                let mut report = crate::error::UnsupportedReport::new("ONNX");
                report.add(
                    "input",
                    &input.name,
                    format!(
                        "{} inputs are not supported",
                        tensor_proto::DataType::describe(tt.elem_type)
                    ),
                );
                return Err(CompileError::Unsupported(report));
            };
            self.computes_float64_as_float32 |= dtype == DataType::F64;
            let operand_type = nn_type_for(dtype);
            let mut dims = Vec::new();
            if let Some(shape) = &tt.shape {
                for (k, d) in shape.dim.iter().enumerate() {
                    use super::proto::tensor_shape_proto::dimension::Value as D;
                    let v = match &d.value {
                        Some(D::DimValue(v)) if *v >= 1 && *v <= i64::from(i32::MAX) => *v as u32,
                        Some(D::DimValue(0)) => {
                            let mut report = crate::error::UnsupportedReport::new("ONNX");
                            report.add(
                                "input",
                                &input.name,
                                format!(
                                    "dimension {k} has size 0 (empty tensors are not supported)"
                                ),
                            );
                            return Err(CompileError::Unsupported(report));
                        }
                        // paddle2onnx and some older exporters write -1 for a dynamic
                        // dimension; ONNX's own form is a symbolic or absent value.
                        Some(D::DimValue(-1)) => 0,
                        Some(D::DimValue(v)) => {
                            return Err(CompileError::invalid(
                                location.clone(),
                                format!("dimension {k} is {v}, outside 1..={}", i32::MAX),
                            ));
                        }
                        _ => 0,
                    };
                    dims.push(v);
                }
            } else if !options.input_shapes.contains_key(&input.name) {
                let mut report = crate::error::UnsupportedReport::new("ONNX");
                report.add(
                    "input",
                    &input.name,
                    format!(
                        "declares no shape (not even its rank); give its whole shape with \
                         --input-shape {}=D0,D1,...",
                        input.name
                    ),
                );
                return Err(CompileError::Unsupported(report));
            }
            if let Some(fixed) = options.input_shapes.get(&input.name) {
                let declared = || {
                    let shown: Vec<String> = dims
                        .iter()
                        .map(|&d| if d == 0 { "?".into() } else { d.to_string() })
                        .collect();
                    format!("rank {} [{}]", dims.len(), shown.join(", "))
                };
                let given: Vec<String> = fixed.iter().map(u32::to_string).collect();
                if tt.shape.is_some() && fixed.len() != dims.len() {
                    return Err(CompileError::Options(format!(
                        "--input-shape {}={}: rank {} given, but the model declares input '{}' \
                         with {}",
                        input.name,
                        given.join("x"),
                        fixed.len(),
                        input.name,
                        declared()
                    )));
                }
                if let Some(k) = (0..dims.len()).find(|&k| dims[k] != 0 && dims[k] != fixed[k]) {
                    return Err(CompileError::Options(format!(
                        "--input-shape {}={}: dimension {k} is fixed to {} by the model, which \
                         declares input '{}' with {}",
                        input.name,
                        given.join("x"),
                        dims[k],
                        input.name,
                        declared()
                    )));
                }
                dims = fixed.clone();
            }
            // A declared shape is checked before any lowering loops over its extents.
            if !dims.contains(&0) {
                self.limits
                    .check_tensor(
                        || format!("graph input '{}'", input.name),
                        nnc_formats::limits::element_count(&dims),
                        dtype.size() as u64,
                    )
                    .map_err(|e| CompileError::limit(location.clone(), e))?;
            }
            let scalar = dims.is_empty();
            let mut operand = plain_quant8(Operand::new(
                operand_type,
                if scalar { vec![1] } else { dims.clone() },
            ))
            .with_name(&input.name);
            operand.lifetime = Lifetime::SubgraphInput;
            let index = self.model.add_operand(operand);
            self.model.main.inputs.push(index);
            // Float16 values compute as TENSOR_FLOAT32 (the NN set's relaxed precision,
            // here the other way round: never less precise than float16); the model's
            // input stays TENSOR_FLOAT16 and is converted once.
            let index = if operand_type == OperandType::TensorFloat16 {
                self.emit_raw(
                    OperationType::Cast,
                    vec![index],
                    vec![Some(Operand::new(OperandType::TensorFloat32, vec![]))],
                    &input.name,
                )
                .map_err(|e| node_error_to_compile(e, &location))?[0]
            } else {
                index
            };
            self.model.input_info.push(IoInfo {
                name: input.name.clone(),
                dtype,
                dims,
            });
            self.values.insert(
                input.name.clone(),
                Value::Tensor(TensorValue {
                    operand: index,
                    dtype,
                    scalar,
                }),
            );
        }
        Ok(())
    }

    pub fn add_outputs(&mut self, graph: &GraphProto) -> Result<(), CompileError> {
        for output in &graph.output {
            let location = format!("graph output '{}'", output.name);
            let value = self
                .values
                .get(&output.name)
                .cloned()
                .ok_or_else(|| CompileError::invalid(location.clone(), "was never computed"))?;
            let mut tv = self
                .materialize(&output.name, &value)
                .map_err(|e| node_error_to_compile(e, &location))?;
            let operand = &self.model.main.operands[tv.operand as usize];
            if tv.dtype == DataType::F16 && operand.operand_type == OperandType::TensorFloat32 {
                // Float16 computed as float32 is rounded to float16 at the output.
                tv.operand = self
                    .emit_raw(
                        OperationType::Cast,
                        vec![tv.operand],
                        vec![Some(Operand::new(OperandType::TensorFloat16, vec![]))],
                        &output.name,
                    )
                    .map_err(|e| node_error_to_compile(e, &location))?[0];
            }
            let operand = &self.model.main.operands[tv.operand as usize];
            // An output must be written by an operation of its own: copy inputs,
            // constants and values already listed as outputs.
            if operand.lifetime != Lifetime::TemporaryVariable {
                let dims = operand.dimensions.clone();
                let shape = self
                    .model
                    .add_i32_vector(&dims.iter().map(|&d| d as i32).collect::<Vec<_>>());
                let copy = self
                    .emit_raw(
                        OperationType::Reshape,
                        vec![tv.operand, shape],
                        vec![None],
                        &output.name,
                    )
                    .map_err(|e| node_error_to_compile(e, &location))?;
                tv.operand = copy[0];
            }
            let operand = &mut self.model.main.operands[tv.operand as usize];
            operand.lifetime = Lifetime::SubgraphOutput;
            operand.name = output.name.clone();
            let dims = if tv.scalar {
                Vec::new()
            } else {
                operand.dimensions.clone()
            };
            self.model.main.outputs.push(tv.operand);
            self.model.output_info.push(IoInfo {
                name: output.name.clone(),
                dtype: tv.dtype,
                dims,
            });
        }
        Ok(())
    }

    /// Lowers one node with its registry entry, resolved for the node's definition
    /// `version` (see [`registry::resolve`]).
    pub fn lower_node(
        &mut self,
        proto: &NodeProto,
        op: &registry::OnnxOp,
        version: i64,
    ) -> NResult<()> {
        let node = Node {
            proto,
            attrs: Attrs::new(proto),
            label: node_label(proto),
            version,
        };
        (op.lower)(self, &node)?;
        self.round_narrow_outputs(&node)
    }

    /// Bfloat16, float8 and float4 compute as float32; an operation on them rounds its
    /// result to the format, as their kernels do (compute wide, store narrow), so that
    /// values stay what the source model's arithmetic gives. Casts and quantization
    /// round by themselves; operations that only move values need no rounding.
    fn round_narrow_outputs(&mut self, n: &Node) -> NResult<()> {
        const EXACT: &[&str] = &[
            "Cast",
            "CastLike",
            "QuantizeLinear",
            "DequantizeLinear",
            "Identity",
            "Reshape",
            "Flatten",
            "Squeeze",
            "Unsqueeze",
            "Transpose",
            "Slice",
            "Gather",
            "GatherElements",
            "GatherND",
            "Concat",
            "Split",
            "Expand",
            "Tile",
            "Pad",
            "Shape",
            "Size",
            "DepthToSpace",
            "SpaceToDepth",
            "Neg",
            "Abs",
            "Relu",
            "Max",
            "Min",
            "ReduceMax",
            "ReduceMin",
            "MaxPool",
            "Where",
            "Constant",
            "If",
            "Loop",
            "Scan",
        ];
        if EXACT.contains(&n.op()) {
            return Ok(());
        }
        for (i, name) in n.proto.output.iter().enumerate() {
            let Some(Value::Tensor(tv)) = self.values.get(name).cloned() else {
                continue;
            };
            let Some(format) = tv.dtype.float_format() else {
                continue;
            };
            if self.operand_type(tv) != OperandType::TensorFloat32 {
                continue;
            }
            let code = self.i32_const(MathFunction::rounding(format, false) as i32);
            let rounded = self.emit_raw(
                OperationType::MathUnary,
                vec![tv.operand, code],
                vec![None],
                &n.label,
            )?[0];
            self.set_output(
                n,
                i,
                Value::Tensor(TensorValue {
                    operand: rounded,
                    ..tv
                }),
            );
        }
        Ok(())
    }

    // ---- value access -------------------------------------------------------------

    /// The name of input `i`, or `None` when absent or omitted (empty name).
    pub fn input_name<'n>(&self, n: &'n Node, i: usize) -> Option<&'n str> {
        n.proto
            .input
            .get(i)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    pub fn input(&self, n: &Node, i: usize) -> NResult<Option<Value>> {
        match self.input_name(n, i) {
            None => Ok(None),
            Some(name) => match self.values.get(name) {
                Some(v) => Ok(Some(v.clone())),
                None => invalid(format!("input '{name}' has no value")),
            },
        }
    }

    pub fn required(&self, n: &Node, i: usize) -> NResult<Value> {
        self.input(n, i)?
            .map_or_else(|| invalid(format!("{} needs input {i}", n.op())), Ok)
    }

    /// Input `i` as a compile-time constant; run-time values are unsupported.
    pub fn const_input(&self, n: &Node, i: usize) -> NResult<Option<Rc<ConstTensor>>> {
        match self.input(n, i)? {
            None => Ok(None),
            Some(Value::Const(c)) => Ok(Some(c)),
            Some(Value::Tensor(_)) => Err(self.needs_constant(
                n,
                &[i],
                format!(
                    "input {i} ('{}') must be known at compile time, but is computed at run time",
                    self.input_name(n, i).unwrap_or("")
                ),
            )),
        }
    }

    /// The error for a node that needs inputs `indices` at compile time: those of them
    /// that are run-time values are named, so that the importer can tell which graph
    /// inputs would have to be bound.
    pub fn needs_constant(
        &self,
        n: &Node,
        indices: &[usize],
        reason: impl Into<String>,
    ) -> NodeError {
        let values = indices
            .iter()
            .filter_map(|&i| self.input_name(n, i))
            .filter(|name| matches!(self.values.get(name), Some(Value::Tensor(_))))
            .map(str::to_string)
            .collect();
        NodeError::NeedsConstant {
            values,
            reason: reason.into(),
        }
    }

    pub fn required_const(&self, n: &Node, i: usize) -> NResult<Rc<ConstTensor>> {
        self.const_input(n, i)?
            .map_or_else(|| invalid(format!("{} needs input {i}", n.op())), Ok)
    }

    /// Input `i` as an operand (constants are materialized).
    pub fn tensor(&mut self, n: &Node, i: usize) -> NResult<TensorValue> {
        let name = self
            .input_name(n, i)
            .ok_or_else(|| NodeError::Invalid(format!("{} needs input {i}", n.op())))?
            .to_string();
        let value = self.required(n, i)?;
        self.materialize(&name, &value)
    }

    /// The operand holding `value` (materializing a constant once per name).
    pub fn materialize(&mut self, name: &str, value: &Value) -> NResult<TensorValue> {
        match value {
            Value::Tensor(tv) => Ok(*tv),
            Value::Const(c) => {
                if let Some(tv) = self.materialized.get(name) {
                    return Ok(*tv);
                }
                let tv = self.const_operand(c)?;
                self.model.main.operands[tv.operand as usize].name = name.to_string();
                self.materialized.insert(name.to_string(), tv);
                Ok(tv)
            }
        }
    }

    /// A new constant operand holding `c` in its NN type.
    pub fn const_operand(&mut self, c: &ConstTensor) -> NResult<TensorValue> {
        self.const_operand_owned(c.clone())
    }

    /// [`Lowerer::const_operand`] taking the constant by value: float32, bool and 8-bit
    /// data become the operand's storage without another copy.
    pub fn const_operand_owned(&mut self, c: ConstTensor) -> NResult<TensorValue> {
        let scalar = c.shape.is_empty();
        let dims: Vec<u32> = if scalar {
            vec![1]
        } else {
            c.shape
                .iter()
                .map(|&d| {
                    if d == 0 {
                        unsupported("empty (zero-sized) tensors are not supported")
                    } else {
                        u32::try_from(d)
                            .map_err(|_| NodeError::Invalid(format!("dimension {d} is too large")))
                    }
                })
                .collect::<NResult<_>>()?
        };
        let dtype = c.dtype;
        let (operand_type, bytes) = match super::nn_type_for(c.dtype) {
            _ if c.dtype == DataType::F32 => (OperandType::TensorFloat32, c.data),
            // Every other float (float16 too: only model inputs and outputs are
            // TENSOR_FLOAT16) computes as float32.
            OperandType::TensorFloat32 | OperandType::TensorFloat16 => (
                OperandType::TensorFloat32,
                bytemuck::cast_slice(&constant::to_f32s(&c)).to_vec(),
            ),
            OperandType::TensorInt32 => {
                let values = constant::to_i64s(&c);
                let mut out = Vec::with_capacity(values.len() * 4);
                for v in values {
                    let v32 = i32::try_from(v).map_err(|_| {
                        NodeError::Unsupported(format!(
                            "integer constant {v} does not fit the NN set's 32-bit integers"
                        ))
                    })?;
                    out.extend_from_slice(&v32.to_le_bytes());
                }
                (OperandType::TensorInt32, out)
            }
            // Bool and the 8-bit types, whose bytes are the operand's (the sub-byte
            // integers are held one per byte, extended).
            t => (t, c.data),
        };
        self.computes_float64_as_float32 |= dtype == DataType::F64;
        let operand = self
            .model
            .add_constant_owned(plain_quant8(Operand::new(operand_type, dims)), bytes);
        // The label keeps the ONNX type: every integer type computes as TENSOR_INT32.
        Ok(TensorValue {
            operand,
            dtype,
            scalar,
        })
    }

    /// The ONNX-level shape of a value (`0` for unknown dimensions, `[]` for scalars).
    pub fn shape_of_value(&self, value: &Value) -> Vec<u32> {
        match value {
            Value::Const(c) => c.shape.iter().map(|&d| d as u32).collect(),
            Value::Tensor(tv) => self.dims(*tv),
        }
    }

    /// The ONNX-level shape of an operand value.
    pub fn dims(&self, tv: TensorValue) -> Vec<u32> {
        if tv.scalar {
            Vec::new()
        } else {
            self.model.main.operands[tv.operand as usize]
                .dimensions
                .clone()
        }
    }

    /// The shape, which must be fully known.
    pub fn known_dims(&self, tv: TensorValue) -> NResult<Vec<u32>> {
        let dims = self.dims(tv);
        if dims.contains(&0) {
            return needs_input_shape(
                "needs the input dimensions at compile time; fix dynamic dimensions with --input-shape",
            );
        }
        Ok(dims)
    }

    pub fn rank(&self, tv: TensorValue) -> usize {
        if tv.scalar {
            0
        } else {
            self.model.main.operands[tv.operand as usize]
                .dimensions
                .len()
        }
    }

    pub fn operand_type(&self, tv: TensorValue) -> OperandType {
        self.model.main.operands[tv.operand as usize].operand_type
    }

    /// Binds output `i` of the node.
    pub fn set_output(&mut self, n: &Node, i: usize, value: Value) {
        if let Some(name) = n.proto.output.get(i).filter(|s| !s.is_empty()) {
            if let Value::Tensor(tv) = &value {
                let operand = &mut self.model.main.operands[tv.operand as usize];
                if operand.name.is_empty() {
                    operand.name = name.clone();
                }
            }
            self.values.insert(name.clone(), value);
        }
    }

    pub fn set_tensor(&mut self, n: &Node, i: usize, operand: u32, dtype: DataType, scalar: bool) {
        // ONNX float16 computes as TENSOR_FLOAT32 (see `add_inputs`): a float result of an
        // operator whose float inputs are float16 is float16 too, except where the
        // operator chooses its output type. The same for float64, bfloat16 and float8.
        let dtype = if dtype == DataType::F32
            && !matches!(n.op(), "Cast" | "CastLike" | "DequantizeLinear")
            && let Some(float) = self.float_input_type(n).filter(|&t| t != DataType::F32)
        {
            float
        } else {
            dtype
        };
        self.set_output(
            n,
            i,
            Value::Tensor(TensorValue {
                operand,
                dtype,
                scalar,
            }),
        );
    }

    /// The element type of the node's first float input (float16 or float32), if any.
    fn float_input_type(&self, n: &Node) -> Option<DataType> {
        (0..n.proto.input.len()).find_map(|i| {
            let dtype = match self.input(n, i).ok()?? {
                Value::Tensor(tv) => tv.dtype,
                Value::Const(c) => c.dtype,
            };
            is_float(dtype).then_some(dtype)
        })
    }

    /// Binds output `i` to a constant the importer evaluated, charging it to the fold
    /// budget.
    pub fn set_const(&mut self, n: &Node, i: usize, c: ConstTensor) -> NResult<()> {
        self.budget.charge(&c)?;
        self.set_output(n, i, Value::Const(Rc::new(c)));
        Ok(())
    }

    /// True when output `i` is consumed (named).
    pub fn output_used(&self, n: &Node, i: usize) -> bool {
        n.proto.output.get(i).is_some_and(|s| !s.is_empty())
    }

    // ---- emission -----------------------------------------------------------------

    /// Emits an operation; each output is described by a template operand (type and
    /// quantization) or `None` (type inferred). Dimensions always come from inference.
    pub fn emit_raw(
        &mut self,
        op: OperationType,
        inputs: Vec<u32>,
        outputs: Vec<Option<Operand>>,
        source: &str,
    ) -> NResult<Vec<u32>> {
        let templates: Vec<Operand> = outputs
            .into_iter()
            .map(|t| t.unwrap_or_else(|| Operand::new(OperandType::TensorFloat32, vec![])))
            .collect();
        let inferred = {
            let views: Vec<InputView> = inputs
                .iter()
                .map(|&i| InputView {
                    operand: &self.model.main.operands[i as usize],
                    value: self.model.constant_bytes(i),
                })
                .collect();
            let declared: Vec<&Operand> = templates.iter().collect();
            infer(op, &views, &declared).map_err(|e| {
                NodeError::Invalid(format!("lowering produced an invalid {}: {e}", op.name()))
            })?
        };
        let mut out = Vec::with_capacity(templates.len());
        for (mut template, shape) in templates.into_iter().zip(inferred) {
            template.operand_type = shape.operand_type;
            template.dimensions = shape.dimensions;
            if is_quant8(template.operand_type) && template.scale == 0.0 {
                // A quantized output nobody parameterized keeps the quantization of its
                // first input of the same type: what data movement, MAXIMUM/MINIMUM and
                // MAX_POOL_2D require. Arithmetic passes explicit templates.
                if let Some(q) = inputs
                    .iter()
                    .map(|&i| &self.model.main.operands[i as usize])
                    .find(|o| o.operand_type == template.operand_type)
                {
                    template.scale = q.scale;
                    template.zero_point = q.zero_point;
                }
            }
            template.lifetime = Lifetime::TemporaryVariable;
            out.push(self.model.add_operand(template));
        }
        self.model.add_operation(op, inputs, out.clone(), source);
        Ok(out)
    }

    /// Emits a single-output operation with an inferred output type.
    pub fn emit(&mut self, n: &Node, op: OperationType, inputs: Vec<u32>) -> NResult<u32> {
        Ok(self.emit_raw(op, inputs, vec![None], &n.label)?[0])
    }

    /// Emits a single-output operation whose output rank inference cannot tell (its
    /// parameters are computed at run time): `dims` (0 = unknown) is declared instead;
    /// the executor checks the actual shape against it.
    pub fn emit_declared(
        &mut self,
        n: &Node,
        op: OperationType,
        inputs: Vec<u32>,
        dims: Vec<u32>,
    ) -> NResult<u32> {
        let out = self.emit(n, op, inputs)?;
        let operand = &mut self.model.main.operands[out as usize];
        if operand.dimensions.is_empty() {
            operand.dimensions = dims;
        }
        Ok(out)
    }

    /// Emits `CAST(x)` to `to`.
    pub fn cast_op(&mut self, n: &Node, x: u32, to: OperandType) -> NResult<u32> {
        Ok(self.emit_raw(
            OperationType::Cast,
            vec![x],
            vec![Some(plain_quant8(Operand::new(to, vec![])))],
            &n.label,
        )?[0])
    }

    /// Emits a binary arithmetic operation (ADD/SUB/MUL/DIV) without activation.
    pub fn arith(&mut self, n: &Node, op: OperationType, a: u32, b: u32) -> NResult<u32> {
        let act = self.i32_const(0);
        self.emit(n, op, vec![a, b, act])
    }

    /// A run-time 1-D integer parameter (ONNX int64, NN int32) and its length.
    pub fn runtime_int_vector(&mut self, n: &Node, i: usize) -> NResult<Option<(u32, usize)>> {
        match self.input(n, i)? {
            Some(Value::Tensor(tv)) => {
                if self.operand_type(tv) != OperandType::TensorInt32 {
                    return invalid(format!("input {i} must be an integer tensor"));
                }
                match self.dims(tv).as_slice() {
                    [k] if *k != 0 => Ok(Some((tv.operand, *k as usize))),
                    _ => unsupported(format!(
                        "run-time input {i} must be a 1-D tensor of known length"
                    )),
                }
            }
            _ => Ok(None),
        }
    }

    pub fn i32_const(&mut self, v: i32) -> u32 {
        self.model.add_i32(v)
    }

    pub fn f32_const(&mut self, v: f32) -> u32 {
        self.model.add_f32(v)
    }

    pub fn bool_const(&mut self, v: bool) -> u32 {
        self.model.add_bool(v)
    }

    pub fn i32_vector(&mut self, v: &[i32]) -> u32 {
        self.model.add_i32_vector(v)
    }

    /// A one-element tensor constant of the given type holding `v` (for broadcasting).
    pub fn scalar_tensor(&mut self, operand_type: OperandType, v: f64) -> u32 {
        match operand_type {
            OperandType::TensorInt32 => self.model.add_constant(
                Operand::new(operand_type, vec![1]),
                &(v as i32).to_le_bytes(),
            ),
            OperandType::TensorBool8 => self
                .model
                .add_constant(Operand::new(operand_type, vec![1]), &[u8::from(v != 0.0)]),
            OperandType::TensorQuant8Asymm => self.model.add_constant(
                plain_quant8(Operand::new(operand_type, vec![1])),
                &[v.clamp(0.0, 255.0) as u8],
            ),
            OperandType::TensorQuant8AsymmSigned => self.model.add_constant(
                plain_quant8(Operand::new(operand_type, vec![1])),
                &[(v.clamp(-128.0, 127.0) as i8) as u8],
            ),
            _ => self.model.add_f32_tensor(vec![1], &[v as f32]),
        }
    }

    /// Emits `RESHAPE(x, dims)`.
    pub fn reshape_to(&mut self, n: &Node, x: u32, dims: &[u32]) -> NResult<u32> {
        let current = &self.model.main.operands[x as usize].dimensions;
        if current.as_slice() == dims {
            return Ok(x);
        }
        let shape: Vec<i32> = dims
            .iter()
            .map(|&d| if d == 0 { -1 } else { d as i32 })
            .collect();
        if shape.iter().filter(|&&d| d == -1).count() > 1 {
            return needs_input_shape(
                "needs a reshape with more than one unknown dimension; fix dynamic dimensions with --input-shape",
            );
        }
        let s = self.i32_vector(&shape);
        self.emit(n, OperationType::Reshape, vec![x, s])
    }

    /// Emits `TRANSPOSE(x, perm)`.
    pub fn transpose_op(&mut self, n: &Node, x: u32, perm: &[i32]) -> NResult<u32> {
        let p = self.i32_vector(perm);
        self.emit(n, OperationType::Transpose, vec![x, p])
    }

    /// NCHW -> NHWC for a rank-4 operand.
    pub fn to_nhwc(&mut self, n: &Node, x: u32) -> NResult<u32> {
        self.transpose_op(n, x, &[0, 2, 3, 1])
    }

    /// NHWC -> NCHW for a rank-4 operand.
    pub fn to_nchw(&mut self, n: &Node, x: u32) -> NResult<u32> {
        self.transpose_op(n, x, &[0, 3, 1, 2])
    }

    /// Requires a float32 run-time value.
    pub fn require_float(&self, n: &Node, tv: TensorValue) -> NResult<()> {
        if !is_float(tv.dtype) {
            return unsupported(format!(
                "{} on {} tensors is not supported",
                n.op(),
                tv.dtype
            ));
        }
        Ok(())
    }
}

/// The ONNX float types nnc computes, all as TENSOR_FLOAT32: float32, float16 (see
/// `Lowerer::add_inputs`), float64 (the NN set has none; the import notes it), and
/// bfloat16, float8 and float4 (exact in float32; see `nnc_formats::minifloat`).
pub fn is_float(dtype: DataType) -> bool {
    constant::is_float(dtype)
}

/// True for the 8-bit quantized tensor types ONNX's uint8 and int8 compute in.
pub fn is_quant8(t: OperandType) -> bool {
    matches!(
        t,
        OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned
    )
}

/// An 8-bit operand holding plain integers: scale 1, zero point 0, so that its real
/// value is its stored value. Other operands are returned unchanged.
pub fn plain_quant8(operand: Operand) -> Operand {
    if is_quant8(operand.operand_type) {
        operand.with_quant(1.0, 0)
    } else {
        operand
    }
}

/// A bound value must be what the input declares: same element type, same rank, and
/// the same size wherever the declaration fixes one.
fn check_bound_input(
    declared: &super::DeclaredInput,
    value: &nnc_formats::tensor::HostTensor,
) -> Result<(), CompileError> {
    let name = &declared.name;
    match declared.dtype {
        Some(dtype) if dtype == value.dtype => {}
        Some(dtype) => {
            return Err(CompileError::Options(format!(
                "--bind-input {name}: the model declares {dtype}, the value is {}",
                value.dtype
            )));
        }
        None => {
            return Err(CompileError::Options(format!(
                "--bind-input {name}: the input is not a tensor of a supported element type"
            )));
        }
    }
    if let Some(dims) = &declared.dims {
        let fits = dims.len() == value.shape.len()
            && dims
                .iter()
                .zip(&value.shape)
                .all(|(&d, &v)| d <= 0 || usize::try_from(d).is_ok_and(|d| d == v));
        if !fits {
            let shown: Vec<String> = dims
                .iter()
                .map(|&d| if d <= 0 { "?".into() } else { d.to_string() })
                .collect();
            return Err(CompileError::Options(format!(
                "--bind-input {name}: the model declares shape [{}], the value has shape {:?}",
                shown.join(", "),
                value.shape
            )));
        }
    }
    Ok(())
}

fn node_error_to_compile(e: NodeError, location: &str) -> CompileError {
    match e {
        NodeError::Unsupported(m) | NodeError::NeedsConstant { reason: m, .. } => {
            let mut report = crate::error::UnsupportedReport::new("ONNX");
            report.add("output", location, m);
            CompileError::Unsupported(report)
        }
        NodeError::NeedsInputShape(m) => {
            let mut report = crate::error::UnsupportedReport::new("ONNX");
            report.add_needing_input_shape("output", location, m, Vec::new());
            CompileError::Unsupported(report)
        }
        NodeError::Invalid(m) => CompileError::invalid(location, m),
        NodeError::Limit(e) => CompileError::limit(location, e),
        NodeError::Nested(e) => *e,
    }
}

/// Reads an integer list given as an attribute (older opsets) or as a constant input
/// (newer ones).
pub(crate) fn ints_from_attr_or_input(
    lowerer: &Lowerer,
    n: &Node,
    attr: &str,
    input: usize,
) -> NResult<Option<Vec<i64>>> {
    if let Some(v) = n.attrs.ints(attr)? {
        return Ok(Some(v));
    }
    match lowerer.const_input(n, input)? {
        Some(c) => Ok(Some(constant::to_i64s(&c))),
        None => Ok(None),
    }
}

/// Normalizes an axis against `rank`, as a node error.
pub(crate) fn axis(a: i64, rank: usize) -> NResult<usize> {
    constant::norm_axis(a, rank).map_err(NodeError::from)
}
