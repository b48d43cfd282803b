//! Times MobileNetV2-shaped int8 layers (per-channel filters, TFLite-style quantization)
//! through the full executor, and the whole int8 network as one program; reports median
//! and best times with GOPS (2 x multiply-adds per second). Compare with
//! `bench_kernels`, which times the same shapes in float32.
//!
//! `cargo run --release -p nnc-runtime --example bench_quant [-- --threads N] [--filter S]`
//! (`--per-op` times each operation of the int8 network on its own, per type.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use nnc_formats::nn::{ChannelQuant, IoInfo, Lifetime, Model, Operand, OperandType, OperationType};
use nnc_formats::tensor::DataType;
use nnc_runtime::{HostWeights, InputTensor, OutputBuffer, PrepareOptions, Program};

const I8: OperandType = OperandType::TensorQuant8AsymmSigned;

struct Layer {
    name: String,
    model: Model,
    input: Vec<usize>,
    output_len: usize,
    ops: f64,
}

fn pseudo_random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // int8 values in [-100, 100], stored as bytes.
            (((s >> 40) % 201) as i32 - 100) as i8 as u8
        })
        .collect()
}

fn activation(dims: &[u32], scale: f32, zp: i32) -> Operand {
    Operand::new(I8, dims.to_vec()).with_quant(scale, zp)
}

fn finish(mut model: Model, input: u32, output: u32) -> Model {
    model.main.operands[input as usize].lifetime = Lifetime::SubgraphInput;
    model.main.operands[output as usize].lifetime = Lifetime::SubgraphOutput;
    model.main.inputs = vec![input];
    model.main.outputs = vec![output];
    let dims = |i: u32| model.main.operands[i as usize].dimensions.clone();
    model.input_info = vec![IoInfo {
        name: "input".into(),
        dtype: DataType::I8,
        dims: dims(input),
    }];
    model.output_info = vec![IoInfo {
        name: "output".into(),
        dtype: DataType::I8,
        dims: dims(output),
    }];
    model
}

/// Adds a per-channel int8 CONV_2D or DEPTHWISE_CONV_2D (SAME padding) and returns its
/// output operand and dims.
#[allow(clippy::too_many_arguments)]
fn add_conv(
    m: &mut Model,
    x: u32,
    dims: [u32; 4],
    out_c: u32,
    k: u32,
    stride: u32,
    depthwise: bool,
    act: i32,
    seed: u64,
) -> (u32, [u32; 4]) {
    let [n, h, w, c] = dims;
    let in_scale = m.main.operands[x as usize].scale;
    let fdims = if depthwise {
        vec![1, k, k, out_c]
    } else {
        vec![out_c, k, k, c]
    };
    let flen: u32 = fdims.iter().product();
    let scales: Vec<f32> = (0..out_c)
        .map(|i| 0.002 + 0.0005 * (i % 7) as f32)
        .collect();
    let mut fop = Operand::new(OperandType::TensorQuant8SymmPerChannel, fdims);
    fop.channel_quant = Some(ChannelQuant {
        scales: scales.clone(),
        channel_dim: if depthwise { 3 } else { 0 },
    });
    let filter = m.add_constant(fop, &pseudo_random_bytes(flen as usize, seed));
    let bias_values: Vec<i32> = (0..out_c as i32).map(|i| (i * 37) % 200 - 100).collect();
    let bias = m.add_constant(
        Operand::new(OperandType::TensorInt32, vec![out_c]).with_quant(in_scale * scales[0], 0),
        bytemuck::cast_slice(&bias_values),
    );
    let (oh, ow) = (h.div_ceil(stride), w.div_ceil(stride));
    let out = m.add_operand(activation(&[n, oh, ow, out_c], 0.05, -10));
    let mut inputs = vec![
        x,
        filter,
        bias,
        m.add_i32(1),
        m.add_i32(stride as i32),
        m.add_i32(stride as i32),
    ];
    if depthwise {
        inputs.push(m.add_i32(1));
    }
    inputs.push(m.add_i32(act));
    let op = if depthwise {
        OperationType::DepthwiseConv2d
    } else {
        OperationType::Conv2d
    };
    m.add_operation(op, inputs, vec![out], "");
    (out, [n, oh, ow, out_c])
}

