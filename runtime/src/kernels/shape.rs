//! Data movement: RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE, CONCATENATION, SPLIT, SLICE,
//! STRIDED_SLICE, PAD, PAD_V2, MIRROR_PAD, GATHER, TILE, PACK, REVERSE, DEPTH_TO_SPACE,
//! SPACE_TO_DEPTH and CHANNEL_SHUFFLE.
//!
//! Every kernel moves whole elements and is written once, generically over the element
//! width (u8 / u16 / u32), so it serves float32, int32 and bool8 alike; quantized types
//! need only their build-time checks (and PAD's zero point) to join.
//!
//! Conventions: DEPTH_TO_SPACE / SPACE_TO_DEPTH follow TFLite's NHWC layout,
//! `out[b, h*bs + i, w*bs + j, c] = in[b, h, w, (i*bs + j) * C_out + c]`; MIRROR_PAD mode 0
//! (REFLECT) excludes the edge element, mode 1 (SYMMETRIC) repeats it; GATHER rejects an
//! index outside `[0, dim)` at run time with an error.

use bytemuck::Pod;
use nnc_formats::nn::OperandType;
use nnc_formats::nn::ops::{Pad, PadFill, PadValue, StridedSlice, strided_slice_range};

use super::util::{axis, for_each_chunk, rank4, split_at_axis, strides_of, with_nhwc};
use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};
use crate::tensor::{TensorMut, TensorRef};

#[derive(Clone, Debug, PartialEq)]
enum ShapeOp {
    Copy,
    Transpose(Option<Vec<i32>>),
    Concat {
        axis: i32,
    },
    Split {
        axis: i32,
    },
    Slice,
    StridedSlice(StridedSlice),
    /// Constant padding with the element's bit pattern (u32 for 4-byte elements).
    Pad {
        value: u32,
    },
    MirrorPad {
        symmetric: bool,
    },
    Gather {
        axis: i32,
    },
    Tile,
    Pack {
        axis: i32,
    },
    Reverse,
    DepthToSpace {
        block: usize,
        nchw: bool,
    },
    SpaceToDepth {
        block: usize,
        nchw: bool,
    },
    ChannelShuffle {
        groups: usize,
        axis: i32,
    },
}

struct ShapeKernel {
    op: ShapeOp,
    element_size: usize,
}

/// The data movement an operation is, chosen where it is routed here (also by the
/// quantized kernels, which run these on 8-bit data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Movement {
    /// RESHAPE, SQUEEZE and EXPAND_DIMS: the elements as they are, in a new shape.
    Copy,
    Transpose,
    Concatenation,
    Split,
    Slice,
    StridedSlice,
    Pad,
    PadV2,
    MirrorPad,
    Gather,
    Tile,
    Pack,
    Reverse,
    DepthToSpace,
    SpaceToDepth,
    ChannelShuffle,
}

