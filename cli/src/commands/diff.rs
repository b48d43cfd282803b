//! `nnc diff A B`: what differs between two models (source or compiled): operations added,
//! removed or changed (type, shapes, quantization, scalar parameters, device placement),
//! and with the keys of compiled models (source models need none) which weight tensors
//! changed and by how much.
//!
//! Operations are matched by the source node they were lowered from (and their type and
//! order among that node's operations), so a re-export that keeps node names lines up even
//! when operations move; unmatched ones are added or removed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use nnc_formats::container::Container;
use nnc_formats::nn::ops::input_role;
use nnc_formats::nn::{Lifetime, Model, Operand, OperandType, Operation};
use serde_json::{Value, json};

use crate::exit::Exit;
use crate::keys::KeyArgs;
use crate::output;

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Dot,
}

#[derive(clap::Args)]
pub struct Args {
    /// The first model (.onnx, .tflite or .nnc).
    pub a: PathBuf,
    /// The second model.
    pub b: PathBuf,
    /// The key of compiled models (both, unless --key-file-b names B's), to compare their
    /// weights; without one, weights are compared by shape only.
    #[command(flatten)]
    pub key: KeyArgs,
    /// B's key, when it differs from A's.
    #[arg(long, value_name = "FILE")]
    pub key_file_b: Option<PathBuf>,
    /// Output format (`dot`: B's graph, changed operations orange, added green).
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Print JSON (as `--format json`).
    #[arg(long)]
    pub json: bool,
    /// Weight elements closer than this count as equal.
    #[arg(long, default_value_t = 0.0)]
    pub atol: f64,
    #[command(flatten)]
    pub limits: super::LimitArgs,
}

/// One side: its graph, its weights when readable, its placement when partitioned.
struct Side {
    model: Model,
    /// Decrypted weight fields of a compiled model, by owning operation (None: no key).
    fields: Option<HashMap<usize, Vec<u8>>>,
    compiled: bool,
    /// A compiled file's protection: cipher, recipients, signer.
    protection: Value,
    placement: Option<Vec<String>>,
}

impl Side {
    fn load(path: &Path, key: Option<&[u8]>, limits: &super::LimitArgs) -> anyhow::Result<Side> {
        if !super::is_compiled(path)? {
            let options = super::lower_options(&[], false, limits.limits())?;
            let lowered = super::lower(path, &options, "diff")?;
            return Ok(Side {
                model: lowered.model,
                fields: None,
                compiled: false,
                placement: None,
                protection: Value::Null,
            });
        }
        let bytes = crate::input::read_model(path, "model")?;
        let protection = |c: &Container| {
            let h = &c.header;
            json!({
                "format": format!("{}.{}", h.major, h.minor),
                "cipher": match (h.crypto.algorithm, h.crypto.mode) {
                    (Some(a), Some(m)) => format!("{}-{}", a.name(), m.name()),
                    _ => super::verify::protection(&h.crypto).0.to_string(),
                },
                "recipients": c.key_block().ok().flatten().map(|b| {
                    b.recipients.iter().map(|r| hex::encode(r.key_id)).collect::<Vec<_>>()
                }),
                "signer": c.signature().ok().flatten().map(|s| hex::encode(s.signer.key_id())),
            })
        };
        let placement_of = |c: &Container| -> anyhow::Result<Option<Vec<String>>> {
            Ok(super::stored_plan(c)?.map(|plan| {
                let mut by_op = vec![String::new(); c.model.main.operations.len()];
                for step in &plan.steps {
                    for &op in &step.operations {
                        if let Some(slot) = by_op.get_mut(op as usize) {
                            slot.clone_from(&plan.devices[step.device as usize].name);
                        }
                    }
                }
                by_op
            }))
        };
        match key {
            None => {
                let c = Container::parse(&bytes)
                    .with_context(|| format!("{} is not a valid nnc model file", path.display()))?;
                let placement = placement_of(&c)?;
                let fields = (!c.header.crypto.is_keyed()).then(|| plaintext_fields(&c, None));
                Ok(Side {
                    fields: fields.transpose()?,
                    model: c.model.clone(),
                    compiled: true,
                    placement,
                    protection: protection(&c),
                })
            }
            Some(key) => {
                let (c, keys) = Container::open(&bytes, Some(key))
                    .with_context(|| format!("{} failed verification", path.display()))?;
                let placement = placement_of(&c)?;
                let fields = plaintext_fields(&c, keys.as_ref())?;
                Ok(Side {
                    model: c.model.clone(),
                    fields: Some(fields),
                    compiled: true,
                    placement,
                    protection: protection(&c),
                })
            }
        }
    }

