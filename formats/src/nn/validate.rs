//! The model rules of the NN operation set, checked all at once.
//!
//! [`validate`] never stops at the first problem: it reports every one, each with where
//! it is (operand index, or operation index and the source node it came from), so that a
//! user fixes a model in one round.

use std::collections::HashSet;

use super::model::dims_compatible;
use super::model::{Model, Operand, Subgraph};
use super::ops::{self, InputView};
use super::types::{Lifetime, OperandType};

/// How deeply IF/WHILE may nest (a subgraph running a subgraph ...): the runtime runs
/// nested control flow by recursion, so the depth is bounded.
pub const MAX_CONTROL_FLOW_DEPTH: usize = 32;

/// Where a problem is.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Location {
    Model,
    Subgraph {
        subgraph: usize,
    },
    Operand {
        subgraph: usize,
        operand: usize,
    },
    Operation {
        subgraph: usize,
        operation: usize,
        op_type: String,
        source: String,
    },
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let prefix = |s: usize| {
            if s == 0 {
                String::new()
            } else {
                format!("subgraph {s}: ")
            }
        };
        match self {
            Location::Model => write!(f, "model"),
            Location::Subgraph { subgraph } => write!(f, "subgraph {subgraph}"),
            Location::Operand { subgraph, operand } => {
                write!(f, "{}operand {operand}", prefix(*subgraph))
            }
            Location::Operation {
                subgraph,
                operation,
                op_type,
                source,
            } => {
                write!(f, "{}operation {operation} ({op_type}", prefix(*subgraph))?;
                if !source.is_empty() {
                    write!(f, " from node '{source}'")?;
                }
                write!(f, ")")
            }
        }
    }
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub location: Location,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// At most this many problems are kept (the rest are counted): a hostile file can break
/// a rule per operand or per input, and every problem costs a message.
pub const MAX_PROBLEMS: usize = 1000;

/// A node name in a problem's location is cut to this many bytes: the name comes from
/// the file, and each problem at an operation carries a copy.
pub const MAX_SOURCE_BYTES: usize = 256;

/// Every problem found in a model (the first [`MAX_PROBLEMS`] of them).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    pub problems: Vec<Problem>,
    /// Problems found beyond [`MAX_PROBLEMS`], counted but not described.
    pub omitted: usize,
}

impl std::fmt::Display for ValidationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.problems.len() + self.omitted;
        write!(
            f,
            "the model is invalid ({n} problem{}):",
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        if self.omitted > 0 {
            write!(f, "\n  - and {} more", self.omitted)?;
        }
        Ok(())
    }
}

/// How much a validation checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConstantData {
    /// Constant bytes are at hand: check every constant's location and size.
    Present,
    /// Pool contents are not at hand (a compiled model inspected without its key):
    /// check locations against pool sizes only.
    SizesOnly,
}

/// Checks a model against every rule; `Ok(())` or all problems found.
///
/// The work and memory are linear in the size of all graphs together: every graph,
/// operand and operation is visited a bounded number of times, whatever the number of
/// subgraphs or how they reference each other.
pub fn validate(model: &Model) -> Result<(), ValidationError> {
    let mut v = Validator {
        model,
        graphs: model.graphs().collect(),
        problems: Vec::new(),
        omitted: 0,
    };
    v.check_model();
    if v.problems.is_empty() {
        Ok(())
    } else {
        Err(ValidationError {
            problems: v.problems,
            omitted: v.omitted,
        })
    }
}

struct Validator<'a> {
    model: &'a Model,
    /// Every graph by number, `main` first: built once, not per IF or WHILE.
    graphs: Vec<&'a Subgraph>,
    problems: Vec<Problem>,
    omitted: usize,
}

/// `source` cut to at most [`MAX_SOURCE_BYTES`] (on a character boundary).
fn short_source(source: &str) -> String {
    if source.len() <= MAX_SOURCE_BYTES {
        return source.to_string();
    }
    let mut end = MAX_SOURCE_BYTES;
    while !source.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &source[..end])
}

