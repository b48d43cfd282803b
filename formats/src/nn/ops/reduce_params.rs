//! Typed parameters of MEAN and the REDUCE_* family, decoded once and encoded once.
//!
//! After the input come the axes (a 1-D INT32 tensor, constant or computed at run time)
//! and keep_dims, an INT32 scalar for MEAN (as NNAPI 1.1 defined it) and a BOOL for the
//! REDUCE_* operations (NNAPI 1.2). [`Reduce`] is the one reader (`decode`: the shape
//! rule and the runtime's kernels) and the one writer (`encode`: the frontends and the
//! passes) of that layout, so no caller has to remember which type keep_dims takes.

use super::context::*;
use super::{InputView, Result};
use crate::nn::model::{Model, OperandIndex};
use crate::nn::types::OperationType;

/// MEAN and REDUCE_*: the parameters after the input. `A` is how the axes are held: their
/// values as decoded (`None` when computed at run time), or the operand that holds them
/// when encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reduce<A = Option<Vec<i32>>> {
    pub axes: A,
    /// Reduced dimensions stay, with extent 1.
    pub keep_dims: bool,
}

impl Reduce {
    /// Reads the parameters of a reduction (the runtime's view: constants have values,
    /// computed axes do not).
    pub fn decode(op: OperationType, inputs: &[InputView]) -> Result<Reduce> {
        let ctx = Operands { inputs };
        ctx.count(&[3])?;
        Reduce::decode_params(op, &ctx)
    }

    pub(in crate::nn::ops) fn decode_params(op: OperationType, ctx: &Operands) -> Result<Reduce> {
        let axes = ctx.i32_vector(1, "axes")?;
        let keep_dims = if op == OperationType::Mean {
            ctx.i32(2, "keep_dims")? != 0
        } else {
            ctx.bool(2, "keep_dims")?
        };
        Ok(Reduce { axes, keep_dims })
    }
}

impl Reduce<OperandIndex> {
    /// The parameter operands after the input, in the order `decode` reads them, with
    /// keep_dims in the type `op` takes.
    pub fn encode(&self, op: OperationType, model: &mut Model) -> Vec<OperandIndex> {
        let keep = if op == OperationType::Mean {
            model.add_i32(i32::from(self.keep_dims))
        } else {
            model.add_bool(self.keep_dims)
        };
        vec![self.axes, keep]
    }
}
