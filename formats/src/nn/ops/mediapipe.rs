//! MediaPipe's TFLite custom operations, as nnc extension operations
//! (docs/EXTENSIONS.md).

use super::context::*;
use super::window::*;
use super::{OutputShape, Result};
use crate::nn::model::Operand;
use crate::nn::types::{OperandType, OperationType};

/// The [1, 4, 4] TENSOR_FLOAT32 transformation matrix of the MediaPipe extension
/// operations.
pub(super) fn transform_matrix<'a>(ctx: &Operands<'a>, index: usize) -> Result<&'a Operand> {
    let m = ctx.tensor(index, "matrix", &[OperandType::TensorFloat32])?;
    if rank(m).is_some() {
        let d = &m.dimensions;
        let ok = d.len() == 3 && [1, 4, 4].iter().zip(d).all(|(&e, &a)| a == 0 || a == e);
        if !ok {
            return Err(param_err(
                index,
                "matrix",
                format!("must have dimensions [1, 4, 4], got {d:?}"),
            ));
        }
    }
    Ok(m)
}

/// MaxPoolWithArgmax.
pub(super) fn max_pool_with_argmax(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[10])?;
    expect_outputs(outputs, 2)?;
    let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
    require_rank(input, 0, "input", 4..=4)?;
    // The parameters are AVERAGE_POOL_2D's explicit form without the layout flag.
    let pool = Pool2d::decode_params(ctx)?;
    let window = Window {
        kernel: pool.filter,
        stride: pool.stride,
        dilation: Hw::ONE,
        padding: pool.padding,
        nchw: false,
    };
    let dims = match rank(input) {
        Some(_) => window_output(&window, input, input.dimensions[3])?,
        None => vec![0; 4],
    };
    let out = |dims: Vec<u32>| OutputShape {
        operand_type: OperandType::TensorFloat32,
        dimensions: dims,
    };
    Ok(vec![out(dims.clone()), out(dims)])
}

/// MaxUnpooling.
pub(super) fn max_unpooling(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[8])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
    require_rank(input, 0, "input", 4..=4)?;
    let indices = ctx.same_type(1, "indices", OperandType::TensorFloat32)?;
    require_rank(indices, 1, "indices", 4..=4)?;
    for (k, role) in [(2, "pad_left"), (3, "pad_top")] {
        ctx.i32_at_least(k, role, 0)?;
    }
    for (k, role) in [(4, "stride_width"), (5, "stride_height")] {
        ctx.i32_at_least(k, role, 1)?;
    }
    let fw = ctx.i32_at_least(6, "filter_width", 1)? as u32;
    let fh = ctx.i32_at_least(7, "filter_height", 1)? as u32;
    let Some(_) = rank(input) else {
        return single(OperandType::TensorFloat32, vec![0; 4]);
    };
    let d = &input.dimensions;
    if rank(indices).is_some() {
        for (&a, &b) in d.iter().zip(&indices.dimensions) {
            merge_dim(a, b, "indices and input")?;
        }
    }
    let scale = |n: u32, f: u32| -> Result<u32> {
        n.checked_mul(f)
            .ok_or_else(|| shape_err("output extent overflows"))
    };
    single(
        OperandType::TensorFloat32,
        vec![d[0], scale(d[1], fh)?, scale(d[2], fw)?, d[3]],
    )
}

