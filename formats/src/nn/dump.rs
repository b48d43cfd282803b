//! Human- and machine-readable views of a model: text, JSON and Graphviz.
//!
//! They live beside the IR so that a source model (after lowering) and a compiled `.nnc`
//! (read back without its key) are shown the same way.

use std::collections::HashSet;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::model::{Model, Operand, OperandIndex, Subgraph, dims_to_string};
use super::ops::input_role;
use super::types::{Lifetime, OperandType};

/// A short rendering of a constant's value: scalars in full, small vectors up to eight
/// elements. `None` for non-constants, large tensors, and values not at hand.
pub fn constant_preview(model: &Model, index: OperandIndex) -> Option<String> {
    let operand = model.operand(index)?;
    let bytes = model.constant_bytes(index)?;
    preview(operand, bytes)
}

/// [`constant_preview`] for an operand of any graph; a SUBGRAPH operand shows the graph
/// it refers to (`subgraph 2`).
fn preview_in(model: &Model, graph: &Subgraph, index: OperandIndex) -> Option<String> {
    let operand = graph.operands.get(index as usize)?;
    if operand.lifetime == Lifetime::Subgraph {
        return Some(format!("subgraph {}", operand.location.offset));
    }
    let bytes = super::model::constant_bytes(operand, &model.operand_values, &model.pools)?;
    preview(operand, bytes)
}

fn preview(operand: &Operand, bytes: &[u8]) -> Option<String> {
    const MAX: usize = 8;
    let words = |b: &[u8]| -> Vec<[u8; 4]> {
        b.chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect()
    };
    match operand.operand_type {
        OperandType::Int32 => words(bytes)
            .first()
            .map(|w| i32::from_le_bytes(*w).to_string()),
        OperandType::Uint32 => words(bytes)
            .first()
            .map(|w| u32::from_le_bytes(*w).to_string()),
        OperandType::Float32 => words(bytes)
            .first()
            .map(|w| format_f32(f32::from_le_bytes(*w))),
        OperandType::Bool => bytes.first().map(|b| (*b != 0).to_string()),
        OperandType::Float16 if bytes.len() == 2 => {
            Some(format_f32(super::ops::f16_to_f32(u16::from_le_bytes([
                bytes[0], bytes[1],
            ]))))
        }
        OperandType::TensorInt32 if bytes.len() <= 4 * MAX => Some(format!(
            "[{}]",
            words(bytes)
                .iter()
                .map(|w| i32::from_le_bytes(*w).to_string())
                .collect::<Vec<_>>()
                .join(",")
        )),
        OperandType::TensorFloat32 if bytes.len() <= 4 * MAX => Some(format!(
            "[{}]",
            words(bytes)
                .iter()
                .map(|w| format_f32(f32::from_le_bytes(*w)))
                .collect::<Vec<_>>()
                .join(",")
        )),
        _ => None,
    }
}

fn format_f32(v: f32) -> String {
    if v.is_finite() && v == v.trunc() && v.abs() < 1e9 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

fn lifetime_tag(lifetime: Lifetime) -> Option<&'static str> {
    match lifetime {
        Lifetime::ConstantCopy => Some("COPY"),
        Lifetime::ConstantReference => Some("REF"),
        Lifetime::NoValue => Some("NO_VALUE"),
        // The type (SUBGRAPH) says it already.
        _ => None,
    }
}

