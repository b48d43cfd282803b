//! The supported-operations rules: the one definition that both decides where an
//! operation may run and explains why a device declined it.
//!
//! Rule names are the profile fields a user edits to change the answer (`max_stride`,
//! `operand_types`, ...), plus `operations` (the type is not listed), `encryption` (the
//! device cannot decrypt the file's weights) and `model` (the operation itself is
//! malformed, which a validated model never is).

use super::{DeviceProfile, OperationRule};
use crate::container::is_weight;
use crate::crypto::{Algorithm, Mode};
use crate::nn::ops::{Role, Work, input_role, schema};
use crate::nn::{Lifetime, Model, Operand, OperandType, Operation, OperationType, Subgraph};
use crate::plan::Decline;

/// The operation type is not among the device's supported operations.
pub const RULE_OPERATIONS: &str = "operations";
/// The operation belongs to a vendor extension the device does not declare.
pub const RULE_EXTENSIONS: &str = "extensions";
/// The operation reads weights the device cannot decrypt.
pub const RULE_ENCRYPTION: &str = "encryption";
/// The operation refers to operands the model does not have.
pub const RULE_MODEL: &str = "model";
/// An IF or WHILE on a device whose profile does not declare `control_flow`, or one of
/// whose subgraphs holds an operation the device declines.
pub const RULE_CONTROL_FLOW: &str = "control_flow";

/// An operation with its operands resolved.
struct OpView<'a> {
    op: &'a Operation,
    model: &'a Model,
    /// The graph the operation belongs to (main, or a referenced subgraph).
    graph: &'a Subgraph,
    inputs: Vec<&'a Operand>,
    outputs: Vec<&'a Operand>,
}

impl<'a> OpView<'a> {
    fn new(op: &'a Operation, model: &'a Model, graph: &'a Subgraph) -> Result<OpView<'a>, String> {
        let resolve = |list: &[u32]| -> Result<Vec<&'a Operand>, String> {
            list.iter()
                .map(|&i| {
                    graph
                        .operands
                        .get(i as usize)
                        .ok_or_else(|| format!("operand {i} does not exist"))
                })
                .collect()
        };
        Ok(OpView {
            op,
            model,
            graph,
            inputs: resolve(&op.inputs)?,
            outputs: resolve(&op.outputs)?,
        })
    }

    /// The input named `role` (see [`input_role`]), if the operation has it with a value.
    fn role(&self, role: Role) -> Option<(usize, &'a Operand)> {
        let count = role_count(self.op, &self.inputs);
        (0..self.inputs.len())
            .find(|&k| input_role(self.op.op_type, k, count) == role)
            .map(|k| (k, self.inputs[k]))
            .filter(|(_, o)| o.lifetime != Lifetime::NoValue)
    }

    /// A constant INT32 scalar input by role: `None` when absent, `Err` when not constant.
    fn i32_param(&self, role: Role) -> Option<Result<i32, String>> {
        let (k, operand) = self.role(role)?;
        let value = self
            .constant(self.op.inputs[k])
            .filter(|b| b.len() == 4 && operand.operand_type == OperandType::Int32)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        Some(value.ok_or_else(|| format!("{role} is not known at compile time")))
    }

    /// The bytes of a constant operand of the operation's graph.
    fn constant(&self, index: u32) -> Option<&'a [u8]> {
        let operand = self.graph.operands.get(index as usize)?;
        crate::nn::model::constant_bytes(operand, &self.model.operand_values, &self.model.pools)
    }

    /// Whether the NCHW layout flag is set.
    fn nchw(&self) -> bool {
        self.role(Role::Layout)
            .and_then(|(k, _)| self.constant(self.op.inputs[k]))
            .is_some_and(|b| b.first().is_some_and(|&v| v != 0))
    }

    /// The operation's data tensors: its first tensor input (what NNAPI looks performance
    /// up by) and its outputs.
    fn data(&self) -> Vec<(String, &'a Operand)> {
        let mut data = Vec::new();
        if let Some((k, o)) = self
            .inputs
            .iter()
            .enumerate()
            .find(|(_, o)| o.operand_type.is_tensor() && o.lifetime != Lifetime::NoValue)
        {
            data.push((format!("input {k}"), *o));
        }
        for (k, o) in self.outputs.iter().enumerate() {
            data.push((format!("output {k}"), *o));
        }
        data
    }

    /// Every tensor read or written (with a value), once each.
    fn tensors(&self) -> Vec<(String, u32, &'a Operand)> {
        let mut seen = Vec::new();
        let mut out = Vec::new();
        let inputs = self.op.inputs.iter().zip(&self.inputs).enumerate();
        let outputs = self.op.outputs.iter().zip(&self.outputs).enumerate();
        let all = inputs
            .map(|(k, (i, o))| (format!("input {k}"), *i, *o))
            .chain(outputs.map(|(k, (i, o))| (format!("output {k}"), *i, *o)));
        for (label, index, operand) in all {
            if operand.operand_type.is_tensor()
                && operand.lifetime != Lifetime::NoValue
                && !seen.contains(&index)
            {
                seen.push(index);
                out.push((label, index, operand));
            }
        }
        out
    }
}

