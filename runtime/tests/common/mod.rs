//! Test helpers: a seeded random source, single-operation model building, execution
//! through the public API, and tolerance checks against float64 references.
#![allow(dead_code)]

use std::sync::Arc;

use nnc_formats::nn::{IoInfo, Lifetime, Model, Operand, OperandType, OperationType};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::exec::host_type;
use nnc_runtime::{HostWeights, PrepareOptions, Program, RuntimeError};

/// float32 machine epsilon.
pub const EPS: f64 = 1.1920928955078125e-7;

/// A small deterministic generator (xorshift64*), so failures reproduce from the seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545F4914F6CDD1D)
    }

    /// Uniform in [lo, hi] (inclusive).
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }

    pub fn bool(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }

    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }

    pub fn i32s(&mut self, n: usize, lo: i32, hi: i32) -> Vec<i32> {
        (0..n)
            .map(|_| lo + (self.next_u64() % (hi - lo + 1) as u64) as i32)
            .collect()
    }
}

/// One input of a single-operation model.
#[derive(Clone, Debug)]
pub enum Arg {
    /// A model input fed at execution.
    Input {
        ty: OperandType,
        dims: Vec<u32>,
        data: Vec<u8>,
    },
    /// A model input declared with unknown dimensions (0), fed with `dims`.
    DynInput {
        ty: OperandType,
        dims: Vec<u32>,
        data: Vec<u8>,
    },
    /// A constant (inline when <= 128 bytes, a pooled weight otherwise).
    Const {
        ty: OperandType,
        dims: Vec<u32>,
        data: Vec<u8>,
    },
    I32(i32),
    F32(f32),
    Bool(bool),
    NoValue(OperandType),
}