pub(crate) fn build(info: &OpInfo, movement: Movement) -> Result<Box<dyn Kernel>> {
    use Movement as M;
    let data_index = if movement == M::Pack { 1 } else { 0 };
    let t = info.input_type(data_index)?;
    let element_size = match t {
        OperandType::TensorFloat32 | OperandType::TensorInt32 => 4,
        OperandType::TensorBool8 => 1,
        other => return Err(info.unsupported(format!("operand type {other}"))),
    };
    let const_values = |i: usize, what: &str| -> Result<Vec<i32>> {
        info.i32_values(i)?
            .ok_or_else(|| info.invalid(format!("input {i} ({what}) must be a constant")))
    };
    let op = match movement {
        M::Copy => ShapeOp::Copy,
        M::Transpose => ShapeOp::Transpose(if info.present(1) {
            Some(const_values(1, "perm")?)
        } else {
            None
        }),
        M::Concatenation => ShapeOp::Concat {
            axis: info.i32(info.input_count().saturating_sub(1), "axis")?,
        },
        M::Split => ShapeOp::Split {
            axis: info.i32(1, "axis")?,
        },
        M::Slice => ShapeOp::Slice,
        M::StridedSlice => ShapeOp::StridedSlice(
            StridedSlice::decode(info.views()).map_err(|e| info.signature_error(e))?,
        ),
        M::Pad | M::PadV2 | M::MirrorPad => {
            let pad =
                Pad::decode(info.op_type(), info.views()).map_err(|e| info.signature_error(e))?;
            match pad.fill {
                PadFill::Zeros => ShapeOp::Pad { value: 0 },
                PadFill::Value(v) => {
                    // The fill value's bits in the tensor's element type.
                    let value = match (t, v) {
                        (OperandType::TensorInt32, PadValue::Int(v)) => v as u32,
                        (OperandType::TensorFloat32, PadValue::Float(v)) => v.to_bits(),
                        (OperandType::TensorBool8, PadValue::Float(v)) => u32::from(v != 0.0),
                        (OperandType::TensorBool8, PadValue::Int(v)) => u32::from(v != 0),
                        (other, _) => return Err(info.unsupported(format!("operand type {other}"))),
                    };
                    ShapeOp::Pad { value }
                }
                PadFill::Mirror { symmetric } => ShapeOp::MirrorPad { symmetric },
            }
        }
        M::Gather => ShapeOp::Gather {
            axis: info.i32(1, "axis")?,
        },
        M::Tile => ShapeOp::Tile,
        M::Pack => ShapeOp::Pack {
            axis: info.i32(0, "axis")?,
        },
        M::Reverse => ShapeOp::Reverse,
        M::DepthToSpace | M::SpaceToDepth => {
            let block = info.usize(1, "block_size")?;
            if block == 0 {
                return Err(info.invalid("block_size must be >= 1"));
            }
            let nchw = info.optional_bool(2, "layout")?;
            if movement == M::DepthToSpace {
                ShapeOp::DepthToSpace { block, nchw }
            } else {
                ShapeOp::SpaceToDepth { block, nchw }
            }
        }
        M::ChannelShuffle => {
            let groups = info.usize(1, "num_groups")?;
            if groups == 0 {
                return Err(info.invalid("num_groups must be >= 1"));
            }
            ShapeOp::ChannelShuffle {
                groups,
                axis: info.i32(2, "axis")?,
            }
        }
    };
    if matches!(
        op,
        ShapeOp::DepthToSpace { .. }
            | ShapeOp::SpaceToDepth { .. }
            | ShapeOp::ChannelShuffle { .. }
    ) && t != OperandType::TensorFloat32
    {
        return Err(info.unsupported(format!("operand type {t}")));
    }
    Ok(Box::new(ShapeKernel { op, element_size }))
}

/// Bytes of output per task of a parallel concatenation: enough that a task outweighs
/// handing it to another thread.
const CONCAT_TASK_BYTES: usize = 64 << 10;

fn typed<T: Pod>(bytes: &[u8]) -> Result<&[T]> {
    bytemuck::try_cast_slice(bytes)
        .map_err(|e| RuntimeError::kernel(format!("misaligned tensor data: {e:?}")))
}

fn typed_mut<T: Pod>(bytes: &mut [u8]) -> Result<&mut [T]> {
    bytemuck::try_cast_slice_mut(bytes)
        .map_err(|e| RuntimeError::kernel(format!("misaligned tensor data: {e:?}")))
}

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(RuntimeError::kernel(message))
}

