//! Helpers for the quantized-kernel tests: single-operation models whose operands carry
//! scales, zero points and per-channel scales, executed through the public API.
#![allow(dead_code)]

use std::sync::Arc;

use nnc_formats::nn::{ChannelQuant, IoInfo, Lifetime, Model, Operand, OperandType, OperationType};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::exec::host_type;
use nnc_runtime::{HostWeights, PrepareOptions, Program, Requantization, RuntimeError};

pub const U8: OperandType = OperandType::TensorQuant8Asymm;
pub const I8: OperandType = OperandType::TensorQuant8AsymmSigned;
pub const PER_CHANNEL: OperandType = OperandType::TensorQuant8SymmPerChannel;

/// One input of a single-operation model.
#[derive(Clone, Debug)]
pub enum QArg {
    /// A model input (bytes fed at execution).
    Input {
        operand: Operand,
        data: Vec<u8>,
    },
    /// A constant: inline when <= 128 bytes, a prepared weight otherwise.
    Const {
        operand: Operand,
        data: Vec<u8>,
    },
    I32(i32),
    F32(f32),
    Bool(bool),
    NoValue(OperandType),
}

/// A quantized tensor operand.
pub fn qoperand(ty: OperandType, dims: &[usize], scale: f32, zp: i32) -> Operand {
    Operand::new(ty, dims.iter().map(|&d| d as u32).collect()).with_quant(scale, zp)
}

/// A per-channel (TENSOR_QUANT8_SYMM_PER_CHANNEL) operand.
pub fn per_channel(dims: &[usize], channel_dim: u32, scales: Vec<f32>) -> Operand {
    let mut o = Operand::new(PER_CHANNEL, dims.iter().map(|&d| d as u32).collect());
    o.channel_quant = Some(ChannelQuant {
        scales,
        channel_dim,
    });
    o
}

pub fn input(operand: Operand, data: Vec<u8>) -> QArg {
    QArg::Input { operand, data }
}

pub fn constant(operand: Operand, data: Vec<u8>) -> QArg {
    QArg::Const { operand, data }
}

/// An 8-bit model input from values (stored as uint8 or int8 bytes by type).
pub fn q_input(ty: OperandType, dims: &[usize], scale: f32, zp: i32, values: &[i32]) -> QArg {
    input(qoperand(ty, dims, scale, zp), q_bytes(values))
}

pub fn q_const(ty: OperandType, dims: &[usize], scale: f32, zp: i32, values: &[i32]) -> QArg {
    constant(qoperand(ty, dims, scale, zp), q_bytes(values))
}

/// A TENSOR_INT32 constant (biases, axes, shapes).
pub fn i32_const(dims: &[usize], values: &[i32]) -> QArg {
    constant(
        Operand::new(
            OperandType::TensorInt32,
            dims.iter().map(|&d| d as u32).collect(),
        ),
        bytemuck::cast_slice(values).to_vec(),
    )
}

/// Values in [-128, 255] as their stored bytes (two's complement for negatives).
pub fn q_bytes(values: &[i32]) -> Vec<u8> {
    values.iter().map(|&v| v as u8).collect()
}

/// The expected output operand (type, dims, scale, zero point).
pub fn out(ty: OperandType, dims: &[usize], scale: f32, zp: i32) -> Operand {
    qoperand(ty, dims, scale, zp)
}

fn host_tensor(o: &Operand, data: &[u8]) -> HostTensor {
    let dtype = host_type(o.operand_type).expect("host type");
    HostTensor::new(
        dtype,
        o.dimensions.iter().map(|&d| d as usize).collect(),
        data.to_vec(),
    )
    .expect("host tensor")
}

