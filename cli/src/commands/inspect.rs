//! `nnc inspect`: what a model is and what nnc made of it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use nnc_compiler::CompileError;
use nnc_compiler::error::DeclaredDim;
use nnc_compiler::onnx::DeclaredValue;
use nnc_compiler::pipeline::{Lowered, SourceFile, SourceFormat};
use nnc_formats::nn::Model;
use serde_json::{Value, json};

use crate::keys::KeyArgs;
use crate::output;

#[derive(clap::Args)]
pub struct Args {
    /// The model: .onnx, .tflite or a compiled .nnc.
    pub model: PathBuf,
    /// Print one JSON object (a stable schema; see docs/CLI.md).
    #[arg(long)]
    pub json: bool,
    /// Fix a dynamic input dimension: NAME=1x3x224x224 (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = super::parse_input_shape)]
    pub input_shapes: Vec<(String, Vec<u32>)>,
    /// Bind a source model's input to a fixed value, as `nnc compile --bind-input` does
    /// (an `If` on it folds): NAME=FILE (repeatable).
    #[arg(long = "bind-input", value_name = "NAME=FILE", value_parser = super::parse_bind_input)]
    pub bind_inputs: Vec<(String, std::path::PathBuf)>,
    /// Show the model as the frontend lowered it, before optimization passes.
    #[arg(long)]
    pub no_optimize: bool,
    /// For a .nnc: verify it with this key too.
    #[command(flatten)]
    pub key: KeyArgs,
    /// For a signed .nnc: check its signature against these signers' public keys.
    #[command(flatten)]
    pub trust: crate::trust::TrustArgs,
    /// For a partitioned .nnc: print the placement report (which device runs each
    /// operation, and for every device that declined it, the rule and value).
    #[arg(long)]
    pub partition: bool,
    #[command(flatten)]
    pub limits: super::LimitArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if super::is_compiled(&args.model)? {
        return run_compiled(args);
    }
    if args.partition {
        return Err(crate::exit::err(
            crate::exit::Exit::Usage,
            "--partition reports a compiled model's placement: compile with --devices first",
        ));
    }
    let mut options =
        super::lower_options(&args.input_shapes, args.no_optimize, args.limits.limits())?;
    super::bind_inputs(&mut options, &args.bind_inputs)?;
    let context = || format!("cannot inspect {}", args.model.display());
    let source = SourceFile::read(&args.model).with_context(context)?;
    // The interface as declared (dimension names included), read without lowering: an
    // ONNX model whose input dimensions are unknown is shown all the same.
    let decoded = match source.format {
        SourceFormat::Onnx => Some(
            nnc_compiler::onnx::proto::decode_model(source.bytes.clone())
                .map_err(CompileError::from)
                .with_context(context)?,
        ),
        SourceFormat::Tflite => None,
    };
    let declared = decoded.as_ref().map(nnc_compiler::onnx::declared_interface);
    let report = match source.lower(&options) {
        Ok(lowered) => source_report(&args.model, &lowered, declared.as_ref()),
        Err(CompileError::Unsupported(unsupported)) if unsupported.only_needs_input_shapes() => {
            match (&decoded, &declared) {
                (Some(model), Some(declared)) => {
                    let summary =
                        nnc_compiler::onnx::source_summary(model).with_context(context)?;
                    unlowered_report(&args.model, &summary, declared, &unsupported)
                }
                _ => {
                    return Err(anyhow::Error::new(CompileError::Unsupported(unsupported))
                        .context(context()));
                }
            }
        }
        Err(e) => return Err(anyhow::Error::new(e).context(context())),
    };
    if args.json {
        output::stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    } else {
        output::stdout(&source_text(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn io_entries(model: &Model, outputs: bool, declared: Option<&[DeclaredValue]>) -> Vec<Value> {
    let (list, info) = if outputs {
        (&model.main.outputs, &model.output_info)
    } else {
        (&model.main.inputs, &model.input_info)
    };
    list.iter()
        .zip(info)
        .map(|(&index, info)| {
            let operand = &model.main.operands[index as usize];
            let mut entry = json!({
                "name": info.name,
                "dtype": info.dtype.name(),
                "shape": info.dims.iter().map(|&d| if d == 0 { Value::Null } else { json!(d) }).collect::<Vec<_>>(),
                "nn_type": operand.operand_type.name(),
                "nn_dimensions": operand.dimensions,
                "operand": index,
            });
            // The source's own dimensions (names of dynamic ones) where it declares any
            // dynamic one, so that `[batch, 3, 224, 224]` shows what `--input-shape` fixed.
            if let Some(dims) = declared
                .and_then(|d| d.iter().find(|v| v.name == info.name))
                .and_then(|v| v.dims.as_ref())
                .filter(|dims| dims.iter().any(|d| !d.is_known()))
            {
                entry["declared_shape"] = json!(dims);
            }
            if let Some(q) = quantization(operand) {
                entry["quantization"] = q;
            }
            entry
        })
        .collect()
}

/// The scale and zero point of a quantized input or output (`None` for other types).
fn quantization(operand: &nnc_formats::nn::Operand) -> Option<Value> {
    if !operand.operand_type.is_quantized() {
        return None;
    }
    Some(match &operand.channel_quant {
        Some(c) => json!({"scales": c.scales, "channel_dim": c.channel_dim}),
        None => json!({"scale": operand.scale, "zero_point": operand.zero_point}),
    })
}

/// Inputs and outputs as the source declares them, for a model not lowered.
fn declared_entries(values: &[DeclaredValue]) -> Vec<Value> {
    values
        .iter()
        .map(|v| {
            json!({
                "name": v.name,
                "dtype": v.dtype,
                "shape": v.dims.as_ref().map(|dims| dims.iter().map(|d| match d {
                    DeclaredDim::Fixed(x) => json!(x),
                    _ => Value::Null,
                }).collect::<Vec<_>>()),
                "declared_shape": v.dims,
            })
        })
        .collect()
}

/// The inspect report of a source model that lowers only once its input dimensions are
/// fixed: what it declares, and the `--input-shape` each dynamic input needs.
fn unlowered_report(
    path: &std::path::Path,
    summary: &nnc_compiler::onnx::SourceSummary,
    declared: &(Vec<DeclaredValue>, Vec<DeclaredValue>),
    unsupported: &nnc_compiler::UnsupportedReport,
) -> Value {
    let waiting: Vec<Value> = unsupported
        .operators
        .iter()
        .flat_map(|(op, nodes)| {
            nodes
                .iter()
                .map(move |n| json!({"operator": op, "node": n.node, "reason": n.reason}))
        })
        .collect();
    json!({
        "schema": "nnc.inspect.source/1",
        "path": path.display().to_string(),
        "format": summary.format,
        "ir_version": summary.ir_version,
        "opset": summary.opset,
        "producer": summary.producer,
        "inputs": declared_entries(&declared.0),
        "outputs": declared_entries(&declared.1),
        "source_node_count": summary.node_count,
        "source_operators": summary.operators,
        "notes": summary.notes,
        "lowered": false,
        "needs_input_shape": unsupported.input_shapes.iter().map(|h| json!({
            "name": h.name,
            "declared_shape": h.declared,
            "suggested": h.suggested,
            "fills": h.fills,
            "flag": h.flag(),
            "explanation": h.explanation(),
        })).collect::<Vec<_>>(),
        "waiting_nodes": waiting,
    })
}

/// The inspect report of a source model, as JSON (the text form is rendered from it).
pub fn source_report(
    path: &std::path::Path,
    lowered: &Lowered,
    declared: Option<&(Vec<DeclaredValue>, Vec<DeclaredValue>)>,
) -> Value {
    let model = &lowered.model;
    json!({
        "schema": "nnc.inspect.source/1",
        "path": path.display().to_string(),
        "format": lowered.format.name(),
        "ir_version": lowered.source.ir_version,
        "opset": lowered.source.opset,
        "producer": lowered.source.producer,
        "inputs": io_entries(model, false, declared.map(|d| d.0.as_slice())),
        "outputs": io_entries(model, true, declared.map(|d| d.1.as_slice())),
        "lowered": true,
        "source_node_count": lowered.source.node_count,
        "source_operators": lowered.source.operators,
        "notes": lowered.source.notes,
        "lowered_operations": lowered.lowered_histogram,
        "operations": model.operation_histogram(),
        "operation_count": model.main.operations.len(),
        "operand_count": model.main.operands.len(),
        "parameter_count": model.parameter_count(),
        "parameter_bytes": model.constant_byte_count(),
        "passes": lowered.passes,
    })
}

fn histogram_line(map: &Value) -> String {
    let Some(obj) = map.as_object() else {
        return String::new();
    };
    let mut entries: Vec<(&String, u64)> = obj
        .iter()
        .map(|(k, v)| (k, v.as_u64().unwrap_or(0)))
        .collect();
    entries.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    entries
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn shape_text(v: &Value) -> String {
    let Some(dims) = v.as_array() else {
        return "[unknown rank]".into();
    };
    let dims: Vec<String> = dims
        .iter()
        .map(|d| match d {
            Value::Number(x) => x.to_string(),
            Value::String(name) => name.clone(),
            _ => "?".into(),
        })
        .collect();
    format!("[{}]", dims.join(", "))
}

/// One input or output line: `x float32 [batch, 3, 224, 224]  (NN: ...)`, the
/// declared dimension names where the shape leaves them unknown, the declared shape
/// after what `--input-shape` fixed, and a quantized tensor's scale and zero point.
fn io_line(e: &Value) -> String {
    let declared = &e["declared_shape"];
    let shape = e["shape"].as_array();
    let merged = match (shape, declared.as_array()) {
        (Some(s), Some(d)) if s.len() == d.len() => Value::Array(
            s.iter()
                .zip(d)
                .map(|(s, d)| if s.is_null() { d.clone() } else { s.clone() })
                .collect(),
        ),
        _ => e["shape"].clone(),
    };
    let mut line = format!(
        "  {} {} {}",
        e["name"].as_str().unwrap_or(""),
        e["dtype"].as_str().unwrap_or(""),
        shape_text(&merged)
    );
    if declared.is_array() && shape_text(declared) != shape_text(&merged) {
        line.push_str(&format!(" (declared {})", shape_text(declared)));
    }
    if e["nn_type"].is_string() {
        line.push_str(&format!(
            "  (NN: {} {}",
            e["nn_type"].as_str().unwrap_or(""),
            shape_text(&e["nn_dimensions"]),
        ));
        let q = &e["quantization"];
        if let Some(scale) = q["scale"].as_f64() {
            line.push_str(&format!(
                ", scale {}, zero point {}",
                scale as f32, q["zero_point"]
            ));
        } else if let Some(scales) = q["scales"].as_array() {
            line.push_str(&format!(
                ", {} per-channel scales along dimension {}",
                scales.len(),
                q["channel_dim"]
            ));
        }
        line.push(')');
    }
    line.push('\n');
    line
}

fn source_text(r: &Value) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "{}: {} model, IR version {}, opset {}{}\n",
        r["path"].as_str().unwrap_or(""),
        r["format"].as_str().unwrap_or(""),
        r["ir_version"],
        r["opset"],
        match r["producer"].as_str() {
            Some(p) if !p.is_empty() => format!(", produced by {p}"),
            _ => String::new(),
        }
    ));
    for (title, key) in [("inputs", "inputs"), ("outputs", "outputs")] {
        s.push_str(&format!("{title}:\n"));
        for e in r[key].as_array().into_iter().flatten() {
            s.push_str(&io_line(e));
        }
    }
    s.push_str(&format!(
        "source operators ({} nodes): {}\n",
        r["source_node_count"],
        histogram_line(&r["source_operators"])
    ));
    for note in r["notes"].as_array().into_iter().flatten() {
        s.push_str(&format!("note: {}\n", note.as_str().unwrap_or("")));
    }
    if r["lowered"] == Value::Bool(false) {
        s.push_str(&unlowered_text(r));
        return s;
    }
    s.push_str(&format!(
        "lowered operations: {}\n",
        histogram_line(&r["lowered_operations"])
    ));
    s.push_str(&format!(
        "optimized operations ({}): {}\n",
        r["operation_count"],
        histogram_line(&r["operations"])
    ));
    s.push_str(&format!(
        "operands: {}\nparameters: {} ({} bytes)\n",
        r["operand_count"], r["parameter_count"], r["parameter_bytes"]
    ));
    let passes = r["passes"].as_array().cloned().unwrap_or_default();
    if !passes.is_empty() {
        s.push_str("passes:\n");
        for p in passes {
            let changes = p["changes"].as_object().cloned().unwrap_or_default();
            let what = if changes.is_empty() {
                "no change".to_string()
            } else {
                changes
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            s.push_str(&format!(
                "  {:<18} {:>4} -> {:<4} operations  {what}\n",
                p["pass"].as_str().unwrap_or(""),
                p["operations_before"],
                p["operations_after"]
            ));
        }
    }
    s
}

/// Why a model was not lowered, and the `--input-shape` lines that let it lower.
fn unlowered_text(r: &Value) -> String {
    let mut s = String::new();
    let waiting = r["waiting_nodes"].as_array().cloned().unwrap_or_default();
    let mut nodes: Vec<String> = waiting
        .iter()
        .take(8)
        .map(|n| {
            format!(
                "{} '{}'",
                n["operator"].as_str().unwrap_or(""),
                n["node"].as_str().unwrap_or("")
            )
        })
        .collect();
    if waiting.len() > 8 {
        nodes.push(format!("and {} more", waiting.len() - 8));
    }
    s.push_str(&format!(
        "not lowered: {} node{} need{} input dimensions at compile time ({})\n",
        waiting.len(),
        if waiting.len() == 1 { "" } else { "s" },
        if waiting.len() == 1 { "s" } else { "" },
        nodes.join(", ")
    ));
    let hints = r["needs_input_shape"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if hints.is_empty() {
        s.push_str(
            "every input's dimensions are fixed: the unknown dimensions arise inside the model\n",
        );
        return s;
    }
    s.push_str("inputs that need --input-shape:\n");
    for h in &hints {
        let unknown: Vec<String> = h["declared_shape"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(_, d)| !d.is_number())
            .map(|(k, _)| k.to_string())
            .collect();
        s.push_str(&format!(
            "  {} (dimension{} {} unknown): e.g. {}\n    ({})\n",
            h["name"].as_str().unwrap_or(""),
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", "),
            h["flag"].as_str().unwrap_or(""),
            h["explanation"].as_str().unwrap_or("")
        ));
    }
    s
}

fn run_compiled(args: Args) -> anyhow::Result<ExitCode> {
    use nnc_formats::container::Container;
    let bytes = crate::input::read_model(&args.model, "model")?;
    let signature_checked = crate::trust::check(&bytes, &args.trust, &args.model)?.is_some();
    let container = Container::parse(&bytes)
        .with_context(|| format!("{} is not a valid nnc model file", args.model.display()))?;
    // Checked when a key is given, or when none is needed.
    let verified = if args.key.given() || !container.header.crypto.is_keyed() {
        let key = if args.key.given() {
            Some(args.key.require_raw(&args.model.display().to_string())?)
        } else {
            None
        };
        container
            .verify(key.as_deref().map(|k| k.as_slice()))
            .with_context(|| format!("{} failed verification", args.model.display()))?;
        Value::Bool(true)
    } else {
        Value::Null
    };
    if args.partition {
        let plan = super::stored_plan(&container)?;
        let report = partition_report(&args.model, &container, plan.as_ref());
        if args.json {
            output::stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
        } else {
            output::stdout(&partition_text(&report))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut report = compiled_report(&args.model, &container, verified);
    if signature_checked {
        report["signature"]["verified"] = Value::Bool(true);
    }
    if args.json {
        output::stdout(&format!("{}\n", serde_json::to_string_pretty(&report)?))?;
    } else {
        output::stdout(&compiled_text(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The inspect report of a compiled model.
pub fn compiled_report(
    path: &std::path::Path,
    c: &nnc_formats::container::Container,
    verified: Value,
) -> Value {
    use nnc_formats::container::FLAG_REPRODUCIBLE;
    let h = &c.header;
    let model = &c.model;
    let units: Vec<Value> = model
        .main
        .operations
        .iter()
        .enumerate()
        .map(|(i, op)| {
            json!({
                "index": i,
                "type": op.op_type.name(),
                "inputs": op.inputs,
                "outputs": op.outputs,
                "source": op.source,
                "weights": c.fields[i],
            })
        })
        .collect();
    json!({
        "schema": "nnc.inspect.compiled/1",
        "path": path.display().to_string(),
        "bytes": c.file_len(),
        "format_version": format!("{}.{}", h.major, h.minor),
        "producer": h.producer,
        "crypto": {
            "encrypted": h.crypto.is_encrypted(),
            "algorithm": h.crypto.algorithm.map(|a| a.name()),
            "mode": h.crypto.mode.map(|m| m.name()),
            "padding": h.crypto.padding.name(),
            "integrity": h.crypto.integrity.name(),
            // What authenticates each weight field: GCM's own tag (named with its
            // cipher, e.g. AES-128-GCM), else the integrity above.
            "field_integrity": super::verify::integrity(&h.crypto).0,
            "segmented": h.crypto.segmented,
            "authenticated": h.crypto.is_keyed(),
            "protection": super::verify::protection(&h.crypto).0,
            "key_id": h.crypto.is_keyed().then(|| hex::encode(h.key_id)),
        },
        "reproducible": h.flags & FLAG_REPRODUCIBLE != 0,
        "recipients": c.key_block().ok().flatten().map(|b| b.recipients),
        "signature": c.signature().ok().flatten().map(|s| crate::trust::signature_json(&s, None)),
        "sections": c.sections.iter().map(|s| json!({"kind": s.kind_name(), "offset": s.offset, "length": s.length})).collect::<Vec<_>>(),
        "inputs": io_entries(model, false, None),
        "outputs": io_entries(model, true, None),
        "operations": model.operation_histogram(),
        "operation_count": model.main.operations.len(),
        "operand_count": model.main.operands.len(),
        "weight_fields": c.fields.iter().flatten().count(),
        "weight_bytes": c.fields.iter().flatten().map(|f| f.plaintext_length).sum::<u64>(),
        "arena_bytes": c.arena_size,
        "units": units,
        "verified": verified,
    })
}

fn compiled_text(r: &Value) -> String {
    let mut s = String::new();
    let crypto = &r["crypto"];
    s.push_str(&format!(
        "{}: nnc model file, format {}, {} bytes, written by {}\n",
        r["path"].as_str().unwrap_or(""),
        r["format_version"].as_str().unwrap_or(""),
        r["bytes"],
        r["producer"].as_str().unwrap_or("")
    ));
    if crypto["encrypted"] == Value::Bool(true) {
        s.push_str(&format!(
            "encryption: {}-{} (padding {}{}), integrity {}, key id {}{}\n",
            crypto["algorithm"].as_str().unwrap_or(""),
            crypto["mode"].as_str().unwrap_or(""),
            crypto["padding"].as_str().unwrap_or(""),
            if crypto["segmented"] == Value::Bool(true) {
                ", 4 KiB segments"
            } else {
                ""
            },
            if crypto["field_integrity"] == crypto["integrity"] {
                crypto["integrity"].as_str().unwrap_or("").to_string()
            } else {
                format!(
                    "{} per field, {} for the metadata",
                    crypto["field_integrity"].as_str().unwrap_or(""),
                    crypto["integrity"].as_str().unwrap_or("")
                )
            },
            crypto["key_id"].as_str().unwrap_or(""),
            if r["reproducible"] == Value::Bool(true) {
                ", reproducible"
            } else {
                ""
            }
        ));
    } else if crypto["authenticated"] == Value::Bool(true) {
        s.push_str(&format!(
            "encryption: none (weights in plaintext), authenticated with the key: integrity {}, key id {}\n",
            crypto["integrity"].as_str().unwrap_or(""),
            crypto["key_id"].as_str().unwrap_or("")
        ));
    } else {
        s.push_str(
            "encryption: none (weights in plaintext), not authenticated: SHA-256 digests detect corruption only\n",
        );
    }
    s.push_str(match &r["verified"] {
        Value::Bool(true) => "verified: yes\n",
        _ => "verified: not checked (give --key-file or --key-env to verify)\n",
    });
    if let Some(list) = r["recipients"].as_array() {
        s.push_str("recipients (who can open it):\n");
        for rcp in list {
            s.push_str(&format!(
                "  {} {}\n",
                rcp["key_id"].as_str().unwrap_or(""),
                match rcp["kind"].as_str() {
                    Some("master-key") => "symmetric key (AES-256 key wrap)",
                    Some("x25519") => "x25519 device key (HPKE)",
                    Some("sm2") => "sm2 device key (SM2 encryption)",
                    _ => "",
                }
            ));
        }
    }
    let sig = &r["signature"];
    if sig.is_object() {
        let statement = &sig["statement"];
        s.push_str(&format!(
            "signature: {} key {} ({})\n",
            sig["algorithm"].as_str().unwrap_or(""),
            sig["signer_key_id"].as_str().unwrap_or(""),
            if sig["verified"] == Value::Bool(true) {
                "verified against --trust"
            } else {
                "not checked: --trust SIGNER.pub checks it"
            }
        ));
        if statement.is_object() {
            s.push_str(&format!(
                "provenance: {} (sha256 {}) compiled by {}\n",
                statement["source"]["name"].as_str().unwrap_or("?"),
                statement["source"]["sha256"].as_str().unwrap_or("?"),
                statement["compiler"].as_str().unwrap_or("?")
            ));
        }
    }
    s.push_str("sections:\n");
    for sec in r["sections"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "  {:<15} offset {:>10}  length {:>10}\n",
            sec["kind"].as_str().unwrap_or(""),
            sec["offset"],
            sec["length"]
        ));
    }
    for (title, key) in [("inputs", "inputs"), ("outputs", "outputs")] {
        s.push_str(&format!("{title}:\n"));
        for e in r[key].as_array().into_iter().flatten() {
            s.push_str(&io_line(e));
        }
    }
    s.push_str(&format!(
        "operations ({}): {}\nweights: {} fields, {} bytes of plaintext\n",
        r["operation_count"],
        histogram_line(&r["operations"]),
        r["weight_fields"],
        r["weight_bytes"]
    ));
    s.push_str("operator-info units:\n");
    for u in r["units"].as_array().into_iter().flatten() {
        let w = &u["weights"];
        let weights = if w.is_null() {
            "no weights".to_string()
        } else {
            format!(
                "field {} at {} ({} bytes, {} plaintext, iv {})",
                w["index"],
                w["offset"],
                w["length"],
                w["plaintext_length"],
                w["iv"].as_str().unwrap_or("")
            )
        };
        s.push_str(&format!(
            "  {:>4} {:<22} in {:?} out {:?}  {weights}\n",
            u["index"],
            u["type"].as_str().unwrap_or(""),
            u["inputs"].as_array().map(|a| a.len()).unwrap_or(0),
            u["outputs"].as_array().map(|a| a.len()).unwrap_or(0),
        ));
    }
    s
}

/// The placement report of a compiled model (a single-device report when it carries no
/// plan).
fn partition_report(
    path: &std::path::Path,
    c: &nnc_formats::container::Container,
    plan: Option<&nnc_formats::plan::ExecutionPlan>,
) -> Value {
    let Some(plan) = plan else {
        return json!({
            "schema": "nnc.inspect.partition/1",
            "path": path.display().to_string(),
            "partitioned": false,
            "steps": [{"device": "any", "operations": (0..c.model.main.operations.len()).collect::<Vec<_>>()}],
            "placements": [],
        });
    };
    let steps: Vec<Value> = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let d = &plan.devices[s.device as usize];
            json!({
                "index": i,
                "device": d.name,
                "device_kind": d.kind,
                "operations": s.operations,
                "inputs": s.inputs,
                "outputs": s.outputs,
                "constants": s.constants,
            })
        })
        .collect();
    let placements: Vec<Value> = plan
        .placements
        .iter()
        .map(|p| {
            json!({
                "operation": p.operation,
                "type": p.op_type,
                "source": p.source,
                "device": plan.devices[p.device as usize].name,
                "reason": p.reason,
                "declined": p.declined,
                "host_decrypted": p.host_decrypted,
            })
        })
        .collect();
    json!({
        "schema": "nnc.inspect.partition/1",
        "path": path.display().to_string(),
        "partitioned": true,
        "mode": plan.mode.name(),
        "preference": plan.preference.name(),
        "devices": plan.devices,
        "steps": steps,
        "placements": placements,
        "host_decrypted": plan.placements.iter().filter(|p| p.host_decrypted).count(),
    })
}

fn partition_text(r: &Value) -> String {
    let mut s = String::new();
    if r["partitioned"] == Value::Bool(false) {
        s.push_str(&format!(
            "{}: not partitioned: every operation runs on the device that loads it\n",
            r["path"].as_str().unwrap_or("")
        ));
        return s;
    }
    s.push_str(&format!(
        "{}: {} step(s), mode {}, preference {}\n",
        r["path"].as_str().unwrap_or(""),
        r["steps"].as_array().map_or(0, Vec::len),
        r["mode"].as_str().unwrap_or(""),
        r["preference"].as_str().unwrap_or("")
    ));
    for step in r["steps"].as_array().into_iter().flatten() {
        let ops = step["operations"].as_array().cloned().unwrap_or_default();
        s.push_str(&format!(
            "  step {}: {} ({}), operations {}..={}, {} cross-step input(s), {} output(s)\n",
            step["index"],
            step["device"].as_str().unwrap_or(""),
            step["device_kind"].as_str().unwrap_or(""),
            ops.first().cloned().unwrap_or(Value::Null),
            ops.last().cloned().unwrap_or(Value::Null),
            step["inputs"].as_array().map_or(0, Vec::len),
            step["outputs"].as_array().map_or(0, Vec::len),
        ));
    }
    s.push_str("placements:\n");
    for p in r["placements"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "  {:>4} {:<22} -> {:<12} {}{}\n",
            p["operation"],
            p["type"].as_str().unwrap_or(""),
            p["device"].as_str().unwrap_or(""),
            p["reason"].as_str().unwrap_or(""),
            if p["host_decrypted"] == Value::Bool(true) {
                "  [weights decrypted in host memory]"
            } else {
                ""
            }
        ));
        for d in p["declined"].as_array().into_iter().flatten() {
            s.push_str(&format!(
                "         declined by {}: {} ({})\n",
                d["device"].as_str().unwrap_or(""),
                d["rule"].as_str().unwrap_or(""),
                d["detail"].as_str().unwrap_or("")
            ));
        }
    }
    s
}
