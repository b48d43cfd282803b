//! Post-training static quantization: a float model in the NN IR becomes an int8 one
//! (docs/QUANTIZATION.md).
//!
//! The stages, each in its own module:
//! - [`samples`]: the calibration directory, checked input by input.
//! - [`observe`]: runs a model on the runtime's own kernels with chosen intermediate
//!   tensors as extra outputs (calibration statistics, accuracy analysis).
//! - [`ranges`]: per-tensor statistics and the calibration methods that pick a clipping
//!   range from them; the int8 parameter arithmetic.
//! - [`rewrite`]: which operations become int8 ([`rewrite::QuantRule`], one row per
//!   operation type), their parameters, and the rewritten model with QUANTIZE /
//!   DEQUANTIZE where the int8 and float parts meet.
//! - [`dynamic`]: `--quantize dynamic`, weight-only int8 for FULLY_CONNECTED with the
//!   activations quantized per row at run time (no calibration).
//! - [`report`]: accuracy analysis (SQNR and cosine similarity of every quantized
//!   operation's output against the float model's) and the automatic mixed-precision
//!   search.
//!
//! Why in the NN IR, after the optimization passes and before partitioning: BatchNorm is
//! folded and activations fused there already (so a convolution's observed range is its
//! activation's), both frontends meet there (ONNX and float TFLite quantize alike), and
//! the partitioner sees the int8 operations a device profile asks for.

pub mod dynamic;
pub mod observe;
pub mod ranges;
pub mod report;
pub mod rewrite;
pub mod samples;
pub mod search;

use std::collections::{BTreeSet, HashMap};

use nnc_formats::nn::{Model, OperandIndex};

pub use ranges::{CalibrationMethod, QuantParams};
pub use report::QuantReport;
pub use samples::{CalibrationError, CalibrationSet, Sample};
pub use search::SearchSummary;

/// How to quantize.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    /// How each activation's clipping range is chosen.
    pub method: RangeMethod,
    pub range_options: ranges::RangeOptions,
    /// Symmetric int8 weights per output channel (else one scale per tensor).
    pub per_channel: bool,
    /// Operations kept in float, by source node name or output tensor name.
    pub keep_float: Vec<String>,
    /// Keep the most sensitive operations in float until the outputs' SQNR against the
    /// float model (on the calibration samples) reaches this many dB.
    pub target_sqnr_db: Option<f64>,
    /// Correct each weighted operation's bias for the mean shift its weights'
    /// rounding causes (on the calibration samples' channel means).
    pub bias_correction: bool,
    /// How many quantized models the `auto` range search may score.
    pub search_evaluations: usize,
    /// Threads the calibration runs use.
    pub threads: usize,
}

impl Default for QuantizeOptions {
    fn default() -> Self {
        QuantizeOptions {
            method: DEFAULT_METHOD,
            range_options: ranges::RangeOptions::default(),
            per_channel: true,
            keep_float: Vec::new(),
            target_sqnr_db: None,
            bias_correction: true,
            search_evaluations: 300,
            threads: 1,
        }
    }
}

/// How activation ranges are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeMethod {
    /// One calibration method for every tensor.
    Fixed(CalibrationMethod),
    /// Per tensor, the method whose range serves the model's outputs best on the
    /// calibration samples ([`search`]).
    Auto,
}

impl RangeMethod {
    pub fn name(self) -> &'static str {
        match self {
            RangeMethod::Fixed(m) => m.name(),
            RangeMethod::Auto => "auto",
        }
    }
}

/// The calibration method `--calibration-method` defaults to (docs/QUANTIZATION.md has
/// the measurements behind the choice).
pub const DEFAULT_METHOD: RangeMethod = RangeMethod::Auto;

/// Why a model could not be quantized.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error(transparent)]
    Calibration(#[from] CalibrationError),
    /// Running the float or the quantized model on a calibration sample failed.
    #[error("calibration sample {sample}: {what}: {source}")]
    Run {
        sample: usize,
        what: &'static str,
        #[source]
        source: nnc_runtime::RuntimeError,
    },
    /// The model cannot be prepared for calibration.
    #[error("cannot prepare the {what} for calibration: {source}")]
    Prepare {
        what: &'static str,
        #[source]
        source: nnc_runtime::RuntimeError,
    },
    /// A calibration value is not finite (the float model overflows on a sample).
    #[error(
        "tensor '{tensor}' has {count} non-finite value(s) on the calibration samples: its \
         range cannot be calibrated (check the samples' scale and preprocessing)"
    )]
    NonFinite { tensor: String, count: u64 },
    #[error("--keep-float names {0}, which is no operation or tensor of the model")]
    UnknownKeepFloat(String),
    #[error("no calibration samples")]
    NoSamples,
    /// The rewritten model breaks the NN set's rules: a bug in the quantizer.
    #[error("the quantized model is invalid (a bug in nnc's quantizer): {0}")]
    Invalid(#[from] nnc_formats::nn::ValidationError),
    #[error("quantized model: {0}")]
    Pass(String),
}

/// A quantized model and what quantization did to it.
pub struct Quantized {
    pub model: Model,
    pub report: QuantReport,
}

