//! The ONNX frontend: decode a model, order and check its graph, and lower every node to
//! the NN operation set.
//!
//! Layout: ONNX is NCHW, the NN set NHWC-first. Layout-sensitive operations (convolutions,
//! pools, resize, ...) are lowered as `TRANSPOSE -> op(NHWC) -> TRANSPOSE`, keeping every
//! value in its ONNX layout between operations; the `transposes` pass then sinks and
//! cancels the pairs, so a CNN ends with one transpose at its input. See ARCHITECTURE.md.

pub mod attrs;
pub mod constant;
pub mod fuse;
pub mod lower;
pub mod proto;
pub mod tensor;
pub mod versions;

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use nnc_formats::nn;
use nnc_formats::tensor::DataType;

use crate::error::{CompileError, DeclaredDim, UnsupportedReport};
use proto::{GraphProto, ModelProto, NodeProto};
use tensor::ExternalDataContext;

/// The default-domain operator sets nnc reads: every one ONNX has defined. Whether a
/// node can be lowered is decided per operator ([`lower::registry`]).
pub const SUPPORTED_OPSETS: std::ops::RangeInclusive<i64> = 1..=versions::NEWEST_OPSET;

/// Options that change how a source model is read.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Fixed dimensions for inputs with dynamic ones (`--input-shape NAME=1x3x224x224`).
    pub input_shapes: HashMap<String, Vec<u32>>,
    /// Graph inputs bound to fixed values (`--bind-input NAME=FILE`): each becomes a
    /// constant, as if it were an initializer, and is no longer an input of the compiled
    /// model. Its type and shape must agree with the input's declaration. (ONNX only.)
    pub bound_inputs: HashMap<String, nnc_formats::tensor::HostTensor>,
    /// What the model may make the compiler allocate.
    pub limits: nnc_formats::limits::Limits,
    /// Told which source bytes the importer has copied out (each initializer as it is
    /// converted, then everything), so that a memory-mapped source can give those pages
    /// back (see `pipeline::SourceFile`).
    pub release_source: Option<SourceRelease>,
}

/// A hook that lets the source model's memory go once its weights are copied: called
/// with a slice of the source bytes, or with `None` for all of them.
#[derive(Clone)]
pub struct SourceRelease(std::sync::Arc<ReleaseFn>);

type ReleaseFn = dyn Fn(Option<&[u8]>) + Send + Sync;

impl SourceRelease {
    pub fn new(release: impl Fn(Option<&[u8]>) + Send + Sync + 'static) -> SourceRelease {
        SourceRelease(std::sync::Arc::new(release))
    }

    /// `bytes` (a slice of the source) will not be read again soon.
    pub fn release(&self, bytes: &[u8]) {
        (self.0)(Some(bytes));
    }

    /// Nothing of the source will be read again soon.
    pub fn release_all(&self) {
        (self.0)(None);
    }
}

impl std::fmt::Debug for SourceRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SourceRelease")
    }
}

/// What the importer learned about the source model, for `nnc inspect`.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct SourceSummary {
    pub format: String,
    pub ir_version: i64,
    pub opset: i64,
    pub producer: String,
    pub node_count: usize,
    /// Operator type -> node count.
    pub operators: BTreeMap<String, usize>,
    /// What the importer computes differently from the source's own types, for the user
    /// to know (compile and run print them as warnings).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A lowered model and what its source looked like.
pub struct Imported {
    pub model: nn::Model,
    pub source: SourceSummary,
    /// What the frontend itself simplified while lowering (folded `If` nodes), reported
    /// with the optimization passes.
    pub frontend_passes: Vec<crate::passes::PassReport>,
}

/// Decodes and lowers an ONNX model held in memory.
pub fn import_bytes(
    bytes: Bytes,
    options: &ImportOptions,
    ext: &ExternalDataContext,
) -> Result<Imported, CompileError> {
    let model = proto::decode_model(bytes)?;
    import_model(&model, options, ext)
}

