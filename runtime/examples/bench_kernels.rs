//! Times MobileNetV2-shaped layers through the full executor (one-operation programs,
//! so each time includes copying the output out of the arena) and the whole network as
//! one program; reports median and best times with GFLOP/s (2 x multiply-adds).
//! On a shared machine the best time is the better estimate of the kernel's speed.
//!
//! `cargo run --release -p nnc-runtime --example bench_kernels [-- --threads N]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use nnc_formats::nn::{IoInfo, Lifetime, Model, Operand, OperandType, OperationType};
use nnc_formats::tensor::DataType;
use nnc_runtime::{HostWeights, InputTensor, OutputBuffer, PrepareOptions, Program};

struct Layer {
    name: String,
    model: Model,
    input: Vec<usize>,
    output_len: usize,
    flops: f64,
}

fn pseudo_random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

fn finish(mut model: Model, input: u32, output: u32) -> Model {
    model.main.operands[input as usize].lifetime = Lifetime::SubgraphInput;
    model.main.operands[output as usize].lifetime = Lifetime::SubgraphOutput;
    model.main.inputs = vec![input];
    model.main.outputs = vec![output];
    let dims = |i: u32| model.main.operands[i as usize].dimensions.clone();
    model.input_info = vec![IoInfo {
        name: "input".into(),
        dtype: DataType::F32,
        dims: dims(input),
    }];
    model.output_info = vec![IoInfo {
        name: "output".into(),
        dtype: DataType::F32,
        dims: dims(output),
    }];
    model
}

/// CONV_2D (groups = 1) or DEPTHWISE_CONV_2D with implicit SAME padding and RELU6.
fn conv_layer(
    name: &str,
    [n, h, w, c]: [u32; 4],
    out_c: u32,
    k: u32,
    stride: u32,
    depthwise: bool,
) -> Layer {
    let mut m = Model::default();
    let input = m.add_operand(Operand::new(OperandType::TensorFloat32, vec![n, h, w, c]));
    let fdims = if depthwise {
        vec![1, k, k, out_c]
    } else {
        vec![out_c, k, k, c]
    };
    let flen: u32 = fdims.iter().product();
    let filter = m.add_f32_tensor(fdims, &pseudo_random(flen as usize, 1));
    let bias = m.add_f32_tensor(vec![out_c], &pseudo_random(out_c as usize, 2));
    let oh = h.div_ceil(stride);
    let ow = w.div_ceil(stride);
    let output = m.add_operand(Operand::new(
        OperandType::TensorFloat32,
        vec![n, oh, ow, out_c],
    ));
    let mut inputs = vec![
        input,
        filter,
        bias,
        m.add_i32(1),
        m.add_i32(stride as i32),
        m.add_i32(stride as i32),
    ];
    if depthwise {
        inputs.push(m.add_i32(1));
    }
    inputs.push(m.add_i32(3));
    let op = if depthwise {
        OperationType::DepthwiseConv2d
    } else {
        OperationType::Conv2d
    };
    m.add_operation(op, inputs, vec![output], name);
    let macs = f64::from(n * oh * ow * out_c)
        * f64::from(k * k)
        * if depthwise { 1.0 } else { f64::from(c) };
    Layer {
        name: name.to_string(),
        model: finish(m, input, output),
        input: vec![n as usize, h as usize, w as usize, c as usize],
        output_len: (n * oh * ow * out_c) as usize,
        flops: 2.0 * macs,
    }
}

fn fc_layer(name: &str, batch: u32, k: u32, units: u32) -> Layer {
    let mut m = Model::default();
    let input = m.add_operand(Operand::new(OperandType::TensorFloat32, vec![batch, k]));
    let weights = m.add_f32_tensor(vec![units, k], &pseudo_random((units * k) as usize, 3));
    let bias = m.add_f32_tensor(vec![units], &pseudo_random(units as usize, 4));
    let act = m.add_i32(0);
    let output = m.add_operand(Operand::new(OperandType::TensorFloat32, vec![batch, units]));
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
        flops: 2.0 * f64::from(batch * k * units),
    }
}

