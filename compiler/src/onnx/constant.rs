//! Compile-time values of the ONNX graph and the arithmetic on them.
//!
//! ONNX computes shapes at run time with int64 chains (`Shape -> Gather -> Concat ->
//! Reshape`). The NN operation set has no int64, so such chains must be folded before
//! lowering; this module evaluates them. Float arithmetic here rounds to f32 after every
//! operation, as an f32 kernel would.

use std::cell::Cell;

use nnc_formats::limits::{LimitError, LimitKind, Limits};
use nnc_formats::minifloat::FloatFormat;
use nnc_formats::tensor::{DataType, HostTensor};

/// A tensor whose value is known at compile time (ONNX shape: `[]` is a scalar).
pub type ConstTensor = HostTensor;

/// Why an evaluation failed: the node is malformed, or it would exceed a limit.
#[derive(Debug)]
pub enum EvalError {
    Invalid(String),
    Limit(LimitError),
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvalError::Invalid(m) => f.write_str(m),
            EvalError::Limit(e) => e.fmt(f),
        }
    }
}

impl From<String> for EvalError {
    fn from(message: String) -> EvalError {
        EvalError::Invalid(message)
    }
}

impl From<&str> for EvalError {
    fn from(message: &str) -> EvalError {
        EvalError::Invalid(message.to_string())
    }
}

impl From<LimitError> for EvalError {
    fn from(e: LimitError) -> EvalError {
        EvalError::Limit(e)
    }
}

pub type EvalResult<T> = Result<T, EvalError>;

/// How much compile-time evaluation may hold: the `folded` limit plus four times the
/// model's own weights (so that dequantizing or re-laying out real weights is never
/// refused, while a small file cannot fold itself into gigabytes). Every constant the
/// importer keeps is charged ([`FoldBudget::charge`]); every evaluation that may create
/// more data than it reads checks for room first ([`FoldBudget::room`]), before it
/// allocates.
#[derive(Debug)]
pub struct FoldBudget {
    allowance: u64,
    used: Cell<u64>,
}

impl FoldBudget {
    pub fn new(limits: &Limits, model_weight_bytes: u64) -> FoldBudget {
        FoldBudget {
            allowance: limits
                .max_folded_bytes
                .saturating_add(model_weight_bytes.saturating_mul(4)),
            used: Cell::new(0),
        }
    }

    /// A budget that refuses nothing a 64-bit size can describe (tests, tools).
    pub fn unlimited() -> FoldBudget {
        FoldBudget {
            allowance: u64::MAX,
            used: Cell::new(0),
        }
    }

    fn bytes_of(shape: &[usize], dtype: DataType) -> Option<u64> {
        shape
            .iter()
            .try_fold(dtype.size() as u64, |acc, &d| acc.checked_mul(d as u64))
    }

    fn exceeded(&self, shape: &[usize], requested: Option<u64>) -> LimitError {
        LimitError {
            kind: LimitKind::Folded,
            what: format!("evaluating a constant of shape {shape:?} at compile time"),
            requested: requested.map(|r| r.saturating_add(self.used.get())),
            limit: self.allowance,
        }
    }

    /// Checks that a tensor of `shape` and `dtype` fits in what is left, without charging
    /// it; returns its element count.
    pub fn room(&self, shape: &[usize], dtype: DataType) -> EvalResult<usize> {
        let bytes = Self::bytes_of(shape, dtype);
        match bytes {
            Some(b) if b <= self.allowance.saturating_sub(self.used.get()) => {
                Ok(shape.iter().product())
            }
            _ => Err(self.exceeded(shape, bytes).into()),
        }
    }

    /// Checks for room and charges `elements` of `dtype` that lowering is about to
    /// generate (an index table, say), before they are allocated.
    pub fn generate(&self, elements: usize, dtype: DataType) -> EvalResult<()> {
        self.room(&[elements], dtype)?;
        let bytes = (elements as u64).saturating_mul(dtype.size() as u64);
        self.used.set(self.used.get().saturating_add(bytes));
        Ok(())
    }

    /// Charges a constant the importer keeps.
    pub fn charge(&self, t: &ConstTensor) -> EvalResult<()> {
        let bytes = t.data.len() as u64;
        let used = self.used.get().saturating_add(bytes);
        if used > self.allowance {
            return Err(self.exceeded(&t.shape, Some(bytes)).into());
        }
        self.used.set(used);
        Ok(())
    }
}

pub fn is_float(dtype: DataType) -> bool {
    matches!(dtype, DataType::F32 | DataType::F64 | DataType::F16) || dtype.float_format().is_some()
}