/// What the model says about itself (format, versions, producer, operators), read
/// without lowering it.
pub fn source_summary(model: &ModelProto) -> Result<SourceSummary, CompileError> {
    let opset = default_opset(model)?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| CompileError::invalid("model", "has no graph"))?;
    let mut operators = BTreeMap::new();
    for node in &graph.node {
        *operators.entry(op_key(node)).or_insert(0) += 1;
    }
    Ok(SourceSummary {
        format: "ONNX".into(),
        ir_version: model.ir_version,
        opset,
        producer: format!("{} {}", model.producer_name, model.producer_version)
            .trim()
            .to_string(),
        node_count: graph.node.len(),
        operators,
        notes: Vec::new(),
    })
}

/// Lowers a decoded ONNX model.
pub fn import_model(
    model: &ModelProto,
    options: &ImportOptions,
    ext: &ExternalDataContext,
) -> Result<Imported, CompileError> {
    let source = source_summary(model)?;
    let opset = source.opset;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| CompileError::invalid("model", "has no graph"))?;
    let order = topological_order(graph, &|_| false)?;
    // ONNX Runtime's dynamically quantized MatMuls, fused into one node each (see
    // `fuse.rs` for why before lowering); the fused node is its contrib operator.
    let fuse::Rewritten {
        graph: fused,
        notes: rewrites,
    } = fuse::fuse_dynamic_matmuls(graph);
    let (graph, order) = match &fused {
        Some(fused) => (fused, topological_order(fused, &|_| false)?),
        None => (graph, order),
    };
    let mut lowerer = lower::Lowerer::new(opset, ext, &options.limits);
    lowerer.rewrites = rewrites;
    lowerer.add_initializers(graph, options.release_source.as_ref())?;
    if let Some(release) = &options.release_source {
        release.release_all();
    }
    lowerer.add_inputs(graph, options)?;

    let mut imports: Vec<(String, i64)> = model
        .opset_import
        .iter()
        .map(|o| (o.domain.clone(), o.version))
        .collect();
    if fused.is_some() && !imports.iter().any(|(d, _)| d == lower::registry::MICROSOFT) {
        imports.push((lower::registry::MICROSOFT.into(), 1));
    }
    let opsets = lower::registry::Opsets::new(imports);
    lowerer.opsets = opsets;
    let mut report = UnsupportedReport::new("ONNX");
    lower_graph(
        &mut lowerer,
        graph,
        &order,
        &mut report,
        &|values: &[String]| {
            graph_inputs_feeding(graph, values)
                .into_iter()
                .filter(|i| !options.bound_inputs.contains_key(i))
                .collect()
        },
    )?;
    report.merge(std::mem::replace(
        &mut lowerer.nested_unsupported,
        UnsupportedReport::new("ONNX"),
    ));
    if report.needs_input_shapes() {
        report.input_shapes = input_shape_hints(graph, options, &report.input_shape_inputs());
    }
    if !report.is_empty() {
        return Err(CompileError::Unsupported(report));
    }
    lowerer.add_outputs(graph)?;
    let mut source = source;
    if lowerer.computes_float64_as_float32 {
        source.notes.push(
            "float64 values compute in float32 (the NN set has no float64): results carry \
             float32's precision, about 7 significant digits"
                .into(),
        );
    }
    source.notes.append(&mut lowerer.notes);
    if !lowerer.rewrites.not_fused.is_empty() {
        // Chains of ONNX Runtime's dynamic quantization left unfused ran as ONNX defines
        // them: exact, but at float speed; say which and why.
        let mut unfused: Vec<(&String, &String)> = lowerer.rewrites.not_fused.iter().collect();
        unfused.sort();
        let shown: Vec<String> = unfused
            .iter()
            .take(3)
            .map(|(node, why)| format!("'{node}': {why}"))
            .collect();
        let more = unfused.len().saturating_sub(shown.len());
        source.notes.push(format!(
            "{} node(s) of ONNX Runtime's dynamic quantization were not fused into \
             DYNAMIC_FULLY_CONNECTED and run as ONNX defines them, exactly but at float \
             speed: {}{}",
            unfused.len(),
            shown.join("; "),
            if more > 0 {
                format!("; and {more} more")
            } else {
                String::new()
            }
        ));
    }
    let folded_ifs = std::mem::take(&mut lowerer.folded_ifs);
    let fused_chains = lowerer.rewrites.reported_as.len();
    let model = lowerer.finish();
    nn::validate(&model)?;
    let mut frontend_passes = Vec::new();
    if fused_chains > 0 {
        let operations = model.main.operations.len();
        frontend_passes.push(crate::passes::PassReport {
            pass: "fuse-dynamic-matmul",
            operations_before: operations,
            operations_after: operations,
            changes: [(
                "DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul chain -> \
                 DYNAMIC_FULLY_CONNECTED"
                    .to_string(),
                fused_chains,
            )]
            .into(),
        });
    }
    if !folded_ifs.is_empty() {
        let operations = model.main.operations.len();
        frontend_passes.push(crate::passes::PassReport {
            pass: "fold-if",
            operations_before: operations,
            operations_after: operations,
            changes: folded_ifs,
        });
    }
    Ok(Imported {
        model,
        source,
        frontend_passes,
    })
}

