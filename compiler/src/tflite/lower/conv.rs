//! CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED and the 2-D pools.
//!
//! TFLite is NHWC with filters [O, H, W, I] (depthwise [1, H, W, O]), exactly the NN
//! set's layout, so nothing is transposed. SAME/VALID padding is emitted as the explicit
//! padding TensorFlow computes (before = total / 2), so no kernel has to re-derive it.

use nnc_formats::nn::ops::{
    Conv2d, ConvKind, Hw, Pool2d, TransposeConv2d, TransposePadding, WindowPadding,
    implicit_padding,
};
use nnc_formats::nn::{FusedActivation, OperandType, OperationType, PaddingScheme};

use super::super::model::OperatorDesc;
use super::super::schema_generated::tflite as fb;
use super::{Act, Const, Lowerer, OResult, Role, Value, invalid, unsupported};

/// More output channels than any real layer has: a corrupt shape, which must not turn
/// into a huge zero bias.
const MAX_CHANNELS: u32 = 1 << 24;

fn scheme(p: fb::Padding) -> OResult<PaddingScheme> {
    match p {
        fb::Padding::SAME => Ok(PaddingScheme::Same),
        fb::Padding::VALID => Ok(PaddingScheme::Valid),
        other => invalid(format!("unknown padding {}", other.0)),
    }
}

fn positive(v: i32, what: &str) -> OResult<u32> {
    if v >= 1 {
        Ok(v as u32)
    } else {
        invalid(format!("{what} must be >= 1, got {v}"))
    }
}

/// Window geometry in NN order: (pad_left, pad_right, pad_top, pad_bottom).
pub(super) fn window_padding(
    input: &[u32],
    kernel: (u32, u32),
    stride: (u32, u32),
    dilation: (u32, u32),
    padding: PaddingScheme,
) -> [u32; 4] {
    let (top, bottom) = implicit_padding(input[1], kernel.0, stride.0, dilation.0, padding);
    let (left, right) = implicit_padding(input[2], kernel.1, stride.1, dilation.1, padding);
    [left, right, top, bottom]
}

/// Explicit padding from `[left, right, top, bottom]`.
fn explicit([left, right, top, bottom]: [u32; 4]) -> WindowPadding {
    WindowPadding::Explicit {
        left,
        right,
        top,
        bottom,
    }
}

/// `(height, width)` as an [`Hw`].
fn hw((h, w): (u32, u32)) -> Hw {
    Hw { h, w }
}

/// `act` split into the code an operation's fused-activation operand holds and what
/// remains for a separate operation (TANH, which no fused code expresses).
pub(super) fn split_activation(act: Act) -> (FusedActivation, Act) {
    match act {
        Act::Fused(a) => (a, Act::Fused(FusedActivation::None)),
        Act::Tanh => (FusedActivation::None, Act::Tanh),
    }
}

impl Lowerer<'_, '_> {
    /// Input 0 as a rank-4 operand.
    fn input_4d(&mut self, op: &OperatorDesc) -> OResult<(u32, Vec<u32>)> {
        let x = self.operand_in(op, 0)?;
        let dims = self.dims(x);
        if dims.len() != 4 {
            return invalid(format!("input must be 4-D (NHWC), got {dims:?}"));
        }
        Ok((x, dims))
    }

    /// The shape of a filter or weights tensor, with the rank checked.
    fn weight_shape(&self, t: usize, rank: usize) -> OResult<Vec<u32>> {
        let shape = self.tensor(t).shape.clone();
        if shape.len() != rank {
            return invalid(format!(
                "{} must be {rank}-D, got {shape:?}",
                self.tensor(t).label()
            ));
        }
        Ok(shape)
    }