/// A float32 operand of these dimensions.
pub fn f32_operand(dims: &[usize]) -> Operand {
    Operand::new(
        OperandType::TensorFloat32,
        dims.iter().map(|&d| d as u32).collect(),
    )
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

pub fn input_f32(dims: &[usize], data: &[f32]) -> Arg {
    Arg::Input {
        ty: OperandType::TensorFloat32,
        dims: dims.iter().map(|&d| d as u32).collect(),
        data: f32_bytes(data),
    }
}

pub fn const_f32(dims: &[usize], data: &[f32]) -> Arg {
    Arg::Const {
        ty: OperandType::TensorFloat32,
        dims: dims.iter().map(|&d| d as u32).collect(),
        data: f32_bytes(data),
    }
}

pub fn input_i32(dims: &[usize], data: &[i32]) -> Arg {
    Arg::Input {
        ty: OperandType::TensorInt32,
        dims: dims.iter().map(|&d| d as u32).collect(),
        data: i32_bytes(data),
    }
}

pub fn const_i32(dims: &[usize], data: &[i32]) -> Arg {
    Arg::Const {
        ty: OperandType::TensorInt32,
        dims: dims.iter().map(|&d| d as u32).collect(),
        data: i32_bytes(data),
    }
}

pub fn i32_vec(data: &[i32]) -> Arg {
    const_i32(&[data.len()], data)
}

pub fn input_bool(dims: &[usize], data: &[bool]) -> Arg {
    Arg::Input {
        ty: OperandType::TensorBool8,
        dims: dims.iter().map(|&d| d as u32).collect(),
        data: data.iter().map(|&b| u8::from(b)).collect(),
    }
}

/// Either a model input or a constant, so tests cover both paths.
pub fn f32_arg(as_const: bool, dims: &[usize], data: &[f32]) -> Arg {
    if as_const {
        const_f32(dims, data)
    } else {
        input_f32(dims, data)
    }
}

fn host_tensor(ty: OperandType, dims: &[u32], data: &[u8]) -> HostTensor {
    let dtype = host_type(ty).expect("host type");
    HostTensor::new(
        dtype,
        dims.iter().map(|&d| d as usize).collect(),
        data.to_vec(),
    )
    .expect("host tensor")
}

/// Builds a one-operation model; outputs are (type, declared dims; 0 = unknown).
pub fn single_op(
    op: OperationType,
    args: Vec<Arg>,
    outputs: &[(OperandType, Vec<u32>)],
) -> (Model, Vec<HostTensor>) {
    let mut model = Model::default();
    let mut inputs = Vec::new();
    let mut feeds = Vec::new();
    let mut operand_inputs = Vec::new();
    for arg in args {
        let index = match arg {
            Arg::Input { ty, dims, data } => {
                let mut o = Operand::new(ty, dims.clone());
                o.lifetime = Lifetime::SubgraphInput;
                let i = model.add_operand(o);
                feeds.push(host_tensor(ty, &dims, &data));
                operand_inputs.push(i);
                i
            }
            Arg::DynInput { ty, dims, data } => {
                let mut o = Operand::new(ty, vec![0; dims.len()]);
                o.lifetime = Lifetime::SubgraphInput;
                let i = model.add_operand(o);
                feeds.push(host_tensor(ty, &dims, &data));
                operand_inputs.push(i);
                i
            }
            Arg::Const { ty, dims, data } => model.add_constant(Operand::new(ty, dims), &data),
            Arg::I32(v) => model.add_i32(v),
            Arg::F32(v) => model.add_f32(v),
            Arg::Bool(v) => model.add_bool(v),
            Arg::NoValue(t) => model.add_no_value(t),
        };
        inputs.push(index);
    }
    let mut outs = Vec::new();
    for (ty, dims) in outputs {
        let mut o = Operand::new(*ty, dims.clone());
        o.lifetime = Lifetime::SubgraphOutput;
        outs.push(model.add_operand(o));
    }
    model.add_operation(op, inputs, outs.clone(), "test_node");
    model.main.inputs = operand_inputs.clone();
    model.main.outputs = outs.clone();
    model.input_info = operand_inputs
        .iter()
        .map(|&i| {
            let o = &model.main.operands[i as usize];
            IoInfo {
                name: format!("in{i}"),
                dtype: host_type(o.operand_type).unwrap_or(DataType::F32),
                dims: o.dimensions.clone(),
            }
        })
        .collect();
    model.output_info = outs
        .iter()
        .map(|&i| {
            let o = &model.main.operands[i as usize];
            IoInfo {
                name: format!("out{i}"),
                dtype: host_type(o.operand_type).unwrap_or(DataType::F32),
                dims: o.dimensions.clone(),
            }
        })
        .collect();
    (model, feeds)
}

pub fn prepare(model: &Model, threads: usize) -> Result<Program, RuntimeError> {
    let weights = Arc::new(HostWeights::new(model)?);
    Program::prepare(
        model,
        weights,
        &PrepareOptions {
            threads,
            ..Default::default()
        },
    )
}

/// Prepares and executes a model with host tensors.
pub fn run_model(model: &Model, feeds: &[HostTensor]) -> Result<Vec<HostTensor>, RuntimeError> {
    prepare(model, 1)?.execute_host(feeds)
}

/// Runs a single operation and returns its outputs.
pub fn run_op(
    op: OperationType,
    args: Vec<Arg>,
    outputs: &[(OperandType, Vec<u32>)],
) -> Result<Vec<HostTensor>, RuntimeError> {
    let (model, feeds) = single_op(op, args, outputs);
    run_model(&model, &feeds)
}

pub fn out_f32(dims: &[usize]) -> (OperandType, Vec<u32>) {
    (
        OperandType::TensorFloat32,
        dims.iter().map(|&d| d as u32).collect(),
    )
}

pub fn out_i32(dims: &[usize]) -> (OperandType, Vec<u32>) {
    (
        OperandType::TensorInt32,
        dims.iter().map(|&d| d as u32).collect(),
    )
}

pub fn out_bool(dims: &[usize]) -> (OperandType, Vec<u32>) {
    (
        OperandType::TensorBool8,
        dims.iter().map(|&d| d as u32).collect(),
    )
}

pub fn f32s(t: &HostTensor) -> Vec<f32> {
    t.to_f32_vec().expect("f32 output")
}

pub fn i32s(t: &HostTensor) -> Vec<i32> {
    assert_eq!(t.dtype, DataType::I32);
    t.data
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub fn bools(t: &HostTensor) -> Vec<bool> {
    assert_eq!(t.dtype, DataType::Bool);
    t.data.iter().map(|&b| b != 0).collect()
}

/// A float64 reference value with the sum of the absolute values of the terms that made
/// it (for sums and dot products; equal to |value| for elementwise results).
#[derive(Clone, Copy, Debug, Default)]
pub struct Ref {
    pub value: f64,
    pub abs_sum: f64,
}

impl Ref {
    pub fn exact(value: f64) -> Ref {
        Ref {
            value,
            abs_sum: value.abs(),
        }
    }
}

/// Checks float32 results against float64 references.
///
/// Tolerance: NNAPI's `atol = 1e-5`, `rtol = 5 * eps` (eps = 2^-23), with the relative
/// part applied to the sum of the absolute values of the terms (`abs_sum`) rather than
/// to the result alone. A float32 sum of K terms carries rounding error that grows with
/// the magnitude of its partial sums, not with the (possibly cancelled) result: the
/// worst case is about K * eps * abs_sum, the typical case (errors of random sign)
/// about sqrt(K) * eps * rms(partial sums), which for terms of random sign is of order
/// eps * abs_sum. With abs_sum ~ sqrt(K) * |result| for such terms this is NNAPI's
/// relative tolerance scaled by sqrt(K). Elementwise results (abs_sum = |value|) get
/// exactly NNAPI's tolerance.
pub fn assert_close(actual: &[f32], expected: &[Ref], context: &str) {
    assert_eq!(actual.len(), expected.len(), "{context}: length");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        let tol = 1e-5 + 5.0 * EPS * e.value.abs().max(e.abs_sum);
        let diff = (f64::from(*a) - e.value).abs();
        assert!(
            a.is_finite() && diff <= tol,
            "{context}: element {i}: got {a}, expected {} (diff {diff:e} > tol {tol:e})",
            e.value
        );
    }
}

/// [`assert_close`] for elementwise results.
pub fn assert_close_values(actual: &[f32], expected: &[f64], context: &str) {
    let refs: Vec<Ref> = expected.iter().map(|&v| Ref::exact(v)).collect();
    assert_close(actual, &refs, context);
}

/// NHWC <-> NCHW helpers for layout tests.
pub fn nhwc_to_nchw(x: &[f32], [n, h, w, c]: [usize; 4]) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for b in 0..n {
        for y in 0..h {
            for xx in 0..w {
                for ch in 0..c {
                    out[((b * c + ch) * h + y) * w + xx] = x[((b * h + y) * w + xx) * c + ch];
                }
            }
        }
    }
    out
}