/// Lowers the nodes of `graph` (the main graph, or a branch or body being inlined or
/// built as a referenced subgraph) in `order`. Every node whose operator (at its
/// definition in force) has no lowering, or that fails on its particular attributes, is
/// added to `report`; a node that depends on one of those is skipped, since its own
/// support cannot be decided without its inputs. Malformed nodes and exceeded limits end
/// the import at once. `feeding` names the graph inputs a run-time value derives from.
pub(crate) fn lower_graph(
    lowerer: &mut lower::Lowerer,
    graph: &GraphProto,
    order: &[usize],
    report: &mut UnsupportedReport,
    feeding: &dyn Fn(&[String]) -> Vec<String>,
) -> Result<(), CompileError> {
    let mut poisoned: HashSet<&str> = HashSet::new();
    // How many reads of each value are still to be lowered (graph outputs never run
    // out), so that a constant is released after its last reader.
    let node_reads: Vec<Vec<String>> = graph.node.iter().map(reads).collect();
    let mut reads_left: HashMap<String, usize> = HashMap::new();
    for name in node_reads.iter().flatten() {
        *reads_left.entry(name.clone()).or_default() += 1;
    }
    for o in &graph.output {
        *reads_left.entry(o.name.clone()).or_default() += 1;
    }
    let mut resolved = Vec::with_capacity(graph.node.len());
    for node in &graph.node {
        match lower::registry::resolve(&node.domain, &node.op_type, &lowerer.opsets) {
            Ok(found) => resolved.push(Some(found)),
            Err(lower::registry::Refusal::Unsupported(reason)) => {
                let reason = lowerer.rewrites.explain(node, reason);
                report.add(&lowerer.rewrites.op_key(node), &node_label(node), reason);
                poisoned.extend(node.output.iter().map(String::as_str));
                resolved.push(None);
            }
            Err(lower::registry::Refusal::Invalid(message)) => {
                return Err(CompileError::invalid(
                    format!("node '{}' ({})", node_label(node), op_key(node)),
                    message,
                ));
            }
        }
    }
    // Values whose last reader is the node just handled: released before the next one.
    let mut spent: Vec<String> = Vec::new();
    for &i in order {
        for name in spent.drain(..) {
            lowerer.release_constant(&name);
        }
        let node = &graph.node[i];
        for name in &node_reads[i] {
            if let Some(left) = reads_left.get_mut(name) {
                *left = left.saturating_sub(1);
                if *left == 0 {
                    spent.push(name.clone());
                }
            }
        }
        let Some((op, version)) = resolved[i] else {
            continue;
        };
        if node.input.iter().any(|x| poisoned.contains(x.as_str()))
            || implicit_inputs(node)
                .iter()
                .any(|x| poisoned.contains(x.as_str()))
        {
            poisoned.extend(node.output.iter().map(String::as_str));
            continue;
        }
        match lowerer.lower_node(node, op, version) {
            Ok(()) => {}
            Err(lower::NodeError::Unsupported(reason)) => {
                let reason = lowerer.rewrites.explain(node, reason);
                report.add(&lowerer.rewrites.op_key(node), &node_label(node), reason);
                poisoned.extend(node.output.iter().map(String::as_str));
            }
            Err(lower::NodeError::NeedsInputShape(reason)) => {
                let values: Vec<String> = reads(node);
                report.add_needing_input_shape(
                    &op_key(node),
                    &node_label(node),
                    reason,
                    feeding(&values),
                );
                poisoned.extend(node.output.iter().map(String::as_str));
            }
            Err(lower::NodeError::NeedsConstant { values, reason }) => {
                report.add_needing_inputs(
                    &op_key(node),
                    &node_label(node),
                    reason,
                    feeding(&values),
                );
                poisoned.extend(node.output.iter().map(String::as_str));
            }
            Err(lower::NodeError::Limit(error)) => {
                return Err(CompileError::limit(
                    format!("node '{}' ({})", node_label(node), node.op_type),
                    error,
                ));
            }
            Err(lower::NodeError::Invalid(message)) => {
                return Err(CompileError::invalid(
                    format!("node '{}' ({})", node_label(node), node.op_type),
                    message,
                ));
            }
            Err(lower::NodeError::Nested(error)) => return Err(*error),
        }
    }
    for name in spent {
        lowerer.release_constant(&name);
    }
    Ok(())
}