pub fn is_integer(dtype: DataType) -> bool {
    matches!(
        dtype,
        DataType::I8
            | DataType::U8
            | DataType::I16
            | DataType::U16
            | DataType::I32
            | DataType::U32
            | DataType::I64
            | DataType::U64
            | DataType::I4
            | DataType::U4
            | DataType::I2
            | DataType::U2
    )
}

/// The elements as i64 (integers and bools; floats are truncated).
pub fn to_i64s(t: &ConstTensor) -> Vec<i64> {
    let d = &t.data;
    match t.dtype {
        DataType::I64 => d
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        DataType::U64 => d
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])).min(i64::MAX as u64) as i64)
            .collect(),
        DataType::I32 => d
            .chunks_exact(4)
            .map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap_or([0; 4]))))
            .collect(),
        DataType::U32 => d
            .chunks_exact(4)
            .map(|c| i64::from(u32::from_le_bytes(c.try_into().unwrap_or([0; 4]))))
            .collect(),
        DataType::I16 => d
            .chunks_exact(2)
            .map(|c| i64::from(i16::from_le_bytes([c[0], c[1]])))
            .collect(),
        DataType::U16 => d
            .chunks_exact(2)
            .map(|c| i64::from(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        // The sub-byte integers are held one per byte, sign- or zero-extended.
        DataType::I8 | DataType::I4 | DataType::I2 => {
            d.iter().map(|&b| i64::from(b as i8)).collect()
        }
        DataType::U8 | DataType::U4 | DataType::U2 | DataType::Bool => {
            d.iter().map(|&b| i64::from(b)).collect()
        }
        // The floats, truncated.
        _ => to_f64s(t).into_iter().map(|v| v as i64).collect(),
    }
}

/// The elements as f64.
pub fn to_f64s(t: &ConstTensor) -> Vec<f64> {
    t.values_f64()
}

/// The elements as f32.
pub fn to_f32s(t: &ConstTensor) -> Vec<f32> {
    if t.dtype == DataType::F32 {
        return t
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
    }
    match t.dtype {
        DataType::F16 => t
            .data
            .chunks_exact(2)
            .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
        dtype if dtype.float_format().is_some() => t.widened().to_f32_vec().unwrap_or_default(),
        _ => to_f64s(t).into_iter().map(|v| v as f32).collect(),
    }
}

/// Builds a tensor of `dtype` from f64 values (rounding/truncating as the type requires).
pub fn from_f64s(dtype: DataType, shape: Vec<usize>, values: &[f64]) -> ConstTensor {
    let mut data = Vec::with_capacity(values.len() * dtype.size());
    for &v in values {
        match dtype {
            DataType::F32 => data.extend_from_slice(&(v as f32).to_le_bytes()),
            DataType::F64 => data.extend_from_slice(&v.to_le_bytes()),
            DataType::F16 => {
                data.extend_from_slice(&half::f16::from_f64(v).to_bits().to_le_bytes())
            }
            // ONNX's Cast saturates into the float8 formats by default; bfloat16 has
            // infinities and keeps them.
            DataType::Bf16 => {
                data.extend_from_slice(&FloatFormat::Bfloat16.encode(v as f32, false).to_le_bytes())
            }
            _ => match dtype.float_format() {
                Some(format) => data.push(format.encode(v as f32, true) as u8),
                None => push_int(&mut data, dtype, v as i64),
            },
        }
    }
    HostTensor { dtype, shape, data }
}

/// Builds a tensor of `dtype` from i64 values (wrapping as ONNX casts do).
pub fn from_i64s(dtype: DataType, shape: Vec<usize>, values: &[i64]) -> ConstTensor {
    if is_float(dtype) {
        let f: Vec<f64> = values.iter().map(|&v| v as f64).collect();
        return from_f64s(dtype, shape, &f);
    }
    let mut data = Vec::with_capacity(values.len() * dtype.size());
    for &v in values {
        push_int(&mut data, dtype, v);
    }
    HostTensor { dtype, shape, data }
}

