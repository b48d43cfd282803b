//! Conv and ConvTranspose.
//!
//! 1-D convolutions run as 2-D ones of height 1. Weights are re-laid-out at compile time
//! (OIHW -> OHWI for CONV_2D, -> 1HWO for DEPTHWISE_CONV_2D, IOHW -> OHWI for
//! TRANSPOSE_CONV_2D). The operation itself runs in NHWC between two transposes.

use nnc_formats::nn::OperationType;
use nnc_formats::tensor::DataType;

use super::super::constant::{self, ConstTensor};
use super::{Lowerer, NResult, Node, unsupported};

/// Spatial parameters shared by convolutions and pools, for two spatial axes (H, W).
pub(super) struct Spatial {
    pub kernel: [u32; 2],
    pub strides: [u32; 2],
    pub dilations: [u32; 2],
    /// `[top, left, bottom, right]`.
    pub pads: [u32; 4],
}

/// Reads `strides`, `dilations`, `pads` and `auto_pad` for a 1-D or 2-D window
/// operation. `spatial_in` are the input's spatial extents (0 when unknown).
pub(super) fn read_spatial(
    n: &Node,
    kernel: &[i64],
    spatial_in: &[u32],
    allow_dilation: bool,
) -> NResult<Spatial> {
    let rank = kernel.len();
    if !(1..=2).contains(&rank) {
        return unsupported(format!(
            "{}-D windows are not supported (only 1-D and 2-D)",
            rank
        ));
    }
    let ints = |name: &str, default: i64, len: usize| -> NResult<Vec<i64>> {
        match n.attrs.ints(name)? {
            Some(v) if v.len() == len => Ok(v),
            Some(v) => Err(super::NodeError::Invalid(format!(
                "attribute '{name}' has {} values, expected {len}",
                v.len()
            ))),
            None => Ok(vec![default; len]),
        }
    };
    let strides = ints("strides", 1, rank)?;
    let dilations = ints("dilations", 1, rank)?;
    let mut pads = ints("pads", 0, 2 * rank)?;
    for (name, v, min) in [
        ("kernel_shape", kernel, 1),
        ("strides", &strides[..], 1),
        ("dilations", &dilations[..], 1),
    ] {
        if let Some(bad) = v.iter().find(|&&x| x < min || x > i64::from(i32::MAX)) {
            return Err(super::NodeError::Invalid(format!(
                "attribute '{name}' value {bad} is out of range"
            )));
        }
    }
    if pads.iter().any(|&p| p < 0) {
        return unsupported("negative pads are not supported");
    }
    if pads.iter().any(|&p| p > i64::from(i32::MAX)) {
        return Err(super::NodeError::Invalid("pads out of range".into()));
    }
    if !allow_dilation && dilations.iter().any(|&d| d != 1) {
        return unsupported("dilated windows are not supported for this operator");
    }
    let auto_pad = n.attrs.string_or("auto_pad", "NOTSET")?;
    match auto_pad.as_str() {
        "NOTSET" => {}
        "VALID" => pads.iter_mut().for_each(|p| *p = 0),
        "SAME_UPPER" | "SAME_LOWER" => {
            for i in 0..rank {
                let input = i64::from(spatial_in[i]);
                if input == 0 {
                    return unsupported(
                        "auto_pad SAME needs the input's spatial size at compile time; use --input-shape",
                    );
                }
                let effective = (kernel[i] - 1) * dilations[i] + 1;
                let out = (input + strides[i] - 1) / strides[i];
                let total = ((out - 1) * strides[i] + effective - input).max(0);
                let small = total / 2;
                let (begin, end) = if auto_pad == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                pads[i] = begin;
                pads[i + rank] = end;
            }
        }
        other => {
            return Err(super::NodeError::Invalid(format!(
                "unknown auto_pad '{other}'"
            )));
        }
    }
    // Lift 1-D to 2-D with a unit height.
    let (k, s, d, p) = if rank == 1 {
        (
            [1, kernel[0]],
            [1, strides[0]],
            [1, dilations[0]],
            [0, pads[0], 0, pads[1]],
        )
    } else {
        (
            [kernel[0], kernel[1]],
            [strides[0], strides[1]],
            [dilations[0], dilations[1]],
            [pads[0], pads[1], pads[2], pads[3]],
        )
    };
    Ok(Spatial {
        kernel: k.map(|v| v as u32),
        strides: s.map(|v| v as u32),
        dilations: d.map(|v| v as u32),
        pads: p.map(|v| v as u32),
    })
}