/// Every value `node` reads: its named inputs and what its subgraphs capture.
fn reads(node: &NodeProto) -> Vec<String> {
    let mut names: Vec<String> = node
        .input
        .iter()
        .filter(|x| !x.is_empty())
        .cloned()
        .collect();
    if node
        .attribute
        .iter()
        .any(|a| a.g.is_some() || !a.graphs.is_empty())
    {
        names.extend(implicit_inputs(node));
    }
    names
}

/// The values a node's graph attributes (If branches, Loop and Scan bodies) read from
/// the enclosing scopes: inputs the node does not list but depends on all the same.
pub(crate) fn implicit_inputs(node: &NodeProto) -> Vec<String> {
    let mut found = Vec::new();
    let mut seen = HashSet::new();
    for attr in &node.attribute {
        for g in attr.g.iter().chain(&attr.graphs) {
            free_names(g, &mut found, &mut seen, 0);
        }
    }
    found
}

/// How deeply graphs may nest inside graph attributes (the protobuf decoder bounds
/// nesting too; this keeps every recursion over subgraphs shallow).
pub(crate) const MAX_GRAPH_NESTING: usize = 32;

/// Adds to `found` (once each, in order of first use) the names `g` and its nested graphs
/// read without defining them.
fn free_names(g: &GraphProto, found: &mut Vec<String>, seen: &mut HashSet<String>, depth: usize) {
    if depth > MAX_GRAPH_NESTING {
        return;
    }
    let mut defined: HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    defined.extend(g.input.iter().map(|i| i.name.as_str()));
    defined.extend(
        g.node
            .iter()
            .flat_map(|n| n.output.iter().map(String::as_str)),
    );
    let add = |name: &str, found: &mut Vec<String>, seen: &mut HashSet<String>| {
        if !name.is_empty() && !defined.contains(name) && seen.insert(name.to_string()) {
            found.push(name.to_string());
        }
    };
    for node in &g.node {
        for input in &node.input {
            add(input, found, seen);
        }
        for attr in &node.attribute {
            for sub in attr.g.iter().chain(&attr.graphs) {
                let mut inner = Vec::new();
                let mut inner_seen = HashSet::new();
                free_names(sub, &mut inner, &mut inner_seen, depth + 1);
                for name in inner {
                    add(&name, found, seen);
                }
            }
        }
    }
}

