//! Shape and data movement: concatenation, reshapes, transposes, pads, slices, splits,
//! tiles, packs, space/depth rearrangement, FILL and RANK.

use super::context::*;
use super::shape_params::{Pad, PadFill, StridedSlice};
use super::{OutputShape, Result, SignatureError};
use crate::nn::model::Operand;
use crate::nn::types::OperationType as O;
use crate::nn::types::{OperandType, OperationType};

pub(super) fn check_permutation(perm: &[i32], r: usize, index: usize) -> Result<()> {
    if perm.len() != r {
        return Err(param_err(
            index,
            "perm",
            format!("must hold {r} values, got {}", perm.len()),
        ));
    }
    let mut seen = vec![false; r];
    for &p in perm {
        if p < 0 || p as usize >= r || seen[p as usize] {
            return Err(param_err(
                index,
                "perm",
                format!("{perm:?} is not a permutation of 0..{r}"),
            ));
        }
        seen[p as usize] = true;
    }
    Ok(())
}

/// Resolves a RESHAPE target (with at most one -1) against the input's element count.
pub(super) fn reshape_dims(input: &Operand, shape: &[i32]) -> Result<Vec<u32>> {
    let mut unknown_at = None;
    let mut known: u64 = 1;
    for (i, &s) in shape.iter().enumerate() {
        match s {
            -1 if unknown_at.is_none() => unknown_at = Some(i),
            -1 => return Err(param_err(1, "shape", "holds more than one -1")),
            s if s < 1 => {
                return Err(param_err(
                    1,
                    "shape",
                    format!("dimension {i} is {s}; must be >= 1 or -1"),
                ));
            }
            s => {
                known = known
                    .checked_mul(s as u64)
                    .ok_or_else(|| shape_err("target shape overflows"))?
            }
        }
    }
    let mut dims: Vec<u32> = shape
        .iter()
        .map(|&s| if s < 0 { 0 } else { s as u32 })
        .collect();
    match (input.element_count(), unknown_at) {
        (Some(n), Some(i)) => {
            if n % known != 0 {
                return Err(shape_err(format!(
                    "cannot reshape {n} elements into {shape:?}"
                )));
            }
            dims[i] =
                u32::try_from(n / known).map_err(|_| shape_err("reshaped extent overflows"))?;
        }
        (Some(n), None) if n != known => {
            return Err(shape_err(format!(
                "cannot reshape {} ({n} elements) into {shape:?} ({known} elements)",
                crate::nn::model::dims_to_string(&input.dimensions)
            )));
        }
        _ => {}
    }
    Ok(dims)
}

/// The `[begin, end)` range one STRIDED_SLICE dimension selects, clamped like TFLite.
pub fn strided_slice_range(
    dim: u32,
    begin: i32,
    end: i32,
    stride: i32,
    begin_masked: bool,
    end_masked: bool,
    shrink: bool,
) -> (i64, i64) {
    let dim = i64::from(dim);
    let norm = |v: i32| -> i64 {
        let v = i64::from(v);
        if v < 0 { v + dim } else { v }
    };
    let b = if begin_masked {
        if stride > 0 { 0 } else { dim - 1 }
    } else {
        let v = norm(begin);
        if stride > 0 {
            v.clamp(0, dim)
        } else {
            v.clamp(-1, dim - 1)
        }
    };
    let e = if shrink {
        b + 1
    } else if end_masked {
        if stride > 0 { dim } else { -1 }
    } else {
        let v = norm(end);
        if stride > 0 {
            v.clamp(0, dim)
        } else {
            v.clamp(-1, dim - 1)
        }
    };
    (b, e)
}

