//! ONNX LpPool and GlobalLpPool: one-node models built here are lowered, run on the
//! simulated NPU and compared with a reference computed by plain loops.

mod common;

use common::{float_attr as float, float_value_info, int_attr as int, ints_attr as ints};
use nnc_compiler::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    attribute_proto::AttributeType,
};
use nnc_formats::nn::{Model, validate};
use nnc_formats::tensor::{DataType, HostTensor};

fn value_info(name: &str, dims: Option<&[usize]>) -> nnc_compiler::onnx::proto::ValueInfoProto {
    let dims: Option<Vec<i64>> = dims.map(|d| d.iter().map(|&v| v as i64).collect());
    float_value_info(name, dims.as_deref())
}

fn model(op: &str, opset: i64, shape: &[usize], attribute: Vec<AttributeProto>) -> ModelProto {
    let node = NodeProto {
        op_type: op.into(),
        name: "pool".into(),
        input: vec!["x".into()],
        output: vec!["y".into()],
        attribute,
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(GraphProto {
            node: vec![node],
            name: "g".into(),
            input: vec![value_info("x", Some(shape))],
            output: vec![value_info("y", None)],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn lower(m: &ModelProto) -> Result<Model, nnc_compiler::CompileError> {
    common::lower_onnx(m)
}

fn run(m: &ModelProto, shape: &[usize], x: &[f32]) -> (Vec<f32>, Vec<usize>) {
    let model = lower(m).expect("lowers");
    validate(&model).expect("valid model");
    let input = HostTensor {
        dtype: DataType::F32,
        shape: shape.to_vec(),
        data: x.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let outputs = common::run_on_npu(&model, &[input]);
    assert_eq!(outputs.len(), 1);
    let shape = outputs[0].shape.clone();
    (outputs[0].to_f32_vec().expect("float output"), shape)
}

/// Deterministic values of both signs, none zero.
fn data(count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| (((i * 7 + 3) % 23) as f32 - 11.5) / 8.0)
        .collect()
}

/// One spatial axis's window parameters.
#[derive(Clone, Copy)]
struct Win {
    kernel: usize,
    stride: usize,
    dilation: usize,
    pad_begin: usize,
    pad_end: usize,
    ceil: bool,
}

impl Win {
    fn new(kernel: usize, stride: usize, pad_begin: usize, pad_end: usize) -> Win {
        Win {
            kernel,
            stride,
            dilation: 1,
            pad_begin,
            pad_end,
            ceil: false,
        }
    }

    /// ONNX's output extent for an input extent of `input`.
    fn output(&self, input: usize) -> usize {
        let span = (self.kernel - 1) * self.dilation + 1;
        let room = input + self.pad_begin + self.pad_end - span;
        if self.ceil {
            let mut out = room.div_ceil(self.stride) + 1;
            if (out - 1) * self.stride >= input + self.pad_begin {
                out -= 1;
            }
            out
        } else {
            room / self.stride + 1
        }
    }
}

/// Plain-loop LpPool of an [n, c, h, w] input: padded positions are skipped (zeros).
fn reference(x: &[f32], shape: [usize; 4], wh: Win, ww: Win, p: f64) -> (Vec<f32>, Vec<usize>) {
    let [n, c, h, w] = shape;
    let (oh, ow) = (wh.output(h), ww.output(w));
    let mut out = Vec::with_capacity(n * c * oh * ow);
    for plane in 0..n * c {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut sum = 0f64;
                for ky in 0..wh.kernel {
                    let y = (oy * wh.stride + ky * wh.dilation) as i64 - wh.pad_begin as i64;
                    for kx in 0..ww.kernel {
                        let xx = (ox * ww.stride + kx * ww.dilation) as i64 - ww.pad_begin as i64;
                        if (0..h as i64).contains(&y) && (0..w as i64).contains(&xx) {
                            let v = x[plane * h * w + y as usize * w + xx as usize];
                            sum += f64::from(v).abs().powf(p);
                        }
                    }
                }
                out.push(sum.powf(1.0 / p) as f32);
            }
        }
    }
    (out, vec![n, c, oh, ow])
}

fn assert_close(got: &[f32], expected: &[f32], what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}: output size");
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        assert!(
            (g - e).abs() <= 1e-5 * e.abs().max(1.0),
            "{what}: element {i}: got {g}, expected {e}"
        );
    }
}

