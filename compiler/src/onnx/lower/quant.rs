//! QuantizeLinear, DequantizeLinear, QLinearMatMul.
//!
//! ONNX's uint8 / int8 tensors are plain integers here: NN operands of the 8-bit
//! quantized types with scale 1 and zero point 0. ONNX passes the quantization of a
//! tensor beside it (scale and zero point inputs); the NN set attaches it to operands.
//!
//! - DequantizeLinear is ONNX's own arithmetic, `(float(x) - float(zp)) * scale` in
//!   float32: CAST, SUB, MUL. Exact, and it covers per-axis and blocked quantization
//!   with any zero points and run-time parameters, which DEQUANTIZE (per-tensor, or
//!   per-channel only for symmetric int8) cannot.
//! - QuantizeLinear is `saturate(rint(x / scale) + zp)`, with round half to even. The
//!   NN set's QUANTIZE rounds half away from zero, so the rounding is done first, in
//!   float32, by adding and subtracting 1.5 * 2^23 (float addition rounds half to even,
//!   and at that magnitude its unit is 1); QUANTIZE with scale 1 then only saturates an
//!   integer-valued float. Values too large for the trick saturate either way.
//! - QLinearMatMul and QLinearConv reinterpret its operands with their scales and zero points (CAST,
//!   which ignores quantization parameters, so it moves the stored integers unchanged)
//!   and run the quantized BATCH_MATMUL / CONV_2D, whose output carries the output scale and zero
//!   point; a last CAST makes it a plain tensor again. The requantization is the
//!   device's: the CPU runtime's default (float scale, round half to even) agreed with
//!   ONNX's `saturate(rint(acc * scale) + zp)` on every element of randomized checks;
//!   its fixed-point mode (TFLite's reference) differs by one unit on rare ties. ONNX's
//!   reference implementation wraps out-of-range results instead of saturating as its
//!   specification says; the NN set saturates.