/// The graph inputs (not initializers) that the values `names` are computed from,
/// in graph input order.
fn graph_inputs_feeding(graph: &GraphProto, names: &[String]) -> Vec<String> {
    let initializers: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let mut producer: HashMap<&str, &NodeProto> = HashMap::new();
    for node in &graph.node {
        for out in &node.output {
            producer.insert(out.as_str(), node);
        }
    }
    let mut seen: HashSet<&str> = HashSet::new();
    let mut stack: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut found: HashSet<&str> = HashSet::new();
    while let Some(name) = stack.pop() {
        if name.is_empty() || !seen.insert(name) || initializers.contains(name) {
            continue;
        }
        match producer.get(name) {
            Some(node) => stack.extend(node.input.iter().map(String::as_str)),
            None => {
                found.insert(name);
            }
        }
    }
    graph
        .input
        .iter()
        .filter(|i| found.contains(i.name.as_str()))
        .map(|i| i.name.clone())
        .collect()
}

/// The graph inputs (of `feeding`, or every one when that names none) whose
/// dimensions stay unknown after `--input-shape`, each with a shape to give.
fn input_shape_hints(
    graph: &GraphProto,
    options: &ImportOptions,
    feeding: &[String],
) -> Vec<crate::error::InputShapeHint> {
    let initializers: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let dynamic: Vec<(&str, Vec<DeclaredDim>)> = graph
        .input
        .iter()
        .filter(|i| {
            !initializers.contains(i.name.as_str())
                && !options.bound_inputs.contains_key(&i.name)
                && !options.input_shapes.contains_key(&i.name)
        })
        .filter_map(|i| Some((i.name.as_str(), declared_dims(i)?)))
        .filter(|(_, dims)| dims.iter().any(|d| !d.is_known()))
        .collect();
    let named_in_feeding = dynamic.iter().any(|(n, _)| feeding.iter().any(|f| f == n));
    let mut named = BTreeMap::new();
    dynamic
        .iter()
        .filter(|(n, _)| !named_in_feeding || feeding.iter().any(|f| f == n))
        .map(|(n, dims)| crate::error::InputShapeHint::suggest(n, dims, &mut named))
        .collect()
}

/// A value's dimensions as declared (`None` for an unknown rank or a non-tensor).
fn declared_dims(value: &proto::ValueInfoProto) -> Option<Vec<DeclaredDim>> {
    use proto::tensor_shape_proto::dimension::Value as D;
    let Some(proto::type_proto::Value::TensorType(tt)) =
        value.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return None;
    };
    let shape = tt.shape.as_ref()?;
    Some(
        shape
            .dim
            .iter()
            .map(|d| match &d.value {
                Some(D::DimValue(v)) if *v >= 0 && *v <= i64::from(u32::MAX) => {
                    DeclaredDim::Fixed(*v as u32)
                }
                Some(D::DimParam(p)) if !p.is_empty() => DeclaredDim::Named(p.clone()),
                _ => DeclaredDim::Unknown,
            })
            .collect(),
    )
}

/// A graph input or output as the model declares it, for showing a model that cannot
/// be lowered yet.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeclaredValue {
    pub name: String,
    /// The ONNX element type's name ("float32"; "?" when not a tensor).
    pub dtype: String,
    /// `None` for an unknown rank.
    pub dims: Option<Vec<DeclaredDim>>,
}

/// The graph inputs (initializers excluded) and outputs as the model declares them.
pub fn declared_interface(model: &ModelProto) -> (Vec<DeclaredValue>, Vec<DeclaredValue>) {
    let Some(graph) = model.graph.as_ref() else {
        return (Vec::new(), Vec::new());
    };
    let initializers: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let describe = |v: &proto::ValueInfoProto| DeclaredValue {
        name: v.name.clone(),
        dtype: match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(proto::type_proto::Value::TensorType(tt)) => {
                match tensor::host_data_type(tt.elem_type) {
                    Some(t) => t.name().to_string(),
                    None => proto::tensor_proto::DataType::describe(tt.elem_type),
                }
            }
            _ => "?".into(),
        },
        dims: declared_dims(v),
    };
    let inputs = graph
        .input
        .iter()
        .filter(|i| !initializers.contains(i.name.as_str()))
        .map(describe)
        .collect();
    let outputs = graph.output.iter().map(describe).collect();
    (inputs, outputs)
}