fn count(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Calls `f(out_offset, in_offset)` for every innermost row of an `out_dims`-shaped walk
/// where moving one step along dim d moves the input by `in_steps[d]` (signed).
fn walk_rows(
    out_dims: &[usize],
    in_start: isize,
    in_steps: &[isize],
    mut f: impl FnMut(usize, isize),
) {
    let r = out_dims.len();
    if r == 0 {
        f(0, in_start);
        return;
    }
    let inner = out_dims[r - 1];
    let outer: usize = out_dims[..r - 1].iter().product();
    let mut idx = vec![0usize; r - 1];
    let mut off = in_start;
    for o in 0..outer {
        f(o * inner, off);
        for d in (0..r - 1).rev() {
            idx[d] += 1;
            off += in_steps[d];
            if idx[d] < out_dims[d] {
                break;
            }
            off -= in_steps[d] * out_dims[d] as isize;
            idx[d] = 0;
        }
    }
}

/// `out[i...] = x[start + sum(i_d * step_d)]`, after checking that every index stays in
/// bounds along every axis.
fn strided_gather<T: Copy>(
    x: &[T],
    in_shape: &[usize],
    start: &[usize],
    step: &[isize],
    out_dims: &[usize],
    out: &mut [T],
) -> Result<()> {
    let r = in_shape.len();
    if start.len() != r
        || step.len() != r
        || out_dims.len() != r
        || x.len() != count(in_shape)
        || out.len() != count(out_dims)
    {
        return err("slice parameters do not match the input rank");
    }
    for d in 0..r {
        if out_dims[d] == 0 {
            return Ok(());
        }
        let last = start[d] as i128 + (out_dims[d] as i128 - 1) * step[d] as i128;
        if start[d] >= in_shape[d] || last < 0 || last >= in_shape[d] as i128 {
            return err(format!("slice along dimension {d} leaves the input"));
        }
    }
    let st = strides_of(in_shape);
    let in_steps: Vec<isize> = (0..r).map(|d| st[d] as isize * step[d]).collect();
    let base: usize = (0..r).map(|d| start[d] * st[d]).sum();
    let inner = out_dims.last().copied().unwrap_or(1);
    let inner_step = in_steps.last().copied().unwrap_or(1);
    walk_rows(out_dims, base as isize, &in_steps, |o, i| {
        let dst = &mut out[o..o + inner];
        if inner_step == 1 {
            let i = i as usize;
            dst.copy_from_slice(&x[i..i + inner]);
        } else {
            for (k, v) in dst.iter_mut().enumerate() {
                *v = x[(i + k as isize * inner_step) as usize];
            }
        }
    });
    Ok(())
}

impl Kernel for ShapeKernel {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        match self.element_size {
            1 => self.run_typed::<u8>(ctx),
            2 => self.run_typed::<u16>(ctx),
            4 => self.run_typed::<u32>(ctx),
            n => err(format!("element size {n} is not supported")),
        }
    }
}

fn i32s<'a>(t: &TensorRef<'a>) -> Result<&'a [i32]> {
    t.i32()
}

/// Input `i` of `inputs`, which must be present.
fn input<'a>(inputs: &[Option<TensorRef<'a>>], i: usize) -> Result<TensorRef<'a>> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| RuntimeError::kernel(format!("input {i} is missing")))
}

impl ShapeKernel {
    fn run_typed<T: Pod + Copy + Default + Send + Sync + TryFrom<u32>>(
        &self,
        ctx: &mut KernelContext,
    ) -> Result<()> {
        let KernelContext {
            inputs,
            outputs,
            threads,
            ..
        } = ctx;
        let threads = *threads;
        // Operations over several inputs or several outputs.
        match &self.op {
            ShapeOp::Pack { axis: a } => return pack::<T>(*a, inputs, outputs),
            ShapeOp::Concat { axis: a } => return concat::<T>(*a, inputs, outputs, threads),
            ShapeOp::Split { axis: a } => return split::<T>(*a, inputs, outputs),
            _ => {}
        }
        // The others move one input (the data, input 0) into one output.
        let t = input(inputs, 0)?;
        let x = typed::<T>(t.bytes)?;
        let Some(out) = outputs.first_mut() else {
            return err("output is missing");
        };
        let out_shape = out.shape;
        let o = typed_mut::<T>(out.bytes)?;
        if x.len() != t.element_count() || o.len() != count(out_shape) {
            return err("tensor sizes do not match their shapes");
        }
        let m = Move {
            inputs,
            x,
            in_shape: t.shape,
            o,
            out_shape,
        };
        match &self.op {
            ShapeOp::Copy => m.copy(),
            ShapeOp::Transpose(perm) => m.transpose(perm.as_deref()),
            ShapeOp::Slice => m.slice(),
            ShapeOp::StridedSlice(spec) => m.strided_slice(spec),
            ShapeOp::Pad { value } => m.pad(*value),
            ShapeOp::MirrorPad { symmetric } => m.mirror_pad(*symmetric),
            ShapeOp::Gather { axis: a } => m.gather(*a),
            ShapeOp::Tile => m.tile(),
            ShapeOp::Reverse => m.reverse(),
            ShapeOp::DepthToSpace { block, nchw } => m.depth_space(*block, *nchw, true),
            ShapeOp::SpaceToDepth { block, nchw } => m.depth_space(*block, *nchw, false),
            ShapeOp::ChannelShuffle { groups, axis: a } => m.channel_shuffle(*groups, *a),
            ShapeOp::Pack { .. } | ShapeOp::Concat { .. } | ShapeOp::Split { .. } => {
                err("unreachable shape operation")
            }
        }
    }
}

