//! Pre-lowering rewrites of the ONNX graph: patterns whose meaning is the whole chain,
//! not any one node of it.
//!
//! ONNX Runtime's `quantize_dynamic` writes each MatMul with constant weights as
//!
//! ```text
//! x ─ DynamicQuantizeLinear ─┬─ x_q ──── MatMulInteger(x_q, W_q, x_zp, W_zp) ─ Cast(float) ─ Mul ─ [Add(bias)]
//!                            ├─ x_zp ───┘                                                   │
//!                            └─ x_scale ─ Mul(x_scale, W_scale) ────────────────────────────┘
//! ```
//!
//! which is ONNX Runtime's own contrib operator `com.microsoft.DynamicQuantizeMatMul(x,
//! W_q, W_scale, W_zp, bias)` written out (its optimizer fuses it back the same way). This
//! module fuses each such chain into that one node, which lowers to nnc's
//! DYNAMIC_FULLY_CONNECTED (`lower/dynamic_quant.rs`). One DynamicQuantizeLinear often
//! feeds several MatMulIntegers (a BERT layer's query, key and value): it goes when every
//! reader of its outputs was fused.
//!
//! Why a rewrite of the graph before lowering, and not a DynamicQuantizeLinear lowered to
//! a deferred value that MatMulInteger, Cast and the Muls then consume: the lowering is
//! node by node, and a deferred value would be a third kind of value (beside constants
//! and operands) that every lowering reading an input would have to refuse or
//! materialize; the uint8 tensor, its zero point and its scale mean nothing to the NN
//! set on their own (DYNAMIC_FULLY_CONNECTED quantizes inside the operation). Matching
//! the chain on the graph keeps the rest of the importer unaware of it, reports a chain
//! that does not fit by its own nodes, and lets models that ONNX Runtime's optimizer
//! already fused (`DynamicQuantizeMatMul` nodes) take the same lowering.

use std::collections::{HashMap, HashSet};

use nnc_formats::tensor::DataType;

use super::lower::registry::{MICROSOFT, is_default_domain};
use super::node_label;
use super::proto::{GraphProto, NodeProto, TensorProto, tensor_proto};

/// What the rewrites did, for the unsupported report: a fused node is reported as the
/// source node it stands for, and a source node left alone says why it did not fit.
#[derive(Clone, Debug, Default)]
pub struct RewriteNotes {
    /// Fused node's label -> the operator the report names (`MatMulInteger`).
    pub reported_as: HashMap<String, String>,
    /// Node label -> why it was not fused, added to the reason the node itself fails.
    pub not_fused: HashMap<String, String>,
}

impl RewriteNotes {
    /// The operator key the unsupported report lists `node` under.
    pub fn op_key(&self, node: &NodeProto) -> String {
        self.reported_as
            .get(&node_label(node))
            .cloned()
            .unwrap_or_else(|| super::op_key(node))
    }

    /// `reason` (why `node` failed), with why it was not fused when it could have been.
    pub fn explain(&self, node: &NodeProto, reason: String) -> String {
        match self.not_fused.get(&node_label(node)) {
            Some(why) => format!(
                "{reason} (not fused into ONNX Runtime's dynamic quantization of a MatMul, \
                 DynamicQuantizeLinear -> MatMulInteger -> Cast to float -> Mul by the \
                 scales, which nnc runs as DYNAMIC_FULLY_CONNECTED: {why})"
            ),
            None => reason,
        }
    }
}

/// The graph after the rewrites (`None`: nothing matched, the graph is unchanged).
pub struct Rewritten {
    pub graph: Option<GraphProto>,
    pub notes: RewriteNotes,
}

/// The operator the fused chains become.
pub const FUSED_OP: &str = "DynamicQuantizeMatMul";

/// One matched chain: the nodes it removes and the node that replaces it.
struct Chain {
    /// MatMulInteger, Cast, Mul and (when folded) the bias Add.
    nodes: Vec<usize>,
    dql: usize,
    scale_mul: usize,
    fused: NodeProto,
}

/// Readers of each value, and the producer of each.
struct Uses<'g> {
    /// `usize::MAX` stands for a subgraph's read.
    readers: HashMap<String, Vec<usize>>,
    producer: HashMap<&'g str, (usize, usize)>,
    outputs: HashSet<&'g str>,
    initializers: HashMap<&'g str, &'g TensorProto>,
}

