//! Elementwise arithmetic, comparison, logic, unary math, Where and Cast.
//!
//! Broadcasting is the NN set's own (NumPy rules). A node whose inputs are all constants
//! is evaluated at compile time instead.

use std::rc::Rc;

use nnc_formats::nn::{MathFunction, OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::super::constant::{self, BinaryOp, ConstTensor};
use super::{Lowerer, NResult, Node, TensorValue, Value, invalid, unsupported};

impl Lowerer<'_> {
    /// All inputs as constants, when every one is.
    fn all_const(&self, n: &Node) -> NResult<Option<Vec<Rc<ConstTensor>>>> {
        let mut out = Vec::new();
        for i in 0..n.proto.input.len() {
            match self.input(n, i)? {
                Some(Value::Const(c)) => out.push(c),
                Some(Value::Tensor(_)) => return Ok(None),
                None => {}
            }
        }
        Ok(Some(out))
    }

    /// Operands for a binary operation: both materialized, with a constant converted to
    /// the other side's element type (ONNX allows e.g. a float base with an int exponent).
    fn binary_operands(
        &mut self,
        n: &Node,
        a: usize,
        b: usize,
    ) -> NResult<(TensorValue, TensorValue)> {
        let va = self.required(n, a)?;
        let vb = self.required(n, b)?;
        let converted =
            |this: &mut Self, v: Value, other: &Value, idx: usize| -> NResult<TensorValue> {
                let other_dtype = match other {
                    Value::Tensor(t) => Some(t.dtype),
                    Value::Const(_) => None,
                };
                match (&v, other_dtype) {
                    (Value::Const(c), Some(dt))
                        if c.dtype != dt && !(c.dtype == DataType::I64 && dt == DataType::I32) =>
                    {
                        let cast = constant::cast(c, dt);
                        this.const_operand(&cast)
                    }
                    _ => {
                        let name = this.input_name(n, idx).unwrap_or("").to_string();
                        this.materialize(&name, &v)
                    }
                }
            };
        let ta = converted(self, va.clone(), &vb, a)?;
        let tb = converted(self, vb, &va, b)?;
        let (sa, sb) = (self.operand_type(ta), self.operand_type(tb));
        if sa != sb {
            return unsupported(format!(
                "{} of {} and {} operands",
                n.op(),
                ta.dtype,
                tb.dtype
            ));
        }
        Ok((ta, tb))
    }

    pub(super) fn binary(&mut self, n: &Node) -> NResult<()> {
        if n.version < 7 && n.attrs.int_or("broadcast", 0)? != 0 && n.attrs.has("axis") {
            return self.legacy_broadcast_binary(n);
        }
        let op = n.op();
        let arity = n.proto.input.iter().filter(|i| !i.is_empty()).count();
        let variadic = matches!(op, "Max" | "Min" | "Sum" | "Mean");
        if arity == 0 || (!variadic && arity != 2) {
            return Err(super::NodeError::Invalid(format!(
                "{op} takes {} inputs, got {arity}",
                if variadic { "1 or more" } else { "2" }
            )));
        }
        let const_op = match op {
            "Add" | "Sum" | "Mean" => BinaryOp::Add,
            "Sub" => BinaryOp::Sub,
            "Mul" => BinaryOp::Mul,
            "Div" => BinaryOp::Div,
            "Pow" => BinaryOp::Pow,
            "Max" => BinaryOp::Max,
            "Min" => BinaryOp::Min,
            "Equal" => BinaryOp::Equal,
            "Less" => BinaryOp::Less,
            "Greater" => BinaryOp::Greater,
            "LessOrEqual" => BinaryOp::LessOrEqual,
            "GreaterOrEqual" => BinaryOp::GreaterOrEqual,
            "And" => BinaryOp::And,
            "Or" => BinaryOp::Or,
            _ => BinaryOp::Xor,
        };
        if let Some(consts) = self.all_const(n)? {
            let mut acc = (*consts[0]).clone();
            for c in &consts[1..] {
                acc = constant::binary(const_op, &acc, c, &self.budget)?;
            }
            if op == "Mean" {
                let count = constant::from_f64s(acc.dtype, vec![], &[consts.len() as f64]);
                acc = constant::binary(BinaryOp::Div, &acc, &count, &self.budget)?;
            }
            self.set_const(n, 0, acc)?;
            return Ok(());
        }
        if arity == 1 {
            // Variadic over one input is the identity.
            let v = self.required(n, 0)?;
            self.set_output(n, 0, v);
            return Ok(());
        }
        if op == "Pow"
            && let (Some(Value::Tensor(base)), Some(Value::Tensor(exp))) =
                (self.input(n, 0)?, self.input(n, 1)?)
            && super::is_float(base.dtype)
            && self.operand_type(exp) == OperandType::TensorInt32
        {
            // A float base with an integer exponent: POW is float-only, so the exponent is
            // cast to float (exact up to 2^24 in magnitude; beyond that only a base of -1
            // could tell, by parity). ONNX's result type is the base's.
            let e = self.cast_op(n, exp.operand, OperandType::TensorFloat32)?;
            let out = self.emit(n, OperationType::Pow, vec![base.operand, e])?;
            self.set_tensor(n, 0, out, DataType::F32, base.scalar && exp.scalar);
            return Ok(());
        }
        if op == "Pow" {
            let int_input = |this: &Self, i: usize| {
                matches!(this.input(n, i), Ok(Some(Value::Tensor(t)))
                    if this.operand_type(t) == OperandType::TensorInt32)
            };
            if int_input(self, 0) {
                return unsupported(
                    "Pow of an integer base: POW is float-only, and float powers are not \
                     exact integer powers beyond 2^24",
                );
            }
        }
        let mut acc = self.binary_step(n, op, 0, 1)?;
        for i in 2..arity {
            let next = self.tensor(n, i)?;
            acc = self.binary_emit(n, op, acc, next)?;
        }
        if op == "Mean" {
            let scale = self.scalar_tensor(OperandType::TensorFloat32, 1.0 / arity as f64);
            let act = self.i32_const(0);
            let out = self.emit(n, OperationType::Mul, vec![acc.operand, scale, act])?;
            acc = TensorValue {
                operand: out,
                ..acc
            };
        }
        self.set_output(n, 0, Value::Tensor(acc));
        Ok(())
    }

    /// Arithmetic before opset 7 with `broadcast=1` and an `axis`: B's dimensions line up
    /// with A's from `axis` on, not from the end. B gains trailing unit dimensions so that
    /// numpy broadcasting (the rule since opset 7) places it the same way.
    fn legacy_broadcast_binary(&mut self, n: &Node) -> NResult<()> {
        let a_rank = match self.required(n, 0)? {
            Value::Tensor(t) => self.rank(t),
            Value::Const(c) => c.shape.len(),
        };
        let b = self.required(n, 1)?;
        let b_shape: Vec<u32> = self.shape_of_value(&b);
        let axis = n.attrs.int_or("axis", 0)?;
        let axis = usize::try_from(if axis < 0 { axis + a_rank as i64 } else { axis })
            .ok()
            .filter(|&a| a + b_shape.len() <= a_rank)
            .ok_or_else(|| {
                super::NodeError::Invalid(format!(
                    "axis {axis} does not place a rank-{} B inside a rank-{a_rank} A",
                    b_shape.len()
                ))
            })?;
        let mut dims = b_shape.clone();
        dims.extend(std::iter::repeat_n(1, a_rank - axis - b_shape.len()));
        let reshaped = match b {
            Value::Const(c) => Value::Const(Rc::new(ConstTensor {
                shape: dims.iter().map(|&d| d as usize).collect(),
                ..(*c).clone()
            })),
            Value::Tensor(t) => {
                let operand = self.reshape_to(n, t.operand, &dims)?;
                Value::Tensor(TensorValue { operand, ..t })
            }
        };
        // Lower the node again as a numpy-broadcasting one over the reshaped B.
        let name = format!("{}#legacy-broadcast-b", n.label);
        self.values.insert(name.clone(), reshaped);
        let mut proto = n.proto.clone();
        proto.input[1] = name;
        proto
            .attribute
            .retain(|a| a.name != "broadcast" && a.name != "axis");
        let node = Node {
            proto: &proto,
            attrs: super::super::attrs::Attrs::new(&proto),
            label: n.label.clone(),
            version: 7,
        };
        self.binary(&node)
    }

    fn binary_step(&mut self, n: &Node, op: &str, a: usize, b: usize) -> NResult<TensorValue> {
        let (ta, tb) = self.binary_operands(n, a, b)?;
        self.binary_emit(n, op, ta, tb)
    }

    /// Emits one binary operation of ONNX kind `op` on two operands.
    pub(super) fn binary_emit(
        &mut self,
        n: &Node,
        op: &str,
        a: TensorValue,
        b: TensorValue,
    ) -> NResult<TensorValue> {
        let t = self.operand_type(a);
        let is_float = t == OperandType::TensorFloat32;
        let is_int = t == OperandType::TensorInt32;
        let is_bool = t == OperandType::TensorBool8;
        let scalar = a.scalar && b.scalar;
        if super::is_quant8(t) {
            let int_op = match op {
                "Add" | "Sum" => Some(OperationType::Add),
                "Sub" => Some(OperationType::Sub),
                "Mul" => Some(OperationType::Mul),
                // Unsigned quotients are non-negative: floor and truncation agree; signed
                // ones truncate through MOD (see `trunc_div`).
                "Div" => Some(OperationType::Div),
                "Mean" => {
                    return unsupported(format!("Mean of {} tensors is not supported", a.dtype));
                }
                _ => None,
            };
            if let Some(int_op) = int_op {
                let out = self.int8_arith(n, int_op, a, b)?;
                return Ok(TensorValue {
                    operand: out,
                    dtype: a.dtype,
                    scalar,
                });
            }
        }
        let arith = |o: OperationType| (o, true);
        let (nn_op, with_act) = match op {
            "Add" | "Sum" | "Mean" if is_float || is_int => arith(OperationType::Add),
            "Sub" if is_float || is_int => arith(OperationType::Sub),
            "Mul" if is_float || is_int => arith(OperationType::Mul),
            "Div" if is_float => arith(OperationType::Div),
            "Div" if is_int => {
                let out = self.trunc_div(n, a.operand, b.operand)?;
                return Ok(TensorValue {
                    operand: out,
                    dtype: a.dtype,
                    scalar,
                });
            }
            "Pow" if is_float => (OperationType::Pow, false),
            // On 8-bit operands of equal quantization these compare the stored integers.
            "Max" if !is_bool => (OperationType::Maximum, false),
            "Min" if !is_bool => (OperationType::Minimum, false),
            "Equal" => (OperationType::Equal, false),
            "Less" if !is_bool => (OperationType::Less, false),
            "Greater" if !is_bool => (OperationType::Greater, false),
            "LessOrEqual" if !is_bool => (OperationType::LessEqual, false),
            "GreaterOrEqual" if !is_bool => (OperationType::GreaterEqual, false),
            "And" if is_bool => (OperationType::LogicalAnd, false),
            "Or" if is_bool => (OperationType::LogicalOr, false),
            "Xor" if is_bool => (OperationType::NotEqual, false),
            _ => return unsupported(format!("{op} on {} tensors is not supported", a.dtype)),
        };
        let mut inputs = vec![a.operand, b.operand];
        if with_act {
            inputs.push(self.i32_const(0));
        }
        let out = self.emit(n, nn_op, inputs)?;
        let dtype =
            if self.operand_type(TensorValue { operand: out, ..a }) == OperandType::TensorBool8 {
                DataType::Bool
            } else {
                a.dtype
            };
        Ok(TensorValue {
            operand: out,
            dtype,
            scalar,
        })
    }

    /// ONNX arithmetic on uint8 / int8 tensors wraps modulo 256, as NumPy's does; the NN
    /// set's quantized ADD/SUB/MUL saturate instead. So the operands are cast to int32
    /// (exact), the int32 operation runs (exact for 8-bit operands), and the result is
    /// reduced into the 8-bit range, `r = w - 256 * floor(w / 256)` with
    /// `w = v (+ 128 for int8)`, before the cast back (which then never saturates).
    fn int8_arith(
        &mut self,
        n: &Node,
        op: OperationType,
        a: TensorValue,
        b: TensorValue,
    ) -> NResult<u32> {
        use OperandType as T;
        let t = self.operand_type(a);
        let signed = t == T::TensorQuant8AsymmSigned;
        let ai = self.cast_op(n, a.operand, T::TensorInt32)?;
        let bi = self.cast_op(n, b.operand, T::TensorInt32)?;
        let v = if op == OperationType::Div && signed {
            self.trunc_div(n, ai, bi)?
        } else {
            self.arith(n, op, ai, bi)?
        };
        if op == OperationType::Div && !signed {
            return self.cast_op(n, v, t);
        }
        self.wrap_to_bits(n, v, 8, t)
    }

    /// ONNX's integer division, which truncates toward zero, on int32 operands: the NN
    /// set's DIV floors, so the dividend first loses its truncated remainder (nnc's MOD
    /// with `fmod`), after which the division is exact and floor and truncation agree.
    fn trunc_div(&mut self, n: &Node, a: u32, b: u32) -> NResult<u32> {
        let fmod = self.bool_const(true);
        let r = self.emit(n, OperationType::Mod, vec![a, b, fmod])?;
        let exact = self.arith(n, OperationType::Sub, a, r)?;
        self.arith(n, OperationType::Div, exact, b)
    }

    /// ONNX Mod: the remainder with the sign of the divisor, or with `fmod` that of the
    /// dividend (required for floats before opset 28), as nnc's MOD extension operation. 8-bit operands
    /// compute in int32, where every remainder fits their type again.
    pub(super) fn mod_op(&mut self, n: &Node) -> NResult<()> {
        let fmod = n.attrs.int_or("fmod", 0)? != 0;
        // Known inputs fold, as shape arithmetic needs (Swin's window padding is
        // `(ws - H % ws) % ws` over the input's static shape).
        if let Some(consts) = self.all_const(n)?
            && let [a, b] = consts.as_slice()
        {
            if super::is_float(a.dtype) && !fmod && n.version < 28 {
                return invalid("Mod of floating-point tensors needs fmod=1 before opset 28");
            }
            let op = if fmod {
                BinaryOp::Mod
            } else {
                BinaryOp::FloorMod
            };
            let r = constant::binary(op, a, b, &self.budget)?;
            self.set_const(n, 0, r)?;
            return Ok(());
        }
        let (a, b) = self.binary_operands(n, 0, 1)?;
        let t = self.operand_type(a);
        let scalar = a.scalar && b.scalar;
        let flag = self.bool_const(fmod);
        let out = match t {
            // Before opset 28, ONNX defines float Mod with fmod=1 only.
            OperandType::TensorFloat32 if !fmod && n.version < 28 => {
                return invalid("Mod of floating-point tensors needs fmod=1 before opset 28");
            }
            OperandType::TensorFloat32 | OperandType::TensorInt32 => {
                self.emit(n, OperationType::Mod, vec![a.operand, b.operand, flag])?
            }
            t if super::is_quant8(t) => {
                let ai = self.cast_op(n, a.operand, OperandType::TensorInt32)?;
                let bi = self.cast_op(n, b.operand, OperandType::TensorInt32)?;
                let r = self.emit(n, OperationType::Mod, vec![ai, bi, flag])?;
                self.cast_op(n, r, t)?
            }
            _ => return unsupported(format!("Mod on {} tensors is not supported", a.dtype)),
        };
        self.set_tensor(n, 0, out, a.dtype, scalar);
        Ok(())
    }

    /// BitShift, BitwiseAnd/Or/Xor and BitwiseNot as nnc's BITWISE on int32 values: 8-bit
    /// operands compute in int32 and wrap back (a left shift of uint8 loses its high
    /// bits as ONNX's does), uint16 results are masked to 16 bits; 32- and 64-bit
    /// unsigned results beyond int32 fail the run-time range check at the output rather
    /// than being wrong.
    pub(super) fn bitwise(&mut self, n: &Node) -> NResult<()> {
        use nnc_formats::nn::BitwiseFunction as F;
        let not = n.op() == "BitwiseNot";
        let (a, b) = if not {
            let x = self.tensor(n, 0)?;
            let ones = self.scalar_tensor(OperandType::TensorInt32, -1.0);
            let ones = TensorValue {
                operand: ones,
                dtype: DataType::I32,
                scalar: true,
            };
            (x, ones)
        } else {
            self.binary_operands(n, 0, 1)?
        };
        let function = match n.op() {
            "BitwiseAnd" => F::And,
            "BitwiseOr" => F::Or,
            "BitwiseXor" | "BitwiseNot" => F::Xor,
            _ => match n.attrs.string_or("direction", "")?.as_str() {
                "LEFT" => F::ShiftLeft,
                "RIGHT" => F::ShiftRight,
                other => return invalid(format!("direction must be LEFT or RIGHT, got '{other}'")),
            },
        };
        let t = self.operand_type(a);
        let quant8 = super::is_quant8(t);
        if !(quant8 || t == OperandType::TensorInt32) || a.dtype == DataType::Bool {
            return unsupported(format!(
                "{} on {} tensors is not supported",
                n.op(),
                a.dtype
            ));
        }
        if not && matches!(a.dtype, DataType::U32 | DataType::U64) {
            return unsupported(format!(
                "BitwiseNot of {} values exceeds the int32 they compute in",
                a.dtype
            ));
        }
        let (mut x, mut y) = (a.operand, b.operand);
        if quant8 {
            x = self.cast_op(n, x, OperandType::TensorInt32)?;
            if !not {
                y = self.cast_op(n, y, OperandType::TensorInt32)?;
            }
        }
        let code = self.i32_const(function as i32);
        let mut out = self.emit(n, OperationType::Bitwise, vec![x, y, code])?;
        if a.dtype == DataType::U16 {
            let mask = self.scalar_tensor(OperandType::TensorInt32, 65535.0);
            let and = self.i32_const(F::And as i32);
            out = self.emit(n, OperationType::Bitwise, vec![out, mask, and])?;
        }
        if quant8 {
            out = self.wrap_to_bits(n, out, 8, t)?;
        }
        self.set_tensor(n, 0, out, a.dtype, a.scalar && b.scalar);
        Ok(())
    }

    /// CumSum as nnc's CUMSUM; the axis must be known at compile time.
    pub(super) fn cumsum(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        let axis_value = self.required_const(n, 1)?;
        let Some(&a) = constant::to_i64s(&axis_value).first() else {
            return invalid("CumSum's axis holds no value");
        };
        let r = self.rank(x);
        let a = super::axis(a, r)?;
        let t = self.operand_type(x);
        if !matches!(t, OperandType::TensorFloat32 | OperandType::TensorInt32) {
            return unsupported(format!("CumSum on {} tensors is not supported", x.dtype));
        }
        let ax = self.i32_const(a as i32);
        let exclusive = self.bool_const(n.attrs.int_or("exclusive", 0)? != 0);
        let reverse = self.bool_const(n.attrs.int_or("reverse", 0)? != 0);
        let y = self.emit(
            n,
            OperationType::CumSum,
            vec![x.operand, ax, exclusive, reverse],
        )?;
        self.set_output(n, 0, Value::Tensor(TensorValue { operand: y, ..x }));
        Ok(())
    }

    /// Shrink: `x + bias` below `-lambd`, `x - bias` above `lambd`, 0 between, as
    /// comparisons and SELECTs (exact).
    pub(super) fn shrink(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let bias = f64::from(n.attrs.float_or("bias", 0.0)?);
        let lambd = f64::from(n.attrs.float_or("lambd", 0.5)?);
        let t = self.operand_type(x);
        let low = self.scalar_tensor(t, -lambd);
        let high = self.scalar_tensor(t, lambd);
        let below = self.emit(n, OperationType::Less, vec![x.operand, low])?;
        let above = self.emit(n, OperationType::Greater, vec![x.operand, high])?;
        let plus = self.scalar_tensor(t, bias);
        let raised = self.arith(n, OperationType::Add, x.operand, plus)?;
        let lowered = self.arith(n, OperationType::Sub, x.operand, plus)?;
        let zero = self.scalar_tensor(t, 0.0);
        let upper = self.emit(n, OperationType::Select, vec![above, lowered, zero])?;
        let y = self.emit(n, OperationType::Select, vec![below, raised, upper])?;
        self.set_output(n, 0, Value::Tensor(TensorValue { operand: y, ..x }));
        Ok(())
    }

    /// The elementwise functions the NN set lacks (Round, Tan, the inverse and hyperbolic
    /// trigonometric functions) as nnc's MATH_UNARY.
    pub(super) fn math_unary(&mut self, n: &Node) -> NResult<()> {
        use nnc_formats::nn::MathFunction as F;
        let (function, exact): (F, fn(f64) -> f64) = match n.op() {
            "Round" => (F::Round, f64::round_ties_even),
            "Tan" => (F::Tan, f64::tan),
            "Asin" => (F::Asin, f64::asin),
            "Acos" => (F::Acos, f64::acos),
            "Atan" => (F::Atan, f64::atan),
            "Sinh" => (F::Sinh, f64::sinh),
            "Cosh" => (F::Cosh, f64::cosh),
            "Asinh" => (F::Asinh, f64::asinh),
            "Acosh" => (F::Acosh, f64::acosh),
            "Atanh" => (F::Atanh, f64::atanh),
            other => return unsupported(format!("no MATH_UNARY function for {other}")),
        };
        if let Some(Value::Const(c)) = self.input(n, 0)? {
            return self.set_const(n, 0, constant::unary(&c, exact));
        }
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let code = self.i32_const(function as i32);
        let y = self.emit(n, OperationType::MathUnary, vec![x.operand, code])?;
        self.set_output(n, 0, Value::Tensor(TensorValue { operand: y, ..x }));
        Ok(())
    }

    /// An int32 operand reduced modulo `2^bits` into the range of a `bits`-bit integer,
    /// signed when `t` is (C's and NumPy's conversion), then cast to the 8-bit type `t`.
    fn wrap_to_bits(&mut self, n: &Node, v: u32, bits: u32, t: OperandType) -> NResult<u32> {
        let signed = t == OperandType::TensorQuant8AsymmSigned;
        let modulus = f64::from(1u32 << bits);
        let half = modulus / 2.0;
        let int = |operand: u32| TensorValue {
            operand,
            dtype: DataType::I32,
            scalar: false,
        };
        let mut v = v;
        if signed {
            v = self
                .with_scalar(n, OperationType::Add, int(v), half)?
                .operand;
        }
        let q = self.with_scalar(n, OperationType::Div, int(v), modulus)?;
        let m = self.with_scalar(n, OperationType::Mul, q, modulus)?;
        v = self.arith(n, OperationType::Sub, v, m.operand)?;
        if signed {
            v = self
                .with_scalar(n, OperationType::Sub, int(v), half)?
                .operand;
        }
        self.cast_op(n, v, t)
    }

    /// Emits an arithmetic operation with one constant scalar operand (`x op c`).
    pub(super) fn with_scalar(
        &mut self,
        n: &Node,
        op: OperationType,
        x: TensorValue,
        c: f64,
    ) -> NResult<TensorValue> {
        let t = self.operand_type(x);
        let k = self.scalar_tensor(t, c);
        let mut inputs = vec![x.operand, k];
        if matches!(
            op,
            OperationType::Add | OperationType::Sub | OperationType::Mul | OperationType::Div
        ) {
            inputs.push(self.i32_const(0));
        }
        let out = self.emit(n, op, inputs)?;
        Ok(TensorValue { operand: out, ..x })
    }

    /// Emits a unary operation.
    pub(super) fn unary_emit(
        &mut self,
        n: &Node,
        op: OperationType,
        x: TensorValue,
    ) -> NResult<TensorValue> {
        let out = self.emit(n, op, vec![x.operand])?;
        Ok(TensorValue { operand: out, ..x })
    }

    pub(super) fn unary(&mut self, n: &Node) -> NResult<()> {
        let op = n.op();
        if let Some(Value::Const(c)) = self.input(n, 0)? {
            let folded = match op {
                "Abs" => constant::unary(&c, f64::abs),
                "Neg" => constant::unary(&c, |v| -v),
                "Exp" => constant::unary(&c, f64::exp),
                "Log" => constant::unary(&c, f64::ln),
                "Sqrt" => constant::unary(&c, f64::sqrt),
                "Reciprocal" => constant::unary(&c, |v| 1.0 / v),
                "Floor" => constant::unary(&c, f64::floor),
                "Ceil" => constant::unary(&c, f64::ceil),
                "Sin" => constant::unary(&c, f64::sin),
                "Cos" => constant::unary(&c, f64::cos),
                "Sign" => constant::unary(&c, |v| {
                    if v > 0.0 {
                        1.0
                    } else if v < 0.0 {
                        -1.0
                    } else {
                        0.0
                    }
                }),
                "Not" => constant::cast(
                    &constant::unary(&c, |v| f64::from(u8::from(v == 0.0))),
                    DataType::Bool,
                ),
                _ => return unsupported(format!("no constant evaluation for {op}")),
            };
            self.set_const(n, 0, folded)?;
            return Ok(());
        }
        let x = self.tensor(n, 0)?;
        let t = self.operand_type(x);
        let float = t == OperandType::TensorFloat32;
        let int = t == OperandType::TensorInt32;
        let y = match op {
            "Abs" if float || int => self.unary_emit(n, OperationType::Abs, x)?,
            "Neg" if float || int => self.unary_emit(n, OperationType::Neg, x)?,
            "Exp" if float => self.unary_emit(n, OperationType::Exp, x)?,
            "Log" if float => self.unary_emit(n, OperationType::Log, x)?,
            "Sqrt" if float => self.unary_emit(n, OperationType::Sqrt, x)?,
            "Floor" if float => self.unary_emit(n, OperationType::Floor, x)?,
            "Sin" if float => self.unary_emit(n, OperationType::Sin, x)?,
            "Reciprocal" if float => {
                let one = self.scalar_tensor(t, 1.0);
                let act = self.i32_const(0);
                let out = self.emit(n, OperationType::Div, vec![one, x.operand, act])?;
                TensorValue { operand: out, ..x }
            }
            "Ceil" if float => {
                // ceil(x) = -floor(-x)
                let neg = self.unary_emit(n, OperationType::Neg, x)?;
                let fl = self.unary_emit(n, OperationType::Floor, neg)?;
                self.unary_emit(n, OperationType::Neg, fl)?
            }
            "Cos" if float => {
                // cos(x) = sin(x + pi/2); the f32 rounding of pi/2 adds < 4.4e-8 absolute error.
                let shifted =
                    self.with_scalar(n, OperationType::Add, x, std::f64::consts::FRAC_PI_2)?;
                self.unary_emit(n, OperationType::Sin, shifted)?
            }
            "Sign" if float || int => {
                let zero = self.scalar_tensor(t, 0.0);
                let gt = self.emit(n, OperationType::Greater, vec![x.operand, zero])?;
                let lt = self.emit(n, OperationType::Less, vec![x.operand, zero])?;
                let gt = self.emit_raw(
                    OperationType::Cast,
                    vec![gt],
                    vec![Some(nnc_formats::nn::Operand::new(t, vec![]))],
                    &n.label,
                )?[0];
                let lt = self.emit_raw(
                    OperationType::Cast,
                    vec![lt],
                    vec![Some(nnc_formats::nn::Operand::new(t, vec![]))],
                    &n.label,
                )?[0];
                let act = self.i32_const(0);
                let out = self.emit(n, OperationType::Sub, vec![gt, lt, act])?;
                TensorValue { operand: out, ..x }
            }
            "Not" if t == OperandType::TensorBool8 => {
                self.unary_emit(n, OperationType::LogicalNot, x)?
            }
            _ => return unsupported(format!("{op} on {} tensors is not supported", x.dtype)),
        };
        self.set_output(n, 0, Value::Tensor(y));
        Ok(())
    }

    pub(super) fn where_op(&mut self, n: &Node) -> NResult<()> {
        if let Some(c) = self.all_const(n)?
            && c.len() == 3
        {
            let cond = constant::to_i64s(&c[0]);
            let shape = constant::broadcast_shape(
                &constant::broadcast_shape(&c[0].shape, &c[1].shape)?,
                &c[2].shape,
            )?;
            let (cb, xb, yb) = (
                constant::broadcast_to(&c[0], &shape, &self.budget)?,
                constant::broadcast_to(&c[1], &shape, &self.budget)?,
                constant::broadcast_to(&c[2], &shape, &self.budget)?,
            );
            let _ = cond;
            let size = xb.dtype.size();
            let mut data = Vec::with_capacity(xb.data.len());
            for (i, &flag) in cb.data.iter().enumerate() {
                let src = if flag != 0 { &xb.data } else { &yb.data };
                data.extend_from_slice(&src[i * size..(i + 1) * size]);
            }
            self.set_const(
                n,
                0,
                ConstTensor {
                    dtype: xb.dtype,
                    shape,
                    data,
                },
            )?;
            return Ok(());
        }
        let cond = self.tensor(n, 0)?;
        if cond.dtype != DataType::Bool {
            return Err(super::NodeError::Invalid(
                "Where's condition must be bool".into(),
            ));
        }
        let (x, y) = self.binary_operands(n, 1, 2)?;
        let out = self.emit(
            n,
            OperationType::Select,
            vec![cond.operand, x.operand, y.operand],
        )?;
        let scalar = cond.scalar && x.scalar && y.scalar;
        self.set_tensor(n, 0, out, x.dtype, scalar);
        Ok(())
    }

    pub(super) fn cast(&mut self, n: &Node) -> NResult<()> {
        let to = if n.op() == "CastLike" {
            match self.required(n, 1)? {
                Value::Const(c) => c.dtype,
                Value::Tensor(t) => t.dtype,
            }
        } else {
            let code = n
                .attrs
                .int("to")?
                .ok_or_else(|| super::NodeError::Invalid("Cast needs 'to'".into()))?;
            super::super::tensor::host_data_type(code as i32).ok_or_else(|| {
                super::NodeError::Unsupported(format!(
                    "Cast to {} is not supported",
                    super::super::proto::tensor_proto::DataType::describe(code as i32)
                ))
            })?
        };
        // Float8 targets only: out-of-range values saturate unless told not to.
        let saturate = n.attrs.int("saturate")?.unwrap_or(1) != 0;
        match self.required(n, 0)? {
            Value::Const(c) => {
                self.set_const(n, 0, constant::cast_with(&c, to, saturate))?;
                Ok(())
            }
            Value::Tensor(x) if let Some(format) = to.float_format() => {
                // Bfloat16, float8 and float4 compute as float32: round to the format.
                if x.dtype == to {
                    self.set_tensor(n, 0, x.operand, to, x.scalar);
                    return Ok(());
                }
                let mut v = x.operand;
                if self.operand_type(x) != OperandType::TensorFloat32 {
                    v = self.cast_op(n, v, OperandType::TensorFloat32)?;
                }
                let function = MathFunction::rounding(format, saturate);
                let code = self.i32_const(function as i32);
                let out = self.emit(n, OperationType::MathUnary, vec![v, code])?;
                self.set_tensor(n, 0, out, to, x.scalar);
                Ok(())
            }
            Value::Tensor(x) if let Some(int) = to.narrow_int() => {
                // 4- and 2-bit integers compute as 8-bit ones. Cast-21 saturates into
                // them (onnx 1.17's reference); from Cast-25 they wrap, as every other
                // integer narrowing does.
                let source = self.operand_type(x);
                let v = if source == OperandType::TensorInt32 {
                    x.operand
                } else {
                    self.cast_op(n, x.operand, OperandType::TensorInt32)?
                };
                let target = super::super::nn_type_for(to);
                let out = if self.opset >= 25 {
                    self.wrap_to_bits(n, v, int.bits, target)?
                } else {
                    let t = TensorValue {
                        operand: v,
                        dtype: DataType::I32,
                        scalar: false,
                    };
                    let low =
                        self.with_scalar(n, OperationType::Maximum, t, f64::from(int.min()))?;
                    let high =
                        self.with_scalar(n, OperationType::Minimum, low, f64::from(int.max()))?;
                    self.cast_op(n, high.operand, target)?
                };
                self.set_tensor(n, 0, out, to, x.scalar);
                Ok(())
            }
            Value::Tensor(x) if to == DataType::F16 => {
                // Float16 computes as float32: round through TENSOR_FLOAT16 and back, so
                // the value is exactly what ONNX's float16 holds.
                if x.dtype == DataType::F16 {
                    self.set_tensor(n, 0, x.operand, to, x.scalar);
                    return Ok(());
                }
                let mut v = x.operand;
                if self.operand_type(x) != OperandType::TensorFloat32 {
                    v = self.cast_op(n, v, OperandType::TensorFloat32)?;
                }
                let half = self.cast_op(n, v, OperandType::TensorFloat16)?;
                let out = self.cast_op(n, half, OperandType::TensorFloat32)?;
                self.set_tensor(n, 0, out, to, x.scalar);
                Ok(())
            }
            Value::Tensor(x) => {
                self.computes_float64_as_float32 |= to == DataType::F64;
                let target = super::super::nn_type_for(to);
                let source = self.operand_type(x);
                if target == source {
                    // int64 <-> int32 both compute as TENSOR_INT32: only the label changes.
                    self.set_tensor(n, 0, x.operand, to, x.scalar);
                    return Ok(());
                }
                if super::is_quant8(target) {
                    // ONNX converts integers to 8 bits modulo 256; CAST would saturate.
                    let v = if source == OperandType::TensorInt32 {
                        x.operand
                    } else {
                        self.cast_op(n, x.operand, OperandType::TensorInt32)?
                    };
                    let out = self.wrap_to_bits(n, v, 8, target)?;
                    self.set_tensor(n, 0, out, to, x.scalar);
                    return Ok(());
                }
                let out = self.emit_raw(
                    OperationType::Cast,
                    vec![x.operand],
                    vec![Some(nnc_formats::nn::Operand::new(target, vec![]))],
                    &n.label,
                )?[0];
                self.set_tensor(n, 0, out, to, x.scalar);
                Ok(())
            }
        }
    }
}