fn conv_layer(
    name: &str,
    dims: [u32; 4],
    out_c: u32,
    k: u32,
    stride: u32,
    depthwise: bool,
) -> Layer {
    let mut m = Model::default();
    let input = m.add_operand(activation(&dims, 0.02, -5));
    let (output, [n, oh, ow, oc]) =
        add_conv(&mut m, input, dims, out_c, k, stride, depthwise, 3, 1);
    let macs = f64::from(n * oh * ow * oc)
        * f64::from(k * k)
        * if depthwise { 1.0 } else { f64::from(dims[3]) };
    Layer {
        name: name.to_string(),
        model: finish(m, input, output),
        input: dims.iter().map(|&d| d as usize).collect(),
        output_len: (n * oh * ow * oc) as usize,
        ops: 2.0 * macs,
    }
}

fn fc_layer(name: &str, batch: u32, k: u32, units: u32) -> Layer {
    let mut m = Model::default();
    let input = m.add_operand(activation(&[batch, k], 0.02, -5));
    let weights = m.add_constant(
        Operand::new(I8, vec![units, k]).with_quant(0.003, 0),
        &pseudo_random_bytes((units * k) as usize, 3),
    );
    let bias_values: Vec<i32> = (0..units as i32).map(|i| i % 100).collect();
    let bias = m.add_constant(
        Operand::new(OperandType::TensorInt32, vec![units]).with_quant(0.02 * 0.003, 0),
        bytemuck::cast_slice(&bias_values),
    );
    let act = m.add_i32(0);
    let output = m.add_operand(activation(&[batch, units], 0.1, 3));
    m.add_operation(
        OperationType::FullyConnected,
        vec![input, weights, bias, act],
        vec![output],
        name,
    );
    Layer {
        name: name.to_string(),
        model: finish(m, input, output),
        input: vec![batch as usize, k as usize],
        output_len: (batch * units) as usize,
        ops: 2.0 * f64::from(batch * k * units),
    }
}

/// ADD of two int8 tensors with different scales (a MobileNetV2 residual).
fn add_layer(name: &str, dims: [u32; 4]) -> Layer {
    let mut m = Model::default();
    let input = m.add_operand(activation(&dims, 0.02, -5));
    let n: u32 = dims.iter().product();
    let other = m.add_constant(
        activation(&dims, 0.03, 7),
        &pseudo_random_bytes(n as usize, 9),
    );
    let act = m.add_i32(0);
    let output = m.add_operand(activation(&dims, 0.04, -2));
    m.add_operation(
        OperationType::Add,
        vec![input, other, act],
        vec![output],
        name,
    );
    Layer {
        name: name.to_string(),
        model: finish(m, input, output),
        input: dims.iter().map(|&d| d as usize).collect(),
        output_len: n as usize,
        ops: f64::from(n),
    }
}

