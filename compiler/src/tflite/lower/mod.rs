//! Lowering TFLite operators to NN operations.
//!
//! The [`Lowerer`] keeps, per TFLite tensor, either a compile-time constant (unmaterialized
//! until an operation needs it as an operand, so shape tensors, axes and paddings become
//! parameters and weights can be given the operand type their operation needs) or the
//! NN operand that holds it. Every emitted operation gets its output type and shape from
//! [`nnc_formats::nn::ops::infer`], which is then checked against what the TFLite
//! file declares for that tensor: a disagreement is reported, never papered over.
//!
//! Submodules lower one family each; `registry` is the one table of the operators
//! lowered, read by the dispatch here and by the unsupported report.

mod conv;
mod custom;
mod elementwise;
mod reduce;
pub mod registry;
mod shape;

use std::collections::HashMap;
use std::rc::Rc;

use bytes::Bytes;
use nnc_formats::nn::model::dims_to_string;
use nnc_formats::nn::ops::{InputView, SignatureError, infer};
use nnc_formats::nn::{
    ChannelQuant, FusedActivation, Lifetime, Model, Operand, OperandType, OperationType,
};

use super::model::{OpKind, OperatorDesc, Quant, TensorDesc, TflModel, element_size, type_name};
use super::schema_generated::tflite as fb;

/// Why an operator could not be lowered.
#[derive(Debug)]
pub enum OpError {
    /// Well formed, but beyond what nnc lowers (listed in the unsupported report).
    Unsupported(String),
    /// The operator breaks TFLite's rules (a malformed model).
    Invalid(String),
}

pub type OResult<T> = Result<T, OpError>;

pub(crate) fn unsupported<T>(message: impl Into<String>) -> OResult<T> {
    Err(OpError::Unsupported(message.into()))
}

pub(crate) fn invalid<T>(message: impl Into<String>) -> OResult<T> {
    Err(OpError::Invalid(message.into()))
}

/// A compile-time tensor: element type, shape, dense little-endian bytes, quantization.
#[derive(Clone, Debug)]
pub struct Const {
    pub ty: fb::TensorType,
    pub shape: Vec<u32>,
    pub data: Bytes,
    pub quant: Option<Quant>,
}

impl Const {
    pub fn element_count(&self) -> usize {
        self.shape.iter().map(|&d| d as usize).product()
    }

    /// Integer values (any integer type), for shapes, axes, paddings and indices.
    pub fn ints(&self) -> OResult<Vec<i64>> {
        use fb::TensorType as T;
        let d = &self.data;
        let v: Vec<i64> = match self.ty {
            T::INT32 => d
                .chunks_exact(4)
                .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            T::INT64 => d
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
            T::INT16 => d
                .chunks_exact(2)
                .map(|c| i64::from(i16::from_le_bytes([c[0], c[1]])))
                .collect(),
            T::UINT16 => d
                .chunks_exact(2)
                .map(|c| i64::from(u16::from_le_bytes([c[0], c[1]])))
                .collect(),
            T::UINT32 => d
                .chunks_exact(4)
                .map(|c| i64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                .collect(),
            T::INT8 => d.iter().map(|&b| i64::from(b as i8)).collect(),
            T::UINT8 => d.iter().map(|&b| i64::from(b)).collect(),
            other => {
                return invalid(format!(
                    "expects integer values, got a {} tensor",
                    type_name(other)
                ));
            }
        };
        Ok(v)
    }

    /// Integer values that must fit in 32 bits.
    pub fn i32s(&self) -> OResult<Vec<i32>> {
        self.ints()?
            .into_iter()
            .map(|v| {
                i32::try_from(v).map_err(|_| {
                    OpError::Unsupported(format!(
                        "integer constant {v} does not fit the NN set's 32-bit integers"
                    ))
                })
            })
            .collect()
    }

    /// Real values: floats converted to f32, quantized integers dequantized.
    pub fn reals(&self) -> OResult<Vec<f32>> {
        use fb::TensorType as T;
        let d = &self.data;
        match self.ty {
            T::FLOAT32 => Ok(d
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()),
            T::FLOAT16 => Ok(d
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect()),
            T::BFLOAT16 => Ok(d
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect()),
            T::FLOAT64 => Ok(d
                .chunks_exact(8)
                .map(|c| {
                    f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32
                })
                .collect()),
            _ => {
                let ints = self.ints()?;
                let Some(q) = &self.quant else {
                    return Ok(ints.into_iter().map(|v| v as f32).collect());
                };
                // Per-axis parameters: the index along `q.dim` picks the scale.
                let inner: usize = self
                    .shape
                    .iter()
                    .skip(q.dim + 1)
                    .map(|&d| d as usize)
                    .product();
                let axis = self.shape.get(q.dim).map_or(1, |&d| d as usize).max(1);
                Ok(ints
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let c = if q.scales.len() > 1 {
                            (i / inner.max(1)) % axis
                        } else {
                            0
                        };
                        ((v - q.zero_points[c]) as f64 * f64::from(q.scales[c])) as f32
                    })
                    .collect())
            }
        }
    }
}

