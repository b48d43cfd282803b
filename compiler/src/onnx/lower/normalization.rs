//! BatchNormalization, InstanceNormalization, LRN, Softmax and LogSoftmax.

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

    pub(super) fn batch_norm(&mut self, n: &Node) -> NResult<()> {
        if n.attrs.int_or("training_mode", 0)? != 0 || (1..5).any(|i| self.output_used(n, i)) {
            return unsupported("training-mode BatchNormalization is not supported");
        }
        if n.attrs.int_or("spatial", 1)? != 1 {
            return unsupported("BatchNormalization with spatial=0 is not supported");
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
        let scale = constant::to_f32s(&*self.required_const(n, 1)?);
        let bias = constant::to_f32s(&*self.required_const(n, 2)?);
        let eps = n.attrs.float_or("epsilon", 1e-5)?;
        let rank = self.rank(x);
        if scale.len() != bias.len() {
            return Err(super::NodeError::Invalid(
                "scale and bias differ in length".into(),
            ));
        }
        let (x4, _) = self.as_4d(n, x)?;
        let xh = self.to_nhwc(n, x4)?;
        let gamma = self.f32_const(1.0);
        let beta = self.f32_const(0.0);
        let e = self.f32_const(eps);
        let layout = self.bool_const(false);
        let normed = self.emit(
            n,
            OperationType::InstanceNormalization,
            vec![xh, gamma, beta, e, layout],
        )?;
        // The NN operation's gamma and beta are scalars; ONNX's are per channel.
        let s = self.model.add_f32_tensor(vec![scale.len() as u32], &scale);
        let b = self.model.add_f32_tensor(vec![bias.len() as u32], &bias);
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
        let inputs = vec![
            xh,
            self.i32_const(((size - 1) / 2) as i32),
            self.f32_const(bias),
            self.f32_const(alpha / size as f32),
            self.f32_const(beta),
        ];
        let yh = self.emit(n, OperationType::LocalResponseNormalization, inputs)?;
        let y = self.to_nchw(n, yh)?;
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
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
            let beta = this.f32_const(1.0);
            let mut inputs = vec![input, beta];
            if log || ax != -1 {
                inputs.push(this.i32_const(ax));
            }
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
