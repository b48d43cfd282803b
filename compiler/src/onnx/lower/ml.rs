//! The `ai.onnx.ml` operators that compute on tensors: LinearClassifier, LinearRegressor,
//! Normalizer, Scaler and Binarizer. Operators whose outputs are not tensors (ZipMap's
//! sequences of maps) or whose labels are strings are refused by name: the NN set has
//! neither.
//!
//! Where the ONNX text leaves a case open, nnc follows ONNX Runtime, the engine these
//! models are exported for (skl2onnx): a binary LinearClassifier (one coefficient row, two
//! labels) scores `[1 - s, s]` (after LOGISTIC, `[1 - σ(s), σ(s)]`), ignores SOFTMAX and
//! SOFTMAX_ZERO, and picks the second label where `s > 0` (`σ(s) > 0.5`); a Normalizer
//! row whose norm is zero stays zero.

use nnc_formats::nn::{OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::super::constant;
use super::{Lowerer, NResult, Node, TensorValue, invalid, is_float, unsupported};

/// What ai.onnx.ml's `post_transform` asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PostTransform {
    None,
    Softmax,
    Logistic,
    SoftmaxZero,
}

impl PostTransform {
    fn of(n: &Node) -> NResult<PostTransform> {
        match n.attrs.string_or("post_transform", "NONE")?.as_str() {
            "NONE" => Ok(PostTransform::None),
            "SOFTMAX" => Ok(PostTransform::Softmax),
            "LOGISTIC" => Ok(PostTransform::Logistic),
            "SOFTMAX_ZERO" => Ok(PostTransform::SoftmaxZero),
            "PROBIT" => unsupported(format!("{} with post_transform PROBIT", n.op())),
            other => invalid(format!("unknown post_transform '{other}'")),
        }
    }
}

