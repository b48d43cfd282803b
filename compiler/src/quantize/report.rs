//! Accuracy analysis: every quantized operation's output, and the model's outputs,
//! against the float model's on the calibration samples (SQNR and cosine similarity).
//! The error measured at a tensor is the whole model's up to it (what a user sees), and
//! an operation's *loss* is how much its output's SQNR falls below its inputs': the
//! automatic mixed-precision search keeps the operations that lose most in float.

use std::collections::HashMap;

use nnc_formats::nn::{Model, OperandIndex};

use super::observe::{self, Observer};
use super::rewrite::{Built, Plan, QuantRule};
use super::{QuantizeError, QuantizeOptions, Sample};

/// SQNR reported for a tensor the quantized model computes exactly.
const EXACT_DB: f64 = 200.0;

/// Sums over the samples of a float reference `r` and its quantized counterpart `q`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Agreement {
    ref_energy: f64,
    err_energy: f64,
    dot: f64,
    q_energy: f64,
}

impl Agreement {
    pub(crate) fn merge(&mut self, other: &Agreement) {
        self.ref_energy += other.ref_energy;
        self.err_energy += other.err_energy;
        self.dot += other.dot;
        self.q_energy += other.q_energy;
    }

    pub(crate) fn add(&mut self, reference: &[f32], quantized: &[f32]) {
        for (&r, &q) in reference.iter().zip(quantized) {
            let (r, q) = (f64::from(r), f64::from(q));
            self.ref_energy += r * r;
            self.err_energy += (r - q) * (r - q);
            self.dot += r * q;
            self.q_energy += q * q;
        }
    }

    /// Signal-to-quantization-noise ratio in dB: `10 log10(sum r^2 / sum (r - q)^2)`.
    pub(crate) fn sqnr_db(&self) -> f64 {
        if self.err_energy == 0.0 {
            return EXACT_DB;
        }
        if self.ref_energy == 0.0 {
            return -EXACT_DB;
        }
        (10.0 * (self.ref_energy / self.err_energy).log10()).min(EXACT_DB)
    }

    fn cosine(&self) -> f64 {
        let norm = (self.ref_energy * self.q_energy).sqrt();
        if norm == 0.0 {
            return if self.err_energy == 0.0 { 1.0 } else { 0.0 };
        }
        self.dot / norm
    }
}

/// The float model prepared to report its activations, run once per analysis.
pub struct FloatReference {
    observer: Observer,
    tensors: Vec<OperandIndex>,
    position: HashMap<OperandIndex, usize>,
}

impl FloatReference {
    pub fn new(model: &Model, options: &QuantizeOptions) -> Result<FloatReference, QuantizeError> {
        let tensors = observe::float_activations(model);
        let observer = Observer::new(model, &tensors, "float model", options.threads)?;
        let position = tensors.iter().enumerate().map(|(k, &t)| (t, k)).collect();
        Ok(FloatReference {
            observer,
            tensors,
            position,
        })
    }
}

/// Agreement of the quantized model with the float model.
pub struct Analysis {
    /// Float operand -> agreement of its int8 twin.
    tensors: HashMap<OperandIndex, Agreement>,
    outputs: Vec<Agreement>,
    samples: usize,
    built_ops: Vec<&'static str>,
}

/// Runs both models on every sample and compares each int8 tensor with its float
/// original, and the outputs.
pub fn analyse(
    model: &Model,
    built: &Built,
    reference: &FloatReference,
    samples: &[Sample],
    options: &QuantizeOptions,
) -> Result<Analysis, QuantizeError> {
    // Compared: every twin of an activation (constants are exact by construction) and
    // the outputs.
    let mut compared: Vec<(OperandIndex, OperandIndex)> = built
        .twins
        .iter()
        .filter(|(float, _)| reference.position.contains_key(float))
        .map(|(&f, &q)| (f, q))
        .collect();
    compared.sort_unstable();
    let mut observed: Vec<OperandIndex> = compared.iter().map(|&(_, q)| q).collect();
    observed.extend(&built.model.main.outputs);
    let quantized = Observer::new(&built.model, &observed, "quantized model", options.threads)?;
    let mut tensors = vec![Agreement::default(); compared.len()];
    let mut outputs = vec![Agreement::default(); model.main.outputs.len()];
    let output_positions: Vec<usize> = model
        .main
        .outputs
        .iter()
        .map(|o| reference.position.get(o).copied().unwrap_or(usize::MAX))
        .collect();
    let mut float_values: Vec<Vec<f32>> = vec![Vec::new(); reference.tensors.len()];
    for (s, sample) in samples.iter().enumerate() {
        reference.observer.run(sample, s, |k, values| {
            float_values[k].clear();
            float_values[k].extend_from_slice(values);
        })?;
        quantized.run(sample, s, |k, values| {
            if let Some(&(float, _)) = compared.get(k) {
                tensors[k].add(&float_values[reference.position[&float]], values);
            } else {
                let j = k - compared.len();
                if let Some(&p) = output_positions.get(j)
                    && p != usize::MAX
                {
                    outputs[j].add(&float_values[p], values);
                }
            }
        })?;
    }
    Ok(Analysis {
        tensors: compared.iter().map(|&(f, _)| f).zip(tensors).collect(),
        outputs,
        samples: samples.len(),
        built_ops: built
            .model
            .main
            .operations
            .iter()
            .map(|op| op.op_type.name())
            .collect(),
    })
}