/// PACK: inputs 1.. (of one shape) stacked along a new axis.
fn pack<T: Pod>(a: i32, inputs: &[Option<TensorRef>], outputs: &mut [TensorMut]) -> Result<()> {
    let Some(out) = outputs.first_mut() else {
        return err("output is missing");
    };
    let n = inputs.len().saturating_sub(1);
    let first = input(inputs, 1)?;
    let a = axis(a, first.rank() + 1)?;
    let (outer, _, _) = split_at_axis(first.shape, a);
    let inner: usize = first.shape[a..].iter().product();
    let o = typed_mut::<T>(out.bytes)?;
    if o.len() != outer * n * inner {
        return err("output size does not match the packed inputs");
    }
    for k in 0..n {
        let t = input(inputs, k + 1)?;
        if t.shape != first.shape {
            return err(format!(
                "packed inputs have shapes {:?} and {:?}",
                first.shape, t.shape
            ));
        }
        let x = typed::<T>(t.bytes)?;
        for b in 0..outer {
            o[(b * n + k) * inner..(b * n + k + 1) * inner]
                .copy_from_slice(&x[b * inner..(b + 1) * inner]);
        }
    }
    Ok(())
}

/// CONCATENATION: every input but the last (the axis) joined along the axis.
fn concat<T: Pod + Send + Sync>(
    a: i32,
    inputs: &[Option<TensorRef>],
    outputs: &mut [TensorMut],
    threads: usize,
) -> Result<()> {
    let Some(out) = outputs.first_mut() else {
        return err("output is missing");
    };
    let n = inputs.len().saturating_sub(1);
    let out_shape = out.shape;
    let a = axis(a, out_shape.len())?;
    let (outer, total, inner) = split_at_axis(out_shape, a);
    let o = typed_mut::<T>(out.bytes)?;
    // Each input's slice and its width along the axis (times the inner size).
    let mut parts: Vec<(&[T], usize)> = Vec::with_capacity(n);
    let mut pos = 0;
    for k in 0..n {
        let t = input(inputs, k)?;
        let x = typed::<T>(t.bytes)?;
        let ok = t.rank() == out_shape.len()
            && t.shape
                .iter()
                .zip(out_shape)
                .enumerate()
                .all(|(d, (p, q))| d == a || p == q);
        if !ok {
            return err(format!(
                "input {k} of shape {:?} does not concatenate into {out_shape:?}",
                t.shape
            ));
        }
        let chunk = t.shape[a] * inner;
        if pos + t.shape[a] > total {
            return err("inputs exceed the output along the axis");
        }
        if x.len() != outer * chunk {
            return err(format!("input {k} does not hold its shape's values"));
        }
        parts.push((x, chunk));
        pos += t.shape[a];
    }
    if pos != total {
        return err("inputs do not fill the output along the axis");
    }
    let row = total * inner;
    if o.len() != outer * row {
        return err("output does not hold its shape's values");
    }
    // Output rows (one per outer index) in blocks over the threads, each row
    // written front to back from the inputs in turn (a channel concatenation
    // in NHWC is one short piece per input per pixel).
    let rows_per_task = (CONCAT_TASK_BYTES / (row * size_of::<T>()).max(1)).max(1);
    for_each_chunk(threads, o, rows_per_task * row, |task, block| {
        for (r, dst) in block.chunks_exact_mut(row).enumerate() {
            let b = task * rows_per_task + r;
            let mut at = 0;
            for &(x, w) in &parts {
                dst[at..at + w].copy_from_slice(&x[b * w..(b + 1) * w]);
                at += w;
            }
        }
    });
    Ok(())
}

