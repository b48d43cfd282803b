//! Shape and data-movement operators: RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE, slices,
//! GATHER, SPLIT, PACK, CONCATENATION, the pads, depth/space, resizes, and the
//! compile-time SHAPE and DENSIFY.

use nnc_formats::nn::ops::{Pad, PadFill, PadValue, Resize2d, ResizeSize, StridedSlice};
use nnc_formats::nn::{Operand, OperandType, OperationType};

use super::super::model::OperatorDesc;
use super::super::schema_generated::tflite as fb;
use super::reduce::norm_axis;
use super::{Const, Lowerer, OResult, Value, invalid, unsupported};

use fb::BuiltinOperator as B;

/// STRIDED_SLICE's masks are 32-bit: one bit per dimension, kept well inside.
const MAX_MASK_RANK: usize = 16;

impl Lowerer<'_, '_> {
    pub(super) fn reshape(&mut self, op: &OperatorDesc) -> OResult<()> {
        let x = self.operand_in(op, 0)?;
        let out = self.output(op, 0)?;
        let target: Vec<i32> = if let Some(dims) = self.declared_dims(out) {
            // The file states the shape; it also covers shapes computed at run time.
            dims.iter().map(|&d| d as i32).collect()
        } else {
            let requested = match self.opt_input(op, 1) {
                Some(t) => match self.value(t)? {
                    Value::Const(c) => c.i32s()?,
                    Value::Operand(_) => {
                        return unsupported(
                            "the target shape is computed at run time from run-time values",
                        );
                    }
                },
                None => op
                    .fb
                    .builtin_options_as_reshape_options()
                    .and_then(|o| o.new_shape())
                    .map(|v| v.iter().collect())
                    .unwrap_or_default(),
            };
            if requested.is_empty() {
                vec![1]
            } else {
                requested
            }
        };
        let shape = self.model.add_i32_vector(&target);
        self.emit_out(op, OperationType::Reshape, vec![x, shape], 0)?;
        Ok(())
    }

    pub(super) fn squeeze(&mut self, op: &OperatorDesc) -> OResult<()> {
        let x = self.operand_in(op, 0)?;
        let dims = self.dims(x);
        let listed: Vec<i32> = op
            .fb
            .builtin_options_as_squeeze_options()
            .and_then(|o| o.squeeze_dims())
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        let mut axes = Vec::new();
        if listed.is_empty() {
            axes.extend((0..dims.len()).filter(|&d| dims[d] == 1).map(|d| d as i32));
        } else {
            for a in listed {
                let a = norm_axis(i64::from(a), dims.len())? as i32;
                if !axes.contains(&a) {
                    axes.push(a);
                }
            }
        }
        if axes.is_empty() {
            let shape = self.shape_vector(&dims);
            self.emit_out(op, OperationType::Reshape, vec![x, shape], 0)?;
            return Ok(());
        }
        let axes = self.model.add_i32_vector(&axes);
        self.emit_out(op, OperationType::Squeeze, vec![x, axes], 0)?;
        Ok(())
    }

    pub(super) fn expand_dims(&mut self, op: &OperatorDesc) -> OResult<()> {
        let x = self.operand_in(op, 0)?;
        let xt = self.input(op, 0)?;
        let axis = self.const_in(op, 1)?.ints()?;
        let [axis] = axis.as_slice() else {
            return invalid(format!("axis must hold one value, got {axis:?}"));
        };
        if self.is_scalar(xt) {
            // A scalar is already the one-element vector the result is.
            norm_axis(*axis, 1)?;
            let shape = self.shape_vector(&[1]);
            self.emit_out(op, OperationType::Reshape, vec![x, shape], 0)?;
            return Ok(());
        }
        let rank = self.dims(x).len();
        let axis = norm_axis(*axis, rank + 1)?;
        let axis = self.model.add_i32(axis as i32);
        self.emit_out(op, OperationType::ExpandDims, vec![x, axis], 0)?;
        Ok(())
    }

    pub(super) fn transpose(&mut self, op: &OperatorDesc) -> OResult<()> {
        let x = self.operand_in(op, 0)?;
        let perm = self.const_in(op, 1)?.i32s()?;
        let perm = self.model.add_i32_vector(&perm);
        self.emit_out(op, OperationType::Transpose, vec![x, perm], 0)?;
        Ok(())
    }