/// A 2-D LpPool at opset 18 with explicit pads [top, left, bottom, right].
fn check_2d(p: i64, shape: [usize; 4], wh: Win, ww: Win) {
    let x = data(shape.iter().product());
    let mut attrs = vec![
        ints("kernel_shape", &[wh.kernel as i64, ww.kernel as i64]),
        ints("strides", &[wh.stride as i64, ww.stride as i64]),
        ints(
            "pads",
            &[
                wh.pad_begin as i64,
                ww.pad_begin as i64,
                wh.pad_end as i64,
                ww.pad_end as i64,
            ],
        ),
        ints("dilations", &[wh.dilation as i64, ww.dilation as i64]),
        int("p", p),
    ];
    if wh.ceil {
        attrs.push(int("ceil_mode", 1));
    }
    let (got, got_shape) = run(&model("LpPool", 18, &shape, attrs), &shape, &x);
    let (expected, expected_shape) = reference(&x, shape, wh, ww, p as f64);
    let what = format!("p={p}");
    assert_eq!(got_shape, expected_shape, "{what}: output shape");
    assert_close(&got, &expected, &what);
}

#[test]
fn p1_with_padding_and_strides() {
    check_2d(1, [1, 2, 5, 6], Win::new(3, 2, 1, 1), Win::new(2, 2, 0, 1));
}

#[test]
fn p2_with_padding_and_strides() {
    check_2d(2, [2, 3, 6, 5], Win::new(3, 2, 1, 0), Win::new(3, 1, 2, 1));
}

#[test]
fn p3_with_padding_and_strides() {
    check_2d(3, [1, 2, 7, 7], Win::new(3, 3, 1, 1), Win::new(2, 2, 1, 0));
}

#[test]
fn dilation_and_ceil_mode() {
    let mut wh = Win::new(2, 2, 0, 0);
    wh.dilation = 2;
    wh.ceil = true;
    let mut ww = Win::new(3, 2, 1, 0);
    ww.ceil = true;
    check_2d(3, [1, 1, 6, 6], wh, ww);
}

#[test]
fn one_dimensional_same_upper() {
    let shape = [1usize, 2, 9];
    let x = data(18);
    let attrs = vec![
        ints("kernel_shape", &[4]),
        ints("strides", &[2]),
        string_attr("auto_pad", "SAME_UPPER"),
        int("p", 2),
    ];
    let (got, got_shape) = run(&model("LpPool", 11, &shape, attrs), &shape, &x);
    // SAME_UPPER: 5 outputs, 3 padding elements split 1 before, 2 after.
    let (expected, _) = reference(
        &x,
        [1, 2, 1, 9],
        Win::new(1, 1, 0, 0),
        Win::new(4, 2, 1, 2),
        2.0,
    );
    assert_eq!(got_shape, vec![1, 2, 5]);
    assert_close(&got, &expected, "1-D");
}

fn string_attr(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: Some(AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec().into()),
        ..Default::default()
    }
}

#[test]
fn opset1_float_exponent() {
    let shape = [1usize, 1, 4, 4];
    let x = data(16);
    let attrs = vec![ints("kernel_shape", &[2, 2]), float("p", 3.0)];
    let (got, _) = run(&model("LpPool", 1, &shape, attrs), &shape, &x);
    let w = Win::new(2, 1, 0, 0);
    let (expected, _) = reference(&x, shape, w, w, 3.0);
    assert_close(&got, &expected, "opset 1");
}

#[test]
fn global_lp_pool() {
    let shape = [2usize, 3, 4, 5];
    let x = data(shape.iter().product());
    for p in [1i64, 2, 3] {
        let (got, got_shape) = run(
            &model("GlobalLpPool", 2, &shape, vec![int("p", p)]),
            &shape,
            &x,
        );
        let (expected, _) = reference(
            &x,
            shape,
            Win::new(4, 1, 0, 0),
            Win::new(5, 1, 0, 0),
            p as f64,
        );
        assert_eq!(got_shape, vec![2, 3, 1, 1]);
        assert_close(&got, &expected, &format!("global p={p}"));
    }
}

#[test]
fn non_positive_p_is_refused() {
    let shape = [1usize, 1, 4, 4];
    let attrs = vec![ints("kernel_shape", &[2, 2]), int("p", 0)];
    let err = lower(&model("LpPool", 18, &shape, attrs)).expect_err("p = 0 is refused");
    assert!(err.to_string().contains("positive p"), "{err}");
}
