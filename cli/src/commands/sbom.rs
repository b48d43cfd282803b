//! `nnc sbom MODEL.nnc`: a CycloneDX 1.6 bill of materials for a compiled model (an
//! ML-BOM): the compiled file and, when its signature names it, the source model it was
//! compiled from (`pedigree.ancestors`), with what the graph says about the model (a
//! model card: architecture family, inputs, outputs, operation counts) and how the file
//! is protected (cipher, recipients, signer). Only what nnc knows is stated: no task,
//! dataset or performance figures are guessed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use nnc_formats::container::Container;
use nnc_formats::nn::{Model, OperationType};
use serde_json::{Value, json};

use crate::output;

#[derive(clap::Args)]
pub struct Args {
    /// The compiled model.
    pub model: PathBuf,
    /// Where to write the BOM (default: standard output).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// The architecture family the graph's operations suggest (a description, not a claim
/// about how the model was trained).
fn architecture_family(model: &Model) -> &'static str {
    let count = |types: &[OperationType]| {
        model
            .graphs()
            .flat_map(|g| &g.operations)
            .filter(|o| types.contains(&o.op_type))
            .count()
    };
    let attention = count(&[OperationType::BatchMatmul]) > 0
        && count(&[OperationType::Softmax]) > 0
        && count(&[OperationType::LayerNormalization]) > 0;
    let recurrent = count(&[
        OperationType::Lstm,
        OperationType::UnidirectionalSequenceLstm,
        OperationType::BidirectionalSequenceLstm,
        OperationType::Rnn,
        OperationType::UnidirectionalSequenceRnn,
        OperationType::BidirectionalSequenceRnn,
    ]) > 0;
    let convolutions = count(&[
        OperationType::Conv2d,
        OperationType::DepthwiseConv2d,
        OperationType::GroupedConv2d,
        OperationType::TransposeConv2d,
    ]);
    match (attention, recurrent, convolutions) {
        (true, _, c) if c > 0 => "transformer with convolutions",
        (true, _, _) => "transformer",
        (false, true, _) => "recurrent neural network",
        (false, false, c) if c > 0 => "convolutional neural network",
        _ => "neural network",
    }
}

fn tensor_format(info: &nnc_formats::nn::IoInfo) -> Value {
    let dims: Vec<String> = info
        .dims
        .iter()
        .map(|&d| if d == 0 { "?".into() } else { d.to_string() })
        .collect();
    json!({"format": format!("{}[{}] {}", info.dtype.name(), dims.join(","), info.name)})
}

fn property(name: impl Into<String>, value: impl ToString) -> Value {
    json!({"name": name.into(), "value": value.to_string()})
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let bytes = crate::input::read_model(&args.model, "model")?;
    let c = Container::parse(&bytes)
        .with_context(|| format!("{} is not a valid nnc model file", args.model.display()))?;
    let name = args
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model.nnc".into());
    let h = &c.header;
    let mut properties = vec![
        property("nnc:format-version", format!("{}.{}", h.major, h.minor)),
        property("nnc:producer", &h.producer),
        property("nnc:protection", super::verify::protection(&h.crypto).0),
        property("nnc:operation-count", c.model.total_operation_count()),
        property(
            "nnc:weight-bytes",
            c.fields
                .iter()
                .flatten()
                .map(|f| f.plaintext_length)
                .sum::<u64>(),
        ),
    ];
    if let (Some(a), Some(m)) = (h.crypto.algorithm, h.crypto.mode) {
        properties.push(property(
            "nnc:encryption",
            format!("{}-{}", a.name(), m.name()),
        ));
    }
    if let Some(block) = c.key_block()? {
        for r in &block.recipients {
            properties.push(property(
                "nnc:recipient",
                format!(
                    "{} {}",
                    serde_json::to_value(r.kind)?.as_str().unwrap_or(""),
                    hex::encode(r.key_id)
                ),
            ));
        }
    }
    let histogram: BTreeMap<&str, usize> = c.model.operation_histogram();
    for (op, n) in &histogram {
        properties.push(property(format!("nnc:operations:{op}"), n));
    }
    let signature = c.signature()?;
    let mut ancestors = Vec::new();
    if let Some(s) = &signature {
        properties.push(property(
            "nnc:signer",
            format!(
                "{} {}",
                s.signer.algorithm(),
                hex::encode(s.signer.fingerprint())
            ),
        ));
        // The signed provenance names the source (unverified here: `nnc verify --trust`
        // checks the signature).
        let statement: Value = serde_json::from_slice(&s.statement).unwrap_or(Value::Null);
        if let (Some(source), Some(digest)) = (
            statement["source"]["name"].as_str(),
            statement["source"]["sha256"].as_str(),
        ) {
            ancestors.push(json!({
                "type": "machine-learning-model",
                "bom-ref": format!("source:{source}"),
                "name": source,
                "hashes": [{"alg": "SHA-256", "content": digest}],
            }));
        }
    }
    let file_digest = hex::encode(nnc_formats::crypto::sha256(&[&bytes]));
    let model_ref = format!("model:{name}");
    let mut component = json!({
        "type": "machine-learning-model",
        "bom-ref": model_ref,
        "name": name,
        "mime-type": "application/octet-stream",
        "description": format!("{name}, compiled to the NN operation set by {}", h.producer),
        "hashes": [{"alg": "SHA-256", "content": file_digest}],
        "properties": properties,
        "modelCard": {
            "modelParameters": {
                "architectureFamily": architecture_family(&c.model),
                "modelArchitecture": histogram
                    .iter()
                    .map(|(op, n)| format!("{op} x{n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                "inputs": c.model.input_info.iter().map(tensor_format).collect::<Vec<_>>(),
                "outputs": c.model.output_info.iter().map(tensor_format).collect::<Vec<_>>(),
            },
        },
    });
    if h.crypto.is_encrypted() {
        component["modelCard"]["considerations"] = json!({
            "technicalLimitations": [
                "The weights are encrypted: running the model needs a key of one of its recipients."
            ],
        });
    }
    if !ancestors.is_empty() {
        component["pedigree"] = json!({
            "ancestors": ancestors,
            "notes": "Compiled by nnc from the ancestor model, as the file's signed provenance states.",
        });
    }
    let version = env!("CARGO_PKG_VERSION");
    let bom = json!({
        "$schema": "http://cyclonedx.org/schema/bom-1.6.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": format!("urn:uuid:{}", uuid::Uuid::new_v4()),
        "version": 1,
        "metadata": {
            "timestamp": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            "tools": {"components": [{
                "type": "application",
                "bom-ref": format!("tool:nnc@{version}"),
                "name": "nnc",
                "version": version,
            }]},
            "component": component,
        },
        "dependencies": [{"ref": format!("model:{name}"), "dependsOn": []}],
    });
    let text = format!("{}\n", serde_json::to_string_pretty(&bom)?);
    output::to_file_or_stdout(args.output.as_deref(), &text, &[args.model.as_path()])?;
    Ok(ExitCode::SUCCESS)
}