/// MobileNetV2 (width 1.0, 224x224, NHWC) with random weights: the whole network as one
/// program.
fn mobilenet_v2() -> Layer {
    let mut m = Model::default();
    let mut seed = 100;
    let mut rand = |n: usize| {
        seed += 1;
        // Small weights keep activations in a sane range through 50 layers.
        pseudo_random(n, seed)
            .iter()
            .map(|v| v * 0.2)
            .collect::<Vec<f32>>()
    };
    let input = m.add_operand(Operand::new(
        OperandType::TensorFloat32,
        vec![1, 224, 224, 3],
    ));
    // conv helper: returns the output operand.
    let mut conv = |m: &mut Model,
                    x: u32,
                    dims: [u32; 4],
                    out_c: u32,
                    k: u32,
                    s: u32,
                    dw: bool,
                    act: i32|
     -> (u32, [u32; 4]) {
        let [n, h, w, c] = dims;
        let fdims = if dw {
            vec![1, k, k, c]
        } else {
            vec![out_c, k, k, c]
        };
        let flen: u32 = fdims.iter().product();
        let f = m.add_f32_tensor(fdims, &rand(flen as usize));
        let b = m.add_f32_tensor(vec![out_c], &rand(out_c as usize));
        let (oh, ow) = (h.div_ceil(s), w.div_ceil(s));
        let out = m.add_operand(Operand::new(
            OperandType::TensorFloat32,
            vec![n, oh, ow, out_c],
        ));
        let mut inputs = vec![
            x,
            f,
            b,
            m.add_i32(1),
            m.add_i32(s as i32),
            m.add_i32(s as i32),
        ];
        if dw {
            inputs.push(m.add_i32(1));
        }
        inputs.push(m.add_i32(act));
        let op = if dw {
            OperationType::DepthwiseConv2d
        } else {
            OperationType::Conv2d
        };
        m.add_operation(op, inputs, vec![out], "");
        (out, [n, oh, ow, out_c])
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
            let block_in = x;
            let in_dims = dims;
            let (mut y, mut yd) = (x, dims);
            if t != 1 {
                (y, yd) = conv(&mut m, y, yd, yd[3] * t, 1, 1, false, 3);
            }
            (y, yd) = conv(&mut m, y, yd, yd[3], 3, stride, true, 3);
            (y, yd) = conv(&mut m, y, yd, c, 1, 1, false, 0);
            if stride == 1 && in_dims[3] == c {
                let sum = m.add_operand(Operand::new(OperandType::TensorFloat32, yd.to_vec()));
                let act = m.add_i32(0);
                m.add_operation(OperationType::Add, vec![y, block_in, act], vec![sum], "");
                y = sum;
            }
            x = y;
            dims = yd;
        }
    }
    (x, dims) = conv(&mut m, x, dims, 1280, 1, 1, false, 3);
    let pooled = m.add_operand(Operand::new(
        OperandType::TensorFloat32,
        vec![1, 1, 1, 1280],
    ));
    let args: Vec<u32> = [2, 1, 1, 7, 7, 0].iter().map(|&v| m.add_i32(v)).collect();
    m.add_operation(
        OperationType::AveragePool2d,
        [vec![x], args].concat(),
        vec![pooled],
        "",
    );
    let shape = m.add_i32_vector(&[1, 1280]);
    let flat = m.add_operand(Operand::new(OperandType::TensorFloat32, vec![1, 1280]));
    m.add_operation(OperationType::Reshape, vec![pooled, shape], vec![flat], "");
    let w = m.add_f32_tensor(vec![1000, 1280], &rand(1000 * 1280));
    let b = m.add_f32_tensor(vec![1000], &rand(1000));
    let act = m.add_i32(0);
    let logits = m.add_operand(Operand::new(OperandType::TensorFloat32, vec![1, 1000]));
    m.add_operation(
        OperationType::FullyConnected,
        vec![flat, w, b, act],
        vec![logits],
        "",
    );
    let beta = m.add_f32(1.0);
    let probs = m.add_operand(Operand::new(OperandType::TensorFloat32, vec![1, 1000]));
    m.add_operation(OperationType::Softmax, vec![logits, beta], vec![probs], "");
    let _ = dims;
    Layer {
        name: "MobileNetV2 end-to-end".into(),
        model: finish(m, input, probs),
        input: vec![1, 224, 224, 3],
        output_len: 1000,
        flops: 2.0 * 300.0e6,
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let threads = args
        .iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
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
        mobilenet_v2(),
    ];
    let filter = args
        .iter()
        .position(|a| a == "--filter")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_default();
    let layers: Vec<Layer> = layers
        .into_iter()
        .filter(|l| l.name.contains(&filter))
        .collect();
    println!("threads: {threads}");
    println!(
        "{:<28} {:>10} {:>10} {:>9} {:>10} {:>9}",
        "layer", "median ms", "GFLOP/s", "best ms", "GFLOP/s", "MFLOP"
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
        let input = pseudo_random(layer.input.iter().product(), 5);
        let mut output = vec![0f32; layer.output_len];
        let mut run = || -> Result<Duration, nnc_runtime::RuntimeError> {
            let start = Instant::now();
            program.execute(
                &[InputTensor::f32(&layer.input, &input)],
                &mut [OutputBuffer::f32(&mut output)],
            )?;
            Ok(start.elapsed())
        };
        for _ in 0..3 {
            run()?;
        }
        // At least 20 runs and about 0.3 s per layer.
        let mut times = Vec::new();
        let begin = Instant::now();
        while times.len() < 20
            || (begin.elapsed() < Duration::from_millis(300) && times.len() < 2000)
        {
            times.push(run()?);
        }
        let best = times.iter().min().copied().unwrap_or_default();
        let m = median(times);
        if whole {
            let arena = program.arena_size() as f64 / 1e6;
            let unplanned = program.unplanned_size() as f64 / 1e6;
            println!(
                "sum of layer medians above: {:.3} ms",
                total.as_secs_f64() * 1e3
            );
            println!(
                "MobileNetV2 arena {arena:.1} MB (without reuse {unplanned:.1} MB); ~300 M multiply-adds"
            );
        } else {
            total += m;
        }
        println!(
            "{:<28} {:>10.3} {:>10.1} {:>9.3} {:>10.1} {:>9.1}",
            layer.name,
            m.as_secs_f64() * 1e3,
            layer.flops / m.as_secs_f64() / 1e9,
            best.as_secs_f64() * 1e3,
            layer.flops / best.as_secs_f64() / 1e9,
            layer.flops / 1e6
        );
    }
    Ok(())
}