/// Concatenation.
pub(super) fn concatenation(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.at_least(2)?;
    expect_outputs(outputs, 1)?;
    let n = ctx.inputs.len() - 1;
    let first = ctx.tensor(0, "input0", ANY_DATA)?;
    let mut tensors = vec![first];
    for i in 1..n {
        tensors.push(ctx.same_type(i, "input", first.operand_type)?);
    }
    let axis = ctx.i32(n, "axis")?;
    let Some(r) = tensors.iter().find_map(|t| rank(t)) else {
        return single(first.operand_type, Vec::new());
    };
    let axis = axis_in(axis, r, n, "axis")?;
    let mut out = vec![0u32; r];
    let mut total: Option<u64> = Some(0);
    for t in &tensors {
        let Some(tr) = rank(t) else {
            total = None;
            continue;
        };
        if tr != r {
            return Err(shape_err(format!("inputs have ranks {r} and {tr}")));
        }
        for (d, (slot, &v)) in out.iter_mut().zip(&t.dimensions).enumerate() {
            if d == axis {
                total = if v == 0 {
                    None
                } else {
                    total.map(|s| s + u64::from(v))
                };
            } else {
                *slot = merge_dim(*slot, v, "non-axis dimensions")?;
            }
        }
    }
    out[axis] = match total {
        Some(t) => u32::try_from(t).map_err(|_| shape_err("concatenated extent overflows"))?,
        None => 0,
    };
    single(first.operand_type, out)
}

/// Reshape.
pub(super) fn reshape(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", ANY_DATA)?;
    let shape_operand = ctx.tensor(1, "shape", INT_VECTOR)?;
    let Some(shape) = ctx.i32_vector(1, "shape")? else {
        let r = shape_operand.dimensions.first().copied().unwrap_or(0);
        return single(input.operand_type, unknown_dims(r)?);
    };
    single(input.operand_type, reshape_dims(input, &shape)?)
}

/// Transpose.
pub(super) fn transpose(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1, 2])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", ANY_DATA)?;
    let Some(r) = rank(input) else {
        return single(input.operand_type, Vec::new());
    };
    let perm: Vec<i32> = if ctx.present(1) {
        ctx.i32_values(1, "perm")?
    } else {
        (0..r as i32).rev().collect()
    };
    check_permutation(&perm, r, 1)?;
    let dims = perm.iter().map(|&p| input.dimensions[p as usize]).collect();
    single(input.operand_type, dims)
}

/// Squeeze.
pub(super) fn squeeze(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1, 2])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", ANY_DATA)?;
    let Some(r) = rank(input) else {
        return single(input.operand_type, Vec::new());
    };
    let dims = &input.dimensions;
    let mut drop = vec![false; r];
    if ctx.present(1) && ctx.i32_vector(1, "squeeze_dims")?.is_none() {
        // squeeze_dims computed at run time: the rank of the result is unknown
        // (repeated entries count once).
        return single(input.operand_type, Vec::new());
    }
    if ctx.present(1) {
        for a in ctx.i32_values(1, "squeeze_dims")? {
            let a = axis_in(a, r, 1, "squeeze_dims")?;
            if dims[a] != 1 && dims[a] != 0 {
                return Err(param_err(
                    1,
                    "squeeze_dims",
                    format!("dimension {a} has size {}, not 1", dims[a]),
                ));
            }
            drop[a] = true;
        }
    } else {
        for (d, flag) in dims.iter().zip(drop.iter_mut()) {
            if *d == 0 {
                return Err(shape_err(
                    "cannot squeeze all unit dimensions of a shape with unknown dimensions",
                ));
            }
            *flag = *d == 1;
        }
    }
    let out: Vec<u32> = dims
        .iter()
        .zip(&drop)
        .filter(|(_, d)| !**d)
        .map(|(v, _)| *v)
        .collect();
    // A rank-0 result is represented as a one-element vector.
    single(
        input.operand_type,
        if out.is_empty() { vec![1] } else { out },
    )
}

/// ExpandDims.
pub(super) fn expand_dims(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", ANY_DATA)?;
    let axis = ctx.i32(1, "axis")?;
    let Some(r) = rank(input) else {
        return single(input.operand_type, Vec::new());
    };
    let a = axis_in(axis, r + 1, 1, "axis")?;
    let mut dims = input.dimensions.clone();
    dims.insert(a, 1);
    single(input.operand_type, dims)
}

