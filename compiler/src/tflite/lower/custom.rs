//! The lowerings of TFLite custom operators (their rows, with names, versions and
//! input and output counts, are in `registry.rs`).
//!
//! The operators are MediaPipe's (`mediapipe/util/tflite/operations/`), which its
//! published models use. Each is lowered to NN operations when the set computes it
//! exactly (Convolution2DTransposeBias is TRANSPOSE_CONV_2D with a bias) and otherwise
//! to an operation of nnc's `org.nnc.core` extension (`docs/EXTENSIONS.md`).
//!
//! Options come in the encoding each operator defines: a packed C struct
//! (TfLiteTransposeConvParams, TfLitePoolParams: little-endian int32 fields) or a
//! flexbuffer map. Both are read with every length checked; an option nnc cannot
//! honour refuses the operator, naming the option.

use nnc_formats::nn::ops::{Hw, Pool2d, TransposeConv2d, TransposePadding, WindowPadding};
use nnc_formats::nn::{FusedActivation, Operand, OperandType, OperationType, PaddingScheme};

use super::super::flexbuffer::{self, Map, Value as Flex};
use super::super::model::OperatorDesc;
use super::conv::window_padding;
use super::{Act, Lowerer, OResult, Role, Value, invalid, unsupported};

/// The custom operator's options bytes (empty when it has none).
fn options<'a>(op: &OperatorDesc<'a>) -> &'a [u8] {
    op.fb.custom_options().map_or(&[], |v| v.bytes())
}

/// Little-endian int32 fields of a packed options struct: the first `names.len()`.
fn packed_fields(op: &OperatorDesc, struct_name: &str, names: &[&str]) -> OResult<Vec<i32>> {
    let bytes = options(op);
    if bytes.len() < 4 * names.len() {
        return invalid(format!(
            "custom options hold {} bytes, too few for {struct_name} ({} int32 fields: {})",
            bytes.len(),
            names.len(),
            names.join(", ")
        ));
    }
    Ok(bytes
        .chunks_exact(4)
        .take(names.len())
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// TfLitePadding: 1 SAME, 2 VALID.
fn padding_option(v: i32) -> OResult<PaddingScheme> {
    match v {
        1 => Ok(PaddingScheme::Same),
        2 => Ok(PaddingScheme::Valid),
        _ => invalid(format!(
            "option padding is {v}; expected 1 (SAME) or 2 (VALID)"
        )),
    }
}

fn positive_option(v: i32, name: &str) -> OResult<u32> {
    if v >= 1 {
        Ok(v as u32)
    } else {
        invalid(format!("option {name} must be >= 1, got {v}"))
    }
}

/// The options of MediaPipe's pooling operators (TfLitePoolParams).
struct PoolOptions {
    padding: i32,
    stride: (u32, u32),
    filter: (u32, u32),
    activation: i32,
}

fn pool_options(op: &OperatorDesc) -> OResult<PoolOptions> {
    let f = packed_fields(
        op,
        "TfLitePoolParams",
        &[
            "padding",
            "stride_width",
            "stride_height",
            "filter_width",
            "filter_height",
            "activation",
        ],
    )?;
    Ok(PoolOptions {
        padding: f[0],
        stride: (
            positive_option(f[1], "stride_width")?,
            positive_option(f[2], "stride_height")?,
        ),
        filter: (
            positive_option(f[3], "filter_width")?,
            positive_option(f[4], "filter_height")?,
        ),
        activation: f[5],
    })
}

/// A flexbuffer options map.
fn flex_options(op: &OperatorDesc) -> OResult<Map> {
    flexbuffer::read_map(options(op)).or_else(|e| {
        invalid(format!(
            "custom options are not a valid flexbuffer map: {e}"
        ))
    })
}

fn flex_value<'m>(map: &'m Map, key: &str) -> OResult<&'m Flex> {
    map.get(key)
        .map_or_else(|| invalid(format!("custom options lack '{key}'")), Ok)
}

fn flex_i32(map: &Map, key: &str) -> OResult<i32> {
    let v = flex_value(map, key)?;
    v.as_i32().map_or_else(
        || {
            invalid(format!(
                "option '{key}' is {}, not a 32-bit integer",
                v.kind()
            ))
        },
        Ok,
    )
}