fn push_int(data: &mut Vec<u8>, dtype: DataType, v: i64) {
    match dtype {
        DataType::I64 => data.extend_from_slice(&v.to_le_bytes()),
        DataType::U64 => data.extend_from_slice(&(v as u64).to_le_bytes()),
        DataType::I32 => data.extend_from_slice(&(v as i32).to_le_bytes()),
        DataType::U32 => data.extend_from_slice(&(v as u32).to_le_bytes()),
        DataType::I16 => data.extend_from_slice(&(v as i16).to_le_bytes()),
        DataType::U16 => data.extend_from_slice(&(v as u16).to_le_bytes()),
        DataType::I8 => data.push(v as i8 as u8),
        DataType::U8 => data.push(v as u8),
        DataType::Bool => data.push(u8::from(v != 0)),
        // ONNX saturates into the sub-byte integers (held one per byte).
        DataType::I4 | DataType::U4 | DataType::I2 | DataType::U2 => {
            if let Some(n) = dtype.narrow_int() {
                data.push(v.clamp(i64::from(n.min()), i64::from(n.max())) as i8 as u8);
            }
        }
        // Floats are written by `from_f64s`.
        _ => {}
    }
}

pub fn i64_tensor(shape: Vec<usize>, values: &[i64]) -> ConstTensor {
    from_i64s(DataType::I64, shape, values)
}

pub fn f32_tensor(shape: Vec<usize>, values: &[f32]) -> ConstTensor {
    HostTensor {
        dtype: DataType::F32,
        shape,
        data: bytemuck::cast_slice(values).to_vec(),
    }
}

/// NumPy broadcast of two shapes.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> EvalResult<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            (x, y) => {
                return Err(format!("shapes {a:?} and {b:?} do not broadcast ({x} vs {y})").into());
            }
        };
    }
    Ok(out)
}

/// For each output element of a broadcast, the index of the source element.
fn broadcast_index_map(src: &[usize], out: &[usize]) -> Vec<usize> {
    let n = out.len();
    let total: usize = out.iter().product();
    let mut strides = vec![0usize; n];
    let mut s = 1;
    for i in (0..src.len()).rev() {
        let oi = i + n - src.len();
        strides[oi] = if src[i] == 1 { 0 } else { s };
        s *= src[i];
    }
    let mut map = Vec::with_capacity(total);
    let mut idx = vec![0usize; n];
    for _ in 0..total {
        map.push(idx.iter().zip(&strides).map(|(i, s)| i * s).sum());
        for d in (0..n).rev() {
            idx[d] += 1;
            if idx[d] < out[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    map
}

/// Expands `t` to `shape` by broadcasting.
pub fn broadcast_to(
    t: &ConstTensor,
    shape: &[usize],
    budget: &FoldBudget,
) -> EvalResult<ConstTensor> {
    let out_shape = broadcast_shape(&t.shape, shape)?;
    budget.room(&out_shape, t.dtype)?;
    let size = t.dtype.size();
    let map = broadcast_index_map(&t.shape, &out_shape);
    let mut data = Vec::with_capacity(map.len() * size);
    for i in map {
        data.extend_from_slice(&t.data[i * size..(i + 1) * size]);
    }
    Ok(HostTensor {
        dtype: t.dtype,
        shape: out_shape,
        data,
    })
}

/// Elementwise binary arithmetic and comparison with broadcasting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Max,
    Min,
    /// The remainder with the dividend's sign (C's fmod; ONNX Mod with fmod=1).
    Mod,
    /// The remainder with the divisor's sign (Python's %; ONNX Mod with fmod=0).
    FloorMod,
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
    And,
    Or,
    Xor,
}

impl BinaryOp {
    fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Equal
                | BinaryOp::Less
                | BinaryOp::Greater
                | BinaryOp::LessOrEqual
                | BinaryOp::GreaterOrEqual
        )
    }
}