/// The model as a listing: inputs, outputs, then one line per operation.
pub fn to_text(model: &Model) -> String {
    let mut out = String::new();
    let sg = &model.main;
    let _ = write!(
        out,
        "model: {} inputs, {} outputs, {} operations, {} operands, {} parameters ({} bytes of constants)",
        sg.inputs.len(),
        sg.outputs.len(),
        sg.operations.len(),
        sg.operands.len(),
        model.parameter_count(),
        model.constant_byte_count()
    );
    if !model.referenced.is_empty() {
        let _ = write!(out, ", {} referenced subgraphs", model.referenced.len());
    }
    out.push('\n');
    for (title, list, info) in [
        ("inputs", &sg.inputs, &model.input_info),
        ("outputs", &sg.outputs, &model.output_info),
    ] {
        let _ = writeln!(out, "{title}:");
        for (k, &i) in list.iter().enumerate() {
            let desc = model
                .operand(i)
                .map(operand_text)
                .unwrap_or_else(|| "<missing operand>".into());
            let name = info.get(k).map(|n| n.name.as_str()).unwrap_or("");
            let _ = writeln!(out, "  {k}: %{i} '{name}' {desc}");
        }
    }
    let _ = writeln!(out, "operations:");
    operations_text(&mut out, model, sg);
    // Referenced subgraphs (IF/WHILE branches and bodies), numbered as SUBGRAPH operands
    // refer to them.
    for (k, g) in model.referenced.iter().enumerate() {
        let _ = writeln!(
            out,
            "subgraph {}: {} inputs, {} outputs, {} operations, {} operands",
            k + 1,
            g.inputs.len(),
            g.outputs.len(),
            g.operations.len(),
            g.operands.len()
        );
        for (title, list) in [("inputs", &g.inputs), ("outputs", &g.outputs)] {
            let _ = writeln!(out, "  {title}:");
            for (j, &i) in list.iter().enumerate() {
                let desc = g
                    .operands
                    .get(i as usize)
                    .map(operand_text)
                    .unwrap_or_else(|| "<missing operand>".into());
                let _ = writeln!(out, "    {j}: %{i} {desc}");
            }
        }
        let _ = writeln!(out, "  operations:");
        let mut listing = String::new();
        operations_text(&mut listing, model, g);
        for line in listing.lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    out
}

/// One line per operation of graph `g`.
fn operations_text(out: &mut String, model: &Model, g: &Subgraph) {
    for (index, op) in g.operations.iter().enumerate() {
        let args: Vec<String> = op
            .inputs
            .iter()
            .map(|&i| match preview_in(model, g, i) {
                Some(v) => format!("%{i}={v}"),
                None => match g.operands.get(i as usize) {
                    Some(o) if o.lifetime == Lifetime::ConstantReference => {
                        format!("%{i}:REF {}", o.short_description())
                    }
                    Some(o) if o.lifetime == Lifetime::NoValue => format!("%{i}:NO_VALUE"),
                    _ => format!("%{i}"),
                },
            })
            .collect();
        let results: Vec<String> = op
            .outputs
            .iter()
            .map(|&o| match g.operands.get(o as usize) {
                Some(operand) => format!("%{o}:{}", operand.short_description()),
                None => format!("%{o}"),
            })
            .collect();
        let _ = write!(
            out,
            "  {index}: {}({}) -> {}",
            op.op_type.name(),
            args.join(", "),
            results.join(", ")
        );
        if !op.source.is_empty() {
            let _ = write!(out, "  # {}", op.source);
        }
        out.push('\n');
    }
}

fn operand_text(o: &Operand) -> String {
    let mut s = format!(
        "{} {}",
        o.operand_type.name(),
        dims_to_string(&o.dimensions)
    );
    if o.operand_type.is_quantized() && o.channel_quant.is_none() {
        let _ = write!(s, " scale={} zero_point={}", o.scale, o.zero_point);
    }
    s
}

/// The model as JSON: every operand (with small constant values) and every operation.
pub fn to_json(model: &Model) -> Value {
    let sg = &model.main;
    let (operands, operations) = graph_json(model, sg);
    let subgraphs: Vec<Value> = model
        .referenced
        .iter()
        .enumerate()
        .map(|(k, g)| {
            let (operands, operations) = graph_json(model, g);
            json!({
                "index": k + 1,
                "inputs": g.inputs,
                "outputs": g.outputs,
                "operands": operands,
                "operations": operations,
            })
        })
        .collect();
    json!({
        "inputs": sg.inputs,
        "outputs": sg.outputs,
        "input_info": model.input_info,
        "output_info": model.output_info,
        "operands": operands,
        "operations": operations,
        "pools": model.pools,
        "inline_bytes": model.operand_values.len(),
        "relax_computation_float32_to_float16": model.relax_computation_float32_to_float16,
        "referenced_subgraphs": model.referenced.len(),
        "subgraphs": subgraphs,
    })
}

/// The operands and operations of graph `g` as JSON; a SUBGRAPH operand names the graph
/// it refers to (`"subgraph": t`).
fn graph_json(model: &Model, g: &Subgraph) -> (Vec<Value>, Vec<Value>) {
    let operands: Vec<Value> = g
        .operands
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
            if let Value::Object(map) = &mut v {
                map.insert("index".into(), json!(i));
                if o.lifetime == Lifetime::Subgraph {
                    map.insert("subgraph".into(), json!(o.location.offset));
                } else if let Some(p) = preview_in(model, g, i as OperandIndex) {
                    map.insert("value".into(), json!(p));
                }
            }
            v
        })
        .collect();
    let operations: Vec<Value> = g
        .operations
        .iter()
        .enumerate()
        .map(|(i, op)| {
            json!({
                "index": i,
                "type": op.op_type.name(),
                "code": op.op_type.code(),
                "inputs": op.inputs,
                "outputs": op.outputs,
                "source": op.source,
            })
        })
        .collect();
    (operands, operations)
}