impl Analysis {
    /// The lowest SQNR over the model's outputs.
    pub fn output_sqnr_db(&self) -> f64 {
        self.outputs
            .iter()
            .map(Agreement::sqnr_db)
            .fold(f64::INFINITY, f64::min)
    }

    fn sqnr_of(&self, t: OperandIndex) -> Option<f64> {
        self.tensors.get(&t).map(Agreement::sqnr_db)
    }

    /// Quantized operations by how much SQNR each loses (its output's below the worst of
    /// its data inputs'), largest first.
    pub fn local_losses(&self, model: &Model, plan: &Plan) -> Vec<(usize, f64)> {
        let mut losses: Vec<(usize, f64)> = model
            .main
            .operations
            .iter()
            .enumerate()
            .filter(|&(i, _)| plan.is_quantized(i))
            .filter_map(|(i, op)| {
                let data_inputs = match super::rewrite::rule(op.op_type) {
                    Some(QuantRule::Weighted { .. }) => &op.inputs[..1],
                    _ => &op.inputs[..],
                };
                let input = data_inputs
                    .iter()
                    .filter_map(|&t| self.sqnr_of(t))
                    .fold(EXACT_DB, f64::min);
                let output = op
                    .outputs
                    .iter()
                    .filter_map(|&t| self.sqnr_of(t))
                    .fold(f64::INFINITY, f64::min);
                output.is_finite().then_some((i, input - output))
            })
            .collect();
        losses.sort_by(|a, b| b.1.total_cmp(&a.1));
        losses
    }

    pub fn into_report(
        self,
        model: &Model,
        plan: &Plan,
        reasons: &HashMap<usize, String>,
        options: &QuantizeOptions,
    ) -> QuantReport {
        let losses: HashMap<usize, f64> = self.local_losses(model, plan).into_iter().collect();
        let g = &model.main;
        let mut operations = Vec::new();
        let mut float_operations = Vec::new();
        for (i, op) in g.operations.iter().enumerate() {
            let output = op.outputs.first().copied();
            let output_name = output
                .map(|o| super::operand_label(model, o))
                .unwrap_or_default();
            match &plan.decisions[i] {
                Ok(()) => {
                    let agreement = output.and_then(|o| self.tensors.get(&o)).copied();
                    operations.push(OperationReport {
                        index: i,
                        op_type: op.op_type.name(),
                        source: op.source.clone(),
                        output: output_name,
                        sqnr_db: agreement.map(|a| round2(a.sqnr_db())),
                        cosine: agreement.map(|a| round6(a.cosine())),
                        loss_db: losses.get(&i).map(|&l| round2(l)),
                    });
                }
                Err(reason) => float_operations.push(FloatOperation {
                    index: i,
                    op_type: op.op_type.name(),
                    source: op.source.clone(),
                    reason: reasons
                        .get(&i)
                        .cloned()
                        .unwrap_or_else(|| reason.text().to_string()),
                }),
            }
        }
        operations.sort_by(|a, b| {
            a.sqnr_db
                .unwrap_or(EXACT_DB)
                .total_cmp(&b.sqnr_db.unwrap_or(EXACT_DB))
        });
        let outputs = g
            .outputs
            .iter()
            .zip(&self.outputs)
            .enumerate()
            .map(|(k, (&o, a))| OutputReport {
                name: model
                    .output_info
                    .get(k)
                    .map(|info| info.name.clone())
                    .unwrap_or_else(|| super::operand_label(model, o)),
                sqnr_db: round2(a.sqnr_db()),
                cosine: round6(a.cosine()),
            })
            .collect();
        let count = |name: &str| self.built_ops.iter().filter(|&&n| n == name).count();
        QuantReport {
            method: options.method.name(),
            search: None,
            per_channel: options.per_channel,
            samples: self.samples,
            operations_total: g.operations.len(),
            operations_quantized: plan.decisions.iter().filter(|d| d.is_ok()).count(),
            quantize_inserted: count("QUANTIZE"),
            dequantize_inserted: count("DEQUANTIZE"),
            outputs,
            operations,
            float_operations,
        }
    }
}