use nnc_formats::nn::ops::{Conv2d, ConvKind};
use nnc_formats::nn::{FusedActivation, MathFunction, Operand, OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::super::constant::{self, ConstTensor};
use super::{
    Lowerer, NResult, Node, TensorValue, Value, axis, invalid, is_quant8, needs_input_shape,
    unsupported,
};

/// 1.5 * 2^23: adding and subtracting it rounds an f32 of magnitude below 2^22 to an
/// integer, ties to even.
const ROUND_HALF_EVEN: f64 = 12_582_912.0;

fn quant8_type(dtype: DataType) -> Option<OperandType> {
    match dtype {
        DataType::U8 => Some(OperandType::TensorQuant8Asymm),
        DataType::I8 => Some(OperandType::TensorQuant8AsymmSigned),
        _ => None,
    }
}

impl Lowerer<'_> {
    /// Parameter input `i` (scale or zero point) as an operand that broadcasts against
    /// `dims`: a scalar as is, a per-axis vector reshaped onto `axis`, a blocked tensor
    /// expanded along `axis` by GATHER (each entry repeated `block` times).
    fn broadcast_param(
        &mut self,
        n: &Node,
        i: usize,
        dims: &[u32],
        a: Option<usize>,
        block: usize,
    ) -> NResult<TensorValue> {
        let p = self.tensor(n, i)?;
        let pd = self.dims(p);
        let count: u64 = pd.iter().map(|&d| u64::from(d)).product();
        if pd.contains(&0) {
            return unsupported("quantization parameters of unknown shape");
        }
        if block == 0 && count == 1 {
            return Ok(p);
        }
        let Some(a) = a else {
            return invalid(format!(
                "axis is out of range for the rank-{} input",
                dims.len()
            ));
        };
        if block == 0 {
            if pd.len() != 1 || pd[0] != dims[a] {
                return invalid(format!(
                    "a per-axis parameter of shape {pd:?} for axis {a} of {dims:?}"
                ));
            }
            let mut shape = vec![1u32; dims.len()];
            shape[a] = dims[a];
            let out = self.reshape_to(n, p.operand, &shape)?;
            return Ok(TensorValue {
                operand: out,
                scalar: false,
                ..p
            });
        }
        let full = dims[a] as usize;
        let blocks = full.div_ceil(block);
        let fits = pd.len() == dims.len()
            && pd
                .iter()
                .zip(dims)
                .enumerate()
                .all(|(k, (&q, &d))| if k == a { q as usize == blocks } else { q == d });
        if !fits {
            return invalid(format!(
                "a blocked parameter of shape {pd:?} for {dims:?} (axis {a}, block {block})"
            ));
        }
        let indices: Vec<i32> = (0..full).map(|j| (j / block) as i32).collect();
        let ax = self.i32_const(a as i32);
        let idx = self.i32_vector(&indices);
        let out = self.emit(n, OperationType::Gather, vec![p.operand, ax, idx])?;
        Ok(TensorValue {
            operand: out,
            scalar: false,
            ..p
        })
    }

    /// A float32 operand holding operand `p` (an integer zero point) converted exactly.
    fn as_float(&mut self, n: &Node, p: TensorValue) -> NResult<u32> {
        if self.operand_type(p) == OperandType::TensorFloat32 {
            return Ok(p.operand);
        }
        self.cast_op(n, p.operand, OperandType::TensorFloat32)
    }

    /// The axis and block size attributes of (De)QuantizeLinear for a rank-`rank` input.
    /// The axis is `None` when out of range, which matters only for non-scalar
    /// parameters (the default, 1, is out of range for 1-D inputs).
    fn quant_axis(&self, n: &Node, rank: usize) -> NResult<(Option<usize>, usize)> {
        let block = n.attrs.int_or("block_size", 0)?;
        if block < 0 {
            return invalid(format!("block_size {block} is negative"));
        }
        let a = axis(n.attrs.int_or("axis", 1)?, rank).ok();
        Ok((a, block as usize))
    }

    pub(super) fn dequantize_linear(&mut self, n: &Node) -> NResult<()> {
        if let Some(y) = self.dequantize_constant(n)? {
            return self.set_const(n, 0, y);
        }
        let x = self.tensor(n, 0)?;
        let t = self.operand_type(x);
        // Float8 values are float32 operands already (exact); 4- and 2-bit integers are
        // 8-bit ones.
        let float8 = x.dtype.float_format().is_some();
        if !is_quant8(t) && t != OperandType::TensorInt32 && !float8 {
            return unsupported(format!("DequantizeLinear of {} tensors", x.dtype));
        }
        let dims = self.known_dims(x)?;
        let (a, block) = self.quant_axis(n, dims.len())?;
        let xf = self.as_float(n, x)?;
        let mut y = xf;
        if self.input(n, 2)?.is_some() {
            let zp = self.broadcast_param(n, 2, &dims, a, block)?;
            if self.operand_type(zp) != t {
                return invalid("the zero point's type differs from the input's");
            }
            let zf = self.as_float(n, zp)?;
            y = self.arith(n, OperationType::Sub, y, zf)?;
        }
        let scale = self.broadcast_param(n, 1, &dims, a, block)?;
        self.require_float(n, scale)?;
        let scale_f = self.as_float(n, scale)?;
        y = self.arith(n, OperationType::Mul, y, scale_f)?;
        // The output has the scale's type; float16 computes as float32, rounded to it.
        let out_type = if scale.dtype == DataType::F16 {
            let half = self.cast_op(n, y, OperandType::TensorFloat16)?;
            y = self.cast_op(n, half, OperandType::TensorFloat32)?;
            DataType::F16
        } else {
            DataType::F32
        };
        self.set_tensor(n, 0, y, out_type, x.scalar);
        Ok(())
    }

    /// DequantizeLinear of constant weights (what weight-only quantized exports write,
    /// int4 blocks included), evaluated now: the product that reads them then sees
    /// constant float weights and lowers as FULLY_CONNECTED. `None` when any input is
    /// computed at run time.
    fn dequantize_constant(&mut self, n: &Node) -> NResult<Option<ConstTensor>> {
        let mut inputs = Vec::with_capacity(3);
        for i in 0..3 {
            match self.input(n, i)? {
                Some(Value::Const(c)) => inputs.push(Some(c)),
                None if i == 2 => inputs.push(None),
                _ => return Ok(None),
            }
        }
        let (Some(x), Some(scale)) = (inputs[0].clone(), inputs[1].clone()) else {
            return Ok(None);
        };
        if x.dtype == DataType::I32
            || !(constant::is_integer(x.dtype) || constant::is_float(x.dtype))
        {
            return Ok(None);
        }
        let (a, block) = self.quant_axis(n, x.shape.len())?;
        // Each element's index into the parameters: 0 for per-tensor ones, its position
        // along `axis` (divided by the block) otherwise.
        let count = |t: &ConstTensor| t.element_count();
        let param_index = |p: &ConstTensor| -> NResult<Box<dyn Fn(usize) -> usize>> {
            if count(p) == 1 && block == 0 {
                return Ok(Box::new(|_| 0));
            }
            let Some(a) = a else {
                return invalid("axis is out of range for the input");
            };
            let inner: usize = x.shape[a + 1..].iter().product();
            let len = x.shape[a];
            if block == 0 {
                if p.shape != [len] {
                    return invalid(format!(
                        "a per-axis parameter of shape {:?} for axis {a} of {:?}",
                        p.shape, x.shape
                    ));
                }
                return Ok(Box::new(move |i| (i / inner) % len));
            }
            let blocks = len.div_ceil(block);
            let mut expected = x.shape.clone();
            expected[a] = blocks;
            if p.shape != expected {
                return invalid(format!(
                    "a blocked parameter of shape {:?} for {:?} (axis {a}, block {block})",
                    p.shape, x.shape
                ));
            }
            // Row-major position with the axis coordinate divided by the block.
            let outer_stride = len * inner;
            let p_outer_stride = blocks * inner;
            Ok(Box::new(move |i| {
                let (outer, rest) = (i / outer_stride, i % outer_stride);
                let (along, within) = (rest / inner, rest % inner);
                outer * p_outer_stride + (along / block) * inner + within
            }))
        };
        let xs = constant::to_f64s(&x);
        let ss = constant::to_f32s(&scale);
        let scale_at = param_index(&scale)?;
        let zps = match &inputs[2] {
            Some(z) => Some((constant::to_f64s(z), param_index(z)?)),
            None => None,
        };
        let values: Vec<f32> = xs
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let zp = zps.as_ref().map_or(0.0, |(z, at)| z[at(i)]);
                // As the run-time lowering computes it: the difference in float32
                // (exact for these integers and float8 values), times the scale.
                (v as f32 - zp as f32) * ss[scale_at(i)]
            })
            .collect();
        let y = constant::f32_tensor(x.shape.clone(), &values);
        // The output has the scale's type (float16 rounds).
        Ok(Some(if scale.dtype == DataType::F16 {
            constant::cast(&y, DataType::F16)
        } else {
            y
        }))
    }

    pub(super) fn quantize_linear(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let dims = self.known_dims(x)?;
        let (a, block) = self.quant_axis(n, dims.len())?;
        let zp_dtype = match self.input(n, 2)? {
            Some(Value::Const(c)) => Some(c.dtype),
            Some(Value::Tensor(t)) => Some(t.dtype),
            None => None,
        };
        let dtype = match (zp_dtype, n.attrs.int("output_dtype")?) {
            (Some(d), _) => d,
            (None, Some(code)) => {
                super::super::tensor::host_data_type(code as i32).unwrap_or(DataType::F64)
            }
            (None, None) => DataType::U8,
        };
        let narrow = dtype.narrow_int();
        let t = match (quant8_type(dtype), narrow) {
            (Some(t), _) => t,
            (None, Some(_)) => super::super::nn_type_for(dtype),
            (None, None) if dtype.float_format().is_some() => {
                return self.quantize_to_float(n, x, dtype, &dims);
            }
            (None, None) => {
                return unsupported(format!("QuantizeLinear to {dtype} is not supported"));
            }
        };
        let scale = self.broadcast_param(n, 1, &dims, a, block)?;
        self.require_float(n, scale)?;
        let v = self.arith(n, OperationType::Div, x.operand, scale.operand)?;
        let f = |operand| TensorValue {
            operand,
            dtype: DataType::F32,
            scalar: false,
        };
        let up = self.with_scalar(n, OperationType::Add, f(v), ROUND_HALF_EVEN)?;
        let mut r = self
            .with_scalar(n, OperationType::Sub, up, ROUND_HALF_EVEN)?
            .operand;
        if self.input(n, 2)?.is_some() {
            let zp = self.broadcast_param(n, 2, &dims, a, block)?;
            let zf = self.as_float(n, zp)?;
            r = self.arith(n, OperationType::Add, r, zf)?;
        }
        if let Some(int) = narrow {
            // QUANTIZE saturates to 8 bits; 4- and 2-bit targets saturate first.
            let low = self.with_scalar(n, OperationType::Maximum, f(r), f64::from(int.min()))?;
            r = self
                .with_scalar(n, OperationType::Minimum, low, f64::from(int.max()))?
                .operand;
        }
        let y = self.emit_raw(
            OperationType::Quantize,
            vec![r],
            vec![Some(Operand::new(t, vec![]).with_quant(1.0, 0))],
            &n.label,
        )?[0];
        self.set_tensor(n, 0, y, dtype, x.scalar);
        Ok(())
    }

    /// QuantizeLinear to a float8 type: `x / scale + zero_point` rounded to the format
    /// (saturating unless `saturate = 0`), computed in float32 like every float8 value.
    fn quantize_to_float(
        &mut self,
        n: &Node,
        x: TensorValue,
        dtype: DataType,
        dims: &[u32],
    ) -> NResult<()> {
        let Some(format) = dtype.float_format() else {
            return unsupported(format!("QuantizeLinear to {dtype} is not supported"));
        };
        let (a, block) = self.quant_axis(n, dims.len())?;
        let scale = self.broadcast_param(n, 1, dims, a, block)?;
        self.require_float(n, scale)?;
        let mut v = self.arith(n, OperationType::Div, x.operand, scale.operand)?;
        if self.input(n, 2)?.is_some() {
            let zp = self.broadcast_param(n, 2, dims, a, block)?;
            let zf = self.as_float(n, zp)?;
            v = self.arith(n, OperationType::Add, v, zf)?;
        }
        let saturate = n.attrs.int("saturate")?.unwrap_or(1) != 0;
        let function = MathFunction::rounding(format, saturate);
        let code = self.i32_const(function as i32);
        let y = self.emit(n, OperationType::MathUnary, vec![v, code])?;
        self.set_tensor(n, 0, y, dtype, x.scalar);
        Ok(())
    }

    /// Fails, naming them all, when any of the scale and zero point inputs `indices` is
    /// computed at run time.
    fn quantization_known(&self, n: &Node, indices: &[usize]) -> NResult<()> {
        let run_time: Vec<usize> = indices
            .iter()
            .copied()
            .filter(|&i| matches!(self.input(n, i), Ok(Some(Value::Tensor(_)))))
            .collect();
        if run_time.is_empty() {
            return Ok(());
        }
        Err(self.needs_constant(
            n,
            &run_time,
            format!(
                "{} with run-time scales or zero points: the NN set fixes an operand's \
                 quantization at compile time",
                n.op()
            ),
        ))
    }

    /// A per-tensor scale (input `s`) and zero point (input `z`, default 0) known at
    /// compile time, the zero point of the 8-bit type `t`.
    fn tensor_quantization(
        &self,
        n: &Node,
        s: usize,
        z: usize,
        t: OperandType,
    ) -> NResult<(f32, i32)> {
        self.quantization_known(n, &[s, z])?;
        let scale = self.required_const(n, s)?;
        let scale_values = constant::to_f64s(&scale);
        let [scale] = scale_values.as_slice() else {
            return unsupported(format!(
                "{} with per-axis scales is not supported (the NN set's per-channel \
                 quantization is for symmetric int8 filters only)",
                n.op()
            ));
        };
        let scale = *scale as f32;
        if !(scale.is_finite() && scale > 0.0) {
            return invalid(format!("scale {scale} is not positive"));
        }
        let zp = match self.const_input(n, z)? {
            None => 0,
            Some(c) => {
                if quant8_type(c.dtype) != Some(t) {
                    return invalid(format!("a {} zero point for a {t} tensor", c.dtype));
                }
                match constant::to_i64s(&c).as_slice() {
                    [v] => *v as i32,
                    _ => {
                        return unsupported(format!(
                            "{} with per-axis zero points is not supported",
                            n.op()
                        ));
                    }
                }
            }
        };
        Ok((scale, zp))
    }

    /// Input `i` (an 8-bit tensor) as an operand with quantization `(scale, zp)`: the
    /// same stored integers.
    fn requantized_view(
        &mut self,
        n: &Node,
        i: usize,
        scale: f32,
        zp: i32,
    ) -> NResult<(u32, OperandType)> {
        let v = self.tensor(n, i)?;
        let t = self.operand_type(v);
        if !is_quant8(t) {
            return unsupported(format!("{} of {} tensors", n.op(), v.dtype));
        }
        let out = self.emit_raw(
            OperationType::Cast,
            vec![v.operand],
            vec![Some(Operand::new(t, vec![]).with_quant(scale, zp))],
            &n.label,
        )?[0];
        Ok((out, t))
    }

    pub(super) fn qlinear_matmul(&mut self, n: &Node) -> NResult<()> {
        let a_type = match self.required(n, 0)? {
            Value::Const(c) => quant8_type(c.dtype),
            Value::Tensor(t) => quant8_type(t.dtype),
        }
        .ok_or_else(|| {
            super::NodeError::Unsupported("QLinearMatMul of non-8-bit tensors".into())
        })?;
        self.quantization_known(n, &[1, 2, 4, 5, 6, 7])?;
        let (sa, za) = self.tensor_quantization(n, 1, 2, a_type)?;
        let (sb, zb) = self.tensor_quantization(n, 4, 5, a_type)?;
        let (sy, zy) = self.tensor_quantization(n, 6, 7, a_type)?;
        let (qa, ta) = self.requantized_view(n, 0, sa, za)?;
        let (qb, tb) = self.requantized_view(n, 3, sb, zb)?;
        if ta != tb {
            return unsupported("QLinearMatMul of uint8 by int8 is not supported");
        }
        let da = self.model.main.operands[qa as usize].dimensions.clone();
        let db = self.model.main.operands[qb as usize].dimensions.clone();
        if da.contains(&0) || db.contains(&0) {
            return needs_input_shape(
                "QLinearMatMul needs its shapes at compile time; fix them with --input-shape",
            );
        }
        let (ra, rb) = (da.len(), db.len());
        if !(2..=4).contains(&ra) || !(2..=4).contains(&rb) {
            return unsupported("QLinearMatMul of tensors of rank below 2 or above 4");
        }
        // An lhs of higher rank against a matrix: one matrix product of the flattened rows.
        let (lhs, out_dims) = if ra > rb && rb == 2 {
            let rows: u32 = da[..ra - 1].iter().product();
            let flat = self.reshape_to(n, qa, &[rows, da[ra - 1]])?;
            let mut out = da[..ra - 1].to_vec();
            out.push(db[1]);
            (flat, Some(out))
        } else if ra == rb && da[..ra - 2] == db[..rb - 2] {
            (qa, None)
        } else {
            return unsupported(format!(
                "QLinearMatMul broadcasting {da:?} by {db:?} is not supported"
            ));
        };
        let f = self.bool_const(false);
        let g = self.bool_const(false);
        let mut y = self.emit_raw(
            OperationType::BatchMatmul,
            vec![lhs, qb, f, g],
            vec![Some(Operand::new(ta, vec![]).with_quant(sy, zy))],
            &n.label,
        )?[0];
        if let Some(dims) = out_dims {
            y = self.reshape_to(n, y, &dims)?;
        }
        let plain = self.cast_op(n, y, ta)?;
        let dtype = if ta == OperandType::TensorQuant8Asymm {
            DataType::U8
        } else {
            DataType::I8
        };
        self.set_tensor(n, 0, plain, dtype, false);
        Ok(())
    }

    pub(super) fn qlinear_conv(&mut self, n: &Node) -> NResult<()> {
        let x_type = match self.required(n, 0)? {
            Value::Const(c) => quant8_type(c.dtype),
            Value::Tensor(t) => quant8_type(t.dtype),
        }
        .ok_or_else(|| super::NodeError::Unsupported("QLinearConv of non-8-bit tensors".into()))?;
        if n.attrs.int_or("group", 1)? != 1 {
            return unsupported("grouped QLinearConv is not supported");
        }
        self.quantization_known(n, &[1, 2, 4, 5, 6, 7])?;
        let (sx, zx) = self.tensor_quantization(n, 1, 2, x_type)?;
        let (sw, zw) = self.tensor_quantization(n, 4, 5, x_type)?;
        let (sy, zy) = self.tensor_quantization(n, 6, 7, x_type)?;
        let (qx, tx) = self.requantized_view(n, 0, sx, zx)?;
        let w_shape: Vec<usize> = match self.required(n, 3)? {
            Value::Const(c) => c.shape.clone(),
            Value::Tensor(t) => self.known_dims(t)?.iter().map(|&d| d as usize).collect(),
        };
        let x = TensorValue {
            operand: qx,
            dtype: DataType::U8,
            scalar: false,
        };
        let rank = self.rank(x);
        if w_shape.len() != rank || !(3..=4).contains(&rank) {
            return unsupported("only 1-D and 2-D QLinearConv is supported");
        }
        let in_dims = self.known_dims(x)?;
        let m = w_shape[0];
        if in_dims[1] as usize != w_shape[1] {
            return invalid(format!(
                "input has {} channels, the weights expect {}",
                in_dims[1], w_shape[1]
            ));
        }
        let kernel: Vec<i64> = w_shape[2..].iter().map(|&d| d as i64).collect();
        let sp = super::conv::read_spatial(n, &kernel, &in_dims[2..], true)?;
        let shape4: Vec<u32> = vec![m as u32, w_shape[1] as u32, sp.kernel[0], sp.kernel[1]];
        // Weights: [M, C, kH, kW] -> OHWI, with their quantization.
        let (qw, tw) = self.requantized_view(n, 3, sw, zw)?;
        if tw != tx {
            return unsupported("QLinearConv of uint8 by int8 is not supported");
        }
        let w4 = self.reshape_to(n, qw, &shape4)?;
        let filter = self.transpose_op(n, w4, &[0, 2, 3, 1])?;
        // Bias: int32 in units of x_scale * w_scale, as both ONNX and the NN set define it.
        let bias_scale = sx * sw;
        let bias = match self.input(n, 8)? {
            None => self.model.add_constant(
                Operand::new(OperandType::TensorInt32, vec![m as u32]).with_quant(bias_scale, 0),
                &vec![0u8; 4 * m],
            ),
            Some(Value::Const(b)) if b.dtype == DataType::I32 && b.element_count() == m => {
                self.model.add_constant(
                    Operand::new(OperandType::TensorInt32, vec![m as u32])
                        .with_quant(bias_scale, 0),
                    &b.data,
                )
            }
            Some(_) => {
                return Err(self.needs_constant(
                    n,
                    &[8],
                    "QLinearConv needs its bias as an int32 constant of one value per output \
                     channel",
                ));
            }
        };
        let (x4, _) = self.as_4d(n, x)?;
        let xh = self.to_nhwc(n, x4)?;
        let conv = Conv2d {
            kind: ConvKind::Plain,
            padding: sp.padding(),
            stride: sp.stride(),
            dilation: sp.dilation(),
            activation: FusedActivation::None,
            nchw: false,
        };
        let mut inputs = vec![xh, filter, bias];
        inputs.extend(conv.encode(&mut self.model));
        let yh = self.emit_raw(
            OperationType::Conv2d,
            inputs,
            vec![Some(Operand::new(tx, vec![]).with_quant(sy, zy))],
            &n.label,
        )?[0];
        let y4 = self.to_nchw(n, yh)?;
        let y = self.back_from_4d(n, y4, rank)?;
        let plain = self.cast_op(n, y, tx)?;
        let dtype = if tx == OperandType::TensorQuant8Asymm {
            DataType::U8
        } else {
            DataType::I8
        };
        self.set_tensor(n, 0, plain, dtype, false);
        Ok(())
    }
}
