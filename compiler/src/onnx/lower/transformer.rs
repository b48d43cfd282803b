//! The operators of transformer models: LayerNormalization, Gelu, Erf (nnc extension
//! operations with fused kernels), IsNaN and IsInf (exact NN comparisons), GatherElements
//! and GatherND (extension operations), Trilu (a SELECT against a constant mask), and the
//! com.microsoft operators ONNX Runtime's transformer optimizer writes (Gelu, FastGelu,
//! BiasGelu, SkipLayerNormalization).

use nnc_formats::nn::ops::LayerNormalization;
use nnc_formats::nn::{OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::super::constant;
use super::{Lowerer, NResult, Node, NodeError, TensorValue, Value, axis, invalid, unsupported};

impl Lowerer<'_> {
    /// A LayerNormalization parameter (scale or bias) as an operand of exactly the
    /// normalized dimensions: constants are broadcast at compile time; a run-time
    /// parameter must already have those dimensions.
    fn normalized_param(&mut self, n: &Node, i: usize, normalized: &[u32]) -> NResult<u32> {
        match self.required(n, i)? {
            Value::Const(c) => {
                let shape: Vec<usize> = normalized.iter().map(|&d| d as usize).collect();
                let full = constant::broadcast_to(&c, &shape, &self.budget)?;
                if full.shape != shape {
                    return invalid(format!(
                        "input {i} of shape {:?} does not broadcast to the normalized dimensions \
                         {normalized:?}",
                        c.shape
                    ));
                }
                Ok(self
                    .model
                    .add_f32_tensor(normalized.to_vec(), &constant::to_f32s(&full)))
            }
            Value::Tensor(tv) => {
                self.require_float(n, tv)?;
                if self.dims(tv) != normalized {
                    return unsupported(format!(
                        "a run-time input {i} must have the normalized dimensions {normalized:?}, \
                         got {:?}",
                        self.dims(tv)
                    ));
                }
                Ok(tv.operand)
            }
        }
    }

    /// LAYER_NORMALIZATION of `x` over `axis..`, with `scale` (input `scale_at`) and an
    /// optional bias (input `bias_at`); returns the output and, when `stats`, the mean
    /// and inverse standard deviation too.
    fn emit_layer_norm(
        &mut self,
        n: &Node,
        x: TensorValue,
        first_axis: i64,
        epsilon: f32,
        (scale_at, bias_at): (usize, Option<usize>),
        stats: bool,
    ) -> NResult<Vec<u32>> {
        self.require_float(n, x)?;
        let dims = self.known_dims(x)?;
        if x.scalar || dims.is_empty() {
            return invalid("needs an input of rank 1 or more");
        }
        let a = axis(first_axis, dims.len())?;
        let normalized = dims[a..].to_vec();
        let gamma = self.normalized_param(n, scale_at, &normalized)?;
        let beta = match bias_at.filter(|&i| self.input_name(n, i).is_some()) {
            Some(i) => self.normalized_param(n, i, &normalized)?,
            None => {
                let shape: Vec<usize> = normalized.iter().map(|&d| d as usize).collect();
                self.budget.room(&shape, DataType::F32)?;
                let count: usize = shape.iter().product();
                self.budget.generate(count, DataType::F32)?;
                self.model
                    .add_f32_tensor(normalized.clone(), &vec![0.0; count])
            }
        };
        if !(epsilon.is_finite() && epsilon >= 0.0) {
            return invalid(format!("epsilon must be >= 0, got {epsilon}"));
        }
        let params = LayerNormalization {
            epsilon,
            axis: a as i32,
        };
        let mut inputs = vec![x.operand, gamma, beta];
        inputs.extend(params.encode(&mut self.model));
        self.emit_raw(
            OperationType::LayerNormalization,
            inputs,
            vec![None; if stats { 3 } else { 1 }],
            &n.label,
        )
    }

    pub(super) fn layer_norm(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        let stash = n.attrs.int_or("stash_type", 1)?;
        if stash != 1 {
            return unsupported(format!(
                "stash_type {stash} (only 1, float32 statistics, is supported)"
            ));
        }
        let stats = self.output_used(n, 1) || self.output_used(n, 2);
        let outs = self.emit_layer_norm(
            n,
            x,
            n.attrs.int_or("axis", -1)?,
            n.attrs.float_or("epsilon", 1e-5)?,
            (1, Some(2)),
            stats,
        )?;
        for (i, &o) in outs.iter().enumerate() {
            self.set_tensor(n, i, o, DataType::F32, false);
        }
        Ok(())
    }

    /// RMSNormalization (opset 23): `x / sqrt(mean(x^2 over axis..) + epsilon) * scale`, as
    /// NN operations (MUL, MEAN with kept dimensions, ADD, RSQRT, MUL, MUL): exact up to
    /// float32 rounding, and the MEAN kernel accumulates in f64.
    pub(super) fn rms_norm(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let stash = n.attrs.int_or("stash_type", 1)?;
        if stash != 1 {
            return unsupported(format!(
                "stash_type {stash} (only 1, float32 statistics, is supported)"
            ));
        }
        let r = self.rank(x);
        if x.scalar || r == 0 {
            return invalid("RMSNormalization needs an input of rank 1 or more");
        }
        let a = axis(n.attrs.int_or("axis", -1)?, r)?;
        let epsilon = n.attrs.float_or("epsilon", 1e-5)?;
        let squares = self.arith(n, OperationType::Mul, x.operand, x.operand)?;
        let axes: Vec<i32> = (a..r).map(|d| d as i32).collect();
        let axes = self.i32_vector(&axes);
        let mean = self.reduce_op(n, OperationType::Mean, squares, axes, true)?;
        let eps = self.scalar_tensor(OperandType::TensorFloat32, f64::from(epsilon));
        let shifted = self.arith(n, OperationType::Add, mean, eps)?;
        let inv = self.emit(n, OperationType::Rsqrt, vec![shifted])?;
        let normalized = self.arith(n, OperationType::Mul, x.operand, inv)?;
        let scale = self.tensor(n, 1)?;
        let y = self.arith(n, OperationType::Mul, normalized, scale.operand)?;
        self.set_output(n, 0, Value::Tensor(TensorValue { operand: y, ..x }));
        Ok(())
    }

    /// GroupNormalization (opset 21): the channels of each instance split into groups,
    /// each group normalized as one LAYER_NORMALIZATION lane (a reshape to
    /// [N, groups, rest]), then the per-channel scale and bias.
    pub(super) fn group_norm(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        if n.attrs.int_or("stash_type", 1)? != 1 {
            return unsupported("stash_type other than 1 (float32 statistics)");
        }
        let dims = self.known_dims(x)?;
        if dims.len() < 2 {
            return invalid("GroupNormalization needs an input of rank 2 or more");
        }
        let groups = n
            .attrs
            .int("num_groups")?
            .ok_or_else(|| NodeError::Invalid("num_groups is required".into()))?;
        let (batch, channels) = (dims[0], dims[1]);
        let groups = u32::try_from(groups)
            .ok()
            .filter(|&g| g >= 1 && channels % g == 0)
            .ok_or_else(|| {
                NodeError::Invalid(format!(
                    "num_groups {groups} does not divide the {channels} channels"
                ))
            })?;
        let spatial: u64 = dims[2..].iter().map(|&d| u64::from(d)).product();
        let rest = u32::try_from(u64::from(channels / groups) * spatial)
            .map_err(|_| NodeError::Invalid("the groups are too large".into()))?;
        let grouped = self.reshape_to(n, x.operand, &[batch, groups, rest])?;
        self.budget
            .generate(2 * rest as usize, nnc_formats::tensor::DataType::F32)?;
        let ones = self
            .model
            .add_f32_tensor(vec![rest], &vec![1.0; rest as usize]);
        let zeros = self
            .model
            .add_f32_tensor(vec![rest], &vec![0.0; rest as usize]);
        let params = LayerNormalization {
            epsilon: n.attrs.float_or("epsilon", 1e-5)?,
            axis: 2,
        };
        let mut inputs = vec![grouped, ones, zeros];
        inputs.extend(params.encode(&mut self.model));
        let normalized = self.emit(n, OperationType::LayerNormalization, inputs)?;
        let back = self.reshape_to(n, normalized, &dims)?;
        // Scale and bias are per channel: [C] becomes [C, 1, ...] to broadcast on axis 1.
        let mut per_channel = vec![channels];
        per_channel.extend(std::iter::repeat_n(1, dims.len() - 2));
        let scale = self.tensor(n, 1)?;
        let scale = self.reshape_to(n, scale.operand, &per_channel)?;
        let bias = self.tensor(n, 2)?;
        let bias = self.reshape_to(n, bias.operand, &per_channel)?;
        let scaled = self.arith(n, OperationType::Mul, back, scale)?;
        let y = self.arith(n, OperationType::Add, scaled, bias)?;
        self.set_output(n, 0, Value::Tensor(TensorValue { operand: y, ..x }));
        Ok(())
    }

    /// MeanVarianceNormalization: `(x - mean) / sqrt(variance + 1e-9)` over `axes`
    /// (default 0, 2, 3), as MEAN, SUB, MUL, MEAN, ADD, SQRT and DIV.
    pub(super) fn mean_variance_norm(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let r = self.rank(x);
        let axes = n.attrs.ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
        let axes: Vec<i32> = axes
            .iter()
            .map(|&a| axis(a, r).map(|a| a as i32))
            .collect::<NResult<_>>()?;
        let axes = self.i32_vector(&axes);
        let mean = self.reduce_op(n, OperationType::Mean, x.operand, axes, true)?;
        let centered = self.arith(n, OperationType::Sub, x.operand, mean)?;
        let squares = self.arith(n, OperationType::Mul, centered, centered)?;
        let variance = self.reduce_op(n, OperationType::Mean, squares, axes, true)?;
        let eps = self.scalar_tensor(OperandType::TensorFloat32, 1e-9);
        let shifted = self.arith(n, OperationType::Add, variance, eps)?;
        let std = self.emit(n, OperationType::Sqrt, vec![shifted])?;
        let y = self.arith(n, OperationType::Div, centered, std)?;
        self.set_output(n, 0, Value::Tensor(TensorValue { operand: y, ..x }));
        Ok(())
    }

    /// com.microsoft SkipLayerNormalization: LayerNorm(input + skip (+ bias)) over the
    /// last axis; outputs the normalized value, mean, inverse standard deviation and the
    /// sum that was normalized.
    pub(super) fn skip_layer_norm(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        let skip = self.tensor(n, 1)?;
        self.require_float(n, x)?;
        let mut sum = self.arith(n, OperationType::Add, x.operand, skip.operand)?;
        if self.input_name(n, 4).is_some() {
            let bias = self.tensor(n, 4)?;
            sum = self.arith(n, OperationType::Add, sum, bias.operand)?;
        }
        let summed = TensorValue { operand: sum, ..x };
        let stats = self.output_used(n, 1) || self.output_used(n, 2);
        let outs = self.emit_layer_norm(
            n,
            summed,
            -1,
            n.attrs.float_or("epsilon", 1e-12)?,
            (2, Some(3)),
            stats,
        )?;
        for (i, &o) in outs.iter().enumerate() {
            self.set_tensor(n, i, o, DataType::F32, false);
        }
        if self.output_used(n, 3) {
            self.set_tensor(n, 3, sum, DataType::F32, x.scalar);
        }
        Ok(())
    }

    fn emit_gelu(&mut self, n: &Node, x: TensorValue, approximate: bool) -> NResult<()> {
        self.require_float(n, x)?;
        let flag = self.bool_const(approximate);
        let y = self.emit(n, OperationType::Gelu, vec![x.operand, flag])?;
        self.set_output(n, 0, Value::Tensor(TensorValue { operand: y, ..x }));
        Ok(())
    }

    /// ONNX Gelu (opset 20): `approximate` is "none" or "tanh".
    pub(super) fn gelu(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        let approximate = match n.attrs.string_or("approximate", "none")?.as_str() {
            "none" => false,
            "tanh" => true,
            other => {
                return invalid(format!(
                    "approximate must be 'none' or 'tanh', got '{other}'"
                ));
            }
        };
        self.emit_gelu(n, x, approximate)
    }

    /// com.microsoft Gelu (exact), FastGelu (tanh form, optional bias added first) and
    /// BiasGelu (bias added, exact).
    pub(super) fn microsoft_gelu(&mut self, n: &Node) -> NResult<()> {
        let mut x = self.tensor(n, 0)?;
        if self.input_name(n, 1).is_some() {
            let bias = self.tensor(n, 1)?;
            let sum = self.arith(n, OperationType::Add, x.operand, bias.operand)?;
            x = TensorValue { operand: sum, ..x };
        }
        self.emit_gelu(n, x, n.op() == "FastGelu")
    }

    pub(super) fn erf(&mut self, n: &Node) -> NResult<()> {
        if let Some(Value::Const(c)) = self.input(n, 0)? {
            let folded = constant::unary(&c, libm::erf);
            return self.set_const(n, 0, folded);
        }
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let y = self.emit(n, OperationType::Erf, vec![x.operand])?;
        self.set_output(n, 0, Value::Tensor(TensorValue { operand: y, ..x }));
        Ok(())
    }

    /// IsNaN as `x != x` and IsInf as comparisons with the infinities: exact in the NN set.
    pub(super) fn is_nan_inf(&mut self, n: &Node) -> NResult<()> {
        let nan = n.op() == "IsNaN";
        let (neg, pos) = if nan {
            (false, false)
        } else {
            (
                n.attrs.int_or("detect_negative", 1)? != 0,
                n.attrs.int_or("detect_positive", 1)? != 0,
            )
        };
        if let Some(Value::Const(c)) = self.input(n, 0)? {
            let test = move |v: f64| {
                let hit = if nan {
                    v.is_nan()
                } else {
                    (pos && v == f64::INFINITY) || (neg && v == f64::NEG_INFINITY)
                };
                f64::from(u8::from(hit))
            };
            let folded = constant::cast(&constant::unary(&c, test), DataType::Bool);
            return self.set_const(n, 0, folded);
        }
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let t = self.operand_type(x);
        let y = if nan {
            self.emit(n, OperationType::NotEqual, vec![x.operand, x.operand])?
        } else {
            let mut found = None;
            for (wanted, value) in [(pos, f64::INFINITY), (neg, f64::NEG_INFINITY)] {
                if !wanted {
                    continue;
                }
                let inf = self.scalar_tensor(t, value);
                let hit = self.emit(n, OperationType::Equal, vec![x.operand, inf])?;
                found = Some(match found {
                    None => hit,
                    Some(prev) => self.emit(n, OperationType::LogicalOr, vec![prev, hit])?,
                });
            }
            match found {
                Some(y) => y,
                None => {
                    // Neither infinity is looked for: every element is false.
                    let zero = self.scalar_tensor(t, 0.0);
                    let never = self.emit(n, OperationType::Equal, vec![x.operand, zero])?;
                    let no = self.model.add_constant(
                        nnc_formats::nn::Operand::new(OperandType::TensorBool8, vec![1]),
                        &[0],
                    );
                    self.emit(n, OperationType::LogicalAnd, vec![never, no])?
                }
            }
        };
        self.set_tensor(n, 0, y, DataType::Bool, x.scalar);
        Ok(())
    }

    /// Integer indices as a TENSOR_INT32 operand (ONNX int64 computes as int32).
    pub(super) fn index_operand(&mut self, n: &Node, i: usize) -> NResult<TensorValue> {
        let idx = self.tensor(n, i)?;
        if self.operand_type(idx) != OperandType::TensorInt32 {
            return invalid(format!("input {i} (indices) must be an integer tensor"));
        }
        Ok(idx)
    }

    pub(super) fn gather_elements(&mut self, n: &Node) -> NResult<()> {
        let data = self.tensor(n, 0)?;
        let idx = self.index_operand(n, 1)?;
        let r = self.rank(data);
        if data.scalar || r == 0 {
            return invalid("GatherElements needs data of rank 1 or more");
        }
        let a = axis(n.attrs.int_or("axis", 0)?, r)?;
        let ax = self.i32_const(a as i32);
        let y = self.emit(
            n,
            OperationType::GatherElements,
            vec![data.operand, ax, idx.operand],
        )?;
        self.set_tensor(n, 0, y, data.dtype, false);
        Ok(())
    }

    /// ReverseSequence: along the time axis, each batch entry's first `len` steps
    /// reversed, the rest kept. A GATHER_ELEMENTS along the time axis by the index
    /// `t < len ? len - 1 - t : t`, computed from the (run-time or constant) lengths and
    /// tiled over the trailing dimensions.
    pub(super) fn reverse_sequence(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        let dims = self.known_dims(x)?;
        let r = dims.len();
        if r < 2 {
            return invalid("ReverseSequence needs an input of rank 2 or more");
        }
        let time = axis(n.attrs.int_or("time_axis", 0)?, r)?;
        let batch = axis(n.attrs.int_or("batch_axis", 1)?, r)?;
        if !matches!((time, batch), (0, 1) | (1, 0)) {
            return invalid(format!(
                "time_axis {time} and batch_axis {batch} must be 0 and 1 in some order"
            ));
        }
        let name = self.input_name(n, 1).unwrap_or("").to_string();
        let lens_value = self.required(n, 1)?;
        let lens = self.materialize(&name, &lens_value)?;
        if self.operand_type(lens) != OperandType::TensorInt32 {
            return invalid("sequence_lens must be an integer tensor");
        }
        let (steps, batches) = (dims[time], dims[batch]);
        // Steps and lengths laid out as the first two axes: [T, 1] and [1, B] (time
        // first), or [1, T] and [B, 1].
        let (t_shape, len_shape) = if time == 0 {
            (vec![steps, 1], vec![1, batches])
        } else {
            (vec![1, steps], vec![batches, 1])
        };
        let t_values: Vec<i32> = (0..steps as i32).collect();
        let t = self.model.add_constant(
            nnc_formats::nn::Operand::new(OperandType::TensorInt32, t_shape),
            bytemuck::cast_slice(&t_values),
        );
        let lens = self.reshape_to(n, lens.operand, &len_shape)?;
        let inside = self.emit(n, OperationType::Less, vec![t, lens])?;
        let one = self.scalar_tensor(OperandType::TensorInt32, 1.0);
        let act = self.i32_const(0);
        let last = self.emit(n, OperationType::Sub, vec![lens, one, act])?;
        let act = self.i32_const(0);
        let reversed = self.emit(n, OperationType::Sub, vec![last, t, act])?;
        // The steps repeated across the batch, for the entries past each length.
        let across: Vec<i32> = if time == 0 {
            vec![1, batches as i32]
        } else {
            vec![batches as i32, 1]
        };
        let across = self.i32_vector(&across);
        let t_full = self.emit(n, OperationType::Tile, vec![t, across])?;
        let mut idx = self.emit(n, OperationType::Select, vec![inside, reversed, t_full])?;
        if r > 2 {
            // Repeated over the trailing dimensions: [d0, d1, 1, ...] tiled to x's shape.
            let mut shape = dims[..2].to_vec();
            shape.extend(std::iter::repeat_n(1, r - 2));
            idx = self.reshape_to(n, idx, &shape)?;
            let mut multiples = vec![1i32, 1];
            multiples.extend(dims[2..].iter().map(|&d| d as i32));
            let multiples = self.i32_vector(&multiples);
            idx = self.emit(n, OperationType::Tile, vec![idx, multiples])?;
        }
        let ax = self.i32_const(time as i32);
        let y = self.emit(n, OperationType::GatherElements, vec![x.operand, ax, idx])?;
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }

    pub(super) fn gather_nd(&mut self, n: &Node) -> NResult<()> {
        let data = self.tensor(n, 0)?;
        let idx = self.index_operand(n, 1)?;
        let batch = n.attrs.int_or("batch_dims", 0)?;
        let batch = i32::try_from(batch)
            .ok()
            .filter(|&b| b >= 0)
            .ok_or_else(|| NodeError::Invalid(format!("batch_dims must be >= 0, got {batch}")))?;
        let b = self.i32_const(batch);
        let y = self.emit(
            n,
            OperationType::GatherNd,
            vec![data.operand, idx.operand, b],
        )?;
        let scalar = self.model.main.operands[y as usize].dimensions.is_empty();
        if scalar {
            return unsupported("GatherND producing a rank-0 value");
        }
        self.set_tensor(n, 0, y, data.dtype, false);
        Ok(())
    }

    /// NonZero: NON_ZERO (int32 coordinates, `[rank, count]`), whose count is known only
    /// when the data is: the model computes its shapes at run time from there on. A
    /// constant input is evaluated now.
    pub(super) fn non_zero(&mut self, n: &Node) -> NResult<()> {
        if let Value::Const(c) = self.required(n, 0)? {
            if c.shape.is_empty() {
                return unsupported("NonZero of a rank-0 value");
            }
            let values = constant::to_f64s(&c);
            let strides: Vec<usize> = (0..c.shape.len())
                .map(|d| c.shape[d + 1..].iter().product())
                .collect();
            let hits: Vec<usize> = (0..values.len()).filter(|&i| values[i] != 0.0).collect();
            let mut coords = vec![0i64; c.shape.len() * hits.len()];
            for (k, &flat) in hits.iter().enumerate() {
                for (d, &stride) in strides.iter().enumerate() {
                    coords[d * hits.len() + k] = ((flat / stride) % c.shape[d]) as i64;
                }
            }
            let t = constant::i64_tensor(vec![c.shape.len(), hits.len()], &coords);
            return self.set_const(n, 0, t);
        }
        let x = self.tensor(n, 0)?;
        if self.rank(x) == 0 {
            return unsupported("NonZero of a rank-0 value");
        }
        let y = self.emit(n, OperationType::NonZero, vec![x.operand])?;
        self.set_tensor(n, 0, y, DataType::I64, false);
        Ok(())
    }

    /// Trilu: SELECT between the input and zeros with a constant mask over the last two
    /// dimensions (which must be known), so it is exact for every element type.
    pub(super) fn trilu(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        let dims = self.known_dims(x)?;
        if dims.len() < 2 {
            return invalid("Trilu needs an input of rank 2 or more");
        }
        let k = match self.const_input(n, 1)? {
            Some(c) => *constant::to_i64s(&c)
                .first()
                .ok_or_else(|| NodeError::Invalid("k must hold one value".into()))?,
            None => 0,
        };
        let upper = n.attrs.int_or("upper", 1)? != 0;
        let (rows, cols) = (dims[dims.len() - 2] as i64, dims[dims.len() - 1] as i64);
        self.budget
            .room(&[rows as usize, cols as usize], DataType::Bool)?;
        self.budget
            .generate(rows as usize * cols as usize, DataType::Bool)?;
        let mut mask = Vec::with_capacity((rows * cols) as usize);
        for i in 0..rows {
            for j in 0..cols {
                let keep = if upper { j - i >= k } else { j - i <= k };
                mask.push(u8::from(keep));
            }
        }
        let cond = self.model.add_constant(
            nnc_formats::nn::Operand::new(OperandType::TensorBool8, vec![rows as u32, cols as u32]),
            &mask,
        );
        let t = self.operand_type(x);
        let zero = self.scalar_tensor(t, 0.0);
        let y = self.emit(n, OperationType::Select, vec![cond, x.operand, zero])?;
        self.set_output(n, 0, Value::Tensor(TensorValue { operand: y, ..x }));
        Ok(())
    }
}