/// A group of operations drawn as one Graphviz cluster (a partition step).
#[derive(Clone, Debug)]
pub struct DotCluster {
    pub label: String,
    /// A Graphviz colour name or `#rrggbb`.
    pub color: String,
    pub operations: Vec<usize>,
}

/// Options for [`to_dot`].
#[derive(Clone, Debug, Default)]
pub struct DotOptions {
    pub title: Option<String>,
    pub clusters: Vec<DotCluster>,
    /// Operands that cross between clusters; drawn with a bold red border.
    pub highlighted_operands: HashSet<OperandIndex>,
    /// Fill colours of some operations of the main graph (a Graphviz colour name or
    /// `#rrggbb`; `nnc diff` marks what changed) and a note for each, added to its label.
    pub operation_marks: std::collections::HashMap<usize, (String, String)>,
}

fn escape(label: &str) -> String {
    let mut s = String::with_capacity(label.len());
    for c in label.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            c if c.is_control() => {}
            c => s.push(c),
        }
    }
    s
}

/// The model as a Graphviz digraph following the NN dump convention: operands are
/// ellipses (index, role, lifetime, short type and dimensions, small constant values),
/// operations are boxes `i: TYPE`, edges run operand -> operation -> operand numbered by
/// argument position, and model inputs and outputs are filled.
pub fn to_dot(model: &Model, options: &DotOptions) -> String {
    let sg = &model.main;
    let mut out = String::new();
    out.push_str("digraph model {\n");
    if let Some(title) = &options.title {
        let _ = writeln!(out, "  label=\"{}\";\n  labelloc=t;", escape(title));
    }
    out.push_str("  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=8];\n");
    if !model.referenced.is_empty() {
        // Edges from IF/WHILE operations end at the clusters of their subgraphs.
        out.push_str("  compound=true;\n");
    }
    let mut clustered = vec![None; sg.operations.len()];
    for (c, cluster) in options.clusters.iter().enumerate() {
        for &op in &cluster.operations {
            if let Some(slot) = clustered.get_mut(op) {
                *slot = Some(c);
            }
        }
    }
    // An operand is drawn in the cluster of the operation that writes it (constants are
    // folded into operation labels). With operands outside and operations inside, every
    // step had edges out to and back in from the same nodes, and dot flattened the whole
    // graph into two ranks (MobileNetV2 on two devices: 32,767 x 557 pixels).
    let mut operand_cluster: Vec<Option<usize>> = vec![None; sg.operands.len()];
    for (i, op) in sg.operations.iter().enumerate() {
        let Some(c) = clustered[i] else { continue };
        for &o in &op.outputs {
            if let Some(slot) = operand_cluster.get_mut(o as usize) {
                *slot = Some(c);
            }
        }
    }
    let outside = |o: OperandIndex| operand_cluster.get(o as usize).is_none_or(|c| c.is_none());
    dot_operands(
        &mut out,
        model,
        sg,
        "",
        "  ",
        &options.highlighted_operands,
        &outside,
    );
    let op_node = |i: usize| {
        let (color, note) = options
            .operation_marks
            .get(&i)
            .map_or(("#dbe9ff", ""), |(c, n)| (c.as_str(), n.as_str()));
        let mut label = operation_label(model, sg, i);
        if !note.is_empty() {
            label.push('\n');
            label.push_str(note);
        }
        format!(
            "  o{i} [shape=box, style=\"rounded,filled\", fillcolor=\"{}\", label=\"{}\"];\n",
            escape(color),
            escape(&label)
        )
    };
    for (c, cluster) in options.clusters.iter().enumerate() {
        let _ = writeln!(
            out,
            "  subgraph cluster_{c} {{\n    label=\"{}\";\n    style=\"filled,rounded\";\n    color=\"{}\";\n    fillcolor=\"{}20\";",
            escape(&cluster.label),
            escape(&cluster.color),
            escape(&cluster.color)
        );
        for &op in &cluster.operations {
            if op < sg.operations.len() {
                out.push_str("  ");
                out.push_str(&op_node(op));
            }
        }
        dot_operands(
            &mut out,
            model,
            sg,
            "",
            "    ",
            &options.highlighted_operands,
            &|o| operand_cluster.get(o as usize).copied().flatten() == Some(c),
        );
        out.push_str("  }\n");
    }
    for (i, slot) in clustered.iter().enumerate() {
        if slot.is_none() {
            out.push_str(&op_node(i));
        }
    }
    dot_edges(&mut out, sg, "");
    // One cluster per referenced subgraph, and a dashed edge from every IF/WHILE to the
    // clusters of the subgraphs it runs.
    for (k, g) in model.referenced.iter().enumerate() {
        let t = k + 1;
        let prefix = format!("s{t}_");
        let _ = writeln!(
            out,
            "  subgraph cluster_sg{t} {{\n    label=\"subgraph {t}\";\n    style=\"dashed,rounded\";\n    color=\"#7a7a7a\";"
        );
        dot_operands(
            &mut out,
            model,
            g,
            &prefix,
            "    ",
            &HashSet::new(),
            &|_| true,
        );
        for i in 0..g.operations.len() {
            let _ = writeln!(
                out,
                "    {prefix}o{i} [shape=box, style=\"rounded,filled\", fillcolor=\"#dbe9ff\", label=\"{}\"];",
                escape(&operation_label(model, g, i))
            );
        }
        out.push_str("  }\n");
        dot_edges(&mut out, g, &prefix);
    }
    for (t, g) in model.graphs().enumerate() {
        let prefix = if t == 0 {
            String::new()
        } else {
            format!("s{t}_")
        };
        for (i, op) in g.operations.iter().enumerate() {
            for (k, &input) in op.inputs.iter().enumerate() {
                let Some(o) = g.operands.get(input as usize) else {
                    continue;
                };
                if o.lifetime != Lifetime::Subgraph {
                    continue;
                }
                let target = o.location.offset as usize;
                let Some(anchor) = cluster_anchor(model, target) else {
                    continue;
                };
                let role = input_role(op.op_type, k, op.inputs.len());
                let _ = writeln!(
                    out,
                    "  {prefix}o{i} -> {anchor} [style=dashed, lhead=cluster_sg{target}, label=\"{}\"];",
                    escape(role.name())
                );
            }
        }
    }
    out.push_str("}\n");
    out
}