/// PAD, PAD_V2 and MIRROR_PAD.
pub(super) fn pad(
    op: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    Pad::count(op, ctx)?;
    expect_outputs(outputs, 1)?;
    // paddings is a [rank, 2] tensor: constant, or computed at run time.
    let Pad {
        paddings: pads,
        fill,
    } = Pad::decode_params(op, ctx)?;
    let input = ctx.operand(0);
    let Some(r) = rank(input) else {
        return single(input.operand_type, Vec::new());
    };
    let Some(pads) = pads else {
        return single(input.operand_type, vec![0; r]);
    };
    if pads.len() != 2 * r {
        return Err(param_err(
            1,
            "paddings",
            format!("must hold {} values (rank x 2), got {}", 2 * r, pads.len()),
        ));
    }
    let mut out = Vec::with_capacity(r);
    for (d, &dim) in input.dimensions.iter().enumerate() {
        let (a, b) = (pads[2 * d], pads[2 * d + 1]);
        if a < 0 || b < 0 {
            return Err(param_err(
                1,
                "paddings",
                format!("dimension {d} has negative padding ({a}, {b})"),
            ));
        }
        if let PadFill::Mirror { symmetric } = fill
            && dim != 0
        {
            let limit = if symmetric {
                dim
            } else {
                dim.saturating_sub(1)
            };
            if a as u32 > limit || b as u32 > limit {
                return Err(param_err(
                    1,
                    "paddings",
                    format!(
                        "mirror padding ({a}, {b}) exceeds what dimension {d} of size {dim} allows"
                    ),
                ));
            }
        }
        out.push(if dim == 0 {
            0
        } else {
            u32::try_from(u64::from(dim) + a as u64 + b as u64)
                .map_err(|_| shape_err("padded extent overflows"))?
        });
    }
    single(input.operand_type, out)
}

/// Slice.
pub(super) fn slice(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[3])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", ANY_DATA)?;
    let begin = ctx.i32_vector(1, "begin")?;
    let size = ctx.i32_vector(2, "size")?;
    let Some(r) = rank(input) else {
        return single(input.operand_type, Vec::new());
    };
    let (Some(begin), Some(size)) = (begin, size) else {
        return single(input.operand_type, vec![0; r]);
    };
    if begin.len() != r || size.len() != r {
        return Err(shape_err(format!(
            "begin and size must hold {r} values, got {} and {}",
            begin.len(),
            size.len()
        )));
    }
    let mut out = Vec::with_capacity(r);
    for d in 0..r {
        let dim = i64::from(input.dimensions[d]);
        let (b, s) = (i64::from(begin[d]), i64::from(size[d]));
        if b < 0 || (dim != 0 && b > dim) {
            return Err(param_err(
                1,
                "begin",
                format!("begin {b} is out of range for dimension {d} of size {dim}"),
            ));
        }
        let len = if s == -1 {
            if dim == 0 { 0 } else { dim - b }
        } else if s < 0 || (dim != 0 && b + s > dim) {
            return Err(param_err(
                2,
                "size",
                format!("size {s} at begin {b} exceeds dimension {d} of size {dim}"),
            ));
        } else {
            s
        };
        if dim != 0 && len == 0 {
            return Err(param_err(
                2,
                "size",
                format!("slice of dimension {d} is empty"),
            ));
        }
        out.push(len as u32);
    }
    single(input.operand_type, out)
}

/// StridedSlice.
pub(super) fn strided_slice(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[7])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", ANY_DATA)?;
    // begin / end / strides are tensors: constant, or computed at run time.
    let StridedSlice {
        begin,
        end,
        strides,
        begin_mask,
        end_mask,
        shrink_axis_mask: shrink,
    } = StridedSlice::decode_params(ctx)?;
    let Some(r) = rank(input) else {
        return single(input.operand_type, Vec::new());
    };
    let (Some(begin), Some(end), Some(strides)) = (begin, end, strides) else {
        // Extents known only at run time; shrunk dimensions leave the result.
        let kept = (0..r)
            .filter(|&d| d >= 32 || shrink & (1 << d) == 0)
            .count();
        return single(input.operand_type, vec![0; kept]);
    };
    if begin.len() != r || end.len() != r || strides.len() != r {
        return Err(shape_err(format!(
            "begin, end and strides must each hold {r} values"
        )));
    }
    let mut out = Vec::new();
    for d in 0..r {
        let stride = strides[d];
        if stride == 0 {
            return Err(param_err(
                3,
                "strides",
                format!("stride of dimension {d} is 0"),
            ));
        }
        let dim = input.dimensions[d];
        let shrinks = shrink & (1 << d) != 0;
        if dim == 0 {
            if !shrinks {
                out.push(0);
            }
            continue;
        }
        let (b, e) = strided_slice_range(
            dim,
            begin[d],
            end[d],
            stride,
            begin_mask & (1 << d) != 0,
            end_mask & (1 << d) != 0,
            shrinks,
        );
        let len = if stride > 0 {
            ((e - b).max(0) + i64::from(stride) - 1) / i64::from(stride)
        } else {
            ((b - e).max(0) - i64::from(stride) - 1) / -i64::from(stride)
        };
        if shrinks {
            if len != 1 {
                return Err(shape_err(format!(
                    "shrunk dimension {d} does not select exactly one element"
                )));
            }
        } else {
            if len == 0 {
                return Err(shape_err(format!("slice of dimension {d} is empty")));
            }
            out.push(len as u32);
        }
    }
    single(
        input.operand_type,
        if out.is_empty() { vec![1] } else { out },
    )
}

