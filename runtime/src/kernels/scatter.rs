//! The indexed scatters of nnc's extension (`docs/EXTENSIONS.md`): the output is a copy
//! of the input with the updates written (or combined by the reduction) where the
//! indices point.
//!
//! - SCATTER_ELEMENTS: `indices` and `updates` have the input's rank; update `u[i]` lands
//!   on `out[i with i[axis] replaced by indices[i]]`.
//! - SCATTER_ND: `indices` of shape `[n..., k]` names, per index tuple, the slice
//!   `out[indices[n..., :], ...]` that the update slice `updates[n..., ...]` lands on.
//!
//! Updates apply in order, so with reduction none the last of duplicate indices wins
//! (ONNX leaves the order undefined). Reduction none moves elements without looking at
//! them (any element type); add, mul, max and min compute on TENSOR_FLOAT32 and
//! TENSOR_INT32 (int32 arithmetic wraps). Negative indices count from the end of their
//! axis; an index outside it is an execution error naming it, never a write outside the
//! output.

use nnc_formats::nn::{OperandType, ScatterReduction};

use super::util::{resolve_index, strides_of};
use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};
use crate::tensor::TensorRef;

/// Which scatter an operation is, chosen where it is routed here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScatterKind {
    Elements,
    Nd,
}

pub(crate) fn build(info: &OpInfo, kind: ScatterKind) -> Result<Box<dyn Kernel>> {
    let t = info.input_type(0)?;
    let element_size = t
        .element_size()
        .ok_or_else(|| info.unsupported("an input without a fixed element size"))?;
    let (target, reduction_input) = match kind {
        ScatterKind::Elements => (
            Target::Elements {
                axis: info.i32(3, "axis")?,
            },
            4,
        ),
        ScatterKind::Nd => (Target::Nd, 3),
    };
    let code = info.i32(reduction_input, "reduction")?;
    let reduction = ScatterReduction::from_code(code)
        .ok_or_else(|| info.invalid(format!("unknown reduction code {code}")))?;
    if reduction != ScatterReduction::None
        && !matches!(t, OperandType::TensorFloat32 | OperandType::TensorInt32)
    {
        return Err(info.unsupported(format!("reduction {reduction:?} on {t} data")));
    }
    Ok(Box::new(Scatter {
        target,
        reduction,
        element_size,
    }))
}

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(RuntimeError::kernel(message))
}

enum Target {
    Elements { axis: i32 },
    Nd,
}

impl Target {
    /// Checks the shapes and calls `visit(dst, src, len)` for every update in order: the
    /// `len` update elements from `src` land on the output elements from `dst`. Every
    /// range lies inside the output (`shape`) and the updates.
    fn for_each(
        &self,
        shape: &[usize],
        indices_t: &TensorRef,
        updates_shape: &[usize],
        mut visit: impl FnMut(usize, usize, usize),
    ) -> Result<()> {
        let indices = indices_t.i32()?;
        let ishape = indices_t.shape;
        let r = shape.len();
        let strides = strides_of(shape);
        match *self {
            Target::Elements { axis } => {
                let a = super::util::axis(axis, r)?;
                if ishape.len() != r {
                    return err("indices must have the input's rank");
                }
                if updates_shape != ishape {
                    return err(format!(
                        "updates {updates_shape:?} must have the indices' shape {ishape:?}"
                    ));
                }
                for (d, (&i, &x)) in ishape.iter().zip(shape).enumerate() {
                    if d != a && i > x {
                        return err(format!(
                            "indices dimension {d} ({i}) exceeds the input's ({x})"
                        ));
                    }
                }
                let mut position = vec![0usize; r];
                for (k, &index) in indices.iter().enumerate() {
                    let along = resolve_index(index, shape[a], "SCATTER_ELEMENTS")?;
                    let mut dst = 0;
                    for d in 0..r {
                        let i = if d == a { along } else { position[d] };
                        dst += i * strides[d];
                    }
                    visit(dst, k, 1);
                    for d in (0..r).rev() {
                        position[d] += 1;
                        if position[d] < ishape[d] {
                            break;
                        }
                        position[d] = 0;
                    }
                }
            }
            Target::Nd => {
                let Some((&depth, tuple_dims)) = ishape.split_last() else {
                    return err("indices must have rank 1 or more");
                };
                if depth > r {
                    return err(format!(
                        "index tuples of length {depth} do not fit an input of rank {r}"
                    ));
                }
                let mut expected = tuple_dims.to_vec();
                expected.extend_from_slice(&shape[depth..]);
                if expected.is_empty() {
                    // One tuple naming one element: a one-element update.
                    expected.push(1);
                }
                if updates_shape != expected.as_slice() {
                    return err(format!(
                        "updates {updates_shape:?} must have the shape {expected:?}"
                    ));
                }
                let slice: usize = shape[depth..].iter().product();
                let tuples: usize = tuple_dims.iter().product();
                if depth == 0 {
                    // Every (empty) tuple names the whole input.
                    for t in 0..tuples {
                        visit(0, t * slice, slice);
                    }
                    return Ok(());
                }
                for (t, tuple) in indices.chunks_exact(depth).enumerate() {
                    let mut dst = 0;
                    for (j, &index) in tuple.iter().enumerate() {
                        dst += resolve_index(index, shape[j], "SCATTER_ND")? * strides[j];
                    }
                    visit(dst, t * slice, slice);
                }
            }
        }
        Ok(())
    }
}