    /// The bias operand for `channels` outputs: the model's (input `k`, if any) or zeros.
    /// Quantized operations take an int32 bias whose scale is input scale x filter scale,
    /// or 0 with a per-channel filter (each channel's scale is then implied, as NNAPI
    /// specifies).
    fn bias(
        &mut self,
        op: &OperatorDesc,
        k: usize,
        x: u32,
        filter: u32,
        channels: u32,
    ) -> OResult<u32> {
        if channels > MAX_CHANNELS {
            return invalid(format!("{channels} output channels is implausibly many"));
        }
        let xo = self.operand(x);
        if !xo.operand_type.is_quantized() {
            return match self.opt_input(op, k) {
                None => Ok(self
                    .model
                    .add_f32_tensor(vec![channels], &vec![0.0; channels as usize])),
                Some(t) => match self.value(t)? {
                    Value::Const(_) => self.operand_of(t, Role::Float),
                    Value::Operand(o) => Ok(o),
                },
            };
        }
        let f = self.operand(filter);
        let scale = if f.operand_type == OperandType::TensorQuant8SymmPerChannel {
            0.0
        } else {
            xo.scale * f.scale
        };
        match self.opt_input(op, k) {
            None => {
                let zeros = vec![0i32; channels as usize];
                Ok(self.model.add_constant(
                    nnc_formats::nn::Operand::new(OperandType::TensorInt32, vec![channels])
                        .with_quant(scale, 0),
                    bytemuck::cast_slice(&zeros),
                ))
            }
            Some(t) => match self.value(t)? {
                Value::Const(_) => self.operand_of(t, Role::Bias(scale.to_bits())),
                Value::Operand(_) => unsupported("a quantized operation's bias must be a constant"),
            },
        }
    }

    pub(super) fn conv_2d(&mut self, op: &OperatorDesc) -> OResult<()> {
        let Some(o) = op.fb.builtin_options_as_conv_2_doptions() else {
            return invalid("has no Conv2DOptions");
        };
        let (x, xd) = self.input_4d(op)?;
        let ft = self.input(op, 1)?;
        let f = self.weight_shape(ft, 4)?;
        let (out_c, kh, kw, in_c) = (f[0], f[1], f[2], f[3]);
        if in_c == 0 || xd[3] == 0 || !xd[3].is_multiple_of(in_c) {
            return invalid(format!(
                "input has {} channels, not a multiple of the filter depth {in_c}",
                xd[3]
            ));
        }
        let groups = xd[3] / in_c;
        let stride = (
            positive(o.stride_h(), "stride_h")?,
            positive(o.stride_w(), "stride_w")?,
        );
        let dilation = (
            positive(o.dilation_h_factor(), "dilation_h_factor")?,
            positive(o.dilation_w_factor(), "dilation_w_factor")?,
        );
        let pads = window_padding(&xd, (kh, kw), stride, dilation, scheme(o.padding())?);
        let act = self.act(o.fused_activation_function())?;
        let xt = self.operand_type(x);
        let filter = self.operand_of(ft, Role::Filter(xt, 0))?;
        let bias = self.bias(op, 2, x, filter, out_c)?;
        let dilated = dilation != (1, 1);
        let kind = if groups == 1 {
            ConvKind::Plain
        } else {
            if dilated {
                return unsupported(
                    "dilated grouped convolutions are not supported (GROUPED_CONV_2D has no dilation)",
                );
            }
            if out_c % groups != 0 {
                return invalid(format!(
                    "{out_c} output channels do not divide into {groups} groups"
                ));
            }
            ConvKind::Grouped { groups }
        };
        let (activation, separate) = split_activation(act);
        let conv = Conv2d {
            kind,
            padding: explicit(pads),
            stride: hw(stride),
            dilation: hw(dilation),
            activation,
            nchw: false,
        };
        let mut inputs = vec![x, filter, bias];
        inputs.extend(conv.encode(&mut self.model));
        self.emit_activated(op, conv.op_type(), inputs, None, separate)?;
        Ok(())
    }

    pub(super) fn depthwise_conv_2d(&mut self, op: &OperatorDesc) -> OResult<()> {
        let Some(o) = op.fb.builtin_options_as_depthwise_conv_2_doptions() else {
            return invalid("has no DepthwiseConv2DOptions");
        };
        let (x, xd) = self.input_4d(op)?;
        let ft = self.input(op, 1)?;
        let f = self.weight_shape(ft, 4)?;
        let (kh, kw, out_c) = (f[1], f[2], f[3]);
        if f[0] != 1 {
            return invalid(format!(
                "filter must have shape [1, h, w, channels], got {f:?}"
            ));
        }
        // The multiplier follows from the shapes (newer TFLite ignores the option).
        if xd[3] == 0 || out_c % xd[3] != 0 {
            return invalid(format!(
                "{out_c} output channels are not a multiple of the {} input channels",
                xd[3]
            ));
        }
        let multiplier = out_c / xd[3];
        let stride = (
            positive(o.stride_h(), "stride_h")?,
            positive(o.stride_w(), "stride_w")?,
        );
        let dilation = (
            positive(o.dilation_h_factor(), "dilation_h_factor")?,
            positive(o.dilation_w_factor(), "dilation_w_factor")?,
        );
        let pads = window_padding(&xd, (kh, kw), stride, dilation, scheme(o.padding())?);
        let act = self.act(o.fused_activation_function())?;
        let xt = self.operand_type(x);
        let filter = self.operand_of(ft, Role::Filter(xt, 3))?;
        let bias = self.bias(op, 2, x, filter, out_c)?;
        let (activation, separate) = split_activation(act);
        let conv = Conv2d {
            kind: ConvKind::Depthwise { multiplier },
            padding: explicit(pads),
            stride: hw(stride),
            dilation: hw(dilation),
            activation,
            nchw: false,
        };
        let mut inputs = vec![x, filter, bias];
        inputs.extend(conv.encode(&mut self.model));
        self.emit_activated(op, conv.op_type(), inputs, None, separate)?;
        Ok(())
    }