/// A value of the TFLite graph.
#[derive(Clone, Debug)]
pub enum Value {
    Const(Rc<Const>),
    Operand(u32),
}

/// How a constant is turned into an operand (one operand per tensor and role).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Its own type: float32 (float16/64 converted), int32 (other integers narrowed),
    /// bool, or quantized 8-bit (per-channel int8 as TENSOR_QUANT8_SYMM_PER_CHANNEL).
    Plain,
    /// Real values as TENSOR_FLOAT32 (weights of float operations: float16 or
    /// quantized weights are converted at compile time).
    Float,
    /// A convolution filter for a quantized input of the given type, per-channel along
    /// the given dimension.
    Filter(OperandType, u32),
    /// An int32 bias with the given scale (bits of the f32).
    Bias(u32),
}

/// An emitted operation's activation: fused into the NN operation, or a separate TANH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    Fused(FusedActivation),
    Tanh,
}

pub struct Lowerer<'m, 'a> {
    pub model: Model,
    pub tfl: &'m TflModel<'a>,
    values: Vec<Option<Value>>,
    materialized: HashMap<(usize, Role), u32>,
    /// Check emitted shapes against the shapes the file declares (off when the user
    /// fixed input shapes that differ from the stored ones: the file's shapes are then
    /// stale).
    pub check_shapes: bool,
}

impl<'m, 'a> Lowerer<'m, 'a> {
    pub fn new(tfl: &'m TflModel<'a>) -> Lowerer<'m, 'a> {
        let values = tfl
            .tensors
            .iter()
            .map(|t| {
                t.data.as_ref().map(|data| {
                    Value::Const(Rc::new(Const {
                        ty: t.ty,
                        shape: t.shape.clone(),
                        data: data.clone(),
                        quant: t.quant.clone(),
                    }))
                })
            })
            .collect();
        Lowerer {
            model: Model::default(),
            tfl,
            values,
            materialized: HashMap::new(),
            check_shapes: true,
        }
    }