/// An input count that `input_role` names as the explicit-padding form of an operation
/// although its implicit form has it too. CONV_2D's explicit counts are {10, 11, 13},
/// DEPTHWISE_CONV_2D's {11, 12, 14}.
struct SharedCount {
    op: OperationType,
    count: usize,
    /// The input that is the BOOL layout flag in the implicit form (an INT32 stride in
    /// the explicit one), which tells the two apart.
    layout_flag: usize,
    /// A count outside the explicit ones, which selects the implicit names.
    implicit: usize,
}

const SHARED_COUNTS: &[SharedCount] = &[
    SharedCount {
        op: OperationType::Conv2d,
        count: 10,
        layout_flag: 7,
        implicit: 8,
    },
    SharedCount {
        op: OperationType::DepthwiseConv2d,
        count: 11,
        layout_flag: 8,
        implicit: 9,
    },
];

/// The input count to name roles by: the implicit form's where the count alone would
/// name it as the explicit form (see [`SHARED_COUNTS`]).
fn role_count(op: &Operation, inputs: &[&Operand]) -> usize {
    let n = inputs.len();
    let is_bool = |k: usize| {
        inputs
            .get(k)
            .is_some_and(|o| o.operand_type == OperandType::Bool)
    };
    SHARED_COUNTS
        .iter()
        .find(|s| s.op == op.op_type && s.count == n && is_bool(s.layout_flag))
        .map_or(n, |s| s.implicit)
}

impl DeviceProfile {
    /// Whether this device can run operation `op` of `model` (its main subgraph), given
    /// the file's encryption. `Err` names the first rule that declines, with the value
    /// that broke it. The partitioner decides with this function and the plan explains
    /// with its answer, so decision and explanation cannot disagree. Never panics, also
    /// on malformed models.
    ///
    /// An IF or WHILE runs with every operation of the subgraphs it reaches on the same
    /// device: it needs a profile declaring `control_flow` (the CPU always runs control
    /// flow) and the device must accept every one of those operations.
    pub fn check(
        &self,
        op: &Operation,
        model: &Model,
        encryption: Option<(Algorithm, Mode)>,
    ) -> Result<(), Decline> {
        self.check_in(op, model, 0, encryption, Reach::Walk)
    }

    /// [`DeviceProfile::check`] of every operation of `main`, in order. Each subgraph's
    /// verdict is found once for all the IFs and WHILEs that reach it, so the work is
    /// linear in the model rather than IFs times the operations they reach.
    pub fn check_operations(
        &self,
        model: &Model,
        encryption: Option<(Algorithm, Mode)>,
    ) -> Vec<Result<(), Decline>> {
        let mut verdicts = None;
        model
            .main
            .operations
            .iter()
            .enumerate()
            .map(|(index, op)| {
                let reach = Reach::Memo {
                    verdicts: &mut verdicts,
                    index,
                };
                self.check_in(op, model, 0, encryption, reach)
            })
            .collect()
    }