/// SPLIT: input 0 cut into equal parts along the axis, one per output.
fn split<T: Pod>(a: i32, inputs: &[Option<TensorRef>], outputs: &mut [TensorMut]) -> Result<()> {
    let t = input(inputs, 0)?;
    let x = typed::<T>(t.bytes)?;
    let a = axis(a, t.rank())?;
    let (outer, total, inner) = split_at_axis(t.shape, a);
    let n = outputs.len();
    if n == 0 || total % n != 0 {
        return err(format!(
            "dimension of {total} does not split into {n} parts"
        ));
    }
    let part = total / n;
    for (k, out) in outputs.iter_mut().enumerate() {
        let o = typed_mut::<T>(out.bytes)?;
        if o.len() != outer * part * inner {
            return err(format!("output {k} has the wrong size"));
        }
        for b in 0..outer {
            let src = b * total * inner + k * part * inner;
            o[b * part * inner..(b + 1) * part * inner]
                .copy_from_slice(&x[src..src + part * inner]);
        }
    }
    Ok(())
}

/// One input's elements moved into one output, both checked against their shapes; the
/// other inputs (begin, size, paddings, ...) read as needed.
struct Move<'m, T> {
    inputs: &'m [Option<TensorRef<'m>>],
    x: &'m [T],
    in_shape: &'m [usize],
    o: &'m mut [T],
    out_shape: &'m [usize],
}

