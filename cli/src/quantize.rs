//! `nnc compile --quantize`: the options, and the quantization step between lowering
//! and partitioning.

use std::path::{Path, PathBuf};

use nnc_compiler::quantize::{
    self, CalibrationMethod, QuantReport, QuantizeError, QuantizeOptions, RangeMethod,
};
use nnc_formats::nn::Model;

use crate::exit::{Exit, err};

/// What `--quantize` turns a float model into.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum QuantizeArg {
    /// Static post-training int8: weights symmetric per output channel, activations
    /// asymmetric per tensor (TENSOR_QUANT8_ASYMM_SIGNED), calibrated on --calibration.
    Int8,
    /// Weight-only int8 for fully-connected products (MatMul/Gemm with constant weights,
    /// transformers' bulk), activations quantized per row at run time; no calibration.
    Dynamic,
}

/// What `--quantize` did.
pub enum Quantization {
    Static(QuantReport),
    Dynamic(quantize::dynamic::DynamicSummary),
}

impl Quantization {
    /// As `compile --json` shows it under `quantization`: the static report as it always
    /// was, or the dynamic summary with `"mode": "dynamic"`.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Quantization::Static(report) => {
                serde_json::to_value(report).unwrap_or(serde_json::Value::Null)
            }
            Quantization::Dynamic(summary) => {
                let mut v = serde_json::to_value(summary).unwrap_or(serde_json::Value::Null);
                if let Some(o) = v.as_object_mut() {
                    o.insert("mode".into(), "dynamic".into());
                }
                v
            }
        }
    }
}

/// `--calibration-method`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum MethodArg {
    /// Per tensor, the method whose range gives the model's outputs the highest SQNR
    /// against the float model on the calibration samples.
    Auto,
    /// The extremes seen on the calibration samples.
    Minmax,
    /// Each tail clipped at --calibration-percentile of the values.
    Percentile,
    /// The range whose 8-bit histogram diverges least (KL) from the float one.
    Entropy,
    /// The range with the least expected squared quantization error.
    Mse,
}

impl From<MethodArg> for RangeMethod {
    fn from(m: MethodArg) -> Self {
        let fixed = RangeMethod::Fixed;
        match m {
            MethodArg::Auto => RangeMethod::Auto,
            MethodArg::Minmax => fixed(CalibrationMethod::MinMax),
            MethodArg::Percentile => fixed(CalibrationMethod::Percentile),
            MethodArg::Entropy => fixed(CalibrationMethod::Entropy),
            MethodArg::Mse => fixed(CalibrationMethod::Mse),
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct QuantizeArgs {
    /// Quantize a float model after lowering and before partitioning (docs/QUANTIZATION.md).
    #[arg(long, value_enum, requires_if("int8", "calibration"))]
    pub quantize: Option<QuantizeArg>,
    /// Calibration samples: for a one-input model every *.npy in DIR (sorted) is a
    /// sample; otherwise one subdirectory per sample with one NAME.npy per input.
    #[arg(long, value_name = "DIR", requires = "quantize")]
    pub calibration: Option<PathBuf>,
    /// How each activation's range is chosen from the calibration samples [default: auto].
    #[arg(long, value_enum, requires = "quantize")]
    pub calibration_method: Option<MethodArg>,
    /// The percentile `--calibration-method percentile` clips at [default: 99.999].
    #[arg(long, value_name = "P", requires = "quantize")]
    pub calibration_percentile: Option<f64>,
    /// One weight scale per tensor instead of per output channel.
    #[arg(long, requires = "quantize")]
    pub per_tensor: bool,
    /// Leave biases as they are (by default each weighted operation's bias cancels the
    /// mean shift its rounded weights cause on the calibration samples).
    #[arg(long, requires = "quantize")]
    pub no_bias_correction: bool,
    /// Keep these operations in float: source node names or the tensors they write
    /// (comma-separated, repeatable).
    #[arg(
        long,
        value_name = "NAME,...",
        value_delimiter = ',',
        requires = "quantize"
    )]
    pub keep_float: Vec<String>,
    /// Keep the operations that lose most accuracy in float until every output's SQNR
    /// against the float model, on the calibration samples, reaches DB.
    #[arg(long, value_name = "DB", requires = "quantize")]
    pub quantize_target_sqnr: Option<f64>,
    /// Write the accuracy analysis (every quantized operation's SQNR and cosine
    /// similarity against the float model) as JSON.
    #[arg(long, value_name = "FILE.json", requires = "quantize")]
    pub quant_report: Option<PathBuf>,
}

impl QuantizeArgs {
    /// Files the step reads, which the output may not overwrite.
    pub fn inputs(&self) -> Vec<&std::path::Path> {
        self.calibration.iter().map(PathBuf::as_path).collect()
    }

    /// The options, checked.
    fn options(&self) -> anyhow::Result<QuantizeOptions> {
        let range_options = quantize::ranges::RangeOptions {
            percentile: self
                .calibration_percentile
                .unwrap_or(quantize::ranges::RangeOptions::default().percentile),
        };
        range_options
            .validate()
            .map_err(|e| err(Exit::Usage, format!("--calibration-percentile: {e}")))?;
        if let Some(db) = self.quantize_target_sqnr
            && !(db.is_finite() && db > 0.0)
        {
            return Err(err(
                Exit::Usage,
                format!("--quantize-target-sqnr must be a positive number of dB, got {db}"),
            ));
        }
        let options = QuantizeOptions {
            method: self
                .calibration_method
                .map_or(quantize::DEFAULT_METHOD, Into::into),
            per_channel: !self.per_tensor,
            bias_correction: !self.no_bias_correction,
            keep_float: self.keep_float.clone(),
            target_sqnr_db: self.quantize_target_sqnr,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
            range_options,
            ..Default::default()
        };
        Ok(options)
    }

