//! Resize and Upsample; GridSample.
//!
//! ONNX describes resizing by a coordinate transformation and a rounding rule; the NN
//! set has two operations with two flags (align_corners, half_pixel_centers). Rather
//! than trust a table of equivalences, the lowering computes, for every output row and
//! column, the source coordinate ONNX would read and the one each NN flag setting reads,
//! and picks a setting that agrees everywhere. When none does (and for cubic mode,
//! tf_crop_and_resize, other ranks, or resized batch and channel axes) the node becomes
//! nnc's RESAMPLE with tap tables computed here exactly as ONNX's reference samples;
//! nnc never emits an approximation silently.

use nnc_formats::nn::ops::{GridSample, Resize2d, ResizeSize};
use nnc_formats::nn::types::{GridSampleMode, GridSamplePadding};
use nnc_formats::nn::{Operand, OperandType, OperationType};

use super::super::constant;
use super::{Lowerer, NResult, Node, invalid, unsupported};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// The source index the NN set's RESIZE_NEAREST_NEIGHBOR reads for output index `o`
/// (TensorFlow Lite's reference rule, in f32 as the kernel computes it).
pub fn nn_nearest_index(
    o: u32,
    input: u32,
    output: u32,
    align_corners: bool,
    half_pixel: bool,
) -> i64 {
    let scale = if align_corners && output > 1 {
        (input - 1) as f32 / (output - 1) as f32
    } else {
        input as f32 / output as f32
    };
    let offset = if half_pixel { 0.5f32 } else { 0.0 };
    let v = (o as f32 + offset) * scale;
    let mut idx = if align_corners {
        v.round() as i64
    } else {
        v.floor() as i64
    };
    idx = idx.min(i64::from(input) - 1);
    if half_pixel {
        idx = idx.max(0);
    }
    idx
}

/// The real source coordinate the NN set's RESIZE_BILINEAR reads for output index `o`.
pub fn nn_bilinear_coordinate(
    o: u32,
    input: u32,
    output: u32,
    align_corners: bool,
    half_pixel: bool,
) -> f64 {
    let scale = if align_corners && output > 1 {
        (input - 1) as f32 / (output - 1) as f32
    } else {
        input as f32 / output as f32
    };
    let v = if half_pixel {
        (o as f32 + 0.5) * scale - 0.5
    } else {
        o as f32 * scale
    };
    f64::from(v)
}

/// ONNX's source coordinate for output index `o` (before rounding), or `None` for a
/// transformation nnc does not support. `length` is the resized length as ONNX's
/// reference defines it, `scale * input` (not rounded), which `align_corners` and
/// `half_pixel_symmetric` divide by.
fn onnx_coordinate(mode: &str, o: u32, input: u32, output: u32, scale: f64) -> Option<f64> {
    let (o, input, output) = (f64::from(o), f64::from(input), f64::from(output));
    let length = scale * input;
    Some(match mode {
        "half_pixel" => (o + 0.5) / scale - 0.5,
        "half_pixel_symmetric" => {
            let offset = input / 2.0 * (1.0 - output / length);
            offset + (o + 0.5) / scale - 0.5
        }
        "pytorch_half_pixel" => {
            if length > 1.0 {
                (o + 0.5) / scale - 0.5
            } else {
                -0.5
            }
        }
        "align_corners" => {
            if length == 1.0 {
                0.0
            } else {
                o * (input - 1.0) / (length - 1.0)
            }
        }
        "asymmetric" => o / scale,
        "tf_half_pixel_for_nn" => (o + 0.5) / scale,
        _ => return None,
    })
}

fn onnx_round(x: f64, rule: &str) -> Option<f64> {
    let frac = x - x.floor();
    Some(match rule {
        "round_prefer_floor" => {
            if frac == 0.5 {
                x.floor()
            } else {
                x.round()
            }
        }
        "round_prefer_ceil" => {
            if frac == 0.5 {
                x.ceil()
            } else {
                x.round()
            }
        }
        "floor" => x.floor(),
        "ceil" => x.ceil(),
        _ => return None,
    })
}

