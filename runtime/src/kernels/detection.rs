//! NON_MAX_SUPPRESSION: the selection is `nnc_formats::nn::ops::select_boxes`, which the
//! shape rule also runs to size the output (its length depends on the data).

use super::{Kernel, KernelContext, OpInfo};
use crate::error::{Result, RuntimeError};
use nnc_formats::nn::ops::{NmsBoxes, select_boxes};

pub(crate) fn build_non_max_suppression(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    Ok(Box::new(NonMaxSuppression {
        center_point_box: info.bool(5, "center_point_box")?,
    }))
}

struct NonMaxSuppression {
    center_point_box: bool,
}

impl Kernel for NonMaxSuppression {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        let boxes = ctx.input(0)?;
        let scores = ctx.input(1)?;
        let one_f32 =
            |i: usize| -> Result<Option<f32>> { Ok(ctx.input(i)?.f32()?.first().copied()) };
        let max_per_class = ctx.input(2)?.i32()?.first().copied().unwrap_or(0).max(0) as usize;
        let iou_threshold = one_f32(3)?.unwrap_or(0.0);
        let score_threshold = one_f32(4)?;
        let (bs, ss) = (boxes.shape, scores.shape);
        if bs.len() != 3 || ss.len() != 3 || bs[2] != 4 || bs[0] != ss[0] || bs[1] != ss[2] {
            return Err(RuntimeError::kernel(format!(
                "boxes {bs:?} and scores {ss:?} do not match"
            )));
        }
        let selected = select_boxes(&NmsBoxes {
            boxes: boxes.f32()?,
            scores: scores.f32()?,
            batches: bs[0],
            classes: ss[1],
            count: bs[1],
            max_per_class,
            iou_threshold,
            score_threshold,
            center_point_box: self.center_point_box,
        });
        let out = ctx.output(0)?;
        if out.shape != [selected.len(), 3] {
            return Err(RuntimeError::kernel(format!(
                "output shape {:?} does not hold the {} selected boxes",
                out.shape,
                selected.len()
            )));
        }
        for (dst, row) in out.i32_mut()?.chunks_exact_mut(3).zip(&selected) {
            dst.copy_from_slice(row);
        }
        Ok(())
    }
}

pub(crate) fn build_unique(info: &OpInfo) -> Result<Box<dyn Kernel>> {
    let element_size = info
        .input_type(0)?
        .element_size()
        .ok_or_else(|| info.unsupported("an input without a fixed element size"))?;
    Ok(Box::new(Unique {
        flatten: info.bool(2, "flatten")?,
        axis: info.i32(1, "axis")?,
        sorted: info.bool(3, "sorted")?,
        element_size,
    }))
}

/// UNIQUE: the distinct slices (`nnc_formats::nn::ops::unique_slices`, which the shape
/// rule also runs to size the outputs), copied in output order, with the first
/// occurrences, the inverse and the counts.
struct Unique {
    flatten: bool,
    axis: i32,
    sorted: bool,
    element_size: usize,
}

impl Kernel for Unique {
    fn run(&self, ctx: &mut KernelContext) -> Result<()> {
        use nnc_formats::nn::ops::{decoded_values, unique_slices, unique_view};
        let input = ctx.input(0)?;
        let dims = input.shape.to_vec();
        let axis = (!self.flatten).then(|| {
            let r = dims.len() as i32;
            (if self.axis < 0 {
                self.axis + r
            } else {
                self.axis
            }) as usize
        });
        let (outer, n, inner) = unique_view(&dims, axis);
        let values = decoded_values(input.operand_type, input.bytes);
        let found = unique_slices(&values, outer, n, inner, self.sorted);
        let bytes = input.bytes.to_vec();
        let u = found.first.len();
        let size = self.element_size;
        {
            let out = ctx.output(0)?;
            let expected = u * outer * inner * size;
            if out.bytes.len() != expected {
                return Err(RuntimeError::kernel(format!(
                    "output 0 holds {} bytes, the {u} distinct slices need {expected}",
                    out.bytes.len()
                )));
            }
            // Output [outer, u, inner]: slice k is input slice first[k].
            for o in 0..outer {
                for (k, &j) in found.first.iter().enumerate() {
                    let src = ((o * n + j) * inner) * size;
                    let dst = ((o * u + k) * inner) * size;
                    out.bytes[dst..dst + inner * size]
                        .copy_from_slice(&bytes[src..src + inner * size]);
                }
            }
        }
        for (k, list) in [(1, &found.first), (2, &found.inverse), (3, &found.counts)] {
            let out = ctx.output(k)?;
            let dst = out.i32_mut()?;
            if dst.len() != list.len() {
                return Err(RuntimeError::kernel(format!(
                    "output {k} holds {} values, {} are needed",
                    dst.len(),
                    list.len()
                )));
            }
            for (d, &v) in dst.iter_mut().zip(list.iter()) {
                *d = v as i32;
            }
        }
        Ok(())
    }
}
