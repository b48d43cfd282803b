//! A bounds-checked wrapper around the `gemm` crate's f32 matrix multiply.
//!
//! `gemm::gemm` takes raw pointers and strides; [`matmul`] checks that every element the
//! strides can reach lies inside its slice before calling it, so callers stay in safe
//! code. Note the crate's naming: it computes `dst = alpha * dst + beta * lhs * rhs`.

use crate::error::{Result, RuntimeError};

/// A strided matrix view: element (i, j) is at `offset + i * row_stride + j * col_stride`.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub row_stride: usize,
    pub col_stride: usize,
}

impl Layout {
    /// Row-major with `cols` columns.
    pub fn row_major(cols: usize) -> Layout {
        Layout {
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// Column-major with `rows` rows.
    pub fn col_major(rows: usize) -> Layout {
        Layout {
            row_stride: 1,
            col_stride: rows,
        }
    }

    /// One past the largest index reached by a rows x cols matrix, `None` on overflow.
    fn extent(&self, rows: usize, cols: usize) -> Option<usize> {
        if rows == 0 || cols == 0 {
            return Some(0);
        }
        (rows - 1)
            .checked_mul(self.row_stride)?
            .checked_add((cols - 1).checked_mul(self.col_stride)?)?
            .checked_add(1)
    }
}

/// `dst (m x n) = [dst +] lhs (m x k) * rhs (k x n)`.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_layout: Layout,
    lhs: &[f32],
    lhs_layout: Layout,
    rhs: &[f32],
    rhs_layout: Layout,
    accumulate: bool,
    parallelism: gemm::Parallelism,
) -> Result<()> {
    let check = |len: usize, layout: &Layout, rows: usize, cols: usize, what: &str| -> Result<()> {
        match layout.extent(rows, cols) {
            Some(e) if e <= len && isize::try_from(e).is_ok() => Ok(()),
            _ => Err(RuntimeError::Internal(format!(
                "matmul {what} of {rows}x{cols} with strides {layout:?} exceeds its {len} elements"
            ))),
        }
    };
    check(dst.len(), &dst_layout, m, n, "destination")?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    dst[i * dst_layout.row_stride + j * dst_layout.col_stride] = 0.0;
                }
            }
        }
        return Ok(());
    }
    check(lhs.len(), &lhs_layout, m, k, "left operand")?;
    check(rhs.len(), &rhs_layout, k, n, "right operand")?;
    // SAFETY: the checks above guarantee that every (i, j) element of each matrix, at
    // offset i * row_stride + j * col_stride, lies inside its slice (and fits isize);
    // dst is borrowed mutably and exclusively, so it aliases neither lhs nor rhs.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            dst_layout.col_stride as isize,
            dst_layout.row_stride as isize,
            accumulate,
            lhs.as_ptr(),
            lhs_layout.col_stride as isize,
            lhs_layout.row_stride as isize,
            rhs.as_ptr(),
            rhs_layout.col_stride as isize,
            rhs_layout.row_stride as isize,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            parallelism,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_product_and_accumulate() {
        // [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50]
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [5.0, 6.0, 7.0, 8.0];
        let mut c = [0.0f32; 4];
        let l = Layout::row_major(2);
        matmul(
            2,
            2,
            2,
            &mut c,
            l,
            &a,
            l,
            &b,
            l,
            false,
            gemm::Parallelism::None,
        )
        .unwrap();
        assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
        matmul(
            2,
            2,
            2,
            &mut c,
            l,
            &a,
            l,
            &b,
            l,
            true,
            gemm::Parallelism::None,
        )
        .unwrap();
        assert_eq!(c, [38.0, 44.0, 86.0, 100.0]);
        // Transposed rhs through strides.
        let bt = [5.0, 7.0, 6.0, 8.0];
        matmul(
            2,
            2,
            2,
            &mut c,
            l,
            &a,
            l,
            &bt,
            Layout::col_major(2),
            false,
            gemm::Parallelism::None,
        )
        .unwrap();
        assert_eq!(c, [19.0, 22.0, 43.0, 50.0]);
    }

    #[test]
    fn out_of_bounds_is_an_error() {
        let mut c = [0.0f32; 3];
        let l = Layout::row_major(2);
        assert!(
            matmul(
                2,
                2,
                2,
                &mut c,
                l,
                &[0.0; 4],
                l,
                &[0.0; 4],
                l,
                false,
                gemm::Parallelism::None
            )
            .is_err()
        );
    }
}