pub fn binary(
    op: BinaryOp,
    a: &ConstTensor,
    b: &ConstTensor,
    budget: &FoldBudget,
) -> EvalResult<ConstTensor> {
    let shape = broadcast_shape(&a.shape, &b.shape)?;
    // The evaluation holds f64 copies and index maps: room for four times the output.
    budget.room(&shape, DataType::F64)?;
    budget.room(&shape, a.dtype)?;
    let ma = broadcast_index_map(&a.shape, &shape);
    let mb = broadcast_index_map(&b.shape, &shape);
    let out_type =
        if op.is_comparison() || matches!(op, BinaryOp::And | BinaryOp::Or | BinaryOp::Xor) {
            DataType::Bool
        } else {
            a.dtype
        };
    if is_float(a.dtype) {
        let (va, vb) = (to_f64s(a), to_f64s(b));
        let f32_math = a.dtype == DataType::F32;
        let values: Vec<f64> = ma
            .iter()
            .zip(&mb)
            .map(|(&i, &j)| {
                let (x, y) = (va[i], vb[j]);
                let r = match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x * y,
                    BinaryOp::Div => x / y,
                    BinaryOp::Pow => x.powf(y),
                    BinaryOp::Max => x.max(y),
                    BinaryOp::Min => x.min(y),
                    BinaryOp::Mod => x % y,
                    BinaryOp::FloorMod => {
                        let r = x % y;
                        if r != 0.0 && (r < 0.0) != (y < 0.0) {
                            r + y
                        } else {
                            r
                        }
                    }
                    BinaryOp::Equal => f64::from(u8::from(x == y)),
                    BinaryOp::Less => f64::from(u8::from(x < y)),
                    BinaryOp::Greater => f64::from(u8::from(x > y)),
                    BinaryOp::LessOrEqual => f64::from(u8::from(x <= y)),
                    BinaryOp::GreaterOrEqual => f64::from(u8::from(x >= y)),
                    BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => f64::NAN,
                };
                // Round like an f32 kernel would (each of + - * / is exactly rounded).
                if f32_math { f64::from(r as f32) } else { r }
            })
            .collect();
        if matches!(op, BinaryOp::And | BinaryOp::Or | BinaryOp::Xor) {
            return Err("logical operations need boolean inputs".into());
        }
        return Ok(from_f64s(out_type, shape, &values));
    }
    let (va, vb) = (to_i64s(a), to_i64s(b));
    let mut values = Vec::with_capacity(ma.len());
    for (&i, &j) in ma.iter().zip(&mb) {
        let (x, y) = (va[i], vb[j]);
        let r = match op {
            BinaryOp::Add => x.wrapping_add(y),
            BinaryOp::Sub => x.wrapping_sub(y),
            BinaryOp::Mul => x.wrapping_mul(y),
            BinaryOp::Div => {
                if y == 0 {
                    return Err("integer division by zero in a constant expression".into());
                }
                x.wrapping_div(y)
            }
            BinaryOp::Mod | BinaryOp::FloorMod => {
                if y == 0 {
                    return Err("integer modulo by zero in a constant expression".into());
                }
                let r = x.wrapping_rem(y);
                if op == BinaryOp::FloorMod && r != 0 && (r < 0) != (y < 0) {
                    r + y
                } else {
                    r
                }
            }
            BinaryOp::Pow => {
                if y < 0 {
                    0
                } else {
                    x.wrapping_pow(y.min(u32::MAX as i64) as u32)
                }
            }
            BinaryOp::Max => x.max(y),
            BinaryOp::Min => x.min(y),
            BinaryOp::Equal => i64::from(x == y),
            BinaryOp::Less => i64::from(x < y),
            BinaryOp::Greater => i64::from(x > y),
            BinaryOp::LessOrEqual => i64::from(x <= y),
            BinaryOp::GreaterOrEqual => i64::from(x >= y),
            BinaryOp::And => i64::from(x != 0 && y != 0),
            BinaryOp::Or => i64::from(x != 0 || y != 0),
            BinaryOp::Xor => i64::from((x != 0) != (y != 0)),
        };
        values.push(r);
    }
    Ok(from_i64s(out_type, shape, &values))
}

/// Elementwise unary math on a constant.
pub fn unary(t: &ConstTensor, f: impl Fn(f64) -> f64) -> ConstTensor {
    let values: Vec<f64> = to_f64s(t).into_iter().map(f).collect();
    from_f64s(t.dtype, t.shape.clone(), &values)
}

/// Casts a constant to another element type (float -> int truncates toward zero).
pub fn cast(t: &ConstTensor, to: DataType) -> ConstTensor {
    cast_with(t, to, true)
}

/// ONNX's Cast, with its `saturate` attribute (float8 targets only: out-of-range values
/// become the largest value, or infinity / NaN without it).
pub fn cast_with(t: &ConstTensor, to: DataType, saturate: bool) -> ConstTensor {
    if t.dtype == to {
        return t.clone();
    }
    if let Some(format) = to.float_format() {
        let saturate = saturate && format != FloatFormat::Bfloat16;
        let mut data = Vec::with_capacity(t.element_count() * to.size());
        for v in to_f64s(t) {
            let code = format.encode(v as f32, saturate);
            data.extend_from_slice(&code.to_le_bytes()[..to.size()]);
        }
        return HostTensor {
            dtype: to,
            shape: t.shape.clone(),
            data,
        };
    }
    // Floats to float32 directly (every source value converts exactly or rounds once,
    // as through f64), without the f64 detour for the weights of every model.
    if to == DataType::F32 && is_float(t.dtype) {
        let data = to_f32s(t).into_iter().flat_map(f32::to_le_bytes).collect();
        return HostTensor {
            dtype: to,
            shape: t.shape.clone(),
            data,
        };
    }
    if is_float(to) || is_float(t.dtype) && !is_float(to) && to != DataType::Bool {
        if is_float(to) {
            return from_f64s(to, t.shape.clone(), &to_f64s(t));
        }
        let v: Vec<i64> = to_f64s(t)
            .into_iter()
            .map(|x| if x.is_nan() { 0 } else { x.trunc() as i64 })
            .collect();
        return from_i64s(to, t.shape.clone(), &v);
    }
    if to == DataType::Bool && is_float(t.dtype) {
        let v: Vec<i64> = to_f64s(t)
            .into_iter()
            .map(|x| i64::from(x != 0.0))
            .collect();
        return from_i64s(to, t.shape.clone(), &v);
    }
    from_i64s(to, t.shape.clone(), &to_i64s(t))
}

fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// Normalizes a possibly negative axis.
pub fn norm_axis(axis: i64, rank: usize) -> EvalResult<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(format!("axis {axis} is out of range for rank {rank}").into());
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// ONNX Gather along `axis` with (possibly negative) indices.
pub fn gather(
    data: &ConstTensor,
    indices: &ConstTensor,
    axis: i64,
    budget: &FoldBudget,
) -> EvalResult<ConstTensor> {
    let r = data.shape.len();
    if r == 0 {
        return Err("Gather needs data of rank >= 1".into());
    }
    let axis = norm_axis(axis, r)?;
    let dim = data.shape[axis] as i64;
    let idx: Vec<usize> = to_i64s(indices)
        .into_iter()
        .map(|i| {
            let j = if i < 0 { i + dim } else { i };
            if j < 0 || j >= dim {
                Err(format!(
                    "gather index {i} is out of range for a dimension of size {dim}"
                ))
            } else {
                Ok(j as usize)
            }
        })
        .collect::<Result<_, String>>()?;
    let outer: usize = data.shape[..axis].iter().product();
    let inner: usize = data.shape[axis + 1..].iter().product();
    let size = data.dtype.size();
    let mut shape = data.shape[..axis].to_vec();
    shape.extend_from_slice(&indices.shape);
    shape.extend_from_slice(&data.shape[axis + 1..]);
    budget.room(&shape, data.dtype)?;
    let mut out = Vec::new();
    for o in 0..outer {
        for &i in &idx {
            let start = ((o * data.shape[axis] + i) * inner) * size;
            out.extend_from_slice(&data.data[start..start + inner * size]);
        }
    }
    Ok(HostTensor {
        dtype: data.dtype,
        shape,
        data: out,
    })
}

/// ONNX Concat along `axis`.
pub fn concat(parts: &[&ConstTensor], axis: i64, budget: &FoldBudget) -> EvalResult<ConstTensor> {
    let first = parts.first().ok_or("Concat of nothing")?;
    let r = first.shape.len();
    if r == 0 {
        return Err("Concat needs inputs of rank >= 1".into());
    }
    let axis = norm_axis(axis, r)?;
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for p in parts {
        if p.shape.len() != r || p.dtype != first.dtype {
            return Err("Concat inputs differ in rank or type".into());
        }
        for d in 0..r {
            if d != axis && p.shape[d] != first.shape[d] {
                return Err(format!("Concat inputs differ in dimension {d}").into());
            }
        }
        shape[axis] = shape[axis]
            .checked_add(p.shape[axis])
            .ok_or("Concat output is too large")?;
    }
    budget.room(&shape, first.dtype)?;
    let outer: usize = first.shape[..axis].iter().product();
    let size = first.dtype.size();
    let mut out = Vec::new();
    for o in 0..outer {
        for p in parts {
            let chunk: usize = p.shape[axis..].iter().product::<usize>() * size;
            out.extend_from_slice(&p.data[o * chunk..(o + 1) * chunk]);
        }
    }
    Ok(HostTensor {
        dtype: first.dtype,
        shape,
        data: out,
    })
}

