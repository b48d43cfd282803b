//! Shape and data-movement operators, constants, and shape arithmetic.

use std::rc::Rc;

use nnc_formats::nn::OperationType;
use nnc_formats::nn::ops::{Pad, PadFill, PadValue, StridedSlice};
use nnc_formats::tensor::DataType;

use super::super::constant::{self, ConstTensor};
use super::super::tensor::tensor_to_host;
use super::{
    Lowerer, NResult, Node, NodeError, TensorValue, Value, axis, ints_from_attr_or_input, invalid,
    needs_input_shape, unsupported,
};

fn to_usize_dims(dims: &[u32]) -> Vec<usize> {
    dims.iter().map(|&d| d as usize).collect()
}

impl Lowerer<'_> {
    /// Emits the pad `fill` decides (PAD, PAD_V2 or MIRROR_PAD) of `x` by the `[rank, 2]`
    /// paddings operand, its parameters written by [`Pad::encode`].
    pub(super) fn pad_op(
        &mut self,
        n: &Node,
        x: u32,
        paddings: u32,
        fill: PadFill,
    ) -> NResult<u32> {
        let mut inputs = vec![x];
        inputs.extend(Pad { paddings, fill }.encode(&mut self.model));
        self.emit(n, fill.op_type(), inputs)
    }

    /// Emits STRIDED_SLICE of `x`, its parameters written by [`StridedSlice::encode`].
    pub(super) fn strided_slice_op(
        &mut self,
        n: &Node,
        x: u32,
        slice: &StridedSlice<u32>,
    ) -> NResult<u32> {
        let mut inputs = vec![x];
        inputs.extend(slice.encode(&mut self.model));
        self.emit(n, OperationType::StridedSlice, inputs)
    }

    /// Binds output 0 to `value` through an explicit identity operation when the value is
    /// computed at run time (the identity-removal pass deletes it; keeping it until then
    /// keeps every source node visible in the lowered graph).
    pub(super) fn identity_value(&mut self, n: &Node, value: Value) -> NResult<()> {
        match value {
            Value::Const(_) => self.set_output(n, 0, value),
            Value::Tensor(tv) => {
                let dims = self.model.main.operands[tv.operand as usize]
                    .dimensions
                    .clone();
                if dims.iter().filter(|&&d| d == 0).count() > 1 {
                    // Not expressible as a RESHAPE: alias instead.
                    self.set_output(n, 0, Value::Tensor(tv));
                } else {
                    let out = self.reshape_to_forced(n, tv.operand, &dims)?;
                    self.set_output(n, 0, Value::Tensor(TensorValue { operand: out, ..tv }));
                }
            }
        }
        Ok(())
    }

    /// `RESHAPE(x, dims)` even when `x` already has those dimensions.
    fn reshape_to_forced(&mut self, n: &Node, x: u32, dims: &[u32]) -> NResult<u32> {
        let shape: Vec<i32> = dims
            .iter()
            .map(|&d| if d == 0 { -1 } else { d as i32 })
            .collect();
        let s = self.i32_vector(&shape);
        self.emit(n, OperationType::Reshape, vec![x, s])
    }

    pub(super) fn identity(&mut self, n: &Node) -> NResult<()> {
        if n.op() == "Dropout" {
            let training = match self.input(n, 2)? {
                None => false,
                Some(Value::Const(c)) => constant::to_i64s(&c).first().copied().unwrap_or(0) != 0,
                Some(Value::Tensor(_)) => {
                    return Err(self.needs_constant(
                        n,
                        &[2],
                        "Dropout with a run-time training_mode is not supported (training \
                         mode draws random masks, which nnc does not reproduce)",
                    ));
                }
            };
            if training {
                // With ratio 0 training mode drops nothing: the identity, deterministic.
                let ratio = if self.opset < 12 {
                    f64::from(n.attrs.float_or("ratio", 0.5)?)
                } else {
                    match self.input(n, 1)? {
                        None => 0.5,
                        Some(Value::Const(c)) => {
                            constant::to_f64s(&c).first().copied().unwrap_or(0.5)
                        }
                        Some(Value::Tensor(_)) => {
                            return Err(self.needs_constant(
                                n,
                                &[1],
                                "training-mode Dropout with a run-time ratio is not supported \
                                 (a ratio above 0 draws random masks, which nnc does not \
                                 reproduce)",
                            ));
                        }
                    }
                };
                if ratio != 0.0 {
                    return unsupported(
                        "training-mode Dropout is not supported (it draws random masks, which \
                         nnc does not reproduce)",
                    );
                }
            }
            if self.output_used(n, 1) {
                // Without dropping (inference, or ratio 0) the mask keeps every element.
                let v = self.required(n, 0)?;
                let shape = self.shape_of_value(&v);
                if shape.contains(&0) {
                    return unsupported("Dropout's mask of a tensor with dynamic dimensions");
                }
                let shape = to_usize_dims(&shape);
                let count: usize = shape.iter().product();
                let mask = ConstTensor {
                    dtype: DataType::Bool,
                    shape,
                    data: vec![1; count],
                };
                if let Some(name) = n.proto.output.get(1) {
                    self.values
                        .insert(name.clone(), Value::Const(Rc::new(mask)));
                }
            }
        }
        let v = self.required(n, 0)?;
        self.identity_value(n, v)
    }

    pub(super) fn constant_node(&mut self, n: &Node) -> NResult<()> {
        let value = if let Some(t) = n.attrs.tensor("value")? {
            tensor_to_host(t, &super::super::tensor::ExternalDataContext::none())
                .map_err(|e| NodeError::Invalid(e.to_string()))?
        } else if let Some(f) = n.attrs.float("value_float")? {
            constant::f32_tensor(vec![], &[f])
        } else if let Some(v) = n.attrs.floats("value_floats")? {
            constant::f32_tensor(vec![v.len()], &v)
        } else if let Some(i) = n.attrs.int("value_int")? {
            constant::i64_tensor(vec![], &[i])
        } else if let Some(v) = n.attrs.ints("value_ints")? {
            constant::i64_tensor(vec![v.len()], &v)
        } else if n.attrs.has("sparse_value")
            || n.attrs.has("value_string")
            || n.attrs.has("value_strings")
        {
            return unsupported("sparse and string constants are not supported");
        } else {
            return invalid("Constant has no value attribute");
        };
        self.set_const(n, 0, value)?;
        Ok(())
    }

    pub(super) fn shape_of(&mut self, n: &Node) -> NResult<()> {
        let v = self.required(n, 0)?;
        let dims = self.shape_of_value(&v);
        if dims.contains(&0) {
            return needs_input_shape(
                "Shape of a tensor with dynamic dimensions; fix them with --input-shape",
            );
        }
        let dims: Vec<i64> = dims.iter().map(|&d| i64::from(d)).collect();
        if n.op() == "Size" {
            self.set_const(n, 0, constant::i64_tensor(vec![], &[dims.iter().product()]))?;
            return Ok(());
        }
        let r = dims.len() as i64;
        let clamp = |v: i64| -> usize { (if v < 0 { v + r } else { v }).clamp(0, r) as usize };
        let start = clamp(n.attrs.int_or("start", 0)?);
        let end = clamp(n.attrs.int_or("end", r)?);
        let slice = if start < end {
            dims[start..end].to_vec()
        } else {
            Vec::new()
        };
        self.set_const(n, 0, constant::i64_tensor(vec![slice.len()], &slice))?;
        Ok(())
    }

    pub(super) fn constant_of_shape(&mut self, n: &Node) -> NResult<()> {
        let shape = self.required_const(n, 0)?;
        let dims: Vec<usize> = constant::to_i64s(&shape)
            .into_iter()
            .map(|d| {
                usize::try_from(d)
                    .map_err(|_| NodeError::Invalid(format!("negative dimension {d}")))
            })
            .collect::<NResult<_>>()?;
        let value = match n.attrs.tensor("value")? {
            Some(t) => tensor_to_host(t, &super::super::tensor::ExternalDataContext::none())
                .map_err(|e| NodeError::Invalid(e.to_string()))?,
            None => constant::f32_tensor(vec![1], &[0.0]),
        };
        self.set_const(n, 0, constant::fill(&value, dims, &self.budget)?)?;
        Ok(())
    }

    pub(super) fn range(&mut self, n: &Node) -> NResult<()> {
        let start = self.required_const(n, 0)?;
        let limit = self.required_const(n, 1)?;
        let delta = self.required_const(n, 2)?;
        let scalar = |t: &ConstTensor, what: &str| -> NResult<f64> {
            match constant::to_f64s(t).as_slice() {
                [v] => Ok(*v),
                other => invalid(format!(
                    "Range's {what} must be a scalar, it has {} elements",
                    other.len()
                )),
            }
        };
        let (s, l, d) = (
            scalar(&start, "start")?,
            scalar(&limit, "limit")?,
            scalar(&delta, "delta")?,
        );
        if d == 0.0 || !d.is_finite() || !s.is_finite() || !l.is_finite() {
            return invalid(format!(
                "Range needs finite start, limit and a non-zero delta (got {s}, {l}, {d})"
            ));
        }
        let count = ((l - s) / d).ceil().max(0.0);
        // Room for the f64 values and the result, before either is allocated.
        let len = if count >= 1e15 {
            usize::MAX
        } else {
            count as usize
        };
        self.budget
            .room(&[len], nnc_formats::tensor::DataType::F64)?;
        self.budget.room(&[len], start.dtype)?;
        let values: Vec<f64> = (0..len).map(|i| s + i as f64 * d).collect();
        self.set_const(
            n,
            0,
            constant::from_f64s(start.dtype, vec![values.len()], &values),
        )
    }

    /// Reshape to a shape computed at run time. ONNX's 0 ("copy the input dimension")
    /// is resolved with EQUAL/SELECT against the input's known dimensions; -1 is RESHAPE's
    /// own. A 0 with allowzero (an empty result) fails at run time.
    fn reshape_runtime(&mut self, n: &Node, shape: u32, k: usize) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        let allow_zero = n.attrs.int_or("allowzero", 0)? != 0;
        let mut target = shape;
        if !allow_zero {
            let in_dims = self.known_dims(x)?;
            let repl: Vec<i32> = (0..k)
                .map(|i| in_dims.get(i).map_or(0, |&d| d as i32))
                .collect();
            let repl = self.i32_vector(&repl);
            let zero = self.scalar_tensor(nnc_formats::nn::OperandType::TensorInt32, 0.0);
            let is_zero = self.emit(n, OperationType::Equal, vec![shape, zero])?;
            target = self.emit(n, OperationType::Select, vec![is_zero, repl, shape])?;
        }
        let out = self.emit_declared(
            n,
            OperationType::Reshape,
            vec![x.operand, target],
            vec![0; k],
        )?;
        self.set_tensor(n, 0, out, x.dtype, false);
        Ok(())
    }

    /// Squeeze with run-time axes: SQUEEZE takes them as a tensor (negative entries
    /// allowed); it rejects a non-unit dimension at run time, as ONNX does.
    fn squeeze_runtime(&mut self, n: &Node, axes: u32, k: usize) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        let r = self.rank(x);
        if k > r {
            return invalid(format!("{k} axes for a rank-{r} input"));
        }
        let dims = self.dims(x);
        // When exactly k dimensions are 1, any valid axes drop those.
        let units = dims.iter().filter(|&&d| d == 1).count();
        let declared: Vec<u32> = if units == k && !dims.contains(&0) {
            dims.iter().copied().filter(|&d| d != 1).collect()
        } else {
            vec![0; r - k]
        };
        let scalar = declared.is_empty();
        let declared = if scalar { vec![1] } else { declared };
        let out = self.emit_declared(n, OperationType::Squeeze, vec![x.operand, axes], declared)?;
        self.set_tensor(n, 0, out, x.dtype, scalar);
        Ok(())
    }

    /// Unsqueeze with run-time axes: the target shape is computed with NN operations and
    /// fed to RESHAPE. For output position j of R = rank + k: it is an inserted axis when
    /// some normalized axis equals j (then 1), else it takes input dimension
    /// j - #{axes < j}. Invalid axes (out of range, repeated) make that shape disagree with
    /// the element count, so RESHAPE fails at run time, except when every dimension is 1.
    fn unsqueeze_runtime(&mut self, n: &Node, axes: u32, k: usize) -> NResult<()> {
        use nnc_formats::nn::OperandType as T;
        let x = self.tensor(n, 0)?;
        let in_dims = self.known_dims(x)?;
        let r = in_dims.len();
        let big_r = r + k;
        let rr = big_r as i32;
        // a < 0 ? a + R : a
        let zero = self.scalar_tensor(T::TensorInt32, 0.0);
        let neg = self.emit(n, OperationType::Less, vec![axes, zero])?;
        let r_const = self.scalar_tensor(T::TensorInt32, f64::from(rr));
        let shifted = self.arith(n, OperationType::Add, axes, r_const)?;
        let norm = self.emit(n, OperationType::Select, vec![neg, shifted, axes])?;
        let col_shape = self.i32_vector(&[k as i32, 1]);
        let col = self.emit(n, OperationType::Reshape, vec![norm, col_shape])?;
        let iota: Vec<i32> = (0..rr).collect();
        let iota_row = self.model.add_constant(
            nnc_formats::nn::Operand::new(T::TensorInt32, vec![1, big_r as u32]),
            bytemuck::cast_slice(&iota),
        );
        let eq = self.emit(n, OperationType::Equal, vec![col, iota_row])?;
        let axis0 = self.i32_vector(&[0]);
        let is_axis = self.reduce_op(n, OperationType::ReduceAny, eq, axis0, false)?;
        let le = self.emit(n, OperationType::Less, vec![col, iota_row])?;
        let le_f = self.cast_op(n, le, T::TensorFloat32)?;
        let axis0 = self.i32_vector(&[0]);
        let before_f = self.reduce_op(n, OperationType::ReduceSum, le_f, axis0, false)?;
        let before = self.cast_op(n, before_f, T::TensorInt32)?;
        let iota_vec = self.i32_vector(&iota);
        let src = self.arith(n, OperationType::Sub, iota_vec, before)?;
        // Clamp into [0, r) for the gather; inserted positions are replaced below.
        let lo = self.scalar_tensor(T::TensorInt32, 0.0);
        let src = self.emit(n, OperationType::Maximum, vec![src, lo])?;
        let hi = self.scalar_tensor(T::TensorInt32, f64::from(r.max(1) as i32 - 1));
        let src = self.emit(n, OperationType::Minimum, vec![src, hi])?;
        let dims_i32: Vec<i32> = if r == 0 {
            vec![1]
        } else {
            in_dims.iter().map(|&d| d as i32).collect()
        };
        let dims_c = self.i32_vector(&dims_i32);
        let gaxis = self.i32_const(0);
        let gathered = self.emit(n, OperationType::Gather, vec![dims_c, gaxis, src])?;
        let ones = self.i32_vector(&vec![1; big_r]);
        let target = self.emit(n, OperationType::Select, vec![is_axis, ones, gathered])?;
        let out = self.emit_declared(
            n,
            OperationType::Reshape,
            vec![x.operand, target],
            vec![0; big_r],
        )?;
        self.set_tensor(n, 0, out, x.dtype, false);
        Ok(())
    }

    pub(super) fn reshape(&mut self, n: &Node) -> NResult<()> {
        if self.opset >= 5
            && let Some((shape, k)) = self.runtime_int_vector(n, 1)?
        {
            return self.reshape_runtime(n, shape, k);
        }
        let data = self.required(n, 0)?;
        let target = if self.opset < 5 {
            n.attrs
                .ints("shape")?
                .ok_or_else(|| NodeError::Invalid("Reshape needs 'shape'".into()))?
        } else {
            constant::to_i64s(&*self.required_const(n, 1)?)
        };
        let allow_zero = n.attrs.int_or("allowzero", 0)? != 0;
        let in_dims = self.shape_of_value(&data);
        let mut dims: Vec<i64> = Vec::with_capacity(target.len());
        for (i, &t) in target.iter().enumerate() {
            dims.push(match t {
                0 if !allow_zero => match in_dims.get(i) {
                    Some(&d) => i64::from(d),
                    None => {
                        return invalid(format!(
                            "shape entry {i} is 0 but the input has rank {}",
                            in_dims.len()
                        ));
                    }
                },
                0 => return unsupported("reshaping to an empty tensor is not supported"),
                -1 => -1,
                t if t < -1 => return invalid(format!("shape entry {i} is {t}")),
                t => t,
            });
        }
        if dims.iter().filter(|&&d| d == -1).count() > 1 {
            return invalid("shape has more than one -1");
        }
        // Resolve -1 and 0-as-unknown when the element count is known.
        let in_count: Option<u64> = if in_dims.contains(&0) {
            None
        } else {
            Some(
                in_dims
                    .iter()
                    .try_fold(1u64, |acc, &d| acc.checked_mul(u64::from(d)))
                    .ok_or_else(|| {
                        NodeError::Invalid("the input's element count overflows".into())
                    })?,
            )
        };
        if let Some(total) = in_count {
            let known: u64 = dims
                .iter()
                .filter(|&&d| d > 0)
                .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
                .ok_or_else(|| {
                    NodeError::Invalid(format!("shape {target:?} has more elements than 2^64"))
                })?;
            if let Some(pos) = dims.iter().position(|&d| d == -1) {
                if known == 0 || total % known != 0 {
                    return invalid(format!("cannot reshape {total} elements into {target:?}"));
                }
                dims[pos] = (total / known) as i64;
            } else if known != total || dims.contains(&0) {
                return invalid(format!("cannot reshape {in_dims:?} into {target:?}"));
            }
        }
        let out_dims: Vec<u32> = dims
            .iter()
            .map(|&d| {
                if d <= 0 {
                    Ok(0)
                } else {
                    u32::try_from(d)
                        .map_err(|_| NodeError::Invalid(format!("dimension {d} is too large")))
                }
            })
            .collect::<NResult<_>>()?;
        self.reshape_value(n, data, &out_dims)
    }

    /// Reshapes a value to ONNX dimensions `dims` (`[]` = scalar; 0 = unknown).
    pub(super) fn reshape_value(&mut self, n: &Node, data: Value, dims: &[u32]) -> NResult<()> {
        match data {
            Value::Const(c) => {
                if dims.contains(&0) {
                    return invalid("reshape of a constant to an unresolved shape");
                }
                let shape = to_usize_dims(dims);
                if shape.iter().product::<usize>() != c.element_count() {
                    return invalid(format!("cannot reshape {:?} into {shape:?}", c.shape));
                }
                self.set_const(
                    n,
                    0,
                    ConstTensor {
                        shape,
                        ..(*c).clone()
                    },
                )?;
            }
            Value::Tensor(tv) => {
                let nn_dims = if dims.is_empty() {
                    vec![1]
                } else {
                    dims.to_vec()
                };
                let out = self.reshape_to_forced(n, tv.operand, &nn_dims)?;
                self.set_tensor(n, 0, out, tv.dtype, dims.is_empty());
            }
        }
        Ok(())
    }

    pub(super) fn flatten(&mut self, n: &Node) -> NResult<()> {
        let data = self.required(n, 0)?;
        let dims = self.shape_of_value(&data);
        let r = dims.len();
        let a = n.attrs.int_or("axis", 1)?;
        let a = if a < 0 { a + r as i64 } else { a };
        if a < 0 || a > r as i64 {
            return invalid(format!("axis {a} is out of range for rank {r}"));
        }
        let a = a as usize;
        let product = |d: &[u32]| -> u32 {
            if d.contains(&0) {
                0
            } else {
                d.iter().product()
            }
        };
        let out = [product(&dims[..a]), product(&dims[a..])];
        if out[0] == 0 && out[1] == 0 {
            return needs_input_shape(
                "Flatten with unknown dimensions on both sides of the axis; use --input-shape",
            );
        }
        self.reshape_value(n, data, &out)
    }

    pub(super) fn transpose(&mut self, n: &Node) -> NResult<()> {
        let data = self.required(n, 0)?;
        let r = self.shape_of_value(&data).len();
        let perm: Vec<usize> = match n.attrs.ints("perm")? {
            Some(p) => p
                .iter()
                .map(|&v| {
                    usize::try_from(v).map_err(|_| NodeError::Invalid(format!("perm value {v}")))
                })
                .collect::<NResult<_>>()?,
            None => (0..r).rev().collect(),
        };
        match data {
            Value::Const(c) => {
                let t = constant::transpose(&c, &perm)?;
                self.set_const(n, 0, t)?;
            }
            Value::Tensor(tv) => {
                if perm.iter().enumerate().all(|(i, &p)| i == p) || r <= 1 {
                    return self.identity_value(n, Value::Tensor(tv));
                }
                let p: Vec<i32> = perm.iter().map(|&p| p as i32).collect();
                let out = self.transpose_op(n, tv.operand, &p)?;
                self.set_tensor(n, 0, out, tv.dtype, false);
            }
        }
        Ok(())
    }

    pub(super) fn squeeze_unsqueeze(&mut self, n: &Node) -> NResult<()> {
        let unsqueeze = n.op() == "Unsqueeze";
        if n.attrs.ints("axes")?.is_none()
            && let Some((axes, k)) = self.runtime_int_vector(n, 1)?
        {
            return if unsqueeze {
                self.unsqueeze_runtime(n, axes, k)
            } else {
                self.squeeze_runtime(n, axes, k)
            };
        }
        let data = self.required(n, 0)?;
        let dims = self.shape_of_value(&data);
        let axes = ints_from_attr_or_input(self, n, "axes", 1)?;
        let out: Vec<u32> = if unsqueeze {
            let axes = axes.ok_or_else(|| NodeError::Invalid("Unsqueeze needs axes".into()))?;
            let r = dims.len() + axes.len();
            let mut norm: Vec<usize> = axes.iter().map(|&a| axis(a, r)).collect::<NResult<_>>()?;
            norm.sort_unstable();
            if norm.windows(2).any(|w| w[0] == w[1]) {
                return invalid("Unsqueeze axes repeat");
            }
            let mut out = Vec::with_capacity(r);
            let mut src = dims.iter();
            for i in 0..r {
                if norm.contains(&i) {
                    out.push(1);
                } else {
                    out.push(src.next().copied().unwrap_or(1));
                }
            }
            out
        } else {
            let r = dims.len();
            let drop: Vec<usize> = match axes {
                Some(a) if !a.is_empty() => {
                    a.iter().map(|&x| axis(x, r)).collect::<NResult<_>>()?
                }
                _ => {
                    if dims.contains(&0) {
                        return unsupported(
                            "Squeeze without axes on a tensor with dynamic dimensions",
                        );
                    }
                    (0..r).filter(|&i| dims[i] == 1).collect()
                }
            };
            for &d in &drop {
                if dims[d] != 1 && dims[d] != 0 {
                    return invalid(format!("cannot squeeze dimension {d} of size {}", dims[d]));
                }
            }
            (0..r)
                .filter(|i| !drop.contains(i))
                .map(|i| dims[i])
                .collect()
        };
        if out.iter().filter(|&&d| d == 0).count() > 1 {
            return needs_input_shape(
                "reshape with more than one dynamic dimension; use --input-shape",
            );
        }
        self.reshape_value(n, data, &out)
    }

    pub(super) fn concat(&mut self, n: &Node) -> NResult<()> {
        let a = n
            .attrs
            .int("axis")?
            .ok_or_else(|| NodeError::Invalid("Concat needs 'axis'".into()))?;
        let count = n.proto.input.len();
        let mut consts = Vec::new();
        for i in 0..count {
            if let Some(Value::Const(c)) = self.input(n, i)? {
                consts.push(c);
            }
        }
        if consts.len() == count {
            let refs: Vec<&ConstTensor> = consts.iter().map(Rc::as_ref).collect();
            let c = constant::concat(&refs, a, &self.budget)?;
            self.set_const(n, 0, c)?;
            return Ok(());
        }
        let mut operands = Vec::new();
        let mut dtype = None;
        let mut rank = 0;
        for i in 0..count {
            if self.input_name(n, i).is_none() {
                continue;
            }
            let tv = self.tensor(n, i)?;
            if tv.scalar {
                return invalid("Concat inputs must have rank >= 1");
            }
            rank = self.rank(tv);
            match dtype {
                None => dtype = Some(tv.dtype),
                Some(d)
                    if d != tv.dtype
                        && !(matches!(d, DataType::I64 | DataType::I32)
                            && matches!(tv.dtype, DataType::I64 | DataType::I32)) =>
                {
                    return invalid(format!("Concat of {d} and {} inputs", tv.dtype));
                }
                _ => {}
            }
            operands.push(tv.operand);
        }
        let ax = axis(a, rank)?;
        let axis_operand = self.i32_const(ax as i32);
        operands.push(axis_operand);
        let out = self.emit(n, OperationType::Concatenation, operands)?;
        self.set_tensor(n, 0, out, dtype.unwrap_or(DataType::F32), false);
        Ok(())
    }

    /// Split with run-time sizes: output j is SLICE(x, begin, size) with begin[a] the sum
    /// of the sizes before j and size[a] = split[j], computed with NN integer operations.
    /// Sizes that do not add up to the dimension are not diagnosed (ONNX rejects them);
    /// a size that runs past the end fails SLICE at run time.
    fn split_runtime(&mut self, n: &Node, split: u32, k: usize) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        let dims = self.known_dims(x)?;
        let r = dims.len();
        let a = axis(n.attrs.int_or("axis", 0)?, r)?;
        if k != n.proto.output.len() {
            return invalid(format!(
                "{k} split sizes for {} outputs",
                n.proto.output.len()
            ));
        }
        let onehot: Vec<i32> = (0..r).map(|d| i32::from(d == a)).collect();
        let onehot = self.i32_vector(&onehot);
        let base: Vec<i32> = dims
            .iter()
            .enumerate()
            .map(|(d, &v)| if d == a { 0 } else { v as i32 })
            .collect();
        let base = self.i32_vector(&base);
        let mut start: Option<u32> = None;
        for j in 0..k {
            let sj = self.element_of(n, split, j)?;
            let begin = match start {
                Some(s0) => self.arith(n, OperationType::Mul, onehot, s0)?,
                None => self.i32_vector(&vec![0; r]),
            };
            let part = self.arith(n, OperationType::Mul, onehot, sj)?;
            let size = self.arith(n, OperationType::Add, base, part)?;
            let out = self.emit(n, OperationType::Slice, vec![x.operand, begin, size])?;
            self.set_tensor(n, j, out, x.dtype, false);
            start = Some(match start {
                Some(s0) => self.arith(n, OperationType::Add, s0, sj)?,
                None => sj,
            });
        }
        Ok(())
    }

    pub(super) fn split(&mut self, n: &Node) -> NResult<()> {
        if n.attrs.ints("split")?.is_none()
            && let Some((split, k)) = self.runtime_int_vector(n, 1)?
        {
            return self.split_runtime(n, split, k);
        }
        let data = self.required(n, 0)?;
        let dims = self.shape_of_value(&data);
        let a = axis(n.attrs.int_or("axis", 0)?, dims.len())?;
        let outputs = n.proto.output.len();
        let extent = dims[a];
        if extent == 0 {
            return needs_input_shape("Split along a dynamic dimension; use --input-shape");
        }
        let sizes: Vec<u32> = match ints_from_attr_or_input(self, n, "split", 1)? {
            Some(s) => s
                .iter()
                .map(|&v| {
                    u32::try_from(v).map_err(|_| NodeError::Invalid(format!("split size {v}")))
                })
                .collect::<NResult<_>>()?,
            None => {
                // Opset 18's num_outputs names how many outputs the node has: anything
                // else is a malformed node (and must not size an allocation).
                let parts = match n.attrs.int("num_outputs")? {
                    None => outputs,
                    Some(v) if usize::try_from(v).is_ok_and(|v| v == outputs) => outputs,
                    Some(v) => {
                        return invalid(format!(
                            "num_outputs is {v}, but the node has {outputs} outputs"
                        ));
                    }
                };
                if parts == 0 {
                    return invalid("Split into zero parts");
                }
                if parts > extent as usize {
                    return invalid(format!("cannot split {extent} into {parts} parts"));
                }
                // Opset 18: uneven splits give the last part the remainder.
                let chunk = extent.div_ceil(parts as u32);
                let mut v = vec![chunk; parts];
                let last = extent.checked_sub(chunk * (parts as u32 - 1));
                match last {
                    Some(l) if l > 0 => v[parts - 1] = l,
                    _ => return invalid(format!("cannot split {extent} into {parts} parts")),
                }
                v
            }
        };
        if sizes.len() != outputs
            || sizes.iter().map(|&s| u64::from(s)).sum::<u64>() != u64::from(extent)
        {
            return invalid(format!(
                "split sizes {sizes:?} do not cover dimension {a} of size {extent} with {outputs} outputs"
            ));
        }
        if sizes.contains(&0) {
            return unsupported("empty split outputs are not supported");
        }
        if let Value::Const(c) = &data {
            let mut start = 0i64;
            for (k, &s) in sizes.iter().enumerate() {
                let ranges: Vec<(i64, i64, usize)> = c
                    .shape
                    .iter()
                    .enumerate()
                    .map(|(d, &len)| {
                        if d == a {
                            (start, 1, s as usize)
                        } else {
                            (0, 1, len)
                        }
                    })
                    .collect();
                let part = constant::slice(c, &ranges, &self.budget)?;
                self.set_const(n, k, part)?;
                start += i64::from(s);
            }
            return Ok(());
        }
        let Value::Tensor(tv) = data else {
            return invalid("unreachable");
        };
        if sizes.iter().all(|&s| s == sizes[0]) {
            let inputs = vec![
                tv.operand,
                self.i32_const(a as i32),
                self.i32_const(outputs as i32),
            ];
            let outs =
                self.emit_raw(OperationType::Split, inputs, vec![None; outputs], &n.label)?;
            for (k, o) in outs.into_iter().enumerate() {
                self.set_tensor(n, k, o, tv.dtype, false);
            }
            return Ok(());
        }
        let mut start = 0u32;
        for (k, &s) in sizes.iter().enumerate() {
            let mut begin = vec![0i32; dims.len()];
            let mut size = vec![-1i32; dims.len()];
            begin[a] = start as i32;
            size[a] = s as i32;
            let b = self.i32_vector(&begin);
            let sz = self.i32_vector(&size);
            let out = self.emit(n, OperationType::Slice, vec![tv.operand, b, sz])?;
            self.set_tensor(n, k, out, tv.dtype, false);
            start += s;
        }
        Ok(())
    }

    /// One element of a run-time int vector as a `[1]` tensor.
    fn element_of(&mut self, n: &Node, v: u32, k: usize) -> NResult<u32> {
        let b = self.i32_vector(&[k as i32]);
        let s = self.i32_vector(&[1]);
        self.emit(n, OperationType::Slice, vec![v, b, s])
    }

    /// A `[K]` int32 operand holding either input `i` (run-time) or constant values.
    fn int_vector_operand(&mut self, n: &Node, i: usize, fallback: &[i64]) -> NResult<u32> {
        if let Some((v, _)) = self.runtime_int_vector(n, i)? {
            return Ok(v);
        }
        let values = match self.const_input(n, i)? {
            Some(c) => constant::to_i64s(&c),
            None => fallback.to_vec(),
        };
        let v: Vec<i32> = values
            .iter()
            .map(|&x| x.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32)
            .collect();
        Ok(self.i32_vector(&v))
    }

    /// Slice whose starts / ends / axes / steps are (partly) computed at run time. The
    /// ONNX normalization (negative indices count from the end, clamping to [0, dim] for
    /// positive steps and to [0, dim-1] / [-1, dim-1] for negative ones) is computed with
    /// NN integer operations, then scattered into full-rank begin / end / strides for
    /// STRIDED_SLICE. An end of -1 ("before index 0") is passed as -dim-1, which
    /// STRIDED_SLICE reads the same way. Clamped starts and ends are exact; the result
    /// shape is known at run time only.
    fn slice_runtime(&mut self, n: &Node) -> NResult<()> {
        use nnc_formats::nn::OperandType as T;
        let x = self.tensor(n, 0)?;
        let dims = self.known_dims(x)?;
        let r = dims.len();
        if r == 0 {
            return invalid("Slice of a scalar");
        }
        let k = match self.runtime_int_vector(n, 1)? {
            Some((_, k)) => k,
            None => match self.const_input(n, 1)? {
                Some(c) => c.element_count(),
                None => return invalid("Slice needs starts"),
            },
        };
        if k == 0 || k > r {
            return invalid(format!("{k} slice axes for a rank-{r} input"));
        }
        let default_axes: Vec<i64> = (0..k as i64).collect();
        let starts = self.int_vector_operand(n, 1, &[])?;
        let ends = self.int_vector_operand(n, 2, &[])?;
        let axes = self.int_vector_operand(n, 3, &default_axes)?;
        let steps = self.int_vector_operand(n, 4, &vec![1; k])?;
        let c = |this: &mut Self, v: f64| this.scalar_tensor(T::TensorInt32, v);
        // axes: a < 0 ? a + r : a; the dimension of each sliced axis by GATHER (which
        // rejects an axis out of range at run time).
        let zero = c(self, 0.0);
        let neg = self.emit(n, OperationType::Less, vec![axes, zero])?;
        let rank_c = c(self, r as f64);
        let shifted = self.arith(n, OperationType::Add, axes, rank_c)?;
        let axes = self.emit(n, OperationType::Select, vec![neg, shifted, axes])?;
        let dims_i32: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
        let dims_c = self.i32_vector(&dims_i32);
        let gaxis = self.i32_const(0);
        let dimk = self.emit(n, OperationType::Gather, vec![dims_c, gaxis, axes])?;
        let one = c(self, 1.0);
        let dim_m1 = self.arith(n, OperationType::Sub, dimk, one)?;
        let pos = self.emit(n, OperationType::Greater, vec![steps, zero])?;
        // Normalizes v: v < 0 ? v + dim : v, then clamps to [lo, hi].
        let norm = |this: &mut Self, v: u32, lo: u32, hi: u32| -> NResult<u32> {
            let neg = this.emit(n, OperationType::Less, vec![v, zero])?;
            let sum = this.arith(n, OperationType::Add, v, dimk)?;
            let v = this.emit(n, OperationType::Select, vec![neg, sum, v])?;
            let v = this.emit(n, OperationType::Maximum, vec![v, lo])?;
            this.emit(n, OperationType::Minimum, vec![v, hi])
        };
        let start_hi = self.emit(n, OperationType::Select, vec![pos, dimk, dim_m1])?;
        let starts = norm(self, starts, zero, start_hi)?;
        let minus_one = c(self, -1.0);
        let end_lo = self.emit(n, OperationType::Select, vec![pos, zero, minus_one])?;
        let ends = norm(self, ends, end_lo, start_hi)?;
        let before = self.emit(n, OperationType::Less, vec![ends, zero])?;
        let past = self.arith(n, OperationType::Sub, ends, dimk)?;
        let ends = self.emit(n, OperationType::Select, vec![before, past, ends])?;
        // Scatter into full-rank vectors: untouched axes take [0, dim) with stride 1.
        let iota: Vec<i32> = (0..r as i32).collect();
        let iota = self.i32_vector(&iota);
        let mut begin = self.i32_vector(&vec![0; r]);
        let mut end = self.i32_vector(&dims_i32);
        let mut stride = self.i32_vector(&vec![1; r]);
        for j in 0..k {
            let aj = self.element_of(n, axes, j)?;
            let hit = self.emit(n, OperationType::Equal, vec![iota, aj])?;
            let sj = self.element_of(n, starts, j)?;
            begin = self.emit(n, OperationType::Select, vec![hit, sj, begin])?;
            let ej = self.element_of(n, ends, j)?;
            end = self.emit(n, OperationType::Select, vec![hit, ej, end])?;
            let tj = self.element_of(n, steps, j)?;
            stride = self.emit(n, OperationType::Select, vec![hit, tj, stride])?;
        }
        let slice = StridedSlice {
            begin,
            end,
            strides: stride,
            begin_mask: 0,
            end_mask: 0,
            shrink_axis_mask: 0,
        };
        let out = self.strided_slice_op(n, x.operand, &slice)?;
        self.set_tensor(n, 0, out, x.dtype, false);
        Ok(())
    }

    pub(super) fn slice(&mut self, n: &Node) -> NResult<()> {
        if self.opset >= 10
            && (1..=4).any(|i| matches!(self.input(n, i), Ok(Some(Value::Tensor(_)))))
        {
            return self.slice_runtime(n);
        }
        let data = self.required(n, 0)?;
        let dims = self.shape_of_value(&data);
        let r = dims.len();
        let (starts, ends, axes, steps) = if self.opset < 10 {
            (
                n.attrs
                    .ints("starts")?
                    .ok_or_else(|| NodeError::Invalid("Slice needs 'starts'".into()))?,
                n.attrs
                    .ints("ends")?
                    .ok_or_else(|| NodeError::Invalid("Slice needs 'ends'".into()))?,
                n.attrs.ints("axes")?,
                None,
            )
        } else {
            let get = |this: &Self, i: usize| -> NResult<Option<Vec<i64>>> {
                Ok(this.const_input(n, i)?.map(|c| constant::to_i64s(&c)))
            };
            (
                get(self, 1)?.ok_or_else(|| NodeError::Invalid("Slice needs starts".into()))?,
                get(self, 2)?.ok_or_else(|| NodeError::Invalid("Slice needs ends".into()))?,
                get(self, 3)?,
                get(self, 4)?,
            )
        };
        let axes: Vec<usize> = match axes {
            Some(a) => a.iter().map(|&x| axis(x, r)).collect::<NResult<_>>()?,
            None if starts.len() <= r => (0..starts.len()).collect(),
            None => {
                return invalid(format!("{} starts for an input of rank {r}", starts.len()));
            }
        };
        let steps = steps.unwrap_or(vec![1; starts.len()]);
        if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
            return invalid("starts, ends, axes and steps differ in length");
        }
        // Per axis: (start, step, count) in the normalized, clamped form of the spec.
        let mut ranges: Vec<(i64, i64, usize)> = dims.iter().map(|&d| (0, 1, d as usize)).collect();
        let mut touched = vec![false; r];
        for k in 0..starts.len() {
            let a = axes[k];
            if touched[a] {
                return invalid(format!("axis {a} is sliced twice"));
            }
            touched[a] = true;
            let dim = i64::from(dims[a]);
            if dim == 0 {
                return needs_input_shape("Slice along a dynamic dimension; use --input-shape");
            }
            let step = steps[k];
            if step == 0 {
                return invalid("Slice step is 0");
            }
            let norm = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
            let (start, end) = if step > 0 {
                (norm(starts[k]).clamp(0, dim), norm(ends[k]).clamp(0, dim))
            } else {
                (
                    norm(starts[k]).clamp(0, dim - 1),
                    norm(ends[k]).clamp(-1, dim - 1),
                )
            };
            let span = if step > 0 { end - start } else { start - end };
            let count = (span.max(0) as u64).div_ceil(step.unsigned_abs());
            ranges[a] = (start, step, count as usize);
        }
        // Constants may be empty (shape arithmetic slices them so: a prefix of no
        // dimensions); operands may not.
        if matches!(data, Value::Tensor(_)) && ranges.iter().any(|r| r.2 == 0) {
            return unsupported("slices producing empty tensors are not supported");
        }
        match data {
            Value::Const(c) => {
                let t = constant::slice(&c, &ranges, &self.budget)?;
                self.set_const(n, 0, t)?;
            }
            Value::Tensor(tv) => {
                let out = if ranges.iter().all(|r| r.1 == 1) {
                    let begin: Vec<i32> = ranges.iter().map(|r| r.0 as i32).collect();
                    let size: Vec<i32> = ranges
                        .iter()
                        .zip(&touched)
                        .map(|(r, &t)| if t { r.2 as i32 } else { -1 })
                        .collect();
                    let b = self.i32_vector(&begin);
                    let s = self.i32_vector(&size);
                    self.emit(n, OperationType::Slice, vec![tv.operand, b, s])?
                } else {
                    let mut begin = Vec::with_capacity(r);
                    let mut end = Vec::with_capacity(r);
                    let mut stride = Vec::with_capacity(r);
                    let (mut begin_mask, mut end_mask) = (0i32, 0i32);
                    for (d, &(start, step, count)) in ranges.iter().enumerate() {
                        if !touched[d] {
                            begin.push(0);
                            end.push(0);
                            stride.push(1);
                            begin_mask |= 1 << d;
                            end_mask |= 1 << d;
                            continue;
                        }
                        let last = start + step * (count as i64 - 1);
                        let stop = last + step.signum();
                        begin.push(start as i32);
                        stride.push(step as i32);
                        if stop < 0 {
                            // "Before index 0" cannot be written as an end index.
                            end.push(0);
                            end_mask |= 1 << d;
                        } else {
                            end.push(stop as i32);
                        }
                    }
                    let slice = StridedSlice {
                        begin: self.i32_vector(&begin),
                        end: self.i32_vector(&end),
                        strides: self.i32_vector(&stride),
                        begin_mask,
                        end_mask,
                        shrink_axis_mask: 0,
                    };
                    self.strided_slice_op(n, tv.operand, &slice)?
                };
                self.set_tensor(n, 0, out, tv.dtype, false);
            }
        }
        Ok(())
    }

    pub(super) fn gather(&mut self, n: &Node) -> NResult<()> {
        let data = self.required(n, 0)?;
        let indices = self.required(n, 1)?;
        let dims = self.shape_of_value(&data);
        let r = dims.len();
        if r == 0 {
            return invalid("Gather needs data of rank >= 1");
        }
        let a = axis(n.attrs.int_or("axis", 0)?, r)?;
        if let (Value::Const(d), Value::Const(i)) = (&data, &indices) {
            let t = constant::gather(d, i, a as i64, &self.budget)?;
            self.set_const(n, 0, t)?;
            return Ok(());
        }
        let idx_shape = self.shape_of_value(&indices);
        let mut out_dims = dims[..a].to_vec();
        out_dims.extend_from_slice(&idx_shape);
        out_dims.extend_from_slice(&dims[a + 1..]);
        let idx_operand = match &indices {
            Value::Const(c) => {
                // Constant indices: wrap negatives now, so the NN operation sees valid ones.
                let dim = i64::from(dims[a]);
                let mut v = constant::to_i64s(c);
                for x in &mut v {
                    if *x < 0 {
                        if dim == 0 {
                            return unsupported(
                                "negative Gather indices along a dynamic dimension",
                            );
                        }
                        *x += dim;
                    }
                    if *x < 0 || (dim != 0 && *x >= dim) {
                        return invalid(format!(
                            "Gather index {x} is out of range for dimension {a} of size {dim}"
                        ));
                    }
                }
                let fixed = constant::i64_tensor(c.shape.clone(), &v);
                self.const_operand(&fixed)?.operand
            }
            Value::Tensor(tv) => {
                if !matches!(tv.dtype, DataType::I64 | DataType::I32) {
                    return invalid("Gather indices must be integers");
                }
                // ONNX counts negative indices from the end; NN GATHER has no such rule.
                // Wrap them in the graph: idx + (idx < 0) * dim.
                let dim = dims[a];
                if dim == 0 {
                    return needs_input_shape(
                        "Gather with run-time indices along a dynamic dimension; use --input-shape",
                    );
                }
                let zero = self.scalar_tensor(nnc_formats::nn::OperandType::TensorInt32, 0.0);
                let negative = self.emit(n, OperationType::Less, vec![tv.operand, zero])?;
                let negative = self.emit_raw(
                    OperationType::Cast,
                    vec![negative],
                    vec![Some(nnc_formats::nn::Operand::new(
                        nnc_formats::nn::OperandType::TensorInt32,
                        vec![],
                    ))],
                    &n.label,
                )?[0];
                let extent =
                    self.scalar_tensor(nnc_formats::nn::OperandType::TensorInt32, f64::from(dim));
                let act = self.i32_const(0);
                let shift = self.emit(n, OperationType::Mul, vec![negative, extent, act])?;
                let act = self.i32_const(0);
                self.emit(n, OperationType::Add, vec![tv.operand, shift, act])?
            }
        };
        let name = self.input_name(n, 0).unwrap_or("").to_string();
        let d = self.materialize(&name, &data)?;
        let ax = self.i32_const(a as i32);
        let mut out = self.emit(n, OperationType::Gather, vec![d.operand, ax, idx_operand])?;
        let scalar = out_dims.is_empty();
        if idx_shape.is_empty() {
            // Scalar indices (an NN [1] tensor) leave a unit dimension to drop.
            out = self.reshape_to(n, out, if scalar { &[1] } else { &out_dims })?;
        }
        self.set_tensor(n, 0, out, d.dtype, scalar);
        Ok(())
    }

    /// Pad whose pads, value or axes are computed at run time. The [rank, 2] paddings
    /// are assembled with NN integer operations (per listed axis, SELECT into the
    /// before / after vectors); a run-time constant value goes in through a mask:
    /// SELECT(PAD(ones) == 0, value, PAD(x)). Negative pads fail PAD at run time.
    fn pad_runtime(&mut self, n: &Node, mode: &str) -> NResult<()> {
        use nnc_formats::nn::OperandType as T;
        let x = self.tensor(n, 0)?;
        let r = self.rank(x);
        if !matches!(mode, "constant" | "reflect") {
            return Err(self.needs_constant(
                n,
                &[1, 3],
                format!(
                    "Pad mode '{mode}' with run-time pads (the NN set has PAD, PAD_V2 and \
                     MIRROR_PAD only; '{mode}' is lowered to GATHER with indices fixed at \
                     compile time)"
                ),
            ));
        }
        let k = match self.runtime_int_vector(n, 3)? {
            Some((_, k)) => k,
            None => match self.const_input(n, 3)? {
                Some(c) => c.element_count(),
                None => r,
            },
        };
        let pads = self.int_vector_operand(n, 1, &[])?;
        let default_axes: Vec<i64> = (0..r as i64).collect();
        let axes = self.int_vector_operand(n, 3, &default_axes)?;
        let zero = self.scalar_tensor(T::TensorInt32, 0.0);
        let neg = self.emit(n, OperationType::Less, vec![axes, zero])?;
        let rank_c = self.scalar_tensor(T::TensorInt32, r as f64);
        let shifted = self.arith(n, OperationType::Add, axes, rank_c)?;
        let axes = self.emit(n, OperationType::Select, vec![neg, shifted, axes])?;
        let iota: Vec<i32> = (0..r as i32).collect();
        let iota = self.i32_vector(&iota);
        let mut before = self.i32_vector(&vec![0; r]);
        let mut after = self.i32_vector(&vec![0; r]);
        for j in 0..k {
            let aj = self.element_of(n, axes, j)?;
            let hit = self.emit(n, OperationType::Equal, vec![iota, aj])?;
            let bj = self.element_of(n, pads, j)?;
            before = self.emit(n, OperationType::Select, vec![hit, bj, before])?;
            let ej = self.element_of(n, pads, j + k)?;
            after = self.emit(n, OperationType::Select, vec![hit, ej, after])?;
        }
        let col = self.i32_vector(&[r as i32, 1]);
        let before = self.emit(n, OperationType::Reshape, vec![before, col])?;
        let col = self.i32_vector(&[r as i32, 1]);
        let after = self.emit(n, OperationType::Reshape, vec![after, col])?;
        let axis1 = self.i32_const(1);
        let paddings = self.emit(n, OperationType::Concatenation, vec![before, after, axis1])?;
        let out = if mode == "reflect" {
            let reflect = PadFill::Mirror { symmetric: false };
            self.pad_op(n, x.operand, paddings, reflect)?
        } else {
            let padded = self.pad_op(n, x.operand, paddings, PadFill::Zeros)?;
            match self.input(n, 2)? {
                Some(Value::Tensor(v)) => {
                    if self.operand_type(v) != self.operand_type(x) {
                        return invalid("Pad's constant_value differs in type from the input");
                    }
                    let dims = self.known_dims(x)?;
                    let dims_i32: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
                    let shape = self.i32_vector(&dims_i32);
                    // A float mask: constant folding turns FILL into a tensor constant,
                    // and float tensor constants travel as weights of any size.
                    let one = self.f32_const(1.0);
                    let ones = self.emit(n, OperationType::Fill, vec![shape, one])?;
                    let mask = self.pad_op(n, ones, paddings, PadFill::Zeros)?;
                    let fzero = self.scalar_tensor(T::TensorFloat32, 0.0);
                    let outside = self.emit(n, OperationType::Equal, vec![mask, fzero])?;
                    self.emit(n, OperationType::Select, vec![outside, v.operand, padded])?
                }
                Some(Value::Const(c))
                    if constant::to_f64s(&c).first().copied().unwrap_or(0.0) != 0.0 =>
                {
                    let value = constant::to_f64s(&c)[0];
                    let v = if super::is_float(x.dtype) {
                        PadValue::Float(value as f32)
                    } else {
                        PadValue::Int(value as i32)
                    };
                    self.pad_op(n, x.operand, paddings, PadFill::Value(v))?
                }
                _ => padded,
            }
        };
        self.set_tensor(n, 0, out, x.dtype, false);
        Ok(())
    }

    pub(super) fn pad(&mut self, n: &Node) -> NResult<()> {
        if self.opset >= 11
            && [1, 2, 3]
                .iter()
                .any(|&i| matches!(self.input(n, i), Ok(Some(Value::Tensor(_)))))
        {
            let mode = n.attrs.string_or("mode", "constant")?;
            return self.pad_runtime(n, &mode);
        }
        let x = self.tensor(n, 0)?;
        let r = self.rank(x);
        let mode = n.attrs.string_or("mode", "constant")?;
        let (pads, value) = if self.opset < 11 {
            (
                n.attrs
                    .ints("pads")?
                    .ok_or_else(|| NodeError::Invalid("Pad needs 'pads'".into()))?,
                f64::from(n.attrs.float_or("value", 0.0)?),
            )
        } else {
            let pads = constant::to_i64s(&*self.required_const(n, 1)?);
            let value = match self.const_input(n, 2)? {
                Some(c) => constant::to_f64s(&c).first().copied().unwrap_or(0.0),
                None => 0.0,
            };
            (pads, value)
        };
        let axes: Vec<usize> = match self.const_input(n, 3)? {
            Some(a) => constant::to_i64s(&a)
                .iter()
                .map(|&v| axis(v, r))
                .collect::<NResult<_>>()?,
            None => (0..r).collect(),
        };
        if pads.len() != 2 * axes.len() {
            return invalid(format!(
                "pads has {} values for {} axes",
                pads.len(),
                axes.len()
            ));
        }
        if pads.iter().any(|&p| p < 0) {
            return unsupported("negative pads (cropping) are not supported");
        }
        let mut paddings = vec![0i32; 2 * r];
        for (k, &a) in axes.iter().enumerate() {
            paddings[2 * a] =
                i32::try_from(pads[k]).map_err(|_| NodeError::Invalid("pad too large".into()))?;
            paddings[2 * a + 1] = i32::try_from(pads[k + axes.len()])
                .map_err(|_| NodeError::Invalid("pad too large".into()))?;
        }
        let p = self.i32_vector(&paddings);
        let float = super::is_float(x.dtype);
        let out = match mode.as_str() {
            "constant" if value == 0.0 => self.pad_op(n, x.operand, p, PadFill::Zeros)?,
            "constant" => {
                let v = if float {
                    PadValue::Float(value as f32)
                } else {
                    PadValue::Int(value as i32)
                };
                self.pad_op(n, x.operand, p, PadFill::Value(v))?
            }
            "reflect" => {
                let reflect = PadFill::Mirror { symmetric: false };
                self.pad_op(n, x.operand, p, reflect)?
            }
            "edge" | "wrap" => self.pad_by_gather(n, x, &paddings, mode == "wrap")?,
            other => return invalid(format!("unknown Pad mode '{other}'")),
        };
        self.set_tensor(n, 0, out, x.dtype, false);
        Ok(())
    }

    /// Pad modes the NN set has no operation for, as one GATHER per padded axis with
    /// constant indices: output position `i` of an axis of size `d` padded by `before`
    /// reads `clamp(i - before, 0, d - 1)` ('edge') or `(i - before) mod d` ('wrap').
    /// Pure data movement, so exact for every type GATHER takes.
    fn pad_by_gather(
        &mut self,
        n: &Node,
        x: TensorValue,
        paddings: &[i32],
        wrap: bool,
    ) -> NResult<u32> {
        let dims = self.dims(x);
        let mut out = x.operand;
        for (a, &d) in dims.iter().enumerate() {
            let (before, after) = (i64::from(paddings[2 * a]), i64::from(paddings[2 * a + 1]));
            if before == 0 && after == 0 {
                continue;
            }
            if d == 0 {
                return needs_input_shape(
                    "Pad 'edge' / 'wrap' of a dimension of unknown size; fix it with \
                     --input-shape",
                );
            }
            let d = i64::from(d);
            let len = d + before + after;
            if len > i64::from(i32::MAX) {
                return invalid("pad too large");
            }
            // The index table is data lowering creates: it counts against the fold budget.
            self.budget
                .generate(len as usize, nnc_formats::tensor::DataType::I32)?;
            let indices: Vec<i32> = (0..len)
                .map(|i| {
                    let src = i - before;
                    (if wrap {
                        src.rem_euclid(d)
                    } else {
                        src.clamp(0, d - 1)
                    }) as i32
                })
                .collect();
            let axis = self.i32_const(a as i32);
            let idx = self.i32_vector(&indices);
            out = self.emit(n, OperationType::Gather, vec![out, axis, idx])?;
        }
        Ok(out)
    }

    pub(super) fn tile(&mut self, n: &Node) -> NResult<()> {
        if let Some((m, k)) = self.runtime_int_vector(n, 1)? {
            // TILE takes its multiples as a tensor; the result shape is known at run time.
            let x = self.tensor(n, 0)?;
            if k != self.rank(x) {
                return invalid(format!("{k} repeats for a rank-{} input", self.rank(x)));
            }
            let out = self.emit(n, OperationType::Tile, vec![x.operand, m])?;
            self.set_tensor(n, 0, out, x.dtype, false);
            return Ok(());
        }
        let data = self.required(n, 0)?;
        let repeats = constant::to_i64s(&*self.required_const(n, 1)?);
        if repeats.iter().any(|&r| r < 1) {
            return unsupported("Tile repeats below 1 (empty outputs) are not supported");
        }
        if let Value::Const(c) = &data {
            let reps: Vec<usize> = repeats.iter().map(|&r| r as usize).collect();
            let t = constant::tile(c, &reps, &self.budget)?;
            self.set_const(n, 0, t)?;
            return Ok(());
        }
        let Value::Tensor(tv) = data else {
            return invalid("unreachable");
        };
        let m: Vec<i32> = repeats
            .iter()
            .map(|&r| i32::try_from(r).map_err(|_| NodeError::Invalid("repeat too large".into())))
            .collect::<NResult<_>>()?;
        let mv = self.i32_vector(&m);
        let out = self.emit(n, OperationType::Tile, vec![tv.operand, mv])?;
        self.set_tensor(n, 0, out, tv.dtype, false);
        Ok(())
    }

    pub(super) fn expand(&mut self, n: &Node) -> NResult<()> {
        if let Some((shape, _)) = self.runtime_int_vector(n, 1)? {
            // x * FILL(shape, 1): MUL broadcasts both ways, which is exactly Expand's rule;
            // multiplying by one changes no value (NaN and -0 included).
            let x = self.tensor(n, 0)?;
            let t = self.operand_type(x);
            let (one, fill_type) = match t {
                nnc_formats::nn::OperandType::TensorFloat32 => (
                    self.f32_const(1.0),
                    nnc_formats::nn::OperandType::TensorFloat32,
                ),
                nnc_formats::nn::OperandType::TensorInt32 => {
                    (self.i32_const(1), nnc_formats::nn::OperandType::TensorInt32)
                }
                _ => {
                    return unsupported(format!(
                        "Expand of {} tensors to a run-time shape is not supported",
                        x.dtype
                    ));
                }
            };
            let _ = fill_type;
            let ones = self.emit(n, OperationType::Fill, vec![shape, one])?;
            let out = self.arith(n, OperationType::Mul, x.operand, ones)?;
            self.set_tensor(n, 0, out, x.dtype, false);
            return Ok(());
        }
        let data = self.required(n, 0)?;
        let shape: Vec<usize> = constant::to_i64s(&*self.required_const(n, 1)?)
            .into_iter()
            .map(|d| {
                usize::try_from(d)
                    .map_err(|_| NodeError::Invalid(format!("negative dimension {d}")))
            })
            .collect::<NResult<_>>()?;
        if let Value::Const(c) = &data {
            let t = constant::broadcast_to(c, &shape, &self.budget)?;
            self.set_const(n, 0, t)?;
            return Ok(());
        }
        let Value::Tensor(tv) = data else {
            return invalid("unreachable");
        };
        let dims = self.known_dims(tv)?;
        let in_dims = to_usize_dims(&dims);
        let out = constant::broadcast_shape(&in_dims, &shape)?;
        if out.contains(&0) {
            return unsupported("expanding to an empty tensor is not supported");
        }
        // Lift to the output rank, then TILE the unit dimensions.
        let mut lifted = vec![1u32; out.len() - in_dims.len()];
        lifted.extend_from_slice(&dims);
        let x = self.reshape_to(n, tv.operand, &lifted)?;
        let multiples: Vec<i32> = out
            .iter()
            .zip(&lifted)
            .map(|(&o, &i)| (o as u32 / i.max(1)) as i32)
            .collect();
        let y = if multiples.iter().all(|&m| m == 1) {
            if x == tv.operand {
                return self.identity_value(n, Value::Tensor(tv));
            }
            x
        } else {
            let m = self.i32_vector(&multiples);
            self.emit(n, OperationType::Tile, vec![x, m])?
        };
        self.set_tensor(n, 0, y, tv.dtype, out.is_empty());
        Ok(())
    }

    pub(super) fn depth_space(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let dims = self.dims(x);
        if dims.len() != 4 {
            return invalid(format!("{} needs a rank-4 input", n.op()));
        }
        let bs = n
            .attrs
            .int("blocksize")?
            .ok_or_else(|| NodeError::Invalid("blocksize is required".into()))?;
        if !(1..=1 << 16).contains(&bs) {
            return invalid(format!("blocksize {bs} is out of range"));
        }
        let mut input = x.operand;
        let to_space = n.op() == "DepthToSpace";
        if to_space && n.attrs.string_or("mode", "DCR")? == "CRD" {
            // CRD reads channel c*bs*bs + i*bs + j where DCR reads (i*bs+j)*C + c:
            // permute the channels, then run the DCR operation.
            let c_in = dims[1];
            if c_in == 0 {
                return unsupported("DepthToSpace CRD needs the channel count at compile time");
            }
            let bb = u64::try_from(bs * bs).unwrap_or(u64::MAX);
            if u64::from(c_in) % bb != 0 {
                return invalid(format!(
                    "{c_in} channels are not divisible by blocksize^2 = {bb}"
                ));
            }
            let (c_in, bb) = (u64::from(c_in), bb);
            let c_out = c_in / bb;
            self.budget
                .generate(c_in as usize, nnc_formats::tensor::DataType::I32)?;
            let mut idx = Vec::with_capacity(c_in as usize);
            for k in 0..c_in {
                let (block, c) = (k / c_out, k % c_out);
                idx.push((c * bb + block) as i32);
            }
            let ax = self.i32_const(1);
            let iv = self.i32_vector(&idx);
            input = self.emit(n, OperationType::Gather, vec![input, ax, iv])?;
        }
        let xh = self.to_nhwc(n, input)?;
        let b = self.i32_const(bs as i32);
        let op = if to_space {
            OperationType::DepthToSpace
        } else {
            OperationType::SpaceToDepth
        };
        let yh = self.emit(n, op, vec![xh, b])?;
        let mut y = self.to_nchw(n, yh)?;
        // SpaceToDepth gained `mode` in opset 28. CRD writes channel c*bs*bs + i*bs + j
        // where DCR writes (i*bs + j)*C + c: run DCR, then permute the channels.
        if !to_space {
            match n.attrs.string_or("mode", "DCR")?.as_str() {
                "DCR" => {}
                "CRD" => {
                    let c = u64::from(dims[1]);
                    if c == 0 {
                        return unsupported(
                            "SpaceToDepth CRD needs the channel count at compile time",
                        );
                    }
                    let bb = u64::try_from(bs * bs).unwrap_or(u64::MAX);
                    let c_out = c.saturating_mul(bb);
                    self.budget
                        .generate(c_out as usize, nnc_formats::tensor::DataType::I32)?;
                    let idx: Vec<i32> =
                        (0..c_out).map(|k| ((k % bb) * c + k / bb) as i32).collect();
                    let ax = self.i32_const(1);
                    let iv = self.i32_vector(&idx);
                    y = self.emit(n, OperationType::Gather, vec![y, ax, iv])?;
                }
                other => return invalid(format!("mode must be DCR or CRD, got '{other}'")),
            }
        }
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }
}