    /// TRANSPOSE_CONV: inputs (output_shape, weights [O, H, W, I], input, bias?).
    pub(super) fn transpose_conv(&mut self, op: &OperatorDesc) -> OResult<()> {
        let Some(o) = op.fb.builtin_options_as_transpose_conv_options() else {
            return invalid("has no TransposeConvOptions");
        };
        let shape = self.const_in(op, 0)?.i32s()?;
        if shape.len() != 4 || shape.iter().any(|&d| d < 1) {
            return invalid(format!(
                "output_shape must hold 4 positive values, got {shape:?}"
            ));
        }
        let ft = self.input(op, 1)?;
        let f = self.weight_shape(ft, 4)?;
        let xt_index = self.input(op, 2)?;
        let x = self.operand_of(xt_index, Role::Plain)?;
        let xd = self.dims(x);
        if xd.len() != 4 {
            return invalid(format!("input must be 4-D (NHWC), got {xd:?}"));
        }
        let stride = (
            positive(o.stride_h(), "stride_h")?,
            positive(o.stride_w(), "stride_w")?,
        );
        let padding = scheme(o.padding())?;
        let act = self.act(o.fused_activation_function())?;
        let xt = self.operand_type(x);
        let filter = self.operand_of(ft, Role::Filter(xt, 0))?;
        let bias = self.bias(op, 3, x, filter, f[0])?;
        // TFLite pads the output by what a forward convolution from the output size
        // would need, (before = total / 2), and crops the rest at the end.
        let axis = |out: i32, input: u32, k: u32, s: u32| -> (i64, i64) {
            let (out, input, k, s) = (i64::from(out), i64::from(input), i64::from(k), i64::from(s));
            let forward = match padding {
                PaddingScheme::Same => (out + s - 1) / s,
                PaddingScheme::Valid => (out - k + s) / s,
            };
            let total = ((forward - 1) * s + k - out).max(0);
            let before = total / 2;
            (before, s * (input - 1) + k - out - before)
        };
        let (top, bottom) = axis(shape[1], xd[1], f[1], stride.0);
        let (left, right) = axis(shape[2], xd[2], f[2], stride.1);
        let fits = |p: i64| u32::try_from(p).is_ok_and(|p| p <= i32::MAX as u32);
        let (padding, output_shape) = if [top, bottom, left, right].into_iter().all(fits) {
            let padding = TransposePadding::Explicit {
                left: left as u32,
                right: right as u32,
                top: top as u32,
                bottom: bottom as u32,
            };
            (padding, None)
        } else {
            // The output extends past the last input's reach (VALID with stride > kernel):
            // only the implicit form, which takes the output shape, can say so.
            let shape = self.model.add_i32_vector(&shape);
            (TransposePadding::Implicit(padding), Some(shape))
        };
        let (activation, separate) = split_activation(act);
        let conv = TransposeConv2d {
            padding,
            stride: hw(stride),
            activation,
            nchw: false,
        };
        let mut inputs = vec![x, filter, bias];
        inputs.extend(conv.encode(&mut self.model, output_shape));
        self.emit_activated(op, OperationType::TransposeConv2d, inputs, None, separate)?;
        Ok(())
    }