/// A name cut to 80 characters for one line of a summary (TFLite names can run to
/// hundreds: every fused node's name joined with ';').
fn shorten(name: &str) -> String {
    match name.char_indices().nth(80) {
        Some((cut, _)) => format!("{}...", &name[..cut]),
        None => name.to_string(),
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// What quantization did, and how close the quantized model stays to the float one on
/// the calibration samples (`--quant-report`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct QuantReport {
    pub method: &'static str,
    /// What the range search (`auto`) chose, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<super::SearchSummary>,
    pub per_channel: bool,
    pub samples: usize,
    pub operations_total: usize,
    pub operations_quantized: usize,
    pub quantize_inserted: usize,
    pub dequantize_inserted: usize,
    pub outputs: Vec<OutputReport>,
    /// Quantized operations, worst SQNR first.
    pub operations: Vec<OperationReport>,
    /// Operations left in float, and why.
    pub float_operations: Vec<FloatOperation>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct OutputReport {
    pub name: String,
    pub sqnr_db: f64,
    pub cosine: f64,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct OperationReport {
    /// Index among the float model's main-graph operations.
    pub index: usize,
    #[serde(rename = "type")]
    pub op_type: &'static str,
    /// The source node it was lowered from.
    pub source: String,
    /// The tensor it writes.
    pub output: String,
    pub sqnr_db: Option<f64>,
    pub cosine: Option<f64>,
    /// How far its output's SQNR falls below its inputs'.
    pub loss_db: Option<f64>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct FloatOperation {
    pub index: usize,
    #[serde(rename = "type")]
    pub op_type: &'static str,
    pub source: String,
    pub reason: String,
}

impl QuantReport {
    /// A few lines for stderr: the outputs, the worst operations, what stayed float.
    pub fn summary(&self, worst: usize) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "quantized {} of {} operations to int8 ({} calibration samples, {} ranges, {} weights; \
             {} QUANTIZE and {} DEQUANTIZE added)",
            self.operations_quantized,
            self.operations_total,
            self.samples,
            self.method,
            if self.per_channel {
                "per-channel"
            } else {
                "per-tensor"
            },
            self.quantize_inserted,
            self.dequantize_inserted,
        );
        for o in &self.outputs {
            let _ = writeln!(
                s,
                "  output {}: SQNR {:.1} dB, cosine {:.5} against the float model",
                o.name, o.sqnr_db, o.cosine
            );
        }
        let shown: Vec<&OperationReport> = self.operations.iter().take(worst).collect();
        if !shown.is_empty() {
            let _ = writeln!(s, "  lowest SQNR:");
            for op in shown {
                let _ = writeln!(
                    s,
                    "    {:>7} dB  {} #{} {}",
                    op.sqnr_db.map_or("-".into(), |v| format!("{v:.1}")),
                    op.op_type,
                    op.index,
                    shorten(if op.source.is_empty() {
                        &op.output
                    } else {
                        &op.source
                    })
                );
            }
        }
        let mut reasons: std::collections::BTreeMap<&str, Vec<&FloatOperation>> =
            Default::default();
        for f in &self.float_operations {
            reasons.entry(f.reason.as_str()).or_default().push(f);
        }
        for (reason, ops) in reasons {
            let names: Vec<String> = ops
                .iter()
                .take(4)
                .map(|f| format!("{} #{}", f.op_type, f.index))
                .collect();
            let more = if ops.len() > 4 {
                format!(" and {} more", ops.len() - 4)
            } else {
                String::new()
            };
            let _ = writeln!(s, "  float ({reason}): {}{more}", names.join(", "));
        }
        s
    }
}
