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
//! `softmax_precision` FLOAT or DOUBLE is accepted: on float32 inputs the softmax runs in
//! float32, which differs from a double-precision softmax rounded back to float32 only
//! by rounding. FLOAT16 and BFLOAT16 (a less precise softmax) are refused.

use nnc_formats::nn::{Operand, OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::super::constant::{self, BinaryOp, ConstTensor};
use super::{Lowerer, NResult, Node, NodeError, TensorValue, Value, invalid, unsupported};

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
        let beta = self.f32_const(1.0);
        let softmax = self.emit(n, OperationType::Softmax, vec![biased, beta])?;
        let probs = self.guard_masked_rows(n, softmax, &bias)?;

        let pg = grouped(self, probs, total)?;
        let y = self.emit(n, OperationType::BatchMatmul, vec![pg, values, no, no])?;
        let mut y = self.reshape_to(n, y, &[batch, hq, sq, v_head])?;
        if rank == 3 {
            y = self.transpose_op(n, y, &[0, 2, 1, 3])?;
            y = self.reshape_to(n, y, &[batch, sq, hq * v_head])?;
        }
        self.set_tensor(n, 0, y, DataType::F32, false);
        self.set_tensor(n, 1, keys, DataType::F32, false);
        self.set_tensor(n, 2, values, DataType::F32, false);
        let qk = match mode {
            0 => raw,
            1 => capped,
            2 => biased,
            _ => probs,
        };
        self.set_tensor(n, 3, qk, DataType::F32, false);
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
        if !boolean && dtype != DataType::F32 {
            return unsupported(format!(
                "an attn_mask of {dtype} (only bool or float32 masks are supported)"
            ));
        }
        if shape.len() > 4 {
            return invalid(format!("attn_mask has rank {} (at most 4)", shape.len()));
        }
        if shape.contains(&0) {
            return unsupported(
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
                let mut c = (*c).clone();
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
                    let count: usize = pad_dims.iter().map(|&d| d as usize).product();
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
                let keep_dims = self.bool_const(true);
                let max = self.emit(n, OperationType::ReduceMax, vec![*b, axes, keep_dims])?;
                let neg_inf = self.model.add_f32_tensor(vec![1], &[NEG_INF]);
                let masked = self.emit(n, OperationType::Equal, vec![max, neg_inf])?;
                let zero = self.model.add_f32_tensor(vec![1], &[0.0]);
                self.emit(n, OperationType::Select, vec![masked, zero, probs])
            }
        }
    }
}
