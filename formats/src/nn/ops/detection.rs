//! Operations whose result's length depends on the data: NON_MAX_SUPPRESSION (ONNX's
//! NonMaxSuppression) and UNIQUE.
//!
//! The shape rule runs the computation when the inputs' values are known (always at run
//! time) to size the outputs, and the kernel runs it again to fill them:
//! [`select_boxes`] and [`unique_slices`] are the one definition both use.

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
            // Values that disagree with their dimensions (a malformed constant) are
            // refused here, before the selection indexes them.
            let product = |d: &[u32]| d.iter().map(|&x| x as usize).product::<usize>();
            if boxes_v.len() != product(bd) || scores_v.len() != product(sd) {
                return Err(param_err(0, "boxes", "values do not match the dimensions"));
            }
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

pub(super) const UNIQUE_ROLES: &[R] = &[R::Input, R::Axis, R::Flatten, R::Sorted];

/// What UNIQUE finds: the distinct slices along the axis (elements when flattened), in
/// output order, each named by its first occurrence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unique {
    /// The first occurrence of each output slice, in output order.
    pub first: Vec<usize>,
    /// For each input slice, the output slice equal to it.
    pub inverse: Vec<usize>,
    /// How many input slices equal each output slice.
    pub counts: Vec<usize>,
}

/// The distinct slices of data viewed as `[outer, n, inner]` (slice `j` is every
/// `(o, j, i)`), sorted ascending (lexicographically, by value; -0 equals 0) or in order
/// of first occurrence. `values` holds the elements decoded, so every type compares
/// alike.
pub fn unique_slices(values: &[f64], outer: usize, n: usize, inner: usize, sorted: bool) -> Unique {
    let slice = |j: usize| -> Vec<f64> {
        (0..outer)
            .flat_map(|o| (0..inner).map(move |i| (o, i)))
            .map(|(o, i)| values[(o * n + j) * inner + i] + 0.0)
            .collect()
    };
    let slices: Vec<Vec<f64>> = (0..n).map(slice).collect();
    let cmp = |a: &Vec<f64>, b: &Vec<f64>| {
        a.iter()
            .zip(b)
            .map(|(x, y)| x.total_cmp(y))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    };
    // Sorted by value, equal slices by position: each run of equal slices is one output
    // slice, first occurrence first.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| cmp(&slices[a], &slices[b]).then(a.cmp(&b)));
    let mut groups: Vec<(usize, usize)> = Vec::new(); // (first occurrence, count)
    let mut group_of = vec![0; n];
    for (pos, &j) in order.iter().enumerate() {
        if pos == 0 || cmp(&slices[order[pos - 1]], &slices[j]).is_ne() {
            groups.push((j, 0));
        }
        let g = groups.len() - 1;
        groups[g].1 += 1;
        group_of[j] = g;
    }
    // Unsorted: the groups in order of first occurrence.
    let mut rank: Vec<usize> = (0..groups.len()).collect();
    if !sorted {
        let mut by_first: Vec<usize> = (0..groups.len()).collect();
        by_first.sort_by_key(|&g| groups[g].0);
        for (new, &g) in by_first.iter().enumerate() {
            rank[g] = new;
        }
        groups = by_first.iter().map(|&g| groups[g]).collect();
    }
    let first = groups.iter().map(|g| g.0).collect();
    let counts = groups.iter().map(|g| g.1).collect();
    let inverse = group_of.iter().map(|&g| rank[g]).collect();
    Unique {
        first,
        inverse,
        counts,
    }
}

/// Elements of a tensor as f64, for UNIQUE's comparisons.
pub fn decoded_values(operand_type: OperandType, bytes: &[u8]) -> Vec<f64> {
    match operand_type {
        OperandType::TensorFloat32 => bytes
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        OperandType::TensorInt32 => bytes
            .chunks_exact(4)
            .map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        OperandType::TensorQuant8AsymmSigned => bytes.iter().map(|&b| f64::from(b as i8)).collect(),
        _ => bytes.iter().map(|&b| f64::from(b)).collect(),
    }
}

/// The `[outer, n, inner]` view UNIQUE compares slices in.
pub fn unique_view(dims: &[usize], axis: Option<usize>) -> (usize, usize, usize) {
    match axis {
        None => (1, dims.iter().product(), 1),
        Some(a) => (
            dims[..a].iter().product(),
            dims[a],
            dims[a + 1..].iter().product(),
        ),
    }
}

/// Unique: outputs the distinct slices (input's type; the axis's length is their count,
/// or `[count]` when flattened), the first occurrence of each, each input slice's output
/// slice, and the counts (TENSOR_INT32). The count depends on the data: known when the
/// input's value is (always at run time), 0 (unknown) otherwise.
pub(super) fn unique(
    _: OperationType,
    ctx: &Operands,
    outputs: &[&Operand],
) -> Result<Vec<OutputShape>> {
    ctx.count(&[4])?;
    expect_outputs(outputs, 4)?;
    let input = ctx.tensor(0, "input", COUNTABLE)?;
    let rank = input.dimensions.len();
    let flatten = ctx.bool(2, "flatten")?;
    let axis = if flatten {
        None
    } else {
        let a = ctx.i32(1, "axis")?;
        let r = rank as i32;
        if a < -r || a >= r {
            return Err(param_err(1, "axis", format!("{a} is outside rank {rank}")));
        }
        Some(if a < 0 { a + r } else { a } as usize)
    };
    ctx.bool(3, "sorted")?;
    let known = !input.dimensions.contains(&0);
    let dims: Vec<usize> = input.dimensions.iter().map(|&d| d as usize).collect();
    let (outer, n, inner) = unique_view(&dims, axis);
    let count = match ctx.value(0) {
        Some(bytes) if known => {
            let values = decoded_values(input.operand_type, bytes);
            if values.len() != outer * n * inner {
                return Err(param_err(0, "input", "values do not match the dimensions"));
            }
            unique_slices(&values, outer, n, inner, false).first.len() as u32
        }
        _ => 0,
    };
    let values_dims = match axis {
        None => vec![count],
        Some(a) => {
            let mut d = input.dimensions.clone();
            d[a] = count;
            d
        }
    };
    let int = |dims: Vec<u32>| OutputShape {
        operand_type: OperandType::TensorInt32,
        dimensions: dims,
    };
    Ok(vec![
        OutputShape {
            operand_type: input.operand_type,
            dimensions: values_dims,
        },
        int(vec![count]),
        int(vec![if known { n as u32 } else { 0 }]),
        int(vec![count]),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_finds_values_in_either_order() {
        // 3, 1, 3, -0, 0, 1: -0 equals 0.
        let v = [3.0, 1.0, 3.0, -0.0, 0.0, 1.0];
        let sorted = unique_slices(&v, 1, 6, 1, true);
        assert_eq!(sorted.first, vec![3, 1, 0]);
        assert_eq!(sorted.counts, vec![2, 2, 2]);
        assert_eq!(sorted.inverse, vec![2, 1, 2, 0, 0, 1]);
        let unsorted = unique_slices(&v, 1, 6, 1, false);
        assert_eq!(unsorted.first, vec![0, 1, 3]);
        assert_eq!(unsorted.inverse, vec![0, 1, 0, 2, 2, 1]);
        // Rows of [[1, 2], [0, 5], [1, 2]] along axis 0 (outer 1, n 3, inner 2).
        let rows = unique_slices(&[1.0, 2.0, 0.0, 5.0, 1.0, 2.0], 1, 3, 2, true);
        assert_eq!((rows.first, rows.counts), (vec![1, 0], vec![1, 2]));
    }
}