/// A node inside the cluster of referenced subgraph `t` for edges to end at: its first
/// operation, or its first input.
fn cluster_anchor(model: &Model, t: usize) -> Option<String> {
    let g = model.referenced.get(t.checked_sub(1)?)?;
    if !g.operations.is_empty() {
        Some(format!("s{t}_o0"))
    } else {
        g.inputs
            .first()
            .or(g.outputs.first())
            .map(|i| format!("s{t}_d{i}"))
    }
}

/// Whether operand `index` of `g` is drawn inside the label of the operations reading
/// it rather than as a node of its own: every constant (scalar parameters such as
/// strides, paddings and fused activations, weights, biases) and omitted optional
/// inputs. As nodes, a CNN's dozen scalars per operation sat side by side (MobileNetV2:
/// 54,000 points wide), and its weights pushed the chain sideways one step per layer
/// (4,300 points); folded, the graph is the data path, one operation under the next.
fn folded(g: &Subgraph, index: OperandIndex) -> bool {
    let Some(o) = g.operands.get(index as usize) else {
        return false;
    };
    !g.inputs.contains(&index)
        && !g.outputs.contains(&index)
        && matches!(
            o.lifetime,
            Lifetime::NoValue | Lifetime::ConstantCopy | Lifetime::ConstantReference
        )
}

