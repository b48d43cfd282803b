//! The compiler's errors.

use std::collections::BTreeMap;
use std::fmt;

use nnc_formats::nn::ValidationError;

/// Everything that can stop a compilation.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not a valid ONNX model: {0}")]
    OnnxDecode(#[from] crate::onnx::proto::OnnxDecodeError),
    #[error("{0}")]
    OnnxTensor(crate::onnx::tensor::OnnxTensorError),
    /// The model is malformed: it breaks its own format's rules.
    #[error("invalid model: {location}: {message}")]
    InvalidModel { location: String, message: String },
    /// The model is well formed but uses what nnc cannot lower.
    #[error("{0}")]
    Unsupported(UnsupportedReport),
    /// The lowered model breaks the NN operation set's rules (a compiler bug, or a
    /// source model whose shapes contradict each other).
    #[error("{0}")]
    Validation(#[from] ValidationError),
    /// A compiler pass failed.
    #[error("pass {pass}: {message}")]
    Pass { pass: &'static str, message: String },
    /// No placement satisfies the partitioning constraints: operations no allowed device
    /// supports (strict mode), or encrypted weights that would have to be decrypted in
    /// host memory when that is forbidden. Every operation concerned is listed.
    #[error("{0}")]
    Placement(String),
    /// A device profile is malformed.
    #[error("{0}")]
    DeviceProfile(#[from] nnc_formats::device::DeviceError),
    /// Writing the `.nnc` file failed.
    #[error("{0}")]
    Container(#[from] nnc_formats::container::ContainerError),
    /// The options given to the compiler are inconsistent.
    #[error("{0}")]
    Options(String),
    /// The model asks for more memory than a resource limit allows.
    #[error("{location}: {error}")]
    Limit {
        location: String,
        #[source]
        error: nnc_formats::limits::LimitError,
    },
}

impl From<crate::onnx::tensor::OnnxTensorError> for CompileError {
    /// A tensor beyond a limit is a limit error (exit 4), not a malformed model.
    fn from(e: crate::onnx::tensor::OnnxTensorError) -> Self {
        match e {
            crate::onnx::tensor::OnnxTensorError::Limit { source, .. } => {
                CompileError::limit("model", source)
            }
            e => CompileError::OnnxTensor(e),
        }
    }
}

impl CompileError {
    pub fn limit(
        location: impl Into<String>,
        error: nnc_formats::limits::LimitError,
    ) -> CompileError {
        CompileError::Limit {
            location: location.into(),
            error,
        }
    }

    pub fn invalid(location: impl Into<String>, message: impl Into<String>) -> CompileError {
        CompileError::InvalidModel {
            location: location.into(),
            message: message.into(),
        }
    }
}

/// Every operation of a source model that nnc cannot lower, grouped by operator type.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct UnsupportedReport {
    /// The source format ("ONNX", "TFLite").
    pub format: String,
    /// Operator type -> the nodes of that type and why each failed.
    pub operators: BTreeMap<String, Vec<UnsupportedNode>>,
    /// When nodes failed for want of input dimensions: the graph inputs whose dynamic
    /// dimensions they derive from, each with a shape to give (`--input-shape`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub input_shapes: Vec<InputShapeHint>,
}

/// One node that could not be lowered.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UnsupportedNode {
    pub node: String,
    pub reason: String,
    /// When the node failed only because some of its parameters are computed at run
    /// time: the graph inputs they derive from, which would have to be bound to values
    /// at compile time. Empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub compile_time_inputs: Vec<String>,
    /// The node failed only because dimensions are unknown at compile time; these are
    /// the graph inputs its inputs derive from (`--input-shape` fixes them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs_input_shape: Option<Vec<String>>,
}

/// One dimension of a graph input as the source model declares it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum DeclaredDim {
    Fixed(u32),
    /// Dynamic, with the name the model gives it (ONNX's `dim_param`, e.g. "batch").
    Named(String),
    /// Dynamic, unnamed (absent, or -1 as some exporters write).
    /// (An untagged unit variant: `null` in JSON.)
    Unknown,
}

impl DeclaredDim {
    pub fn is_known(&self) -> bool {
        matches!(self, DeclaredDim::Fixed(_))
    }
}

impl fmt::Display for DeclaredDim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeclaredDim::Fixed(v) => write!(f, "{v}"),
            DeclaredDim::Named(n) => f.write_str(n),
            DeclaredDim::Unknown => f.write_str("?"),
        }
    }
}

/// Shows declared dimensions as `[batch, 3, ?, ?]`.
pub fn dims_text(dims: &[DeclaredDim]) -> String {
    let shown: Vec<String> = dims.iter().map(ToString::to_string).collect();
    format!("[{}]", shown.join(", "))
}