/// MobileNetV2 (width 1.0, 224x224) in int8 with random per-channel weights.
fn mobilenet_v2() -> Layer {
    let mut m = Model::default();
    let input = m.add_operand(activation(&[1, 224, 224, 3], 0.0078125, 0));
    let mut seed = 100;
    let mut conv = |m: &mut Model, x, dims, out_c, k, s, dw, act| {
        seed += 1;
        add_conv(m, x, dims, out_c, k, s, dw, act, seed)
    };
    let (mut x, mut dims) = conv(&mut m, input, [1, 224, 224, 3], 32, 3, 2, false, 3);
    let blocks: [(u32, u32, u32, u32); 7] = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ];
    for (t, c, n, s) in blocks {
        for i in 0..n {
            let stride = if i == 0 { s } else { 1 };
            let (block_in, in_dims) = (x, dims);
            let (mut y, mut yd) = (x, dims);
            if t != 1 {
                (y, yd) = conv(&mut m, y, yd, yd[3] * t, 1, 1, false, 3);
            }
            (y, yd) = conv(&mut m, y, yd, yd[3], 3, stride, true, 3);
            (y, yd) = conv(&mut m, y, yd, c, 1, 1, false, 0);
            if stride == 1 && in_dims[3] == c {
                let sum = m.add_operand(activation(&yd, 0.07, -3));
                let act = m.add_i32(0);
                m.add_operation(OperationType::Add, vec![y, block_in, act], vec![sum], "");
                y = sum;
            }
            x = y;
            dims = yd;
        }
    }
    (x, dims) = conv(&mut m, x, dims, 1280, 1, 1, false, 3);
    let pooled = m.add_operand(activation(&[1, 1, 1, 1280], 0.05, -10));
    let args: Vec<u32> = [2, 1, 1, 7, 7, 0].iter().map(|&v| m.add_i32(v)).collect();
    m.add_operation(
        OperationType::AveragePool2d,
        [vec![x], args].concat(),
        vec![pooled],
        "",
    );
    let shape = m.add_i32_vector(&[1, 1280]);
    let flat = m.add_operand(activation(&[1, 1280], 0.05, -10));
    m.add_operation(OperationType::Reshape, vec![pooled, shape], vec![flat], "");
    let w = m.add_constant(
        Operand::new(I8, vec![1000, 1280]).with_quant(0.003, 0),
        &pseudo_random_bytes(1000 * 1280, 7),
    );
    let bias_values = vec![0i32; 1000];
    let b = m.add_constant(
        Operand::new(OperandType::TensorInt32, vec![1000]).with_quant(0.05 * 0.003, 0),
        bytemuck::cast_slice(&bias_values),
    );
    let act = m.add_i32(0);
    let logits = m.add_operand(activation(&[1, 1000], 0.1, 0));
    m.add_operation(
        OperationType::FullyConnected,
        vec![flat, w, b, act],
        vec![logits],
        "",
    );
    let beta = m.add_f32(1.0);
    let probs = m.add_operand(activation(&[1, 1000], 1.0 / 256.0, -128));
    m.add_operation(OperationType::Softmax, vec![logits, beta], vec![probs], "");
    let _ = dims;
    Layer {
        name: "MobileNetV2 int8 end-to-end".into(),
        model: finish(m, input, probs),
        input: vec![1, 224, 224, 3],
        output_len: 1000,
        ops: 2.0 * 300.0e6,
    }
}

/// Operation `i` of `model` as a model of its own (its non-constant inputs become model
/// inputs, fed with random bytes).
fn single_operation(model: &Model, i: usize) -> (Model, Vec<Vec<usize>>) {
    let mut m = model.clone();
    let op = m.main.operations[i].clone();
    m.main.operations = vec![op.clone()];
    for operand in &mut m.main.operands {
        if matches!(
            operand.lifetime,
            Lifetime::SubgraphInput | Lifetime::SubgraphOutput
        ) {
            operand.lifetime = Lifetime::TemporaryVariable;
        }
    }
    let mut inputs = Vec::new();
    let mut shapes = Vec::new();
    for &o in &op.inputs {
        let operand = &mut m.main.operands[o as usize];
        if !operand.lifetime.is_constant() && operand.lifetime != Lifetime::NoValue {
            operand.lifetime = Lifetime::SubgraphInput;
            inputs.push(o);
            shapes.push(operand.dimensions.iter().map(|&d| d as usize).collect());
        }
    }
    for &o in &op.outputs {
        m.main.operands[o as usize].lifetime = Lifetime::SubgraphOutput;
    }
    m.main.inputs = inputs.clone();
    m.main.outputs = op.outputs.clone();
    let info = |o: u32| IoInfo {
        name: format!("t{o}"),
        dtype: DataType::I8,
        dims: m.main.operands[o as usize].dimensions.clone(),
    };
    m.input_info = inputs.iter().map(|&o| info(o)).collect();
    m.output_info = op.outputs.iter().map(|&o| info(o)).collect();
    (m, shapes)
}