/// Split.
pub(super) fn split(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[3])?;
    let input = ctx.tensor(0, "input", ANY_DATA)?;
    let axis = ctx.i32(1, "axis")?;
    let num = ctx.i32_at_least(2, "num_splits", 1)? as u32;
    if outputs.len() != num as usize {
        return Err(SignatureError::OutputCount {
            expected: num.to_string(),
            actual: outputs.len(),
        });
    }
    let Some(r) = rank(input) else {
        return Ok(vec![
            OutputShape {
                operand_type: input.operand_type,
                dimensions: Vec::new()
            };
            num as usize
        ]);
    };
    let a = axis_in(axis, r, 1, "axis")?;
    let mut dims = input.dimensions.clone();
    if dims[a] != 0 {
        if dims[a] % num != 0 {
            return Err(shape_err(format!(
                "dimension {a} of size {} does not split into {num} equal parts",
                dims[a]
            )));
        }
        dims[a] /= num;
    }
    Ok(vec![
        OutputShape {
            operand_type: input.operand_type,
            dimensions: dims
        };
        num as usize
    ])
}

/// Tile.
pub(super) fn tile(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", ANY_DATA)?;
    let multiples = ctx.i32_vector(1, "multiples")?;
    let Some(r) = rank(input) else {
        return single(input.operand_type, Vec::new());
    };
    let Some(m) = multiples else {
        return single(input.operand_type, vec![0; r]);
    };
    if m.len() != r {
        return Err(param_err(
            1,
            "multiples",
            format!("must hold {r} values, got {}", m.len()),
        ));
    }
    let mut dims = Vec::with_capacity(r);
    for (d, (&dim, &k)) in input.dimensions.iter().zip(&m).enumerate() {
        if k < 1 {
            return Err(param_err(
                1,
                "multiples",
                format!("multiple of dimension {d} must be >= 1, got {k}"),
            ));
        }
        dims.push(
            dim.checked_mul(k as u32)
                .ok_or_else(|| shape_err("tiled extent overflows"))?,
        );
    }
    single(input.operand_type, dims)
}

/// Pack.
pub(super) fn pack(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.at_least(2)?;
    expect_outputs(outputs, 1)?;
    let axis = ctx.i32(0, "axis")?;
    let first = ctx.tensor(1, "input0", ANY_DATA)?;
    let mut dims = first.dimensions.clone();
    for i in 2..ctx.inputs.len() {
        let t = ctx.same_type(i, "input", first.operand_type)?;
        if rank(t) != rank(first) && rank(t).is_some() && rank(first).is_some() {
            return Err(shape_err("inputs have different ranks"));
        }
        if dims.len() == t.dimensions.len() {
            for (d, &v) in dims.iter_mut().zip(&t.dimensions) {
                *d = merge_dim(*d, v, "packed input dimensions")?;
            }
        }
    }
    let Some(r) = rank(first) else {
        return single(first.operand_type, Vec::new());
    };
    let a = axis_in(axis, r + 1, 0, "axis")?;
    dims.insert(a, (ctx.inputs.len() - 1) as u32);
    single(first.operand_type, dims)
}