    /// The bytes of constant `index` of the main graph, when this side can read them.
    fn constant(&self, index: u32) -> Option<&[u8]> {
        let operand = self.model.main.operands.get(index as usize)?;
        let loc = operand.location;
        match (operand.lifetime, &self.fields) {
            (Lifetime::ConstantCopy, _) if self.compiled => self
                .model
                .operand_values
                .get(loc.offset as usize..(loc.offset + loc.length) as usize),
            (Lifetime::ConstantReference, Some(fields)) if self.compiled => fields
                .get(&(loc.pool_index as usize))?
                .get(loc.offset as usize..(loc.offset + loc.length) as usize),
            (_, _) if self.compiled => None,
            _ => self.model.constant_bytes(index),
        }
    }

    fn weights_readable(&self) -> bool {
        !self.compiled || self.fields.is_some()
    }
}

/// Every weight field's plaintext, by owning operation.
fn plaintext_fields(
    c: &Container,
    keys: Option<&nnc_formats::container::FileKeys>,
) -> anyhow::Result<HashMap<usize, Vec<u8>>> {
    let mut out = HashMap::new();
    for (op, field) in c.fields.iter().enumerate() {
        if field.is_some() {
            let plain = c
                .decrypt_field(keys, op)
                .with_context(|| format!("cannot read weight field of operation {op}"))?;
            out.insert(op, plain.to_vec());
        }
    }
    Ok(out)
}

