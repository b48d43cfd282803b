//! Detection post-processing: NonMaxSuppression (to NON_MAX_SUPPRESSION, whose result's
//! length the runtime learns from the data).

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
}
