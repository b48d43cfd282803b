//! Arithmetic, activations, element-wise math, QUANTIZE and DEQUANTIZE.

use nnc_formats::nn::{Operand, OperandType, OperationType};

use super::super::model::OperatorDesc;
use super::super::schema_generated::tflite as fb;
use super::{Const, Lowerer, OResult, Value, invalid, unsupported};

use fb::BuiltinOperator as B;

impl Lowerer<'_, '_> {
    /// Inputs 0 and 1, which must compute in the same NN type.
    fn two_inputs(&mut self, op: &OperatorDesc) -> OResult<(u32, u32)> {
        let a = self.operand_in(op, 0)?;
        let b = self.operand_in(op, 1)?;
        let (ta, tb) = (self.operand_type(a), self.operand_type(b));
        if ta != tb {
            return unsupported(format!("mixes {ta} and {tb} inputs"));
        }
        Ok((a, b))
    }

    pub(super) fn arithmetic(
        &mut self,
        op: &OperatorDesc,
        code: fb::BuiltinOperator,
    ) -> OResult<()> {
        let f = &op.fb;
        let (nn_op, activation) = match code {
            B::ADD => (
                OperationType::Add,
                f.builtin_options_as_add_options()
                    .map(|o| o.fused_activation_function()),
            ),
            B::SUB => (
                OperationType::Sub,
                f.builtin_options_as_sub_options()
                    .map(|o| o.fused_activation_function()),
            ),
            B::MUL => (
                OperationType::Mul,
                f.builtin_options_as_mul_options()
                    .map(|o| o.fused_activation_function()),
            ),
            _ => (
                OperationType::Div,
                f.builtin_options_as_div_options()
                    .map(|o| o.fused_activation_function()),
            ),
        };
        let act = self.act(activation.unwrap_or(fb::ActivationFunctionType::NONE))?;
        let (a, b) = self.two_inputs(op)?;
        if nn_op == OperationType::Div && self.operand_type(a).is_quantized() {
            return unsupported("quantized DIV has no NN form (DIV takes float and int32 only)");
        }
        self.emit_activated(op, nn_op, vec![a, b], Some(2), act)?;
        Ok(())
    }

    pub(super) fn min_max(&mut self, op: &OperatorDesc, code: fb::BuiltinOperator) -> OResult<()> {
        let (a, b) = self.two_inputs(op)?;
        let nn_op = if code == B::MAXIMUM {
            OperationType::Maximum
        } else {
            OperationType::Minimum
        };
        self.emit_out(op, nn_op, vec![a, b], 0)?;
        Ok(())
    }

    pub(super) fn activation(
        &mut self,
        op: &OperatorDesc,
        code: fb::BuiltinOperator,
    ) -> OResult<()> {
        let nn_op = match code {
            B::RELU => OperationType::Relu,
            B::RELU6 => OperationType::Relu6,
            B::RELU_N1_TO_1 => OperationType::Relu1,
            B::LOGISTIC => OperationType::Logistic,
            B::TANH => OperationType::Tanh,
            _ => OperationType::HardSwish,
        };
        let x = self.operand_in(op, 0)?;
        self.emit_out(op, nn_op, vec![x], 0)?;
        Ok(())
    }

    pub(super) fn float_unary(
        &mut self,
        op: &OperatorDesc,
        code: fb::BuiltinOperator,
    ) -> OResult<()> {
        let nn_op = match code {
            B::EXP => OperationType::Exp,
            B::LOG => OperationType::Log,
            B::SQRT => OperationType::Sqrt,
            _ => OperationType::Rsqrt,
        };
        let x = self.operand_in(op, 0)?;
        let t = self.operand_type(x);
        if t != OperandType::TensorFloat32 {
            return unsupported(format!("{nn_op} on {t} is not supported (float only)"));
        }
        self.emit_out(op, nn_op, vec![x], 0)?;
        Ok(())
    }

    /// LEAKY_RELU is PRELU with a one-element alpha. A quantized alpha is stored exactly:
    /// scale |alpha| with the quantized value 1 (or -1), so no rounding creeps in.
    pub(super) fn leaky_relu(&mut self, op: &OperatorDesc) -> OResult<()> {
        let Some(o) = op.fb.builtin_options_as_leaky_relu_options() else {
            return invalid("has no LeakyReluOptions");
        };
        let alpha = o.alpha();
        if !alpha.is_finite() {
            return invalid(format!("alpha is {alpha}"));
        }
        let x = self.operand_in(op, 0)?;
        let t = self.operand_type(x);
        let alpha_operand = match t {
            OperandType::TensorFloat32 => self.model.add_f32_tensor(vec![1], &[alpha]),
            OperandType::TensorQuant8Asymm | OperandType::TensorQuant8AsymmSigned => {
                let scale = if alpha == 0.0 { 1.0 } else { alpha.abs() };
                let (zp, q): (i32, i8) = if alpha == 0.0 {
                    (0, 0)
                } else if alpha > 0.0 {
                    (0, 1)
                } else if t == OperandType::TensorQuant8Asymm {
                    (1, 0)
                } else {
                    (0, -1)
                };
                self.model
                    .add_constant(Operand::new(t, vec![1]).with_quant(scale, zp), &[q as u8])
            }
            other => return unsupported(format!("LEAKY_RELU on {other} is not supported")),
        };
        self.emit_out(op, OperationType::Prelu, vec![x, alpha_operand], 0)?;
        Ok(())
    }

    pub(super) fn prelu(&mut self, op: &OperatorDesc) -> OResult<()> {
        let (x, alpha) = self.two_inputs(op)?;
        self.emit_out(op, OperationType::Prelu, vec![x, alpha], 0)?;
        Ok(())
    }

    /// QUANTIZE from float is the NN QUANTIZE; from a quantized type (requantization)
    /// it goes through float, as the NN set has no requantizing operation.
    pub(super) fn quantize(&mut self, op: &OperatorDesc) -> OResult<()> {
        let x = self.operand_in(op, 0)?;
        let t = self.operand_type(x);
        let x = if t.is_quantized() {
            let dims = self.dims(x);
            self.emit_temp(
                op,
                OperationType::Dequantize,
                vec![x],
                Operand::new(OperandType::TensorFloat32, dims),
            )?
        } else {
            x
        };
        self.emit_out(op, OperationType::Quantize, vec![x], 0)?;
        Ok(())
    }

    /// DEQUANTIZE of a constant (float16 or quantized weights) is folded into a float32
    /// constant; of a run-time value it is the NN DEQUANTIZE.
    pub(super) fn dequantize(&mut self, op: &OperatorDesc) -> OResult<()> {
        let t = self.input(op, 0)?;
        match self.value(t)? {
            Value::Const(c) => {
                let values = c.reals()?;
                let folded = Const {
                    ty: fb::TensorType::FLOAT32,
                    shape: c.shape.clone(),
                    data: bytes::Bytes::from(bytemuck::cast_slice::<f32, u8>(&values).to_vec()),
                    quant: None,
                };
                self.set_const(op, 0, folded)
            }
            Value::Operand(x) => {
                self.emit_out(op, OperationType::Dequantize, vec![x], 0)?;
                Ok(())
            }
        }
    }
}