    /// [`DeviceProfile::check`] for an operation of graph `t` (0 = main).
    fn check_in(
        &self,
        op: &Operation,
        model: &Model,
        t: usize,
        encryption: Option<(Algorithm, Mode)>,
        reach: Reach,
    ) -> Result<(), Decline> {
        let decline = |rule: &str, detail: String| Decline {
            device: self.name.clone(),
            rule: rule.to_string(),
            detail,
        };
        if let Some(ext) = op.op_type.extension()
            && !self.extensions.iter().any(|e| e == ext)
        {
            return Err(decline(
                RULE_EXTENSIONS,
                format!(
                    "{} is an operation of the extension {ext}, which the device does not \
                     declare",
                    op.op_type
                ),
            ));
        }
        let Some(graph) = model.graph(t) else {
            return Err(decline(RULE_MODEL, format!("subgraph {t} does not exist")));
        };
        if op.op_type.is_control_flow() {
            return self.check_control_flow(op, model, graph, t, encryption, reach);
        }
        let Some(rule) = self.rule_for(op.op_type) else {
            return Err(decline(
                RULE_OPERATIONS,
                format!("{} is not among its supported operations", op.op_type),
            ));
        };
        let view = OpView::new(op, model, graph).map_err(|d| decline(RULE_MODEL, d))?;
        check_rule(rule, &view).map_err(|(rule, detail)| decline(rule, detail))?;
        if let Some(budget) = self.memory_budget_bytes {
            let mut total = 0u64;
            for (label, _, operand) in view.tensors() {
                let Some(bytes) = operand.byte_size() else {
                    return Err(decline(
                        "memory_budget_bytes",
                        format!("{label} has a size unknown at compile time"),
                    ));
                };
                total = total.saturating_add(bytes);
            }
            if total > budget {
                return Err(decline(
                    "memory_budget_bytes",
                    format!(
                        "weights and activations take {total} bytes, above the on-chip budget of {budget}"
                    ),
                ));
            }
        }
        self.check_decrypts(&view, encryption)
    }

    /// The device can decrypt the weights the operation reads.
    fn check_decrypts(
        &self,
        view: &OpView,
        encryption: Option<(Algorithm, Mode)>,
    ) -> Result<(), Decline> {
        if let Some((algorithm, mode)) = encryption
            && !self.decrypts(algorithm, mode)
            && view.inputs.iter().any(|o| is_weight(o))
        {
            let can: Vec<String> = self
                .decrypts
                .iter()
                .flat_map(|d| d.modes.iter().map(move |m| format!("{}-{m}", d.algorithm)))
                .collect();
            let can = if can.is_empty() {
                "it decrypts nothing".to_string()
            } else {
                format!("it decrypts {}", can.join(", "))
            };
            return Err(Decline {
                device: self.name.clone(),
                rule: RULE_ENCRYPTION.into(),
                detail: format!("its weights are encrypted with {algorithm}-{mode}; {can}"),
            });
        }
        Ok(())
    }

    /// Whether the device runs control flow at all: declared by `control_flow`; the CPU
    /// always does (nnc's runtime implements IF and WHILE).
    pub fn runs_control_flow(&self) -> bool {
        self.control_flow || self.is_cpu()
    }

    /// An IF or WHILE of graph `t`: the device runs control flow, can decrypt what the
    /// operation passes to its subgraphs, and accepts every operation of every subgraph
    /// it reaches (they all run on the device that runs it).
    fn check_control_flow(
        &self,
        op: &Operation,
        model: &Model,
        graph: &Subgraph,
        t: usize,
        encryption: Option<(Algorithm, Mode)>,
        reach: Reach,
    ) -> Result<(), Decline> {
        let decline = |rule: &str, detail: String| Decline {
            device: self.name.clone(),
            rule: rule.to_string(),
            detail,
        };
        if !self.runs_control_flow() {
            return Err(decline(
                RULE_CONTROL_FLOW,
                format!(
                    "{} needs control flow, which the profile does not declare (\"control_flow\": true)",
                    op.op_type
                ),
            ));
        }
        let view = OpView::new(op, model, graph).map_err(|d| decline(RULE_MODEL, d))?;
        self.check_decrypts(&view, encryption)?;
        match reach {
            Reach::Walk => {
                let index = graph.operations.iter().position(|o| std::ptr::eq(o, op));
                let Some(index) = index else {
                    return Err(decline(
                        RULE_MODEL,
                        "the operation is not in its graph".into(),
                    ));
                };
                for sub in model.graphs_reached(t, index) {
                    if let Some(d) = self.subgraph_decline(model, sub, encryption) {
                        return Err(d);
                    }
                }
                Ok(())
            }
            Reach::Memo { verdicts, index } => {
                let verdicts =
                    verdicts.get_or_insert_with(|| SubgraphVerdicts::new(self, model, encryption));
                match verdicts.first_reached(&model.operation_subgraphs(t, index)) {
                    Some(d) => Err(d.clone()),
                    None => Ok(()),
                }
            }
        }
    }