/// Why a suggested dimension has its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fill {
    /// The leading dimension of a tensor of rank 2 or more, or one named like a batch:
    /// one sample per run.
    Batch,
    /// Height or width of an image-like tensor (rank 4 with 1, 3 or 4 channels): a
    /// placeholder the user replaces with the size of their images.
    ImageSize,
    /// Nothing in the model says: a placeholder the user must replace.
    Placeholder,
}

/// A graph input with dynamic dimensions, and a shape to give it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct InputShapeHint {
    pub name: String,
    pub declared: Vec<DeclaredDim>,
    /// Every dimension: the declared one where fixed, else a filled-in value.
    pub suggested: Vec<u32>,
    /// Per dimension, why its value was chosen (`None` where the model fixes it).
    pub fills: Vec<Option<Fill>>,
}

/// The value a height or width placeholder takes (a multiple of 32, as the strides of
/// most detectors and classifiers need).
pub const IMAGE_SIZE_PLACEHOLDER: u32 = 640;

impl InputShapeHint {
    /// Fills the dynamic dimensions of `declared`. Dimensions named alike (within and
    /// across inputs) get one value: `named` holds the values given so far.
    pub fn suggest(
        name: &str,
        declared: &[DeclaredDim],
        named: &mut BTreeMap<String, (u32, Fill)>,
    ) -> InputShapeHint {
        let rank = declared.len();
        // NCHW with 1, 3 or 4 channels, or NHWC likewise: the spatial positions.
        let channels = |k: usize| matches!(declared.get(k), Some(DeclaredDim::Fixed(1 | 3 | 4)));
        let spatial: &[usize] = if rank == 4 && channels(1) {
            &[2, 3]
        } else if rank == 4 && channels(3) {
            &[1, 2]
        } else {
            &[]
        };
        let mut suggested = Vec::with_capacity(rank);
        let mut fills = Vec::with_capacity(rank);
        for (k, d) in declared.iter().enumerate() {
            let symbol = match d {
                DeclaredDim::Fixed(v) => {
                    suggested.push(*v);
                    fills.push(None);
                    continue;
                }
                DeclaredDim::Named(n) => Some(n.as_str()),
                DeclaredDim::Unknown => None,
            };
            let fresh = || {
                let batch_like = symbol.is_some_and(|n| {
                    let n = n.to_ascii_lowercase();
                    n.contains("batch") || n == "n" || n == "b"
                });
                if (k == 0 && rank >= 2) || batch_like {
                    (1, Fill::Batch)
                } else if spatial.contains(&k) {
                    (IMAGE_SIZE_PLACEHOLDER, Fill::ImageSize)
                } else {
                    (1, Fill::Placeholder)
                }
            };
            let (value, fill) = match symbol {
                Some(n) => *named.entry(n.to_string()).or_insert_with(fresh),
                None => fresh(),
            };
            suggested.push(value);
            fills.push(Some(fill));
        }
        InputShapeHint {
            name: name.to_string(),
            declared: declared.to_vec(),
            suggested,
            fills,
        }
    }

    /// `--input-shape NAME=1,3,640,640`, ready to paste.
    pub fn flag(&self) -> String {
        let dims: Vec<String> = self.suggested.iter().map(u32::to_string).collect();
        format!("--input-shape {}={}", self.name, dims.join(","))
    }

    /// What the filled-in values stand for, e.g. "dimension 0 = 1 is the batch size;
    /// dimensions 2, 3 = 640 are placeholders for the image height and width: use your
    /// images' size".
    pub fn explanation(&self) -> String {
        let positions = |fill: Fill| -> Vec<String> {
            (0..self.fills.len())
                .filter(|&k| self.fills[k] == Some(fill))
                .map(|k| k.to_string())
                .collect()
        };
        let listed = |ks: &[String]| {
            if ks.len() == 1 {
                format!("dimension {}", ks[0])
            } else {
                format!("dimensions {}", ks.join(", "))
            }
        };
        let mut parts = Vec::new();
        let batch = positions(Fill::Batch);
        if !batch.is_empty() {
            parts.push(format!(
                "{} = 1: the batch size, one sample per run",
                listed(&batch)
            ));
        }
        let image = positions(Fill::ImageSize);
        if !image.is_empty() {
            parts.push(format!(
                "{} = {IMAGE_SIZE_PLACEHOLDER}: a placeholder for the image {}, to replace \
                 with the size of your images",
                listed(&image),
                if image.len() == 1 {
                    "height or width"
                } else {
                    "height and width"
                }
            ));
        }
        let other = positions(Fill::Placeholder);
        if !other.is_empty() {
            parts.push(format!(
                "{} = 1: a placeholder (the model does not say), to replace with the size of \
                 your data",
                listed(&other)
            ));
        }
        parts.join("; ")
    }
}