fn flex_f32(map: &Map, key: &str) -> OResult<f32> {
    let v = flex_value(map, key)?;
    v.as_f32().map_or_else(
        || invalid(format!("option '{key}' is {}, not a number", v.kind())),
        Ok,
    )
}

impl Lowerer<'_, '_> {
    /// Input `k` as a TENSOR_FLOAT32 operand (float constants included).
    fn float_input(&mut self, op: &OperatorDesc, k: usize) -> OResult<u32> {
        let t = self.input(op, k)?;
        let o = match self.value(t)? {
            Value::Const(_) => self.operand_of(t, Role::Float)?,
            Value::Operand(o) => o,
        };
        if self.operand_type(o) != OperandType::TensorFloat32 {
            return unsupported(format!(
                "input {k} is {}; this custom operator is defined for float32 only",
                self.operand_type(o)
            ));
        }
        Ok(o)
    }

    /// The template of float output `k`.
    fn float_output(&self, op: &OperatorDesc, k: usize) -> OResult<Operand> {
        let t = self.output(op, k)?;
        let template = self.activation_template(t)?;
        if template.operand_type != OperandType::TensorFloat32 {
            return unsupported(format!(
                "output {k} is {}; this custom operator is defined for float32 only",
                template.operand_type
            ));
        }
        Ok(template)
    }

    fn rank_of(&self, o: u32, rank: usize, what: &str) -> OResult<Vec<u32>> {
        let d = self.dims(o);
        if d.len() != rank {
            return invalid(format!("{what} must be {rank}-D, got {d:?}"));
        }
        Ok(d)
    }

    /// MediaPipe's Convolution2DTransposeBias: TRANSPOSE_CONV with a bias input and its
    /// own output size. Inputs (input, weights [O, H, W, I], bias [O]); options
    /// TfLiteTransposeConvParams (padding, stride_width, stride_height).
    pub(super) fn transpose_conv_bias(&mut self, op: &OperatorDesc) -> OResult<()> {
        let f = packed_fields(
            op,
            "TfLiteTransposeConvParams",
            &["padding", "stride_width", "stride_height"],
        )?;
        let padding = padding_option(f[0])?;
        let (sw, sh) = (
            positive_option(f[1], "stride_width")?,
            positive_option(f[2], "stride_height")?,
        );
        self.float_output(op, 0)?;
        let x = self.float_input(op, 0)?;
        let xd = self.rank_of(x, 4, "input")?;
        let filter = self.float_input(op, 1)?;
        let fd = self.rank_of(filter, 4, "weights")?;
        let bias = self.float_input(op, 2)?;
        if fd[3] != xd[3] || self.dims(bias) != [fd[0]] {
            return invalid(format!(
                "weights {fd:?} and bias {:?} do not fit an input of {} channels",
                self.dims(bias),
                xd[3]
            ));
        }
        // MediaPipe crops `max(0, k - (in - 1) % s - 1)` from the full output, the
        // smaller half before: the NN set's explicit padding says exactly that.
        let crop = |input: u32, k: u32, s: u32| -> (u32, u32) {
            let total = match padding {
                PaddingScheme::Same => {
                    (i64::from(k) - (i64::from(input) - 1) % i64::from(s) - 1).max(0)
                }
                PaddingScheme::Valid => 0,
            };
            let before = total / 2;
            (before as u32, (total - before) as u32)
        };
        let (top, bottom) = crop(xd[1], fd[1], sh);
        let (left, right) = crop(xd[2], fd[2], sw);
        let conv = TransposeConv2d {
            padding: TransposePadding::Explicit {
                left,
                right,
                top,
                bottom,
            },
            stride: Hw { h: sh, w: sw },
            activation: FusedActivation::None,
            nchw: false,
        };
        let mut inputs = vec![x, filter, bias];
        inputs.extend(conv.encode(&mut self.model, None));
        self.emit_activated(
            op,
            OperationType::TransposeConv2d,
            inputs,
            None,
            Act::Fused(FusedActivation::None),
        )?;
        Ok(())
    }