/// LandmarksToTransformMatrix.
pub(super) fn landmarks_to_transform_matrix(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[9])?;
    expect_outputs(outputs, 1)?;
    let landmarks = ctx.tensor(0, "landmarks", &[OperandType::TensorFloat32])?;
    require_rank(landmarks, 0, "landmarks", 3..=3)?;
    let count = match rank(landmarks) {
        Some(_) => {
            let d = &landmarks.dimensions;
            if (d[0] != 0 && d[0] != 1) || (d[2] != 0 && d[2] != 3) {
                return Err(param_err(
                    0,
                    "landmarks",
                    format!("must have dimensions [1, n, 3], got {d:?}"),
                ));
            }
            d[1]
        }
        None => 0,
    };
    let in_range = |index: usize, role: &'static str, v: i32| -> Result<()> {
        if v < 0 || (count != 0 && v as u32 >= count) {
            return Err(param_err(
                index,
                role,
                format!("landmark index {v} is out of range for {count} landmarks"),
            ));
        }
        Ok(())
    };
    // A long subset is a weight (CONSTANT_REFERENCE), whose values a device may
    // not see before it runs: checked here when known, and by the kernel.
    let subset = ctx.tensor(1, "subset", INT_VECTOR)?;
    if subset.dimensions.len() != 1 || subset.dimensions[0] == 0 {
        return Err(param_err(1, "subset", "must be a non-empty 1-D vector"));
    }
    if let Some(bytes) = ctx.inputs[1].value {
        for v in decode_i32s(bytes) {
            in_range(1, "subset", v)?;
        }
    }
    in_range(2, "left_index", ctx.i32(2, "left_index")?)?;
    in_range(3, "right_index", ctx.i32(3, "right_index")?)?;
    let rotation = ctx.f32(4, "target_rotation")?;
    if !rotation.is_finite() {
        return Err(param_err(4, "target_rotation", "must be finite"));
    }
    ctx.i32_at_least(5, "output_width", 1)?;
    ctx.i32_at_least(6, "output_height", 1)?;
    for (k, role) in [(7, "scale_x"), (8, "scale_y")] {
        let v = ctx.f32(k, role)?;
        if !(v.is_finite() && v > 0.0) {
            return Err(param_err(k, role, format!("must be positive, got {v}")));
        }
    }
    single(OperandType::TensorFloat32, vec![1, 4, 4])
}

/// TransformLandmarks.
pub(super) fn transform_landmarks(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[2])?;
    expect_outputs(outputs, 1)?;
    let landmarks = ctx.tensor(0, "landmarks", &[OperandType::TensorFloat32])?;
    require_rank(landmarks, 0, "landmarks", 3..=3)?;
    transform_matrix(ctx, 1)?;
    if rank(landmarks).is_some() {
        let d = &landmarks.dimensions;
        if (d[0] != 0 && d[0] != 1) || !matches!(d[2], 0 | 2 | 3) {
            return Err(param_err(
                0,
                "landmarks",
                format!("must have dimensions [1, n, 2] or [1, n, 3], got {d:?}"),
            ));
        }
    }
    let dims = match rank(landmarks) {
        Some(_) => landmarks.dimensions.clone(),
        None => vec![0; 3],
    };
    single(OperandType::TensorFloat32, dims)
}

/// TransformTensorBilinear.
pub(super) fn transform_tensor_bilinear(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[4])?;
    expect_outputs(outputs, 1)?;
    let input = ctx.tensor(0, "input", &[OperandType::TensorFloat32])?;
    require_rank(input, 0, "input", 4..=4)?;
    transform_matrix(ctx, 1)?;
    let ow = ctx.i32_at_least(2, "output_width", 1)? as u32;
    let oh = ctx.i32_at_least(3, "output_height", 1)? as u32;
    let channels = match rank(input) {
        Some(_) => {
            if input.dimensions[0] > 1 {
                return Err(param_err(0, "input", "must have batch size 1"));
            }
            input.dimensions[3]
        }
        None => 0,
    };
    single(OperandType::TensorFloat32, vec![1, oh, ow, channels])
}

use super::Role as R;

pub(super) const MAX_POOL_WITH_ARGMAX_ROLES: &[R] = &[
    R::Input,
    R::PadLeft,
    R::PadRight,
    R::PadTop,
    R::PadBottom,
    R::StrideW,
    R::StrideH,
    R::FilterW,
    R::FilterH,
    R::Activation,
];

pub(super) const MAX_UNPOOLING_ROLES: &[R] = &[
    R::Input,
    R::Indices,
    R::PadLeft,
    R::PadTop,
    R::StrideW,
    R::StrideH,
    R::FilterW,
    R::FilterH,
];

pub(super) const LANDMARKS_TO_TRANSFORM_MATRIX_ROLES: &[R] = &[
    R::Landmarks,
    R::Subset,
    R::LeftIndex,
    R::RightIndex,
    R::TargetRotation,
    R::OutputWidth,
    R::OutputHeight,
    R::ScaleX,
    R::ScaleY,
];