impl Validator<'_> {
    fn report(&mut self, location: Location, message: impl Into<String>) {
        if self.problems.len() >= MAX_PROBLEMS {
            self.omitted += 1;
            return;
        }
        self.problems.push(Problem {
            location,
            message: message.into(),
        });
    }

    fn check_model(&mut self) {
        let model = self.model;
        if model.input_info.len() != model.main.inputs.len() {
            self.report(
                Location::Model,
                format!(
                    "{} input descriptions for {} inputs",
                    model.input_info.len(),
                    model.main.inputs.len()
                ),
            );
        }
        if model.output_info.len() != model.main.outputs.len() {
            self.report(
                Location::Model,
                format!(
                    "{} output descriptions for {} outputs",
                    model.output_info.len(),
                    model.main.outputs.len()
                ),
            );
        }
        for (s, sg) in model.graphs().enumerate() {
            self.check_subgraph(s, sg);
        }
        self.check_subgraph_references();
    }

    fn check_subgraph(&mut self, s: usize, sg: &Subgraph) {
        for (i, operand) in sg.operands.iter().enumerate() {
            self.check_operand(s, i, operand);
        }
        self.check_io_lists(s, sg);
        self.check_operations(s, sg);
    }

    fn check_operand(&mut self, s: usize, i: usize, o: &Operand) {
        let loc = || Location::Operand {
            subgraph: s,
            operand: i,
        };
        let t = o.operand_type;
        if t.is_scalar() && !o.dimensions.is_empty() {
            self.report(
                loc(),
                format!("scalar {t} must have no dimensions, has {:?}", o.dimensions),
            );
        }
        if o.lifetime.is_constant() && t.is_tensor() && !o.is_fully_specified() {
            self.report(loc(), "constant tensor must have all dimensions known");
        }
        if o.byte_size().is_none() && o.is_fully_specified() && t.element_size().is_some() {
            self.report(loc(), "size in bytes overflows");
        }
        self.check_quantization(loc(), o);
        self.check_location(loc(), s, o);
    }

    fn check_quantization(&mut self, loc: Location, o: &Operand) {
        let t = o.operand_type;
        let (scale, zp) = (o.scale, o.zero_point);
        let scale_ok = scale.is_finite() && scale > 0.0;
        let problem = match t {
            OperandType::TensorQuant8Asymm if !scale_ok || !(0..=255).contains(&zp) => {
                Some(format!(
                    "{t} needs scale > 0 and zero point in [0, 255], got scale {scale}, zero point {zp}"
                ))
            }
            OperandType::TensorQuant8AsymmSigned if !scale_ok || !(-128..=127).contains(&zp) => {
                Some(format!(
                    "{t} needs scale > 0 and zero point in [-128, 127], got scale {scale}, zero point {zp}"
                ))
            }
            OperandType::TensorQuant8Symm | OperandType::TensorQuant16Symm
                if !scale_ok || zp != 0 =>
            {
                Some(format!(
                    "{t} needs scale > 0 and zero point 0, got scale {scale}, zero point {zp}"
                ))
            }
            OperandType::TensorQuant16Asymm if !scale_ok || !(0..=65535).contains(&zp) => {
                Some(format!(
                    "{t} needs scale > 0 and zero point in [0, 65535], got scale {scale}, zero point {zp}"
                ))
            }
            OperandType::TensorQuant8SymmPerChannel => match &o.channel_quant {
                _ if scale != 0.0 || zp != 0 => Some(format!(
                    "{t} must have scale 0 and zero point 0 (its scales are per channel)"
                )),
                None => Some(format!("{t} needs per-channel quantization parameters")),
                Some(q) => {
                    let dim = o.dimensions.get(q.channel_dim as usize).copied();
                    match dim {
                        None => Some(format!(
                            "channel dimension {} is out of range for rank {}",
                            q.channel_dim,
                            o.dimensions.len()
                        )),
                        Some(d) if d != 0 && d as usize != q.scales.len() => Some(format!(
                            "{} per-channel scales for {d} channels",
                            q.scales.len()
                        )),
                        _ if q.scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) => {
                            Some("every per-channel scale must be > 0".to_string())
                        }
                        _ => None,
                    }
                }
            },
            OperandType::TensorInt32 | OperandType::Int32
                if zp != 0 || !(scale >= 0.0 && scale.is_finite()) =>
            {
                Some(format!(
                    "{t} needs scale >= 0 and zero point 0, got scale {scale}, zero point {zp}"
                ))
            }
            OperandType::TensorFloat32
            | OperandType::TensorFloat16
            | OperandType::Float32
            | OperandType::Float16
            | OperandType::Bool
            | OperandType::TensorBool8
            | OperandType::Uint32
                if scale != 0.0 || zp != 0 =>
            {
                Some(format!(
                    "{t} must have scale 0 and zero point 0, got {scale} and {zp}"
                ))
            }
            _ => None,
        };
        if let Some(message) = problem {
            self.report(loc.clone(), message);
        }
        if o.channel_quant.is_some() && t != OperandType::TensorQuant8SymmPerChannel {
            self.report(
                loc,
                format!("{t} cannot carry per-channel quantization parameters"),
            );
        }
    }

    fn check_location(&mut self, loc: Location, s: usize, o: &Operand) {
        let l = o.location;
        match o.lifetime {
            Lifetime::ConstantCopy | Lifetime::ConstantReference => {
                let (what, available) = if o.lifetime == Lifetime::ConstantCopy {
                    (
                        "inline values",
                        Some(self.model.operand_values.len() as u64),
                    )
                } else {
                    (
                        "pool",
                        self.model
                            .pools
                            .get(l.pool_index as usize)
                            .map(|p| p.size()),
                    )
                };
                match available {
                    None => self.report(
                        loc.clone(),
                        format!("refers to pool {} but the model has {}", l.pool_index, self.model.pools.len()),
                    ),
                    Some(size) => match l.offset.checked_add(l.length) {
                        Some(end) if end <= size => {}
                        _ => self.report(
                            loc.clone(),
                            format!(
                                "data at offset {} length {} lies outside the {what} ({size} bytes)",
                                l.offset, l.length
                            ),
                        ),
                    },
                }
                if o.lifetime == Lifetime::ConstantCopy
                    && l.length > super::model::MAX_INLINE_CONSTANT_BYTES as u64
                {
                    // Not an error in NNAPI, but nnc keeps weights out of the inline area
                    // so that they are encrypted; a large inline constant would bypass that.
                    self.report(
                        loc.clone(),
                        format!(
                            "inline constant of {} bytes exceeds the {}-byte inline limit",
                            l.length,
                            super::model::MAX_INLINE_CONSTANT_BYTES
                        ),
                    );
                }
                if let Some(size) = o.byte_size()
                    && size != l.length
                {
                    self.report(
                        loc,
                        format!(
                            "holds {} bytes but {} {} needs {size}",
                            l.length,
                            o.operand_type,
                            super::model::dims_to_string(&o.dimensions)
                        ),
                    );
                }
            }
            Lifetime::Subgraph => {
                if o.operand_type != OperandType::Subgraph {
                    self.report(loc.clone(), "SUBGRAPH lifetime requires the SUBGRAPH type");
                }
                if l.offset as usize > self.model.referenced.len() || l.offset == 0 {
                    self.report(
                        loc,
                        format!("refers to subgraph {} which does not exist", l.offset),
                    );
                } else if l.offset as usize == s {
                    self.report(loc, "a subgraph may not refer to itself");
                }
            }
            Lifetime::NoValue
            | Lifetime::TemporaryVariable
            | Lifetime::SubgraphInput
            | Lifetime::SubgraphOutput => {
                if l != Default::default() {
                    self.report(
                        loc,
                        format!(
                            "{} operand must not have a data location",
                            o.lifetime.name()
                        ),
                    );
                }
            }
        }
    }

    fn check_io_lists(&mut self, s: usize, sg: &Subgraph) {
        for (list, lifetime, what) in [
            (&sg.inputs, Lifetime::SubgraphInput, "input"),
            (&sg.outputs, Lifetime::SubgraphOutput, "output"),
        ] {
            let mut seen = HashSet::new();
            for &i in list {
                match sg.operands.get(i as usize) {
                    None => self.report(
                        Location::Subgraph { subgraph: s },
                        format!(
                            "{what} list names operand {i}, but there are {}",
                            sg.operands.len()
                        ),
                    ),
                    Some(o) if o.lifetime != lifetime => self.report(
                        Location::Operand {
                            subgraph: s,
                            operand: i as usize,
                        },
                        format!(
                            "listed as an {what} but its lifetime is {}",
                            o.lifetime.name()
                        ),
                    ),
                    _ => {}
                }
                if !seen.insert(i) {
                    self.report(
                        Location::Subgraph { subgraph: s },
                        format!("operand {i} appears twice in the {what} list"),
                    );
                }
            }
            for (i, o) in sg.operands.iter().enumerate() {
                if o.lifetime == lifetime && !seen.contains(&(i as u32)) {
                    self.report(
                        Location::Operand {
                            subgraph: s,
                            operand: i,
                        },
                        format!(
                            "has lifetime {} but is not in the {what} list",
                            lifetime.name()
                        ),
                    );
                }
            }
        }
        if sg.outputs.is_empty() {
            self.report(Location::Subgraph { subgraph: s }, "has no outputs");
        }
    }

    fn check_operations(&mut self, s: usize, sg: &Subgraph) {
        // An operand is "defined" once it can be read: inputs, constants and omitted
        // values from the start, temporaries and outputs once an operation writes them.
        let mut defined: Vec<bool> = sg
            .operands
            .iter()
            .map(|o| {
                matches!(
                    o.lifetime,
                    Lifetime::SubgraphInput
                        | Lifetime::ConstantCopy
                        | Lifetime::ConstantReference
                        | Lifetime::NoValue
                        | Lifetime::Subgraph
                )
            })
            .collect();
        let mut writers = vec![0usize; sg.operands.len()];
        let producer_exists: Vec<bool> = {
            let mut v = vec![false; sg.operands.len()];
            for op in &sg.operations {
                for &o in &op.outputs {
                    if let Some(slot) = v.get_mut(o as usize) {
                        *slot = true;
                    }
                }
            }
            v
        };
        for (index, op) in sg.operations.iter().enumerate() {
            let loc = || Location::Operation {
                subgraph: s,
                operation: index,
                op_type: op.op_type.name().to_string(),
                source: short_source(&op.source),
            };
            let mut indices_ok = true;
            for (what, list) in [("input", &op.inputs), ("output", &op.outputs)] {
                for (k, &i) in list.iter().enumerate() {
                    if i as usize >= sg.operands.len() {
                        indices_ok = false;
                        self.report(
                            loc(),
                            format!(
                                "{what} {k} names operand {i}, but there are {}",
                                sg.operands.len()
                            ),
                        );
                    }
                }
            }
            if !indices_ok {
                continue;
            }
            for (k, &i) in op.inputs.iter().enumerate() {
                if !defined[i as usize] {
                    let message = if producer_exists[i as usize] {
                        format!(
                            "input {k} (operand {i}) is read before the operation that writes it (not in topological order, or a cycle)"
                        )
                    } else {
                        format!("input {k} (operand {i}) is never written (a dangling input)")
                    };
                    self.report(loc(), message);
                }
            }
            for &o in &op.outputs {
                let operand = &sg.operands[o as usize];
                match operand.lifetime {
                    Lifetime::TemporaryVariable | Lifetime::SubgraphOutput => {}
                    other => self.report(
                        loc(),
                        format!(
                            "writes operand {o}, whose lifetime {} cannot be written",
                            other.name()
                        ),
                    ),
                }
                writers[o as usize] += 1;
                defined[o as usize] = true;
            }
            self.check_signature(s, sg, index, loc());
        }
        for (i, o) in sg.operands.iter().enumerate() {
            let needs_writer = matches!(
                o.lifetime,
                Lifetime::TemporaryVariable | Lifetime::SubgraphOutput
            );
            let loc = Location::Operand {
                subgraph: s,
                operand: i,
            };
            if writers[i] > 1 {
                self.report(
                    loc,
                    format!(
                        "is written by {} operations; exactly one may write it",
                        writers[i]
                    ),
                );
            } else if needs_writer && writers[i] == 0 && o.lifetime == Lifetime::SubgraphOutput {
                self.report(loc, "is a model output that no operation writes");
            }
        }
    }

    fn check_signature(&mut self, s: usize, sg: &Subgraph, index: usize, loc: Location) {
        let op = &sg.operations[index];
        let views: Vec<InputView> = op
            .inputs
            .iter()
            .map(|&i| {
                let operand = &sg.operands[i as usize];
                let value = if s == 0 {
                    self.model.constant_bytes(i)
                } else {
                    super::model::constant_bytes(
                        operand,
                        &self.model.operand_values,
                        &self.model.pools,
                    )
                };
                InputView { operand, value }
            })
            .collect();
        let declared: Vec<&Operand> = op
            .outputs
            .iter()
            .map(|&o| &sg.operands[o as usize])
            .collect();
        let result = if op.op_type.is_control_flow() {
            ops::infer_control_flow(op.op_type, &views, &declared, &self.graphs)
        } else {
            ops::infer(op.op_type, &views, &declared)
        };
        match result {
            Err(e) => self.report(loc, e.to_string()),
            Ok(inferred) => {
                for (k, (shape, operand)) in inferred.iter().zip(&declared).enumerate() {
                    if shape.operand_type != operand.operand_type {
                        self.report(
                            loc.clone(),
                            format!(
                                "output {k} is declared {} but the operation produces {}",
                                operand.operand_type, shape.operand_type
                            ),
                        );
                    }
                    if !dims_compatible(&operand.dimensions, &shape.dimensions) {
                        self.report(
                            loc.clone(),
                            format!(
                                "output {k} is declared {} but the operation produces {}",
                                super::model::dims_to_string(&operand.dimensions),
                                super::model::dims_to_string(&shape.dimensions)
                            ),
                        );
                    }
                }
            }
        }
    }

    fn check_subgraph_references(&mut self) {
        // Edges: subgraph s -> subgraph t when s has a SUBGRAPH operand naming t.
        let graphs = &self.graphs;
        let edges: Vec<Vec<usize>> = graphs
            .iter()
            .map(|g| {
                g.operands
                    .iter()
                    .filter(|o| o.lifetime == Lifetime::Subgraph)
                    .map(|o| o.location.offset as usize)
                    .filter(|&t| t < graphs.len())
                    .collect()
            })
            .collect();
        // Iterative DFS with colours; a grey node reached again closes a cycle. `depth` is
        // the longest chain of graphs from each graph (itself included), computed once per
        // graph when it finishes: each edge is followed once, however many paths (a ladder
        // of IFs has exponentially many) lead through it, and no recursion.
        let mut colour = vec![0u8; graphs.len()];
        let mut depth = vec![0usize; graphs.len()];
        let mut stack = Vec::new();
        for start in 0..graphs.len() {
            if colour[start] != 0 {
                continue;
            }
            stack.push((start, 0usize));
            colour[start] = 1;
            while let Some((node, next)) = stack.pop() {
                if let Some(&child) = edges[node].get(next) {
                    stack.push((node, next + 1));
                    match colour[child] {
                        0 => {
                            colour[child] = 1;
                            stack.push((child, 0));
                        }
                        1 => {
                            self.report(
                                Location::Subgraph { subgraph: node },
                                format!(
                                    "subgraph references form a cycle through subgraph {child}"
                                ),
                            );
                        }
                        _ => {}
                    }
                } else {
                    colour[node] = 2;
                    // Every child is finished (or closes a cycle, reported above).
                    depth[node] = 1 + edges[node].iter().map(|&c| depth[c]).max().unwrap_or(0);
                }
            }
        }
        // Control flow nests by recursion at run time: bound it.
        if depth[0] > MAX_CONTROL_FLOW_DEPTH + 1 {
            self.report(
                Location::Model,
                format!(
                    "control flow nests {} levels deep; at most {MAX_CONTROL_FLOW_DEPTH} are allowed",
                    depth[0] - 1
                ),
            );
        }
    }
}
