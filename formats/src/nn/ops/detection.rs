//! Detection post-processing: NON_MAX_SUPPRESSION (ONNX's NonMaxSuppression).
//!
//! Its result's length depends on the data. The shape rule runs the selection when the
//! inputs' values are known (always at run time) to size the output, and the kernel runs
//! it again to fill it: [`select_boxes`] is the one definition both use.

use super::context::*;
use super::roles::Role as R;
use super::{OutputShape, Result};
use crate::nn::model::Operand;
use crate::nn::types::{OperandType, OperationType};

pub(super) const NMS_ROLES: &[R] = &[
    R::Boxes,
    R::Scores,
    R::MaxOutputBoxes,
    R::IouThreshold,
    R::ScoreThreshold,
    R::CenterPointBox,
];

/// The inputs of one selection, as NON_MAX_SUPPRESSION reads them.
#[derive(Clone, Copy, Debug)]
pub struct NmsBoxes<'a> {
    /// `[batches, boxes, 4]`: corners `(y1, x1, y2, x2)` (either order), or with
    /// `center_point_box` `(x_center, y_center, width, height)`.
    pub boxes: &'a [f32],
    /// `[batches, classes, boxes]`.
    pub scores: &'a [f32],
    pub batches: usize,
    pub classes: usize,
    pub count: usize,
    pub max_per_class: usize,
    pub iou_threshold: f32,
    /// Boxes scoring at or below it are never selected.
    pub score_threshold: Option<f32>,
    pub center_point_box: bool,
}

/// The selected `(batch, class, box)` triples: per batch and class, boxes in decreasing
/// score (ties: lower index first), each kept unless its overlap (intersection over
/// union) with one kept before exceeds `iou_threshold`, at most `max_per_class` of them.
pub fn select_boxes(b: &NmsBoxes) -> Vec<[i32; 3]> {
    let corners = |batch: usize, i: usize| -> [f32; 4] {
        let v = &b.boxes[(batch * b.count + i) * 4..][..4];
        if b.center_point_box {
            let (hw, hh) = (v[2] / 2.0, v[3] / 2.0);
            [v[1] - hh, v[0] - hw, v[1] + hh, v[0] + hw]
        } else {
            [
                v[0].min(v[2]),
                v[1].min(v[3]),
                v[0].max(v[2]),
                v[1].max(v[3]),
            ]
        }
    };
    let iou = |a: [f32; 4], c: [f32; 4]| -> f32 {
        let area = |r: [f32; 4]| (r[2] - r[0]) * (r[3] - r[1]);
        let (area_a, area_c) = (area(a), area(c));
        if area_a <= 0.0 || area_c <= 0.0 {
            return 0.0;
        }
        let h = (a[2].min(c[2]) - a[0].max(c[0])).max(0.0);
        let w = (a[3].min(c[3]) - a[1].max(c[1])).max(0.0);
        let inter = h * w;
        inter / (area_a + area_c - inter)
    };
    let mut selected = Vec::new();
    if b.max_per_class == 0 {
        return selected;
    }
    for batch in 0..b.batches {
        for class in 0..b.classes {
            let scores = &b.scores[(batch * b.classes + class) * b.count..][..b.count];
            let mut order: Vec<usize> = (0..b.count)
                .filter(|&i| b.score_threshold.is_none_or(|t| scores[i] > t))
                .collect();
            // Stable: equal scores keep the lower index first.
            order.sort_by(|&i, &j| scores[j].total_cmp(&scores[i]));
            let mut kept: Vec<[f32; 4]> = Vec::new();
            for i in order {
                let r = corners(batch, i);
                if kept.iter().all(|&k| iou(k, r) <= b.iou_threshold) {
                    kept.push(r);
                    selected.push([batch as i32, class as i32, i as i32]);
                    if kept.len() == b.max_per_class {
                        break;
                    }
                }
            }
        }
    }
    selected
}

/// NonMaxSuppression: `[selected, 3]` int32 `(batch, class, box)` rows; `selected` is
/// counted when every input's value is known (always at run time), 0 (unknown)
/// otherwise. The thresholds and the per-class limit are one-element tensors (computed
/// at run time in ONNX's models), `center_point_box` a constant BOOL.
pub(super) fn non_max_suppression(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[6])?;
    expect_outputs(outputs, 1)?;
    let boxes = ctx.tensor(0, "boxes", &[OperandType::TensorFloat32])?;
    let scores = ctx.tensor(1, "scores", &[OperandType::TensorFloat32])?;
    let max_out = ctx.tensor(2, "max_output_boxes", &[OperandType::TensorInt32])?;
    let iou = ctx.tensor(3, "iou_threshold", &[OperandType::TensorFloat32])?;
    let score = ctx.tensor(4, "score_threshold", &[OperandType::TensorFloat32])?;
    let center_point_box = ctx.bool(5, "center_point_box")?;
    let (bd, sd) = (&boxes.dimensions, &scores.dimensions);
    if bd.len() != 3 || (bd[2] != 0 && bd[2] != 4) {
        return Err(param_err(0, "boxes", "must be [batches, boxes, 4]"));
    }
    if sd.len() != 3 {
        return Err(param_err(1, "scores", "must be [batches, classes, boxes]"));
    }
    let agree = |a: u32, b: u32| a == 0 || b == 0 || a == b;
    if !agree(bd[0], sd[0]) || !agree(bd[1], sd[2]) {
        return Err(param_err(
            1,
            "scores",
            format!(
                "{} does not match boxes {}",
                crate::nn::model::dims_to_string(sd),
                crate::nn::model::dims_to_string(bd)
            ),
        ));
    }
    for (index, role, operand) in [
        (2, "max_output_boxes", max_out),
        (3, "iou_threshold", iou),
        (4, "score_threshold", score),
    ] {
        if operand.dimensions.iter().any(|&d| d > 1) {
            return Err(param_err(index, role, "must hold one value"));
        }
    }
    let known = !bd.contains(&0) && !sd.contains(&0);
    let values = (0..5).map(|i| ctx.value(i)).collect::<Option<Vec<&[u8]>>>();
    let selected = match values {
        Some(v) if known => {
            let f32s = |bytes: &[u8]| -> Vec<f32> {
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            };
            let (boxes_v, scores_v) = (f32s(v[0]), f32s(v[1]));
            let first = |bytes: &[u8]| bytes.get(..4).map(|c| [c[0], c[1], c[2], c[3]]);
            let max_per_class = first(v[2]).map_or(0, i32::from_le_bytes).max(0) as usize;
            let iou_threshold = first(v[3]).map_or(0.0, f32::from_le_bytes);
            let score_threshold = first(v[4]).map(f32::from_le_bytes);
            let n = select_boxes(&NmsBoxes {
                boxes: &boxes_v,
                scores: &scores_v,
                batches: bd[0] as usize,
                classes: sd[1] as usize,
                count: bd[1] as usize,
                max_per_class,
                iou_threshold,
                score_threshold,
                center_point_box,
            })
            .len();
            if n == 0 {
                return Err(param_err(
                    1,
                    "scores",
                    "select no box: the result would be empty, and empty tensors are not \
                     supported",
                ));
            }
            n as u32
        }
        _ => 0,
    };
    single(OperandType::TensorInt32, vec![selected, 3])
}