    /// MediaPipe's MaxPoolingWithArgmax2D: max pooling that also writes, per output
    /// element, the position of the maximum within its window (as a float).
    pub(super) fn max_pool_argmax(&mut self, op: &OperatorDesc) -> OResult<()> {
        let o = pool_options(op)?;
        let padding = padding_option(o.padding)?;
        let Some(activation) = FusedActivation::from_code(o.activation) else {
            return unsupported(format!(
                "option activation {} is not supported (only none, RELU, RELU_N1_TO_1, RELU6)",
                o.activation
            ));
        };
        let x = self.float_input(op, 0)?;
        let xd = self.rank_of(x, 4, "input")?;
        let [left, right, top, bottom] = window_padding(
            &xd,
            (o.filter.1, o.filter.0),
            (o.stride.1, o.stride.0),
            (1, 1),
            padding,
        );
        // AVERAGE_POOL_2D's explicit parameters; NHWC, so without the layout flag.
        let pool = Pool2d {
            padding: WindowPadding::Explicit {
                left,
                right,
                top,
                bottom,
            },
            stride: Hw {
                h: o.stride.1,
                w: o.stride.0,
            },
            filter: Hw {
                h: o.filter.1,
                w: o.filter.0,
            },
            activation,
            nchw: false,
        };
        let mut inputs = vec![x];
        inputs.extend(pool.encode(&mut self.model));
        let templates = vec![self.float_output(op, 0)?, self.float_output(op, 1)?];
        let outs = self.emit_raw(op, OperationType::MaxPoolWithArgmax, inputs, templates)?;
        for (k, o) in outs.into_iter().enumerate() {
            let t = self.output(op, k)?;
            self.finish_output(t, o)?;
        }
        Ok(())
    }

    /// MediaPipe's MaxUnpooling2D: scatters each input value to the window position its
    /// index names; everything else is zero. The output is the input times the filter
    /// size; the padding MediaPipe derives from that size and the stride (its padding
    /// and activation options are not read by its kernel, and not here either).
    pub(super) fn max_unpooling(&mut self, op: &OperatorDesc) -> OResult<()> {
        let o = pool_options(op)?;
        let x = self.float_input(op, 0)?;
        let xd = self.rank_of(x, 4, "input")?;
        let indices = self.float_input(op, 1)?;
        self.rank_of(indices, 4, "indices")?;
        // TFLite's ComputePadding(stride, 1, in * filter, filter, in).
        let pad = |input: u32, filter: u32, stride: u32| -> OResult<i32> {
            let (i, f, s) = (i64::from(input), i64::from(filter), i64::from(stride));
            let p = (((i - 1) * s + f - i * f) / 2).max(0);
            i32::try_from(p).or_else(|_| invalid("the unpooling padding overflows"))
        };
        let pad_left = pad(xd[2], o.filter.0, o.stride.0)?;
        let pad_top = pad(xd[1], o.filter.1, o.stride.1)?;
        let mut inputs = vec![x, indices];
        for v in [pad_left, pad_top] {
            inputs.push(self.model.add_i32(v));
        }
        for v in [o.stride.0, o.stride.1, o.filter.0, o.filter.1] {
            inputs.push(self.model.add_i32(v as i32));
        }
        let template = self.float_output(op, 0)?;
        let y = self.emit_raw(op, OperationType::MaxUnpooling, inputs, vec![template])?[0];
        let t = self.output(op, 0)?;
        self.finish_output(t, y)
    }

