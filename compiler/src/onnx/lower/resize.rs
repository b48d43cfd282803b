//! Resize and Upsample.
//!
//! ONNX describes resizing by a coordinate transformation and a rounding rule; the NN
//! set has two operations with two flags (align_corners, half_pixel_centers). Rather
//! than trust a table of equivalences, the lowering computes, for every output row and
//! column, the source coordinate ONNX would read and the one each NN flag setting reads,
//! and picks a setting that agrees everywhere. When none does, the node is unsupported:
//! nnc never emits an approximation silently.

use nnc_formats::nn::OperationType;

use super::super::constant;
use super::{Lowerer, NResult, Node, invalid, unsupported};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Nearest,
    Linear,
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
fn static_unsupported(transform: &str, antialias: bool, mode: Mode) -> Option<String> {
    if transform == "tf_crop_and_resize" {
        return Some(
            "coordinate_transformation_mode 'tf_crop_and_resize' is not supported (the NN \
             set resizes whole images)"
                .into(),
        );
    }
    if onnx_coordinate(transform, 0, 1, 1, 1.0).is_none() {
        return Some(format!(
            "coordinate_transformation_mode '{transform}' is not supported"
        ));
    }
    // Antialiasing widens the filter when downsampling; upsampling is unaffected, but
    // whether a node downsamples may depend on run-time values, so it is refused.
    if antialias && mode == Mode::Linear {
        return Some("antialiased resizing is not supported".into());
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
            other => {
                return unsupported(format!(
                    "resize mode '{other}' is not supported (the NN set resizes nearest and \
                     bilinear only)"
                ));
            }
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
        if let Some(reason) = static_unsupported(&transform, antialias, mode) {
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
        if dims.len() != 4 {
            return unsupported("only 4-D (NCHW) resizing is supported");
        }
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
        if out[0] != dims[0] || out[1] != dims[1] || scale[0] != 1.0 || scale[1] != 1.0 {
            return unsupported("resizing the batch or channel dimension is not supported");
        }
        let (out_h, out_w, sh, sw) = (out[2], out[3], scale[2], scale[3]);
        // The output must fit the tensor limit before anything loops over its extent.
        self.limits.check_tensor(
            || "the resized output".to_string(),
            nnc_formats::limits::element_count(&out),
            x.dtype.size() as u64,
        )?;
        let (align, half) = choose_flags(
            mode,
            &transform,
            &rounding,
            [dims[2], dims[3]],
            [out_h, out_w],
            [sh, sw],
        )
        .map_err(super::NodeError::Unsupported)?;
        let xh = self.to_nhwc(n, x.operand)?;
        let inputs = vec![
            xh,
            self.i32_const(out_w as i32),
            self.i32_const(out_h as i32),
            self.bool_const(false),
            self.bool_const(align),
            self.bool_const(half),
        ];
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