    pub fn tensor(&self, t: usize) -> &'m TensorDesc {
        &self.tfl.tensors[t]
    }

    pub fn value_of(&self, t: usize) -> Option<&Value> {
        self.values[t].as_ref()
    }

    pub fn bind(&mut self, t: usize, value: Value) {
        if let Value::Operand(o) = &value {
            let operand = &mut self.model.main.operands[*o as usize];
            if operand.name.is_empty() {
                operand.name = self.tfl.tensors[t].name.clone();
            }
        }
        self.values[t] = Some(value);
    }

    /// Lowers one operator through its row of [`registry::BUILTINS`] or
    /// [`registry::CUSTOM`].
    pub fn lower(&mut self, op: &OperatorDesc) -> OResult<()> {
        for (k, t) in op.outputs.iter().enumerate() {
            if let Some(t) = *t
                && self.values[t].is_some()
            {
                return invalid(format!(
                    "output {k} writes {}, which is a constant or was already written",
                    self.tfl.tensors[t].label()
                ));
            }
        }
        match &op.kind {
            OpKind::Builtin(code) => {
                let Some(row) = registry::builtin(*code) else {
                    return unsupported("no lowering to the NN operation set");
                };
                if let Some(reason) = row.version_refusal(op.version) {
                    return unsupported(reason);
                }
                (row.lower)(self, op)
            }
            OpKind::Custom(name) => {
                let Some(row) = registry::custom(name) else {
                    return unsupported("custom operator: no lowering to the NN operation set");
                };
                row.check(op)?;
                (row.lower)(self, op)
            }
        }
    }

    // ---- inputs ---------------------------------------------------------------------

    /// The tensor index of input `k`; `None` when omitted (-1) or past the list.
    pub fn opt_input(&self, op: &OperatorDesc, k: usize) -> Option<usize> {
        op.inputs.get(k).copied().flatten()
    }

    pub fn input(&self, op: &OperatorDesc, k: usize) -> OResult<usize> {
        self.opt_input(op, k)
            .map_or_else(|| invalid(format!("needs input {k}")), Ok)
    }

    /// The value of tensor `t`, which must have been computed.
    pub fn value(&self, t: usize) -> OResult<Value> {
        match &self.values[t] {
            Some(v) => Ok(v.clone()),
            None => invalid(format!(
                "reads {} before any operator writes it",
                self.tfl.tensors[t].label()
            )),
        }
    }

    /// Input `k` as an operand (constants materialized in their own type).
    pub fn operand_in(&mut self, op: &OperatorDesc, k: usize) -> OResult<u32> {
        let t = self.input(op, k)?;
        self.operand_of(t, Role::Plain)
    }

    /// Tensor `t` as an operand in `role`.
    pub fn operand_of(&mut self, t: usize, role: Role) -> OResult<u32> {
        match self.value(t)? {
            Value::Operand(o) => Ok(o),
            Value::Const(c) => {
                if let Some(&o) = self.materialized.get(&(t, role)) {
                    return Ok(o);
                }
                let o = self.const_operand(&c, role)?;
                self.model.main.operands[o as usize].name = self.tfl.tensors[t].name.clone();
                self.materialized.insert((t, role), o);
                Ok(o)
            }
        }
    }

    /// Input `k` as a constant; run-time values are unsupported.
    pub fn const_in(&self, op: &OperatorDesc, k: usize) -> OResult<Rc<Const>> {
        let t = self.input(op, k)?;
        match self.value(t)? {
            Value::Const(c) => Ok(c),
            Value::Operand(_) => unsupported(format!(
                "input {k} ({}) must be known at compile time, but is computed at run time",
                self.tfl.tensors[t].label()
            )),
        }
    }

    /// The tensor index of output `k`.
    pub fn output(&self, op: &OperatorDesc, k: usize) -> OResult<usize> {
        op.outputs
            .get(k)
            .copied()
            .flatten()
            .map_or_else(|| invalid(format!("needs output {k}")), Ok)
    }

    pub fn operand(&self, o: u32) -> &Operand {
        &self.model.main.operands[o as usize]
    }

    pub fn dims(&self, o: u32) -> Vec<u32> {
        self.operand(o).dimensions.clone()
    }

    pub fn operand_type(&self, o: u32) -> OperandType {
        self.operand(o).operand_type
    }

    // ---- types ------------------------------------------------------------------------

    /// The NN operand type and quantization of a run-time TFLite tensor.
    pub fn activation_template(&self, t: usize) -> OResult<Operand> {
        let desc = self.tensor(t);
        let (ty, scale, zp) = activation_type(desc)?;
        let dims = if desc.shape.is_empty() {
            vec![1]
        } else {
            desc.shape.clone()
        };
        Ok(Operand::new(ty, dims)
            .with_quant(scale, zp)
            .with_name(desc.name.clone()))
    }

    /// A new constant operand holding `c` in `role`.
    pub fn const_operand(&mut self, c: &Const, role: Role) -> OResult<u32> {
        use fb::TensorType as T;
        if c.shape.contains(&0) {
            return unsupported("empty (zero-sized) tensors are not supported");
        }
        let dims = if c.shape.is_empty() {
            vec![1]
        } else {
            c.shape.clone()
        };
        let f32_operand = |model: &mut Model, values: Vec<f32>| {
            model.add_constant(
                Operand::new(OperandType::TensorFloat32, dims.clone()),
                bytemuck::cast_slice(&values),
            )
        };
        let i32_operand = |model: &mut Model, values: Vec<i32>, scale: f32| {
            model.add_constant(
                Operand::new(OperandType::TensorInt32, dims.clone()).with_quant(scale, 0),
                bytemuck::cast_slice(&values),
            )
        };
        match role {
            Role::Float => {
                let values = c.reals()?;
                if !matches!(c.ty, T::FLOAT32 | T::FLOAT16 | T::FLOAT64 | T::BFLOAT16)
                    && c.quant.is_none()
                {
                    return unsupported(format!(
                        "{} weights without quantization parameters cannot feed a float operation",
                        type_name(c.ty)
                    ));
                }
                return Ok(f32_operand(&mut self.model, values));
            }
            Role::Bias(bits) => {
                if c.ty != T::INT32 {
                    return unsupported(format!(
                        "a {} bias of a quantized operation is not supported (only int32)",
                        type_name(c.ty)
                    ));
                }
                return Ok(i32_operand(
                    &mut self.model,
                    c.i32s()?,
                    f32::from_bits(bits),
                ));
            }
            Role::Filter(input_type, channel_dim) => {
                if let Some(o) = self.filter_operand(c, &dims, input_type, channel_dim)? {
                    return Ok(o);
                }
            }
            Role::Plain => {}
        }
        match (c.ty, &c.quant) {
            (T::FLOAT32, _) => Ok(self
                .model
                .add_constant(Operand::new(OperandType::TensorFloat32, dims), &c.data)),
            (T::FLOAT16 | T::FLOAT64 | T::BFLOAT16, _) => {
                let values = c.reals()?;
                Ok(f32_operand(&mut self.model, values))
            }
            (T::BOOL, _) => Ok(self
                .model
                .add_constant(Operand::new(OperandType::TensorBool8, dims), &c.data)),
            (T::INT32 | T::INT64 | T::UINT32 | T::UINT16 | T::INT16 | T::UINT64, None) => {
                let values = c.i32s()?;
                Ok(i32_operand(&mut self.model, values, 0.0))
            }
            (T::INT32, Some(_)) => {
                // A quantized int32 constant (a bias read as a plain value): NN int32
                // tensors carry a scale only where an operation defines it.
                let values = c.i32s()?;
                Ok(i32_operand(&mut self.model, values, 0.0))
            }
            (T::UINT8 | T::INT8, Some(q)) if q.is_per_tensor() => {
                let (ty, zp_range) = if c.ty == T::UINT8 {
                    (OperandType::TensorQuant8Asymm, 0..=255)
                } else {
                    (OperandType::TensorQuant8AsymmSigned, -128..=127)
                };
                let zp = q.zero_point();
                if !zp_range.contains(&zp) {
                    return invalid(format!(
                        "zero point {zp} is out of range for {}",
                        type_name(c.ty)
                    ));
                }
                Ok(self.model.add_constant(
                    Operand::new(ty, dims).with_quant(q.scale(), zp as i32),
                    &c.data,
                ))
            }
            (T::INT8, Some(q)) => {
                if q.zero_points.iter().any(|&z| z != 0) {
                    return unsupported(
                        "per-channel quantized int8 constants must be symmetric (zero points 0)",
                    );
                }
                let mut operand = Operand::new(OperandType::TensorQuant8SymmPerChannel, dims);
                operand.channel_quant = Some(ChannelQuant {
                    scales: q.scales.clone(),
                    channel_dim: q.dim as u32,
                });
                Ok(self.model.add_constant(operand, &c.data))
            }
            (T::UINT8 | T::INT8, None) => unsupported(format!(
                "{} constants without quantization parameters have no NN operand type",
                type_name(c.ty)
            )),
            (other, Some(_)) => unsupported(format!(
                "quantized {} tensors are not supported (only 8-bit quantization)",
                type_name(other)
            )),
            (other, None) => unsupported(format!("{} tensors are not supported", type_name(other))),
        }
    }

    /// Filters of quantized convolutions: per-channel int8 filters must be along
    /// `channel_dim`; a per-tensor int8 filter of a uint8 input becomes per-channel with
    /// one scale repeated (NN pairs uint8 inputs only with uint8 or per-channel filters).
    /// `None` means the plain conversion applies.
    fn filter_operand(
        &mut self,
        c: &Const,
        dims: &[u32],
        input_type: OperandType,
        channel_dim: u32,
    ) -> OResult<Option<u32>> {
        use fb::TensorType as T;
        if !input_type.is_quantized() {
            return Ok(match c.ty {
                T::FLOAT32 => None,
                _ => Some(self.const_operand(c, Role::Float)?),
            });
        }
        let Some(q) = &c.quant else {
            return unsupported(format!(
                "a quantized operation's {} filter has no quantization parameters",
                type_name(c.ty)
            ));
        };
        if c.ty != T::INT8 {
            return Ok(None);
        }
        let per_tensor = q.is_per_tensor();
        if per_tensor && input_type == OperandType::TensorQuant8AsymmSigned {
            return Ok(None);
        }
        if !per_tensor && q.dim as u32 != channel_dim {
            return unsupported(format!(
                "per-channel filter quantized along dimension {}; the NN set needs dimension {channel_dim}",
                q.dim
            ));
        }
        if q.zero_points.iter().any(|&z| z != 0) {
            return unsupported("per-channel quantized filters must be symmetric (zero points 0)");
        }
        let channels = dims.get(channel_dim as usize).copied().unwrap_or(0) as usize;
        let scales = if per_tensor {
            vec![q.scale(); channels]
        } else {
            q.scales.clone()
        };
        let mut operand = Operand::new(OperandType::TensorQuant8SymmPerChannel, dims.to_vec());
        operand.channel_quant = Some(ChannelQuant {
            scales,
            channel_dim,
        });
        Ok(Some(self.model.add_constant(operand, &c.data)))
    }

    // ---- emission ---------------------------------------------------------------------

    /// Runs signature inference for `op` over `inputs` with output templates.
    fn infer_outputs(
        &self,
        nn_op: OperationType,
        inputs: &[u32],
        templates: &[Operand],
    ) -> OResult<Vec<nnc_formats::nn::ops::OutputShape>> {
        let views: Vec<InputView> = inputs
            .iter()
            .map(|&i| InputView {
                operand: &self.model.main.operands[i as usize],
                value: self.model.constant_bytes(i),
            })
            .collect();
        let declared: Vec<&Operand> = templates.iter().collect();
        infer(nn_op, &views, &declared).map_err(|e| match e {
            // Types the NN operation does not take: a limit of the NN set, not a fault
            // of the model.
            SignatureError::InputType { .. }
            | SignatureError::OutputType { .. }
            | SignatureError::Unsupported(_) => OpError::Unsupported(format!(
                "the NN set's {} does not take this: {e}",
                nn_op.name()
            )),
            _ => OpError::Invalid(format!(
                "lowering produced an invalid {}: {e}",
                nn_op.name()
            )),
        })
    }

    /// Emits an operation whose outputs are described by templates (type and
    /// quantization; dimensions come from inference). Returns the output operands.
    pub fn emit_raw(
        &mut self,
        op: &OperatorDesc,
        nn_op: OperationType,
        inputs: Vec<u32>,
        templates: Vec<Operand>,
    ) -> OResult<Vec<u32>> {
        let inferred = self.infer_outputs(nn_op, &inputs, &templates)?;
        let mut outs = Vec::with_capacity(templates.len());
        for (mut template, shape) in templates.into_iter().zip(inferred) {
            if shape.operand_type != template.operand_type {
                return unsupported(format!(
                    "{nn_op} computes {} from these inputs, but the model wants {}",
                    shape.operand_type, template.operand_type
                ));
            }
            template.dimensions = shape.dimensions;
            template.lifetime = Lifetime::TemporaryVariable;
            template.location = Default::default();
            outs.push(self.model.add_operand(template));
        }
        let source = self.source(op);
        self.model
            .add_operation(nn_op, inputs, outs.clone(), source);
        Ok(outs)
    }

    /// The operator's name in messages and as the `source` of its NN operations:
    /// `#index` and its first output tensor.
    pub fn source(&self, op: &OperatorDesc) -> String {
        match op.outputs.first().copied().flatten() {
            Some(t) => format!("#{} {}", op.index, self.tfl.tensors[t].name),
            None => format!("#{}", op.index),
        }
    }

    /// Emits a one-output operation into a temporary with the given type template.
    pub fn emit_temp(
        &mut self,
        op: &OperatorDesc,
        nn_op: OperationType,
        inputs: Vec<u32>,
        template: Operand,
    ) -> OResult<u32> {
        let mut template = template;
        template.name = String::new();
        Ok(self.emit_raw(op, nn_op, inputs, vec![template])?[0])
    }

    /// Emits a one-output operation writing output `k` of the operator: its type and
    /// quantization come from the tensor, and the inferred shape must match the one the
    /// file declares.
    pub fn emit_out(
        &mut self,
        op: &OperatorDesc,
        nn_op: OperationType,
        inputs: Vec<u32>,
        k: usize,
    ) -> OResult<u32> {
        let t = self.output(op, k)?;
        let template = self.activation_template(t)?;
        let o = self.emit_raw(op, nn_op, inputs, vec![template])?[0];
        self.finish_output(t, o)?;
        Ok(o)
    }

    /// Checks an operand computed for tensor `t` against the declared shape and binds it.
    /// An integer result computed from constants only (shape arithmetic) is evaluated
    /// right away, so later operators can take it as a compile-time value.
    pub fn finish_output(&mut self, t: usize, o: u32) -> OResult<()> {
        let actual = self.dims(o);
        if self.tensor(t).shape.contains(&0) {
            return unsupported(format!(
                "{} is empty (zero-sized), which the NN set cannot express",
                self.tensor(t).label()
            ));
        }
        if let Some(declared) = self.declared_dims(t)
            && actual != declared
        {
            return invalid(format!(
                "the lowering computes {} for {}, but the model declares {}",
                dims_to_string(&actual),
                self.tensor(t).label(),
                dims_to_string(&declared)
            ));
        }
        if let Some(c) = self.fold_integer(o) {
            self.bind(t, Value::Const(Rc::new(c)));
            return Ok(());
        }
        self.bind(t, Value::Operand(o));
        Ok(())
    }

    /// Evaluates the last emitted operation when it writes `o`, reads only constants,
    /// and produces a small int32 tensor; the operation is then removed.
    fn fold_integer(&mut self, o: u32) -> Option<Const> {
        const MAX_ELEMENTS: u64 = 4096;
        let op = self.model.main.operations.last()?;
        let out = self.operand(o);
        if op.outputs != [o]
            || out.operand_type != OperandType::TensorInt32
            || out.element_count().is_none_or(|n| n > MAX_ELEMENTS)
        {
            return None;
        }
        let all_constant = op.inputs.iter().all(|&i| {
            let l = self.operand(i).lifetime;
            l.is_constant() || l == Lifetime::NoValue
        });
        if !all_constant {
            return None;
        }
        let model = &self.model;
        let bytes =
            nnc_runtime::evaluate_operation(op, &model.main.operands, |k| model.constant_bytes(k))
                .ok()?
                .into_iter()
                .next()?;
        let shape = out.dimensions.clone();
        if bytes.len() as u64 != out.byte_size()? {
            return None;
        }
        self.model.main.operations.pop();
        Some(Const {
            ty: fb::TensorType::INT32,
            shape,
            data: Bytes::from(bytes),
            quant: None,
        })
    }

    /// Emits `nn_op` writing output 0, with a TFLite fused activation: see
    /// [`Lowerer::emit_activated_temp`].
    pub fn emit_activated(
        &mut self,
        op: &OperatorDesc,
        nn_op: OperationType,
        inputs: Vec<u32>,
        act_at: Option<usize>,
        act: Act,
    ) -> OResult<u32> {
        let t = self.output(op, 0)?;
        let o = self.emit_activated_temp(op, nn_op, inputs, act_at, act)?;
        self.finish_output(t, o)?;
        Ok(o)
    }

    /// Emits `nn_op` with a TFLite fused activation into a temporary of output 0's type:
    /// the activation code is inserted at `act_at` (operations without a
    /// fused-activation operand pass `None` and get a separate RELU/RELU1/RELU6), and
    /// TANH becomes a separate TANH operation (float only).
    pub fn emit_activated_temp(
        &mut self,
        op: &OperatorDesc,
        nn_op: OperationType,
        mut inputs: Vec<u32>,
        act_at: Option<usize>,
        act: Act,
    ) -> OResult<u32> {
        let fused = match (act, act_at) {
            (Act::Fused(a), Some(_)) => a,
            _ => FusedActivation::None,
        };
        if let Some(at) = act_at {
            let code = self.model.add_i32(fused as i32);
            inputs.insert(at.min(inputs.len()), code);
        }
        let separate = match act {
            Act::Fused(a) if act_at.is_none() => a.operation(),
            Act::Fused(_) => None,
            Act::Tanh => Some(OperationType::Tanh),
        };
        let out = self.output(op, 0)?;
        let template = self.activation_template(out)?;
        if separate == Some(OperationType::Tanh) && template.operand_type.is_quantized() {
            return unsupported(
                "a fused TANH activation on a quantized operation is not supported",
            );
        }
        let y = self.emit_temp(op, nn_op, inputs, template.clone())?;
        match separate {
            None => Ok(y),
            Some(separate) => self.emit_temp(op, separate, vec![y], template),
        }
    }

    /// Reads a TFLite fused activation.
    pub fn act(&self, f: fb::ActivationFunctionType) -> OResult<Act> {
        use fb::ActivationFunctionType as A;
        Ok(match f {
            A::NONE => Act::Fused(FusedActivation::None),
            A::RELU => Act::Fused(FusedActivation::Relu),
            A::RELU_N1_TO_1 => Act::Fused(FusedActivation::Relu1),
            A::RELU6 => Act::Fused(FusedActivation::Relu6),
            A::TANH => Act::Tanh,
            A::SIGN_BIT => return unsupported("the SIGN_BIT fused activation is not supported"),
            other => return invalid(format!("unknown fused activation {}", other.0)),
        })
    }

    /// Emits `RESHAPE(x, dims)` into a temporary of x's type (no-op when equal).
    pub fn reshape_temp(&mut self, op: &OperatorDesc, x: u32, dims: &[u32]) -> OResult<u32> {
        if self.dims(x) == dims {
            return Ok(x);
        }
        let shape = self.shape_vector(dims);
        let template = self.operand(x).clone();
        self.emit_temp(op, OperationType::Reshape, vec![x, shape], template)
    }

    /// A TENSOR_INT32 constant holding `dims` (for RESHAPE).
    pub fn shape_vector(&mut self, dims: &[u32]) -> u32 {
        let v: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
        self.model.add_i32_vector(&v)
    }

    /// The shape the file declares for tensor `t`, as NN dimensions (scalars as `[1]`),
    /// when it can be trusted: TFLite stores placeholder extents (1) for dimensions
    /// that are dynamic (-1 in `shape_signature`), and a user's --input-shape makes
    /// every stored shape stale.
    pub fn declared_dims(&self, t: usize) -> Option<Vec<u32>> {
        let desc = self.tensor(t);
        let dynamic = desc
            .signature
            .as_ref()
            .is_some_and(|s| s.iter().any(|&d| d < 0));
        if !self.check_shapes || dynamic {
            return None;
        }
        Some(if desc.shape.is_empty() {
            vec![1]
        } else {
            desc.shape.clone()
        })
    }

    /// True when tensor `t` is a scalar (rank 0; the rank is stored reliably).
    pub fn is_scalar(&self, t: usize) -> bool {
        self.tensor(t).shape.is_empty()
    }

    /// Binds output `k` to a compile-time constant.
    pub fn set_const(&mut self, op: &OperatorDesc, k: usize, c: Const) -> OResult<()> {
        let t = self.output(op, k)?;
        self.bind(t, Value::Const(Rc::new(c)));
        Ok(())
    }

    pub fn tfl_element_size(ty: fb::TensorType) -> usize {
        element_size(ty).unwrap_or(1)
    }
}

