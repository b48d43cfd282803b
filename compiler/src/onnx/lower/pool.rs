//! MaxPool, AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool, GlobalLpPool.

use nnc_formats::nn::ops::{Hw, PadFill, PadValue, Pool2d, StridedSlice, WindowPadding};
use nnc_formats::nn::{FusedActivation, OperationType};

use super::conv::read_spatial;
use super::{Lowerer, NResult, Node, TensorValue, needs_input_shape, unsupported};

/// How a window's elements are combined.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reduce {
    Max,
    /// The sum divided by ONNX's element count (count_include_pad decides which).
    Average,
    /// The plain sum, padding contributing zeros (LpPool over |x|^p).
    Sum,
}

/// One spatial axis of a window operation, in ONNX's terms.
struct Axis {
    input: i64,
    kernel: i64,
    stride: i64,
    dilation: i64,
    pad_begin: i64,
    pad_end: i64,
    output: i64,
}

/// Reads the window attributes of an N-D pool (any number of spatial axes) and computes
/// each axis's output extent: floor((in + pads - span) / stride) + 1, or the ceiling with
/// ceil_mode, less one when the last window would start past the input and its begin
/// padding (ONNX's rule).
fn pool_axes(n: &Node, kernel: &[i64], spatial_in: &[u32]) -> NResult<Vec<Axis>> {
    let r = kernel.len();
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
    let strides = ints("strides", 1, r)?;
    let dilations = ints("dilations", 1, r)?;
    let mut pads = ints("pads", 0, 2 * r)?;
    let limit = i64::from(i32::MAX);
    for v in kernel.iter().chain(&strides).chain(&dilations) {
        if *v < 1 || *v > limit {
            return super::invalid("kernel_shape, strides and dilations must be in 1..=2^31-1");
        }
    }
    if pads.iter().any(|&p| !(0..=limit).contains(&p)) {
        return unsupported("negative pads are not supported");
    }
    let ceil_mode = n.attrs.int_or("ceil_mode", 0)? != 0;
    let auto_pad = n.attrs.string_or("auto_pad", "NOTSET")?;
    let mut axes = Vec::with_capacity(r);
    for i in 0..r {
        let input = i64::from(spatial_in[i]);
        if input == 0 {
            return needs_input_shape(
                "pooling needs the spatial size at compile time; use --input-shape",
            );
        }
        let span = (kernel[i] - 1) * dilations[i] + 1;
        match auto_pad.as_str() {
            "NOTSET" => {}
            "VALID" => {
                pads[i] = 0;
                pads[i + r] = 0;
            }
            "SAME_UPPER" | "SAME_LOWER" => {
                let out = (input + strides[i] - 1) / strides[i];
                let total = ((out - 1) * strides[i] + span - input).max(0);
                let small = total / 2;
                (pads[i], pads[i + r]) = if auto_pad == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
            }
            other => return super::invalid(format!("unknown auto_pad '{other}'")),
        }
        let room = input + pads[i] + pads[i + r] - span;
        if room < 0 {
            return super::invalid("the window is larger than the padded input");
        }
        let mut output = if ceil_mode {
            (room + strides[i] - 1) / strides[i] + 1
        } else {
            room / strides[i] + 1
        };
        if ceil_mode && (output - 1) * strides[i] >= input + pads[i] {
            output -= 1;
        }
        axes.push(Axis {
            input,
            kernel: kernel[i],
            stride: strides[i],
            dilation: dilations[i],
            pad_begin: pads[i],
            pad_end: pads[i + r],
            output,
        });
    }
    Ok(axes)
}

