//! The `auto` range method: each activation gets the calibration method whose range
//! serves the model's outputs best.
//!
//! Why: no one method wins everywhere. Clipping a tensor's tail (percentile, MSE,
//! entropy) lowers its own rounding noise, which is what those methods measure, but a
//! tail that max pooling or a classifier reads carries the signal, and clipping it costs
//! more downstream than it saves (ResNet18 and SqueezeNet lose 1-2 dB with MSE ranges
//! and gain with min/max; PaddleOCR's detector is the other way round). So the search
//! scores candidates by what the user measures: the SQNR of the model's outputs against
//! the float model on the calibration samples. It starts from the best single method
//! for every tensor, then walks the tensors in graph order and keeps, for each, the
//! method that raises the outputs' SQNR. Every candidate is a complete quantized model
//! run on the runtime's kernels, so it scores exactly what will be deployed.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use nnc_formats::nn::{Model, OperandIndex};
use nnc_runtime::Program;

use super::ranges::{self, CalibrationMethod};
use super::report::Agreement;
use super::{Calibration, QuantizeError, QuantizeOptions, Sample, observe, rewrite};

/// At most this many calibration samples score candidates (evenly spread).
const SEARCH_SAMPLES: usize = 64;

/// What the search chose, for the report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SearchSummary {
    /// Output SQNR (dB, on the search samples) with one method for every tensor.
    pub uniform_sqnr_db: BTreeMap<&'static str, f64>,
    /// The single method the search started from.
    pub start: &'static str,
    /// Output SQNR after the per-tensor choices.
    pub sqnr_db: f64,
    /// How many tensors ended with each method.
    pub chosen: BTreeMap<&'static str, usize>,
    /// Quantized models scored.
    pub evaluations: usize,
    pub samples: usize,
    /// Whether the evaluation budget ran out before every tensor was tried.
    pub budget_exhausted: bool,
}

pub struct Outcome {
    pub ranges: HashMap<OperandIndex, (f32, f32)>,
    pub summary: SearchSummary,
}

/// Scores quantized models by their outputs' SQNR against the float model's.
struct Scorer<'a> {
    model: &'a Model,
    calibration: &'a Calibration,
    samples: Vec<&'a Sample>,
    /// The float model's outputs: per sample, per output.
    reference: Vec<Vec<Vec<f32>>>,
    keep: &'a BTreeSet<usize>,
    options: &'a QuantizeOptions,
    evaluations: usize,
}

impl Scorer<'_> {
    fn score(&mut self, ranges: &HashMap<OperandIndex, (f32, f32)>) -> Result<f64, QuantizeError> {
        self.evaluations += 1;
        let plan = rewrite::plan(self.model, ranges, self.keep);
        let built = rewrite::build(self.model, &plan, self.calibration, self.options)?;
        // One thread per program: the samples run side by side instead, since small
        // models spend more time handing work between threads inside an operation than
        // computing it.
        let program = observe::prepare(&built.model, "quantized model", 1, true)?;
        let workers = self.options.threads.clamp(1, self.samples.len().max(1));
        let outputs = self.model.main.outputs.len();
        let partial = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|w| {
                    let (program, samples, reference) = (&program, &self.samples, &self.reference);
                    scope.spawn(move || -> Result<Vec<Agreement>, QuantizeError> {
                        let mut agreement = vec![Agreement::default(); outputs];
                        for s in (w..samples.len()).step_by(workers) {
                            let quantized = run(program, samples[s], s, "quantized model")?;
                            for ((a, q), r) in
                                agreement.iter_mut().zip(&quantized).zip(&reference[s])
                            {
                                a.add(r, q);
                            }
                        }
                        Ok(agreement)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect::<Result<Vec<_>, _>>()
        })?;
        let mut agreement = vec![Agreement::default(); outputs];
        for part in partial {
            for (a, p) in agreement.iter_mut().zip(&part) {
                a.merge(p);
            }
        }
        Ok(agreement
            .iter()
            .map(Agreement::sqnr_db)
            .fold(f64::INFINITY, f64::min))
    }
}