/// The label of operation `i` of `g`: `i: TYPE`, its constant tensors one a line
/// (`filter %3 TF32 32x3x3x3`), then its scalar and small parameters as `role=value`,
/// a few a line.
fn operation_label(model: &Model, g: &Subgraph, i: usize) -> String {
    let op = &g.operations[i];
    let mut label = format!("{i}: {}", op.op_type.name());
    let mut params = Vec::new();
    for (k, &input) in op.inputs.iter().enumerate() {
        let Some(o) = g.operands.get(input as usize).filter(|_| folded(g, input)) else {
            continue;
        };
        let role = input_role(op.op_type, k, op.inputs.len()).name();
        if o.lifetime == Lifetime::NoValue {
            params.push(format!("{role}=none"));
        } else if let Some(v) = preview_in(model, g, input) {
            params.push(format!("{role}={v}"));
        } else {
            label.push_str(&format!("\n{role} %{input} {}", o.short_description()));
        }
    }
    // About 40 characters a line keeps the box narrow.
    let mut line = String::new();
    for p in params {
        if !line.is_empty() && line.len() + p.len() > 40 {
            label.push('\n');
            label.push_str(&line);
            line.clear();
        }
        if !line.is_empty() {
            line.push_str(", ");
        }
        line.push_str(&p);
    }
    if !line.is_empty() {
        label.push('\n');
        label.push_str(&line);
    }
    label
}

/// The operand nodes of graph `g` (those any operation or list uses, except those
/// [`folded`] into operation labels), named `{prefix}d{index}`.
fn dot_operands(
    out: &mut String,
    model: &Model,
    g: &Subgraph,
    prefix: &str,
    indent: &str,
    highlighted: &HashSet<OperandIndex>,
    only: &dyn Fn(OperandIndex) -> bool,
) {
    let used: HashSet<OperandIndex> = g
        .operations
        .iter()
        .flat_map(|op| op.inputs.iter().chain(&op.outputs).copied())
        .chain(g.inputs.iter().copied())
        .chain(g.outputs.iter().copied())
        .collect();
    for (i, o) in g.operands.iter().enumerate() {
        let index = i as OperandIndex;
        if !used.contains(&index) || folded(g, index) || !only(index) {
            continue;
        }
        let mut lines = vec![format!("{i}")];
        if let Some(k) = g.inputs.iter().position(|&x| x == index) {
            lines[0].push_str(&format!(" (input {k})"));
        }
        if let Some(k) = g.outputs.iter().position(|&x| x == index) {
            lines[0].push_str(&format!(" (output {k})"));
        }
        if let Some(tag) = lifetime_tag(o.lifetime) {
            lines.push(tag.to_string());
        }
        lines.push(o.short_description());
        if (o.operand_type.is_scalar() || o.lifetime == Lifetime::Subgraph)
            && let Some(v) = preview_in(model, g, index)
        {
            lines.push(format!("= {v}"));
        }
        let io = g.inputs.contains(&index) || g.outputs.contains(&index);
        let mut attrs = format!("shape=ellipse, label=\"{}\"", escape(&lines.join("\n")));
        if io {
            attrs.push_str(", style=filled, fillcolor=\"#ffe08a\"");
        }
        if highlighted.contains(&index) {
            attrs.push_str(", color=red, penwidth=2");
        }
        let _ = writeln!(out, "{indent}{prefix}d{i} [{attrs}];");
    }
}