    /// MediaPipe's Landmarks2TransformMatrix (version 2): the matrix mapping a crop
    /// around a subset of landmarks, rotated to level two of them, to the landmarks'
    /// frame.
    pub(super) fn landmarks_to_matrix(&mut self, op: &OperatorDesc) -> OResult<()> {
        let map = flex_options(op)?;
        let subset = match flex_value(&map, "subset_idxs")? {
            Flex::Ints(v) => v.clone(),
            other => {
                return invalid(format!(
                    "option 'subset_idxs' is {}, not an integer vector",
                    other.kind()
                ));
            }
        };
        let left = flex_i32(&map, "left_rotation_idx")?;
        let right = flex_i32(&map, "right_rotation_idx")?;
        let rotation = flex_f32(&map, "target_rotation_radians")?;
        let out_h = flex_i32(&map, "output_height")?;
        let out_w = flex_i32(&map, "output_width")?;
        let scale_x = flex_f32(&map, "scale_x")?;
        let scale_y = flex_f32(&map, "scale_y")?;
        let x = self.float_input(op, 0)?;
        let xd = self.rank_of(x, 3, "landmarks")?;
        if xd[0] != 1 || xd[2] != 3 {
            return unsupported(format!(
                "landmarks must have shape [1, n, 3] (MediaPipe reads x, y, z triples of one batch), got {xd:?}"
            ));
        }
        let count = i64::from(xd[1]);
        let index = |v: i64, name: &str| -> OResult<i32> {
            if (0..count).contains(&v) {
                Ok(v as i32)
            } else {
                invalid(format!(
                    "option {name} holds landmark index {v}, outside the {count} landmarks"
                ))
            }
        };
        if subset.is_empty() {
            return invalid("option 'subset_idxs' is empty");
        }
        let subset = subset
            .iter()
            .map(|&v| index(v, "'subset_idxs'"))
            .collect::<OResult<Vec<i32>>>()?;
        let left = index(i64::from(left), "'left_rotation_idx'")?;
        let right = index(i64::from(right), "'right_rotation_idx'")?;
        if !rotation.is_finite() {
            return invalid(format!(
                "option 'target_rotation_radians' must be finite, got {rotation}"
            ));
        }
        for (v, name) in [(out_w, "output_width"), (out_h, "output_height")] {
            if v < 1 {
                return invalid(format!("option '{name}' must be >= 1, got {v}"));
            }
        }
        for (v, name) in [(scale_x, "scale_x"), (scale_y, "scale_y")] {
            if !(v.is_finite() && v > 0.0) {
                return invalid(format!("option '{name}' must be positive, got {v}"));
            }
        }
        let mut inputs = vec![x, self.model.add_i32_vector(&subset)];
        inputs.push(self.model.add_i32(left));
        inputs.push(self.model.add_i32(right));
        inputs.push(self.model.add_f32(rotation));
        inputs.push(self.model.add_i32(out_w));
        inputs.push(self.model.add_i32(out_h));
        inputs.push(self.model.add_f32(scale_x));
        inputs.push(self.model.add_f32(scale_y));
        self.float_output(op, 0)?;
        self.emit_out(op, OperationType::LandmarksToTransformMatrix, inputs, 0)?;
        Ok(())
    }

    /// MediaPipe's TransformLandmarks (version 2): x and y of each landmark through the
    /// matrix's first two rows; z (if any) unchanged. No options.
    pub(super) fn transform_landmarks(&mut self, op: &OperatorDesc) -> OResult<()> {
        let x = self.float_input(op, 0)?;
        let xd = self.rank_of(x, 3, "landmarks")?;
        if xd[0] != 1 || !matches!(xd[2], 2 | 3) {
            return unsupported(format!(
                "landmarks must have shape [1, n, 2] or [1, n, 3], got {xd:?}"
            ));
        }
        let m = self.float_input(op, 1)?;
        self.float_output(op, 0)?;
        self.emit_out(op, OperationType::TransformLandmarks, vec![x, m], 0)?;
        Ok(())
    }

    /// MediaPipe's TransformTensorBilinear (version 2): samples the input bilinearly at
    /// the matrix's image of every output pixel centre. Its kernel writes the output
    /// tensor's declared size; the options' output_height/output_width must agree.
    pub(super) fn transform_tensor_bilinear(&mut self, op: &OperatorDesc) -> OResult<()> {
        let map = flex_options(op)?;
        let x = self.float_input(op, 0)?;
        let xd = self.rank_of(x, 4, "input")?;
        if xd[0] != 1 {
            return unsupported(format!(
                "the input must have batch size 1 (MediaPipe samples one image), got {xd:?}"
            ));
        }
        let m = self.float_input(op, 1)?;
        let t = self.output(op, 0)?;
        let Some(declared) = self.declared_dims(t) else {
            return unsupported("the output's size must be known at compile time");
        };
        if declared.len() != 4 {
            return invalid(format!("the output must be 4-D, got {declared:?}"));
        }
        let (out_h, out_w) = (declared[1], declared[2]);
        for (key, v) in [("output_height", out_h), ("output_width", out_w)] {
            if map.get(key).is_some() && flex_i32(&map, key)? as i64 != i64::from(v) {
                return unsupported(format!(
                    "option '{key}' is {}, but the output tensor declares {v}",
                    flex_i32(&map, key)?
                ));
            }
        }
        let size = |v: u32| i32::try_from(v).or_else(|_| invalid("the output is too large"));
        let mut inputs = vec![x, m];
        inputs.push(self.model.add_i32(size(out_w)?));
        inputs.push(self.model.add_i32(size(out_h)?));
        self.float_output(op, 0)?;
        self.emit_out(op, OperationType::TransformTensorBilinear, inputs, 0)?;
        Ok(())
    }
}
