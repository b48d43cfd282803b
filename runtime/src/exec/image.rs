//! [`ProgramImage`]: what a model cache holds of a prepared [`Program`](super::Program),
//! its operand shapes and memory plan, with the byte encoding and the checks a loaded
//! image passes before a program trusts it.

use nnc_formats::nn::Model;

use super::in_place::{Uses, in_place_concat, row_strides};
use super::plan::ArenaPlan;
use super::program::StaticPlan;
use crate::error::{Result, RuntimeError};

/// The derived part of a prepared program: every operand's shape known before execution
/// and the memory plan. It is what a model cache holds (the kernels themselves are rebuilt
/// from the authenticated graph, which is cheap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramImage {
    pub operand_count: usize,
    pub operation_count: usize,
    pub shapes: Vec<Option<Vec<usize>>>,
    pub plan: Option<PlanImage>,
}

/// The memory plan part of a [`ProgramImage`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanImage {
    pub offsets: Vec<Option<usize>>,
    pub sizes: Vec<usize>,
    pub skip: Vec<bool>,
    pub arena_size: usize,
    pub total_size: usize,
}

impl PlanImage {
    /// The plan, with the row strides of the slices that `model`'s in-place
    /// concatenations (checked by [`ProgramImage::check`]) have.
    pub(super) fn to_plan(
        &self,
        model: &Model,
        shapes: &[Option<Vec<usize>>],
        uses: &Uses,
    ) -> StaticPlan {
        StaticPlan {
            offsets: self.offsets.clone(),
            sizes: self.sizes.clone(),
            skip: self.skip.clone(),
            row_strides: row_strides(model, &self.skip, shapes, uses),
            arena: ArenaPlan {
                offsets: Vec::new(),
                arena_size: self.arena_size,
                total_size: self.total_size,
            },
        }
    }
}

const NONE: u64 = u64::MAX;