/// The data edges of graph `g`, numbered by argument position.
fn dot_edges(out: &mut String, g: &Subgraph, prefix: &str) {
    for (i, op) in g.operations.iter().enumerate() {
        for (k, &input) in op.inputs.iter().enumerate() {
            if folded(g, input) {
                continue;
            }
            let role = input_role(op.op_type, k, op.inputs.len());
            let _ = writeln!(
                out,
                "  {prefix}d{input} -> {prefix}o{i} [label=\"{k}:{}\"];",
                escape(role.name())
            );
        }
        for (k, &output) in op.outputs.iter().enumerate() {
            let _ = writeln!(out, "  {prefix}o{i} -> {prefix}d{output} [label=\"{k}\"];");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::types::OperationType;

    fn tiny() -> Model {
        let mut m = Model::default();
        let mut input = Operand::new(OperandType::TensorFloat32, vec![1, 4]);
        input.lifetime = Lifetime::SubgraphInput;
        let x = m.add_operand(input);
        let w = m.add_f32_tensor(vec![1, 4], &[1.0, 2.0, 3.0, 4.0]);
        let act = m.add_i32(0);
        let mut output = Operand::new(OperandType::TensorFloat32, vec![1, 4]);
        output.lifetime = Lifetime::SubgraphOutput;
        let y = m.add_operand(output);
        m.add_operation(
            OperationType::Add,
            vec![x, w, act],
            vec![y],
            "add \"quoted\"",
        );
        m.main.inputs = vec![x];
        m.main.outputs = vec![y];
        m
    }

    #[test]
    fn dot_follows_the_convention() {
        let dot = to_dot(&tiny(), &DotOptions::default());
        assert!(
            dot.contains("d0 [shape=ellipse, label=\"0 (input 0)\\nTF32 1x4\", style=filled"),
            "{dot}"
        );
        assert!(dot.contains("o0 [shape=box"), "{dot}");
        // Constants are in the operation's label: small ones as role=value.
        assert!(
            dot.contains("label=\"0: ADD\\ninput1=[1.0,2.0,3.0,4.0], activation=0\""),
            "{dot}"
        );
        assert!(!dot.contains("d1 ["), "{dot}");
        assert!(!dot.contains("d2 ["), "{dot}");
        assert!(!dot.contains("d1 -> o0"), "{dot}");
        assert!(dot.contains("d0 -> o0 [label=\"0:input0\"]"), "{dot}");
        assert!(dot.contains("o0 -> d3 [label=\"0\"]"), "{dot}");
    }

    #[test]
    fn dot_folds_large_constants_and_draws_step_operands_in_their_cluster() {
        let mut m = tiny();
        let big = m.add_f32_tensor(vec![4, 4], &[0.5; 16]);
        m.main.operations[0].inputs[1] = big;
        let options = DotOptions {
            clusters: vec![DotCluster {
                label: "step 0".into(),
                color: "#4c72b0".into(),
                operations: vec![0],
            }],
            ..Default::default()
        };
        let dot = to_dot(&m, &options);
        assert!(dot.contains(&format!("input1 %{big} TF32 4x4")), "{dot}");
        assert!(!dot.contains(&format!("d{big} ")), "{dot}");
        // The model output, written by operation 0, is inside the step's cluster.
        let cluster = &dot[dot.find("subgraph cluster_0 {").expect("a cluster")..];
        let cluster = &cluster[..cluster.find("\n  }\n").expect("its end")];
        assert!(cluster.contains("    d3 [shape=ellipse"), "{dot}");
        assert!(!cluster.contains("d0 ["), "{dot}");
    }

    #[test]
    fn text_shows_values_and_sources() {
        let text = to_text(&tiny());
        assert!(
            text.contains(
                "0: ADD(%0, %1=[1.0,2.0,3.0,4.0], %2=0) -> %3:TF32 1x4  # add \"quoted\""
            ),
            "{text}"
        );
    }

    #[test]
    fn text_lists_every_referenced_subgraph() {
        let text = to_text(&crate::test_support::control_flow::if_model());
        assert!(
            text.starts_with(
                "model: 2 inputs, 1 outputs, 1 operations, 5 operands, 80 parameters (332 bytes of constants), 2 referenced subgraphs\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("0: IF(%0, %2=subgraph 1, %3=subgraph 2, %1) -> %4:TF32 ?  # if"),
            "{text}"
        );
        assert!(
            text.contains("subgraph 1: 1 inputs, 1 outputs, 1 operations, 4 operands"),
            "{text}"
        );
        assert!(text.contains("    0: %2 TENSOR_FLOAT32 40"), "{text}");
        assert!(
            text.contains("    1: CONCATENATION(%4, %3, %2=0) -> %5:TF32 80  # else/concat"),
            "{text}"
        );
    }

    #[test]
    fn json_lists_every_referenced_subgraph() {
        let v = to_json(&crate::test_support::control_flow::while_model());
        assert_eq!(v["referenced_subgraphs"], 2);
        assert_eq!(v["operands"][4]["subgraph"], 1);
        assert_eq!(v["operands"][5]["subgraph"], 2);
        assert_eq!(v["subgraphs"][0]["index"], 1);
        assert_eq!(v["subgraphs"][0]["operations"][0]["type"], "LESS");
        assert_eq!(v["subgraphs"][1]["operations"][2]["source"], "body/double");
        assert_eq!(v["subgraphs"][1]["outputs"], json!([7, 8, 9]));
        assert_eq!(v["subgraphs"][1]["operands"][6]["value"], "0");
        // A model without subgraphs has an empty list.
        assert_eq!(to_json(&tiny())["subgraphs"], json!([]));
    }

    #[test]
    fn dot_draws_a_cluster_per_subgraph_with_dashed_edges() {
        let dot = to_dot(
            &crate::test_support::control_flow::nested_model(),
            &DotOptions::default(),
        );
        assert!(dot.contains("compound=true;"), "{dot}");
        for t in 1..=4 {
            assert!(dot.contains(&format!("subgraph cluster_sg{t} {{")), "{dot}");
        }
        assert!(
            dot.contains("o0 -> s1_o0 [style=dashed, lhead=cluster_sg1, label=\"condition\"]"),
            "{dot}"
        );
        assert!(
            dot.contains("o0 -> s2_o0 [style=dashed, lhead=cluster_sg2, label=\"body\"]"),
            "{dot}"
        );
        // The IF inside the body (operation 1 of subgraph 2) points at its branches.
        assert!(
            dot.contains("s2_o1 -> s3_o0 [style=dashed, lhead=cluster_sg3, label=\"then\"]"),
            "{dot}"
        );
        assert!(dot.contains("s2_o1 -> s4_o0 [style=dashed, lhead=cluster_sg4, label=\"else\"]"));
        assert!(dot.contains("    s1_o0 [shape=box"), "{dot}");
        assert!(
            dot.contains("  s1_d0 -> s1_o0 [label=\"0:input\"];"),
            "{dot}"
        );
        // Without subgraphs nothing changes.
        assert!(!to_dot(&tiny(), &DotOptions::default()).contains("compound"));
    }

    #[test]
    fn json_has_operations_and_values() {
        let v = to_json(&tiny());
        assert_eq!(v["operations"][0]["type"], "ADD");
        assert_eq!(v["operations"][0]["code"], 0);
        assert_eq!(v["operands"][2]["value"], "0");
        assert_eq!(v["operands"][0]["lifetime"], "SUBGRAPH_INPUT");
    }
}
