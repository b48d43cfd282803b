//! Input preprocessing baked into the model (`--input-preprocess`): a float32 image input
//! becomes a uint8 input in the layout and colour order the application supplies, and
//! the model itself converts it, as rknn-toolkit2's mean/std and OpenVINO's
//! PrePostProcessor do.
//!
//! The rewritten input `u` (TENSOR_QUANT8_ASYMM with scale 1 and zero point 0, the NN
//! set's uint8) feeds a chain written in front of the graph:
//!
//! ```text
//! u -> [TRANSPOSE to the model's layout] -> [REVERSE channels (bgr)] -> CAST to float32
//!   -> [SUB mean] -> [DIV std] -> the model's former input
//! ```
//!
//! Data movement runs on the uint8 values (a quarter of the bytes of float32), and
//! `(x - mean) / std` is computed as written, so the result is exactly what the float
//! model computes from an application that normalised the image itself. Steps that do
//! nothing (mean 0, std 1, equal layouts, rgb) are left out.

use std::fmt;
use std::str::FromStr;

use nnc_formats::nn::{
    Lifetime, Model, Operand, OperandIndex, OperandType, Operation, OperationType,
};
use nnc_formats::tensor::DataType;

use crate::passes::graph::insert_operation;

/// The colour order the application supplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Colour {
    /// The channels in the model's own order (no reordering).
    Rgb,
    /// BGR, for a model that expects RGB: the channels are reversed.
    Bgr,
}

/// A 4-D image layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Nhwc,
    Nchw,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Nhwc => "nhwc",
            Layout::Nchw => "nchw",
        }
    }

    /// The channel axis.
    fn channel_axis(self) -> usize {
        match self {
            Layout::Nhwc => 3,
            Layout::Nchw => 1,
        }
    }
}

/// One input's preprocessing: `NAME=rgb|bgr[,mean=R,G,B][,std=R,G,B][,layout=nhwc|nchw]`.
#[derive(Clone, Debug, PartialEq)]
pub struct InputPreprocess {
    /// The model input (as the model names it).
    pub name: String,
    pub colour: Colour,
    /// Subtracted per channel, in the model's channel order (R, G, B): one value for
    /// every channel, or one per channel. Empty: nothing is subtracted.
    pub mean: Vec<f32>,
    /// Divided by per channel, like `mean`. Empty: no division.
    pub std: Vec<f32>,
    /// The layout the application supplies; `None`: the model's own.
    pub layout: Option<Layout>,
}

impl InputPreprocess {
    /// Plain uint8-to-float conversion of `name`, nothing else.
    pub fn new(name: impl Into<String>) -> InputPreprocess {
        InputPreprocess {
            name: name.into(),
            colour: Colour::Rgb,
            mean: Vec::new(),
            std: Vec::new(),
            layout: None,
        }
    }

    /// Whether the rewrite needs a 4-D, 3-channel input (to find its channel axis).
    fn needs_channels(&self) -> bool {
        self.colour == Colour::Bgr
            || self.layout.is_some()
            || self.mean.len() > 1
            || self.std.len() > 1
    }
}

impl fmt::Display for InputPreprocess {
    /// The command-line syntax, which [`InputPreprocess::from_str`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let colour = match self.colour {
            Colour::Rgb => "rgb",
            Colour::Bgr => "bgr",
        };
        write!(f, "{}={colour}", self.name)?;
        let list = |v: &[f32]| v.iter().map(f32::to_string).collect::<Vec<_>>().join(",");
        if !self.mean.is_empty() {
            write!(f, ",mean={}", list(&self.mean))?;
        }
        if !self.std.is_empty() {
            write!(f, ",std={}", list(&self.std))?;
        }
        if let Some(layout) = self.layout {
            write!(f, ",layout={}", layout.name())?;
        }
        Ok(())
    }
}