struct Scatter {
    target: Target,
    reduction: ScatterReduction,
    element_size: usize,
}

/// Numbers a reduction combines.
trait Number: Copy + PartialOrd + bytemuck::Pod {
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
}

impl Number for f32 {
    fn add(self, other: f32) -> f32 {
        self + other
    }
    fn mul(self, other: f32) -> f32 {
        self * other
    }
}

impl Number for i32 {
    fn add(self, other: i32) -> i32 {
        self.wrapping_add(other)
    }
    fn mul(self, other: i32) -> i32 {
        self.wrapping_mul(other)
    }
}

fn combine<T: Number>(reduction: ScatterReduction, old: T, update: T) -> T {
    match reduction {
        ScatterReduction::None => update,
        ScatterReduction::Add => old.add(update),
        ScatterReduction::Mul => old.mul(update),
        // The element stays unless the update is strictly greater (smaller).
        ScatterReduction::Max => {
            if update > old {
                update
            } else {
                old
            }
        }
        ScatterReduction::Min => {
            if update < old {
                update
            } else {
                old
            }
        }
    }
}

/// Combines the updates into `out` (already a copy of the input) as `target` places them.
fn reduce_into<T: Number>(
    target: &Target,
    reduction: ScatterReduction,
    shape: &[usize],
    indices: &TensorRef,
    updates_shape: &[usize],
    out: &mut [T],
    updates: &[T],
) -> Result<()> {
    target.for_each(shape, indices, updates_shape, |dst, src, len| {
        for (o, &u) in out[dst..dst + len].iter_mut().zip(&updates[src..src + len]) {
            *o = combine(reduction, *o, u);
        }
    })
}

impl Kernel for Scatter {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let input = ctx.input(0)?;
        let indices = ctx.input(1)?;
        let updates = ctx.input(2)?;
        let es = self.element_size;
        if input.bytes.len() != input.element_count() * es
            || updates.bytes.len() != updates.element_count() * es
            || indices.bytes.len() != indices.element_count() * 4
        {
            return err("buffer sizes do not match the shapes");
        }
        let out = ctx.output(0)?;
        if out.bytes.len() != input.bytes.len() {
            return err("the output must have the input's size");
        }
        out.bytes.copy_from_slice(input.bytes);
        let shape = input.shape;
        match (self.reduction, input.operand_type) {
            (ScatterReduction::None, _) => {
                let src_bytes = updates.bytes;
                let out_bytes = &mut *out.bytes;
                self.target
                    .for_each(shape, &indices, updates.shape, |dst, src, len| {
                        out_bytes[dst * es..(dst + len) * es]
                            .copy_from_slice(&src_bytes[src * es..(src + len) * es]);
                    })
            }
            (r, OperandType::TensorFloat32) => reduce_into(
                &self.target,
                r,
                shape,
                &indices,
                updates.shape,
                out.f32_mut()?,
                updates.f32()?,
            ),
            (r, OperandType::TensorInt32) => reduce_into(
                &self.target,
                r,
                shape,
                &indices,
                updates.shape,
                out.i32_mut()?,
                updates.i32()?,
            ),
            (r, t) => err(format!("reduction {r:?} on {t} data")),
        }
    }
}