impl Lowerer<'_> {
    /// EyeLike: a constant of the input's (known, 2-D) shape with ones on diagonal `k`,
    /// of the `dtype` attribute's type or the input's.
    pub(super) fn eye_like(&mut self, n: &Node) -> NResult<()> {
        let dims = match self.required(n, 0)? {
            Value::Const(c) => c.shape.iter().map(|&d| d as u32).collect(),
            Value::Tensor(t) => self.known_dims(t)?,
        };
        let input_dtype = match self.required(n, 0)? {
            Value::Const(c) => c.dtype,
            Value::Tensor(t) => t.dtype,
        };
        let [rows, cols] = dims[..] else {
            return invalid(format!("EyeLike needs a 2-D input, got {dims:?}"));
        };
        let dtype = match n.attrs.int("dtype")? {
            Some(code) => super::super::tensor::host_data_type(code as i32).ok_or_else(|| {
                NodeError::Unsupported(format!("EyeLike of type code {code} is not supported"))
            })?,
            None => input_dtype,
        };
        let k = n.attrs.int_or("k", 0)?;
        let count = rows as usize * cols as usize;
        self.budget.generate(count, DataType::F64)?;
        let mut values = vec![0.0; count];
        for r in 0..i64::from(rows) {
            let c = r + k;
            if (0..i64::from(cols)).contains(&c) {
                values[(r * i64::from(cols) + c) as usize] = 1.0;
            }
        }
        let eye = constant::from_f64s(dtype, vec![rows as usize, cols as usize], &values);
        self.set_const(n, 0, eye)
    }
}