impl UnsupportedReport {
    pub fn new(format: &str) -> UnsupportedReport {
        UnsupportedReport {
            format: format.to_string(),
            operators: BTreeMap::new(),
            input_shapes: Vec::new(),
        }
    }

    pub fn add(&mut self, op_type: &str, node: &str, reason: impl Into<String>) {
        self.add_needing_inputs(op_type, node, reason, Vec::new());
    }

    /// Adds every node of `other` (nodes inside subgraphs, reported with the model's).
    pub fn merge(&mut self, other: UnsupportedReport) {
        for (op, nodes) in other.operators {
            self.operators.entry(op).or_default().extend(nodes);
        }
        for hint in other.input_shapes {
            if !self.input_shapes.iter().any(|h| h.name == hint.name) {
                self.input_shapes.push(hint);
            }
        }
    }

    /// Adds a node that would lower if the graph inputs `inputs` were known at compile
    /// time.
    pub fn add_needing_inputs(
        &mut self,
        op_type: &str,
        node: &str,
        reason: impl Into<String>,
        inputs: Vec<String>,
    ) {
        self.operators
            .entry(op_type.to_string())
            .or_default()
            .push(UnsupportedNode {
                node: node.to_string(),
                reason: reason.into(),
                compile_time_inputs: inputs,
                needs_input_shape: None,
            });
    }

    /// Adds a node that would lower if the dimensions of the graph inputs `inputs` (those
    /// its inputs derive from) were fixed with `--input-shape`.
    pub fn add_needing_input_shape(
        &mut self,
        op_type: &str,
        node: &str,
        reason: impl Into<String>,
        inputs: Vec<String>,
    ) {
        self.operators
            .entry(op_type.to_string())
            .or_default()
            .push(UnsupportedNode {
                node: node.to_string(),
                reason: reason.into(),
                compile_time_inputs: Vec::new(),
                needs_input_shape: Some(inputs),
            });
    }

    /// Whether some node failed for want of input dimensions.
    pub fn needs_input_shapes(&self) -> bool {
        self.operators
            .values()
            .flatten()
            .any(|n| n.needs_input_shape.is_some())
    }

    /// Whether every listed node failed only for want of input dimensions (so that
    /// `--input-shape` is all the model needs, as far as nnc can tell yet).
    pub fn only_needs_input_shapes(&self) -> bool {
        !self.is_empty()
            && self
                .operators
                .values()
                .flatten()
                .all(|n| n.needs_input_shape.is_some())
    }

    /// The graph inputs the nodes needing input dimensions derive from (sorted,
    /// deduplicated).
    pub fn input_shape_inputs(&self) -> Vec<String> {
        let set: std::collections::BTreeSet<&str> = self
            .operators
            .values()
            .flatten()
            .filter_map(|n| n.needs_input_shape.as_ref())
            .flatten()
            .map(String::as_str)
            .collect();
        set.into_iter().map(str::to_string).collect()
    }

    /// Every graph input some node needs at compile time (sorted, deduplicated).
    pub fn compile_time_inputs(&self) -> Vec<String> {
        let set: std::collections::BTreeSet<&str> = self
            .operators
            .values()
            .flatten()
            .flat_map(|n| n.compile_time_inputs.iter().map(String::as_str))
            .collect();
        set.into_iter().map(str::to_string).collect()
    }

    /// The graph inputs to bind when binding them is all the model needs, i.e. every
    /// listed node failed only for want of compile-time values of graph inputs.
    pub fn only_needs_bound_inputs(&self) -> Option<Vec<String>> {
        let all = self
            .operators
            .values()
            .flatten()
            .all(|n| !n.compile_time_inputs.is_empty());
        (all && !self.is_empty()).then(|| self.compile_time_inputs())
    }

    pub fn is_empty(&self) -> bool {
        self.operators.is_empty()
    }

    pub fn node_count(&self) -> usize {
        self.operators.values().map(Vec::len).sum()
    }
}

