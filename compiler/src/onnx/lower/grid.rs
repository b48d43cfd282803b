//! Sampling grids: AffineGrid.

use nnc_formats::nn::OperationType;

use super::super::constant;
use super::{Lowerer, NResult, Node, invalid, unsupported};

/// The most grid points (times batch and coordinates) a base grid constant may hold.
const MAX_GRID_VALUES: usize = 1 << 24;

/// Normalized coordinate `i` of `len` along one axis, as ONNX's AffineGrid places it:
/// the corners' centres at -1 and 1 with `align_corners`, else the pixels' centres.
fn coordinate(i: usize, len: usize, align_corners: bool) -> f32 {
    let (i, len) = (i as f64, len as f64);
    let c = if align_corners {
        if len > 1.0 {
            -1.0 + 2.0 * i / (len - 1.0)
        } else {
            -1.0
        }
    } else {
        -1.0 + (2.0 * i + 1.0) / len
    };
    c as f32
}

impl Lowerer<'_> {
    /// AffineGrid: a constant base grid for the static `size` (per point its coordinates
    /// from the last spatial axis to the first, x, y[, z], then 1) times each batch's
    /// theta, as one BATCH_MATMUL [N, points, r+1] x [N, r, r+1]^T, reshaped to
    /// [N, (D,) H, W, r].
    pub(super) fn affine_grid(&mut self, n: &Node) -> NResult<()> {
        let align_corners = n.attrs.int_or("align_corners", 0)? != 0;
        let theta = self.tensor(n, 0)?;
        self.require_float(n, theta)?;
        let size = constant::to_i64s(&*self.required_const(n, 1)?);
        let r = match size.len() {
            4 => 2,
            5 => 3,
            k => {
                return invalid(format!(
                    "AffineGrid's size has {k} values; 4 (N, C, H, W) or 5 (N, C, D, H, W) expected"
                ));
            }
        };
        let dims: Vec<usize> = size
            .iter()
            .map(|&d| usize::try_from(d).ok().filter(|&d| d > 0))
            .collect::<Option<_>>()
            .ok_or_else(|| {
                super::NodeError::Invalid(format!("AffineGrid's size {size:?} is not positive"))
            })?;
        let (batch, spatial) = (dims[0], &dims[2..]);
        let theta_dims = self.known_dims(theta)?;
        if theta_dims.iter().map(|&d| d as usize).ne([batch, r, r + 1]) {
            return invalid(format!(
                "AffineGrid's theta is {theta_dims:?}; size {size:?} needs [{batch}, {r}, {}]",
                r + 1
            ));
        }
        let points = spatial.iter().product::<usize>();
        let values = batch
            .checked_mul(points)
            .and_then(|v| v.checked_mul(r + 1))
            .filter(|&v| v <= MAX_GRID_VALUES);
        let Some(values) = values else {
            return unsupported(format!(
                "AffineGrid of size {size:?} needs a base grid beyond {MAX_GRID_VALUES} values"
            ));
        };
        let mut grid = Vec::with_capacity(values);
        for _ in 0..batch {
            for p in 0..points {
                // Row-major position of point p, coordinates from the last axis (x).
                let mut rest = p;
                let mut position = vec![0usize; r];
                for axis in (0..r).rev() {
                    position[axis] = rest % spatial[axis];
                    rest /= spatial[axis];
                }
                for axis in (0..r).rev() {
                    grid.push(coordinate(position[axis], spatial[axis], align_corners));
                }
                grid.push(1.0);
            }
        }
        let base =
            self.const_operand_owned(constant::f32_tensor(vec![batch, points, r + 1], &grid))?;
        let (no, yes) = (self.bool_const(false), self.bool_const(true));
        let product = self.emit(
            n,
            OperationType::BatchMatmul,
            vec![base.operand, theta.operand, no, yes],
        )?;
        let mut out_dims: Vec<u32> = vec![batch as u32];
        out_dims.extend(spatial.iter().map(|&d| d as u32));
        out_dims.push(r as u32);
        let out = self.reshape_to(n, product, &out_dims)?;
        self.set_tensor(n, 0, out, theta.dtype, false);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::coordinate;

    #[test]
    fn coordinates_follow_onnx() {
        // Pixel centres: -1 + (2i + 1) / L.
        assert_eq!(
            (0..4).map(|i| coordinate(i, 4, false)).collect::<Vec<_>>(),
            [-0.75, -0.25, 0.25, 0.75]
        );
        // Corners: -1 .. 1 inclusive; one pixel sits at -1.
        assert_eq!(
            (0..3).map(|i| coordinate(i, 3, true)).collect::<Vec<_>>(),
            [-1.0, 0.0, 1.0]
        );
        assert_eq!(coordinate(0, 1, true), -1.0);
        assert_eq!(coordinate(0, 1, false), 0.0);
    }
}
