//! BatchNormalization, InstanceNormalization, LRN, Softmax and LogSoftmax.

use nnc_formats::nn::ops::{InstanceNormalization, LocalResponse, Softmax};
use nnc_formats::nn::{Operand, OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::super::constant;
use super::{Lowerer, NResult, Node, TensorValue, axis, unsupported};

impl Lowerer<'_> {
    /// Emits `x * scale + shift` with per-channel constants along ONNX's channel axis
    /// (axis 1). Rank-4 inputs run in NHWC so a preceding convolution's output feeds
    /// the multiply directly, which is what the batch-norm folding pass looks for.
    pub(super) fn channel_affine(
        &mut self,
        n: &Node,
        x: TensorValue,
        scale: &[f32],
        shift: &[f32],
    ) -> NResult<u32> {
        let rank = self.rank(x);
        let c = scale.len() as u32;
        let (input, const_dims) = match rank {
            4 => (self.to_nhwc(n, x.operand)?, vec![c]),
            r if r >= 2 => {
                let mut d = vec![c];
                d.extend(std::iter::repeat_n(1, r - 2));
                (x.operand, d)
            }
            _ => {
                return Err(super::NodeError::Invalid(
                    "needs an input of rank >= 2".into(),
                ));
            }
        };
        let s = self.model.add_f32_tensor(const_dims.clone(), scale);
        let b = self.model.add_f32_tensor(const_dims, shift);
        let act = self.i32_const(0);
        let scaled = self.emit(n, OperationType::Mul, vec![input, s, act])?;
        let act = self.i32_const(0);
        let y = self.emit(n, OperationType::Add, vec![scaled, b, act])?;
        if rank == 4 { self.to_nchw(n, y) } else { Ok(y) }
    }

    /// BatchNormalization with run-time parameters or in training mode, as elementwise
    /// operations in ONNX's own order: (x - mean) / sqrt(var + eps) * scale + bias, with
    /// the [C] parameters reshaped to [C, 1, ...] to broadcast along axis 1. Training mode
    /// uses the batch statistics (MEAN over every axis but 1; the variance is the
    /// population variance) and also yields the running statistics
    /// mean * momentum + batch_mean * (1 - momentum) (likewise for the variance).
    fn batch_norm_general(&mut self, n: &Node, training: bool) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let dims = self.known_dims(x)?;
        let r = dims.len();
        if r < 2 {
            return Err(super::NodeError::Invalid(
                "BatchNormalization needs an input of rank >= 2".into(),
            ));
        }
        let c = dims[1];
        let eps = n.attrs.float_or("epsilon", 1e-5)?;
        let mut param_dims = vec![c];
        param_dims.extend(std::iter::repeat_n(1, r - 2));
        let mut params = Vec::with_capacity(4);
        for i in 1..5 {
            let p = self.tensor(n, i)?;
            self.require_float(n, p)?;
            if self.dims(p) != [c] {
                return Err(super::NodeError::Invalid(format!(
                    "parameter {i} must have shape [{c}]"
                )));
            }
            params.push(self.reshape_to(n, p.operand, &param_dims)?);
        }
        let (scale, bias, mut mean, mut var) = (params[0], params[1], params[2], params[3]);
        let (run_mean, run_var) = (mean, var);
        if training {
            let axes: Vec<i32> = (0..r as i32).filter(|&a| a != 1).collect();
            let a = self.i32_vector(&axes);
            let m = self.reduce_op(n, OperationType::Mean, x.operand, a, true)?;
            let centered = self.arith(n, OperationType::Sub, x.operand, m)?;
            let sq = self.arith(n, OperationType::Mul, centered, centered)?;
            let a = self.i32_vector(&axes);
            let v = self.reduce_op(n, OperationType::Mean, sq, a, true)?;
            // [1, C, 1, ...] -> [C, 1, ...]
            mean = self.reshape_to(n, m, &param_dims)?;
            var = self.reshape_to(n, v, &param_dims)?;
        }
        let mean_b = {
            let mut d = vec![1];
            d.extend_from_slice(&param_dims);
            self.reshape_to(n, mean, &d)?
        };
        let centered = self.arith(n, OperationType::Sub, x.operand, mean_b)?;
        let e = self.scalar_tensor(OperandType::TensorFloat32, f64::from(eps));
        let ve = self.arith(n, OperationType::Add, var, e)?;
        let sd = self.emit(n, OperationType::Sqrt, vec![ve])?;
        let normed = self.arith(n, OperationType::Div, centered, sd)?;
        let scaled = self.arith(n, OperationType::Mul, normed, scale)?;
        let y = self.arith(n, OperationType::Add, scaled, bias)?;
        let y = self.reshape_to(n, y, &dims)?;
        self.set_tensor(n, 0, y, DataType::F32, false);
        if training {
            let momentum = f64::from(n.attrs.float_or("momentum", 0.9)?);
            for (k, (running, batch)) in [(1, (run_mean, mean)), (2, (run_var, var))] {
                if !self.output_used(n, k) {
                    continue;
                }
                let mo = self.scalar_tensor(OperandType::TensorFloat32, momentum);
                let a = self.arith(n, OperationType::Mul, running, mo)?;
                let rest = self.scalar_tensor(OperandType::TensorFloat32, 1.0 - momentum);
                let b = self.arith(n, OperationType::Mul, batch, rest)?;
                let out = self.arith(n, OperationType::Add, a, b)?;
                let out = self.reshape_to(n, out, &[c])?;
                self.set_tensor(n, k, out, DataType::F32, false);
            }
        }
        Ok(())
    }

    pub(super) fn batch_norm(&mut self, n: &Node) -> NResult<()> {
        if n.attrs.int_or("spatial", 1)? != 1 {
            return unsupported("BatchNormalization with spatial=0 is not supported");
        }
        let training = n.attrs.int_or("training_mode", 0)? != 0;
        if training && self.opset < 14 {
            return unsupported("training-mode BatchNormalization before opset 14");
        }
        if !training && (1..5).any(|i| self.output_used(n, i)) {
            return unsupported("BatchNormalization statistics outputs outside training mode");
        }
        let runtime = (1..5).any(|i| matches!(self.input(n, i), Ok(Some(super::Value::Tensor(_)))));
        if training || runtime {
            return self.batch_norm_general(n, training);
        }
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let eps = f64::from(n.attrs.float_or("epsilon", 1e-5)?);
        let params: Vec<Vec<f64>> = (1..5)
            .map(|i| self.required_const(n, i).map(|c| constant::to_f64s(&c)))
            .collect::<NResult<_>>()?;
        let c = params[0].len();
        if params.iter().any(|p| p.len() != c) {
            return Err(super::NodeError::Invalid(
                "scale, bias, mean and variance differ in length".into(),
            ));
        }
        let dims = self.dims(x);
        if dims.len() < 2 || (dims[1] != 0 && dims[1] as usize != c) {
            return Err(super::NodeError::Invalid(format!(
                "input channels {:?} do not match {c} parameters",
                dims.get(1)
            )));
        }
        // y = (x - mean) / sqrt(var + eps) * scale + bias = x * a + b, computed in f64.
        let a: Vec<f64> = (0..c)
            .map(|i| params[0][i] / (params[3][i] + eps).sqrt())
            .collect();
        let b: Vec<f32> = (0..c)
            .map(|i| (params[1][i] - params[2][i] * a[i]) as f32)
            .collect();
        let a: Vec<f32> = a.into_iter().map(|v| v as f32).collect();
        let y = self.channel_affine(n, x, &a, &b)?;
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
    }

    pub(super) fn instance_norm(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        // Per-channel scale and bias: constants, or [C] tensors computed at run time.
        let mut affine = Vec::with_capacity(2);
        for i in 1..3 {
            affine.push(match self.input(n, i)? {
                Some(super::Value::Tensor(t)) => {
                    self.require_float(n, t)?;
                    if self.dims(t).len() != 1 {
                        return Err(super::NodeError::Invalid(
                            "scale and bias must be 1-D".into(),
                        ));
                    }
                    t.operand
                }
                _ => {
                    let v = constant::to_f32s(&*self.required_const(n, i)?);
                    self.model.add_f32_tensor(vec![v.len() as u32], &v)
                }
            });
        }
        let eps = n.attrs.float_or("epsilon", 1e-5)?;
        let rank = self.rank(x);
        let lens: Vec<&[u32]> = affine
            .iter()
            .map(|&o| self.model.main.operands[o as usize].dimensions.as_slice())
            .collect();
        if lens[0] != lens[1] {
            return Err(super::NodeError::Invalid(
                "scale and bias differ in length".into(),
            ));
        }
        let (x4, _) = self.as_4d(n, x)?;
        let xh = self.to_nhwc(n, x4)?;
        let params = InstanceNormalization {
            gamma: 1.0,
            beta: 0.0,
            epsilon: eps,
            nchw: false,
        };
        let mut inputs = vec![xh];
        inputs.extend(params.encode(&mut self.model));
        let normed = self.emit(n, OperationType::InstanceNormalization, inputs)?;
        // The NN operation's gamma and beta are scalars; ONNX's are per channel.
        let (s, b) = (affine[0], affine[1]);
        let act = self.i32_const(0);
        let scaled = self.emit(n, OperationType::Mul, vec![normed, s, act])?;
        let act = self.i32_const(0);
        let yh = self.emit(n, OperationType::Add, vec![scaled, b, act])?;
        let y4 = self.to_nchw(n, yh)?;
        let y = self.back_from_4d(n, y4, rank)?;
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
    }

    pub(super) fn lrn(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        if self.rank(x) != 4 {
            return unsupported("LRN is supported on rank-4 inputs only");
        }
        let size = n
            .attrs
            .int("size")?
            .ok_or_else(|| super::NodeError::Invalid("LRN needs 'size'".into()))?;
        if size < 1 || size % 2 == 0 {
            return unsupported(format!(
                "LRN size {size}: the NN set's window is symmetric, so only odd sizes are supported"
            ));
        }
        let alpha = n.attrs.float_or("alpha", 1e-4)?;
        let beta = n.attrs.float_or("beta", 0.75)?;
        let bias = n.attrs.float_or("bias", 1.0)?;
        let xh = self.to_nhwc(n, x.operand)?;
        // ONNX divides alpha by the window size; the NN operation does not.
        let params = LocalResponse {
            radius: ((size - 1) / 2) as u32,
            bias,
            alpha: alpha / size as f32,
            beta,
            axis: -1,
        };
        let mut inputs = vec![xh];
        inputs.extend(params.encode(&mut self.model));
        let yh = self.emit(n, OperationType::LocalResponseNormalization, inputs)?;
        let y = self.to_nchw(n, yh)?;
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
    }

    /// SOFTMAX of `x` over its last axis with beta 1 (attention scores, classifier
    /// outputs).
    pub(super) fn softmax_last_axis(&mut self, n: &Node, x: u32) -> NResult<u32> {
        let mut inputs = vec![x];
        let params = Softmax {
            beta: 1.0,
            axis: -1,
        };
        inputs.extend(params.encode(OperationType::Softmax, &mut self.model));
        self.emit(n, OperationType::Softmax, inputs)
    }

    pub(super) fn softmax(&mut self, n: &Node) -> NResult<()> {
        let log = n.op() == "LogSoftmax";
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let rank = self.rank(x).max(1);
        let default_axis = if self.opset >= 13 { -1 } else { 1 };
        let a = axis(n.attrs.int_or("axis", default_axis)?, rank)?;
        let op = if log {
            OperationType::LogSoftmax
        } else {
            OperationType::Softmax
        };
        let emit_last_axis = |this: &mut Self, input: u32, ax: i32| -> NResult<u32> {
            let mut inputs = vec![input];
            inputs.extend(
                Softmax {
                    beta: 1.0,
                    axis: ax,
                }
                .encode(op, &mut this.model),
            );
            this.emit_raw(
                op,
                inputs,
                vec![Some(Operand::new(OperandType::TensorFloat32, vec![]))],
                &n.label,
            )
            .map(|v| v[0])
        };
        let y = if self.opset >= 13 || a == rank - 1 {
            let ax = if a == rank - 1 { -1 } else { a as i32 };
            emit_last_axis(self, x.operand, ax)?
        } else {
            // Before opset 13, softmax runs over all dimensions from `axis` on, flattened.
            let dims = self.known_dims(x)?;
            let outer: u32 = dims[..a].iter().product();
            let inner: u32 = dims[a..].iter().product();
            let flat = self.reshape_to(n, x.operand, &[outer, inner])?;
            let s = emit_last_axis(self, flat, -1)?;
            self.reshape_to(n, s, &dims)?
        };
        self.set_tensor(n, 0, y, DataType::F32, x.scalar);
        Ok(())
    }
}
