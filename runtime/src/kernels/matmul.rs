//! BATCH_MATMUL: ranks 2-4 with equal batch dimensions; `adj_x` / `adj_y` transpose the
//! last two dimensions of the left / right operand (expressed as GEMM strides, no copy).

use nnc_formats::nn::OperandType;

use super::linalg::{Layout, matmul};
use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

struct BatchMatmul {
    adj_x: bool,
    adj_y: bool,
}

pub(crate) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(0)?;
    if t != OperandType::TensorFloat32 {
        return Err(info.unsupported(format!(
            "input type {t} (only TENSOR_FLOAT32 is implemented)"
        )));
    }
    Ok(Box::new(BatchMatmul {
        adj_x: info.bool(2, "adjoint_lhs")?,
        adj_y: info.bool(3, "adjoint_rhs")?,
    }))
}

impl Kernel for BatchMatmul {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let a_t = ctx.input(0)?;
        let b_t = ctx.input(1)?;
        let (a, b) = (a_t.f32()?, b_t.f32()?);
        let (sa, sb) = (a_t.shape, b_t.shape);
        let r = sa.len();
        if r < 2 || r != sb.len() || sa[..r - 2] != sb[..r - 2] {
            return Err(RuntimeError::kernel(format!(
                "operand shapes {sa:?} and {sb:?} do not batch together"
            )));
        }
        let batch: usize = sa[..r - 2].iter().product();
        let (m, ka) = if self.adj_x {
            (sa[r - 1], sa[r - 2])
        } else {
            (sa[r - 2], sa[r - 1])
        };
        let (kb, n) = if self.adj_y {
            (sb[r - 1], sb[r - 2])
        } else {
            (sb[r - 2], sb[r - 1])
        };
        if ka != kb || a.len() != batch * m * ka || b.len() != batch * kb * n {
            return Err(RuntimeError::kernel(format!(
                "inner dimensions of {sa:?} and {sb:?} differ"
            )));
        }
        let k = ka;
        let parallelism = ctx.gemm_parallelism();
        let out = ctx.output(0)?.f32_mut()?;
        if out.len() != batch * m * n {
            return Err(RuntimeError::kernel(
                "output size does not match the product",
            ));
        }
        // Stored A is [m, k], or [k, m] when adjoint (element (i, kk) at kk * m + i);
        // stored B is [k, n], or [n, k] when adjoint.
        let la = if self.adj_x {
            Layout::col_major(m)
        } else {
            Layout::row_major(k)
        };
        let lb = if self.adj_y {
            Layout::col_major(k)
        } else {
            Layout::row_major(n)
        };
        for i in 0..batch {
            matmul(
                m,
                n,
                k,
                &mut out[i * m * n..(i + 1) * m * n],
                Layout::row_major(n),
                &a[i * m * k..(i + 1) * m * k],
                la,
                &b[i * k * n..(i + 1) * k * n],
                lb,
                false,
                parallelism,
            )?;
        }
        Ok(())
    }
}