/// The dynamic dimensions of `model`'s declared inputs, each with a shape to give:
/// what `nnc inspect` suggests for a model that needs `--input-shape`.
pub fn suggest_input_shapes(model: &ModelProto) -> Vec<crate::error::InputShapeHint> {
    match model.graph.as_ref() {
        Some(graph) => input_shape_hints(graph, &ImportOptions::default(), &[]),
        None => Vec::new(),
    }
}

/// A graph input as the model declares it: its element type (`None` when it is not a
/// tensor of a known type) and dimensions (`0` for unknown ones; `None` for an unknown
/// rank).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredInput {
    pub name: String,
    pub dtype: Option<DataType>,
    pub dims: Option<Vec<i64>>,
}

/// The graph inputs of a model that are not initializers, in order.
pub fn declared_inputs(model: &ModelProto) -> Vec<DeclaredInput> {
    let Some(graph) = model.graph.as_ref() else {
        return Vec::new();
    };
    let initializers: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    graph
        .input
        .iter()
        .filter(|i| !initializers.contains(i.name.as_str()))
        .map(declared_input)
        .collect()
}

fn declared_input(input: &proto::ValueInfoProto) -> DeclaredInput {
    use proto::tensor_shape_proto::dimension::Value as D;
    match input.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(proto::type_proto::Value::TensorType(tt)) => DeclaredInput {
            name: input.name.clone(),
            dtype: tensor::host_data_type(tt.elem_type),
            dims: tt.shape.as_ref().map(|s| {
                s.dim
                    .iter()
                    .map(|d| match d.value {
                        Some(D::DimValue(v)) => v,
                        _ => 0,
                    })
                    .collect()
            }),
        },
        _ => DeclaredInput {
            name: input.name.clone(),
            dtype: None,
            dims: None,
        },
    }
}

fn op_key(node: &NodeProto) -> String {
    lower::registry::qualified(&node.domain, &node.op_type)
}

/// A node's name for messages: its name, or its first output when unnamed.
pub fn node_label(node: &NodeProto) -> String {
    if !node.name.is_empty() {
        node.name.clone()
    } else {
        node.output
            .first()
            .map(|o| format!("<output {o}>"))
            .unwrap_or_else(|| "<unnamed>".into())
    }
}

/// The default-domain opset, or 0 when the model imports none (a model of ai.onnx.ml
/// operators only needs none; any default-domain node is then refused as malformed by
/// the registry).
fn default_opset(model: &ModelProto) -> Result<i64, CompileError> {
    let found = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version);
    match found {
        None => Ok(0),
        Some(v) if v < *SUPPORTED_OPSETS.start() => Err(CompileError::invalid(
            "opset_import",
            format!("default-domain opset {v} does not exist (opsets start at 1)"),
        )),
        Some(v) if !SUPPORTED_OPSETS.contains(&v) => {
            let mut report = UnsupportedReport::new("ONNX");
            report.add(
                &format!("opset {v}"),
                "opset_import",
                format!(
                    "default-domain opset {v} is newer than the newest nnc knows ({}); \
                     operators are checked against onnx {} definitions",
                    SUPPORTED_OPSETS.end(),
                    versions::ONNX_RELEASE
                ),
            );
            Err(CompileError::Unsupported(report))
        }
        Some(v) => Ok(v),
    }
}

