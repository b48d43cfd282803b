//! Shape and data-movement operators, constants, and shape arithmetic.

use std::rc::Rc;

use nnc_formats::nn::OperationType;
use nnc_formats::tensor::DataType;

use super::super::constant::{self, ConstTensor};
use super::super::tensor::tensor_to_host;
use super::{
    Lowerer, NResult, Node, NodeError, TensorValue, Value, axis, ints_from_attr_or_input, invalid,
    unsupported,
};

fn to_usize_dims(dims: &[u32]) -> Vec<usize> {
    dims.iter().map(|&d| d as usize).collect()
}

impl Lowerer<'_> {
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
            if self.output_used(n, 1) {
                return unsupported("Dropout's mask output is not supported");
            }
            if let Some(c) = self.const_input(n, 2).ok().flatten()
                && constant::to_i64s(&c).first().copied().unwrap_or(0) != 0
            {
                return unsupported("training-mode Dropout is not supported");
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
        self.set_const(n, 0, value);
        Ok(())
    }

    pub(super) fn shape_of(&mut self, n: &Node) -> NResult<()> {
        let v = self.required(n, 0)?;
        let dims = self.shape_of_value(&v);
        if dims.contains(&0) {
            return unsupported(
                "Shape of a tensor with dynamic dimensions; fix them with --input-shape",
            );
        }
        let dims: Vec<i64> = dims.iter().map(|&d| i64::from(d)).collect();
        if n.op() == "Size" {
            self.set_const(n, 0, constant::i64_tensor(vec![], &[dims.iter().product()]));
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
        self.set_const(n, 0, constant::i64_tensor(vec![slice.len()], &slice));
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
        self.set_const(n, 0, constant::fill(&value, dims)?);
        Ok(())
    }

    pub(super) fn range(&mut self, n: &Node) -> NResult<()> {
        let start = self.required_const(n, 0)?;
        let limit = self.required_const(n, 1)?;
        let delta = self.required_const(n, 2)?;
        let (s, l, d) = (
            constant::to_f64s(&start)[0..1]
                .first()
                .copied()
                .unwrap_or(0.0),
            constant::to_f64s(&limit).first().copied().unwrap_or(0.0),
            constant::to_f64s(&delta).first().copied().unwrap_or(0.0),
        );
        if d == 0.0 {
            return invalid("Range delta is 0");
        }
        let count = ((l - s) / d).ceil().max(0.0);
        if count > constant::MAX_CONST_ELEMENTS as f64 {
            return invalid(format!("Range of {count} elements is too large"));
        }
        let values: Vec<f64> = (0..count as usize).map(|i| s + i as f64 * d).collect();
        self.set_const(
            n,
            0,
            constant::from_f64s(start.dtype, vec![values.len()], &values),
        );
        Ok(())
    }

    pub(super) fn reshape(&mut self, n: &Node) -> NResult<()> {
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
            Some(in_dims.iter().map(|&d| u64::from(d)).product())
        };
        if let Some(total) = in_count {
            let known: u64 = dims.iter().filter(|&&d| d > 0).map(|&d| d as u64).product();
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
                );
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
            return unsupported(
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
                self.set_const(n, 0, t);
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
            return unsupported("reshape with more than one dynamic dimension; use --input-shape");
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
            let c = constant::concat(&refs, a)?;
            self.set_const(n, 0, c);
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

    pub(super) fn split(&mut self, n: &Node) -> NResult<()> {
        let data = self.required(n, 0)?;
        let dims = self.shape_of_value(&data);
        let a = axis(n.attrs.int_or("axis", 0)?, dims.len())?;
        let outputs = n.proto.output.len();
        let extent = dims[a];
        if extent == 0 {
            return unsupported("Split along a dynamic dimension; use --input-shape");
        }
        let sizes: Vec<u32> = match ints_from_attr_or_input(self, n, "split", 1)? {
            Some(s) => s
                .iter()
                .map(|&v| {
                    u32::try_from(v).map_err(|_| NodeError::Invalid(format!("split size {v}")))
                })
                .collect::<NResult<_>>()?,
            None => {
                let parts = n
                    .attrs
                    .int("num_outputs")?
                    .map(|v| v as usize)
                    .unwrap_or(outputs);
                if parts == 0 {
                    return invalid("Split into zero parts");
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
                let part = constant::slice(c, &ranges)?;
                self.set_const(n, k, part);
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

    pub(super) fn slice(&mut self, n: &Node) -> NResult<()> {
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
            None => (0..starts.len()).collect(),
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
                return unsupported("Slice along a dynamic dimension; use --input-shape");
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
            let count = if step > 0 {
                ((end - start).max(0) + step - 1) / step
            } else {
                ((start - end).max(0) + (-step) - 1) / (-step)
            };
            if count == 0 {
                return unsupported("slices producing empty tensors are not supported");
            }
            ranges[a] = (start, step, count as usize);
        }
        match data {
            Value::Const(c) => {
                let t = constant::slice(&c, &ranges)?;
                self.set_const(n, 0, t);
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
                    let inputs = vec![
                        tv.operand,
                        self.i32_vector(&begin),
                        self.i32_vector(&end),
                        self.i32_vector(&stride),
                        self.i32_const(begin_mask),
                        self.i32_const(end_mask),
                        self.i32_const(0),
                    ];
                    self.emit(n, OperationType::StridedSlice, inputs)?
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
            let t = constant::gather(d, i, a as i64)?;
            self.set_const(n, 0, t);
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
                    return unsupported(
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

    pub(super) fn pad(&mut self, n: &Node) -> NResult<()> {
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
        let float = x.dtype == DataType::F32;
        let out = match mode.as_str() {
            "constant" if value == 0.0 => self.emit(n, OperationType::Pad, vec![x.operand, p])?,
            "constant" => {
                let v = if float {
                    self.f32_const(value as f32)
                } else {
                    self.i32_const(value as i32)
                };
                self.emit(n, OperationType::PadV2, vec![x.operand, p, v])?
            }
            "reflect" => {
                let m = self.i32_const(0);
                self.emit(n, OperationType::MirrorPad, vec![x.operand, p, m])?
            }
            "edge" | "wrap" => {
                return unsupported(format!("Pad mode '{mode}' has no NN operation"));
            }
            other => return invalid(format!("unknown Pad mode '{other}'")),
        };
        self.set_tensor(n, 0, out, x.dtype, false);
        Ok(())
    }

    pub(super) fn tile(&mut self, n: &Node) -> NResult<()> {
        let data = self.required(n, 0)?;
        let repeats = constant::to_i64s(&*self.required_const(n, 1)?);
        if repeats.iter().any(|&r| r < 1) {
            return unsupported("Tile repeats below 1 (empty outputs) are not supported");
        }
        if let Value::Const(c) = &data {
            let reps: Vec<usize> = repeats.iter().map(|&r| r as usize).collect();
            let t = constant::tile(c, &reps)?;
            self.set_const(n, 0, t);
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
        let data = self.required(n, 0)?;
        let shape: Vec<usize> = constant::to_i64s(&*self.required_const(n, 1)?)
            .into_iter()
            .map(|d| {
                usize::try_from(d)
                    .map_err(|_| NodeError::Invalid(format!("negative dimension {d}")))
            })
            .collect::<NResult<_>>()?;
        if let Value::Const(c) = &data {
            let t = constant::broadcast_to(c, &shape)?;
            self.set_const(n, 0, t);
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
            let bb = (bs * bs) as u32;
            let c_out = c_in / bb;
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
        let y = self.to_nchw(n, yh)?;
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }
}
