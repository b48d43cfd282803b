//! Conv and ConvTranspose.
//!
//! 1-D convolutions run as 2-D ones of height 1, 3-D ones as one 2-D convolution over
//! depth-shifted views (`volume.rs`). Constant weights are re-laid-out at compile time
//! (OIHW -> OHWI for CONV_2D, -> 1HWO for DEPTHWISE_CONV_2D, IOHW -> OHWI for
//! TRANSPOSE_CONV_2D); weights computed at run time get the same layout from RESHAPE and
//! TRANSPOSE operations. The operation itself runs in NHWC between two transposes.

use std::rc::Rc;

use nnc_formats::nn::ops::{
    Conv2d, ConvKind, Hw, PadFill, TransposeConv2d, TransposePadding, WindowPadding,
};
use nnc_formats::nn::{FusedActivation, OperandType, OperationType};
use nnc_formats::tensor::DataType;

use super::super::constant::{self, ConstTensor};
use super::dynamic_quant::EXACT_FLOAT_SUM;
use super::{Lowerer, NResult, Node, TensorValue, Value, needs_input_shape, unsupported};

mod volume;

/// Spatial parameters shared by convolutions and pools, for two spatial axes (H, W).
pub(super) struct Spatial {
    pub kernel: [u32; 2],
    pub strides: [u32; 2],
    pub dilations: [u32; 2],
    /// `[top, left, bottom, right]`.
    pub pads: [u32; 4],
}

impl Spatial {
    /// `pads` as the NN set's explicit padding.
    pub fn padding(&self) -> WindowPadding {
        let [top, left, bottom, right] = self.pads;
        WindowPadding::Explicit {
            left,
            right,
            top,
            bottom,
        }
    }

    pub fn stride(&self) -> Hw {
        Hw {
            h: self.strides[0],
            w: self.strides[1],
        }
    }

    pub fn dilation(&self) -> Hw {
        Hw {
            h: self.dilations[0],
            w: self.dilations[1],
        }
    }

    pub fn kernel(&self) -> Hw {
        Hw {
            h: self.kernel[0],
            w: self.kernel[1],
        }
    }
}

/// A window's attributes over any number of spatial axes, as ONNX gives them.
pub(super) struct Window {
    pub strides: Vec<i64>,
    pub dilations: Vec<i64>,
    /// All begins, then all ends (ONNX's order), `auto_pad` resolved.
    pub pads: Vec<i64>,
}

