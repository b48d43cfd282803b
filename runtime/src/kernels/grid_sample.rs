//! nnc's GRID_SAMPLE extension operation (`docs/EXTENSIONS.md`): an NHWC input sampled
//! at the `(x, y)` points of a grid, ONNX's GridSample over two spatial dimensions.
//!
//! A grid value `g` in [-1, 1] maps to the pixel coordinate `((g + 1) / 2) * (len - 1)`
//! with `align_corners` (-1 and 1 are the centres of the edge pixels), else
//! `((g + 1) * len - 1) / 2` (-1 and 1 are the outer edges of the edge pixels), in f32 as
//! ONNX's reference and ONNX Runtime compute it. Each axis then has its taps (1 nearest,
//! 2 bilinear, 4 bicubic) and every tap index outside the input is padded on its own:
//! zero, the nearest edge pixel, or the pixel mirrored at the edges. Padding each tap
//! is what PyTorch and ONNX Runtime do; ONNX's reference moves an out-of-range point
//! inside first, which gives the same values except in bicubic mode, where it would
//! drop the taps beyond the edge.
//!
//! With channels innermost, each output pixel computes its taps and weights once and
//! then reads whole channel runs.

use nnc_formats::nn::OperandType;
use nnc_formats::nn::ops::GridSample as GridSampleParams;
use nnc_formats::nn::types::{GridSampleMode, GridSamplePadding};

use super::util::{for_each_chunk, rank4};
use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};

/// Keys' cubic convolution parameter ONNX's GridSample fixes.
const CUBIC_A: f32 = -0.75;

pub(crate) fn build(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    for (i, what) in [(0, "input"), (1, "grid")] {
        let t = info.input_type(i)?;
        if t != OperandType::TensorFloat32 {
            return Err(info.unsupported(format!(
                "{what} of type {t} (only TENSOR_FLOAT32 is implemented)"
            )));
        }
    }
    let params = GridSampleParams::decode(info.views()).map_err(|e| info.signature_error(e))?;
    Ok(Box::new(GridSample {
        sampler: Sampler {
            mode: params.mode,
            padding: params.padding,
            align_corners: params.align_corners,
        },
    }))
}

struct GridSample {
    sampler: Sampler,
}

#[derive(Clone, Copy)]
struct Sampler {
    mode: GridSampleMode,
    padding: GridSamplePadding,
    align_corners: bool,
}

/// The taps of one axis: an index into the axis (`None`: a zero from padding) and its
/// weight, the first `len` of them used.
struct Taps {
    index: [Option<usize>; 4],
    weight: [f32; 4],
    len: usize,
}

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(RuntimeError::kernel(message))
}

impl Kernel for GridSample {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let grid = ctx.input(1)?;
        let threads = ctx.threads;
        let [n, h, w, c] = rank4(input.shape, "input")?;
        let [gn, oh, ow, coords] = rank4(grid.shape, "grid")?;
        if gn != n || coords != 2 {
            return err(format!(
                "grid {:?} does not fit input {:?}: it needs [{n}, height, width, 2]",
                grid.shape, input.shape
            ));
        }
        let x = input.f32()?;
        let g = grid.f32()?;
        let out = ctx.output(0)?;
        if out.shape != [n, oh, ow, c] {
            return err(format!(
                "output {:?} is not [{n}, {oh}, {ow}, {c}]",
                out.shape
            ));
        }
        let out = out.f32_mut()?;
        if out.is_empty() {
            return Ok(());
        }
        if h == 0 || w == 0 {
            // No pixel to read: only zero padding has a value to give.
            if self.sampler.padding == GridSamplePadding::Zeros {
                out.fill(0.0);
                return Ok(());
            }
            return err("border and reflection padding need an input of at least one pixel");
        }
        let sampler = self.sampler;
        let image_len = h * w * c;
        // One chunk per output row: (batch, row) from the chunk index.
        for_each_chunk(threads, out, ow * c, |r, row| {
            let b = r / oh;
            let image = &x[b * image_len..(b + 1) * image_len];
            let points = &g[r * ow * 2..(r + 1) * ow * 2];
            for (point, pixel) in points.chunks_exact(2).zip(row.chunks_exact_mut(c)) {
                let xs = sampler.taps(point[0], w);
                let ys = sampler.taps(point[1], h);
                sample(image, w, c, &xs, &ys, pixel);
            }
        });
        Ok(())
    }
}