/// Builds a one-operation model; returns it with the feeds of its inputs.
pub fn qmodel(op: OperationType, args: Vec<QArg>, outputs: &[Operand]) -> (Model, Vec<HostTensor>) {
    let mut model = Model::default();
    let mut inputs = Vec::new();
    let mut feeds = Vec::new();
    let mut model_inputs = Vec::new();
    for arg in args {
        let index = match arg {
            QArg::Input { mut operand, data } => {
                operand.lifetime = Lifetime::SubgraphInput;
                feeds.push(host_tensor(&operand, &data));
                let i = model.add_operand(operand);
                model_inputs.push(i);
                i
            }
            QArg::Const { operand, data } => model.add_constant(operand, &data),
            QArg::I32(v) => model.add_i32(v),
            QArg::F32(v) => model.add_f32(v),
            QArg::Bool(v) => model.add_bool(v),
            QArg::NoValue(t) => model.add_no_value(t),
        };
        inputs.push(index);
    }
    let mut outs = Vec::new();
    for o in outputs {
        let mut o = o.clone();
        o.lifetime = Lifetime::SubgraphOutput;
        outs.push(model.add_operand(o));
    }
    model.add_operation(op, inputs, outs.clone(), "test_node");
    model.main.inputs = model_inputs.clone();
    model.main.outputs = outs.clone();
    let info = |model: &Model, i: u32| {
        let o = &model.main.operands[i as usize];
        IoInfo {
            name: format!("t{i}"),
            dtype: host_type(o.operand_type).unwrap_or(DataType::F32),
            dims: o.dimensions.clone(),
        }
    };
    model.input_info = model_inputs.iter().map(|&i| info(&model, i)).collect();
    model.output_info = outs.iter().map(|&i| info(&model, i)).collect();
    (model, feeds)
}

/// Runs with TFLite's reference arithmetic ([`Requantization::FixedPoint`]): the
/// references of these tests are TFLite's reference kernels.
pub fn run_model(
    model: &Model,
    feeds: &[HostTensor],
    threads: usize,
) -> Result<Vec<HostTensor>, RuntimeError> {
    run_model_with(model, feeds, threads, Requantization::FixedPoint)
}

pub fn run_model_with(
    model: &Model,
    feeds: &[HostTensor],
    threads: usize,
    requantization: Requantization,
) -> Result<Vec<HostTensor>, RuntimeError> {
    let weights = Arc::new(HostWeights::new(model)?);
    let options = PrepareOptions {
        threads,
        requantization,
        ..Default::default()
    };
    Program::prepare(model, weights, &options)?.execute_host(feeds)
}

/// Runs one operation (one thread) and returns its outputs.
pub fn run_q(
    op: OperationType,
    args: Vec<QArg>,
    outputs: &[Operand],
) -> Result<Vec<HostTensor>, RuntimeError> {
    let (model, feeds) = qmodel(op, args, outputs);
    run_model(&model, &feeds, 1)
}

/// The stored 8-bit values of an output, as integers of its type.
pub fn q_values(t: &HostTensor) -> Vec<i32> {
    match t.dtype {
        DataType::U8 => t.data.iter().map(|&b| i32::from(b)).collect(),
        DataType::I8 => t.data.iter().map(|&b| i32::from(b as i8)).collect(),
        other => panic!("not an 8-bit output: {other:?}"),
    }
}

pub fn i32_values(t: &HostTensor) -> Vec<i32> {
    t.data
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn f32_values(t: &HostTensor) -> Vec<f32> {
    t.data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [lo, hi] (inclusive).
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as i64
    }

    pub fn usize(&mut self, lo: usize, hi: usize) -> usize {
        self.int(lo as i64, hi as i64) as usize
    }

    pub fn i32(&mut self, lo: i32, hi: i32) -> i32 {
        self.int(i64::from(lo), i64::from(hi)) as i32
    }

    pub fn bool(&mut self, p_true: f64) -> bool {
        self.unit() < p_true
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A scale 2^u for u uniform in [lo, hi), rounded to f32.
    pub fn scale(&mut self, lo: f64, hi: f64) -> f32 {
        2f64.powf(lo + (hi - lo) * self.unit()) as f32
    }

    /// Values uniform over the type's range.
    pub fn values(&mut self, ty: OperandType, n: usize) -> Vec<i32> {
        let (lo, hi) = range(ty);
        (0..n).map(|_| self.i32(lo, hi)).collect()
    }

    /// A zero point: usually uniform, sometimes at an end of the range.
    pub fn zp(&mut self, ty: OperandType) -> i32 {
        let (lo, hi) = range(ty);
        match self.usize(0, 9) {
            0 => lo,
            1 => hi,
            _ => self.i32(lo, hi),
        }
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.usize(0, items.len() - 1)]
    }
}

/// The value range of an 8-bit type.
pub fn range(ty: OperandType) -> (i32, i32) {
    match ty {
        OperandType::TensorQuant8Asymm => (0, 255),
        _ => (-128, 127),
    }
}

