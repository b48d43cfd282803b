//! Reductions, ArgMax/ArgMin and TopK.

use nnc_formats::nn::ops::Reduce;
use nnc_formats::nn::{OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::super::constant;
use super::{Lowerer, NResult, Node, NodeError, TensorValue, Value, axis, invalid, unsupported};

/// The axes of a reduction: known at compile time, or a run-time tensor of `count` axes.
enum AxesArg {
    Known(Vec<i32>),
    Runtime { operand: u32, count: usize },
}

impl AxesArg {
    fn count(&self) -> usize {
        match self {
            AxesArg::Known(v) => v.len(),
            AxesArg::Runtime { count, .. } => *count,
        }
    }
}

impl Lowerer<'_> {
    /// The reduced axes of a Reduce* node (sorted, normalized), or `None` for the
    /// identity (`noop_with_empty_axes` with no axes).
    fn reduce_axes(&self, n: &Node, rank: usize) -> NResult<Option<Vec<usize>>> {
        let axes = if let Some(a) = n.attrs.ints("axes")? {
            Some(a)
        } else {
            self.const_input(n, 1)?.map(|c| constant::to_i64s(&c))
        };
        let noop = n.attrs.int_or("noop_with_empty_axes", 0)? != 0;
        let mut axes: Vec<usize> = match axes {
            Some(a) if !a.is_empty() => a.iter().map(|&x| axis(x, rank)).collect::<NResult<_>>()?,
            _ if noop => return Ok(None),
            _ => (0..rank).collect(),
        };
        axes.sort_unstable();
        axes.dedup();
        Ok(Some(axes))
    }

    pub(super) fn reduce(&mut self, n: &Node) -> NResult<()> {
        let op = n.op().to_string();
        let data = self.required(n, 0)?;
        let rank = self.shape_of_value(&data).len();
        let keep = n.attrs.int_or("keepdims", 1)? != 0;
        // Axes given as a run-time tensor (opset 18+ for most, 13+ for ReduceSum).
        let runtime_axes = if n.attrs.ints("axes")?.is_none() {
            match self.input(n, 1)? {
                Some(Value::Tensor(tv)) => Some(tv),
                _ => None,
            }
        } else {
            None
        };
        let axes_arg = if let Some(tv) = runtime_axes {
            let count = match self.dims(tv).as_slice() {
                [k] if *k != 0 => *k as usize,
                _ => return unsupported("reduction axes of unknown length"),
            };
            if count > rank {
                return invalid(format!("{count} axes for a rank-{rank} input"));
            }
            AxesArg::Runtime {
                operand: tv.operand,
                count,
            }
        } else {
            let Some(axes) = self.reduce_axes(n, rank)? else {
                return self.identity_value(n, data);
            };
            if let Value::Const(c) = &data {
                let f = |g: &[f64]| -> f64 {
                    match op.as_str() {
                        "ReduceMean" => g.iter().sum::<f64>() / g.len().max(1) as f64,
                        "ReduceSum" => g.iter().sum(),
                        "ReduceMax" => g.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                        "ReduceMin" => g.iter().copied().fold(f64::INFINITY, f64::min),
                        "ReduceProd" => g.iter().product(),
                        "ReduceL1" => g.iter().map(|v| v.abs()).sum(),
                        "ReduceL2" => g.iter().map(|v| v * v).sum::<f64>().sqrt(),
                        "ReduceSumSquare" => g.iter().map(|v| v * v).sum(),
                        "ReduceLogSum" => g.iter().sum::<f64>().ln(),
                        _ => g.iter().map(|v| v.exp()).sum::<f64>().ln(),
                    }
                };
                let t = constant::reduce(c, &axes, keep, f)?;
                self.set_const(n, 0, t)?;
                return Ok(());
            }
            AxesArg::Known(axes.iter().map(|&a| a as i32).collect())
        };
        let x = match data {
            Value::Tensor(x) => x,
            Value::Const(_) => self.tensor(n, 0)?,
        };
        let scalar = !keep && axes_arg.count() == rank;
        if x.dtype == DataType::Bool && matches!(op.as_str(), "ReduceMax" | "ReduceMin") {
            // On booleans max is "any" and min is "all".
            let nn = if op == "ReduceMax" {
                OperationType::ReduceAny
            } else {
                OperationType::ReduceAll
            };
            let y = self.reduce_emit(n, nn, x, &axes_arg, keep)?;
            self.set_tensor(n, 0, y.operand, DataType::Bool, scalar);
            return Ok(());
        }
        if !super::is_float(x.dtype) {
            return unsupported(format!(
                "{op} on {} tensors is not supported (the NN set reduces float tensors only)",
                x.dtype
            ));
        }
        let axes_i32 = &axes_arg;
        let y = match op.as_str() {
            "ReduceMean" => self.reduce_emit(n, OperationType::Mean, x, axes_i32, keep)?,
            "ReduceSum" => self.reduce_emit(n, OperationType::ReduceSum, x, axes_i32, keep)?,
            "ReduceMax" => self.reduce_emit(n, OperationType::ReduceMax, x, axes_i32, keep)?,
            "ReduceMin" => self.reduce_emit(n, OperationType::ReduceMin, x, axes_i32, keep)?,
            "ReduceProd" => self.reduce_emit(n, OperationType::ReduceProd, x, axes_i32, keep)?,
            "ReduceL1" => {
                let a = self.unary_emit(n, OperationType::Abs, x)?;
                self.reduce_emit(n, OperationType::ReduceSum, a, axes_i32, keep)?
            }
            "ReduceL2" | "ReduceSumSquare" => {
                let act = self.i32_const(0);
                let sq = self.emit(n, OperationType::Mul, vec![x.operand, x.operand, act])?;
                let s = self.reduce_emit(
                    n,
                    OperationType::ReduceSum,
                    TensorValue { operand: sq, ..x },
                    axes_i32,
                    keep,
                )?;
                if op == "ReduceL2" {
                    self.unary_emit(n, OperationType::Sqrt, s)?
                } else {
                    s
                }
            }
            "ReduceLogSum" => {
                let s = self.reduce_emit(n, OperationType::ReduceSum, x, axes_i32, keep)?;
                self.unary_emit(n, OperationType::Log, s)?
            }
            _ => {
                // log(sum(exp(x))) = m + log(sum(exp(x - m))) with m = max(x): no overflow.
                // Infinite maxima would give inf - inf = NaN where ONNX gives inf: rare, but
                // exact only for finite inputs, like every float implementation of it.
                let m = self.reduce_emit(n, OperationType::ReduceMax, x, axes_i32, true)?;
                let act = self.i32_const(0);
                let shifted = self.emit(n, OperationType::Sub, vec![x.operand, m.operand, act])?;
                let e = self.unary_emit(
                    n,
                    OperationType::Exp,
                    TensorValue {
                        operand: shifted,
                        ..x
                    },
                )?;
                let s = self.reduce_emit(n, OperationType::ReduceSum, e, axes_i32, keep)?;
                let l = self.unary_emit(n, OperationType::Log, s)?;
                let m = if keep {
                    m.operand
                } else if let AxesArg::Known(_) = axes_i32 {
                    let m_shape = self.model.main.operands[l.operand as usize]
                        .dimensions
                        .clone();
                    self.reshape_to(n, m.operand, &m_shape)?
                } else {
                    // Drop the kept unit axes of m: the same reduction with keep_dims off
                    // of a tensor that has only unit dims there.
                    self.reduce_emit(n, OperationType::ReduceMax, m, axes_i32, false)?
                        .operand
                };
                let act = self.i32_const(0);
                let out = self.emit(n, OperationType::Add, vec![l.operand, m, act])?;
                TensorValue { operand: out, ..x }
            }
        };
        self.set_tensor(n, 0, y.operand, DataType::F32, scalar);
        Ok(())
    }

    /// Emits reduction `op` of `x` over the axes operand `axes`, its parameters written
    /// by [`Reduce::encode`] (which knows MEAN's keep_dims is INT32, the others' BOOL).
    pub(super) fn reduce_op(
        &mut self,
        n: &Node,
        op: OperationType,
        x: u32,
        axes: u32,
        keep_dims: bool,
    ) -> NResult<u32> {
        let mut inputs = vec![x];
        inputs.extend(Reduce { axes, keep_dims }.encode(op, &mut self.model));
        self.emit(n, op, inputs)
    }

    fn reduce_emit(
        &mut self,
        n: &Node,
        op: OperationType,
        x: TensorValue,
        axes: &AxesArg,
        keep: bool,
    ) -> NResult<TensorValue> {
        let a = match axes {
            AxesArg::Known(v) => self.i32_vector(v),
            AxesArg::Runtime { operand, .. } => *operand,
        };
        let out = self.reduce_op(n, op, x.operand, a, keep)?;
        let operand = &mut self.model.main.operands[out as usize];
        if operand.dimensions.is_empty() {
            // Run-time axes without keep_dims: inference cannot tell the rank, but ONNX
            // rejects repeated axes, so it is the input rank less the axis count (a
            // repeated axis at run time then fails the executor's shape check).
            let r = self.rank(x).saturating_sub(axes.count());
            self.model.main.operands[out as usize].dimensions = vec![0; r.max(1)];
        }
        Ok(TensorValue { operand: out, ..x })
    }

    pub(super) fn arg_reduce(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        let t = self.operand_type(x);
        if !matches!(t, OperandType::TensorFloat32 | OperandType::TensorInt32) {
            return unsupported(format!(
                "{} on {} tensors is not supported",
                n.op(),
                x.dtype
            ));
        }
        let dims = self.dims(x);
        let rank = dims.len();
        if rank == 0 {
            return invalid(format!("{} needs an input of rank >= 1", n.op()));
        }
        let a = axis(n.attrs.int_or("axis", 0)?, rank)?;
        let keep = n.attrs.int_or("keepdims", 1)? != 0;
        let last = n.attrs.int_or("select_last_index", 0)? != 0;
        let op = if n.op() == "ArgMax" {
            OperationType::Argmax
        } else {
            OperationType::Argmin
        };
        let mut input = x.operand;
        if last {
            // The last extreme index is (n - 1) minus the first one in the reversed tensor.
            if dims[a] == 0 {
                return unsupported("select_last_index along a dynamic dimension");
            }
            let av = self.i32_vector(&[a as i32]);
            input = self.emit(n, OperationType::Reverse, vec![input, av])?;
        }
        let ax = self.i32_const(a as i32);
        let mut y = self.emit(n, op, vec![input, ax])?;
        if last {
            let top = self.scalar_tensor(OperandType::TensorInt32, f64::from(dims[a] - 1));
            let act = self.i32_const(0);
            y = self.emit(n, OperationType::Sub, vec![top, y, act])?;
        }
        let mut out_dims: Vec<u32> = dims.clone();
        if keep {
            out_dims[a] = 1;
        } else {
            out_dims.remove(a);
        }
        let scalar = out_dims.is_empty();
        if keep {
            y = self.reshape_to(n, y, &out_dims)?;
        }
        self.set_tensor(n, 0, y, DataType::I64, scalar);
        Ok(())
    }

    pub(super) fn topk(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        let t = self.operand_type(x);
        if !matches!(t, OperandType::TensorFloat32 | OperandType::TensorInt32) {
            return unsupported(format!("TopK on {} tensors is not supported", x.dtype));
        }
        let k = if self.opset < 10 {
            n.attrs
                .int("k")?
                .ok_or_else(|| NodeError::Invalid("TopK needs 'k'".into()))?
        } else {
            if let Some(Value::Tensor(_)) = self.input(n, 1)? {
                return Err(self.needs_constant(
                    n,
                    &[1],
                    "TopK with a run-time k: TOPK_V2 takes k as an INT32 scalar, and no NN \
                     operation turns a tensor into a scalar",
                ));
            }
            constant::to_i64s(&*self.required_const(n, 1)?)
                .first()
                .copied()
                .ok_or_else(|| NodeError::Invalid("k is empty".into()))?
        };
        let rank = self.rank(x);
        let a = axis(n.attrs.int_or("axis", -1)?, rank)?;
        let largest = n.attrs.int_or("largest", 1)? != 0;
        if k < 1 || k > i64::from(i32::MAX) {
            return unsupported(format!("TopK with k = {k} is not supported"));
        }
        let perm: Vec<i32> = {
            let mut p: Vec<i32> = (0..rank as i32).collect();
            p.swap(a, rank - 1);
            p
        };
        let moved = a != rank - 1;
        let mut input = x.operand;
        if moved {
            input = self.transpose_op(n, input, &perm)?;
        }
        if !largest {
            if t != OperandType::TensorFloat32 {
                return unsupported("TopK with largest=0 on integers is not supported");
            }
            input = self.emit(n, OperationType::Neg, vec![input])?;
        }
        let kv = self.i32_const(k as i32);
        let outs = self.emit_raw(
            OperationType::TopkV2,
            vec![input, kv],
            vec![None, None],
            &n.label,
        )?;
        let (mut values, mut indices) = (outs[0], outs[1]);
        if !largest {
            values = self.emit(n, OperationType::Neg, vec![values])?;
        }
        if moved {
            // The swap permutation is its own inverse.
            values = self.transpose_op(n, values, &perm)?;
            indices = self.transpose_op(n, indices, &perm)?;
        }
        self.set_tensor(n, 0, values, x.dtype, false);
        self.set_tensor(n, 1, indices, DataType::I64, false);
        Ok(())
    }
}