/// Quantizes `model` (a float model, optimized) with the calibration `samples` (one
/// tensor per model input each, as the model's inputs are declared).
pub fn quantize(
    model: &Model,
    samples: &[Sample],
    options: &QuantizeOptions,
) -> Result<Quantized, QuantizeError> {
    if samples.is_empty() {
        return Err(QuantizeError::NoSamples);
    }
    let divisions = rewrite::divisions_as_products(model);
    let model = divisions.as_ref().unwrap_or(model);
    let mut calibration = calibrate(model, samples, options)?;
    let keep = resolve_keep_float(model, &options.keep_float)?;
    let search = match options.method {
        RangeMethod::Fixed(method) => {
            calibration.ranges = calibration.select(method);
            None
        }
        RangeMethod::Auto => {
            let outcome = search::search(model, &calibration, samples, &keep, options)?;
            calibration.ranges = outcome.ranges.clone();
            Some(outcome)
        }
    };
    let mut reasons: HashMap<usize, String> = keep
        .iter()
        .map(|&i| (i, "named by --keep-float".to_string()))
        .collect();
    let references = report::FloatReference::new(model, options)?;
    let evaluate = |keep: &BTreeSet<usize>| -> Result<Trial, QuantizeError> {
        let plan = rewrite::plan(model, &calibration.ranges, keep);
        let built = rewrite::build(model, &plan, &calibration, options)?;
        let analysis = report::analyse(model, &built, &references, samples, options)?;
        Ok(Trial {
            plan,
            built,
            analysis,
        })
    };
    let first = evaluate(&keep)?;
    let target = match options.target_sqnr_db {
        Some(target) if first.analysis.output_sqnr_db() < target => target,
        _ => return Ok(first.finish(model, &reasons, search, options)),
    };
    // Mixed precision: the operations ranked by how much accuracy each loses itself
    // (its output's SQNR below its inputs'); the fewest of the first that, kept in float,
    // bring every output to the target. The count grows 1, 2, 4, ... until the target is
    // met, then bisects: a few rounds (each runs both models on every sample) even for
    // hundreds of operations.
    let ranked: Vec<(usize, f64)> = first
        .analysis
        .local_losses(model, &first.plan)
        .into_iter()
        .filter(|(op, _)| !keep.contains(op))
        .collect();
    let first_sqnr = first.analysis.output_sqnr_db();
    let with_first = |k: usize| -> BTreeSet<usize> {
        keep.iter()
            .copied()
            .chain(ranked[..k].iter().map(|&(op, _)| op))
            .collect()
    };
    let (mut failing, mut passing): (usize, Option<(usize, Trial)>) = (0, None);
    let mut k = 1;
    while k <= ranked.len() {
        let trial = evaluate(&with_first(k))?;
        if trial.analysis.output_sqnr_db() >= target {
            passing = Some((k, trial));
            break;
        }
        failing = k;
        if k == ranked.len() {
            // Everything quantizable is float: report what was reached.
            passing = Some((k, trial));
            break;
        }
        k = (2 * k).min(ranked.len());
    }
    let Some((mut best_k, mut best)) = passing else {
        return Ok(first.finish(model, &reasons, search, options));
    };
    while best_k - failing > 1 {
        let mid = failing + (best_k - failing) / 2;
        let trial = evaluate(&with_first(mid))?;
        if trial.analysis.output_sqnr_db() >= target {
            (best_k, best) = (mid, trial);
        } else {
            failing = mid;
        }
    }
    for &(op, loss) in &ranked[..best_k] {
        reasons.insert(
            op,
            format!(
                "automatic: the outputs reached {first_sqnr:.1} dB, below the target \
                 {target:.1} dB; this operation lost {loss:.1} dB"
            ),
        );
    }
    Ok(best.finish(model, &reasons, search, options))
}

/// One candidate quantization and its accuracy analysis.
struct Trial {
    plan: rewrite::Plan,
    built: rewrite::Built,
    analysis: report::Analysis,
}

impl Trial {
    fn finish(
        self,
        model: &Model,
        reasons: &HashMap<usize, String>,
        search: Option<search::Outcome>,
        options: &QuantizeOptions,
    ) -> Quantized {
        finish(
            model,
            self.built.model,
            &self.plan,
            self.analysis,
            reasons,
            search,
            options,
        )
    }
}

fn finish(
    model: &Model,
    quantized: Model,
    plan: &rewrite::Plan,
    analysis: report::Analysis,
    reasons: &HashMap<usize, String>,
    search: Option<search::Outcome>,
    options: &QuantizeOptions,
) -> Quantized {
    let mut report = analysis.into_report(model, plan, reasons, options);
    report.search = search.map(|s| s.summary);
    Quantized {
        model: quantized,
        report,
    }
}