// -----------------------------------------------------------------------------------
// The TFLite reference arithmetic, spelled out plainly (i64/i128/f64), independent of the
// runtime's implementation.

/// TFLite's QuantizeMultiplier: real = q * 2^(shift - 31), q in [2^30, 2^31), the
/// mantissa rounded half away from zero; multipliers below 2^-31 become (0, 0).
pub fn ref_quantize_multiplier(real: f64) -> (i64, i32) {
    assert!(real >= 0.0 && real.is_finite());
    if real == 0.0 {
        return (0, 0);
    }
    let mut mantissa = real;
    let mut shift = 0;
    while mantissa >= 1.0 {
        mantissa /= 2.0;
        shift += 1;
    }
    while mantissa < 0.5 {
        mantissa *= 2.0;
        shift -= 1;
    }
    let scaled = mantissa * 2f64.powi(31);
    let mut q = scaled.floor() as i64 + i64::from(scaled - scaled.floor() >= 0.5);
    if q == 1 << 31 {
        q /= 2;
        shift += 1;
    }
    if shift < -31 {
        return (0, 0);
    }
    (q, shift)
}

/// Division of a by 2^n rounded toward zero (C++ integer division).
fn div_trunc(a: i128, n: u32) -> i128 {
    let d = 1i128 << n;
    if a >= 0 { a / d } else { -((-a) / d) }
}

/// gemmlowp's SaturatingRoundingDoublingHighMul: (a * b + nudge) / 2^31 truncated,
/// nudge = 2^30 for a non-negative product and 1 - 2^30 otherwise.
pub fn ref_srdhm(a: i64, b: i64) -> i64 {
    if a == i64::from(i32::MIN) && b == a {
        return i64::from(i32::MAX);
    }
    let p = i128::from(a) * i128::from(b);
    let nudge = if p >= 0 {
        1i128 << 30
    } else {
        1 - (1i128 << 30)
    };
    div_trunc(p + nudge, 31) as i64
}

/// gemmlowp's RoundingDivideByPOT: x / 2^e rounded to nearest, ties away from zero.
pub fn ref_rounding_divide(x: i64, e: i32) -> i64 {
    if e == 0 {
        return x;
    }
    let d = 1i64 << e;
    let q = x.div_euclid(d);
    let r = x.rem_euclid(d);
    // Ties: away from zero.
    if 2 * r > d || (2 * r == d && x >= 0) {
        q + 1
    } else {
        q
    }
}

/// TFLite's double-rounding MultiplyByQuantizedMultiplier on an int32 value.
pub fn ref_mbqm(x: i64, real: f64) -> i64 {
    let (q, shift) = ref_quantize_multiplier(real);
    let shifted = x << shift.max(0);
    // The C++ computes in int32: wrap like it.
    let shifted = i64::from(shifted as i32);
    ref_rounding_divide(ref_srdhm(shifted, q), (-shift).max(0))
}

/// Ruy's single-rounding multiply (TFLite's FULLY_CONNECTED): floor((x * q +
/// 2^(30 - shift)) / 2^(31 - shift)).
pub fn ref_mbqm_single(x: i64, real: f64) -> i64 {
    let (q, shift) = ref_quantize_multiplier(real);
    let total = 31 - shift;
    let p = i128::from(x) * i128::from(q) + (1i128 << (total - 1));
    (p >> total) as i32 as i64
}

/// TFLite's CalculateActivationRangeQuantized for fused activation `act`
/// (0 none, 1 relu, 2 relu1, 3 relu6).
pub fn ref_act_range(act: i32, scale: f32, zp: i32, ty: OperandType) -> (i64, i64) {
    let (lo, hi) = range(ty);
    let q = |f: f32| i64::from(zp) + (f / scale).round() as i64;
    let (lo, hi) = (i64::from(lo), i64::from(hi));
    match act {
        1 => (lo.max(q(0.0)), hi),
        2 => (lo.max(q(-1.0)), hi.min(q(1.0))),
        3 => (lo.max(q(0.0)), hi.min(q(6.0))),
        _ => (lo, hi),
    }
}

/// Asserts equal 8-bit outputs, naming the first difference.
pub fn assert_q_eq(got: &[i32], want: &[i64], context: &str) {
    assert_eq!(got.len(), want.len(), "{context}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(i64::from(*g), *w, "{context}: element {i} of {}", got.len());
    }
}