fn run(
    program: &Program,
    sample: &Sample,
    index: usize,
    what: &'static str,
) -> Result<Vec<Vec<f32>>, QuantizeError> {
    let outputs = program
        .execute_host(sample)
        .map_err(|source| QuantizeError::Run {
            sample: index,
            what,
            source,
        })?;
    Ok(outputs
        .iter()
        .map(|t| t.to_f32_vec().unwrap_or_default())
        .collect())
}

/// Chooses every activation's range (see the module's documentation).
pub fn search(
    model: &Model,
    calibration: &Calibration,
    samples: &[Sample],
    keep: &BTreeSet<usize>,
    options: &QuantizeOptions,
) -> Result<Outcome, QuantizeError> {
    let step = samples.len().div_ceil(SEARCH_SAMPLES).max(1);
    let chosen_samples: Vec<&Sample> = samples.iter().step_by(step).collect();
    let float = observe::prepare(model, "float model", 1, true)?;
    let reference = chosen_samples
        .iter()
        .enumerate()
        .map(|(s, sample)| run(&float, sample, s, "float model"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut scorer = Scorer {
        model,
        calibration,
        samples: chosen_samples,
        reference,
        keep,
        options,
        evaluations: 0,
    };
    let methods = CalibrationMethod::ALL;
    // 1. The best single method.
    let mut uniform_sqnr_db = BTreeMap::new();
    let mut start = 0;
    let mut best = f64::NEG_INFINITY;
    for (m, &method) in methods.iter().enumerate() {
        let db = scorer.score(&calibration.select(method))?;
        uniform_sqnr_db.insert(method.name(), round2(db));
        if db > best {
            (best, start) = (db, m);
        }
    }
    let mut choice = vec![start; calibration.candidates.len()];
    let mut ranges = calibration.select(methods[start]);
    // 2. Per tensor, in graph order: the tensors whose range decides int8 parameters.
    let plan = rewrite::plan(model, &ranges, keep);
    let budget = options.search_evaluations;
    let mut budget_exhausted = false;
    'tensors: for (i, (t, candidates)) in calibration.candidates.iter().enumerate() {
        let decides = plan
            .params
            .get(t)
            .is_some_and(|p| *p == ranges::asymmetric_int8(ranges[t].0, ranges[t].1));
        if !decides {
            continue;
        }
        let mut tried = vec![candidates[start]];
        for (m, &candidate) in candidates.iter().enumerate() {
            if tried.iter().any(|&r| close(r, candidate)) {
                continue;
            }
            tried.push(candidate);
            if scorer.evaluations >= budget {
                budget_exhausted = true;
                break 'tensors;
            }
            let previous = ranges.insert(*t, candidate);
            let db = scorer.score(&ranges)?;
            // A real gain, not rounding noise between equivalent models.
            if db > best + 0.01 {
                (best, choice[i]) = (db, m);
            } else if let Some(previous) = previous {
                ranges.insert(*t, previous);
            }
        }
    }
    let mut chosen = BTreeMap::new();
    for (i, (t, _)) in calibration.candidates.iter().enumerate() {
        if plan.params.contains_key(t) {
            *chosen.entry(methods[choice[i]].name()).or_insert(0) += 1;
        }
    }
    Ok(Outcome {
        ranges,
        summary: SearchSummary {
            uniform_sqnr_db,
            start: methods[start].name(),
            sqnr_db: round2(best),
            chosen,
            evaluations: scorer.evaluations,
            samples: scorer.samples.len(),
            budget_exhausted,
        },
    })
}

/// Ranges within 1% of their width of each other quantize alike.
fn close(a: (f32, f32), b: (f32, f32)) -> bool {
    let width = (a.1 - a.0).max(b.1 - b.0).max(f32::MIN_POSITIVE);
    (a.0 - b.0).abs() + (a.1 - b.1).abs() <= 0.01 * width
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
