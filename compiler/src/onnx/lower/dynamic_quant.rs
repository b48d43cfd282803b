//! `com.microsoft.DynamicQuantizeMatMul`: ONNX Runtime's MatMul of float data and
//! constant 8-bit weights, the data quantized to uint8 per tensor when it runs. It is
//! what ONNX Runtime's optimizer makes of `quantize_dynamic`'s DynamicQuantizeLinear ->
//! MatMulInteger -> Cast -> Mul chains, and what nnc's importer fuses them into
//! (`onnx/fuse.rs`) before lowering.
//!
//! It lowers to DYNAMIC_FULLY_CONNECTED (docs/EXTENSIONS.md), the operation `nnc compile
//! --quantize dynamic` writes: the weights are the model's own integers, transposed to
//! `[units, depth]`, with the model's scales; the data is quantized per row instead of
//! per tensor (each row gets at least the resolution the tensor's range would give it,
//! so results are closer to the float model, not bit-identical to ONNX Runtime's).
//! The weights must be exactly symmetric int8 after their zero point is taken off:
//! `W - W_zp` within [-127, 127] for every element (int8 weights with zero point 0, as
//! `quantize_dynamic` writes by default, always are; uint8 weights are when their zero
//! point centres them). Anything else is refused naming the weights and their range,
//! never approximated.