    pub(super) fn fully_connected(&mut self, op: &OperatorDesc) -> OResult<()> {
        let options = op.fb.builtin_options_as_fully_connected_options();
        let (act, keep_dims) = match options {
            Some(o) => {
                if o.weights_format() != fb::FullyConnectedOptionsWeightsFormat::DEFAULT {
                    return unsupported(format!(
                        "weights format {:?} is not supported (only DEFAULT)",
                        o.weights_format()
                    ));
                }
                (self.act(o.fused_activation_function())?, o.keep_num_dims())
            }
            None => (self.act(fb::ActivationFunctionType::NONE)?, false),
        };
        let x = self.operand_in(op, 0)?;
        let wt = self.input(op, 1)?;
        let w = self.weight_shape(wt, 2)?;
        let (units, depth) = (w[0], w[1]);
        let xd = self.dims(x);
        let count = xd
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(u64::from(d)))
            .unwrap_or(u64::MAX);
        if depth == 0 || !count.is_multiple_of(u64::from(depth)) {
            return invalid(format!(
                "input {xd:?} is not a whole number of rows of the weights' depth {depth}"
            ));
        }
        let batch = (count / u64::from(depth)) as u32;
        let xt = self.operand_type(x);
        let out = self.output(op, 0)?;
        let declared = if keep_dims {
            let mut d = xd.clone();
            if let Some(last) = d.last_mut() {
                *last = units;
            }
            d
        } else {
            vec![batch, units]
        };
        let declared = self.declared_dims(out).unwrap_or(declared);
        // Per-channel weights have no FULLY_CONNECTED form in the NN set: the same
        // arithmetic is a 1x1 CONV_2D over a [batch, 1, 1, depth] input.
        let per_channel = xt.is_quantized()
            && matches!(self.value(wt)?, Value::Const(ref c)
                if c.quant.as_ref().is_some_and(|q| !q.is_per_tensor()));
        let y = if per_channel {
            let Value::Const(c) = self.value(wt)? else {
                return invalid("per-channel weights must be constant");
            };
            let filter_const = Const {
                shape: vec![units, 1, 1, depth],
                ..(*c).clone()
            };
            let filter = self.const_operand(&filter_const, Role::Filter(xt, 0))?;
            let x4 = self.reshape_temp(op, x, &[batch, 1, 1, depth])?;
            let bias = self.bias(op, 2, x, filter, units)?;
            let (activation, separate) = split_activation(act);
            let conv = Conv2d {
                kind: ConvKind::Plain,
                padding: WindowPadding::Explicit {
                    left: 0,
                    right: 0,
                    top: 0,
                    bottom: 0,
                },
                stride: Hw::ONE,
                dilation: Hw::ONE,
                activation,
                nchw: false,
            };
            let mut inputs = vec![x4, filter, bias];
            inputs.extend(conv.encode(&mut self.model));
            self.emit_activated_temp(op, conv.op_type(), inputs, None, separate)?
        } else {
            let x2 = if xd.len() < 2 {
                self.reshape_temp(op, x, &[batch, depth])?
            } else {
                x
            };
            let weights = if xt.is_quantized() {
                self.operand_of(wt, Role::Plain)?
            } else {
                match self.value(wt)? {
                    Value::Const(_) => self.operand_of(wt, Role::Float)?,
                    Value::Operand(o) => o,
                }
            };
            let bias = self.bias(op, 2, x, weights, units)?;
            self.emit_activated_temp(
                op,
                OperationType::FullyConnected,
                vec![x2, weights, bias],
                Some(3),
                act,
            )?
        };
        let y = self.reshape_temp(op, y, &declared)?;
        self.finish_output(out, y)
    }

    pub(super) fn pool(&mut self, op: &OperatorDesc, code: fb::BuiltinOperator) -> OResult<()> {
        let Some(o) = op.fb.builtin_options_as_pool_2_doptions() else {
            return invalid("has no Pool2DOptions");
        };
        let (x, xd) = self.input_4d(op)?;
        let kernel = (
            positive(o.filter_height(), "filter_height")?,
            positive(o.filter_width(), "filter_width")?,
        );
        let stride = (
            positive(o.stride_h(), "stride_h")?,
            positive(o.stride_w(), "stride_w")?,
        );
        let [left, right, top, bottom] =
            window_padding(&xd, kernel, stride, (1, 1), scheme(o.padding())?);
        let (activation, separate) = split_activation(self.act(o.fused_activation_function())?);
        let nn_op = match code {
            fb::BuiltinOperator::AVERAGE_POOL_2D => OperationType::AveragePool2d,
            fb::BuiltinOperator::MAX_POOL_2D => OperationType::MaxPool2d,
            _ => OperationType::L2Pool2d,
        };
        let pool = Pool2d {
            padding: WindowPadding::Explicit {
                left,
                right,
                top,
                bottom,
            },
            stride: Hw {
                h: stride.0,
                w: stride.1,
            },
            filter: Hw {
                h: kernel.0,
                w: kernel.1,
            },
            activation,
            nchw: false,
        };
        let mut inputs = vec![x];
        inputs.extend(pool.encode(&mut self.model));
        self.emit_activated(op, nn_op, inputs, None, separate)?;
        Ok(())
    }
}
