//! Human- and machine-readable views of a model: text, JSON and Graphviz.
//!
//! They live beside the IR so that a source model (after lowering) and a compiled `.nnc`
//! (read back without its key) are shown the same way.

use std::collections::HashSet;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::model::{Model, Operand, OperandIndex, dims_to_string};
use super::signature::input_role;
use super::types::{Lifetime, OperandType};

/// A short rendering of a constant's value: scalars in full, small vectors up to eight
/// elements. `None` for non-constants, large tensors, and values not at hand.
pub fn constant_preview(model: &Model, index: OperandIndex) -> Option<String> {
    let operand = model.operand(index)?;
    let bytes = model.constant_bytes(index)?;
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
        OperandType::Float16 if bytes.len() == 2 => Some(format_f32(super::signature::f16_to_f32(
            u16::from_le_bytes([bytes[0], bytes[1]]),
        ))),
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
        Lifetime::Subgraph => Some("SUBGRAPH"),
        _ => None,
    }
}

/// The model as a listing: inputs, outputs, then one line per operation.
pub fn to_text(model: &Model) -> String {
    let mut out = String::new();
    let sg = &model.main;
    let _ = writeln!(
        out,
        "model: {} inputs, {} outputs, {} operations, {} operands, {} parameters ({} bytes of constants)",
        sg.inputs.len(),
        sg.outputs.len(),
        sg.operations.len(),
        sg.operands.len(),
        model.parameter_count(),
        model.constant_byte_count()
    );
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
    for (index, op) in sg.operations.iter().enumerate() {
        let args: Vec<String> = op
            .inputs
            .iter()
            .map(|&i| match constant_preview(model, i) {
                Some(v) => format!("%{i}={v}"),
                None => match model.operand(i) {
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
            .map(|&o| match model.operand(o) {
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
    out
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
    let operands: Vec<Value> = sg
        .operands
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
            if let Value::Object(map) = &mut v {
                map.insert("index".into(), json!(i));
                if let Some(p) = constant_preview(model, i as OperandIndex) {
                    map.insert("value".into(), json!(p));
                }
            }
            v
        })
        .collect();
    let operations: Vec<Value> = sg
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
    })
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
    let used: HashSet<OperandIndex> = sg
        .operations
        .iter()
        .flat_map(|op| op.inputs.iter().chain(&op.outputs).copied())
        .chain(sg.inputs.iter().copied())
        .chain(sg.outputs.iter().copied())
        .collect();
    for (i, o) in sg.operands.iter().enumerate() {
        let index = i as OperandIndex;
        if !used.contains(&index) {
            continue;
        }
        let mut lines = vec![format!("{i}")];
        if let Some(k) = sg.inputs.iter().position(|&x| x == index) {
            lines[0].push_str(&format!(" (input {k})"));
        }
        if let Some(k) = sg.outputs.iter().position(|&x| x == index) {
            lines[0].push_str(&format!(" (output {k})"));
        }
        if let Some(tag) = lifetime_tag(o.lifetime) {
            lines.push(tag.to_string());
        }
        lines.push(o.short_description());
        if o.operand_type.is_scalar()
            && let Some(v) = constant_preview(model, index)
        {
            lines.push(format!("= {v}"));
        }
        let io = sg.inputs.contains(&index) || sg.outputs.contains(&index);
        let mut attrs = format!("shape=ellipse, label=\"{}\"", escape(&lines.join("\n")));
        if io {
            attrs.push_str(", style=filled, fillcolor=\"#ffe08a\"");
        }
        if options.highlighted_operands.contains(&index) {
            attrs.push_str(", color=red, penwidth=2");
        }
        let _ = writeln!(out, "  d{i} [{attrs}];");
    }
    let mut clustered = vec![None; sg.operations.len()];
    for (c, cluster) in options.clusters.iter().enumerate() {
        for &op in &cluster.operations {
            if let Some(slot) = clustered.get_mut(op) {
                *slot = Some(c);
            }
        }
    }
    let op_node = |i: usize| {
        format!(
            "  o{i} [shape=box, style=\"rounded,filled\", fillcolor=\"#dbe9ff\", label=\"{}\"];\n",
            escape(&format!("{i}: {}", sg.operations[i].op_type.name()))
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
        out.push_str("  }\n");
    }
    for (i, slot) in clustered.iter().enumerate() {
        if slot.is_none() {
            out.push_str(&op_node(i));
        }
    }
    for (i, op) in sg.operations.iter().enumerate() {
        for (k, &input) in op.inputs.iter().enumerate() {
            let role = input_role(op.op_type, k, op.inputs.len());
            let _ = writeln!(out, "  d{input} -> o{i} [label=\"{k}:{}\"];", escape(role));
        }
        for (k, &output) in op.outputs.iter().enumerate() {
            let _ = writeln!(out, "  o{i} -> d{output} [label=\"{k}\"];");
        }
    }
    out.push_str("}\n");
    out
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
        assert!(dot.contains("label=\"2\\nCOPY\\nI32\\n= 0\""), "{dot}");
        assert!(dot.contains("o0 [shape=box"), "{dot}");
        assert!(dot.contains("label=\"0: ADD\""), "{dot}");
        assert!(dot.contains("d1 -> o0 [label=\"1:input1\"]"), "{dot}");
        assert!(dot.contains("o0 -> d3 [label=\"0\"]"), "{dot}");
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
    fn json_has_operations_and_values() {
        let v = to_json(&tiny());
        assert_eq!(v["operations"][0]["type"], "ADD");
        assert_eq!(v["operations"][0]["code"], 0);
        assert_eq!(v["operands"][2]["value"], "0");
        assert_eq!(v["operands"][0]["lifetime"], "SUBGRAPH_INPUT");
    }
}