/// Reverse.
pub(super) fn reverse(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", ANY_DATA)?;
    let axes = ctx.i32_values(1, "axis")?;
    if axes.len() != 1 {
        return Err(param_err(
            1,
            "axis",
            format!("must hold exactly one axis, got {}", axes.len()),
        ));
    }
    if let Some(r) = rank(input) {
        axis_in(axes[0], r, 1, "axis")?;
    }
    single(input.operand_type, input.dimensions.clone())
}

/// DepthToSpace, SpaceToDepth.
pub(super) fn depth_space(
    op: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2, 3])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
    require_rank(input, 0, "input", 4..=4)?;
    let block = ctx.i32_at_least(1, "block_size", 1)? as u32;
    let nchw = ctx.optional_bool(2, "layout")?;
    if rank(input).is_none() {
        return single(input.operand_type, Vec::new());
    }
    let (n, h, w, c) = split_nhwc(&input.dimensions, nchw);
    let square = u64::from(block) * u64::from(block);
    let extent = |v: u64| {
        u32::try_from(v)
            .ok()
            .filter(|&v| v <= i32::MAX as u32)
            .ok_or_else(|| shape_err(format!("an output extent ({v}) overflows")))
    };
    let dims = if op == O::DepthToSpace {
        if c != 0 && u64::from(c) % square != 0 {
            return Err(shape_err(format!(
                "depth {c} is not divisible by block_size^2 = {square}"
            )));
        }
        join_nhwc(
            n,
            extent(u64::from(h) * u64::from(block))?,
            extent(u64::from(w) * u64::from(block))?,
            extent(u64::from(c) / square)?,
            nchw,
        )
    } else {
        if (h != 0 && h % block != 0) || (w != 0 && w % block != 0) {
            return Err(shape_err(format!(
                "height {h} and width {w} must be divisible by block_size {block}"
            )));
        }
        join_nhwc(
            n,
            h / block,
            w / block,
            extent(u64::from(c) * square)?,
            nchw,
        )
    };
    single(input.operand_type, dims)
}

/// ChannelShuffle.
pub(super) fn channel_shuffle(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[3])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", FLOAT_QUANT)?;
    let groups = ctx.i32_at_least(1, "num_groups", 1)? as u32;
    let axis = ctx.i32(2, "axis")?;
    if let Some(r) = rank(input) {
        let a = axis_in(axis, r, 2, "axis")?;
        let c = input.dimensions[a];
        if c != 0 && c % groups != 0 {
            return Err(shape_err(format!(
                "channels {c} not divisible by {groups} groups"
            )));
        }
    }
    single(input.operand_type, input.dimensions.clone())
}

/// Fill.
pub(super) fn fill(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
    let dims = ctx.i32_vector(0, "dims")?;
    let t = match ctx.operand(1).operand_type {
        OperandType::Float32 => OperandType::TensorFloat32,
        OperandType::Float16 => OperandType::TensorFloat16,
        OperandType::Int32 => OperandType::TensorInt32,
        other => {
            return Err(SignatureError::InputType {
                index: 1,
                role: "value",
                expected: "FLOAT32, FLOAT16 or INT32".into(),
                actual: other,
            });
        }
    };
    let out = match dims {
        Some(d) => d
            .iter()
            .map(|&v| {
                if v >= 1 {
                    Ok(v as u32)
                } else {
                    Err(param_err(0, "dims", format!("dimension {v} must be >= 1")))
                }
            })
            .collect::<Result<Vec<_>>>()?,
        None => {
            let n = ctx.operand(0).dimensions.first().copied().unwrap_or(0);
            unknown_dims(n)?
        }
    };
    single(t, out)
}

/// Rank.
pub(super) fn tensor_rank(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[1])?;
    expect_outputs(outputs, 1)?;
    ctx.tensor(0, "input", ANY_DATA)?;
    single(OperandType::Int32, Vec::new())
}

/// CONCATENATION's inputs: the tensors, then the axis.
pub(super) fn concatenation_roles(index: usize, count: usize) -> super::Role {
    if index + 1 == count {
        super::Role::Axis
    } else {
        super::Role::Input
    }
}
