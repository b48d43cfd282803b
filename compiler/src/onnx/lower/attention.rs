//! ONNX Attention (versions 23 to 25): scaled dot-product attention as NN operations.
//!
//! ```text
//! Q [B, Hq, Sq, D] * sqrt(scale)      K [B, Hkv, T, D] * sqrt(scale) (past keys first)
//!   -> BATCH_MATMUL(adj_rhs)          scores [B, Hq, Sq, T]
//!   -> softcap * TANH(scores / softcap)          (softcap > 0)
//!   -> ADD bias                       (attn_mask, causal / window frontier, padding)
//!   -> SOFTMAX on the last axis
//!   -> SELECT(row fully masked, 0, p) (the spec's fully-masked-row guard)
//!   -> BATCH_MATMUL with V [B, Hkv, T, Dv]
//! ```
//!
//! 3-D inputs `[B, S, H * D]` are split into heads (RESHAPE + TRANSPOSE) and merged back.
//! Grouped-query heads need no copies: query head `h` reads key/value head `h / g`
//! (`g = Hq / Hkv`), so `[B, Hq, Sq, D]` viewed as `[B, Hkv, g * Sq, D]` (a RESHAPE) meets
//! the un-repeated keys in one BATCH_MATMUL.
//!
//! The bias follows the spec's function body: a boolean mask is 0 where True and -inf
//! where False, a float mask is added as it is, the causal frontier (bottom-right aligned:
//! query `i` sees key `j` iff `j <= i + offset`, `offset` the past length, or
//! `nonpad_kv_seqlen - Sq` per batch for an external cache), version 25's sliding window
//! and the `nonpad_kv_seqlen` padding contribute 0 or -inf. A query row whose whole bias
//! is -inf is a zero row (of Y and of the mode-3 `qk_matmul_output`), not NaN. Whatever
//! is known at compile time (the frontier of static shapes, a constant mask, a constant
//! `nonpad_kv_seqlen`) is one constant, and so are its fully masked rows; a run-time
//! mask or `nonpad_kv_seqlen` is computed by NN operations (SELECT, comparisons,
//! REDUCE_MAX for the guard).
//!
//! Where the references disagree nnc follows the spec's function body: `qk_matmul_output`
//! mode 0 is the product before softcap (onnx's Python reference returns it softcapped),
//! a mask with fewer key columns than keys is padded with masked keys (ONNX Runtime
//! refuses it), but a single key column for several keys is refused (the function body
//! broadcasts it, the Python reference pads it). ONNX Runtime 1.32 differs from the
//! function body where it aligns the causal frontier to the total length rather than the
//! past length (more new keys than queries) and writes the lowest float instead of -inf.
//!
//! The com.microsoft Attention and MultiHeadAttention that ONNX Runtime's transformer
//! optimizer writes are lowered in their common forms (see `Lowerer::microsoft_attention`
//! and `Lowerer::multi_head_attention`), with ONNX Runtime's semantics: one scale on the
//! product, and masks that add the finite `mask_filter_value` (so no row is ever NaN).
//!
//! `softmax_precision` FLOAT or DOUBLE is accepted: on float32 inputs the softmax runs in
//! float32, which differs from a double-precision softmax rounded back to float32 only
//! by rounding. FLOAT16 and BFLOAT16 (a less precise softmax) are refused.

