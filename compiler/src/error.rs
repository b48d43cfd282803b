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
}

impl UnsupportedReport {
    pub fn new(format: &str) -> UnsupportedReport {
        UnsupportedReport {
            format: format.to_string(),
            operators: BTreeMap::new(),
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
            });
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
        write!(
            f,
            "the {} model uses {} operator type{} ({} node{}) that nnc cannot lower:",
            self.format,
            types,
            if types == 1 { "" } else { "s" },
            self.node_count(),
            if self.node_count() == 1 { "" } else { "s" }
        )?;
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