/// Orders the nodes so every value is produced before it is read, and checks that every
/// read value exists. ONNX requires topological order already; sorting (stably) makes nnc
/// robust to files that break the rule, and finds cycles.
pub(crate) fn topological_order(
    graph: &GraphProto,
    outer: &dyn Fn(&str) -> bool,
) -> Result<Vec<usize>, CompileError> {
    let mut available: HashSet<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    available.extend(graph.input.iter().map(|i| i.name.as_str()));
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, node) in graph.node.iter().enumerate() {
        for out in node.output.iter().filter(|o| !o.is_empty()) {
            if available.contains(out.as_str()) {
                return Err(CompileError::invalid(
                    format!("node '{}'", node_label(node)),
                    format!("writes '{out}', which is already a graph input or initializer"),
                ));
            }
            if let Some(&other) = producer.get(out.as_str()) {
                return Err(CompileError::invalid(
                    format!("node '{}'", node_label(node)),
                    format!(
                        "writes '{out}', which node '{}' also writes",
                        node_label(&graph.node[other])
                    ),
                ));
            }
            producer.insert(out, i);
        }
    }
    // Kahn's algorithm over node dependencies, taking ready nodes in file order.
    let n = graph.node.len();
    let mut pending = vec![0usize; n];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, node) in graph.node.iter().enumerate() {
        let implicit = implicit_inputs(node);
        for input in node.input.iter().chain(&implicit).filter(|x| !x.is_empty()) {
            if available.contains(input.as_str()) || outer(input) {
                continue;
            }
            match producer.get(input.as_str()) {
                Some(&p) => {
                    pending[i] += 1;
                    dependents[p].push(i);
                }
                None => {
                    return Err(CompileError::invalid(
                        format!("node '{}' ({})", node_label(node), node.op_type),
                        format!(
                            "reads '{input}', which no node produces and which is neither a graph input nor an initializer (a dangling input or a missing initializer)"
                        ),
                    ));
                }
            }
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..n).filter(|&i| pending[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &d in &dependents[i] {
            pending[d] -= 1;
            if pending[d] == 0 {
                ready.insert(d);
            }
        }
    }
    if order.len() != n {
        let stuck: Vec<String> = (0..n)
            .filter(|&i| pending[i] > 0)
            .take(8)
            .map(|i| format!("'{}'", node_label(&graph.node[i])))
            .collect();
        return Err(CompileError::invalid(
            "graph",
            format!(
                "the nodes {} form a cycle (or depend on one)",
                stuck.join(", ")
            ),
        ));
    }
    for output in &graph.output {
        if !available.contains(output.name.as_str())
            && !producer.contains_key(output.name.as_str())
            && !outer(&output.name)
        {
            return Err(CompileError::invalid(
                format!("graph output '{}'", output.name),
                "no node produces it and it is neither an input nor an initializer",
            ));
        }
    }
    Ok(order)
}

/// The NN operand type that computes an ONNX element type (every host type has one). ONNX's 8-bit
/// integers are the NN set's 8-bit quantized types with scale 1 and zero point 0 (see
/// [`lower::plain_quant8`]), so that their values are the integers themselves.
pub fn nn_type_for(dtype: DataType) -> nn::OperandType {
    match dtype {
        DataType::F32 => nn::OperandType::TensorFloat32,
        // Computed as TENSOR_FLOAT32; only model inputs and outputs are TENSOR_FLOAT16.
        DataType::F16 => nn::OperandType::TensorFloat16,
        // The NN set has no float64: computed as float32 (a note tells the user).
        DataType::F64 => nn::OperandType::TensorFloat32,
        // Integers of 16 to 64 bits compute as int32; the runtime range-checks values at
        // the model's inputs and outputs.
        DataType::I64
        | DataType::I32
        | DataType::I16
        | DataType::U16
        | DataType::U32
        | DataType::U64 => nn::OperandType::TensorInt32,
        DataType::Bool => nn::OperandType::TensorBool8,
        // The narrow floats compute as float32 (every value is exact there); casts to
        // them round with MATH_UNARY, and outputs are encoded at the boundary.
        DataType::Bf16
        | DataType::F8E4M3Fn
        | DataType::F8E4M3Fnuz
        | DataType::F8E5M2
        | DataType::F8E5M2Fnuz
        | DataType::F4E2M1Fn => nn::OperandType::TensorFloat32,
        // The sub-byte integers compute as 8-bit ones.
        DataType::U8 | DataType::U4 | DataType::U2 => nn::OperandType::TensorQuant8Asymm,
        DataType::I8 | DataType::I4 | DataType::I2 => nn::OperandType::TensorQuant8AsymmSigned,
    }
}