/// Finds `(align_corners, half_pixel_centers)` that reproduce ONNX's sampling along both
/// axes, or explains why there is none.
#[allow(clippy::too_many_arguments)]
fn choose_flags(
    mode: Mode,
    transform: &str,
    rounding: &str,
    inputs: [u32; 2],
    outputs: [u32; 2],
    scales: [f64; 2],
) -> Result<(bool, bool), String> {
    let candidates = [(false, false), (true, false), (false, true)];
    'candidate: for (align, half) in candidates {
        for axis in 0..2 {
            let (i, out, s) = (inputs[axis], outputs[axis], scales[axis]);
            for o in 0..out {
                let x = onnx_coordinate(transform, o, i, out, s).ok_or_else(|| {
                    format!("coordinate_transformation_mode '{transform}' is not supported")
                })?;
                match mode {
                    Mode::Nearest => {
                        let r = onnx_round(x, rounding)
                            .ok_or_else(|| format!("nearest_mode '{rounding}' is not supported"))?;
                        let onnx_idx = (r as i64).clamp(0, i64::from(i) - 1);
                        if nn_nearest_index(o, i, out, align, half) != onnx_idx {
                            continue 'candidate;
                        }
                    }
                    Mode::Linear => {
                        // Both clamp neighbours to the edge, so coordinates below 0 (or
                        // past the end) read the same pixels: compare clamped coordinates.
                        let max = f64::from(i - 1);
                        let nn = nn_bilinear_coordinate(o, i, out, align, half).clamp(0.0, max);
                        if (nn - x.clamp(0.0, max)).abs() > 1e-5 * max.max(1.0) {
                            continue 'candidate;
                        }
                    }
                    // No NN operation interpolates cubically.
                    Mode::Cubic => continue 'candidate,
                }
            }
        }
        return Ok((align, half));
    }
    Err(format!(
        "{} resize with '{transform}'{} samples differently from every NN resize setting for {:?} -> {:?}",
        if mode == Mode::Nearest {
            "nearest"
        } else {
            "linear"
        },
        if mode == Mode::Nearest {
            format!(" / '{rounding}'")
        } else {
            String::new()
        },
        inputs,
        outputs
    ))
}

/// The run-time-independent attributes of a Resize node that no NN setting can serve.
fn static_unsupported(transform: &str) -> Option<String> {
    if onnx_coordinate(transform, 0, 1, 1, 1.0).is_none() && transform != "tf_crop_and_resize" {
        return Some(format!(
            "coordinate_transformation_mode '{transform}' is not supported"
        ));
    }
    None
}

