//! Reductions: MEAN, REDUCE_SUM, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD (float32) and
//! REDUCE_ANY, REDUCE_ALL (bool8). Axes may be negative and repeated; keep_dims only
//! changes the output shape, which the executor provides, not the element order.
//!
//! Sums, means and products accumulate in f64 and round once, so long reductions stay
//! within the float32 tolerance.

use nnc_formats::nn::OperandType;
use nnc_formats::nn::ops::Reduce as ReduceParams;

use super::util::axis;
use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

/// The reduction an operation computes, chosen where it is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReduceOp {
    Mean,
    Sum,
    Max,
    Min,
    Prod,
    Any,
    All,
}

struct Reduce {
    op: ReduceOp,
    /// The axes when they are a constant; `None` reads them from input 1 at run time.
    axes: Option<Vec<i32>>,
}

pub(crate) fn build(info: &OpInfo, op: ReduceOp) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(0)?;
    let expected = if matches!(op, ReduceOp::Any | ReduceOp::All) {
        OperandType::TensorBool8
    } else {
        OperandType::TensorFloat32
    };
    if t != expected {
        return Err(info.unsupported(format!("operand type {t}")));
    }
    // Axes computed at run time (an NN tensor input like any other) are read per run.
    let axes = ReduceParams::decode(info.op_type(), info.views())
        .map_err(|e| info.signature_error(e))?
        .axes;
    Ok(Box::new(Reduce { op, axes }))
}

/// Folds `x` (shape `shape`) over the dims flagged in `reduced` into `out` (pre-filled
/// with the identity), which holds the kept dims in order.
pub(crate) fn reduce_into<T: Copy, A: Copy>(
    x: &[T],
    shape: &[usize],
    reduced: &[bool],
    out: &mut [A],
    f: impl Fn(A, T) -> A,
) -> Result<()> {
    if x.len() != shape.iter().product::<usize>() || reduced.len() != shape.len() {
        return Err(RuntimeError::kernel(
            "reduction input does not match its shape",
        ));
    }
    // Collapse runs of dims with the same flag; drop unit dims.
    let mut dims: Vec<(usize, bool)> = Vec::new();
    for (&d, &r) in shape.iter().zip(reduced) {
        if d == 1 {
            continue;
        }
        match dims.last_mut() {
            Some((e, lr)) if *lr == r => *e *= d,
            _ => dims.push((d, r)),
        }
    }
    if dims.is_empty() {
        dims.push((1, false));
    }
    let kept: usize = dims.iter().filter(|(_, r)| !r).map(|(e, _)| e).product();
    if out.len() != kept {
        return Err(RuntimeError::kernel(format!(
            "output holds {} values, the reduction gives {kept}",
            out.len()
        )));
    }
    // Output stride of every dim (0 for reduced ones).
    let mut ostride = vec![0usize; dims.len()];
    let mut s = 1;
    for (i, &(e, r)) in dims.iter().enumerate().rev() {
        if !r {
            ostride[i] = s;
            s *= e;
        }
    }
    let n = dims.len();
    let (inner, inner_reduced) = dims[n - 1];
    let outer_dims: Vec<usize> = dims[..n - 1].iter().map(|d| d.0).collect();
    let outer: usize = outer_dims.iter().product();
    let mut idx = vec![0usize; outer_dims.len()];
    let mut o = 0usize;
    for row in 0..outer {
        let src = &x[row * inner..(row + 1) * inner];
        if inner_reduced {
            let mut acc = out[o];
            for &v in src {
                acc = f(acc, v);
            }
            out[o] = acc;
        } else {
            for (a, &v) in out[o..o + inner].iter_mut().zip(src) {
                *a = f(*a, v);
            }
        }
        for d in (0..outer_dims.len()).rev() {
            idx[d] += 1;
            o += ostride[d];
            if idx[d] < outer_dims[d] {
                break;
            }
            o -= ostride[d] * outer_dims[d];
            idx[d] = 0;
        }
    }
    Ok(())
}

impl Kernel for Reduce {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let shape = input.shape;
        let runtime_axes;
        let axes: &[i32] = match &self.axes {
            Some(a) => a,
            None => {
                runtime_axes = ctx.input(1)?.i32()?.to_vec();
                &runtime_axes
            }
        };
        let mut reduced = vec![false; shape.len()];
        for &a in axes {
            reduced[axis(a, shape.len())?] = true;
        }
        let out = ctx.output(0)?;
        match self.op {
            ReduceOp::Any | ReduceOp::All => {
                let x = input.u8()?;
                let o = out.u8_mut()?;
                if self.op == ReduceOp::Any {
                    o.fill(0);
                    reduce_into(x, shape, &reduced, o, |a, v| u8::from(a != 0 || v != 0))
                } else {
                    o.fill(1);
                    reduce_into(x, shape, &reduced, o, |a, v| u8::from(a != 0 && v != 0))
                }
            }
            ReduceOp::Max | ReduceOp::Min => {
                let x = input.f32()?;
                let o = out.f32_mut()?;
                if self.op == ReduceOp::Max {
                    o.fill(f32::NEG_INFINITY);
                    reduce_into(x, shape, &reduced, o, |a, v| if v > a { v } else { a })
                } else {
                    o.fill(f32::INFINITY);
                    reduce_into(x, shape, &reduced, o, |a, v| if v < a { v } else { a })
                }
            }
            ReduceOp::Mean | ReduceOp::Sum | ReduceOp::Prod => {
                let x = input.f32()?;
                let o = out.f32_mut()?;
                let mut acc = vec![
                    if self.op == ReduceOp::Prod {
                        1.0f64
                    } else {
                        0.0
                    };
                    o.len()
                ];
                if self.op == ReduceOp::Prod {
                    reduce_into(x, shape, &reduced, &mut acc, |a, v| a * f64::from(v))?;
                } else {
                    reduce_into(x, shape, &reduced, &mut acc, |a, v| a + f64::from(v))?;
                }
                let count: usize = shape
                    .iter()
                    .zip(&reduced)
                    .filter(|(_, r)| **r)
                    .map(|(d, _)| d)
                    .product();
                let mean = self.op == ReduceOp::Mean;
                for (o, a) in o.iter_mut().zip(acc) {
                    *o = if mean { a / count as f64 } else { a } as f32;
                }
                Ok(())
            }
        }
    }
}