use nnc_formats::nn::ops::DYNAMIC_FULLY_CONNECTED_MAX_DEPTH;
use nnc_formats::nn::{Operand, OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::super::constant;
use super::{Lowerer, NResult, Node, TensorValue, Value, invalid, unsupported};
use crate::quantize::dynamic::weights_operand;

/// 1.5 * 2^23: adding and subtracting it rounds an f32 of magnitude below 2^22 to an
/// integer, ties to even (as QuantizeLinear's lowering does).
const ROUND_HALF_EVEN: f64 = 12_582_912.0;

/// The weights DYNAMIC_FULLY_CONNECTED holds: symmetric int8 without -128 (its depth
/// bound assumes |w| <= 127).
const WEIGHT_RANGE: std::ops::RangeInclusive<i32> = -127..=127;

impl Lowerer<'_> {
    /// DynamicQuantizeMatMul(A, B, b_scale, b_zero_point?, bias?) -> Y = A x B (+ bias).
    pub(super) fn dynamic_quantize_matmul(&mut self, n: &Node) -> NResult<()> {
        let a = self.tensor(n, 0)?;
        self.require_float(n, a)?;
        let b = self.required_const(n, 1)?;
        let b_name = self.input_name(n, 1).unwrap_or("").to_string();
        if !matches!(b.dtype, DataType::I8 | DataType::U8) {
            return invalid(format!(
                "weights '{b_name}' are {}, not int8 or uint8",
                b.dtype
            ));
        }
        let [depth, units] = match b.shape.as_slice() {
            &[k, u] => [k, u],
            &[_] => {
                return unsupported(format!(
                    "weights '{b_name}' are a vector; nnc reads dynamically quantized weights \
                     of rank 2"
                ));
            }
            other => {
                return unsupported(format!(
                    "weights '{b_name}' have rank {} (batched weights are not supported)",
                    other.len()
                ));
            }
        };
        if b.data.len() != depth * units {
            return invalid(format!("weights '{b_name}' hold the wrong number of bytes"));
        }
        let a_last = self.dims(a).last().copied().unwrap_or(0);
        if a_last != 0 && a_last as usize != depth {
            return invalid(format!(
                "inner dimensions differ: {a_last} vs {depth} (weights '{b_name}')"
            ));
        }
        if depth > DYNAMIC_FULLY_CONNECTED_MAX_DEPTH as usize {
            return unsupported(format!(
                "weights '{b_name}' have depth {depth}, above \
                 {DYNAMIC_FULLY_CONNECTED_MAX_DEPTH}, where DYNAMIC_FULLY_CONNECTED's int32 \
                 sums could overflow"
            ));
        }
        let scales = self.per_column(n, 2, "scale", units)?;
        let scale_values = constant::to_f32s(&scales);
        if let Some(s) = scale_values.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return unsupported(format!(
                "weights '{b_name}' have scale {s}; DYNAMIC_FULLY_CONNECTED needs positive \
                 finite scales"
            ));
        }
        let zero_points = match self.const_input(n, 3)? {
            None => vec![0i64],
            Some(zp) => {
                if zp.dtype != b.dtype {
                    return invalid(format!(
                        "the weights' zero point is {}, the weights {}",
                        zp.dtype, b.dtype
                    ));
                }
                constant::to_i64s(&*self.per_column(n, 3, "zero point", units)?)
            }
        };
        let bytes = symmetric_transposed(&b, &zero_points, depth, units)
            .map_err(|why| super::NodeError::Unsupported(format!("weights '{b_name}' {why}")))?;
        let bias = match self.const_input(n, 4)? {
            None => None,
            Some(c) if c.element_count() == units && c.shape.len() <= 1 => Some(c),
            Some(c) => {
                return invalid(format!(
                    "bias of shape {:?} for {units} output columns",
                    c.shape
                ));
            }
        };
        let per_channel = scale_values.len() > 1;
        let weights = weights_operand(vec![units as u32, depth as u32], scale_values, per_channel)
            .with_name(b_name);
        let w = self.model.add_constant_owned(weights, bytes);
        let bias: Vec<f32> = bias.map_or_else(|| vec![0.0; units], |c| constant::to_f32s(&c));
        let (y, scalar) = self.rows_product(n, a, units, false, |this, rows| {
            let b = this.model.add_f32_tensor(vec![units as u32], &bias);
            let act = this.i32_const(0);
            this.emit(
                n,
                OperationType::DynamicFullyConnected,
                vec![rows, w, b, act],
            )
        })?;
        self.set_tensor(n, 0, y, DataType::F32, scalar);
        Ok(())
    }

    /// DynamicQuantizeLinear(x) -> (y uint8, y_scale, y_zero_point), ONNX's formulas in
    /// float32: `lo = min(0, min x)`, `hi = max(0, max x)`, `scale = (hi - lo) / 255`
    /// (1 where `hi == lo`, as ONNX Runtime, whose quantizer writes these nodes; ONNX
    /// leaves an all-zero input open), `zp = rint(clamp(0 - lo / scale, 0, 255))`, `y =
    /// saturate(rint(x / scale) + zp)`, rounding half to even as QuantizeLinear does.
    pub(super) fn dynamic_quantize_linear(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        if x.dtype != DataType::F32 {
            return unsupported(format!("DynamicQuantizeLinear of {} tensors", x.dtype));
        }
        let rank = self.model.main.operands[x.operand as usize]
            .dimensions
            .len();
        let all: Vec<i32> = (0..rank as i32).collect();
        let f = |operand| TensorValue {
            operand,
            dtype: DataType::F32,
            scalar: true,
        };
        let mut extremes = Vec::new();
        for op in [OperationType::ReduceMin, OperationType::ReduceMax] {
            let axes = self.i32_vector(&all);
            let r = self.reduce_op(n, op, x.operand, axes, true)?;
            extremes.push(f(self.reshape_to(n, r, &[1])?));
        }
        let lo = self.with_scalar(n, OperationType::Minimum, extremes[0], 0.0)?;
        let hi = self.with_scalar(n, OperationType::Maximum, extremes[1], 0.0)?;
        let range = f(self.arith(n, OperationType::Sub, hi.operand, lo.operand)?);
        let divided = self.with_scalar(n, OperationType::Div, range, 255.0)?;
        let empty = self.with_scalar(n, OperationType::Equal, range, 0.0)?;
        let one = self.scalar_tensor(OperandType::TensorFloat32, 1.0);
        let scale = self.emit(
            n,
            OperationType::Select,
            vec![empty.operand, one, divided.operand],
        )?;
        let zero = self.scalar_tensor(OperandType::TensorFloat32, 0.0);
        let shift = self.arith(n, OperationType::Div, lo.operand, scale)?;
        let zp = f(self.arith(n, OperationType::Sub, zero, shift)?);
        let zp = self.with_scalar(n, OperationType::Maximum, zp, 0.0)?;
        let zp = self.with_scalar(n, OperationType::Minimum, zp, 255.0)?;
        let zp = self.round_half_even(n, zp)?;
        let v = self.arith(n, OperationType::Div, x.operand, scale)?;
        let v = self.round_half_even(n, f(v))?;
        let v = self.arith(n, OperationType::Add, v, zp)?;
        let uint8 =
            || Some(Operand::new(OperandType::TensorQuant8Asymm, vec![]).with_quant(1.0, 0));
        let y = self.emit_raw(OperationType::Quantize, vec![v], vec![uint8()], &n.label)?[0];
        let zp = self.emit_raw(OperationType::Quantize, vec![zp], vec![uint8()], &n.label)?[0];
        self.set_tensor(n, 0, y, DataType::U8, x.scalar);
        self.set_tensor(n, 1, scale, DataType::F32, true);
        self.set_tensor(n, 2, zp, DataType::U8, true);
        Ok(())
    }

    /// `rint(x)`, ties to even, for |x| below 2^22 (see [`ROUND_HALF_EVEN`]).
    fn round_half_even(&mut self, n: &Node, x: TensorValue) -> NResult<u32> {
        let up = self.with_scalar(n, OperationType::Add, x, ROUND_HALF_EVEN)?;
        Ok(self
            .with_scalar(n, OperationType::Sub, up, ROUND_HALF_EVEN)?
            .operand)
    }

    /// MatMulInteger(A, B, a_zero_point?, b_zero_point?) -> int32 `(A - a_zp) x (B -
    /// b_zp)`, computed as a float32 product of the differences: every term and every
    /// partial sum is an integer below 2^24 in magnitude, so each float addition is
    /// exact in any order, and the CAST to int32 gives ONNX's sums exactly. Where a sum
    /// could reach 2^24 (a depth above 258 for run-time weights; for constant weights,
    /// 255 times a column's sum of magnitudes) the node is refused.
    pub(super) fn matmul_integer(&mut self, n: &Node) -> NResult<()> {
        let a = self.tensor(n, 0)?;
        if !matches!(a.dtype, DataType::U8 | DataType::I8) {
            return invalid(format!("MatMulInteger of {} data", a.dtype));
        }
        let a_dims = self.known_dims(a)?;
        let depth = a_dims.last().copied().unwrap_or(1) as usize;
        let mut af = self.cast_op(n, a.operand, OperandType::TensorFloat32)?;
        if let Some(zp) = self.input(n, 2)? {
            let mut z = self.materialize(self.input_name(n, 2).unwrap_or(""), &zp)?;
            if z.dtype != a.dtype {
                return invalid("a_zero_point's type differs from A's");
            }
            // A per-row zero point of a matrix: one per row, [M] -> [M, 1].
            let zd = self.dims(z);
            if zd.len() == 1 && a_dims.len() >= 2 && zd[0] > 1 {
                let mut shape = vec![1u32; a_dims.len()];
                shape[a_dims.len() - 2] = zd[0];
                z.operand = self.reshape_to(n, z.operand, &shape)?;
            }
            let zf = self.cast_op(n, z.operand, OperandType::TensorFloat32)?;
            af = self.arith(n, OperationType::Sub, af, zf)?;
        }
        let af = TensorValue {
            operand: af,
            dtype: DataType::F32,
            scalar: a.scalar,
        };
        let (y, scalar) = match (self.required(n, 1)?, self.input(n, 3)?) {
            (Value::Const(b), None | Some(Value::Const(_))) if (1..=2).contains(&b.shape.len()) => {
                let zp = match self.const_input(n, 3)? {
                    Some(z) => constant::to_i64s(&z),
                    None => vec![0],
                };
                let (w, units) = integer_weights(&b, &zp, depth)?;
                self.rows_product(n, af, units, b.shape.len() == 1, |this, rows| {
                    this.fully_connected(n, rows, w, &vec![0.0; units])
                })?
            }
            _ => {
                if depth > EXACT_RUNTIME_DEPTH {
                    return unsupported(format!(
                        "MatMulInteger with run-time B of depth {depth}: above \
                         {EXACT_RUNTIME_DEPTH} its sums could exceed 2^24, beyond what nnc \
                         computes exactly"
                    ));
                }
                let b = self.tensor(n, 1)?;
                if !matches!(b.dtype, DataType::U8 | DataType::I8) {
                    return invalid(format!("MatMulInteger of {} weights", b.dtype));
                }
                let mut bf = self.cast_op(n, b.operand, OperandType::TensorFloat32)?;
                if self.input(n, 3)?.is_some() {
                    let z = self.tensor(n, 3)?;
                    if z.dtype != b.dtype {
                        return invalid("b_zero_point's type differs from B's");
                    }
                    let zf = self.cast_op(n, z.operand, OperandType::TensorFloat32)?;
                    bf = self.arith(n, OperationType::Sub, bf, zf)?;
                }
                let bf = TensorValue {
                    operand: bf,
                    dtype: DataType::F32,
                    scalar: b.scalar,
                };
                self.batch_matmul(n, af, bf)?
            }
        };
        let y = self.cast_op(n, y, OperandType::TensorInt32)?;
        self.set_tensor(n, 0, y, DataType::I32, scalar);
        Ok(())
    }

    /// Constant input `i` (the weights' scale or zero point): one value, or one per
    /// output column.
    fn per_column(
        &self,
        n: &Node,
        i: usize,
        what: &str,
        units: usize,
    ) -> NResult<std::rc::Rc<constant::ConstTensor>> {
        let c = self.required_const(n, i)?;
        let count = c.element_count();
        if count == 1 && c.shape.len() <= 1 || count == units && c.shape.len() == 1 {
            Ok(c)
        } else {
            invalid(format!(
                "the weights' {what} has shape {:?}: one value, or one per output column \
                 ({units})",
                c.shape
            ))
        }
    }
}