impl Lowerer<'_> {
    pub(super) fn resize(&mut self, n: &Node) -> NResult<()> {
        let upsample = n.op() == "Upsample";
        let mode_name = n.attrs.string_or("mode", "nearest")?;
        let mode = match mode_name.as_str() {
            "nearest" => Mode::Nearest,
            "linear" | "bilinear" => Mode::Linear,
            "cubic" => Mode::Cubic,
            other => return invalid(format!("unknown resize mode '{other}'")),
        };
        let legacy = upsample || self.opset < 11;
        let (transform, rounding) = if legacy {
            ("asymmetric".to_string(), "floor".to_string())
        } else {
            (
                n.attrs
                    .string_or("coordinate_transformation_mode", "half_pixel")?,
                n.attrs.string_or("nearest_mode", "round_prefer_floor")?,
            )
        };
        let antialias = n.attrs.int_or("antialias", 0)? != 0;
        if let Some(reason) = static_unsupported(&transform) {
            return unsupported(reason);
        }
        if mode == Mode::Nearest && onnx_round(0.5, &rounding).is_none() {
            return unsupported(format!("nearest_mode '{rounding}' is not supported"));
        }
        let policy = n.attrs.string_or("keep_aspect_ratio_policy", "stretch")?;
        if !matches!(policy.as_str(), "stretch" | "not_larger" | "not_smaller") {
            return invalid(format!("unknown keep_aspect_ratio_policy '{policy}'"));
        }
        // Scales and sizes fix the output shape; the NN operations take it as scalars.
        let params: &[(usize, &str)] = if legacy {
            &[(1, "scales")]
        } else {
            &[(2, "scales"), (3, "sizes")]
        };
        for &(i, what) in params {
            if let Some(super::Value::Tensor(_)) = self.input(n, i)? {
                return Err(self.needs_constant(
                    n,
                    &[i],
                    format!(
                        "{} with run-time {what}: RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR \
                         take the output size as scalars fixed at compile time",
                        n.op()
                    ),
                ));
            }
        }
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let dims = self.known_dims(x)?;
        let rank = dims.len();
        let axes: Vec<usize> = match n.attrs.ints("axes")? {
            Some(a) if !legacy => {
                let axes: Vec<usize> = a
                    .iter()
                    .map(|&v| super::axis(v, rank))
                    .collect::<NResult<_>>()?;
                let mut sorted = axes.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if sorted.len() != axes.len() {
                    return invalid(format!("axes {a:?} repeat an axis"));
                }
                axes
            }
            _ => (0..rank).collect(),
        };
        // Scales or sizes, per the opset's input layout, for the listed axes.
        let (scales, sizes): (Option<Vec<f64>>, Option<Vec<i64>>) = if upsample && self.opset < 9 {
            (
                n.attrs
                    .floats("scales")?
                    .map(|v| v.into_iter().map(f64::from).collect()),
                None,
            )
        } else if legacy {
            (Some(constant::to_f64s(&*self.required_const(n, 1)?)), None)
        } else {
            let scales = self
                .const_input(n, 2)?
                .map(|c| constant::to_f64s(&c))
                .filter(|v| !v.is_empty());
            let sizes = self
                .const_input(n, 3)?
                .map(|c| constant::to_i64s(&c))
                .filter(|v| !v.is_empty());
            (scales, sizes)
        };
        let (out, scale) = output_geometry(&dims, &axes, scales, sizes, &policy)?;
        // The output must fit the tensor limit before anything loops over its extent.
        self.limits.check_tensor(
            || "the resized output".to_string(),
            nnc_formats::limits::element_count(&out),
            x.dtype.size() as u64,
        )?;
        // The NN set's RESIZE_* when one of its settings samples exactly as ONNX does;
        // otherwise nnc's RESAMPLE with tap tables computed here.
        let nn_flags = if rank == 4
            && !(antialias && mode != Mode::Nearest)
            && out[0] == dims[0]
            && out[1] == dims[1]
            && scale[0] == 1.0
            && scale[1] == 1.0
            && mode != Mode::Cubic
            && transform != "tf_crop_and_resize"
        {
            choose_flags(
                mode,
                &transform,
                &rounding,
                [dims[2], dims[3]],
                [out[2], out[3]],
                [scale[2], scale[3]],
            )
            .ok()
        } else {
            None
        };
        let Some((align, half)) = nn_flags else {
            let roi = if transform == "tf_crop_and_resize" {
                let roi = match self.const_input(n, 1)? {
                    Some(c) => constant::to_f64s(&c),
                    None => return invalid("tf_crop_and_resize needs roi"),
                };
                // [starts..., ends...] over the listed axes; the others keep [0, 1].
                if roi.len() != 2 * axes.len() {
                    return invalid(format!(
                        "roi holds {} values for {} axes",
                        roi.len(),
                        axes.len()
                    ));
                }
                let mut full = vec![(0.0, 1.0); rank];
                for (k, &a) in axes.iter().enumerate() {
                    full[a] = (roi[k], roi[axes.len() + k]);
                }
                full
            } else {
                vec![(0.0, 1.0); rank]
            };
            let params = Sampling {
                mode,
                transform: &transform,
                rounding: &rounding,
                cubic_a: f64::from(n.attrs.float_or("cubic_coeff_a", -0.75)?),
                exclude_outside: n.attrs.int_or("exclude_outside", 0)? != 0,
                antialias,
            };
            let extrapolation = n.attrs.float_or("extrapolation_value", 0.0)?;
            return self.resample(n, x, &dims, &out, &scale, &roi, &params, extrapolation);
        };
        let (out_h, out_w) = (out[2], out[3]);
        let xh = self.to_nhwc(n, x.operand)?;
        let params = Resize2d {
            size: ResizeSize::Output {
                width: out_w,
                height: out_h,
            },
            nchw: false,
            align_corners: align,
            half_pixel_centers: half,
        };
        let mut inputs = vec![xh];
        inputs.extend(params.encode(&mut self.model));
        let op = if mode == Mode::Nearest {
            OperationType::ResizeNearestNeighbor
        } else {
            OperationType::ResizeBilinear
        };
        let yh = self.emit(n, op, inputs)?;
        let y = self.to_nchw(n, yh)?;
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }
}

