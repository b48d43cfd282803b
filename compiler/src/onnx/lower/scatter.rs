//! Indexed writes and their one-hot relatives: ScatterElements (and the deprecated
//! Scatter) and ScatterND lower to nnc's extension operations SCATTER_ELEMENTS and
//! SCATTER_ND; OneHot and Hardmax are exact in NN set operations: an EQUAL of the
//! (expanded) indices against a constant `0..n` vector, then a SELECT between the values
//! (OneHot) or a CAST to float (Hardmax, whose indices are the ARGMAX along the axis).

use nnc_formats::nn::{Operand, OperandType, OperationType, ScatterReduction};
use nnc_formats::tensor::DataType;

use super::super::constant::{self, ConstTensor};
use super::{Lowerer, NResult, Node, NodeError, TensorValue, Value, axis, invalid, unsupported};

impl Lowerer<'_> {
    /// The `reduction` attribute (ScatterElements and ScatterND 16+): reductions other
    /// than none need float or integer data.
    fn scatter_reduction(&self, n: &Node, data: TensorValue) -> NResult<ScatterReduction> {
        let name = n.attrs.string_or("reduction", "none")?;
        let reduction = ScatterReduction::from_onnx_name(&name)
            .ok_or_else(|| NodeError::Invalid(format!("unknown reduction '{name}'")))?;
        if reduction != ScatterReduction::None
            && !matches!(
                self.operand_type(data),
                OperandType::TensorFloat32 | OperandType::TensorInt32
            )
        {
            return unsupported(format!(
                "{} with reduction '{name}' on {} tensors is not supported",
                n.op(),
                data.dtype
            ));
        }
        Ok(reduction)
    }

    /// Data and updates of one element type.
    fn scatter_data(&mut self, n: &Node) -> NResult<(TensorValue, TensorValue)> {
        let data = self.tensor(n, 0)?;
        let updates = self.tensor(n, 2)?;
        if self.operand_type(data) != self.operand_type(updates) {
            return invalid(format!(
                "{}'s updates ({}) must have the data's type ({})",
                n.op(),
                updates.dtype,
                data.dtype
            ));
        }
        if data.scalar || self.rank(data) == 0 {
            return invalid(format!("{} needs data of rank 1 or more", n.op()));
        }
        Ok((data, updates))
    }

    /// ScatterElements, and Scatter (its deprecated name, without reductions).
    pub(super) fn scatter_elements(&mut self, n: &Node) -> NResult<()> {
        let (data, updates) = self.scatter_data(n)?;
        let idx = self.index_operand(n, 1)?;
        let a = axis(n.attrs.int_or("axis", 0)?, self.rank(data))?;
        let reduction = self.scatter_reduction(n, data)?;
        let ax = self.i32_const(a as i32);
        let red = self.i32_const(reduction as i32);
        let y = self.emit(
            n,
            OperationType::ScatterElements,
            vec![data.operand, idx.operand, updates.operand, ax, red],
        )?;
        self.set_tensor(n, 0, y, data.dtype, false);
        Ok(())
    }

    pub(super) fn scatter_nd(&mut self, n: &Node) -> NResult<()> {
        let (data, updates) = self.scatter_data(n)?;
        let idx = self.index_operand(n, 1)?;
        if idx.scalar {
            return invalid("ScatterND needs indices of rank 1 or more");
        }
        let reduction = self.scatter_reduction(n, data)?;
        let red = self.i32_const(reduction as i32);
        let y = self.emit(
            n,
            OperationType::ScatterNd,
            vec![data.operand, idx.operand, updates.operand, red],
        )?;
        self.set_tensor(n, 0, y, data.dtype, false);
        Ok(())
    }

    /// A constant `0..len` along the first of `rank` dimensions (the others 1), so that
    /// it broadcasts along an axis that has `rank - 1` dimensions after it.
    fn iota_along(&mut self, len: u32, rank: usize) -> NResult<u32> {
        self.budget.generate(len as usize, DataType::I32)?;
        let mut dims = vec![1u32; rank];
        dims[0] = len;
        let bytes: Vec<u8> = (0..len as i32).flat_map(i32::to_le_bytes).collect();
        Ok(self
            .model
            .add_constant(Operand::new(OperandType::TensorInt32, dims), &bytes))
    }

    /// OneHot: `EQUAL(EXPAND_DIMS(indices, axis), 0..depth)` selects between the on and
    /// off values. Negative indices count from the end (depth is added where an index is
    /// negative), and indices outside `-depth..depth` match nothing. OneHot-28 differs
    /// from OneHot-11 only in allowing bfloat16 values, which nnc refuses at the model
    /// boundary, so definitions 9 to 28 lower alike.
    pub(super) fn one_hot(&mut self, n: &Node) -> NResult<()> {
        let depth_c = self.required_const(n, 1)?;
        let depth = match constant::to_i64s(&depth_c).as_slice() {
            [d] => *d,
            _ => return invalid("OneHot's depth must hold one value"),
        };
        let depth = u32::try_from(depth)
            .ok()
            .filter(|&d| d >= 1 && d <= i32::MAX as u32)
            .ok_or_else(|| NodeError::Invalid(format!("OneHot's depth {depth} is not valid")))?;
        let indices = self.tensor(n, 0)?;
        let idx = match self.operand_type(indices) {
            OperandType::TensorInt32 => indices.operand,
            // Float indices truncate toward zero (ONNX casts them to int64); 8-bit ones
            // are their stored integers.
            OperandType::TensorFloat32
            | OperandType::TensorQuant8Asymm
            | OperandType::TensorQuant8AsymmSigned => {
                self.cast_op(n, indices.operand, OperandType::TensorInt32)?
            }
            _ => {
                return invalid(format!(
                    "OneHot's indices must be numbers, got {}",
                    indices.dtype
                ));
            }
        };
        let r = self.rank(indices);
        let a = axis(n.attrs.int_or("axis", -1)?, r + 1)?;
        // Values: [off, on].
        let (off, on, dtype) = match self.required(n, 2)? {
            Value::Const(c) => {
                let size = c.dtype.size();
                if c.data.len() != 2 * size {
                    return invalid("OneHot's values must hold two elements [off, on]");
                }
                let element = |k: usize| ConstTensor {
                    dtype: c.dtype,
                    shape: vec![],
                    data: c.data[k * size..(k + 1) * size].to_vec(),
                };
                let off = self.const_operand(&element(0))?;
                let on = self.const_operand(&element(1))?;
                (off.operand, on.operand, on.dtype)
            }
            Value::Tensor(tv) => {
                if self.dims(tv) != [2] {
                    return invalid("OneHot's values must be a vector of two elements [off, on]");
                }
                let slice = |this: &mut Self, k: i32| -> NResult<u32> {
                    let begin = this.i32_vector(&[k]);
                    let size = this.i32_vector(&[1]);
                    this.emit(n, OperationType::Slice, vec![tv.operand, begin, size])
                };
                (slice(self, 0)?, slice(self, 1)?, tv.dtype)
            }
        };
        // Negative indices count from the end.
        let zero = self.scalar_tensor(OperandType::TensorInt32, 0.0);
        let negative = self.emit(n, OperationType::Less, vec![idx, zero])?;
        let d = self.scalar_tensor(OperandType::TensorInt32, f64::from(depth));
        let shifted = self.arith(n, OperationType::Add, idx, d)?;
        let idx = self.emit(n, OperationType::Select, vec![negative, shifted, idx])?;
        let expanded = if r == 0 {
            idx
        } else {
            let ax = self.i32_const(a as i32);
            self.emit(n, OperationType::ExpandDims, vec![idx, ax])?
        };
        let iota = self.iota_along(depth, r + 1 - a)?;
        let hit = self.emit(n, OperationType::Equal, vec![expanded, iota])?;
        let y = self.emit(n, OperationType::Select, vec![hit, on, off])?;
        self.set_tensor(n, 0, y, dtype, false);
        Ok(())
    }

    /// Hardmax: 1 where the first maximum along the axis is, 0 elsewhere. Before opset
    /// 13 the input is coerced to 2-D at `axis` (as Softmax-1/11 do) and the maximum is
    /// taken over everything from `axis` on.
    pub(super) fn hardmax(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        if x.scalar || self.rank(x) == 0 {
            return invalid("Hardmax needs an input of rank 1 or more");
        }
        let rank = self.rank(x);
        let default_axis = if n.version >= 13 { -1 } else { 1 };
        let a = axis(n.attrs.int_or("axis", default_axis)?, rank)?;
        let y = if n.version >= 13 || a == rank - 1 {
            let dims = self.dims(x);
            self.hard_along(n, x.operand, &dims, a)?
        } else {
            let dims = self.known_dims(x)?;
            let outer: u32 = dims[..a].iter().product();
            let inner: u32 = dims[a..].iter().product();
            let flat = self.reshape_to(n, x.operand, &[outer, inner])?;
            let h = self.hard_along(n, flat, &[outer, inner], 1)?;
            self.reshape_to(n, h, &dims)?
        };
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
    }

    /// `CAST(EQUAL(EXPAND_DIMS(ARGMAX(x, a), a), 0..dims[a]))`: the one-hot of the first
    /// maximum along axis `a`, as float.
    fn hard_along(&mut self, n: &Node, x: u32, dims: &[u32], a: usize) -> NResult<u32> {
        let len = dims[a];
        if len == 0 {
            return unsupported("Hardmax along a dimension unknown at compile time");
        }
        let ax = self.i32_const(a as i32);
        let mut index = self.emit(n, OperationType::Argmax, vec![x, ax])?;
        if dims.len() > 1 {
            let ax = self.i32_const(a as i32);
            index = self.emit(n, OperationType::ExpandDims, vec![index, ax])?;
        }
        let iota = self.iota_along(len, dims.len() - a)?;
        let hit = self.emit(n, OperationType::Equal, vec![index, iota])?;
        self.cast_op(n, hit, OperandType::TensorFloat32)
    }
}
