//! SOFTMAX, MEAN / SUM / REDUCE_MAX, ARG_MAX / ARG_MIN and BATCH_MATMUL.

use nnc_formats::nn::ops::{Reduce, Softmax};
use nnc_formats::nn::{OperandType, OperationType};

use super::super::model::OperatorDesc;
use super::super::schema_generated::tflite as fb;
use super::{Lowerer, OResult, Role, Value, invalid, unsupported};

use fb::BuiltinOperator as B;

/// Normalizes a possibly negative axis against `rank`.
pub(super) fn norm_axis(axis: i64, rank: usize) -> OResult<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return invalid(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

impl Lowerer<'_, '_> {
    pub(super) fn softmax(&mut self, op: &OperatorDesc) -> OResult<()> {
        let beta = op
            .fb
            .builtin_options_as_softmax_options()
            .map_or(1.0, |o| o.beta());
        if !(beta.is_finite() && beta > 0.0) {
            return unsupported(format!(
                "SOFTMAX with beta {beta} is not supported (beta must be > 0)"
            ));
        }
        let x = self.operand_in(op, 0)?;
        let mut inputs = vec![x];
        inputs.extend(Softmax { beta, axis: -1 }.encode(OperationType::Softmax, &mut self.model));
        self.emit_out(op, OperationType::Softmax, inputs, 0)?;
        Ok(())
    }

    pub(super) fn reduce(&mut self, op: &OperatorDesc, code: fb::BuiltinOperator) -> OResult<()> {
        let keep = op
            .fb
            .builtin_options_as_reducer_options()
            .is_some_and(|o| o.keep_dims());
        let x = self.operand_in(op, 0)?;
        let rank = self.dims(x).len();
        let mut axes = Vec::new();
        for a in self.const_in(op, 1)?.ints()? {
            let a = norm_axis(a, rank)? as i32;
            if !axes.contains(&a) {
                axes.push(a);
            }
        }
        if axes.is_empty() {
            // Reducing over no axis is the identity; RESHAPE keeps the graph simple.
            let dims = self.dims(x);
            let shape = self.shape_vector(&dims);
            self.emit_out(op, OperationType::Reshape, vec![x, shape], 0)?;
            return Ok(());
        }
        let axes = self.model.add_i32_vector(&axes);
        let nn_op = match code {
            B::MEAN => OperationType::Mean,
            B::SUM => OperationType::ReduceSum,
            _ => OperationType::ReduceMax,
        };
        let mut inputs = vec![x];
        inputs.extend(
            Reduce {
                axes,
                keep_dims: keep,
            }
            .encode(nn_op, &mut self.model),
        );
        self.emit_out(op, nn_op, inputs, 0)?;
        Ok(())
    }

    pub(super) fn arg_reduce(
        &mut self,
        op: &OperatorDesc,
        code: fb::BuiltinOperator,
    ) -> OResult<()> {
        let x = self.operand_in(op, 0)?;
        let rank = self.dims(x).len();
        let axis = self.const_in(op, 1)?.ints()?;
        let [axis] = axis.as_slice() else {
            return invalid(format!("axis must hold one value, got {axis:?}"));
        };
        let axis = norm_axis(*axis, rank)?;
        let axis = self.model.add_i32(axis as i32);
        let nn_op = if code == B::ARG_MAX {
            OperationType::Argmax
        } else {
            OperationType::Argmin
        };
        self.emit_out(op, nn_op, vec![x, axis], 0)?;
        Ok(())
    }

    /// BATCH_MATMUL. The NN operation wants equal ranks and equal batch dimensions;
    /// TFLite broadcasts both, so a lower-rank side gains leading unit dimensions and a
    /// unit batch dimension is tiled.
    pub(super) fn batch_matmul(&mut self, op: &OperatorDesc) -> OResult<()> {
        let (adj_x, adj_y) = op
            .fb
            .builtin_options_as_batch_mat_mul_options()
            .map_or((false, false), |o| (o.adj_x(), o.adj_y()));
        let a = self.operand_in(op, 0)?;
        let a_type = self.operand_type(a);
        let bt = self.input(op, 1)?;
        // Float lhs with float16 or quantized constant weights: weights become float32.
        let b = match self.value(bt)? {
            Value::Const(_) if a_type == OperandType::TensorFloat32 => {
                self.operand_of(bt, Role::Float)?
            }
            _ => self.operand_of(bt, Role::Plain)?,
        };
        let b_type = self.operand_type(b);
        if a_type != b_type {
            return unsupported(format!("mixes {a_type} and {b_type} operands"));
        }
        let (mut da, mut db) = (self.dims(a), self.dims(b));
        let rank = da.len().max(db.len());
        if !(2..=4).contains(&da.len()) || !(2..=4).contains(&db.len()) {
            return unsupported(format!(
                "operands of rank {} and {} (the NN set takes ranks 2 to 4)",
                da.len(),
                db.len()
            ));
        }
        let widen = |d: &mut Vec<u32>| {
            while d.len() < rank {
                d.insert(0, 1);
            }
        };
        widen(&mut da);
        widen(&mut db);
        let a = self.reshape_temp(op, a, &da)?;
        let b = self.reshape_temp(op, b, &db)?;
        let (mut ma, mut mb) = (vec![1i32; rank], vec![1i32; rank]);
        for i in 0..rank - 2 {
            match (da[i], db[i]) {
                (x, y) if x == y => {}
                (1, y) => ma[i] = y as i32,
                (x, 1) => mb[i] = x as i32,
                (x, y) => {
                    return invalid(format!("batch dimensions {x} and {y} do not broadcast"));
                }
            }
        }
        let a = self.tile(op, a, &ma)?;
        let b = self.tile(op, b, &mb)?;
        let (ax, ay) = (self.model.add_bool(adj_x), self.model.add_bool(adj_y));
        self.emit_out(op, OperationType::BatchMatmul, vec![a, b, ax, ay], 0)?;
        Ok(())
    }

    fn tile(&mut self, op: &OperatorDesc, x: u32, multiples: &[i32]) -> OResult<u32> {
        if multiples.iter().all(|&m| m == 1) {
            return Ok(x);
        }
        let m = self.model.add_i32_vector(multiples);
        let template = self.operand(x).clone();
        self.emit_temp(op, OperationType::Tile, vec![x, m], template)
    }
}