impl Lowerer<'_> {
    /// The input as a float32 [N, C] operand (a 1-D input is one row; integers convert).
    fn ml_rows(&mut self, n: &Node) -> NResult<(u32, u32, u32)> {
        let x = self.tensor(n, 0)?;
        let x = self.ml_float(n, x)?;
        let dims = self.known_dims(x)?;
        let (rows, cols) = match dims.as_slice() {
            [c] => (1, *c),
            [r, c] => (*r, *c),
            _ => {
                return unsupported(format!(
                    "{} on a rank-{} input (nnc lowers [C] and [N, C])",
                    n.op(),
                    dims.len()
                ));
            }
        };
        let operand = self.reshape_to(n, x.operand, &[rows, cols])?;
        Ok((operand, rows, cols))
    }

    /// `x` as float32 (ai.onnx.ml takes int32 and int64 inputs too).
    fn ml_float(&mut self, n: &Node, x: TensorValue) -> NResult<TensorValue> {
        if is_float(x.dtype) {
            return Ok(x);
        }
        if !matches!(x.dtype, DataType::I32 | DataType::I64) {
            return unsupported(format!("{} on {} inputs", n.op(), x.dtype));
        }
        let operand = self.cast_op(n, x.operand, OperandType::TensorFloat32)?;
        Ok(TensorValue {
            operand,
            dtype: DataType::F32,
            scalar: x.scalar,
        })
    }

    /// `X W^T + b` for `targets` rows of coefficients over `cols` features.
    fn ml_linear(
        &mut self,
        n: &Node,
        x: u32,
        cols: u32,
        targets: u32,
        coefficients: &[f32],
        intercepts: Option<Vec<f32>>,
    ) -> NResult<u32> {
        if coefficients.len() as u64 != u64::from(targets) * u64::from(cols) {
            return invalid(format!(
                "{} has {} coefficients; {targets} targets of {cols} features need {}",
                n.op(),
                coefficients.len(),
                u64::from(targets) * u64::from(cols)
            ));
        }
        let bias = match intercepts {
            Some(b) if b.len() == targets as usize => b,
            Some(b) if b.is_empty() => vec![0.0; targets as usize],
            Some(b) => {
                return invalid(format!(
                    "{} has {} intercepts for {targets} targets",
                    n.op(),
                    b.len()
                ));
            }
            None => vec![0.0; targets as usize],
        };
        let weights = constant::f32_tensor(vec![targets as usize, cols as usize], coefficients);
        self.budget.charge(&weights)?;
        self.fully_connected(n, x, weights, &bias)
    }

    pub(super) fn linear_regressor(&mut self, n: &Node) -> NResult<()> {
        if PostTransform::of(n)? != PostTransform::None {
            return unsupported("LinearRegressor with a post_transform other than NONE");
        }
        let targets = n.attrs.int_or("targets", 1)?;
        let targets = u32::try_from(targets)
            .ok()
            .filter(|&t| t >= 1)
            .ok_or_else(|| {
                super::NodeError::Invalid(format!("targets must be >= 1, got {targets}"))
            })?;
        let coefficients = n.attrs.floats("coefficients")?.unwrap_or_default();
        let intercepts = n.attrs.floats("intercepts")?;
        let (x, _, cols) = self.ml_rows(n)?;
        let y = self.ml_linear(n, x, cols, targets, &coefficients, intercepts)?;
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
    }

    pub(super) fn linear_classifier(&mut self, n: &Node) -> NResult<()> {
        if n.attrs.has("classlabels_strings") {
            return unsupported(
                "LinearClassifier with string labels (the NN set has no string tensors)",
            );
        }
        let labels = n.attrs.ints("classlabels_ints")?.ok_or_else(|| {
            super::NodeError::Invalid("LinearClassifier needs classlabels_ints or _strings".into())
        })?;
        let post = PostTransform::of(n)?;
        let coefficients = n.attrs.floats("coefficients")?.unwrap_or_default();
        let intercepts = n.attrs.floats("intercepts")?;
        let (x, rows, cols) = self.ml_rows(n)?;
        if cols == 0 || coefficients.len() % cols as usize != 0 {
            return invalid(format!(
                "{} coefficients are not a whole number of rows of {cols} features",
                coefficients.len()
            ));
        }
        // The class count is the intercepts' (as ONNX Runtime takes it), else the
        // coefficient rows'; each class's row has as many coefficients as the input has
        // features. skl2onnx's logreg_iris.onnx carries 12 coefficients for 3 classes of a
        // declared 2-feature input: ONNX Runtime reads the first 3 x 2, and so does nnc.
        let classes = match &intercepts {
            // (One intercept with two labels is the binary form: one coefficient row.)
            Some(b) if b.len() > 1 || (b.len() == 1 && labels.len() != 2) => b.len() as u32,
            _ => (coefficients.len() / cols as usize) as u32,
        };
        let used = classes as usize * cols as usize;
        let coefficients = match coefficients.len() {
            len if len > used && len.is_multiple_of(classes as usize) => {
                self.notes.push(format!(
                    "node {} (LinearClassifier) has {len} coefficients, {} per class, but its input \
                     has {cols} features: the first {used} are used (as ONNX Runtime does)",
                    n.label,
                    len / classes as usize
                ));
                coefficients[..used].to_vec()
            }
            _ => coefficients,
        };
        let scores = self.ml_linear(n, x, cols, classes, &coefficients, intercepts)?;
        let (z, winner) = if classes == 1 {
            if labels.len() != 2 {
                return invalid(format!(
                    "a binary LinearClassifier (one coefficient row) needs 2 labels, it has {}",
                    labels.len()
                ));
            }
            // [1 - s, s] with s the (transformed) score; the second label where s > 0
            // (above one half after LOGISTIC).
            let (s, threshold) = if post == PostTransform::Logistic {
                (self.emit(n, OperationType::Logistic, vec![scores])?, 0.5)
            } else {
                (scores, 0.0)
            };
            let one = self.scalar_tensor(OperandType::TensorFloat32, 1.0);
            let rest = self.arith(n, OperationType::Sub, one, s)?;
            let axis = self.i32_const(1);
            let z = self.emit(n, OperationType::Concatenation, vec![rest, s, axis])?;
            let t = self.scalar_tensor(OperandType::TensorFloat32, threshold);
            let above = self.emit(n, OperationType::Greater, vec![s, t])?;
            let above = self.reshape_to(n, above, &[rows])?;
            let index = self.cast_op(n, above, OperandType::TensorInt32)?;
            (z, index)
        } else {
            if labels.len() != classes as usize {
                return invalid(format!(
                    "{} labels for {classes} coefficient rows",
                    labels.len()
                ));
            }
            let z = match post {
                PostTransform::None => scores,
                PostTransform::Logistic => self.emit(n, OperationType::Logistic, vec![scores])?,
                PostTransform::Softmax => self.softmax_last_axis(n, scores)?,
                PostTransform::SoftmaxZero => {
                    return unsupported("LinearClassifier with post_transform SOFTMAX_ZERO");
                }
            };
            let axis = self.i32_const(1);
            (z, self.emit(n, OperationType::Argmax, vec![z, axis])?)
        };
        // The label of each row: the winning index looked up in the labels.
        let label_values = constant::i64_tensor(vec![labels.len()], &labels);
        let table = self.const_operand(&label_values)?.operand;
        let axis = self.i32_const(0);
        let y = self.emit(n, OperationType::Gather, vec![table, axis, winner])?;
        self.set_tensor(n, 0, y, DataType::I64, false);
        self.set_tensor(n, 1, z, DataType::F32, false);
        Ok(())
    }

    pub(super) fn normalizer(&mut self, n: &Node) -> NResult<()> {
        let norm = n.attrs.string_or("norm", "MAX")?;
        let x = self.tensor(n, 0)?;
        let x = self.ml_float(n, x)?;
        let dims = self.known_dims(x)?;
        let (x_op, rows, cols) = match dims.as_slice() {
            [c] => (self.reshape_to(n, x.operand, &[1, *c])?, 1, *c),
            [r, c] => (x.operand, *r, *c),
            _ => return unsupported(format!("Normalizer on a rank-{} input", dims.len())),
        };
        let axes = self.i32_vector(&[1]);
        let denominator = match norm.as_str() {
            "MAX" => self.reduce_op(n, OperationType::ReduceMax, x_op, axes, true)?,
            "L1" => {
                let a = self.emit(n, OperationType::Abs, vec![x_op])?;
                self.reduce_op(n, OperationType::ReduceSum, a, axes, true)?
            }
            "L2" => {
                let sq = self.arith(n, OperationType::Mul, x_op, x_op)?;
                let sum = self.reduce_op(n, OperationType::ReduceSum, sq, axes, true)?;
                self.emit(n, OperationType::Sqrt, vec![sum])?
            }
            other => return invalid(format!("unknown norm '{other}'")),
        };
        // A zero norm divides by one instead (the row is zero for L1 and L2; ONNX Runtime
        // leaves a MAX row whose maximum is zero as it is).
        let zero = self.scalar_tensor(OperandType::TensorFloat32, 0.0);
        let one = self.scalar_tensor(OperandType::TensorFloat32, 1.0);
        let is_zero = self.emit(n, OperationType::Equal, vec![denominator, zero])?;
        let safe = self.emit(n, OperationType::Select, vec![is_zero, one, denominator])?;
        let y = self.arith(n, OperationType::Div, x_op, safe)?;
        let y = if dims.len() == 1 {
            self.reshape_to(n, y, &dims)?
        } else {
            debug_assert_eq!(dims, [rows, cols]);
            y
        };
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
    }

    pub(super) fn scaler(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        let x = self.ml_float(n, x)?;
        let dims = self.known_dims(x)?;
        let channels = dims.last().copied().unwrap_or(1) as usize;
        let offset = n.attrs.floats("offset")?.unwrap_or_else(|| vec![0.0]);
        let scale = n.attrs.floats("scale")?.unwrap_or_else(|| vec![1.0]);
        for (what, v) in [("offset", &offset), ("scale", &scale)] {
            if v.len() != 1 && v.len() != channels {
                return invalid(format!(
                    "Scaler's {what} has {} values; the input has {channels} features",
                    v.len()
                ));
            }
        }
        let offset_op = self
            .model
            .add_f32_tensor(vec![offset.len() as u32], &offset);
        let scale_op = self.model.add_f32_tensor(vec![scale.len() as u32], &scale);
        let shifted = self.arith(n, OperationType::Sub, x.operand, offset_op)?;
        let y = self.arith(n, OperationType::Mul, shifted, scale_op)?;
        self.set_tensor(n, 0, y, DataType::F32, x.scalar);
        Ok(())
    }

    pub(super) fn binarizer(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let threshold = n.attrs.float_or("threshold", 0.0)?;
        let t = self.scalar_tensor(OperandType::TensorFloat32, f64::from(threshold));
        let above = self.emit(n, OperationType::Greater, vec![x.operand, t])?;
        let y = self.cast_op(n, above, OperandType::TensorFloat32)?;
        self.set_tensor(n, 0, y, x.dtype, x.scalar);
        Ok(())
    }
}