impl<'g> Uses<'g> {
    fn new(graph: &'g GraphProto) -> Uses<'g> {
        let mut readers: HashMap<String, Vec<usize>> = HashMap::new();
        let mut producer = HashMap::new();
        for (i, node) in graph.node.iter().enumerate() {
            for input in node.input.iter().filter(|x| !x.is_empty()) {
                readers.entry(input.clone()).or_default().push(i);
            }
            // A subgraph's reads hold the value: no chain may remove it.
            for input in super::implicit_inputs(node) {
                readers.entry(input).or_default().push(usize::MAX);
            }
            for (k, out) in node.output.iter().enumerate() {
                producer.entry(out.as_str()).or_insert((i, k));
            }
        }
        Uses {
            readers,
            producer,
            outputs: graph.output.iter().map(|o| o.name.as_str()).collect(),
            initializers: graph
                .initializer
                .iter()
                .map(|t| (t.name.as_str(), t))
                .collect(),
        }
    }

    /// The one node reading `value`, when exactly one does and it is not a graph output.
    fn only_reader(&self, value: &str) -> Option<usize> {
        match self.readers.get(value).map(Vec::as_slice) {
            Some(&[r]) if r != usize::MAX && !self.outputs.contains(value) => Some(r),
            _ => None,
        }
    }

    fn readers(&self, value: &str) -> &[usize] {
        self.readers.get(value).map_or(&[], Vec::as_slice)
    }
}

fn is_op(node: &NodeProto, op: &str) -> bool {
    is_default_domain(&node.domain) && node.op_type == op
}

fn input(node: &NodeProto, i: usize) -> Option<&str> {
    node.input
        .get(i)
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// Fuses every DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add] chain of
/// `graph` (its top level) into one `com.microsoft.DynamicQuantizeMatMul`.
pub fn fuse_dynamic_matmuls(graph: &GraphProto) -> Rewritten {
    if !graph
        .node
        .iter()
        .any(|n| is_op(n, "MatMulInteger") || is_op(n, "DynamicQuantizeLinear"))
    {
        return Rewritten {
            graph: None,
            notes: RewriteNotes::default(),
        };
    }
    let uses = Uses::new(graph);
    let mut notes = RewriteNotes::default();
    let mut chains = Vec::new();
    for (i, node) in graph.node.iter().enumerate() {
        if !is_op(node, "MatMulInteger") {
            continue;
        }
        match match_chain(graph, &uses, i) {
            Ok(chain) => chains.push(chain),
            Err(why) => {
                notes.not_fused.insert(node_label(node), why);
            }
        }
    }
    if chains.is_empty() {
        note_unfused_quantizers(graph, &uses, &HashSet::new(), &mut notes);
        return Rewritten { graph: None, notes };
    }
    let mut removed: HashSet<usize> = chains.iter().flat_map(|c| c.nodes.clone()).collect();
    // A scale Mul goes when only fused chains read it; a DynamicQuantizeLinear when only
    // fused MatMulIntegers read its data and zero point and only removed Muls its scale.
    let scale_muls: HashSet<usize> = chains
        .iter()
        .map(|c| c.scale_mul)
        .filter(|&m| {
            graph.node[m]
                .output
                .iter()
                .all(|o| !uses.outputs.contains(o.as_str()))
                && graph.node[m]
                    .output
                    .iter()
                    .all(|o| uses.readers(o).iter().all(|r| removed.contains(r)))
        })
        .collect();
    let dqls: HashSet<usize> = chains.iter().map(|c| c.dql).collect();
    for &d in &dqls {
        let node = &graph.node[d];
        let gone = node.output.iter().enumerate().all(|(k, o)| {
            !uses.outputs.contains(o.as_str())
                && uses.readers(o).iter().all(|r| {
                    if k == 1 {
                        scale_muls.contains(r)
                    } else {
                        removed.contains(r)
                    }
                })
        });
        if gone {
            removed.insert(d);
            removed.extend(
                uses.readers(node.output.get(1).map_or("", String::as_str))
                    .iter()
                    .copied(),
            );
        }
    }
    let in_chains: HashSet<usize> = removed
        .iter()
        .copied()
        .chain(chains.iter().map(|c| c.scale_mul))
        .collect();
    note_unfused_quantizers(graph, &uses, &in_chains, &mut notes);
    // Each fused node takes the place of its chain's last node.
    let mut replacing: HashMap<usize, NodeProto> = HashMap::new();
    for chain in chains {
        if let Some(&last) = chain.nodes.last() {
            notes
                .reported_as
                .insert(node_label(&chain.fused), "MatMulInteger".into());
            replacing.insert(last, chain.fused);
        }
    }
    let mut out = graph.clone();
    out.node = graph
        .node
        .iter()
        .enumerate()
        .filter_map(|(i, node)| match replacing.remove(&i) {
            Some(fused) => Some(fused),
            None if removed.contains(&i) => None,
            None => Some(node.clone()),
        })
        .collect();
    Rewritten {
        graph: Some(out),
        notes,
    }
}

/// Notes why each DynamicQuantizeLinear that stays was not fused (`in_chains`: the
/// nodes of fused chains).
fn note_unfused_quantizers(
    graph: &GraphProto,
    uses: &Uses,
    in_chains: &HashSet<usize>,
    notes: &mut RewriteNotes,
) {
    for (i, node) in graph.node.iter().enumerate() {
        if !is_op(node, "DynamicQuantizeLinear") || in_chains.contains(&i) {
            continue;
        }
        let output = node
            .output
            .iter()
            .find(|o| uses.outputs.contains(o.as_str()));
        let other = node
            .output
            .iter()
            .flat_map(|o| uses.readers(o).iter())
            .find(|&&r| !in_chains.contains(&r));
        let why = match (output, other) {
            (Some(o), _) => format!("its output '{o}' is a graph output"),
            (None, Some(&r)) if r < graph.node.len() => format!(
                "its outputs are read by node '{}' ({}), which is not part of such a chain",
                node_label(&graph.node[r]),
                graph.node[r].op_type
            ),
            (None, Some(_)) => "a subgraph reads its outputs".to_string(),
            (None, None) => "nothing reads its outputs".to_string(),
        };
        notes.not_fused.insert(node_label(node), why);
    }
}

/// The chain through MatMulInteger `m`, or what breaks it.
fn match_chain(graph: &GraphProto, uses: &Uses, m: usize) -> Result<Chain, String> {
    let mm = &graph.node[m];
    let (Some(x_q), Some(w_q), Some(x_zp)) = (input(mm, 0), input(mm, 1), input(mm, 2)) else {
        return Err(
            "its data zero point (input 2) is absent, so its data does not come from \
                    a DynamicQuantizeLinear"
                .into(),
        );
    };
    let dql = match uses.producer.get(x_q) {
        Some(&(d, 0))
            if is_op(&graph.node[d], "DynamicQuantizeLinear")
                && graph.node[d].output.get(2).map(String::as_str) == Some(x_zp) =>
        {
            d
        }
        _ => {
            return Err(format!(
                "its data '{x_q}' and zero point '{x_zp}' are not the outputs of one \
                 DynamicQuantizeLinear"
            ));
        }
    };
    let x = input(&graph.node[dql], 0).ok_or("its DynamicQuantizeLinear has no input")?;
    let x_scale = graph.node[dql]
        .output
        .get(1)
        .map(String::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("its DynamicQuantizeLinear's scale is not used")?;
    let out = mm.output.first().map_or("", String::as_str);
    let cast = uses
        .only_reader(out)
        .filter(|&c| is_op(&graph.node[c], "Cast"))
        .ok_or_else(|| format!("its result '{out}' is not read by one Cast alone"))?;
    let to = super::attrs::Attrs::new(&graph.node[cast])
        .int_or("to", 0)
        .unwrap_or(0);
    if to != tensor_proto::DataType::Float as i64 {
        return Err(format!("its Cast converts to type {to}, not float"));
    }
    let cast_out = graph.node[cast].output.first().map_or("", String::as_str);
    let mul = uses
        .only_reader(cast_out)
        .filter(|&c| is_op(&graph.node[c], "Mul"))
        .ok_or_else(|| format!("the Cast's result '{cast_out}' is not read by one Mul alone"))?;
    let scales = other_operand(&graph.node[mul], cast_out)
        .ok_or("its Mul does not multiply the Cast's result by another value")?;
    let scale_mul = match uses.producer.get(scales) {
        Some(&(s, 0)) if is_op(&graph.node[s], "Mul") => s,
        _ => {
            return Err(format!(
                "the Cast's result is multiplied by '{scales}', not by a Mul of the data's \
                 scale and the weights' scale"
            ));
        }
    };
    let w_scale = other_operand(&graph.node[scale_mul], x_scale).ok_or_else(|| {
        format!(
            "'{scales}' does not multiply the DynamicQuantizeLinear's scale '{x_scale}' by the \
             weights' scale"
        )
    })?;
    if let Some((lo, hi)) = weight_span(uses, w_q, input(mm, 3))
        && (lo < -127 || hi > 127)
    {
        return Err(format!(
            "its weights '{w_q}' minus their zero point span {lo}..={hi}, beyond the \
             symmetric int8 range -127..=127 of DYNAMIC_FULLY_CONNECTED"
        ));
    }
    let mut nodes = vec![m, cast, mul];
    let mut output = graph.node[mul].output.first().cloned().unwrap_or_default();
    let mut bias = String::new();
    if let Some((add, b)) = bias_add(graph, uses, &output, w_q) {
        nodes.push(add);
        output = graph.node[add].output.first().cloned().unwrap_or_default();
        bias = b.to_string();
    }
    let fused = NodeProto {
        input: vec![
            x.to_string(),
            w_q.to_string(),
            w_scale.to_string(),
            input(mm, 3).unwrap_or("").to_string(),
            bias,
        ],
        output: vec![output],
        name: node_label(mm),
        op_type: FUSED_OP.into(),
        domain: MICROSOFT.into(),
        ..NodeProto::default()
    };
    Ok(Chain {
        nodes,
        dql,
        scale_mul,
        fused,
    })
}

/// The range of constant 8-bit weights `w` minus their zero point `zp` (absent: 0; one
/// value or one per column), when both are initializers held in the model file (`None`
/// otherwise: the lowering then checks them).
fn weight_span(uses: &Uses, w: &str, zp: Option<&str>) -> Option<(i64, i64)> {
    let none = super::tensor::ExternalDataContext::none();
    let decode = |name: &str| {
        let t = uses.initializers.get(name)?;
        super::tensor::tensor_to_host(t, &none).ok()
    };
    let weights = decode(w)?;
    if !matches!(weights.dtype, DataType::U8 | DataType::I8) || weights.shape.len() != 2 {
        return None;
    }
    let zero_points = match zp.filter(|z| !z.is_empty()) {
        Some(z) => super::constant::to_i64s(&decode(z)?),
        None => vec![0],
    };
    let units = weights.shape[1];
    if zero_points.len() != 1 && zero_points.len() != units {
        return None;
    }
    // Read the bytes in place: the weights can be large, and widening them all to i64
    // would take eight times their size.
    let signed = weights.dtype == DataType::I8;
    let span = weights
        .data
        .iter()
        .enumerate()
        .fold((i64::MAX, i64::MIN), |(lo, hi), (k, &b)| {
            let v = if signed {
                i64::from(b as i8)
            } else {
                i64::from(b)
            };
            let z = zero_points[if zero_points.len() == 1 { 0 } else { k % units }];
            (lo.min(v - z), hi.max(v - z))
        });
    Some(span)
}

/// The operand of binary `node` other than `value` (`value` read once).
fn other_operand<'n>(node: &'n NodeProto, value: &str) -> Option<&'n str> {
    match (input(node, 0), input(node, 1)) {
        (Some(a), Some(b)) if a == value && b != value => Some(b),
        (Some(a), Some(b)) if b == value && a != value => Some(a),
        _ => None,
    }
}

/// The Add that adds a constant `[units]` bias to `value` (the product of weights
/// `w_q`), when it alone reads `value`: that node and the bias's name.
fn bias_add<'g>(
    graph: &'g GraphProto,
    uses: &Uses<'g>,
    value: &str,
    w_q: &str,
) -> Option<(usize, &'g str)> {
    let add = uses
        .only_reader(value)
        .filter(|&a| is_op(&graph.node[a], "Add"))?;
    let bias = other_operand(&graph.node[add], value)?;
    let (b_type, b_dims) = constant_type(graph, uses, bias)?;
    let (_, w_dims) = constant_type(graph, uses, w_q)?;
    let float = b_type == tensor_proto::DataType::Float as i32;
    (float && w_dims.len() == 2 && b_dims.len() == 1 && b_dims[0] == w_dims[1])
        .then_some((add, bias))
}