impl fmt::Display for UnsupportedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let types = self.operators.len();
        let only_shapes = !self.input_shapes.is_empty()
            && self
                .operators
                .values()
                .flatten()
                .all(|n| n.needs_input_shape.is_some());
        if only_shapes {
            // Nothing is missing from nnc: the user's fix is the first thing to read.
            write!(
                f,
                "the {} model needs its input dimensions at compile time ({} {} for them):",
                self.format,
                self.node_count(),
                if self.node_count() == 1 {
                    "node waits"
                } else {
                    "nodes wait"
                }
            )?;
        } else {
            write!(
                f,
                "the {} model uses {} operator type{} ({} node{}) that nnc cannot lower:",
                self.format,
                types,
                if types == 1 { "" } else { "s" },
                self.node_count(),
                if self.node_count() == 1 { "" } else { "s" }
            )?;
        }
        for (op, nodes) in &self.operators {
            write!(f, "\n  - {op} x{}:", nodes.len())?;
            // Group nodes by reason so a model with 40 identical failures stays readable.
            let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for n in nodes {
                by_reason
                    .entry(n.reason.as_str())
                    .or_default()
                    .push(n.node.as_str());
            }
            for (reason, names) in by_reason {
                const SHOWN: usize = 8;
                let mut list = names
                    .iter()
                    .take(SHOWN)
                    .map(|n| format!("'{n}'"))
                    .collect::<Vec<_>>()
                    .join(", ");
                if names.len() > SHOWN {
                    list.push_str(&format!(" and {} more", names.len() - SHOWN));
                }
                write!(f, "\n      {reason}: {list}")?;
            }
        }
        if self.needs_input_shapes() {
            if self.input_shapes.is_empty() {
                write!(
                    f,
                    "\n  every graph input's dimensions are fixed: the unknown dimensions \
                     arise inside the model (from values computed at run time), which \
                     --input-shape cannot fix"
                )?;
            }
            for hint in &self.input_shapes {
                let unknown: Vec<String> = (0..hint.declared.len())
                    .filter(|&k| !hint.declared[k].is_known())
                    .map(|k| k.to_string())
                    .collect();
                write!(
                    f,
                    "\n  input '{}' {} has unknown {} {}: fix {} at compile time, e.g. with\n      \
                     {}\n    ({})",
                    hint.name,
                    dims_text(&hint.declared),
                    if unknown.len() == 1 {
                        "dimension"
                    } else {
                        "dimensions"
                    },
                    unknown.join(", "),
                    if unknown.len() == 1 { "it" } else { "them" },
                    hint.flag(),
                    hint.explanation()
                )?;
            }
        }
        let inputs = self.compile_time_inputs();
        if !inputs.is_empty() {
            let list: Vec<String> = inputs.iter().map(|i| format!("'{i}'")).collect();
            write!(
                f,
                "\n  {} {} {} needed at compile time; bind {} to fixed values with \
                 --bind-input NAME=FILE (.npy or .pb)",
                if inputs.len() == 1 {
                    "graph input"
                } else {
                    "graph inputs"
                },
                list.join(", "),
                if inputs.len() == 1 { "is" } else { "are" },
                if inputs.len() == 1 { "it" } else { "them" },
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_fills_batch_image_size_and_shared_names() {
        let named = |n: &str| DeclaredDim::Named(n.into());
        let mut seen = BTreeMap::new();
        let x = InputShapeHint::suggest(
            "x",
            &[
                named("batch"),
                DeclaredDim::Fixed(3),
                DeclaredDim::Unknown,
                named("w"),
            ],
            &mut seen,
        );
        assert_eq!(x.flag(), "--input-shape x=1,3,640,640");
        assert_eq!(
            x.fills,
            vec![
                Some(Fill::Batch),
                None,
                Some(Fill::ImageSize),
                Some(Fill::ImageSize)
            ]
        );
        // A second input sharing `w` gets the same value; its other dimension is a
        // placeholder and said to be one.
        let mask = InputShapeHint::suggest(
            "mask",
            &[DeclaredDim::Fixed(1), named("w"), DeclaredDim::Unknown],
            &mut seen,
        );
        assert_eq!(mask.suggested, vec![1, 640, 1]);
        assert!(
            mask.explanation()
                .contains("dimension 2 = 1: a placeholder (the model does not say)"),
            "{}",
            mask.explanation()
        );

        let mut report = UnsupportedReport::new("ONNX");
        report.add_needing_input_shape("Resize", "r", "needs dims", vec!["x".into()]);
        report.input_shapes = vec![x];
        assert!(report.only_needs_input_shapes());
        let text = report.to_string();
        assert!(
            text.contains("input 'x' [batch, 3, ?, w] has unknown dimensions 0, 2, 3"),
            "{text}"
        );
        assert!(
            text.contains("\n      --input-shape x=1,3,640,640\n"),
            "{text}"
        );
        report.add("Det", "d", "no lowering for Det");
        assert!(!report.only_needs_input_shapes());
    }
}