    /// The first operation of graph `sub` the device declines (nested control flow is
    /// checked by the IF or WHILE that reaches it, so it is skipped here).
    fn subgraph_decline(
        &self,
        model: &Model,
        sub: usize,
        encryption: Option<(Algorithm, Mode)>,
    ) -> Option<Decline> {
        let decline = |rule: &str, detail: String| Decline {
            device: self.name.clone(),
            rule: rule.to_string(),
            detail,
        };
        let Some(g) = model.graph(sub) else {
            return Some(decline(
                RULE_MODEL,
                format!("subgraph {sub} does not exist"),
            ));
        };
        for (k, inner) in g.operations.iter().enumerate() {
            if inner.op_type.is_control_flow() {
                if !self.runs_control_flow() {
                    return Some(decline(RULE_CONTROL_FLOW, "nested control flow".into()));
                }
                continue;
            }
            if let Err(d) = self.check_in(inner, model, sub, encryption, Reach::Walk) {
                return Some(decline(
                    &d.rule,
                    format!(
                        "subgraph {sub} operation {k} ({}): {}",
                        inner.op_type, d.detail
                    ),
                ));
            }
        }
        None
    }
}

/// How an IF or WHILE finds the subgraphs it reaches.
enum Reach<'r> {
    /// Walks them (one operation checked alone).
    Walk,
    /// Operation `index` of its graph, with the verdicts on every subgraph found once
    /// for all operations of the model.
    Memo {
        verdicts: &'r mut Option<SubgraphVerdicts>,
        index: usize,
    },
}

/// One device's verdict on every referenced subgraph of a model.
struct SubgraphVerdicts {
    /// By graph number: the first operation the device declines in that graph alone.
    declines: Vec<Option<Decline>>,
    /// By graph number: the lowest-numbered graph with a decline among the graph and
    /// all it reaches, which is the one a walk over the reached graphs in ascending
    /// order reports first.
    first: Vec<Option<usize>>,
}

impl SubgraphVerdicts {
    fn new(
        profile: &DeviceProfile,
        model: &Model,
        encryption: Option<(Algorithm, Mode)>,
    ) -> SubgraphVerdicts {
        let count = model.referenced.len();
        let declines: Vec<Option<Decline>> = (0..=count)
            .map(|t| match t {
                0 => None,
                t => profile.subgraph_decline(model, t, encryption),
            })
            .collect();
        let mut parents: Vec<Vec<usize>> = vec![Vec::new(); count + 1];
        for (p, children) in model.subgraph_children().iter().enumerate().skip(1) {
            for &c in children {
                if let Some(list) = parents.get_mut(c) {
                    list.push(p);
                }
            }
        }
        // From each declining graph in ascending order, mark every graph reaching it
        // that no lower one marked. A marked graph's reachers are marked already, so
        // each graph is visited once; cycles end at marked graphs too.
        let mut first: Vec<Option<usize>> = vec![None; count + 1];
        let mut stack = Vec::new();
        for f in 1..=count {
            if declines[f].is_none() || first[f].is_some() {
                continue;
            }
            first[f] = Some(f);
            stack.push(f);
            while let Some(v) = stack.pop() {
                for &p in &parents[v] {
                    if first[p].is_none() {
                        first[p] = Some(f);
                        stack.push(p);
                    }
                }
            }
        }
        SubgraphVerdicts { declines, first }
    }

    /// The decline an operation naming subgraphs `direct` meets first, if any.
    fn first_reached(&self, direct: &[usize]) -> Option<&Decline> {
        let f = direct
            .iter()
            .filter_map(|&c| self.first.get(c).copied().flatten())
            .min()?;
        self.declines.get(f)?.as_ref()
    }
}