#[cfg(test)]
mod tests {
    use nnc_formats::nn::{Lifetime, Operand, Operation, OperationType};

    use super::*;
    use crate::kernels::{PreparedWeights, Scratch};
    use crate::tensor::TensorMut;

    /// Runs one scatter on 4-byte elements (`data` and `updates` as f32 or i32 bit
    /// patterns) through the kernel the runtime builds.
    #[allow(clippy::too_many_arguments)]
    fn run(
        op: OperationType,
        t: OperandType,
        shape: &[usize],
        data: &[u32],
        index_shape: &[usize],
        indices: &[i32],
        updates_shape: &[usize],
        updates: &[u32],
        axis: i32,
        reduction: ScatterReduction,
    ) -> Result<Vec<u32>> {
        let dims = |s: &[usize]| s.iter().map(|&d| d as u32).collect::<Vec<_>>();
        let scalar = |_: i32| {
            let mut o = Operand::new(OperandType::Int32, vec![]);
            o.lifetime = Lifetime::ConstantCopy;
            o
        };
        let mut operands = vec![
            Operand::new(t, dims(shape)),
            Operand::new(OperandType::TensorInt32, dims(index_shape)),
            Operand::new(t, dims(updates_shape)),
        ];
        let mut values = vec![];
        if op == OperationType::ScatterElements {
            operands.push(scalar(axis));
            values.push((3u32, axis.to_le_bytes()));
        }
        values.push((operands.len() as u32, (reduction as i32).to_le_bytes()));
        operands.push(scalar(0));
        operands.push(Operand::new(t, dims(shape)));
        let n = operands.len() as u32;
        let operation = Operation {
            op_type: op,
            inputs: (0..n - 1).collect(),
            outputs: vec![n - 1],
            source: String::new(),
        };
        let kernel = crate::kernels::build(&operation, &operands, |i| {
            values
                .iter()
                .find(|(k, _)| *k == i)
                .map(|(_, v)| v.as_slice())
        })?;
        let mut out = vec![0u32; data.len()];
        let weights = PreparedWeights::empty();
        let mut scratch = Scratch::new();
        let tensor = |shape, bytes, operand_type| TensorRef {
            operand_type,
            shape,
            bytes,
            scale: 0.0,
            zero_point: 0,
        };
        let mut ctx = KernelContext {
            inputs: vec![
                Some(tensor(shape, bytemuck::cast_slice(data), t)),
                Some(tensor(
                    index_shape,
                    bytemuck::cast_slice(indices),
                    OperandType::TensorInt32,
                )),
                Some(tensor(updates_shape, bytemuck::cast_slice(updates), t)),
            ],
            outputs: vec![TensorMut {
                operand_type: t,
                shape,
                bytes: bytemuck::cast_slice_mut(&mut out),
                scale: 0.0,
                zero_point: 0,
                row_stride: None,
            }],
            weights: &weights,
            scratch: &mut scratch,
            threads: 1,
        };
        kernel.run(&mut ctx)?;
        Ok(out)
    }