use nnc_formats::nn::{Operand, OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::super::constant::{self, BinaryOp, ConstTensor};
use super::{
    Lowerer, NResult, Node, NodeError, TensorValue, Value, invalid, needs_input_shape, unsupported,
};

/// An additive attention bias in float32, right-aligned against `[B, Hq, Sq, T]`.
enum Bias {
    None,
    Const(ConstTensor),
    Runtime(u32),
}

/// Where the causal frontier and the window sit: `j <= i + offset`.
#[derive(Clone, Copy)]
enum Offset {
    /// The same for every batch: the past length (or 0).
    Fixed(i64),
    /// `nonpad_kv_seqlen[b] - Sq`, from input 6.
    NonPad,
}

/// The constraints that depend only on positions: causal, window, padding.
#[derive(Clone, Copy)]
struct Frontier {
    causal: bool,
    /// Version 25's `left_window_size` / `right_window_size` (-1: unbounded).
    left: i64,
    right: i64,
}

impl Frontier {
    fn restricts(&self) -> bool {
        self.causal || self.left >= 0 || self.right >= 0
    }

    /// Whether query `i` may attend key `j` when the queries start at `offset`.
    fn allows(&self, i: i64, j: i64, offset: i64) -> bool {
        let d = i + offset - j;
        (!self.causal || d >= 0)
            && (self.left < 0 || d <= self.left)
            && (self.right < 0 || -d <= self.right)
    }
}

/// The sizes of one Attention node, after splitting 3-D inputs into heads.
#[derive(Clone, Copy)]
struct Dims {
    batch: u32,
    q_heads: u32,
    q_seq: u32,
    /// Past plus new keys.
    total: u32,
}

const NEG_INF: f32 = f32::NEG_INFINITY;

impl Lowerer<'_> {
    pub(super) fn attention(&mut self, n: &Node) -> NResult<()> {
        let q = self.tensor(n, 0)?;
        let k = self.tensor(n, 1)?;
        let v = self.tensor(n, 2)?;
        for t in [q, k, v] {
            self.require_float(n, t)?;
        }
        let (qd, kd, vd) = (
            self.known_dims(q)?,
            self.known_dims(k)?,
            self.known_dims(v)?,
        );
        let rank = qd.len();
        if kd.len() != rank || vd.len() != rank || !(rank == 3 || rank == 4) {
            return invalid(format!(
                "Q, K and V must all be 3-D or all 4-D, got ranks {}, {} and {}",
                qd.len(),
                kd.len(),
                vd.len()
            ));
        }
        let q_heads = n.attrs.int("q_num_heads")?;
        let kv_heads = n.attrs.int("kv_num_heads")?;
        let (q4, k4, v4) = if rank == 3 {
            let (Some(hq), Some(hkv)) = (q_heads, kv_heads) else {
                return invalid("3-D Q, K and V need the q_num_heads and kv_num_heads attributes");
            };
            (
                self.split_heads(n, q.operand, &qd, hq, "Q")?,
                self.split_heads(n, k.operand, &kd, hkv, "K")?,
                self.split_heads(n, v.operand, &vd, hkv, "V")?,
            )
        } else {
            if n.version >= 25 && (q_heads.is_some() || kv_heads.is_some()) {
                return invalid("q_num_heads and kv_num_heads must not be given for 4-D inputs");
            }
            for (attr, given, actual) in [
                ("q_num_heads", q_heads, qd[1]),
                ("kv_num_heads", kv_heads, kd[1]),
            ] {
                if given.is_some_and(|h| h != i64::from(actual)) {
                    return invalid(format!(
                        "{attr} is {}, but the 4-D input has {actual} heads",
                        given.unwrap_or(0)
                    ));
                }
            }
            (q.operand, k.operand, v.operand)
        };
        let dims_of = |this: &Self, x: u32| this.model.main.operands[x as usize].dimensions.clone();
        let (qd, kd, vd) = (dims_of(self, q4), dims_of(self, k4), dims_of(self, v4));
        let [batch, hq, sq, head] = [qd[0], qd[1], qd[2], qd[3]];
        let [_, hkv, skv, _] = [kd[0], kd[1], kd[2], kd[3]];
        let v_head = vd[3];
        if kd[0] != batch || vd[0] != batch {
            return invalid(format!(
                "Q, K and V have different batch sizes ({batch}, {}, {})",
                kd[0], vd[0]
            ));
        }
        if kd[3] != head {
            return invalid(format!(
                "Q and K have different head sizes ({head} and {})",
                kd[3]
            ));
        }
        if vd[1] != hkv || vd[2] != skv {
            return invalid(format!(
                "K {kd:?} and V {vd:?} differ in heads or sequence length"
            ));
        }
        if !hq.is_multiple_of(hkv) {
            return invalid(format!(
                "{hq} query heads are not a multiple of {hkv} key/value heads"
            ));
        }
        let precision = n.attrs.int_or("softmax_precision", 1)?;
        match precision {
            1 | 11 => {}
            10 | 16 => {
                return unsupported(format!(
                    "softmax_precision {precision} (a 16-bit softmax of float32 scores; nnc \
                     computes it in float32)"
                ));
            }
            other => return invalid(format!("softmax_precision {other} is not a float type")),
        }
        let mode = n.attrs.int_or("qk_matmul_output_mode", 0)?;
        if !(0..=3).contains(&mode) {
            return invalid(format!("qk_matmul_output_mode must be 0 to 3, got {mode}"));
        }
        let frontier = Frontier {
            causal: n.attrs.int_or("is_causal", 0)? != 0,
            left: self.window_attr(n, "left_window_size")?,
            right: self.window_attr(n, "right_window_size")?,
        };

        // Past keys and values come first along the sequence axis.
        let has_past = self.input_name(n, 4).is_some();
        if has_past != self.input_name(n, 5).is_some() {
            return invalid("past_key and past_value must be given together");
        }
        let nonpad = n.version >= 24 && self.input_name(n, 6).is_some();
        if nonpad && has_past {
            return invalid("nonpad_kv_seqlen cannot be combined with past_key and past_value");
        }
        let (keys, values, past) = if has_past {
            let pk = self.tensor(n, 4)?;
            let pv = self.tensor(n, 5)?;
            self.require_float(n, pk)?;
            self.require_float(n, pv)?;
            let (pkd, pvd) = (self.known_dims(pk)?, self.known_dims(pv)?);
            let p = pkd.get(2).copied().unwrap_or(0);
            if pkd != [batch, hkv, p, head] || pvd != [batch, hkv, p, v_head] {
                return invalid(format!(
                    "past_key {pkd:?} and past_value {pvd:?} must be [{batch}, {hkv}, past, \
                     {head}] and [{batch}, {hkv}, past, {v_head}]"
                ));
            }
            let axis = self.i32_const(2);
            let keys = self.emit(n, OperationType::Concatenation, vec![pk.operand, k4, axis])?;
            let axis = self.i32_const(2);
            let values = self.emit(n, OperationType::Concatenation, vec![pv.operand, v4, axis])?;
            (keys, values, p)
        } else {
            (k4, v4, 0)
        };
        let total = past + skv;
        let dims = Dims {
            batch,
            q_heads: hq,
            q_seq: sq,
            total,
        };

        // Q and K are each scaled by sqrt(scale), as the spec computes.
        let scale = match n.attrs.float("scale")? {
            Some(s) => f64::from(s),
            None => 1.0 / f64::from(head).sqrt(),
        };
        if !(scale.is_finite() && scale > 0.0) {
            return unsupported(format!(
                "scale {scale} (the spec scales Q and K by sqrt(scale); only a positive \
                 finite scale is supported)"
            ));
        }
        let root = scale.sqrt() as f32;
        let scaled = |this: &mut Self, x: u32| -> NResult<u32> {
            if root == 1.0 {
                return Ok(x);
            }
            let r = this.model.add_f32_tensor(vec![1], &[root]);
            this.arith(n, OperationType::Mul, x, r)
        };
        let qs = scaled(self, q4)?;
        let ks = scaled(self, keys)?;

        // Grouped heads: [B, Hq, Sq, D] as [B, Hkv, g * Sq, D].
        let group = hq / hkv;
        let grouped = |this: &mut Self, x: u32, last: u32| -> NResult<u32> {
            this.reshape_to(n, x, &[batch, hkv, group * sq, last])
        };
        let qg = grouped(self, qs, head)?;
        let (no, yes) = (self.bool_const(false), self.bool_const(true));
        let scores = self.emit(n, OperationType::BatchMatmul, vec![qg, ks, no, yes])?;
        let raw = self.reshape_to(n, scores, &[batch, hq, sq, total])?;

        let softcap = n.attrs.float_or("softcap", 0.0)?;
        let capped = if softcap > 0.0 {
            let c = self.model.add_f32_tensor(vec![1], &[softcap]);
            let d = self.arith(n, OperationType::Div, raw, c)?;
            let t = self.emit(n, OperationType::Tanh, vec![d])?;
            let c = self.model.add_f32_tensor(vec![1], &[softcap]);
            self.arith(n, OperationType::Mul, t, c)?
        } else {
            raw
        };

        let bias = self.attention_bias(n, dims, frontier, past, nonpad)?;
        let biased = match &bias {
            Bias::None => capped,
            Bias::Const(c) => {
                let b = self.const_operand(c)?.operand;
                self.arith(n, OperationType::Add, capped, b)?
            }
            Bias::Runtime(b) => self.arith(n, OperationType::Add, capped, *b)?,
        };
        let softmax = self.softmax_last_axis(n, biased)?;
        let probs = self.guard_masked_rows(n, softmax, &bias)?;

        let pg = grouped(self, probs, total)?;
        let y = self.emit(n, OperationType::BatchMatmul, vec![pg, values, no, no])?;
        let mut y = self.reshape_to(n, y, &[batch, hq, sq, v_head])?;
        if rank == 3 {
            y = self.transpose_op(n, y, &[0, 2, 1, 3])?;
            y = self.reshape_to(n, y, &[batch, sq, hq * v_head])?;
        }
        self.set_tensor(n, 0, y, q.dtype, false);
        self.set_tensor(n, 1, keys, k.dtype, false);
        self.set_tensor(n, 2, values, v.dtype, false);
        let qk = match mode {
            0 => raw,
            1 => capped,
            2 => biased,
            _ => probs,
        };
        self.set_tensor(n, 3, qk, q.dtype, false);
        Ok(())
    }

    /// `[B, S, heads * size]` -> `[B, heads, S, size]`.
    fn split_heads(
        &mut self,
        n: &Node,
        x: u32,
        dims: &[u32],
        heads: i64,
        what: &str,
    ) -> NResult<u32> {
        let hidden = dims[2];
        let heads = u32::try_from(heads)
            .ok()
            .filter(|&h| h > 0 && hidden.is_multiple_of(h))
            .ok_or_else(|| {
                NodeError::Invalid(format!(
                    "{what}'s hidden size {hidden} is not a multiple of its {heads} heads"
                ))
            })?;
        let x = self.reshape_to(n, x, &[dims[0], dims[1], heads, hidden / heads])?;
        self.transpose_op(n, x, &[0, 2, 1, 3])
    }

    /// Version 25's window attributes (-1 = unbounded; absent before 25).
    fn window_attr(&self, n: &Node, name: &str) -> NResult<i64> {
        if n.version < 25 {
            return Ok(-1);
        }
        let w = n.attrs.int_or(name, -1)?;
        if w < -1 {
            return invalid(format!("{name} must be -1 or >= 0, got {w}"));
        }
        Ok(w)
    }

    /// The additive bias: the attention mask plus the causal / window / padding frontier.
    fn attention_bias(
        &mut self,
        n: &Node,
        dims: Dims,
        frontier: Frontier,
        past: u32,
        nonpad: bool,
    ) -> NResult<Bias> {
        let mask = self.mask_bias(n, dims)?;
        let offset = if nonpad {
            Offset::NonPad
        } else {
            Offset::Fixed(i64::from(past))
        };
        let positions = self.frontier_bias(n, dims, frontier, offset)?;
        Ok(match (mask, positions) {
            (Bias::None, b) | (b, Bias::None) => b,
            (Bias::Const(a), Bias::Const(b)) => {
                Bias::Const(constant::binary(BinaryOp::Add, &a, &b, &self.budget)?)
            }
            (a, b) => {
                let a = self.bias_operand(a)?;
                let b = self.bias_operand(b)?;
                Bias::Runtime(self.arith(n, OperationType::Add, a, b)?)
            }
        })
    }

    fn bias_operand(&mut self, b: Bias) -> NResult<u32> {
        match b {
            Bias::Const(c) => Ok(self.const_operand(&c)?.operand),
            Bias::Runtime(x) => Ok(x),
            Bias::None => invalid("internal: no bias to materialize"),
        }
    }

    /// `attn_mask` (input 3) as an additive float32 bias, padded along the key axis to
    /// the total sequence length (with False / -inf, as the reference pads a mask that
    /// covers only the first keys).
    fn mask_bias(&mut self, n: &Node, dims: Dims) -> NResult<Bias> {
        let Some(value) = self.input(n, 3)? else {
            return Ok(Bias::None);
        };
        let shape = self.shape_of_value(&value);
        let dtype = match &value {
            Value::Const(c) => c.dtype,
            Value::Tensor(tv) => tv.dtype,
        };
        let boolean = dtype == DataType::Bool;
        let float = match &value {
            Value::Const(_) => constant::is_float(dtype),
            Value::Tensor(tv) => self.operand_type(*tv) == OperandType::TensorFloat32,
        };
        if !boolean && !float {
            return unsupported(format!(
                "an attn_mask of {dtype} (only boolean or float masks are supported)"
            ));
        }
        if shape.len() > 4 {
            return invalid(format!("attn_mask has rank {} (at most 4)", shape.len()));
        }
        if shape.contains(&0) {
            return needs_input_shape(
                "needs the attn_mask dimensions at compile time; fix dynamic dimensions with \
                 --input-shape",
            );
        }
        let target = [dims.batch, dims.q_heads, dims.q_seq, dims.total];
        let lead = 4 - shape.len();
        for (i, &d) in shape.iter().enumerate() {
            let t = target[lead + i];
            let last = i + 1 == shape.len();
            if d != 1 && d != t && !(last && d < t) {
                return invalid(format!(
                    "attn_mask {shape:?} does not broadcast to [batch, heads, q, total] = \
                     {target:?}"
                ));
            }
        }
        let keys = shape.last().copied().unwrap_or(1);
        if keys == 1 && dims.total > 1 && !shape.is_empty() {
            return unsupported(format!(
                "an attn_mask with one key column for {} keys (the ONNX function body \
                 broadcasts it, the reference implementation pads it)",
                dims.total
            ));
        }
        let pad = if shape.is_empty() {
            0
        } else {
            dims.total - keys
        };
        match value {
            Value::Const(c) => {
                let mut c = if boolean {
                    (*c).clone()
                } else {
                    constant::cast(&c, DataType::F32)
                };
                if pad > 0 {
                    let mut pad_shape = c.shape.clone();
                    *pad_shape.last_mut().unwrap_or(&mut 0) = pad as usize;
                    self.budget.room(&pad_shape, c.dtype)?;
                    let filler = if boolean {
                        constant::from_i64s(
                            DataType::Bool,
                            pad_shape.clone(),
                            &vec![0; pad_shape.iter().product()],
                        )
                    } else {
                        constant::f32_tensor(
                            pad_shape.clone(),
                            &vec![NEG_INF; pad_shape.iter().product()],
                        )
                    };
                    c = constant::concat(&[&c, &filler], -1, &self.budget)?;
                }
                if boolean {
                    let values: Vec<f32> = c
                        .data
                        .iter()
                        .map(|&b| if b != 0 { 0.0 } else { NEG_INF })
                        .collect();
                    c = constant::f32_tensor(c.shape.clone(), &values);
                }
                Ok(Bias::Const(c))
            }
            Value::Tensor(tv) => {
                let mut x = tv.operand;
                if pad > 0 {
                    let mut pad_dims = shape.clone();
                    *pad_dims.last_mut().unwrap_or(&mut 0) = pad;
                    let pad_shape: Vec<usize> = pad_dims.iter().map(|&d| d as usize).collect();
                    self.budget.room(&pad_shape, DataType::F32)?;
                    let count: usize = pad_shape.iter().product();
                    self.budget.generate(count, DataType::F32)?;
                    let filler = if boolean {
                        self.model.add_constant(
                            Operand::new(OperandType::TensorBool8, pad_dims),
                            &vec![0u8; count],
                        )
                    } else {
                        self.model.add_f32_tensor(pad_dims, &vec![NEG_INF; count])
                    };
                    let axis = self.i32_const(shape.len() as i32 - 1);
                    x = self.emit(n, OperationType::Concatenation, vec![x, filler, axis])?;
                }
                if boolean {
                    x = self.bool_to_bias(n, x)?;
                }
                Ok(Bias::Runtime(x))
            }
        }
    }

    /// SELECT(allowed, 0, -inf).
    fn bool_to_bias(&mut self, n: &Node, allowed: u32) -> NResult<u32> {
        let zero = self.model.add_f32_tensor(vec![1], &[0.0]);
        let neg_inf = self.model.add_f32_tensor(vec![1], &[NEG_INF]);
        self.emit(n, OperationType::Select, vec![allowed, zero, neg_inf])
    }

    /// The causal / window frontier and the `nonpad_kv_seqlen` padding: a constant
    /// `[Sq, T]` (or `[B, 1, Sq, T]` for a constant `nonpad_kv_seqlen`), or NN
    /// comparisons against a run-time `nonpad_kv_seqlen`.
    fn frontier_bias(
        &mut self,
        n: &Node,
        dims: Dims,
        frontier: Frontier,
        offset: Offset,
    ) -> NResult<Bias> {
        let (sq, t) = (i64::from(dims.q_seq), i64::from(dims.total));
        let lengths = match offset {
            Offset::Fixed(_) => None,
            Offset::NonPad => match self.input(n, 6)? {
                Some(Value::Const(c)) => Some(constant::to_i64s(&c)),
                Some(Value::Tensor(tv)) => return self.runtime_frontier(n, dims, frontier, tv),
                None => None,
            },
        };
        let fixed = match offset {
            Offset::Fixed(p) => p,
            Offset::NonPad => 0,
        };
        if lengths.is_none() && !frontier.restricts() {
            return Ok(Bias::None);
        }
        let rows: Vec<Option<i64>> = match &lengths {
            Some(l) => {
                if l.len() != dims.batch as usize {
                    return invalid(format!(
                        "nonpad_kv_seqlen has {} values for a batch of {}",
                        l.len(),
                        dims.batch
                    ));
                }
                l.iter().map(|&v| Some(v)).collect()
            }
            None => vec![None],
        };
        let shape = if lengths.is_some() {
            vec![rows.len(), 1, sq as usize, t as usize]
        } else {
            vec![sq as usize, t as usize]
        };
        self.budget.room(&shape, DataType::F32)?;
        let mut values = Vec::with_capacity(shape.iter().product());
        for len in &rows {
            let off = len.map_or(fixed, |l| l - sq);
            for i in 0..sq {
                for j in 0..t {
                    let ok = frontier.allows(i, j, off) && len.is_none_or(|l| j < l);
                    values.push(if ok { 0.0 } else { NEG_INF });
                }
            }
        }
        if values.iter().all(|&v| v == 0.0) {
            return Ok(Bias::None);
        }
        Ok(Bias::Const(constant::f32_tensor(shape, &values)))
    }

    /// The frontier for a run-time `nonpad_kv_seqlen` `L` (`offset = L - Sq`): with
    /// `C[i, j] = j - i + Sq`, the distance `i + offset - j` is `L - C`, so causal is
    /// `C <= L`, the left window `L <= C + left`, the right window `C - right <= L`, and
    /// padding `j < L`; each a comparison of a constant with `L` as `[B, 1, 1, 1]`.
    fn runtime_frontier(
        &mut self,
        n: &Node,
        dims: Dims,
        frontier: Frontier,
        lengths: TensorValue,
    ) -> NResult<Bias> {
        if self.operand_type(lengths) != OperandType::TensorInt32 {
            return invalid("nonpad_kv_seqlen must be an int64 tensor");
        }
        if self.dims(lengths) != [dims.batch] {
            return invalid(format!(
                "nonpad_kv_seqlen must have shape [{}], got {:?}",
                dims.batch,
                self.dims(lengths)
            ));
        }
        let l = self.reshape_to(n, lengths.operand, &[dims.batch, 1, 1, 1])?;
        let (sq, t) = (dims.q_seq as i64, dims.total as i64);
        let grid = |shift: i64| -> Vec<i32> {
            (0..sq)
                .flat_map(|i| (0..t).map(move |j| (j - i + sq + shift) as i32))
                .collect()
        };
        let int_tensor = |this: &mut Self, dims: Vec<u32>, v: &[i32]| -> u32 {
            this.model.add_constant(
                Operand::new(OperandType::TensorInt32, dims),
                bytemuck::cast_slice(v),
            )
        };
        let grid_dims = vec![dims.q_seq, dims.total];
        let keys: Vec<i32> = (0..t as i32).collect();
        let j = int_tensor(self, vec![dims.total], &keys);
        let mut allowed = self.emit(n, OperationType::Less, vec![j, l])?;
        let mut conditions = Vec::new();
        if frontier.causal {
            let c = int_tensor(self, grid_dims.clone(), &grid(0));
            conditions.push(self.emit(n, OperationType::LessEqual, vec![c, l])?);
        }
        if frontier.left >= 0 {
            let c = int_tensor(self, grid_dims.clone(), &grid(frontier.left));
            conditions.push(self.emit(n, OperationType::GreaterEqual, vec![c, l])?);
        }
        if frontier.right >= 0 {
            let c = int_tensor(self, grid_dims.clone(), &grid(-frontier.right));
            conditions.push(self.emit(n, OperationType::LessEqual, vec![c, l])?);
        }
        for c in conditions {
            allowed = self.emit(n, OperationType::LogicalAnd, vec![allowed, c])?;
        }
        Ok(Bias::Runtime(self.bool_to_bias(n, allowed)?))
    }

    /// Zeroes the softmax rows whose bias is -inf throughout (they would be NaN).
    fn guard_masked_rows(&mut self, n: &Node, probs: u32, bias: &Bias) -> NResult<u32> {
        match bias {
            Bias::None => Ok(probs),
            Bias::Const(c) => {
                let width = c.shape.last().copied().unwrap_or(1).max(1);
                let values = constant::to_f32s(c);
                let keep: Vec<i64> = values
                    .chunks(width)
                    .map(|row| i64::from(row.iter().any(|&v| v != NEG_INF)))
                    .collect();
                if keep.iter().all(|&k| k == 1) {
                    return Ok(probs);
                }
                let mut shape = c.shape.clone();
                match shape.last_mut() {
                    Some(last) => *last = 1,
                    None => shape.push(1),
                }
                let keep = constant::from_i64s(DataType::Bool, shape, &keep);
                let keep = self.const_operand(&keep)?.operand;
                let zero = self.model.add_f32_tensor(vec![1], &[0.0]);
                self.emit(n, OperationType::Select, vec![keep, probs, zero])
            }
            Bias::Runtime(b) => {
                let rank = self.model.main.operands[*b as usize]
                    .dimensions
                    .len()
                    .max(1);
                let axes = self.i32_vector(&[rank as i32 - 1]);
                let max = self.reduce_op(n, OperationType::ReduceMax, *b, axes, true)?;
                let neg_inf = self.model.add_f32_tensor(vec![1], &[NEG_INF]);
                let masked = self.emit(n, OperationType::Equal, vec![max, neg_inf])?;
                let zero = self.model.add_f32_tensor(vec![1], &[0.0]);
                self.emit(n, OperationType::Select, vec![masked, zero, probs])
            }
        }
    }

    // ---- com.microsoft ------------------------------------------------------------------

    /// com.microsoft Attention: `input [B, S, in] x weights [in, Hq + Hk + Hv] + bias` (the
    /// packed projection, three FULLY_CONNECTED with constant weights), then attention.
    /// `mask_index` may be a `[B]` key length, a `[B, T]` or `[B, S, T]` 0/1 mask; past
    /// state, rotary embeddings and the other `mask_index` forms are refused.
    pub(super) fn microsoft_attention(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let xd = self.known_dims(x)?;
        let [batch, seq, input_hidden] = xd[..] else {
            return invalid(format!(
                "input must be [batch, sequence, hidden], got {xd:?}"
            ));
        };
        let heads = self.num_heads(n)?;
        for attr in ["do_rotary", "past_present_share_buffer"] {
            if n.attrs.int_or(attr, 0)? != 0 {
                return unsupported(format!("{attr} = 1"));
            }
        }
        if self.input_name(n, 4).is_some() || self.input_name(n, 6).is_some() {
            return unsupported("past state (past, past_sequence_length)");
        }
        if self.output_used(n, 1) {
            return unsupported("the present output (past state)");
        }
        let Some(weights) = self.const_input(n, 1)? else {
            return invalid("Attention needs weights");
        };
        let weights = constant::cast(&weights, DataType::F32);
        let [w_in, w_out] = weights.shape[..] else {
            return invalid(format!("weights must be 2-D, got {:?}", weights.shape));
        };
        if w_in != input_hidden as usize {
            return invalid(format!(
                "weights {:?} do not match the input hidden size {input_hidden}",
                weights.shape
            ));
        }
        let sizes = match n.attrs.ints("qkv_hidden_sizes")? {
            Some(v) if v.len() == 3 && v.iter().all(|&s| s > 0) => {
                [v[0] as usize, v[1] as usize, v[2] as usize]
            }
            Some(v) => return invalid(format!("qkv_hidden_sizes {v:?} must be 3 positive sizes")),
            None if w_out % 3 == 0 => [w_out / 3; 3],
            None => {
                return invalid(format!(
                    "the weights' {w_out} columns are not three equal hidden sizes"
                ));
            }
        };
        let total = sizes.iter().try_fold(0usize, |a, &b| a.checked_add(b));
        if total != Some(w_out) || sizes[0] != sizes[1] {
            return invalid(format!(
                "qkv_hidden_sizes {sizes:?} must sum to the weights' {w_out} columns, with \
                 Q and K equal"
            ));
        }
        if sizes.iter().any(|&s| s % heads as usize != 0) {
            return invalid(format!(
                "hidden sizes {sizes:?} are not multiples of {heads} heads"
            ));
        }
        let bias = match self.input(n, 2)? {
            None => vec![0.0; w_out],
            Some(Value::Const(b)) if b.element_count() == w_out => constant::to_f32s(&b),
            Some(Value::Const(b)) => {
                return invalid(format!("bias {:?} must hold {w_out} values", b.shape));
            }
            Some(Value::Tensor(_)) => {
                return unsupported("a run-time bias (only a constant projection bias)");
            }
        };
        let mut parts = Vec::with_capacity(3);
        let mut start = 0;
        for size in sizes {
            let w = constant::slice(
                &weights,
                &[(0, 1, w_in), (start as i64, 1, size)],
                &self.budget,
            )?;
            let w = constant::transpose(&w, &[1, 0])?;
            let y = self.fully_connected(n, x.operand, w, &bias[start..start + size])?;
            parts.push(self.split_heads(n, y, &[batch, seq, size as u32], heads, "QKV")?);
            start += size;
        }
        let head = sizes[0] as u32 / heads as u32;
        let mask = self.microsoft_mask(n, 3, [batch, seq, seq], 0)?;
        let y = self.microsoft_attend(n, (parts[0], parts[1], parts[2]), head, mask, 5)?;
        self.set_tensor(n, 0, y.0, x.dtype, false);
        Ok(())
    }

    /// com.microsoft MultiHeadAttention with separate 3-D query, key and value (plus an
    /// optional constant projection bias, key padding mask, attention bias, and past key
    /// and value `[B, H, P, head]`). Packed QKV / KV inputs, 4-D key and value (a cache in
    /// BNSH) and buffer sharing are refused.
    pub(super) fn multi_head_attention(&mut self, n: &Node) -> NResult<()> {
        let heads = self.num_heads(n)?;
        let q = self.tensor(n, 0)?;
        if self.input_name(n, 1).is_none() || self.input_name(n, 2).is_none() {
            return unsupported("packed QKV or KV inputs (only separate query, key and value)");
        }
        let k = self.tensor(n, 1)?;
        let v = self.tensor(n, 2)?;
        for t in [q, k, v] {
            self.require_float(n, t)?;
        }
        let (qd, kd, vd) = (
            self.known_dims(q)?,
            self.known_dims(k)?,
            self.known_dims(v)?,
        );
        if qd.len() != 3 || kd.len() != 3 || vd.len() != 3 {
            return unsupported(format!(
                "query {qd:?}, key {kd:?}, value {vd:?} (only 3-D query, key and value; packed \
                 or BNSH forms are not supported)"
            ));
        }
        if self.input_name(n, 8).is_some() || self.input_name(n, 9).is_some() {
            return unsupported("past_sequence_length / cache_indirection (buffer sharing, beams)");
        }
        let [batch, seq, hidden] = [qd[0], qd[1], qd[2]];
        if kd[0] != batch || vd[0] != batch || kd[1] != vd[1] || kd[2] != hidden {
            return invalid(format!(
                "query {qd:?}, key {kd:?} and value {vd:?} do not agree"
            ));
        }
        let v_hidden = vd[2];
        let (mut q3, mut k3, mut v3) = (q.operand, k.operand, v.operand);
        match self.input(n, 3)? {
            None => {}
            Some(Value::Const(b)) => {
                let total = (2 * hidden + v_hidden) as usize;
                if b.element_count() != total {
                    return invalid(format!("bias {:?} must hold {total} values", b.shape));
                }
                let b = constant::to_f32s(&b);
                let (h, vh) = (hidden as usize, v_hidden as usize);
                for (x, part) in [
                    (&mut q3, &b[..h]),
                    (&mut k3, &b[h..2 * h]),
                    (&mut v3, &b[2 * h..2 * h + vh]),
                ] {
                    let c = self.model.add_f32_tensor(vec![part.len() as u32], part);
                    *x = self.arith(n, OperationType::Add, *x, c)?;
                }
            }
            Some(Value::Tensor(_)) => {
                return unsupported("a run-time bias (only a constant projection bias)");
            }
        }
        for (size, what) in [(hidden, "query"), (v_hidden, "value")] {
            if heads <= 0 || size % heads as u32 != 0 {
                return invalid(format!(
                    "the {what} hidden size {size} is not a multiple of {heads} heads"
                ));
            }
        }
        let q4 = self.split_heads(n, q3, &qd, heads, "query")?;
        let mut k4 = self.split_heads(n, k3, &kd, heads, "key")?;
        let mut v4 = self.split_heads(n, v3, &vd, heads, "value")?;
        let head = hidden / heads as u32;
        let has_past = self.input_name(n, 6).is_some();
        if has_past != self.input_name(n, 7).is_some() {
            return invalid("past_key and past_value must be given together");
        }
        let mut past = 0;
        if has_past {
            let pk = self.tensor(n, 6)?;
            let pv = self.tensor(n, 7)?;
            self.require_float(n, pk)?;
            self.require_float(n, pv)?;
            let (pkd, pvd) = (self.known_dims(pk)?, self.known_dims(pv)?);
            past = pkd.get(2).copied().unwrap_or(0);
            let h = heads as u32;
            if pkd != [batch, h, past, head] || pvd != [batch, h, past, v_hidden / h] {
                return invalid(format!(
                    "past_key {pkd:?} and past_value {pvd:?} must be [batch, heads, past, head size]"
                ));
            }
            let axis = self.i32_const(2);
            k4 = self.emit(n, OperationType::Concatenation, vec![pk.operand, k4, axis])?;
            let axis = self.i32_const(2);
            v4 = self.emit(n, OperationType::Concatenation, vec![pv.operand, v4, axis])?;
        }
        let total = past + kd[1];
        let mask = self.microsoft_mask(n, 4, [batch, seq, total], past)?;
        let (y, qk) = self.microsoft_attend(n, (q4, k4, v4), head, mask, 5)?;
        self.set_tensor(n, 0, y, q.dtype, false);
        self.set_tensor(n, 1, k4, k.dtype, false);
        self.set_tensor(n, 2, v4, v.dtype, false);
        self.set_tensor(n, 3, qk, q.dtype, false);
        Ok(())
    }

    fn num_heads(&self, n: &Node) -> NResult<i64> {
        match n.attrs.int("num_heads")? {
            Some(h) if h > 0 => Ok(h),
            Some(h) => invalid(format!("num_heads must be positive, got {h}")),
            None => invalid("num_heads is required"),
        }
    }

    /// The additive mask of ONNX Runtime's attention kernels, `[.., S, T]`: 0 where a key
    /// is attended and `mask_filter_value` where the key padding mask (input `at`) masks
    /// it, plus the lowest float where `unidirectional` hides a later key (`j > past + i`,
    /// except on the last query row, as ONNX Runtime 1.32 writes it; the sum rounds to the
    /// lowest float).
    fn microsoft_mask(
        &mut self,
        n: &Node,
        at: usize,
        [batch, seq, total]: [u32; 3],
        past: u32,
    ) -> NResult<Option<u32>> {
        let filter = n.attrs.float_or("mask_filter_value", -10000.0)?;
        let causal = n.attrs.int_or("unidirectional", 0)? != 0 && seq > 1;
        let mut bias = None;
        if self.input_name(n, at).is_some() {
            let m = self.tensor(n, at)?;
            if self.operand_type(m) != OperandType::TensorInt32 {
                return unsupported(format!(
                    "a {} mask (the key padding mask must be int32)",
                    m.dtype
                ));
            }
            let md = self.known_dims(m)?;
            let filter_t = self.model.add_f32_tensor(vec![1], &[filter]);
            let zero = self.model.add_f32_tensor(vec![1], &[0.0]);
            let int_zero = self.scalar_tensor(OperandType::TensorInt32, 0.0);
            let (allowed, shape) = match md[..] {
                // A dummy mask: no mask at all.
                [b, 1] if (b == batch || b == 1) && total > 1 => (None, vec![]),
                [b] if b == batch => {
                    let keys: Vec<i32> = (0..total as i32).collect();
                    let j = self.model.add_constant(
                        Operand::new(OperandType::TensorInt32, vec![total]),
                        bytemuck::cast_slice(&keys),
                    );
                    let l = self.reshape_to(n, m.operand, &[batch, 1])?;
                    let a = self.emit(n, OperationType::Less, vec![j, l])?;
                    (Some(a), vec![batch, 1, 1, total])
                }
                [b, t] if b == batch && t == total => {
                    let a = self.emit(n, OperationType::Greater, vec![m.operand, int_zero])?;
                    (Some(a), vec![batch, 1, 1, total])
                }
                [b, s, t] if b == batch && s == seq && t == total => {
                    let a = self.emit(n, OperationType::Greater, vec![m.operand, int_zero])?;
                    (Some(a), vec![batch, 1, seq, total])
                }
                _ => {
                    return unsupported(format!(
                        "a key padding mask of shape {md:?} (supported: [batch], [batch, \
                         total_sequence], [batch, sequence, total_sequence])"
                    ));
                }
            };
            if let Some(a) = allowed {
                let b = self.emit(n, OperationType::Select, vec![a, zero, filter_t])?;
                bias = Some(self.reshape_to(n, b, &shape)?);
            }
        }
        if causal {
            let (s, t) = (seq as usize, total as usize);
            self.budget.room(&[s, t], DataType::F32)?;
            let mut values = Vec::with_capacity(s * t);
            for i in 0..s {
                for j in 0..t {
                    // ONNX Runtime masks the rows before the last one (the last sees
                    // every key, even when there are more keys than past + queries).
                    let hidden = i + 1 < s && j > past as usize + i;
                    values.push(if hidden { f32::MIN } else { 0.0 });
                }
            }
            let c = self.model.add_f32_tensor(vec![seq, total], &values);
            bias = Some(match bias {
                Some(b) => self.arith(n, OperationType::Add, b, c)?,
                None => c,
            });
        }
        Ok(bias)
    }

    /// `softmax(scale * Q K^T + (attention_bias + mask)) V` on `[B, H, S|T, head]`, as
    /// ONNX Runtime computes it; returns Y `[B, S, H * v_head]` and the biased scores.
    fn microsoft_attend(
        &mut self,
        n: &Node,
        (q4, k4, v4): (u32, u32, u32),
        head: u32,
        mask: Option<u32>,
        attention_bias_at: usize,
    ) -> NResult<(u32, u32)> {
        let scale = n.attrs.float_or("scale", 0.0)?;
        let scale = if scale == 0.0 {
            1.0 / (head as f32).sqrt()
        } else {
            scale
        };
        let (no, yes) = (self.bool_const(false), self.bool_const(true));
        let scores = self.emit(n, OperationType::BatchMatmul, vec![q4, k4, no, yes])?;
        let s = self.model.add_f32_tensor(vec![1], &[scale]);
        let mut scores = self.arith(n, OperationType::Mul, scores, s)?;
        let attention_bias = match self.input_name(n, attention_bias_at) {
            Some(_) => {
                let b = self.tensor(n, attention_bias_at)?;
                self.require_float(n, b)?;
                Some(b.operand)
            }
            None => None,
        };
        let bias = match (attention_bias, mask) {
            (Some(a), Some(m)) => Some(self.arith(n, OperationType::Add, a, m)?),
            (a, m) => a.or(m),
        };
        if let Some(b) = bias {
            scores = self.arith(n, OperationType::Add, scores, b)?;
        }
        let probs = self.softmax_last_axis(n, scores)?;
        let y = self.emit(n, OperationType::BatchMatmul, vec![probs, v4, no, no])?;
        let yd = self.model.main.operands[y as usize].dimensions.clone();
        let y = self.transpose_op(n, y, &[0, 2, 1, 3])?;
        let y = self.reshape_to(n, y, &[yd[0], yd[2], yd[1] * yd[3]])?;
        Ok((y, scores))
    }
}