/// The deepest product of run-time 8-bit differences (each at most 255 in magnitude)
/// whose float32 sums stay exact: 258 * 255 * 255 < 2^24.
const EXACT_RUNTIME_DEPTH: usize = (1 << 24) / (255 * 255);

/// Sums of float32 integers stay exact below this magnitude.
pub(super) const EXACT_FLOAT_SUM: f64 = (1u64 << 24) as f64;

/// MatMulInteger's constant B (`[depth, units]`, or a `[depth]` vector) minus its zero
/// point (one value, or one per column), as FULLY_CONNECTED's float weights `[units,
/// depth]`, after checking that no sum with data differences of at most 255 can reach
/// 2^24.
fn integer_weights(
    b: &constant::ConstTensor,
    zero_points: &[i64],
    depth: usize,
) -> NResult<(constant::ConstTensor, usize)> {
    let (k, units) = match *b.shape.as_slice() {
        [k, u] => (k, u),
        [k] => (k, 1),
        _ => return invalid("MatMulInteger's B must have rank 1 or 2 here"),
    };
    if k != depth {
        return invalid(format!(
            "MatMulInteger inner dimensions differ: {depth} vs {k}"
        ));
    }
    if !matches!(b.dtype, DataType::U8 | DataType::I8) {
        return invalid(format!("MatMulInteger of {} weights", b.dtype));
    }
    if zero_points.len() != 1 && zero_points.len() != units {
        return invalid(format!(
            "b_zero_point has {} values for {units} columns",
            zero_points.len()
        ));
    }
    let values = constant::to_i64s(b);
    if values.len() != k * units {
        return invalid("MatMulInteger's B holds the wrong number of values");
    }
    let mut w = vec![0f32; k * units];
    let mut magnitude = vec![0f64; units];
    for kk in 0..k {
        for j in 0..units {
            let zp = zero_points[if zero_points.len() == 1 { 0 } else { j }];
            let v = values[kk * units + j] - zp;
            magnitude[j] += v.unsigned_abs() as f64;
            w[j * k + kk] = v as f32;
        }
    }
    if let Some(m) = magnitude.iter().find(|&&m| 255.0 * m >= EXACT_FLOAT_SUM) {
        return unsupported(format!(
            "MatMulInteger whose sums could reach {} (255 times a column's {m} of weight \
             magnitudes), beyond 2^24, where nnc's float32 sums would stop being exact",
            255.0 * m
        ));
    }
    let tensor = constant::ConstTensor {
        dtype: DataType::F32,
        shape: vec![units, k],
        data: bytemuck::cast_slice(&w).to_vec(),
    };
    Ok((tensor, units))
}

