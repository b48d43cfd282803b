//! Selections whose length depends on the data: NonMaxSuppression (to
//! NON_MAX_SUPPRESSION) and Compress (NON_ZERO of the condition, then GATHER), after
//! which the runtime computes shapes from the data.

use nnc_formats::nn::{OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::super::constant;
use super::{Lowerer, NResult, Node, Value, invalid, unsupported};

impl Lowerer<'_> {
    /// One of NonMaxSuppression's optional one-value inputs as a one-element operand of
    /// `t`: a constant (or `default` when absent) written now, a run-time value as it is
    /// (a `[1]` or scalar tensor; int64 computes as int32).
    fn nms_parameter(&mut self, n: &Node, i: usize, t: OperandType, default: f64) -> NResult<u32> {
        match self.input(n, i)? {
            None => Ok(self.scalar_tensor(t, default)),
            Some(Value::Const(c)) => {
                let v = constant::to_f64s(&c);
                let [v] = v.as_slice() else {
                    return invalid(format!("input {i} must hold one value, got {}", v.len()));
                };
                Ok(self.scalar_tensor(t, v.clamp(f64::from(i32::MIN), f64::MAX)))
            }
            Some(Value::Tensor(tv)) => {
                if self.operand_type(tv) != t {
                    return unsupported(format!(
                        "input {i} of {} (expected {})",
                        tv.dtype,
                        if t == OperandType::TensorInt32 {
                            "int64"
                        } else {
                            "float"
                        }
                    ));
                }
                if self.rank(tv) == 0 {
                    return self.reshape_to(n, tv.operand, &[1]);
                }
                Ok(tv.operand)
            }
        }
    }

    pub(super) fn non_max_suppression(&mut self, n: &Node) -> NResult<()> {
        let boxes = self.tensor(n, 0)?;
        let scores = self.tensor(n, 1)?;
        self.require_float(n, boxes)?;
        self.require_float(n, scores)?;
        let max_out = self.nms_parameter(n, 2, OperandType::TensorInt32, 0.0)?;
        let iou = self.nms_parameter(n, 3, OperandType::TensorFloat32, 0.0)?;
        // No threshold: every box is a candidate.
        let score = self.nms_parameter(n, 4, OperandType::TensorFloat32, f64::NEG_INFINITY)?;
        let center = match n.attrs.int_or("center_point_box", 0)? {
            0 => false,
            1 => true,
            other => return invalid(format!("center_point_box is {other}, not 0 or 1")),
        };
        let center = self.bool_const(center);
        let y = self.emit(
            n,
            OperationType::NonMaxSuppression,
            vec![boxes.operand, scores.operand, max_out, iou, score, center],
        )?;
        self.set_tensor(n, 0, y, DataType::I64, false);
        Ok(())
    }

    /// Compress: the slices along `axis` (of the flattened input when there is none)
    /// whose condition is true; the condition may be shorter than the axis.
    pub(super) fn compress(&mut self, n: &Node) -> NResult<()> {
        let data = self.required(n, 0)?;
        let name = self.input_name(n, 0).unwrap_or("").to_string();
        let mut x = self.materialize(&name, &data)?;
        let mut dims = self.known_dims(x)?;
        let a = match n.attrs.int("axis")? {
            Some(a) => super::axis(a, dims.len())?,
            None => {
                let count: u32 = dims.iter().product();
                x.operand = self.reshape_to(n, x.operand, &[count])?;
                dims = vec![count];
                0
            }
        };
        let indices = match self.required(n, 1)? {
            Value::Const(c) => {
                let picked: Vec<i32> = constant::to_f64s(&c)
                    .iter()
                    .enumerate()
                    .filter(|&(_, &v)| v != 0.0)
                    .map(|(i, _)| i as i32)
                    .collect();
                if c.element_count() > dims[a] as usize {
                    return invalid(format!(
                        "the condition has {} entries for an axis of {}",
                        c.element_count(),
                        dims[a]
                    ));
                }
                if picked.is_empty() {
                    return unsupported("Compress selecting nothing (an empty result)");
                }
                self.i32_vector(&picked)
            }
            Value::Tensor(cond) => {
                if cond.dtype != DataType::Bool || self.rank(cond) != 1 {
                    return invalid("Compress's condition must be a 1-D bool tensor");
                }
                let m = self.known_dims(cond)?[0];
                if m > dims[a] {
                    return invalid(format!(
                        "the condition has {m} entries for an axis of {}",
                        dims[a]
                    ));
                }
                // [1, count] coordinates, then [count].
                let hits = self.emit(n, OperationType::NonZero, vec![cond.operand])?;
                let first = self.i32_vector(&[0]);
                self.emit(n, OperationType::Squeeze, vec![hits, first])?
            }
        };
        let ax = self.i32_const(a as i32);
        let y = self.emit(n, OperationType::Gather, vec![x.operand, ax, indices])?;
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }

    /// Unique: UNIQUE, whose count the runtime learns from the data; its four outputs
    /// (values, first occurrences, inverse, counts) bound as the node names them.
    pub(super) fn unique(&mut self, n: &Node) -> NResult<()> {
        let data = self.required(n, 0)?;
        let name = self.input_name(n, 0).unwrap_or("").to_string();
        let x = self.materialize(&name, &data)?;
        let rank = self.rank(x);
        let (flatten, axis) = match n.attrs.int("axis")? {
            None => (true, 0),
            Some(a) => (false, super::axis(a, rank)? as i32),
        };
        let sorted = n.attrs.int_or("sorted", 1)? != 0;
        let inputs = vec![
            x.operand,
            self.i32_const(axis),
            self.bool_const(flatten),
            self.bool_const(sorted),
        ];
        // The values keep the input's quantization (8-bit types are plain integers here).
        let values = nnc_formats::nn::Operand::new(self.operand_type(x), vec![]);
        let values = super::plain_quant8(values);
        let outs = self.emit_raw(
            OperationType::Unique,
            inputs,
            vec![Some(values), None, None, None],
            &n.label,
        )?;
        for (k, &o) in outs.iter().enumerate() {
            if self.output_used(n, k) {
                let dtype = if k == 0 { x.dtype } else { DataType::I64 };
                self.set_tensor(n, k, o, dtype, false);
            }
        }
        Ok(())
    }
}