    fn f(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn i(v: &[i32]) -> Vec<u32> {
        v.iter().map(|&x| x as u32).collect()
    }

    #[test]
    fn scatter_elements_replaces_along_the_axis_with_negative_indices() {
        // ONNX's example: data [[1, 2, 3, 4, 5]], indices [[1, 3]], axis 1.
        let data = f(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        let got = run(
            OperationType::ScatterElements,
            OperandType::TensorFloat32,
            &[1, 5],
            &data,
            &[1, 2],
            &[1, -2],
            &[1, 2],
            &f(&[1.1, 2.1]),
            1,
            ScatterReduction::None,
        )
        .unwrap();
        assert_eq!(got, f(&[1.0, 1.1, 3.0, 2.1, 5.0]));
        // Axis 0 of a 3x3 matrix; duplicate indices: the last update wins.
        let got = run(
            OperationType::ScatterElements,
            OperandType::TensorInt32,
            &[3, 3],
            &i(&[0; 9]),
            &[2, 3],
            &[1, 0, 2, 0, 2, -1],
            &[2, 3],
            &i(&[10, 11, 12, 20, 21, 22]),
            0,
            ScatterReduction::None,
        )
        .unwrap();
        assert_eq!(got, i(&[20, 11, 0, 10, 0, 0, 0, 21, 22]));
    }

    #[test]
    fn scatter_elements_reductions() {
        let data = [1.0, 2.0, 3.0, 4.0, 5.0];
        let indices = [1, 1, -1];
        let updates = [1.5, 4.0, 0.5];
        let expected = [
            (ScatterReduction::Add, [1.0, 7.5, 3.0, 4.0, 5.5]),
            (ScatterReduction::Mul, [1.0, 12.0, 3.0, 4.0, 2.5]),
            (ScatterReduction::Max, [1.0, 4.0, 3.0, 4.0, 5.0]),
            (ScatterReduction::Min, [1.0, 1.5, 3.0, 4.0, 0.5]),
        ];
        for (reduction, want) in expected {
            let got = run(
                OperationType::ScatterElements,
                OperandType::TensorFloat32,
                &[1, 5],
                &f(&data),
                &[1, 3],
                &indices,
                &[1, 3],
                &f(&updates),
                -1,
                reduction,
            )
            .unwrap();
            assert_eq!(got, f(&want), "{reduction:?}");
        }
        // int32 add wraps.
        let got = run(
            OperationType::ScatterElements,
            OperandType::TensorInt32,
            &[2],
            &i(&[i32::MAX, 7]),
            &[2],
            &[0, 1],
            &[2],
            &i(&[1, -9]),
            0,
            ScatterReduction::Add,
        )
        .unwrap();
        assert_eq!(got, i(&[i32::MIN, -2]));
    }

    #[test]
    fn scatter_nd_slices_and_elements() {
        // Rows of a 4x2 matrix: rows 3 and -4 (= 0) replaced.
        let data: Vec<i32> = (0..8).collect();
        let got = run(
            OperationType::ScatterNd,
            OperandType::TensorInt32,
            &[4, 2],
            &i(&data),
            &[2, 1],
            &[3, -4],
            &[2, 2],
            &i(&[30, 31, 40, 41]),
            0,
            ScatterReduction::None,
        )
        .unwrap();
        assert_eq!(got, i(&[40, 41, 2, 3, 4, 5, 30, 31]));
        // Single elements with each reduction: element (0, 1) = 2 gets 5 then 10,
        // element (1, 1) = 3 gets 2.
        let expected = [
            (ScatterReduction::None, [1, 10, 2, 2]),
            (ScatterReduction::Add, [1, 17, 2, 5]),
            (ScatterReduction::Mul, [1, 100, 2, 6]),
            (ScatterReduction::Max, [1, 10, 2, 3]),
            (ScatterReduction::Min, [1, 2, 2, 2]),
        ];
        for (reduction, want) in expected {
            let got = run(
                OperationType::ScatterNd,
                OperandType::TensorInt32,
                &[2, 2],
                &i(&[1, 2, 2, 3]),
                &[3, 2],
                &[0, 1, 1, -1, 0, 1],
                &[3],
                &i(&[5, 2, 10]),
                0,
                reduction,
            )
            .unwrap();
            assert_eq!(got, i(&want), "{reduction:?}");
        }
    }

    #[test]
    fn scatter_nd_one_tuple_one_element() {
        let got = run(
            OperationType::ScatterNd,
            OperandType::TensorFloat32,
            &[2, 3],
            &f(&[0.0; 6]),
            &[2],
            &[1, -1],
            &[1],
            &f(&[9.0]),
            0,
            ScatterReduction::None,
        )
        .unwrap();
        assert_eq!(got, f(&[0.0, 0.0, 0.0, 0.0, 0.0, 9.0]));
    }

    #[test]
    fn out_of_range_indices_fail_naming_the_index() {
        let e = run(
            OperationType::ScatterElements,
            OperandType::TensorFloat32,
            &[2, 3],
            &f(&[0.0; 6]),
            &[1, 1],
            &[3],
            &[1, 1],
            &f(&[1.0]),
            1,
            ScatterReduction::None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("index 3 is out of range"), "{e}");
        let e = run(
            OperationType::ScatterNd,
            OperandType::TensorFloat32,
            &[2, 3],
            &f(&[0.0; 6]),
            &[1, 2],
            &[1, -4],
            &[1],
            &f(&[1.0]),
            0,
            ScatterReduction::Add,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("index -4 is out of range"), "{e}");
    }
}