pub fn nchw_to_nhwc(x: &[f32], [n, c, h, w]: [usize; 4]) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for b in 0..n {
        for ch in 0..c {
            for y in 0..h {
                for xx in 0..w {
                    out[((b * h + y) * w + xx) * c + ch] = x[((b * c + ch) * h + y) * w + xx];
                }
            }
        }
    }
    out
}

/// Applies a fused activation code to a reference value.
pub fn activation(code: i32, v: f64) -> f64 {
    match code {
        1 => v.max(0.0),
        2 => v.clamp(-1.0, 1.0),
        3 => v.clamp(0.0, 6.0),
        _ => v,
    }
}

/// TensorFlow's implicit padding for one axis: (output extent, padding before), or None
/// when the window does not fit.
pub fn implicit_pad(
    input: usize,
    kernel: usize,
    stride: usize,
    dilation: usize,
    same: bool,
) -> Option<(usize, usize)> {
    let eff = (kernel - 1) * dilation + 1;
    if same {
        let out = input.div_ceil(stride);
        let needed = ((out - 1) * stride + eff).saturating_sub(input);
        Some((out, needed / 2))
    } else {
        if input < eff {
            return None;
        }
        Some(((input - eff + 1).div_ceil(stride), 0))
    }
}

/// A `.nnc` file of one FULLY_CONNECTED: a [1, k] input (fixed values, returned to feed
/// it) times [n, k] weights and an [n] bias drawn from `seed`, written under `key` in
/// `mode` (unencrypted without a key).
pub fn fully_connected_file(
    k: usize,
    n: usize,
    seed: u64,
    key: Option<&nnc_formats::crypto::Key>,
    mode: nnc_formats::crypto::Mode,
) -> (Vec<u8>, Vec<HostTensor>) {
    let mut rng = Rng::new(seed);
    let (model, feeds) = single_op(
        OperationType::FullyConnected,
        vec![
            input_f32(&[1, k], &Rng::new(7).f32s(k)),
            const_f32(&[n, k], &rng.f32s(n * k)),
            const_f32(&[n], &rng.f32s(n)),
            Arg::I32(0),
        ],
        &[out_f32(&[1, n])],
    );
    (write_file(&model, key, mode), feeds)
}

/// The `.nnc` bytes of `model`, written under `key` in `mode` (unencrypted without a key).
pub fn write_file(
    model: &Model,
    key: Option<&nnc_formats::crypto::Key>,
    mode: nnc_formats::crypto::Mode,
) -> Vec<u8> {
    let options = nnc_formats::container::WriteOptions {
        envelope: Default::default(),
        key,
        mode,
        authenticate_only: false,
        reproducible: false,
        producer: "test".into(),
        arena: None,
        extra_sections: Vec::new(),
    };
    nnc_formats::container::write(model, &options).expect("writes")
}
