//! Data movement on 8-bit quantized tensors.
//!
//! - CONCATENATION: inputs whose scale and zero point equal the output's are copied;
//!   others go through a table built with TFLite's `ConcatenationWithScaling`
//!   arithmetic (`round(x * (in_scale / out_scale) - in_zp * that) + out_zp` in float,
//!   saturated).
//! - PAD / PAD_V2: the padding holds the output zero point (the real value 0), or
//!   PAD_V2's value (a stored quantized value, saturated to the type).
//! - DEPTH_TO_SPACE, SPACE_TO_DEPTH (TFLite's NHWC convention, NCHW by transposing) and
//!   CHANNEL_SHUFFLE move bytes.
//! - RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE, SPLIT, SLICE, STRIDED_SLICE, GATHER, TILE,
//!   PACK, REVERSE, MIRROR_PAD: `shape.rs` moves elements generically by width; these
//!   build its kernel with the 8-bit quantized operands presented as 1-byte elements.
//!
//! Every operation here except CONCATENATION requires the output to share the input's
//! scale and zero point, as NNAPI does.

use nnc_formats::nn::ops::{Pad as PadParams, PadFill, PadValue};
use nnc_formats::nn::{Operand, OperandType, Operation};

use super::arith::{QType, Qp};
use super::{activation_type, check_scale, is_quant8, output_type, q8_bytes, q8_bytes_mut, qp};
use crate::error::{Result, RuntimeError};
use crate::kernels::shape::Movement;
use crate::kernels::util::{axis, rank4, with_nhwc};
use crate::kernels::{Kernel, KernelContext, OpInfo, PreparedWeights};

/// Requires every output to carry the quantization of input `data`.
fn same_quantization(info: &OpInfo, data: usize) -> Result<Qp> {
    let q = qp(info.operand(data)?);
    for (k, o) in info.outputs.iter().enumerate() {
        if is_quant8(o.operand_type) && qp(o) != q {
            return Err(info.invalid(format!(
                "output {k} must have the input's scale {} and zero point {}, got {} and {}",
                q.scale, q.zp, o.scale, o.zero_point
            )));
        }
    }
    Ok(q)
}

// ---------------------------------------------------------------------------------------
// Byte-moving operations of shape.rs

/// A `shape.rs` kernel running on quantized tensors viewed as 1-byte elements.
struct Retyped {
    inner: Box<dyn Kernel>,
}

fn as_bytes_type(t: OperandType) -> OperandType {
    if is_quant8(t) {
        OperandType::TensorBool8
    } else {
        t
    }
}

pub(crate) fn build_bytes(info: &OpInfo, movement: Movement) -> Result<Box<dyn Kernel>> {
    let data = if movement == Movement::Pack { 1 } else { 0 };
    let t = info.input_type(data)?;
    if QType::of(t).is_none() {
        return Err(info.unsupported(format!("operand type {t}")));
    }
    same_quantization(info, data)?;
    // Every data input of PACK must match too.
    if movement == Movement::Pack {
        let q = qp(info.operand(1)?);
        for i in 2..info.input_count() {
            if qp(info.operand(i)?) != q {
                return Err(info.invalid("PACK inputs must share scale and zero point"));
            }
        }
    }
    let operands: Vec<Operand> = info
        .views()
        .iter()
        .map(|v| v.operand)
        .chain(info.outputs.iter().copied())
        .map(|o| {
            let mut o = (*o).clone();
            if is_quant8(o.operand_type) {
                o.operand_type = OperandType::TensorBool8;
                o.scale = 0.0;
                o.zero_point = 0;
            }
            o
        })
        .collect();
    let n_in = info.input_count() as u32;
    let op = Operation {
        op_type: info.op_type(),
        inputs: (0..n_in).collect(),
        outputs: (n_in..operands.len() as u32).collect(),
        source: info.op.source.clone(),
    };
    let values: Vec<Option<&[u8]>> = info.views().iter().map(|v| v.value).collect();
    let constant = move |i: u32| values.get(i as usize).copied().flatten();
    let retyped = OpInfo::new(&op, &operands, &constant)?;
    let inner = crate::kernels::shape::build(&retyped, movement)?;
    Ok(Box::new(Retyped { inner }))
}

impl Kernel for Retyped {
    fn prepare_weights(&self, weights: &[Option<&[u8]>]) -> Result<PreparedWeights> {
        self.inner.prepare_weights(weights)
    }

    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let inputs = ctx
            .inputs
            .iter()
            .map(|t| {
                t.map(|mut t| {
                    t.operand_type = as_bytes_type(t.operand_type);
                    t
                })
            })
            .collect();
        let outputs = std::mem::take(&mut ctx.outputs)
            .into_iter()
            .map(|mut t| {
                t.operand_type = as_bytes_type(t.operand_type);
                t
            })
            .collect();
        let mut inner = KernelContext {
            inputs,
            outputs,
            weights: ctx.weights,
            scratch: &mut *ctx.scratch,
            threads: ctx.threads,
        };
        self.inner.run(&mut inner)
    }
}

// ---------------------------------------------------------------------------------------
// CONCATENATION

