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