/// Why an `--input-preprocess` value cannot be read or applied. Each message starts with
/// the option as given.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PreprocessError {
    #[error(
        "--input-preprocess {option}: expected NAME=rgb|bgr[,mean=R,G,B][,std=R,G,B][,layout=nhwc|nchw]"
    )]
    Syntax { option: String },
    #[error(
        "--input-preprocess {option}: unknown item '{item}' (expected rgb, bgr, mean=, std= or layout=)"
    )]
    UnknownItem { option: String, item: String },
    #[error("--input-preprocess {option}: {key} is given twice")]
    Duplicate { option: String, key: &'static str },
    #[error("--input-preprocess {option}: {key} value '{value}' is not a number")]
    BadNumber {
        option: String,
        key: &'static str,
        value: String,
    },
    #[error("--input-preprocess {option}: {key} value {value} {problem}")]
    BadValue {
        option: String,
        key: &'static str,
        value: f32,
        problem: &'static str,
    },
    #[error("--input-preprocess {option}: {key} takes 1 or 3 values (R,G,B), got {count}")]
    Count {
        option: String,
        key: &'static str,
        count: usize,
    },
    #[error("--input-preprocess {option}: unknown layout '{value}' (expected nhwc or nchw)")]
    BadLayout { option: String, value: String },
    #[error(
        "--input-preprocess {option}: the model has no input '{name}'; its inputs are: {inputs}"
    )]
    UnknownInput {
        option: String,
        name: String,
        inputs: String,
    },
    #[error("--input-preprocess {option}: input '{name}' is given twice")]
    DuplicateInput { option: String, name: String },
    #[error(
        "--input-preprocess {option}: input '{name}' is {dtype}; preprocessing rewrites float32 inputs only"
    )]
    NotFloat32 {
        option: String,
        name: String,
        dtype: String,
    },
    #[error(
        "--input-preprocess {option}: input '{name}' has shape {dims}; {needs} needs a 4-D image input with 3 channels ([N,3,H,W] or [N,H,W,3])"
    )]
    NotImage {
        option: String,
        name: String,
        dims: String,
        needs: &'static str,
    },
    #[error(
        "--input-preprocess {option}: input '{name}' has shape {dims}: its channel axis cannot be told (both axis 1 and axis 3 have 3 elements)"
    )]
    AmbiguousLayout {
        option: String,
        name: String,
        dims: String,
    },
    #[error("--input-preprocess {option}: cannot rewrite input '{name}': {message}")]
    Graph {
        option: String,
        name: String,
        message: String,
    },
}

impl FromStr for InputPreprocess {
    type Err = PreprocessError;

    /// Reads `NAME=rgb|bgr[,mean=R,G,B][,std=R,G,B][,layout=nhwc|nchw]`: items are
    /// separated by commas, and a value list continues until the next `key=` item. The
    /// colour may be left out (rgb); the name is everything before the first `=`.
    fn from_str(s: &str) -> Result<InputPreprocess, PreprocessError> {
        let option = || s.to_string();
        let (name, rest) = s
            .split_once('=')
            .filter(|(name, _)| !name.is_empty())
            .ok_or_else(|| PreprocessError::Syntax { option: option() })?;
        let mut spec = InputPreprocess::new(name);
        let (mut colour, mut mean, mut std, mut layout) = (None, None, None, None);
        // The list the last `mean=`/`std=` item opened, which bare numbers continue.
        let mut open: Option<&'static str> = None;
        for item in rest.split(',').map(str::trim) {
            let (key, value) = match item.split_once('=') {
                Some((key, value)) => (key.trim(), Some(value.trim())),
                None => (item, None),
            };
            let list = match (key, value) {
                ("rgb" | "bgr", None) => {
                    open = None;
                    if colour.is_some() {
                        return Err(PreprocessError::Duplicate {
                            option: option(),
                            key: "the colour (rgb or bgr)",
                        });
                    }
                    colour = Some(if key == "rgb" {
                        Colour::Rgb
                    } else {
                        Colour::Bgr
                    });
                    continue;
                }
                ("layout", Some(value)) => {
                    open = None;
                    if layout.is_some() {
                        return Err(PreprocessError::Duplicate {
                            option: option(),
                            key: "layout",
                        });
                    }
                    layout = Some(match value.to_ascii_lowercase().as_str() {
                        "nhwc" => Layout::Nhwc,
                        "nchw" => Layout::Nchw,
                        _ => {
                            return Err(PreprocessError::BadLayout {
                                option: option(),
                                value: value.to_string(),
                            });
                        }
                    });
                    continue;
                }
                ("mean" | "std", Some(_)) => {
                    let key = if key == "mean" { "mean" } else { "std" };
                    let seen = if key == "mean" { &mean } else { &std };
                    if seen.is_some() {
                        return Err(PreprocessError::Duplicate {
                            option: option(),
                            key,
                        });
                    }
                    open = Some(key);
                    key
                }
                // A bare number continues the open list.
                (_, None) if open.is_some() => open.unwrap_or("mean"),
                _ => {
                    return Err(PreprocessError::UnknownItem {
                        option: option(),
                        item: item.to_string(),
                    });
                }
            };
            let text = value.unwrap_or(item);
            let number: f32 = text.parse().map_err(|_| PreprocessError::BadNumber {
                option: option(),
                key: list,
                value: text.to_string(),
            })?;
            let slot = if list == "mean" { &mut mean } else { &mut std };
            slot.get_or_insert_with(Vec::new).push(number);
        }
        spec.colour = colour.unwrap_or(Colour::Rgb);
        spec.mean = mean.unwrap_or_default();
        spec.std = std.unwrap_or_default();
        spec.layout = layout;
        check_values(&spec, &option())?;
        Ok(spec)
    }
}

