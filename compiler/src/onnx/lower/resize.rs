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
use super::{Lowerer, NResult, Node, unsupported};

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
/// transformation nnc does not support.
fn onnx_coordinate(mode: &str, o: u32, input: u32, output: u32, scale: f64) -> Option<f64> {
    let (o, input, output) = (f64::from(o), f64::from(input), f64::from(output));
    Some(match mode {
        "half_pixel" => (o + 0.5) / scale - 0.5,
        "pytorch_half_pixel" => {
            if output > 1.0 {
                (o + 0.5) / scale - 0.5
            } else {
                0.0
            }
        }
        "align_corners" => {
            if output == 1.0 {
                0.0
            } else {
                o * (input - 1.0) / (output - 1.0)
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

impl Lowerer<'_> {
    pub(super) fn resize(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let dims = self.known_dims(x)?;
        if dims.len() != 4 {
            return unsupported("only 4-D (NCHW) resizing is supported");
        }
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
        // roi matters only to tf_crop_and_resize; scales and sizes fix the output shape.
        let params: &[(usize, &str)] = if legacy {
            &[(1, "scales")]
        } else if transform == "tf_crop_and_resize" {
            &[(2, "scales"), (3, "sizes"), (1, "roi")]
        } else {
            &[(2, "scales"), (3, "sizes")]
        };
        for &(i, what) in params {
            if let Some(super::Value::Tensor(_)) = self.input(n, i)? {
                return unsupported(format!(
                    "{} with run-time {what}: RESIZE_BILINEAR / RESIZE_NEAREST_NEIGHBOR take \
                     the output size as scalars fixed at compile time",
                    n.op()
                ));
            }
        }
        if n.attrs.int_or("antialias", 0)? != 0 {
            return unsupported("antialiased resizing is not supported");
        }
        if n.attrs.has("axes") {
            return unsupported("Resize with 'axes' is not supported");
        }
        if n.attrs.string_or("keep_aspect_ratio_policy", "stretch")? != "stretch" {
            return unsupported("keep_aspect_ratio_policy other than 'stretch' is not supported");
        }
        // Scales or sizes, per the opset's input layout.
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
        let (out_h, out_w, sh, sw) = match (scales, sizes) {
            (_, Some(s)) if s.len() == 4 => {
                if s[0] != i64::from(dims[0]) || s[1] != i64::from(dims[1]) {
                    return unsupported("resizing the batch or channel dimension is not supported");
                }
                if s[2] < 1 || s[3] < 1 || s[2] > i64::from(i32::MAX) || s[3] > i64::from(i32::MAX)
                {
                    return Err(super::NodeError::Invalid(format!(
                        "sizes {s:?} out of range"
                    )));
                }
                let (h, w) = (s[2] as u32, s[3] as u32);
                (
                    h,
                    w,
                    f64::from(h) / f64::from(dims[2]),
                    f64::from(w) / f64::from(dims[3]),
                )
            }
            (Some(s), _) if s.len() == 4 => {
                if s[0] != 1.0 || s[1] != 1.0 {
                    return unsupported("resizing the batch or channel dimension is not supported");
                }
                if !(s[2] > 0.0 && s[3] > 0.0) {
                    return Err(super::NodeError::Invalid(format!(
                        "scales {s:?} must be positive"
                    )));
                }
                let h = (f64::from(dims[2]) * s[2]).floor();
                let w = (f64::from(dims[3]) * s[3]).floor();
                if !(1.0..=f64::from(i32::MAX)).contains(&h)
                    || !(1.0..=f64::from(i32::MAX)).contains(&w)
                {
                    return unsupported("resizing to an empty or huge output is not supported");
                }
                (h as u32, w as u32, s[2], s[3])
            }
            _ => {
                return Err(super::NodeError::Invalid(
                    "Resize needs 4 scales or 4 sizes".into(),
                ));
            }
        };
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