impl Lowerer<'_> {
    /// Input as a 4-D NCHW operand (1-D inputs gain a unit height).
    pub(super) fn as_4d(&mut self, n: &Node, x: super::TensorValue) -> NResult<(u32, Vec<u32>)> {
        let dims = self.dims(x);
        match dims.len() {
            4 => Ok((x.operand, dims)),
            3 => {
                let d4 = vec![dims[0], dims[1], 1, dims[2]];
                Ok((self.reshape_to(n, x.operand, &d4)?, d4))
            }
            r => unsupported(format!(
                "{r}-D inputs are not supported (only 1-D and 2-D spatial data)"
            )),
        }
    }

    /// Back from 4-D NCHW to the ONNX rank.
    pub(super) fn back_from_4d(&mut self, n: &Node, y: u32, rank: usize) -> NResult<u32> {
        if rank == 4 {
            return Ok(y);
        }
        let d = self.model.main.operands[y as usize].dimensions.clone();
        self.reshape_to(n, y, &[d[0], d[1], d[3]])
    }

    pub(super) fn conv(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let w = self.required_const(n, 1)?;
        let rank = self.rank(x);
        if w.shape.len() != rank || !(3..=4).contains(&rank) {
            return unsupported(format!(
                "convolution of rank-{rank} input with rank-{} weights is not supported (only 1-D and 2-D)",
                w.shape.len()
            ));
        }
        let group = n.attrs.int_or("group", 1)?;
        let m = w.shape[0];
        let cg = w.shape[1];
        let kernel: Vec<i64> = w.shape[2..].iter().map(|&d| d as i64).collect();
        if let Some(ks) = n.attrs.ints("kernel_shape")?
            && ks != kernel
        {
            return Err(super::NodeError::Invalid(format!(
                "kernel_shape {ks:?} disagrees with the weights' {kernel:?}"
            )));
        }
        if group < 1 || m as i64 % group != 0 {
            return Err(super::NodeError::Invalid(format!(
                "group {group} does not divide the {m} output channels"
            )));
        }
        let group = group as usize;
        let channels = cg * group;
        let in_dims = self.dims(x);
        if in_dims[1] != 0 && in_dims[1] as usize != channels {
            return Err(super::NodeError::Invalid(format!(
                "input has {} channels but the weights expect {channels} ({cg} x group {group})",
                in_dims[1]
            )));
        }
        let spatial_in: Vec<u32> = in_dims[2..].to_vec();
        let sp = read_spatial(n, &kernel, &spatial_in, true)?;
        let bias = match self.const_input(n, 2)? {
            Some(b) if b.shape.iter().product::<usize>() == m => constant::to_f32s(&b),
            Some(_) => {
                return Err(super::NodeError::Invalid(format!(
                    "bias must hold {m} values"
                )));
            }
            None => vec![0.0; m],
        };
        // Weights as [M, C/g, kH, kW] regardless of rank.
        let w4 = ConstTensor {
            shape: vec![m, cg, sp.kernel[0] as usize, sp.kernel[1] as usize],
            ..(*w).clone()
        };
        let w4 = constant::cast(&w4, DataType::F32);
        let (x4, _) = self.as_4d(n, x)?;
        let xh = self.to_nhwc(n, x4)?;
        let depthwise = group == channels && group > 1 && cg == 1;
        let (op, filter) = if group == 1 {
            (
                OperationType::Conv2d,
                constant::transpose(&w4, &[0, 2, 3, 1])?,
            )
        } else if depthwise {
            (
                OperationType::DepthwiseConv2d,
                constant::transpose(&w4, &[1, 2, 3, 0])?,
            )
        } else {
            if sp.dilations != [1, 1] {
                return unsupported(
                    "dilated grouped convolutions are not supported (GROUPED_CONV_2D has no dilation)",
                );
            }
            (
                OperationType::GroupedConv2d,
                constant::transpose(&w4, &[0, 2, 3, 1])?,
            )
        };
        let filter = self.const_operand(&filter)?.operand;
        let bias = self.model.add_f32_tensor(vec![m as u32], &bias);
        let [top, left, bottom, right] = sp.pads;
        let mut inputs = vec![xh, filter, bias];
        for v in [left, right, top, bottom, sp.strides[1], sp.strides[0]] {
            inputs.push(self.i32_const(v as i32));
        }
        match op {
            OperationType::DepthwiseConv2d => inputs.push(self.i32_const((m / channels) as i32)),
            OperationType::GroupedConv2d => inputs.push(self.i32_const(group as i32)),
            _ => {}
        }
        inputs.push(self.i32_const(0)); // fused activation: added by the fusion pass
        let dilated = sp.dilations != [1, 1];
        if op == OperationType::GroupedConv2d || dilated {
            inputs.push(self.bool_const(false)); // NHWC
        }
        if dilated {
            inputs.push(self.i32_const(sp.dilations[1] as i32));
            inputs.push(self.i32_const(sp.dilations[0] as i32));
        }
        let yh = self.emit(n, op, inputs)?;
        let y4 = self.to_nchw(n, yh)?;
        let y = self.back_from_4d(n, y4, rank)?;
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
    }

    pub(super) fn conv_transpose(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let w = self.required_const(n, 1)?;
        let rank = self.rank(x);
        if w.shape.len() != rank || !(3..=4).contains(&rank) {
            return unsupported("only 1-D and 2-D ConvTranspose is supported");
        }
        if n.attrs.int_or("group", 1)? != 1 {
            return unsupported("grouped ConvTranspose is not supported");
        }
        let c = w.shape[0];
        let m = w.shape[1];
        let kernel: Vec<i64> = w.shape[2..].iter().map(|&d| d as i64).collect();
        let in_dims = self.known_dims(x)?;
        if in_dims[1] as usize != c {
            return Err(super::NodeError::Invalid(format!(
                "input has {} channels, weights expect {c}",
                in_dims[1]
            )));
        }
        let sr = kernel.len();
        let strides = n.attrs.ints("strides")?.unwrap_or(vec![1; sr]);
        let dilations = n.attrs.ints("dilations")?.unwrap_or(vec![1; sr]);
        let output_padding = n.attrs.ints("output_padding")?.unwrap_or(vec![0; sr]);
        let mut pads = n.attrs.ints("pads")?.unwrap_or(vec![0; 2 * sr]);
        if strides.len() != sr
            || dilations.len() != sr
            || output_padding.len() != sr
            || pads.len() != 2 * sr
        {
            return Err(super::NodeError::Invalid(
                "strides, dilations, output_padding or pads have the wrong length".into(),
            ));
        }
        if dilations.iter().any(|&d| d != 1) {
            return unsupported(
                "dilated ConvTranspose is not supported (TRANSPOSE_CONV_2D has no dilation)",
            );
        }
        if strides.iter().any(|&s| s < 1 || s > i64::from(i32::MAX)) {
            return Err(super::NodeError::Invalid("strides out of range".into()));
        }
        let spatial_in: Vec<i64> = in_dims[2..].iter().map(|&d| i64::from(d)).collect();
        let auto_pad = n.attrs.string_or("auto_pad", "NOTSET")?;
        let output_shape = n.attrs.ints("output_shape")?;
        // Output extent per axis, and the padding that yields it (may be negative).
        let mut out = vec![0i64; sr];
        for i in 0..sr {
            let full = strides[i] * (spatial_in[i] - 1) + output_padding[i] + kernel[i];
            let target = match (&output_shape, auto_pad.as_str()) {
                (Some(os), _) => {
                    let os = &os[os.len().saturating_sub(sr)..];
                    os.get(i).copied().unwrap_or(full)
                }
                (None, "SAME_UPPER" | "SAME_LOWER") => spatial_in[i] * strides[i],
                _ => full - pads[i] - pads[i + sr],
            };
            if output_shape.is_some() || auto_pad.starts_with("SAME") {
                let total = full - target;
                let (begin, end) = if auto_pad == "SAME_UPPER" {
                    (total / 2, total - total / 2)
                } else {
                    (total - total / 2, total / 2)
                };
                pads[i] = begin;
                pads[i + sr] = end;
            }
            out[i] = target;
            if target < 1 {
                return Err(super::NodeError::Invalid(format!(
                    "output extent {target} along axis {i} is not positive"
                )));
            }
        }
        // TRANSPOSE_CONV_2D computes extent s*(in-1)+k-pb-pe with non-negative pads; the
        // output padding shortens the end pad, and what pads cannot express (negative
        // values) is added afterwards as zeros, with the bias applied last.
        let lift =
            |v: &[i64], one: i64| -> [i64; 2] { if sr == 1 { [one, v[0]] } else { [v[0], v[1]] } };
        let k2 = lift(&kernel, 1);
        let s2 = lift(&strides, 1);
        let begin = lift(&pads[..sr], 0);
        let end: Vec<i64> = (0..sr).map(|i| pads[i + sr] - output_padding[i]).collect();
        let end = lift(&end, 0);
        let extra_begin = begin.map(|p| (-p).max(0));
        let extra_end = end.map(|p| (-p).max(0));
        let needs_extra = extra_begin.iter().chain(&extra_end).any(|&e| e > 0);
        let w4 = ConstTensor {
            shape: vec![c, m, k2[0] as usize, k2[1] as usize],
            ..(*w).clone()
        };
        let w4 = constant::cast(&w4, DataType::F32);
        let filter = constant::transpose(&w4, &[1, 2, 3, 0])?;
        let filter = self.const_operand(&filter)?.operand;
        let bias_values = match self.const_input(n, 2)? {
            Some(b) if b.shape.iter().product::<usize>() == m => constant::to_f32s(&b),
            Some(_) => {
                return Err(super::NodeError::Invalid(format!(
                    "bias must hold {m} values"
                )));
            }
            None => vec![0.0; m],
        };
        let bias = self.model.add_f32_tensor(
            vec![m as u32],
            &if needs_extra {
                vec![0.0; m]
            } else {
                bias_values.clone()
            },
        );
        let (x4, _) = self.as_4d(n, x)?;
        let xh = self.to_nhwc(n, x4)?;
        let mut inputs = vec![xh, filter, bias];
        for v in [
            begin[1].max(0),
            end[1].max(0),
            begin[0].max(0),
            end[0].max(0),
            s2[1],
            s2[0],
        ] {
            inputs.push(self.i32_const(v as i32));
        }
        inputs.push(self.i32_const(0));
        inputs.push(self.bool_const(false));
        let mut yh = self.emit(n, OperationType::TransposeConv2d, inputs)?;
        if needs_extra {
            let paddings = self.i32_vector(&[
                0,
                0,
                extra_begin[0] as i32,
                extra_end[0] as i32,
                extra_begin[1] as i32,
                extra_end[1] as i32,
                0,
                0,
            ]);
            yh = self.emit(n, OperationType::Pad, vec![yh, paddings])?;
            let b = self.model.add_f32_tensor(vec![m as u32], &bias_values);
            let act = self.i32_const(0);
            yh = self.emit(n, OperationType::Add, vec![yh, b, act])?;
        }
        let y4 = self.to_nchw(n, yh)?;
        let y = self.back_from_4d(n, y4, rank)?;
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
    }
}