/// Strided slice with already-normalized `(start, step, count)` per axis.
pub fn slice(
    t: &ConstTensor,
    ranges: &[(i64, i64, usize)],
    budget: &FoldBudget,
) -> EvalResult<ConstTensor> {
    if ranges.len() != t.shape.len() {
        return Err(format!(
            "{} slice ranges for a tensor of rank {}",
            ranges.len(),
            t.shape.len()
        )
        .into());
    }
    for (d, &(start, step, count)) in ranges.iter().enumerate() {
        let last = (count as i64)
            .checked_sub(1)
            .and_then(|k| k.checked_mul(step))
            .and_then(|k| k.checked_add(start));
        let inside = |i: Option<i64>| i.is_some_and(|i| i >= 0 && (i as u64) < t.shape[d] as u64);
        if count > 0 && !(inside(Some(start)) && inside(last)) {
            return Err(format!(
                "slice of axis {d} (start {start}, step {step}, {count} elements) leaves its {} elements",
                t.shape[d]
            )
            .into());
        }
    }
    let shape: Vec<usize> = ranges.iter().map(|r| r.2).collect();
    budget.room(&shape, t.dtype)?;
    let strides = strides_of(&t.shape);
    let size = t.dtype.size();
    let total: usize = shape.iter().product();
    let mut out = Vec::with_capacity(total * size);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..total {
        let mut src = 0usize;
        for (d, &(start, step, _)) in ranges.iter().enumerate() {
            src += (start + step * idx[d] as i64) as usize * strides[d];
        }
        out.extend_from_slice(&t.data[src * size..(src + 1) * size]);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(HostTensor {
        dtype: t.dtype,
        shape,
        data: out,
    })
}

/// Permutes dimensions.
pub fn transpose(t: &ConstTensor, perm: &[usize]) -> EvalResult<ConstTensor> {
    transpose_as(t, &t.shape, perm)
}

/// [`transpose`] of `t`'s elements read as a tensor of `shape` (a reshape folded into
/// the transposition, without copying the data first).
pub fn transpose_as(t: &ConstTensor, shape: &[usize], perm: &[usize]) -> EvalResult<ConstTensor> {
    let r = shape.len();
    if perm.len() != r {
        return Err(format!("perm {perm:?} does not match rank {r}").into());
    }
    let mut seen = vec![false; r];
    for &p in perm {
        if p >= r || seen[p] {
            return Err(format!("{perm:?} is not a permutation").into());
        }
        seen[p] = true;
    }
    let in_shape = shape;
    let shape: Vec<usize> = perm.iter().map(|&p| in_shape[p]).collect();
    let in_strides = strides_of(in_shape);
    let size = t.dtype.size();
    let total = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    if total.and_then(|n| n.checked_mul(size)) != Some(t.data.len()) {
        return Err(format!(
            "a {:?} tensor of shape {:?} holds {} bytes",
            t.dtype,
            in_shape,
            t.data.len()
        )
        .into());
    }
    let data = match size {
        1 => permute::<1>(&t.data, &in_strides, perm, &shape),
        2 => permute::<2>(&t.data, &in_strides, perm, &shape),
        4 => permute::<4>(&t.data, &in_strides, perm, &shape),
        8 => permute::<8>(&t.data, &in_strides, perm, &shape),
        other => return Err(format!("no transpose for {other}-byte elements").into()),
    };
    Ok(HostTensor {
        dtype: t.dtype,
        shape,
        data,
    })
}

/// The elements of `data` (N bytes each; its length checked against `shape` by the
/// caller) permuted: output axis d reads input axis `perm[d]`. Walks the output in order
/// with the source offset kept incrementally, the innermost axis as one strided run.
fn permute<const N: usize>(
    data: &[u8],
    in_strides: &[usize],
    perm: &[usize],
    shape: &[usize],
) -> Vec<u8> {
    let (src, _) = data.as_chunks::<N>();
    let total: usize = shape.iter().product();
    let Some((&inner, outer_shape)) = shape.split_last() else {
        return data.to_vec();
    };
    if total == 0 {
        return Vec::new();
    }
    let inner_stride = in_strides[perm[shape.len() - 1]];
    let outer_strides: Vec<usize> = perm[..outer_shape.len()]
        .iter()
        .map(|&p| in_strides[p])
        .collect();
    let mut out: Vec<[u8; N]> = Vec::with_capacity(total);
    let mut idx = vec![0usize; outer_shape.len()];
    let mut base = 0usize;
    for _ in 0..total / inner {
        if inner_stride == 1 {
            out.extend_from_slice(&src[base..base + inner]);
        } else {
            out.extend((0..inner).map(|j| src[base + j * inner_stride]));
        }
        for d in (0..outer_shape.len()).rev() {
            idx[d] += 1;
            base += outer_strides[d];
            if idx[d] < outer_shape[d] {
                break;
            }
            base -= outer_strides[d] * outer_shape[d];
            idx[d] = 0;
        }
    }
    out.into_flattened()
}

/// Repeats along each axis.
pub fn tile(t: &ConstTensor, repeats: &[usize], budget: &FoldBudget) -> EvalResult<ConstTensor> {
    if repeats.len() != t.shape.len() {
        return Err("Tile repeats do not match the rank".into());
    }
    let shape = t
        .shape
        .iter()
        .zip(repeats)
        .map(|(d, r)| d.checked_mul(*r))
        .collect::<Option<Vec<usize>>>()
        .ok_or("Tile output is too large")?;
    budget.room(&shape, t.dtype)?;
    let in_strides = strides_of(&t.shape);
    let size = t.dtype.size();
    let total: usize = shape.iter().product();
    let mut out = Vec::with_capacity(total * size);
    let mut idx = vec![0usize; shape.len()];
    for _ in 0..total {
        let src: usize = (0..shape.len())
            .map(|d| (idx[d] % t.shape[d].max(1)) * in_strides[d])
            .sum();
        out.extend_from_slice(&t.data[src * size..(src + 1) * size]);
        for d in (0..shape.len()).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(HostTensor {
        dtype: t.dtype,
        shape,
        data: out,
    })
}

/// A tensor of `shape` filled with the single element of `value`.
pub fn fill(
    value: &ConstTensor,
    shape: Vec<usize>,
    budget: &FoldBudget,
) -> EvalResult<ConstTensor> {
    let n = budget.room(&shape, value.dtype)?;
    let size = value.dtype.size();
    let elem = value.data.get(..size).ok_or("fill value is empty")?;
    let mut data = Vec::with_capacity(n * size);
    for _ in 0..n {
        data.extend_from_slice(elem);
    }
    Ok(HostTensor {
        dtype: value.dtype,
        shape,
        data,
    })
}

/// Reduces along `axes` (sorted, normalized) with `f` over f64 values.
pub fn reduce(
    t: &ConstTensor,
    axes: &[usize],
    keep: bool,
    f: impl Fn(&[f64]) -> f64,
) -> EvalResult<ConstTensor> {
    let r = t.shape.len();
    let values = to_f64s(t);
    let out_full: Vec<usize> = (0..r)
        .map(|d| if axes.contains(&d) { 1 } else { t.shape[d] })
        .collect();
    let total: usize = out_full.iter().product();
    let strides = strides_of(&t.shape);
    let mut groups: Vec<Vec<f64>> = vec![Vec::new(); total];
    let out_strides = strides_of(&out_full);
    let mut idx = vec![0usize; r];
    for v in values.iter() {
        let o: usize = (0..r)
            .map(|d| {
                if axes.contains(&d) {
                    0
                } else {
                    idx[d] * out_strides[d]
                }
            })
            .sum();
        groups[o].push(*v);
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < t.shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    let _ = strides;
    let reduced: Vec<f64> = groups.iter().map(|g| f(g)).collect();
    let shape = if keep {
        out_full
    } else {
        (0..r)
            .filter(|d| !axes.contains(d))
            .map(|d| t.shape[d])
            .collect()
    };
    Ok(from_f64s(t.dtype, shape, &reduced))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> FoldBudget {
        FoldBudget::unlimited()
    }

    #[test]
    fn shape_chain_folds() {
        // Shape -> Gather(0) -> Unsqueeze -> Concat with [-1]
        let shape = i64_tensor(vec![4], &[1, 3, 224, 224]);
        let idx = i64_tensor(vec![], &[0]);
        let batch = gather(&shape, &idx, 0, &budget()).unwrap();
        assert_eq!(batch.shape, Vec::<usize>::new());
        let batch = HostTensor {
            shape: vec![1],
            ..batch
        };
        let minus_one = i64_tensor(vec![1], &[-1]);
        let target = concat(&[&batch, &minus_one], 0, &budget()).unwrap();
        assert_eq!(to_i64s(&target), vec![1, -1]);
    }

    #[test]
    fn mod_takes_the_dividends_sign_and_floor_mod_the_divisors() {
        let a = i64_tensor(vec![4], &[-7, 7, -7, 8]);
        let b = i64_tensor(vec![4], &[4, -4, -4, 4]);
        let m = binary(BinaryOp::Mod, &a, &b, &budget()).unwrap();
        assert_eq!(to_i64s(&m), vec![-3, 3, -3, 0]);
        let f = binary(BinaryOp::FloorMod, &a, &b, &budget()).unwrap();
        assert_eq!(to_i64s(&f), vec![1, -1, -3, 0]);
        let zero = i64_tensor(vec![1], &[0]);
        assert!(binary(BinaryOp::FloorMod, &a, &zero, &budget()).is_err());
        let x = f32_tensor(vec![2], &[-7.5, 7.5]);
        let y = f32_tensor(vec![2], &[2.0, 2.0]);
        assert_eq!(
            to_f32s(&binary(BinaryOp::FloorMod, &x, &y, &budget()).unwrap()),
            vec![0.5, 1.5]
        );
        assert_eq!(
            to_f32s(&binary(BinaryOp::Mod, &x, &y, &budget()).unwrap()),
            vec![-1.5, 1.5]
        );
    }

    #[test]
    fn binary_broadcasts_and_rounds_to_f32() {
        let a = f32_tensor(vec![2, 1], &[1.0, 2.0]);
        let b = f32_tensor(vec![3], &[0.1, 0.2, 0.3]);
        let c = binary(BinaryOp::Add, &a, &b, &budget()).unwrap();
        assert_eq!(c.shape, vec![2, 3]);
        assert_eq!(to_f32s(&c), vec![1.1, 1.2, 1.3, 2.1, 2.2, 2.3]);
        let e = binary(BinaryOp::Less, &a, &b, &budget()).unwrap();
        assert_eq!(e.dtype, DataType::Bool);
    }

    #[test]
    fn integer_division_by_zero_is_an_error() {
        let a = i64_tensor(vec![1], &[1]);
        let z = i64_tensor(vec![1], &[0]);
        assert!(binary(BinaryOp::Div, &a, &z, &budget()).is_err());
    }

    #[test]
    fn transpose_and_slice() {
        let t = i64_tensor(vec![2, 3], &[0, 1, 2, 3, 4, 5]);
        let tt = transpose(&t, &[1, 0]).unwrap();
        assert_eq!(to_i64s(&tt), vec![0, 3, 1, 4, 2, 5]);
        let s = slice(&t, &[(1, 1, 1), (2, -1, 2)], &budget()).unwrap();
        assert_eq!(to_i64s(&s), vec![5, 4]);
    }

    #[test]
    fn gather_rejects_out_of_range() {
        let t = i64_tensor(vec![3], &[1, 2, 3]);
        assert!(gather(&t, &i64_tensor(vec![1], &[3]), 0, &budget()).is_err());
        assert_eq!(
            to_i64s(&gather(&t, &i64_tensor(vec![1], &[-1]), 0, &budget()).unwrap()),
            vec![3]
        );
    }

    #[test]
    fn oversized_constants_are_refused_before_allocating() {
        let v = i64_tensor(vec![], &[0]);
        let small = FoldBudget::new(&Limits::default(), 0);
        match fill(&v, vec![1 << 20, 1 << 20], &small) {
            Err(EvalError::Limit(e)) => {
                assert_eq!(e.kind, LimitKind::Folded);
                assert!(e.to_string().contains("--limit folded=SIZE"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        // Overflowing shapes are limit errors too, not panics.
        assert!(fill(&v, vec![usize::MAX, 4], &budget()).is_err());
        assert!(tile(&v, &[], &budget()).is_ok());
        let t = i64_tensor(vec![2], &[1, 2]);
        assert!(tile(&t, &[usize::MAX], &budget()).is_err());
    }

    #[test]
    fn the_budget_counts_every_kept_constant() {
        let limits = Limits {
            max_folded_bytes: 64,
            ..Limits::default()
        };
        let budget = FoldBudget::new(&limits, 0);
        let t = i64_tensor(vec![4], &[1, 2, 3, 4]);
        budget.charge(&t).unwrap();
        budget.charge(&t).unwrap();
        assert!(matches!(budget.charge(&t), Err(EvalError::Limit(_))));
        // Four times the model's own weights come on top.
        let roomy = FoldBudget::new(&limits, 16);
        for _ in 0..4 {
            roomy.charge(&t).unwrap();
        }
    }

    #[test]
    fn slices_outside_the_tensor_are_errors() {
        let t = i64_tensor(vec![2, 3], &[0, 1, 2, 3, 4, 5]);
        assert!(slice(&t, &[(0, 1, 2)], &budget()).is_err());
        assert!(slice(&t, &[(0, 1, 3), (0, 1, 3)], &budget()).is_err());
        assert!(slice(&t, &[(1, 1, 1), (2, i64::MAX, 2)], &budget()).is_err());
    }

    #[test]
    fn reduce_over_axes() {
        let t = f32_tensor(vec![2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let s = reduce(&t, &[1], false, |g| g.iter().sum()).unwrap();
        assert_eq!(to_f32s(&s), vec![3.0, 7.0]);
        assert_eq!(s.shape, vec![2]);
    }
}