/// What calibration learned about the float model's activations.
pub struct Calibration {
    /// The clipping range every activation of the main graph gets (filled by the
    /// method chosen: [`Calibration::select`] or the search).
    pub ranges: HashMap<OperandIndex, (f32, f32)>,
    /// Every float activation's range under each method, in [`CalibrationMethod::ALL`]'s
    /// order, in the order of [`observe::float_activations`].
    pub candidates: Vec<(OperandIndex, [(f32, f32); 4])>,
    /// The mean of each channel (last dimension) of every weighted operation's data
    /// input, for bias correction.
    pub channel_means: HashMap<OperandIndex, Vec<f64>>,
    /// Every weighted operation's int8 weights, by operation index (made once: they do
    /// not depend on the activation ranges).
    pub weights: HashMap<usize, rewrite::QuantizedWeights>,
}

impl Calibration {
    /// Every activation's range under `method`.
    pub fn select(&self, method: CalibrationMethod) -> HashMap<OperandIndex, (f32, f32)> {
        let k = method_index(method);
        self.candidates.iter().map(|(t, r)| (*t, r[k])).collect()
    }
}

fn method_index(method: CalibrationMethod) -> usize {
    CalibrationMethod::ALL
        .iter()
        .position(|&m| m == method)
        .unwrap_or(0)
}

/// Calibrates every float activation of the main graph: pass 1 finds each tensor's
/// extremes (and the channel means bias correction needs), pass 2 fills a histogram
/// over them, and every method picks its range from it.
pub fn calibrate(
    model: &Model,
    samples: &[Sample],
    options: &QuantizeOptions,
) -> Result<Calibration, QuantizeError> {
    let tensors = observe::float_activations(model);
    let observer = observe::Observer::new(model, &tensors, "float model", options.threads)?;
    let mut extremes: Vec<ranges::MinMax> = tensors.iter().map(|_| ranges::MinMax::new()).collect();
    // Channel sums of the weighted operations' inputs: (channels, sums, rows).
    let weighted_inputs = rewrite::weighted_inputs(model);
    let mut sums: Vec<Option<(usize, Vec<f64>, u64)>> = tensors
        .iter()
        .map(|t| {
            let channels = *weighted_inputs.get(t)?;
            Some((channels, vec![0.0; channels], 0))
        })
        .collect();
    for (s, sample) in samples.iter().enumerate() {
        observer.run(sample, s, |k, values| {
            extremes[k].add(values);
            if let Some((channels, sums, rows)) = &mut sums[k] {
                for row in values.chunks_exact(*channels) {
                    for (sum, &v) in sums.iter_mut().zip(row) {
                        *sum += f64::from(v);
                    }
                    *rows += 1;
                }
            }
        })?;
    }
    for (k, e) in extremes.iter().enumerate() {
        if e.non_finite > 0 {
            return Err(QuantizeError::NonFinite {
                tensor: operand_label(model, tensors[k]),
                count: e.non_finite,
            });
        }
    }
    let channel_means = tensors
        .iter()
        .zip(sums)
        .filter_map(|(&t, s)| {
            let (_, sums, rows) = s?;
            let rows = rows.max(1) as f64;
            Some((t, sums.into_iter().map(|v| v / rows).collect()))
        })
        .collect();
    let minmax = |e: &ranges::MinMax| (e.min.min(0.0), e.max.max(0.0));
    let candidates = if options.method == RangeMethod::Fixed(CalibrationMethod::MinMax) {
        // No histogram needed.
        tensors
            .iter()
            .zip(&extremes)
            .map(|(&t, e)| (t, [minmax(e); 4]))
            .collect()
    } else {
        let mut histograms: Vec<ranges::Histogram> = extremes
            .iter()
            .map(|e| ranges::Histogram::new(e.min, e.max, ranges::DEFAULT_BINS))
            .collect();
        for (s, sample) in samples.iter().enumerate() {
            observer.run(sample, s, |k, values| histograms[k].add(values))?;
        }
        tensors
            .iter()
            .zip(&histograms)
            .map(|(&t, h)| {
                let range = |m| ranges::choose_range(m, h, &options.range_options);
                (t, CalibrationMethod::ALL.map(range))
            })
            .collect()
    };
    let mut calibration = Calibration {
        ranges: HashMap::new(),
        candidates,
        channel_means,
        weights: HashMap::new(),
    };
    calibration.weights = rewrite::quantize_all_weights(model, &calibration, options)?;
    Ok(calibration)
}

/// The main-graph operations `names` designate: an operation's source node name or the
/// name of a tensor it writes.
fn resolve_keep_float(model: &Model, names: &[String]) -> Result<BTreeSet<usize>, QuantizeError> {
    let mut keep = BTreeSet::new();
    for name in names {
        let mut found = false;
        for (i, op) in model.main.operations.iter().enumerate() {
            let writes = op.outputs.iter().any(|&o| {
                model
                    .main
                    .operands
                    .get(o as usize)
                    .is_some_and(|o| o.name == *name)
            });
            if op.source == *name || writes {
                keep.insert(i);
                found = true;
            }
        }
        if !found {
            return Err(QuantizeError::UnknownKeepFloat(format!("'{name}'")));
        }
    }
    Ok(keep)
}

/// `'name'` (operand N), for messages.
pub(crate) fn operand_label(model: &Model, index: OperandIndex) -> String {
    match model.main.operands.get(index as usize) {
        Some(o) if !o.name.is_empty() => o.name.clone(),
        _ => format!("operand {index}"),
    }
}