struct Concat {
    axis: i32,
    /// Per input: `None` copies, a table requantizes.
    tables: Vec<Option<[u8; 256]>>,
}

pub(crate) fn build_concat(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let n = info.input_count().saturating_sub(1);
    let out_qt = output_type(info, 0)?;
    let out = qp(info.output_operand(0)?);
    check_scale(info, "output", out.scale)?;
    let mut tables = Vec::with_capacity(n);
    for i in 0..n {
        let qt = activation_type(info, i)?;
        if qt != out_qt {
            return Err(info.unsupported("inputs and output of different 8-bit types"));
        }
        let q = qp(info.operand(i)?);
        check_scale(info, "input", q.scale)?;
        tables.push(if q == out {
            None
        } else {
            // ConcatenationWithScaling, in float.
            let scale = q.scale * (1.0 / out.scale);
            let bias = -(q.zp as f32) * scale;
            Some(super::arith::byte_table(qt, qt, |x| {
                ((x as f32 * scale + bias).round() as i32).saturating_add(out.zp)
            }))
        });
    }
    Ok(Box::new(Concat {
        axis: info.i32(n, "axis")?,
        tables,
    }))
}

impl Kernel for Concat {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let n = self.tables.len();
        let mut parts = Vec::with_capacity(n);
        for i in 0..n {
            let t = ctx.input(i)?;
            parts.push((q8_bytes(&t, "input")?, t.shape));
        }
        let out_t = ctx.output(0)?;
        let oshape = out_t.shape;
        let a = axis(self.axis, oshape.len())?;
        let inner: usize = oshape[a + 1..].iter().product();
        let outer: usize = oshape[..a].iter().product();
        let out = q8_bytes_mut(out_t, "output")?;
        let mut total = 0;
        for (bytes, shape) in &parts {
            if shape.len() != oshape.len()
                || shape
                    .iter()
                    .zip(oshape)
                    .enumerate()
                    .any(|(d, (s, o))| d != a && s != o)
            {
                return Err(RuntimeError::kernel(format!(
                    "input {shape:?} does not concatenate into {oshape:?} along axis {a}"
                )));
            }
            total += shape[a];
            if bytes.len() != outer * shape[a] * inner {
                return Err(RuntimeError::kernel("input does not match its shape"));
            }
        }
        if total != oshape[a] {
            return Err(RuntimeError::kernel(
                "inputs do not add up to the output extent",
            ));
        }
        let mut o = 0;
        for k in 0..outer {
            for ((bytes, shape), table) in parts.iter().zip(&self.tables) {
                let len = shape[a] * inner;
                let src = &bytes[k * len..(k + 1) * len];
                let dst = &mut out[o..o + len];
                match table {
                    None => dst.copy_from_slice(src),
                    Some(t) => dst
                        .iter_mut()
                        .zip(src)
                        .for_each(|(d, &s)| *d = t[usize::from(s)]),
                }
                o += len;
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// PAD / PAD_V2

struct Pad {
    value: u8,
    /// The paddings when constant; else read from input 1 per run.
    paddings: Option<Vec<i32>>,
}

pub(crate) fn build_pad(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let qt = activation_type(info, 0)?;
    if output_type(info, 0)? != qt {
        return Err(info.unsupported("input and output of different 8-bit types"));
    }
    let q = same_quantization(info, 0)?;
    let params =
        PadParams::decode(info.op_type(), info.views()).map_err(|e| info.signature_error(e))?;
    let value = match params.fill {
        PadFill::Zeros => qt.store(q.zp),
        PadFill::Value(PadValue::Int(v)) => qt.store(v),
        PadFill::Value(PadValue::Float(_)) | PadFill::Mirror { .. } => {
            return Err(info.unsupported("this form of padding on 8-bit tensors"));
        }
    };
    Ok(Box::new(Pad {
        value,
        paddings: params.paddings,
    }))
}

impl Kernel for Pad {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let ishape = input.shape;
        let runtime;
        let pads: &[i32] = match &self.paddings {
            Some(p) => p,
            None => {
                runtime = ctx.input(1)?.i32()?.to_vec();
                &runtime
            }
        };
        let out_t = ctx.output(0)?;
        let oshape = out_t.shape;
        let out = q8_bytes_mut(out_t, "output")?;
        let r = ishape.len();
        if pads.len() != 2 * r || oshape.len() != r {
            return Err(RuntimeError::kernel("paddings do not match the input rank"));
        }
        let mut before = Vec::with_capacity(r);
        for d in 0..r {
            let (a, b) = (pads[2 * d], pads[2 * d + 1]);
            if a < 0 || b < 0 || ishape[d] + a as usize + b as usize != oshape[d] {
                return Err(RuntimeError::kernel(format!(
                    "padding ({a}, {b}) of dimension {d} does not give the output shape"
                )));
            }
            before.push(a as usize);
        }
        out.fill(self.value);
        if x.is_empty() || r == 0 {
            if r == 0 {
                out.copy_from_slice(x);
            }
            return Ok(());
        }
        // Output strides; copy input rows (the last dimension) one by one.
        let mut ostride = vec![1usize; r];
        for d in (0..r - 1).rev() {
            ostride[d] = ostride[d + 1] * oshape[d + 1];
        }
        let inner = ishape[r - 1];
        let rows = x.len() / inner;
        let mut idx = vec![0usize; r - 1];
        for row in 0..rows {
            let mut o = before[r - 1];
            for d in 0..r - 1 {
                o += (idx[d] + before[d]) * ostride[d];
            }
            out[o..o + inner].copy_from_slice(&x[row * inner..(row + 1) * inner]);
            for d in (0..r - 1).rev() {
                idx[d] += 1;
                if idx[d] < ishape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// DEPTH_TO_SPACE, SPACE_TO_DEPTH, CHANNEL_SHUFFLE

enum Block {
    DepthToSpace { block: usize, nchw: bool },
    SpaceToDepth { block: usize, nchw: bool },
    ChannelShuffle { groups: usize, axis: i32 },
}

/// The block rearrangement an operation is, chosen where it is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rearrangement {
    DepthToSpace,
    SpaceToDepth,
    ChannelShuffle,
}

pub(crate) fn build_block(info: &OpInfo, rearrangement: Rearrangement) -> Result<Box<dyn Kernel>> {
    use Rearrangement as R;
    let qt = activation_type(info, 0)?;
    if output_type(info, 0)? != qt {
        return Err(info.unsupported("input and output of different 8-bit types"));
    }
    same_quantization(info, 0)?;
    let op = match rearrangement {
        R::DepthToSpace | R::SpaceToDepth => {
            let block = info.usize(1, "block_size")?;
            if block == 0 {
                return Err(info.invalid("block_size must be >= 1"));
            }
            let nchw = info.optional_bool(2, "layout")?;
            if rearrangement == R::DepthToSpace {
                Block::DepthToSpace { block, nchw }
            } else {
                Block::SpaceToDepth { block, nchw }
            }
        }
        R::ChannelShuffle => {
            let groups = info.usize(1, "num_groups")?;
            if groups == 0 {
                return Err(info.invalid("num_groups must be >= 1"));
            }
            Block::ChannelShuffle {
                groups,
                axis: info.i32(2, "axis")?,
            }
        }
    };
    Ok(Box::new(op))
}

impl Kernel for Block {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let x = q8_bytes(&input, "input")?;
        let ishape = input.shape;
        let out_t = ctx.output(0)?;
        let oshape = out_t.shape;
        let out = q8_bytes_mut(out_t, "output")?;
        match *self {
            Block::ChannelShuffle { groups, axis: ax } => {
                let a = axis(ax, ishape.len())?;
                let (outer, c, inner) = crate::kernels::util::split_at_axis(ishape, a);
                if c % groups != 0 || x.len() != out.len() || x.len() != outer * c * inner {
                    return Err(RuntimeError::kernel(
                        "channels do not split into the groups",
                    ));
                }
                let per = c / groups;
                for o in 0..outer {
                    for g in 0..groups {
                        for j in 0..per {
                            let src = &x[(o * c + g * per + j) * inner..][..inner];
                            out[(o * c + j * groups + g) * inner..][..inner].copy_from_slice(src);
                        }
                    }
                }
                Ok(())
            }
            Block::DepthToSpace { block: bs, nchw } | Block::SpaceToDepth { block: bs, nchw } => {
                let to_space = matches!(self, Block::DepthToSpace { .. });
                let (i4, o4) = (rank4(ishape, "input")?, rank4(oshape, "output")?);
                with_nhwc(
                    nchw,
                    x,
                    i4,
                    out,
                    o4,
                    |x, [n, ih, iw, ic], out, [on, oh, ow, oc]| {
                        let ok = if to_space {
                            on == n && oh == ih * bs && ow == iw * bs && oc * bs * bs == ic
                        } else {
                            on == n && ih == oh * bs && iw == ow * bs && ic * bs * bs == oc
                        };
                        if !ok || x.len() != out.len() {
                            return Err(RuntimeError::kernel(
                                "output shape does not match the block size",
                            ));
                        }
                        // In space-major terms: (b, h, w, c) of the large tensor <-> (b, h / bs,
                        // w / bs, ((h % bs) * bs + w % bs) * C + c) of the deep one.
                        let (sh, sw, c) = if to_space { (oh, ow, oc) } else { (ih, iw, ic) };
                        let (dh, dw, dc) = (sh / bs, sw / bs, c * bs * bs);
                        for b in 0..n {
                            for h in 0..sh {
                                for w in 0..sw {
                                    let space = ((b * sh + h) * sw + w) * c;
                                    let depth = ((b * dh + h / bs) * dw + w / bs) * dc
                                        + ((h % bs) * bs + w % bs) * c;
                                    if to_space {
                                        out[space..space + c].copy_from_slice(&x[depth..depth + c]);
                                    } else {
                                        out[depth..depth + c].copy_from_slice(&x[space..space + c]);
                                    }
                                }
                            }
                        }
                        Ok(())
                    },
                )
            }
        }
    }
}