impl ProgramImage {
    /// Little-endian encoding: counts, then per operand its shape (rank or NONE, dims),
    /// then the plan (flag, arena and total sizes, per operand offset or NONE and size,
    /// per operation the skip flag).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w: Vec<u8> = Vec::new();
        let u64w = |w: &mut Vec<u8>, v: u64| w.extend_from_slice(&v.to_le_bytes());
        u64w(&mut w, self.operand_count as u64);
        u64w(&mut w, self.operation_count as u64);
        for shape in &self.shapes {
            match shape {
                None => u64w(&mut w, NONE),
                Some(dims) => {
                    u64w(&mut w, dims.len() as u64);
                    for &d in dims {
                        u64w(&mut w, d as u64);
                    }
                }
            }
        }
        match &self.plan {
            None => w.push(0),
            Some(p) => {
                w.push(1);
                u64w(&mut w, p.arena_size as u64);
                u64w(&mut w, p.total_size as u64);
                for (o, &size) in p.offsets.iter().zip(&p.sizes) {
                    u64w(&mut w, o.map_or(NONE, |v| v as u64));
                    u64w(&mut w, size as u64);
                }
                w.extend(p.skip.iter().map(|&b| u8::from(b)));
            }
        }
        w
    }

    /// Decodes an image, bounding every count by the bytes available.
    pub fn from_bytes(bytes: &[u8]) -> Result<ProgramImage> {
        let bad = |m: &str| RuntimeError::Internal(format!("cached program: {m}"));
        let mut pos = 0usize;
        let u64r = |pos: &mut usize| -> Result<u64> {
            let s = bytes.get(*pos..*pos + 8).ok_or_else(|| bad("truncated"))?;
            *pos += 8;
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            Ok(u64::from_le_bytes(a))
        };
        let operand_count = u64r(&mut pos)? as usize;
        let operation_count = u64r(&mut pos)? as usize;
        if operand_count > bytes.len() / 8 || operation_count > bytes.len() {
            return Err(bad("counts exceed the data"));
        }
        let mut shapes = Vec::with_capacity(operand_count);
        for _ in 0..operand_count {
            let rank = u64r(&mut pos)?;
            if rank == NONE {
                shapes.push(None);
                continue;
            }
            if rank > 8 {
                return Err(bad("rank above 8"));
            }
            let mut dims = Vec::with_capacity(rank as usize);
            for _ in 0..rank {
                dims.push(
                    usize::try_from(u64r(&mut pos)?).map_err(|_| bad("dimension too large"))?,
                );
            }
            shapes.push(Some(dims));
        }
        let flag = *bytes.get(pos).ok_or_else(|| bad("truncated"))?;
        pos += 1;
        let plan = match flag {
            0 => None,
            1 => {
                let arena_size =
                    usize::try_from(u64r(&mut pos)?).map_err(|_| bad("arena too large"))?;
                let total_size =
                    usize::try_from(u64r(&mut pos)?).map_err(|_| bad("total too large"))?;
                let mut offsets = Vec::with_capacity(operand_count);
                let mut sizes = Vec::with_capacity(operand_count);
                for _ in 0..operand_count {
                    let o = u64r(&mut pos)?;
                    offsets.push(if o == NONE {
                        None
                    } else {
                        Some(usize::try_from(o).map_err(|_| bad("offset too large"))?)
                    });
                    sizes
                        .push(usize::try_from(u64r(&mut pos)?).map_err(|_| bad("size too large"))?);
                }
                let skip_bytes = bytes
                    .get(pos..pos + operation_count)
                    .ok_or_else(|| bad("truncated"))?;
                pos += operation_count;
                Some(PlanImage {
                    offsets,
                    sizes,
                    skip: skip_bytes.iter().map(|&b| b != 0).collect(),
                    arena_size,
                    total_size,
                })
            }
            _ => return Err(bad("unknown plan flag")),
        };
        if pos != bytes.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(ProgramImage {
            operand_count,
            operation_count,
            shapes,
            plan,
        })
    }

    /// Checks that the image fits `model`: counts match; known shapes agree with the
    /// declared dimensions; every arena slot lies inside the arena; operations skipped as
    /// aliases are reshapes whose output shares its input's slot.
    pub(super) fn check(&self, model: &Model, uses: &Uses) -> Result<()> {
        let bad = |m: String| {
            Err(RuntimeError::Internal(format!(
                "cached program does not fit the model: {m}"
            )))
        };
        let operands = &model.main.operands;
        if self.operand_count != operands.len() || self.shapes.len() != operands.len() {
            return bad(format!(
                "{} operands, the model has {}",
                self.operand_count,
                operands.len()
            ));
        }
        if self.operation_count != model.main.operations.len() {
            return bad(format!(
                "{} operations, the model has {}",
                self.operation_count,
                model.main.operations.len()
            ));
        }
        for (i, (shape, o)) in self.shapes.iter().zip(operands).enumerate() {
            if let Some(dims) = shape
                && !o.operand_type.is_scalar()
                && !o.dimensions.is_empty()
                && (dims.len() != o.dimensions.len()
                    || dims
                        .iter()
                        .zip(&o.dimensions)
                        .any(|(&a, &d)| d != 0 && a != d as usize))
            {
                return bad(format!(
                    "operand {i} has shape {dims:?}, declared {:?}",
                    o.dimensions
                ));
            }
        }
        if let Some(p) = &self.plan {
            if p.offsets.len() != operands.len()
                || p.sizes.len() != operands.len()
                || p.skip.len() != self.operation_count
            {
                return bad("plan lengths".into());
            }
            for (i, (o, &size)) in p.offsets.iter().zip(&p.sizes).enumerate() {
                if let Some(o) = o
                    && o.checked_add(size).is_none_or(|end| end > p.arena_size)
                {
                    return bad(format!("operand {i}'s slot lies outside the arena"));
                }
            }
            let offset = |o: u32| p.offsets.get(o as usize).copied().flatten();
            for (k, op) in model.main.operations.iter().enumerate() {
                if !p.skip[k] {
                    continue;
                }
                use nnc_formats::nn::OperationType as O;
                let aliasing = matches!(op.op_type, O::Reshape | O::Squeeze | O::ExpandDims)
                    && op.inputs.first().map(|&o| offset(o))
                        == op.outputs.first().map(|&o| offset(o));
                // An in-place concatenation: each input at its first element of the output.
                let in_place = in_place_concat(model, k, &self.shapes, uses).is_some_and(|c| {
                    c.slices.iter().all(|s| {
                        offset(c.output).is_some_and(|o| {
                            o.checked_add(s.offset)
                                .is_some_and(|at| offset(s.operand) == Some(at))
                        }) && p.sizes.get(s.operand as usize) == Some(&s.span)
                    })
                });
                if !aliasing && !in_place {
                    return bad(format!(
                        "operation {k} is skipped but is neither an alias nor an in-place concatenation"
                    ));
                }
            }
        }
        Ok(())
    }
}