/// The limits of one rule, in a fixed order; `Err((rule, detail))` for the first broken.
fn check_rule(rule: &OperationRule, view: &OpView) -> Result<(), (&'static str, String)> {
    if let Some(allowed) = &rule.operand_types {
        for (label, operand) in view.data() {
            let name = operand.operand_type.name();
            if !allowed.iter().any(|a| a == name) {
                return Err((
                    "operand_types",
                    format!("{label} is {name}, not {}", allowed.join(" or ")),
                ));
            }
        }
    }
    if let Some(max) = rule.max_rank {
        for (label, _, operand) in view.tensors() {
            let rank = operand.dimensions.len();
            if rank > max as usize {
                return Err(("max_rank", format!("{label} has rank {rank}, above {max}")));
            }
        }
    }
    if let Some(max) = rule.max_tensor_bytes {
        for (label, _, operand) in view.tensors() {
            match operand.byte_size() {
                Some(bytes) if bytes > max => {
                    return Err((
                        "max_tensor_bytes",
                        format!("{label} takes {bytes} bytes, above {max}"),
                    ));
                }
                Some(_) => {}
                None => {
                    return Err((
                        "max_tensor_bytes",
                        format!("{label} has a size unknown at compile time"),
                    ));
                }
            }
        }
    }
    if let Some(max) = rule.max_kernel_size
        && let Some(kernel) = kernel_size(view)
    {
        let (h, w) = kernel.map_err(|d| ("max_kernel_size", d))?;
        if h > max || w > max {
            return Err((
                "max_kernel_size",
                format!("kernel {h}x{w} exceeds {max}x{max}"),
            ));
        }
    }
    for (field, name, max, (role_h, role_w)) in [
        (
            "max_stride",
            "stride",
            rule.max_stride,
            (Role::StrideH, Role::StrideW),
        ),
        (
            "max_dilation",
            "dilation",
            rule.max_dilation,
            (Role::DilationH, Role::DilationW),
        ),
    ] {
        let Some(max) = max else { continue };
        let h = view.i32_param(role_h);
        let w = view.i32_param(role_w);
        if h.is_none() && w.is_none() {
            continue;
        }
        // An absent direction is 1 (dilation is optional).
        let h = h.unwrap_or(Ok(1)).map_err(|d| (field, d))?;
        let w = w.unwrap_or(Ok(1)).map_err(|d| (field, d))?;
        // Compared as i64: a limit above i32::MAX must not wrap.
        if i64::from(h) > i64::from(max) || i64::from(w) > i64::from(max) {
            return Err((field, format!("{name} {h}x{w} exceeds {max}")));
        }
    }
    if let Some(max) = rule.max_channels {
        let nchw = view.nchw();
        for (label, operand) in view.data() {
            let dims = &operand.dimensions;
            let channels = if nchw && dims.len() == 4 {
                dims.get(1)
            } else {
                dims.last()
            };
            match channels {
                Some(0) => {
                    return Err((
                        "max_channels",
                        format!("{label} has a channel count unknown at compile time"),
                    ));
                }
                Some(&c) if c > max => {
                    return Err((
                        "max_channels",
                        format!("{label} has {c} channels, above {max}"),
                    ));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Kernel (height, width) of a convolution (from its OHWI / 1HWO filter) or a pool (from
/// its filter parameters); `None` for operations without a kernel.
fn kernel_size(view: &OpView) -> Option<Result<(u32, u32), String>> {
    match schema(view.op.op_type).work_kind()? {
        Work::Convolution
        | Work::GroupedConvolution
        | Work::DepthwiseConvolution
        | Work::TransposedConvolution => {
            let (_, filter) = view.role(Role::Filter)?;
            Some(match filter.dimensions.as_slice() {
                [_, h, w, _] if *h != 0 && *w != 0 => Ok((*h, *w)),
                _ => Err(format!(
                    "the filter's kernel size is unknown at compile time (dimensions {:?})",
                    filter.dimensions
                )),
            })
        }
        Work::Pool => {
            let h = view.i32_param(Role::FilterH)?;
            let w = view.i32_param(Role::FilterW)?;
            Some(match (h, w) {
                (Ok(h), Ok(w)) => Ok((h.max(0).unsigned_abs(), w.max(0).unsigned_abs())),
                (Err(e), _) | (_, Err(e)) => Err(e),
            })
        }
        // No window that `max_kernel_size` bounds.
        Work::FullyConnected | Work::BatchMatmul => None,
    }
}
