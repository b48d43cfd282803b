//! Conv over three spatial axes (video and volumetric models: torchvision's R3D, MC3,
//! R(2+1)D, S3D, MViT) on the NN set's 2-D convolutions.
//!
//! The NN set has no 3-D convolution. Each output depth slice is a 2-D convolution of
//! the `kD` input depth slices its window covers, so the input is re-laid-out as NDHWC
//! and each tap `k` is a depth-shifted view (STRIDED_SLICE from `k·dD`, stride `sD`)
//! with the depth folded into the batch, `[N·D_out, H, W, C]`:
//! - ungrouped: the `kD` views are concatenated along the channels and one CONV_2D with
//!   the filter re-laid-out as `[M, kH, kW, kD·C]` computes the whole product as one
//!   matrix multiply of depth `kD·kH·kW·C`, exactly the 3-D convolution's sums. The
//!   price is the concatenated input, `kD` times the input (part of the im2col a 3-D
//!   kernel would build anyway). Why not `kD` convolutions summed: `kD` smaller
//!   products and `kD - 1` additions over the output run slower than one product of
//!   the full depth, and take as much memory.
//! - along the depth alone (kernel `kD x 1 x 1`): the height and width flatten into one
//!   axis and the depth is the height of one 2-D convolution of kernel `kD x 1`.
//! - grouped and depthwise: a group's channels would interleave with the taps in one
//!   deep product, so each tap is its own GROUPED_CONV_2D or DEPTHWISE_CONV_2D over its
//!   view and the `kD` results add up (these are memory-bound; the additions cost
//!   about what the concatenation would).

use nnc_formats::nn::ops::{
    Conv2d, ConvKind, Hw, PadFill, StridedSlice, TransposeConv2d, TransposePadding, WindowPadding,
};
use nnc_formats::nn::{FusedActivation, OperationType};
use nnc_formats::tensor::DataType;

use super::super::{
    Lowerer, NResult, Node, NodeError, TensorValue, needs_input_shape, unsupported,
};
use super::{Filter, Window, conv_kind, read_window};

/// The depth geometry of a 3-D convolution and the NDHWC input its views read.
struct Depth {
    /// The transposed (and depth-padded) input, `[N, D', H, W, C]`.
    input: u32,
    dims: [u32; 5],
    out_depth: u32,
    stride: i64,
    dilation: i64,
}