/// Times every operation of the int8 MobileNetV2 on its own; prints the totals per
/// operation type.
fn per_operation(threads: usize, verbose: bool) -> Result<(), Box<dyn std::error::Error>> {
    let net = mobilenet_v2();
    let mut per_type: std::collections::BTreeMap<&str, (usize, Duration)> = Default::default();
    for i in 0..net.model.main.operations.len() {
        let (m, shapes) = single_operation(&net.model, i);
        let weights = Arc::new(HostWeights::new(&m)?);
        let program = Program::prepare(
            &m,
            weights,
            &PrepareOptions {
                threads,
                ..Default::default()
            },
        )?;
        let feeds: Vec<Vec<u8>> = shapes
            .iter()
            .map(|s| pseudo_random_bytes(s.iter().product(), 11))
            .collect();
        let out_len: usize = m.main.operands[m.main.outputs[0] as usize]
            .dimensions
            .iter()
            .map(|&d| d as usize)
            .product();
        let mut output = vec![0u8; out_len];
        let mut times = Vec::new();
        for _ in 0..15 {
            let inputs: Vec<InputTensor> = feeds
                .iter()
                .zip(&shapes)
                .map(|(f, s)| InputTensor::with_shape(s, f))
                .collect();
            let start = Instant::now();
            program.execute(&inputs, &mut [OutputBuffer::new(&mut output)])?;
            times.push(start.elapsed());
        }
        let best = times.iter().min().copied().unwrap_or_default();
        if verbose {
            let dims = |o: u32| m.main.operands[o as usize].dimensions.clone();
            let op = &m.main.operations[0];
            println!(
                "{:<18} {:?} -> {:?} (filter {:?}) {:>8.3} ms",
                op.op_type.name(),
                dims(op.inputs[0]),
                dims(op.outputs[0]),
                op.inputs.get(1).map(|&f| dims(f)),
                best.as_secs_f64() * 1e3
            );
        }
        let e = per_type
            .entry(m.main.operations[0].op_type.name())
            .or_default();
        e.0 += 1;
        e.1 += best;
    }
    let total: Duration = per_type.values().map(|v| v.1).sum();
    println!("int8 MobileNetV2, per operation type (best of 15 each):");
    for (name, (count, t)) in &per_type {
        println!(
            "{name:<20} {count:>3} ops {:>8.3} ms",
            t.as_secs_f64() * 1e3
        );
    }
    println!(
        "{:<20}         {:>8.3} ms",
        "total",
        total.as_secs_f64() * 1e3
    );
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let threads = value("--threads").and_then(|v| v.parse().ok()).unwrap_or(1);
    let filter = value("--filter").unwrap_or_default();
    // A fixed number of runs (for CPU-time measurements such as `perf stat`).
    let runs: Option<usize> = value("--runs").and_then(|v| v.parse().ok());
    if args.iter().any(|a| a == "--per-op") {
        return per_operation(threads, args.iter().any(|a| a == "--verbose"));
    }
    let layers = vec![
        conv_layer(
            "conv 3x3/2 224x224x3->32",
            [1, 224, 224, 3],
            32,
            3,
            2,
            false,
        ),
        conv_layer(
            "conv 1x1 112x112x32->16",
            [1, 112, 112, 32],
            16,
            1,
            1,
            false,
        ),
        conv_layer(
            "conv 1x1 112x112x16->96",
            [1, 112, 112, 16],
            96,
            1,
            1,
            false,
        ),
        conv_layer("conv 1x1 56x56x24->144", [1, 56, 56, 24], 144, 1, 1, false),
        conv_layer("conv 1x1 56x56x144->24", [1, 56, 56, 144], 24, 1, 1, false),
        conv_layer("conv 1x1 28x28x32->192", [1, 28, 28, 32], 192, 1, 1, false),
        conv_layer("conv 1x1 14x14x64->384", [1, 14, 14, 64], 384, 1, 1, false),
        conv_layer("conv 1x1 14x14x384->96", [1, 14, 14, 384], 96, 1, 1, false),
        conv_layer("conv 1x1 7x7x160->960", [1, 7, 7, 160], 960, 1, 1, false),
        conv_layer("conv 1x1 7x7x320->1280", [1, 7, 7, 320], 1280, 1, 1, false),
        conv_layer("dw 3x3/1 112x112x96", [1, 112, 112, 96], 96, 3, 1, true),
        conv_layer("dw 3x3/2 112x112x96", [1, 112, 112, 96], 96, 3, 2, true),
        conv_layer("dw 3x3/1 56x56x144", [1, 56, 56, 144], 144, 3, 1, true),
        conv_layer("dw 3x3/2 56x56x144", [1, 56, 56, 144], 144, 3, 2, true),
        conv_layer("dw 3x3/1 14x14x576", [1, 14, 14, 576], 576, 3, 1, true),
        conv_layer("conv 3x3/1 28x28x64->64", [1, 28, 28, 64], 64, 3, 1, false),
        fc_layer("fc 1280->1000", 1, 1280, 1000),
        add_layer("add 56x56x24", [1, 56, 56, 24]),
        mobilenet_v2(),
    ];
    let layers: Vec<Layer> = layers
        .into_iter()
        .filter(|l| l.name.contains(&filter))
        .collect();
    println!("threads: {threads}");
    println!(
        "{:<30} {:>10} {:>8} {:>9} {:>8} {:>9}",
        "layer", "median ms", "GOPS", "best ms", "GOPS", "MOP"
    );
    let mut total = Duration::ZERO;
    for layer in &layers {
        let whole = layer.name.starts_with("MobileNetV2");
        let weights = Arc::new(HostWeights::new(&layer.model)?);
        let program = Program::prepare(
            &layer.model,
            weights,
            &PrepareOptions {
                threads,
                ..Default::default()
            },
        )?;
        let input = pseudo_random_bytes(layer.input.iter().product(), 5);
        let mut output = vec![0u8; layer.output_len];
        let mut run = || -> Result<Duration, nnc_runtime::RuntimeError> {
            let start = Instant::now();
            program.execute(
                &[InputTensor::with_shape(&layer.input, &input)],
                &mut [OutputBuffer::new(&mut output)],
            )?;
            Ok(start.elapsed())
        };
        for _ in 0..3 {
            run()?;
        }
        // At least 20 runs and about 0.3 s per layer.
        let mut times = Vec::new();
        let begin = Instant::now();
        while times.len() < runs.unwrap_or(20)
            || (runs.is_none()
                && begin.elapsed() < Duration::from_millis(300)
                && times.len() < 2000)
        {
            times.push(run()?);
        }
        let best = times.iter().min().copied().unwrap_or_default();
        let m = median(times);
        if whole {
            println!(
                "sum of layer medians above: {:.3} ms",
                total.as_secs_f64() * 1e3
            );
        } else {
            total += m;
        }
        println!(
            "{:<30} {:>10.3} {:>8.1} {:>9.3} {:>8.1} {:>9.1}",
            layer.name,
            m.as_secs_f64() * 1e3,
            layer.ops / m.as_secs_f64() / 1e9,
            best.as_secs_f64() * 1e3,
            layer.ops / best.as_secs_f64() / 1e9,
            layer.ops / 1e6
        );
    }
    Ok(())
}