/// Reads `strides`, `dilations`, `pads` and `auto_pad` for a window of `kernel.len()`
/// spatial axes (1 to 3). `spatial_in` are the input's spatial extents (0 when unknown).
pub(super) fn read_window(
    n: &Node,
    kernel: &[i64],
    spatial_in: &[u32],
    allow_dilation: bool,
) -> NResult<Window> {
    let rank = kernel.len();
    if !(1..=3).contains(&rank) {
        return unsupported(format!(
            "{}-D windows are not supported (only 1-D, 2-D and 3-D)",
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
                    return needs_input_shape(
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
    Ok(Window {
        strides,
        dilations,
        pads,
    })
}

/// Reads `strides`, `dilations`, `pads` and `auto_pad` for a 1-D or 2-D window
/// operation, lifted to the two spatial axes (H, W) of the NN set's windows.
pub(super) fn read_spatial(
    n: &Node,
    kernel: &[i64],
    spatial_in: &[u32],
    allow_dilation: bool,
) -> NResult<Spatial> {
    if kernel.len() > 2 {
        return unsupported(format!(
            "{}-D windows are not supported here (only 1-D and 2-D)",
            kernel.len()
        ));
    }
    let Window {
        strides,
        dilations,
        pads,
    } = read_window(n, kernel, spatial_in, allow_dilation)?;
    let rank = kernel.len();
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

/// The NN operation a convolution of `group` groups is (CONV_2D, DEPTHWISE_CONV_2D or
/// GROUPED_CONV_2D), and how its `[M, C/g, kH, kW]` weights are permuted for it.
pub(super) fn conv_kind(
    group: usize,
    channels: usize,
    cg: usize,
    m: usize,
    dilations: [u32; 2],
) -> NResult<(ConvKind, [usize; 4])> {
    let depthwise = group == channels && group > 1 && cg == 1;
    Ok(if group == 1 {
        (ConvKind::Plain, [0, 2, 3, 1])
    } else if depthwise {
        let multiplier = (m / channels) as u32;
        (ConvKind::Depthwise { multiplier }, [1, 2, 3, 0])
    } else {
        if dilations != [1, 1] {
            return unsupported(
                "dilated grouped convolutions are not supported (GROUPED_CONV_2D has no dilation)",
            );
        }
        let groups = group as u32;
        (ConvKind::Grouped { groups }, [0, 2, 3, 1])
    })
}

/// A ConvTranspose's window along its spatial axes, with `auto_pad` and `output_shape`
/// resolved into `pads` (which may be negative: the output is then larger than the
/// full result, and zeros fill the difference).
pub(super) struct TransposeWindow {
    pub strides: Vec<i64>,
    pub output_padding: Vec<i64>,
    /// All begins, then all ends.
    pub pads: Vec<i64>,
    /// The output extent per axis.
    pub out: Vec<i64>,
}

/// Reads a ConvTranspose's `strides`, `output_padding`, `pads`, `auto_pad` and
/// `output_shape` for a (dilated) kernel of extents `kernel` over an input of spatial
/// extents `spatial_in`.
pub(super) fn transpose_window(
    n: &Node,
    kernel: &[i64],
    spatial_in: &[u32],
) -> NResult<TransposeWindow> {
    let sr = kernel.len();
    let strides = n.attrs.ints("strides")?.unwrap_or(vec![1; sr]);
    let output_padding = n.attrs.ints("output_padding")?.unwrap_or(vec![0; sr]);
    let mut pads = n.attrs.ints("pads")?.unwrap_or(vec![0; 2 * sr]);
    if strides.len() != sr || output_padding.len() != sr || pads.len() != 2 * sr {
        return Err(super::NodeError::Invalid(
            "strides, dilations, output_padding or pads have the wrong length".into(),
        ));
    }
    if strides.iter().any(|&s| s < 1 || s > i64::from(i32::MAX)) {
        return Err(super::NodeError::Invalid("strides out of range".into()));
    }
    let spatial_in: Vec<i64> = spatial_in.iter().map(|&d| i64::from(d)).collect();
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
            // ONNX's reference divides with floor (Python's //), which matters when
            // the requested output is larger than the full one (negative total).
            let half = total.div_euclid(2);
            let (begin, end) = if auto_pad == "SAME_UPPER" {
                (half, total - half)
            } else {
                (total - half, half)
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
    Ok(TransposeWindow {
        strides,
        output_padding,
        pads,
        out,
    })
}

/// ConvInteger's weights as float differences from their zero points, their shape, and
/// the input channel ranges `[from, to)` whose float32 sums stay exact.
type IntegerFilter = (Filter, Vec<usize>, Vec<(usize, usize)>);

/// Convolution weights: a constant (re-laid-out at compile time) or a tensor computed at
/// run time (re-laid-out by RESHAPE and TRANSPOSE operations; the kernels take run-time
/// filters as they are).
enum Filter {
    Const(Rc<ConstTensor>),
    Run(u32),
}

impl Filter {
    fn clone_ref(&self) -> Filter {
        match self {
            Filter::Const(c) => Filter::Const(Rc::clone(c)),
            Filter::Run(o) => Filter::Run(*o),
        }
    }
}

impl Lowerer<'_> {
    /// Input `i` as convolution weights, with their shape.
    fn filter_input(&mut self, n: &Node, i: usize) -> NResult<(Filter, Vec<usize>)> {
        match self.required(n, i)? {
            Value::Const(c) => {
                let shape = c.shape.clone();
                Ok((Filter::Const(c), shape))
            }
            Value::Tensor(tv) => {
                self.require_float(n, tv)?;
                let dims = self.known_dims(tv)?;
                Ok((
                    Filter::Run(tv.operand),
                    dims.iter().map(|&d| d as usize).collect(),
                ))
            }
        }
    }

    /// The weights viewed as `shape`, permuted by `perm` and viewed as `result`, as an
    /// operand.
    fn filter_operand(
        &mut self,
        n: &Node,
        f: &Filter,
        shape: &[usize],
        perm: &[usize],
        result: &[u32],
    ) -> NResult<u32> {
        match f {
            Filter::Const(w) => {
                let cast;
                let w: &ConstTensor = if w.dtype == DataType::F32 {
                    w
                } else {
                    cast = constant::cast(w, DataType::F32);
                    &cast
                };
                let mut t = constant::transpose_as(w, shape, perm)?;
                t.shape = result.iter().map(|&d| d as usize).collect();
                Ok(self.const_operand_owned(t)?.operand)
            }
            Filter::Run(o) => {
                let dims: Vec<u32> = shape.iter().map(|&d| d as u32).collect();
                let viewed = self.reshape_to(n, *o, &dims)?;
                let p: Vec<i32> = perm.iter().map(|&v| v as i32).collect();
                let permuted = self.transpose_op(n, viewed, &p)?;
                if result.len() == shape.len() {
                    Ok(permuted)
                } else {
                    self.reshape_to(n, permuted, result)
                }
            }
        }
    }

    /// Entries `[from, from + len)` along `axis` of convolution weights of shape `shape`.
    fn filter_slice(
        &mut self,
        n: &Node,
        f: &Filter,
        shape: &[usize],
        axis: usize,
        from: usize,
        len: usize,
    ) -> NResult<Filter> {
        match f {
            Filter::Const(w) => {
                let ranges: Vec<(i64, i64, usize)> = shape
                    .iter()
                    .enumerate()
                    .map(|(d, &e)| {
                        if d == axis {
                            (from as i64, 1, len)
                        } else {
                            (0, 1, e)
                        }
                    })
                    .collect();
                Ok(Filter::Const(Rc::new(constant::slice(
                    w,
                    &ranges,
                    &self.budget,
                )?)))
            }
            Filter::Run(o) => {
                let mut begin = vec![0i32; shape.len()];
                begin[axis] = from as i32;
                let mut size: Vec<i32> = shape.iter().map(|&e| e as i32).collect();
                size[axis] = len as i32;
                let b = self.i32_vector(&begin);
                let s = self.i32_vector(&size);
                Ok(Filter::Run(self.emit(
                    n,
                    OperationType::Slice,
                    vec![*o, b, s],
                )?))
            }
        }
    }

    /// The weights with zeros inserted between their spatial taps (`dilations` per
    /// spatial axis), and the new shape.
    fn dilate_filter(
        &mut self,
        n: &Node,
        f: Filter,
        shape: &[usize],
        dilations: &[i64],
    ) -> NResult<(Filter, Vec<usize>)> {
        if dilations.iter().all(|&d| d == 1) {
            return Ok((f, shape.to_vec()));
        }
        let mut shape = shape.to_vec();
        let mut f = f;
        for (i, &d) in dilations.iter().enumerate() {
            let a = i + 2;
            let k = shape[a];
            if d == 1 || k <= 1 {
                continue;
            }
            let d = d as usize;
            let outer: usize = shape[..a].iter().product();
            let inner: usize = shape[a + 1..].iter().product();
            let kd = (k - 1) * d + 1;
            if self
                .budget
                .room(&[outer, kd, inner], nnc_formats::tensor::DataType::F32)
                .is_err()
            {
                return unsupported("dilated kernel too large");
            }
            f = match f {
                Filter::Const(w) => {
                    let w = constant::cast(&w, DataType::F32);
                    let v = constant::to_f32s(&w);
                    let mut out = vec![0f32; outer * kd * inner];
                    for o in 0..outer {
                        for t in 0..k {
                            for j in 0..inner {
                                out[(o * kd + t * d) * inner + j] = v[(o * k + t) * inner + j];
                            }
                        }
                    }
                    let mut new_shape = shape.clone();
                    new_shape[a] = kd;
                    Filter::Const(Rc::new(constant::from_f64s(
                        DataType::F32,
                        new_shape,
                        &out.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
                    )))
                }
                Filter::Run(o) => {
                    // [outer, k, 1, inner] -> pad (0, d-1) on axis 2 -> [outer, k*d, inner]
                    // -> the first (k-1)*d+1 taps.
                    let t = self.reshape_to(n, o, &[outer as u32, k as u32, 1, inner as u32])?;
                    let p = self.i32_vector(&[0, 0, 0, 0, 0, d as i32 - 1, 0, 0]);
                    let t = self.pad_op(n, t, p, PadFill::Zeros)?;
                    let t = self.reshape_to(n, t, &[outer as u32, (k * d) as u32, inner as u32])?;
                    let b = self.i32_vector(&[0, 0, 0]);
                    let s = self.i32_vector(&[outer as i32, kd as i32, inner as i32]);
                    Filter::Run(self.emit(n, OperationType::Slice, vec![t, b, s])?)
                }
            };
            shape[a] = kd;
            if let Filter::Run(o) = f {
                let dims: Vec<u32> = shape.iter().map(|&e| e as u32).collect();
                f = Filter::Run(self.reshape_to(n, o, &dims)?);
            }
        }
        Ok((f, shape))
    }

    /// Input 2 as the [m] bias: constant values, or a run-time operand.
    fn bias_input(&mut self, n: &Node, m: usize) -> NResult<Result<Vec<f32>, u32>> {
        match self.input(n, 2)? {
            None => Ok(Ok(vec![0.0; m])),
            Some(Value::Const(b)) if b.shape.iter().product::<usize>() == m => {
                Ok(Ok(constant::to_f32s(&b)))
            }
            Some(Value::Tensor(tv)) if self.dims(tv) == [m as u32] => {
                self.require_float(n, tv)?;
                Ok(Err(tv.operand))
            }
            Some(_) => Err(super::NodeError::Invalid(format!(
                "bias must hold {m} values"
            ))),
        }
    }
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
        let (w, w_shape) = self.filter_input(n, 1)?;
        let m = w_shape.first().copied().unwrap_or(0);
        let bias = self.bias_input(n, m)?;
        let y = self.conv_values(n, x, &w, &w_shape, bias)?;
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
    }

    /// The convolution node `n` describes (its attributes) of float `x` with weights `w`
    /// of shape `w_shape` and `bias`; returns the output operand, in `x`'s layout.
    fn conv_values(
        &mut self,
        n: &Node,
        x: TensorValue,
        w: &Filter,
        w_shape: &[usize],
        bias: Result<Vec<f32>, u32>,
    ) -> NResult<u32> {
        let rank = self.rank(x);
        if w_shape.len() != rank || !(3..=5).contains(&rank) {
            return unsupported(format!(
                "convolution of rank-{rank} input with rank-{} weights is not supported (only 1-D, 2-D and 3-D)",
                w_shape.len()
            ));
        }
        if rank == 5 {
            return self.conv_3d(n, x, w, w_shape, bias);
        }
        let group = n.attrs.int_or("group", 1)?;
        let m = w_shape[0];
        let cg = w_shape[1];
        let kernel: Vec<i64> = w_shape[2..].iter().map(|&d| d as i64).collect();
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
        // Weights as [M, C/g, kH, kW] regardless of rank.
        let shape4 = [m, cg, sp.kernel[0] as usize, sp.kernel[1] as usize];
        let (x4, _) = self.as_4d(n, x)?;
        let xh = self.to_nhwc(n, x4)?;
        let (kind, perm) = conv_kind(group, channels, cg, m, sp.dilations)?;
        let permuted = perm.map(|p| shape4[p] as u32);
        let filter = self.filter_operand(n, w, &shape4, &perm, &permuted)?;
        let bias = match bias {
            Ok(values) => self.model.add_f32_tensor(vec![m as u32], &values),
            Err(operand) => operand,
        };
        let conv = Conv2d {
            kind,
            padding: sp.padding(),
            stride: sp.stride(),
            dilation: sp.dilation(),
            // The fusion pass fuses a following activation.
            activation: FusedActivation::None,
            nchw: false,
        };
        let mut inputs = vec![xh, filter, bias];
        inputs.extend(conv.encode(&mut self.model));
        let yh = self.emit(n, conv.op_type(), inputs)?;
        let y4 = self.to_nchw(n, yh)?;
        self.back_from_4d(n, y4, rank)
    }

    /// ConvInteger(x, w, x_zero_point?, w_zero_point?) -> int32: the convolution of `x -
    /// x_zp` with `w - w_zp` (padding contributes zero differences), computed in float32
    /// and cast: every product and partial sum is an integer below 2^24 in magnitude, so
    /// the float sums are exact in any order. The weights must be constant; where an
    /// output channel's sums could reach 2^24 (255 times its sum of weight magnitudes),
    /// the input channels split into ranges that stay below it, one convolution each,
    /// and their int32 results add exactly.
    pub(super) fn conv_integer(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        if !matches!(x.dtype, DataType::U8 | DataType::I8) {
            return super::invalid(format!("ConvInteger of {} data", x.dtype));
        }
        let mut xf = self.cast_op(n, x.operand, OperandType::TensorFloat32)?;
        if let Some(zp) = self.input(n, 2)? {
            let z = self.materialize(self.input_name(n, 2).unwrap_or(""), &zp)?;
            if z.dtype != x.dtype {
                return super::invalid("x_zero_point's type differs from x's");
            }
            if self.dims(z).iter().product::<u32>() != 1 {
                return unsupported("ConvInteger with an x_zero_point of more than one value");
            }
            let zf = self.cast_op(n, z.operand, OperandType::TensorFloat32)?;
            xf = self.arith(n, OperationType::Sub, xf, zf)?;
        }
        let xf = TensorValue {
            operand: xf,
            dtype: DataType::F32,
            scalar: false,
        };
        let group = n.attrs.int_or("group", 1)?;
        let (filter, w_shape, ranges) = match self.required(n, 1)? {
            Value::Const(w) => self.integer_filter(n, &w)?,
            Value::Tensor(w) => self.run_time_integer_filter(n, w)?,
        };
        if ranges.len() > 1 && group != 1 {
            return unsupported(
                "grouped ConvInteger whose sums could reach 2^24, beyond what nnc's float32 \
                 sums hold exactly",
            );
        }
        let m = w_shape[0];
        let mut y: Option<u32> = None;
        for &(from, to) in &ranges {
            let (xr, wr, shape) = if ranges.len() == 1 {
                (xf, filter.clone_ref(), w_shape.clone())
            } else {
                let dims = self.known_dims(xf)?;
                let mut begin = vec![0i32; dims.len()];
                begin[1] = from as i32;
                let mut size: Vec<i32> = dims.iter().map(|&d| d as i32).collect();
                size[1] = (to - from) as i32;
                let b = self.i32_vector(&begin);
                let sz = self.i32_vector(&size);
                let operand = self.emit(n, OperationType::Slice, vec![xf.operand, b, sz])?;
                let wr = self.filter_slice(n, &filter, &w_shape, 1, from, to - from)?;
                let mut shape = w_shape.clone();
                shape[1] = to - from;
                (TensorValue { operand, ..xf }, wr, shape)
            };
            let part = self.conv_values(n, xr, &wr, &shape, Ok(vec![0.0; m]))?;
            let part = self.cast_op(n, part, OperandType::TensorInt32)?;
            y = Some(match y {
                None => part,
                Some(sum) => self.arith(n, OperationType::Add, sum, part)?,
            });
        }
        let y = y.ok_or_else(|| super::NodeError::Invalid("ConvInteger of no channels".into()))?;
        self.set_tensor(n, 0, y, DataType::I32, false);
        Ok(())
    }

    /// ConvInteger's constant weights minus their zero points (input 3) as float
    /// weights, with the input channel ranges whose sums stay below 2^24.
    fn integer_filter(&mut self, n: &Node, w: &ConstTensor) -> NResult<IntegerFilter> {
        if !matches!(w.dtype, DataType::U8 | DataType::I8) || w.shape.len() < 3 {
            return super::invalid(format!(
                "ConvInteger's weights must be 8-bit integers of rank >= 3, got {} {:?}",
                w.dtype, w.shape
            ));
        }
        let m = w.shape[0];
        let per_channel: usize = w.shape[1..].iter().product();
        let zero_points = match self.const_input(n, 3)? {
            Some(z) => constant::to_i64s(&z),
            None => vec![0],
        };
        if zero_points.len() != 1 && zero_points.len() != m {
            return super::invalid(format!(
                "w_zero_point has {} values for {m} output channels",
                zero_points.len()
            ));
        }
        let values = constant::to_i64s(w);
        let (cg, taps) = (w.shape[1], w.shape[2..].iter().product::<usize>());
        let mut differences = vec![0f64; values.len()];
        for (channel, row) in values.chunks(per_channel.max(1)).enumerate() {
            let zp = zero_points[if zero_points.len() == 1 { 0 } else { channel }];
            for (k, &v) in row.iter().enumerate() {
                differences[channel * per_channel + k] = (v - zp) as f64;
            }
        }
        // Input channel ranges whose sums stay below 2^24 (each data difference is at
        // most 255 in magnitude): one range unless the weights are large; each range is
        // its own float32 convolution, and the ranges' int32 results add exactly.
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        let mut sums = vec![0f64; m];
        let mut start = 0;
        for c in 0..cg {
            let channel_sums: Vec<f64> = (0..m)
                .map(|o| {
                    let from = o * per_channel + c * taps;
                    differences[from..from + taps].iter().map(|d| d.abs()).sum()
                })
                .collect();
            if channel_sums.iter().any(|&v| 255.0 * v >= EXACT_FLOAT_SUM) {
                return unsupported(format!(
                    "ConvInteger whose sums over one input channel could reach 2^24 or more \
                     (a window of {taps} taps), beyond what nnc's float32 sums hold exactly"
                ));
            }
            if sums
                .iter()
                .zip(&channel_sums)
                .any(|(a, b)| 255.0 * (a + b) >= EXACT_FLOAT_SUM)
            {
                ranges.push((start, c));
                start = c;
                sums.iter_mut().for_each(|v| *v = 0.0);
            }
            sums.iter_mut()
                .zip(&channel_sums)
                .for_each(|(a, b)| *a += b);
        }
        ranges.push((start, cg));
        let wf = constant::from_f64s(DataType::F32, w.shape.clone(), &differences);
        Ok((Filter::Const(Rc::new(wf)), w.shape.clone(), ranges))
    }

    /// ConvInteger's run-time weights minus their zero point as float weights, with
    /// input channel ranges of at most 258 products per output (258 x 255 x 255 < 2^24).
    fn run_time_integer_filter(&mut self, n: &Node, w: TensorValue) -> NResult<IntegerFilter> {
        if !matches!(w.dtype, DataType::U8 | DataType::I8) {
            return super::invalid(format!("ConvInteger of {} weights", w.dtype));
        }
        let dims = self.known_dims(w)?;
        if dims.len() < 3 {
            return super::invalid(format!("ConvInteger's weights have rank {}", dims.len()));
        }
        let w_shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        let (m, cg, taps) = (
            w_shape[0],
            w_shape[1],
            w_shape[2..].iter().product::<usize>(),
        );
        let per_range = (1usize << 24) / (255 * 255) / taps.max(1);
        if per_range == 0 {
            return unsupported(format!(
                "ConvInteger with run-time weights over windows of {taps} taps, whose sums \
                 could reach 2^24"
            ));
        }
        let mut wf = self.cast_op(n, w.operand, OperandType::TensorFloat32)?;
        if let Some(zp) = self.input(n, 3)? {
            let z = self.materialize(self.input_name(n, 3).unwrap_or(""), &zp)?;
            if z.dtype != w.dtype {
                return super::invalid("w_zero_point's type differs from w's");
            }
            let count = self.dims(z).iter().product::<u32>() as usize;
            let mut zf = self.cast_op(n, z.operand, OperandType::TensorFloat32)?;
            if count == m && m > 1 {
                // One per output channel: [M] -> [M, 1, ...] to broadcast.
                let mut shape = vec![1u32; w_shape.len()];
                shape[0] = m as u32;
                zf = self.reshape_to(n, zf, &shape)?;
            } else if count != 1 {
                return super::invalid(format!(
                    "w_zero_point has {count} values for {m} output channels"
                ));
            }
            wf = self.arith(n, OperationType::Sub, wf, zf)?;
        }
        let ranges = (0..cg)
            .step_by(per_range)
            .map(|from| (from, (from + per_range).min(cg)))
            .collect();
        Ok((Filter::Run(wf), w_shape, ranges))
    }

    pub(super) fn conv_transpose(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let (w, w_shape) = self.filter_input(n, 1)?;
        let rank = self.rank(x);
        if w_shape.len() != rank || !(3..=5).contains(&rank) {
            return unsupported("only 1-D, 2-D and 3-D ConvTranspose is supported");
        }
        let group = n.attrs.int_or("group", 1)?;
        if group < 1 || w_shape[0] as i64 % group != 0 {
            return Err(super::NodeError::Invalid(format!(
                "group {group} does not divide the {} input channels",
                w_shape[0]
            )));
        }
        let group = group as usize;
        // A dilated kernel is the kernel with dilation - 1 zeros between its taps: it
        // becomes an ordinary one of extent (k - 1) * d + 1, exactly.
        let dilations = n.attrs.ints("dilations")?.unwrap_or(vec![1; rank - 2]);
        if dilations.len() != rank - 2 || dilations.iter().any(|&d| !(1..=1 << 16).contains(&d)) {
            return Err(super::NodeError::Invalid("dilations out of range".into()));
        }
        let (w, w_shape) = self.dilate_filter(n, w, &w_shape, &dilations)?;
        if rank == 5 {
            return self.conv_transpose_3d(n, x, &w, &w_shape, group);
        }
        let c = w_shape[0];
        // Output channels per group.
        let m = w_shape[1];
        let kernel: Vec<i64> = w_shape[2..].iter().map(|&d| d as i64).collect();
        let in_dims = self.known_dims(x)?;
        if in_dims[1] as usize != c {
            return Err(super::NodeError::Invalid(format!(
                "input has {} channels, weights expect {c}",
                in_dims[1]
            )));
        }
        let sr = kernel.len();
        let TransposeWindow {
            strides,
            output_padding,
            pads,
            out: _,
        } = transpose_window(n, &kernel, &in_dims[2..])?;
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
        let total_m = m * group;
        let cg = c / group;
        let bias_values = self.bias_input(n, total_m)?;
        // Groups: one TRANSPOSE_CONV_2D per group on its slice of the input channels and
        // filter rows, concatenated along the channels; the bias is added after.
        let in_bias = group == 1 && !needs_extra;
        // The same parameters for every group; `as` keeps the 32-bit wrap of pads beyond
        // i32 that validation then rejects as negative.
        let pad = |p: i64| p.max(0) as u32;
        let transpose = TransposeConv2d {
            padding: TransposePadding::Explicit {
                left: pad(begin[1]),
                right: pad(end[1]),
                top: pad(begin[0]),
                bottom: pad(end[0]),
            },
            stride: Hw {
                h: s2[0] as u32,
                w: s2[1] as u32,
            },
            activation: FusedActivation::None,
            nchw: false,
        };
        let (x4, d4) = self.as_4d(n, x)?;
        let xh = self.to_nhwc(n, x4)?;
        let mut parts = Vec::with_capacity(group);
        for j in 0..group {
            let wj = if group == 1 {
                w.clone_ref()
            } else {
                self.filter_slice(n, &w, &w_shape, 0, j * cg, cg)?
            };
            let shape4 = [cg, m, k2[0] as usize, k2[1] as usize];
            let perm = [1, 2, 3, 0];
            let permuted = perm.map(|p| shape4[p] as u32);
            let filter = self.filter_operand(n, &wj, &shape4, &perm, &permuted)?;
            let bias = match (&bias_values, in_bias) {
                (Ok(v), true) => self.model.add_f32_tensor(vec![m as u32], v),
                (Err(operand), true) => *operand,
                (_, false) => self.model.add_f32_tensor(vec![m as u32], &vec![0.0; m]),
            };
            let xj = if group == 1 {
                xh
            } else {
                let b = self.i32_vector(&[0, 0, 0, (j * cg) as i32]);
                let sz = self.i32_vector(&[d4[0] as i32, d4[2] as i32, d4[3] as i32, cg as i32]);
                self.emit(n, OperationType::Slice, vec![xh, b, sz])?
            };
            let mut inputs = vec![xj, filter, bias];
            inputs.extend(transpose.encode(&mut self.model, None));
            parts.push(self.emit(n, OperationType::TransposeConv2d, inputs)?);
        }
        let mut yh = if parts.len() == 1 {
            parts[0]
        } else {
            let mut inputs = parts;
            inputs.push(self.i32_const(3));
            self.emit(n, OperationType::Concatenation, inputs)?
        };
        let m = total_m;
        if needs_extra || !in_bias {
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
                yh = self.pad_op(n, yh, paddings, PadFill::Zeros)?;
            }
            let b = match &bias_values {
                Ok(v) => self.model.add_f32_tensor(vec![m as u32], v),
                Err(operand) => *operand,
            };
            let act = self.i32_const(0);
            yh = self.emit(n, OperationType::Add, vec![yh, b, act])?;
        }
        let y4 = self.to_nchw(n, yh)?;
        let y = self.back_from_4d(n, y4, rank)?;
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
    }
}