impl Lowerer<'_> {
    /// Conv of a 5-D input `[N, C, D, H, W]` with weights `[M, C/group, kD, kH, kW]` and
    /// `bias` (values, or a run-time operand); returns the output operand.
    pub(super) fn conv_3d(
        &mut self,
        n: &Node,
        x: TensorValue,
        w: &Filter,
        w_shape: &[usize],
        bias: Result<Vec<f32>, u32>,
    ) -> NResult<u32> {
        let dims = self.dims(x);
        if dims.contains(&0) {
            return needs_input_shape(
                "a 3-D convolution needs its input's shape at compile time; use --input-shape",
            );
        }
        let [batch, channels, depth, height, width] = [0, 1, 2, 3, 4].map(|i| dims[i]);
        let group = n.attrs.int_or("group", 1)?;
        let (m, cg) = (w_shape[0], w_shape[1]);
        if group < 1 || m as i64 % group != 0 || cg as i64 * group != i64::from(channels) {
            return Err(NodeError::Invalid(format!(
                "input has {channels} channels but the weights expect {cg} x group {group}"
            )));
        }
        let group = group as usize;
        let kernel: Vec<i64> = w_shape[2..].iter().map(|&d| d as i64).collect();
        if let Some(ks) = n.attrs.ints("kernel_shape")?
            && ks != kernel
        {
            return Err(NodeError::Invalid(format!(
                "kernel_shape {ks:?} disagrees with the weights' {kernel:?}"
            )));
        }
        let Window {
            strides,
            dilations,
            pads,
        } = read_window(n, &kernel, &dims[2..], true)?;
        let (kd, sd, dd) = (kernel[0], strides[0], dilations[0]);
        let (front, back) = (pads[0], pads[3]);
        let padded_depth = i64::from(depth) + front + back;
        let span = (kd - 1) * dd + 1;
        if padded_depth < span {
            return Err(NodeError::Invalid(format!(
                "the depth window ({span}) exceeds the padded depth ({padded_depth})"
            )));
        }
        let in_range = |v: i64| u32::try_from(v).ok().filter(|&v| v <= i32::MAX as u32);
        let (Some(out_depth), Some(padded_depth), Some(rows), Some(deep)) = (
            in_range((padded_depth - span) / sd + 1),
            in_range(padded_depth),
            in_range(i64::from(batch) * ((padded_depth - span) / sd + 1)),
            in_range(kd * i64::from(channels)),
        ) else {
            return Err(NodeError::Invalid(
                "the convolution's extent is out of range".into(),
            ));
        };
        let bias = match bias {
            Ok(values) => self.model.add_f32_tensor(vec![m as u32], &values),
            Err(operand) => operand,
        };

        let (kh, kw) = (w_shape[3], w_shape[4]);
        // Height and width untouched: no window, stride or padding there.
        let depth_only = kh == 1
            && kw == 1
            && strides[1..] == [1, 1]
            && [pads[1], pads[2], pads[4], pads[5]] == [0; 4];
        if depth_only {
            return self
                .conv_depth_only(n, x, w, w_shape, group, &strides, &dilations, &pads, bias);
        }
        // Depth padding here (zeros), after the transpose so that a transpose back from
        // a previous 3-D convolution meets this one and both go; height and width
        // padding in the 2-D convolutions.
        let mut input = self.transpose_op(n, x.operand, &[0, 2, 3, 4, 1])?;
        if front > 0 || back > 0 {
            let p = self.i32_vector(&[0, 0, front as i32, back as i32, 0, 0, 0, 0, 0, 0]);
            input = self.pad_op(n, input, p, PadFill::Zeros)?;
        }
        let geometry = Depth {
            input,
            dims: [batch, padded_depth, height, width, channels],
            out_depth,
            stride: sd,
            dilation: dd,
        };
        let hw_dilation = [dilations[1] as u32, dilations[2] as u32];
        let window = Conv2d {
            kind: ConvKind::Plain,
            padding: WindowPadding::Explicit {
                left: pads[2] as u32,
                right: pads[5] as u32,
                top: pads[1] as u32,
                bottom: pads[4] as u32,
            },
            stride: Hw {
                h: strides[1] as u32,
                w: strides[2] as u32,
            },
            dilation: Hw {
                h: hw_dilation[0],
                w: hw_dilation[1],
            },
            activation: FusedActivation::None,
            nchw: false,
        };
        let y4 = if group == 1 {
            // The views side by side along the channels, tap-major.
            let stacked = if kd == 1 && sd == 1 && out_depth == padded_depth {
                input
            } else {
                let mut views: Vec<u32> = (0..kd)
                    .map(|k| self.depth_view(n, &geometry, k))
                    .collect::<NResult<_>>()?;
                if views.len() == 1 {
                    views[0]
                } else {
                    views.push(self.i32_const(4));
                    self.emit(n, OperationType::Concatenation, views)?
                }
            };
            let x4 = self.reshape_to(n, stacked, &[rows, height, width, deep])?;
            // [M, C, kD, kH, kW] -> [M, kH, kW, kD, C] -> [M, kH, kW, kD·C].
            let filter = self.filter_operand(
                n,
                w,
                &[m, cg, kd as usize, kh, kw],
                &[0, 3, 4, 2, 1],
                &[m as u32, kh as u32, kw as u32, deep],
            )?;
            let mut inputs = vec![x4, filter, bias];
            inputs.extend(window.encode(&mut self.model));
            self.emit(n, window.op_type(), inputs)?
        } else {
            let (kind, perm) = conv_kind(group, channels as usize, cg, m, hw_dilation)?;
            let conv = Conv2d { kind, ..window };
            let shape4 = [m, cg, kh, kw];
            let permuted = perm.map(|p| shape4[p] as u32);
            let zeros = self.model.add_f32_tensor(vec![m as u32], &vec![0.0; m]);
            let mut sum: Option<u32> = None;
            for k in 0..kd {
                let tap = self.filter_slice(n, w, w_shape, 2, k as usize, 1)?;
                let filter = self.filter_operand(n, &tap, &shape4, &perm, &permuted)?;
                let view = self.depth_view(n, &geometry, k)?;
                let x4 = self.reshape_to(n, view, &[rows, height, width, channels])?;
                let mut inputs = vec![x4, filter, if k == 0 { bias } else { zeros }];
                inputs.extend(conv.encode(&mut self.model));
                let y = self.emit(n, conv.op_type(), inputs)?;
                sum = Some(match sum {
                    None => y,
                    Some(s) => self.arith(n, OperationType::Add, s, y)?,
                });
            }
            sum.ok_or_else(|| NodeError::Invalid("a 3-D window of no depth".into()))?
        };
        let y4_dims = self.model.main.operands[y4 as usize].dimensions.clone();
        let (out_h, out_w) = (y4_dims[1], y4_dims[2]);
        let y5 = self.reshape_to(n, y4, &[batch, out_depth, out_h, out_w, m as u32])?;
        self.transpose_op(n, y5, &[0, 4, 1, 2, 3])
    }

    /// A convolution along the depth alone (kernel `kD x 1 x 1`, as R(2+1)D's and S3D's
    /// temporal halves): with height and width flattened, `[N, D, H·W, C]`, it is a 2-D
    /// convolution of kernel `kD x 1`, the depth its height; no views, and the depth
    /// padding is the 2-D convolution's.
    #[allow(clippy::too_many_arguments)]
    fn conv_depth_only(
        &mut self,
        n: &Node,
        x: TensorValue,
        w: &Filter,
        w_shape: &[usize],
        group: usize,
        strides: &[i64],
        dilations: &[i64],
        pads: &[i64],
        bias: u32,
    ) -> NResult<u32> {
        let [batch, channels, depth, height, width] = {
            let d = self.dims(x);
            [d[0], d[1], d[2], d[3], d[4]]
        };
        let (m, cg, kd) = (w_shape[0], w_shape[1], w_shape[2]);
        let Some(plane) = height.checked_mul(width) else {
            return Err(NodeError::Invalid(
                "the input's extent is out of range".into(),
            ));
        };
        let xt = self.transpose_op(n, x.operand, &[0, 2, 3, 4, 1])?;
        let x4 = self.reshape_to(n, xt, &[batch, depth, plane, channels])?;
        let (kind, perm) = conv_kind(group, channels as usize, cg, m, [dilations[0] as u32, 1])?;
        let shape4 = [m, cg, kd, 1];
        let permuted = perm.map(|p| shape4[p] as u32);
        let filter = self.filter_operand(n, w, &shape4, &perm, &permuted)?;
        let conv = Conv2d {
            kind,
            padding: WindowPadding::Explicit {
                left: 0,
                right: 0,
                top: pads[0] as u32,
                bottom: pads[3] as u32,
            },
            stride: Hw {
                h: strides[0] as u32,
                w: 1,
            },
            dilation: Hw {
                h: dilations[0] as u32,
                w: 1,
            },
            activation: FusedActivation::None,
            nchw: false,
        };
        let mut inputs = vec![x4, filter, bias];
        inputs.extend(conv.encode(&mut self.model));
        let y4 = self.emit(n, conv.op_type(), inputs)?;
        let out_depth = self.model.main.operands[y4 as usize].dimensions[1];
        let y5 = self.reshape_to(n, y4, &[batch, out_depth, height, width, m as u32])?;
        self.transpose_op(n, y5, &[0, 4, 1, 2, 3])
    }

    /// Tap `k`'s view of the depth: slices `k·dD, k·dD + sD, ...`, `D_out` of them.
    fn depth_view(&mut self, n: &Node, g: &Depth, k: i64) -> NResult<u32> {
        let first = (k * g.dilation) as i32;
        let last = first + ((i64::from(g.out_depth) - 1) * g.stride) as i32;
        let [batch, _, height, width, channels] = g.dims;
        let end = [batch, last as u32 + 1, height, width, channels].map(|v| v as i32);
        let slice = StridedSlice {
            begin: self.i32_vector(&[0, first, 0, 0, 0]),
            end: self.i32_vector(&end),
            strides: self.i32_vector(&[1, g.stride as i32, 1, 1, 1]),
            begin_mask: 0,
            end_mask: 0,
            shrink_axis_mask: 0,
        };
        self.strided_slice_op(n, g.input, &slice)
    }
}