/// Counts and values of mean and std: 1 or 3 finite values, std nonzero.
fn check_values(spec: &InputPreprocess, option: &str) -> Result<(), PreprocessError> {
    for (key, values) in [("mean", &spec.mean), ("std", &spec.std)] {
        if !values.is_empty() && values.len() != 1 && values.len() != 3 {
            return Err(PreprocessError::Count {
                option: option.to_string(),
                key,
                count: values.len(),
            });
        }
        for &value in values {
            let problem = if !value.is_finite() {
                "is not finite"
            } else if key == "std" && value == 0.0 {
                "is zero (it divides)"
            } else {
                continue;
            };
            return Err(PreprocessError::BadValue {
                option: option.to_string(),
                key,
                value,
                problem,
            });
        }
    }
    Ok(())
}

/// Dimensions as `[1, 3, ?, ?]` (`?`: known at run time only).
fn show_dims(dims: &[u32]) -> String {
    let dims: Vec<String> = dims
        .iter()
        .map(|&d| if d == 0 { "?".into() } else { d.to_string() })
        .collect();
    format!("[{}]", dims.join(", "))
}

/// Rewrites every input `specs` names (see [`apply`]); an input named twice is refused.
pub fn apply_all(model: &mut Model, specs: &[InputPreprocess]) -> Result<(), PreprocessError> {
    for (k, spec) in specs.iter().enumerate() {
        if specs[..k].iter().any(|s| s.name == spec.name) {
            return Err(PreprocessError::DuplicateInput {
                option: spec.to_string(),
                name: spec.name.clone(),
            });
        }
        apply(model, spec)?;
    }
    Ok(())
}