/// `B - zp` (B `[depth, units]` of int8 or uint8, `zp` one value or one per unit) as
/// int8 bytes `[units, depth]`, or why the values do not fit [-127, 127].
fn symmetric_transposed(
    b: &constant::ConstTensor,
    zero_points: &[i64],
    depth: usize,
    units: usize,
) -> Result<Vec<u8>, String> {
    let value = |k: usize| -> i32 {
        match b.dtype {
            DataType::I8 => i32::from(b.data[k] as i8),
            _ => i32::from(b.data[k]),
        }
    };
    let zp = |j: usize| -> i32 {
        let z = if zero_points.len() == 1 {
            zero_points[0]
        } else {
            zero_points[j]
        };
        i32::try_from(z).unwrap_or(i32::MAX)
    };
    let mut out = vec![0u8; depth * units];
    let (mut lo, mut hi) = (i32::MAX, i32::MIN);
    for k in 0..depth {
        for j in 0..units {
            let v = value(k * units + j) - zp(j);
            lo = lo.min(v);
            hi = hi.max(v);
            out[j * depth + k] = v.clamp(-128, 127) as i8 as u8;
        }
    }
    if lo < *WEIGHT_RANGE.start() || hi > *WEIGHT_RANGE.end() {
        let zps: Vec<i64> = zero_points.iter().take(4).copied().collect();
        let more = if zero_points.len() > 4 { ", ..." } else { "" };
        return Err(format!(
            "are {} with zero point{} {zps:?}{more}: their values minus the zero point span \
             {lo}..={hi}, beyond the symmetric int8 range -127..=127 DYNAMIC_FULLY_CONNECTED \
             holds exactly (quantize with weight_type=QInt8, the default, to get weights \
             nnc can run)",
            b.dtype,
            if zero_points.len() == 1 { "" } else { "s" },
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(dtype: DataType, shape: &[usize], data: &[u8]) -> constant::ConstTensor {
        constant::ConstTensor {
            dtype,
            shape: shape.to_vec(),
            data: data.to_vec(),
        }
    }

    #[test]
    fn weights_with_a_zero_point_convert_exactly_when_they_fit_int8() {
        // int8 [depth 2, units 2] with per-column zero points 5 and -3.
        let b = tensor(DataType::I8, &[2, 2], &[10u8, 0, (-100i8) as u8, 124]);
        let out = symmetric_transposed(&b, &[5, -3], 2, 2).unwrap();
        let values: Vec<i8> = out.iter().map(|&v| v as i8).collect();
        // [units, depth]: column 0 is (10, -100) - 5, column 1 (0, 124) + 3.
        assert_eq!(values, [5, -105, 3, 127]);
        // uint8 centred on 128.
        let b = tensor(DataType::U8, &[1, 2], &[1, 255]);
        let out = symmetric_transposed(&b, &[128], 1, 2).unwrap();
        assert_eq!(
            out.iter().map(|&v| v as i8).collect::<Vec<_>>(),
            [-127, 127]
        );
    }

    #[test]
    fn weights_beyond_symmetric_int8_are_refused_with_their_range() {
        let b = tensor(DataType::I8, &[1, 2], &[(-128i8) as u8, 3]);
        let why = symmetric_transposed(&b, &[0], 1, 2).unwrap_err();
        assert!(why.contains("-128..=3"), "{why}");
        let b = tensor(DataType::U8, &[1, 2], &[0, 200]);
        let why = symmetric_transposed(&b, &[40], 1, 2).unwrap_err();
        assert!(why.contains("-40..=160"), "{why}");
    }

    #[test]
    fn integer_weights_refuse_sums_float32_cannot_hold_exactly() {
        // 300 rows of 255 - 0: 255 * 300 * 255 > 2^24.
        let b = tensor(DataType::U8, &[300, 1], &[255; 300]);
        assert!(matches!(
            integer_weights(&b, &[0], 300),
            Err(super::super::NodeError::Unsupported(m)) if m.contains("2^24")
        ));
        let b = tensor(DataType::U8, &[3, 1], &[1, 2, 3]);
        let (w, units) = integer_weights(&b, &[2], 3).unwrap();
        assert_eq!(units, 1);
        assert_eq!(constant::to_f32s(&w), [-1.0, 0.0, 1.0]);
    }
}
