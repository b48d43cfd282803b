//! Loss operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
//!
//! Both lower as ONNX's own function bodies do, in NN operations plus the extension
//! operation GATHER_ELEMENTS: SoftmaxCrossEntropyLoss is LOG_SOFTMAX along the class axis
//! (its optional second output, `log_prob`) followed by NegativeLogLikelihoodLoss, which
//! picks each element's target class with GATHER_ELEMENTS along axis 1 (the target
//! between EXPAND_DIMS and SQUEEZE), negates it, multiplies by the GATHERed class weight,
//! and reduces: `none` keeps the `[N, d1, ..., dk]` loss, `sum` is REDUCE_SUM over all
//! axes, `mean` is MEAN without weights or ignored elements and otherwise
//! `sum(loss) / sum(weight[target])` over the elements not ignored (NaN when that is 0, as
//! in ONNX). `ignore_index` is an EQUAL mask: ignored targets are replaced by 0 before
//! gathering (so that every index stays in range), then their loss and weight are
//! SELECTed to 0.

use nnc_formats::nn::ops::Softmax;
use nnc_formats::nn::{OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::{Lowerer, NResult, Node, invalid};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

impl Lowerer<'_> {
    pub(super) fn nll_loss(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        if x.scalar {
            return invalid("needs an input of shape [N, C, d1, ..., dk]");
        }
        self.emit_nll(n, x.operand)
    }

    pub(super) fn softmax_cross_entropy_loss(&mut self, n: &Node) -> NResult<()> {
        let scores = self.tensor(n, 0)?;
        self.require_float(n, scores)?;
        if scores.scalar || self.rank(scores) < 2 {
            return invalid("needs scores of shape [N, C, d1, ..., dk]");
        }
        let mut inputs = vec![scores.operand];
        let class_axis = Softmax { beta: 1.0, axis: 1 };
        inputs.extend(class_axis.encode(OperationType::LogSoftmax, &mut self.model));
        let log_prob = self.emit(n, OperationType::LogSoftmax, inputs)?;
        self.emit_nll(n, log_prob)?;
        if self.output_used(n, 1) {
            self.set_tensor(n, 1, log_prob, DataType::F32, false);
        }
        Ok(())
    }

    /// NegativeLogLikelihoodLoss of the log-probabilities `x` (`[N, C, d1, ..., dk]`) with
    /// the node's target (input 1), optional weight (input 2), `ignore_index` and
    /// `reduction`; binds output 0.
    fn emit_nll(&mut self, n: &Node, x: u32) -> NResult<()> {
        use OperationType as O;
        let reduction = match n.attrs.string_or("reduction", "mean")?.as_str() {
            "none" => Reduction::None,
            "sum" => Reduction::Sum,
            "mean" => Reduction::Mean,
            other => {
                return invalid(format!(
                    "reduction must be 'none', 'sum' or 'mean', got '{other}'"
                ));
            }
        };
        let dims = self.model.main.operands[x as usize].dimensions.clone();
        if dims.len() < 2 {
            return invalid(format!(
                "needs an input of shape [N, C, d1, ..., dk], got rank {}",
                dims.len()
            ));
        }
        let target = self.tensor(n, 1)?;
        if self.operand_type(target) != OperandType::TensorInt32 {
            return invalid("the target must be an integer tensor");
        }
        let target_dims = self.dims(target);
        let expected: Vec<u32> = [dims[0]].iter().chain(&dims[2..]).copied().collect();
        let agree = |a: u32, b: u32| a == 0 || b == 0 || a == b;
        if target_dims.len() != expected.len()
            || !target_dims
                .iter()
                .zip(&expected)
                .all(|(&a, &b)| agree(a, b))
        {
            return invalid(format!(
                "the target's shape {target_dims:?} is not the input's {dims:?} without the \
                 class dimension"
            ));
        }
        let weight = match self.input_name(n, 2) {
            None => None,
            Some(_) => {
                let w = self.tensor(n, 2)?;
                self.require_float(n, w)?;
                match self.dims(w).as_slice() {
                    [c] if agree(*c, dims[1]) => Some(w.operand),
                    other => {
                        return invalid(format!(
                            "the weight must have shape [C] = [{}], got {other:?}",
                            dims[1]
                        ));
                    }
                }
            }
        };
        // Targets compute as 32-bit integers (ONNX int64 values are range-checked at the
        // boundary), so an ignore_index beyond them matches no element.
        let ignore = n
            .attrs
            .int("ignore_index")?
            .and_then(|v| i32::try_from(v).ok());
        let (mask, index) = match ignore {
            Some(ii) => {
                let ii = self.scalar_tensor(OperandType::TensorInt32, f64::from(ii));
                let mask = self.emit(n, O::Equal, vec![target.operand, ii])?;
                let zero = self.scalar_tensor(OperandType::TensorInt32, 0.0);
                let index = self.emit(n, O::Select, vec![mask, zero, target.operand])?;
                (Some(mask), index)
            }
            None => (None, target.operand),
        };
        // -x[n, target[n, d...], d...]: GATHER_ELEMENTS wants indices of the input's rank.
        let one = self.i32_const(1);
        let expanded = self.emit(n, O::ExpandDims, vec![index, one])?;
        let class_axis = self.i32_const(1);
        let picked = self.emit(n, O::GatherElements, vec![x, class_axis, expanded])?;
        let squeeze_axes = self.i32_vector(&[1]);
        let picked = self.emit(n, O::Squeeze, vec![picked, squeeze_axes])?;
        let mut loss = self.emit(n, O::Neg, vec![picked])?;
        let mut weights = match weight {
            Some(w) => {
                let axis0 = self.i32_const(0);
                let w = self.emit(n, O::Gather, vec![w, axis0, index])?;
                loss = self.arith(n, O::Mul, loss, w)?;
                Some(w)
            }
            None => None,
        };
        if let Some(mask) = mask {
            let zero = self.scalar_tensor(OperandType::TensorFloat32, 0.0);
            loss = self.emit(n, O::Select, vec![mask, zero, loss])?;
            if reduction == Reduction::Mean {
                // The mean's denominator: the weights (1 without them) of the elements
                // not ignored.
                let kept = match weights {
                    Some(w) => w,
                    None => self.scalar_tensor(OperandType::TensorFloat32, 1.0),
                };
                weights = Some(self.emit(n, O::Select, vec![mask, zero, kept])?);
            }
        }
        let all_axes: Vec<i32> = (0..target_dims.len() as i32).collect();
        let reduce = |this: &mut Self, op: O, v: u32| -> NResult<u32> {
            let axes = this.i32_vector(&all_axes);
            this.reduce_op(n, op, v, axes, false)
        };
        let (out, scalar) = match (reduction, weights) {
            (Reduction::None, _) => (loss, false),
            (Reduction::Sum, _) => (reduce(self, O::ReduceSum, loss)?, true),
            (Reduction::Mean, None) => (reduce(self, O::Mean, loss)?, true),
            (Reduction::Mean, Some(w)) => {
                let total = reduce(self, O::ReduceSum, loss)?;
                let weight_total = reduce(self, O::ReduceSum, w)?;
                (self.arith(n, O::Div, total, weight_total)?, true)
            }
        };
        self.set_tensor(n, 0, out, DataType::F32, scalar);
        Ok(())
    }
}