/// Rewrites the float32 input `spec.name` of `model` into a uint8 input in the layout
/// the application supplies, with the conversion written in front of the graph. The
/// model's [`nnc_formats::nn::IoInfo`] for the input becomes uint8 with the new shape.
pub fn apply(model: &mut Model, spec: &InputPreprocess) -> Result<(), PreprocessError> {
    let option = spec.to_string();
    check_values(spec, &option)?;
    let Some(k) = model.input_info.iter().position(|i| i.name == spec.name) else {
        let inputs: Vec<&str> = model.input_info.iter().map(|i| i.name.as_str()).collect();
        return Err(PreprocessError::UnknownInput {
            option,
            name: spec.name.clone(),
            inputs: inputs.join(", "),
        });
    };
    let graph_error = |message: String| PreprocessError::Graph {
        option: spec.to_string(),
        name: spec.name.clone(),
        message,
    };
    let x = *model
        .main
        .inputs
        .get(k)
        .ok_or_else(|| graph_error("the model has fewer graph inputs than declared".into()))?;
    let operand = model.main.operands[x as usize].clone();
    if model.input_info[k].dtype != DataType::F32
        || operand.operand_type != OperandType::TensorFloat32
    {
        return Err(PreprocessError::NotFloat32 {
            option,
            name: spec.name.clone(),
            dtype: model.input_info[k].dtype.to_string(),
        });
    }
    let dims = operand.dimensions.clone();
    let shown = show_dims(&dims);
    // The model's layout, when the rewrite needs to know where the channels are.
    let model_layout = if spec.needs_channels() {
        let needs = if spec.colour == Colour::Bgr {
            "bgr"
        } else if spec.layout.is_some() {
            "layout="
        } else {
            "a mean or std per channel"
        };
        let not_image = || PreprocessError::NotImage {
            option: option.clone(),
            name: spec.name.clone(),
            dims: shown.clone(),
            needs,
        };
        if dims.len() != 4 {
            return Err(not_image());
        }
        match (dims[1] == 3, dims[3] == 3) {
            (true, true) => {
                return Err(PreprocessError::AmbiguousLayout {
                    option,
                    name: spec.name.clone(),
                    dims: shown,
                });
            }
            (true, false) => Some(Layout::Nchw),
            (false, true) => Some(Layout::Nhwc),
            (false, false) => return Err(not_image()),
        }
    } else {
        None
    };

    // The application's input: uint8 in its own layout.
    let (perm, app_dims): (Option<[i32; 4]>, Vec<u32>) = match (spec.layout, model_layout) {
        (Some(Layout::Nhwc), Some(Layout::Nchw)) => {
            (Some([0, 3, 1, 2]), vec![dims[0], dims[2], dims[3], dims[1]])
        }
        (Some(Layout::Nchw), Some(Layout::Nhwc)) => {
            (Some([0, 2, 3, 1]), vec![dims[0], dims[3], dims[1], dims[2]])
        }
        _ => (None, dims.clone()),
    };
    let mut input = Operand::new(OperandType::TensorQuant8Asymm, app_dims.clone())
        .with_quant(1.0, 0)
        .with_name(operand.name.clone());
    input.lifetime = Lifetime::SubgraphInput;
    let u = model.add_operand(input);

    // Per-channel constants broadcast against the model's layout: [C] in NHWC, [C,1,1]
    // in NCHW; a single value is a one-element tensor.
    let per_channel = |values: &[f32]| -> Vec<u32> {
        match (values.len(), model_layout) {
            (3, Some(Layout::Nchw)) => vec![3, 1, 1],
            (n, _) => vec![n as u32],
        }
    };
    let source = format!("input-preprocess:{}", spec.name);
    let uint8 = Operand::new(OperandType::TensorQuant8Asymm, vec![]).with_quant(1.0, 0);
    let float = Operand::new(OperandType::TensorFloat32, vec![]);
    let mut steps: Vec<(OperationType, Vec<OperandIndex>, &Operand)> = Vec::new();
    if let Some(perm) = perm {
        let p = model.add_i32_vector(&perm);
        steps.push((OperationType::Transpose, vec![p], &uint8));
    }
    if spec.colour == Colour::Bgr {
        let axis = model_layout.map_or(1, Layout::channel_axis) as i32;
        let a = model.add_i32_vector(&[axis]);
        steps.push((OperationType::Reverse, vec![a], &uint8));
    }
    steps.push((OperationType::Cast, vec![], &float));
    if spec.mean.iter().any(|&m| m != 0.0) {
        let c = model.add_f32_tensor(per_channel(&spec.mean), &spec.mean);
        let act = model.add_i32(0);
        steps.push((OperationType::Sub, vec![c, act], &float));
    }
    if spec.std.iter().any(|&s| s != 1.0) {
        let c = model.add_f32_tensor(per_channel(&spec.std), &spec.std);
        let act = model.add_i32(0);
        steps.push((OperationType::Div, vec![c, act], &float));
    }

    // Written at the front, in order: each step reads the previous one's result; the
    // last writes the former input operand, so its readers stay as they are.
    let last = steps.len() - 1;
    let mut current = u;
    for (position, (op_type, rest, template)) in steps.into_iter().enumerate() {
        let mut inputs = vec![current];
        inputs.extend(rest);
        if position == last {
            model.main.operations.insert(
                position,
                Operation {
                    op_type,
                    inputs,
                    outputs: vec![x],
                    source: source.clone(),
                },
            );
        } else {
            current = insert_operation(
                model,
                position,
                op_type,
                inputs,
                std::slice::from_ref(template),
                &source,
            )
            .map_err(graph_error)?[0];
        }
    }

    let former = &mut model.main.operands[x as usize];
    former.lifetime = if model.main.outputs.contains(&x) {
        Lifetime::SubgraphOutput
    } else {
        Lifetime::TemporaryVariable
    };
    former.name = format!("{}:preprocessed", spec.name);
    model.main.inputs[k] = u;
    let info = &mut model.input_info[k];
    info.dtype = DataType::U8;
    info.dims = app_dims;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use nnc_formats::nn::{IoInfo, validate};
    use nnc_formats::tensor::HostTensor;
    use nnc_runtime::{HostWeights, PrepareOptions, Program};

    use super::*;
    use crate::pipeline::{LowerOptions, SourceFormat, lower_bytes};

    fn parse(s: &str) -> InputPreprocess {
        match s.parse() {
            Ok(spec) => spec,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    fn parse_err(s: &str) -> String {
        match s.parse::<InputPreprocess>() {
            Ok(spec) => panic!("{s} was accepted as {spec:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn reads_the_full_syntax_and_writes_it_back() {
        let spec =
            parse("input=bgr,mean=123.675,116.28,103.53,std=58.395,57.12,57.375,layout=nhwc");
        assert_eq!(spec.name, "input");
        assert_eq!(spec.colour, Colour::Bgr);
        assert_eq!(spec.mean, [123.675, 116.28, 103.53]);
        assert_eq!(spec.std, [58.395, 57.12, 57.375]);
        assert_eq!(spec.layout, Some(Layout::Nhwc));
        assert_eq!(parse(&spec.to_string()), spec);
    }

    #[test]
    fn mean_and_std_default_to_nothing() {
        let spec = parse("x=rgb");
        assert_eq!(spec, InputPreprocess::new("x"));
        // Items in any order; one value for all channels; the colour defaults to rgb.
        let spec = parse("x=layout=NCHW,std=255,mean=0.5");
        assert_eq!(
            (spec.colour, spec.layout),
            (Colour::Rgb, Some(Layout::Nchw))
        );
        assert_eq!(
            (spec.mean.as_slice(), spec.std.as_slice()),
            (&[0.5][..], &[255.0][..])
        );
    }

    #[test]
    fn bad_values_name_the_option_and_the_problem() {
        let cases = [
            ("rgb", "expected NAME=rgb|bgr"),
            ("=rgb", "expected NAME=rgb|bgr"),
            ("x=rgb,mean=1,2", "mean takes 1 or 3 values (R,G,B), got 2"),
            (
                "x=rgb,std=1,2,3,4",
                "std takes 1 or 3 values (R,G,B), got 4",
            ),
            ("x=rgb,mean=1,two,3", "mean value 'two' is not a number"),
            ("x=rgb,std=1,0,1", "std value 0 is zero"),
            ("x=rgb,mean=inf", "mean value inf is not finite"),
            ("x=rgb,std=NaN", "std value NaN is not finite"),
            ("x=hsv", "unknown item 'hsv'"),
            ("x=rgb,scale=2", "unknown item 'scale=2'"),
            ("x=rgb,layout=chw", "unknown layout 'chw'"),
            ("x=rgb,bgr", "the colour (rgb or bgr) is given twice"),
            ("x=rgb,mean=1,mean=2", "mean is given twice"),
            ("x=rgb,mean=", "mean value '' is not a number"),
        ];
        for (text, problem) in cases {
            let message = parse_err(text);
            assert!(
                message.starts_with(&format!("--input-preprocess {text}: ")),
                "{message}"
            );
            assert!(message.contains(problem), "{text}: {message}");
        }
    }

    fn tiny_cnn() -> bytes::Bytes {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/models/tiny_cnn.onnx"
        );
        std::fs::read(path)
            .expect("testdata/models/tiny_cnn.onnx")
            .into()
    }

    fn lower(specs: Vec<InputPreprocess>, no_optimize: bool) -> Result<Model, crate::CompileError> {
        let options = LowerOptions {
            no_optimize,
            input_preprocess: specs,
            ..Default::default()
        };
        let ext = crate::onnx::tensor::ExternalDataContext::none();
        Ok(lower_bytes(tiny_cnn(), SourceFormat::Onnx, &ext, &options)?.model)
    }

    fn run(model: &Model, input: HostTensor) -> Vec<f32> {
        let weights = Arc::new(HostWeights::new(model).expect("weights"));
        let options = PrepareOptions {
            threads: 1,
            ..Default::default()
        };
        let program = Program::prepare(model, weights, &options).expect("prepare");
        let outputs = program.execute_host(&[input]).expect("execute");
        outputs[0].to_f32_vec().expect("float output")
    }

    /// A deterministic image with values over the whole 0..=255 range.
    fn image(count: usize) -> Vec<u8> {
        (0..count).map(|i| ((i * 7919 + 13) % 256) as u8).collect()
    }

    const MEAN: [f32; 3] = [123.675, 116.28, 103.53];
    const STD: [f32; 3] = [58.395, 57.12, 57.375];

    fn assert_close(actual: &[f32], expected: &[f32]) {
        assert_eq!(actual.len(), expected.len());
        for (k, (a, e)) in actual.iter().zip(expected).enumerate() {
            assert!((a - e).abs() <= 1e-5, "output {k}: {a} against {e}");
        }
    }

    #[test]
    fn a_bgr_nhwc_uint8_image_gives_the_float_models_output() {
        let spec =
            parse("input=bgr,mean=123.675,116.28,103.53,std=58.395,57.12,57.375,layout=nhwc");
        let model = lower(vec![spec], false).expect("lowers");
        validate(&model).expect("valid");
        assert_eq!(model.input_info[0].dtype, DataType::U8);
        assert_eq!(model.input_info[0].dims, [1, 32, 32, 3]);

        // The application's BGR image, NHWC.
        let (h, w) = (32, 32);
        let bgr = image(h * w * 3);
        // What the float model is fed: RGB, NCHW, normalised.
        let mut normalised = vec![0f32; 3 * h * w];
        for y in 0..h {
            for x in 0..w {
                for c in 0..3 {
                    let value = f32::from(bgr[(y * w + x) * 3 + (2 - c)]);
                    normalised[(c * h + y) * w + x] = (value - MEAN[c]) / STD[c];
                }
            }
        }
        let float_model = lower(Vec::new(), false).expect("lowers");
        let expected = run(
            &float_model,
            HostTensor::from_f32(vec![1, 3, h, w], &normalised).expect("tensor"),
        );
        let actual = run(
            &model,
            HostTensor::new(DataType::U8, vec![1, h, w, 3], bgr).expect("tensor"),
        );
        assert_close(&actual, &expected);
        // Not a constant model: another image gives another answer.
        let other = run(
            &model,
            HostTensor::new(DataType::U8, vec![1, h, w, 3], vec![0; h * w * 3]).expect("tensor"),
        );
        assert!(other.iter().zip(&actual).any(|(a, b)| (a - b).abs() > 1e-4));
    }

    #[test]
    fn the_rewritten_model_survives_the_container_and_loads_as_uint8() {
        let spec =
            parse("input=bgr,mean=123.675,116.28,103.53,std=58.395,57.12,57.375,layout=nhwc");
        let model = lower(vec![spec], false).expect("lowers");
        let bytes = crate::emit::emit(
            &model,
            crate::emit::EmitOptions {
                key: None,
                mode: nnc_formats::crypto::Mode::Ctr,
                authenticate_only: false,
                reproducible: true,
                extra_sections: Vec::new(),
                envelope: Default::default(),
            },
        )
        .expect("emits");
        let devices = nnc_runtime::Devices::new(vec![nnc_runtime::SimulatedNpu::new("npu0")])
            .expect("devices");
        let prepared = nnc_runtime::PreparedModel::load_bytes(bytes, &devices, &Default::default())
            .expect("loads");
        assert_eq!(prepared.inputs()[0].dtype, DataType::U8);
        assert_eq!(prepared.inputs()[0].dims, [1, 32, 32, 3]);
        let pixels = image(32 * 32 * 3);
        let outputs = prepared
            .run(&[
                HostTensor::new(DataType::U8, vec![1, 32, 32, 3], pixels.clone()).expect("tensor"),
            ])
            .expect("runs");
        let direct = run(
            &model,
            HostTensor::new(DataType::U8, vec![1, 32, 32, 3], pixels).expect("tensor"),
        );
        assert_close(&outputs[0].to_f32_vec().expect("float"), &direct);
    }

    #[test]
    fn the_chain_is_written_in_front_of_the_graph() {
        let spec = parse("input=bgr,mean=1,2,3,std=4,layout=nhwc");
        let model = lower(vec![spec], true).expect("lowers");
        validate(&model).expect("valid");
        let ops: Vec<&str> = model.main.operations[..5]
            .iter()
            .map(|o| o.op_type.name())
            .collect();
        assert_eq!(ops, ["TRANSPOSE", "REVERSE", "CAST", "SUB", "DIV"]);
        let u = model.main.inputs[0];
        assert_eq!(model.main.operations[0].inputs[0], u);
        let input = &model.main.operands[u as usize];
        assert_eq!(input.operand_type, OperandType::TensorQuant8Asymm);
        assert_eq!(input.dimensions, [1, 32, 32, 3]);
        // The reversal runs on the model's (NCHW) channel axis.
        let axis = model.main.operations[1].inputs[1];
        assert_eq!(model.constant_bytes(axis), Some(&1i32.to_le_bytes()[..]));
        // The last step writes the former input, which the first convolution still reads.
        let former = model.main.operations[4].outputs[0];
        assert_eq!(
            model.main.operands[former as usize].lifetime,
            Lifetime::TemporaryVariable
        );
        assert!(
            model.main.operations[5..]
                .iter()
                .any(|o| o.inputs.contains(&former))
        );
    }

    #[test]
    fn steps_that_do_nothing_are_left_out() {
        let model = lower(vec![parse("input=rgb,std=1")], true).expect("lowers");
        validate(&model).expect("valid");
        assert_eq!(model.main.operations[0].op_type, OperationType::Cast);
        assert_ne!(model.main.operations[1].op_type, OperationType::Div);
        assert_eq!(model.input_info[0].dims, [1, 3, 32, 32]);
    }

    /// x [1,2,2,3] (NHWC) times [1, 10, 100] per channel.
    fn nhwc_model() -> Model {
        let mut model = Model::default();
        let x = model
            .main
            .add_input(Operand::new(OperandType::TensorFloat32, vec![1, 2, 2, 3]).with_name("x"));
        let scale = model.add_f32_tensor(vec![3], &[1.0, 10.0, 100.0]);
        let act = model.add_i32(0);
        let y = model
            .main
            .add_output(Operand::new(OperandType::TensorFloat32, vec![1, 2, 2, 3]).with_name("y"));
        model.add_operation(OperationType::Mul, vec![x, scale, act], vec![y], "mul");
        model.input_info.push(IoInfo {
            name: "x".into(),
            dtype: DataType::F32,
            dims: vec![1, 2, 2, 3],
        });
        model.output_info.push(IoInfo {
            name: "y".into(),
            dtype: DataType::F32,
            dims: vec![1, 2, 2, 3],
        });
        validate(&model).expect("the test model is valid");
        model
    }

    #[test]
    fn an_nchw_bgr_image_into_an_nhwc_model() {
        let mut model = nhwc_model();
        apply(&mut model, &parse("x=bgr,mean=1,2,3,std=2,layout=nchw")).expect("applies");
        validate(&model).expect("valid");
        assert_eq!(model.input_info[0].dims, [1, 3, 2, 2]);
        // NCHW planes: B, G, R, each 2x2.
        let image: Vec<u8> = vec![10, 11, 12, 13, 20, 21, 22, 23, 30, 31, 32, 33];
        let out = run(
            &model,
            HostTensor::new(DataType::U8, vec![1, 3, 2, 2], image).expect("tensor"),
        );
        let mut expected = Vec::new();
        for p in 0..4 {
            let (r, g, b) = (30.0 + p as f32, 20.0 + p as f32, 10.0 + p as f32);
            expected.extend([
                (r - 1.0) / 2.0,
                (g - 2.0) / 2.0 * 10.0,
                (b - 3.0) / 2.0 * 100.0,
            ]);
        }
        assert_close(&out, &expected);
    }

    #[test]
    fn scalar_mean_and_std_need_no_image_shape() {
        let mut model = nhwc_model();
        // A [1,2,2,3] input is not told apart from NCHW only when channels are needed.
        apply(&mut model, &parse("x=rgb,mean=128,std=128")).expect("applies");
        validate(&model).expect("valid");
        let out = run(
            &model,
            HostTensor::new(
                DataType::U8,
                vec![1, 2, 2, 3],
                vec![0, 128, 255, 64, 192, 128, 0, 0, 0, 255, 255, 255],
            )
            .expect("tensor"),
        );
        assert_eq!(out[..3], [-1.0, 0.0, 100.0 * 127.0 / 128.0]);
    }

    #[test]
    fn the_model_is_checked_against_the_option() {
        let mut model = nhwc_model();
        let e = apply(&mut model, &parse("image=rgb"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--input-preprocess image=rgb: the model has no input 'image'; its inputs are: x"
        );

        let mut ambiguous = nhwc_model();
        ambiguous.main.operands[0].dimensions = vec![1, 3, 4, 3];
        let e = apply(&mut ambiguous, &parse("x=bgr")).unwrap_err();
        assert!(matches!(e, PreprocessError::AmbiguousLayout { .. }), "{e}");

        let mut flat = nhwc_model();
        flat.main.operands[0].dimensions = vec![4, 3];
        let e = apply(&mut flat, &parse("x=rgb,mean=1,2,3"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("input 'x' has shape [4, 3]; a mean or std per channel needs a 4-D image input with 3 channels"), "{e}");

        let mut four = nhwc_model();
        four.main.operands[0].dimensions = vec![1, 2, 2, 4];
        let e = apply(&mut four, &parse("x=rgb,layout=nchw"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("layout= needs a 4-D image input with 3 channels"),
            "{e}"
        );

        let mut int = nhwc_model();
        int.input_info[0].dtype = DataType::U8;
        let e = apply(&mut int, &parse("x=rgb")).unwrap_err().to_string();
        assert!(
            e.contains("input 'x' is uint8; preprocessing rewrites float32 inputs only"),
            "{e}"
        );

        // Nothing changed by a refused rewrite.
        assert_eq!(model, nhwc_model());
        let twice = [parse("x=rgb"), parse("x=bgr")];
        let e = apply_all(&mut model, &twice).unwrap_err();
        assert!(matches!(e, PreprocessError::DuplicateInput { .. }), "{e}");
    }

    #[test]
    fn errors_reach_the_compile_pipeline() {
        let Err(e) = lower(vec![parse("data=rgb")], true) else {
            panic!("an unknown input was accepted");
        };
        assert!(
            e.to_string()
                .contains("the model has no input 'data'; its inputs are: input"),
            "{e}"
        );
    }
}