/// One output pixel: `sum_i wy_i * sum_j wx_j * input[y_i, x_j]`, rows first as ONNX
/// Runtime sums them, per channel.
fn sample(image: &[f32], w: usize, c: usize, xs: &Taps, ys: &Taps, pixel: &mut [f32]) {
    pixel.fill(0.0);
    for (&yi, &wy) in ys.index[..ys.len].iter().zip(&ys.weight[..ys.len]) {
        let Some(yi) = yi else { continue };
        let row = &image[yi * w * c..(yi + 1) * w * c];
        // The present taps of this row.
        let mut runs: [(&[f32], f32); 4] = [(&[], 0.0); 4];
        let mut k = 0;
        for (&xj, &wx) in xs.index[..xs.len].iter().zip(&xs.weight[..xs.len]) {
            if let Some(xj) = xj {
                runs[k] = (&row[xj * c..(xj + 1) * c], wx);
                k += 1;
            }
        }
        let runs = &runs[..k];
        for (ch, v) in pixel.iter_mut().enumerate() {
            let s: f32 = runs.iter().map(|(run, wx)| wx * run[ch]).sum();
            *v += wy * s;
        }
    }
}

impl Sampler {
    /// The pixel coordinate of grid value `g` along an axis of `len` pixels.
    fn unnormalize(&self, g: f32, len: usize) -> f32 {
        let len = len as f32;
        if self.align_corners {
            (g + 1.0) / 2.0 * (len - 1.0)
        } else {
            ((g + 1.0) * len - 1.0) / 2.0
        }
    }

    /// The taps of grid value `g` along an axis of `len >= 1` pixels. Coordinates far
    /// outside (or not finite) saturate to indices that padding handles like any other.
    fn taps(&self, g: f32, len: usize) -> Taps {
        let x = self.unnormalize(g, len);
        let mut taps = Taps {
            index: [None; 4],
            weight: [0.0; 4],
            len: 0,
        };
        let mut push = |i: i64, weight: f32| {
            taps.index[taps.len] = self.pad(i, len);
            taps.weight[taps.len] = weight;
            taps.len += 1;
        };
        match self.mode {
            GridSampleMode::Nearest => push(x.round_ties_even() as i64, 1.0),
            GridSampleMode::Bilinear => {
                let f = x.floor();
                let i = f as i64;
                push(i, (f + 1.0) - x);
                push(i.saturating_add(1), x - f);
            }
            GridSampleMode::Bicubic => {
                let f = x.floor();
                let t = x - f;
                let i = f as i64;
                for (k, d) in [1.0 + t, t, 1.0 - t, 2.0 - t].into_iter().enumerate() {
                    push(i.saturating_add(k as i64 - 1), keys(d));
                }
            }
        }
        taps
    }

    /// Index `i` of an axis of `len >= 1` pixels after padding (`None`: zero).
    fn pad(&self, i: i64, len: usize) -> Option<usize> {
        let n = len as i64;
        match self.padding {
            GridSamplePadding::Zeros => (0..n).contains(&i).then_some(i as usize),
            GridSamplePadding::Border => Some(i.clamp(0, n - 1) as usize),
            GridSamplePadding::Reflection => {
                // Mirrored at the edge pixels' centres (align_corners: period 2(n-1)) or
                // at their outer edges (period 2n, each edge pixel repeated).
                let m = if self.align_corners {
                    if n == 1 {
                        return Some(0);
                    }
                    let period = 2 * (n - 1);
                    let m = i.rem_euclid(period);
                    if m >= n { period - m } else { m }
                } else {
                    let period = 2 * n;
                    let m = i.rem_euclid(period);
                    if m >= n { period - 1 - m } else { m }
                };
                Some(m as usize)
            }
        }
    }
}