    pub(super) fn strided_slice(&mut self, op: &OperatorDesc) -> OResult<()> {
        let Some(o) = op.fb.builtin_options_as_strided_slice_options() else {
            return invalid("has no StridedSliceOptions");
        };
        if o.ellipsis_mask() != 0 || o.new_axis_mask() != 0 {
            return unsupported("ellipsis_mask and new_axis_mask are not supported");
        }
        if o.offset() {
            return unsupported("offset = true (end relative to begin) is not supported");
        }
        let x = self.operand_in(op, 0)?;
        let rank = self.dims(x).len();
        let mut begin = self.const_in(op, 1)?.i32s()?;
        let mut end = self.const_in(op, 2)?.i32s()?;
        let mut strides = self.const_in(op, 3)?.i32s()?;
        let n = begin.len();
        if rank > MAX_MASK_RANK {
            return unsupported(format!(
                "rank {rank} (the masks cover {MAX_MASK_RANK} dimensions)"
            ));
        }
        if end.len() != n || strides.len() != n || n > rank {
            return invalid(format!(
                "begin, end and strides hold {}, {} and {} values for a rank-{rank} input",
                n,
                end.len(),
                strides.len()
            ));
        }
        let (mut begin_mask, mut end_mask) = (o.begin_mask(), o.end_mask());
        // Dimensions past the listed ones are taken whole.
        for d in n..rank {
            begin.push(0);
            end.push(0);
            strides.push(1);
            begin_mask |= 1 << d;
            end_mask |= 1 << d;
        }
        let slice = StridedSlice {
            begin: self.model.add_i32_vector(&begin),
            end: self.model.add_i32_vector(&end),
            strides: self.model.add_i32_vector(&strides),
            begin_mask,
            end_mask,
            shrink_axis_mask: o.shrink_axis_mask(),
        };
        let mut inputs = vec![x];
        inputs.extend(slice.encode(&mut self.model));
        self.emit_out(op, OperationType::StridedSlice, inputs, 0)?;
        Ok(())
    }

    pub(super) fn slice(&mut self, op: &OperatorDesc) -> OResult<()> {
        let x = self.operand_in(op, 0)?;
        let begin = self.const_in(op, 1)?.i32s()?;
        let size = self.const_in(op, 2)?.i32s()?;
        let begin = self.model.add_i32_vector(&begin);
        let size = self.model.add_i32_vector(&size);
        self.emit_out(op, OperationType::Slice, vec![x, begin, size], 0)?;
        Ok(())
    }

    pub(super) fn gather(&mut self, op: &OperatorDesc) -> OResult<()> {
        let (axis, batch_dims) = op
            .fb
            .builtin_options_as_gather_options()
            .map_or((0, 0), |o| (o.axis(), o.batch_dims()));
        if batch_dims != 0 {
            return unsupported(format!("batch_dims = {batch_dims} is not supported"));
        }
        let x = self.operand_in(op, 0)?;
        let rank = self.dims(x).len();
        let axis = norm_axis(i64::from(axis), rank)?;
        let indices = self.operand_in(op, 1)?;
        if self.operand_type(indices) != OperandType::TensorInt32 {
            return unsupported(format!(
                "indices of type {} are not supported",
                self.operand_type(indices)
            ));
        }
        let axis_operand = self.model.add_i32(axis as i32);
        let out = self.output(op, 0)?;
        let template = self.activation_template(out)?;
        // Scalar indices are one-element vectors in the NN set: the result then keeps
        // the gathered axis, and a RESHAPE drops it.
        let y = self.emit_temp(
            op,
            OperationType::Gather,
            vec![x, axis_operand, indices],
            template,
        )?;
        let mut dims = self.dims(y);
        if self.is_scalar(self.input(op, 1)?) && dims.len() > 1 {
            dims.remove(axis);
        }
        let y = self.reshape_temp(op, y, &dims)?;
        self.finish_output(out, y)
    }

