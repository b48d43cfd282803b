//! Running reductions along one axis: nnc's CUMSUM extension operation
//! (`docs/EXTENSIONS.md`), inclusive or exclusive, forward or reversed. Float sums
//! accumulate in f64 and are rounded once per element; int32 sums wrap.

use nnc_formats::nn::OperandType;

use super::util::{axis, split_at_axis};
use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

pub(crate) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(CumSum {
        axis: info.i32(1, "axis")?,
        exclusive: info.bool(2, "exclusive")?,
        reverse: info.bool(3, "reverse")?,
    }))
}

struct CumSum {
    axis: i32,
    exclusive: bool,
    reverse: bool,
}

impl CumSum {
    /// Calls `f(read, write)` with element offsets in running order for every lane.
    fn lanes(
        &self,
        shape: &[usize],
        mut lane: impl FnMut(&mut dyn Iterator<Item = usize>),
    ) -> Result<()> {
        let a = axis(self.axis, shape.len())?;
        let (outer, mid, inner) = split_at_axis(shape, a);
        for o in 0..outer {
            for i in 0..inner {
                let base = o * mid * inner + i;
                let at = move |k: usize| base + k * inner;
                if self.reverse {
                    lane(&mut (0..mid).rev().map(at));
                } else {
                    lane(&mut (0..mid).map(at));
                }
            }
        }
        Ok(())
    }
}

impl Kernel for CumSum {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let shape = input.shape;
        let exclusive = self.exclusive;
        match input.operand_type {
            OperandType::TensorFloat32 => {
                let x = input.f32()?;
                let out = ctx.output(0)?.f32_mut()?;
                if out.len() != x.len() {
                    return Err(RuntimeError::kernel("input and output sizes differ"));
                }
                self.lanes(shape, |order| {
                    let mut sum = 0f64;
                    for k in order {
                        let before = sum;
                        sum += f64::from(x[k]);
                        out[k] = if exclusive { before } else { sum } as f32;
                    }
                })
            }
            OperandType::TensorInt32 => {
                let x = input.i32()?;
                let out = ctx.output(0)?.i32_mut()?;
                if out.len() != x.len() {
                    return Err(RuntimeError::kernel("input and output sizes differ"));
                }
                self.lanes(shape, |order| {
                    let mut sum = 0i32;
                    for k in order {
                        let before = sum;
                        sum = sum.wrapping_add(x[k]);
                        out[k] = if exclusive { before } else { sum };
                    }
                })
            }
            t => Err(RuntimeError::kernel(format!(
                "CUMSUM of {t} is not implemented"
            ))),
        }
    }
}