    /// Refuses options of static quantization with `--quantize dynamic`, before any work.
    pub fn check(&self) -> anyhow::Result<()> {
        if !matches!(self.quantize, Some(QuantizeArg::Dynamic)) {
            return Ok(());
        }
        let static_only = [
            ("--calibration", self.calibration.is_some()),
            ("--calibration-method", self.calibration_method.is_some()),
            (
                "--calibration-percentile",
                self.calibration_percentile.is_some(),
            ),
            ("--no-bias-correction", self.no_bias_correction),
            (
                "--quantize-target-sqnr",
                self.quantize_target_sqnr.is_some(),
            ),
            ("--quant-report", self.quant_report.is_some()),
        ];
        match static_only.iter().find(|(_, given)| *given) {
            Some((flag, _)) => Err(err(
                Exit::Usage,
                format!(
                    "{flag} applies to --quantize int8 (static quantization); --quantize \
                     dynamic needs no calibration and takes only --per-tensor and --keep-float"
                ),
            )),
            None => Ok(()),
        }
    }

    /// Quantizes `model` when `--quantize` asks; returns what it did (a static
    /// quantization's report is written with [`QuantizeArgs::write_report`] once the
    /// compiled model is).
    pub fn apply(
        &self,
        model: &mut Model,
        limits: &nnc_formats::limits::Limits,
        json: bool,
    ) -> anyhow::Result<Option<Quantization>> {
        if let Some(QuantizeArg::Dynamic) = self.quantize {
            let options = quantize::dynamic::DynamicOptions {
                per_channel: !self.per_tensor,
                keep_float: self.keep_float.clone(),
            };
            let (quantized, summary) =
                quantize::dynamic::quantize_dynamic(model, &options).map_err(classify)?;
            *model = quantized;
            if !json {
                eprint!("{}", summary.text());
            }
            if summary.quantized == 0 {
                eprintln!(
                    "warning: --quantize dynamic changed nothing: the model has no \
                     FULLY_CONNECTED (MatMul/Gemm) with constant float32 weights"
                );
            }
            return Ok(Some(Quantization::Dynamic(summary)));
        }
        let (Some(QuantizeArg::Int8), Some(dir)) = (self.quantize, &self.calibration) else {
            return Ok(None);
        };
        let options = self.options()?;
        let set = quantize::samples::load_calibration_dir(
            dir,
            &model.input_info,
            limits.max_calibration_bytes,
        )
        .map_err(|e| classify(QuantizeError::Calibration(e)))?;
        let quantized = quantize::quantize(model, &set.samples, &options).map_err(|e| {
            // The float model failing on a sample is the sample's fault (an index beyond
            // a table, a value the model cannot take): name its files.
            match &e {
                QuantizeError::Run {
                    sample,
                    what: "float model",
                    ..
                } => {
                    let files: Vec<String> = set.files.get(*sample).map_or_else(Vec::new, |f| {
                        f.iter().map(|p| p.display().to_string()).collect()
                    });
                    err(
                        Exit::Malformed,
                        format!(
                            "cannot quantize: the float model cannot run on calibration sample \
                             {} ({e})",
                            files.join(", ")
                        ),
                    )
                }
                _ => classify(e),
            }
        })?;
        *model = quantized.model;
        if !json {
            eprint!("{}", quantized.report.summary(5));
        }
        if quantized.report.operations_quantized == 0 {
            eprintln!(
                "warning: --quantize int8 changed nothing: no operation of the model computes \
                 in float32 with an int8 form (the report lists why each stays as it is)"
            );
        }
        Ok(Some(Quantization::Static(quantized.report)))
    }

    /// Refuses a `--quant-report` path that names one of `inputs` or lies inside the
    /// calibration directory (where it would replace a sample), before any work.
    pub fn check_report_path(&self, inputs: &[&Path]) -> anyhow::Result<()> {
        let Some(path) = &self.quant_report else {
            return Ok(());
        };
        crate::output::check_output(path, inputs)?;
        if let Some(dir) = &self.calibration
            && let Ok(dir) = dir.canonicalize()
            && let Some(parent) = path.parent().map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            && parent.canonicalize().is_ok_and(|p| p.starts_with(&dir))
        {
            return Err(err(
                Exit::CannotWrite,
                format!(
                    "refusing to write {}: it is inside the calibration directory {}",
                    path.display(),
                    dir.display()
                ),
            ));
        }
        Ok(())
    }

    /// Writes `--quant-report`, atomically, when asked; never over one of `inputs`.
    pub fn write_report(&self, report: &QuantReport, inputs: &[&Path]) -> anyhow::Result<()> {
        let Some(path) = &self.quant_report else {
            return Ok(());
        };
        self.check_report_path(inputs)?;
        let text = serde_json::to_string_pretty(report)? + "\n";
        crate::output::write_file(path, text.as_bytes(), crate::output::Mode::Public, inputs)
    }
}

/// A quantization error with the exit code its cause deserves.
fn classify(e: QuantizeError) -> anyhow::Error {
    let kind = match &e {
        QuantizeError::Calibration(c) if c.is_limit() => Exit::Limit,
        QuantizeError::Calibration(c) if c.is_io() => Exit::MissingInput,
        QuantizeError::Calibration(_)
        | QuantizeError::NonFinite { .. }
        | QuantizeError::NoSamples => Exit::Malformed,
        QuantizeError::UnknownKeepFloat(_) => Exit::Usage,
        QuantizeError::Run { source, .. } | QuantizeError::Prepare { source, .. } => {
            crate::exit::runtime_kind(source)
        }
        QuantizeError::Invalid(_) | QuantizeError::Pass(_) => Exit::Internal,
    };
    err(kind, format!("cannot quantize: {e}"))
}