    pub(super) fn split(&mut self, op: &OperatorDesc) -> OResult<()> {
        let axis = self.const_in(op, 0)?.ints()?;
        let [axis] = axis.as_slice() else {
            return invalid(format!("axis must hold one value, got {axis:?}"));
        };
        let xt = self.input(op, 1)?;
        let x = self.operand_of(xt, super::Role::Plain)?;
        let rank = self.dims(x).len();
        let axis = norm_axis(*axis, rank)?;
        let count = op.outputs.len();
        if let Some(o) = op.fb.builtin_options_as_split_options()
            && o.num_splits() as usize != count
        {
            return invalid(format!(
                "num_splits is {} but the operator has {count} outputs",
                o.num_splits()
            ));
        }
        let mut templates = Vec::with_capacity(count);
        for k in 0..count {
            let t = self.output(op, k)?;
            let mut template = self.activation_template(t)?;
            template.name = String::new();
            templates.push(template);
        }
        let inputs = vec![
            x,
            self.model.add_i32(axis as i32),
            self.model.add_i32(count as i32),
        ];
        let outs = self.emit_raw(op, OperationType::Split, inputs, templates)?;
        for (k, o) in outs.into_iter().enumerate() {
            let t = self.output(op, k)?;
            self.finish_output(t, o)?;
        }
        Ok(())
    }

    pub(super) fn pack(&mut self, op: &OperatorDesc) -> OResult<()> {
        let axis = op
            .fb
            .builtin_options_as_pack_options()
            .map_or(0, |o| o.axis());
        let mut values = Vec::with_capacity(op.inputs.len());
        for k in 0..op.inputs.len() {
            values.push(self.operand_in(op, k)?);
        }
        let Some(&first) = values.first() else {
            return invalid("has no inputs");
        };
        let first_t = self.input(op, 0)?;
        if self.is_scalar(first_t) {
            // Scalars are one-element vectors in the NN set: packing them is
            // concatenating those vectors.
            if axis != 0 && axis != -1 {
                return invalid(format!("axis {axis} is out of range for packing scalars"));
            }
            values.push(self.model.add_i32(0));
            self.emit_out(op, OperationType::Concatenation, values, 0)?;
            return Ok(());
        }
        let rank = self.dims(first).len();
        let axis = norm_axis(i64::from(axis), rank + 1)?;
        let mut inputs = vec![self.model.add_i32(axis as i32)];
        inputs.extend(values);
        self.emit_out(op, OperationType::Pack, inputs, 0)?;
        Ok(())
    }

    pub(super) fn concatenation(&mut self, op: &OperatorDesc) -> OResult<()> {
        let Some(o) = op.fb.builtin_options_as_concatenation_options() else {
            return invalid("has no ConcatenationOptions");
        };
        let act = self.act(o.fused_activation_function())?;
        let mut inputs = Vec::with_capacity(op.inputs.len() + 1);
        for k in 0..op.inputs.len() {
            inputs.push(self.operand_in(op, k)?);
        }
        let Some(&first) = inputs.first() else {
            return invalid("has no inputs");
        };
        let rank = self.dims(first).len();
        let axis = norm_axis(i64::from(o.axis()), rank)?;
        inputs.push(self.model.add_i32(axis as i32));
        self.emit_activated(op, OperationType::Concatenation, inputs, None, act)?;
        Ok(())
    }

    pub(super) fn pad(&mut self, op: &OperatorDesc, code: fb::BuiltinOperator) -> OResult<()> {
        let x = self.operand_in(op, 0)?;
        let rank = self.dims(x).len();
        let pads = self.const_in(op, 1)?.i32s()?;
        if pads.len() != 2 * rank {
            return invalid(format!(
                "paddings hold {} values for a rank-{rank} input",
                pads.len()
            ));
        }
        let paddings = self.model.add_constant(
            Operand::new(OperandType::TensorInt32, vec![rank as u32, 2]),
            bytemuck::cast_slice(&pads),
        );
        let xt = self.operand_type(x);
        let fill = match code {
            B::MIRROR_PAD => {
                let mode = op
                    .fb
                    .builtin_options_as_mirror_pad_options()
                    .map_or(fb::MirrorPadMode::REFLECT, |o| o.mode());
                let symmetric = match mode {
                    fb::MirrorPadMode::REFLECT => false,
                    fb::MirrorPadMode::SYMMETRIC => true,
                    other => return invalid(format!("unknown mirror pad mode {}", other.0)),
                };
                PadFill::Mirror { symmetric }
            }
            B::PADV2 if self.opt_input(op, 2).is_some() => {
                let c = self.const_in(op, 2)?;
                if c.element_count() != 1 {
                    return invalid("constant_values must hold one value");
                }
                // Quantized tensors pad with the stored (quantized) value, as TFLite does.
                PadFill::Value(if xt == OperandType::TensorFloat32 {
                    PadValue::Float(c.reals()?[0])
                } else {
                    PadValue::Int(c.i32s()?[0])
                })
            }
            _ => PadFill::Zeros,
        };
        let mut inputs = vec![x];
        inputs.extend(Pad { paddings, fill }.encode(&mut self.model));
        self.emit_out(op, fill.op_type(), inputs, 0)?;
        Ok(())
    }