/// The element type and dimensions of `value` when it is a constant: an initializer, a
/// Constant node's tensor, or an Identity of one (exporters write shared parameters as
/// Identity nodes).
fn constant_type<'g>(
    graph: &'g GraphProto,
    uses: &Uses<'g>,
    mut value: &'g str,
) -> Option<(i32, &'g [i64])> {
    // A bound on Identity chains (a cycle is malformed and found later).
    for _ in 0..16 {
        if let Some(t) = uses.initializers.get(value) {
            return Some((t.data_type, &t.dims));
        }
        let &(p, _) = uses.producer.get(value)?;
        let node = &graph.node[p];
        if is_op(node, "Identity") {
            value = input(node, 0)?;
        } else if is_op(node, "Constant") {
            let t = super::attrs::Attrs::new(node).tensor("value").ok()??;
            return Some((t.data_type, &t.dims));
        } else {
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::proto::AttributeProto;

    fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
        NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            name: outputs.first().map_or("", |s| s).to_string(),
            op_type: op.into(),
            ..NodeProto::default()
        }
    }

    fn cast(input: &str, output: &str, to: i64) -> NodeProto {
        NodeProto {
            attribute: vec![AttributeProto {
                name: "to".into(),
                r#type: Some(crate::onnx::proto::attribute_proto::AttributeType::Int as i32),
                i: Some(to),
                ..AttributeProto::default()
            }],
            ..node("Cast", &[input], &[output])
        }
    }

    fn initializer(name: &str, dtype: tensor_proto::DataType, dims: &[i64]) -> TensorProto {
        TensorProto {
            name: name.into(),
            data_type: dtype as i32,
            dims: dims.to_vec(),
            ..TensorProto::default()
        }
    }

    /// Two MatMulIntegers sharing one DynamicQuantizeLinear, operands in either order,
    /// the first with a bias Add.
    fn graph() -> GraphProto {
        let float = tensor_proto::DataType::Float as i64;
        let mut nodes = vec![node("DynamicQuantizeLinear", &["x"], &["q", "s", "z"])];
        for (k, flip) in [("1", false), ("2", true)] {
            let w = format!("w{k}");
            let pair = |a: String, b: String| if flip { [b, a] } else { [a, b] };
            let [m0, m1] = pair("s".into(), format!("{w}_scale"));
            nodes.push(node("Mul", &[&m0, &m1], &[&format!("scales{k}")]));
            nodes.push(node(
                "MatMulInteger",
                &["q", &w, "z", &format!("{w}_zp")],
                &[&format!("acc{k}")],
            ));
            nodes.push(cast(&format!("acc{k}"), &format!("f{k}"), float));
            let [p0, p1] = pair(format!("f{k}"), format!("scales{k}"));
            nodes.push(node("Mul", &[&p0, &p1], &[&format!("y{k}")]));
        }
        nodes.push(node("Add", &["b1", "y1"], &["out1"]));
        let int8 = tensor_proto::DataType::Int8;
        GraphProto {
            node: nodes,
            initializer: vec![
                initializer("w1", int8, &[4, 3]),
                initializer("w2", int8, &[4, 2]),
                initializer("b1", tensor_proto::DataType::Float, &[3]),
            ],
            output: ["out1", "y2"]
                .iter()
                .map(|n| crate::onnx::proto::ValueInfoProto {
                    name: n.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..GraphProto::default()
        }
    }

    #[test]
    fn chains_sharing_a_quantizer_fuse_with_their_bias() {
        let r = fuse_dynamic_matmuls(&graph());
        let g = r.graph.expect("fused");
        let ops: Vec<&str> = g.node.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, [FUSED_OP, FUSED_OP]);
        // Each in the place of its chain's last node: the second chain ends first.
        assert_eq!(g.node[1].input, ["x", "w1", "w1_scale", "w1_zp", "b1"]);
        assert_eq!(g.node[1].output, ["out1"]);
        assert_eq!(g.node[0].input, ["x", "w2", "w2_scale", "w2_zp", ""]);
        assert_eq!(g.node[0].output, ["y2"]);
        assert_eq!(g.node[0].domain, MICROSOFT);
        assert_eq!(r.notes.op_key(&g.node[0]), "MatMulInteger");
        assert!(r.notes.not_fused.is_empty());
    }

    #[test]
    fn a_quantizer_read_elsewhere_stays_and_says_why() {
        let mut g = graph();
        g.output.push(crate::onnx::proto::ValueInfoProto {
            name: "q".into(),
            ..Default::default()
        });
        let r = fuse_dynamic_matmuls(&g);
        let fused = r.graph.expect("fused");
        let ops: Vec<&str> = fused.node.iter().map(|n| n.op_type.as_str()).collect();
        // The quantizer and its scale Muls stay (read by nothing fused, harmless).
        assert_eq!(
            ops,
            ["DynamicQuantizeLinear", "Mul", "Mul", FUSED_OP, FUSED_OP]
        );
        assert!(r.notes.not_fused["q"].contains("'q' is a graph output"));
    }

    #[test]
    fn a_cast_to_another_type_is_not_fused() {
        let mut g = graph();
        for n in &mut g.node {
            if n.op_type == "Cast" {
                *n = cast(&n.input[0].clone(), &n.output[0].clone(), 11);
            }
        }
        let r = fuse_dynamic_matmuls(&g);
        assert!(r.graph.is_none());
        assert!(
            r.notes.not_fused["acc1"].contains("not float"),
            "{:?}",
            r.notes
        );
        assert!(r.notes.not_fused["q"].contains("acc1"), "{:?}", r.notes);
    }
}