impl Lowerer<'_> {
    /// GridSample over two spatial dimensions (4-D input) as nnc's GRID_SAMPLE, which
    /// samples NHWC: the input is transposed to it and the output back. The grid is
    /// `[N, H_out, W_out, 2]` in both layouts.
    pub(super) fn grid_sample(&mut self, n: &Node) -> NResult<()> {
        // Opset 20 renamed bilinear and bicubic to linear and cubic; either spelling is
        // taken at every version, since the meaning is the same.
        let default_mode = if n.version >= 20 {
            "linear"
        } else {
            "bilinear"
        };
        let mode = match n.attrs.string_or("mode", default_mode)?.as_str() {
            "bilinear" | "linear" => GridSampleMode::Bilinear,
            "nearest" => GridSampleMode::Nearest,
            "bicubic" | "cubic" => GridSampleMode::Bicubic,
            other => return invalid(format!("unknown GridSample mode '{other}'")),
        };
        let padding = match n.attrs.string_or("padding_mode", "zeros")?.as_str() {
            "zeros" => GridSamplePadding::Zeros,
            "border" => GridSamplePadding::Border,
            "reflection" => GridSamplePadding::Reflection,
            other => return invalid(format!("unknown GridSample padding_mode '{other}'")),
        };
        let align_corners = n.attrs.int_or("align_corners", 0)? != 0;
        let x = self.tensor(n, 0)?;
        let grid = self.tensor(n, 1)?;
        self.require_float(n, x)?;
        self.require_float(n, grid)?;
        let (rank, grid_rank) = (self.rank(x), self.rank(grid));
        if rank != 4 {
            return unsupported(if rank > 4 {
                format!(
                    "GridSample over {} spatial dimensions is not supported (only 2: a 4-D input)",
                    rank - 2
                )
            } else {
                format!("GridSample needs a 4-D input of known rank, got rank {rank}")
            });
        }
        if grid_rank != 4 {
            return invalid(format!(
                "GridSample's grid must be 4-D, got rank {grid_rank}"
            ));
        }
        let xh = self.to_nhwc(n, x.operand)?;
        let params = GridSample {
            mode,
            padding,
            align_corners,
        };
        let mut inputs = vec![xh, grid.operand];
        inputs.extend(params.encode(&mut self.model));
        let yh = self.emit(n, OperationType::GridSample, inputs)?;
        let y = self.to_nchw(n, yh)?;
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }
}

/// How ONNX's Resize samples one axis.
struct Sampling<'a> {
    mode: Mode,
    transform: &'a str,
    rounding: &'a str,
    cubic_a: f64,
    exclude_outside: bool,
    /// Linear and cubic filters widen by 1/scale when downsampling.
    antialias: bool,
}