    pub(super) fn depth_space(
        &mut self,
        op: &OperatorDesc,
        code: fb::BuiltinOperator,
    ) -> OResult<()> {
        let (nn_op, block) = if code == B::SPACE_TO_DEPTH {
            (
                OperationType::SpaceToDepth,
                op.fb
                    .builtin_options_as_space_to_depth_options()
                    .map(|o| o.block_size()),
            )
        } else {
            (
                OperationType::DepthToSpace,
                op.fb
                    .builtin_options_as_depth_to_space_options()
                    .map(|o| o.block_size()),
            )
        };
        let Some(block) = block.filter(|&b| b >= 1) else {
            return invalid("needs a block_size >= 1");
        };
        let x = self.operand_in(op, 0)?;
        let block = self.model.add_i32(block);
        self.emit_out(op, nn_op, vec![x, block], 0)?;
        Ok(())
    }

    pub(super) fn resize(&mut self, op: &OperatorDesc, code: fb::BuiltinOperator) -> OResult<()> {
        let (nn_op, align, half) = if code == B::RESIZE_BILINEAR {
            let o = op.fb.builtin_options_as_resize_bilinear_options();
            (
                OperationType::ResizeBilinear,
                o.is_some_and(|o| o.align_corners()),
                o.is_some_and(|o| o.half_pixel_centers()),
            )
        } else {
            let o = op.fb.builtin_options_as_resize_nearest_neighbor_options();
            (
                OperationType::ResizeNearestNeighbor,
                o.is_some_and(|o| o.align_corners()),
                o.is_some_and(|o| o.half_pixel_centers()),
            )
        };
        let x = self.operand_in(op, 0)?;
        let size = self.const_in(op, 1)?.i32s()?;
        let [height, width] = size.as_slice() else {
            return invalid(format!("size must hold [height, width], got {size:?}"));
        };
        // Cast bit for bit: a size below 1 reaches the model as written, and the shape
        // rule names it.
        let params = Resize2d {
            size: ResizeSize::Output {
                width: *width as u32,
                height: *height as u32,
            },
            nchw: false,
            align_corners: align,
            half_pixel_centers: half,
        };
        let mut inputs = vec![x];
        inputs.extend(params.encode(&mut self.model));
        self.emit_out(op, nn_op, inputs, 0)?;
        Ok(())
    }

    /// SHAPE is known at compile time: its output becomes a constant.
    pub(super) fn shape(&mut self, op: &OperatorDesc) -> OResult<()> {
        let t = self.input(op, 0)?;
        let dims = match self.value(t)? {
            Value::Const(c) => c.shape.clone(),
            Value::Operand(_) if self.is_scalar(t) => Vec::new(),
            Value::Operand(o) => {
                let dims = self.dims(o);
                if dims.contains(&0) {
                    return unsupported("SHAPE of a tensor whose dimensions are unknown");
                }
                dims
            }
        };
        let out_type = op
            .fb
            .builtin_options_as_shape_options()
            .map_or(fb::TensorType::INT32, |o| o.out_type());
        let data: Vec<u8> = match out_type {
            fb::TensorType::INT64 => dims
                .iter()
                .flat_map(|&d| i64::from(d).to_le_bytes())
                .collect(),
            _ => dims
                .iter()
                .flat_map(|&d| (d as i32).to_le_bytes())
                .collect(),
        };
        let ty = if out_type == fb::TensorType::INT64 {
            out_type
        } else {
            fb::TensorType::INT32
        };
        self.set_const(
            op,
            0,
            Const {
                ty,
                shape: vec![dims.len() as u32],
                data: data.into(),
                quant: None,
            },
        )
    }

    /// DENSIFY of a sparse constant: the reader densified it already.
    pub(super) fn densify(&mut self, op: &OperatorDesc) -> OResult<()> {
        match self.value(self.input(op, 0)?)? {
            Value::Const(c) => self.set_const(op, 0, (*c).clone()),
            Value::Operand(_) => unsupported("DENSIFY of a run-time value"),
        }
    }
}