/// The NN type, scale and zero point of a run-time tensor.
pub fn activation_type(desc: &TensorDesc) -> OResult<(OperandType, f32, i32)> {
    use fb::TensorType as T;
    if desc.custom_quantization {
        return unsupported(format!(
            "{} uses custom quantization parameters",
            desc.label()
        ));
    }
    let quant = desc.quant.as_ref();
    match (desc.ty, quant) {
        (T::FLOAT32, _) => Ok((OperandType::TensorFloat32, 0.0, 0)),
        (T::INT32 | T::INT64, _) => Ok((OperandType::TensorInt32, 0.0, 0)),
        (T::BOOL, _) => Ok((OperandType::TensorBool8, 0.0, 0)),
        (T::UINT8 | T::INT8, Some(q)) if q.is_per_tensor() => {
            let (ty, range) = if desc.ty == T::UINT8 {
                (OperandType::TensorQuant8Asymm, 0..=255)
            } else {
                (OperandType::TensorQuant8AsymmSigned, -128..=127)
            };
            let (scale, zp) = (q.scale(), q.zero_point());
            if !(scale.is_finite() && scale > 0.0 && range.contains(&zp)) {
                return invalid(format!(
                    "{} has invalid quantization: scale {scale}, zero point {zp}",
                    desc.label()
                ));
            }
            Ok((ty, scale, zp as i32))
        }
        (T::UINT8 | T::INT8, Some(_)) => unsupported(format!(
            "{} is quantized per channel, which the NN set allows only for constant filters",
            desc.label()
        )),
        (T::UINT8 | T::INT8, None) => unsupported(format!(
            "{} is {} without quantization parameters, which has no NN type",
            desc.label(),
            type_name(desc.ty)
        )),
        (T::INT16, Some(_)) => unsupported(format!(
            "{} is int16-quantized (16x8 quantization is not supported)",
            desc.label()
        )),
        (ty, _) => unsupported(format!(
            "{} is a {} tensor, which the NN set cannot hold",
            desc.label(),
            type_name(ty)
        )),
    }
}