impl<'m, T: Pod + Default> Move<'m, T> {
    /// The `i32` values of input `i`.
    fn i32_input(&self, i: usize) -> Result<&'m [i32]> {
        i32s(&input(self.inputs, i)?)
    }

    /// RESHAPE, SQUEEZE, EXPAND_DIMS.
    fn copy(self) -> Result<()> {
        if self.x.len() != self.o.len() {
            return err(format!(
                "cannot reshape {:?} into {:?}",
                self.in_shape, self.out_shape
            ));
        }
        self.o.copy_from_slice(self.x);
        Ok(())
    }

    /// TRANSPOSE by `perm` (reversed dimensions when absent).
    fn transpose(self, perm: Option<&[i32]>) -> Result<()> {
        let (in_shape, out_shape) = (self.in_shape, self.out_shape);
        let r = in_shape.len();
        let perm: Vec<usize> = match perm {
            Some(p) => p
                .iter()
                .map(|&v| usize::try_from(v).unwrap_or(usize::MAX))
                .collect(),
            None => (0..r).rev().collect(),
        };
        let mut seen = vec![false; r];
        if perm.len() != r
            || perm
                .iter()
                .any(|&p| p >= r || std::mem::replace(&mut seen[p], true))
        {
            return err(format!("{perm:?} is not a permutation of rank {r}"));
        }
        let expected: Vec<usize> = perm.iter().map(|&p| in_shape[p]).collect();
        if expected != out_shape {
            return err(format!(
                "output shape {out_shape:?} != transposed {expected:?}"
            ));
        }
        transpose(self.x, in_shape, &perm, self.o);
        Ok(())
    }

    /// SLICE by the run-time `begin` (input 1) and `size` (input 2, -1 = to the end).
    fn slice(self) -> Result<()> {
        let (in_shape, out_shape) = (self.in_shape, self.out_shape);
        let begin = self.i32_input(1)?;
        let size = self.i32_input(2)?;
        let r = in_shape.len();
        if begin.len() != r || size.len() != r || out_shape.len() != r {
            return err("begin and size must hold one value per dimension");
        }
        let mut start = Vec::with_capacity(r);
        for d in 0..r {
            let b = usize::try_from(begin[d])
                .map_err(|_| RuntimeError::kernel(format!("negative begin {}", begin[d])))?;
            let len = if size[d] == -1 {
                in_shape[d].saturating_sub(b)
            } else {
                size[d].max(0) as usize
            };
            if len != out_shape[d] {
                return err(format!(
                    "slice size {len} of dimension {d} != output dimension {}",
                    out_shape[d]
                ));
            }
            start.push(b);
        }
        strided_gather(self.x, in_shape, &start, &vec![1; r], out_shape, self.o)
    }

    /// STRIDED_SLICE, with begin / end / strides read at run time when not constant.
    fn strided_slice(self, spec: &StridedSlice) -> Result<()> {
        let in_shape = self.in_shape;
        let r = in_shape.len();
        let runtime = |v: &Option<Vec<i32>>, i: usize| -> Result<Vec<i32>> {
            match v {
                Some(v) => Ok(v.clone()),
                None => Ok(self.i32_input(i)?.to_vec()),
            }
        };
        let (begin, end, strides) = (
            runtime(&spec.begin, 1)?,
            runtime(&spec.end, 2)?,
            runtime(&spec.strides, 3)?,
        );
        if begin.len() != r || end.len() != r || strides.len() != r {
            return err("begin, end and strides must hold one value per dimension");
        }
        let mut start = Vec::with_capacity(r);
        let mut step = Vec::with_capacity(r);
        let mut dims = Vec::with_capacity(r);
        for d in 0..r {
            let s = strides[d];
            if s == 0 {
                return err("stride 0");
            }
            let bit = |m: i32| d < 32 && m & (1 << d) != 0;
            let dim = u32::try_from(in_shape[d])
                .map_err(|_| RuntimeError::kernel("dimension exceeds u32"))?;
            let shrinks = bit(spec.shrink_axis_mask);
            let (b, e) = strided_slice_range(
                dim,
                begin[d],
                end[d],
                s,
                bit(spec.begin_mask),
                bit(spec.end_mask),
                shrinks,
            );
            if shrinks {
                // One element at `begin`, whatever the stride.
                start.push(
                    usize::try_from(b)
                        .map_err(|_| RuntimeError::kernel("slice begins before the input"))?,
                );
                step.push(1);
                dims.push(1);
                continue;
            }
            let s = i64::from(s);
            let len = if s > 0 {
                ((e - b).max(0) + s - 1) / s
            } else {
                ((b - e).max(0) - s - 1) / -s
            };
            if len <= 0 {
                return err(format!("slice of dimension {d} is empty"));
            }
            start.push(
                usize::try_from(b)
                    .map_err(|_| RuntimeError::kernel("slice begins before the input"))?,
            );
            step.push(s as isize);
            dims.push(len as usize);
        }
        if count(&dims) != self.o.len() {
            return err(format!(
                "output shape {:?} does not match the slice {dims:?}",
                self.out_shape
            ));
        }
        strided_gather(self.x, in_shape, &start, &step, &dims, self.o)
    }

    /// PAD / PAD_V2: the output filled with `value`'s bit pattern, the input copied in.
    fn pad(self, value: u32) -> Result<()>
    where
        T: TryFrom<u32>,
    {
        let (x, in_shape, out_shape) = (self.x, self.in_shape, self.out_shape);
        let pads = self.i32_input(1)?;
        let before = pad_before(pads, in_shape, out_shape)?;
        let fill = T::try_from(value)
            .map_err(|_| RuntimeError::kernel("pad value does not fit the element type"))?;
        let o = self.o;
        o.fill(fill);
        // Copy each input row to its place.
        let ost = strides_of(out_shape);
        let base: usize = before.iter().zip(&ost).map(|(b, s)| b * s).sum();
        let inner = in_shape.last().copied().unwrap_or(1);
        let in_steps: Vec<isize> = ost.iter().map(|&s| s as isize).collect();
        // Walk the input rows, mapping to output offsets.
        walk_rows(in_shape, base as isize, &in_steps, |i, oo| {
            let oo = oo as usize;
            o[oo..oo + inner].copy_from_slice(&x[i..i + inner]);
        });
        Ok(())
    }

    /// MIRROR_PAD, REFLECT (edge excluded) or SYMMETRIC (edge repeated).
    fn mirror_pad(self, symmetric: bool) -> Result<()> {
        let (x, in_shape, out_shape) = (self.x, self.in_shape, self.out_shape);
        let pads = self.i32_input(1)?;
        let before = pad_before(pads, in_shape, out_shape)?;
        let r = in_shape.len();
        // Per axis: the input index of every output index.
        let mut maps: Vec<Vec<usize>> = Vec::with_capacity(r);
        for d in 0..r {
            let n = in_shape[d] as i64;
            let mut m = Vec::with_capacity(out_shape[d]);
            for i in 0..out_shape[d] as i64 {
                let j = i - before[d] as i64;
                let src = if j < 0 {
                    if symmetric { -j - 1 } else { -j }
                } else if j >= n {
                    if symmetric {
                        2 * n - 1 - j
                    } else {
                        2 * n - 2 - j
                    }
                } else {
                    j
                };
                if src < 0 || src >= n {
                    return err(format!(
                        "mirror padding exceeds what dimension {d} of size {n} allows"
                    ));
                }
                m.push(src as usize);
            }
            maps.push(m);
        }
        let ist = strides_of(in_shape);
        let mut idx = vec![0usize; r];
        for v in self.o.iter_mut() {
            let src: usize = (0..r).map(|d| maps[d][idx[d]] * ist[d]).sum();
            *v = x[src];
            for d in (0..r).rev() {
                idx[d] += 1;
                if idx[d] < out_shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Ok(())
    }

    /// GATHER along an axis by the run-time indices (input 2), checked against the
    /// dimension.
    fn gather(self, a: i32) -> Result<()> {
        let (x, in_shape, o) = (self.x, self.in_shape, self.o);
        let indices = i32s(&input(self.inputs, 2)?)?;
        let a = axis(a, in_shape.len())?;
        let (outer, dim, inner) = split_at_axis(in_shape, a);
        if o.len() != outer * indices.len() * inner {
            return err("output size does not match the gathered shape");
        }
        for (k, &idx) in indices.iter().enumerate() {
            if idx < 0 || idx as usize >= dim {
                return err(format!(
                    "index {idx} (position {k}) is out of range for dimension {a} of size {dim}"
                ));
            }
        }
        let n = indices.len();
        for b in 0..outer {
            for (k, &idx) in indices.iter().enumerate() {
                let src = (b * dim + idx as usize) * inner;
                let dst = (b * n + k) * inner;
                o[dst..dst + inner].copy_from_slice(&x[src..src + inner]);
            }
        }
        Ok(())
    }

    /// TILE by the run-time multiples (input 1).
    fn tile(self) -> Result<()> {
        let (x, in_shape, out_shape) = (self.x, self.in_shape, self.out_shape);
        let multiples = self.i32_input(1)?;
        let r = in_shape.len();
        if multiples.len() != r || out_shape.len() != r {
            return err("multiples must hold one value per dimension");
        }
        for d in 0..r {
            if multiples[d] < 1 || in_shape[d] * multiples[d] as usize != out_shape[d] {
                return err(format!(
                    "output dimension {d} is not the input tiled {} times",
                    multiples[d]
                ));
            }
        }
        let ist = strides_of(in_shape);
        let inner_in = in_shape.last().copied().unwrap_or(1);
        let inner_out = out_shape.last().copied().unwrap_or(1);
        let outer_dims = &out_shape[..r.saturating_sub(1)];
        let mut idx = vec![0usize; outer_dims.len()];
        let rows = count(outer_dims);
        for row in 0..rows {
            let src: usize = idx
                .iter()
                .enumerate()
                .map(|(d, &i)| (i % in_shape[d]) * ist[d])
                .sum();
            let dst = &mut self.o[row * inner_out..(row + 1) * inner_out];
            for chunk in dst.chunks_exact_mut(inner_in.max(1)) {
                chunk.copy_from_slice(&x[src..src + inner_in]);
            }
            for d in (0..outer_dims.len()).rev() {
                idx[d] += 1;
                if idx[d] < outer_dims[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Ok(())
    }

    /// REVERSE along the one run-time axis (input 1).
    fn reverse(self) -> Result<()> {
        let (x, in_shape) = (self.x, self.in_shape);
        let axes = self.i32_input(1)?;
        let [a] = axes else {
            return err("REVERSE takes exactly one axis");
        };
        let a = axis(*a, in_shape.len())?;
        let (outer, mid, inner) = split_at_axis(in_shape, a);
        let o = self.o;
        if o.len() != x.len() {
            return err("output size differs from the input");
        }
        for b in 0..outer {
            for j in 0..mid {
                let src = (b * mid + (mid - 1 - j)) * inner;
                let dst = (b * mid + j) * inner;
                o[dst..dst + inner].copy_from_slice(&x[src..src + inner]);
            }
        }
        Ok(())
    }

    /// DEPTH_TO_SPACE (`to_space`) and SPACE_TO_DEPTH, in NHWC (NCHW through transposes).
    fn depth_space(self, block: usize, nchw: bool, to_space: bool) -> Result<()> {
        let bs = block;
        let in4 = rank4(self.in_shape, "input")?;
        let out4 = rank4(self.out_shape, "output")?;
        with_nhwc(
            nchw,
            self.x,
            in4,
            self.o,
            out4,
            |x, [n, ih, iw, ic], o, [on, oh, ow, oc]| {
                let (sh, sw, sc, dh, dw, dc) = if to_space {
                    (ih, iw, ic, oh, ow, oc)
                } else {
                    (oh, ow, oc, ih, iw, ic)
                };
                // (sh, sw, sc): the "depth" side; (dh, dw, dc): the "space" side.
                if on != n || dh != sh * bs || dw != sw * bs || sc != dc * bs * bs {
                    return err(format!(
                        "shapes {in4:?} and {out4:?} do not match block size {bs}"
                    ));
                }
                for b in 0..n {
                    for h in 0..sh {
                        for w in 0..sw {
                            for i in 0..bs {
                                for j in 0..bs {
                                    let deep = ((b * sh + h) * sw + w) * sc + (i * bs + j) * dc;
                                    let space = ((b * dh + h * bs + i) * dw + w * bs + j) * dc;
                                    if to_space {
                                        o[space..space + dc].copy_from_slice(&x[deep..deep + dc]);
                                    } else {
                                        o[deep..deep + dc].copy_from_slice(&x[space..space + dc]);
                                    }
                                }
                            }
                        }
                    }
                }
                Ok(())
            },
        )
    }

    /// CHANNEL_SHUFFLE of `groups` groups along an axis.
    fn channel_shuffle(self, groups: usize, a: i32) -> Result<()> {
        let (x, in_shape, o) = (self.x, self.in_shape, self.o);
        let a = axis(a, in_shape.len())?;
        let (outer, c, inner) = split_at_axis(in_shape, a);
        if c % groups != 0 || o.len() != x.len() {
            return err(format!("{c} channels do not split into {groups} groups"));
        }
        let k = c / groups;
        for b in 0..outer {
            for g in 0..groups {
                for kk in 0..k {
                    let src = (b * c + g * k + kk) * inner;
                    let dst = (b * c + kk * groups + g) * inner;
                    o[dst..dst + inner].copy_from_slice(&x[src..src + inner]);
                }
            }
        }
        Ok(())
    }
}

/// The leading padding of every dimension, after checking `pads` against both shapes.
fn pad_before(pads: &[i32], in_shape: &[usize], out_shape: &[usize]) -> Result<Vec<usize>> {
    let r = in_shape.len();
    if pads.len() != 2 * r || out_shape.len() != r {
        return err(format!("paddings must hold {} values", 2 * r));
    }
    let mut before = Vec::with_capacity(r);
    for d in 0..r {
        let (a, b) = (pads[2 * d], pads[2 * d + 1]);
        if a < 0 || b < 0 || in_shape[d] + a as usize + b as usize != out_shape[d] {
            return err(format!(
                "padding ({a}, {b}) of dimension {d} does not give {}",
                out_shape[d]
            ));
        }
        before.push(a as usize);
    }
    Ok(before)
}

/// General transpose: `out[i_0, ..] = x[...]` with `out dim d = in dim perm[d]`; 4-D
/// NHWC<->NCHW permutations go through tiled 2-D transposes.
fn transpose<T: Copy>(x: &[T], in_shape: &[usize], perm: &[usize], out: &mut [T]) {
    if let [n, a, b, c] = *in_shape {
        if perm == [0, 2, 3, 1] {
            // NCHW -> NHWC: per batch, [C, HW] -> [HW, C].
            super::util::nchw_to_nhwc(x, out, [n, a, b, c]);
            return;
        }
        if perm == [0, 3, 1, 2] {
            super::util::nhwc_to_nchw(x, out, [n, a, b, c]);
            return;
        }
    }
    let ist = strides_of(in_shape);
    let out_dims: Vec<usize> = perm.iter().map(|&p| in_shape[p]).collect();
    let steps: Vec<isize> = perm.iter().map(|&p| ist[p] as isize).collect();
    let inner = out_dims.last().copied().unwrap_or(1);
    let inner_step = steps.last().copied().unwrap_or(1);
    walk_rows(&out_dims, 0, &steps, |oo, i| {
        for (k, v) in out[oo..oo + inner].iter_mut().enumerate() {
            *v = x[(i + k as isize * inner_step) as usize];
        }
    });
}