/// The tap table of one axis as ONNX's reference computes it: for each output index,
/// `k` (input index, weight) pairs, or index -1 in the first tap when the coordinate
/// falls outside the input (tf_crop_and_resize extrapolates there). Neighbours beyond
/// the input repeat its edge (the reference pads by edge values) unless
/// `exclude_outside` drops them and renormalizes.
fn axis_taps(
    p: &Sampling,
    input: u32,
    output: u32,
    scale: f64,
    roi: (f64, f64),
    budget: &constant::FoldBudget,
) -> NResult<(usize, Vec<i32>, Vec<f32>)> {
    // The filter's footprint, as the reference sizes it (a 1/scale-wide filter when an
    // antialiased resize downsamples).
    let shrink = scale.min(1.0);
    let antialias = p.antialias && p.mode != Mode::Nearest;
    // Counted in f64: a tiny scale must be refused, not overflow an integer.
    let footprint = |support: f64| 2.0 - 2.0 * ((-support / shrink).floor() + 1.0);
    let k = match p.mode {
        Mode::Nearest => 2.0,
        Mode::Linear if antialias => footprint(1.0),
        Mode::Linear => 2.0,
        Mode::Cubic if antialias => footprint(2.0),
        Mode::Cubic => 4.0,
    };
    if k.is_nan() || k > 256.0 {
        return unsupported(format!(
            "an antialiased filter of {k} taps is not supported"
        ));
    }
    let k = k as usize;
    // An index and a weight per tap.
    budget.generate(output as usize * k, nnc_formats::tensor::DataType::I64)?;
    let last = f64::from(input) - 1.0;
    let mut indices = Vec::with_capacity(output as usize * k);
    let mut weights = Vec::with_capacity(output as usize * k);
    for o in 0..output {
        let x = if p.transform == "tf_crop_and_resize" {
            let x = if output > 1 {
                roi.0 * last + f64::from(o) * (roi.1 - roi.0) * last / (f64::from(output) - 1.0)
            } else {
                0.5 * (roi.0 + roi.1) * last
            };
            if x < 0.0 || x > last {
                indices.extend(std::iter::repeat_n(-1, k));
                weights.extend(std::iter::repeat_n(0.0, k));
                continue;
            }
            x
        } else {
            onnx_coordinate(p.transform, o, input, output, scale).ok_or_else(|| {
                super::NodeError::Unsupported(format!(
                    "coordinate_transformation_mode '{}' is not supported",
                    p.transform
                ))
            })?
        };
        // The reference prefers the pixel left of x: an integral x has ratio 1 over the
        // neighbours (x - 1, x).
        let integral = x == x.floor();
        let t = if integral { 1.0 } else { x - x.floor() };
        let mut coeffs: Vec<f64> = match p.mode {
            Mode::Nearest => {
                if integral {
                    vec![0.0, 1.0]
                } else {
                    let right = match p.rounding {
                        "round_prefer_floor" => t > 0.5,
                        "round_prefer_ceil" => t >= 0.5,
                        "floor" => false,
                        "ceil" => true,
                        other => {
                            return unsupported(format!("nearest_mode '{other}' is not supported"));
                        }
                    };
                    if right {
                        vec![0.0, 1.0]
                    } else {
                        vec![1.0, 0.0]
                    }
                }
            }
            Mode::Linear if antialias => {
                let start = (-1.0 / shrink).floor() + 1.0;
                let c: Vec<f64> = (0..k)
                    .map(|j| (1.0 - ((start + j as f64 - t) * shrink).abs()).clamp(0.0, 1.0))
                    .collect();
                let sum: f64 = c.iter().sum();
                c.into_iter().map(|v| v / sum).collect()
            }
            Mode::Cubic if antialias => {
                let a = p.cubic_a;
                let kernel = |x: f64| {
                    let x = x.abs();
                    if x <= 1.0 {
                        (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0
                    } else if x < 2.0 {
                        a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a
                    } else {
                        0.0
                    }
                };
                let start = (-2.0 / shrink).floor() + 1.0;
                let c: Vec<f64> = (0..k)
                    .map(|j| kernel(shrink * (start + j as f64 - t)))
                    .collect();
                let sum: f64 = c.iter().sum();
                c.into_iter().map(|v| v / sum).collect()
            }
            Mode::Linear => vec![1.0 - t, t],
            Mode::Cubic => {
                let a = p.cubic_a;
                let far = |d: f64| ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a;
                let near = |d: f64| ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0;
                vec![far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
            }
        };
        // The k nearest indices of the edge-padded input, ties to the smaller one.
        let first = if integral {
            x as i64 - (k as i64) / 2
        } else {
            x.floor() as i64 - (k as i64) / 2 + 1
        };
        let neighbours: Vec<i64> = (first..first + k as i64).collect();
        if p.exclude_outside {
            for (c, &i) in coeffs.iter_mut().zip(&neighbours) {
                if i < 0 || i > last as i64 {
                    *c = 0.0;
                }
            }
            let sum: f64 = coeffs.iter().sum();
            if sum != 0.0 {
                coeffs.iter_mut().for_each(|c| *c /= sum);
            }
        }
        for (c, i) in coeffs.into_iter().zip(neighbours) {
            indices.push(i.clamp(0, last as i64) as i32);
            weights.push(c as f32);
        }
    }
    Ok((k, indices, weights))
}

impl Lowerer<'_> {
    /// Resize as nnc's RESAMPLE: one tap table per resampled axis, computed here.
    #[allow(clippy::too_many_arguments)]
    fn resample(
        &mut self,
        n: &Node,
        x: super::TensorValue,
        dims: &[u32],
        out: &[u32],
        scale: &[f64],
        roi: &[(f64, f64)],
        p: &Sampling,
        extrapolation: f32,
    ) -> NResult<()> {
        let mut taps = Vec::with_capacity(dims.len());
        let mut indices = Vec::new();
        let mut weights = Vec::new();
        for d in 0..dims.len() {
            let identity = out[d] == dims[d] && scale[d] == 1.0 && roi[d] == (0.0, 1.0);
            if identity && p.transform != "tf_crop_and_resize" {
                taps.push(0);
                continue;
            }
            let entries = out[d] as usize * 4;
            self.budget
                .generate(entries, nnc_formats::tensor::DataType::I64)?;
            let (k, i, w) = axis_taps(p, dims[d], out[d], scale[d], roi[d], &self.budget)?;
            taps.push(k as i32);
            indices.extend(i);
            weights.extend(w);
        }
        if indices.is_empty() {
            // Nothing resamples: the output is the input.
            self.set_output(n, 0, super::Value::Tensor(x));
            return Ok(());
        }
        let len = indices.len() as u32;
        let taps = self.i32_vector(&taps);
        let indices_operand = self.model.add_constant(
            Operand::new(OperandType::TensorInt32, vec![len]),
            bytemuck::cast_slice(&indices),
        );
        let weights_operand = self.model.add_f32_tensor(vec![len], &weights);
        let extrapolation = self.f32_const(extrapolation);
        let shape: Vec<i32> = out.iter().map(|&d| d as i32).collect();
        let shape = self.i32_vector(&shape);
        let y = self.emit(
            n,
            OperationType::Resample,
            vec![
                x.operand,
                taps,
                indices_operand,
                weights_operand,
                extrapolation,
                shape,
            ],
        )?;
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }
}

/// The output dimensions and the per-dimension scales ONNX's coordinate transformations
/// use, as ONNX's reference computes them: from scales, `floor(input * scale)`; from
/// sizes, the sizes with scale `size / input`, or under keep_aspect_ratio_policy one
/// scale for all listed axes (the smallest or largest ratio) and sizes
/// `floor(input * scale + 0.5)`.
fn output_geometry(
    dims: &[u32],
    axes: &[usize],
    scales: Option<Vec<f64>>,
    sizes: Option<Vec<i64>>,
    policy: &str,
) -> NResult<(Vec<u32>, Vec<f64>)> {
    let rank = dims.len();
    let to_dim = |v: f64| -> NResult<u32> {
        if (1.0..=f64::from(i32::MAX)).contains(&v) {
            Ok(v as u32)
        } else {
            unsupported("resizing to an empty or huge output is not supported")
        }
    };
    if let Some(s) = sizes {
        if s.len() != axes.len() {
            return invalid(format!("{} sizes for {} axes", s.len(), axes.len()));
        }
        if s.iter().any(|&v| v < 1 || v > i64::from(i32::MAX)) {
            return invalid(format!("sizes {s:?} out of range"));
        }
        let mut out: Vec<u32> = dims.to_vec();
        let mut scale = vec![1.0; rank];
        for (k, &a) in axes.iter().enumerate() {
            scale[a] = s[k] as f64 / f64::from(dims[a]);
            out[a] = s[k] as u32;
        }
        if policy != "stretch" {
            let listed = axes.iter().map(|&a| scale[a]);
            let one = if policy == "not_larger" {
                listed.fold(f64::INFINITY, f64::min)
            } else {
                listed.fold(f64::NEG_INFINITY, f64::max)
            };
            for &a in axes {
                scale[a] = one;
                out[a] = to_dim((one * f64::from(dims[a]) + 0.5).floor())?;
            }
        }
        return Ok((out, scale));
    }
    if let Some(s) = scales {
        if s.len() != axes.len() {
            return invalid(format!("{} scales for {} axes", s.len(), axes.len()));
        }
        if s.iter().any(|&v| v.is_nan() || v <= 0.0) {
            return invalid(format!("scales {s:?} must be positive"));
        }
        let mut out: Vec<u32> = dims.to_vec();
        let mut scale = vec![1.0; rank];
        for (k, &a) in axes.iter().enumerate() {
            scale[a] = s[k];
            out[a] = to_dim((f64::from(dims[a]) * s[k]).floor())?;
        }
        return Ok((out, scale));
    }
    invalid("Resize needs scales or sizes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_upsampling_matches_the_default_nn_setting() {
        assert_eq!(
            choose_flags(
                Mode::Nearest,
                "asymmetric",
                "floor",
                [4, 4],
                [8, 8],
                [2.0, 2.0]
            ),
            Ok((false, false))
        );
    }

    #[test]
    fn half_pixel_linear_maps_to_half_pixel_centers() {
        assert_eq!(
            choose_flags(Mode::Linear, "half_pixel", "", [4, 4], [8, 8], [2.0, 2.0]),
            Ok((false, true))
        );
        assert_eq!(
            choose_flags(
                Mode::Linear,
                "align_corners",
                "",
                [4, 4],
                [8, 8],
                [2.0, 2.0]
            ),
            Ok((true, false))
        );
    }

    #[test]
    fn downsampling_ties_resolve_to_an_exact_setting() {
        // half_pixel + round_prefer_floor puts every source coordinate of a 2x
        // downsample on a .5 tie; rounding it down is exactly the NN default rule.
        assert_eq!(
            choose_flags(
                Mode::Nearest,
                "half_pixel",
                "round_prefer_floor",
                [8, 8],
                [4, 4],
                [0.5, 0.5]
            ),
            Ok((false, false))
        );
    }

    #[test]
    fn sampling_no_nn_setting_reproduces_is_refused() {
        // A scale of 0.7 on 5 pixels (output 3) samples at (o + 0.5) / 0.7 - 0.5, which no
        // NN setting (all derived from the 5 -> 3 size ratio) reproduces.
        assert!(choose_flags(Mode::Linear, "half_pixel", "", [5, 5], [3, 3], [0.7, 0.7]).is_err());
        assert!(
            choose_flags(
                Mode::Linear,
                "tf_crop_and_resize",
                "",
                [4, 4],
                [8, 8],
                [2.0, 2.0]
            )
            .is_err()
        );
    }
}
