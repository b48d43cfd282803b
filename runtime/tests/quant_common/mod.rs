//! Helpers for the quantized-kernel tests: single-operation models whose operands carry
//! scales, zero points and per-channel scales, executed through the public API.
#![allow(dead_code)]

use std::sync::Arc;

use nnc_formats::nn::{
    ChannelQuant, IoInfo, Lifetime, Model, Operand, OperandType, OperationType,
};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::exec::host_type;
use nnc_runtime::{HostWeights, PrepareOptions, Program, RuntimeError};

pub const U8: OperandType = OperandType::TensorQuant8Asymm;
pub const I8: OperandType = OperandType::TensorQuant8AsymmSigned;
pub const PER_CHANNEL: OperandType = OperandType::TensorQuant8SymmPerChannel;

/// One input of a single-operation model.
#[derive(Clone, Debug)]
pub enum QArg {
    /// A model input (bytes fed at execution).
    Input { operand: Operand, data: Vec<u8> },
    /// A constant: inline when <= 128 bytes, a prepared weight otherwise.
    Const { operand: Operand, data: Vec<u8> },
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
        Operand::new(OperandType::TensorInt32, dims.iter().map(|&d| d as u32).collect()),
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

pub fn run_model(model: &Model, feeds: &[HostTensor], threads: usize) -> Result<Vec<HostTensor>, RuntimeError> {
    let weights = Arc::new(HostWeights::new(model)?);
    Program::prepare(model, weights, &PrepareOptions { threads })?.execute_host(feeds)
}

/// Runs one operation (one thread) and returns its outputs.
pub fn run_q(op: OperationType, args: Vec<QArg>, outputs: &[Operand]) -> Result<Vec<HostTensor>, RuntimeError> {
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