impl Lowerer<'_> {
    /// N-D pooling from strided slices, for what the NN set's 2-D pools cannot do (3-D
    /// and higher windows, dilation, MaxPool's Indices output). The input is padded
    /// (-inf for max, 0 for average and sum) to cover every window; each kernel offset is one
    /// STRIDED_SLICE of it, and the slices are combined with MAXIMUM or ADD. Max and sum
    /// are separable, so without Indices each spatial axis is reduced in turn (k slices
    /// per axis, not k^d). The average divides by a compile-time count of the window
    /// elements ONNX counts: those inside the input (count_include_pad = 0) or the whole
    /// window (= 1, ceil-mode overhang included, as ONNX's reference does). Indices follow the
    /// first maximum in window order (row-major offsets), as ONNX's reference does, and
    /// address the unpadded input, row-major or (storage_order = 1) column-major over
    /// the spatial axes. `x` is the (float) tensor to pool; returns output 0's operand.
    fn pool_by_slices(
        &mut self,
        n: &Node,
        reduce: Reduce,
        kernel: &[i64],
        x: TensorValue,
    ) -> NResult<u32> {
        use nnc_formats::nn::OperandType as T;
        let max = reduce == Reduce::Max;
        let dims = self.known_dims(x)?;
        let r = dims.len();
        let sd = kernel.len();
        if sd + 2 != r {
            return super::invalid(format!("{sd}-D pooling of a rank-{r} input"));
        }
        let axes = pool_axes(n, kernel, &dims[2..])?;
        let want_indices = max && self.output_used(n, 1);
        let include_pad = reduce == Reduce::Average && n.attrs.int_or("count_include_pad", 0)? != 0;
        // Pad to exactly what the windows read.
        let mut paddings = vec![0i32; 2 * r];
        for (i, a) in axes.iter().enumerate() {
            let needed = (a.output - 1) * a.stride + (a.kernel - 1) * a.dilation + 1;
            let have = a.input + a.pad_begin + a.pad_end;
            let end = a.pad_end + (needed - have).max(0);
            paddings[2 * (i + 2)] = i32::try_from(a.pad_begin)
                .map_err(|_| super::NodeError::Invalid("pads out of range".into()))?;
            paddings[2 * (i + 2) + 1] = i32::try_from(end)
                .map_err(|_| super::NodeError::Invalid("pads out of range".into()))?;
        }
        let mut padded_dims: Vec<i64> = dims.iter().map(|&d| i64::from(d)).collect();
        for d in 2..r {
            padded_dims[d] += i64::from(paddings[2 * d]) + i64::from(paddings[2 * d + 1]);
        }
        let xp = if paddings.iter().any(|&p| p != 0) {
            let p = self.i32_vector(&paddings);
            let fill = if max {
                PadFill::Value(PadValue::Float(f32::NEG_INFINITY))
            } else {
                PadFill::Zeros
            };
            self.pad_op(n, x.operand, p, fill)?
        } else {
            x.operand
        };
        // STRIDED_SLICE of `src` (extents `extents`) taking, along each axis in
        // `offsets`, output-many elements from `offset` with the axis's stride.
        let slice = |this: &mut Self, src: u32, extents: &[i64], offsets: &[(usize, i64)]| {
            let mut begin = vec![0i32; r];
            let mut end: Vec<i32> = extents.iter().map(|&e| e as i32).collect();
            let mut stride = vec![1i32; r];
            for &(i, off) in offsets {
                let a = &axes[i];
                begin[i + 2] = off as i32;
                end[i + 2] = (off + (a.output - 1) * a.stride + 1) as i32;
                stride[i + 2] = a.stride as i32;
            }
            let slice = StridedSlice {
                begin: this.i32_vector(&begin),
                end: this.i32_vector(&end),
                strides: this.i32_vector(&stride),
                begin_mask: 0,
                end_mask: 0,
                shrink_axis_mask: 0,
            };
            this.strided_slice_op(n, src, &slice)
        };
        let combine = if max {
            OperationType::Maximum
        } else {
            OperationType::Add
        };
        let mut out_dims: Vec<i64> = dims.iter().map(|&d| i64::from(d)).collect();
        for (i, a) in axes.iter().enumerate() {
            out_dims[i + 2] = a.output;
        }
        let y = if want_indices {
            // Every kernel offset at once, tracking the first maximum and its index.
            let windows: usize = kernel.iter().map(|&k| k as usize).product();
            if windows > 4096 {
                return unsupported("MaxPool Indices for windows of more than 4096 elements");
            }
            let storage = n.attrs.int_or("storage_order", 0)?;
            let out_count: usize = out_dims.iter().map(|&d| d as usize).product();
            if out_count.saturating_mul(windows) > 1 << 26 {
                return unsupported("MaxPool Indices for outputs this large");
            }
            let mut best = 0u32;
            let mut best_idx = 0u32;
            for w in 0..windows {
                let mut offs = Vec::with_capacity(sd);
                let mut rem = w;
                for i in (0..sd).rev() {
                    let k = kernel[i] as usize;
                    offs.push((i, (rem % k) as i64 * axes[i].dilation));
                    rem /= k;
                }
                offs.reverse();
                let v = slice(self, xp, &padded_dims, &offs)?;
                // The source index of every output element for this offset.
                let mut idx = Vec::with_capacity(out_count);
                let mut pos = vec![0i64; r];
                for _ in 0..out_count {
                    let plane = pos[0] * i64::from(dims[1]) + pos[1];
                    let spatial: Vec<i64> = (0..sd)
                        .map(|i| pos[i + 2] * axes[i].stride + offs[i].1 - axes[i].pad_begin)
                        .collect();
                    let mut flat = 0i64;
                    if storage == 0 {
                        for i in 0..sd {
                            flat = flat * axes[i].input + spatial[i];
                        }
                    } else {
                        for i in (0..sd).rev() {
                            flat = flat * axes[i].input + spatial[i];
                        }
                    }
                    let total: i64 = axes.iter().map(|a| a.input).product();
                    // Padding positions hold -inf and never win; their index is moot.
                    let inside = (0..sd).all(|i| (0..axes[i].input).contains(&spatial[i]));
                    let value = if inside { plane * total + flat } else { 0 };
                    // Indices travel as float constants (exact below 2^24) and are cast
                    // to int32 at the end: large int32 constants are not weights.
                    if !(0..1 << 24).contains(&value) {
                        return unsupported("MaxPool Indices of 2^24 or more");
                    }
                    idx.push(value as f32);
                    for d in (0..r).rev() {
                        pos[d] += 1;
                        if pos[d] < out_dims[d] {
                            break;
                        }
                        pos[d] = 0;
                    }
                }
                let shape: Vec<u32> = out_dims.iter().map(|&d| d as u32).collect();
                let idx_op = self.model.add_f32_tensor(shape, &idx);
                if w == 0 {
                    best = v;
                    best_idx = idx_op;
                } else {
                    let better = self.emit(n, OperationType::Greater, vec![v, best])?;
                    best = self.emit(n, OperationType::Select, vec![better, v, best])?;
                    best_idx =
                        self.emit(n, OperationType::Select, vec![better, idx_op, best_idx])?;
                }
            }
            let best_idx = self.cast_op(n, best_idx, T::TensorInt32)?;
            self.set_tensor(n, 1, best_idx, nnc_formats::tensor::DataType::I64, false);
            best
        } else {
            let mut cur = xp;
            let mut extents = padded_dims.clone();
            for (i, a) in axes.iter().enumerate() {
                let mut acc = slice(self, cur, &extents, &[(i, 0)])?;
                for j in 1..a.kernel {
                    let s = slice(self, cur, &extents, &[(i, j * a.dilation)])?;
                    acc = if max {
                        self.emit(n, combine, vec![acc, s])?
                    } else {
                        self.arith(n, combine, acc, s)?
                    };
                }
                cur = acc;
                extents[i + 2] = a.output;
            }
            cur
        };
        if reduce != Reduce::Average {
            return Ok(y);
        }
        // Per axis, how many window elements ONNX counts at each output position;
        // the divisor is their product (the counted region is a box).
        let counts: Vec<Vec<f64>> = axes
            .iter()
            .map(|a| {
                // With count_include_pad ONNX's reference divides by the whole
                // window, the ceil-mode overhang included.
                let (lo, hi) = if include_pad {
                    (i64::MIN, i64::MAX)
                } else {
                    (a.pad_begin, a.pad_begin + a.input)
                };
                (0..a.output)
                    .map(|o| {
                        (0..a.kernel)
                            .filter(|&j| {
                                let p = o * a.stride + j * a.dilation;
                                p >= lo && p < hi
                            })
                            .count() as f64
                    })
                    .collect()
            })
            .collect();
        let mut shape = vec![1u32, 1];
        shape.extend(axes.iter().map(|a| a.output as u32));
        let total: usize = axes.iter().map(|a| a.output as usize).product();
        let mut div = Vec::with_capacity(total);
        let mut pos = vec![0usize; sd];
        for _ in 0..total {
            let c: f64 = (0..sd).map(|i| counts[i][pos[i]]).product();
            div.push(c.max(1.0) as f32);
            for d in (0..sd).rev() {
                pos[d] += 1;
                if pos[d] < counts[d].len() {
                    break;
                }
                pos[d] = 0;
            }
        }
        let d = self.model.add_f32_tensor(shape, &div);
        self.arith(n, OperationType::Div, y, d)
    }

    pub(super) fn pool(&mut self, n: &Node) -> NResult<()> {
        let max = n.op() == "MaxPool";
        let kernel_attr = n.attrs.ints("kernel_shape")?;
        let dilated = n
            .attrs
            .ints("dilations")?
            .is_some_and(|d| d.iter().any(|&v| v != 1));
        if let Some(k) = &kernel_attr
            && (k.len() > 2 || dilated || (max && self.output_used(n, 1)))
        {
            let x = self.tensor(n, 0)?;
            self.require_float(n, x)?;
            if max && k.len() == 3 && !dilated && !self.output_used(n, 1) {
                let y = self.max_pool_3d(n, &k.clone(), x)?;
                self.set_tensor(n, 0, y, x.dtype, false);
                return Ok(());
            }
            let reduce = if max { Reduce::Max } else { Reduce::Average };
            let y = self.pool_by_slices(n, reduce, &k.clone(), x)?;
            self.set_tensor(n, 0, y, x.dtype, false);
            return Ok(());
        }
        let x = self.tensor(n, 0)?;
        // MAX_POOL_2D on 8-bit operands compares the stored integers: exact.
        if !(max && super::is_quant8(self.operand_type(x))) {
            self.require_float(n, x)?;
        }
        let rank = self.rank(x);
        let kernel = n
            .attrs
            .ints("kernel_shape")?
            .ok_or_else(|| super::NodeError::Invalid("kernel_shape is required".into()))?;
        if kernel.len() + 2 != rank {
            return unsupported(format!(
                "{}-D pooling of a rank-{rank} input is not supported",
                kernel.len()
            ));
        }
        let dims = self.dims(x);
        let sp = read_spatial(n, &kernel, &dims[2..], max)?;
        if sp.dilations != [1, 1] {
            return unsupported("dilated MaxPool is not supported");
        }
        let ceil_mode = n.attrs.int_or("ceil_mode", 0)? != 0;
        let count_include_pad = !max && n.attrs.int_or("count_include_pad", 0)? != 0;
        let (x4, d4) = self.as_4d(n, x)?;
        let [mut top, mut left, mut bottom, mut right] = sp.pads;
        let mut xh = self.to_nhwc(n, x4)?;
        // The ceil-mode overhang is computed from the original padding, before any
        // explicit zero padding for count_include_pad replaces it.
        let (mut extra_h, mut extra_w) = (0, 0);
        if ceil_mode {
            // Extra end padding turns the NN set's floor division into a ceiling; NN pools
            // ignore padded elements, as ONNX does for the ceil-mode overhang.
            let (h, w) = (d4[2], d4[3]);
            if h == 0 || w == 0 {
                return needs_input_shape(
                    "ceil_mode needs the spatial size at compile time; use --input-shape",
                );
            }
            let extra = |input: u32, k: u32, s: u32, a: u32, b: u32| -> u32 {
                let span = i64::from(input) + i64::from(a) + i64::from(b) - i64::from(k);
                if span < 0 {
                    return 0;
                }
                let floor_out = span / i64::from(s) + 1;
                let mut ceil_out = (span + i64::from(s) - 1) / i64::from(s) + 1;
                // The last window must start inside the input or its begin padding.
                if (ceil_out - 1) * i64::from(s) >= i64::from(input) + i64::from(a) {
                    ceil_out -= 1;
                }
                if ceil_out > floor_out { s - 1 } else { 0 }
            };
            extra_h = extra(h, sp.kernel[0], sp.strides[0], top, bottom);
            extra_w = extra(w, sp.kernel[1], sp.strides[1], left, right);
        }
        if count_include_pad && sp.pads.iter().any(|&p| p > 0) {
            // NN pools never count padding; padding with explicit zeros first does.
            let paddings = self.i32_vector(&[
                0,
                0,
                top as i32,
                bottom as i32,
                left as i32,
                right as i32,
                0,
                0,
            ]);
            xh = self.pad_op(n, xh, paddings, PadFill::Zeros)?;
            (top, left, bottom, right) = (0, 0, 0, 0);
        }
        let op = if max {
            OperationType::MaxPool2d
        } else {
            OperationType::AveragePool2d
        };
        let pool = Pool2d {
            padding: WindowPadding::Explicit {
                left,
                right: right + extra_w,
                top,
                bottom: bottom + extra_h,
            },
            stride: sp.stride(),
            filter: sp.kernel(),
            activation: FusedActivation::None,
            nchw: false,
        };
        let mut inputs = vec![xh];
        inputs.extend(pool.encode(&mut self.model));
        let yh = self.emit(n, op, inputs)?;
        let y4 = self.to_nchw(n, yh)?;
        let y = self.back_from_4d(n, y4, rank)?;
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }

    /// MaxPool over three spatial axes on the NN set's 2-D pool, as 3-D convolutions
    /// run (`conv/volume.rs`): in NDHWC with the depth folded into the batch, one
    /// MAX_POOL_2D pools height and width, then the maximum of the `kD` depth-shifted
    /// views (strided slices of the depth, padded with -inf) pools the depth. Staying
    /// in NDHWC lets the transposes around it cancel against a neighbouring 3-D
    /// convolution's, which the slice-based N-D pool (NCDHW) does not.
    fn max_pool_3d(&mut self, n: &Node, kernel: &[i64], x: TensorValue) -> NResult<u32> {
        let dims = self.known_dims(x)?;
        if dims.len() != 5 {
            return super::invalid(format!("3-D pooling of a rank-{} input", dims.len()));
        }
        let axes = pool_axes(n, kernel, &dims[2..])?;
        let [batch, channels, _, height, width] = [0, 1, 2, 3, 4].map(|i| dims[i]);
        // What each axis's windows read: the begin padding, and at the end whatever the
        // last window needs (ceil_mode's overhang included), at least the end padding.
        let end_pad = |a: &Axis| {
            let needed = (a.output - 1) * a.stride + a.kernel;
            (needed - a.input - a.pad_begin).max(a.pad_end)
        };
        let narrow = |v: i64| u32::try_from(v).ok().filter(|&v| v <= i32::MAX as u32);
        let (d, h, w) = (&axes[0], &axes[1], &axes[2]);
        let (Some(front), Some(back), Some(padded_depth), Some(rows)) = (
            narrow(d.pad_begin),
            narrow(end_pad(d)),
            narrow(d.input + d.pad_begin + end_pad(d)),
            narrow(i64::from(batch) * (d.input + d.pad_begin + end_pad(d))),
        ) else {
            return super::invalid("the pooled extent is out of range");
        };
        let mut xt = self.transpose_op(n, x.operand, &[0, 2, 3, 4, 1])?;
        if front > 0 || back > 0 {
            let p = self.i32_vector(&[0, 0, front as i32, back as i32, 0, 0, 0, 0, 0, 0]);
            let fill = PadFill::Value(PadValue::Float(f32::NEG_INFINITY));
            xt = self.pad_op(n, xt, p, fill)?;
        }
        let planes = self.reshape_to(n, xt, &[rows, height, width, channels])?;
        let (out_h, out_w) = (h.output as u32, w.output as u32);
        let pool = Pool2d {
            padding: WindowPadding::Explicit {
                left: w.pad_begin as u32,
                right: end_pad(w) as u32,
                top: h.pad_begin as u32,
                bottom: end_pad(h) as u32,
            },
            stride: Hw {
                h: h.stride as u32,
                w: w.stride as u32,
            },
            filter: Hw {
                h: h.kernel as u32,
                w: w.kernel as u32,
            },
            activation: FusedActivation::None,
            nchw: false,
        };
        let mut inputs = vec![planes];
        inputs.extend(pool.encode(&mut self.model));
        let pooled = self.emit(n, OperationType::MaxPool2d, inputs)?;
        let pooled = self.reshape_to(n, pooled, &[batch, padded_depth, out_h, out_w, channels])?;
        let out_depth = d.output as u32;
        let y = if d.kernel == 1 && d.stride == 1 && out_depth == padded_depth {
            pooled
        } else {
            let mut y: Option<u32> = None;
            for k in 0..d.kernel {
                let first = k as i32;
                let last = first + ((d.output - 1) * d.stride) as i32;
                let end = [batch, last as u32 + 1, out_h, out_w, channels].map(|v| v as i32);
                let slice = StridedSlice {
                    begin: self.i32_vector(&[0, first, 0, 0, 0]),
                    end: self.i32_vector(&end),
                    strides: self.i32_vector(&[1, d.stride as i32, 1, 1, 1]),
                    begin_mask: 0,
                    end_mask: 0,
                    shrink_axis_mask: 0,
                };
                let view = self.strided_slice_op(n, pooled, &slice)?;
                y = Some(match y {
                    None => view,
                    Some(m) => self.emit(n, OperationType::Maximum, vec![m, view])?,
                });
            }
            y.ok_or_else(|| super::NodeError::Invalid("a window of no depth".into()))?
        };
        self.transpose_op(n, y, &[0, 4, 1, 2, 3])
    }

    pub(super) fn global_pool(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let rank = self.rank(x);
        if rank < 3 {
            return Err(super::NodeError::Invalid(format!(
                "{} needs an input of rank >= 3",
                n.op()
            )));
        }
        let axes: Vec<i32> = (2..rank as i32).collect();
        let axes = self.i32_vector(&axes);
        let op = if n.op() == "GlobalAveragePool" {
            OperationType::Mean
        } else {
            OperationType::ReduceMax
        };
        let y = self.reduce_op(n, op, x.operand, axes, true)?;
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }

    /// The exponent of an LpPool or GlobalLpPool (an INT since opset 2, a FLOAT before).
    fn lp_exponent(n: &Node) -> NResult<f32> {
        let p = n.attrs.float_or("p", 2.0)?;
        if !(p.is_finite() && p > 0.0) {
            return super::invalid(format!("{} needs a positive p, not {p}", n.op()));
        }
        Ok(p)
    }

    /// |x|^p elementwise: MUL for p = 2 (no sign to drop), ABS alone for p = 1.
    fn lp_power(&mut self, n: &Node, x: TensorValue, p: f32) -> NResult<TensorValue> {
        let operand = if p == 2.0 {
            self.arith(n, OperationType::Mul, x.operand, x.operand)?
        } else {
            let a = self.emit(n, OperationType::Abs, vec![x.operand])?;
            if p == 1.0 {
                a
            } else {
                let e = self.model.add_f32_tensor(vec![1], &[p]);
                self.emit(n, OperationType::Pow, vec![a, e])?
            }
        };
        Ok(TensorValue { operand, ..x })
    }

    /// s^(1/p) of the window sums: SQRT for p = 2, nothing for p = 1.
    fn lp_root(&mut self, n: &Node, s: u32, p: f32) -> NResult<u32> {
        if p == 1.0 {
            Ok(s)
        } else if p == 2.0 {
            self.emit(n, OperationType::Sqrt, vec![s])
        } else {
            let e = self.model.add_f32_tensor(vec![1], &[1.0 / p]);
            self.emit(n, OperationType::Pow, vec![s, e])
        }
    }

    /// LpPool: (sum over the window of |x|^p)^(1/p). The sum is the slice-based pool's
    /// (any rank, padding, dilation and ceil_mode): padded positions hold zeros, which
    /// add nothing, as in ONNX.
    pub(super) fn lp_pool(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let p = Self::lp_exponent(n)?;
        let kernel = n
            .attrs
            .ints("kernel_shape")?
            .ok_or_else(|| super::NodeError::Invalid("kernel_shape is required".into()))?;
        let powered = self.lp_power(n, x, p)?;
        let s = self.pool_by_slices(n, Reduce::Sum, &kernel, powered)?;
        let y = self.lp_root(n, s, p)?;
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }

    /// GlobalLpPool: the Lp norm over all spatial axes, kept as extent-1 axes.
    pub(super) fn global_lp_pool(&mut self, n: &Node) -> NResult<()> {
        let x = self.tensor(n, 0)?;
        self.require_float(n, x)?;
        let rank = self.rank(x);
        if rank < 3 {
            return super::invalid("GlobalLpPool needs an input of rank >= 3");
        }
        let p = Self::lp_exponent(n)?;
        let powered = self.lp_power(n, x, p)?;
        let axes: Vec<i32> = (2..rank as i32).collect();
        let axes = self.i32_vector(&axes);
        let s = self.reduce_op(n, OperationType::ReduceSum, powered.operand, axes, true)?;
        let y = self.lp_root(n, s, p)?;
        self.set_tensor(n, 0, y, x.dtype, false);
        Ok(())
    }
}