impl Lowerer<'_> {
    /// ConvTranspose of a 5-D input `[N, C, D, H, W]` with (already dilated) weights
    /// `[C, M, kD, kH, kW]`: per depth tap `k`, one TRANSPOSE_CONV_2D of every input depth
    /// slice (the depth in the batch) with the tap's `[C, M, kH, kW]` filter gives what
    /// input slice `d` adds at output depth `d·sD + k`; the slices are spread `sD` apart
    /// (zeros between, PAD on a unit axis), shifted by `k` (PAD), and the `kD` results
    /// add up into the full result, which is then cropped by the pads (or padded with
    /// zeros where the output is larger) and biased.
    pub(super) fn conv_transpose_3d(
        &mut self,
        n: &Node,
        x: TensorValue,
        w: &Filter,
        w_shape: &[usize],
        group: usize,
    ) -> NResult<()> {
        if group != 1 {
            return unsupported(format!(
                "grouped 3-D ConvTranspose (group {group}) is not supported"
            ));
        }
        let dims = self.known_dims(x)?;
        let [batch, channels, depth, height, width] = [0, 1, 2, 3, 4].map(|i| dims[i]);
        let (c, m) = (w_shape[0], w_shape[1]);
        if c != channels as usize {
            return Err(NodeError::Invalid(format!(
                "input has {channels} channels, weights expect {c}"
            )));
        }
        let kernel: Vec<i64> = w_shape[2..].iter().map(|&d| d as i64).collect();
        let window = super::transpose_window(n, &kernel, &dims[2..])?;
        let (sd, sh, sw) = (window.strides[0], window.strides[1], window.strides[2]);
        // The full result's extents: s·(in - 1) + k per axis.
        let full: Vec<i64> = (0..3)
            .map(|i| window.strides[i] * (i64::from(dims[2 + i]) - 1) + kernel[i])
            .collect();
        let in_range = |v: i64| u32::try_from(v).ok().filter(|&v| v <= i32::MAX as u32);
        let sizes: Option<Vec<u32>> = full
            .iter()
            .chain(&window.out)
            .chain(&[i64::from(batch) * i64::from(depth)])
            .map(|&v| in_range(v))
            .collect();
        let Some(sizes) = sizes else {
            return Err(NodeError::Invalid(
                "the transposed convolution's extent is out of range".into(),
            ));
        };
        let [full_d, full_h, full_w] = [sizes[0], sizes[1], sizes[2]];
        let planes = sizes[6];
        let xt = self.transpose_op(n, x.operand, &[0, 2, 3, 4, 1])?;
        let x4 = self.reshape_to(n, xt, &[planes, height, width, channels])?;
        let per_tap = TransposeConv2d {
            padding: TransposePadding::Explicit {
                left: 0,
                right: 0,
                top: 0,
                bottom: 0,
            },
            stride: Hw {
                h: sh as u32,
                w: sw as u32,
            },
            activation: FusedActivation::None,
            nchw: false,
        };
        let (kd, kh, kw) = (w_shape[2], w_shape[3], w_shape[4]);
        let zeros = self.model.add_f32_tensor(vec![m as u32], &vec![0.0; m]);
        // One output depth slice's values, flattened.
        let Some(slab) = full_h
            .checked_mul(full_w)
            .and_then(|v| v.checked_mul(m as u32))
        else {
            return Err(NodeError::Invalid(
                "the transposed convolution's extent is out of range".into(),
            ));
        };
        let spread = (i64::from(depth) - 1) * sd + 1;
        let mut sum: Option<u32> = None;
        for k in 0..kd {
            let tap = self.filter_slice(n, w, w_shape, 2, k, 1)?;
            let shape4 = [c, m, kh, kw];
            let perm = [1, 2, 3, 0];
            let permuted = perm.map(|p| shape4[p] as u32);
            let filter = self.filter_operand(n, &tap, &shape4, &perm, &permuted)?;
            let mut inputs = vec![x4, filter, zeros];
            inputs.extend(per_tap.encode(&mut self.model, None));
            let z = self.emit(n, OperationType::TransposeConv2d, inputs)?;
            // [N·D, Fh, Fw, M] -> [N, D, 1, Fh·Fw·M] -> spread sD apart -> [N, D·sD, ...]
            // -> the first (D - 1)·sD + 1 slices -> shifted by k into the full depth.
            let mut z = self.reshape_to(n, z, &[batch, depth, 1, slab])?;
            if sd > 1 {
                let p = self.i32_vector(&[0, 0, 0, 0, 0, sd as i32 - 1, 0, 0]);
                z = self.pad_op(n, z, p, PadFill::Zeros)?;
                let spaced = depth * sd as u32;
                z = self.reshape_to(n, z, &[batch, spaced, slab])?;
                let slice = StridedSlice {
                    begin: self.i32_vector(&[0, 0, 0]),
                    end: self.i32_vector(&[batch as i32, spread as i32, slab as i32]),
                    strides: self.i32_vector(&[1, 1, 1]),
                    begin_mask: 0,
                    end_mask: 0,
                    shrink_axis_mask: 0,
                };
                z = self.strided_slice_op(n, z, &slice)?;
            } else {
                z = self.reshape_to(n, z, &[batch, depth, slab])?;
            }
            let after = i64::from(full_d) - spread - k as i64;
            if k > 0 || after > 0 {
                let p = self.i32_vector(&[0, 0, k as i32, after as i32, 0, 0]);
                z = self.pad_op(n, z, p, PadFill::Zeros)?;
            }
            sum = Some(match sum {
                None => z,
                Some(s) => self.arith(n, OperationType::Add, s, z)?,
            });
        }
        let sum = sum.ok_or_else(|| NodeError::Invalid("a kernel of no depth".into()))?;
        let mut y = self.reshape_to(n, sum, &[batch, full_d, full_h, full_w, m as u32])?;
        // Output position o is full position o + pad_begin; beyond the full result (the
        // output padding, negative pads) are zeros.
        let mut extra = vec![0i32; 10];
        let mut begin = vec![0i32; 5];
        let mut end = vec![batch as i32, 0, 0, 0, m as i32];
        for i in 0..3 {
            let (pad_begin, out) = (window.pads[i], window.out[i]);
            let before = (-pad_begin).max(0);
            let beyond = (out + pad_begin - full[i]).max(0);
            extra[2 * (i + 1)] = before as i32;
            extra[2 * (i + 1) + 1] = beyond as i32;
            begin[i + 1] = (pad_begin + before) as i32;
            end[i + 1] = (pad_begin + before + out) as i32;
        }
        if extra.iter().any(|&e| e > 0) {
            let p = self.i32_vector(&extra);
            y = self.pad_op(n, y, p, PadFill::Zeros)?;
        }
        let cropped =
            begin[1..4] != [0, 0, 0] || end[1..4] != [full_d as i32, full_h as i32, full_w as i32];
        if cropped || extra.iter().any(|&e| e > 0) {
            let slice = StridedSlice {
                begin: self.i32_vector(&begin),
                end: self.i32_vector(&end),
                strides: self.i32_vector(&[1; 5]),
                begin_mask: 0,
                end_mask: 0,
                shrink_axis_mask: 0,
            };
            y = self.strided_slice_op(n, y, &slice)?;
        }
        let bias = match self.bias_input(n, m)? {
            Ok(values) => self.model.add_f32_tensor(vec![m as u32], &values),
            Err(operand) => operand,
        };
        y = self.arith(n, OperationType::Add, y, bias)?;
        let y = self.transpose_op(n, y, &[0, 4, 1, 2, 3])?;
        self.set_tensor(n, 0, y, DataType::F32, false);
        Ok(())
    }
}