/// Element values of a constant for comparing (stored units: quantized values are
/// compared as their integers).
fn values(t: OperandType, bytes: &[u8]) -> Option<Vec<f64>> {
    use OperandType as T;
    let chunks = |n: usize| bytes.chunks_exact(n);
    Some(match t {
        T::Float32 | T::TensorFloat32 => chunks(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        T::Float16 | T::TensorFloat16 => chunks(2)
            .map(|c| f64::from(half::f16::from_le_bytes([c[0], c[1]]).to_f32()))
            .collect(),
        T::Int32 | T::TensorInt32 => chunks(4)
            .map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        T::Uint32 => chunks(4)
            .map(|c| f64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        T::TensorQuant8Asymm | T::Bool | T::TensorBool8 => {
            bytes.iter().map(|&b| f64::from(b)).collect()
        }
        T::TensorQuant8SymmPerChannel | T::TensorQuant8Symm | T::TensorQuant8AsymmSigned => {
            bytes.iter().map(|&b| f64::from(b as i8)).collect()
        }
        T::TensorQuant16Symm => chunks(2)
            .map(|c| f64::from(i16::from_le_bytes([c[0], c[1]])))
            .collect(),
        T::TensorQuant16Asymm => chunks(2)
            .map(|c| f64::from(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        T::Subgraph | T::Oem | T::TensorOemByte => return None,
    })
}

fn describe(o: &Operand) -> String {
    let mut s = format!("{} {:?}", o.operand_type.name(), o.dimensions);
    if o.scale != 0.0 || o.zero_point != 0 {
        s.push_str(&format!(" scale {} zero point {}", o.scale, o.zero_point));
    }
    if let Some(q) = &o.channel_quant {
        s.push_str(&format!(" per-channel ({} scales)", q.scales.len()));
    }
    s
}

/// What differs between two matched operations.
fn compare(a: &Side, ai: usize, b: &Side, bi: usize, atol: f64) -> Vec<Value> {
    let (oa, ob) = (&a.model.main.operations[ai], &b.model.main.operations[bi]);
    let (ga, gb) = (&a.model.main, &b.model.main);
    let mut changes = Vec::new();
    if oa.inputs.len() != ob.inputs.len() || oa.outputs.len() != ob.outputs.len() {
        changes.push(json!({
            "field": "operands",
            "a": format!("{} inputs, {} outputs", oa.inputs.len(), oa.outputs.len()),
            "b": format!("{} inputs, {} outputs", ob.inputs.len(), ob.outputs.len()),
        }));
        return changes;
    }
    for (k, (&xi, &yi)) in oa.inputs.iter().zip(&ob.inputs).enumerate() {
        let (x, y) = (&ga.operands[xi as usize], &gb.operands[yi as usize]);
        let field = format!(
            "input {k} ({})",
            input_role(oa.op_type, k, oa.inputs.len()).name()
        );
        if describe(x) != describe(y) || x.lifetime.is_constant() != y.lifetime.is_constant() {
            changes.push(json!({"field": field, "a": describe(x), "b": describe(y)}));
            continue;
        }
        if !x.lifetime.is_constant() {
            continue;
        }
        match (a.constant(xi), b.constant(yi)) {
            (Some(vx), Some(vy)) if vx == vy => {}
            (Some(vx), Some(vy)) => {
                let (Some(px), Some(py)) = (values(x.operand_type, vx), values(y.operand_type, vy))
                else {
                    changes.push(json!({"field": field, "what": "bytes differ"}));
                    continue;
                };
                let mut max = 0.0f64;
                let mut count = 0usize;
                for (p, q) in px.iter().zip(&py) {
                    let d = (p - q).abs();
                    if d > atol || d.is_nan() {
                        count += 1;
                        max = max.max(if d.is_nan() { f64::INFINITY } else { d });
                    }
                }
                if count > 0 {
                    let small = px.len() <= 8;
                    changes.push(json!({
                        "field": field,
                        "what": "values",
                        "max_abs_diff": max,
                        "elements_changed": count,
                        "elements": px.len(),
                        "a": if small { json!(px) } else { Value::Null },
                        "b": if small { json!(py) } else { Value::Null },
                    }));
                }
            }
            _ => {}
        }
    }
    for (k, (&x, &y)) in oa.outputs.iter().zip(&ob.outputs).enumerate() {
        let (x, y) = (&ga.operands[x as usize], &gb.operands[y as usize]);
        if describe(x) != describe(y) {
            changes
                .push(json!({"field": format!("output {k}"), "a": describe(x), "b": describe(y)}));
        }
    }
    if let (Some(pa), Some(pb)) = (&a.placement, &b.placement)
        && pa.get(ai) != pb.get(bi)
    {
        changes.push(json!({
            "field": "device",
            "a": pa.get(ai),
            "b": pb.get(bi),
        }));
    }
    changes
}

/// Each operation's matching key: its source node, type, and rank among the operations
/// of that node with that type.
fn keys(model: &Model) -> Vec<(String, &'static str, usize)> {
    let mut seen: HashMap<(String, &'static str), usize> = HashMap::new();
    model
        .main
        .operations
        .iter()
        .map(|op: &Operation| {
            let base = (op.source.clone(), op.op_type.name());
            let n = seen.entry(base.clone()).or_default();
            *n += 1;
            (base.0, base.1, *n - 1)
        })
        .collect()
}

fn op_entry(side: &Side, i: usize) -> Value {
    let op = &side.model.main.operations[i];
    json!({"index": i, "type": op.op_type.name(), "name": op.source})
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let key_a = if args.key.given() {
        Some(args.key.require_raw(&args.a.display().to_string())?)
    } else {
        None
    };
    let key_b = match &args.key_file_b {
        Some(path) => Some(
            KeyArgs {
                key_file: Some(path.clone()),
                ..KeyArgs::default()
            }
            .require_raw(&args.b.display().to_string())?,
        ),
        None => key_a.clone(),
    };
    let a = Side::load(
        &args.a,
        key_a.as_deref().map(|k| k.as_slice()),
        &args.limits,
    )?;
    let b = Side::load(
        &args.b,
        key_b.as_deref().map(|k| k.as_slice()),
        &args.limits,
    )?;

    let ka = keys(&a.model);
    let kb = keys(&b.model);
    let index_b: HashMap<&(String, &'static str, usize), usize> =
        kb.iter().enumerate().map(|(i, k)| (k, i)).collect();
    let mut matched_b = vec![false; kb.len()];
    let mut removed = Vec::new();
    let mut changed = Vec::new();
    let mut marks = HashMap::new();
    for (ai, k) in ka.iter().enumerate() {
        match index_b.get(k) {
            Some(&bi) => {
                matched_b[bi] = true;
                let changes = compare(&a, ai, &b, bi, args.atol);
                if !changes.is_empty() {
                    let fields: Vec<String> = changes
                        .iter()
                        .map(|c| c["field"].as_str().unwrap_or("").to_string())
                        .collect();
                    marks.insert(bi, ("#f5a623".to_string(), fields.join(", ")));
                    changed.push(json!({
                        "name": k.0, "type": k.1, "a_index": ai, "b_index": bi,
                        "changes": changes,
                    }));
                }
            }
            None => removed.push(op_entry(&a, ai)),
        }
    }
    let added: Vec<Value> = matched_b
        .iter()
        .enumerate()
        .filter(|(_, m)| !**m)
        .map(|(bi, _)| {
            marks.insert(bi, ("#7ed321".to_string(), "added".to_string()));
            op_entry(&b, bi)
        })
        .collect();
    let io = |m: &Model| {
        json!({
            "inputs": m.input_info.iter().map(|i| json!({"name": i.name, "dims": i.dims})).collect::<Vec<_>>(),
            "outputs": m.output_info.iter().map(|i| json!({"name": i.name, "dims": i.dims})).collect::<Vec<_>>(),
        })
    };
    let (io_a, io_b) = (io(&a.model), io(&b.model));
    let weights_compared = a.weights_readable() && b.weights_readable();
    let file_same = a.protection == b.protection;
    let identical =
        added.is_empty() && removed.is_empty() && changed.is_empty() && io_a == io_b && file_same;
    let report = json!({
        "schema": "nnc.diff/1",
        "a": args.a.display().to_string(),
        "b": args.b.display().to_string(),
        "identical": identical,
        "weights_compared": weights_compared,
        "io": if io_a == io_b { Value::Null } else { json!({"a": io_a, "b": io_b}) },
        "protection": if file_same { Value::Null } else { json!({"a": a.protection, "b": b.protection}) },
        "added": added,
        "removed": removed,
        "changed": changed,
    });
    let format = if args.json { Format::Json } else { args.format };
    let text = match format {
        Format::Json => format!("{}\n", serde_json::to_string_pretty(&report)?),
        Format::Text => text(&report),
        Format::Dot => nnc_formats::nn::dump::to_dot(
            &b.model,
            &nnc_formats::nn::dump::DotOptions {
                title: Some(format!(
                    "{} vs {} ({} removed)",
                    args.b.display(),
                    args.a.display(),
                    removed.len()
                )),
                operation_marks: marks,
                ..Default::default()
            },
        ),
    };
    output::stdout(&text)?;
    if !weights_compared && matches!(format, Format::Text) {
        eprintln!(
            "note: weights were compared by shape only: give --key-file (and --key-file-b) \
             to compare the values of compiled models"
        );
    }
    // diff(1)'s convention: 0 identical, 1 different.
    Ok(if identical {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(Exit::Failure.code())
    })
}

fn text(r: &Value) -> String {
    let mut s = format!(
        "--- {}\n+++ {}\n",
        r["a"].as_str().unwrap_or(""),
        r["b"].as_str().unwrap_or("")
    );
    if r["identical"] == Value::Bool(true) {
        s.push_str("no differences\n");
        return s;
    }
    if !r["protection"].is_null() {
        s.push_str(&format!(
            "file protection differs: {} -> {}\n",
            r["protection"]["a"], r["protection"]["b"]
        ));
    }
    if !r["io"].is_null() {
        s.push_str(&format!(
            "inputs/outputs differ: {} -> {}\n",
            r["io"]["a"], r["io"]["b"]
        ));
    }
    for (sign, key) in [('-', "removed"), ('+', "added")] {
        for e in r[key].as_array().into_iter().flatten() {
            s.push_str(&format!(
                "{sign} {} {} '{}'\n",
                e["index"],
                e["type"].as_str().unwrap_or(""),
                e["name"].as_str().unwrap_or("")
            ));
        }
    }
    for e in r["changed"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "~ {} '{}' (operation {} -> {})\n",
            e["type"].as_str().unwrap_or(""),
            e["name"].as_str().unwrap_or(""),
            e["a_index"],
            e["b_index"]
        ));
        for c in e["changes"].as_array().into_iter().flatten() {
            let field = c["field"].as_str().unwrap_or("");
            if c["what"] == "values" {
                s.push_str(&format!(
                    "    {field}: {} of {} values changed, max abs diff {}\n",
                    c["elements_changed"], c["elements"], c["max_abs_diff"]
                ));
            } else if let Some(what) = c["what"].as_str() {
                s.push_str(&format!("    {field}: {what}\n"));
            } else {
                s.push_str(&format!("    {field}: {} -> {}\n", c["a"], c["b"]));
            }
        }
    }
    s
}