/// Keys' cubic convolution kernel at distance `d >= 0`.
fn keys(d: f32) -> f32 {
    let a = CUBIC_A;
    if d <= 1.0 {
        ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
    } else if d < 2.0 {
        ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use nnc_formats::nn::{Lifetime, Operand, Operation, OperationType};

    use super::*;
    use crate::kernels::util::test_rng::Rng;
    use crate::kernels::{PreparedWeights, Scratch};
    use crate::tensor::{TensorMut, TensorRef};

    /// Runs GRID_SAMPLE through the kernel the runtime builds: `input` NHWC of `shape`,
    /// `grid` of `[n, oh, ow, 2]`.
    fn run(
        shape: [usize; 4],
        input: &[f32],
        grid_shape: [usize; 4],
        grid: &[f32],
        s: Sampler,
        threads: usize,
    ) -> Result<Vec<f32>> {
        let dims = |d: &[usize]| d.iter().map(|&v| v as u32).collect::<Vec<_>>();
        let scalar = |t: OperandType| {
            let mut o = Operand::new(t, vec![]);
            o.lifetime = Lifetime::ConstantCopy;
            o
        };
        let out_shape = [shape[0], grid_shape[1], grid_shape[2], shape[3]];
        let operands = vec![
            Operand::new(OperandType::TensorFloat32, dims(&shape)),
            Operand::new(OperandType::TensorFloat32, dims(&grid_shape)),
            scalar(OperandType::Int32),
            scalar(OperandType::Int32),
            scalar(OperandType::Bool),
            Operand::new(OperandType::TensorFloat32, dims(&out_shape)),
        ];
        let values: Vec<(u32, Vec<u8>)> = vec![
            (2, (s.mode as i32).to_le_bytes().to_vec()),
            (3, (s.padding as i32).to_le_bytes().to_vec()),
            (4, vec![u8::from(s.align_corners)]),
        ];
        let operation = Operation {
            op_type: OperationType::GridSample,
            inputs: vec![0, 1, 2, 3, 4],
            outputs: vec![5],
            source: String::new(),
        };
        let kernel = crate::kernels::build(&operation, &operands, |i| {
            values
                .iter()
                .find(|(k, _)| *k == i)
                .map(|(_, v)| v.as_slice())
        })?;
        let mut out = vec![f32::NAN; out_shape.iter().product()];
        let weights = PreparedWeights::empty();
        let mut scratch = Scratch::new();
        let tensor = |shape, bytes| TensorRef {
            operand_type: OperandType::TensorFloat32,
            shape,
            bytes,
            scale: 0.0,
            zero_point: 0,
        };
        let mut ctx = KernelContext {
            inputs: vec![
                Some(tensor(&shape, bytemuck::cast_slice(input))),
                Some(tensor(&grid_shape, bytemuck::cast_slice(grid))),
            ],
            outputs: vec![TensorMut {
                operand_type: OperandType::TensorFloat32,
                shape: &out_shape,
                bytes: bytemuck::cast_slice_mut(&mut out),
                scale: 0.0,
                zero_point: 0,
                row_stride: None,
            }],
            weights: &weights,
            scratch: &mut scratch,
            threads,
        };
        kernel.run(&mut ctx)?;
        Ok(out)
    }

    /// ONNX's reference procedure in f64 for one output value (from the f32 pixel
    /// coordinate, which the reference also computes in f32): nearest and bilinear move
    /// an out-of-range coordinate inside (clamped or reflected) before reading, as the
    /// reference does; bicubic pads each tap (PyTorch and ONNX Runtime; see the module
    /// documentation).
    fn reference(
        image: &[f32],
        [h, w, c]: [usize; 3],
        ch: usize,
        (gx, gy): (f32, f32),
        s: Sampler,
    ) -> f64 {
        // -1 and 1 at the edge pixels' centres or outer edges, computed in f32.
        let unnormalize = |g: f32, len: usize| {
            let (lo, hi) = if s.align_corners {
                (0.0, len as f32 - 1.0)
            } else {
                (-0.5, len as f32 - 0.5)
            };
            f64::from(lo + (g + 1.0) * 0.5 * (hi - lo))
        };
        // The reference's borders: edge pixel centres, or their outer edges.
        let bounds = |len: usize| {
            let len = len as f64;
            if s.align_corners {
                (0.0, len - 1.0)
            } else {
                (-0.5, len - 0.5)
            }
        };
        // Reflection by repeated mirroring at the bounds (`lo == hi`: the one pixel).
        let reflect = |mut v: f64, (lo, hi): (f64, f64)| {
            if hi <= lo {
                return lo;
            }
            while v < lo || v > hi {
                v = if v < lo { 2.0 * lo - v } else { 2.0 * hi - v };
            }
            v
        };
        let pixel = |y: i64, x: i64| -> f64 {
            let fetch = |y: i64, x: i64| f64::from(image[(y as usize * w + x as usize) * c + ch]);
            let (hh, ww) = (h as i64, w as i64);
            match s.padding {
                GridSamplePadding::Zeros => {
                    if (0..hh).contains(&y) && (0..ww).contains(&x) {
                        fetch(y, x)
                    } else {
                        0.0
                    }
                }
                GridSamplePadding::Border => fetch(y.clamp(0, hh - 1), x.clamp(0, ww - 1)),
                GridSamplePadding::Reflection => fetch(
                    reflect(y as f64, bounds(h)) as i64,
                    reflect(x as f64, bounds(w)) as i64,
                ),
            }
        };
        let (mut x, mut y) = (unnormalize(gx, w), unnormalize(gy, h));
        if s.mode == GridSampleMode::Nearest {
            // f64's round_ties_even: rint, halfway cases to even.
            x = x.round_ties_even();
            y = y.round_ties_even();
        }
        if s.mode != GridSampleMode::Bicubic {
            let inside = |v: f64, (lo, hi): (f64, f64)| (lo..=hi).contains(&v);
            if !inside(x, bounds(w)) || !inside(y, bounds(h)) {
                match s.padding {
                    GridSamplePadding::Zeros => {}
                    GridSamplePadding::Border => {
                        x = x.clamp(0.0, w as f64 - 1.0);
                        y = y.clamp(0.0, h as f64 - 1.0);
                    }
                    GridSamplePadding::Reflection => {
                        x = reflect(x, bounds(w));
                        y = reflect(y, bounds(h));
                    }
                }
            }
        }
        // Keys' kernel, written from its definition.
        let cubic = |d: f64| {
            let (a, d) = (-0.75, d.abs());
            if d <= 1.0 {
                (a + 2.0) * d.powi(3) - (a + 3.0) * d * d + 1.0
            } else if d < 2.0 {
                a * d.powi(3) - 5.0 * a * d * d + 8.0 * a * d - 4.0 * a
            } else {
                0.0
            }
        };
        match s.mode {
            GridSampleMode::Nearest => pixel(y as i64, x as i64),
            GridSampleMode::Bilinear => {
                let (x0, y0) = (x.floor(), y.floor());
                let mut v = 0.0;
                for yi in [y0, y0 + 1.0] {
                    for xi in [x0, x0 + 1.0] {
                        let weight = (1.0 - (x - xi).abs()) * (1.0 - (y - yi).abs());
                        v += weight * pixel(yi as i64, xi as i64);
                    }
                }
                v
            }
            GridSampleMode::Bicubic => {
                let (x0, y0) = (x.floor(), y.floor());
                let mut v = 0.0;
                for dy in -1..=2 {
                    for dx in -1..=2 {
                        let (xi, yi) = (x0 + f64::from(dx), y0 + f64::from(dy));
                        v += cubic(x - xi) * cubic(y - yi) * pixel(yi as i64, xi as i64);
                    }
                }
                v
            }
        }
    }

    fn every_sampler() -> Vec<Sampler> {
        let mut all = Vec::new();
        for &mode in GridSampleMode::ALL {
            for &padding in GridSamplePadding::ALL {
                for align_corners in [false, true] {
                    all.push(Sampler {
                        mode,
                        padding,
                        align_corners,
                    });
                }
            }
        }
        all
    }

    /// Every mode x padding mode x align_corners against the f64 reference, on grid
    /// points inside, on and beyond the edges (up to two and a half widths out, so
    /// reflection mirrors more than once), single- and multi-threaded.
    #[test]
    fn grid_sample_matches_the_reference_everywhere() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for &(shape, out) in &[
            ([2, 3, 4, 3], (5, 6)),
            ([1, 5, 2, 1], (4, 3)),
            ([1, 1, 1, 2], (2, 3)),
        ] {
            let [n, h, w, c] = shape;
            let input = rng.f32s(n * h * w * c);
            let grid_shape = [n, out.0, out.1, 2];
            let mut grid: Vec<f32> = rng
                .f32s(n * out.0 * out.1 * 2)
                .into_iter()
                .map(|v| v * 3.5)
                .collect();
            // Exact edges and the centre.
            grid[..6].copy_from_slice(&[-1.0, 1.0, 1.0, -1.0, 0.0, 0.0]);
            for s in every_sampler() {
                for threads in [1, 3] {
                    let got = run(shape, &input, grid_shape, &grid, s, threads).unwrap();
                    for (k, &v) in got.iter().enumerate() {
                        let ch = k % c;
                        let point = k / c;
                        let b = point / (out.0 * out.1);
                        let image = &input[b * h * w * c..(b + 1) * h * w * c];
                        let g = (grid[2 * point], grid[2 * point + 1]);
                        let want = reference(image, [h, w, c], ch, g, s);
                        assert!(
                            (f64::from(v) - want).abs() <= 1e-5,
                            "{:?}/{:?}/align {} shape {shape:?} value {k} at {g:?}: {v} vs {want}",
                            s.mode,
                            s.padding,
                            s.align_corners,
                        );
                    }
                }
            }
        }
    }

    /// Nearest rounds halfway cases to the even index (rint), as ONNX's reference and
    /// PyTorch's 2-D kernel do: x = 0.5, 1.5, 2.5 read pixels 0, 2, 2.
    #[test]
    fn nearest_rounds_half_to_even() {
        let input = [10.0, 20.0, 30.0, 40.0];
        let grid = [-0.5, 0.0, 0.0, 0.0, 0.5, 0.0];
        let s = Sampler {
            mode: GridSampleMode::Nearest,
            padding: GridSamplePadding::Zeros,
            align_corners: false,
        };
        let got = run([1, 1, 4, 1], &input, [1, 1, 3, 2], &grid, s, 1).unwrap();
        assert_eq!(got, [10.0, 30.0, 30.0]);
    }

    /// Bicubic with border and reflection padding pads each tap: ONNX Runtime 1.32 and
    /// PyTorch 1.13 give these values for a 4x4 ramp (align_corners 0), which moving the
    /// point inside first would not (-0.54 is below every input value).
    #[test]
    fn bicubic_pads_each_tap_as_onnx_runtime_does() {
        let input: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let grid = [-0.95, -0.95, 0.95, -0.95, -1.3, 0.2, 1.6, -1.2];
        for (padding, want) in [
            (GridSamplePadding::Border, [-0.54, 2.676, 7.456, 2.973]),
            (
                GridSamplePadding::Reflection,
                [-0.9, 2.46, 7.53125, 2.11925],
            ),
        ] {
            let s = Sampler {
                mode: GridSampleMode::Bicubic,
                padding,
                align_corners: false,
            };
            let got = run([1, 4, 4, 1], &input, [1, 1, 4, 2], &grid, s, 1).unwrap();
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 1e-4, "{padding:?}: {got:?} vs {want:?}");
            }
        }
    }

    /// A grid that does not fit the input fails the execution instead of reading
    /// elsewhere; NaN coordinates give NaN (or a zero pad) rather than a panic.
    #[test]
    fn mismatched_grid_is_an_error_and_nan_does_not_panic() {
        let s = Sampler {
            mode: GridSampleMode::Bicubic,
            padding: GridSamplePadding::Reflection,
            align_corners: true,
        };
        let e = run([1, 2, 2, 1], &[0.0; 4], [1, 1, 1, 3], &[0.0; 3], s, 1);
        assert!(e.is_err());
        for &v in &[f32::NAN, f32::INFINITY, -1e30] {
            let got = run([1, 2, 2, 1], &[1.0; 4], [1, 1, 1, 2], &[v, 0.0], s, 1).unwrap();
            assert_eq!(got.len(), 1);
        }
    }
}
