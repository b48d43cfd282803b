//! Activations. The NN set has RELU/RELU1/RELU6/LOGISTIC/TANH/HARD_SWISH/ELU/PRELU; the
//! rest are compositions of elementwise operations, each exact in f32 up to rounding.

use nnc_formats::nn::{OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::super::constant;
use super::{Lowerer, NResult, Node, TensorValue, Value, unsupported};

/// Parameters of an activation function (`None`: the operator's default).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ActivationParams {
    pub alpha: Option<f32>,
    pub beta: Option<f32>,
    pub gamma: Option<f32>,
}

impl Lowerer<'_> {
    pub(super) fn activation(&mut self, n: &Node) -> NResult<()> {
        let op = n.op();
        if op == "PRelu" {
            return self.prelu(n);
        }
        if op == "Clip" {
            return self.clip(n);
        }
        let x = self.tensor(n, 0)?;
        let float = self.operand_type(x) == OperandType::TensorFloat32;
        if !(float || op == "Relu" && x.dtype != DataType::Bool) {
            return unsupported(format!("{op} on {} tensors is not supported", x.dtype));
        }
        let params = ActivationParams {
            alpha: n.attrs.float("alpha")?,
            beta: n.attrs.float("beta")?,
            gamma: n.attrs.float("gamma")?,
        };
        let y = self.activation_fn(n, op, x, params)?;
        self.set_output(n, 0, Value::Tensor(y));
        Ok(())
    }

    /// Applies the activation function `name` (an ONNX activation operator's name, or
    /// one of the recurrent operators' functions: Affine and ScaledTanh) to float `x`;
    /// parameters not given take the operator's defaults.
    pub(super) fn activation_fn(
        &mut self,
        n: &Node,
        name: &str,
        x: TensorValue,
        params: ActivationParams,
    ) -> NResult<TensorValue> {
        let float = self.operand_type(x) == OperandType::TensorFloat32;
        let attr =
            |value: Option<f32>, default: f32| -> NResult<f32> { Ok(value.unwrap_or(default)) };
        let (alpha, beta, gamma) = (params.alpha, params.beta, params.gamma);
        let y = match name {
            "Relu" if float => self.unary_emit(n, OperationType::Relu, x)?,
            "Relu" => self.with_scalar(n, OperationType::Maximum, x, 0.0)?,
            "Sigmoid" => self.unary_emit(n, OperationType::Logistic, x)?,
            "Tanh" => self.unary_emit(n, OperationType::Tanh, x)?,
            "HardSwish" => self.unary_emit(n, OperationType::HardSwish, x)?,
            "LeakyRelu" => {
                let alpha =
                    self.scalar_tensor(OperandType::TensorFloat32, f64::from(attr(alpha, 0.01)?));
                let out = self.emit(n, OperationType::Prelu, vec![x.operand, alpha])?;
                TensorValue { operand: out, ..x }
            }
            "Elu" => self.elu(n, x, attr(alpha, 1.0)?)?,
            "Selu" => {
                let e = self.elu(n, x, attr(alpha, 1.673_263_2)?)?;
                self.with_scalar(n, OperationType::Mul, e, f64::from(attr(gamma, 1.050_701)?))?
            }
            "Celu" => {
                // celu(x) = alpha * elu(x / alpha, 1)
                let alpha = attr(alpha, 1.0)?;
                if alpha == 0.0 {
                    return Err(super::NodeError::Invalid(
                        "Celu alpha must be non-zero".into(),
                    ));
                }
                let scaled = self.with_scalar(n, OperationType::Div, x, f64::from(alpha))?;
                let e = self.elu(n, scaled, 1.0)?;
                self.with_scalar(n, OperationType::Mul, e, f64::from(alpha))?
            }
            "HardSigmoid" => {
                let ax =
                    self.with_scalar(n, OperationType::Mul, x, f64::from(attr(alpha, 0.2)?))?;
                let b = self.with_scalar(n, OperationType::Add, ax, f64::from(attr(beta, 0.5)?))?;
                let lo = self.with_scalar(n, OperationType::Maximum, b, 0.0)?;
                self.with_scalar(n, OperationType::Minimum, lo, 1.0)?
            }
            "Softplus" => self.softplus(n, x)?,
            "Softsign" => {
                let abs = self.unary_emit(n, OperationType::Abs, x)?;
                let den = self.with_scalar(n, OperationType::Add, abs, 1.0)?;
                let act = self.i32_const(0);
                let out = self.emit(n, OperationType::Div, vec![x.operand, den.operand, act])?;
                TensorValue { operand: out, ..x }
            }
            "ThresholdedRelu" => {
                // x * (x > alpha)
                let alpha =
                    self.scalar_tensor(OperandType::TensorFloat32, f64::from(attr(alpha, 1.0)?));
                let mask = self.emit(n, OperationType::Greater, vec![x.operand, alpha])?;
                let mask = self.emit_raw(
                    OperationType::Cast,
                    vec![mask],
                    vec![Some(nnc_formats::nn::Operand::new(
                        OperandType::TensorFloat32,
                        vec![],
                    ))],
                    &n.label,
                )?[0];
                let act = self.i32_const(0);
                let out = self.emit(n, OperationType::Mul, vec![x.operand, mask, act])?;
                TensorValue { operand: out, ..x }
            }
            "Mish" => {
                // x * tanh(softplus(x))
                let sp = self.softplus(n, x)?;
                let t = self.unary_emit(n, OperationType::Tanh, sp)?;
                let act = self.i32_const(0);
                let out = self.emit(n, OperationType::Mul, vec![x.operand, t.operand, act])?;
                TensorValue { operand: out, ..x }
            }
            "Affine" => {
                let (Some(a), Some(b)) = (alpha, beta) else {
                    return Err(super::NodeError::Invalid(
                        "the Affine activation needs alpha and beta".into(),
                    ));
                };
                let ax = self.with_scalar(n, OperationType::Mul, x, f64::from(a))?;
                self.with_scalar(n, OperationType::Add, ax, f64::from(b))?
            }
            "ScaledTanh" => {
                // alpha * tanh(beta * x)
                let (Some(a), Some(b)) = (alpha, beta) else {
                    return Err(super::NodeError::Invalid(
                        "the ScaledTanh activation needs alpha and beta".into(),
                    ));
                };
                let bx = self.with_scalar(n, OperationType::Mul, x, f64::from(b))?;
                let t = self.unary_emit(n, OperationType::Tanh, bx)?;
                self.with_scalar(n, OperationType::Mul, t, f64::from(a))?
            }
            other => return unsupported(format!("no lowering for {other}")),
        };
        Ok(y)
    }

    fn elu(&mut self, n: &Node, x: TensorValue, alpha: f32) -> NResult<TensorValue> {
        let a = self.f32_const(alpha);
        let out = self.emit(n, OperationType::Elu, vec![x.operand, a])?;
        Ok(TensorValue { operand: out, ..x })
    }

    /// softplus(x) = log(1 + exp(x)), computed as max(x, 0) + log(1 + exp(-|x|)) so that
    /// large inputs do not overflow.
    fn softplus(&mut self, n: &Node, x: TensorValue) -> NResult<TensorValue> {
        let relu = self.unary_emit(n, OperationType::Relu, x)?;
        let abs = self.unary_emit(n, OperationType::Abs, x)?;
        let neg = self.unary_emit(n, OperationType::Neg, abs)?;
        let e = self.unary_emit(n, OperationType::Exp, neg)?;
        let one_plus = self.with_scalar(n, OperationType::Add, e, 1.0)?;
        let log = self.unary_emit(n, OperationType::Log, one_plus)?;
        let act = self.i32_const(0);
        let out = self.emit(n, OperationType::Add, vec![relu.operand, log.operand, act])?;
        Ok(TensorValue { operand: out, ..x })
    }

    fn prelu(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let mut slope = self.tensor(n, 1)?;
        self.require_float(n, slope)?;
        // Before version 7 a 1-D slope is per channel (axis 1), not numpy-broadcast.
        let (xd, sd) = (self.dims(x), self.dims(slope));
        if n.version < 7 && sd.len() == 1 && xd.len() > 2 && sd[0] != 1 {
            let mut dims = vec![sd[0]];
            dims.extend(std::iter::repeat_n(1, xd.len() - 2));
            slope.operand = self.reshape_to(n, slope.operand, &dims)?;
        }
        let out = self.emit(n, OperationType::Prelu, vec![x.operand, slope.operand])?;
        self.set_tensor(n, 0, out, x.dtype, x.scalar);
        Ok(())
    }

    /// Clip becomes RELU / RELU1 / RELU6 when its bounds match one, else MAXIMUM and
    /// MINIMUM (which the fusion pass may still absorb).
    fn clip(&mut self, n: &Node) -> NResult<()> {
        if self.clip_known(n)? {
            return Ok(());
        }
        let x = self.tensor(n, 0)?;
        if self.opset >= 11 {
            let runtime =
                |this: &Self, i: usize| matches!(this.input(n, i), Ok(Some(Value::Tensor(_))));
            if runtime(self, 1) || runtime(self, 2) {
                return self.clip_runtime(n, x);
            }
        }
        let (lo, hi) = if self.opset < 11 {
            (
                Some(f64::from(n.attrs.float_or("min", f32::MIN)?)),
                Some(f64::from(n.attrs.float_or("max", f32::MAX)?)),
            )
        } else {
            let bound = |this: &Self, i: usize| -> NResult<Option<f64>> {
                match this.const_input(n, i)? {
                    Some(c) => Ok(constant::to_f64s(&c).first().copied()),
                    None => Ok(None),
                }
            };
            (bound(self, 1)?, bound(self, 2)?)
        };
        let float = self.operand_type(x) == OperandType::TensorFloat32;
        let fused = match (lo, hi) {
            _ if !float => None,
            (Some(l), Some(h)) if l == 0.0 && h == 6.0 => Some(OperationType::Relu6),
            (Some(l), Some(h)) if l == -1.0 && h == 1.0 => Some(OperationType::Relu1),
            (Some(0.0), None) => Some(OperationType::Relu),
            (Some(l), Some(h)) if l == 0.0 && h >= f64::from(f32::MAX) => Some(OperationType::Relu),
            _ => None,
        };
        let y = match fused {
            Some(op) => self.unary_emit(n, op, x)?,
            None => {
                let mut y = x;
                if let Some(l) = lo.filter(|&l| l > f64::from(f32::MIN)) {
                    y = self.with_scalar(n, OperationType::Maximum, y, l)?;
                }
                if let Some(h) = hi.filter(|&h| h < f64::from(f32::MAX)) {
                    y = self.with_scalar(n, OperationType::Minimum, y, h)?;
                }
                if y == x {
                    // No bounds: Clip is the identity.
                    return self.identity_value(n, Value::Tensor(x));
                }
                y
            }
        };
        self.set_output(n, 0, Value::Tensor(y));
        Ok(())
    }

    /// Clip of a known value with known (or absent) bounds folds while lowering, as shape
    /// arithmetic needs (timm's "same" padding clips computed pad sizes at zero, and the
    /// pads decide a Pad's output shape). Returns whether it folded.
    fn clip_known(&mut self, n: &Node) -> NResult<bool> {
        let Some(Value::Const(x)) = self.input(n, 0)? else {
            return Ok(false);
        };
        let scalar = |v: f64| std::rc::Rc::new(constant::from_f64s(x.dtype, vec![], &[v]));
        let (lo, hi) = if self.opset < 11 {
            (
                n.attrs.float("min")?.map(|v| scalar(f64::from(v))),
                n.attrs.float("max")?.map(|v| scalar(f64::from(v))),
            )
        } else {
            let bound = |this: &Self, i: usize| match this.input(n, i) {
                Ok(Some(Value::Const(c))) => Ok(Some(Some(c))),
                Ok(None) => Ok(Some(None)),
                Ok(Some(Value::Tensor(_))) => Ok(None),
                Err(e) => Err(e),
            };
            match (bound(self, 1)?, bound(self, 2)?) {
                (Some(lo), Some(hi)) => (lo, hi),
                _ => return Ok(false),
            }
        };
        let mut y = (*x).clone();
        if let Some(lo) = lo {
            y = constant::binary(constant::BinaryOp::Max, &y, &lo, &self.budget)?;
        }
        if let Some(hi) = hi {
            y = constant::binary(constant::BinaryOp::Min, &y, &hi, &self.budget)?;
        }
        self.set_const(n, 0, y)?;
        Ok(true)
    }

    /// Clip whose bounds are computed at run time: MAXIMUM with the lower bound, then
    /// MINIMUM with the upper one, exactly ONNX's min(max(x, lo), hi) (so lo > hi yields
    /// hi, as in ONNX).
    fn clip_runtime(&mut self, n: &Node, x: TensorValue) -> NResult<()> {
        let mut y = x;
        for (i, op) in [(1, OperationType::Maximum), (2, OperationType::Minimum)] {
            if self.input(n, i)?.is_none() {
                continue;
            }
            let bound = self.tensor(n, i)?;
            if bound.dtype != x.dtype || self.operand_type(bound) != self.operand_type(x) {
                return super::invalid(format!(
                    "Clip bound {i} is {}, the input is {}",
                    bound.dtype, x.dtype
                ));
            }
            if !self.dims(bound).iter().all(|&d| d == 1) {
                return super::invalid("Clip bounds must be scalars");
            }
            let out = self.emit(n, op, vec![y.operand, bound.operand])?;
            y = TensorValue { operand: out, ..x };
        }
        self.set_output(n, 0, Value::Tensor(y));
        Ok(())
    }
}
